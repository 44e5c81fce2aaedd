/* parse.c - reads the .fpir text form (see print.c and docs/ir.md) back
 * into a program.
 *
 * A line-at-a-time recursive-descent reader: the first word of a line says
 * what it is (a header key, a table declaration, `off`/`cnt` rows of an
 * extent table, `segment`, or an op: an optional index then a stream name).
 * `#` starts a comment anywhere outside a quoted string; blank lines are
 * ignored. Names are resolved against what was declared before them, so a
 * file reads top to bottom. The reader checks syntax, names and the ranges
 * of the C types; whether the program makes sense is fpi_ir_verify's job.
 *
 * It is meant to survive any input: every number is range-checked, nothing
 * is allocated in proportion to a count the text claims (tables grow with
 * the values actually present), and the first error stops it with
 * "file:line:col: error: message". */
#include "irpriv.h"
#include "../base/utf8.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

enum { NM_COMM, NM_TAB, NM_BUF, NM_MOD, NM_BUCKET, NM_N };
static const char *const nm_what[NM_N] = {"communicator", "table", "buffer", "module", "bucket"};

typedef struct parser {
  fp_arena *a;
  fp_diag *d;
  const fp_src *src;
  const char *t;     /* the text */
  size_t n;          /* its length */
  size_t pos;        /* cursor */
  size_t bol, eol;   /* the current line: [bol, eol) */
  int32_t line;
  fp_prog *p;
  fp_namemap names[NM_N];
  bool seen_fpir;
  bool seen_optim; /* an "optimizer" line was read */
  /* the extent table being read (its off/cnt rows follow its header) */
  bool tab_open;
  const char *tab_name;
  int64_t tab_n;
  size_t tab_at;     /* offset of its header, for errors */
  int32_t tab_line;
  int64_t *tab_off, *tab_cnt;
  int64_t noff, ncnt, cap_off, cap_cnt;
} parser;

/* ---- errors ------------------------------------------------------------------ */
static bool fail(parser *ps, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(parser *ps, size_t at, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fpi_diag_at(ps->d, ps->src, at, "%s", msg);
  return false;
}

/* a short printable quote of the text at [at, at+len) */
static const char *excerpt(parser *ps, size_t at, size_t len) {
  if (at >= ps->eol) return "end of line";
  if (len > 40) len = 40;
  char *s = fpi_alloc(ps->a, len * 4 + 3);
  size_t k = 0;
  s[k++] = '\'';
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)ps->t[at + i];
    if (c < 0x20 || c >= 0x7f) k += (size_t)snprintf(s + k, 5, "\\x%02x", c);
    else s[k++] = (char)c;
  }
  s[k++] = '\'';
  s[k] = 0;
  return s;
}

/* ---- scanning ------------------------------------------------------------------ */
static void skip_blank(parser *ps) {
  while (ps->pos < ps->eol) {
    char c = ps->t[ps->pos];
    if (c == ' ' || c == '\t' || c == '\r') {
      ps->pos++;
    } else if (c == '#') {
      ps->pos = ps->eol;
    } else {
      break;
    }
  }
}

static bool at_eol(parser *ps) {
  skip_blank(ps);
  return ps->pos >= ps->eol;
}

static bool is_atom_char(char c) {
  return !(c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '#' || c == '"' || c == '[' || c == ']' ||
           c == '(' || c == ')' || c == '=' || c == ',' || c == '@' || c == 0);
}

/* a run of atom characters at the cursor (after blanks); len 0 if none */
static size_t atom(parser *ps, const char **s) {
  skip_blank(ps);
  size_t b = ps->pos;
  while (ps->pos < ps->eol && is_atom_char(ps->t[ps->pos])) ps->pos++;
  *s = ps->t + b;
  return ps->pos - b;
}

static bool atom_is(const char *s, size_t len, const char *word) {
  return strlen(word) == len && !memcmp(s, word, len);
}

/* the atom as a C string, for table lookups (longer ones never match) */
static const char *atom_cstr(const char *s, size_t len, char buf[64]) {
  if (len >= 64) len = 63;
  memcpy(buf, s, len);
  buf[len] = 0;
  return buf;
}

/* the next character must end a field: blank, comment or end of line */
static bool end_of_field(parser *ps) {
  if (ps->pos >= ps->eol) return true;
  char c = ps->t[ps->pos];
  if (c == ' ' || c == '\t' || c == '\r' || c == '#') return true;
  return fail(ps, ps->pos, "unexpected %s after the value", excerpt(ps, ps->pos, 1));
}

static bool expect_char(parser *ps, char c) {
  if (ps->pos < ps->eol && ps->t[ps->pos] == c) {
    ps->pos++;
    return true;
  }
  return fail(ps, ps->pos, "expected '%c', found %s", c, excerpt(ps, ps->pos, 1));
}

static bool expect_eol(parser *ps) {
  if (at_eol(ps)) return true;
  const char *s;
  size_t at = ps->pos, len = atom(ps, &s);
  return fail(ps, at, "unexpected %s", excerpt(ps, at, len ? len : 1));
}

/* [-+]?[0-9]+ at the cursor (no blanks skipped), in [min, max] */
static bool parse_int(parser *ps, int64_t min, int64_t max, int64_t *out, const char *what) {
  size_t at = ps->pos, i = at;
  bool neg = false;
  if (i < ps->eol && (ps->t[i] == '-' || ps->t[i] == '+')) neg = ps->t[i++] == '-';
  if (i >= ps->eol || ps->t[i] < '0' || ps->t[i] > '9')
    return fail(ps, at, "expected an integer (%s), found %s", what, excerpt(ps, at, 1));
  uint64_t v = 0;
  bool over = false;
  for (; i < ps->eol && ps->t[i] >= '0' && ps->t[i] <= '9'; i++) {
    unsigned dgt = (unsigned)(ps->t[i] - '0');
    if (v > (UINT64_MAX - dgt) / 10) over = true;
    else v = v * 10 + dgt;
  }
  ps->pos = i;
  if (over || (!neg && v > (uint64_t)INT64_MAX) || (neg && v > (uint64_t)INT64_MAX + 1))
    return fail(ps, at, "%s: integer out of range", what);
  int64_t x = neg ? (int64_t)(0 - v) : (int64_t)v;
  if (x < min || x > max)
    return fail(ps, at, "%s: %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", what, x, min, max);
  *out = x;
  return true;
}

static bool parse_i32(parser *ps, int32_t *out, const char *what) {
  int64_t v;
  if (!parse_int(ps, INT32_MIN, INT32_MAX, &v, what)) return false;
  *out = (int32_t)v;
  return true;
}

static bool parse_double(parser *ps, double *out, const char *what) {
  const char *s;
  size_t at = ps->pos, len = atom(ps, &s);
  char buf[64];
  if (len == 0 || len >= sizeof buf) return fail(ps, at, "expected a number (%s)", what);
  memcpy(buf, s, len);
  buf[len] = 0;
  char *end;
  errno = 0;
  double v = strtod(buf, &end);
  if (*end || end == buf) return fail(ps, at, "expected a number (%s), found %s", what, excerpt(ps, at, len));
  if (errno == ERANGE && (v > 1 || v < -1)) return fail(ps, at, "%s: number out of range", what);
  *out = v;
  return true;
}

/* a quoted string at the cursor, escapes decoded, into the arena */
static bool parse_quoted(parser *ps, const char **out) {
  size_t at = ps->pos;
  if (!expect_char(ps, '"')) return false;
  char *buf = fpi_alloc(ps->a, ps->eol - ps->pos + 1); /* decoded is never longer */
  size_t k = 0;
  while (ps->pos < ps->eol && ps->t[ps->pos] != '"') {
    char c = ps->t[ps->pos++];
    if (c == 0) return fail(ps, ps->pos - 1, "NUL byte in a string");
    if (c != '\\') {
      buf[k++] = c;
      continue;
    }
    if (ps->pos >= ps->eol) break;
    char e = ps->t[ps->pos++];
    switch (e) {
      case '"': buf[k++] = '"'; break;
      case '\\': buf[k++] = '\\'; break;
      case 'n': buf[k++] = '\n'; break;
      case 't': buf[k++] = '\t'; break;
      case 'r': buf[k++] = '\r'; break;
      case 'x': {
        int v = 0;
        for (int j = 0; j < 2; j++) {
          char h = ps->pos < ps->eol ? ps->t[ps->pos] : 0;
          int hv = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (hv < 0) return fail(ps, ps->pos, "expected two hex digits after \\x");
          v = v * 16 + hv;
          ps->pos++;
        }
        if (v == 0) return fail(ps, ps->pos - 4, "\\x00 is not allowed in a string");
        buf[k++] = (char)v;
        break;
      }
      default: return fail(ps, ps->pos - 2, "unknown escape '\\%c' in a string", e);
    }
  }
  if (ps->pos >= ps->eol) return fail(ps, at, "unterminated string");
  ps->pos++;
  buf[k] = 0;
  *out = buf;
  return true;
}

/* a name: quoted, or a bare word [A-Za-z_][A-Za-z0-9_.:/-]* */
static bool parse_name(parser *ps, const char **out, const char *what) {
  skip_blank(ps);
  if (ps->pos < ps->eol && ps->t[ps->pos] == '"') return parse_quoted(ps, out);
  const char *s;
  size_t at = ps->pos, len = atom(ps, &s);
  if (len == 0) return fail(ps, at, "expected %s name, found %s", what, excerpt(ps, at, 1));
  char *nm = fpi_strndup(ps->a, s, len);
  if (!fpi_ir_name_is_bare(nm))
    return fail(ps, at, "%s is not a bare name (names that start with a letter or '_' and hold only "
                        "letters, digits and _.:/- can go unquoted)", excerpt(ps, at, len));
  *out = nm;
  return true;
}

/* a reference: `-` (none), `$N` (by index), or a declared name */
static bool parse_ref(parser *ps, int kind, int32_t *out) {
  skip_blank(ps);
  size_t at = ps->pos;
  if (ps->pos < ps->eol && ps->t[ps->pos] == '$') {
    ps->pos++;
    return parse_i32(ps, out, nm_what[kind]);
  }
  if (ps->pos < ps->eol && ps->t[ps->pos] == '-' &&
      (ps->pos + 1 >= ps->eol || !is_atom_char(ps->t[ps->pos + 1]))) {
    ps->pos++;
    *out = -1;
    return true;
  }
  const char *nm;
  if (!parse_name(ps, &nm, nm_what[kind])) return false;
  int32_t i = fpi_namemap_get(&ps->names[kind], nm, strlen(nm));
  if (i == -1) return fail(ps, at, "unknown %s '%s' (declare it before use)", nm_what[kind], nm);
  if (i == FP_NAMEMAP_DUP)
    return fail(ps, at, "%s name '%s' is declared more than once; refer to it as $N", nm_what[kind], nm);
  *out = i;
  return true;
}

/* a region: REF[OFF], REF[OFF+S*g], REF[OFF+tab], REF[OFF+S*g+tab] */
static bool parse_region(parser *ps, fp_region *r) {
  if (!parse_ref(ps, NM_BUF, &r->buf) || !expect_char(ps, '[') ||
      !parse_int(ps, INT64_MIN, INT64_MAX, &r->off, "region offset"))
    return false;
  r->stride = 0;
  r->tabrel = false;
  if (ps->pos + 4 <= ps->eol && !memcmp(ps->t + ps->pos, "+tab", 4)) {
    ps->pos += 4;
    r->tabrel = true;
  } else if (ps->pos < ps->eol && (ps->t[ps->pos] == '+' || ps->t[ps->pos] == '-')) {
    if (!parse_int(ps, INT64_MIN, INT64_MAX, &r->stride, "region stride")) return false;
    if (ps->pos + 2 > ps->eol || memcmp(ps->t + ps->pos, "*g", 2))
      return fail(ps, ps->pos, "expected '*g' after the region stride");
    ps->pos += 2;
    if (ps->pos + 4 <= ps->eol && !memcmp(ps->t + ps->pos, "+tab", 4)) {
      ps->pos += 4;
      r->tabrel = true;
    }
  }
  return expect_char(ps, ']') && end_of_field(ps);
}

static bool parse_view(parser *ps, fp_view *v) {
  return parse_ref(ps, NM_BUF, &v->buf) && expect_char(ps, '[') &&
         parse_int(ps, INT64_MIN, INT64_MAX, &v->off, "view offset") && expect_char(ps, ']') && end_of_field(ps);
}

static bool parse_dtype_word(parser *ps, const char *s, size_t len, size_t at, int *out) {
  char buf[64];
  int t = fpi_dtype_parse(atom_cstr(s, len, buf));
  if (t < 0) return fail(ps, at, "unknown dtype %s", excerpt(ps, at, len));
  *out = t;
  return true;
}

/* a `key=` at the cursor: the key's span, cursor after '='; false (no
 * error) when the next word is not followed by '=' */
static bool peek_key(parser *ps, const char **k, size_t *klen, size_t *at) {
  skip_blank(ps);
  size_t save = ps->pos;
  *at = ps->pos;
  *klen = atom(ps, k);
  if (*klen && ps->pos < ps->eol && ps->t[ps->pos] == '=') {
    ps->pos++;
    return true;
  }
  ps->pos = save;
  return false;
}

/* an integer field value right after '=' */
static bool int_field(parser *ps, int64_t min, int64_t max, int64_t *out, const char *what) {
  return parse_int(ps, min, max, out, what) && end_of_field(ps);
}

static bool i32_field(parser *ps, int32_t *out, const char *what) {
  return parse_i32(ps, out, what) && end_of_field(ps);
}

static bool ref_field(parser *ps, int kind, int32_t *out) { return parse_ref(ps, kind, out) && end_of_field(ps); }

/* ---- extent tables ---------------------------------------------------------------- */
static bool close_table(parser *ps) {
  if (!ps->tab_open) return true;
  ps->tab_open = false;
  if (ps->noff != ps->tab_n || ps->ncnt != ps->tab_n)
    return fail(ps, ps->tab_at, "table '%s' declares n=%" PRId64 " but has %" PRId64 " offsets and %" PRId64 " counts",
                ps->tab_name, ps->tab_n, ps->noff, ps->ncnt);
  int i = fpi_ir_table_add(ps->p, ps->tab_name, ps->tab_n, ps->tab_off, ps->tab_cnt);
  ps->p->tabs[i].line = ps->tab_line;
  return true;
}

static bool table_row(parser *ps, bool cnt) {
  int64_t **arr = cnt ? &ps->tab_cnt : &ps->tab_off;
  int64_t *n = cnt ? &ps->ncnt : &ps->noff, *cap = cnt ? &ps->cap_cnt : &ps->cap_off;
  while (!at_eol(ps)) {
    if (*n >= ps->tab_n)
      return fail(ps, ps->pos, "table '%s' has more than n=%" PRId64 " %s", ps->tab_name, ps->tab_n,
                  cnt ? "counts" : "offsets");
    int64_t v;
    if (!parse_int(ps, INT64_MIN, INT64_MAX, &v, cnt ? "table count" : "table offset") || !end_of_field(ps))
      return false;
    *arr = fpi_grow(ps->a, *arr, cap, *n + 1, sizeof **arr);
    (*arr)[(*n)++] = v;
  }
  return true;
}

/* ---- declarations ------------------------------------------------------------------ */
/* optional index (must equal the position), then the name */
static bool decl_head(parser *ps, int64_t expect, const char *what, const char **name) {
  skip_blank(ps);
  if (ps->pos < ps->eol && ps->t[ps->pos] >= '0' && ps->t[ps->pos] <= '9') {
    size_t at = ps->pos;
    int64_t idx;
    if (!parse_int(ps, 0, INT32_MAX, &idx, "index") || !end_of_field(ps)) return false;
    if (idx != expect)
      return fail(ps, at, "%s index %" PRId64 " is out of sequence (expected %" PRId64 ")", what, idx, expect);
  }
  return parse_name(ps, name, what) && end_of_field(ps);
}

static bool decl_comm(parser *ps) {
  const char *name;
  int64_t size = 0, stride = 0;
  bool have_size = false, have_stride = false;
  if (!decl_head(ps, ps->p->ncomms, "communicator", &name)) return false;
  while (!at_eol(ps)) {
    const char *k;
    size_t kl, at;
    if (!peek_key(ps, &k, &kl, &at)) return fail(ps, ps->pos, "expected size= or stride=");
    if (atom_is(k, kl, "size") && !have_size) {
      have_size = true;
      if (!int_field(ps, INT64_MIN, INT64_MAX, &size, "size")) return false;
    } else if (atom_is(k, kl, "stride") && !have_stride) {
      have_stride = true;
      if (!int_field(ps, INT64_MIN, INT64_MAX, &stride, "stride")) return false;
    } else {
      return fail(ps, at, "unknown or repeated field %s for a communicator", excerpt(ps, at, kl));
    }
  }
  if (!have_size || !have_stride) return fail(ps, ps->pos, "a communicator needs size= and stride=");
  int i = fpi_ir_comm_add(ps->p, name, size, stride);
  ps->p->comms[i].line = ps->line;
  fpi_namemap_put(&ps->names[NM_COMM], ps->p->comms[i].name, i);
  return true;
}

static bool decl_table(parser *ps) {
  const char *name, *k;
  size_t kl, at;
  int64_t n;
  if (!decl_head(ps, ps->p->ntabs, "table", &name)) return false;
  if (!peek_key(ps, &k, &kl, &at) || !atom_is(k, kl, "n")) return fail(ps, ps->pos, "expected n=");
  if (!int_field(ps, 0, INT32_MAX, &n, "table entries") || !expect_eol(ps)) return false;
  ps->tab_open = true;
  ps->tab_name = name;
  ps->tab_n = n;
  ps->tab_at = ps->bol;
  ps->tab_line = ps->line;
  ps->tab_off = ps->tab_cnt = NULL;
  ps->noff = ps->ncnt = ps->cap_off = ps->cap_cnt = 0;
  fpi_namemap_put(&ps->names[NM_TAB], name, ps->p->ntabs); /* its index once closed */
  return true;
}

static bool decl_bucket(parser *ps) {
  const char *name;
  if (!decl_head(ps, ps->p->nbuckets, "bucket", &name) || !expect_eol(ps)) return false;
  int i = fpi_ir_bucket_add(ps->p, name);
  fpi_namemap_put(&ps->names[NM_BUCKET], ps->p->buckets[i], i);
  return true;
}

/* live=F..L,F..L: live ranges of the buffer being declared (op indices) */
static bool parse_lives(parser *ps, int32_t buf) {
  for (;;) {
    int32_t first, last;
    if (!parse_i32(ps, &first, "live range start")) return false;
    if (ps->pos + 2 > ps->eol || memcmp(ps->t + ps->pos, "..", 2))
      return fail(ps, ps->pos, "expected '..' in a live range (FIRST..LAST)");
    ps->pos += 2;
    if (!parse_i32(ps, &last, "live range end")) return false;
    fpi_ir_buf_live(ps->p, buf, first, last);
    if (ps->pos < ps->eol && ps->t[ps->pos] == ',') {
      ps->pos++;
      continue;
    }
    return end_of_field(ps);
  }
}

static bool decl_buf(parser *ps) {
  const char *name, *s, *k;
  size_t len, at, kl;
  if (!decl_head(ps, ps->p->nbufs, "buffer", &name)) return false;
  at = (skip_blank(ps), ps->pos);
  len = atom(ps, &s);
  int kind = atom_is(s, len, "persistent") ? FP_BUF_PERSISTENT : atom_is(s, len, "transient") ? FP_BUF_TRANSIENT : -1;
  if (kind < 0) return fail(ps, at, "expected persistent or transient, found %s", excerpt(ps, at, len ? len : 1));
  at = (skip_blank(ps), ps->pos);
  len = atom(ps, &s);
  int cat = -1;
  for (int c = 0; c < FP_NBUFCATS; c++)
    if (atom_is(s, len, fpi_buf_cat_name(c))) cat = c;
  if (cat < 0) return fail(ps, at, "unknown buffer category %s", excerpt(ps, at, len ? len : 1));
  int64_t bytes = 0, offset = -1;
  int32_t bucket = -1, buf = ps->p->nbufs;
  bool host = false;
  unsigned seen = 0;
  while (!at_eol(ps)) {
    if (peek_key(ps, &k, &kl, &at)) {
      int f = atom_is(k, kl, "bytes")    ? 0
              : atom_is(k, kl, "offset") ? 1
              : atom_is(k, kl, "bucket") ? 2
              : atom_is(k, kl, "live")   ? 3
                                         : -1;
      if (f < 0 || (seen >> f & 1)) return fail(ps, at, "unknown or repeated field %s for a buffer", excerpt(ps, at, kl));
      seen |= 1u << f;
      bool ok = f == 0   ? int_field(ps, INT64_MIN, INT64_MAX, &bytes, "bytes")
                : f == 1 ? int_field(ps, INT64_MIN, INT64_MAX, &offset, "offset")
                : f == 2 ? ref_field(ps, NM_BUCKET, &bucket)
                         : parse_lives(ps, buf);
      if (!ok) return false;
    } else {
      at = ps->pos;
      len = atom(ps, &s);
      if (!atom_is(s, len, "host") || host) return fail(ps, at, "unexpected %s", excerpt(ps, at, len ? len : 1));
      host = true;
      if (!end_of_field(ps)) return false;
    }
  }
  if (!(seen & 1)) return fail(ps, ps->pos, "a buffer needs bytes=");
  int i = fpi_ir_buf_add(ps->p, name, (fp_buf_kind)kind, (fp_buf_cat)cat, bucket, bytes);
  fp_ir_buf *b = &ps->p->bufs[i];
  b->offset = offset;
  b->host = host;
  b->line = ps->line;
  fpi_namemap_put(&ps->names[NM_BUF], b->name, i);
  return true;
}

static bool decl_module(parser *ps) {
  const char *name, *k;
  size_t kl, at;
  double ff = 0, fb = 0;
  int64_t act = 0, saved = 0;
  unsigned seen = 0;
  if (!decl_head(ps, ps->p->nmods, "module", &name)) return false;
  while (!at_eol(ps)) {
    if (!peek_key(ps, &k, &kl, &at)) return fail(ps, ps->pos, "expected flops_fwd=, flops_bwd=, act= or recompute=");
    int f = atom_is(k, kl, "flops_fwd")   ? 0
            : atom_is(k, kl, "flops_bwd") ? 1
            : atom_is(k, kl, "act")       ? 2
            : atom_is(k, kl, "recompute") ? 3
                                          : -1;
    if (f < 0 || (seen >> f & 1)) return fail(ps, at, "unknown or repeated field %s for a module", excerpt(ps, at, kl));
    seen |= 1u << f;
    bool ok = f == 0   ? parse_double(ps, &ff, "flops_fwd") && end_of_field(ps)
              : f == 1 ? parse_double(ps, &fb, "flops_bwd") && end_of_field(ps)
              : f == 2 ? int_field(ps, INT64_MIN, INT64_MAX, &act, "act")
                       : int_field(ps, INT64_MIN, INT64_MAX, &saved, "recompute");
    if (!ok) return false;
  }
  int i = fpi_ir_module_add(ps->p, name, ff, fb, act);
  ps->p->mods[i].recompute = seen >> 3 & 1;
  ps->p->mods[i].saved_bytes = saved;
  ps->p->mods[i].line = ps->line;
  fpi_namemap_put(&ps->names[NM_MOD], ps->p->mods[i].name, i);
  return true;
}

static bool parse_dtypes3(parser *ps, fp_ir_param *q) {
  const char *s;
  size_t at = ps->pos, len = atom(ps, &s);
  int t[3], k = 0;
  size_t b = 0;
  for (size_t i = 0; i <= len && k < 3; i++) {
    if (i == len || s[i] == '/') {
      if (!parse_dtype_word(ps, s + b, i - b, at + b, &t[k++])) return false;
      b = i + 1;
    }
  }
  if (k != 3 || b != len + 1) return fail(ps, at, "expected dtypes=MAIN/PARAM/GRAD, found %s", excerpt(ps, at, len ? len : 1));
  q->main_dtype = (fp_dtype)t[0];
  q->param_dtype = (fp_dtype)t[1];
  q->grad_dtype = (fp_dtype)t[2];
  return end_of_field(ps);
}

static bool parse_shape(parser *ps, fp_ir_param *q) {
  if (!expect_char(ps, '[')) return false;
  q->ndim = 0;
  if (ps->pos < ps->eol && ps->t[ps->pos] == ']') {
    ps->pos++;
    return end_of_field(ps);
  }
  for (;;) {
    if (q->ndim == 8) return fail(ps, ps->pos, "a shape has at most 8 dimensions");
    if (!parse_int(ps, INT64_MIN, INT64_MAX, &q->shape[q->ndim++], "shape")) return false;
    if (ps->pos < ps->eol && ps->t[ps->pos] == ',') {
      ps->pos++;
      continue;
    }
    return expect_char(ps, ']') && end_of_field(ps);
  }
}

/* users=[MODULE,MODULE,...] of a param (tied weights) */
static bool parse_users(parser *ps, fp_ir_param *q) {
  if (!expect_char(ps, '[')) return false;
  int64_t cap = 0;
  skip_blank(ps);
  if (ps->pos < ps->eol && ps->t[ps->pos] == ']') return expect_char(ps, ']') && end_of_field(ps);
  for (;;) {
    int32_t m;
    if (!parse_ref(ps, NM_MOD, &m)) return false;
    if (q->nusers == INT32_MAX) return fail(ps, ps->pos, "too many users");
    q->users = fpi_grow(ps->p->arena, q->users, &cap, (int64_t)q->nusers + 1, sizeof *q->users);
    q->users[q->nusers++] = m;
    skip_blank(ps);
    if (ps->pos < ps->eol && ps->t[ps->pos] == ',') {
      ps->pos++;
      continue;
    }
    return expect_char(ps, ']') && end_of_field(ps);
  }
}

static bool decl_param(parser *ps) {
  const char *name, *k, *s;
  size_t kl, at, len;
  if (!decl_head(ps, ps->p->nparams, "param", &name)) return false;
  fp_ir_param q = {0};
  q.name = name;
  q.module = q.bucket = q.comm = q.tab = q.tp_dim = -1;
  q.owner = -1;
  q.main.buf = q.grad.buf = q.weight.buf = q.ugrad.buf = q.opt.buf = q.scales.buf = -1;
  q.requires_grad = true;
  q.placement = -1;
  static const char *const keys[] = {"shape", "module", "bucket", "dtypes", "dim",    "comm",  "owner",
                                     "tab",   "chunk",  "main",   "grad",   "weight", "ugrad", "users", "opt",
                                     "scales", "tp_dim", NULL};
  unsigned seen = 0;
  bool frozen = false;
  while (!at_eol(ps)) {
    if (!peek_key(ps, &k, &kl, &at)) {
      at = ps->pos;
      len = atom(ps, &s);
      char buf[64];
      int pl = len ? fpi_ir_placement_parse(atom_cstr(s, len, buf)) : -1;
      if (pl >= 0 && q.placement < 0) {
        q.placement = pl;
      } else if (atom_is(s, len, "frozen") && !frozen) {
        frozen = true;
        q.requires_grad = false;
      } else {
        return fail(ps, at, "unexpected %s in a param", excerpt(ps, at, len ? len : 1));
      }
      if (!end_of_field(ps)) return false;
      continue;
    }
    int f = -1;
    for (int j = 0; keys[j]; j++)
      if (atom_is(k, kl, keys[j])) f = j;
    if (f < 0 || (seen >> f & 1)) return fail(ps, at, "unknown or repeated field %s for a param", excerpt(ps, at, kl));
    seen |= 1u << f;
    bool ok;
    switch (f) {
      case 0: ok = parse_shape(ps, &q); break;
      case 1: ok = ref_field(ps, NM_MOD, &q.module); break;
      case 2: ok = ref_field(ps, NM_BUCKET, &q.bucket); break;
      case 3: ok = parse_dtypes3(ps, &q); break;
      case 4: ok = i32_field(ps, &q.dim, "dim"); break;
      case 5: ok = ref_field(ps, NM_COMM, &q.comm); break;
      case 6: ok = int_field(ps, INT64_MIN, INT64_MAX, &q.owner, "owner"); break;
      case 7: ok = ref_field(ps, NM_TAB, &q.tab); break;
      case 8: ok = int_field(ps, INT64_MIN, INT64_MAX, &q.chunk, "chunk"); break;
      case 9: ok = parse_view(ps, &q.main); break;
      case 10: ok = parse_view(ps, &q.grad); break;
      case 11: ok = parse_view(ps, &q.weight); break;
      case 12: ok = parse_view(ps, &q.ugrad); break;
      case 13: ok = parse_users(ps, &q); break;
      case 14: ok = parse_view(ps, &q.opt); break;
      case 15: ok = parse_view(ps, &q.scales); break;
      default: ok = i32_field(ps, &q.tp_dim, "tp_dim"); break;
    }
    if (!ok) return false;
  }
  if ((seen & 0xf) != 0xf || q.placement < 0)
    return fail(ps, ps->pos, "a param needs shape=, module=, bucket=, dtypes= and a placement "
                             "(shard, ragged_shard, owned or replicate)");
  q.line = ps->line;
  *fpi_ir_param_add(ps->p) = q;
  return true;
}

/* ---- segments and ops ------------------------------------------------------------ */
static bool seg_line(parser *ps) {
  const char *s;
  size_t at, len;
  skip_blank(ps);
  if (ps->pos < ps->eol && ps->t[ps->pos] >= '0' && ps->t[ps->pos] <= '9') {
    int64_t idx;
    at = ps->pos;
    if (!parse_int(ps, 0, INT32_MAX, &idx, "segment index") || !end_of_field(ps)) return false;
    if (idx != ps->p->nsegs)
      return fail(ps, at, "segment index %" PRId64 " is out of sequence (expected %" PRId32 ")", idx, ps->p->nsegs);
  }
  at = (skip_blank(ps), ps->pos);
  len = atom(ps, &s);
  int kind = -1;
  for (int k = 0; k < FP_NSEGKINDS; k++)
    if (atom_is(s, len, fpi_seg_name(k))) kind = k;
  if (kind < 0) return fail(ps, at, "unknown segment kind %s", excerpt(ps, at, len ? len : 1));
  int32_t module = -1, micro = 0;
  if (ps->pos < ps->eol && ps->t[ps->pos] == '(') {
    ps->pos++;
    if (!parse_ref(ps, NM_MOD, &module)) return false;
    skip_blank(ps);
    if (!expect_char(ps, ')')) return false;
  } else if (fpi_seg_has_module(kind)) {
    return fail(ps, ps->pos, "%s needs a module: %s(NAME)", fpi_seg_name(kind), fpi_seg_name(kind));
  }
  if (!end_of_field(ps)) return false;
  if (!at_eol(ps)) {
    const char *k;
    size_t kl;
    if (!peek_key(ps, &k, &kl, &at) || !atom_is(k, kl, "micro")) return fail(ps, ps->pos, "expected micro=");
    if (!i32_field(ps, &micro, "micro") || !expect_eol(ps)) return false;
  }
  int i = fpi_ir_seg_begin(ps->p, (fp_seg_kind)kind, module, micro);
  ps->p->segs[i].line = ps->line;
  return true;
}

/* uses=[BUF,BUF,...]: appended to p->uses; *start = where they begin */
static bool parse_uses(parser *ps, int *start) {
  fp_prog *p = ps->p;
  *start = p->nuses;
  if (!expect_char(ps, '[')) return false;
  if (ps->pos < ps->eol && ps->t[ps->pos] == ']') {
    ps->pos++;
    return end_of_field(ps);
  }
  for (;;) {
    int32_t b;
    if (!parse_ref(ps, NM_BUF, &b)) return false;
    if (p->nuses == INT32_MAX) return fail(ps, ps->pos, "too many uses");
    p->uses = fpi_grow(p->arena, p->uses, &p->cap_uses, (int64_t)p->nuses + 1, sizeof *p->uses);
    p->uses[p->nuses++] = b;
    skip_blank(ps);
    if (ps->pos < ps->eol && ps->t[ps->pos] == ',') {
      ps->pos++;
      continue;
    }
    return expect_char(ps, ']') && end_of_field(ps);
  }
}

enum {
  K_N, K_DST, K_SRC, K_AUX, K_COMM, K_TAB, K_ROOT, K_ONLY, K_EV, K_MODULE, K_PASS, K_ALPHA, K_ROWS,
  K_DPITCH, K_SPITCH, K_BUCKET, K_GROUP, K_USES, K_RED, K_NKEYS
};
static const char *const op_keys[K_NKEYS] = {"n",      "dst",  "src",   "aux",  "comm",   "tab",
                                             "root",   "only", "ev",    "module", "pass", "alpha",
                                             "rows",   "dpitch", "spitch", "bucket", "group", "uses",
                                             "red"};

/* An op line in its steps: the head (op_head: index, stream, op), then
 * its fields (op_fields: the dtype word, op_dtype, and each key=value,
 * op_field), then the op emitted. What the fields say so far: */
typedef struct op_text {
  fp_op o;
  fp_op_shape sh;
  int dt, sdt, nuse; /* nuse: index into p->uses where this op's list starts */
  bool have_dt;
  unsigned seen;     /* the fields met, by K_* */
} op_text;

/* [INDEX] STREAM OP: *stream and *code */
static bool op_head(parser *ps, int *stream, int *code) {
  const char *s;
  size_t at, len;
  int64_t idx = -1;
  size_t idx_at = ps->pos;
  if (ps->t[ps->pos] >= '0' && ps->t[ps->pos] <= '9') {
    if (!parse_int(ps, 0, INT32_MAX, &idx, "op index") || !end_of_field(ps)) return false;
  }
  if (ps->p->nsegs == 0) return fail(ps, idx_at, "an op outside a segment (start one with 'segment KIND')");
  if (idx >= 0 && idx != ps->p->nops)
    return fail(ps, idx_at, "op index %" PRId64 " is out of sequence (expected %" PRId32 ")", idx, ps->p->nops);
  if (ps->p->nops == INT32_MAX) return fail(ps, idx_at, "too many ops");
  at = (skip_blank(ps), ps->pos);
  len = atom(ps, &s);
  *stream = -1;
  for (int k = 0; k < FP_NSTREAMS; k++)
    if (atom_is(s, len, fpi_stream_name(k))) *stream = k;
  if (*stream < 0)
    return fail(ps, at, "unknown stream %s (expected compute, ag or rs)", excerpt(ps, at, len ? len : 1));
  at = (skip_blank(ps), ps->pos);
  len = atom(ps, &s);
  char buf[64];
  *code = len ? fpi_op_parse(atom_cstr(s, len, buf)) : -1;
  if (*code < 0) return fail(ps, at, "unknown op %s", excerpt(ps, at, len ? len : 1));
  return end_of_field(ps);
}

/* the dtype word: D, or S->D for a conversion */
static bool op_dtype(parser *ps, op_text *x) {
  const char *s;
  size_t at = ps->pos, len = atom(ps, &s);
  if (x->have_dt || len == 0) return fail(ps, at, "unexpected %s", excerpt(ps, at, len ? len : 1));
  x->have_dt = true;
  const char *arrow = NULL;
  for (size_t i = 0; i + 1 < len; i++)
    if (s[i] == '-' && s[i + 1] == '>') arrow = s + i;
  if (arrow) {
    size_t l1 = (size_t)(arrow - s);
    if (!parse_dtype_word(ps, s, l1, at, &x->sdt) ||
        !parse_dtype_word(ps, arrow + 2, len - l1 - 2, at + l1 + 2, &x->dt))
      return false;
  } else if (!parse_dtype_word(ps, s, len, at, &x->dt)) {
    return false;
  }
  return end_of_field(ps);
}

/* pass=fwd|bwd|opt */
static bool pass_field(parser *ps, fp_op *o) {
  const char *s;
  size_t at = ps->pos, len = atom(ps, &s);
  if (atom_is(s, len, "fwd")) o->pass = FP_PASS_FWD;
  else if (atom_is(s, len, "bwd")) o->pass = FP_PASS_BWD;
  else if (atom_is(s, len, "opt")) o->pass = FP_PASS_OPT;
  else return fail(ps, at, "expected pass=fwd, pass=bwd or pass=opt");
  return end_of_field(ps);
}

/* red=sum|avg */
static bool red_field(parser *ps, fp_op *o) {
  const char *s;
  size_t at = ps->pos, len = atom(ps, &s);
  int r = -1;
  for (int j = 0; j < FP_NREDOPS; j++)
    if (atom_is(s, len, fpi_redop_name(j))) r = j;
  if (r < 0) return fail(ps, at, "expected red=sum or red=avg");
  o->red = (fp_redop)r;
  return end_of_field(ps);
}

/* the value of field f (a K_*) */
static bool op_field(parser *ps, int f, op_text *x) {
  fp_op *o = &x->o;
  switch (f) {
    case K_N: return int_field(ps, INT64_MIN, INT64_MAX, &o->count, "n");
    case K_DST: return parse_region(ps, &o->dst);
    case K_SRC: return parse_region(ps, &o->src);
    case K_AUX: return parse_region(ps, &o->aux);
    case K_COMM: return ref_field(ps, NM_COMM, &o->comm);
    case K_TAB: return ref_field(ps, NM_TAB, &o->tab);
    case K_ROOT: return i32_field(ps, &o->root, "root");
    case K_ONLY:
      return parse_i32(ps, &o->only, "only") && expect_char(ps, '@') && ref_field(ps, NM_COMM, &o->only_comm);
    case K_EV: return i32_field(ps, &o->event, "ev");
    case K_MODULE: return ref_field(ps, NM_MOD, &o->module);
    case K_PASS: return pass_field(ps, o);
    case K_ALPHA: return parse_double(ps, &o->alpha, "alpha") && end_of_field(ps);
    case K_RED: return red_field(ps, o);
    case K_ROWS: return int_field(ps, INT64_MIN, INT64_MAX, &x->sh.rows, "rows");
    case K_DPITCH: return int_field(ps, INT64_MIN, INT64_MAX, &x->sh.dpitch, "dpitch");
    case K_SPITCH: return int_field(ps, INT64_MIN, INT64_MAX, &x->sh.spitch, "spitch");
    case K_BUCKET: return ref_field(ps, NM_BUCKET, &o->bucket);
    case K_GROUP: return i32_field(ps, &o->group, "group");
    case K_USES: return parse_uses(ps, &x->nuse);
  }
  return true;
}

/* the rest of the line: the dtype word and key=value fields, each once */
static bool op_fields(parser *ps, op_text *x) {
  while (!at_eol(ps)) {
    const char *k;
    size_t kl, at;
    if (!peek_key(ps, &k, &kl, &at)) { /* the dtype: D or S->D */
      if (!op_dtype(ps, x)) return false;
      continue;
    }
    int f = -1;
    for (int j = 0; j < K_NKEYS; j++)
      if (atom_is(k, kl, op_keys[j])) f = j;
    if (atom_is(k, kl, "flops")) f = K_ALPHA;
    if (f < 0) return fail(ps, at, "unknown op field %s", excerpt(ps, at, kl));
    if (x->seen >> f & 1) return fail(ps, at, "repeated op field %s", excerpt(ps, at, kl));
    x->seen |= 1u << f;
    if (!op_field(ps, f, x)) return false;
  }
  return true;
}

static bool op_line(parser *ps) {
  int stream = -1, code = -1;
  if (!op_head(ps, &stream, &code)) return false;
  fp_opclass cls = fpi_op_class((fp_opcode)code);
  op_text x = {.sh = {1, 0, 0}, .dt = FP_F32, .sdt = -1, .nuse = -1};
  fp_op *o = &x.o;
  o->comm = o->only = o->only_comm = o->root = o->event = o->module = o->bucket = o->group = o->tab = -1;
  o->pass = FP_PASS_FWD;
  o->dst = o->src = o->aux = fpi_noreg();
  if (!op_fields(ps, &x)) return false;
  if (!x.have_dt && (cls == FP_OPC_COMM || cls == FP_OPC_LOCAL))
    return fail(ps, ps->pos, "%s needs a dtype (e.g. bf16, or fp32->bf16 for a conversion)",
                fpi_op_name((fp_opcode)code));
  fp_op *op = fpi_ir_emit(ps->p, (fp_opcode)code, (fp_stream)stream, (fp_dtype)x.dt, o->count);
  o->code = (fp_opcode)code;
  o->stream = (fp_stream)stream;
  o->dtype = (fp_dtype)x.dt;
  o->sdtype = x.sdt >= 0 ? (fp_dtype)x.sdt : (fp_dtype)x.dt;
  o->seg = op->seg;
  o->line = ps->line;
  if (x.nuse >= 0) {
    o->uses = x.nuse;
    o->nuses = ps->p->nuses - x.nuse;
  }
  *op = *o;
  fpi_ir_op_shape(ps->p, op, x.sh.rows, x.sh.dpitch, x.sh.spitch);
  return true;
}

/* ---- lines ---------------------------------------------------------------------- */
static bool header_int(parser *ps, int64_t min, int64_t max, int64_t *out, const char *what) {
  skip_blank(ps);
  return parse_int(ps, min, max, out, what) && end_of_field(ps) && expect_eol(ps);
}

static bool header_str(parser *ps, const char **out) {
  skip_blank(ps);
  if (ps->pos >= ps->eol || ps->t[ps->pos] != '"') return fail(ps, ps->pos, "expected a quoted string");
  return parse_quoted(ps, out) && end_of_field(ps) && expect_eol(ps);
}

/* optimizer NAME DTYPE: the optimizer whose state the plan holds, and the
 * state's dtype ("none" takes no dtype; a program without the line is none) */
static bool header_optim(parser *ps) {
  fp_prog *p = ps->p;
  const char *s;
  size_t at0 = ps->pos, at, len;
  if (ps->seen_optim) return fail(ps, at0, "a second 'optimizer' line");
  ps->seen_optim = true;
  skip_blank(ps);
  at = ps->pos;
  len = atom(ps, &s);
  int k = -1;
  for (int i = 0; i < FP_NOPTIMS && k < 0; i++)
    if (atom_is(s, len, fpi_optim_name(i))) k = i;
  if (k < 0) return fail(ps, at, "unknown optimizer %s (none, sgd or adamw)", excerpt(ps, at, len ? len : 1));
  p->optim = (fp_optim)k;
  if (!end_of_field(ps)) return false;
  if (k == FP_OPTIM_NONE) return expect_eol(ps);
  skip_blank(ps);
  at = ps->pos;
  len = atom(ps, &s);
  int t;
  if (!len) return fail(ps, at, "the optimizer needs its state dtype (e.g. 'optimizer adamw fp32')");
  if (!parse_dtype_word(ps, s, len, at, &t)) return false;
  p->optim_dtype = (fp_dtype)t;
  return end_of_field(ps) && expect_eol(ps);
}

/* hardware "NAME" key=value ...: every field of fp_hw_fields once (the
 * optional ones at most once), any order */
static bool header_hw(parser *ps) {
  fp_prog *p = ps->p;
  size_t at0 = ps->pos;
  if (p->hw.name) return fail(ps, at0, "a second 'hardware' line");
  skip_blank(ps);
  fp_hw h = {0};
  if (!parse_quoted(ps, &h.name) || !end_of_field(ps)) return false;
  unsigned seen = 0;
  while (!at_eol(ps)) {
    const char *k;
    size_t kl, at;
    if (!peek_key(ps, &k, &kl, &at)) return fail(ps, ps->pos, "expected key=value (e.g. flops=9.895e+14)");
    int f = -1;
    for (int i = 0; i < FP_HW_NFIELDS && f < 0; i++)
      if (atom_is(k, kl, fp_hw_fields[i].key)) f = i;
    if (f < 0 || (seen >> f & 1)) return fail(ps, at, "unknown or repeated field %s for the hardware", excerpt(ps, at, kl));
    seen |= 1u << f;
    bool ok = fp_hw_fields[f].integer ? int_field(ps, INT64_MIN, INT64_MAX, fpi_hw_int(&h, f), fp_hw_fields[f].key)
                                      : parse_double(ps, fpi_hw_dbl(&h, f), fp_hw_fields[f].key) && end_of_field(ps);
    if (!ok) return false;
  }
  for (int i = 0; i < FP_HW_NFIELDS; i++)
    if (!(seen >> i & 1) && !fp_hw_fields[i].optional) return fail(ps, ps->pos, "the hardware needs %s=", fp_hw_fields[i].key);
  p->hw = h;
  return true;
}

static bool line(parser *ps) {
  if (at_eol(ps)) return true;
  const char *s;
  size_t at = ps->pos, len = atom(ps, &s);
  bool off = atom_is(s, len, "off"), cnt = atom_is(s, len, "cnt");
  if (off || cnt) {
    if (!ps->tab_open) return fail(ps, at, "'%s' row outside a table", off ? "off" : "cnt");
    return table_row(ps, cnt);
  }
  if (!close_table(ps)) return false;
  if (!ps->seen_fpir) {
    if (!atom_is(s, len, "fpir")) return fail(ps, at, "expected 'fpir 1' first");
    int64_t v;
    if (!header_int(ps, INT64_MIN, INT64_MAX, &v, "version")) return false;
    if (v != 1) return fail(ps, at, "unsupported fpir version %" PRId64 " (this reader knows 1)", v);
    ps->seen_fpir = true;
    return true;
  }
  fp_prog *p = ps->p;
  if (len && ps->t[at] >= '0' && ps->t[at] <= '9') {
    ps->pos = at;
    return op_line(ps);
  }
  for (int k = 0; k < FP_NSTREAMS; k++)
    if (atom_is(s, len, fpi_stream_name(k))) {
      ps->pos = at;
      return op_line(ps);
    }
  if (atom_is(s, len, "segment")) return seg_line(ps);
  static const char *const decls[] = {"comm", "table", "bucket", "buf", "module", "param"};
  for (int k = 0; k < 6; k++) {
    if (!atom_is(s, len, decls[k])) continue;
    if (p->nsegs) return fail(ps, at, "'%s' after the first segment: declarations come first", decls[k]);
    switch (k) {
      case 0: return decl_comm(ps);
      case 1: return decl_table(ps);
      case 2: return decl_bucket(ps);
      case 3: return decl_buf(ps);
      case 4: return decl_module(ps);
      default: return decl_param(ps);
    }
  }
  if (atom_is(s, len, "model")) return header_str(ps, &p->model);
  if (atom_is(s, len, "strategy")) return header_str(ps, &p->strategy);
  if (atom_is(s, len, "world_size")) return header_int(ps, INT64_MIN, INT64_MAX, &p->world_size, "world_size");
  if (atom_is(s, len, "ranks_per_node"))
    return header_int(ps, INT64_MIN, INT64_MAX, &p->ranks_per_node, "ranks_per_node");
  if (atom_is(s, len, "grad_accumulation"))
    return header_int(ps, INT64_MIN, INT64_MAX, &p->grad_accumulation, "grad_accumulation");
  if (atom_is(s, len, "tp")) return header_int(ps, INT64_MIN, INT64_MAX, &p->tp, "tp");
  if (atom_is(s, len, "arena_bytes")) return header_int(ps, INT64_MIN, INT64_MAX, &p->arena_bytes, "arena_bytes");
  if (atom_is(s, len, "host_bytes")) return header_int(ps, INT64_MIN, INT64_MAX, &p->host_bytes, "host_bytes");
  if (atom_is(s, len, "hardware")) return header_hw(ps);
  if (atom_is(s, len, "optimizer")) return header_optim(ps);
  if (atom_is(s, len, "memory_budget_bytes"))
    return header_int(ps, 1, INT64_MAX, &p->memory_budget_bytes, "memory_budget_bytes");
  if (atom_is(s, len, "events")) {
    int64_t v;
    if (!header_int(ps, 0, INT32_MAX, &v, "events")) return false;
    p->nevents = (int32_t)v;
    return true;
  }
  return fail(ps, at, "unknown directive %s", excerpt(ps, at, len ? len : 1));
}

fp_prog *fpi_ir_parse(fp_arena *a, fp_diag *d, const fp_src *src) {
  parser ps = {.a = a, .d = d, .src = src, .t = src->text, .n = src->len};
  ps.p = fpi_prog_new(a);
  for (int k = 0; k < NM_N; k++) fpi_namemap_init(&ps.names[k], a, 16);
  bool ok = true;
  /* names must be UTF-8 that plan.json can hold */
  size_t bad = fpi_utf8_invalid(ps.t, ps.n);
  if (bad < ps.n) {
    fail(&ps, bad, "invalid UTF-8 (byte 0x%02x)", (unsigned char)ps.t[bad]);
    return NULL;
  }
  for (size_t b = 0; ok && b < ps.n;) {
    const char *nl = memchr(ps.t + b, '\n', ps.n - b);
    ps.bol = ps.pos = b;
    ps.eol = nl ? (size_t)(nl - ps.t) : ps.n;
    ps.line++;
    ok = line(&ps);
    b = ps.eol + 1;
  }
  if (ok) {
    ps.bol = ps.pos = ps.eol = ps.n;
    ok = close_table(&ps);
  }
  if (ok && !ps.seen_fpir) ok = fail(&ps, ps.n, "empty program: expected 'fpir 1'");
  return ok ? ps.p : NULL;
}
