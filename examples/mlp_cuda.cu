/* mlp_cuda.cu - train_mlp's layers on the GPU (mlp_cuda.h): simple kernels,
 * one thread per output, the CPU trainer's loops and operations exactly
 * (mlp_math.h), so the NCCL run of a plan can be compared with the MPI run
 * bit for bit. Speed is not the point: the sizes are a test's. */
#include "examples/mlp_cuda.h"
#include "examples/mlp_math.h"

#define THREADS 128
static unsigned blocks(int64_t n) {
  int64_t b = (n + THREADS - 1) / THREADS;
  return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}
#define LOOP(i, n) for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_fwd(const float *W, const float *b, const float *h, float *z, float *y, int64_t in, int64_t out,
                      int B, bool last) {
  LOOP(idx, (int64_t)B * out) {
    int64_t s = idx / out, o = idx % out;
    float acc = b ? b[o] : 0.0f;
    for (int64_t k = 0; k < in; k++) acc = MLP_ADD(acc, MLP_MUL(W[o * in + k], h[s * in + k]));
    z[idx] = acc;
    y[idx] = last ? acc : mlp_act(acc);
  }
}

__global__ void k_dz(const float *z, const float *dy, float *dz, int64_t n, bool last) {
  LOOP(k, n) dz[k] = last ? dy[k] : MLP_MUL(dy[k], mlp_dact(z[k]));
}

__global__ void k_dW(const float *dz, const float *h, float *dW, int64_t in, int64_t out, int B) {
  LOOP(idx, out * in) {
    int64_t o = idx / in, k = idx % in;
    float acc = 0.0f;
    for (int s = 0; s < B; s++) acc = MLP_ADD(acc, MLP_MUL(dz[s * out + o], h[s * in + k]));
    dW[idx] = acc;
  }
}

__global__ void k_db(const float *dz, float *db, int64_t out, int B) {
  LOOP(o, out) {
    float acc = 0.0f;
    for (int s = 0; s < B; s++) acc = MLP_ADD(acc, dz[s * out + o]);
    db[o] = acc;
  }
}

__global__ void k_dh(const float *dz, const float *W, float *dh, int64_t in, int64_t out, int B) {
  LOOP(idx, (int64_t)B * in) {
    int64_t s = idx / in, k = idx % in;
    float acc = 0.0f;
    for (int64_t o = 0; o < out; o++) acc = MLP_ADD(acc, MLP_MUL(dz[s * out + o], W[o * in + k]));
    dh[idx] = acc;
  }
}

__global__ void k_loss(const float *y, const float *t, float *dy, int64_t n, int B) {
  LOOP(k, n) dy[k] = MLP_DIV(MLP_SUB(y[k], t[k]), (float)B);
}

__global__ void k_sgd(void *main, int mdt, const void *grad, int gdt, int64_t n, float lr) {
  LOOP(k, n) mlp_put(main, mdt, k, MLP_SUB(mlp_get(main, mdt, k), MLP_MUL(lr, mlp_get(grad, gdt, k))));
}

__global__ void k_cast(void *dst, int dt, const void *src, int st, int64_t n) { LOOP(k, n) mlp_cast1(dst, dt, src, st, k); }

__global__ void k_add(void *dst, int dt, const void *src, int st, int64_t n) { LOOP(k, n) mlp_add1(dst, dt, src, st, k); }

static bool float_elem(int t) { return t == FP_ELEM_FP32 || t == FP_ELEM_BF16 || t == FP_ELEM_FP16; }

extern "C" cudaError_t mlpc_fwd(const float *W, const float *b, const float *h, float *z, float *y, int64_t in,
                                int64_t out, int B, bool last, cudaStream_t s) {
  k_fwd<<<blocks((int64_t)B * out), THREADS, 0, s>>>(W, b, h, z, y, in, out, B, last);
  return cudaGetLastError();
}
extern "C" cudaError_t mlpc_dz(const float *z, const float *dy, float *dz, int64_t n, bool last, cudaStream_t s) {
  k_dz<<<blocks(n), THREADS, 0, s>>>(z, dy, dz, n, last);
  return cudaGetLastError();
}
extern "C" cudaError_t mlpc_dW(const float *dz, const float *h, float *dW, int64_t in, int64_t out, int B,
                               cudaStream_t s) {
  k_dW<<<blocks(out * in), THREADS, 0, s>>>(dz, h, dW, in, out, B);
  return cudaGetLastError();
}
extern "C" cudaError_t mlpc_db(const float *dz, float *db, int64_t out, int B, cudaStream_t s) {
  k_db<<<blocks(out), THREADS, 0, s>>>(dz, db, out, B);
  return cudaGetLastError();
}
extern "C" cudaError_t mlpc_dh(const float *dz, const float *W, float *dh, int64_t in, int64_t out, int B,
                               cudaStream_t s) {
  k_dh<<<blocks((int64_t)B * in), THREADS, 0, s>>>(dz, W, dh, in, out, B);
  return cudaGetLastError();
}
extern "C" cudaError_t mlpc_loss_grad(const float *y, const float *t, float *dy, int64_t n, int B, cudaStream_t s) {
  k_loss<<<blocks(n), THREADS, 0, s>>>(y, t, dy, n, B);
  return cudaGetLastError();
}
extern "C" cudaError_t mlpc_sgd(void *main, int main_dt, const void *grad, int grad_dt, int64_t n, float lr,
                                cudaStream_t s) {
  if (!float_elem(main_dt) || !float_elem(grad_dt)) return cudaErrorInvalidValue;
  if (n <= 0) return cudaSuccess;
  k_sgd<<<blocks(n), THREADS, 0, s>>>(main, main_dt, grad, grad_dt, n, lr);
  return cudaGetLastError();
}
extern "C" cudaError_t mlpc_cast(void *dst, int dt, const void *src, int st, int64_t n, cudaStream_t s) {
  if (!float_elem(dt) || !float_elem(st)) return cudaErrorInvalidValue;
  if (n <= 0 || (dst == src && dt == st)) return cudaSuccess;
  k_cast<<<blocks(n), THREADS, 0, s>>>(dst, dt, src, st, n);
  return cudaGetLastError();
}
extern "C" cudaError_t mlpc_add(void *dst, int dt, const void *src, int st, int64_t n, cudaStream_t s) {
  if (!float_elem(dt) || !float_elem(st)) return cudaErrorInvalidValue;
  if (n <= 0) return cudaSuccess;
  k_add<<<blocks(n), THREADS, 0, s>>>(dst, dt, src, st, n);
  return cudaGetLastError();
}
