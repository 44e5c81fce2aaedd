/* test_kernels_emul.cu - the CUDA kernels' per-thread bodies
 * (kernels/cuda_body.cuh) run on the host, thread by thread with the launch
 * geometry the launchers in kernels/kernels.cu use (blocks, threads, U
 * slots a thread a pass, the alignment decision), against the C references
 * on the cases of tests/kernel_cases.cuh; then once more with the grid cut
 * to 3 blocks, so that every thread makes several grid-stride passes. It
 * needs nvcc to build but no GPU to run: the indexing, the 16-byte vector
 * paths, the tails and the MXFP8 block pairing are checked on every build
 * that has CUDA. It also checks convert.h's branch-free conversions (the
 * ones the bodies use) against the reference's on every 8- and 16-bit input
 * and on a stride of fp32 inputs (all 2^32 with FP_KERNELS_EXHAUSTIVE=1,
 * about 10 s). What it cannot check - the device's own fp32 arithmetic and
 * instructions, the warp shuffle - is tests/test_kernels_cuda.cu's job on a
 * GPU. */
#include "kernels/cuda_body.cuh"
#include "tests/kernel_cases.cuh"

using namespace fpk;

static bool aligned16(const void *a, const void *b) { return (((uintptr_t)a | (uintptr_t)b) & 15u) == 0; }

/* the grid of a launch: as the launchers make it, or at most emu_max_blocks */
static unsigned emu_max_blocks = MAX_BLOCKS;
static unsigned emu_blocks(int64_t slots, int U) {
  unsigned b = blocks_for(slots, U);
  return b < emu_max_blocks ? b : emu_max_blocks;
}

/* every thread's passes, in launch order: f(t0) for thread x of block b */
template <class F> static void emu_grid(int64_t slots, int U, F f) {
  unsigned g = emu_blocks(slots, U);
  for (unsigned b = 0; b < g; b++)
    for (unsigned x = 0; x < THREADS; x++)
      for (int64_t t0 = tile_first(b, x, U); t0 < slots; t0 += tile_step(g, U)) f(t0);
}

/* ---- dispatch on dtypes, as the launchers do ------------------------------------------- */
template <int DT, int ST> static void cast2(void *d, const void *s, int64_t n) {
  typedef cast_k<DT, ST> K;
  bool al = aligned16(d, s);
  emu_grid(nslots<K::V>(n), K::U, [&](int64_t t0) { K::tile(d, s, n, t0, al); });
}
template <int DT> static void cast_from(void *d, const void *s, fp_dtype st, int64_t n) {
  switch (st) {
    case FP_F32: cast2<DT, FP_F32>(d, s, n); break;
    case FP_BF16: cast2<DT, FP_BF16>(d, s, n); break;
    case FP_F16: cast2<DT, FP_F16>(d, s, n); break;
    default: cast2<DT, FP_E4M3>(d, s, n); break;
  }
}
static void emu_cast(uint8_t *dst, int64_t, int64_t doff, fp_dtype dt, const uint8_t *src, int64_t, int64_t soff,
                     fp_dtype st, int64_t n) {
  void *d = dst + doff;
  const void *s = src + soff;
  if (n == 0) return;
  if (dt == st) { /* the launcher's cudaMemcpyAsync */
    memmove(d, s, (size_t)(n * kc_size(dt)));
    return;
  }
  switch (dt) {
    case FP_F32: cast_from<FP_F32>(d, s, st, n); break;
    case FP_BF16: cast_from<FP_BF16>(d, s, st, n); break;
    case FP_F16: cast_from<FP_F16>(d, s, st, n); break;
    default: cast_from<FP_E4M3>(d, s, st, n); break;
  }
}

template <int DT, int ST> static void add2(void *d, const void *s, int64_t n) {
  typedef add_k<DT, ST> K;
  bool al = aligned16(d, s);
  emu_grid(nslots<K::V>(n), K::U, [&](int64_t t0) { K::tile(d, s, n, t0, al); });
}
template <int DT> static void add_from(void *d, const void *s, fp_dtype st, int64_t n) {
  switch (st) {
    case FP_F32: add2<DT, FP_F32>(d, s, n); break;
    case FP_BF16: add2<DT, FP_BF16>(d, s, n); break;
    default: add2<DT, FP_F16>(d, s, n); break;
  }
}
static void emu_add(uint8_t *dst, int64_t, int64_t doff, fp_dtype dt, const uint8_t *src, int64_t, int64_t soff,
                    fp_dtype st, int64_t n, bool in_place) {
  void *d = dst + doff;
  const void *s = in_place ? (const void *)d : (const void *)(src + soff);
  if (n == 0) return;
  switch (dt) {
    case FP_F32: add_from<FP_F32>(d, s, st, n); break;
    case FP_BF16: add_from<FP_BF16>(d, s, st, n); break;
    default: add_from<FP_F16>(d, s, st, n); break;
  }
}

template <int DT> static void scale1(void *d, float al, int64_t n) {
  typedef scale_k<DT> K;
  bool a = aligned16(d, d);
  emu_grid(nslots<K::V>(n), K::U, [&](int64_t t0) { K::tile(d, al, n, t0, a); });
}
static void emu_scale(uint8_t *dst, int64_t, int64_t doff, fp_dtype dt, double alpha, int64_t n) {
  float al = (float)alpha;
  if (n == 0) return;
  switch (dt) {
    case FP_F32: scale1<FP_F32>(dst + doff, al, n); break;
    case FP_BF16: scale1<FP_BF16>(dst + doff, al, n); break;
    default: scale1<FP_F16>(dst + doff, al, n); break;
  }
}

template <typename U> static void copy1(void *d, int64_t dp, const void *s, int64_t sp, int64_t w, int64_t rows) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t u = 0; u < w / (int64_t)sizeof(U); u++) copy_unit<U>(d, dp, s, sp, r, u);
}
static void emu_copy2d(uint8_t *dst, int64_t, int64_t doff, int64_t dp, const uint8_t *src, int64_t, int64_t soff,
                       int64_t sp, int64_t w, int64_t rows) {
  void *d = dst + doff;
  const void *s = src + soff;
  if (rows == 1) dp = sp = 0;
  uint64_t m = (uint64_t)(uintptr_t)d | (uint64_t)(uintptr_t)s | (uint64_t)dp | (uint64_t)sp | (uint64_t)w;
  if (!(m & 15)) copy1<uint4>(d, dp, s, sp, w, rows);
  else if (!(m & 7)) copy1<uint2>(d, dp, s, sp, w, rows);
  else if (!(m & 3)) copy1<uint32_t>(d, dp, s, sp, w, rows);
  else if (!(m & 1)) copy1<uint16_t>(d, dp, s, sp, w, rows);
  else copy1<uint8_t>(d, dp, s, sp, w, rows);
}

/* the kernel's pairs: lanes 2j and 2j+1 (slots t and t + 1 of each of
 * their U) exchange their amax; the two lanes run side by side */
template <int ST> static void quant1(uint8_t *d, uint8_t *sc, const void *s, int64_t n) {
  typedef quant_k<ST> K;
  bool al = aligned16(d, s);
  int64_t slots = (nslots<MX_SLOT>(n) + 31) / 32 * 32; /* kernels.cu's quant_slots */
  unsigned g = emu_blocks(slots, K::U);
  for (unsigned b = 0; b < g; b++)
    for (unsigned x = 0; x < THREADS; x += 2)
      for (int64_t t0 = tile_first(b, x, K::U); t0 < slots; t0 += tile_step(g, K::U)) {
        typename K::raw in0[K::U], in1[K::U];
        K::load(in0, s, n, t0, al);
        K::load(in1, s, n, t0 + 1, al);
        for (int k = 0; k < K::U; k++) {
          int64_t t = t0 + (int64_t)k * THREADS;
          mx_part p0, p1;
          K::part(p0, in0[k], s, n, t, al);
          K::part(p1, in1[k], s, n, t + 1, al);
          mx_store(d, sc, n, t, p0, mx_max(p0.amax, p1.amax), al);
          mx_store(d, sc, n, t + 1, p1, mx_max(p1.amax, p0.amax), al);
        }
      }
}
static void emu_quantize(uint8_t *dst, int64_t, int64_t doff, uint8_t *scales, int64_t, const uint8_t *src, int64_t,
                         int64_t soff, fp_dtype st, int64_t n) {
  if (n == 0) return;
  switch (st) {
    case FP_F32: quant1<FP_F32>(dst + doff, scales, src + soff, n); break;
    case FP_BF16: quant1<FP_BF16>(dst + doff, scales, src + soff, n); break;
    default: quant1<FP_F16>(dst + doff, scales, src + soff, n); break;
  }
}

template <int ST> static void quant2(uint8_t *d, uint8_t *sc, const uint8_t *s, int64_t n) {
  for (int64_t b = 0; b < (n + 31) / 32; b++) mx_scale_block<ST>(sc, s, n, b);
  for (int64_t i = 0; i < n; i++) mx_scaled_elem<ST>(d, sc, s, i);
}
static void emu_quantize2(uint8_t *dst, int64_t, int64_t doff, uint8_t *scales, int64_t, const uint8_t *src, int64_t,
                          int64_t soff, fp_dtype st, int64_t n) {
  switch (st) {
    case FP_F32: quant2<FP_F32>(dst + doff, scales, src + soff, n); break;
    case FP_BF16: quant2<FP_BF16>(dst + doff, scales, src + soff, n); break;
    default: quant2<FP_F16>(dst + doff, scales, src + soff, n); break;
  }
}

template <int DT> static void dq1(void *d, const uint8_t *s, const uint8_t *sc, int64_t n) {
  typedef dequant_k<DT> K;
  bool al = aligned16(d, s);
  emu_grid(nslots<K::SLOT>(n), K::U, [&](int64_t t0) { K::tile(d, s, sc, n, t0, al); });
}
static void emu_dequantize(uint8_t *dst, int64_t, int64_t doff, fp_dtype dt, const uint8_t *src, int64_t,
                           int64_t soff, const uint8_t *scales, int64_t, int64_t n) {
  if (n == 0) return;
  switch (dt) {
    case FP_F32: dq1<FP_F32>(dst + doff, src + soff, scales, n); break;
    case FP_BF16: dq1<FP_BF16>(dst + doff, src + soff, scales, n); break;
    default: dq1<FP_F16>(dst + doff, src + soff, scales, n); break;
  }
}

/* convert.h's branch-free conversions (what the bodies use) against the
 * reference's: every 8- and 16-bit input; fp32 inputs at a stride that
 * is odd (so every low-bit pattern occurs) plus the neighbourhood of every
 * boundary the conversions have, or all of them */
static int conv_fail;
static void conv_f32(uint32_t u) {
  float x = fpkc_u2f(u);
  if (fpkc_f32_to_f16(x) != fpkc_f32_to_f16_sel(x) && conv_fail++ < 10)
    fprintf(stderr, "FAIL f32 -> f16 of 0x%08x: want 0x%04x, got 0x%04x\n", u, fpkc_f32_to_f16(x),
            fpkc_f32_to_f16_sel(x));
  if (fpkc_f32_to_e4m3(x) != fpkc_f32_to_e4m3_sel(x) && conv_fail++ < 10)
    fprintf(stderr, "FAIL f32 -> e4m3 of 0x%08x: want 0x%02x, got 0x%02x\n", u, fpkc_f32_to_e4m3(x),
            fpkc_f32_to_e4m3_sel(x));
}
static void check_conversions(void) {
  for (uint32_t h = 0; h < 65536; h++)
    if (fpkc_f2u(fpkc_f16_to_f32(h)) != fpkc_f2u(fpkc_f16_to_f32_sel(h)) && conv_fail++ < 10)
      fprintf(stderr, "FAIL f16 0x%04x -> f32\n", h);
  for (uint32_t v = 0; v < 256; v++)
    if (fpkc_f2u(fpkc_e4m3_to_f32(v)) != fpkc_f2u(fpkc_e4m3_to_f32_sel(v)) && conv_fail++ < 10)
      fprintf(stderr, "FAIL e4m3 0x%02x -> f32\n", v);
  const char *e = getenv("FP_KERNELS_EXHAUSTIVE");
  uint64_t stride = e && atoi(e) ? 1 : 4093, count = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += stride) conv_f32((uint32_t)u), count++;
  /* the boundaries: the f16 and e4m3 grids' normal, subnormal, overflow
   * and tie points, and the exponents next to them, +-2^16 patterns each */
  const uint32_t edges[] = {0x00000000u, 0x33000000u, 0x38800000u, 0x3a800000u, 0x3c800000u,
                            0x43e00000u, 0x477ff000u, 0x7f800000u, 0x387fe000u, 0x3c7c0000u};
  for (uint32_t s = 0; s < 2; s++)
    for (const uint32_t edge : edges)
      for (int64_t d = -65536; d <= 65536; d++) {
        int64_t u = (int64_t)edge + d;
        if (u >= 0 && u <= 0x7fffffff) conv_f32((uint32_t)u | s << 31), count++;
      }
  printf("conversions: 65536 + 256 narrow inputs, %" PRIu64 " fp32 inputs%s: %d mismatch(es)\n", count,
         stride == 1 ? " (all)" : "", conv_fail);
}

int main(void) {
  check_conversions();
  kc_runner r = {"emul", emu_cast, emu_add, emu_scale, emu_copy2d, emu_quantize, emu_quantize2, emu_dequantize};
  kc_run_all(&r, kc_big());
  int launch = kc_cases;
  emu_max_blocks = 3; /* several grid-stride passes a thread */
  r.name = "emul (3 blocks)";
  kc_run_all(&r, kc_big());
  printf("%s: %d case(s) with the launch geometry, %d with 3 blocks, %d failed\n",
         kc_failures || conv_fail ? "FAIL" : "ok", launch, kc_cases - launch, kc_failures);
  return kc_failures || conv_fail ? 1 : 0;
}
