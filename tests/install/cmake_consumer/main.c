/* main.c - the CMake consumer (tests/install/): load a plan file written by
 * the installed CLI and run one step on it (one_step.h).
 * usage: consumer PLAN.json */
#include <stdio.h>

#include "flexplan.h"
#include "one_step.h"

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: consumer PLAN.json\n"), 2;
  fp_plan *plan = NULL;
  fp_status st = fp_plan_load(argv[1], &plan);
  if (st != FP_OK) {
    fprintf(stderr, "%s\n", fp_plan_errmsg(plan));
    fp_plan_free(plan);
    return 1;
  }
  int rc = one_step("cmake consumer", plan);
  fp_plan_free(plan);
  return rc;
}
