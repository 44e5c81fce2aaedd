/* agree.h - the ranks' agreement under a watchdog, over MPI point to point
 * (agree.c). Executor creation (mpi.c) and a transfer's run (xfer.c) both
 * ask every process "did your checks pass, and do we hold the same
 * program?" before any collective of theirs is issued. Without a timeout
 * that is one MPI_Allreduce; with one, a process that never arrives (its
 * plan failed to load, it raised before the call) must not leave the others
 * in a collective that cannot be abandoned, so the question goes point to
 * point to rank 0 of the communicator, which answers within the timeout,
 * naming the ranks that did not join. */
#ifndef FP_EXECUTOR_AGREE_H
#define FP_EXECUTOR_AGREE_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

/* The tags of the agreements, one per caller, so that a late message of one
 * never meets the other on a shared communicator (both below MPI_TAG_UB,
 * which is at least 32767 in every MPI) */
#define FPX_AGREE_TAG_EXEC 31131 /* fp_exec_create, on the bootstrap communicator */
#define FPX_AGREE_TAG_XFER 31132 /* fp_xfer_run, on the caller's communicator */

#define FPX_AGREE_VALS 5 /* values each rank contributes; the answer is their element-wise max */
#define FPX_AGREE_LIST 8 /* ranks a timeout names */

typedef enum fpx_verdict {
  FPX_AV_OK,       /* every rank joined, none failed, every hash equal: max[] holds the answer */
  FPX_AV_FAILED,   /* every rank joined; rank `rank` (the first) said its checks failed */
  FPX_AV_MISMATCH, /* every rank joined; rank `rank` holds hash other_hash, rank 0 root_hash */
  FPX_AV_TIMEOUT,  /* `missing` ranks did not join within the timeout, the first ones in list[] */
  FPX_AV_NO_ROOT,  /* this rank got no answer from rank 0 within 2 x timeout + 1 s */
  FPX_AV_ERROR,    /* MPI failed, or rank 0 ran out of memory, on this rank */
} fpx_verdict;

typedef struct fpx_agreement {
  fpx_verdict verdict;
  int64_t rank;                   /* FAILED, MISMATCH: the rank named */
  uint64_t root_hash, other_hash; /* MISMATCH */
  int64_t missing;                /* TIMEOUT: how many did not join */
  int64_t list[FPX_AGREE_LIST];   /* TIMEOUT: the first of them */
  int64_t max[FPX_AGREE_VALS];    /* OK: the element-wise max over the ranks */
  double waited_s;                /* how long this rank waited */
} fpx_agreement;

/* Every rank of comm calls this with the same tag and a timeout > 0: hash
 * is what must be equal everywhere (the plan's or the transfer's), failed
 * whether this rank's own checks failed, vals its contribution. */
void fpx_agree_watched(MPI_Comm comm, int tag, double timeout_s, uint64_t hash, bool failed,
                       const int64_t vals[FPX_AGREE_VALS], fpx_agreement *out);

/* "1, 4, 7 and 3 more": the ranks of a TIMEOUT verdict, into buf */
void fpx_agree_list(const fpx_agreement *a, char *buf, size_t cap);

/* Memory an abandoned MPI request may still read or write (after a
 * watchdog): never freed, kept reachable on purpose (agree.c). */
void fpx_keep_for_mpi(void *p);

#endif
