/* owned.c - the `owned` placement: the whole param lives on one rank of the
 * shard group (an explicit rank, or "auto": bin-packed by bytes in
 * planner/layout.c). The owner's main weights are broadcast to the group for
 * compute; gradients are reduced to the owner. Other ranks store nothing, so
 * every local op on the shard slot runs on the owner only. */
#include <string.h>

#include "../../base/json.h"
#include "../lower.h"

static const char *const owned_members[] = {"rank", NULL};

static bool owned_parse(fp_jctx *c, const fp_jv *o, const char *ptr, fp_placement_spec *p) {
  const fp_jv *r = fpi_j_get(o, "rank");
  if (!fpi_j_has(o, "rank")) return fpi_j_error(c, ptr, "missing required member 'rank' (an integer >= 0 or \"auto\")");
  const char *rp = fpi_ptr_key(c->a, ptr, "rank");
  if (fpi_jv_is(r, FP_JSTRING)) {
    if (strcmp(r->s, "auto"))
      return fpi_j_error(c, rp, "expected an integer >= 0 or \"auto\", got %s", fpi_j_describe(c->a, r));
    p->rank = -1;
    return true;
  }
  if (!fpi_jv_is(r, FP_JINT))
    return fpi_j_error(c, rp, "expected an integer >= 0 or \"auto\", got %s", fpi_j_describe(c->a, r));
  return fpi_j_int_v(c, r, rp, 0, FP_MAX_WORLD - 1, &p->rank);
}

static bool owned_layout(fp_layout *L, fp_lparam *p) {
  const fp_placement_spec *pl = p->pl;
  if (pl->rank >= L->G)
    return fpi_layout_error(L, false, fpi_layout_ptr(L, pl->ptr, "rank"),
                           "owner rank %lld is outside the shard group of %lld ranks", (long long)pl->rank,
                           (long long)L->G);
  p->owner = pl->rank; /* -1 (auto) is resolved once every param is known */
  p->chunk = p->mp->numel;
  p->slot = p->mp->numel;
  p->padded_numel = p->mp->numel;
  return true;
}

static fpi_layout_extent owned_extent(const fp_layout *L, const fp_lparam *p, int64_t g) {
  (void)L;
  int64_t n = g == p->owner ? p->mp->numel : 0;
  fpi_layout_extent e = {0, n, n};
  return e;
}

static int64_t owned_slot(const fp_layout *L, const fp_lparam *p, int64_t g) {
  (void)L;
  return g == p->owner ? p->mp->numel : 0;
}

static void owned_unshard(fp_lower *lw, const fp_lparam *p) {
  int main = fpi_lw_buf(lw, p->bucket, FP_BB_MAIN), u = fpi_lw_buf(lw, p->bucket, FP_BB_UNSH);
  int64_t n = p->mp->numel;
  fp_op *op = fpi_lw_convert(lw, p->param_dtype, p->main_dtype, n, fpi_reg(u, p->unsharded_off),
                            fpi_reg(main, p->shard_off));
  fpi_lw_only_owner(lw, p, op);
  op = fpi_lw_emit(lw, FP_OP_BROADCAST, p->param_dtype, n);
  op->comm = lw->c_shard;
  op->root = (int32_t)p->owner;
  op->dst = fpi_reg(u, p->unsharded_off);
  op->src = fpi_reg(u, p->unsharded_off);
}

static void owned_reduce(fp_lower *lw, const fp_lparam *p, int src_buf, int64_t src_off, int dst_buf,
                         int64_t dst_off) {
  fp_op *op = fpi_lw_emit(lw, FP_OP_REDUCE, p->reduce_dtype, p->mp->numel);
  op->comm = lw->c_shard;
  op->root = (int32_t)p->owner;
  op->dst = fpi_reg(dst_buf, dst_off);
  op->src = fpi_reg(src_buf, src_off);
}

const fp_placement_impl fp_placement_owned = {
    .name = "owned",
    .members = owned_members,
    .parse = owned_parse,
    .layout = owned_layout,
    .extent = owned_extent,
    .slot_elems = owned_slot,
    .lower_unshard = owned_unshard,
    .lower_reduce = owned_reduce,
};
