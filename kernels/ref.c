/* ref.c - the plain-C reference kernels (kernels.h): conversions between
 * fp32, bf16, fp16 and OCP E4M3 done on the bits, so that the rounding is
 * exactly round-to-nearest-even whatever the host's compiler and flags, and
 * the array kernels built on them. Array kernels work in chunks: widen a
 * chunk of each operand to fp32, do the arithmetic in fp32, round once to
 * the destination. The rules are in kernels.h and docs/kernels.md. */
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a caller bug (bad dtype, negative count): the FP_ASSERT convention, kept
 * here so that the kernels need nothing but libc */
static void fpk_bug(const char *file, int line, const char *what) __attribute__((noreturn));
static void fpk_bug(const char *file, int line, const char *what) {
  fflush(stdout);
  fprintf(stderr, "%s:%d: internal error: %s\n", file, line, what);
  exit(70);
}
#define FPK_CHECK(c, what) ((c) ? (void)0 : fpk_bug(__FILE__, __LINE__, what))

static inline uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* q = m >> shift rounded to nearest, ties to even (1 <= shift <= 31) */
static inline uint32_t rne_shift(uint32_t m, int shift) {
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return q;
}

/* ---- bf16 ------------------------------------------------------------------ */
uint16_t fpk_f32_to_bf16(float x) {
  uint32_t u = f2u(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: quiet */
  /* add just under half an ulp, plus one when the kept part is odd: a carry
   * out of the low 16 bits is the rounding up (into the exponent, to Inf) */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float fpk_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

/* ---- fp16 ------------------------------------------------------------------ */
uint16_t fpk_f32_to_f16(float x) {
  uint32_t u = f2u(x), a = u & 0x7fffffffu;
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
  return (uint16_t)(sign | rne_shift(m, 126 - e)); /* may round up to 0x0400, the smallest normal */
}

float fpk_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return u2f(sign | 0x7f800000u | (m << 13)); /* Inf, NaN (payload kept) */
  if (e != 0) return u2f(sign | ((e + 112u) << 23) | (m << 13));
  float v = (float)m * 0x1p-24f; /* subnormal or zero: exact */
  return sign ? -v : v;
}

/* ---- OCP E4M3 ---------------------------------------------------------------- */
uint8_t fpk_f32_to_e4m3(float x) {
  uint32_t u = f2u(x), a = u & 0x7fffffffu;
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
  return (uint8_t)(sign | rne_shift(m, 141 - e)); /* may round up to 0x08, the smallest normal */
}

float fpk_e4m3_to_f32(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24, e = (v >> 3) & 0xfu, m = v & 7u;
  if (e == 0xf && m == 7) return u2f(sign | 0x7fc00000u);
  if (e != 0) return u2f(sign | ((e + 120u) << 23) | (m << 20));
  float r = (float)m * 0x1p-9f;
  return sign ? -r : r;
}

/* ---- chunked widening and narrowing ------------------------------------------ */
#define CHUNK 256

/* the dtypes fpk_cast takes, and the arithmetic ones (fp32, bf16, fp16) */
static bool castable(fp_dtype t) { return t == FP_F32 || t == FP_BF16 || t == FP_F16 || t == FP_E4M3; }
static bool arith(fp_dtype t) { return t == FP_F32 || t == FP_BF16 || t == FP_F16; }

static void widen(float *out, const void *src, fp_dtype t, int64_t i0, int k) {
  switch (t) {
  case FP_F32: memcpy(out, (const float *)src + i0, (size_t)k * 4); break;
  case FP_BF16: {
    const uint16_t *s = (const uint16_t *)src + i0;
    for (int i = 0; i < k; i++) out[i] = fpk_bf16_to_f32(s[i]);
    break;
  }
  case FP_F16: {
    const uint16_t *s = (const uint16_t *)src + i0;
    for (int i = 0; i < k; i++) out[i] = fpk_f16_to_f32(s[i]);
    break;
  }
  case FP_E4M3: {
    const uint8_t *s = (const uint8_t *)src + i0;
    for (int i = 0; i < k; i++) out[i] = fpk_e4m3_to_f32(s[i]);
    break;
  }
  default: fpk_bug(__FILE__, __LINE__, "kernel given a dtype it does not take");
  }
}

static void narrow(void *dst, fp_dtype t, int64_t i0, const float *in, int k) {
  switch (t) {
  case FP_F32: memcpy((float *)dst + i0, in, (size_t)k * 4); break;
  case FP_BF16: {
    uint16_t *d = (uint16_t *)dst + i0;
    for (int i = 0; i < k; i++) d[i] = fpk_f32_to_bf16(in[i]);
    break;
  }
  case FP_F16: {
    uint16_t *d = (uint16_t *)dst + i0;
    for (int i = 0; i < k; i++) d[i] = fpk_f32_to_f16(in[i]);
    break;
  }
  case FP_E4M3: {
    uint8_t *d = (uint8_t *)dst + i0;
    for (int i = 0; i < k; i++) d[i] = fpk_f32_to_e4m3(in[i]);
    break;
  }
  default: fpk_bug(__FILE__, __LINE__, "kernel given a dtype it does not take");
  }
}

/* ---- array kernels ------------------------------------------------------------ */
void fpk_cast(void *dst, fp_dtype dt, const void *src, fp_dtype st, int64_t n) {
  FPK_CHECK(n >= 0, "fpk_cast: negative count");
  FPK_CHECK(castable(dt) && castable(st), "fpk_cast: dtype not fp32, bf16, fp16 or e4m3");
  if (n == 0) return;
  if (dt == st) {
    memmove(dst, src, (size_t)n * (size_t)(dt == FP_F32 ? 4 : dt == FP_E4M3 ? 1 : 2));
    return;
  }
  float buf[CHUNK];
  for (int64_t i = 0; i < n; i += CHUNK) {
    int k = n - i < CHUNK ? (int)(n - i) : CHUNK;
    widen(buf, src, st, i, k);
    narrow(dst, dt, i, buf, k);
  }
}

void fpk_add(void *dst, fp_dtype dt, const void *src, fp_dtype st, int64_t n) {
  FPK_CHECK(n >= 0, "fpk_add: negative count");
  FPK_CHECK(arith(dt) && arith(st), "fpk_add: dtype not fp32, bf16 or fp16");
  float a[CHUNK], b[CHUNK];
  for (int64_t i = 0; i < n; i += CHUNK) {
    int k = n - i < CHUNK ? (int)(n - i) : CHUNK;
    widen(a, dst, dt, i, k);
    widen(b, src, st, i, k);
    for (int j = 0; j < k; j++) a[j] += b[j];
    narrow(dst, dt, i, a, k);
  }
}

void fpk_scale(void *dst, fp_dtype dt, double alpha, int64_t n) {
  FPK_CHECK(n >= 0, "fpk_scale: negative count");
  FPK_CHECK(arith(dt), "fpk_scale: dtype not fp32, bf16 or fp16");
  float al = (float)alpha, a[CHUNK];
  for (int64_t i = 0; i < n; i += CHUNK) {
    int k = n - i < CHUNK ? (int)(n - i) : CHUNK;
    widen(a, dst, dt, i, k);
    for (int j = 0; j < k; j++) a[j] *= al;
    narrow(dst, dt, i, a, k);
  }
}

void fpk_memset0(void *dst, int64_t bytes) {
  FPK_CHECK(bytes >= 0, "fpk_memset0: negative size");
  if (bytes > 0) memset(dst, 0, (size_t)bytes);
}

void fpk_reduce_sum(void *inout, const void *in, fp_dtype dt, int64_t n) { fpk_add(inout, dt, in, dt, n); }

/* ---- MXFP8 ---------------------------------------------------------------------- */
/* The biased E8M0 exponent of 2^ceil(log2(amax/448)) for a finite amax >= 0,
 * clamped at 0 (2^-127). With amax = (1 + M/2^23) * 2^(E-127) (E the biased
 * exponent, M the mantissa field) and 448 = 1.75 * 2^8:
 * amax/448 = ((1 + M/2^23) / 1.75) * 2^(E-135), where the first factor lies
 * in (4/7, 8/7); it is at most 1 exactly when M <= 0x600000 (1.75 itself).
 * So e = E - 135 + (M > 0x600000), and the byte e + 127 = E - 8 + (M >
 * 0x600000): exact integer arithmetic, at most 247 (e = 120). A subnormal or
 * zero amax (E = 0) gives e < -127: clamped to byte 0. */
static uint8_t mx_scale_byte(float amax) {
  uint32_t u = f2u(amax);
  int E = (int)(u >> 23), b = E - 8 + ((u & 0x7fffffu) > 0x600000u);
  return (uint8_t)(b < 0 ? 0 : b);
}

/* 2^(127 - byte) as fp32 (byte 0..254): the factor that takes a block's
 * values into E4M3 range; 2^127 is still normal */
static float mx_inv_scale(uint8_t byte) {
  int e = 127 - (int)byte; /* -127 .. 127 */
  return e >= -126 ? u2f((uint32_t)(e + 127) << 23) : u2f(0x00400000u); /* 2^-127 is subnormal */
}

/* 2^(byte - 127) as fp32 (byte 0..254) */
static float mx_scale(uint8_t byte) { return byte ? u2f((uint32_t)byte << 23) : u2f(0x00400000u); }

void fpk_quantize_mxfp8(uint8_t *dst, uint8_t *scales, const void *src, fp_dtype st, int64_t n) {
  FPK_CHECK(n >= 0, "fpk_quantize_mxfp8: negative count");
  FPK_CHECK(arith(st), "fpk_quantize_mxfp8: source dtype not fp32, bf16 or fp16");
  float v[FPK_MX_BLOCK];
  for (int64_t i = 0, blk = 0; i < n; i += FPK_MX_BLOCK, blk++) {
    int k = n - i < FPK_MX_BLOCK ? (int)(n - i) : FPK_MX_BLOCK;
    widen(v, src, st, i, k);
    float amax = 0.0f;
    bool finite = true;
    for (int j = 0; j < k; j++) {
      uint32_t a = f2u(v[j]) & 0x7fffffffu;
      if (a >= 0x7f800000u) finite = false;
      else if (u2f(a) > amax) amax = u2f(a);
    }
    if (!finite) { /* NaN or Inf: the whole block NaN */
      scales[blk] = 0xff;
      memset(dst + i, 0x7f, (size_t)k);
      continue;
    }
    uint8_t sb = mx_scale_byte(amax);
    float inv = mx_inv_scale(sb);
    scales[blk] = sb;
    /* x * 2^-e is exact in fp32 unless it falls below 2^-126, where E4M3
     * rounds it to +-0 anyway; it is at most 448, so nothing saturates */
    for (int j = 0; j < k; j++) dst[i + j] = fpk_f32_to_e4m3(v[j] * inv);
  }
}

void fpk_dequantize_mxfp8(void *dst, fp_dtype dt, const uint8_t *src, const uint8_t *scales, int64_t n) {
  FPK_CHECK(n >= 0, "fpk_dequantize_mxfp8: negative count");
  FPK_CHECK(arith(dt), "fpk_dequantize_mxfp8: destination dtype not fp32, bf16 or fp16");
  float v[FPK_MX_BLOCK];
  for (int64_t i = 0, blk = 0; i < n; i += FPK_MX_BLOCK, blk++) {
    int k = n - i < FPK_MX_BLOCK ? (int)(n - i) : FPK_MX_BLOCK;
    uint8_t sb = scales[blk];
    if (sb == 0xff) {
      for (int j = 0; j < k; j++) v[j] = u2f(0x7fc00000u);
    } else {
      /* e4m3 has 4 significant bits and its smallest step is 2^-9: the
       * product, at least 2^-136 apart from 0, is exact in fp32 or past
       * its range (Inf) */
      float s = mx_scale(sb);
      for (int j = 0; j < k; j++) v[j] = fpk_e4m3_to_f32(src[i + j]) * s;
    }
    narrow(dst, dt, i, v, k);
  }
}
