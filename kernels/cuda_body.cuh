/* cuda_body.cuh - what one CUDA thread of each kernel does, as __host__
 * __device__ functions, so that kernels.cu runs them in grid-stride loops on
 * the GPU and tests/test_kernels_emul.cu runs the very same code on the
 * host, thread by thread with the launch's geometry, against the C
 * references - the indexing, vector and tail logic is checked without a
 * GPU.
 *
 * A slot is V consecutive elements, V chosen so that the narrower operand
 * moves 16 bytes (V = 16 / the smaller element size): fp32 -> bf16 is 8
 * elements (32 bytes in, 16 out), e4m3 -> fp32 16 (16 in, 64 out), so
 * both sides move whole 16-byte vectors - except where the destination is
 * the wider side (widening casts, dequantization): there the destination
 * moves 16 bytes and the source 4 or 8 (cast_vec, dequant_k::SLOT), so
 * every store instruction of a warp writes one contiguous span. When every
 * pointer of a launch is 16-byte aligned (`aligned`, decided once per
 * launch) a full slot moves as 16-, 8- or 4-byte words (uint4, uint2,
 * uint32_t); the last, partial slot and unaligned launches go element by
 * element.
 *
 * Bytes in flight: a thread handles U slots a pass (a "tile" of U x
 * threads-per-block slots per block), U = the fewest that make it load at
 * least 64 bytes (at most 4): all U slots are loaded before any is
 * converted or stored, so a thread has U independent 16-byte loads
 * outstanding instead of one; slot k of thread x is tile slot k * T + x,
 * so each of the U loads is coalesced across the block (geometry below).
 *
 * Every element is computed as in ref.c: widen to fp32, one fp32
 * operation, one rounding - so the results are the reference's, bit for
 * bit. The conversions are convert.h's branch-free forms (*_sel: the same
 * results as the reference's, checked on every 8- and 16-bit input and a
 * stride of fp32 inputs by the emulator test), except fp32 -> e4m3 on sm_89
 * and later: the hardware's conversion instruction (to_e4m3, which the GPU
 * test checks against ref.c).
 *
 * MXFP8 quantization: a slot is 16 elements, two slots per 32-element block
 * (lanes 2j and 2j+1 of a warp, for each of the thread's U slots); each
 * slot loads and finds the largest |x| bits over all its elements
 * (quant_k::part), the two partners combine theirs (a lane shuffle on the
 * GPU), then each writes its elements and the even one the block's scale
 * (mx_store): one pass over the data. Only C++ that nvcc compiles for
 * both sides is used. */
#ifndef FP_KERNELS_CUDA_BODY_CUH
#define FP_KERNELS_CUDA_BODY_CUH

#include <stdint.h>
#include <string.h>

extern "C" {
#include "base/base.h" /* fp_dtype */
}
#include "kernels/convert.h"
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define FPK_HW_E4M3 1 /* the conversion instruction of sm_89 and later */
#endif

#define FPK_HDT __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define FPK_UNROLL _Pragma("unroll")
#else
#define FPK_UNROLL
#endif

namespace fpk {

/* ---- element types --------------------------------------------------------------- */
/* fp32 -> e4m3 as ref.c (round to nearest even, |x| at or past 464 and
 * Inf saturated to 448 with x's sign, NaN the canonical 0x7f). On sm_89
 * and later one instruction (cvt.rn.satfinite.e4m3x2.f32: the same
 * rounding and saturation) with the NaN made canonical (the instruction
 * keeps its sign); elsewhere, and in the host emulation, convert.h's
 * branch-free form. The GPU test checks the instruction against ref.c
 * (random bits, specials, values); the emulator checks the other form. */
FPK_HDT uint8_t e4m3_nan_fix(float x, uint8_t v) {
  return (fpkc_f2u(x) & 0x7fffffffu) > 0x7f800000u ? (uint8_t)0x7f : v;
}
FPK_HDT uint8_t to_e4m3(float x) {
#ifdef FPK_HW_E4M3
  return e4m3_nan_fix(x, (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
#else
  return fpkc_f32_to_e4m3_sel(x);
#endif
}
/* two at once, *lo from a and *hi from b, neither NaN (a quantized
 * block's scaled values: finite, or the whole block is overwritten as NaN):
 * one instruction on sm_89+, no NaN fix */
FPK_HDT void to_e4m3x2_finite(uint8_t &lo, uint8_t &hi, float a, float b) {
#ifdef FPK_HW_E4M3
  __nv_fp8x2_storage_t w = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  lo = (uint8_t)(w & 0xffu);
  hi = (uint8_t)(w >> 8);
#else
  lo = fpkc_f32_to_e4m3_sel(a);
  hi = fpkc_f32_to_e4m3_sel(b);
#endif
}

template <int DT> struct elt;
template <> struct elt<FP_F32> {
  typedef uint32_t T; /* the bits */
  static FPK_HDT float get(T v) { return fpkc_u2f(v); }
  static FPK_HDT T put(float f) { return fpkc_f2u(f); }
};
template <> struct elt<FP_BF16> {
  typedef uint16_t T;
  static FPK_HDT float get(T v) { return fpkc_bf16_to_f32(v); }
  static FPK_HDT T put(float f) { return fpkc_f32_to_bf16(f); }
};
template <> struct elt<FP_F16> {
  typedef uint16_t T;
  static FPK_HDT float get(T v) { return fpkc_f16_to_f32_sel(v); }
  static FPK_HDT T put(float f) { return fpkc_f32_to_f16_sel(f); }
};
template <> struct elt<FP_E4M3> {
  typedef uint8_t T;
  static FPK_HDT float get(T v) { return fpkc_e4m3_to_f32_sel(v); }
  static FPK_HDT T put(float f) { return to_e4m3(f); }
};

/* elements per slot for a pair of element sizes: the narrower moves 16 bytes */
template <int A, int B> struct vec {
  enum { SA = (int)sizeof(typename elt<A>::T), SB = (int)sizeof(typename elt<B>::T) };
  enum { V = 16 / (SA < SB ? SA : SB) };
};

/* a cast's slot: the narrower side moves 16 bytes, except where the
 * destination is the wider side (bf16 -> fp32, e4m3 -> anything): there the
 * destination moves 16 bytes and the source 4 or 8. Decision (issue 39):
 * with 16 bytes on the narrow side, a widening cast stored 32 or 64 bytes a
 * lane, two or four 16-byte stores a lane 32 or 64 bytes apart, so each
 * store instruction of a warp wrote every other 16 bytes of its span; the
 * H200 measured bf16 -> fp32 at 0.64 of a copy while fp32 -> bf16, whose
 * wide side is loaded, reached 0.99. With the destination at 16 bytes a lane
 * every store instruction of a warp writes 512 contiguous bytes, and the
 * narrow loads (8 or 4 bytes a lane) are contiguous too. Not measured yet. */
template <int DT, int ST> struct cast_vec {
  enum { SD = (int)sizeof(typename elt<DT>::T), SS = (int)sizeof(typename elt<ST>::T) };
  enum { V = SD > SS ? 16 / SD : vec<DT, ST>::V };
};

/* the word a slot of B bytes moves as: 16 bytes (uint4) for a multiple of
 * 16, else 8 (uint2) or 4 (uint32_t) */
template <int B> struct word { typedef uint4 T; };
template <> struct word<8> { typedef uint2 T; };
template <> struct word<4> { typedef uint32_t T; };

/* V elements of T, aligned to the word they move as (16 bytes at most) */
template <typename T, int V> struct alignas(V * sizeof(T) >= 16 ? 16 : V * sizeof(T)) pack {
  T e[V];
};

/* a full slot from / to memory aligned to its word (launches whose
 * pointers are all 16-byte aligned); V * sizeof(T) is 4, 8 or a multiple of
 * 16 */
template <typename T, int V> FPK_HDT void vload(pack<T, V> &p, const T *src) {
#ifdef __CUDA_ARCH__
  typedef typename word<(int)(V * sizeof(T))>::T W;
  const W *q = reinterpret_cast<const W *>(src);
  W *o = reinterpret_cast<W *>(p.e);
FPK_UNROLL
  for (int i = 0; i < (int)(V * sizeof(T) / sizeof(W)); i++) o[i] = q[i];
#else
  memcpy(p.e, src, sizeof p.e);
#endif
}
template <typename T, int V> FPK_HDT void vstore(T *dst, const pack<T, V> &p) {
#ifdef __CUDA_ARCH__
  typedef typename word<(int)(V * sizeof(T))>::T W;
  const W *q = reinterpret_cast<const W *>(p.e);
  W *o = reinterpret_cast<W *>(dst);
FPK_UNROLL
  for (int i = 0; i < (int)(V * sizeof(T) / sizeof(W)); i++) o[i] = q[i];
#else
  memcpy(dst, p.e, sizeof p.e);
#endif
}

/* ---- launch geometry (kernels.cu's launchers and the emulator) --------------------------- */
enum { THREADS = 256, MAX_BLOCKS = 4096 };

/* slots a thread handles per pass when one slot loads L bytes: the fewest
 * that load at least 64 bytes, 1 to 8 (8: the 8-byte loads of the widening
 * casts and of dequantization to bf16) */
template <int L> struct per_thread {
  static constexpr int U0 = (64 + L - 1) / L, U = U0 < 1 ? 1 : U0 > 8 ? 8 : U0;
};

/* the number of slots of n elements */
template <int V> FPK_HDT int64_t nslots(int64_t n) { return (n + V - 1) / V; }

/* blocks for `slots` slots, U a thread a pass: one pass if it fits in
 * MAX_BLOCKS (enough to fill an H200's 132 SMs many times over), else the
 * grid-stride loop covers the rest */
FPK_HDT unsigned blocks_for(int64_t slots, int U) {
  int64_t per = (int64_t)THREADS * U, b = (slots + per - 1) / per;
  return (unsigned)(b < 1 ? 1 : b > (int64_t)MAX_BLOCKS ? (int64_t)MAX_BLOCKS : b);
}

/* the first slot of thread x of block b in pass 0, and the step between
 * passes: tile p of block b holds slots [(p * G + b) * T * U, + T * U);
 * thread x's k-th slot in it is + k * T + x */
FPK_HDT int64_t tile_first(unsigned b, unsigned x, int U) { return (int64_t)b * THREADS * U + x; }
FPK_HDT int64_t tile_step(unsigned blocks, int U) { return (int64_t)blocks * THREADS * U; }

/* ---- elementwise kernels: cast, add, scale --------------------------------------------- */
/* Each *_tile does thread t0's U slots t0 + k * THREADS of one pass. */

/* dst[i] = round_DT(widen_ST(src[i])) */
template <int DT, int ST> struct cast_k {
  typedef typename elt<DT>::T D;
  typedef typename elt<ST>::T S;
  static constexpr int V = cast_vec<DT, ST>::V, U = per_thread<V * (int)sizeof(S)>::U;
  static FPK_HDT void tile(void *dst, const void *src, int64_t n, int64_t t0, bool aligned) {
    D *d = (D *)dst;
    const S *s = (const S *)src;
    pack<S, V> in[U];
FPK_UNROLL
    for (int k = 0; k < U; k++) {
      int64_t i0 = (t0 + (int64_t)k * THREADS) * V;
      if (aligned && i0 + V <= n) vload(in[k], s + i0);
    }
FPK_UNROLL
    for (int k = 0; k < U; k++) {
      int64_t i0 = (t0 + (int64_t)k * THREADS) * V;
      if (aligned && i0 + V <= n) {
        pack<D, V> out;
FPK_UNROLL
        for (int j = 0; j < V; j++) out.e[j] = elt<DT>::put(elt<ST>::get(in[k].e[j]));
        vstore(d + i0, out);
      } else {
        for (int64_t j = 0; j < V && i0 + j < n; j++) d[i0 + j] = elt<DT>::put(elt<ST>::get(s[i0 + j]));
      }
    }
  }
};

/* dst[i] = round_DT(canon(widen(dst[i]) + widen(src[i]))); dst may be src
 * (same dtype): each element is read before it is written, by the thread
 * that writes it. The slot is a cast's (cast_vec): where dst is the wider
 * side (fp32 += bf16, the reduce-scatter's accumulation into main grads) dst
 * moves 16 bytes a lane, so each store instruction of a warp writes 512
 * contiguous bytes. With the narrow side at 16 bytes it stored two 16-byte
 * words a lane 32 bytes apart, the pattern that held bf16 -> fp32 at 0.64
 * of a copy; the H200 measured this add at 0.81 so. Changed after that run:
 * not measured yet. */
template <int DT, int ST> struct add_k {
  typedef typename elt<DT>::T D;
  typedef typename elt<ST>::T S;
  static constexpr int V = cast_vec<DT, ST>::V, U = per_thread<V * (int)(sizeof(S) + sizeof(D))>::U;
  static FPK_HDT void tile(void *dst, const void *src, int64_t n, int64_t t0, bool aligned) {
    D *d = (D *)dst;
    const S *s = (const S *)src;
    pack<S, V> b[U];
    pack<D, V> a[U];
FPK_UNROLL
    for (int k = 0; k < U; k++) {
      int64_t i0 = (t0 + (int64_t)k * THREADS) * V;
      if (aligned && i0 + V <= n) {
        vload(b[k], s + i0);
        vload(a[k], d + i0);
      }
    }
FPK_UNROLL
    for (int k = 0; k < U; k++) {
      int64_t i0 = (t0 + (int64_t)k * THREADS) * V;
      if (aligned && i0 + V <= n) {
FPK_UNROLL
        for (int j = 0; j < V; j++)
          a[k].e[j] = elt<DT>::put(fpkc_canon(elt<DT>::get(a[k].e[j]) + elt<ST>::get(b[k].e[j])));
        vstore(d + i0, a[k]);
      } else {
        for (int64_t j = 0; j < V && i0 + j < n; j++)
          d[i0 + j] = elt<DT>::put(fpkc_canon(elt<DT>::get(d[i0 + j]) + elt<ST>::get(s[i0 + j])));
      }
    }
  }
};

/* dst[i] = round_DT(canon(widen(dst[i]) * alpha)), alpha already fp32 */
template <int DT> struct scale_k {
  typedef typename elt<DT>::T D;
  static constexpr int V = vec<DT, DT>::V, U = per_thread<V * (int)sizeof(D)>::U;
  static FPK_HDT void tile(void *dst, float alpha, int64_t n, int64_t t0, bool aligned) {
    D *d = (D *)dst;
    pack<D, V> a[U];
FPK_UNROLL
    for (int k = 0; k < U; k++) {
      int64_t i0 = (t0 + (int64_t)k * THREADS) * V;
      if (aligned && i0 + V <= n) vload(a[k], d + i0);
    }
FPK_UNROLL
    for (int k = 0; k < U; k++) {
      int64_t i0 = (t0 + (int64_t)k * THREADS) * V;
      if (aligned && i0 + V <= n) {
FPK_UNROLL
        for (int j = 0; j < V; j++) a[k].e[j] = elt<DT>::put(fpkc_canon(elt<DT>::get(a[k].e[j]) * alpha));
        vstore(d + i0, a[k]);
      } else {
        for (int64_t j = 0; j < V && i0 + j < n; j++)
          d[i0 + j] = elt<DT>::put(fpkc_canon(elt<DT>::get(d[i0 + j]) * alpha));
      }
    }
  }
};

/* ---- 2-D copy: rows x width bytes between pitched rows ------------------------------------ */
/* unit: the widest of 16, 8, 4, 2, 1 bytes dividing both pointers, both
 * pitches and the width (decided once per launch); element u of row r */
template <typename U> FPK_HDT void copy_unit(void *dst, int64_t dpitch, const void *src, int64_t spitch, int64_t r,
                                             int64_t u) {
  *((U *)((char *)dst + r * dpitch) + u) = *((const U *)((const char *)src + r * spitch) + u);
}

/* ---- MXFP8 ------------------------------------------------------------------------------- */
enum { MX_SLOT = 16 }; /* elements per slot: two slots per block of FPK_MX_BLOCK (32) */

FPK_HDT uint32_t mx_max(uint32_t a, uint32_t b) { return a > b ? a : b; } /* one integer max on the GPU */

/* One slot of a block, loaded. amax is the largest |x| bits over all its
 * elements, NaN and Inf included (0x7f800000 and above: the slot holds
 * one). The reference's amax is over finite elements only, but it is used
 * only when the block has no NaN or Inf, and then the two are the same: so
 * an element costs one integer max instead of a finiteness test, a select
 * and a flag (quantize_mxfp8 bf16 was bound by per-element work). */
struct mx_part {
  float v[MX_SLOT];
  uint32_t amax;
};

/* quantize: U slots a thread a pass (slot k: t0 + k * THREADS). load()
 * issues the U slots' vector loads, part() widens slot k and finds its amax
 * and badness, then the partners combine theirs and mx_store writes */
template <int ST> struct quant_k {
  typedef typename elt<ST>::T S;
  static constexpr int U = per_thread<MX_SLOT * (int)sizeof(S)>::U;
  typedef pack<S, MX_SLOT> raw;
  static FPK_HDT void load(raw (&in)[U], const void *src, int64_t n, int64_t t0, bool aligned) {
FPK_UNROLL
    for (int k = 0; k < U; k++) {
      int64_t i0 = (t0 + (int64_t)k * THREADS) * MX_SLOT;
      if (aligned && i0 + MX_SLOT <= n) vload(in[k], (const S *)src + i0);
    }
  }
  static FPK_HDT void part(mx_part &p, const raw &in, const void *src, int64_t n, int64_t t, bool aligned) {
    int64_t i0 = t * MX_SLOT;
    const S *s = (const S *)src + i0;
    p.amax = 0;
    if (aligned && i0 + MX_SLOT <= n) {
FPK_UNROLL
      for (int j = 0; j < MX_SLOT; j++) p.v[j] = elt<ST>::get(in.e[j]);
    } else {
      for (int j = 0; j < MX_SLOT; j++) p.v[j] = i0 + j < n ? elt<ST>::get(s[j]) : 0.0f;
    }
FPK_UNROLL
    for (int j = 0; j < MX_SLOT; j++) p.amax = mx_max(p.amax, fpkc_abs_bits(p.v[j]));
  }
};

/* write slot t's elements, and (even t) its block's scale, given the amax
 * of the whole block (mx_max of the partners': a NaN or Inf in either
 * makes the block NaN, scale 0xFF, every byte 0x7F) */
FPK_HDT void mx_store(uint8_t *dst, uint8_t *scales, int64_t n, int64_t t, const mx_part &p, uint32_t amax,
                      bool aligned) {
  int64_t i0 = t * MX_SLOT;
  if (i0 >= n) return;
  int bad = amax >= 0x7f800000u;
  uint8_t sb = bad ? 0xff : fpkc_mx_scale_byte(amax);
  if ((t & 1) == 0) scales[t / 2] = sb;
  pack<uint8_t, MX_SLOT> out;
  float inv = fpkc_mx_inv_scale(bad ? 0 : sb);
FPK_UNROLL
  for (int j = 0; j < MX_SLOT; j += 2)
    to_e4m3x2_finite(out.e[j], out.e[j + 1], fpkc_mul_rn(p.v[j], inv), fpkc_mul_rn(p.v[j + 1], inv));
  if (bad)
FPK_UNROLL
    for (int j = 0; j < MX_SLOT; j++) out.e[j] = 0x7f;
  if (aligned && i0 + MX_SLOT <= n) vstore(dst + i0, out);
  else
    for (int64_t j = 0; j < MX_SLOT && i0 + j < n; j++) dst[i0 + j] = out.e[j];
}

/* dequantize: U slots of SLOT elements (each inside one block) a thread a
 * pass, SLOT such that the destination moves 16 bytes a lane (8 to bf16 or
 * fp16, 4 to fp32: the widening casts' decision above; it was 16, two or
 * four strided 16-byte stores a lane, 0.63 of a copy on the H200); the bytes
 * and the scale bytes of all U are loaded first */
#ifdef FPK_HW_E4M3
/* one dequantized bf16 by the instructions (x: the e4m3 byte v as fp32, by
 * the hardware): ref.c's result bit for bit - an e4m3 NaN (and a NaN
 * block) gives ref.c's canonical quiet NaN 0x7fc0, every other value is
 * finite or Inf after the exact product's rounding, which the instruction
 * rounds to nearest even as fpkc_f32_to_bf16 does */
__device__ __forceinline__ uint16_t dq_bf16(uint8_t v, float x, float s, bool nan) {
  uint16_t r = __bfloat16_as_ushort(__float2bfloat16_rn(__fmul_rn(x, s)));
  return nan || (v & 0x7fu) == 0x7fu ? (uint16_t)0x7fc0u : r;
}
#endif

template <int DT> struct dequant_k {
  typedef typename elt<DT>::T D;
  enum { SLOT = 16 / (int)sizeof(D) };
  static constexpr int U = per_thread<SLOT>::U;
  static FPK_HDT void tile(void *dst, const uint8_t *src, const uint8_t *scales, int64_t n, int64_t t0,
                           bool aligned) {
    D *d = (D *)dst;
    pack<uint8_t, SLOT> in[U];
    uint8_t sb[U];
FPK_UNROLL
    for (int k = 0; k < U; k++) {
      int64_t i0 = (t0 + (int64_t)k * THREADS) * SLOT;
      sb[k] = i0 < n ? scales[i0 / 32] : 0;
      if (aligned && i0 + SLOT <= n) vload(in[k], src + i0);
    }
FPK_UNROLL
    for (int k = 0; k < U; k++) {
      int64_t i0 = (t0 + (int64_t)k * THREADS) * SLOT;
      if (i0 >= n) continue;
      bool nan = sb[k] == 0xff;
      float s = fpkc_mx_scale(nan ? 0 : sb[k]);
      if (aligned && i0 + SLOT <= n) {
        pack<D, SLOT> out;
#ifdef FPK_HW_E4M3
        if (DT == FP_BF16) { /* the instructions: e4m3x2 -> f16x2 (exact), f16 -> f32, x s, -> bf16 (RNE) */
FPK_UNROLL
          for (int j = 0; j < SLOT; j += 2) {
            __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)(in[k].e[j] | (in[k].e[j + 1] << 8)), __NV_E4M3);
            float2 f = __half22float2(__half2(h));
            out.e[j] = (D)dq_bf16(in[k].e[j], f.x, s, nan);
            out.e[j + 1] = (D)dq_bf16(in[k].e[j + 1], f.y, s, nan);
          }
        } else
#endif
FPK_UNROLL
        for (int j = 0; j < SLOT; j++)
          out.e[j] = elt<DT>::put(nan ? fpkc_u2f(0x7fc00000u) : fpkc_canon(fpkc_mul_rn(fpkc_e4m3_to_f32_sel(in[k].e[j]), s)));
        vstore(d + i0, out);
      } else {
        for (int64_t j = 0; j < SLOT && i0 + j < n; j++)
          d[i0 + j] = elt<DT>::put(nan ? fpkc_u2f(0x7fc00000u)
                                       : fpkc_canon(fpkc_mul_rn(fpkc_e4m3_to_f32_sel(src[i0 + j]), s)));
      }
    }
  }
};

/* ---- MXFP8 in two steps (a block split between processes) ----------------------------- */
/* block b's scale byte alone (one thread a block: these run on the few
 * blocks a shard boundary cuts, not on whole tensors) */
template <int ST> FPK_HDT void mx_scale_block(uint8_t *scales, const void *src, int64_t n, int64_t b) {
  const typename elt<ST>::T *s = (const typename elt<ST>::T *)src;
  uint32_t amax = 0;
  int bad = 0;
  for (int64_t i = b * 32; i < n && i < b * 32 + 32; i++) {
    uint32_t a = fpkc_abs_bits(elt<ST>::get(s[i]));
    if (a >= 0x7f800000u) bad = 1;
    else if (a > amax) amax = a;
  }
  scales[b] = bad ? 0xff : fpkc_mx_scale_byte(amax);
}

/* element i at its block's given scale byte (0xFF: NaN) */
template <int ST> FPK_HDT void mx_scaled_elem(uint8_t *dst, const uint8_t *scales, const void *src, int64_t i) {
  uint8_t sb = scales[i / 32];
  dst[i] = sb == 0xff ? 0x7f
                       : to_e4m3(fpkc_mul_rn(elt<ST>::get(((const typename elt<ST>::T *)src)[i]),
                                                          fpkc_mx_inv_scale(sb)));
}

} /* namespace fpk */

#endif
