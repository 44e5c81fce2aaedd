/* reshard_bench.c - the transfer executor (executor/xfer.c) against raw MPI
 * point-to-point for the same transfer: a synthetic model of NPARAMS params
 * of ELEMS fp32 elements, full_shard on A ranks moved to full_shard on B
 * ranks. The raw version posts exactly the transfer's sends and recvs
 * (MPI_Isend/MPI_Irecv of the same bytes between the same arenas, then
 * MPI_Waitall) and runs its local copies with memcpy; no checks, no staging.
 * Prints the median of REPS runs of each and their ratio (never asserted).
 *
 *   mpirun -n max(A,B) reshard_bench A B [ELEMS] [NPARAMS] [REPS] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Internals measured (a named exception of tests/layering.py): the raw MPI
 * version posts the transfer program's own ops (ir/xfer.h, the handle's
 * struct) on the executors' arenas (struct fp_exec, executor/exec_impl.h),
 * which the public API does not expose. */
#include "executor/exec_impl.h"
#include "flexplan_compile.h"
#include "ir/xfer.h"

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static fp_plan *plan(int world, long elems, int nparams) {
  char *m = malloc(64 + (size_t)nparams * 160);
  int n = sprintf(m, "{\"format\":\"flexplan.model.v1\",\"name\":\"bench\",\"modules\":[");
  for (int i = 0; i < nparams; i++)
    n += sprintf(m + n, "%s{\"name\":\"m%d\",\"params\":[{\"name\":\"m%d.w\",\"shape\":[%ld,256]}]}", i ? "," : "", i,
                 i, elems / 256);
  sprintf(m + n, "]}");
  char s[512];
  snprintf(s, sizeof s,
           "{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":%d},\"strategy\":\"full_shard\","
           "\"defaults\":{\"mixed_precision\":{\"param_dtype\":\"fp32\",\"reduce_dtype\":\"fp32\","
           "\"main_grad_dtype\":\"fp32\"}}}", world);
  fp_compile_options o = {.model_text = m, .spec_text = s};
  fp_plan *p = NULL;
  if (fp_plan_compile(&o, &p) != FP_OK) {
    fprintf(stderr, "compile: %s\n", fp_plan_errmsg(p));
    exit(1);
  }
  free(m);
  return p;
}

int main(int argc, char **argv) {
  int level, me, P;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  int wa = argc > 1 ? atoi(argv[1]) : 4, wb = argc > 2 ? atoi(argv[2]) : 3;
  long elems = argc > 3 ? atol(argv[3]) : 1 << 20;
  int nparams = argc > 4 ? atoi(argv[4]) : 8, reps = argc > 5 ? atoi(argv[5]) : 9;
  fp_plan *A = plan(wa, elems, nparams), *B = plan(wb, elems, nparams);
  fp_xfer *t = NULL;
  if (fp_reshard_compile(A, B, NULL, &t) != FP_OK) {
    fprintf(stderr, "reshard: %s\n", fp_xfer_errmsg(t));
    return 1;
  }
  MPI_Comm ca, cb;
  MPI_Comm_split(MPI_COMM_WORLD, me < wa ? 0 : MPI_UNDEFINED, me, &ca);
  MPI_Comm_split(MPI_COMM_WORLD, me < wb ? 0 : MPI_UNDEFINED, me, &cb);
  fp_exec *xa = NULL, *xb = NULL;
  fp_exec_config c = {.backend = FP_BACKEND_MPI, .rank = me};
  if (me < wa) c.world_size = wa, c.bootstrap = &ca, fp_exec_create(A, &c, &xa);
  if (me < wb) c.world_size = wb, c.bootstrap = &cb, fp_exec_create(B, &c, &xb);
  const fp_tx *tx = t->tx;
  double *tf = calloc((size_t)reps, sizeof *tf), *tr = calloc((size_t)reps, sizeof *tr);
  MPI_Request *req = calloc((size_t)(tx->first[me + 1] - tx->first[me]) + 1, sizeof *req);
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (fp_xfer_run(t, xa, xb, NULL) != FP_OK) fprintf(stderr, "run: %s\n", fp_xfer_errmsg(t));
    MPI_Barrier(MPI_COMM_WORLD);
    tf[r] = MPI_Wtime() - t0;
    /* raw MPI: the same messages between the same arenas */
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    int nr = 0;
    for (int32_t i = tx->first[me]; i < tx->first[me + 1]; i++) {
      const fp_tx_op *o = &tx->ops[i];
      int bytes = (int)(o->n * fpi_dtype_size(o->dtype));
      if (o->kind == FP_TX_SEND) MPI_Isend(xa->dev + o->src.off, bytes, MPI_BYTE, o->peer, 3, MPI_COMM_WORLD, &req[nr++]);
      else if (o->kind == FP_TX_RECV) MPI_Irecv(xb->dev + o->dst.off, bytes, MPI_BYTE, o->peer, 3, MPI_COMM_WORLD, &req[nr++]);
      else if (o->kind == FP_TX_COPY) memcpy(xb->dev + o->dst.off, xa->dev + o->src.off, (size_t)bytes);
    }
    MPI_Waitall(nr, req, MPI_STATUSES_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    tr[r] = MPI_Wtime() - t0;
  }
  qsort(tf, (size_t)reps, sizeof *tf, cmpd);
  qsort(tr, (size_t)reps, sizeof *tr, cmpd);
  if (me == 0) {
    fp_xfer_info in;
    fp_xfer_get_info(t, &in);
    printf("reshard_bench: full_shard %d -> %d, %d params x %ld fp32: %d ops, wire %.1f MB, local %.1f MB\n", wa, wb,
           nparams, elems, in.nops, in.wire_bytes / 1e6, in.local_bytes / 1e6);
    printf("  fp_xfer_run %.3f ms, raw MPI p2p %.3f ms (medians of %d), ratio %.3f\n", tf[reps / 2] * 1e3,
           tr[reps / 2] * 1e3, reps, tf[reps / 2] / tr[reps / 2]);
  }
  fp_exec_destroy(xa);
  fp_exec_destroy(xb);
  fp_xfer_free(t);
  fp_plan_free(A);
  fp_plan_free(B);
  free(tf), free(tr), free(req);
  MPI_Finalize();
  return 0;
}
