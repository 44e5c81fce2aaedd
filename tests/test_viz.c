/* test_viz.c - the viewers' model (viz/view.c) against the simulator it is
 * derived from, on compiled examples and on the hand-written programs of
 * tests/sim/:
 *   - the exposed intervals add up to the simulator's exposed communication;
 *   - the live intervals, with the persistent buffers, add up to every point
 *     of the memory timeline (the same rule, so exactly);
 *   - one flow per wait, from an op on the record's stream to one on the
 *     wait's stream, never backwards in time within a step;
 *   - layout classes: one for a uniform plan, one per rank for the ragged /
 *     owned example, and --ranks outside the world is a located user error;
 *   - the trace and the page say "modeled" and carry the plan hash, and keep
 *     hostile names inert (escaped JSON and HTML, valid UTF-8). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "planner/cost.h"
#include "planner/pipeline.h"
#include "viz/viz.h"

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

static fp_prog *parse_sim(fp_arena *a, const char *name) {
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_src src;
  assert_true(fpi_src_read(a, &d, fpi_sprintf(a, "%s/tests/sim/%s.fpir", FP_SOURCE_DIR, name), &src));
  fp_prog *p = fpi_ir_parse(a, &d, &src);
  assert_non_null(p);
  fpi_diag_free(&d);
  return p;
}

/* the checks that hold for every program */
static void check_view(const fp_viz *v) {
  const fp_prog *p = v->p;
  /* exposed communication */
  assert_true(fabs(v->exposed_us - v->sim.exposed_comm_us) <= 1e-6 * fmax(1, v->sim.exposed_comm_us));
  for (int32_t k = 0; k < v->nexposed; k++) {
    assert_true(v->exposed[k].t1 > v->exposed[k].t0);
    assert_int_equal(p->ops[v->exposed[k].op].stream, FP_STREAM_COMPUTE);
    if (k) assert_true(v->exposed[k].t0 >= v->exposed[k - 1].t1 - 1e-9);
  }
  /* memory: every point is the intervals live at it. A point taken after
   * the zero-length intervals at its instant have ended does not count
   * them; one taken before does: accept the sum with or without them. */
  const fp_memtl *tl = v->tl;
  for (int32_t k = 0; k < tl->npts; k++) {
    double t = tl->pts[k].t_us;
    int64_t with[FP_MEMTL_NCATS], without[FP_MEMTL_NCATS];
    memcpy(with, v->persistent_bytes, sizeof with);
    memcpy(without, v->persistent_bytes, sizeof without);
    for (int32_t j = 0; j < v->nlives; j++) {
      const fp_viz_life *l = &v->lives[j];
      if (l->t0 <= t && t < l->t1) with[l->cat] += l->bytes, without[l->cat] += l->bytes;
      if (l->t0 == t && l->t1 == t) with[l->cat] += l->bytes;
    }
    bool a = !memcmp(with, tl->pts[k].bytes, sizeof with), b = !memcmp(without, tl->pts[k].bytes, sizeof without);
    if (!a && !b) fail_msg("point %d at %.3f us: the live intervals do not add up to it", k, t);
  }
  /* flows */
  int32_t waits = 0;
  for (int32_t i = 0; i < p->nops; i++) waits += p->ops[i].code == FP_OP_WAIT;
  assert_int_equal(v->nflows, waits);
  for (int32_t j = 0; j < v->nflows; j++) {
    const fp_viz_flow *f = &v->flows[j];
    assert_int_equal(p->ops[f->wait].code, FP_OP_WAIT);
    assert_int_equal(p->ops[f->record].code, FP_OP_RECORD);
    assert_int_equal(p->ops[f->record].event, p->ops[f->wait].event);
    int32_t from, to;
    fpi_viz_flow_ends(v, f, v->ranks[0].rank, &from, &to);
    assert_int_equal(p->ops[from].stream, p->ops[f->record].stream);
    assert_int_equal(p->ops[to].stream, p->ops[f->wait].stream);
    assert_true(from <= f->record && to >= f->wait);
    if (f->record < f->wait && !f->next_step) assert_true(v->sim.end_us[from] <= v->sim.start_us[to] + 1e-9);
  }
  /* the writers */
  for (int w = 0; w < 2; w++) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_true(w ? fpi_viz_html(v, f) : fpi_viz_trace(v, f));
    fclose(f);
    assert_non_null(strstr(buf, "modeled"));
    char hash[40];
    snprintf(hash, sizeof hash, "fnv1a64:%016llx", (unsigned long long)v->hash);
    assert_non_null(strstr(buf, hash));
    if (w) assert_null(strstr(buf + 200, "</script><")); /* data cannot close its element early */
    free(buf);
  }
}

static void test_examples(void **state) {
  (void)state;
  static const struct {
    const char *name;
    int32_t classes;
  } ex[] = {{"tiny-mlp", 1},        {"tiny-mlp-ragged", 4}, {"tiny-mlp-hybrid", 1}, {"tiny-mlp-zero2", 1},
            {"tiny-mlp-ddp", 1},    {"llama3-8b", 1},       {"paligemma-3b-224", 1}, {"mixtral-8x7b", 1}};
  for (size_t k = 0; k < sizeof ex / sizeof ex[0]; k++) {
    fp_arena *a = fpi_arena_new();
    fp_prog *p = compile_example(a, ex[k].name);
    fp_viz v;
    assert_true(fpi_viz_build(a, NULL, NULL, p, &p->hw, NULL, 0, 16, &v));
    check_view(&v);
    if (v.nclasses != ex[k].classes) fail_msg("%s: %d layout classes, want %d", ex[k].name, v.nclasses, ex[k].classes);
    assert_int_equal(v.nranks, ex[k].classes);
    assert_int_equal(v.ranks[0].rank, 0);
    /* the plan's budget, else the device memory */
    assert_int_equal(v.budget, p->memory_budget_bytes > 0 ? p->memory_budget_bytes : p->hw.hbm_bytes);
    fpi_arena_free(a);
  }
}

static void test_sim_programs(void **state) {
  (void)state;
  static const char *const names[] = {"serial", "streams", "overlap", "prev_step"};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    fp_arena *a = fpi_arena_new();
    fp_prog *p = parse_sim(a, names[k]);
    fp_hw hw;
    if (p->hw.name)
      hw = p->hw;
    else
      assert_true(fpi_hw_preset("h100-sxm", &hw));
    fp_viz v;
    assert_true(fpi_viz_build(a, NULL, NULL, p, &hw, NULL, 0, 0, &v));
    check_view(&v);
    fpi_arena_free(a);
  }
}

/* names may hold anything the IR allows (quoted, \xHH escapes): the JSON of
 * both files stays valid UTF-8 and cannot end the page's <script> early, and
 * the page's text is escaped */
static void test_hostile_names(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_prog *p = compile_example(a, "tiny-mlp");
  const char *evil = "</script><b onmouseover=\"x\">'&\xff\xc3";
  p->model = evil;
  p->buckets[0] = evil;
  p->bufs[0].name = evil;
  p->mods[0].name = evil;
  fp_viz v;
  assert_true(fpi_viz_build(a, NULL, NULL, p, &p->hw, NULL, 0, 0, &v));
  for (int w = 0; w < 2; w++) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_true(w ? fpi_viz_html(&v, f) : fpi_viz_trace(&v, f));
    fclose(f);
    assert_null(strstr(buf, "</script><b")); /* neither raw in the data nor in the text */
    assert_null(strstr(buf, "<b onmouseover"));
    assert_null(memchr(buf, 0xff, n));          /* not UTF-8: replaced */
    assert_non_null(strstr(buf, "\\u003c/script\\u003e\\u003cb onmouseover=\\\"x\\\"\\u003e'\\u0026\\ufffd\\ufffd"));
    if (w) assert_non_null(strstr(buf, "<title>flexplan: &lt;/script&gt;&lt;b onmouseover=&quot;x&quot;&gt;&#39;&amp;"));
    free(buf);
  }
  fpi_arena_free(a);
}

static void test_ranks(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_prog *p = compile_example(a, "tiny-mlp-ragged");
  fp_viz v;
  int64_t pick[] = {3, 1};
  assert_true(fpi_viz_build(a, NULL, NULL, p, &p->hw, pick, 2, 0, &v));
  assert_int_equal(v.nranks, 2);
  assert_int_equal(v.ranks[0].rank, 3);
  assert_int_equal(v.ranks[1].rank, 1);
  /* the owned ops of rank 0 do not run on rank 3 */
  int32_t skipped = 0;
  for (int32_t i = 0; i < p->nops; i++) skipped += !fpi_viz_runs(&v, i, 3);
  assert_true(skipped > 0);
  /* a default of at most 2 classes */
  assert_true(fpi_viz_build(a, NULL, NULL, p, &p->hw, NULL, 0, 2, &v));
  assert_int_equal(v.nranks, 2);
  assert_int_equal(v.nclasses, 4);
  /* outside the world: a user error */
  fp_diag d;
  fpi_diag_init(&d, NULL);
  int64_t bad[] = {0, 4};
  assert_false(fpi_viz_build(a, &d, NULL, p, &p->hw, bad, 2, 0, &v));
  assert_non_null(strstr(d.buf, "flexplan: error: --ranks: rank 4 is not a rank of the plan (world_size 4)"));
  fpi_diag_free(&d);
  /* a machine so slow that the step is not a finite number: a user error */
  fpi_diag_init(&d, NULL);
  fp_hw slow = p->hw;
  slow.nvlink_gbps = 1e-310;
  assert_false(fpi_viz_build(a, &d, "p.fpir", p, &slow, NULL, 0, 0, &v));
  assert_non_null(strstr(d.buf, "p.fpir: error: the modeled step time on hardware 'h100-sxm' is not a finite number"));
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_examples),
      cmocka_unit_test(test_sim_programs),
      cmocka_unit_test(test_ranks),
      cmocka_unit_test(test_hostile_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
