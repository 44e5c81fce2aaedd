/* train_mlp.c - a C trainer on the flexplan executor: an MLP trained with
 * SGD on synthetic data, one process per rank under mpirun, with an
 * optional check of every step against a single-process reference.
 *
 *   mpirun -n W train_mlp --plan PLAN --steps N [--check] [--seed S]
 *          [--lr LR] [--batch B] [--progress poll|thread]
 *
 * It loads any compiled plan whose modules are linear layers: module m has
 * `<m>.weight` [out, in] and optionally `<m>.bias` [out], in the model's
 * module order, each layer's `in` the previous layer's `out`. Hidden layers
 * apply tanh; the loss of a micro-batch is 1/(2B) sum |y - t|^2. Each rank
 * trains on its own micro-batches (global micro-batch index r*GA + k for
 * rank r, accumulation step k); the plan averages the gradients over the
 * world and the micro-batches. Initial weights come from a safetensors file
 * the trainer writes and loads with fp_exec_load_weights (a refit).
 *
 * --check runs, on every rank, a reference trainer that computes the same
 * global batch in one process with the same dtype casts as the plan (compute
 * weights cast from the main weights, backward grads rounded to the param
 * dtype, cast to the reduce dtype, summed, accumulated in the main-grad
 * dtype, scaled by 1/(world * GA), SGD in fp32 rounded to the main dtype),
 * using the same forward/backward code, and compares after every step:
 *  - the compute weights the executor gathers, bit for bit: all of them in
 *    the first step (both sides cast the same loaded weights), and in every
 *    step the part this rank holds (its shard cast to the param dtype);
 *  - this rank's main-weight shard against the reference main weights,
 *    within a tolerance (see tolerance() and docs/executor.md): the only
 *    difference is the order in which MPI sums the ranks' gradients.
 * Exit status: 0 ok, 1 a failed check or an error, 2 usage. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "executor/safetensors.h"
#include "flexplan.h"
#include "kernels/kernels.h"

static int rank, world;

#define DIE(...)                                       \
  do {                                                 \
    fprintf(stderr, "train_mlp: rank %d: ", rank);     \
    fprintf(stderr, __VA_ARGS__);                      \
    fputc('\n', stderr);                               \
    MPI_Abort(MPI_COMM_WORLD, 1);                      \
  } while (0)

static void *xcalloc(size_t n, size_t s) {
  void *p = calloc(n ? n : 1, s ? s : 1);
  if (!p) DIE("out of memory");
  return p;
}

/* ---- the model --------------------------------------------------------------- */
typedef struct layer {
  int32_t module;
  int64_t in, out;
  int32_t w, b;          /* param indices (b: -1 without a bias) */
} layer;

typedef struct pinfo {   /* a param as the trainer sees it */
  fp_param_view v;
  fp_elem main_dt, grad_dt, param_dt, reduce_dt;
} pinfo;

static int nlayers, nparams;
static layer *L;
static pinfo *P;
static fp_plan_info info;

/* fp_elem and the kernels' fp_dtype share their values */
static fp_dtype dt(fp_elem e) { return (fp_dtype)e; }

static void build_model(fp_exec *x, const fp_plan *plan) {
  nparams = info.nparams;
  P = xcalloc((size_t)nparams, sizeof *P);
  for (int32_t i = 0; i < nparams; i++) {
    if (fp_exec_param_at(x, i, &P[i].v) != FP_OK) DIE("param %d: %s", (int)i, fp_exec_errmsg(x));
    P[i].main_dt = P[i].v.main.dtype;
    P[i].grad_dt = P[i].v.grad.dtype;
    P[i].param_dt = P[i].v.weight.dtype;
    P[i].reduce_dt = P[i].v.reduce_dtype;
  }
  nlayers = info.nmodules;
  L = xcalloc((size_t)nlayers, sizeof *L);
  for (int32_t m = 0; m < nlayers; m++) {
    const char *name = fp_plan_module_name(plan, m);
    layer *l = &L[m];
    l->module = m;
    l->w = l->b = -1;
    int count = 0;
    for (int32_t i = 0; i < nparams; i++) {
      if (P[i].v.module != m) continue;
      count++;
      size_t n = strlen(name);
      const char *nm = P[i].v.name;
      if (!strncmp(nm, name, n) && !strcmp(nm + n, ".weight")) l->w = i;
      if (!strncmp(nm, name, n) && !strcmp(nm + n, ".bias")) l->b = i;
    }
    if (l->w < 0 || count != 1 + (l->b >= 0))
      DIE("module '%s' is not a linear layer (%s.weight and optionally %s.bias)", name, name, name);
    const fp_param_view *w = &P[l->w].v;
    if (w->ndim != 2) DIE("%s must be [out, in]", w->name);
    l->out = w->shape[0];
    l->in = w->shape[1];
    if (l->b >= 0 && (P[l->b].v.ndim != 1 || P[l->b].v.shape[0] != l->out)) DIE("%s must be [%" PRId64 "]", P[l->b].v.name, l->out);
    if (m > 0 && l->in != L[m - 1].out) DIE("module '%s' takes %" PRId64 " inputs, the previous gives %" PRId64, name, l->in, L[m - 1].out);
  }
}

/* ---- synthetic data and weights ------------------------------------------------ */
static uint64_t mix(uint64_t h) {
  h ^= h >> 31;
  h *= 0x7fb5d329728ea185ull;
  h ^= h >> 27;
  h *= 0x81dadef4bc2dd44dull;
  return h ^ (h >> 33);
}
/* uniform in [-1, 1), reproducible from its coordinates */
static float unif(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = mix(mix(mix(seed * 0x9e3779b97f4a7c15ull + a) + b) + c);
  return (float)((double)(h >> 40) / (double)(1ull << 23) - 1.0);
}

/* full fp32 initial weights of param i */
static float *init_weights(uint64_t seed, int32_t i, int64_t fan_in) {
  float *w = xcalloc((size_t)P[i].v.numel, sizeof *w);
  float a = 1.0f / sqrtf((float)fan_in);
  for (int64_t k = 0; k < P[i].v.numel; k++) w[k] = a * unif(seed, 1, (uint64_t)i, (uint64_t)k);
  return w;
}

static int64_t fan_in_of(int32_t i) {
  for (int m = 0; m < nlayers; m++)
    if (L[m].w == i || L[m].b == i) return L[m].in;
  return 1;
}

/* ---- one layer, forward and backward (shared by both trainers) ----------------------- */
/* z = h W^T + b; y = tanh(z) for hidden layers */
static void layer_fwd(const layer *l, bool last, const float *W, const float *bias, const float *h, float *z, float *y,
                      int B) {
  for (int s = 0; s < B; s++)
    for (int64_t o = 0; o < l->out; o++) {
      float acc = bias ? bias[o] : 0.0f;
      for (int64_t k = 0; k < l->in; k++) acc += W[o * l->in + k] * h[s * l->in + k];
      z[s * l->out + o] = acc;
      y[s * l->out + o] = last ? acc : tanhf(acc);
    }
}

/* dy: grad w.r.t. the layer's output y; writes dW, db (when non-NULL) and
 * dh (w.r.t. its input, when non-NULL); dz is scratch */
static void layer_bwd(const layer *l, bool last, const float *W, const float *h, const float *z, const float *dy,
                      float *dz, float *dW, float *db, float *dh, int B) {
  for (int64_t k = 0; k < (int64_t)B * l->out; k++) {
    float t = last ? 1.0f : tanhf(z[k]);
    dz[k] = last ? dy[k] : dy[k] * (1.0f - t * t);
  }
  if (dW)
    for (int64_t o = 0; o < l->out; o++)
      for (int64_t k = 0; k < l->in; k++) {
        float acc = 0;
        for (int s = 0; s < B; s++) acc += dz[s * l->out + o] * h[s * l->in + k];
        dW[o * l->in + k] = acc;
      }
  if (db)
    for (int64_t o = 0; o < l->out; o++) {
      float acc = 0;
      for (int s = 0; s < B; s++) acc += dz[s * l->out + o];
      db[o] = acc;
    }
  if (dh)
    for (int s = 0; s < B; s++)
      for (int64_t k = 0; k < l->in; k++) {
        float acc = 0;
        for (int64_t o = 0; o < l->out; o++) acc += dz[s * l->out + o] * W[o * l->in + k];
        dh[s * l->in + k] = acc;
      }
}

/* activations of one micro-batch */
typedef struct acts {
  float **h, **z, **dh; /* h[0] = input; h[m+1] = output of layer m */
  float *dz, *t;
} acts;

static acts acts_new(int B) {
  acts a;
  a.h = xcalloc((size_t)nlayers + 1, sizeof *a.h);
  a.z = xcalloc((size_t)nlayers, sizeof *a.z);
  a.dh = xcalloc((size_t)nlayers + 1, sizeof *a.dh);
  int64_t widest = L[0].in;
  for (int m = 0; m < nlayers; m++) widest = L[m].out > widest ? L[m].out : widest;
  a.h[0] = xcalloc((size_t)(B * L[0].in), sizeof(float));
  a.dh[0] = xcalloc((size_t)(B * L[0].in), sizeof(float));
  for (int m = 0; m < nlayers; m++) {
    a.h[m + 1] = xcalloc((size_t)(B * L[m].out), sizeof(float));
    a.z[m] = xcalloc((size_t)(B * L[m].out), sizeof(float));
    a.dh[m + 1] = xcalloc((size_t)(B * L[m].out), sizeof(float));
  }
  a.dz = xcalloc((size_t)(B * widest), sizeof(float));
  a.t = xcalloc((size_t)(B * L[nlayers - 1].out), sizeof(float));
  return a;
}

static void acts_free(acts *a) {
  for (int m = 0; m <= nlayers; m++) free(a->h[m]), free(a->dh[m]);
  for (int m = 0; m < nlayers; m++) free(a->z[m]);
  free(a->h), free(a->z), free(a->dh), free(a->dz), free(a->t);
}

/* input and target of global micro-batch j at step t */
static void batch(acts *a, uint64_t seed, int64_t t, int64_t j, int B) {
  for (int64_t k = 0; k < B * L[0].in; k++) a->h[0][k] = unif(seed, 2, (uint64_t)(t * 1000003 + j), (uint64_t)k);
  for (int64_t k = 0; k < B * L[nlayers - 1].out; k++)
    a->t[k] = 0.5f * unif(seed, 3, (uint64_t)(t * 1000003 + j), (uint64_t)k);
}

/* dL/dy of the loss 1/(2B) sum |y - t|^2 */
static void loss_grad(acts *a, int B) {
  int64_t n = B * L[nlayers - 1].out;
  for (int64_t k = 0; k < n; k++) a->dh[nlayers][k] = (a->h[nlayers][k] - a->t[k]) / (float)B;
}

/* ---- the reference: the whole global batch in one process --------------------------- */
typedef struct ref {
  void **main;  /* full main weights (main dtype) */
  void **grad;  /* main grads (grad dtype) */
  void **red;   /* this micro index's reduced grads (reduce dtype) */
  void **ug;    /* one micro-batch's grads rounded to the param dtype */
  float **w;    /* compute weights as fp32 (param dtype values) */
  float **g32;  /* scratch: fp32 grads */
} ref;

static ref ref_new(float **init) {
  ref r;
  r.main = xcalloc((size_t)nparams, sizeof *r.main);
  r.grad = xcalloc((size_t)nparams, sizeof *r.grad);
  r.red = xcalloc((size_t)nparams, sizeof *r.red);
  r.ug = xcalloc((size_t)nparams, sizeof *r.ug);
  r.w = xcalloc((size_t)nparams, sizeof *r.w);
  r.g32 = xcalloc((size_t)nparams, sizeof *r.g32);
  for (int32_t i = 0; i < nparams; i++) {
    int64_t n = P[i].v.numel;
    r.main[i] = xcalloc((size_t)n, 4);
    r.grad[i] = xcalloc((size_t)n, 4);
    r.red[i] = xcalloc((size_t)n, 4);
    r.ug[i] = xcalloc((size_t)n, 4);
    r.w[i] = xcalloc((size_t)n, 4);
    r.g32[i] = xcalloc((size_t)n, 4);
    fpk_cast(r.main[i], dt(P[i].main_dt), init[i], FP_F32, n); /* as the refit converts */
  }
  return r;
}

static void ref_free(ref *r) {
  for (int32_t i = 0; i < nparams; i++)
    free(r->main[i]), free(r->grad[i]), free(r->red[i]), free(r->ug[i]), free(r->w[i]), free(r->g32[i]);
  free(r->main), free(r->grad), free(r->red), free(r->ug), free(r->w), free(r->g32);
}

/* compute weights: main -> param dtype -> fp32 values */
static void ref_weights(ref *r) {
  for (int32_t i = 0; i < nparams; i++) {
    int64_t n = P[i].v.numel;
    fpk_cast(r->ug[i], dt(P[i].param_dt), r->main[i], dt(P[i].main_dt), n);
    fpk_cast(r->w[i], FP_F32, r->ug[i], dt(P[i].param_dt), n);
  }
}

/* the SGD update both trainers apply: main = main - lr * grad, in fp32,
 * rounded to the main dtype */
static void sgd(void *main, fp_elem mdt, const void *grad, fp_elem gdt, int64_t n, float lr) {
  for (int64_t k = 0; k < n; k++) {
    float m, g;
    fpk_cast(&m, FP_F32, (const char *)main + k * fp_elem_size(mdt), dt(mdt), 1);
    fpk_cast(&g, FP_F32, (const char *)grad + k * fp_elem_size(gdt), dt(gdt), 1);
    m -= lr * g;
    fpk_cast((char *)main + k * fp_elem_size(mdt), dt(mdt), &m, FP_F32, 1);
  }
}

static void ref_step(ref *r, uint64_t seed, int64_t t, int B, float lr, int64_t ga) {
  ref_weights(r);
  acts a = acts_new(B);
  for (int64_t k = 0; k < ga; k++) {
    for (int32_t i = 0; i < nparams; i++) memset(r->red[i], 0, (size_t)P[i].v.numel * 4);
    for (int rr = 0; rr < world; rr++) { /* the ranks' micro-batches, summed in rank order */
      batch(&a, seed, t, rr * ga + k, B);
      for (int m = 0; m < nlayers; m++)
        layer_fwd(&L[m], m == nlayers - 1, r->w[L[m].w], L[m].b >= 0 ? r->w[L[m].b] : NULL, a.h[m], a.z[m], a.h[m + 1], B);
      loss_grad(&a, B);
      for (int m = nlayers - 1; m >= 0; m--) {
        const layer *l = &L[m];
        bool tw = P[l->w].v.requires_grad, tb = l->b >= 0 && P[l->b].v.requires_grad;
        layer_bwd(l, m == nlayers - 1, r->w[l->w], a.h[m], a.z[m], a.dh[m + 1], a.dz, tw ? r->g32[l->w] : NULL,
                  tb ? r->g32[l->b] : NULL, m > 0 ? a.dh[m] : NULL, B);
        int32_t ids[2] = {l->w, l->b};
        for (int q = 0; q < 2; q++) {
          int32_t i = ids[q];
          if (i < 0 || !P[i].v.requires_grad) continue;
          int64_t n = P[i].v.numel;
          fp_dtype pd = dt(P[i].param_dt), rd = dt(P[i].reduce_dt);
          memset(r->ug[i], 0, (size_t)n * 4);
          fpk_add(r->ug[i], pd, r->g32[i], FP_F32, n);     /* the backward's accumulation into ugrad */
          if (rr == 0) fpk_cast(r->red[i], rd, r->ug[i], pd, n); /* cast to the reduce dtype, sum */
          else {
            void *tmp = r->g32[i]; /* reuse as the cast's output */
            fpk_cast(tmp, rd, r->ug[i], pd, n);
            fpk_reduce_sum(r->red[i], tmp, rd, n);
          }
        }
      }
    }
    for (int32_t i = 0; i < nparams; i++) {
      if (!P[i].v.requires_grad) continue;
      int64_t n = P[i].v.numel;
      if (k == 0) fpk_cast(r->grad[i], dt(P[i].grad_dt), r->red[i], dt(P[i].reduce_dt), n);
      else fpk_add(r->grad[i], dt(P[i].grad_dt), r->red[i], dt(P[i].reduce_dt), n);
    }
  }
  for (int32_t i = 0; i < nparams; i++) {
    if (!P[i].v.requires_grad) continue;
    fpk_scale(r->grad[i], dt(P[i].grad_dt), 1.0 / ((double)world * (double)ga), P[i].v.numel);
    sgd(r->main[i], P[i].main_dt, r->grad[i], P[i].grad_dt, P[i].v.numel, lr);
  }
  acts_free(&a);
}

/* ---- checks -------------------------------------------------------------------------- */
static int failures;
static double max_abs, max_rel;

#define FAIL(...)                                    \
  do {                                               \
    if (failures++ < 10) {                           \
      fprintf(stderr, "train_mlp: rank %d: ", rank); \
      fprintf(stderr, __VA_ARGS__);                  \
      fputc('\n', stderr);                           \
    }                                                \
  } while (0)

static float elem(const void *p, fp_elem t, int64_t k) {
  float f;
  fpk_cast(&f, FP_F32, (const char *)p + k * fp_elem_size(t), dt(t), 1);
  return f;
}

static bool sixteen(fp_elem t) { return t == FP_ELEM_BF16 || t == FP_ELEM_FP16; }

/* The only difference between the two trainers is the order in which MPI
 * sums the ranks' grads (fp32 or the reduce dtype). Step 0 starts from
 * bit-identical weights, so its update differs by at most an ulp of the
 * grad's rounding, times lr: within an ulp or two of the main dtype. Later
 * steps start from weights that differ by that much; with fp32 compute
 * weights that stays at the level of fp32 rounding (1e-5 relative is three
 * orders of magnitude above it, and far below what a wrong or missing
 * contribution changes: about lr * |grad| / world ~ 1e-3). With 16-bit
 * compute weights (or reductions), a main weight that differs in its last
 * fp32 bits can round to a neighbouring bf16/fp16 value, one ulp (2^-8 /
 * 2^-11 relative) of a compute weight, which moves that step's grads and
 * through lr * grad the next weights by ~lr * 2^-8 * |w| |x|: we allow 2e-3
 * absolute and 1e-2 relative. Documented in docs/executor.md. */
static void tolerance(int32_t i, int64_t step, double *atol, double *rtol) {
  bool half = sixteen(P[i].param_dt) || sixteen(P[i].reduce_dt) || sixteen(P[i].grad_dt);
  double ulp_main = P[i].main_dt == FP_ELEM_FP32 ? ldexp(1, -23) : P[i].main_dt == FP_ELEM_BF16 ? ldexp(1, -7) : ldexp(1, -10);
  if (step == 0) {
    *rtol = 2 * ulp_main + 1e-6;
    *atol = 1e-7;
  } else if (!half) {
    *rtol = 1e-5 > 2 * ulp_main ? 1e-5 : 2 * ulp_main;
    *atol = 1e-6;
  } else {
    *rtol = 1e-2;
    *atol = 2e-3;
  }
}

/* this rank's main shard of every param against the reference */
static void check_main(const ref *r, int64_t step) {
  for (int32_t i = 0; i < nparams; i++) {
    const fp_param_view *v = &P[i].v;
    const fp_extent *e = &v->shard;
    double atol, rtol;
    tolerance(i, step, &atol, &rtol);
    for (int64_t k = 0; k < e->runs; k++)
      for (int64_t q = 0; q < e->len; q++) {
        float got = elem(v->main.data, P[i].main_dt, k * e->shard_stride + q);
        float want = elem(r->main[i], P[i].main_dt, e->full_off + k * e->full_stride + q);
        double d = fabs((double)got - want), rel = d / (fabs(want) > 1e-30 ? fabs(want) : 1e-30);
        if (d > max_abs) max_abs = d;
        if (rel > max_rel && fabs(want) > 1e-3) max_rel = rel;
        if (!(d <= atol + rtol * fabs(want)))
          FAIL("step %" PRId64 ": %s[%" PRId64 "] = %.9g, reference %.9g (|diff| %.3g > %.3g + %.3g * |ref|)", step,
               v->name, e->full_off + k * e->full_stride + q, got, want, d, atol, rtol);
      }
  }
}

/* the gathered compute weight of param i: bit for bit */
static void check_gathered(const ref *r, int32_t i, int64_t step, const char *hook) {
  const fp_param_view *v = &P[i].v;
  int64_t sz = fp_elem_size(P[i].param_dt);
  if (step == 0) { /* the whole weight: both sides cast the same loaded weights */
    void *want = xcalloc((size_t)v->numel, (size_t)sz);
    fpk_cast(want, dt(P[i].param_dt), r->main[i], dt(P[i].main_dt), v->numel);
    if (memcmp(v->weight.data, want, (size_t)(v->numel * sz)))
      FAIL("step 0, %s: gathered %s differs from the loaded weights", hook, v->name);
    free(want);
  }
  const fp_extent *e = &v->shard; /* the part this rank holds: its shard, cast */
  for (int64_t k = 0; k < e->runs; k++) {
    char want[16];
    for (int64_t q = 0; q < e->len; q++) {
      fpk_cast(want, dt(P[i].param_dt), (const char *)v->main.data + (k * e->shard_stride + q) * fp_elem_size(P[i].main_dt),
               dt(P[i].main_dt), 1);
      if (memcmp((const char *)v->weight.data + (e->full_off + k * e->full_stride + q) * sz, want, (size_t)sz)) {
        FAIL("step %" PRId64 ", %s: gathered %s[%" PRId64 "] is not this rank's shard", step, hook, v->name,
             e->full_off + k * e->full_stride + q);
        return;
      }
    }
  }
}

/* ---- the distributed trainer ----------------------------------------------------------- */
static void hook(fp_exec *x, fp_hook h, int32_t m) {
  fp_status st = fp_exec_hook(x, h, m);
  if (st != FP_OK) DIE("%s: %s", fp_status_name(st), fp_exec_errmsg(x));
}

static void load_initial(fp_exec *x, float **init) {
  const char *dir = getenv("TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/train_mlp.%d.%d.safetensors", dir && *dir ? dir : "/tmp", (int)getpid(), rank);
  fp_st_tensor *ts = xcalloc((size_t)nparams, sizeof *ts);
  const void **data = xcalloc((size_t)nparams, sizeof *data);
  for (int32_t i = 0; i < nparams; i++) {
    ts[i] = (fp_st_tensor){.name = P[i].v.name, .dtype = FP_F32, .ndim = P[i].v.ndim};
    memcpy(ts[i].shape, P[i].v.shape, sizeof ts[i].shape);
    data[i] = init[i];
  }
  char err[512];
  if (!fp_st_write(path, nparams, ts, data, err, sizeof err)) DIE("%s", err);
  const char *paths[1] = {path};
  fp_status st = fp_exec_load_weights(x, paths, 1);
  unlink(path);
  if (st != FP_OK) DIE("load weights: %s", fp_exec_errmsg(x));
  free(ts);
  free(data);
}

static void usage(void) {
  if (rank == 0)
    fprintf(stderr, "usage: train_mlp --plan PLAN --steps N [--check] [--seed S] [--lr LR] [--batch B] "
                    "[--progress poll|thread]\n");
  MPI_Finalize();
  exit(2);
}

int main(int argc, char **argv) {
  int level;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char *plan_path = NULL;
  long steps = -1, B = 4;
  unsigned long long seed = 1;
  float lr = 0.1f;
  bool check = false;
  fp_progress progress = FP_PROGRESS_DEFAULT;
  for (int k = 1; k < argc; k++) {
    const char *a = argv[k], *v = k + 1 < argc ? argv[k + 1] : NULL;
    char *end = NULL;
    errno = 0;
    if (!strcmp(a, "--check")) check = true;
    else if (!v) usage();
    else if (!strcmp(a, "--plan")) plan_path = v, k++;
    else if (!strcmp(a, "--steps")) steps = strtol(v, &end, 10), k++;
    else if (!strcmp(a, "--seed")) seed = strtoull(v, &end, 10), k++;
    else if (!strcmp(a, "--lr")) lr = strtof(v, &end), k++;
    else if (!strcmp(a, "--batch")) B = strtol(v, &end, 10), k++;
    else if (!strcmp(a, "--progress") && (!strcmp(v, "poll") || !strcmp(v, "thread")))
      progress = !strcmp(v, "poll") ? FP_PROGRESS_POLL : FP_PROGRESS_THREAD, k++;
    else usage();
    if (end && (*end || errno)) usage();
  }
  if (!plan_path || steps < 0 || B < 1 || B > 4096 || !(lr > 0)) usage();

  fp_plan *plan = NULL;
  if (fp_plan_load(plan_path, &plan) != FP_OK) DIE("%s", fp_plan_errmsg(plan));
  fp_plan_get_info(plan, &info);
  fp_exec_config cfg = {.backend = FP_BACKEND_MPI, .rank = rank, .world_size = world, .progress = progress};
  fp_exec *x = NULL;
  fp_status st = fp_exec_create(plan, &cfg, &x);
  if (st != FP_OK) DIE("%s: %s", fp_status_name(st), fp_exec_errmsg(x));
  build_model(x, plan);
  float **init = xcalloc((size_t)nparams, sizeof *init);
  for (int32_t i = 0; i < nparams; i++) init[i] = init_weights(seed, i, fan_in_of(i));
  load_initial(x, init);
  ref r = {0};
  if (check) r = ref_new(init);

  int64_t ga = info.grad_accumulation;
  acts a = acts_new((int)B);
  int64_t maxn = 1;
  for (int32_t i = 0; i < nparams; i++) maxn = P[i].v.numel > maxn ? P[i].v.numel : maxn;
  float *wbuf = xcalloc((size_t)maxn, 4), *bbuf = xcalloc((size_t)maxn, 4), *gW = xcalloc((size_t)maxn, 4);
  float *gb = xcalloc((size_t)maxn, 4);
  for (int64_t t = 0; t < steps; t++) {
    hook(x, FP_HOOK_STEP_BEGIN, -1);
    for (int64_t k = 0; k < ga; k++) {
      batch(&a, seed, t, rank * ga + k, (int)B);
      for (int m = 0; m < nlayers; m++) {
        const layer *l = &L[m];
        hook(x, FP_HOOK_PRE_FORWARD, l->module);
        if (check && k == 0) {
          check_gathered(&r, l->w, t, "pre_forward");
          if (l->b >= 0) check_gathered(&r, l->b, t, "pre_forward");
        }
        fpk_cast(wbuf, FP_F32, P[l->w].v.weight.data, dt(P[l->w].param_dt), P[l->w].v.numel);
        if (l->b >= 0) fpk_cast(bbuf, FP_F32, P[l->b].v.weight.data, dt(P[l->b].param_dt), l->out);
        layer_fwd(l, m == nlayers - 1, wbuf, l->b >= 0 ? bbuf : NULL, a.h[m], a.z[m], a.h[m + 1], (int)B);
        hook(x, FP_HOOK_POST_FORWARD, l->module);
      }
      loss_grad(&a, (int)B);
      for (int m = nlayers - 1; m >= 0; m--) {
        const layer *l = &L[m];
        hook(x, FP_HOOK_PRE_BACKWARD, l->module);
        const fp_param_view *w = &P[l->w].v, *b = l->b >= 0 ? &P[l->b].v : NULL;
        if (check && k == 0) check_gathered(&r, l->w, t, "pre_backward");
        fpk_cast(wbuf, FP_F32, w->weight.data, dt(P[l->w].param_dt), w->numel);
        bool tw = w->requires_grad, tb = b && b->requires_grad;
        layer_bwd(l, m == nlayers - 1, wbuf, a.h[m], a.z[m], a.dh[m + 1], a.dz, tw ? gW : NULL, tb ? gb : NULL,
                  m > 0 ? a.dh[m] : NULL, (int)B);
        /* the backward accumulates into the unsharded grads (zeroed by pre_backward) */
        if (tw) fpk_add(w->ugrad.data, dt(P[l->w].param_dt), gW, FP_F32, w->numel);
        if (tb) fpk_add(b->ugrad.data, dt(P[l->b].param_dt), gb, FP_F32, b->numel);
        hook(x, FP_HOOK_POST_BACKWARD, l->module);
      }
    }
    hook(x, FP_HOOK_PRE_OPTIMIZER, -1);
    for (int32_t i = 0; i < nparams; i++)
      if (P[i].v.requires_grad && P[i].v.main.data)
        sgd(P[i].v.main.data, P[i].main_dt, P[i].v.grad.data, P[i].grad_dt, P[i].v.main.numel, lr);
    hook(x, FP_HOOK_POST_OPTIMIZER, -1);
    if (check) {
      ref_step(&r, seed, t, (int)B, lr, ga);
      check_main(&r, t);
    }
  }
  if (fp_exec_sync(x) != FP_OK) DIE("sync: %s", fp_exec_errmsg(x));
  fp_exec_stats s;
  fp_exec_get_stats(x, &s);
  if (s.hook_allocations) FAIL("%" PRId64 " allocations inside hooks", s.hook_allocations);
  fp_exec_destroy(x);

  int any = 0;
  double amax = 0, rmax = 0;
  MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Reduce(&max_abs, &amax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&max_rel, &rmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("train_mlp: %s (%s, %" PRId64 " ranks, %" PRId64 " micro-batch(es)), %ld step(s), progress %s: %s\n",
           info.model, info.strategy, info.world_size, ga, steps, s.progress == FP_PROGRESS_THREAD ? "thread" : "poll",
           !check ? "trained" : any ? "CHECK FAILED" : "matches the reference");
  if (rank == 0 && check)
    printf("train_mlp: max |w - ref| = %.3g, max relative = %.3g (weights above 1e-3); gathered weights bit-exact: %s\n",
           amax, rmax, any ? "see errors" : "yes");
  for (int32_t i = 0; i < nparams; i++) free(init[i]);
  free(init);
  if (check) ref_free(&r);
  acts_free(&a);
  free(wbuf), free(bbuf), free(gW), free(gb), free(L), free(P);
  fp_plan_free(plan);
  MPI_Finalize();
  return any ? 1 : 0;
}
