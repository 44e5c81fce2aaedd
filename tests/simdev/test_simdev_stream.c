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
 *    refusal;
 *  - the synchronous copies (CUDA's "API synchronization behavior"):
 *    cudaMemcpy from pageable host memory or device to device, and
 *    cudaMemset, return before the legacy stream ran them, so a kernel on a
 *    non-blocking stream may read the old bytes (the H200 kernel harness's
 *    failure) - a sweep of seeds, each in a child process, must show it
 *    under some seed, and never with the device synchronized first, the copy
 *    on the reading stream, a blocking reading stream, or a pinned source
 *    (whose cudaMemcpy the host waits for). */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <sys/wait.h>

#include "kernels/kernels_cuda.h"
#include "tests/exec_util.h"

/* ---- the synchronous copies against a non-blocking stream ---- */
enum { R_PAGEABLE, R_D2D, R_MEMSET, R_SYNCED, R_SAME_STREAM, R_BLOCKING, R_PINNED, R_NCASES };
static const char *const case_name[R_NCASES] = {
    "cudaMemcpy pageable -> device",   "cudaMemcpy device -> device",    "cudaMemset",
    "cudaMemcpy + cudaDeviceSynchronize", "cudaMemcpyAsync on the reading stream", "a blocking reading stream",
    "cudaMemcpy pinned -> device"};
/* the cases where the reader may see the old bytes */
static bool may_race(int c) { return c == R_PAGEABLE || c == R_D2D || c == R_MEMSET; }
enum { RACE_BYTES = 256, RACE_ROUNDS = 4, RACE_SEEDS = 8, OLD = 0x11, NEW = 0x22, LATER = 0x33 };
enum { SAW_NEW, SAW_OLD, SAW_OTHER };

/* one round of case c: d holds OLD (the device synchronized), the call puts
 * NEW there, a kernel on stream s copies d to e, the host reads e back on s */
static int race_round(int c) {
  unsigned char h[RACE_BYTES], got[RACE_BYTES], *pin = NULL, *d = NULL, *src = NULL, *e = NULL;
  cudaStream_t s = NULL;
  const size_t n = RACE_BYTES;
  cudaError_t st = cudaStreamCreateWithFlags(&s, c == R_BLOCKING ? cudaStreamDefault : cudaStreamNonBlocking);
  if (st == cudaSuccess) st = cudaMalloc((void **)&d, n);
  if (st == cudaSuccess) st = cudaMalloc((void **)&src, n);
  if (st == cudaSuccess) st = cudaMalloc((void **)&e, n);
  if (st == cudaSuccess) st = cudaHostAlloc((void **)&pin, n, 0);
  memset(h, OLD, n);
  if (st == cudaSuccess) st = cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
  memset(h, NEW, n);
  if (st == cudaSuccess) st = cudaMemcpy(src, h, n, cudaMemcpyHostToDevice);
  if (st == cudaSuccess) st = cudaDeviceSynchronize();
  if (pin) memset(pin, NEW, n);
  if (st == cudaSuccess) {
    switch (c) {
      case R_D2D: st = cudaMemcpy(d, src, n, cudaMemcpyDeviceToDevice); break;
      case R_MEMSET: st = cudaMemset(d, NEW, n); break;
      case R_SAME_STREAM: st = cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s); break;
      case R_PINNED: st = cudaMemcpy(d, pin, n, cudaMemcpyHostToDevice); break;
      default: st = cudaMemcpy(d, h, n, cudaMemcpyHostToDevice); break;
    }
  }
  memset(h, LATER, n); /* staged when the copy was queued: never read */
  if (st == cudaSuccess && c == R_SYNCED) st = cudaDeviceSynchronize();
  if (st == cudaSuccess) st = fpk_cuda_copy2d(e, (int64_t)n, d, (int64_t)n, (int64_t)n, 1, s);
  if (st == cudaSuccess) st = cudaMemcpyAsync(got, e, n, cudaMemcpyDeviceToHost, s); /* the host waits for s */
  cudaError_t end = cudaDeviceSynchronize();
  int r = SAW_OTHER;
  if (st == cudaSuccess && end == cudaSuccess) {
    int nnew = 0, nold = 0;
    for (size_t k = 0; k < n; k++) nnew += got[k] == NEW, nold += got[k] == OLD;
    r = nnew == (int)n ? SAW_NEW : nold == (int)n ? SAW_OLD : SAW_OTHER;
  } else {
    fprintf(stderr, "%s: %s\n", case_name[c], cudaGetErrorString(st != cudaSuccess ? st : end));
  }
  cudaFree(d), cudaFree(src), cudaFree(e), cudaFreeHost(pin);
  if (s) cudaStreamDestroy(s);
  return r;
}

/* a child process on its own seed: RACE_ROUNDS rounds of every case, the
 * counts (SAW_*) written to fd */
static void race_child(unsigned seed, int fd) {
  char v[16];
  snprintf(v, sizeof v, "%u", seed);
  setenv("FP_SIMDEV_SEED", v, 1); /* read when the simulator starts: at the child's first CUDA call */
  int counts[R_NCASES][3] = {{0}};
  for (int k = 0; k < RACE_ROUNDS; k++)
    for (int c = 0; c < R_NCASES; c++) counts[c][race_round(c)]++;
  int ok = write(fd, counts, sizeof counts) == (ssize_t)sizeof counts;
  close(fd);
  exit(ok ? 0 : 1);
}

/* seeds 1..RACE_SEEDS, one child each (before this process starts the
 * simulator or MPI): a racing case must read the old bytes under some seed,
 * and no case may read anything but the old or the new bytes */
static void race_sweep(void) {
  int total[R_NCASES][3] = {{0}};
  char seeds[R_NCASES][64] = {{0}};
  for (unsigned seed = 1; seed <= RACE_SEEDS; seed++) {
    int fds[2];
    if (pipe(fds) != 0) {
      EXPECT(0, "pipe: %s", strerror(errno));
      return;
    }
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      race_child(seed, fds[1]);
    }
    close(fds[1]);
    int counts[R_NCASES][3], status = 0;
    ssize_t got = pid > 0 ? read(fds[0], counts, sizeof counts) : -1;
    close(fds[0]);
    if (pid > 0) waitpid(pid, &status, 0);
    EXPECT(got == (ssize_t)sizeof counts && WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "seed %u: the child failed (read %zd bytes, status %d)", seed, got, status);
    if (got != (ssize_t)sizeof counts) continue;
    for (int c = 0; c < R_NCASES; c++) {
      for (int k = 0; k < 3; k++) total[c][k] += counts[c][k];
      size_t len = strlen(seeds[c]);
      if (counts[c][SAW_OLD]) snprintf(seeds[c] + len, sizeof seeds[c] - len, " %u", seed);
    }
  }
  for (int c = 0; c < R_NCASES; c++) {
    printf("sync copies: %-38s new %2d, old %2d, other %d of %d rounds; old under seeds:%s\n", case_name[c],
           total[c][SAW_NEW], total[c][SAW_OLD], total[c][SAW_OTHER], RACE_SEEDS * RACE_ROUNDS,
           seeds[c][0] ? seeds[c] : " none");
    EXPECT(total[c][SAW_OTHER] == 0, "%s: the reader saw neither the old nor the new bytes", case_name[c]);
    if (may_race(c))
      EXPECT(total[c][SAW_OLD] > 0, "%s: no seed of %d let a non-blocking stream read the old bytes", case_name[c],
             RACE_SEEDS);
    else
      EXPECT(total[c][SAW_OLD] == 0, "%s: the reader saw the old bytes (seeds%s)", case_name[c], seeds[c]);
  }
  fflush(stdout);
}

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
  race_sweep(); /* first: its children start the simulator each on their own seed */
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
