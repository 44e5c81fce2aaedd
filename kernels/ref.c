/* ref.c - the plain-C reference kernels (kernels.h): conversions between
 * fp32, bf16, fp16 and OCP E4M3 done on the bits, so that the rounding is
 * exactly round-to-nearest-even whatever the host's compiler and flags
 * (convert.h: the same definitions compile into the CUDA kernels), and the
 * array kernels built on them. Array kernels work in chunks: widen a
 * chunk of each operand to fp32, do the arithmetic in fp32, round once to
 * the destination. The rules are in kernels.h and docs/kernels.md. */
#include "kernels.h"
#include "convert.h"

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

static inline uint32_t f2u(float f) { return fpkc_f2u(f); }
static inline float u2f(uint32_t u) { return fpkc_u2f(u); }

/* ---- scalar conversions: the shared definitions (convert.h) ------------------ */
uint16_t fpk_f32_to_bf16(float x) { return fpkc_f32_to_bf16(x); }
float fpk_bf16_to_f32(uint16_t h) { return fpkc_bf16_to_f32(h); }
uint16_t fpk_f32_to_f16(float x) { return fpkc_f32_to_f16(x); }
float fpk_f16_to_f32(uint16_t h) { return fpkc_f16_to_f32(h); }
uint8_t fpk_f32_to_e4m3(float x) { return fpkc_f32_to_e4m3(x); }
float fpk_e4m3_to_f32(uint8_t v) { return fpkc_e4m3_to_f32(v); }

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
    for (int j = 0; j < k; j++) a[j] = fpkc_canon(a[j] + b[j]);
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
    for (int j = 0; j < k; j++) a[j] = fpkc_canon(a[j] * al);
    narrow(dst, dt, i, a, k);
  }
}

void fpk_div(void *dst, fp_dtype dt, double d, int64_t n) {
  FPK_CHECK(n >= 0, "fpk_div: negative count");
  FPK_CHECK(arith(dt), "fpk_div: dtype not fp32, bf16 or fp16");
  FPK_CHECK(d > 0, "fpk_div: divisor not positive");
  float dv = (float)d, a[CHUNK];
  for (int64_t i = 0; i < n; i += CHUNK) {
    int k = n - i < CHUNK ? (int)(n - i) : CHUNK;
    widen(a, dst, dt, i, k);
    for (int j = 0; j < k; j++) a[j] = fpkc_canon(a[j] / dv);
    narrow(dst, dt, i, a, k);
  }
}

void fpk_memset0(void *dst, int64_t bytes) {
  FPK_CHECK(bytes >= 0, "fpk_memset0: negative size");
  if (bytes > 0) memset(dst, 0, (size_t)bytes);
}

void fpk_reduce_sum(void *inout, const void *in, fp_dtype dt, int64_t n) { fpk_add(inout, dt, in, dt, n); }

/* ---- MXFP8 ---------------------------------------------------------------------- */
/* the scale rule and its powers of two: convert.h (fpkc_mx_scale_byte says
 * why the integer formula is ceil(log2(amax / 448))) */
static uint8_t mx_scale_byte(float amax) { return fpkc_mx_scale_byte(f2u(amax)); }
static float mx_inv_scale(uint8_t byte) { return fpkc_mx_inv_scale(byte); }
static float mx_scale(uint8_t byte) { return fpkc_mx_scale(byte); }

/* one block's scale byte: 0xFF when an element is NaN or +-Inf */
static uint8_t block_scale(const float *v, int k) {
  float amax = 0.0f;
  for (int j = 0; j < k; j++) {
    uint32_t a = f2u(v[j]) & 0x7fffffffu;
    if (a >= 0x7f800000u) return 0xff;
    if (u2f(a) > amax) amax = u2f(a);
  }
  return mx_scale_byte(amax);
}

/* one block's elements at scale byte sb (0xFF: every element NaN) */
static void block_quantize(uint8_t *dst, const float *v, int k, uint8_t sb) {
  if (sb == 0xff) {
    memset(dst, 0x7f, (size_t)k);
    return;
  }
  float inv = mx_inv_scale(sb);
  /* x * 2^-e is exact in fp32 unless it falls below 2^-126, where E4M3
   * rounds it to +-0 anyway; with e at least the block's own scale it is at
   * most 448, so nothing saturates (a smaller e, given to
   * fpk_quantize_mxfp8_scaled, saturates the largest at +-448) */
  for (int j = 0; j < k; j++) dst[j] = fpk_f32_to_e4m3(v[j] * inv);
}

/* block by block: each block's scale byte given (sin) or its own, written
 * to sout, its elements at that byte to dst (NULL: not wanted) */
static void mx_blocks(uint8_t *dst, uint8_t *sout, const uint8_t *sin, const void *src, fp_dtype st, int64_t n) {
  float v[FPK_MX_BLOCK];
  for (int64_t i = 0, blk = 0; i < n; i += FPK_MX_BLOCK, blk++) {
    int k = n - i < FPK_MX_BLOCK ? (int)(n - i) : FPK_MX_BLOCK;
    widen(v, src, st, i, k);
    uint8_t sb = sin ? sin[blk] : block_scale(v, k);
    if (sout) sout[blk] = sb;
    if (dst) block_quantize(dst + i, v, k, sb);
  }
}

void fpk_quantize_mxfp8(uint8_t *dst, uint8_t *scales, const void *src, fp_dtype st, int64_t n) {
  FPK_CHECK(n >= 0, "fpk_quantize_mxfp8: negative count");
  FPK_CHECK(arith(st), "fpk_quantize_mxfp8: source dtype not fp32, bf16 or fp16");
  mx_blocks(dst, scales, NULL, src, st, n);
}

void fpk_mxfp8_scales(uint8_t *scales, const void *src, fp_dtype st, int64_t n) {
  FPK_CHECK(n >= 0, "fpk_mxfp8_scales: negative count");
  FPK_CHECK(arith(st), "fpk_mxfp8_scales: source dtype not fp32, bf16 or fp16");
  mx_blocks(NULL, scales, NULL, src, st, n);
}

void fpk_quantize_mxfp8_scaled(uint8_t *dst, const uint8_t *scales, const void *src, fp_dtype st, int64_t n) {
  FPK_CHECK(n >= 0, "fpk_quantize_mxfp8_scaled: negative count");
  FPK_CHECK(arith(st), "fpk_quantize_mxfp8_scaled: source dtype not fp32, bf16 or fp16");
  mx_blocks(dst, NULL, scales, src, st, n);
}

void fpk_max_u8(uint8_t *dst, const uint8_t *a, const uint8_t *b, int64_t n) {
  FPK_CHECK(n >= 0, "fpk_max_u8: negative count");
  for (int64_t i = 0; i < n; i++) dst[i] = a[i] > b[i] ? a[i] : b[i];
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
      for (int j = 0; j < k; j++) v[j] = fpkc_canon(fpk_e4m3_to_f32(src[i + j]) * s);
    }
    narrow(dst, dt, i, v, k);
  }
}
