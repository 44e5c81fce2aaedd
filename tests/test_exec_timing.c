/* test_exec_timing.c - the opt-in measured-timing record (executor/timing.c):
 * its calls are refused where they must be (in the middle of a step, bad
 * step counts, nothing recorded, an unwritable path) without changing
 * anything; with it on, hooks still allocate nothing; what it writes holds
 * exactly the steps asked for, every hook once in order, and every op this
 * rank runs with start <= end, ops of one stream one after another. Runs
 * under mpirun on 2 ranks; the file is checked by parsing it with json-c. */
#include <json-c/json.h>

#include "exec_util.h"

/* one module: a gather before its forward, a reduce-scatter after its backward */
static tprog build(void) {
  const int W = tu_world, n = 64;
  tprog t = tp_new(W);
  int w = tp_buf(&t, "w", (int64_t)W * n * 4, false), g = tp_buf(&t, "g", (int64_t)W * n * 4, false);
  int out = tp_buf(&t, "out", n * 4, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_FORWARD, t.module, 0);
  fp_op *o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(w, 0), o->src = fpi_reg_g(w, 0, n * 4);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_FORWARD, t.module, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_BACKWARD, t.module, 0);
  o = tp_op(&t, FP_OP_MEMSET, FP_STREAM_COMPUTE, FP_F32, (int64_t)W * n);
  o->dst = fpi_reg(g, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_BACKWARD, t.module, 0);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(out, 0), o->src = fpi_reg(g, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_OPTIMIZER, -1, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_OPTIMIZER, -1, 0);
  return t;
}

static double num(json_object *a, size_t i) { return json_object_get_double(json_object_array_get_idx(a, i)); }

static void check_file(const char *path, const fp_prog *p, int64_t first, int64_t nsteps) {
  json_object *root = json_object_from_file(path);
  EXPECT(root, "%s: not JSON", path);
  if (!root) return;
  json_object *v, *steps;
  EXPECT(json_object_object_get_ex(root, "format", &v) && !strcmp(json_object_get_string(v), "flexplan.timing.v1"),
         "format");
  EXPECT(json_object_object_get_ex(root, "rank", &v) && json_object_get_int(v) == tu_rank, "rank");
  char hash[32];
  snprintf(hash, sizeof hash, "fnv1a64:%016" PRIx64, fpi_prog_hash(p));
  EXPECT(json_object_object_get_ex(root, "plan_hash", &v) && !strcmp(json_object_get_string(v), hash), "plan hash");
  EXPECT(json_object_object_get_ex(root, "steps", &steps) && json_object_array_length(steps) == (size_t)nsteps,
         "%zu steps recorded, %" PRId64 " asked for", json_object_array_length(steps), nsteps);
  for (size_t k = 0; k < json_object_array_length(steps); k++) {
    json_object *s = json_object_array_get_idx(steps, k), *hooks, *ops;
    EXPECT(json_object_object_get_ex(s, "step", &v) && json_object_get_int64(v) == first + (int64_t)k, "step number");
    EXPECT(json_object_object_get_ex(s, "hooks", &hooks) && json_object_array_length(hooks) == (size_t)p->nsegs,
           "one entry per hook");
    double prev = 0;
    for (int32_t h = 0; h < p->nsegs; h++) {
      json_object *e = json_object_array_get_idx(hooks, (size_t)h);
      EXPECT(json_object_get_int(json_object_array_get_idx(e, 0)) == h, "hook %d numbered", h);
      EXPECT(num(e, 1) >= prev && num(e, 2) >= num(e, 1), "hook %d at %g..%g after %g", h, num(e, 1), num(e, 2), prev);
      prev = num(e, 2);
    }
    EXPECT(num(json_object_array_get_idx(hooks, 0), 1) == 0, "times count from step_begin's entry");
    /* the ops: every non-compute op (this program has no only= ops), in program order per stream */
    EXPECT(json_object_object_get_ex(s, "ops", &ops), "ops");
    int32_t expect_n = 0;
    for (int32_t i = 0; i < p->nops; i++) expect_n += p->ops[i].code != FP_OP_COMPUTE;
    EXPECT(json_object_array_length(ops) == (size_t)expect_n, "%zu ops recorded, %d run",
           json_object_array_length(ops), expect_n);
    double end[FP_NSTREAMS] = {0};
    int32_t last = -1;
    for (size_t j = 0; j < json_object_array_length(ops); j++) {
      json_object *e = json_object_array_get_idx(ops, j);
      int32_t i = json_object_get_int(json_object_array_get_idx(e, 0));
      EXPECT(i > last && i < p->nops, "op %d listed in program order", i);
      last = i;
      int st = p->ops[i].stream;
      EXPECT(num(e, 1) >= end[st] - 1e-3 && num(e, 2) >= num(e, 1), "op %d at %g..%g, its stream busy until %g", i,
             num(e, 1), num(e, 2), end[st]);
      end[st] = num(e, 2);
    }
  }
  json_object_put(root);
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  tprog t = build();
  fp_plan *plan = tp_load(&t);
  fp_exec *x = tp_exec(plan, FP_PROGRESS_DEFAULT);
  char path[256];
  snprintf(path, sizeof path, "/tmp/fp-timing-%d-%d.json", (int)getpid(), tu_rank);

  /* refusals */
  EXPECT(fp_exec_timing_write(x, path) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "fp_exec_timing_start first"),
         "write before start: %s", fp_exec_errmsg(x));
  EXPECT(fp_exec_timing_start(x, 0) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "1..65536"), "0 steps: %s",
         fp_exec_errmsg(x));
  EXPECT(fp_exec_timing_start(x, 65537) == FP_ERR_ARG, "65537 steps");
  EXPECT(fp_exec_timing_start(NULL, 1) == FP_ERR_ARG, "NULL executor");
  EXPECT(fp_exec_timing_start(x, 2) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(fp_exec_timing_write(x, path) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "no step has completed"),
         "write before a step: %s", fp_exec_errmsg(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1) == FP_OK, "%s", fp_exec_errmsg(x));
  EXPECT(fp_exec_timing_start(x, 2) == FP_ERR_ORDER && strstr(fp_exec_errmsg(x), "between steps"), "mid-step: %s",
         fp_exec_errmsg(x));
  EXPECT(fp_exec_timing_write(x, path) == FP_ERR_ORDER, "write mid-step");
  for (int32_t k = 1; k < x->prog->nsegs; k++) { /* finish the step */
    const fp_seg *s = &x->prog->segs[k];
    EXPECT(fp_exec_hook(x, (fp_hook)s->kind, fpi_seg_has_module(s->kind) ? s->module : -1) == FP_OK, "%s",
           fp_exec_errmsg(x));
  }
  /* three more steps, of which the record keeps the first (it holds 2) */
  fp_exec_stats a, b;
  fp_exec_get_stats(x, &a);
  for (int step = 0; step < 3; step++) tp_step(x);
  fp_exec_get_stats(x, &b);
  EXPECT(b.hook_allocations == 0 && b.allocations == a.allocations, "timing allocated in hooks (%" PRId64 ")",
         b.hook_allocations);
  EXPECT(fp_exec_timing_write(x, "/nonexistent-dir/t.json") == FP_ERR_ARG &&
             strstr(fp_exec_errmsg(x), "/nonexistent-dir/t.json: cannot write the timing record"),
         "unwritable: %s", fp_exec_errmsg(x));
  EXPECT(fp_exec_timing_write(x, path) == FP_OK, "%s", fp_exec_errmsg(x));
  check_file(path, x->prog, 0, 2);
  /* a new record replaces the old one and starts at the next step */
  EXPECT(fp_exec_timing_start(x, 5) == FP_OK, "%s", fp_exec_errmsg(x));
  tp_step(x);
  EXPECT(fp_exec_timing_write(x, path) == FP_OK, "%s", fp_exec_errmsg(x));
  check_file(path, x->prog, 4, 1);
  unlink(path);
  fp_exec_destroy(x);
  fp_plan_free(plan);
  fpi_arena_free(t.a);
  return tu_finish();
}
