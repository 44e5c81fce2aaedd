/* test_plan_tied.c - what a compiled plan tells a trainer about tied weights
 * and recompute (fp_plan_module_uses, fp_plan_module_recompute), on the plan
 * ctest compiles from tests/mpi/mlp-tied.model.json (module "out" reads
 * fc0.weight; no other module reads another's param) with
 * tests/mpi/recompute.spec.json (recompute "fc[12]" and "out"). Expected
 * values are the model's, by hand. Runs on one rank; no executor. */
#include <stdio.h>
#include <string.h>

#include "flexplan.h"

static int failures;
#define EXPECT(c, ...)                                            \
  do {                                                            \
    if (!(c)) {                                                   \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #c); \
      fprintf(stderr, __VA_ARGS__);                               \
      fputc('\n', stderr);                                        \
      failures++;                                                 \
    }                                                             \
  } while (0)

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  fp_plan *plan = NULL;
  if (fp_plan_load(argv[1], &plan) != FP_OK) {
    fprintf(stderr, "%s\n", fp_plan_errmsg(plan));
    fp_plan_free(plan);
    return 1;
  }
  static const char *const mods[] = {"fc0", "fc1", "fc2", "out"};
  static const int recompute[] = {0, 1, 1, 1};
  for (int32_t m = 0; m < 4; m++) {
    EXPECT(!strcmp(fp_plan_module_name(plan, m), mods[m]), "module %d", (int)m);
    EXPECT(fp_plan_module_recompute(plan, m) == recompute[m], "recompute of %s", mods[m]);
    int32_t got[4] = {-7, -7, -7, -7};
    int32_t n = fp_plan_module_uses(plan, m, got, 4);
    if (m == 3) {
      EXPECT(n == 1 && got[0] == 0, "out uses %d params, the first %d", (int)n, (int)got[0]);
    } else {
      EXPECT(n == 0 && got[0] == -7, "%s uses %d params", mods[m], (int)n);
    }
  }
  /* the count without room for it; bad arguments */
  EXPECT(fp_plan_module_uses(plan, 3, NULL, 0) == 1, "count only");
  EXPECT(fp_plan_module_uses(plan, 3, NULL, 1) == -1, "NULL with room");
  EXPECT(fp_plan_module_uses(plan, 4, NULL, 0) == -1, "module out of range");
  EXPECT(fp_plan_module_uses(plan, -1, NULL, 0) == -1, "negative module");
  EXPECT(fp_plan_module_uses(plan, 0, NULL, -1) == -1, "negative cap");
  EXPECT(fp_plan_module_uses(NULL, 0, NULL, 0) == -1, "NULL plan");
  EXPECT(fp_plan_module_recompute(plan, 4) == -1 && fp_plan_module_recompute(NULL, 0) == -1, "recompute range");
  /* the tied param is one param of the plan: 6 params, fc0.weight once */
  fp_plan_info info;
  EXPECT(fp_plan_get_info(plan, &info) == FP_OK && info.nparams == 6 && info.nmodules == 4, "params %d",
         (int)info.nparams);
  fp_plan_free(plan);
  if (failures) fprintf(stderr, "test_plan_tied: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
