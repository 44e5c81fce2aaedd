/* host.h - the plan replayed on host memory, for every backend whose
 * collectives are host calls (host.c): the MPI backend (mpi.c) and the
 * external backend (external.c) share it. It owns the one arena allocation,
 * the emulated streams (each its ops replayed in order), the local kernels,
 * the progress thread, the waits under the watchdog, and the statistics a
 * segment adds; a backend gives it four functions (start a communication
 * op, test it, copy a finished op's staging, and the watchdog's round with
 * the other ranks) and keeps its own per-op records. docs/executor.md,
 * "Streams and progress", says how the streams advance. */
#ifndef FP_EXECUTOR_HOST_H
#define FP_EXECUTOR_HOST_H

#include <pthread.h>
#include <stdatomic.h>

#include "exec_impl.h"

#define FPX_HOST_ALIGN 256 /* arena parts and staging start on 256 bytes (docs/layout.md) */

typedef struct fpx_host_ops {
  /* start op o (and only o) non-blocking: 0, or the backend's error code */
  int (*issue)(fp_exec *x, fp_xop *o);
  /* has o finished? 0 (with *done), or the backend's error code */
  int (*test)(fp_exec *x, fp_xop *o, int *done);
  /* o finished: copy its staging into place (NULL: nothing to do) */
  void (*finish)(fp_exec *x, fp_xop *o);
  /* the text of an error code, into buf[cap] */
  void (*errstr)(fp_exec *x, int rc, char *buf, size_t cap);
  /* the watchdog fired while this rank waits for o (an op on a plan
   * communicator) of `step`: ask the other ranks of its communicator
   * instance where they are, appending what they say to msg[cap] (NULL: no
   * round) */
  void (*peers)(fp_exec *x, const fp_xop *o, int64_t step, char *msg, size_t cap);
  const char *name; /* "MPI", "transport": in failure messages */
} fpx_host_ops;

typedef struct fpx_hstream { /* all fields under fpx_host.mu in thread mode */
  fp_xop **ops;
  int64_t len;
  int64_t enq;    /* instances handed out by hooks */
  int64_t head;   /* instances finished */
  int64_t issued; /* instances issued (>= head): a group in flight */
} fpx_hstream;

typedef struct fpx_segsum { /* what one segment adds to the statistics */
  int64_t local, coll, bytes;
} fpx_segsum;

/* A backend's state (fp_exec.bks) starts with its fpx_host: the progress
 * thread finds it there. */
typedef struct fpx_host {
  const fpx_host_ops *ops;
  char *mem;              /* the one arena allocation: device arena, host arena, staging */
  fpx_segsum *sums;
  fpx_hstream st[FP_NSTREAMS];
  fp_progress mode;
  /* the progress thread: whoever holds mu drives the streams */
  pthread_t th;
  bool th_live;
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* the thread sleeps on it when no stream has work */
  atomic_int hooks_waiting; /* hooks waiting for mu: the thread lets them in first */
  bool stop;
  bool failed;            /* a backend call failed, or a watchdog fired; fail_msg says which */
  bool timed_out;         /* a watchdog fired: requests may still be pending on the arena */
  char fail_msg[1024];
} fpx_host;

/* Allocate the arena (device + host arenas, then `staging` bytes, zeroed)
 * into x->dev, x->host and *stage, the segment sums, the stream lists. */
fp_status fpx_host_prepare(fp_exec *x, fpx_host *h, const fpx_host_ops *ops, fp_progress mode, int64_t staging,
                           char **stage);
/* start the progress thread (mode FP_PROGRESS_THREAD) */
fp_status fpx_host_start(fp_exec *x, fpx_host *h);
fp_status fpx_host_run_segment(fp_exec *x, fpx_host *h, int32_t seg);
fp_status fpx_host_sync(fp_exec *x, fpx_host *h);
/* advance every stream once, as far as it goes without waiting (the caller
 * holds the streams: fpx_host_take); true when anything moved */
bool fpx_host_poll(fp_exec *x, fpx_host *h);
/* take the streams from the progress thread / give them back (the fields
 * above are read under it) */
void fpx_host_take(fpx_host *h);
void fpx_host_give(fpx_host *h);
/* mark h failed by a watchdog outside the streams (a transfer, the f64
 * reduction) with msg; x fails with it */
fp_status fpx_host_time_out(fp_exec *x, fpx_host *h, const char *msg);
/* stop the progress thread */
void fpx_host_stop(fpx_host *h);
/* free the arena and the sums, unless a watchdog fired (then the arena is
 * kept: fpx_keep_for_mpi) */
void fpx_host_free(fpx_host *h);

/* append " a, b, c" (at most 8, then "and N more") to buf (the watchdog's lists) */
void fpx_rank_list(char *buf, size_t cap, const int64_t *ranks, int n);

/* The watchdog's round is over: rep[2*j], rep[2*j+1] is the (step, op)
 * member j of o's communicator instance reported (step -2: no report);
 * append who did not arrive, who waits at the same op (o of step) and who
 * waits elsewhere to msg[cap] */
void fpx_host_report(fp_exec *x, const fp_xop *o, int64_t step, const int64_t *rep, char *msg, size_t cap);

/* The executor's agreement at create came back with verdict a (not
 * FPX_AV_ERROR; agree.h): FP_OK, or x fails with the message that names the
 * ranks (local: this rank's own setup status, which wins) */
struct fpx_agreement;
fp_status fpx_agree_status(fp_exec *x, const struct fpx_agreement *a, fp_status local);

/* bytes rounded up to FPX_HOST_ALIGN */
int64_t fpx_host_align(int64_t v);

#endif
