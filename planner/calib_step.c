/* calib_step.c - the collectives fitted to the measured step, not per op
 * (see calib.h, fpi_calib_fit_step; docs/cost-model.md, "Calibration").
 *
 * Where ranks share cores (two MPI ranks on one busy machine), a
 * collective's recorded time is mostly its peers' arrival: the shortest
 * over the records still does not grow with the bytes, and the per-op fit
 * (calib.c) is refused. What the records do still measure is when each
 * hook's work was done and how long the step took. So the collectives'
 * call latency (base_us) and the rate of the link they use (nvlink_gbps on
 * one node, ib_gbps when a measured collective spans nodes) are chosen so
 * that the simulator, on the machine with everything else already fitted,
 * gives those times: least squares on the relative error of each hook's
 * "done at" (the latest end of its ops, median over the records, as
 * `simulate --measured` compares them) plus the step, weighted as much as
 * all hooks together. The simulator is not linear in the two (overlap is a
 * max), so this is a search over a log grid, refined twice around the best.
 * Where several points fit exactly as well (collectives hidden behind
 * compute at every point), the costliest is kept: the slowest collectives
 * these steps are consistent with, and said so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib.h"
#include "cost.h"
#include "sim.h"

typedef struct target {
  double *done;  /* per segment: measured done-at (us), median over records; < 0: no timed op */
  double step;   /* the measured step, median over records */
  int32_t nrows; /* segments with a done-at */
  bool ib;       /* the rate fitted is ib_gbps (a measured collective spans nodes) */
  bool *timed;   /* per op: some record timed it (fpi_calib_timed) */
} target;

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double fpi_calib_median(double *v, int64_t n) {
  qsort(v, (size_t)n, sizeof *v, cmp_dbl);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double fpi_calib_rec_done(const fp_prog *P, const fp_calib_rec *r, int32_t k) {
  const fp_seg *S = &P->segs[k];
  double e = -1;
  for (int32_t i = S->first; i < S->first + S->nops; i++)
    if (r->op_t[2 * i] >= 0) e = fmax(e, r->op_t[2 * i + 1]);
  return e;
}

double fpi_calib_rec_step(const fp_prog *P, const fp_calib_rec *r) {
  double e = 0;
  for (int32_t i = 0; i < P->nops; i++)
    if (r->op_t[2 * i] >= 0) e = fmax(e, r->op_t[2 * i + 1]);
  for (int32_t k = 0; k < P->nsegs; k++) e = fmax(e, r->hook_t[2 * k + 1]);
  return e;
}

/* the measured done-at of each segment, the step and the timed ops; false
 * when out of memory */
static bool measure(const fp_prog *P, const fp_calib_rec *recs, int32_t nrecs, target *t) {
  double *v = malloc((size_t)nrecs * sizeof *v);
  t->done = malloc((size_t)(P->nsegs + 1) * sizeof *t->done);
  t->timed = malloc((size_t)(P->nops + 1) * sizeof *t->timed);
  if (!v || !t->done || !t->timed) return free(v), false;
  fpi_calib_timed(P, recs, nrecs, t->timed);
  t->nrows = 0;
  for (int32_t k = 0; k < P->nsegs; k++) {
    int32_t n = 0;
    for (int32_t r = 0; r < nrecs; r++) {
      double e = fpi_calib_rec_done(P, &recs[r], k);
      if (e > 0) v[n++] = e;
    }
    t->done[k] = n ? fpi_calib_median(v, n) : -1;
    t->nrows += n > 0;
  }
  for (int32_t r = 0; r < nrecs; r++) v[r] = fpi_calib_rec_step(P, &recs[r]);
  t->step = fpi_calib_median(v, nrecs);
  free(v);
  /* the caller's records timed a collective (an op ending after 0) */
  FP_ASSERT(t->nrows > 0 && t->step > 0);
  return true;
}

void fpi_calib_timed(const fp_prog *P, const fp_calib_rec *recs, int32_t nrecs, bool *timed) {
  for (int32_t i = 0; i < P->nops; i++) {
    timed[i] = false;
    for (int32_t r = 0; r < nrecs && !timed[i]; r++) timed[i] = recs[r].op_t[2 * i] >= 0;
  }
}

double fpi_calib_done_at(const fp_prog *P, const fp_sim *S, const bool *timed, int32_t k) {
  const fp_seg *sg = &P->segs[k];
  double e = -1;
  for (int32_t i = sg->first; i < sg->first + sg->nops; i++)
    if (timed[i]) e = fmax(e, S->end_us[i]);
  return e;
}

/* a point of the search: the call latency and the inverse rate */
static void set_point(fp_hw *h, const target *t, double lat, double inv) {
  h->base_us = lat;
  if (t->ib) h->ib_gbps = 1 / inv;
  else h->nvlink_gbps = 1 / inv;
}

/* the objective at hw: mean squared relative error of the hooks' done-at
 * plus the step's squared relative error; INFINITY when the simulation
 * fails. With rows (may be NULL) each hook's |error| and the step's */
static double objective(const fp_prog *P, const fp_hw *hw, const target *t, double *rows, double *step_rel) {
  fp_arena *a = fpi_arena_new();
  fp_sim sim;
  double e = INFINITY;
  if (fpi_simulate(a, P, hw, &sim)) {
    double s = 0;
    int32_t n = 0;
    for (int32_t k = 0; k < P->nsegs; k++) {
      if (t->done[k] < 0) continue;
      double r = (fpi_calib_done_at(P, &sim, t->timed, k) - t->done[k]) / t->done[k];
      s += r * r;
      if (rows) rows[n] = fabs(r);
      n++;
    }
    double rs = (sim.step_us - t->step) / t->step;
    if (step_rel) *step_rel = rs;
    e = s / t->nrows + rs * rs;
  }
  fpi_arena_free(a);
  return e;
}

/* the search: log grid over base_us in [1e-2, 1e6] us and the rate in
 * [1e-4, 1e5] GB/s, refined twice around the best; ties go to the costlier
 * point (see the file's comment) */
static void search(const fp_prog *P, fp_hw *hw, const target *t, double *best_e) {
  double l0 = -2, l1 = 6, i0 = -5, i1 = 4; /* log10 of base_us and of 1/gbps */
  double bl = hw->base_us, bi = 1 / (t->ib ? hw->ib_gbps : hw->nvlink_gbps), best = INFINITY;
  enum { N = 24 };
  for (int pass = 0; pass < 3; pass++) {
    for (int i = 0; i <= N; i++)
      for (int j = 0; j <= N; j++) {
        double lat = pow(10, l0 + (l1 - l0) * i / N), inv = pow(10, i0 + (i1 - i0) * j / N);
        set_point(hw, t, lat, inv);
        double e = objective(P, hw, t, NULL, NULL);
        if (e <= best) best = e, bl = lat, bi = inv;
      }
    double wl = (l1 - l0) / N * 2, wi = (i1 - i0) / N * 2;
    l0 = log10(bl) - wl, l1 = log10(bl) + wl, i0 = log10(bi) - wi, i1 = log10(bi) + wi;
  }
  set_point(hw, t, bl, bi);
  *best_e = best;
}

/* does a measured collective span nodes? */
static bool spans_nodes(const fp_prog *P, const bool *timed) {
  for (int32_t i = 0; i < P->nops; i++) {
    const fp_op *op = &P->ops[i];
    if (fpi_op_class(op->code) != FP_OPC_COMM || op->comm < 0 || P->comms[op->comm].size <= 1) continue;
    if (timed[i] && fpi_comm_geometry(P, &P->comms[op->comm]).nodes > 1) return true;
  }
  return false;
}

bool fpi_calib_fit_step(const fp_prog *P, const fp_calib_rec *recs, int32_t nrecs, fp_hw *hw, fp_calib_kind *rows,
                        double *step_rel, char *note, size_t ncap, char *err, size_t cap) {
  target t = {0};
  memset(rows, 0, sizeof *rows);
  if (!measure(P, recs, nrecs, &t)) {
    free(t.done), free(t.timed);
    snprintf(err, cap, "out of memory");
    return false;
  }
  t.ib = spans_nodes(P, t.timed);
  hw->nvlink_hop_us = hw->net_hop_us = 1e-3; /* the call latency takes the steps' */
  double best;
  search(P, hw, &t, &best);
  double *r = malloc((size_t)t.nrows * sizeof *r);
  if (!r) return free(t.done), free(t.timed), snprintf(err, cap, "out of memory"), false;
  objective(P, hw, &t, r, step_rel);
  rows->n = t.nrows;
  for (int32_t k = 0; k < t.nrows; k++) rows->max_rel = fmax(rows->max_rel, r[k]);
  rows->med_rel = fpi_calib_median(r, t.nrows);
  free(r);
  /* hidden: collectives a thousand times cheaper fit exactly as well */
  fp_hw cheap = *hw;
  set_point(&cheap, &t, hw->base_us / 1e3, 1 / (t.ib ? hw->ib_gbps : hw->nvlink_gbps) / 1e3);
  bool hidden = objective(P, &cheap, &t, NULL, NULL) <= best * (1 + 1e-9);
  const char *rate = t.ib ? "ib_gbps" : "nvlink_gbps";
  snprintf(note, ncap,
           "base_us and %s fitted to the measured hooks and step, not per op; nvlink_hop_us and net_hop_us set to "
           "0.001%s",
           rate,
           hidden ? " (the collectives were hidden behind compute in these steps: the slowest that stay hidden, an "
                    "upper bound)"
                  : "");
  free(t.done), free(t.timed);
  if (!isfinite(best)) return snprintf(err, cap, "inconsistent records: no machine simulates these steps"), false;
  return true;
}
