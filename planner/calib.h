/* calib.h - fit the cost model's machine to measured steps (flexplan calibrate).
 *
 * Input: one plan and the executor's timing records of it (any ranks, any
 * number of runs): per record, each op's measured [start, end] (-1 where the
 * rank did not run it) and each hook's [enter, leave], as
 * fp_exec_timing_write writes them (docs/viz.md, "Measured beside
 * modeled"). Output: a machine (fp_hw) whose modeled op times fit the
 * measured ones by least squares on the relative error, and the fit's
 * residuals per op kind. docs/cost-model.md, "Calibration", says what is
 * fitted from what and what is kept from the starting machine. */
#ifndef FP_CALIB_H
#define FP_CALIB_H

#include "../ir/ir.h"

typedef struct fp_calib_rec {
  const double *op_t;   /* [nops][2] start, end (us); start < 0: not run */
  const double *hook_t; /* [nsegs][2] enter, leave (us) */
} fp_calib_rec;

/* kinds of measured durations; FP_CALIB_DONE: each hook's "done at" (the
 * latest end of its ops), the rows of a step fit (fpi_calib_fit_step) */
enum { FP_CALIB_COLL, FP_CALIB_LOCAL, FP_CALIB_HOST, FP_CALIB_COMPUTE, FP_CALIB_HOOK, FP_CALIB_DONE, FP_CALIB_NKINDS };

typedef struct fp_calib_kind {
  int64_t n;              /* measured durations fitted */
  double med_rel, max_rel; /* |modeled - measured| / measured over them */
} fp_calib_kind;

typedef struct fp_calib {
  fp_hw hw;                            /* the fitted machine (name: the start's) */
  fp_calib_kind kinds[FP_CALIB_NKINDS];
  char kept[1024];                     /* the fields kept from the start, and why ("" none) */
  bool by_step;   /* the collectives fitted to the measured step (the per-op fit was refused) */
  double step_rel; /* by_step: (modeled - measured) / measured step on the fitted machine */
  char per_op[320]; /* by_step: why the per-op fit of the collectives was refused */
} fp_calib;

/* a fit whose median |modeled - measured| / measured on some op kind is
 * above this is refused (the records do not follow the model); hooks are
 * exempt: their host time is one constant for calls that differ (the
 * first, the last, those that free or allocate), so only its mean is
 * meant to fit */
#define FP_CALIB_MAX_MEDIAN 0.5

/* the kind's name in messages: "collective", "local kernel", "host copy", "compute", "hook",
 * "hook done at" */
const char *fpi_calib_kind_name(int k);
/* Fit hw to the records, starting from (and keeping what cannot be fitted
 * of) *start. False with the reason in err (too few or inconsistent
 * records: a fitted rate or latency <= 0, a median residual above
 * FP_CALIB_MAX_MEDIAN, or nothing measured). */
bool fpi_calibrate(const fp_prog *P, const fp_hw *start, const fp_calib_rec *recs, int32_t nrecs, fp_calib *out,
                   char *err, size_t cap);

/* the median of v[0..n) (n >= 1; sorts v) */
double fpi_calib_median(double *v, int64_t n);
/* a record's "done at" of segment k: the latest end over the segment's ops
 * it timed (-1: none); and its step: the latest time it holds (op ends and
 * hook leaves) */
double fpi_calib_rec_done(const fp_prog *P, const fp_calib_rec *r, int32_t k);
double fpi_calib_rec_step(const fp_prog *P, const fp_calib_rec *r);

/* timed[i] (P->nops): some record timed op i (op_t[2i] >= 0) */
void fpi_calib_timed(const fp_prog *P, const fp_calib_rec *recs, int32_t nrecs, bool *timed);
/* segment k's modeled "done at" on the replay S (planner/sim.h): the
 * latest simulated end over its ops that some record timed (timed:
 * fpi_calib_timed; the trainer's compute never is one), as the records'
 * own done-at is taken; -1 when no record timed any */
struct fp_sim;
double fpi_calib_done_at(const fp_prog *P, const struct fp_sim *S, const bool *timed, int32_t k);

/* The collectives' call latency and link rate fitted to the measured step
 * instead of per op (calib_step.c): hw holds every other field fitted; on
 * success hw's base_us and nvlink_gbps (ib_gbps when a measured collective
 * spans nodes) are set, the hop latencies set near 0, rows gets each
 * hook's done-at residual, *step_rel the step's, note what was done. The
 * records must have timed a collective. False with the reason in err (out
 * of memory, or no point of the search simulates). */
bool fpi_calib_fit_step(const fp_prog *P, const fp_calib_rec *recs, int32_t nrecs, fp_hw *hw, fp_calib_kind *rows,
                        double *step_rel, char *note, size_t ncap, char *err, size_t cap);

#endif
