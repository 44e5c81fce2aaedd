/* test_exec_mxfp8.c - MXFP8 params (a frozen replicated bucket with
 * "param_dtype": "mxfp8") on the MPI executor.
 *
 *   mpirun -n P test_exec_mxfp8 MODEL SPEC
 *
 * The spec (tests/mpi/frozen-mxfp8.spec.json: fc1.* of mlp-frozen frozen,
 * replicated, MXFP8) is compiled for P ranks through the C compile API.
 * Checked on every rank:
 *  - views: an MXFP8 param's weight and main are one e4m3 copy of numel
 *    elements, its scales view is e8m0 with ceil(numel / 32) elements at the
 *    arena offset the plan gives, after the elements and apart from them; it
 *    has no grads and no optimizer state; every other param has no scales;
 *  - refit from fp32 and bf16 safetensors files written here: the e4m3 bytes
 *    and the scales equal fpk_quantize_mxfp8 of the same values (widened to
 *    fp32) byte for byte, and every other param's main shard holds the
 *    file's values at its extents as before;
 *  - a refused refit (a wrong shape of the MXFP8 param) leaves the whole
 *    arena unchanged;
 *  - a whole training step runs with the MXFP8 bucket present: the other
 *    params are gathered from their new main weights, the MXFP8 bytes and
 *    scales are what the refit wrote before, during and after the step. */
#include "exec_util.h"
#include "compile_util.h"

#include "executor/safetensors.h"
#include "kernels/kernels.h"

static fp_exec *x;
static int32_t np;
static fp_param_view *views;

static bool is_mx(int32_t i) { return x->prog->params[i].scales.buf >= 0; }

/* the fp32 values of param i in a refit of salt `salt`: finite, of many
 * magnitudes (so the blocks' scales differ); one block of fc1.bias-like
 * params all zero in salt 2 */
static float value(int32_t i, int64_t k, int salt) {
  if (salt == 2 && views[i].numel < 32) return 0.0f;
  return tu_val(1000 * salt + i, k);
}

/* param i's full tensor in dtype dt */
static void *tensor(int32_t i, fp_dtype dt, int salt) {
  int64_t n = views[i].numel;
  float *f = calloc((size_t)n, 4);
  for (int64_t k = 0; k < n; k++) f[k] = value(i, k, salt);
  if (dt == FP_F32) return f;
  void *h = calloc((size_t)n, (size_t)fpi_dtype_size(dt));
  fpk_cast(h, dt, f, FP_F32, n);
  free(f);
  return h;
}

/* every param in dtype dt; param `bad_shape` (>= 0) one row longer */
static void write_file(const char *path, fp_dtype dt, int salt, int32_t bad_shape) {
  fp_st_tensor *ts = calloc((size_t)np, sizeof *ts);
  const void **data = calloc((size_t)np, sizeof *data);
  void **own = calloc((size_t)np, sizeof *own);
  for (int32_t i = 0; i < np; i++) {
    ts[i] = (fp_st_tensor){.name = views[i].name, .dtype = dt, .ndim = views[i].ndim};
    memcpy(ts[i].shape, views[i].shape, sizeof ts[i].shape);
    if (i == bad_shape) {
      ts[i].shape[0] += 1;
      own[i] = calloc((size_t)(views[i].numel + views[i].numel / views[i].shape[0]), (size_t)fpi_dtype_size(dt));
    } else {
      own[i] = tensor(i, dt, salt);
    }
    data[i] = own[i];
  }
  char err[512];
  if (!fpi_st_write(path, np, ts, data, err, sizeof err)) {
    fprintf(stderr, "rank %d: %s\n", tu_rank, err);
    exit(2);
  }
  for (int32_t i = 0; i < np; i++) free(own[i]);
  free(own), free(data), free(ts);
}

/* what a refit from a file of dtype dt and salt must have written: MXFP8
 * params' elements and scales (the reference quantizer of the fp32 values
 * the file's dtype holds); the others' main values */
static void expected_mx(int32_t i, fp_dtype dt, int salt, uint8_t *elems, uint8_t *scales) {
  void *t = tensor(i, dt, salt);
  float *f = calloc((size_t)views[i].numel, 4);
  fpk_cast(f, FP_F32, t, dt, views[i].numel);
  fpk_quantize_mxfp8(elems, scales, f, FP_F32, views[i].numel);
  free(f), free(t);
}

/* the MXFP8 params hold exactly what a refit of (dt, salt) writes */
static void check_mx(fp_dtype dt, int salt, const char *when) {
  for (int32_t i = 0; i < np; i++) {
    if (!is_mx(i)) continue;
    const fp_param_view *v = &views[i];
    uint8_t *e = malloc((size_t)v->numel), *s = malloc((size_t)fpi_mx_blocks(v->numel));
    expected_mx(i, dt, salt, e, s);
    int64_t bad = -1;
    for (int64_t k = 0; k < v->numel && bad < 0; k++)
      if (((const uint8_t *)v->weight.data)[k] != e[k]) bad = k;
    EXPECT(bad < 0, "%s: %s: e4m3 element %" PRId64 " is 0x%02x, fpk_quantize_mxfp8 gives 0x%02x", when, v->name,
           bad, bad < 0 ? 0 : ((const uint8_t *)v->weight.data)[bad], bad < 0 ? 0 : e[bad]);
    bad = -1;
    for (int64_t k = 0; k < v->scales.numel && bad < 0; k++)
      if (((const uint8_t *)v->scales.data)[k] != s[k]) bad = k;
    EXPECT(bad < 0, "%s: %s: scale %" PRId64 " is 0x%02x, fpk_quantize_mxfp8 gives 0x%02x", when, v->name, bad,
           bad < 0 ? 0 : ((const uint8_t *)v->scales.data)[bad], bad < 0 ? 0 : s[bad]);
    free(e), free(s);
  }
}

/* every other param's main shard holds the file's values at its extents */
static void check_main(fp_dtype dt, int salt, const char *when) {
  for (int32_t i = 0; i < np; i++) {
    if (is_mx(i)) continue;
    const fp_param_view *v = &views[i];
    const fp_extent *e = &v->shard;
    fp_dtype mdt = (fp_dtype)v->main.dtype;
    int64_t msz = fpi_dtype_size(mdt), bad = 0;
    float *full = tensor(i, FP_F32, salt);
    for (int64_t r = 0; r < e->runs; r++)
      for (int64_t k = 0; k < e->len; k++) {
        float f = full[e->full_off + r * e->full_stride + k];
        char fv[8], want[8];
        fpk_cast(fv, dt, &f, FP_F32, 1); /* the file's value */
        fpk_cast(want, mdt, fv, dt, 1);
        if (memcmp((const char *)v->main.data + (r * e->shard_stride + k) * msz, want, (size_t)msz) && bad++ < 2)
          EXPECT(0, "%s: %s: main element %" PRId64 " of run %" PRId64 " is not the file's", when, v->name, k, r);
      }
    free(full);
  }
}

/* after pre_forward(m): m's non-MXFP8 compute weights are the gathered main weights */
static void check_gathered(int32_t m, int salt) {
  for (int32_t i = 0; i < np; i++) {
    const fp_param_view *v = &views[i];
    if (v->module != m || is_mx(i)) continue;
    fp_dtype pdt = (fp_dtype)v->weight.dtype;
    int64_t psz = fpi_dtype_size(pdt), bad = 0;
    float *full = tensor(i, FP_F32, salt);
    for (int64_t k = 0; k < v->numel; k++) {
      char want[8];
      fpk_cast(want, pdt, &full[k], FP_F32, 1);
      if (memcmp((const char *)v->weight.data + k * psz, want, (size_t)psz) && bad++ < 2)
        EXPECT(0, "pre_forward: %s: compute weight element %" PRId64 " is not the new main weight", v->name, k);
    }
    free(full);
  }
}

static void check_views(void) {
  const fp_prog *p = x->prog;
  int mx = 0;
  for (int32_t i = 0; i < np; i++) {
    const fp_param_view *v = &views[i];
    const fp_ir_param *q = &p->params[i];
    if (!is_mx(i)) {
      EXPECT(!v->scales.data && v->scales.numel == 0, "%s: not MXFP8, but has a scales view", v->name);
      continue;
    }
    mx++;
    const fp_ir_buf *B = &p->bufs[q->scales.buf];
    const char *at = x->dev + B->offset + q->scales.off;
    EXPECT(v->scales.data == at && !B->host, "%s: scales at %p, the plan says arena offset %" PRId64, v->name,
           v->scales.data, B->offset + q->scales.off);
    EXPECT(v->scales.dtype == FP_ELEM_E8M0 && v->scales.numel == (v->numel + 31) / 32,
           "%s: scales are %s x %" PRId64 ", want e8m0 x %" PRId64, v->name, fp_elem_name(v->scales.dtype),
           v->scales.numel, (v->numel + 31) / 32);
    EXPECT(v->weight.dtype == FP_ELEM_E4M3 && v->main.dtype == FP_ELEM_E4M3, "%s: weight %s, main %s (want e4m3)",
           v->name, fp_elem_name(v->weight.dtype), fp_elem_name(v->main.dtype));
    EXPECT(v->weight.data && v->weight.data == v->main.data && v->weight.numel == v->numel &&
               v->main.numel == v->numel,
           "%s: weight and main are not one copy of %" PRId64 " elements", v->name, v->numel);
    EXPECT(v->weight.data == x->dev + p->bufs[q->weight.buf].offset + q->weight.off, "%s: weight not where the plan says",
           v->name);
    const char *w = v->weight.data, *s = v->scales.data;
    EXPECT(s >= w + v->numel || s + v->scales.numel <= w, "%s: scales overlap the elements", v->name);
    EXPECT(!v->requires_grad && !v->ugrad.data && !v->grad.data && !v->optim[0].data && !v->optim[1].data,
           "%s: an MXFP8 param with grads or optimizer state", v->name);
    EXPECT(v->shard.runs == 1 && v->shard.len == v->numel, "%s: not replicated whole", v->name);
  }
  EXPECT(mx >= 2, "the plan has %d MXFP8 params, the spec makes fc1.weight and fc1.bias MXFP8", mx);
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  if (argc != 3) {
    fprintf(stderr, "usage: test_exec_mxfp8 MODEL SPEC\n");
    tu_finalize();
    return 2;
  }
  fp_plan *plan = tu_compile(argv[1], argv[2], tu_world);
  if (!plan) return tu_finish();
  fp_exec_config c = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = tu_world};
  EXPECT(fp_exec_create(plan, &c, &x) == FP_OK, "create: %s", fp_exec_errmsg(x));
  if (tu_failures) {
    fp_exec_destroy(x);
    fp_plan_free(plan);
    return tu_finish();
  }
  fp_plan_info info;
  fp_plan_get_info(plan, &info);
  np = info.nparams;
  views = calloc((size_t)np, sizeof *views);
  for (int32_t i = 0; i < np; i++) fp_exec_param_at(x, i, &views[i]);
  check_views();

  const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char a[512];
  snprintf(a, sizeof a, "%s/mxfp8-refit-%d-%d.safetensors", dir, (int)getpid(), tu_rank);
  const char *one[1] = {a};

  /* fp32 file */
  write_file(a, FP_F32, 1, -1);
  EXPECT(fp_exec_load_weights(x, one, 1) == FP_OK, "refit: %s", fp_exec_errmsg(x));
  check_mx(FP_F32, 1, "fp32 refit");
  check_main(FP_F32, 1, "fp32 refit");

  /* a step: gathers the other params' new weights; the MXFP8 bytes stay */
  const fp_prog *p = x->prog;
  for (int32_t k = 0; k < p->nsegs; k++) {
    const fp_seg *s = &p->segs[k];
    EXPECT(fp_exec_hook(x, (fp_hook)s->kind, fpi_seg_has_module(s->kind) ? s->module : -1) == FP_OK, "hook %d: %s",
           (int)k, fp_exec_errmsg(x));
    if (s->kind == FP_SEG_PRE_FORWARD) {
      check_gathered(s->module, 1);
      check_mx(FP_F32, 1, "in the step");
    }
  }
  check_mx(FP_F32, 1, "after the step");
  check_main(FP_F32, 1, "after the step");

  /* bf16 file (one block of zeros per short param) */
  write_file(a, FP_BF16, 2, -1);
  EXPECT(fp_exec_load_weights(x, one, 1) == FP_OK, "bf16 refit: %s", fp_exec_errmsg(x));
  check_mx(FP_BF16, 2, "bf16 refit");
  check_main(FP_BF16, 2, "bf16 refit");

  /* refused: the MXFP8 param's shape is wrong; nothing of the arena changes */
  int32_t mxp = -1;
  for (int32_t i = 0; i < np && mxp < 0; i++)
    if (is_mx(i)) mxp = i;
  if (mxp >= 0) {
    write_file(a, FP_F32, 3, mxp);
    char *before = malloc((size_t)info.arena_bytes);
    memcpy(before, x->dev, (size_t)info.arena_bytes);
    fp_status st = fp_exec_load_weights(x, one, 1);
    char frag[256];
    snprintf(frag, sizeof frag, "param '%s' has shape", views[mxp].name);
    EXPECT(st == FP_ERR_WEIGHTS && strstr(fp_exec_errmsg(x), frag), "bad shape: %s: %s", fp_status_name(st),
           fp_exec_errmsg(x));
    EXPECT(!memcmp(before, x->dev, (size_t)info.arena_bytes), "a refused refit changed the arena");
    free(before);
    check_mx(FP_BF16, 2, "after a refused refit");
  }

  /* and a step after refits */
  tp_step(x);
  check_mx(FP_BF16, 2, "after the second step");
  fp_exec_stats s;
  fp_exec_get_stats(x, &s);
  EXPECT(s.refits == 2 && s.steps == 2 && s.hook_allocations == 0, "refits %" PRId64 ", steps %" PRId64, s.refits,
         s.steps);
  if (tu_rank == 0) printf("MXFP8 params: views, refits (fp32, bf16, refused) and steps checked on %d rank(s)\n", tu_world);
  unlink(a);
  free(views);
  fp_exec_destroy(x);
  fp_plan_free(plan);
  return tu_finish();
}
