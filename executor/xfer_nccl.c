/* xfer_nccl.c - a transfer program's ops on the NCCL backend: fp_xfer_run
 * with NCCL executors (xfer.c checks both sides and has the processes agree
 * first, over MPI, as for the MPI backend; docs/reshard.md).
 *
 * The transfer gets an NCCL communicator of its own over the processes that
 * hold a FROM or a TO rank, in process order (the FROM and TO executors'
 * communicators cover one plan's ranks each, and a transfer may span both;
 * a process that holds neither has no device to join with): made at the first
 * run from an id process 0 broadcasts over MPI, and kept on the handle with
 * a stream and the staging buffer, so a transfer run again (RL weight sync:
 * every iteration) reuses them; a run over other processes makes a new one.
 * fp_xfer_free frees them.
 *
 * A process's ops run on that stream in segments, cut before each local op
 * that waits (fpi_tx_waits: it reads staging or TO bytes, which a recv may
 * write; the MPI backend waits for every posted send and recv there). A
 * segment's local ops run in order (all but its first read FROM only), then
 * its sends and recvs as one NCCL group (each pair's messages in the order
 * the verifier matched); the next segment follows on the same stream, so
 * it starts when the group is done: the MPI backend's wait, which the
 * verifier's X4 proves cannot hang. Most transfers have two segments (the
 * sends, recvs and sender-side work, then dequantizes and derived compute
 * weights); the split blocks of an MXFP8 param have a scale exchange before
 * (planner/reshard.c). The host
 * waits for the stream, polling NCCL for asynchronous errors; on one, the
 * communicator is aborted and dropped (FP_ERR_BACKEND: TO's need regions may
 * be partly written, nothing else of TO is). Written and compiled without a
 * GPU: it has not run yet (docs/cuda.md). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "backend_impl.h"
#include "ir/xfer.h"
#include "kernels/kernels_cuda.h"
#include "nccl_plan.h"
#include "xfer_nccl.h"

typedef struct xnccl {
  int device;           /* the CUDA device everything below lives on */
  MPI_Group procs;      /* the processes the communicator was made over */
  ncclComm_t comm;      /* NCCL rank p = process p (NULL: none yet) */
  cudaStream_t s;
  void *stage;          /* cudaMalloc, stage_cap bytes */
  size_t stage_cap;
} xnccl;

static void xnccl_free(void *p) {
  xnccl *n = p;
  if (!n) return;
  int fin = 0;
  MPI_Finalized(&fin);
  cudaSetDevice(n->device);
  if (n->comm) ncclCommDestroy(n->comm);
  if (n->s) cudaStreamDestroy(n->s);
  if (n->stage) cudaFree(n->stage);
  if (!fin && n->procs != MPI_GROUP_NULL) MPI_Group_free(&n->procs);
  free(n);
}

static fp_status cuda_fail(fp_xfer *t, const char *what, cudaError_t e) {
  return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: CUDA: %s failed: %s", what, cudaGetErrorString(e));
}
static fp_status nccl_fail(fp_xfer *t, const char *what, ncclResult_t r, ncclComm_t c) {
  const char *last = ncclGetLastError(c);
  return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: NCCL: %s failed: %s%s%s", what, ncclGetErrorString(r),
                       last && *last ? ": " : "", last ? last : "");
}
#define CUDA_DO(call)                                     \
  do {                                                    \
    cudaError_t e_ = (call);                              \
    if (e_ != cudaSuccess) return cuda_fail(t, #call, e_); \
  } while (0)
#define NCCL_DO(call, comm)                                     \
  do {                                                          \
    ncclResult_t r_ = (call);                                   \
    if (r_ != ncclSuccess) return nccl_fail(t, #call, r_, comm); \
  } while (0)

static bool p2p(const fp_tx_op *o) { return o->kind == FP_TX_SEND || o->kind == FP_TX_RECV; }

static bool holds(const fp_tx *tx, int64_t p) {
  return (p >= tx->from_offset && p < tx->from_offset + tx->from_world) ||
         (p >= tx->to_offset && p < tx->to_offset + tx->to_world);
}
/* process p's NCCL rank: the processes before it that hold a rank of either
 * plan (*count: all of them) */
static int nccl_rank(const fp_tx *tx, int64_t p, int *count) {
  int r = 0, n = 0;
  for (int64_t q = 0; q < tx->nprocs; q++) {
    if (q == p) r = n;
    n += holds(tx, q);
  }
  *count = n;
  return r;
}

fp_status fpx_xfer_nccl_prepare(fp_xfer *t, fp_exec *from, fp_exec *to, int me, MPI_Comm base, int *fresh) {
  const fp_tx *tx = t->tx;
  *fresh = 1;
  int dev = from ? fpx_nccl_device(from) : fpx_nccl_device(to);
  if (from && to && fpx_nccl_device(to) != dev)
    return fpx_xfer_fail(t, FP_ERR_ARG, "xfer: the FROM executor is on CUDA device %d and the TO executor on %d: "
                         "a process runs a transfer on one device", dev, fpx_nccl_device(to));
  /* both executors' last work done (their streams are not ours) */
  if (from && fp_exec_sync(from) != FP_OK)
    return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: the FROM executor: %s", fp_exec_errmsg(from));
  if (to && fp_exec_sync(to) != FP_OK)
    return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: the TO executor: %s", fp_exec_errmsg(to));
  CUDA_DO(cudaSetDevice(dev));
  struct fpx_xfer_state *s = fpx_xfer_state(t);
  if (!s) return fpx_xfer_fail(t, FP_ERR_NOMEM, "xfer: out of memory");
  xnccl *n = s->bk;
  if (n && n->device != dev) { /* executors on another device than the last run's: start over */
    xnccl_free(n);
    s->bk = n = NULL;
  }
  if (!n) {
    n = calloc(1, sizeof *n);
    if (!n) return fpx_xfer_fail(t, FP_ERR_NOMEM, "xfer: out of memory");
    n->device = dev;
    n->procs = MPI_GROUP_NULL;
    s->bk = n;
    s->bk_free = xnccl_free;
    CUDA_DO(cudaStreamCreateWithFlags(&n->s, cudaStreamNonBlocking));
  }
  size_t need = (size_t)tx->stage_bytes[me];
  if (need > n->stage_cap) {
    if (n->stage) cudaFree(n->stage);
    n->stage = NULL;
    n->stage_cap = 0;
    CUDA_DO(cudaMalloc(&n->stage, need));
    n->stage_cap = need;
  }
  /* the communicator made last time serves the same processes in the same order */
  MPI_Group g;
  int same = MPI_UNEQUAL;
  if (MPI_Comm_group(base, &g) != MPI_SUCCESS) return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: MPI_Comm_group failed");
  if (n->comm && n->procs != MPI_GROUP_NULL) MPI_Group_compare(g, n->procs, &same);
  MPI_Group_free(&g);
  *fresh = !(n->comm && same == MPI_IDENT);
  return FP_OK;
}

static char *at(char *from, char *to, char *stage, fp_tx_ref r) {
  switch (r.space) {
    case FP_SP_FROM: return from + r.off;
    case FP_SP_TO: return to + r.off;
    case FP_SP_STAGE: return stage + r.off;
    default: return NULL;
  }
}

/* one local op on stream s (MXFP8: a slice's head before the first block
 * boundary is a block of its own, xfer.h); a copy moves n elements (with
 * the copies that continue it, fpi_tx_copy_run) */
static cudaError_t local_op(const fp_tx_op *o, int64_t n, char *dst, char *src, char *aux, cudaStream_t s) {
  int64_t h = o->kind == FP_TX_COPY ? 0 : fpi_tx_head(o->full_off, o->n);
  cudaError_t e = cudaSuccess;
  switch (o->kind) {
    case FP_TX_COPY: /* (the same dtype, e8m0 scales too: the bytes) */
      if (o->dtype == o->sdtype) return cudaMemcpyAsync(dst, src, (size_t)(n * fpi_dtype_size(o->dtype)), cudaMemcpyDeviceToDevice, s);
      return fpk_cuda_cast(dst, o->dtype, src, o->sdtype, n, s);
    case FP_TX_QUANT:
      if (h > 0) e = fpk_cuda_quantize_mxfp8((uint8_t *)dst, (uint8_t *)aux, src, o->sdtype, h, s);
      if (e == cudaSuccess)
        e = fpk_cuda_quantize_mxfp8((uint8_t *)dst + h, (uint8_t *)aux + (h > 0), src + h * fpi_dtype_size(o->sdtype),
                                    o->sdtype, o->n - h, s);
      return e;
    case FP_TX_SCALES:
      if (h > 0) e = fpk_cuda_mxfp8_scales((uint8_t *)dst, src, o->sdtype, h, s);
      if (e == cudaSuccess)
        e = fpk_cuda_mxfp8_scales((uint8_t *)dst + (h > 0), src + h * fpi_dtype_size(o->sdtype), o->sdtype, o->n - h, s);
      return e;
    case FP_TX_QUANT_AT:
      if (h > 0) e = fpk_cuda_quantize_mxfp8_scaled((uint8_t *)dst, (const uint8_t *)aux, src, o->sdtype, h, s);
      if (e == cudaSuccess)
        e = fpk_cuda_quantize_mxfp8_scaled((uint8_t *)dst + h, (const uint8_t *)aux + (h > 0),
                                           src + h * fpi_dtype_size(o->sdtype), o->sdtype, o->n - h, s);
      return e;
    case FP_TX_MAX: return fpk_cuda_max_u8((uint8_t *)dst, (const uint8_t *)src, (const uint8_t *)aux, o->n, s);
    case FP_TX_DEQUANT:
      if (h > 0) e = fpk_cuda_dequantize_mxfp8(dst, o->dtype, (const uint8_t *)src, (const uint8_t *)aux, h, s);
      if (e == cudaSuccess)
        e = fpk_cuda_dequantize_mxfp8(dst + h * fpi_dtype_size(o->dtype), o->dtype, (const uint8_t *)src + h,
                                      (const uint8_t *)aux + (h > 0), o->n - h, s);
      return e;
    default: return cudaErrorInvalidValue;
  }
}

/* A reshard transform's op (its functions run on the host): the stream
 * drained, the op's input copied to the host, the transform run there as
 * on the MPI backend (its guards checked), its output copied back; the ops
 * after it queue behind */
static fp_status xf_host(fp_xfer *t, int32_t k, char *dst, char *src, cudaStream_t s) {
  const fp_tx *tx = t->tx;
  const fp_tx_op *o = &tx->ops[k];
  bool prep = o->kind == FP_TX_PREP_SEND;
  int64_t in = prep ? o->n * fpi_dtype_size(o->sdtype) : fpi_tx_stage_need(tx, o);
  int64_t rd = prep ? in : fpi_tx_wire_at(tx, o, o->nwire); /* bytes the device holds */
  int64_t out = prep ? fpi_tx_wire_at(tx, o, o->nwire) : o->n * fpi_dtype_size(o->dtype);
  char *h = malloc((size_t)(in + out) + 1);
  if (!h) return fpx_xfer_fail(t, FP_ERR_NOMEM, "xfer: out of memory (a transform's host staging)");
  cudaError_t e = cudaStreamSynchronize(s);
  if (e == cudaSuccess) e = cudaMemcpyAsync(h, src, (size_t)rd, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  fp_status st = e != cudaSuccess ? cuda_fail(t, fpi_tx_kind_name(o->kind), e)
                 : prep          ? fpx_xf_prep_send(t, k, h + in, h)
                                 : fpx_xf_finalize(t, k, h + in, h);
  if (st == FP_OK) e = cudaMemcpyAsync(dst, h + in, (size_t)out, cudaMemcpyHostToDevice, s);
  if (st == FP_OK && e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (st == FP_OK && e != cudaSuccess) st = cuda_fail(t, fpi_tx_kind_name(o->kind), e);
  free(h);
  return st;
}

/* A built-in transform's op (MXFP8, ir/xfer.h fpi_xf_builtin_mode): the
 * library's own code, so on the device with the CUDA kernels, which are the
 * reference kernels' bit for bit, with the transform's blocks and wire
 * tensors (local_op's head split); no host round trip, no guards. Sender
 * mode: prep_send quantizes into the e4m3 and e8m0 wires, finalize
 * dequantizes them into TO. Receiver mode: prep_send copies the slice into
 * its wire, finalize quantizes it into the op's scratch (n e4m3 bytes and
 * at most n scales: within the scratch's 2 guards + n elements) and
 * dequantizes that into TO. */
static cudaError_t xf_device(const fp_tx *tx, const fp_tx_op *o, int mode, char *dst, char *src, cudaStream_t s) {
  fp_tx_op q = *o;
  q.kind = FP_TX_QUANT;
  if (o->kind == FP_TX_PREP_SEND) {
    if (mode == 1)
      return cudaMemcpyAsync(dst, src, (size_t)(o->n * fpi_dtype_size(o->sdtype)), cudaMemcpyDeviceToDevice, s);
    return local_op(&q, o->n, dst, src, dst + fpi_tx_wire_at(tx, o, 1), s);
  }
  char *w0 = src, *scratch = src + fpi_tx_scratch_at(tx, o);
  cudaError_t e = cudaSuccess;
  if (mode == 1) e = local_op(&q, o->n, scratch, w0, scratch + o->n, s);
  q.kind = FP_TX_DEQUANT;
  q.sdtype = FP_E4M3;
  if (e == cudaSuccess)
    e = mode == 1 ? local_op(&q, o->n, dst, scratch, scratch + o->n, s)
                  : local_op(&q, o->n, dst, w0, src + fpi_tx_wire_at(tx, o, 1), s);
  return e;
}

/* wait for the stream, polling the communicator for asynchronous errors */
static fp_status wait_done(fp_xfer *t, xnccl *n) {
  for (;;) {
    cudaError_t e = cudaStreamQuery(n->s);
    if (e == cudaSuccess) return FP_OK;
    if (e != cudaErrorNotReady) return cuda_fail(t, "the transfer's stream", e);
    ncclResult_t a = ncclSuccess;
    if (n->comm && ncclCommGetAsyncError(n->comm, &a) == ncclSuccess && a != ncclSuccess && a != ncclInProgress) {
      fp_status st = nccl_fail(t, "a send or recv (asynchronous error)", a, n->comm);
      ncclCommAbort(n->comm);
      n->comm = NULL;
      return st;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  }
}

fp_status fpx_xfer_nccl_run(fp_xfer *t, int me, MPI_Comm base, MPI_Comm c, bool fresh, char *from_dev, char *to_dev) {
  const fp_tx *tx = t->tx;
  xnccl *n = t->run->bk;
  if (fresh) {
    struct {
      int ok;
      ncclUniqueId id;
    } b;
    memset(&b, 0, sizeof b);
    char *env = fpn_comm_id_hide(); /* an id over MPI: NCCL_COMM_ID is not this communicator's */
    if (me == 0) b.ok = ncclGetUniqueId(&b.id) == ncclSuccess;
    fpn_comm_id_restore(env);
    if (MPI_Bcast(&b, (int)sizeof b, MPI_BYTE, 0, c) != MPI_SUCCESS)
      return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: MPI failed broadcasting the NCCL id");
    if (!b.ok) return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: NCCL: ncclGetUniqueId failed on process 0");
    if (!holds(tx, me)) return FP_OK;
    if (n->comm) ncclCommDestroy(n->comm);
    n->comm = NULL;
    if (n->procs != MPI_GROUP_NULL) MPI_Group_free(&n->procs);
    if (MPI_Comm_group(base, &n->procs) != MPI_SUCCESS)
      return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: MPI_Comm_group failed");
    int count = 0, r = nccl_rank(tx, me, &count);
    env = fpn_comm_id_hide();
    ncclResult_t ir = ncclCommInitRank(&n->comm, count, b.id, r);
    fpn_comm_id_restore(env);
    NCCL_DO(ir, NULL);
  }
  if (!holds(tx, me)) return FP_OK;
  CUDA_DO(cudaSetDevice(n->device));
  int32_t prog = fpi_tx_prog(tx, me), lo = tx->first[prog], hi = tx->first[prog + 1];
  char *stage = n->stage;
  int *rank = malloc(((size_t)tx->nprocs + 1) * sizeof *rank); /* process -> NCCL rank */
  if (!rank) return fpx_xfer_fail(t, FP_ERR_NOMEM, "xfer: out of memory");
  for (int q = 0, k = 0; q < tx->nprocs; q++) rank[q] = k, k += holds(tx, q);
  /* a transform's failure stops no op (every send and recv still posts, so
   * no peer waits forever): the run fails with it at the end */
  fp_status st = FP_OK, bad = FP_OK;
  /* segment by segment (see above): [i, end) */
  for (int32_t i = lo, end = lo; i < hi && st == FP_OK; i = end) {
    end = fpi_tx_segment_end(tx, i, hi);
    bool any = false;
    for (int32_t k = i; k < end && st == FP_OK; k++) { /* its local ops, in order */
      const fp_tx_op *o = &tx->ops[k];
      if (p2p(o)) {
        any = true;
        continue;
      }
      int mode = fpi_xf_builtin_mode(fpi_tx_xf_name(tx, o->param));
      if ((o->kind == FP_TX_PREP_SEND || o->kind == FP_TX_FINALIZE) && mode >= 0) {
        cudaError_t e = xf_device(tx, o, mode, at(from_dev, to_dev, stage, o->dst), at(from_dev, to_dev, stage, o->src),
                                  n->s);
        if (e != cudaSuccess) st = cuda_fail(t, fpi_tx_kind_name(o->kind), e);
        continue;
      }
      if (o->kind == FP_TX_PREP_SEND || o->kind == FP_TX_FINALIZE) {
        fp_status b = xf_host(t, k, at(from_dev, to_dev, stage, o->dst), at(from_dev, to_dev, stage, o->src), n->s);
        bad = bad != FP_OK ? bad : b;
        continue;
      }
      int64_t cnt;
      int32_t stop = fpi_tx_copy_run(tx, k, end, &cnt);
      cudaError_t e = local_op(o, cnt, at(from_dev, to_dev, stage, o->dst), at(from_dev, to_dev, stage, o->src),
                               at(from_dev, to_dev, stage, o->aux), n->s);
      if (e != cudaSuccess) st = cuda_fail(t, fpi_tx_kind_name(o->kind), e);
      k = stop - 1;
    }
    if (!any || st != FP_OK) continue;
    ncclResult_t r1 = ncclGroupStart(), r = r1; /* then its sends and recvs, one group */
    for (int32_t k = i; k < end && r == ncclSuccess; k++) {
      const fp_tx_op *o = &tx->ops[k];
      if (!p2p(o)) continue; /* a local op of the segment (issued above): it has no peer */
      size_t bytes = (size_t)(o->n * fpi_dtype_size(o->dtype));
      int peer = rank[o->peer];
      if (o->kind == FP_TX_SEND) r = ncclSend(at(from_dev, to_dev, stage, o->src), bytes, ncclUint8, peer, n->comm, n->s);
      else r = ncclRecv(at(from_dev, to_dev, stage, o->dst), bytes, ncclUint8, peer, n->comm, n->s);
    }
    ncclResult_t r2 = r1 == ncclSuccess ? ncclGroupEnd() : ncclSuccess;
    if (r != ncclSuccess) st = nccl_fail(t, "ncclSend / ncclRecv", r, n->comm);
    else if (r2 != ncclSuccess) st = nccl_fail(t, "ncclGroupEnd", r2, n->comm);
  }
  free(rank);
  if (st != FP_OK) return st;
  st = wait_done(t, n);
  return st != FP_OK ? st : bad;
}
