/* verify.c - the verifier as a pass: a program the planner built must pass
 * ir/verify.c; if it does not, that is a bug in the planner, not in the
 * user's input, so it is an internal error (exit 70) naming the problems.
 * Before the sync pass has run, the ordering rules are left out. */
#include "passes.h"

#include <stdlib.h>

bool fp_pass_verify(fp_pass_ctx *c, fp_prog *p) {
  fp_diag vd;
  fp_diag_init(&vd, NULL);
  bool ok = fp_ir_verify_flags(p, &vd, NULL, c->synced ? 0 : FP_VERIFY_UNORDERED);
  if (!ok) {
    fprintf(stderr, "flexplan: internal error: the planner built an invalid program:\n%s",
            vd.buf ? vd.buf : "");
    fp_diag_free(&vd);
    fp_internal_error(__FILE__, __LINE__, "fp_ir_verify(planned program)");
  }
  fp_diag_free(&vd);
  return true;
}
