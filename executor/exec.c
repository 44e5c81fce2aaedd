/* exec.c - the executor's backend-independent half: create (check the plan
 * against this rank, resolve it, let the backend allocate and connect),
 * hooks (plan order), views, statistics, destroy.
 *
 * The plan reader has already verified the program for every rank. Before
 * any byte of the arena is touched, create checks again, for this rank and
 * against the sizes the arena will have, everything the hooks will use:
 * every buffer is placed and lies inside its arena; every op this rank runs
 * has its operands (count x dtype, pitches, tables resolved at this rank's
 * index) inside their buffers, with overflow-checked arithmetic; every
 * extent table an op or param uses has one non-negative entry per member of
 * its communicator; every param view holds what this rank stores of the
 * param. So a hostile plan that slips past the verifier still cannot make a
 * hook read or write outside the arena (docs/executor.md lists the checks).
 *
 * Resolution turns the SPMD program into this rank's program (fp_xop): ops
 * it skips (`only`) and compute placeholders are dropped; counts and
 * operand offsets are computed once; each wait is tied to the record it
 * waits for (the last one before it in program order, else the previous
 * step's last one, else none: a no-op); each stream gets its op list, each
 * segment its end position on every stream.
 *
 * Before all that, a plan whose load did not run the semantic check (rule
 * 9, ir/verify_sem.c) gets it here, unless its load opted out
 * (FP_LOAD_NO_SEMANTIC): a plan `flexplan verify` rejects never runs. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "base/placement.h"

/* ---- helpers ------------------------------------------------------------------ */
fp_status fpx_fail(fp_exec *x, fp_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->msg, sizeof x->msg, fmt, ap);
  va_end(ap);
  return st;
}

int64_t fpx_send_bytes(const fp_xop *o) {
  int64_t sz = fpi_dtype_size(o->dtype);
  switch (o->code) {
    case FP_OP_REDUCE_SCATTER: return o->G * o->n * sz;
    case FP_OP_REDUCE_SCATTER_V: {
      int64_t t = 0;
      for (int64_t j = 0; j < o->G; j++) t += o->tab_cnt[j];
      return t * sz;
    }
    case FP_OP_BROADCAST: return o->g == o->root ? o->n * sz : 0;
    case FP_OP_RECV: return 0;
    default: return o->n * sz;
  }
}

void *fpx_alloc(fp_exec *x, size_t n, size_t size) {
  x->stats.allocations++;
  if (x->in_hook) x->stats.hook_allocations++;
  return calloc(n ? n : 1, size ? size : 1);
}

void fpx_free(void *p) { free(p); }

const char *fpx_seg_label(const fp_exec *x, int32_t k, char *buf, size_t len) {
  const fp_seg *s = &x->prog->segs[k];
  if (fpi_seg_has_module(s->kind))
    snprintf(buf, len, "%s(%s)", fpi_seg_name(s->kind), x->prog->mods[s->module].name);
  else
    snprintf(buf, len, "%s", fpi_seg_name(s->kind));
  return buf;
}

/* ---- operands ------------------------------------------------------------------ */
enum { DST = 0, SRC = 1, AUX = 2 };

static unsigned operands_of(fp_opcode c) {
  switch (c) {
    case FP_OP_SEND: return 1u << SRC;
    case FP_OP_RECV:
    case FP_OP_SCALE:
    case FP_OP_MEMSET: return 1u << DST;
    case FP_OP_QUANTIZE_MXFP8:
    case FP_OP_DEQUANTIZE_MXFP8: return 1u << DST | 1u << SRC | 1u << AUX;
    case FP_OP_RECORD:
    case FP_OP_WAIT:
    case FP_OP_COMPUTE: return 0;
    default: return 1u << DST | 1u << SRC;
  }
}

static fp_dtype opnd_dtype(const fp_op *op, int w) {
  switch (op->code) {
    case FP_OP_QUANTIZE_MXFP8: return w == DST ? FP_E4M3 : w == AUX ? FP_E8M0 : op->sdtype;
    case FP_OP_DEQUANTIZE_MXFP8: return w == SRC ? FP_E4M3 : w == AUX ? FP_E8M0 : op->dtype;
    case FP_OP_H2D:
    case FP_OP_D2H: return FP_U8;
    default: return w == SRC ? op->sdtype : op->dtype;
  }
}

/* bytes operand w of op (rows and pitches sh) covers on this rank (count n,
 * comm size G); false on overflow */
static bool opnd_extent(const fp_op *op, const fp_op_shape *sh, int w, int64_t n, int64_t G, int64_t tab_end,
                        int64_t *out) {
  int64_t sz = fpi_dtype_size(opnd_dtype(op, w)), t;
  switch (op->code) {
    case FP_OP_ALL_GATHER: return fpi_mul64(w == DST ? G : 1, n, &t) && fpi_mul64(t, sz, out);
    case FP_OP_REDUCE_SCATTER: return fpi_mul64(w == SRC ? G : 1, n, &t) && fpi_mul64(t, sz, out);
    case FP_OP_ALL_GATHER_V: return fpi_mul64(w == DST ? tab_end : n, sz, out);
    case FP_OP_REDUCE_SCATTER_V: return fpi_mul64(w == SRC ? tab_end : n, sz, out);
    case FP_OP_COPY:
      return fpi_mul64(sh->rows - 1, w == DST ? sh->dpitch : sh->spitch, &t) && fpi_mul64(n, sz, out) &&
             fpi_add64(t, *out, out);
    case FP_OP_SPLIT_COPY:
    case FP_OP_CHUNK_CAT: /* the table side ends at tab_end elements (max off + rows * cnt); the other is rows of n */
      if ((op->code == FP_OP_SPLIT_COPY) == (w == DST)) return fpi_mul64(tab_end, sz, out);
      return fpi_mul64(sh->rows - 1, w == DST ? sh->dpitch : sh->spitch, &t) && fpi_mul64(n, sz, out) &&
             fpi_add64(t, *out, out);
    case FP_OP_QUANTIZE_MXFP8:
    case FP_OP_DEQUANTIZE_MXFP8:
      if (w == AUX) {
        *out = (n + 31) / 32;
        return true;
      }
      return fpi_mul64(n, sz, out);
    default: return fpi_mul64(n, sz, out);
  }
}

/* the table an op or param uses: n == G entries, every one >= 0, off + cnt
 * fits; *end = max(off + cnt) */
static fp_status check_table(fp_exec *x, int32_t t, int64_t G, const char *who, int64_t *end) {
  const fp_ir_table *tab = &x->prog->tabs[t];
  if (tab->n != G)
    return fpx_fail(x, FP_ERR_PLAN, "%s: extent table '%s' has %" PRId64 " entries, its communicator %" PRId64, who,
                    tab->name, tab->n, G);
  *end = 0;
  for (int64_t j = 0; j < tab->n; j++) {
    int64_t e;
    if (tab->off[j] < 0 || tab->cnt[j] < 0 || !fpi_add64(tab->off[j], tab->cnt[j], &e))
      return fpx_fail(x, FP_ERR_PLAN, "%s: extent table '%s' entry %" PRId64 " is invalid", who, tab->name, j);
    if (e > *end) *end = e;
  }
  return FP_OK;
}

/* a region table (split_copy, chunk_cat): entries >= 0, their counts sum to
 * n, *end = max(off + rows * cnt) without overflow */
static fp_status check_regions(fp_exec *x, const fp_op *op, const char *who, int64_t *end) {
  const fp_ir_table *tab = &x->prog->tabs[op->tab];
  int64_t sum = 0;
  *end = 0;
  for (int64_t j = 0; j < tab->n; j++) {
    int64_t e, t;
    if (tab->off[j] < 0 || tab->cnt[j] < 0 || !fpi_mul64(fpi_op_shape_of(x->prog, op).rows, tab->cnt[j], &t) ||
        !fpi_add64(tab->off[j], t, &e) ||
        !fpi_add64(sum, tab->cnt[j], &sum))
      return fpx_fail(x, FP_ERR_PLAN, "%s: region table '%s' entry %" PRId64 " is invalid", who, tab->name, j);
    if (e > *end) *end = e;
  }
  if (sum != op->count || op->comm >= 0)
    return fpx_fail(x, FP_ERR_PLAN, "%s: region table '%s' does not fit the op", who, tab->name);
  return FP_OK;
}

/* ---- resolution ------------------------------------------------------------------ */
static bool runs_here(const fp_exec *x, const fp_op *op) {
  if (op->code == FP_OP_COMPUTE) return false;
  if (op->only < 0) return true;
  return fpi_comm_index(&x->prog->comms[op->only_comm], x->rank) == op->only;
}

static fp_status check_buffers(fp_exec *x) {
  const fp_prog *p = x->prog;
  if (p->arena_bytes < 0 || p->host_bytes < 0)
    return fpx_fail(x, FP_ERR_PLAN, "plan: arena sizes %" PRId64 "/%" PRId64 " are negative", p->arena_bytes,
                    p->host_bytes);
  for (int32_t b = 0; b < p->nbufs; b++) {
    const fp_ir_buf *B = &p->bufs[b];
    int64_t end, cap = B->host ? p->host_bytes : p->arena_bytes;
    if (B->offset < 0)
      return fpx_fail(x, FP_ERR_PLAN, "plan: buffer '%s' has no arena offset (the plan was not memory-planned)",
                      B->name);
    if (B->bytes < 0 || !fpi_add64(B->offset, B->bytes, &end) || end > cap)
      return fpx_fail(x, FP_ERR_PLAN,
                      "plan: buffer '%s' [%" PRId64 ", +%" PRId64 ") lies outside the %s arena (%" PRId64 " bytes)",
                      B->name, B->offset, B->bytes, B->host ? "host" : "device", cap);
  }
  return FP_OK;
}

/* resolve_op in its steps: the op's fields (xop_init), its table
 * (resolve_table), each operand's bytes in the arena (resolve_operand), and
 * whether it runs in place (inplace_on_rank) */
static void xop_init(const fp_exec *x, int32_t i, fp_xop *o) {
  const fp_prog *p = x->prog;
  const fp_op *op = &p->ops[i];
  fp_op_shape sh = fpi_op_shape_of(p, op);
  *o = (fp_xop){.index = i,
                .code = op->code,
                .stream = op->stream,
                .dtype = op->dtype,
                .sdtype = op->sdtype,
                .comm = op->comm,
                .group = op->group,
                .g = 0,
                .G = 1,
                .n = op->count,
                .root = op->root,
                .rows = sh.rows,
                .dpitch = sh.dpitch,
                .spitch = sh.spitch,
                .alpha = op->alpha,
                .red = op->red,
                .off = {-1, -1, -1},
                .event = op->event,
                .done_step = -1};
  if (op->comm >= 0) {
    o->G = p->comms[op->comm].size;
    o->g = fpi_comm_index(&p->comms[op->comm], x->rank);
  }
}

/* the op's table checked against its communicator (or its regions); *tab_end: where the table ends */
static fp_status resolve_table(fp_exec *x, const fp_op *op, fp_xop *o, const char *who, int64_t *tab_end) {
  const fp_prog *p = x->prog;
  fp_op_shape sh = fpi_op_shape_of(p, op);
  bool regions = fpi_op_regions(op->code);
  *tab_end = 0;
  if (regions && (op->tab < 0 || sh.rows < 1 || op->dst.tabrel || op->src.tabrel))
    return fpx_fail(x, FP_ERR_PLAN, "%s: needs a region table and rows >= 1", who);
  if (op->tab < 0) return FP_OK;
  if (regions) FPX_CHECK(check_regions(x, op, who, tab_end));
  else FPX_CHECK(check_table(x, op->tab, o->G, who, tab_end));
  o->tab_off = p->tabs[op->tab].off;
  o->tab_cnt = p->tabs[op->tab].cnt;
  o->ntab = p->tabs[op->tab].n;
  return FP_OK;
}

/* operand w's bytes on this rank, inside its buffer: o->off[w], o->host[w] */
static fp_status resolve_operand(fp_exec *x, const fp_op *op, fp_xop *o, int w, int64_t tab_end, const char *who) {
  const fp_prog *p = x->prog;
  fp_op_shape sh = fpi_op_shape_of(p, op);
  const fp_region *regs[3] = {&op->dst, &op->src, &op->aux};
  const fp_region *r = regs[w];
  if (r->buf < 0 || r->buf >= p->nbufs) return fpx_fail(x, FP_ERR_PLAN, "%s: operand %d has no buffer", who, w);
  const fp_ir_buf *B = &p->bufs[r->buf];
  fp_dtype dt = opnd_dtype(op, w);
  int64_t start, ext, end, t;
  bool ok = fpi_mul64(o->g, r->stride, &t) && fpi_add64(r->off, t, &start);
  if (ok && r->tabrel) ok = op->tab >= 0 && fpi_mul64(o->tab_off[o->g], fpi_dtype_size(dt), &t) && fpi_add64(start, t, &start);
  ok = ok && opnd_extent(op, &sh, w, o->n, o->G, tab_end, &ext) && fpi_add64(start, ext, &end);
  if (!ok || start < 0 || end > B->bytes)
    return fpx_fail(x, FP_ERR_PLAN, "%s: %s operand lies outside buffer '%s' (%" PRId64 " bytes) on rank %" PRId64, who,
                    w == DST ? "dst" : w == SRC ? "src" : "aux", B->name, B->bytes, x->rank);
  o->off[w] = B->offset + start; /* inside the arena: check_buffers */
  o->host[w] = B->host;
  return FP_OK;
}

/* the in-place forms of ops.def (the verifier allows no other overlap) */
static bool inplace_on_rank(const fp_op *op, const fp_xop *o, unsigned need) {
  int64_t sz = fpi_dtype_size(op->dtype);
  bool same = (need & 1u << SRC) && (need & 1u << DST) && o->host[DST] == o->host[SRC];
  int64_t d = o->off[DST], s = o->off[SRC];
  switch (op->code) {
    case FP_OP_ALL_GATHER: return same && s == d + o->g * o->n * sz;
    case FP_OP_ALL_GATHER_V: return same && s == d + o->tab_off[o->g] * sz;
    case FP_OP_REDUCE_SCATTER: return same && d == s + o->g * o->n * sz;
    case FP_OP_REDUCE_SCATTER_V: return same && d == s + o->tab_off[o->g] * sz;
    case FP_OP_ALL_REDUCE:
    case FP_OP_BROADCAST:
    case FP_OP_REDUCE: return same && s == d;
    default: return false;
  }
}

static fp_status resolve_op(fp_exec *x, int32_t i, fp_xop *o) {
  const fp_prog *p = x->prog;
  const fp_op *op = &p->ops[i];
  fp_op_shape sh = fpi_op_shape_of(p, op);
  char who[64];
  snprintf(who, sizeof who, "plan: op %" PRId32 " (%s)", i, fpi_op_name(op->code));
  xop_init(x, i, o);
  int64_t tab_end;
  FPX_CHECK(resolve_table(x, op, o, who, &tab_end));
  o->n = fpi_op_count(p, op, o->g);
  if (o->n < 0) return fpx_fail(x, FP_ERR_PLAN, "%s: count %" PRId64 " is negative", who, o->n);
  if ((op->code == FP_OP_COPY || fpi_op_regions(op->code)) && (sh.rows < 1 || sh.dpitch < 0 || sh.spitch < 0))
    return fpx_fail(x, FP_ERR_PLAN, "%s: rows/pitches are invalid", who);
  unsigned need = operands_of(op->code);
  for (int w = 0; w < 3; w++)
    if (need & 1u << w) FPX_CHECK(resolve_operand(x, op, o, w, tab_end, who));
  o->inplace = inplace_on_rank(op, o, need);
  if ((op->code == FP_OP_BROADCAST || op->code == FP_OP_REDUCE || op->code == FP_OP_SEND || op->code == FP_OP_RECV) &&
      (op->root < 0 || op->root >= o->G))
    return fpx_fail(x, FP_ERR_PLAN, "%s: root %" PRId32 " is not a rank of its communicator", who, op->root);
  return FP_OK;
}

static fp_status resolve(fp_exec *x) {
  const fp_prog *p = x->prog;
  fp_status st = FP_OK;
  int32_t *last = NULL;
  if (p->nsegs < 1) return fpx_fail(x, FP_ERR_PLAN, "plan: no segments");
  FPX_CHECK(check_buffers(x));
  int32_t n = 0;
  for (int32_t i = 0; i < p->nops; i++) n += runs_here(x, &p->ops[i]);
  x->xops = fpx_alloc(x, (size_t)n, sizeof *x->xops);
  x->seg_end = fpx_alloc(x, (size_t)p->nsegs, sizeof *x->seg_end);
  last = fpx_alloc(x, (size_t)p->nevents + 1, sizeof *last);
  if (!x->xops || !x->seg_end || !last) {
    st = fpx_fail(x, FP_ERR_NOMEM, "out of memory resolving the plan");
    goto fail;
  }
  for (int32_t e = 0; e < p->nevents; e++) last[e] = -1;
  int32_t cnt[FP_NSTREAMS] = {0};
  for (int32_t k = 0, i = 0; k < p->nsegs; k++) {
    for (; i < p->segs[k].first + p->segs[k].nops; i++) {
      const fp_op *op = &p->ops[i];
      if (!runs_here(x, op)) continue;
      fp_xop *o = &x->xops[x->nxops];
      FPX_CHECK_GOTO(resolve_op(x, i, o), st, fail);
      if (o->code == FP_OP_WAIT && last[o->event] >= 0) o->rec = &x->xops[last[o->event]];
      if (o->code == FP_OP_RECORD) last[o->event] = x->nxops;
      cnt[o->stream]++;
      x->nxops++;
    }
    memcpy(x->seg_end[k], cnt, sizeof cnt);
  }
  /* waits before any record of their event in the step wait for the
   * previous step's last record (none in the first step) */
  for (int32_t j = 0; j < x->nxops; j++) {
    fp_xop *o = &x->xops[j];
    if (o->code == FP_OP_WAIT && !o->rec && last[o->event] >= 0) {
      o->rec = &x->xops[last[o->event]];
      o->rec_prev = true;
    }
  }
  for (int s = 0; s < FP_NSTREAMS; s++) {
    x->sops[s] = fpx_alloc(x, (size_t)cnt[s], sizeof *x->sops[s]);
    if (!x->sops[s]) {
      st = fpx_fail(x, FP_ERR_NOMEM, "out of memory resolving the plan");
      goto fail;
    }
  }
  for (int32_t j = 0; j < x->nxops; j++) x->sops[x->xops[j].stream][x->slen[x->xops[j].stream]++] = &x->xops[j];
fail:
  fpx_free(last);
  return st;
}

/* ---- params ------------------------------------------------------------------------ */
static fp_status view_of(fp_exec *x, const fp_ir_param *q, const char *role, const fp_view *v, fp_dtype dt,
                         int64_t elems, fp_tensor *out, int64_t *boff, bool *host) {
  const fp_prog *p = x->prog;
  *out = (fp_tensor){NULL, (fp_elem)dt, 0};
  *boff = -1;
  if (v->buf < 0 || elems == 0) return FP_OK;
  if (v->buf >= p->nbufs) return fpx_fail(x, FP_ERR_PLAN, "plan: param '%s': %s view has no buffer", q->name, role);
  const fp_ir_buf *B = &p->bufs[v->buf];
  int64_t bytes, end;
  if (v->off < 0 || !fpi_mul64(elems, fpi_dtype_size(dt), &bytes) || !fpi_add64(v->off, bytes, &end) || end > B->bytes)
    return fpx_fail(x, FP_ERR_PLAN,
                    "plan: param '%s': %s view [%" PRId64 ", +%" PRId64 " %s elements) lies outside buffer '%s' "
                    "(%" PRId64 " bytes) on rank %" PRId64,
                    q->name, role, v->off, elems, fpi_dtype_name(dt), B->name, B->bytes, x->rank);
  out->numel = elems;
  *boff = B->offset + v->off;
  *host = B->host;
  /* offload keeps the optimizer's views (main, grad, state) in host memory;
   * the trainer's compute views are always on the device */
  bool may_host = !strcmp(role, "main") || !strcmp(role, "grad") || !strcmp(role, "opt");
  return B->host && !may_host ? fpx_fail(x, FP_ERR_PLAN, "plan: param '%s': %s view is in host memory", q->name, role)
                              : FP_OK;
}

/* shard_of's shard placement: rank g's rows of dim d, chunk / (outer x
 * inner) rows a rank */
static fp_status shard_rows(fp_exec *x, const fp_ir_param *q, int64_t g, int64_t G, int64_t *slot, fp_extent *e) {
  int d = q->dim, nd = q->ndim > 0 ? q->ndim : 1;
  int64_t shape_d = q->ndim > 0 ? q->shape[d] : 1, outer = 1, inner = 1;
  for (int k = 0; k < d; k++) outer *= q->shape[k]; /* products of a shape that verified (fits int64) */
  for (int k = d + 1; k < nd && q->ndim > 0; k++) inner *= q->shape[k];
  int64_t oi = outer * inner, c_rows = oi > 0 ? q->chunk / oi : 0, covered;
  if (c_rows < 1 || q->chunk != c_rows * oi || !fpi_mul64(c_rows, G, &covered) || covered < shape_d)
    return fpx_fail(x, FP_ERR_PLAN, "plan: param '%s': shard chunk %" PRId64 " does not split dim %d over %" PRId64
                    " ranks", q->name, q->chunk, d, G);
  int64_t rows = shape_d - g * c_rows;
  rows = rows < 0 ? 0 : rows > c_rows ? c_rows : rows;
  *slot = q->chunk;
  if (rows > 0) *e = (fp_extent){outer, rows * inner, c_rows * inner, g * c_rows * inner, shape_d * inner, rows * inner};
  return FP_OK;
}

int64_t fp_extent_elems(const fp_extent *e) { return e && e->runs > 0 ? (e->runs - 1) * e->len + e->last_len : 0; }

/* shard_of's cyclic_shard placement: blocks g, g+G, ... of b elements, one
 * after another in the slot; the param's last block may be short (then it
 * is the last run of the rank holding it) */
static fp_status shard_cyclic(fp_exec *x, const fp_ir_param *q, int64_t g, int64_t G, int64_t *slot, fp_extent *e) {
  const fp_prog *p = x->prog;
  int64_t end;
  if (q->tab < 0) return fpx_fail(x, FP_ERR_PLAN, "plan: param '%s' is cyclic but has no extent table", q->name);
  char who[300];
  snprintf(who, sizeof who, "plan: param '%s'", q->name);
  FPX_CHECK(check_table(x, q->tab, G, who, &end));
  const fp_ir_table *t = &p->tabs[q->tab];
  int64_t b = fpi_cyclic_block(t), c = t->cnt[g], span, last;
  if (b < 1 || c > q->chunk || !fpi_mul64(G, b, &span))
    return fpx_fail(x, FP_ERR_PLAN, "plan: param '%s': extent table '%s' does not fit the param", q->name, t->name);
  *slot = q->chunk;
  if (c > 0) *e = (fp_extent){fpi_cyclic_runs(c, b, &last), b, b, g * b, span, last};
  return FP_OK;
}

/* what this rank holds of param q: slot elements, the extent runs, and
 * where its slot starts in the main / grad views (elements past their
 * offsets: nonzero only for a flat_shard piece, see docs/layout.md) */
static fp_status shard_of(fp_exec *x, const fp_ir_param *q, int64_t numel, int64_t *slot, fp_extent *e,
                          int64_t *shift) {
  const fp_prog *p = x->prog;
  *e = (fp_extent){0, 0, 0, 0, 0, 0};
  *slot = 0;
  *shift = 0;
  if (q->placement == FP_PL_REPLICATE) {
    *slot = numel;
    *e = (fp_extent){1, numel, numel, 0, numel, numel};
    return FP_OK;
  }
  if (q->comm < 0) return fpx_fail(x, FP_ERR_PLAN, "plan: param '%s' is sharded but has no communicator", q->name);
  const fp_ir_comm *c = &p->comms[q->comm];
  int64_t g = fpi_comm_index(c, x->rank), G = c->size;
  switch (q->placement) {
    case FP_PL_SHARD: return shard_rows(x, q, g, G, slot, e);
    case FP_PL_RAGGED: {
      int64_t end;
      if (q->tab < 0) return fpx_fail(x, FP_ERR_PLAN, "plan: param '%s' is ragged but has no extent table", q->name);
      char who[300];
      snprintf(who, sizeof who, "plan: param '%s'", q->name);
      FPX_CHECK(check_table(x, q->tab, G, who, &end));
      const fp_ir_table *t = &p->tabs[q->tab];
      if (end > numel || t->cnt[g] > q->chunk)
        return fpx_fail(x, FP_ERR_PLAN, "plan: param '%s': extent table '%s' does not fit the param", q->name, t->name);
      *slot = t->cnt[g];
      if (*slot > 0) *e = (fp_extent){1, *slot, *slot, t->off[g], *slot, *slot};
      return FP_OK;
    }
    case FP_PL_FLAT: {
      /* the bucket's params lie end to end in its flat buffer (the weight
       * view's offset is this param's position); rank g holds flat elements
       * [g*chunk, (g+1)*chunk) at the start of its main / grad views */
      int64_t es = fpi_dtype_size(q->param_dtype), a = q->weight.off / es, lo, hi, gc, end;
      if (q->weight.off < 0 || q->weight.off % es || q->chunk < 1 || !fpi_mul64(g, q->chunk, &gc) ||
          !fpi_add64(gc, q->chunk, &end) || !fpi_add64(a, numel, &hi))
        return fpx_fail(x, FP_ERR_PLAN, "plan: param '%s': flat_shard chunk %" PRId64 " or position is invalid",
                        q->name, q->chunk);
      lo = a > gc ? a : gc;
      if (hi > end) hi = end;
      if (hi > lo) {
        *slot = hi - lo;
        *shift = lo - gc;
        *e = (fp_extent){1, *slot, *slot, lo - a, *slot, *slot};
      }
      return FP_OK;
    }
    case FP_PL_CYCLIC: return shard_cyclic(x, q, g, G, slot, e);
    case FP_PL_OWNED:
      if (q->owner < 0 || q->owner >= G)
        return fpx_fail(x, FP_ERR_PLAN, "plan: param '%s': owner %" PRId64 " is not a rank of its group", q->name,
                        q->owner);
      if (g == q->owner) {
        *slot = numel;
        *e = (fp_extent){1, numel, numel, 0, numel, numel};
      }
      return FP_OK;
    default: return fpx_fail(x, FP_ERR_PLAN, "plan: param '%s': unknown placement %d", q->name, q->placement);
  }
}

static fp_status resolve_params(fp_exec *x) {
  const fp_prog *p = x->prog;
  fp_status st = FP_OK;
  x->params = fpx_alloc(x, (size_t)p->nparams, sizeof *x->params);
  /* the reduce dtype of a bucket: that of its reductions (the IR keeps it
   * on the ops only) */
  int *reduce_dt = fpx_alloc(x, (size_t)p->nbuckets, sizeof *reduce_dt);
  if (!x->params || !reduce_dt) {
    st = fpx_fail(x, FP_ERR_NOMEM, "out of memory");
    goto fail;
  }
  for (int32_t b = 0; b < p->nbuckets; b++) reduce_dt[b] = -1;
  for (int32_t j = 0; j < p->nops; j++) {
    fp_opcode c = p->ops[j].code;
    int32_t b = p->ops[j].bucket;
    if (b >= 0 && reduce_dt[b] < 0 &&
        (c == FP_OP_REDUCE_SCATTER || c == FP_OP_REDUCE_SCATTER_V || c == FP_OP_ALL_REDUCE || c == FP_OP_REDUCE))
      reduce_dt[b] = (int)p->ops[j].dtype;
  }
  for (int32_t i = 0; i < p->nparams; i++) {
    const fp_ir_param *q = &p->params[i];
    fp_xparam *xp = &x->params[i];
    fp_param_view *v = &xp->v;
    int64_t numel = 1;
    for (int k = 0; k < q->ndim; k++) numel *= q->shape[k]; /* verified: fits */
    *v = (fp_param_view){.name = q->name, .module = q->module, .ndim = q->ndim, .numel = numel,
                         .requires_grad = q->requires_grad};
    memcpy(v->shape, q->shape, sizeof v->shape);
    int64_t shift, es_m = fpi_dtype_size(q->main_dtype), es_g = fpi_dtype_size(q->grad_dtype);
    FPX_CHECK_GOTO(shard_of(x, q, numel, &xp->slot, &v->shard, &shift), st, fail);
    fp_view mv = q->main, gv = q->grad; /* shift < chunk: the views verified for chunk elements */
    if (mv.buf >= 0) mv.off += shift * es_m;
    if (gv.buf >= 0) gv.off += shift * es_g;
    FPX_CHECK_GOTO(view_of(x, q, "weight", &q->weight, q->param_dtype, numel, &v->weight, &xp->off[0], &xp->host[0]), st, fail);
    FPX_CHECK_GOTO(view_of(x, q, "ugrad", &q->ugrad, q->param_dtype, q->requires_grad ? numel : 0, &v->ugrad,
                           &xp->off[1], &xp->host[1]), st, fail);
    FPX_CHECK_GOTO(view_of(x, q, "main", &mv, q->main_dtype, xp->slot, &v->main, &xp->off[2], &xp->host[2]), st, fail);
    FPX_CHECK_GOTO(view_of(x, q, "grad", &gv, q->grad_dtype, q->requires_grad ? xp->slot : 0, &v->grad,
                           &xp->off[3], &xp->host[3]), st, fail);
    xp->off[4] = xp->off[5] = -1;
    for (int k = 0; k < 2 && q->opt.buf >= 0 && k < fpi_optim_states(p->optim); k++) {
      /* state plane k of the bucket's optimizer buffer (verified: the planes
       * divide it, the slot of chunk elements lies in each) */
      int64_t es_o = fpi_dtype_size(p->optim_dtype);
      fp_view ov = {q->opt.buf, q->opt.off + shift * es_o + k * (p->bufs[q->opt.buf].bytes / fpi_optim_states(p->optim))};
      FPX_CHECK_GOTO(view_of(x, q, "opt", &ov, p->optim_dtype, xp->slot, &v->optim[k], &xp->off[4 + k], &xp->host[4 + k]), st, fail);
    }
    /* MXFP8 weights (frozen, replicated: weight and main are the same e4m3
     * bytes): their e8m0 block scales */
    FPX_CHECK_GOTO(view_of(x, q, "scales", &q->scales, FP_E8M0, q->scales.buf >= 0 ? fpi_mx_blocks(numel) : 0,
                           &v->scales, &xp->off[6], &xp->host[6]), st, fail);
    bool reduced = q->requires_grad && q->bucket >= 0 && reduce_dt[q->bucket] >= 0;
    v->reduce_dtype = reduced ? (fp_elem)reduce_dt[q->bucket] : (fp_elem)q->grad_dtype;
    xp->weight_persistent = q->weight.buf >= 0 && p->bufs[q->weight.buf].kind == FP_BUF_PERSISTENT;
  }
fail:
  fpx_free(reduce_dt);
  return st;
}

static void set_pointers(fp_exec *x) {
  for (int32_t j = 0; j < x->nxops; j++) {
    fp_xop *o = &x->xops[j];
    char **ptr[3] = {&o->dst, &o->src, &o->aux};
    for (int w = 0; w < 3; w++) *ptr[w] = o->off[w] < 0 ? NULL : (o->host[w] ? x->host : x->dev) + o->off[w];
  }
  for (int32_t i = 0; i < x->prog->nparams; i++) {
    fp_xparam *xp = &x->params[i];
    fp_tensor *t[7] = {&xp->v.weight, &xp->v.ugrad, &xp->v.main,     &xp->v.grad,
                       &xp->v.optim[0], &xp->v.optim[1], &xp->v.scales};
    for (int k = 0; k < 7; k++) t[k]->data = xp->off[k] < 0 ? NULL : (xp->host[k] ? x->host : x->dev) + xp->off[k];
  }
}

/* ---- create / destroy ------------------------------------------------------------------ */
fp_status fp_exec_create(const fp_plan *plan, const fp_exec_config *cfg, fp_exec **out) {
  if (!out) return FP_ERR_ARG;
  const fp_backend_impl *bk = NULL;
  if (cfg && cfg->backend == FP_BACKEND_MPI) bk = &fp_backend_mpi;
  if (cfg && cfg->backend == FP_BACKEND_EXTERNAL) bk = &fp_backend_external;
#ifdef FP_HAVE_CUDA
  if (cfg && cfg->backend == FP_BACKEND_NCCL) bk = &fp_backend_nccl;
#else
  if (cfg && cfg->backend == FP_BACKEND_NCCL) {
    fp_exec *x = *out = calloc(1, sizeof *x);
    if (!x) return FP_ERR_NOMEM;
    return fpx_fail(x, FP_ERR_ARG, "fp_exec_create: the NCCL backend is not built (flexplan was configured without "
                    "CUDA: nvcc or NCCL was not found; docs/cuda.md)");
  }
#endif
  return fpx_create_with(plan, cfg, bk, out);
}

/* rule 9 on a plan loaded without it: its first message, unlocated (the
 * file's positions are gone; `flexplan verify` gives them) */
static fp_status check_semantics(fp_exec *x, const fp_plan *plan) {
  fp_diag d;
  fpi_diag_init(&d, NULL);
  d.max_errors = 1;
  fp_status st = FP_OK;
  if (!fpi_ir_verify_sem_only(plan->prog, &d, NULL)) {
    const char *m = d.buf ? d.buf : "", *e = strstr(m, "error: ");
    if (e) m = e + 7;
    int n = (int)strcspn(m, "\n");
    const char *nm = plan->name ? plan->name : "<plan>";
    st = fpx_fail(x, FP_ERR_PLAN,
                  "plan '%s' fails the semantic check (rule 9, docs/ir.md): it does not compute the training step it "
                  "claims: %.*s (`flexplan verify %s` locates every error; a plan loaded with FP_LOAD_NO_SEMANTIC "
                  "runs unchecked)", nm, n, m, nm);
  }
  fpi_diag_free(&d);
  return st;
}

fp_status fpx_create_with(const fp_plan *plan, const fp_exec_config *cfg, const fp_backend_impl *bk, fp_exec **out) {
  if (!out) return FP_ERR_ARG;
  fp_exec *x = *out = calloc(1, sizeof *x);
  if (!x) return FP_ERR_NOMEM;
  x->stats.allocations = 1;
  fp_status st = FP_OK;
  if (!cfg) return fpx_fail(x, FP_ERR_ARG, "fp_exec_create: config is NULL");
  x->cfg = *cfg;
  x->bk = bk;
  if (!x->bk) return fpx_fail(x, FP_ERR_ARG, "fp_exec_create: unknown backend %d", (int)cfg->backend);
  x->rank = cfg->rank;
  x->world = cfg->world_size;
  /* local checks and allocation; whatever fails, the ranks still agree
   * below, so none of them waits for a rank that gave up */
  /* the watchdog's limit first: the agreement below waits under it even
   * when this rank's setup failed */
  st = fpx_timeout(x, cfg, &x->timeout_s);
  if (st != FP_OK) {
    /* reported: a malformed FLEXPLAN_TIMEOUT */
  } else if (!plan || !plan->prog)
    st = fpx_fail(x, FP_ERR_ARG, "fp_exec_create: %s", plan ? "the plan failed to load" : "plan is NULL");
  else if (cfg->progress < FP_PROGRESS_DEFAULT || cfg->progress > FP_PROGRESS_THREAD)
    st = fpx_fail(x, FP_ERR_ARG, "fp_exec_create: unknown progress mode %d", (int)cfg->progress);
  else if (cfg->backend == FP_BACKEND_NCCL && cfg->progress != FP_PROGRESS_DEFAULT)
    st = fpx_fail(x, FP_ERR_ARG, "fp_exec_create: the NCCL backend takes no progress mode (the GPU drives its "
                  "streams); pass FP_PROGRESS_DEFAULT");
  else if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size)
    st = fpx_fail(x, FP_ERR_ARG, "fp_exec_create: rank %d is not in a world of %d", cfg->rank, cfg->world_size);
  else if (plan->prog->world_size != cfg->world_size)
    st = fpx_fail(x, FP_ERR_PLAN, "the plan is for %" PRId64 " ranks, this run has %d", plan->prog->world_size,
                  cfg->world_size);
  else if (plan->sem == FP_PLAN_SEM_UNCHECKED)
    st = check_semantics(x, plan);
  if (st == FP_OK) {
    x->plan = plan;
    x->prog = plan->prog;
    x->stats.plan_hash = plan->hash;
    st = resolve(x);
    if (st == FP_OK) st = resolve_params(x);
    if (st == FP_OK) st = x->bk->prepare(x);
    if (st == FP_OK) set_pointers(x);
  }
  st = x->bk->agree(x, st);
  if (st == FP_OK) st = x->bk->connect(x);
  x->created = st == FP_OK;
  return st;
}

const char *fp_exec_errmsg(const fp_exec *x) { return x ? x->msg : ""; }

void fp_exec_destroy(fp_exec *x) {
  if (!x) return;
  if (x->bk) x->bk->destroy(x);
  fpx_timing_free(x);
  for (int s = 0; s < FP_NSTREAMS; s++) fpx_free(x->sops[s]);
  fpx_free(x->xops);
  fpx_free(x->seg_end);
  fpx_free(x->params);
  free(x);
}

/* ---- hooks ---------------------------------------------------------------------------- */
static fp_status usable(fp_exec *x) {
  if (!x->created) return fpx_fail(x, FP_ERR_ARG, "the executor was not created successfully");
  if (x->broken) return FP_ERR_BACKEND; /* the message says what broke */
  return FP_OK;
}

/* segment k has no ops on this rank */
static bool seg_empty(const fp_exec *x, int32_t k) {
  for (int st = 0; st < FP_NSTREAMS; st++)
    if (x->seg_end[k][st] != (k > 0 ? x->seg_end[k - 1][st] : 0)) return false;
  return true;
}

/* How many segments from the cursor on the trainer may skip to reach
 * (hook, module): every one of them a module hook with no ops on this rank,
 * the target one within the step; 0 when none (fp_exec_hook's contract). */
static int32_t skippable(const fp_exec *x, fp_hook hook, int32_t module) {
  const fp_prog *p = x->prog;
  for (int32_t k = x->cursor; k < p->nsegs; k++) {
    const fp_seg *s = &p->segs[k];
    if (!fpi_seg_has_module(s->kind)) return 0;
    if (s->kind == (fp_seg_kind)hook && s->module == module) return k - x->cursor;
    if (!seg_empty(x, k)) return 0;
  }
  return 0;
}

/* fp_exec_hook in its steps: the arguments (hook_args), a recomputed
 * forward inside a backward window (recompute_enter, in_recompute), the
 * empty segments a trainer may skip (skip_empty), the plan's order
 * (out_of_order), then the segment run (run_hook). */
static fp_status hook_args(fp_exec *x, fp_hook hook, int32_t module) {
  const fp_prog *p = x->prog;
  if ((unsigned)hook >= FP_NSEGKINDS) return fpx_fail(x, FP_ERR_ARG, "hook %d is not a hook", (int)hook);
  bool hm = fpi_seg_has_module((int)hook);
  if (hm && (module < 0 || module >= p->nmods))
    return fpx_fail(x, FP_ERR_ARG, "%s: module %" PRId32 " is out of range (the plan has %" PRId32 " modules)",
                    fpi_seg_name((int)hook), module, p->nmods);
  if (!hm && module != -1)
    return fpx_fail(x, FP_ERR_ARG, "%s takes no module (pass -1, not %" PRId32 ")", fpi_seg_name((int)hook), module);
  return FP_OK;
}

/* a recomputed forward inside the backward window of a module the plan
 * recomputes: pre_forward(m) then post_forward(m) between pre_backward(m)
 * and post_backward(m), once; nothing runs (pre_backward gathered what
 * the recompute reads). A trainer that skipped an empty pre_backward(m)
 * opens the window from there. */
static void recompute_enter(fp_exec *x, fp_hook hook, int32_t module) {
  const fp_prog *p = x->prog;
  const fp_seg *s = &p->segs[x->cursor];
  if (hook == FP_HOOK_PRE_FORWARD && p->mods[module].recompute && s->kind == FP_SEG_PRE_BACKWARD &&
      s->module == module && x->cursor + 1 < p->nsegs && p->segs[x->cursor + 1].kind == FP_SEG_POST_BACKWARD &&
      p->segs[x->cursor + 1].module == module && seg_empty(x, x->cursor)) {
    x->cursor++;
    x->stats.skipped++;
    x->recompute = 0;
  }
}

/* inside a recompute window: true when the hook was the window's own
 * (*st: FP_OK, or the order error) */
static bool in_recompute(fp_exec *x, fp_hook hook, int32_t module, fp_status *st) {
  const fp_prog *p = x->prog;
  const fp_seg *s = &p->segs[x->cursor];
  bool window = s->kind == FP_SEG_POST_BACKWARD && x->cursor > 0 &&
                p->segs[x->cursor - 1].kind == FP_SEG_PRE_BACKWARD && p->segs[x->cursor - 1].module == s->module &&
                p->mods[s->module].recompute;
  if (!window) return false;
  const char *hn = fpi_seg_name((int)hook);
  if (module == s->module && (hook == FP_HOOK_PRE_FORWARD || hook == FP_HOOK_POST_FORWARD)) {
    if (hook == FP_HOOK_PRE_FORWARD && x->recompute == 0) return x->recompute = 1, x->stats.hooks++, *st = FP_OK, true;
    if (hook == FP_HOOK_POST_FORWARD && x->recompute == 1) return x->recompute = 2, x->stats.hooks++, *st = FP_OK, true;
    *st = fpx_fail(x, FP_ERR_ORDER,
                   "hook %s(%s) called inside the backward of %s, but %s (a recomputed forward runs once, "
                   "pre_forward then post_forward, between pre_backward and post_backward)",
                   hn, p->mods[module].name, p->mods[module].name,
                   x->recompute == 1   ? "its recomputed forward is already open"
                   : x->recompute == 2 ? "its forward was already recomputed"
                                       : "no recomputed forward is open (call pre_forward first)");
    return true;
  }
  if (x->recompute == 1 && (fp_seg_kind)hook == s->kind && module == s->module) {
    *st = fpx_fail(x, FP_ERR_ORDER,
                   "hook %s(%s) called, but the recomputed forward of %s is still open (call post_forward(%s) first)",
                   hn, p->mods[module].name, p->mods[module].name, p->mods[module].name);
    return true;
  }
  return false;
}

/* the empty segments before the hook's, which the trainer may skip */
static void skip_empty(fp_exec *x, fp_hook hook, int32_t module) {
  int32_t skip = fpi_seg_has_module((int)hook) ? skippable(x, hook, module) : 0;
  if (skip <= 0) return;
  if (x->timing) { /* a skipped segment ran nothing: recorded as empty, at this call */
    double now = fpx_now_us();
    for (int32_t k = 0; k < skip; k++) fpx_time_hook(x, x->cursor + k, now, now);
  }
  x->cursor += skip; /* a module hook is never the step's last segment: no wrap */
  x->stats.skipped += skip;
}

/* the hook is not the plan's next: say what is */
static fp_status out_of_order(fp_exec *x, fp_hook hook, int32_t module) {
  const fp_prog *p = x->prog;
  const fp_seg *s = &p->segs[x->cursor];
  bool hm = fpi_seg_has_module((int)hook);
  if (hm && (hook == FP_HOOK_PRE_FORWARD || hook == FP_HOOK_POST_FORWARD) &&
      (s->kind == FP_SEG_PRE_BACKWARD || s->kind == FP_SEG_POST_BACKWARD) && s->module == module &&
      !p->mods[module].recompute)
    return fpx_fail(x, FP_ERR_ORDER,
                    "hook %s(%s) called inside the backward of %s, but the plan does not recompute %s "
                    "(add it to the spec's \"recompute\" and compile again)",
                    fpi_seg_name((int)hook), p->mods[module].name, p->mods[module].name, p->mods[module].name);
  char want[160];
  if (hm)
    return fpx_fail(x, FP_ERR_ORDER,
                    "hook %s(%s) called, but the plan expects %s next (segment %" PRId32 " of %" PRId32
                    ", micro-batch %" PRId32 ", step %" PRId64 ")",
                    fpi_seg_name((int)hook), p->mods[module].name, fpx_seg_label(x, x->cursor, want, sizeof want),
                    x->cursor, p->nsegs, s->micro, x->stats.steps);
  return fpx_fail(x, FP_ERR_ORDER,
                  "hook %s called, but the plan expects %s next (segment %" PRId32 " of %" PRId32
                  ", micro-batch %" PRId32 ", step %" PRId64 ")",
                  fpi_seg_name((int)hook), fpx_seg_label(x, x->cursor, want, sizeof want), x->cursor, p->nsegs,
                  s->micro, x->stats.steps);
}

/* the segment at the cursor run, and the cursor moved on */
static fp_status run_hook(fp_exec *x) {
  x->in_hook = true;
  double t_in = x->timing ? fpx_now_us() : 0;
  fp_status st = x->bk->run_segment(x, x->cursor);
  if (st == FP_OK && x->timing) fpx_time_hook(x, x->cursor, t_in, fpx_now_us());
  x->in_hook = false;
  if (st != FP_OK) { /* a backend failure breaks the executor; a refusal (nothing issued) does not */
    if (st == FP_ERR_BACKEND || st == FP_ERR_NOMEM || st == FP_ERR_TIMEOUT) x->broken = true;
    return st;
  }
  x->stats.hooks++;
  x->recompute = 0;
  if (++x->cursor == x->prog->nsegs) {
    x->cursor = 0;
    x->stats.steps++;
  }
  return FP_OK;
}

fp_status fp_exec_hook(fp_exec *x, fp_hook hook, int32_t module) {
  if (!x) return FP_ERR_ARG;
  FPX_CHECK(usable(x));
  FPX_CHECK(hook_args(x, hook, module));
  recompute_enter(x, hook, module);
  fp_status st;
  if (in_recompute(x, hook, module, &st)) return st;
  skip_empty(x, hook, module);
  const fp_seg *s = &x->prog->segs[x->cursor];
  if (s->kind != (fp_seg_kind)hook || (fpi_seg_has_module((int)hook) && s->module != module))
    return out_of_order(x, hook, module);
  return run_hook(x);
}

fp_status fp_exec_all_reduce_f64(fp_exec *x, double *values, int n) {
  if (!x) return FP_ERR_ARG;
  FPX_CHECK(usable(x));
  if (n < 0 || n > FP_ALL_REDUCE_MAX || (n > 0 && !values))
    return fpx_fail(x, FP_ERR_ARG, "fp_exec_all_reduce_f64: %d values (expected 0 to %d, and a buffer)", n,
                    FP_ALL_REDUCE_MAX);
  if (n == 0) return FP_OK;
  if (!x->bk->all_reduce_f64)
    return fpx_fail(x, FP_ERR_BACKEND, "fp_exec_all_reduce_f64: the %s backend has no reduction", x->bk->name);
  fp_status st = x->bk->all_reduce_f64(x, values, n);
  if (st == FP_ERR_BACKEND || st == FP_ERR_TIMEOUT) x->broken = true;
  return st;
}

fp_status fp_exec_all_reduce_f64_dev(fp_exec *x, double *values, int n, int max) {
  if (!x) return FP_ERR_ARG;
  FPX_CHECK(usable(x));
  if (n < 0 || n > FP_ALL_REDUCE_MAX || (n > 0 && !values))
    return fpx_fail(x, FP_ERR_ARG, "fp_exec_all_reduce_f64_dev: %d values (expected 0 to %d, and a buffer)", n,
                    FP_ALL_REDUCE_MAX);
  if (!x->bk->all_reduce_dev)
    return fpx_fail(x, FP_ERR_BACKEND,
                    "fp_exec_all_reduce_f64_dev: the %s backend keeps its values in host memory and has no reduction "
                    "on a device stream (use fp_exec_all_reduce_f64)",
                    x->bk->name);
  if (n == 0) return FP_OK;
  fp_status st = x->bk->all_reduce_dev(x, values, n, max);
  if (st == FP_ERR_BACKEND || st == FP_ERR_TIMEOUT) x->broken = true;
  return st;
}

fp_status fp_exec_sync(fp_exec *x) {
  if (!x) return FP_ERR_ARG;
  FPX_CHECK(usable(x));
  fp_status st = x->bk->sync(x);
  if (st == FP_ERR_BACKEND || st == FP_ERR_TIMEOUT) x->broken = true;
  return st;
}

fp_status fpx_timeout(fp_exec *x, const fp_exec_config *cfg, double *out) {
  *out = 0;
  if (cfg->timeout_s > 0) {
    *out = cfg->timeout_s;
    return FP_OK;
  }
  if (cfg->timeout_s < 0 || cfg->timeout_s != cfg->timeout_s) return FP_OK; /* < 0 (or NaN): none */
  const char *e = getenv("FLEXPLAN_TIMEOUT");
  if (!e || !*e) return FP_OK;
  char *end;
  errno = 0;
  double v = strtod(e, &end);
  if (errno || end == e || *end || !(v >= 0) || v > 1e9)
    return fpx_fail(x, FP_ERR_ARG, "FLEXPLAN_TIMEOUT='%.40s': expected seconds, a number in [0, 1e9] (0: no timeout)",
                    e);
  *out = v;
  return FP_OK;
}

/* ---- views and stats ---------------------------------------------------------------------- */
fp_status fp_exec_param_at(fp_exec *x, int32_t index, fp_param_view *out) {
  if (!x || !out || !x->params || index < 0 || index >= x->prog->nparams) return FP_ERR_ARG;
  *out = x->params[index].v;
  return FP_OK;
}

fp_status fp_exec_param(fp_exec *x, const char *name, fp_param_view *out) {
  if (!x || !out || !name || !x->params) return FP_ERR_ARG;
  for (int32_t i = 0; i < x->prog->nparams; i++)
    if (!strcmp(x->prog->params[i].name, name)) return fp_exec_param_at(x, i, out);
  return fpx_fail(x, FP_ERR_ARG, "the plan has no param '%s'", name);
}

void *fp_exec_cuda_stream(const fp_exec *x) { return x && x->created ? x->cuda_stream : NULL; }

fp_status fp_exec_set_cuda_stream(fp_exec *x, void *stream) {
  if (!x) return FP_ERR_ARG;
  if (!x->created || x->broken) return fpx_fail(x, FP_ERR_ARG, "fp_exec_set_cuda_stream: the executor is not usable");
  if (!x->bk->set_stream)
    return fpx_fail(x, FP_ERR_ARG, "fp_exec_set_cuda_stream: the %s backend has no CUDA stream", x->bk->name);
  if (!stream)
    return fpx_fail(x, FP_ERR_ARG, "fp_exec_set_cuda_stream: NULL is not a stream (CUDA's legacy default stream is "
                    "FP_CUDA_STREAM_LEGACY)");
  return x->bk->set_stream(x, stream);
}

/* one graph per step: the NCCL backend does the work (nccl.c, "whole-step capture") */
static fp_status capture_op(fp_exec *x, int op, const char *fn, int64_t *live) {
  if (!x) return FP_ERR_ARG;
  FPX_CHECK(usable(x));
  if (!x->bk->capture)
    return fpx_fail(x, FP_ERR_ARG, "%s: the %s backend has no CUDA stream to capture (FP_BACKEND_NCCL only)", fn,
                    x->bk->name);
  fp_status st = x->bk->capture(x, op, live);
  if (st == FP_ERR_BACKEND) x->broken = true;
  return st;
}
fp_status fp_exec_capture_begin(fp_exec *x) { return capture_op(x, FPX_CAPTURE_BEGIN, "fp_exec_capture_begin", NULL); }
fp_status fp_exec_capture_end(fp_exec *x) { return capture_op(x, FPX_CAPTURE_END, "fp_exec_capture_end", NULL); }
fp_status fp_exec_capture_release(fp_exec *x) {
  return capture_op(x, FPX_CAPTURE_RELEASE, "fp_exec_capture_release", NULL);
}
int64_t fp_exec_capture_live(const fp_exec *x) {
  int64_t live = 0;
  if (!x) return -1;
  if (x->created && x->bk->capture) x->bk->capture((fp_exec *)x, FPX_CAPTURE_LIVE, &live);
  return live;
}

#ifndef FP_HAVE_CUDA
fp_status fp_nccl_get_id(fp_nccl_id *out) {
  if (out) memset(out, 0, sizeof *out);
  return FP_ERR_BACKEND; /* built without CUDA */
}
#endif

fp_status fp_exec_get_stats(const fp_exec *x, fp_exec_stats *out) {
  if (!x || !out) return FP_ERR_ARG;
  *out = x->stats;
  return FP_OK;
}
