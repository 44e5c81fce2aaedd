/* view.c - fpi_viz_build: everything the viewers show, computed once (see
 * viz.h): the simulator's times, the memory timeline and the live intervals
 * it is made of, the dependency of every wait, the exposed communication on
 * the compute stream, and the ranks to show (layout classes).
 *
 * The live intervals follow fpi_sim_memory's rule exactly (planner/sim.h):
 * a transient device buffer is live, in each of its live ranges, from the
 * start of the first op in the range that uses it to the end of the last;
 * activations from the start of a module's forward compute of a micro-batch
 * to the end of its backward compute of it. The view checks that the
 * intervals live at the timeline's peak add up to the peak (FP_ASSERT: the
 * two are the same computation, so a difference is a bug). */
#include "viz.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- per-rank work ------------------------------------------------------------ */
int64_t fpi_viz_g(const fp_viz *v, int32_t i, int64_t r) {
  const fp_op *op = &v->p->ops[i];
  if (op->comm < 0 || op->comm >= v->p->ncomms) return 0;
  return fpi_comm_index(&v->p->comms[op->comm], r);
}

bool fpi_viz_runs(const fp_viz *v, int32_t i, int64_t r) {
  const fp_op *op = &v->p->ops[i];
  if (op->only < 0 || op->only_comm < 0 || op->only_comm >= v->p->ncomms) return true;
  return fpi_comm_index(&v->p->comms[op->only_comm], r) == op->only;
}

/* the element count op i uses on rank r, tables resolved (0 when the table
 * has no entry for the rank's index: the verifier rules that out) */
static int64_t count_on(const fp_viz *v, int32_t i, int64_t r) {
  const fp_op *op = &v->p->ops[i];
  int64_t g = fpi_viz_g(v, i, r);
  if (op->tab >= 0 && (op->tab >= v->p->ntabs || g >= v->p->tabs[op->tab].n)) return 0;
  return fpi_op_count(v->p, op, g);
}

int64_t fpi_viz_bytes(const fp_viz *v, int32_t i, int64_t r) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  fp_opclass cls = fpi_op_class(op->code);
  if (cls != FP_OPC_COMM && cls != FP_OPC_LOCAL) return 0;
  int64_t sz = op->code == FP_OP_H2D || op->code == FP_OP_D2H ? 1 : fpi_dtype_size(op->dtype);
  int64_t G = op->comm >= 0 && op->comm < p->ncomms ? p->comms[op->comm].size : 1;
  int64_t n = count_on(v, i, r);
  if ((op->code == FP_OP_ALL_GATHER_V || op->code == FP_OP_REDUCE_SCATTER_V) && op->tab >= 0 && op->tab < p->ntabs) {
    n = 0; /* the whole buffer: every member's part */
    for (int64_t j = 0; j < p->tabs[op->tab].n; j++) n += p->tabs[op->tab].cnt[j];
  } else if (op->code == FP_OP_ALL_GATHER || op->code == FP_OP_REDUCE_SCATTER) {
    n *= G;
  } else if (op->code == FP_OP_COPY || fpi_op_regions(op->code)) {
    n *= fpi_op_shape_of(p, op).rows;
  }
  return n * sz;
}

/* ---- labels ------------------------------------------------------------------- */
void fpi_viz_op_label(const fp_viz *v, int32_t i, char *buf, size_t cap) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  if (op->code == FP_OP_COMPUTE) {
    const char *m = op->module >= 0 && op->module < p->nmods ? p->mods[op->module].name : NULL;
    const char *what = op->pass == FP_PASS_BWD ? "backward" : op->pass == FP_PASS_OPT ? "optimizer" : "forward";
    snprintf(buf, cap, m ? "%s %s" : "%s", what, m);
  } else if (op->code == FP_OP_RECORD || op->code == FP_OP_WAIT) {
    snprintf(buf, cap, "%s e%" PRId32, fpi_op_name(op->code), op->event);
  } else if (op->bucket >= 0 && op->bucket < p->nbuckets) {
    snprintf(buf, cap, "%s %s", fpi_op_name(op->code), p->buckets[op->bucket]);
  } else {
    snprintf(buf, cap, "%s", fpi_op_name(op->code));
  }
}

void fpi_viz_seg_label(const fp_viz *v, int32_t k, char *buf, size_t cap) {
  const fp_prog *p = v->p;
  const fp_seg *s = &p->segs[k];
  if (s->module >= 0 && s->module < p->nmods)
    snprintf(buf, cap, "%s(%s) mb%" PRId32, fpi_seg_name(s->kind), p->mods[s->module].name, s->micro);
  else
    snprintf(buf, cap, "%s", fpi_seg_name(s->kind));
}

/* ---- flows -------------------------------------------------------------------- */
static bool timed(const fp_op *op) { return fpi_op_class(op->code) != FP_OPC_SYNC; }

void fpi_viz_flow_ends(const fp_viz *v, const fp_viz_flow *f, int64_t r, int32_t *from, int32_t *to) {
  const fp_prog *p = v->p;
  fp_stream s = p->ops[f->record].stream, w = p->ops[f->wait].stream;
  *from = f->record;
  for (int32_t i = f->record - 1; i >= 0; i--)
    if (p->ops[i].stream == s && timed(&p->ops[i]) && fpi_viz_runs(v, i, r)) {
      *from = i;
      break;
    }
  *to = f->wait;
  for (int32_t i = f->wait + 1; i < p->nops; i++)
    if (p->ops[i].stream == w && timed(&p->ops[i]) && fpi_viz_runs(v, i, r)) {
      *to = i;
      break;
    }
}

static void build_flows(fp_viz *v) {
  const fp_prog *p = v->p;
  int32_t nw = 0;
  for (int32_t i = 0; i < p->nops; i++) nw += p->ops[i].code == FP_OP_WAIT;
  v->flows = fpi_alloc_array(v->a, (size_t)nw + 1, sizeof *v->flows);
  int32_t *last = fpi_alloc_array(v->a, (size_t)p->nevents + 1, sizeof *last); /* latest record so far */
  int32_t *final = fpi_alloc_array(v->a, (size_t)p->nevents + 1, sizeof *final); /* the last in the step */
  bool *after = fpi_alloc_array(v->a, FP_NSTREAMS, sizeof *after); /* a timed op seen later on the stream */
  for (int32_t e = 0; e < p->nevents; e++) last[e] = final[e] = -1;
  for (int32_t i = 0; i < p->nops; i++)
    if (p->ops[i].code == FP_OP_RECORD && p->ops[i].event >= 0 && p->ops[i].event < p->nevents) final[p->ops[i].event] = i;
  /* which waits have no timed op after them on their stream: scan backwards */
  bool *tail = fpi_alloc_array(v->a, (size_t)p->nops + 1, sizeof *tail);
  for (int32_t i = p->nops - 1; i >= 0; i--) {
    const fp_op *op = &p->ops[i];
    if ((unsigned)op->stream >= FP_NSTREAMS) continue;
    if (op->code == FP_OP_WAIT) tail[i] = !after[op->stream];
    if (timed(op)) after[op->stream] = true;
  }
  for (int32_t i = 0; i < p->nops; i++) {
    const fp_op *op = &p->ops[i];
    if (op->event < 0 || op->event >= p->nevents) continue;
    if (op->code == FP_OP_RECORD) last[op->event] = i;
    if (op->code != FP_OP_WAIT) continue;
    /* the latest record before it; else the previous step's last (none: nothing to wait for) */
    int32_t rec = last[op->event] >= 0 ? last[op->event] : final[op->event];
    if (rec < 0) continue;
    v->flows[v->nflows++] = (fp_viz_flow){i, rec, tail[i]};
  }
}

/* ---- exposed communication on the compute stream (fpi_simulate's rule) ------------ */
static void build_exposed(fp_viz *v) {
  const fp_prog *p = v->p;
  const fp_sim *S = &v->sim;
  int64_t cap = 0;
  int32_t lastc = -1;
  for (int32_t i = 0; i < p->nops; i++)
    if (p->ops[i].stream == FP_STREAM_COMPUTE) lastc = i;
  if (lastc < 0) return;
  /* the compute stream's clock when the step starts: its last op of the
   * step before, one step period earlier */
  double clock = S->end_us[lastc] - S->step_us;
  int32_t f = 0; /* flows are in wait order */
  int32_t lead_group = -1;
  double lead_st = 0;
  for (int32_t i = 0; i < p->nops; i++) {
    const fp_op *op = &p->ops[i];
    if (op->stream != FP_STREAM_COMPUTE) continue;
    fp_viz_exposed x = {0, 0, i, -1};
    bool add = false;
    if (op->code == FP_OP_WAIT) {
      while (f < v->nflows && v->flows[f].wait < i) f++;
      if (f < v->nflows && v->flows[f].wait == i && p->ops[v->flows[f].record].stream != FP_STREAM_COMPUTE &&
          S->start_us[i] > clock) {
        int32_t from, to;
        fpi_viz_flow_ends(v, &v->flows[f], 0, &from, &to);
        x = (fp_viz_exposed){clock, S->start_us[i], i, from != v->flows[f].record ? from : -1};
        add = true;
      }
    } else if (fpi_op_class(op->code) == FP_OPC_COMM) {
      /* a collective on the compute stream: all of it is exposed (a grouped
       * call once: its later members share its times) */
      bool member = op->group >= 0 && op->group == lead_group && S->start_us[i] == lead_st;
      lead_group = op->group;
      lead_st = S->start_us[i];
      if (!member && S->end_us[i] > S->start_us[i]) {
        x = (fp_viz_exposed){S->start_us[i], S->end_us[i], i, -1};
        add = true;
      }
    }
    if (add) {
      v->exposed = fpi_grow(v->a, v->exposed, &cap, (int64_t)v->nexposed + 1, sizeof *v->exposed);
      v->exposed[v->nexposed++] = x;
      v->exposed_us += x.t1 - x.t0;
    }
    clock = fmax(clock, S->end_us[i]);
  }
}

/* ---- live intervals (fpi_sim_memory's rule) ---------------------------------------- */
typedef struct {
  int32_t buf, first, last;
  double t0, t1;
  bool used;
} span;

static int cmp_span(const void *x, const void *y) {
  const span *a = x, *b = y;
  if (a->buf != b->buf) return a->buf < b->buf ? -1 : 1;
  return (a->first > b->first) - (a->first < b->first);
}

static int cmp_life(const void *x, const void *y) {
  const fp_viz_life *a = x, *b = y;
  if (a->t0 != b->t0) return a->t0 < b->t0 ? -1 : 1;
  if (a->buf != b->buf) return a->buf < b->buf ? -1 : 1;
  if (a->module != b->module) return a->module < b->module ? -1 : 1;
  return (a->micro > b->micro) - (a->micro < b->micro);
}

/* the span of buffer b holding op i (spans of b are sp[rs[b] .. rs[b+1])) */
static void touch(span *sp, const int32_t *rs, int32_t b, int32_t i, int32_t *opf, const fp_sim *S) {
  if (b < 0) return;
  int32_t lo = rs[b], hi = rs[b + 1] - 1;
  while (lo <= hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (sp[mid].last < i)
      lo = mid + 1;
    else if (sp[mid].first > i)
      hi = mid - 1;
    else {
      span *x = &sp[mid];
      double st = S->start_us[i], en = S->end_us[i];
      if (!x->used) {
        x->t0 = st, x->t1 = en, x->used = true;
        opf[2 * mid] = opf[2 * mid + 1] = i;
      } else {
        if (st < x->t0) x->t0 = st, opf[2 * mid] = i;
        if (en > x->t1) x->t1 = en, opf[2 * mid + 1] = i;
      }
      return;
    }
  }
}

static void build_lives(fp_viz *v) {
  const fp_prog *p = v->p;
  const fp_sim *S = &v->sim;
  int32_t nb = p->nbufs;
  int32_t *rs = fpi_alloc_array(v->a, (size_t)nb + 2, sizeof *rs);
  for (int32_t k = 0; k < p->nlives; k++) rs[p->lives[k].buf + 1]++;
  for (int32_t b = 0; b < nb; b++)
    if (p->bufs[b].kind == FP_BUF_TRANSIENT && rs[b + 1] == 0) rs[b + 1] = 1;
  for (int32_t b = 0; b < nb; b++) rs[b + 1] += rs[b];
  int32_t nsp = rs[nb];
  span *sp = fpi_alloc_array(v->a, (size_t)nsp + 1, sizeof *sp);
  int32_t *opf = fpi_alloc_array(v->a, 2 * (size_t)nsp + 2, sizeof *opf);
  int32_t k = 0;
  for (int32_t j = 0; j < p->nlives; j++) sp[k++] = (span){p->lives[j].buf, p->lives[j].first, p->lives[j].last, 0, 0, false};
  bool *ranged = fpi_alloc_array(v->a, (size_t)nb + 1, sizeof *ranged);
  for (int32_t j = 0; j < p->nlives; j++) ranged[p->lives[j].buf] = true;
  for (int32_t b = 0; b < nb; b++) /* a transient buffer without a live range: the whole step */
    if (p->bufs[b].kind == FP_BUF_TRANSIENT && !ranged[b]) sp[k++] = (span){b, 0, p->nops - 1, 0, 0, false};
  FP_ASSERT(k == nsp);
  qsort(sp, (size_t)nsp, sizeof *sp, cmp_span);
  for (int32_t i = 0; i < p->nops; i++) {
    const fp_op *op = &p->ops[i];
    touch(sp, rs, op->dst.buf, i, opf, S);
    if (op->src.buf != op->dst.buf) touch(sp, rs, op->src.buf, i, opf, S);
    if (op->aux.buf != op->dst.buf && op->aux.buf != op->src.buf) touch(sp, rs, op->aux.buf, i, opf, S);
    for (int32_t u = 0; u < op->nuses; u++) touch(sp, rs, p->uses[op->uses + u], i, opf, S);
  }
  int64_t cap = 0;
  for (int32_t b = 0; b < nb; b++) {
    const fp_ir_buf *B = &p->bufs[b];
    if (B->host || B->bytes <= 0) continue;
    if (B->kind == FP_BUF_PERSISTENT) {
      v->persistent_bytes[B->cat] += B->bytes;
      v->persistent_count[B->cat]++;
      continue;
    }
    for (int32_t j = rs[b]; j < rs[b + 1]; j++) {
      if (!sp[j].used) continue;
      v->lives = fpi_grow(v->a, v->lives, &cap, (int64_t)v->nlives + 1, sizeof *v->lives);
      v->lives[v->nlives++] = (fp_viz_life){b, -1, -1, B->cat, B->bytes, sp[j].t0, sp[j].t1, opf[2 * j], opf[2 * j + 1]};
    }
  }
  /* activations: a forward compute to the backward that frees them, or to
   * the end of the step without one */
  int32_t *pair = fpi_alloc_array(v->a, (size_t)p->nops + 1, sizeof *pair);
  fpi_ir_activation_pairs(p, pair);
  for (int32_t i = 0; i < p->nops; i++) {
    const fp_op *fw = &p->ops[i];
    if (fw->code != FP_OP_COMPUTE || fw->module < 0 || fw->module >= p->nmods) continue;
    const fp_ir_module *M = &p->mods[fw->module];
    /* a recomputed module (as the simulator's timeline): its activations
     * during its forward and its backward op, its saved bytes in between */
    if (M->recompute && (fw->pass == FP_PASS_FWD || fw->pass == FP_PASS_BWD) && M->activation_bytes > 0) {
      v->lives = fpi_grow(v->a, v->lives, &cap, (int64_t)v->nlives + 1, sizeof *v->lives);
      v->lives[v->nlives++] = (fp_viz_life){-1, fw->module, p->segs[fw->seg].micro, FP_MEMTL_ACT, M->activation_bytes,
                                            S->start_us[i], S->end_us[i], i, i};
    }
    if (fw->pass != FP_PASS_FWD) continue;
    int64_t bytes = M->recompute ? M->saved_bytes : M->activation_bytes;
    if (bytes <= 0) continue;
    int32_t b = pair[i];
    v->lives = fpi_grow(v->a, v->lives, &cap, (int64_t)v->nlives + 1, sizeof *v->lives);
    v->lives[v->nlives++] = (fp_viz_life){-1, fw->module, p->segs[fw->seg].micro, FP_MEMTL_ACT, bytes,
                                          S->start_us[i], b >= 0 ? S->end_us[b] : v->t_hi, i,
                                          b >= 0 ? b : p->nops - 1};
  }
  if (v->nlives > 1) qsort(v->lives, (size_t)v->nlives, sizeof *v->lives, cmp_life);
}

/* the intervals live at the peak point add up to it (same rule, same times) */
static void check_peak(const fp_viz *v) {
  const fp_memtl *tl = v->tl;
  if (v->peak < 0 || v->peak >= tl->npts) return;
  double t = tl->pts[v->peak].t_us;
  int64_t sum[FP_MEMTL_NCATS];
  memcpy(sum, v->persistent_bytes, sizeof sum);
  for (int32_t k = 0; k < v->nlives; k++) {
    const fp_viz_life *l = &v->lives[k];
    if ((l->t0 <= t && t < l->t1) || (l->t0 == t && l->t1 == t)) sum[l->cat] += l->bytes;
  }
  for (int c = 0; c < FP_MEMTL_NCATS; c++) FP_ASSERT(sum[c] == tl->pts[v->peak].bytes[c]);
}

/* ---- layout classes ------------------------------------------------------------- */
static uint64_t rank_sig(const fp_viz *v, int64_t r) {
  uint64_t h = FP_FNV_INIT;
  for (int32_t k = 0; k < v->nrdep; k++) {
    int32_t i = v->rdep[k];
    int64_t w[2] = {fpi_viz_runs(v, i, r), 0};
    if (w[0]) w[1] = count_on(v, i, r);
    h = fpi_fnv1a(h, w, sizeof w);
  }
  return h;
}

static bool same_work(const fp_viz *v, int64_t r, int64_t q) {
  for (int32_t k = 0; k < v->nrdep; k++) {
    int32_t i = v->rdep[k];
    bool a = fpi_viz_runs(v, i, r), b = fpi_viz_runs(v, i, q);
    if (a != b || (a && count_on(v, i, r) != count_on(v, i, q))) return false;
  }
  return true;
}

/* class of every rank (cls[r]), representatives rep[c]; returns the number of classes */
static int32_t classify(fp_viz *v, int32_t *cls, int64_t *rep) {
  int64_t W = v->p->world_size;
  if (v->nrdep == 0) {
    memset(cls, 0, sizeof *cls * (size_t)W);
    rep[0] = 0;
    return 1;
  }
  int64_t cap = 1;
  while (cap < 2 * W) cap *= 2;
  uint64_t *hk = fpi_alloc_array(v->a, (size_t)cap, sizeof *hk);
  int32_t *hv = fpi_alloc_array(v->a, (size_t)cap, sizeof *hv);
  for (int64_t j = 0; j < cap; j++) hv[j] = -1;
  int32_t n = 0;
  for (int64_t r = 0; r < W; r++) {
    uint64_t h = rank_sig(v, r);
    int64_t j = (int64_t)(h & (uint64_t)(cap - 1));
    for (;; j = (j + 1) & (cap - 1)) {
      if (hv[j] < 0) {
        hk[j] = h;
        hv[j] = n;
        rep[n] = r;
        cls[r] = n++;
        break;
      }
      if (hk[j] == h && same_work(v, r, rep[hv[j]])) {
        cls[r] = hv[j];
        break;
      }
    }
  }
  return n;
}

bool fpi_viz_build(fp_arena *a, fp_diag *d, const char *where, const fp_prog *P, const fp_hw *hw, const int64_t *ranks,
                  int32_t n, int32_t max_default, fp_viz *out) {
  memset(out, 0, sizeof *out);
  out->a = a;
  out->p = P;
  out->hw = *hw;
  FP_ASSERT(P->world_size >= 1 && P->world_size <= (int64_t)1 << 24); /* the verifier's limit */
  for (int32_t k = 0; k < n; k++)
    if (ranks[k] < 0 || ranks[k] >= P->world_size) {
      if (d)
        fpi_diag_errorf(d, "flexplan", "--ranks: rank %" PRId64 " is not a rank of the plan (world_size %" PRId64 ")",
                       ranks[k], P->world_size);
      return false;
    }
  if (!fpi_simulate(a, P, hw, &out->sim)) { /* a valid machine, but too slow for a finite step */
    if (d)
      fpi_diag_errorf(d, where ? where : "<plan>",
                     "the modeled step time on hardware '%s' is not a finite number: its rates are too small for the "
                     "plan's work",
                     hw->name ? hw->name : "?");
    return false;
  }
  out->tl = fpi_sim_memory(a, P, &out->sim);
  out->hash = fpi_prog_hash(P);
  out->t_lo = 0;
  out->t_hi = 0;
  for (int32_t i = 0; i < P->nops; i++) {
    out->t_lo = fmin(out->t_lo, out->sim.start_us[i]);
    out->t_hi = fmax(out->t_hi, out->sim.end_us[i]);
  }
  out->budget_from_plan = P->memory_budget_bytes > 0;
  out->budget = out->budget_from_plan ? P->memory_budget_bytes : hw->hbm_bytes;
  build_flows(out);
  build_exposed(out);
  build_lives(out);
  out->peak = -1;
  int64_t best = -1;
  for (int32_t k = 0; k < out->tl->npts; k++) {
    int64_t s = 0;
    for (int c = 0; c < FP_MEMTL_NCATS; c++) s += out->tl->pts[k].bytes[c];
    if (s > best) best = s, out->peak = k;
  }
  check_peak(out);

  /* the ops whose work depends on the rank, then the classes */
  out->rdep = fpi_alloc_array(a, (size_t)P->nops + 1, sizeof *out->rdep);
  for (int32_t i = 0; i < P->nops; i++)
    if (P->ops[i].only >= 0 || P->ops[i].tab >= 0) out->rdep[out->nrdep++] = i;
  int32_t *cls = fpi_alloc_array(a, (size_t)P->world_size, sizeof *cls);
  int64_t *rep = fpi_alloc_array(a, (size_t)P->world_size, sizeof *rep);
  out->nclasses = classify(out, cls, rep);
  int64_t *members = fpi_alloc_array(a, (size_t)out->nclasses, sizeof *members);
  for (int64_t r = 0; r < P->world_size; r++) members[cls[r]]++;
  if (n > 0) {
    out->ranks = fpi_alloc_array(a, (size_t)n, sizeof *out->ranks);
    for (int32_t k = 0; k < n; k++) out->ranks[k] = (fp_viz_rank){ranks[k], cls[ranks[k]], members[cls[ranks[k]]]};
    out->nranks = n;
  } else {
    int32_t m = out->nclasses;
    if (max_default > 0 && m > max_default) m = max_default;
    out->ranks = fpi_alloc_array(a, (size_t)m, sizeof *out->ranks);
    for (int32_t c = 0; c < m; c++) out->ranks[c] = (fp_viz_rank){rep[c], c, members[c]};
    out->nranks = m;
  }
  return true;
}
