/* ir.c - the IR's name tables and its builder.
 *
 * The name tables come from the X-macros of ir.h and ops.def, so an op,
 * stream, segment kind or buffer category is added in one place. The builder
 * appends to the program's arrays, grown with fpi_grow from the program's
 * arena (nothing here is freed on its own); ops go into the current segment,
 * whose op count is kept up to date as ops are emitted, so the program is
 * consistent after every call. */
#include "irpriv.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>



/* ---- name tables ------------------------------------------------------------ */
static const struct {
  const char *name;
  fp_opclass cls;
  const char *doc;
} ops[] = {
#define FP_OP(id, name, cls, doc) {name, FP_OPC_##cls, doc},
#include "ops.def"
#undef FP_OP
};

const char *fpi_op_name(fp_opcode c) { return (unsigned)c < FP_NOPS ? ops[c].name : "?"; }

fp_opclass fpi_op_class(fp_opcode c) {
  FP_ASSERT((unsigned)c < FP_NOPS);
  return ops[c].cls;
}

const char *fpi_op_doc(fp_opcode c) { return (unsigned)c < FP_NOPS ? ops[c].doc : "?"; }

int fpi_op_parse(const char *name) {
  for (int i = 0; i < FP_NOPS; i++)
    if (!strcmp(name, ops[i].name)) return i;
  return -1;
}

static const char *const streams[] = {
#define X(e, s) s,
    FP_STREAMS(X)
#undef X
};
const char *fpi_stream_name(int s) { return s >= 0 && s < FP_NSTREAMS ? streams[s] : "?"; }

static const char *const redops[] = {
#define X(e, s) s,
    FP_REDOPS(X)
#undef X
};
const char *fpi_redop_name(int r) { return r >= 0 && r < FP_NREDOPS ? redops[r] : "?"; }
bool fpi_op_reduces(fp_opcode c) {
  return c == FP_OP_REDUCE_SCATTER || c == FP_OP_REDUCE_SCATTER_V || c == FP_OP_ALL_REDUCE || c == FP_OP_REDUCE;
}

static const struct {
  const char *name;
  bool module;
} segs[] = {
#define X(e, s, m) {s, m},
    FP_SEGS(X)
#undef X
};
const char *fpi_seg_name(int k) { return k >= 0 && k < FP_NSEGKINDS ? segs[k].name : "?"; }
bool fpi_seg_has_module(int k) { return k >= 0 && k < FP_NSEGKINDS && segs[k].module; }

static const char *const bufcats[] = {
#define X(e, s) s,
    FP_BUFCATS(X)
#undef X
};
const char *fpi_buf_cat_name(int c) { return c >= 0 && c < FP_NBUFCATS ? bufcats[c] : "?"; }

/* ---- the modeled machine ------------------------------------------------------- */
#define HWF(f, i) {#f, offsetof(fp_hw, f), i, false}
const fp_hw_field fp_hw_fields[FP_HW_NFIELDS] = {
    HWF(gpus_per_node, true), HWF(hbm_bytes, true),   HWF(flops, false),    HWF(nvlink_gbps, false),
    HWF(ib_gbps, false),      HWF(hbm_gbps, false),   HWF(pcie_gbps, false), HWF(base_us, false),
    HWF(nvlink_hop_us, false), HWF(net_hop_us, false), HWF(launch_us, false),
    {"hook_us", offsetof(fp_hw, hook_us), false, true},
};
#undef HWF

/* ---- memory timeline ---------------------------------------------------------- */
const char *fpi_memtl_cat_name(int c) { return c == FP_MEMTL_ACT ? "activations" : fpi_buf_cat_name(c); }

void fpi_memtl_maxima(const fp_memtl *t, int64_t *peak, int64_t *lower_bound) {
  int64_t pk = 0, lb = 0;
  for (int32_t i = 0; i < t->npts; i++) {
    __int128 all = 0;
    for (int c = 0; c < FP_MEMTL_NCATS; c++) all += t->pts[i].bytes[c];
    __int128 arena = all - t->pts[i].bytes[FP_MEMTL_ACT];
    int64_t x = all > INT64_MAX ? INT64_MAX : (int64_t)all, y = arena > INT64_MAX ? INT64_MAX : (int64_t)arena;
    if (x > pk) pk = x;
    if (y > lb) lb = y;
  }
  *peak = pk;
  *lower_bound = lb;
}

const char *fpi_memtl_check(const fp_memtl *t) {
  if (t->npts < 0 || (t->npts > 0 && !t->pts)) return "a negative number of points";
  for (int32_t i = 0; i < t->npts; i++) {
    const fp_memtl_point *q = &t->pts[i];
    if (!isfinite(q->t_us)) return "a point's time is not a finite number";
    if (i > 0 && q->t_us < t->pts[i - 1].t_us) return "points are not in time order";
    for (int c = 0; c < FP_MEMTL_NCATS; c++)
      if (q->bytes[c] < 0) return "a point has negative bytes";
  }
  int64_t peak, lb;
  fpi_memtl_maxima(t, &peak, &lb);
  if (t->peak_bytes != peak) return "peak_bytes is not the most bytes live at any point";
  if (t->lower_bound_bytes != lb) return "lower_bound_bytes is not the most arena bytes live at any point";
  return NULL;
}

/* by fp_placement_kind */
static const char *const placements[FP_IR_NPLACEMENTS] = {"shard", "ragged_shard", "owned", "replicate", "flat_shard",
                                                                   "cyclic_shard"};
const char *fpi_ir_placement_name(int k) { return k >= 0 && k < FP_IR_NPLACEMENTS ? placements[k] : "?"; }
int fpi_ir_placement_parse(const char *s) {
  for (int i = 0; i < FP_IR_NPLACEMENTS; i++)
    if (!strcmp(s, placements[i])) return i;
  return -1;
}

/* ---- names: the bare form (the map is base's fp_namemap) -------------------- */
bool fpi_ir_name_is_bare(const char *s) {
  if (!s || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) return false;
  for (; *s; s++) {
    char c = *s;
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == ':' || c == '/' || c == '-'))
      return false;
  }
  return true;
}

/* The text is what this loop gives (kept as the oracle in tests/):
 *
 *   for (int prec = 1; prec <= 17; prec++) {
 *     snprintf(buf, 40, "%.*g", prec, d);
 *     if (strtod(buf, NULL) == d) return;
 *   }
 *
 * computed without it. Integers below 2^53 take exactly as many significant
 * digits as they have (without trailing zeros): fewer round to another
 * integer, which is a different double. Other normal numbers are printed
 * once with 17 significant digits (S, exponent X), and the correctly rounded
 * P-digit form of d is read off S: S's tail below the P-th digit decides the
 * rounding exactly unless it is exactly half (then snprintf decides). A
 * candidate more than 12 units of S's last digit away from S cannot read back
 * as d (half an ulp of a normal double is at most 10^17 / 2^53 < 11.2 such
 * units), so strtod only sees the candidates that may. Subnormals take the
 * loop. */
static const uint64_t pow10u[18] = {1ull,
                                    10ull,
                                    100ull,
                                    1000ull,
                                    10000ull,
                                    100000ull,
                                    1000000ull,
                                    10000000ull,
                                    100000000ull,
                                    1000000000ull,
                                    10000000000ull,
                                    100000000000ull,
                                    1000000000000ull,
                                    10000000000000ull,
                                    100000000000000ull,
                                    1000000000000000ull,
                                    10000000000000000ull,
                                    100000000000000000ull};

/* "%.Pg" of the number dig[0].dig[1..P) * 10^x (P digits, maybe trailing
 * zeros) after sign; returns the end */
static char *fmt_g(char *q, const char *dig, int P, int x) {
  int k = P;
  while (k > 1 && dig[k - 1] == '0') k--; /* %g drops trailing zeros */
  if (x < -4 || x >= P) {
    *q++ = dig[0];
    if (k > 1) {
      *q++ = '.';
      memcpy(q, dig + 1, (size_t)k - 1);
      q += k - 1;
    }
    *q++ = 'e';
    *q++ = x < 0 ? '-' : '+';
    int ax = x < 0 ? -x : x;
    if (ax >= 100) *q++ = (char)('0' + ax / 100);
    *q++ = (char)('0' + ax / 10 % 10);
    *q++ = (char)('0' + ax % 10);
  } else if (x >= 0) {
    memcpy(q, dig, (size_t)x + 1);
    q += x + 1;
    if (k > x + 1) {
      *q++ = '.';
      memcpy(q, dig + x + 1, (size_t)(k - x - 1));
      q += k - x - 1;
    }
  } else {
    *q++ = '0';
    *q++ = '.';
    for (int z = 0; z < -x - 1; z++) *q++ = '0';
    memcpy(q, dig, (size_t)k);
    q += k;
  }
  *q = 0;
  return q;
}

/* 5^0 .. 5^27 (5^27 < 2^64) */
static const uint64_t pow5u[28] = {1ull,
                                   5ull,
                                   25ull,
                                   125ull,
                                   625ull,
                                   3125ull,
                                   15625ull,
                                   78125ull,
                                   390625ull,
                                   1953125ull,
                                   9765625ull,
                                   48828125ull,
                                   244140625ull,
                                   1220703125ull,
                                   6103515625ull,
                                   30517578125ull,
                                   152587890625ull,
                                   762939453125ull,
                                   3814697265625ull,
                                   19073486328125ull,
                                   95367431640625ull,
                                   476837158203125ull,
                                   2384185791015625ull,
                                   11920928955078125ull,
                                   59604644775390625ull,
                                   298023223876953125ull,
                                   1490116119384765625ull,
                                   7450580596923828125ull};

/* d (normal, |d| = N * 10^t exactly): the correctly rounded P-digit forms
 * come from N's digits with ties to even, as printf rounds. A candidate
 * further than |d| * 2^-53 (at least half an ulp) from d cannot read back. */
static size_t fmt_exact(char *buf, char *q, double d, uint64_t N, int t) {
  char nt[20];
  char *dig = fpi_u64_digits(nt, N);
  int nd = (int)(nt + 20 - dig), X = nd - 1 + t;
  for (int P = 1; P < nd && P < 17; P++) {
    int m = nd - P; /* digits dropped: at most 19 */
    uint64_t pw = pow10u[m > 17 ? 17 : m] * (m > 17 ? pow10u[m - 17] : 1);
    uint64_t A = N / pw, T = N % pw, half = pw / 2, D;
    if (T > half || (T == half && (A & 1))) {
      A++;
      D = pw - T;
    } else {
      D = T;
    }
    if (D > (N >> 53) + 1) continue;
    int x = X;
    if (A == pow10u[P]) { /* rounded up to the next power of ten */
      A = pow10u[P - 1];
      x++;
    }
    char t2[20];
    char *s = fpi_u64_digits(t2, A);
    size_t len = (size_t)(fmt_g(q, s, P, x) - buf);
    if (strtod(buf, NULL) == d) return len;
  }
  if (nd <= 17) return (size_t)(fmt_g(q, dig, nd, X) - buf); /* d itself */
  /* "%.17g": 17 digits, rounded as above */
  int m = nd - 17;
  uint64_t pw = pow10u[m], A = N / pw, T = N % pw, half = pw / 2;
  int x = X;
  if (T > half || (T == half && (A & 1))) A++;
  if (A == pow10u[17]) {
    A = pow10u[16];
    x++;
  }
  char t2[20];
  return (size_t)(fmt_g(q, fpi_u64_digits(t2, A), 17, x) - buf);
}

static size_t fmt_double_loop(char buf[40], double d) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, 40, "%.*g", prec, d);
    if (strtod(buf, NULL) == d) return strlen(buf);
  }
  snprintf(buf, 40, "%.17g", d);
  return strlen(buf);
}

size_t fpi_fmt_double(char buf[40], double d) {
  if (isnan(d) || isinf(d)) { /* strtod reads these back */
    snprintf(buf, 40, "%s", isnan(d) ? "nan" : d > 0 ? "inf" : "-inf");
    return strlen(buf);
  }
  double a = fabs(d);
  char *q = buf;
  if (signbit(d)) *q++ = '-';
  if (a < 9007199254740992.0 && a == (double)(uint64_t)a) { /* an integer below 2^53 */
    char t[20];
    char *dig = fpi_u64_digits(t, (uint64_t)a);
    int nd = (int)(t + 20 - dig), P = nd;
    while (P > 1 && dig[P - 1] == '0') P--;
    return (size_t)(fmt_g(q, dig, P, nd - 1) - buf);
  }
  if (a < DBL_MIN) return fmt_double_loop(buf, d);
  /* a = M * 2^k with M odd; when M * 5^-k (k < 0) or M * 2^k (k >= 0) fits
   * in 64 bits it is a's exact decimal significand N */
  int e2;
  uint64_t M = (uint64_t)ldexp(frexp(a, &e2), 53), N = 0;
  int k = e2 - 53;
  while (!(M & 1)) {
    M >>= 1;
    k++;
  }
  if (k < 0 && -k < 28 && M <= UINT64_MAX / pow5u[-k]) N = M * pow5u[-k];
  if (k >= 0 && k < 11 && M <= UINT64_MAX >> k) N = M << k;
  if (N) return fmt_exact(buf, q, d, N, k < 0 ? k : 0);
  char e[40]; /* d.dddddddddddddddde[+-]XX */
  int n = snprintf(e, sizeof e, "%.16e", a);
  FP_ASSERT(n >= 21 && n < (int)sizeof e && e[1] == '.' && e[18] == 'e');
  uint64_t S = (uint64_t)(e[0] - '0');
  for (int i = 2; i < 18; i++) S = S * 10 + (uint64_t)(e[i] - '0');
  int X = atoi(e + 19);
  char dig[20];
  for (int P = 1; P <= 16; P++) {
    uint64_t pw = pow10u[17 - P], A = S / pw, T = S % pw, half = pw / 2, D;
    if (T == half) { /* a tie in S: the exact value decides */
      snprintf(buf, 40, "%.*g", P, d);
      if (strtod(buf, NULL) == d) return strlen(buf);
      continue;
    }
    if (T > half) {
      A++;
      D = pw - T;
    } else {
      D = T;
    }
    if (D > 12) continue;
    int x = X;
    if (A == pow10u[P]) { /* rounded up to the next power of ten */
      A = pow10u[P - 1];
      x++;
    }
    char t[20];
    char *s = fpi_u64_digits(t, A);
    FP_ASSERT(t + 20 - s == P);
    memcpy(dig, s, (size_t)P);
    size_t len = (size_t)(fmt_g(q, dig, P, x) - buf);
    if (strtod(buf, NULL) == d) return len;
  }
  memcpy(dig, e, 1); /* 17 digits always read back */
  memcpy(dig + 1, e + 2, 16);
  return (size_t)(fmt_g(q, dig, 17, X) - buf);
}

/* ---- builder ---------------------------------------------------------------- */
/* the op record's size (ir.h packs it: a program of 2.2M ops is 334 MB) */
_Static_assert(sizeof(fp_op) == 152, "fp_op is packed to 152 bytes");

fp_prog *fpi_prog_new(fp_arena *a) {
  fp_prog *p = fpi_alloc(a, sizeof *p);
  p->arena = a;
  p->world_size = 1;
  p->ranks_per_node = 1;
  p->grad_accumulation = 1;
  p->tp = 1;
  return p;
}

/* a copy of n elements of src (NULL when none), with room for exactly n:
 * fpi_grow extends it in place later when it has a chunk of its own */
static void *dup_array(fp_arena *a, const void *src, int32_t n, int64_t *cap, size_t elem) {
  *cap = n;
  if (!src || n <= 0) {
    *cap = 0;
    return NULL;
  }
  size_t bytes;
  if (__builtin_mul_overflow((size_t)n, elem, &bytes)) fpi_internal_error(__FILE__, __LINE__, "array size overflow");
  return fpi_memdup(a, src, bytes);
}

fp_prog *fpi_prog_fork(fp_arena *a, const fp_prog *src) {
  fp_prog *p = fpi_alloc(a, sizeof *p);
  *p = *src;
  p->arena = a;
  p->memtl = NULL;
  p->figures = NULL;
  /* shared: nothing may grow them either (a grown array moves) */
  p->cap_comms = p->ncomms, p->cap_tabs = p->ntabs, p->cap_mods = p->nmods, p->cap_params = p->nparams;
  p->cap_buckets = p->nbuckets, p->cap_uses = p->nuses, p->cap_shapes = p->nshapes;
#define DUP(arr, n, cap) (p->arr = dup_array(a, src->arr, src->n, &p->cap, sizeof *src->arr))
  DUP(bufs, nbufs, cap_bufs);
  DUP(segs, nsegs, cap_segs);
  /* the ops with room for the records and waits the sync pass adds
   * (about one of each per op; it grows the array if it needs more), so
   * that it writes them in place instead of copying the ops to a bigger
   * array: not zeroed, and pages never written are never touched */
  p->cap_ops = 2 * (int64_t)src->nops + 16;
  p->ops = fpi_alloc_array_raw(a, (size_t)p->cap_ops, sizeof *p->ops);
  if (src->nops) memcpy(p->ops, src->ops, (size_t)src->nops * sizeof *p->ops);
  DUP(lives, nlives, cap_lives);
#undef DUP
  return p;
}

#define GROW(p, arr, n, cap) ((p)->arr = fpi_grow((p)->arena, (p)->arr, &(p)->cap, (int64_t)(p)->n + 1, sizeof *(p)->arr))

static const char *name_or_empty(fp_arena *a, const char *s) { return fpi_strdup(a, s ? s : ""); }

int fpi_ir_comm_add(fp_prog *p, const char *name, int64_t size, int64_t stride) {
  GROW(p, comms, ncomms, cap_comms);
  fp_ir_comm *c = &p->comms[p->ncomms];
  c->name = name_or_empty(p->arena, name);
  c->size = size;
  c->stride = stride;
  return p->ncomms++;
}

int fpi_ir_table_add(fp_prog *p, const char *name, int64_t n, const int64_t *off, const int64_t *cnt) {
  FP_ASSERT(n >= 0);
  GROW(p, tabs, ntabs, cap_tabs);
  fp_ir_table *t = &p->tabs[p->ntabs];
  t->name = name_or_empty(p->arena, name);
  t->n = n;
  t->off = fpi_alloc_array(p->arena, (size_t)n, sizeof *t->off);
  t->cnt = fpi_alloc_array(p->arena, (size_t)n, sizeof *t->cnt);
  if (n && off) memcpy(t->off, off, (size_t)n * sizeof *off);
  if (n && cnt) memcpy(t->cnt, cnt, (size_t)n * sizeof *cnt);
  return p->ntabs++;
}

int fpi_ir_buf_add(fp_prog *p, const char *name, fp_buf_kind kind, fp_buf_cat cat, int bucket, int64_t bytes) {
  GROW(p, bufs, nbufs, cap_bufs);
  fp_ir_buf *b = &p->bufs[p->nbufs];
  b->name = name_or_empty(p->arena, name);
  b->kind = kind;
  b->cat = cat;
  b->bucket = bucket;
  b->bytes = bytes;
  b->offset = -1;
  return p->nbufs++;
}

int fpi_ir_module_add(fp_prog *p, const char *name, double flops_fwd, double flops_bwd, int64_t act) {
  GROW(p, mods, nmods, cap_mods);
  fp_ir_module *m = &p->mods[p->nmods];
  m->name = name_or_empty(p->arena, name);
  m->flops_fwd = flops_fwd;
  m->flops_bwd = flops_bwd;
  m->activation_bytes = act;
  m->recompute = false;
  m->saved_bytes = 0;
  m->line = 0;
  return p->nmods++;
}

int fpi_ir_bucket_add(fp_prog *p, const char *name) {
  GROW(p, buckets, nbuckets, cap_buckets);
  p->buckets[p->nbuckets] = name_or_empty(p->arena, name);
  return p->nbuckets++;
}

/* exactly the room asked for, not zeroed: fpi_ir_param_add writes each
 * entry whole (zeroing a doubled table - 2,048 entries for 1,137 params -
 * was 5% of the llama3-405b-tp8 compile, most of it the pages' first
 * touch) */
void fpi_ir_param_reserve(fp_prog *p, int32_t n) {
  int64_t need = (int64_t)p->nparams + n;
  if (need <= p->cap_params) return;
  fp_ir_param *q = fpi_alloc_array_raw(p->arena, (size_t)need, sizeof *q);
  if (p->nparams) memcpy(q, p->params, (size_t)p->nparams * sizeof *q);
  p->params = q;
  p->cap_params = need;
}

fp_ir_param *fpi_ir_param_add(fp_prog *p) {
  GROW(p, params, nparams, cap_params);
  fp_ir_param *q = &p->params[p->nparams++];
  memset(q, 0, sizeof *q);
  q->name = "";
  q->comm = q->tab = q->tp_dim = -1;
  q->owner = -1;
  q->main.buf = q->grad.buf = q->weight.buf = q->ugrad.buf = q->opt.buf = q->scales.buf = -1;
  return q;
}

int fpi_ir_event_new(fp_prog *p) {
  FP_ASSERT(p->nevents < INT32_MAX);
  return p->nevents++;
}

int fpi_ir_seg_begin(fp_prog *p, fp_seg_kind kind, int module, int micro) {
  GROW(p, segs, nsegs, cap_segs);
  if (p->nsegs > 0) { /* close the previous one */
    fp_seg *prev = &p->segs[p->nsegs - 1];
    prev->nops = p->nops - prev->first;
  }
  fp_seg *s = &p->segs[p->nsegs];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->module = module;
  s->micro = micro;
  s->first = p->nops;
  s->nops = 0;
  return p->nsegs++;
}

fp_op *fpi_ir_emit(fp_prog *p, fp_opcode code, fp_stream s, fp_dtype dt, int64_t count) {
  FP_ASSERT(p->nsegs > 0); /* ops live in segments: call fpi_ir_seg_begin first */
  FP_ASSERT(p->nops < INT32_MAX);
  p->ops = fpi_grow_raw(p->arena, p->ops, &p->cap_ops, (int64_t)p->nops + 1, sizeof *p->ops);
  fp_op *op = &p->ops[p->nops++];
  memset(op, 0, sizeof *op);
  op->code = code;
  op->stream = s;
  op->dtype = op->sdtype = dt;
  op->seg = p->nsegs - 1;
  op->comm = op->only = op->only_comm = op->root = op->event = -1;
  op->module = op->bucket = op->group = op->tab = op->shape = -1;
  op->pass = FP_PASS_FWD;
  op->count = count;
  op->dst = op->src = op->aux = fpi_noreg();
  p->segs[p->nsegs - 1].nops = p->nops - p->segs[p->nsegs - 1].first;
  return op;
}

void fpi_ir_buf_live(fp_prog *p, int buf, int32_t first_op, int32_t last_op) {
  GROW(p, lives, nlives, cap_lives);
  p->lives[p->nlives++] = (fp_ir_live){buf, first_op, last_op};
}

void fpi_ir_op_shape(fp_prog *p, fp_op *op, int64_t rows, int64_t dpitch, int64_t spitch) {
  if (rows == 1 && !dpitch && !spitch) {
    op->shape = -1;
    return;
  }
  FP_ASSERT(p->nshapes < INT32_MAX);
  GROW(p, shapes, nshapes, cap_shapes);
  p->shapes[p->nshapes] = (fp_op_shape){rows, dpitch, spitch};
  op->shape = p->nshapes++;
}

void fpi_ir_op_uses(fp_prog *p, fp_op *op, const int32_t *bufs, int n) {
  FP_ASSERT(n >= 0 && p->nuses <= INT32_MAX - n);
  p->uses = fpi_grow(p->arena, p->uses, &p->cap_uses, (int64_t)p->nuses + n, sizeof *p->uses);
  if (n) memcpy(p->uses + p->nuses, bufs, (size_t)n * sizeof *bufs);
  op->uses = p->nuses;
  op->nuses = n;
  p->nuses += n;
}

/* ---- rank arithmetic ---------------------------------------------------------- */
int64_t fpi_region_offset(const fp_prog *p, const fp_op *op, const fp_region *r, fp_dtype dt, int64_t g) {
  int64_t off = r->off + g * r->stride;
  if (r->tabrel) {
    FP_ASSERT(op->tab >= 0 && op->tab < p->ntabs && g >= 0 && g < p->tabs[op->tab].n);
    off += p->tabs[op->tab].off[g] * fpi_dtype_size(dt);
  }
  return off;
}

/* ops whose count on rank g is tab.cnt[g] when they have a table */
static bool count_from_table(fp_opcode c) {
  if (fpi_op_regions(c)) return false; /* a region table: n is the sum of its counts */
  return c == FP_OP_ALL_GATHER_V || c == FP_OP_REDUCE_SCATTER_V || ((unsigned)c < FP_NOPS && ops[c].cls == FP_OPC_LOCAL);
}
bool fpi_op_regions(fp_opcode c) { return c == FP_OP_SPLIT_COPY || c == FP_OP_CHUNK_CAT; }

int64_t fpi_op_count(const fp_prog *p, const fp_op *op, int64_t g) {
  if (op->tab >= 0 && count_from_table(op->code)) {
    FP_ASSERT(op->tab < p->ntabs && g >= 0 && g < p->tabs[op->tab].n);
    return p->tabs[op->tab].cnt[g];
  }
  return op->count;
}
