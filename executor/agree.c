/* agree.c - the ranks' agreement under a watchdog (agree.h).
 *
 * A collective cannot be abandoned, so with a timeout the agreement is point
 * to point, on the caller's communicator with the caller's tag: every rank
 * sends rank 0 a hello (its attempt number, hash, whether its checks failed,
 * its values); rank 0 collects hellos for timeout_s, decides, and sends each
 * rank that joined the verdict for its attempt: ok (with the element-wise
 * max of the values), a rank failed, the hashes differ, or these ranks did
 * not join. A rank that gets no verdict in 2 x timeout_s + 1 s (rank 0 did
 * not come) gives up and withdraws its hello (MPI keeps the order of one
 * sender's messages, so rank 0's next agreement drops the pair); a verdict
 * for an earlier attempt is dropped the same way. */
#include "agree.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { AG_HELLO = 1, AG_WITHDRAW = 2 };
/* a hello or withdrawal: kind, attempt, hash, failed, values */
#define HELLO_LEN (4 + FPX_AGREE_VALS)
/* a verdict: attempt, verdict, rank, root hash, other hash, missing, list, max */
enum { V_ATTEMPT, V_VERDICT, V_RANK, V_ROOT_HASH, V_OTHER_HASH, V_MISSING, V_LIST };
#define V_MAX (V_LIST + FPX_AGREE_LIST)
#define V_LEN (V_MAX + FPX_AGREE_VALS)

/* this process's watched agreements per tag, for matching verdicts */
static _Atomic int64_t attempts[2];

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* ---- memory kept for abandoned requests ---- */
static struct kept {
  struct kept *next;
  void *p;
} *kept_for_mpi;
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;

void fpx_keep_for_mpi(void *p) {
  struct kept *k = p ? malloc(sizeof *k) : NULL;
  if (!k) return;
  pthread_mutex_lock(&kept_mu);
  *k = (struct kept){kept_for_mpi, p};
  kept_for_mpi = k;
  pthread_mutex_unlock(&kept_mu);
}

/* a hello/withdrawal to rank 0: the send completes eagerly in any MPI (a
 * few bytes); a request left pending is freed and its buffer kept */
static void send0(MPI_Comm comm, int tag, int64_t kind, int64_t attempt, uint64_t h, bool failed,
                  const int64_t *vals) {
  int64_t *m = malloc(HELLO_LEN * sizeof *m);
  if (!m) return;
  m[0] = kind, m[1] = attempt, m[2] = (int64_t)h, m[3] = failed;
  memcpy(m + 4, vals, FPX_AGREE_VALS * sizeof *m);
  MPI_Request r = MPI_REQUEST_NULL;
  int done = 0;
  if (MPI_Isend(m, HELLO_LEN, MPI_INT64_T, 0, tag, comm, &r) != MPI_SUCCESS) {
    free(m);
    return;
  }
  for (int k = 0; k < 1000 && !done; k++)
    if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
  if (done) {
    free(m);
  } else {
    MPI_Request_free(&r);
    fpx_keep_for_mpi(m);
  }
}

/* what rank 0 knows of each rank */
typedef struct joined {
  int64_t attempt, hash, failed, vals[FPX_AGREE_VALS];
  bool in;
} joined;

/* rank 0: take one message in; returns the change in the count of joined ranks */
static int take_in(joined *j, int size, int src, const int64_t *in) {
  if (src <= 0 || src >= size) return 0;
  if (in[0] == AG_HELLO) {
    int d = !j[src].in;
    j[src] = (joined){.attempt = in[1], .hash = in[2], .failed = in[3], .in = true};
    memcpy(j[src].vals, in + 4, sizeof j[src].vals);
    return d;
  }
  if (in[0] == AG_WITHDRAW && j[src].in && j[src].attempt == in[1]) {
    j[src].in = false;
    return -1;
  }
  return 0;
}

/* rank 0: receive hellos until every rank joined or the time is up; then
 * take in what is already queued too (a hello another agreement left is
 * followed by its withdrawal, sent before its next hello, in order, so the
 * count is only final once the queue is empty). Returns how many joined. */
static int collect(MPI_Comm comm, int tag, double timeout_s, joined *j, int size, double t0) {
  int n = 1;
  int64_t in[HELLO_LEN];
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Status status;
  for (;;) {
    int done = 0;
    if (n == size) {
      MPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &done, &status);
      if (!done || MPI_Recv(in, HELLO_LEN, MPI_INT64_T, status.MPI_SOURCE, tag, comm, &status) != MPI_SUCCESS) break;
    } else {
      if (r == MPI_REQUEST_NULL && MPI_Irecv(in, HELLO_LEN, MPI_INT64_T, MPI_ANY_SOURCE, tag, comm, &r) != MPI_SUCCESS)
        break;
      if (MPI_Test(&r, &done, &status) != MPI_SUCCESS) break;
      if (!done && now_us() - t0 <= timeout_s * 1e6) {
        sched_yield();
        continue;
      }
      if (!done) { /* the time is up: cancel, unless the receive completed meanwhile */
        int cancelled = 0;
        MPI_Cancel(&r);
        MPI_Wait(&r, &status);
        MPI_Test_cancelled(&status, &cancelled);
        if (cancelled) break;
      }
      r = MPI_REQUEST_NULL;
    }
    n += take_in(j, size, status.MPI_SOURCE, in);
    if (n < size && now_us() - t0 > timeout_s * 1e6 && r == MPI_REQUEST_NULL) {
      /* past the limit: only what is queued now still counts */
      MPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &done, &status);
      if (!done) break;
    }
  }
  return n;
}

/* rank 0: the verdict from what it collected (v[V_ATTEMPT] unset) */
static void decide(const joined *j, int size, int n, int64_t *v) {
  memset(v, 0, V_LEN * sizeof *v);
  if (n < size) {
    v[V_VERDICT] = FPX_AV_TIMEOUT, v[V_MISSING] = size - n;
    for (int k = 1, m = 0; k < size && m < FPX_AGREE_LIST; k++)
      if (!j[k].in) v[V_LIST + m++] = k;
    return;
  }
  v[V_VERDICT] = FPX_AV_OK;
  for (int k = 0; k < size && v[V_VERDICT] == FPX_AV_OK; k++)
    if (j[k].failed) v[V_VERDICT] = FPX_AV_FAILED, v[V_RANK] = k;
  for (int k = 1; k < size && v[V_VERDICT] == FPX_AV_OK; k++)
    if (j[k].hash != j[0].hash)
      v[V_VERDICT] = FPX_AV_MISMATCH, v[V_RANK] = k, v[V_ROOT_HASH] = j[0].hash, v[V_OTHER_HASH] = j[k].hash;
  for (int i = 0; i < FPX_AGREE_VALS; i++) {
    v[V_MAX + i] = j[0].vals[i];
    for (int k = 1; k < size; k++)
      if (j[k].vals[i] > v[V_MAX + i]) v[V_MAX + i] = j[k].vals[i];
  }
}

/* rank 0: collect, decide, answer every rank that joined */
static bool agree_root(MPI_Comm comm, int tag, double timeout_s, int size, uint64_t h, bool failed,
                       const int64_t *vals, int64_t *v) {
  joined *j = calloc((size_t)size, sizeof *j);
  int64_t (*out)[V_LEN] = calloc((size_t)size, sizeof *out);
  MPI_Request *sr = calloc((size_t)size, sizeof *sr);
  if (!j || !out || !sr) {
    free(j), free(out), free(sr);
    return false;
  }
  j[0] = (joined){.hash = (int64_t)h, .failed = failed, .in = true};
  memcpy(j[0].vals, vals, sizeof j[0].vals);
  decide(j, size, collect(comm, tag, timeout_s, j, size, now_us()), v);
  for (int k = 1; k < size; k++) {
    sr[k] = MPI_REQUEST_NULL;
    if (!j[k].in) continue;
    memcpy(out[k], v, sizeof out[k]);
    out[k][V_ATTEMPT] = j[k].attempt;
    MPI_Isend(out[k], V_LEN, MPI_INT64_T, k, tag, comm, &sr[k]);
  }
  /* small messages go out eagerly; one that is still pending after a
   * timeout is freed and its buffer kept */
  int all = 0;
  for (double t1 = now_us(); !all && now_us() - t1 < timeout_s * 1e6;) {
    MPI_Testall(size - 1, sr + 1, &all, MPI_STATUSES_IGNORE);
    if (!all) sched_yield();
  }
  bool kept = false;
  for (int k = 1; k < size && !all; k++)
    if (sr[k] != MPI_REQUEST_NULL) MPI_Request_free(&sr[k]), kept = true;
  if (kept) fpx_keep_for_mpi(out);
  else free(out);
  free(sr);
  free(j);
  return true;
}

/* any other rank: hello to rank 0, then its verdict for this attempt;
 * false: none came in time (the hello is withdrawn) or MPI failed */
static bool agree_other(MPI_Comm comm, int tag, double timeout_s, uint64_t h, bool failed, const int64_t *vals,
                        int64_t *v, bool *mpi_failed) {
  int64_t attempt = ++attempts[tag == FPX_AGREE_TAG_XFER];
  send0(comm, tag, AG_HELLO, attempt, h, failed, vals);
  MPI_Request r = MPI_REQUEST_NULL;
  double t0 = now_us(), limit = (2 * timeout_s + 1) * 1e6;
  for (;;) {
    if (MPI_Irecv(v, V_LEN, MPI_INT64_T, 0, tag, comm, &r) != MPI_SUCCESS) {
      *mpi_failed = true;
      return false;
    }
    int done = 0;
    while (!done && now_us() - t0 < limit) {
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (!done) sched_yield();
    }
    if (!done) {
      MPI_Status status;
      int cancelled = 0;
      MPI_Cancel(&r);
      MPI_Wait(&r, &status);
      MPI_Test_cancelled(&status, &cancelled);
      if (!cancelled && v[V_ATTEMPT] == attempt) return true;
      send0(comm, tag, AG_WITHDRAW, attempt, h, failed, vals);
      return false;
    }
    if (v[V_ATTEMPT] == attempt) return true; /* else a verdict for an earlier attempt that timed out: dropped */
  }
}

void fpx_agree_watched(MPI_Comm comm, int tag, double timeout_s, uint64_t hash, bool failed,
                       const int64_t vals[FPX_AGREE_VALS], fpx_agreement *out) {
  int rank = 0, size = 1;
  int64_t v[V_LEN];
  double t0 = now_us();
  bool mpi_failed = false;
  memset(out, 0, sizeof *out);
  if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS) {
    out->verdict = FPX_AV_ERROR;
    return;
  }
  bool ok = rank == 0 ? agree_root(comm, tag, timeout_s, size, hash, failed, vals, v)
                      : agree_other(comm, tag, timeout_s, hash, failed, vals, v, &mpi_failed);
  out->waited_s = (now_us() - t0) / 1e6;
  if (!ok) {
    out->verdict = rank == 0 || mpi_failed ? FPX_AV_ERROR : FPX_AV_NO_ROOT;
    return;
  }
  out->verdict = (fpx_verdict)v[V_VERDICT];
  out->rank = v[V_RANK];
  out->root_hash = (uint64_t)v[V_ROOT_HASH], out->other_hash = (uint64_t)v[V_OTHER_HASH];
  out->missing = v[V_MISSING];
  memcpy(out->list, v + V_LIST, sizeof out->list);
  memcpy(out->max, v + V_MAX, sizeof out->max);
}

void fpx_agree_list(const fpx_agreement *a, char *buf, size_t cap) {
  size_t k = 0;
  buf[0] = 0;
  for (int64_t i = 0; i < a->missing && i < FPX_AGREE_LIST && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? ", " : "", a->list[i]);
  if (a->missing > FPX_AGREE_LIST && k < cap)
    snprintf(buf + k, cap - k, " and %" PRId64 " more", a->missing - FPX_AGREE_LIST);
}
