/* test_exec_watchdog.c - the executor's watchdog under mpirun (3 ranks).
 * A rank that stops calling hooks and destroys its executor (as a trainer
 * does after an error of its own) must not leave the others blocked in a
 * collective forever: with a timeout (here FLEXPLAN_TIMEOUT=1 from ctest's
 * environment, the config's timeout_s left 0), the hook that waits fails
 * with FP_ERR_TIMEOUT on every other rank, naming the op it waits for and
 * the rank that did not arrive, and the ranks still waiting with it; every
 * later call fails at once; destroy returns. Also: a malformed
 * FLEXPLAN_TIMEOUT is FP_ERR_ARG at create on every rank, and a refit's
 * agreement times out too when a rank never joins it. The program arms
 * alarm(): a hang is a failure, never a stuck CI job.
 * usage: mpirun -n 3 test_exec_watchdog [poll|thread] */
#include <signal.h>

#include "exec_util.h"

/* an all-gather before the forward of the one module (the hook waits for it:
 * the trainer's forward reads the gathered weight), a reduce-scatter after
 * its backward */
static tprog build(void) {
  const int W = tu_world, n = 8;
  tprog t = tp_new(W);
  int w = tp_buf(&t, "w", (int64_t)W * n * 4, false), g = tp_buf(&t, "g", (int64_t)W * n * 4, false);
  int out = tp_buf(&t, "out", n * 4, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_FORWARD, t.module, 0);
  fp_op *o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(w, 0), o->src = fpi_reg_g(w, 0, n * 4);
  tp_sync(&t, FP_OP_RECORD, FP_STREAM_AG, 0);
  tp_sync(&t, FP_OP_WAIT, FP_STREAM_COMPUTE, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_FORWARD, t.module, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_BACKWARD, t.module, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_BACKWARD, t.module, 0);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(out, 0), o->src = fpi_reg(g, 0);
  tp_sync(&t, FP_OP_RECORD, FP_STREAM_RS, 1);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_OPTIMIZER, -1, 0);
  tp_sync(&t, FP_OP_WAIT, FP_STREAM_COMPUTE, 1);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_OPTIMIZER, -1, 0);
  t.p->nevents = 2;
  return t;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "test_exec_watchdog: hung (alarm): the watchdog did not fire\n";
  if (write(2, m, sizeof m - 1) < 0) _exit(3);
  _exit(3);
}

static fp_progress mode = FP_PROGRESS_DEFAULT;

static fp_exec *create(const fp_plan *plan, double timeout_s, fp_status *st) {
  fp_exec_config cfg = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = tu_world, .progress = mode,
                        .timeout_s = timeout_s};
  fp_exec *x = NULL;
  *st = fp_exec_create(plan, &cfg, &x);
  return x;
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  if (argc > 1) mode = !strcmp(argv[1], "poll") ? FP_PROGRESS_POLL : FP_PROGRESS_THREAD;
  signal(SIGALRM, on_alarm);
  alarm(40);
  if (tu_world < 3) {
    fprintf(stderr, "test_exec_watchdog needs 3 ranks or more\n");
    tu_finalize();
    return 2;
  }
  const int victim = tu_world - 1;
  tprog t = build();
  fp_plan *plan = tp_load(&t);
  fpi_arena_free(t.a);
  const char *env = getenv("FLEXPLAN_TIMEOUT");
  EXPECT(env && !strcmp(env, "1"), "ctest sets FLEXPLAN_TIMEOUT=1 (got %s)", env ? env : "nothing");

  /* a malformed variable: every rank refuses at create */
  fp_status st;
  setenv("FLEXPLAN_TIMEOUT", "1s", 1);
  fp_exec *x = create(plan, 0, &st);
  EXPECT(st == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "FLEXPLAN_TIMEOUT='1s'"), "malformed: %s %s",
         fp_status_name(st), fp_exec_errmsg(x));
  fp_exec_destroy(x);
  setenv("FLEXPLAN_TIMEOUT", "1", 1);

  /* a refit's agreement the victim joins only after the others gave up
   * (the config's timeout, 0.5 s, over the environment's): they fail and
   * break; the victim, when it comes, completes what they left and fails on
   * its own file (nothing stays pending on any communicator) */
  fp_exec *y = create(plan, 0.5, &st);
  EXPECT(st == FP_OK && y->timeout_s == 0.5, "create: %s", fp_exec_errmsg(y));
  if (st == FP_OK) {
    const char *none[1] = {"/nonexistent/w.safetensors"};
    if (tu_rank == victim) sleep(2);
    st = fp_exec_load_weights(y, none, 1);
    EXPECT(st == FP_ERR_WEIGHTS && strstr(fp_exec_errmsg(y), "nonexistent"), "refit: %s %s", fp_status_name(st),
           fp_exec_errmsg(y));
    EXPECT(tu_rank == victim || y->broken, "a timed-out agreement breaks the executor");
  }
  fp_exec_destroy(y);
  /* the victim is still in its refit: creation waits under the timeout too
   * (issue 31), so meet first */
  MPI_Barrier(MPI_COMM_WORLD);

  /* the environment's timeout: a whole step in order never fires it */
  x = create(plan, 0, &st);
  EXPECT(st == FP_OK, "create: %s", fp_exec_errmsg(x));
  if (st != FP_OK) return tu_finish();
  EXPECT(x->timeout_s == 1, "timeout %g, FLEXPLAN_TIMEOUT says 1", x->timeout_s);
  tp_step(x);

  /* the victim begins the next step, then stops and destroys its executor */
  EXPECT(fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1) == FP_OK, "%s", fp_exec_errmsg(x));
  if (tu_rank != victim) {
    st = fp_exec_hook(x, FP_HOOK_PRE_FORWARD, 0);
    const char *msg = fp_exec_errmsg(x);
    EXPECT(st == FP_ERR_TIMEOUT, "pre_forward: %s (%s)", fp_status_name(st), msg);
    char want[160];
    snprintf(want, sizeof want, "did not arrive (no report within 1 s): %d", victim);
    EXPECT(strstr(msg, "watchdog: hook pre_forward(m)") && strstr(msg, "op 0 (all_gather fp32 on communicator 'world'") &&
               strstr(msg, "of step 1") && strstr(msg, want),
           "message: %s", msg);
    /* the others waited at the same op */
    char same[160] = "waiting at the same op:";
    for (int r = 0, k = 0; r < victim; r++)
      if (r != tu_rank) snprintf(same + strlen(same), sizeof same - strlen(same), "%s %d", k++ ? "," : "", r);
    EXPECT(strstr(msg, same), "message lacks '%s': %s", same, msg);
    if (tu_rank == 0) printf("rank 0: %s\n", msg);
    /* broken: later calls fail at once */
    st = fp_exec_hook(x, FP_HOOK_POST_FORWARD, 0);
    EXPECT(st == FP_ERR_BACKEND && strstr(fp_exec_errmsg(x), "watchdog"), "after: %s %s", fp_status_name(st),
           fp_exec_errmsg(x));
  }
  fp_exec_destroy(x); /* returns: nothing waits for the victim */

  MPI_Barrier(MPI_COMM_WORLD);
  fp_plan_free(plan);
  alarm(0);
  return tu_finish();
}
