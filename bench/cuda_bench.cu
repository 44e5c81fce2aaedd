/* cuda_bench.cu - the GPU benchmarks of bench/gpu.sh, written as one JSON
 * object (--out FILE):
 *
 *  1. bandwidth of the CUDA kernels (kernels/kernels_cuda.h) as a fraction
 *     of a measured ceiling: a large device-to-device cudaMemcpyAsync. Bytes
 *     counted are those the operation must read plus write; times are CUDA
 *     events around the launch, median of --reps repetitions after a
 *     warm-up, each on fresh random inputs (filled on the device between
 *     repetitions, outside the timed region);
 *  2. host time per hook of the NCCL backend, eager vs graph vs capture-safe
 *     (clock_gettime around fp_exec_hook; the device synchronized after
 *     each step so a full launch queue never blocks a hook), on each --plan
 *     (world size 1), steps 2.. (after the warm-up and the capture);
 *  3. the size of the captured graphs: graphs, nodes, launches per step and
 *     per hook (graph mode: at most one a hook, docs/cuda.md);
 *  4. one graph per step (capture-safe mode, fp_exec_capture_begin/end):
 *     the plan's whole step captured once, then host time per replayed
 *     step (clock_gettime around cudaGraphLaunch, the device synchronized
 *     between replays) and device time per step (CUDA events around the
 *     launch), medians over --steps replays; the plan's work only (no
 *     model compute).
 *
 * usage: cuda_bench --out FILE [--mib M] [--reps R] [--steps S] --plan PLAN...
 * Exits 77 without a CUDA device. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "flexplan.h"
/* internals measured (a named exception of tests/layering.py): the CUDA
 * kernels themselves, below the executor */
#include "kernels/kernels_cuda.h"

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

static cudaStream_t S;
static int reps = 30;

/* fresh bits: every 16-bit half a finite bf16 of moderate size (exponents
 * 2^-15 .. 2^16), so read as fp32 or as bf16 the values are finite; read as
 * e4m3 bytes some are NaN codes (a NaN-free e4m3 input is not needed: the
 * dequantize kernel does the same work for them) */
__global__ void k_fill(uint16_t *p, int64_t halves, uint32_t seed) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < halves; i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 0x9e3779b9u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    p[i] = (uint16_t)((h & 0x807fu) | ((112u + ((h >> 10) & 31u)) << 7));
  }
}
static void fill(void *p, int64_t bytes, uint32_t seed) {
  k_fill<<<1024, 256, 0, S>>>((uint16_t *)p, bytes / 2, seed);
  CK(cudaGetLastError());
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
}

/* median milliseconds of op() over reps, after 3 warm-ups; inputs refilled
 * before each */
template <class F, class G> static double time_ms(F op, G refill) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int r = -3; r < reps; r++) {
    refill((uint32_t)(r + 1000));
    CK(cudaEventRecord(a, S));
    op();
    CK(cudaEventRecord(b, S));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 0) t.push_back(ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return median(t);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* ---- hooks ------------------------------------------------------------------------------------ */
struct hookres {
  double us_median, us_mean, us_p90;
  int64_t hooks, graphs, nodes, launches_per_step, ops;
  double launches_per_hook; /* graph mode: at most 1 (one graph per hook with work) */
};

static const char *mode_name(fp_cuda_mode m) {
  return m == FP_CUDA_GRAPH ? "graph" : m == FP_CUDA_EAGER ? "eager" : "capture_safe";
}

static hookres bench_hooks(const char *path, fp_cuda_mode mode, int steps, FILE *log) {
  fp_plan *plan = NULL;
  if (fp_plan_load(path, &plan) != FP_OK) {
    fprintf(stderr, "%s: %s\n", path, fp_plan_errmsg(plan));
    exit(1);
  }
  fp_plan_info info;
  fp_plan_get_info(plan, &info);
  fp_exec_config cfg = {};
  cfg.backend = FP_BACKEND_NCCL, cfg.rank = 0, cfg.world_size = 1, cfg.cuda_mode = mode, cfg.cuda_stream = S;
  fp_exec *x = NULL;
  fp_status st = fp_exec_create(plan, &cfg, &x);
  if (st != FP_OK) {
    fprintf(stderr, "%s: fp_exec_create: %s\n", path, fp_exec_errmsg(x));
    exit(1);
  }
  /* the hooks of one step, from the plan: (kind, module) per segment, read
   * back through the hook-order errors would be roundabout; the plan's
   * modules run forward then backward per micro-batch */
  std::vector<std::pair<fp_hook, int32_t>> seq;
  seq.push_back({FP_HOOK_STEP_BEGIN, -1});
  for (int64_t k = 0; k < info.grad_accumulation; k++) {
    for (int32_t m = 0; m < info.nmodules; m++) seq.push_back({FP_HOOK_PRE_FORWARD, m}), seq.push_back({FP_HOOK_POST_FORWARD, m});
    for (int32_t m = info.nmodules - 1; m >= 0; m--)
      seq.push_back({FP_HOOK_PRE_BACKWARD, m}), seq.push_back({FP_HOOK_POST_BACKWARD, m});
  }
  seq.push_back({FP_HOOK_PRE_OPTIMIZER, -1});
  seq.push_back({FP_HOOK_POST_OPTIMIZER, -1});
  std::vector<double> t;
  fp_exec_stats s0 = {}, s1 = {};
  for (int step = 0; step < steps; step++) {
    if (step == 2) fp_exec_get_stats(x, &s0);
    for (auto &h : seq) {
      double a = now_us();
      st = fp_exec_hook(x, h.first, h.second);
      double b = now_us();
      if (st != FP_OK) {
        fprintf(stderr, "%s: hook %s: %s\n", path, fp_hook_name(h.first), fp_exec_errmsg(x));
        exit(1);
      }
      if (step >= 2) t.push_back(b - a);
    }
    if (fp_exec_sync(x) != FP_OK) {
      fprintf(stderr, "%s: sync: %s\n", path, fp_exec_errmsg(x));
      exit(1);
    }
  }
  fp_exec_get_stats(x, &s1);
  hookres r = {};
  r.us_median = median(t);
  double sum = 0;
  for (double v : t) sum += v;
  r.us_mean = t.empty() ? 0 : sum / (double)t.size();
  std::vector<double> u = t;
  std::sort(u.begin(), u.end());
  r.us_p90 = u.empty() ? 0 : u[(size_t)(0.9 * (double)(u.size() - 1))];
  r.hooks = (int64_t)seq.size();
  r.graphs = s1.graphs, r.nodes = s1.graph_nodes;
  r.launches_per_step = steps > 2 ? (s1.graph_launches - s0.graph_launches) / (steps - 2) : 0;
  r.ops = (s1.local_ops + s1.collectives) / (s1.steps ? s1.steps : 1);
  r.launches_per_hook = r.hooks ? (double)r.launches_per_step / (double)r.hooks : 0;
  fprintf(log, "%s %s: %" PRId64 " hooks/step, %" PRId64 " ops/step: %.2f us/hook median (mean %.2f, p90 %.2f); "
          "%" PRId64 " graphs, %" PRId64 " nodes, %" PRId64 " launches/step (%.2f per hook)\n", path, mode_name(mode),
          r.hooks, r.ops, r.us_median, r.us_mean, r.us_p90, r.graphs, r.nodes, r.launches_per_step,
          r.launches_per_hook);
  fp_exec_destroy(x);
  fp_plan_free(plan);
  return r;
}

/* ---- one graph per step ------------------------------------------------------------------ */
struct stepres {
  double host_us, device_ms;
  int64_t hooks;
};

static stepres bench_step(const char *path, int replays, FILE *log) {
  fp_plan *plan = NULL;
  if (fp_plan_load(path, &plan) != FP_OK) {
    fprintf(stderr, "%s: %s\n", path, fp_plan_errmsg(plan));
    exit(1);
  }
  fp_plan_info info;
  fp_plan_get_info(plan, &info);
  fp_exec_config cfg = {};
  cfg.backend = FP_BACKEND_NCCL, cfg.rank = 0, cfg.world_size = 1, cfg.cuda_mode = FP_CUDA_CAPTURE_SAFE;
  cfg.cuda_stream = S;
  fp_exec *x = NULL;
  if (fp_exec_create(plan, &cfg, &x) != FP_OK) {
    fprintf(stderr, "%s: fp_exec_create: %s\n", path, fp_exec_errmsg(x));
    exit(1);
  }
  auto step = [&] { /* every segment of the plan, in order */
    for (int32_t k = 0; k < info.nsegments; k++) {
      fp_plan_segment sg;
      if (fp_plan_segment_at(plan, k, &sg) != FP_OK || fp_exec_hook(x, sg.hook, sg.module) != FP_OK) {
        fprintf(stderr, "%s: segment %d: %s\n", path, (int)k, fp_exec_errmsg(x));
        exit(1);
      }
    }
  };
  step(); /* uncaptured: NCCL's warm-up */
  CK(cudaStreamSynchronize(S));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(S, cudaStreamCaptureModeGlobal));
  if (fp_exec_capture_begin(x) != FP_OK) {
    fprintf(stderr, "%s: fp_exec_capture_begin: %s\n", path, fp_exec_errmsg(x));
    exit(1);
  }
  step();
  if (fp_exec_capture_end(x) != FP_OK) {
    fprintf(stderr, "%s: fp_exec_capture_end: %s\n", path, fp_exec_errmsg(x));
    exit(1);
  }
  CK(cudaStreamEndCapture(S, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphUpload(ge, S));
  std::vector<double> host, dev;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int r = 0; r < replays + 3; r++) {
    CK(cudaEventRecord(e0, S));
    double a = now_us();
    CK(cudaGraphLaunch(ge, S));
    double b = now_us();
    CK(cudaEventRecord(e1, S));
    CK(cudaStreamSynchronize(S));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 3) host.push_back(b - a), dev.push_back(ms);
  }
  stepres res = {median(host), median(dev), info.nsegments};
  fprintf(log, "%s one graph per step: %" PRId64 " hooks captured; %.2f us host per replayed step, %.4f ms device\n",
          path, res.hooks, res.host_us, res.device_ms);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  fp_exec_capture_release(x);
  fp_exec_destroy(x);
  fp_plan_free(plan);
  return res;
}

int main(int argc, char **argv) {
  const char *out = NULL;
  std::vector<const char *> plans;
  int64_t mib = 1024;
  int steps = 12;
  for (int k = 1; k < argc; k++) {
    if (!strcmp(argv[k], "--out") && k + 1 < argc) out = argv[++k];
    else if (!strcmp(argv[k], "--mib") && k + 1 < argc) mib = atoll(argv[++k]);
    else if (!strcmp(argv[k], "--reps") && k + 1 < argc) reps = atoi(argv[++k]);
    else if (!strcmp(argv[k], "--steps") && k + 1 < argc) steps = atoi(argv[++k]);
    else if (!strcmp(argv[k], "--plan") && k + 1 < argc) plans.push_back(argv[++k]);
    else {
      fprintf(stderr, "usage: cuda_bench --out FILE [--mib M] [--reps R] [--steps S] --plan PLAN...\n");
      return 2;
    }
  }
  if (!out || mib < 16 || reps < 1 || steps < 3) return 2;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("cuda_bench: SKIPPED: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int drv = 0, rt = 0, nccl = 0;
  CK(cudaDriverGetVersion(&drv));
  CK(cudaRuntimeGetVersion(&rt));
  ncclGetVersion(&nccl);
  CK(cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking));

  /* ---- bandwidth ---- */
  int64_t bytes = mib << 20, n32 = bytes / 4; /* n32 fp32 elements: the source of the widest kernels */
  char *A, *B, *C;
  CK(cudaMalloc((void **)&A, (size_t)bytes));
  CK(cudaMalloc((void **)&B, (size_t)bytes));
  CK(cudaMalloc((void **)&C, (size_t)bytes / 16 + 4096));
  auto refillA = [&](uint32_t seed) { fill(A, bytes, seed); };
  double copy_ms = time_ms([&] { CK(cudaMemcpyAsync(B, A, (size_t)bytes, cudaMemcpyDeviceToDevice, S)); }, refillA);
  double copy_gbps = 2.0 * (double)bytes / (copy_ms * 1e6);
  struct kres {
    const char *name;
    double moved, ms;
  };
  std::vector<kres> ks;
  auto run = [&](const char *name, double moved, auto op) { ks.push_back({name, moved, time_ms(op, refillA)}); };
  run("cast fp32->bf16", n32 * 6.0, [&] { CK(fpk_cuda_cast(B, FP_BF16, A, FP_F32, n32, S)); });
  run("cast bf16->fp32", n32 / 2 * 6.0, [&] { CK(fpk_cuda_cast(B, FP_F32, A, FP_BF16, n32 / 2, S)); });
  run("cast fp32->fp16", n32 * 6.0, [&] { CK(fpk_cuda_cast(B, FP_F16, A, FP_F32, n32, S)); });
  run("cast bf16->e4m3", n32 * 2 * 3.0, [&] { CK(fpk_cuda_cast(B, FP_E4M3, A, FP_BF16, n32 * 2, S)); });
  run("add fp32 += bf16", n32 / 2 * 10.0, [&] { CK(fpk_cuda_add(B, FP_F32, A, FP_BF16, n32 / 2, S)); });
  run("scale fp32", n32 * 8.0, [&] { CK(fpk_cuda_scale(A, FP_F32, 0.37, n32, S)); });
  run("copy2d 4 KiB rows", (double)bytes, [&] {
    CK(fpk_cuda_copy2d(B, 8192, A, 4096, 4096, bytes / 8192, S));
  });
  int64_t nq = n32 * 2; /* bf16 elements in A */
  run("quantize_mxfp8 bf16", nq * 2.0 + nq + nq / 32.0,
      [&] { CK(fpk_cuda_quantize_mxfp8((uint8_t *)B, (uint8_t *)C, A, FP_BF16, nq, S)); });
  run("quantize_mxfp8 fp32", n32 * 4.0 + n32 + n32 / 32.0,
      [&] { CK(fpk_cuda_quantize_mxfp8((uint8_t *)B, (uint8_t *)C, A, FP_F32, n32, S)); });
  run("dequantize_mxfp8 bf16", nq / 2 * 1.0 + nq / 2 / 32.0 + nq / 2 * 2.0,
      [&] { CK(fpk_cuda_dequantize_mxfp8(B, FP_BF16, (const uint8_t *)A, (const uint8_t *)C, nq / 2, S)); });
  CK(cudaFree(A));
  CK(cudaFree(B));
  CK(cudaFree(C));

  /* ---- hooks and graphs ---- */
  FILE *f = fopen(out, "w");
  if (!f) {
    perror(out);
    return 1;
  }
  fprintf(f, "{\n  \"gpu\": \"%s\",\n  \"sms\": %d,\n  \"cuda_driver\": %d,\n  \"cuda_runtime\": %d,\n  \"nccl\": %d,\n",
          prop.name, prop.multiProcessorCount, drv, rt, nccl);
  fprintf(f, "  \"method\": \"CUDA events around each launch, median of %d repetitions after 3 warm-ups, inputs "
             "refilled with fresh random bits before each; bytes = what the op must read + write; ceiling = "
             "cudaMemcpyAsync device-to-device of %" PRId64 " MiB (read + write)\",\n", reps, mib);
  fprintf(f, "  \"copy_ceiling_gbps\": %.1f,\n  \"kernels\": [\n", copy_gbps);
  printf("copy ceiling: %.1f GB/s (%" PRId64 " MiB, %.3f ms)\n", copy_gbps, mib, copy_ms);
  for (size_t i = 0; i < ks.size(); i++) {
    double gbps = ks[i].moved / (ks[i].ms * 1e6);
    printf("%-24s %8.1f GB/s  %.3f of the copy  (%.3f ms)\n", ks[i].name, gbps, gbps / copy_gbps, ks[i].ms);
    fprintf(f, "    {\"name\": \"%s\", \"bytes\": %.0f, \"ms\": %.4f, \"gbps\": %.1f, \"fraction_of_copy\": %.3f}%s\n",
            ks[i].name, ks[i].moved, ks[i].ms, gbps, gbps / copy_gbps, i + 1 < ks.size() ? "," : "");
  }
  fprintf(f, "  ],\n  \"hooks\": [\n");
  for (size_t p = 0; p < plans.size(); p++) {
    for (int m = FP_CUDA_GRAPH; m <= FP_CUDA_CAPTURE_SAFE; m++) {
      hookres r = bench_hooks(plans[p], (fp_cuda_mode)m, steps, stdout);
      const char *base = strrchr(plans[p], '/');
      fprintf(f, "    {\"plan\": \"%s\", \"mode\": \"%s\", \"hooks_per_step\": %" PRId64 ", \"ops_per_step\": %" PRId64
                 ", \"host_us_per_hook_median\": %.2f, \"host_us_per_hook_mean\": %.2f, \"host_us_per_hook_p90\": %.2f"
                 ", \"graphs\": %" PRId64 ", \"graph_nodes\": %" PRId64 ", \"graph_launches_per_step\": %" PRId64
                 ", \"graph_launches_per_hook\": %.3f}%s\n", base ? base + 1 : plans[p], mode_name((fp_cuda_mode)m),
              r.hooks, r.ops, r.us_median, r.us_mean, r.us_p90, r.graphs, r.nodes, r.launches_per_step,
              r.launches_per_hook,
              p + 1 < plans.size() || m < FP_CUDA_CAPTURE_SAFE ? "," : "");
    }
  }
  fprintf(f, "  ],\n  \"step_graph\": [\n");
  for (size_t p = 0; p < plans.size(); p++) {
    stepres r = bench_step(plans[p], steps, stdout);
    const char *base = strrchr(plans[p], '/');
    fprintf(f, "    {\"plan\": \"%s\", \"hooks_per_step\": %" PRId64 ", \"host_us_per_replayed_step_median\": %.2f"
               ", \"device_ms_per_step_median\": %.4f}%s\n", base ? base + 1 : plans[p], r.hooks, r.host_us,
            r.device_ms, p + 1 < plans.size() ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  fclose(f);
  CK(cudaStreamDestroy(S));
  return 0;
}
