/* passes.h - the planner's passes. Every pass is one file with the same
 * signature: it takes the program and the compile's context, changes the
 * program in place, and returns false only after reporting a user error
 * (internal bugs assert). planner/pipeline.c lists them in order. */
#ifndef FP_PASSES_H
#define FP_PASSES_H

#include "../../ir/ir.h"
#include "../layout.h"

/* figures the passes compute, for the summary and the budget check */
typedef struct fp_stats {
  int64_t persistent_bytes;  /* device bytes of persistent buffers */
  int64_t lower_bound_bytes; /* most arena bytes live at once (no placement can need less) */
  int64_t order_lower_bound_bytes; /* most arena bytes live at one op of program order (raw ranges) */
  int64_t clique_lower_bound_bytes; /* the heaviest set of buffers no two of which may share
                                     * bytes (live at one op, or at one instant of the modeled
                                     * spans placed by): see memplan.c */
  int64_t activation_peak;   /* the trainer's activations live at the peak (modeled) */
  int64_t peak_bytes;        /* most bytes live at once: arena buffers + activations */
  int32_t peak_op;           /* op index where peak_bytes is reached */
} fp_stats;

typedef struct fp_pass_ctx {
  fp_arena *a;
  fp_diag *d;
  const fp_layout *L;
  fp_stats *stats;
  bool synced;      /* the sync pass has run: verify every rule */
  int hold;         /* memplan: hold what a post_backward's reduction reads on
                     * the rs stream (unsharded grads, staging) until the end
                     * of the hold-th post_backward after it, apart from what
                     * the next layers' backward allocates while the rs
                     * stream still reads it (0: no hold; 1: double buffering) */
  /* memplan by modeled lifetimes: per live range (index into prog.lives,
   * nlives of them; the same lowering gives the same ranges) the modeled
   * start and end of its uses on an earlier schedule of this step
   * (fpi_sim_live_spans; NaN: unused), and that schedule's step. Two ranges
   * whose spans overlap, within a step or from one step into the next, then
   * never share bytes. NULL: program order only. */
  const double *hint_t0, *hint_t1;
  int32_t hint_n;
  double hint_step_us;
  /* set by the sync pass (in a, when a is set): per op of the program it
   * wrote, 1 for a wait that orders only accesses of different buffers
   * sharing bytes - no conflict of a buffer with itself on that stream is
   * as late - which a placement of the same program with those buffers
   * apart would not need; NULL: not known */
  uint8_t *reuse_waits;
} fp_pass_ctx;

typedef bool (*fp_pass_fn)(fp_pass_ctx *c, fp_prog *p);

/* collectives up to this many bytes per rank are grouped by coalesce */
#define FP_COALESCE_MAX_BYTES ((int64_t)32 << 20)

bool fpi_pass_coalesce(fp_pass_ctx *c, fp_prog *p); /* group small collectives */
bool fpi_pass_memplan(fp_pass_ctx *c, fp_prog *p); /* arena offsets, peak, budget */
bool fpi_pass_sync(fp_pass_ctx *c, fp_prog *p);    /* the record/wait edges the program needs */
bool fpi_pass_verify(fp_pass_ctx *c, fp_prog *p);  /* the IR verifier (internal bug on failure) */
bool fpi_pass_verify_sem(fp_pass_ctx *c, fp_prog *p); /* rules 1-8 and the semantic check, rule 9 */

#endif
