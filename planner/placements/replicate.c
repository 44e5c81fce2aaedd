/* replicate.c - the `replicate` placement (also what no_shard patterns and
 * the no_shard strategy give): every rank keeps the whole param. The compute
 * copy is a local cast of the main weights; gradients are all-reduced over
 * the whole world (so hybrid_shard needs no second all-reduce for them). */
#include "../lower.h"

static const char *const replicate_members[] = {NULL};

static bool replicate_parse(struct fp_jctx *c, const struct fp_jv *o, const char *ptr, fp_placement_spec *p) {
  (void)c, (void)o, (void)ptr, (void)p;
  return true; /* nothing but "kind" */
}

static bool replicate_layout(fp_layout *L, fp_lparam *p) {
  (void)L;
  p->chunk = p->mp->numel;
  p->slot = p->mp->numel;
  p->padded_numel = p->mp->numel;
  return true;
}

static fpi_layout_extent replicate_extent(const fp_layout *L, const fp_lparam *p, int64_t g) {
  (void)L, (void)g;
  fpi_layout_extent e = {0, p->mp->numel, p->mp->numel};
  return e;
}

static int64_t replicate_slot(const fp_layout *L, const fp_lparam *p, int64_t g) {
  (void)L, (void)g;
  return p->mp->numel;
}

static void replicate_unshard(fp_lower *lw, const fp_lparam *p) {
  fpi_lw_convert(lw, p->param_dtype, p->main_dtype, p->mp->numel,
                fpi_reg(fpi_lw_buf(lw, p->bucket, FP_BB_UNSH), p->unsharded_off),
                fpi_reg(fpi_lw_buf(lw, p->bucket, FP_BB_MAIN), p->shard_off));
}

static void replicate_reduce(fp_lower *lw, const fp_lparam *p, int src_buf, int64_t src_off, int dst_buf,
                             int64_t dst_off) {
  fp_op *op = fpi_lw_emit(lw, FP_OP_ALL_REDUCE, p->reduce_dtype, p->mp->numel);
  op->comm = lw->c_world;
  op->dst = fpi_reg(dst_buf, dst_off);
  op->src = fpi_reg(src_buf, src_off);
}

const fp_placement_impl fp_placement_replicate = {
    .name = "replicate",
    .members = replicate_members,
    .parse = replicate_parse,
    .layout = replicate_layout,
    .extent = replicate_extent,
    .slot_elems = replicate_slot,
    .lower_unshard = replicate_unshard,
    .lower_reduce = replicate_reduce,
};
