/* xfer_read.c - reading a transfer program back from its JSON
 * ("flexplan.xfer.v1", what ir/xfer.c fpi_tx_write_json writes and `flexplan
 * reshard -o` saves). Every process of a transfer loads the whole file (the
 * verifier needs every process's ops), and at 16,384 ranks that file has
 * millions of ops, so it is read with base/json.c's pull parser (fpi_jp_*,
 * the scanner every JSON input of flexplan shares) straight into the fp_tx:
 * one pass, no tree of JSON objects (json-c's tree of a 2M-op transfer was
 * 6.2 GB and 28 s; docs/reshard.md). The reader trusts nothing: the text is
 * strict JSON (valid UTF-8 first; a syntax error is located at its byte),
 * every member is known, present where required and not repeated, of its
 * type and range ("file:line:col: error: /procs/2/ops/5/param: ...", the
 * pointer the pull parser tracks, built only for a message); then
 * the whole transfer verifier runs. The figures are recomputed from the
 * ops, never taken from the file (but for the lower bound, which needs the
 * plans). */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"
#include "xfer.h"

#define MAXERR 20

typedef struct rd {
  fp_arena *a;
  fp_diag *d;
  const fp_src *src;
  fp_jp *jp;   /* base/json.c's pull parser: the syntax, and the pointer */
  bool bad;    /* an error was reported */
} rd;

/* ---- errors ------------------------------------------------------------------ */
static bool vfail(rd *r, size_t off, const char *ptr, const char *fmt, va_list ap) {
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (r->d->nerrors < MAXERR) fpi_diag_at(r->d, r->src, off, "%s: %s", ptr[0] ? ptr : "/", msg);
  r->bad = true;
  return false;
}

/* an error about the value at off, at the cursor's pointer (the member or
 * element being read, or the container that just closed) */
static bool fail_at(rd *r, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail_at(rd *r, size_t off, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(r, off, fpi_jp_ptr(r->jp), fmt, ap);
  va_end(ap);
  return false;
}

/* an error about the member name just read: at the name, the member's
 * pointer (as every reader of base/json.c's members check reports it) */
static bool fail_key(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail_key(rd *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(r, fpi_jp_key_pos(r->jp), fpi_jp_ptr(r->jp), fmt, ap);
  va_end(ap);
  return false;
}

/* the syntax error that stopped the pull parser, located at its byte */
static bool syntax(rd *r) {
  if (!r->bad && r->d->nerrors < MAXERR) fpi_jp_report(r->jp, r->d);
  r->bad = true;
  return false;
}

/* what the text holds next, for "expected X, got Y" */
static const char *got(rd *r) { return fpi_json_got(r->a, r->src->text, r->src->len, fpi_jp_pos(r->jp)); }

/* ---- scalars ------------------------------------------------------------------ */
/* One JSON string, checked and decoded by the pull parser. Kept in the
 * arena (buf NULL), else into buf (cap bytes; a longer string comes back
 * cut: a name of nothing the reader knows). */
static bool str(rd *r, char *buf, size_t cap, const char **out) {
  size_t at = fpi_jp_pos(r->jp);
  if (at >= r->src->len || r->src->text[at] != '"') return fail_at(r, at, "expected a string, got %s", got(r));
  fp_jv v;
  if (!fpi_jp_value(r->jp, &v, buf == NULL)) return syntax(r);
  if (buf) {
    size_t k = v.n < cap - 1 ? v.n : cap - 1;
    memcpy(buf, v.s, k);
    buf[k] = 0;
  }
  *out = buf ? buf : v.s;
  return true;
}

/* one integer in [lo, hi] (no fraction, no exponent) */
static bool integer(rd *r, int64_t lo, int64_t hi, int64_t *out) {
  size_t at = fpi_jp_pos(r->jp);
  char c = at < r->src->len ? r->src->text[at] : 0;
  if (c != '-' && (c < '0' || c > '9')) return fail_at(r, at, "expected an integer, got %s", got(r));
  fp_jv v;
  if (!fpi_jp_value(r->jp, &v, false)) return syntax(r);
  if (v.type != FP_JINT)
    return fail_at(r, at, "expected an integer, got a number with a fraction or an exponent");
  if (v.big) return fail_at(r, at, "%" PRIu64 " does not fit in 64 bits", v.u);
  if (v.i < lo || v.i > hi) return fail_at(r, at, "%" PRId64 " is outside [%" PRId64 ", %" PRId64 "]", v.i, lo, hi);
  *out = v.i;
  return true;
}

/* ---- objects and arrays ------------------------------------------------------ */
/* An object's members: after obj_open, each call reads the next key into k
 * (its index in keys, or an error for a key not there or seen before: the
 * members check of base/json.c); 1: a member follows, 0: the object ended
 * (the required members, a mask over keys, checked), -1: an error. */
typedef struct obj {
  size_t at; /* the '{' */
  fp_jkeys ks;
} obj;

/* the container at the cursor must be c ('{' or '['): opened */
static bool open_as(rd *r, char c, size_t *at) {
  *at = fpi_jp_pos(r->jp);
  if (*at >= r->src->len || r->src->text[*at] != c)
    return fail_at(r, *at, "expected %s, got %s", c == '{' ? "an object" : "an array", got(r));
  fp_jv v;
  return fpi_jp_value(r->jp, &v, false) || syntax(r);
}

static bool obj_open(rd *r, obj *o, const char *const *keys, unsigned required) {
  o->at = 0;
  fpi_jkeys_init(&o->ks, keys, required);
  return open_as(r, '{', &o->at);
}

static int obj_next(rd *r, obj *o, int *k) {
  const char *key, *msg;
  size_t kl;
  int st = fpi_jp_next(r->jp, &key, &kl);
  if (st < 0) return syntax(r), -1;
  if (st == 0) {
    if ((msg = fpi_jkeys_missing(&o->ks, r->a))) return fail_at(r, o->at, "%s", msg), -1;
    return 0;
  }
  if ((*k = fpi_jkeys_member(&o->ks, r->a, key, kl, &msg)) < 0) return fail_key(r, "%s", msg), -1;
  return 1;
}

/* an array's items: after arr_open, 1: an item follows, 0: it ended, -1:
 * an error */
static bool arr_open(rd *r) {
  size_t at;
  return open_as(r, '[', &at);
}
static int arr_next(rd *r) {
  int st = fpi_jp_next(r->jp, NULL, NULL);
  return st < 0 ? (syntax(r), -1) : st;
}

/* A fixed array ("tuple"): after tup_open, tup_next before element k of n:
 * an error for too few; tup_end after the last: an error for too many.
 * shape says what the elements are. */
typedef struct tup {
  size_t at;
  const char *shape;
} tup;
static bool tup_open(rd *r, tup *u, const char *shape) {
  u->shape = shape;
  return open_as(r, '[', &u->at);
}
static bool tup_next(rd *r, tup *u, int k, int n) {
  int st = arr_next(r);
  if (st > 0) return true;
  return st == 0 && fail_at(r, u->at, "expected %d elements (%s), got %d", n, u->shape, k);
}
static bool tup_end(rd *r, tup *u, int n) {
  int st = arr_next(r);
  if (st == 0) return true;
  return st > 0 && fail_at(r, fpi_jp_pos(r->jp), "expected %d elements (%s), got more", n, u->shape);
}

/* ---- the members of a transfer ---------------------------------------------- */
static bool dtype(rd *r, fp_dtype *out) {
  size_t at = fpi_jp_pos(r->jp);
  char s[40];
  const char *v;
  if (!str(r, s, sizeof s, &v)) return false;
  int t = fpi_dtype_parse(v);
  if (t < 0) return fail_at(r, at, "unknown dtype '%s'", v);
  *out = (fp_dtype)t;
  return true;
}

static bool hash(rd *r, uint64_t *out) {
  size_t at = fpi_jp_pos(r->jp);
  char s[32];
  const char *h;
  if (!str(r, s, sizeof s, &h)) return false;
  char *end = NULL;
  if (strncmp(h, "fnv1a64:", 8) == 0 && strlen(h) == 24 && isxdigit((unsigned char)h[8]))
    *out = strtoull(h + 8, &end, 16);
  if (!end || *end) return fail_at(r, at, "expected \"fnv1a64:<16 hex digits>\"");
  return true;
}

/* ["from"|"to"|"stage", byte offset] */
static bool ref(rd *r, fp_tx_ref *out) {
  tup u;
  if (!tup_open(r, &u, "an operand is [space, byte offset]") || !tup_next(r, &u, 0, 2)) return false;
  size_t at = fpi_jp_pos(r->jp);
  char s[40];
  const char *sp;
  if (!str(r, s, sizeof s, &sp)) return false;
  int x = !strcmp(sp, "from") ? FP_SP_FROM : !strcmp(sp, "to") ? FP_SP_TO : !strcmp(sp, "stage") ? FP_SP_STAGE : -1;
  if (x < 0) return fail_at(r, at, "unknown space '%s' (expected from, to or stage)", sp);
  out->space = (unsigned)x;
  int64_t off = 0;
  bool ok = tup_next(r, &u, 1, 2) && integer(r, 0, FP_TX_OFF_LIMIT - 1, &off) && tup_end(r, &u, 2);
  out->off = off;
  return ok;
}

/* "from" / "to": the plan's hash, world size, arena bytes and first process */
static bool side(rd *r, uint64_t *h, int64_t *world, int64_t *arena, int64_t *offset) {
  static const char *const keys[] = {"hash", "world_size", "arena_bytes", "rank_offset", NULL};
  obj o;
  int k, m;
  if (!obj_open(r, &o, keys, 0xF)) return false;
  while ((m = obj_next(r, &o, &k)) > 0) {
    bool ok = k == 0 ? hash(r, h) : k == 1 ? integer(r, 1, INT32_MAX, world)
            : k == 2 ? integer(r, 0, INT64_MAX, arena) : integer(r, 0, INT32_MAX, offset);
    if (!ok) return false;
  }
  return m == 0;
}

static bool figures(rd *r, fp_tx *t) {
  static const char *const keys[] = {"wire_bytes", "lower_bound_bytes", "local_bytes", "max_send_bytes",
                                     "max_recv_bytes", NULL};
  obj o;
  int k, m;
  if (!obj_open(r, &o, keys, 0)) return false;
  while ((m = obj_next(r, &o, &k)) > 0) {
    int64_t v;
    bool ok = integer(r, 0, INT64_MAX, &v);
    if (!ok) return false;
    if (k == 1) t->lower_bound = v; /* the rest are recomputed from the ops */
  }
  return m == 0;
}

/* a param's "transform": its name, one entry of t->xf_names per name */
static bool xf_name(rd *r, fp_tx *t, fp_tx_param *q) {
  size_t at = fpi_jp_pos(r->jp);
  const char *name;
  if (!str(r, NULL, 0, &name)) return false;
  if (!name[0]) return fail_at(r, at, "expected a transform's name");
  int32_t k = 0;
  while (k < t->nxf && strcmp(t->xf_names[k], name)) k++;
  if (k == t->nxf) {
    if (t->nxf == 255) return fail_at(r, at, "more than 255 transforms");
    const char **v = fpi_alloc_array(r->a, (size_t)t->nxf + 1, sizeof *v);
    if (t->nxf) memcpy(v, t->xf_names, (size_t)t->nxf * sizeof *v);
    v[t->nxf++] = name;
    t->xf_names = v;
  }
  q->xf = k;
  return true;
}

/* an op's "wires": [[dtype, count], ...], 1 to FP_TX_MAX_WIRES of them;
 * their first index in t->wires into *first, their number into *nw */
static bool wires(rd *r, fp_tx *t, int32_t *first, int *nw) {
  fp_tx_wire w[FP_TX_MAX_WIRES];
  int n = 0, m;
  size_t at = fpi_jp_pos(r->jp);
  if (!arr_open(r)) return false;
  while ((m = arr_next(r)) > 0) {
    tup u;
    if (n == FP_TX_MAX_WIRES) return fail_at(r, fpi_jp_pos(r->jp), "more than %d wire tensors", FP_TX_MAX_WIRES);
    if (!tup_open(r, &u, "a wire tensor is [dtype, count]") || !tup_next(r, &u, 0, 2) || !dtype(r, &w[n].dtype) ||
        !tup_next(r, &u, 1, 2) || !integer(r, 0, INT64_MAX / 16, &w[n].count) || !tup_end(r, &u, 2))
      return false;
    n++;
  }
  if (m < 0) return false;
  if (n == 0) return fail_at(r, at, "expected at least one wire tensor");
  *first = fpi_tx_wires_add(t, w, n);
  *nw = n;
  return true;
}

static bool params(rd *r, fp_tx *t) {
  static const char *const keys[] = {"name", "numel", "wire", "transform", "source", NULL};
  if (!arr_open(r)) return false;
  int m;
  while ((m = arr_next(r)) > 0) {
    if (t->nparams == INT32_MAX) return fail_at(r, fpi_jp_pos(r->jp), "too many params");
    t->params = fpi_grow(r->a, t->params, &t->cap_params, t->nparams + 1, sizeof *t->params);
    fp_tx_param *q = &t->params[t->nparams++];
    q->xf = -1;
    obj o;
    int k, mm;
    if (!obj_open(r, &o, keys, 0x7)) return false;
    while ((mm = obj_next(r, &o, &k)) > 0) {
      size_t at = fpi_jp_pos(r->jp);
      char w[16];
      const char *wire;
      if (k == 3) {
        if (!xf_name(r, t, q)) return false;
        continue;
      }
      if (k == 4) { /* FROM keeps it as MXFP8 */
        char sv[16];
        const char *src;
        if (!str(r, sv, sizeof sv, &src)) return false;
        if (strcmp(src, "mxfp8")) return fail_at(r, at, "expected \"mxfp8\"");
        q->src_mx = true;
        continue;
      }
      bool ok = k == 0 ? str(r, NULL, 0, &q->name) : k == 1 ? integer(r, 0, INT64_MAX, &q->numel) : str(r, w, sizeof w, &wire);
      if (ok && k == 2) {
        if (strcmp(wire, "plain") && strcmp(wire, "mxfp8")) ok = fail_at(r, at, "expected \"plain\" or \"mxfp8\"");
        q->mxfp8 = !strcmp(wire, "mxfp8");
      }
      if (!ok) return false;
    }
    if (mm < 0) return false;
  }
  return m == 0;
}

/* [param, byte offset, bytes, first element, dtype] and, for an optimizer
 * state's region, its plane (1 + the state's index) */
static bool need(rd *r, fp_tx *t, int32_t p) {
  static const int64_t hi[4] = {INT32_MAX, INT64_MAX / 2, INT64_MAX / 2, INT64_MAX};
  int64_t v[4], plane = 0;
  fp_dtype dt;
  tup u;
  if (!tup_open(r, &u, "a need region is [param, byte offset, bytes, first element, dtype] or an optimizer "
                       "state's [param, byte offset, bytes, first element, dtype, plane]"))
    return false;
  for (int k = 0; k < 4; k++)
    if (!tup_next(r, &u, k, 5) || !integer(r, 0, hi[k], &v[k])) return false;
  if (!tup_next(r, &u, 4, 5) || !dtype(r, &dt)) return false;
  int st = arr_next(r);
  if (st < 0) return false;
  if (st > 0 && (!integer(r, 1, FP_TX_MAX_PLANE, &plane) || !tup_end(r, &u, 6))) return false;
  t->plane = (int32_t)plane;
  fpi_tx_region_add(t, true, p, (int32_t)v[0], v[1], v[2], v[3], dt);
  t->plane = 0;
  return true;
}

static bool op(rd *r, fp_tx *t, int32_t p) {
  static const char *const keys[] = {"op",  "peer", "param", "dtype", "sdtype", "n",
                                     "full_off", "dst", "src", "aux", "wires", "plane", NULL};
  obj o;
  int k, m;
  if (!obj_open(r, &o, keys, 0x7D)) return false; /* all but peer, dst, src, aux */
  fp_tx_op *x = fpi_tx_emit(t, FP_TX_COPY, p, 0, FP_F32, 0);
  int32_t w0 = -1;
  int nw = 0;
  size_t wat = 0, aat = 0;
  while ((m = obj_next(r, &o, &k)) > 0) {
    size_t at = fpi_jp_pos(r->jp);
    int64_t v = 0;
    bool ok = true;
    switch (k) {
      case 0: {
        char s[40];
        const char *kind;
        int kk = -1;
        ok = str(r, s, sizeof s, &kind);
        for (int z = 0; ok && z < FP_TX_NKINDS; z++)
          if (!strcmp(kind, fpi_tx_kind_name(z))) kk = z;
        if (ok && kk < 0) ok = fail_at(r, at, "unknown op '%s'", kind);
        x->kind = (fp_tx_kind)(kk < 0 ? 0 : kk);
        break;
      }
      case 1: ok = integer(r, 0, INT32_MAX, &v), x->peer = (int32_t)v; break;
      case 2: ok = integer(r, 0, INT32_MAX, &v), x->param = (int32_t)v; break;
      case 3: {
        fp_dtype dt = FP_F32;
        ok = dtype(r, &dt), x->dtype = dt;
        break;
      }
      case 4: {
        fp_dtype dt = FP_F32;
        ok = dtype(r, &dt), x->sdtype = dt;
        break;
      }
      case 5: ok = integer(r, 0, INT64_MAX / 16, &x->n); break;
      case 6: ok = integer(r, 0, INT64_MAX / 2, &x->full_off); break;
      case 10: wat = fpi_jp_pos(r->jp), ok = wires(r, t, &w0, &nw); break;
      case 11: ok = integer(r, 1, FP_TX_MAX_PLANE, &v), x->plane = (unsigned)v; break;
      default:
        if (k == 9) aat = at;
        ok = ref(r, k == 7 ? &x->dst : k == 8 ? &x->src : &x->aux);
        break;
    }
    if (!ok) return false;
  }
  if (m != 0) return false;
  /* a transform's op names its wire tensors (in aux, xfer.h); no other op has any */
  bool xf = x->kind == FP_TX_PREP_SEND || x->kind == FP_TX_FINALIZE;
  if (nw && !xf) return fail_at(r, wat, "a %s op has no wire tensors", fpi_tx_kind_name(x->kind));
  if (xf && aat) return fail_at(r, aat, "a %s op has no aux operand", fpi_tx_kind_name(x->kind));
  if (xf) fpi_tx_set_wires(x, w0, nw);
  return true;
}

static bool proc(rd *r, fp_tx *t, int64_t *cap_stage, int64_t *cap_same) {
  /* "same": the process runs that process's program (xfer.h fp_tx.same;
   * the verifier checks it) */
  static const char *const keys[] = {"stage_bytes", "need", "ops", "same", NULL};
  int32_t p = (int32_t)t->nprocs;
  t->stage_bytes = fpi_grow(r->a, t->stage_bytes, cap_stage, t->nprocs + 1, sizeof *t->stage_bytes);
  t->same = fpi_grow(r->a, t->same, cap_same, t->nprocs + 1, sizeof *t->same);
  t->same[p] = -1;
  t->nprocs++;
  obj o;
  int k, m;
  if (!obj_open(r, &o, keys, 0x7)) return false;
  while ((m = obj_next(r, &o, &k)) > 0) {
    bool ok = true;
    if (k == 0) {
      ok = integer(r, 0, INT64_MAX / 2, &t->stage_bytes[p]);
    } else if (k == 3) {
      int64_t v;
      ok = integer(r, 0, INT32_MAX, &v);
      t->same[p] = (int32_t)v;
    } else {
      ok = arr_open(r);
      int mm = 0;
      while (ok && (mm = arr_next(r)) > 0) ok = k == 1 ? need(r, t, p) : op(r, t, p);
      ok = ok && mm == 0;
    }
    if (!ok) return false;
  }
  return m == 0;
}

/* ranges that need the whole file (params, processes): located by pointer */
static bool check_ranges(rd *r, fp_tx *t, int64_t nprocs_file) {
  char ptr[160];
  int64_t fe = t->from_offset + t->from_world, te = t->to_offset + t->to_world;
  if (nprocs_file != (fe > te ? fe : te)) {
    fpi_diag_json(r->d, r->src, "/processes",
                 "does not equal max(from.rank_offset + from.world_size, to.rank_offset + to.world_size)");
    return false;
  }
  if (t->nprocs != nprocs_file) {
    fpi_diag_json(r->d, r->src, "/procs", "expected an array of one entry per process (%" PRId64 "), got %" PRId64,
                 nprocs_file, t->nprocs);
    return false;
  }
  bool ok = true;
  int32_t k = 0;
  for (int32_t i = 0; i < t->nops && r->d->nerrors < MAXERR; i++, k++) {
    const fp_tx_op *o = &t->ops[i];
    if (i > 0 && o->proc != t->ops[i - 1].proc) k = 0;
    if (o->param >= t->nparams) {
      snprintf(ptr, sizeof ptr, "/procs/%d/ops/%d/param", o->proc, k);
      fpi_diag_json(r->d, r->src, ptr, "%d is not a param (the transfer has %d)", o->param, t->nparams);
      ok = false;
    }
    if (o->peer >= t->nprocs) {
      snprintf(ptr, sizeof ptr, "/procs/%d/ops/%d/peer", o->proc, k);
      fpi_diag_json(r->d, r->src, ptr, "%d is not a process (the transfer has %" PRId64 ")", o->peer, t->nprocs);
      ok = false;
    }
  }
  k = 0;
  for (int32_t i = 0; i < t->nneed && r->d->nerrors < MAXERR; i++, k++) {
    if (i > 0 && t->need[i].proc != t->need[i - 1].proc) k = 0;
    if (t->need[i].param >= t->nparams) {
      snprintf(ptr, sizeof ptr, "/procs/%d/need/%d/0", t->need[i].proc, k);
      fpi_diag_json(r->d, r->src, ptr, "%d is not a param (the transfer has %d)", t->need[i].param, t->nparams);
      ok = false;
    }
  }
  return ok;
}

fp_tx *fpi_tx_read(fp_arena *a, fp_diag *d, const fp_src *src) {
  static const char *const keys[] = {"format", "model", "what", "from", "to", "processes", "figures", "params",
                                     "procs", NULL};
  if (!fpi_json_text_ok(a, d, src)) return NULL; /* empty, too large, not UTF-8 */
  rd r = {.a = a, .d = d, .src = src, .jp = fpi_jp_new(a, src)};
  fp_tx *t = fpi_tx_new(a);
  int64_t nprocs_file = 0, cap_stage = 0, cap_same = 0;
  obj o;
  int k, m = -1;
  if (obj_open(&r, &o, keys, 0x1BF)) /* all but figures */
    while ((m = obj_next(&r, &o, &k)) > 0) {
      size_t at = fpi_jp_pos(r.jp);
      const char *s = NULL;
      char w[32];
      bool ok;
      switch (k) {
        case 0:
          ok = str(&r, w, sizeof w, &s);
          if (ok && strcmp(s, "flexplan.xfer.v1") != 0)
            ok = fail_at(&r, at, "expected \"flexplan.xfer.v1\" (a transfer saved by flexplan reshard -o)");
          break;
        case 1: ok = str(&r, NULL, 0, &t->model); break;
        case 2:
          ok = str(&r, w, sizeof w, &s);
          if (ok && strcmp(s, "weights") && strcmp(s, "weights+optimizer"))
            ok = fail_at(&r, at, "expected \"weights\" or \"weights+optimizer\"");
          if (ok) t->what = strcmp(s, "weights") ? "weights+optimizer" : "weights";
          break;
        case 3: ok = side(&r, &t->from_hash, &t->from_world, &t->from_arena, &t->from_offset); break;
        case 4: ok = side(&r, &t->to_hash, &t->to_world, &t->to_arena, &t->to_offset); break;
        case 5: ok = integer(&r, 1, INT32_MAX, &nprocs_file); break;
        case 6: ok = figures(&r, t); break;
        case 7: ok = params(&r, t); break;
        default: {
          ok = arr_open(&r);
          int mm = 0;
          while (ok && (mm = arr_next(&r)) > 0) {
            if (t->nprocs == INT32_MAX) {
              ok = fail_at(&r, fpi_jp_pos(r.jp), "too many processes");
              break;
            }
            ok = proc(&r, t, &cap_stage, &cap_same);
          }
          ok = ok && mm == 0;
        }
      }
      if (!ok) break;
    }
  if (m == 0 && fpi_jp_pos(r.jp) < src->len) fail_at(&r, fpi_jp_pos(r.jp), "text after the transfer's object");
  if (r.bad || m != 0 || !check_ranges(&r, t, nprocs_file)) return NULL;
  /* FROM bytes readable: what the ops read from FROM must be checked
   * against the FROM plan itself, which the file does not carry; the
   * executor checks the plan hashes, and the planner's have regions are
   * not saved. A loaded transfer's X5 FROM rule therefore uses the reads
   * themselves (each inside FROM's arena, rule X1). */
  for (int32_t i = 0; i < t->nops; i++) {
    const fp_tx_op *x = &t->ops[i];
    t->plane = (int32_t)x->plane; /* (the executor checks each label against FROM's layout) */
    if (x->src.space == FP_SP_FROM) /* (scales passing through: from the first block's) */
      fpi_tx_region_add(t, false, x->proc, x->param, x->src.off, fpi_tx_src_bytes(t, x),
                        x->sdtype == FP_E8M0 ? x->full_off / FP_MX_BLOCK : x->full_off, x->sdtype);
    if (x->kind == FP_TX_DEQUANT && x->aux.space == FP_SP_FROM) /* an MXFP8 source's scales */
      fpi_tx_region_add(t, false, x->proc, x->param, x->aux.off, fpi_tx_nscales(x->full_off, x->n),
                        x->full_off / FP_MX_BLOCK, FP_E8M0); /* (from its first block) */
    t->plane = 0;
  }
  if (!t->stage_bytes) t->stage_bytes = fpi_alloc_array(a, 1, sizeof *t->stage_bytes);
  if (!t->params) t->params = fpi_alloc_array(a, 1, sizeof *t->params);
  fpi_tx_finish(t); /* (the ops are grouped already: op k of process p is /procs/p/ops/k) */
  t->src = src;
  bool ok = fpi_tx_verify(t, d);
  t->src = NULL; /* the caller's fp_src need not outlive the read */
  return ok ? t : NULL;
}
