/* verify.c - the verifier as a pass: a program the planner built must pass
 * ir/verify.c (and, as fpi_pass_verify_sem, the semantic check of
 * ir/verify_sem.c); if it does not, that is a bug in the planner, not in the
 * user's input, so it is an internal error (exit 70) naming the problems.
 * Before the sync pass has run, the ordering rules are left out. */
#include "passes.h"

#include <stdlib.h>

static bool verify(fp_pass_ctx *c, fp_prog *p, unsigned flags) {
  fp_diag vd;
  fpi_diag_init(&vd, NULL);
  bool ok = fpi_ir_verify_flags(p, &vd, NULL, (c->synced ? 0 : FP_VERIFY_UNORDERED) | flags);
  if (!ok) {
    fprintf(stderr, "flexplan: internal error: the planner built an invalid program:\n%s",
            vd.buf ? vd.buf : "");
    fpi_diag_free(&vd);
    fpi_internal_error(__FILE__, __LINE__, "fpi_ir_verify(planned program)");
  }
  fpi_diag_free(&vd);
  return true;
}

bool fpi_pass_verify(fp_pass_ctx *c, fp_prog *p) { return verify(c, p, 0); }

/* the semantic check (ir/verify_sem.c) on a synchronized program: the
 * compile runs it on the plan it keeps when FLEXPLAN_VERIFY_EACH or
 * FLEXPLAN_VERIFY_SEM is set (the test suite sets the first) */
bool fpi_pass_verify_sem(fp_pass_ctx *c, fp_prog *p) { return verify(c, p, FP_VERIFY_SEM); }
