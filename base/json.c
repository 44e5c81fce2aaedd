/* json.c - strict JSON input with located errors (see json.h).
 *
 * Three scanners over the source text live here, all hand-written because
 * json-c objects carry no positions:
 *   - the parser: a strict RFC 8259 scanner that builds the json-c objects
 *     as it checks the text, in one pass. json-c's own parser is not used:
 *     even "strict" it lets through NaN/Infinity, single-quoted strings,
 *     "1.", raw control characters in strings and silently clamps integers
 *     beyond 64 bits, and keeps the last of duplicate keys. The scanner
 *     rejects all of these, located at the offending byte, with the JSON
 *     pointer of the value (or object) concerned;
 *   - a tolerant walker that names the JSON pointer of the value at a byte
 *     offset (for an invalid UTF-8 byte);
 *   - fp_json_locate: follows an RFC 6901 pointer through the text to the first
 *     byte of the value it names. It never reads past the text and never
 *     fails: on anything unexpected it answers the nearest ancestor found. */
#include "json.h"

#include "utf8.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FP_JSON_MAX_DEPTH 64

/* ---- small helpers --------------------------------------------------------- */
static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

static size_t skip_ws(const char *t, size_t n, size_t i) {
  while (i < n && is_ws(t[i])) i++;
  return i;
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* 4 hex digits at t[i..i+4) or -1 */
static long hex4(const char *t, size_t n, size_t i) {
  if (i + 4 > n) return -1;
  long v = 0;
  for (size_t k = 0; k < 4; k++) {
    int h = hexval(t[i + k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

static size_t put_utf8(char *o, unsigned long cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Decode the JSON string whose opening quote is at t[q] (tolerantly: garbage
 * never overruns). Writes at most (end - q) bytes to out (a buffer of at least
 * that size), sets *olen, returns the offset just past the closing quote (or n
 * when unterminated). Lone surrogates decode to U+FFFD, as json-c does. */
size_t fp_json_decode_string(const char *t, size_t n, size_t q, char *out, size_t *olen) {
  size_t i = q + 1, o = 0;
  while (i < n && t[i] != '"') {
    if (t[i] != '\\') {
      if (out) out[o] = t[i];
      o++;
      i++;
      continue;
    }
    if (i + 1 >= n) {
      i = n;
      break;
    }
    char e = t[i + 1];
    char ch = 0;
    switch (e) {
      case '"': ch = '"'; break;
      case '\\': ch = '\\'; break;
      case '/': ch = '/'; break;
      case 'b': ch = '\b'; break;
      case 'f': ch = '\f'; break;
      case 'n': ch = '\n'; break;
      case 'r': ch = '\r'; break;
      case 't': ch = '\t'; break;
      case 'u': {
        long cp = hex4(t, n, i + 2);
        if (cp < 0) { /* malformed: take the characters literally */
          if (out) out[o] = e;
          o++;
          i += 2;
          continue;
        }
        size_t used = 6;
        unsigned long u = (unsigned long)cp;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          long lo = (i + 7 < n && t[i + 6] == '\\' && t[i + 7] == 'u') ? hex4(t, n, i + 8) : -1;
          if (lo >= 0xDC00 && lo <= 0xDFFF) {
            u = 0x10000 + (((unsigned long)cp - 0xD800) << 10) + ((unsigned long)lo - 0xDC00);
            used = 12;
          } else {
            u = 0xFFFD;
          }
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          u = 0xFFFD;
        }
        char tmp[4];
        size_t k = put_utf8(tmp, u);
        if (out) memcpy(out + o, tmp, k);
        o += k;
        i += used;
        continue;
      }
      default: /* invalid escape: keep the character */
        ch = e;
        break;
    }
    if (out) out[o] = ch;
    o++;
    i += 2;
  }
  *olen = o;
  return i < n ? i + 1 : n;
}

/* Offset just past the string starting at t[q] (tolerant). */
static size_t skip_string(const char *t, size_t n, size_t q) {
  size_t i = q + 1;
  while (i < n && t[i] != '"') i += (t[i] == '\\') ? 2 : 1;
  return i < n ? i + 1 : n;
}

/* Offset just past the value starting at t[i] (tolerant; may return i when
 * there is no value there). */
static size_t skip_value(const char *t, size_t n, size_t i) {
  if (i >= n) return n;
  if (t[i] == '"' || t[i] == '\'') {
    if (t[i] == '"') return skip_string(t, n, i);
    size_t j = i + 1;
    while (j < n && t[j] != '\'') j += (t[j] == '\\') ? 2 : 1;
    return j < n ? j + 1 : n;
  }
  if (t[i] == '{' || t[i] == '[') {
    size_t depth = 0;
    while (i < n) {
      char ch = t[i];
      if (ch == '"') {
        i = skip_string(t, n, i);
        continue;
      }
      if (ch == '{' || ch == '[') depth++;
      if (ch == '}' || ch == ']') {
        depth--;
        if (depth == 0) return i + 1;
      }
      i++;
    }
    return n;
  }
  while (i < n && !is_ws(t[i]) && t[i] != ',' && t[i] != ']' && t[i] != '}' && t[i] != ':') i++;
  return i;
}

/* ---- pointers -------------------------------------------------------------- */
const char *fp_ptr_key(fp_arena *a, const char *ptr, const char *key) {
  size_t pl = strlen(ptr), extra = 0;
  for (const char *k = key; *k; k++) extra += (*k == '~' || *k == '/') ? 2 : 1;
  char *s = fp_alloc(a, pl + extra + 2);
  memcpy(s, ptr, pl);
  size_t o = pl;
  s[o++] = '/';
  for (const char *k = key; *k; k++) {
    if (*k == '~') {
      s[o++] = '~';
      s[o++] = '0';
    } else if (*k == '/') {
      s[o++] = '~';
      s[o++] = '1';
    } else {
      s[o++] = *k;
    }
  }
  s[o] = 0;
  return s;
}

const char *fp_ptr_idx(fp_arena *a, const char *ptr, int64_t i) {
  return fp_strjoin_i64(a, ptr, "/", i);
}

/* escaped pointer segment for a decoded key, appended to a malloc'd buffer */
static void sb_put_segment(fp_sbuf *b, const char *key, size_t n) {
  fp_sb_putn(b, "/", 1);
  for (size_t i = 0; i < n; i++) {
    if (key[i] == '~')
      fp_sb_putn(b, "~0", 2);
    else if (key[i] == '/')
      fp_sb_putn(b, "~1", 2);
    else if (key[i] == 0)
      fp_sb_putn(b, "\\u0000", 6);
    else
      fp_sb_putn(b, key + i, 1);
  }
}

/* path components of a scan: an object member (its key's opening quote, or
 * (size_t)-1 while in key position) or an array index */
typedef struct pseg {
  bool is_obj;
  size_t key;   /* offset of the key's quote; (size_t)-1: none yet */
  int64_t idx;
} pseg;

static char *path_string(fp_arena *a, const char *t, size_t n, const pseg *segs, int nseg,
                         bool include_last_key) {
  fp_sbuf b = {0};
  fp_sb_putn(&b, "", 0);
  for (int k = 0; k < nseg; k++) {
    if (segs[k].is_obj) {
      if (segs[k].key == (size_t)-1) break;
      if (k == nseg - 1 && !include_last_key) break;
      size_t end = skip_string(t, n, segs[k].key), dl;
      char *dec = malloc(end - segs[k].key + 1);
      FP_ASSERT(dec);
      fp_json_decode_string(t, n, segs[k].key, dec, &dl);
      sb_put_segment(&b, dec, dl);
      free(dec);
    } else {
      char num[32];
      snprintf(num, sizeof num, "/%" PRId64, segs[k].idx);
      fp_sb_putn(&b, num, strlen(num));
    }
  }
  char *s = fp_strdup(a, b.p);
  free(b.p);
  return s;
}

/* The pointer of the value being parsed at byte `off` of a (possibly invalid)
 * text: a tolerant walk of the prefix. */
static char *path_at(fp_arena *a, const char *t, size_t n, size_t off) {
  pseg segs[FP_JSON_MAX_DEPTH + 8];
  int nseg = 0, depth = 0;
  bool in_value = true; /* inside an object: after ':' until ',' */
  size_t i = 0;
  if (off > n) off = n;
  while (i < off) {
    char ch = t[i];
    if (ch == '"' || ch == '\'') {
      size_t end = skip_value(t, n, i);
      if (depth > 0 && depth <= nseg && segs[depth - 1].is_obj && !in_value && ch == '"') {
        if (end > off) break; /* the error is inside this key: the object */
        segs[depth - 1].key = i;
      }
      i = end;
      continue;
    }
    if (ch == '{' || ch == '[') {
      if (nseg < FP_JSON_MAX_DEPTH + 8 && depth == nseg) {
        segs[nseg].is_obj = ch == '{';
        segs[nseg].key = (size_t)-1;
        segs[nseg].idx = 0;
        nseg++;
      }
      depth++;
      in_value = ch == '[';
    } else if (ch == '}' || ch == ']') {
      if (depth > 0) depth--;
      if (nseg > depth) nseg = depth;
      in_value = true;
    } else if (ch == ':') {
      in_value = true;
    } else if (ch == ',') {
      if (depth > 0 && depth <= nseg) {
        if (segs[depth - 1].is_obj) {
          segs[depth - 1].key = (size_t)-1;
          in_value = false;
        } else {
          segs[depth - 1].idx++;
        }
      }
    }
    i++;
  }
  if (nseg > depth) nseg = depth;
  /* in key position of an object: the object itself */
  return path_string(a, t, n, segs, nseg, in_value);
}

/* ---- fp_json_locate ---------------------------------------------------------- */
size_t fp_json_locate(const fp_src *s, const char *ptr, bool *exact) {
  bool ex_dummy;
  if (!exact) exact = &ex_dummy;
  *exact = false;
  if (!s || !s->text) return 0;
  const char *t = s->text;
  size_t n = s->len;
  size_t cur = skip_ws(t, n, 0);
  if (cur > n) cur = n;
  if (!ptr || ptr[0] == 0) {
    *exact = ptr != NULL && cur < n;
    return cur;
  }
  if (ptr[0] != '/') return cur;
  const char *p = ptr;
  char *seg = malloc(strlen(ptr) + 1);
  FP_ASSERT(seg);
  char *kbuf = NULL;
  size_t kcap = 0;
  bool found = cur < n;
  while (found && *p == '/') {
    /* decode the next segment */
    p++;
    size_t sl = 0;
    while (*p && *p != '/') {
      if (p[0] == '~' && p[1] == '0') {
        seg[sl++] = '~';
        p += 2;
      } else if (p[0] == '~' && p[1] == '1') {
        seg[sl++] = '/';
        p += 2;
      } else {
        seg[sl++] = *p++;
      }
    }
    found = false;
    size_t i = cur;
    if (t[i] == '{') {
      i++;
      for (;;) {
        i = skip_ws(t, n, i);
        if (i >= n || t[i] != '"') break;
        size_t end = skip_string(t, n, i), kl;
        if (end - i + 1 > kcap) {
          kcap = end - i + 1;
          free(kbuf);
          kbuf = malloc(kcap);
          FP_ASSERT(kbuf);
        }
        fp_json_decode_string(t, n, i, kbuf, &kl);
        i = skip_ws(t, n, end);
        if (i >= n || t[i] != ':') break;
        i = skip_ws(t, n, i + 1);
        if (i >= n) break;
        if (kl == sl && memcmp(kbuf, seg, sl) == 0) {
          /* json-c keeps the last of duplicate keys, but duplicates are
           * rejected before anything is located; the first is fine */
          cur = i;
          found = true;
          break;
        }
        size_t nx = skip_value(t, n, i);
        if (nx == i) break;
        i = skip_ws(t, n, nx);
        if (i >= n || t[i] != ',') break;
        i++;
      }
    } else if (t[i] == '[') {
      /* RFC 6901 array index: "0" or [1-9][0-9]*; anything else misses */
      int64_t want = -1;
      bool ok = sl > 0 && (sl == 1 || seg[0] != '0');
      for (size_t k = 0; ok && k < sl; k++) {
        if (seg[k] < '0' || seg[k] > '9') ok = false;
        else if (want > (INT64_MAX - 9) / 10) ok = false;
        else want = (want < 0 ? 0 : want) * 10 + (seg[k] - '0');
      }
      if (ok) {
        i++;
        for (int64_t idx = 0;; idx++) {
          i = skip_ws(t, n, i);
          if (i >= n || t[i] == ']') break;
          if (idx == want) {
            cur = i;
            found = true;
            break;
          }
          size_t nx = skip_value(t, n, i);
          if (nx == i) break;
          i = skip_ws(t, n, nx);
          if (i >= n || t[i] != ',') break;
          i++;
        }
      }
    }
  }
  free(seg);
  free(kbuf);
  *exact = found && *p == 0;
  return cur;
}

/* ---- the strict validator ----------------------------------------------------- */
typedef struct kent {
  size_t key; /* decoded, at vscan.ks + key (NUL-terminated) */
  size_t len, off;
  uint64_t h;
} kent;

typedef struct vscan {
  fp_arena *a;
  const char *t;
  size_t n, i;
  pseg segs[FP_JSON_MAX_DEPTH + 8];
  int nseg;
  bool failed;
  size_t err_off;
  char *err_ptr;
  char err_msg[512];
  /* the decoded keys of the objects open now, a stack (an object pops its
   * own at its end), and the decoded text of the last string value: no
   * allocation per string, none left between the objects built */
  char *ks, *sv;
  size_t klen, kcap, svcap;
} vscan;

/* room for n more bytes at the top of the key stack */
static void ks_reserve(vscan *v, size_t n) {
  if (v->klen + n <= v->kcap) return;
  size_t nc = v->kcap ? v->kcap : 4096;
  while (nc < v->klen + n) nc *= 2;
  v->ks = realloc(v->ks, nc);
  FP_ASSERT(v->ks);
  v->kcap = nc;
}

static bool vfail(vscan *v, size_t off, bool include_last_key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool vfail(vscan *v, size_t off, bool include_last_key, const char *fmt, ...) {
  if (v->failed) return false;
  v->failed = true;
  v->err_off = off;
  v->err_ptr = path_string(v->a, v->t, v->n, v->segs, v->nseg, include_last_key);
  if (off >= v->n) {
    snprintf(v->err_msg, sizeof v->err_msg, "invalid JSON: unexpected end of data (the file ends early)");
    return false;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->err_msg, sizeof v->err_msg, fmt, ap);
  va_end(ap);
  return false;
}

/* a short printable excerpt of t[i..j) for messages */
static const char *excerpt(vscan *v, size_t i, size_t j) {
  if (j > v->n) j = v->n;
  if (j - i > 40) return fp_sprintf(v->a, "%.*s...", 37, v->t + i);
  return fp_strndup(v->a, v->t + i, j - i);
}

/* Each scanner builds the value it accepted in *out (json-c objects; NULL
 * when it fails, with nothing leaked): one pass both checks the text and
 * builds it. */
static bool v_value(vscan *v, int depth, json_object **out);

bool fp_json_check_string(const char *t, size_t n, size_t q, size_t *end, size_t *at, char *why, size_t cap) {
  size_t i = q + 1;
#define BAD(off, ...) return (*at = (off), snprintf(why, cap, __VA_ARGS__), false)
  while (i < n && t[i] != '"') {
    unsigned char ch = (unsigned char)t[i];
    if (ch < 0x20) BAD(i, "invalid JSON: unescaped control character 0x%02x in string", ch);
    if (ch != '\\') {
      i++;
      continue;
    }
    char e = i + 1 < n ? t[i + 1] : 0;
    if (strchr("\"\\/bfnrt", e) && e) {
      i += 2;
      continue;
    }
    if (e != 'u') BAD(i, "invalid JSON: invalid escape sequence in string");
    long cp = hex4(t, n, i + 2);
    if (cp < 0) BAD(i, "invalid JSON: \\u must be followed by 4 hex digits");
    if (cp == 0) BAD(i, "\\u0000 (NUL) is not allowed in strings");
    if (cp >= 0xDC00 && cp <= 0xDFFF) BAD(i, "invalid JSON: unpaired UTF-16 surrogate \\u%04lx", cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      long lo = (i + 7 < n && t[i + 6] == '\\' && t[i + 7] == 'u') ? hex4(t, n, i + 8) : -1;
      if (lo < 0xDC00 || lo > 0xDFFF) BAD(i, "invalid JSON: unpaired UTF-16 surrogate \\u%04lx", cp);
      i += 12;
      continue;
    }
    i += 6;
  }
  if (i >= n) BAD(q, "invalid JSON: unterminated string");
#undef BAD
  *end = i + 1;
  return true;
}

/* the string at v->i (which is '"'): a key (kpos) is decoded onto v->ks at
 * *kpos (*dlen bytes, then a NUL); a value is built in *out */
static bool v_string(vscan *v, size_t *kpos, size_t *dlen, json_object **out) {
  bool is_key = kpos != NULL;
  const char *t = v->t;
  size_t n = v->n, q = v->i, end, at;
  char why[96];
  if (!fp_json_check_string(t, n, q, &end, &at, why, sizeof why)) return vfail(v, at, !is_key, "%s", why);
  size_t i = end - 1; /* the closing quote */
  /* the decoded text is at most the i - q - 1 bytes between the quotes */
  if (is_key) {
    ks_reserve(v, i + 1 - q);
    *kpos = v->klen;
    fp_json_decode_string(t, n, q, v->ks + v->klen, dlen);
    v->ks[v->klen + *dlen] = 0;
    v->klen += *dlen + 1;
  } else {
    if (v->svcap < i + 1 - q) {
      free(v->sv);
      v->svcap = 2 * (i + 1 - q) > 256 ? 2 * (i + 1 - q) : 256;
      v->sv = malloc(v->svcap);
      FP_ASSERT(v->sv);
    }
    size_t dl;
    fp_json_decode_string(t, n, q, v->sv, &dl);
    *out = json_object_new_string_len(v->sv, (int)dl);
    FP_ASSERT(*out);
  }
  v->i = i + 1;
  return true;
}

static bool v_number(vscan *v, json_object **out) {
  const char *t = v->t;
  size_t n = v->n, s = v->i, i = s;
  bool integral = true;
  if (i < n && t[i] == '-') i++;
  if (i < n && t[i] == '0') {
    i++;
    if (i < n && t[i] >= '0' && t[i] <= '9')
      return vfail(v, s, true, "invalid JSON: number with a leading zero");
  } else if (i < n && t[i] >= '1' && t[i] <= '9') {
    while (i < n && t[i] >= '0' && t[i] <= '9') i++;
  } else {
    return vfail(v, s, true, "invalid JSON: unexpected '%s'", excerpt(v, s, skip_value(t, n, s) > s ? skip_value(t, n, s) : s + 1));
  }
  if (i < n && t[i] == '.') {
    integral = false;
    i++;
    if (i >= n || t[i] < '0' || t[i] > '9')
      return vfail(v, s, true, "invalid JSON: a digit must follow the decimal point in '%s'",
                   excerpt(v, s, skip_value(t, n, s)));
    while (i < n && t[i] >= '0' && t[i] <= '9') i++;
  }
  if (i < n && (t[i] == 'e' || t[i] == 'E')) {
    integral = false;
    i++;
    if (i < n && (t[i] == '+' || t[i] == '-')) i++;
    if (i >= n || t[i] < '0' || t[i] > '9')
      return vfail(v, s, true, "invalid JSON: malformed exponent in '%s'", excerpt(v, s, skip_value(t, n, s)));
    while (i < n && t[i] >= '0' && t[i] <= '9') i++;
  }
  char buf[64];
  char *tok = i - s < sizeof buf ? buf : fp_alloc(v->a, i - s + 1);
  memcpy(tok, t + s, i - s);
  tok[i - s] = 0;
  if (integral) {
    errno = 0;
    int64_t sv = 0;
    uint64_t uv = 0;
    if (tok[0] == '-') {
      sv = strtoll(tok, NULL, 10);
    } else {
      uv = strtoull(tok, NULL, 10);
    }
    if (errno == ERANGE)
      return vfail(v, s, true, "integer %s is outside the 64-bit range", excerpt(v, s, i));
    /* as json-c's parser builds them: int64, uint64 above INT64_MAX */
    *out = tok[0] == '-' ? json_object_new_int64(sv)
                    : uv > (uint64_t)INT64_MAX ? json_object_new_uint64(uv)
                                                : json_object_new_int64((int64_t)uv);
  } else {
    double d = strtod(tok, NULL);
    if (!isfinite(d)) return vfail(v, s, true, "number %s is out of range", excerpt(v, s, i));
    *out = json_object_new_double_s(d, tok); /* the text kept, as json-c's parser does */
  }
  FP_ASSERT(*out);
  v->i = i;
  return true;
}

static bool v_object(vscan *v, int depth, json_object **out) {
  const char *t = v->t;
  size_t n = v->n;
  pseg *sg = &v->segs[v->nseg++];
  sg->is_obj = true;
  sg->key = (size_t)-1;
  /* the keys, and an open hash of indexes into them (+1; 0 = empty): on the
   * C stack for an object of up to 8 members, else on the heap */
  kent kst[8];
  size_t tst[16];
  kent *keys = kst;
  size_t nkeys = 0, kcap = 8;
  size_t *tab = NULL, tcap = 0;
  size_t kbase = v->klen; /* this object's keys start here on v->ks */
  bool ok = false;
  json_object *obj = json_object_new_object();
  FP_ASSERT(obj);
  v->i++;
  v->i = skip_ws(t, n, v->i);
  if (v->i < n && t[v->i] == '}') {
    v->i++;
    ok = true;
    goto done;
  }
  for (;;) {
    v->i = skip_ws(t, n, v->i);
    if (v->i >= n || t[v->i] != '"') {
      vfail(v, v->i, false, "invalid JSON: expected a member name in double quotes");
      goto done;
    }
    size_t koff = v->i;
    size_t kp = 0, dl = 0;
    if (!v_string(v, &kp, &dl, NULL)) goto done;
    if (nkeys == kcap) {
      kcap *= 2;
      kent *nk = keys == kst ? malloc(kcap * sizeof *keys) : realloc(keys, kcap * sizeof *keys);
      FP_ASSERT(nk);
      if (keys == kst) memcpy(nk, kst, sizeof kst);
      keys = nk;
    }
    keys[nkeys] = (kent){kp, dl, koff, fp_fnv1a(FP_FNV_INIT, v->ks + kp, dl)};
    nkeys++;
    if (2 * nkeys > tcap) {
      size_t nc = tcap ? 2 * tcap : 16;
      if (tab != tst) free(tab);
      tab = nc == 16 ? tst : malloc(nc * sizeof *tab);
      FP_ASSERT(tab);
      memset(tab, 0, nc * sizeof *tab);
      tcap = nc;
      for (size_t k = 0; k + 1 < nkeys; k++) {
        size_t h = (size_t)keys[k].h & (tcap - 1);
        while (tab[h]) h = (h + 1) & (tcap - 1);
        tab[h] = k + 1;
      }
    }
    {
      kent *ke = &keys[nkeys - 1];
      size_t h = (size_t)ke->h & (tcap - 1);
      while (tab[h]) {
        kent *o = &keys[tab[h] - 1];
        if (o->h == ke->h && o->len == ke->len && memcmp(v->ks + o->key, v->ks + ke->key, ke->len) == 0) {
          fp_src tmp = {"", v->t, v->n};
          int line, col;
          fp_src_linecol(&tmp, o->off, &line, &col);
          fp_sbuf kb = {0};
          sb_put_segment(&kb, v->ks + ke->key, ke->len);
          vfail(v, ke->off, false, "duplicate member '%s' (first at line %d, column %d)",
                fp_strdup(v->a, kb.p + 1), line, col);
          free(kb.p);
          goto done;
        }
        h = (h + 1) & (tcap - 1);
      }
      tab[h] = nkeys;
    }
    v->i = skip_ws(t, n, v->i);
    if (v->i >= n || t[v->i] != ':') {
      vfail(v, v->i, false, "invalid JSON: expected ':' after member name");
      goto done;
    }
    v->i = skip_ws(t, n, v->i + 1);
    sg->key = koff;
    json_object *val = NULL;
    if (!v_value(v, depth + 1, &val)) goto done;
    /* keys are unique (checked above): no lookup to replace one */
    FP_ASSERT(json_object_object_add_ex(obj, v->ks + keys[nkeys - 1].key, val, JSON_C_OBJECT_ADD_KEY_IS_NEW) == 0);
    v->i = skip_ws(t, n, v->i);
    if (v->i < n && t[v->i] == ',') {
      v->i++;
      sg->key = (size_t)-1;
      continue;
    }
    if (v->i < n && t[v->i] == '}') {
      v->i++;
      ok = true;
      goto done;
    }
    sg->key = (size_t)-1;
    vfail(v, v->i, false, "invalid JSON: expected ',' or '}' in object");
    goto done;
  }
done:
  v->klen = kbase;
  if (keys != kst) free(keys);
  if (tab != tst) free(tab);
  if (ok) v->nseg--;
  if (!ok) json_object_put(obj);
  *out = ok ? obj : NULL;
  return ok;
}

static bool v_array(vscan *v, int depth, json_object **out) {
  const char *t = v->t;
  size_t n = v->n;
  pseg *sg = &v->segs[v->nseg++];
  sg->is_obj = false;
  sg->idx = 0;
  /* 2 slots to start: most arrays are short (shapes), longer ones double
   * (json-c's default of 32 slots was 10 MiB of the 671B shape's peak) */
  json_object *arr = json_object_new_array_ext(2);
  FP_ASSERT(arr);
  *out = arr;
  v->i = skip_ws(t, n, v->i + 1);
  if (v->i < n && t[v->i] == ']') {
    v->i++;
    v->nseg--;
    return true;
  }
  for (;;) {
    v->i = skip_ws(t, n, v->i);
    json_object *val = NULL;
    if (!v_value(v, depth + 1, &val)) break;
    FP_ASSERT(json_object_array_add(arr, val) == 0);
    v->i = skip_ws(t, n, v->i);
    if (v->i < n && t[v->i] == ',') {
      v->i++;
      sg->idx++;
      continue;
    }
    if (v->i < n && t[v->i] == ']') {
      v->i++;
      v->nseg--;
      return true;
    }
    v->nseg--;
    vfail(v, v->i, true, "invalid JSON: expected ',' or ']' in array");
    break;
  }
  json_object_put(arr);
  *out = NULL;
  return false;
}

static bool v_value(vscan *v, int depth, json_object **out) {
  const char *t = v->t;
  size_t n = v->n;
  v->i = skip_ws(t, n, v->i);
  if (v->i >= n) return vfail(v, v->i, true, "invalid JSON: unexpected end of data");
  if (depth > FP_JSON_MAX_DEPTH || v->nseg >= FP_JSON_MAX_DEPTH + 4)
    return vfail(v, v->i, true, "invalid JSON: nesting deeper than %d", FP_JSON_MAX_DEPTH);
  char ch = t[v->i];
  if (ch == '{') return v_object(v, depth, out);
  if (ch == '[') return v_array(v, depth, out);
  if (ch == '"') return v_string(v, NULL, NULL, out);
  if (ch == '-' || (ch >= '0' && ch <= '9')) return v_number(v, out);
  static const char *const lits[] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++) {
    size_t l = strlen(lits[k]);
    if (n - v->i >= l && memcmp(t + v->i, lits[k], l) == 0) {
      size_t e = v->i + l;
      if (e >= n || is_ws(t[e]) || t[e] == ',' || t[e] == ']' || t[e] == '}') {
        v->i = e;
        *out = k < 2 ? json_object_new_boolean(k == 0) : NULL; /* null is NULL, as in json-c */
        return true;
      }
    }
  }
  size_t e = skip_value(t, n, v->i);
  if (e == v->i) e = v->i + 1;
  if (ch == '\'') return vfail(v, v->i, true, "invalid JSON: strings must use double quotes");
  return vfail(v, v->i, true, "invalid JSON: unexpected '%s'", excerpt(v, v->i, e));
}

/* ---- parse ------------------------------------------------------------------- */
json_object *fp_json_parse(fp_jctx *c) {
  const fp_src *s = c->src;
  size_t first = skip_ws(s->text, s->len, 0);
  if (first >= s->len) {
    fp_diag_at(c->d, s, s->len, "/: empty file: expected a JSON value");
    return NULL;
  }
  if (s->len > (size_t)INT32_MAX - 1) {
    fp_diag_at(c->d, s, 0, "/: file too large (more than 2 GiB)");
    return NULL;
  }
  /* UTF-8 first (json-c's check let overlong forms and surrogates through) */
  size_t bad = fp_utf8_invalid(s->text, s->len);
  if (bad < s->len) {
    const char *ptr = path_at(c->a, s->text, s->len, bad);
    fp_diag_at(c->d, s, bad, "%s: invalid UTF-8 (byte 0x%02x)", ptr[0] ? ptr : "/",
               (unsigned char)s->text[bad]);
    return NULL;
  }
  /* one pass: the strict scanner checks the text and builds the json-c
   * objects (json-c's own parser is laxer - NaN, single quotes, "1.",
   * control characters, clamped integers, the last of duplicate keys - and
   * would need this scan after it anyway) */
  vscan v = {.a = c->a, .t = s->text, .n = s->len};
  json_object *root = NULL;
  bool ok = v_value(&v, 1, &root);
  free(v.ks);
  free(v.sv);
  if (ok) {
    v.i = skip_ws(s->text, s->len, v.i);
    if (v.i < s->len) ok = vfail(&v, v.i, false, "invalid JSON: unexpected data after the value");
  }
  if (!ok) {
    json_object_put(root);
    fp_diag_at(c->d, s, v.err_off, "%s: %s", v.err_ptr[0] ? v.err_ptr : "/", v.err_msg);
    return NULL;
  }
  if (!root) /* json-c's null; a NULL return means an error was reported */
    fp_diag_at(c->d, s, first, "/: the document is null, not a JSON object");
  return root;
}

/* ---- accessors ----------------------------------------------------------------- */
bool fp_j_error(fp_jctx *c, const char *ptr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fp_diag_vjson(c->d, c->src, ptr, fmt, ap);
  va_end(ap);
  return false;
}

const char *fp_j_describe(fp_arena *a, json_object *v) {
  switch (json_object_get_type(v)) {
    case json_type_null: return "null";
    case json_type_boolean: return json_object_get_boolean(v) ? "true" : "false";
    case json_type_object: return "an object";
    case json_type_array: return "an array";
    case json_type_int:
    case json_type_double: {
      const char *s = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
      return fp_sprintf(a, "%.40s", s);
    }
    case json_type_string: {
      const char *s = json_object_get_string(v);
      if (!s[0]) return "an empty string";
      if (strlen(s) > 40) return fp_sprintf(a, "\"%.37s...\"", s);
      return fp_sprintf(a, "\"%s\"", s);
    }
  }
  return "a value";
}

bool fp_j_is_object(fp_jctx *c, json_object *v, const char *ptr) {
  if (v && json_object_is_type(v, json_type_object)) return true;
  return fp_j_error(c, ptr, "expected an object, got %s", fp_j_describe(c->a, v));
}

bool fp_j_is_array(fp_jctx *c, json_object *v, const char *ptr) {
  if (v && json_object_is_type(v, json_type_array)) return true;
  return fp_j_error(c, ptr, "expected an array, got %s", fp_j_describe(c->a, v));
}

bool fp_j_keys(fp_jctx *c, json_object *obj, const char *ptr, const char *const *allowed) {
  if (!obj || !json_object_is_type(obj, json_type_object)) return fp_j_is_object(c, obj, ptr);
  json_object_object_foreach(obj, key, val) {
    (void)val;
    bool ok = false;
    for (int k = 0; allowed[k]; k++)
      if (!strcmp(allowed[k], key)) ok = true;
    if (ok) continue;
    fp_sbuf b = {0};
    for (int k = 0; allowed[k]; k++) {
      if (k) fp_sb_putn(&b, ", ", 2);
      fp_sb_putn(&b, allowed[k], strlen(allowed[k]));
    }
    const char *near = fp_closest_name(key, allowed);
    fp_j_error(c, fp_ptr_key(c->a, ptr, key), "unknown member '%s' (expected one of: %s)%s%s%s", key,
               b.p ? b.p : "", near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
    free(b.p);
    return false;
  }
  return true;
}

json_object *fp_j_get(json_object *obj, const char *key) {
  json_object *v = NULL;
  if (!obj || !json_object_is_type(obj, json_type_object)) return NULL;
  if (!json_object_object_get_ex(obj, key, &v)) return NULL;
  return v;
}

bool fp_j_has(json_object *obj, const char *key) {
  if (!obj || !json_object_is_type(obj, json_type_object)) return false;
  return json_object_object_get_ex(obj, key, NULL);
}

/* member lookup shared by the typed accessors: false = stop with *ret */
/* obj's member key in *v. Its JSON pointer is built only when an error is
 * reported (VP below): a model of 45,000 params reads hundreds of
 * thousands of members, and formatting each one's pointer cost about a
 * tenth of the parse. */
static bool member(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required,
                   json_object **v, bool *ret) {
  if (!obj || !json_object_is_type(obj, json_type_object)) {
    *ret = fp_j_is_object(c, obj, ptr);
    return false;
  }
  if (!json_object_object_get_ex(obj, key, v)) {
    *ret = required ? fp_j_error(c, ptr, "missing required member '%s'", key) : true;
    return false;
  }
  return true;
}
#define VP fp_ptr_key(c->a, ptr, key) /* the member's pointer, for an error */

static const char *int_range(fp_arena *a, int64_t min, int64_t max) {
  if (min == INT64_MIN && max == INT64_MAX) return "an integer";
  if (max == INT64_MAX) return fp_sprintf(a, "an integer >= %" PRId64, min);
  if (min == INT64_MIN) return fp_sprintf(a, "an integer <= %" PRId64, max);
  return fp_sprintf(a, "an integer in [%" PRId64 ", %" PRId64 "]", min, max);
}

bool fp_j_int_v(fp_jctx *c, json_object *v, const char *ptr, int64_t min, int64_t max, int64_t *out) {
  if (!v || !json_object_is_type(v, json_type_int))
    return fp_j_error(c, ptr, "expected %s, got %s", int_range(c->a, min, max), fp_j_describe(c->a, v));
  int64_t x = json_object_get_int64(v);
  if (x == INT64_MAX && json_object_get_uint64(v) != (uint64_t)INT64_MAX)
    return fp_j_error(c, ptr, "expected %s, got %s (larger than the int64 maximum)",
                      int_range(c->a, min, max), fp_j_describe(c->a, v));
  if (x < min || x > max)
    return fp_j_error(c, ptr, "expected %s, got %" PRId64, int_range(c->a, min, max), x);
  *out = x;
  return true;
}

bool fp_j_int(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required,
              int64_t min, int64_t max, int64_t *out) {
  json_object *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  if (v && json_object_is_type(v, json_type_int)) { /* the common case, no pointer */
    int64_t x = json_object_get_int64(v);
    if (x >= min && x <= max && (x != INT64_MAX || json_object_get_uint64(v) == (uint64_t)INT64_MAX)) {
      *out = x;
      return true;
    }
  }
  return fp_j_int_v(c, v, VP, min, max, out);
}

static const char *num_range(fp_arena *a, double min, double max) {
  bool lo = isfinite(min), hi = isfinite(max);
  if (!lo && !hi) return "a number";
  if (!hi) return fp_sprintf(a, "a number >= %g", min);
  if (!lo) return fp_sprintf(a, "a number <= %g", max);
  return fp_sprintf(a, "a number in [%g, %g]", min, max);
}

bool fp_j_num(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required,
              double min, double max, double *out) {
  json_object *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  if (!v || !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
    return fp_j_error(c, VP, "expected %s, got %s", num_range(c->a, min, max), fp_j_describe(c->a, v));
  double x = json_object_get_double(v);
  if (!isfinite(x) || x < min || x > max)
    return fp_j_error(c, VP, "expected %s, got %s", num_range(c->a, min, max), fp_j_describe(c->a, v));
  *out = x;
  return true;
}

bool fp_j_bool(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required, bool *out) {
  json_object *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  if (!v || !json_object_is_type(v, json_type_boolean))
    return fp_j_error(c, VP, "expected true or false, got %s", fp_j_describe(c->a, v));
  *out = json_object_get_boolean(v);
  return true;
}

bool fp_j_str_v(fp_jctx *c, json_object *v, const char *ptr, const char **out) {
  if (!v || !json_object_is_type(v, json_type_string) || json_object_get_string_len(v) == 0)
    return fp_j_error(c, ptr, "expected a non-empty string, got %s", fp_j_describe(c->a, v));
  *out = fp_strdup(c->a, json_object_get_string(v));
  return true;
}

bool fp_j_str(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required,
              const char **out) {
  json_object *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  if (v && json_object_is_type(v, json_type_string) && json_object_get_string_len(v) > 0) {
    *out = fp_strdup(c->a, json_object_get_string(v));
    return true;
  }
  return fp_j_str_v(c, v, VP, out);
}

bool fp_j_enum(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required,
               const char *const *names, int *out) {
  json_object *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  if (v && json_object_is_type(v, json_type_string)) {
    const char *s = json_object_get_string(v);
    for (int k = 0; names[k]; k++)
      if (!strcmp(names[k], s)) {
        *out = k;
        return true;
      }
  }
  fp_sbuf b = {0};
  for (int k = 0; names[k]; k++) {
    if (k) fp_sb_putn(&b, ", ", 2);
    fp_sb_putn(&b, "\"", 1);
    fp_sb_putn(&b, names[k], strlen(names[k]));
    fp_sb_putn(&b, "\"", 1);
  }
  const char *near = v && json_object_is_type(v, json_type_string) ? fp_closest_name(json_object_get_string(v), names)
                                                                    : NULL;
  fp_j_error(c, VP, "expected one of %s, got %s%s%s%s", b.p ? b.p : "", fp_j_describe(c->a, v),
             near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
  free(b.p);
  return false;
}

bool fp_j_arr(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required,
              json_object **out, size_t *n) {
  json_object *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  if (!(v && json_object_is_type(v, json_type_array)) && !fp_j_is_array(c, v, VP)) return false;
  *out = v;
  if (n) *n = json_object_array_length(v);
  return true;
}
