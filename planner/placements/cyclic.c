/* cyclic.c - the `cyclic_shard` layout: blocks of `block` elements of the
 * flattened param dealt round-robin over the shard group, rank g holding
 * blocks g, g+G, g+2G, ... one after another in its slot. No spec names it:
 * it is what a placement plug-in's checked block-cyclic pieces become
 * (planner/placements/plugin.c; docs/placements.md). When the block does not
 * divide the param its last block is short: the last of the blocks of the
 * rank holding it (ir.h fpi_cyclic_elems), copied on its own.
 *
 * Slots are sized for the rank with most blocks (the param's `chunk`), so
 * offsets are rank-independent. The unshard is the plug-in's all_gather_v:
 * each rank's blocks cast into its chunk of a rank-major staging buffer and
 * gathered over a staging table (entry g: {g * chunk, its elements}); then
 * one strided copy per rank puts its blocks in place (rows = its blocks,
 * G * block apart in the param, block apart in the staging). The reduction
 * is the reverse: strided copies into the staging, a reduce_scatter_v over
 * the same table straight into the rank's slot. */
#include "../lower.h"

static const char *const cyclic_members[] = {NULL};

static bool cyclic_parse(struct fp_jctx *c, const struct fp_jv *o, const char *ptr, fp_placement_spec *p) {
  (void)c, (void)o, (void)ptr, (void)p;
  return true; /* never named in a spec */
}

/* blocks rank g holds, and their elements */
static int64_t blocks_of(const fp_layout *L, const fp_lparam *p, int64_t g) {
  return fpi_cyclic_blocks(p->mp->numel, p->pl->block, L->G, g);
}
static int64_t elems_of(const fp_layout *L, const fp_lparam *p, int64_t g) {
  return fpi_cyclic_elems(p->mp->numel, p->pl->block, L->G, g);
}

static bool cyclic_layout(fp_layout *L, fp_lparam *p) {
  FP_ASSERT(p->pl->block >= 1 && p->pl->block <= p->mp->numel); /* plugin.c's express */
  p->chunk = elems_of(L, p, 0); /* rank 0 holds the most */
  p->slot = p->chunk;
  p->padded_numel = p->mp->numel;
  return true;
}

static fpi_layout_extent cyclic_extent(const fp_layout *L, const fp_lparam *p, int64_t g) {
  int64_t c = elems_of(L, p, g);
  fpi_layout_extent e = {g * p->pl->block, c, c};
  return e;
}

static int64_t cyclic_slot(const fp_layout *L, const fp_lparam *p, int64_t g) {
  (void)L, (void)g;
  return p->chunk;
}

/* one strided copy per rank between the staging chunks and the param (rows:
 * its whole blocks), and one more for the short last block */
static void cyclic_copies(fp_lower *lw, const fp_lparam *p, fp_dtype dt, int stage_buf, int64_t stage_off, int buf,
                          int64_t off, bool to_param) {
  int64_t es = fpi_dtype_size(dt), b = p->pl->block, G = lw->L->G;
  for (int64_t g = 0; g < G; g++) {
    int64_t blocks = blocks_of(lw->L, p, g), last = elems_of(lw->L, p, g) - (blocks - 1) * b;
    if (blocks == 0) break;
    int64_t rows = last < b ? blocks - 1 : blocks;
    fp_region st = fpi_reg(stage_buf, stage_off + g * p->chunk * es);
    fp_region pa = fpi_reg(buf, off + g * b * es);
    if (rows > 0) {
      fp_op *op = fpi_lw_emit(lw, FP_OP_COPY, dt, b);
      op->dst = to_param ? pa : st;
      op->src = to_param ? st : pa;
      fpi_ir_op_shape(lw->P, op, rows, (to_param ? G * b : b) * es, (to_param ? b : G * b) * es);
    }
    if (rows < blocks) { /* block g + rows*G, the param's last */
      fp_region st1 = fpi_reg(stage_buf, stage_off + (g * p->chunk + rows * b) * es);
      fp_region pa1 = fpi_reg(buf, off + (g + rows * G) * b * es);
      fp_op *op = fpi_lw_emit(lw, FP_OP_COPY, dt, last);
      op->dst = to_param ? pa1 : st1;
      op->src = to_param ? st1 : pa1;
    }
  }
}

static void cyclic_unshard(fp_lower *lw, const fp_lparam *p) {
  int main = fpi_lw_buf(lw, p->bucket, FP_BB_MAIN), u = fpi_lw_buf(lw, p->bucket, FP_BB_UNSH);
  int gst = fpi_lw_buf(lw, p->bucket, FP_BB_GST);
  fp_op *op = fpi_lw_convert(lw, p->param_dtype, p->main_dtype, 0, fpi_reg_t(gst, p->gstage_off),
                            fpi_reg(main, p->shard_off));
  op->comm = lw->c_shard;
  op->tab = p->stab;
  op = fpi_lw_emit(lw, FP_OP_ALL_GATHER_V, p->param_dtype, 0);
  op->comm = lw->c_shard;
  op->tab = p->stab;
  op->dst = fpi_reg(gst, p->gstage_off);
  op->src = fpi_reg_t(gst, p->gstage_off);
  cyclic_copies(lw, p, p->param_dtype, gst, p->gstage_off, u, p->unsharded_off, true);
}

static void cyclic_reduce(fp_lower *lw, const fp_lparam *p, int src_buf, int64_t src_off, int dst_buf,
                          int64_t dst_off) {
  int rst = fpi_lw_buf(lw, p->bucket, FP_BB_RST);
  cyclic_copies(lw, p, p->reduce_dtype, rst, p->rstage_off, src_buf, src_off, false);
  fp_op *op = fpi_lw_emit(lw, FP_OP_REDUCE_SCATTER_V, p->reduce_dtype, 0);
  op->comm = lw->c_shard;
  op->tab = p->stab;
  op->dst = fpi_reg(dst_buf, dst_off);
  op->src = fpi_reg(rst, p->rstage_off);
}

const fp_placement_impl fp_placement_cyclic = {
    .name = "cyclic_shard",
    .members = cyclic_members,
    .parse = cyclic_parse,
    .layout = cyclic_layout,
    .extent = cyclic_extent,
    .slot_elems = cyclic_slot,
    .lower_unshard = cyclic_unshard,
    .lower_reduce = cyclic_reduce,
};
