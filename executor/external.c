/* external.c - the external backend (FP_BACKEND_EXTERNAL): the plan replayed
 * on host memory by the host engine the MPI backend uses (host.c), its
 * communication handed to a transport the caller provides (fp_transport,
 * include/flexplan.h): flexplan.torch's over torch.distributed process
 * groups, so a trainer launched by torchrun needs no MPI (docs/executor.md,
 * "The external backend").
 *
 * Groups. After the agreement, every rank asks the transport for one group
 * per (plan communicator, stream) that communicates, in the same order (the
 * program's, the same on every rank), and one world group for
 * fp_exec_all_reduce_f64. The transport matches ops per group in issue
 * order, so one group per (communicator, stream) makes the order on each the
 * program order on every rank, as the MPI backend's duplicates do.
 *
 * Ops. Each op's arguments (fp_coll_args) are made at prepare, so a hook
 * allocates nothing: the in-place forms become explicit pointers, an
 * in-place reduce-scatter lands in staging first (the transport's dst never
 * overlaps its src there), a broadcast's root copies src to dst first, a
 * send/recv's peer distance becomes the peer's index. Averages are sums the
 * host engine divides.
 *
 * Agreement and watchdog go through the transport's key-value store, never
 * a collective, so a rank that never arrives is named instead of waited for:
 * every rank but 0 puts its (plan hash, setup failed) under its key, rank 0
 * collects them for at most the timeout and puts the verdict (agree.h's
 * fpx_agreement) under one key, which every other rank waits for at most
 * 2 x timeout + 1 s; keys are numbered per executor created by the calling
 * thread (every rank creates its executors in the same order: fp_exec_create
 * is collective). A rank whose watchdog fires puts its (step, op) under its key
 * and reads those of the other ranks of the op's communicator instance for
 * one more timeout. */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "backend_impl.h"
#include "host.h"

typedef struct eop {   /* the transport's side of one resolved op */
  fp_coll_args a;      /* made at prepare; a.group set at connect */
  int64_t req;         /* the request in flight */
  char *staging;       /* in-place reduce-scatter: the result lands here first */
} eop;

typedef struct estate {
  fpx_host h;          /* the host engine (host.h): arena, streams, progress, failure */
  const fp_transport *t;
  eop *eops;
  int64_t *groups;     /* [ncomms][FP_NSTREAMS]: the transport's handles (-1: unused) */
  int64_t world;       /* the world group (fp_exec_all_reduce_f64) */
  int64_t seq;         /* this executor's number among those this process created: its keys */
  int64_t *wd_msg;     /* [2 * largest communicator size]: the watchdog's reports */
  double *ar;          /* [FP_ALL_REDUCE_MAX]: fp_exec_all_reduce_f64 reduces here */
} estate;

static estate *es(fp_exec *x) { return (estate *)x->bks; }

/* executors this thread created on this backend: their key numbers (a rank
 * creates its executors in one order, fp_exec_create being collective;
 * per thread, so ranks run as threads of one process number theirs too) */
static _Thread_local int64_t created;

static bool is_comm(const fp_xop *o) { return fpi_op_class(o->code) == FP_OPC_COMM; }

/* the transport's message after a failure */
static void terr(const fp_transport *t, char *buf, size_t cap) {
  buf[0] = 0;
  if (t && t->error) t->error(t->ctx, buf, (int64_t)cap);
  buf[cap - 1] = 0;
  if (!buf[0]) snprintf(buf, cap, "no message");
}

static fp_status tfail(fp_exec *x, const char *what, int rc) {
  char s[768];
  terr(es(x) ? es(x)->t : x->cfg.transport, s, sizeof s);
  return fpx_fail(x, FP_ERR_BACKEND, "transport: %s failed (%d): %s", what, rc, s);
}

/* ---- the host engine's calls -------------------------------------------------------------- */
static int ext_issue(fp_exec *x, fp_xop *o) {
  estate *e = es(x);
  eop *q = &e->eops[o - x->xops];
  if (o->code == FP_OP_BROADCAST && o->g == o->root && !o->inplace)
    memcpy(o->dst, o->src, (size_t)(o->n * fpi_dtype_size(o->dtype)));
  return e->t->start(e->t->ctx, &q->a, &q->req);
}

static int ext_test(fp_exec *x, fp_xop *o, int *done) {
  estate *e = es(x);
  return e->t->test(e->t->ctx, e->eops[o - x->xops].req, done);
}

static void ext_finish(fp_exec *x, fp_xop *o) {
  eop *q = &es(x)->eops[o - x->xops];
  if (q->staging) memcpy(o->dst, q->staging, (size_t)(q->a.count * fpi_dtype_size(o->dtype)));
}

static void ext_errstr(fp_exec *x, int rc, char *buf, size_t cap) {
  char s[768];
  terr(es(x)->t, s, sizeof s);
  snprintf(buf, cap, "%s (%d)", s, rc);
}

/* ---- the store: keys and fixed-size int64 values ---------------------------------------- */
static void key(char *buf, size_t cap, const estate *e, const char *what, int64_t rank) {
  snprintf(buf, cap, "flexplan/exec/%" PRId64 "/%s/%" PRId64, e->seq, what, rank);
}

static int put(const estate *e, const char *what, int64_t rank, const int64_t *v, int n) {
  char k[96];
  key(k, sizeof k, e, what, rank);
  return e->t->store_set(e->t->ctx, k, v, (int64_t)n * (int64_t)sizeof *v);
}

/* 0 found, 1 not within wait_s, else a failure */
static int get(const estate *e, const char *what, int64_t rank, int64_t *v, int n, double wait_s) {
  char k[96];
  key(k, sizeof k, e, what, rank);
  return e->t->store_get(e->t->ctx, k, v, (int64_t)n * (int64_t)sizeof *v, wait_s);
}

/* The watchdog's round: this rank's (step, op), then the other members' for at most one timeout */
static void ext_peers(fp_exec *x, const fp_xop *o, int64_t step, char *msg, size_t cap) {
  estate *e = es(x);
  const fp_ir_comm *pc = &x->prog->comms[o->comm];
  int64_t g = fpi_comm_index(pc, x->rank), base = x->rank - g * pc->stride;
  int64_t mine[2] = {step, o->index};
  if (!e->wd_msg || put(e, "wd", x->rank, mine, 2) != 0) return;
  double t0 = fpx_now_us();
  for (int64_t j = 0; j < pc->size; j++) {
    int64_t *in = e->wd_msg + 2 * j;
    in[0] = in[1] = -2;
    if (j == g) continue;
    double left = x->timeout_s - (fpx_now_us() - t0) / 1e6;
    if (get(e, "wd", base + j * pc->stride, in, 2, left > 0 ? left : 0) != 0) in[0] = in[1] = -2;
  }
  fpx_host_report(x, o, step, e->wd_msg, msg, cap);
}

static const fpx_host_ops ext_ops = {.issue = ext_issue,
                                     .test = ext_test,
                                     .finish = ext_finish,
                                     .errstr = ext_errstr,
                                     .peers = ext_peers,
                                     .name = "transport"};

/* ---- prepare: memory and every op's arguments (local) ----------------------------------- */
static bool staged(const fp_xop *o) {
  return o->inplace && (o->code == FP_OP_REDUCE_SCATTER || o->code == FP_OP_REDUCE_SCATTER_V);
}

static fp_status ext_prepare(fp_exec *x) {
  const fp_transport *t = x->cfg.transport;
  if (!t || !t->new_group || !t->start || !t->test || !t->store_set || !t->store_get || !t->error)
    return fpx_fail(x, FP_ERR_ARG, "the external backend needs fp_exec_config.transport with every function set "
                    "(new_group, start, test, store_set, store_get, error)");
  estate *e = x->bks = fpx_alloc(x, 1, sizeof *e);
  if (!e) return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
  e->t = t;
  e->world = -1;
  /* the transport's ops progress on their own (torch.distributed's
   * threads): hooks that issue what is ready are enough by default */
  fp_progress mode = x->cfg.progress == FP_PROGRESS_DEFAULT ? FP_PROGRESS_POLL : x->cfg.progress;
  int64_t staging = 0;
  int64_t wd_n = 0;
  for (int32_t j = 0; j < x->nxops; j++) {
    const fp_xop *o = &x->xops[j];
    if (!is_comm(o)) continue;
    int64_t n = o->code == FP_OP_REDUCE_SCATTER_V ? o->tab_cnt[o->g] : o->n;
    if (staged(o)) staging += fpx_host_align(n * fpi_dtype_size(o->dtype));
  }
  for (int32_t c = 0; c < x->prog->ncomms; c++)
    if (x->prog->comms[c].size > wd_n) wd_n = x->prog->comms[c].size;
  char *stage = NULL;
  FPX_CHECK(fpx_host_prepare(x, &e->h, &ext_ops, mode, staging, &stage));
  e->eops = fpx_alloc(x, (size_t)x->nxops, sizeof *e->eops);
  e->groups = fpx_alloc(x, (size_t)x->prog->ncomms * FP_NSTREAMS, sizeof *e->groups);
  e->ar = fpx_alloc(x, FP_ALL_REDUCE_MAX, sizeof *e->ar);
  e->wd_msg = x->timeout_s > 0 ? fpx_alloc(x, (size_t)wd_n * 2 + 2, sizeof *e->wd_msg) : NULL;
  if (!e->eops || !e->groups || !e->ar || (x->timeout_s > 0 && !e->wd_msg))
    return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
  for (int64_t k = 0; k < (int64_t)x->prog->ncomms * FP_NSTREAMS; k++) e->groups[k] = -1;
  for (int32_t j = 0; j < x->nxops; j++) {
    fp_xop *o = &x->xops[j];
    if (!is_comm(o) || !staged(o)) continue;
    e->eops[j].staging = stage;
    stage += fpx_host_align((o->code == FP_OP_REDUCE_SCATTER_V ? o->tab_cnt[o->g] : o->n) * fpi_dtype_size(o->dtype));
  }
  return FP_OK;
}

/* every op's arguments, once the arena's pointers are set (after prepare) */
static void make_args(fp_exec *x, estate *e) {
  for (int32_t j = 0; j < x->nxops; j++) {
    fp_xop *o = &x->xops[j];
    if (!is_comm(o)) continue;
    eop *q = &e->eops[j];
    int64_t sz = fpi_dtype_size(o->dtype);
    fp_coll_args *a = &q->a;
    *a = (fp_coll_args){.dtype = (fp_elem)o->dtype, .group = -1, .index = o->g, .size = o->G, .count = o->n,
                        .src = o->src, .dst = o->dst, .root = o->root};
    switch (o->code) {
      case FP_OP_ALL_GATHER:
        a->coll = FP_COLL_ALL_GATHER;
        if (o->inplace) a->src = o->dst + o->g * o->n * sz;
        break;
      case FP_OP_ALL_GATHER_V:
        a->coll = FP_COLL_ALL_GATHER_V;
        a->counts = o->tab_cnt, a->displs = o->tab_off;
        a->count = o->tab_cnt[o->g];
        if (o->inplace) a->src = o->dst + o->tab_off[o->g] * sz;
        break;
      case FP_OP_REDUCE_SCATTER:
      case FP_OP_REDUCE_SCATTER_V:
        a->coll = o->code == FP_OP_REDUCE_SCATTER ? FP_COLL_REDUCE_SCATTER : FP_COLL_REDUCE_SCATTER_V;
        if (o->code == FP_OP_REDUCE_SCATTER_V) a->counts = o->tab_cnt, a->displs = o->tab_off, a->count = o->tab_cnt[o->g];
        if (q->staging) a->dst = q->staging;
        break;
      case FP_OP_ALL_REDUCE:
        a->coll = FP_COLL_ALL_REDUCE;
        if (o->inplace) a->src = o->dst;
        break;
      case FP_OP_BROADCAST: /* the root copies src into dst first (ext_issue) */
        a->coll = FP_COLL_BROADCAST;
        a->src = NULL;
        break;
      case FP_OP_REDUCE:
        a->coll = FP_COLL_REDUCE;
        if (o->inplace) a->src = o->dst;
        if (o->g != o->root) a->dst = NULL;
        break;
      case FP_OP_SEND:
        a->coll = FP_COLL_SEND, a->dst = NULL;
        a->root = (o->g + o->root) % o->G;
        break;
      case FP_OP_RECV:
        a->coll = FP_COLL_RECV, a->src = NULL;
        a->root = ((o->g - o->root) % o->G + o->G) % o->G;
        break;
      default: FP_ASSERT(!"not a communication op");
    }
  }
}

/* ---- agree: through the store, under the watchdog when there is one ---------------------- */
enum { V_VERDICT, V_RANK, V_ROOT_HASH, V_OTHER_HASH, V_MISSING, V_LIST, V_LEN = V_LIST + FPX_AGREE_LIST };

static fp_status ext_agree(fp_exec *x, fp_status local) {
  estate *e = es(x);
  if (!e) return local; /* no transport to agree through: prepare said why */
  e->seq = created++;
  double limit = x->timeout_s > 0 ? x->timeout_s : -1;
  uint64_t h = x->plan ? x->plan->hash : 0;
  int64_t hello[2] = {(int64_t)h, local != FP_OK};
  int64_t v[V_LEN] = {0};
  fpx_agreement a = {0};
  double t0 = fpx_now_us();
  int rc = 0;
  if (x->rank != 0) {
    rc = put(e, "hello", x->rank, hello, 2);
    if (rc == 0) rc = get(e, "verdict", 0, v, V_LEN, limit > 0 ? 2 * limit + 1 : -1);
    a.waited_s = (fpx_now_us() - t0) / 1e6;
    if (rc == 1) {
      a.verdict = FPX_AV_NO_ROOT;
      return fpx_agree_status(x, &a, local);
    }
  } else {
    v[V_VERDICT] = FPX_AV_OK;
    for (int64_t r = 1; r < x->world && rc == 0; r++) {
      int64_t in[2];
      double left = limit > 0 ? limit - (fpx_now_us() - t0) / 1e6 : -1;
      rc = get(e, "hello", r, in, 2, limit > 0 && left < 0 ? 0 : left);
      if (rc == 1) { /* did not join in time */
        rc = 0;
        if (v[V_VERDICT] != FPX_AV_TIMEOUT) v[V_VERDICT] = FPX_AV_TIMEOUT, v[V_MISSING] = 0;
        if (v[V_MISSING] < FPX_AGREE_LIST) v[V_LIST + v[V_MISSING]] = r;
        v[V_MISSING]++;
      } else if (rc == 0 && v[V_VERDICT] == FPX_AV_OK && in[1]) {
        v[V_VERDICT] = FPX_AV_FAILED, v[V_RANK] = r;
      } else if (rc == 0 && v[V_VERDICT] == FPX_AV_OK && (uint64_t)in[0] != h) {
        v[V_VERDICT] = FPX_AV_MISMATCH, v[V_RANK] = r, v[V_ROOT_HASH] = (int64_t)h, v[V_OTHER_HASH] = in[0];
      }
    }
    if (rc == 0 && v[V_VERDICT] != FPX_AV_TIMEOUT && local != FP_OK) v[V_VERDICT] = FPX_AV_FAILED, v[V_RANK] = 0;
    if (rc == 0) rc = put(e, "verdict", 0, v, V_LEN);
  }
  if (rc != 0) {
    if (local != FP_OK) return local;
    char s[768];
    terr(e->t, s, sizeof s);
    return fpx_fail(x, FP_ERR_BACKEND, "transport: the store failed in the executor's agreement: %s", s);
  }
  a.verdict = (fpx_verdict)v[V_VERDICT];
  a.rank = v[V_RANK];
  a.root_hash = (uint64_t)v[V_ROOT_HASH], a.other_hash = (uint64_t)v[V_OTHER_HASH];
  a.missing = v[V_MISSING];
  memcpy(a.list, v + V_LIST, sizeof a.list);
  a.waited_s = (fpx_now_us() - t0) / 1e6;
  return fpx_agree_status(x, &a, local);
}

/* ---- connect: the groups, then the progress thread ----------------------------------------- */
static fp_status ext_connect(fp_exec *x) {
  estate *e = es(x);
  const fp_prog *p = x->prog;
  for (int32_t c = 0; c < p->ncomms; c++) {
    bool used[FP_NSTREAMS] = {false};
    for (int32_t i = 0; i < p->nops; i++)
      if (p->ops[i].comm == c && fpi_op_class(p->ops[i].code) == FP_OPC_COMM) used[p->ops[i].stream] = true;
    for (int s = 0; s < FP_NSTREAMS; s++) {
      if (!used[s]) continue;
      int64_t *gr = &e->groups[(int64_t)c * FP_NSTREAMS + s];
      int rc = e->t->new_group(e->t->ctx, p->comms[c].size, p->comms[c].stride, gr);
      if (rc != 0) return tfail(x, "new_group", rc);
    }
  }
  int rc = e->t->new_group(e->t->ctx, x->world, 1, &e->world);
  if (rc != 0) return tfail(x, "new_group", rc);
  make_args(x, e);
  for (int32_t j = 0; j < x->nxops; j++)
    if (is_comm(&x->xops[j])) e->eops[j].a.group = e->groups[(int64_t)x->xops[j].comm * FP_NSTREAMS + x->xops[j].stream];
  return fpx_host_start(x, &e->h);
}

static fp_status ext_run_segment(fp_exec *x, int32_t seg) { return fpx_host_run_segment(x, &es(x)->h, seg); }

static fp_status ext_sync(fp_exec *x) { return fpx_host_sync(x, &es(x)->h); }

/* fp_exec_all_reduce_f64: on the world group, polled; the wait drives the
 * plan's streams too (in poll mode nothing else would issue what another
 * rank's hook may be waiting for) */
static fp_status ext_all_reduce_f64(fp_exec *x, double *v, int n) {
  estate *e = es(x);
  fpx_host *h = &e->h;
  memcpy(e->ar, v, (size_t)n * sizeof *v);
  fp_coll_args a = {.coll = FP_COLL_ALL_REDUCE_F64, .dtype = FP_ELEM_U8, .group = e->world, .index = x->rank,
                    .size = x->world, .count = n, .src = e->ar, .dst = e->ar};
  int64_t req = -1;
  fpx_host_take(h);
  int rc = e->t->start(e->t->ctx, &a, &req);
  fpx_host_give(h);
  if (rc != 0) return tfail(x, "all_reduce_f64", rc);
  double t0 = fpx_now_us();
  for (int done = 0, polls = 0;; polls++) {
    fpx_host_take(h);
    rc = e->t->test(e->t->ctx, req, &done);
    if (rc == 0 && !done) fpx_host_poll(x, h);
    fpx_host_give(h);
    if (rc != 0) return tfail(x, "all_reduce_f64", rc);
    if (done) break;
    sched_yield();
    if (x->timeout_s > 0 && polls % 64 == 0 && fpx_now_us() - t0 > x->timeout_s * 1e6) {
      char why[256];
      snprintf(why, sizeof why,
               "watchdog: fp_exec_all_reduce_f64 (or a refit's agreement) waited %g s for the other ranks (timeout "
               "%g s): a rank did not join", (fpx_now_us() - t0) / 1e6, x->timeout_s);
      return fpx_host_time_out(x, h, why);
    }
  }
  memcpy(v, e->ar, (size_t)n * sizeof *v);
  x->stats.collectives++;
  x->stats.bytes_moved += (int64_t)n * (int64_t)sizeof *v;
  return FP_OK;
}

static fp_status ext_write(fp_exec *x, char *dst, int64_t dpitch, const char *src, int64_t spitch, int64_t width,
                           int64_t rows) {
  (void)x;
  for (int64_t r = 0; r < rows; r++) memcpy(dst + r * dpitch, src + r * spitch, (size_t)width);
  return FP_OK;
}

/* after a watchdog the transport may still hold requests over the arena
 * and the reduction buffer: both are kept (fpx_keep_for_mpi) */
static void ext_destroy(fp_exec *x) {
  estate *e = es(x);
  if (!e) return;
  if (!x->broken && x->created) ext_sync(x);
  fpx_host_stop(&e->h);
  bool timed_out = e->h.timed_out;
  fpx_host_free(&e->h);
  if (timed_out) fpx_keep_for_mpi(e->ar);
  else fpx_free(e->ar);
  fpx_free(e->eops);
  fpx_free(e->groups);
  fpx_free(e->wd_msg);
  fpx_free(e);
  x->bks = NULL;
}

const fp_backend_impl fp_backend_external = {
    .name = "external",
    .prepare = ext_prepare,
    .agree = ext_agree,
    .connect = ext_connect,
    .run_segment = ext_run_segment,
    .sync = ext_sync,
    .write = ext_write,
    .all_reduce_f64 = ext_all_reduce_f64,
    .destroy = ext_destroy,
};
