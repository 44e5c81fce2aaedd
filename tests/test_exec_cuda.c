/* test_exec_cuda.c (label gpu; mpiexec -n 1) - the NCCL backend against the
 * MPI backend on one program that holds every op of ir/ops.def, across all
 * three streams with the record/wait edges the sync pass gives it:
 *
 *  - the same program, the same initial bytes, N steps on the MPI backend
 *    (host memory, the reference kernels) and on the NCCL backend in each
 *    mode - eager; graph (step 0 eager, graphs captured at step 1, replayed
 *    from then on); capture-safe with this test capturing whole steps on its
 *    own compute stream and replaying them - must leave both arenas (device
 *    and host) identical, byte for byte; at world size 1 every reduction is
 *    a copy, so this is exact;
 *  - graph mode captured one graph for the segment's three streams and
 *    launched it once per hook; no hook allocated;
 *  - a hook called while the compute stream is being captured in graph mode
 *    is refused (FP_ERR_ORDER) and the executor stays usable; fp_exec_sync
 *    inside a capture is refused;
 *  - a refit keeps every view's address, and the graphs captured before it
 *    compute with the new weights (the arena equals the MPI run's, which
 *    made the same refit);
 *  - one graph per step through the capture API (fp_exec_capture_begin/end,
 *    a global-mode capture of step 1, replays and a refit between them):
 *    the arenas equal the MPI run's; its refusals (the MPI backend, graph
 *    mode, no capture, before the warm-up step, inside a step, end without
 *    begin, no step captured, release with no graph) each with its status
 *    and message, nothing changed by them; fp_exec_capture_live counts;
 *  - the executor's own stream when none is given; each bootstrap (MPI, an
 *    id from fp_nccl_get_id, NCCL_COMM_ID) gives a working executor.
 * Exits 77 without a CUDA device (after checking the program on the MPI
 * backend alone, which needs none). */
#include <cuda_runtime_api.h>

#include "executor/safetensors.h"
#include "kernels/kernels.h"
#include "tests/exec_util.h"
#include "tests/gpu_util.h"


enum { N = 1000, AGN = 96, ROWS = 7, W_ELEMS = 40, SP = 44, DP = 48 };

static int b_a32, b_b16, b_c32, b_e8, b_sc, b_dq, b_cp, b_ms, b_agd, b_agi, b_agv, b_rs, b_rsi, b_rsv, b_ar, b_bc,
    b_rd, b_tx, b_rx, b_hst, b_hd, b_hst2, b_w;

/* every op, one segment, three streams; the sync pass adds the events */
static fp_plan *every_op_plan(void) {
  tprog t = tp_new(1);
  int64_t off[1] = {3}, cnt[1] = {AGN - 5};
  int tab = fpi_ir_table_add(t.p, "pieces", 1, off, cnt);
  b_a32 = tp_buf(&t, "a32", N * 4, false);
  b_b16 = tp_buf(&t, "b16", N * 2, false);
  b_c32 = tp_buf(&t, "c32", N * 4, false);
  b_e8 = tp_buf(&t, "e8", N, false);
  b_sc = tp_buf(&t, "sc", (N + 31) / 32, false);
  b_dq = tp_buf(&t, "dq", N * 2, false);
  b_cp = tp_buf(&t, "cp", ROWS * DP * 4, false);
  b_ms = tp_buf(&t, "ms", 333, false);
  b_agd = tp_buf(&t, "agd", AGN * 2, false);
  b_agi = tp_buf(&t, "agi", AGN * 4, false);
  b_agv = tp_buf(&t, "agv", AGN, false);
  b_rs = tp_buf(&t, "rs", AGN * 4, false);
  b_rsi = tp_buf(&t, "rsi", AGN * 2, false);
  b_rsv = tp_buf(&t, "rsv", AGN * 4, false);
  b_ar = tp_buf(&t, "ar", AGN * 2, false);
  b_bc = tp_buf(&t, "bc", AGN * 4, false);
  b_rd = tp_buf(&t, "rd", AGN * 4, false);
  b_tx = tp_buf(&t, "tx", AGN * 4, false);
  b_rx = tp_buf(&t, "rx", AGN * 4, false);
  b_w = tp_buf(&t, "w", 64 * 4, false); /* the param's main weight */
  b_hst = tp_buf(&t, "hst", 256, true);
  b_hd = tp_buf(&t, "hd", 256, false);
  b_hst2 = tp_buf(&t, "hst2", 200, true);
  fp_ir_param *q = fpi_ir_param_add(t.p);
  q->name = "m.weight", q->ndim = 1, q->shape[0] = 64, q->module = t.module, q->bucket = -1;
  q->main_dtype = q->param_dtype = q->grad_dtype = FP_F32;
  q->placement = 3; /* replicate */
  q->main = (fp_view){b_w, 0};
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o;
  /* ag: cast, gathers, quantize, a gather of e4m3 bytes over a table */
  o = tp_op(&t, FP_OP_CAST, FP_STREAM_AG, FP_BF16, N);
  o->sdtype = FP_F32, o->dst = fpi_reg(b_b16, 0), o->src = fpi_reg(b_a32, 0);
  o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_BF16, AGN);
  o->comm = t.world, o->dst = fpi_reg(b_agd, 0), o->src = fpi_reg(b_b16, 2 * 10);
  o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, AGN);
  o->comm = t.world, o->dst = fpi_reg(b_agi, 0), o->src = fpi_reg_g(b_agi, 0, AGN * 4);
  o = tp_op(&t, FP_OP_QUANTIZE_MXFP8, FP_STREAM_AG, FP_E4M3, N / 32 * 32);
  o->sdtype = FP_BF16, o->dst = fpi_reg(b_e8, 0), o->src = fpi_reg(b_b16, 0), o->aux = fpi_reg(b_sc, 0);
  o = tp_op(&t, FP_OP_ALL_GATHER_V, FP_STREAM_AG, FP_E4M3, 0);
  o->comm = t.world, o->tab = tab, o->dst = fpi_reg(b_agv, 0), o->src = fpi_reg(b_e8, 7);
  /* compute: add, scale, 2-D copy, memset, dequantize, h2d, d2h */
  o = tp_op(&t, FP_OP_ADD, FP_STREAM_COMPUTE, FP_F32, N);
  o->sdtype = FP_BF16, o->dst = fpi_reg(b_c32, 0), o->src = fpi_reg(b_b16, 0);
  o = tp_op(&t, FP_OP_ADD, FP_STREAM_COMPUTE, FP_F32, 64); /* reads the param: refits show */
  o->dst = fpi_reg(b_c32, 0), o->src = fpi_reg(b_w, 0);
  o = tp_op(&t, FP_OP_SCALE, FP_STREAM_COMPUTE, FP_F32, N);
  o->alpha = 0.37, o->dst = fpi_reg(b_c32, 0);
  o = tp_op(&t, FP_OP_COPY, FP_STREAM_COMPUTE, FP_F32, W_ELEMS);
  o->dst = fpi_reg(b_cp, 4), o->src = fpi_reg(b_a32, 12);
  fpi_ir_op_shape(t.p, o, ROWS, DP * 4, SP * 4);
  o = tp_op(&t, FP_OP_MEMSET, FP_STREAM_COMPUTE, FP_F16, 150);
  o->dst = fpi_reg(b_ms, 6);
  o = tp_op(&t, FP_OP_DEQUANTIZE_MXFP8, FP_STREAM_COMPUTE, FP_BF16, N / 32 * 32);
  o->sdtype = FP_E4M3, o->dst = fpi_reg(b_dq, 0), o->src = fpi_reg(b_e8, 0), o->aux = fpi_reg(b_sc, 0);
  o = tp_op(&t, FP_OP_H2D, FP_STREAM_COMPUTE, FP_U8, 200);
  o->dst = fpi_reg(b_hd, 0), o->src = fpi_reg(b_hst, 16);
  o = tp_op(&t, FP_OP_D2H, FP_STREAM_COMPUTE, FP_U8, 200);
  o->dst = fpi_reg(b_hst2, 0), o->src = fpi_reg(b_c32, 40);
  /* rs: every reduction (in place and not), broadcast, a send/recv pair */
  o = tp_op(&t, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, FP_F32, AGN);
  o->comm = t.world, o->dst = fpi_reg(b_rs, 0), o->src = fpi_reg(b_c32, 8);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, FP_BF16, AGN);
  o->comm = t.world, o->dst = fpi_reg_g(b_rsi, 0, AGN * 2), o->src = fpi_reg(b_rsi, 0);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER_V, FP_STREAM_RS, FP_F32, 0);
  o->comm = t.world, o->tab = tab, o->dst = fpi_reg(b_rsv, 0), o->src = fpi_reg(b_c32, 100);
  o = tp_op(&t, FP_OP_ALL_REDUCE, FP_STREAM_RS, FP_BF16, AGN);
  o->comm = t.world, o->dst = fpi_reg(b_ar, 0), o->src = fpi_reg(b_ar, 0);
  o = tp_op(&t, FP_OP_BROADCAST, FP_STREAM_RS, FP_F32, AGN);
  o->comm = t.world, o->root = 0, o->dst = fpi_reg(b_bc, 0), o->src = fpi_reg(b_c32, 200);
  o = tp_op(&t, FP_OP_REDUCE, FP_STREAM_RS, FP_F32, AGN);
  o->comm = t.world, o->root = 0, o->dst = fpi_reg(b_rd, 0), o->src = fpi_reg(b_bc, 0);
  o = tp_op(&t, FP_OP_SEND, FP_STREAM_RS, FP_F32, AGN);
  o->comm = t.world, o->root = 0, o->src = fpi_reg(b_tx, 0), o->group = 0;
  o = tp_op(&t, FP_OP_RECV, FP_STREAM_RS, FP_F32, AGN);
  o->comm = t.world, o->root = 0, o->dst = fpi_reg(b_rx, 0), o->group = 0;
  o = tp_op(&t, FP_OP_COPY, FP_STREAM_RS, FP_F32, AGN);
  o->dst = fpi_reg(b_tx, 0), o->src = fpi_reg(b_rx, 0);
  fp_plan *plan = tp_load(&t);
  fpi_arena_free(t.a);
  return plan;
}

/* ---- initial bytes, arenas as the host sees them ------------------------------------------------ */
static uint8_t *init_dev, *init_host;
static int64_t dev_bytes, host_bytes;
static uint64_t rng = 0x2545f4914f6cdd1dull;

/* finite values (no NaN: a reduction's NaN payload is NCCL's business) */
static void fill_init(const fp_prog *p) {
  dev_bytes = p->arena_bytes, host_bytes = p->host_bytes;
  init_dev = calloc(1, (size_t)dev_bytes + 1);
  init_host = calloc(1, (size_t)host_bytes + 1);
  for (int64_t i = 0; i + 4 <= dev_bytes; i += 4) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    float f = (float)((int64_t)(rng >> 40) - (1 << 23)) / (float)(1 << 20);
    memcpy(init_dev + i, &f, 4);
  }
  for (int64_t i = 0; i < host_bytes; i++) init_host[i] = (uint8_t)(i * 7 + 3);
}

static void load_init(fp_exec *x, bool gpu) {
  if (gpu) {
    CUDA_OK(fp_gpu_upload(x->dev, init_dev, (size_t)dev_bytes));
  } else {
    memcpy(x->dev, init_dev, (size_t)dev_bytes);
  }
  memcpy(x->host, init_host, (size_t)host_bytes);
}

static void arenas(fp_exec *x, bool gpu, uint8_t *dev, uint8_t *host) {
  EXPECT(fp_exec_sync(x) == FP_OK, "sync: %s", fp_exec_errmsg(x));
  if (gpu) CUDA_OK(cudaMemcpy(dev, x->dev, (size_t)dev_bytes, cudaMemcpyDeviceToHost));
  else memcpy(dev, x->dev, (size_t)dev_bytes);
  memcpy(host, x->host, (size_t)host_bytes);
}

static fp_exec *make(const fp_plan *plan, fp_exec_config cfg) {
  fp_exec *x = NULL;
  fp_status st = fp_exec_create(plan, &cfg, &x);
  if (st != FP_OK) {
    fprintf(stderr, "fp_exec_create: %s: %s\n", fp_status_name(st), fp_exec_errmsg(x));
    exit(1);
  }
  return x;
}

/* a safetensors file with new weights for m.weight */
static void refit(fp_exec *x, float base) {
  char path[256];
  snprintf(path, sizeof path, "/tmp/fp-exec-cuda-%d.safetensors", (int)getpid());
  float w[64];
  for (int i = 0; i < 64; i++) w[i] = base + (float)i / 8.0f;
  fp_st_tensor ts = {.name = "m.weight", .dtype = FP_F32, .ndim = 1};
  ts.shape[0] = 64;
  const void *data[1] = {w};
  char err[256];
  EXPECT(fpi_st_write(path, 1, &ts, data, err, sizeof err), "%s", err);
  fp_param_view before, after;
  fp_exec_param(x, "m.weight", &before);
  const char *paths[1] = {path};
  EXPECT(fp_exec_load_weights(x, paths, 1) == FP_OK, "refit: %s", fp_exec_errmsg(x));
  fp_exec_param(x, "m.weight", &after);
  EXPECT(before.main.data == after.main.data && before.main.data, "refit moved the main weights");
  unlink(path);
}

enum { STEPS = 4, REFIT_AT = 2 };

/* STEPS steps (a refit before REFIT_AT); hooks captured by us in capture mode */
static void run_steps(fp_exec *x, bool capture, cudaStream_t s) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  for (int t = 0; t < STEPS; t++) {
    if (t == REFIT_AT) refit(x, 0.25f);
    if (!capture || t == 0) {
      tp_step(x);
      continue;
    }
    if (!ge) {
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      tp_step(x);
      CUDA_OK(cudaStreamEndCapture(s, &g));
      CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    }
    CUDA_OK(cudaGraphLaunch(ge, s));
  }
  if (ge) {
    CUDA_OK(cudaStreamSynchronize(s));
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
}

/* --- one graph per step through the capture API ------------------------------------------------- */
#define REFUSED(call, want, text, ...)                                                                        \
  do {                                                                                                        \
    fp_status st_ = (call);                                                                                   \
    EXPECT(st_ == (want) && strstr(fp_exec_errmsg(x), text), __VA_ARGS__);                                     \
    if (st_ != (want) || !strstr(fp_exec_errmsg(x), text)) printf("  got %d: %s\n", (int)st_, fp_exec_errmsg(x)); \
  } while (0)

/* STEPS steps, step 1 captured whole with the capture API and replayed from
 * step 2 (a refit before REFIT_AT); the refusals of the API on the way */
static void run_steps_api(fp_exec *x, cudaStream_t s) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal)); /* before the warm-up step: refused */
  REFUSED(fp_exec_capture_begin(x), FP_ERR_ORDER, "before any uncaptured step", "capture_begin before step 0");
  CUDA_OK(cudaStreamEndCapture(s, &g));
  if (g) cudaGraphDestroy(g);
  g = NULL;
  REFUSED(fp_exec_capture_end(x), FP_ERR_ORDER, "without fp_exec_capture_begin", "capture_end without begin");
  REFUSED(fp_exec_capture_release(x), FP_ERR_ORDER, "no graph captured", "release with no graph");
  for (int t = 0; t < STEPS; t++) {
    if (t == REFIT_AT) refit(x, 0.25f);
    if (t == 0) {
      REFUSED(fp_exec_capture_begin(x), FP_ERR_ORDER, "not being captured", "capture_begin, no capture");
      tp_step(x);
      continue;
    }
    if (!ge) {
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      EXPECT(fp_exec_capture_end(x) == FP_ERR_ORDER, "capture_end before begin");
      EXPECT(fp_exec_capture_begin(x) == FP_OK, "capture_begin: %s", fp_exec_errmsg(x));
      REFUSED(fp_exec_capture_begin(x), FP_ERR_ORDER, "still open", "capture_begin twice");
      REFUSED(fp_exec_capture_end(x), FP_ERR_ORDER, "no step was captured", "capture_end with no step");
      tp_step(x); /* one segment: capture_end inside a step is train_mlp's (--plant unjoined) */
      REFUSED(fp_exec_sync(x), FP_ERR_ORDER, "being captured", "sync inside the capture");
      REFUSED(fp_exec_set_cuda_stream(x, FP_CUDA_STREAM_PER_THREAD), FP_ERR_ORDER, "being captured",
              "set_cuda_stream inside the capture");
      double one = 1.0;
      REFUSED(fp_exec_all_reduce_f64(x, &one, 1), FP_ERR_ORDER, "being captured", "all-reduce inside the capture");
      EXPECT(fp_exec_capture_end(x) == FP_OK, "capture_end: %s", fp_exec_errmsg(x));
      CUDA_OK(cudaStreamEndCapture(s, &g));
      CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
      EXPECT(fp_exec_capture_live(x) == 1, "one live graph: %" PRId64, fp_exec_capture_live(x));
      REFUSED(fp_exec_capture_begin(x), FP_ERR_ORDER, "not being captured", "capture_begin after the capture");
    }
    CUDA_OK(cudaGraphLaunch(ge, s));
  }
  CUDA_OK(cudaStreamSynchronize(s));
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  EXPECT(fp_exec_capture_release(x) == FP_OK, "release: %s", fp_exec_errmsg(x));
  EXPECT(fp_exec_capture_live(x) == 0, "no live graph: %" PRId64, fp_exec_capture_live(x));
}

static const fp_prog *the_prog; /* names the buffer of a difference */
static int compare(const char *what, const uint8_t *a, const uint8_t *b, int64_t n) {
  bool host = strstr(what, "host") != NULL;
  for (int64_t i = 0; i < n; i++)
    if (a[i] != b[i]) {
      const char *buf = "?";
      int64_t at = i;
      for (int32_t k = 0; the_prog && k < the_prog->nbufs; k++) {
        const fp_ir_buf *f = &the_prog->bufs[k];
        if (f->host == host && i >= f->offset && i < f->offset + f->bytes) buf = f->name, at = i - f->offset;
      }
      EXPECT(false, "%s: first difference at byte %" PRId64 " (buffer %s + %" PRId64 ": 0x%02x, MPI 0x%02x)", what, i,
             buf, at, a[i], b[i]);
      return 1;
    }
  return 0;
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  fp_plan *plan = every_op_plan();
  the_prog = plan->prog;
  fill_init(plan->prog);
  uint8_t *ref_dev = malloc((size_t)dev_bytes + 1), *ref_host = malloc((size_t)host_bytes + 1);
  uint8_t *got_dev = malloc((size_t)dev_bytes + 1), *got_host = malloc((size_t)host_bytes + 1);
  /* the reference: the MPI backend */
  fp_exec *x = make(plan, (fp_exec_config){.backend = FP_BACKEND_MPI, .rank = 0, .world_size = 1,
                                           .progress = FP_PROGRESS_POLL});
  load_init(x, false);
  run_steps(x, false, NULL);
  arenas(x, false, ref_dev, ref_host);
  REFUSED(fp_exec_capture_begin(x), FP_ERR_ARG, "FP_BACKEND_NCCL only", "capture_begin on the MPI backend");
  EXPECT(fp_exec_capture_live(x) == 0 && fp_exec_capture_live(NULL) == -1, "capture_live on MPI, NULL");
  fp_exec_destroy(x);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    printf("SKIPPED: no CUDA device (the program ran on the MPI backend: %d failed check(s))\n", tu_failures);
    free(ref_dev), free(ref_host), free(got_dev), free(got_host), free(init_dev), free(init_host);
    fp_plan_free(plan);
    tu_finalize();
    return tu_failures ? 1 : FP_TEST_SKIP;
  }
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const char *names[3] = {"graph", "eager", "capture-safe"};
  for (int m = FP_CUDA_GRAPH; m <= FP_CUDA_CAPTURE_SAFE; m++) {
    x = make(plan, (fp_exec_config){.backend = FP_BACKEND_NCCL, .rank = 0, .world_size = 1,
                                    .cuda_mode = (fp_cuda_mode)m, .cuda_stream = s});
    EXPECT(fp_exec_cuda_stream(x) == s, "%s: the trainer's stream is the compute stream", names[m]);
    load_init(x, true);
    run_steps(x, m == FP_CUDA_CAPTURE_SAFE, s);
    arenas(x, true, got_dev, got_host);
    char what[64];
    snprintf(what, sizeof what, "%s: device arena", names[m]);
    compare(what, got_dev, ref_dev, dev_bytes);
    snprintf(what, sizeof what, "%s: host arena", names[m]);
    compare(what, got_host, ref_host, host_bytes);
    fp_exec_stats st;
    fp_exec_get_stats(x, &st);
    EXPECT(st.hook_allocations == 0, "%s: %" PRId64 " allocations in hooks", names[m], st.hook_allocations);
    if (m == FP_CUDA_GRAPH)
      /* one segment with work on all three streams: one graph, one launch per hook after the warm-up */
      EXPECT(st.graphs == 1 && st.graph_nodes >= st.graphs && st.graph_launches == STEPS - 1,
             "graph mode: %" PRId64 " graphs, %" PRId64 " nodes, %" PRId64 " launches", st.graphs, st.graph_nodes,
             st.graph_launches);
    else
      EXPECT(st.graphs == 0 && st.graph_launches == 0, "%s: graphs outside graph mode", names[m]);
    printf("%s: %" PRId64 " steps, %" PRId64 " graphs (%" PRId64 " nodes), %" PRId64 " launches, %" PRId64
           " communicators: arenas %s the MPI run's\n", names[m], st.steps, st.graphs, st.graph_nodes,
           st.graph_launches, st.nccl_comms, tu_failures ? "checked against" : "equal to");
    /* refusals inside a capture leave the executor usable */
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    if (m != FP_CUDA_CAPTURE_SAFE)
      REFUSED(fp_exec_capture_begin(x), FP_ERR_ARG, "needs FP_CUDA_CAPTURE_SAFE", "%s: capture_begin", names[m]);
    fp_status hs = fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1);
    if (m != FP_CUDA_CAPTURE_SAFE)
      EXPECT(hs == FP_ERR_ORDER && strstr(fp_exec_errmsg(x), "CAPTURE_SAFE"), "%s: hook inside a capture: %s",
             names[m], fp_exec_errmsg(x));
    else
      EXPECT(hs == FP_OK, "capture-safe: hook inside a capture: %s", fp_exec_errmsg(x));
    EXPECT(fp_exec_sync(x) == FP_ERR_ORDER, "%s: sync inside a capture", names[m]);
    double one = 1.0;
    EXPECT(fp_exec_all_reduce_f64(x, &one, 1) == FP_ERR_ORDER, "%s: all-reduce inside a capture", names[m]);
    cudaGraph_t g = NULL;
    CUDA_OK(cudaStreamEndCapture(s, &g));
    if (g) cudaGraphDestroy(g); /* never launched */
    if (m == FP_CUDA_CAPTURE_SAFE) { /* the captured hook was the whole step: the device never ran it */
    } else {
      EXPECT(fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1) == FP_OK, "%s: usable after the refusal: %s", names[m],
             fp_exec_errmsg(x));
    }
    EXPECT(fp_exec_sync(x) == FP_OK, "%s: sync: %s", names[m], fp_exec_errmsg(x));
    fp_exec_destroy(x);
  }
  /* one graph per step through the capture API */
  x = make(plan, (fp_exec_config){.backend = FP_BACKEND_NCCL, .rank = 0, .world_size = 1,
                                  .cuda_mode = FP_CUDA_CAPTURE_SAFE, .cuda_stream = s});
  load_init(x, true);
  int before = tu_failures;
  run_steps_api(x, s);
  arenas(x, true, got_dev, got_host);
  compare("capture API: device arena", got_dev, ref_dev, dev_bytes);
  compare("capture API: host arena", got_host, ref_host, host_bytes);
  fp_exec_stats cst;
  fp_exec_get_stats(x, &cst);
  EXPECT(cst.hook_allocations == 0, "capture API: %" PRId64 " allocations in hooks", cst.hook_allocations);
  printf("capture API: %" PRId64 " hooked steps (one captured), %d replays: arenas %s the MPI run's\n", cst.steps,
         STEPS - 2, tu_failures > before ? "checked against" : "equal to");
  fp_exec_destroy(x);
  /* bootstraps, the executor's own stream */
  fp_nccl_id id;
  EXPECT(fp_nccl_get_id(&id) == FP_OK, "fp_nccl_get_id");
  fp_exec_config boots[3] = {
      {.backend = FP_BACKEND_NCCL, .rank = 0, .world_size = 1, .nccl_boot = FP_NCCL_BOOT_MPI},
      {.backend = FP_BACKEND_NCCL, .rank = 0, .world_size = 1, .nccl_boot = FP_NCCL_BOOT_ID, .nccl_id = id},
      {.backend = FP_BACKEND_NCCL, .rank = 0, .world_size = 1, .nccl_boot = FP_NCCL_BOOT_ENV},
  };
  /* set before every bootstrap, as a trainer's environment may have it: only
   * the NCCL_COMM_ID bootstrap may let NCCL bind it (docs/cuda.md,
   * "Bootstrap"); a port of this process's own (NCCL keeps an address bound
   * a while after use: two runs of this test back to back must not meet) */
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", 20000 + (int)(getpid() % 20000));
  setenv("NCCL_COMM_ID", addr, 1);
  for (int b = 0; b < 3; b++) {
    x = make(plan, boots[b]);
    EXPECT(fp_exec_cuda_stream(x) != NULL, "boot %d: the executor's own stream", b);
    load_init(x, true);
    run_steps(x, false, NULL);
    arenas(x, true, got_dev, got_host);
    compare("bootstrap run: device arena", got_dev, ref_dev, dev_bytes);
    /* the trainer's own sums, through the device (one rank: the values) */
    double v[FP_ALL_REDUCE_MAX];
    for (int i = 0; i < FP_ALL_REDUCE_MAX; i++) v[i] = 0.5 * i - 3;
    EXPECT(fp_exec_all_reduce_f64(x, v, FP_ALL_REDUCE_MAX) == FP_OK, "boot %d: all-reduce: %s", b, fp_exec_errmsg(x));
    EXPECT(v[0] == -3 && v[FP_ALL_REDUCE_MAX - 1] == 0.5 * (FP_ALL_REDUCE_MAX - 1) - 3, "boot %d: all-reduce values",
           b);
    fp_exec_destroy(x);
  }
  unsetenv("NCCL_COMM_ID");
  CUDA_OK(cudaStreamDestroy(s));
  free(ref_dev), free(ref_host), free(got_dev), free(got_host), free(init_dev), free(init_host);
  fp_plan_free(plan);
  return tu_finish();
}
