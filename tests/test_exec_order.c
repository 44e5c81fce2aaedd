/* test_exec_order.c - hooks called out of plan order are errors that name
 * the expected and the received hook; nothing is issued (no hang: the other
 * ranks make the same mistake and no collective is pending), the executor
 * stays where it was, and the right call then works. Empty module segments
 * may be skipped, segments with ops may not. Also: invalid hooks and
 * modules, a refit in the middle of a step, and no allocation on any hook
 * (the executor's allocation counter is unchanged over whole steps), and
 * fp_exec_all_reduce_f64 between hooks. And activation checkpointing:
 * module "second" is recomputed, so its pre_forward / post_forward are
 * accepted once inside its backward window (also when the trainer skipped
 * its empty pre_backward) and nowhere else. Runs under mpirun on 2 ranks. */
#include "exec_util.h"

/* two modules, an all-gather before each forward and a reduction after
 * each backward; grad accumulation 2 */
static tprog build(void) {
  const int W = tu_world, n = 8;
  tprog t = tp_new(W);
  t.p->grad_accumulation = 2;
  int m1 = fpi_ir_module_add(t.p, "second", 0, 0, 0);
  int mods[2] = {t.module, m1};
  int w = tp_buf(&t, "w", (int64_t)W * n * 4, false), g = tp_buf(&t, "g", (int64_t)W * n * 4, false);
  int out = tp_buf(&t, "out", n * 4, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  for (int micro = 0; micro < 2; micro++) {
    for (int k = 0; k < 2; k++) {
      fpi_ir_seg_begin(t.p, FP_SEG_PRE_FORWARD, mods[k], micro);
      fp_op *o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, n);
      o->comm = t.world, o->dst = fpi_reg(w, 0), o->src = fpi_reg_g(w, 0, n * 4);
      fpi_ir_seg_begin(t.p, FP_SEG_POST_FORWARD, mods[k], micro);
    }
    for (int k = 1; k >= 0; k--) {
      fpi_ir_seg_begin(t.p, FP_SEG_PRE_BACKWARD, mods[k], micro);
      fpi_ir_seg_begin(t.p, FP_SEG_POST_BACKWARD, mods[k], micro);
      fp_op *o = tp_op(&t, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, FP_F32, n);
      o->comm = t.world, o->dst = fpi_reg(out, 0), o->src = fpi_reg(g, 0);
    }
  }
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_OPTIMIZER, -1, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_OPTIMIZER, -1, 0);
  return t;
}

static void expect_order(fp_exec *x, fp_hook h, int32_t m, const char *got, const char *want) {
  fp_exec_stats a, b;
  fp_exec_get_stats(x, &a);
  fp_status st = fp_exec_hook(x, h, m);
  const char *msg = fp_exec_errmsg(x);
  EXPECT(st == FP_ERR_ORDER, "%s: status %s", got, fp_status_name(st));
  EXPECT(strstr(msg, got) && strstr(msg, want), "message '%s' should name '%s' and '%s'", msg, got, want);
  fp_exec_get_stats(x, &b);
  EXPECT(a.hooks == b.hooks && a.collectives == b.collectives, "an out-of-order hook issued work");
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  tprog t = build();
  t.p->mods[1].recompute = true; /* "second" */
  t.p->mods[1].saved_bytes = 64;
  fp_plan *plan = tp_load(&t);
  fp_exec *x = tp_exec(plan, FP_PROGRESS_DEFAULT);
  int32_t m0 = fp_plan_module_index(plan, "m"), m1 = fp_plan_module_index(plan, "second");
  EXPECT(m0 == 0 && m1 == 1 && fp_plan_module_index(plan, "third") == -1, "module lookup");
  EXPECT(!strcmp(fp_plan_module_name(plan, 1), "second") && !fp_plan_module_name(plan, 2), "module names");

  /* a forward before step_begin */
  expect_order(x, FP_HOOK_PRE_FORWARD, m0, "pre_forward(m)", "expects step_begin");
  EXPECT(strstr(fp_exec_errmsg(x), "segment 0 of"), "%s", fp_exec_errmsg(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1) == FP_OK, "%s", fp_exec_errmsg(x));
  /* the wrong module: pre_forward(m) has an all-gather, so it cannot be skipped */
  expect_order(x, FP_HOOK_PRE_FORWARD, m1, "pre_forward(second)", "expects pre_forward(m)");
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_FORWARD, m0) == FP_OK, "%s", fp_exec_errmsg(x));
  /* a refit in the middle of a step changes nothing */
  const char *none[1] = {"/nonexistent.safetensors"};
  EXPECT(fp_exec_load_weights(x, none, 1) == FP_ERR_ORDER && strstr(fp_exec_errmsg(x), "post_forward(m)"),
         "refit mid-step: %s", fp_exec_errmsg(x));
  /* invalid calls */
  EXPECT(fp_exec_hook(x, (fp_hook)17, -1) == FP_ERR_ARG, "hook 17");
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_FORWARD, 5) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "out of range"), "module 5");
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_OPTIMIZER, 0) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "takes no module"),
         "module on pre_optimizer");
  EXPECT(fp_exec_hook(NULL, FP_HOOK_STEP_BEGIN, -1) == FP_ERR_ARG, "NULL executor");
  /* empty segments may be skipped: post_forward(m) has no ops, so
   * pre_forward(second) runs (its all-gather issued); then pre_backward(second)
   * and pre_backward(m), both empty, are skipped by the post_backwards */
  fp_exec_stats s0, s1;
  fp_exec_get_stats(x, &s0);
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_FORWARD, m1) == FP_OK, "skip post_forward(m): %s", fp_exec_errmsg(x));
  fp_exec_get_stats(x, &s1);
  EXPECT(s1.skipped == s0.skipped + 1 && s1.hooks == s0.hooks + 1 && s1.collectives == s0.collectives + 1,
         "skipped %" PRId64 ", hooks %" PRId64 ", collectives %" PRId64, s1.skipped, s1.hooks, s1.collectives);
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_FORWARD, m1) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_BACKWARD, m1) == FP_OK, "skip pre_backward(second): %s", fp_exec_errmsg(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_BACKWARD, m0) == FP_OK, "skip pre_backward(m): %s", fp_exec_errmsg(x));
  fp_exec_get_stats(x, &s1);
  EXPECT(s1.skipped == s0.skipped + 3 && s1.collectives == s0.collectives + 3, "skipped %" PRId64, s1.skipped);
  /* the second micro-batch must not be skipped: pre_optimizer is no module hook */
  expect_order(x, FP_HOOK_PRE_OPTIMIZER, -1, "pre_optimizer", "micro-batch 1");
  /* nor may a segment with ops: post_backward(second) would skip the empty
   * post_forward(m), but also pre_forward(second)'s all-gather */
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_FORWARD, m0) == FP_OK, "%s", fp_exec_errmsg(x));
  expect_order(x, FP_HOOK_POST_BACKWARD, m1, "post_backward(second)", "expects post_forward(m)");
  /* nor the step's end: step_begin of the next step */
  expect_order(x, FP_HOOK_STEP_BEGIN, -1, "step_begin", "expects post_forward(m)");
  /* recomputed forwards, in micro-batch 1 */
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_FORWARD, m0) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_FORWARD, m1) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_FORWARD, m1) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(fp_plan_module_recompute(plan, m1) == 1 && fp_plan_module_recompute(plan, m0) == 0 &&
             fp_plan_module_recompute(plan, 2) == -1 && fp_plan_module_recompute(NULL, 0) == -1,
         "fp_plan_module_recompute");
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_BACKWARD, m1) == FP_OK, "%s", fp_exec_errmsg(x));
  /* post_forward first, a second pre_forward, post_backward inside it, a second recompute: refused */
  expect_order(x, FP_HOOK_POST_FORWARD, m1, "post_forward(second)", "no recomputed forward is open");
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_FORWARD, m1) == FP_OK, "recompute: %s", fp_exec_errmsg(x));
  expect_order(x, FP_HOOK_PRE_FORWARD, m1, "pre_forward(second)", "already open");
  expect_order(x, FP_HOOK_POST_BACKWARD, m1, "post_backward(second)", "call post_forward(second) first");
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_FORWARD, m1) == FP_OK, "recompute: %s", fp_exec_errmsg(x));
  expect_order(x, FP_HOOK_PRE_FORWARD, m1, "pre_forward(second)", "already recomputed");
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_BACKWARD, m1) == FP_OK, "%s", fp_exec_errmsg(x));
  /* m is not recomputed by the plan: neither at its (empty) pre_backward nor inside its backward */
  expect_order(x, FP_HOOK_PRE_FORWARD, m0, "pre_forward(m)", "the plan does not recompute m");
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_BACKWARD, m0) == FP_OK, "%s", fp_exec_errmsg(x));
  expect_order(x, FP_HOOK_PRE_FORWARD, m0, "pre_forward(m)", "the plan does not recompute m");
  for (int32_t k = x->cursor; k < x->prog->nsegs; k++) { /* finish the step */
    const fp_seg *s = &x->prog->segs[k];
    EXPECT(fp_exec_hook(x, (fp_hook)s->kind, fpi_seg_has_module(s->kind) ? s->module : -1) == FP_OK, "%s",
           fp_exec_errmsg(x));
  }
  fp_exec_get_stats(x, &s1);
  EXPECT(s1.steps == 1 && s1.skipped == 3, "steps %" PRId64 ", skipped %" PRId64, s1.steps, s1.skipped);
  /* whole steps allocate nothing */
  fp_exec_stats a, b;
  fp_exec_get_stats(x, &a);
  for (int step = 0; step < 3; step++) tp_step(x);
  fp_exec_get_stats(x, &b);
  EXPECT(b.allocations == a.allocations && b.hook_allocations == 0,
         "allocations %" PRId64 " -> %" PRId64 ", in hooks %" PRId64, a.allocations, b.allocations, b.hook_allocations);
  EXPECT(b.steps == 4 && b.hooks == a.hooks + 3 * x->prog->nsegs, "steps %" PRId64, b.steps);
  EXPECT(b.collectives == 4 * 8 && b.arena_bytes > 0, "collectives %" PRId64, b.collectives);
  /* the trainer's own sums (fp_exec_all_reduce_f64): every rank's values
   * added in place, between hooks; bad arguments change nothing */
  double v[3] = {tu_rank + 1.0, 0.5 * tu_rank, -2.0}, want[3] = {0, 0, 0};
  for (int r = 0; r < tu_world; r++) want[0] += r + 1.0, want[1] += 0.5 * r, want[2] += -2.0;
  EXPECT(fp_exec_all_reduce_f64(x, v, 3) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(v[0] == want[0] && v[1] == want[1] && v[2] == want[2], "sums %g %g %g", v[0], v[1], v[2]);
  EXPECT(fp_exec_all_reduce_f64(x, v, 0) == FP_OK && v[0] == want[0], "n = 0");
  EXPECT(fp_exec_all_reduce_f64(x, NULL, 1) == FP_ERR_ARG, "NULL values");
  EXPECT(fp_exec_all_reduce_f64(x, v, FP_ALL_REDUCE_MAX + 1) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "4096"),
         "too many: %s", fp_exec_errmsg(x));
  EXPECT(fp_exec_all_reduce_f64(NULL, v, 1) == FP_ERR_ARG, "NULL executor");
  tp_step(x); /* in the middle of a step too, and the plan still runs */
  EXPECT(fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1) == FP_OK, "%s", fp_exec_errmsg(x));
  double one = 1.0;
  EXPECT(fp_exec_all_reduce_f64(x, &one, 1) == FP_OK && one == tu_world, "mid-step sum %g", one);
  for (int32_t k = 1; k < x->prog->nsegs; k++) {
    const fp_seg *s = &x->prog->segs[k];
    EXPECT(fp_exec_hook(x, (fp_hook)s->kind, fpi_seg_has_module(s->kind) ? s->module : -1) == FP_OK, "%s",
           fp_exec_errmsg(x));
  }
  /* a recompute right after a skipped (empty) pre_backward(second) */
  fp_exec_stats r0, r1;
  fp_exec_get_stats(x, &r0);
  for (int32_t k = 0; x->prog->segs[k].kind != FP_SEG_PRE_BACKWARD; k++) {
    const fp_seg *s = &x->prog->segs[k];
    EXPECT(fp_exec_hook(x, (fp_hook)s->kind, fpi_seg_has_module(s->kind) ? s->module : -1) == FP_OK, "%s",
           fp_exec_errmsg(x));
  }
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_FORWARD, m1) == FP_OK, "recompute after a skip: %s", fp_exec_errmsg(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_FORWARD, m1) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_BACKWARD, m1) == FP_OK, "%s", fp_exec_errmsg(x));
  fp_exec_get_stats(x, &r1);
  EXPECT(r1.skipped == r0.skipped + 1, "skipped %" PRId64 " -> %" PRId64, r0.skipped, r1.skipped);
  for (int32_t k = x->cursor; k < x->prog->nsegs; k++) {
    const fp_seg *s = &x->prog->segs[k];
    EXPECT(fp_exec_hook(x, (fp_hook)s->kind, fpi_seg_has_module(s->kind) ? s->module : -1) == FP_OK, "%s",
           fp_exec_errmsg(x));
  }
  fp_exec_destroy(x);
  fp_plan_free(plan);
  fpi_arena_free(t.a);
  return tu_finish();
}
