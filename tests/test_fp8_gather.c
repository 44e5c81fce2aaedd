/* test_fp8_gather.c - MXFP8 gathers (bucket "gather_dtype": "mxfp8") on the
 * MPI backend, checked against the C reference kernels.
 *
 *   mpirun -n P test_fp8_gather MODEL SPEC
 *
 * The spec is compiled for P ranks. Every rank fills its main-weight shards
 * from a formula of (param, flat index), then runs one whole step (every
 * hook, grads zero). At each pre_forward and pre_backward of a module, every
 * param it reads from an MXFP8 bucket must hold, on every rank:
 *  - bit for bit, the reference round trip of the bucket's whole flat space
 *    (fpk_quantize_mxfp8 then fpk_dequantize_mxfp8 over the G chunks end to
 *    end, 32-element blocks): the ranks' chunks are multiples of 32 elements,
 *    so quantizing each chunk on its own rank gives the same blocks;
 *  - within the format's bound of the main weight itself (half an e4m3 ulp
 *    relative for normals, 2^(x-10) absolute below, x the block's scale
 *    exponent; then the compute dtype's own rounding);
 * and params of the other buckets equal their main weights cast. After the
 * step the main grads are float and exactly zero (zero unsharded grads
 * reduced): the FP8 path never touches grads. */
#include <math.h>

#include "exec_util.h"
#include "compile_util.h"
#include "base/placement.h"
#include "kernels/kernels.h"

static double formula(int32_t param, int64_t e) {
  return sin(0.37 * (double)e + 1.3 * param) * (1.0 + (double)((e / 7 + param) % 5) * 3.0) *
         (e % 97 == 0 ? 1e-3 : 1.0);
}

static float as_f32(const void *base, fp_dtype dt, int64_t k) {
  float f;
  fpk_cast(&f, FP_F32, (const char *)base + k * fpi_dtype_size(dt), dt, 1);
  return f;
}

/* the main value of element e of param i (its main dtype), as fp32 */
static float main_value(fp_dtype mdt, int32_t i, int64_t e) {
  float v = (float)formula(i, e), h;
  char t[8];
  fpk_cast(t, mdt, &v, FP_F32, 1);
  fpk_cast(&h, FP_F32, t, mdt, 1);
  return h;
}

typedef struct ref {
  bool mx;          /* the bucket gathers as MXFP8 */
  int64_t n;        /* elements of its flat space (G chunks) */
  char *want;       /* the compute weights expected there (param dtype) */
  float *exact;     /* the main values (fp32) at each flat element */
  uint8_t *scale;   /* the reference's block scales */
} ref;

/* the expected compute weights of every bucket's flat space */
static ref *references(const fp_prog *p) {
  ref *r = calloc((size_t)p->nbuckets, sizeof *r);
  for (int32_t i = 0; i < p->nparams; i++) {
    const fp_ir_param *q = &p->params[i];
    ref *b = &r[q->bucket];
    if (q->placement != FP_PL_FLAT || b->exact) continue;
    bool mx = false;
    for (int32_t j = 0; j < p->nops && !mx; j++)
      mx = p->ops[j].code == FP_OP_DEQUANTIZE_MXFP8 && p->ops[j].dst.buf == q->weight.buf;
    b->mx = mx;
    b->n = p->bufs[q->weight.buf].bytes / fpi_dtype_size(q->param_dtype);
    b->exact = calloc((size_t)b->n, sizeof(float));
    b->want = calloc((size_t)b->n, (size_t)fpi_dtype_size(q->param_dtype));
    b->scale = calloc((size_t)b->n / 32 + 1, 1);
  }
  for (int32_t i = 0; i < p->nparams; i++) { /* the params end to end at their weight offsets */
    const fp_ir_param *q = &p->params[i];
    ref *b = &r[q->bucket];
    if (!b->exact) continue;
    int64_t a = q->weight.off / fpi_dtype_size(q->param_dtype), n = 1;
    for (int k = 0; k < q->ndim; k++) n *= q->shape[k];
    for (int64_t e = 0; e < n; e++) b->exact[a + e] = main_value(q->main_dtype, i, e);
  }
  for (int32_t i = 0; i < p->nparams; i++) {
    const fp_ir_param *q = &p->params[i];
    ref *b = &r[q->bucket];
    if (!b->exact || !b->mx || b->scale[b->n / 32]) continue;
    uint8_t *d = malloc((size_t)b->n);
    fpk_quantize_mxfp8(d, b->scale, b->exact, FP_F32, b->n);
    fpk_dequantize_mxfp8(b->want, q->param_dtype, d, b->scale, b->n);
    b->scale[b->n / 32] = 1; /* done */
    free(d);
  }
  return r;
}

/* check the compute weights of the params module m reads */
static int64_t check_module(fp_exec *x, const ref *r, int32_t m, const char *when) {
  const fp_prog *p = x->prog;
  int64_t bad = 0, mx = 0;
  for (int32_t i = 0; i < p->nparams; i++) {
    const fp_ir_param *q = &p->params[i];
    if (q->module != m || !r[q->bucket].exact) continue;
    const ref *b = &r[q->bucket];
    fp_param_view v;
    fp_exec_param_at(x, i, &v);
    int64_t a = q->weight.off / fpi_dtype_size(q->param_dtype), es = fpi_dtype_size(q->param_dtype);
    for (int64_t e = 0; e < v.numel; e++) {
      const char *got = (const char *)v.weight.data + e * es;
      float g = as_f32(v.weight.data, q->param_dtype, e), want = b->exact[a + e];
      bool ok;
      if (b->mx) {
        mx++;
        /* the block's scale exponent, from the main values: 2^(x-10) below e4m3's normals */
        int64_t b0 = (a + e) / 32 * 32;
        float amax = 0;
        for (int64_t k = b0; k < b0 + 32 && k < b->n; k++) amax = fmaxf(amax, fabsf(b->exact[k]));
        double xe = amax > 0 ? ceil(log2(amax / 448.0)) : -127;
        double bound = fmax(fabs(want) * 0x1p-4, ldexp(1.0, (int)xe - 10)) + fabs(want) * 0x1p-7;
        ok = !memcmp(got, b->want + (a + e) * es, (size_t)es) && fabs((double)g - want) <= bound;
      } else {
        char w[8];
        fpk_cast(w, q->param_dtype, &want, FP_F32, 1);
        ok = !memcmp(got, w, (size_t)es);
      }
      if (!ok && bad++ < 3)
        EXPECT(0, "%s(%s): %s[%" PRId64 "] = %.9g, want %.9g%s", when, fp_plan_module_name(x->plan, m), q->name, e,
               g, want, b->mx ? " (the MXFP8 round trip)" : "");
    }
  }
  return mx;
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  if (argc != 3) {
    fprintf(stderr, "usage: test_fp8_gather MODEL SPEC\n");
    tu_finalize();
    return 2;
  }
  fp_plan *plan = tu_compile(argv[1], argv[2], tu_world);
  if (!plan) return tu_finish();
  fp_exec_config c = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = tu_world};
  fp_exec *x = NULL;
  EXPECT(fp_exec_create(plan, &c, &x) == FP_OK, "create: %s", fp_exec_errmsg(x));
  if (tu_failures) return tu_finish();
  const fp_prog *p = x->prog;
  for (int32_t i = 0; i < p->nparams; i++) { /* this rank's main shards from the formula */
    fp_param_view v;
    fp_exec_param_at(x, i, &v);
    const fp_extent *e = &v.shard;
    fp_dtype dt = (fp_dtype)v.main.dtype;
    for (int64_t k = 0; k < e->runs; k++)
      for (int64_t j = 0; j < e->len; j++) {
        float f = (float)formula(i, e->full_off + k * e->full_stride + j);
        fpk_cast((char *)v.main.data + (k * e->shard_stride + j) * fpi_dtype_size(dt), dt, &f, FP_F32, 1);
      }
  }
  ref *r = references(p);
  int64_t checked = 0;
  int32_t nm = 0;
  fp_plan_info info;
  fp_plan_get_info(plan, &info);
  nm = info.nmodules;
  EXPECT(fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1) == FP_OK, "step_begin: %s", fp_exec_errmsg(x));
  for (int32_t m = 0; m < nm; m++) {
    EXPECT(fp_exec_hook(x, FP_HOOK_PRE_FORWARD, m) == FP_OK, "pre_forward: %s", fp_exec_errmsg(x));
    checked += check_module(x, r, m, "pre_forward");
    EXPECT(fp_exec_hook(x, FP_HOOK_POST_FORWARD, m) == FP_OK, "post_forward: %s", fp_exec_errmsg(x));
  }
  for (int32_t m = nm - 1; m >= 0; m--) {
    EXPECT(fp_exec_hook(x, FP_HOOK_PRE_BACKWARD, m) == FP_OK, "pre_backward: %s", fp_exec_errmsg(x));
    checked += check_module(x, r, m, "pre_backward");
    EXPECT(fp_exec_hook(x, FP_HOOK_POST_BACKWARD, m) == FP_OK, "post_backward: %s", fp_exec_errmsg(x));
  }
  EXPECT(fp_exec_hook(x, FP_HOOK_PRE_OPTIMIZER, -1) == FP_OK, "pre_optimizer: %s", fp_exec_errmsg(x));
  for (int32_t i = 0; i < p->nparams; i++) { /* zero grads reduced: zero, in a float dtype */
    fp_param_view v;
    fp_exec_param_at(x, i, &v);
    EXPECT(!v.grad.data || fpi_dtype_reducible((fp_dtype)v.grad.dtype), "%s: main grad dtype %s", v.name,
           fp_elem_name(v.grad.dtype));
    for (int64_t e = 0; v.grad.data && e < v.grad.numel; e++)
      if (as_f32(v.grad.data, (fp_dtype)v.grad.dtype, e) != 0) {
        EXPECT(0, "%s: main grad element %" PRId64 " is not zero", v.name, e);
        break;
      }
  }
  EXPECT(fp_exec_hook(x, FP_HOOK_POST_OPTIMIZER, -1) == FP_OK, "post_optimizer: %s", fp_exec_errmsg(x));
  EXPECT(checked > 0, "no MXFP8 param was checked");
  if (tu_rank == 0) printf("MXFP8 gathers: %" PRId64 " elements checked on rank 0 (forward and backward)\n", checked);
  for (int32_t b = 0; b < p->nbuckets; b++) free(r[b].exact), free(r[b].want), free(r[b].scale);
  free(r);
  fp_exec_destroy(x);
  fp_plan_free(plan);
  return tu_finish();
}
