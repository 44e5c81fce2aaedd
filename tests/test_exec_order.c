/* test_exec_order.c - hooks called out of plan order are errors that name
 * the expected and the received hook; nothing is issued (no hang: the other
 * ranks make the same mistake and no collective is pending), the executor
 * stays where it was, and the right call then works. Also: invalid hooks and
 * modules, a refit in the middle of a step, no allocation on any hook
 * (the executor's allocation counter is unchanged over whole steps), and
 * activation checkpointing: module "second" is recomputed, so its
 * pre_forward / post_forward are accepted once inside its backward window
 * and nowhere else. Runs under mpirun on 2 ranks. */
#include "exec_util.h"

/* two modules, an all-gather before each forward and a reduction after
 * each backward; grad accumulation 2 */
static tprog build(void) {
  const int W = tu_world, n = 8;
  tprog t = tp_new(W);
  t.p->grad_accumulation = 2;
  int m1 = fp_ir_module_add(t.p, "second", 0, 0, 0);
  int mods[2] = {t.module, m1};
  int w = tp_buf(&t, "w", (int64_t)W * n * 4, false), g = tp_buf(&t, "g", (int64_t)W * n * 4, false);
  int out = tp_buf(&t, "out", n * 4, false);
  fp_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  for (int micro = 0; micro < 2; micro++) {
    for (int k = 0; k < 2; k++) {
      fp_ir_seg_begin(t.p, FP_SEG_PRE_FORWARD, mods[k], micro);
      fp_op *o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, n);
      o->comm = t.world, o->dst = fp_reg(w, 0), o->src = fp_reg_g(w, 0, n * 4);
      fp_ir_seg_begin(t.p, FP_SEG_POST_FORWARD, mods[k], micro);
    }
    for (int k = 1; k >= 0; k--) {
      fp_ir_seg_begin(t.p, FP_SEG_PRE_BACKWARD, mods[k], micro);
      fp_ir_seg_begin(t.p, FP_SEG_POST_BACKWARD, mods[k], micro);
      fp_op *o = tp_op(&t, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, FP_F32, n);
      o->comm = t.world, o->dst = fp_reg(out, 0), o->src = fp_reg(g, 0);
    }
  }
  fp_ir_seg_begin(t.p, FP_SEG_PRE_OPTIMIZER, -1, 0);
  fp_ir_seg_begin(t.p, FP_SEG_POST_OPTIMIZER, -1, 0);
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
  /* the wrong module, then a skipped post_forward */
  expect_order(x, FP_HOOK_PRE_FORWARD, m1, "pre_forward(second)", "expects pre_forward(m)");
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_FORWARD, m0) == FP_OK, "%s", fp_exec_errmsg(x));
  expect_order(x, FP_HOOK_PRE_FORWARD, m1, "pre_forward(second)", "expects post_forward(m)");
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
  /* the rest of the step in order; then the second micro-batch must not be skipped */
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_FORWARD, m0) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_FORWARD, m1) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_FORWARD, m1) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(fp_plan_module_recompute(plan, m1) == 1 && fp_plan_module_recompute(plan, m0) == 0 &&
             fp_plan_module_recompute(plan, 2) == -1 && fp_plan_module_recompute(NULL, 0) == -1,
         "fp_plan_module_recompute");
  /* a recompute before the backward window opens is just out of order */
  expect_order(x, FP_HOOK_PRE_FORWARD, m1, "pre_forward(second)", "expects pre_backward(second)");
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_BACKWARD, m1) == FP_OK, "%s", fp_exec_errmsg(x));
  /* the recomputed forward: post_forward first, and post_backward inside it, are refused */
  expect_order(x, FP_HOOK_POST_FORWARD, m1, "post_forward(second)", "no recomputed forward is open");
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_FORWARD, m1) == FP_OK, "recompute: %s", fp_exec_errmsg(x));
  expect_order(x, FP_HOOK_PRE_FORWARD, m1, "pre_forward(second)", "already open");
  expect_order(x, FP_HOOK_POST_BACKWARD, m1, "post_backward(second)", "call post_forward(second) first");
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_FORWARD, m1) == FP_OK, "recompute: %s", fp_exec_errmsg(x));
  expect_order(x, FP_HOOK_PRE_FORWARD, m1, "pre_forward(second)", "already recomputed");
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_BACKWARD, m1) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_BACKWARD, m0) == FP_OK, "%s", fp_exec_errmsg(x));
  /* m is not recomputed by the plan */
  expect_order(x, FP_HOOK_PRE_FORWARD, m0, "pre_forward(m)", "the plan does not recompute m");
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_BACKWARD, m0) == FP_OK, "%s", fp_exec_errmsg(x));
  expect_order(x, FP_HOOK_PRE_OPTIMIZER, -1, "pre_optimizer", "micro-batch 1");
  for (int32_t k = 9; k < x->prog->nsegs; k++) { /* finish the step */
    const fp_seg *s = &x->prog->segs[k];
    EXPECT(fp_exec_hook(x, (fp_hook)s->kind, fp_seg_has_module(s->kind) ? s->module : -1) == FP_OK, "%s",
           fp_exec_errmsg(x));
  }
  /* whole steps allocate nothing */
  fp_exec_stats a, b;
  fp_exec_get_stats(x, &a);
  for (int step = 0; step < 3; step++) tp_step(x);
  fp_exec_get_stats(x, &b);
  EXPECT(b.allocations == a.allocations && b.hook_allocations == 0,
         "allocations %" PRId64 " -> %" PRId64 ", in hooks %" PRId64, a.allocations, b.allocations, b.hook_allocations);
  EXPECT(b.steps == 4 && b.hooks == a.hooks + 3 * x->prog->nsegs, "steps %" PRId64, b.steps);
  EXPECT(b.collectives == 4 * 8 && b.arena_bytes > 0, "collectives %" PRId64, b.collectives);
  fp_exec_destroy(x);
  fp_plan_free(plan);
  fp_arena_free(t.a);
  return tu_finish();
}
