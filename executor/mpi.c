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
 * Streams. The plan's three streams are emulated: each is its list of ops
 * (fp_exec.sops) replayed in order, with two counters: enq (op instances
 * the hooks have handed it, across steps) and head (instances finished).
 * A stream advances while its head op can: a local op runs (reference
 * kernels, kernels/kernels.h); a communication op is issued non-blocking
 * (with the rest of its group) and finishes when MPI_Testall says so; a
 * record finishes at once (everything before it on its stream has); a wait
 * finishes once the record it is tied to has finished in the right step.
 * A hook hands the segment's ops to their streams and returns when the
 * compute stream has caught up (the trainer's next work reads its results);
 * the ag and rs streams go on in the background. A stream is at most one
 * step behind its hooks: an op is not handed out again before its previous
 * instance finished.
 *
 * Progress (docs/executor.md, "Streams and progress", has the figures). MPI
 * advances non-blocking collectives only inside MPI calls, so something must
 * keep calling. FP_PROGRESS_POLL: only the hooks drive the streams, so the
 * background streams stand still while the trainer computes. FP_PROGRESS_
 * THREAD (the default where MPI_THREAD_MULTIPLE is available): a progress
 * thread drives them between hooks; a hook takes the streams over (mu) and
 * drives them itself, so handing work over costs no thread wake-up; the
 * thread lets go after every sweep and sleeps when no stream has work. Idle
 * waits poll SPINS times, then yield the core between polls.
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
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "backend_impl.h"
#include "kernels/kernels.h"

#define TAG 7            /* send/recv: one tag; (communicator, stream) order pairs them */
#define ALIGN 256        /* arena parts and staging start on 256 bytes (docs/layout.md) */
#define SPINS 256        /* idle polls before a wait yields the core (docs/executor.md) */

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

typedef struct hstream {  /* all fields under mstate.mu in thread mode */
  fp_xop **ops;
  int64_t len;
  int64_t enq;           /* instances handed out by hooks */
  int64_t head;          /* instances finished */
  int64_t issued;        /* instances issued (>= head): a group in flight */
} hstream;

typedef struct segsum {  /* what one segment adds to the statistics */
  int64_t local, coll, bytes;
} segsum;

typedef struct mstate {
  char *mem;
  mop *mops;
  MPI_Request *reqs;
  int *ints;
  segsum *sums;
  hstream st[FP_NSTREAMS];
  MPI_Comm *dups;        /* [ncomms][FP_NSTREAMS], MPI_COMM_NULL where unused */
  MPI_Comm red;          /* fp_exec_all_reduce_f64: a duplicate of the bootstrap communicator */
  MPI_Datatype t_bf16, t_f16;
  MPI_Op op_bf16, op_f16;
  bool types;
  fp_progress mode;
  /* the progress thread: whoever holds mu drives the streams */
  pthread_t th;
  bool th_live;
  pthread_mutex_t mu;
  pthread_cond_t cv;     /* the thread sleeps on it when no stream has work */
  atomic_int hooks_waiting; /* hooks waiting for mu: the thread lets them in first */
  bool stop;
  bool failed;           /* an MPI call failed; fail_msg says which */
  char fail_msg[1024];
  /* the watchdog (x->timeout_s > 0): a duplicate of the bootstrap
   * communicator for its reports, and room for one round of them with the
   * ranks of the largest communicator instance of the plan */
  MPI_Comm wd;
  int wd_n;              /* ranks one round talks to at most */
  MPI_Request *wd_req;   /* [2 * wd_n]: receives, then sends */
  int64_t *wd_msg;       /* [2 * (wd_n + 1)]: (step, op) received per peer, then this rank's */
  bool timed_out;        /* a watchdog fired: requests may still be pending on the plan's communicators */
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

/* ---- prepare: memory and per-op records (local) ------------------------------------- */
static int64_t align_up(int64_t v) { return (v + ALIGN - 1) / ALIGN * ALIGN; }

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
  m->red = MPI_COMM_NULL;
  MPI_Query_thread(&level);
  /* the default: see docs/executor.md, "Streams and progress" */
  m->mode = x->cfg.progress;
  if (m->mode == FP_PROGRESS_DEFAULT) m->mode = level == MPI_THREAD_MULTIPLE ? FP_PROGRESS_THREAD : FP_PROGRESS_POLL;
  if (m->mode == FP_PROGRESS_THREAD && level != MPI_THREAD_MULTIPLE)
    return fpx_fail(x, FP_ERR_ARG, "progress thread: MPI was initialized without MPI_THREAD_MULTIPLE "
                    "(call MPI_Init_thread with it, or use FP_PROGRESS_POLL)");
  x->stats.progress = m->mode;

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
  int64_t dev = align_up(x->prog->arena_bytes), host = align_up(x->prog->host_bytes), total;
  if (!fpi_add64(dev, host, &total) || !fpi_add64(total, staging, &total) || total > (int64_t)(SIZE_MAX / 2))
    return fpx_fail(x, FP_ERR_PLAN, "the arena (%" PRId64 " + %" PRId64 " bytes) is too large", dev, host);
  void *mem = NULL;
  x->stats.allocations++;
  if (posix_memalign(&mem, ALIGN, total > 0 ? (size_t)total : ALIGN))
    return fpx_fail(x, FP_ERR_NOMEM, "cannot allocate the arena: %" PRId64 " bytes", total);
  memset(mem, 0, total > 0 ? (size_t)total : ALIGN);
  m->mem = mem;
  x->dev = m->mem;
  x->host = m->mem + dev;
  char *stage = m->mem + dev + host;
  x->stats.arena_bytes = total;

  m->mops = fpx_alloc(x, (size_t)x->nxops, sizeof *m->mops);
  m->reqs = fpx_alloc(x, (size_t)nreq, sizeof *m->reqs);
  m->ints = fpx_alloc(x, (size_t)nints, sizeof *m->ints);
  m->sums = fpx_alloc(x, (size_t)x->prog->nsegs, sizeof *m->sums);
  m->dups = fpx_alloc(x, (size_t)x->prog->ncomms * FP_NSTREAMS, sizeof *m->dups);
  if (!m->mops || !m->reqs || !m->ints || !m->sums || !m->dups) return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
  for (int64_t k = 0; k < (int64_t)x->prog->ncomms * FP_NSTREAMS; k++) m->dups[k] = MPI_COMM_NULL;
  for (int64_t k = 0; k < nreq; k++) m->reqs[k] = MPI_REQUEST_NULL;
  m->wd = MPI_COMM_NULL;
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
  for (int32_t j = 0, seg = 0; j < x->nxops; j++) {
    fp_xop *o = &x->xops[j];
    mop *q = &m->mops[j];
    while (o->index >= x->prog->segs[seg].first + x->prog->segs[seg].nops) seg++;
    if (!is_comm(o)) {
      m->sums[seg].local += fpi_op_class(o->code) == FP_OPC_LOCAL;
      continue;
    }
    m->sums[seg].coll++;
    m->sums[seg].bytes += fpx_send_bytes(o);
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
  for (int s = 0; s < FP_NSTREAMS; s++) {
    m->st[s].ops = x->sops[s];
    m->st[s].len = x->slen[s];
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
  if (a.verdict == FPX_AV_NO_ROOT)
    return local != FP_OK ? local
                          : fpx_fail(x, FP_ERR_TIMEOUT,
                                     "watchdog: fp_exec_create: the ranks' agreement on the plan got no answer from "
                                     "rank 0 within %g s (timeout %g s): rank 0 did not join; no collective of the "
                                     "plan was issued", a.waited_s, x->timeout_s);
  if (a.verdict == FPX_AV_TIMEOUT) {
    char list[160];
    fpx_agree_list(&a, list, sizeof list);
    char why[FPX_MSG_CAP];
    snprintf(why, sizeof why, "%s", local != FP_OK ? x->msg : "");
    return fpx_fail(x, FP_ERR_TIMEOUT,
                    "watchdog: fp_exec_create: %" PRId64 " rank(s) did not join the ranks' agreement on the plan "
                    "within %g s (timeout): did not join: %s; no collective of the plan was issued%s%.900s",
                    a.missing, x->timeout_s, list, local != FP_OK ? "; this rank's setup failed too: " : "", why);
  }
  if (local != FP_OK) return local;
  if (a.verdict == FPX_AV_FAILED)
    return fpx_fail(x, FP_ERR_MISMATCH,
                    "rank %" PRId64 " failed its executor setup (its message says why); no collective of the plan was "
                    "issued", a.rank);
  if (a.verdict == FPX_AV_MISMATCH)
    return fpx_fail(x, FP_ERR_MISMATCH,
                    "plan hash mismatch: rank 0 has fnv1a64:%016" PRIx64 ", rank %" PRId64 " has fnv1a64:%016" PRIx64
                    "; every rank must load the same plan; no collective of the plan was issued",
                    a.root_hash, a.rank, a.other_hash);
  return FP_OK;
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
static void *progress_main(void *arg);

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
  if (m->mode == FP_PROGRESS_THREAD) {
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    if (pthread_create(&m->th, NULL, progress_main, x)) {
      pthread_cond_destroy(&m->cv);
      pthread_mutex_destroy(&m->mu);
      return fpx_fail(x, FP_ERR_BACKEND, "cannot start the progress thread");
    }
    m->th_live = true;
  }
fail:
  return st;
}

/* ---- running ops ------------------------------------------------------------------------- */
static void run_local(const fp_xop *o) {
  int64_t sz = fpi_dtype_size(o->dtype);
  switch (o->code) {
    case FP_OP_CAST: fpk_cast(o->dst, o->dtype, o->src, o->sdtype, o->n); break;
    case FP_OP_COPY:
      for (int64_t r = 0; r < o->rows; r++) memcpy(o->dst + r * o->dpitch, o->src + r * o->spitch, (size_t)(o->n * sz));
      break;
    case FP_OP_SPLIT_COPY:
    case FP_OP_CHUNK_CAT: {
      /* region j: rows of tab_cnt[j] elements between the table side (at
       * tab_off[j], rows packed) and the rows side (column p, pitched) */
      bool split = o->code == FP_OP_SPLIT_COPY;
      int64_t ed = fpi_dtype_size(o->dtype), es = fpi_dtype_size(o->sdtype), col = 0;
      for (int64_t j = 0; j < o->ntab; j++) {
        int64_t c = o->tab_cnt[j];
        for (int64_t r = 0; r < o->rows; r++) {
          char *d = split ? o->dst + (o->tab_off[j] + r * c) * ed : o->dst + r * o->dpitch + col * ed;
          const char *s = split ? o->src + r * o->spitch + col * es : o->src + (o->tab_off[j] + r * c) * es;
          if (o->dtype == o->sdtype) memcpy(d, s, (size_t)(c * ed));
          else fpk_cast(d, o->dtype, s, o->sdtype, c);
        }
        col += c;
      }
      break;
    }
    case FP_OP_ADD: fpk_add(o->dst, o->dtype, o->src, o->sdtype, o->n); break;
    case FP_OP_SCALE: fpk_scale(o->dst, o->dtype, o->alpha, o->n); break;
    case FP_OP_MEMSET: fpk_memset0(o->dst, o->n * sz); break;
    case FP_OP_QUANTIZE_MXFP8: fpk_quantize_mxfp8((uint8_t *)o->dst, (uint8_t *)o->aux, o->src, o->sdtype, o->n); break;
    case FP_OP_DEQUANTIZE_MXFP8:
      fpk_dequantize_mxfp8(o->dst, o->dtype, (const uint8_t *)o->src, (const uint8_t *)o->aux, o->n);
      break;
    case FP_OP_H2D:
    case FP_OP_D2H: memcpy(o->dst, o->src, (size_t)o->n); break;
    default: FP_ASSERT(!"not a local op");
  }
}

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

/* record the first MPI failure (from whichever thread drives the streams) */
static void stream_fail(mstate *m, const fp_xop *o, const char *what, int rc) {
  if (m->failed) return;
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
  snprintf(m->fail_msg, sizeof m->fail_msg, "MPI: %s of op %" PRId32 " (%s) failed: %s", what, o->index,
           fpi_op_name(o->code), s);
  m->failed = true;
}

/* Advance one stream as far as it goes without blocking; true when anything
 * finished or started. */
static bool advance(fp_exec *x, mstate *m, hstream *s) {
  bool moved = false;
  int64_t enq = s->enq, head = s->head;
  while (head < enq) {
    if (s->issued == head) { /* nothing in flight: start the head op */
      fp_xop *o = s->ops[head % s->len];
      int64_t step = head / s->len;
      switch (fpi_op_class(o->code)) {
        case FP_OPC_SYNC:
          fpx_time_op(x, o, step, false);
          if (o->code == FP_OP_RECORD) {
            o->done_step = step;
          } else if (o->rec) {
            int64_t need = o->rec_prev ? step - 1 : step;
            if (need >= 0 && o->rec->done_step < need) goto out;
          }
          fpx_time_op(x, o, step, true);
          break;
        case FP_OPC_LOCAL:
          fpx_time_op(x, o, step, false);
          run_local(o);
          fpx_time_op(x, o, step, true);
          break;
        case FP_OPC_COMM: {
          /* the op and the rest of its group (contiguous on this stream,
           * inside one segment, hence inside one step) */
          int64_t k = head;
          do {
            fp_xop *p = s->ops[k % s->len];
            fpx_time_op(x, p, k / s->len, false);
            int rc = issue(p, &m->mops[p - x->xops]);
            if (rc != MPI_SUCCESS) {
              stream_fail(m, p, "issue", rc);
              goto out;
            }
            k++;
          } while (o->group >= 0 && k < enq && k % s->len != 0 && s->ops[k % s->len]->group == o->group);
          s->issued = k;
          moved = true;
          goto test;
        }
        default: FP_ASSERT(!"compute ops are not resolved");
      }
      s->issued = ++head;
      moved = true;
      continue;
    }
  test: /* finish what is in flight, in order */
    while (head < s->issued) {
      fp_xop *o = s->ops[head % s->len];
      mop *q = &m->mops[o - x->xops];
      int flag = 0, rc = MPI_Testall(q->nreq, q->req, &flag, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        stream_fail(m, o, "completion", rc);
        goto out;
      }
      if (!flag) goto out;
      if (q->staging) memcpy(o->dst, q->staging, (size_t)(o->n * fpi_dtype_size(o->dtype)));
      if (o->red == FP_RED_AVG && (o->code != FP_OP_REDUCE || o->g == o->root)) fpk_div(o->dst, o->dtype, (double)o->G, o->n);
      fpx_time_op(x, o, head / s->len, true);
      head++;
      moved = true;
    }
  }
out:
  s->head = head;
  return moved;
}

static bool advance_all(fp_exec *x, mstate *m) {
  bool moved = false;
  for (int s = 0; s < FP_NSTREAMS; s++) moved |= advance(x, m, &m->st[s]);
  return moved;
}

static bool drained(const hstream *s) { return s->head == s->enq; }

static bool all_drained(const mstate *m) {
  for (int s = 0; s < FP_NSTREAMS; s++)
    if (!drained(&m->st[s])) return false;
  return true;
}

/* The progress thread drives the streams while the trainer computes; it
 * lets go of the streams after every sweep, so a hook takes over at once,
 * and sleeps while no stream has work. */
static void *progress_main(void *arg) {
  fp_exec *x = arg;
  mstate *m = ms(x);
  pthread_mutex_lock(&m->mu);
  while (!m->stop) {
    if (m->failed || all_drained(m)) {
      pthread_cond_wait(&m->cv, &m->mu);
      continue;
    }
    bool moved = advance_all(x, m);
    pthread_mutex_unlock(&m->mu);
    if (!moved) sched_yield(); /* waiting on MPI or on another stream: let the trainer run */
    while (atomic_load_explicit(&m->hooks_waiting, memory_order_acquire)) sched_yield(); /* a hook goes first */
    pthread_mutex_lock(&m->mu);
  }
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

/* Drive the streams until done() holds (the caller holds mu in thread
 * mode). An idle wait polls SPINS times, then yields the core at each poll:
 * short waits cost no system call, long ones leave the core to the other
 * ranks and threads. */
static fp_status watchdog(fp_exec *x, mstate *m, double waited_s);

/* With a timeout (x->timeout_s), a wait in which no op starts or finishes
 * for that long ends in the watchdog: the clock is read only once the wait
 * yields, every 64 polls. */
static fp_status drive_until(fp_exec *x, bool (*done)(fp_exec *x, const void *arg), const void *arg) {
  mstate *m = ms(x);
  int idle = 0;
  double since = 0;
  while (!m->failed && !done(x, arg)) {
    if (advance_all(x, m)) {
      idle = 0;
      since = 0;
    } else if (++idle > SPINS) {
      sched_yield();
      if (x->timeout_s > 0 && idle % 64 == 0) {
        double now = fpx_now_us();
        if (since == 0) since = now;
        else if (now - since > x->timeout_s * 1e6) return watchdog(x, m, (now - since) / 1e6);
      }
    }
  }
  return m->failed ? fpx_fail(x, m->timed_out ? FP_ERR_TIMEOUT : FP_ERR_BACKEND, "%s", m->fail_msg) : FP_OK;
}

/* ---- the watchdog ------------------------------------------------------------------------ */
/* append " a, b, c" (at most 8, then "and N more") to buf */
static void rank_list(char *buf, size_t cap, const int64_t *ranks, int n) {
  size_t k = strlen(buf);
  for (int i = 0; i < n && i < 8 && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? ", " : " ", ranks[i]);
  if (n > 8 && k < cap) snprintf(buf + k, cap - k, " and %d more", n - 8);
}

/* No op moved for waited_s seconds: find the op this rank waits for (a
 * communication op in flight, else the head of a stream), then ask the
 * other ranks of its communicator instance where they are. Each rank whose
 * watchdog fires sends its (step, op) to the others and listens for one
 * more timeout: a rank that reports the same op arrived and waits too; one
 * that reports another op is elsewhere; one that reports nothing did not
 * arrive (it stopped calling hooks, or left). The executor is broken from
 * here on; what MPI still holds (requests on the plan's communicators, the
 * arena they write into) is left alone at destroy. */
static fp_status watchdog(fp_exec *x, mstate *m, double waited_s) {
  const fp_xop *o = NULL;
  int64_t step = -1;
  for (int s = 0; s < FP_NSTREAMS && !o; s++)
    if (m->st[s].head < m->st[s].issued) o = m->st[s].ops[m->st[s].head % m->st[s].len], step = m->st[s].head / m->st[s].len;
  for (int s = 0; s < FP_NSTREAMS && !o; s++)
    if (m->st[s].head < m->st[s].enq) o = m->st[s].ops[m->st[s].head % m->st[s].len], step = m->st[s].head / m->st[s].len;
  char where[160], msg[1024];
  if (x->in_hook) {
    char lab[128];
    snprintf(where, sizeof where, "hook %s", fpx_seg_label(x, x->cursor, lab, sizeof lab));
  } else {
    snprintf(where, sizeof where, "fp_exec_sync");
  }
  int k = snprintf(msg, sizeof msg, "watchdog: %s: no op of the plan moved for %.1f s (timeout %g s)", where, waited_s,
                   x->timeout_s);
  const fp_ir_comm *pc = o && o->comm >= 0 && o->comm < x->prog->ncomms ? &x->prog->comms[o->comm] : NULL;
  if (o)
    k += snprintf(msg + k, sizeof msg - (size_t)k, "; rank %" PRId64 " waits for op %" PRId32 " (%s %s%s%s%s, stream %s) of step %" PRId64,
                  x->rank, o->index, fpi_op_name(o->code), fpi_dtype_name(o->dtype), pc ? " on communicator '" : "",
                  pc ? pc->name : "", pc ? "'" : "", fpi_stream_name(o->stream), step);
  if (pc && pc->size <= m->wd_n && m->wd != MPI_COMM_NULL && k < (int)sizeof msg) {
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
    int64_t same[64], other[64], gone[64];
    int ns = 0, no = 0, ng = 0;
    int64_t o_step = 0, o_op = 0;
    for (int j = 0; j < G; j++) {
      if (j == g) continue;
      int done = rr[j] == MPI_REQUEST_NULL;
      if (!done) MPI_Test(&rr[j], &done, MPI_STATUS_IGNORE);
      if (!done) {
        MPI_Cancel(&rr[j]);
        MPI_Wait(&rr[j], MPI_STATUS_IGNORE);
      }
      if (sr[j] != MPI_REQUEST_NULL) MPI_Request_free(&sr[j]); /* it completes on its own, or never matters */
      int64_t peer = base + j * pc->stride, *in = m->wd_msg + 2 * j;
      if (!done || in[0] == -2) {
        if (ng < 64) gone[ng] = peer;
        ng++;
      } else if (in[0] == step && in[1] == o->index) {
        if (ns < 64) same[ns] = peer;
        ns++;
      } else {
        if (no < 64) other[no] = peer;
        if (no++ == 0) o_step = in[0], o_op = in[1];
      }
    }
    if (ng) {
      k += snprintf(msg + k, sizeof msg - (size_t)k, "; did not arrive (no report within %g s):", x->timeout_s);
      rank_list(msg, sizeof msg, gone, ng);
      k = (int)strlen(msg);
    }
    if (ns && k < (int)sizeof msg) {
      k += snprintf(msg + k, sizeof msg - (size_t)k, "; waiting at the same op:");
      rank_list(msg, sizeof msg, same, ns);
      k = (int)strlen(msg);
    }
    if (no && k < (int)sizeof msg) {
      k += snprintf(msg + k, sizeof msg - (size_t)k, "; waiting elsewhere (the first at op %" PRId64 " of step %" PRId64 "):",
                    o_op, o_step);
      rank_list(msg, sizeof msg, other, no);
    }
  }
  snprintf(m->fail_msg, sizeof m->fail_msg, "%s", msg);
  m->failed = m->timed_out = true;
  return fpx_fail(x, FP_ERR_TIMEOUT, "%s", msg);
}

static bool room_for(fp_exec *x, const void *arg) { /* no op handed out twice at once */
  const int64_t *want = arg;
  mstate *m = ms(x);
  for (int s = 0; s < FP_NSTREAMS; s++)
    if (m->st[s].head < want[s] - m->st[s].len) return false;
  return true;
}
static bool compute_done(fp_exec *x, const void *arg) {
  (void)arg;
  return drained(&ms(x)->st[FP_STREAM_COMPUTE]);
}
static bool everything_done(fp_exec *x, const void *arg) {
  (void)arg;
  return all_drained(ms(x));
}

/* the hook side: take the streams over from the progress thread, hand them
 * the segment, drive them until the compute stream caught up, then give
 * them back (waking the thread if anything is left) */
static void take(mstate *m) {
  if (!m->th_live) return;
  atomic_fetch_add_explicit(&m->hooks_waiting, 1, memory_order_acq_rel);
  pthread_mutex_lock(&m->mu);
  atomic_fetch_sub_explicit(&m->hooks_waiting, 1, memory_order_acq_rel);
}
static void give(mstate *m) {
  if (!m->th_live) return;
  if (!all_drained(m)) pthread_cond_signal(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

static fp_status mpi_run_segment(fp_exec *x, int32_t seg) {
  mstate *m = ms(x);
  int64_t want[FP_NSTREAMS];
  for (int s = 0; s < FP_NSTREAMS; s++) want[s] = x->stats.steps * m->st[s].len + x->seg_end[seg][s];
  take(m);
  fp_status st = drive_until(x, room_for, want);
  if (st == FP_OK) {
    for (int s = 0; s < FP_NSTREAMS; s++) m->st[s].enq = want[s];
    st = drive_until(x, compute_done, NULL);
  }
  if (st == FP_OK) advance_all(x, m); /* start what the other streams can */
  give(m);
  FPX_CHECK(st);
  x->stats.local_ops += m->sums[seg].local;
  x->stats.collectives += m->sums[seg].coll;
  x->stats.bytes_moved += m->sums[seg].bytes;
  return FP_OK;
}

static fp_status mpi_sync(fp_exec *x) {
  mstate *m = ms(x);
  take(m);
  fp_status st = drive_until(x, everything_done, NULL);
  give(m);
  return st;
}

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
        snprintf(m->fail_msg, sizeof m->fail_msg,
                 "watchdog: fp_exec_all_reduce_f64 (or a refit's agreement) waited %g s for the other ranks (timeout "
                 "%g s): a rank did not join", (fpx_now_us() - t0) / 1e6, x->timeout_s);
        take(m); /* the progress thread reads these under mu */
        m->failed = m->timed_out = true;
        give(m);
        return fpx_fail(x, FP_ERR_TIMEOUT, "%s", m->fail_msg);
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
  take(m); /* the progress thread reads these under mu */
  if (!m->failed) snprintf(m->fail_msg, sizeof m->fail_msg, "%s", why);
  m->failed = m->timed_out = true;
  give(m);
  x->broken = true;
  fpx_fail(x, FP_ERR_TIMEOUT, "%s", why);
}

static void mpi_destroy(fp_exec *x) {
  mstate *m = ms(x);
  if (!m) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!x->broken && !finalized) mpi_sync(x);
  if (m->th_live) {
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->th, NULL);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
  }
  if (!finalized) {
    /* after a watchdog, requests of the plan may still be pending: their
     * communicators and the memory MPI may write into stay (leaked) */
    if (m->dups && !m->timed_out)
      for (int64_t k = 0; k < (int64_t)x->prog->ncomms * FP_NSTREAMS; k++)
        if (m->dups[k] != MPI_COMM_NULL) MPI_Comm_free(&m->dups[k]);
    if (m->wd != MPI_COMM_NULL) MPI_Comm_free(&m->wd);
    if (m->red != MPI_COMM_NULL && !m->timed_out) MPI_Comm_free(&m->red);
    if (m->types) {
      if (m->t_bf16 != MPI_DATATYPE_NULL) MPI_Type_free(&m->t_bf16);
      if (m->t_f16 != MPI_DATATYPE_NULL) MPI_Type_free(&m->t_f16);
      if (m->op_bf16 != MPI_OP_NULL) MPI_Op_free(&m->op_bf16);
      if (m->op_f16 != MPI_OP_NULL) MPI_Op_free(&m->op_f16);
    }
  }
  if (!m->timed_out) free(m->mem);
  else fpx_keep_for_mpi(m->mem), fpx_keep_for_mpi(m->ar);
  fpx_free(m->wd_req);
  fpx_free(m->wd_msg);
  if (!m->timed_out) fpx_free(m->ar);
  fpx_free(m->mops);
  fpx_free(m->reqs);
  fpx_free(m->ints);
  fpx_free(m->sums);
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
