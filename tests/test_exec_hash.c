/* test_exec_hash.c - ranks agree on the plan at setup. Two ranks given
 * different plans both get FP_ERR_MISMATCH naming both hashes, and no
 * collective of the plan is issued; a rank whose setup fails makes every
 * rank fail (no rank waits for it). Runs under mpirun on 2 ranks.
 *
 * "No collective is issued" is observed through MPI's profiling interface:
 * this program defines the MPI calls the executor would make for the plan
 * (communicator split and duplicate, the non-blocking collectives), counts
 * them and forwards to the PMPI_ entry points. */
#include <stdatomic.h>

#include "exec_util.h"

static _Atomic int n_split, n_dup, n_coll; /* the progress thread issues collectives */

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm) {
  n_split++;
  return PMPI_Comm_split(comm, color, key, newcomm);
}
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm) {
  n_dup++;
  return PMPI_Comm_dup(comm, newcomm);
}
int MPI_Iallgather(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt, MPI_Comm comm,
                   MPI_Request *req) {
  n_coll++;
  return PMPI_Iallgather(sb, sc, st, rb, rc, rt, comm, req);
}
int MPI_Ireduce_scatter_block(const void *sb, void *rb, int rc, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                              MPI_Request *req) {
  n_coll++;
  return PMPI_Ireduce_scatter_block(sb, rb, rc, t, op, comm, req);
}

/* a gather and a reduction; `variant` changes the model name (and so the hash) */
static tprog build(int world, int variant) {
  const int n = 4;
  tprog t = tp_new(world);
  if (variant) t.p->model = "exec-test-other";
  int w = tp_buf(&t, "w", (int64_t)world * n * 4, false), out = tp_buf(&t, "out", n * 4, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(w, 0), o->src = fpi_reg_g(w, 0, n * 4);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(out, 0), o->src = fpi_reg(w, 0);
  return t;
}

static void expect_fail(const char *what, tprog t, fp_status want, const char *frag, const char *frag2) {
  fp_plan *plan = tp_load(&t);
  fp_exec_config cfg = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = tu_world, .progress = FP_PROGRESS_DEFAULT};
  fp_exec *x = NULL;
  n_split = n_dup = n_coll = 0;
  fp_status st = fp_exec_create(plan, &cfg, &x);
  const char *m = fp_exec_errmsg(x);
  EXPECT(st == want, "%s: status %s (%s)", what, fp_status_name(st), m);
  EXPECT(strstr(m, frag) && (!frag2 || strstr(m, frag2)), "%s: message '%s' lacks '%s' / '%s'", what, m, frag,
         frag2 ? frag2 : "");
  EXPECT(n_split == 0 && n_dup == 0 && n_coll == 0, "%s: %d splits, %d dups, %d collectives issued", what, n_split,
         n_dup, n_coll);
  fp_exec_destroy(x);
  fp_plan_free(plan);
  fpi_arena_free(t.a);
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  if (tu_world < 2) {
    fprintf(stderr, "test_exec_hash needs 2 ranks or more\n");
    tu_finalize();
    return 1;
  }
  /* rank 1 loads another plan */
  char h0[40], h1[40];
  {
    tprog a = build(tu_world, 0), b = build(tu_world, 1);
    tp_order(&a); /* what tp_write will write */
    tp_order(&b);
    snprintf(h0, sizeof h0, "fnv1a64:%016" PRIx64, fpi_prog_hash(a.p));
    snprintf(h1, sizeof h1, "fnv1a64:%016" PRIx64, fpi_prog_hash(b.p));
    fpi_arena_free(tu_rank == 1 ? a.a : b.a);
    expect_fail("different plans", tu_rank == 1 ? b : a, FP_ERR_MISMATCH, h0, h1);
  }
  /* rank 1's setup fails locally (its plan is for another world size) */
  expect_fail("a rank that fails its setup", build(tu_rank == 1 ? tu_world + 1 : tu_world, 0),
              tu_rank == 1 ? FP_ERR_PLAN : FP_ERR_MISMATCH, tu_rank == 1 ? "the plan is for" : "rank 1 failed", NULL);
  /* the same plan everywhere: communicators are made and the plan runs */
  tprog t = build(tu_world, 0);
  fp_plan *plan = tp_load(&t);
  n_split = n_dup = n_coll = 0;
  fp_exec *x = tp_exec(plan, FP_PROGRESS_DEFAULT);
  /* one split and two dups for the communicator on two streams, one dup for
   * fp_exec_all_reduce_f64 */
  EXPECT(n_split == 1 && n_dup == 3, "%d splits, %d dups for one communicator on two streams (+1)", n_split, n_dup);
  tp_step(x);
  fp_exec_sync(x);
  EXPECT(n_coll == 2, "%d collectives", n_coll);
  fp_exec_destroy(x);
  fp_plan_free(plan);
  fpi_arena_free(t.a);
  return tu_finish();
}
