/* utf8.h - strict UTF-8 validation (RFC 3629), header-only so every reader
 * of text input (the JSON front end, the .fpir parser, the plan loader, the
 * safetensors header) rejects the same bytes: overlong forms (C0 AF),
 * UTF-16 surrogates (ED A0 80), code points past U+10FFFF, stray or missing
 * continuation bytes. Other JSON readers refuse these, so a name holding
 * them must never reach plan.json. */
#ifndef FP_UTF8_H
#define FP_UTF8_H

#include <stddef.h>

/* The offset of the first byte that does not start a valid UTF-8 sequence,
 * or n when all n bytes are valid. */
static inline size_t fpi_utf8_invalid(const char *text, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t k;          /* continuation bytes */
    unsigned lo = 0x80, hi = 0xBF; /* the range of the first continuation byte */
    if (c >= 0xC2 && c <= 0xDF) k = 1;
    else if (c == 0xE0) k = 2, lo = 0xA0;          /* no overlong 3-byte forms */
    else if (c == 0xED) k = 2, hi = 0x9F;          /* no surrogates */
    else if (c >= 0xE1 && c <= 0xEF) k = 2;
    else if (c == 0xF0) k = 3, lo = 0x90;          /* no overlong 4-byte forms */
    else if (c >= 0xF1 && c <= 0xF3) k = 3;
    else if (c == 0xF4) k = 3, hi = 0x8F;          /* nothing past U+10FFFF */
    else return i;                                 /* 80-C1, F5-FF never start one */
    if (n - i <= k) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t j = 2; j <= k; j++)
      if (s[i + j] < 0x80 || s[i + j] > 0xBF) return i;
    i += k + 1;
  }
  return n;
}

#endif
