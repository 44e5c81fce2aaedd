/* calib.c - fit the cost model's machine to measured steps (see calib.h and
 * docs/cost-model.md, "Calibration").
 *
 * Each measured op duration is one equation "modeled(op, hw) = measured".
 * The cost model (cost.c) is linear in the latencies and in the inverse
 * bandwidths for a collective, so those are fitted by weighted linear least
 * squares (rows divided by the measured time: the fit minimizes relative
 * error, so a 2 us op counts as much as a 2 ms one). The columns are read
 * off the model itself, by evaluating fpi_cost_terms on unit machines, so
 * the fit can never disagree with the model about an op's steps or bytes.
 * A column the records cannot tell apart from those before it (all
 * collectives of one communicator size: per-step latency is then part of
 * the call latency) is set near 0, and said so; a term no measured op has
 * (the network's, on one node) keeps the starting machine's value. Local kernels, max(launch,
 * bytes / bandwidth), are not linear: a search over a log grid, refined
 * twice. The compute rate is the flops of each forward and backward over
 * the trainer's measured time between the hook that ends that segment and
 * the next one's entry (where the compute placeholder sits). */
#include "calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"

const char *fpi_calib_kind_name(int k) {
  static const char *const n[] = {"collective", "local kernel", "host copy", "compute", "hook", "hook done at"};
  return k >= 0 && k < FP_CALIB_NKINDS ? n[k] : "?";
}

#define HUGE_RATE 1e30
#define NCOL 5 /* base_us, nvlink_hop_us, net_hop_us, 1/nvlink_gbps, 1/ib_gbps */
static const char *const col_names[NCOL] = {"base_us", "nvlink_hop_us", "net_hop_us", "nvlink_gbps", "ib_gbps"};

typedef struct sample {
  int32_t op;
  double us; /* measured */
} sample;

typedef struct samples {
  sample *v;
  int64_t n, cap;
} samples;

static bool push(samples *s, int32_t op, double us) {
  if (s->n == s->cap) {
    int64_t c = s->cap ? 2 * s->cap : 64;
    sample *v = realloc(s->v, (size_t)c * sizeof *v);
    if (!v) return false;
    s->v = v;
    s->cap = c;
  }
  s->v[s->n++] = (sample){op, us};
  return true;
}

/* a machine with every latency 0 and every rate huge: probe one term at a time */
static fp_hw zero_hw(const fp_hw *start) {
  fp_hw h = *start;
  h.flops = h.nvlink_gbps = h.ib_gbps = h.hbm_gbps = h.pcie_gbps = HUGE_RATE;
  h.base_us = h.nvlink_hop_us = h.net_hop_us = h.launch_us = 0;
  return h;
}

/* the row of collective op: modeled = row . (base, nvhop, nethop, 1/nv, 1/ib) */
static void coll_row(const fp_prog *P, const fp_op *op, const fp_hw *start, double row[NCOL]) {
  fp_hw h = zero_hw(start);
  h.base_us = 1;
  row[0] = fpi_cost_terms(P, op, &h).lat_us;
  h.base_us = 0, h.nvlink_hop_us = 1;
  row[1] = fpi_cost_terms(P, op, &h).lat_us;
  h.nvlink_hop_us = 0, h.net_hop_us = 1;
  row[2] = fpi_cost_terms(P, op, &h).lat_us;
  h.net_hop_us = 0;
  fp_comm_geo g = fpi_comm_geometry(P, &P->comms[op->comm]);
  /* inside a node NVLink's rate binds; across nodes the NICs' (the model's
   * min(nvlink, k * ib) taken on its network side) */
  if (g.nodes == 1) {
    h.nvlink_gbps = 1;
    row[3] = fpi_cost_terms(P, op, &h).bw_us;
    row[4] = 0;
  } else {
    h.ib_gbps = 1;
    row[3] = 0;
    row[4] = fpi_cost_terms(P, op, &h).bw_us;
  }
}

static double hw_param(const fp_hw *h, int c) {
  switch (c) {
    case 0: return h->base_us;
    case 1: return h->nvlink_hop_us;
    case 2: return h->net_hop_us;
    case 3: return 1 / h->nvlink_gbps;
    default: return 1 / h->ib_gbps;
  }
}
static void set_param(fp_hw *h, int c, double x) {
  switch (c) {
    case 0: h->base_us = x; break;
    case 1: h->nvlink_hop_us = x; break;
    case 2: h->net_hop_us = x; break;
    case 3: h->nvlink_gbps = 1 / x; break;
    default: h->ib_gbps = 1 / x; break;
  }
}

static void kept(fp_calib *out, const char *what) {
  size_t n = strlen(out->kept);
  snprintf(out->kept + n, sizeof out->kept - n, "%s%s", n ? "; " : "", what);
}

/* the two collectives that contradict the model most plainly: of two ops
 * with the same latency terms, the one moving more bytes measured shorter
 * (the largest such ratio), appended to a refusal as "; e.g. ..." */
static void evidence(const fp_prog *P, const samples *s, const fp_hw *hw, char *buf, size_t cap) {
  double best = 1;
  int64_t bi = -1, bj = -1;
  for (int64_t i = 0; i < s->n; i++)
    for (int64_t j = 0; j < s->n; j++) {
      double ri[NCOL], rj[NCOL];
      coll_row(P, &P->ops[s->v[i].op], hw, ri);
      coll_row(P, &P->ops[s->v[j].op], hw, rj);
      if (ri[0] != rj[0] || ri[1] != rj[1] || ri[2] != rj[2]) continue;
      double bytes_i = ri[3] + ri[4], bytes_j = rj[3] + rj[4];
      if (bytes_i > bytes_j && s->v[i].us < s->v[j].us && s->v[j].us / s->v[i].us > best)
        best = s->v[j].us / s->v[i].us, bi = i, bj = j;
    }
  if (bi < 0) return;
  const fp_op *a = &P->ops[s->v[bi].op], *b = &P->ops[s->v[bj].op];
  snprintf(buf, cap,
           "; e.g. op %d (%s of %lld elements) took at least %.1f us, op %d (%s of %lld elements) at least %.1f us",
           (int)s->v[bi].op, fpi_op_name(a->code), (long long)a->count, s->v[bi].us, (int)s->v[bj].op,
           fpi_op_name(b->code), (long long)b->count, s->v[bj].us);
}

/* the weighted system of the collectives: A (column-major, NCOL columns of
 * n rows) and b, each row divided by the op's measured time; any[c] when
 * some op has term c */
static void coll_system(const fp_prog *P, const samples *s, const fp_hw *hw, double *A, double *b, bool any[NCOL]) {
  int64_t n = s->n;
  for (int64_t i = 0; i < n; i++) {
    double row[NCOL];
    coll_row(P, &P->ops[s->v[i].op], hw, row);
    for (int c = 0; c < NCOL; c++) {
      A[c * n + i] = row[c] / s->v[i].us;
      if (row[c] != 0) any[c] = true;
    }
    b[i] = 1;
  }
}

/* a per-step latency the fit leaves out: set near 0, and why said so */
static void step_latency_none(fp_hw *hw, fp_calib *out, int c, const char *why) {
  set_param(hw, c, 1e-3);
  char buf[120];
  snprintf(buf, sizeof buf, "%s set to 0.001 (%s)", col_names[c], why);
  kept(out, buf);
}

/* one step of modified Gram-Schmidt: q = col (n values) minus its
 * projections on the k orthonormal columns of Q before it (their
 * coefficients in rr), normalized. Its length before normalizing; 0 when
 * col is (nearly, within 1%) a combination of those columns */
static double gs_step(const double *Q, int k, int64_t n, const double *col, double *q, double rr[NCOL]) {
  double norm0 = 0;
  for (int64_t i = 0; i < n; i++) q[i] = col[i], norm0 += q[i] * q[i];
  for (int j = 0; j < k; j++) {
    double d = 0;
    for (int64_t i = 0; i < n; i++) d += Q[j * n + i] * q[i];
    rr[j] = d;
    for (int64_t i = 0; i < n; i++) q[i] -= d * Q[j * n + i];
  }
  double norm = 0;
  for (int64_t i = 0; i < n; i++) norm += q[i] * q[i];
  if (norm <= 1e-4 * norm0) return 0; /* not identifiable from these records */
  norm = sqrt(norm);
  for (int64_t i = 0; i < n; i++) q[i] /= norm;
  return norm;
}

/* b minus what the columns measured but not fitted (cols[0..k) are) give
 * at the start's values */
static void b_minus_fixed(const double *A, double *b, int64_t n, const bool any[NCOL], const int *cols, int k,
                          const fp_hw *hw) {
  for (int c = 0; c < NCOL; c++) {
    bool in = false;
    for (int j = 0; j < k; j++) in |= cols[j] == c;
    if (!in && any[c])
      for (int64_t i = 0; i < n; i++) b[i] -= A[c * n + i] * hw_param(hw, c);
  }
}

/* the least-squares solution on the k kept columns: R x = Q^T b, R upper
 * triangular */
static void gs_solve(const double *Q, const double R[NCOL][NCOL], int k, int64_t n, const double *b, double x[NCOL]) {
  double qb[NCOL] = {0};
  for (int j = 0; j < k; j++)
    for (int64_t i = 0; i < n; i++) qb[j] += Q[j * n + i] * b[i];
  for (int j = k - 1; j >= 0; j--) {
    double v = qb[j];
    for (int l = j + 1; l < k; l++) v -= R[j][l] * x[l];
    x[j] = v / R[j][j];
  }
}

/* every fitted value a positive number; else the refusal, with evidence */
static bool coll_fit_positive(const fp_prog *P, const samples *s, const fp_hw *hw, const int *cols,
                              const double *x, int k, char *err, size_t cap) {
  for (int j = 0; j < k; j++)
    if (!(isfinite(x[j]) && x[j] > 0)) {
      int n0 = snprintf(err, cap,
                        "inconsistent records: the collectives' fit gives %s %s %g, not a positive number (are the "
                        "records of one machine, and steady-state steps?)",
                        col_names[cols[j]], cols[j] >= 3 ? "inverse" : "=", x[j]);
      if (n0 > 0 && (size_t)n0 < cap) evidence(P, s, hw, err + n0, cap - (size_t)n0);
      return false;
    }
  return true;
}

/* how the per-op fit of the collectives ended: fitted; refused because the
 * records are too few to tell the terms apart (no other fit can either);
 * refused because they do not follow the model (the step fit may take
 * over); out of memory */
typedef enum { COLLS_FITTED, COLLS_TOO_FEW, COLLS_INCONSISTENT, COLLS_OOM } colls_result;

/* weighted least squares for the collectives by modified Gram-Schmidt:
 * columns taken in a fixed order, each kept only when it is not (nearly) a
 * combination of those kept before; the reason in err unless fitted */
static colls_result fit_colls(const fp_prog *P, const samples *s, fp_hw *hw, fp_calib *out, char *err, size_t cap,
                      unsigned drop) {
  int64_t n = s->n;
  double *A = calloc((size_t)(n * NCOL + n), sizeof *A), *b = A ? A + n * NCOL : NULL;
  if (!A) return snprintf(err, cap, "out of memory"), COLLS_OOM;
  bool any[NCOL] = {0};
  coll_system(P, s, hw, A, b, any);
  static const int order[NCOL] = {0, 3, 4, 1, 2};
  int cols[NCOL], k = 0;
  double R[NCOL][NCOL] = {{0}};
  double *Q = calloc((size_t)(n * NCOL), sizeof *Q);
  if (!Q) return free(A), snprintf(err, cap, "out of memory"), COLLS_OOM;
  for (int oi = 0; oi < NCOL; oi++) {
    int c = order[oi];
    if (!any[c]) continue; /* no op measured has this term: nothing to fit */
    if (drop >> c & 1) { /* a per-step latency that came out negative: none */
      step_latency_none(hw, out, c, "fitted below 0: the call latency takes it");
      continue;
    }
    double rr[NCOL] = {0};
    double norm = gs_step(Q, k, n, A + c * n, Q + k * n, rr);
    if (norm == 0) { /* not identifiable from these records (within 1%) */
      if (c == 3 || c == 4) {
        free(A), free(Q);
        return snprintf(err, cap,
                        "too few records: the collectives measured cannot tell %s from the call latency (they all "
                        "move the same bytes per rank); measure a plan with buckets of different sizes",
                        col_names[c]),
               COLLS_TOO_FEW;
      }
      /* a per-step latency the records cannot separate from the call's:
       * the call latency takes it all (the step latency set near 0) */
      step_latency_none(hw, out, c, "the collectives measured all take the same ring steps");
      continue;
    }
    for (int j = 0; j < k; j++) R[j][k] = rr[j];
    R[k][k] = norm;
    cols[k++] = c;
  }
  if (n < 2 * k) {
    free(A), free(Q);
    return snprintf(err, cap, "too few records: %lld collective durations for %d unknowns (at least %d needed)",
                    (long long)n, k, 2 * k),
           COLLS_TOO_FEW;
  }
  b_minus_fixed(A, b, n, any, cols, k, hw);
  double x[NCOL];
  gs_solve(Q, (const double(*)[NCOL])R, k, n, b, x);
  free(A), free(Q);
  for (int j = 0; j < k; j++) /* a per-step latency below 0: fit again without it */
    if ((cols[j] == 1 || cols[j] == 2) && !(x[j] > 0)) return fit_colls(P, s, hw, out, err, cap, drop | 1u << cols[j]);
  if (!coll_fit_positive(P, s, hw, cols, x, k, err, cap)) return COLLS_INCONSISTENT;
  for (int j = 0; j < k; j++) set_param(hw, cols[j], x[j]);
  return COLLS_FITTED;
}

/* local kernels: max(launch, bytes / rate) by a log-grid search */
static double local_err(const double *bytes, const samples *s, double launch, double rate) {
  double e = 0;
  for (int64_t i = 0; i < s->n; i++) {
    double m = fmax(launch, bytes[i] / (rate * 1e3)), r = (m - s->v[i].us) / s->v[i].us;
    e += r * r;
  }
  return e;
}

static bool fit_local(const fp_prog *P, const samples *s, double *launch, double *rate, bool host, fp_calib *out) {
  double *bytes = malloc((size_t)s->n * sizeof *bytes);
  if (!bytes) return false;
  fp_hw h = zero_hw(&(fp_hw){0});
  h.hbm_gbps = h.pcie_gbps = 1;
  double lo = INFINITY, hi = 0;
  for (int64_t i = 0; i < s->n; i++) {
    bytes[i] = fpi_cost_terms(P, &P->ops[s->v[i].op], &h).bw_us * 1e3;
    lo = fmin(lo, bytes[i]), hi = fmax(hi, bytes[i]);
  }
  double best_l = *launch, best_r = *rate, best = INFINITY;
  if (hi <= lo * 1.01) { /* one size: its time is all one term; the rate is kept */
    double *t = malloc((size_t)s->n * sizeof *t);
    if (!t) return free(bytes), false;
    for (int64_t i = 0; i < s->n; i++) t[i] = s->v[i].us;
    for (int64_t i = 1; i < s->n; i++) /* insertion sort: the median */
      for (int64_t j = i; j > 0 && t[j - 1] > t[j]; j--) {
        double x = t[j];
        t[j] = t[j - 1], t[j - 1] = x;
      }
    *launch = t[s->n / 2];
    free(t);
    kept(out, host ? "pcie_gbps kept (the host copies measured are all one size)"
                   : "hbm_gbps kept (the local kernels measured are all one size)");
    free(bytes);
    return true;
  }
  double l0 = log10(1e-3), l1 = log10(1e5), r0 = log10(1e-3), r1 = log10(1e6);
  for (int pass = 0; pass < 3; pass++) {
    int N = 80;
    for (int i = 0; i <= N; i++)
      for (int j = 0; j <= N; j++) {
        double l = pow(10, l0 + (l1 - l0) * i / N), r = pow(10, r0 + (r1 - r0) * j / N);
        double e = local_err(bytes, s, l, r);
        if (e < best) best = e, best_l = l, best_r = r;
      }
    double wl = (l1 - l0) / N * 2, wr = (r1 - r0) / N * 2;
    l0 = log10(best_l) - wl, l1 = log10(best_l) + wl, r0 = log10(best_r) - wr, r1 = log10(best_r) + wr;
  }
  /* no kernel at the floor: the launch time is not determined; keep the
   * start's, below the shortest kernel measured */
  bool floor = false;
  double shortest = INFINITY;
  for (int64_t i = 0; i < s->n; i++) {
    floor |= bytes[i] / (best_r * 1e3) < best_l;
    shortest = fmin(shortest, s->v[i].us);
  }
  free(bytes);
  *rate = best_r;
  if (floor) {
    *launch = best_l;
  } else if (!host) {
    *launch = fmin(*launch, shortest / 2);
    kept(out, "launch_us kept (every local kernel measured is longer than it)");
  }
  return true;
}

/* residuals of kind k: modeled (on hw) against measured */
static void residuals(const fp_prog *P, const samples *s, const double *model_us, const fp_hw *hw, fp_calib_kind *o) {
  o->n = s->n;
  o->med_rel = o->max_rel = 0;
  if (!s->n) return;
  double *r = malloc((size_t)s->n * sizeof *r);
  if (!r) return;
  for (int64_t i = 0; i < s->n; i++) {
    double m = model_us ? model_us[i] : fpi_cost_op_us(P, &P->ops[s->v[i].op], hw);
    r[i] = fabs(m - s->v[i].us) / fmax(s->v[i].us, 1e-3); /* (a hook's host time may round to 0) */
    o->max_rel = fmax(o->max_rel, r[i]);
  }
  o->med_rel = fpi_calib_median(r, s->n);
  free(r);
}

/* from each record, the measured time of each op it timed (per op, the
 * shortest into mind[]) and the trainer's compute time after each
 * segment's hook (into S[FP_CALIB_COMPUTE], the flops in alpha[]); false
 * when out of memory */
static bool record_times(const fp_prog *P, const fp_calib_rec *recs, int32_t nrecs, samples *S, double *alpha,
                         double *mind) {
  int64_t nalpha = 0;
  for (int32_t r = 0; r < nrecs; r++) {
    const double *ot = recs[r].op_t, *ht = recs[r].hook_t;
    for (int32_t sg = 0; sg < P->nsegs; sg++) {
      const fp_seg *seg = &P->segs[sg];
      for (int32_t i = seg->first; i < seg->first + seg->nops; i++) {
        const fp_op *op = &P->ops[i];
        double t0 = ot[2 * i], t1 = ot[2 * i + 1], d = t1 - t0;
        fp_opclass cls = fpi_op_class(op->code);
        if (cls == FP_OPC_COMPUTE) {
          /* the trainer's work after this segment's hook, before the next's */
          if (op->module < 0 || !(op->alpha > 0) || sg + 1 >= P->nsegs) continue;
          double g = ht[2 * (sg + 1)] - ht[2 * sg + 1];
          if (!(g > 0)) continue;
          if (!push(&S[FP_CALIB_COMPUTE], i, g)) return false;
          alpha[nalpha++] = op->alpha;
          continue;
        }
        if (t0 < 0 || !(d > 0)) continue; /* not run by this rank, or too short to time */
        /* a group's members are issued as one: not separable */
        if (cls == FP_OPC_COMM && (op->group >= 0 || op->comm < 0 || P->comms[op->comm].size <= 1)) continue;
        if (cls == FP_OPC_COMM || cls == FP_OPC_LOCAL) mind[i] = fmin(mind[i], d);
      }
    }
  }
  return true;
}

/* each hook call's host time, one sample per record and segment (op:
 * the segment's index): the call's duration less the ops of its segment
 * the trainer's stream ran inside it (its waits and local kernels, which
 * the model times as ops), at least 0; false when out of memory */
static bool hook_samples(const fp_prog *P, const fp_calib_rec *recs, int32_t nrecs, samples *s) {
  for (int32_t r = 0; r < nrecs; r++) {
    const double *ot = recs[r].op_t, *ht = recs[r].hook_t;
    for (int32_t sg = 0; sg < P->nsegs; sg++) {
      const fp_seg *seg = &P->segs[sg];
      double in = 0;
      for (int32_t i = seg->first; i < seg->first + seg->nops; i++)
        if (P->ops[i].stream == FP_STREAM_COMPUTE && fpi_op_class(P->ops[i].code) != FP_OPC_COMPUTE &&
            ot[2 * i] >= 0)
          in += ot[2 * i + 1] - ot[2 * i];
      if (!push(s, sg, fmax(0, ht[2 * sg + 1] - ht[2 * sg] - in))) return false;
    }
  }
  return true;
}

/* hook_us: the mean host time of a hook call (what the step's total needs),
 * with each sample's model (that constant) in *model_h (malloc'd) */
static bool fit_hook(const samples *h, fp_hw *hw, double **model_h) {
  double sum = 0;
  for (int64_t i = 0; i < h->n; i++) sum += h->v[i].us;
  hw->hook_us = h->n ? sum / (double)h->n : 0;
  *model_h = malloc((size_t)(h->n ? h->n : 1) * sizeof **model_h);
  if (!*model_h) return false;
  for (int64_t i = 0; i < h->n; i++) (*model_h)[i] = hw->hook_us;
  return true;
}

/* one sample per op: its shortest time over the records. A collective's
 * recorded time runs from its issue to the sweep that saw it complete, so
 * it includes waiting for the last peer to issue and for the poll; those
 * only add, and the shortest is the nearest to the transfer itself. False
 * when out of memory */
static bool op_samples(const fp_prog *P, const double *mind, samples *S) {
  for (int32_t i = 0; i < P->nops; i++) {
    if (!isfinite(mind[i])) continue;
    const fp_op *op = &P->ops[i];
    int k = fpi_op_class(op->code) == FP_OPC_COMM                    ? FP_CALIB_COLL
            : op->code == FP_OP_H2D || op->code == FP_OP_D2H ? FP_CALIB_HOST
                                                               : FP_CALIB_LOCAL;
    if (!push(&S[k], i, mind[i])) return false;
  }
  return true;
}

/* the compute rate: the measured compute time over the flops, x = sum(g) /
 * sum(alpha) us per flop (the modeled compute of the records' steps is then
 * the measured, which the step's length rests on: a least squares on the
 * relative error lets the many short forwards set the rate, and a backward
 * slower per flop than its forward is then modeled short: 11% of the step
 * on the MLP of docs/cost-model.md), into hw->flops, with each sample's
 * modeled time in *model_c (malloc'd); false with the reason in err */
static bool fit_compute(const samples *c, const double *alpha, fp_hw *hw, double **model_c, char *err, size_t cap) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < c->n; i++) num += c->v[i].us, den += alpha[i];
  double x = num / den; /* us per flop */
  if (!(isfinite(x) && x > 0)) {
    snprintf(err, cap, "inconsistent records: the compute rate fitted is not a positive number");
    return false;
  }
  hw->flops = 1e6 / x;
  *model_c = malloc((size_t)c->n * sizeof **model_c);
  if (!*model_c) {
    snprintf(err, cap, "out of memory");
    return false;
  }
  for (int64_t i = 0; i < c->n; i++) (*model_c)[i] = alpha[i] / hw->flops * 1e6;
  return true;
}

/* the parameters of local kernels, host copies and compute fitted to their
 * samples in turn, those of a kind not measured kept and said so; with the
 * compute samples' modeled times in *model_c (malloc'd, NULL when none);
 * false with the reason in err */
static bool fit_kinds(const fp_prog *P, samples *S, const double *alpha, fp_hw *hw, fp_calib *out, double **model_c,
                      char *err, size_t cap) {
  *model_c = NULL;
  bool mem = true;
  if (S[FP_CALIB_LOCAL].n)
    mem = fit_local(P, &S[FP_CALIB_LOCAL], &hw->launch_us, &hw->hbm_gbps, false, out);
  else
    kept(out, "hbm_gbps and launch_us kept (no local kernel was measured)");
  if (mem && S[FP_CALIB_HOST].n) {
    double launch = hw->launch_us;
    mem = fit_local(P, &S[FP_CALIB_HOST], &launch, &hw->pcie_gbps, true, out);
  }
  if (!mem) {
    snprintf(err, cap, "out of memory");
    return false;
  }
  if (S[FP_CALIB_COMPUTE].n) return fit_compute(&S[FP_CALIB_COMPUTE], alpha, hw, model_c, err, cap);
  kept(out, "flops kept (no forward or backward with flops was measured)");
  return true;
}

/* the collectives: per op (fit_colls) when that fit is accepted (positive
 * values, median residual within FP_CALIB_MAX_MEDIAN); when it is refused
 * as inconsistent, against the measured hooks and step
 * (fpi_calib_fit_step), the per-op reason kept in the note; false with the
 * reason in err (too few records, out of memory, or the step fit failed) */
static bool fit_collectives(const fp_prog *P, const samples *coll, const fp_calib_rec *recs, int32_t nrecs, fp_hw *hw,
                            fp_calib *out, char *err, size_t cap) {
  if (!coll->n) {
    kept(out, "collective latencies and bandwidths kept (no collective of 2 or more ranks was measured)");
    return true;
  }
  fp_hw h = *hw;
  char saved[sizeof out->kept], why[600];
  memcpy(saved, out->kept, sizeof saved);
  colls_result r = fit_colls(P, coll, &h, out, why, sizeof why, 0);
  if (r == COLLS_FITTED) {
    fp_calib_kind k;
    residuals(P, coll, NULL, &h, &k);
    if (k.med_rel <= FP_CALIB_MAX_MEDIAN) return *hw = h, true;
    snprintf(why, sizeof why, "the per-op fit is off by a median %.0f%% on the %lld collective durations",
             100 * k.med_rel, (long long)k.n);
  } else if (r != COLLS_INCONSISTENT) { /* (too few: the step cannot tell them apart either) */
    snprintf(err, cap, "%s", why);
    return false;
  }
  memcpy(out->kept, saved, sizeof saved); /* (the refused fit's notes) */
  char note[400], e2[300];
  if (!fpi_calib_fit_step(P, recs, nrecs, hw, &out->kinds[FP_CALIB_DONE], &out->step_rel, note, sizeof note, e2,
                          sizeof e2)) {
    snprintf(err, cap, "%s", e2);
    return false;
  }
  out->by_step = true;
  snprintf(out->per_op, sizeof out->per_op, "%.300s", why);
  kept(out, note);
  char *n = out->kept + strlen(out->kept);
  snprintf(n, sizeof out->kept - (size_t)(n - out->kept), " (per op: %s)", out->per_op);
  return true;
}

/* a fit that misses half its ops by more than half is no fit: the records
 * do not follow the model (peers' arrival, a loaded machine); false with
 * the reason in err */
static bool fit_close_enough(const fp_calib *out, char *err, size_t cap) {
  for (int k = 0; k < FP_CALIB_NKINDS; k++)
    if (k != FP_CALIB_HOOK && !(k == FP_CALIB_COLL && out->by_step) && out->kinds[k].n &&
        out->kinds[k].med_rel > FP_CALIB_MAX_MEDIAN) {
      snprintf(err, cap,
               "inconsistent records: the fitted model is off by a median %.0f%% on the %lld %s durations (more "
               "than %.0f%%): they do not follow the cost model (peers' arrival or a loaded machine?)",
               100 * out->kinds[k].med_rel, (long long)out->kinds[k].n, fpi_calib_kind_name(k),
               100 * FP_CALIB_MAX_MEDIAN);
      return false;
    }
  return true;
}

bool fpi_calibrate(const fp_prog *P, const fp_hw *start, const fp_calib_rec *recs, int32_t nrecs, fp_calib *out,
                   char *err, size_t cap) {
  memset(out, 0, sizeof *out);
  out->hw = *start;
  samples S[FP_CALIB_NKINDS] = {{0}};
  double *alpha = NULL;   /* compute: the flops of each sample */
  double *mind = NULL;    /* per op: the shortest measured time (INFINITY: none) */
  double *model_c = NULL; /* compute: each sample's modeled time */
  double *model_h = NULL; /* hooks: each sample's modeled time */
  bool ok = false;
  if (nrecs <= 0) {
    snprintf(err, cap, "too few records: none given");
    goto done;
  }
  alpha = malloc((size_t)(P->nops + 1) * (size_t)nrecs * sizeof *alpha);
  mind = malloc((size_t)(P->nops + 1) * sizeof *mind);
  if (!alpha || !mind) goto oom;
  for (int32_t i = 0; i < P->nops; i++) mind[i] = INFINITY;
  if (!record_times(P, recs, nrecs, S, alpha, mind) || !op_samples(P, mind, S)) goto oom;
  int64_t total = 0;
  for (int k = 0; k < FP_CALIB_NKINDS; k++) total += S[k].n;
  if (total && !hook_samples(P, recs, nrecs, &S[FP_CALIB_HOOK])) goto oom; /* (hooks alone fit nothing else) */
  if (!total) {
    snprintf(err, cap, "too few records: no op or trainer time with a positive duration was measured");
    goto done;
  }
  fp_hw *hw = &out->hw;
  if (!fit_kinds(P, S, alpha, hw, out, &model_c, err, cap)) goto done;
  if (!fit_hook(&S[FP_CALIB_HOOK], hw, &model_h)) goto oom;
  if (!fit_collectives(P, &S[FP_CALIB_COLL], recs, nrecs, hw, out, err, cap)) goto done;
  if (!fpi_hw_valid(hw)) {
    snprintf(err, cap, "inconsistent records: the fitted machine has a rate or latency that is not a positive number");
    goto done;
  }
  for (int k = 0; k < FP_CALIB_NKINDS; k++)
    if (k != FP_CALIB_DONE) /* (the step fit's own rows) */
      residuals(P, &S[k], k == FP_CALIB_COMPUTE ? model_c : k == FP_CALIB_HOOK ? model_h : NULL, hw, &out->kinds[k]);
  ok = fit_close_enough(out, err, cap);
  if (!ok && out->by_step) {
    size_t n = strlen(err);
    snprintf(err + n, cap - n, "; the collectives fitted to the measured step (per op: %s)", out->per_op);
  }
  goto done;
oom:
  snprintf(err, cap, "out of memory");
done:
  for (int k = 0; k < FP_CALIB_NKINDS; k++) free(S[k].v);
  free(model_c);
  free(model_h);
  free(alpha);
  free(mind);
  return ok;
}
