/* test_reshard.c - transfers between two plans of one model, run on the MPI
 * backend (docs/reshard.md), checked against full tensors computed here.
 *
 *   mpirun -n P test_reshard MODEL SPEC_A WORLD_A SPEC_B WORLD_B [--to-offset K] [--mxfp8 PATTERN]
 *                            [--what weights+optimizer]
 *
 * Both plans are compiled in the test (the specs with mesh.world_size set).
 * Every FROM rank fills its main-weight shards from a formula of (param,
 * flat index); every TO rank fills its whole arena with a sentinel. After the
 * A -> B transfer every TO shard element must equal the formula's value cast
 * FROM's main dtype -> TO's (bit for bit), or, for MXFP8 params, lie within
 * the format's error bound of it; the padding of the shards and everything
 * else of TO's arena outside the transfer's need regions must still hold the
 * sentinel. Then FROM's main weights are overwritten with the sentinel and
 * the B -> A transfer must bring back exactly the A values (round trip;
 * without MXFP8 and with equal main dtypes: bit-exact). With --what
 * weights+optimizer the optimizer states go too (each from its own formula,
 * seed param + 1000 (k + 1)), checked the same way, never as MXFP8.
 * Where plan B keeps params as MXFP8 (param_dtype "mxfp8"), their e4m3
 * elements and e8m0 scales in B's arena must equal the C reference kernel's
 * quantization of the whole param (fpk_quantize_mxfp8 of A's values) byte
 * for byte, whoever sent which slice; the way back must be refused (B holds
 * no full-precision copy).
 * With --watchdog (run with FLEXPLAN_TIMEOUT=1 and 3 processes) a transfer
 * must time out rather than hang: a process that stays away from the
 * agreement is named by the others, process 0 staying away is named too, TO
 * is unchanged, and the next run works; built as test_reshard_wd (every
 * MPI_Isend of the transfer's data passes through __wrap_MPI_Isend below), a
 * process whose sends are lost makes its receivers time out naming it. */
#include <fnmatch.h>
#include <math.h>
#include <unistd.h>

#include "exec_util.h"
#include "compile_util.h"
#include "executor/xfer_nccl.h"
#include "ir/xfer.h"
#include "kernels/kernels.h"

#ifdef FP_TEST_WRAP_ISEND
/* the network losing one process's transfer data (tag 7: xfer.c's data tag) */
static int g_drop_from = -1;
int __real_MPI_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, MPI_Request *req);
int __wrap_MPI_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, MPI_Request *req);
int __wrap_MPI_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, MPI_Request *req) {
  if (tag == 7 && tu_rank == g_drop_from) {
    *req = MPI_REQUEST_NULL;
    return MPI_SUCCESS;
  }
  return __real_MPI_Isend(buf, count, dt, dest, tag, comm, req);
}
#endif

static double formula(int32_t param, int64_t e) {
  /* varied signs and magnitudes (so MXFP8 blocks get different scales) */
  return sin(0.37 * (double)e + 1.3 * param) * (1.0 + (double)((e / 7 + param) % 5) * 3.0) *
         (e % 97 == 0 ? 1e-3 : 1.0);
}

static float get(const void *base, fp_dtype dt, int64_t k) {
  float f;
  fpk_cast(&f, FP_F32, (const char *)base + k * fpi_dtype_size(dt), dt, 1);
  return f;
}

/* the value FROM rank holds for element e (its main dtype), as fp32 */
static float from_value(fp_dtype fdt, int32_t param, int64_t e) {
  float v = (float)formula(param, e), h;
  char tmp[8];
  fpk_cast(tmp, fdt, &v, FP_F32, 1);
  fpk_cast(&h, FP_F32, tmp, fdt, 1);
  return h;
}

/* the MXFP8 bound for element e: the full-param block's scale 2^x with
 * x = ceil(log2(amax / 448)); a slice's own (shorter) block has amax <= that
 * block's, so its error is within the same bound: half an e4m3 ulp relative
 * (2^-4) for normals, 2^(x-10) absolute below e4m3's normal range */
static double mx_bound(fp_dtype fdt, int32_t param, int64_t numel, int64_t e) {
  int64_t b0 = e / 32 * 32, b1 = b0 + 32 < numel ? b0 + 32 : numel;
  double amax = 0;
  for (int64_t k = b0; k < b1; k++) amax = fmax(amax, fabs(from_value(fdt, param, k)));
  double x = amax > 0 ? ceil(log2(amax / 448.0)) : -127;
  double v = fabs(from_value(fdt, param, e));
  return fmax(v * 0x1p-4, ldexp(1.0, (int)x - 10)) * 1.0001;
}

static const unsigned char SENT = 0xA5;
static int g_states; /* optimizer states moved (--what weights+optimizer) */

/* the shard tensor `w` of view v: 0 main weights, k + 1 optimizer state k;
 * its formula seed */
static const fp_tensor *part(const fp_param_view *v, int w) { return w ? &v->optim[w - 1] : &v->main; }
static int32_t seed(int32_t param, int w) { return param + 1000 * w; }

/* fill this rank's FROM shards from the formula (A) */
static void fill(fp_exec *x, const fp_plan *plan) {
  fp_plan_info pi;
  fp_plan_get_info(plan, &pi);
  for (int32_t i = 0; i < pi.nparams; i++) {
    fp_param_view v;
    fp_exec_param_at(x, i, &v);
    const fp_extent *e = &v.shard;
    for (int w = 0; w <= g_states; w++) {
      const fp_tensor *t = part(&v, w);
      fp_dtype dt = (fp_dtype)t->dtype;
      if (!t->data) continue;
      for (int64_t k = 0; k < e->runs; k++)
        for (int64_t q = 0; q < e->len; q++) {
          float f = (float)formula(seed(i, w), e->full_off + k * e->full_stride + q);
          fpk_cast((char *)t->data + (k * e->shard_stride + q) * fpi_dtype_size(dt), dt, &f, FP_F32, 1);
        }
    }
  }
}

/* check this rank's shards of plan `plan` (executor x) hold the values of
 * FROM plan `src` (by param name), cast; mx: the params sent as MXFP8 */
/* a param plan p keeps as MXFP8: its e4m3 elements and e8m0 scales (through
 * the IR's views, in arena `dev`) are the reference quantization of the
 * whole param, FROM's values */
static void check_kept(const fp_prog *p, const char *dev, int32_t i, const char *what, fp_dtype fdt, int32_t si) {
  const fp_ir_param *q = &p->params[i];
  int64_t numel = 1, nb, bad = 0;
  for (int k = 0; k < q->ndim; k++) numel *= q->shape[k];
  nb = (numel + 31) / 32;
  float *vals = malloc((size_t)numel * sizeof *vals);
  uint8_t *data = malloc((size_t)numel), *scales = malloc((size_t)nb);
  for (int64_t e = 0; e < numel; e++) vals[e] = from_value(fdt, si, e);
  fpk_quantize_mxfp8(data, scales, vals, FP_F32, numel);
  const uint8_t *got = (const uint8_t *)dev + p->bufs[q->main.buf].offset + q->main.off,
                *gots = (const uint8_t *)dev + p->bufs[q->scales.buf].offset + q->scales.off;
  for (int64_t e = 0; e < numel; e++)
    if (got[e] != data[e] && bad++ < 3)
      EXPECT(0, "%s: %s (kept as MXFP8) e4m3 element %" PRId64 " is 0x%02x, the reference 0x%02x", what, q->name, e,
             got[e], data[e]);
  for (int64_t k = 0; k < nb; k++)
    if (gots[k] != scales[k] && bad++ < 3)
      EXPECT(0, "%s: %s (kept as MXFP8) scale %" PRId64 " is 0x%02x, the reference 0x%02x", what, q->name, k, gots[k],
             scales[k]);
  free(vals);
  free(data);
  free(scales);
}

/* A param B kept as MXFP8, moved back into A (a dequantizing read): every
 * element of A's shard t of view v is the reference quantization of the
 * whole param (A's values, blocks of the full param) dequantized into A's
 * main dtype adt, bit for bit */
static void check_from_kept(const fp_param_view *v, const fp_tensor *t, fp_dtype adt, int32_t i) {
  int64_t numel = v->numel, nb = (numel + 31) / 32, bad = 0;
  float *vals = malloc((size_t)numel * sizeof *vals);
  uint8_t *data = malloc((size_t)numel), *scales = malloc((size_t)nb);
  char *want = malloc((size_t)numel * 4);
  for (int64_t e = 0; e < numel; e++) vals[e] = from_value(adt, i, e);
  fpk_quantize_mxfp8(data, scales, vals, FP_F32, numel);
  fpk_dequantize_mxfp8(want, adt, data, scales, numel);
  const fp_extent *x = &v->shard;
  int64_t z = fpi_dtype_size(adt);
  for (int64_t k = 0; k < x->runs; k++)
    for (int64_t q = 0; q < x->len; q++) {
      int64_t el = x->full_off + k * x->full_stride + q;
      if (memcmp(want + el * z, (char *)t->data + (k * x->shard_stride + q) * z, (size_t)z) && bad++ < 3)
        EXPECT(0, "from MXFP8: %s[%" PRId64 "] is %.9g, the reference dequantized %.9g", v->name, el,
               get(t->data, adt, k * x->shard_stride + q), get(want, adt, el));
    }
  EXPECT(x->runs == 0 || bad < x->runs * x->len, "from MXFP8: %s", v->name);
  free(vals);
  free(data);
  free(scales);
  free(want);
}

static void check(fp_exec *x, const char *what, const fp_plan *src, bool mx_any, const char *mxpat) {
  const fp_prog *sp = src->prog, *p = x->prog;
  for (int32_t i = 0; i < p->nparams; i++) {
    fp_param_view v;
    fp_exec_param_at(x, i, &v);
    int32_t si = -1;
    for (int32_t j = 0; j < sp->nparams; j++)
      if (!strcmp(sp->params[j].name, v.name)) si = j;
    EXPECT(si >= 0, "%s: param %s not in the source plan", what, v.name);
    if (si < 0) continue;
    if (p->params[i].main_dtype == FP_E4M3) {
      check_kept(p, x->dev, i, what, sp->params[si].main_dtype, si);
      continue;
    }
    /* the value of element e is the formula of the *first* plan's index:
     * both plans list params in model order */
    fp_dtype fdt = sp->params[si].main_dtype, dt = (fp_dtype)v.main.dtype;
    bool mx = mx_any && fnmatch(mxpat, v.name, 0) == 0;
    const fp_extent *e = &v.shard;
    int64_t bad = 0;
    for (int w = 0; w <= g_states; w++) {
      const fp_tensor *t = part(&v, w);
      fp_dtype tf = w ? sp->optim_dtype : fdt, td = (fp_dtype)t->dtype;
      bool mxw = mx && w == 0; /* optimizer state is never transformed */
      if (w && !v.requires_grad) continue;
      EXPECT(t->data || !e->runs, "%s: %s has no %s view", what, v.name, w ? "optimizer state" : "main");
      for (int64_t k = 0; t->data && k < e->runs; k++)
        for (int64_t q = 0; q < e->len; q++) {
          int64_t el = e->full_off + k * e->full_stride + q;
          float want = from_value(tf, seed(si, w), el), got = get(t->data, td, k * e->shard_stride + q);
          char wbuf[8];
          fpk_cast(wbuf, td, &want, FP_F32, 1);
          bool ok = mxw ? fabs((double)got - (double)want) <= mx_bound(tf, si, v.numel, el) + fabs(want) * 0x1p-8
                        : !memcmp(wbuf, (char *)t->data + (k * e->shard_stride + q) * fpi_dtype_size(td),
                                  (size_t)fpi_dtype_size(td));
          if (!ok && bad++ < 3)
            EXPECT(0, "%s: %s %s element %" PRId64 " is %.9g, want %.9g%s", what, v.name,
                   w ? "optimizer state" : "main", el, got, want, mxw ? " (within the MXFP8 bound)" : "");
        }
    }
    /* a compute weight the plan keeps unsharded between steps: the whole
     * param, TO's main value cast to the param dtype */
    if (x->params[i].weight_persistent) {
      fp_dtype pdt = (fp_dtype)v.weight.dtype;
      for (int64_t el = 0; el < v.numel; el++) {
        float want = from_value(fdt, si, el), got = get(v.weight.data, pdt, el);
        char m[8], w[8];
        fpk_cast(m, dt, &want, FP_F32, 1);
        fpk_cast(w, pdt, m, dt, 1);
        bool ok = mx ? fabs((double)got - (double)want) <= mx_bound(fdt, si, v.numel, el) + fabs(want) * 0x1p-7
                     : !memcmp(w, (char *)v.weight.data + el * fpi_dtype_size(pdt), (size_t)fpi_dtype_size(pdt));
        if (!ok && bad++ < 3) EXPECT(0, "%s: %s compute weight element %" PRId64 " is %.9g, want %.9g", what, v.name, el, got, want);
      }
    }
    /* the slot's padding keeps the sentinel */
    int64_t used = e->runs ? (e->runs - 1) * e->shard_stride + e->len : 0;
    for (int64_t b = used * fpi_dtype_size(dt); b < v.main.numel * fpi_dtype_size(dt); b++)
      if (((unsigned char *)v.main.data)[b] != SENT && bad++ < 3)
        EXPECT(0, "%s: %s padding byte %" PRId64 " was written", what, v.name, b);
  }
}

static int64_t changed_bytes(const fp_exec *xb, const fp_plan *B) {
  int64_t changed = 0;
  for (int64_t b = 0; xb && b < B->prog->arena_bytes; b++) changed += (unsigned char)xb->dev[b] != SENT;
  return changed;
}

/* --watchdog: one process stays away from a run (the one given, then
 * process 0); the others must fail with FP_ERR_TIMEOUT naming it, TO
 * unchanged. FLEXPLAN_TIMEOUT=1: the others give up within 1 s (process 0
 * away: 2 x 1 + 1 s); the barrier lets the one away come back after. */
static void watchdog_away(fp_xfer *ab, fp_exec *xa, fp_exec *xb, const fp_plan *B, int away) {
  if (xb) memset(xb->dev, SENT, (size_t)B->prog->arena_bytes);
  if (tu_rank != away) {
    fp_status st = fp_xfer_run(ab, xa, xb, NULL);
    char want[64];
    snprintf(want, sizeof want, away ? "did not join: %d;" : "process 0 did not join", away);
    EXPECT(st == FP_ERR_TIMEOUT && strstr(fp_xfer_errmsg(ab), want) && strstr(fp_xfer_errmsg(ab), "nothing was written"),
           "process %d away: got %s: %s", away, fp_status_name(st), fp_xfer_errmsg(ab));
    EXPECT(changed_bytes(xb, B) == 0, "a transfer that timed out changed %" PRId64 " TO bytes", changed_bytes(xb, B));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

#ifdef FP_TEST_WRAP_ISEND
/* the data sent by process `victim` is lost: every process with a receive
 * from it times out naming it (and its executors are unusable after); the
 * others complete */
static void watchdog_lost(fp_xfer *ab, fp_exec *xa, fp_exec *xb, int victim) {
  const fp_tx *t = ab->tx;
  bool waits = false;
  if (tu_rank < t->nprocs) {
    int32_t g = fpi_tx_prog(t, tu_rank);
    for (int32_t i = t->first[g]; i < t->first[g + 1]; i++)
      waits |= t->ops[i].kind == FP_TX_RECV && t->ops[i].peer == victim;
  }
  int any = waits;
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT(any, "no process receives from process %d: the lost sends test nothing", victim);
  g_drop_from = victim;
  fp_status st = fp_xfer_run(ab, xa, xb, NULL);
  g_drop_from = -1;
  char want[64];
  snprintf(want, sizeof want, "a receive from process %d", victim);
  if (waits) {
    EXPECT(st == FP_ERR_TIMEOUT && strstr(fp_xfer_errmsg(ab), "watchdog: fp_xfer_run") &&
               strstr(fp_xfer_errmsg(ab), want),
           "lost sends of process %d: got %s: %s", victim, fp_status_name(st), fp_xfer_errmsg(ab));
    fp_exec *x = xb ? xb : xa;
    fp_status h = fp_exec_hook(x, FP_HOOK_STEP_BEGIN, -1);
    EXPECT(h != FP_OK && strstr(fp_exec_errmsg(x), "fp_xfer_run"), "an executor after the transfer's watchdog: %s: %s",
           fp_status_name(h), fp_exec_errmsg(x));
  } else {
    EXPECT(st == FP_OK, "process %d (no receive from %d): %s", tu_rank, victim, fp_xfer_errmsg(ab));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
#endif

/* Another valid transfer: the k1-th and k2-th sends from one process to
 * another (the same count and dtype) exchanged, and the matching recvs on
 * the receiver: the two slices cross in the other order. The first such
 * pair, with process `prefer` as sender or receiver where there is one,
 * that X1-X7 accept; its op indices in at[4] (cross_swap(t, at) again puts
 * them back).
 * false when the transfer has none. */
static void cross_swap(fp_tx *t, const int32_t at[4]) {
  fp_tx_op s = t->ops[at[0]];
  t->ops[at[0]] = t->ops[at[1]], t->ops[at[1]] = s;
  s = t->ops[at[2]], t->ops[at[2]] = t->ops[at[3]], t->ops[at[3]] = s;
}
static bool cross_two_slices(fp_tx *t, int prefer, int32_t at[4]) {
  for (int pass = 0; pass < 2; pass++)
    for (int32_t i = 0; i < t->nops; i++) {
      const fp_tx_op *a = &t->ops[i];
      if (a->kind != FP_TX_SEND || (pass == 0 && a->proc != prefer && a->peer != prefer)) continue;
      for (int32_t j = i + 1; j < t->nops; j++) {
        const fp_tx_op *b = &t->ops[j];
        if (b->kind != FP_TX_SEND || b->proc != a->proc || b->peer != a->peer || b->n != a->n || b->dtype != a->dtype ||
            (b->full_off == a->full_off && b->param == a->param && b->plane == a->plane))
          continue;
        /* their ordinals among the sends a->proc -> a->peer, and the recvs with them */
        int k1 = 0, k2 = 0;
        for (int32_t x = 0; x < j; x++) {
          const fp_tx_op *o = &t->ops[x];
          bool same = o->kind == FP_TX_SEND && o->proc == a->proc && o->peer == a->peer;
          k1 += same && x < i, k2 += same;
        }
        int32_t r1 = -1, r2 = -1;
        for (int32_t x = 0, k = 0; x < t->nops; x++) {
          const fp_tx_op *o = &t->ops[x];
          if (o->kind != FP_TX_RECV || o->proc != a->peer || o->peer != a->proc) continue;
          if (k == k1) r1 = x;
          if (k == k2) r2 = x;
          k++;
        }
        if (r1 < 0 || r2 < 0) continue;
        at[0] = i, at[1] = j, at[2] = r1, at[3] = r2;
        cross_swap(t, at);
        fp_diag d;
        fpi_diag_init(&d, NULL);
        bool ok = fpi_tx_verify(t, &d);
        fpi_diag_free(&d);
        if (ok) return true;
        cross_swap(t, at); /* (a slice staged by an op between them: not this pair) */
      }
    }
  return false;
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  if (argc < 6) {
    fprintf(stderr, "usage: test_reshard MODEL SPEC_A WORLD_A SPEC_B WORLD_B [--to-offset K] [--mxfp8 PATTERN]\n");
    tu_finalize();
    return 2;
  }
  const char *model = argv[1], *mxpat = NULL;
  bool expect_merged = false; /* the pair has copies the executor runs as one (fpi_tx_copy_run) */
  bool wire_exact = false;    /* wire = lower bound even where B keeps MXFP8 (no block split between senders) */
  long wire_over = -1;        /* wire - lower bound where B keeps MXFP8: the split blocks' scale exchange (-1: any) */
  int expect_shared = -1;     /* processes of A -> B that repeat another's program (fp_tx.same); -1: any */
  bool watchdog = false;      /* --watchdog 1: the timeouts (FLEXPLAN_TIMEOUT=1, 3 processes) */
  int wa = atoi(argv[3]), wb = atoi(argv[5]);
  long off = 0;
  for (int i = 6; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--to-offset")) off = atol(argv[i + 1]);
    if (!strcmp(argv[i], "--mxfp8")) mxpat = argv[i + 1];
    if (!strcmp(argv[i], "--what") && !strcmp(argv[i + 1], "weights+optimizer")) g_states = -1;
    if (!strcmp(argv[i], "--expect-merged")) expect_merged = atoi(argv[i + 1]) != 0;
    if (!strcmp(argv[i], "--wire-exact")) wire_exact = atoi(argv[i + 1]) != 0;
    if (!strcmp(argv[i], "--wire-over")) wire_over = atol(argv[i + 1]);
    if (!strcmp(argv[i], "--expect-shared")) expect_shared = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--watchdog")) watchdog = atoi(argv[i + 1]) != 0;
  }
  if (watchdog) alarm(100); /* a hang is a failure, never a stuck CI job */
  fp_plan *A = tu_compile(model, argv[2], wa), *B = tu_compile(model, argv[4], wb);
  if (!A || !B) return tu_finish();
  const char *what = g_states ? "weights+optimizer" : "weights";
  if (g_states) {
    fp_plan_info ia;
    fp_plan_get_info(A, &ia);
    g_states = ia.optim_states;
    EXPECT(g_states > 0, "--what weights+optimizer: plan A holds no optimizer state");
  }
  const char *pats[1] = {mxpat};
  /* the way back: B's ranks (processes off..) are FROM, A's (processes 0..) TO */
  fp_reshard_options ro = {what, off, pats, mxpat ? 1 : 0, 0, NULL, NULL, 0}, back = {what, 0, NULL, 0, off, NULL, NULL, 0};
  fp_xfer *ab = NULL, *ba = NULL;
  bool kept = false; /* B keeps params as MXFP8 */
  for (int32_t i = 0; i < B->prog->nparams; i++) kept |= B->prog->params[i].main_dtype == FP_E4M3;
  EXPECT(fp_reshard_compile(A, B, &ro, &ab) == FP_OK, "reshard A->B: %s", fp_xfer_errmsg(ab));
  /* (from MXFP8 weights B keeps: read by dequantizing them) */
  EXPECT(fp_reshard_compile(B, A, &back, &ba) == FP_OK, "reshard B->A: %s", fp_xfer_errmsg(ba));
  /* and from kept weights into kept weights (B -> B shifted by one process, run below): the e4m3 bytes and
   * scales pass through, with no quantize or dequantize */
  fp_xfer *bb = NULL;
  int64_t bto = off + 1 + wb <= tu_world ? off + 1 : off - 1;
  if (kept) {
    fp_reshard_options shift = {what, bto, NULL, 0, off, NULL, NULL, 0};
    EXPECT(fp_reshard_compile(B, B, &shift, &bb) == FP_OK, "reshard B->B between MXFP8 weights: %s", fp_xfer_errmsg(bb));
    int64_t conv = 0, sends = 0;
    for (int32_t i = 0; bb && bb->tx && i < bb->tx->nops; i++) {
      const fp_tx_op *o = &bb->tx->ops[i];
      conv += o->kind == FP_TX_QUANT || o->kind == FP_TX_DEQUANT || o->kind == FP_TX_QUANT_AT;
      sends += o->kind == FP_TX_SEND && o->dtype == FP_E8M0;
    }
    EXPECT(conv == 0 && sends > 0, "B->B: %" PRId64 " quantizes or dequantizes (want none), %" PRId64 " scales sent", conv,
           sends);
  }
  if (ba) {
    /* the way back runs from its saved JSON (fp_xfer_load), which must
     * render to the same text */
    char *js = NULL, *js2 = NULL, path[256];
    fp_xfer_render(ba, 0, &js);
    snprintf(path, sizeof path, "%s/test_reshard.%d.%d.xfer.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid(), tu_rank);
    FILE *f = fopen(path, "w");
    EXPECT(f && js && fputs(js, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
    fp_xfer *loaded = NULL;
    EXPECT(fp_xfer_load(path, &loaded) == FP_OK, "load %s: %s", path, fp_xfer_errmsg(loaded));
    if (loaded && loaded->tx) {
      fp_xfer_render(loaded, 0, &js2);
      EXPECT(js2 && !strcmp(js, js2), "the loaded transfer renders differently");
      fp_xfer_free(ba);
      ba = loaded;
    } else {
      fp_xfer_free(loaded);
    }
    unlink(path);
    fp_free(js);
    fp_free(js2);
  }
  fp_xfer_info info;
  fp_xfer_get_info(ab, &info);
  EXPECT(info.processes <= tu_world, "the transfer needs %" PRId64 " processes, the job has %d", info.processes,
         tu_world);
  /* (a kept param's blocks split between senders exchange scale bytes) */
  if ((!mxpat && !kept) || wire_exact) EXPECT(info.wire_bytes == info.lower_bound, "wire %" PRId64 " != lower bound %" PRId64, info.wire_bytes,
                     info.lower_bound);
  if (wire_over >= 0)
    EXPECT(info.wire_bytes - info.lower_bound == wire_over, "wire %" PRId64 " - lower bound %" PRId64 " = %" PRId64
           " bytes, expected %ld", info.wire_bytes, info.lower_bound, info.wire_bytes - info.lower_bound, wire_over);
  if (expect_shared >= 0 && ab) {
    int shared = 0;
    for (int64_t p = 0; p < ab->tx->nprocs; p++) shared += fpi_tx_prog(ab->tx, p) != p;
    EXPECT(shared == expect_shared, "A->B: %d processes repeat another's program, expected %d", shared, expect_shared);
  }
  if (tu_failures) return tu_finish();

  /* executors: FROM ranks 0..wa-1, TO ranks on processes off..off+wb-1 */
  MPI_Comm ca, cb;
  bool inA = tu_rank < wa, inB = tu_rank >= off && tu_rank < off + wb;
  MPI_Comm_split(MPI_COMM_WORLD, inA ? 0 : MPI_UNDEFINED, tu_rank, &ca);
  MPI_Comm_split(MPI_COMM_WORLD, inB ? 0 : MPI_UNDEFINED, tu_rank, &cb);
  fp_exec *xa = NULL, *xb = NULL;
  if (inA) {
    fp_exec_config c = {.backend = FP_BACKEND_MPI, .rank = tu_rank, .world_size = wa, .bootstrap = &ca};
    EXPECT(fp_exec_create(A, &c, &xa) == FP_OK, "create A: %s", fp_exec_errmsg(xa));
    fill(xa, A);
  }
  if (inB) {
    fp_exec_config c = {.backend = FP_BACKEND_MPI, .rank = (int)(tu_rank - off), .world_size = wb, .bootstrap = &cb};
    EXPECT(fp_exec_create(B, &c, &xb) == FP_OK, "create B: %s", fp_exec_errmsg(xb));
    memset(xb->dev, SENT, (size_t)B->prog->arena_bytes);
  }
  if (tu_failures) return tu_finish();

  /* a transfer whose TO write points outside the TO rank's weights (as a
   * tampered file could, consistently enough to pass the verifier) fails on
   * every process before any byte moves: TO's arena is unchanged */
  {
    fp_tx *tx = ab->tx;
    if (tx->nneed > 0) {
      /* move the first need region, and every op writing into it, to the
       * end of TO's arena (the grads and staging live there, not weights) */
      fp_tx_region *r = &tx->need[0];
      int64_t keep = r->off, delta = tx->to_arena - r->bytes - r->off;
      int32_t owner = r->proc;
      for (int32_t i = tx->first[owner]; i < tx->first[owner + 1]; i++)
        if (tx->ops[i].dst.space == FP_SP_TO && tx->ops[i].dst.off >= keep && tx->ops[i].dst.off < keep + r->bytes)
          tx->ops[i].dst.off += delta;
      r->off += delta;
      fp_status st = fp_xfer_run(ab, xa, xb, NULL);
      EXPECT(st != FP_OK, "a transfer writing outside the weights ran");
      if (tu_rank < tx->nprocs && fpi_tx_prog(tx, tu_rank) == owner) /* (the owner's program, or repeating it) */
        EXPECT(st == FP_ERR_PLAN && strstr(fp_xfer_errmsg(ab), "are not this rank's weights"), "got %s: %s",
               fp_status_name(st), fp_xfer_errmsg(ab));
      else
        EXPECT(st == FP_ERR_MISMATCH, "got %s: %s", fp_status_name(st), fp_xfer_errmsg(ab));
      int64_t changed = 0;
      for (int64_t b = 0; inB && b < B->prog->arena_bytes; b++) changed += (unsigned char)xb->dev[b] != SENT;
      EXPECT(changed == 0, "a failed transfer changed %" PRId64 " TO bytes", changed);
      for (int32_t i = tx->first[owner]; i < tx->first[owner + 1]; i++)
        if (tx->ops[i].dst.space == FP_SP_TO && tx->ops[i].dst.off >= r->off && tx->ops[i].dst.off < r->off + r->bytes)
          tx->ops[i].dst.off -= delta;
      r->off = keep;
    }
  }
  /* labels that lie, as a tampered file's could, and consistently enough for
   * the verifier, which has no layout of a plan read from a file and proves
   * the values from the labels: a FROM read one element further into its
   * run than the element it names (one element shorter, so it stays
   * inside), and a TO need region naming the element after the one its
   * bytes hold; and a need region dropped (its bytes 0: a file without it
   * and the ops filling it would leave those weights as they were). Each
   * fails on the owner before any byte moves */
  for (int lie = 0; lie < 3; lie++) {
    fp_tx *tx = ab->tx;
    int32_t i = 0;
    while (i < tx->nops && !(tx->ops[i].src.space == FP_SP_FROM && tx->ops[i].n > 1 &&
                             (tx->ops[i].kind == FP_TX_COPY || tx->ops[i].kind == FP_TX_SEND)))
      i++;
    if (lie == 0 && i == tx->nops) continue; /* (nothing read from FROM in pieces of two or more) */
    if (lie >= 1 && tx->nneed == 0) continue;
    int32_t owner = lie ? tx->need[0].proc : tx->ops[i].proc;
    int64_t z = lie ? 0 : fpi_dtype_size(tx->ops[i].sdtype);
    int64_t kept = tx->need[0].bytes;
    if (lie == 2) tx->need[0].bytes = 0;
    else if (lie) tx->need[0].full_off += 1;
    else tx->ops[i].src.off += z, tx->ops[i].n -= 1;
    if (ab->run) ab->run->checked = 0; /* (edited in memory, which a loaded transfer never is: checked again) */
    fp_status st = fp_xfer_run(ab, xa, xb, NULL);
    const char *want = lie == 2 ? "; the transfer writes " : lie ? "as it says" : "not element";
    if (tu_rank < tx->nprocs && fpi_tx_prog(tx, tu_rank) == owner)
      EXPECT(st == FP_ERR_PLAN && strstr(fp_xfer_errmsg(ab), want) &&
                 strstr(fp_xfer_errmsg(ab), lie == 2 ? "this TO rank holds" : lie ? "TO bytes" : "reads FROM"),
             "a lying %s: got %s: %s", lie == 2 ? "need list" : lie ? "need label" : "read label", fp_status_name(st),
             fp_xfer_errmsg(ab));
    else
      EXPECT(st == FP_ERR_MISMATCH, "a lying label elsewhere: got %s: %s", fp_status_name(st), fp_xfer_errmsg(ab));
    int64_t changed = 0;
    for (int64_t b = 0; inB && b < B->prog->arena_bytes; b++) changed += (unsigned char)xb->dev[b] != SENT;
    EXPECT(changed == 0, "a refused transfer changed %" PRId64 " TO bytes", changed);
    if (lie == 2) tx->need[0].bytes = kept;
    else if (lie) tx->need[0].full_off -= 1;
    else tx->ops[i].src.off -= z, tx->ops[i].n += 1;
  }
  EXPECT(fp_xfer_run(ab, xa, xb, NULL) == FP_OK, "run A->B: %s", fp_xfer_errmsg(ab));
  if (expect_merged) { /* the checks below then cover copies run as one */
    const fp_tx *t = ab->tx;
    long long merged = 0;
    int32_t g = tu_rank < t->nprocs ? fpi_tx_prog(t, tu_rank) : 0;
    for (int32_t i = tu_rank < t->nprocs ? t->first[g] : 0, hi = tu_rank < t->nprocs ? t->first[g + 1] : 0; i < hi;) {
      int64_t n;
      int32_t end = fpi_tx_copy_run(t, i, hi, &n);
      merged += end - i > 1;
      i = end;
    }
    MPI_Allreduce(MPI_IN_PLACE, &merged, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    EXPECT(merged > 0, "no copies ran as one");
  }
  if (bb) { /* B -> B: the kept params' bytes pass through (check: the reference quantization, bit for bit) */
    fp_xfer_info bi;
    fp_xfer_get_info(bb, &bi);
    EXPECT(bi.wire_bytes == bi.lower_bound, "B->B wire %" PRId64 " != lower bound %" PRId64, bi.wire_bytes,
           bi.lower_bound);
    MPI_Comm cb2;
    bool inB2 = tu_rank >= bto && tu_rank < bto + wb;
    MPI_Comm_split(MPI_COMM_WORLD, inB2 ? 0 : MPI_UNDEFINED, tu_rank, &cb2);
    fp_exec *xb2 = NULL;
    if (inB2) {
      fp_exec_config c = {.backend = FP_BACKEND_MPI, .rank = (int)(tu_rank - bto), .world_size = wb, .bootstrap = &cb2};
      EXPECT(fp_exec_create(B, &c, &xb2) == FP_OK, "create B at +%" PRId64 ": %s", bto, fp_exec_errmsg(xb2));
      if (xb2) memset(xb2->dev, SENT, (size_t)B->prog->arena_bytes);
    }
    EXPECT(fp_xfer_run(bb, xb, xb2, NULL) == FP_OK, "run B->B: %s", fp_xfer_errmsg(bb));
    if (xb2) check(xb2, "B->B (MXFP8 passing through)", A, false, NULL);
    if (tu_rank == 0)
      printf("B->B between kept MXFP8 weights: %" PRId64 " wire bytes (lower bound %" PRId64 "), bytes unchanged\n",
             bi.wire_bytes, bi.lower_bound);
    fp_exec_destroy(xb2);
    if (cb2 != MPI_COMM_NULL) MPI_Comm_free(&cb2);
    fp_xfer_free(bb);
    bb = NULL;
  }
  if (inB) {
    check(xb, "A->B", A, mxpat != NULL, mxpat);
    /* nothing outside the need regions of this process changed */
    const fp_tx *t = ab->tx;
    char *mark = calloc((size_t)B->prog->arena_bytes, 1);
    for (int32_t k = 0; k < t->nneed; k++)
      if (t->need[k].proc == fpi_tx_prog(t, tu_rank)) memset(mark + t->need[k].off, 1, (size_t)t->need[k].bytes);
    int64_t bad = 0;
    for (int64_t b = 0; b < B->prog->arena_bytes; b++)
      if (!mark[b] && (unsigned char)xb->dev[b] != SENT) bad++;
    EXPECT(bad == 0, "A->B: %" PRId64 " TO bytes outside the need regions changed", bad);
    free(mark);
  }
  /* the handle keeps its communicator, staging and layout check between
   * runs: again over a duplicate of the world (the same group: reused), the
   * same result; then a run where the last TO process passes no TO
   * executor fails on every process and writes nothing, and the next run
   * works again */
  {
    MPI_Comm w2;
    MPI_Comm_dup(MPI_COMM_WORLD, &w2);
    if (inB) memset(xb->dev, SENT, (size_t)B->prog->arena_bytes);
    EXPECT(fp_xfer_run(ab, xa, xb, &w2) == FP_OK, "run A->B again: %s", fp_xfer_errmsg(ab));
    if (inB) check(xb, "A->B again", A, mxpat != NULL, mxpat);
    if (inB) memset(xb->dev, SENT, (size_t)B->prog->arena_bytes);
    int last = (int)(ab->tx->to_offset + ab->tx->to_world - 1);
    fp_status st = fp_xfer_run(ab, xa, tu_rank == last ? NULL : xb, &w2);
    EXPECT(st != FP_OK, "a run without a TO executor on process %d worked", last);
    int64_t changed = 0;
    for (int64_t b = 0; inB && b < B->prog->arena_bytes; b++) changed += (unsigned char)xb->dev[b] != SENT;
    EXPECT(changed == 0, "a failed run changed %" PRId64 " TO bytes", changed);
    EXPECT(fp_xfer_run(ab, xa, xb, &w2) == FP_OK, "run A->B after a failed run: %s", fp_xfer_errmsg(ab));
    if (inB) check(xb, "A->B after a failed run", A, mxpat != NULL, mxpat);
    MPI_Comm_free(&w2);
  }
  /* the last process holds another valid transfer between the same plans,
   * of as many ops (two slices crossing in the other order: a file edited,
   * or compiled elsewhere): every process refuses it before any op, and no
   * TO byte changes (the processes compare the whole program's hash; by
   * the plans and the op count alone, the slices would land in each
   * other's places unseen) */
  {
    int last = tu_world - 1;
    int32_t at[4];
    bool crossed = tu_rank == last && cross_two_slices(ab->tx, last, at);
    int any = crossed;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
      if (inB) memset(xb->dev, SENT, (size_t)B->prog->arena_bytes);
      fp_status st = fp_xfer_run(ab, xa, xb, NULL);
      EXPECT(st == FP_ERR_MISMATCH && strstr(fp_xfer_errmsg(ab), "hold different transfers"),
             "one process holding another transfer: got %s: %s", fp_status_name(st), fp_xfer_errmsg(ab));
      EXPECT(changed_bytes(xb, B) == 0, "a refused transfer changed %" PRId64 " TO bytes", changed_bytes(xb, B));
      if (crossed) cross_swap(ab->tx, at);
      if (inB) memset(xb->dev, SENT, (size_t)B->prog->arena_bytes);
      EXPECT(fp_xfer_run(ab, xa, xb, NULL) == FP_OK, "run A->B after the refusal: %s", fp_xfer_errmsg(ab));
      if (inB) check(xb, "A->B after the refusal", A, mxpat != NULL, mxpat);
    } else if (tu_rank == 0) {
      printf("(no two equal slices between two processes: the crossed-transfer case does not apply)\n");
    }
  }
  if (watchdog) {
    watchdog_away(ab, xa, xb, B, tu_world - 1);
    watchdog_away(ab, xa, xb, B, 0);
    if (ba) { /* the last process runs the way back while the others run A->B: refused everywhere */
      if (inB) memset(xb->dev, SENT, (size_t)B->prog->arena_bytes);
      bool last = tu_rank == tu_world - 1;
      fp_xfer *t = last ? ba : ab;
      fp_status st = last ? fp_xfer_run(ba, xb, xa, NULL) : fp_xfer_run(ab, xa, xb, NULL);
      EXPECT(st == FP_ERR_MISMATCH && strstr(fp_xfer_errmsg(t), "hold different transfers"),
             "different transfers on the processes: got %s: %s", fp_status_name(st), fp_xfer_errmsg(t));
      EXPECT(changed_bytes(xb, B) == 0, "refused transfers changed %" PRId64 " TO bytes", changed_bytes(xb, B));
    }
    if (inB) memset(xb->dev, SENT, (size_t)B->prog->arena_bytes);
    EXPECT(fp_xfer_run(ab, xa, xb, NULL) == FP_OK, "run A->B after the timeouts: %s", fp_xfer_errmsg(ab));
    if (inB) check(xb, "A->B after the timeouts", A, mxpat != NULL, mxpat);
  }
  if (ba) {
    if (inA) memset(xa->dev, SENT, (size_t)A->prog->arena_bytes);
    if (kept) { /* a dequantizing read whose scales point elsewhere (a tampered file) fails before any byte moves */
      fp_tx *tx = ba->tx;
      int32_t i = 0, owner = -1;
      while (i < tx->nops && !(tx->ops[i].kind == FP_TX_DEQUANT && tx->ops[i].aux.space == FP_SP_FROM)) i++;
      EXPECT(i < tx->nops, "no dequantizing read from B's MXFP8 weights");
      if (i < tx->nops) {
        owner = tx->ops[i].proc, tx->ops[i].aux.off += 1;
        fp_status st = fp_xfer_run(ba, xb, xa, NULL);
        if (tu_rank < tx->nprocs && fpi_tx_prog(tx, tu_rank) == owner)
          EXPECT(st == FP_ERR_PLAN && strstr(fp_xfer_errmsg(ba), "that are not the MXFP8 scales of"), "got %s: %s",
                 fp_status_name(st), fp_xfer_errmsg(ba));
        else
          EXPECT(st != FP_OK, "a tampered scales read ran");
        tx->ops[i].aux.off -= 1;
        int64_t changed = 0;
        for (int64_t b = 0; inA && b < A->prog->arena_bytes; b++) changed += (unsigned char)xa->dev[b] != SENT;
        EXPECT(changed == 0, "a refused transfer changed %" PRId64 " TO bytes", changed);
      }
    }
    EXPECT(fp_xfer_run(ba, xb, xa, NULL) == FP_OK, "run B->A: %s", fp_xfer_errmsg(ba));
    /* with equal main dtypes the round trip is bit-exact to A's own values */
    if (inA && !mxpat) {
      for (int32_t i = 0; i < A->prog->nparams; i++) {
        fp_param_view v;
        fp_exec_param_at(xa, i, &v);
        const fp_extent *e = &v.shard;
        for (int p = 0; p <= g_states; p++) {
          const fp_tensor *t = part(&v, p);
          bool same = p ? A->prog->optim_dtype == B->prog->optim_dtype
                        : A->prog->params[i].main_dtype == B->prog->params[i].main_dtype;
          if (!p && B->prog->params[i].main_dtype == FP_E4M3 && t->data) { /* B kept it as MXFP8 */
            check_from_kept(&v, t, (fp_dtype)A->prog->params[i].main_dtype, i);
            continue;
          }
          if (!same || !t->data) continue;
          for (int64_t k = 0; k < e->runs; k++)
            for (int64_t q = 0; q < e->len; q++) {
              float f = (float)formula(seed(i, p), e->full_off + k * e->full_stride + q), got;
              char w[8];
              fpk_cast(w, (fp_dtype)t->dtype, &f, FP_F32, 1);
              got = get(t->data, (fp_dtype)t->dtype, k * e->shard_stride + q);
              if (memcmp(w, (char *)t->data + (k * e->shard_stride + q) * fp_elem_size(t->dtype),
                         (size_t)fp_elem_size(t->dtype)))
                EXPECT(0, "round trip: %s %s[%" PRId64 "] %.9g is not A's", v.name, p ? "optimizer state" : "main",
                       e->full_off + k * e->full_stride + q, got);
            }
        }
      }
    }
  }
#ifdef FP_TEST_WRAP_ISEND
  if (watchdog) watchdog_lost(ab, xa, xb, 1); /* last: the executors it times out are unusable */
#endif
  if (tu_rank == 0)
    printf("transfer %d -> %d (%s, to-offset %ld%s%s): %" PRId64 " processes, %d ops, wire %" PRId64 " bytes, lower "
           "bound %" PRId64 ", local %" PRId64 "\n",
           wa, wb, what, off, mxpat ? ", mxfp8 " : "", mxpat ? mxpat : "", info.processes, info.nops, info.wire_bytes,
           info.lower_bound, info.local_bytes);
  fp_exec_destroy(xa);
  fp_exec_destroy(xb);
  if (ca != MPI_COMM_NULL) MPI_Comm_free(&ca);
  if (cb != MPI_COMM_NULL) MPI_Comm_free(&cb);
  fp_xfer_free(ab);
  fp_xfer_free(ba);
  fp_plan_free(A);
  fp_plan_free(B);
  return tu_finish();
}
