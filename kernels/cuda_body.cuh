/* cuda_body.cuh - what one CUDA thread of each kernel does, as __host__
 * __device__ functions of a "slot" index, so that kernels.cu runs them in
 * grid-stride loops on the GPU and tests/test_kernels_emul.cu runs the very
 * same code on the host, slot by slot, against the C references - the
 * indexing, vector and tail logic is checked without a GPU.
 *
 * A slot is V consecutive elements, V chosen so that the narrower operand
 * moves 16 bytes (V = 16 / the smaller element size): fp32 -> bf16 is 8
 * elements (32 bytes in, 16 out), e4m3 -> fp32 16 (16 in, 64 out). When
 * every pointer of a launch is 16-byte aligned (`aligned`, decided once per
 * launch) a full slot moves as 16-byte loads and stores (uint4); the last,
 * partial slot and unaligned launches go element by element. Every element
 * is computed as in ref.c: widen to fp32 (convert.h), one fp32 operation,
 * one rounding - so the results are the reference's, bit for bit.
 *
 * MXFP8 quantization: a slot is 16 elements, two slots per 32-element block;
 * each slot loads and finds its amax and whether it holds a NaN/Inf
 * (mx_load), the two partners combine theirs (a lane shuffle on the GPU),
 * then each writes its elements and the even one the block's scale
 * (mx_store). Only C++ that nvcc compiles for both sides is used. */
#ifndef FP_KERNELS_CUDA_BODY_CUH
#define FP_KERNELS_CUDA_BODY_CUH

#include <stdint.h>
#include <string.h>

extern "C" {
#include "base/base.h" /* fp_dtype */
}
#include "kernels/convert.h"

#define FPK_HDT __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define FPK_UNROLL _Pragma("unroll")
#else
#define FPK_UNROLL
#endif

namespace fpk {

/* ---- element types --------------------------------------------------------------- */
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
  static FPK_HDT float get(T v) { return fpkc_f16_to_f32(v); }
  static FPK_HDT T put(float f) { return fpkc_f32_to_f16(f); }
};
template <> struct elt<FP_E4M3> {
  typedef uint8_t T;
  static FPK_HDT float get(T v) { return fpkc_e4m3_to_f32(v); }
  static FPK_HDT T put(float f) { return fpkc_f32_to_e4m3(f); }
};

/* elements per slot for a pair of element sizes: the narrower moves 16 bytes */
template <int A, int B> struct vec {
  enum { SA = (int)sizeof(typename elt<A>::T), SB = (int)sizeof(typename elt<B>::T) };
  enum { V = 16 / (SA < SB ? SA : SB) };
};

/* V elements of T, 16-byte aligned so they load and store as uint4 */
template <typename T, int V> struct alignas(16) pack {
  T e[V];
};

/* a full slot from / to 16-byte aligned memory; V * sizeof(T) is a
 * multiple of 16 */
template <typename T, int V> FPK_HDT void vload(pack<T, V> &p, const T *src) {
#ifdef __CUDA_ARCH__
  const uint4 *q = reinterpret_cast<const uint4 *>(src);
  uint4 *o = reinterpret_cast<uint4 *>(p.e);
FPK_UNROLL
  for (int i = 0; i < (int)(V * sizeof(T) / 16); i++) o[i] = q[i];
#else
  memcpy(p.e, src, sizeof p.e);
#endif
}
template <typename T, int V> FPK_HDT void vstore(T *dst, const pack<T, V> &p) {
#ifdef __CUDA_ARCH__
  const uint4 *q = reinterpret_cast<const uint4 *>(p.e);
  uint4 *o = reinterpret_cast<uint4 *>(dst);
FPK_UNROLL
  for (int i = 0; i < (int)(V * sizeof(T) / 16); i++) o[i] = q[i];
#else
  memcpy(dst, p.e, sizeof p.e);
#endif
}

/* ---- elementwise kernels: cast, add, scale --------------------------------------------- */
/* the number of slots of n elements */
template <int V> FPK_HDT int64_t nslots(int64_t n) { return (n + V - 1) / V; }

/* dst[i] = round_DT(widen_ST(src[i])), slot t */
template <int DT, int ST> FPK_HDT void cast_slot(void *dst, const void *src, int64_t n, int64_t t, bool aligned) {
  typedef typename elt<DT>::T D;
  typedef typename elt<ST>::T S;
  enum { V = vec<DT, ST>::V };
  int64_t i0 = t * V;
  D *d = (D *)dst + i0;
  const S *s = (const S *)src + i0;
  if (aligned && i0 + V <= n) {
    pack<S, V> in;
    pack<D, V> out;
    vload(in, s);
FPK_UNROLL
    for (int j = 0; j < V; j++) out.e[j] = elt<DT>::put(elt<ST>::get(in.e[j]));
    vstore(d, out);
  } else {
    for (int64_t j = 0; j < V && i0 + j < n; j++) d[j] = elt<DT>::put(elt<ST>::get(s[j]));
  }
}

/* dst[i] = round_DT(canon(widen(dst[i]) + widen(src[i]))); dst may be src
 * (same dtype): each element is read before it is written */
template <int DT, int ST> FPK_HDT void add_slot(void *dst, const void *src, int64_t n, int64_t t, bool aligned) {
  typedef typename elt<DT>::T D;
  typedef typename elt<ST>::T S;
  enum { V = vec<DT, ST>::V };
  int64_t i0 = t * V;
  D *d = (D *)dst + i0;
  const S *s = (const S *)src + i0;
  if (aligned && i0 + V <= n) {
    pack<S, V> b;
    pack<D, V> a;
    vload(b, s);
    vload(a, d);
FPK_UNROLL
    for (int j = 0; j < V; j++) a.e[j] = elt<DT>::put(fpkc_canon(elt<DT>::get(a.e[j]) + elt<ST>::get(b.e[j])));
    vstore(d, a);
  } else {
    for (int64_t j = 0; j < V && i0 + j < n; j++)
      d[j] = elt<DT>::put(fpkc_canon(elt<DT>::get(d[j]) + elt<ST>::get(s[j])));
  }
}

/* dst[i] = round_DT(canon(widen(dst[i]) * alpha)), alpha already fp32 */
template <int DT> FPK_HDT void scale_slot(void *dst, float alpha, int64_t n, int64_t t, bool aligned) {
  typedef typename elt<DT>::T D;
  enum { V = vec<DT, DT>::V };
  int64_t i0 = t * V;
  D *d = (D *)dst + i0;
  if (aligned && i0 + V <= n) {
    pack<D, V> a;
    vload(a, d);
FPK_UNROLL
    for (int j = 0; j < V; j++) a.e[j] = elt<DT>::put(fpkc_canon(elt<DT>::get(a.e[j]) * alpha));
    vstore(d, a);
  } else {
    for (int64_t j = 0; j < V && i0 + j < n; j++) d[j] = elt<DT>::put(fpkc_canon(elt<DT>::get(d[j]) * alpha));
  }
}

/* ---- 2-D copy: rows x width bytes between pitched rows ------------------------------------ */
/* unit: the widest of 16, 8, 4, 2, 1 bytes dividing both pointers, both
 * pitches and the width (decided once per launch); element u of row r */
template <typename U> FPK_HDT void copy_unit(void *dst, int64_t dpitch, const void *src, int64_t spitch, int64_t r,
                                             int64_t u) {
  *((U *)((char *)dst + r * dpitch) + u) = *((const U *)((const char *)src + r * spitch) + u);
}

/* ---- MXFP8 ------------------------------------------------------------------------------- */
enum { MX_SLOT = 16 }; /* elements per slot: two slots per block of FPK_MX_BLOCK (32) */

struct mx_part {       /* one slot of a block, loaded */
  float v[MX_SLOT];
  uint32_t amax;       /* the largest |x| bits over the slot's finite elements */
  int bad;             /* a NaN or Inf among them */
};

/* load slot t of src (elements [16t, 16t + 16) that exist) */
template <int ST> FPK_HDT void mx_load(mx_part &p, const void *src, int64_t n, int64_t t, bool aligned) {
  typedef typename elt<ST>::T S;
  int64_t i0 = t * MX_SLOT;
  const S *s = (const S *)src + i0;
  p.amax = 0;
  p.bad = 0;
  if (aligned && i0 + MX_SLOT <= n) {
    pack<S, MX_SLOT> in;
    vload(in, s);
FPK_UNROLL
    for (int j = 0; j < MX_SLOT; j++) p.v[j] = elt<ST>::get(in.e[j]);
  } else {
    for (int j = 0; j < MX_SLOT; j++) p.v[j] = i0 + j < n ? elt<ST>::get(s[j]) : 0.0f;
  }
FPK_UNROLL
  for (int j = 0; j < MX_SLOT; j++) {
    uint32_t a = fpkc_abs_bits(p.v[j]);
    if (a >= 0x7f800000u) p.bad = 1;
    else if (a > p.amax) p.amax = a;
  }
}

/* write slot t's elements, and (even t) its block's scale, given the amax
 * and badness of the whole block */
FPK_HDT void mx_store(uint8_t *dst, uint8_t *scales, int64_t n, int64_t t, const mx_part &p, uint32_t amax, int bad,
                      bool aligned) {
  int64_t i0 = t * MX_SLOT;
  if (i0 >= n) return;
  uint8_t sb = bad ? 0xff : fpkc_mx_scale_byte(amax);
  if ((t & 1) == 0) scales[t / 2] = sb;
  pack<uint8_t, MX_SLOT> out;
  if (bad) {
FPK_UNROLL
    for (int j = 0; j < MX_SLOT; j++) out.e[j] = 0x7f;
  } else {
    float inv = fpkc_mx_inv_scale(sb);
FPK_UNROLL
    for (int j = 0; j < MX_SLOT; j++) out.e[j] = fpkc_f32_to_e4m3(p.v[j] * inv);
  }
  if (aligned && i0 + MX_SLOT <= n) vstore(dst + i0, out);
  else
    for (int64_t j = 0; j < MX_SLOT && i0 + j < n; j++) dst[i0 + j] = out.e[j];
}

/* dequantize slot t (16 elements, inside one block) */
template <int DT> FPK_HDT void dq_slot(void *dst, const uint8_t *src, const uint8_t *scales, int64_t n, int64_t t,
                                       bool aligned) {
  typedef typename elt<DT>::T D;
  int64_t i0 = t * MX_SLOT;
  if (i0 >= n) return;
  uint8_t sb = scales[i0 / 32];
  float s = fpkc_mx_scale(sb == 0xff ? 0 : sb);
  D *d = (D *)dst + i0;
  if (aligned && i0 + MX_SLOT <= n) {
    pack<uint8_t, MX_SLOT> in;
    pack<D, MX_SLOT> out;
    vload(in, src + i0);
FPK_UNROLL
    for (int j = 0; j < MX_SLOT; j++)
      out.e[j] = elt<DT>::put(sb == 0xff ? fpkc_u2f(0x7fc00000u) : fpkc_canon(fpkc_e4m3_to_f32(in.e[j]) * s));
    vstore(d, out);
  } else {
    for (int64_t j = 0; j < MX_SLOT && i0 + j < n; j++)
      d[j] = elt<DT>::put(sb == 0xff ? fpkc_u2f(0x7fc00000u) : fpkc_canon(fpkc_e4m3_to_f32(src[i0 + j]) * s));
  }
}

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
  dst[i] = sb == 0xff ? 0x7f : fpkc_f32_to_e4m3(elt<ST>::get(((const typename elt<ST>::T *)src)[i]) * fpkc_mx_inv_scale(sb));
}

} /* namespace fpk */

#endif
