/* test_exec_refit.c - fp_exec_load_weights on a compiled plan (ctest
 * compiles tests/mpi/placements-w3 for 3 ranks: shard on dim 1, ragged,
 * owned and replicated params, some compute weights kept unsharded):
 *  - each rank's main shards hold exactly the file's values at their extents
 *    and the persistent compute weights are recast; each rank read only its
 *    extents; every view keeps its address; the next step gathers the new
 *    weights bit for bit;
 *  - weights split over two files, and BF16 / F16 files, load (converted);
 *  - a file set that lacks a param, has a wrong shape or dtype, names a
 *    param twice, is truncated or missing is refused with FP_ERR_WEIGHTS
 *    and a message naming the param or file, and the arena is unchanged
 *    byte for byte; on every rank when it fails on one rank only (the
 *    others name that rank).
 * usage: mpirun -n 3 test_exec_refit PLAN */
#include "exec_util.h"

#include "executor/safetensors.h"
#include "kernels/kernels.h"

static fp_exec *x;
static int32_t np;
static fp_param_view *views;

/* the full tensor of param i in a file of dtype dt, values from `salt` */
static void *tensor(int32_t i, fp_dtype dt, int salt) {
  int64_t n = views[i].numel;
  float *f = calloc((size_t)n, 4);
  for (int64_t k = 0; k < n; k++) f[k] = tu_val(1000 * salt + i, k);
  if (dt == FP_F32) return f;
  void *h = calloc((size_t)n, (size_t)fpi_dtype_size(dt));
  fpk_cast(h, dt, f, FP_F32, n);
  free(f);
  return h;
}

/* write params [lo, hi) (skipping `skip`) with dtype dt; shape of `bad_shape` changed */
static void write_file(const char *path, int32_t lo, int32_t hi, fp_dtype dt, int salt, int32_t skip, int32_t bad_shape,
                       int32_t bad_dtype) {
  fp_st_tensor ts[64] = {{0}};
  const void *data[64] = {0};
  void *own[64] = {0};
  int n = 0;
  for (int32_t i = lo; i < hi; i++) {
    if (i == skip) continue;
    fp_dtype d = i == bad_dtype ? FP_U8 : dt;
    ts[n] = (fp_st_tensor){.name = views[i].name, .dtype = d, .ndim = views[i].ndim};
    memcpy(ts[n].shape, views[i].shape, sizeof ts[n].shape);
    if (i == bad_shape) ts[n].shape[0] += 1;
    int64_t elems = 1;
    for (int k = 0; k < ts[n].ndim; k++) elems *= ts[n].shape[k];
    own[n] = d == FP_U8 ? calloc((size_t)elems, 1) : i == bad_shape ? calloc((size_t)elems, 4) : tensor(i, dt, salt);
    data[n] = own[n];
    n++;
  }
  char err[512];
  if (!fpi_st_write(path, n, ts, data, err, sizeof err)) {
    fprintf(stderr, "rank %d: %s\n", tu_rank, err);
    exit(2);
  }
  for (int k = 0; k < n; k++) free(own[k]);
}

static float as_f32(const void *p, fp_elem t, int64_t k) {
  float f;
  fpk_cast(&f, FP_F32, (const char *)p + k * fp_elem_size(t), (fp_dtype)t, 1);
  return f;
}

/* main shards hold the file's values (file dtype -> main dtype) */
static void check_loaded(fp_dtype fdt, int salt, const char *what) {
  for (int32_t i = 0; i < np; i++) {
    fp_param_view v;
    fp_exec_param_at(x, i, &v);
    EXPECT(v.main.data == views[i].main.data && v.weight.data == views[i].weight.data &&
               v.grad.data == views[i].grad.data && v.ugrad.data == views[i].ugrad.data,
           "%s: %s: a view moved", what, v.name);
    void *file = tensor(i, fdt, salt);
    const fp_extent *e = &v.shard;
    int64_t msz = fp_elem_size(v.main.dtype);
    for (int64_t k = 0; k < e->runs; k++)
      for (int64_t q = 0; q < e->len; q++) {
        char want[4];
        fpk_cast(want, (fp_dtype)v.main.dtype, (char *)file + (e->full_off + k * e->full_stride + q) * fpi_dtype_size(fdt),
                 fdt, 1);
        if (memcmp((char *)v.main.data + (k * e->shard_stride + q) * msz, want, (size_t)msz)) {
          EXPECT(0, "%s: %s main[%" PRId64 "] %g is not the file's %g", what, v.name, k * e->shard_stride + q,
                 as_f32(v.main.data, v.main.dtype, k * e->shard_stride + q), as_f32(want, v.main.dtype, 0));
          k = e->runs;
          break;
        }
      }
    free(file);
  }
}

/* after pre_forward(m): the gathered weights of m's params are the file's, cast */
static void check_gathered(int32_t m, fp_dtype fdt, int salt) {
  for (int32_t i = 0; i < np; i++) {
    if (views[i].module != m) continue;
    void *file = tensor(i, fdt, salt);
    int64_t n = views[i].numel, psz = fp_elem_size(views[i].weight.dtype);
    void *mainv = calloc((size_t)n, 4), *want = calloc((size_t)n, (size_t)psz);
    fpk_cast(mainv, (fp_dtype)views[i].main.dtype, file, fdt, n);
    fpk_cast(want, (fp_dtype)views[i].weight.dtype, mainv, (fp_dtype)views[i].main.dtype, n);
    EXPECT(!memcmp(views[i].weight.data, want, (size_t)(n * psz)), "gathered %s is not the refit's weights", views[i].name);
    free(file), free(mainv), free(want);
  }
}

static char *snapshot(void) {
  size_t n = (size_t)(x->prog->arena_bytes + x->prog->host_bytes);
  char *s = malloc(n + 1);
  memcpy(s, x->dev, (size_t)x->prog->arena_bytes);
  memcpy(s + x->prog->arena_bytes, x->host, (size_t)x->prog->host_bytes);
  return s;
}

static void expect_refused(const char *what, const char *const *paths, int n, const char *frag) {
  char *before = snapshot();
  fp_status st = fp_exec_load_weights(x, paths, n);
  EXPECT(st == FP_ERR_WEIGHTS, "%s: status %s (%s)", what, fp_status_name(st), fp_exec_errmsg(x));
  EXPECT(strstr(fp_exec_errmsg(x), frag), "%s: message '%s' lacks '%s'", what, fp_exec_errmsg(x), frag);
  char *after = snapshot();
  EXPECT(!memcmp(before, after, (size_t)(x->prog->arena_bytes + x->prog->host_bytes)), "%s: the arena changed", what);
  free(before);
  free(after);
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  if (argc != 2) {
    fprintf(stderr, "usage: test_exec_refit PLAN\n");
    return 2;
  }
  fp_plan *plan = NULL;
  if (fp_plan_load(argv[1], &plan) != FP_OK) {
    fprintf(stderr, "%s\n", fp_plan_errmsg(plan));
    return 2;
  }
  x = tp_exec(plan, FP_PROGRESS_DEFAULT);
  fp_plan_info info;
  fp_plan_get_info(plan, &info);
  np = info.nparams;
  views = calloc((size_t)np, sizeof *views);
  for (int32_t i = 0; i < np; i++) fp_exec_param_at(x, i, &views[i]);
  const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char a[512], b[512];
  snprintf(a, sizeof a, "%s/refit-a-%d.safetensors", dir, tu_rank);
  snprintf(b, sizeof b, "%s/refit-b-%d.safetensors", dir, tu_rank);

  /* one file, fp32 */
  write_file(a, 0, np, FP_F32, 1, -1, -1, -1);
  const char *one[1] = {a};
  EXPECT(fp_exec_load_weights(x, one, 1) == FP_OK, "refit: %s", fp_exec_errmsg(x));
  check_loaded(FP_F32, 1, "fp32 file");
  /* this rank read its extents only: its shard runs, or whole tensors it keeps unsharded */
  int64_t want = 0, all = 0;
  for (int32_t i = 0; i < np; i++) {
    all += views[i].numel * 4;
    want += (x->params[i].weight_persistent ? views[i].numel : views[i].shard.runs * views[i].shard.len) * 4;
  }
  fp_exec_stats rs;
  fp_exec_get_stats(x, &rs);
  EXPECT(rs.refit_bytes_read == want && (tu_world == 1 || want < all),
         "read %" PRId64 " bytes, its extents are %" PRId64 " of %" PRId64, rs.refit_bytes_read, want, all);
  for (int32_t i = 0; i < np; i++) /* compute weights kept unsharded are recast at once */
    if (x->params[i].weight_persistent) {
      float *f = tensor(i, FP_F32, 1);
      EXPECT(!memcmp(views[i].weight.data, f, (size_t)views[i].numel * 4), "%s: persistent weight", views[i].name);
      free(f);
    }
  /* the next step gathers them */
  for (int32_t k = 0; k < x->prog->nsegs; k++) {
    const fp_seg *s = &x->prog->segs[k];
    EXPECT(fp_exec_hook(x, (fp_hook)s->kind, fpi_seg_has_module(s->kind) ? s->module : -1) == FP_OK, "%s",
           fp_exec_errmsg(x));
    if (s->kind == FP_SEG_PRE_FORWARD) check_gathered(s->module, FP_F32, 1);
  }

  /* two files, bf16 and fp16 */
  write_file(a, 0, np / 2, FP_BF16, 2, -1, -1, -1);
  write_file(b, np / 2, np, FP_BF16, 2, -1, -1, -1);
  const char *two[2] = {a, b};
  EXPECT(fp_exec_load_weights(x, two, 2) == FP_OK, "refit from two files: %s", fp_exec_errmsg(x));
  check_loaded(FP_BF16, 2, "bf16 files");
  write_file(a, 0, np, FP_F16, 3, -1, -1, -1);
  EXPECT(fp_exec_load_weights(x, one, 1) == FP_OK, "fp16 refit: %s", fp_exec_errmsg(x));
  check_loaded(FP_F16, 3, "fp16 file");

  /* refused, and nothing changes */
  write_file(a, 0, np, FP_F32, 4, 1, -1, -1);
  char frag[256];
  snprintf(frag, sizeof frag, "'%s' is in none", views[1].name);
  expect_refused("missing param", one, 1, frag);
  write_file(a, 0, np, FP_F32, 4, -1, 2, -1);
  snprintf(frag, sizeof frag, "param '%s' has shape", views[2].name);
  expect_refused("wrong shape", one, 1, frag);
  write_file(a, 0, np, FP_F32, 4, -1, -1, 0);
  snprintf(frag, sizeof frag, "param '%s' is u8", views[0].name);
  expect_refused("wrong dtype", one, 1, frag);
  write_file(a, 0, np, FP_F32, 4, -1, -1, -1);
  write_file(b, np - 1, np, FP_F32, 4, -1, -1, -1);
  snprintf(frag, sizeof frag, "'%s' is in both", views[np - 1].name);
  expect_refused("a param in two files", two, 2, frag);
  /* truncated: cut the first file in half */
  {
    FILE *f = fopen(a, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    EXPECT(truncate(a, n / 2) == 0, "truncate");
  }
  expect_refused("truncated file", one, 1, a);
  /* a refit that fails on one rank only: every rank refuses, none changes
   * (before the ranks agreed, the others loaded the new weights) */
  if (tu_world > 1) {
    int bad = tu_world - 1;
    write_file(a, 0, np, FP_F32, 5, tu_rank == bad ? 1 : -1, -1, -1);
    if (tu_rank == bad) snprintf(frag, sizeof frag, "'%s' is in none", views[1].name);
    else snprintf(frag, sizeof frag, "rank %d could not load the weights", bad);
    expect_refused("a refit failing on one rank", one, 1, frag);
  }
  const char *missing[1] = {"/nonexistent/w.safetensors"};
  expect_refused("missing file", missing, 1, "nonexistent");
  EXPECT(fp_exec_load_weights(x, NULL, 1) == FP_ERR_ARG && fp_exec_load_weights(x, one, 0) == FP_ERR_ARG, "no files");
  check_loaded(FP_F16, 3, "after refused refits");
  fp_exec_stats s;
  fp_exec_get_stats(x, &s);
  EXPECT(s.refits == 3 && s.hook_allocations == 0, "refits %" PRId64, s.refits);
  unlink(a), unlink(b);
  free(views);
  fp_exec_destroy(x);
  fp_plan_free(plan);
  return tu_finish();
}
