/* xfer.c - fp_xfer_run: a transfer program (ir/xfer.h, docs/reshard.md)
 * run between a FROM executor and a TO executor; a process may hold a rank
 * of either, both or neither. Both executors are on one backend: MPI (here)
 * or NCCL (xfer_nccl.c).
 *
 * Three phases, like a refit: (1) local checks (the executors' plans are the
 * transfer's FROM and TO, their ranks are this process's, the communicator
 * is big enough, both between steps, staging allocated; NCCL: the device,
 * the stream and the order it can run); (2) agreement over the caller's
 * communicator (agree.c: point to point through process 0, under the
 * executors' watchdog timeout) of the outcome, the transfer's identity and
 * the backend, so if any process fails its checks every process fails and
 * none writes, and one that never comes is named; (3)
 * the ops of this process, over the transfer's own duplicate of the
 * communicator (kept on the handle, with the staging, between runs). On
 * MPI, in order: sends and recvs posted without blocking (MPI_Isend/MPI_Irecv of bytes, one tag: MPI keeps each pair's
 * order, which is the order the verifier matched), local copies, casts and
 * MXFP8 quantizes with the reference kernels (kernels/kernels.h); a local
 * op reading staging or TO bytes first waits for every send and recv
 * posted so far (fpi_tx_waits: the verifier's X4 simulates this wait);
 * then all requests complete. Receives land in TO's arena at the plan's
 * fixed addresses. A failure in phase 3 (an MPI or NCCL error) leaves TO's
 * need regions partly written; nothing outside them is touched. */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "backend_impl.h"
#include "ir/xfer.h"
#include "kernels/kernels.h"
#include "xfer_nccl.h"

/* What a transfer keeps between runs on MPI (fpx_xfer_state.mpi): its duplicate of
 * the caller's communicator (made again only when the caller's group
 * changes), the staging and the request array (grown, never shrunk). With
 * these and the layout checked once, a run of 64 params of 16 KiB went
 * from 1.55 to 1.08 times raw MPI point-to-point (reshard_bench). */
typedef struct xmpi {
  MPI_Comm dup;        /* MPI_COMM_NULL until made */
  MPI_Group group;     /* the caller's group dup was made from */
  char *stage;
  size_t stage_cap;
  MPI_Request *req;
  size_t req_cap;
} xmpi;

static void xmpi_free(xmpi *m) {
  if (!m) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && m->dup != MPI_COMM_NULL) { /* after MPI_Finalize nothing MPI may be freed (nor leaks) */
    MPI_Comm_free(&m->dup);
    MPI_Group_free(&m->group);
  }
  free(m->stage);
  free(m->req);
  free(m);
}

/* buf grown to at least n bytes (contents not kept); false: out of memory */
static bool reserve(void **buf, size_t *cap, size_t n) {
  if (n <= *cap && *buf) return true;
  void *p = malloc(n ? n : 1);
  if (!p) return false;
  free(*buf);
  *buf = p;
  *cap = n;
  return true;
}

fp_status fpx_xfer_fail(fp_xfer *t, fp_status st, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  char *m = strdup(buf);
  if (m) {
    free(t->msg);
    t->msg = m;
  }
  return st;
}

const char *fp_xfer_errmsg(const fp_xfer *t) { return t && t->msg ? t->msg : ""; }
struct fpx_xfer_state *fpx_xfer_state(fp_xfer *t) {
  if (!t->run) t->run = calloc(1, sizeof *t->run);
  return t->run;
}

void fp_xfer_free(fp_xfer *t) {
  if (!t) return;
  if (t->run) {
    if (t->run->bk && t->run->bk_free) t->run->bk_free(t->run->bk);
    xmpi_free(t->run->mpi);
    free(t->run);
  }
  if (t->arena) fpi_arena_free(t->arena);
  free(t->msg);
  free(t);
}

fp_status fp_xfer_load(const char *path, fp_xfer **out) {
  if (!out) return FP_ERR_ARG;
  fp_xfer *t = calloc(1, sizeof *t);
  *out = t;
  if (!t) return FP_ERR_NOMEM;
  if (!path) return fpx_xfer_fail(t, FP_ERR_ARG, "fp_xfer_load: path is NULL");
  t->arena = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  fp_src src;
  if (fpi_src_read(t->arena, &d, path, &src)) t->tx = fpi_tx_read(t->arena, &d, &src);
  fp_status st = t->tx ? FP_OK : FP_ERR_PLAN;
  if (!t->tx) {
    char *m = strdup(d.buf ? d.buf : "fp_xfer_load: failed");
    if (m) {
      size_t n = strlen(m);
      if (n && m[n - 1] == '\n') m[n - 1] = 0;
      free(t->msg);
      t->msg = m;
    }
  }
  fpi_diag_free(&d);
  return st;
}

fp_status fp_xfer_get_info(const fp_xfer *t, fp_xfer_info *out) {
  if (!t || !out || !t->tx) return FP_ERR_ARG;
  const fp_tx *x = t->tx;
  *out = (fp_xfer_info){x->from_world, x->to_world, x->to_offset, x->nprocs, x->nops, x->wire_bytes, x->lower_bound,
                        x->local_bytes, x->max_send_bytes, x->max_recv_bytes, x->from_offset};
  return FP_OK;
}

static fp_status check_exec(fp_xfer *t, fp_exec *x, const char *role, uint64_t hash, int64_t rank) {
  if (!x) return fpx_xfer_fail(t, FP_ERR_ARG, "xfer: process %lld holds %s rank %lld but no %s executor was given",
                       (long long)(rank + (role[0] == 'T' ? t->tx->to_offset : t->tx->from_offset)), role,
                       (long long)rank, role);
  if (!x->created || x->broken) return fpx_xfer_fail(t, FP_ERR_ARG, "xfer: the %s executor is not usable", role);
  if (x->cfg.backend != FP_BACKEND_MPI && x->cfg.backend != FP_BACKEND_NCCL)
    return fpx_xfer_fail(t, FP_ERR_ARG, "xfer: the %s executor's backend runs no transfers", role);
  if (x->plan->hash != hash)
    return fpx_xfer_fail(t, FP_ERR_MISMATCH, "xfer: the %s executor runs plan %016llx, the transfer was compiled for %016llx",
                 role, (unsigned long long)x->plan->hash, (unsigned long long)hash);
  if (x->rank != rank)
    return fpx_xfer_fail(t, FP_ERR_ARG, "xfer: the %s executor is rank %lld, this process holds %s rank %lld", role,
                 (long long)x->rank, role, (long long)rank);
  if (x->cursor != 0 || x->in_hook)
    return fpx_xfer_fail(t, FP_ERR_ORDER, "xfer: the %s executor is in the middle of a step; transfer between steps", role);
  return FP_OK;
}

/* the full element at byte off of param xp's shard tensor at arena offset
 * base (elements of sz bytes): off on an element's first byte, inside one
 * run together with the bytes after it; -1 otherwise */
static int64_t shard_elem(const fp_xparam *xp, int64_t base, int64_t sz, int64_t off, int64_t bytes) {
  const fp_extent *e = &xp->v.shard;
  for (int64_t k = 0; k < e->runs && base >= 0; k++) {
    int64_t a = base + k * e->shard_stride * sz, b = a + fpx_extent_run(e, k) * sz;
    if (off >= a && off + bytes <= b) return (off - a) % sz ? -1 : e->full_off + k * e->full_stride + (off - a) / sz;
  }
  return -1;
}

/* the full element at byte off of plane `plane` of param xp on this rank,
 * the bytes [off, off+bytes) of dtype dt inside it; -1 when they are not.
 * Plane 0: one run of its main shard (main dtype mdt) or, where weight_ok,
 * its persistent compute weight, or its MXFP8 scales (e8m0, which its plan
 * keeps as MXFP8; the element is then the block); plane k + 1: one run of
 * optimizer state k (k below `states`, the state dtype) */
static int64_t plane_elem(const fp_exec *x, const fp_xparam *xp, fp_dtype mdt, int plane, fp_dtype dt, int64_t off,
                          int64_t bytes, bool weight_ok, int states) {
  if (xp->host[2]) return -1; /* offloaded: transfers move device arenas only */
  if (plane > 0) {
    int k = plane - 1;
    if (k >= states || k >= 2 || dt != x->prog->optim_dtype) return -1;
    return shard_elem(xp, xp->off[4 + k], fpi_dtype_size(x->prog->optim_dtype), off, bytes);
  }
  int64_t e = dt == mdt ? shard_elem(xp, xp->off[2], fpi_dtype_size(mdt), off, bytes) : -1;
  if (e < 0 && weight_ok && xp->weight_persistent && xp->off[0] >= 0) {
    int64_t sz = fp_elem_size(xp->v.weight.dtype), a = xp->off[0], b = a + xp->v.weight.numel * sz;
    if (off >= a && off + bytes <= b && (off - a) % sz == 0) e = (off - a) / sz;
  }
  if (e < 0 && dt == FP_E8M0 && xp->off[6] >= 0 && !xp->host[6] && off >= xp->off[6] &&
      off + bytes <= xp->off[6] + xp->v.scales.numel)
    e = off - xp->off[6];
  return e;
}

/* the executor's index of each of the transfer's params (-1: it has none
 * by that name), through a name map: O(params), where a scan per op was
 * O(ops x params) */
static int32_t *param_map(const fp_tx *tx, const fp_exec *x) {
  int32_t *map = malloc(((size_t)tx->nparams + 1) * sizeof *map);
  fp_arena *a = fpi_arena_new();
  FP_ASSERT(map && a);
  fp_namemap m;
  fpi_namemap_init(&m, a, x->prog->nparams);
  for (int32_t i = 0; i < x->prog->nparams; i++) fpi_namemap_put(&m, x->prog->params[i].name, i);
  for (int32_t j = 0; j < tx->nparams; j++) {
    int32_t q = fpi_namemap_get(&m, tx->params[j].name, strlen(tx->params[j].name));
    map[j] = q >= 0 ? q : -1;
  }
  fpi_arena_free(a);
  return map;
}

/* a dequantize's scales read from FROM (a param FROM keeps as MXFP8) lie
 * in that param's scales, at its slice's first block */
static bool from_scales_ok(const fp_prog *p, int32_t q, const fp_tx_op *o) {
  const fp_ir_param *f = &p->params[q];
  if (f->main_dtype != FP_E4M3 || f->scales.buf < 0 || o->kind != FP_TX_DEQUANT) return false;
  int64_t numel = 1;
  for (int k = 0; k < f->ndim; k++) numel *= f->shape[k];
  int64_t base = p->bufs[f->scales.buf].offset + f->scales.off, nb = (numel + 31) / 32;
  return o->aux.off == base + o->full_off / 32 && o->full_off / 32 + fpi_tx_nscales(o->full_off, o->n) <= nb + 1 &&
         (o->full_off + o->n + 31) / 32 <= nb;
}

/* the bytes a transfer writes of plane `plane` of param q of this TO
 * rank: plane 0 its main shard (main dtype), its MXFP8 scales where its
 * plan keeps it as MXFP8 and its persistent compute weight where that is
 * not the main weights; plane k + 1 optimizer state k */
static int64_t plane_bytes(const fp_exec *x, int32_t q, int plane) {
  const fp_xparam *xp = &x->params[q];
  const fp_ir_param *p = &x->prog->params[q];
  int64_t n = fp_extent_elems(&xp->v.shard);
  if (plane > 0) return plane <= 2 && xp->off[4 + plane - 1] >= 0 ? n * fpi_dtype_size(x->prog->optim_dtype) : 0;
  int64_t b = n * fpi_dtype_size(p->main_dtype);
  if (xp->off[6] >= 0) b += xp->v.scales.numel;
  if (p->weight.buf >= 0 && p->weight.buf != p->main.buf && x->prog->bufs[p->weight.buf].kind == FP_BUF_PERSISTENT)
    b += xp->v.weight.numel * fp_elem_size(xp->v.weight.dtype);
  return b;
}

static const char *plane_name(unsigned plane) {
  return plane == 0 ? "main weights" : plane == 1 ? "optimizer state 0" : plane == 2 ? "optimizer state 1" : "optimizer state";
}

/* A transfer read from a file names byte ranges; check them against the
 * executors' own layouts: every FROM read inside one run of what this FROM
 * rank holds of the plane it names (the main weights in their main dtype
 * or, for e8m0, a kept MXFP8 param's scales; an optimizer state), every TO
 * need region inside one run of that param's plane, persistent compute
 * weight or MXFP8 scales on this TO rank - and each starting at the element
 * (the block, for scales) it says. The verifier, which has no layout of a
 * plan read from a file, proved the values from those labels (X7); here
 * they are held to the layouts. (A compiled transfer passes by
 * construction.) The layouts depend
 * only on the plans and the ranks, which check_exec pins to the transfer's,
 * so a process checks once: later runs with its rank skip it. */
static fp_status check_layout_maps(fp_xfer *t, fp_exec *from, fp_exec *to, int me, const int32_t *fmap,
                                   const int32_t *tmap) {
  const fp_tx *tx = t->tx;
  /* weights+optimizer also moves each optimizer state the plans hold */
  bool optim = tx->what && !strcmp(tx->what, "weights+optimizer");
  int sf = optim && from ? fpi_optim_states(from->prog->optim) : 0, st = optim && to ? fpi_optim_states(to->prog->optim) : 0;
  int32_t g = fpi_tx_prog(tx, me); /* the program this process runs (its own, or the one it repeats) */
  for (int32_t i = tx->first[g]; from && i < tx->first[g + 1]; i++) {
    const fp_tx_op *o = &tx->ops[i];
    if (o->src.space != FP_SP_FROM) continue;
    int32_t q = fmap[o->param];
    int64_t e = q < 0 ? -1 : plane_elem(from, &from->params[q], from->prog->params[q].main_dtype, (int)o->plane, o->sdtype,
                                         o->src.off, fpi_tx_src_bytes(tx, o), false, sf);
    if (e < 0)
      return fpx_xfer_fail(t, FP_ERR_PLAN, "xfer: op %d reads FROM bytes [%lld, +%lld) that are not this rank's %s %s "
                   "of '%s'", i, (long long)o->src.off, (long long)fpi_tx_src_bytes(tx, o), fpi_dtype_name(o->sdtype),
                   plane_name(o->plane), tx->params[o->param].name);
    /* and from the element it says: X7 proved the values from these labels */
    int64_t want = o->sdtype == FP_E8M0 ? o->full_off / FP_MX_BLOCK : o->full_off;
    if (e != want)
      return fpx_xfer_fail(t, FP_ERR_PLAN, "xfer: op %d reads FROM bytes from %lld, %s %lld of this rank's %s of '%s', "
                   "not %s %lld as it says", i, (long long)o->src.off, o->sdtype == FP_E8M0 ? "block" : "element",
                   (long long)e, plane_name(o->plane), tx->params[o->param].name,
                   o->sdtype == FP_E8M0 ? "block" : "element", (long long)want);
    if (o->aux.space == FP_SP_FROM && !from_scales_ok(from->prog, q, o))
      return fpx_xfer_fail(t, FP_ERR_PLAN, "xfer: op %d reads FROM bytes [%lld, +%lld) that are not the MXFP8 scales of "
                   "'%s' in this rank's FROM plan", i, (long long)o->aux.off,
                   (long long)fpi_tx_nscales(o->full_off, o->n), tx->params[o->param].name);
  }
  for (int32_t k = tx->need_first[g]; to && k < tx->need_first[g + 1]; k++) {
    const fp_tx_region *r = &tx->need[k];
    int32_t q = tmap[r->param];
    int64_t e = q < 0 ? -1 : plane_elem(to, &to->params[q], to->prog->params[q].main_dtype, r->plane, r->dtype, r->off,
                                         r->bytes, true, st);
    if (e < 0)
      return fpx_xfer_fail(t, FP_ERR_PLAN, "xfer: TO bytes [%lld, +%lld) the transfer writes are not this rank's %s "
                   "of '%s'", (long long)r->off, (long long)r->bytes, r->plane ? plane_name((unsigned)r->plane) : "weights",
                   tx->params[r->param].name);
    if (e != r->full_off)
      return fpx_xfer_fail(t, FP_ERR_PLAN, "xfer: TO bytes from %lld the transfer writes are %s %lld of this rank's %s of "
                   "'%s', not %s %lld as it says", (long long)r->off, r->dtype == FP_E8M0 ? "block" : "element",
                   (long long)e, plane_name((unsigned)r->plane), tx->params[r->param].name,
                   r->dtype == FP_E8M0 ? "block" : "element", (long long)r->full_off);
  }
  /* and every byte of this TO rank's weights (and states, when they move)
   * is some need region's: regions lie in them and never overlap (X2), so
   * their bytes add up. A file with a region dropped, and the ops that fill
   * it, would leave those weights as they were */
  int64_t *got = to ? calloc((size_t)to->prog->nparams * (size_t)(st + 1) + 1, sizeof *got) : NULL;
  if (to && !got) return fpx_xfer_fail(t, FP_ERR_NOMEM, "xfer: out of host memory checking the layouts");
  for (int32_t k = tx->need_first[g]; to && k < tx->need_first[g + 1]; k++)
    if (tx->need[k].plane <= st) got[(int64_t)tmap[tx->need[k].param] * (st + 1) + tx->need[k].plane] += tx->need[k].bytes;
  for (int32_t q = 0; to && q < to->prog->nparams; q++)
    for (int w = 0; w <= st && !to->params[q].host[2]; w++) {
      int64_t want = plane_bytes(to, q, w), have = got[(int64_t)q * (st + 1) + w];
      if (have != want) {
        free(got);
        return fpx_xfer_fail(t, FP_ERR_PLAN, "xfer: this TO rank holds %lld bytes of the %s of '%s'; the transfer writes "
                             "%lld of them", (long long)want, plane_name((unsigned)w), to->prog->params[q].name,
                             (long long)have);
      }
    }
  free(got);
  return FP_OK;
}

static fp_status check_layout(fp_xfer *t, fp_exec *from, fp_exec *to, int me) {
  if (t->run && t->run->checked == me + 1) return FP_OK;
  int32_t *fmap = from ? param_map(t->tx, from) : NULL, *tmap = to ? param_map(t->tx, to) : NULL;
  fp_status st = check_layout_maps(t, from, to, me, fmap, tmap);
  free(fmap);
  free(tmap);
  if (st == FP_OK && fpx_xfer_state(t)) t->run->checked = me + 1; /* (no memory: checked again next run) */
  return st;
}

static char *at(char *from, char *to, char *stage, fp_tx_ref r) {
  switch (r.space) {
    case FP_SP_FROM: return from + r.off;
    case FP_SP_TO: return to + r.off;
    case FP_SP_STAGE: return stage + r.off;
    default: return NULL;
  }
}

/* MXFP8 of a slice starting at flat index full_off: its head (up to the next
 * block boundary) is a block of its own (xfer.h) */
static void quant(const fp_tx_op *o, uint8_t *dst, uint8_t *sc, const char *src) {
  int64_t h = fpi_tx_head(o->full_off, o->n);
  if (h > 0) fpk_quantize_mxfp8(dst, sc, src, o->sdtype, h);
  fpk_quantize_mxfp8(dst + h, sc + (h > 0), src + h * fpi_dtype_size(o->sdtype), o->sdtype, o->n - h);
}
/* the two steps of a split block's MXFP8 (xfer.h), blocks as quant's */
static void scales(const fp_tx_op *o, uint8_t *sc, const char *src) {
  int64_t h = fpi_tx_head(o->full_off, o->n);
  if (h > 0) fpk_mxfp8_scales(sc, src, o->sdtype, h);
  fpk_mxfp8_scales(sc + (h > 0), src + h * fpi_dtype_size(o->sdtype), o->sdtype, o->n - h);
}
static void quant_at(const fp_tx_op *o, uint8_t *dst, const uint8_t *sc, const char *src) {
  int64_t h = fpi_tx_head(o->full_off, o->n);
  if (h > 0) fpk_quantize_mxfp8_scaled(dst, sc, src, o->sdtype, h);
  fpk_quantize_mxfp8_scaled(dst + h, sc + (h > 0), src + h * fpi_dtype_size(o->sdtype), o->sdtype, o->n - h);
}
static void dequant(const fp_tx_op *o, char *dst, const uint8_t *src, const uint8_t *sc) {
  int64_t h = fpi_tx_head(o->full_off, o->n);
  if (h > 0) fpk_dequantize_mxfp8(dst, o->dtype, src, sc, h);
  fpk_dequantize_mxfp8(dst + h * fpi_dtype_size(o->dtype), o->dtype, src + h, sc + (h > 0), o->n - h);
}

/* The transfer's watchdog: its executors' timeout (the larger), else
 * FLEXPLAN_TIMEOUT for a process holding neither; 0: none */
static double xfer_timeout(const fp_exec *from, const fp_exec *to) {
  double t = 0;
  if (from && from->timeout_s > t) t = from->timeout_s;
  if (to && to->timeout_s > t) t = to->timeout_s;
  if (from || to) return t;
  const char *e = getenv("FLEXPLAN_TIMEOUT");
  char *end;
  double v = e && *e ? strtod(e, &end) : 0;
  return e && *e && !*end && v > 0 && v <= 1e9 ? v : 0;
}

/* Complete the posted requests req[from, n). With a timeout, polled: past
 * it, the pending ones are abandoned (freed; *abandoned set, so the caller
 * keeps the memory they may still touch) and the error names their peers.
 * Post k is the k-th send or recv of this process's ops [lo, hi). */
static fp_status wait_posted(fp_xfer *t, int32_t lo, int32_t hi, MPI_Request *req, int from, int n, double timeout_s,
                             bool *abandoned) {
  if (from >= n) return FP_OK;
  if (timeout_s <= 0)
    return MPI_Waitall(n - from, req + from, MPI_STATUSES_IGNORE) == MPI_SUCCESS
               ? FP_OK : fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: MPI failed completing the transfer");
  double t0 = fpx_now_us();
  for (int polls = 0;; polls++) {
    int flag = 0;
    if (MPI_Testall(n - from, req + from, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
      return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: MPI failed completing the transfer");
    if (flag) return FP_OK;
    if (polls % 64 == 0 && fpx_now_us() - t0 > timeout_s * 1e6) break;
    sched_yield();
  }
  /* which are still pending: Testsome sets the completed ones to MPI_REQUEST_NULL */
  int outcount = 0;
  int *idx = malloc((size_t)(n - from) * sizeof *idx);
  if (idx) MPI_Testsome(n - from, req + from, &outcount, idx, MPI_STATUSES_IGNORE);
  free(idx);
  /* the peers they wait for, each (direction, peer) once, the first 8 named */
  char peers[400] = "";
  size_t len = 0;
  int named = 0, pending = 0;
  bool more = false;
  for (int32_t i = lo, k = 0; i < hi && k < n; i++) {
    const fp_tx_op *o = &t->tx->ops[i];
    if (o->kind != FP_TX_SEND && o->kind != FP_TX_RECV) continue;
    if (k++ < from || req[k - 1] == MPI_REQUEST_NULL) continue;
    pending++;
    MPI_Request_free(&req[k - 1]);
    char one[48];
    snprintf(one, sizeof one, " %s process %d,", o->kind == FP_TX_SEND ? "a send to" : "a receive from", (int)o->peer);
    if (strstr(peers, one)) continue;
    if (named == 8) {
      more = true;
      continue;
    }
    memcpy(peers + len, one, strlen(one) + 1);
    len += strlen(one);
    named++;
  }
  if (len) peers[len - 1] = 0; /* the last comma */
  *abandoned = true;
  return fpx_xfer_fail(t, FP_ERR_TIMEOUT,
                       "watchdog: fp_xfer_run: %d transfer(s) did not complete within %g s (timeout %g s):%s%s; the "
                       "TO weights are partly written and both executors are unusable",
                       pending, (fpx_now_us() - t0) / 1e6, timeout_s, peers, more ? " and more" : "");
}

/* A transform's ops on the MPI backend (host memory). prep_send: the
 * sender's wire tensors from its FROM slice; the alignment between them is
 * zeroed, so the staging's bytes do not depend on earlier runs. */
fp_status fpx_xf_prep_send(fp_xfer *t, int32_t i, char *dst, const char *src) {
  const fp_tx *tx = t->tx;
  const fp_tx_op *o = &tx->ops[i];
  const fpi_xform *xf = t->xf[tx->params[o->param].xf];
  void *w[FP_TX_MAX_WIRES];
  memset(dst, 0, (size_t)fpi_tx_wire_at(tx, o, o->nwire));
  for (int k = 0; k < (int)o->nwire; k++) w[k] = dst + fpi_tx_wire_at(tx, o, k);
  fpi_xf_param p = {tx->params[o->param].name, tx->params[o->param].numel, o->sdtype, o->dtype};
  char err[256] = "";
  if (xf->send(xf->ctx, &p, o->full_off, o->n, src, w, err, sizeof err)) return FP_OK;
  return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: op %d (process %d, prep_send): transform '%s': prepare_send for param "
                       "'%s' elements [%lld,%lld) failed: %s", i, o->proc, xf->name, p.name, (long long)o->full_off,
                       (long long)(o->full_off + o->n), err[0] ? err : "(no message)");
}

#define GUARD_BYTE 0xA5

/* finalize: the transform writes a bounded scratch (the slice's n elements
 * between two guards of FP_TX_GUARD bytes, after the wire tensors in
 * staging); the guards are checked, then the slice is copied into TO. A
 * transform that writes outside its slice, or fails, leaves TO's bytes of
 * it untouched and fails the run naming it. */
fp_status fpx_xf_finalize(fp_xfer *t, int32_t i, char *dst, char *src) {
  const fp_tx *tx = t->tx;
  const fp_tx_op *o = &tx->ops[i];
  const fpi_xform *xf = t->xf[tx->params[o->param].xf];
  const void *w[FP_TX_MAX_WIRES];
  for (int k = 0; k < (int)o->nwire; k++) w[k] = src + fpi_tx_wire_at(tx, o, k);
  size_t len = (size_t)(o->n * fpi_dtype_size(o->dtype));
  unsigned char *g = (unsigned char *)src + fpi_tx_scratch_at(tx, o), *body = g + FP_TX_GUARD;
  memset(g, GUARD_BYTE, FP_TX_GUARD);
  memset(body + len, GUARD_BYTE, FP_TX_GUARD);
  fpi_xf_param p = {tx->params[o->param].name, tx->params[o->param].numel, o->sdtype, o->dtype};
  char err[256] = "";
  bool ok = xf->finalize(xf->ctx, &p, o->full_off, o->n, w, body, err, sizeof err);
  int64_t before = -1, after = -1; /* the farthest guard byte written on each side */
  for (int k = 0; k < FP_TX_GUARD; k++) {
    if (g[k] != GUARD_BYTE && before < 0) before = FP_TX_GUARD - k;
    if (body[len + (size_t)k] != GUARD_BYTE) after = k + 1;
  }
  if (before >= 0 || after >= 0)
    return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: op %d (process %d, finalize): transform '%s': finalize_recv for "
                         "param '%s' elements [%lld,%lld) wrote outside its slice (%lld bytes before it, %lld after); "
                         "nothing of the slice was written to TO", i, o->proc, xf->name, p.name,
                         (long long)o->full_off, (long long)(o->full_off + o->n), (long long)(before < 0 ? 0 : before),
                         (long long)(after < 0 ? 0 : after));
  if (!ok)
    return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: op %d (process %d, finalize): transform '%s': finalize_recv for "
                         "param '%s' elements [%lld,%lld) failed: %s", i, o->proc, xf->name, p.name,
                         (long long)o->full_off, (long long)(o->full_off + o->n), err[0] ? err : "(no message)");
  memcpy(dst, body, len);
  return FP_OK;
}

/* phase 3 on the MPI backend: this process's ops in order */
static fp_status run_mpi(fp_xfer *t, int me, MPI_Comm c, char *fa, char *ta, char *stage, MPI_Request *req,
                         double timeout_s, bool *abandoned) {
  const fp_tx *tx = t->tx;
  int32_t g = me < tx->nprocs ? fpi_tx_prog(tx, me) : 0;
  int32_t lo = me < tx->nprocs ? tx->first[g] : 0, hi = me < tx->nprocs ? tx->first[g + 1] : 0;
  int npost = 0, waited = 0;
  /* a transform's failure stops no op (every send and recv still posts, so
   * no peer waits forever): this process's run fails with it at the end */
  fp_status st = FP_OK, bad = FP_OK;
  for (int32_t i = lo; i < hi && st == FP_OK; i++) {
    const fp_tx_op *o = &tx->ops[i];
    char *dst = at(fa, ta, stage, o->dst), *src = at(fa, ta, stage, o->src), *aux = at(fa, ta, stage, o->aux);
    int rc = MPI_SUCCESS;
    if (fpi_tx_waits(o) && waited < npost) {
      st = wait_posted(t, lo, hi, req, waited, npost, timeout_s, abandoned);
      waited = npost;
      if (st != FP_OK) break;
    }
    switch (o->kind) {
      case FP_TX_COPY: { /* with the copies that continue it, as one */
        int64_t n;
        int32_t end = fpi_tx_copy_run(tx, i, hi, &n);
        if (o->dtype == o->sdtype) memmove(dst, src, (size_t)(n * fpi_dtype_size(o->dtype))); /* (e8m0 too) */
        else fpk_cast(dst, o->dtype, src, o->sdtype, n);
        i = end - 1;
        break;
      }
      case FP_TX_QUANT: quant(o, (uint8_t *)dst, (uint8_t *)aux, src); break;
      case FP_TX_DEQUANT: dequant(o, dst, (const uint8_t *)src, (const uint8_t *)aux); break;
      case FP_TX_SCALES: scales(o, (uint8_t *)dst, src); break;
      case FP_TX_MAX: fpk_max_u8((uint8_t *)dst, (const uint8_t *)src, (const uint8_t *)aux, o->n); break;
      case FP_TX_QUANT_AT: quant_at(o, (uint8_t *)dst, (const uint8_t *)aux, src); break;
      case FP_TX_PREP_SEND: bad = bad != FP_OK ? bad : fpx_xf_prep_send(t, i, dst, src); break;
      case FP_TX_FINALIZE: bad = bad != FP_OK ? bad : fpx_xf_finalize(t, i, dst, src); break;
      case FP_TX_SEND:
        rc = MPI_Isend(src, (int)(o->n * fpi_dtype_size(o->dtype)), MPI_BYTE, o->peer, 7, c, &req[npost++]);
        break;
      case FP_TX_RECV:
        rc = MPI_Irecv(dst, (int)(o->n * fpi_dtype_size(o->dtype)), MPI_BYTE, o->peer, 7, c, &req[npost++]);
        break;
      default: break;
    }
    if (rc != MPI_SUCCESS) st = fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: MPI failed at op %d", i);
  }
  if (st != FP_OK && !*abandoned && waited < npost) /* an MPI failure: what was posted still completes first */
    MPI_Waitall(npost - waited, req + waited, MPI_STATUSES_IGNORE);
  else if (st == FP_OK)
    st = wait_posted(t, lo, hi, req, waited, npost, timeout_s, abandoned);
  return st != FP_OK ? st : bad;
}

/* the agreement said no: this process's error (a failure of its own checks stays its message) */
static fp_status agree_failed(fp_xfer *t, fp_status st, const fpx_agreement *a, double timeout_s) {
  char list[160];
  switch (a->verdict) {
    case FPX_AV_TIMEOUT:
      fpx_agree_list(a, list, sizeof list);
      return fpx_xfer_fail(t, FP_ERR_TIMEOUT,
                           "watchdog: fp_xfer_run: %" PRId64 " process(es) did not join the processes' agreement "
                           "within %g s (timeout): did not join: %s; nothing was written%s%.600s",
                           a->missing, timeout_s, list, st != FP_OK ? "; this process failed its checks too: " : "",
                           st != FP_OK && t->msg ? t->msg : "");
    case FPX_AV_NO_ROOT:
      return st != FP_OK ? st
                         : fpx_xfer_fail(t, FP_ERR_TIMEOUT,
                                         "watchdog: fp_xfer_run: the processes' agreement got no answer from process 0 "
                                         "within %g s (timeout %g s): process 0 did not join; nothing was written",
                                         a->waited_s, timeout_s);
    case FPX_AV_FAILED:
      return st != FP_OK ? st
                         : fpx_xfer_fail(t, FP_ERR_MISMATCH,
                                         "xfer: another process failed its checks (process %" PRId64 "); nothing was "
                                         "written", a->rank);
    case FPX_AV_MISMATCH:
      return st != FP_OK ? st
                         : fpx_xfer_fail(t, FP_ERR_MISMATCH,
                                         "xfer: the processes hold different transfers (process 0 and process %" PRId64
                                         " differ in their plans, processes or ops); nothing was written",
                                         a->rank);
    default:
      return st != FP_OK ? st : fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: MPI failed while the processes agreed");
  }
}

/* a transfer with reshard transforms: each one bound (fp_xfer_bind_transforms),
 * the built-in names (MXFP8) here, to the executor's own tables */
static fp_status check_transforms(fp_xfer *t) {
  const fp_tx *tx = t->tx;
  for (int32_t k = 0; k < tx->nxf; k++) {
    const fpi_xform *b = fpx_xf_builtin(tx->xf_names[k]);
    if (!b || (t->xf && t->xf[k] == b)) continue;
    if (!t->xf) t->xf = fpi_alloc_array(t->arena, (size_t)tx->nxf, sizeof *t->xf);
    t->xf[k] = b;
  }
  for (int32_t j = 0; j < tx->nparams; j++) {
    const char *name = fpi_tx_xf_name(tx, j);
    if (!name) continue;
    if (!t->xf || !t->xf[tx->params[j].xf])
      return fpx_xfer_fail(t, FP_ERR_ARG, "xfer: param '%s' goes through transform '%s', which is not bound to the "
                           "transfer (fp_xfer_bind_transforms); nothing was written", tx->params[j].name, name);
  }
  return FP_OK;
}

/* one process's part of a run, as the steps of fp_xfer_run see it */
typedef struct xrun {
  int me, size;
  bool has_from, has_to;
  fp_exec *from, *to;  /* NULL where the process holds no rank of that plan */
  int backend;         /* of this process's executors (0: it holds none) */
  int32_t nreq;        /* its sends and recvs (MPI) */
  xmpi *m;
  int fresh;           /* the NCCL communicator is made in this run */
  bool abandoned;      /* the watchdog gave up on this process's requests (MPI) */
} xrun;

/* the local checks (phase 1): enough processes, each executor's plan and
 * rank, one backend, the layouts; the sends and recvs counted */
static fp_status local_checks(fp_xfer *t, xrun *R) {
  const fp_tx *tx = t->tx;
  fp_status st = FP_OK;
  int me = R->me;
  if (R->size < tx->nprocs)
    st = fpx_xfer_fail(t, FP_ERR_ARG, "xfer: the transfer needs %lld processes, the communicator has %d",
                       (long long)tx->nprocs, R->size);
  R->has_from = me >= tx->from_offset && me < tx->from_offset + tx->from_world;
  R->has_to = me >= tx->to_offset && me < tx->to_offset + tx->to_world;
  fp_exec *from = R->has_from ? R->from : NULL, *to = R->has_to ? R->to : NULL;
  if (st == FP_OK && R->has_from) st = check_exec(t, from, "FROM", tx->from_hash, me - tx->from_offset);
  if (st == FP_OK && R->has_to) st = check_exec(t, to, "TO", tx->to_hash, me - tx->to_offset);
  R->backend = from ? (int)from->cfg.backend : to ? (int)to->cfg.backend : 0;
  if (st == FP_OK && from && to && from->cfg.backend != to->cfg.backend)
    st = fpx_xfer_fail(t, FP_ERR_ARG, "xfer: the FROM executor is on the %s backend and the TO executor on %s: a "
                       "transfer runs on one backend", from->bk->name, to->bk->name);
  if (st == FP_OK && me < tx->nprocs) st = check_layout(t, from, to, me);
  if (st == FP_OK) st = check_transforms(t);
  int32_t g = me < tx->nprocs ? fpi_tx_prog(tx, me) : 0;
  int32_t lo = me < tx->nprocs ? tx->first[g] : 0, hi = me < tx->nprocs ? tx->first[g + 1] : 0;
  R->nreq = 0;
  for (int32_t i = lo; i < hi && R->backend == FP_BACKEND_MPI; i++) {
    const fp_tx_op *o = &tx->ops[i];
    if (o->kind == FP_TX_SEND || o->kind == FP_TX_RECV) {
      R->nreq++;
      if (o->n * fpi_dtype_size(o->dtype) > INT_MAX && st == FP_OK)
        st = fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: op %d moves more than INT_MAX bytes", i);
    }
  }
  return st;
}

/* the handle's MPI state, its staging and request array sized for this
 * process (MPI backend); st unless that fails */
static fp_status mpi_state(fp_xfer *t, xrun *R, fp_status st) {
  const fp_tx *tx = t->tx;
  struct fpx_xfer_state *s = fpx_xfer_state(t);
  if (s && !s->mpi && (s->mpi = calloc(1, sizeof(xmpi))) != NULL) ((xmpi *)s->mpi)->dup = MPI_COMM_NULL;
  R->m = s ? s->mpi : NULL;
  if (!R->m && st == FP_OK) st = fpx_xfer_fail(t, FP_ERR_NOMEM, "xfer: out of memory"); /* fails at the agreement */
  if (R->m && st == FP_OK && R->backend == FP_BACKEND_MPI) {
    xmpi *m = R->m;
    if (!reserve((void **)&m->stage, &m->stage_cap, (size_t)(R->me < tx->nprocs ? tx->stage_bytes[R->me] : 0) + 16) ||
        !reserve((void **)&m->req, &m->req_cap, ((size_t)R->nreq + 1) * sizeof *m->req))
      st = fpx_xfer_fail(t, FP_ERR_NOMEM, "xfer: out of memory (staging)");
  }
  return st;
}

/* whether the duplicate communicator is made again: there is none yet, or
 * the caller's group is not the one it was made from */
static int needs_redup(const xmpi *m, MPI_Comm base) {
  if (!m || m->dup == MPI_COMM_NULL) return 1;
  MPI_Group g;
  int same = MPI_UNEQUAL;
  if (MPI_Comm_group(base, &g) == MPI_SUCCESS) {
    MPI_Group_compare(g, m->group, &same);
    MPI_Group_free(&g);
  }
  return same != MPI_IDENT;
}

/* the duplicate made again (a collective: every process, after agreeing) */
static fp_status redup(fp_xfer *t, xmpi *m, MPI_Comm base) {
  if (m->dup != MPI_COMM_NULL) {
    MPI_Comm_free(&m->dup);
    MPI_Group_free(&m->group);
  }
  if (MPI_Comm_dup(base, &m->dup) != MPI_SUCCESS) m->dup = MPI_COMM_NULL;
  if (m->dup != MPI_COMM_NULL && MPI_Comm_group(base, &m->group) != MPI_SUCCESS) MPI_Comm_free(&m->dup);
  if (m->dup == MPI_COMM_NULL) return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: MPI failed duplicating the communicator");
  return FP_OK;
}

/* the ops (phase 3) over the duplicate c, on the agreed backend */
static fp_status run_ops(fp_xfer *t, xrun *R, MPI_Comm base, MPI_Comm c, const int64_t *all, double timeout_s) {
  fp_status st = FP_OK;
  fp_exec *from = R->has_from ? R->from : NULL, *to = R->has_to ? R->to : NULL;
  char *fa = from ? from->dev : NULL, *ta = to ? to->dev : NULL;
  xmpi *m = R->m;
  if (all[1] == FP_BACKEND_MPI || all[1] == 0) {
    bool abandoned = false;
    st = run_mpi(t, R->me, c, fa, ta, m->stage, m->req, timeout_s, &abandoned);
    R->abandoned = abandoned;
    if (abandoned) { /* pending requests may still touch the staging, both arenas and the duplicate */
      fpx_keep_for_mpi(m->stage);
      m->stage = NULL, m->stage_cap = 0;
      m->dup = MPI_COMM_NULL; /* leaked: a request is pending on it */
      if (from) fpx_mpi_abandon(from, t->msg ? t->msg : "watchdog: fp_xfer_run timed out");
      if (to) fpx_mpi_abandon(to, t->msg ? t->msg : "watchdog: fp_xfer_run timed out");
    }
  } else {
#ifdef FP_HAVE_CUDA
    st = fpx_xfer_nccl_run(t, R->me, base, c, all[3] != 0, fa, ta);
#else
    (void)base;
#endif
  }
  return st;
}

/* After the ops of a transfer with transforms: a transform that failed on
 * one process (prepare_send, finalize_recv: plug-in code, whose failure
 * stops no send or recv, so the others finish) is agreed on, as the checks
 * are before the ops, so every process fails the run, not only the one
 * whose transform failed. A process that failed keeps its own message; the
 * others name it. Not after the watchdog abandoned this process's requests
 * (the others' agreement then times out, naming it). */
static fp_status agree_outcome(fp_xfer *t, uint64_t id, fp_status st, MPI_Comm base, double timeout_s) {
  const int64_t none[FPX_AGREE_VALS] = {0};
  fpx_agreement a;
  fpx_agree_watched(base, FPX_AGREE_TAG_XFER, timeout_s > 0 ? timeout_s : INFINITY, id, st != FP_OK,
                    none, &a);
  if (st != FP_OK || a.verdict == FPX_AV_OK) return st;
  char list[160];
  switch (a.verdict) {
    case FPX_AV_FAILED:
      return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: process %" PRId64 " failed while the ops ran (a transform's "
                           "prepare_send or finalize_recv, or MPI: its own error says which); this process's ops "
                           "completed, but TO's need regions may be partly written", a.rank);
    case FPX_AV_TIMEOUT:
      fpx_agree_list(&a, list, sizeof list);
      return fpx_xfer_fail(t, FP_ERR_TIMEOUT, "watchdog: fp_xfer_run: %" PRId64 " process(es) did not report the end "
                           "of the ops within %g s (timeout): did not report: %s; TO's need regions may be partly "
                           "written", a.missing, timeout_s, list);
    case FPX_AV_NO_ROOT:
      return fpx_xfer_fail(t, FP_ERR_TIMEOUT, "watchdog: fp_xfer_run: no answer from process 0 on the end of the ops "
                           "within %g s (timeout %g s); TO's need regions may be partly written", a.waited_s, timeout_s);
    default:
      return fpx_xfer_fail(t, FP_ERR_BACKEND, "xfer: MPI failed while the processes agreed on the end of the ops");
  }
}

fp_status fp_xfer_run(fp_xfer *t, fp_exec *from, fp_exec *to, const void *comm) {
  if (!t || !t->tx) return FP_ERR_ARG;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return fpx_xfer_fail(t, FP_ERR_ARG, "xfer: MPI is not initialized");
  MPI_Comm base = comm ? *(const MPI_Comm *)comm : MPI_COMM_WORLD;
  xrun R = {.from = from, .to = to};
  MPI_Comm_rank(base, &R.me);
  MPI_Comm_size(base, &R.size);
  fp_status st = local_checks(t, &R);
  st = mpi_state(t, &R, st);
  int redo = needs_redup(R.m, base);
#ifdef FP_HAVE_CUDA
  if (st == FP_OK && R.backend == FP_BACKEND_NCCL)
    st = fpx_xfer_nccl_prepare(t, R.has_from ? from : NULL, R.has_to ? to : NULL, R.me, base, &R.fresh);
#endif
  /* agreement over the caller's communicator, point to point under the
   * watchdog (agree.c; every process calls it, in the same order as the
   * caller's other agreements there): the outcome, that every process holds
   * this transfer (the whole program's hash, fpi_tx_hash: two transfers
   * between the same plans that differ in any op are refused before any
   * op, not run into each other's bytes), and the max of: one backend (the largest and the
   * smallest of the processes holding executors), whether the NCCL
   * communicator is made, whether any process duplicates its communicator
   * again (then all do: a collective). Without a timeout it waits as long as
   * it takes, like the collective it replaces. */
  double timeout_s = xfer_timeout(R.has_from ? from : NULL, R.has_to ? to : NULL);
  const int64_t mine[FPX_AGREE_VALS] = {st != FP_OK, R.backend, R.backend ? -R.backend : -100, R.fresh, redo};
  fpx_agreement a;
  uint64_t id = fpi_tx_hash(t->tx); /* (once a run: the agreement after the ops compares it again) */
  fpx_agree_watched(base, FPX_AGREE_TAG_XFER, timeout_s > 0 ? timeout_s : INFINITY, id, st != FP_OK, mine, &a);
  if (a.verdict != FPX_AV_OK) return agree_failed(t, st, &a, timeout_s);
  const int64_t *all = a.max;
  /* every process has its state (a process without failed, above) */
  if (all[4] && (st = redup(t, R.m, base)) != FP_OK) return st;
  if (all[1] != 0 && all[1] != -all[2])
    return fpx_xfer_fail(t, FP_ERR_MISMATCH, "xfer: the processes' executors are on different backends (MPI and "
                         "NCCL); nothing was written");
  st = run_ops(t, &R, base, R.m->dup, all, timeout_s);
  if (t->tx->nxf > 0 && !R.abandoned) st = agree_outcome(t, id, st, base, timeout_s);
  if (st == FP_OK && t->msg) t->msg[0] = 0;
  return st;
}
