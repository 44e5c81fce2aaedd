/* plugin_compile.c - `flexplan compile` with the example placement plug-ins
 * (examples/placements.h) registered, for the MPI parity tests of
 * plug-in placements (tests/exec.cmake: run_plan.py calls it as it calls the
 * CLI):
 *
 *   plugin_compile compile MODEL --spec SPEC [--policy P] -o PLAN
 *
 * block_cyclic deals rows in blocks of 8, row_cyclic one row at a time
 * (the same plug-in, block 1); expert_owned reads the expert index after
 * "experts.". Exit 1 with the compiler's located messages on
 * stderr when the plan does not compile. */
#include <stdio.h>
#include <string.h>

#include "../examples/placements.h"

int main(int argc, char **argv) {
  fp_compile_options o = {0};
  const char *out = NULL;
  for (int k = 2; k < argc; k++) {
    if (!strcmp(argv[k], "--spec") && k + 1 < argc) o.spec_path = argv[++k];
    else if (!strcmp(argv[k], "--policy") && k + 1 < argc) o.policy = argv[++k];
    else if (!strcmp(argv[k], "-o") && k + 1 < argc) out = argv[++k];
    else if (!o.model_path) o.model_path = argv[k];
    else return fprintf(stderr, "plugin_compile: unexpected argument '%s'\n", argv[k]), 2;
  }
  if (argc < 3 || strcmp(argv[1], "compile") || !o.model_path || !out)
    return fprintf(stderr, "usage: plugin_compile compile MODEL --spec SPEC [--policy P] -o PLAN\n"), 2;
  ex_block_cyclic bc = {8}, rows = {1};
  ex_expert_owned eo = {"experts."};
  fp_placement_set *set = NULL;
  if (fp_placement_set_create(&set) != FP_OK || ex_placements_add(set, &bc, &eo) != FP_OK ||
      fp_placement_set_add(set, "row_cyclic", &ex_block_cyclic_plugin, &rows) != FP_OK)
    return fprintf(stderr, "plugin_compile: %s\n", fp_placement_set_errmsg(set)), 1;
  o.placements = set;
  fp_plan *plan = NULL;
  fp_status st = fp_plan_compile(&o, &plan);
  if (st == FP_OK) st = fp_plan_save(plan, out);
  if (st != FP_OK) fprintf(stderr, "%s\n", plan ? fp_plan_errmsg(plan) : "out of memory");
  fp_plan_free(plan);
  fp_placement_set_free(set);
  return st == FP_OK ? 0 : 1;
}
