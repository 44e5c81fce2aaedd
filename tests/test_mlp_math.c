/* test_mlp_math.c - train_mlp's own element conversions and arithmetic
 * (examples/mlp_math.h, written from the rules, not from the library)
 * against the executor's kernels (kernels/kernels.h), bit for bit: every
 * 16-bit input widened, fp32 inputs on a stride (every one with
 * FP_KERNELS_EXHAUSTIVE=1) narrowed to bf16 and fp16, and the add and scale
 * the reference trainer applies, on the edge cases and on pairs of the
 * stride. train_mlp's parity tests compare the two on the values a run
 * meets; this covers the rest (subnormals, ties, overflow, NaN payloads). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "examples/mlp_math.h"
#include "kernels/kernels.h"

static float f32(uint32_t u) { return mlp_float(u); }

static void test_widen(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    uint16_t v = (uint16_t)h;
    if (mlp_bits(mlp_from_bf16(v)) != mlp_bits(fpk_bf16_to_f32(v))) fail_msg("bf16 0x%04x", (unsigned)h);
    if (mlp_bits(mlp_from_fp16(v)) != mlp_bits(fpk_f16_to_f32(v))) fail_msg("fp16 0x%04x", (unsigned)h);
  }
}

static void check_narrow(uint32_t u) {
  float x = f32(u);
  uint16_t a = mlp_to_bf16(x), b = fpk_f32_to_bf16(x);
  if (a != b) fail_msg("bf16 of 0x%08x: 0x%04x, the kernels 0x%04x", (unsigned)u, (unsigned)a, (unsigned)b);
  a = mlp_to_fp16(x), b = fpk_f32_to_f16(x);
  if (a != b) fail_msg("fp16 of 0x%08x: 0x%04x, the kernels 0x%04x", (unsigned)u, (unsigned)a, (unsigned)b);
}

static void test_narrow(void **state) {
  (void)state;
  const char *e = getenv("FP_KERNELS_EXHAUSTIVE");
  uint64_t stride = e && !strcmp(e, "1") ? 1 : 9973; /* a prime: every residue of the low bits in turn */
  for (uint64_t u = 0; u <= 0xffffffffu; u += stride) check_narrow((uint32_t)u);
  /* the edges: around every binade boundary and tie of both targets, both signs */
  for (uint32_t E = 0; E < 256; E++)
    for (uint32_t s = 0; s < 2; s++)
      for (int d = -3; d <= 3; d++) {
        uint32_t base = (s << 31) | (E << 23);
        uint32_t ties[] = {0, 0x8000, 0x1000, 0x0800, 0x7fffff, 0x400000, 0x7f8000, 0x7ff000};
        for (size_t t = 0; t < sizeof ties / sizeof *ties; t++) check_narrow(base + ties[t] + (uint32_t)d);
      }
}

static const int dts[] = {FP_ELEM_FP32, FP_ELEM_BF16, FP_ELEM_FP16};
static fp_dtype kdt(int t) { return t == FP_ELEM_BF16 ? FP_BF16 : t == FP_ELEM_FP16 ? FP_F16 : FP_F32; }

/* the reference trainer's cast, add (dst += src) and scale on n pairs, in
 * every pair of dtypes, against fpk_cast, fpk_add and fpk_scale */
static void check_arith(const float *x, const float *y, int n) {
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      int dt = dts[i], st = dts[j];
      size_t dbytes = (size_t)n * (size_t)fp_elem_size((fp_elem)dt), sbytes = (size_t)n * (size_t)fp_elem_size((fp_elem)st);
      uint32_t a[64], src[64], got[64], want[64];
      for (int k = 0; k < n; k++) { /* the operands, in their dtypes */
        mlp_put(a, dt, k, x[k]);
        mlp_put(src, st, k, y[k]);
      }
      memcpy(got, a, dbytes), memcpy(want, a, dbytes);
      for (int k = 0; k < n; k++) mlp_add1(got, dt, src, st, k);
      fpk_add(want, kdt(dt), src, kdt(st), n);
      if (memcmp(got, want, dbytes)) fail_msg("add: dst %s, src %s", fp_elem_name((fp_elem)dt), fp_elem_name((fp_elem)st));
      for (int k = 0; k < n; k++) mlp_cast1(got, st, a, dt, k);
      fpk_cast(want, kdt(st), a, kdt(dt), n);
      if (memcmp(got, want, sbytes)) fail_msg("cast: %s to %s", fp_elem_name((fp_elem)dt), fp_elem_name((fp_elem)st));
    }
  for (int i = 0; i < 3; i++) { /* scale by an alpha that is not an fp32 value (rounded first), as the trainer's 1/(world GA) */
    int dt = dts[i];
    size_t dbytes = (size_t)n * (size_t)fp_elem_size((fp_elem)dt);
    uint32_t got[64], want[64];
    for (int k = 0; k < n; k++) mlp_put(got, dt, k, x[k]);
    memcpy(want, got, dbytes);
    double alpha = 1.0 / 3.0;
    for (int k = 0; k < n; k++) mlp_put(got, dt, k, mlp_canon(MLP_MUL(mlp_get(got, dt, k), (float)alpha)));
    fpk_scale(want, kdt(dt), alpha, n);
    if (memcmp(got, want, dbytes)) fail_msg("scale: %s", fp_elem_name((fp_elem)dt));
  }
}

static void test_arith(void **state) {
  (void)state;
  float inf = f32(0x7f800000u), nan1 = f32(0x7fa12345u), nan2 = f32(0xffc00001u);
  float x[] = {0.0f, -0.0f, 1.0f, 1.0f, -1.0f, inf, inf, nan1, 1.0f, 65504.0f, 3.3895314e38f, 1e-40f,
               f32(0x00000001u), 0x1p-24f, 0x1p-14f, 0.1f, -2.5f, 1.0f + 0x1p-8f, 1.0f, 7.0f};
  float y[] = {0.0f, 0.0f, 0x1p-8f, 0x1p-9f, 0x1p-11f, -inf, 1.0f, 1.0f, nan2, 16.0f, 3.3895314e38f, -1e-40f,
               f32(0x00000001u), 0x1p-25f, -0x1p-15f, 0.2f, 2.5f, 0x1p-9f, -0x1p-12f, 1e-3f};
  int n = (int)(sizeof x / sizeof *x);
  check_arith(x, y, n);
  float p[64], q[64]; /* pairs from the stride: arbitrary bit patterns, NaNs and all */
  uint32_t u = 0x12345678u;
  for (int round = 0; round < 2000; round++) {
    for (int k = 0; k < 64; k++) {
      u = u * 1664525u + 1013904223u;
      p[k] = f32(u);
      u = u * 1664525u + 1013904223u;
      q[k] = k % 2 ? f32(u) : f32((mlp_bits(p[k]) & 0xff800000u) | (u & 0x7fffffu)); /* same binade half the time */
    }
    check_arith(p, q, 64);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_widen),
      cmocka_unit_test(test_narrow),
      cmocka_unit_test(test_arith),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
