/* test_reshard_xf.c - reshard transform plug-ins (docs/reshard.md,
 * "Transforms") on the MPI backend, against values computed here.
 *
 *   mpirun -n P test_reshard_xf MODEL SPEC_A WORLD_A SPEC_B WORLD_B [--to-offset K] [--fault F]
 *
 * A user transform, "bf16_wire", takes every fp32 -> fp32 param and sends
 * it as bf16: send_wires is one bf16 tensor of the slice's count,
 * prepare_send casts with the C reference kernel, finalize_recv widens. FROM
 * ranks fill their shards from a formula; after the transfer every TO
 * element a finalize wrote must be the formula's value rounded to bf16 (round
 * to nearest even, computed here bit by bit, not by the kernels) and every
 * other one the exact value, bit for bit; with disjoint rank sets
 * (--to-offset = WORLD_A) every element must have come through the
 * transform. The saved JSON loads back, binds, renders the same and runs.
 * --fault plants a faulty transform that must be refused with a located
 * message naming it:
 *   count    its recv_wires gives one element fewer than send_wires: the
 *            compile fails (X3, the op and the transform named);
 *   outside  its finalize_recv writes one element past its slice: the run
 *            fails on the receiver naming it, the slice never reaches TO
 *            (TO keeps its sentinel there);
 *   unbound  the loaded transfer is run without binding: refused before any
 *            byte moves;
 *   send     process 0's prepare_send fails: the run fails on every process
 *            (process 0 naming the transform, the others naming process 0),
 *            none hangs. With "outside" too, every process fails (the
 *            finalizing ones naming the transform).
 * --mxfp8 sender|receiver runs the built-in MXFP8 instead, for every param,
 * by its name (`--transform '*=mxfp8'`, or '*=mxfp8_receiver'): every TO
 * element a finalize wrote must be the MXFP8 rounding of the formula's
 * value in its slice's block (the blocks cut here, quantized by the C
 * reference kernels), the others exact; then fp_transform_mxfp8's table
 * registered in a set under a name of its own, whose TO arena must equal the
 * built-in's byte for byte; on the wire: sender-side fewer bytes than FROM's
 * (e4m3 + e8m0, as before the contract), receiver-side FROM's bytes; the
 * built-in's transfer saved and loaded back runs with no binding and
 * writes the same TO bytes. */
#include <math.h>
#include <unistd.h>

#include "exec_util.h"
#include "compile_util.h"
#include "flexplan.h"
#include "ir/xfer.h"
#include "kernels/kernels.h"

static const unsigned char SENT = 0xA5;
static const char *g_fault = "";
static const char *g_mx = NULL; /* --mxfp8 mode */

static double formula(int32_t param, int64_t e) { return sin(0.37 * (double)e + 1.3 * param) * (1.0 + (double)(e % 5)); }

/* fp32 rounded to bf16 (nearest, ties to even) and widened back: by hand */
static float bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- the transform ---- */
static int should(void *user, const fp_transform_param *p) {
  (void)user;
  return p->from_dtype == FP_ELEM_FP32 && p->to_dtype == FP_ELEM_FP32;
}
static fp_status send_wires(void *user, const fp_transform_param *p, int64_t begin, int64_t count, fp_wire_tensor *out,
                            int *n, char *err, size_t errcap) {
  (void)user, (void)p, (void)begin, (void)err, (void)errcap;
  out[0] = (fp_wire_tensor){FP_ELEM_BF16, count};
  *n = 1;
  return FP_OK;
}
static fp_status recv_wires(void *user, const fp_transform_param *p, int64_t begin, int64_t count, fp_wire_tensor *out,
                            int *n, char *err, size_t errcap) {
  fp_status st = send_wires(user, p, begin, count, out, n, err, errcap);
  if (!strcmp(g_fault, "count") && count > 1) out[0].count--; /* planted: the receiver allocates less */
  return st;
}
static int g_prepared; /* slices this process prepared */
static fp_status prepare_send(void *user, const fp_transform_param *p, int64_t begin, int64_t count, const void *src,
                              void *const *wires, char *err, size_t errcap) {
  (void)user, (void)p, (void)begin;
  g_prepared++;
  if (!strcmp(g_fault, "send") && tu_rank == 0) { /* planted: one sender's prepare_send fails */
    snprintf(err, errcap, "planted failure on process 0");
    return FP_ERR_ARG;
  }
  fpk_cast(wires[0], FP_BF16, src, FP_F32, count);
  return FP_OK;
}
static int g_finalized; /* slices this process finalized */
static fp_status finalize_recv(void *user, const fp_transform_param *p, int64_t begin, int64_t count,
                               const void *const *wires, void *dst, char *err, size_t errcap) {
  (void)user, (void)p, (void)begin, (void)err, (void)errcap;
  fpk_cast(dst, FP_F32, wires[0], FP_BF16, count);
  if (!strcmp(g_fault, "outside")) ((float *)dst)[count] = 1.0f; /* planted: one element past the slice */
  g_finalized++;
  return FP_OK;
}

/* the elements of param j process me finalizes (from the transfer's ops) */
static bool finalized(const fp_tx *tx, int me, int32_t j, int64_t e) {
  if (me >= tx->nprocs) return false;
  int32_t g = fpi_tx_prog(tx, me);
  for (int32_t i = tx->first[g]; i < tx->first[g + 1]; i++) {
    const fp_tx_op *o = &tx->ops[i];
    if (o->kind == FP_TX_FINALIZE && o->param == j && e >= o->full_off && e < o->full_off + o->n) return true;
  }
  return false;
}

static void fill(fp_exec *x, int nparams) {
  for (int32_t i = 0; i < nparams; i++) {
    fp_param_view v;
    fp_exec_param_at(x, i, &v);
    for (int64_t k = 0; k < v.shard.runs; k++)
      for (int64_t q = 0; q < v.shard.len; q++) {
        float f = (float)formula(i, v.shard.full_off + k * v.shard.full_stride + q);
        memcpy((char *)v.main.data + (k * v.shard.shard_stride + q) * 4, &f, 4);
      }
  }
}

/* every TO element: rounded where this process finalized it, exact
 * elsewhere; the number finalized into *nx, all into *nall */
static void check(fp_exec *x, const fp_tx *tx, int nparams, bool sentinel_ok, int64_t *nx, int64_t *nall) {
  int64_t bad = 0;
  for (int32_t i = 0; i < nparams; i++) {
    fp_param_view v;
    fp_exec_param_at(x, i, &v);
    EXPECT(v.main.dtype == FP_ELEM_FP32, "%s is not fp32 in TO", v.name);
    for (int64_t k = 0; k < v.shard.runs; k++)
      for (int64_t q = 0; q < v.shard.len; q++) {
        int64_t el = v.shard.full_off + k * v.shard.full_stride + q;
        bool xf = finalized(tx, tu_rank, i, el);
        float want = (float)formula(i, el), got;
        if (xf) want = bf16_round(want);
        const char *at = (char *)v.main.data + (k * v.shard.shard_stride + q) * 4;
        memcpy(&got, at, 4);
        bool sent = true;
        for (int b = 0; b < 4; b++) sent &= (unsigned char)at[b] == SENT;
        *nx += xf, (*nall)++;
        if (memcmp(&got, &want, 4) && !(sentinel_ok && xf && sent) && bad++ < 3)
          EXPECT(0, "%s element %" PRId64 " is %.9g, want %.9g%s", v.name, el, got, want, xf ? " (bf16 on the wire)" : "");
      }
  }
}

/* executors of A and B on their processes (FROM 0..wa-1, TO off..off+wb-1) */
typedef struct execs {
  MPI_Comm ma, mb;
  fp_exec *xa, *xb;
} execs;
static execs make_execs(const fp_plan *A, const fp_plan *B, int wa, int wb, int64_t off) {
  execs e = {MPI_COMM_NULL, MPI_COMM_NULL, NULL, NULL};
  bool has_a = tu_rank < wa, has_b = tu_rank >= off && tu_rank < off + wb;
  MPI_Comm_split(MPI_COMM_WORLD, has_a ? 0 : MPI_UNDEFINED, tu_rank, &e.ma);
  MPI_Comm_split(MPI_COMM_WORLD, has_b ? 0 : MPI_UNDEFINED, tu_rank, &e.mb);
  fp_exec_config ca = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = wa, .bootstrap = &e.ma};
  fp_exec_config cb = {.backend = FP_BACKEND_MPI, .rank = (int)(tu_rank - off), .world_size = wb, .bootstrap = &e.mb};
  if (has_a) EXPECT(fp_exec_create(A, &ca, &e.xa) == FP_OK, "exec A: %s", fp_exec_errmsg(e.xa));
  if (has_b) EXPECT(fp_exec_create(B, &cb, &e.xb) == FP_OK, "exec B: %s", fp_exec_errmsg(e.xb));
  return e;
}
static void free_execs(execs *e) {
  fp_exec_destroy(e->xa);
  fp_exec_destroy(e->xb);
  if (e->ma != MPI_COMM_NULL) MPI_Comm_free(&e->ma);
  if (e->mb != MPI_COMM_NULL) MPI_Comm_free(&e->mb);
}

/* The MXFP8 value TO must hold at element e of param j where process me
 * finalized it (the built-in MXFP8 in either mode; false elsewhere): the
 * slice [b, b+n) of the finalize holding e is cut into blocks here - a
 * short head up to the next multiple of 32, then blocks of 32 of the full
 * param, a short tail - and e's block alone is quantized and dequantized
 * by the C reference kernels from the formula's values */
static bool mx_want(const fp_tx *tx, int me, int32_t j, int64_t e, float *want) {
  if (me >= tx->nprocs) return false;
  int32_t g = fpi_tx_prog(tx, me);
  for (int32_t i = tx->first[g]; i < tx->first[g + 1]; i++) {
    const fp_tx_op *o = &tx->ops[i];
    if (o->kind != FP_TX_FINALIZE || o->param != j || e < o->full_off || e >= o->full_off + o->n) continue;
    int64_t b = o->full_off, end = b + o->n, head = (32 - b % 32) % 32;
    int64_t lo = e < b + head ? b : e - (e - b - head) % 32, hi = e < b + head ? b + head : lo + 32;
    if (hi > end) hi = end;
    float v[32], out[32];
    uint8_t q[32], sc[1];
    for (int64_t k = lo; k < hi; k++) v[k - lo] = (float)formula(j, k);
    fpk_quantize_mxfp8(q, sc, v, FP_F32, hi - lo);
    fpk_dequantize_mxfp8(out, FP_F32, q, sc, hi - lo);
    *want = out[e - lo];
    return true;
  }
  return false;
}

/* --mxfp8: the built-in `--transform mxfp8` of every param, then
 * fp_transform_mxfp8 in the mode asked, each into a sentinel-filled TO: the
 * arenas equal byte for byte */
static void mxfp8_on_contract(const fp_plan *A, const fp_plan *B, int wa, int wb, int64_t off) {
  fp_mxfp8_mode mode = !strcmp(g_mx, "sender") ? FP_MXFP8_SENDER : FP_MXFP8_RECEIVER;
  fp_transform_set *set = NULL;
  fp_transform_set_create(&set);
  EXPECT(fp_transform_set_add(set, "mxfp8_contract", fp_transform_mxfp8(mode), NULL) == FP_OK, "add: %s",
         fp_transform_set_errmsg(set));
  /* the built-in by its name as the CLI gives it (mxfp8 is sender-side) */
  const char *rule[] = {mode == FP_MXFP8_SENDER ? "*=mxfp8" : "*=mxfp8_receiver"};
  fp_reshard_options builtin = {"weights", off, NULL, 0, 0, NULL, rule, 1}, plug = {"weights", off, NULL, 0, 0, set, NULL, 0};
  fp_xfer *tb = NULL, *tp = NULL;
  EXPECT(fp_reshard_compile(A, B, &builtin, &tb) == FP_OK, "built-in: %s", fp_xfer_errmsg(tb));
  EXPECT(fp_reshard_compile(A, B, &plug, &tp) == FP_OK, "contract: %s", fp_xfer_errmsg(tp));
  execs e = make_execs(A, B, wa, wb, off);
  if (tu_failures) goto out;
  fp_plan_info ia;
  fp_plan_get_info(A, &ia);
  if (e.xa) fill(e.xa, ia.nparams);
  size_t bytes = (size_t)B->prog->arena_bytes;
  char *ref = e.xb ? malloc(bytes) : NULL;
  for (int k = 0; k < 2; k++) {
    if (e.xb) memset(e.xb->dev, SENT, bytes);
    fp_xfer *t = k ? tp : tb;
    EXPECT(fp_xfer_run(t, e.xa, e.xb, NULL) == FP_OK, "run %s: %s", k ? "contract" : "built-in", fp_xfer_errmsg(t));
    if (e.xb && k == 0) memcpy(ref, e.xb->dev, bytes);
  }
  /* the built-in's TO against the reference: MXFP8 of the slice's blocks
   * where a finalize wrote, exact elsewhere */
  int64_t nmx = 0, nbad = 0;
  for (int32_t i = 0; e.xb && i < B->prog->nparams; i++) {
    fp_param_view v;
    fp_exec_param_at(e.xb, i, &v);
    for (int64_t r = 0; r < v.shard.runs; r++)
      for (int64_t q = 0; q < v.shard.len; q++) {
        int64_t el = v.shard.full_off + r * v.shard.full_stride + q;
        float want = (float)formula(i, el), got;
        nmx += mx_want(tb->tx, tu_rank, i, el, &want);
        memcpy(&got, ref + ((char *)v.main.data - e.xb->dev) + (r * v.shard.shard_stride + q) * 4, 4);
        if (memcmp(&got, &want, 4) && nbad++ < 3)
          EXPECT(0, "built-in mxfp8: %s element %" PRId64 " is %.9g, want %.9g", v.name, el, got, want);
      }
  }
  int64_t tot_mx = 0;
  MPI_Allreduce(&nmx, &tot_mx, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT(tot_mx > 0, "no TO element came through the built-in mxfp8");
  int64_t diff = 0, first = -1;
  for (size_t b = 0; e.xb && b < bytes; b++)
    if (ref[b] != e.xb->dev[b] && diff++ == 0) first = (int64_t)b;
  EXPECT(diff == 0, "%s-side MXFP8 on the contract: %" PRId64 " TO bytes differ from the built-in's, the first at %" PRId64,
         g_mx, diff, first);
  /* the built-in's transfer saved and loaded back runs with no binding (the executor binds built-in names) */
  {
    char *js = NULL, path[256];
    fp_xfer_render(tb, 0, &js);
    snprintf(path, sizeof path, "%s/test_reshard_xf_mx.%d.%d.xfer.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid(), tu_rank);
    FILE *f = fopen(path, "w");
    EXPECT(f && js && fputs(js, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
    fp_free(js);
    fp_xfer *tl = NULL;
    EXPECT(fp_xfer_load(path, &tl) == FP_OK, "load %s: %s", path, fp_xfer_errmsg(tl));
    unlink(path);
    if (e.xb) memset(e.xb->dev, SENT, bytes);
    EXPECT(fp_xfer_run(tl, e.xa, e.xb, NULL) == FP_OK, "run the loaded built-in: %s", fp_xfer_errmsg(tl));
    EXPECT(!e.xb || !memcmp(ref, e.xb->dev, bytes), "the loaded built-in's TO differs from the compiled one's");
    fp_xfer_free(tl);
  }
  int64_t nfin = 0;
  for (int32_t i = 0; i < tp->tx->nops; i++) nfin += tp->tx->ops[i].kind == FP_TX_FINALIZE;
  fp_xfer_info ib, ip;
  fp_xfer_get_info(tb, &ib);
  fp_xfer_get_info(tp, &ip);
  EXPECT(nfin > 0, "no slice went through the transform");
  EXPECT(ip.wire_bytes == ib.wire_bytes, "%s-side wire %" PRId64 " bytes, the built-in's %" PRId64, g_mx,
         ip.wire_bytes, ib.wire_bytes);
  if (mode == FP_MXFP8_SENDER)
    EXPECT(ib.wire_bytes < ib.lower_bound, "sender-side wire %" PRId64 " bytes, not under FROM's %" PRId64,
           ib.wire_bytes, ib.lower_bound);
  else
    EXPECT(ib.wire_bytes == ib.lower_bound, "receiver-side wire %" PRId64 " bytes: FROM's unchanged (%" PRId64 ")",
           ib.wire_bytes, ib.lower_bound);
  if (tu_rank == 0)
    printf("%s-side MXFP8 on the contract: %" PRId64 " finalize ops, wire %" PRId64 " bytes (built-in %" PRId64
           "), TO arenas equal the built-in's; %" PRId64 " elements MXFP8 as the reference says\n", g_mx, nfin,
           ip.wire_bytes, ib.wire_bytes, tot_mx);
  free(ref);
out:
  free_execs(&e);
  fp_xfer_free(tb);
  fp_xfer_free(tp);
  fp_transform_set_free(set);
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  if (argc < 6) {
    if (tu_rank == 0) fprintf(stderr, "usage: test_reshard_xf MODEL SPEC_A WORLD_A SPEC_B WORLD_B [--to-offset K] [--fault F]\n");
    return 2;
  }
  int64_t off = 0;
  for (int i = 6; i + 1 < argc; i++) {
    if (!strcmp(argv[i], "--to-offset")) off = atol(argv[i + 1]);
    if (!strcmp(argv[i], "--fault")) g_fault = argv[i + 1];
    if (!strcmp(argv[i], "--mxfp8")) g_mx = argv[i + 1];
  }
  int wa = atoi(argv[3]), wb = atoi(argv[5]);
  fp_plan *A = tu_compile(argv[1], argv[2], wa), *B = tu_compile(argv[1], argv[4], wb);
  if (!A || !B) return tu_finish();
  fp_transform_set *set = NULL;
  fp_reshard_transform tr = {should, send_wires, recv_wires, prepare_send, finalize_recv};
  EXPECT(fp_transform_set_create(&set) == FP_OK, "fp_transform_set_create");
  EXPECT(fp_transform_set_add(set, "bf16_wire", &tr, NULL) == FP_OK, "add: %s", fp_transform_set_errmsg(set));
  EXPECT(fp_transform_set_add(set, "mxfp8", &tr, NULL) == FP_ERR_ARG &&
             strstr(fp_transform_set_errmsg(set), "'mxfp8' is a built-in transform's name"),
         "a transform named mxfp8: %s", fp_transform_set_errmsg(set));
  EXPECT(fp_transform_set_add(set, "mxfp8_receiver", &tr, NULL) == FP_ERR_ARG &&
             strstr(fp_transform_set_errmsg(set), "'mxfp8_receiver' is a built-in transform's name"),
         "a transform named mxfp8_receiver: %s", fp_transform_set_errmsg(set));
  if (g_mx) {
    mxfp8_on_contract(A, B, wa, wb, off);
    goto done;
  }
  fp_reshard_options ro = {"weights", off, NULL, 0, 0, set, NULL, 0};
  fp_xfer *ab = NULL;
  fp_status st = fp_reshard_compile(A, B, &ro, &ab);
  if (!strcmp(g_fault, "count")) {
    const char *m = fp_xfer_errmsg(ab);
    EXPECT(st == FP_ERR_INPUT && strstr(m, "transform 'bf16_wire'") && strstr(m, "prepare_recv") && strstr(m, "op "),
           "a wire count mismatch must be refused naming the transform and the op: %s", m);
    if (tu_rank == 0) printf("planted wire count mismatch refused:\n%s", m);
    fp_xfer_free(ab);
    goto done;
  }
  EXPECT(st == FP_OK, "reshard A->B: %s", fp_xfer_errmsg(ab));
  if (st != FP_OK) goto done;
  /* the JSON names the transform and the wire tensors, and loads back */
  char *js = NULL, *js2 = NULL, *ir = NULL, path[256];
  fp_xfer_render(ab, 0, &js);
  fp_xfer_render(ab, 1, &ir);
  EXPECT(js && strstr(js, "\"transform\":\"bf16_wire\"") && strstr(js, "\"wires\":[[\"bf16\","),
         "the JSON names no transform or wire tensors");
  EXPECT(ir && strstr(ir, " transform=bf16_wire") && strstr(ir, "  finalize fp32 n=") && strstr(ir, " wires=bf16:"),
         "the text form names no transform or wire tensors");
  snprintf(path, sizeof path, "%s/test_reshard_xf.%d.%d.xfer.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid(), tu_rank);
  FILE *f = fopen(path, "w");
  EXPECT(f && js && fputs(js, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
  fp_xfer *loaded = NULL;
  EXPECT(fp_xfer_load(path, &loaded) == FP_OK, "load %s: %s", path, fp_xfer_errmsg(loaded));
  unlink(path);
  fp_xfer_render(loaded, 0, &js2);
  EXPECT(js2 && js && !strcmp(js, js2), "the loaded transfer renders differently");
  fp_free(js), fp_free(js2), fp_free(ir);

  /* executors: FROM ranks on processes 0..wa-1, TO ranks on off..off+wb-1 */
  bool has_a = tu_rank < wa, has_b = tu_rank >= off && tu_rank < off + wb;
  MPI_Comm ma, mb;
  MPI_Comm_split(MPI_COMM_WORLD, has_a ? 0 : MPI_UNDEFINED, tu_rank, &ma);
  MPI_Comm_split(MPI_COMM_WORLD, has_b ? 0 : MPI_UNDEFINED, tu_rank, &mb);
  fp_exec_config ca = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = wa, .bootstrap = &ma};
  fp_exec_config cb = {.backend = FP_BACKEND_MPI, .rank = (int)(tu_rank - off), .world_size = wb, .bootstrap = &mb};
  fp_exec *xa = NULL, *xb = NULL;
  if (has_a) EXPECT(fp_exec_create(A, &ca, &xa) == FP_OK, "exec A: %s", fp_exec_errmsg(xa));
  if (has_b) EXPECT(fp_exec_create(B, &cb, &xb) == FP_OK, "exec B: %s", fp_exec_errmsg(xb));
  fp_plan_info ia;
  fp_plan_get_info(A, &ia);
  if (xa) fill(xa, ia.nparams);
  if (xb) memset(xb->dev, SENT, (size_t)B->prog->arena_bytes);
  if (!strcmp(g_fault, "unbound")) {
    st = fp_xfer_run(loaded, xa, xb, NULL);
    EXPECT(st == FP_ERR_ARG && strstr(fp_xfer_errmsg(loaded), "transform 'bf16_wire', which is not bound"),
           "an unbound transfer must be refused: %s %s", fp_status_name(st), fp_xfer_errmsg(loaded));
    if (tu_rank == 0) printf("planted unbound transform refused: %s\n", fp_xfer_errmsg(loaded));
    EXPECT(fp_xfer_bind_transforms(loaded, set) == FP_OK, "bind: %s", fp_xfer_errmsg(loaded));
  } else {
    EXPECT(fp_xfer_bind_transforms(loaded, set) == FP_OK, "bind: %s", fp_xfer_errmsg(loaded));
  }
  /* the compiled transfer, then the loaded one, both into sentinel-filled TO */
  for (int round = 0; round < 2; round++) {
    fp_xfer *t = round ? loaded : ab;
    if (xb) memset(xb->dev, SENT, (size_t)B->prog->arena_bytes);
    g_finalized = 0;
    st = fp_xfer_run(t, xa, xb, NULL);
    if (!strcmp(g_fault, "send")) {
      /* process 0's prepare_send failed: it says so, every other process names it */
      const char *m = fp_xfer_errmsg(t);
      if (tu_rank == 0)
        EXPECT(st == FP_ERR_BACKEND && strstr(m, "transform 'bf16_wire': prepare_send for param") &&
                   strstr(m, "planted failure on process 0"),
               "process 0: its prepare_send's failure: %s %s", fp_status_name(st), m);
      else
        EXPECT(st == FP_ERR_BACKEND && strstr(m, "xfer: process 0 failed while the ops ran"),
               "process %d must fail with process 0: %s %s", tu_rank, fp_status_name(st), m);
      if (round == 0) printf("rank %d: planted prepare_send failure on process 0: %s\n", tu_rank, m);
      int prep0 = tu_rank == 0 ? g_prepared : 0, any = 0;
      MPI_Allreduce(&prep0, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      EXPECT(any > 0, "process 0 prepared no slice: the fault was not exercised");
      g_prepared = 0;
      continue;
    }
    if (!strcmp(g_fault, "outside")) {
      /* every process that finalizes fails naming the transform; the others fail naming the first of them */
      if (g_finalized)
        EXPECT(st == FP_ERR_BACKEND && strstr(fp_xfer_errmsg(t), "transform 'bf16_wire': finalize_recv") &&
                   strstr(fp_xfer_errmsg(t), "wrote outside its slice (0 bytes before it, 4 after)"),
               "a write outside the slice must be caught: %s %s", fp_status_name(st), fp_xfer_errmsg(t));
      else
        EXPECT(st == FP_ERR_BACKEND && strstr(fp_xfer_errmsg(t), "failed while the ops ran"),
               "a process that finalized nothing must fail with the others: %s %s", fp_status_name(st),
               fp_xfer_errmsg(t));
      if (g_finalized && round == 0) printf("rank %d: planted write outside its slice caught: %s\n", tu_rank, fp_xfer_errmsg(t));
      int any = g_finalized > 0, all = 0;
      MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      EXPECT(all, "no process finalized a slice: the fault was not exercised");
    } else {
      EXPECT(st == FP_OK, "run %d: %s", round, fp_xfer_errmsg(t));
    }
    int64_t nx = 0, nall = 0;
    if (xb) check(xb, t->tx, B->prog->nparams, !strcmp(g_fault, "outside"), &nx, &nall);
    int64_t v[2] = {nx, nall}, tot[2];
    MPI_Allreduce(v, tot, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT(tot[0] > 0, "no element came through the transform");
    if (off >= wa) EXPECT(tot[0] == tot[1], "disjoint rank sets: %" PRId64 " of %" PRId64 " elements came through the transform", tot[0], tot[1]);
    if (tu_rank == 0 && round == 0)
      printf("%" PRId64 " of %" PRId64 " TO elements came through bf16_wire\n", tot[0], tot[1]);
  }
  fp_exec_destroy(xa);
  fp_exec_destroy(xb);
  if (ma != MPI_COMM_NULL) MPI_Comm_free(&ma);
  if (mb != MPI_COMM_NULL) MPI_Comm_free(&mb);
  fp_xfer_free(loaded);
  fp_xfer_free(ab);
done:
  fp_transform_set_free(set);
  fp_plan_free(A);
  fp_plan_free(B);
  return tu_finish();
}
