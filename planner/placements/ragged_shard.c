/* ragged_shard.c - the `ragged_shard` placement: an uneven split of the
 * flattened param into consecutive pieces, one per shard-group rank, sized in
 * proportion to the spec's `units` (veScale/FlexShard RaggedShard).
 *
 * Cut point r is floor(numel * (u_0 + .. + u_{r-1}) / sum(u) / align) * align,
 * the last one numel: every cut falls on a multiple of align_elems (so MXFP8
 * 32-element blocks never straddle ranks) and a rank with 0 units - or a
 * param smaller than the alignment - holds zero elements, which is fine.
 * Slots are sized for the largest piece so offsets are rank-independent; the
 * gather is an all_gather_v in place in the param's unsharded slot, the
 * reduction a reduce_scatter_v out of it, both over an extent table. */
#include "../../base/json.h"
#include "../lower.h"

static const char *const ragged_members[] = {"units", "align_elems", NULL};

static bool ragged_parse(fp_jctx *c, const fp_jv *o, const char *ptr, fp_placement_spec *p) {
  const fp_jv *u;
  size_t nu;
  if (!fpi_j_arr(c, o, ptr, "units", true, &u, &nu)) return false;
  const char *up = fpi_ptr_key(c->a, ptr, "units");
  if (nu == 0) return fpi_j_error(c, up, "expected a non-empty array of integers, got an empty array");
  if (nu > FP_MAX_WORLD)
    return fpi_j_error(c, up, "expected at most %d units (one per shard-group rank), got %zu", FP_MAX_WORLD, nu);
  p->units = fpi_alloc_array(c->a, nu, sizeof *p->units);
  p->nunits = (int)nu;
  int64_t sum = 0;
  for (size_t k = 0; k < nu; k++) {
    if (!fpi_j_int_v(c, fpi_jv_at(u, k), fpi_ptr_idx(c->a, up, (int64_t)k), 0, INT64_MAX,
                    &p->units[k]))
      return false;
    if (!fpi_add64(sum, p->units[k], &sum)) return fpi_j_error(c, up, "the sum of units overflows int64");
  }
  if (sum == 0) return fpi_j_error(c, up, "units must not all be 0 (their sum must be positive)");
  return fpi_j_int(c, o, ptr, "align_elems", false, 1, INT64_MAX, &p->align_elems);
}

static bool ragged_layout(fp_layout *L, fp_lparam *p) {
  const fp_placement_spec *pl = p->pl;
  if (pl->nunits != L->G)
    return fpi_layout_error(L, false, fpi_layout_ptr(L, pl->ptr, "units"),
                           "ragged_shard needs one unit count per rank of the shard group (%lld), got %d",
                           (long long)L->G, pl->nunits);
  __int128 total = 0, prefix = 0;
  for (int r = 0; r < pl->nunits; r++) total += pl->units[r];
  FP_ASSERT(total > 0); /* the front end rejects an all-zero units list */
  int64_t n = p->mp->numel, align = pl->align_elems;
  p->cuts = fpi_alloc_array(L->a, (size_t)L->G + 1, sizeof(int64_t));
  int64_t slot = 0;
  for (int64_t r = 0; r <= L->G; r++) {
    if (r == L->G) {
      p->cuts[r] = n;
    } else {
      int64_t c = (int64_t)((__int128)n * prefix / total);
      p->cuts[r] = c / align * align;
      prefix += pl->units[r];
    }
    if (r > 0 && p->cuts[r] - p->cuts[r - 1] > slot) slot = p->cuts[r] - p->cuts[r - 1];
  }
  p->chunk = slot;
  p->slot = slot;
  p->padded_numel = n;
  return true;
}

static fpi_layout_extent ragged_extent(const fp_layout *L, const fp_lparam *p, int64_t g) {
  (void)L;
  int64_t c = p->cuts[g + 1] - p->cuts[g];
  fpi_layout_extent e = {p->cuts[g], c, c};
  return e;
}

static int64_t ragged_slot(const fp_layout *L, const fp_lparam *p, int64_t g) {
  (void)L;
  return p->cuts[g + 1] - p->cuts[g];
}

static void ragged_unshard(fp_lower *lw, const fp_lparam *p) {
  int main = fpi_lw_buf(lw, p->bucket, FP_BB_MAIN), u = fpi_lw_buf(lw, p->bucket, FP_BB_UNSH);
  fp_op *op = fpi_lw_convert(lw, p->param_dtype, p->main_dtype, 0, fpi_reg_t(u, p->unsharded_off),
                            fpi_reg(main, p->shard_off));
  op->comm = lw->c_shard;
  op->tab = p->tab;
  op = fpi_lw_emit(lw, FP_OP_ALL_GATHER_V, p->param_dtype, 0);
  op->comm = lw->c_shard;
  op->tab = p->tab;
  op->dst = fpi_reg(u, p->unsharded_off);
  op->src = fpi_reg_t(u, p->unsharded_off);
}

static void ragged_reduce(fp_lower *lw, const fp_lparam *p, int src_buf, int64_t src_off, int dst_buf,
                          int64_t dst_off) {
  fp_op *op = fpi_lw_emit(lw, FP_OP_REDUCE_SCATTER_V, p->reduce_dtype, 0);
  op->comm = lw->c_shard;
  op->tab = p->tab;
  op->dst = fpi_reg(dst_buf, dst_off);
  op->src = fpi_reg(src_buf, src_off);
}

const fp_placement_impl fp_placement_ragged = {
    .name = "ragged_shard",
    .members = ragged_members,
    .parse = ragged_parse,
    .layout = ragged_layout,
    .extent = ragged_extent,
    .slot_elems = ragged_slot,
    .lower_unshard = ragged_unshard,
    .lower_reduce = ragged_reduce,
};
