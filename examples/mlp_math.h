/* mlp_math.h - the arithmetic of train_mlp's layers, written once for the
 * CPU trainer (C) and the GPU trainer (CUDA device code, mlp_cuda.cu), so
 * that both compute the same bits: the NCCL backend's run of a plan can then
 * be compared with the MPI backend's run of the same plan byte for byte.
 *
 * Every fp32 operation is one correctly rounded IEEE operation and is never
 * contracted into a fused multiply-add: the C build is ISO C11 (GCC's
 * default there is -ffp-contract=off, and x86-64 has no FMA without -m
 * flags), and device code uses the _rn intrinsics, which nvcc never fuses.
 * The activation is a rational function shaped like tanh - libm's tanhf and
 * CUDA's differ in the last bit:
 *   act(x) = x (27 + x^2) / (27 + 9 x^2)  for |x| < 3,  sign(x) beyond;
 * it is 1 with slope 0 at 3, and act'(x) = (x^2 - 9)^2 / (9 (3 + x^2)^2).
 *
 * It also holds the trainer's own element conversions and elementwise
 * arithmetic, keyed by the public fp_elem codes (include/flexplan.h): the
 * reference trainer checks the executor with them, so they are written here
 * from the rules, not taken from the library, and must give the bits the
 * executor's kernels give (docs/kernels.md, "Rules"):
 *  - fp32 -> bf16 / fp16 rounds to nearest, ties to even, with the target's
 *    subnormals; a finite value past the largest rounds to Inf;
 *  - a NaN stays a NaN: the sign and the high payload bits kept, the quiet
 *    bit set; widening keeps the bits (it is exact);
 *  - arithmetic (add, scale) is one fp32 operation on the widened values; a
 *    NaN it makes is the canonical 0x7FC00000 (CPUs and GPUs pick different
 *    payloads); the fp32 result is then rounded once to the destination. */
#ifndef FP_MLP_MATH_H
#define FP_MLP_MATH_H

#include <stdint.h>
#include <string.h>

#include "flexplan.h" /* fp_elem */

#ifdef __CUDACC__
#define MLP_HD static __host__ __device__ __forceinline__
#else
#define MLP_HD static inline
#endif

#ifdef __CUDA_ARCH__
#define MLP_ADD(a, b) __fadd_rn((a), (b))
#define MLP_SUB(a, b) __fsub_rn((a), (b))
#define MLP_MUL(a, b) __fmul_rn((a), (b))
#define MLP_DIV(a, b) __fdiv_rn((a), (b))
#else
#define MLP_ADD(a, b) ((float)(a) + (float)(b))
#define MLP_SUB(a, b) ((float)(a) - (float)(b))
#define MLP_MUL(a, b) ((float)(a) * (float)(b))
#define MLP_DIV(a, b) ((float)(a) / (float)(b))
#endif

MLP_HD float mlp_act(float x) {
  if (x >= 3.0f) return 1.0f;
  if (x <= -3.0f) return -1.0f;
  float x2 = MLP_MUL(x, x);
  return MLP_DIV(MLP_MUL(x, MLP_ADD(27.0f, x2)), MLP_ADD(27.0f, MLP_MUL(9.0f, x2)));
}

MLP_HD float mlp_dact(float x) {
  if (x >= 3.0f || x <= -3.0f) return 0.0f;
  float x2 = MLP_MUL(x, x), q = MLP_SUB(x2, 9.0f), d = MLP_ADD(3.0f, x2);
  return MLP_DIV(MLP_MUL(q, q), MLP_MUL(9.0f, MLP_MUL(d, d)));
}

/* ---- elements: fp32, bf16, fp16 by their fp_elem codes ----------------------------- */
MLP_HD uint32_t mlp_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
#endif
}

MLP_HD float mlp_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

/* x rounded to the binary format of `man` fraction bits and `ex` exponent
 * bits (bias 2^(ex-1) - 1, IEEE subnormals and Inf), as that format's bits.
 * A finite fp32 value is sig * 2^e (sig < 2^24); the target's quantum at x is
 * 2^(te - man) with te = max(floor(log2 |x|), emin). sig is shifted right to
 * that quantum, rounding to nearest even; the count q of quanta then encodes
 * as ((te - emin) << man) + q, which is right for normals (q in [2^man,
 * 2^(man+1))), subnormals (te = emin, q < 2^man) and a rounding that carries
 * into the next binade (q = 2^(man+1)) alike; past the largest finite value
 * it is Inf. */
MLP_HD uint32_t mlp_round_to(float x, int man, int ex) {
  uint32_t u = mlp_bits(x), a = u & 0x7fffffffu, E = a >> 23, f = a & 0x7fffffu;
  uint32_t sign = (u >> 31) << (man + ex), inf = ((1u << ex) - 1) << man;
  if (a > 0x7f800000u) return sign | inf | (1u << (man - 1)) | (f >> (23 - man)); /* NaN: quiet, high payload */
  int emin = 2 - (1 << (ex - 1));
  int te = E == 0 ? emin : (int)E - 127 > emin ? (int)E - 127 : emin;
  int e = E == 0 ? -149 : (int)E - 150;
  uint64_t sig = E == 0 ? f : f | 0x800000u;
  int sh = te - man - e; /* >= 23 - man > 0 for the formats here */
  uint64_t q = 0;
  if (sh < 40) {
    uint64_t rem = sig & ((1ull << sh) - 1), half = 1ull << (sh - 1);
    q = sig >> sh;
    if (rem > half || (rem == half && (q & 1))) q++;
  }
  uint64_t bits = ((uint64_t)(te - emin) << man) + q;
  return sign | (bits >= inf ? inf : (uint32_t)bits);
}

MLP_HD uint16_t mlp_to_bf16(float x) { return (uint16_t)mlp_round_to(x, 7, 8); }
MLP_HD uint16_t mlp_to_fp16(float x) { return (uint16_t)mlp_round_to(x, 10, 5); }

/* bf16 is the top half of an fp32 */
MLP_HD float mlp_from_bf16(uint16_t h) { return mlp_float((uint32_t)h << 16); }

MLP_HD float mlp_from_fp16(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, E = (h >> 10) & 0x1fu, f = h & 0x3ffu;
  if (E == 0x1f) return mlp_float(sign | 0x7f800000u | (f << 13)); /* Inf, NaN: the payload kept */
  if (E == 0 && f == 0) return mlp_float(sign);
  int e = (int)E - 15;
  if (E == 0) { /* subnormal: f * 2^-24, normalised (fp32 has the range) */
    e = -14;
    while (!(f & 0x400u)) f <<= 1, e--;
    f &= 0x3ffu;
  }
  return mlp_float(sign | ((uint32_t)(e + 127) << 23) | (f << 13));
}

/* element k of an array of dtype dt (FP_ELEM_FP32, _BF16 or _FP16) as fp32 */
MLP_HD float mlp_get(const void *p, int dt, int64_t k) {
  switch (dt) {
    case FP_ELEM_BF16: return mlp_from_bf16(((const uint16_t *)p)[k]);
    case FP_ELEM_FP16: return mlp_from_fp16(((const uint16_t *)p)[k]);
    default: return ((const float *)p)[k];
  }
}

/* element k of an array of dtype dt = v, rounded */
MLP_HD void mlp_put(void *p, int dt, int64_t k, float v) {
  switch (dt) {
    case FP_ELEM_BF16: ((uint16_t *)p)[k] = mlp_to_bf16(v); break;
    case FP_ELEM_FP16: ((uint16_t *)p)[k] = mlp_to_fp16(v); break;
    default: ((float *)p)[k] = v;
  }
}

/* a NaN that arithmetic made: the canonical quiet one */
MLP_HD float mlp_canon(float r) { return (mlp_bits(r) & 0x7fffffffu) > 0x7f800000u ? mlp_float(0x7fc00000u) : r; }

/* dst[k] = src[k] converted (same dtype: the bits); dst[k] += src[k]; the
 * element functions the trainers' loops and kernels apply */
MLP_HD void mlp_cast1(void *dst, int dt, const void *src, int st, int64_t k) {
  if (dt == st && dt == FP_ELEM_FP32) ((uint32_t *)dst)[k] = ((const uint32_t *)src)[k];
  else if (dt == st) ((uint16_t *)dst)[k] = ((const uint16_t *)src)[k];
  else mlp_put(dst, dt, k, mlp_get(src, st, k));
}
MLP_HD void mlp_add1(void *dst, int dt, const void *src, int st, int64_t k) {
  mlp_put(dst, dt, k, mlp_canon(MLP_ADD(mlp_get(dst, dt, k), mlp_get(src, st, k))));
}

#endif
