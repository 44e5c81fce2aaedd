/* exec_bench.c - what the MPI backend costs, measured side by side in one
 * run (never asserted in tests):
 *
 *  1. overhead: one step of K buckets - an in-place all-gather per bucket in
 *     pre_forward, a reduce-scatter per bucket in post_backward, all on the
 *     compute stream (today's lowering) - through the executor's hooks, and
 *     the same MPI calls made directly (MPI_Iallgather / MPI_Ireduce_scatter_
 *     block + MPI_Wait on the same buffers). Ratio = executor / raw.
 *  2. overlap: the same collectives scheduled as the scheduler will (gather of
 *     bucket i+1 prefetched on the ag stream while module i computes,
 *     reduce-scatters on the rs stream behind the backward), with the
 *     trainer computing T microseconds per forward and per backward - (a) on
 *     its core (a busy loop: the CPU trainer), (b) elsewhere (its thread
 *     sleeps, as a GPU trainer's host thread mostly waits). Step time in each
 *     progress mode against compute alone and communication alone, as the
 *     ratio step / max(compute, communication): 1 when communication is
 *     fully hidden behind compute (or the reverse), (compute +
 *     communication) / max(...) when nothing overlaps - both bounds printed.
 *     (An earlier "communication hidden" percentage could pass 100%: a step
 *     measured shorter than compute alone, noise or a sleeping trainer's
 *     slack, has no meaningful hidden share.)
 *
 *   mpirun -n 2 exec_bench [--buckets K] [--kib KiB-per-rank] [--steps N]
 *                          [--reps R] [--compute-us T]
 *
 * Times are medians over R repetitions of N steps, each repetition started
 * after a barrier, the variants interleaved so drift hits all of them. */
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Internals measured (a named exception of tests/layering.py): the bench
 * builds its programs in the IR (ir/ir.h) and runs the same collectives as
 * raw MPI on the executor's own arena (struct fp_exec, executor/exec_impl.h),
 * which the public API does not expose. */
#include "executor/exec_impl.h"
#include "flexplan.h"
#include "ir/ir.h"

static int rank, world;
static int K = 8, steps = 20, reps = 7;
static int64_t n = 65536; /* fp32 elements per rank per bucket */
static double compute_us = 200;

/* ---- plans ------------------------------------------------------------------------ */
typedef struct bufs {
  int w[64], g[64], out[64];
} bufs;

static fp_prog *new_prog(fp_arena *a, bufs *b) {
  fp_prog *p = fpi_prog_new(a);
  p->model = "exec-bench";
  p->strategy = "full_shard";
  p->world_size = world;
  p->ranks_per_node = world;
  p->grad_accumulation = 1;
  fpi_ir_comm_add(p, "world", world, 1);
  int64_t at = 0;
  for (int i = 0; i < K; i++) {
    char name[32];
    snprintf(name, sizeof name, "m%d", i);
    fpi_ir_module_add(p, fpi_strdup(a, name), 0, 0, 0);
    int *ids[3] = {&b->w[i], &b->g[i], &b->out[i]};
    int64_t bytes[3] = {world * n * 4, world * n * 4, n * 4};
    const char *kind[3] = {"w", "g", "out"};
    for (int k = 0; k < 3; k++) {
      snprintf(name, sizeof name, "b%d.%s", i, kind[k]);
      *ids[k] = fpi_ir_buf_add(p, fpi_strdup(a, name), FP_BUF_PERSISTENT, FP_CAT_STAGING, -1, bytes[k]);
      p->bufs[*ids[k]].offset = at;
      at += (bytes[k] + 255) / 256 * 256;
    }
  }
  p->arena_bytes = at;
  return p;
}

static fp_op *gather(fp_prog *p, fp_stream s, const bufs *b, int i) {
  fp_op *o = fpi_ir_emit(p, FP_OP_ALL_GATHER, s, FP_F32, n);
  o->comm = 0, o->dst = fpi_reg(b->w[i], 0), o->src = fpi_reg_g(b->w[i], 0, n * 4);
  return o;
}
static fp_op *rscatter(fp_prog *p, fp_stream s, const bufs *b, int i) {
  fp_op *o = fpi_ir_emit(p, FP_OP_REDUCE_SCATTER, s, FP_F32, n);
  o->comm = 0, o->dst = fpi_reg(b->out[i], 0), o->src = fpi_reg(b->g[i], 0);
  return o;
}
static void sync_op(fp_prog *p, fp_opcode c, fp_stream s, int ev) { fpi_ir_emit(p, c, s, FP_F32, 0)->event = ev; }

/* 1: every op on the compute stream, in the hook that needs it */
static fp_prog *plan_serial(fp_arena *a) {
  bufs b;
  fp_prog *p = new_prog(a, &b);
  fpi_ir_seg_begin(p, FP_SEG_STEP_BEGIN, -1, 0);
  for (int i = 0; i < K; i++) {
    fpi_ir_seg_begin(p, FP_SEG_PRE_FORWARD, i, 0);
    gather(p, FP_STREAM_COMPUTE, &b, i);
    fpi_ir_seg_begin(p, FP_SEG_POST_FORWARD, i, 0);
  }
  for (int i = K - 1; i >= 0; i--) {
    fpi_ir_seg_begin(p, FP_SEG_PRE_BACKWARD, i, 0);
    fpi_ir_seg_begin(p, FP_SEG_POST_BACKWARD, i, 0);
    rscatter(p, FP_STREAM_COMPUTE, &b, i);
  }
  fpi_ir_seg_begin(p, FP_SEG_PRE_OPTIMIZER, -1, 0);
  fpi_ir_seg_begin(p, FP_SEG_POST_OPTIMIZER, -1, 0);
  return p;
}

/* 2: gathers prefetched one bucket ahead on ag, reductions on rs. Events:
 * 0..K-1 gathered(i), K..2K-1 grads written(i), 2K all reduced */
static fp_prog *plan_overlap(fp_arena *a) {
  bufs b;
  fp_prog *p = new_prog(a, &b);
  for (int e = 0; e < 2 * K + 1; e++) fpi_ir_event_new(p);
  fpi_ir_seg_begin(p, FP_SEG_STEP_BEGIN, -1, 0);
  gather(p, FP_STREAM_AG, &b, 0);
  sync_op(p, FP_OP_RECORD, FP_STREAM_AG, 0);
  for (int i = 0; i < K; i++) {
    fpi_ir_seg_begin(p, FP_SEG_PRE_FORWARD, i, 0);
    if (i + 1 < K) {
      gather(p, FP_STREAM_AG, &b, i + 1);
      sync_op(p, FP_OP_RECORD, FP_STREAM_AG, i + 1);
    }
    sync_op(p, FP_OP_WAIT, FP_STREAM_COMPUTE, i);
    fpi_ir_seg_begin(p, FP_SEG_POST_FORWARD, i, 0);
  }
  for (int i = K - 1; i >= 0; i--) {
    fpi_ir_seg_begin(p, FP_SEG_PRE_BACKWARD, i, 0);
    fpi_ir_seg_begin(p, FP_SEG_POST_BACKWARD, i, 0);
    sync_op(p, FP_OP_RECORD, FP_STREAM_COMPUTE, K + i);
    sync_op(p, FP_OP_WAIT, FP_STREAM_RS, K + i);
    rscatter(p, FP_STREAM_RS, &b, i);
  }
  fpi_ir_seg_begin(p, FP_SEG_PRE_OPTIMIZER, -1, 0);
  sync_op(p, FP_OP_RECORD, FP_STREAM_RS, 2 * K);
  sync_op(p, FP_OP_WAIT, FP_STREAM_COMPUTE, 2 * K);
  fpi_ir_seg_begin(p, FP_SEG_POST_OPTIMIZER, -1, 0);
  return p;
}

static fp_plan *load(fp_prog *p) {
  char path[256];
  snprintf(path, sizeof path, "/tmp/exec-bench-%d-%d.plan.json", (int)getpid(), rank);
  FILE *f = fopen(path, "w");
  if (!f || !fpi_plan_write(p, f)) MPI_Abort(MPI_COMM_WORLD, 1);
  fclose(f);
  fp_plan *plan = NULL;
  if (fp_plan_load(path, &plan) != FP_OK) {
    fprintf(stderr, "%s\n", fp_plan_errmsg(plan));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  unlink(path);
  return plan;
}

static fp_exec *executor(const fp_plan *plan, fp_progress mode) {
  fp_exec_config cfg = {.backend = FP_BACKEND_MPI, .rank = rank, .world_size = world, .progress = mode};
  fp_exec *x = NULL;
  if (fp_exec_create(plan, &cfg, &x) != FP_OK) {
    fprintf(stderr, "%s\n", fp_exec_errmsg(x));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return x;
}

/* ---- the trainer's side ---------------------------------------------------------------- */
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static volatile float sink;
static bool asleep; /* the trainer's compute runs elsewhere (a GPU): its thread sleeps */
static void busy(double us) { /* the trainer computing: a core kept busy, or asleep */
  if (us <= 0) return;
  if (asleep) {
    struct timespec t = {0, (long)(us * 1e3)};
    while (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    nanosleep(&t, NULL);
    return;
  }
  double end = now() + us * 1e-6;
  float acc = 1.0f;
  while (now() < end)
    for (int k = 0; k < 200; k++) acc = acc * 1.0000001f + 1e-7f;
  sink = acc;
}

static void hook(fp_exec *x, fp_hook h, int m) {
  if (fp_exec_hook(x, h, m) != FP_OK) {
    fprintf(stderr, "%s\n", fp_exec_errmsg(x));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* one training step through the hooks, busy `us` per forward and backward */
static void exec_step(fp_exec *x, double us) {
  hook(x, FP_HOOK_STEP_BEGIN, -1);
  for (int i = 0; i < K; i++) {
    hook(x, FP_HOOK_PRE_FORWARD, i);
    busy(us);
    hook(x, FP_HOOK_POST_FORWARD, i);
  }
  for (int i = K - 1; i >= 0; i--) {
    hook(x, FP_HOOK_PRE_BACKWARD, i);
    busy(us);
    hook(x, FP_HOOK_POST_BACKWARD, i);
  }
  hook(x, FP_HOOK_PRE_OPTIMIZER, -1);
  hook(x, FP_HOOK_POST_OPTIMIZER, -1);
}

/* how a raw step waits: MPI_Wait, or MPI_Test polled as the executor polls
 * (256 tries, then a sched_yield between tries) */
static bool raw_yield;
static void raw_wait(MPI_Request *r) {
  if (!raw_yield) {
    MPI_Wait(r, MPI_STATUS_IGNORE);
    return;
  }
  int done = 0;
  for (int idle = 0;; idle++) {
    MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (idle > 256) sched_yield();
  }
}

/* the same collectives as raw MPI calls, one at a time, on x's buffers */
static void raw_step(fp_exec *x, MPI_Comm c, double us) {
  const fp_prog *p = x->prog;
  MPI_Request r;
  for (int i = 0; i < K; i++) {
    MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x->dev + p->bufs[3 * i].offset, (int)n, MPI_FLOAT, c, &r);
    raw_wait(&r);
    busy(us);
  }
  for (int i = K - 1; i >= 0; i--) {
    busy(us);
    MPI_Ireduce_scatter_block(x->dev + p->bufs[3 * i + 1].offset, x->dev + p->bufs[3 * i + 2].offset, (int)n,
                              MPI_FLOAT, MPI_SUM, c, &r);
    raw_wait(&r);
  }
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* median over reps of the per-step time of fn, interleaving variants */
typedef struct variant {
  const char *name;
  fp_exec *x;     /* NULL: raw MPI */
  bool yield;     /* raw: wait as the executor does */
  double us;      /* trainer compute per forward/backward */
  double t[64];
} variant;

static double median(double *t, int k) {
  qsort(t, (size_t)k, sizeof *t, cmp);
  return t[k / 2];
}

/* raw variants run on the buffers of executor `b` */
static void measure(variant *v, int nv, MPI_Comm raw, fp_exec *b) {
  for (int k = 0; k < nv; k++) /* warm-up */
    for (int s = 0; s < 3; s++) raw_yield = v[k].yield, v[k].x ? exec_step(v[k].x, v[k].us) : raw_step(b, raw, v[k].us);
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < nv; k++) {
      if (v[k].x) fp_exec_sync(v[k].x);
      raw_yield = v[k].yield;
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int s = 0; s < steps; s++) v[k].x ? exec_step(v[k].x, v[k].us) : raw_step(b, raw, v[k].us);
      if (v[k].x) fp_exec_sync(v[k].x);
      double dt = (MPI_Wtime() - t0) / steps, mx;
      MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* the slowest rank's */
      v[k].t[r] = mx;
    }
}

int main(int argc, char **argv) {
  int level;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int k = 1; k + 1 < argc; k += 2) {
    if (!strcmp(argv[k], "--buckets")) K = atoi(argv[k + 1]);
    else if (!strcmp(argv[k], "--kib")) n = atoll(argv[k + 1]) * 1024 / 4;
    else if (!strcmp(argv[k], "--steps")) steps = atoi(argv[k + 1]);
    else if (!strcmp(argv[k], "--reps")) reps = atoi(argv[k + 1]);
    else if (!strcmp(argv[k], "--compute-us")) compute_us = atof(argv[k + 1]);
  }
  if (K < 1 || K > 64 || n < 1 || steps < 1 || reps < 1 || reps > 64) {
    if (rank == 0) fprintf(stderr, "usage: exec_bench [--buckets 1..64] [--kib K] [--steps N] [--reps 1..64] [--compute-us T]\n");
    MPI_Finalize();
    return 2;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  double loadavg = -1;
  FILE *lf = fopen("/proc/loadavg", "r");
  if (lf) {
    if (fscanf(lf, "%lf", &loadavg) != 1) loadavg = -1;
    fclose(lf);
  }
  if (rank == 0)
    printf("exec_bench: %d ranks on %ld cores (load average %.2f at start), %d buckets x %" PRId64
           " KiB per rank (fp32), %d steps x %d reps, median of per-step times\n",
           world, cores, loadavg, K, n * 4 / 1024, steps, reps);
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);

  /* 1. overhead */
  fp_arena *a = fpi_arena_new();
  fp_plan *ps = load(plan_serial(a));
  variant v1[4] = {{"raw MPI, MPI_Wait", NULL, false, 0, {0}},
                   {"raw MPI, MPI_Test", NULL, true, 0, {0}},
                   {"executor, poll", executor(ps, FP_PROGRESS_POLL), false, 0, {0}},
                   {"executor, thread", executor(ps, FP_PROGRESS_THREAD), false, 0, {0}}};
  measure(v1, 4, raw, v1[2].x);
  double twait = median(v1[0].t, reps), ttest = median(v1[1].t, reps);
  if (rank == 0) {
    printf("\n1. overhead, collectives on the compute stream (per step: %d all-gathers + %d reduce-scatters)\n", K, K);
    printf("   %-20s %10.1f us/step\n", v1[0].name, twait * 1e6);
    printf("   %-20s %10.1f us/step   (polled as the executor polls)\n", v1[1].name, ttest * 1e6);
  }
  for (int k = 2; k < 4; k++) {
    double t = median(v1[k].t, reps);
    if (rank == 0)
      printf("   %-20s %10.1f us/step   ratio %.3f to MPI_Test, %.3f to MPI_Wait\n", v1[k].name, t * 1e6, t / ttest,
             t / twait);
    fp_exec_destroy(v1[k].x);
  }
  fp_plan_free(ps);

  /* 2. overlap, with the trainer's compute on this core (busy) or elsewhere (asleep) */
  fp_plan *po = load(plan_overlap(a));
  fp_exec *xp = executor(po, FP_PROGRESS_POLL), *xt = executor(po, FP_PROGRESS_THREAD);
  for (int kind = 0; kind < 2; kind++) {
    asleep = kind == 1;
    variant v2[4] = {{"executor, poll", xp, false, compute_us, {0}},
                     {"raw MPI, no compute", NULL, true, 0, {0}},
                     {"executor, thread", xt, false, compute_us, {0}},
                     {"compute only", NULL, false, -1, {0}}};
    for (int r = 0; r < reps; r++) { /* compute alone */
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int s = 0; s < steps; s++)
        for (int i = 0; i < 2 * K; i++) busy(compute_us);
      double dt = (MPI_Wtime() - t0) / steps, mx;
      MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      v2[3].t[r] = mx;
    }
    measure(v2, 3, raw, xp);
    double tpoll = median(v2[0].t, reps), tcomm = median(v2[1].t, reps), tthr = median(v2[2].t, reps);
    double tcomp = median(v2[3].t, reps);
    if (rank == 0) {
      printf("\n2%c. overlap: gathers prefetched on ag, reduce-scatters on rs; the trainer %s %.0f us per forward and "
             "backward\n", 'a' + kind, asleep ? "sleeps (compute elsewhere)" : "computes (a busy core)", compute_us);
      printf("   %-22s %10.1f us/step\n", "compute only", tcomp * 1e6);
      printf("   %-22s %10.1f us/step\n", "communication only", tcomm * 1e6);
      double lo = fmax(tcomp, tcomm), hi = tcomp + tcomm;
      printf("   %-22s %10.1f us/step   step / max(compute, comm) %.3f (1.000 all hidden, %.3f none)\n",
             "executor, poll", tpoll * 1e6, tpoll / lo, hi / lo);
      printf("   %-22s %10.1f us/step   step / max(compute, comm) %.3f (1.000 all hidden, %.3f none)\n",
             "executor, thread", tthr * 1e6, tthr / lo, hi / lo);
    }
  }
  fp_exec_destroy(xp);
  fp_exec_destroy(xt);
  fp_plan_free(po);
  fpi_arena_free(a);
  MPI_Comm_free(&raw);
  MPI_Finalize();
  return 0;
}
