/* shard.c - the `shard` placement: split dim d evenly over the shard group,
 * padding dim d up to a multiple of the group size (FSDP2's Shard(d)).
 *
 * Rank g keeps the [outer, c, inner] block of rows g*c .. g*c+c of dim d,
 * c = ceil(shape[d] / G); rows past shape[d] are padding (kept zero).
 * dim 0: the blocks are contiguous in the flattened param, so each param is
 * gathered in place straight into its unsharded slot (padded to G*c rows)
 * and reduce-scattered straight out of it - no copies. dim > 0: the blocks
 * are strided; the gather lands in a chunk-major staging buffer and G 2-D
 * copies move each rank's block into the param's layout (and the reverse
 * before a reduce-scatter). The fsdp2 policy stages dim 0 the same way, as
 * FSDP2's copy-in / copy-out does. */
#include "../../base/json.h"
#include "../lower.h"

static int64_t outer_of(const fp_param *p, int d) {
  int64_t n = 1;
  for (int i = 0; i < d; i++) n *= p->shape[i];
  return n;
}

static const char *const shard_members[] = {"dim", NULL};

static bool shard_parse(fp_jctx *c, const fp_jv *o, const char *ptr, fp_placement_spec *p) {
  int64_t dim = 0;
  if (!fpi_j_int(c, o, ptr, "dim", false, 0, FP_MAX_DIMS - 1, &dim)) return false;
  p->dim = (int)dim;
  return true;
}

static bool shard_layout(fp_layout *L, fp_lparam *p) {
  const fp_param *mp = p->mp;
  int d = p->pl->dim;
  if (d >= mp->ndim)
    return fpi_layout_error(L, false, fpi_layout_ptr(L, p->pl->ptr, "dim"),
                           "dim %d is out of range for parameter '%s' of %d dimension%s", d, mp->name, mp->ndim,
                           mp->ndim == 1 ? "" : "s");
  int64_t c = fpi_ceil_div(mp->shape[d], L->G), chunk, padded;
  if (!fpi_mul64(outer_of(mp, d) * fpi_param_inner(mp, d), c, &chunk) || !fpi_mul64(chunk, L->G, &padded))
    return fpi_layout_error(L, true, fpi_param_ptr(L->a, L->model, mp), "parameter '%s' is too large when padded for %lld ranks",
                           mp->name, (long long)L->G);
  p->chunk = chunk;
  p->slot = chunk;
  p->padded_numel = d == 0 ? padded : mp->numel;
  return true;
}

static fpi_layout_extent shard_extent(const fp_layout *L, const fp_lparam *p, int64_t g) {
  (void)L;
  const fp_param *mp = p->mp;
  int d = p->pl->dim;
  int64_t c = fpi_ceil_div(mp->shape[d], L->G);
  int64_t rows = mp->shape[d] - g * c;
  rows = rows < 0 ? 0 : rows > c ? c : rows;
  fpi_layout_extent e = {d == 0 ? g * p->chunk : g * c, p->chunk, rows * (p->chunk / c)};
  return e;
}

static int64_t shard_slot(const fp_layout *L, const fp_lparam *p, int64_t g) {
  (void)L, (void)g;
  return p->chunk;
}

/* the G strided copies between the chunk-major staging and the param layout */
static void block_copies(fp_lower *lw, const fp_lparam *p, fp_dtype dt, int stage_buf, int64_t stage_off,
                         int buf, int64_t off, bool to_param) {
  const fp_param *mp = p->mp;
  int d = p->pl->dim;
  int64_t es = fpi_dtype_size(dt), c = fpi_ceil_div(mp->shape[d], lw->L->G);
  int64_t inner = fpi_param_inner(mp, d), outer = outer_of(mp, d);
  for (int64_t g = 0; g < lw->L->G; g++) {
    int64_t rows = mp->shape[d] - g * c;
    if (rows <= 0) break;
    if (rows > c) rows = c;
    fp_region st = fpi_reg(stage_buf, stage_off + g * p->chunk * es);
    fp_region pa = fpi_reg(buf, off + g * c * inner * es);
    fp_op *op = fpi_lw_emit(lw, FP_OP_COPY, dt, rows * inner);
    op->dst = to_param ? pa : st;
    op->src = to_param ? st : pa;
    fpi_ir_op_shape(lw->P, op, outer, (to_param ? mp->shape[d] * inner : c * inner) * es,
                   (to_param ? c * inner : mp->shape[d] * inner) * es);
  }
}

static void shard_unshard(fp_lower *lw, const fp_lparam *p) {
  int main = fpi_lw_buf(lw, p->bucket, FP_BB_MAIN), u = fpi_lw_buf(lw, p->bucket, FP_BB_UNSH);
  int64_t es = fpi_dtype_size(p->param_dtype);
  int gbuf = u;
  int64_t goff = p->unsharded_off;
  bool staged = p->pl->dim > 0 || lw->L->spec->staged;
  if (staged) {
    gbuf = fpi_lw_buf(lw, p->bucket, FP_BB_GST);
    goff = p->gstage_off;
  }
  fp_op *op = fpi_lw_convert(lw, p->param_dtype, p->main_dtype, p->chunk, fpi_reg_g(gbuf, goff, p->chunk * es),
                            fpi_reg(main, p->shard_off));
  op->comm = lw->c_shard;
  op = fpi_lw_emit(lw, FP_OP_ALL_GATHER, p->param_dtype, p->chunk);
  op->comm = lw->c_shard;
  op->dst = fpi_reg(gbuf, goff);
  op->src = fpi_reg_g(gbuf, goff, p->chunk * es);
  if (staged) block_copies(lw, p, p->param_dtype, gbuf, goff, u, p->unsharded_off, true);
}

static void shard_reduce(fp_lower *lw, const fp_lparam *p, int src_buf, int64_t src_off, int dst_buf,
                         int64_t dst_off) {
  if (p->pl->dim > 0 || lw->L->spec->staged) {
    int rst = fpi_lw_buf(lw, p->bucket, FP_BB_RST);
    fp_op *z = fpi_lw_emit(lw, FP_OP_MEMSET, p->reduce_dtype, p->chunk * lw->L->G);
    z->dst = fpi_reg(rst, p->rstage_off);
    block_copies(lw, p, p->reduce_dtype, rst, p->rstage_off, src_buf, src_off, false);
    src_buf = rst;
    src_off = p->rstage_off;
  }
  fp_op *op = fpi_lw_emit(lw, FP_OP_REDUCE_SCATTER, p->reduce_dtype, p->chunk);
  op->comm = lw->c_shard;
  op->dst = fpi_reg(dst_buf, dst_off);
  op->src = fpi_reg(src_buf, src_off);
}

const fp_placement_impl fp_placement_shard = {
    .name = "shard",
    .members = shard_members,
    .parse = shard_parse,
    .layout = shard_layout,
    .extent = shard_extent,
    .slot_elems = shard_slot,
    .lower_unshard = shard_unshard,
    .lower_reduce = shard_reduce,
};
