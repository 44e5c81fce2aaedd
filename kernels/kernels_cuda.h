/* kernels_cuda.h - the CUDA kernels, the one header through which host code
 * reaches them (the NCCL backend, the GPU tests, the benchmarks). Each
 * function launches its kernel on the given stream and returns at once
 * (nothing synchronizes, nothing allocates, no host callback: every launch
 * may be captured into a CUDA graph). The arguments mean what they mean for
 * the C reference of the same name in kernels.h, and the results are the
 * reference's, bit for bit (docs/kernels.md, docs/cuda.md): dst, src and
 * scales are device pointers; n counts elements; a dtype the kernel does not
 * take or a negative count returns cudaErrorInvalidValue and launches
 * nothing (the references exit 70 instead: the executor checks dtypes at
 * setup, so on its paths this never happens).
 *
 * Full 16-byte vectors are used when every pointer of the launch is 16-byte
 * aligned (the arena's buffers are 256-byte aligned, so most operands are);
 * anything else runs element by element, with the same results. */
#ifndef FP_KERNELS_CUDA_H
#define FP_KERNELS_CUDA_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "base/base.h" /* fp_dtype */

/* dst[i] = src[i] converted (fp32, bf16, fp16, e4m3, any pair); the same
 * dtype is a byte copy (dst == src: nothing to do) */
cudaError_t fpk_cuda_cast(void *dst, fp_dtype dt, const void *src, fp_dtype st, int64_t n, cudaStream_t s);
/* dst[i] += src[i] (fp32, bf16, fp16, mixed allowed) */
cudaError_t fpk_cuda_add(void *dst, fp_dtype dt, const void *src, fp_dtype st, int64_t n, cudaStream_t s);
/* dst[i] *= alpha, alpha rounded to fp32 first (fp32, bf16, fp16) */
cudaError_t fpk_cuda_scale(void *dst, fp_dtype dt, double alpha, int64_t n, cudaStream_t s);
/* bytes zero bytes (cudaMemsetAsync: a memset node in a graph) */
cudaError_t fpk_cuda_memset0(void *dst, int64_t bytes, cudaStream_t s);
/* rows x width bytes: dst + r*dpitch <- src + r*spitch (the plan's copy op:
 * pack/unpack of chunk-major staging, shards on dim > 0); rows >= 1, width
 * and pitches >= 0; the rows must not overlap between dst and src */
cudaError_t fpk_cuda_copy2d(void *dst, int64_t dpitch, const void *src, int64_t spitch, int64_t width, int64_t rows,
                            cudaStream_t s);
/* MXFP8 (docs/kernels.md): dst n e4m3 bytes, scales fpk_mx_nscales(n) bytes;
 * st among fp32, bf16, fp16 */
cudaError_t fpk_cuda_quantize_mxfp8(uint8_t *dst, uint8_t *scales, const void *src, fp_dtype st, int64_t n,
                                    cudaStream_t s);
/* MXFP8 in two steps, as fpk_mxfp8_scales, fpk_quantize_mxfp8_scaled and
 * fpk_max_u8 (kernels.h) */
cudaError_t fpk_cuda_mxfp8_scales(uint8_t *scales, const void *src, fp_dtype st, int64_t n, cudaStream_t s);
cudaError_t fpk_cuda_quantize_mxfp8_scaled(uint8_t *dst, const uint8_t *scales, const void *src, fp_dtype st,
                                           int64_t n, cudaStream_t s);
cudaError_t fpk_cuda_max_u8(uint8_t *dst, const uint8_t *a, const uint8_t *b, int64_t n, cudaStream_t s);
/* dt among fp32, bf16, fp16 */
cudaError_t fpk_cuda_dequantize_mxfp8(void *dst, fp_dtype dt, const uint8_t *src, const uint8_t *scales, int64_t n,
                                      cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
