/* kernels.h - the plain-C reference kernels: dtype conversions, the
 * elementwise arithmetic a plan's ops need (cast, accumulate, scale, zero,
 * the reduction of an MPI_Op) and MXFP8 block quantization. The CPU/MPI
 * executor calls them; the CUDA kernels are tested against them, so every
 * result here is specified to the bit (docs/kernels.md).
 *
 * Rules shared by every kernel:
 * - all arithmetic is done in fp32 (a value in bf16, fp16 or e4m3 widens to
 *   fp32 exactly), and the fp32 result is rounded once, to nearest, ties to
 *   even, to the destination dtype;
 * - a NaN stays a NaN (quiet); an Inf stays an Inf where the destination has
 *   one; fp16 and bf16 overflow to Inf; e4m3 has no Inf and saturates to
 *   +-448 instead; a NaN that comes out of arithmetic (add, scale,
 *   dequantize) is the canonical 0x7FC00000 before the rounding (CPUs and
 *   GPUs pick different payloads; convert.h);
 * - n counts elements and may be 0 (the pointers are then not touched);
 *   a negative n or a dtype a kernel does not take is a caller bug: the
 *   kernel prints file:line and exits with status 70, like FP_ASSERT;
 * - dst and src must not overlap, except that they may be the same buffer
 *   when their dtypes are the same. */
#ifndef FP_KERNELS_H
#define FP_KERNELS_H

#include <stdint.h>

#include "base/base.h" /* fp_dtype */

/* ---- scalar conversions ------------------------------------------------ */
/* round to nearest even; NaN stays NaN (sign and the high payload bits kept,
 * quiet bit set), Inf stays Inf, a finite value past bf16's largest rounds
 * to Inf */
uint16_t fpk_f32_to_bf16(float x);
float fpk_bf16_to_f32(uint16_t h); /* exact */
/* round to nearest even; |x| >= 65520 (and Inf) -> Inf; subnormals rounded
 * to nearest even (2^-24 -> 0x0001, 2^-25 -> 0); NaN stays NaN (sign and
 * high payload bits kept, quiet bit set) */
uint16_t fpk_f32_to_f16(float x);
float fpk_f16_to_f32(uint16_t h); /* exact */
/* OCP E4M3 ("fn": no Inf, max 448, NaN = 0x7f / 0xff): round to nearest
 * even, saturating: |x| > 448 and +-Inf -> +-448 (0x7e / 0xfe); any NaN ->
 * 0x7f; -0.0 -> 0x80 */
uint8_t fpk_f32_to_e4m3(float x);
float fpk_e4m3_to_f32(uint8_t v); /* exact; 0x7f and 0xff -> NaN */

/* ---- array kernels ----------------------------------------------------- */
/* dtypes among FP_F32 / FP_BF16 / FP_F16 unless said */

/* dst[i] = src[i] converted; any pair of FP_F32, FP_BF16, FP_F16, FP_E4M3;
 * same dtype = copy (bit for bit, memmove) */
void fpk_cast(void *dst, fp_dtype dt, const void *src, fp_dtype st, int64_t n);
/* dst[i] += src[i] */
void fpk_add(void *dst, fp_dtype dt, const void *src, fp_dtype st, int64_t n);
/* dst[i] *= alpha; alpha is first rounded to fp32 */
void fpk_scale(void *dst, fp_dtype dt, double alpha, int64_t n);
/* bytes >= 0 zero bytes */
void fpk_memset0(void *dst, int64_t bytes);
/* dst[i] /= d (d > 0, an exact fp32 integer such as a group size): widened
 * to fp32, divided (IEEE, correctly rounded), rounded once to dt. The MPI
 * backend's second half of an average reduction (sum, then divide by G). */
void fpk_div(void *dst, fp_dtype dt, double d, int64_t n);
/* inout[i] += in[i], both of dtype dt: the body of a user MPI_Op */
void fpk_reduce_sum(void *inout, const void *in, fp_dtype dt, int64_t n);

/* ---- MXFP8 (OCP MX v1.0, E4M3 elements) --------------------------------- */
/* Blocks of FPK_MX_BLOCK consecutive elements share one E8M0 scale
 * (2^(byte-127)); the last block may be short. dst holds n E4M3 bytes and
 * scales fpk_mx_nscales(n) bytes.
 *
 * The scale of a block is 2^e with e = ceil(log2(amax / 448)) (the rounding
 * up of cuBLAS / TransformerEngine, so no element saturates), clamped to
 * [-127, 127]; amax is the largest |x| of the block in fp32. Element i is
 * x_i * 2^-e in fp32, rounded to E4M3 (nearest even, saturating). Special
 * blocks:
 * - all zeros, or amax at most 448 * 2^-127 (subnormal amax included): scale
 *   byte 0x00 (2^-127); the elements are rounded as usual (zeros keep their
 *   sign, tiny values may flush to +-0);
 * - any NaN or +-Inf in the block: scale byte 0xFF (NaN) and every element
 *   0x7F. E4M3 has no Inf; a NaN scale marks the whole block NaN (OCP MX),
 *   so the non-finite value is not silently turned into a finite one. */
#define FPK_MX_BLOCK 32
static inline int64_t fpk_mx_nscales(int64_t n) { return (n + FPK_MX_BLOCK - 1) / FPK_MX_BLOCK; }
/* st among FP_F32 / FP_BF16 / FP_F16 */
void fpk_quantize_mxfp8(uint8_t *dst, uint8_t *scales, const void *src, fp_dtype st, int64_t n);
/* the scales alone: scales[k] is the byte fpk_quantize_mxfp8 gives block k.
 * The byte grows with the block's amax (0xFF, non-finite, above all), so
 * the scale of a block whose elements are split between processes is the
 * max of the bytes of its parts (planner/reshard.c) */
void fpk_mxfp8_scales(uint8_t *scales, const void *src, fp_dtype st, int64_t n);
/* the elements at given scales: block k at scales[k] (0xFF: every element
 * NaN). At least the block's own scale (fpk_mxfp8_scales) nothing
 * saturates; below it the largest elements saturate at +-448, as any value
 * past E4M3's range does. fpk_quantize_mxfp8 is fpk_mxfp8_scales then this */
void fpk_quantize_mxfp8_scaled(uint8_t *dst, const uint8_t *scales, const void *src, fp_dtype st, int64_t n);
/* dst[i] = max(a[i], b[i]): the common scale of a split block's parts */
void fpk_max_u8(uint8_t *dst, const uint8_t *a, const uint8_t *b, int64_t n);
/* dst[i] = e4m3(src[i]) * 2^(scale-127), exact in fp32 (Inf past fp32's
 * range), then rounded once to dt; scale 0xFF -> every element of the
 * block NaN; element 0x7F/0xFF -> NaN */
void fpk_dequantize_mxfp8(void *dst, fp_dtype dt, const uint8_t *src, const uint8_t *scales, int64_t n);

#endif
