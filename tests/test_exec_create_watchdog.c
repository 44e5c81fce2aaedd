/* test_exec_create_watchdog.c - fp_exec_create under the watchdog (issue 31,
 * item 2), under mpirun with 3 ranks and FLEXPLAN_TIMEOUT=1 (ctest's
 * environment). A rank whose plan file was tampered with (one byte of the
 * hash changed) gets the load error and never creates its executor, but
 * stays alive: the ranks that did create must fail with FP_ERR_TIMEOUT
 * naming it, not wait in the agreement for ever. Then rank 0 (which gathers
 * the agreement) stays away: the others time out naming rank 0, and the
 * hellos they left do not confuse the next agreement. Then every rank joins:
 * an ordinary create, a step and destroy; a different plan on one rank is a
 * hash mismatch, a failed setup on one rank is named, all under the timeout.
 * The program arms alarm(): a hang is a failure, never a stuck CI job.
 * usage: mpirun -n 3 test_exec_create_watchdog */
#include <signal.h>
#include <time.h>

#include "exec_util.h"

/* an all-gather before the forward of the one module, a reduce-scatter
 * after its backward (as test_exec_watchdog.c), n elements per rank */
static tprog build(int n) {
  const int W = tu_world;
  tprog t = tp_new(W);
  int w = tp_buf(&t, "w", (int64_t)W * n * 4, false), g = tp_buf(&t, "g", (int64_t)W * n * 4, false);
  int out = tp_buf(&t, "out", (int64_t)n * 4, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_FORWARD, t.module, 0);
  fp_op *o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(w, 0), o->src = fpi_reg_g(w, 0, (int64_t)n * 4);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_FORWARD, t.module, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_BACKWARD, t.module, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_BACKWARD, t.module, 0);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(out, 0), o->src = fpi_reg(g, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_OPTIMIZER, -1, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_OPTIMIZER, -1, 0);
  return t;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "test_exec_create_watchdog: hung (alarm): fp_exec_create waited for ever\n";
  if (write(2, m, sizeof m - 1) < 0) _exit(3);
  _exit(3);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static fp_exec *create(const fp_plan *plan, fp_status *st, double *took) {
  fp_exec_config cfg = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = tu_world};
  fp_exec *x = NULL;
  double t0 = now_s();
  *st = fp_exec_create(plan, &cfg, &x);
  *took = now_s() - t0;
  return x;
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  signal(SIGALRM, on_alarm);
  alarm(60);
  if (tu_world != 3) {
    fprintf(stderr, "test_exec_create_watchdog needs 3 ranks\n");
    tu_finalize();
    return 2;
  }
  const char *env = getenv("FLEXPLAN_TIMEOUT");
  EXPECT(env && !strcmp(env, "1"), "ctest sets FLEXPLAN_TIMEOUT=1 (got %s)", env ? env : "nothing");
  const int victim = 2;
  tprog t = build(8), t2 = build(16);
  fp_status st;
  double took;

  /* 1. the victim's plan file has one byte of its hash changed */
  char path[256];
  tp_write(&t, path, sizeof path);
  if (tu_rank == victim) {
    FILE *f = fopen(path, "r+");
    char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    char *h = strstr(buf, "\"fnv1a64:");
    EXPECT(h != NULL, "no hash in the plan");
    if (h) {
      h += 9 + 15; /* the hash's last hex digit */
      *h = *h == '0' ? '1' : '0';
      fseek(f, 0, SEEK_SET);
      fwrite(buf, 1, n, f);
    }
    if (f) fclose(f);
  }
  fp_plan *plan = NULL;
  st = fp_plan_load(path, &plan);
  unlink(path);
  if (tu_rank == victim) {
    EXPECT(st != FP_OK && strstr(fp_plan_errmsg(plan), "hash"), "the tampered plan loaded: %s %s", fp_status_name(st),
           fp_plan_errmsg(plan));
    fp_plan_free(plan);
    plan = NULL;
    sleep(3); /* alive, but never creates its executor */
  } else {
    EXPECT(st == FP_OK, "load: %s", fp_plan_errmsg(plan));
    fp_exec *x = create(plan, &st, &took);
    const char *msg = fp_exec_errmsg(x);
    EXPECT(st == FP_ERR_TIMEOUT, "create with a rank missing: %s (%s)", fp_status_name(st), msg);
    EXPECT(strstr(msg, "watchdog: fp_exec_create") && strstr(msg, "did not join: 2"), "message: %s", msg);
    EXPECT(took < 2.9, "create took %.1f s with a timeout of 1 s", took);
    if (tu_rank == 0) printf("rank 0: %s\n", msg);
    fp_exec_destroy(x);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (tu_rank == victim) plan = tp_load(&t);

  /* 2. rank 0 stays away: the others name it (after 2 x 1 s + 1 s) */
  if (tu_rank == 0) {
    sleep(4);
  } else {
    fp_exec *x = create(plan, &st, &took);
    const char *msg = fp_exec_errmsg(x);
    EXPECT(st == FP_ERR_TIMEOUT && strstr(msg, "rank 0 did not join"), "create without rank 0: %s (%s)",
           fp_status_name(st), msg);
    EXPECT(took < 6, "create took %.1f s", took);
    if (tu_rank == 1) printf("rank 1: %s\n", msg);
    fp_exec_destroy(x);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* 3. everyone: the withdrawn hellos are dropped; a step runs */
  fp_exec *x = create(plan, &st, &took);
  EXPECT(st == FP_OK && x->timeout_s == 1, "create: %s %s", fp_status_name(st), fp_exec_errmsg(x));
  if (st == FP_OK) tp_step(x);
  fp_exec_destroy(x);

  /* 4. another plan on the victim: a hash mismatch, at once */
  fp_plan *other = tp_load(&t2);
  x = create(tu_rank == victim ? other : plan, &st, &took);
  EXPECT(st == FP_ERR_MISMATCH && strstr(fp_exec_errmsg(x), "plan hash mismatch") &&
             strstr(fp_exec_errmsg(x), "rank 2 has"),
         "mismatch: %s %s", fp_status_name(st), fp_exec_errmsg(x));
  EXPECT(took < 0.9, "a mismatch took %.1f s", took);
  fp_exec_destroy(x);

  /* 5. no plan on the victim: its setup failed, named to the others */
  x = create(tu_rank == victim ? NULL : plan, &st, &took);
  if (tu_rank == victim)
    EXPECT(st == FP_ERR_ARG, "NULL plan: %s %s", fp_status_name(st), fp_exec_errmsg(x));
  else
    EXPECT(st == FP_ERR_MISMATCH && strstr(fp_exec_errmsg(x), "rank 2 failed its executor setup"), "setup: %s %s",
           fp_status_name(st), fp_exec_errmsg(x));
  fp_exec_destroy(x);

  MPI_Barrier(MPI_COMM_WORLD);
  fp_plan_free(other);
  fp_plan_free(plan);
  fpi_arena_free(t.a);
  fpi_arena_free(t2.a);
  alarm(0);
  return tu_finish();
}
