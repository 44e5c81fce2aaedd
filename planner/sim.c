/* sim.c - the simulator and the modeled memory timeline (see sim.h).
 *
 * One pass over the ops per replayed step: a clock per stream, the time each
 * event was last recorded (kept across steps), and each op's duration from
 * the cost model, computed once. Cost: O(ops) per step plus the cost model's
 * per-op work. The memory timeline sorts the allocation and free instants
 * of every live range (O(r log r)) and sweeps them once. */
#include "sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"

/* ---- the simulator ---------------------------------------------------------- */
/* what the two replayed steps read of each op, taken on the cost model's
 * walk: they then read 12 bytes an op, not the 152-byte ops */
typedef struct opinfo {
  int32_t seg, event;
  uint8_t code, stream;
} opinfo;

/* the replay's state: each op's duration, the clocks, the events */
typedef struct replay {
  const fp_prog *P;
  fp_sim *out;
  double *dur;
  int32_t *lead; /* first op of i's grouped call (i alone) */
  opinfo *oi;
  double *ev;    /* the clock of the event's last record */
  int *evs;      /* stream of the event's last record */
  int32_t *evop; /* the op before the event's last record */
  /* per stream: its last op that takes time, and its last communication op
   * (what a wait on a record after it is charged to) */
  int32_t last[FP_NSTREAMS], lastc[FP_NSTREAMS];
  double clock[FP_NSTREAMS];
  double hook_us; /* the machine's host time of one hook call */
  /* the critical path (fp_sim.path_waits): an op of step k (0, 1) is
   * k * nops + i; per such op the op its start waited for (-1: none), and
   * whether that was a wait's record; per stream its last op, per event
   * its last record */
  int32_t *pred, *evrec, lastg[FP_NSTREAMS];
  uint8_t *bound;
  int32_t step; /* 0: the first step; 1: the reported one */
} replay;

static opinfo info_of(const fp_op *op) { return (opinfo){op->seg, op->event, (uint8_t)op->code, (uint8_t)op->stream}; }

/* each op's duration from the cost model, once: a grouped call's first op
 * takes the whole call's, its later members none */
static void durations(replay *R, const fp_hw *hw) {
  const fp_prog *P = R->P;
  int32_t n = P->nops;
  for (int32_t i = 0; i < n;) {
    const fp_op *op = &P->ops[i];
    int32_t j = i + 1;
    R->oi[i] = info_of(op);
    if (op->group >= 0 && fpi_op_class(op->code) == FP_OPC_COMM) {
      for (; j < n && P->ops[j].group == op->group && P->ops[j].stream == op->stream; j++) R->oi[j] = info_of(&P->ops[j]);
      R->dur[i] = fpi_cost_group_us(P, i, j - i, hw);
    } else {
      R->dur[i] = fpi_cost_op_us(P, op, hw);
    }
    for (int32_t k = i; k < j; k++) R->lead[k] = i, R->out->exposed_by[k] = -1;
    for (int32_t k = i + 1; k < j; k++) R->dur[k] = 0;
    i = j;
  }
  for (int32_t e = 0; e < P->nevents; e++) {
    R->ev[e] = -INFINITY; /* never recorded: holds nothing back */
    R->evs[e] = FP_STREAM_COMPUTE;
    R->evop[e] = -1;
  }
}

/* record or wait i on stream s: a wait the compute stream spends for
 * another stream's record is exposed (charged, in the reported step, to
 * the op before that record) */
static double sync_op(replay *R, int32_t i, int s, bool rep) {
  const opinfo *op = &R->oi[i];
  fp_sim *out = R->out;
  FP_ASSERT(op->event >= 0 && op->event < R->P->nevents);
  int32_t g = R->step * R->P->nops + i;
  R->pred[g] = R->lastg[s], R->bound[g] = 0, R->lastg[s] = g;
  if (op->code == FP_OP_RECORD) {
    R->evrec[op->event] = g;
    R->ev[op->event] = R->clock[s];
    R->evs[op->event] = s;
    R->evop[op->event] = R->lastc[s] >= 0 ? R->lastc[s] : R->last[s];
  } else if (R->ev[op->event] > R->clock[s]) {
    if (rep && s == FP_STREAM_COMPUTE && R->evs[op->event] != FP_STREAM_COMPUTE) {
      out->segs[op->seg].exposed_us += R->ev[op->event] - R->clock[s];
      out->exposed_us[i] += R->ev[op->event] - R->clock[s];
      out->exposed_by[i] = R->evop[op->event] >= 0 ? R->evop[op->event] : i;
    }
    R->clock[s] = R->ev[op->event];
    R->pred[g] = R->evrec[op->event], R->bound[g] = 1;
  }
  return R->clock[s];
}

/* i, which takes time, on stream s: from the stream's clock for its
 * duration; the reported step counts it (busy, compute, exposed) */
static void timed_op(replay *R, int32_t i, int s, fp_opclass cls, bool rep) {
  fp_sim *out = R->out;
  double d = R->dur[i];
  int32_t g = R->step * R->P->nops + i;
  R->pred[g] = R->lastg[s], R->bound[g] = 0, R->lastg[s] = g;
  out->start_us[i] = R->clock[s];
  out->end_us[i] = R->clock[s] = out->start_us[i] + d;
  R->last[s] = i;
  if (cls == FP_OPC_COMM) R->lastc[s] = i;
  if (!rep) return;
  fp_sim_seg *sg = &out->segs[R->oi[i].seg];
  if (s == FP_STREAM_COMPUTE && cls == FP_OPC_COMM) {
    out->exposed_us[i] += d;
    out->exposed_by[i] = i;
  }
  out->busy_us[s] += d;
  if (cls == FP_OPC_COMPUTE) sg->compute_us += d;
  if (s == FP_STREAM_COMPUTE && cls == FP_OPC_COMM) sg->exposed_us += d;
  if (s == FP_STREAM_COMPUTE && cls == FP_OPC_LOCAL) out->compute_local_us += d;
}

/* one step of the ops in program order (rep: the reported, steady-state
 * one); each hook call first holds the trainer's stream for the machine's
 * hook_us (the host's own time in the call; 0 unless calibrated) */
/* hook calls k.. up to those whose ops start at op `upto` (empty ones too) */
static int32_t hook_calls(replay *R, int32_t k, int32_t upto, bool rep) {
  const fp_prog *P = R->P;
  for (; k < P->nsegs && P->segs[k].first <= upto; k++) {
    R->clock[FP_STREAM_COMPUTE] += R->hook_us;
    if (rep) R->out->hooks_us += R->hook_us, R->out->segs[k].hook_us = R->hook_us;
  }
  return k;
}

static void replay_step(replay *R, bool rep) {
  fp_sim *out = R->out;
  const fp_prog *P = R->P;
  int32_t k = 0;
  for (int32_t i = 0; i < P->nops; i++) {
    k = hook_calls(R, k, i, rep);
    int s = R->oi[i].stream;
    FP_ASSERT(s >= 0 && s < FP_NSTREAMS);
    fp_opclass cls = fpi_op_class((fp_opcode)R->oi[i].code);
    if (R->lead[i] != i) { /* a later member of a grouped call: runs with the first */
      int32_t g = R->step * P->nops + i;
      R->pred[g] = R->lastg[s], R->bound[g] = 0, R->lastg[s] = g;
      out->start_us[i] = out->start_us[R->lead[i]];
      out->end_us[i] = out->end_us[R->lead[i]];
    } else if (cls == FP_OPC_SYNC) {
      out->start_us[i] = out->end_us[i] = sync_op(R, i, s, rep);
    } else {
      timed_op(R, i, s, cls, rep);
    }
  }
  hook_calls(R, k, P->nops, rep); /* empty hooks at the end */
}

/* times from the start of the reported step (t0), and each segment's span:
 * the segments cover the ops in order (a verified program), one walk */
static void segment_spans(const fp_prog *P, fp_sim *out, double t0) {
  double prev = 0;
  for (int32_t k = 0; k < P->nsegs; k++) {
    fp_sim_seg *sg = &out->segs[k];
    const fp_seg *S = &P->segs[k];
    sg->seg = k;
    sg->start_us = sg->end_us = prev;
    for (int32_t i = S->first; i < S->first + S->nops; i++) {
      out->start_us[i] -= t0;
      out->end_us[i] -= t0;
      sg->start_us = i == S->first ? out->start_us[i] : fmin(sg->start_us, out->start_us[i]);
      sg->end_us = i == S->first ? out->end_us[i] : fmax(sg->end_us, out->end_us[i]);
    }
    prev = sg->end_us;
    out->compute_us += sg->compute_us;
    out->exposed_comm_us += sg->exposed_us;
  }
  int32_t n = P->nops;
  FP_ASSERT(P->nsegs == 0 ? n == 0 : P->segs[0].first == 0 && P->segs[P->nsegs - 1].first + P->segs[P->nsegs - 1].nops == n);
}

/* fp_sim.path_waits: back from the last op of stream `last` (which ends
 * the second step) to the start of the first */
static void critical_path(replay *R, fp_arena *a, int last) {
  fp_sim *out = R->out;
  int32_t n = 0;
  for (int32_t g = R->lastg[last]; g >= 0; g = R->pred[g]) n += R->bound[g];
  out->path_waits = fpi_alloc_array(a, (size_t)n + 1, sizeof *out->path_waits);
  for (int32_t g = R->lastg[last]; g >= 0; g = R->pred[g])
    if (R->bound[g]) out->path_waits[out->npath_waits++] = g % R->P->nops;
}

/* the steps: durations, two replays (the second reported, from where the
 * first left every stream), each segment's span */
bool fpi_simulate(fp_arena *a, const fp_prog *P, const fp_hw *hw, fp_sim *out) {
  memset(out, 0, sizeof *out);
  if (!fpi_hw_valid(hw)) return false;
  size_t n = (size_t)P->nops + 1, ne = (size_t)P->nevents + 1;
  out->start_us = fpi_alloc_array(a, n, sizeof *out->start_us);
  out->end_us = fpi_alloc_array(a, n, sizeof *out->end_us);
  out->segs = fpi_alloc_array(a, (size_t)P->nsegs + 1, sizeof *out->segs);
  out->exposed_us = fpi_alloc_array(a, n, sizeof *out->exposed_us);
  out->exposed_by = fpi_alloc_array(a, n, sizeof *out->exposed_by);
  out->nsegs = P->nsegs;
  replay R = {.P = P,
              .out = out,
              .dur = malloc(sizeof *R.dur * n),
              .lead = malloc(sizeof *R.lead * n),
              .oi = malloc(sizeof *R.oi * n),
              .ev = malloc(sizeof *R.ev * ne),
              .evs = malloc(sizeof *R.evs * ne),
              .evop = malloc(sizeof *R.evop * ne),
              .last = {-1, -1, -1},
              .lastc = {-1, -1, -1}};
  R.pred = malloc(sizeof *R.pred * 2 * n);
  R.bound = malloc(2 * n);
  R.evrec = malloc(sizeof *R.evrec * ne);
  FP_ASSERT(R.dur && R.lead && R.ev && R.evs && R.evop && R.oi && R.pred && R.bound && R.evrec);
  for (int s = 0; s < FP_NSTREAMS; s++) R.lastg[s] = -1;
  for (int32_t e = 0; e < P->nevents; e++) R.evrec[e] = -1;
  durations(&R, hw);
  R.hook_us = hw->hook_us;
  replay_step(&R, false);
  double t0 = 0;
  for (int s = 0; s < FP_NSTREAMS; s++) t0 = fmax(t0, R.clock[s]);
  R.step = 1;
  replay_step(&R, true);
  double end = t0;
  int last = 0; /* the stream that ends the step */
  for (int s = 0; s < FP_NSTREAMS; s++)
    if (R.clock[s] > end) end = R.clock[s], last = s;
  out->step_us = end - t0;
  critical_path(&R, a, last);
  bool finite = isfinite(out->step_us); /* else some op's time overflowed: absurd rates */
  segment_spans(P, out, t0);
  free(R.dur);
  free(R.lead);
  free(R.oi);
  free(R.ev);
  free(R.evop);
  free(R.evs);
  free(R.pred);
  free(R.bound);
  free(R.evrec);
  return finite;
}

/* ---- memory timeline ----------------------------------------------------------- */
/* an allocation (+bytes) or free (-bytes) of one category at an instant;
 * order at equal times: 0 frees, 1 allocations, 2 frees of zero-length ranges */
typedef struct {
  double t;
  int order;
  int cat;
  int64_t bytes;
} mem_ev;

/* a double's sort key: unsigned order is the numeric order (-0 as +0) */
static uint64_t time_key(double t) {
  t += 0.0;
  uint64_t u;
  memcpy(&u, &t, sizeof u);
  return u >> 63 ? ~u : u | (uint64_t)1 << 63;
}

/* the events, each range's two added at once; room for all of them is
 * made before (no growth) */
typedef struct {
  mem_ev *v;
  int64_t n, cap;
} ev_list;

static void add_range(ev_list *L, double t0, double t1, int cat, int64_t bytes) {
  if (bytes <= 0) return;
  FP_ASSERT(L->n + 2 <= L->cap);
  bool zero = !(t1 > t0);
  L->v[L->n++] = (mem_ev){t0, 1, cat, bytes};
  L->v[L->n++] = (mem_ev){zero ? t0 : t1, zero ? 2 : 0, cat, -bytes};
}

/* the events by (t, order), equal ones in the order they were added: two
 * stable radix sorts of an index (by order, then by time) and one gather
 * into a new list, which replaces L's */
static void sort_events(ev_list *L) {
  int64_t n = L->n;
  FP_ASSERT(n <= INT32_MAX);
  uint64_t *key = malloc(((size_t)n + 1) * sizeof *key);
  int32_t *ord = malloc(((size_t)n + 1) * sizeof *ord);
  mem_ev *out = malloc(((size_t)n + 1) * sizeof *out);
  FP_ASSERT(key && ord && out);
  for (int64_t i = 0; i < n; i++) key[i] = (uint64_t)L->v[i].order, ord[i] = (int32_t)i;
  fpi_sort_u64(key, ord, n);
  for (int64_t i = 0; i < n; i++) key[i] = time_key(L->v[ord[i]].t);
  fpi_sort_u64(key, ord, n);
  for (int64_t i = 0; i < n; i++) out[i] = L->v[ord[i]];
  free(key);
  free(ord);
  free(L->v);
  L->v = out;
}

/* a live range of one buffer and the time span of the ops in it that use it */
typedef struct {
  int32_t first, last;
  double t0, t1;
  bool used;
} span;

static int cmp_span(const void *x, const void *y) {
  const span *a = x, *b = y;
  return a->first - b->first;
}

/* one buffer's ranges by first op (distinct: a buffer's ranges do not
 * overlap); most buffers have two or three, which qsort would call a
 * function per comparison for */
static void sort_spans(span *sp, int32_t n) {
  if (n > 16) {
    qsort(sp, (size_t)n, sizeof *sp, cmp_span);
    return;
  }
  for (int32_t i = 1; i < n; i++) {
    span x = sp[i];
    int32_t j = i;
    for (; j > 0 && sp[j - 1].first > x.first; j--) sp[j] = sp[j - 1];
    sp[j] = x;
  }
}

static void touch(span *sp, const int32_t *rs, int32_t nb, int32_t buf, int32_t i, double st, double en) {
  if (buf < 0 || buf >= nb) return;
  int32_t lo = rs[buf], hi = rs[buf + 1] - 1;
  while (lo <= hi) { /* the range of buf holding op i, by binary search */
    int32_t mid = lo + (hi - lo) / 2;
    if (sp[mid].last < i)
      lo = mid + 1;
    else if (sp[mid].first > i)
      hi = mid - 1;
    else {
      span *x = &sp[mid];
      x->t0 = x->used ? fmin(x->t0, st) : st;
      x->t1 = x->used ? fmax(x->t1, en) : en;
      x->used = true;
      return;
    }
  }
}

/* every buffer op i reads or writes (dst, src, aux, its uses), each once */
static void touch_op(span *sp, const int32_t *rs, int32_t nb, const fp_prog *P, const fp_sim *S, int32_t i) {
  const fp_op *op = &P->ops[i];
  double st = S->start_us[i], en = S->end_us[i];
  touch(sp, rs, nb, op->dst.buf, i, st, en);
  if (op->src.buf != op->dst.buf) touch(sp, rs, nb, op->src.buf, i, st, en);
  if (op->aux.buf != op->dst.buf && op->aux.buf != op->src.buf) touch(sp, rs, nb, op->aux.buf, i, st, en);
  for (int32_t u = 0; u < op->nuses; u++) touch(sp, rs, nb, P->uses[op->uses + u], i, st, en);
}

static int64_t sat(__int128 v) { return v > INT64_MAX ? INT64_MAX : v < 0 ? 0 : (int64_t)v; }

/* every buffer's live ranges, sorted by first op, in sp[rs[b] .. rs[b+1]);
 * a transient buffer without one gets one over the whole program. Returns
 * sp; rs (nbufs + 2 entries) is the caller's to free, as is sp. */
static span *ranges_by_buffer(const fp_prog *P, int32_t **rs_out) {
  int32_t nb = P->nbufs;
  int32_t *rs = calloc((size_t)nb + 2, sizeof *rs);
  FP_ASSERT(rs);
  for (int32_t k = 0; k < P->nlives; k++) {
    FP_ASSERT(P->lives[k].buf >= 0 && P->lives[k].buf < nb); /* a verified program */
    rs[P->lives[k].buf + 1]++;
  }
  for (int32_t b = 0; b < nb; b++)
    if (P->bufs[b].kind == FP_BUF_TRANSIENT && rs[b + 1] == 0) rs[b + 1] = 1;
  for (int32_t b = 0; b < nb; b++) rs[b + 1] += rs[b];
  span *sp = calloc((size_t)rs[nb] + 1, sizeof *sp);
  int32_t *fill = malloc(sizeof *fill * ((size_t)nb + 1));
  FP_ASSERT(sp && fill);
  memcpy(fill, rs, sizeof *fill * (size_t)nb);
  for (int32_t k = 0; k < P->nlives; k++) {
    const fp_ir_live *l = &P->lives[k];
    sp[fill[l->buf]++] = (span){l->first, l->last, 0, 0, false};
  }
  for (int32_t b = 0; b < nb; b++)
    if (fill[b] < rs[b + 1]) sp[fill[b]++] = (span){0, P->nops - 1, 0, 0, false}; /* the implicit range */
  for (int32_t b = 0; b < nb; b++)
    if (rs[b + 1] - rs[b] > 1) sort_spans(sp + rs[b], rs[b + 1] - rs[b]);
  free(fill);
  *rs_out = rs;
  return sp;
}

/* the device's buffers: a persistent one's bytes held all step (into cur),
 * a transient one's over each used range's time span */
static void buffer_events(const fp_prog *P, const span *sp, const int32_t *rs, ev_list *L, __int128 *cur) {
  for (int32_t b = 0; b < P->nbufs; b++) {
    const fp_ir_buf *B = &P->bufs[b];
    if (B->host) continue;
    if (B->kind == FP_BUF_PERSISTENT) {
      cur[B->cat] += B->bytes;
      continue;
    }
    for (int32_t k = rs[b]; k < rs[b + 1]; k++)
      if (sp[k].used) add_range(L, sp[k].t0, sp[k].t1, B->cat, B->bytes);
  }
}

/* activations: forward compute of (module, micro) to its backward compute,
 * or to the end of the step (tend) without one; cids: the compute ops */
static void activation_events(const fp_prog *P, const fp_sim *S, const int32_t *cids, int32_t nc, double tend,
                              ev_list *L) {
  int32_t *pair = malloc(sizeof *pair * ((size_t)nc + 1));
  FP_ASSERT(pair);
  fpi_ir_activation_pairs_of(P, cids, nc, pair);
  for (int32_t k = 0; k < nc; k++) {
    int32_t i = cids[k];
    const fp_op *op = &P->ops[i];
    if (op->module < 0 || op->module >= P->nmods) continue;
    const fp_ir_module *M = &P->mods[op->module];
    /* a recomputed module: its activations during its forward and its
     * (recomputing) backward, only its saved bytes in between */
    if (M->recompute && (op->pass == FP_PASS_FWD || op->pass == FP_PASS_BWD))
      add_range(L, S->start_us[i], S->end_us[i], FP_MEMTL_ACT, M->activation_bytes);
    if (op->pass == FP_PASS_FWD)
      add_range(L, S->start_us[i], pair[k] >= 0 ? S->end_us[cids[pair[k]]] : tend, FP_MEMTL_ACT,
                M->recompute ? M->saved_bytes : M->activation_bytes);
  }
  free(pair);
}

/* the timeline's points: the persistent buffers from tstart, then one point
 * per instant the bytes change (the events sorted; frees then allocations
 * at one instant make one point) */
static void sweep(fp_arena *a, fp_memtl *tl, const ev_list *L, __int128 *cur, double tstart) {
  int64_t cap = 0;
  tl->pts = fpi_grow(a, NULL, &cap, 1, sizeof *tl->pts);
  tl->npts = 1;
  tl->pts[0].t_us = tstart;
  for (int c = 0; c < FP_MEMTL_NCATS; c++) tl->pts[0].bytes[c] = sat(cur[c]);
  bool initial = true; /* pts[0] is only the persistent buffers, at the first instant */
  for (int64_t k = 0; k < L->n;) {
    int64_t j = k;
    for (; j < L->n && (j == k || (L->v[j].t == L->v[k].t && L->v[j].order == L->v[k].order)); j++)
      cur[L->v[j].cat] += L->v[j].bytes;
    k = j;
    if (L->v[j - 1].order == 0 && k < L->n && L->v[k].t == L->v[j - 1].t && L->v[k].order == 1) continue;
    fp_memtl_point q = {L->v[j - 1].t, {0}};
    for (int c = 0; c < FP_MEMTL_NCATS; c++) q.bytes[c] = sat(cur[c]);
    fp_memtl_point *last = &tl->pts[tl->npts - 1];
    if (!memcmp(last->bytes, q.bytes, sizeof q.bytes)) continue; /* nothing changed */
    if (initial && q.t_us == last->t_us) { /* what the step starts with */
      *last = q;
      initial = false;
      continue;
    }
    initial = false;
    tl->pts = fpi_grow(a, tl->pts, &cap, (int64_t)tl->npts + 1, sizeof *tl->pts);
    tl->pts[tl->npts++] = q;
  }
}

/* the steps: each buffer's ranges, the time span of each range's uses (and
 * the step's, and the compute ops: one walk of the ops), the events of the
 * buffers and the activations, sorted and swept */
fp_memtl *fpi_sim_memory(fp_arena *a, const fp_prog *P, const fp_sim *S) {
  fp_memtl *tl = fpi_alloc(a, sizeof *tl);
  int32_t *rs;
  span *sp = ranges_by_buffer(P, &rs);
  int32_t nb = P->nbufs, nsp = rs[nb];
  double tstart = 0, tend = 0;
  int32_t *cids = malloc(sizeof *cids * ((size_t)P->nops + 1)), nc = 0;
  FP_ASSERT(cids);
  for (int32_t i = 0; i < P->nops; i++) {
    touch_op(sp, rs, nb, P, S, i);
    tstart = fmin(tstart, S->start_us[i]);
    tend = fmax(tend, S->end_us[i]);
    if (P->ops[i].code == FP_OP_COMPUTE) cids[nc++] = i;
  }
  /* at most one range per span and two per compute op (the activations') */
  ev_list L = {.cap = 2 * ((int64_t)nsp + 2 * nc) + 2};
  L.v = malloc((size_t)L.cap * sizeof *L.v);
  FP_ASSERT(L.v);
  __int128 cur[FP_MEMTL_NCATS] = {0};
  buffer_events(P, sp, rs, &L, cur);
  activation_events(P, S, cids, nc, tend, &L);
  free(cids);
  sort_events(&L);
  sweep(a, tl, &L, cur, tstart);
  fpi_memtl_maxima(tl, &tl->peak_bytes, &tl->lower_bound_bytes);
  free(L.v);
  free(rs);
  free(sp);
  return tl;
}

void fpi_sim_live_spans(const fp_prog *P, const fp_sim *S, double *t0, double *t1) {
  int32_t nb = P->nbufs;
  /* the ranges by buffer, sorted by first op (as fpi_sim_memory), each
   * remembering its index in P->lives */
  int32_t *rs = calloc((size_t)nb + 2, sizeof *rs), *fill = malloc(sizeof *fill * ((size_t)nb + 1));
  span *sp = calloc((size_t)P->nlives + 1, sizeof *sp);
  int32_t *idx = malloc(sizeof *idx * ((size_t)P->nlives + 1));
  FP_ASSERT(rs && fill && sp && idx);
  for (int32_t k = 0; k < P->nlives; k++) rs[P->lives[k].buf + 1]++;
  for (int32_t b = 0; b < nb; b++) rs[b + 1] += rs[b];
  memcpy(fill, rs, sizeof *fill * (size_t)nb);
  for (int32_t k = 0; k < P->nlives; k++) {
    const fp_ir_live *l = &P->lives[k];
    /* t0 carries the range's index until the sort is done */
    sp[fill[l->buf]++] = (span){l->first, l->last, (double)k, 0, false};
  }
  for (int32_t b = 0; b < nb; b++)
    if (rs[b + 1] - rs[b] > 1) sort_spans(sp + rs[b], rs[b + 1] - rs[b]);
  for (int32_t k = 0; k < P->nlives; k++) idx[k] = (int32_t)sp[k].t0, sp[k].t0 = 0;
  for (int32_t i = 0; i < P->nops; i++) touch_op(sp, rs, nb, P, S, i);
  for (int32_t k = 0; k < P->nlives; k++) {
    t0[idx[k]] = sp[k].used ? sp[k].t0 : NAN;
    t1[idx[k]] = sp[k].used ? sp[k].t1 : NAN;
  }
  free(rs);
  free(fill);
  free(sp);
  free(idx);
}

/* ---- report ------------------------------------------------------------------- */
const char *fpi_sim_hook_label(const fp_prog *P, const fp_seg *S, char *buf, size_t n) {
  char q[256]; /* a module's name from the input: quoted (fpi_quote) */
  if (S->module >= 0 && S->module < P->nmods)
    snprintf(buf, n, "%s(%s)", fpi_seg_name(S->kind), fpi_quote(q, sizeof q, P->mods[S->module].name));
  else
    snprintf(buf, n, "%s", fpi_seg_name(S->kind));
  return buf;
}

int fpi_sim_hook_width(const fp_prog *P) {
  char buf[512];
  int w = 4;
  for (int32_t k = 0; k < P->nsegs; k++) {
    int l = (int)strlen(fpi_sim_hook_label(P, &P->segs[k], buf, sizeof buf));
    if (l > w) w = l;
  }
  return w > 60 ? 60 : w;
}

typedef struct exposed_row {
  int32_t at; /* the wait (or compute-stream collective) */
  double us;
} exposed_row;

static int cmp_exposed(const void *x, const void *y) {
  const exposed_row *a = x, *b = y;
  if (a->us != b->us) return a->us < b->us ? 1 : -1;
  return (a->at > b->at) - (a->at < b->at);
}

void fpi_sim_print_exposed(const fp_prog *P, const fp_sim *S, int top, FILE *f) {
  int32_t n = 0;
  for (int32_t i = 0; i < P->nops; i++) n += S->exposed_us[i] > 0;
  double step = S->step_us;
  fprintf(f, "exposed communication, ranked (modeled, docs/cost-model.md): %.3f ms, %.1f%% of the %.3f ms step, "
             "at %d wait(s)\n", S->exposed_comm_us / 1e3, step > 0 ? 100 * S->exposed_comm_us / step : 0.0,
          step / 1e3, (int)n);
  if (n == 0) return;
  exposed_row *v = malloc(sizeof *v * (size_t)n);
  FP_ASSERT(v);
  n = 0;
  for (int32_t i = 0; i < P->nops; i++)
    if (S->exposed_us[i] > 0) v[n++] = (exposed_row){i, S->exposed_us[i]};
  qsort(v, (size_t)n, sizeof *v, cmp_exposed);
  if (top > 0 && n > top) n = top;
  char buf[512], bq[64];
  fprintf(f, "%5s  %10s  %6s  %6s  %-16s  %-24s  %s\n", "rank", "ms", "share", "op", "opcode", "bucket",
          "hook (waiting)");
  for (int32_t k = 0; k < n; k++) {
    const fp_op *w = &P->ops[v[k].at];
    int32_t by = S->exposed_by[v[k].at];
    const fp_op *o = by >= 0 ? &P->ops[by] : w;
    fprintf(f, "%5d  %10.3f  %5.1f%%  %6d  %-16s  %-24.60s  %s\n", (int)k + 1, v[k].us / 1e3,
            step > 0 ? 100 * v[k].us / step : 0.0, (int)(by >= 0 ? by : v[k].at), fpi_op_name(o->code),
            o->bucket >= 0 && o->bucket < P->nbuckets ? fpi_quote(bq, sizeof bq, P->buckets[o->bucket]) : "-",
            fpi_sim_hook_label(P, &P->segs[w->seg], buf, sizeof buf));
  }
  free(v);
}

void fpi_sim_print(const fp_prog *P, const fp_sim *S, const fp_hw *hw, const fp_memtl *tl, FILE *f) {
  fputs("flexplan simulate: ", f);
  fpi_fput_name(f, P->model);
  fputs(", ", f);
  fpi_fput_name(f, P->strategy);
  fprintf(f, " on %lld ranks (%lld per node), hardware ", (long long)P->world_size, (long long)P->ranks_per_node);
  fpi_fput_name(f, hw->name);
  fputc('\n', f);
  fprintf(f, "  %.1f TFLOP/s, NVLink %.1f GB/s, network %.1f GB/s per NIC, HBM %.0f GB/s; latency %.1f us + "
             "%.1f us per NVLink step, %.1f us per network step\n",
          hw->flops / 1e12, hw->nvlink_gbps, hw->ib_gbps, hw->hbm_gbps, hw->base_us, hw->nvlink_hop_us, hw->net_hop_us);
  fprintf(f, "every figure below is modeled (docs/cost-model.md), not measured; times in microseconds from the\n"
             "start of a steady-state step\n\n");
  char buf[512];
  int w = fpi_sim_hook_width(P);
  fprintf(f, "%5s  %-*s  %5s  %14s  %14s  %14s  %14s\n", "seg", w, "hook", "micro", "modeled start", "modeled end",
          "modeled comp.", "modeled exp.");
  for (int32_t k = 0; k < S->nsegs; k++) {
    const fp_sim_seg *g = &S->segs[k];
    fprintf(f, "%5d  %-*.*s  %5d  %14.3f  %14.3f  %14.3f  %14.3f\n", k, w, w, fpi_sim_hook_label(P, &P->segs[k], buf, sizeof buf),
            P->segs[k].micro, g->start_us, g->end_us, g->compute_us, g->exposed_us);
  }
  double step = S->step_us;
  fprintf(f, "\nmodeled totals for one step (the plan is SPMD: every rank runs it the same way)\n");
  fprintf(f, "  modeled step                      %14.3f ms\n", step / 1e3);
  fprintf(f, "  modeled compute                   %14.3f ms  (%.1f%% of the step)\n", S->compute_us / 1e3,
          step > 0 ? 100 * S->compute_us / step : 0.0);
  fprintf(f, "  modeled exposed communication     %14.3f ms  (%.1f%% of the step)\n", S->exposed_comm_us / 1e3,
          step > 0 ? 100 * S->exposed_comm_us / step : 0.0);
  fprintf(f, "  modeled local kernels on compute  %14.3f ms\n", S->compute_local_us / 1e3);
  if (S->hooks_us > 0) /* (a calibrated machine's; 0 and left out otherwise, as before) */
    fprintf(f, "  modeled host time in hook calls   %14.3f ms  (%d calls of %.3f us)\n", S->hooks_us / 1e3,
            (int)S->nsegs, S->nsegs ? S->hooks_us / S->nsegs : 0.0);
  fprintf(f, "  modeled stream busy               ");
  for (int s = 0; s < FP_NSTREAMS; s++)
    fprintf(f, "%s%s %.3f ms", s ? ", " : "", fpi_stream_name(s), S->busy_us[s] / 1e3);
  fprintf(f, "\n");
  if (tl) {
    fprintf(f, "  modeled peak memory per rank      %14.3f GiB  (%lld bytes, activations included)\n",
            (double)tl->peak_bytes / (1 << 30), (long long)tl->peak_bytes);
    fprintf(f, "  modeled arena lower bound         %14.3f GiB  (%lld bytes: most arena bytes live at once)\n",
            (double)tl->lower_bound_bytes / (1 << 30), (long long)tl->lower_bound_bytes);
  {
    char hq[128];
    fprintf(f, "  device memory                     %14.3f GiB  (%s)\n", (double)hw->hbm_bytes / (1 << 30),
            fpi_quote(hq, sizeof hq, hw->name));
  }
  }
}
