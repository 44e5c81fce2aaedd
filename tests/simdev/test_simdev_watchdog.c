/* test_simdev_watchdog.c (label simdev; mpirun -n 2) - the NCCL backend's
 * watchdog on the simulated device (docs/cuda.md, "Watchdog"): rank 1 runs
 * one step and then stops calling hooks (a trainer that hit an error of its
 * own); rank 0 runs a second step, whose all-gather never meets rank 1's, and
 * waits for it in fp_exec_sync with a 1 s timeout: the wait must fail with
 * FP_ERR_TIMEOUT naming the op it waited for, every communicator aborted, and
 * every later hook must fail at once. Then both ranks destroy their
 * executors (rank 0's broken one aborts, rank 1's finalizes what it issued).
 * alarm() makes a hang a failure, never a stuck CI job. */
#include <signal.h>

#include <cuda_runtime_api.h>

#include "tests/exec_util.h"

static tprog build(void) {
  const int W = tu_world, n = 8;
  tprog t = tp_new(W);
  int w = tp_buf(&t, "w", (int64_t)W * n * 4, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_FORWARD, t.module, 0);
  fp_op *o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(w, 0), o->src = fpi_reg_g(w, 0, n * 4);
  tp_sync(&t, FP_OP_RECORD, FP_STREAM_AG, 0);
  tp_sync(&t, FP_OP_WAIT, FP_STREAM_COMPUTE, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_FORWARD, t.module, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_BACKWARD, t.module, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_BACKWARD, t.module, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_OPTIMIZER, -1, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_OPTIMIZER, -1, 0);
  t.p->nevents = 1;
  return t;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "test_simdev_watchdog: hung (alarm): the watchdog did not fire\n";
  if (write(2, m, sizeof m - 1) < 0) _exit(3);
  _exit(3);
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  if (tu_world != 2) {
    fprintf(stderr, "test_simdev_watchdog: run with 2 ranks\n");
    return 2;
  }
  signal(SIGALRM, on_alarm);
  alarm(120);
  tprog t = build();
  fp_plan *plan = tp_load(&t);
  fpi_arena_free(t.a);
  cudaSetDevice(tu_rank); /* one device per rank (NCCL refuses two ranks on one) */
  fp_exec_config cfg = {.backend = FP_BACKEND_NCCL, .rank = tu_rank, .world_size = tu_world,
                        .cuda_mode = FP_CUDA_EAGER, .timeout_s = 1};
  fp_exec *x = NULL;
  fp_status st = fp_exec_create(plan, &cfg, &x);
  EXPECT(st == FP_OK, "create: %s", fp_exec_errmsg(x));
  if (st == FP_OK) {
    tp_step(x);
    EXPECT(fp_exec_sync(x) == FP_OK, "step 0: %s", fp_exec_errmsg(x));
    if (tu_rank == 0) { /* rank 1 has stopped: step 1's all-gather never completes */
      tp_step(x);
      st = fp_exec_sync(x);
      const char *m = fp_exec_errmsg(x);
      EXPECT(st == FP_ERR_TIMEOUT && strstr(m, "watchdog") && strstr(m, "all_gather") &&
             strstr(m, "every communicator aborted"),
             "the wait for a stopped rank: %s: %s", fp_status_name(st), m);
      printf("rank 0: %s: %s\n", fp_status_name(st), m);
      EXPECT(fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1) != FP_OK, "a hook after the watchdog fired must fail");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD); /* rank 1 waits here: it stopped calling hooks */
  fp_exec_destroy(x);
  fp_plan_free(plan);
  alarm(0);
  return tu_finish();
}
