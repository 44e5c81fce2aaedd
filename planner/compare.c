/* compare.c - modeled against measured, per hook and per step (see
 * compare.h; docs/cost-model.md, "The model's error").
 *
 * Per hook (segment) k with ops: "done at", the time its last op ended, from
 * the start of the step, over the ops of k some record timed (the trainer's
 * compute is never an op of a record): modeled, their latest end in the
 * simulator; measured, the latest end over the ops of k a record ran, the
 * median over the records (each record's times are from its step_begin
 * entry). Per step: the
 * simulator's step against the measured step, each record's latest time,
 * median over the records. The relative error is (modeled - measured) /
 * measured: negative when the model is too fast. */
#include "compare.h"

#include <math.h>
#include <stdlib.h>

#include "sim.h"

static void rel(FILE *f, double m, double x) {
  if (x > 0) fprintf(f, "  %+9.1f%%", 100 * (m - x) / x);
  else fprintf(f, "  %10s", "-");
}

bool fpi_compare_print(fp_arena *a, const fp_prog *P, const fp_hw *hw, const fp_calib_rec *recs,
                       const char *const *names, int32_t nrecs, FILE *f) {
  fp_sim sim;
  if (!fpi_simulate(a, P, hw, &sim)) return false;
  double *v = fpi_alloc_array(a, (size_t)(nrecs > 0 ? nrecs : 1), sizeof *v);
  bool *timed = fpi_alloc_array(a, (size_t)P->nops + 1, sizeof *timed);
  fpi_calib_timed(P, recs, nrecs, timed);
  fprintf(f, "\nmodeled on %s against measured (the median over %d record(s):", hw->name, (int)nrecs);
  for (int32_t r = 0; r < nrecs; r++) fprintf(f, " %s", names[r]);
  fprintf(f, "); times in microseconds from the step's start\n");
  char buf[320];
  int w = fpi_sim_hook_width(P);
  fprintf(f, "%5s  %-*s  %5s  %16s  %16s  %11s\n", "seg", w, "hook", "micro", "modeled done at", "measured done at",
          "error");
  double abs_sum = 0;
  int32_t nrows = 0;
  for (int32_t k = 0; k < P->nsegs; k++) {
    const fp_seg *S = &P->segs[k];
    int32_t n = 0;
    for (int32_t r = 0; r < nrecs; r++) {
      double e = fpi_calib_rec_done(P, &recs[r], k);
      if (e >= 0) v[n++] = e;
    }
    if (!n) continue; /* no op of this hook was timed (empty, or sync only) */
    double x = fpi_calib_median(v, n), m = fpi_calib_done_at(P, &sim, timed, k);
    fprintf(f, "%5d  %-*.*s  %5d  %16.3f  %16.3f", (int)k, w, w, fpi_sim_hook_label(P, S, buf, sizeof buf), (int)S->micro, m, x);
    rel(f, m, x);
    fputc('\n', f);
    if (x > 0) abs_sum += fabs(m - x) / x, nrows++;
  }
  int32_t n = 0;
  for (int32_t r = 0; r < nrecs; r++) v[n++] = fpi_calib_rec_step(P, &recs[r]);
  double x = fpi_calib_median(v, n);
  fprintf(f, "  step: modeled %.3f ms, measured %.3f ms (median)", sim.step_us / 1e3, x / 1e3);
  rel(f, sim.step_us, x);
  fprintf(f, "\n  hooks: mean |error| %.1f%% over %d hook(s) with timed ops\n", nrows ? 100 * abs_sum / nrows : 0.0,
          (int)nrows);
  return true;
}
