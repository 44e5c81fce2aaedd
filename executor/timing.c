/* timing.c - the opt-in record of measured times: when each hook of this
 * rank was entered and left, and when each of its ops started and ended as
 * the backend ran it, for a fixed number of steps; written as JSON
 * ("flexplan.timing.v1") for `flexplan viz PLAN --measured FILE`, which
 * draws the measured step beside the modeled one (docs/viz.md).
 *
 * The record is one allocation made by fp_exec_timing_start, between steps:
 * steps x resolved ops x {start, end}, and steps x segments x {enter,
 * leave}, every slot -1 until written. Hooks and the progress thread only
 * store doubles into their slots (no allocation, no lock beyond the one the
 * stream already holds). Steps past the record's end are not recorded. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec_impl.h"

#define TIMING_MAX_STEPS 65536

typedef struct fpx_timing {
  int64_t first;  /* the first step recorded (x->stats.steps at start) */
  int32_t cap;    /* steps recorded at most */
  double *ops;    /* [cap][nxops][2]: start, end (-1: not yet) */
  double *hooks;  /* [cap][nsegs][2]: enter, leave */
} fpx_timing;

double fpx_now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

void fpx_timing_free(fp_exec *x) {
  if (!x->timing) return;
  fpx_free(x->timing->ops);
  fpx_free(x->timing->hooks);
  fpx_free(x->timing);
  x->timing = NULL;
}

/* the slot pair of step `step`, or NULL outside the record */
static double *slot(const fpx_timing *t, double *base, int64_t step, int64_t n, int64_t i) {
  int64_t k = step - t->first;
  if (k < 0 || k >= t->cap) return NULL;
  return base + (k * n + i) * 2;
}

void fpx_time_op(fp_exec *x, const fp_xop *o, int64_t step, bool end) {
  fpx_timing *t = x->timing;
  if (!t) return;
  double *s = slot(t, t->ops, step, x->nxops, o - x->xops);
  if (!s) return;
  if (end) s[1] = fpx_now_us();
  else if (s[0] < 0) s[0] = fpx_now_us();
}

void fpx_time_hook(fp_exec *x, int32_t seg, double enter, double leave) {
  fpx_timing *t = x->timing;
  if (!t) return;
  double *s = slot(t, t->hooks, x->stats.steps, x->prog->nsegs, seg);
  if (!s) return;
  s[0] = enter, s[1] = leave;
}

static fp_status between_steps(fp_exec *x, const char *what) {
  if (!x->created) return fpx_fail(x, FP_ERR_ARG, "the executor was not created successfully");
  if (x->broken) return FP_ERR_BACKEND;
  if (x->cursor != 0 || x->in_hook)
    return fpx_fail(x, FP_ERR_ORDER, "%s: call it between steps (the step in progress is at segment %" PRId32 " of %" PRId32 ")",
                    what, x->cursor, x->prog->nsegs);
  return FP_OK;
}

fp_status fp_exec_timing_start(fp_exec *x, int32_t steps) {
  if (!x) return FP_ERR_ARG;
  FPX_CHECK(between_steps(x, "fp_exec_timing_start"));
  if (x->cfg.backend != FP_BACKEND_MPI && x->cfg.backend != FP_BACKEND_EXTERNAL)
    return fpx_fail(x, FP_ERR_ARG, "measured timing is recorded by the host backends only (MPI, external; docs/executor.md)");
  if (steps < 1 || steps > TIMING_MAX_STEPS)
    return fpx_fail(x, FP_ERR_ARG, "fp_exec_timing_start: steps must be 1..%d, not %" PRId32, TIMING_MAX_STEPS, steps);
  fpx_timing_free(x);
  fpx_timing *t = fpx_alloc(x, 1, sizeof *t);
  int64_t nops = (int64_t)steps * (x->nxops > 0 ? x->nxops : 1) * 2;
  int64_t nhooks = (int64_t)steps * x->prog->nsegs * 2;
  double *ops = t ? fpx_alloc(x, (size_t)nops, sizeof *ops) : NULL;
  double *hooks = t ? fpx_alloc(x, (size_t)nhooks, sizeof *hooks) : NULL;
  if (!t || !ops || !hooks) {
    fpx_free(t), fpx_free(ops), fpx_free(hooks);
    return fpx_fail(x, FP_ERR_NOMEM, "cannot allocate the timing record (%" PRId32 " steps)", steps);
  }
  for (int64_t i = 0; i < nops; i++) ops[i] = -1;
  for (int64_t i = 0; i < nhooks; i++) hooks[i] = -1;
  *t = (fpx_timing){.first = x->stats.steps, .cap = steps, .ops = ops, .hooks = hooks};
  x->timing = t;
  return FP_OK;
}

/* a JSON string of a plan's name (plans hold printable ASCII; anything else is escaped) */
static void put_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

/* microseconds relative to t0, to the nanosecond */
static void put_us(FILE *f, double t, double t0) { fprintf(f, "%.3f", t - t0); }

static bool write_steps(fp_exec *x, const fpx_timing *t, int64_t nsteps, FILE *f) {
  const fp_prog *p = x->prog;
  fprintf(f, "{\"format\":\"flexplan.timing.v1\",\"plan_hash\":\"fnv1a64:%016" PRIx64 "\",\"model\":", x->stats.plan_hash);
  put_str(f, p->model);
  fprintf(f, ",\"rank\":%" PRId64 ",\"world_size\":%" PRId64 ",\"backend\":\"mpi\",\"progress\":\"%s\",", x->rank,
          x->world, x->stats.progress == FP_PROGRESS_THREAD ? "thread" : "poll");
  fputs("\"clock\":\"CLOCK_MONOTONIC\",\"unit\":\"us\",\"origin\":\"each step's step_begin entry\",\n\"steps\":[", f);
  for (int64_t k = 0; k < nsteps; k++) {
    const double *h = t->hooks + k * p->nsegs * 2;
    double t0 = h[0];
    fprintf(f, "%s\n{\"step\":%" PRId64 ",\"hooks\":[", k ? "," : "", t->first + k);
    for (int32_t s = 0; s < p->nsegs; s++) {
      fprintf(f, "%s[%" PRId32 ",", s ? "," : "", s);
      put_us(f, h[2 * s], t0);
      fputc(',', f);
      put_us(f, h[2 * s + 1], t0);
      fputc(']', f);
    }
    fputs("],\n \"ops\":[", f);
    const double *o = t->ops + k * x->nxops * 2;
    bool first = true;
    for (int32_t j = 0; j < x->nxops; j++) {
      if (o[2 * j] < 0 || o[2 * j + 1] < 0) continue; /* a wait whose record this rank never makes, ... */
      fprintf(f, "%s[%" PRId32 ",", first ? "" : ",", x->xops[j].index);
      put_us(f, o[2 * j], t0);
      fputc(',', f);
      put_us(f, o[2 * j + 1], t0);
      fputc(']', f);
      first = false;
    }
    fputs("]}", f);
  }
  fputs("\n]}\n", f);
  return !ferror(f);
}

fp_status fp_exec_timing_write(fp_exec *x, const char *path) {
  if (!x || !path) return FP_ERR_ARG;
  FPX_CHECK(between_steps(x, "fp_exec_timing_write"));
  const fpx_timing *t = x->timing;
  if (!t) return fpx_fail(x, FP_ERR_ARG, "fp_exec_timing_write: no timing was recorded (call fp_exec_timing_start first)");
  int64_t nsteps = x->stats.steps - t->first;
  if (nsteps > t->cap) nsteps = t->cap;
  if (nsteps < 1) return fpx_fail(x, FP_ERR_ARG, "fp_exec_timing_write: no step has completed since fp_exec_timing_start");
  FPX_CHECK(fp_exec_sync(x)); /* every op of the recorded steps has ended */
  fp_out o; /* whole or not at all; a device or FIFO written in place */
  if (!fpi_out_open(&o, path))
    return fpx_fail(x, FP_ERR_ARG, "%s: cannot write the timing record: %s", path, strerror(errno));
  if (!write_steps(x, t, nsteps, o.f)) {
    int e = errno;
    fpi_out_abort(&o);
    return fpx_fail(x, FP_ERR_ARG, "%s: cannot write the timing record: %s", path, e ? strerror(e) : "write failed");
  }
  if (!fpi_out_commit(&o))
    return fpx_fail(x, FP_ERR_ARG, "%s: cannot write the timing record: %s", path, strerror(errno));
  return FP_OK;
}
