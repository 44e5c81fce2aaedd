/* gpu_util.h - what the GPU tests share: the skip rule. A GPU test exits 77
 * (ctest SKIP_RETURN_CODE: "skipped", never "passed") when
 * cudaGetDeviceCount fails - on a machine without a driver it returns an
 * error such as cudaErrorNoDevice or cudaErrorInsufficientDriver, not a
 * count of zero - or finds no device. Everything else is the test's own
 * verdict. */
#ifndef FP_TESTS_GPU_UTIL_H
#define FP_TESTS_GPU_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#define FP_TEST_SKIP 77

/* exits 77 with a line saying why when there is no usable CUDA device */
static inline void fp_need_gpu(const char *test) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    printf("%s: SKIPPED: no CUDA device (cudaGetDeviceCount: %s, %d device(s))\n", test,
           e != cudaSuccess ? cudaGetErrorString(e) : "ok", n);
    fflush(stdout);
    exit(FP_TEST_SKIP);
  }
}

#define CUDA_OK(call)                                                                                   \
  do {                                                                                                  \
    cudaError_t e_ = (call);                                                                            \
    if (e_ != cudaSuccess) {                                                                            \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));            \
      exit(1);                                                                                          \
    }                                                                                                   \
  } while (0)

/* Host-to-device fills that the executor's streams may read at once.
 * cudaMemcpy from pageable memory returns once the bytes are staged and
 * cudaMemset of device memory may return before it ran; both run on the
 * legacy stream, which non-blocking streams (the executor's) are not
 * ordered after. So: the call, then the device synchronized. */
static inline cudaError_t fp_gpu_upload(void *dev, const void *host, size_t n) {
  cudaError_t e = cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice);
  return e == cudaSuccess ? cudaDeviceSynchronize() : e;
}
static inline cudaError_t fp_gpu_fill(void *dev, int byte, size_t n) {
  cudaError_t e = cudaMemset(dev, byte, n);
  return e == cudaSuccess ? cudaDeviceSynchronize() : e;
}

#endif
