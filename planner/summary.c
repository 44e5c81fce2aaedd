/* summary.c - what a compile (or a plan read back) comes to, as figures a
 * person reads: the counts of the program (params, buckets, ops,
 * collectives), the bytes each rank holds by kind (main weights, grads,
 * optimizer state, frozen buckets kept whole, arena, host), the bytes it
 * communicates per step, the memory lower bound and peak, the prefetch
 * depths and the modeled step. fpi_summarize takes them from a compile
 * (pipeline.c keeps them on the plan as "figures"), fpi_summarize_plan from
 * a plan.json read back; fpi_summary_json / fpi_summary_text write them for
 * `flexplan compile --emit summary` and the CLI's report, and
 * fpi_summary_warn_device the one warning line of a plan over the device
 * memory. Nothing here decides anything about the plan. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"

/* bytes a collective moves for the rank: the whole buffer the op covers */
static int64_t comm_bytes(const fp_prog *p, const fp_op *op) {
  const fp_ir_comm *c = &p->comms[op->comm];
  int64_t es = fpi_dtype_size(op->dtype);
  switch (op->code) {
  case FP_OP_ALL_GATHER:
  case FP_OP_REDUCE_SCATTER: return c->size * op->count * es;
  case FP_OP_ALL_GATHER_V:
  case FP_OP_REDUCE_SCATTER_V: {
    const fp_ir_table *t = &p->tabs[op->tab];
    int64_t n = 0;
    for (int64_t i = 0; i < t->n; i++) n += t->cnt[i];
    return n * es;
  }
  default: return op->count * es;
  }
}

/* the figures of the program itself; G: the shard group's size (predicated
 * collectives name a rank of it) */
/* Frozen buckets kept whole on every rank (no_shard or replicate, every param
 * frozen): what they hold per rank, what holding the compute weight in the
 * main weight saved, and what sharding them would cost instead, counted as
 * full_shard with reshard after forward lowers a frozen bucket: one
 * all-gather of its compute weights in each forward and each backward of
 * every micro-batch (the backward still reads them for the input grads). */
static void summarize_frozen(const fp_prog *p, fp_summary *s) {
  int64_t G = 1;
  for (int32_t c = 0; c < p->ncomms; c++)
    if (!strcmp(p->comms[c].name, "shard") || (!strcmp(p->comms[c].name, "world") && G == 1)) G = p->comms[c].size;
  /* one pass over the params, per bucket: all frozen and replicated?, its
   * main and weight buffers, its compute bytes */
  typedef struct {
    bool any, frozen;
    int32_t main, weight;
    int64_t gather;
  } fb;
  fb *f = calloc((size_t)p->nbuckets + 1, sizeof *f);
  FP_ASSERT(f);
  for (int32_t i = 0; i < p->nparams; i++) {
    const fp_ir_param *q = &p->params[i];
    if (q->bucket < 0 || q->bucket >= p->nbuckets) continue;
    fb *b = &f[q->bucket];
    if (!b->any) b->any = b->frozen = true;
    b->frozen &= !q->requires_grad && q->placement == FP_PL_REPLICATE && q->main.buf >= 0;
    b->main = q->main.buf, b->weight = q->weight.buf;
    int64_t n = fpi_dtype_size(q->param_dtype);
    for (int k = 0; k < q->ndim; k++) n *= q->shape[k];
    b->gather += n;
  }
  for (int32_t k = 0; k < p->nbuckets; k++) {
    const fb *b = &f[k];
    if (!b->any || !b->frozen) continue;
    s->frozen_replicated_bytes += p->bufs[b->main].bytes + (b->weight >= 0 && b->weight != b->main ? p->bufs[b->weight].bytes : 0);
    if (b->weight == b->main) s->frozen_one_copy_saved_bytes += p->bufs[b->main].bytes;
    if (G > 1) {
      s->frozen_gathers_avoided += 2 * p->grad_accumulation;
      s->frozen_gather_bytes_avoided += 2 * p->grad_accumulation * b->gather;
    }
  }
  free(f);
}

static void summarize_prog(const fp_prog *p, int64_t G, fp_summary *s) {
  memset(s, 0, sizeof *s);
  s->model = p->model;
  s->strategy = p->strategy;
  s->world_size = p->world_size;
  s->tp = p->tp;
  s->buckets = p->nbuckets;
  s->params = p->nparams;
  s->ops = p->nops;
  /* predicated collectives (owned params) run on some ranks only: count per
   * shard-group rank and report the rank that joins the most */
  int64_t *pred = calloc((size_t)(G > 0 ? G : 1), sizeof *pred);
  FP_ASSERT(pred);
  int64_t common = 0;
  for (int i = 0; i < p->nops; i++) {
    const fp_op *op = &p->ops[i];
    if (fpi_op_class(op->code) != FP_OPC_COMM) continue;
    s->collectives++;
    int64_t b = comm_bytes(p, op), *sum = op->only >= 0 && op->only < G ? &pred[op->only] : &common;
    if (!fpi_add64(*sum, b, sum)) *sum = INT64_MAX; /* saturate: a figure, not an offset */
  }
  int64_t worst = 0;
  for (int64_t g = 0; g < G; g++)
    if (pred[g] > worst) worst = pred[g];
  free(pred);
  if (!fpi_add64(common, worst, &s->comm_bytes_per_rank)) s->comm_bytes_per_rank = INT64_MAX;
  for (int b = 0; b < p->nbufs; b++) {
    const fp_ir_buf *B = &p->bufs[b];
    if (B->kind != FP_BUF_PERSISTENT) continue; /* (offload's device staging of the host copies) */
    if (B->cat == FP_CAT_MAIN_WEIGHT) s->param_shard_bytes += B->bytes;
    if (B->cat == FP_CAT_MAIN_GRAD) s->grad_shard_bytes += B->bytes;
    if (B->cat == FP_CAT_OPT_STATE) s->optimizer_state_bytes += B->bytes;
    if (B->host && B->cat < FP_NBUFCATS) s->host_by_cat[B->cat] += B->bytes;
  }
  summarize_frozen(p, s);
  s->optimizer = fpi_optim_name(p->optim);
  s->optimizer_dtype = p->optim != FP_OPTIM_NONE ? fpi_dtype_name(p->optim_dtype) : NULL;
  s->arena_bytes = p->arena_bytes;
  s->host_bytes = p->host_bytes;
  s->hardware = p->hw.name;
  s->device_bytes = p->hw.hbm_bytes;
  s->memory_budget_bytes = p->memory_budget_bytes;
}

void fpi_summarize(const fp_compiled *c, double compile_ms, fp_summary *s) {
  if (c->summary) {
    *s = *c->summary;
    s->compile_ms = compile_ms;
    return;
  }
  summarize_prog(c->prog, c->layout.G, s);
  /* one copy under mixed precision (layout.c, resolve_params): the copy the
   * plan did not make is the main weight in the model's dtype; the plan
   * (and summarize_prog) only knows the compute dtype it keeps */
  const fp_layout *L = &c->layout;
  for (int b = 0; b < L->nbuckets; b++) {
    const fp_bucket *B = &L->buckets[b];
    if (!B->weight_in_main) continue;
    for (int j = 0; j < B->nparams; j++) {
      const fp_lparam *p = &L->params[B->lparams[j]];
      int64_t model = 0, kept = 0;
      if (p->mp->dtype == p->main_dtype || !fpi_mul64(p->slot, fpi_dtype_size(p->mp->dtype), &model) ||
          !fpi_align64(model, FP_PARAM_ALIGN, &model) || !fpi_mul64(p->slot, fpi_dtype_size(p->main_dtype), &kept) ||
          !fpi_align64(kept, FP_PARAM_ALIGN, &kept))
        continue;
      s->frozen_one_copy_saved_bytes += model - kept;
    }
  }
  s->persistent_bytes = c->stats.persistent_bytes;
  s->peak_bytes = c->stats.peak_bytes;
  s->lower_bound_bytes = c->stats.lower_bound_bytes;
  s->activation_peak_bytes = c->stats.activation_peak;
  s->prefetch_forward = c->prefetch_fwd;
  s->prefetch_backward = c->prefetch_bwd;
  s->modeled_step_ms = c->sim.step_us / 1e3;
  s->modeled_compute_ms = c->sim.compute_us / 1e3;
  s->modeled_exposed_comm_ms = c->sim.exposed_comm_us / 1e3;
  s->compile_ms = compile_ms;
}

bool fpi_summarize_plan(const fp_prog *p, fp_summary *s) {
  const fp_figures *g = p->figures;
  if (!g) return false;
  summarize_prog(p, 0, s);
  s->comm_bytes_per_rank = g->comm_bytes_per_rank; /* the compile's: it knew the shard group */
  s->persistent_bytes = g->persistent_bytes;
  s->peak_bytes = g->peak_bytes;
  s->lower_bound_bytes = g->lower_bound_bytes;
  s->activation_peak_bytes = g->activation_peak_bytes;
  s->prefetch_forward = (int)g->prefetch_forward;
  s->prefetch_backward = (int)g->prefetch_backward;
  s->modeled_step_ms = g->modeled_step_ms;
  s->modeled_compute_ms = g->modeled_compute_ms;
  s->modeled_exposed_comm_ms = g->modeled_exposed_comm_ms;
  return true;
}

void fpi_summary_json(const fp_summary *s, FILE *f) {
  fprintf(f, "{\n  \"model\": \"");
  for (const char *q = s->model; *q; q++) {
    if (*q == '"' || *q == '\\') fputc('\\', f);
    if ((unsigned char)*q < 0x20)
      fprintf(f, "\\u%04x", *q);
    else
      fputc(*q, f);
  }
  fprintf(f, "\",\n  \"world_size\": %" PRId64 ",\n  \"strategy\": \"%s\",\n", s->world_size, s->strategy);
  if (s->tp > 1) fprintf(f, "  \"tp\": %" PRId64 ",\n  \"dp\": %" PRId64 ",\n", s->tp, s->world_size / s->tp);
  fprintf(f, "  \"buckets\": %" PRId64 ",\n  \"params\": %" PRId64 ",\n  \"ops\": %" PRId64 ",\n", s->buckets,
          s->params, s->ops);
  fprintf(f, "  \"collectives\": %" PRId64 ",\n", s->collectives);
  fprintf(f, "  \"param_shard_bytes\": %" PRId64 ",\n  \"grad_shard_bytes\": %" PRId64 ",\n", s->param_shard_bytes,
          s->grad_shard_bytes);
  fprintf(f, "  \"optimizer\": \"%s\",\n", s->optimizer ? s->optimizer : "none");
  if (s->optimizer_dtype) fprintf(f, "  \"optimizer_state_dtype\": \"%s\",\n", s->optimizer_dtype);
  fprintf(f, "  \"optimizer_state_bytes\": %" PRId64 ",\n", s->optimizer_state_bytes);
  fprintf(f, "  \"frozen_replicated_bytes\": %" PRId64 ",\n  \"frozen_one_copy_saved_bytes\": %" PRId64 ",\n",
          s->frozen_replicated_bytes, s->frozen_one_copy_saved_bytes);
  fprintf(f, "  \"frozen_gathers_avoided\": %" PRId64 ",\n  \"frozen_gather_bytes_avoided\": %" PRId64 ",\n",
          s->frozen_gathers_avoided, s->frozen_gather_bytes_avoided);
  fprintf(f, "  \"persistent_bytes\": %" PRId64 ",\n  \"comm_bytes_per_rank\": %" PRId64 ",\n", s->persistent_bytes,
          s->comm_bytes_per_rank);
  fprintf(f, "  \"arena_bytes\": %" PRId64 ",\n  \"host_bytes\": %" PRId64 ",\n  \"peak_bytes\": %" PRId64 ",\n",
          s->arena_bytes, s->host_bytes, s->peak_bytes);
  fprintf(f, "  \"lower_bound_bytes\": %" PRId64 ",\n  \"activation_peak_bytes\": %" PRId64 ",\n",
          s->lower_bound_bytes, s->activation_peak_bytes);
  fprintf(f, "  \"arena_over_lower_bound\": %.4f,\n",
          s->lower_bound_bytes ? (double)s->arena_bytes / (double)s->lower_bound_bytes : 1.0);
  fprintf(f, "  \"prefetch_forward\": %d,\n  \"prefetch_backward\": %d,\n", s->prefetch_forward,
          s->prefetch_backward);
  fprintf(f, "  \"hardware\": \"%s\",\n", s->hardware ? s->hardware : "");
  fprintf(f, "  \"device_bytes\": %" PRId64 ",\n  \"over_device_bytes\": %" PRId64 ",\n", s->device_bytes,
          fpi_summary_over_device(s));
  fprintf(f, "  \"modeled_step_ms\": %.6f,\n  \"modeled_compute_ms\": %.6f,\n", s->modeled_step_ms,
          s->modeled_compute_ms);
  fprintf(f, "  \"modeled_exposed_comm_ms\": %.6f,\n", s->modeled_exposed_comm_ms);
  fprintf(f, "  \"compile_ms\": %.3f\n}\n", s->compile_ms);
}

static void gib(FILE *f, const char *label, int64_t b) {
  fprintf(f, "  %-22s %12.3f GiB  (%" PRId64 " bytes)\n", label, (double)b / (1 << 30), b);
}

void fpi_summary_text(const fp_summary *s, FILE *f) {
  char hq[128];
  fputs("flexplan: ", f);
  fpi_fput_name(f, s->model);
  fprintf(f, ": %s on %" PRId64 " ranks\n", s->strategy, s->world_size);
  fpi_ir_mesh_text(f, "  ", s->world_size, s->tp);
  fprintf(f, "  %" PRId64 " params in %" PRId64 " buckets; %" PRId64 " ops, %" PRId64 " collectives per step\n",
          s->params, s->buckets, s->ops, s->collectives);
  fprintf(f, s->tp > 1 ? "  per rank (the rank that needs most; its tp-local slices):\n"
                       : "  per rank (the rank that needs most):\n");
  gib(f, "main weights (shard)", s->param_shard_bytes);
  gib(f, "main grads (shard)", s->grad_shard_bytes);
  if (s->optimizer_dtype) {
    char what[64];
    snprintf(what, sizeof what, "optimizer (%s %s)", s->optimizer, s->optimizer_dtype);
    gib(f, what, s->optimizer_state_bytes);
  }
  gib(f, "persistent", s->persistent_bytes);
  if (s->frozen_replicated_bytes) {
    gib(f, "frozen, kept whole", s->frozen_replicated_bytes);
    if (s->frozen_one_copy_saved_bytes) gib(f, "  one copy saved", s->frozen_one_copy_saved_bytes);
    if (s->frozen_gathers_avoided)
      fprintf(f, "  %-22s %12" PRId64 " all-gathers, %.3f GiB per step\n", "  sharding would add",
              s->frozen_gathers_avoided, (double)s->frozen_gather_bytes_avoided / (1 << 30));
  }
  gib(f, "arena", s->arena_bytes);
  if (s->host_bytes) gib(f, "host (offload)", s->host_bytes);
  gib(f, "lower bound", s->lower_bound_bytes);
  gib(f, "peak (+activations)", s->peak_bytes);
  gib(f, "communicated / step", s->comm_bytes_per_rank);
  fprintf(f, "  arena / lower bound    %12.4f\n",
          s->lower_bound_bytes ? (double)s->arena_bytes / (double)s->lower_bound_bytes : 1.0);
  fprintf(f, "  prefetch depth         forward %d, backward %d\n", s->prefetch_forward, s->prefetch_backward);
  fprintf(f, "  modeled on %s: step %.3f ms, compute %.3f ms, exposed communication %.3f ms\n",
          fpi_quote(hq, sizeof hq, s->hardware), s->modeled_step_ms, s->modeled_compute_ms, s->modeled_exposed_comm_ms);
  int64_t over = fpi_summary_over_device(s);
  if (over > 0)
    fprintf(f, "  does NOT fit %s's %.3f GiB of device memory: %.3f GiB over\n", fpi_quote(hq, sizeof hq, s->hardware),
            (double)s->device_bytes / (1 << 30), (double)over / (1 << 30));
  fprintf(f, "  compiled in %.1f ms\n", s->compile_ms);
}

int64_t fpi_summary_over_device(const fp_summary *s) {
  return s->device_bytes > 0 && s->peak_bytes > s->device_bytes ? s->peak_bytes - s->device_bytes : 0;
}

/* the items of the peak, largest first: main weights, main grads, the rest
 * of the persistent buffers, the transient arena, the activations */
void fpi_summary_warn_device(const fp_summary *s, FILE *f) {
  int64_t over = fpi_summary_over_device(s);
  if (over <= 0 || s->memory_budget_bytes > 0) return;
  typedef struct item {
    const char *name;
    int64_t bytes;
  } item;
  item it[6] = {
      /* on the device: offloaded buckets keep these in host memory */
      {"main weights (shard)", s->param_shard_bytes - s->host_by_cat[FP_CAT_MAIN_WEIGHT]},
      {"main grads (shard)", s->grad_shard_bytes - s->host_by_cat[FP_CAT_MAIN_GRAD]},
      {"optimizer state", s->optimizer_state_bytes - s->host_by_cat[FP_CAT_OPT_STATE]},
      {"other persistent buffers", 0},
      {"transient arena", s->arena_bytes - s->persistent_bytes},
      {"activations", s->activation_peak_bytes}};
  it[3].bytes = s->persistent_bytes - it[0].bytes - it[1].bytes - it[2].bytes;
  for (int i = 1; i < 6; i++) /* insertion sort, largest first */
    for (int j = i; j > 0 && it[j].bytes > it[j - 1].bytes; j--) {
      item t = it[j];
      it[j] = it[j - 1], it[j - 1] = t;
    }
  char mq[256], hq[128];
  fprintf(f, "flexplan: warning: %s: the plan needs %.3f GiB per rank at its peak, %.3f GiB more than %s's %.3f GiB "
          "of device memory; largest: ", fpi_quote(mq, sizeof mq, s->model), (double)s->peak_bytes / (1 << 30),
          (double)over / (1 << 30), s->hardware ? fpi_quote(hq, sizeof hq, s->hardware) : "the hardware", (double)s->device_bytes / (1 << 30));
  for (int i = 0, n = 0; i < 6; i++)
    if (it[i].bytes > 0) fprintf(f, "%s%s %.3f GiB", n++ ? ", " : "", it[i].name, (double)it[i].bytes / (1 << 30));
  fprintf(f, " (set memory_budget_bytes to have the compile fit the plan or refuse it, or shard further)\n");
}
