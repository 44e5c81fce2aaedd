/* main.c - the pkg-config consumer (tests/install/): compile a model with a
 * one-rank spec given as JSON text through the installed compile API, check
 * its summary, and run one step on the compiled plan (one_step.h).
 * usage: consumer MODEL.json */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flexplan_compile.h"
#include "one_step.h"

static const char spec[] =
    "{\"format\": \"flexplan.spec.v1\", \"mesh\": {\"world_size\": 1, \"ranks_per_node\": 1},"
    " \"strategy\": \"full_shard\"}";

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: consumer MODEL.json\n"), 2;
  fp_compile_options opt = {.model_path = argv[1], .spec_text = spec};
  fp_plan *plan = NULL;
  fp_status st = fp_plan_compile(&opt, &plan);
  if (st != FP_OK) {
    fprintf(stderr, "%s: %s\n", fp_status_name(st), fp_plan_errmsg(plan));
    fp_plan_free(plan);
    return 1;
  }
  char *summary = NULL;
  if (fp_plan_summary(plan, &summary) != FP_OK || !strstr(summary, "\"world_size\": 1")) {
    fprintf(stderr, "summary: %s\n", summary ? summary : fp_plan_errmsg(plan));
    return 1;
  }
  fp_free(summary);
  int rc = one_step("pkg-config consumer", plan);
  fp_plan_free(plan);
  return rc;
}
