/* exec_util.h - what the executor's multi-rank tests share: building a small
 * program in code (persistent buffers placed one after another), writing it
 * as plan.json and loading it through the public API, running every hook of
 * a step, and checking that keeps going after a failure (a rank that stopped
 * half way would leave the others waiting in a collective), with the ranks'
 * verdicts combined at the end.
 *
 * These tests run under mpirun, one process per rank, so they do not use
 * cmocka: an assertion that unwinds one rank would hang the others. */
#ifndef FP_EXEC_UTIL_H
#define FP_EXEC_UTIL_H

#include <inttypes.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#include "executor/exec_impl.h"
#include "flexplan.h"
#include "ir/ir.h"
#include "planner/sync.h"

static int tu_rank, tu_world, tu_failures;

#define EXPECT(cond, ...)                                               \
  do {                                                                  \
    if (!(cond)) {                                                      \
      tu_failures++;                                                    \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", tu_rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                     \
      fputc('\n', stderr);                                              \
    }                                                                   \
  } while (0)

static inline void tu_init(int *argc, char ***argv) {
  int level;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &level);
  MPI_Comm_rank(MPI_COMM_WORLD, &tu_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &tu_world);
}

/* MPI_Finalize, with the asan preset's leak check run just before it: by
 * then the test has freed all it made, and Open MPI is still whole (its
 * components loaded, so their frames symbolize); a check run here turns the
 * one at exit off. A leak still fails the process (LeakSanitizer exits
 * non-zero). The one test whose LeakSanitizer tracer crashes by itself, here
 * as at exit, runs without the check (tests/exec.cmake says which, and why). */
static inline void tu_finalize(void) {
  fflush(stdout);
  fflush(stderr);
#ifdef __SANITIZE_ADDRESS__
  __lsan_do_leak_check();
#endif
  MPI_Finalize();
}

/* 0 when every rank passed */
static inline int tu_finish(void) {
  int any = 0;
  MPI_Allreduce(&tu_failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (tu_rank == 0) printf("%s: %d failed check(s) over %d rank(s)\n", any ? "FAIL" : "ok", any, tu_world);
  tu_finalize();
  return any ? 1 : 0;
}

/* ---- building programs ----------------------------------------------------- */
typedef struct tprog {
  fp_arena *a;
  fp_prog *p;
  int world;     /* comm 0, "world" */
  int module;    /* module 0, "m" */
} tprog;

static inline tprog tp_new(int W) {
  tprog t;
  t.a = fpi_arena_new();
  t.p = fpi_prog_new(t.a);
  t.p->model = "exec-test";
  t.p->strategy = "full_shard";
  t.p->world_size = W;
  t.p->ranks_per_node = W;
  t.p->grad_accumulation = 1;
  t.world = fpi_ir_comm_add(t.p, "world", W, 1);
  t.module = fpi_ir_module_add(t.p, "m", 0, 0, 0);
  return t;
}

/* a persistent buffer placed after the previous ones of its arena */
static inline int tp_buf(tprog *t, const char *name, int64_t bytes, bool host) {
  int b = fpi_ir_buf_add(t->p, name, FP_BUF_PERSISTENT, FP_CAT_STAGING, -1, bytes);
  int64_t *end = host ? &t->p->host_bytes : &t->p->arena_bytes;
  t->p->bufs[b].offset = *end;
  t->p->bufs[b].host = host;
  *end += (bytes + 255) / 256 * 256;
  return b;
}

static inline fp_op *tp_op(tprog *t, fp_opcode c, fp_stream s, fp_dtype dt, int64_t n) { return fpi_ir_emit(t->p, c, s, dt, n); }

static inline fp_op *tp_sync(tprog *t, fp_opcode c, fp_stream s, int ev) {
  fp_op *o = fpi_ir_emit(t->p, c, s, FP_F32, 0);
  o->event = ev;
  return o;
}

/* A test program without record/wait of its own gets the ones the planner
 * would insert (the sync pass): the verifier refuses racy plans. Programs
 * that place their own events are left as written. */
static inline void tp_order(const tprog *t) {
  for (int32_t i = 0; i < t->p->nops; i++)
    if (fpi_op_class(t->p->ops[i].code) == FP_OPC_SYNC) return;
  fpi_sync_program(t->p);
}

/* write the program as plan.json (a file per rank) */
static inline void tp_write(const tprog *t, char *path, size_t len) {
  tp_order(t);
  snprintf(path, len, "/tmp/fp-exec-test-%d-%d.plan.json", (int)getpid(), tu_rank);
  FILE *f = fopen(path, "w");
  if (!f || !fpi_plan_write(t->p, f)) {
    fprintf(stderr, "rank %d: cannot write %s\n", tu_rank, path);
    exit(2);
  }
  fclose(f);
}

/* load it through the public API; exits when the plan is rejected (a bug
 * of the test). These programs test ops, hooks and setup, not whole
 * training steps: loaded with FP_LOAD_NO_SEMANTIC, so fp_exec_create does
 * not run rule 9 on them (test_exec_plan's semantic_at_create tests it) */
static inline fp_plan *tp_load(const tprog *t) {
  char path[256];
  tp_write(t, path, sizeof path);
  fp_plan *plan = NULL;
  fp_status st = fp_plan_load_flags(path, FP_LOAD_NO_SEMANTIC, &plan);
  unlink(path);
  if (st != FP_OK) {
    fprintf(stderr, "rank %d: test plan rejected: %s\n", tu_rank, fp_plan_errmsg(plan));
    exit(2);
  }
  return plan;
}

static inline fp_exec *tp_exec(const fp_plan *plan, fp_progress mode) {
  fp_exec_config cfg = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = tu_world, .progress = mode};
  fp_exec *x = NULL;
  fp_status st = fp_exec_create(plan, &cfg, &x);
  if (st != FP_OK) {
    fprintf(stderr, "rank %d: fp_exec_create: %s: %s\n", tu_rank, fp_status_name(st), fp_exec_errmsg(x));
    exit(2);
  }
  return x;
}

/* every hook of one step, in plan order */
static inline void tp_step(fp_exec *x) {
  const fp_prog *p = x->prog;
  for (int32_t k = 0; k < p->nsegs; k++) {
    fp_status st = fp_exec_hook(x, (fp_hook)p->segs[k].kind, fpi_seg_has_module(p->segs[k].kind) ? p->segs[k].module : -1);
    EXPECT(st == FP_OK, "hook %d: %s", (int)k, fp_exec_errmsg(x));
  }
}

/* a buffer's bytes on this rank */
static inline void *tp_mem(fp_exec *x, int buf) {
  const fp_ir_buf *b = &x->prog->bufs[buf];
  return (b->host ? x->host : x->dev) + b->offset;
}

/* arbitrary finite floats (all mantissa bits used), reproducible from (j, i) */
static inline float tu_val(int64_t j, int64_t i) {
  uint64_t h = (uint64_t)(j * 1000003 + i) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  uint32_t u = (uint32_t)(h & 0x807fffffu) | (uint32_t)(110 + h % 30) << 23;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

#endif
