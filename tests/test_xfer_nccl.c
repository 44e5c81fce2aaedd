/* test_xfer_nccl.c (label gpu; mpiexec -n 1) - a transfer run between NCCL
 * executors against the same transfer between MPI executors (the reference
 * kernels, host memory): both FROM arenas start from the same bytes, both
 * TO arenas from a sentinel, and after each run the TO arenas must be equal
 * byte for byte (the CUDA kernels are the references' bit for bit).
 *
 *   test_xfer_nccl MODEL SPEC_A SPEC_B [FROZEN_MODEL KEEP_SPEC]
 *
 * Both plans are compiled for the ranks the test runs on: one on a GPU (one
 * GPU holds one NCCL rank: the transfer is local copies and casts, no_shard's
 * compute weights), 1 to 4 on the simulated device (sends and receives in
 * NCCL groups too; tests/simdev.cmake), and, in
 * a second transfer edited here, one param goes through an MXFP8 quantize
 * into staging and a dequantize out of it, with a slice head off a block
 * boundary. The transfer runs twice (the second reuses the communicator and
 * staging kept on the handle), then back B -> A. A FROM executor on MPI
 * with a TO executor on NCCL is refused before anything moves. With
 * FROZEN_MODEL and KEEP_SPEC, a transfer from SPEC_A into a plan that keeps
 * frozen params as MXFP8 (quantizes from FROM straight into TO's elements
 * and scales) too, and back (a dequantizing read of FROM's e4m3 and scales),
 * and from it into itself (the e4m3 bytes and scales copied as they are).
 * A third transfer goes through reshard transform
 * plug-ins (fp_transform_mxfp8: fc0's params sender-side, fc1's
 * receiver-side), whose functions the NCCL backend runs on the host, and a
 * fourth through the built-in MXFP8 by name (fc0 "mxfp8", fc1
 * "mxfp8_receiver"), which it runs on the device. Exits 77 without a CUDA
 * device. */
#include <math.h>

#include <cuda_runtime_api.h>

#include "exec_util.h"
#include "tests/gpu_util.h"
#include "compile_util.h"
#include "ir/xfer.h"

static const unsigned char SENT = 0xA5;

static fp_exec *exec_on(fp_plan *p, fp_backend b) {
  fp_exec_config c = {.backend = b, .rank = tu_rank, .world_size = tu_world};
  fp_exec *x = NULL;
  EXPECT(fp_exec_create(p, &c, &x) == FP_OK, "create (%s): %s", b == FP_BACKEND_NCCL ? "nccl" : "mpi",
         fp_exec_errmsg(x));
  return x;
}

/* the MPI executors' TO arena against the NCCL one's, copied back */
static void same_to(const fp_plan *B, fp_exec *mpi, fp_exec *gpu, const char *what) {
  size_t n = (size_t)B->prog->arena_bytes;
  char *h = malloc(n);
  EXPECT(h && cudaMemcpy(h, gpu->dev, n, cudaMemcpyDeviceToHost) == cudaSuccess, "%s: copy back", what);
  int64_t diff = 0, first = -1;
  for (size_t k = 0; h && k < n; k++)
    if (h[k] != mpi->dev[k]) diff++, first = first < 0 ? (int64_t)k : first;
  EXPECT(diff == 0, "%s: %" PRId64 " TO bytes differ from the MPI run's (first at %" PRId64 ")", what, diff, first);
  int64_t written = 0;
  for (size_t k = 0; k < n; k++) written += (unsigned char)mpi->dev[k] != SENT;
  EXPECT(written > 0, "%s: the transfer wrote nothing", what);
  free(h);
}

/* arena bytes of FROM: a pattern of floats with varied exponents, and two
 * elements 2^16 larger every 64: an MXFP8 block holding them scales its
 * other elements into e4m3's subnormals, a block without them keeps their
 * bits, so blocks cut at other places (a head block ignored) round
 * otherwise */
static void fill(char *dev, int64_t bytes) {
  for (int64_t k = 0; k + 4 <= bytes; k += 4) {
    float f = sinf(0.37f * (float)k) * (1.0f + (float)(k % 11)) * ((k / 4) % 97 == 0 ? 1e-3f : 1.0f) *
              ((k / 4) % 64 < 2 ? 65536.0f : 1.0f);
    memcpy(dev + k, &f, 4);
  }
}

/* the first fp32 -> fp32 local copy FROM -> TO of n >= 40 elements keeps
 * its first 5 elements; the rest become a quantize into staging and a
 * dequantize out of it (starting 5 elements later, off a block boundary
 * where the copy started on one: a short head block) */
static bool mxfp8_edit(fp_tx *tx) {
  for (int32_t i = tx->first[0]; i < tx->first[1]; i++) {
    fp_tx_op *o = &tx->ops[i];
    if (o->kind != FP_TX_COPY || o->src.space != FP_SP_FROM || o->dst.space != FP_SP_TO || o->dtype != FP_F32 ||
        o->sdtype != FP_F32 || o->n < 40)
      continue;
    fp_tx_op c = *o;
    c.full_off += 5, c.n -= 5, c.src.off += 5 * 4, c.dst.off += 5 * 4;
    int64_t st = tx->stage_bytes[0], ns = fpi_tx_nscales(c.full_off, c.n);
    fp_tx_op *q = fpi_tx_emit(tx, FP_TX_QUANT, 0, c.param, FP_E4M3, c.n);
    fp_tx_op *d = fpi_tx_emit(tx, FP_TX_DEQUANT, 0, c.param, FP_F32, c.n);
    q->sdtype = c.sdtype, q->full_off = d->full_off = c.full_off;
    q->src = c.src;
    q->dst = d->src = (fp_tx_ref){FP_SP_STAGE, st};
    q->aux = d->aux = (fp_tx_ref){FP_SP_STAGE, st + c.n};
    d->dst = c.dst;
    d->sdtype = FP_E4M3;
    tx->stage_bytes[0] = st + c.n + ns;
    tx->ops[i].n = 5; /* (fpi_tx_emit may have moved the array: index again) */
    tx->ops[i].kind = FP_TX_COPY;
    fpi_tx_finish(tx);
    return true;
  }
  return false;
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  if (argc != 4 && argc != 6) {
    fprintf(stderr, "usage: test_xfer_nccl MODEL SPEC_A SPEC_B [FROZEN_MODEL KEEP_SPEC]\n");
    tu_finalize();
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("SKIPPED: no CUDA device\n");
    tu_finalize();
    return 77;
  }
  cudaSetDevice(tu_rank % ndev); /* one device per rank (the simulated device's several ranks) */
  fp_plan *A = tu_compile(argv[1], argv[2], tu_world), *B = tu_compile(argv[1], argv[3], tu_world);
  if (!A || !B) return tu_finish();
  fp_xfer *ab = NULL, *ba = NULL, *mx = NULL, *xf = NULL;
  fp_transform_set *set = NULL;
  fp_transform_set_create(&set);
  EXPECT(fp_transform_set_add(set, "mx_sender", fp_transform_mxfp8(FP_MXFP8_SENDER), (void *)"fc0.*") == FP_OK &&
             fp_transform_set_add(set, "mx_receiver", fp_transform_mxfp8(FP_MXFP8_RECEIVER), (void *)"fc1.*") == FP_OK,
         "transforms: %s", fp_transform_set_errmsg(set));
  fp_reshard_options xo = {"weights", 0, NULL, 0, 0, set, NULL, 0};
  EXPECT(fp_reshard_compile(A, B, &xo, &xf) == FP_OK, "reshard A->B with transforms: %s", fp_xfer_errmsg(xf));
  /* the built-in MXFP8 by name (the CLI's --transform): run on the device */
  const char *rules[] = {"fc0.*=mxfp8", "fc1.*=mxfp8_receiver"};
  fp_reshard_options bo = {"weights", 0, NULL, 0, 0, NULL, rules, 2};
  fp_xfer *bi = NULL;
  EXPECT(fp_reshard_compile(A, B, &bo, &bi) == FP_OK, "reshard A->B with the built-in MXFP8: %s", fp_xfer_errmsg(bi));
  EXPECT(fp_reshard_compile(A, B, NULL, &ab) == FP_OK, "reshard A->B: %s", fp_xfer_errmsg(ab));
  EXPECT(fp_reshard_compile(B, A, NULL, &ba) == FP_OK, "reshard B->A: %s", fp_xfer_errmsg(ba));
  EXPECT(fp_reshard_compile(A, B, NULL, &mx) == FP_OK, "reshard A->B: %s", fp_xfer_errmsg(mx));
  if (tu_failures) return tu_finish();
  /* (on several ranks, process 0 may have no such copy: the plain runs still count) */
  bool have_mx = mxfp8_edit(mx->tx);
  EXPECT(have_mx || tu_world > 1, "no fp32 local copy of 40 elements to turn into MXFP8");

  fp_exec *ma = exec_on(A, FP_BACKEND_MPI), *mb = exec_on(B, FP_BACKEND_MPI);
  fp_exec *ga = exec_on(A, FP_BACKEND_NCCL), *gb = exec_on(B, FP_BACKEND_NCCL);
  if (tu_failures) return tu_finish();
  size_t na = (size_t)A->prog->arena_bytes, nb = (size_t)B->prog->arena_bytes;
  fill(ma->dev, (int64_t)na);
  EXPECT(fp_gpu_upload(ga->dev, ma->dev, na) == cudaSuccess, "fill the NCCL FROM arena");

  /* a mixed pair is refused before anything moves */
  memset(mb->dev, SENT, nb);
  fp_status st = fp_xfer_run(ab, ma, gb, NULL);
  EXPECT(st == FP_ERR_ARG && strstr(fp_xfer_errmsg(ab), "one backend"), "MPI FROM, NCCL TO: %s: %s",
         fp_status_name(st), fp_xfer_errmsg(ab));

  const struct {
    fp_xfer *t;
    const char *what;
  } runs[] = {{ab, "A->B"}, {ab, "A->B again"}, {xf, "A->B through transforms"},
              {bi, "A->B through the built-in MXFP8 (on the device)"}, {mx, "A->B with MXFP8"}};
  for (size_t r = 0; r < sizeof runs / sizeof runs[0] - !have_mx; r++) {
    memset(mb->dev, SENT, nb);
    EXPECT(fp_gpu_fill(gb->dev, SENT, nb) == cudaSuccess, "sentinel");
    EXPECT(fp_xfer_run(runs[r].t, ma, mb, NULL) == FP_OK, "%s on MPI: %s", runs[r].what, fp_xfer_errmsg(runs[r].t));
    EXPECT(fp_xfer_run(runs[r].t, ga, gb, NULL) == FP_OK, "%s on NCCL: %s", runs[r].what, fp_xfer_errmsg(runs[r].t));
    same_to(B, mb, gb, runs[r].what);
  }
  /* and back, into sentinel FROM arenas */
  memset(ma->dev, SENT, na);
  EXPECT(fp_gpu_fill(ga->dev, SENT, na) == cudaSuccess, "sentinel");
  EXPECT(fp_xfer_run(ba, mb, ma, NULL) == FP_OK, "B->A on MPI: %s", fp_xfer_errmsg(ba));
  EXPECT(fp_xfer_run(ba, gb, ga, NULL) == FP_OK, "B->A on NCCL: %s", fp_xfer_errmsg(ba));
  same_to(A, ma, ga, "B->A");
  if (argc == 6) { /* into MXFP8 weights: the e4m3 elements and scales the CUDA quantize writes */
    fp_plan *F = tu_compile(argv[4], argv[2], tu_world), *K = tu_compile(argv[4], argv[5], tu_world);
    fp_xfer *fk = NULL;
    EXPECT(F && K && fp_reshard_compile(F, K, NULL, &fk) == FP_OK, "reshard into MXFP8: %s", fp_xfer_errmsg(fk));
    int32_t quants = 0;
    for (int32_t i = 0; fk && fk->tx && i < fk->tx->nops; i++)
      quants += fk->tx->ops[i].kind == FP_TX_QUANT && fk->tx->ops[i].aux.space == FP_SP_TO;
    EXPECT(quants > 0, "no quantize into TO's scales");
    if (!tu_failures) {
      fp_exec *mf = exec_on(F, FP_BACKEND_MPI), *mk = exec_on(K, FP_BACKEND_MPI);
      fp_exec *gf = exec_on(F, FP_BACKEND_NCCL), *gk = exec_on(K, FP_BACKEND_NCCL);
      size_t nf = (size_t)F->prog->arena_bytes, nk = (size_t)K->prog->arena_bytes;
      if (!tu_failures) {
        fill(mf->dev, (int64_t)nf);
        EXPECT(fp_gpu_upload(gf->dev, mf->dev, nf) == cudaSuccess, "fill");
        memset(mk->dev, SENT, nk);
        EXPECT(fp_gpu_fill(gk->dev, SENT, nk) == cudaSuccess, "sentinel");
        EXPECT(fp_xfer_run(fk, mf, mk, NULL) == FP_OK, "into MXFP8 on MPI: %s", fp_xfer_errmsg(fk));
        EXPECT(fp_xfer_run(fk, gf, gk, NULL) == FP_OK, "into MXFP8 on NCCL: %s", fp_xfer_errmsg(fk));
        same_to(K, mk, gk, "into MXFP8 weights");
        /* and back: MXFP8 weights read by dequantizing them (FROM's scales) */
        fp_xfer *kf = NULL;
        EXPECT(fp_reshard_compile(K, F, NULL, &kf) == FP_OK, "reshard from MXFP8: %s", fp_xfer_errmsg(kf));
        memset(mf->dev, SENT, nf);
        EXPECT(fp_gpu_fill(gf->dev, SENT, nf) == cudaSuccess, "sentinel");
        EXPECT(kf && fp_xfer_run(kf, mk, mf, NULL) == FP_OK, "from MXFP8 on MPI: %s", fp_xfer_errmsg(kf));
        EXPECT(kf && fp_xfer_run(kf, gk, gf, NULL) == FP_OK, "from MXFP8 on NCCL: %s", fp_xfer_errmsg(kf));
        same_to(F, mf, gf, "from MXFP8 weights");
        fp_xfer_free(kf);
        /* kept into kept: e4m3 bytes and e8m0 scales copied as they are */
        fp_xfer *kk = NULL;
        EXPECT(fp_reshard_compile(K, K, NULL, &kk) == FP_OK, "reshard MXFP8 into MXFP8: %s", fp_xfer_errmsg(kk));
        fp_exec *mk2 = exec_on(K, FP_BACKEND_MPI), *gk2 = exec_on(K, FP_BACKEND_NCCL);
        if (kk && mk2 && gk2) {
          memset(mk2->dev, SENT, nk);
          EXPECT(fp_gpu_fill(gk2->dev, SENT, nk) == cudaSuccess, "sentinel");
          EXPECT(fp_xfer_run(kk, mk, mk2, NULL) == FP_OK, "MXFP8 into MXFP8 on MPI: %s", fp_xfer_errmsg(kk));
          EXPECT(fp_xfer_run(kk, gk, gk2, NULL) == FP_OK, "MXFP8 into MXFP8 on NCCL: %s", fp_xfer_errmsg(kk));
          same_to(K, mk2, gk2, "MXFP8 weights into MXFP8 weights");
        }
        fp_exec_destroy(mk2);
        fp_exec_destroy(gk2);
        fp_xfer_free(kk);
      }
      fp_exec_destroy(mf);
      fp_exec_destroy(mk);
      fp_exec_destroy(gf);
      fp_exec_destroy(gk);
    }
    fp_xfer_free(fk);
    fp_plan_free(F);
    fp_plan_free(K);
  }
  int32_t nfin = 0, nbi = 0, nhead = 0;
  for (int32_t i = 0; i < xf->tx->nops; i++) nfin += xf->tx->ops[i].kind == FP_TX_FINALIZE;
  for (int32_t i = 0; i < bi->tx->nops; i++) {
    const fp_tx_op *o = &bi->tx->ops[i];
    nbi += o->kind == FP_TX_FINALIZE;
    nhead += o->kind == FP_TX_PREP_SEND && o->full_off % 32 != 0; /* a slice starting inside a block */
  }
  EXPECT(nfin > 0 || tu_world == 1, "no slice went through a transform");
  EXPECT(nbi > 0 || tu_world == 1, "no slice went through the built-in MXFP8");
  /* FP_XFER_WANT_SHORT_HEAD: FROM's shards cut blocks, so the device quantizes short head blocks */
  const char *want_head = getenv("FP_XFER_WANT_SHORT_HEAD");
  EXPECT(!want_head || nhead > 0, "no slice through the built-in MXFP8 starts inside a block");
  if (tu_rank == 0)
    printf("transfers on NCCL equal the MPI runs: %d ops A->B, %d ops B->A, %d finalize ops through transforms, %d "
           "through the built-in MXFP8 (%d of its slices start inside a block)\n", ab->tx->nops, ba->tx->nops, nfin,
           nbi, nhead);
  fp_exec_destroy(ma);
  fp_exec_destroy(mb);
  fp_exec_destroy(ga);
  fp_exec_destroy(gb);
  fp_xfer_free(ab);
  fp_xfer_free(ba);
  fp_xfer_free(mx);
  fp_xfer_free(xf);
  fp_xfer_free(bi);
  fp_transform_set_free(set);
  fp_plan_free(A);
  fp_plan_free(B);
  return tu_finish();
}
