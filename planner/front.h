/* front.h - the user's request: model.json and spec.json as parsed and
 * validated by the front end (planner/model.c, planner/spec.c).
 *
 * Everything here is what the user asked for, with defaults filled in; fields
 * computed from it later (shard sizes, buffers, ...) live in layout.h. Every
 * struct keeps the JSON pointer it came from (`ptr`) so later stages can
 * report located errors against the right file; params and modules, many,
 * have theirs formatted on demand (fpi_param_ptr, fpi_module_ptr). */
#ifndef FP_FRONT_H
#define FP_FRONT_H

#include "../base/base.h"
#include "../base/optim.h"
#include "../base/placement.h"

#define FP_MAX_DIMS 8
#define FP_MAX_WORLD 1048576 /* the largest world_size (and group) accepted */

/* ---- model ------------------------------------------------------------ */
typedef struct fp_param {
  const char *name;            /* fully qualified, unique across the model */
  int ndim;                    /* 1..FP_MAX_DIMS */
  int64_t shape[FP_MAX_DIMS];  /* each >= 1 */
  int64_t numel;               /* product of shape (checked against overflow) */
  fp_dtype dtype;              /* main (optimizer) weight dtype; default fp32 */
  bool requires_grad;          /* default true; false = frozen */
  int module;                  /* index into fp_model.modules */
  int tp_dim;                  /* v2 "tp": the dim sharded over the mesh's tp ranks; -1 replicated
                                * (the default). shape is the global shape */
} fp_param;

typedef struct fp_module {
  const char *name;
  int first_param, nparams;    /* params[first_param .. +nparams) */
  double flops_fwd;            /* per micro-batch; 0 when not given */
  double flops_bwd;            /* default 2 * flops_fwd */
  int64_t activation_bytes;    /* 0 when not given */
  int64_t activation_bytes_checkpointed; /* v2: what its forward keeps for backward when
                                * the spec recomputes it (its saved inputs); 0 when not given */
  int *uses;                   /* v2 "uses": params (indices into fp_model.params) declared
                                * by other modules that this module's forward also reads */
  int nuses;
} fp_module;

typedef struct fp_model {
  const fp_src *src;           /* the file it came from */
  int version;                 /* 1 or 2 ("flexplan.model.v1" / "flexplan.model.v2") */
  const char *name;
  fp_param *params;
  int nparams;
  fp_module *modules;
  int nmodules;
  int *order;                  /* forward order: module indices; may repeat */
  int norder;
  const char *ptr;             /* "" or "/model" when embedded */
} fp_model;

/* the JSON pointer of param p of m ("/model/modules/3/params/1") and of
 * module i, formatted on demand (for messages: a model's params keep none) */
const char *fpi_param_ptr(fp_arena *a, const fp_model *m, const fp_param *p);
const char *fpi_module_ptr(fp_arena *a, const fp_model *m, int i);

/* ---- spec ------------------------------------------------------------- */
typedef enum {
  FP_FULL_SHARD,     /* ZeRO-3: params, grads, optimizer state sharded */
  FP_SHARD_GRAD_OP,  /* ZeRO-2: params replicated, grads + optimizer sharded */
  FP_NO_SHARD,       /* DDP: everything replicated, grads all-reduced */
  FP_HYBRID_SHARD,   /* shard inside intra_node_size groups, replicate across */
} fp_strategy;
extern const char *const fp_strategy_names[]; /* NULL-terminated, by enum */


/* per bucket: how its collectives are issued (spec member "collectives") */
typedef enum {
  FP_COLL_AUTO,      /* the planner picks by modeled step time (default) */
  FP_COLL_PER_PARAM, /* one gather / reduction per param (grouped in one launch) */
  FP_COLL_FLAT,      /* one gather / reduction per bucket over the flat layout */
} fp_coll_mode;

typedef struct fp_placement_spec {
  fp_placement_kind kind;
  int dim;                     /* shard: dim to split (default 0) */
  int64_t *units;              /* ragged: relative share per shard-group rank */
  int nunits;
  int64_t align_elems;         /* ragged: cut points are multiples (default 1) */
  int64_t rank;                /* owned: shard-group rank, or -1 = auto */
  int64_t block;               /* cyclic (a plug-in's layout only): elements per block */
  const char *ptr;             /* where it was written (for errors) */
  /* a plug-in placement (planner/plugin.h): its name and table; kind is then
   * meaningless until the layout resolves it into the built-in kind that lays
   * its checked pieces out (fpi_plugin_resolve), which keeps the name */
  const char *plugin;
  const struct fpi_plugin *plug;
} fp_placement_spec;

typedef struct fp_mp {
  fp_dtype param;              /* compute (unsharded) weights and grads */
  fp_dtype reduce;             /* dtype of gradient collectives */
  fp_dtype main_grad;          /* sharded gradient the optimizer reads */
  const char *param_ptr;       /* where param_dtype was given (NULL: the built-in default) */
} fp_mp;

/* reshard_after_forward as requested: FP_RESHARD_TRUE, 0 (false), or g > 0 */
#define FP_RESHARD_TRUE (-1)

typedef struct fp_bucket_spec {
  const char *name;
  const char **patterns;       /* fnmatch patterns over param names */
  int npatterns;
  bool per_module;             /* "split": "per_module" */
  bool has_placement;
  fp_placement_spec placement;
  fp_mp mp;                    /* defaults merged in field by field */
  int64_t reshard;             /* defaults merged in */
  fp_coll_mode coll;           /* defaults merged in */
  bool offload;
  bool fp8_gather;             /* "gather_dtype": "mxfp8" */
  const char *ptr;
} fp_bucket_spec;

typedef enum {
  FP_BUCKETS_DEFAULT,          /* no "buckets": one per module */
  FP_BUCKETS_LIST,             /* explicit list of bucket specs */
  FP_BUCKETS_AUTO,             /* {"auto": {...}} */
} fp_bucket_mode;

#define FP_PREFETCH_AUTO (-1)

/* spec "overlap_param_gather": where a bucket with persistent compute
 * weights (shard_grad_op) gathers them from its updated main weights */
typedef enum fp_param_gather {
  FP_PG_AUTO,     /* "auto" (default): both lowered, the faster modeled step kept */
  FP_PG_OFF,      /* false: in post_optimizer, before the step ends */
  FP_PG_ON,       /* true: in the next step's first forward, prefetched like any gather */
} fp_param_gather;

typedef struct fp_spec {
  const fp_src *src;           /* NULL when no spec was given (all defaults) */
  const char *ptr;             /* "" or "/spec" */
  int64_t world_size;          /* default 8 */
  int64_t ranks_per_node;      /* default min(8, world_size) */
  int64_t tp;                  /* mesh "tp": the tensor-parallel size (tp innermost); default 1.
                                * FSDP runs over the world_size / tp ranks of each tp index */
  fp_strategy strategy;        /* default full_shard */
  int64_t intra_node_size;     /* hybrid_shard's shard group size (in dp ranks); 0 otherwise */
  fp_placement_spec placement; /* defaults.placement: default shard dim 0 */
  fp_mp mp;                    /* defaults: bf16 / fp32 / fp32 */
  int64_t reshard;             /* defaults.reshard_after_forward: default true */
  fp_coll_mode coll;           /* defaults.collectives: default auto */
  fp_bucket_mode bucket_mode;
  fp_bucket_spec *buckets;
  int nbuckets;
  int64_t auto_target_bytes;   /* FP_BUCKETS_AUTO: 0 = none given */
  const char **no_shard;       /* fnmatch patterns */
  int nno_shard;
  const char **recompute;      /* fnmatch patterns over module names: forwards recomputed
                                * inside their backward (activation checkpointing) */
  int nrecompute;
  int prefetch_fwd, prefetch_bwd; /* >= 0 or FP_PREFETCH_AUTO; default 1 */
  fp_param_gather overlap_param_gather; /* when ZeRO-2's compute weights are refreshed */
  int64_t grad_accumulation;   /* micro-batches per step; default 1 */
  int64_t memory_budget_bytes; /* 0 = none */
  fp_optim optim;              /* "optimizer".type: the state the plan holds; default adamw */
  fp_dtype optim_dtype;        /* "optimizer".state_dtype: default fp32 */
  const char *hw_preset;       /* default "h100-sxm" */
  const struct fp_hw *hw_base; /* set by --hardware FILE (planner/hwfile.c): the machine
                                * the overrides below apply to, in place of hw_preset */
  /* set by a policy, not by the spec file (see fpi_spec_apply_policy) */
  bool fsdp2;                  /* the fsdp2 policy: only the root stays unsharded after
                                * forward; shard_grad_op is reshard_after_forward=False
                                * (gathered per step, resharded after backward) */
  bool staged;                 /* shard(0) params gather and reduce through chunk-major
                                * staging with copy-in / copy-out (FSDP2's foreach
                                * all-gather copy-out and reduce-scatter chunk_cat) */
  const struct fpi_plugins *plugins; /* the placement plug-ins a "kind" may name (NULL: none) */
  /* hardware overrides; 0 = take the preset's value */
  double hw_flops, hw_nvlink_gbps, hw_ib_gbps, hw_hbm_gbps;
  int64_t hw_gpus_per_node, hw_hbm_bytes;
} fp_spec;

/* lowering policies: flexplan's own, or a baseline lowered the way another
 * runtime does it, for comparison on the same cost model */
typedef enum {
  FP_POLICY_FLEXPLAN, /* the spec as written */
  FP_POLICY_FSDP2,    /* PyTorch FSDP2's defaults (see fpi_spec_apply_policy) */
} fp_policy;
/* "flexplan" / "fsdp2" -> policy; -1 if unknown */
int fpi_policy_parse(const char *name);
/* rewrite a parsed spec as the policy lowers it. fsdp2: one bucket per
 * module, every param Shard(0), reshard after forward (the last module
 * excepted, as FSDP2 leaves the root unresharded), prefetch 1 forward and 1
 * backward, copy-in / copy-out staging around every gather and reduce;
 * strategy, mesh, mixed precision, accumulation and budget stay */
void fpi_spec_apply_policy(fp_spec *s, fp_policy p);

/* ---- entry points (planner/model.c, planner/spec.c) -------------------- */
/* Load a model file. If it holds {"model":..., "spec":...}, *embedded_spec
 * gets the spec's document (the caller parses it with fpi_spec_parse,
 * pointer "/spec", source *src_out; it lives in the arena a); else NULL.
 * Model pointers are then prefixed "/model". Returns false after reporting
 * located errors. */
struct fp_jv;
bool fpi_model_load(fp_arena *a, fp_diag *d, const char *path, fp_model *out,
                   const struct fp_jv **embedded_spec, const fp_src **src_out);
bool fpi_model_parse(fp_arena *a, fp_diag *d, const fp_src *src, const struct fp_jv *root,
                    const char *ptr, fp_model *out);
/* Parse a spec; root may be NULL (no spec given: all defaults). Semantic
 * checks that need only the spec (world % intra_node_size, ...) are done
 * here; checks against the model are the layout's. */
bool fpi_spec_parse(fp_arena *a, fp_diag *d, const fp_src *src, const struct fp_jv *root,
                   const char *ptr, fp_spec *out);
/* the same where a placement's "kind" may also name one of plugins (NULL:
 * the built-in kinds only) */
struct fpi_plugins;
bool fpi_spec_parse_with(fp_arena *a, fp_diag *d, const fp_src *src, const struct fp_jv *root, const char *ptr,
                        const struct fpi_plugins *plugins, fp_spec *out);
bool fpi_spec_load(fp_arena *a, fp_diag *d, const char *path, fp_spec *out);
/* the same from a source already in memory (src->path names it in messages) */
bool fpi_model_load_src(fp_arena *a, fp_diag *d, const fp_src *src, fp_model *out,
                       const struct fp_jv **embedded_spec, const fp_src **src_out);
bool fpi_spec_load_src(fp_arena *a, fp_diag *d, const fp_src *src, fp_spec *out);
bool fpi_spec_load_src_with(fp_arena *a, fp_diag *d, const fp_src *src, const struct fpi_plugins *plugins,
                           fp_spec *out);

/* The compiler's inputs (planner/inputs.c): a model file, which may embed
 * its spec, and an optional separate spec file (both at once is an error);
 * no spec at all gives the defaults. */
bool fpi_inputs_load(fp_arena *a, fp_diag *d, const char *model_path, const char *spec_path, fp_model *m,
                    fp_spec *s);
/* the same where either input may be JSON text instead of a file: a non-NULL
 * *_text is the input, and *_path (or "<model>" / "<spec>") its name in
 * messages (the public compile API, api/compile.c) */
bool fpi_inputs_load_text(fp_arena *a, fp_diag *d, const char *model_path, const char *model_text,
                         const char *spec_path, const char *spec_text, const struct fpi_plugins *plugins,
                         fp_model *m, fp_spec *s);

#endif
