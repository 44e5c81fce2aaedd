/* mlp_cuda.h - train_mlp's layers on the GPU (mlp_cuda.cu): each launches
 * one kernel on stream s, one thread per output element, each output the
 * same sequential fp32 sum in the same order as the CPU trainer's loops
 * (mlp_math.h), so both give the same bits. Pointers are device pointers;
 * shapes as in train_mlp.c (W [out, in], activations [B, features]). */
#ifndef FP_MLP_CUDA_H
#define FP_MLP_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* z = h W^T + b (b may be NULL); y = act(z), or z for the last layer */
cudaError_t mlpc_fwd(const float *W, const float *b, const float *h, float *z, float *y, int64_t in, int64_t out, int B,
                     bool last, cudaStream_t s);
/* dz = dy * act'(z), or dy for the last layer (n = B * out) */
cudaError_t mlpc_dz(const float *z, const float *dy, float *dz, int64_t n, bool last, cudaStream_t s);
/* dW[o, k] = sum_s dz[s, o] h[s, k] */
cudaError_t mlpc_dW(const float *dz, const float *h, float *dW, int64_t in, int64_t out, int B, cudaStream_t s);
/* db[o] = sum_s dz[s, o] */
cudaError_t mlpc_db(const float *dz, float *db, int64_t out, int B, cudaStream_t s);
/* dh[s, k] = sum_o dz[s, o] W[o, k] */
cudaError_t mlpc_dh(const float *dz, const float *W, float *dh, int64_t in, int64_t out, int B, cudaStream_t s);
/* dy = (y - t) / B (n = B * out) */
cudaError_t mlpc_loss_grad(const float *y, const float *t, float *dy, int64_t n, int B, cudaStream_t s);
/* Dtypes below are fp_elem codes (include/flexplan.h) among FP_ELEM_FP32,
 * _BF16 and _FP16; elements convert and add as mlp_math.h says (the
 * executor's kernels' bits); n <= 0 queues nothing; another dtype is
 * cudaErrorInvalidValue, nothing queued. */
/* main = main - lr * grad, in fp32, rounded to the main dtype */
cudaError_t mlpc_sgd(void *main, int main_dt, const void *grad, int grad_dt, int64_t n, float lr, cudaStream_t s);
/* dst[k] = src[k] converted to dt (the same dtype: a copy of the bits) */
cudaError_t mlpc_cast(void *dst, int dt, const void *src, int st, int64_t n, cudaStream_t s);
/* dst[k] += src[k]: one fp32 add, rounded to dt */
cudaError_t mlpc_add(void *dst, int dt, const void *src, int st, int64_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
