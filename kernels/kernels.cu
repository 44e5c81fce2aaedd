/* kernels.cu - the CUDA kernels of kernels_cuda.h: grid-stride loops over
 * the tiles of cuda_body.cuh (THREADS = 256 threads a block, each thread U
 * slots a pass, at most MAX_BLOCKS blocks; the loop covers the rest). The
 * launchers dispatch on the dtypes, decide once whether the launch is
 * 16-byte aligned, and return the launch's error. */
#include <stdint.h>

#include "kernels/cuda_body.cuh"
#include "kernels/kernels_cuda.h"

using namespace fpk;

static bool aligned16(const void *a, const void *b) { return (((uintptr_t)a | (uintptr_t)b) & 15u) == 0; }

/* thread (blockIdx.x, threadIdx.x)'s first slot of every pass over `slots`
 * slots, U slots a thread a pass (cuda_body.cuh's geometry) */
#define TILE_LOOP(t0, U, slots)                                                                  \
  for (int64_t t0 = tile_first(blockIdx.x, threadIdx.x, (U)), step_ = tile_step(gridDim.x, (U)); \
       t0 < (slots); t0 += step_)

#define GRID_LOOP(t, ...) \
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < (__VA_ARGS__); t += (int64_t)gridDim.x * blockDim.x)

/* ---- kernels ----------------------------------------------------------------------- */
template <int DT, int ST> __global__ void __launch_bounds__(THREADS) k_cast(void *dst, const void *src, int64_t n,
                                                                            bool aligned) {
  typedef cast_k<DT, ST> K;
  TILE_LOOP(t0, K::U, nslots<K::V>(n)) K::tile(dst, src, n, t0, aligned);
}

template <int DT, int ST> __global__ void __launch_bounds__(THREADS) k_add(void *dst, const void *src, int64_t n,
                                                                           bool aligned) {
  typedef add_k<DT, ST> K;
  TILE_LOOP(t0, K::U, nslots<K::V>(n)) K::tile(dst, src, n, t0, aligned);
}

template <int DT> __global__ void __launch_bounds__(THREADS) k_scale(void *dst, float alpha, int64_t n, bool aligned) {
  typedef scale_k<DT> K;
  TILE_LOOP(t0, K::U, nslots<K::V>(n)) K::tile(dst, alpha, n, t0, aligned);
}

/* rows over blockIdx.y (grid-stride), units of the row over x */
template <typename U> __global__ void k_copy2d(void *dst, int64_t dpitch, const void *src, int64_t spitch,
                                               int64_t units, int64_t rows) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) GRID_LOOP(u, units) copy_unit<U>(dst, dpitch, src, spitch, r, u);
}

/* the number of quantize slots a launch iterates over: a multiple of 32,
 * so that whole warps iterate together and every lane reaches the
 * shuffles (tile_first and tile_step are multiples of 32 too) */
static __host__ __device__ int64_t quant_slots(int64_t n) { return (nslots<MX_SLOT>(n) + 31) / 32 * 32; }

/* the two slots of a block are lanes 2j and 2j+1 of one warp, for each of
 * the thread's U slots */
template <int ST> __global__ void __launch_bounds__(THREADS) k_quantize(uint8_t *dst, uint8_t *scales,
                                                                        const void *src, int64_t n, bool aligned) {
  typedef quant_k<ST> K;
  TILE_LOOP(t0, K::U, quant_slots(n)) {
    typename K::raw in[K::U];
    K::load(in, src, n, t0, aligned);
FPK_UNROLL
    for (int k = 0; k < K::U; k++) {
      int64_t t = t0 + (int64_t)k * THREADS;
      mx_part p;
      K::part(p, in[k], src, n, t, aligned);
      mx_store(dst, scales, n, t, p, mx_max(p.amax, __shfl_xor_sync(0xffffffffu, p.amax, 1)), aligned);
    }
  }
}

template <int ST> __global__ void k_mx_scales(uint8_t *scales, const void *src, int64_t n) {
  GRID_LOOP(b, (n + 31) / 32) mx_scale_block<ST>(scales, src, n, b);
}
template <int ST> __global__ void k_quantize_scaled(uint8_t *dst, const uint8_t *scales, const void *src, int64_t n) {
  GRID_LOOP(i, n) mx_scaled_elem<ST>(dst, scales, src, i);
}
__global__ void k_max_u8(uint8_t *dst, const uint8_t *a, const uint8_t *b, int64_t n) {
  GRID_LOOP(i, n) dst[i] = a[i] > b[i] ? a[i] : b[i];
}

template <int DT> __global__ void __launch_bounds__(THREADS) k_dequantize(void *dst, const uint8_t *src,
                                                                          const uint8_t *scales, int64_t n,
                                                                          bool aligned) {
  typedef dequant_k<DT> K;
  TILE_LOOP(t0, K::U, nslots<K::SLOT>(n)) K::tile(dst, src, scales, n, t0, aligned);
}

/* the blocks of the one-element-a-thread kernels (the two-step MXFP8 and
 * max_u8: these run on the few blocks a shard boundary cuts) */
static unsigned blocks_1(int64_t n) { return blocks_for(n, 1); }

/* ---- launchers ----------------------------------------------------------------------- */
static cudaError_t launched(void) { return cudaGetLastError(); }

template <int DT, int ST> static cudaError_t cast2(void *dst, const void *src, int64_t n, cudaStream_t s) {
  k_cast<DT, ST><<<blocks_for(nslots<cast_k<DT, ST>::V>(n), cast_k<DT, ST>::U), THREADS, 0, s>>>(dst, src, n, aligned16(dst, src));
  return launched();
}

template <int DT> static cudaError_t cast_from(void *dst, const void *src, fp_dtype st, int64_t n, cudaStream_t s) {
  switch (st) {
    case FP_F32: return cast2<DT, FP_F32>(dst, src, n, s);
    case FP_BF16: return cast2<DT, FP_BF16>(dst, src, n, s);
    case FP_F16: return cast2<DT, FP_F16>(dst, src, n, s);
    case FP_E4M3: return cast2<DT, FP_E4M3>(dst, src, n, s);
    default: return cudaErrorInvalidValue;
  }
}

static int castable(fp_dtype t) { return t == FP_F32 || t == FP_BF16 || t == FP_F16 || t == FP_E4M3; }
static int arith(fp_dtype t) { return t == FP_F32 || t == FP_BF16 || t == FP_F16; }
static int64_t dsize(fp_dtype t) { return t == FP_F32 ? 4 : t == FP_E4M3 ? 1 : 2; }

extern "C" cudaError_t fpk_cuda_cast(void *dst, fp_dtype dt, const void *src, fp_dtype st, int64_t n,
                                     cudaStream_t s) {
  if (n < 0 || !castable(dt) || !castable(st)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (dt == st) /* a byte copy, as the reference's memmove; in place: nothing */
    return dst == src ? cudaSuccess : cudaMemcpyAsync(dst, src, (size_t)(n * dsize(dt)), cudaMemcpyDeviceToDevice, s);
  switch (dt) {
    case FP_F32: return cast_from<FP_F32>(dst, src, st, n, s);
    case FP_BF16: return cast_from<FP_BF16>(dst, src, st, n, s);
    case FP_F16: return cast_from<FP_F16>(dst, src, st, n, s);
    case FP_E4M3: return cast_from<FP_E4M3>(dst, src, st, n, s);
    default: return cudaErrorInvalidValue;
  }
}

template <int DT, int ST> static cudaError_t add2(void *dst, const void *src, int64_t n, cudaStream_t s) {
  k_add<DT, ST><<<blocks_for(nslots<add_k<DT, ST>::V>(n), add_k<DT, ST>::U), THREADS, 0, s>>>(dst, src, n, aligned16(dst, src));
  return launched();
}

template <int DT> static cudaError_t add_from(void *dst, const void *src, fp_dtype st, int64_t n, cudaStream_t s) {
  switch (st) {
    case FP_F32: return add2<DT, FP_F32>(dst, src, n, s);
    case FP_BF16: return add2<DT, FP_BF16>(dst, src, n, s);
    case FP_F16: return add2<DT, FP_F16>(dst, src, n, s);
    default: return cudaErrorInvalidValue;
  }
}

extern "C" cudaError_t fpk_cuda_add(void *dst, fp_dtype dt, const void *src, fp_dtype st, int64_t n, cudaStream_t s) {
  if (n < 0 || !arith(dt) || !arith(st)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (dt) {
    case FP_F32: return add_from<FP_F32>(dst, src, st, n, s);
    case FP_BF16: return add_from<FP_BF16>(dst, src, st, n, s);
    case FP_F16: return add_from<FP_F16>(dst, src, st, n, s);
    default: return cudaErrorInvalidValue;
  }
}

template <int DT> static cudaError_t scale1(void *dst, float alpha, int64_t n, cudaStream_t s) {
  k_scale<DT><<<blocks_for(nslots<scale_k<DT>::V>(n), scale_k<DT>::U), THREADS, 0, s>>>(dst, alpha, n, aligned16(dst, dst));
  return launched();
}

extern "C" cudaError_t fpk_cuda_scale(void *dst, fp_dtype dt, double alpha, int64_t n, cudaStream_t s) {
  if (n < 0 || !arith(dt)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  float al = (float)alpha; /* as the reference: alpha rounded to fp32 once, on the host */
  switch (dt) {
    case FP_F32: return scale1<FP_F32>(dst, al, n, s);
    case FP_BF16: return scale1<FP_BF16>(dst, al, n, s);
    case FP_F16: return scale1<FP_F16>(dst, al, n, s);
    default: return cudaErrorInvalidValue;
  }
}

extern "C" cudaError_t fpk_cuda_memset0(void *dst, int64_t bytes, cudaStream_t s) {
  if (bytes < 0) return cudaErrorInvalidValue;
  return bytes ? cudaMemsetAsync(dst, 0, (size_t)bytes, s) : cudaSuccess;
}

template <typename U> static cudaError_t copy1(void *dst, int64_t dpitch, const void *src, int64_t spitch,
                                               int64_t width, int64_t rows, cudaStream_t s) {
  int64_t units = width / (int64_t)sizeof(U);
  unsigned gx = blocks_1(units), gy = (unsigned)(rows < 65535 ? rows : 65535);
  while (gx > 1 && (int64_t)gx * gy > 8 * MAX_BLOCKS) gx /= 2; /* many short rows: fewer blocks per row */
  k_copy2d<U><<<dim3(gx, gy), THREADS, 0, s>>>(dst, dpitch, src, spitch, units, rows);
  return launched();
}

extern "C" cudaError_t fpk_cuda_copy2d(void *dst, int64_t dpitch, const void *src, int64_t spitch, int64_t width,
                                       int64_t rows, cudaStream_t s) {
  if (rows < 1 || width < 0 || dpitch < 0 || spitch < 0) return cudaErrorInvalidValue;
  if (width == 0) return cudaSuccess;
  if (rows == 1) dpitch = spitch = 0; /* unused: do not let them narrow the unit */
  uint64_t m = (uint64_t)(uintptr_t)dst | (uint64_t)(uintptr_t)src | (uint64_t)dpitch | (uint64_t)spitch |
               (uint64_t)width;
  if (!(m & 15)) return copy1<uint4>(dst, dpitch, src, spitch, width, rows, s);
  if (!(m & 7)) return copy1<uint2>(dst, dpitch, src, spitch, width, rows, s);
  if (!(m & 3)) return copy1<uint32_t>(dst, dpitch, src, spitch, width, rows, s);
  if (!(m & 1)) return copy1<uint16_t>(dst, dpitch, src, spitch, width, rows, s);
  return copy1<uint8_t>(dst, dpitch, src, spitch, width, rows, s);
}

template <int ST> static cudaError_t quant1(uint8_t *dst, uint8_t *scales, const void *src, int64_t n, cudaStream_t s) {
  k_quantize<ST><<<blocks_for(quant_slots(n), quant_k<ST>::U), THREADS, 0, s>>>(dst, scales, src, n, aligned16(dst, src));
  return launched();
}

extern "C" cudaError_t fpk_cuda_quantize_mxfp8(uint8_t *dst, uint8_t *scales, const void *src, fp_dtype st, int64_t n,
                                               cudaStream_t s) {
  if (n < 0 || !arith(st)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (st) {
    case FP_F32: return quant1<FP_F32>(dst, scales, src, n, s);
    case FP_BF16: return quant1<FP_BF16>(dst, scales, src, n, s);
    case FP_F16: return quant1<FP_F16>(dst, scales, src, n, s);
    default: return cudaErrorInvalidValue;
  }
}

extern "C" cudaError_t fpk_cuda_mxfp8_scales(uint8_t *scales, const void *src, fp_dtype st, int64_t n, cudaStream_t s) {
  if (n < 0 || !arith(st)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  unsigned g = blocks_1((n + 31) / 32);
  switch (st) {
    case FP_F32: k_mx_scales<FP_F32><<<g, THREADS, 0, s>>>(scales, src, n); break;
    case FP_BF16: k_mx_scales<FP_BF16><<<g, THREADS, 0, s>>>(scales, src, n); break;
    case FP_F16: k_mx_scales<FP_F16><<<g, THREADS, 0, s>>>(scales, src, n); break;
    default: return cudaErrorInvalidValue;
  }
  return launched();
}

extern "C" cudaError_t fpk_cuda_quantize_mxfp8_scaled(uint8_t *dst, const uint8_t *scales, const void *src, fp_dtype st,
                                                      int64_t n, cudaStream_t s) {
  if (n < 0 || !arith(st)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  unsigned g = blocks_1(n);
  switch (st) {
    case FP_F32: k_quantize_scaled<FP_F32><<<g, THREADS, 0, s>>>(dst, scales, src, n); break;
    case FP_BF16: k_quantize_scaled<FP_BF16><<<g, THREADS, 0, s>>>(dst, scales, src, n); break;
    case FP_F16: k_quantize_scaled<FP_F16><<<g, THREADS, 0, s>>>(dst, scales, src, n); break;
    default: return cudaErrorInvalidValue;
  }
  return launched();
}

extern "C" cudaError_t fpk_cuda_max_u8(uint8_t *dst, const uint8_t *a, const uint8_t *b, int64_t n, cudaStream_t s) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  k_max_u8<<<blocks_1(n), THREADS, 0, s>>>(dst, a, b, n);
  return launched();
}

template <int DT> static cudaError_t dequant1(void *dst, const uint8_t *src, const uint8_t *scales, int64_t n,
                                              cudaStream_t s) {
  k_dequantize<DT><<<blocks_for(nslots<dequant_k<DT>::SLOT>(n), dequant_k<DT>::U), THREADS, 0, s>>>(dst, src, scales, n, aligned16(dst, src));
  return launched();
}

extern "C" cudaError_t fpk_cuda_dequantize_mxfp8(void *dst, fp_dtype dt, const uint8_t *src, const uint8_t *scales,
                                                 int64_t n, cudaStream_t s) {
  if (n < 0 || !arith(dt)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (dt) {
    case FP_F32: return dequant1<FP_F32>(dst, src, scales, n, s);
    case FP_BF16: return dequant1<FP_BF16>(dst, src, scales, n, s);
    case FP_F16: return dequant1<FP_F16>(dst, src, scales, n, s);
    default: return cudaErrorInvalidValue;
  }
}
