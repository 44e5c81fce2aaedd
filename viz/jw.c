/* jw.c - JSON strings and numbers for the viewers (see jw.h). */
#include "jw.h"

#include <inttypes.h>
#include <math.h>

/* the length of the UTF-8 sequence at s (1..4), or 0 when it is not one */
static int utf8_len(const unsigned char *s) {
  unsigned c = s[0];
  int n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
  if (n == 0 || (n == 2 && c < 0xc2) || (n == 4 && c > 0xf4)) return 0;
  for (int k = 1; k < n; k++)
    if ((s[k] & 0xc0) != 0x80) return 0;
  if (n == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0))) return 0; /* overlong, surrogates */
  if (n == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))) return 0;
  return n;
}

void fpi_jw_str(FILE *f, const char *s) {
  if (!s) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    unsigned c = *p;
    if (c == '"' || c == '\\') {
      fputc('\\', f);
      fputc((int)c, f);
      p++;
    } else if (c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f) {
      fprintf(f, "\\u%04x", c);
      p++;
    } else if (c < 0x80) {
      fputc((int)c, f);
      p++;
    } else {
      int n = utf8_len(p);
      if (n == 0) {
        fputs("\\ufffd", f);
        p++;
      } else {
        fwrite(p, 1, (size_t)n, f);
        p += n;
      }
    }
  }
  fputc('"', f);
}

void fpi_jw_us(FILE *f, double us) {
  if (!isfinite(us)) us = 0;
  if (fabs(us) < 0.0005) us = 0;
  fprintf(f, "%.3f", us);
}

void fpi_jw_i64(FILE *f, int64_t v) { fprintf(f, "%" PRId64, v); }

void fpi_html_text(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; p && *p;) {
    int n = *p < 0x80 ? 1 : utf8_len(p);
    switch (*p) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&#39;", f); break;
      default:
        if (n == 0)
          fputs("\xef\xbf\xbd", f); /* not UTF-8: U+FFFD */
        else
          fwrite(p, 1, (size_t)n, f);
    }
    p += n ? n : 1;
  }
}
