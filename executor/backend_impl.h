/* backend_impl.h - the function table every executor backend implements.
 *
 * exec.c does what is the same for every backend: it checks the plan against
 * this rank (operands, tables, views, all against the arena sizes), resolves
 * the program for the rank (fp_xop: counts, offsets, event edges, per-stream
 * op lists), keeps the trainer's place in the step (hook order), and hands
 * out views. A backend owns memory and execution:
 *
 *   prepare      local setup, no communication: allocate the one arena
 *                (x->dev, x->host, zeroed) and every per-op record the hooks
 *                will need, check what the backend cannot express;
 *   agree        the ranks exchange their plan hash and whether their setup
 *                succeeded so far (local); every rank returns the same
 *                verdict, and nothing of the plan is issued on a failure;
 *   connect      collective setup after agreement (communicators);
 *   run_segment  issue segment `seg`'s ops; return when the trainer's next
 *                work may start (the compute stream is caught up), leaving
 *                other streams' work running;
 *   sync         wait for all issued work;
 *   write        copy rows x width bytes from host memory into the device
 *                arena (refits; after sync): a memcpy for MPI, a copy to
 *                the GPU for NCCL;
 *   all_reduce_f64  fp_exec_all_reduce_f64 (between hooks; n in
 *                [1, FP_ALL_REDUCE_MAX]): the sum over the world, in place,
 *                blocking; NULL where the backend has none (FP_ERR_BACKEND);
 *   destroy      free everything (after sync); tolerates a partial setup.
 *
 * Hooks (run_segment) must not allocate: everything is made in prepare. */
#ifndef FP_BACKEND_IMPL_H
#define FP_BACKEND_IMPL_H

#include "exec_impl.h"

struct fp_backend_impl {
  const char *name;
  fp_status (*prepare)(fp_exec *x);
  fp_status (*agree)(fp_exec *x, fp_status local);
  fp_status (*connect)(fp_exec *x);
  fp_status (*run_segment)(fp_exec *x, int32_t seg);
  fp_status (*sync)(fp_exec *x);
  fp_status (*write)(fp_exec *x, char *dst, int64_t dpitch, const char *src, int64_t spitch, int64_t width,
                     int64_t rows);
  void (*destroy)(fp_exec *x);
  fp_status (*all_reduce_f64)(fp_exec *x, double *values, int n);
  /* fp_exec_all_reduce_f64_dev: device values, enqueued on the compute
   * stream, not waited for (max: the maximum); NULL where values are host
   * memory */
  fp_status (*all_reduce_dev)(fp_exec *x, double *values, int n, int max);
  /* NCCL: the trainer's compute stream changes (fp_exec_set_cuda_stream); NULL: the backend has none */
  fp_status (*set_stream)(fp_exec *x, void *stream);
  /* NCCL: one graph per step (fp_exec_capture_*): op FPX_CAPTURE_BEGIN, _END,
   * _RELEASE; *live gets the graphs not released. NULL: cannot be captured */
  fp_status (*capture)(fp_exec *x, int op, int64_t *live);
};
enum { FPX_CAPTURE_BEGIN, FPX_CAPTURE_END, FPX_CAPTURE_RELEASE, FPX_CAPTURE_LIVE };

extern const fp_backend_impl fp_backend_mpi;      /* executor/mpi.c */
extern const fp_backend_impl fp_backend_external; /* executor/external.c */
#ifdef FP_HAVE_CUDA
extern const fp_backend_impl fp_backend_nccl; /* executor/nccl.c */
/* the CUDA device an NCCL executor runs on (transfers: xfer_nccl.c) */
int fpx_nccl_device(const fp_exec *x);
#endif

/* the MPI backend's agreement (mpi.c), which the NCCL backend also uses
 * when it bootstraps through MPI: every rank of the bootstrap communicator
 * (cfg.bootstrap or MPI_COMM_WORLD) joins, whatever `local` says; every
 * rank returns the same verdict */
fp_status fpx_mpi_agree(fp_exec *x, fp_status local);
/* a transfer abandoned requests on x's arena (xfer.c): x fails from now on and keeps its memory */
void fpx_mpi_abandon(fp_exec *x, const char *why);

/* create an executor with a given backend table (exec.c): fp_exec_create
 * after its backend lookup. Tests use it with backends of their own. */
fp_status fpx_create_with(const fp_plan *plan, const fp_exec_config *cfg, const fp_backend_impl *bk, fp_exec **out);

#endif
