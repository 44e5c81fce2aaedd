/* kernel_cases.cuh - the cases the CUDA kernels are checked on against the
 * C references (kernels/ref.c), shared by two runners:
 *   tests/test_kernels_emul.cu  runs the kernels' per-thread bodies
 *                               (kernels/cuda_body.cuh) on the host, thread
 *                               by thread - no GPU needed;
 *   tests/test_kernels_cuda.cu  launches the real kernels on a GPU (label gpu).
 *
 * Every case fills a source buffer with random bits (so NaNs with payloads,
 * Infs, subnormals and signed zeros all occur), or with values in a
 * realistic range, or with hand-picked special values; fills the
 * destination buffer with a sentinel pattern; runs the reference on one copy
 * and the runner on another, at byte offsets that make the launch 16-byte
 * aligned or not; and compares the *whole* destination buffers byte for byte,
 * so a write outside [off, off + n) is caught too. Lengths cover 0, one
 * element, each side of a slot and of an MXFP8 block, and a long array;
 * FP_KERNEL_CASES_N sets the long length (default 1 << 20 + 37). */
#ifndef FP_TESTS_KERNEL_CASES_CUH
#define FP_TESTS_KERNEL_CASES_CUH

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "kernels/kernels.h"
}

/* what a runner does: the operation on its own memory, inputs and outputs
 * given as host buffers (bytes at the given offsets); the dst buffer comes
 * in with its initial contents and must come back as the runner's memory
 * holds it afterwards (the whole buffer, dst_bytes long) */
struct kc_runner {
  const char *name;
  void (*cast)(uint8_t *dst, int64_t dst_bytes, int64_t doff, fp_dtype dt, const uint8_t *src, int64_t src_bytes,
               int64_t soff, fp_dtype st, int64_t n);
  void (*add)(uint8_t *dst, int64_t dst_bytes, int64_t doff, fp_dtype dt, const uint8_t *src, int64_t src_bytes,
              int64_t soff, fp_dtype st, int64_t n, bool in_place);
  void (*scale)(uint8_t *dst, int64_t dst_bytes, int64_t doff, fp_dtype dt, double alpha, int64_t n);
  void (*copy2d)(uint8_t *dst, int64_t dst_bytes, int64_t doff, int64_t dpitch, const uint8_t *src, int64_t src_bytes,
                 int64_t soff, int64_t spitch, int64_t width, int64_t rows);
  void (*quantize)(uint8_t *dst, int64_t dst_bytes, int64_t doff, uint8_t *scales, int64_t sc_bytes,
                   const uint8_t *src, int64_t src_bytes, int64_t soff, fp_dtype st, int64_t n);
  /* the same result in two steps: the scales alone, then the elements at
   * those scales (a block split between processes, planner/reshard.c) */
  void (*quantize2)(uint8_t *dst, int64_t dst_bytes, int64_t doff, uint8_t *scales, int64_t sc_bytes,
                    const uint8_t *src, int64_t src_bytes, int64_t soff, fp_dtype st, int64_t n);
  void (*dequantize)(uint8_t *dst, int64_t dst_bytes, int64_t doff, fp_dtype dt, const uint8_t *src,
                     int64_t src_bytes, int64_t soff, const uint8_t *scales, int64_t sc_bytes, int64_t n);
};

static int kc_failures, kc_cases;
static uint64_t kc_state = 0x9e3779b97f4a7c15ull;

static uint64_t kc_rand(void) {
  kc_state ^= kc_state << 13;
  kc_state ^= kc_state >> 7;
  kc_state ^= kc_state << 17;
  return kc_state;
}

static int64_t kc_size(fp_dtype t) { return t == FP_F32 ? 4 : t == FP_E4M3 ? 1 : 2; }
static const char *kc_name(fp_dtype t) { return fpi_dtype_name(t); }

/* source fills */
enum { FILL_BITS, FILL_VALUES, FILL_SPECIAL, NFILLS };
static const char *kc_fill_name[NFILLS] = {"random bits", "values", "specials"};

static void kc_fill(uint8_t *p, int64_t n, fp_dtype t, int fill) {
  int64_t sz = kc_size(t);
  static const uint32_t sp32[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffa12345u,
                                  0x7f800001u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x3f808000u, 0x3f818000u,
                                  0x477ff000u, 0x477fefffu, 0x43e00000u, 0x43dfffffu, 0x3a800000u, 0x3a800001u,
                                  0x33000000u, 0x33000001u, 0x3f800000u, 0xc2280000u};
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = kc_rand();
    uint32_t v;
    if (fill == FILL_BITS) {
      v = (uint32_t)r;
    } else if (fill == FILL_VALUES) { /* about N(0, 1) scaled by 2^[-8, 8], as fp32 bits */
      float f = (float)((double)((int64_t)(r >> 11) - (1ll << 52)) / (double)(1ll << 52));
      f *= (float)(1 << (r & 15)) / 256.0f;
      memcpy(&v, &f, 4);
    } else {
      v = sp32[r % (sizeof sp32 / sizeof sp32[0])];
      if (r & (1ull << 40)) v = (uint32_t)(r >> 8); /* some randomness among the specials */
    }
    float vf;
    memcpy(&vf, &v, 4);
    if (sz == 4) memcpy(p + 4 * i, &v, 4);
    else if (sz == 2) {
      /* for 16-bit sources: the same value narrowed (values, specials) or random bits */
      uint16_t h = fill == FILL_BITS ? (uint16_t)(r >> 16)
                   : t == FP_BF16    ? (uint16_t)(v >> 16)
                                     : fpk_f32_to_f16(vf);
      memcpy(p + 2 * i, &h, 2);
    } else {
      p[i] = fill == FILL_BITS ? (uint8_t)(r >> 24) : fpk_f32_to_e4m3(vf);
    }
  }
}

static void kc_sentinel(uint8_t *p, int64_t bytes) {
  for (int64_t i = 0; i < bytes; i++) p[i] = (uint8_t)(0xa5 ^ (i * 31));
}

static void kc_check(const char *what, const uint8_t *want, const uint8_t *got, int64_t bytes) {
  kc_cases++;
  if (!memcmp(want, got, (size_t)bytes)) return;
  int64_t i = 0;
  while (want[i] == got[i]) i++;
  if (kc_failures++ < 20)
    fprintf(stderr, "FAIL %s: first difference at byte %" PRId64 ": want 0x%02x, got 0x%02x\n", what, i, want[i],
            got[i]);
}

static uint8_t *kc_alloc(int64_t bytes) {
  uint8_t *p = (uint8_t *)aligned_alloc(256, (size_t)((bytes + 255) / 256 * 256 + 256));
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

static const fp_dtype kc_castable[] = {FP_F32, FP_BF16, FP_F16, FP_E4M3};
static const fp_dtype kc_arith[] = {FP_F32, FP_BF16, FP_F16};

/* element offsets: 0 keeps 16-byte alignment, 1 and 3 break it */
static const int64_t kc_offs[] = {0, 1, 3};

static void kc_run_all(const kc_runner *r, int64_t big) {
  const int64_t lens[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 100, 257, 1000, 4099, big};
  const int nlens = (int)(sizeof lens / sizeof lens[0]);
  int64_t cap = big + 64;
  uint8_t *src = kc_alloc(cap * 4), *want = kc_alloc(cap * 4), *got = kc_alloc(cap * 4);
  uint8_t *sw = kc_alloc(cap / 32 + 64), *sg = kc_alloc(cap / 32 + 64);
  char what[256];

  /* cast: every pair, every fill, aligned and not */
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++)
      for (int li = 0; li < nlens; li++)
        for (int oi = 0; oi < 3; oi++)
          for (int fill = 0; fill < NFILLS; fill++) {
            fp_dtype dt = kc_castable[a], st = kc_castable[b];
            int64_t n = lens[li], doff = kc_offs[oi] * kc_size(dt), soff = kc_offs[(oi + fill) % 3] * kc_size(st);
            if (n == big && (fill != FILL_BITS || oi == 2)) continue; /* the long ones: fewer */
            int64_t db = doff + (n + 16) * kc_size(dt), sb = soff + (n + 16) * kc_size(st);
            kc_fill(src, sb / kc_size(st), st, fill);
            kc_sentinel(want, db);
            memcpy(got, want, (size_t)db);
            fpk_cast(want + doff, dt, src + soff, st, n);
            r->cast(got, db, doff, dt, src, sb, soff, st, n);
            snprintf(what, sizeof what, "%s cast %s <- %s n=%" PRId64 " offs %" PRId64 "/%" PRId64 " (%s)", r->name,
                     kc_name(dt), kc_name(st), n, doff, soff, kc_fill_name[fill]);
            kc_check(what, want, got, db);
          }

  /* add: every arithmetic pair; in place when the dtypes are equal */
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++)
      for (int li = 0; li < nlens; li++)
        for (int oi = 0; oi < 3; oi++)
          for (int fill = 0; fill < NFILLS; fill++) {
            fp_dtype dt = kc_arith[a], st = kc_arith[b];
            int64_t n = lens[li], doff = kc_offs[oi] * kc_size(dt), soff = kc_offs[(oi + fill) % 3] * kc_size(st);
            if (n == big && (fill != FILL_VALUES || oi == 2)) continue;
            bool in_place = dt == st && fill == FILL_SPECIAL;
            if (in_place) soff = doff;
            int64_t db = doff + (n + 16) * kc_size(dt), sb = soff + (n + 16) * kc_size(st);
            kc_fill(src, sb / kc_size(st), st, fill);
            kc_fill(want, db / kc_size(dt), dt, (fill + 1) % NFILLS);
            memcpy(got, want, (size_t)db);
            if (in_place) {
              fpk_add(want + doff, dt, want + doff, dt, n);
            } else {
              fpk_add(want + doff, dt, src + soff, st, n);
            }
            r->add(got, db, doff, dt, src, sb, soff, st, n, in_place);
            snprintf(what, sizeof what, "%s add %s += %s n=%" PRId64 " offs %" PRId64 "/%" PRId64 " (%s%s)", r->name,
                     kc_name(dt), kc_name(st), n, doff, soff, kc_fill_name[fill], in_place ? ", in place" : "");
            kc_check(what, want, got, db);
          }

  /* scale */
  const double alphas[] = {0.1, 1.0 / 3.0, -2.0, 0.0, 1e-40, 3e38};
  for (int a = 0; a < 3; a++)
    for (int li = 0; li < nlens; li++)
      for (int oi = 0; oi < 3; oi++)
        for (int fill = 0; fill < NFILLS; fill++) {
          fp_dtype dt = kc_arith[a];
          int64_t n = lens[li], doff = kc_offs[oi] * kc_size(dt);
          if (n == big && fill != FILL_VALUES) continue;
          double alpha = alphas[(li + oi + fill) % 6];
          int64_t db = doff + (n + 16) * kc_size(dt);
          kc_fill(want, db / kc_size(dt), dt, fill);
          memcpy(got, want, (size_t)db);
          fpk_scale(want + doff, dt, alpha, n);
          r->scale(got, db, doff, dt, alpha, n);
          snprintf(what, sizeof what, "%s scale %s by %g n=%" PRId64 " off %" PRId64 " (%s)", r->name, kc_name(dt),
                   alpha, n, doff, kc_fill_name[fill]);
          kc_check(what, want, got, db);
        }

  /* copy2d: widths and pitches of every alignment, one row and many */
  const int64_t widths[] = {1, 2, 4, 6, 8, 16, 24, 48, 100, 256, 4096};
  const int64_t rowsv[] = {1, 2, 3, 17, 300};
  for (int wi = 0; wi < 11; wi++)
    for (int ri = 0; ri < 5; ri++)
      for (int oi = 0; oi < 3; oi++) {
        int64_t w = widths[wi], rows = rowsv[ri];
        int64_t sp = w + (oi == 0 ? 0 : oi == 1 ? 16 : 5), dp = w + (oi == 2 ? 3 : 32);
        int64_t doff = kc_offs[oi] * 4, soff = kc_offs[(oi + 1) % 3] * 2;
        int64_t db = doff + rows * dp + 16, sb = soff + rows * sp + 16;
        if (db > cap * 4 || sb > cap * 4) continue;
        kc_fill(src, sb, FP_E4M3, FILL_BITS);
        kc_sentinel(want, db);
        memcpy(got, want, (size_t)db);
        for (int64_t k = 0; k < rows; k++) memcpy(want + doff + k * dp, src + soff + k * sp, (size_t)w);
        r->copy2d(got, db, doff, dp, src, sb, soff, sp, w, rows);
        snprintf(what, sizeof what, "%s copy2d %" PRId64 " x %" PRId64 " B pitches %" PRId64 "/%" PRId64 " offs %" PRId64
                 "/%" PRId64, r->name, rows, w, dp, sp, doff, soff);
        kc_check(what, want, got, db);
      }

  /* MXFP8 quantize and dequantize */
  for (int a = 0; a < 3; a++)
    for (int li = 0; li < nlens; li++)
      for (int oi = 0; oi < 3; oi++)
        for (int fill = 0; fill < NFILLS; fill++) {
          fp_dtype t = kc_arith[a];
          int64_t n = lens[li], doff = kc_offs[oi], soff = kc_offs[(oi + fill) % 3] * kc_size(t);
          if (n == big && (fill == FILL_SPECIAL || oi == 2)) continue;
          int64_t db = doff + n + 16, sb = soff + (n + 16) * kc_size(t), scb = fpk_mx_nscales(n) + 8;
          kc_fill(src, sb / kc_size(t), t, fill);
          if (fill == FILL_VALUES && n > 64) /* some blocks all zero, some with a NaN or an Inf */
            for (int64_t k = 0; k + 32 <= n; k += 32 * 7) {
              memset(src + soff + k * kc_size(t), 0, (size_t)(32 * kc_size(t)));
              if (k + 64 + 5 < n) kc_fill(src + soff + (k + 64 + 5) * kc_size(t), 1, t, FILL_SPECIAL);
            }
          kc_sentinel(want, db);
          memcpy(got, want, (size_t)db);
          kc_sentinel(sw, scb);
          memcpy(sg, sw, (size_t)scb);
          fpk_quantize_mxfp8(want + doff, sw, src + soff, t, n);
          r->quantize(got, db, doff, sg, scb, src, sb, soff, t, n);
          snprintf(what, sizeof what, "%s quantize_mxfp8 <- %s n=%" PRId64 " offs %" PRId64 "/%" PRId64 " (%s)",
                   r->name, kc_name(t), n, doff, soff, kc_fill_name[fill]);
          kc_check(what, want, got, db);
          snprintf(what, sizeof what, "%s quantize_mxfp8 scales <- %s n=%" PRId64 " (%s)", r->name, kc_name(t), n,
                   kc_fill_name[fill]);
          kc_check(what, sw, sg, scb);
          kc_sentinel(got, db);
          kc_sentinel(sg, scb);
          r->quantize2(got, db, doff, sg, scb, src, sb, soff, t, n);
          snprintf(what, sizeof what, "%s mxfp8_scales + quantize_mxfp8_scaled <- %s n=%" PRId64 " (%s)", r->name,
                   kc_name(t), n, kc_fill_name[fill]);
          kc_check(what, want, got, db);
          kc_check(what, sw, sg, scb);

          /* dequantize what the reference made (and random bytes and scales) */
          uint8_t *q = got; /* reuse: q at offset doff holds the reference's bytes now */
          memcpy(q, want, (size_t)db);
          if (fill == FILL_BITS) {
            kc_fill(q + doff, n, FP_E4M3, FILL_BITS);
            for (int64_t k = 0; k < fpk_mx_nscales(n); k++) sw[k] = (uint8_t)kc_rand();
          }
          int64_t ddoff = kc_offs[(oi + 1) % 3] * kc_size(t), ddb = ddoff + (n + 16) * kc_size(t);
          uint8_t *dw = src; /* src is free now: the reference's output */
          kc_sentinel(dw, ddb);
          uint8_t *dg = kc_alloc(ddb);
          memcpy(dg, dw, (size_t)ddb);
          fpk_dequantize_mxfp8(dw + ddoff, t, q + doff, sw, n);
          r->dequantize(dg, ddb, ddoff, t, q, db, doff, sw, scb, n);
          snprintf(what, sizeof what, "%s dequantize_mxfp8 -> %s n=%" PRId64 " offs %" PRId64 "/%" PRId64 " (%s)",
                   r->name, kc_name(t), n, ddoff, doff, kc_fill_name[fill]);
          kc_check(what, dw, dg, ddb);
          free(dg);
        }
  free(src), free(want), free(got), free(sw), free(sg);
}

static int64_t kc_big(void) {
  const char *e = getenv("FP_KERNEL_CASES_N");
  long long v = e ? atoll(e) : 0;
  return v > 4099 ? (int64_t)v : (int64_t)((1 << 20) + 37);
}

#endif
