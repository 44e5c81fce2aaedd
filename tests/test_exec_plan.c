/* test_exec_plan.c - the loader trusts nothing: tampered, truncated and
 * hostile plan files give FP_ERR_PLAN with a message, and leak nothing (the
 * asan preset runs this with leak detection); plans that verify but do not
 * fit this run, or carry params and buffers the executor cannot place, are
 * refused by fp_exec_create with FP_ERR_PLAN before any byte of an arena is
 * used. Runs under mpirun with one rank (fp_exec_create needs MPI).
 *
 * The base plan is built in code (tests/exec_util.h) and written by the
 * plan writer, so every mutation starts from a file the reader accepts. */
#include <sys/stat.h>

#include "exec_util.h"

static char *slurp(const char *path, size_t *len) {
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  *len = fread(s, 1, (size_t)n, f);
  s[*len] = 0;
  fclose(f);
  return s;
}

static void spit(const char *path, const char *s, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(s, 1, n, f);
  fclose(f);
}

/* load `text` as a plan: expect FP_ERR_PLAN with a message containing
 * `frag` (NULL: any message) */
static void expect_rejected(const char *what, const char *text, size_t n, const char *frag) {
  char path[256];
  snprintf(path, sizeof path, "/tmp/fp-exec-plan-%d.json", (int)getpid());
  spit(path, text, n);
  fp_plan *p = NULL;
  fp_status st = fp_plan_load(path, &p);
  const char *m = fp_plan_errmsg(p);
  EXPECT(st == FP_ERR_PLAN, "%s: status %s", what, fp_status_name(st));
  EXPECT(p && *m, "%s: no message", what);
  if (frag) EXPECT(strstr(m, frag), "%s: message '%s' lacks '%s'", what, m, frag);
  fp_plan_info info;
  EXPECT(fp_plan_get_info(p, &info) == FP_ERR_ARG, "%s: a failed plan answers questions", what);
  fp_exec *x = NULL;
  fp_exec_config cfg = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = tu_world, .progress = FP_PROGRESS_POLL};
  EXPECT(fp_exec_create(p, &cfg, &x) == FP_ERR_ARG, "%s: an executor from a failed plan", what);
  fp_exec_destroy(x);
  fp_plan_free(p);
  unlink(path);
}

/* a small valid program: a gather and a reduction per step, one param */
/* alpha != 0: the grads scaled by it after the reduce-scatter (1/W: a whole
 * training step, rule 9 passes; anything else, or none at W > 1: rules 1-8
 * pass, rule 9 does not) */
static tprog base_ws(int W, double alpha) {
  tprog t = tp_new(W);
  int mainb = tp_buf(&t, "m.main", 256, false), w = tp_buf(&t, "m.weight", 256 * W, false);
  int ug = tp_buf(&t, "m.ugrad", 256 * W, false), gr = tp_buf(&t, "m.grad", 256, false);
  fp_ir_param *q = fpi_ir_param_add(t.p);
  q->name = "m.weight";
  q->ndim = 2;
  q->shape[0] = 4 * W;
  q->shape[1] = 16;
  q->module = t.module;
  q->bucket = -1;
  q->main_dtype = q->param_dtype = q->grad_dtype = FP_F32;
  q->requires_grad = true;
  q->placement = 0; /* shard, dim 0 */
  q->comm = t.world;
  q->chunk = 64;
  q->main = (fp_view){mainb, 0};
  q->grad = (fp_view){gr, 0};
  q->weight = (fp_view){w, 0};
  q->ugrad = (fp_view){ug, 0};
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_FORWARD, t.module, 0);
  fp_op *o = tp_op(&t, FP_OP_COPY, FP_STREAM_COMPUTE, FP_F32, 64);
  o->comm = t.world, o->dst = fpi_reg_g(w, 0, 256), o->src = fpi_reg(mainb, 0);
  fpi_ir_op_shape(t.p, o, 1, 256, 256);
  o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_COMPUTE, FP_F32, 64);
  o->comm = t.world, o->dst = fpi_reg(w, 0), o->src = fpi_reg_g(w, 0, 256);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_FORWARD, t.module, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_BACKWARD, t.module, 0);
  o = tp_op(&t, FP_OP_MEMSET, FP_STREAM_COMPUTE, FP_F32, 64 * W);
  o->dst = fpi_reg(ug, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_BACKWARD, t.module, 0);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, FP_F32, 64);
  o->comm = t.world, o->dst = fpi_reg(gr, 0), o->src = fpi_reg(ug, 0);
  if (alpha != 0) {
    o = tp_op(&t, FP_OP_SCALE, FP_STREAM_RS, FP_F32, 64);
    o->dst = fpi_reg(gr, 0);
    o->alpha = alpha;
  }
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_OPTIMIZER, -1, 0);
  fpi_ir_seg_begin(t.p, FP_SEG_POST_OPTIMIZER, -1, 0);
  return t;
}
static tprog base_w(int W) { return base_ws(W, 0); }
static tprog base(void) { return base_w(tu_world); }

static void write_plan(const tprog *t, char **text, size_t *n) {
  char path[256];
  tp_write(t, path, sizeof path);
  *text = slurp(path, n);
  unlink(path);
}

/* ---- files the reader must refuse ---------------------------------------------------- */
static void hostile_files(void) {
  tprog t = base();
  char *good;
  size_t n;
  write_plan(&t, &good, &n);
  /* the base itself loads */
  {
    char path[256];
    snprintf(path, sizeof path, "/tmp/fp-exec-plan-ok-%d.json", (int)getpid());
    spit(path, good, n);
    fp_plan *p = NULL;
    EXPECT(fp_plan_load(path, &p) == FP_OK, "base plan: %s", fp_plan_errmsg(p));
    fp_plan_free(p);
    unlink(path);
  }
  /* truncated at many lengths, the empty file included */
  for (size_t cut = 0; cut < n; cut += cut < 64 ? 7 : n / 40 + 1) {
    char what[64];
    snprintf(what, sizeof what, "truncated at %zu of %zu bytes", cut, n);
    expect_rejected(what, good, cut, NULL);
  }
  /* one byte changed in the program: the content hash no longer matches */
  char *bad = malloc(n + 1);
  memcpy(bad, good, n + 1);
  char *at = strstr(bad, "\"arena_bytes\":");
  EXPECT(at != NULL, "no arena_bytes in the plan");
  if (at) {
    at += strlen("\"arena_bytes\":");
    while (*at == ' ') at++;
    *at = *at == '9' ? '8' : (char)(*at + 1);
    expect_rejected("arena_bytes tampered with", bad, n, "hash");
  }
  /* a different hash */
  memcpy(bad, good, n + 1);
  at = strstr(bad, "fnv1a64:");
  if (at) {
    at[8] = at[8] == '0' ? '1' : '0';
    expect_rejected("hash tampered with", bad, n, "hash");
  }
  /* another format, garbage, binary, deep nesting, huge numbers */
  memcpy(bad, good, n + 1);
  at = strstr(bad, "flexplan.plan.v1");
  if (at) {
    at[15] = '9';
    expect_rejected("format v9", bad, n, "format");
  }
  expect_rejected("not JSON", "plan", 4, NULL);
  expect_rejected("binary", "\x00\xff\xfe{\x01", 5, NULL);
  char deep[4096];
  memset(deep, '[', sizeof deep);
  expect_rejected("nesting 4096 deep", deep, sizeof deep, NULL);
  const char *huge = "{\"format\":\"flexplan.plan.v1\",\"world_size\":99999999999999999999999}";
  expect_rejected("an integer past int64", huge, strlen(huge), NULL);
  const char *neg = "{\"format\":\"flexplan.plan.v1\",\"planner_version\":\"0.1.0\",\"hash\":\"fnv1a64:0\",\"events\":-5}";
  expect_rejected("negative counts", neg, strlen(neg), NULL);
  /* a file that is not there, a directory, a NULL path */
  fp_plan *p = NULL;
  EXPECT(fp_plan_load("/nonexistent/plan.json", &p) == FP_ERR_PLAN && strstr(fp_plan_errmsg(p), "nonexistent"),
         "missing file: %s", fp_plan_errmsg(p));
  fp_plan_free(p);
  EXPECT(fp_plan_load("/tmp", &p) == FP_ERR_PLAN, "a directory");
  fp_plan_free(p);
  EXPECT(fp_plan_load(NULL, &p) == FP_ERR_ARG && *fp_plan_errmsg(p), "NULL path");
  fp_plan_free(p);
  EXPECT(fp_plan_load("x", NULL) == FP_ERR_ARG, "NULL out");
  free(bad);
  free(good);
  fpi_arena_free(t.a);
}

/* ---- programs the reader accepts (hash and verifier pass) but this run cannot use ------ */
static void expect_create_fails(const char *what, tprog *t, int world, fp_status want, const char *frag) {
  fp_plan *plan = tp_load(t);
  fp_exec_config cfg = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = world, .progress = FP_PROGRESS_POLL};
  fp_exec *x = NULL;
  fp_status st = fp_exec_create(plan, &cfg, &x);
  EXPECT(st == want, "%s: status %s (%s)", what, fp_status_name(st), fp_exec_errmsg(x));
  EXPECT(strstr(fp_exec_errmsg(x), frag), "%s: message '%s' lacks '%s'", what, fp_exec_errmsg(x), frag);
  fp_exec_destroy(x);
  fp_plan_free(plan);
  fpi_arena_free(t->a);
}

/* ---- layouts the executor would refuse at setup: the loader's verifier refuses them first ---- */
static void expect_load_fails(const char *what, tprog *t, const char *frag) {
  char path[256];
  tp_write(t, path, sizeof path);
  fp_plan *plan = NULL;
  fp_status st = fp_plan_load(path, &plan);
  unlink(path);
  EXPECT(st == FP_ERR_PLAN, "%s: status %s", what, fp_status_name(st));
  EXPECT(strstr(fp_plan_errmsg(plan), frag) && strstr(fp_plan_errmsg(plan), ": error: /params/0: "),
         "%s: message '%s' lacks '%s'", what, fp_plan_errmsg(plan), frag);
  fp_plan_free(plan);
  fpi_arena_free(t->a);
}

static void unusable_plans(void) {
  tprog t = base();
  t.p->bufs[1].offset = -1; /* not memory-planned: the verifier allows it */
  expect_create_fails("unplaced buffer", &t, tu_world, FP_ERR_PLAN, "no arena offset");

  t = base();
  t.p->params[0].chunk = 60; /* does not split 4*W rows of 16 */
  expect_load_fails("inconsistent shard chunk", &t, "shard chunk 60 is not the layout's ceil(");

  t = base();
  t.p->params[0].placement = 2; /* owned, but no owner */
  expect_load_fails("owned without an owner", &t, "owner -1 is not a rank of comm");

  t = base();
  t.p->params[0].placement = 1; /* ragged without a table */
  expect_load_fails("ragged without a table", &t, "has no valid extent table");

  t = base_w(tu_world + 1);
  expect_create_fails("a plan for another world size", &t, tu_world, FP_ERR_PLAN, "the plan is for");

  t = base_w(tu_world + 1);
  expect_create_fails("a config that is not this rank's", &t, tu_world + 1, FP_ERR_ARG, "bootstrap communicator");

  /* config errors */
  t = base();
  fp_plan *plan = tp_load(&t);
  fp_exec *x = NULL;
  EXPECT(fp_exec_create(plan, NULL, &x) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "config"), "NULL config");
  fp_exec_destroy(x);
  fp_exec_config cfg = {.backend = (fp_backend)42, .rank = tu_rank, .world_size = tu_world, .progress = FP_PROGRESS_POLL};
  EXPECT(fp_exec_create(plan, &cfg, &x) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "backend"), "unknown backend");
  fp_exec_destroy(x);
  cfg = (fp_exec_config){.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = tu_world, .progress = (fp_progress)9};
  EXPECT(fp_exec_create(plan, &cfg, &x) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "progress"), "unknown progress");
  fp_exec_destroy(x);
  EXPECT(fp_exec_create(plan, &cfg, NULL) == FP_ERR_ARG, "NULL out");
  /* the NCCL backend: refused when not built; a progress mode it does not
   * take is refused (locally, before any device or NCCL call) when it is */
  cfg = (fp_exec_config){.backend = FP_BACKEND_NCCL, .rank = tu_rank, .world_size = tu_world, .progress = FP_PROGRESS_POLL};
  fp_status nst = fp_exec_create(plan, &cfg, &x);
#ifdef FP_HAVE_CUDA
  EXPECT(nst == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "progress"), "NCCL with a progress mode: %s", fp_exec_errmsg(x));
#else
  EXPECT(nst == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "not built"), "NCCL without CUDA: %s", fp_exec_errmsg(x));
  fp_nccl_id id;
  EXPECT(fp_nccl_get_id(&id) == FP_ERR_BACKEND, "fp_nccl_get_id without CUDA");
#endif
  EXPECT(fp_exec_cuda_stream(x) == NULL, "no stream for a failed executor");
  fp_exec_destroy(x);
  /* the base plan itself runs */
  x = tp_exec(plan, FP_PROGRESS_POLL);
  EXPECT(fp_exec_cuda_stream(x) == NULL, "the MPI backend has no CUDA stream");
  tp_step(x);
  fp_param_view v;
  EXPECT(fp_exec_param(x, "m.weight", &v) == FP_OK && v.weight.data && v.main.numel == 64, "views");
  EXPECT(fp_exec_param(x, "nope", &v) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "nope"), "unknown param");
  EXPECT(fp_exec_param_at(x, 1, &v) == FP_ERR_ARG, "param index out of range");
  fp_exec_destroy(x);
  fp_plan_free(plan);
  fpi_arena_free(t.a);
}

/* ---- the semantic check (rule 9) at create: a plan `flexplan verify` rejects never runs ---- */
static fp_status load_flags(const tprog *t, unsigned flags, fp_plan **plan) {
  char path[256];
  tp_write(t, path, sizeof path);
  fp_status st = fp_plan_load_flags(path, flags, plan);
  unlink(path);
  return st;
}

static fp_status create(const fp_plan *plan, fp_exec **x) {
  fp_exec_config cfg = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = tu_world, .progress = FP_PROGRESS_POLL};
  return fp_exec_create(plan, &cfg, x);
}

static void semantic_at_create(void) {
  /* grads scaled by 1/(2W): rules 1-8 pass, rule 9 does not */
  tprog t = base_ws(tu_world, 0.5 / tu_world);
  fp_plan *plan = NULL;
  fp_exec *x = NULL;
  EXPECT(load_flags(&t, 0, &plan) == FP_OK, "unscaled plan loads (rules 1-8): %s", fp_plan_errmsg(plan));
  fp_status st = create(plan, &x);
  char want[64];
  snprintf(want, sizeof want, "scaled %.9g, the step's mean needs 1/%d", 0.5 / tu_world, tu_world);
  EXPECT(st == FP_ERR_PLAN && strstr(fp_exec_errmsg(x), "fails the semantic check (rule 9") &&
             strstr(fp_exec_errmsg(x), want) && strstr(fp_exec_errmsg(x), "at the optimizer (step 1), the main grad of m.weight"),
         "unscaled plan at create: %s: %s", fp_status_name(st), fp_exec_errmsg(x));
  fp_exec_destroy(x);
  fp_plan_free(plan);
  /* the documented opt-out runs it */
  EXPECT(load_flags(&t, FP_LOAD_NO_SEMANTIC, &plan) == FP_OK, "NO_SEMANTIC load: %s", fp_plan_errmsg(plan));
  st = create(plan, &x);
  EXPECT(st == FP_OK, "NO_SEMANTIC create: %s", fp_exec_errmsg(x));
  fp_exec_destroy(x);
  fp_plan_free(plan);
  /* FP_LOAD_SEMANTIC refuses it at load, located */
  st = load_flags(&t, FP_LOAD_SEMANTIC, &plan);
  EXPECT(st == FP_ERR_PLAN && strstr(fp_plan_errmsg(plan), ": error: /segments/") && strstr(fp_plan_errmsg(plan), want),
         "SEMANTIC load: %s", fp_plan_errmsg(plan));
  fp_plan_free(plan);
  /* flags: both, or unknown ones, are an argument error */
  st = load_flags(&t, FP_LOAD_SEMANTIC | FP_LOAD_NO_SEMANTIC, &plan);
  EXPECT(st == FP_ERR_ARG && strstr(fp_plan_errmsg(plan), "together"), "both flags: %s", fp_plan_errmsg(plan));
  fp_plan_free(plan);
  st = load_flags(&t, 8, &plan);
  EXPECT(st == FP_ERR_ARG && strstr(fp_plan_errmsg(plan), "unknown flags"), "flag 8: %s", fp_plan_errmsg(plan));
  fp_plan_free(plan);
  fpi_arena_free(t.a);
  /* the step's divide added: it computes the step, and create runs it */
  t = base_ws(tu_world, 1.0 / tu_world);
  EXPECT(load_flags(&t, 0, &plan) == FP_OK, "scaled plan loads: %s", fp_plan_errmsg(plan));
  st = create(plan, &x);
  EXPECT(st == FP_OK, "scaled plan at create: %s", fp_exec_errmsg(x));
  fp_exec_destroy(x);
  fp_plan_free(plan);
  fpi_arena_free(t.a);
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  hostile_files();
  unusable_plans();
  semantic_at_create();
  return tu_finish();
}
