/* verify_sem.c - rule 9, the semantic check: does the program compute the
 * training step it claims? Rules 1-8 (verify.c) prove a program well formed,
 * race-free and hang-free; this rule interprets it over symbolic values and
 * proves what every byte holds.
 *
 * The interpreter walks two steps in program order (rule 8 makes program
 * order a valid schedule). Per rank class (the ranks whose index is the same
 * in every communicator that addresses memory, selects a table entry, a root
 * or a predicate, or shards a param: they run exactly the same concrete
 * program) and per buffer it keeps an interval map of byte ranges to values
 * (struct cell): undefined, zeros, "param p elements [e, ..) main weight at
 * version v in dtype d (rounded to r, MXFP8)", "grad of p elements [e, ..)
 * from these (micro-batch, use) slots, summed over these digit ranges of
 * the ranks, scaled by s, in dtype d", or MXFP8 block scales. Values are the
 * same on every rank that holds them except for the ranks a sum covers,
 * which are relative (the digit ranges of the communicators reduced over), so
 * a collective combines the member classes' maps directly. It proves:
 *  - at the end of every pre_forward(m) / pre_backward(m), the weight view of
 *    every param m reads holds the current main weight of the whole param,
 *    in the param dtype, rounded once (or MXFP8 blocks of the flat space);
 *  - at the end of pre_optimizer, each rank's piece of every trainable
 *    param's main grad holds the sum over every rank and every backward
 *    (micro-batches, tied uses) of exactly its elements, once each, in the
 *    main-grad dtype, scaled by exactly 1/(world x micro-batches): the
 *    step's loss is the mean over every micro-batch of every rank, whatever
 *    reduce ops (sum, avg) and pre/post divides carry the factor (the
 *    interpreter multiplies each one in); the optimizer then moves the main weights to
 *    the next version, and step 2's reads must see it;
 *  - no op reads undefined bytes, and no op combines unlike values (sums a
 *    weight, adds grads of other elements, counts a rank or a backward
 *    twice, reads bytes as a dtype they do not hold).
 * Transient buffers hold nothing outside their live ranges. A failure is
 * reported once per op (or segment) through the verifier's report function. */
#include "irpriv.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define SEM_MAX_ERRORS 20
/* the most (rank class, param sharded apart from the flat buckets) pairs the
 * check walks: every class holds its own piece of each such param, so the
 * state grows with their product (--policy fsdp2 at 2,048 ranks full_shard:
 * 2,048 x 45,000). Beyond it rule 9 is skipped and fp_ir_sem_skipped says so. */
#define SEM_MAX_PIECES ((int64_t)8 << 20)

long fp_ir_sem_skipped;

typedef enum {
  SV_UNDEF,  /* never written, or not live (why: the op that freed it, -1: step start) */
  SV_ZERO,   /* zero bits (memset, shard padding): zero in every dtype */
  SV_WEIGHT, /* main weight of param p, element e at lo, version ver */
  SV_GRAD,   /* a sum of partial grads of param p, element e at lo */
  SV_SCALE,  /* MXFP8 e8m0 scale of param p's 32-element block e at lo (one byte each); in a transfer
              * taken over the block's elements in the span [digits, digits + slots) (tx_span) */
  SV_JUNK,   /* a value no proof covers (why: the op that made it; reported there) */
  SV_WIRE,   /* transfers: the wire bytes a transform made of param p's elements [digits, digits + slots),
              * byte e of its wire tensors at lo (as fpi_tx_wire_at lays them out), called from dtype dt
              * to dtype rnd */
} sv_kind;

enum {
  F_MX = 1,      /* quantized to MXFP8 (blocks of the flat space) */
  F_INEXACT = 2, /* rounded twice through dtypes that do not contain each other */
  F_XF = 4,      /* transfers: written by the param's reshard transform (finalize_recv) */
};

typedef struct cell {
  int64_t lo, hi;    /* bytes [lo, hi) of the buffer */
  uint8_t kind;      /* sv_kind */
  uint8_t dt;        /* dtype the bytes hold (WEIGHT, GRAD) */
  uint8_t rnd;       /* the dtype the value was last rounded to */
  uint8_t fl;        /* F_* */
  int32_t p;         /* param (WEIGHT, GRAD, SCALE) */
  int32_t ver;       /* WEIGHT: version; UNDEF / JUNK: op index that made it (-1 none) */
  int64_t e;         /* element (SCALE: block) at lo */
  uint64_t slots;    /* GRAD: the (micro-batch, use) backwards summed; transfers: a span's length */
  uint64_t digits;   /* GRAD: the digit ranges of the ranks summed over; transfers: a span's first element */
  double s;          /* GRAD: scale */
} cell;

typedef struct cmap {
  cell *c;
  int32_t n, cap;
} cmap;

typedef struct sctx {
  const fp_prog *p;
  fp_vreport report;
  void *rctx;
  int nerr;
  bool *op_reported, *seg_reported;
  /* rank classes */
  int32_t ncls;
  int64_t *rep;         /* representative (lowest) rank of each class */
  bool *addr;           /* per comm: addresses memory (class-defining) */
  int32_t *addrc, naddr;
  int32_t *cls_of;      /* per rank: its class */
  /* digits: the world as mixed-radix digit ranges between communicator bounds */
  int64_t bound[66];
  int32_t nbound;
  uint64_t *cdig;       /* per comm: its digit ranges (0: not a digit range) */
  uint64_t world_dig;
  uint64_t dp_dig;   /* the digits of one dp group, every tp-th rank (world_dig when tp is 1):
                      * what a main grad is summed over */
  /* state: per buffer one map shared by every class while it is the same
   * on all (uni[b]: sh[b]), else one per class (st[k * nbufs + b]) */
  cmap *st, *sh;
  bool *uni;
  bool uni_mode;        /* run_local writes the shared maps (a class-independent op) */
  /* params by class: the flat ones per main buffer sorted by position, the rest */
  int32_t *flat, nflat; /* flat params sorted by (main buffer, position) */
  int32_t *other, nother;
  int32_t *plist;       /* scratch: one class's params */
  cell *tmp, *tmp2;     /* scratch lists */
  int32_t ntmp, captmp, ntmp2, captmp2;
  cell *out;            /* collectives: per class outputs, concatenated */
  int32_t *outn, nout, capout;
  /* params */
  int32_t *ver;         /* current version per param */
  uint64_t *allslots;   /* per param: every (micro, use) slot of a step */
  int32_t *nslot;       /* per param: slots numbered so far this step */
  bool *slot_over;      /* per param: more than 64 backwards: grads not proven */
  int32_t *bslot;       /* per param: slot counter within the current step */
  int32_t *resets, *rstart; /* per op: transient buffers whose live range starts there */
  int step;
} sctx;

static void serr(sctx *s, fp_vloc what, int64_t i, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void serr(sctx *s, fp_vloc what, int64_t i, const char *fmt, ...) {
  if (s->nerr >= SEM_MAX_ERRORS) return;
  bool *seen = what == FP_VL_OP ? s->op_reported : what == FP_VL_SEG ? s->seg_reported : NULL;
  if (seen) {
    if (seen[i]) return;
    seen[i] = true;
  }
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  s->nerr++;
  s->report(s->rctx, s->p, what, i, msg);
}

static int64_t esize(const cell *c) {
  if (c->kind == SV_SCALE || c->kind == SV_WIRE) return 1;
  if (c->kind == SV_WEIGHT || c->kind == SV_GRAD) return fpi_dtype_size((fp_dtype)c->dt);
  return 0;
}
static bool has_elems(const cell *c) {
  return c->kind == SV_WEIGHT || c->kind == SV_GRAD || c->kind == SV_SCALE || c->kind == SV_WIRE;
}

/* the same value apart from position (b may continue a) */
static bool same_attrs(const cell *a, const cell *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case SV_UNDEF: return a->ver == b->ver && a->e == b->e;
    case SV_JUNK: return a->ver == b->ver;
    case SV_ZERO: return true;
    /* (SCALE, WEIGHT: digits and slots a transfer's MXFP8 span, 0 in a plan) */
    case SV_SCALE: return a->p == b->p && a->ver == b->ver && a->digits == b->digits && a->slots == b->slots;
    case SV_WIRE:
      return a->p == b->p && a->digits == b->digits && a->slots == b->slots && a->dt == b->dt && a->rnd == b->rnd;
    case SV_WEIGHT:
      return a->p == b->p && a->ver == b->ver && a->dt == b->dt && a->rnd == b->rnd && a->fl == b->fl &&
             a->digits == b->digits && a->slots == b->slots;
    case SV_GRAD:
      return a->p == b->p && a->dt == b->dt && a->rnd == b->rnd && a->fl == b->fl && a->slots == b->slots &&
             a->digits == b->digits && a->s == b->s;
  }
  return false;
}
static bool continues(const cell *a, const cell *b) {
  if (a->hi != b->lo || !same_attrs(a, b)) return false;
  if (!has_elems(a)) return true;
  int64_t z = esize(a);
  return (a->hi - a->lo) % z == 0 && b->e == a->e + (a->hi - a->lo) / z;
}

/* c restricted to [lo, hi) (inside it) */
static cell clip(const cell *c, int64_t lo, int64_t hi) {
  cell r = *c;
  if (has_elems(c) && lo > c->lo) {
    int64_t z = esize(c);
    if ((lo - c->lo) % z) { /* cut inside an element */
      r.kind = SV_JUNK;
      r.ver = -1;
    } else {
      r.e = c->e + (lo - c->lo) / z;
    }
  }
  r.lo = lo;
  r.hi = hi;
  return r;
}

static void push(cell **v, int32_t *n, int32_t *cap, const cell *c) {
  if (*n > 0) { /* merge with the previous one when it continues */
    cell *l = &(*v)[*n - 1];
    if (continues(l, c)) {
      l->hi = c->hi;
      return;
    }
  }
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 16;
    *v = realloc(*v, (size_t)*cap * sizeof **v);
    FP_ASSERT(*v);
  }
  (*v)[(*n)++] = *c;
}

static cmap *smap(sctx *s, int32_t k, int32_t b) { return &s->st[(size_t)k * (size_t)s->p->nbufs + (size_t)b]; }

static void map_set_all(sctx *s, cmap *m, int64_t bytes, sv_kind kind, int32_t why) {
  (void)s;
  m->n = 0;
  cell c = {.lo = 0, .hi = bytes > 0 ? bytes : 0, .kind = (uint8_t)kind, .ver = why, .p = -1, .e = -1};
  push(&m->c, &m->n, &m->cap, &c);
}

/* first cell whose hi > x */
static int32_t find(const cmap *m, int64_t x) {
  int32_t a = 0, b = m->n;
  while (a < b) {
    int32_t h = (a + b) / 2;
    if (m->c[h].hi <= x) a = h + 1;
    else b = h;
  }
  return a;
}

/* the cells of [lo, hi) into s->tmp, positions relative to lo */
static void map_read(sctx *s, const cmap *m, int64_t lo, int64_t hi, cell **out, int32_t *n, int32_t *cap) {
  *n = 0;
  for (int32_t i = find(m, lo); i < m->n && m->c[i].lo < hi; i++) {
    int64_t a = m->c[i].lo > lo ? m->c[i].lo : lo, b = m->c[i].hi < hi ? m->c[i].hi : hi;
    if (a >= b) continue;
    cell c = clip(&m->c[i], a, b);
    c.lo -= lo;
    c.hi -= lo;
    push(out, n, cap, &c);
  }
  (void)s;
}

/* replace [at, at + len) with cells (positions relative to at, covering [0, len)) */
static void map_write(cmap *m, int64_t at, const cell *cs, int32_t nc) {
  if (nc == 0) return;
  int64_t lo = at, hi = at + cs[nc - 1].hi;
  int32_t i = find(m, lo), j = i;
  while (j < m->n && m->c[j].lo < hi) j++;
  /* pieces of the cells cut at lo and hi */
  cell left = {0}, right = {0};
  bool hl = i < m->n && m->c[i].lo < lo, hr = j > 0 && j - 1 < m->n && m->c[j - 1].hi > hi;
  if (hl) left = clip(&m->c[i], m->c[i].lo, lo);
  if (hr) right = clip(&m->c[j - 1], hi, m->c[j - 1].hi);
  int32_t add = nc + hl + hr, del = j - i;
  int32_t nn = m->n - del + add;
  if (nn > m->cap) {
    m->cap = nn * 2 > 16 ? nn * 2 : 16;
    m->c = realloc(m->c, (size_t)m->cap * sizeof *m->c);
    FP_ASSERT(m->c);
  }
  memmove(m->c + i + add, m->c + j, (size_t)(m->n - j) * sizeof *m->c);
  int32_t w = i;
  if (hl) m->c[w++] = left;
  for (int32_t k = 0; k < nc; k++) {
    m->c[w] = cs[k];
    m->c[w].lo += at;
    m->c[w].hi += at;
    w++;
  }
  if (hr) m->c[w++] = right;
  m->n = nn;
  /* merge around the written span */
  int32_t a = i > 0 ? i - 1 : 0, b = i + add < m->n ? i + add : m->n - 1, o = a;
  for (int32_t k = a + 1; k <= b; k++) {
    if (continues(&m->c[o], &m->c[k])) m->c[o].hi = m->c[k].hi;
    else m->c[++o] = m->c[k];
  }
  if (o < b) {
    memmove(m->c + o + 1, m->c + b + 1, (size_t)(m->n - b - 1) * sizeof *m->c);
    m->n -= b - o;
  }
}

static void map_copy(cmap *d, const cmap *src) {
  if (d->cap < src->n) {
    d->cap = src->n > 4 ? src->n : 4;
    d->c = realloc(d->c, (size_t)d->cap * sizeof *d->c);
    FP_ASSERT(d->c);
  }
  if (src->n > 0) memcpy(d->c, src->c, (size_t)src->n * sizeof *d->c);
  d->n = src->n;
}
static void map_free(cmap *m) {
  free(m->c);
  *m = (cmap){0};
}
static bool map_equal(const cmap *a, const cmap *b) {
  if (a->n != b->n) return false;
  for (int32_t i = 0; i < a->n; i++)
    if (a->c[i].lo != b->c[i].lo || a->c[i].hi != b->c[i].hi || !same_attrs(&a->c[i], &b->c[i]) ||
        (has_elems(&a->c[i]) && a->c[i].e != b->c[i].e))
      return false;
  return true;
}

/* a and b hold the same outside bytes [lo, hi) */
static bool map_equal_outside(const cmap *a, const cmap *b, int64_t lo, int64_t hi) {
  int32_t i = 0, j = 0;
  for (;;) {
    while (i < a->n && a->c[i].lo >= lo && a->c[i].hi <= hi) i++;
    while (j < b->n && b->c[j].lo >= lo && b->c[j].hi <= hi) j++;
    if (i == a->n || j == b->n) return i == a->n && j == b->n;
    /* cells crossing lo or hi compare by their parts outside */
    cell x = a->c[i], y = b->c[j];
    if (x.lo < lo && x.hi > lo) x = clip(&x, x.lo, lo);
    else if (x.lo < hi && x.hi > hi) x = clip(&x, hi, x.hi);
    if (y.lo < lo && y.hi > lo) y = clip(&y, y.lo, lo);
    else if (y.lo < hi && y.hi > hi) y = clip(&y, hi, y.hi);
    if (x.lo != y.lo || x.hi != y.hi || !same_attrs(&x, &y) || (has_elems(&x) && x.e != y.e)) return false;
    /* a cell spanning the whole of [lo, hi) has a second part after it */
    if (a->c[i].lo < lo && a->c[i].hi > hi) {
      cell x2 = clip(&a->c[i], hi, a->c[i].hi), y2 = b->c[j];
      if (!(y2.lo < lo && y2.hi > hi)) return false;
      y2 = clip(&y2, hi, y2.hi);
      if (x2.hi != y2.hi || !same_attrs(&x2, &y2) || (has_elems(&x2) && x2.e != y2.e)) return false;
    }
    i++, j++;
  }
}

/* the map class k reads buffer b from */
static cmap *rmap(sctx *s, int32_t k, int32_t b) { return s->uni[b] ? &s->sh[b] : smap(s, k, b); }
/* the map class k writes: a shared buffer is split into one map per class
 * first, unless the write is the same on every class (uni_mode) */
static cmap *wmap(sctx *s, int32_t k, int32_t b) {
  if (s->uni[b]) {
    if (s->uni_mode || s->ncls == 1) return &s->sh[b];
    for (int32_t x = 0; x < s->ncls; x++) map_copy(smap(s, x, b), &s->sh[b]);
    s->uni[b] = false;
  }
  return smap(s, k, b);
}
/* every class holds the same again: share it */
static void try_unify(sctx *s, int32_t b) {
  if (s->uni[b]) return;
  for (int32_t k = 1; k < s->ncls; k++)
    if (!map_equal(smap(s, 0, b), smap(s, k, b))) return;
  map_copy(&s->sh[b], smap(s, 0, b));
  for (int32_t k = 0; k < s->ncls; k++) map_free(smap(s, k, b));
  s->uni[b] = true;
}
/* buffer b holds nothing (a step or its live range begins at op why) */
static void reset_buf(sctx *s, int32_t b, int32_t why) {
  if (!s->uni[b])
    for (int32_t k = 0; k < s->ncls; k++) map_free(smap(s, k, b));
  s->uni[b] = true;
  map_set_all(s, &s->sh[b], s->p->bufs[b].bytes, SV_UNDEF, why);
}

/* ---- describing values ---------------------------------------------------------------- */
static const char *pname(const sctx *s, int32_t p) { return p >= 0 && p < s->p->nparams ? s->p->params[p].name : "?"; }

static void digits_text(const sctx *s, uint64_t d, char *out, size_t cap) {
  if (d == 0) {
    snprintf(out, cap, "this rank only");
    return;
  }
  if (d == s->world_dig) {
    snprintf(out, cap, "all ranks");
    return;
  }
  if (d == s->dp_dig) {
    snprintf(out, cap, "the ranks of its dp group");
    return;
  }
  size_t n = 0;
  out[0] = 0;
  for (int32_t c = 0; c < s->p->ncomms && n < cap; c++)
    if (s->cdig[c] && (d & s->cdig[c]) == s->cdig[c]) {
      n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? "+" : "ranks of ", s->p->comms[c].name);
      d &= ~s->cdig[c];
    }
  if (d && n < cap) snprintf(out + n, cap - n, "%sdigits %#" PRIx64, n ? "+" : "", d);
}

static void slots_text(uint64_t sl, char *out, size_t cap) {
  size_t n = 0;
  out[0] = 0;
  for (int b = 0; b < 64 && n + 8 < cap; b++)
    if (sl >> b & 1) n += (size_t)snprintf(out + n, cap - n, "%s%d", n ? "," : "", b);
}

static void describe(const sctx *s, const cell *c, char *out, size_t cap) {
  int64_t z = esize(c), n = z ? (c->hi - c->lo) / z : 0;
  switch ((sv_kind)c->kind) {
    case SV_UNDEF: {
      char mv[64] = "";
      if (c->e >= 0) snprintf(mv, sizeof mv, ", moved by op %" PRId64, c->e);
      if (c->ver >= 0) snprintf(out, cap, "undefined (not written since its live range began at op %d%s)", c->ver, mv);
      else snprintf(out, cap, "undefined (never written%s)", mv);
      return;
    }
    case SV_ZERO: snprintf(out, cap, "zeros"); return;
    case SV_JUNK:
      snprintf(out, cap, "a value no proof covers (made by op %d)", c->ver);
      return;
    case SV_WIRE: snprintf(out, cap, "wire bytes of %s", pname(s, c->p)); return;
    case SV_SCALE:
      snprintf(out, cap, "MXFP8 scales of %s blocks [%" PRId64 ",%" PRId64 ") v%d", pname(s, c->p), c->e, c->e + n,
               c->ver);
      return;
    case SV_WEIGHT:
      snprintf(out, cap, "%s elements [%" PRId64 ",%" PRId64 ") main weight v%d in %s%s%s%s%s", pname(s, c->p), c->e,
               c->e + n, c->ver, fpi_dtype_name((fp_dtype)c->dt), c->rnd != c->dt ? " (rounded to " : "",
               c->rnd != c->dt ? fpi_dtype_name((fp_dtype)c->rnd) : "", c->rnd != c->dt ? ")" : "",
               c->fl & F_INEXACT ? " rounded twice" : c->fl & F_MX ? " MXFP8" : "");
      return;
    case SV_GRAD: {
      char dg[200], sl[200];
      digits_text(s, c->digits, dg, sizeof dg);
      slots_text(c->slots, sl, sizeof sl);
      snprintf(out, cap, "grad of %s elements [%" PRId64 ",%" PRId64 ") from backwards {%s} summed over %s scaled %g in %s%s",
               pname(s, c->p), c->e, c->e + n, sl, dg, c->s, fpi_dtype_name((fp_dtype)c->dt),
               c->fl & F_INEXACT ? " rounded twice" : "");
      return;
    }
  }
  snprintf(out, cap, "?");
}

/* ---- rank classes and digits ---------------------------------------------------------- */
static int i64cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static bool reg_addr(const fp_region *r) { return r->buf >= 0 && (r->stride != 0 || r->tabrel); }

/* build_classes in its steps: the communicators that address ranks
 * (addressing_comms), the ranks' classes (rank_classes: distinct index
 * tuples over them), then the digits (class_digits: the bounds 1, W and
 * each comm's stride and stride * size must nest) */
static void addressing_comms(sctx *s) {
  const fp_prog *p = s->p;
  s->addr = calloc((size_t)p->ncomms + 1, sizeof *s->addr);
  s->addrc = malloc(((size_t)p->ncomms + 1) * sizeof *s->addrc);
  s->cdig = calloc((size_t)p->ncomms + 1, sizeof *s->cdig);
  FP_ASSERT(s->addr && s->addrc && s->cdig);
  for (int32_t i = 0; i < p->nops; i++) {
    const fp_op *op = &p->ops[i];
    if (op->comm >= 0 && (reg_addr(&op->dst) || reg_addr(&op->src) || reg_addr(&op->aux) || op->root >= 0 ||
                          (op->tab >= 0 && !fpi_op_regions(op->code)) || op->code == FP_OP_REDUCE ||
                          op->code == FP_OP_BROADCAST))
      s->addr[op->comm] = true;
    if (op->only >= 0 && op->only_comm >= 0) s->addr[op->only_comm] = true;
  }
  for (int32_t j = 0; j < p->nparams; j++)
    if (p->params[j].comm >= 0 && p->params[j].placement != FP_PL_REPLICATE) s->addr[p->params[j].comm] = true;
  for (int32_t c = 0; c < p->ncomms; c++)
    if (s->addr[c]) s->addrc[s->naddr++] = c;
}

/* ranks r and q have the same index in every addressing comm */
static bool same_tuple(const sctx *s, int64_t r, int64_t q) {
  const fp_prog *p = s->p;
  for (int32_t a = 0; a < s->naddr; a++)
    if (fpi_comm_index(&p->comms[s->addrc[a]], r) != fpi_comm_index(&p->comms[s->addrc[a]], q)) return false;
  return true;
}

/* classes: distinct index tuples over the addressing comms, through a hash
 * of tuples -> class */
static void rank_classes(sctx *s) {
  const fp_prog *p = s->p;
  int64_t W = p->world_size;
  s->cls_of = malloc((size_t)W * sizeof *s->cls_of);
  FP_ASSERT(s->cls_of);
  int64_t cap = 64;
  s->rep = malloc((size_t)cap * sizeof *s->rep);
  int64_t hcap = 1024;
  while (hcap < 4 * W && hcap < ((int64_t)1 << 26)) hcap *= 2;
  int32_t *h = malloc((size_t)hcap * sizeof *h);
  FP_ASSERT(s->rep && h);
  for (int64_t k = 0; k < hcap; k++) h[k] = -1;
  for (int64_t r = 0; r < W; r++) {
    uint64_t key = 1469598103934665603ull;
    for (int32_t a = 0; a < s->naddr; a++) {
      key ^= (uint64_t)fpi_comm_index(&p->comms[s->addrc[a]], r) + 1;
      key *= 1099511628211ull;
    }
    int64_t slot = (int64_t)(key & (uint64_t)(hcap - 1));
    int32_t k;
    while ((k = h[slot]) >= 0 && !same_tuple(s, r, s->rep[k])) slot = (slot + 1) & (hcap - 1);
    if (k < 0) {
      if (s->ncls == cap) {
        cap *= 2;
        s->rep = realloc(s->rep, (size_t)cap * sizeof *s->rep);
        FP_ASSERT(s->rep);
      }
      k = s->ncls++;
      s->rep[k] = r;
      h[slot] = k;
    }
    s->cls_of[r] = k;
  }
  free(h);
}

/* digits: the bounds 1, W and each comm's stride and stride * size, sorted;
 * false when they do not nest */
static bool class_digits(sctx *s) {
  const fp_prog *p = s->p;
  int64_t W = p->world_size;
  s->bound[s->nbound++] = 1;
  s->bound[s->nbound++] = W;
  if (p->tp > 1 && W % p->tp == 0) s->bound[s->nbound++] = p->tp; /* tp innermost: a dp group is every tp-th rank */
  for (int32_t c = 0; c < p->ncomms && s->nbound < 64; c++) {
    s->bound[s->nbound++] = p->comms[c].stride;
    if (s->nbound < 64) s->bound[s->nbound++] = p->comms[c].stride * p->comms[c].size;
  }
  qsort(s->bound, (size_t)s->nbound, sizeof *s->bound, i64cmp);
  int32_t u = 0;
  for (int32_t k = 0; k < s->nbound; k++)
    if (u == 0 || s->bound[k] != s->bound[u - 1]) s->bound[u++] = s->bound[k];
  s->nbound = u;
  bool nest = s->bound[s->nbound - 1] == W;
  for (int32_t k = 1; k < s->nbound && nest; k++) nest = s->bound[k] % s->bound[k - 1] == 0;
  if (!nest) return false;
  for (int32_t k = 0; k + 1 < s->nbound; k++) {
    s->world_dig |= (uint64_t)1 << k;
    if (s->bound[k] >= p->tp) s->dp_dig |= (uint64_t)1 << k;
  }
  for (int32_t c = 0; c < p->ncomms; c++) {
    int64_t lo = p->comms[c].stride, hi = lo * p->comms[c].size;
    for (int32_t k = 0; k + 1 < s->nbound; k++)
      if (s->bound[k] >= lo && s->bound[k + 1] <= hi) s->cdig[c] |= (uint64_t)1 << k;
  }
  return true;
}

static bool build_classes(sctx *s) {
  addressing_comms(s);
  rank_classes(s);
  return class_digits(s);
}

/* ---- ops: operand resolution ---------------------------------------------------------- */
static int64_t gidx(const sctx *s, int32_t comm, int64_t r) {
  return comm >= 0 ? fpi_comm_index(&s->p->comms[comm], r) : 0;
}
static int64_t member_rank(const sctx *s, int32_t comm, int64_t r, int64_t j) {
  const fp_ir_comm *c = &s->p->comms[comm];
  return r + (j - fpi_comm_index(c, r)) * c->stride;
}

static fp_dtype od(const fp_op *op, int w) {
  switch (op->code) {
    case FP_OP_QUANTIZE_MXFP8: return w == 0 ? FP_E4M3 : w == 2 ? FP_E8M0 : op->sdtype;
    case FP_OP_DEQUANTIZE_MXFP8: return w == 1 ? FP_E4M3 : w == 2 ? FP_E8M0 : op->dtype;
    case FP_OP_H2D:
    case FP_OP_D2H: return FP_U8;
    default: return w == 1 ? op->sdtype : op->dtype;
  }
}
static const fp_region *opnd(const fp_op *op, int w) { return w == 0 ? &op->dst : w == 1 ? &op->src : &op->aux; }
static int64_t roff(const sctx *s, const fp_op *op, int w, int64_t g) {
  return fpi_region_offset(s->p, op, opnd(op, w), od(op, w), g);
}

/* the bytes an op reads, checked for undefined and for their dtype; false
 * when the op must not go on (it reported) */
static const char *bname(const sctx *s, int32_t b) { return s->p->bufs[b].name; }

static bool check_read(sctx *s, int32_t i, int32_t k, int32_t b, int64_t at, cell *cs, int32_t n, fp_dtype want) {
  for (int32_t j = 0; j < n; j++) {
    cell *c = &cs[j];
    char d[400];
    if (c->kind == SV_UNDEF) { /* moved on: an error where a check or a sum meets it */
      if (c->e < 0) c->e = i;
      continue;
    }
    if (c->kind == SV_JUNK) return false; /* reported where it was made */
    if (((c->kind == SV_WEIGHT || c->kind == SV_GRAD) && want != FP_U8 && c->dt != want) ||
        (c->kind == SV_SCALE && want != FP_U8 && want != FP_E8M0)) {
      describe(s, c, d, sizeof d);
      serr(s, FP_VL_OP, i, "%s reads %s [%" PRId64 ",%" PRId64 ") on rank %" PRId64 " as %s: holds %s",
           fpi_op_name(s->p->ops[i].code), bname(s, b), at + c->lo, at + c->hi, s->rep[k], fpi_dtype_name(want), d);
      return false;
    }
  }
  return true;
}

static cell junk(int64_t lo, int64_t hi, int32_t i) {
  cell c = {.lo = lo, .hi = hi, .kind = SV_JUNK, .ver = i, .p = -1};
  return c;
}

/* does every value of dtype a fit dtype b exactly */
static bool fits(fp_dtype a, fp_dtype b) {
  if (a == b) return true;
  if (b == FP_F32) return a == FP_BF16 || a == FP_F16 || a == FP_E4M3;
  if (b == FP_BF16 || b == FP_F16) return a == FP_E4M3;
  return false;
}

/* convert cells (sizes of `from`) to dtype `to`: positions scale */
static void convert(sctx *s, int32_t i, const cell *in, int32_t n, fp_dtype from, fp_dtype to, cell **out,
                    int32_t *no, int32_t *cap) {
  int64_t fz = fpi_dtype_size(from), tz = fpi_dtype_size(to);
  *no = 0;
  for (int32_t j = 0; j < n; j++) {
    cell c = in[j];
    if (c.lo % fz || c.hi % fz) {
      c = junk(c.lo, c.hi, i);
    } else {
      c.lo = c.lo / fz * tz;
      c.hi = c.hi / fz * tz;
    }
    if (c.kind == SV_GRAD) {
      c.dt = (uint8_t)to; /* a sum rounds at every add: only its dtype is tracked */
    } else if (c.kind == SV_WEIGHT && c.dt != to) {
      fp_dtype r = (fp_dtype)c.rnd;
      if (!fits(r, to)) {
        /* the first rounding of a weight is from its main dtype */
        if (r != s->p->params[c.p].main_dtype || (c.fl & F_MX)) c.fl |= F_INEXACT;
        c.rnd = (uint8_t)to;
      }
      c.dt = (uint8_t)to;
    } else if (c.kind == SV_SCALE && to != FP_E8M0 && to != FP_U8) {
      c = junk(c.lo, c.hi, i);
    }
    push(out, no, cap, &c);
  }
}

/* ---- collectives ---------------------------------------------------------------------- */
/* combine n lists (each covering [0, len)) of the members of a reduction:
 * equal grads sum, zeros stay zeros, anything else is junk */
typedef struct mlist {
  int32_t cls, first, n; /* member class; its cells in s->tmp2 [first, first + n) */
  int64_t at;            /* the byte offset they were read at (members of one class at one offset count once) */
} mlist;

static void reduce_lists(sctx *s, int32_t i, int32_t k, int32_t b, int64_t at, mlist *ml, int32_t nl, const fp_op *op,
                         cell **out, int32_t *no, int32_t *cap) {
  const fp_ir_comm *cm = &s->p->comms[op->comm];
  uint64_t cd = s->cdig[op->comm];
  int32_t *cur = calloc((size_t)nl, sizeof *cur);
  FP_ASSERT(cur);
  int64_t x = 0, len = ml[0].n ? s->tmp2[ml[0].first + ml[0].n - 1].hi : 0;
  bool reported = false;
  while (x < len) {
    int64_t y = len;
    for (int32_t l = 0; l < nl; l++) {
      const cell *c = &s->tmp2[ml[l].first + cur[l]];
      if (c->hi < y) y = c->hi;
    }
    cell a = clip(&s->tmp2[ml[0].first + cur[0]], x, y), r = a;
    char why[1000] = "";
    for (int32_t l = 1; l < nl && !why[0]; l++) {
      cell c = clip(&s->tmp2[ml[l].first + cur[l]], x, y);
      if (a.kind == SV_UNDEF && c.kind == SV_UNDEF) continue;
      if (!same_attrs(&a, &c) || (has_elems(&a) && a.e != c.e)) {
        char d1[400], d2[400];
        describe(s, &a, d1, sizeof d1);
        describe(s, &c, d2, sizeof d2);
        snprintf(why, sizeof why, "rank %" PRId64 " holds %.150s, rank %" PRId64 " holds %.150s", s->rep[ml[0].cls], d1,
                 s->rep[ml[l].cls], d2);
      }
    }
    if (!why[0]) {
      if (a.kind == SV_GRAD) {
        if (!cd && cm->size > 1) snprintf(why, sizeof why, "communicator %s is not a digit range of the world", cm->name);
        else if (a.digits & cd) snprintf(why, sizeof why, "it counts ranks of %s twice", cm->name);
        else {
          r.digits |= cd;
          if (op->red == FP_RED_AVG) r.s /= (double)cm->size;
        }
      } else if (a.kind == SV_WEIGHT || a.kind == SV_SCALE) {
        snprintf(why, sizeof why, "it sums weights");
      }
    }
    if (why[0] && a.kind != SV_JUNK && !reported) {
      char d[400];
      describe(s, &a, d, sizeof d);
      serr(s, FP_VL_OP, i, "%s over %s of %s [%" PRId64 ",%" PRId64 ") on rank %" PRId64 " (step %d) is wrong: %.600s",
           fpi_op_name(op->code), cm->name, bname(s, b), at + x, at + y, s->rep[k], s->step + 1, why);
      reported = true;
    }
    if (why[0]) r = junk(x, y, i);
    r.lo = x;
    r.hi = y;
    push(out, no, cap, &r);
    x = y;
    for (int32_t l = 0; l < nl; l++)
      while (cur[l] < ml[l].n && s->tmp2[ml[l].first + cur[l]].hi <= x) cur[l]++;
  }
  free(cur);
}

static bool runs_on(const sctx *s, const fp_op *op, int64_t r) {
  return op->only < 0 || op->only_comm < 0 || gidx(s, op->only_comm, r) == op->only;
}

/* append member class mk's bytes [lo, hi) of buffer b to tmp2; returns its list */
static mlist member_read(sctx *s, int32_t mk, int32_t b, int64_t lo, int64_t hi) {
  mlist m = {mk, s->ntmp2, 0, lo};
  cell *t = NULL;
  int32_t n = 0, cap = 0;
  map_read(s, rmap(s, mk, b), lo, hi, &t, &n, &cap);
  for (int32_t j = 0; j < n; j++) {
    if (s->ntmp2 == s->captmp2) {
      s->captmp2 = s->captmp2 ? 2 * s->captmp2 : 64;
      s->tmp2 = realloc(s->tmp2, (size_t)s->captmp2 * sizeof *s->tmp2);
      FP_ASSERT(s->tmp2);
    }
    s->tmp2[s->ntmp2++] = t[j];
  }
  m.n = n;
  free(t);
  return m;
}

static void out_push(sctx *s, const cell *c) { push(&s->out, &s->nout, &s->capout, c); }

/* One collective on every class (run_collective), in its steps: what the
 * op is (coll_open), each class's output (class_output, reading its
 * members: read_members), whether the outputs agree across instances
 * (outputs_agree), then every class's dst written (write_outputs). */
typedef struct coll {
  int32_t i;
  const fp_op *op;
  const fp_ir_comm *cm;
  const fp_ir_table *tb; /* the op's table, or NULL */
  int64_t G, z;
  fp_dtype dt;
  int32_t *from, *to;    /* each class's output: s->out[from[k] .. to[k]) */
  int64_t *dat;          /* each class's dst offset (-1: it does not run the op) */
  int64_t hcap, *hkey;   /* the outputs computed per communicator instance */
  int32_t *hval;
  bool scatter, gaps, reduce, collapse, p2p;
  int64_t gend;          /* gaps: the pieces' end (elements) */
  bool same_all;         /* every class that runs it gets the same output */
  int32_t first_out;
} coll;

static void coll_open(sctx *s, int32_t i, coll *c) {
  const fp_prog *p = s->p;
  const fp_op *op = &p->ops[i];
  *c = (coll){.i = i, .op = op, .cm = &p->comms[op->comm], .tb = op->tab >= 0 ? &p->tabs[op->tab] : NULL,
              .dt = op->dtype, .same_all = true, .first_out = -1};
  c->G = c->cm->size;
  c->z = fpi_dtype_size(c->dt);
  c->from = malloc(((size_t)s->ncls + 1) * sizeof *c->from);
  c->to = malloc(((size_t)s->ncls + 1) * sizeof *c->to);
  c->dat = malloc(((size_t)s->ncls + 1) * sizeof *c->dat);
  c->hcap = 16;
  while (c->hcap < 2 * (int64_t)s->ncls) c->hcap *= 2;
  c->hkey = malloc((size_t)c->hcap * sizeof *c->hkey);
  c->hval = malloc((size_t)c->hcap * sizeof *c->hval);
  FP_ASSERT(c->from && c->to && c->dat && c->hkey && c->hval);
  for (int64_t h = 0; h < c->hcap; h++) c->hkey[h] = -1;
  c->scatter = op->code == FP_OP_REDUCE_SCATTER || op->code == FP_OP_REDUCE_SCATTER_V;
  /* an all_gather_v whose pieces leave gaps (rules 1-8: in rank order, none
   * over another): the gaps keep what this class's dst held, so its output
   * is its own, not its instance's */
  if (op->code == FP_OP_ALL_GATHER_V) {
    const fp_ir_table *t = c->tb;
    for (int64_t j = 0, at = 0; j < t->n; at = t->off[j] + t->cnt[j], j++) {
      c->gaps |= t->off[j] != at;
      if (t->off[j] + t->cnt[j] > c->gend) c->gend = t->off[j] + t->cnt[j];
    }
  }
  c->reduce = fpi_op_reduces(op->code);
  c->collapse = op->src.buf >= 0 && s->uni[op->src.buf] && op->src.stride == 0 && !op->src.tabrel;
  c->p2p = op->code == FP_OP_SEND || op->code == FP_OP_RECV;
  s->nout = 0;
}

static void coll_close(coll *c) {
  free(c->from);
  free(c->to);
  free(c->dat);
  free(c->hkey);
  free(c->hval);
}

/* member j's source bytes for a class of index g (n elements per rank) */
static void member_extent(const sctx *s, const coll *c, int64_t j, int64_t g, int64_t n, int64_t *lo, int64_t *cnt) {
  int64_t so = roff(s, c->op, 1, j), z = c->z;
  switch (c->op->code) {
    case FP_OP_ALL_GATHER: *lo = so, *cnt = n; break;
    case FP_OP_ALL_GATHER_V: *lo = so, *cnt = c->tb->cnt[j]; break;
    case FP_OP_REDUCE_SCATTER: *lo = so + g * n * z, *cnt = n; break;
    case FP_OP_REDUCE_SCATTER_V: *lo = so + c->tb->off[g] * z, *cnt = c->tb->cnt[g]; break;
    default: *lo = so, *cnt = n; break; /* all_reduce, reduce, broadcast */
  }
}

/* a class's members read (its rank r, index g): a reduction's lists into ml, a
 * gather's pieces pushed out (or, with gaps, written into gm). The number
 * of lists; -1 when a read failed (reported) */
static int32_t read_members(sctx *s, const coll *c, int64_t r, int64_t g, int64_t n, mlist *ml, cmap *gm) {
  const fp_op *op = c->op;
  int64_t z = c->z;
  int32_t nl = 0;
  int64_t jlo = 0, jhi = c->G;
  if (op->code == FP_OP_BROADCAST) jlo = op->root, jhi = op->root + 1;
  for (int64_t j = jlo; j < jhi; j++) {
    int64_t rj = member_rank(s, op->comm, r, j);
    int32_t mk = c->collapse ? 0 : s->cls_of[rj];
    int64_t lo, cnt;
    member_extent(s, c, j, g, n, &lo, &cnt);
    /* a member of a class already read at the same bytes adds nothing new */
    bool dup = false;
    if (c->reduce)
      for (int32_t l = nl - 1; l >= 0 && !dup; l--)
        if (ml[l].cls == mk && ml[l].at == lo) dup = true;
    if (dup) continue;
    mlist m = member_read(s, mk, op->src.buf, lo, lo + cnt * z);
    if (!check_read(s, c->i, mk, op->src.buf, lo, m.n ? s->tmp2 + m.first : NULL, m.n, c->dt)) return -1;
    if (c->reduce) {
      ml[nl++] = m;
      if (c->collapse) break; /* the same bytes on every member */
      continue;
    }
    int64_t base = op->code == FP_OP_ALL_GATHER     ? j * n * z
                   : op->code == FP_OP_ALL_GATHER_V ? c->tb->off[j] * z
                                                    : 0;
    if (c->gaps) {
      map_write(gm, base, s->tmp2 + m.first, m.n);
      continue;
    }
    for (int32_t q = 0; q < m.n; q++) {
      cell x = s->tmp2[m.first + q];
      x.lo += base;
      x.hi += base;
      out_push(s, &x);
    }
  }
  return nl;
}

/* class k's output pushed: its members' reads (read_members), then junk
 * for a failed read, or the reduction of the lists */
static void class_reads(sctx *s, const coll *c, int32_t k, int64_t r, int64_t g) {
  const fp_op *op = c->op;
  int64_t n = fpi_op_count(s->p, op, g);
  s->ntmp2 = 0;
  mlist *ml = malloc((size_t)c->G * sizeof *ml);
  FP_ASSERT(ml);
  cmap gm = {0}; /* gaps: the output over this class's dst, each piece written in */
  if (c->gaps) map_read(s, rmap(s, k, op->dst.buf), c->dat[k], c->dat[k] + c->gend * c->z, &gm.c, &gm.n, &gm.cap);
  int32_t nl = read_members(s, c, r, g, n, ml, &gm);
  if (c->gaps && nl >= 0)
    for (int32_t q = 0; q < gm.n; q++) out_push(s, &gm.c[q]);
  map_free(&gm);
  if (nl < 0) {
    s->nout = c->from[k];
    cell x = junk(0, (op->code == FP_OP_ALL_GATHER ? c->G * n : n) * c->z, c->i);
    if (x.hi > 0) out_push(s, &x);
  } else if (c->reduce && nl > 0) {
    cell *t = NULL;
    int32_t no = 0, cap = 0;
    reduce_lists(s, c->i, k, op->dst.buf, c->dat[k], ml, nl, op, &t, &no, &cap);
    for (int32_t q = 0; q < no; q++) out_push(s, &t[q]);
    free(t);
  }
  free(ml);
}

/* A class's output depends on its members' classes and, for the scatters,
 * its own index: the non-scatters are computed once per communicator
 * instance; a source the same on every class at an offset no member index
 * moves is read once. */
static void class_output(sctx *s, coll *c, int32_t k) {
  const fp_op *op = c->op;
  c->from[k] = c->to[k] = s->nout;
  int64_t r = s->rep[k], g = fpi_comm_index(c->cm, r);
  c->dat[k] = -1;
  if (c->p2p || !runs_on(s, op, r) || (op->code == FP_OP_REDUCE && g != op->root)) {
    c->same_all = false;
    return;
  }
  c->dat[k] = roff(s, op, 0, g);
  /* computed for this instance already? */
  int64_t inst = r - g * c->cm->stride, h = (int64_t)(((uint64_t)inst * 0x9E3779B97F4A7C15ull) >> 7) & (c->hcap - 1);
  bool per_instance = !c->scatter && !c->gaps;
  if (per_instance) {
    while (c->hkey[h] >= 0 && c->hkey[h] != inst) h = (h + 1) & (c->hcap - 1);
    if (c->hkey[h] == inst) {
      c->from[k] = c->from[c->hval[h]], c->to[k] = c->to[c->hval[h]];
      return;
    }
  }
  if (c->collapse && c->reduce && !c->scatter && c->first_out >= 0) { /* every class sums the same */
    c->from[k] = c->from[c->first_out], c->to[k] = c->to[c->first_out];
    return;
  }
  class_reads(s, c, k, r, g);
  c->to[k] = s->nout;
  if (per_instance) c->hkey[h] = inst, c->hval[h] = k;
  if (c->first_out < 0) c->first_out = k;
  else if (!per_instance || (c->from[k] != c->from[c->first_out] && !c->collapse)) c->same_all = false;
}

/* the outputs of different instances may still agree */
static bool outputs_agree(const sctx *s, const coll *c) {
  int32_t f = c->first_out;
  for (int32_t k = 0; k < s->ncls; k++) {
    if (c->dat[k] < 0 || c->dat[k] != c->dat[f]) return false;
    if (c->from[k] == c->from[f]) continue;
    cmap x = {s->out + c->from[k], c->to[k] - c->from[k], 0}, y = {s->out + c->from[f], c->to[f] - c->from[f], 0};
    if (!map_equal(&x, &y)) return false;
  }
  return true;
}

/* every class's dst written with its output (once, shared, where they all agree) */
static void write_outputs(sctx *s, coll *c) {
  int32_t db = c->op->dst.buf, f = c->first_out;
  bool same_all = c->same_all;
  if (db < 0) f = -1, same_all = false; /* a send: nothing written */
  if (same_all && f >= 0 && !s->uni[db] && c->to[f] > c->from[f]) {
    /* every class gets the same bytes: shared again when they agree elsewhere */
    int64_t lo = c->dat[f], hi = lo + s->out[c->to[f] - 1].hi;
    bool agree = true;
    for (int32_t k = 1; k < s->ncls && agree; k++) agree = map_equal_outside(smap(s, 0, db), smap(s, k, db), lo, hi);
    if (agree) {
      map_copy(&s->sh[db], smap(s, 0, db));
      for (int32_t k = 0; k < s->ncls; k++) map_free(smap(s, k, db));
      s->uni[db] = true;
    }
  }
  if (same_all && f >= 0 && s->uni[db] && c->to[f] > c->from[f]) {
    map_write(&s->sh[db], c->dat[f], s->out + c->from[f], c->to[f] - c->from[f]);
    return;
  }
  for (int32_t k = 0; k < s->ncls && db >= 0; k++)
    if (c->to[k] > c->from[k] && c->dat[k] >= 0)
      map_write(wmap(s, k, db), c->dat[k], s->out + c->from[k], c->to[k] - c->from[k]);
  if (same_all && db >= 0) try_unify(s, db);
}

/* one collective on every class: outputs first (members read the state
 * before the op), then written */
static void run_collective(sctx *s, int32_t i) {
  coll c;
  coll_open(s, i, &c);
  if (c.p2p)
    serr(s, FP_VL_OP, i, "%s: point-to-point transfers are not modeled by the semantic check", fpi_op_name(c.op->code));
  for (int32_t k = 0; k < s->ncls; k++) class_output(s, &c, k);
  if (!c.same_all && c.first_out >= 0 && !c.scatter && !c.gaps) c.same_all = outputs_agree(s, &c);
  write_outputs(s, &c);
  coll_close(&c);
}

/* ---- local ops ------------------------------------------------------------------------ */
static void set_junk(sctx *s, int32_t k, int32_t b, int64_t at, int64_t len, int32_t i) {
  if (len <= 0) return;
  cell c = junk(0, len, i);
  map_write(wmap(s, k, b), at, &c, 1);
}

/* one local op on one rank class: its operands resolved, the scratch lists */
typedef struct lop {
  sctx *s;
  const fp_op *op;
  int32_t i, k; /* the op, the class */
  int64_t r, g, n; /* the class's representative rank, its index in the op's communicator, the count */
  fp_dtype dt, sdt;
  int64_t z, sz;   /* the dtypes' sizes */
  int32_t db, sb;  /* destination and source buffers */
  int64_t d0, s0;  /* their byte offsets */
  cell *t, *u;
  int32_t nt, ct, nu, cu;
  char d[400];
} lop;

/* cast, copy (rows with pitches), h2d, d2h */
static void local_copy(lop *L) {
  sctx *s = L->s;
  const fp_op *op = L->op;
  fp_op_shape sh = fpi_op_shape_of(s->p, op);
  int64_t rows = op->code == FP_OP_COPY ? sh.rows : 1;
  int64_t nb = op->code == FP_OP_H2D || op->code == FP_OP_D2H ? L->n : L->n * L->sz;
  for (int64_t row = 0; row < rows; row++) {
    int64_t so = L->s0 + row * sh.spitch, dof = L->d0 + row * sh.dpitch;
    map_read(s, rmap(s, L->k, L->sb), so, so + nb, &L->t, &L->nt, &L->ct);
    if (!check_read(s, L->i, L->k, L->sb, so, L->t, L->nt, od(op, 1))) {
      set_junk(s, L->k, L->db, dof, L->n * L->z, L->i);
      continue;
    }
    if (op->code == FP_OP_CAST) {
      convert(s, L->i, L->t, L->nt, L->sdt, L->dt, &L->u, &L->nu, &L->cu);
      map_write(wmap(s, L->k, L->db), dof, L->u, L->nu);
    } else {
      map_write(wmap(s, L->k, L->db), dof, L->t, L->nt);
    }
  }
}

/* scale: only grads (zeros, junk and undefined bytes pass) */
static void local_scale(lop *L) {
  sctx *s = L->s;
  int64_t d0 = L->d0;
  map_read(s, rmap(s, L->k, L->db), d0, d0 + L->n * L->z, &L->t, &L->nt, &L->ct);
  if (!check_read(s, L->i, L->k, L->db, d0, L->t, L->nt, L->dt)) {
    set_junk(s, L->k, L->db, d0, L->n * L->z, L->i);
    return;
  }
  for (int32_t j = 0; j < L->nt; j++) {
    cell *c = &L->t[j];
    if (c->kind == SV_GRAD) c->s *= L->op->alpha;
    else if (c->kind != SV_ZERO && c->kind != SV_JUNK && c->kind != SV_UNDEF) {
      describe(s, c, L->d, sizeof L->d);
      serr(s, FP_VL_OP, L->i, "scale of %s [%" PRId64 ",%" PRId64 ") on rank %" PRId64 ": holds %s, not a grad",
           bname(s, L->db), d0 + c->lo, d0 + c->hi, L->r, L->d);
      *c = junk(c->lo, c->hi, L->i);
    }
  }
  map_write(wmap(s, L->k, L->db), d0, L->t, L->nt);
}

/* what dst += src holds where dc and sc meet, in *res; NULL, or why the
 * two cannot be added */
static const char *add_cells(cell dc, cell sc, fp_dtype dt, int32_t i, int64_t x, int64_t y, cell *res) {
  if (dc.kind == SV_JUNK || sc.kind == SV_JUNK) *res = junk(x, y, i);
  else if ((dc.kind == SV_UNDEF || dc.kind == SV_ZERO) && (sc.kind == SV_UNDEF || sc.kind == SV_ZERO))
    *res = dc.kind == SV_UNDEF ? dc : sc; /* nothing defined meets */
  else if (dc.kind == SV_UNDEF || sc.kind == SV_UNDEF) return "one of them is undefined";
  else if (sc.kind == SV_ZERO) *res = dc;
  else if (dc.kind == SV_ZERO) *res = sc, res->dt = (uint8_t)dt;
  else if (dc.kind != SV_GRAD || sc.kind != SV_GRAD) return "only grads add";
  else if (dc.p != sc.p || dc.e != sc.e) return "they are grads of other elements";
  else if (dc.digits != sc.digits) return "they are summed over other ranks";
  else if (dc.s != sc.s) return "they are scaled differently";
  else if (dc.slots & sc.slots) return "it counts a backward twice";
  else {
    *res = dc;
    res->slots |= sc.slots;
    if (sc.fl & F_INEXACT) res->fl |= F_INEXACT;
  }
  return NULL;
}

/* add: the source converted to the destination's dtype, both lists walked */
static void local_add(lop *L) {
  sctx *s = L->s;
  int32_t i = L->i, k = L->k, db = L->db, sb = L->sb;
  int64_t d0 = L->d0, s0 = L->s0;
  map_read(s, rmap(s, k, sb), s0, s0 + L->n * L->sz, &L->u, &L->nu, &L->cu);
  if (!check_read(s, i, k, sb, s0, L->u, L->nu, L->sdt)) {
    set_junk(s, k, db, d0, L->n * L->z, i);
    return;
  }
  cell *cv = NULL, *o = NULL;
  int32_t ncv = 0, ccv = 0, no = 0, co = 0, a = 0, bq = 0;
  convert(s, i, L->u, L->nu, L->sdt, L->dt, &cv, &ncv, &ccv);
  map_read(s, rmap(s, k, db), d0, d0 + L->n * L->z, &L->t, &L->nt, &L->ct);
  if (!check_read(s, i, k, db, d0, L->t, L->nt, L->dt)) {
    set_junk(s, k, db, d0, L->n * L->z, i);
    free(cv);
    return;
  }
  const cell *t = L->t;
  int64_t x = 0, len = L->n * L->z;
  bool rep = false;
  while (x < len && a < L->nt && bq < ncv) {
    int64_t y = t[a].hi < cv[bq].hi ? t[a].hi : cv[bq].hi;
    cell dc = clip(&t[a], x, y), sc = clip(&cv[bq], x, y), res;
    const char *why = add_cells(dc, sc, L->dt, i, x, y, &res);
    if (why) {
      char d1[400];
      describe(s, &dc, L->d, sizeof L->d);
      describe(s, &sc, d1, sizeof d1);
      if (!rep)
        serr(s, FP_VL_OP, i, "add into %s [%" PRId64 ",%" PRId64 ") on rank %" PRId64 " (step %d): %s holds %.300s, %s adds %.300s: %s",
             bname(s, db), d0 + x, d0 + y, L->r, s->step + 1, bname(s, db), L->d, bname(s, sb), d1, why);
      rep = true;
      res = junk(x, y, i);
    }
    res.lo = x;
    res.hi = y;
    push(&o, &no, &co, &res);
    x = y;
    while (a < L->nt && t[a].hi <= x) a++;
    while (bq < ncv && cv[bq].hi <= x) bq++;
  }
  map_write(wmap(s, k, db), d0, o, no);
  free(o);
  free(cv);
}

/* quantize_mxfp8: one scale per 32 elements of the op, each named by its
 * first element's param block. A scale is the max over all 32 (or the op's
 * last, short block): undefined where any of them is (padding the block
 * shares with a param's elements counts: garbage there scales them), junk
 * where any is something not a weight or zero */
static void mx_scales(lop *L, int64_t a0, int64_t iz) {
  cell *sc = NULL;
  int32_t nsc = 0, csc = 0;
  int64_t nblk = fpi_mx_blocks(L->n);
  int32_t j = 0;
  for (int64_t bk = 0; bk < nblk; bk++) {
    int64_t b0 = bk * FP_MX_BLOCK * iz, b1 = b0 + FP_MX_BLOCK * iz;
    if (b1 > L->n * iz) b1 = L->n * iz;
    while (j < L->nu && L->u[j].hi <= b0) j++;
    cell x = {.lo = bk, .hi = bk + 1, .kind = SV_ZERO, .p = -1};
    bool named = false;
    for (int32_t q = j; q < L->nu && L->u[q].lo < b1; q++) {
      const cell *c = &L->u[q];
      if (c->kind == SV_UNDEF) {
        x = *c, x.lo = bk, x.hi = bk + 1;
        break;
      }
      if (c->kind != SV_WEIGHT && c->kind != SV_ZERO) {
        x = junk(bk, bk + 1, L->i);
        break;
      }
      if (c->kind == SV_WEIGHT && !named && c->lo <= b0) { /* the block's first element */
        x.kind = SV_SCALE, x.p = c->p, x.ver = c->ver, x.e = (c->e + (b0 - c->lo) / iz) / FP_MX_BLOCK;
        named = true;
      }
    }
    push(&sc, &nsc, &csc, &x);
  }
  map_write(wmap(L->s, L->k, L->op->aux.buf), a0, sc, nsc);
  free(sc);
}

/* quantize_mxfp8 / dequantize_mxfp8: e4m3 keeps the value's rounding
 * record; the block scales name the blocks */
static void local_mxfp8(lop *L) {
  sctx *s = L->s;
  const fp_op *op = L->op;
  int32_t i = L->i, k = L->k;
  bool q = op->code == FP_OP_QUANTIZE_MXFP8;
  fp_dtype in = q ? L->sdt : FP_E4M3, outd = q ? FP_E4M3 : L->dt;
  int64_t a0 = op->aux.buf >= 0 ? roff(s, op, 2, L->g) : 0, iz = fpi_dtype_size(in), oz = fpi_dtype_size(outd);
  map_read(s, rmap(s, k, L->sb), L->s0, L->s0 + L->n * iz, &L->u, &L->nu, &L->cu);
  if (!check_read(s, i, k, L->sb, L->s0, L->u, L->nu, in)) {
    set_junk(s, k, L->db, L->d0, L->n * oz, i);
    if (q) set_junk(s, k, op->aux.buf, a0, fpi_mx_blocks(L->n), i);
    return;
  }
  cell *cv = NULL;
  int32_t ncv = 0, ccv = 0;
  for (int32_t j = 0; j < L->nu; j++) {
    cell c = L->u[j];
    if (c.kind == SV_WEIGHT) {
      if (q) {
        const fp_ir_param *pq = &s->p->params[c.p];
        int64_t fpos = pq->placement == FP_PL_FLAT ? pq->weight.off / fpi_dtype_size(pq->param_dtype) + c.e : c.e;
        int64_t opos = c.lo / iz; /* its element in the op */
        if ((fpos - opos) % FP_MX_BLOCK) c.fl |= F_INEXACT; /* blocks not those of the flat space */
        c.fl |= F_MX;
      } else if (!(c.fl & F_MX)) {
        c = junk(c.lo, c.hi, i);
      }
      c.dt = (uint8_t)outd;
    } else if (c.kind != SV_ZERO && c.kind != SV_UNDEF) {
      if (c.kind != SV_JUNK) {
        describe(s, &c, L->d, sizeof L->d);
        serr(s, FP_VL_OP, i, "%s of %s on rank %" PRId64 ": holds %s, not a weight", fpi_op_name(op->code),
             bname(s, L->sb), L->r, L->d);
      }
      c = junk(c.lo, c.hi, i);
    }
    c.lo = c.lo / iz * oz;
    c.hi = c.hi / iz * oz;
    push(&cv, &ncv, &ccv, &c);
  }
  map_write(wmap(s, k, L->db), L->d0, cv, ncv);
  free(cv);
  if (q && op->aux.buf >= 0) {
    mx_scales(L, a0, iz);
  } else if (!q && op->aux.buf >= 0) {
    map_read(s, rmap(s, k, op->aux.buf), a0, a0 + fpi_mx_blocks(L->n), &L->t, &L->nt, &L->ct);
    for (int32_t j = 0; j < L->nt; j++)
      if (L->t[j].kind != SV_SCALE && L->t[j].kind != SV_JUNK && L->t[j].kind != SV_ZERO) { /* zeros: padding blocks */
        describe(s, &L->t[j], L->d, sizeof L->d);
        serr(s, FP_VL_OP, i, "dequantize_mxfp8 reads scales %s [%" PRId64 ",%" PRId64 ") on rank %" PRId64 ": holds %s",
             bname(s, op->aux.buf), a0 + L->t[j].lo, a0 + L->t[j].hi, L->r, L->d);
        set_junk(s, k, L->db, L->d0, L->n * oz, i);
        break;
      }
  }
}

/* split_copy / chunk_cat: region j of the table, rows r: table side
 * [(off[j] + r*cnt[j]) elements], rows side [r*pitch bytes + p_j elements] */
static void local_regions(lop *L) {
  sctx *s = L->s;
  const fp_op *op = L->op;
  const fp_ir_table *tb = &s->p->tabs[op->tab];
  fp_op_shape sh = fpi_op_shape_of(s->p, op);
  bool split = op->code == FP_OP_SPLIT_COPY;
  int64_t pj = 0;
  for (int64_t j = 0; j < tb->n; j++) {
    for (int64_t row = 0; row < sh.rows; row++) {
      int64_t tside = (tb->off[j] + row * tb->cnt[j]), rside_b = row * (split ? sh.spitch : sh.dpitch);
      int64_t so = split ? L->s0 + rside_b + pj * L->sz : L->s0 + tside * L->sz;
      int64_t dof = split ? L->d0 + tside * L->z : L->d0 + rside_b + pj * L->z;
      map_read(s, rmap(s, L->k, L->sb), so, so + tb->cnt[j] * L->sz, &L->t, &L->nt, &L->ct);
      if (!check_read(s, L->i, L->k, L->sb, so, L->t, L->nt, L->sdt)) {
        set_junk(s, L->k, L->db, dof, tb->cnt[j] * L->z, L->i);
        continue;
      }
      convert(s, L->i, L->t, L->nt, L->sdt, L->dt, &L->u, &L->nu, &L->cu);
      map_write(wmap(s, L->k, L->db), dof, L->u, L->nu);
    }
    pj += tb->cnt[j];
  }
}

static void run_local(sctx *s, int32_t i, int32_t k) {
  const fp_prog *p = s->p;
  const fp_op *op = &p->ops[i];
  int64_t r = s->rep[k];
  if (!runs_on(s, op, r)) return;
  int64_t g = gidx(s, op->comm, r);
  lop L = {.s = s, .op = op, .i = i, .k = k, .r = r, .g = g, .n = fpi_op_count(p, op, g), .dt = op->dtype,
           .sdt = op->sdtype, .z = fpi_dtype_size(op->dtype), .sz = fpi_dtype_size(op->sdtype), .db = op->dst.buf,
           .sb = op->src.buf, .d0 = op->dst.buf >= 0 ? roff(s, op, 0, g) : 0,
           .s0 = op->src.buf >= 0 ? roff(s, op, 1, g) : 0};
  switch (op->code) {
    case FP_OP_MEMSET: {
      cell c = {.lo = 0, .hi = L.n * L.z, .kind = SV_ZERO, .p = -1};
      if (c.hi > 0) map_write(wmap(s, k, L.db), L.d0, &c, 1);
      break;
    }
    case FP_OP_CAST:
    case FP_OP_COPY:
    case FP_OP_H2D:
    case FP_OP_D2H: local_copy(&L); break;
    case FP_OP_SCALE: local_scale(&L); break;
    case FP_OP_ADD: local_add(&L); break;
    case FP_OP_QUANTIZE_MXFP8:
    case FP_OP_DEQUANTIZE_MXFP8: local_mxfp8(&L); break;
    case FP_OP_SPLIT_COPY:
    case FP_OP_CHUNK_CAT: local_regions(&L); break;
    default: break;
  }
  free(L.t);
  free(L.u);
}

/* ---- params: pieces, initial state, checks --------------------------------------------- */
typedef struct piece {
  int64_t runs, len, shard_stride, full_off, full_stride, shift, slot;
  int64_t last; /* the last run's elements: len but for a block-cyclic layout's short last block */
} piece;

/* the elements run `run` of e holds */
static int64_t run_len(const piece *e, int64_t run) { return run == e->runs - 1 ? e->last : e->len; }

/* the elements of q rank r holds in its main / grad slot (executor/exec.c shard_of) */
static bool piece_of(const sctx *s, const fp_ir_param *q, int64_t r, piece *e) {
  int64_t numel = 1;
  for (int d = 0; d < q->ndim; d++) numel *= q->shape[d];
  *e = (piece){0};
  if (q->placement == FP_PL_REPLICATE || q->comm < 0) {
    *e = (piece){1, numel, numel, 0, numel, 0, numel, numel};
    return true;
  }
  const fp_ir_comm *c = &s->p->comms[q->comm];
  int64_t g = fpi_comm_index(c, r), G = c->size;
  switch (q->placement) {
    case FP_PL_SHARD: {
      int d = q->dim, nd = q->ndim > 0 ? q->ndim : 1;
      int64_t shape_d = q->ndim > 0 ? q->shape[d] : 1, outer = 1, inner = 1;
      for (int k = 0; k < d; k++) outer *= q->shape[k];
      for (int k = d + 1; k < nd && q->ndim > 0; k++) inner *= q->shape[k];
      int64_t oi = outer * inner, c_rows = oi > 0 ? q->chunk / oi : 0;
      if (c_rows < 1 || q->chunk != c_rows * oi || c_rows * G < shape_d) return false;
      int64_t rows = shape_d - g * c_rows;
      rows = rows < 0 ? 0 : rows > c_rows ? c_rows : rows;
      e->slot = q->chunk;
      if (rows > 0) *e = (piece){outer, rows * inner, c_rows * inner, g * c_rows * inner, shape_d * inner, 0, q->chunk, rows * inner};
      return true;
    }
    case FP_PL_RAGGED: {
      if (q->tab < 0 || s->p->tabs[q->tab].n != G) return false;
      const fp_ir_table *t = &s->p->tabs[q->tab];
      e->slot = t->cnt[g];
      if (t->cnt[g] > 0) *e = (piece){1, t->cnt[g], t->cnt[g], t->off[g], t->cnt[g], 0, t->cnt[g], t->cnt[g]};
      return true;
    }
    case FP_PL_FLAT: {
      int64_t es = fpi_dtype_size(q->param_dtype), a = q->weight.off / es, gc = g * q->chunk;
      int64_t lo = a > gc ? a : gc, hi = a + numel < gc + q->chunk ? a + numel : gc + q->chunk;
      if (hi > lo) *e = (piece){1, hi - lo, hi - lo, lo - a, hi - lo, lo - gc, hi - lo, hi - lo};
      return true;
    }
    case FP_PL_CYCLIC: { /* blocks g, g+G, ... one after another in the slot */
      if (q->tab < 0 || s->p->tabs[q->tab].n != G) return false;
      const fp_ir_table *t = &s->p->tabs[q->tab];
      int64_t b = fpi_cyclic_block(t), c = t->cnt[g], last;
      if (b < 1 || c > q->chunk) return false;
      e->slot = q->chunk;
      if (c > 0) *e = (piece){fpi_cyclic_runs(c, b, &last), b, b, g * b, G * b, 0, q->chunk, last};
      return true;
    }
    case FP_PL_OWNED:
      if (g == q->owner) *e = (piece){1, numel, numel, 0, numel, 0, numel, numel};
      return true;
    default: return false;
  }
}

static int64_t numel_of(const fp_ir_param *q) {
  int64_t n = 1;
  for (int d = 0; d < q->ndim; d++) n *= q->shape[d];
  return n;
}

static fp_dtype weight_rnd(const fp_ir_param *q) {
  return fits(q->main_dtype, q->param_dtype) ? q->main_dtype : q->param_dtype;
}

/* does every rank hold the same piece of q */
static bool same_piece(const fp_ir_param *q) { return q->placement == FP_PL_REPLICATE || q->comm < 0; }
static int64_t flat_pos(const fp_ir_param *q) { return q->weight.off / fpi_dtype_size(q->param_dtype); }

static const fp_prog *sort_prog; /* for flat_cmp (qsort has no context) */
static int flat_cmp(const void *a, const void *b) {
  const fp_ir_param *x = &sort_prog->params[*(const int32_t *)a], *y = &sort_prog->params[*(const int32_t *)b];
  if (x->main.buf != y->main.buf) return x->main.buf < y->main.buf ? -1 : 1;
  if (x->chunk != y->chunk) return x->chunk < y->chunk ? -1 : 1;
  if (x->comm != y->comm) return x->comm < y->comm ? -1 : 1;
  int64_t u = flat_pos(x), v = flat_pos(y);
  return u < v ? -1 : u > v;
}

/* the params that differ by class (sharded), into flat (by main buffer and
 * position) and other; replicated ones are neither */
static void index_params(sctx *s) {
  const fp_prog *p = s->p;
  s->flat = malloc(((size_t)p->nparams + 1) * sizeof *s->flat);
  s->other = malloc(((size_t)p->nparams + 1) * sizeof *s->other);
  s->plist = malloc(((size_t)p->nparams + 1) * sizeof *s->plist);
  FP_ASSERT(s->flat && s->other && s->plist);
  for (int32_t j = 0; j < p->nparams; j++) {
    const fp_ir_param *q = &p->params[j];
    if (same_piece(q)) continue;
    if (q->placement == FP_PL_FLAT && q->main.buf >= 0 && q->chunk > 0) s->flat[s->nflat++] = j;
    else s->other[s->nother++] = j;
  }
  sort_prog = p;
  if (s->nflat > 1) qsort(s->flat, (size_t)s->nflat, sizeof *s->flat, flat_cmp);
}

/* the sharded params with a piece on class k: into s->plist */
static int32_t class_params(sctx *s, int32_t k) {
  const fp_prog *p = s->p;
  int32_t n = 0;
  for (int32_t x = 0; x < s->nother; x++) s->plist[n++] = s->other[x];
  for (int32_t x = 0; x < s->nflat;) {
    const fp_ir_param *q0 = &p->params[s->flat[x]];
    int32_t y = x;
    while (y < s->nflat && p->params[s->flat[y]].main.buf == q0->main.buf && p->params[s->flat[y]].chunk == q0->chunk &&
           p->params[s->flat[y]].comm == q0->comm)
      y++;
    int64_t g = fpi_comm_index(&p->comms[q0->comm], s->rep[k]), lo = g * q0->chunk, hi = lo + q0->chunk;
    int32_t a = x, b = y; /* the first whose end passes lo (ends are sorted: the params do not overlap) */
    while (a < b) {
      int32_t h = a + (b - a) / 2;
      const fp_ir_param *q = &p->params[s->flat[h]];
      if (flat_pos(q) + numel_of(q) <= lo) a = h + 1;
      else b = h;
    }
    for (int32_t z = a; z < y && flat_pos(&p->params[s->flat[z]]) < hi; z++) s->plist[n++] = s->flat[z];
    x = y;
  }
  return n;
}

/* the main slot (zeros: padding, the gaps of a flat bucket) and pieces of q on rank r */
static void init_main(sctx *s, int32_t k, int32_t j, bool pieces) {
  const fp_ir_param *q = &s->p->params[j];
  piece e;
  if (q->main.buf < 0 || !piece_of(s, q, s->rep[k], &e)) return;
  int64_t mz = fpi_dtype_size(q->main_dtype);
  if (!pieces) {
    int64_t slot = q->placement == FP_PL_FLAT ? q->chunk : e.slot;
    cell z = {.lo = 0, .hi = slot * mz, .kind = SV_ZERO, .p = -1};
    if (z.hi > 0) map_write(wmap(s, k, q->main.buf), q->main.off, &z, 1);
    return;
  }
  for (int64_t run = 0; run < e.runs; run++) {
    cell c = {.lo = 0, .hi = run_len(&e, run) * mz, .kind = SV_WEIGHT, .dt = (uint8_t)q->main_dtype,
              .rnd = (uint8_t)q->main_dtype, .p = j, .e = e.full_off + run * e.full_stride};
    map_write(wmap(s, k, q->main.buf), q->main.off + (e.shift + run * e.shard_stride) * mz, &c, 1);
  }
}

static void init_state(sctx *s) {
  const fp_prog *p = s->p;
  for (int32_t b = 0; b < p->nbufs; b++) reset_buf(s, b, -1);
  /* what every rank holds alike: replicated main weights, scales, compute
   * weights kept in persistent buffers (filled at load) */
  s->uni_mode = true;
  for (int32_t j = 0; j < p->nparams; j++) {
    const fp_ir_param *q = &p->params[j];
    if (same_piece(q)) init_main(s, 0, j, false), init_main(s, 0, j, true);
    int64_t numel = numel_of(q);
    if (q->scales.buf >= 0) {
      cell c = {.lo = 0, .hi = fpi_mx_blocks(numel), .kind = SV_SCALE, .p = j, .e = 0};
      map_write(wmap(s, 0, q->scales.buf), q->scales.off, &c, 1);
    }
    if (q->weight.buf >= 0 && p->bufs[q->weight.buf].kind == FP_BUF_PERSISTENT &&
        !(q->weight.buf == q->main.buf && q->weight.off == q->main.off)) {
      cell c = {.lo = 0, .hi = numel * fpi_dtype_size(q->param_dtype), .kind = SV_WEIGHT,
                .dt = (uint8_t)q->param_dtype, .rnd = (uint8_t)weight_rnd(q), .p = j, .e = 0};
      map_write(wmap(s, 0, q->weight.buf), q->weight.off, &c, 1);
    }
  }
  s->uni_mode = false;
  /* the sharded main weights, per class */
  for (int32_t k = 0; k < s->ncls; k++) {
    int32_t n = class_params(s, k);
    for (int32_t x = 0; x < n; x++) init_main(s, k, s->plist[x], false);
    for (int32_t x = 0; x < n; x++) init_main(s, k, s->plist[x], true);
  }
}

/* the weight of q must be its whole current main weight in the param dtype */
static void check_weight(sctx *s, int32_t seg, int32_t j) {
  const fp_prog *p = s->p;
  const fp_ir_param *q = &p->params[j];
  if (q->weight.buf < 0) return;
  int64_t numel = numel_of(q), z = fpi_dtype_size(q->param_dtype);
  const fp_seg *sg = &p->segs[seg];
  int32_t ncls = s->uni[q->weight.buf] ? 1 : s->ncls; /* shared: one check covers every class */
  for (int32_t k = 0; k < ncls; k++) {
    cell *t = NULL;
    int32_t n = 0, cap = 0;
    map_read(s, rmap(s, k, q->weight.buf), q->weight.off, q->weight.off + numel * z, &t, &n, &cap);
    for (int32_t x = 0; x < n; x++) {
      cell *c = &t[x];
      const char *why = NULL;
      if (c->kind != SV_WEIGHT) why = "";
      else if (c->p != j || c->e != c->lo / z) why = "";
      else if (c->ver != s->ver[j]) why = "";
      else if (c->dt != q->param_dtype) why = "";
      else if (c->fl & F_INEXACT) why = "";
      else if (!(c->fl & F_MX) && c->rnd != weight_rnd(q)) why = "";
      if (!why || c->kind == SV_JUNK) continue;
      char d[400];
      describe(s, c, d, sizeof d);
      serr(s, FP_VL_SEG, seg,
           "at the end of %s(%s) (step %d), %s elements [%" PRId64 ",%" PRId64 ") in %s on rank %" PRId64
           ": holds %s, needs main weight v%d in %s",
           fpi_seg_name(sg->kind), sg->module >= 0 ? p->mods[sg->module].name : "", s->step + 1, q->name, c->lo / z,
           c->hi / z, bname(s, q->weight.buf), s->rep[k], d, s->ver[j], fpi_dtype_name(q->param_dtype));
      break;
    }
    free(t);
  }
}

/* the module's backward adds its grads to the ugrad views of the params it reads */
static void backward(sctx *s, int32_t seg, int32_t j) {
  const fp_prog *p = s->p;
  const fp_ir_param *q = &p->params[j];
  if (!q->requires_grad || q->ugrad.buf < 0) return;
  int32_t sl = s->bslot[j]++;
  if (sl >= 64) {
    s->slot_over[j] = true;
    return;
  }
  if (s->step == 0) s->allslots[j] |= (uint64_t)1 << sl;
  int64_t numel = numel_of(q), z = fpi_dtype_size(q->param_dtype);
  /* every rank's backward adds the same (its own) grads: once for a shared buffer */
  s->uni_mode = s->uni[q->ugrad.buf];
  int32_t ncls = s->uni_mode ? 1 : s->ncls;
  for (int32_t k = 0; k < ncls; k++) {
    cell *t = NULL, *o = NULL;
    int32_t n = 0, cap = 0, no = 0, co = 0;
    map_read(s, rmap(s, k, q->ugrad.buf), q->ugrad.off, q->ugrad.off + numel * z, &t, &n, &cap);
    bool rep = false;
    for (int32_t x = 0; x < n; x++) {
      cell c = t[x], r = {.lo = c.lo, .hi = c.hi, .kind = SV_GRAD, .dt = (uint8_t)q->param_dtype,
                          .rnd = (uint8_t)q->param_dtype, .p = j, .e = c.lo / z, .slots = (uint64_t)1 << sl, .s = 1};
      if (c.kind == SV_ZERO) {
        /* the trainer's backward accumulates into the unsharded grads (docs/executor.md): zeros first */
      } else if (c.kind == SV_GRAD && c.p == j && c.e == c.lo / z && c.digits == 0 && c.s == 1 && c.dt == q->param_dtype &&
                 !(c.slots & r.slots)) {
        r.slots |= c.slots;
      } else if (c.kind == SV_JUNK) {
        r = c;
      } else {
        char d[400];
        describe(s, &c, d, sizeof d);
        if (!rep)
          serr(s, FP_VL_SEG, seg, "the backward (step %d) adds grads of %s to %s [%" PRId64 ",%" PRId64 ") on rank %" PRId64
               ", which holds %s",
               s->step + 1, q->name, bname(s, q->ugrad.buf), q->ugrad.off + c.lo, q->ugrad.off + c.hi, s->rep[k], d);
        rep = true;
        r = junk(c.lo, c.hi, p->segs[seg].first);
      }
      push(&o, &no, &co, &r);
    }
    map_write(wmap(s, k, q->ugrad.buf), q->ugrad.off, o, no);
    free(t);
    free(o);
  }
  s->uni_mode = false;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

/* the main grad of trainable q on class k: its grad from every backward,
 * summed over every rank, scaled as every other, in the main-grad dtype */
static void grad_check(sctx *s, int32_t seg, int32_t k, int32_t j) {
  const fp_prog *p = s->p;
  const fp_ir_param *q = &p->params[j];
  double W = (double)(p->world_size / (p->tp > 0 ? p->tp : 1)), A = (double)p->grad_accumulation; /* the dp size */
  if (!q->requires_grad || q->grad.buf < 0 || s->slot_over[j]) return;
      piece e;
      if (!piece_of(s, q, s->rep[k], &e)) return;
      int64_t gz = fpi_dtype_size(q->grad_dtype);
      for (int64_t run = 0; run < e.runs; run++) {
        int64_t at = q->grad.off + (e.shift + run * e.shard_stride) * gz, e0 = e.full_off + run * e.full_stride;
        cell *t = NULL;
        int32_t n = 0, cap = 0;
        map_read(s, rmap(s, k, q->grad.buf), at, at + run_len(&e, run) * gz, &t, &n, &cap);
        for (int32_t x = 0; x < n; x++) {
          cell *c = &t[x];
          if (c->kind == SV_JUNK) break;
          char why[200] = "";
          if (c->kind == SV_ZERO && s->allslots[j] == 0) continue;
          if (c->kind != SV_GRAD || c->p != j || c->e != e0 + c->lo / gz) snprintf(why, sizeof why, "not its grad");
          else if (c->slots != s->allslots[j]) snprintf(why, sizeof why, "backwards missing");
          else if (c->digits != s->dp_dig) snprintf(why, sizeof why, c->digits & ~s->dp_dig ? "summed over other tp ranks" : "ranks missing");
          else if (c->dt != q->grad_dtype) snprintf(why, sizeof why, "dtype is not the main-grad dtype");
          else if (c->fl & F_INEXACT) snprintf(why, sizeof why, "rounded twice");
          else if (!near(c->s, 1 / (W * A)))
            snprintf(why, sizeof why,
                     "scaled %.9g, the step's mean needs 1/%.17g: %" PRId64 " %sranks x %" PRId64 " micro-batches",
                     c->s, W * A, (int64_t)W, p->tp > 1 ? "dp " : "", p->grad_accumulation);
          if (!why[0]) continue;
          char d[400], sl[200];
          describe(s, c, d, sizeof d);
          slots_text(s->allslots[j], sl, sizeof sl);
          serr(s, FP_VL_SEG, seg,
               "at the optimizer (step %d), the main grad of %s elements [%" PRId64 ",%" PRId64 ") in %s on rank %" PRId64
               " holds %s, needs its grad from backwards {%s} summed over %s in %s (%s)",
               s->step + 1, q->name, e0 + c->lo / gz, e0 + c->hi / gz, bname(s, q->grad.buf), s->rep[k], d, sl,
               s->dp_dig == s->world_dig ? "all ranks" : "the ranks of its dp group",
               fpi_dtype_name(q->grad_dtype), why);
          break;
        }
        free(t);
      }
}

/* the optimizer step moves trainable q's main weight on class k to version v + 1 */
static void bump(sctx *s, int32_t seg, int32_t k, int32_t j) {
  const fp_prog *p = s->p;
  const fp_ir_param *q = &p->params[j];
  int32_t v = s->ver[j];
  if (!q->requires_grad || q->main.buf < 0) return;
      piece e;
      if (!piece_of(s, q, s->rep[k], &e)) return;
      int64_t mz = fpi_dtype_size(q->main_dtype);
      for (int64_t run = 0; run < e.runs; run++) {
        int64_t at = q->main.off + (e.shift + run * e.shard_stride) * mz, e0 = e.full_off + run * e.full_stride;
        cell *t = NULL;
        int32_t n = 0, cap = 0;
        map_read(s, rmap(s, k, q->main.buf), at, at + run_len(&e, run) * mz, &t, &n, &cap);
        for (int32_t x = 0; x < n; x++) {
          cell *c = &t[x];
          if (c->kind == SV_WEIGHT && c->p == j && c->ver == v && c->e == e0 + c->lo / mz && c->dt == q->main_dtype) {
            c->ver = v + 1;
          } else if (c->kind != SV_JUNK) {
            char d[400];
            describe(s, c, d, sizeof d);
            serr(s, FP_VL_SEG, seg, "the optimizer (step %d) reads the main weight of %s in %s on rank %" PRId64
                 ": holds %s, needs main weight v%d",
                 s->step + 1, q->name, bname(s, q->main.buf), s->rep[k], d, v);
          }
        }
        map_write(wmap(s, k, q->main.buf), at, t, n);
        free(t);
      }
}

/* the optimizer: main grads complete, then the main weights move on a version */
static void optimizer(sctx *s, int32_t seg) {
  const fp_prog *p = s->p;
  for (int32_t k = 0; k < s->ncls; k++) {
    int32_t n = class_params(s, k);
    for (int32_t x = 0; x < n; x++) grad_check(s, seg, k, s->plist[x]);
    for (int32_t x = 0; x < n; x++) bump(s, seg, k, s->plist[x]);
  }
  for (int32_t j = 0; j < p->nparams; j++) {
    const fp_ir_param *q = &p->params[j];
    if (!same_piece(q)) continue;
    int32_t nk = q->grad.buf >= 0 && s->uni[q->grad.buf] ? 1 : s->ncls;
    for (int32_t k = 0; k < nk; k++) grad_check(s, seg, k, j);
    s->uni_mode = q->main.buf >= 0 && s->uni[q->main.buf];
    nk = s->uni_mode ? 1 : s->ncls;
    for (int32_t k = 0; k < nk; k++) bump(s, seg, k, j);
    s->uni_mode = false;
  }
  for (int32_t j = 0; j < p->nparams; j++)
    if (p->params[j].requires_grad && p->params[j].main.buf >= 0) s->ver[j]++;
}

/* the params module m reads: its own and the tied ones naming it */
static bool reads(const fp_ir_param *q, int32_t m) {
  if (q->module == m) return true;
  for (int32_t u = 0; u < q->nusers; u++)
    if (q->users[u] == m) return true;
  return false;
}

static void seg_end(sctx *s, int32_t seg) {
  const fp_prog *p = s->p;
  const fp_seg *sg = &p->segs[seg];
  if (sg->kind == FP_SEG_PRE_FORWARD || sg->kind == FP_SEG_PRE_BACKWARD) {
    for (int32_t j = 0; j < p->nparams; j++)
      if (reads(&p->params[j], sg->module)) check_weight(s, seg, j);
    if (sg->kind == FP_SEG_PRE_BACKWARD)
      for (int32_t j = 0; j < p->nparams; j++)
        if (reads(&p->params[j], sg->module)) backward(s, seg, j);
  } else if (sg->kind == FP_SEG_PRE_OPTIMIZER) {
    optimizer(s, seg);
  }
}

static void walk_step(sctx *s) {
  const fp_prog *p = s->p;
  /* transient buffers hold nothing at a step's start */
  for (int32_t b = 0; b < p->nbufs; b++)
    if (p->bufs[b].kind == FP_BUF_TRANSIENT) reset_buf(s, b, -1);
  for (int32_t j = 0; j < p->nparams; j++) s->bslot[j] = 0;
  for (int32_t seg = 0; seg < p->nsegs && s->nerr < SEM_MAX_ERRORS; seg++) {
    const fp_seg *sg = &p->segs[seg];
    for (int32_t i = sg->first; i < sg->first + sg->nops; i++) {
      for (int32_t x = s->rstart[i]; x < s->rstart[i + 1]; x++) reset_buf(s, s->resets[x], i);
      const fp_op *op = &p->ops[i];
      fp_opclass c = fpi_op_class(op->code);
      if (c == FP_OPC_COMM) {
        run_collective(s, i);
      } else if (c == FP_OPC_LOCAL) {
        /* the same on every class: no predicate, no operand or count a rank index moves, shared buffers */
        bool same = op->only < 0 && (op->tab < 0 || fpi_op_regions(op->code));
        const fp_region *rg[3] = {&op->dst, &op->src, &op->aux};
        for (int w = 0; w < 3 && same; w++)
          if (rg[w]->buf >= 0) same = rg[w]->stride == 0 && !rg[w]->tabrel && s->uni[rg[w]->buf];
        s->uni_mode = same;
        for (int32_t k = 0; k < (same ? 1 : s->ncls); k++) run_local(s, i, k);
        s->uni_mode = false;
      }
    }
    seg_end(s, seg);
  }
}

bool fpi_ir_verify_sem_with(const fp_prog *p, fp_vreport report, void *rctx) {
  sctx s = {.p = p, .report = report, .rctx = rctx};
  if (p->world_size < 1 || p->nsegs == 0) return true;
  s.op_reported = calloc((size_t)p->nops + 1, 1);
  s.seg_reported = calloc((size_t)p->nsegs + 1, 1);
  FP_ASSERT(s.op_reported && s.seg_reported);
  if (!build_classes(&s)) {
    serr(&s, FP_VL_PROG, 0, "semantic check: the communicators do not nest as digit ranges of the world");
    goto done;
  }
  s.st = calloc((size_t)s.ncls * (size_t)p->nbufs + 1, sizeof *s.st);
  s.sh = calloc((size_t)p->nbufs + 1, sizeof *s.sh);
  s.uni = calloc((size_t)p->nbufs + 1, sizeof *s.uni);
  FP_ASSERT(s.sh && s.uni);
  for (int32_t b = 0; b < p->nbufs; b++) s.uni[b] = true;
  index_params(&s);
  if ((int64_t)s.ncls * s.nother > SEM_MAX_PIECES) {
    fp_ir_sem_skipped++;
    goto done;
  }
  s.ver = calloc((size_t)p->nparams + 1, sizeof *s.ver);
  s.allslots = calloc((size_t)p->nparams + 1, sizeof *s.allslots);
  s.bslot = calloc((size_t)p->nparams + 1, sizeof *s.bslot);
  s.slot_over = calloc((size_t)p->nparams + 1, sizeof *s.slot_over);
  s.rstart = calloc((size_t)p->nops + 2, sizeof *s.rstart);
  s.resets = malloc(((size_t)p->nlives + 1) * sizeof *s.resets);
  FP_ASSERT(s.st && s.ver && s.allslots && s.bslot && s.slot_over && s.rstart && s.resets);
  for (int32_t l = 0; l < p->nlives; l++) s.rstart[p->lives[l].first + 1]++;
  for (int32_t i = 0; i < p->nops; i++) s.rstart[i + 1] += s.rstart[i];
  {
    int32_t *fill = calloc((size_t)p->nops + 1, sizeof *fill);
    FP_ASSERT(fill);
    for (int32_t l = 0; l < p->nlives; l++) {
      int32_t f = p->lives[l].first;
      s.resets[s.rstart[f] + fill[f]++] = p->lives[l].buf;
    }
    free(fill);
  }
  init_state(&s);
  for (s.step = 0; s.step < 2 && s.nerr < SEM_MAX_ERRORS; s.step++) walk_step(&s);
  for (size_t x = 0; x < (size_t)s.ncls * (size_t)p->nbufs; x++) free(s.st[x].c);
  for (int32_t b = 0; b < p->nbufs; b++) free(s.sh[b].c);
done:
  free(s.st);
  free(s.sh);
  free(s.uni);
  free(s.flat);
  free(s.other);
  free(s.plist);
  free(s.ver);
  free(s.allslots);
  free(s.bslot);
  free(s.slot_over);
  free(s.rstart);
  free(s.resets);
  free(s.rep);
  free(s.addr);
  free(s.addrc);
  free(s.cdig);
  free(s.cls_of);
  free(s.tmp);
  free(s.tmp2);
  free(s.out);
  free(s.op_reported);
  free(s.seg_reported);
  return s.nerr == 0;
}

/* ---- transfers (xfer.h): X7 -------------------------------------------------------------- */
/* The same interpretation for a transfer program: each process's FROM space
 * holds its `have` regions (param q, flat elements from full_off, in their
 * dtype), staging and TO nothing; copies convert, sends carry what their
 * source holds to the matching recv (the k-th send from p to q meets q's
 * k-th recv from p), quantizing marks MXFP8. Afterwards every `need` region
 * must hold exactly its param's elements from its full_off, in its dtype,
 * MXFP8-rounded exactly when the param travels as MXFP8 (scales regions: that
 * param's scales). A send's payload is taken from the previous round's
 * state of its process, rounds repeated until no payload depends on a recv
 * not yet resolved (a relay through staging); processes that repeat another's
 * program (fp_tx.same) are covered by their owner's walk. */
#include "xfer.h"

typedef struct txsend {
  int32_t from, to, k; /* the k-th send from process `from` to `to` */
  int32_t first, n;    /* its cells in tx.pay */
} txsend;

typedef struct txctx {
  const fp_tx *t;
  fp_diag *d;
  int nerr;
  cmap sp[3];              /* one process's FROM, TO, staging */
  txsend *snd;             /* the previous round's sends, by (from, to, k) */
  int32_t nsnd;
  cell *pay;               /* their payloads */
  txsend *rsnd;            /* this round's, recorded */
  int32_t nrsnd, caprsnd;
  cell *rpay;
  int32_t nrpay, caprpay;
  bool unresolved;         /* a payload relays bytes of a recv not resolved yet */
  int32_t *hfirst, *hidx;  /* have regions by process: hidx[hfirst[p] .. hfirst[p+1]) */
  int32_t *nsent, *nrecv;  /* per peer, this process's sends and recvs so far (reset after each walk) */
  cell *sc;                /* scratch: the scales an op reads */
  int32_t csc;
} txctx;

static void txerr(txctx *x, int32_t i, int32_t proc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void txerr(txctx *x, int32_t i, int32_t proc, const char *fmt, ...) {
  if (x->nerr++ >= SEM_MAX_ERRORS) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* read from a file: messages name it, as the other transfer rules' do */
  const char *where = x->t->src ? x->t->src->path : "xfer";
  if (i >= 0)
    fpi_diag_errorf(x->d, where, "%sop %d (process %d, %s): %s", x->t->src ? "xfer: " : "", i, proc,
                   fpi_tx_kind_name(x->t->ops[i].kind), msg);
  else
    fpi_diag_errorf(x->d, where, "%sprocess %d: %s", x->t->src ? "xfer: " : "", proc, msg);
}

static int send_cmp(const void *a, const void *b) {
  const txsend *x = a, *y = b;
  if (x->from != y->from) return x->from < y->from ? -1 : 1;
  if (x->to != y->to) return x->to < y->to ? -1 : 1;
  return x->k < y->k ? -1 : x->k > y->k;
}

/* MXFP8 spans. A quantize takes a slice's scales over the param's
 * 32-element blocks clipped to the slice: the span [digits, digits + slots)
 * of a scale or MXFP8 cell. The scale of block k covers the elements
 * tx_block gives. A span starting and ending on block boundaries (or at the
 * param's end) is the param's own blocks, kept as (0, numel): such cells
 * compare equal whoever made them, and TO's MXFP8 needs want exactly them. */
static int64_t tx_numel(const fp_tx *t, int32_t q) { return q >= 0 && q < t->nparams ? t->params[q].numel : 0; }
static void tx_span(const fp_tx *t, cell *c, int64_t e0, int64_t n) {
  int64_t numel = tx_numel(t, c->p);
  if (e0 % FP_MX_BLOCK == 0 && (e0 + n == numel || (e0 + n) % FP_MX_BLOCK == 0)) e0 = 0, n = numel;
  c->digits = (uint64_t)e0, c->slots = (uint64_t)n;
}
static bool tx_whole(const fp_tx *t, const cell *c) {
  return c->digits == 0 && c->slots == (uint64_t)tx_numel(t, c->p);
}
static void tx_block(const fp_tx *t, const cell *c, int64_t k, int64_t *a, int64_t *b) {
  int64_t s0 = (int64_t)c->digits, s1 = s0 + (int64_t)c->slots, e = k * FP_MX_BLOCK + FP_MX_BLOCK;
  int64_t numel = tx_numel(t, c->p);
  *a = s0 > k * FP_MX_BLOCK ? s0 : k * FP_MX_BLOCK;
  *b = s1 < e ? s1 : e;
  if (*b > numel) *b = numel;
  if (*b < *a) *b = *a;
}

static cmap *txspace(txctx *x, fp_tx_ref r) { return r.space >= 1 && r.space <= 3 ? &x->sp[r.space - 1] : NULL; }

static void tx_describe(const txctx *x, const cell *c, char *out, size_t cap) {
  int64_t z = esize(c), n = z ? (c->hi - c->lo) / z : 0;
  const char *nm = c->p >= 0 && c->p < x->t->nparams ? x->t->params[c->p].name : "?";
  switch ((sv_kind)c->kind) {
    case SV_WEIGHT: {
      char sp[96] = "";
      if ((c->fl & F_MX) && !tx_whole(x->t, c))
        snprintf(sp, sizeof sp, " (blocks of elements [%" PRIu64 ",%" PRIu64 "))", c->digits, c->digits + c->slots);
      if (c->ver > 0) snprintf(sp + strlen(sp), sizeof sp - strlen(sp), " of optimizer state %d", c->ver - 1);
      snprintf(out, cap, "%s elements [%" PRId64 ",%" PRId64 ") in %s%s%s", nm, c->e, c->e + n,
               fpi_dtype_name((fp_dtype)c->dt), c->fl & F_MX ? " MXFP8" : "", sp);
      return;
    }
    case SV_SCALE:
      if (tx_whole(x->t, c))
        snprintf(out, cap, "MXFP8 scales of %s blocks [%" PRId64 ",%" PRId64 ")", nm, c->e, c->e + n);
      else
        snprintf(out, cap, "MXFP8 scales of %s blocks [%" PRId64 ",%" PRId64 ") over elements [%" PRIu64 ",%" PRIu64
                 ") only", nm, c->e, c->e + n, c->digits, c->digits + c->slots);
      return;
    case SV_ZERO: snprintf(out, cap, "zeros"); return;
    case SV_JUNK: /* (ver: the op that made it) */
      snprintf(out, cap, "what op %d wrote, which nothing proves", c->ver);
      return;
    case SV_WIRE:
      snprintf(out, cap, "wire bytes [%" PRId64 ",+%" PRId64 ") of %s elements [%" PRIu64 ",%" PRIu64 ") (transform '%s' "
               "from %s to %s)", c->e, c->hi - c->lo, nm, c->digits, c->digits + c->slots,
               fpi_tx_xf_name(x->t, c->p) ? fpi_tx_xf_name(x->t, c->p) : "?", fpi_dtype_name((fp_dtype)c->dt),
               fpi_dtype_name((fp_dtype)c->rnd));
      return;
    default: snprintf(out, cap, "undefined"); return;
  }
}

/* walk process p's program; record its sends when `record` */
/* tx_walk in its steps: the spaces set up (tx_spaces: FROM holds the
 * weights the process has), then each op: a conversion or copy
 * (tx_convert), scales, a send (tx_send: its payload recorded), a recv
 * (tx_recv: the payload its send recorded) */
static void tx_spaces(txctx *x, int32_t p) {
  const fp_tx *t = x->t;
  int64_t size[3] = {t->from_arena, t->to_arena, t->stage_bytes[p]};
  for (int s = 0; s < 3; s++) map_set_all(NULL, &x->sp[s], size[s], SV_UNDEF, -1);
  for (int32_t y = x->hfirst[p]; y < x->hfirst[p + 1]; y++) {
    const fp_tx_region *r = &t->have[x->hidx[y]];
    if (r->bytes <= 0) continue;
    /* (a transfer's weight cell: ver its plane, the main weights or an optimizer state) */
    cell c = {.lo = 0, .hi = r->bytes, .kind = SV_WEIGHT, .dt = (uint8_t)r->dtype, .rnd = (uint8_t)r->dtype,
              .fl = r->dtype == FP_E4M3 ? F_MX : 0, .p = r->param, .ver = r->plane, .e = r->full_off};
    /* (an e8m0 region: the scales of the param's blocks from block full_off) */
    if (r->dtype == FP_E8M0) c = (cell){.lo = 0, .hi = r->bytes, .kind = SV_SCALE, .p = r->param, .e = r->full_off};
    if (r->dtype == FP_E8M0 || r->dtype == FP_E4M3) tx_span(x->t, &c, 0, tx_numel(x->t, r->param)); /* FROM's own */
    map_write(&x->sp[0], r->off, &c, 1);
  }
}

/* an MXFP8 op's source (the cells a read of its src) must be its param's
 * elements [full_off, +n) in dtype in: the blocks its scales are taken or
 * applied over are the param's. Reports otherwise; junk (a recv not
 * resolved yet, or reported where it was made) fails silently */
static bool tx_src_is_param(txctx *x, int32_t p, int32_t i, const cell *a, int32_t na, fp_dtype in) {
  const fp_tx_op *op = &x->t->ops[i];
  int64_t iz = fpi_dtype_size(in);
  for (int32_t j = 0; j < na; j++) {
    const cell *c = &a[j];
    if (c->kind == SV_JUNK) return false;
    if (c->kind != SV_WEIGHT || c->p != op->param || c->dt != in || c->e != op->full_off + c->lo / iz || c->ver != 0) {
      char dd[300];
      tx_describe(x, c, dd, sizeof dd);
      txerr(x, i, p, "takes its MXFP8 blocks over bytes [%" PRId64 ",%" PRId64 ") that hold %s, not %s elements [%" PRId64
            ",%" PRId64 ") in %s", op->src.off + c->lo, op->src.off + c->hi, dd, x->t->params[op->param].name,
            op->full_off + c->lo / iz, op->full_off + c->hi / iz, fpi_dtype_name(in));
      return false;
    }
  }
  return true;
}

/* the scale cell covering byte j of the scales an op read (x->sc, n of them) */
static const cell *tx_sc_at(const txctx *x, int32_t n, int64_t j) {
  for (int32_t q = 0; q < n; q++)
    if (x->sc[q].lo <= j && j < x->sc[q].hi) return &x->sc[q];
  return NULL;
}

/* the scales op i reads at aux: byte j must be a scale of the op's param,
 * of block full_off / 32 + j, taken over a span that gives that block the
 * elements want() names: for quantize_at at least the slice's own (*span:
 * the span of them all, 0 when they do not make one); for dequantize
 * exactly those its source's MXFP8 elements were quantized over */
static bool tx_aux_scales(txctx *x, int32_t p, int32_t i, const cell *src, int32_t ns_src, cell *span) {
  const fp_tx *t = x->t;
  const fp_tx_op *op = &t->ops[i];
  cmap *am = txspace(x, op->aux);
  int64_t ns = fpi_tx_nscales(op->full_off, op->n), k0 = op->full_off / FP_MX_BLOCK;
  if (!am || ns <= 0) return true;
  int32_t na = 0;
  map_read(NULL, am, op->aux.off, op->aux.off + ns, &x->sc, &na, &x->csc);
  int64_t A = -1, B = -1;
  for (int64_t j = 0; j < ns; j++) {
    int64_t k = k0 + j, wa, wb, ga = 0, gb = 0;
    const cell *c = tx_sc_at(x, na, j);
    if (c && c->kind == SV_JUNK) return false;
    if (op->kind == FP_TX_DEQUANT) { /* the MXFP8 elements of block k in the source: their span, one for all */
      bool seen = false;
      for (int32_t q = 0; q < ns_src; q++) {
        int64_t e0 = src[q].e, e1 = src[q].e + (src[q].hi - src[q].lo), qa, qb;
        if (src[q].kind != SV_WEIGHT || e0 >= (k + 1) * FP_MX_BLOCK || e1 <= k * FP_MX_BLOCK) continue;
        tx_block(t, &src[q], k, &qa, &qb);
        if (seen && (qa != wa || qb != wb)) {
          txerr(x, i, p, "dequantizes %s block %" PRId64 " whose MXFP8 elements were quantized at two scales (over "
                "elements [%" PRId64 ",%" PRId64 ") and [%" PRId64 ",%" PRId64 "))", t->params[op->param].name, k, wa,
                wb, qa, qb);
          return false;
        }
        wa = qa, wb = qb, seen = true;
      }
      if (!seen) return false; /* (the source was reported) */
    } else { /* the slice's part of block k */
      wa = op->full_off > k * FP_MX_BLOCK ? op->full_off : k * FP_MX_BLOCK;
      wb = op->full_off + op->n < (k + 1) * FP_MX_BLOCK ? op->full_off + op->n : (k + 1) * FP_MX_BLOCK;
    }
    bool ok = c && c->kind == SV_SCALE && c->p == op->param && c->e + (j - c->lo) == k;
    if (ok) {
      tx_block(t, c, k, &ga, &gb);
      ok = op->kind == FP_TX_DEQUANT ? ga == wa && gb == wb : ga <= wa && gb >= wb;
      /* one span: every block after the first from its start, every one before the last to its end */
      if (j == 0) A = ga;
      else if (ga != k * FP_MX_BLOCK || B != k * FP_MX_BLOCK) A = -2;
      B = gb;
    }
    if (!ok) {
      char dd[300] = "nothing";
      if (c) tx_describe(x, c, dd, sizeof dd);
      txerr(x, i, p, "reads the scale of %s block %" PRId64 " at %s+%" PRId64 ", which holds %s; %s elements [%" PRId64
            ",%" PRId64 ")", t->params[op->param].name, k, fpi_tx_space_name(op->aux.space), (int64_t)op->aux.off + j, dd,
            op->kind == FP_TX_DEQUANT ? "its MXFP8 elements were quantized at the scale of" : "it quantizes at least",
            wa, wb);
      return false;
    }
  }
  if (span) {
    if (A < 0) {
      txerr(x, i, p, "quantizes at scales of %s that are not the blocks of one slice", t->params[op->param].name);
      return false;
    }
    tx_span(t, span, A, B - A);
  }
  return true;
}

/* copy, quantize or dequantize: the source's cells converted into dst
 * (a weight read as another dtype becomes junk, reported); a quantize
 * writes its scales too. a, b: scratch lists */
static void tx_convert(txctx *x, int32_t p, int32_t i, cell **a, int32_t *ca, cell **b, int32_t *cb) {
  const fp_tx_op *op = &x->t->ops[i];
  cmap *dm = txspace(x, op->dst), *sm = txspace(x, op->src);
  if (!dm || !sm) return;
  fp_dtype in = op->kind == FP_TX_DEQUANT ? FP_E4M3 : op->sdtype;
  fp_dtype out = op->kind == FP_TX_QUANT || op->kind == FP_TX_QUANT_AT ? FP_E4M3 : op->dtype;
  int64_t iz = fpi_dtype_size(in), oz = fpi_dtype_size(out);
  int32_t na = 0, nb = 0;
  map_read(NULL, sm, op->src.off, op->src.off + op->n * iz, a, &na, ca);
  /* an MXFP8 op: its source the param's elements [full_off, +n), the scales
   * it applies those of their blocks; what it writes has the span of the
   * scales it quantized at (a dequantize keeps its source's) */
  bool mx = op->kind != FP_TX_COPY, ok = true;
  cell span = {.p = op->param};
  if (mx) ok = tx_src_is_param(x, p, i, *a, na, in);
  if (ok && op->kind == FP_TX_QUANT) tx_span(x->t, &span, op->full_off, op->n);
  if (ok && (op->kind == FP_TX_QUANT_AT || op->kind == FP_TX_DEQUANT))
    ok = tx_aux_scales(x, p, i, *a, na, op->kind == FP_TX_QUANT_AT ? &span : NULL);
  for (int32_t j = 0; j < na; j++) {
    cell c = (*a)[j];
    if (c.kind == SV_WEIGHT) {
      if (c.dt != in) {
        char dd[300];
        tx_describe(x, &c, dd, sizeof dd);
        txerr(x, i, p, "reads %s as %s", dd, fpi_dtype_name(in));
        c.kind = SV_JUNK;
      } else {
        if (op->kind == FP_TX_QUANT || op->kind == FP_TX_QUANT_AT) c.fl |= F_MX, c.digits = span.digits, c.slots = span.slots;
        c.dt = (uint8_t)out;
      }
    } else if (c.kind == SV_SCALE && in != FP_E8M0) {
      char dd[300];
      tx_describe(x, &c, dd, sizeof dd);
      txerr(x, i, p, "reads %s as %s", dd, fpi_dtype_name(in));
      c.kind = SV_JUNK;
    }
    if (!ok) c = (cell){.lo = c.lo, .hi = c.hi, .kind = SV_JUNK, .p = -1, .ver = i};
    c.lo = c.lo / iz * oz;
    c.hi = c.hi / iz * oz;
    push(b, &nb, cb, &c);
  }
  map_write(dm, op->dst.off, *b, nb);
  if (op->kind == FP_TX_QUANT) {
    /* its scales: those of the param's blocks over [full_off, +n) where it
     * read exactly those elements */
    cmap *am = txspace(x, op->aux);
    int64_t ns = fpi_tx_nscales(op->full_off, op->n);
    cell sc = {.lo = 0, .hi = ns, .kind = SV_SCALE, .p = op->param, .e = op->full_off / FP_MX_BLOCK};
    tx_span(x->t, &sc, op->full_off, op->n);
    if (!ok) sc = (cell){.lo = 0, .hi = ns, .kind = SV_JUNK, .p = -1, .ver = i};
    if (am && ns > 0) map_write(am, op->aux.off, &sc, 1);
  }
}

/* scales (the block scales of the param's elements [full_off, +n) it
 * reads) and max (byte by byte, of two scales of one block: the scale over
 * the union of their elements, which must be one range) */
static void tx_scales(txctx *x, int32_t p, int32_t i, cell **a, int32_t *ca, cell **b, int32_t *cb) {
  const fp_tx *t = x->t;
  const fp_tx_op *op = &t->ops[i];
  cmap *dm = txspace(x, op->dst), *sm = txspace(x, op->src);
  if (!dm || !sm) return;
  int32_t na = 0, nb = 0;
  if (op->kind == FP_TX_SCALES) {
    int64_t ns = fpi_tx_nscales(op->full_off, op->n);
    map_read(NULL, sm, op->src.off, op->src.off + op->n * fpi_dtype_size(op->sdtype), a, &na, ca);
    cell sc = {.lo = 0, .hi = ns, .kind = SV_SCALE, .p = op->param, .e = op->full_off / FP_MX_BLOCK};
    tx_span(t, &sc, op->full_off, op->n);
    if (!tx_src_is_param(x, p, i, *a, na, op->sdtype)) sc = (cell){.lo = 0, .hi = ns, .kind = SV_JUNK, .p = -1, .ver = i};
    if (ns > 0) map_write(dm, op->dst.off, &sc, 1);
    return;
  }
  cmap *am = txspace(x, op->aux);
  if (!am) return;
  map_read(NULL, sm, op->src.off, op->src.off + op->n, a, &na, ca);
  map_read(NULL, am, op->aux.off, op->aux.off + op->n, b, &nb, cb);
  for (int64_t j = 0; j < op->n; j++) {
    const cell *u = NULL, *v = NULL;
    for (int32_t q = 0; q < na && !u; q++) u = (*a)[q].lo <= j && j < (*a)[q].hi ? &(*a)[q] : NULL;
    for (int32_t q = 0; q < nb && !v; q++) v = (*b)[q].lo <= j && j < (*b)[q].hi ? &(*b)[q] : NULL;
    cell r = {.lo = 0, .hi = 1, .kind = SV_JUNK, .p = -1, .ver = i};
    if (u && v && u->kind != SV_JUNK && v->kind != SV_JUNK) {
      int64_t k = u->kind == SV_SCALE ? u->e + (j - u->lo) : -1, ua, ub, va, vb;
      bool ok = u->kind == SV_SCALE && v->kind == SV_SCALE && u->p == v->p && v->e + (j - v->lo) == k && u->p == op->param;
      if (ok) {
        tx_block(t, u, k, &ua, &ub);
        tx_block(t, v, k, &va, &vb);
        ok = ua <= vb && va <= ub; /* the union one range */
      }
      if (ok) {
        r = (cell){.lo = 0, .hi = 1, .kind = SV_SCALE, .p = u->p, .e = k};
        tx_span(t, &r, ua < va ? ua : va, (ub > vb ? ub : vb) - (ua < va ? ua : va));
      } else {
        char du[300], dv[300];
        tx_describe(x, u, du, sizeof du);
        tx_describe(x, v, dv, sizeof dv);
        txerr(x, i, p, "takes the max of %s and %s at byte %" PRId64 ": not two scales of one block of %s over "
              "elements that make one range", du, dv, j, t->params[op->param].name);
      }
    }
    map_write(dm, op->dst.off + j, &r, 1);
  }
}

/* a transform's prep_send: FROM's elements [full_off, +n) of the param in
 * sdtype become its wire bytes; anything else read is reported (junk) */
static void tx_prep_send(txctx *x, int32_t p, int32_t i, cell **a, int32_t *ca) {
  const fp_tx_op *op = &x->t->ops[i];
  cmap *dm = txspace(x, op->dst), *sm = txspace(x, op->src);
  if (!dm || !sm) return;
  int64_t z = fpi_dtype_size(op->sdtype), bytes = fpi_tx_wire_at(x->t, op, op->nwire);
  int32_t na = 0;
  map_read(NULL, sm, op->src.off, op->src.off + op->n * z, a, &na, ca);
  const cell *c = na ? &(*a)[0] : NULL;
  bool ok = na == 1 && c->kind == SV_WEIGHT && c->p == op->param && c->dt == op->sdtype && c->e == op->full_off &&
            c->hi - c->lo == op->n * z && c->ver == 0; /* (the main weights: no optimizer state goes through one) */
  cell w = {.lo = 0, .hi = bytes, .kind = SV_WIRE, .dt = (uint8_t)op->sdtype, .rnd = (uint8_t)op->dtype, .p = op->param,
            .e = 0, .digits = (uint64_t)op->full_off, .slots = (uint64_t)op->n};
  if (!ok) {
    char dd[300] = "nothing";
    if (c) tx_describe(x, c, dd, sizeof dd);
    txerr(x, i, p, "transform '%s': prepare_send reads %s, not %s elements [%" PRId64 ",%" PRId64 ") in %s",
          fpi_tx_xf_name(x->t, op->param) ? fpi_tx_xf_name(x->t, op->param) : "?", dd, x->t->params[op->param].name,
          op->full_off, op->full_off + op->n, fpi_dtype_name(op->sdtype));
    w = (cell){.lo = 0, .hi = bytes, .kind = SV_JUNK, .p = -1, .ver = i};
  }
  if (bytes > 0) map_write(dm, op->dst.off, &w, 1);
}

/* a transform's finalize: each wire tensor must hold the bytes the
 * sender's prep_send made of this very slice at the same place of its wire
 * tensors; then TO's elements [full_off, +n) hold the param's values through
 * the transform (F_XF) */
static void tx_finalize(txctx *x, int32_t p, int32_t i, cell **a, int32_t *ca) {
  const fp_tx *t = x->t;
  const fp_tx_op *op = &t->ops[i];
  cmap *dm = txspace(x, op->dst), *sm = txspace(x, op->src);
  if (!dm || !sm) return;
  bool ok = true;
  for (int k = 0; ok && k < (int)op->nwire; k++) {
    const fp_tx_wire *w = &t->wires[fpi_tx_wire0(op) + k];
    int64_t at = fpi_tx_wire_at(t, op, k), b = w->count * fpi_dtype_size(w->dtype);
    int32_t na = 0;
    if (b == 0) continue;
    map_read(NULL, sm, op->src.off + at, op->src.off + at + b, a, &na, ca);
    const cell *c = &(*a)[0];
    /* (and the transform called from and to the same dtypes on both sides) */
    ok = na == 1 && c->kind == SV_WIRE && c->p == op->param && c->digits == (uint64_t)op->full_off &&
         c->slots == (uint64_t)op->n && c->e == at && c->dt == op->sdtype && c->rnd == op->dtype;
    bool pending = false; /* a recv not resolved in this round: junk, silently (a later round resolves it) */
    for (int32_t j = 0; j < na; j++) pending |= (*a)[j].kind == SV_JUNK;
    if (!ok && !pending) {
      char dd[300] = "nothing";
      if (na) tx_describe(x, c, dd, sizeof dd);
      txerr(x, i, p, "transform '%s': finalize_recv's wire tensor %d holds %s, not the wire bytes [%" PRId64 ",+%" PRId64
            ") of %s elements [%" PRId64 ",%" PRId64 ") from %s to %s", fpi_tx_xf_name(t, op->param) ? fpi_tx_xf_name(t, op->param) : "?",
            k, dd, at, b, t->params[op->param].name, op->full_off, op->full_off + op->n, fpi_dtype_name(op->sdtype),
            fpi_dtype_name(op->dtype));
    }
  }
  int64_t z = fpi_dtype_size(op->dtype);
  cell c = {.lo = 0, .hi = op->n * z, .kind = SV_WEIGHT, .dt = (uint8_t)op->dtype, .rnd = (uint8_t)op->dtype,
            .fl = F_XF, .p = op->param, .e = op->full_off};
  if (!ok) c = (cell){.lo = 0, .hi = op->n * z, .kind = SV_JUNK, .p = -1, .ver = i};
  if (op->n > 0) map_write(dm, op->dst.off, &c, 1);
}

/* a send: counted per peer; recorded (its payload's cells) when record */
static void tx_send(txctx *x, int32_t p, int32_t i, bool record, cell **a, int32_t *ca) {
  const fp_tx *t = x->t;
  const fp_tx_op *op = &t->ops[i];
  cmap *sm = txspace(x, op->src);
  if (!sm || op->peer < 0 || op->peer >= t->nprocs) return;
  int32_t k = x->nsent[op->peer]++;
  if (!record) return;
  int32_t na = 0;
  map_read(NULL, sm, op->src.off, op->src.off + op->n * fpi_dtype_size(op->sdtype), a, &na, ca);
  txsend e = {p, op->peer, k, x->nrpay, 0};
  for (int32_t j = 0; j < na; j++) {
    if ((*a)[j].kind == SV_JUNK) x->unresolved = true; /* it relays what a recv not resolved yet wrote */
    cell c = (*a)[j];
    if (j == 0 && x->nrpay > 0) { /* never merged into the previous payload */
      if (x->nrpay == x->caprpay) {
        x->caprpay = 2 * x->caprpay;
        x->rpay = realloc(x->rpay, (size_t)x->caprpay * sizeof *x->rpay);
        FP_ASSERT(x->rpay);
      }
      x->rpay[x->nrpay++] = c;
    } else {
      push(&x->rpay, &x->nrpay, &x->caprpay, &c);
    }
  }
  e.n = x->nrpay - e.first;
  if (x->nrsnd == x->caprsnd) {
    x->caprsnd = x->caprsnd ? 2 * x->caprsnd : 64;
    x->rsnd = realloc(x->rsnd, (size_t)x->caprsnd * sizeof *x->rsnd);
    FP_ASSERT(x->rsnd);
  }
  x->rsnd[x->nrsnd++] = e;
}

/* a recv: the payload its send recorded, or junk when none was */
static void tx_recv(txctx *x, int32_t p, int32_t i) {
  const fp_tx *t = x->t;
  const fp_tx_op *op = &t->ops[i];
  cmap *dm = txspace(x, op->dst);
  if (!dm || op->peer < 0 || op->peer >= t->nprocs) return;
  txsend key = {op->peer, p, x->nrecv[op->peer]++, 0, 0};
  txsend *hit = x->snd ? bsearch(&key, x->snd, (size_t)x->nsnd, sizeof *x->snd, send_cmp) : NULL;
  if (!hit) {
    cell c = {.lo = 0, .hi = op->n * fpi_dtype_size(op->dtype), .kind = SV_JUNK, .p = -1, .ver = i};
    map_write(dm, op->dst.off, &c, 1);
  } else {
    map_write(dm, op->dst.off, x->pay + hit->first, hit->n);
  }
}

static void tx_walk(txctx *x, int32_t p, bool record) {
  const fp_tx *t = x->t;
  tx_spaces(x, p);
  cell *a = NULL, *b = NULL;
  int32_t ca = 0, cb = 0;
  for (int32_t i = t->first[p]; i < t->first[p + 1]; i++) {
    const fp_tx_op *op = &t->ops[i];
    switch (op->kind) {
      case FP_TX_COPY:
      case FP_TX_QUANT:
      case FP_TX_QUANT_AT:
      case FP_TX_DEQUANT: tx_convert(x, p, i, &a, &ca, &b, &cb); break;
      case FP_TX_SCALES:
      case FP_TX_MAX: tx_scales(x, p, i, &a, &ca, &b, &cb); break;
      case FP_TX_SEND: tx_send(x, p, i, record, &a, &ca); break;
      case FP_TX_RECV: tx_recv(x, p, i); break;
      case FP_TX_PREP_SEND: tx_prep_send(x, p, i, &a, &ca); break;
      case FP_TX_FINALIZE: tx_finalize(x, p, i, &a, &ca); break;
      default: break;
    }
  }
  free(a);
  free(b);
  for (int32_t i = t->first[p]; i < t->first[p + 1]; i++) /* only the peers it touched */
    if (t->ops[i].peer >= 0 && t->ops[i].peer < t->nprocs) x->nsent[t->ops[i].peer] = x->nrecv[t->ops[i].peer] = 0;
}

/* X7: every need region holds exactly its FROM elements */
static void tx_check_needs(txctx *x, int32_t p) {
  const fp_tx *t = x->t;
  cell *a = NULL;
  int32_t na = 0, ca = 0;
  for (int32_t h = t->need_first[p]; h < t->need_first[p + 1]; h++) {
    const fp_tx_region *r = &t->need[h];
    map_read(NULL, &x->sp[1], r->off, r->off + r->bytes, &a, &na, &ca);
    bool mx = r->param >= 0 && r->param < t->nparams && (t->params[r->param].mxfp8 || t->params[r->param].src_mx);
    int64_t z = fpi_dtype_size(r->dtype);
    for (int32_t j = 0; j < na; j++) {
      const cell *c = &a[j];
      bool ok;
      /* e8m0: the scales of the param's whole blocks from block full_off */
      if (r->dtype == FP_E8M0)
        ok = c->kind == SV_SCALE && c->p == r->param && c->e == r->full_off + c->lo && tx_whole(t, c) && r->plane == 0;
      else
        ok = c->kind == SV_WEIGHT && c->p == r->param && c->dt == r->dtype && c->e == r->full_off + c->lo / z &&
             c->ver == r->plane && /* the main weights or that optimizer state */
             /* e4m3 in TO is MXFP8 in the param's whole blocks; a wire transform covers what crosses the
              * wire, local copies are exact */
             (r->dtype == FP_E4M3 ? (c->fl & F_MX) && tx_whole(t, c) : mx || !(c->fl & F_MX)) &&
             /* through a transform only where the param has one */
             (!(c->fl & F_XF) || fpi_tx_xf_name(t, r->param));
      if (ok) continue;
      char dd[300];
      tx_describe(x, c, dd, sizeof dd);
      if (r->dtype == FP_E8M0)
        txerr(x, -1, p, "TO bytes [%" PRId64 ",%" PRId64 ") hold %s, need the MXFP8 scales of %s blocks [%" PRId64 ",%"
              PRId64 ")", r->off + c->lo, r->off + c->hi, dd, t->params[r->param].name, r->full_off + c->lo, r->full_off + c->hi);
      else {
        char st[48] = "";
        if (r->plane > 0) snprintf(st, sizeof st, " of optimizer state %d", r->plane - 1);
        txerr(x, -1, p, "TO bytes [%" PRId64 ",%" PRId64 ") hold %s, need %s elements [%" PRId64 ",%" PRId64 ") in %s%s%s",
              r->off + c->lo, r->off + c->hi, dd, t->params[r->param].name, r->full_off + c->lo / z,
              r->full_off + c->hi / z, fpi_dtype_name(r->dtype), r->dtype == FP_E4M3 ? " MXFP8" : mx ? " (MXFP8 on the wire)" : "",
              st);
      }
      break;
    }
  }
  free(a);
}

/* transfers of more ops are left to X1-X6: the walk stores every send's
 * payload and walks the program at least twice (llama3-405b from 8,192 back
 * to 16,384 ranks: 6.2M ops, 13 s more on the 2-core machine) */
#define TX_SEM_MAX_OPS (1 << 20)
long fp_tx_sem_skipped;

bool fpi_tx_verify_sem(const fp_tx *t, fp_diag *d) {
  if (t->nops > TX_SEM_MAX_OPS) {
    fp_tx_sem_skipped++;
    return true;
  }
  txctx x = {.t = t, .d = d};
  x.hfirst = calloc((size_t)t->nprocs + 2, sizeof *x.hfirst);
  x.hidx = malloc(((size_t)t->nhave + 1) * sizeof *x.hidx);
  x.nsent = calloc((size_t)t->nprocs + 1, sizeof *x.nsent);
  x.nrecv = calloc((size_t)t->nprocs + 1, sizeof *x.nrecv);
  FP_ASSERT(x.hfirst && x.hidx && x.nsent && x.nrecv);
  for (int32_t h = 0; h < t->nhave; h++)
    if (t->have[h].proc >= 0 && t->have[h].proc < t->nprocs) x.hfirst[t->have[h].proc + 1]++;
  for (int64_t p = 0; p < t->nprocs; p++) x.hfirst[p + 1] += x.hfirst[p];
  {
    int32_t *fill = calloc((size_t)t->nprocs + 1, sizeof *fill);
    FP_ASSERT(fill);
    for (int32_t h = 0; h < t->nhave; h++) {
      int32_t q = t->have[h].proc;
      if (q >= 0 && q < t->nprocs) x.hidx[x.hfirst[q] + fill[q]++] = h;
    }
    free(fill);
  }
  for (int round = 0; round < 4; round++) {
    x.nrsnd = x.nrpay = 0;
    x.unresolved = false;
    for (int32_t p = 0; p < t->nprocs; p++)
      if (fpi_tx_prog(t, p) == p) tx_walk(&x, p, true);
    if (x.nrsnd > 1) qsort(x.rsnd, (size_t)x.nrsnd, sizeof *x.rsnd, send_cmp);
    /* this round's sends are the next round's lookups */
    free(x.snd);
    free(x.pay);
    x.snd = x.rsnd, x.nsnd = x.nrsnd, x.pay = x.rpay;
    x.rsnd = NULL, x.rpay = NULL, x.caprsnd = x.caprpay = 0;
    if (!x.unresolved) break; /* no send relays a recv: every payload is final */
  }
  for (int32_t p = 0; p < t->nprocs; p++) {
    if (fpi_tx_prog(t, p) != p) continue;
    tx_walk(&x, p, false);
    tx_check_needs(&x, p);
  }
  for (int s = 0; s < 3; s++) free(x.sp[s].c);
  free(x.snd);
  free(x.pay);
  free(x.rsnd);
  free(x.rpay);
  free(x.hfirst);
  free(x.hidx);
  free(x.nsent);
  free(x.nrecv);
  free(x.sc);
  return x.nerr == 0;
}
