/* safetensors.c - the strict safetensors reader and the small writer of
 * safetensors.h.
 *
 * Opening reads the 8-byte length and the header only. The header is first
 * walked by a small strict JSON scanner of our own, which json-c's parser
 * does not replace: json-c accepts single-quoted strings and NaN even in
 * strict mode, keeps only the last of two members with the same name, and
 * cuts a name at an escaped \u0000. The scanner rejects all of these and
 * records, for every top-level member, its raw name and how many members
 * its value has, so that duplicates are caught at both levels by comparing
 * with what json-c kept. json-c then gives the tree that is checked member
 * by member. Every number is checked before it is used, in int64 with
 * overflow checks. */
#include "safetensors.h"

#include "base/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct fp_st_file {
  int fd;
  char *path;               /* for messages */
  int n;                    /* tensors */
  fp_st_tensor *t;          /* in file order */
  const fp_st_tensor **byname; /* sorted by name */
  char *names;              /* every name, NUL-terminated, one block */
};

/* ---- dtypes ---------------------------------------------------------------- */
static const struct {
  const char *name;
  fp_dtype t;
} st_dtypes[] = {
    {"F32", FP_F32}, {"BF16", FP_BF16}, {"F16", FP_F16}, {"F8_E4M3", FP_E4M3}, {"F8_E8M0", FP_E8M0}, {"U8", FP_U8},
};
#define N_ST_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

const char *fpi_st_dtype_name(fp_dtype t) {
  for (int i = 0; i < N_ST_DTYPES; i++)
    if (st_dtypes[i].t == t) return st_dtypes[i].name;
  return NULL;
}

static int dtype_size(fp_dtype t) {
  switch (t) {
#define X(e, s, n, r) \
  case FP_##e: return n;
    FP_DTYPES(X)
#undef X
  default: return 0;
  }
}

/* ---- messages ----------------------------------------------------------------- */
static void seterr(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void seterr(char *err, size_t errlen, const char *path, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  int k = snprintf(err, errlen, "%s: ", path);
  if (k < 0 || (size_t)k >= errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
  va_end(ap);
}

/* A name as a JSON pointer token for messages: "/" then the name with ~ and
 * / escaped (RFC 6901), bytes outside printable ASCII as \xNN, cut at about
 * 96 bytes with "...". s need not be NUL-terminated (len bytes). */
typedef struct {
  char s[128];
} ptrbuf;
static const char *ptr_tok(ptrbuf *b, const char *s, size_t len) {
  size_t o = 0;
  b->s[o++] = '/';
  for (size_t i = 0; i < len; i++) {
    if (o > 96) {
      memcpy(b->s + o, "...", 4);
      return b->s;
    }
    unsigned char c = (unsigned char)s[i];
    if (c == '~') o += (size_t)snprintf(b->s + o, 4, "~0");
    else if (c == '/') o += (size_t)snprintf(b->s + o, 4, "~1");
    else if (c < 0x20 || c >= 0x7f || c == '\\') o += (size_t)snprintf(b->s + o, 5, "\\x%02x", c);
    else b->s[o++] = (char)c;
  }
  b->s[o] = 0;
  return b->s;
}
static const char *ptr_name(ptrbuf *b, const char *name) { return ptr_tok(b, name, strlen(name)); }

/* ---- the strict scanner ------------------------------------------------------------ */
typedef struct {
  const char *key; /* raw text between the quotes (escapes not decoded) */
  size_t keylen;
  int members;     /* members of the value when it is an object, else -1 */
} rawmem;

typedef struct {
  const char *p, *begin, *end;
  const char *why; /* first failure */
  const char *at;
} jscan;

static bool jfail(jscan *s, const char *why) {
  if (!s->why) s->why = why, s->at = s->p;
  return false;
}
static void jws(jscan *s) {
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}
static bool jlit(jscan *s, const char *w) {
  size_t n = strlen(w);
  if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n) != 0) return jfail(s, "a JSON value expected");
  s->p += n;
  return true;
}
static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
/* a string at s->p; *nul set when it holds \u0000 */
static bool jstr(jscan *s, bool *nul) {
  if (s->p >= s->end || *s->p != '"') return jfail(s, "a string in double quotes expected");
  s->p++;
  while (s->p < s->end) {
    unsigned char c = (unsigned char)*s->p;
    if (c == '"') {
      s->p++;
      return true;
    }
    if (c < 0x20) return jfail(s, "control character in a string");
    s->p++;
    if (c != '\\') continue;
    if (s->p >= s->end) break;
    char e = *s->p;
    if (e == 'u') {
      if (s->end - s->p < 5) break;
      int v = 0;
      for (int i = 1; i <= 4; i++) {
        int h = hexval(s->p[i]);
        if (h < 0) return jfail(s, "bad \\u escape");
        v = v * 16 + h;
      }
      if (v == 0 && nul) *nul = true;
      s->p += 5;
    } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
      s->p++;
    } else {
      return jfail(s, "bad escape in a string");
    }
  }
  return jfail(s, "unterminated string");
}
static bool jdigits(jscan *s) {
  const char *q = s->p;
  while (s->p < s->end && *s->p >= '0' && *s->p <= '9') s->p++;
  return s->p > q || jfail(s, "digit expected");
}
static bool jnum(jscan *s) {
  if (s->p < s->end && *s->p == '-') s->p++;
  if (s->p < s->end && *s->p == '0') s->p++;
  else if (!jdigits(s)) return false;
  if (s->p < s->end && *s->p == '.') {
    s->p++;
    if (!jdigits(s)) return false;
  }
  if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
    s->p++;
    if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
    if (!jdigits(s)) return false;
  }
  return true;
}
static bool jvalue(jscan *s, int depth, int *members);
static bool jobject(jscan *s, int depth, int *members) {
  int n = 0;
  s->p++; /* '{' */
  jws(s);
  if (s->p < s->end && *s->p == '}') {
    s->p++;
    if (members) *members = 0;
    return true;
  }
  for (;;) {
    jws(s);
    bool nul = false;
    const char *k = s->p;
    if (!jstr(s, &nul)) return false;
    if (nul) {
      s->p = k;
      return jfail(s, "a member name holds \\u0000");
    }
    jws(s);
    if (s->p >= s->end || *s->p != ':') return jfail(s, "':' expected");
    s->p++;
    jws(s);
    if (!jvalue(s, depth + 1, NULL)) return false;
    n++;
    jws(s);
    if (s->p < s->end && *s->p == ',') {
      s->p++;
      continue;
    }
    if (s->p < s->end && *s->p == '}') {
      s->p++;
      if (members) *members = n;
      return true;
    }
    return jfail(s, "',' or '}' expected");
  }
}
static bool jvalue(jscan *s, int depth, int *members) {
  if (members) *members = -1;
  if (depth > 64) return jfail(s, "nested too deeply");
  if (s->p >= s->end) return jfail(s, "a JSON value expected");
  switch (*s->p) {
  case '{': return jobject(s, depth, members);
  case '[':
    s->p++;
    jws(s);
    if (s->p < s->end && *s->p == ']') {
      s->p++;
      return true;
    }
    for (;;) {
      jws(s);
      if (!jvalue(s, depth + 1, NULL)) return false;
      jws(s);
      if (s->p < s->end && *s->p == ',') {
        s->p++;
        continue;
      }
      if (s->p < s->end && *s->p == ']') {
        s->p++;
        return true;
      }
      return jfail(s, "',' or ']' expected");
    }
  case '"': return jstr(s, NULL);
  case 't': return jlit(s, "true");
  case 'f': return jlit(s, "false");
  case 'n': return jlit(s, "null");
  default:
    if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')) return jnum(s);
    return jfail(s, "a JSON value expected");
  }
}

/* The whole header: one object, then only whitespace. Fills *mem (malloc'd)
 * with the top-level members in order. */
static bool jtop(jscan *s, rawmem **mem, int *nmem) {
  int cap = 0;
  *mem = NULL;
  *nmem = 0;
  jws(s);
  if (s->p >= s->end || *s->p != '{') return jfail(s, "the header must be a JSON object");
  s->p++;
  jws(s);
  if (s->p < s->end && *s->p == '}') s->p++;
  else
    for (;;) {
      jws(s);
      rawmem m = {s->p + 1, 0, -1};
      bool nul = false;
      if (!jstr(s, &nul)) return false;
      if (nul) {
        s->p = m.key - 1;
        return jfail(s, "a tensor name holds \\u0000");
      }
      m.keylen = (size_t)(s->p - 1 - m.key);
      jws(s);
      if (s->p >= s->end || *s->p != ':') return jfail(s, "':' expected");
      s->p++;
      jws(s);
      if (!jvalue(s, 1, &m.members)) return false;
      if (*nmem == cap) {
        if (cap > (1 << 28)) return jfail(s, "too many members");
        cap = cap ? 2 * cap : 64;
        rawmem *g = realloc(*mem, (size_t)cap * sizeof *g);
        if (!g) return jfail(s, "out of memory");
        *mem = g;
      }
      (*mem)[(*nmem)++] = m;
      jws(s);
      if (s->p < s->end && *s->p == ',') {
        s->p++;
        continue;
      }
      if (s->p < s->end && *s->p == '}') {
        s->p++;
        break;
      }
      return jfail(s, "',' or '}' expected");
    }
  jws(s);
  if (s->p != s->end) return jfail(s, "only whitespace may follow the header object");
  return true;
}

static int rawcmp(const void *a, const void *b) {
  const rawmem *x = a, *y = b;
  if (x->keylen != y->keylen) return x->keylen < y->keylen ? -1 : 1;
  return memcmp(x->key, y->key, x->keylen);
}

/* ---- reading helpers ---------------------------------------------------------------- */
/* pread n bytes at off; returns the bytes read (< n only at end of file) or -1 */
static int64_t pread_full(int fd, void *buf, int64_t n, int64_t off) {
  int64_t got = 0;
  while (got < n) {
    size_t want = (size_t)(n - got > (1 << 30) ? (1 << 30) : n - got);
    ssize_t r = pread(fd, (char *)buf + got, want, (off_t)(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += r;
  }
  return got;
}

/* a JSON integer >= 0 that fits int64 (json-c saturates larger ones) */
static const char *get_count(json_object *o, int64_t *out) {
  if (!json_object_is_type(o, json_type_int)) return "must be an integer";
  int64_t v = json_object_get_int64(o);
  if (v < 0) return "must not be negative";
  if (v == INT64_MAX && json_object_get_uint64(o) != (uint64_t)INT64_MAX) return "is too large";
  *out = v;
  return NULL;
}

static int by_offset(const void *a, const void *b) {
  const fp_st_tensor *x = a, *y = b;
  int64_t xb = x->offset, yb = y->offset, xe = xb + x->nbytes, ye = yb + y->nbytes;
  if (xb != yb) return xb < yb ? -1 : 1;
  if (xe != ye) return xe < ye ? -1 : 1;
  return strcmp(x->name, y->name);
}
static int by_name(const void *a, const void *b) {
  const fp_st_tensor *const *x = a, *const *y = b;
  return strcmp((*x)->name, (*y)->name);
}

/* One tensor entry (an object; its duplicate members already ruled out):
 * fills T's dtype, shape, nbytes and offset (relative to the data buffer).
 * P is the entry's JSON pointer for messages. */
static bool tensor_entry(const char *path, const char *P, json_object *val, int64_t datalen, fp_st_tensor *T,
                         char *err, size_t errlen) {
  ptrbuf pb2;
  json_object *jd = NULL, *js = NULL, *jo = NULL;
  json_object_object_foreach(val, ik, iv) {
    if (strcmp(ik, "dtype") == 0) jd = iv;
    else if (strcmp(ik, "shape") == 0) js = iv;
    else if (strcmp(ik, "data_offsets") == 0) jo = iv;
    else {
      seterr(err, errlen, path, "%s%s: unknown member (a tensor has dtype, shape, data_offsets)", P,
             ptr_name(&pb2, ik));
      return false;
    }
  }
  if (!jd || !js || !jo) {
    seterr(err, errlen, path, "%s: missing \"%s\"", P, !jd ? "dtype" : !js ? "shape" : "data_offsets");
    return false;
  }
  /* dtype */
  if (!json_object_is_type(jd, json_type_string)) {
    seterr(err, errlen, path, "%s/dtype: must be a string", P);
    return false;
  }
  const char *ds = json_object_get_string(jd);
  int k = 0;
  while (k < N_ST_DTYPES && strcmp(ds, st_dtypes[k].name) != 0) k++;
  if (k == N_ST_DTYPES || strlen(ds) != (size_t)json_object_get_string_len(jd)) {
    ptrbuf db;
    seterr(err, errlen, path,
           "%s/dtype: unsupported dtype \"%s\" (supported: F32, BF16, F16, F8_E4M3, F8_E8M0, U8)", P,
           ptr_name(&db, ds) + 1);
    return false;
  }
  T->dtype = st_dtypes[k].t;
  /* shape */
  if (!json_object_is_type(js, json_type_array)) {
    seterr(err, errlen, path, "%s/shape: must be an array of integers", P);
    return false;
  }
  size_t nd = json_object_array_length(js);
  if (nd > FP_ST_MAX_DIMS) {
    seterr(err, errlen, path, "%s/shape: %zu dimensions, at most %d supported", P, nd, FP_ST_MAX_DIMS);
    return false;
  }
  T->ndim = (int)nd;
  int64_t numel = 1;
  bool zero = false, ovf = false;
  for (size_t d = 0; d < nd; d++) {
    json_object *e = json_object_array_get_idx(js, d);
    const char *why = get_count(e, &T->shape[d]);
    if (why) {
      seterr(err, errlen, path, "%s/shape/%zu: a dimension %s", P, d, why);
      return false;
    }
    if (T->shape[d] == 0) zero = true;
    else if (!ovf && !fpi_mul64(numel, T->shape[d], &numel)) ovf = true;
  }
  int64_t nbytes = 0;
  if (!zero && (ovf || !fpi_mul64(numel, dtype_size(T->dtype), &nbytes))) {
    seterr(err, errlen, path, "%s/shape: the tensor's size overflows int64", P);
    return false;
  }
  /* data_offsets */
  if (!json_object_is_type(jo, json_type_array) || json_object_array_length(jo) != 2) {
    seterr(err, errlen, path, "%s/data_offsets: must be an array of two integers [begin, end]", P);
    return false;
  }
  int64_t b, e;
  const char *why = get_count(json_object_array_get_idx(jo, 0), &b);
  if (why) {
    seterr(err, errlen, path, "%s/data_offsets/0: begin %s", P, why);
    return false;
  }
  why = get_count(json_object_array_get_idx(jo, 1), &e);
  if (why) {
    seterr(err, errlen, path, "%s/data_offsets/1: end %s", P, why);
    return false;
  }
  if (e < b) {
    seterr(err, errlen, path, "%s/data_offsets: end %lld is before begin %lld", P, (long long)e, (long long)b);
    return false;
  }
  if (e > datalen) {
    seterr(err, errlen, path, "%s/data_offsets: end %lld is past the data buffer (%lld bytes)", P, (long long)e,
           (long long)datalen);
    return false;
  }
  if (e - b != nbytes) {
    seterr(err, errlen, path, "%s/data_offsets: [%lld, %lld) is %lld bytes, but the shape and dtype %s need %lld", P,
           (long long)b, (long long)e, (long long)(e - b), st_dtypes[k].name, (long long)nbytes);
    return false;
  }
  T->offset = b; /* relative; fpi_st_open makes it absolute */
  T->nbytes = nbytes;
  return true;
}

/* ---- open ------------------------------------------------------------------------------ */
fp_st_file *fpi_st_open(const char *path, char *err, size_t errlen) {
  fp_st_file *f = NULL;
  char *hdr = NULL;
  rawmem *mem = NULL;
  int nmem = 0;
  json_object *root = NULL;
  json_tokener *tok = NULL;
  fp_st_tensor *t = NULL;
  ptrbuf pb, pb2;
  bool ok = false;

  if (err && errlen) err[0] = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* O_NONBLOCK: a FIFO must not hang us */
  if (fd < 0) {
    seterr(err, errlen, path, "cannot open: %s", strerror(errno));
    return NULL;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    seterr(err, errlen, path, "cannot stat: %s", strerror(errno));
    goto out;
  }
  if (!S_ISREG(sb.st_mode)) {
    seterr(err, errlen, path, "not a regular file");
    goto out;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  int64_t size = (int64_t)sb.st_size;

  /* the header length */
  unsigned char lb[8];
  if (size < 8) {
    seterr(err, errlen, path, "file is %lld bytes, too short for the 8-byte header length", (long long)size);
    goto out;
  }
  errno = 0;
  if (pread_full(fd, lb, 8, 0) != 8) {
    seterr(err, errlen, path, "cannot read the header length: %s", errno ? strerror(errno) : "file ended");
    goto out;
  }
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | lb[i];
  if (hl > (uint64_t)FP_ST_MAX_HEADER) {
    seterr(err, errlen, path, "header length %llu exceeds the %d-byte limit", (unsigned long long)hl,
           FP_ST_MAX_HEADER);
    goto out;
  }
  if ((int64_t)hl > size - 8) {
    seterr(err, errlen, path, "header length %llu runs past the end of the file (%lld bytes after the length)",
           (unsigned long long)hl, (long long)(size - 8));
    goto out;
  }
  int64_t N = (int64_t)hl, data0 = 8 + N, datalen = size - data0;
  if (N < 2) {
    seterr(err, errlen, path, "header length %lld is too short for a JSON object", (long long)N);
    goto out;
  }
  hdr = malloc((size_t)N + 1);
  if (!hdr) {
    seterr(err, errlen, path, "out of memory for a %lld-byte header", (long long)N);
    goto out;
  }
  errno = 0;
  if (pread_full(fd, hdr, N, 8) != N) {
    seterr(err, errlen, path, "cannot read the header: %s", errno ? strerror(errno) : "file ended");
    goto out;
  }
  hdr[N] = 0;
  if (hdr[0] != '{') {
    seterr(err, errlen, path, "header does not start with '{'");
    goto out;
  }
  if (memchr(hdr, 0, (size_t)N)) {
    seterr(err, errlen, path, "header holds a NUL byte at header byte %lld",
           (long long)((const char *)memchr(hdr, 0, (size_t)N) - hdr));
    goto out;
  }

  /* UTF-8 as RFC 3629 has it (json-c lets overlong forms and surrogates by) */
  size_t bad = fpi_utf8_invalid(hdr, (size_t)N);
  if (bad < (size_t)N) {
    seterr(err, errlen, path, "header rejected at header byte %lld: invalid UTF-8 (byte 0x%02x)", (long long)bad,
           (unsigned char)hdr[bad]);
    goto out;
  }
  /* strict JSON, and the raw member list */
  jscan sc = {hdr, hdr, hdr + N, NULL, NULL};
  if (!jtop(&sc, &mem, &nmem)) {
    seterr(err, errlen, path, "header rejected at header byte %lld: %s", (long long)(sc.at - hdr), sc.why);
    goto out;
  }
  tok = json_tokener_new();
  if (!tok) {
    seterr(err, errlen, path, "out of memory");
    goto out;
  }
  int flags = JSON_TOKENER_STRICT;
#ifdef JSON_TOKENER_VALIDATE_UTF8
  flags |= JSON_TOKENER_VALIDATE_UTF8;
#endif
  json_tokener_set_flags(tok, flags);
  root = json_tokener_parse_ex(tok, hdr, (int)N);
  enum json_tokener_error je = json_tokener_get_error(tok);
  if (!root || je != json_tokener_success) {
    seterr(err, errlen, path, "header is not valid JSON: %s",
           je == json_tokener_continue ? "it ends early" : json_tokener_error_desc(je));
    goto out;
  }
  if (!json_object_is_type(root, json_type_object)) {
    seterr(err, errlen, path, "the header must be a JSON object");
    goto out;
  }
  if (json_object_object_length(root) != nmem) {
    qsort(mem, (size_t)nmem, sizeof *mem, rawcmp);
    for (int i = 1; i < nmem; i++)
      if (rawcmp(&mem[i - 1], &mem[i]) == 0) {
        seterr(err, errlen, path, "%s: duplicate name in the header", ptr_tok(&pb, mem[i].key, mem[i].keylen));
        goto out;
      }
    seterr(err, errlen, path, "two header members have the same name once their escapes are decoded");
    goto out;
  }

  /* each member */
  t = calloc((size_t)(nmem ? nmem : 1), sizeof *t);
  if (!t) {
    seterr(err, errlen, path, "out of memory");
    goto out;
  }
  int nt = 0, i = -1;
  size_t namebytes = 0;
  bool have_meta = false;
  json_object_object_foreach(root, key, val) {
    i++;
    const rawmem *rm = &mem[i];
    const char *P = ptr_name(&pb, key);
    if (!memchr(rm->key, '\\', rm->keylen) && (strlen(key) != rm->keylen || memcmp(key, rm->key, rm->keylen))) {
      seterr(err, errlen, path, "%s: header member order could not be matched (internal)", P);
      goto out;
    }
    bool is_obj = json_object_is_type(val, json_type_object);
    if (is_obj && json_object_object_length(val) != rm->members) {
      seterr(err, errlen, path, "%s: duplicate member name", P);
      goto out;
    }
    if (strcmp(key, "__metadata__") == 0) {
      if (have_meta) { /* cannot happen after the duplicate check; kept for safety */
        seterr(err, errlen, path, "/__metadata__: given twice");
        goto out;
      }
      have_meta = true;
      if (!is_obj) {
        seterr(err, errlen, path, "/__metadata__: must be an object of strings");
        goto out;
      }
      json_object_object_foreach(val, mk, mv) {
        if (!json_object_is_type(mv, json_type_string)) {
          seterr(err, errlen, path, "/__metadata__%s: must be a string", ptr_name(&pb2, mk));
          goto out;
        }
      }
      continue;
    }
    if (!is_obj) {
      seterr(err, errlen, path, "%s: a tensor entry must be an object", P);
      goto out;
    }
    fp_st_tensor *T = &t[nt];
    T->name = key; /* json-c's copy until the pool is built */
    if (!tensor_entry(path, P, val, datalen, T, err, errlen)) goto out;
    namebytes += strlen(key) + 1;
    nt++;
  }

  /* the tensors must tile the data buffer: no overlap, no hole, nothing after */
  qsort(t, (size_t)nt, sizeof *t, by_offset);
  int64_t pos = 0;
  for (int j = 0; j < nt; j++) {
    if (t[j].offset < pos) {
      seterr(err, errlen, path, "%s/data_offsets: [%lld, %lld) overlaps %s", ptr_name(&pb, t[j].name),
             (long long)t[j].offset, (long long)(t[j].offset + t[j].nbytes), ptr_name(&pb2, t[j - 1].name));
      goto out;
    }
    if (t[j].offset > pos) {
      seterr(err, errlen, path, "data bytes [%lld, %lld) belong to no tensor (before %s); the format allows no holes",
             (long long)pos, (long long)t[j].offset, ptr_name(&pb, t[j].name));
      goto out;
    }
    pos = t[j].offset + t[j].nbytes;
  }
  if (pos != datalen) {
    seterr(err, errlen, path, "%lld bytes after the last tensor's data belong to no tensor",
           (long long)(datalen - pos));
    goto out;
  }

  /* the file handle: names copied out of json-c into one block */
  f = calloc(1, sizeof *f);
  if (!f) {
    seterr(err, errlen, path, "out of memory");
    goto out;
  }
  f->fd = fd;
  f->n = nt;
  f->t = t;
  f->path = strdup(path);
  f->names = malloc(namebytes ? namebytes : 1);
  f->byname = malloc((size_t)(nt ? nt : 1) * sizeof *f->byname);
  if (!f->path || !f->names || !f->byname) {
    seterr(err, errlen, path, "out of memory");
    goto out;
  }
  char *q = f->names;
  for (int j = 0; j < nt; j++) {
    size_t l = strlen(t[j].name) + 1;
    memcpy(q, t[j].name, l);
    t[j].name = q;
    q += l;
    t[j].offset += data0;
    f->byname[j] = &t[j];
  }
  qsort(f->byname, (size_t)nt, sizeof *f->byname, by_name);
  for (int j = 1; j < nt; j++)
    if (strcmp(f->byname[j - 1]->name, f->byname[j]->name) == 0) {
      seterr(err, errlen, path, "%s: duplicate name in the header", ptr_name(&pb, f->byname[j]->name));
      goto out;
    }
  ok = true;

out:
  free(hdr);
  free(mem);
  if (tok) json_tokener_free(tok);
  json_object_put(root);
  if (ok) return f;
  if (f) {
    free(f->path);
    free(f->names);
    free(f->byname);
    free(f);
  }
  free(t);
  close(fd);
  return NULL;
}

int fpi_st_count(const fp_st_file *f) { return f ? f->n : 0; }

const fp_st_tensor *fpi_st_get(const fp_st_file *f, int i) {
  return f && i >= 0 && i < f->n ? &f->t[i] : NULL;
}

static int find_cmp(const void *key, const void *elem) {
  const fp_st_tensor *const *t = elem;
  return strcmp((const char *)key, (*t)->name);
}

const fp_st_tensor *fpi_st_find(const fp_st_file *f, const char *name) {
  if (!f || !name || f->n == 0) return NULL;
  const fp_st_tensor *const *r = bsearch(name, f->byname, (size_t)f->n, sizeof *f->byname, find_cmp);
  return r ? *r : NULL;
}

bool fpi_st_read(fp_st_file *f, const fp_st_tensor *t, int64_t at, void *dst, int64_t nbytes, char *err,
                size_t errlen) {
  ptrbuf pb;
  if (!f) {
    if (err && errlen) snprintf(err, errlen, "fpi_st_read: no file");
    return false;
  }
  uintptr_t lo = (uintptr_t)f->t, hi = (uintptr_t)(f->t + f->n), p = (uintptr_t)t;
  if (!t || p < lo || p >= hi || (p - lo) % sizeof *t != 0) {
    seterr(err, errlen, f->path, "fpi_st_read: the tensor is not one of this file's");
    return false;
  }
  if (at < 0 || nbytes < 0 || at > t->nbytes || nbytes > t->nbytes - at) {
    seterr(err, errlen, f->path, "%s: cannot read %lld bytes at byte %lld: the tensor has %lld",
           ptr_name(&pb, t->name), (long long)nbytes, (long long)at, (long long)t->nbytes);
    return false;
  }
  if (nbytes == 0) return true;
  errno = 0;
  int64_t got = pread_full(f->fd, dst, nbytes, t->offset + at);
  if (got != nbytes) {
    if (got < 0)
      seterr(err, errlen, f->path, "%s: read failed: %s", ptr_name(&pb, t->name), strerror(errno));
    else
      seterr(err, errlen, f->path, "%s: short read: the file ends %lld bytes into the %lld asked for (truncated?)",
             ptr_name(&pb, t->name), (long long)got, (long long)nbytes);
    return false;
  }
  return true;
}

void fpi_st_close(fp_st_file *f) {
  if (!f) return;
  close(f->fd);
  free(f->t);
  free(f->byname);
  free(f->names);
  free(f->path);
  free(f);
}

/* ---- write ------------------------------------------------------------------------------- */
static bool write_full(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t r = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= (size_t)r;
  }
  return true;
}

static int name_ptr_cmp(const void *a, const void *b) {
  const char *const *x = a, *const *y = b;
  return strcmp(*x, *y);
}

bool fpi_st_write(const char *path, int n, const fp_st_tensor *tensors, const void *const *data, char *err,
                 size_t errlen) {
  ptrbuf pb;
  bool ok = false, created = false;
  int fd = -1;
  json_object *root = NULL;
  int64_t *sizes = NULL;
  const char **names = NULL;
  if (err && errlen) err[0] = 0;
  if (n < 0 || (n > 0 && !tensors)) {
    seterr(err, errlen, path, "no tensors given");
    return false;
  }
  sizes = calloc((size_t)(n ? n : 1), sizeof *sizes);
  names = calloc((size_t)(n ? n : 1), sizeof *names);
  root = json_object_new_object();
  if (!sizes || !names || !root) {
    seterr(err, errlen, path, "out of memory");
    goto out;
  }
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    const fp_st_tensor *T = &tensors[i];
    if (!T->name) {
      seterr(err, errlen, path, "tensor %d has no name", i);
      goto out;
    }
    const char *P = ptr_name(&pb, T->name);
    if (strcmp(T->name, "__metadata__") == 0) {
      seterr(err, errlen, path, "%s: the name is reserved", P);
      goto out;
    }
    const char *dn = fpi_st_dtype_name(T->dtype);
    if (!dn) {
      seterr(err, errlen, path, "%s: dtype %d has no safetensors name", P, (int)T->dtype);
      goto out;
    }
    if (T->ndim < 0 || T->ndim > FP_ST_MAX_DIMS) {
      seterr(err, errlen, path, "%s: ndim %d is not in 0..%d", P, T->ndim, FP_ST_MAX_DIMS);
      goto out;
    }
    int64_t numel = 1;
    bool zero = false, ovf = false;
    json_object *shape = json_object_new_array();
    json_object *info = json_object_new_object();
    json_object *offs = json_object_new_array();
    if (!shape || !info || !offs) {
      json_object_put(shape), json_object_put(info), json_object_put(offs);
      seterr(err, errlen, path, "out of memory");
      goto out;
    }
    json_object_object_add(info, "dtype", json_object_new_string(dn));
    json_object_object_add(info, "shape", shape);
    json_object_object_add(info, "data_offsets", offs);
    json_object_object_add(root, T->name, info);
    for (int d = 0; d < T->ndim; d++) {
      if (T->shape[d] < 0) {
        seterr(err, errlen, path, "%s/shape/%d: dimension %lld is negative", P, d, (long long)T->shape[d]);
        goto out;
      }
      if (T->shape[d] == 0) zero = true;
      else if (!ovf && !fpi_mul64(numel, T->shape[d], &numel)) ovf = true;
      json_object_array_add(shape, json_object_new_int64(T->shape[d]));
    }
    if (!zero && (ovf || !fpi_mul64(numel, dtype_size(T->dtype), &sizes[i]))) {
      seterr(err, errlen, path, "%s/shape: the tensor's size overflows int64", P);
      goto out;
    }
    if (sizes[i] > 0 && (!data || !data[i])) {
      seterr(err, errlen, path, "%s: no data for %lld bytes", P, (long long)sizes[i]);
      goto out;
    }
    int64_t end;
    if (!fpi_add64(off, sizes[i], &end)) {
      seterr(err, errlen, path, "%s: the file would pass int64 bytes", P);
      goto out;
    }
    json_object_array_add(offs, json_object_new_int64(off));
    json_object_array_add(offs, json_object_new_int64(end));
    off = end;
    names[i] = T->name;
  }
  qsort(names, (size_t)n, sizeof *names, name_ptr_cmp);
  for (int i = 1; i < n; i++)
    if (strcmp(names[i - 1], names[i]) == 0) {
      seterr(err, errlen, path, "%s: two tensors have this name", ptr_name(&pb, names[i]));
      goto out;
    }

  size_t hlen;
  const char *h = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                                    &hlen);
  if (!h) {
    seterr(err, errlen, path, "out of memory");
    goto out;
  }
  size_t padded = (hlen + 7) / 8 * 8; /* the data starts 8-aligned: 8 + padded */
  if (padded > (size_t)FP_ST_MAX_HEADER) {
    seterr(err, errlen, path, "header of %zu bytes exceeds the %d-byte limit", padded, FP_ST_MAX_HEADER);
    goto out;
  }
  unsigned char lb[8];
  for (int i = 0; i < 8; i++) lb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    seterr(err, errlen, path, "cannot create: %s", strerror(errno));
    goto out;
  }
  created = true;
  static const char spaces[8] = "        ";
  bool wok = write_full(fd, lb, 8) && write_full(fd, h, hlen) && write_full(fd, spaces, padded - hlen);
  for (int i = 0; wok && i < n; i++)
    if (sizes[i] > 0) wok = write_full(fd, data[i], (size_t)sizes[i]);
  if (!wok) {
    seterr(err, errlen, path, "write failed: %s", strerror(errno));
    goto out;
  }
  if (close(fd) != 0) {
    fd = -1;
    seterr(err, errlen, path, "write failed: %s", strerror(errno));
    goto out;
  }
  fd = -1;
  ok = true;

out:
  if (fd >= 0) close(fd);
  if (!ok && created) unlink(path);
  json_object_put(root);
  free(sizes);
  free(names);
  return ok;
}
