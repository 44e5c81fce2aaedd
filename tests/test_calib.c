/* test_calib.c - planner/calib.c without timing anything: timing records are
 * synthesized from a known machine (each op's modeled time on it, with
 * +-5% deterministic noise, as several ranks and runs would record them),
 * and the fit must give that machine back within the tolerances stated in
 * docs/cost-model.md ("Calibration"): 10% on each rate and latency the
 * records determine, 5% on the compute rate; too few or inconsistent
 * records are refused with their reason. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "planner/calib.h"
#include "planner/cost.h"
#include "planner/pipeline.h"
#include "planner/sim.h"

static fp_prog *compile_example(fp_arena *a, const char *name) {
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_model m;
  fp_spec s;
  fp_compiled c;
  const char *path = fpi_sprintf(a, "%s/examples/%s.json", FP_SOURCE_DIR, name);
  assert_true(fpi_inputs_load(a, &d, path, NULL, &m, &s));
  assert_true(fpi_compile(a, &d, &m, &s, &c));
  fpi_diag_free(&d);
  return c.prog;
}

/* a CPU-like truth, far from the h100-sxm start */
static fp_hw truth(void) {
  fp_hw h;
  assert_true(fpi_hw_preset("h100-sxm", &h));
  h.name = "truth";
  h.base_us = 25;
  h.nvlink_hop_us = 6;
  h.net_hop_us = 40;
  h.nvlink_gbps = 0.1; /* slow enough that the examples' few-KiB buckets */
  h.ib_gbps = 0.05;    /* spend longer moving bytes than in latency, and */
  h.hbm_gbps = 2.0;    /* their kernels span the launch time: some below, some past */
  h.launch_us = 1.5;
  h.flops = 30e9;
  h.hook_us = 3;
  return h;
}

static uint64_t lcg = 12345;
static double noise(double amp) { /* uniform in [1 - amp, 1 + amp] */
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return 1 + amp * (2 * ((double)(lcg >> 11) / 9007199254740992.0) - 1);
}

/* a record of one rank's step on hw: ops back to back, each its modeled
 * time (x noise); each hook call as long as the segment's ops on the
 * trainer's stream plus hw->hook_us (x noise); the trainer's time after
 * each hook the modeled compute of the segment's placeholder; keep(op)
 * false: the op marked not run */
static fp_calib_rec synth(fp_arena *a, const fp_prog *P, const fp_hw *hw, double amp, bool (*keep)(const fp_prog *, int32_t)) {
  double *ot = fpi_alloc_array(a, (size_t)P->nops * 2, sizeof *ot), *ht = fpi_alloc_array(a, (size_t)P->nsegs * 2, sizeof *ht);
  double t = 0, enter = 0; /* t: where the next op starts */
  for (int32_t s = 0; s < P->nsegs; s++) {
    ht[2 * s] = enter;
    t = fmax(t, enter);
    double gap = 0, in = 0; /* in: the segment's trainer-stream ops */
    for (int32_t i = P->segs[s].first; i < P->segs[s].first + P->segs[s].nops; i++) {
      const fp_op *op = &P->ops[i];
      if (op->code == FP_OP_COMPUTE) {
        gap += fpi_cost_op_us(P, op, hw) * noise(amp);
        ot[2 * i] = ot[2 * i + 1] = -1;
        continue;
      }
      if (keep && !keep(P, i)) {
        ot[2 * i] = ot[2 * i + 1] = -1;
        continue;
      }
      double d = fpi_cost_op_us(P, op, hw) * noise(amp);
      ot[2 * i] = t;
      ot[2 * i + 1] = t + d;
      t += d;
      if (op->stream == FP_STREAM_COMPUTE) in += d;
    }
    /* the call: its own ops and its host time; the others' ops run beside
     * it (a stream of their own), and the trainer's work follows the call */
    ht[2 * s + 1] = ht[2 * s] + in + hw->hook_us * noise(amp);
    enter = ht[2 * s + 1] + gap;
  }
  return (fp_calib_rec){ot, ht};
}

/* a record of the simulated step on hw (what ranks that run in lockstep
 * record): each timed op its simulated [start, end], the trainer's
 * stream's waits from where that stream stood to where the simulator
 * released it, each hook call from the end of the trainer's work before it
 * to the start of its segment's compute (so the call's own time is
 * hw->hook_us), the compute never an op; times shifted so the step starts
 * at 0. peer_us > 0: every collective's start moved back by peer_us times
 * 1, 2 or 3 (by its index), as if it waited for a peer that arrived late
 * (its end, the transfer's, unchanged) */
static fp_calib_rec synth_sim(fp_arena *a, const fp_prog *P, const fp_hw *hw, double peer_us) {
  fp_sim S;
  assert_true(fpi_simulate(a, P, hw, &S));
  double *ot = fpi_alloc_array(a, (size_t)P->nops * 2, sizeof *ot), *ht = fpi_alloc_array(a, (size_t)P->nsegs * 2, sizeof *ht);
  double t0 = 0;
  for (int32_t i = 0; i < P->nops; i++) t0 = fmin(t0, S.start_us[i]);
  double cursor = -t0; /* where the trainer's stream stands */
  for (int32_t s = 0; s < P->nsegs; s++) {
    ht[2 * s] = cursor;
    cursor += hw->hook_us;
    ht[2 * s + 1] = -1;
    for (int32_t i = P->segs[s].first; i < P->segs[s].first + P->segs[s].nops; i++) {
      const fp_op *op = &P->ops[i];
      double b = S.start_us[i] - t0, e = S.end_us[i] - t0;
      fp_opclass cls = fpi_op_class(op->code);
      ot[2 * i] = ot[2 * i + 1] = -1;
      if (cls == FP_OPC_COMPUTE) {
        ht[2 * s + 1] = b; /* the call returns; the trainer's work follows */
        cursor = e;
        continue;
      }
      if (op->stream == FP_STREAM_COMPUTE) {
        if (cls == FP_OPC_SYNC) b = cursor; /* a wait: from where the stream stood */
        cursor = fmax(cursor, e);
      } else if (cls == FP_OPC_SYNC) {
        continue;
      }
      if (cls == FP_OPC_COMM && peer_us > 0) b -= peer_us * (1 + i % 3);
      ot[2 * i] = fmax(0, b), ot[2 * i + 1] = e;
    }
    if (ht[2 * s + 1] < 0) ht[2 * s + 1] = cursor; /* no compute: the call ends with its ops */
  }
  return (fp_calib_rec){ot, ht};
}

static void near(double got, double want, double tol, const char *what) {
  if (fabs(got - want) > tol * want) fail_msg("%s: fitted %g, true %g (tolerance %.0f%%)", what, got, want, tol * 100);
}

static void fit_back(const char *example, bool multinode) {
  fp_arena *a = fpi_arena_new();
  fp_prog *P = compile_example(a, example);
  /* the tiny examples state no flops: give each module's forward and
   * backward some (the backward twice the forward, as a matmul's) */
  for (int32_t i = 0; i < P->nops; i++)
    if (P->ops[i].code == FP_OP_COMPUTE && P->ops[i].module >= 0)
      P->ops[i].alpha = 1e6 * (P->ops[i].module + 1) * (i > P->nops / 2 ? 2 : 1);
  fp_hw tr = truth(), start;
  assert_true(fpi_hw_preset("h100-sxm", &start));
  fp_calib_rec recs[8];
  for (int r = 0; r < 8; r++) recs[r] = synth(a, P, &tr, getenv("NOISE0") ? 0 : 0.05, NULL);
  fp_calib c;
  char err[512];
  if (!fpi_calibrate(P, &start, recs, 8, &c, err, sizeof err)) fail_msg("%s: %s", example, err);
  print_message("%s: base_us %g nvlink_hop_us %g net_hop_us %g nvlink %g ib %g hbm %g launch %g flops %g; kept: %s\n",
                example, c.hw.base_us, c.hw.nvlink_hop_us, c.hw.net_hop_us, c.hw.nvlink_gbps, c.hw.ib_gbps,
                c.hw.hbm_gbps, c.hw.launch_us, c.hw.flops, c.kept);
  near(c.hw.nvlink_gbps, tr.nvlink_gbps, 0.10, "nvlink_gbps");
  near(c.hw.flops, tr.flops, 0.05, "flops");
  near(c.hw.hbm_gbps, tr.hbm_gbps, 0.10, "hbm_gbps");
  near(c.hw.launch_us, tr.launch_us, 0.10, "launch_us");
  near(c.hw.hook_us, tr.hook_us, 0.05, "hook_us");
  if (multinode) {
    near(c.hw.ib_gbps, tr.ib_gbps, 0.10, "ib_gbps");
  }
  /* latencies: where the records cannot part the call's from the steps'
   * (one ring length per communicator), their sum per op is what is fitted */
  for (int32_t i = 0; i < P->nops; i++)
    if (fpi_op_class(P->ops[i].code) == FP_OPC_COMM && P->ops[i].comm >= 0 && P->comms[P->ops[i].comm].size > 1)
      near(fpi_cost_terms(P, &P->ops[i], &c.hw).lat_us, fpi_cost_terms(P, &P->ops[i], &tr).lat_us, 0.10,
           "a collective's latency");
  for (int k = 0; k < FP_CALIB_NKINDS; k++) {
    if (!c.kinds[k].n) continue;
    if (c.kinds[k].med_rel > 0.05)
      fail_msg("%s: %s residual median %.3f above the 5%% noise", example, fpi_calib_kind_name(k), c.kinds[k].med_rel);
  }
  assert_true(c.kinds[FP_CALIB_COLL].n > 0);
  assert_true(c.kinds[FP_CALIB_COMPUTE].n > 0);
  fpi_arena_free(a);
}

static void test_fit_one_node(void **st) {
  (void)st;
  fit_back("tiny-mlp", false);
}
static void test_fit_two_nodes(void **st) {
  (void)st;
  fit_back("tiny-mlp-hybrid", true);
}

/* noise-free records of a machine whose per-step latency is the 0.001 the
 * fit sets when the records cannot part it from the call's (one node, one
 * ring length): the fit takes that column's share off the measured times
 * before fitting the others, so base_us and nvlink_gbps come back exact
 * (without it, base_us would take the steps' 0.001 each, 1e-4 off) */
static void test_fit_exact_fixed_column(void **st) {
  (void)st;
  fp_arena *a = fpi_arena_new();
  fp_prog *P = compile_example(a, "tiny-mlp");
  fp_hw tr = truth(), start;
  tr.nvlink_hop_us = 1e-3;
  assert_true(fpi_hw_preset("h100-sxm", &start));
  fp_calib_rec recs[2];
  for (int r = 0; r < 2; r++) recs[r] = synth(a, P, &tr, 0, NULL);
  fp_calib c;
  char err[512];
  if (!fpi_calibrate(P, &start, recs, 2, &c, err, sizeof err)) fail_msg("%s", err);
  assert_non_null(strstr(c.kept, "nvlink_hop_us set to 0.001 (the collectives measured all take the same ring steps)"));
  assert_true(c.hw.nvlink_hop_us == 1e-3);
  near(c.hw.base_us, tr.base_us, 1e-9, "base_us");
  near(c.hw.nvlink_gbps, tr.nvlink_gbps, 1e-9, "nvlink_gbps");
  fpi_arena_free(a);
}

static void refuse(const fp_prog *P, fp_calib_rec *recs, int32_t n, const char *want);

/* two ranks' records whose collectives mostly measure a late peer: the
 * per-op fit is refused, the step's fit gives the collectives back from the
 * hooks' done-at times and the step (noise-free records of a machine whose
 * per-step latencies are the 0.001 that fit sets) */
static void test_fit_step(void **st) {
  (void)st;
  fp_arena *a = fpi_arena_new();
  fp_prog *P = compile_example(a, "tiny-mlp");
  for (int32_t i = 0; i < P->nops; i++)
    if (P->ops[i].code == FP_OP_COMPUTE && P->ops[i].module >= 0)
      P->ops[i].alpha = 1e6 * (P->ops[i].module + 1) * (i > P->nops / 2 ? 2 : 1);
  fp_hw tr = truth(), start;
  tr.nvlink_hop_us = tr.net_hop_us = 1e-3;
  assert_true(fpi_hw_preset("h100-sxm", &start));
  fp_sim S0;
  assert_true(fpi_simulate(a, P, &tr, &S0));
  assert_true(S0.exposed_comm_us > 0.05 * S0.step_us); /* (else the step says nothing of them) */
  fp_calib_rec recs[2] = {synth_sim(a, P, &tr, 5000), synth_sim(a, P, &tr, 5000)};
  fp_calib c;
  char err[600];
  if (!fpi_calibrate(P, &start, recs, 2, &c, err, sizeof err)) fail_msg("%s", err);
  print_message("step fit: base_us %g nvlink %g flops %g hook_us %g step %+.4f%%, done-at median %.4f%%; kept: %s\n",
                c.hw.base_us, c.hw.nvlink_gbps, c.hw.flops, c.hw.hook_us, 100 * c.step_rel,
                100 * c.kinds[FP_CALIB_DONE].med_rel, c.kept);
  assert_true(c.by_step);
  assert_non_null(strstr(c.kept, "base_us and nvlink_gbps fitted to the measured hooks and step, not per op"));
  assert_non_null(strstr(c.kept, "(per op: "));
  near(c.hw.flops, tr.flops, 1e-6, "flops");
  near(c.hw.hook_us, tr.hook_us, 1e-6, "hook_us");
  near(c.hw.base_us, tr.base_us, 0.10, "base_us (step fit)");
  near(c.hw.nvlink_gbps, tr.nvlink_gbps, 0.10, "nvlink_gbps (step fit)");
  assert_true(fabs(c.step_rel) < 0.01 && c.kinds[FP_CALIB_DONE].med_rel < 0.01);
  /* the collectives' ends scrambled (each done at a time of no model,
   * up to 20 ms after its start): no machine fits the hooks' done-at, and
   * the refusal says both fits' reasons */
  for (int r = 0; r < 2; r++) {
    double *ot = (double *)recs[r].op_t;
    for (int32_t i = 0; i < P->nops; i++)
      if (ot[2 * i] >= 0 && fpi_op_class(P->ops[i].code) == FP_OPC_COMM)
        ot[2 * i + 1] = ot[2 * i] + (double)((uint32_t)i * 2654435761u % 20000);
  }
  refuse(P, recs, 2, "the fitted model is off by a median ");
  refuse(P, recs, 2, "hook done at durations");
  refuse(P, recs, 2, "the collectives fitted to the measured step (per op: ");
  fpi_arena_free(a);
}

static void refuse(const fp_prog *P, fp_calib_rec *recs, int32_t n, const char *want) {
  fp_hw start;
  assert_true(fpi_hw_preset("h100-sxm", &start));
  fp_calib c;
  char err[512] = "";
  if (fpi_calibrate(P, &start, recs, n, &c, err, sizeof err))
    fail_msg("accepted (wanted: %s): median residuals: collective %.3f, local kernel %.3f, compute %.3f", want,
             c.kinds[FP_CALIB_COLL].med_rel, c.kinds[FP_CALIB_LOCAL].med_rel, c.kinds[FP_CALIB_COMPUTE].med_rel);
  if (!strstr(err, want)) fail_msg("message '%s' lacks '%s'", err, want);
}

static int64_t first_bytes = -1;
static bool one_size(const fp_prog *P, int32_t i) { /* only collectives of the first one's count */
  const fp_op *op = &P->ops[i];
  if (fpi_op_class(op->code) != FP_OPC_COMM) return true;
  if (first_bytes < 0) first_bytes = op->count;
  return op->count == first_bytes;
}

static void test_refused(void **st) {
  (void)st;
  fp_arena *a = fpi_arena_new();
  fp_prog *P = compile_example(a, "tiny-mlp");
  fp_hw tr = truth();
  refuse(P, NULL, 0, "too few records: none given");
  /* nothing timed: every op not run, every hook at 0 */
  fp_calib_rec r = synth(a, P, &tr, 0, NULL);
  double *ot = (double *)r.op_t, *ht = (double *)r.hook_t;
  for (int32_t i = 0; i < 2 * P->nops; i++) ot[i] = -1;
  for (int32_t i = 0; i < 2 * P->nsegs; i++) ht[i] = 0;
  refuse(P, &r, 1, "too few records: no op or trainer time with a positive duration was measured");
  /* collectives of one size only: bandwidth and latency not separable */
  r = synth(a, P, &tr, 0, one_size);
  refuse(P, &r, 1, "cannot tell nvlink_gbps from the call latency");
  /* inconsistent: a collective's time falls as its bytes grow */
  r = synth(a, P, &tr, 0, NULL);
  ot = (double *)r.op_t;
  fp_hw unit = tr;
  unit.base_us = unit.nvlink_hop_us = 1e-3;
  for (int32_t i = 0; i < P->nops; i++)
    if (fpi_op_class(P->ops[i].code) == FP_OPC_COMM && ot[2 * i] >= 0)
      ot[2 * i + 1] = ot[2 * i] + 1e4 / (1 + fpi_cost_op_us(P, &P->ops[i], &unit));
  /* ... which the step's fit takes over, with the per-op fit's reason and
   * the two ops that show it */
  fp_hw start;
  assert_true(fpi_hw_preset("h100-sxm", &start));
  fp_calib c;
  char err[600];
  if (!fpi_calibrate(P, &start, &r, 1, &c, err, sizeof err)) fail_msg("%s", err);
  assert_true(c.by_step);
  assert_non_null(strstr(c.kept, "(per op: inconsistent records: the collectives' fit gives"));
  assert_non_null(strstr(c.kept, "not a positive number (are the records of one machine, and steady-state steps?); e.g. op "));
  /* inconsistent: local kernels at 1/4, 4 and 4 times their time on the
   * truth, by a hash of their index: no max(launch, bytes / rate) comes near
   * two in three of them */
  r = synth(a, P, &tr, 0, NULL);
  ot = (double *)r.op_t;
  for (int32_t i = 0; i < P->nops; i++)
    if (fpi_op_class(P->ops[i].code) == FP_OPC_LOCAL && ot[2 * i] >= 0) {
      static const double f[3] = {0.25, 4, 4};
      ot[2 * i + 1] = ot[2 * i] + (ot[2 * i + 1] - ot[2 * i]) * f[((uint32_t)i * 2654435761u >> 7) % 3];
    }
  refuse(P, &r, 1, "inconsistent records: the fitted model is off by a median ");
  refuse(P, &r, 1, "local kernel durations (more than 50%): they do not follow the cost model");
  fpi_arena_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fit_one_node),
      cmocka_unit_test(test_fit_two_nodes),
      cmocka_unit_test(test_fit_exact_fixed_column),
      cmocka_unit_test(test_fit_step),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
