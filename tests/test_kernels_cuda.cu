/* test_kernels_cuda.cu (label gpu) - the CUDA kernels launched on a GPU,
 * through kernels/kernels_cuda.h only, against the C references on the
 * cases of tests/kernel_cases.cuh: every dtype pair, aligned and unaligned
 * launches, lengths around every slot and block boundary and a long one,
 * random bits, realistic values and special values; the whole destination
 * buffer compared byte for byte. Also: bad arguments are refused, and a
 * kernel captured into a CUDA graph and replayed gives the same bytes.
 * Exits 77 without a device (tests/gpu_util.h). */
#include "kernels/kernels_cuda.h"
#include "tests/gpu_util.h"
#include "tests/kernel_cases.cuh"

static cudaStream_t S;
static uint8_t *dA, *dB, *dC; /* device scratch: dst, src, scales */
static int64_t cap_bytes;

/* uploads go on S, the kernels' stream: cudaMemcpy from pageable memory
 * returns once the bytes are staged, and its DMA on the legacy stream is not
 * ordered before work on a non-blocking stream (the first H200 run of this
 * test read half-uploaded sources at 2^20 elements) */
static void up(uint8_t *d, const uint8_t *h, int64_t n) {
  if (n > cap_bytes) {
    fprintf(stderr, "case too large for the scratch buffers\n");
    exit(1);
  }
  CUDA_OK(cudaMemcpyAsync(d, h, (size_t)n, cudaMemcpyHostToDevice, S));
  CUDA_OK(cudaStreamSynchronize(S)); /* h may change once this returns */
}
static void down(uint8_t *h, const uint8_t *d, int64_t n) {
  CUDA_OK(cudaStreamSynchronize(S));
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaMemcpy(h, d, (size_t)n, cudaMemcpyDeviceToHost));
}

static void g_cast(uint8_t *dst, int64_t db, int64_t doff, fp_dtype dt, const uint8_t *src, int64_t sb, int64_t soff,
                   fp_dtype st, int64_t n) {
  up(dA, dst, db);
  up(dB, src, sb);
  CUDA_OK(fpk_cuda_cast(dA + doff, dt, dB + soff, st, n, S));
  down(dst, dA, db);
}
static void g_add(uint8_t *dst, int64_t db, int64_t doff, fp_dtype dt, const uint8_t *src, int64_t sb, int64_t soff,
                  fp_dtype st, int64_t n, bool in_place) {
  up(dA, dst, db);
  up(dB, src, sb);
  CUDA_OK(fpk_cuda_add(dA + doff, dt, in_place ? dA + doff : dB + soff, st, n, S));
  down(dst, dA, db);
}
static void g_scale(uint8_t *dst, int64_t db, int64_t doff, fp_dtype dt, double alpha, int64_t n) {
  up(dA, dst, db);
  CUDA_OK(fpk_cuda_scale(dA + doff, dt, alpha, n, S));
  down(dst, dA, db);
}
static void g_copy2d(uint8_t *dst, int64_t db, int64_t doff, int64_t dp, const uint8_t *src, int64_t sb, int64_t soff,
                     int64_t sp, int64_t w, int64_t rows) {
  up(dA, dst, db);
  up(dB, src, sb);
  CUDA_OK(fpk_cuda_copy2d(dA + doff, dp, dB + soff, sp, w, rows, S));
  down(dst, dA, db);
}
static void g_quantize(uint8_t *dst, int64_t db, int64_t doff, uint8_t *sc, int64_t scb, const uint8_t *src, int64_t sb,
                       int64_t soff, fp_dtype st, int64_t n) {
  up(dA, dst, db);
  up(dB, src, sb);
  up(dC, sc, scb);
  CUDA_OK(fpk_cuda_quantize_mxfp8(dA + doff, dC, dB + soff, st, n, S));
  down(dst, dA, db);
  down(sc, dC, scb);
}
static void g_quantize2(uint8_t *dst, int64_t db, int64_t doff, uint8_t *sc, int64_t scb, const uint8_t *src, int64_t sb,
                        int64_t soff, fp_dtype st, int64_t n) {
  up(dA, dst, db);
  up(dB, src, sb);
  up(dC, sc, scb);
  CUDA_OK(fpk_cuda_mxfp8_scales(dC, dB + soff, st, n, S));
  CUDA_OK(fpk_cuda_quantize_mxfp8_scaled(dA + doff, dC, dB + soff, st, n, S));
  down(dst, dA, db);
  down(sc, dC, scb);
}
static void g_dequantize(uint8_t *dst, int64_t db, int64_t doff, fp_dtype dt, const uint8_t *src, int64_t sb,
                         int64_t soff, const uint8_t *sc, int64_t scb, int64_t n) {
  up(dA, dst, db);
  up(dB, src, sb);
  up(dC, sc, scb);
  CUDA_OK(fpk_cuda_dequantize_mxfp8(dA + doff, dt, dB + soff, dC, n, S));
  down(dst, dA, db);
}

static int other_failures;
#define EXPECT(c)                                                             \
  do {                                                                        \
    if (!(c)) {                                                               \
      other_failures++;                                                       \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);  \
    }                                                                         \
  } while (0)

/* bad arguments launch nothing and say so */
static void refusals(void) {
  EXPECT(fpk_cuda_cast(dA, FP_E8M0, dB, FP_F32, 4, S) == cudaErrorInvalidValue);
  EXPECT(fpk_cuda_cast(dA, FP_F32, dB, FP_U8, 4, S) == cudaErrorInvalidValue);
  EXPECT(fpk_cuda_add(dA, FP_E4M3, dB, FP_F32, 4, S) == cudaErrorInvalidValue);
  EXPECT(fpk_cuda_scale(dA, FP_F32, 1.0, -1, S) == cudaErrorInvalidValue);
  EXPECT(fpk_cuda_copy2d(dA, 4, dB, 4, 4, 0, S) == cudaErrorInvalidValue);
  EXPECT(fpk_cuda_quantize_mxfp8(dA, dC, dB, FP_E4M3, 32, S) == cudaErrorInvalidValue);
  EXPECT(fpk_cuda_dequantize_mxfp8(dA, FP_U8, dB, dC, 32, S) == cudaErrorInvalidValue);
  EXPECT(fpk_cuda_cast(NULL, FP_F32, NULL, FP_BF16, 0, S) == cudaSuccess); /* n = 0: nothing touched */
  EXPECT(cudaGetLastError() == cudaSuccess);
}

/* a cast and a quantization captured into one graph, replayed twice on new
 * inputs: the same bytes as the reference */
static void captured(void) {
  enum { N = 4096 + 5 };
  float *x = (float *)malloc(N * 4);
  uint8_t *want = (uint8_t *)malloc(N * 2), *got = (uint8_t *)malloc(N * 2);
  uint8_t wq[N], gq[N], ws[N / 32 + 1], gs[N / 32 + 1];
  cudaStream_t cs;
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
  CUDA_OK(fpk_cuda_cast(dA, FP_BF16, dB, FP_F32, N, cs));
  CUDA_OK(fpk_cuda_quantize_mxfp8(dC, dC + 2 * N, dB, FP_F32, N, cs));
  CUDA_OK(cudaStreamEndCapture(cs, &g));
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 2; rep++) {
    kc_fill((uint8_t *)x, N, FP_F32, rep ? FILL_BITS : FILL_VALUES);
    CUDA_OK(cudaMemcpyAsync(dB, x, N * 4, cudaMemcpyHostToDevice, cs)); /* ordered before the replay */
    CUDA_OK(cudaGraphLaunch(ge, cs));
    CUDA_OK(cudaStreamSynchronize(cs));
    CUDA_OK(cudaMemcpy(got, dA, N * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(gq, dC, N, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(gs, dC + 2 * N, sizeof gs, cudaMemcpyDeviceToHost));
    fpk_cast(want, FP_BF16, x, FP_F32, N);
    fpk_quantize_mxfp8(wq, ws, x, FP_F32, N);
    kc_check("graph replay: cast fp32 -> bf16", want, got, N * 2);
    kc_check("graph replay: quantize_mxfp8", wq, gq, N);
    kc_check("graph replay: quantize_mxfp8 scales", ws, gs, (int64_t)sizeof gs);
  }
  CUDA_OK(cudaGraphExecDestroy(ge));
  CUDA_OK(cudaGraphDestroy(g));
  CUDA_OK(cudaStreamDestroy(cs));
  free(x), free(want), free(got);
}

int main(void) {
  fp_need_gpu("test_kernels_cuda");
  int64_t big = kc_big();
  cap_bytes = (big + 64) * 4 + 4096;
  CUDA_OK(cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void **)&dA, (size_t)cap_bytes));
  CUDA_OK(cudaMalloc((void **)&dB, (size_t)cap_bytes));
  CUDA_OK(cudaMalloc((void **)&dC, (size_t)cap_bytes));
  kc_runner r = {"cuda", g_cast, g_add, g_scale, g_copy2d, g_quantize, g_quantize2, g_dequantize};
  kc_run_all(&r, big);
  refusals();
  captured();
  CUDA_OK(cudaFree(dA));
  CUDA_OK(cudaFree(dB));
  CUDA_OK(cudaFree(dC));
  CUDA_OK(cudaStreamDestroy(S));
  printf("%s: %d case(s), %d failed; %d other check(s) failed\n", kc_failures || other_failures ? "FAIL" : "ok",
         kc_cases, kc_failures, other_failures);
  return kc_failures || other_failures ? 1 : 0;
}
