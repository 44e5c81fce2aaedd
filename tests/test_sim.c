/* test_sim.c - the simulator and the modeled memory timeline.
 *
 * The hand-written programs of tests/sim/ each state in their opening
 * comment how their figures were computed by hand; this file holds those
 * figures. Then properties on compiled examples: a program on one stream
 * takes the sum of its ops' times, and its memory timeline agrees with
 * memplan's sweep over program order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/cost.h"
#include "base/json.h"
#include "planner/pipeline.h"
#include "planner/passes/passes.h"
#include "planner/sim.h"

#define NEAR(got, want)                                                              \
  do {                                                                               \
    double g_ = (got), w_ = (want);                                                  \
    if (!(fabs(g_ - w_) <= 1e-9 * fmax(1, fabs(w_))))                                \
      fprintf(stderr, "%s:%d: got %.12g, want %.12g\n", __FILE__, __LINE__, g_, w_); \
    assert_true(fabs(g_ - w_) <= 1e-9 * fmax(1, fabs(w_)));                          \
  } while (0)

/* parse tests/sim/<name>.fpir, verified (before any pass) unless told otherwise */
static fp_prog *parse(fp_arena *a, const char *name, bool verify) {
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_src *src = fpi_alloc(a, sizeof *src);
  const char *path = fpi_sprintf(a, "%s/tests/sim/%s.fpir", FP_SOURCE_DIR, name);
  assert_true(fpi_src_read(a, &d, path, src));
  fp_prog *p = fpi_ir_parse(a, &d, src);
  assert_non_null(p);
  if (verify) assert_true(fpi_ir_verify(p, &d, src));
  fpi_diag_free(&d);
  return p;
}

/* parse tests/sim/<name>.fpir and simulate */
static fp_prog *load(fp_arena *a, const char *name, bool verify, fp_sim *S) {
  fp_prog *p = parse(a, name, verify);
  assert_true(fpi_simulate(a, p, &p->hw, S));
  return p;
}

static void totals(const fp_sim *S, double step, double compute, double exposed, double local) {
  NEAR(S->step_us, step);
  NEAR(S->compute_us, compute);
  NEAR(S->exposed_comm_us, exposed);
  NEAR(S->compute_local_us, local);
}

static void op_at(const fp_sim *S, int32_t i, double start, double end) {
  NEAR(S->start_us[i], start);
  NEAR(S->end_us[i], end);
}

static void seg_row(const fp_sim *S, int32_t k, double start, double end, double compute, double exposed) {
  const fp_sim_seg *g = &S->segs[k];
  assert_int_equal(g->seg, k);
  NEAR(g->start_us, start);
  NEAR(g->end_us, end);
  NEAR(g->compute_us, compute);
  NEAR(g->exposed_us, exposed);
}

/* one expected point: time, then bytes of main_weight, main_grad,
 * unsharded_weight, unsharded_grad, staging, reshard, activations */
typedef struct {
  double t;
  int64_t b[FP_MEMTL_NCATS];
} pt;

static void timeline(const fp_memtl *tl, const pt *want, int n, int64_t peak, int64_t lb) {
  for (int32_t i = 0; i < tl->npts; i++) {
    fprintf(stderr, "  point %d: t=%g", i, tl->pts[i].t_us);
    for (int c = 0; c < FP_MEMTL_NCATS; c++) fprintf(stderr, " %lld", (long long)tl->pts[i].bytes[c]);
    fprintf(stderr, "\n");
  }
  assert_int_equal(tl->npts, n);
  for (int i = 0; i < n; i++) {
    NEAR(tl->pts[i].t_us, want[i].t);
    for (int c = 0; c < FP_MEMTL_NCATS; c++) assert_int_equal(tl->pts[i].bytes[c], want[i].b[c]);
  }
  assert_int_equal(tl->peak_bytes, peak);
  assert_int_equal(tl->lower_bound_bytes, lb);
  assert_null(fpi_memtl_check(tl));
}

static void test_overlap(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_sim S;
  fp_prog *p = load(a, "overlap", true, &S);
  totals(&S, 30, 20, 10, 0);
  op_at(&S, 0, 0, 10);  /* gather w0 */
  op_at(&S, 2, 10, 20); /* gather w1 */
  op_at(&S, 4, 10, 10); /* the wait: no time, where compute resumes */
  op_at(&S, 5, 10, 20); /* m0 */
  op_at(&S, 7, 20, 30); /* m1 */
  seg_row(&S, 0, 0, 20, 0, 0);
  seg_row(&S, 1, 10, 20, 10, 10);
  seg_row(&S, 2, 20, 20, 0, 0); /* empty: the end of the one before */
  seg_row(&S, 3, 20, 30, 10, 0);
  NEAR(S.busy_us[FP_STREAM_AG], 20);
  NEAR(S.busy_us[FP_STREAM_COMPUTE], 20);
  fp_memtl *tl = fpi_sim_memory(a, p, &S);
  const pt want[] = {
      {0, {4000, 0, 8000, 0, 0, 0, 0, 0}},
      {10, {4000, 0, 16000, 0, 0, 0, 0, 100}},
      {20, {4000, 0, 8000, 0, 0, 0, 0, 200}},
      {30, {4000, 0, 0, 0, 0, 0, 0, 0}},
  };
  timeline(tl, want, 4, 20100, 20000);
  fpi_arena_free(a);
}

/* hook_us: each hook call holds the trainer's stream first. On "serial"
 * (every op on the trainer's path) the step grows by exactly one hook_us
 * per segment, each op moves by the calls before it, and the totals say
 * so; the machine of before (hook_us 0) gives the figures above */
static void test_hook_us(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_sim S0, S1;
  fp_prog *p = load(a, "serial", true, &S0);
  fp_hw hw = p->hw;
  hw.hook_us = 1.5;
  assert_true(fpi_simulate(a, p, &hw, &S1));
  NEAR(S0.hooks_us, 0);
  NEAR(S1.hooks_us, 1.5 * p->nsegs);
  NEAR(S1.step_us, S0.step_us + 1.5 * p->nsegs);
  for (int32_t k = 0; k < p->nsegs; k++) {
    NEAR(S1.segs[k].hook_us, 1.5);
    for (int32_t i = p->segs[k].first; i < p->segs[k].first + p->segs[k].nops; i++)
      if (p->ops[i].stream == FP_STREAM_COMPUTE) NEAR(S1.start_us[i], S0.start_us[i] + 1.5 * (k + 1));
  }
  fpi_arena_free(a);
}

static void test_serial(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_sim S;
  fp_prog *p = load(a, "serial", true, &S);
  totals(&S, 54, 30, 20, 4);
  op_at(&S, 2, 20, 24); /* memset */
  op_at(&S, 4, 44, 54); /* reduce_scatter */
  seg_row(&S, 1, 0, 20, 10, 10);
  seg_row(&S, 4, 44, 54, 0, 10); /* post_backward */
  fp_memtl *tl = fpi_sim_memory(a, p, &S);
  const pt want[] = {
      {0, {0, 0, 8000, 0, 0, 0, 0, 0}},
      {10, {0, 0, 8000, 0, 0, 0, 0, 500}},
      {20, {0, 0, 8000, 8000, 0, 0, 0, 500}},
      {44, {0, 0, 0, 8000, 0, 0, 0, 0}},
      {54, {0, 0, 0, 0, 0, 0, 0, 0}},
  };
  timeline(tl, want, 5, 16500, 16000);
  fpi_arena_free(a);
}

static void test_streams(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_sim S;
  fp_prog *p = load(a, "streams", true, &S);
  totals(&S, 84, 60, 24, 0);
  op_at(&S, 0, 0, 14); /* the grouped call ... */
  op_at(&S, 1, 0, 14); /* ... runs as one */
  op_at(&S, 9, 54, 64);  /* reduce g1 */
  op_at(&S, 10, 54, 74); /* m0 backward */
  op_at(&S, 13, 74, 84); /* reduce g0 */
  seg_row(&S, 1, 14, 24, 10, 14);
  seg_row(&S, 9, 84, 84, 0, 10); /* pre_optimizer waits for rs */
  NEAR(S.busy_us[FP_STREAM_AG], 14);
  NEAR(S.busy_us[FP_STREAM_RS], 20);
  NEAR(S.busy_us[FP_STREAM_COMPUTE], 60);
  fp_memtl *tl = fpi_sim_memory(a, p, &S);
  const pt want[] = {
      {0, {0, 0, 16000, 0, 0, 0, 0, 0}},      {14, {0, 0, 16000, 0, 0, 0, 0, 100}},
      {24, {0, 0, 16000, 0, 0, 0, 0, 200}},   {34, {0, 0, 16000, 8000, 0, 0, 0, 200}},
      {54, {0, 0, 8000, 16000, 0, 0, 0, 100}}, {64, {0, 0, 8000, 8000, 0, 0, 0, 100}},
      {74, {0, 0, 0, 8000, 0, 0, 0, 0}},      {84, {0, 0, 0, 0, 0, 0, 0, 0}},
  };
  timeline(tl, want, 8, 24200, 24000);
  fpi_arena_free(a);
}

/* fp_sim.path_waits, traced by hand on "overlap": the step ends with the
 * compute stream's record (30, the ag stream's wait ties with it); back from
 * there: m1, its wait (w1 came at 20, when m0 ended: it does not bind), m0,
 * the wait for w0 (binds: op 4), w0's record and gather, which waited for
 * the first step's optimizer record (binds: op 9), and so on back through
 * the first step, where the wait for w0 binds again (op 4). With compute ten
 * times faster (1 us a module) m0 ends at 11 and the wait for w1 binds
 * instead (op 6), in both steps: the path runs through both gathers. */
static void test_critical_path(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_sim S, F;
  fp_prog *p = load(a, "overlap", true, &S);
  assert_int_equal(S.npath_waits, 3);
  assert_int_equal(S.path_waits[0], 4);
  assert_int_equal(S.path_waits[1], 9);
  assert_int_equal(S.path_waits[2], 4);
  fp_hw hw = p->hw;
  hw.flops = 1e13;
  assert_true(fpi_simulate(a, p, &hw, &F));
  NEAR(F.step_us, 21);
  assert_int_equal(F.npath_waits, 3);
  assert_int_equal(F.path_waits[0], 6);
  assert_int_equal(F.path_waits[1], 9);
  assert_int_equal(F.path_waits[2], 6);
  fpi_arena_free(a);
}

/* the sync pass marks each wait it adds by what it orders (reuse.fpir says
 * which by hand): the program it writes verifies, and its modeled critical
 * path holds the reuse */
static void test_reuse_waits(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_prog *p = parse(a, "reuse", false); /* no waits yet: races */
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_pass_ctx cx;
  memset(&cx, 0, sizeof cx);
  cx.a = a;
  assert_true(fpi_pass_sync(&cx, p));
  assert_true(fpi_ir_verify(p, &d, NULL));
  assert_non_null(cx.reuse_waits);
  int waits = 0;
  for (int32_t i = 0; i < p->nops; i++) {
    if (p->ops[i].code != FP_OP_WAIT) {
      assert_int_equal(cx.reuse_waits[i], 0);
      continue;
    }
    waits++;
    /* rs waits for the zeroed g and h (each with itself); compute for
     * rs's read of h before it writes x in h's bytes (a reuse, later than
     * the reduction of r it reads) */
    assert_int_equal(cx.reuse_waits[i], p->ops[i].stream == FP_STREAM_COMPUTE);
  }
  assert_int_equal(waits, 3);
  fp_sim S;
  assert_true(fpi_simulate(a, p, &p->hw, &S));
  bool reuse = false;
  for (int32_t k = 0; k < S.npath_waits; k++) reuse |= cx.reuse_waits[S.path_waits[k]];
  assert_true(reuse);
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

static void test_prev_step(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_sim S;
  load(a, "prev_step", false, &S);
  totals(&S, 24, 10, 10, 4);
  op_at(&S, 0, 0, 0);  /* the wait holds ag until the first step's record */
  op_at(&S, 1, 0, 10); /* gather */
  op_at(&S, 4, 10, 20);
  op_at(&S, 5, 20, 24);
  fpi_arena_free(a);
}

/* a zero-length use (a compute of no flops) is live at its instant */
static void test_zero_length(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_prog *p = fpi_prog_new(a);
  p->world_size = 1;
  fp_hw h;
  assert_true(fpi_hw_preset("h100-sxm", &h));
  int b = fpi_ir_buf_add(p, "b", FP_BUF_TRANSIENT, FP_CAT_STAGING, -1, 1000);
  int m = fpi_ir_module_add(p, "m", 0, 0, 0);
  fpi_ir_seg_begin(p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = fpi_ir_emit(p, FP_OP_COMPUTE, FP_STREAM_COMPUTE, FP_F32, 0);
  o->module = m;
  fpi_ir_op_uses(p, o, (int32_t[]){b}, 1);
  fp_sim S;
  assert_true(fpi_simulate(a, p, &h, &S));
  NEAR(S.step_us, 0);
  fp_memtl *tl = fpi_sim_memory(a, p, &S);
  const pt want[] = {{0, {0, 0, 0, 0, 1000, 0, 0, 0}}, {0, {0}}};
  timeline(tl, want, 2, 1000, 1000);
  /* an invalid machine is refused */
  h.flops = 0;
  assert_false(fpi_simulate(a, p, &h, &S));
  fpi_arena_free(a);
}

/* every example compiles to a program whose simulation is consistent: on
 * one stream the step is the sum of the op times, and the timeline's peak
 * and lower bound are memplan's */
static void test_examples(void **state) {
  (void)state;
  static const char *const names[] = {"tiny-mlp", "tiny-mlp-hybrid", "tiny-mlp-zero2", "tiny-mlp-ragged",
                                      "tiny-mlp-ddp", "llama3-8b", "mixtral-8x7b", "paligemma-3b-224"};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    fp_arena *a = fpi_arena_new();
    fp_diag d;
    fpi_diag_init(&d, stderr);
    fp_model m;
    fp_spec s;
    fp_compiled c;
    const char *path = fpi_sprintf(a, "%s/examples/%s.json", FP_SOURCE_DIR, names[k]);
    assert_true(fpi_inputs_load(a, &d, path, NULL, &m, &s));
    assert_true(fpi_compile(a, &d, &m, &s, &c));
    const fp_prog *p = c.prog;
    assert_non_null(p->hw.name);
    assert_non_null(p->memtl);
    assert_null(fpi_memtl_check(p->memtl));
    bool one_stream = true;
    double sum = 0, compute = 0;
    for (int32_t i = 0; i < p->nops; i++) {
      one_stream &= p->ops[i].stream == FP_STREAM_COMPUTE && p->ops[i].group < 0;
      double t = fpi_cost_op_us(p, &p->ops[i], &p->hw);
      if (p->ops[i].group < 0) NEAR(c.sim.end_us[i] - c.sim.start_us[i], t); /* a group is charged as one */
      sum += t;
      if (p->ops[i].code == FP_OP_COMPUTE) compute += t;
    }
    NEAR(c.sim.compute_us, compute);
    assert_true(c.sim.step_us >= c.sim.compute_us + c.sim.exposed_comm_us - 1e-6);
    fprintf(stderr, "%s: step %.3f ms, compute %.3f ms, exposed %.3f ms%s\n", names[k], c.sim.step_us / 1e3,
            c.sim.compute_us / 1e3, c.sim.exposed_comm_us / 1e3, one_stream ? " (one stream)" : "");
    if (one_stream) {
      NEAR(c.sim.step_us, sum);
      assert_int_equal(p->memtl->lower_bound_bytes, c.stats.lower_bound_bytes);
      assert_int_equal(p->memtl->peak_bytes, c.stats.peak_bytes);
    }
    fpi_diag_free(&d);
    fpi_arena_free(a);
  }
}

/* activations of a recomputed module (the spec's "recompute"): l0 keeps
 * 4096 bytes without recompute, 64 (its checkpointed input) with it, and
 * holds all 4096 during its forward op and during its backward op (which
 * recomputes them); l1 keeps 1024. By hand: without recompute the peak is
 * 4096 + 1024 = 5120 (both live from l1's forward to its backward); with
 * it, max(4096 + 64 at l0's forward, 64 + 1024 at l1, 4096 + 64 at l0's
 * backward) = 4160. memplan's activation peak and the simulated timeline's
 * agree; l0's backward costs flops_fwd + flops_bwd */
static int64_t compile_act_peak(bool recompute, double *bwd_flops) {
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  const char *text = fpi_sprintf(
      a,
      "{\"model\":{\"format\":\"flexplan.model.v2\",\"name\":\"r\",\"modules\":["
      "{\"name\":\"l0\",\"params\":[{\"name\":\"l0.w\",\"shape\":[64,64]}],\"flops_fwd\":1e9,"
      "\"activation_bytes\":4096,\"activation_bytes_checkpointed\":64},"
      "{\"name\":\"l1\",\"params\":[{\"name\":\"l1.w\",\"shape\":[64,64]}],\"flops_fwd\":1e9,"
      "\"activation_bytes\":1024}]},"
      "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":2}%s}}",
      recompute ? ",\"recompute\":[\"l0\"]" : "");
  fp_src src = {"t.json", text, strlen(text)};
  fp_jctx c = {a, &d, &src, NULL};
  const fp_jv *root = fpi_json_parse(&c);
  assert_non_null(root);
  fp_model m;
  fp_spec s;
  fp_compiled out;
  assert_true(fpi_model_parse(a, &d, &src, fpi_j_get(root, "model"), "/model", &m));
  assert_true(fpi_spec_parse(a, &d, &src, fpi_j_get(root, "spec"), "/spec", &s));
  assert_true(fpi_compile(a, &d, &m, &s, &out));
  const fp_prog *p = out.prog;
  int64_t tl_peak = 0;
  for (int32_t i = 0; i < p->memtl->npts; i++)
    if (p->memtl->pts[i].bytes[FP_MEMTL_ACT] > tl_peak) tl_peak = p->memtl->pts[i].bytes[FP_MEMTL_ACT];
  assert_int_equal(tl_peak, out.stats.activation_peak);
  for (int32_t i = 0; i < p->nops; i++)
    if (p->ops[i].code == FP_OP_COMPUTE && p->ops[i].pass == FP_PASS_BWD && p->ops[i].module == 0)
      *bwd_flops = p->ops[i].alpha;
  int64_t peak = out.stats.activation_peak;
  fpi_diag_free(&d);
  fpi_arena_free(a);
  return peak;
}

static void test_recompute_activations(void **state) {
  (void)state;
  double f0 = 0, f1 = 0;
  assert_int_equal(compile_act_peak(false, &f0), 5120);
  assert_int_equal(compile_act_peak(true, &f1), 4160);
  NEAR(f0, 2e9);
  NEAR(f1, 3e9);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_overlap),     cmocka_unit_test(test_serial),   cmocka_unit_test(test_hook_us),   cmocka_unit_test(test_streams),
      cmocka_unit_test(test_prev_step),   cmocka_unit_test(test_zero_length), cmocka_unit_test(test_examples),
      cmocka_unit_test(test_recompute_activations), cmocka_unit_test(test_critical_path), cmocka_unit_test(test_reuse_waits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
