/* lower.c - one training step of a layout, lowered to IR on three streams.
 *
 * The step is: step_begin; for each micro-batch, pre/post_forward of every
 * module in forward order, then pre/post_backward in reverse; pre_optimizer
 * (the trainer's optimizer runs after it: a compute op with pass=opt);
 * post_optimizer. Streams: the trainer's compute stream runs its forward and
 * backward (compute placeholders), zeroes the unsharded grads and keeps the
 * partially resharded copies; the `ag` stream unshards (cast the main shard
 * to the param dtype, gather); the `rs` stream reduces (cast to the reduce
 * dtype, reduce, all-reduce across replicas, write or add into the main
 * grad, divide). No record/wait is emitted here: the sync pass inserts the
 * ones the program needs once memplan has placed every buffer.
 *
 *   pre_forward(m)   issue the all-gathers of the buckets kf ahead in
 *                    forward order (prefetch): bucket r is issued where the
 *                    bucket r-kf is first used
 *   post_forward(m)  reshard the buckets last used by m: free (true) or keep
 *                    a 1/g copy for a backward gather inside g ranks (int g);
 *                    the bucket of the last module is never resharded
 *   pre_backward(m)  zero the unsharded grads of m's buckets; issue the
 *                    backward re-gathers kb ahead in backward order
 *   post_backward(m) reduce the grads of buckets whose backward is done:
 *                    the first micro-batch reduces straight into the main
 *                    grad when the dtypes allow, later ones into staging and
 *                    add; the last micro-batch divides by world x micro-batches
 *   post_optimizer   refresh persistent compute weights from the updated
 *                    main weights (shard_grad_op's all-gather, replicas' cast)
 *                    - or, with defer_refresh, nothing: each such bucket is
 *                    refreshed in the first micro-batch's pre_forward, issued
 *                    kf ahead like the other forward gathers, so the refresh
 *                    overlaps the forward instead of ending the step (the
 *                    pipeline lowers both and keeps the faster, pipeline.c)
 *
 * A flat bucket (docs/layout.md) issues one of each: one cast of the rank's
 * chunk into its place in the flat buffer, one all-gather in place, one
 * reduce-scatter straight out of the flat grads, one write and one divide.
 * A bucket's ops are emitted phase by phase (all casts, then all collectives,
 * then all copies out) so its collectives sit back to back for coalesce.
 * Each bucket has one IR buffer per kind with one arena address for the whole
 * step; transient ones get explicit live ranges in program order, so memplan
 * can reuse their bytes between ranges. */
#include "lower.h"

#include <stdlib.h>
#include <string.h>

fp_op *fpi_lw_emit(fp_lower *lw, fp_opcode code, fp_dtype dt, int64_t count) {
  fp_lw_phase ph = fpi_op_class(code) == FP_OPC_COMM ? FP_PH_COMM : lw->seen_comm ? FP_PH_POST : FP_PH_PRE;
  if (ph == FP_PH_COMM) lw->seen_comm = true;
  if (lw->phase != FP_PH_ALL && ph != lw->phase) {
    memset(&lw->dropped, 0, sizeof lw->dropped); /* the caller fills it in; nobody reads it */
    return &lw->dropped;
  }
  fp_op *op = fpi_ir_emit(lw->P, code, lw->stream, dt, count);
  op->bucket = lw->bucket;
  return op;
}

fp_op *fpi_lw_convert(fp_lower *lw, fp_dtype dt, fp_dtype sdt, int64_t count, fp_region dst, fp_region src) {
  fp_op *op = fpi_lw_emit(lw, dt == sdt ? FP_OP_COPY : FP_OP_CAST, dt, count);
  op->sdtype = sdt;
  op->dst = dst;
  op->src = src;
  if (op->code == FP_OP_COPY) {
    int64_t es = fpi_dtype_size(dt);
    fpi_ir_op_shape(lw->P, op, 1, count * es, count * es);
  }
  return op;
}

int fpi_lw_buf(const fp_lower *lw, int bucket, fp_bucket_buf k) {
  int b = lw->bufs[bucket][k];
  FP_ASSERT(b >= 0);
  return b;
}

void fpi_lw_only_owner(const fp_lower *lw, const fp_lparam *p, fp_op *op) {
  if (p->pl->kind != FP_PL_OWNED) return;
  op->only = (int32_t)p->owner;
  op->only_comm = lw->c_shard;
}

/* ---- live ranges ------------------------------------------------------------ */
static void open_buf(fp_lower *lw, int buf) {
  if (buf < 0 || lw->P->bufs[buf].kind != FP_BUF_TRANSIENT) return;
  FP_ASSERT(lw->open_at[buf] < 0);
  lw->open_at[buf] = lw->P->nops;
}

static bool op_uses(const fp_prog *P, const fp_op *op, int buf) {
  if (op->dst.buf == buf || op->src.buf == buf || op->aux.buf == buf) return true;
  for (int i = 0; i < op->nuses; i++)
    if (P->uses[op->uses + i] == buf) return true;
  return false;
}

/* end the open range of buf at its last use; a staging buffer opened for a
 * step that turned out not to need it (optional) just closes */
static void close_range(fp_lower *lw, int buf, bool optional) {
  if (buf < 0 || lw->P->bufs[buf].kind != FP_BUF_TRANSIENT) return;
  int32_t first = lw->open_at[buf];
  FP_ASSERT(first >= 0);
  int32_t last = lw->P->nops - 1;
  while (last >= first && !op_uses(lw->P, &lw->P->ops[last], buf)) last--;
  FP_ASSERT(optional || last >= first); /* a range with no use is a lowering bug */
  if (last >= first) fpi_ir_buf_live(lw->P, buf, first, last);
  lw->open_at[buf] = -1;
}
static void close_buf(fp_lower *lw, int buf) { close_range(lw, buf, false); }
static void close_opt(fp_lower *lw, int buf) { close_range(lw, buf, true); }

/* ---- setup: communicators, tables, buffers, params --------------------------- */
static int add_buf(fp_lower *lw, int b, fp_bucket_buf k, const char *what, fp_buf_kind kind, fp_buf_cat cat,
                   int64_t bytes) {
  if (bytes <= 0) return -1;
  int id = fpi_ir_buf_add(lw->P, fpi_strjoin(lw->a, lw->L->buckets[b].name, ".", what), kind, cat, b, bytes);
  lw->bufs[b][k] = id;
  return id;
}

/* a persistent buffer of bucket b in host memory (offload) */
static int add_host(fp_lower *lw, int b, fp_bucket_buf k, const char *what, fp_buf_cat cat, int64_t bytes) {
  int id = add_buf(lw, b, k, what, FP_BUF_PERSISTENT, cat, bytes);
  if (id >= 0) lw->P->bufs[id].host = true;
  return id;
}

/* the buffer the optimizer (and the param's view) sees for k: the host copy
 * of an offloaded bucket, else k itself */
static int owner_buf(const fp_lower *lw, int b, fp_bucket_buf k) {
  fp_bucket_buf h = k == FP_BB_MAIN ? FP_BB_HMAIN : k == FP_BB_GRAD ? FP_BB_HGRAD : k;
  return lw->L->buckets[b].offload ? lw->bufs[b][h] : lw->bufs[b][k];
}

/* the program's header: model, strategy, mesh, optimizer */
static void setup_header(fp_lower *lw) {
  fp_prog *P = lw->P;
  const fp_model *m = lw->L->model;
  const fp_spec *s = lw->L->spec;
  P->model = m->name;
  P->strategy = fp_strategy_names[s->strategy];
  P->world_size = s->world_size;
  P->ranks_per_node = s->ranks_per_node;
  P->grad_accumulation = s->grad_accumulation;
  P->optim = s->optim;
  P->optim_dtype = s->optim != FP_OPTIM_NONE ? s->optim_dtype : FP_F32;
}

/* the communicators: the world (dp with tp), the shard group, the replicas,
 * and one per reshard group size */
static void setup_comms(fp_lower *lw) {
  fp_layout *L = lw->L;
  fp_prog *P = lw->P;
  /* with a tp dimension every communicator runs over the ranks of one tp
   * index: strides in units of T (tp innermost), and "world" is "dp" */
  int64_t T = L->T;
  P->tp = T;
  lw->c_world = fpi_ir_comm_add(P, T > 1 ? "dp" : "world", L->world, T);
  lw->c_shard = L->G == L->world ? lw->c_world : fpi_ir_comm_add(P, "shard", L->G, T);
  lw->c_replica = L->R > 1 ? fpi_ir_comm_add(P, "replica", L->R, L->G * T) : -1;
  lw->c_reshard = fpi_alloc_array(lw->a, (size_t)L->nbuckets, sizeof(int));
  lw->unit_tab = fpi_alloc_array(lw->a, (size_t)L->nbuckets + 1, sizeof *lw->unit_tab);
  for (int b = 0; b < L->nbuckets; b++) lw->unit_tab[b] = -1;
  for (int b = 0; b < L->nbuckets; b++) {
    lw->c_reshard[b] = -1;
    int64_t g = L->buckets[b].reshard;
    if (L->buckets[b].reshard_chunk == 0) continue;
    const char *name = fpi_sprintf(lw->a, "reshard%lld", (long long)g);
    for (int c = 0; c < P->ncomms; c++)
      if (!strcmp(P->comms[c].name, name)) lw->c_reshard[b] = c;
    if (lw->c_reshard[b] < 0) lw->c_reshard[b] = fpi_ir_comm_add(P, name, g, T);
  }
}

/* the modules (with what recompute saves) and the bucket names */
static void setup_modules(fp_lower *lw) {
  fp_layout *L = lw->L;
  fp_prog *P = lw->P;
  const fp_model *m = L->model;
  for (int i = 0; i < m->nmodules; i++) {
    const fp_module *M = &m->modules[i];
    int k = fpi_ir_module_add(P, M->name, M->flops_fwd, M->flops_bwd, M->activation_bytes);
    if (L->recompute[i]) P->mods[k].recompute = true, P->mods[k].saved_bytes = M->activation_bytes_checkpointed;
  }
  for (int b = 0; b < L->nbuckets; b++) fpi_ir_bucket_add(P, L->buckets[b].name);
}

/* extent tables for ragged params: one entry per shard-group rank; for
 * cyclic ones the param's (entry g: its first block, its elements) and
 * the staging one of its v-collectives (entry g: rank g's chunk) */
static void setup_tables(fp_lower *lw) {
  fp_layout *L = lw->L;
  for (int i = 0; i < L->nparams; i++) {
    fp_lparam *p = &L->params[i];
    if (p->pl->kind == FP_PL_CYCLIC) {
      int64_t *off = fpi_alloc_array(lw->a, (size_t)L->G, sizeof(int64_t));
      int64_t *cnt = fpi_alloc_array(lw->a, (size_t)L->G, sizeof(int64_t));
      int64_t *soff = fpi_alloc_array(lw->a, (size_t)L->G, sizeof(int64_t));
      for (int64_t g = 0; g < L->G; g++) {
        fpi_layout_extent e = p->impl->extent(L, p, g);
        off[g] = e.begin;
        cnt[g] = e.count;
        soff[g] = g * p->chunk;
      }
      p->tab = fpi_ir_table_add(lw->P, p->mp->name, L->G, off, cnt);
      p->stab = fpi_ir_table_add(lw->P, fpi_sprintf(lw->a, "%s.stage", p->mp->name), L->G, soff, cnt);
      continue;
    }
    if (!p->cuts) continue;
    int64_t *off = fpi_alloc_array(lw->a, (size_t)L->G, sizeof(int64_t));
    int64_t *cnt = fpi_alloc_array(lw->a, (size_t)L->G, sizeof(int64_t));
    for (int64_t g = 0; g < L->G; g++) {
      off[g] = p->cuts[g];
      cnt[g] = p->cuts[g + 1] - p->cuts[g];
    }
    p->tab = fpi_ir_table_add(lw->P, p->mp->name, L->G, off, cnt);
  }
}

/* bucket b's buffers: main weights, grads and optimizer state (in host
 * memory when offloaded), the unsharded weight and grad, the staging of
 * reductions and gathers, MXFP8 gathers, resharding */
static void bucket_buffers(fp_lower *lw, int b) {
  fp_layout *L = lw->L;
  const fp_spec *s = L->spec;
  const fp_bucket *B = &L->buckets[b];
  for (int k = 0; k < FP_NBB; k++) lw->bufs[b][k] = -1;
  bool acc = s->grad_accumulation > 1, cast_out = false;
  for (int j = 0; j < B->nparams; j++) {
    const fp_lparam *p = &L->params[B->lparams[j]];
    if (p->mp->requires_grad && p->reduce_dtype != p->grad_dtype) cast_out = true;
  }
  fp_buf_kind ukind = B->persistent_unsharded ? FP_BUF_PERSISTENT : FP_BUF_TRANSIENT;
  if (B->offload) {
    /* offload: what the optimizer owns lives in host memory; the device
     * holds the main shard only from its h2d to the gather that reads
     * it, and the main grad from the first reduction of the step to its
     * d2h after the last (both on the copy stream) */
    add_host(lw, b, FP_BB_HMAIN, "main", FP_CAT_MAIN_WEIGHT, B->shard_bytes);
    if (B->trainable) add_host(lw, b, FP_BB_HGRAD, "grad", FP_CAT_MAIN_GRAD, B->grad_bytes);
    add_host(lw, b, FP_BB_OPT, "optim", FP_CAT_OPT_STATE, B->opt_bytes);
    add_buf(lw, b, FP_BB_MAIN, "main.dev", FP_BUF_TRANSIENT, FP_CAT_MAIN_WEIGHT, B->shard_bytes);
    if (B->trainable) add_buf(lw, b, FP_BB_GRAD, "grad.dev", FP_BUF_TRANSIENT, FP_CAT_MAIN_GRAD, B->grad_bytes);
  } else {
    add_buf(lw, b, FP_BB_MAIN, "main", FP_BUF_PERSISTENT, FP_CAT_MAIN_WEIGHT, B->shard_bytes);
    if (B->trainable) add_buf(lw, b, FP_BB_GRAD, "grad", FP_BUF_PERSISTENT, FP_CAT_MAIN_GRAD, B->grad_bytes);
    add_buf(lw, b, FP_BB_OPT, "optim", FP_BUF_PERSISTENT, FP_CAT_OPT_STATE, B->opt_bytes);
  }
  if (B->weight_in_main)
    lw->bufs[b][FP_BB_UNSH] = lw->bufs[b][FP_BB_MAIN];
  else
    add_buf(lw, b, FP_BB_UNSH, "weight", ukind, FP_CAT_UNSHARDED_WEIGHT, B->unsharded_bytes);
  if (B->trainable) {
    add_buf(lw, b, FP_BB_UGRAD, "ugrad", FP_BUF_TRANSIENT, FP_CAT_UNSHARDED_GRAD, B->ugrad_bytes);
    add_buf(lw, b, FP_BB_RIN, "rin", FP_BUF_TRANSIENT, FP_CAT_STAGING, B->rin_bytes);
    if (acc || cast_out) add_buf(lw, b, FP_BB_ROUT, "rout", FP_BUF_TRANSIENT, FP_CAT_STAGING, B->rout_bytes);
    add_buf(lw, b, FP_BB_RST, "rstage", FP_BUF_TRANSIENT, FP_CAT_STAGING, B->rstage_bytes);
  }
  add_buf(lw, b, FP_BB_GST, "gstage", FP_BUF_TRANSIENT, FP_CAT_STAGING, B->gstage_bytes);
  if (B->fp8_gather) { /* G chunks of e4m3 data and their e8m0 scales (chunks: multiples of 32) */
    add_buf(lw, b, FP_BB_QD, "mx", FP_BUF_TRANSIENT, FP_CAT_STAGING, L->G * B->flat_chunk);
    add_buf(lw, b, FP_BB_QS, "mxscale", FP_BUF_TRANSIENT, FP_CAT_STAGING, L->G * B->flat_chunk / 32);
  }
  add_buf(lw, b, FP_BB_RESH, "reshard", FP_BUF_TRANSIENT, FP_CAT_RESHARD, B->reshard_chunk);
}

/* param p's entry of the program's param table */
static void ir_param_fill(fp_lower *lw, const fp_lparam *p, fp_ir_param *q) {
  const fp_layout *L = lw->L;
  q->name = p->mp->name;
  q->ndim = p->mp->ndim;
  memcpy(q->shape, p->mp->shape, sizeof q->shape);
  q->module = p->mp->module;
  q->bucket = p->bucket;
  q->main_dtype = p->main_dtype;
  q->param_dtype = p->param_dtype;
  q->grad_dtype = p->grad_dtype;
  q->requires_grad = p->mp->requires_grad;
  q->placement = p->flat_off >= 0 ? FP_PL_FLAT : (int)p->pl->kind;
  q->dim = p->pl->kind == FP_PL_SHARD ? p->pl->dim : 0;
  q->comm = p->replicated ? lw->c_world : lw->c_shard;
  q->owner = p->pl->kind == FP_PL_OWNED ? p->owner : -1;
  q->tab = p->tab;
  q->chunk = p->chunk;
  q->tp_dim = p->mp->tp_dim >= 0 && L->T > 1 ? p->mp->tp_dim : -1;
  const int *bb = lw->bufs[p->bucket];
  q->main = (fp_view){owner_buf(lw, p->bucket, FP_BB_MAIN), p->shard_off};
  if (p->mp->requires_grad) {
    q->grad = (fp_view){owner_buf(lw, p->bucket, FP_BB_GRAD), p->grad_off};
    q->ugrad = (fp_view){bb[FP_BB_UGRAD], p->ugrad_off};
  }
  q->weight = (fp_view){bb[FP_BB_UNSH], p->unsharded_off};
  if (p->opt_off >= 0 && bb[FP_BB_OPT] >= 0) q->opt = (fp_view){bb[FP_BB_OPT], p->opt_off};
  if (p->scale_off >= 0) q->scales = (fp_view){owner_buf(lw, p->bucket, FP_BB_MAIN), p->scale_off};
}

/* the param table, with the tied users */
static void setup_params(fp_lower *lw) {
  fp_layout *L = lw->L;
  fp_prog *P = lw->P;
  const fp_model *m = L->model;
  /* the param table depends on the layout alone (its buffers and
   * communicators are added above in the same order every time): made
   * once, shared by the candidates the pipeline lowers (45,000 params of
   * DeepSeek-V3 are 16 MB a lowering) */
  if (L->ir_params) {
    FP_ASSERT(P->nparams == 0);
    P->params = L->ir_params;
    P->nparams = L->nparams;
    P->cap_params = L->nparams;
  } else {
    fpi_ir_param_reserve(P, L->nparams);
    for (int i = 0; i < L->nparams; i++) ir_param_fill(lw, &L->params[i], fpi_ir_param_add(P));
    for (int k = 0; k < m->nmodules; k++) /* tied: the other modules that read a param, by module */
      for (int j = 0; j < m->modules[k].nuses; j++) {
        fp_ir_param *q = &P->params[P->nparams - L->nparams + m->modules[k].uses[j]];
        if (!q->users) q->users = fpi_alloc_array(lw->a, (size_t)m->nmodules, sizeof *q->users);
        q->users[q->nusers++] = k;
      }
    L->ir_params = P->params;
  }
}

static void setup(fp_lower *lw) {
  fp_layout *L = lw->L;
  setup_header(lw);
  setup_comms(lw);
  setup_modules(lw);
  setup_tables(lw);
  lw->bufs = fpi_alloc_array(lw->a, (size_t)L->nbuckets + 1, sizeof *lw->bufs);
  for (int b = 0; b < L->nbuckets; b++) bucket_buffers(lw, b);
  setup_params(lw);
  lw->open_at = fpi_alloc_array(lw->a, (size_t)lw->P->nbufs + 1, sizeof(int32_t));
  for (int i = 0; i < lw->P->nbufs; i++) lw->open_at[i] = -1;
}

/* ---- pieces of the step ----------------------------------------------------- */
/* set count / table / predicate of an op acting on p's shard slot */
static void on_slot(const fp_lower *lw, const fp_lparam *p, fp_op *op) {
  if (p->pl->kind == FP_PL_RAGGED || p->pl->kind == FP_PL_CYCLIC) {
    op->tab = p->tab;
    op->count = 0;
    op->comm = lw->c_shard;
  } else {
    op->count = p->slot;
  }
  fpi_lw_only_owner(lw, p, op);
}

static const fp_lparam *bucket_param(const fp_lower *lw, int b, int j) {
  return &lw->L->params[lw->L->buckets[b].lparams[j]];
}

/* a flat bucket's gather: the rank's chunk cast into its place in the flat
 * buffer, then one all-gather in place */
static void unshard_flat(fp_lower *lw, int b) {
  const fp_bucket *B = &lw->L->buckets[b];
  const fp_lparam *p0 = bucket_param(lw, b, 0);
  int main = fpi_lw_buf(lw, b, FP_BB_MAIN), u = fpi_lw_buf(lw, b, FP_BB_UNSH);
  int64_t C = B->flat_chunk, es = fpi_dtype_size(B->mp.param);
  lw->phase = FP_PH_ALL;
  if (B->fp8_gather) { /* MXFP8 on the wire: quantize the rank's chunk, gather data and scales, dequantize */
    int qd = fpi_lw_buf(lw, b, FP_BB_QD), qs = fpi_lw_buf(lw, b, FP_BB_QS);
    int64_t S = C / 32;
    open_buf(lw, qd);
    open_buf(lw, qs);
    fp_op *q = fpi_lw_emit(lw, FP_OP_QUANTIZE_MXFP8, FP_E4M3, C);
    q->sdtype = p0->main_dtype;
    q->comm = lw->c_shard;
    q->dst = fpi_reg_g(qd, 0, C);
    q->aux = fpi_reg_g(qs, 0, S);
    q->src = fpi_reg(main, 0);
    for (int k = 0; k < 2; k++) {
      fp_op *ag = fpi_lw_emit(lw, FP_OP_ALL_GATHER, k ? FP_E8M0 : FP_E4M3, k ? S : C);
      ag->comm = lw->c_shard;
      ag->dst = fpi_reg(k ? qs : qd, 0);
      ag->src = fpi_reg_g(k ? qs : qd, 0, k ? S : C);
    }
    fp_op *dq = fpi_lw_emit(lw, FP_OP_DEQUANTIZE_MXFP8, B->mp.param, lw->L->G * C);
    dq->sdtype = FP_E4M3;
    dq->dst = fpi_reg(u, 0);
    dq->src = fpi_reg(qd, 0);
    dq->aux = fpi_reg(qs, 0);
    close_buf(lw, qd);
    close_buf(lw, qs);
    return;
  }
  fp_op *op = fpi_lw_convert(lw, B->mp.param, p0->main_dtype, C, fpi_reg_g(u, 0, C * es), fpi_reg(main, 0));
  op->comm = lw->c_shard;
  op = fpi_lw_emit(lw, FP_OP_ALL_GATHER, B->mp.param, C);
  op->comm = lw->c_shard;
  op->dst = fpi_reg(u, 0);
  op->src = fpi_reg_g(u, 0, C * es);
}

/* The region table of params [j0, j1) of fsdp2 unit b (split_copy,
 * chunk_cat): per param its unsharded slot in elements (the same element
 * offset in the unsharded weights and grads, layout_unit) and its chunk,
 * in the unit's order, which is also the order of the columns of its
 * [G, S] staging. The whole unit's table is made once; a run between
 * frozen params gets its own. Sets *n to the run's elements per row. */
static int unit_regions(fp_lower *lw, int b, int j0, int j1, int64_t *n) {
  const fp_bucket *B = &lw->L->buckets[b];
  bool whole = j0 == 0 && j1 == B->nparams;
  int64_t ep = fpi_dtype_size(B->mp.param), *off = fpi_alloc_array(lw->a, (size_t)(j1 - j0), sizeof *off),
          *cnt = fpi_alloc_array(lw->a, (size_t)(j1 - j0), sizeof *cnt);
  *n = 0;
  for (int j = j0; j < j1; j++) {
    const fp_lparam *p = bucket_param(lw, b, j);
    off[j - j0] = p->unsharded_off / ep;
    cnt[j - j0] = p->chunk;
    *n += p->chunk;
  }
  if (whole && lw->unit_tab[b] >= 0) return lw->unit_tab[b];
  const char *name = whole ? fpi_sprintf(lw->a, "%s.regions", B->name)
                           : fpi_sprintf(lw->a, "%s.regions.%d", B->name, (int)lw->P->ntabs);
  int t = fpi_ir_table_add(lw->P, name, j1 - j0, off, cnt);
  if (whole) lw->unit_tab[b] = t;
  return t;
}

/* the next run [*j0, *j1) of unit b's params at or after *j1 that are all
 * trainable (or all params, when !trainable_only); false when none is left */
static bool next_run(const fp_lower *lw, int b, bool trainable_only, int *j0, int *j1) {
  int n = lw->L->buckets[b].nparams, j = *j1;
  while (j < n && trainable_only && !bucket_param(lw, b, j)->mp->requires_grad) j++;
  if (j >= n) return false;
  *j0 = j;
  while (j < n && (!trainable_only || bucket_param(lw, b, j)->mp->requires_grad)) j++;
  *j1 = j;
  return true;
}

/* an fsdp2 unit's gather as FSDP2 issues it: the copy-in of the rank's
 * packed shards into its row of the [G, S] staging (one op: FSDP2's foreach
 * copy, casting as it goes), one all_gather_into_tensor, then one
 * split_copy of the staging's columns into the params' unsharded slots
 * (FSDP2's split_with_sizes_copy; one per run of trainable params when
 * frozen ones are skipped) */
static void unshard_unit(fp_lower *lw, int b, bool trainable_only) {
  const fp_bucket *B = &lw->L->buckets[b];
  const fp_lparam *p0 = bucket_param(lw, b, 0);
  int main = fpi_lw_buf(lw, b, FP_BB_MAIN), u = fpi_lw_buf(lw, b, FP_BB_UNSH), gst = fpi_lw_buf(lw, b, FP_BB_GST);
  int64_t S = B->unit_chunk, es = fpi_dtype_size(B->mp.param), n;
  lw->phase = FP_PH_ALL;
  fp_op *op = fpi_lw_convert(lw, B->mp.param, p0->main_dtype, S, fpi_reg_g(gst, 0, S * es), fpi_reg(main, 0));
  op->comm = lw->c_shard;
  op = fpi_lw_emit(lw, FP_OP_ALL_GATHER, B->mp.param, S);
  op->comm = lw->c_shard;
  op->dst = fpi_reg(gst, 0);
  op->src = fpi_reg_g(gst, 0, S * es);
  for (int j0 = 0, j1 = 0; next_run(lw, b, trainable_only, &j0, &j1);) {
    int t = unit_regions(lw, b, j0, j1, &n);
    op = fpi_lw_emit(lw, FP_OP_SPLIT_COPY, B->mp.param, n);
    op->tab = t;
    fpi_ir_op_shape(lw->P, op, lw->L->G, 0, S * es);
    op->dst = fpi_reg(u, 0);
    op->src = fpi_reg(gst, bucket_param(lw, b, j0)->gstage_off);
  }
}

/* gather bucket b's compute weights on the ag stream, phase by phase */
/* offload: the host main shard onto the device, on the copy stream, right
 * before the gather that reads it */
static void stage_main(fp_lower *lw, int b) {
  int d = lw->bufs[b][FP_BB_MAIN];
  open_buf(lw, d);
  lw->stream = FP_STREAM_COPY;
  fp_op *op = fpi_lw_emit(lw, FP_OP_H2D, FP_U8, lw->P->bufs[d].bytes);
  op->dst = fpi_reg(d, 0);
  op->src = fpi_reg(lw->bufs[b][FP_BB_HMAIN], 0);
  lw->stream = FP_STREAM_AG;
}

static void unshard_bucket(fp_lower *lw, int b, bool trainable_only) {
  const fp_bucket *B = &lw->L->buckets[b];
  int gst = lw->bufs[b][FP_BB_GST];
  lw->stream = FP_STREAM_AG;
  lw->bucket = b;
  if (B->offload) stage_main(lw, b);
  if (B->flat || B->unit) { /* flat: frozen params are refreshed with the rest (unchanged) */
    open_buf(lw, gst);
    if (B->flat) unshard_flat(lw, b);
    else unshard_unit(lw, b, trainable_only);
    close_opt(lw, gst);
    if (B->offload) close_buf(lw, lw->bufs[b][FP_BB_MAIN]);
    lw->stream = FP_STREAM_COMPUTE;
    return;
  }
  open_buf(lw, gst);
  for (fp_lw_phase ph = FP_PH_PRE; ph <= FP_PH_POST; ph++) {
    lw->phase = ph;
    for (int j = 0; j < B->nparams; j++) {
      const fp_lparam *p = bucket_param(lw, b, j);
      if (trainable_only && !p->mp->requires_grad) continue;
      lw->seen_comm = false;
      p->impl->lower_unshard(lw, p);
    }
  }
  lw->phase = FP_PH_ALL;
  close_opt(lw, gst);
  if (B->offload) close_buf(lw, lw->bufs[b][FP_BB_MAIN]);
  lw->stream = FP_STREAM_COMPUTE;
}

/* where p's reduction reads from and writes to in micro-batch `micro` */
typedef struct redio {
  int sbuf, dbuf;
  int64_t soff, doff;
  bool direct; /* the reduction writes the main grad itself */
} redio;

static redio reduce_io(const fp_lower *lw, int b, const fp_lparam *p, int micro) {
  const int *bb = lw->bufs[b];
  redio io = {bb[FP_BB_UGRAD], -1, p->ugrad_off, 0, false};
  if (p->rin_off >= 0) io.sbuf = bb[FP_BB_RIN], io.soff = p->rin_off;
  io.direct = micro == 0 && p->reduce_dtype == p->grad_dtype;
  io.dbuf = io.direct ? bb[FP_BB_GRAD] : fpi_lw_buf(lw, b, FP_BB_ROUT);
  io.doff = io.direct ? p->grad_off : p->rout_off;
  return io;
}

/* How a bucket-level reduction divides. The flexplan default sums, then
 * multiplies by 1/(world x micro-batches) after the last micro-batch (no
 * scale when that is 1: it would only canonicalize NaNs). An
 * fsdp2 unit divides as FSDP2 does (docs/layout.md, "fsdp2 units"). */
typedef struct divide {
  fp_redop red;   /* the reduce-scatter's and the replicas' all-reduce's op */
  double pre;     /* scale the reduce input by this before the collectives (0: none) */
  double post;    /* scale the reduce output by this after them, before the write or add (0: none) */
  double last;    /* scale the main grad by this after the last micro-batch (0: none) */
} divide;

static divide flexplan_divide(const fp_lower *lw) {
  int64_t D = lw->L->world * (int64_t)lw->L->spec->grad_accumulation;
  divide d = {FP_RED_SUM, 0, 0, D > 1 ? 1.0 / (double)D : 0}; /* one rank, one micro-batch: no divide */
  return d;
}

/* FSDP2's gradient divide (torch 2.15, _fsdp_collectives.py,
 * _get_gradient_divide_factors, no gradient_divide_factor set): over D
 * data-parallel ranks (shard group x replicas), fp32 and bf16 reduce with
 * ReduceOp.AVG on the reduce-scatter and on the replicas' all-reduce (SUM,
 * no divide, when D == 1); any other reduce dtype (fp16) sums, dividing by
 * pre before and by post = D / pre after, pre the power of two FSDP2's loop
 * picks (about sqrt(D)). The plan's loss is a per-micro-batch mean, so over
 * several micro-batches the main grad is divided by their number too: an
 * extra scale FSDP2 leaves to the trainer. */
static divide fsdp2_divide(const fp_lower *lw, fp_dtype rd) {
  int64_t D = lw->L->world, ga = lw->L->spec->grad_accumulation;
  divide d = {FP_RED_SUM, 0, 0, ga > 1 ? 1.0 / (double)ga : 0};
  if (rd == FP_F32 || rd == FP_BF16) {
    if (D > 1) d.red = FP_RED_AVG;
    return d;
  }
  int64_t pre = 1;
  while (D % pre == 0 && D / pre > pre) pre *= 2;
  double post = (double)D / (double)pre;
  if (pre != 1) d.pre = 1.0 / (double)pre;
  if (post != 1) d.post = 1.0 / post;
  return d;
}

/* Hybrid sharding with several micro-batches: the replicas' all-reduce is
 * linear, so summing the micro-batches' reduce-scattered shards locally and
 * all-reducing their sum once, after the last micro-batch, gives the same
 * main grad with ga - 1 fewer all-reduces over the slow inter-node links
 * (FSDP2's set_requires_all_reduce(False) on all but the last micro-batch).
 * Not always faster: the deferred all-reduces all run at the end of the
 * step, where the last buckets' are exposed, while every micro-batch's are
 * hidden behind the next one's compute; the pipeline lowers both
 * (FP_LOWER_REPLICA_EACH) and keeps the faster modeled step.
 * Only where the accumulation is in the reduce dtype (the main-grad dtype
 * equals it), so the all-reduce moves the same dtype the spec asked for; not
 * under the fsdp2 policy (FSDP2 all-reduces every micro-batch by default). */
static bool defer_replica_reduce(const fp_lower *lw, const fp_bucket *B) {
  return lw->c_replica >= 0 && lw->L->spec->grad_accumulation > 1 && !lw->L->spec->fsdp2 && !lw->replica_each &&
         B->mp.reduce == B->mp.main_grad;
}

/* the common end of a bucket-level reduction: the pre-divide of the
 * G x n-element input, one reduce-scatter of n-element chunks from src into
 * dst (src < 0: none, dst already holds the reduced chunk), the replicas'
 * all-reduce, the post-divide, the write (cast) or add into the main grad,
 * and after the last micro-batch the divide */
static void reduce_chunks(fp_lower *lw, const int *bb, int src, int dst, int64_t n, fp_dtype rd, fp_dtype gd,
                          bool direct, int micro, bool last, const divide *dv, bool defer) {
  fp_op *op;
  FP_ASSERT(src >= 0 || dv->pre == 0); /* no input to pre-divide without a reduce-scatter */
  if (dv->pre != 0) {
    op = fpi_lw_emit(lw, FP_OP_SCALE, rd, n * lw->L->G);
    op->dst = fpi_reg(src, 0);
    op->alpha = dv->pre;
  }
  if (src >= 0) {
    op = fpi_lw_emit(lw, FP_OP_REDUCE_SCATTER, rd, n);
    op->comm = lw->c_shard;
    op->red = dv->red;
    op->dst = fpi_reg(dst, 0);
    op->src = fpi_reg(src, 0);
  }
  if (lw->c_replica >= 0 && !defer) {
    op = fpi_lw_emit(lw, FP_OP_ALL_REDUCE, rd, n);
    op->comm = lw->c_replica;
    op->red = dv->red;
    op->dst = op->src = fpi_reg(dst, 0);
  }
  if (dv->post != 0) {
    op = fpi_lw_emit(lw, FP_OP_SCALE, rd, n);
    op->dst = fpi_reg(dst, 0);
    op->alpha = dv->post;
  }
  if (!direct) {
    if (micro == 0) {
      fpi_lw_convert(lw, gd, rd, n, fpi_reg(bb[FP_BB_GRAD], 0), fpi_reg(dst, 0));
    } else {
      op = fpi_lw_emit(lw, FP_OP_ADD, gd, n);
      op->sdtype = rd;
      op->dst = fpi_reg(bb[FP_BB_GRAD], 0);
      op->src = fpi_reg(dst, 0);
    }
  }
  if (last && defer) { /* the micro-batches' sum, once across the replicas */
    op = fpi_lw_emit(lw, FP_OP_ALL_REDUCE, gd, n);
    op->comm = lw->c_replica;
    op->red = dv->red;
    op->dst = op->src = fpi_reg(bb[FP_BB_GRAD], 0);
  }
  if (last && dv->last != 0) {
    op = fpi_lw_emit(lw, FP_OP_SCALE, gd, n);
    op->dst = fpi_reg(bb[FP_BB_GRAD], 0);
    op->alpha = dv->last;
  }
}

/* the stream of a reduction's local preparation (casts into the reduce
 * dtype, the placements' staging before their collective): the rs stream,
 * as FSDP2 runs its chunk_cat; or, with FP_LOWER_PREP_ON_COMPUTE, the
 * compute stream right after the backward that wrote the grads - where a
 * backward waits for the rs stream anyway (reductions slower than the
 * backward), the rs stream then only reduces. The pipeline lowers both and
 * keeps the faster modeled step (docs/schedule.md, "Gradients"). */
static fp_stream prep_stream(const fp_lower *lw) {
  return lw->prep_on_compute ? FP_STREAM_COMPUTE : FP_STREAM_RS;
}

/* a flat bucket's reduction: one cast of the flat grads into the reduce
 * dtype, one reduce-scatter straight out of them, the replicas' all-reduce,
 * one write or add into the main grad, one divide (the padding between params
 * is zero: the trainer never writes it). Over one rank and no replicas
 * (world size 1, or a dp size of 1 under tp) the reduce-scatter is a copy,
 * so the cast writes the reduced chunk itself: no staging, one pass over
 * the grads fewer. */
static void reduce_flat(fp_lower *lw, int b, int micro, bool last) {
  const fp_bucket *B = &lw->L->buckets[b];
  const int *bb = lw->bufs[b];
  int64_t C = B->flat_chunk, n = C * lw->L->G;
  fp_dtype pd = B->mp.param, rd = B->mp.reduce, gd = B->mp.main_grad;
  int src = bb[FP_BB_UGRAD];
  bool direct = micro == 0 && rd == gd;
  int dst = direct ? bb[FP_BB_GRAD] : fpi_lw_buf(lw, b, FP_BB_ROUT);
  lw->phase = FP_PH_ALL;
  if (rd != pd) {
    bool alone = lw->L->G == 1 && lw->c_replica < 0;
    int cast_to = alone ? dst : fpi_lw_buf(lw, b, FP_BB_RIN);
    lw->stream = prep_stream(lw);
    fpi_lw_convert(lw, rd, pd, n, fpi_reg(cast_to, 0), fpi_reg(bb[FP_BB_UGRAD], 0));
    lw->stream = FP_STREAM_RS;
    src = alone ? -1 : cast_to;
  }
  divide dv = flexplan_divide(lw);
  reduce_chunks(lw, bb, src, dst, C, rd, gd, direct, micro, last, &dv, defer_replica_reduce(lw, B));
}

/* an fsdp2 unit's reduction as FSDP2 issues it: one chunk_cat of the
 * unsharded grads into the [G, S] reduce staging, cast to the reduce dtype
 * as it copies (FSDP2's chunk_cat_mixed_dtype; the padding rows are zero;
 * one per run of trainable params), one reduce_scatter_tensor straight into the packed main grads, the
 * replicas' all-reduce, one write or add, divided as FSDP2 divides
 * (fsdp2_divide: ReduceOp.AVG, or pre/post scales around a sum for fp16) */
static void reduce_unit(fp_lower *lw, int b, int micro, bool last) {
  const fp_bucket *B = &lw->L->buckets[b];
  const int *bb = lw->bufs[b];
  int64_t S = B->unit_chunk, er = fpi_dtype_size(B->mp.reduce);
  fp_dtype pd = B->mp.param, rd = B->mp.reduce, gd = B->mp.main_grad;
  bool direct = micro == 0 && rd == gd;
  int dst = direct ? bb[FP_BB_GRAD] : fpi_lw_buf(lw, b, FP_BB_ROUT), rst = fpi_lw_buf(lw, b, FP_BB_RST);
  lw->phase = FP_PH_ALL;
  fp_op *op;
  bool frozen = false;
  for (int j = 0; j < B->nparams; j++) frozen |= !bucket_param(lw, b, j)->mp->requires_grad;
  if (frozen) { /* frozen params leave their columns of the staging unwritten: zero it */
    op = fpi_lw_emit(lw, FP_OP_MEMSET, rd, S * lw->L->G);
    op->dst = fpi_reg(rst, 0);
  }
  for (int j0 = 0, j1 = 0; next_run(lw, b, true, &j0, &j1);) {
    int64_t n;
    int t = unit_regions(lw, b, j0, j1, &n);
    op = fpi_lw_emit(lw, FP_OP_CHUNK_CAT, rd, n);
    op->sdtype = pd;
    op->tab = t;
    fpi_ir_op_shape(lw->P, op, lw->L->G, S * er, 0);
    op->dst = fpi_reg(rst, bucket_param(lw, b, j0)->rstage_off);
    op->src = fpi_reg(bb[FP_BB_UGRAD], 0);
  }
  divide dv = fsdp2_divide(lw, rd);
  reduce_chunks(lw, bb, rst, dst, S, rd, gd, direct, micro, last, &dv, false); /* (fsdp2: every micro-batch) */
}

/* reduce bucket b's grads on the rs stream: casts, reductions, the
 * replicas' all-reduces, then the writes into the main grad (and, after the
 * last micro-batch, the divide), each phase for every param in turn */
static void reduce_bucket(fp_lower *lw, int b, int micro) {
  fp_layout *L = lw->L;
  const fp_bucket *B = &L->buckets[b];
  const int *bb = lw->bufs[b];
  bool last = micro == L->spec->grad_accumulation - 1;
  double f = flexplan_divide(lw).last; /* 0: none */
  lw->stream = FP_STREAM_RS;
  lw->bucket = b;
  if (B->offload && micro == 0) open_buf(lw, bb[FP_BB_GRAD]); /* the device main grad, until its d2h */
  open_buf(lw, bb[FP_BB_RIN]);
  open_buf(lw, bb[FP_BB_ROUT]);
  open_buf(lw, bb[FP_BB_RST]);
  if (B->flat) reduce_flat(lw, b, micro, last);
  if (B->unit) reduce_unit(lw, b, micro, last);
  /* casts into the reduce dtype, the placements' own staging, reductions */
  for (fp_lw_phase ph = FP_PH_PRE; ph <= FP_PH_COMM && !B->flat && !B->unit; ph++) {
    lw->phase = ph;
    lw->stream = ph == FP_PH_PRE ? prep_stream(lw) : FP_STREAM_RS;
    for (int j = 0; j < B->nparams; j++) {
      const fp_lparam *p = bucket_param(lw, b, j);
      if (!p->mp->requires_grad) continue;
      redio io = reduce_io(lw, b, p, micro);
      lw->seen_comm = false;
      if (p->rin_off >= 0)
        fpi_lw_convert(lw, p->reduce_dtype, p->param_dtype, p->padded_numel, fpi_reg(bb[FP_BB_RIN], p->rin_off),
                      fpi_reg(bb[FP_BB_UGRAD], p->ugrad_off));
      p->impl->lower_reduce(lw, p, io.sbuf, io.soff, io.dbuf, io.doff);
    }
  }
  lw->phase = FP_PH_ALL;
  lw->stream = FP_STREAM_RS;
  /* hybrid: sum the shard across replicas (ragged: the whole slot, since
   * replicas of one piece share its size but pieces differ) */
  bool defer = defer_replica_reduce(lw, B);
  for (int j = 0; j < B->nparams && lw->c_replica >= 0 && !B->flat && !B->unit && !defer; j++) {
    const fp_lparam *p = bucket_param(lw, b, j);
    if (!p->mp->requires_grad || p->replicated) continue;
    redio io = reduce_io(lw, b, p, micro);
    fp_op *op = fpi_lw_emit(lw, FP_OP_ALL_REDUCE, p->reduce_dtype, p->slot);
    op->comm = lw->c_replica;
    op->dst = op->src = fpi_reg(io.dbuf, io.doff);
    fpi_lw_only_owner(lw, p, op);
  }
  for (int j = 0; j < B->nparams && !B->flat && !B->unit; j++) {
    const fp_lparam *p = bucket_param(lw, b, j);
    if (!p->mp->requires_grad) continue;
    redio io = reduce_io(lw, b, p, micro);
    fp_op *op;
    if (!io.direct) {
      if (micro == 0) {
        op = fpi_lw_convert(lw, p->grad_dtype, p->reduce_dtype, 0, fpi_reg(bb[FP_BB_GRAD], p->grad_off),
                           fpi_reg(io.dbuf, io.doff));
      } else {
        op = fpi_lw_emit(lw, FP_OP_ADD, p->grad_dtype, 0);
        op->sdtype = p->reduce_dtype;
        op->dst = fpi_reg(bb[FP_BB_GRAD], p->grad_off);
        op->src = fpi_reg(io.dbuf, io.doff);
      }
      on_slot(lw, p, op);
      if (op->code == FP_OP_COPY) {
        int64_t pitch = op->count * fpi_dtype_size(op->dtype);
        fpi_ir_op_shape(lw->P, op, 1, pitch, pitch);
      }
    }
    if (last && defer && !p->replicated) { /* the micro-batches' sum, once across the replicas */
      op = fpi_lw_emit(lw, FP_OP_ALL_REDUCE, p->grad_dtype, p->slot);
      op->comm = lw->c_replica;
      op->dst = op->src = fpi_reg(bb[FP_BB_GRAD], p->grad_off);
      fpi_lw_only_owner(lw, p, op);
    }
    if (last && f != 0) {
      op = fpi_lw_emit(lw, FP_OP_SCALE, p->grad_dtype, 0);
      op->dst = fpi_reg(bb[FP_BB_GRAD], p->grad_off);
      op->alpha = f;
      on_slot(lw, p, op);
    }
  }
  close_opt(lw, bb[FP_BB_RST]);
  close_opt(lw, bb[FP_BB_ROUT]);
  close_opt(lw, bb[FP_BB_RIN]);
  close_buf(lw, bb[FP_BB_UGRAD]);
  if (B->offload && last) { /* the final main grad to the host, on the copy stream */
    lw->stream = FP_STREAM_COPY;
    fp_op *op = fpi_lw_emit(lw, FP_OP_D2H, FP_U8, lw->P->bufs[bb[FP_BB_GRAD]].bytes);
    op->dst = fpi_reg(bb[FP_BB_HGRAD], 0);
    op->src = fpi_reg(bb[FP_BB_GRAD], 0);
    close_buf(lw, bb[FP_BB_GRAD]);
  }
  lw->stream = FP_STREAM_COMPUTE;
}

/* the buckets of the params a module reads (its own and those it "uses"),
 * each once */
static int module_buckets(const fp_lower *lw, int mod, int *out) {
  const fp_module *M = &lw->L->model->modules[mod];
  int n = 0;
  for (int j = 0; j < M->nparams + M->nuses; j++) {
    int pi = j < M->nparams ? M->first_param + j : M->uses[j - M->nparams];
    int b = lw->L->params[pi].bucket;
    bool seen = false;
    for (int k = 0; k < n; k++) seen |= out[k] == b;
    if (!seen) out[n++] = b;
  }
  return n;
}

static void compute(fp_lower *lw, int mod, fp_pass pass, int *scratch, int32_t *ids) {
  const fp_module *M = &lw->L->model->modules[mod];
  lw->bucket = -1;
  fp_op *op = fpi_lw_emit(lw, FP_OP_COMPUTE, FP_F32, 0);
  op->module = mod;
  op->pass = pass;
  /* a recomputed module's backward runs its forward again first */
  op->alpha = pass == FP_PASS_FWD ? M->flops_fwd : M->flops_bwd + (lw->L->recompute[mod] ? M->flops_fwd : 0);
  int nb = module_buckets(lw, mod, scratch), n = 0;
  for (int k = 0; k < nb; k++) {
    const fp_bucket *B = &lw->L->buckets[scratch[k]];
    ids[n++] = lw->bufs[scratch[k]][FP_BB_UNSH];
    if (pass == FP_PASS_BWD && B->trainable) ids[n++] = lw->bufs[scratch[k]][FP_BB_UGRAD];
  }
  int m = 0;
  for (int k = 0; k < n; k++)
    if (ids[k] >= 0) ids[m++] = ids[k];
  fpi_ir_op_uses(lw->P, op, ids, m);
}

/* ---- prefetch: where each bucket's all-gathers are issued ------------------ */
static const fp_layout *sort_L;
static int by_first(const void *a, const void *b) {
  const fp_bucket *x = &sort_L->buckets[*(const int *)a], *y = &sort_L->buckets[*(const int *)b];
  if (x->first_pos != y->first_pos) return x->first_pos - y->first_pos;
  return *(const int *)a - *(const int *)b;
}
static int by_last_desc(const void *a, const void *b) {
  const fp_bucket *x = &sort_L->buckets[*(const int *)a], *y = &sort_L->buckets[*(const int *)b];
  if (x->last_pos != y->last_pos) return y->last_pos - x->last_pos;
  return *(const int *)a - *(const int *)b;
}

/* Forward: order the gathered buckets by first use; bucket r is issued in
 * the pre_forward where bucket r-kf is first used (the first kf+1 at the
 * first one). Backward: order every bucket by first backward use (its last
 * forward position, descending); a bucket that needs a re-gather is issued
 * in the pre_backward of the bucket kb before it. */
static void plan_prefetch(fp_lower *lw) {
  fp_layout *L = lw->L;
  int nb = L->nbuckets, *ord = fpi_alloc_array(lw->a, (size_t)nb + 1, sizeof(int)), n = 0;
  lw->fwd_issue = fpi_alloc_array(lw->a, (size_t)nb + 1, sizeof(int));
  lw->bwd_issue = fpi_alloc_array(lw->a, (size_t)nb + 1, sizeof(int));
  for (int b = 0; b < nb; b++) lw->fwd_issue[b] = lw->bwd_issue[b] = -1;
  sort_L = L;
  for (int b = 0; b < nb; b++)
    if (!L->buckets[b].persistent_unsharded || (lw->defer_refresh && fpi_bucket_refreshed(&L->buckets[b]))) ord[n++] = b;
  qsort(ord, (size_t)n, sizeof *ord, by_first);
  for (int r = 0; r < n; r++) lw->fwd_issue[ord[r]] = L->buckets[ord[r < lw->kf ? 0 : r - lw->kf]].first_pos;
  for (int b = 0; b < nb; b++) ord[b] = b;
  qsort(ord, (size_t)nb, sizeof *ord, by_last_desc);
  lw->bwd_order = fpi_alloc_array(lw->a, (size_t)nb + 1, sizeof(int));
  memcpy(lw->bwd_order, ord, (size_t)nb * sizeof(int));
  for (int r = 0; r < nb; r++) {
    const fp_bucket *B = &L->buckets[ord[r]];
    if (B->persistent_unsharded || B->reshard == 0) continue;
    lw->bwd_issue[ord[r]] = L->buckets[ord[r < lw->kb ? 0 : r - lw->kb]].last_pos;
  }
  sort_L = NULL;
}

static void forward_gather(fp_lower *lw, int b, int micro) {
  if (lw->L->buckets[b].persistent_unsharded) { /* defer_refresh: once per step, into its persistent buffer */
    if (micro == 0) unshard_bucket(lw, b, true);
    return;
  }
  open_buf(lw, lw->bufs[b][FP_BB_UNSH]);
  unshard_bucket(lw, b, false);
}

static void backward_gather(fp_lower *lw, int b) {
  const fp_bucket *B = &lw->L->buckets[b];
  int u = lw->bufs[b][FP_BB_UNSH];
  open_buf(lw, u);
  if (B->reshard == lw->L->G) {
    unshard_bucket(lw, b, false);
    return;
  }
  lw->stream = FP_STREAM_AG;
  lw->bucket = b;
  fp_op *op = fpi_lw_emit(lw, FP_OP_ALL_GATHER, FP_U8, B->reshard_chunk);
  op->comm = lw->c_reshard[b];
  op->dst = fpi_reg(u, 0);
  op->src = fpi_reg(lw->bufs[b][FP_BB_RESH], 0);
  close_buf(lw, lw->bufs[b][FP_BB_RESH]);
  lw->stream = FP_STREAM_COMPUTE;
}

/* the buckets by position in the module order, ascending (a segment
 * visits only its own buckets: lowering is linear in modules + buckets) */
enum { AT_FWD_ISSUE, AT_LAST, AT_BWD_ISSUE, AT_FIRST, AT_N };
typedef struct poslists {
  int *start[AT_N]; /* per key and position: list[k][start[k][pos] .. start[k][pos + 1]) */
  int *list[AT_N];
} poslists;

static int pos_key(const fp_lower *lw, int k, int b) {
  const fp_bucket *B = &lw->L->buckets[b];
  return k == AT_FWD_ISSUE ? lw->fwd_issue[b] : k == AT_LAST ? B->last_pos : k == AT_BWD_ISSUE ? lw->bwd_issue[b]
                                                                                                 : B->first_pos;
}

static void poslists_build(fp_lower *lw, poslists *pl) {
  int np = lw->L->model->norder, nb = lw->L->nbuckets;
  for (int k = 0; k < AT_N; k++) {
    int *st = fpi_alloc_array(lw->a, (size_t)np + 2, sizeof(int)), *li = fpi_alloc_array(lw->a, (size_t)nb + 1, sizeof(int));
    memset(st, 0, ((size_t)np + 2) * sizeof(int));
    for (int b = 0; b < nb; b++) {
      int pos = pos_key(lw, k, b);
      if (pos >= 0 && pos < np) st[pos + 2]++;
    }
    for (int pos = 0; pos < np; pos++) st[pos + 2] += st[pos + 1];
    for (int j = 0; j < nb; j++) { /* stable: each list in bucket order, backward issues in backward order */
      int b = k == AT_BWD_ISSUE ? lw->bwd_order[j] : j;
      int pos = pos_key(lw, k, b);
      if (pos >= 0 && pos < np) li[st[pos + 1]++] = b;
    }
    pl->start[k] = st, pl->list[k] = li;
  }
}

#define FOR_AT(pl, k, pos, b) \
  for (int at_ = (pl)->start[k][pos], b; at_ < (pl)->start[k][(pos) + 1] && (b = (pl)->list[k][at_], 1); at_++)

static void micro_batch(fp_lower *lw, int micro, int *scratch, int32_t *ids, const poslists *pl) {
  fp_layout *L = lw->L;
  const fp_model *m = L->model;
  for (int pos = 0; pos < m->norder; pos++) {
    int mod = m->order[pos];
    fpi_ir_seg_begin(lw->P, FP_SEG_PRE_FORWARD, mod, micro);
    FOR_AT(pl, AT_FWD_ISSUE, pos, b) forward_gather(lw, b, micro);
    compute(lw, mod, FP_PASS_FWD, scratch, ids);
    fpi_ir_seg_begin(lw->P, FP_SEG_POST_FORWARD, mod, micro);
    FOR_AT(pl, AT_LAST, pos, b) {
      const fp_bucket *B = &L->buckets[b];
      if (B->last_pos != pos || B->persistent_unsharded || B->reshard == 0) continue;
      lw->bucket = b;
      int u = lw->bufs[b][FP_BB_UNSH];
      if (B->reshard_chunk > 0) {
        int r = lw->bufs[b][FP_BB_RESH];
        open_buf(lw, r);
        fp_op *op = fpi_lw_emit(lw, FP_OP_COPY, FP_U8, B->reshard_chunk);
        op->comm = lw->c_reshard[b];
        op->dst = fpi_reg(r, 0);
        op->src = fpi_reg_g(u, 0, B->reshard_chunk);
        fpi_ir_op_shape(lw->P, op, 1, B->reshard_chunk, B->reshard_chunk);
      }
      close_buf(lw, u);
    }
  }
  for (int pos = m->norder - 1; pos >= 0; pos--) {
    int mod = m->order[pos];
    fpi_ir_seg_begin(lw->P, FP_SEG_PRE_BACKWARD, mod, micro);
    FOR_AT(pl, AT_LAST, pos, b) {
      const fp_bucket *B = &L->buckets[b];
      if (B->last_pos != pos || !B->trainable) continue;
      lw->bucket = b;
      int ug = lw->bufs[b][FP_BB_UGRAD];
      open_buf(lw, ug);
      fp_op *op = fpi_lw_emit(lw, FP_OP_MEMSET, B->mp.param, B->ugrad_bytes / fpi_dtype_size(B->mp.param));
      op->dst = fpi_reg(ug, 0);
    }
    /* in backward order: the bucket used first is gathered first, then the
     * ones prefetched behind it (FSDP2's order at its first pre_backward);
     * the position lists keep that order (poslists_build) */
    FOR_AT(pl, AT_BWD_ISSUE, pos, b) backward_gather(lw, b);
    compute(lw, mod, FP_PASS_BWD, scratch, ids);
    fpi_ir_seg_begin(lw->P, FP_SEG_POST_BACKWARD, mod, micro);
    FOR_AT(pl, AT_FIRST, pos, b) {
      const fp_bucket *B = &L->buckets[b];
      if (B->first_pos != pos) continue;
      if (B->trainable) reduce_bucket(lw, b, micro);
      if (!B->persistent_unsharded) close_buf(lw, lw->bufs[b][FP_BB_UNSH]);
    }
  }
}

/* the trainer's optimizer reads every main grad and writes every trainable
 * main weight; then persistent compute weights are refreshed */
static void optimizer(fp_lower *lw, int32_t *ids) {
  fp_layout *L = lw->L;
  fpi_ir_seg_begin(lw->P, FP_SEG_PRE_OPTIMIZER, -1, 0);
  lw->bucket = -1;
  int n = 0;
  for (int b = 0; b < L->nbuckets; b++) {
    if (!L->buckets[b].trainable) continue;
    if (owner_buf(lw, b, FP_BB_MAIN) >= 0) ids[n++] = owner_buf(lw, b, FP_BB_MAIN);
    if (owner_buf(lw, b, FP_BB_GRAD) >= 0) ids[n++] = owner_buf(lw, b, FP_BB_GRAD);
    if (lw->bufs[b][FP_BB_OPT] >= 0) ids[n++] = lw->bufs[b][FP_BB_OPT];
  }
  fp_op *op = fpi_lw_emit(lw, FP_OP_COMPUTE, FP_F32, 0);
  op->pass = FP_PASS_OPT;
  fpi_ir_op_uses(lw->P, op, ids, n);
  fpi_ir_seg_begin(lw->P, FP_SEG_POST_OPTIMIZER, -1, 0);
  for (int b = 0; b < L->nbuckets; b++) {
    const fp_bucket *B = &L->buckets[b];
    if (!fpi_bucket_refreshed(B) || lw->defer_refresh) continue;
    unshard_bucket(lw, b, true);
  }
}

fp_prog *fpi_lower_step(fp_arena *a, fp_diag *d, fp_layout *L, int kf, int kb, unsigned flags) {
  (void)d;
  FP_ASSERT(kf >= 0 && kb >= 0);
  fp_lower lw = {0};
  lw.L = L;
  lw.a = a;
  lw.P = fpi_prog_new(a);
  lw.stream = FP_STREAM_COMPUTE;
  lw.bucket = -1;
  lw.kf = kf;
  lw.kb = kb;
  lw.defer_refresh = flags & FP_LOWER_DEFER_REFRESH;
  lw.replica_each = flags & FP_LOWER_REPLICA_EACH;
  lw.prep_on_compute = (flags & FP_LOWER_PREP_ON_COMPUTE) && !L->spec->fsdp2;
  setup(&lw);
  plan_prefetch(&lw);
  int *scratch = fpi_alloc_array(a, (size_t)L->nbuckets + 1, sizeof(int));
  int32_t *ids = fpi_alloc_array(a, 3 * (size_t)L->nbuckets + 2, sizeof(int32_t));
  fpi_ir_seg_begin(lw.P, FP_SEG_STEP_BEGIN, -1, 0);
  poslists pl;
  poslists_build(&lw, &pl);
  for (int k = 0; k < L->spec->grad_accumulation; k++) micro_batch(&lw, k, scratch, ids, &pl);
  optimizer(&lw, ids);
  for (int i = 0; i < lw.P->nbufs; i++) FP_ASSERT(lw.open_at[i] < 0);
  return lw.P;
}
