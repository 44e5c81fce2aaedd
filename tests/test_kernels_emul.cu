/* test_kernels_emul.cu - the CUDA kernels' per-thread bodies
 * (kernels/cuda_body.cuh) run on the host, slot by slot, in the order and
 * with the alignment decisions the launchers in kernels/kernels.cu make,
 * against the C references on the cases of tests/kernel_cases.cuh. It needs
 * nvcc to build but no GPU to run: the indexing, the 16-byte vector paths,
 * the tails and the MXFP8 block pairing are checked on every build that has
 * CUDA. What it cannot check - the device's own fp32 arithmetic and
 * instructions, the launch geometry, the warp shuffle - is
 * tests/test_kernels_cuda.cu's job on a GPU. */
#include "kernels/cuda_body.cuh"
#include "tests/kernel_cases.cuh"

using namespace fpk;

static bool aligned16(const void *a, const void *b) { return (((uintptr_t)a | (uintptr_t)b) & 15u) == 0; }

/* ---- dispatch on dtypes, as the launchers do ------------------------------------------- */
template <int DT, int ST> static void cast2(void *d, const void *s, int64_t n) {
  bool al = aligned16(d, s);
  for (int64_t t = 0; t < nslots<vec<DT, ST>::V>(n); t++) cast_slot<DT, ST>(d, s, n, t, al);
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
  bool al = aligned16(d, s);
  for (int64_t t = 0; t < nslots<vec<DT, ST>::V>(n); t++) add_slot<DT, ST>(d, s, n, t, al);
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
  switch (dt) {
    case FP_F32: add_from<FP_F32>(d, s, st, n); break;
    case FP_BF16: add_from<FP_BF16>(d, s, st, n); break;
    default: add_from<FP_F16>(d, s, st, n); break;
  }
}

template <int DT> static void scale1(void *d, float al, int64_t n) {
  bool a = aligned16(d, d);
  for (int64_t t = 0; t < nslots<vec<DT, DT>::V>(n); t++) scale_slot<DT>(d, al, n, t, a);
}
static void emu_scale(uint8_t *dst, int64_t, int64_t doff, fp_dtype dt, double alpha, int64_t n) {
  float al = (float)alpha;
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

/* the kernel's pairs: slots 2k and 2k+1 exchange amax and badness */
template <int ST> static void quant1(uint8_t *d, uint8_t *sc, const void *s, int64_t n) {
  bool al = aligned16(d, s);
  int64_t slots = (nslots<MX_SLOT>(n) + 31) / 32 * 32;
  for (int64_t t = 0; t < slots; t += 2) {
    mx_part p0, p1;
    mx_load<ST>(p0, s, n, t, al);
    mx_load<ST>(p1, s, n, t + 1, al);
    uint32_t amax = p0.amax > p1.amax ? p0.amax : p1.amax;
    int bad = p0.bad | p1.bad;
    mx_store(d, sc, n, t, p0, amax, bad, al);
    mx_store(d, sc, n, t + 1, p1, amax, bad, al);
  }
}
static void emu_quantize(uint8_t *dst, int64_t, int64_t doff, uint8_t *scales, int64_t, const uint8_t *src, int64_t,
                         int64_t soff, fp_dtype st, int64_t n) {
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
  bool al = aligned16(d, s);
  for (int64_t t = 0; t < nslots<MX_SLOT>(n); t++) dq_slot<DT>(d, s, sc, n, t, al);
}
static void emu_dequantize(uint8_t *dst, int64_t, int64_t doff, fp_dtype dt, const uint8_t *src, int64_t,
                           int64_t soff, const uint8_t *scales, int64_t, int64_t n) {
  switch (dt) {
    case FP_F32: dq1<FP_F32>(dst + doff, src + soff, scales, n); break;
    case FP_BF16: dq1<FP_BF16>(dst + doff, src + soff, scales, n); break;
    default: dq1<FP_F16>(dst + doff, src + soff, scales, n); break;
  }
}

int main(void) {
  kc_runner r = {"emul", emu_cast, emu_add, emu_scale, emu_copy2d, emu_quantize, emu_quantize2, emu_dequantize};
  kc_run_all(&r, kc_big());
  printf("%s: %d case(s), %d failed\n", kc_failures ? "FAIL" : "ok", kc_cases, kc_failures);
  return kc_failures ? 1 : 0;
}
