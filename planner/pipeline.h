/* pipeline.h - the whole compiler as one call, and the summary of its result. */
#ifndef FP_PIPELINE_H
#define FP_PIPELINE_H

#include "../ir/ir.h"
#include "front.h"
#include "layout.h"
#include "lower.h"
#include "passes/passes.h"
#include "sim.h"

/* The compile's phases, for `flexplan compile --time`: X(enum, name) */
#define FP_PHASES(X)                                                        \
  X(LOWER, "lower")       /* the layout lowered into one training step */   \
  X(COALESCE, "coalesce") /* the passes, in order */                        \
  X(MEMPLAN, "memplan")                                                     \
  X(SYNC, "sync")                                                           \
  X(SIMULATE, "simulate") /* the modeled step (every candidate's) */       \
  X(MEMORY, "memory timeline") /* the modeled memory of plans kept */      \
  X(VERIFY, "verify")     /* the kept plan (every candidate's under FLEXPLAN_VERIFY_EACH) */ \
  X(SUMMARY, "summary")   /* the kept plan's figures */
typedef enum {
#define X(e, s) FP_PHASE_##e,
  FP_PHASES(X)
#undef X
  FP_NPHASES
} fp_phase;
extern const char *const fp_phase_names[FP_NPHASES];
/* CPU time (this thread's) per phase, summed over the candidates a compile
 * tries (runs: how many times each ran) */
typedef struct fp_phase_times {
  double ms[FP_NPHASES];
  int32_t runs[FP_NPHASES];
} fp_phase_times;
/* this thread's CPU time in ms (a phase's start and end) */
double fpi_phase_clock(void);

typedef struct fp_compiled {
  fp_layout layout;
  fp_prog *prog;  /* prog->hw: the spec's machine; prog->memtl: its modeled memory timeline */
  fp_stats stats;
  int prefetch_fwd, prefetch_bwd; /* the depths lowered (chosen when "auto") */
  fp_sim sim;     /* the program replayed on prog->hw (modeled) */
  bool reach;     /* memplan placed by lifetimes held to their hooks (pipeline.c) */
  bool defer_refresh; /* persistent compute weights refreshed in the next forward (lower.h) */
  bool replica_each;  /* hybrid: replicas all-reduced every micro-batch (lower.h FP_LOWER_REPLICA_EACH) */
  bool prep_on_compute; /* reductions' casts and staging on the compute stream (FP_LOWER_PREP_ON_COMPUTE) */
  bool path_reuses;     /* a wait that orders only a reuse of bytes holds the modeled step's end
                         * back (sim.path_waits, fp_pass_ctx.reuse_waits; true when not known) */
  struct fp_summary *summary; /* the kept plan's summary (fpi_compile), which fpi_summarize copies; NULL before */
  fp_phase_times *times;      /* where the compile's time went: every candidate adds to the same table */
} fp_compiled;

/* the deepest prefetch "auto" considers */
#define FP_PREFETCH_AUTO_MAX 4

/* layout -> lower -> passes (the verifier after each) -> simulator; false
 * after user errors were reported through d */
bool fpi_compile(fp_arena *a, fp_diag *d, const fp_model *m, const fp_spec *s, fp_compiled *out);

/* the figures of --emit=summary (see docs/cli.md for each field) */
typedef struct fp_summary {
  const char *model, *strategy;
  int64_t world_size, buckets, params, ops, collectives;
  int64_t tp;                   /* the mesh's tp size (1: none); per-rank bytes are tp-local */
  int64_t param_shard_bytes, grad_shard_bytes, persistent_bytes, comm_bytes_per_rank;
  const char *optimizer;        /* the optimizer whose state the plan holds ("none", "sgd", "adamw") */
  const char *optimizer_dtype;  /* its state dtype (NULL: none) */
  int64_t optimizer_state_bytes; /* its state, all buckets (part of persistent_bytes) */
  /* frozen buckets kept whole on every rank (no_shard / replicate): bytes they
   * hold, bytes the one-copy layout saved, and the all-gathers (and their
   * bytes) per step sharding them would add */
  int64_t frozen_replicated_bytes, frozen_one_copy_saved_bytes, frozen_gathers_avoided, frozen_gather_bytes_avoided;
  int64_t arena_bytes, peak_bytes, lower_bound_bytes, activation_peak_bytes;
  int64_t host_bytes;           /* the host arena: offloaded main weights, grads, optimizer state */
  int64_t host_by_cat[FP_NBUFCATS]; /* of which, per buffer category (not printed) */
  int prefetch_forward, prefetch_backward;
  const char *hardware;     /* the machine the modeled figures are for */
  int64_t device_bytes;     /* its device memory per GPU (hbm_bytes; 0: unknown) */
  int64_t memory_budget_bytes; /* the spec's budget (0: none) */
  double modeled_step_ms, modeled_compute_ms, modeled_exposed_comm_ms;
  double compile_ms;
} fp_summary;

void fpi_summarize(const fp_compiled *c, double compile_ms, fp_summary *out);
/* the summary of a plan read back (plan.json): the program's figures and
 * the compile's (prog->figures); compile_ms 0. False when the plan carries
 * no figures. */
bool fpi_summarize_plan(const fp_prog *p, fp_summary *out);
void fpi_summary_json(const fp_summary *s, FILE *f);
void fpi_summary_text(const fp_summary *s, FILE *f);
/* bytes the peak is over the device memory (0: it fits, or unknown) */
int64_t fpi_summary_over_device(const fp_summary *s);
/* without a budget, a peak over the device memory: one warning line naming
 * the overshoot and the largest items; nothing otherwise */
void fpi_summary_warn_device(const fp_summary *s, FILE *f);

#endif
