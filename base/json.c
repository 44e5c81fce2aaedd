/* json.c - strict JSON input with located errors (see json.h).
 *
 * Three scanners over the source text live here, all hand-written because
 * the document's nodes carry no positions:
 *   - the parser: a strict RFC 8259 scanner that builds the fp_jv document
 *     in the arena as it checks the text, in one pass. json-c's parser is
 *     not used: even "strict" it lets through NaN/Infinity, single-quoted
 *     strings, "1.", raw control characters in strings and silently clamps
 *     integers beyond 64 bits, and keeps the last of duplicate keys. The
 *     scanner rejects all of these, located at the offending byte, with the
 *     JSON pointer of the value (or object) concerned. Its values are the
 *     ones json-c's parser builds from a valid text (tests/test_frontend.c
 *     compares them);
 *   - a tolerant walker that names the JSON pointer of the value at a byte
 *     offset (for an invalid UTF-8 byte);
 *   - fpi_json_locate: follows an RFC 6901 pointer through the text to the first
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
static size_t decode_string(const char *t, size_t n, size_t q, char *out, size_t *olen) {
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
const char *fpi_ptr_key(fp_arena *a, const char *ptr, const char *key) {
  size_t pl = strlen(ptr), extra = 0;
  for (const char *k = key; *k; k++) extra += (*k == '~' || *k == '/') ? 2 : 1;
  char *s = fpi_alloc(a, pl + extra + 2);
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

const char *fpi_ptr_idx(fp_arena *a, const char *ptr, int64_t i) {
  return fpi_strjoin_i64(a, ptr, "/", i);
}

/* escaped pointer segment for a decoded key, appended to a malloc'd buffer */
static void sb_put_segment(fp_sbuf *b, const char *key, size_t n) {
  fpi_sb_putn(b, "/", 1);
  for (size_t i = 0; i < n; i++) {
    if (key[i] == '~')
      fpi_sb_putn(b, "~0", 2);
    else if (key[i] == '/')
      fpi_sb_putn(b, "~1", 2);
    else if (key[i] == 0)
      fpi_sb_putn(b, "\\u0000", 6);
    else
      fpi_sb_putn(b, key + i, 1);
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
  fpi_sb_putn(&b, "", 0);
  for (int k = 0; k < nseg; k++) {
    if (segs[k].is_obj) {
      if (segs[k].key == (size_t)-1) break;
      if (k == nseg - 1 && !include_last_key) break;
      size_t end = skip_string(t, n, segs[k].key), dl;
      char *dec = malloc(end - segs[k].key + 1);
      FP_ASSERT(dec);
      decode_string(t, n, segs[k].key, dec, &dl);
      sb_put_segment(&b, dec, dl);
      free(dec);
    } else {
      char num[32];
      snprintf(num, sizeof num, "/%" PRId64, segs[k].idx);
      fpi_sb_putn(&b, num, strlen(num));
    }
  }
  char *s = fpi_strdup(a, b.p);
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

const char *fpi_json_path_at(fp_arena *a, const fp_src *s, size_t off) {
  const char *p = path_at(a, s->text, s->len, off);
  return p[0] ? p : "/";
}

/* ---- fpi_json_locate ---------------------------------------------------------- */
/* the next segment of an RFC 6901 pointer, *pp just past its '/', decoded
 * into seg (~0 is '~', ~1 is '/'): its length; *pp moves to the '/' or the
 * NUL that ends it */
static size_t pointer_segment(const char **pp, char *seg) {
  const char *p = *pp;
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
  *pp = p;
  return sl;
}

/* past the value at t[i] and the ',' after it: the next item's position
 * (after the ','; never 0), or 0 when no ',' follows (the container ends)
 * or the text goes wrong */
static size_t past_item(const char *t, size_t n, size_t i) {
  size_t nx = skip_value(t, n, i);
  if (nx == i) return 0;
  i = skip_ws(t, n, nx);
  return i < n && t[i] == ',' ? i + 1 : 0;
}

/* the member named seg (sl bytes) of the object at t[i] ('{'): true with
 * *at the first byte of its value; false when it is not there or the text
 * goes wrong first. Keys are decoded into *kbuf (*kcap bytes, grown here). */
static bool locate_member(const char *t, size_t n, size_t i, const char *seg, size_t sl, char **kbuf, size_t *kcap,
                          size_t *at) {
  i++;
  for (;;) {
    i = skip_ws(t, n, i);
    if (i >= n || t[i] != '"') return false;
    size_t end = skip_string(t, n, i), kl;
    if (end - i + 1 > *kcap) {
      *kcap = end - i + 1;
      free(*kbuf);
      *kbuf = malloc(*kcap);
      FP_ASSERT(*kbuf);
    }
    decode_string(t, n, i, *kbuf, &kl);
    i = skip_ws(t, n, end);
    if (i >= n || t[i] != ':') return false;
    i = skip_ws(t, n, i + 1);
    if (i >= n) return false;
    if (kl == sl && memcmp(*kbuf, seg, sl) == 0) {
      /* json-c keeps the last of duplicate keys, but duplicates are
       * rejected before anything is located; the first is fine */
      *at = i;
      return true;
    }
    if (!(i = past_item(t, n, i))) return false;
  }
}

/* a segment as an RFC 6901 array index: "0" or [1-9][0-9]* within int64;
 * anything else misses (-1) */
static int64_t pointer_index(const char *seg, size_t sl) {
  int64_t want = -1;
  bool ok = sl > 0 && (sl == 1 || seg[0] != '0');
  for (size_t k = 0; ok && k < sl; k++) {
    if (seg[k] < '0' || seg[k] > '9') ok = false;
    else if (want > (INT64_MAX - 9) / 10) ok = false;
    else want = (want < 0 ? 0 : want) * 10 + (seg[k] - '0');
  }
  return ok ? want : -1;
}

/* element want of the array at t[i] ('['): true with *at its first byte;
 * false when the array is shorter or the text goes wrong first */
static bool locate_element(const char *t, size_t n, size_t i, int64_t want, size_t *at) {
  i++;
  for (int64_t idx = 0;; idx++) {
    i = skip_ws(t, n, i);
    if (i >= n || t[i] == ']') return false;
    if (idx == want) {
      *at = i;
      return true;
    }
    if (!(i = past_item(t, n, i))) return false;
  }
}

size_t fpi_json_locate(const fp_src *s, const char *ptr, bool *exact) {
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
  while (found && *p == '/') { /* one segment a turn, cur at the value found so far */
    p++;
    size_t sl = pointer_segment(&p, seg);
    int64_t want;
    if (t[cur] == '{')
      found = locate_member(t, n, cur, seg, sl, &kbuf, &kcap, &cur);
    else if (t[cur] == '[' && (want = pointer_index(seg, sl)) >= 0)
      found = locate_element(t, n, cur, want, &cur);
    else
      found = false;
  }
  free(seg);
  free(kbuf);
  *exact = found && *p == 0;
  return cur;
}

/* ---- the strict scanner, building the document --------------------------------- */
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
  /* the elements of the arrays open now (vs) and the members of the objects
   * open now (ms, with each key's offset in mo): stacks, from which a
   * container moves its own into one arena block at its end, so the
   * document costs one allocation per container (malloc'd; freed after the
   * parse) */
  fp_jv *vs;
  size_t vlen, vcap;
  fp_jmem *ms;
  size_t *mo;
  size_t mlen, mcap;
  /* decoded strings and keys are bumped from an arena block (a string's
   * decoded bytes and its NUL never outnumber its quoted text) */
  char *sp;
  size_t sleft;
  bool pull; /* for fpi_jp: a double's text is the source's */
} vscan;

#define FP_JSON_STR_BLOCK ((size_t)256 << 10)

/* room for n bytes of decoded text */
static char *str_room(vscan *v, size_t n) {
  if (n > v->sleft) {
    size_t b = v->n + 1 < FP_JSON_STR_BLOCK ? v->n + 1 : FP_JSON_STR_BLOCK;
    if (b < n) b = n;
    v->sp = fpi_alloc_array_raw(v->a, b, 1); /* each string is copied in and ended by a NUL */
    v->sleft = b;
  }
  char *p = v->sp;
  v->sp += n;
  v->sleft -= n;
  return p;
}

static void vs_push(vscan *v, const fp_jv *x) {
  if (v->vlen == v->vcap) {
    v->vcap = v->vcap ? 2 * v->vcap : 256;
    v->vs = realloc(v->vs, v->vcap * sizeof *v->vs);
    FP_ASSERT(v->vs);
  }
  v->vs[v->vlen++] = *x;
}

static void ms_push(vscan *v, const fp_jmem *m, size_t off) {
  if (v->mlen == v->mcap) {
    v->mcap = v->mcap ? 2 * v->mcap : 256;
    v->ms = realloc(v->ms, v->mcap * sizeof *v->ms);
    v->mo = realloc(v->mo, v->mcap * sizeof *v->mo);
    FP_ASSERT(v->ms && v->mo);
  }
  v->ms[v->mlen] = *m;
  v->mo[v->mlen++] = off;
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
  if (j - i > 40) return fpi_sprintf(v->a, "%.*s...", 37, v->t + i);
  return fpi_strndup(v->a, v->t + i, j - i);
}

/* what text[off] starts, for "expected X, got Y" (json.h) */
const char *fpi_json_got(fp_arena *a, const char *t, size_t n, size_t off) {
  if (off >= n) return "the end of the file";
  char ch = t[off];
  switch (ch) {
    case '"': return "a string";
    case '{': return "an object";
    case '[': return "an array";
    case 't': case 'f': return "a boolean";
    case 'n': return "null";
    default:
      if (ch == '-' || (ch >= '0' && ch <= '9')) return "a number";
      if (ch > ' ' && ch < 0x7f) return fpi_sprintf(a, "'%c'", ch);
      return "something that is not JSON";
  }
}
/* (vfail says "the file ends early" at the end, whatever got says) */
static const char *got(vscan *v, size_t off) { return fpi_json_got(v->a, v->t, v->n, off); }

/* Each scanner builds the value it accepted in *out (a node of the caller's:
 * the stacks may move under a pointer into them): one pass both checks the
 * text and builds it. */
static bool v_value(vscan *v, int depth, fp_jv *out);

/* The JSON string whose opening quote is at t[q], checked strictly (no raw
 * control character, JSON's escapes only, \u with 4 hex digits and never
 * \u0000, surrogates paired): true with *end just past its closing quote;
 * false with *at the offending byte and why (cap bytes) the message. */
static bool check_string(const char *t, size_t n, size_t q, size_t *end, size_t *at, char *why, size_t cap) {
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

/* the string at v->i (which is '"'), a member name when is_key: checked,
 * then decoded into the arena (*s, *len bytes, a NUL after them) */
static bool v_string(vscan *v, bool is_key, const char **s, size_t *len) {
  const char *t = v->t;
  size_t n = v->n, q = v->i, end, at;
  char why[96];
  if (!check_string(t, n, q, &end, &at, why, sizeof why)) return vfail(v, at, !is_key, "%s", why);
  size_t raw = end - q - 2; /* the bytes between the quotes */
  char *o = str_room(v, raw + 1);
  size_t dl = raw;
  if (memchr(t + q + 1, '\\', raw))
    decode_string(t, n, q, o, &dl);
  else
    memcpy(o, t + q + 1, raw);
  o[dl] = 0;
  v->sp -= raw - dl; /* what the escapes saved goes back */
  v->sleft += raw - dl;
  *s = o;
  *len = dl;
  v->i = end;
  return true;
}

static size_t skip_digits(const char *t, size_t n, size_t i) {
  while (i < n && t[i] >= '0' && t[i] <= '9') i++;
  return i;
}

/* the number at v->i checked against RFC 8259's grammar (no leading zero, a
 * digit after '.', a complete exponent): true with *end just past it,
 * *digits_end just past its integer part and *integral when it has neither
 * a fraction nor an exponent; false after the located error */
static bool number_syntax(vscan *v, size_t *end, size_t *digits_end, bool *integral) {
  const char *t = v->t;
  size_t n = v->n, s = v->i, i = s;
  *integral = true;
  if (i < n && t[i] == '-') i++;
  if (i < n && t[i] == '0') {
    i++;
    if (i < n && t[i] >= '0' && t[i] <= '9')
      return vfail(v, s, true, "invalid JSON: number with a leading zero");
  } else if (i < n && t[i] >= '1' && t[i] <= '9') {
    i = skip_digits(t, n, i);
  } else {
    return vfail(v, s, true, "invalid JSON: unexpected '%s'", excerpt(v, s, skip_value(t, n, s) > s ? skip_value(t, n, s) : s + 1));
  }
  *digits_end = i;
  if (i < n && t[i] == '.') {
    *integral = false;
    i++;
    if (i >= n || t[i] < '0' || t[i] > '9')
      return vfail(v, s, true, "invalid JSON: a digit must follow the decimal point in '%s'",
                   excerpt(v, s, skip_value(t, n, s)));
    i = skip_digits(t, n, i);
  }
  if (i < n && (t[i] == 'e' || t[i] == 'E')) {
    *integral = false;
    i++;
    if (i < n && (t[i] == '+' || t[i] == '-')) i++;
    if (i >= n || t[i] < '0' || t[i] > '9')
      return vfail(v, s, true, "invalid JSON: malformed exponent in '%s'", excerpt(v, s, skip_value(t, n, s)));
    i = skip_digits(t, n, i);
  }
  *end = i;
  return true;
}

/* an integer of more than 18 digits, tok its text (t[s..i)), into *out as
 * json-c's parser read them: int64, uint64 above INT64_MAX; false after the
 * located error beyond 64 bits */
static bool number_wide_integer(vscan *v, const char *tok, size_t s, size_t i, fp_jv *out) {
  bool neg = tok[0] == '-';
  errno = 0;
  int64_t sv = 0;
  uint64_t uv = 0;
  if (neg)
    sv = strtoll(tok, NULL, 10);
  else
    uv = strtoull(tok, NULL, 10);
  if (errno == ERANGE)
    return vfail(v, s, true, "integer %s is outside the 64-bit range", excerpt(v, s, i));
  if (neg)
    out->i = sv;
  else if (uv > (uint64_t)INT64_MAX)
    out->u = uv, out->big = true;
  else
    out->i = (int64_t)uv;
  return true;
}

/* a number with a fraction or an exponent, tok its text (t[s..i)), into
 * *out with the text as written; false after the located error when it is
 * beyond a double's range */
static bool number_double(vscan *v, const char *tok, size_t s, size_t i, fp_jv *out) {
  double d = strtod(tok, NULL);
  if (!isfinite(d)) return vfail(v, s, true, "number %s is out of range", excerpt(v, s, i));
  out->d = d;
  out->text = v->t + s; /* messages quote a number as written: its n bytes */
  if (!v->pull) {       /* the document's own copy, NUL-terminated */
    char *text = str_room(v, i - s + 1);
    memcpy(text, tok, i - s + 1);
    out->text = text;
  }
  out->n = (uint32_t)(i - s);
  return true;
}

static bool v_number(vscan *v, fp_jv *out) {
  const char *t = v->t;
  size_t s = v->i, i = s, digits_end = s; /* (set by number_syntax) */
  bool integral;
  if (!number_syntax(v, &i, &digits_end, &integral)) return false;
  *out = (fp_jv){.type = integral ? FP_JINT : FP_JDOUBLE};
  bool neg = t[s] == '-';
  size_t d0 = s + neg;
  if (integral && digits_end - d0 <= 18) { /* the common case: fits, no strtoll */
    int64_t x = 0;
    for (size_t k = d0; k < digits_end; k++) x = x * 10 + (t[k] - '0');
    out->i = neg ? -x : x;
    v->i = i;
    return true;
  }
  char buf[64];
  char *tok = i - s < sizeof buf ? buf : fpi_alloc(v->a, i - s + 1);
  memcpy(tok, t + s, i - s);
  tok[i - s] = 0;
  if (!(integral ? number_wide_integer(v, tok, s, i, out) : number_double(v, tok, s, i, out))) return false;
  v->i = i;
  return true;
}

/* (re)build the open hash of an object's first cnt members (at ms + base)
 * with cap slots */
static void index_fill(const vscan *v, size_t base, size_t cnt, uint32_t *tab, size_t cap) {
  memset(tab, 0, cap * sizeof *tab);
  for (size_t k = 0; k < cnt; k++) {
    size_t h = v->ms[base + k].hash & (cap - 1);
    while (tab[h]) h = (h + 1) & (cap - 1);
    tab[h] = (uint32_t)k + 1;
  }
}

/* an object's open hash of its members' positions (+1), kept as its index:
 * in small (on the C stack) up to 32 slots, malloc'd past that */
typedef struct member_index {
  uint32_t small[32], *tab;
  size_t cap;
} member_index;

/* the earlier member of the object being scanned (its members are
 * v->ms[base..]) named key (klen bytes), or (size_t)-1 when none is. Up to
 * FP_JV_LINEAR members they are compared one by one; past that through the
 * open hash *ix (grown here as the object grows), which the new member
 * joins when it is new (its *hash is set then) */
static size_t member_find(vscan *v, size_t base, const char *key, size_t klen, uint32_t *hash, member_index *ix) {
  size_t cnt = v->mlen - base;
  size_t dup = (size_t)-1;
  if (cnt < FP_JV_LINEAR) {
    for (size_t k = base; k < v->mlen; k++)
      if (v->ms[k].klen == klen && memcmp(v->ms[k].key, key, klen) == 0) dup = k;
    return dup;
  }
  if (2 * (cnt + 1) > ix->cap) {
    if (!ix->tab) /* the first FP_JV_LINEAR members are hashed now */
      for (size_t k = base; k < v->mlen; k++)
        v->ms[k].hash = (uint32_t)fpi_fnv1a(FP_FNV_INIT, v->ms[k].key, v->ms[k].klen);
    size_t nc = fpi_jv_index_cap(cnt + 1);
    if (ix->tab && ix->tab != ix->small) free(ix->tab);
    ix->tab = nc <= 32 ? ix->small : malloc(nc * sizeof *ix->tab);
    FP_ASSERT(ix->tab);
    ix->cap = nc;
    index_fill(v, base, cnt, ix->tab, ix->cap);
  }
  uint32_t *tab = ix->tab;
  size_t tcap = ix->cap;
  *hash = (uint32_t)fpi_fnv1a(FP_FNV_INIT, key, klen);
  size_t h = *hash & (tcap - 1);
  for (; tab[h]; h = (h + 1) & (tcap - 1)) {
    const fp_jmem *o = &v->ms[base + tab[h] - 1];
    if (o->hash == *hash && o->klen == klen && memcmp(o->key, key, klen) == 0) {
      dup = base + tab[h] - 1;
      break;
    }
  }
  if (dup == (size_t)-1) tab[h] = (uint32_t)cnt + 1;
  return dup;
}

/* the located error for the member named key (klen bytes, at koff)
 * repeating the member v->ms[dup], with where that one is */
static void fail_duplicate(vscan *v, size_t koff, const char *key, size_t klen, size_t dup) {
  fp_src tmp = {"", v->t, v->n};
  int line, col;
  fpi_src_linecol(&tmp, v->mo[dup], &line, &col);
  fp_sbuf kb = {0};
  sb_put_segment(&kb, key, klen);
  vfail(v, koff, false, "duplicate member '%s' (first at line %d, column %d)", fpi_strdup(v->a, kb.p + 1), line, col);
  free(kb.p);
}

static bool v_object(vscan *v, int depth, fp_jv *out) {
  const char *t = v->t;
  size_t n = v->n;
  pseg *sg = &v->segs[v->nseg++];
  sg->is_obj = true;
  sg->key = (size_t)-1;
  /* this object's members are v->ms[base..]; past FP_JV_LINEAR of them the
   * open hash ix finds duplicates (member_find), and is kept as the
   * object's index */
  size_t base = v->mlen;
  member_index ix;
  ix.tab = NULL, ix.cap = 0;
  bool ok = false;
  v->i = skip_ws(t, n, v->i + 1);
  if (v->i < n && t[v->i] == '}') {
    v->i++;
    ok = true;
    goto done;
  }
  for (;;) {
    v->i = skip_ws(t, n, v->i);
    if (v->i >= n || t[v->i] != '"') {
      vfail(v, v->i, false, "invalid JSON: expected a member name in double quotes, got %s", got(v, v->i));
      goto done;
    }
    size_t koff = v->i, klen;
    const char *key;
    if (!v_string(v, true, &key, &klen)) goto done;
    fp_jmem m = {.key = key, .klen = (uint32_t)klen};
    size_t dup = member_find(v, base, key, klen, &m.hash, &ix);
    if (dup != (size_t)-1) {
      fail_duplicate(v, koff, key, klen, dup);
      goto done;
    }
    v->i = skip_ws(t, n, v->i);
    if (v->i >= n || t[v->i] != ':') {
      vfail(v, v->i, false, "invalid JSON: expected ':' after member name, got %s", got(v, v->i));
      goto done;
    }
    v->i = skip_ws(t, n, v->i + 1);
    sg->key = koff;
    if (!v_value(v, depth + 1, &m.val)) goto done;
    ms_push(v, &m, koff);
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
    vfail(v, v->i, false, "invalid JSON: expected ',' or '}' in object, got %s", got(v, v->i));
    goto done;
  }
done:
  if (ok) {
    size_t cnt = v->mlen - base;
    *out = (fp_jv){.type = FP_JOBJECT, .n = (uint32_t)cnt};
    if (cnt) out->mems = fpi_memdup(v->a, v->ms + base, cnt * sizeof *v->ms);
    if (cnt > FP_JV_LINEAR) {
      FP_ASSERT(ix.cap == fpi_jv_index_cap(cnt));
      out->index = fpi_memdup(v->a, ix.tab, ix.cap * sizeof *ix.tab);
    }
    v->nseg--;
  }
  v->mlen = base;
  if (ix.tab && ix.tab != ix.small) free(ix.tab);
  return ok;
}

static bool v_array(vscan *v, int depth, fp_jv *out) {
  const char *t = v->t;
  size_t n = v->n;
  pseg *sg = &v->segs[v->nseg++];
  sg->is_obj = false;
  sg->idx = 0;
  size_t base = v->vlen; /* this array's elements are v->vs[base..] */
  bool ok = false;
  v->i = skip_ws(t, n, v->i + 1);
  if (v->i < n && t[v->i] == ']') {
    v->i++;
    ok = true;
  }
  while (!ok) {
    v->i = skip_ws(t, n, v->i);
    fp_jv val;
    if (!v_value(v, depth + 1, &val)) break;
    vs_push(v, &val);
    v->i = skip_ws(t, n, v->i);
    if (v->i < n && t[v->i] == ',') {
      v->i++;
      sg->idx++;
      continue;
    }
    if (v->i < n && t[v->i] == ']') {
      v->i++;
      ok = true;
      break;
    }
    v->nseg--;
    vfail(v, v->i, true, "invalid JSON: expected ',' or ']' in array, got %s", got(v, v->i));
    v->vlen = base;
    return false;
  }
  if (ok) {
    size_t cnt = v->vlen - base;
    *out = (fp_jv){.type = FP_JARRAY, .n = (uint32_t)cnt};
    if (cnt) out->elems = fpi_memdup(v->a, v->vs + base, cnt * sizeof *v->vs);
    v->nseg--;
  }
  v->vlen = base;
  return ok;
}

static bool v_value(vscan *v, int depth, fp_jv *out) {
  const char *t = v->t;
  size_t n = v->n;
  v->i = skip_ws(t, n, v->i);
  if (v->i >= n) return vfail(v, v->i, true, "invalid JSON: unexpected end of data");
  if (depth > FP_JSON_MAX_DEPTH || v->nseg >= FP_JSON_MAX_DEPTH + 4)
    return vfail(v, v->i, true, "invalid JSON: nesting deeper than %d", FP_JSON_MAX_DEPTH);
  char ch = t[v->i];
  if (ch == '{') return v_object(v, depth, out);
  if (ch == '[') return v_array(v, depth, out);
  if (ch == '"') {
    const char *s;
    size_t len;
    if (!v_string(v, false, &s, &len)) return false;
    *out = (fp_jv){.type = FP_JSTRING, .n = (uint32_t)len, .s = s};
    return true;
  }
  if (ch == '-' || (ch >= '0' && ch <= '9')) return v_number(v, out);
  static const char *const lits[] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++) {
    size_t l = strlen(lits[k]);
    if (n - v->i >= l && memcmp(t + v->i, lits[k], l) == 0) {
      size_t e = v->i + l;
      if (e >= n || is_ws(t[e]) || t[e] == ',' || t[e] == ']' || t[e] == '}') {
        v->i = e;
        *out = k < 2 ? (fp_jv){.type = FP_JBOOL, .b = k == 0} : (fp_jv){.type = FP_JNULL};
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
/* what must hold before a text is read (see fpi_json_text_ok), into *e */
static bool text_check(fp_arena *a, const fp_src *s, fp_jerr *e) {
  size_t first = skip_ws(s->text, s->len, 0);
  if (first >= s->len) {
    e->off = s->len;
    snprintf(e->msg, sizeof e->msg, "/: empty file: expected a JSON value");
    return false;
  }
  if (s->len > (size_t)INT32_MAX - 1) {
    e->off = 0;
    snprintf(e->msg, sizeof e->msg, "/: file too large (more than 2 GiB)");
    return false;
  }
  /* UTF-8 first (json-c's check let overlong forms and surrogates through) */
  size_t bad = fpi_utf8_invalid(s->text, s->len);
  if (bad < s->len) {
    const char *ptr = path_at(a, s->text, s->len, bad);
    e->off = bad;
    snprintf(e->msg, sizeof e->msg, "%s: invalid UTF-8 (byte 0x%02x)", ptr[0] ? ptr : "/", (unsigned char)s->text[bad]);
    return false;
  }
  return true;
}

bool fpi_json_text_ok(fp_arena *a, fp_diag *d, const fp_src *s) {
  fp_jerr e;
  if (text_check(a, s, &e)) return true;
  fpi_diag_at(d, s, e.off, "%s", e.msg);
  return false;
}

const fp_jv *fpi_json_parse_text(fp_arena *a, const fp_src *s, fp_jerr *e) {
  if (!text_check(a, s, e)) return NULL;
  /* one pass: the strict scanner checks the text and builds the document
   * (json-c's parser was laxer - NaN, single quotes, "1.", control
   * characters, clamped integers, the last of duplicate keys - and its
   * objects cost a malloc each) */
  vscan v = {.a = a, .t = s->text, .n = s->len};
  fp_jv root;
  bool ok = v_value(&v, 1, &root);
  free(v.vs);
  free(v.ms);
  free(v.mo);
  if (ok) {
    v.i = skip_ws(s->text, s->len, v.i);
    if (v.i < s->len) ok = vfail(&v, v.i, false, "invalid JSON: unexpected data after the value");
  }
  if (!ok) {
    e->off = v.err_off;
    snprintf(e->msg, sizeof e->msg, "%s: %s", v.err_ptr[0] ? v.err_ptr : "/", v.err_msg);
    return NULL;
  }
  if (root.type == FP_JNULL) {
    e->off = skip_ws(s->text, s->len, 0);
    snprintf(e->msg, sizeof e->msg, "/: the document is null, not a JSON object");
    return NULL;
  }
  return fpi_memdup(a, &root, sizeof root);
}

const fp_jv *fpi_json_parse(fp_jctx *c) {
  fp_jerr e;
  const fp_jv *root = fpi_json_parse_text(c->a, c->src, &e);
  if (!root) fpi_diag_at(c->d, c->src, e.off, "%s", e.msg);
  return root;
}

/* ---- writing ------------------------------------------------------------------ */
void fpi_json_put_string(fp_sbuf *b, const char *s) {
  static const char hex[] = "0123456789abcdef";
  if (!s) s = "";
  fpi_sb_putc(b, '"');
  for (;;) {
    const char *r = s;
    while ((unsigned char)*r >= 0x20 && *r != '"' && *r != '\\') r++;
    if (r > s) fpi_sb_putn(b, s, (size_t)(r - s));
    s = r;
    if (!*s) break;
    unsigned char c = (unsigned char)*s++;
    switch (c) {
      case '"': fpi_sb_putn(b, "\\\"", 2); break;
      case '\\': fpi_sb_putn(b, "\\\\", 2); break;
      case '\b': fpi_sb_putn(b, "\\b", 2); break;
      case '\f': fpi_sb_putn(b, "\\f", 2); break;
      case '\n': fpi_sb_putn(b, "\\n", 2); break;
      case '\r': fpi_sb_putn(b, "\\r", 2); break;
      case '\t': fpi_sb_putn(b, "\\t", 2); break;
      default: {
        char t[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        fpi_sb_putn(b, t, 6);
      }
    }
  }
  fpi_sb_putc(b, '"');
}

/* ---- the pull parser ------------------------------------------------------------ */
struct fp_jp {
  vscan v;                              /* the scanner, its open containers in v.segs */
  bool first[FP_JSON_MAX_DEPTH + 8];    /* per open container: nothing read from it yet */
  char *sbuf, *kbuf;                    /* scratch for strings not kept, and keys */
  size_t scap, kcap;
  const fp_src *src;
};

fp_jp *fpi_jp_new(fp_arena *a, const fp_src *src) {
  fp_jp *p = fpi_alloc(a, sizeof *p);
  memset(p, 0, sizeof *p);
  p->v.a = a;
  p->v.t = src->text;
  p->v.n = src->len;
  p->v.pull = true;
  p->src = src;
  return p;
}

/* room for n bytes in a scratch buffer of the arena (grown by doubling) */
static char *scratch(fp_arena *a, char **buf, size_t *cap, size_t n) {
  if (n > *cap) {
    *cap = n < 64 ? 64 : 2 * n;
    *buf = fpi_alloc(a, *cap);
  }
  return *buf;
}

/* the string at t[q] when it is plain (no escape, no control character):
 * true with *end just past its closing quote */
static inline bool plain_string(const char *t, size_t n, size_t q, size_t *end) {
  size_t i = q + 1;
  while (i < n && (unsigned char)t[i] >= 0x20 && t[i] != '"' && t[i] != '\\') i++;
  if (i >= n || t[i] != '"') return false;
  *end = i + 1;
  return true;
}

/* the string at the cursor into the arena (keep) or the scratch buffer */
static bool jp_string(fp_jp *p, bool keep, fp_jv *out) {
  vscan *v = &p->v;
  size_t q = v->i, end, at;
  char why[96];
  bool plain = plain_string(v->t, v->n, q, &end);
  if (!plain && !check_string(v->t, v->n, q, &end, &at, why, sizeof why))
    return vfail(v, at, true, "%s", why);
  size_t raw = end - q - 2, dl = raw;
  if (plain && !keep) { /* the text's own bytes */
    *out = (fp_jv){.type = FP_JSTRING, .n = (uint32_t)raw, .s = v->t + q + 1};
    v->i = end;
    return true;
  }
  char *o = keep ? str_room(v, raw + 1) : scratch(v->a, &p->sbuf, &p->scap, raw + 1);
  if (!plain)
    decode_string(v->t, v->n, q, o, &dl);
  else
    memcpy(o, v->t + q + 1, raw);
  o[dl] = 0;
  if (keep) {
    v->sp -= raw - dl;
    v->sleft += raw - dl;
  }
  *out = (fp_jv){.type = FP_JSTRING, .n = (uint32_t)dl, .s = o};
  v->i = end;
  return true;
}

static bool jp_scalar(fp_jp *p, fp_jv *out, bool keep, bool whole) {
  vscan *v = &p->v;
  v->i = skip_ws(v->t, v->n, v->i);
  if (v->i >= v->n) return vfail(v, v->i, true, "invalid JSON: unexpected end of data");
  char ch = v->t[v->i];
  if (ch == '"') return jp_string(p, keep, out);
  if (ch == '{' || ch == '[') {
    if (whole) { /* built (in the arena) and dropped; the stacks freed */
      bool ok = v_value(v, v->nseg + 1, out);
      free(v->vs);
      free(v->ms);
      free(v->mo);
      v->vs = NULL, v->ms = NULL, v->mo = NULL;
      v->vcap = v->mcap = 0;
      out->n = 0;
      return ok;
    }
    if (v->nseg >= FP_JSON_MAX_DEPTH)
      return vfail(v, v->i, true, "invalid JSON: nesting deeper than %d", FP_JSON_MAX_DEPTH);
    pseg *sg = &v->segs[v->nseg];
    *sg = (pseg){ch == '{', (size_t)-1, 0};
    p->first[v->nseg++] = true;
    v->i++;
    *out = (fp_jv){.type = ch == '{' ? FP_JOBJECT : FP_JARRAY};
    return true;
  }
  if (ch == '-' || (ch >= '0' && ch <= '9')) return v_number(v, out);
  return v_value(v, v->nseg + 1, out);
}

bool fpi_jp_value(fp_jp *p, fp_jv *out, bool keep) { return !p->v.failed && jp_scalar(p, out, keep, false); }
bool fpi_jp_scalar(fp_jp *p, fp_jv *out, bool keep) { return !p->v.failed && jp_scalar(p, out, keep, true); }

int fpi_jp_next(fp_jp *p, const char **key, size_t *klen) {
  vscan *v = &p->v;
  if (v->failed || v->nseg == 0) return -1;
  const char *t = v->t;
  size_t n = v->n;
  pseg *sg = &v->segs[v->nseg - 1];
  char close = sg->is_obj ? '}' : ']';
  v->i = skip_ws(t, n, v->i);
  if (v->i < n && t[v->i] == close) {
    v->i++;
    v->nseg--;
    return 0;
  }
  if (!p->first[v->nseg - 1]) {
    if (v->i >= n || t[v->i] != ',')
      return vfail(v, v->i, !sg->is_obj, "invalid JSON: expected ',' or '%c' in %s, got %s", close,
                   sg->is_obj ? "object" : "array", got(v, v->i)),
             -1;
    v->i = skip_ws(t, n, v->i + 1);
    if (!sg->is_obj) sg->idx++;
  }
  p->first[v->nseg - 1] = false;
  if (!sg->is_obj) return 1;
  sg->key = (size_t)-1;
  if (v->i >= n || t[v->i] != '"')
    return vfail(v, v->i, false, "invalid JSON: expected a member name in double quotes, got %s", got(v, v->i)), -1;
  size_t q = v->i, end, at;
  char why[96];
  bool plain = plain_string(t, n, q, &end);
  if (!plain && !check_string(t, n, q, &end, &at, why, sizeof why)) return vfail(v, at, false, "%s", why), -1;
  size_t dl = end - q - 2;
  const char *o = t + q + 1;
  if (!plain) {
    char *k = scratch(v->a, &p->kbuf, &p->kcap, dl + 1);
    decode_string(t, n, q, k, &dl);
    o = k;
  }
  v->i = skip_ws(t, n, end);
  if (v->i >= n || t[v->i] != ':')
    return vfail(v, v->i, false, "invalid JSON: expected ':' after member name, got %s", got(v, v->i)), -1;
  v->i++;
  sg->key = q;
  *key = o;
  *klen = dl;
  return 1;
}

char fpi_jp_peek(fp_jp *p) {
  vscan *v = &p->v;
  v->i = skip_ws(v->t, v->n, v->i);
  return v->i < v->n ? v->t[v->i] : 0;
}

bool fpi_jp_end(fp_jp *p) {
  vscan *v = &p->v;
  if (v->failed) return false;
  v->i = skip_ws(v->t, v->n, v->i);
  return v->i >= v->n || vfail(v, v->i, false, "invalid JSON: unexpected data after the value");
}

const char *fpi_jp_ptr(fp_jp *p) {
  const vscan *v = &p->v;
  return path_string(v->a, v->t, v->n, v->segs, v->nseg, true);
}

const char *fpi_jp_ptr_container(fp_jp *p) {
  const vscan *v = &p->v;
  return path_string(v->a, v->t, v->n, v->segs, v->nseg > 0 ? v->nseg - 1 : 0, true);
}

size_t fpi_jp_pos(fp_jp *p) {
  vscan *v = &p->v;
  v->i = skip_ws(v->t, v->n, v->i);
  return v->i;
}

size_t fpi_jp_key_pos(const fp_jp *p) {
  const vscan *v = &p->v;
  FP_ASSERT(v->nseg > 0 && v->segs[v->nseg - 1].is_obj);
  return v->segs[v->nseg - 1].key;
}

bool fpi_jp_report(fp_jp *p, fp_diag *d) {
  const vscan *v = &p->v;
  FP_ASSERT(v->failed);
  fpi_diag_at(d, p->src, v->err_off, "%s: %s", v->err_ptr[0] ? v->err_ptr : "/", v->err_msg);
  return false;
}

void fpi_jp_mark(const fp_jp *p, fp_jp_mark *m) {
  const vscan *v = &p->v;
  const pseg *sg = &v->segs[v->nseg - 1];
  *m = (fp_jp_mark){v->i, sg->key, sg->idx, v->nseg, sg->is_obj, p->first[v->nseg - 1]};
}

void fpi_jp_seek(fp_jp *p, const fp_jp_mark *m) {
  vscan *v = &p->v;
  v->i = m->i;
  v->nseg = m->nseg;
  v->segs[m->nseg - 1] = (pseg){m->is_obj, m->key, m->idx};
  p->first[m->nseg - 1] = m->first;
}

/* ---- accessors ----------------------------------------------------------------- */
/* ptr, or the lazily built one for NULL */
static const char *at(fp_jctx *c, const char *ptr) {
  if (ptr) return ptr;
  FP_ASSERT(c->here);
  return c->here(c);
}

bool fpi_j_error(fp_jctx *c, const char *ptr, const char *fmt, ...) {
  ptr = at(c, ptr);
  va_list ap;
  va_start(ap, fmt);
  fpi_diag_vjson(c->d, c->src, ptr, fmt, ap);
  va_end(ap);
  return false;
}

const char *fpi_j_describe(fp_arena *a, const fp_jv *v) {
  switch (fpi_jv_type(v)) {
    case FP_JNULL: return "null";
    case FP_JBOOL: return v->b ? "true" : "false";
    case FP_JOBJECT: return "an object";
    case FP_JARRAY: return "an array";
    /* numbers as json-c printed them: integers in decimal, doubles as written */
    case FP_JINT: return v->big ? fpi_sprintf(a, "%" PRIu64, v->u) : fpi_sprintf(a, "%" PRId64, v->i);
    case FP_JDOUBLE: return fpi_sprintf(a, "%.*s", v->n < 40 ? (int)v->n : 40, v->text);
    case FP_JSTRING:
      if (!v->n) return "an empty string";
      if (v->n > 40) return fpi_sprintf(a, "\"%.37s...\"", v->s);
      return fpi_sprintf(a, "\"%s\"", v->s);
  }
  return "a value";
}

bool fpi_j_is_object(fp_jctx *c, const fp_jv *v, const char *ptr) {
  if (fpi_jv_is(v, FP_JOBJECT)) return true;
  return fpi_j_error(c, ptr, "expected an object, got %s", fpi_j_describe(c->a, v));
}

bool fpi_j_is_array(fp_jctx *c, const fp_jv *v, const char *ptr) {
  if (fpi_jv_is(v, FP_JARRAY)) return true;
  return fpi_j_error(c, ptr, "expected an array, got %s", fpi_j_describe(c->a, v));
}

/* ---- the members check (json.h) ---- */
void fpi_jkeys_init(fp_jkeys *k, const char *const *names, uint32_t required) {
  *k = (fp_jkeys){names, required, 0, -1};
}

static bool name_is(const char *name, const char *key, size_t kl) {
  return name[0] == (kl ? key[0] : 0) && !strncmp(name, key, kl) && !name[kl];
}

/* "unknown member 'k' (expected one of: ...)", and the closest name */
static const char *unknown_msg(fp_arena *a, const char *key, size_t kl, const char *const *names) {
  fp_sbuf b = {0};
  for (int k = 0; names[k]; k++) {
    if (k) fpi_sb_putn(&b, ", ", 2);
    fpi_sb_putn(&b, names[k], strlen(names[k]));
  }
  const char *near = fpi_closest_name(fpi_strndup(a, key, kl), names);
  int shown = kl > 60 ? 57 : (int)kl;
  const char *m = fpi_sprintf(a, "unknown member '%.*s%s' (expected one of: %s)%s%s%s", shown, key,
                              kl > 60 ? "..." : "", b.p ? b.p : "", near ? "; did you mean \"" : "", near ? near : "",
                              near ? "\"?" : "");
  free(b.p);
  return m;
}

int fpi_jkeys_member(fp_jkeys *k, fp_arena *a, const char *key, size_t kl, const char **msg) {
  int z = -1;
  const char *next = k->last >= 0 ? k->names[k->last + 1] : k->names[0];
  if (next && name_is(next, key, kl)) z = k->last + 1;
  for (int i = 0; k->names[i] && z < 0; i++)
    if (name_is(k->names[i], key, kl)) z = i;
  if (z < 0) {
    *msg = unknown_msg(a, key, kl, k->names);
    return -1;
  }
  k->last = z;
  if (z < 32) {
    if (k->seen >> z & 1) {
      *msg = fpi_sprintf(a, "duplicate member '%s'", k->names[z]);
      return -1;
    }
    k->seen |= 1u << z;
  }
  return z;
}

const char *fpi_j_missing_msg(fp_arena *a, const char *key) {
  return fpi_sprintf(a, "missing required member '%s'", key);
}

const char *fpi_jkeys_missing(const fp_jkeys *k, fp_arena *a) {
  for (int i = 0; i < 32 && k->names[i]; i++)
    if ((k->required >> i & 1) && !(k->seen >> i & 1)) return fpi_j_missing_msg(a, k->names[i]);
  return NULL;
}

/* the document's objects: their keys are unique (the parser saw to it),
 * so only unknown names are left to find */
bool fpi_j_keys(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *const *allowed) {
  if (!fpi_jv_is(obj, FP_JOBJECT)) return fpi_j_is_object(c, obj, ptr);
  fp_jkeys k;
  fpi_jkeys_init(&k, allowed, 0);
  for (size_t m = 0; m < obj->n; m++) {
    const char *msg;
    if (fpi_jkeys_member(&k, c->a, obj->mems[m].key, obj->mems[m].klen, &msg) >= 0) continue;
    return fpi_j_error(c, fpi_ptr_key(c->a, at(c, ptr), obj->mems[m].key), "%s", msg);
  }
  return true;
}

/* obj's member key, or NULL: in order up to FP_JV_LINEAR members, else
 * through the object's index */
static const fp_jmem *lookup(const fp_jv *obj, const char *key) {
  if (!fpi_jv_is(obj, FP_JOBJECT)) return NULL;
  size_t kl = strlen(key);
  if (obj->n <= FP_JV_LINEAR) {
    for (size_t m = 0; m < obj->n; m++)
      if (obj->mems[m].klen == kl && memcmp(obj->mems[m].key, key, kl) == 0) return &obj->mems[m];
    return NULL;
  }
  uint32_t h = (uint32_t)fpi_fnv1a(FP_FNV_INIT, key, kl);
  size_t cap = fpi_jv_index_cap(obj->n);
  for (size_t s = h & (cap - 1); obj->index[s]; s = (s + 1) & (cap - 1)) {
    const fp_jmem *m = &obj->mems[obj->index[s] - 1];
    if (m->hash == h && m->klen == kl && memcmp(m->key, key, kl) == 0) return m;
  }
  return NULL;
}

const fp_jv *fpi_j_get(const fp_jv *obj, const char *key) {
  const fp_jmem *m = lookup(obj, key);
  return m && m->val.type != FP_JNULL ? &m->val : NULL;
}

bool fpi_j_has(const fp_jv *obj, const char *key) { return lookup(obj, key) != NULL; }

/* obj's member key in *v. Its JSON pointer is built only when an error is
 * reported (VP below): a model of 45,000 params reads hundreds of
 * thousands of members, and formatting each one's pointer cost about a
 * tenth of the parse. false = stop with *ret. */
static bool member(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
                   const fp_jv **v, bool *ret) {
  if (!fpi_jv_is(obj, FP_JOBJECT)) {
    *ret = fpi_j_is_object(c, obj, ptr);
    return false;
  }
  const fp_jmem *m = lookup(obj, key);
  if (!m) {
    *ret = required ? fpi_j_error(c, ptr, "%s", fpi_j_missing_msg(c->a, key)) : true;
    return false;
  }
  *v = m->val.type != FP_JNULL ? &m->val : NULL;
  return true;
}
#define VP fpi_ptr_key(c->a, at(c, ptr), key) /* the member's pointer, for an error */

static const char *int_range(fp_arena *a, int64_t min, int64_t max) {
  if (min == INT64_MIN && max == INT64_MAX) return "an integer";
  if (max == INT64_MAX) return fpi_sprintf(a, "an integer >= %" PRId64, min);
  if (min == INT64_MIN) return fpi_sprintf(a, "an integer <= %" PRId64, max);
  return fpi_sprintf(a, "an integer in [%" PRId64 ", %" PRId64 "]", min, max);
}

bool fpi_j_int_v(fp_jctx *c, const fp_jv *v, const char *ptr, int64_t min, int64_t max, int64_t *out) {
  if (!fpi_jv_is(v, FP_JINT))
    return fpi_j_error(c, ptr, "expected %s, got %s", int_range(c->a, min, max), fpi_j_describe(c->a, v));
  if (v->big)
    return fpi_j_error(c, ptr, "expected %s, got %s (larger than the int64 maximum)",
                      int_range(c->a, min, max), fpi_j_describe(c->a, v));
  int64_t x = v->i;
  if (x < min || x > max)
    return fpi_j_error(c, ptr, "expected %s, got %" PRId64, int_range(c->a, min, max), x);
  *out = x;
  return true;
}

bool fpi_j_int(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
              int64_t min, int64_t max, int64_t *out) {
  const fp_jv *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  if (fpi_jv_is(v, FP_JINT) && !v->big && v->i >= min && v->i <= max) { /* the common case, no pointer */
    *out = v->i;
    return true;
  }
  return fpi_j_int_v(c, v, VP, min, max, out);
}

static const char *num_range(fp_arena *a, double min, double max) {
  bool lo = isfinite(min), hi = isfinite(max);
  if (!lo && !hi) return "a number";
  if (!hi) return fpi_sprintf(a, "a number >= %g", min);
  if (!lo) return fpi_sprintf(a, "a number <= %g", max);
  return fpi_sprintf(a, "a number in [%g, %g]", min, max);
}

bool fpi_j_num(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
              double min, double max, double *out) {
  const fp_jv *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  if (!fpi_jv_is(v, FP_JINT) && !fpi_jv_is(v, FP_JDOUBLE))
    return fpi_j_error(c, VP, "expected %s, got %s", num_range(c->a, min, max), fpi_j_describe(c->a, v));
  double x = fpi_jv_num(v);
  if (!isfinite(x) || x < min || x > max)
    return fpi_j_error(c, VP, "expected %s, got %s", num_range(c->a, min, max), fpi_j_describe(c->a, v));
  *out = x;
  return true;
}

bool fpi_j_bool(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required, bool *out) {
  const fp_jv *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  if (!fpi_jv_is(v, FP_JBOOL))
    return fpi_j_error(c, VP, "expected true or false, got %s", fpi_j_describe(c->a, v));
  *out = v->b;
  return true;
}

bool fpi_j_str_v(fp_jctx *c, const fp_jv *v, const char *ptr, const char **out) {
  if (!fpi_jv_is(v, FP_JSTRING) || v->n == 0)
    return fpi_j_error(c, ptr, "expected a non-empty string, got %s", fpi_j_describe(c->a, v));
  *out = v->s;
  return true;
}

bool fpi_j_str(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
              const char **out) {
  const fp_jv *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  if (fpi_jv_is(v, FP_JSTRING) && v->n > 0) {
    *out = v->s;
    return true;
  }
  return fpi_j_str_v(c, v, VP, out);
}

bool fpi_j_enum(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
               const char *const *names, int *out) {
  const fp_jv *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  const char *s = fpi_jv_str(v);
  if (s)
    for (int k = 0; names[k]; k++)
      if (!strcmp(names[k], s)) {
        *out = k;
        return true;
      }
  fp_sbuf b = {0};
  for (int k = 0; names[k]; k++) {
    if (k) fpi_sb_putn(&b, ", ", 2);
    fpi_sb_putn(&b, "\"", 1);
    fpi_sb_putn(&b, names[k], strlen(names[k]));
    fpi_sb_putn(&b, "\"", 1);
  }
  const char *near = s ? fpi_closest_name(s, names) : NULL;
  fpi_j_error(c, VP, "expected one of %s, got %s%s%s%s", b.p ? b.p : "", fpi_j_describe(c->a, v),
             near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
  free(b.p);
  return false;
}

bool fpi_j_arr(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
              const fp_jv **out, size_t *n) {
  const fp_jv *v;
  bool ret;
  if (!member(c, obj, ptr, key, required, &v, &ret)) return ret;
  if (!fpi_jv_is(v, FP_JARRAY) && !fpi_j_is_array(c, v, VP)) return false;
  *out = v;
  if (n) *n = v->n;
  return true;
}
