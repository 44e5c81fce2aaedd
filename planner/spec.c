/* spec.c - spec.json: parse, validate, fill in defaults (docs/design.md, "The
 * core design" §2; docs/input-format.md).
 *
 * Only checks that need the spec alone are made here (ranges, enums, the
 * mesh, world_size % intra_node_size, unique bucket names); checks against
 * the model (placement dim < ndim, ragged units per shard-group rank, owned
 * rank < group size, reshard group divides the shard group) are the
 * layout's. The first user error stops the parse. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "../base/json.h"
#include "layout.h"

#define FP_SPEC_FORMAT "flexplan.spec.v1"
#define FP_MAX_PREFETCH 64

const char *const fp_strategy_names[] = {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard",
                                         NULL};

static const char *const dtype_names[] = {"fp32", "bf16", "fp16", NULL};
static const fp_dtype dtype_vals[] = {FP_F32, FP_BF16, FP_F16};

static void set_defaults(fp_spec *s) {
  memset(s, 0, sizeof *s);
  s->ptr = "";
  s->world_size = 8;
  s->ranks_per_node = 8;
  s->tp = 1;
  s->strategy = FP_FULL_SHARD;
  s->placement.kind = FP_PL_SHARD;
  s->placement.dim = 0;
  s->placement.align_elems = 1;
  s->placement.rank = -1;
  s->placement.ptr = "";
  s->mp.param = FP_BF16;
  s->mp.reduce = FP_F32;
  s->mp.main_grad = FP_F32;
  s->reshard = FP_RESHARD_TRUE;
  s->coll = FP_COLL_AUTO;
  s->bucket_mode = FP_BUCKETS_DEFAULT;
  s->prefetch_fwd = 1;
  s->prefetch_bwd = 1;
  s->grad_accumulation = 1;
  s->hw_preset = "h100-sxm";
  s->optim = FP_OPTIM_ADAMW;
  s->optim_dtype = FP_F32;
}

/* "collectives": "auto" | "per_param" | "flat" (fp_coll_mode order) */
static bool parse_coll(fp_jctx *c, const fp_jv *o, const char *ptr, fp_coll_mode *out) {
  static const char *const modes[] = {"auto", "per_param", "flat", NULL};
  int m = -1;
  if (!fpi_j_enum(c, o, ptr, "collectives", false, modes, &m)) return false;
  if (m >= 0) *out = (fp_coll_mode)m;
  return true;
}

/* partial mixed_precision object merged onto *mp */
static bool parse_mp(fp_jctx *c, const fp_jv *o, const char *ptr, fp_mp *mp) {
  static const char *const keys[] = {"param_dtype", "reduce_dtype", "main_grad_dtype", NULL};
  /* param_dtype may also be "mxfp8": frozen weights kept unsharded, stored
   * once as e4m3 elements with e8m0 block scales (planner/layout.c
   * check_mxfp8 says where it is allowed); FP_E4M3 stands for it */
  static const char *const param_names[] = {"fp32", "bf16", "fp16", "mxfp8", NULL};
  if (!fpi_j_is_object(c, o, ptr) || !fpi_j_keys(c, o, ptr, keys)) return false;
  fp_dtype *dst[] = {&mp->param, &mp->reduce, &mp->main_grad};
  for (int k = 0; k < 3; k++) {
    int di = -1;
    if (!fpi_j_enum(c, o, ptr, keys[k], false, k == 0 ? param_names : dtype_names, &di)) return false;
    if (di >= 0) *dst[k] = di == 3 ? FP_E4M3 : dtype_vals[di];
    if (di >= 0 && k == 0) mp->param_ptr = fpi_ptr_key(c->a, ptr, keys[0]);
  }
  return true;
}

/* reshard_after_forward: true | false | integer >= 1 */
static bool parse_reshard(fp_jctx *c, const fp_jv *obj, const char *ptr, int64_t *out) {
  if (!fpi_j_has(obj, "reshard_after_forward")) return true;
  const fp_jv *v = fpi_j_get(obj, "reshard_after_forward");
  const char *vp = fpi_ptr_key(c->a, ptr, "reshard_after_forward");
  if (fpi_jv_is(v, FP_JBOOL)) {
    *out = v->b ? FP_RESHARD_TRUE : 0;
    return true;
  }
  if (fpi_jv_is(v, FP_JINT)) return fpi_j_int_v(c, v, vp, 1, FP_MAX_WORLD, out);
  return fpi_j_error(c, vp, "expected true, false or an integer group size >= 1, got %s",
                    fpi_j_describe(c->a, v));
}

/* non-empty array of non-empty strings (patterns) */
static bool parse_patterns(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
                           bool allow_empty, const char ***out, int *n) {
  const fp_jv *arr = NULL;
  size_t na = 0;
  if (!fpi_j_arr(c, obj, ptr, key, required, &arr, &na)) return false;
  if (!arr) return true;
  const char *ap = fpi_ptr_key(c->a, ptr, key);
  if (na == 0 && !allow_empty)
    return fpi_j_error(c, ap, "expected a non-empty array of patterns, got an empty array");
  if (na > INT32_MAX / 2) return fpi_j_error(c, ap, "too many patterns");
  *out = fpi_alloc_array(c->a, na ? na : 1, sizeof **out);
  for (size_t k = 0; k < na; k++) {
    const fp_jv *e = &arr->elems[k];
    if (e->type == FP_JSTRING && e->n > 0) /* the common case: no pointer formatted */
      (*out)[k] = e->s;
    else if (!fpi_j_str_v(c, fpi_jv_at(arr, k), fpi_ptr_idx(c->a, ap, (int64_t)k), &(*out)[k]))
      return false;
  }
  *n = (int)na;
  return true;
}

static bool parse_bucket(fp_jctx *c, const fp_spec *s, const fp_jv *o, const char *ptr, fp_bucket_spec *b) {
  static const char *const keys[] = {"name", "params", "split", "placement", "mixed_precision",
                                     "reshard_after_forward", "collectives", "offload", "gather_dtype", NULL};
  if (!fpi_j_is_object(c, o, ptr) || !fpi_j_keys(c, o, ptr, keys)) return false;
  b->ptr = ptr;
  if (!fpi_j_str(c, o, ptr, "name", true, &b->name)) return false;
  if (!parse_patterns(c, o, ptr, "params", true, false, &b->patterns, &b->npatterns)) return false;
  static const char *const splits[] = {"per_module", NULL};
  int split = -1;
  if (!fpi_j_enum(c, o, ptr, "split", false, splits, &split)) return false;
  b->per_module = split == 0;
  b->placement = s->placement;
  if (fpi_j_has(o, "placement")) {
    if (!fpi_placement_parse(c, fpi_j_get(o, "placement"), fpi_ptr_key(c->a, ptr, "placement"), s->plugins,
                             &b->placement))
      return false;
    b->has_placement = true;
  }
  b->mp = s->mp;
  if (fpi_j_has(o, "mixed_precision") &&
      !parse_mp(c, fpi_j_get(o, "mixed_precision"), fpi_ptr_key(c->a, ptr, "mixed_precision"), &b->mp))
    return false;
  b->reshard = s->reshard;
  if (!parse_reshard(c, o, ptr, &b->reshard)) return false;
  b->coll = s->coll;
  if (!parse_coll(c, o, ptr, &b->coll)) return false;
  if (!fpi_j_bool(c, o, ptr, "offload", false, &b->offload)) return false;
  /* "gather_dtype": what the bucket's weights travel as: "param" (its param
   * dtype, default) or "mxfp8" (e4m3 elements with one e8m0 scale per 32) */
  static const char *const gdts[] = {"param", "mxfp8", "e4m3", NULL};
  int g = -1;
  if (!fpi_j_enum(c, o, ptr, "gather_dtype", false, gdts, &g)) return false;
  if (g == 2)
    return fpi_j_error(c, fpi_ptr_key(c->a, ptr, "gather_dtype"),
                      "\"e4m3\" without block scales would need one scale per tensor from an amax all-reduce before "
                      "every gather; use \"mxfp8\" (e4m3 with a power-of-two scale per 32 elements)");
  b->fp8_gather = g == 1;
  return true;
}

static bool parse_buckets(fp_jctx *c, fp_spec *s, const fp_jv *v, const char *ptr) {
  if (fpi_jv_is(v, FP_JOBJECT)) {
    static const char *const keys[] = {"auto", NULL};
    if (!fpi_j_keys(c, v, ptr, keys)) return false;
    if (!fpi_j_has(v, "auto"))
      return fpi_j_error(c, ptr, "missing required member 'auto' (buckets is a list or {\"auto\": {...}})");
    const fp_jv *au = fpi_j_get(v, "auto");
    const char *aup = fpi_ptr_key(c->a, ptr, "auto");
    static const char *const akeys[] = {"target_bytes", NULL};
    if (!fpi_j_is_object(c, au, aup) || !fpi_j_keys(c, au, aup, akeys)) return false;
    if (!fpi_j_int(c, au, aup, "target_bytes", false, 1, INT64_MAX, &s->auto_target_bytes)) return false;
    s->bucket_mode = FP_BUCKETS_AUTO;
    return true;
  }
  if (!fpi_jv_is(v, FP_JARRAY))
    return fpi_j_error(c, ptr, "expected an array of buckets or {\"auto\": {...}}, got %s",
                      fpi_j_describe(c->a, v));
  size_t nb = fpi_jv_len(v);
  if (nb == 0)
    return fpi_j_error(c, ptr, "expected a non-empty array of buckets, got an empty array (leave "
                              "'buckets' out for one bucket per module)");
  if (nb > INT32_MAX / 2) return fpi_j_error(c, ptr, "too many buckets");
  s->bucket_mode = FP_BUCKETS_LIST;
  s->buckets = fpi_alloc_array(c->a, nb, sizeof *s->buckets);
  /* the names seen so far, by hash (open addressing; -1 empty): linear in buckets */
  size_t cap = 16;
  while (cap < 2 * nb) cap *= 2;
  int32_t *seen = fpi_alloc_array(c->a, cap, sizeof *seen);
  for (size_t k = 0; k < cap; k++) seen[k] = -1;
  for (size_t i = 0; i < nb; i++) {
    fp_bucket_spec *b = &s->buckets[i];
    if (!parse_bucket(c, s, fpi_jv_at(v, i), fpi_ptr_idx(c->a, ptr, (int64_t)i), b))
      return false;
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (const unsigned char *q = (const unsigned char *)b->name; *q; q++) h = (h ^ *q) * 1099511628211u;
    size_t k = (size_t)h & (cap - 1);
    for (; seen[k] >= 0; k = (k + 1) & (cap - 1))
      if (!strcmp(s->buckets[seen[k]].name, b->name))
        return fpi_j_error(c, fpi_ptr_key(c->a, b->ptr, "name"), "duplicate bucket name '%s' (also %s)",
                          b->name, s->buckets[seen[k]].ptr);
    seen[k] = (int32_t)i;
    s->nbuckets++;
  }
  return true;
}

/* one prefetch depth: 0..64 or "auto" */
static bool parse_depth(fp_jctx *c, const fp_jv *o, const char *ptr, const char *key, int *out) {
  if (!fpi_j_has(o, key)) return true;
  const fp_jv *v = fpi_j_get(o, key);
  const char *vp = fpi_ptr_key(c->a, ptr, key);
  if (fpi_jv_is(v, FP_JSTRING) && !strcmp(v->s, "auto")) {
    *out = FP_PREFETCH_AUTO;
    return true;
  }
  if (!fpi_jv_is(v, FP_JINT))
    return fpi_j_error(c, vp, "expected an integer in [0, %d] or \"auto\", got %s", FP_MAX_PREFETCH,
                      fpi_j_describe(c->a, v));
  int64_t d;
  if (!fpi_j_int_v(c, v, vp, 0, FP_MAX_PREFETCH, &d)) return false;
  *out = (int)d;
  return true;
}

static bool parse_prefetch(fp_jctx *c, fp_spec *s, const fp_jv *v, const char *ptr) {
  if (fpi_jv_is(v, FP_JSTRING)) {
    if (strcmp(v->s, "auto"))
      return fpi_j_error(c, ptr, "expected \"auto\" or {\"forward\": ..., \"backward\": ...}, got %s",
                        fpi_j_describe(c->a, v));
    s->prefetch_fwd = s->prefetch_bwd = FP_PREFETCH_AUTO;
    return true;
  }
  if (!fpi_jv_is(v, FP_JOBJECT))
    return fpi_j_error(c, ptr, "expected \"auto\" or {\"forward\": ..., \"backward\": ...}, got %s",
                      fpi_j_describe(c->a, v));
  static const char *const keys[] = {"forward", "backward", NULL};
  if (!fpi_j_keys(c, v, ptr, keys)) return false;
  return parse_depth(c, v, ptr, "forward", &s->prefetch_fwd) &&
         parse_depth(c, v, ptr, "backward", &s->prefetch_bwd);
}

/* number > 0 (optional) */
static bool pos_num(fp_jctx *c, const fp_jv *o, const char *ptr, const char *key, double *out) {
  if (!fpi_j_has(o, key)) return true;
  const fp_jv *v = fpi_j_get(o, key);
  double x = NAN;
  if (v && (fpi_jv_is(v, FP_JINT) || fpi_jv_is(v, FP_JDOUBLE)))
    x = fpi_jv_num(v);
  if (!(isfinite(x) && x > 0))
    return fpi_j_error(c, fpi_ptr_key(c->a, ptr, key), "expected a number > 0, got %s", fpi_j_describe(c->a, v));
  *out = x;
  return true;
}

/* "optimizer": {"type": "adamw" | "sgd" | "none", "state_dtype": ...}: the
 * state the plan holds per main element (state_dtype default fp32) */
static bool parse_optimizer(fp_jctx *c, fp_spec *s, const fp_jv *v, const char *ptr) {
  static const char *const keys[] = {"type", "state_dtype", NULL};
  static const char *const types[] = {"none", "sgd", "adamw", NULL}; /* fp_optim order */
  if (!fpi_j_is_object(c, v, ptr) || !fpi_j_keys(c, v, ptr, keys)) return false;
  int t = -1, di = -1;
  if (!fpi_j_enum(c, v, ptr, "type", true, types, &t) || !fpi_j_enum(c, v, ptr, "state_dtype", false, dtype_names, &di))
    return false;
  s->optim = (fp_optim)t;
  if (di >= 0 && t == FP_OPTIM_NONE)
    return fpi_j_error(c, fpi_ptr_key(c->a, ptr, "state_dtype"), "optimizer \"none\" holds no state: remove 'state_dtype'");
  if (di >= 0) s->optim_dtype = dtype_vals[di];
  return true;
}

static bool parse_hardware(fp_jctx *c, fp_spec *s, const fp_jv *v, const char *ptr) {
  static const char *const keys[] = {"preset", "gpus_per_node", "flops", "nvlink_gbps", "ib_gbps",
                                     "hbm_gbps", "hbm_bytes", NULL};
  if (!fpi_j_is_object(c, v, ptr) || !fpi_j_keys(c, v, ptr, keys)) return false;
  static const char *const presets[] = {"h100-sxm", "h200", "h200-fit", "cpu-mpi", NULL};
  int pi = -1;
  if (!fpi_j_enum(c, v, ptr, "preset", false, presets, &pi)) return false;
  if (pi >= 0) s->hw_preset = presets[pi];
  return fpi_j_int(c, v, ptr, "gpus_per_node", false, 1, INT64_MAX, &s->hw_gpus_per_node) &&
         pos_num(c, v, ptr, "flops", &s->hw_flops) && pos_num(c, v, ptr, "nvlink_gbps", &s->hw_nvlink_gbps) &&
         pos_num(c, v, ptr, "ib_gbps", &s->hw_ib_gbps) && pos_num(c, v, ptr, "hbm_gbps", &s->hw_hbm_gbps) &&
         fpi_j_int(c, v, ptr, "hbm_bytes", false, 1, INT64_MAX, &s->hw_hbm_bytes);
}

bool fpi_spec_parse(fp_arena *a, fp_diag *d, const fp_src *src, const fp_jv *root, const char *ptr,
                   fp_spec *out) {
  return fpi_spec_parse_with(a, d, src, root, ptr, NULL, out);
}

/* "format": present and FP_SPEC_FORMAT */
static bool parse_format(fp_jctx *c, const fp_jv *root, const char *ptr) {
  const fp_jv *fmt = fpi_j_get(root, "format");
  if (!fpi_j_has(root, "format"))
    return fpi_j_error(c, ptr, "missing required member 'format' (expected \"%s\")", FP_SPEC_FORMAT);
  if (!fpi_jv_is(fmt, FP_JSTRING) || strcmp(fmt->s, FP_SPEC_FORMAT))
    return fpi_j_error(c, fpi_ptr_key(c->a, ptr, "format"), "expected \"%s\", got %s", FP_SPEC_FORMAT,
                      fpi_j_describe(c->a, fmt));
  return true;
}

/* "mesh": {"world_size", "ranks_per_node", "tp"} (optional), each checked
 * against the ones before it */
static bool parse_mesh(fp_jctx *c, fp_spec *out, const fp_jv *root, const char *ptr) {
  if (!fpi_j_has(root, "mesh")) return true;
  fp_arena *a = c->a;
  const fp_jv *m = fpi_j_get(root, "mesh");
  const char *mp = fpi_ptr_key(a, ptr, "mesh");
  static const char *const mkeys[] = {"world_size", "ranks_per_node", "tp", NULL};
  if (!fpi_j_is_object(c, m, mp) || !fpi_j_keys(c, m, mp, mkeys)) return false;
  if (!fpi_j_int(c, m, mp, "world_size", false, 1, FP_MAX_WORLD, &out->world_size)) return false;
  /* default: the largest divisor of world_size that is <= 8 (every node
   * runs the same number of ranks; min(8, world_size) when world_size is
   * a multiple of 8 or below 8) */
  out->ranks_per_node = 8;
  while (out->world_size % out->ranks_per_node) out->ranks_per_node--;
  if (!fpi_j_int(c, m, mp, "ranks_per_node", false, 1, FP_MAX_WORLD, &out->ranks_per_node)) return false;
  const char *rp = fpi_ptr_key(a, mp, "ranks_per_node");
  if (out->ranks_per_node > out->world_size)
    return fpi_j_error(c, rp, "ranks_per_node %" PRId64 " is larger than world_size %" PRId64,
                      out->ranks_per_node, out->world_size);
  if (out->world_size % out->ranks_per_node)
    return fpi_j_error(c, rp,
                      "world_size %" PRId64 " is not a multiple of ranks_per_node %" PRId64
                      " (every node runs the same number of ranks)",
                      out->world_size, out->ranks_per_node);
  /* the tensor-parallel dimension: tp consecutive ranks (tp innermost,
   * as torch's init_device_mesh((W // T, T), ("dp", "tp")) orders them) */
  if (!fpi_j_int(c, m, mp, "tp", false, 1, FP_MAX_WORLD, &out->tp)) return false;
  const char *tpp = fpi_ptr_key(a, mp, "tp");
  if (out->world_size % out->tp)
    return fpi_j_error(c, tpp, "tp %" PRId64 " does not divide world_size %" PRId64, out->tp, out->world_size);
  if (out->ranks_per_node % out->tp)
    return fpi_j_error(c, tpp,
                      "a tp group of %" PRId64 " ranks would cross a node boundary (ranks_per_node %" PRId64
                      "): tensor parallelism's per-layer collectives need the node's own links, so tp must "
                      "divide ranks_per_node (set ranks_per_node to the size of one NVLink domain)",
                      out->tp, out->ranks_per_node);
  return true;
}

/* "strategy" (default full_shard) and "hybrid_shard", which hybrid_shard
 * requires and the others refuse */
static bool parse_strategy(fp_jctx *c, fp_spec *out, const fp_jv *root, const char *ptr) {
  fp_arena *a = c->a;
  int st = FP_FULL_SHARD;
  if (!fpi_j_enum(c, root, ptr, "strategy", false, fp_strategy_names, &st)) return false;
  out->strategy = (fp_strategy)st;
  const char *hp = fpi_ptr_key(a, ptr, "hybrid_shard");
  if (out->strategy != FP_HYBRID_SHARD) {
    if (fpi_j_has(root, "hybrid_shard"))
      return fpi_j_error(c, hp, "'hybrid_shard' is only allowed with strategy \"hybrid_shard\" (strategy is \"%s\")",
                        fp_strategy_names[out->strategy]);
    return true;
  }
  if (!fpi_j_has(root, "hybrid_shard"))
    return fpi_j_error(c, ptr, "missing required member 'hybrid_shard' (strategy is \"hybrid_shard\")");
  const fp_jv *h = fpi_j_get(root, "hybrid_shard");
  static const char *const hkeys[] = {"intra_node_size", NULL};
  if (!fpi_j_is_object(c, h, hp) || !fpi_j_keys(c, h, hp, hkeys)) return false;
  if (!fpi_j_int(c, h, hp, "intra_node_size", true, 1, FP_MAX_WORLD, &out->intra_node_size)) return false;
  const char *ip = fpi_ptr_key(a, hp, "intra_node_size");
  /* with a tp dimension the shard group counts dp ranks (one per tp
   * group): replicate x shard x tp = world_size */
  int64_t dp = out->world_size / out->tp;
  const char *dpw = out->tp > 1 ? "the dp size (world_size / tp)" : "world_size";
  if (out->intra_node_size > dp)
    return fpi_j_error(c, ip, "intra_node_size %" PRId64 " is larger than %s %" PRId64, out->intra_node_size, dpw,
                      dp);
  if (dp % out->intra_node_size)
    return fpi_j_error(c, ip, "%s %" PRId64 " is not a multiple of intra_node_size %" PRId64, dpw, dp,
                      out->intra_node_size);
  return true;
}

/* "defaults": {"placement", "mixed_precision", "reshard_after_forward",
 * "collectives"} (optional) */
static bool parse_defaults(fp_jctx *c, fp_spec *out, const fp_jv *root, const char *ptr) {
  if (!fpi_j_has(root, "defaults")) return true;
  fp_arena *a = c->a;
  const fp_jv *dv = fpi_j_get(root, "defaults");
  const char *dp = fpi_ptr_key(a, ptr, "defaults");
  static const char *const dkeys[] = {"placement", "mixed_precision", "reshard_after_forward", "collectives", NULL};
  if (!fpi_j_is_object(c, dv, dp) || !fpi_j_keys(c, dv, dp, dkeys)) return false;
  if (fpi_j_has(dv, "placement") &&
      !fpi_placement_parse(c, fpi_j_get(dv, "placement"), fpi_ptr_key(a, dp, "placement"), out->plugins,
                           &out->placement))
    return false;
  if (fpi_j_has(dv, "mixed_precision") &&
      !parse_mp(c, fpi_j_get(dv, "mixed_precision"), fpi_ptr_key(a, dp, "mixed_precision"), &out->mp))
    return false;
  return parse_reshard(c, dv, dp, &out->reshard) && parse_coll(c, dv, dp, &out->coll);
}

/* "overlap_param_gather": "auto" (the default) | true | false */
static bool parse_overlap(fp_jctx *c, fp_spec *out, const fp_jv *root, const char *ptr) {
  if (!fpi_j_has(root, "overlap_param_gather")) return true;
  const fp_jv *v = fpi_j_get(root, "overlap_param_gather");
  if (fpi_jv_is(v, FP_JBOOL))
    out->overlap_param_gather = v->b ? FP_PG_ON : FP_PG_OFF;
  else if (!(fpi_jv_is(v, FP_JSTRING) && !strcmp(v->s, "auto")))
    return fpi_j_error(c, fpi_ptr_key(c->a, ptr, "overlap_param_gather"), "expected \"auto\", true or false, got %s",
                      fpi_j_describe(c->a, v));
  return true;
}

/* the members after the mesh, the strategy and the defaults, in the order
 * their errors are reported */
static bool parse_rest(fp_jctx *c, fp_spec *out, const fp_jv *root, const char *ptr) {
  fp_arena *a = c->a;
  if (fpi_j_has(root, "buckets") && !parse_buckets(c, out, fpi_j_get(root, "buckets"), fpi_ptr_key(a, ptr, "buckets")))
    return false;
  if (!parse_patterns(c, root, ptr, "no_shard", false, true, &out->no_shard, &out->nno_shard)) return false;
  if (!parse_patterns(c, root, ptr, "recompute", false, true, &out->recompute, &out->nrecompute)) return false;
  if (fpi_j_has(root, "prefetch") &&
      !parse_prefetch(c, out, fpi_j_get(root, "prefetch"), fpi_ptr_key(a, ptr, "prefetch")))
    return false;
  if (!fpi_j_int(c, root, ptr, "grad_accumulation", false, 1, FP_MAX_WORLD, &out->grad_accumulation)) return false;
  if (!parse_overlap(c, out, root, ptr)) return false;
  if (!fpi_j_int(c, root, ptr, "memory_budget_bytes", false, 1, INT64_MAX, &out->memory_budget_bytes)) return false;
  if (fpi_j_has(root, "hardware") &&
      !parse_hardware(c, out, fpi_j_get(root, "hardware"), fpi_ptr_key(a, ptr, "hardware")))
    return false;
  if (fpi_j_has(root, "optimizer") &&
      !parse_optimizer(c, out, fpi_j_get(root, "optimizer"), fpi_ptr_key(a, ptr, "optimizer")))
    return false;
  return true;
}

bool fpi_spec_parse_with(fp_arena *a, fp_diag *d, const fp_src *src, const fp_jv *root, const char *ptr,
                        const struct fpi_plugins *plugins, fp_spec *out) {
  set_defaults(out);
  out->plugins = plugins;
  if (!root) {
    out->src = NULL;
    return true;
  }
  fp_jctx cx = {a, d, src, NULL}, *c = &cx;
  out->src = src;
  out->ptr = ptr = ptr ? fpi_strdup(a, ptr) : "";
  out->placement.ptr = ptr;
  if (!fpi_j_is_object(c, root, ptr) || !parse_format(c, root, ptr)) return false;
  static const char *const keys[] = {"format", "mesh", "strategy", "hybrid_shard", "defaults", "buckets",
                                     "no_shard", "recompute", "prefetch", "grad_accumulation",
                                     "memory_budget_bytes", "hardware", "overlap_param_gather", "optimizer", NULL};
  return fpi_j_keys(c, root, ptr, keys) && parse_mesh(c, out, root, ptr) && parse_strategy(c, out, root, ptr) &&
         parse_defaults(c, out, root, ptr) && parse_rest(c, out, root, ptr);
}

bool fpi_spec_load(fp_arena *a, fp_diag *d, const char *path, fp_spec *out) {
  fp_src *src = fpi_alloc(a, sizeof *src);
  set_defaults(out);
  if (!fpi_src_read(a, d, path, src)) return false;
  return fpi_spec_load_src(a, d, src, out);
}

bool fpi_spec_load_src(fp_arena *a, fp_diag *d, const fp_src *src, fp_spec *out) {
  return fpi_spec_load_src_with(a, d, src, NULL, out);
}

bool fpi_spec_load_src_with(fp_arena *a, fp_diag *d, const fp_src *src, const struct fpi_plugins *plugins,
                           fp_spec *out) {
  set_defaults(out);
  fp_jctx c = {a, d, src, NULL};
  const fp_jv *root = fpi_json_parse(&c);
  if (!root) return false;
  return fpi_spec_parse_with(a, d, src, root, "", plugins, out);
}

/* ---- policies ------------------------------------------------------------------- */
int fpi_policy_parse(const char *name) {
  if (!strcmp(name, "flexplan")) return FP_POLICY_FLEXPLAN;
  if (!strcmp(name, "fsdp2")) return FP_POLICY_FSDP2;
  return -1;
}

void fpi_spec_apply_policy(fp_spec *s, fp_policy p) {
  if (p != FP_POLICY_FSDP2) return;
  /* the spec's bucket list names FSDP2's units (fully_shard groups, which
   * may span modules); otherwise one unit per module */
  if (s->bucket_mode != FP_BUCKETS_LIST) {
    s->bucket_mode = FP_BUCKETS_DEFAULT;
    s->buckets = NULL;
    s->nbuckets = 0;
  }
  s->auto_target_bytes = 0;
  s->placement.kind = FP_PL_SHARD;
  s->placement.dim = 0;
  s->placement.plugin = NULL;
  s->placement.plug = NULL;
  s->reshard = s->strategy == FP_SHARD_GRAD_OP ? 0 : FP_RESHARD_TRUE;
  for (int b = 0; b < s->nbuckets; b++) {
    s->buckets[b].has_placement = false;
    s->buckets[b].reshard = s->reshard;
  }
  /* each unit gathers in its own pre_forward (FSDP2 prefetches in forward
   * only when set_modules_to_forward_prefetch asks); backward prefetches one */
  s->prefetch_fwd = 0;
  s->prefetch_bwd = 1;
  s->fsdp2 = true;
  s->staged = true;
}
