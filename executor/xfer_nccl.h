/* xfer_nccl.h - the NCCL side of fp_xfer_run (executor/xfer_nccl.c, built
 * with CUDA), between xfer.c's checks and agreement. Internal to the
 * executor. */
#ifndef FP_XFER_NCCL_H
#define FP_XFER_NCCL_H

#include <mpi.h>
#include <stdbool.h>

#include "exec_impl.h"

/* What a transfer keeps between runs (fp_xfer.run), the executor's own:
 * ir/handle.h's fp_xfer holds only the pointer. */
struct fpx_xfer_state {
  void *bk;                /* the NCCL backend's state (xfer_nccl.c); NULL on MPI */
  void (*bk_free)(void *);
  void *mpi;               /* xfer.c's: the duplicate communicator, staging, requests */
  int checked;             /* 1 + the process whose executors' layouts passed check_layout; 0: none */
};
/* t's state between runs, made on first use; NULL when memory runs out (xfer.c) */
struct fpx_xfer_state *fpx_xfer_state(fp_xfer *t);

/* set the handle's message; returns st (xfer.c) */
fp_status fpx_xfer_fail(fp_xfer *t, fp_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* a reshard transform's op i on host memory (xfer.c; the NCCL backend
 * stages its bytes through the host): prep_send writes its wire tensors
 * into dst from the slice at src; finalize writes the slice into dst from
 * the op's stage claim at src (the wire tensors, then the guarded scratch,
 * fpi_tx_stage_need bytes), dst untouched when the guards are broken */
fp_status fpx_xf_prep_send(fp_xfer *t, int32_t i, char *dst, const char *src);
fp_status fpx_xf_finalize(fp_xfer *t, int32_t i, char *dst, char *src);
/* the built-in transform of that name (ir/xfer.h fpi_xf_builtin_mode: MXFP8
 * in a mode) as the executor runs it, the tables of fp_transform_mxfp8
 * (xfer_mxfp8.c); NULL for another name */
const struct fpi_xform *fpx_xf_builtin(const char *name);

#ifdef FP_HAVE_CUDA
/* Local preparation on process me (< the transfer's processes), before the
 * processes agree: the device the executors share (current), both executors
 * synchronized (their last step done), the stream and the staging, and the
 * order check (a process's sends and recvs run as one NCCL group, after the
 * ops before them, which may read FROM bytes only). *fresh: this process
 * has no NCCL communicator over base's processes yet (the first run, or
 * another communicator): the run makes one */
fp_status fpx_xfer_nccl_prepare(fp_xfer *t, fp_exec *from, fp_exec *to, int me, MPI_Comm base, int *fresh);
/* After the agreement, on every process of c (a duplicate of base): when
 * fresh (agreed), process 0 makes an NCCL id and broadcasts it over c and the
 * transfer's processes make their communicator; then process me runs its
 * ops and waits for them */
fp_status fpx_xfer_nccl_run(fp_xfer *t, int me, MPI_Comm base, MPI_Comm c, bool fresh, char *from_dev, char *to_dev);
#endif

#endif
