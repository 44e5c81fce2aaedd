/* convert.h - the scalar conversions of docs/kernels.md (fp32 <-> bf16, fp16,
 * OCP E4M3; the MXFP8 scale rule) as inline functions on the bits, written
 * once and compiled twice: as C for the reference kernels (ref.c) and as
 * CUDA host+device code for the CUDA kernels (kernels/kernels.cu). The GPU thus
 * rounds, saturates and keeps NaNs with the very instructions the reference
 * specifies; what the CUDA side adds (vector loads, thread indexing, block
 * reductions) is what the tests compare (tests/test_kernels_cuda.cu on a
 * GPU, tests/test_kernels_emul.cu on the host without one).
 *
 * Only integer operations and exact fp32 products appear here, so the
 * results do not depend on the floating-point environment or on
 * contraction (no a*b+c). Names are fpkc_*; kernels.h exports the reference
 * versions as fpk_* (same results). */
#ifndef FP_KERNELS_CONVERT_H
#define FP_KERNELS_CONVERT_H

#include <stdint.h>
#ifndef __CUDACC__
#include <string.h>
#endif

#ifdef __CUDACC__
#define FPK_HD static __host__ __device__ __forceinline__
#else
#define FPK_HD static inline
#endif

FPK_HD uint32_t fpkc_f2u(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#elif defined(__CUDACC__)
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
#else
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
#endif
}

FPK_HD float fpkc_u2f(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#elif defined(__CUDACC__)
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

/* q = m >> shift rounded to nearest, ties to even (1 <= shift <= 31) */
FPK_HD uint32_t fpkc_rne_shift(uint32_t m, int shift) {
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return q;
}

/* ---- bf16 ------------------------------------------------------------------ */
FPK_HD uint16_t fpkc_f32_to_bf16(float x) {
  uint32_t u = fpkc_f2u(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: quiet */
  /* add just under half an ulp, plus one when the kept part is odd: a carry
   * out of the low 16 bits is the rounding up (into the exponent, to Inf) */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

FPK_HD float fpkc_bf16_to_f32(uint16_t h) { return fpkc_u2f((uint32_t)h << 16); }

/* ---- fp16 ------------------------------------------------------------------ */
FPK_HD uint16_t fpkc_f32_to_f16(float x) {
  uint32_t u = fpkc_f2u(x), a = u & 0x7fffffffu;
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (the tie above 65504) or Inf */
  if (a >= 0x38800000u) {                                  /* >= 2^-14: normal */
    uint32_t r = a - (112u << 23);                         /* rebias 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }
  if (a <= 0x33000000u) return sign; /* <= 2^-25: the tie at 2^-25 goes to even 0 */
  /* subnormal: units of 2^-24; the value is m * 2^(e-150) */
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  int e = (int)(a >> 23);
  return (uint16_t)(sign | fpkc_rne_shift(m, 126 - e)); /* may round up to 0x0400, the smallest normal */
}

FPK_HD float fpkc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return fpkc_u2f(sign | 0x7f800000u | (m << 13)); /* Inf, NaN (payload kept) */
  if (e != 0) return fpkc_u2f(sign | ((e + 112u) << 23) | (m << 13));
  float v = (float)m * 0x1p-24f; /* subnormal or zero: exact (m < 2^10, a power-of-two factor) */
  return sign ? -v : v;
}

/* ---- OCP E4M3 ---------------------------------------------------------------- */
FPK_HD uint8_t fpkc_f32_to_e4m3(float x) {
  uint32_t u = fpkc_f2u(x), a = u & 0x7fffffffu;
  uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  if (a > 0x7f800000u) return 0x7f;                     /* NaN: the canonical one */
  if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7e); /* >= 448 or Inf: saturate */
  if (a >= 0x3c800000u) {                               /* >= 2^-6: normal */
    uint32_t r = a - (120u << 23);                      /* rebias 127 -> 7 */
    r += 0x7ffffu + ((r >> 20) & 1u);
    return (uint8_t)(sign | (r >> 20)); /* below 448 rounds at most to 448 */
  }
  if (a <= 0x3a800000u) return sign; /* <= 2^-10: the tie goes to even 0 */
  /* subnormal: units of 2^-9 */
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  int e = (int)(a >> 23);
  return (uint8_t)(sign | fpkc_rne_shift(m, 141 - e)); /* may round up to 0x08, the smallest normal */
}

FPK_HD float fpkc_e4m3_to_f32(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24, e = (v >> 3) & 0xfu, m = v & 7u;
  if (e == 0xf && m == 7) return fpkc_u2f(sign | 0x7fc00000u);
  if (e != 0) return fpkc_u2f(sign | ((e + 120u) << 23) | (m << 20));
  float r = (float)m * 0x1p-9f;
  return sign ? -r : r;
}

/* ---- MXFP8 scales ---------------------------------------------------------------- */
/* The biased E8M0 exponent of 2^ceil(log2(amax/448)) for a finite amax >= 0,
 * clamped at 0 (2^-127). With amax = (1 + M/2^23) * 2^(E-127) (E the biased
 * exponent, M the mantissa field) and 448 = 1.75 * 2^8:
 * amax/448 = ((1 + M/2^23) / 1.75) * 2^(E-135), where the first factor lies
 * in (4/7, 8/7); it is at most 1 exactly when M <= 0x600000 (1.75 itself).
 * So e = E - 135 + (M > 0x600000), and the byte e + 127 = E - 8 + (M >
 * 0x600000): exact integer arithmetic, at most 247 (e = 120). A subnormal or
 * zero amax (E = 0) gives e < -127: clamped to byte 0. The argument is the
 * bit pattern of amax (a non-negative finite float). */
FPK_HD uint8_t fpkc_mx_scale_byte(uint32_t amax_bits) {
  int E = (int)(amax_bits >> 23), b = E - 8 + ((amax_bits & 0x7fffffu) > 0x600000u);
  return (uint8_t)(b < 0 ? 0 : b);
}

/* 2^(127 - byte) as fp32 (byte 0..254): the factor that takes a block's
 * values into E4M3 range; 2^127 is still normal */
FPK_HD float fpkc_mx_inv_scale(uint8_t byte) {
  int e = 127 - (int)byte; /* -127 .. 127 */
  return e >= -126 ? fpkc_u2f((uint32_t)(e + 127) << 23) : fpkc_u2f(0x00400000u); /* 2^-127 is subnormal */
}

/* 2^(byte - 127) as fp32 (byte 0..254) */
FPK_HD float fpkc_mx_scale(uint8_t byte) { return byte ? fpkc_u2f((uint32_t)byte << 23) : fpkc_u2f(0x00400000u); }

/* |x|'s bits; the amax of a block is the largest of these over its finite
 * elements (non-negative floats order as their bit patterns) */
FPK_HD uint32_t fpkc_abs_bits(float x) { return fpkc_f2u(x) & 0x7fffffffu; }
/* NaN or +-Inf */
FPK_HD int fpkc_nonfinite(float x) { return fpkc_abs_bits(x) >= 0x7f800000u; }

/* The NaN an arithmetic kernel (add, scale, dequantize) writes: the
 * canonical quiet 0x7FC00000 for any NaN result. The payload of a NaN that
 * comes out of an fp32 add or multiply is the hardware's choice (x86 keeps
 * an operand's, NVIDIA GPUs produce 0x7FFFFFFF), so both sides fix it. */
FPK_HD float fpkc_canon(float r) { return fpkc_abs_bits(r) > 0x7f800000u ? fpkc_u2f(0x7fc00000u) : r; }

/* ---- the same conversions without branches (the CUDA kernels' versions) -------
 * Bit for bit the functions above, written with selects instead of if
 * chains so that a warp whose lanes hold values of different classes
 * (normal, subnormal, zero) does not run every path in turn: the CUDA
 * bodies (cuda_body.cuh) convert 8 to 16 elements a thread, and the
 * branchy forms made the E4M3 and fp16 kernels compute-bound (docs/cuda.md,
 * "The kernels"). Subnormal results are rounded by one fp32 addition: |x| plus a
 * power of two whose ulp is the target's subnormal unit (2^-24 for fp16:
 * 0.5; 2^-9 for E4M3: 2^14) rounds |x| to a multiple of that unit, to
 * nearest even, and the sum's low bits are the count of units; subnormal
 * sources are widened by one exact fp32 product (the bits as an fp32 of
 * exponent bias 127, times 2^(127 - bias)). Both need fp32 subnormals kept
 * (no flush to zero: not the CUDA default, nor the host's). Checked
 * against the functions above on every 8- and 16-bit input and on every
 * fp32 input of a stride (tests/test_kernels_emul.cu; all 2^32 with
 * FP_KERNELS_EXHAUSTIVE=1). */
FPK_HD float fpkc_add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FPK_HD float fpkc_mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

FPK_HD uint16_t fpkc_f32_to_f16_sel(float x) {
  uint32_t u = fpkc_f2u(x), a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
  uint32_t r = a - (112u << 23);
  uint32_t nrm = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;                  /* [2^-14, 65520) */
  uint32_t sub = fpkc_f2u(fpkc_add_rn(fpkc_u2f(a), 0.5f)) - 0x3f000000u; /* below 2^-14: units of 2^-24 */
  uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint32_t m = a > 0x7f800000u ? nan : a >= 0x477ff000u ? 0x7c00u : a >= 0x38800000u ? nrm : sub;
  return (uint16_t)(sign | m);
}

FPK_HD float fpkc_f16_to_f32_sel(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, mag = h & 0x7fffu;
  float f = fpkc_mul_rn(fpkc_u2f(mag << 13), 0x1p112f); /* normal and subnormal, exact */
  uint32_t bits = mag >= 0x7c00u ? 0x7f800000u | ((mag & 0x3ffu) << 13) : fpkc_f2u(f);
  return fpkc_u2f(sign | bits);
}

FPK_HD uint8_t fpkc_f32_to_e4m3_sel(float x) {
  uint32_t u = fpkc_f2u(x), a = u & 0x7fffffffu, sign = (u >> 24) & 0x80u;
  uint32_t r = a - (120u << 23);
  uint32_t nrm = (r + 0x7ffffu + ((r >> 20) & 1u)) >> 20;                     /* [2^-6, 448] */
  uint32_t sub = fpkc_f2u(fpkc_add_rn(fpkc_u2f(a), 16384.0f)) - 0x46800000u; /* below 2^-6: units of 2^-9 */
  uint32_t m = a >= 0x43e00000u ? 0x7eu : a >= 0x3c800000u ? nrm : sub;
  return (uint8_t)(a > 0x7f800000u ? 0x7fu : sign | m);
}

FPK_HD float fpkc_e4m3_to_f32_sel(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24, mag = v & 0x7fu;
  float f = fpkc_mul_rn(fpkc_u2f(mag << 20), 0x1p120f); /* normal and subnormal, exact */
  return fpkc_u2f(sign | (mag == 0x7fu ? 0x7fc00000u : fpkc_f2u(f)));
}

#endif
