/* handle.h - the insides of the public handles that cross layers: the plan
 * (include/flexplan.h fp_plan), made by the loader (ir/plan_load.c) and the
 * compile API (api/compile.c), run by the executor; and the transfer program
 * (fp_xfer), made by api/reshard.c, run by executor/xfer.c. Here, below both
 * api/ and executor/, so that neither includes the other. Only what both
 * sides read is here: what the executor keeps between runs is its own
 * (executor/xfer_nccl.h), behind one pointer no one else follows. */
#ifndef FP_IR_HANDLE_H
#define FP_IR_HANDLE_H

#include "flexplan.h"
#include "ir/ir.h"

/* the public enums mirror the IR's: hooks are segment kinds, elems dtypes */
_Static_assert(FP_HOOK_STEP_BEGIN == (int)FP_SEG_STEP_BEGIN && FP_HOOK_POST_OPTIMIZER == (int)FP_SEG_POST_OPTIMIZER &&
                   FP_NSEGKINDS == 7,
               "fp_hook mirrors fp_seg_kind");
_Static_assert(FP_ELEM_FP32 == (int)FP_F32 && FP_ELEM_BF16 == (int)FP_BF16 && FP_ELEM_FP16 == (int)FP_F16 &&
                   FP_ELEM_E4M3 == (int)FP_E4M3 && FP_ELEM_E8M0 == (int)FP_E8M0 && FP_ELEM_U8 == (int)FP_U8 &&
                   FP_NDTYPES == 6,
               "fp_elem mirrors fp_dtype");

/* ---- plans ------------------------------------------------------------------ */
struct fp_plan {
  fp_arena *arena; /* everything the reader made */
  fp_prog *prog;   /* NULL when loading failed */
  uint64_t hash;
  char *msg;       /* malloc'd; "" when none */
  /* the public compile API (api/compile.c) */
  double compile_ms; /* the compile's time (a compiled plan; 0 for a loaded one) */
  char *name;      /* malloc'd: the file or model the plan came from, for messages (NULL: none) */
  int sem;         /* the semantic check (rule 9): FP_PLAN_SEM_* */
};
/* fp_plan.sem: whether rule 9 ran on the plan. fp_exec_create runs it on a
 * plan where it did not (so a plan `flexplan verify` rejects never runs),
 * unless the loader was told to skip it (FP_LOAD_NO_SEMANTIC) */
enum { FP_PLAN_SEM_UNCHECKED = 0, FP_PLAN_SEM_PASSED = 1, FP_PLAN_SEM_SKIPPED = 2 };

/* ---- transfer programs (ir/xfer.h; api/reshard.c makes them, executor/xfer.c loads
 * and runs them) ---- */
struct fp_tx;
struct fpx_xfer_state; /* the executor's (executor/xfer_nccl.h) */
struct fp_xfer {
  fp_arena *arena;   /* everything the planner made */
  struct fp_tx *tx;  /* NULL when compiling failed */
  char *msg;         /* malloc'd; "" when none */
  struct fpx_xfer_state *run; /* what the executor keeps between runs: made by the first
                               * fp_xfer_run, freed by fp_xfer_free; NULL before */
  const struct fpi_xform **xf; /* per tx->xf_names: the transform bound to it (NULL: none); in arena */
};

#endif
