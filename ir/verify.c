/* verify.c - fpi_ir_verify: is a program safe to hand to the executor?
 *
 * Run after parsing, after the pipeline and after every pass in tests. It
 * trusts nothing in the program (it may come from a hand-written .fpir or a
 * hostile plan.json): indices, enums and counts are checked before they are
 * used, all byte arithmetic is overflow-checked, and the work is bounded by
 * the program's size (world_size and the number of events are capped).
 *
 * The rules, in the order they are checked:
 *  1. structure: every index in range; names unique per table; the segment
 *     table covers the op array in order; step_begin first, pre_optimizer
 *     and post_optimizer last; module segments name a module.
 *  2. operands in bounds on every rank (the op's extent per operand; linear
 *     regions at g = 0 and g = G-1, table-relative ones at every g), and
 *     element-aligned: every operand offset, per-rank stride and row pitch,
 *     and every param view, a multiple of its dtype's element size (bytes
 *     read half an element off are another number). Every param's layout
 *     as the spec's placement makes it and the executor cuts it: a shard's
 *     chunk ceil(dim / G) rows, a ragged param's extents tiling the
 *     flattened param in rank order with chunk their largest, an owned or
 *     replicated param's chunk its size, a flat bucket's one chunk
 *     ceil(end / G) aligned to FP_PARAM_ALIGN bytes.
 *  3. dtypes and bytes: casts between float types, reductions only of
 *     reducible dtypes (MXFP8 is never reduced), in-place forms as NCCL
 *     allows them, otherwise src and dst never overlap.
 *  4. every wait is preceded by a record of its event.
 *  5. every communicator sees the same collective sequence on every rank.
 *  6. memory safety: persistent buffers overlap nothing; transient buffers
 *     that share arena bytes are ordered by happens-before.
 *  7. every placed buffer lies inside its arena.
 *  8. no races: an op that reads a buffer happens after every earlier write
 *     of it, and an op that writes one happens after every earlier read and
 *     write, on any stream - of the buffer itself and of every buffer that
 *     shares its arena bytes - within a step and from one step into the next
 *     (ir/access.c says what each op reads and writes).
 * Each problem is reported once through the caller's report function; the
 * verifier stops after MAX_ERRORS of them. */
#include "irpriv.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ERRORS 100
#define MAX_WORLD (1 << 24)  /* rule 5 walks the world's ranks */

enum { OPND_DST = 1, OPND_SRC = 2, OPND_AUX = 4 };

/* per-table facts, computed once (rule 2's "cache per table") */
typedef struct tabinfo {
  bool ok;        /* entries non-negative, sums fit */
  int64_t maxend; /* max over j of off[j] + cnt[j] (elements) */
} tabinfo;

/* one live range of a transient buffer and what its uses saw, for rule 6:
 * declared (prog.lives) or, for a buffer without any, first..last use */
typedef struct range {
  int32_t buf, first, last;   /* program-order op indices, inclusive */
  int32_t live;               /* index in prog.lives, -1 when derived */
  /* clocks in 32 bits: a stream ticks once per op in each of the two steps,
   * at most 2 * INT32_MAX < UINT32_MAX (the "none" of the minima); 88 bytes
   * a range, not 128 (600,000 of them at 100,000 units) */
  uint32_t last1[FP_NSTREAMS]; /* step 1: max own-stream clock of a use on stream s (0 none) */
  int32_t last1op[FP_NSTREAMS];
  uint32_t min1[FP_NSTREAMS];  /* step 1: componentwise min clock over its uses */
  int32_t min1op[FP_NSTREAMS];
  uint32_t min2[FP_NSTREAMS];  /* the same in step 2 (the next replay) */
  int32_t min2op[FP_NSTREAMS];
} range;

/* an int32 -> int32 open-addressing map (event ids, group ids, predicates) */
typedef struct imap {
  int64_t *keys; /* INT64_MIN: empty */
  int32_t *vals;
  int64_t cap, count;
} imap;

/* a report kept for later (vctx.held, vctx.pend): made or dropped then */
typedef struct vheld {
  fp_vloc what;
  int64_t i;
  char *msg;
} vheld;

static void vhold(vheld **q, int32_t *n, int32_t *cap, fp_vloc what, int64_t i, const char *msg) {
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 16;
    *q = realloc(*q, (size_t)*cap * sizeof **q);
    FP_ASSERT(*q);
  }
  size_t len = strlen(msg) + 1;
  char *m = malloc(len);
  FP_ASSERT(m);
  memcpy(m, msg, len);
  (*q)[(*n)++] = (vheld){what, i, m};
}

/* a flat bucket's flat space, per main buffer: the end of its last flat
 * param (elements), and the first flat param's comm and element size (every
 * other must share them) - one pass over the params, not one per param */
typedef struct flatinfo {
  int64_t end;
  int32_t first;   /* the first flat param of the buffer; -1: none */
  int32_t mixed;   /* a flat param whose comm or dtype differs from first's; -1: none */
} flatinfo;

typedef struct vctx {
  const fp_prog *p;
  flatinfo *flat; /* per buffer (check_params): NULL when the buffer table is bad */
  fp_vreport report;
  void *rctx;
  int nerr;
  tabinfo *tabs;
  bool *badop;   /* op failed its structural checks: skip later rules */
  bool tied;     /* some param has users (tied weights): check_tied_reads has work */
  int32_t *tiedp, ntied; /* those params */
  range *rg;      /* live ranges of transient buffers, grouped by buffer, by first op */
  int32_t nrg;
  int32_t *rstart; /* per buffer: rg[rstart[b] .. rstart[b+1]) */
  /* rule 8: per arena byte and stream, the clock of the last write and read
   * (a segment tree: O(log buffers) an access); per buffer that shares
   * bytes with another its own, by its row in the tree (one that shares none
   * has them in the alias clocks' row of its own), to name the buffer in a
   * report; per stream the op that ticked each clock value */
  fp_alias_clocks al;
  bool have_al;
  struct bufclk {
    int64_t w[FP_NSTREAMS], r[FP_NSTREAMS];
  } *clk;
  int32_t *clkop[FP_NSTREAMS];
  int64_t step1end[FP_NSTREAMS]; /* each stream's own clock at the end of step 1 */
  fp_access *acc; /* scratch: one op's accesses */
  bool unordered; /* FP_VERIFY_UNORDERED: skip what the sync pass establishes */
  /* what the later rules size their state by, gathered on the walk of
   * rules 1-3 over the sound ops (each walk of 2.2M ops reads 334 MB):
   * per buffer its first and last use, the most uses of an op, ops per
   * stream, the largest event id and the ops that name an event */
  int32_t *ufirst, *ulast;
  int32_t maxuses, maxev, nevops;
  int64_t per[FP_NSTREAMS];
  bool groups_bad; /* the walk saw what check_groups reports */
  /* while the walk of rules 1-3 also checks op.seg (check_segments' last
   * part, whose reports come first), its own reports wait here: they are
   * made if every op is in its segment, else dropped and the walk redone
   * after check_segments has reported */
  bool hold;
  vheld *held;
  int32_t nheld, capheld;
  /* rule 8 is checked on the same walk as rules 4 and 6's uses (one walk
   * of the ops, not two) but reported only when rules 4 and 6 find nothing,
   * as if it ran after them: its reports wait here until then */
  bool defer;
  vheld *pend;
  int32_t npend, cappend;
} vctx;

static bool stop(vctx *v) { return v->nerr >= MAX_ERRORS; }
/* rule 8's stop: its deferred reports count as if they had been made */
static bool race_stop(vctx *v) { return v->defer ? v->npend >= MAX_ERRORS : stop(v); }

static void verr(vctx *v, fp_vloc what, int64_t i, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void verr(vctx *v, fp_vloc what, int64_t i, const char *fmt, ...) {
  if (stop(v)) return;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  v->nerr++;
  if (!v->hold) {
    v->report(v->rctx, v->p, what, i, msg);
    return;
  }
  vhold(&v->held, &v->nheld, &v->capheld, what, i, msg);
}

/* ---- small helpers ------------------------------------------------------------- */
static void imap_init(imap *m, int64_t n) {
  m->cap = 16;
  while (m->cap < 2 * n + 2) m->cap *= 2;
  m->count = 0;
  m->keys = malloc((size_t)m->cap * sizeof *m->keys);
  m->vals = malloc((size_t)m->cap * sizeof *m->vals);
  FP_ASSERT(m->keys && m->vals);
  for (int64_t i = 0; i < m->cap; i++) m->keys[i] = INT64_MIN;
}

static void imap_free(imap *m) {
  free(m->keys);
  free(m->vals);
}

static int64_t imap_slot(const imap *m, int64_t k) {
  uint64_t h = (uint64_t)k * 0x9e3779b97f4a7c15ull;
  int64_t i = (int64_t)(h >> 17 & (uint64_t)(m->cap - 1));
  while (m->keys[i] != INT64_MIN && m->keys[i] != k) i = (i + 1) & (m->cap - 1);
  return i;
}

/* the value of k, inserting v when absent; *fresh says which */
static int32_t imap_get_or_put(imap *m, int64_t k, int32_t v, bool *fresh) {
  int64_t i = imap_slot(m, k);
  if (m->keys[i] != INT64_MIN) {
    *fresh = false;
    return m->vals[i];
  }
  *fresh = true;
  if ((m->count + 1) * 2 > m->cap) { /* grow */
    imap old = *m;
    imap_init(m, old.count + 1);
    for (int64_t j = 0; j < old.cap; j++)
      if (old.keys[j] != INT64_MIN) {
        int64_t s = imap_slot(m, old.keys[j]);
        m->keys[s] = old.keys[j];
        m->vals[s] = old.vals[j];
        m->count++;
      }
    imap_free(&old);
    i = imap_slot(m, k);
  }
  m->keys[i] = k;
  m->vals[i] = v;
  m->count++;
  return v;
}

static bool dtype_ok(int t) { return t >= 0 && t < FP_NDTYPES; }
static bool is_float(fp_dtype t) { return fpi_dtype_is_user_float(t); }
static int64_t dsize(fp_dtype t) { return fpi_dtype_size(t); }

static const char *bufname(const fp_prog *p, int32_t b) {
  return b >= 0 && b < p->nbufs && p->bufs[b].name ? p->bufs[b].name : "?";
}

/* names unique within one table (fpi_name_firsts: no map probed at random) */
typedef struct nametab {
  const fp_prog *p;
  const char *(*name)(const fp_prog *, int32_t);
} nametab;
static const char *nametab_at(const void *ctx, int32_t i) {
  const nametab *t = ctx;
  return t->name(t->p, i);
}
static void check_unique(vctx *v, fp_vloc what, const char *kind, int32_t n, const char *(*name)(const fp_prog *, int32_t)) {
  nametab t = {v->p, name};
  int32_t *first = malloc(((size_t)n + 1) * sizeof *first);
  FP_ASSERT(first);
  fpi_name_firsts(nametab_at, &t, n, first);
  for (int32_t i = 0; i < n && !stop(v); i++) {
    const char *s = name(v->p, i);
    if (!s) verr(v, what, i, "%s has no name", kind);
    else if (first[i] >= 0) verr(v, what, i, "%s name '%s' is also the name of %s %" PRId32, kind, s, kind, first[i]);
  }
  free(first);
}
static const char *comm_nm(const fp_prog *p, int32_t i) { return p->comms[i].name; }
static const char *tab_nm(const fp_prog *p, int32_t i) { return p->tabs[i].name; }
static const char *buf_nm(const fp_prog *p, int32_t i) { return p->bufs[i].name; }
static const char *mod_nm(const fp_prog *p, int32_t i) { return p->mods[i].name; }
static const char *bucket_nm(const fp_prog *p, int32_t i) { return p->buckets[i]; }
static const char *param_nm(const fp_prog *p, int32_t i) { return p->params[i].name; }

/* ---- rule 1, 7: header and tables ----------------------------------------------------- */
static bool check_header(vctx *v) {
  const fp_prog *p = v->p;
  if (p->world_size < 1 || p->world_size > MAX_WORLD)
    verr(v, FP_VL_PROG, 0, "world_size %" PRId64 " is out of range [1, %d]", p->world_size, MAX_WORLD);
  if (p->ranks_per_node < 1) verr(v, FP_VL_PROG, 0, "ranks_per_node %" PRId64 " must be >= 1", p->ranks_per_node);
  if (p->tp < 1 || (p->world_size >= 1 && p->world_size % p->tp != 0))
    verr(v, FP_VL_PROG, 0, "tp %" PRId64 " does not divide world_size %" PRId64, p->tp, p->world_size);
  if (p->grad_accumulation < 1 || p->grad_accumulation > INT32_MAX)
    verr(v, FP_VL_PROG, 0, "grad_accumulation %" PRId64 " must be in [1, %d]", p->grad_accumulation, INT32_MAX);
  if (p->arena_bytes < 0) verr(v, FP_VL_PROG, 0, "arena_bytes %" PRId64 " is negative", p->arena_bytes);
  if (p->host_bytes < 0) verr(v, FP_VL_PROG, 0, "host_bytes %" PRId64 " is negative", p->host_bytes);
  if (p->nevents < 0) verr(v, FP_VL_PROG, 0, "events %" PRId32 " is negative", p->nevents);
  if ((unsigned)p->optim >= FP_NOPTIMS)
    verr(v, FP_VL_PROG, 0, "unknown optimizer %d", (int)p->optim);
  else if (p->optim != FP_OPTIM_NONE && !dtype_ok(p->optim_dtype))
    verr(v, FP_VL_PROG, 0, "unknown optimizer state dtype %d", (int)p->optim_dtype);
  for (int k = 0; p->hw.name && k < FP_HW_NFIELDS; k++) { /* the modeled machine */
    double x = fp_hw_fields[k].integer ? (double)fpi_hw_geti(&p->hw, k) : fpi_hw_getd(&p->hw, k);
    if (fp_hw_fields[k].optional ? !(isfinite(x) && x >= 0) : !(isfinite(x) && x > 0))
      verr(v, FP_VL_PROG, 0, "hardware %s must be a %s number", fp_hw_fields[k].key,
           fp_hw_fields[k].optional ? "non-negative" : "positive");
  }
  if (p->ncomms < 0 || p->ntabs < 0 || p->nbufs < 0 || p->nmods < 0 || p->nparams < 0 || p->nbuckets < 0 ||
      p->nsegs < 0 || p->nops < 0) {
    verr(v, FP_VL_PROG, 0, "a table has a negative length");
    return false;
  }
  return v->nerr == 0;
}

static void check_comms(vctx *v) {
  const fp_prog *p = v->p;
  for (int32_t i = 0; i < p->ncomms && !stop(v); i++) {
    const fp_ir_comm *c = &p->comms[i];
    int64_t span;
    if (c->size < 1 || c->stride < 1) {
      verr(v, FP_VL_COMM, i, "size %" PRId64 " and stride %" PRId64 " must be >= 1", c->size, c->stride);
    } else if (!fpi_mul64(c->size, c->stride, &span) || p->world_size % span != 0) {
      verr(v, FP_VL_COMM, i, "size %" PRId64 " x stride %" PRId64 " does not divide world_size %" PRId64, c->size,
           c->stride, p->world_size);
    } else if (p->tp > 1 && c->stride % p->tp != 0) {
      /* the plan's collectives stay inside one tp index: the model's TP
       * collectives run over the other ranks of a tp group */
      verr(v, FP_VL_COMM, i, "stride %" PRId64 " is not a multiple of tp %" PRId64 " (a communicator would join ranks "
           "of different tp indices)", c->stride, p->tp);
    }
  }
  check_unique(v, FP_VL_COMM, "communicator", p->ncomms, comm_nm);
}

static void check_tables(vctx *v) {
  const fp_prog *p = v->p;
  for (int32_t i = 0; i < p->ntabs && !stop(v); i++) {
    const fp_ir_table *t = &p->tabs[i];
    tabinfo *ti = &v->tabs[i];
    ti->ok = t->n >= 0 && (t->n == 0 || (t->off && t->cnt));
    if (!ti->ok) {
      verr(v, FP_VL_TAB, i, "has n=%" PRId64 " but no entries", t->n);
      continue;
    }
    for (int64_t j = 0; j < t->n; j++) {
      int64_t e;
      if (t->off[j] < 0 || t->cnt[j] < 0 || !fpi_add64(t->off[j], t->cnt[j], &e)) {
        verr(v, FP_VL_TAB, i, "entry %" PRId64 ": offset %" PRId64 " and count %" PRId64 " must be >= 0", j,
             t->off[j], t->cnt[j]);
        ti->ok = false;
        break;
      }
      if (e > ti->maxend) ti->maxend = e;
    }
  }
  check_unique(v, FP_VL_TAB, "table", p->ntabs, tab_nm);
}

static void check_bufs(vctx *v) {
  const fp_prog *p = v->p;
  for (int32_t i = 0; i < p->nbufs && !stop(v); i++) {
    const fp_ir_buf *b = &p->bufs[i];
    if ((unsigned)b->kind > FP_BUF_TRANSIENT) verr(v, FP_VL_BUF, i, "unknown lifetime kind %d", (int)b->kind);
    if ((unsigned)b->cat >= FP_NBUFCATS) verr(v, FP_VL_BUF, i, "unknown category %d", (int)b->cat);
    if (b->bucket < -1 || b->bucket >= p->nbuckets)
      verr(v, FP_VL_BUF, i, "bucket %" PRId32 " is out of range (%" PRId32 " buckets)", b->bucket, p->nbuckets);
    if (b->bytes < 0) verr(v, FP_VL_BUF, i, "bytes %" PRId64 " is negative", b->bytes);
    if (b->offset < -1) verr(v, FP_VL_BUF, i, "offset %" PRId64 " is negative (-1: not placed)", b->offset);
    int64_t end, cap = b->host ? p->host_bytes : p->arena_bytes;
    if (b->offset >= 0 && b->bytes >= 0 && (!fpi_add64(b->offset, b->bytes, &end) || end > cap)) /* rule 7 */
      verr(v, FP_VL_BUF, i, "[%" PRId64 ", +%" PRId64 ") lies outside the %s arena of %" PRId64 " bytes", b->offset,
           b->bytes, b->host ? "host" : "device", cap);
  }
  check_unique(v, FP_VL_BUF, "buffer", p->nbufs, buf_nm);
  check_unique(v, FP_VL_BUCKET, "bucket", p->nbuckets, bucket_nm);
}

static void check_mods(vctx *v) {
  const fp_prog *p = v->p;
  for (int32_t i = 0; i < p->nmods && !stop(v); i++) {
    const fp_ir_module *m = &p->mods[i];
    if (!isfinite(m->flops_fwd) || !isfinite(m->flops_bwd) || m->flops_fwd < 0 || m->flops_bwd < 0)
      verr(v, FP_VL_MODULE, i, "flops must be finite and >= 0");
    if (m->activation_bytes < 0) verr(v, FP_VL_MODULE, i, "activation bytes %" PRId64 " is negative", m->activation_bytes);
    if (m->saved_bytes < 0 || (!m->recompute && m->saved_bytes))
      verr(v, FP_VL_MODULE, i, "saved bytes %" PRId64 " must be >= 0, and 0 without recompute", m->saved_bytes);
  }
  check_unique(v, FP_VL_MODULE, "module", p->nmods, mod_nm);
}

/* tied weights: the forward and backward compute ops of a module that reads
 * another module's param (its `users`) list the param's unsharded weight
 * (and, in backward, its ugrad) in their uses, so the live-range and
 * happens-before rules cover the tied read as any other */
static bool op_lists(const fp_prog *p, const fp_op *op, int32_t buf) {
  for (int32_t k = 0; k < op->nuses; k++)
    if (p->uses[op->uses + k] == buf) return true;
  return false;
}

static void check_tied_reads(vctx *v, int32_t i) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  if (!v->tied || op->module < 0 || (op->pass != FP_PASS_FWD && op->pass != FP_PASS_BWD)) return;
  for (int32_t t = 0; t < v->ntied; t++) {
    const fp_ir_param *q = &p->params[v->tiedp[t]];
    bool reads = false;
    for (int32_t k = 0; k < q->nusers && q->users; k++) reads |= q->users[k] == op->module;
    if (!reads) continue;
    if (q->weight.buf >= 0 && q->weight.buf < p->nbufs && !op_lists(p, op, q->weight.buf))
      verr(v, FP_VL_OP, i, "compute of module %" PRId32 " reads tied param '%s' but does not use its weight buffer '%s'",
           op->module, q->name, p->bufs[q->weight.buf].name);
    if (op->pass == FP_PASS_BWD && q->requires_grad && q->ugrad.buf >= 0 && q->ugrad.buf < p->nbufs &&
        !op_lists(p, op, q->ugrad.buf))
      verr(v, FP_VL_OP, i, "backward of module %" PRId32 " reads tied param '%s' but does not use its ugrad buffer '%s'",
           op->module, q->name, p->bufs[q->ugrad.buf].name);
  }
}

/* a param's view: in range and, when `elems` > 0, room for that many */
static void check_view(vctx *v, int32_t i, const char *role, const fp_view *w, int64_t elems, fp_dtype dt) {
  const fp_prog *p = v->p;
  if (w->buf == -1) return;
  if (w->buf < 0 || w->buf >= p->nbufs) {
    verr(v, FP_VL_PARAM, i, "%s view: buffer %" PRId32 " is out of range (%" PRId32 " buffers)", role, w->buf, p->nbufs);
    return;
  }
  int64_t bytes, end, cap = p->bufs[w->buf].bytes;
  if (w->off < 0 || !fpi_mul64(elems, dsize(dt), &bytes) || !fpi_add64(w->off, bytes, &end) || end > cap)
    verr(v, FP_VL_PARAM, i, "%s view [%" PRId64 ", +%" PRId64 " %s elements) lies outside buffer '%s' (%" PRId64 " bytes)",
         role, w->off, elems, fpi_dtype_name(dt), bufname(p, w->buf), cap);
  else if (dsize(dt) > 0 && w->off % dsize(dt))
    verr(v, FP_VL_PARAM, i, "%s view offset %" PRId64 " in buffer '%s' is not a multiple of the %s element size (%d bytes)",
         role, w->off, bufname(p, w->buf), fpi_dtype_name(dt), (int)dsize(dt));
}

/* the optimizer state of trainable param i: present exactly when the program
 * plans state and the param has a main grad, in a persistent optimizer_state
 * buffer of `states` equal planes, each slot (elems state-dtype elements)
 * inside its plane */
static void check_opt_view(vctx *v, int32_t i, const fp_ir_param *q, int64_t elems) {
  const fp_prog *p = v->p;
  int states = fpi_optim_states(p->optim);
  bool want = states > 0 && q->requires_grad && q->grad.buf >= 0;
  if (q->opt.buf < 0) {
    if (want)
      verr(v, FP_VL_PARAM, i, "the program plans %s state but trainable param '%s' has no opt view",
           fpi_optim_name(p->optim), q->name);
    return;
  }
  if (!want) {
    verr(v, FP_VL_PARAM, i, "opt view on %s", states == 0 ? "a program that plans no optimizer state"
                                            : "a param without a main grad (frozen): it has no optimizer state");
    return;
  }
  if (q->opt.buf >= p->nbufs) {
    verr(v, FP_VL_PARAM, i, "opt view: buffer %" PRId32 " is out of range (%" PRId32 " buffers)", q->opt.buf, p->nbufs);
    return;
  }
  const fp_ir_buf *B = &p->bufs[q->opt.buf];
  if (B->cat != FP_CAT_OPT_STATE || B->kind != FP_BUF_PERSISTENT) {
    verr(v, FP_VL_PARAM, i, "opt view: buffer '%s' is not a persistent optimizer_state buffer", B->name);
    return;
  }
  int64_t plane = B->bytes / states, bytes, end, oz = dsize(p->optim_dtype);
  if (oz > 0 && (q->opt.off % oz || plane % oz)) {
    verr(v, FP_VL_PARAM, i, "opt view offset %" PRId64 " or state plane %" PRId64 " bytes in '%s' is not a multiple of the "
         "%s element size (%d bytes)", q->opt.off, plane, B->name, fpi_dtype_name(p->optim_dtype), (int)oz);
    return;
  }
  if (B->bytes % states)
    verr(v, FP_VL_PARAM, i, "opt view: buffer '%s' (%" PRId64 " bytes) is not %d equal state planes", B->name,
         B->bytes, states);
  else if (q->opt.off < 0 || !fpi_mul64(elems, dsize(p->optim_dtype), &bytes) || !fpi_add64(q->opt.off, bytes, &end) ||
           end > plane)
    verr(v, FP_VL_PARAM, i,
         "opt view [%" PRId64 ", +%" PRId64 " %s elements) lies outside the first state plane of '%s' (%" PRId64
         " bytes)",
         q->opt.off, elems, fpi_dtype_name(p->optim_dtype), B->name, plane);
}

/* MXFP8 weights: a frozen replicated param kept as e4m3 elements (main and
 * compute weight one copy, main_dtype = param_dtype = e4m3) with its e8m0
 * scales in a persistent main-weight buffer, clear of its elements; no other
 * param has a scales view, and e4m3 / e8m0 are no other param's dtypes */
static void check_mxfp8(vctx *v, int32_t i, const fp_ir_param *q, int64_t numel) {
  const fp_prog *p = v->p;
  bool mx = q->main_dtype == FP_E4M3 || q->param_dtype == FP_E4M3;
  if (!mx) {
    if (q->scales.buf >= 0) verr(v, FP_VL_PARAM, i, "scales view on a param that is not MXFP8 (main dtype %s)",
                                 fpi_dtype_name(q->main_dtype));
    else if (q->main_dtype == FP_E8M0 || q->main_dtype == FP_U8 || q->param_dtype == FP_E8M0 ||
             q->param_dtype == FP_U8 || q->grad_dtype == FP_E4M3 || q->grad_dtype == FP_E8M0 || q->grad_dtype == FP_U8)
      verr(v, FP_VL_PARAM, i, "dtypes %s/%s/%s: weights are fp32, bf16, fp16 or MXFP8 (e4m3 with scales)",
           fpi_dtype_name(q->main_dtype), fpi_dtype_name(q->param_dtype), fpi_dtype_name(q->grad_dtype));
    return;
  }
  if (q->main_dtype != FP_E4M3 || q->param_dtype != FP_E4M3 || q->requires_grad || q->placement != 3 /* replicate */ ||
      q->main.buf != q->weight.buf || q->main.off != q->weight.off) {
    verr(v, FP_VL_PARAM, i, "an MXFP8 param must be frozen and replicated, its main and compute weight one "
                            "e4m3 copy (main %s, param %s, %s, %s)",
         fpi_dtype_name(q->main_dtype), fpi_dtype_name(q->param_dtype), q->requires_grad ? "trainable" : "frozen",
         fpi_ir_placement_name(q->placement));
    return;
  }
  int64_t nb = fpi_mx_blocks(numel), end;
  if (q->scales.buf < 0 || q->scales.buf >= p->nbufs) {
    verr(v, FP_VL_PARAM, i, "MXFP8 param '%s' has no scales view in range", q->name);
    return;
  }
  const fp_ir_buf *B = &p->bufs[q->scales.buf];
  if (B->cat != FP_CAT_MAIN_WEIGHT || B->kind != FP_BUF_PERSISTENT)
    verr(v, FP_VL_PARAM, i, "scales view: buffer '%s' is not a persistent main_weight buffer", B->name);
  else if (q->scales.off < 0 || !fpi_add64(q->scales.off, nb, &end) || end > B->bytes)
    verr(v, FP_VL_PARAM, i, "scales view [%" PRId64 ", +%" PRId64 " e8m0) lies outside buffer '%s' (%" PRId64 " bytes)",
         q->scales.off, nb, B->name, B->bytes);
  else if (q->scales.buf == q->main.buf && q->scales.off < q->main.off + numel && q->main.off < end)
    verr(v, FP_VL_PARAM, i, "scales view [%" PRId64 ", %" PRId64 ") overlaps the param's e4m3 elements [%" PRId64
                            ", %" PRId64 ")", q->scales.off, end, q->main.off, q->main.off + numel);
}

/* ragged_shard: the table's extents tile the flattened param in rank order,
 * the chunk their largest */
static void check_ragged(vctx *v, int32_t i, const fp_ir_param *q, int64_t numel, int64_t G) {
  const fp_prog *p = v->p;
  if (q->tab < 0 || q->tab >= p->ntabs || !v->tabs[q->tab].ok) {
    verr(v, FP_VL_PARAM, i, "ragged_shard param '%s' has no valid extent table", q->name);
    return;
  }
  const fp_ir_table *t = &p->tabs[q->tab];
  if (t->n != G) {
    verr(v, FP_VL_PARAM, i, "extent table '%s' has %" PRId64 " entries, comm '%s' %" PRId64 " ranks", t->name, t->n,
         p->comms[q->comm].name, G);
    return;
  }
  int64_t at = 0, most = 0;
  for (int64_t g = 0; g < G; g++) {
    if (t->off[g] != at) {
      verr(v, FP_VL_PARAM, i, "extent table '%s' entry %" PRId64 " starts at element %" PRId64 ", needs %" PRId64
           " (the ragged extents tile the flattened param in rank order)", t->name, g, t->off[g], at);
      return;
    }
    at = t->off[g] + t->cnt[g]; /* the table's check: no overflow */
    if (t->cnt[g] > most) most = t->cnt[g];
  }
  if (at != numel)
    verr(v, FP_VL_PARAM, i, "extent table '%s' covers %" PRId64 " elements, the param has %" PRId64, t->name, at,
         numel);
  else if (q->chunk != most)
    verr(v, FP_VL_PARAM, i, "ragged_shard chunk %" PRId64 " is not the largest extent of table '%s' (%" PRId64 ")",
         q->chunk, t->name, most);
}

/* cyclic_shard: the table is {g * b, blocks of rank g * b} for a block b
 * dividing the param, over at least 2 ranks, the slot the largest count */
static void check_cyclic(vctx *v, int32_t i, const fp_ir_param *q, int64_t numel, int64_t G) {
  const fp_prog *p = v->p;
  if (q->tab < 0 || q->tab >= p->ntabs || !v->tabs[q->tab].ok) {
    verr(v, FP_VL_PARAM, i, "cyclic_shard param '%s' has no valid extent table", q->name);
    return;
  }
  const fp_ir_table *t = &p->tabs[q->tab];
  int64_t b = fpi_cyclic_block(t), most = 0;
  if (t->n != G || G < 2 || b < 1 || b > numel) {
    verr(v, FP_VL_PARAM, i, "extent table '%s' of cyclic_shard param '%s' needs one entry per rank of comm '%s' (%" PRId64
         ", at least 2) and a block (entry 1's offset, %" PRId64 ") of 1 to its %" PRId64 " elements", t->name, q->name,
         p->comms[q->comm].name, G, b, numel);
    return;
  }
  int64_t tail;
  fpi_cyclic_runs(numel, b, &tail);
  for (int64_t g = 0; g < G; g++) {
    int64_t want = fpi_cyclic_elems(numel, b, G, g);
    if (t->off[g] != g * b || t->cnt[g] != want) {
      verr(v, FP_VL_PARAM, i, "extent table '%s' entry %" PRId64 " is [%" PRId64 ", +%" PRId64 "), the blocks of %" PRId64
           " elements dealt round-robin (the last %" PRId64 ") give [%" PRId64 ", +%" PRId64 ")", t->name, g, t->off[g],
           t->cnt[g], b, tail, g * b, want);
      return;
    }
    if (want > most) most = want;
  }
  if (q->chunk != most)
    verr(v, FP_VL_PARAM, i, "cyclic_shard chunk %" PRId64 " is not the largest extent of table '%s' (%" PRId64 ")",
         q->chunk, t->name, most);
}

/* the layout the spec's placement gives param i (planner/placements/, the
 * flat space of planner/layout.c) and the executor cuts (executor/exec.c
 * shard_of): recomputed from the shape and the group size and compared, so
 * that a plan the executor would refuse at setup, or one whose pieces miss
 * or repeat elements, fails here first */
static void check_layout(vctx *v, int32_t i, const fp_ir_param *q, int64_t numel) {
  const fp_prog *p = v->p;
  const char *pn = fpi_ir_placement_name(q->placement);
  if (q->placement == FP_PL_REPLICATE) {
    if (q->chunk != numel && q->chunk != 0)
      verr(v, FP_VL_PARAM, i, "replicate chunk %" PRId64 " is not the param's %" PRId64 " elements", q->chunk, numel);
    return;
  }
  if (q->comm < 0 || q->comm >= p->ncomms) {
    verr(v, FP_VL_PARAM, i, "%s param '%s' has no communicator to shard over", pn, q->name);
    return;
  }
  int64_t G = p->comms[q->comm].size;
  if (G < 1) return; /* the communicator's own check reports it */
  switch (q->placement) {
    case FP_PL_SHARD: {
      int d = q->dim, nd = q->ndim > 0 ? q->ndim : 1;
      int64_t shape_d = q->ndim > 0 ? q->shape[d] : 1, oi = 1, want;
      for (int k = 0; k < nd && q->ndim > 0; k++)
        if (k != d) oi *= q->shape[k]; /* a factor of numel: fits */
      if (!fpi_mul64(fpi_ceil_div(shape_d, G), oi, &want)) return;
      if (q->chunk != want)
        verr(v, FP_VL_PARAM, i, "shard chunk %" PRId64 " is not the layout's ceil(%" PRId64 " / %" PRId64 ") x %" PRId64
             " = %" PRId64 " elements (dim %d over comm '%s')", q->chunk, shape_d, G, oi, want, d, p->comms[q->comm].name);
      return;
    }
    case FP_PL_RAGGED: check_ragged(v, i, q, numel, G); return;
    case FP_PL_CYCLIC: check_cyclic(v, i, q, numel, G); return;
    case FP_PL_OWNED:
      if (q->owner < 0 || q->owner >= G)
        verr(v, FP_VL_PARAM, i, "owned param '%s': owner %" PRId64 " is not a rank of comm '%s' (size %" PRId64 ")",
             q->name, q->owner, p->comms[q->comm].name, G);
      else if (q->chunk != numel)
        verr(v, FP_VL_PARAM, i, "owned chunk %" PRId64 " is not the param's %" PRId64 " elements", q->chunk, numel);
      return;
    case FP_PL_FLAT: {
      /* the bucket's flat space: every flat param of its main buffer, end to end (flat_spaces) */
      int64_t es = dsize(q->param_dtype), end, want, ae = FP_PARAM_ALIGN / (es > 0 ? es : 1);
      if (es < 1 || q->weight.buf < 0 || !v->flat || q->main.buf < 0 || q->main.buf >= p->nbufs) return;
      const flatinfo *fi = &v->flat[q->main.buf];
      if (fi->mixed >= 0) {
        const fp_ir_param *o = &p->params[fi->first], *x = &p->params[fi->mixed];
        verr(v, FP_VL_PARAM, i, "flat_shard params '%s' and '%s' share main buffer '%s' but not their comm and dtype",
             o->name, x->name, bufname(p, q->main.buf));
        return;
      }
      if ((end = fi->end) < 0) return; /* a flat param's own check reports it */
      if (!fpi_align64(fpi_ceil_div(end, G), ae, &want)) return;
      if (q->chunk != want)
        verr(v, FP_VL_PARAM, i, "flat_shard chunk %" PRId64 " is not the layout's ceil(%" PRId64 " / %" PRId64
             ") elements aligned to %" PRId64 " = %" PRId64 " (the flat space of main buffer '%s')",
             q->chunk, end, G, ae, want, bufname(p, q->main.buf));
      return;
    }
    default: return;
  }
}

/* per main buffer, the flat space its flat_shard params tile (one pass) */
static void flat_spaces(vctx *v) {
  const fp_prog *p = v->p;
  v->flat = p->nbufs > 0 ? malloc((size_t)p->nbufs * sizeof *v->flat) : NULL;
  if (!v->flat) return;
  for (int32_t b = 0; b < p->nbufs; b++) v->flat[b] = (flatinfo){0, -1, -1};
  for (int32_t j = 0; j < p->nparams; j++) {
    const fp_ir_param *o = &p->params[j];
    if (o->placement != FP_PL_FLAT || o->main.buf < 0 || o->main.buf >= p->nbufs || o->weight.buf < 0 || o->ndim < 0 ||
        o->ndim > 8 || !dtype_ok(o->param_dtype))
      continue;
    flatinfo *fi = &v->flat[o->main.buf];
    int64_t es = dsize(o->param_dtype), n = 1, e;
    if (fi->first < 0) {
      fi->first = j;
    } else {
      const fp_ir_param *f = &p->params[fi->first];
      if ((o->comm != f->comm || dsize(f->param_dtype) != es) && fi->mixed < 0) fi->mixed = j;
    }
    if (fi->end < 0) continue;
    bool ok = es > 0;
    for (int k = 0; ok && k < o->ndim; k++)
      if (o->shape[k] < 1 || !fpi_mul64(n, o->shape[k], &n)) ok = false;
    if (!ok || !fpi_add64(o->weight.off / es, n, &e)) {
      fi->end = -1; /* its own check reports it */
      continue;
    }
    if (e > fi->end) fi->end = e;
  }
}

/* check_params per param in its steps: its references in range
 * (param_refs, with its tied users: param_users), its dtypes and shape
 * (param_shape: false stops the param's checks there), then its dims and
 * views (param_views) */
static void param_users(vctx *v, int32_t i) {
  const fp_prog *p = v->p;
  const fp_ir_param *q = &p->params[i];
  for (int32_t k = 0; k < q->nusers; k++) { /* tied weights: other modules, each once */
    int32_t u = q->users ? q->users[k] : -1;
    if (u < 0 || u >= p->nmods)
      verr(v, FP_VL_PARAM, i, "user %" PRId32 " is out of range (%" PRId32 " modules)", u, p->nmods);
    else if (u == q->module)
      verr(v, FP_VL_PARAM, i, "user '%s' is the param's own module", p->mods[u].name);
    for (int32_t j = 0; j < k; j++)
      if (q->users[j] == u) verr(v, FP_VL_PARAM, i, "user %" PRId32 " appears twice", u);
  }
}

static void param_refs(vctx *v, int32_t i) {
  const fp_prog *p = v->p;
  const fp_ir_param *q = &p->params[i];
  if (q->module < 0 || q->module >= p->nmods)
    verr(v, FP_VL_PARAM, i, "module %" PRId32 " is out of range (%" PRId32 " modules)", q->module, p->nmods);
  if (q->bucket < -1 || q->bucket >= p->nbuckets)
    verr(v, FP_VL_PARAM, i, "bucket %" PRId32 " is out of range (%" PRId32 " buckets)", q->bucket, p->nbuckets);
  if (q->comm < -1 || q->comm >= p->ncomms)
    verr(v, FP_VL_PARAM, i, "comm %" PRId32 " is out of range (%" PRId32 " communicators)", q->comm, p->ncomms);
  if (q->tab < -1 || q->tab >= p->ntabs)
    verr(v, FP_VL_PARAM, i, "table %" PRId32 " is out of range (%" PRId32 " tables)", q->tab, p->ntabs);
  if (q->placement < 0 || q->placement >= FP_IR_NPLACEMENTS) verr(v, FP_VL_PARAM, i, "unknown placement %d", q->placement);
  param_users(v, i);
  if (q->chunk < 0) verr(v, FP_VL_PARAM, i, "chunk %" PRId64 " is negative", q->chunk);
  if (q->owner < -1) verr(v, FP_VL_PARAM, i, "owner %" PRId64 " is out of range", q->owner);
  if (q->comm >= 0 && q->comm < p->ncomms && q->owner >= p->comms[q->comm].size)
    verr(v, FP_VL_PARAM, i, "owner %" PRId64 " is not a rank of comm '%s' (size %" PRId64 ")", q->owner,
         p->comms[q->comm].name, p->comms[q->comm].size);
}

/* dtypes known, ndim in range, the shape's product in int64: *numel */
static bool param_shape(vctx *v, int32_t i, int64_t *numel) {
  const fp_ir_param *q = &v->p->params[i];
  if (!dtype_ok(q->main_dtype) || !dtype_ok(q->param_dtype) || !dtype_ok(q->grad_dtype)) {
    verr(v, FP_VL_PARAM, i, "unknown dtype");
    return false;
  }
  if (q->ndim < 0 || q->ndim > 8) {
    verr(v, FP_VL_PARAM, i, "ndim %d is out of range [0, 8]", q->ndim);
    return false;
  }
  *numel = 1;
  bool ok = true;
  for (int k = 0; k < q->ndim; k++)
    if (q->shape[k] < 1 || !fpi_mul64(*numel, q->shape[k], numel)) ok = false;
  if (!ok) verr(v, FP_VL_PARAM, i, "shape dimensions must be >= 1 and their product fit in int64");
  return ok;
}

/* the split dims, then every view of the param and its layout */
static void param_views(vctx *v, int32_t i, int64_t numel) {
  const fp_prog *p = v->p;
  const fp_ir_param *q = &p->params[i];
  if (q->dim < 0 || (q->ndim > 0 && q->dim >= q->ndim) || (q->ndim == 0 && q->dim != 0))
    verr(v, FP_VL_PARAM, i, "dim %" PRId32 " is not a dimension of a %d-d param", q->dim, q->ndim);
  if (q->tp_dim != -1 && (p->tp <= 1 || q->tp_dim < 0 || q->tp_dim >= q->ndim))
    verr(v, FP_VL_PARAM, i, "tp_dim %" PRId32 " is not a dimension of a %d-d param sharded over tp %" PRId64,
         q->tp_dim, q->ndim, p->tp);
  bool sharded = q->placement == 0 /* shard */ || q->placement == 1 /* ragged_shard */ ||
                 q->placement == 4 /* flat_shard: main / grad views start at the rank's chunk */ ||
                 q->placement == FP_PL_CYCLIC;
  if (q->placement == 4 && (q->weight.buf < 0 || q->weight.off % fpi_dtype_size(q->param_dtype) != 0))
    verr(v, FP_VL_PARAM, i, "a flat_shard param's weight view must place it in its bucket's flat buffer");
  /* a replicated param's main and grad hold all of it (owned: on its owner; a
   * plug-in's placement: what its layout says, checked by the plug-in) */
  bool whole = q->placement == FP_PL_REPLICATE || q->placement == FP_PL_OWNED;
  check_view(v, i, "main", &q->main, sharded ? q->chunk : whole ? numel : 0, q->main_dtype);
  check_view(v, i, "grad", &q->grad, sharded ? q->chunk : whole ? numel : 0, q->grad_dtype);
  check_view(v, i, "weight", &q->weight, numel, q->param_dtype);
  check_view(v, i, "ugrad", &q->ugrad, numel, q->param_dtype);
  check_opt_view(v, i, q, sharded ? q->chunk : 0);
  check_mxfp8(v, i, q, numel);
  if (q->placement >= 0 && q->placement < FP_IR_NPLACEMENTS && (q->main.buf >= 0 || q->placement != FP_PL_REPLICATE))
    check_layout(v, i, q, numel);
}

/* no two params share bytes: the views that hold a whole param on every
 * rank that has it (weight, ugrad, MXFP8 scales; main and grad of a
 * replicated or owned param) overlap only where one param keeps one copy
 * (a frozen param's main = weight), or where two owned params have
 * different owners (each rank holds its own at the same offsets). A
 * shard's main and grad views are left out: a flat bucket's params share
 * their rank's chunk by design, and another rank's piece may lie at the same
 * offsets. One sweep over the views sorted by buffer and offset, keeping
 * the view reaching furthest among those on every rank, and per owner */
typedef struct vspan {
  int64_t lo, hi, owner; /* owner: -1 on every rank */
  int32_t buf, param;
  int role;
} vspan;
static int vspan_cmp(const void *a, const void *b) {
  const vspan *x = a, *y = b;
  if (x->buf != y->buf) return x->buf < y->buf ? -1 : 1;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return x->param < y->param ? -1 : x->param > y->param;
}
static void view_clash(vctx *v, const vspan *a, const vspan *b) {
  static const char *const role[] = {"main", "grad", "weight", "ugrad", "scales"};
  const fp_prog *p = v->p;
  if (a->buf != b->buf || a->hi <= b->lo || (a->param == b->param && a->lo == b->lo && a->hi == b->hi)) return;
  verr(v, FP_VL_PARAM, b->param, "%s view [%" PRId64 ", %" PRId64 ") in buffer '%s' overlaps the %s view [%" PRId64
       ", %" PRId64 ") of param '%s' (params share bytes only where one keeps one copy, main = weight, or two owned "
       "params have different owners)", role[b->role], b->lo, b->hi, bufname(p, b->buf), role[a->role], a->lo, a->hi,
       p->params[a->param].name);
}
static void check_view_overlap(vctx *v) {
  const fp_prog *p = v->p;
  vspan *sp = malloc(((size_t)p->nparams * 5 + 1) * sizeof *sp);
  int64_t nown = p->world_size > 0 ? p->world_size : 1, *far_own = malloc((size_t)nown * sizeof *far_own);
  FP_ASSERT(sp && far_own);
  int64_t n = 0;
  for (int32_t i = 0; i < p->nparams; i++) {
    const fp_ir_param *q = &p->params[i];
    int64_t numel = 1; /* the params passed their own checks: shapes fit */
    for (int k = 0; k < q->ndim; k++) numel *= q->shape[k];
    bool whole = q->placement == FP_PL_REPLICATE || q->placement == FP_PL_OWNED;
    const fp_view *w[5] = {&q->main, &q->grad, &q->weight, &q->ugrad, &q->scales};
    const fp_dtype dt[5] = {q->main_dtype, q->grad_dtype, q->param_dtype, q->param_dtype, FP_E8M0};
    for (int r = 0; r < 5; r++) {
      if (w[r]->buf < 0 || w[r]->buf >= p->nbufs || (r < 2 && !whole)) continue;
      int64_t bytes = r == 4 ? fpi_mx_blocks(numel) : numel * dsize(dt[r]);
      int64_t owner = r < 2 && q->placement == FP_PL_OWNED && q->owner >= 0 && q->owner < nown ? q->owner : -1;
      if (bytes > 0) sp[n++] = (vspan){w[r]->off, w[r]->off + bytes, owner, w[r]->buf, i, r};
    }
  }
  qsort(sp, (size_t)n, sizeof *sp, vspan_cmp);
  /* in the current buffer, the view reaching furthest: on every rank (far),
   * among owned ones (far_owned), per owner (far_own) */
  int64_t far = -1, far_owned = -1;
  for (int64_t o = 0; o < nown; o++) far_own[o] = -1;
  for (int64_t k = 0; k < n && !stop(v); k++) {
    if (k > 0 && sp[k].buf != sp[k - 1].buf) { /* a new buffer */
      far = far_owned = -1;
      for (int64_t j = k - 1; j >= 0 && sp[j].buf == sp[k - 1].buf; j--)
        if (sp[j].owner >= 0) far_own[sp[j].owner] = -1;
    }
    const vspan *b = &sp[k];
    if (far >= 0) view_clash(v, &sp[far], b);
    if (b->owner < 0) { /* clashes with every owner's views too */
      if (far_owned >= 0) view_clash(v, &sp[far_owned], b);
      if (far < 0 || b->hi > sp[far].hi) far = k;
    } else {
      if (far_own[b->owner] >= 0) view_clash(v, &sp[far_own[b->owner]], b);
      if (far_own[b->owner] < 0 || b->hi > sp[far_own[b->owner]].hi) far_own[b->owner] = k;
      if (far_owned < 0 || b->hi > sp[far_owned].hi) far_owned = k;
    }
  }
  free(sp);
  free(far_own);
}

static void check_params(vctx *v) {
  const fp_prog *p = v->p;
  int n0 = v->nerr;
  flat_spaces(v);
  for (int32_t i = 0; i < p->nparams && !stop(v); i++) {
    param_refs(v, i);
    int64_t numel;
    if (param_shape(v, i, &numel)) param_views(v, i, numel);
  }
  if (v->nerr == n0) check_view_overlap(v); /* every view in range, every shape sound */
  check_unique(v, FP_VL_PARAM, "param", p->nparams, param_nm);
  free(v->flat);
  v->flat = NULL;
}

/* ---- rule 1: segments --------------------------------------------------------------- */
static bool check_segments(vctx *v) {
  const fp_prog *p = v->p;
  int n0 = v->nerr;
  if (p->nops > 0 && p->nsegs == 0) verr(v, FP_VL_PROG, 0, "%" PRId32 " ops but no segment", p->nops);
  int64_t next = 0;
  int seen_pre_opt = -1, seen_post_opt = -1;
  for (int32_t k = 0; k < p->nsegs && !stop(v); k++) {
    const fp_seg *s = &p->segs[k];
    if ((unsigned)s->kind >= FP_NSEGKINDS) {
      verr(v, FP_VL_SEG, k, "unknown segment kind %d", (int)s->kind);
      continue;
    }
    const char *kn = fpi_seg_name(s->kind);
    if (s->first != next || s->nops < 0 || s->nops > p->nops - s->first)
      verr(v, FP_VL_SEG, k, "covers ops [%" PRId32 ", +%" PRId32 ") but the previous segment ends at %" PRId64
           " (segments must cover the ops in order)", s->first, s->nops, next);
    else
      next = s->first + s->nops;
    if (fpi_seg_has_module(s->kind)) {
      if (s->module < 0 || s->module >= p->nmods)
        verr(v, FP_VL_SEG, k, "%s names module %" PRId32 ", out of range (%" PRId32 " modules)", kn, s->module, p->nmods);
    } else if (s->module != -1) {
      verr(v, FP_VL_SEG, k, "%s takes no module (found %" PRId32 ")", kn, s->module);
    }
    if (s->micro < 0 || s->micro >= p->grad_accumulation)
      verr(v, FP_VL_SEG, k, "micro-batch %" PRId32 " is out of range [0, %" PRId64 ")", s->micro, p->grad_accumulation);
    if (s->kind == FP_SEG_STEP_BEGIN && k != 0) verr(v, FP_VL_SEG, k, "step_begin must be the first segment");
    if (s->kind == FP_SEG_PRE_OPTIMIZER) {
      if (seen_pre_opt >= 0) verr(v, FP_VL_SEG, k, "a second pre_optimizer (the first is segment %d)", seen_pre_opt);
      seen_pre_opt = k;
    } else if (s->kind == FP_SEG_POST_OPTIMIZER) {
      if (seen_post_opt >= 0) verr(v, FP_VL_SEG, k, "a second post_optimizer (the first is segment %d)", seen_post_opt);
      seen_post_opt = k;
      if (k != p->nsegs - 1) verr(v, FP_VL_SEG, k, "post_optimizer must be the last segment");
    } else if (seen_pre_opt >= 0 && s->kind != FP_SEG_POST_OPTIMIZER) {
      verr(v, FP_VL_SEG, k, "%s after pre_optimizer (segment %d): only post_optimizer may follow it", kn, seen_pre_opt);
    }
  }
  if (v->nerr == n0 && next != p->nops)
    verr(v, FP_VL_SEG, p->nsegs - 1, "segments end at op %" PRId64 " but there are %" PRId32 " ops", next, p->nops);
  return v->nerr == n0;
}

/* check_segments' last part, after a table without errors: each op names
 * the segment it lies in (check_ops does it on its walk; this walk runs
 * only when that found an op that does not) */
static bool check_op_segs(vctx *v) {
  const fp_prog *p = v->p;
  int n0 = v->nerr;
  for (int32_t k = 0; k < p->nsegs; k++)
    for (int32_t i = p->segs[k].first; i < p->segs[k].first + p->segs[k].nops && !stop(v); i++)
      if (p->ops[i].seg != k) verr(v, FP_VL_OP, i, "op.seg is %" PRId32 " but it lies in segment %" PRId32, p->ops[i].seg, k);
  return v->nerr == n0;
}

/* ---- per-op: structure (rule 1) -------------------------------------------------------- */
static int32_t comm_size_or_1(const fp_prog *p, const fp_op *op) {
  return op->comm >= 0 ? (int32_t)p->comms[op->comm].size : 1;
}

static int operands_of(fp_opcode c) {
  switch (c) {
    case FP_OP_SEND: return OPND_SRC;
    case FP_OP_RECV: return OPND_DST;
    case FP_OP_SCALE:
    case FP_OP_MEMSET: return OPND_DST;
    case FP_OP_QUANTIZE_MXFP8:
    case FP_OP_DEQUANTIZE_MXFP8: return OPND_DST | OPND_SRC | OPND_AUX;
    case FP_OP_RECORD:
    case FP_OP_WAIT:
    case FP_OP_COMPUTE: return 0;
    default: return OPND_DST | OPND_SRC;
  }
}

/* a region table (split_copy, chunk_cat) over `rows` rows: the sum of its
 * counts and the end, in elements, of the furthest region's rows in the
 * table-side operand (max over j of off[j] + rows * cnt[j]); false on
 * overflow */
static bool region_sums(const fp_ir_table *t, int64_t rows, int64_t *sum, int64_t *end) {
  *sum = *end = 0;
  for (int64_t j = 0; j < t->n; j++) {
    int64_t x, e;
    if (!fpi_add64(*sum, t->cnt[j], sum) || !fpi_mul64(rows, t->cnt[j], &x) || !fpi_add64(t->off[j], x, &e)) return false;
    if (e > *end) *end = e;
  }
  return true;
}

static const fp_region *operand(const fp_op *op, int w) { return w == OPND_DST ? &op->dst : w == OPND_SRC ? &op->src : &op->aux; }
static const char *opnd_name(int w) { return w == OPND_DST ? "dst" : w == OPND_SRC ? "src" : "aux"; }

/* check_op_structure's steps, each reporting what it finds, in the order
 * the op's fields are read: its enums and references in range (op_ranges,
 * op_buffers), then what its kind needs (op_needs, op_operands), its table
 * (op_table), its shape and its root (op_shape, op_root) */
static void op_ranges(vctx *v, int32_t i, const char *on) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  if ((unsigned)op->stream >= FP_NSTREAMS) verr(v, FP_VL_OP, i, "%s: unknown stream %d", on, (int)op->stream);
  if (!dtype_ok(op->dtype) || !dtype_ok(op->sdtype)) verr(v, FP_VL_OP, i, "%s: unknown dtype", on);
  if ((unsigned)op->pass > FP_PASS_OPT) verr(v, FP_VL_OP, i, "%s: unknown pass %d", on, (int)op->pass);
  if ((unsigned)op->red >= FP_NREDOPS)
    verr(v, FP_VL_OP, i, "%s: unknown reduce op %d", on, (int)op->red);
  else if (op->red != FP_RED_SUM && !fpi_op_reduces(op->code))
    verr(v, FP_VL_OP, i, "%s takes no red=%s (only reduce_scatter, reduce_scatter_v, all_reduce and reduce reduce)", on,
         fpi_redop_name(op->red));
#define RANGE(field, n, what)                                                                                         \
  if (op->field < -1 || op->field >= (n))                                                                             \
    verr(v, FP_VL_OP, i, "%s: " what " %" PRId32 " is out of range (%" PRId32 " defined)", on, op->field, (int32_t)(n));
  RANGE(comm, p->ncomms, "comm")
  RANGE(only_comm, p->ncomms, "only's comm")
  RANGE(tab, p->ntabs, "table")
  RANGE(module, p->nmods, "module")
  RANGE(shape, p->nshapes, "shape")
  RANGE(bucket, p->nbuckets, "bucket")
  RANGE(event, p->nevents, "event")
#undef RANGE
}

/* the operands' buffers and the uses list in range */
static void op_buffers(vctx *v, int32_t i, const char *on, fp_opclass cls) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  if (op->dst.buf < -1 || op->dst.buf >= p->nbufs || op->src.buf < -1 || op->src.buf >= p->nbufs ||
      op->aux.buf < -1 || op->aux.buf >= p->nbufs)
    verr(v, FP_VL_OP, i, "%s: an operand's buffer is out of range (%" PRId32 " buffers)", on, p->nbufs);
  if (op->nuses < 0 || op->uses < 0 || op->uses > p->nuses - op->nuses) {
    verr(v, FP_VL_OP, i, "%s: uses [%" PRId32 ", +%" PRId32 ") lie outside the program's %" PRId32 " uses", on, op->uses,
         op->nuses, p->nuses);
  } else if (op->nuses > 0 && cls != FP_OPC_COMPUTE) {
    verr(v, FP_VL_OP, i, "%s takes no uses= (only compute lists the trainer's buffers)", on);
  } else {
    for (int32_t k = 0; k < op->nuses; k++)
      if (p->uses[op->uses + k] < 0 || p->uses[op->uses + k] >= p->nbufs) {
        verr(v, FP_VL_OP, i, "%s: used buffer %" PRId32 " is out of range (%" PRId32 " buffers)", on,
             p->uses[op->uses + k], p->nbufs);
        break;
      }
  }
}

/* what the op's kind needs: a communicator, an event, a module, a table,
 * a count, a rank of its only= communicator */
static void op_needs(vctx *v, int32_t i, const char *on, fp_opclass cls) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  if (cls == FP_OPC_COMM && op->comm < 0) verr(v, FP_VL_OP, i, "%s needs a communicator", on);
  if (cls == FP_OPC_SYNC && op->event < 0) verr(v, FP_VL_OP, i, "%s needs an event", on);
  if (cls != FP_OPC_SYNC && op->event >= 0) verr(v, FP_VL_OP, i, "%s takes no event", on);
  if (cls == FP_OPC_COMPUTE) {
    if (op->pass == FP_PASS_OPT && op->module >= 0) verr(v, FP_VL_OP, i, "compute pass=opt takes no module");
    if (op->pass != FP_PASS_OPT && op->module < 0) verr(v, FP_VL_OP, i, "compute needs a module");
    if (op->stream != FP_STREAM_COMPUTE) verr(v, FP_VL_OP, i, "compute runs on the compute stream, not %s", fpi_stream_name(op->stream));
    if (!isfinite(op->alpha) || op->alpha < 0) verr(v, FP_VL_OP, i, "compute flops must be finite and >= 0");
    check_tied_reads(v, i);
  }
  if ((op->code == FP_OP_ALL_GATHER_V || op->code == FP_OP_REDUCE_SCATTER_V) && op->tab < 0)
    verr(v, FP_VL_OP, i, "%s needs an extent table", on);
  if (op->count < 0) verr(v, FP_VL_OP, i, "%s: count %" PRId64 " is negative", on, op->count);
  if (op->only >= 0 && op->only_comm < 0) verr(v, FP_VL_OP, i, "%s: only=%" PRId32 " needs a communicator", on, op->only);
  if (op->only < -1) verr(v, FP_VL_OP, i, "%s: only=%" PRId32 " is out of range", on, op->only);
  if (op->only >= 0 && op->only_comm >= 0 && op->only >= p->comms[op->only_comm].size)
    verr(v, FP_VL_OP, i, "%s: only=%" PRId32 " is not a rank of comm '%s' (size %" PRId64 ")", on, op->only,
         p->comms[op->only_comm].name, p->comms[op->only_comm].size);
}

/* the operands the op's kind reads and writes, and only those */
static void op_operands(vctx *v, int32_t i, const char *on) {
  const fp_op *op = &v->p->ops[i];
  int need = operands_of(op->code);
  for (int w = OPND_DST; w <= OPND_AUX; w <<= 1) {
    const fp_region *r = operand(op, w);
    bool present = r->buf >= 0;
    if ((need & w) && !present) verr(v, FP_VL_OP, i, "%s needs a %s operand", on, opnd_name(w));
    if (!(need & w) && (present || r->tabrel || r->off || r->stride)) verr(v, FP_VL_OP, i, "%s takes no %s operand", on, opnd_name(w));
    if (present && r->tabrel && op->tab < 0)
      verr(v, FP_VL_OP, i, "%s: %s is table-relative but the op has no table", on, opnd_name(w));
  }
}

/* an all_gather_v's pieces land in rank order, none over another */
static void check_gatherv_order(vctx *v, int32_t i, const char *on) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  /* the members' pieces land in rank order, none over another (two
   * writers of one byte); gaps are left as they were */
  const fp_ir_table *t = &p->tabs[op->tab];
  for (int64_t g = 0, at = 0; g < t->n; g++) {
    if (t->cnt[g] == 0) continue;
    if (t->off[g] < at) {
      verr(v, FP_VL_OP, i, "%s: extent table '%s' entry %" PRId64 " starts at element %" PRId64 ", inside the "
           "pieces before it (they end at %" PRId64 "): the members' pieces lie in rank order, none over another",
           on, t->name, g, t->off[g], at);
      return;
    }
    at = t->off[g] + t->cnt[g];
  }
}

/* the op's table: a region table (any number of entries, no comm), or one
 * entry per member of its communicator */
static void op_table(vctx *v, int32_t i, const char *on, fp_op_shape sh) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  if (fpi_op_regions(op->code)) { /* a region table: any number of entries, no comm */
    int64_t sum, end;
    if (op->tab < 0)
      verr(v, FP_VL_OP, i, "%s needs a region table (tab=)", on);
    else if (op->comm >= 0)
      verr(v, FP_VL_OP, i, "%s takes no comm (its table lists regions, not ranks)", on);
    else if (!v->tabs[op->tab].ok)
      verr(v, FP_VL_OP, i, "%s: table '%s' is invalid", on, p->tabs[op->tab].name);
    else if (op->dst.tabrel || op->src.tabrel)
      verr(v, FP_VL_OP, i, "%s: operands are not table-relative (the table places the regions)", on);
    else if (!region_sums(&p->tabs[op->tab], sh.rows < 1 ? 1 : sh.rows, &sum, &end))
      verr(v, FP_VL_OP, i, "%s: table '%s' overflows int64 over %" PRId64 " rows", on, p->tabs[op->tab].name, sh.rows);
    else if (sum != op->count)
      verr(v, FP_VL_OP, i, "%s: n=%" PRId64 " but the regions of table '%s' count %" PRId64, on, op->count,
           p->tabs[op->tab].name, sum);
  } else if (op->tab >= 0) { /* tables serve the op's communicator: one entry per member */
    if (op->comm < 0)
      verr(v, FP_VL_OP, i, "%s: a table needs a communicator to index it", on);
    else if (p->tabs[op->tab].n != p->comms[op->comm].size)
      verr(v, FP_VL_OP, i, "%s: table '%s' has %" PRId64 " entries but comm '%s' has %" PRId64 " ranks", on,
           p->tabs[op->tab].name, p->tabs[op->tab].n, p->comms[op->comm].name, p->comms[op->comm].size);
    else if (!v->tabs[op->tab].ok)
      verr(v, FP_VL_OP, i, "%s: table '%s' is invalid", on, p->tabs[op->tab].name);
    else if (op->code == FP_OP_ALL_GATHER_V)
      check_gatherv_order(v, i, on);
  }
}

/* rows and pitches: copies and region ops only */
static void op_shape(vctx *v, int32_t i, const char *on, fp_op_shape sh) {
  const fp_op *op = &v->p->ops[i];
  if (op->code == FP_OP_COPY || fpi_op_regions(op->code)) {
    if (sh.rows < 1) verr(v, FP_VL_OP, i, "%s: rows %" PRId64 " must be >= 1", on, sh.rows);
    if (sh.dpitch < 0 || sh.spitch < 0) verr(v, FP_VL_OP, i, "%s: pitches must be >= 0", on);
  } else if (sh.rows != 1 || sh.dpitch || sh.spitch) {
    verr(v, FP_VL_OP, i, "%s takes no rows or pitches", on);
  }
}

/* a root: broadcast, reduce, send and recv need one, in their communicator */
static void op_root(vctx *v, int32_t i, const char *on) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  if (op->root != -1) {
    bool rooted = op->code == FP_OP_BROADCAST || op->code == FP_OP_REDUCE || op->code == FP_OP_SEND || op->code == FP_OP_RECV;
    if (!rooted) verr(v, FP_VL_OP, i, "%s takes no root", on);
    else if (op->comm >= 0 && (op->root < 0 || op->root >= p->comms[op->comm].size)) /* rule 5 */
      verr(v, FP_VL_OP, i, "%s: root %" PRId32 " is not a rank of comm '%s' (size %" PRId64 ")", on, op->root,
           p->comms[op->comm].name, p->comms[op->comm].size);
  } else if (op->code == FP_OP_BROADCAST || op->code == FP_OP_REDUCE || op->code == FP_OP_SEND || op->code == FP_OP_RECV) {
    verr(v, FP_VL_OP, i, "%s needs a root (%s)", on,
         op->code == FP_OP_SEND || op->code == FP_OP_RECV ? "the peer's distance in the comm" : "a rank of the comm");
  }
}

static bool check_op_structure(vctx *v, int32_t i) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  int n0 = v->nerr;
  if ((unsigned)op->code >= FP_NOPS) {
    verr(v, FP_VL_OP, i, "unknown opcode %d", (int)op->code);
    return false;
  }
  const char *on = fpi_op_name(op->code);
  fp_opclass cls = fpi_op_class(op->code);
  op_ranges(v, i, on);
  op_buffers(v, i, on, cls);
  if (v->nerr != n0) return false;
  op_needs(v, i, on, cls);
  op_operands(v, i, on);
  fp_op_shape sh = fpi_op_shape_of(p, op);
  op_table(v, i, on, sh);
  op_shape(v, i, on, sh);
  op_root(v, i, on);
  return v->nerr == n0;
}

/* ---- per-op: bounds and overlap (rules 2, 3) ------------------------------------------ */
static fp_dtype opnd_dtype(const fp_op *op, int w) {
  switch (op->code) {
    case FP_OP_QUANTIZE_MXFP8: return w == OPND_DST ? FP_E4M3 : w == OPND_AUX ? FP_E8M0 : op->sdtype;
    case FP_OP_DEQUANTIZE_MXFP8: return w == OPND_SRC ? FP_E4M3 : w == OPND_AUX ? FP_E8M0 : op->dtype;
    case FP_OP_H2D:
    case FP_OP_D2H: return FP_U8;
    default: return w == OPND_SRC ? op->sdtype : op->dtype;
  }
}

/* bytes the operand covers on rank g */
static bool opnd_extent(vctx *v, const fp_op *op, int w, int64_t g, int64_t G, int64_t *out) {
  const fp_prog *p = v->p;
  int64_t n = fpi_op_count(p, op, g), sz = dsize(opnd_dtype(op, w)), e = 0, t;
  fp_op_shape sh = fpi_op_shape_of(p, op);
  bool ok = true;
  switch (op->code) {
    case FP_OP_ALL_GATHER:
      ok = w == OPND_DST ? fpi_mul64(G, n, &t) && fpi_mul64(t, sz, &e) : fpi_mul64(n, sz, &e);
      break;
    case FP_OP_REDUCE_SCATTER:
      ok = w == OPND_SRC ? fpi_mul64(G, n, &t) && fpi_mul64(t, sz, &e) : fpi_mul64(n, sz, &e);
      break;
    case FP_OP_ALL_GATHER_V:
      ok = fpi_mul64(w == OPND_DST ? v->tabs[op->tab].maxend : n, sz, &e);
      break;
    case FP_OP_REDUCE_SCATTER_V:
      ok = fpi_mul64(w == OPND_SRC ? v->tabs[op->tab].maxend : n, sz, &e);
      break;
    case FP_OP_COPY: {
      int64_t pitch = w == OPND_DST ? sh.dpitch : sh.spitch;
      ok = fpi_mul64(sh.rows - 1, pitch, &t) && fpi_mul64(n, sz, &e) && fpi_add64(t, e, &e);
      break;
    }
    case FP_OP_SPLIT_COPY:
    case FP_OP_CHUNK_CAT: {
      /* the table side (split_copy's dst, chunk_cat's src) ends at the
       * furthest region's last row; the packed side is rows of n elements */
      bool table_side = (op->code == FP_OP_SPLIT_COPY) == (w == OPND_DST);
      int64_t sum, end;
      if (table_side) {
        ok = region_sums(&p->tabs[op->tab], sh.rows, &sum, &end) && fpi_mul64(end, sz, &e);
      } else {
        int64_t pitch = w == OPND_DST ? sh.dpitch : sh.spitch;
        ok = fpi_mul64(sh.rows - 1, pitch, &t) && fpi_mul64(n, sz, &e) && fpi_add64(t, e, &e);
      }
      break;
    }
    case FP_OP_QUANTIZE_MXFP8:
    case FP_OP_DEQUANTIZE_MXFP8:
      if (w == OPND_AUX) {
        e = n / 32;
        break;
      }
      ok = fpi_mul64(n, sz, &e);
      break;
    default: ok = fpi_mul64(n, sz, &e); break;
  }
  *out = e;
  return ok;
}

/* start of the operand on rank g */
static bool opnd_start(vctx *v, const fp_op *op, int w, int64_t g, int64_t *out) {
  const fp_region *r = operand(op, w);
  int64_t s, t;
  if (!fpi_mul64(g, r->stride, &t) || !fpi_add64(r->off, t, &s)) return false;
  if (r->tabrel) {
    if (!fpi_mul64(v->p->tabs[op->tab].off[g], dsize(opnd_dtype(op, w)), &t) || !fpi_add64(s, t, &s)) return false;
  }
  *out = s;
  return true;
}

/* the ranks whose operands to check: all of them when a table is involved
 * (extents vary by rank), else the two ends (offsets are linear in g) */
static bool needs_every_g(const fp_op *op) { return op->tab >= 0 && !fpi_op_regions(op->code); }

/* check_op_operands in its steps: the elements aligned (operands_aligned),
 * then at the ranks checked each operand inside its buffer
 * (operands_inside) and no two overlapping but in the op's in-place form
 * (operands_apart), then host memory touched by h2d and d2h only
 * (operands_host). */
/* overlap rule for dst vs src: none, or the in-place form */
typedef enum { IP_NONE, IP_AG, IP_AGV, IP_RS, IP_RSV, IP_SAME, IP_SAME_DT } inplace_form;

static inplace_form inplace_of(fp_opcode code) {
  switch (code) {
    case FP_OP_ALL_GATHER: return IP_AG;
    case FP_OP_ALL_GATHER_V: return IP_AGV;
    case FP_OP_REDUCE_SCATTER: return IP_RS;
    case FP_OP_REDUCE_SCATTER_V: return IP_RSV;
    case FP_OP_ALL_REDUCE:
    case FP_OP_BROADCAST:
    case FP_OP_REDUCE: return IP_SAME;
    case FP_OP_ADD: return IP_SAME_DT;
    default: return IP_NONE;
  }
}

/* element alignment: where an operand starts on any rank (its offset, the
 * per-rank stride, a table entry times the element size, each row's
 * pitch), a whole number of its elements */
static bool operands_aligned(vctx *v, int32_t i, const char *on, int need) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  fp_op_shape ash = fpi_op_shape_of(p, op);
  for (int k = 0; k < 3; k++) {
    int w = 1 << k;
    if (!(need & w)) continue;
    const fp_region *r = operand(op, w);
    fp_dtype dt = opnd_dtype(op, w);
    int64_t z = dsize(dt), pitch = w == OPND_DST ? ash.dpitch : w == OPND_SRC ? ash.spitch : 0;
    if (z <= 1) continue;
    const char *what = r->off % z ? "offset" : r->stride % z ? "per-rank stride" : pitch % z ? "row pitch" : NULL;
    if (what) {
      verr(v, FP_VL_OP, i, "%s: %s %s %" PRId64 " in buffer '%s' is not a multiple of the %s element size (%d bytes)",
           on, opnd_name(w), what, r->off % z ? r->off : r->stride % z ? r->stride : pitch, p->bufs[r->buf].name,
           fpi_dtype_name(dt), (int)z);
      return false;
    }
  }
  return true;
}

/* on rank index g: the MXFP8 block count, and each operand [st, en) inside its buffer */
static bool operands_inside(vctx *v, int32_t i, const char *on, int need, int64_t g, int64_t G, int64_t st[3],
                            int64_t en[3]) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  if ((op->code == FP_OP_QUANTIZE_MXFP8 || op->code == FP_OP_DEQUANTIZE_MXFP8) && fpi_op_count(p, op, g) % 32) {
    verr(v, FP_VL_OP, i, "%s: count %" PRId64 " (rank index %" PRId64 ") is not a multiple of the 32-element MXFP8 block",
         on, fpi_op_count(p, op, g), g);
    return false;
  }
  for (int k = 0; k < 3; k++) {
    int w = 1 << k;
    if (!(need & w)) continue;
    const fp_region *r = operand(op, w);
    const fp_ir_buf *b = &p->bufs[r->buf];
    int64_t ext;
    if (!opnd_start(v, op, w, g, &st[k]) || !opnd_extent(v, op, w, g, G, &ext) || !fpi_add64(st[k], ext, &en[k])) {
      verr(v, FP_VL_OP, i, "%s: %s offset overflows int64 (rank index %" PRId64 ")", on, opnd_name(w), g);
      return false;
    }
    if (st[k] < 0 || en[k] > b->bytes) {
      verr(v, FP_VL_OP, i, "%s: %s [%" PRId64 ", %" PRId64 ") is outside buffer '%s' (%" PRId64 " bytes) on rank index %" PRId64,
           on, opnd_name(w), st[k], en[k], b->name, b->bytes, g);
      return false;
    }
  }
  return true;
}

/* dst and src overlapping on rank index g as the in-place form allows */
static bool inplace_legal(const fp_prog *p, const fp_op *op, inplace_form inplace, int64_t g, const int64_t st[3]) {
  int64_t n = fpi_op_count(p, op, g), sz = dsize(op->dtype), t;
  switch (inplace) {
    case IP_AG: return fpi_mul64(g, n, &t) && fpi_mul64(t, sz, &t) && st[1] - st[0] == t;
    case IP_RS: return fpi_mul64(g, n, &t) && fpi_mul64(t, sz, &t) && st[0] - st[1] == t;
    case IP_AGV: return fpi_mul64(p->tabs[op->tab].off[g], sz, &t) && st[1] - st[0] == t;
    case IP_RSV: return fpi_mul64(p->tabs[op->tab].off[g], sz, &t) && st[0] - st[1] == t;
    case IP_SAME: return st[0] == st[1];
    case IP_SAME_DT: return st[0] == st[1] && op->dtype == op->sdtype;
    default: return false;
  }
}

/* overlaps between operands in the same buffer on rank index g; cases[a][c]
 * keeps which side pair (a, c) was on at the first rank (0: none yet), so
 * that checking only the ends still sees a pair that crosses between them */
static bool operands_apart(vctx *v, int32_t i, const char *on, int need, bool every, int64_t g, const int64_t st[3],
                           const int64_t en[3], int cases[3][3]) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  inplace_form inplace = inplace_of(op->code);
  for (int a = 0; a < 3; a++)
    for (int c = a + 1; c < 3; c++) {
      int wa = 1 << a, wc = 1 << c;
      if (!(need & wa) || !(need & wc) || operand(op, wa)->buf != operand(op, wc)->buf) continue;
      if (en[a] == st[a] || en[c] == st[c]) continue; /* empty */
      int cs = en[a] <= st[c] ? 1 : en[c] <= st[a] ? 2 : 3;
      if (cs != 3) {
        if (!cases[a][c]) cases[a][c] = cs;
        else if (cases[a][c] != cs && !every) cs = 3; /* crossed between the ends */
        if (cs != 3) continue;
      }
      /* they overlap: legal only in an in-place form of dst (a=0) and src (c=1) */
      if (a == 0 && c == 1 && inplace_legal(p, op, inplace, g, st)) continue;
      verr(v, FP_VL_OP, i, "%s: %s [%" PRId64 ", %" PRId64 ") and %s [%" PRId64 ", %" PRId64 ") overlap in buffer '%s'%s",
           on, opnd_name(wa), st[a], en[a], opnd_name(wc), st[c], en[c], p->bufs[operand(op, wa)->buf].name,
           inplace != IP_NONE && a == 0 && c == 1 ? " and are not the in-place form" : "");
      return false;
    }
  return true;
}

/* host memory: only h2d / d2h touch it, each on its side */
static void operands_host(vctx *v, int32_t i, const char *on, int need) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  for (int k = 0; k < 3; k++) {
    int w = 1 << k;
    if (!(need & w)) continue;
    bool host = p->bufs[operand(op, w)->buf].host;
    bool want = (op->code == FP_OP_H2D && w == OPND_SRC) || (op->code == FP_OP_D2H && w == OPND_DST);
    if (host != want)
      verr(v, FP_VL_OP, i, "%s: %s buffer '%s' is %s memory; %s", on, opnd_name(w), p->bufs[operand(op, w)->buf].name,
           host ? "host" : "device", want ? "it must be a host buffer" : "only h2d/d2h touch host buffers");
  }
}

static void check_op_operands(vctx *v, int32_t i) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  const char *on = fpi_op_name(op->code);
  int64_t G = comm_size_or_1(p, op);
  int need = operands_of(op->code);
  bool every = needs_every_g(op);
  if (!operands_aligned(v, i, on, need)) return;
  int cases[3][3]; /* per pair: disjointness case at the first g (0 none yet) */
  memset(cases, 0, sizeof cases);
  for (int64_t gi = 0, ng = every ? G : (G > 1 ? 2 : 1); gi < ng && !stop(v); gi++) {
    int64_t g = every ? gi : gi * (G - 1);
    int64_t st[3] = {0}, en[3] = {0};
    if (!operands_inside(v, i, on, need, g, G, st, en) || !operands_apart(v, i, on, need, every, g, st, en, cases))
      return;
  }
  operands_host(v, i, on, need);
}

/* check_op_dtypes in its steps: the dtypes the op's kind takes
 * (dtypes_of_kind), alpha only where it means something, and no FP8 data
 * in a grad buffer (no_fp8_grads) */
static void dtypes_of_kind(vctx *v, int32_t i) {
  const fp_op *op = &v->p->ops[i];
  const char *on = fpi_op_name(op->code), *dn = fpi_dtype_name(op->dtype), *sn = fpi_dtype_name(op->sdtype);
  switch (op->code) {
    case FP_OP_REDUCE_SCATTER:
    case FP_OP_REDUCE_SCATTER_V:
    case FP_OP_ALL_REDUCE:
    case FP_OP_REDUCE:
      if (!fpi_dtype_reducible(op->dtype))
        verr(v, FP_VL_OP, i, "%s reduces %s data, which is not reducible (MXFP8 data is gathered as bytes, never reduced)", on, dn);
      /* fallthrough */
    case FP_OP_ALL_GATHER:
    case FP_OP_ALL_GATHER_V:
    case FP_OP_BROADCAST:
    case FP_OP_SEND:
    case FP_OP_RECV:
    case FP_OP_COPY:
    case FP_OP_H2D:
    case FP_OP_D2H:
      if (op->sdtype != op->dtype) verr(v, FP_VL_OP, i, "%s does not convert: src dtype %s differs from dst dtype %s", on, sn, dn);
      break;
    case FP_OP_SPLIT_COPY:
      if (op->sdtype != op->dtype) verr(v, FP_VL_OP, i, "%s does not convert: src dtype %s differs from dst dtype %s", on, sn, dn);
      break;
    case FP_OP_CHUNK_CAT:
      if (op->sdtype != op->dtype && (!is_float(op->dtype) || !is_float(op->sdtype)))
        verr(v, FP_VL_OP, i, "chunk_cat converts between float types (fp32, bf16, fp16), not %s->%s", sn, dn);
      break;
    case FP_OP_CAST:
    case FP_OP_ADD:
      if (!is_float(op->dtype) || !is_float(op->sdtype))
        verr(v, FP_VL_OP, i, "%s works on float types (fp32, bf16, fp16), not %s->%s", on, sn, dn);
      break;
    case FP_OP_SCALE:
    case FP_OP_MEMSET:
      if (!is_float(op->dtype) || op->sdtype != op->dtype)
        verr(v, FP_VL_OP, i, "%s works on one float type (fp32, bf16, fp16), not %s->%s", on, sn, dn);
      if (op->code == FP_OP_SCALE && !isfinite(op->alpha)) verr(v, FP_VL_OP, i, "scale: alpha is not finite");
      break;
    case FP_OP_QUANTIZE_MXFP8:
      if (op->dtype != FP_E4M3 || !is_float(op->sdtype))
        verr(v, FP_VL_OP, i, "quantize_mxfp8 converts a float type to e4m3, not %s->%s", sn, dn);
      break;
    case FP_OP_DEQUANTIZE_MXFP8:
      if (op->sdtype != FP_E4M3 || !is_float(op->dtype))
        verr(v, FP_VL_OP, i, "dequantize_mxfp8 converts e4m3 to a float type, not %s->%s", sn, dn);
      break;
    default: break;
  }
}

static void no_fp8_grads(vctx *v, int32_t i) {
  const fp_op *op = &v->p->ops[i];
  const char *on = fpi_op_name(op->code);
  /* grads are never FP8: no MXFP8 op and no op on e4m3 / e8m0 data touches a
   * grad buffer (gradients are reduced and stored in float types only) */
  bool fp8 = op->code == FP_OP_QUANTIZE_MXFP8 || op->code == FP_OP_DEQUANTIZE_MXFP8 || op->dtype == FP_E4M3 ||
             op->dtype == FP_E8M0 || op->sdtype == FP_E4M3 || op->sdtype == FP_E8M0;
  const fp_region *r[3] = {&op->dst, &op->src, &op->aux};
  for (int k = 0; k < 3 && fp8; k++) {
    int32_t b = r[k]->buf;
    if (b < 0 || b >= v->p->nbufs) continue;
    fp_buf_cat c = v->p->bufs[b].cat;
    if (c == FP_CAT_MAIN_GRAD || c == FP_CAT_UNSHARDED_GRAD)
      verr(v, FP_VL_OP, i, "%s moves FP8 data into or out of %s buffer '%s': grads are never FP8", on,
           fpi_buf_cat_name(c), v->p->bufs[b].name);
  }
}

static void check_op_dtypes(vctx *v, int32_t i) {
  const fp_op *op = &v->p->ops[i];
  const char *on = fpi_op_name(op->code);
  dtypes_of_kind(v, i);
  if (op->code != FP_OP_SCALE && fpi_op_class(op->code) != FP_OPC_COMPUTE && op->alpha != 0)
    verr(v, FP_VL_OP, i, "%s takes no alpha", on);
  no_fp8_grads(v, i);
}

/* ---- rule 5: collectives match on every rank ------------------------------------------ */
/* The program is SPMD: every rank runs the same op sequence, so every member
 * of a communicator instance issues the same collectives in the same order -
 * unless an op is predicated by `only`, which some ranks skip. A predicated
 * collective is therefore safe exactly when the predicate has one value
 * across the members of every instance of its comm: then an instance runs
 * it on all its members or on none. We check that by walking the world's
 * ranks once per (only, only_comm, comm), caching the answer. Roots must be
 * ranks of the comm and v-collective tables must have one entry per member
 * (checked with the op). Point-to-point ops are collectives of a pair: the
 * k-th send at distance d on a comm must meet the k-th recv at distance d
 * (what rank g sends, rank g+d receives), with equal count and dtype, in
 * the same group (a ring shift of blocking sends deadlocks otherwise) and
 * under the same predicate. */
typedef struct predpair {
  int32_t oc, c;      /* only_comm, comm */
  uint8_t *forbidden; /* per index of oc: 1 when some instance of c is split by it */
} predpair;

typedef struct predcache {
  predpair *pairs;
  int32_t n, cap;
} predcache;

/* walk the world once for (oc, c): an instance of c whose members do not all
 * have one index in oc is split by each of those indices */
static const predpair *pred_pair(vctx *v, predcache *pc, int32_t oc, int32_t c) {
  for (int32_t k = 0; k < pc->n; k++)
    if (pc->pairs[k].oc == oc && pc->pairs[k].c == c) return &pc->pairs[k];
  const fp_prog *p = v->p;
  const fp_ir_comm *C = &p->comms[c], *O = &p->comms[oc];
  int64_t W = p->world_size;
  int32_t *first = malloc((size_t)W * sizeof *first); /* per instance (by base rank): oc index, -1 none, -2 split */
  uint8_t *forbidden = calloc((size_t)O->size, 1);
  FP_ASSERT(first && forbidden);
  for (int64_t r = 0; r < W; r++) first[r] = -1;
  for (int64_t r = 0; r < W; r++) {
    int64_t base = r - fpi_comm_index(C, r) * C->stride;
    int32_t x = (int32_t)fpi_comm_index(O, r);
    if (first[base] == -1) first[base] = x;
    else if (first[base] != x) first[base] = -2;
  }
  for (int64_t r = 0; r < W; r++)
    if (first[r - fpi_comm_index(C, r) * C->stride] == -2) forbidden[fpi_comm_index(O, r)] = 1;
  free(first);
  if (pc->n == pc->cap) {
    pc->cap = pc->cap ? 2 * pc->cap : 8;
    pc->pairs = realloc(pc->pairs, (size_t)pc->cap * sizeof *pc->pairs);
    FP_ASSERT(pc->pairs);
  }
  pc->pairs[pc->n] = (predpair){oc, c, forbidden};
  return &pc->pairs[pc->n++];
}

static void pred_free(predcache *pc) {
  for (int32_t k = 0; k < pc->n; k++) free(pc->pairs[k].forbidden);
  free(pc->pairs);
}

/* a communicator whose instances tile the world (rule 7 reports the others) */
static bool comm_sound(const fp_prog *p, int32_t c) {
  int64_t span;
  return c >= 0 && c < p->ncomms && p->comms[c].size >= 1 && p->comms[c].stride >= 1 &&
         fpi_mul64(p->comms[c].size, p->comms[c].stride, &span) && p->world_size % span == 0;
}

static void check_predicate(vctx *v, predcache *pc, int32_t i) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  if (op->only < 0 || fpi_op_class(op->code) != FP_OPC_COMM) return;
  /* (the instances are walked by index: a communicator of size or stride 0
   * would divide by zero; rule 7 has reported it) */
  if (!comm_sound(p, op->comm) || !comm_sound(p, op->only_comm)) return;
  if (!pred_pair(v, pc, op->only_comm, op->comm)->forbidden[op->only]) return;
  /* find a witness: two members of one instance that disagree */
  const fp_ir_comm *c = &p->comms[op->comm], *oc = &p->comms[op->only_comm];
  int64_t a = -1, b = -1;
  for (int64_t r = 0; r < p->world_size && a < 0; r++) {
    if (fpi_comm_index(oc, r) != op->only) continue;
    int64_t base = r - fpi_comm_index(c, r) * c->stride;
    for (int64_t g = 0; g < c->size; g++) {
      int64_t m = base + g * c->stride;
      if (fpi_comm_index(oc, m) != op->only) {
        a = r, b = m;
        break;
      }
    }
  }
  verr(v, FP_VL_OP, i, "%s: only=%" PRId32 "@%s splits an instance of comm '%s': ranks %" PRId64 " and %" PRId64
       " are members of one instance but only rank %" PRId64 " runs it (a collective must run on all members or none)",
       fpi_op_name(op->code), op->only, oc->name, c->name, a, b, a);
}

typedef struct p2p {
  int32_t op;
  int64_t key; /* comm, distance */
  int kind;    /* 0 send, 1 recv */
} p2p;

static int p2p_cmp(const void *a, const void *b) {
  const p2p *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->op < y->op ? -1 : x->op > y->op;
}

/* n: the sound sends and recvs (counted on the walk of rules 1-3) */
static void check_p2p(vctx *v, int32_t n) {
  const fp_prog *p = v->p;
  if (!n) return;
  p2p *l = malloc((size_t)n * sizeof *l);
  FP_ASSERT(l);
  n = 0;
  for (int32_t i = 0; i < p->nops; i++) {
    const fp_op *op = &p->ops[i];
    if (v->badop[i] || (op->code != FP_OP_SEND && op->code != FP_OP_RECV)) continue;
    l[n++] = (p2p){i, (int64_t)op->comm << 32 | (uint32_t)op->root, op->code == FP_OP_RECV};
  }
  qsort(l, (size_t)n, sizeof *l, p2p_cmp);
  for (int32_t a = 0; a < n && !stop(v);) {
    int32_t b = a;
    while (b < n && l[b].key == l[a].key) b++;
    /* pair the k-th send with the k-th recv of this (comm, distance) */
    int32_t si = a, ri = a;
    for (;;) {
      while (si < b && l[si].kind != 0) si++;
      while (ri < b && l[ri].kind != 1) ri++;
      if (si >= b || ri >= b) break;
      const fp_op *s = &p->ops[l[si].op], *r = &p->ops[l[ri].op];
      const fp_ir_comm *c = &p->comms[s->comm];
      bool ok = s->dtype == r->dtype;
      for (int64_t g = 0; ok && g < c->size; g++)
        if (fpi_op_count(p, s, g) != fpi_op_count(p, r, (g + s->root) % c->size)) ok = false;
      if (!ok)
        verr(v, FP_VL_OP, l[ri].op, "recv does not match send op %" PRId32 " (distance %" PRId32 " on comm '%s'): "
             "count and dtype must agree", l[si].op, s->root, c->name);
      else if (s->group < 0 || s->group != r->group)
        verr(v, FP_VL_OP, l[ri].op, "recv and its send op %" PRId32 " must be in one group (group=), or the ring of "
             "sends deadlocks", l[si].op);
      else if (s->only != r->only || s->only_comm != r->only_comm)
        verr(v, FP_VL_OP, l[ri].op, "recv and its send op %" PRId32 " have different only= predicates", l[si].op);
      si++;
      ri++;
    }
    if (si < b && ri >= b) {
      while (si < b && l[si].kind != 0) si++;
      if (si < b) verr(v, FP_VL_OP, l[si].op, "send at distance %" PRId32 " on comm '%s' has no matching recv",
                       p->ops[l[si].op].root, p->comms[p->ops[l[si].op].comm].name);
    } else if (ri < b) {
      while (ri < b && l[ri].kind != 1) ri++;
      if (ri < b) verr(v, FP_VL_OP, l[ri].op, "recv at distance %" PRId32 " on comm '%s' has no matching send",
                       p->ops[l[ri].op].root, p->comms[p->ops[l[ri].op].comm].name);
    }
    a = b;
  }
  free(l);
}

/* check_groups' conditions, op by op on the walk of rules 1-3, without
 * reports: check_groups (a walk of its own) runs only when one fails */
typedef struct groupscan {
  imap seen;
  int32_t cur, first;
} groupscan;

static void groupscan_init(groupscan *g) {
  imap_init(&g->seen, 16);
  g->cur = g->first = -1;
}

static bool groupscan_ok(groupscan *g, const fp_prog *p, int32_t i) {
  const fp_op *op = &p->ops[i];
  if (op->group < 0) {
    g->cur = -1;
    return op->group == -1;
  }
  if ((unsigned)op->code < FP_NOPS && fpi_op_class(op->code) != FP_OPC_COMM) return false;
  if (op->group == g->cur) return op->stream == p->ops[g->first].stream && op->seg == p->ops[g->first].seg;
  g->cur = op->group;
  g->first = i;
  bool fresh;
  imap_get_or_put(&g->seen, g->cur, i, &fresh);
  return fresh;
}

/* grouped calls issue as one ncclGroupStart/End: contiguous, one stream,
 * one segment, communication only */
static void check_groups(vctx *v) {
  const fp_prog *p = v->p;
  imap seen;
  imap_init(&seen, 16);
  int32_t cur = -1, first = -1;
  for (int32_t i = 0; i < p->nops && !stop(v); i++) {
    const fp_op *op = &p->ops[i];
    if (op->group < -1) verr(v, FP_VL_OP, i, "group %" PRId32 " is out of range", op->group);
    if (op->group < 0) {
      cur = -1;
      continue;
    }
    if ((unsigned)op->code < FP_NOPS && fpi_op_class(op->code) != FP_OPC_COMM)
      verr(v, FP_VL_OP, i, "%s is not communication and cannot be grouped", fpi_op_name(op->code));
    if (op->group == cur) {
      const fp_op *f = &p->ops[first];
      if (op->stream != f->stream || op->seg != f->seg)
        verr(v, FP_VL_OP, i, "group %" PRId32 " spans streams or segments (it starts at op %" PRId32 ")", cur, first);
      continue;
    }
    cur = op->group;
    first = i;
    bool fresh;
    int32_t prev = imap_get_or_put(&seen, cur, i, &fresh);
    if (!fresh) verr(v, FP_VL_OP, i, "group %" PRId32 " is not contiguous (it started at op %" PRId32 ")", cur, prev);
  }
  imap_free(&seen);
}

/* ---- rules 4, 6: events, happens-before, arena reuse ------------------------------------ */
/* Happens-before over the three streams with vector clocks: each stream has
 * a clock vector; an op ticks its stream's own component; record snapshots
 * the stream's vector into the event; wait joins the event's vector into the
 * stream's. Op a happens before op b iff b's vector has seen a's tick on a's
 * stream. The step is walked twice (the executor replays it), so arena reuse
 * is also checked across the end of one step and the start of the next. */
/* the buffers op touches: its operands, and for compute the trainer's */
static int op_bufs(const fp_prog *p, const fp_op *op, const int32_t **extra) {
  *extra = op->code == FP_OP_COMPUTE && op->nuses > 0 ? p->uses + op->uses : NULL;
  return *extra ? op->nuses : 0;
}

/* the range of buffer b holding op i, or NULL */
static range *range_of(vctx *v, int32_t b, int32_t i) {
  int32_t lo = v->rstart[b], hi = v->rstart[b + 1];
  while (hi - lo > 1) { /* last range with first <= i */
    int32_t mid = lo + (hi - lo) / 2;
    if (v->rg[mid].first <= i) lo = mid; else hi = mid;
  }
  if (lo < v->rstart[b + 1] && v->rg[lo].first <= i && i <= v->rg[lo].last) return &v->rg[lo];
  return NULL;
}

static void use_buf(vctx *v, int32_t b, int32_t i, int stream, const int64_t *vc, int step) {
  if (b < 0 || v->p->bufs[b].kind != FP_BUF_TRANSIENT) return;
  range *r = range_of(v, b, i);
  if (!r) {
    if (step == 1)
      verr(v, FP_VL_OP, i, "%s uses buffer '%s' outside its live ranges", fpi_op_name(v->p->ops[i].code),
           v->p->bufs[b].name);
    return;
  }
  if (step == 1 && vc[stream] > (int64_t)r->last1[stream]) {
    r->last1[stream] = (uint32_t)vc[stream];
    r->last1op[stream] = i;
  }
  uint32_t *mn = step == 1 ? r->min1 : r->min2;
  int32_t *mo = step == 1 ? r->min1op : r->min2op;
  for (int s = 0; s < FP_NSTREAMS; s++)
    if (vc[s] < (int64_t)mn[s]) {
      mn[s] = (uint32_t)vc[s];
      mo[s] = i;
    }
}

/* rule 8, for a report: the buffer sharing b's bytes (b itself first, then
 * the lowest index) whose last write (or read) on stream t was at clock
 * clk; O(buffers), only when an error is reported */
static int64_t own_clock(const vctx *v, int32_t z, int t, bool write) {
  if (v->al.lo[z] < 0) /* shares no byte: the alias clocks' own row for it is its clocks */
    return v->al.iso[(int64_t)v->al.row[z] * 2 * FP_NSTREAMS + (write ? 0 : FP_NSTREAMS) + t];
  const struct bufclk *c = &v->clk[v->al.row[z]];
  return write ? c->w[t] : c->r[t];
}

static int32_t alias_at(const vctx *v, int32_t b, int t, bool write, int64_t clk) {
  for (int32_t y = -1; y < v->p->nbufs; y++) {
    int32_t z = y < 0 ? b : y;
    if (y >= 0 && (y == b || !fpi_bufs_overlap(v->p, b, y))) continue;
    if (own_clock(v, z, t, write) == clk) return z;
  }
  FP_ASSERT(0);
  return b;
}

/* rule 8: op i on stream s (clock vc) touches a buffer; every earlier
 * conflicting access on another stream must happen before it */
static void race_check(vctx *v, int32_t i, int s, const int64_t *vc, int step, const fp_access *x) {
  const fp_prog *p = v->p;
  int64_t w[FP_NSTREAMS], r[FP_NSTREAMS];
  fpi_alias_clocks_max(&v->al, x->buf, s, w, r);
  for (int t = 0; t < FP_NSTREAMS && !race_stop(v); t++) {
    if (t == s) continue;
    bool ww = vc[t] < w[t], rw = x->write && vc[t] < r[t];
    if (!ww && !rw) continue;
    int64_t at = ww ? w[t] : r[t];
    int32_t j = v->clkop[t][at];
    int jstep = at > v->step1end[t] ? 2 : 1;
    if (step == 2 && jstep == 2) continue; /* reported in step 1 */
    int32_t y = alias_at(v, x->buf, t, ww, at);
    const char *how = ww ? (x->write ? "writes" : "reads") : "writes";
    const char *what = ww ? "wrote" : "read";
    char other[200] = "";
    if (y != x->buf) snprintf(other, sizeof other, " (it shares arena bytes with '%.120s')", p->bufs[y].name);
    char msg[768]; /* verr's room */
    snprintf(msg, sizeof msg, "%s (stream %s) %s buffer '%s' but op %" PRId32 "%s, which %s '%s'%s on stream %s, does not "
             "happen before it: a record/wait is missing", fpi_op_name(p->ops[i].code), fpi_stream_name(s), how,
             p->bufs[x->buf].name, j, step == 2 ? " of the previous step" : "", what, p->bufs[y].name, other,
             fpi_stream_name(t));
    if (!v->defer) {
      verr(v, FP_VL_OP, i, "%s", msg);
      return;
    }
    vhold(&v->pend, &v->npend, &v->cappend, FP_VL_OP, i, msg);
    return;
  }
}

static void race_note(vctx *v, int32_t i, int s, const int64_t *vc, int step, const fp_access *x) {
  (void)i, (void)step;
  struct bufclk *c = v->al.lo[x->buf] >= 0 ? &v->clk[v->al.row[x->buf]] : NULL;
  if (c && x->write) c->w[s] = vc[s];
  if (c && x->read) c->r[s] = vc[s];
  fpi_alias_clocks_note(&v->al, x->buf, s, x->read, x->write, vc[s]);
}

/* one buffer's ranges by (first, last), stably: most buffers have a few
 * (insertion sort), more go to fpi_sort_records (qsort moved the whole
 * records, 2% of a big compile) */
static uint64_t range_key(const void *rec, int k) {
  const range *r = rec;
  (void)k;
  return (uint64_t)(uint32_t)r->first << 32 | (uint32_t)r->last;
}

static void sort_ranges(range *r, int32_t n) {
  if (n > 16) {
    fpi_sort_records(r, sizeof *r, n, 1, range_key);
    return;
  }
  for (int32_t i = 1; i < n; i++) {
    uint64_t k = range_key(&r[i], 0);
    if (range_key(&r[i - 1], 0) <= k) continue;
    range x = r[i];
    int32_t j = i;
    for (; j > 0 && range_key(&r[j - 1], 0) > k; j--) r[j] = r[j - 1];
    r[j] = x;
  }
}

/* the live ranges of transient buffers: declared ones (checked here), or
 * first..last use for a buffer that declares none */
static bool build_ranges(vctx *v) {
  const fp_prog *p = v->p;
  int n0 = v->nerr;
  const int32_t *first = v->ufirst, *last = v->ulast; /* of every op: all are sound */
  bool *declared = calloc((size_t)p->nbufs + 1, 1);
  FP_ASSERT(declared);
  for (int32_t k = 0; k < p->nlives && !stop(v); k++) {
    const fp_ir_live *l = &p->lives[k];
    if (l->buf < 0 || l->buf >= p->nbufs)
      verr(v, FP_VL_LIVE, k, "buffer %" PRId32 " is out of range (%" PRId32 " buffers)", l->buf, p->nbufs);
    else if (p->bufs[l->buf].kind != FP_BUF_TRANSIENT)
      verr(v, FP_VL_LIVE, k, "buffer '%s' is persistent: only transient buffers have live ranges", p->bufs[l->buf].name);
    else if (l->first < 0 || l->first > l->last || l->last >= p->nops)
      verr(v, FP_VL_LIVE, k, "range %" PRId32 "..%" PRId32 " of buffer '%s' is not within ops 0..%" PRId32, l->first,
           l->last, p->bufs[l->buf].name, p->nops - 1);
    else
      declared[l->buf] = true;
  }
  if (v->nerr == n0) {
    /* by buffer (a counting sort, stable: the declared ranges in their
     * order, then a derived one), each buffer's by (first, last) */
    v->rstart = calloc((size_t)p->nbufs + 2, sizeof *v->rstart);
    int32_t *fill = malloc(((size_t)p->nbufs + 1) * sizeof *fill);
    FP_ASSERT(v->rstart && fill);
    for (int32_t k = 0; k < p->nlives; k++) v->rstart[p->lives[k].buf + 1]++;
    for (int32_t b = 0; b < p->nbufs; b++) {
      if (p->bufs[b].kind == FP_BUF_TRANSIENT && !declared[b] && first[b] >= 0) v->rstart[b + 1]++;
      v->rstart[b + 1] += v->rstart[b];
      fill[b] = v->rstart[b];
    }
    v->nrg = v->rstart[p->nbufs];
    v->rg = calloc((size_t)v->nrg + 1, sizeof *v->rg);
    FP_ASSERT(v->rg);
    for (int32_t k = 0; k < p->nlives; k++)
      v->rg[fill[p->lives[k].buf]++] =
          (range){.buf = p->lives[k].buf, .first = p->lives[k].first, .last = p->lives[k].last, .live = k};
    for (int32_t b = 0; b < p->nbufs; b++)
      if (fill[b] < v->rstart[b + 1]) v->rg[fill[b]++] = (range){.buf = b, .first = first[b], .last = last[b], .live = -1};
    free(fill);
    for (int32_t b = 0; b < p->nbufs; b++) sort_ranges(v->rg + v->rstart[b], v->rstart[b + 1] - v->rstart[b]);
    for (int32_t k = 0; k < v->nrg; k++) {
      range *r = &v->rg[k];
      for (int s = 0; s < FP_NSTREAMS; s++) r->min1[s] = r->min2[s] = UINT32_MAX;
      if (k > 0 && r[-1].buf == r->buf && r->first <= r[-1].last && !stop(v))
        verr(v, FP_VL_LIVE, r->live, "live ranges %" PRId32 "..%" PRId32 " and %" PRId32 "..%" PRId32
             " of buffer '%s' overlap", r[-1].first, r[-1].last, r->first, r->last, p->bufs[r->buf].name);
    }
  }
  free(declared);
  return v->nerr == n0;
}

/* Happens-before over the three streams with vector clocks: each stream has
 * a clock vector; an op ticks its stream's own component; record snapshots
 * the stream's vector into the event; wait joins the event's vector into the
 * stream's. Op a happens before op b iff b's vector has seen a's tick on a's
 * stream. The step is walked twice (the executor replays it), so arena reuse
 * is also checked across the end of one step and the start of the next.
 * Rule 4 (a wait needs an earlier record) is checked on the first walk. */
/* walk_clocks in its steps: the events' clocks (evmap: each event's dense
 * slot, given when the walk first meets it: through a table when the ids
 * are small, a compiled plan numbering its events 0..nevents-1, else a hash
 * map; at most nevops slots), each op's wait and record (op_clock), and what
 * the op notes for the later rules (op_notes) */
typedef struct evmap {
  int32_t *dense; /* event id -> slot, or NULL: the map */
  imap ev;
  int32_t nev;
  int64_t (*evc)[FP_NSTREAMS]; /* each slot's recorded clock */
  bool *recorded;
} evmap;

static void evmap_open(const vctx *v, evmap *m) {
  int32_t maxev = v->maxev;
  m->nev = 0;
  m->dense = maxev <= 2 * (int64_t)v->p->nops + 64 ? malloc(((size_t)maxev + 2) * sizeof *m->dense) : NULL;
  imap_init(&m->ev, m->dense ? 0 : 16);
  for (int32_t k = 0; m->dense && k <= maxev; k++) m->dense[k] = -1;
  m->evc = calloc((size_t)v->nevops + 1, sizeof *m->evc);
  m->recorded = calloc((size_t)v->nevops + 1, sizeof *m->recorded);
  FP_ASSERT(m->evc && m->recorded);
}

static void evmap_close(const vctx *v, evmap *m) {
  FP_ASSERT(m->nev <= v->nevops);
  imap_free(&m->ev);
  free(m->dense);
  free(m->evc);
  free(m->recorded);
}

static int32_t evmap_slot(evmap *m, int32_t id) {
  if (id < 0) return -1;
  if (m->dense) {
    if (m->dense[id] < 0) m->dense[id] = m->nev++;
    return m->dense[id];
  }
  bool fresh;
  int32_t e = imap_get_or_put(&m->ev, id, m->nev, &fresh);
  m->nev += fresh;
  return e;
}

/* op i on stream s: a wait joins its event's clock (rule 4: recorded
 * before), the stream ticks, a record keeps the clock */
static void op_clock(vctx *v, int32_t i, evmap *m, int64_t vc[FP_NSTREAMS][FP_NSTREAMS], bool races) {
  const fp_op *op = &v->p->ops[i];
  int s = op->stream;
  int32_t e = evmap_slot(m, op->event);
  if (op->code == FP_OP_WAIT) {
    if (!m->recorded[e]) {
      if (!races || v->defer) verr(v, FP_VL_OP, i, "wait on event %" PRId32 " that no earlier op records", op->event); /* rule 4 */
    } else {
      for (int k = 0; k < FP_NSTREAMS; k++)
        if (m->evc[e][k] > vc[s][k]) vc[s][k] = m->evc[e][k];
    }
  }
  vc[s][s]++;
  if (races) v->clkop[s][vc[s][s]] = i;
  if (op->code == FP_OP_RECORD) {
    memcpy(m->evc[e], vc[s], sizeof vc[s]);
    m->recorded[e] = true;
  }
}

/* op i's buffer uses (rules 6, 7) and accesses (rule 8), checked and noted */
static void op_notes(vctx *v, int32_t i, const int64_t *clock, int step, bool ranges, bool races) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  int s = op->stream;
  if (ranges) {
    const int32_t *extra;
    int ne = op_bufs(p, op, &extra);
    use_buf(v, op->dst.buf, i, s, clock, step);
    use_buf(v, op->src.buf, i, s, clock, step);
    use_buf(v, op->aux.buf, i, s, clock, step);
    for (int k = 0; k < ne; k++) use_buf(v, extra[k], i, s, clock, step);
  }
  if (races) {
    int na = fpi_op_accesses(p, op, v->acc);
    for (int k = 0; k < na && !race_stop(v); k++) race_check(v, i, s, clock, step, &v->acc[k]);
    for (int k = 0; k < na; k++) race_note(v, i, s, clock, step, &v->acc[k]);
  }
}

static void walk_clocks(vctx *v, bool ranges, bool races) {
  const fp_prog *p = v->p;
  int64_t vc[FP_NSTREAMS][FP_NSTREAMS];
  memset(vc, 0, sizeof vc);
  bool has_ops[FP_NSTREAMS], synced[FP_NSTREAMS];
  for (int t = 0; t < FP_NSTREAMS; t++) has_ops[t] = v->per[t] > 0;
  evmap m;
  evmap_open(v, &m);
  /* Step 2 (the next replay) only adds what crosses the step boundary. Once
   * stream s has seen all of step 1 (vc[s] >= step1end componentwise), an op
   * on s conflicts with no step-1 access (rule 8 reports only those in step
   * 2) and its uses cannot bring a range's min2 below a step-1 clock (all
   * check_reuse compares it with): its checks are skipped, with the same
   * findings. Its notes still feed the checks of streams not synced yet;
   * once every stream with ops is, nothing is left to check and the walk
   * ends (at 100,000 units: a third of the way into step 2). */
  int unsynced = 0;
  for (int step = 1; step <= (ranges || races ? 2 : 1); step++) {
    if (step == 2)
      for (int t = 0; t < FP_NSTREAMS; t++) {
        v->step1end[t] = vc[t][t];
        synced[t] = !has_ops[t];
        unsynced += !synced[t];
      }
    for (int32_t i = 0; i < p->nops; i++) {
      const fp_op *op = &p->ops[i];
      if (v->badop[i]) continue;
      int s = op->stream;
      op_clock(v, i, &m, vc, races);
      if (step == 2 && !synced[s]) {
        bool all = true;
        for (int t = 0; t < FP_NSTREAMS; t++) all &= vc[s][t] >= v->step1end[t];
        if (all) synced[s] = true, unsynced--;
      }
      if (step == 2 && synced[s]) {
        if (!unsynced) break;
        if (races) {
          int na = fpi_op_accesses(p, op, v->acc);
          for (int k = 0; k < na; k++) race_note(v, i, s, vc[s], step, &v->acc[k]);
        }
        continue;
      }
      op_notes(v, i, vc[s], step, ranges, races);
    }
  }
  evmap_close(v, &m);
}

/* Rule 6 over transient buffers that share arena bytes: every pair of live
 * ranges of two different such buffers must be disjoint and ordered by
 * happens-before, within a step and into the next. Pairs are not listed
 * (reuse makes them quadratic): the bytes are cut at the buffers' ends into
 * slots; each slot's ranges, by first op, are swept forward keeping per
 * stream the latest use of any earlier range (the best two buffers, so a
 * range is never compared with its own buffer), which every range must
 * follow; and backward keeping the latest use of any later range, which
 * each range's uses in the next step must follow. A pair is reported once
 * (in several slots, or failing more than one way). */
typedef struct best2 {
  int64_t v[2]; /* the largest value, and the largest of another buffer */
  int32_t buf[2], rg[2];
} best2;

static void best2_add(best2 *b, int64_t v, int32_t buf, int32_t rg) {
  if (buf == b->buf[0]) {
    if (v > b->v[0]) b->v[0] = v, b->rg[0] = rg;
  } else if (v > b->v[0]) {
    b->v[1] = b->v[0], b->buf[1] = b->buf[0], b->rg[1] = b->rg[0];
    b->v[0] = v, b->buf[0] = buf, b->rg[0] = rg;
  } else if (v > b->v[1]) {
    b->v[1] = v, b->buf[1] = buf, b->rg[1] = rg;
  }
}

/* the best value of a buffer other than buf: its range in *rg, or -1 */
static int64_t best2_other(const best2 *b, int32_t buf, int32_t *rg) {
  int k = b->buf[0] == buf ? 1 : 0;
  *rg = b->rg[k];
  return b->v[k];
}

static void best2_clear(best2 *b) {
  for (int k = 0; k < 2; k++) b->v[k] = -1, b->buf[k] = -1, b->rg[k] = -1;
}

/* report a pair of ranges once (x earlier, y later), as the first of its
 * findings in the order: live together, step 1, the next step */
static bool pair_fresh(imap *seen, const vctx *v, int32_t x, int32_t y) {
  bool fresh;
  imap_get_or_put(seen, (int64_t)x * v->nrg + y, 0, &fresh);
  return fresh;
}

/* the transient buffers ord[0..nt) of one arena */
/* check_reuse in its steps: the arena cut into slots at the buffers' ends,
 * each slot listing the live ranges over it by first op (reuse_slots),
 * then one sweep forward (live together, and step 1's order:
 * reuse_forward_slot) and one backward (the next step's order:
 * reuse_backward_slot) over each slot */
typedef struct slots {
  int32_t nslots;
  int64_t *start; /* slot z's ranges: list[start[z] .. start[z + 1]) */
  int32_t *list;
} slots;

static void reuse_slots(vctx *v, const int32_t *ord, int32_t nt, slots *S) {
  const fp_prog *p = v->p;
  int64_t *cut = malloc(2 * (size_t)nt * sizeof *cut);
  int32_t *slo = malloc((size_t)nt * sizeof *slo), *shi = malloc((size_t)nt * sizeof *shi);
  FP_ASSERT(cut && slo && shi);
  int32_t nc = 0;
  for (int32_t k = 0; k < nt; k++) {
    const fp_ir_buf *x = &p->bufs[ord[k]];
    cut[nc++] = x->offset;
    cut[nc++] = x->offset > INT64_MAX - x->bytes ? INT64_MAX : x->offset + x->bytes;
  }
  fpi_sort_u64((uint64_t *)cut, NULL, nc); /* offsets and ends are >= 0: they order as unsigned */
  int32_t u = 0;
  for (int32_t k = 0; k < nc; k++)
    if (u == 0 || cut[k] != cut[u - 1]) cut[u++] = cut[k];
  int32_t nslots = u - 1;
  /* the ranges of these buffers by first op, then each slot's list in that order */
  int32_t nr = 0;
  for (int32_t k = 0; k < nt; k++) nr += v->rstart[ord[k] + 1] - v->rstart[ord[k]];
  /* key: first op, then range (both >= 0); value: the buffer's place in ord */
  uint64_t *rkey = malloc(((size_t)nr + 1) * sizeof *rkey);
  int32_t *rbuf = malloc(((size_t)nr + 1) * sizeof *rbuf);
  int64_t *start = calloc((size_t)nslots + 2, sizeof *start);
  FP_ASSERT(rkey && rbuf && start);
  nr = 0;
  for (int32_t k = 0; k < nt; k++) {
    int32_t b = ord[k];
    const fp_ir_buf *x = &p->bufs[b];
    slo[k] = fpi_cut_slot(cut, u, x->offset);
    shi[k] = fpi_cut_slot(cut, u, x->offset > INT64_MAX - x->bytes ? INT64_MAX : x->offset + x->bytes);
    for (int32_t r = v->rstart[b]; r < v->rstart[b + 1]; r++) {
      rkey[nr] = (uint64_t)(uint32_t)v->rg[r].first << 32 | (uint32_t)r;
      rbuf[nr++] = k;
      for (int32_t z = slo[k]; z < shi[k]; z++) start[z + 1]++;
    }
  }
  fpi_sort_u64(rkey, rbuf, nr);
  for (int32_t z = 0; z < nslots; z++) start[z + 1] += start[z];
  int32_t *list = malloc(((size_t)start[nslots] + 1) * sizeof *list);
  int64_t *fill = malloc(((size_t)nslots + 1) * sizeof *fill);
  FP_ASSERT(list && fill);
  for (int32_t z = 0; z < nslots; z++) fill[z] = start[z];
  for (int32_t k = 0; k < nr; k++)
    for (int32_t z = slo[rbuf[k]]; z < shi[rbuf[k]]; z++) list[fill[z]++] = (int32_t)(uint32_t)rkey[k];
  *S = (slots){nslots, start, list};
  free(cut);
  free(slo);
  free(shi);
  free(rkey);
  free(rbuf);
  free(fill);
}

/* forward over slot z: live together, and step 1 order */
static void reuse_forward_slot(vctx *v, const slots *S, int32_t z, imap *seen) {
  const fp_prog *p = v->p;
  best2 last, use[FP_NSTREAMS];
  best2_clear(&last);
  for (int s = 0; s < FP_NSTREAMS; s++) best2_clear(&use[s]);
  for (int64_t k = S->start[z]; k < S->start[z + 1] && !stop(v); k++) {
    int32_t rk = S->list[k];
    const range *y = &v->rg[rk];
    int32_t xr;
    bool together = best2_other(&last, y->buf, &xr) >= y->first;
    if (together && pair_fresh(seen, v, xr, rk)) {
      const range *x = &v->rg[xr];
      verr(v, FP_VL_OP, y->first, "buffers '%s' (live over ops %" PRId32 "..%" PRId32 ") and '%s' (ops %" PRId32 "..%" PRId32
           ") share arena bytes and are live at the same time", p->bufs[x->buf].name, x->first, x->last,
           p->bufs[y->buf].name, y->first, y->last);
    }
    for (int s = 0; s < FP_NSTREAMS && !v->unordered && !together; s++) {
      int64_t lu = best2_other(&use[s], y->buf, &xr);
      if (lu <= 0 || y->min1[s] >= lu) continue;
      if (pair_fresh(seen, v, xr, rk)) {
        const range *x = &v->rg[xr];
        int32_t from = x->last1op[s], to = y->min1op[s];
        verr(v, FP_VL_OP, to, "buffer '%s' reuses the arena bytes of '%s' but op %" PRId32 " (a use of '%s', stream %s) "
             "does not happen before this op (stream %s): a record/wait is missing", p->bufs[y->buf].name,
             p->bufs[x->buf].name, from, p->bufs[x->buf].name, fpi_stream_name(p->ops[from].stream),
             fpi_stream_name(p->ops[to].stream));
      }
      break;
    }
    best2_add(&last, y->last, y->buf, rk);
    for (int s = 0; s < FP_NSTREAMS; s++) best2_add(&use[s], y->last1[s], y->buf, rk);
  }
}

/* backward over slot z: a later range's uses happen before an earlier one's in the next step */
static void reuse_backward_slot(vctx *v, const slots *S, int32_t z, imap *seen) {
  const fp_prog *p = v->p;
  best2 use[FP_NSTREAMS];
  for (int s = 0; s < FP_NSTREAMS; s++) best2_clear(&use[s]);
  for (int64_t k = S->start[z + 1] - 1; k >= S->start[z] && !stop(v); k--) {
    int32_t rk = S->list[k];
    const range *x = &v->rg[rk];
    for (int s = 0; s < FP_NSTREAMS; s++) {
      int32_t yr;
      int64_t lu = best2_other(&use[s], x->buf, &yr);
      if (lu <= 0 || x->min2[s] >= lu) continue;
      const range *y = &v->rg[yr];
      if (y->first <= x->last) continue; /* live together: reported above */
      if (pair_fresh(seen, v, rk, yr)) {
        int32_t from = y->last1op[s], to = x->min2op[s];
        verr(v, FP_VL_OP, to, "buffer '%s' reuses the arena bytes of '%s' in the next step but op %" PRId32
             " (the previous step's use of '%s', stream %s) does not happen before this op (stream %s): a record/wait "
             "is missing", p->bufs[x->buf].name, p->bufs[y->buf].name, from, p->bufs[y->buf].name,
             fpi_stream_name(p->ops[from].stream), fpi_stream_name(p->ops[to].stream));
      }
      break;
    }
    for (int s = 0; s < FP_NSTREAMS; s++) best2_add(&use[s], x->last1[s], x->buf, rk);
  }
}

static void check_reuse(vctx *v, const int32_t *ord, int32_t nt) {
  if (nt < 2) return;
  slots S;
  reuse_slots(v, ord, nt, &S);
  imap seen;
  imap_init(&seen, 16);
  for (int32_t z = 0; z < S.nslots && !stop(v); z++) reuse_forward_slot(v, &S, z, &seen);
  for (int32_t z = 0; z < S.nslots && !stop(v) && !v->unordered; z++) reuse_backward_slot(v, &S, z, &seen);
  imap_free(&seen);
  free(S.start);
  free(S.list);
}

static void check_arena(vctx *v) {
  const fp_prog *p = v->p;
  int32_t *ord = malloc(((size_t)p->nbufs + 1) * sizeof *ord);
  uint64_t *key = malloc(((size_t)p->nbufs + 1) * sizeof *key);
  FP_ASSERT(ord && key);
  for (int host = 0; host < 2 && !stop(v); host++) {
    /* the placed buffers by offset, then buffer: a stable radix sort of
     * the offsets (>= 0) carrying the buffers, listed in order */
    int32_t n = 0;
    for (int32_t b = 0; b < p->nbufs; b++) {
      const fp_ir_buf *x = &p->bufs[b];
      if (x->host == host && x->offset >= 0 && x->bytes > 0 && (unsigned)x->kind <= FP_BUF_TRANSIENT)
        key[n] = (uint64_t)x->offset, ord[n++] = b;
    }
    fpi_sort_u64(key, ord, n);
    /* persistent: overlaps nothing (one sweep with the furthest ends so far) */
    int64_t end_all = 0, end_pers = 0;
    int32_t who_all = -1, who_pers = -1;
    for (int32_t k = 0; k < n && !stop(v); k++) {
      const fp_ir_buf *x = &p->bufs[ord[k]];
      bool pers = x->kind == FP_BUF_PERSISTENT;
      if (pers && who_all >= 0 && end_all > x->offset)
        verr(v, FP_VL_BUF, ord[k], "persistent buffer overlaps buffer '%s' in the %s arena (persistent buffers own their bytes)",
             p->bufs[who_all].name, host ? "host" : "device");
      else if (!pers && who_pers >= 0 && end_pers > x->offset)
        verr(v, FP_VL_BUF, ord[k], "buffer overlaps persistent buffer '%s' in the %s arena", p->bufs[who_pers].name,
             host ? "host" : "device");
      int64_t e = x->offset > INT64_MAX - x->bytes ? INT64_MAX : x->offset + x->bytes;
      if (e > end_all) end_all = e, who_all = ord[k];
      if (pers && e > end_pers) end_pers = e, who_pers = ord[k];
    }
    /* transient buffers that share bytes */
    int32_t nt = 0;
    for (int32_t k = 0; k < n; k++)
      if (p->bufs[ord[k]].kind == FP_BUF_TRANSIENT) ord[nt++] = ord[k];
    if (!stop(v)) check_reuse(v, ord, nt);
  }
  free(ord);
  free(key);
}

/* ---- driver ------------------------------------------------------------------------- */
/* rules 1-3 op by op, on one walk that also gathers what the later rules
 * size their state by (each walk of 2.2M ops reads 334 MB): per buffer its
 * first and last use, the most uses of an op, ops per stream, the largest
 * event id and the ops that name one, and whether check_groups has
 * anything to report. With segs (a segment table without errors), each
 * op's segment too: false, at once, for an op outside the one it names. */
static bool check_ops(vctx *v, predcache *pc, bool tables_ok, bool segs, int32_t *np2p) {
  const fp_prog *p = v->p;
  for (int32_t b = 0; b < p->nbufs; b++) v->ufirst[b] = v->ulast[b] = -1;
  memset(v->badop, 0, (size_t)p->nops * sizeof *v->badop);
  memset(v->per, 0, sizeof v->per);
  v->maxuses = v->nevops = 0;
  v->maxev = -1;
  v->groups_bad = false;
  *np2p = 0;
  groupscan gs;
  groupscan_init(&gs);
  int32_t seg = 0, i = 0; /* the segment op i lies in */
  for (; i < p->nops && !stop(v); i++) {
    const fp_op *op = &p->ops[i];
    int n0 = v->nerr;
    if (segs) {
      while (i >= p->segs[seg].first + p->segs[seg].nops) seg++;
      if (op->seg != seg) {
        imap_free(&gs.seen);
        return false;
      }
    }
    if (!v->groups_bad) v->groups_bad = !groupscan_ok(&gs, p, i);
    if (!check_op_structure(v, i)) {
      v->badop[i] = true;
      continue;
    }
    check_op_dtypes(v, i);
    if (v->nerr == n0 && tables_ok) check_op_operands(v, i);
    if (v->nerr == n0) check_predicate(v, pc, i);
    if (v->nerr != n0) {
      v->badop[i] = true;
      continue;
    }
    *np2p += op->code == FP_OP_SEND || op->code == FP_OP_RECV;
    const int32_t *extra;
    int ne = op_bufs(p, op, &extra);
    int32_t bs[3] = {op->dst.buf, op->src.buf, op->aux.buf};
    for (int k = 0; k < 3 + ne; k++) {
      int32_t b = k < 3 ? bs[k] : extra[k - 3];
      if (b < 0) continue;
      if (v->ufirst[b] < 0) v->ufirst[b] = i;
      v->ulast[b] = i;
    }
    if (op->nuses > v->maxuses) v->maxuses = op->nuses;
    v->per[op->stream]++;
    if (op->event > v->maxev) v->maxev = op->event;
    v->nevops += op->event >= 0;
  }
  imap_free(&gs.seen);
  for (; segs && i < p->nops; i++) { /* the ops after a stop: only their segments */
    while (i >= p->segs[seg].first + p->segs[seg].nops) seg++;
    if (p->ops[i].seg != seg) return false;
  }
  return true;
}

bool fpi_ir_verify_with(const fp_prog *p, fp_vreport report, void *rctx, unsigned flags) {
  vctx v = {.p = p, .report = report, .rctx = rctx, .unordered = flags & FP_VERIFY_UNORDERED};
  predcache pc = {0};
  if (!check_header(&v)) return false;
  v.tiedp = malloc(((size_t)p->nparams + 1) * sizeof *v.tiedp);
  FP_ASSERT(v.tiedp);
  for (int32_t j = 0; j < p->nparams; j++)
    if (p->params[j].nusers > 0) v.tiedp[v.ntied++] = j;
  v.tied = v.ntied > 0;
  v.tabs = calloc((size_t)p->ntabs + 1, sizeof *v.tabs);
  v.badop = calloc((size_t)p->nops + 1, sizeof *v.badop);
  FP_ASSERT(v.tabs && v.badop);
  check_comms(&v);
  check_tables(&v);
  check_bufs(&v);
  check_mods(&v);
  check_params(&v);
  bool tables_ok = v.nerr == 0;
  bool segs_ok = check_segments(&v);
  int32_t np2p = 0;
  v.ufirst = malloc(((size_t)p->nbufs + 1) * sizeof *v.ufirst);
  v.ulast = malloc(((size_t)p->nbufs + 1) * sizeof *v.ulast);
  FP_ASSERT(v.ufirst && v.ulast);
  if (segs_ok) {
    /* op.seg on the same walk (2.2M ops are 334 MB to read), reports held */
    int n0 = v.nerr;
    v.hold = true;
    bool in_segs = check_ops(&v, &pc, tables_ok, true, &np2p);
    v.hold = false;
    for (int32_t k = 0; k < v.nheld; k++) {
      if (in_segs) v.report(v.rctx, p, v.held[k].what, v.held[k].i, v.held[k].msg);
      free(v.held[k].msg);
    }
    v.nheld = 0;
    if (!in_segs) { /* as if check_segments had walked the ops first */
      v.nerr = n0;
      segs_ok = check_op_segs(&v);
      check_ops(&v, &pc, tables_ok, false, &np2p);
    }
  } else {
    check_ops(&v, &pc, tables_ok, false, &np2p);
  }
  /* (it reports nothing when the walk saw nothing wrong) */
  if (!stop(&v) && v.groups_bad) check_groups(&v);
  if (!stop(&v)) check_p2p(&v, np2p);
  if (!stop(&v) && tables_ok && segs_ok) {
    /* rule 6 needs a program whose ops are all sound; rule 4 does not */
    bool ranges = v.nerr == 0 && build_ranges(&v);
    if (ranges && !v.unordered) {
      /* rule 8's state */
      fpi_alias_clocks_init(p, &v.al);
      v.have_al = true;
      v.clk = calloc((size_t)v.al.ntree + 1, sizeof *v.clk);
      v.acc = malloc(((size_t)v.maxuses + FP_MAX_OPND_ACCESS) * sizeof *v.acc);
      FP_ASSERT(v.clk && v.acc);
      for (int t = 0; t < FP_NSTREAMS; t++) { /* a stream ticks once per op of its own, each step */
        v.clkop[t] = malloc((2 * (size_t)v.per[t] + 2) * sizeof *v.clkop[t]);
        FP_ASSERT(v.clkop[t]);
      }
    }
    /* rule 8 last: its findings would only repeat rule 6's (checked on
     * the same walk, reported once rules 4 and 6 found nothing) */
    v.defer = v.have_al;
    walk_clocks(&v, ranges, v.have_al);
    if (ranges && v.nerr == 0) check_arena(&v);
    v.defer = false;
    bool clean = v.nerr == 0;
    for (int32_t k = 0; k < v.npend; k++) {
      if (clean) verr(&v, v.pend[k].what, v.pend[k].i, "%s", v.pend[k].msg);
      free(v.pend[k].msg);
    }
  }
  pred_free(&pc);
  if (v.have_al) fpi_alias_clocks_free(&v.al);
  for (int t = 0; t < FP_NSTREAMS; t++) free(v.clkop[t]);
  free(v.clk);
  free(v.acc);
  free(v.tabs);
  free(v.tiedp);
  free(v.badop);
  free(v.ufirst);
  free(v.ulast);
  free(v.rg);
  free(v.rstart);
  free(v.pend);
  free(v.held);
  if (v.nerr == 0 && (flags & FP_VERIFY_SEM) && !(flags & FP_VERIFY_UNORDERED))
    return fpi_ir_verify_sem_with(p, report, rctx);
  return v.nerr == 0;
}

/* ---- fpi_ir_verify: messages located in .fpir or by index ------------------------------ */
typedef struct fpir_loc {
  fp_diag *d;
  const fp_src *src;
} fpir_loc;

/* The line of the nth (0-based) directive WORD in .fpir text, and the column
 * of its value; 0 when there is none. Directives start their lines. */
static int32_t directive_line(const fp_src *src, const char *word, size_t wlen, int64_t nth, int32_t *col) {
  if (!src || !wlen) return 0;
  int32_t line = 1;
  for (size_t b = 0; b < src->len; line++) {
    const char *t = src->text + b, *nl = memchr(t, '\n', src->len - b);
    size_t len = nl ? (size_t)(nl - t) : src->len - b;
    if (len > wlen && !memcmp(t, word, wlen) && (t[wlen] == ' ' || t[wlen] == '\t') && nth-- == 0) {
      size_t c = wlen;
      while (c < len && (t[c] == ' ' || t[c] == '\t')) c++;
      *col = (int32_t)c + 1;
      return line;
    }
    if (!nl) break;
    b += len + 1;
  }
  return 0;
}

static void report_fpir(void *ctx, const fp_prog *p, fp_vloc what, int64_t i, const char *msg) {
  fpir_loc *l = ctx;
  int32_t line = 0, col = 1;
  char obj[200];
  const char *nm = NULL, *kind = NULL;
  switch (what) {
    case FP_VL_PROG:
      /* a header field's message starts with its directive ("world_size 0
       * is out of range"); the rest are about the ops, or the whole file */
      snprintf(obj, sizeof obj, "program");
      line = directive_line(l->src, msg, strcspn(msg, " "), 0, &col);
      if (!line && p->nops > 0 && strstr(msg, " ops but no segment")) line = p->ops[0].line, col = 1;
      if (!line) line = directive_line(l->src, "fpir", 4, 0, &col), col = 1;
      break;
    case FP_VL_OP: line = p->ops[i].line; snprintf(obj, sizeof obj, "op %" PRId64, i); break;
    case FP_VL_SEG: line = p->segs[i].line; snprintf(obj, sizeof obj, "segment %" PRId64, i); break;
    case FP_VL_COMM: line = p->comms[i].line, nm = p->comms[i].name, kind = "comm"; break;
    case FP_VL_TAB: line = p->tabs[i].line, nm = p->tabs[i].name, kind = "table"; break;
    case FP_VL_BUF: line = p->bufs[i].line, nm = p->bufs[i].name, kind = "buffer"; break;
    case FP_VL_MODULE: line = p->mods[i].line, nm = p->mods[i].name, kind = "module"; break;
    case FP_VL_BUCKET:
      nm = p->buckets[i], kind = "bucket";
      line = directive_line(l->src, "bucket", 6, i, &col); /* bucket lines come in index order */
      break;
    case FP_VL_PARAM: line = p->params[i].line, nm = p->params[i].name, kind = "param"; break;
    case FP_VL_LIVE: {
      int32_t b = p->lives[i].buf;
      bool ok = b >= 0 && b < p->nbufs;
      line = ok ? p->bufs[b].line : 0;
      snprintf(obj, sizeof obj, "live range %" PRId64 " of buffer %s'%.120s'", i, ok ? "" : "?", ok ? p->bufs[b].name : "");
      break;
    }
  }
  if (kind) snprintf(obj, sizeof obj, "%s %" PRId64 " '%.120s'", kind, i, nm ? nm : "");
  char where[1100];
  if (l->src && line > 0)
    snprintf(where, sizeof where, "%.1000s:%" PRId32 ":%" PRId32, l->src->path, line, col);
  else
    snprintf(where, sizeof where, "%.1000s", l->src ? l->src->path : "<plan>");
  fpi_diag_errorf(l->d, where, "%s: %s", obj, msg);
}

bool fpi_ir_verify_flags(const fp_prog *p, fp_diag *d, const fp_src *src, unsigned flags) {
  fpir_loc l = {d, src};
  return fpi_ir_verify_with(p, report_fpir, &l, flags);
}

bool fpi_ir_verify_sem_only(const fp_prog *p, fp_diag *d, const fp_src *src) {
  fpir_loc l = {d, src};
  return fpi_ir_verify_sem_with(p, report_fpir, &l);
}

bool fpi_ir_verify(const fp_prog *p, fp_diag *d, const fp_src *src) {
  return fpi_ir_verify_flags(p, d, src, 0);
}
