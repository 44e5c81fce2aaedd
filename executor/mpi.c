/* mpi.c - the MPI backend: the plan replayed on host memory with MPI
 * collectives, one process per rank. It is the reference backend CI runs
 * with several real processes (docs/executor.md).
 *
 * Memory. One allocation at setup holds the device arena, the host arena and
 * the staging an in-place reduce-scatter needs (below); every MPI request,
 * count and displacement array the hooks use is allocated at setup too.
 *
 * Communicators. Each plan communicator that carries communication becomes
 * an MPI_Comm_split of the bootstrap communicator (color: the first rank of
 * the instance, key: the index in it), duplicated once per plan stream that
 * communicates on it. MPI matches collectives per communicator in issue
 * order, so one duplicate per (communicator, stream) makes the order on each
 * of them the program order on every rank: streams never cross-match.
 *
 * Streams and progress. The plan is replayed by the host engine the
 * external backend shares (host.c, host.h): this file gives it the MPI calls
 * (issue, test, the staging copy, the watchdog's round with the other
 * ranks). MPI advances non-blocking collectives only inside MPI calls, so
 * something must keep calling: FP_PROGRESS_THREAD (the default where
 * MPI_THREAD_MULTIPLE is available) lets host.c's progress thread do it
 * between hooks; FP_PROGRESS_POLL leaves it to the hooks.
 *
 * NCCL semantics. All-gather in place (src == dst + g*n) is MPI_IN_PLACE, as
 * MPI defines it the same way. MPI's in-place reduce-scatter writes the
 * result at offset 0 and may use the rest of the buffer, where NCCL's
 * (dst == src + g*n) writes only dst: so it reduces into staging and copies
 * to dst when done, leaving every other byte as NCCL would. Broadcast with
 * src != dst copies src to dst on the root first; reduce leaves dst alone off
 * the root. bf16 and fp16 sums use a user MPI_Op over a 2-byte type whose
 * body is fpk_reduce_sum (widen to fp32, add, round to nearest even).
 * MPI has no average: an op with red=avg sums as above, then divides its
 * result (dst, on the root only for reduce) by G with fpk_div once the
 * collective is done, before anything after it on the stream runs. */
#include <inttypes.h>
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "backend_impl.h"
#include "host.h"
#include "kernels/kernels.h"

#define TAG 7            /* send/recv: one tag; (communicator, stream) order pairs them */

typedef struct mop {     /* the MPI side of one resolved op */
  MPI_Comm comm;         /* the (communicator, stream) duplicate */
  MPI_Datatype type;
  MPI_Op op;
  int nreq;
  MPI_Request *req;
  int *counts, *displs;  /* v-collectives: G each */
  bool per_root;         /* reduce_scatter_v over a table MPI cannot express: G reduces */
  char *staging;         /* in-place reduce-scatter: the result lands here first */
} mop;

typedef struct mstate {
  fpx_host h;            /* the host engine (host.h): arena, streams, progress, failure */
  mop *mops;
  MPI_Request *reqs;
  int *ints;
  MPI_Comm *dups;        /* [ncomms][FP_NSTREAMS], MPI_COMM_NULL where unused */
  MPI_Comm red;          /* fp_exec_all_reduce_f64: a duplicate of the bootstrap communicator */
  MPI_Datatype t_bf16, t_f16;
  MPI_Op op_bf16, op_f16;
  bool types;
  /* the watchdog (x->timeout_s > 0): a duplicate of the bootstrap
   * communicator for its reports, and room for one round of them with the
   * ranks of the largest communicator instance of the plan */
  MPI_Comm wd;
  int wd_n;              /* ranks one round talks to at most */
  MPI_Request *wd_req;   /* [2 * wd_n]: receives, then sends */
  int64_t *wd_msg;       /* [2 * (wd_n + 1)]: (step, op) received per peer, then this rank's */
  double *ar;            /* [FP_ALL_REDUCE_MAX]: fp_exec_all_reduce_f64 under a timeout reduces here, so an
                          * abandoned reduction never writes into the caller's memory */
} mstate;

static mstate *ms(fp_exec *x) { return (mstate *)x->bks; }

/* ---- reductions in 16-bit floats --------------------------------------------- */
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  fpk_reduce_sum(inout, in, FP_BF16, *len);
}
static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  fpk_reduce_sum(inout, in, FP_F16, *len);
}

static MPI_Datatype mpi_type(const mstate *m, fp_dtype t) {
  switch (t) {
    case FP_F32: return MPI_FLOAT;
    case FP_BF16: return m->t_bf16;
    case FP_F16: return m->t_f16;
    default: return MPI_BYTE; /* e4m3, e8m0, u8: moved, never reduced */
  }
}

static MPI_Op mpi_sum(const mstate *m, fp_dtype t) {
  return t == FP_BF16 ? m->op_bf16 : t == FP_F16 ? m->op_f16 : MPI_SUM;
}

static fp_status mpi_fail(fp_exec *x, const char *what, int rc) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
  return fpx_fail(x, FP_ERR_BACKEND, "MPI: %s failed: %s", what, s);
}
#define MPI_CHECK_GOTO(x, call, st, label)            \
  do {                                                \
    int rc_ = (call);                                 \
    if (rc_ != MPI_SUCCESS) {                         \
      (st) = mpi_fail((x), #call, rc_);               \
      goto label;                                     \
    }                                                 \
  } while (0)

static const fpx_host_ops mpi_ops; /* below */

/* ---- prepare: memory and per-op records (local) ------------------------------------- */
static int64_t align_up(int64_t v) { return fpx_host_align(v); }

static bool is_comm(const fp_xop *o) { return fpi_op_class(o->code) == FP_OPC_COMM; }

/* reduce_scatter_v maps on MPI_Ireduce_scatter when the table packs the
 * pieces in rank order from 0 */
static bool packed_table(const fp_xop *o) {
  for (int64_t j = 0, at = 0; j < o->G; j++) {
    if (o->tab_off[j] != at) return false;
    at += o->tab_cnt[j];
  }
  return true;
}

/* a reduce_scatter_v MPI_Ireduce_scatter cannot express: one reduce per root */
static bool per_root(const fp_xop *o) { return o->code == FP_OP_REDUCE_SCATTER_V && !packed_table(o); }

/* staging bytes of an in-place reduce-scatter (the result lands there first) */
static int64_t staging_bytes(const fp_xop *o) {
  bool rs = o->code == FP_OP_REDUCE_SCATTER || (o->code == FP_OP_REDUCE_SCATTER_V && !per_root(o));
  return o->inplace && rs ? align_up(o->n * fpi_dtype_size(o->dtype)) : 0;
}


static fp_status mpi_prepare(fp_exec *x) {
  fp_status st = FP_OK;
  int inited = 0, finalized = 0, level = MPI_THREAD_SINGLE;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized)
    return fpx_fail(x, FP_ERR_ARG, "the MPI backend needs MPI initialized (MPI_Init_thread) and not finalized");
  mstate *m = x->bks = fpx_alloc(x, 1, sizeof *m);
  if (!m) return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
  m->red = m->wd = MPI_COMM_NULL;
  MPI_Query_thread(&level);
  /* the default: see docs/executor.md, "Streams and progress" */
  fp_progress mode = x->cfg.progress;
  if (mode == FP_PROGRESS_DEFAULT) mode = level == MPI_THREAD_MULTIPLE ? FP_PROGRESS_THREAD : FP_PROGRESS_POLL;
  if (mode == FP_PROGRESS_THREAD && level != MPI_THREAD_MULTIPLE)
    return fpx_fail(x, FP_ERR_ARG, "progress thread: MPI was initialized without MPI_THREAD_MULTIPLE "
                    "(call MPI_Init_thread with it, or use FP_PROGRESS_POLL)");

  /* sizes: counts MPI can express, staging, requests, ints */
  int64_t staging = 0, nreq = 0, nints = 0;
  for (int32_t j = 0; j < x->nxops; j++) {
    const fp_xop *o = &x->xops[j];
    if (!is_comm(o)) continue;
    if (o->n > INT_MAX || o->G > INT_MAX)
      return fpx_fail(x, FP_ERR_BACKEND, "op %" PRId32 " (%s): %" PRId64 " elements exceed MPI's int count", o->index,
                      fpi_op_name(o->code), o->n);
    bool v = o->code == FP_OP_ALL_GATHER_V || o->code == FP_OP_REDUCE_SCATTER_V;
    if (v) {
      for (int64_t k = 0; k < o->G; k++)
        if (o->tab_off[k] > INT_MAX || o->tab_cnt[k] > INT_MAX)
          return fpx_fail(x, FP_ERR_BACKEND, "op %" PRId32 " (%s): its extent table exceeds MPI's int counts",
                          o->index, fpi_op_name(o->code));
      nints += 2 * o->G;
    }
    nreq += per_root(o) ? o->G : 1;
    staging += staging_bytes(o);
  }
  char *stage = NULL;
  FPX_CHECK(fpx_host_prepare(x, &m->h, &mpi_ops, mode, staging, &stage));

  m->mops = fpx_alloc(x, (size_t)x->nxops, sizeof *m->mops);
  m->reqs = fpx_alloc(x, (size_t)nreq, sizeof *m->reqs);
  m->ints = fpx_alloc(x, (size_t)nints, sizeof *m->ints);
  m->dups = fpx_alloc(x, (size_t)x->prog->ncomms * FP_NSTREAMS, sizeof *m->dups);
  if (!m->mops || !m->reqs || !m->ints || !m->dups) return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
  for (int64_t k = 0; k < (int64_t)x->prog->ncomms * FP_NSTREAMS; k++) m->dups[k] = MPI_COMM_NULL;
  for (int64_t k = 0; k < nreq; k++) m->reqs[k] = MPI_REQUEST_NULL;
  if (x->timeout_s > 0) {
    for (int32_t c = 0; c < x->prog->ncomms; c++)
      if (x->prog->comms[c].size > m->wd_n && x->prog->comms[c].size <= INT_MAX) m->wd_n = (int)x->prog->comms[c].size;
    m->wd_req = fpx_alloc(x, (size_t)m->wd_n * 2 + 1, sizeof *m->wd_req);
    m->wd_msg = fpx_alloc(x, ((size_t)m->wd_n + 1) * 2, sizeof *m->wd_msg);
    m->ar = fpx_alloc(x, FP_ALL_REDUCE_MAX, sizeof *m->ar);
    if (!m->wd_req || !m->wd_msg || !m->ar) return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
  }

  m->t_bf16 = m->t_f16 = MPI_DATATYPE_NULL;
  m->op_bf16 = m->op_f16 = MPI_OP_NULL;
  m->types = true; /* from here on destroy frees what exists */
  MPI_CHECK_GOTO(x, MPI_Type_contiguous(2, MPI_BYTE, &m->t_bf16), st, fail);
  MPI_CHECK_GOTO(x, MPI_Type_contiguous(2, MPI_BYTE, &m->t_f16), st, fail);
  MPI_CHECK_GOTO(x, MPI_Type_commit(&m->t_bf16), st, fail);
  MPI_CHECK_GOTO(x, MPI_Type_commit(&m->t_f16), st, fail);
  MPI_CHECK_GOTO(x, MPI_Op_create(sum_bf16, 1, &m->op_bf16), st, fail);
  MPI_CHECK_GOTO(x, MPI_Op_create(sum_f16, 1, &m->op_f16), st, fail);

  MPI_Request *rq = m->reqs;
  int *in = m->ints;
  for (int32_t j = 0; j < x->nxops; j++) {
    fp_xop *o = &x->xops[j];
    mop *q = &m->mops[j];
    if (!is_comm(o)) continue;
    q->type = mpi_type(m, o->dtype);
    q->op = mpi_sum(m, o->dtype);
    q->per_root = per_root(o);
    q->nreq = q->per_root ? (int)o->G : 1;
    q->req = rq;
    rq += q->nreq;
    if (o->code == FP_OP_ALL_GATHER_V || o->code == FP_OP_REDUCE_SCATTER_V) {
      q->counts = in;
      q->displs = in + o->G;
      in += 2 * o->G;
      for (int64_t k = 0; k < o->G; k++) {
        q->counts[k] = (int)o->tab_cnt[k];
        q->displs[k] = (int)o->tab_off[k];
      }
    }
    if (staging_bytes(o)) {
      q->staging = stage;
      stage += staging_bytes(o);
    }
  }
fail:
  return st;
}


/* ---- agree: the ranks compare plan hashes and setup results ---------------------------- */
static MPI_Comm boot_comm(const fp_exec *x) {
  return x->cfg.bootstrap ? *(const MPI_Comm *)x->cfg.bootstrap : MPI_COMM_WORLD;
}

/* ---- the agreement under the watchdog (x->timeout_s > 0): agree.c ---- */
static fp_status agree_watched(fp_exec *x, MPI_Comm boot, fp_status local) {
  uint64_t h = x->plan ? x->plan->hash : 0;
  const int64_t none[FPX_AGREE_VALS] = {0};
  fpx_agreement a;
  fpx_agree_watched(boot, FPX_AGREE_TAG_EXEC, x->timeout_s, h, local != FP_OK, none, &a);
  if (a.verdict == FPX_AV_ERROR)
    return local != FP_OK ? local : fpx_fail(x, FP_ERR_BACKEND, "MPI failed in the executor's agreement");
  return fpx_agree_status(x, &a, local);
}

/* Every rank runs the same calls on the bootstrap communicator, whatever
 * happened locally, so none waits for a rank that gave up. Fixed-size
 * messages: nothing here allocates in proportion to the world (but rank 0
 * under a timeout, agree_root). */
fp_status fpx_mpi_agree(fp_exec *x, fp_status local) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized) /* no agreement possible; prepare said so */
    return local != FP_OK ? local
                          : fpx_fail(x, FP_ERR_ARG, "the MPI backend needs MPI initialized and not finalized");
  MPI_Comm boot = boot_comm(x);
  int rank = -1, size = 0;
  MPI_Comm_rank(boot, &rank);
  MPI_Comm_size(boot, &size);
  if (local == FP_OK && (rank != x->cfg.rank || size != x->cfg.world_size))
    local = fpx_fail(x, FP_ERR_ARG, "config says rank %d of %d, the bootstrap communicator rank %d of %d",
                     x->cfg.rank, x->cfg.world_size, rank, size);
  if (x->timeout_s > 0) return agree_watched(x, boot, local);
  uint64_t h = x->plan ? x->plan->hash : 0;
  uint64_t v[3] = {h, ~h, local != FP_OK}, r[3];
  MPI_Allreduce(v, r, 3, MPI_UINT64_T, MPI_MAX, boot);
  if (r[2]) { /* some rank failed: name the first */
    int mine = local != FP_OK ? rank : INT_MAX, first = 0;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, boot);
    if (local != FP_OK) return local;
    return fpx_fail(x, FP_ERR_MISMATCH,
                    "rank %d failed its executor setup (its message says why); no collective of the plan was issued",
                    first);
  }
  if (r[0] != ~r[1]) { /* hashes differ: name rank 0's and the first other */
    uint64_t h0 = h, hr;
    MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, boot);
    int mine = h != h0 ? rank : INT_MAX, first = 0;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, boot);
    hr = h;
    MPI_Bcast(&hr, 1, MPI_UINT64_T, first, boot);
    return fpx_fail(x, FP_ERR_MISMATCH,
                    "plan hash mismatch: rank 0 has fnv1a64:%016" PRIx64 ", rank %d has fnv1a64:%016" PRIx64
                    "; every rank must load the same plan; no collective of the plan was issued",
                    h0, first, hr);
  }
  return FP_OK;
}

/* ---- connect: communicators, then the progress thread ------------------------------------- */
static fp_status mpi_connect(fp_exec *x) {
  mstate *m = ms(x);
  const fp_prog *p = x->prog;
  MPI_Comm boot = boot_comm(x);
  fp_status st = FP_OK;
  int bad = 0, anybad = 0;
  /* which (communicator, stream) pairs carry communication: from the whole
   * program, so every rank makes the same calls */
  for (int32_t c = 0; c < p->ncomms; c++) {
    bool used[FP_NSTREAMS] = {false}, any = false;
    for (int32_t i = 0; i < p->nops; i++)
      if (p->ops[i].comm == c && fpi_op_class(p->ops[i].code) == FP_OPC_COMM) any = used[p->ops[i].stream] = true;
    if (!any) continue;
    const fp_ir_comm *pc = &p->comms[c];
    int64_t g = fpi_comm_index(pc, x->rank);
    MPI_Comm split = MPI_COMM_NULL;
    MPI_CHECK_GOTO(x, MPI_Comm_split(boot, (int)(x->rank - g * pc->stride), (int)g, &split), st, fail);
    int sr = -1, ss = 0;
    MPI_Comm_rank(split, &sr);
    MPI_Comm_size(split, &ss);
    if (sr != g || ss != pc->size) {
      bad = 1;
      fpx_fail(x, FP_ERR_PLAN, "communicator '%s' (size %" PRId64 ", stride %" PRId64 ") does not tile %" PRId64
               " ranks: rank %" PRId64 " is index %d of %d", pc->name, pc->size, pc->stride, x->world, x->rank, sr, ss);
    }
    for (int s = 0; s < FP_NSTREAMS && !bad; s++) {
      if (!used[s]) continue;
      MPI_Comm *d = &m->dups[(int64_t)c * FP_NSTREAMS + s];
      MPI_CHECK_GOTO(x, MPI_Comm_dup(split, d), st, fail);
      MPI_Comm_set_errhandler(*d, MPI_ERRORS_RETURN);
    }
    MPI_Comm_free(&split);
  }
  /* a communicator that does not tile the world is the same on every rank
   * that has it, but maybe not on all: agree before any op runs */
  MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, boot);
  if (anybad) return bad ? FP_ERR_PLAN : fpx_fail(x, FP_ERR_PLAN, "a communicator of the plan does not tile the world");
  /* the trainer's own reductions (fp_exec_all_reduce_f64): a private
   * communicator, so they never match a collective of the plan */
  MPI_CHECK_GOTO(x, MPI_Comm_dup(boot, &m->red), st, fail);
  MPI_Comm_set_errhandler(m->red, MPI_ERRORS_RETURN);
  if (x->timeout_s > 0) { /* the watchdog's reports (its own, so they never meet the trainer's) */
    MPI_CHECK_GOTO(x, MPI_Comm_dup(boot, &m->wd), st, fail);
    MPI_Comm_set_errhandler(m->wd, MPI_ERRORS_RETURN);
  }
  for (int32_t j = 0; j < x->nxops; j++)
    if (is_comm(&x->xops[j])) m->mops[j].comm = m->dups[(int64_t)x->xops[j].comm * FP_NSTREAMS + x->xops[j].stream];
  st = fpx_host_start(x, &m->h);
fail:
  return st;
}

/* ---- running ops: the host engine's calls (host.h) ------------------------------------------ */
/* issue one communication op, non-blocking; MPI's return code */
static int issue(const fp_xop *o, mop *q) {
  int n = (int)o->n, g = (int)o->g, G = (int)o->G, root = o->root;
  int64_t sz = fpi_dtype_size(o->dtype);
  switch (o->code) {
    case FP_OP_ALL_GATHER:
      if (o->inplace) return MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, o->dst, n, q->type, q->comm, q->req);
      return MPI_Iallgather(o->src, n, q->type, o->dst, n, q->type, q->comm, q->req);
    case FP_OP_ALL_GATHER_V:
      return MPI_Iallgatherv(o->inplace ? MPI_IN_PLACE : o->src, n, q->type, o->dst, q->counts, q->displs, q->type,
                             q->comm, q->req);
    case FP_OP_REDUCE_SCATTER:
      return MPI_Ireduce_scatter_block(o->src, q->staging ? q->staging : o->dst, n, q->type, q->op, q->comm, q->req);
    case FP_OP_REDUCE_SCATTER_V:
      if (!q->per_root)
        return MPI_Ireduce_scatter(o->src, q->staging ? q->staging : o->dst, q->counts, q->type, q->op, q->comm, q->req);
      for (int j = 0; j < G; j++) {
        const char *in = o->src + (int64_t)q->displs[j] * sz;
        int rc = j != g ? MPI_Ireduce(in, NULL, q->counts[j], q->type, q->op, j, q->comm, &q->req[j])
                        : MPI_Ireduce(o->inplace ? MPI_IN_PLACE : in, o->dst, q->counts[j], q->type, q->op, j, q->comm,
                                      &q->req[j]);
        if (rc != MPI_SUCCESS) return rc;
      }
      return MPI_SUCCESS;
    case FP_OP_ALL_REDUCE:
      return MPI_Iallreduce(o->inplace ? MPI_IN_PLACE : o->src, o->dst, n, q->type, q->op, q->comm, q->req);
    case FP_OP_BROADCAST:
      if (g == root && !o->inplace) memcpy(o->dst, o->src, (size_t)(o->n * sz));
      return MPI_Ibcast(o->dst, n, q->type, root, q->comm, q->req);
    case FP_OP_REDUCE:
      if (g != root) return MPI_Ireduce(o->src, NULL, n, q->type, q->op, root, q->comm, q->req);
      return MPI_Ireduce(o->inplace ? MPI_IN_PLACE : o->src, o->dst, n, q->type, q->op, root, q->comm, q->req);
    case FP_OP_SEND: return MPI_Isend(o->src, n, q->type, (g + root) % G, TAG, q->comm, q->req);
    case FP_OP_RECV: return MPI_Irecv(o->dst, n, q->type, ((g - root) % G + G) % G, TAG, q->comm, q->req);
    default: FP_ASSERT(!"not a communication op");
  }
  return MPI_SUCCESS;
}

static int mpi_issue(fp_exec *x, fp_xop *o) { return issue(o, &ms(x)->mops[o - x->xops]); }

static int mpi_test(fp_exec *x, fp_xop *o, int *done) {
  mop *q = &ms(x)->mops[o - x->xops];
  return MPI_Testall(q->nreq, q->req, done, MPI_STATUSES_IGNORE);
}

static void mpi_finish(fp_exec *x, fp_xop *o) {
  mop *q = &ms(x)->mops[o - x->xops];
  if (q->staging) memcpy(o->dst, q->staging, (size_t)(o->n * fpi_dtype_size(o->dtype)));
}

static void mpi_errstr(fp_exec *x, int rc, char *buf, size_t cap) {
  (void)x;
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
  snprintf(buf, cap, "%s", s);
}

/* The watchdog's round (host.c found the op): each rank whose watchdog
 * fires sends its (step, op) to the other ranks of the op's communicator
 * instance and listens for one more timeout: a rank that reports the same
 * op arrived and waits too; one that reports another op is elsewhere; one
 * that reports nothing did not arrive (it stopped calling hooks, or left).
 * What MPI still holds (requests on the plan's communicators, the arena
 * they write into) is left alone at destroy. */
static void mpi_peers(fp_exec *x, const fp_xop *o, int64_t step, char *msg, size_t cap) {
  mstate *m = ms(x);
  const fp_ir_comm *pc = &x->prog->comms[o->comm];
  int k = (int)strlen(msg);
  if (pc->size <= m->wd_n && m->wd != MPI_COMM_NULL && k < (int)cap) {
    int G = (int)pc->size;
    int64_t g = fpi_comm_index(pc, x->rank), base = x->rank - g * pc->stride;
    int64_t *mine = m->wd_msg + 2 * (int64_t)m->wd_n;
    mine[0] = step, mine[1] = o->index;
    MPI_Request *rr = m->wd_req, *sr = m->wd_req + m->wd_n;
    for (int j = 0; j < G; j++) {
      rr[j] = sr[j] = MPI_REQUEST_NULL;
      m->wd_msg[2 * j] = m->wd_msg[2 * j + 1] = -2;
      if (j == g) continue;
      int peer = (int)(base + j * pc->stride);
      MPI_Irecv(m->wd_msg + 2 * j, 2, MPI_INT64_T, peer, TAG, m->wd, &rr[j]);
      MPI_Isend(mine, 2, MPI_INT64_T, peer, TAG, m->wd, &sr[j]);
    }
    double t0 = fpx_now_us();
    int flag = 0;
    while (!flag && fpx_now_us() - t0 < x->timeout_s * 1e6) {
      MPI_Testall(G, rr, &flag, MPI_STATUSES_IGNORE);
      if (!flag) sched_yield();
    }
    for (int j = 0; j < G; j++) {
      if (j == g) continue;
      int done = rr[j] == MPI_REQUEST_NULL;
      if (!done) MPI_Test(&rr[j], &done, MPI_STATUS_IGNORE);
      if (!done) {
        MPI_Cancel(&rr[j]);
        MPI_Wait(&rr[j], MPI_STATUS_IGNORE);
        m->wd_msg[2 * j] = -2; /* no report */
      }
      if (sr[j] != MPI_REQUEST_NULL) MPI_Request_free(&sr[j]); /* it completes on its own, or never matters */
    }
    fpx_host_report(x, o, step, m->wd_msg, msg, cap);
  }
}

static const fpx_host_ops mpi_ops = {
    .issue = mpi_issue, .test = mpi_test, .finish = mpi_finish, .errstr = mpi_errstr, .peers = mpi_peers, .name = "MPI"};

static fp_status mpi_run_segment(fp_exec *x, int32_t seg) { return fpx_host_run_segment(x, &ms(x)->h, seg); }

static fp_status mpi_sync(fp_exec *x) { return fpx_host_sync(x, &ms(x)->h); }

/* fp_exec_all_reduce_f64: blocking, on the private communicator; the
 * progress thread (MPI_THREAD_MULTIPLE) keeps driving the plan's streams
 * meanwhile, and in poll mode the plan's issued requests progress inside MPI */
static fp_status mpi_all_reduce_f64(fp_exec *x, double *v, int n) {
  mstate *m = ms(x);
  fp_status st = FP_OK;
  if (x->timeout_s > 0) { /* watched: non-blocking, polled against the timeout */
    MPI_Request r = MPI_REQUEST_NULL;
    memcpy(m->ar, v, (size_t)n * sizeof *v);
    MPI_CHECK_GOTO(x, MPI_Iallreduce(MPI_IN_PLACE, m->ar, n, MPI_DOUBLE, MPI_SUM, m->red, &r), st, fail);
    double t0 = fpx_now_us();
    for (int flag = 0, polls = 0; !flag; polls++) {
      MPI_CHECK_GOTO(x, MPI_Test(&r, &flag, MPI_STATUS_IGNORE), st, fail);
      if (flag) break;
      sched_yield();
      if (polls % 64 == 0 && fpx_now_us() - t0 > x->timeout_s * 1e6) {
        char why[256];
        snprintf(why, sizeof why,
                 "watchdog: fp_exec_all_reduce_f64 (or a refit's agreement) waited %g s for the other ranks (timeout "
                 "%g s): a rank did not join", (fpx_now_us() - t0) / 1e6, x->timeout_s);
        return fpx_host_time_out(x, &m->h, why);
      }
    }
    memcpy(v, m->ar, (size_t)n * sizeof *v);
    x->stats.collectives++;
    x->stats.bytes_moved += (int64_t)n * (int64_t)sizeof *v;
    return FP_OK;
  }
  MPI_CHECK_GOTO(x, MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, m->red), st, fail);
  x->stats.collectives++;
  x->stats.bytes_moved += (int64_t)n * (int64_t)sizeof *v;
fail:
  return st;
}

static fp_status mpi_write(fp_exec *x, char *dst, int64_t dpitch, const char *src, int64_t spitch, int64_t width,
                           int64_t rows) {
  (void)x;
  for (int64_t r = 0; r < rows; r++) memcpy(dst + r * dpitch, src + r * spitch, (size_t)width);
  return FP_OK;
}

/* A transfer's watchdog (xfer.c) gave up on requests that read or write
 * this executor's arena: it fails from now on with the transfer's message,
 * and its memory stays when it is destroyed (as after its own watchdog). */
void fpx_mpi_abandon(fp_exec *x, const char *why) {
  mstate *m = ms(x);
  if (!m) return;
  x->broken = true;
  fpx_host_time_out(x, &m->h, why);
}

static void mpi_destroy(fp_exec *x) {
  mstate *m = ms(x);
  if (!m) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!x->broken && !finalized) mpi_sync(x);
  fpx_host_stop(&m->h);
  if (!finalized) {
    /* after a watchdog, requests of the plan may still be pending: their
     * communicators and the memory MPI may write into stay (leaked) */
    if (m->dups && !m->h.timed_out)
      for (int64_t k = 0; k < (int64_t)x->prog->ncomms * FP_NSTREAMS; k++)
        if (m->dups[k] != MPI_COMM_NULL) MPI_Comm_free(&m->dups[k]);
    if (m->wd != MPI_COMM_NULL) MPI_Comm_free(&m->wd);
    if (m->red != MPI_COMM_NULL && !m->h.timed_out) MPI_Comm_free(&m->red);
    if (m->types) {
      if (m->t_bf16 != MPI_DATATYPE_NULL) MPI_Type_free(&m->t_bf16);
      if (m->t_f16 != MPI_DATATYPE_NULL) MPI_Type_free(&m->t_f16);
      if (m->op_bf16 != MPI_OP_NULL) MPI_Op_free(&m->op_bf16);
      if (m->op_f16 != MPI_OP_NULL) MPI_Op_free(&m->op_f16);
    }
  }
  bool timed_out = m->h.timed_out;
  fpx_host_free(&m->h);
  if (timed_out) fpx_keep_for_mpi(m->ar);
  fpx_free(m->wd_req);
  fpx_free(m->wd_msg);
  if (!timed_out) fpx_free(m->ar);
  fpx_free(m->mops);
  fpx_free(m->reqs);
  fpx_free(m->ints);
  fpx_free(m->dups);
  fpx_free(m);
  x->bks = NULL;
}

const fp_backend_impl fp_backend_mpi = {
    .name = "mpi",
    .prepare = mpi_prepare,
    .agree = fpx_mpi_agree,
    .connect = mpi_connect,
    .run_segment = mpi_run_segment,
    .sync = mpi_sync,
    .write = mpi_write,
    .all_reduce_f64 = mpi_all_reduce_f64,
    .destroy = mpi_destroy,
};
