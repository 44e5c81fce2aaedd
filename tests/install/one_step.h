/* one_step.h - what both outside projects (tests/install/) do with a plan:
 * start MPI through the library (fp_mpi_init: they link no MPI), make a
 * one-rank executor with the MPI backend, run one training step by calling
 * every hook in the trainer's order (forward in module order, backward in
 * reverse), check the statistics and the views, sum a value with
 * fp_exec_all_reduce_f64, and clean up. Only the installed public headers. */
#ifndef ONE_STEP_H
#define ONE_STEP_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "flexplan.h"

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, "\n");                              \
      return 1;                                           \
    }                                                     \
  } while (0)

static int one_step(const char *who, fp_plan *plan) {
  int rank = -1, size = 0;
  CHECK(fp_mpi_init(&rank, &size) == FP_OK && rank == 0 && size == 1, "fp_mpi_init: rank %d of %d", rank, size);
  CHECK(strcmp(fp_version(), FP_VERSION_STRING) == 0, "library %s, header %s", fp_version(), FP_VERSION_STRING);
  fp_plan_info info;
  CHECK(fp_plan_get_info(plan, &info) == FP_OK && info.world_size == 1, "a one-rank plan");
  fp_exec_config cfg = {.backend = FP_BACKEND_MPI, .rank = 0, .world_size = 1};
  fp_exec *x = NULL;
  fp_status st = fp_exec_create(plan, &cfg, &x);
  CHECK(st == FP_OK, "fp_exec_create: %s: %s", fp_status_name(st), fp_exec_errmsg(x));
  int64_t elems = 0;
  for (int32_t i = 0; i < info.nparams; i++) {
    fp_param_view v;
    CHECK(fp_exec_param_at(x, i, &v) == FP_OK && v.main.data && v.main.numel >= v.numel, "param %d", (int)i);
    elems += v.numel;
  }
  CHECK(fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1) == FP_OK, "%s", fp_exec_errmsg(x));
  for (int32_t m = 0; m < info.nmodules; m++) {
    CHECK(fp_exec_hook(x, FP_HOOK_PRE_FORWARD, m) == FP_OK, "%s", fp_exec_errmsg(x));
    CHECK(fp_exec_hook(x, FP_HOOK_POST_FORWARD, m) == FP_OK, "%s", fp_exec_errmsg(x));
  }
  for (int32_t m = info.nmodules - 1; m >= 0; m--) {
    CHECK(fp_exec_hook(x, FP_HOOK_PRE_BACKWARD, m) == FP_OK, "%s", fp_exec_errmsg(x));
    CHECK(fp_exec_hook(x, FP_HOOK_POST_BACKWARD, m) == FP_OK, "%s", fp_exec_errmsg(x));
  }
  CHECK(fp_exec_hook(x, FP_HOOK_PRE_OPTIMIZER, -1) == FP_OK, "%s", fp_exec_errmsg(x));
  double v = 2.5;
  CHECK(fp_exec_all_reduce_f64(x, &v, 1) == FP_OK && v == 2.5, "all-reduce: %s", fp_exec_errmsg(x));
  CHECK(fp_exec_hook(x, FP_HOOK_POST_OPTIMIZER, -1) == FP_OK, "%s", fp_exec_errmsg(x));
  fp_exec_stats s;
  CHECK(fp_exec_sync(x) == FP_OK && fp_exec_get_stats(x, &s) == FP_OK, "%s", fp_exec_errmsg(x));
  CHECK(s.steps == 1 && s.hook_allocations == 0, "steps %" PRId64, s.steps);
  printf("%s: flexplan %s: %s, one step of %" PRId64 " hooks, %" PRId64 " local ops, %" PRId64 " param elements\n",
         who, fp_version(), info.model, s.hooks, s.local_ops, elems);
  fp_exec_destroy(x);
  CHECK(fp_mpi_finalize() == FP_OK, "fp_mpi_finalize");
  return 0;
}

#endif
