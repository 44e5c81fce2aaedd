/* test_simdev_stream.c (label simdev; mpirun -n 1) - the stream contract's
 * resolution on the C side (include/flexplan.h, docs/cuda.md "The stream
 * contract"), on the simulated device:
 *  - cfg.cuda_stream FP_CUDA_STREAM_LEGACY: the plan's compute stream is the
 *    legacy default stream, never one the executor makes;
 *  - NULL: no stream given: the executor's own, non-blocking stream;
 *  - a side stream: that stream;
 *  - fp_exec_set_cuda_stream: the new stream from the next hook on, ordered
 *    after the old one (a kernel queued on the old stream before the switch
 *    is done before a copy the new stream runs after a step); NULL and the
 *    MPI backend refused (FP_ERR_ARG), a switch while the compute stream is
 *    being captured refused (FP_ERR_ORDER), the executor usable after each
 *    refusal. */
#include <cuda_runtime_api.h>

#include "kernels/kernels_cuda.h"
#include "tests/exec_util.h"

static fp_plan *small_plan(void) {
  tprog t = tp_new(1);
  int w = tp_buf(&t, "w", 64 * 4, false), g = tp_buf(&t, "g", 64 * 4, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, 64);
  o->comm = t.world, o->dst = fpi_reg(g, 0), o->src = fpi_reg(w, 0);
  tp_sync(&t, FP_OP_RECORD, FP_STREAM_AG, 0);
  tp_sync(&t, FP_OP_WAIT, FP_STREAM_COMPUTE, 0);
  t.p->nevents = 1;
  fp_plan *plan = tp_load(&t);
  fpi_arena_free(t.a);
  return plan;
}

static fp_exec *make(const fp_plan *plan, void *stream, fp_backend b) {
  fp_exec_config cfg = {.backend = b, .rank = 0, .world_size = 1, .cuda_mode = FP_CUDA_EAGER,
                        .cuda_stream = stream};
  fp_exec *x = NULL;
  fp_status st = fp_exec_create(plan, &cfg, &x);
  EXPECT(st == FP_OK, "create: %s", fp_exec_errmsg(x));
  return x;
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  fp_plan *plan = small_plan();
  cudaStream_t side, other;
  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);

  fp_exec *x = make(plan, FP_CUDA_STREAM_LEGACY, FP_BACKEND_NCCL);
  EXPECT(fp_exec_cuda_stream(x) == FP_CUDA_STREAM_LEGACY, "the legacy stream given: the compute stream is %p",
         fp_exec_cuda_stream(x));
  EXPECT(fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1) == FP_OK && fp_exec_sync(x) == FP_OK, "a step on the legacy stream: %s",
         fp_exec_errmsg(x));
  fp_exec_destroy(x);

  x = make(plan, NULL, FP_BACKEND_NCCL);
  void *own = fp_exec_cuda_stream(x);
  unsigned flags = 0;
  EXPECT(own && own != FP_CUDA_STREAM_LEGACY && cudaStreamGetFlags(own, &flags) == cudaSuccess &&
             (flags & cudaStreamNonBlocking),
         "no stream given: the executor's own non-blocking stream (%p, flags %u)", own, flags);
  fp_exec_destroy(x);

  x = make(plan, side, FP_BACKEND_NCCL);
  EXPECT(fp_exec_cuda_stream(x) == side, "a side stream given: the compute stream is %p", fp_exec_cuda_stream(x));
  /* work on the old stream, then the switch: the new stream's work comes
   * after it; new streams each round (the scheduler draws each stream's
   * weight and laziness when it is made) */
  float *d = NULL, h[64];
  cudaMalloc((void **)&d, 64 * 4);
  uint32_t bits = 0x3f3f3f3fu;
  float v;
  memcpy(&v, &bits, 4);
  cudaStream_t cur = side, made[16];
  for (int r = 0; r < 16; r++) {
    cudaStreamCreateWithFlags(&made[r], cudaStreamNonBlocking);
    cudaStream_t old = r % 2 ? cur : made[r];
    if (old != cur) EXPECT(fp_exec_set_cuda_stream(x, old) == FP_OK, "round %d: switch: %s", r, fp_exec_errmsg(x));
    cudaMemsetAsync(d, 0x3f, 64 * 4, old); /* 0x3f3f3f3f: 0.747 */
    EXPECT(fpk_cuda_scale(d, FP_F32, 2.0, 64, old) == cudaSuccess, "a kernel on the old stream");
    cudaStream_t next = old == side ? other : side;
    EXPECT(fp_exec_set_cuda_stream(x, next) == FP_OK, "round %d: switch: %s", r, fp_exec_errmsg(x));
    EXPECT(fp_exec_cuda_stream(x) == next, "round %d: the compute stream after the switch", r);
    EXPECT(fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1) == FP_OK, "round %d: a step on the new stream: %s", r,
           fp_exec_errmsg(x));
    cudaMemcpyAsync(h, d, 64 * 4, cudaMemcpyDeviceToHost, next); /* to pageable memory: the host waits */
    EXPECT(h[0] == 2.0f * v && h[63] == 2.0f * v, "round %d: the new stream ran after the old one's work: %g, want %g",
           r, (double)h[0], 2.0 * v);
    cur = next;
  }
  EXPECT(fp_exec_set_cuda_stream(x, other) == FP_OK, "back on a stream of the test's: %s", fp_exec_errmsg(x));
  /* refusals leave the executor usable */
  EXPECT(fp_exec_set_cuda_stream(x, NULL) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "FP_CUDA_STREAM_LEGACY"),
         "NULL refused: %s", fp_exec_errmsg(x));
  cudaStreamBeginCapture(other, cudaStreamCaptureModeThreadLocal);
  EXPECT(fp_exec_set_cuda_stream(x, side) == FP_ERR_ORDER, "a switch inside a capture refused: %s",
         fp_exec_errmsg(x));
  cudaGraph_t g = NULL;
  cudaStreamEndCapture(other, &g);
  if (g) cudaGraphDestroy(g);
  EXPECT(fp_exec_set_cuda_stream(x, FP_CUDA_STREAM_LEGACY) == FP_OK && fp_exec_sync(x) == FP_OK,
         "usable after the refusals: %s", fp_exec_errmsg(x));
  fp_exec_destroy(x);
  cudaFree(d);
  for (int r = 0; r < 16; r++) cudaStreamDestroy(made[r]);

  x = make(plan, NULL, FP_BACKEND_MPI);
  EXPECT(fp_exec_set_cuda_stream(x, side) == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "mpi"),
         "the MPI backend has no stream: %s", fp_exec_errmsg(x));
  fp_exec_destroy(x);
  cudaStreamDestroy(side);
  cudaStreamDestroy(other);
  fp_plan_free(plan);
  return tu_finish();
}
