/* test_exec_nccl_nodev.c (label mpi, built with CUDA) - the NCCL backend on
 * a machine without a usable CUDA device: fp_exec_create fails on every
 * rank, cleanly and at once (the ranks agree over MPI before any NCCL
 * call, so none waits for another in NCCL's bootstrap), with a message that
 * says why, and everything it made is freed (ASan). Config errors the
 * backend finds before touching the device come first.
 *
 * On a machine with a device this is not the situation under test: it exits
 * 77 (skipped); the GPU tests (label gpu) cover that machine. */
#include <cuda_runtime_api.h>

#include "tests/exec_util.h"

static fp_plan *small_plan(void) {
  tprog t = tp_new(tu_world);
  int w = tp_buf(&t, "w", 64 * 4, false), g = tp_buf(&t, "g", 64 * 4 * tu_world, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, 64);
  o->comm = t.world;
  o->dst = fpi_reg(g, 0);
  o->src = fpi_reg(w, 0);
  fp_plan *plan = tp_load(&t);
  fpi_arena_free(t.a);
  return plan;
}

static void expect_fail(fp_plan *plan, fp_exec_config cfg, fp_status want, const char *has, const char *what) {
  fp_exec *x = NULL;
  fp_status st = fp_exec_create(plan, &cfg, &x);
  EXPECT(st == want && strstr(fp_exec_errmsg(x), has), "%s: %s (want %s): '%s' (want '%s')", what,
         fp_status_name(st), fp_status_name(want), fp_exec_errmsg(x), has);
  EXPECT(fp_exec_cuda_stream(x) == NULL, "%s: a failed executor has no stream", what);
  EXPECT(fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1) != FP_OK, "%s: hooks refused", what);
  fp_exec_destroy(x);
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) {
    if (tu_rank == 0) printf("SKIPPED: this machine has %d CUDA device(s); the no-device path is not testable here\n", n);
    tu_finalize();
    return 77;
  }
  fp_plan *plan = small_plan();
  fp_exec_config cfg = {.backend = FP_BACKEND_NCCL, .rank = tu_rank, .world_size = tu_world};
  /* the default bootstrap is MPI here: every rank fails at the device */
  expect_fail(plan, cfg, FP_ERR_BACKEND, "no usable CUDA device", "no device");
  /* explicitly MPI, and every mode */
  for (int m = FP_CUDA_GRAPH; m <= FP_CUDA_CAPTURE_SAFE; m++) {
    fp_exec_config c = cfg;
    c.nccl_boot = FP_NCCL_BOOT_MPI;
    c.cuda_mode = (fp_cuda_mode)m;
    expect_fail(plan, c, FP_ERR_BACKEND, "cudaGetDeviceCount", "no device, MPI bootstrap");
  }
  /* a config error on one rank: that rank says so, the others name it */
  fp_exec_config c = cfg;
  if (tu_rank == 0) c.cuda_mode = (fp_cuda_mode)5;
  expect_fail(plan, c, tu_rank == 0 ? FP_ERR_ARG : FP_ERR_BACKEND, tu_rank == 0 ? "cuda_mode" : "CUDA device",
              "a bad mode on rank 0");
  /* errors found before the device: an id of zeros, a progress mode */
  c = cfg;
  c.nccl_boot = FP_NCCL_BOOT_ID;
  expect_fail(plan, c, FP_ERR_ARG, "all zeros", "zero id");
  c = cfg;
  c.progress = FP_PROGRESS_THREAD;
  expect_fail(plan, c, FP_ERR_ARG, "progress", "progress mode");
  fp_plan_free(plan);
  return tu_finish();
}
