/* train_mlp.c - a C trainer on the flexplan executor: an MLP trained with
 * SGD on synthetic data, one process per rank under mpirun, with an
 * optional check of every step against a single-process reference.
 *
 *   mpirun -n W train_mlp --plan PLAN --steps N [--check] [--seed S]
 *          [--lr LR] [--batch B] [--progress poll|thread]
 *          [--backend mpi|nccl] [--mode graph|eager|capture|step]
 *          [--stream side|legacy|executor|switch|legacy-untold] [--upload ordered|unordered]
 *          [--plant unjoined|sync|exec-sync|alloc]
 *          [--refit-at K] [--dump PREFIX]
 *
 * It loads any compiled plan whose modules are linear layers: module m has
 * `<m>.weight` [out, in] and optionally `<m>.bias` [out], in the model's
 * module order, each layer's `in` the previous layer's `out`. A tied layer
 * (model.json v2: a module whose "uses" names another module's weight, as
 * fp_plan_module_uses reports) has no `<m>.weight` of its own (a bias at
 * most) and computes h W0 + b with that weight W0 [out0, in0] read
 * transposed (so in = out0, out = in0): W0 is
 * one param, gathered for both layers, and its grad is the sum of both
 * layers' grads, accumulated in the one unsharded grad (the tied layer's
 * backward first, then its own layer's) and reduced once. A module the
 * plan recomputes (fp_plan_module_recompute) drops its pre-activations
 * after its forward and recomputes them inside its backward, between
 * pre_forward and post_forward hooks called after pre_backward. Hidden layers
 * apply a tanh-shaped rational activation (mlp_math.h); the loss of a
 * micro-batch is 1/(2B) sum |y - t|^2. Each rank
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
 *
 * --backend nccl (built with CUDA) runs the plan on the NCCL backend, one GPU
 * per rank (rank r uses device r mod the device count), and the layers on
 * the GPU with simple kernels (mlp_cuda.cu) that compute the same bits as
 * the CPU code, so the run can be compared byte for byte with the MPI
 * backend's (--dump). --mode picks the executor's cuda_mode: graph (the
 * default), eager, or capture - the executor in FP_CUDA_CAPTURE_SAFE mode
 * and the trainer capturing its whole step (hooks, layers, optimizer) on its
 * compute stream at step 1 and replaying that graph from then on (the
 * gathered-weight checks are skipped for replayed steps: no hook runs), or
 * step - the same through the executor's capture API (include/flexplan.h,
 * "one CUDA graph per training step"): a global-mode capture of step 1
 * between fp_exec_capture_begin and fp_exec_capture_end, which joins the
 * plan's streams back, checked to leave the executor's allocation count
 * alone, replayed with cudaGraphLaunch and no hook from step 2 on, and
 * released (fp_exec_capture_release) before the executor is destroyed. It
 * exits 77 when there is no CUDA device. --plant (with --mode step) puts a
 * trainer's capture mistake into step 1 that must fail the run with a clear
 * error: unjoined (the capture ended after the backward, without
 * fp_exec_capture_end, the reduce-scatters not joined back), sync
 * (cudaStreamSynchronize of the compute stream in the forward, as
 * tensor.item()), exec-sync (fp_exec_sync in the forward), alloc (cudaMalloc
 * in the forward). --stream picks the stream the GPU
 * trainer computes on and what it tells the executor (side: its own stream,
 * the default; legacy: CUDA's legacy default stream as FP_CUDA_STREAM_LEGACY;
 * executor: NULL, then fp_exec_cuda_stream; switch: another stream every
 * step, handed over with fp_exec_set_cuda_stream). Two planted bugs for the
 * simulated device's mutation tests (tests/simdev.cmake): --stream
 * legacy-untold computes on the legacy stream but passes NULL (the first H200
 * run's bug), --upload unordered uploads the micro-batches on a stream of
 * their own with nothing ordering the step after them.
 *
 * --refit-at K loads new weights (another seed) before step K, through
 * fp_exec_load_weights, and checks that no view moved; in graph and capture
 * modes the graphs captured before are replayed after it. The reference
 * does the same refit.
 *
 * --dump PREFIX writes this rank's main-weight shards after the last step
 * to PREFIX.rank<r>.safetensors (one U8 tensor of raw bytes per param): two
 * runs that must agree bit for bit are compared with cmp.
 *
 * Exit status: 0 ok, 1 a failed check or an error, 2 usage, 77 no GPU. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "examples/mlp_math.h"
#include "flexplan.h"
#ifdef FP_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "examples/mlp_cuda.h"
#endif

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
  bool tied;             /* w is another layer's weight (fp_plan_module_uses), read transposed */
  bool recompute;        /* the plan recomputes its forward inside its backward */
} layer;

/* index of element (o, k) of layer l's weight as the layer reads it: W[o, k]
 * of its own [out, in] weight, or W0[k, o] of the first layer's (tied) */
static inline int64_t widx(const layer *l, int64_t o, int64_t k) { return l->tied ? k * l->out + o : o * l->in + k; }

typedef struct pinfo {   /* a param as the trainer sees it */
  fp_param_view v;
  fp_elem main_dt, grad_dt, param_dt, reduce_dt;
} pinfo;

static int nlayers, nparams;
static layer *L;
static pinfo *P;
static fp_plan_info info;

static bool float_elem(fp_elem t) { return t == FP_ELEM_FP32 || t == FP_ELEM_BF16 || t == FP_ELEM_FP16; }

static void build_model(fp_exec *x, const fp_plan *plan) {
  nparams = info.nparams;
  P = xcalloc((size_t)nparams, sizeof *P);
  for (int32_t i = 0; i < nparams; i++) {
    if (fp_exec_param_at(x, i, &P[i].v) != FP_OK) DIE("param %d: %s", (int)i, fp_exec_errmsg(x));
    P[i].main_dt = P[i].v.main.dtype;
    P[i].grad_dt = P[i].v.grad.dtype;
    P[i].param_dt = P[i].v.weight.dtype;
    P[i].reduce_dt = P[i].v.reduce_dtype;
    if (P[i].v.scales.data) /* fp_param_view.scales: e4m3 elements whose values need their block scales */
      DIE("param '%s' is MXFP8 in the plan (e4m3 weights with e8m0 block scales); train_mlp computes with float "
          "weights: give its bucket a float param_dtype", P[i].v.name);
    if (!float_elem(P[i].main_dt) || !float_elem(P[i].param_dt) ||
        (P[i].v.requires_grad && (!float_elem(P[i].grad_dt) || !float_elem(P[i].reduce_dt))))
      DIE("param '%s': train_mlp computes in fp32, bf16 and fp16 only", P[i].v.name);
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
    l->recompute = fp_plan_module_recompute(plan, m) == 1;
    int32_t used[2];
    int32_t nused = fp_plan_module_uses(plan, m, used, 2);
    if (l->w < 0 && count == (l->b >= 0) && nused == 1) { /* a tied layer: another layer's weight, transposed */
      l->tied = true;
      l->w = used[0];
    } else if (l->w < 0 || count != 1 + (l->b >= 0) || nused != 0) {
      DIE("module '%s' is not a linear layer (%s.weight and optionally %s.bias, or a bias alone and \"uses\" of "
          "one other layer's weight)", name, name, name);
    }
    const fp_param_view *w = &P[l->w].v;
    if (w->ndim != 2) DIE("%s must be [out, in]", w->name);
    l->out = w->shape[l->tied ? 1 : 0];
    l->in = w->shape[l->tied ? 0 : 1];
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
  for (int m = 0; m < nlayers; m++) /* a tied weight: its first layer's */
    if (L[m].w == i || L[m].b == i) return L[m].in;
  return 1;
}

/* ---- one layer, forward and backward (shared by both trainers) ----------------------- */
/* z = h W^T + b; y = act(z) for hidden layers (mlp_math.h: the same bits as
 * the GPU trainer's kernels) */
static void layer_fwd(const layer *l, bool last, const float *W, const float *bias, const float *h, float *z, float *y,
                      int B) {
  for (int s = 0; s < B; s++)
    for (int64_t o = 0; o < l->out; o++) {
      float acc = bias ? bias[o] : 0.0f;
      for (int64_t k = 0; k < l->in; k++) acc = MLP_ADD(acc, MLP_MUL(W[widx(l, o, k)], h[s * l->in + k]));
      z[s * l->out + o] = acc;
      y[s * l->out + o] = last ? acc : mlp_act(acc);
    }
}

/* dy: grad w.r.t. the layer's output y; writes dW, db (when non-NULL) and
 * dh (w.r.t. its input, when non-NULL); dz is scratch */
static void layer_bwd(const layer *l, bool last, const float *W, const float *h, const float *z, const float *dy,
                      float *dz, float *dW, float *db, float *dh, int B) {
  for (int64_t k = 0; k < (int64_t)B * l->out; k++) dz[k] = last ? dy[k] : MLP_MUL(dy[k], mlp_dact(z[k]));
  if (dW)
    for (int64_t o = 0; o < l->out; o++)
      for (int64_t k = 0; k < l->in; k++) {
        float acc = 0;
        for (int s = 0; s < B; s++) acc = MLP_ADD(acc, MLP_MUL(dz[s * l->out + o], h[s * l->in + k]));
        dW[widx(l, o, k)] = acc;
      }
  if (db)
    for (int64_t o = 0; o < l->out; o++) {
      float acc = 0;
      for (int s = 0; s < B; s++) acc = MLP_ADD(acc, dz[s * l->out + o]);
      db[o] = acc;
    }
  if (dh)
    for (int s = 0; s < B; s++)
      for (int64_t k = 0; k < l->in; k++) {
        float acc = 0;
        for (int64_t o = 0; o < l->out; o++) acc = MLP_ADD(acc, MLP_MUL(dz[s * l->out + o], W[widx(l, o, k)]));
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
  for (int64_t k = 0; k < n; k++) a->dh[nlayers][k] = MLP_DIV(MLP_SUB(a->h[nlayers][k], a->t[k]), (float)B);
}

/* ---- elementwise arithmetic on arrays of fp_elem dtypes (fp32, bf16, fp16) ------------
 * the example's own, with the executor's kernels' bits (mlp_math.h): the
 * reference trainer checks the library with code that is not the library's */
/* element k as fp32 */
static float elem(const void *p, fp_elem t, int64_t k) { return mlp_get(p, (int)t, k); }

/* dst = src converted to dt; the same dtype: a copy of the bits */
static void cast_n(void *dst, fp_elem dt, const void *src, fp_elem st, int64_t n) {
  if (dt == st) {
    if (n > 0) memmove(dst, src, (size_t)n * (size_t)fp_elem_size(dt));
    return;
  }
  for (int64_t k = 0; k < n; k++) mlp_cast1(dst, (int)dt, src, (int)st, k);
}

/* dst += src: each an fp32 add of the widened values, rounded once to dt */
static void add_n(void *dst, fp_elem dt, const void *src, fp_elem st, int64_t n) {
  for (int64_t k = 0; k < n; k++) mlp_add1(dst, (int)dt, src, (int)st, k);
}

/* dst *= alpha: alpha rounded to fp32 first, then each an fp32 product
 * rounded once to dt */
static void scale_n(void *dst, fp_elem dt, double alpha, int64_t n) {
  float al = (float)alpha;
  for (int64_t k = 0; k < n; k++) mlp_put(dst, (int)dt, k, mlp_canon(MLP_MUL(mlp_get(dst, (int)dt, k), al)));
}

static bool sixteen(fp_elem t) { return t == FP_ELEM_BF16 || t == FP_ELEM_FP16; }

/* ---- the reference: the whole global batch in one process --------------------------- */
typedef struct ref {
  void **main;  /* full main weights (main dtype) */
  void **grad;  /* main grads (grad dtype) */
  void **red;   /* this micro index's reduced grads (reduce dtype) */
  void **ug;    /* one micro-batch's grads rounded to the param dtype */
  float **w;    /* compute weights as fp32 (param dtype values) */
  float **g32;  /* scratch: fp32 grads */
  float **sabs; /* this step's bound on reduction-order differences of the main grad, per element
                   (see reduction_bound; a sum of |reduced terms| until ref_step scales it) */
} ref;

static ref ref_new(float **init) {
  ref r;
  r.main = xcalloc((size_t)nparams, sizeof *r.main);
  r.grad = xcalloc((size_t)nparams, sizeof *r.grad);
  r.red = xcalloc((size_t)nparams, sizeof *r.red);
  r.ug = xcalloc((size_t)nparams, sizeof *r.ug);
  r.w = xcalloc((size_t)nparams, sizeof *r.w);
  r.g32 = xcalloc((size_t)nparams, sizeof *r.g32);
  r.sabs = xcalloc((size_t)nparams, sizeof *r.sabs);
  for (int32_t i = 0; i < nparams; i++) {
    int64_t n = P[i].v.numel;
    r.main[i] = xcalloc((size_t)n, 4);
    r.grad[i] = xcalloc((size_t)n, 4);
    r.red[i] = xcalloc((size_t)n, 4);
    r.ug[i] = xcalloc((size_t)n, 4);
    r.w[i] = xcalloc((size_t)n, 4);
    r.g32[i] = xcalloc((size_t)n, 4);
    r.sabs[i] = xcalloc((size_t)n, 4);
    cast_n(r.main[i], P[i].main_dt, init[i], FP_ELEM_FP32, n); /* as the refit converts */
  }
  return r;
}

static void ref_free(ref *r) {
  for (int32_t i = 0; i < nparams; i++)
    free(r->main[i]), free(r->grad[i]), free(r->red[i]), free(r->ug[i]), free(r->w[i]), free(r->g32[i]),
        free(r->sabs[i]);
  free(r->main), free(r->grad), free(r->red), free(r->ug), free(r->w), free(r->g32), free(r->sabs);
}

/* compute weights: main -> param dtype -> fp32 values */
static void ref_weights(ref *r) {
  for (int32_t i = 0; i < nparams; i++) {
    int64_t n = P[i].v.numel;
    cast_n(r->ug[i], P[i].param_dt, r->main[i], P[i].main_dt, n);
    cast_n(r->w[i], FP_ELEM_FP32, r->ug[i], P[i].param_dt, n);
  }
}

/* the SGD update both trainers apply: main = main - lr * grad, in fp32,
 * rounded to the main dtype */
static void sgd(void *main, fp_elem mdt, const void *grad, fp_elem gdt, int64_t n, float lr) {
  for (int64_t k = 0; k < n; k++) /* as mlpc_sgd */
    mlp_put(main, (int)mdt, k, MLP_SUB(mlp_get(main, (int)mdt, k), MLP_MUL(lr, mlp_get(grad, (int)gdt, k))));
}

/* unit roundoff of a dtype (half its ulp at 1) */
static double unit_roundoff(fp_elem t) {
  return t == FP_ELEM_BF16 ? ldexp(1, -8) : t == FP_ELEM_FP16 ? ldexp(1, -11) : ldexp(1, -24);
}

/* How far two orders of the same reduction can end apart, per element, in
 * units of sum_k sum_r |c_rk| (c_rk: rank r's term of micro-batch k, in the
 * reduce dtype). A sum of n terms rounded after every addition is within
 * gamma_{n-1} = (n-1)u/(1-(n-1)u) x sum |c| of the exact sum (Higham,
 * "Accuracy and Stability of Numerical Algorithms", 4.2), whatever the order;
 * two orders are within twice that. A 16-bit grad dtype rounds the cast
 * and each of the GA accumulations once more on each side. MPI sums in its
 * own order (a tree or ring the library picks); the reference in rank order.
 * Zero for one rank and one micro-batch in fp32: nothing to reorder. */
static double reduction_bound(int32_t i, int64_t ga) {
  double u = unit_roundoff(P[i].reduce_dt), m = (double)(world - 1);
  double b = world > 1 ? 2 * m * u / (1 - m * u) : 0;
  if (sixteen(P[i].grad_dt)) b += 2 * (double)ga * unit_roundoff(P[i].grad_dt);
  return b;
}

/* add |the reduce-dtype values of x| to acc */
static void add_abs(float *acc, const void *x, fp_elem t, int64_t n) {
  for (int64_t k = 0; k < n; k++) acc[k] += fabsf(elem(x, t, k));
}

static void ref_step(ref *r, uint64_t seed, int64_t t, int B, float lr, int64_t ga) {
  ref_weights(r);
  for (int32_t i = 0; i < nparams; i++) memset(r->sabs[i], 0, (size_t)P[i].v.numel * 4);
  acts a = acts_new(B);
  for (int64_t k = 0; k < ga; k++) {
    for (int32_t i = 0; i < nparams; i++) memset(r->red[i], 0, (size_t)P[i].v.numel * 4);
    for (int rr = 0; rr < world; rr++) { /* the ranks' micro-batches, summed in rank order */
      batch(&a, seed, t, rr * ga + k, B);
      for (int m = 0; m < nlayers; m++)
        layer_fwd(&L[m], m == nlayers - 1, r->w[L[m].w], L[m].b >= 0 ? r->w[L[m].b] : NULL, a.h[m], a.z[m], a.h[m + 1], B);
      loss_grad(&a, B);
      for (int32_t i = 0; i < nparams; i++) memset(r->ug[i], 0, (size_t)P[i].v.numel * 4);
      for (int m = nlayers - 1; m >= 0; m--) {
        const layer *l = &L[m];
        bool tw = P[l->w].v.requires_grad, tb = l->b >= 0 && P[l->b].v.requires_grad;
        layer_bwd(l, m == nlayers - 1, r->w[l->w], a.h[m], a.z[m], a.dh[m + 1], a.dz, tw ? r->g32[l->w] : NULL,
                  tb ? r->g32[l->b] : NULL, m > 0 ? a.dh[m] : NULL, B);
        int32_t ids[2] = {l->w, l->b};
        for (int q = 0; q < 2; q++) { /* the backward's accumulation into ugrad (a tied weight: twice) */
          int32_t i = ids[q];
          if (i >= 0 && P[i].v.requires_grad) add_n(r->ug[i], P[i].param_dt, r->g32[i], FP_ELEM_FP32, P[i].v.numel);
        }
      }
      for (int32_t i = 0; i < nparams; i++) { /* cast to the reduce dtype, sum over ranks */
        if (!P[i].v.requires_grad) continue;
        int64_t n = P[i].v.numel;
        fp_elem pd = P[i].param_dt, rd = P[i].reduce_dt;
        if (rr == 0) {
          cast_n(r->red[i], rd, r->ug[i], pd, n);
          add_abs(r->sabs[i], r->red[i], rd, n);
        } else {
          void *tmp = r->g32[i]; /* reuse as the cast's output */
          cast_n(tmp, rd, r->ug[i], pd, n);
          add_abs(r->sabs[i], tmp, rd, n);
          add_n(r->red[i], rd, tmp, rd, n); /* the reduction's sum, in the reduce dtype */
        }
      }
    }
    for (int32_t i = 0; i < nparams; i++) {
      if (!P[i].v.requires_grad) continue;
      int64_t n = P[i].v.numel;
      if (k == 0) cast_n(r->grad[i], P[i].grad_dt, r->red[i], P[i].reduce_dt, n);
      else add_n(r->grad[i], P[i].grad_dt, r->red[i], P[i].reduce_dt, n);
    }
  }
  for (int32_t i = 0; i < nparams; i++) {
    if (!P[i].v.requires_grad) continue;
    scale_n(r->grad[i], P[i].grad_dt, 1.0 / ((double)world * (double)ga), P[i].v.numel);
    sgd(r->main[i], P[i].main_dt, r->grad[i], P[i].grad_dt, P[i].v.numel, lr);
    /* the same scale and lr carry a grad difference into the weight */
    double k = reduction_bound(i, ga) * (double)lr / ((double)world * (double)ga);
    for (int64_t e = 0; e < P[i].v.numel; e++) r->sabs[i][e] = (float)(r->sabs[i][e] * k);
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
  /* after step 0 a 16-bit rounding flip in any param moves every param's
   * grads (the layers feed each other), so per-bucket mixed precision counts
   * for the whole model */
  bool half = false;
  for (int32_t j = 0; j < nparams; j++)
    half = half || sixteen(P[j].param_dt) || sixteen(P[j].reduce_dt) || sixteen(P[j].grad_dt);
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

/* ---- the arena from the host -------------------------------------------------------------- */
static bool on_gpu;        /* the NCCL backend: views are device pointers */
/* --stream (NCCL): the stream the trainer computes on and what it tells the
 * executor (include/flexplan.h, "the stream contract") */
enum {
  ST_SIDE,          /* its own non-blocking stream, passed as cfg.cuda_stream (the default) */
  ST_LEGACY,        /* CUDA's legacy default stream, passed as FP_CUDA_STREAM_LEGACY */
  ST_EXECUTOR,      /* passes NULL and computes on the executor's stream (fp_exec_cuda_stream) */
  ST_SWITCH,        /* two side streams, one per step in turn, each handed over with fp_exec_set_cuda_stream */
  ST_LEGACY_UNTOLD  /* a planted bug (the H200 run's): computes on the legacy stream but passes NULL, so the
                     * plan runs on a stream nothing orders against the trainer's work */
};
static int stream_mode = ST_SIDE;
static bool upload_unordered; /* a planted bug: the micro-batches uploaded on their own stream, unordered */
static int stream_mode_of(const char *v) {
  static const char *names[] = {"side", "legacy", "executor", "switch", "legacy-untold"};
  for (int k = 0; k < 5; k++)
    if (!strcmp(v, names[k])) return k;
  return -1;
}
static void *hview[2];     /* host copies of views (NCCL), the largest view each */
/* --mode step (one graph per step through fp_exec_capture_begin/end) and its planted mistakes */
static bool step_api;
enum { PLANT_NONE, PLANT_UNJOINED, PLANT_SYNC, PLANT_EXEC_SYNC, PLANT_ALLOC };
static int plant;
static int plant_of(const char *v) {
  static const char *names[] = {"unjoined", "sync", "exec-sync", "alloc"};
  for (int k = 0; k < 4; k++)
    if (!strcmp(v, names[k])) return k + 1;
  return -1;
}
#ifdef FP_HAVE_CUDA
static cudaStream_t S;     /* the trainer's compute stream (NCCL) */
static cudaStream_t S2;    /* --stream switch: the other one */
static cudaStream_t U;     /* --upload unordered: the uploads' own stream */
#define CK(call)                                                                \
  do {                                                                          \
    cudaError_t e_ = (call);                                                    \
    if (e_ != cudaSuccess) DIE("%s: %s", #call, cudaGetErrorString(e_));        \
  } while (0)
#endif

/* a view's bytes as the host can read them: the view itself (MPI), or a
 * copy in hview[slot] once the compute stream is idle (NCCL) */
static const void *host_of(const fp_tensor *t, int slot) {
  if (!on_gpu || !t->data) return t->data;
#ifdef FP_HAVE_CUDA
  CK(cudaStreamSynchronize(S));
  /* cudaMemcpyDefault: an offloaded bucket's views are in the pinned host arena */
  CK(cudaMemcpy(hview[slot], t->data, (size_t)(t->numel * fp_elem_size(t->dtype)), cudaMemcpyDefault));
#endif
  return hview[slot];
}

/* this rank's main shard of every param against the reference */
static void check_main(const ref *r, int64_t step) {
  for (int32_t i = 0; i < nparams; i++) {
    const fp_param_view *v = &P[i].v;
    const fp_extent *e = &v->shard;
    const void *mdata = host_of(&v->main, 0);
    double atol, rtol;
    tolerance(i, step, &atol, &rtol);
    for (int64_t k = 0; k < e->runs; k++)
      for (int64_t q = 0; q < (k == e->runs - 1 ? e->last_len : e->len); q++) {
        float got = elem(mdata, P[i].main_dt, k * e->shard_stride + q);
        float want = elem(r->main[i], P[i].main_dt, e->full_off + k * e->full_stride + q);
        double d = fabs((double)got - want), rel = d / (fabs(want) > 1e-30 ? fabs(want) : 1e-30);
        if (d > max_abs) max_abs = d;
        if (rel > max_rel && fabs(want) > 1e-3) max_rel = rel;
        /* step 0: plus what the reduction order can change (reduction_bound) */
        double at = atol + (step == 0 ? r->sabs[i][e->full_off + k * e->full_stride + q] : 0);
        if (!(d <= at + rtol * fabs(want)))
          FAIL("step %" PRId64 ": %s[%" PRId64 "] = %.9g, reference %.9g (|diff| %.3g > %.3g + %.3g * |ref|)", step,
               v->name, e->full_off + k * e->full_stride + q, got, want, d, at, rtol);
      }
  }
}

/* the gathered compute weight of param i: bit for bit */
static void check_gathered(const ref *r, int32_t i, int64_t step, const char *hook) {
  const fp_param_view *v = &P[i].v;
  int64_t sz = fp_elem_size(P[i].param_dt);
  const char *wdata = host_of(&v->weight, 0), *mdata = host_of(&v->main, 1);
  if (step == 0) { /* the whole weight: both sides cast the same loaded weights */
    void *want = xcalloc((size_t)v->numel, (size_t)sz);
    cast_n(want, P[i].param_dt, r->main[i], P[i].main_dt, v->numel);
    if (memcmp(wdata, want, (size_t)(v->numel * sz)))
      FAIL("step 0, %s: gathered %s differs from the loaded weights", hook, v->name);
    free(want);
  }
  const fp_extent *e = &v->shard; /* the part this rank holds: its shard, cast */
  for (int64_t k = 0; k < e->runs; k++) {
    uint32_t want[1];
    for (int64_t q = 0; q < (k == e->runs - 1 ? e->last_len : e->len); q++) {
      cast_n(want, P[i].param_dt, mdata + (k * e->shard_stride + q) * fp_elem_size(P[i].main_dt), P[i].main_dt, 1);
      if (memcmp(wdata + (e->full_off + k * e->full_stride + q) * sz, want, (size_t)sz)) {
        FAIL("step %" PRId64 ", %s: gathered %s[%" PRId64 "] is not this rank's shard", step, hook, v->name,
             e->full_off + k * e->full_stride + q);
        return;
      }
    }
  }
}

/* ---- safetensors files ------------------------------------------------------------------
 * The format: an 8-byte little-endian length N, N bytes of JSON header - an
 * object of tensor name -> {"dtype", "shape", "data_offsets": [begin, end)
 * in the data that follows} - then the data, the tensors' bytes back to
 * back. The header is padded with spaces to a multiple of 8, so the data
 * starts 8-aligned; the library's reader (fp_exec_load_weights) is strict:
 * the tensors must tile the data exactly. */
typedef struct st_tensor {
  const char *name, *dtype; /* dtype: "F32", "U8", ... */
  int ndim;
  const int64_t *shape;
  const void *data;         /* bytes of it */
  int64_t bytes;
} st_tensor;

typedef struct strbuf {
  char *p;
  size_t len, cap;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (b->len + n + 1 > cap) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) DIE("out of memory");
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}
static void sb_str(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_i64(strbuf *b, int64_t v) {
  char t[32];
  sb_put(b, t, (size_t)snprintf(t, sizeof t, "%" PRId64, v));
}

/* s as a JSON string: quote, backslash and control characters escaped
 * (\b \f \n \r \t, else \u00xx), other bytes as they are (UTF-8 passes) */
static void sb_json_string(strbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    const char *esc = *c == '"' ? "\\\"" : *c == '\\' ? "\\\\" : *c == '\b' ? "\\b" : *c == '\f' ? "\\f"
                      : *c == '\n' ? "\\n" : *c == '\r' ? "\\r" : *c == '\t' ? "\\t" : NULL;
    char u[8];
    if (esc) sb_str(b, esc);
    else if (*c < 0x20) sb_put(b, u, (size_t)snprintf(u, sizeof u, "\\u%04x", *c));
    else sb_put(b, (const char *)c, 1);
  }
  sb_put(b, "\"", 1);
}

static void st_write(const char *path, int n, const st_tensor *t) {
  strbuf h = {0};
  sb_str(&h, "{");
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    if (i) sb_str(&h, ",");
    sb_json_string(&h, t[i].name);
    sb_str(&h, ":{\"dtype\":");
    sb_json_string(&h, t[i].dtype);
    sb_str(&h, ",\"shape\":[");
    for (int d = 0; d < t[i].ndim; d++) {
      if (d) sb_str(&h, ",");
      sb_i64(&h, t[i].shape[d]);
    }
    sb_str(&h, "],\"data_offsets\":[");
    sb_i64(&h, off);
    sb_str(&h, ",");
    sb_i64(&h, off += t[i].bytes);
    sb_str(&h, "]}");
  }
  sb_str(&h, "}");
  while (h.len % 8) sb_str(&h, " ");
  unsigned char len[8];
  for (int k = 0; k < 8; k++) len[k] = (unsigned char)((uint64_t)h.len >> (8 * k));
  FILE *f = fopen(path, "wb");
  if (!f) DIE("%s: cannot create: %s", path, strerror(errno));
  bool ok = fwrite(len, 1, 8, f) == 8 && fwrite(h.p, 1, h.len, f) == h.len;
  for (int i = 0; ok && i < n; i++)
    ok = !t[i].bytes || fwrite(t[i].data, 1, (size_t)t[i].bytes, f) == (size_t)t[i].bytes;
  if (fclose(f) != 0 || !ok) {
    unlink(path);
    DIE("%s: write failed", path);
  }
  free(h.p);
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
  st_tensor *ts = xcalloc((size_t)nparams, sizeof *ts);
  for (int32_t i = 0; i < nparams; i++)
    ts[i] = (st_tensor){.name = P[i].v.name, .dtype = "F32", .ndim = P[i].v.ndim, .shape = P[i].v.shape,
                        .data = init[i], .bytes = P[i].v.numel * 4};
  st_write(path, nparams, ts);
  const char *paths[1] = {path};
  fp_status st = fp_exec_load_weights(x, paths, 1);
  unlink(path);
  if (st != FP_OK) DIE("load weights: %s", fp_exec_errmsg(x));
  free(ts);
}

static void usage(void) {
  if (rank == 0)
    fprintf(stderr, "usage: train_mlp --plan PLAN --steps N [--check] [--seed S] [--lr LR] [--batch B] "
                    "[--progress poll|thread] [--backend mpi|nccl] [--mode graph|eager|capture|step] [--refit-at K] "
                    "[--dump PREFIX] [--timing PREFIX] [--stream side|legacy|executor|switch|legacy-untold] "
                    "[--upload ordered|unordered] [--plant unjoined|sync|exec-sync|alloc]\n");
  MPI_Finalize();
  exit(2);
}

/* ---- one step on the CPU (MPI backend) ------------------------------------------------------ */
typedef struct run {
  fp_exec *x;
  const ref *r;     /* NULL: no checks */
  uint64_t seed;
  int B;
  float lr;
  int64_t ga;
  acts a;
  float *wbuf, *bbuf, *gW, *gb, *ybuf; /* ybuf: a recomputed forward's output (discarded) */
} run;

static void cpu_step(run *R, int64_t t) {
  fp_exec *x = R->x;
  acts *a = &R->a;
  int B = R->B;
  hook(x, FP_HOOK_STEP_BEGIN, -1);
  for (int64_t k = 0; k < R->ga; k++) {
    batch(a, R->seed, t, rank * R->ga + k, B);
    for (int m = 0; m < nlayers; m++) {
      const layer *l = &L[m];
      hook(x, FP_HOOK_PRE_FORWARD, l->module);
      if (R->r && k == 0) {
        check_gathered(R->r, l->w, t, "pre_forward");
        if (l->b >= 0) check_gathered(R->r, l->b, t, "pre_forward");
      }
      cast_n(R->wbuf, FP_ELEM_FP32, P[l->w].v.weight.data, P[l->w].param_dt, P[l->w].v.numel);
      if (l->b >= 0) cast_n(R->bbuf, FP_ELEM_FP32, P[l->b].v.weight.data, P[l->b].param_dt, l->out);
      layer_fwd(l, m == nlayers - 1, R->wbuf, l->b >= 0 ? R->bbuf : NULL, a->h[m], a->z[m], a->h[m + 1], B);
      hook(x, FP_HOOK_POST_FORWARD, l->module);
      /* recomputed in backward: keep only the input h[m] (the checkpoint) */
      if (l->recompute) memset(a->z[m], 0xff, (size_t)(B * l->out) * sizeof(float)); /* NaN */
    }
    loss_grad(a, B);
    for (int m = nlayers - 1; m >= 0; m--) {
      const layer *l = &L[m];
      hook(x, FP_HOOK_PRE_BACKWARD, l->module);
      const fp_param_view *w = &P[l->w].v, *b = l->b >= 0 ? &P[l->b].v : NULL;
      if (R->r && k == 0) check_gathered(R->r, l->w, t, "pre_backward");
      cast_n(R->wbuf, FP_ELEM_FP32, w->weight.data, P[l->w].param_dt, w->numel);
      if (l->recompute) { /* the forward again, from the saved input, on the weights pre_backward gathered */
        hook(x, FP_HOOK_PRE_FORWARD, l->module);
        if (l->b >= 0) cast_n(R->bbuf, FP_ELEM_FP32, b->weight.data, P[l->b].param_dt, l->out);
        layer_fwd(l, m == nlayers - 1, R->wbuf, l->b >= 0 ? R->bbuf : NULL, a->h[m], a->z[m], R->ybuf, B);
        hook(x, FP_HOOK_POST_FORWARD, l->module);
      }
      bool tw = w->requires_grad, tb = b && b->requires_grad;
      layer_bwd(l, m == nlayers - 1, R->wbuf, a->h[m], a->z[m], a->dh[m + 1], a->dz, tw ? R->gW : NULL,
                tb ? R->gb : NULL, m > 0 ? a->dh[m] : NULL, B);
      /* the backward accumulates into the unsharded grads (zeroed by pre_backward) */
      if (tw) add_n(w->ugrad.data, P[l->w].param_dt, R->gW, FP_ELEM_FP32, w->numel);
      if (tb) add_n(b->ugrad.data, P[l->b].param_dt, R->gb, FP_ELEM_FP32, b->numel);
      hook(x, FP_HOOK_POST_BACKWARD, l->module);
    }
  }
  hook(x, FP_HOOK_PRE_OPTIMIZER, -1);
  for (int32_t i = 0; i < nparams; i++)
    if (P[i].v.requires_grad && P[i].v.main.data)
      sgd(P[i].v.main.data, P[i].main_dt, P[i].v.grad.data, P[i].grad_dt, P[i].v.main.numel, R->lr);
  hook(x, FP_HOOK_POST_OPTIMIZER, -1);
}

/* ---- one step on the GPU (NCCL backend) ------------------------------------------------------ */
#ifdef FP_HAVE_CUDA
typedef struct gpu {
  float **h, **z, **dh; /* per layer boundary, as acts (h[0] unused: the micro-batch's input) */
  float *dz, *w, *b, *gW, *gb;
  float **in, **tg;     /* per micro-batch: input and target (uploaded before the step) */
  cudaGraph_t g;        /* --mode capture, step: the whole step */
  cudaGraphExec_t ge;
  bool have_graph;
  bool capturing;       /* inside the capture (the planted mistakes go there) */
  int64_t hooks_at_capture; /* --mode step: stats.hooks after the capture (replays call none) */
} gpu;

static float *dalloc(int64_t n) {
  void *p = NULL;
  CK(cudaMalloc(&p, (size_t)(n > 0 ? n : 1) * 4));
  CK(cudaMemset(p, 0, (size_t)(n > 0 ? n : 1) * 4));
  return p;
}

static void gpu_new(gpu *G, int B, int64_t ga, int64_t maxn) {
  memset(G, 0, sizeof *G);
  int64_t widest = L[0].in;
  for (int m = 0; m < nlayers; m++) widest = L[m].out > widest ? L[m].out : widest;
  G->h = xcalloc((size_t)nlayers + 1, sizeof *G->h);
  G->z = xcalloc((size_t)nlayers, sizeof *G->z);
  G->dh = xcalloc((size_t)nlayers + 1, sizeof *G->dh);
  G->dh[0] = dalloc((int64_t)B * L[0].in);
  for (int m = 0; m < nlayers; m++) {
    G->h[m + 1] = dalloc((int64_t)B * L[m].out);
    G->z[m] = dalloc((int64_t)B * L[m].out);
    G->dh[m + 1] = dalloc((int64_t)B * L[m].out);
  }
  G->dz = dalloc((int64_t)B * widest);
  G->w = dalloc(maxn), G->b = dalloc(maxn), G->gW = dalloc(maxn), G->gb = dalloc(maxn);
  G->in = xcalloc((size_t)ga, sizeof *G->in);
  G->tg = xcalloc((size_t)ga, sizeof *G->tg);
  for (int64_t k = 0; k < ga; k++) {
    G->in[k] = dalloc((int64_t)B * L[0].in);
    G->tg[k] = dalloc((int64_t)B * L[nlayers - 1].out);
  }
  /* dalloc's cudaMemset runs on the legacy stream and may return before it
   * ran: S (non-blocking) is not ordered after it, so the zeros could land
   * on what the first step wrote */
  CK(cudaDeviceSynchronize());
}

static void gpu_free(gpu *G, int64_t ga) {
  if (G->have_graph) {
    cudaGraphExecDestroy(G->ge);
    cudaGraphDestroy(G->g);
  }
  cudaFree(G->dh[0]);
  for (int m = 0; m < nlayers; m++) cudaFree(G->h[m + 1]), cudaFree(G->z[m]), cudaFree(G->dh[m + 1]);
  cudaFree(G->dz), cudaFree(G->w), cudaFree(G->b), cudaFree(G->gW), cudaFree(G->gb);
  for (int64_t k = 0; k < ga; k++) cudaFree(G->in[k]), cudaFree(G->tg[k]);
  free(G->h), free(G->z), free(G->dh), free(G->in), free(G->tg);
}

/* --plant sync, exec-sync, alloc: what a trainer must not do inside its
 * capture, done after the first layer's forward; the run goes on to the
 * next hook, which must fail with the executor's account of it (or, for
 * exec-sync, the refusal itself) */
static void plant_in_forward(fp_exec *x) {
  cudaError_t e = cudaSuccess;
  if (plant == PLANT_SYNC) e = cudaStreamSynchronize(S);
  if (plant == PLANT_ALLOC) {
    void *p = NULL;
    e = cudaMalloc(&p, 256);
    if (e == cudaSuccess) cudaFree(p);
  }
  if (plant == PLANT_EXEC_SYNC && fp_exec_sync(x) != FP_OK) DIE("planted fp_exec_sync: %s", fp_exec_errmsg(x));
  if (plant == PLANT_SYNC || plant == PLANT_ALLOC)
    fprintf(stderr, "train_mlp: rank %d: planted %s inside the capture: %s\n", rank,
            plant == PLANT_SYNC ? "cudaStreamSynchronize" : "cudaMalloc", cudaGetErrorString(e));
}

/* the step's hooks and the layers' kernels, all on S; checks need the
 * device idle (not while capturing) */
static void gpu_body(run *R, gpu *G, int64_t t, bool checks) {
  fp_exec *x = R->x;
  int B = R->B;
  hook(x, FP_HOOK_STEP_BEGIN, -1);
  for (int64_t k = 0; k < R->ga; k++) {
    for (int m = 0; m < nlayers; m++) {
      const layer *l = &L[m];
      const float *hin = m == 0 ? G->in[k] : G->h[m];
      hook(x, FP_HOOK_PRE_FORWARD, l->module);
      if (checks && k == 0) {
        check_gathered(R->r, l->w, t, "pre_forward");
        if (l->b >= 0) check_gathered(R->r, l->b, t, "pre_forward");
      }
      CK(mlpc_cast(G->w, FP_ELEM_FP32, P[l->w].v.weight.data, P[l->w].param_dt, P[l->w].v.numel, S));
      if (l->b >= 0) CK(mlpc_cast(G->b, FP_ELEM_FP32, P[l->b].v.weight.data, P[l->b].param_dt, l->out, S));
      CK(mlpc_fwd(G->w, l->b >= 0 ? G->b : NULL, hin, G->z[m], G->h[m + 1], l->in, l->out, B, m == nlayers - 1, S));
      if (G->capturing && m == 0 && k == 0) plant_in_forward(x);
      hook(x, FP_HOOK_POST_FORWARD, l->module);
    }
    CK(mlpc_loss_grad(G->h[nlayers], G->tg[k], G->dh[nlayers], (int64_t)B * L[nlayers - 1].out, B, S));
    for (int m = nlayers - 1; m >= 0; m--) {
      const layer *l = &L[m];
      const float *hin = m == 0 ? G->in[k] : G->h[m];
      hook(x, FP_HOOK_PRE_BACKWARD, l->module);
      const fp_param_view *w = &P[l->w].v, *b = l->b >= 0 ? &P[l->b].v : NULL;
      if (checks && k == 0) check_gathered(R->r, l->w, t, "pre_backward");
      CK(mlpc_cast(G->w, FP_ELEM_FP32, w->weight.data, P[l->w].param_dt, w->numel, S));
      bool tw = w->requires_grad, tb = b && b->requires_grad;
      CK(mlpc_dz(G->z[m], G->dh[m + 1], G->dz, (int64_t)B * l->out, m == nlayers - 1, S));
      if (tw) CK(mlpc_dW(G->dz, hin, G->gW, l->in, l->out, B, S));
      if (tb) CK(mlpc_db(G->dz, G->gb, l->out, B, S));
      if (m > 0) CK(mlpc_dh(G->dz, G->w, G->dh[m], l->in, l->out, B, S));
      if (tw) CK(mlpc_add(w->ugrad.data, P[l->w].param_dt, G->gW, FP_ELEM_FP32, w->numel, S));
      if (tb) CK(mlpc_add(b->ugrad.data, P[l->b].param_dt, G->gb, FP_ELEM_FP32, b->numel, S));
      hook(x, FP_HOOK_POST_BACKWARD, l->module);
    }
  }
  if (G->capturing && plant == PLANT_UNJOINED) return; /* planted: the optimizer left out of the graph */
  hook(x, FP_HOOK_PRE_OPTIMIZER, -1);
  for (int32_t i = 0; i < nparams; i++)
    if (P[i].v.requires_grad && P[i].v.main.data)
      CK(mlpc_sgd(P[i].v.main.data, (int)P[i].main_dt, P[i].v.grad.data, (int)P[i].grad_dt, P[i].v.main.numel, R->lr,
                  S));
  hook(x, FP_HOOK_POST_OPTIMIZER, -1);
}

static void gpu_step(run *R, gpu *G, int64_t t, fp_cuda_mode mode) {
  if (stream_mode == ST_SWITCH) { /* this step on the other stream, handed over before its first work */
    cudaStream_t next = S == S2 ? cudaStreamPerThread : S2;
    if (t == 0) next = S2;
    if (fp_exec_set_cuda_stream(R->x, next) != FP_OK) DIE("fp_exec_set_cuda_stream: %s", fp_exec_errmsg(R->x));
    S = next;
  }
  /* this step's micro-batches, uploaded before the step (a captured step
   * reads them at the same addresses), on S: after the previous step's
   * work, which may still be reading them (hooks do not wait for the
   * device); from pageable memory the copy is staged before it returns, so
   * the host buffer may be refilled at once */
  for (int64_t k = 0; k < R->ga; k++) {
    batch(&R->a, R->seed, t, rank * R->ga + k, R->B);
    cudaStream_t up = upload_unordered ? U : S;
    CK(cudaMemcpyAsync(G->in[k], R->a.h[0], (size_t)R->B * (size_t)L[0].in * 4, cudaMemcpyHostToDevice, up));
    CK(cudaMemcpyAsync(G->tg[k], R->a.t, (size_t)R->B * (size_t)L[nlayers - 1].out * 4, cudaMemcpyHostToDevice, up));
  }
  if (mode != FP_CUDA_CAPTURE_SAFE || t == 0) { /* hooks run; step 0 is the warm-up of every mode */
    gpu_body(R, G, t, R->r != NULL);
    return;
  }
  if (!G->have_graph && !step_api) { /* the whole step - hooks, layers, optimizer - as one graph */
    CK(cudaStreamBeginCapture(S, cudaStreamCaptureModeThreadLocal));
    gpu_body(R, G, t, false);
    CK(cudaStreamEndCapture(S, &G->g));
    CK(cudaGraphInstantiate(&G->ge, G->g, 0));
    G->have_graph = true;
  }
  if (!G->have_graph) { /* --mode step: the same through the executor's capture API, in global mode */
    fp_exec *x = R->x;
    fp_exec_stats s0, s1;
    CK(cudaStreamBeginCapture(S, cudaStreamCaptureModeGlobal));
    if (fp_exec_capture_begin(x) != FP_OK) DIE("fp_exec_capture_begin: %s", fp_exec_errmsg(x));
    fp_exec_get_stats(x, &s0);
    G->capturing = true;
    gpu_body(R, G, t, false);
    G->capturing = false;
    if (plant == PLANT_UNJOINED) { /* planted: the capture ends after the backward; fp_exec_capture_end refuses */
      if (fp_exec_capture_end(x) != FP_ERR_ORDER) DIE("fp_exec_capture_end inside a step was not refused");
      fprintf(stderr, "train_mlp: rank %d: fp_exec_capture_end refused: %s\n", rank, fp_exec_errmsg(x));
    } else if (fp_exec_capture_end(x) != FP_OK) {
      DIE("fp_exec_capture_end: %s", fp_exec_errmsg(x));
    }
    fp_exec_get_stats(x, &s1);
    if (s1.allocations != s0.allocations)
      FAIL("the executor allocated %" PRId64 " times inside the capture", s1.allocations - s0.allocations);
    cudaError_t e = cudaStreamEndCapture(S, &G->g);
    if (e != cudaSuccess) { /* the executor's next call says what happened to its side of the capture */
      fprintf(stderr, "train_mlp: rank %d: cudaStreamEndCapture: %s (%s)\n", rank, cudaGetErrorString(e),
              cudaGetErrorName(e));
      if (fp_exec_sync(x) != FP_OK) DIE("after the failed capture: %s", fp_exec_errmsg(x));
      DIE("cudaStreamEndCapture failed");
    }
    CK(cudaGraphInstantiate(&G->ge, G->g, 0));
    G->have_graph = true;
    G->hooks_at_capture = s1.hooks;
    if (fp_exec_capture_live(x) != 1) FAIL("fp_exec_capture_live: %" PRId64 ", expected 1", fp_exec_capture_live(x));
  }
  CK(cudaGraphLaunch(G->ge, S));
}

/* --mode step, after the last step: the replays called no hook; the graph
 * destroyed and released before the executor is */
static void gpu_release(fp_exec *x, gpu *G) {
  if (!step_api || !G->have_graph) return;
  fp_exec_stats s;
  fp_exec_get_stats(x, &s);
  if (s.hooks != G->hooks_at_capture) FAIL("%" PRId64 " hooks ran during the replays", s.hooks - G->hooks_at_capture);
  CK(cudaGraphExecDestroy(G->ge));
  CK(cudaGraphDestroy(G->g));
  G->have_graph = false;
  if (fp_exec_capture_release(x) != FP_OK) DIE("fp_exec_capture_release: %s", fp_exec_errmsg(x));
  if (fp_exec_capture_live(x) != 0) FAIL("fp_exec_capture_live after the release: %" PRId64, fp_exec_capture_live(x));
}
#endif

/* ---- the run ------------------------------------------------------------------------------------ */
static void dump(const char *prefix) {
  char path[1024];
  snprintf(path, sizeof path, "%s.rank%d.safetensors", prefix, rank);
  st_tensor *ts = xcalloc((size_t)nparams, sizeof *ts);
  int64_t *sizes = xcalloc((size_t)nparams, sizeof *sizes);
  void **copies = xcalloc((size_t)nparams, sizeof *copies);
  for (int32_t i = 0; i < nparams; i++) {
    const fp_tensor *m = &P[i].v.main;
    sizes[i] = m->numel * fp_elem_size(m->dtype);
    copies[i] = xcalloc((size_t)sizes[i], 1);
    if (sizes[i]) memcpy(copies[i], host_of(m, 0), (size_t)sizes[i]);
    ts[i] = (st_tensor){.name = P[i].v.name, .dtype = "U8", .ndim = 1, .shape = &sizes[i], .data = copies[i],
                        .bytes = sizes[i]};
  }
  st_write(path, nparams, ts);
  for (int32_t i = 0; i < nparams; i++) free(copies[i]);
  free(copies), free(ts), free(sizes);
}

/* the command line */
typedef struct opts {
  const char *plan, *dump, *timing;
  long steps, B, refit_at;
  unsigned long long seed;
  float lr;
  bool check, nccl;
  fp_progress progress;
  fp_cuda_mode mode;
} opts;

/* an option that takes a number or a path: true when a is one (its value
 * parsed from v, *end where strtol and friends stopped) */
static bool value_option(opts *o, const char *a, const char *v, char **end) {
  if (!strcmp(a, "--plan")) o->plan = v;
  else if (!strcmp(a, "--steps")) o->steps = strtol(v, end, 10);
  else if (!strcmp(a, "--seed")) o->seed = strtoull(v, end, 10);
  else if (!strcmp(a, "--lr")) o->lr = strtof(v, end);
  else if (!strcmp(a, "--batch")) o->B = strtol(v, end, 10);
  else if (!strcmp(a, "--refit-at")) o->refit_at = strtol(v, end, 10);
  else if (!strcmp(a, "--dump")) o->dump = v;
  else if (!strcmp(a, "--timing")) o->timing = v;
  else return false;
  return true;
}

/* an option that takes one of a few words: true when a is one and v is one of its words */
static bool choice_option(opts *o, const char *a, const char *v) {
  if (!strcmp(a, "--progress") && (!strcmp(v, "poll") || !strcmp(v, "thread")))
    o->progress = !strcmp(v, "poll") ? FP_PROGRESS_POLL : FP_PROGRESS_THREAD;
  else if (!strcmp(a, "--backend") && (!strcmp(v, "mpi") || !strcmp(v, "nccl"))) o->nccl = !strcmp(v, "nccl");
  else if (!strcmp(a, "--mode") && !strcmp(v, "graph")) o->mode = FP_CUDA_GRAPH;
  else if (!strcmp(a, "--mode") && !strcmp(v, "eager")) o->mode = FP_CUDA_EAGER;
  else if (!strcmp(a, "--mode") && !strcmp(v, "capture")) o->mode = FP_CUDA_CAPTURE_SAFE;
  else if (!strcmp(a, "--mode") && !strcmp(v, "step")) o->mode = FP_CUDA_CAPTURE_SAFE, step_api = true;
  else if (!strcmp(a, "--plant") && plant_of(v) > 0) plant = plant_of(v);
  else if (!strcmp(a, "--stream") && stream_mode_of(v) >= 0) stream_mode = stream_mode_of(v);
  else if (!strcmp(a, "--upload") && (!strcmp(v, "ordered") || !strcmp(v, "unordered")))
    upload_unordered = !strcmp(v, "unordered");
  else return false;
  return true;
}

/* usage() on anything wrong */
static opts parse_args(int argc, char **argv) {
  opts o = {.steps = -1, .B = 4, .refit_at = -1, .seed = 1, .lr = 0.1f, .progress = FP_PROGRESS_DEFAULT,
            .mode = FP_CUDA_GRAPH};
  for (int k = 1; k < argc; k++) {
    const char *a = argv[k], *v = k + 1 < argc ? argv[k + 1] : NULL;
    char *end = NULL;
    errno = 0;
    if (!strcmp(a, "--check")) o.check = true;
    else if (!v) usage();
    else if (value_option(&o, a, v, &end) || choice_option(&o, a, v)) k++;
    else usage();
    if (end && (*end || errno)) usage();
  }
  if (!o.plan || o.steps < 0 || o.B < 1 || o.B > 4096 || !(o.lr > 0) || (o.nccl && o.progress != FP_PROGRESS_DEFAULT))
    usage();
  if (plant && !step_api) DIE("--plant goes with --mode step");
  if (o.mode == FP_CUDA_CAPTURE_SAFE && stream_mode != ST_SIDE && stream_mode != ST_EXECUTOR)
    DIE("--mode capture captures the trainer's stream: --stream side or executor (the legacy stream cannot be "
        "captured, and a captured step cannot move between streams)");
  return o;
}

/* the executor's configuration; with --backend nccl: the device, the
 * trainer's streams and the one the executor is told (--stream). Exits 77
 * without a CUDA device, 2 in a build without CUDA. */
static fp_exec_config exec_config(const opts *o) {
  fp_exec_config cfg = {.backend = FP_BACKEND_MPI, .rank = rank, .world_size = world, .progress = o->progress};
  if (!o->nccl) return cfg;
#ifdef FP_HAVE_CUDA
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev < 1) {
    if (rank == 0)
      printf("train_mlp: SKIPPED: no CUDA device (cudaGetDeviceCount: %s)\n", e ? cudaGetErrorString(e) : "0 devices");
    MPI_Finalize();
    exit(77);
  }
  CK(cudaSetDevice(rank % ndev));
  CK(cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&S2, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&U, cudaStreamNonBlocking));
  on_gpu = true;
  void *given = S;
  if (stream_mode == ST_LEGACY || stream_mode == ST_LEGACY_UNTOLD) S = cudaStreamLegacy;
  if (stream_mode == ST_LEGACY) given = FP_CUDA_STREAM_LEGACY;
  if (stream_mode == ST_EXECUTOR || stream_mode == ST_LEGACY_UNTOLD) given = NULL;
  return (fp_exec_config){.backend = FP_BACKEND_NCCL, .rank = rank, .world_size = world, .cuda_mode = o->mode,
                          .cuda_stream = given};
#else
  if (rank == 0) fprintf(stderr, "train_mlp: --backend nccl: flexplan was built without CUDA\n");
  MPI_Finalize();
  exit(2);
#endif
}

/* the trainer's buffers for a run of the options, on x (maxn: the largest
 * view's elements) */
static run run_new(fp_exec *x, const ref *r, const opts *o, int64_t maxn) {
  run R = {.x = x, .r = r, .seed = o->seed, .B = (int)o->B, .lr = o->lr, .ga = info.grad_accumulation,
           .a = acts_new((int)o->B)};
  R.wbuf = xcalloc((size_t)maxn, 4), R.bbuf = xcalloc((size_t)maxn, 4), R.gW = xcalloc((size_t)maxn, 4);
  R.gb = xcalloc((size_t)maxn, 4);
  int64_t widest = 1;
  for (int m = 0; m < nlayers; m++) widest = L[m].out > widest ? L[m].out : widest;
  R.ybuf = xcalloc((size_t)(o->B * widest), 4);
  return R;
}

static void run_free(run *R) {
  acts_free(&R->a);
  free(R->wbuf), free(R->bbuf), free(R->gW), free(R->gb), free(R->ybuf);
}

/* --refit-at: new weights (another seed) into the same addresses before
 * step t, and into the reference */
static void refit(fp_exec *x, ref *r, float **init, const opts *o, int64_t t) {
  for (int32_t i = 0; i < nparams; i++) {
    free(init[i]);
    init[i] = init_weights(o->seed + 7919 * (uint64_t)t, i, fan_in_of(i));
  }
  load_initial(x, init);
  for (int32_t i = 0; i < nparams; i++) {
    fp_param_view v;
    fp_exec_param_at(x, i, &v);
    if (v.weight.data != P[i].v.weight.data || v.ugrad.data != P[i].v.ugrad.data ||
        v.main.data != P[i].v.main.data || v.grad.data != P[i].v.grad.data)
      FAIL("refit at step %" PRId64 " moved a view of %s", t, P[i].v.name);
    if (r) cast_n(r->main[i], P[i].main_dt, init[i], FP_ELEM_FP32, P[i].v.numel);
  }
}

/* the executor's counters after the run: no allocation inside a hook, and
 * graphs exactly in graph mode, at most one launch per hook (hooks0: the
 * hooks of the warm-up step, which launches none) */
static void check_stats(const fp_exec_stats *s, const opts *o, int64_t hooks0) {
  if (s->hook_allocations) FAIL("%" PRId64 " allocations inside hooks", s->hook_allocations);
  if (on_gpu && o->mode == FP_CUDA_GRAPH && o->steps >= 2 && (s->graphs < 1 || s->graph_launches < 1))
    FAIL("graph mode ran %ld steps but captured %" PRId64 " graphs and launched %" PRId64, o->steps, s->graphs,
         s->graph_launches);
  if (on_gpu && o->mode == FP_CUDA_GRAPH && (s->graph_launches > s->hooks - hooks0 || s->graphs > info.nsegments))
    FAIL("graph mode: %" PRId64 " graph launches for %" PRId64 " hooks after the warm-up, %" PRId64 " graphs for %"
         PRId32 " segments (at most one each)", s->graph_launches, s->hooks - hooks0, s->graphs, info.nsegments);
  if (on_gpu && o->mode != FP_CUDA_GRAPH && s->graphs) FAIL("%" PRId64 " graphs captured outside graph mode", s->graphs);
}

/* every rank's failures and differences, summed on rank 0, which prints
 * the summary; returns whether any rank failed */
static bool report(const opts *o, const fp_exec_stats *s) {
  int any = 0;
  double amax = 0, rmax = 0;
  MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Reduce(&max_abs, &amax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&max_rel, &rmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank != 0) return any != 0;
  const char *how = !on_gpu                         ? (s->progress == FP_PROGRESS_THREAD ? "mpi, progress thread" : "mpi, progress poll")
                    : o->mode == FP_CUDA_GRAPH ? "nccl, graph mode"
                    : o->mode == FP_CUDA_EAGER ? "nccl, eager mode"
                    : step_api                 ? "nccl, one graph per step (fp_exec_capture_begin/end)"
                                               : "nccl, whole steps captured by the trainer";
  printf("train_mlp: %s (%s, %" PRId64 " ranks, %" PRId64 " micro-batch(es)), %ld step(s), %s: %s\n", info.model,
         info.strategy, info.world_size, info.grad_accumulation, o->steps, how,
         !o->check ? "trained" : any ? "CHECK FAILED" : "matches the reference");
  if (on_gpu)
    printf("train_mlp: %" PRId64 " graphs (%" PRId64 " nodes), %" PRId64 " graph launches for %" PRId64
           " hooks, %" PRId64 " NCCL communicators\n", s->graphs, s->graph_nodes, s->graph_launches, s->hooks,
           s->nccl_comms);
  if (o->check)
    printf("train_mlp: max |w - ref| = %.3g, max relative = %.3g (weights above 1e-3); gathered weights bit-exact: %s\n",
           amax, rmax, any ? "see errors" : "yes");
  return any != 0;
}

int main(int argc, char **argv) {
  int level;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  opts o = parse_args(argc, argv);
  fp_exec_config cfg = exec_config(&o);

  fp_plan *plan = NULL;
  if (fp_plan_load(o.plan, &plan) != FP_OK) DIE("%s", fp_plan_errmsg(plan));
  fp_plan_get_info(plan, &info);
  fp_exec *x = NULL;
  fp_status st = fp_exec_create(plan, &cfg, &x);
  if (st != FP_OK) DIE("%s: %s", fp_status_name(st), fp_exec_errmsg(x));
#ifdef FP_HAVE_CUDA
  if (on_gpu && stream_mode == ST_EXECUTOR) S = fp_exec_cuda_stream(x);
#endif
  build_model(x, plan);
  if (o.timing && o.steps > 0 && fp_exec_timing_start(x, (int32_t)(o.steps < 65536 ? o.steps : 65536)) != FP_OK)
    DIE("timing: %s", fp_exec_errmsg(x));
  int64_t maxn = 1;
  for (int32_t i = 0; i < nparams; i++) {
    maxn = P[i].v.numel > maxn ? P[i].v.numel : maxn;
    maxn = P[i].v.main.numel > maxn ? P[i].v.main.numel : maxn;
  }
  hview[0] = xcalloc((size_t)maxn, 4);
  hview[1] = xcalloc((size_t)maxn, 4);
  float **init = xcalloc((size_t)nparams, sizeof *init);
  for (int32_t i = 0; i < nparams; i++) init[i] = init_weights(o.seed, i, fan_in_of(i));
  load_initial(x, init);
  ref r = {0};
  if (o.check) r = ref_new(init);

  int64_t ga = info.grad_accumulation;
  run R = run_new(x, o.check ? &r : NULL, &o, maxn);
  if (on_gpu)
    for (int m = 0; m < nlayers; m++)
      if (L[m].tied || L[m].recompute)
        DIE("--backend nccl: module '%s' is tied or recomputed; the GPU trainer runs plain layers only",
            fp_plan_module_name(plan, m));
#ifdef FP_HAVE_CUDA
  gpu G;
  if (on_gpu) gpu_new(&G, (int)o.B, ga, maxn);
#endif
  int64_t hooks0 = 0; /* hooks of step 0 */
  for (int64_t t = 0; t < o.steps; t++) {
    if (t == o.refit_at && t > 0) refit(x, o.check ? &r : NULL, init, &o, t);
#ifdef FP_HAVE_CUDA
    if (on_gpu) gpu_step(&R, &G, t, o.mode);
    else
#endif
      cpu_step(&R, t);
    if (t == 0) {
      fp_exec_stats s0;
      fp_exec_get_stats(x, &s0);
      hooks0 = s0.hooks;
    }
    if (o.check) {
      ref_step(&r, o.seed, t, (int)o.B, o.lr, ga);
      check_main(&r, t);
    }
  }
  if (fp_exec_sync(x) != FP_OK) DIE("sync: %s", fp_exec_errmsg(x));
  if (o.dump) dump(o.dump);
  if (o.timing) { /* every step's measured times: PREFIX<rank>.json */
    char path[4096];
    snprintf(path, sizeof path, "%s%d.json", o.timing, rank);
    if (fp_exec_timing_write(x, path) != FP_OK) DIE("timing: %s", fp_exec_errmsg(x));
  }
#ifdef FP_HAVE_CUDA
  if (on_gpu) gpu_release(x, &G);
#endif
  fp_exec_stats s;
  fp_exec_get_stats(x, &s);
  check_stats(&s, &o, hooks0);
  fp_exec_destroy(x);
  bool any = report(&o, &s);

  for (int32_t i = 0; i < nparams; i++) free(init[i]);
  free(init);
  if (o.check) ref_free(&r);
#ifdef FP_HAVE_CUDA
  if (on_gpu) {
    gpu_free(&G, ga);
    cudaStreamDestroy(S2);
    cudaStreamDestroy(U);
    if (stream_mode == ST_SIDE) cudaStreamDestroy(S);
  }
#endif
  run_free(&R);
  free(L), free(P), free(hview[0]), free(hview[1]);
  fp_plan_free(plan);
  MPI_Finalize();
  return any ? 1 : 0;
}
