/* layout.h - what the planner computes from the user's request: buckets,
 * per-bucket flat byte storage and every param's per-rank extent.
 *
 * Kept apart from front.h (the request) in the NCCL manner: nothing here is
 * written by the user. planner/layout.c builds it; the placement files in
 * planner/placements/ each fill in one placement's part; planner/lower.c reads
 * it to emit the IR. */
#ifndef FP_LAYOUT_H
#define FP_LAYOUT_H

#include "front.h"

struct fp_lower;
struct fp_lparam;
struct fp_layout;
struct fp_jctx;
struct fp_jv;

/* one rank's piece of a param, in elements of the flattened (padded) param */
typedef struct fpi_layout_extent {
  int64_t begin;   /* first element this rank holds (flat index into the padded param) */
  int64_t count;   /* elements it stores (padding included for shard) */
  int64_t valid;   /* of those, elements inside the real (unpadded) param */
} fpi_layout_extent;

/* The placement contract (FlexShard's idea, in C): one file per placement,
 * one row in fp_placements[]. */
typedef struct fp_placement_impl {
  const char *name;   /* as in the spec's "kind" */
  const char *const *members; /* members its spec object may have besides "kind" */
  /* read the members of its spec object (at ptr; kind and the member names
   * already checked) into out, whose kind, ptr and defaults are set; located
   * errors through c */
  bool (*parse)(struct fp_jctx *c, const struct fp_jv *o, const char *ptr, fp_placement_spec *out);
  /* check the spec against the param and mesh; compute chunk, unsharded
   * size, cut points, owner. Located errors through L's diag. */
  bool (*layout)(struct fp_layout *L, struct fp_lparam *p);
  /* the extent of p on shard-group rank g */
  fpi_layout_extent (*extent)(const struct fp_layout *L, const struct fp_lparam *p, int64_t g);
  /* elements of p's slot in the shard storage on rank g (0: nothing stored) */
  int64_t (*slot_elems)(const struct fp_layout *L, const struct fp_lparam *p, int64_t g);
  /* emit the unshard of p (main shard -> unsharded compute weight) on comm;
   * src_buf/src_off: the sharded copy to gather from, dst: the unsharded one */
  void (*lower_unshard)(struct fp_lower *lw, const struct fp_lparam *p);
  /* emit the reduction of p's unsharded grad (already in the reduce dtype at
   * src) into dst (reduce dtype, p's shard slot); the caller handles casts,
   * accumulation, hybrid all-reduce and scaling */
  void (*lower_reduce)(struct fp_lower *lw, const struct fp_lparam *p, int src_buf, int64_t src_off,
                       int dst_buf, int64_t dst_off);
} fp_placement_impl;

/* indexed by kind: the spec's kinds, then (NULL for flat_shard) cyclic_shard,
 * which only a plug-in's layout becomes (planner/placements/cyclic.c) */
extern const fp_placement_impl *const fp_placements[FP_NPLACEMENTS_IR];
/* parse a placement object: kind, then the kind's own members */
struct fpi_plugins;
bool fpi_placement_parse(struct fp_jctx *c, const struct fp_jv *o, const char *ptr, const struct fpi_plugins *plugins,
                         fp_placement_spec *out);
extern const fp_placement_impl fp_placement_shard, fp_placement_ragged, fp_placement_owned,
    fp_placement_replicate, fp_placement_cyclic;

typedef struct fp_lparam {
  int param;                     /* index into model->params */
  int bucket;
  const fp_param *mp;            /* the model's param */
  const fp_placement_spec *pl;   /* resolved placement request */
  const fp_placement_impl *impl; /* its implementation */
  bool replicated;               /* no sharding (replicate / no_shard) */
  fp_dtype main_dtype, param_dtype, reduce_dtype, grad_dtype;
  int64_t owner;                 /* owned: shard-group rank; else -1 */
  int64_t chunk;                 /* shard: padded rows*inner per rank; ragged: max slot */
  int64_t padded_numel;          /* elements of the unsharded (padded) region */
  int64_t *cuts;                 /* ragged: G+1 flat cut points; else NULL */
  int64_t slot;                  /* shard-storage slot elements (max over ranks) */
  /* byte offsets of this param's slot in each of its bucket's storages
   * (-1: not stored there) */
  int64_t shard_off;             /* main weights (main dtype, slot elems) */
  int64_t grad_off;              /* main grads (grad dtype, slot elems) */
  int64_t opt_off;               /* optimizer state plane 0 (state dtype, slot elems); -1 none */
  int64_t scale_off;             /* MXFP8 weights (main = param dtype = e4m3): the e8m0 scales in the
                                  * main storage, fpi_mx_blocks(padded_numel) bytes; else -1 */
  int64_t unsharded_off;         /* compute weights (param dtype, padded_numel) */
  int64_t ugrad_off;             /* trainer's grads (param dtype, padded_numel) */
  int64_t rin_off;               /* grads cast to the reduce dtype (padded_numel) */
  int64_t rout_off;              /* reduction output (reduce dtype, slot elems) */
  int64_t gstage_off;            /* shard dim > 0: chunk-major gather (param dtype, G*chunk) */
  int64_t rstage_off;            /* shard dim > 0: chunk-major reduce input (reduce dtype, G*chunk) */
  int tab;                       /* ragged, cyclic: IR extent table (set by the lowering); else -1 */
  int stab;                      /* cyclic: the staging table of its v-collectives (entry g:
                                  * {g * chunk, rank g's elements}; set by the lowering); else -1 */
  int64_t flat_off;              /* flat bucket: first element in the bucket's flat space; else -1 */
} fp_lparam;

typedef struct fp_bucket {
  const char *name;
  int *lparams;                  /* indices into layout->params, model order */
  int nparams;
  fp_mp mp;
  int64_t reshard;               /* normalized: 0 keep unsharded, G full, else group size */
  bool sharded;                  /* any param is not replicated */
  bool trainable;                /* any param requires grad */
  int first_pos, last_pos;       /* first/last forward-order position of a module that
                                  * reads it: owns one of its params or "uses" one (tied) */
  int64_t shard_bytes;           /* main-weight shard storage (max over ranks) */
  int64_t grad_bytes;            /* main-grad shard storage (max over ranks) */
  int64_t opt_bytes;             /* optimizer state: states planes of grad_bytes' elements */
  int64_t unsharded_bytes;       /* unsharded compute weights (param dtype) */
  int64_t ugrad_bytes;           /* unsharded grads (param dtype) */
  int64_t rin_bytes;             /* unsharded grads in the reduce dtype (0: no cast needed) */
  int64_t rout_bytes;            /* reduction output staging (reduce dtype) */
  int64_t gstage_bytes;          /* chunk-major gather staging (0: no shard dim > 0) */
  int64_t rstage_bytes;          /* chunk-major reduce staging */
  int64_t reshard_chunk;         /* reshard g: bytes each rank keeps (0: none) */
  bool persistent_unsharded;     /* compute weights live all step (no unshard per use) */
  bool fp8_gather;               /* spec "gather_dtype": "mxfp8": flat, the rank's chunk quantized to
                                  * MXFP8, gathered as e4m3 data + e8m0 scales, dequantized into the
                                  * compute weights (chunks are multiples of 32 elements) */
  bool offload;                  /* spec "offload": main weights, grads and optimizer state in host
                                  * memory; the device holds staging copies only while used */
  bool weight_in_main;           /* frozen, replicated, compute dtype = main dtype: the compute
                                  * weights are the main weights (one copy, no "weight" buffer) */
  /* flat: one collective per bucket. Its params lie end to end (each on an
   * FP_PARAM_ALIGN boundary) in one flat element space of G * flat_chunk
   * elements; shard-group rank g holds [g*flat_chunk, (g+1)*flat_chunk) */
  bool flat;
  int64_t flat_chunk;            /* elements per rank (0: not flat) */
  /* fsdp2 unit (policy fsdp2, every param shard(0)): FSDP2's copy-in /
   * copy-out. The rank's padded shards lie end to end (no alignment) in the
   * main / grad storages, unit_chunk elements in all; one all-gather of
   * them into a [G, unit_chunk] staging buffer, one G-row copy per param out
   * of it; one G-row copy per param into a [G, unit_chunk] reduce staging
   * (chunk_cat), one reduce-scatter straight into the main grads */
  bool unit;
  int64_t unit_chunk;
  int module;                    /* a default bucket's module (its pointer names the bucket in
                                  * messages: fpi_bucket_ptr); -1 otherwise */
  const fp_bucket_spec *spec;    /* the request it came from; NULL: default bucket */
} fp_bucket;

/* a bucket whose persistent compute weights the step refreshes from its
 * updated main weights (ZeRO-2's all-gather when sharded, a replica's cast
 * otherwise): in post_optimizer, or in the next forward (lower.h) */
static inline bool fpi_bucket_refreshed(const fp_bucket *B) { return B->persistent_unsharded && B->trainable; }

typedef struct fp_layout {
  fp_arena *a;
  fp_diag *d;
  const fp_model *model;        /* with a tp dimension: the tp-local model (each rank's slices) */
  const fp_spec *spec;
  int64_t world;                 /* ranks FSDP runs over: the dp size, world_size / T */
  int64_t T;                     /* the mesh's tp size: the dp group of a rank is the ranks of its
                                  * tp index, every T-th (communicator strides are multiples of T) */
  int64_t G;                     /* shard group size (world, or intra_node_size) */
  int64_t R;                     /* replicas of each shard group (world / G) */
  fp_lparam *params;             /* one per model param, model order */
  int nparams;
  fp_bucket *buckets;
  int nbuckets;
  fp_placement_spec *auto_pl;    /* storage for resolved placements */
  bool *recompute;               /* per module: matched by the spec's "recompute" patterns */
  struct fp_ir_param *ir_params; /* the program's param table, made by the first lowering and
                                  * shared by every later one (lower.c setup: the same for every
                                  * candidate of this layout; read only after it is made) */
} fp_layout;

/* build the layout; false after located errors */
bool fpi_layout_build(fp_arena *a, fp_diag *d, const fp_model *m, const fp_spec *s, fp_layout *out);
/* modeled microseconds of one forward gather and one reduction of bucket B,
 * per param (grouped as coalesce groups them) or flat (docs/cost-model.md) */
double fpi_layout_bucket_us(const fp_layout *L, const fp_bucket *B, bool flat);
/* report a layout error at a pointer of the spec (or model) file */
/* where bucket B was asked for: its spec's pointer, its module's (a
 * default bucket), or the model's */
const char *fpi_bucket_ptr(const fp_layout *L, const fp_bucket *B);
bool fpi_layout_error(fp_layout *L, bool in_model, const char *ptr, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* pointer of member `key` under `base` (base NULL: the spec's root) */
const char *fpi_layout_ptr(fp_layout *L, const char *base, const char *key);
/* total elements of a param's padded unsharded region, etc. */
int64_t fpi_param_inner(const fp_param *p, int dim); /* product of shape[dim+1..] */

#endif
