/* test_kernels.c - the reference kernels (kernels/ref.c) against values
 * worked out by hand (bit patterns derived in the comments next to them,
 * never produced by the code under test), exhaustive round trips of every
 * bf16, fp16 and e4m3 pattern, and a second, independent rounding oracle
 * (libm's rint on a double, scaled to the format's quantum) on many random
 * and boundary floats. FP_KERNELS_N=<count> raises the number of random
 * samples (default 400000). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/kernels.h"

static float bf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* ---- scalar conversions: hand values -------------------------------------- */
static void bf16_hand(void **state) {
  (void)state;
  assert_int_equal(fpk_f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(fpk_f32_to_bf16(-2.0f), 0xc000);
  /* 1 + 2^-8 is halfway between 1 (0x3f80) and 1 + 2^-7 (0x3f81): even */
  assert_int_equal(fpk_f32_to_bf16(1.00390625f), 0x3f80);
  assert_int_equal(fpk_f32_to_bf16(bf(0x3f808001)), 0x3f81); /* just above that tie */
  /* 1 + 3*2^-8 is halfway between 0x3f81 and 0x3f82: even */
  assert_int_equal(fpk_f32_to_bf16(1.01171875f), 0x3f82);
  assert_int_equal(fpk_f32_to_bf16(bf(0x3f817fff)), 0x3f81); /* just below it */
  assert_int_equal(fpk_f32_to_bf16(-0.0f), 0x8000);
  assert_int_equal(fpk_f32_to_bf16(0.0f), 0x0000);
  assert_int_equal(fpk_f32_to_bf16(INFINITY), 0x7f80);
  assert_int_equal(fpk_f32_to_bf16(-INFINITY), 0xff80);
  /* FLT_MAX = 0x7f7fffff: above the tie between 0x7f7f and 2^128 -> Inf */
  assert_int_equal(fpk_f32_to_bf16(FLT_MAX), 0x7f80);
  assert_int_equal(fpk_f32_to_bf16(-FLT_MAX), 0xff80);
  assert_int_equal(fpk_f32_to_bf16(bf(0x7f7f8000)), 0x7f80); /* the tie, 0x7f7f odd: up, to Inf */
  assert_int_equal(fpk_f32_to_bf16(bf(0x7f7f7fff)), 0x7f7f); /* bf16's largest */
  /* subnormals: 2^-133 = fp32 0x00010000 is bf16's smallest, 0x0001 */
  assert_int_equal(fpk_f32_to_bf16(bf(0x00010000)), 0x0001);
  assert_int_equal(fpk_f32_to_bf16(bf(0x00008000)), 0x0000); /* half of it: tie to even 0 */
  assert_int_equal(fpk_f32_to_bf16(bf(0x00018000)), 0x0002); /* 1.5 units: tie to even 2 */
  assert_int_equal(fpk_f32_to_bf16(bf(0x007fffff)), 0x0080); /* largest fp32 subnormal -> 2^-126 */
  /* NaN stays NaN, quiet, sign and high payload kept */
  assert_int_equal(fpk_f32_to_bf16(bf(0x7fc00000)), 0x7fc0);
  assert_int_equal(fpk_f32_to_bf16(bf(0x7f800001)), 0x7fc0); /* signalling, payload only low */
  assert_int_equal(fpk_f32_to_bf16(bf(0xffa12345)), 0xffe1);
  assert_int_equal(fpk_f32_to_bf16(bf(0x7fffffff)), 0x7fff); /* must not carry into the sign */

  assert_true(fpk_bf16_to_f32(0x3f80) == 1.0f);
  assert_true(fpk_bf16_to_f32(0x0001) == ldexpf(1.0f, -133));
  assert_true(fpk_bf16_to_f32(0xff80) == -INFINITY);
  assert_true(isnan(fpk_bf16_to_f32(0x7fc1)));
  assert_int_equal(bits(fpk_bf16_to_f32(0x8000)), 0x80000000u);
  assert_int_equal(bits(fpk_bf16_to_f32(0x7f81)), 0x7f810000u); /* payload as is */
}

static void f16_hand(void **state) {
  (void)state;
  assert_int_equal(fpk_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(fpk_f32_to_f16(-2.0f), 0xc000);
  assert_int_equal(fpk_f32_to_f16(65504.0f), 0x7bff);           /* largest */
  assert_int_equal(fpk_f32_to_f16(65519.0f), 0x7bff);           /* below the tie at 65520 */
  assert_int_equal(fpk_f32_to_f16(65520.0f), 0x7c00);           /* the tie, 0x7bff odd: Inf */
  assert_int_equal(fpk_f32_to_f16(-65520.0f), 0xfc00);
  assert_int_equal(fpk_f32_to_f16(1e10f), 0x7c00);
  assert_int_equal(fpk_f32_to_f16(-INFINITY), 0xfc00);
  assert_int_equal(fpk_f32_to_f16(1.00048828125f), 0x3c00);     /* 1 + 2^-11: tie, even */
  assert_int_equal(fpk_f32_to_f16(1.00146484375f), 0x3c02);     /* 1 + 3*2^-11: tie, even */
  assert_int_equal(fpk_f32_to_f16(0.333251953125f), 0x3555);    /* exactly (1+341/1024)/4 */
  /* subnormals, units of 2^-24 */
  assert_int_equal(fpk_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
  assert_int_equal(fpk_f32_to_f16(-ldexpf(1.0f, -24)), 0x8001);
  assert_int_equal(fpk_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);  /* half a unit: even 0 */
  assert_int_equal(fpk_f32_to_f16(bf(0x33000001)), 0x0001);     /* just above half */
  assert_int_equal(fpk_f32_to_f16(ldexpf(3.0f, -26)), 0x0001);  /* 0.75 unit */
  assert_int_equal(fpk_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);  /* 1.5 units: even 2 */
  assert_int_equal(fpk_f32_to_f16(ldexpf(5.0f, -25)), 0x0002);  /* 2.5 units: even 2 */
  assert_int_equal(fpk_f32_to_f16(ldexpf(1.0f, -14)), 0x0400);  /* smallest normal */
  assert_int_equal(fpk_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400); /* 1023.5 units: even 1024 */
  assert_int_equal(fpk_f32_to_f16(ldexpf(1023.0f, -24)), 0x03ff);
  assert_int_equal(fpk_f32_to_f16(ldexpf(1.0f, -30)), 0x0000);
  assert_int_equal(fpk_f32_to_f16(bf(0x00000001)), 0x0000); /* fp32 subnormal */
  assert_int_equal(fpk_f32_to_f16(-0.0f), 0x8000);
  /* NaN */
  assert_int_equal(fpk_f32_to_f16(bf(0x7fc00000)), 0x7e00);
  assert_int_equal(fpk_f32_to_f16(bf(0x7f800001)), 0x7e00);
  assert_int_equal(fpk_f32_to_f16(bf(0xffffffff)), 0xffff);

  assert_true(fpk_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
  assert_true(fpk_f16_to_f32(0x8001) == -ldexpf(1.0f, -24));
  assert_true(fpk_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
  assert_true(fpk_f16_to_f32(0x0400) == ldexpf(1.0f, -14));
  assert_true(fpk_f16_to_f32(0x7bff) == 65504.0f);
  assert_true(fpk_f16_to_f32(0x3555) == 0.333251953125f);
  assert_true(fpk_f16_to_f32(0xfc00) == -INFINITY);
  assert_true(isnan(fpk_f16_to_f32(0x7c01)));
  assert_int_equal(bits(fpk_f16_to_f32(0x8000)), 0x80000000u);
}

static void e4m3_hand(void **state) {
  (void)state;
  /* E4M3: bias 7; 1.0 = exponent field 7 -> 0 0111 000 */
  assert_int_equal(fpk_f32_to_e4m3(1.0f), 0x38);
  assert_int_equal(fpk_f32_to_e4m3(-1.0f), 0xb8);
  assert_int_equal(fpk_f32_to_e4m3(1.0625f), 0x38); /* 1 + 1/16: tie, even */
  assert_int_equal(fpk_f32_to_e4m3(1.1875f), 0x3a); /* between 1.125 (001) and 1.25 (010): even */
  assert_int_equal(fpk_f32_to_e4m3(240.0f), 0x77);  /* 1.875 * 2^7: 0 1110 111 */
  assert_int_equal(fpk_f32_to_e4m3(256.0f), 0x78);  /* 2^8: 0 1111 000 */
  assert_int_equal(fpk_f32_to_e4m3(448.0f), 0x7e);  /* 1.75 * 2^8: 0 1111 110, the largest */
  assert_int_equal(fpk_f32_to_e4m3(-448.0f), 0xfe);
  assert_int_equal(fpk_f32_to_e4m3(440.0f), 0x7e);  /* 416 + 24: nearer 448 */
  assert_int_equal(fpk_f32_to_e4m3(432.0f), 0x7e);  /* tie 416 (101) / 448 (110): even */
  assert_int_equal(fpk_f32_to_e4m3(449.0f), 0x7e);  /* saturate */
  assert_int_equal(fpk_f32_to_e4m3(464.0f), 0x7e);
  assert_int_equal(fpk_f32_to_e4m3(480.0f), 0x7e);  /* would be the NaN pattern */
  assert_int_equal(fpk_f32_to_e4m3(1e30f), 0x7e);
  assert_int_equal(fpk_f32_to_e4m3(INFINITY), 0x7e);
  assert_int_equal(fpk_f32_to_e4m3(-INFINITY), 0xfe);
  assert_int_equal(fpk_f32_to_e4m3(NAN), 0x7f);
  assert_int_equal(fpk_f32_to_e4m3(bf(0xffc00000)), 0x7f);
  assert_int_equal(fpk_f32_to_e4m3(-0.0f), 0x80);
  /* subnormals, units of 2^-9 */
  assert_int_equal(fpk_f32_to_e4m3(0.001953125f), 0x01); /* 2^-9 */
  assert_int_equal(fpk_f32_to_e4m3(ldexpf(1.0f, -10)), 0x00); /* half: even 0 */
  assert_int_equal(fpk_f32_to_e4m3(-ldexpf(1.0f, -10)), 0x80);
  assert_int_equal(fpk_f32_to_e4m3(ldexpf(3.0f, -11)), 0x01); /* 0.75 */
  assert_int_equal(fpk_f32_to_e4m3(ldexpf(3.0f, -10)), 0x02); /* 1.5: even 2 */
  assert_int_equal(fpk_f32_to_e4m3(ldexpf(7.0f, -9)), 0x07);
  assert_int_equal(fpk_f32_to_e4m3(ldexpf(7.5f, -9)), 0x08); /* tie 7/8: even, 2^-6 */
  assert_int_equal(fpk_f32_to_e4m3(ldexpf(1.0f, -6)), 0x08);
  assert_int_equal(fpk_f32_to_e4m3(ldexpf(1.0f, -20)), 0x00);

  assert_true(fpk_e4m3_to_f32(0x7e) == 448.0f);
  assert_true(fpk_e4m3_to_f32(0xfe) == -448.0f);
  assert_true(fpk_e4m3_to_f32(0x38) == 1.0f);
  assert_true(fpk_e4m3_to_f32(0x01) == 0.001953125f);
  assert_true(fpk_e4m3_to_f32(0x07) == ldexpf(7.0f, -9));
  assert_true(fpk_e4m3_to_f32(0x08) == ldexpf(1.0f, -6));
  assert_true(fpk_e4m3_to_f32(0x78) == 256.0f);
  assert_true(fpk_e4m3_to_f32(0x77) == 240.0f);
  assert_true(isnan(fpk_e4m3_to_f32(0x7f)));
  assert_true(isnan(fpk_e4m3_to_f32(0xff)));
  assert_int_equal(bits(fpk_e4m3_to_f32(0x80)), 0x80000000u);
  assert_true(fpk_e4m3_to_f32(0x00) == 0.0f);
}

/* ---- exhaustive round trips --------------------------------------------------- */
static void bf16_all_patterns(void **state) {
  (void)state;
  int nan = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = fpk_bf16_to_f32((uint16_t)h);
    assert_int_equal(bits(f), h << 16); /* widening is the bit shift */
    uint16_t back = fpk_f32_to_bf16(f);
    bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    if (is_nan) {
      nan++;
      assert_true((back & 0x7f80) == 0x7f80 && (back & 0x7f)); /* still NaN */
      assert_int_equal(back & 0x8000, h & 0x8000);
      assert_int_equal(back, h | 0x40); /* quiet bit set, nothing else changed */
    } else {
      assert_int_equal(back, h);
    }
  }
  assert_int_equal(nan, 2 * 127);
}

static void f16_all_patterns(void **state) {
  (void)state;
  int nan = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = fpk_f16_to_f32((uint16_t)h);
    uint16_t back = fpk_f32_to_f16(f);
    bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (is_nan) {
      nan++;
      assert_true(isnan(f));
      assert_int_equal(back, h | 0x200);
    } else {
      assert_false(isnan(f));
      assert_int_equal(back, h);
    }
  }
  assert_int_equal(nan, 2 * 1023);
}

static void e4m3_all_patterns(void **state) {
  (void)state;
  for (uint32_t v = 0; v < 256; v++) {
    float f = fpk_e4m3_to_f32((uint8_t)v);
    if ((v & 0x7f) == 0x7f) {
      assert_true(isnan(f));
      assert_int_equal(fpk_f32_to_e4m3(f), 0x7f);
      continue;
    }
    assert_int_equal(fpk_f32_to_e4m3(f), v);
    /* and each value lies between its neighbours (monotone) */
    if ((v & 0x7f) != 0 && (v & 0x7f) != 0x7e)
      assert_true(fabsf(fpk_e4m3_to_f32((uint8_t)(v - 1))) < fabsf(f) &&
                  fabsf(f) < fabsf(fpk_e4m3_to_f32((uint8_t)(v + 1))));
  }
}

/* ---- an independent oracle: round in double with libm -------------------------- */
/* x rounded to p significant bits, exponent at least emin, nearest even
 * (rint in the default rounding mode), overflow past max -> Inf or +-max */
static double oracle(double x, int p, int emin, double max, bool saturate) {
  if (x == 0 || isinf(x)) return saturate && isinf(x) ? copysign(max, x) : x;
  int e;
  frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  int q = (e - 1 > emin ? e - 1 : emin) - (p - 1);
  double r = ldexp(rint(ldexp(x, -q)), q);
  if (fabs(r) > max) return saturate ? copysign(max, x) : copysign(INFINITY, x);
  return r;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t next32(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}

static void check_oracle(float x) {
  if (isnan(x)) return;
  double want = oracle(x, 8, -126, ldexp(255.0, 120), false); /* bf16: largest (2-2^-7)*2^127 */
  double got = fpk_bf16_to_f32(fpk_f32_to_bf16(x));
  if (want != got || signbit(want) != signbit(got)) fail_msg("bf16 of %a: %a, oracle %a", x, got, want);
  want = oracle(x, 11, -14, 65504.0, false);
  got = fpk_f16_to_f32(fpk_f32_to_f16(x));
  if (want != got || signbit(want) != signbit(got)) fail_msg("fp16 of %a: %a, oracle %a", x, got, want);
  want = oracle(x, 4, -6, 448.0, true);
  got = fpk_e4m3_to_f32(fpk_f32_to_e4m3(x));
  if (want != got || signbit(want) != signbit(got)) fail_msg("e4m3 of %a: %a, oracle %a", x, got, want);
}

static void against_rint_oracle(void **state) {
  (void)state;
  const char *env = getenv("FP_KERNELS_N");
  long n = env ? atol(env) : 400000;
  for (long i = 0; i < n; i++) {
    uint32_t u = next32();
    check_oracle(bf(u));
    /* values near the interesting ranges: exponents of fp16 and e4m3 */
    check_oracle(bf((u & 0x807fffffu) | ((uint32_t)(100 + (u >> 23) % 50) << 23)));
  }
  /* every float with few low bits set near each rounding boundary */
  for (uint32_t e = 0; e < 255; e++)
    for (uint32_t m = 0; m < 64; m++) {
      uint32_t lo[] = {0, 1, 0xfff, 0x1000, 0x1001, 0x7fff, 0x8000, 0x8001, 0x7ffff, 0x80000, 0x80001};
      for (size_t k = 0; k < sizeof lo / sizeof lo[0]; k++) {
        uint32_t u = (e << 23) | (m << 17) | lo[k];
        check_oracle(bf(u));
        check_oracle(bf(u | 0x80000000u));
      }
    }
  check_oracle(FLT_MAX);
  check_oracle(INFINITY);
  check_oracle(-INFINITY);
}

/* ---- array kernels ------------------------------------------------------------- */
static void cast_arrays(void **state) {
  (void)state;
  float f[5] = {1.0f, 1.00390625f, 65520.0f, -0.0f, 448.0f};
  uint16_t b[5], h[5];
  uint8_t q[5];
  fpk_cast(b, FP_BF16, f, FP_F32, 5);
  uint16_t wb[5] = {0x3f80, 0x3f80, 0x4780, 0x8000, 0x43e0}; /* 65520 rounds to 65536 in bf16 */
  assert_memory_equal(b, wb, sizeof wb);
  fpk_cast(h, FP_F16, f, FP_F32, 5);
  uint16_t wh[5] = {0x3c00, 0x3c04, 0x7c00, 0x8000, 0x5f00}; /* 1 + 2^-8 exact; 448 = 1.75*2^8: 0 10111 1100000000 */
  assert_memory_equal(h, wh, sizeof wh);
  fpk_cast(q, FP_E4M3, f, FP_F32, 5);
  uint8_t wq[5] = {0x38, 0x38, 0x7e, 0x80, 0x7e};
  assert_memory_equal(q, wq, sizeof wq);
  /* bf16 -> fp16 goes through fp32 exactly: 2^-24 (bf16 0x3380) -> 0x0001, 65536 -> Inf */
  uint16_t b2[3] = {0x3380, 0x4780, 0xbf80}, h2[3];
  fpk_cast(h2, FP_F16, b2, FP_BF16, 3);
  uint16_t wh2[3] = {0x0001, 0x7c00, 0xbc00};
  assert_memory_equal(h2, wh2, sizeof wh2);
  /* e4m3 -> bf16: 448 = 0x43e0 */
  uint8_t q2[2] = {0x7e, 0x01};
  uint16_t b3[2];
  fpk_cast(b3, FP_BF16, q2, FP_E4M3, 2);
  assert_int_equal(b3[0], 0x43e0);
  assert_int_equal(b3[1], 0x3b00); /* 2^-9: exponent 118 = 0x76 -> 0 01110110 0000000 */
  /* same dtype: a bit copy, NaN payloads included; in place too */
  uint32_t nanbits[2] = {0x7f800001u, 0xffa12345u}, out[2];
  fpk_cast(out, FP_F32, nanbits, FP_F32, 2);
  assert_memory_equal(out, nanbits, sizeof out);
  fpk_cast(out, FP_F32, out, FP_F32, 2);
  assert_memory_equal(out, nanbits, sizeof out);
  fpk_cast(NULL, FP_F16, NULL, FP_F32, 0); /* n = 0 touches nothing */
}

static void add_scale_reduce(void **state) {
  (void)state;
  /* bf16: 1 + 2^-8 -> tie, stays 1; 1 + 1.5*2^-8 (0x3bc0) -> 1.005859375,
   * nearer 1 + 2^-7 -> 0x3f81; -1.5 + 1.5 -> +0; 2 + 2^-8 -> 2 (bf16 step
   * at 2 is 2^-6) */
  uint16_t d[4] = {0x3f80, 0x3f80, 0xbfc0, 0x4000};
  uint16_t s[4] = {0x3b80, 0x3bc0, 0x3fc0, 0x3b80};
  fpk_add(d, FP_BF16, s, FP_BF16, 4);
  uint16_t w[4] = {0x3f80, 0x3f81, 0x0000, 0x4000};
  assert_memory_equal(d, w, sizeof w);
  /* reduce_sum is the same in place: 1 + 0.5 = 1.5 (0x3fc0) */
  uint16_t io[3] = {0x3f80, 0x4000, 0xbfc0}, in[3] = {0x3f00, 0x3b80, 0x3fc0};
  fpk_reduce_sum(io, in, FP_BF16, 3);
  uint16_t wio[3] = {0x3fc0, 0x4000, 0x0000};
  assert_memory_equal(io, wio, sizeof wio);
  /* fp16: 65504 + 16 = 65520 -> Inf; 2048 + 1 -> tie, 2048 (0x6800);
   * 2048 + 3 -> tie 2050/2052 -> 2052 (0x6802) */
  uint16_t hd[3] = {0x7bff, 0x6800, 0x6800}, hs[3] = {0x4c00, 0x3c00, 0x4200};
  fpk_reduce_sum(hd, hs, FP_F16, 3);
  uint16_t wh[3] = {0x7c00, 0x6800, 0x6802};
  assert_memory_equal(hd, wh, sizeof wh);
  /* fp32 += bf16, mixed dtypes */
  float fd[2] = {1.0f, -3.0f};
  uint16_t bs[2] = {0x3f00, 0x4040};
  fpk_add(fd, FP_F32, bs, FP_BF16, 2);
  assert_true(fd[0] == 1.5f && fd[1] == 0.0f);
  /* scale in bf16: 3 * 0.1 -> alpha rounded to fp32 0x3dcccccd, the fp32
   * product 0.3000000045, whose bf16 is 1.0011010b * 2^-2 = 0x3e9a (the bits
   * after the 7 kept ones of 1.2 = 1.0011001|1001... round up); 1 * 0.5 */
  uint16_t sd[3] = {0x4040, 0x3f80, 0xff80};
  fpk_scale(sd, FP_BF16, 0.1, 2);
  assert_int_equal(sd[0], 0x3e9a);
  assert_int_equal(sd[1], 0x3dcd); /* 0.1f = 1.6*2^-4: 1.1001100|1100... -> 1.1001101 */
  fpk_scale(sd + 1, FP_BF16, 0.5, 2);
  assert_int_equal(sd[1], 0x3d4d); /* exact halving */
  assert_int_equal(sd[2], 0xff80); /* -Inf * 0.5 = -Inf */
  /* a NaN out of arithmetic is the canonical 0x7fc00000, whatever the
   * operands' payloads and signs (x86 would keep an operand's) */
  uint32_t na[3] = {0xffa12345u, 0x3f800000u, 0x7f800000u}, nb[3] = {0x3f800000u, 0x7f812345u, 0xff800000u};
  fpk_add(na, FP_F32, nb, FP_F32, 3); /* NaN + 1, 1 + sNaN, Inf + -Inf */
  for (int i = 0; i < 3; i++) assert_int_equal(na[i], 0x7fc00000u);
  uint32_t nc[2] = {0xffc00001u, 0x7f800000u};
  fpk_scale(nc, FP_F32, 2.0, 1);
  assert_int_equal(nc[0], 0x7fc00000u);
  fpk_scale(nc + 1, FP_F32, 0.0, 1); /* Inf * 0 */
  assert_int_equal(nc[1], 0x7fc00000u);
  uint16_t nh[1] = {0xfe01}, nh2[1] = {0x3c00};
  fpk_add(nh, FP_F16, nh2, FP_F16, 1);
  assert_int_equal(nh[0], 0x7e00);
  /* div (the MPI backend's average: the sum, then / G): correctly rounded
   * fp32 quotients, where multiplying by 1/3 would not be: 5/3 =
   * 1.6666666|66.. lies nearer 0x3fd55555 (1.66666663) than 0x3fd55556,
   * which is 5 * 0x3eaaaaab; 7/3 likewise; -6/3 = -2 exactly; then one
   * rounding into bf16 (1/3 = 0x3eaaaaab -> 0x3eab, the dropped 0xaaab is
   * above half) and fp16 (1/3 -> 0x3555) */
  uint32_t dv[4] = {0x40a00000u, 0x40e00000u, 0xc0c00000u, 0};
  fpk_div(dv, FP_F32, 3.0, 4);
  assert_int_equal(dv[0], 0x3fd55555u);
  assert_int_equal(dv[1], 0x40155555u);
  assert_int_equal(dv[2], 0xc0000000u);
  assert_int_equal(dv[3], 0);
  uint16_t dvb[1] = {0x3f80}, dvh[2] = {0x3c00, 0x4400};
  fpk_div(dvb, FP_BF16, 3.0, 1);
  assert_int_equal(dvb[0], 0x3eab);
  fpk_div(dvh, FP_F16, 3.0, 1);
  assert_int_equal(dvh[0], 0x3555);
  fpk_div(dvh + 1, FP_F16, 2.0, 1); /* 4 / 2 = 2 */
  assert_int_equal(dvh[1], 0x4000);
  /* long arrays cross the internal chunks */
  enum { N = 1000 };
  float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
  uint16_t *ab = malloc(N * 2);
  for (int i = 0; i < N; i++) a[i] = (float)i, b[i] = 2.0f * (float)i;
  fpk_add(a, FP_F32, b, FP_F32, N);
  fpk_scale(a, FP_F32, 1.0 / 3.0, N);
  for (int i = 0; i < N; i++) assert_true(a[i] == (float)(3 * i) * (float)(1.0 / 3.0));
  fpk_cast(ab, FP_BF16, a, FP_F32, N);
  fpk_memset0(a, N * 4);
  fpk_add(a, FP_F32, ab, FP_BF16, N);
  for (int i = 0; i < N; i++) assert_true(a[i] == fpk_bf16_to_f32(ab[i]));
  fpk_memset0(ab, 0);
  free(a), free(b), free(ab);
}

/* ---- MXFP8 ---------------------------------------------------------------------- */
static void mxfp8_hand(void **state) {
  (void)state;
  float x[FPK_MX_BLOCK] = {896.0f, 1.0f, -3.0f, 0.0f, 17.0f * 2, 19.0f * 2, -0.0f};
  uint8_t q[FPK_MX_BLOCK], s[1];
  fpk_quantize_mxfp8(q, s, x, FP_F32, FPK_MX_BLOCK);
  /* amax 896 = 2 * 448: ceil(log2(2)) = 1, byte 128 */
  assert_int_equal(s[0], 0x80);
  assert_int_equal(q[0], 0x7e); /* 448 */
  assert_int_equal(q[1], 0x30); /* 0.5 = 2^-1: 0 0110 000 */
  assert_int_equal(q[2], 0xbc); /* -1.5: 1 0111 100 */
  assert_int_equal(q[3], 0x00);
  assert_int_equal(q[4], 0x58); /* 17: tie 16 (0 1011 000) / 18: even 16 */
  assert_int_equal(q[5], 0x5a); /* 19: tie 18 (001) / 20 (010): even 20 */
  assert_int_equal(q[6], 0x80); /* -0 keeps its sign */
  float y[FPK_MX_BLOCK];
  fpk_dequantize_mxfp8(y, FP_F32, q, s, FPK_MX_BLOCK);
  assert_true(y[0] == 896.0f && y[1] == 1.0f && y[2] == -3.0f && y[4] == 32.0f && y[5] == 40.0f);
  assert_int_equal(bits(y[6]), 0x80000000u);

  /* the scale rule at its boundaries: 448 -> 2^0 (127); just above -> 2^1;
   * 224 -> 2^-1; 1 -> 1/448 = 2^-8.8 -> 2^-8 (119), and 1 * 2^8 = 256 (0x78) */
  float amax[] = {448.0f, bf(0x43e00001), 224.0f, bf(0x43600001), 1.0f};
  uint8_t want[] = {127, 128, 126, 127, 119};
  for (size_t i = 0; i < sizeof amax / sizeof amax[0]; i++) {
    float one[1] = {-amax[i]};
    uint8_t qq[1], ss[1];
    fpk_quantize_mxfp8(qq, ss, one, FP_F32, 1);
    assert_int_equal(ss[0], want[i]);
  }
  float one[1] = {1.0f};
  fpk_quantize_mxfp8(q, s, one, FP_F32, 1);
  assert_int_equal(q[0], 0x78);

  /* from bf16: 896 = 1.75 * 2^9 = 0x4460; into bf16 and fp16 */
  uint16_t xb[2] = {0x4460, 0x3f80}, yb[2], yh[2];
  fpk_quantize_mxfp8(q, s, xb, FP_BF16, 2);
  assert_int_equal(s[0], 0x80);
  assert_int_equal(q[0], 0x7e);
  fpk_dequantize_mxfp8(yb, FP_BF16, q, s, 2);
  assert_int_equal(yb[0], 0x4460);
  assert_int_equal(yb[1], 0x3f80);
  uint8_t big[1] = {0x88}; /* 2^9: 448 * 512 = 229376 > 65504 -> fp16 Inf */
  fpk_dequantize_mxfp8(yh, FP_F16, q, big, 2);
  assert_int_equal(yh[0], 0x7c00);
  assert_int_equal(yh[1], 0x5c00); /* 0.5 * 512 = 256: 0 10111 0000000000 */
}

/* a block split at every point between two holders: each computes its
 * part's scale, the max of the two is the block's, and each part quantized
 * at it gives the bytes of quantizing the whole block (planner/reshard.c's
 * split blocks); a NaN in either part makes the whole block NaN */
static void mxfp8_split_block(void **state) {
  (void)state;
  float x[FPK_MX_BLOCK];
  uint8_t want[FPK_MX_BLOCK], ws[1], got[FPK_MX_BLOCK], sa, sb, sm;
  uint32_t seed = 12345;
  for (int trial = 0; trial < 3; trial++)
    for (int k = 1; k < FPK_MX_BLOCK; k++) {
      for (int i = 0; i < FPK_MX_BLOCK; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (i < k ? 3.0f : 700.0f) * (trial == 1 ? 1e-30f : 1.0f);
      }
      if (trial == 2) x[k - 1] = NAN;
      fpk_quantize_mxfp8(want, ws, x, FP_F32, FPK_MX_BLOCK);
      fpk_mxfp8_scales(&sa, x, FP_F32, k);
      fpk_mxfp8_scales(&sb, x + k, FP_F32, FPK_MX_BLOCK - k);
      fpk_max_u8(&sm, &sa, &sb, 1);
      assert_int_equal(sm, ws[0]);
      if (trial != 2) assert_true(sa < sb); /* the larger part sets it */
      fpk_quantize_mxfp8_scaled(got, &sm, x, FP_F32, k);
      fpk_quantize_mxfp8_scaled(got + k, &sm, x + k, FP_F32, FPK_MX_BLOCK - k);
      assert_memory_equal(got, want, FPK_MX_BLOCK);
      /* the part quantized at its own scale differs: the max matters */
      if (trial == 0) {
        uint8_t own[FPK_MX_BLOCK];
        fpk_quantize_mxfp8_scaled(own, &sa, x, FP_F32, k);
        assert_memory_not_equal(own, want, (size_t)k);
      }
    }
  /* a scale below the block's own saturates its largest elements */
  float big[2] = {896.0f, -1.0f}; /* own scale 128 (mxfp8_hand) */
  uint8_t low = 127, q2[2];
  fpk_quantize_mxfp8_scaled(q2, &low, big, FP_F32, 2);
  assert_int_equal(q2[0], 0x7e); /* 896 at 2^0: past 448 */
  assert_int_equal(q2[1], 0xb8); /* -1: 1 0111 000 */
}

static void mxfp8_special(void **state) {
  (void)state;
  enum { N = 3 * FPK_MX_BLOCK + 8 }; /* four blocks, the last short */
  float x[N];
  for (int i = 0; i < N; i++) x[i] = 1.0f;
  x[5] = NAN;                          /* block 0: NaN */
  x[FPK_MX_BLOCK + 7] = -INFINITY;      /* block 1: Inf */
  for (int i = 2 * FPK_MX_BLOCK; i < 3 * FPK_MX_BLOCK; i++) x[i] = (i & 1) ? -0.0f : 0.0f; /* block 2: zeros */
  x[3 * FPK_MX_BLOCK + 2] = 2.0f;       /* block 3 (8 long): amax 2 -> 2/448 -> 2^-7 (120) */
  uint8_t q[N], s[4];
  memset(s, 0xaa, sizeof s);
  assert_int_equal(fpk_mx_nscales(N), 4);
  fpk_quantize_mxfp8(q, s, x, FP_F32, N);
  assert_int_equal(s[0], 0xff);
  assert_int_equal(s[1], 0xff);
  assert_int_equal(s[2], 0x00);
  assert_int_equal(s[3], 120);
  for (int i = 0; i < 2 * FPK_MX_BLOCK; i++) assert_int_equal(q[i], 0x7f);
  for (int i = 2 * FPK_MX_BLOCK; i < 3 * FPK_MX_BLOCK; i++) assert_int_equal(q[i], (i & 1) ? 0x80 : 0x00);
  assert_int_equal(q[3 * FPK_MX_BLOCK], 0x70); /* 1 * 2^7 = 128: 0 1110 000 */
  assert_int_equal(q[3 * FPK_MX_BLOCK + 2], 0x78); /* 256 */
  float y[N];
  fpk_dequantize_mxfp8(y, FP_F32, q, s, N);
  for (int i = 0; i < 2 * FPK_MX_BLOCK; i++) assert_true(isnan(y[i]));
  for (int i = 2 * FPK_MX_BLOCK; i < 3 * FPK_MX_BLOCK; i++) assert_true(y[i] == 0.0f && (signbit(y[i]) != 0) == ((i & 1) != 0));
  for (int i = 3 * FPK_MX_BLOCK; i < N; i++) assert_true(y[i] == x[i]);

  /* subnormal amax: 2^-130 -> scale 2^-127 (byte 0), element 2^-3 (0x20);
   * 2^-140 with it rounds to 0 */
  float t[2] = {ldexpf(1.0f, -130), ldexpf(1.0f, -140)};
  fpk_quantize_mxfp8(q, s, t, FP_F32, 2);
  assert_int_equal(s[0], 0x00);
  assert_int_equal(q[0], 0x20);
  assert_int_equal(q[1], 0x00);
  fpk_dequantize_mxfp8(y, FP_F32, q, s, 2);
  assert_true(y[0] == t[0] && y[1] == 0.0f);
  /* amax 448 * 2^-127 = 1.75 * 2^-119 is the largest amax with byte 0 */
  t[0] = ldexpf(1.75f, -119);
  fpk_quantize_mxfp8(q, s, t, FP_F32, 1);
  assert_int_equal(s[0], 0x00);
  assert_int_equal(q[0], 0x7e);
  /* FLT_MAX: E 254, M > 0x600000 -> byte 247 (2^120); the element
   * (2 - 2^-23) * 2^7 rounds up to 256, and 256 * 2^120 = 2^128 is past
   * fp32: dequantizing gives Inf (documented) */
  t[0] = FLT_MAX;
  fpk_quantize_mxfp8(q, s, t, FP_F32, 1);
  assert_int_equal(s[0], 247);
  assert_int_equal(q[0], 0x78);
  fpk_dequantize_mxfp8(y, FP_F32, q, s, 1);
  assert_true(y[0] == INFINITY);
  /* an element NaN under a finite scale */
  uint8_t qn[2] = {0x7f, 0x38}, sn[1] = {127};
  fpk_dequantize_mxfp8(y, FP_F32, qn, sn, 2);
  assert_true(isnan(y[0]) && y[1] == 1.0f);
  qn[0] = 0xff; /* -NaN: canonical, positive */
  fpk_dequantize_mxfp8(y, FP_F32, qn, sn, 2);
  assert_int_equal(bits(y[0]), 0x7fc00000u);
  fpk_quantize_mxfp8(NULL, NULL, NULL, FP_F32, 0);
}

/* every value exactly representable under its block's scale comes back
 * exactly; others come back within half an E4M3 step */
static void mxfp8_round_trip(void **state) {
  (void)state;
  enum { N = 32 * 50 + 17 };
  float x[N], y[N];
  uint8_t q[N], s[(N + FPK_MX_BLOCK - 1) / FPK_MX_BLOCK];
  for (int i = 0; i < N; i++) {
    uint32_t u = next32();
    x[i] = ldexpf((float)(int)(u % 2001) - 1000.0f, (int)((u >> 16) % 40) - 20);
  }
  fpk_quantize_mxfp8(q, s, x, FP_F32, N);
  fpk_dequantize_mxfp8(y, FP_F32, q, s, N);
  for (int i = 0; i < N; i++) {
    float sc = ldexpf(1.0f, s[i / 32] - 127);
    float err = fabsf(y[i] - x[i]), v = fabsf(x[i]) / sc;
    /* E4M3 step at v: 2^(max(floor(log2 v), -6) - 3) */
    int e = v > 0 ? ilogbf(v) : -6;
    float step = ldexpf(1.0f, (e < -6 ? -6 : e) - 3) * sc;
    assert_true(err <= step / 2);
  }
}

/* a caller bug is FP_ASSERT's exit status 70 */
static void bad_dtype_is_status_70(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    uint8_t b[1] = {0};
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) dup2(fd, 2);
    fpk_add(b, FP_U8, b, FP_U8, 1);
    _exit(0);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 70);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bf16_hand),          cmocka_unit_test(f16_hand),
      cmocka_unit_test(e4m3_hand),          cmocka_unit_test(bf16_all_patterns),
      cmocka_unit_test(f16_all_patterns),   cmocka_unit_test(e4m3_all_patterns),
      cmocka_unit_test(against_rint_oracle), cmocka_unit_test(cast_arrays),
      cmocka_unit_test(add_scale_reduce),   cmocka_unit_test(mxfp8_hand),
      cmocka_unit_test(mxfp8_special),      cmocka_unit_test(mxfp8_split_block),      cmocka_unit_test(mxfp8_round_trip),
      cmocka_unit_test(bad_dtype_is_status_70),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
