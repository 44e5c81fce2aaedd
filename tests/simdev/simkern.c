/* simkern.c - the kernels' launchers on the simulated device: each
 * fpk_cuda_* of kernels/kernels_cuda.h enqueues the C reference of the same
 * name (kernels/ref.c) on its stream, and train_mlp's layers and element
 * casts and adds (mlpc_* of examples/mlp_cuda.h) enqueue the CPU trainer's
 * arithmetic (examples/mlp_math.h, the example's own conversions), so a
 * simulated run computes the bits a GPU run does. Pointers are checked and translated when the work runs (sd_dev): a
 * kernel that touches memory that is neither device memory nor pinned host
 * memory is an illegal address. Argument errors are reported at launch as
 * the CUDA launchers report them (cudaErrorInvalidValue, nothing queued). */
#include <string.h>

#include "examples/mlp_cuda.h"
#include "examples/mlp_math.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"
#include "simdev.h"

typedef struct karg {
  int op;
  void *dst, *aux;
  const void *src, *src2;
  fp_dtype dt, st;
  int64_t n, dpitch, spitch, width, rows;
  double alpha;
} karg;

enum { K_CAST, K_ADD, K_SCALE, K_MEMSET, K_COPY2D, K_QUANT, K_SCALES, K_QUANT_SCALED, K_MAXU8, K_DEQUANT };

static bool float_dt(fp_dtype t) { return t == FP_F32 || t == FP_BF16 || t == FP_F16; }
static bool cast_dt(fp_dtype t) { return float_dt(t) || t == FP_E4M3; }
static int64_t sz(fp_dtype t) { return fpi_dtype_size(t); }

static void krun(void *a) {
  karg *k = a;
  int64_t n = k->n, ns = fpk_mx_nscales(n);
  switch (k->op) {
    case K_CAST: {
      void *d = sd_dev(k->dst, (size_t)(n * sz(k->dt)));
      const void *s = sd_dev(k->src, (size_t)(n * sz(k->st)));
      if (d && s) fpk_cast(d, k->dt, s, k->st, n);
      break;
    }
    case K_ADD: {
      void *d = sd_dev(k->dst, (size_t)(n * sz(k->dt)));
      const void *s = sd_dev(k->src, (size_t)(n * sz(k->st)));
      if (d && s) fpk_add(d, k->dt, s, k->st, n);
      break;
    }
    case K_SCALE: {
      void *d = sd_dev(k->dst, (size_t)(n * sz(k->dt)));
      if (d) fpk_scale(d, k->dt, k->alpha, n);
      break;
    }
    case K_MEMSET: {
      void *d = sd_dev(k->dst, (size_t)n);
      if (d) memset(d, 0, (size_t)n);
      break;
    }
    case K_COPY2D: {
      size_t dspan = (size_t)((k->rows - 1) * k->dpitch + k->width), sspan = (size_t)((k->rows - 1) * k->spitch + k->width);
      char *d = sd_dev(k->dst, dspan);
      const char *s = sd_dev(k->src, sspan);
      if (d && s)
        for (int64_t r = 0; r < k->rows; r++) memmove(d + r * k->dpitch, s + r * k->spitch, (size_t)k->width);
      break;
    }
    case K_QUANT: {
      uint8_t *d = sd_dev(k->dst, (size_t)n), *sc = sd_dev(k->aux, (size_t)ns);
      const void *s = sd_dev(k->src, (size_t)(n * sz(k->st)));
      if (d && sc && s) fpk_quantize_mxfp8(d, sc, s, k->st, n);
      break;
    }
    case K_SCALES: {
      uint8_t *sc = sd_dev(k->dst, (size_t)ns);
      const void *s = sd_dev(k->src, (size_t)(n * sz(k->st)));
      if (sc && s) fpk_mxfp8_scales(sc, s, k->st, n);
      break;
    }
    case K_QUANT_SCALED: {
      uint8_t *d = sd_dev(k->dst, (size_t)n);
      const uint8_t *sc = sd_dev(k->src2, (size_t)ns);
      const void *s = sd_dev(k->src, (size_t)(n * sz(k->st)));
      if (d && sc && s) fpk_quantize_mxfp8_scaled(d, sc, s, k->st, n);
      break;
    }
    case K_MAXU8: {
      uint8_t *d = sd_dev(k->dst, (size_t)n);
      const uint8_t *x = sd_dev(k->src, (size_t)n), *y = sd_dev(k->src2, (size_t)n);
      if (d && x && y) fpk_max_u8(d, x, y, n);
      break;
    }
    case K_DEQUANT: {
      void *d = sd_dev(k->dst, (size_t)(n * sz(k->dt)));
      const uint8_t *s = sd_dev(k->src, (size_t)n), *sc = sd_dev(k->src2, (size_t)ns);
      if (d && s && sc) fpk_dequantize_mxfp8(d, k->dt, s, sc, n);
      break;
    }
  }
}

static cudaError_t launch(karg k, cudaStream_t s) {
  if (k.n == 0 && k.op != K_COPY2D) return cudaSuccess;
  sd_enter();
  cudaError_t e = sd_launch(s, krun, &k, sizeof k);
  sd_unlock();
  return e;
}

cudaError_t fpk_cuda_cast(void *dst, fp_dtype dt, const void *src, fp_dtype st, int64_t n, cudaStream_t s) {
  if (n < 0 || !cast_dt(dt) || !cast_dt(st)) return cudaErrorInvalidValue;
  if (dst == src && dt == st) return cudaSuccess;
  return launch((karg){.op = K_CAST, .dst = dst, .src = src, .dt = dt, .st = st, .n = n}, s);
}
cudaError_t fpk_cuda_add(void *dst, fp_dtype dt, const void *src, fp_dtype st, int64_t n, cudaStream_t s) {
  if (n < 0 || !float_dt(dt) || !float_dt(st)) return cudaErrorInvalidValue;
  return launch((karg){.op = K_ADD, .dst = dst, .src = src, .dt = dt, .st = st, .n = n}, s);
}
cudaError_t fpk_cuda_scale(void *dst, fp_dtype dt, double alpha, int64_t n, cudaStream_t s) {
  if (n < 0 || !float_dt(dt)) return cudaErrorInvalidValue;
  return launch((karg){.op = K_SCALE, .dst = dst, .dt = dt, .alpha = alpha, .n = n}, s);
}
cudaError_t fpk_cuda_memset0(void *dst, int64_t bytes, cudaStream_t s) {
  if (bytes < 0) return cudaErrorInvalidValue;
  return launch((karg){.op = K_MEMSET, .dst = dst, .n = bytes}, s);
}
cudaError_t fpk_cuda_copy2d(void *dst, int64_t dpitch, const void *src, int64_t spitch, int64_t width, int64_t rows,
                            cudaStream_t s) {
  if (rows < 1 || width < 0 || dpitch < 0 || spitch < 0) return cudaErrorInvalidValue;
  if (width == 0) return cudaSuccess;
  return launch((karg){.op = K_COPY2D, .dst = dst, .src = src, .dpitch = dpitch, .spitch = spitch, .width = width,
                       .rows = rows, .n = width * rows}, s);
}
cudaError_t fpk_cuda_quantize_mxfp8(uint8_t *dst, uint8_t *scales, const void *src, fp_dtype st, int64_t n,
                                    cudaStream_t s) {
  if (n < 0 || !float_dt(st)) return cudaErrorInvalidValue;
  return launch((karg){.op = K_QUANT, .dst = dst, .aux = scales, .src = src, .st = st, .n = n}, s);
}
cudaError_t fpk_cuda_mxfp8_scales(uint8_t *scales, const void *src, fp_dtype st, int64_t n, cudaStream_t s) {
  if (n < 0 || !float_dt(st)) return cudaErrorInvalidValue;
  return launch((karg){.op = K_SCALES, .dst = scales, .src = src, .st = st, .n = n}, s);
}
cudaError_t fpk_cuda_quantize_mxfp8_scaled(uint8_t *dst, const uint8_t *scales, const void *src, fp_dtype st,
                                           int64_t n, cudaStream_t s) {
  if (n < 0 || !float_dt(st)) return cudaErrorInvalidValue;
  return launch((karg){.op = K_QUANT_SCALED, .dst = dst, .src2 = scales, .src = src, .st = st, .n = n}, s);
}
cudaError_t fpk_cuda_max_u8(uint8_t *dst, const uint8_t *a, const uint8_t *b, int64_t n, cudaStream_t s) {
  if (n < 0) return cudaErrorInvalidValue;
  return launch((karg){.op = K_MAXU8, .dst = dst, .src = a, .src2 = b, .n = n}, s);
}
cudaError_t fpk_cuda_dequantize_mxfp8(void *dst, fp_dtype dt, const uint8_t *src, const uint8_t *scales, int64_t n,
                                      cudaStream_t s) {
  if (n < 0 || !float_dt(dt)) return cudaErrorInvalidValue;
  return launch((karg){.op = K_DEQUANT, .dst = dst, .dt = dt, .src = src, .src2 = scales, .n = n}, s);
}

/* ---- train_mlp's layers (examples/mlp_cuda.cu's kernels, on the host) ---- */
typedef struct marg {
  int op;
  const float *W, *b, *h, *z, *dy, *dz, *y, *t;
  float *zo, *yo, *out;
  void *main;
  const void *grad;
  int mdt, gdt, B; /* mdt, gdt: fp_elem codes (M_SGD's main and grad; M_CAST's and M_ADD's dst and src) */
  int64_t in, outn, n;
  bool last;
  float lr;
} marg;
enum { M_FWD, M_DZ, M_DW, M_DB, M_DH, M_LOSS, M_SGD, M_CAST, M_ADD };

#define F(p, cnt) ((float *)sd_dev((p), (size_t)(cnt) * 4))

/* the bytes of n elements of fp_elem dtype t */
static size_t elem_bytes(int t, int64_t n) { return (size_t)n * (t == FP_ELEM_FP32 ? 4u : 2u); }
static bool float_elem(int t) { return t == FP_ELEM_FP32 || t == FP_ELEM_BF16 || t == FP_ELEM_FP16; }

static void mrun(void *a) {
  marg *m = a;
  int64_t in = m->in, out = m->outn, B = m->B;
  switch (m->op) {
    case M_FWD: {
      const float *W = F(m->W, out * in), *b = m->b ? F(m->b, out) : NULL, *h = F(m->h, B * in);
      float *z = F(m->zo, B * out), *y = F(m->yo, B * out);
      if (!W || !h || !z || !y || (m->b && !b)) return;
      for (int64_t idx = 0; idx < B * out; idx++) {
        int64_t s = idx / out, o = idx % out;
        float acc = b ? b[o] : 0.0f;
        for (int64_t k = 0; k < in; k++) acc = MLP_ADD(acc, MLP_MUL(W[o * in + k], h[s * in + k]));
        z[idx] = acc;
        y[idx] = m->last ? acc : mlp_act(acc);
      }
      break;
    }
    case M_DZ: {
      const float *z = F(m->z, m->n), *dy = F(m->dy, m->n);
      float *dz = F(m->out, m->n);
      if (!z || !dy || !dz) return;
      for (int64_t k = 0; k < m->n; k++) dz[k] = m->last ? dy[k] : MLP_MUL(dy[k], mlp_dact(z[k]));
      break;
    }
    case M_DW: {
      const float *dz = F(m->dz, B * out), *h = F(m->h, B * in);
      float *dW = F(m->out, out * in);
      if (!dz || !h || !dW) return;
      for (int64_t idx = 0; idx < out * in; idx++) {
        int64_t o = idx / in, k = idx % in;
        float acc = 0.0f;
        for (int64_t s = 0; s < B; s++) acc = MLP_ADD(acc, MLP_MUL(dz[s * out + o], h[s * in + k]));
        dW[idx] = acc;
      }
      break;
    }
    case M_DB: {
      const float *dz = F(m->dz, B * out);
      float *db = F(m->out, out);
      if (!dz || !db) return;
      for (int64_t o = 0; o < out; o++) {
        float acc = 0.0f;
        for (int64_t s = 0; s < B; s++) acc = MLP_ADD(acc, dz[s * out + o]);
        db[o] = acc;
      }
      break;
    }
    case M_DH: {
      const float *dz = F(m->dz, B * out), *W = F(m->W, out * in);
      float *dh = F(m->out, B * in);
      if (!dz || !W || !dh) return;
      for (int64_t idx = 0; idx < B * in; idx++) {
        int64_t s = idx / in, k = idx % in;
        float acc = 0.0f;
        for (int64_t o = 0; o < out; o++) acc = MLP_ADD(acc, MLP_MUL(dz[s * out + o], W[o * in + k]));
        dh[idx] = acc;
      }
      break;
    }
    case M_LOSS: {
      const float *y = F(m->y, m->n), *t = F(m->t, m->n);
      float *dy = F(m->out, m->n);
      if (!y || !t || !dy) return;
      for (int64_t k = 0; k < m->n; k++) dy[k] = MLP_DIV(MLP_SUB(y[k], t[k]), (float)B);
      break;
    }
    case M_SGD: {
      void *mw = sd_dev(m->main, elem_bytes(m->mdt, m->n));
      const void *g = sd_dev(m->grad, elem_bytes(m->gdt, m->n));
      if (!mw || !g) return;
      for (int64_t k = 0; k < m->n; k++)
        mlp_put(mw, m->mdt, k, MLP_SUB(mlp_get(mw, m->mdt, k), MLP_MUL(m->lr, mlp_get(g, m->gdt, k))));
      break;
    }
    case M_CAST:
    case M_ADD: {
      void *d = sd_dev(m->main, elem_bytes(m->mdt, m->n));
      const void *src = sd_dev(m->grad, elem_bytes(m->gdt, m->n));
      if (!d || !src) return;
      for (int64_t k = 0; k < m->n; k++)
        if (m->op == M_CAST) mlp_cast1(d, m->mdt, src, m->gdt, k);
        else mlp_add1(d, m->mdt, src, m->gdt, k);
      break;
    }
  }
}

static cudaError_t mlaunch(marg m, cudaStream_t s) {
  sd_enter();
  cudaError_t e = sd_launch(s, mrun, &m, sizeof m);
  sd_unlock();
  return e;
}

cudaError_t mlpc_fwd(const float *W, const float *b, const float *h, float *z, float *y, int64_t in, int64_t out, int B,
                     bool last, cudaStream_t s) {
  return mlaunch((marg){.op = M_FWD, .W = W, .b = b, .h = h, .zo = z, .yo = y, .in = in, .outn = out, .B = B,
                        .last = last}, s);
}
cudaError_t mlpc_dz(const float *z, const float *dy, float *dz, int64_t n, bool last, cudaStream_t s) {
  return mlaunch((marg){.op = M_DZ, .z = z, .dy = dy, .out = dz, .n = n, .last = last}, s);
}
cudaError_t mlpc_dW(const float *dz, const float *h, float *dW, int64_t in, int64_t out, int B, cudaStream_t s) {
  return mlaunch((marg){.op = M_DW, .dz = dz, .h = h, .out = dW, .in = in, .outn = out, .B = B}, s);
}
cudaError_t mlpc_db(const float *dz, float *db, int64_t out, int B, cudaStream_t s) {
  return mlaunch((marg){.op = M_DB, .dz = dz, .out = db, .outn = out, .B = B}, s);
}
cudaError_t mlpc_dh(const float *dz, const float *W, float *dh, int64_t in, int64_t out, int B, cudaStream_t s) {
  return mlaunch((marg){.op = M_DH, .dz = dz, .W = W, .out = dh, .in = in, .outn = out, .B = B}, s);
}
cudaError_t mlpc_loss_grad(const float *y, const float *t, float *dy, int64_t n, int B, cudaStream_t s) {
  return mlaunch((marg){.op = M_LOSS, .y = y, .t = t, .out = dy, .n = n, .B = B}, s);
}
cudaError_t mlpc_sgd(void *main, int main_dt, const void *grad, int grad_dt, int64_t n, float lr, cudaStream_t s) {
  if (!float_elem(main_dt) || !float_elem(grad_dt)) return cudaErrorInvalidValue;
  if (n <= 0) return cudaSuccess;
  return mlaunch((marg){.op = M_SGD, .main = main, .mdt = main_dt, .grad = grad, .gdt = grad_dt, .n = n, .lr = lr}, s);
}
cudaError_t mlpc_cast(void *dst, int dt, const void *src, int st, int64_t n, cudaStream_t s) {
  if (!float_elem(dt) || !float_elem(st)) return cudaErrorInvalidValue;
  if (n <= 0 || (dst == src && dt == st)) return cudaSuccess;
  return mlaunch((marg){.op = M_CAST, .main = dst, .mdt = dt, .grad = src, .gdt = st, .n = n}, s);
}
cudaError_t mlpc_add(void *dst, int dt, const void *src, int st, int64_t n, cudaStream_t s) {
  if (!float_elem(dt) || !float_elem(st)) return cudaErrorInvalidValue;
  if (n <= 0) return cudaSuccess;
  return mlaunch((marg){.op = M_ADD, .main = dst, .mdt = dt, .grad = src, .gdt = st, .n = n}, s);
}
