/* lower.h - the lowering's state, shared by planner/lower.c and the
 * placement files' lower_unshard / lower_reduce. */
#ifndef FP_LOWER_H
#define FP_LOWER_H

#include "../ir/ir.h"
#include "layout.h"

/* buffer kinds of a bucket (one IR buffer each, fixed address all step) */
typedef enum {
  FP_BB_MAIN,   /* main weight shard (persistent) */
  FP_BB_GRAD,   /* main grad shard (persistent) */
  FP_BB_UNSH,   /* unsharded compute weights */
  FP_BB_UGRAD,  /* unsharded grads the trainer writes */
  FP_BB_RIN,    /* unsharded grads cast to the reduce dtype */
  FP_BB_ROUT,   /* reduction output staging (reduce dtype, shard slots) */
  FP_BB_GST,    /* chunk-major gather staging (shard dim > 0) */
  FP_BB_RST,    /* chunk-major reduce staging (shard dim > 0) */
  FP_BB_RESH,   /* the partially sharded copy kept for backward */
  FP_BB_OPT,    /* optimizer state (persistent; fpi_optim_states planes) */
  FP_BB_QD,     /* MXFP8 gather: e4m3 data of the G chunks (transient) */
  FP_BB_QS,     /* MXFP8 gather: their e8m0 scales, one per 32 elements (transient) */
  FP_BB_HMAIN,  /* offload: the main weights in host memory (MAIN is then their device staging) */
  FP_BB_HGRAD,  /* offload: the main grads in host memory (GRAD is then their device staging) */
  FP_NBB
} fp_bucket_buf;

/* which ops of a placement's lowering to keep (see fp_lower.phase) */
typedef enum {
  FP_PH_ALL,  /* every op */
  FP_PH_PRE,  /* local ops before the collective (casts into staging) */
  FP_PH_COMM, /* the collectives */
  FP_PH_POST, /* local ops after it (copies out of staging) */
} fp_lw_phase;

typedef struct fp_lower {
  fp_layout *L;
  fp_prog *P;
  fp_arena *a;
  int c_world, c_shard, c_replica; /* IR communicators; c_replica -1 when R == 1 */
  int *c_reshard;                  /* per bucket: reshard-g communicator or -1 */
  int (*bufs)[FP_NBB];             /* per bucket: IR buffer ids (-1: none) */
  int32_t *open_at;                /* per IR buffer: first op of the open live range, -1 */
  fp_stream stream;                /* stream new ops go on */
  int bucket;                      /* bucket being lowered (op.bucket) */
  /* phases: a bucket's collectives are emitted back to back (so coalesce
   * can group them) by running each param's placement lowering once per
   * phase and keeping only that phase's ops */
  fp_lw_phase phase;               /* the phase kept; FP_PH_ALL keeps all */
  bool seen_comm;                  /* the current placement call passed its collective */
  fp_op dropped;                   /* where ops of other phases are written */
  int kf, kb;                      /* forward / backward prefetch depth */
  bool defer_refresh;              /* persistent compute weights are refreshed by the next
                                    * step's first forward (prefetched like any gather),
                                    * not in post_optimizer */
  bool replica_each;               /* FP_LOWER_REPLICA_EACH */
  bool prep_on_compute;            /* FP_LOWER_PREP_ON_COMPUTE */
  int *fwd_issue, *bwd_issue;      /* per bucket: position whose pre_forward /
                                    * pre_backward issues its all-gather (-1 none) */
  int *bwd_order;                  /* buckets by first backward use */
  int32_t *unit_tab;               /* per fsdp2 unit: the region table of all its params
                                    * (split_copy, chunk_cat), -1 until made */
} fp_lower;

/* emit an op on lw->stream for lw->bucket */
fp_op *fpi_lw_emit(fp_lower *lw, fp_opcode code, fp_dtype dt, int64_t count);
/* dst(dt) = src(sdt): a cast, or a copy when the dtypes agree */
fp_op *fpi_lw_convert(fp_lower *lw, fp_dtype dt, fp_dtype sdt, int64_t count, fp_region dst, fp_region src);
/* the bucket's IR buffer of a kind (asserts it exists) */
int fpi_lw_buf(const fp_lower *lw, int bucket, fp_bucket_buf k);
/* apply the only-on-owner predicate of an owned param to op */
void fpi_lw_only_owner(const fp_lower *lw, const fp_lparam *p, fp_op *op);

/* fpi_lower_step's choices (a bit set) */
#define FP_LOWER_DEFER_REFRESH 1u  /* refresh persistent compute weights in the next step's first
                                    * forward, not in post_optimizer (planner/lower.c) */
#define FP_LOWER_REPLICA_EACH 2u   /* hybrid: all-reduce across replicas every micro-batch, not once
                                    * per step over their sum (defer_replica_reduce) */
#define FP_LOWER_PREP_ON_COMPUTE 4u /* a reduction's local preparation (the cast of the unsharded grads
                                     * into the reduce dtype, staging copies) on the compute stream,
                                     * right after the backward, not on the rs stream (reduce_bucket) */
/* the whole lowering: one training step of L into a new program, with
 * forward / backward prefetch depths kf / kb and the FP_LOWER_* choices */
fp_prog *fpi_lower_step(fp_arena *a, fp_diag *d, fp_layout *L, int kf, int kb, unsigned flags);

#endif
