/* nccl.c - the NCCL backend: the plan replayed on one CUDA device per rank,
 * with NCCL collectives, the plan's streams as CUDA streams, its events as
 * CUDA events, and (by default) each segment's work replayed as CUDA graphs
 * over one arena whose addresses never change. docs/cuda.md is the design;
 * what is decided without a GPU (bootstrap rules, communicator splits, the
 * issue order) is in nccl_plan.c.
 *
 * Setup (fp_exec_create):
 *  prepare  the bootstrap rule (nccl_plan.c); the issue list; the device
 *           (the caller's current one); streams: the compute stream is the
 *           trainer's (cfg.cuda_stream) or ours, ag and rs are ours at the
 *           device's highest priority, so communication and its casts are
 *           scheduled ahead of compute when both are ready; one CUDA event
 *           per record op; the arena from ncclMemAlloc (NCCL-registrable,
 *           cuMem-backed) and the host arena pinned (cudaHostAlloc), both
 *           zeroed; nothing is allocated after this except graph capture;
 *  agree    MPI bootstrap: the MPI backend's agreement (mpi.c) before any
 *           NCCL call, then rank 0's unique id broadcast over MPI. Other
 *           bootstraps: the world communicator first (it is the only channel
 *           there is), then the same agreement as NCCL all-reduces;
 *  connect  one ncclCommSplit of the world communicator per (plan
 *           communicator, stream) pair that carries NCCL work (a
 *           communicator's operations are serialized by NCCL across
 *           streams, so one per pair keeps the ag stream's gathers from
 *           waiting for the rs stream's reductions - the overlap the plan's
 *           streams exist for); the arena registered once with each.
 *
 * Hooks (run_segment) issue the segment's items (nccl_plan.h): records and
 * waits as cudaEventRecord / cudaStreamWaitEvent, runs op by op (eager and
 * capture-safe modes); in graph mode, from the step after the warm-up, a
 * segment with a run is one cudaGraphLaunch of a graph holding all its
 * items on all its streams (capture_seg, launch_seg; docs/cuda.md "Modes").
 * Every op is issued (or captured) inside an NVTX range named
 * "op <index> seg <k> <hook>(<module>) <opcode>"; a graph launch inside the
 * hook's. A hook never synchronizes with the device and
 * returns as soon as its work is enqueued; the trainer's work on the
 * compute stream is ordered after it by stream order.
 *
 * Capture-safe mode (docs/cuda.md, "Capture-safe mode"): when the compute
 * stream is being captured by the trainer, each side stream that gets work
 * is first forked into the capture (an event recorded on the compute
 * stream, waited on by the side stream); a wait whose record was made
 * outside this capture becomes an external event-wait node
 * (cudaEventWaitExternal), or is dropped when that record was made inside an
 * earlier capture (the earlier graph is ordered before by its launch on the
 * compute stream); post_optimizer joins the side streams back into the
 * compute stream. No hook path synchronizes, allocates or adds a host
 * callback.
 *
 * One graph per step (fp_exec_capture_begin/end; docs/cuda.md, "One graph
 * per step"): the same capture-safe hooks inside a capture the executor is
 * told about. Begin checks what a whole-step capture needs (capture-safe
 * mode, the compute stream capturing, between steps, after a warm-up step)
 * and remembers the capture; every call while it is open checks the
 * capture is still the compute stream's (wcap_check: one invalidated, or
 * ended without fp_exec_capture_end, breaks the executor with what
 * happened); end checks a whole number of steps was captured and joins the
 * side streams back.
 *
 * The watchdog (x->timeout_s: fp_exec_config.timeout_s or FLEXPLAN_TIMEOUT;
 * docs/cuda.md, "Watchdog"): hooks only enqueue, so what can wait forever
 * for a rank that never comes is the host waiting for the device
 * (fp_exec_sync, a refit's write, fp_exec_all_reduce_f64 and the
 * executor's agreement, the graph capture after the warm-up step). With a
 * timeout those waits poll instead of blocking: every communication op
 * records a CUDA event when it completes (made at create; an external
 * event-record node inside a capture, so graphs record it too), and each
 * poll reads the communicators' asynchronous errors (ncclCommGetAsyncError).
 * When no communication op completes for timeout_s while some are pending,
 * every communicator is aborted (ncclCommAbort, which ends the kernels that
 * wait for the missing peers) and the wait fails with FP_ERR_TIMEOUT naming,
 * per stream, the first op that did not complete. Written and compiled
 * without a GPU: it has never run (docs/cuda.md says so). */
#include <inttypes.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>
#ifdef FP_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#define RANGE_PUSH(s) nvtxRangePushA(s)
#define RANGE_POP() nvtxRangePop()
#else
#define RANGE_PUSH(s) ((void)(s))
#define RANGE_POP() ((void)0)
#endif

#include "backend_impl.h"
#include "kernels/kernels_cuda.h"
#include "nccl_plan.h"

_Static_assert(sizeof(ncclUniqueId) == FP_NCCL_ID_BYTES, "fp_nccl_id holds an ncclUniqueId");

#define SEG_LABEL 96
/* graph mode: a graph whose segment has work on several streams is launched
 * on one of these, segment k on k mod N (docs/cuda.md, "One graph launch per
 * hook": a launch holds its stream until every node is done, so graph k
 * waits for graph k - N and for nothing else outside the plan's events) */
#define FPN_LAUNCH_STREAMS 16
#define SCRATCH_BYTES (FP_ALL_REDUCE_MAX * sizeof(double))

typedef struct nstate {
  fpn_plan P;
  fpn_boot boot;
  fp_cuda_mode mode;
  int device;
  bool device_ok;          /* a device is current and usable: this rank can join NCCL */
  /* memory */
  void *arena;             /* ncclMemAlloc: arena_bytes (at least 256) */
  size_t arena_alloc;
  void *host;              /* cudaHostAlloc: host_bytes (at least 256) */
  uint64_t *scratch;       /* the agreement's device words and fp_exec_all_reduce_f64's staging
                            * (cudaMalloc, SCRATCH_BYTES) */
  /* streams and events */
  cudaStream_t st[FP_NSTREAMS];
  bool own[FP_NSTREAMS];   /* made here (destroyed here) */
  cudaStream_t made_compute; /* the compute stream made here, after the trainer handed its own */
  cudaStream_t cap[FP_NSTREAMS]; /* graph mode: capture streams, same priorities */
  cudaEvent_t *ev;         /* P.nevents */
  bool *ev_made;
  cudaEvent_t fork_ev, join_ev[FP_NSTREAMS];
  bool fork_made, join_made[FP_NSTREAMS];
  unsigned long long *rec_cap; /* per event: the capture it was last recorded in (0: none) */
  unsigned long long last_cap;
  char (*seg_label)[SEG_LABEL];
  /* NCCL */
  ncclComm_t world;
  ncclComm_t *comms;       /* P.npairs */
  void **reg;              /* P.npairs: registration handles */
  char (*comm_name)[64];
  ncclComm_t *op_comm;     /* per xop: its communicator (NULL for local/sync ops) */
  /* graphs (graph mode): one per segment with a run on this rank */
  cudaGraph_t *graphs;     /* nsegs */
  cudaGraphExec_t *execs;
  bool captured;
  cudaStream_t capo;       /* the origin of a several-stream segment's capture (forks and joins only) */
  cudaStream_t lst[FPN_LAUNCH_STREAMS]; /* where several-stream graphs are launched, segment k on k mod N */
  cudaEvent_t head_ev[FP_NSTREAMS], tail_ev[FP_NSTREAMS]; /* a launch's start on, and end of, each stream */
  cudaEvent_t fork_in, join_in[FP_NSTREAMS]; /* the captures' own fork and joins */
  cudaEvent_t *iev;        /* per record slot: its edge to waits inside the same segment's graph */
  bool graph_events_made;
  /* one graph per step (fp_exec_capture_begin/end; docs/cuda.md, "One graph per step") */
  unsigned long long wcap; /* the compute stream's capture fp_exec_capture_begin joined (0: none) */
  uint8_t wcap_sides;      /* the side streams forked into it */
  int64_t wcap_steps;      /* stats.steps at fp_exec_capture_begin */
  int64_t live;            /* graphs captured that way and not released */
  /* the watchdog (x->timeout_s > 0) */
  cudaEvent_t *done;       /* per xop: recorded when a communication op completes */
  bool *done_made;
  bool aborted;            /* the watchdog aborted every communicator */
} nstate;

static nstate *ns(const fp_exec *x) { return (nstate *)x->bks; }

/* ---- errors ------------------------------------------------------------------------------ */
static fp_status cuda_fail(fp_exec *x, const char *what, cudaError_t e) {
  return fpx_fail(x, FP_ERR_BACKEND, "CUDA: %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}
static fp_status nccl_fail(fp_exec *x, const char *what, ncclResult_t r, ncclComm_t c) {
  const char *last = c ? ncclGetLastError(c) : ncclGetLastError(NULL);
  return fpx_fail(x, FP_ERR_BACKEND, "NCCL: %s failed: %s%s%s", what, ncclGetErrorString(r), last && *last ? ": " : "",
                  last ? last : "");
}
#define CUDA_TRY(x, call)                                    \
  do {                                                       \
    cudaError_t e_ = (call);                                 \
    if (e_ != cudaSuccess) return cuda_fail((x), #call, e_); \
  } while (0)
#define NCCL_TRY(x, call, comm)                                     \
  do {                                                              \
    ncclResult_t r_ = (call);                                       \
    if (r_ != ncclSuccess) return nccl_fail((x), #call, r_, comm);  \
  } while (0)

/* an op's failure, naming the op */
static fp_status op_fail(fp_exec *x, const fp_xop *o, const char *what, const char *why) {
  return fpx_fail(x, FP_ERR_BACKEND, "op %" PRId32 " (%s): %s failed: %s", o->index, fpi_op_name(o->code), what, why);
}

fp_status fp_nccl_get_id(fp_nccl_id *out) {
  if (!out) return FP_ERR_ARG;
  ncclUniqueId id;
  char *env = fpn_comm_id_hide(); /* a random id, never NCCL_COMM_ID's address (FP_NCCL_BOOT_ID) */
  ncclResult_t r = ncclGetUniqueId(&id);
  fpn_comm_id_restore(env);
  if (r != ncclSuccess) {
    memset(out, 0, sizeof *out);
    return FP_ERR_BACKEND;
  }
  memcpy(out->bytes, &id, sizeof id);
  return FP_OK;
}

static bool mpi_up(void) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  return inited && !finalized;
}

/* ---- prepare --------------------------------------------------------------------------------- */
static ncclDataType_t nccl_type(fp_dtype t) {
  switch (t) {
    case FP_F32: return ncclFloat32;
    case FP_BF16: return ncclBfloat16;
    case FP_F16: return ncclFloat16;
    default: return ncclUint8; /* e4m3, e8m0, u8: moved, never reduced (the verifier) */
  }
}

/* what this backend cannot run: communication on host (offload) buffers */
static fp_status check_ops(fp_exec *x) {
  for (int32_t j = 0; j < x->nxops; j++) {
    const fp_xop *o = &x->xops[j];
    if (fpi_op_class(o->code) != FP_OPC_COMM) continue;
    for (int w = 0; w < 3; w++)
      if (o->off[w] >= 0 && o->host[w])
        return fpx_fail(x, FP_ERR_PLAN, "op %" PRId32 " (%s): the NCCL backend cannot communicate host (offload) "
                        "buffers", o->index, fpi_op_name(o->code));
  }
  return FP_OK;
}

static fp_status make_stream(fp_exec *x, cudaStream_t *s, int prio) {
  CUDA_TRY(x, cudaStreamCreateWithPriority(s, cudaStreamNonBlocking, prio));
  x->stats.allocations++;
  return FP_OK;
}

static fp_status make_event(fp_exec *x, cudaEvent_t *e, bool *made) {
  CUDA_TRY(x, cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  *made = true;
  return FP_OK;
}

/* the device: the caller's current one */
static fp_status prepare_device(fp_exec *x, nstate *n) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1)
    return fpx_fail(x, FP_ERR_BACKEND, "no usable CUDA device: cudaGetDeviceCount: %s, %d device(s)",
                    e != cudaSuccess ? cudaGetErrorString(e) : "ok", count);
  CUDA_TRY(x, cudaGetDevice(&n->device));
  CUDA_TRY(x, cudaSetDevice(n->device)); /* makes the context current */
  n->device_ok = true;
  return FP_OK;
}

/* per-op and per-run records, and each segment's label */
static fp_status prepare_records(fp_exec *x, nstate *n) {
  const fpn_plan *P = &n->P;
  const fp_prog *p = x->prog;
  n->ev = fpx_alloc(x, (size_t)P->nevents + 1, sizeof *n->ev);
  n->ev_made = fpx_alloc(x, (size_t)P->nevents + 1, sizeof *n->ev_made);
  n->rec_cap = fpx_alloc(x, (size_t)P->nevents + 1, sizeof *n->rec_cap);
  n->comms = fpx_alloc(x, (size_t)P->npairs + 1, sizeof *n->comms);
  n->reg = fpx_alloc(x, (size_t)P->npairs + 1, sizeof *n->reg);
  n->comm_name = fpx_alloc(x, (size_t)P->npairs + 1, sizeof *n->comm_name);
  n->op_comm = fpx_alloc(x, (size_t)x->nxops + 1, sizeof *n->op_comm);
  n->graphs = fpx_alloc(x, (size_t)p->nsegs + 1, sizeof *n->graphs);
  n->execs = fpx_alloc(x, (size_t)p->nsegs + 1, sizeof *n->execs);
  n->seg_label = fpx_alloc(x, (size_t)p->nsegs + 1, sizeof *n->seg_label);
  if (!n->ev || !n->ev_made || !n->rec_cap || !n->comms || !n->reg || !n->comm_name || !n->op_comm || !n->graphs ||
      !n->execs || !n->seg_label)
    return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
  for (int32_t k = 0; k < p->nsegs; k++) {
    char l[80];
    snprintf(n->seg_label[k], SEG_LABEL, "hook seg %" PRId32 " %s", k, fpx_seg_label(x, k, l, sizeof l));
  }
  return FP_OK;
}

/* graph mode, one graph per hook: forks, joins and launch streams */
static fp_status prepare_graph_events(fp_exec *x, nstate *n, int greatest) {
  const fpn_plan *P = &n->P;
  FPX_CHECK(make_stream(x, &n->capo, greatest));
  for (int k = 0; k < FPN_LAUNCH_STREAMS; k++) FPX_CHECK(make_stream(x, &n->lst[k], greatest));
  n->iev = fpx_alloc(x, (size_t)P->nevents + 1, sizeof *n->iev);
  if (!n->iev) return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
  n->graph_events_made = true; /* from here on destroy frees what is not NULL */
  bool made = false;
  for (int32_t k = 0; k < P->nevents; k++)
    if (P->rec_use[k] & FPN_REC_LOCAL) FPX_CHECK(make_event(x, &n->iev[k], &made));
  for (int s = 0; s < FP_NSTREAMS; s++) {
    FPX_CHECK(make_event(x, &n->head_ev[s], &made));
    FPX_CHECK(make_event(x, &n->tail_ev[s], &made));
    FPX_CHECK(make_event(x, &n->join_in[s], &made));
  }
  FPX_CHECK(make_event(x, &n->fork_in, &made));
  x->stats.allocations += 1 + 3 * FP_NSTREAMS + P->nevents;
  return FP_OK;
}

/* streams: communication at the highest priority (graph mode: capture
 * streams of the priority they replay at, then the graphs' own) */
static fp_status prepare_streams(fp_exec *x, nstate *n) {
  int least = 0, greatest = 0;
  CUDA_TRY(x, cudaDeviceGetStreamPriorityRange(&least, &greatest));
  if (x->cfg.cuda_stream) {
    n->st[FP_STREAM_COMPUTE] = (cudaStream_t)x->cfg.cuda_stream;
  } else {
    FPX_CHECK(make_stream(x, &n->st[FP_STREAM_COMPUTE], least));
    n->own[FP_STREAM_COMPUTE] = true;
  }
  for (int s = 0; s < FP_NSTREAMS; s++) {
    if (s == FP_STREAM_COMPUTE) continue;
    FPX_CHECK(make_stream(x, &n->st[s], greatest));
    n->own[s] = true;
  }
  x->cuda_stream = n->st[FP_STREAM_COMPUTE];
  if (n->mode == FP_CUDA_GRAPH) /* graphs are captured on streams of the priority they replay at */
    for (int s = 0; s < FP_NSTREAMS; s++) {
      int prio = least;
      CUDA_TRY(x, cudaStreamGetPriority(n->st[s], &prio));
      FPX_CHECK(make_stream(x, &n->cap[s], prio));
    }
  if (n->mode == FP_CUDA_GRAPH) FPX_CHECK(prepare_graph_events(x, n, greatest));
  return FP_OK;
}

/* events: the plan's, the fork's and joins, and the watchdog's (one per communication op) */
static fp_status prepare_events(fp_exec *x, nstate *n) {
  const fpn_plan *P = &n->P;
  for (int32_t k = 0; k < P->nevents; k++) FPX_CHECK(make_event(x, &n->ev[k], &n->ev_made[k]));
  FPX_CHECK(make_event(x, &n->fork_ev, &n->fork_made));
  if (x->timeout_s > 0) { /* the watchdog's: one per communication op */
    n->done = fpx_alloc(x, (size_t)x->nxops + 1, sizeof *n->done);
    n->done_made = fpx_alloc(x, (size_t)x->nxops + 1, sizeof *n->done_made);
    if (!n->done || !n->done_made) return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
    for (int32_t j = 0; j < x->nxops; j++)
      if (fpi_op_class(x->xops[j].code) == FP_OPC_COMM) {
        FPX_CHECK(make_event(x, &n->done[j], &n->done_made[j]));
        x->stats.allocations++;
      }
  }
  for (int s = 0; s < FP_NSTREAMS; s++) FPX_CHECK(make_event(x, &n->join_ev[s], &n->join_made[s]));
  x->stats.allocations += P->nevents + 1 + FP_NSTREAMS;
  return FP_OK;
}

/* the agreement's words, then the arenas: once, zeroed */
static fp_status prepare_arenas(fp_exec *x, nstate *n) {
  const fp_prog *p = x->prog;
  cudaError_t e;
  CUDA_TRY(x, cudaMalloc((void **)&n->scratch, SCRATCH_BYTES));
  x->stats.allocations++;

  /* the arenas: once, zeroed */
  int64_t dev = p->arena_bytes > 256 ? p->arena_bytes : 256, host = p->host_bytes > 256 ? p->host_bytes : 256;
  ncclResult_t r = ncclMemAlloc(&n->arena, (size_t)dev);
  if (r != ncclSuccess) {
    n->arena = NULL;
    return fpx_fail(x, r == ncclSystemError || r == ncclUnhandledCudaError ? FP_ERR_NOMEM : FP_ERR_BACKEND,
                    "cannot allocate the arena (%" PRId64 " bytes) with ncclMemAlloc: %s", dev, ncclGetErrorString(r));
  }
  n->arena_alloc = (size_t)dev;
  e = cudaHostAlloc(&n->host, (size_t)host, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    n->host = NULL;
    return fpx_fail(x, FP_ERR_NOMEM, "cannot allocate the pinned host arena (%" PRId64 " bytes): %s", host,
                    cudaGetErrorString(e));
  }
  x->stats.allocations += 2;
  memset(n->host, 0, (size_t)host);
  CUDA_TRY(x, cudaMemsetAsync(n->arena, 0, (size_t)dev, n->st[FP_STREAM_COMPUTE]));
  CUDA_TRY(x, cudaStreamSynchronize(n->st[FP_STREAM_COMPUTE]));
  x->dev = n->arena;
  x->host = n->host;
  x->stats.arena_bytes = dev + host;
  return FP_OK;
}

static fp_status nccl_prepare(fp_exec *x) {
  char msg[512];
  fpn_boot boot;
  if (fpn_boot_resolve(&x->cfg, mpi_up(), getenv("NCCL_COMM_ID"), &boot, msg, sizeof msg) != FP_OK)
    return fpx_fail(x, FP_ERR_ARG, "%s", msg);
  nstate *n = x->bks = fpx_alloc(x, 1, sizeof *n);
  if (!n) return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
  n->boot = boot;
  n->mode = x->cfg.cuda_mode;
  x->stats.cuda_mode = n->mode;
  FPX_CHECK(check_ops(x));
  FPX_CHECK(fpn_plan_build(x, &n->P));
  FPX_CHECK(prepare_device(x, n));
  FPX_CHECK(prepare_records(x, n));
  FPX_CHECK(prepare_streams(x, n));
  FPX_CHECK(prepare_events(x, n));
  return prepare_arenas(x, n);
}

/* ---- the watchdog ------------------------------------------------------------------------------ */
/* every communicator aborted (ncclCommAbort: kernels waiting for peers end);
 * the executor is broken from here on (its caller marks it) */
static void abort_all(nstate *n) {
  for (int32_t q = 0; n->comms && q < n->P.npairs; q++)
    if (n->comms[q]) {
      ncclCommAbort(n->comms[q]);
      n->comms[q] = NULL;
      n->reg[q] = NULL; /* gone with the communicator */
    }
  if (n->world) ncclCommAbort(n->world);
  n->world = NULL;
  n->aborted = true;
}

/* an asynchronous error on a communicator: everything aborted, reported */
static fp_status async_errors(fp_exec *x) {
  nstate *n = ns(x);
  for (int32_t q = -1; q < n->P.npairs; q++) {
    ncclComm_t c = q < 0 ? n->world : n->comms ? n->comms[q] : NULL;
    ncclResult_t a = ncclSuccess;
    if (!c || ncclCommGetAsyncError(c, &a) != ncclSuccess || a == ncclSuccess || a == ncclInProgress) continue;
    const char *last = ncclGetLastError(c);
    fpx_fail(x, FP_ERR_BACKEND, "NCCL: communicator '%s' reports an asynchronous error: %s%s%s; every communicator "
             "aborted", q < 0 ? "flexplan:world" : n->comm_name[q], ncclGetErrorString(a), last && *last ? ": " : "",
             last ? last : "");
    abort_all(n);
    return FP_ERR_BACKEND;
  }
  return FP_OK;
}

/* communication ops issued and not completed (their done events) */
static int32_t pending_ops(fp_exec *x) {
  nstate *n = ns(x);
  int32_t k = 0;
  for (int32_t j = 0; n->done && j < x->nxops; j++)
    if (n->done_made[j] && cudaEventQuery(n->done[j]) == cudaErrorNotReady) k++;
  return k;
}

/* the timeout: name per stream the first op not completed, abort, fail */
static fp_status watchdog(fp_exec *x, const char *what, double waited_s, const char *own) {
  nstate *n = ns(x);
  char msg[1024];
  int k = snprintf(msg, sizeof msg,
                   "watchdog: %s: no communication of the plan completed for %.1f s (timeout %g s) in step %" PRId64,
                   what, waited_s, x->timeout_s, x->stats.steps);
  bool named[FP_NSTREAMS] = {false};
  for (int32_t j = 0; n->done && j < x->nxops && k < (int)sizeof msg; j++) {
    const fp_xop *o = &x->xops[j];
    if (!n->done_made[j] || named[o->stream] || cudaEventQuery(n->done[j]) != cudaErrorNotReady) continue;
    named[o->stream] = true;
    k += snprintf(msg + k, sizeof msg - (size_t)k, "; waiting on stream %s: op %" PRId32 " (%s on communicator '%s')",
                  fpi_stream_name(o->stream), o->index, fpi_op_name(o->code),
                  o->comm >= 0 ? x->prog->comms[o->comm].name : "?");
  }
  if (own && k < (int)sizeof msg) k += snprintf(msg + k, sizeof msg - (size_t)k, "; waiting on %s", own);
  if (k < (int)sizeof msg)
    snprintf(msg + k, sizeof msg - (size_t)k, "; a rank did not arrive or failed (NCCL does not say which); every "
             "communicator aborted");
  abort_all(n);
  return fpx_fail(x, FP_ERR_TIMEOUT, "%s", msg);
}

/* Wait until stream s has done its work, as cudaStreamSynchronize. With a
 * timeout: poll (sleeping 20 us, growing to 1 ms), read the communicators'
 * asynchronous errors, and fire the watchdog when communication is pending
 * (a done event not reached, or OWN: a collective issued on s outside the
 * plan, e.g. the agreement's all-reduce) and none completes for timeout_s.
 * WHAT names the wait in messages. */
static fp_status wait_stream(fp_exec *x, cudaStream_t s, const char *what, const char *own) {
  nstate *n = ns(x);
  if (n->aborted) return fpx_fail(x, FP_ERR_BACKEND, "%s: the watchdog aborted the communicators earlier", what);
  if (x->timeout_s <= 0) {
    cudaError_t e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? FP_OK : cuda_fail(x, what, e);
  }
  double t0 = fpx_now_us();
  int32_t pending = -1;
  long nap_ns = 20000;
  for (unsigned polls = 0;; polls++) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return FP_OK;
    if (e != cudaErrorNotReady) return cuda_fail(x, what, e);
    if (polls % 8 == 0) {
      FPX_CHECK(async_errors(x));
      int32_t now_pending = pending_ops(x) + (own != NULL);
      double now = fpx_now_us();
      if (now_pending != pending || now_pending == 0) { /* progress, or nothing of ours to wait for */
        pending = now_pending;
        t0 = now;
      } else if (now - t0 > x->timeout_s * 1e6) {
        return watchdog(x, what, (now - t0) / 1e6, own);
      }
    }
    struct timespec ts = {0, nap_ns};
    nanosleep(&ts, NULL);
    if (nap_ns < 1000000) nap_ns *= 2;
  }
}

/* a communication op's done event, recorded on s after the op (inside a
 * capture an external event-record node, so every launch records it) */
static fp_status record_done(fp_exec *x, const fp_xop *o, cudaStream_t s) {
  nstate *n = ns(x);
  int32_t j = (int32_t)(o - x->xops);
  if (!n->done || !n->done_made[j]) return FP_OK;
  cudaError_t e = cudaEventRecordWithFlags(n->done[j], s, cudaEventRecordExternal);
  return e == cudaSuccess ? FP_OK : op_fail(x, o, "cudaEventRecordWithFlags (watchdog)", cudaGetErrorString(e));
}

/* ---- agree --------------------------------------------------------------------------------------- */
/* all-reduce of n words on the world communicator, through the device */
static fp_status world_allreduce(fp_exec *x, void *words, size_t n, ncclDataType_t t, size_t size, ncclRedOp_t op) {
  nstate *m = ns(x);
  cudaStream_t s = m->st[FP_STREAM_COMPUTE];
  CUDA_TRY(x, cudaMemcpyAsync(m->scratch, words, n * size, cudaMemcpyHostToDevice, s));
  NCCL_TRY(x, ncclAllReduce(m->scratch, m->scratch, n, t, op, m->world, s), m->world);
  CUDA_TRY(x, cudaMemcpyAsync(words, m->scratch, n * size, cudaMemcpyDeviceToHost, s));
  return wait_stream(x, s, "the all-reduce on the world communicator (the executor's agreement or "
                           "fp_exec_all_reduce_f64)", "the all-reduce on communicator 'flexplan:world'");
}

/* the world communicator: the one ncclCommInitRank of an executor (the
 * others are split from it); only the NCCL_COMM_ID bootstrap lets NCCL see
 * that variable (nccl_plan.h: rank 0 would bind its address otherwise) */
static fp_status world_init(fp_exec *x, const ncclUniqueId *id) {
  nstate *n = ns(x);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  cfg.commName = "flexplan:world";
  char *env = n->boot == FPN_BOOT_ENV ? NULL : fpn_comm_id_hide();
  ncclResult_t r = ncclCommInitRankConfig(&n->world, (int)x->world, *id, (int)x->rank, &cfg);
  fpn_comm_id_restore(env);
  if (r != ncclSuccess) return nccl_fail(x, "ncclCommInitRankConfig (the world communicator)", r, NULL);
  return FP_OK;
}

/* the MPI backend's verdicts, over NCCL (no other channel exists) */
static fp_status nccl_agree_world(fp_exec *x, fp_status local) {
  uint64_t h = x->plan ? x->plan->hash : 0;
  uint64_t v[3] = {h, ~h, local != FP_OK};
  FPX_CHECK(world_allreduce(x, v, 3, ncclUint64, 8, ncclMax));
  if (v[2]) {
    int32_t first = local != FP_OK ? (int32_t)x->rank : INT32_MAX;
    FPX_CHECK(world_allreduce(x, &first, 1, ncclInt32, 4, ncclMin));
    if (local != FP_OK) return local;
    return fpx_fail(x, FP_ERR_MISMATCH,
                    "rank %" PRId32 " failed its executor setup (its message says why); no collective of the plan was "
                    "issued", first);
  }
  if (v[0] != ~v[1]) {
    uint64_t h0[1] = {x->rank == 0 ? h : 0};
    FPX_CHECK(world_allreduce(x, h0, 1, ncclUint64, 8, ncclMax)); /* rank 0's hash */
    int32_t first = h != h0[0] ? (int32_t)x->rank : INT32_MAX;
    FPX_CHECK(world_allreduce(x, &first, 1, ncclInt32, 4, ncclMin));
    uint64_t hr[1] = {x->rank == first ? h : 0};
    FPX_CHECK(world_allreduce(x, hr, 1, ncclUint64, 8, ncclMax));
    return fpx_fail(x, FP_ERR_MISMATCH,
                    "plan hash mismatch: rank 0 has fnv1a64:%016" PRIx64 ", rank %" PRId32 " has fnv1a64:%016" PRIx64
                    "; every rank must load the same plan; no collective of the plan was issued",
                    h0[0], first, hr[0]);
  }
  return FP_OK;
}

static fp_status nccl_agree(fp_exec *x, fp_status local) {
  nstate *n = ns(x);
  fpn_boot boot;
  char msg[512];
  bool up = mpi_up();
  if (n) {
    boot = n->boot;
  } else if (fpn_boot_resolve(&x->cfg, up, getenv("NCCL_COMM_ID"), &boot, msg, sizeof msg) != FP_OK) {
    /* no way to reach the other ranks from this config; if MPI is up, they
     * most likely wait there */
    if (local == FP_OK) local = fpx_fail(x, FP_ERR_ARG, "%s", msg);
    return up ? fpx_mpi_agree(x, local) : local;
  }
  if (boot == FPN_BOOT_MPI) {
    FPX_CHECK(fpx_mpi_agree(x, local)); /* every rank has the same verdict: all go on, or none */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int bad = 0, anybad = 0;
    char *env = fpn_comm_id_hide(); /* a random id, not NCCL_COMM_ID's address */
    if (x->rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) bad = 1;
    fpn_comm_id_restore(env);
    MPI_Comm boot_comm = x->cfg.bootstrap ? *(const MPI_Comm *)x->cfg.bootstrap : MPI_COMM_WORLD;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, boot_comm);
    if (anybad) return fpx_fail(x, FP_ERR_BACKEND, "NCCL: ncclGetUniqueId failed on rank 0");
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, boot_comm);
    return world_init(x, &id);
  }
  /* id, NCCL_COMM_ID, local: the world communicator is the only channel */
  if (!n || !n->device_ok) return local != FP_OK ? local : fpx_fail(x, FP_ERR_BACKEND, "no usable CUDA device");
  if (!n->scratch) { /* prepare failed before making it: still join */
    if (cudaMalloc((void **)&n->scratch, SCRATCH_BYTES) != cudaSuccess) return local;
    x->stats.allocations++;
  }
  if (!n->st[FP_STREAM_COMPUTE]) return local; /* failed before the streams: cannot join */
  ncclUniqueId id;
  if (boot == FPN_BOOT_ID) memcpy(&id, x->cfg.nccl_id.bytes, sizeof id);
  else NCCL_TRY(x, ncclGetUniqueId(&id), NULL); /* NCCL_COMM_ID: the same id on every rank */
  FPX_CHECK(world_init(x, &id));
  return nccl_agree_world(x, local);
}

/* ---- connect ---------------------------------------------------------------------------------------- */
static fp_status nccl_connect(fp_exec *x) {
  nstate *n = ns(x);
  const fpn_plan *P = &n->P;
  const fp_prog *p = x->prog;
  int32_t bad = 0;
  for (int32_t q = 0; q < P->npairs; q++) {
    const fp_ir_comm *c = &p->comms[P->pair_comm[q]];
    snprintf(n->comm_name[q], sizeof n->comm_name[q], "flexplan:%s:%s", c->name, fpi_stream_name(P->pair_stream[q]));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    cfg.commName = n->comm_name[q];
    NCCL_TRY(x, ncclCommSplit(n->world, P->color[q], P->key[q], &n->comms[q], &cfg), n->world);
    x->stats.nccl_comms++;
    int cnt = 0, r = -1;
    NCCL_TRY(x, ncclCommCount(n->comms[q], &cnt), n->comms[q]);
    NCCL_TRY(x, ncclCommUserRank(n->comms[q], &r), n->comms[q]);
    if (cnt != c->size || r != P->key[q]) {
      bad = 1;
      fpx_fail(x, FP_ERR_PLAN, "communicator '%s' (size %" PRId64 ", stride %" PRId64 ") does not tile %" PRId64
               " ranks: rank %" PRId64 " is rank %d of %d", c->name, c->size, c->stride, x->world, x->rank, r, cnt);
    }
  }
  /* a communicator that does not tile the world: agree before any op runs */
  int32_t anybad = bad;
  FPX_CHECK(world_allreduce(x, &anybad, 1, ncclInt32, 4, ncclMax));
  if (anybad) return bad ? FP_ERR_PLAN : fpx_fail(x, FP_ERR_PLAN, "a communicator of the plan does not tile the world");
  /* the arena, registered once with each communicator */
  for (int32_t q = 0; q < P->npairs; q++)
    NCCL_TRY(x, ncclCommRegister(n->comms[q], n->arena, n->arena_alloc, &n->reg[q]), n->comms[q]);
  for (int32_t j = 0; j < x->nxops; j++) {
    const fp_xop *o = &x->xops[j];
    if (fpi_op_class(o->code) == FP_OPC_COMM) n->op_comm[j] = n->comms[P->pair[o->comm * FP_NSTREAMS + o->stream]];
  }
  return FP_OK;
}

/* ---- issuing ops --------------------------------------------------------------------------------------- */
/* split_copy / chunk_cat: per region one pitched copy (same dtype) or one
 * cast per row (converting chunk_cat): O(regions x rows) launches, where a
 * fused kernel would take one (not written yet: docs/executor.md) */
static cudaError_t issue_regions(const fp_xop *o, cudaStream_t s) {
  bool split = o->code == FP_OP_SPLIT_COPY;
  int64_t ed = fpi_dtype_size(o->dtype), es = fpi_dtype_size(o->sdtype), col = 0;
  cudaError_t e = cudaSuccess;
  for (int64_t j = 0; j < o->ntab && e == cudaSuccess; j++) {
    int64_t c = o->tab_cnt[j];
    char *tside = (split ? o->dst : o->src) + o->tab_off[j] * (split ? ed : es);
    if (c == 0) continue;
    if (o->dtype == o->sdtype) {
      if (split) e = fpk_cuda_copy2d(tside, c * ed, o->src + col * es, o->spitch, c * ed, o->rows, s);
      else e = fpk_cuda_copy2d(o->dst + col * ed, o->dpitch, tside, c * es, c * es, o->rows, s);
    } else {
      for (int64_t r = 0; r < o->rows && e == cudaSuccess; r++)
        e = fpk_cuda_cast(o->dst + r * o->dpitch + col * ed, o->dtype, tside + r * c * es, o->sdtype, c, s);
    }
    col += c;
  }
  return e;
}

static fp_status issue_local(fp_exec *x, const fp_xop *o, cudaStream_t s) {
  int64_t sz = fpi_dtype_size(o->dtype);
  cudaError_t e = cudaSuccess;
  switch (o->code) {
    case FP_OP_CAST: e = fpk_cuda_cast(o->dst, o->dtype, o->src, o->sdtype, o->n, s); break;
    case FP_OP_COPY: e = fpk_cuda_copy2d(o->dst, o->dpitch, o->src, o->spitch, o->n * sz, o->rows, s); break;
    case FP_OP_SPLIT_COPY:
    case FP_OP_CHUNK_CAT: e = issue_regions(o, s); break;
    case FP_OP_ADD: e = fpk_cuda_add(o->dst, o->dtype, o->src, o->sdtype, o->n, s); break;
    case FP_OP_SCALE: e = fpk_cuda_scale(o->dst, o->dtype, o->alpha, o->n, s); break;
    case FP_OP_MEMSET: e = fpk_cuda_memset0(o->dst, o->n * sz, s); break;
    case FP_OP_QUANTIZE_MXFP8:
      e = fpk_cuda_quantize_mxfp8((uint8_t *)o->dst, (uint8_t *)o->aux, o->src, o->sdtype, o->n, s);
      break;
    case FP_OP_DEQUANTIZE_MXFP8:
      e = fpk_cuda_dequantize_mxfp8(o->dst, o->dtype, (const uint8_t *)o->src, (const uint8_t *)o->aux, o->n, s);
      break;
    case FP_OP_H2D:
    case FP_OP_D2H: /* the host arena is pinned: an asynchronous copy, capturable */
      e = o->n ? cudaMemcpyAsync(o->dst, o->src, (size_t)o->n, cudaMemcpyDefault, s) : cudaSuccess;
      break;
    default: FP_ASSERT(!"not a local op");
  }
  return e == cudaSuccess ? FP_OK : op_fail(x, o, "kernel launch", cudaGetErrorString(e));
}

static fp_status issue_comm(fp_exec *x, const fp_xop *o, ncclComm_t c, cudaStream_t s) {
  size_t n = (size_t)o->n;
  int g = (int)o->g, G = (int)o->G, root = o->root;
  int64_t sz = fpi_dtype_size(o->dtype);
  ncclDataType_t t = nccl_type(o->dtype);
  ncclRedOp_t red = o->red == FP_RED_AVG ? ncclAvg : ncclSum; /* ncclAvg: NCCL >= 2.10 */
  ncclResult_t r = ncclSuccess;
  switch (o->code) {
    case FP_OP_ALL_GATHER: r = ncclAllGather(o->src, o->dst, n, t, c, s); break;
    case FP_OP_ALL_GATHER_V: /* one broadcast per member, grouped: NCCL has no all-gather-v */
      r = ncclGroupStart();
      for (int j = 0; j < G && r == ncclSuccess; j++) {
        if (!o->tab_cnt[j]) continue;
        char *at = o->dst + o->tab_off[j] * sz; /* in place on the root when src == dst + off[g] */
        r = ncclBroadcast(j == g ? o->src : at, at, (size_t)o->tab_cnt[j], t, j, c, s);
      }
      if (r == ncclSuccess) r = ncclGroupEnd();
      else ncclGroupEnd();
      break;
    case FP_OP_REDUCE_SCATTER: r = ncclReduceScatter(o->src, o->dst, n, t, red, c, s); break;
    case FP_OP_REDUCE_SCATTER_V: /* one reduce per member, grouped */
      r = ncclGroupStart();
      for (int j = 0; j < G && r == ncclSuccess; j++) {
        if (!o->tab_cnt[j]) continue;
        char *in = o->src + o->tab_off[j] * sz; /* off the root, recvbuff is not used */
        r = ncclReduce(in, j == g ? o->dst : in, (size_t)o->tab_cnt[j], t, red, j, c, s);
      }
      if (r == ncclSuccess) r = ncclGroupEnd();
      else ncclGroupEnd();
      break;
    case FP_OP_ALL_REDUCE: r = ncclAllReduce(o->src, o->dst, n, t, red, c, s); break;
    case FP_OP_BROADCAST: r = ncclBroadcast(o->src, o->dst, n, t, root, c, s); break;
    case FP_OP_REDUCE: r = ncclReduce(o->src, o->dst, n, t, red, root, c, s); break;
    case FP_OP_SEND: r = ncclSend(o->src, n, t, (g + root) % G, c, s); break;
    case FP_OP_RECV: r = ncclRecv(o->dst, n, t, ((g - root) % G + G) % G, c, s); break;
    default: FP_ASSERT(!"not a communication op");
  }
  if (r == ncclSuccess) return FP_OK;
  const char *last = ncclGetLastError(c);
  char why[256];
  snprintf(why, sizeof why, "%s%s%s", ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
  return op_fail(x, o, "NCCL call", why);
}

/* the ops of a run, on stream s (a real stream, or a capture stream);
 * grouped NCCL calls inside one ncclGroupStart/End */
static fp_status issue_run(fp_exec *x, const fpn_item *it, cudaStream_t s) {
  nstate *n = ns(x);
  fp_xop *const *ops = fpn_run_ops(x, it);
  fp_status st = FP_OK;
  int32_t open_group = -1, group_from = 0; /* the open group's first op in the run */
  for (int32_t q = 0; q < it->nops && st == FP_OK; q++) {
    const fp_xop *o = ops[q];
    int32_t j = (int32_t)(o - x->xops);
    bool comm = fpi_op_class(o->code) == FP_OPC_COMM;
    int32_t grp = comm ? o->group : -1;
    if (grp != open_group) {
      if (open_group >= 0 && ncclGroupEnd() != ncclSuccess) return op_fail(x, o, "ncclGroupEnd", "group failed");
      /* the watchdog's done events of a group: after its end (its calls are enqueued there) */
      for (int32_t g = group_from; open_group >= 0 && g < q && st == FP_OK; g++) st = record_done(x, ops[g], s);
      open_group = -1;
      if (grp >= 0) {
        if (ncclGroupStart() != ncclSuccess) return op_fail(x, o, "ncclGroupStart", "failed");
        open_group = grp;
        group_from = q;
      }
    }
    if (st != FP_OK) break;
    RANGE_PUSH(n->P.text + n->P.label[j]);
    st = comm ? issue_comm(x, o, n->op_comm[j], s) : issue_local(x, o, s);
    RANGE_POP();
    if (st == FP_OK && comm && grp < 0) st = record_done(x, o, s);
  }
  if (open_group >= 0) {
    ncclResult_t r = ncclGroupEnd();
    if (st == FP_OK && r != ncclSuccess)
      st = fpx_fail(x, FP_ERR_BACKEND, "NCCL: ncclGroupEnd failed: %s", ncclGetErrorString(r));
    for (int32_t g = group_from; g < it->nops && st == FP_OK; g++) st = record_done(x, ops[g], s);
  }
  return st;
}

/* a record or a wait; cap: the capture the compute stream is in (0: none) */
static fp_status issue_sync(fp_exec *x, const fp_xop *o, unsigned long long cap) {
  nstate *n = ns(x);
  cudaStream_t s = n->st[o->stream];
  int32_t j = (int32_t)(o - x->xops);
  cudaError_t e = cudaSuccess;
  if (o->code == FP_OP_RECORD) {
    int32_t k = n->P.event_slot[j];
    e = cudaEventRecord(n->ev[k], s);
    n->rec_cap[k] = cap;
  } else if (o->rec) {
    int32_t k = n->P.event_slot[o->rec - x->xops];
    unsigned long long rc = n->rec_cap[k];
    if (rc == cap) e = cudaStreamWaitEvent(s, n->ev[k], 0);                      /* same capture, or both eager */
    else if (rc == 0) e = cudaStreamWaitEvent(s, n->ev[k], cudaEventWaitExternal); /* an eager record, from a capture */
    /* else: recorded in another capture, whose graph is ordered before this
     * point by its launch on the compute stream and the fork that follows it */
  }
  return e == cudaSuccess ? FP_OK : op_fail(x, o, o->code == FP_OP_RECORD ? "cudaEventRecord" : "cudaStreamWaitEvent",
                                            cudaGetErrorString(e));
}

/* a stream's capture status and id (the runtime API grew an argument in
 * CUDA 12.3/13: edge data) */
static cudaError_t capture_info(cudaStream_t s, enum cudaStreamCaptureStatus *cs, unsigned long long *id) {
#if CUDART_VERSION >= 13000
  return cudaStreamGetCaptureInfo(s, cs, id, NULL, NULL, NULL, NULL);
#else
  return cudaStreamGetCaptureInfo(s, cs, id, NULL, NULL, NULL);
#endif
}

/* capture-safe: make side stream s part of the compute stream's capture,
 * or (cap 0) order it after everything on the compute stream */
static fp_status fork_side(fp_exec *x, int s, unsigned long long cap) {
  nstate *n = ns(x);
  if (cap) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    CUDA_TRY(x, capture_info(n->st[s], &cs, &id));
    if (cs == cudaStreamCaptureStatusActive && id == cap) return FP_OK; /* already in */
  }
  CUDA_TRY(x, cudaEventRecord(n->fork_ev, n->st[FP_STREAM_COMPUTE]));
  CUDA_TRY(x, cudaStreamWaitEvent(n->st[s], n->fork_ev, 0));
  if (cap && cap == n->wcap) n->wcap_sides |= (uint8_t)(1u << s);
  return FP_OK;
}

/* capture-safe, end of step: the side streams join the compute stream */
static fp_status join_sides(fp_exec *x, unsigned long long cap) {
  nstate *n = ns(x);
  for (int s = 0; s < FP_NSTREAMS; s++) {
    if (s == FP_STREAM_COMPUTE) continue;
    if (cap) { /* only the side streams in this capture (the others have nothing in it) */
      enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
      unsigned long long id = 0;
      CUDA_TRY(x, capture_info(n->st[s], &cs, &id));
      if (cs != cudaStreamCaptureStatusActive || id != cap) continue;
    }
    CUDA_TRY(x, cudaEventRecord(n->join_ev[s], n->st[s]));
    CUDA_TRY(x, cudaStreamWaitEvent(n->st[FP_STREAM_COMPUTE], n->join_ev[s], 0));
  }
  return FP_OK;
}

/* ---- graph mode: one graph per hook ------------------------------------------------------------------------ */
/* a record or wait of segment k inside k's capture, on capture stream cs:
 * a record waited on inside the segment is an edge (its internal event), one
 * waited on elsewhere an external record node; a wait on a record of the
 * segment is that edge, on any other record an external wait node (the
 * record made before the launch) */
static cudaError_t capture_sync(fp_exec *x, const fp_xop *o, cudaStream_t cs, int32_t k) {
  nstate *n = ns(x);
  const fpn_plan *P = &n->P;
  cudaError_t e = cudaSuccess;
  if (o->code == FP_OP_RECORD) {
    int32_t slot = P->event_slot[o - x->xops];
    if (P->rec_use[slot] & FPN_REC_LOCAL) e = cudaEventRecord(n->iev[slot], cs);
    if (e == cudaSuccess && (P->rec_use[slot] & FPN_REC_AWAY))
      e = cudaEventRecordWithFlags(n->ev[slot], cs, cudaEventRecordExternal);
  } else if (o->rec) {
    int32_t slot = P->event_slot[o->rec - x->xops];
    if (!o->rec_prev && x->prog->ops[o->rec->index].seg == x->prog->ops[o->index].seg)
      e = cudaStreamWaitEvent(cs, n->iev[slot], 0);
    else
      e = cudaStreamWaitEvent(cs, n->ev[slot], cudaEventWaitExternal);
  }
  (void)k;
  return e;
}

static int single_stream(uint8_t mask) {
  for (int s = 0; s < FP_NSTREAMS; s++)
    if (mask == (1u << s)) return s;
  return -1;
}

/* Segment k's items captured as one graph. On one stream: captured on that
 * stream's capture stream, launched on the stream itself (the same as
 * issuing the items there). On several: captured from an origin stream that
 * forks every stream of the segment (each waits first for the launch's head
 * event, recorded on the real stream just before the launch) and joins them
 * back after each records its tail event; launched on a launch stream, the
 * real streams then wait for their tail events. */
static fp_status capture_seg(fp_exec *x, int32_t k) {
  nstate *n = ns(x);
  const fpn_plan *P = &n->P;
  uint8_t mask = P->seg_streams[k];
  int one = single_stream(mask);
  cudaStream_t origin = one >= 0 ? n->cap[one] : n->capo;
  CUDA_TRY(x, cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal));
  fp_status st = FP_OK;
  cudaError_t e = cudaSuccess;
  const char *what = "";
  if (one < 0) {
    e = cudaEventRecord(n->fork_in, origin);
    what = "the fork";
    for (int s = 0; s < FP_NSTREAMS && e == cudaSuccess; s++)
      if (mask & (1u << s)) {
        e = cudaStreamWaitEvent(n->cap[s], n->fork_in, 0);
        if (e == cudaSuccess) e = cudaStreamWaitEvent(n->cap[s], n->head_ev[s], cudaEventWaitExternal);
      }
  }
  for (int32_t t = P->seg_first[k]; t < P->seg_first[k + 1] && e == cudaSuccess && st == FP_OK; t++) {
    const fpn_item *it = &P->items[t];
    if (it->kind == FPN_SYNC) {
      e = capture_sync(x, &x->xops[it->xop], n->cap[it->stream], k);
      what = "a record or wait";
    } else {
      st = issue_run(x, it, n->cap[it->stream]);
    }
  }
  if (one < 0)
    for (int s = 0; s < FP_NSTREAMS && e == cudaSuccess && st == FP_OK; s++)
      if (mask & (1u << s)) {
        what = "the join";
        e = cudaEventRecordWithFlags(n->tail_ev[s], n->cap[s], cudaEventRecordExternal);
        if (e == cudaSuccess) e = cudaEventRecord(n->join_in[s], n->cap[s]);
        if (e == cudaSuccess) e = cudaStreamWaitEvent(origin, n->join_in[s], 0);
      }
  cudaGraph_t g = NULL;
  cudaError_t ee = cudaStreamEndCapture(origin, &g);
  if (st != FP_OK || e != cudaSuccess || ee != cudaSuccess) { /* NCCL may be unusable now */
    if (g) cudaGraphDestroy(g);
    if (st != FP_OK) return st;
    char l[96];
    return fpx_fail(x, FP_ERR_BACKEND, "CUDA: capturing the graph of segment %" PRId32 " %s failed at %s: %s",
                    k, fpx_seg_label(x, k, l, sizeof l), e != cudaSuccess ? what : "cudaStreamEndCapture",
                    cudaGetErrorString(e != cudaSuccess ? e : ee));
  }
  n->graphs[k] = g;
  size_t nodes = 0;
  CUDA_TRY(x, cudaGraphGetNodes(g, NULL, &nodes));
  CUDA_TRY(x, cudaGraphInstantiateWithFlags(&n->execs[k], g, cudaGraphInstantiateFlagUseNodePriority));
  CUDA_TRY(x, cudaGraphUpload(n->execs[k], one >= 0 ? n->st[one] : n->lst[k % FPN_LAUNCH_STREAMS]));
  x->stats.graphs++;
  x->stats.graph_nodes += (int64_t)nodes;
  return FP_OK;
}

static fp_status capture_all(fp_exec *x) {
  nstate *n = ns(x);
  /* the warm-up step has finished: NCCL has connected every communicator */
  for (int s = 0; s < FP_NSTREAMS; s++)
    FPX_CHECK(wait_stream(x, n->st[s], "the warm-up step, before the graphs are captured", NULL));
  for (int32_t k = 0; k < x->prog->nsegs; k++)
    if (n->P.seg_has_run[k]) FPX_CHECK(capture_seg(x, k));
  n->captured = true;
  return FP_OK;
}

/* segment seg's graph: one launch, with the head and tail events of a
 * several-stream graph around it */
static fp_status launch_seg(fp_exec *x, int32_t seg) {
  nstate *n = ns(x);
  uint8_t mask = n->P.seg_streams[seg];
  int one = single_stream(mask);
  if (one < 0)
    for (int s = 0; s < FP_NSTREAMS; s++)
      if (mask & (1u << s)) CUDA_TRY(x, cudaEventRecord(n->head_ev[s], n->st[s]));
  cudaError_t e = cudaGraphLaunch(n->execs[seg], one >= 0 ? n->st[one] : n->lst[seg % FPN_LAUNCH_STREAMS]);
  if (e != cudaSuccess) return cuda_fail(x, "cudaGraphLaunch", e);
  x->stats.graph_launches++;
  if (one < 0)
    for (int s = 0; s < FP_NSTREAMS; s++)
      if (mask & (1u << s)) CUDA_TRY(x, cudaStreamWaitEvent(n->st[s], n->tail_ev[s], 0));
  return FP_OK;
}

/* ---- one graph per step: fp_exec_capture_begin / _end ------------------------------------------------------ */
/* the side streams of mask as "ag, rs" */
static const char *side_names(uint8_t mask, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = 0;
  for (int s = 0; s < FP_NSTREAMS; s++)
    if (mask & (1u << s))
      k += (size_t)snprintf(buf + k, k < len ? len - k : 0, "%s%s", k ? ", " : "", fpi_stream_name(s));
  if (!k) snprintf(buf, len, "none");
  return buf;
}

/* While fp_exec_capture_begin's capture is open, every call checks it is
 * still the compute stream's: a capture that was invalidated, or ended
 * without fp_exec_capture_end, leaves the executor's place in the step to a
 * graph that will never run - the executor fails (FP_ERR_BACKEND, broken)
 * with what happened. WHAT names the call. */
static fp_status wcap_check(fp_exec *x, const char *what) {
  nstate *n = ns(x);
  if (!n->wcap) return FP_OK;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  CUDA_TRY(x, capture_info(n->st[FP_STREAM_COMPUTE], &cs, &id));
  if (cs == cudaStreamCaptureStatusActive && id == n->wcap) return FP_OK;
  char sides[64], here[96];
  side_names(n->wcap_sides, sides, sizeof sides);
  if (x->cursor) fpx_seg_label(x, x->cursor, here, sizeof here);
  unsigned long long was = n->wcap;
  n->wcap = 0;
  x->broken = true;
  if (cs == cudaStreamCaptureStatusInvalidated && id == was)
    return fpx_fail(x, FP_ERR_BACKEND,
                    "%s: the capture begun by fp_exec_capture_begin was invalidated by an operation CUDA refuses "
                    "inside a capture (a host synchronization such as cudaStreamSynchronize or tensor.item(), an "
                    "allocation, a synchronous copy) made after it began; nothing of it can be replayed, and the "
                    "executor's place in the step belongs to it: destroy the executor", what);
  return fpx_fail(x, FP_ERR_BACKEND,
                  "%s: the capture begun by fp_exec_capture_begin ended without fp_exec_capture_end%s%s: the plan's "
                  "side streams forked into it (%s) were not joined back into the compute stream, so CUDA refuses "
                  "to end it (cudaErrorStreamCaptureUnjoined), and the executor's place in the step belongs to a "
                  "graph that does not exist: destroy the executor", what, x->cursor ? " inside a step, before " : "",
                  x->cursor ? here : "", sides);
}

static fp_status nccl_capture(fp_exec *x, int op, int64_t *live) {
  nstate *n = ns(x);
  if (op == FPX_CAPTURE_LIVE) {
    *live = n->live;
    return FP_OK;
  }
  if (op == FPX_CAPTURE_RELEASE) {
    if (!n->live)
      return fpx_fail(x, FP_ERR_ORDER, "fp_exec_capture_release: no graph captured with fp_exec_capture_begin/end "
                      "is live");
    n->live--;
    return FP_OK;
  }
  const char *fn = op == FPX_CAPTURE_BEGIN ? "fp_exec_capture_begin" : "fp_exec_capture_end";
  FPX_CHECK(wcap_check(x, fn));
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  CUDA_TRY(x, capture_info(n->st[FP_STREAM_COMPUTE], &cs, &id));
  char want[96];
  if (op == FPX_CAPTURE_BEGIN) {
    if (n->wcap)
      return fpx_fail(x, FP_ERR_ORDER, "fp_exec_capture_begin: the capture it began is still open (call "
                      "fp_exec_capture_end first)");
    if (n->mode != FP_CUDA_CAPTURE_SAFE)
      return fpx_fail(x, FP_ERR_ARG, "fp_exec_capture_begin: cuda_mode is %s; a step captured by the trainer needs "
                      "FP_CUDA_CAPTURE_SAFE (%s)", n->mode == FP_CUDA_GRAPH ? "FP_CUDA_GRAPH" : "FP_CUDA_EAGER",
                      n->mode == FP_CUDA_GRAPH ? "graph mode captures per-hook graphs of its own and synchronizes "
                      "the device once to do it" : "eager hooks refuse to run inside a capture");
    if (cs == cudaStreamCaptureStatusInvalidated)
      return fpx_fail(x, FP_ERR_ORDER, "fp_exec_capture_begin: the compute stream's capture is already invalidated");
    if (cs != cudaStreamCaptureStatusActive)
      return fpx_fail(x, FP_ERR_ORDER, "fp_exec_capture_begin: the compute stream is not being captured: begin the "
                      "capture on fp_exec_cuda_stream(x) first (cudaStreamBeginCapture, or torch.cuda.graph on "
                      "the stream the executor was given)");
    if (x->cursor)
      return fpx_fail(x, FP_ERR_ORDER, "fp_exec_capture_begin inside a step (the plan expects %s next): a captured "
                      "step starts at step_begin", fpx_seg_label(x, x->cursor, want, sizeof want));
    if (x->stats.steps < 1)
      return fpx_fail(x, FP_ERR_ORDER, "fp_exec_capture_begin before any uncaptured step: run one step outside the "
                      "capture first (NCCL sets up its connections at a communicator's first collectives, which a "
                      "capture cannot hold)");
    n->wcap = id;
    n->wcap_sides = 0;
    n->wcap_steps = x->stats.steps;
    return FP_OK;
  }
  if (!n->wcap) return fpx_fail(x, FP_ERR_ORDER, "fp_exec_capture_end without fp_exec_capture_begin");
  if (x->cursor)
    return fpx_fail(x, FP_ERR_ORDER, "fp_exec_capture_end inside a step (the plan expects %s next): capture whole "
                    "steps, step_begin .. post_optimizer (the capture goes on)",
                    fpx_seg_label(x, x->cursor, want, sizeof want));
  if (x->stats.steps == n->wcap_steps)
    return fpx_fail(x, FP_ERR_ORDER, "fp_exec_capture_end: no step was captured since fp_exec_capture_begin (the "
                    "capture goes on)");
  FPX_CHECK(join_sides(x, id));
  n->wcap = 0;
  n->live++;
  return FP_OK;
}

/* ---- hooks ------------------------------------------------------------------------------------------------ */
static fp_status run_items(fp_exec *x, int32_t seg, unsigned long long cap) {
  nstate *n = ns(x);
  const fpn_plan *P = &n->P;
  if (n->captured && n->execs[seg]) { /* graph mode: the whole hook as one launch */
    RANGE_PUSH(n->seg_label[seg]);
    fp_status st = launch_seg(x, seg);
    RANGE_POP();
    return st;
  }
  for (int32_t t = P->seg_first[seg]; t < P->seg_first[seg + 1]; t++) {
    const fpn_item *it = &P->items[t];
    if (it->kind == FPN_SYNC) {
      const fp_xop *o = &x->xops[it->xop];
      RANGE_PUSH(P->text + P->label[it->xop]);
      fp_status st = issue_sync(x, o, cap);
      RANGE_POP();
      FPX_CHECK(st);
    } else {
      FPX_CHECK(issue_run(x, it, n->st[it->stream]));
    }
  }
  return FP_OK;
}

static fp_status nccl_run_segment(fp_exec *x, int32_t seg) {
  nstate *n = ns(x);
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  unsigned long long cap = 0;
  char what[96 + 8];
  if (n->wcap) {
    char l[96];
    snprintf(what, sizeof what, "hook %s", fpx_seg_label(x, seg, l, sizeof l));
    FPX_CHECK(wcap_check(x, what));
  }
  CUDA_TRY(x, capture_info(n->st[FP_STREAM_COMPUTE], &cs, &cap));
  if (cs == cudaStreamCaptureStatusInvalidated)
    return fpx_fail(x, FP_ERR_BACKEND, "the compute stream's capture was invalidated (a capture error earlier)");
  if (cs != cudaStreamCaptureStatusActive) cap = 0;
  if (cap && n->mode != FP_CUDA_CAPTURE_SAFE) /* nothing issued: the executor stays usable */
    return fpx_fail(x, FP_ERR_ORDER, "hook called while the compute stream is being captured: hooks inside the "
                    "trainer's capture need cuda_mode FP_CUDA_CAPTURE_SAFE");
  RANGE_PUSH(n->seg_label[seg]);
  fp_status st = FP_OK;
  if (n->mode == FP_CUDA_GRAPH && !n->captured && x->stats.steps >= 1 && seg == 0) st = capture_all(x);
  if (st == FP_OK && n->mode == FP_CUDA_CAPTURE_SAFE) {
    /* out of a capture: the side streams come after what it recorded */
    if (!cap && n->last_cap)
      for (int s = 0; s < FP_NSTREAMS && st == FP_OK; s++)
        if (s != FP_STREAM_COMPUTE) st = fork_side(x, s, 0);
    if (cap)
      for (int s = 0; s < FP_NSTREAMS && st == FP_OK; s++)
        if (n->P.seg_side[seg] & (1u << s)) st = fork_side(x, s, cap);
    n->last_cap = cap;
  }
  if (st == FP_OK) st = run_items(x, seg, cap);
  if (st == FP_OK && n->mode == FP_CUDA_CAPTURE_SAFE && seg == x->prog->nsegs - 1) st = join_sides(x, cap);
  RANGE_POP();
  FPX_CHECK(st);
  x->stats.local_ops += n->P.sums[seg].local;
  x->stats.collectives += n->P.sums[seg].coll;
  x->stats.bytes_moved += n->P.sums[seg].bytes;
  return FP_OK;
}

static bool capturing(const nstate *n) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  return n->st[FP_STREAM_COMPUTE] && cudaStreamIsCapturing(n->st[FP_STREAM_COMPUTE], &cs) == cudaSuccess &&
         cs != cudaStreamCaptureStatusNone;
}

/* the trainer's compute stream changes: the new stream after everything
 * issued on the old one; a stream the executor made stays until destroy */
static fp_status nccl_set_stream(fp_exec *x, void *stream) {
  nstate *n = ns(x);
  cudaStream_t s = (cudaStream_t)stream, old = n->st[FP_STREAM_COMPUTE];
  if (s == old) return FP_OK;
  FPX_CHECK(wcap_check(x, "fp_exec_set_cuda_stream"));
  if (capturing(n))
    return fpx_fail(x, FP_ERR_ORDER, "fp_exec_set_cuda_stream while the compute stream is being captured");
  /* the new stream may already be capturing (torch.cuda.graph switches to its
   * capture stream, then begins the capture, before the step's first hook):
   * the old stream's work is then outside the capture, an external wait */
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  CUDA_TRY(x, capture_info(s, &cs, &id));
  CUDA_TRY(x, cudaEventRecord(n->fork_ev, old));
  CUDA_TRY(x, cudaStreamWaitEvent(s, n->fork_ev, cs == cudaStreamCaptureStatusActive ? cudaEventWaitExternal : 0));
  if (n->own[FP_STREAM_COMPUTE]) {
    n->made_compute = old;
    n->own[FP_STREAM_COMPUTE] = false;
  }
  n->st[FP_STREAM_COMPUTE] = s;
  x->cuda_stream = s;
  return FP_OK;
}

static fp_status nccl_sync(fp_exec *x) {
  nstate *n = ns(x);
  FPX_CHECK(wcap_check(x, "fp_exec_sync"));
  if (capturing(n))
    return fpx_fail(x, FP_ERR_ORDER, "fp_exec_sync (or a refit) while the compute stream is being captured: the "
                    "host cannot wait for the device inside a capture");
  for (int s = 0; s < FP_NSTREAMS; s++)
    if (n->st[s]) FPX_CHECK(wait_stream(x, n->st[s], "fp_exec_sync", NULL));
  for (int32_t q = 0; q < n->P.npairs; q++) {
    ncclResult_t a = ncclSuccess;
    if (n->comms[q] && ncclCommGetAsyncError(n->comms[q], &a) == ncclSuccess && a != ncclSuccess)
      return nccl_fail(x, "a communication (asynchronous error)", a, n->comms[q]);
  }
  return FP_OK;
}

static fp_status nccl_write(fp_exec *x, char *dst, int64_t dpitch, const char *src, int64_t spitch, int64_t width,
                            int64_t rows) {
  nstate *n = ns(x);
  cudaStream_t s = n->st[FP_STREAM_COMPUTE];
  /* cudaMemcpyDefault: dst is the device arena, or the pinned host arena
   * where a bucket is offloaded (unified addressing tells them apart) */
  if (rows == 1) CUDA_TRY(x, cudaMemcpyAsync(dst, src, (size_t)width, cudaMemcpyDefault, s));
  else
    CUDA_TRY(x, cudaMemcpy2DAsync(dst, (size_t)dpitch, src, (size_t)spitch, (size_t)width, (size_t)rows,
                                  cudaMemcpyDefault, s));
  /* the source is pageable; the next step reads the bytes */
  return wait_stream(x, s, "a refit's write (after the work queued on the compute stream)", NULL);
}

/* fp_exec_all_reduce_f64: through the scratch words, on the world
 * communicator and the compute stream (after the trainer's queued work);
 * the host waits for the result */
static fp_status nccl_all_reduce_f64(fp_exec *x, double *v, int cnt) {
  nstate *n = ns(x);
  FPX_CHECK(wcap_check(x, "fp_exec_all_reduce_f64"));
  if (capturing(n))
    return fpx_fail(x, FP_ERR_ORDER, "fp_exec_all_reduce_f64 while the compute stream is being captured: the host "
                    "cannot wait for the result inside a capture");
  FPX_CHECK(world_allreduce(x, v, (size_t)cnt, ncclFloat64, sizeof *v, ncclSum));
  x->stats.collectives++;
  x->stats.bytes_moved += (int64_t)cnt * (int64_t)sizeof *v;
  return FP_OK;
}

/* fp_exec_all_reduce_f64_dev: the caller's device doubles, in place, on the
 * world communicator, enqueued on the compute stream (inside a capture:
 * torch's capture stream, so the graph holds it); nothing waited for */
static fp_status nccl_all_reduce_dev(fp_exec *x, double *v, int cnt, int max) {
  nstate *n = ns(x);
  FPX_CHECK(wcap_check(x, "fp_exec_all_reduce_f64_dev"));
  NCCL_TRY(x, ncclAllReduce(v, v, (size_t)cnt, ncclFloat64, max ? ncclMax : ncclSum, n->world, n->st[FP_STREAM_COMPUTE]),
           n->world);
  x->stats.collectives++;
  x->stats.bytes_moved += (int64_t)cnt * (int64_t)sizeof *v;
  return FP_OK;
}

/* ---- destroy ------------------------------------------------------------------------------------------------- */
/* nccl_destroy in its steps: the graphs and their events
 * (destroy_graphs), the communicators (destroy_comms), the memory, events
 * and streams (destroy_cuda), then the records */
static void destroy_graphs(fp_exec *x, nstate *n) {
  for (int32_t r = 0; r < x->prog->nsegs; r++) {
    if (n->execs && n->execs[r]) cudaGraphExecDestroy(n->execs[r]);
    if (n->graphs && n->graphs[r]) cudaGraphDestroy(n->graphs[r]);
  }
  if (n->graph_events_made) {
    for (int32_t k = 0; n->iev && k < n->P.nevents; k++)
      if (n->iev[k]) cudaEventDestroy(n->iev[k]);
    for (int s = 0; s < FP_NSTREAMS; s++) {
      if (n->head_ev[s]) cudaEventDestroy(n->head_ev[s]);
      if (n->tail_ev[s]) cudaEventDestroy(n->tail_ev[s]);
      if (n->join_in[s]) cudaEventDestroy(n->join_in[s]);
    }
    if (n->fork_in) cudaEventDestroy(n->fork_in);
  }
  fpx_free(n->iev);
}

/* one communicator: finalized collectively (every rank calls destroy), or
 * aborted when something failed */
static void end_comm(ncclComm_t c, bool broken) {
  if (broken) {
    ncclCommAbort(c);
    return;
  }
  ncclCommFinalize(c);
  ncclCommDestroy(c);
}

static void destroy_comms(fp_exec *x, nstate *n) {
  for (int32_t q = 0; n->comms && q < n->P.npairs; q++) {
    if (!n->comms[q]) continue;
    if (n->reg[q]) ncclCommDeregister(n->comms[q], n->reg[q]);
    end_comm(n->comms[q], x->broken);
  }
  if (n->world) end_comm(n->world, x->broken);
}

static void destroy_cuda(fp_exec *x, nstate *n) {
  if (n->made_compute) cudaStreamDestroy(n->made_compute);
  if (n->arena) ncclMemFree(n->arena);
  if (n->host) cudaFreeHost(n->host);
  if (n->scratch) cudaFree(n->scratch);
  for (int32_t k = 0; n->ev_made && k < n->P.nevents; k++)
    if (n->ev_made[k]) cudaEventDestroy(n->ev[k]);
  if (n->fork_made) cudaEventDestroy(n->fork_ev);
  for (int32_t j = 0; n->done_made && j < x->nxops; j++)
    if (n->done_made[j]) cudaEventDestroy(n->done[j]);
  for (int s = 0; s < FP_NSTREAMS; s++) {
    if (n->join_made[s]) cudaEventDestroy(n->join_ev[s]);
    if (n->own[s] && n->st[s]) cudaStreamDestroy(n->st[s]);
    if (n->cap[s]) cudaStreamDestroy(n->cap[s]);
  }
  if (n->capo) cudaStreamDestroy(n->capo);
  for (int k = 0; k < FPN_LAUNCH_STREAMS; k++)
    if (n->lst[k]) cudaStreamDestroy(n->lst[k]);
}

static void nccl_destroy(fp_exec *x) {
  nstate *n = ns(x);
  if (!n) return;
  if (n->device_ok) cudaSetDevice(n->device);
  bool cap = n->device_ok && capturing(n);
  if (!x->broken && !cap && n->device_ok) nccl_sync(x);
  destroy_graphs(x, n);
  destroy_comms(x, n);
  destroy_cuda(x, n);
  fpx_free(n->ev);
  fpx_free(n->ev_made);
  fpx_free(n->rec_cap);
  fpx_free(n->comms);
  fpx_free(n->reg);
  fpx_free(n->comm_name);
  fpx_free(n->op_comm);
  fpx_free(n->graphs);
  fpx_free(n->execs);
  fpx_free(n->seg_label);
  fpx_free(n->done);
  fpx_free(n->done_made);
  fpn_plan_free(&n->P);
  fpx_free(n);
  x->bks = NULL;
  x->cuda_stream = NULL;
}

int fpx_nccl_device(const fp_exec *x) { return ns(x)->device; }

const fp_backend_impl fp_backend_nccl = {
    .name = "nccl",
    .prepare = nccl_prepare,
    .agree = nccl_agree,
    .connect = nccl_connect,
    .run_segment = nccl_run_segment,
    .sync = nccl_sync,
    .write = nccl_write,
    .all_reduce_f64 = nccl_all_reduce_f64,
    .all_reduce_dev = nccl_all_reduce_dev,
    .destroy = nccl_destroy,
    .set_stream = nccl_set_stream,
    .capture = nccl_capture,
};
