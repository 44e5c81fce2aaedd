/* mutate.c - planted plan bugs for the simulated device's mutation tests
 * (tests/simdev.cmake): linked into train_mlp_simdev with
 * -Wl,--wrap=fp_plan_load, it edits the program a verified plan.json loaded
 * into, before any executor sees it - what a plan tampered with after the
 * verifier (or a compiler bug the verifier missed) would hand the executor.
 *
 *   FP_SIMDEV_DROP_WAIT=K  the K-th wait op (0-based, in op order) on the
 *                          compute stream is deleted (made a compute
 *                          placeholder, which no backend issues)
 *
 * Unset: the plan is untouched. The test that uses it must then fail under
 * some seed (sim_parity.py --expect-fail). */
#include <stdio.h>
#include <stdlib.h>

#include "executor/exec_impl.h"
#include "flexplan.h"
#include "ir/ir.h"

fp_status __real_fp_plan_load(const char *path, fp_plan **out);
fp_status __wrap_fp_plan_load(const char *path, fp_plan **out);

fp_status __wrap_fp_plan_load(const char *path, fp_plan **out) {
  fp_status st = __real_fp_plan_load(path, out);
  const char *k = getenv("FP_SIMDEV_DROP_WAIT");
  if (st != FP_OK || !k || !*k) return st;
  fp_prog *p = (*out)->prog;
  long want = strtol(k, NULL, 10), seen = 0;
  for (int32_t j = 0; j < p->nops; j++) {
    fp_op *o = &p->ops[j];
    if (o->code != FP_OP_WAIT || o->stream != FP_STREAM_COMPUTE) continue;
    if (seen++ == want) {
      fprintf(stderr, "simdev: mutation: op %d (wait for event %d on the compute stream) deleted\n", (int)j,
              (int)o->event);
      o->code = FP_OP_COMPUTE;
      return st;
    }
  }
  fprintf(stderr, "simdev: mutation: the plan has no wait #%ld on the compute stream\n", want);
  exit(2);
}
