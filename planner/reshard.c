/* reshard.c - the transfer planner: given two compiled plans of one model
 * (FROM and TO, which may differ in world size, mesh, strategy, placements,
 * buckets and dtypes), the ops that move every TO rank's main-weight shard
 * from the FROM ranks that hold its elements (docs/reshard.md).
 *
 * Per param, every TO rank's shard runs are cut at the boundaries of the
 * FROM ranks' runs; each piece is copied (or cast) locally when the process
 * holding the TO rank also holds it as a FROM rank, else received from one
 * FROM rank holding it: the least loaded so far (bytes it sends), so
 * replicas (hybrid, replicate, no_shard) share the sending. A piece whose
 * dtypes differ is cast by the sender into staging and sent in TO's dtype,
 * so the wire carries exactly the bytes each destination lacks. A param a
 * reshard transform takes (a `--transform PATTERN=NAME` rule: the built-in
 * MXFP8 of ir/xfer.h, or a plug-in of the caller's set) crosses the wire as
 * the transform's wire tensors (piece_xf): prep_send, sends, recvs,
 * finalize; MXFP8 on the wire is the built-in "mxfp8" transform.
 * A TO param the plan keeps as MXFP8 (param_dtype "mxfp8": e4m3 elements
 * and e8m0 scales, no full-precision copy) receives MXFP8 straight into
 * those buffers: the sender quantizes the whole blocks of its piece and
 * sends elements and scales, the receiver keeps them; a block whose
 * elements come from two FROM runs (a boundary inside it) is gathered in
 * FROM's dtype into staging and quantized there by the receiver
 * (piece_keep).
 * Sends, recvs and local copies come first on every process, dequantizes and
 * derived compute weights after them, so no process waits on a recv before
 * posting all it sends (the verifier proves it). */
#include "reshard.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"

typedef struct run {   /* one run of elements a rank holds */
  int32_t rank;
  int64_t a, len;      /* flat elements [a, a+len) of the param */
  int64_t byte;        /* arena byte offset of element a */
} run;

/* runs by start, ties by rank (they are listed by rank): a radix sort */
static uint64_t run_start(const void *rec, int k) {
  (void)k;
  return (uint64_t)((const run *)rec)->a;
}

static int64_t numel_of(const fp_ir_param *q) {
  int64_t n = 1;
  for (int k = 0; k < q->ndim; k++) n *= q->shape[k];
  return n;
}

/* the arena byte where q's slot starts in `which` (0: main weights; k + 1:
 * optimizer state k, a plane of the bucket's state buffer), and its element size */
static int64_t slot_base(const fp_prog *p, const fp_ir_param *q, int which, int64_t *sz) {
  if (which == 0) {
    *sz = fpi_dtype_size(q->main_dtype);
    return p->bufs[q->main.buf].offset + q->main.off;
  }
  const fp_ir_buf *B = &p->bufs[q->opt.buf];
  *sz = fpi_dtype_size(p->optim_dtype);
  return B->offset + q->opt.off + (which - 1) * (B->bytes / fpi_optim_states(p->optim));
}

/* the runs rank r holds of q's main weights or optimizer state `which`
 * (the same elements: the state mirrors the main shard; as executor/exec.c
 * shard_of) */
static int holdings(const fp_prog *p, const fp_ir_param *q, int which, int64_t r, run *out, int cap,
                    int64_t *nruns) {
  int64_t sz, numel = numel_of(q), base = slot_base(p, q, which, &sz);
  int64_t runs = 0, len = 0, sstride = 0, foff = 0, fstride = 0, last = -1; /* last: the last run's length (-1: len) */
  if (q->placement == FP_PL_REPLICATE) {
    runs = 1, len = numel;
  } else {
    const fp_ir_comm *c = &p->comms[q->comm];
    int64_t g = fpi_comm_index(c, r);
    if (q->placement == FP_PL_SHARD) {
      int d = q->dim, nd = q->ndim > 0 ? q->ndim : 1;
      int64_t shape_d = q->ndim > 0 ? q->shape[d] : 1, outer = 1, inner = 1;
      for (int k = 0; k < d; k++) outer *= q->shape[k];
      for (int k = d + 1; k < nd && q->ndim > 0; k++) inner *= q->shape[k];
      int64_t c_rows = q->chunk / (outer * inner), rows = shape_d - g * c_rows;
      rows = rows < 0 ? 0 : rows > c_rows ? c_rows : rows;
      if (rows > 0) runs = outer, len = rows * inner, sstride = c_rows * inner, foff = g * c_rows * inner,
                    fstride = shape_d * inner;
    } else if (q->placement == FP_PL_RAGGED) {
      const fp_ir_table *t = &p->tabs[q->tab];
      if (t->cnt[g] > 0) runs = 1, len = t->cnt[g], foff = t->off[g];
    } else if (q->placement == FP_PL_CYCLIC) {
      const fp_ir_table *t = &p->tabs[q->tab];
      int64_t b = fpi_cyclic_block(t);
      if (t->cnt[g] > 0) /* the param's short last block, if it is g's, is its last run */
        runs = fpi_cyclic_runs(t->cnt[g], b, &last), len = b, sstride = b, foff = g * b, fstride = t->n * b;
    } else if (q->placement == FP_PL_OWNED) {
      if (g == q->owner) runs = 1, len = numel;
    } else if (q->placement == FP_PL_FLAT) {
      /* the bucket's params end to end (the weight view's offset is the
       * param's position); rank g holds flat [g*chunk, (g+1)*chunk), at the
       * start of its main view, so this param's piece is shifted into it */
      int64_t es = fpi_dtype_size(q->param_dtype), a = q->weight.off / es, gc = g * q->chunk, end = gc + q->chunk;
      int64_t lo = a > gc ? a : gc, hi = a + numel < end ? a + numel : end;
      if (hi > lo) runs = 1, len = hi - lo, foff = lo - a, base += (lo - gc) * sz;
    }
  }
  *nruns = runs;
  if (len == 0) runs = 0;
  for (int64_t k = 0; k < runs && k < cap; k++)
    out[k] = (run){(int32_t)r, foff + k * fstride, k == runs - 1 && last >= 0 ? last : len, base + k * sstride * sz};
  return (int)(runs < cap ? runs : cap);
}

/* A rank's runs depend only on its index g in the param's comm (the
 * program is SPMD: the same offsets on every rank), so they are computed
 * once per index and copied out per rank with its own number, not once per
 * rank (16,384 of them for a few distinct indices). */
typedef struct hmemo {
  const fp_ir_comm *c;   /* NULL: replicated (one index) */
  run *runs;             /* index g's runs: runs[first[g] .. first[g+1]) */
  int64_t *first;
} hmemo;

static void memo_build(fp_arena *a, const fp_prog *p, const fp_ir_param *q, int which, hmemo *m) {
  m->c = q->placement == FP_PL_REPLICATE ? NULL : &p->comms[q->comm];
  int64_t G = m->c ? m->c->size : 1, total = 0, nr;
  m->first = fpi_alloc_array(a, (size_t)G + 1, sizeof *m->first);
  for (int64_t g = 0; g < G; g++) {
    holdings(p, q, which, m->c ? g * m->c->stride : 0, NULL, 0, &nr);
    m->first[g] = total;
    total += nr;
  }
  m->first[G] = total;
  m->runs = fpi_alloc_array(a, (size_t)total + 1, sizeof *m->runs);
  for (int64_t g = 0; g < G; g++)
    holdings(p, q, which, m->c ? g * m->c->stride : 0, m->runs + m->first[g], (int)(m->first[g + 1] - m->first[g]), &nr);
}

/* rank r's runs (holdings(), from the memo): their count, *out pointing at
 * them; the caller sets the rank */
static int64_t memo_get(const hmemo *m, int64_t r, const run **out) {
  int64_t g = m->c ? fpi_comm_index(m->c, r) : 0;
  *out = m->runs + m->first[g];
  return m->first[g + 1] - m->first[g];
}

typedef struct planner {
  fp_tx *t;
  const fp_prog *from, *to;
  int64_t *load;       /* bytes each FROM rank sends so far */
  int64_t *stage;      /* staging bytes used per process */
  fp_tx_op *late;      /* ops that go after every send and recv (phase 2) */
  int64_t nlate, cap_late;
  /* the TO param being covered is kept as MXFP8 (piece_keep); per TO
   * process, reset before its pieces, which come in element order */
  bool keep;
  int64_t knumel;      /* its elements */
  int64_t kdata, kscales; /* TO bytes of its element 0 and of its scale 0 */
  int64_t klast;       /* the last block counted in the lower bound (-1 none) */
  /* the parts of split blocks the TO processes want (keep_part), planned
   * once the param's pieces are all known (split_blocks) */
  struct kpart { int64_t blk, e, n, src; int32_t d, sp; } *kp;
  int64_t nkp, cap_kp;
  /* the rounds of a split block's scale exchange, before every other op of
   * a process (xchg): 0 part scales and their sends, 1 the max, 2 the max
   * sent to the parts' quantizers and to the TO processes, 3 the parts
   * quantized at it */
  fp_tx_op *pre[4];
  int64_t npre[4], cap_pre[4];
  /* the slices a sender has quantized for the kept param so far, so every
   * TO process (each holds the whole param) gets the same staging: a sender
   * quantizes its slice once, not once per receiver. Open addressing on
   * (process, first element, count); emptied per param */
  struct kq { int32_t proc; int64_t e, n, q, qs; } *kq;
  int64_t kq_cap, kq_used;
  int64_t *kq_slots;   /* the slots in use, to empty them */
  /* shared local programs (classes()): per process */
  int32_t *owner;      /* the first process of its class */
  int8_t *member;      /* repeats its owner's program (1; 2 while being unshared) */
  bool *local;         /* its class needs nothing from other processes */
  int nstates;         /* optimizer states moved per trainable param */
  const int32_t *fi;   /* FROM's index of each TO param */
  run *fr;             /* plan_param: FROM runs of every rank, sorted by start */
  int64_t cap_fr;
  /* the param being covered goes through a reshard transform (piece_xf):
   * it, and the param as it is told; xf_bad after its error */
  bool src_mx;         /* the param being covered: FROM keeps it as MXFP8 (piece_src_mx) */
  bool pass;           /* FROM and TO keep it as MXFP8: its e4m3 bytes and scales pass through (piece_pass) */
  int64_t fscales;     /* then FROM's byte of its scale 0 */
  const fpi_xform **xfv; /* the transfer's transforms (t->xf_names: the caller's and the built-ins it names) */
  const fpi_xform *xf;
  fpi_xf_param xp;
  fp_diag *d;
  bool xf_bad;
} planner;

static int64_t stage_take(planner *P, int32_t proc, int64_t bytes) {
  int64_t at = P->stage[proc];
  P->stage[proc] += (bytes + 15) / 16 * 16;
  return at;
}

static fp_tx_op *late(planner *P, fp_tx_kind k, int32_t proc, int32_t param, fp_dtype dt, int64_t n) {
  P->late = fpi_grow(P->t->arena, P->late, &P->cap_late, P->nlate + 1, sizeof *P->late);
  fp_tx_op *o = &P->late[P->nlate++];
  *o = (fp_tx_op){.kind = k, .proc = proc, .peer = -1, .param = param, .dtype = dt, .sdtype = dt, .n = n,
                  .plane = (unsigned)P->t->plane};
  return o;
}

/* an op of exchange round r (planner.pre) */
static fp_tx_op *xchg(planner *P, int r, fp_tx_kind k, int32_t proc, int32_t param, fp_dtype dt, int64_t n) {
  P->pre[r] = fpi_grow(P->t->arena, P->pre[r], &P->cap_pre[r], P->npre[r] + 1, sizeof *P->pre[r]);
  fp_tx_op *o = &P->pre[r][P->npre[r]++];
  *o = (fp_tx_op){.kind = k, .proc = proc, .peer = -1, .param = param, .dtype = dt, .sdtype = dt, .n = n,
                  .plane = (unsigned)P->t->plane};
  o->dst.space = o->src.space = o->aux.space = FP_SP_NONE;
  return o;
}

static fp_tx_ref ref(int sp, int64_t off) { return (fp_tx_ref){(int8_t)sp, off}; }

/* Into a TO param kept as MXFP8: whole blocks [e, e+n) (e on a block
 * boundary; e+n on one or the param's end), quantized from FROM run s by
 * its process and kept by TO process d as they arrive */
/* the slot of (proc, e, n) in the sender memo: its own or the empty one
 * where it goes */
static struct kq *kq_find(planner *P, int32_t proc, int64_t e, int64_t n) {
  if (2 * (P->kq_used + 1) > P->kq_cap) { /* grow (rehash) */
    int64_t cap = P->kq_cap ? 2 * P->kq_cap : 1024;
    struct kq *old = P->kq;
    int64_t ocap = P->kq_cap;
    P->kq = fpi_alloc_array(P->t->arena, (size_t)cap, sizeof *P->kq);
    P->kq_slots = fpi_alloc_array(P->t->arena, (size_t)cap, sizeof *P->kq_slots);
    for (int64_t k = 0; k < cap; k++) P->kq[k].proc = -1;
    P->kq_cap = cap, P->kq_used = 0;
    for (int64_t k = 0; k < ocap; k++)
      if (old[k].proc >= 0) {
        struct kq *s = kq_find(P, old[k].proc, old[k].e, old[k].n);
        *s = old[k];
        P->kq_slots[P->kq_used++] = s - P->kq;
      }
  }
  uint64_t h = ((uint64_t)proc * 0x9E3779B97F4A7C15u) ^ ((uint64_t)e * 0xC2B2AE3D27D4EB4Fu) ^ (uint64_t)n;
  h ^= h >> 29;
  for (int64_t k = (int64_t)(h & (uint64_t)(P->kq_cap - 1));; k = (k + 1) & (P->kq_cap - 1))
    if (P->kq[k].proc < 0 || (P->kq[k].proc == proc && P->kq[k].e == e && P->kq[k].n == n)) return &P->kq[k];
}

static void keep_whole(planner *P, int32_t pi, const run *s, int64_t e, int64_t n, int32_t d, fp_dtype fdt) {
  fp_tx *t = P->t;
  int64_t src = s->byte + (e - s->a) * fpi_dtype_size(fdt), ns = fpi_mx_blocks(n);
  int32_t sp = (int32_t)(s->rank + t->from_offset);
  fp_tx_ref data = ref(FP_SP_TO, P->kdata + e), scales = ref(FP_SP_TO, P->kscales + e / FP_MX_BLOCK);
  if (sp == d) {
    fp_tx_op *o = fpi_tx_emit(t, FP_TX_QUANT, d, pi, FP_E4M3, n);
    o->sdtype = fdt, o->full_off = e, o->dst = data, o->src = ref(FP_SP_FROM, src), o->aux = scales;
    return;
  }
  struct kq *m = kq_find(P, sp, e, n);
  fp_tx_op *o;
  if (m->proc < 0) { /* the sender's first receiver of this slice: quantize it */
    int64_t q0 = stage_take(P, sp, n), qs0 = stage_take(P, sp, ns);
    *m = (struct kq){sp, e, n, q0, qs0};
    P->kq_slots[P->kq_used++] = m - P->kq;
    o = fpi_tx_emit(t, FP_TX_QUANT, sp, pi, FP_E4M3, n);
    o->sdtype = fdt, o->full_off = e, o->dst = ref(FP_SP_STAGE, m->q), o->src = ref(FP_SP_FROM, src),
    o->aux = ref(FP_SP_STAGE, m->qs);
  }
  int64_t q = m->q, qs = m->qs;
  o = fpi_tx_emit(t, FP_TX_SEND, sp, pi, FP_E4M3, n);
  o->peer = d, o->full_off = e, o->src = ref(FP_SP_STAGE, q);
  o = fpi_tx_emit(t, FP_TX_SEND, sp, pi, FP_E8M0, ns);
  o->peer = d, o->full_off = e, o->src = ref(FP_SP_STAGE, qs);
  o = fpi_tx_emit(t, FP_TX_RECV, d, pi, FP_E4M3, n);
  o->peer = sp, o->full_off = e, o->dst = data;
  o = fpi_tx_emit(t, FP_TX_RECV, d, pi, FP_E8M0, ns);
  o->peer = sp, o->full_off = e, o->dst = scales;
  P->load[s->rank] += n + ns;
}

/* Into a TO param kept as MXFP8: elements [e, e+n) of block blk, which
 * other pieces share (its scale needs all of them), for TO process d from
 * FROM run s: noted, and planned with the block's other parts once the
 * param's pieces are known (split_blocks) */
static void keep_part(planner *P, const run *s, int64_t e, int64_t n, int32_t d, int64_t blk, fp_dtype fdt) {
  P->kp = fpi_grow(P->t->arena, P->kp, &P->cap_kp, P->nkp + 1, sizeof *P->kp);
  P->kp[P->nkp++] = (struct kpart){blk, e, n, s->byte + (e - s->a) * fpi_dtype_size(fdt), d,
                                   (int32_t)(s->rank + P->t->from_offset)};
}

static uint64_t kpart_key(const void *rec, int k) {
  const struct kpart *x = rec;
  return (uint64_t)(k == 0 ? x->blk : x->e);
}

/* The blocks of a kept param that FROM shard boundaries cut (docs/reshard.md
 * "Split blocks"). Per block, its parts (the pieces' element ranges: the
 * same for every TO process, which holds the whole param) and the TO
 * processes that want them:
 * - a process holding every part itself (gather) copies them into staging
 *   and quantizes the block there, as one;
 * - for the others (exchange) each part is quantized by one holder, its
 *   quantizer: a TO process holding it quantizes its own copy into TO, and
 *   for the processes lacking it one holder (preferring those) quantizes it
 *   into staging and sends it. All of them need the block's scale, the max
 *   of its parts' scale bytes: a leader (a gather process if any, else the
 *   quantizer of the most parts) takes the scales of the parts it holds,
 *   receives those of the others from their quantizers (round 0), takes the
 *   max (1) and sends it to the quantizers and the exchange processes (2,
 *   into TO's scales where the receiver keeps them); each part is then
 *   quantized at it (3) and sent. The result is the whole block's
 *   reference MXFP8, bit for bit; the wire carries each destination's lacked
 *   bytes plus one scale byte per part the leader lacks and per quantizer
 *   that is no TO process of the block. */
/* a quantizer (proc, part): its FROM byte, where it quantizes to, where it reads the scale */
struct qz {
  int32_t proc, part;
  int64_t src;
  fp_tx_ref out, scale;
};

/* one split block being planned (split_blocks): its wanted parts kp[lo, hi),
 * and scratch sized for the most parts of any block */
typedef struct sblock {
  planner *P;
  int32_t pi;
  fp_dtype fdt;
  int64_t fsz;
  const struct kpart *kp;
  int64_t lo, hi, blk, b0, blen;
  int32_t *procs, np; /* the TO processes wanting parts */
  bool *gather;       /* per process: it holds every part itself */
  int64_t *pe, *pn;   /* the parts' element ranges, in element order */
  int32_t npart;
  int32_t *kx, *kj;   /* per wanted part k: its process's index in procs, its part's in pe */
  struct qz *qz;      /* the quantizers */
  int32_t nq;
  int32_t *sender;    /* per part: its quantizer for others (qz index) */
  int32_t lead;       /* the leader process, -1 until chosen */
  fp_tx_ref fin;      /* where the leader holds the block's scale */
} sblock;

/* the block's parts, in element order, and its processes */
static void block_parts(sblock *B) {
  const struct kpart *kp = B->kp;
  B->np = B->npart = B->nq = 0;
  B->lead = -1;
  for (int64_t k = B->lo; k < B->hi; k++) {
    if (B->npart == 0 || B->pe[B->npart - 1] != kp[k].e) B->pe[B->npart] = kp[k].e, B->pn[B->npart] = kp[k].n, B->npart++;
    FP_ASSERT(B->pn[B->npart - 1] == kp[k].n);
    int32_t x = 0;
    while (x < B->np && B->procs[x] != kp[k].d) x++;
    if (x == B->np) B->procs[B->np] = kp[k].d, B->gather[B->np] = true, B->np++;
    B->gather[x] &= kp[k].sp == kp[k].d;
    B->kx[k] = x, B->kj[k] = B->npart - 1;
  }
  FP_ASSERT(B->npart >= 2);
}

/* gather processes: copy the parts into staging, quantize the block there;
 * the first is the leader. true when some process exchanges. */
static bool block_gathers(sblock *B) {
  planner *P = B->P;
  bool xchange = false;
  for (int32_t x = 0; x < B->np; x++) {
    xchange |= !B->gather[x];
    if (!B->gather[x]) continue;
    if (B->lead < 0) B->lead = B->procs[x];
    int64_t st = stage_take(P, B->procs[x], B->blen * B->fsz);
    for (int64_t k = B->lo; k < B->hi; k++) {
      const struct kpart *c = &B->kp[k];
      if (c->d != B->procs[x]) continue;
      fp_tx_op *o = fpi_tx_emit(P->t, FP_TX_COPY, B->procs[x], B->pi, B->fdt, c->n);
      o->full_off = c->e, o->dst = ref(FP_SP_STAGE, st + (c->e - B->b0) * B->fsz), o->src = ref(FP_SP_FROM, c->src);
    }
    fp_tx_op *q = late(P, FP_TX_QUANT, B->procs[x], B->pi, FP_E4M3, B->blen);
    q->sdtype = B->fdt, q->full_off = B->b0, q->dst = ref(FP_SP_TO, P->kdata + B->b0), q->src = ref(FP_SP_STAGE, st),
    q->aux = ref(FP_SP_TO, P->kscales + B->blk);
  }
  return xchange;
}

/* quantizers: the exchange processes' own parts, then one sender per part
 * some exchange process lacks (a gather process holding the part, else the
 * cover's sender) */
static void block_quantizers(sblock *B) {
  const struct kpart *kp = B->kp;
  for (int32_t j = 0; j < B->npart; j++) B->sender[j] = -1;
  for (int64_t k = B->lo; k < B->hi; k++) {
    int32_t j = B->kj[k];
    if (B->gather[B->kx[k]] || kp[k].sp != kp[k].d) continue;
    B->qz[B->nq] = (struct qz){kp[k].d, j, kp[k].src, ref(FP_SP_TO, B->P->kdata + kp[k].e), {0}};
    if (B->sender[j] < 0) B->sender[j] = B->nq;
    B->nq++;
  }
  for (int64_t k = B->lo; k < B->hi; k++) {
    int32_t j = B->kj[k];
    if (B->gather[B->kx[k]] || kp[k].sp == kp[k].d || B->sender[j] >= 0) continue;
    int32_t by = kp[k].sp;
    int64_t src = kp[k].src;
    for (int64_t g = B->lo; g < B->hi; g++)
      if (kp[g].e == kp[k].e && kp[g].sp == kp[g].d) {
        by = kp[g].d, src = kp[g].src;
        break;
      }
    B->qz[B->nq] = (struct qz){by, j, src, ref(FP_SP_STAGE, stage_take(B->P, by, B->pn[j])), {0}};
    B->sender[j] = B->nq++;
  }
  /* the leader, where no gather process is: the quantizer of the most
   * parts (ties: an exchange process, the first) */
  if (B->lead >= 0) return;
  int32_t best = -1;
  for (int32_t q = 0; q < B->nq; q++) {
    int32_t cnt = 0;
    for (int32_t r = 0; r < B->nq; r++) cnt += B->qz[r].proc == B->qz[q].proc;
    cnt = 2 * cnt + (B->qz[q].out.space == FP_SP_TO);
    if (cnt > best) best = cnt, B->lead = B->qz[q].proc;
  }
}

/* rounds 0 and 1: each part's scale byte at the leader (its own, or sent by
 * the part's quantizer), and their running max, the last one into B->fin
 * (TO's scales where the leader is an exchange process, which keeps it) */
static void block_scale(sblock *B) {
  planner *P = B->P;
  int32_t lead = B->lead;
  bool lead_to = false;
  for (int32_t x = 0; x < B->np; x++) lead_to |= B->procs[x] == lead && !B->gather[x];
  int64_t prev = -1;
  B->fin = lead_to ? ref(FP_SP_TO, P->kscales + B->blk) : ref(FP_SP_STAGE, stage_take(P, lead, 1));
  for (int32_t j = 0; j < B->npart; j++) {
    int64_t src = -1; /* the part in the leader's FROM shard */
    for (int64_t k = B->lo; k < B->hi && src < 0; k++) /* (every quantizer's bytes come from such a k) */
      if (B->kj[k] == j && B->kp[k].sp == lead) src = B->kp[k].src;
    int64_t xj = stage_take(P, lead, 1);
    fp_tx_op *o;
    if (src >= 0) {
      o = xchg(P, 0, FP_TX_SCALES, lead, B->pi, FP_E8M0, B->pn[j]);
      o->sdtype = B->fdt, o->full_off = B->pe[j], o->dst = ref(FP_SP_STAGE, xj), o->src = ref(FP_SP_FROM, src);
    } else {
      const struct qz *by = &B->qz[B->sender[j]]; /* (every part has one: exchange processes want them all) */
      int64_t at = stage_take(P, by->proc, 1);
      o = xchg(P, 0, FP_TX_SCALES, by->proc, B->pi, FP_E8M0, B->pn[j]);
      o->sdtype = B->fdt, o->full_off = B->pe[j], o->dst = ref(FP_SP_STAGE, at), o->src = ref(FP_SP_FROM, by->src);
      o = xchg(P, 0, FP_TX_SEND, by->proc, B->pi, FP_E8M0, 1);
      o->peer = lead, o->full_off = B->pe[j], o->src = ref(FP_SP_STAGE, at);
      o = xchg(P, 0, FP_TX_RECV, lead, B->pi, FP_E8M0, 1);
      o->peer = by->proc, o->full_off = B->pe[j], o->dst = ref(FP_SP_STAGE, xj);
      P->load[by->proc - P->t->from_offset] += 1;
    }
    if (prev >= 0) {
      o = xchg(P, 1, FP_TX_MAX, lead, B->pi, FP_E8M0, 1);
      o->full_off = B->b0, o->src = ref(FP_SP_STAGE, prev), o->aux = ref(FP_SP_STAGE, xj);
      o->dst = j == B->npart - 1 ? B->fin : ref(FP_SP_STAGE, stage_take(P, lead, 1));
      prev = o->dst.off;
    } else {
      prev = xj;
    }
  }
}

/* round 2: the scale to every exchange process and quantizer but the
 * leader, once per process (into TO's scales for an exchange process,
 * which keeps it), and where each quantizer reads it */
static void block_share_scale(sblock *B) {
  planner *P = B->P;
  for (int32_t x = 0; x < B->np + B->nq; x++) {
    int32_t p = x < B->np ? B->procs[x] : B->qz[x - B->np].proc;
    if (p == B->lead || (x < B->np && B->gather[x])) continue;
    bool seen = false, into_to = false;
    for (int32_t y = 0; y < x && !seen; y++)
      seen = y < B->np ? B->procs[y] == p && !B->gather[y] : B->qz[y - B->np].proc == p;
    for (int32_t y = 0; y < B->np; y++) into_to |= B->procs[y] == p && !B->gather[y];
    if (seen) continue;
    fp_tx_ref at = into_to ? ref(FP_SP_TO, P->kscales + B->blk) : ref(FP_SP_STAGE, stage_take(P, p, 1));
    fp_tx_op *o = xchg(P, 2, FP_TX_SEND, B->lead, B->pi, FP_E8M0, 1);
    o->peer = p, o->full_off = B->b0, o->src = B->fin;
    o = xchg(P, 2, FP_TX_RECV, p, B->pi, FP_E8M0, 1);
    o->peer = B->lead, o->full_off = B->b0, o->dst = at;
    P->load[B->lead - P->t->from_offset] += 1;
    for (int32_t q = 0; q < B->nq; q++)
      if (B->qz[q].proc == p) B->qz[q].scale = at;
  }
  for (int32_t q = 0; q < B->nq; q++)
    if (B->qz[q].proc == B->lead) B->qz[q].scale = B->fin;
}

/* round 3: the parts at the scale; then each sent to the processes lacking it */
static void block_quantize(sblock *B) {
  planner *P = B->P;
  for (int32_t q = 0; q < B->nq; q++) {
    const struct qz *z = &B->qz[q];
    FP_ASSERT(z->scale.space != FP_SP_NONE);
    fp_tx_op *o = xchg(P, 3, FP_TX_QUANT_AT, z->proc, B->pi, FP_E4M3, B->pn[z->part]);
    o->sdtype = B->fdt, o->full_off = B->pe[z->part], o->dst = z->out, o->src = ref(FP_SP_FROM, z->src), o->aux = z->scale;
  }
  for (int64_t k = B->lo; k < B->hi; k++) {
    const struct kpart *c = &B->kp[k];
    int32_t j = B->kj[k];
    if (B->gather[B->kx[k]] || c->sp == c->d) continue;
    const struct qz *by = &B->qz[B->sender[j]];
    fp_tx_op *o = fpi_tx_emit(P->t, FP_TX_SEND, by->proc, B->pi, FP_E4M3, B->pn[j]);
    o->peer = c->d, o->full_off = B->pe[j], o->src = by->out;
    o = fpi_tx_emit(P->t, FP_TX_RECV, c->d, B->pi, FP_E4M3, B->pn[j]);
    o->peer = by->proc, o->full_off = B->pe[j], o->dst = ref(FP_SP_TO, P->kdata + B->pe[j]);
    P->load[by->proc - P->t->from_offset] += B->pn[j];
  }
}

static void split_blocks(planner *P, int32_t pi, fp_dtype fdt) {
  fp_arena *a = P->t->arena;
  struct kpart *kp = P->kp;
  int64_t nkp = P->nkp;
  P->nkp = 0;
  if (nkp == 0) return;
  fpi_sort_records(kp, sizeof *kp, nkp, 2, kpart_key);
  size_t n = (size_t)nkp + 1;
  sblock B = {.P = P, .pi = pi, .fdt = fdt, .fsz = fpi_dtype_size(fdt), .kp = kp,
              .procs = fpi_alloc_array(a, n, sizeof *B.procs), .gather = fpi_alloc_array(a, n, sizeof *B.gather),
              .pe = fpi_alloc_array(a, n, sizeof *B.pe), .pn = fpi_alloc_array(a, n, sizeof *B.pn),
              .kx = fpi_alloc_array(a, n, sizeof *B.kx), .kj = fpi_alloc_array(a, n, sizeof *B.kj),
              .qz = fpi_alloc_array(a, n, sizeof *B.qz), .sender = fpi_alloc_array(a, n, sizeof *B.sender)};
  for (int64_t lo = 0, hi; lo < nkp; lo = hi) {
    int64_t blk = kp[lo].blk;
    for (hi = lo; hi < nkp && kp[hi].blk == blk;) hi++;
    B.lo = lo, B.hi = hi, B.blk = blk, B.b0 = blk * FP_MX_BLOCK;
    B.blen = P->knumel - B.b0 < FP_MX_BLOCK ? P->knumel - B.b0 : FP_MX_BLOCK;
    block_parts(&B);
    if (!block_gathers(&B)) continue;
    block_quantizers(&B);
    block_scale(&B);
    block_share_scale(&B);
    block_quantize(&B);
  }
}

/* one piece [e, e+n) of a TO param kept as MXFP8: at most its first and its
 * last block are split (shared with another piece), the blocks between are
 * whole; the lower bound gains one scale byte per block holding elements
 * process d lacks (the cover adds their e4m3 bytes) */
static void piece_keep(planner *P, int32_t pi, const run *s, int64_t e, int64_t n, int32_t d, fp_dtype fdt) {
  int64_t end = e + n, fb = e / FP_MX_BLOCK, lb = (end - 1) / FP_MX_BLOCK;
  if (s->rank + P->t->from_offset != d) {
    int64_t b0 = fb > P->klast ? fb : P->klast + 1;
    if (lb >= b0) P->t->lower_bound += lb - b0 + 1, P->klast = lb;
  }
  int64_t bend = (lb + 1) * FP_MX_BLOCK < P->knumel ? (lb + 1) * FP_MX_BLOCK : P->knumel;
  bool head_whole = e == fb * FP_MX_BLOCK, tail_whole = end == bend;
  if (fb == lb) {
    if (head_whole && tail_whole) keep_whole(P, pi, s, e, n, d, fdt);
    else keep_part(P, s, e, n, d, fb, fdt);
    return;
  }
  int64_t wa = head_whole ? e : (fb + 1) * FP_MX_BLOCK, wb = tail_whole ? end : lb * FP_MX_BLOCK;
  if (!head_whole) keep_part(P, s, e, wa - e, d, fb, fdt);
  if (wb > wa) keep_whole(P, pi, s, wa, wb - wa, d, fdt);
  if (!tail_whole) keep_part(P, s, wb, end - wb, d, lb, fdt);
}

/* the bytes of n wire tensors laid out as fpi_tx_wire_at does */
static int64_t wire_span(const fp_tx_wire *w, int n) {
  int64_t b = 0;
  for (int k = 0; k < n; k++) b += (w[k].count * fpi_dtype_size(w[k].dtype) + 15) / 16 * 16;
  return b;
}

/* the transform's wire tensors of a slice on one side (recv: prepare_recv);
 * false after a located error naming it */
static bool xf_wires(planner *P, bool recv, int64_t e, int64_t n, fp_tx_wire *w, int *nw) {
  char err[256] = "";
  const char *fn = recv ? "recv_wires (prepare_recv)" : "send_wires (prepare_send)";
  bool ok = P->xf->wires(P->xf->ctx, recv, &P->xp, e, n, w, nw, err, sizeof err);
  if (ok && (*nw < 1 || *nw > FP_TX_MAX_WIRES)) {
    snprintf(err, sizeof err, "gave %d wire tensors (1 to %d)", *nw, FP_TX_MAX_WIRES);
    ok = false;
  }
  for (int k = 0; ok && k < *nw; k++)
    if (w[k].count < 0 || w[k].count > INT64_MAX / 64 || (unsigned)w[k].dtype >= FP_NDTYPES) {
      snprintf(err, sizeof err, "wire tensor %d has count %" PRId64 " or an unknown dtype", k, w[k].count);
      ok = false;
    }
  if (!ok && !P->xf_bad)
    fpi_diag_errorf(P->d, "reshard", "transform '%s': %s for param '%s' elements [%" PRId64 ",%" PRId64 "): %s",
                    P->xf->name, fn, P->xp.name, e, e + n, err[0] ? err : "failed");
  P->xf_bad |= !ok;
  return ok;
}

/* a piece through the param's transform: the sender's prep_send (FROM into
 * its wire tensors in staging) and one send per wire tensor; the
 * receiver's recv per wire tensor (prepare_recv's) into staging and, after
 * every send and recv, its finalize into TO */
static void piece_xf(planner *P, int32_t pi, int64_t src, int32_t sp, int64_t e, int64_t n, int32_t d, int64_t dst,
                     fp_dtype fdt, fp_dtype tdt) {
  fp_tx *t = P->t;
  fp_tx_wire ws[FP_TX_MAX_WIRES], wr[FP_TX_MAX_WIRES];
  int nws = 0, nwr = 0;
  if (!xf_wires(P, false, e, n, ws, &nws) || !xf_wires(P, true, e, n, wr, &nwr)) return;
  int64_t q = stage_take(P, sp, wire_span(ws, nws));
  fp_tx_op *o = fpi_tx_emit(t, FP_TX_PREP_SEND, sp, pi, tdt, n);
  o->sdtype = fdt, o->full_off = e, o->dst = ref(FP_SP_STAGE, q), o->src = ref(FP_SP_FROM, src);
  fpi_tx_set_wires(o, fpi_tx_wires_add(t, ws, nws), nws);
  for (int k = 0, at = 0; k < nws; at += (int)wire_span(&ws[k], 1), k++) {
    o = fpi_tx_emit(t, FP_TX_SEND, sp, pi, ws[k].dtype, ws[k].count);
    o->peer = d, o->full_off = e, o->src = ref(FP_SP_STAGE, q + at);
    P->load[sp] += ws[k].count * fpi_dtype_size(ws[k].dtype);
  }
  int64_t r = stage_take(P, d, wire_span(wr, nwr) + 2 * FP_TX_GUARD + (n * fpi_dtype_size(tdt) + 15) / 16 * 16);
  for (int k = 0, at = 0; k < nwr; at += (int)wire_span(&wr[k], 1), k++) {
    o = fpi_tx_emit(t, FP_TX_RECV, d, pi, wr[k].dtype, wr[k].count);
    o->peer = sp, o->full_off = e, o->dst = ref(FP_SP_STAGE, r + at);
  }
  o = late(P, FP_TX_FINALIZE, d, pi, tdt, n);
  o->sdtype = fdt, o->full_off = e, o->dst = ref(FP_SP_TO, dst), o->src = ref(FP_SP_STAGE, r);
  fpi_tx_set_wires(o, fpi_tx_wires_add(t, wr, nwr), nwr);
}

/* A piece of a param FROM keeps as MXFP8 (e4m3 elements, e8m0 scales of
 * the full param's blocks): read by dequantizing it, where the process
 * holding it as a FROM rank puts it (into TO when that process needs it,
 * else into staging, sent in TO's dtype). A slice starting inside a block
 * reads that block's scale for its head (xfer.h: the head's scale is the
 * first the op reads), so FROM's scales at e / 32 serve as they are. */
static void piece_src_mx(planner *P, int32_t pi, int64_t src, int32_t sp, int64_t e, int64_t n, int32_t d,
                         int64_t dst, fp_dtype tdt) {
  fp_tx *t = P->t;
  fp_tx_ref sc = ref(FP_SP_FROM, P->fscales + e / FP_MX_BLOCK);
  if (sp == d) {
    fp_tx_op *o = fpi_tx_emit(t, FP_TX_DEQUANT, d, pi, tdt, n);
    o->sdtype = FP_E4M3, o->full_off = e, o->dst = ref(FP_SP_TO, dst), o->src = ref(FP_SP_FROM, src), o->aux = sc;
    return;
  }
  int64_t c = stage_take(P, sp, n * fpi_dtype_size(tdt));
  fp_tx_op *o = fpi_tx_emit(t, FP_TX_DEQUANT, sp, pi, tdt, n);
  o->sdtype = FP_E4M3, o->full_off = e, o->dst = ref(FP_SP_STAGE, c), o->src = ref(FP_SP_FROM, src), o->aux = sc;
  o = fpi_tx_emit(t, FP_TX_SEND, sp, pi, tdt, n);
  o->peer = d, o->full_off = e, o->src = ref(FP_SP_STAGE, c);
  o = fpi_tx_emit(t, FP_TX_RECV, d, pi, tdt, n);
  o->peer = sp, o->full_off = e, o->dst = ref(FP_SP_TO, dst);
  P->load[sp] += n * fpi_dtype_size(tdt);
}

/* A piece of a param both plans keep as MXFP8: the e4m3 elements and the
 * scales of its blocks pass through unchanged (copied by the process
 * holding them, else sent by it as they are). Both plans keep such a param
 * whole on every rank (docs/layout.md: replicated frozen buckets), with the
 * scales of the full param's blocks, so a piece is the whole param and its
 * blocks are the same on both sides. */
static void piece_pass(planner *P, int32_t pi, int64_t src, int32_t sp, int64_t e, int64_t n, int32_t d,
                       int64_t dst) {
  fp_tx *t = P->t;
  FP_ASSERT(e % FP_MX_BLOCK == 0 && (e + n == P->knumel || (e + n) % FP_MX_BLOCK == 0));
  int64_t b0 = e / FP_MX_BLOCK, nb = (e + n + FP_MX_BLOCK - 1) / FP_MX_BLOCK - b0;
  fp_tx_ref fsc = ref(FP_SP_FROM, P->fscales + b0), tsc = ref(FP_SP_TO, P->kscales + b0);
  if (sp == d) {
    fp_tx_op *o = fpi_tx_emit(t, FP_TX_COPY, d, pi, FP_E4M3, n);
    o->full_off = e, o->dst = ref(FP_SP_TO, dst), o->src = ref(FP_SP_FROM, src);
    o = fpi_tx_emit(t, FP_TX_COPY, d, pi, FP_E8M0, nb);
    o->full_off = e, o->dst = tsc, o->src = fsc;
    return;
  }
  fp_tx_op *o = fpi_tx_emit(t, FP_TX_SEND, sp, pi, FP_E4M3, n);
  o->peer = d, o->full_off = e, o->src = ref(FP_SP_FROM, src);
  o = fpi_tx_emit(t, FP_TX_SEND, sp, pi, FP_E8M0, nb);
  o->peer = d, o->full_off = e, o->src = fsc;
  o = fpi_tx_emit(t, FP_TX_RECV, d, pi, FP_E4M3, n);
  o->peer = sp, o->full_off = e, o->dst = ref(FP_SP_TO, dst);
  o = fpi_tx_emit(t, FP_TX_RECV, d, pi, FP_E8M0, nb);
  o->peer = sp, o->full_off = e, o->dst = tsc;
  P->load[sp - t->from_offset] += n + nb;
  t->lower_bound += nb; /* (the cover counts the elements) */
}

/* one piece: n elements from flat index e, FROM run s to TO proc d at byte dst */
static void piece(planner *P, int32_t pi, const run *s, int64_t e, int64_t n, int32_t d, int64_t dst, fp_dtype fdt,
                  fp_dtype tdt) {
  fp_tx *t = P->t;
  if (P->keep) {
    piece_keep(P, pi, s, e, n, d, fdt);
    return;
  }
  int64_t src = s->byte + (e - s->a) * fpi_dtype_size(fdt);
  int32_t sp = (int32_t)(s->rank + t->from_offset); /* FROM rank r is process r + from_offset */
  if (P->pass) {
    piece_pass(P, pi, src, sp, e, n, d, dst);
    return;
  }
  if (P->src_mx) {
    piece_src_mx(P, pi, src, sp, e, n, d, dst, tdt);
    return;
  }
  if (sp == d) {
    fp_tx_op *o = fpi_tx_emit(t, FP_TX_COPY, d, pi, tdt, n);
    o->sdtype = fdt, o->full_off = e, o->dst = ref(FP_SP_TO, dst), o->src = ref(FP_SP_FROM, src);
    return;
  }
  if (P->xf) {
    piece_xf(P, pi, src, sp, e, n, d, dst, fdt, tdt);
    return;
  }
  fp_tx_ref from = ref(FP_SP_FROM, src);
  if (fdt != tdt) { /* the sender casts into staging, the wire carries TO's dtype */
    int64_t c = stage_take(P, sp, n * fpi_dtype_size(tdt));
    fp_tx_op *o = fpi_tx_emit(t, FP_TX_COPY, sp, pi, tdt, n);
    o->sdtype = fdt, o->full_off = e, o->dst = ref(FP_SP_STAGE, c), o->src = from;
    from = ref(FP_SP_STAGE, c);
  }
  fp_tx_op *o = fpi_tx_emit(t, FP_TX_SEND, sp, pi, tdt, n);
  o->peer = d, o->full_off = e, o->src = from;
  o = fpi_tx_emit(t, FP_TX_RECV, d, pi, tdt, n);
  o->peer = sp, o->full_off = e, o->dst = ref(FP_SP_TO, dst);
  P->load[sp] += n * fpi_dtype_size(tdt);
}

/* Groups: the FROM runs of one param sorted by start fall into blocks of
 * equal (start, length) - the replicas of one shard - that do not overlap
 * one another, for every placement (shard, ragged, owned, replicate, flat_shard). Then a
 * piece's candidates are one group, found by binary search, and the choice
 * looks at a window of at most WINDOW of its ranks (rotating), so the
 * planner's time grows with the pieces, not with pieces x FROM ranks. */
#define WINDOW 16
typedef struct group {
  int64_t first, n;    /* fr[first .. first+n): sorted by rank */
  int64_t cursor;      /* where the next window starts */
} group;

/* the groups of fr (sorted by start, then rank); false when runs overlap */
static bool make_groups(fp_arena *a, const run *fr, int64_t nfr, group **out, int64_t *ng) {
  group *g = fpi_alloc_array(a, (size_t)nfr + 1, sizeof *g);
  int64_t n = 0;
  for (int64_t k = 0; k < nfr; k++) {
    if (n > 0 && fr[g[n - 1].first].a == fr[k].a && fr[g[n - 1].first].len == fr[k].len) {
      g[n - 1].n++;
      continue;
    }
    if (n > 0 && fr[g[n - 1].first].a + fr[g[n - 1].first].len > fr[k].a) return false;
    g[n++] = (group){k, 1, 0};
  }
  *out = g, *ng = n;
  return true;
}

static bool cover_groups(planner *P, int32_t pi, const run *fr, group *gs, int64_t ng, int64_t a, int64_t len,
                         int32_t d, int64_t dst, fp_dtype fdt, fp_dtype tdt, int64_t *lacked) {
  int64_t e = a, end = a + len, tsz = fpi_dtype_size(tdt);
  while (e < end) {
    int64_t lo = 0, hi = ng; /* the last group starting at or before e */
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      if (fr[gs[mid].first].a <= e) lo = mid + 1;
      else hi = mid;
    }
    if (lo == 0 || fr[gs[lo - 1].first].a + fr[gs[lo - 1].first].len <= e) return false;
    group *g = &gs[lo - 1];
    int64_t stop = fr[g->first].a + fr[g->first].len;
    if (stop > end) stop = end;
    /* this process's own FROM rank, if it is in the group (sorted by rank) */
    const run *mine = NULL, *best = NULL;
    int64_t l = 0, h = g->n;
    while (l < h) {
      int64_t mid = (l + h) / 2;
      if (fr[g->first + mid].rank + P->t->from_offset < d) l = mid + 1;
      else h = mid;
    }
    if (l < g->n && fr[g->first + l].rank + P->t->from_offset == d) mine = &fr[g->first + l];
    if (!mine) {
      int64_t w = g->n < WINDOW ? g->n : WINDOW;
      for (int64_t k = 0; k < w; k++) {
        const run *s = &fr[g->first + (g->cursor + k) % g->n];
        if (!best || P->load[s->rank] < P->load[best->rank]) best = s;
      }
      g->cursor = (g->cursor + 1) % g->n;
    }
    int64_t n = stop - e;
    if (!mine) *lacked += n * tsz;
    piece(P, pi, mine ? mine : best, e, n, d, dst + (e - a) * tsz, fdt, tdt);
    e = stop;
  }
  return true;
}

/* the general case (runs that overlap without being equal): the FROM runs are sorted by start; cover TO run [a, a+len) of TO proc d */
static bool cover(planner *P, int32_t pi, const run *fr, int64_t nfr, int64_t a, int64_t len, int32_t d, int64_t dst,
                  fp_dtype fdt, fp_dtype tdt, int64_t *lacked) {
  int64_t e = a, end = a + len, tsz = fpi_dtype_size(tdt);
  while (e < end) {
    /* the runs holding e: candidates; the piece ends at the nearest boundary */
    int64_t stop = end;
    const run *best = NULL, *mine = NULL;
    for (int64_t k = 0; k < nfr && fr[k].a <= e; k++) { /* sorted: nothing later starts at or before e */
      const run *s = &fr[k];
      int64_t se = s->a + s->len;
      if (se <= e) continue;
      if (se < stop) stop = se;
      if (s->rank + P->t->from_offset == d) mine = s;
      if (!best || P->load[s->rank] < P->load[best->rank] ||
          (P->load[s->rank] == P->load[best->rank] && (s->rank - d + P->t->nprocs) % P->t->nprocs <
                                                          (best->rank - d + P->t->nprocs) % P->t->nprocs))
        best = s;
    }
    for (int64_t k = 0; k < nfr; k++) /* a run starting inside the piece ends it */
      if (fr[k].a > e && fr[k].a < stop) {
        stop = fr[k].a;
        break;
      }
    if (!best) return false;
    int64_t n = stop - e;
    if (!mine) *lacked += n * tsz;
    piece(P, pi, mine ? mine : best, e, n, d, dst + (e - a) * tsz, fdt, tdt);
    e = stop;
  }
  return true;
}

/* Cover TO run [a, a+len) of process d from d's own FROM runs (own, nown,
 * by start), which hold all of it (classes() checked): local pieces only,
 * cut at the own runs' ends; false on a gap */
static bool cover_local(planner *P, int32_t pi, const run *own, int64_t nown, int64_t a, int64_t len, int32_t d,
                        int64_t dst, fp_dtype fdt, fp_dtype tdt) {
  int64_t e = a, end = a + len, tsz = fpi_dtype_size(tdt);
  for (int64_t k = 0; k < nown && e < end; k++) {
    run s = own[k];
    s.rank = (int32_t)(d - P->t->from_offset);
    if (s.a + s.len <= e) continue;
    if (s.a > e) return false;
    int64_t stop = s.a + s.len < end ? s.a + s.len : end;
    piece(P, pi, &s, e, stop - e, d, dst + (e - a) * tsz, fdt, tdt);
    e = stop;
  }
  return e >= end;
}

/* whether own runs (by start) hold every element of [a, a+len) */
static bool holds(const run *own, int64_t nown, int64_t a, int64_t len) {
  int64_t e = a, end = a + len;
  for (int64_t k = 0; k < nown && e < end; k++) {
    if (own[k].a + own[k].len <= e) continue;
    if (own[k].a > e) return false;
    e = own[k].a + own[k].len;
  }
  return e >= end;
}

/* Shared local programs. What a process does as a receiver depends only on
 * its ranks' indices in the plans' communicators (its runs: memo_get) and
 * on which FROM ranks hold what it lacks. Where its own FROM rank holds
 * every element its TO rank needs, all it does is local copies, casts and
 * quantizes, at offsets that depend only on those indices: every process
 * with the same indices (a class) runs the same ops. The first process of
 * such a class owns the ops; the others repeat its program (fp_tx.same)
 * and get no ops, needs or have regions of their own - unless the planner
 * picks them to send to someone (plan_param phase B), then they get their
 * own copy. llama3-405b (hybrid 8) from 16,384 to 8,192 ranks is 8 classes:
 * 8 programs where there were 8,192. */
static void classes(planner *P, int64_t from_offset, int64_t to_offset) {
  fp_tx *t = P->t;
  fp_arena *a = t->arena;
  const fp_prog *pr[2] = {P->from, P->to};
  /* the communicators some param's runs depend on, per plan */
  int32_t *cm[2], nc[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    bool *used = fpi_alloc_array(a, (size_t)pr[k]->ncomms + 1, sizeof *used);
    cm[k] = fpi_alloc_array(a, (size_t)pr[k]->ncomms + 1, sizeof *cm[k]);
    for (int32_t i = 0; i < pr[k]->nparams; i++) {
      const fp_ir_param *q = &pr[k]->params[i];
      if (q->placement != FP_PL_REPLICATE && q->comm >= 0 && !used[q->comm]) used[q->comm] = true, cm[k][nc[k]++] = q->comm;
    }
  }
  int64_t K = 2 + nc[0] + nc[1], n = t->nprocs, cap = 16;
  while (cap < 2 * n) cap *= 2;
  int64_t *keys = fpi_alloc_array(a, (size_t)(n * K), sizeof *keys); /* per process; a class's is its owner's */
  int32_t *slot = fpi_alloc_array(a, (size_t)cap, sizeof *slot);
  for (int64_t k = 0; k < cap; k++) slot[k] = -1;
  P->owner = fpi_alloc_array(a, (size_t)n, sizeof *P->owner);
  P->member = fpi_alloc_array(a, (size_t)n, sizeof *P->member);
  P->local = fpi_alloc_array(a, (size_t)n, sizeof *P->local);
  for (int64_t p = 0; p < n; p++) {
    int64_t *v = keys + p * K, rk[2] = {p - from_offset, p - to_offset}, x = 0;
    for (int k = 0; k < 2; k++) {
      bool has = rk[k] >= 0 && rk[k] < pr[k]->world_size;
      v[x++] = has;
      for (int32_t c = 0; c < nc[k]; c++) v[x++] = has ? fpi_comm_index(&pr[k]->comms[cm[k][c]], rk[k]) : -1;
    }
    uint64_t h = 1469598103934665603u;
    for (int64_t k = 0; k < K; k++) h = (h ^ (uint64_t)v[k]) * 1099511628211u;
    int64_t i = (int64_t)(h & (uint64_t)(cap - 1));
    for (; slot[i] >= 0; i = (i + 1) & (cap - 1))
      if (!memcmp(keys + (int64_t)slot[i] * K, v, (size_t)K * sizeof *v)) break;
    if (slot[i] < 0) slot[i] = (int32_t)p;
    P->owner[p] = slot[i];
  }
  /* a class is local when its owner holds, as a FROM rank, every element it
   * needs as a TO rank (main weights, states, a compute weight kept whole) */
  bool *ok = fpi_alloc_array(a, (size_t)n, sizeof *ok);
  int32_t *cand = fpi_alloc_array(a, (size_t)n + 1, sizeof *cand), ncand = 0; /* the owners that hold both ranks */
  for (int64_t p = 0; p < n; p++)
    if ((ok[p] = P->owner[p] == p && p - from_offset >= 0 && p - from_offset < P->from->world_size &&
                 p - to_offset >= 0 && p - to_offset < P->to->world_size))
      cand[ncand++] = (int32_t)p;
  for (int32_t j = 0; j < P->to->nparams; j++) {
    const fp_ir_param *q = &P->to->params[j], *f = &P->from->params[P->fi[j]];
    int64_t numel = numel_of(q);
    bool persistent = q->weight.buf >= 0 && q->weight.buf != q->main.buf && P->to->bufs[q->weight.buf].kind == FP_BUF_PERSISTENT;
    for (int w = 0; w < (q->opt.buf >= 0 ? P->nstates + 1 : 1); w++) {
      hmemo fm, tm;
      memo_build(a, P->from, f, w, &fm);
      memo_build(a, P->to, q, w, &tm);
      for (int32_t c = 0; c < ncand; c++) {
        int32_t p = cand[c];
        if (!ok[p]) continue;
        const run *own, *tr;
        int64_t nown = memo_get(&fm, p - from_offset, &own), nt = memo_get(&tm, p - to_offset, &tr);
        for (int64_t k = 0; k < nt && ok[p]; k++) ok[p] = holds(own, nown, tr[k].a, tr[k].len);
        if (ok[p] && w == 0 && persistent && !(nt == 1 && tr[0].len == numel)) ok[p] = holds(own, nown, 0, numel);
      }
    }
  }
  for (int64_t p = 0; p < n; p++) {
    P->local[p] = ok[P->owner[p]];
    P->member[p] = P->local[p] && P->owner[p] != p;
  }
}

/* Plan param j (FROM's fj) part w (0: main weights; k + 1: optimizer state
 * k) for the TO processes in list: their need regions and the ops that
 * fill them. */
static bool plan_param(planner *P, int32_t j, int32_t fj, int w, const int32_t *list, int32_t nlist, fp_diag *d,
                       const char *fname) {
  fp_tx *t = P->t;
  fp_arena *a = t->arena;
  const fp_prog *from = P->from, *to = P->to;
  const fp_ir_param *q = &to->params[j], *f = &from->params[fj];
  int64_t numel = numel_of(q);
  fp_dtype fdt = w ? from->optim_dtype : f->main_dtype, tdt = w ? to->optim_dtype : q->main_dtype;
  bool keep = w == 0 && q->main_dtype == FP_E4M3;
  P->pass = keep && w == 0 && t->params[j].src_mx; /* kept as MXFP8 on both sides: passes through */
  P->keep = keep && !P->pass, P->knumel = numel;
  /* the weights only go through a transform (never optimizer state) */
  P->xf = w == 0 && t->params[j].xf >= 0 ? P->xfv[t->params[j].xf] : NULL;
  P->xp = (fpi_xf_param){q->name, numel, fdt, tdt};
  P->src_mx = w == 0 && t->params[j].src_mx;
  P->fscales = P->src_mx ? from->bufs[f->scales.buf].offset + f->scales.off : -1;
  P->kscales = keep ? to->bufs[q->scales.buf].offset + q->scales.off : -1;
  for (int64_t k = 0; k < P->kq_used; k++) P->kq[P->kq_slots[k]].proc = -1; /* a new param: empty the memo */
  P->kq_used = 0;
  hmemo fm, tm;
  memo_build(a, from, f, w, &fm);
  memo_build(a, to, q, w, &tm);
  /* FROM runs of every rank, sorted by start, and their groups: only where
   * some process receives (a local class copies from its own runs) */
  int64_t nfr = 0, ng = 0;
  group *gs = NULL;
  bool grouped = false, built = false;
  bool persistent = w == 0 && q->weight.buf >= 0 && q->weight.buf != q->main.buf &&
                    to->bufs[q->weight.buf].kind == FP_BUF_PERSISTENT; /* (one copy: the main weight itself) */
  int64_t wbase = persistent ? to->bufs[q->weight.buf].offset + q->weight.off : -1;
  for (int32_t li = 0; li < nlist; li++) {
    int32_t dp = list[li];
    if (!P->local[dp] && !built) {
      for (int64_t r = 0; r < from->world_size; r++) {
        const run *mr;
        int64_t got = memo_get(&fm, r, &mr);
        P->fr = fpi_grow_raw(a, P->fr, &P->cap_fr, nfr + got + 1, sizeof *P->fr);
        for (int64_t k = 0; k < got; k++) P->fr[nfr + k] = mr[k], P->fr[nfr + k].rank = (int32_t)r;
        nfr += got;
      }
      fpi_sort_records(P->fr, sizeof *P->fr, nfr, 1, run_start);
      grouped = make_groups(a, P->fr, nfr, &gs, &ng);
      built = true;
    }
    const run *own = NULL;
    int64_t nown = P->local[dp] ? memo_get(&fm, dp - t->from_offset, &own) : 0;
#define COVER(A, LEN, DST, TDT)                                                                                  \
  (P->local[dp] ? cover_local(P, j, own, nown, (A), (LEN), dp, (DST), fdt, (TDT))                          \
   : grouped    ? cover_groups(P, j, P->fr, gs, ng, (A), (LEN), dp, (DST), fdt, (TDT), &t->lower_bound) \
                : cover(P, j, P->fr, nfr, (A), (LEN), dp, (DST), fdt, (TDT), &t->lower_bound))
    const run *tr;
    int64_t got = memo_get(&tm, dp - t->to_offset, &tr);
    bool full = got == 1 && tr[0].len == numel;
    if (keep) { /* one run, the whole param (replicated), then its scales */
      FP_ASSERT(full);
      P->kdata = tr[0].byte, P->klast = -1;
      fpi_tx_region_add(t, true, dp, j, P->kscales, fpi_mx_blocks(numel), 0, FP_E8M0);
    }
    for (int64_t k = 0; k < got; k++) {
      int64_t bytes = tr[k].len * fpi_dtype_size(tdt);
      fpi_tx_region_add(t, true, dp, j, tr[k].byte, bytes, tr[k].a, tdt);
      if (!COVER(tr[k].a, tr[k].len, tr[k].byte, tdt)) {
        fpi_diag_errorf(d, fname, "param '%s': elements from %" PRId64 " are held by no rank of the plan", q->name,
                       tr[k].a);
        return false;
      }
    }
    if (!persistent) continue;
    /* the compute weight the TO plan keeps unsharded between steps */
    fpi_tx_region_add(t, true, dp, j, wbase, numel * fpi_dtype_size(q->param_dtype), 0, q->param_dtype);
    if (full) { /* derived from the new main weights, as the plan's own refresh does */
      fp_tx_op *c = late(P, FP_TX_COPY, dp, j, q->param_dtype, numel);
      c->sdtype = q->main_dtype, c->dst = ref(FP_SP_TO, wbase), c->src = ref(FP_SP_TO, tr[0].byte);
    } else if (!COVER(0, numel, wbase, q->param_dtype)) {
      fpi_diag_errorf(d, fname, "param '%s' is not held whole by the ranks of the plan", q->name);
      return false;
    }
#undef COVER
  }
  if (P->keep) split_blocks(P, j, fdt);
  return true;
}

/* The FROM bytes each process may read (rule X5): the runs its FROM rank
 * holds, for the processes with ops that read FROM (a process that repeats
 * another's program reads what the owner's have regions say; one that only
 * holds bytes nobody asks for needs none) */
static void add_haves(planner *P) {
  fp_tx *t = P->t;
  int32_t *reads = fpi_alloc_array(t->arena, (size_t)t->nprocs + 1, sizeof *reads), nr = 0;
  bool *seen = fpi_alloc_array(t->arena, (size_t)t->nprocs + 1, sizeof *seen);
  for (int32_t i = 0; i < t->nops; i++) {
    const fp_tx_op *o = &t->ops[i];
    if (o->src.space == FP_SP_FROM && !seen[o->proc]) seen[o->proc] = true, reads[nr++] = o->proc;
  }
  for (int32_t j = 0; j < P->to->nparams && nr > 0; j++) {
    const fp_ir_param *q = &P->to->params[j], *f = &P->from->params[P->fi[j]];
    for (int w = 0; w < (q->opt.buf >= 0 ? P->nstates + 1 : 1); w++) {
      fp_dtype fdt = w ? P->from->optim_dtype : f->main_dtype;
      hmemo fm;
      memo_build(t->arena, P->from, f, w, &fm);
      t->plane = w;
      for (int32_t k = 0; k < nr; k++) {
        const run *mr;
        int64_t got = memo_get(&fm, reads[k] - t->from_offset, &mr);
        for (int64_t x = 0; x < got; x++)
          fpi_tx_region_add(t, false, reads[k], j, mr[x].byte, mr[x].len * fpi_dtype_size(fdt), mr[x].a, fdt);
        if (w == 0 && fdt == FP_E4M3 && got > 0) /* kept as MXFP8: its scales too, which a dequantize reads */
          fpi_tx_region_add(t, false, reads[k], j, P->from->bufs[f->scales.buf].offset + f->scales.off,
                            fpi_mx_blocks(numel_of(f)), 0, FP_E8M0);
      }
      t->plane = 0;
    }
  }
}

/* the two plans and where their errors are located */
typedef struct rsrc {
  const fp_src *fs, *ts;
  const char *fname, *tname;
} rsrc;

#define ERR_AT(src, name, ptr, ...) \
  ((src) ? fpi_diag_json(d, (src), (ptr), __VA_ARGS__) : fpi_diag_errorf(d, (name), __VA_ARGS__))

/* the options against the two plans (what moves, the offsets, tp, the
 * model): the optimizer states moved per trainable param (0: weights only);
 * errors on d */
static int check_options(const fp_prog *from, const fp_prog *to, const rsrc *S, const fp_reshard_opts *o, fp_diag *d) {
  const fp_src *fs = S->fs, *ts = S->ts;
  const char *fname = S->fname, *tname = S->tname;
  const char *what = o->what ? o->what : "weights";
  int nstates = 0;
  if (strcmp(what, "weights") == 0) {
  } else if (strcmp(what, "weights+optimizer") == 0) {
    if (from->optim == FP_OPTIM_NONE || to->optim == FP_OPTIM_NONE)
      ERR_AT(from->optim == FP_OPTIM_NONE ? fs : ts, from->optim == FP_OPTIM_NONE ? fname : tname, "",
             "--what weights+optimizer: the plan holds no optimizer state (compiled with \"optimizer\": "
             "{\"type\": \"none\"}); compile both plans with the trainer's optimizer");
    else if (from->optim != to->optim)
      ERR_AT(ts, tname, "/optimizer/type", "--what weights+optimizer: this plan holds %s state and %s holds %s: "
             "state moves only between plans of one optimizer", fpi_optim_name(to->optim), fname,
             fpi_optim_name(from->optim));
    else
      nstates = fpi_optim_states(to->optim);
  } else {
    fpi_diag_errorf(d, "reshard", "--what '%s': expected weights or weights+optimizer", what);
  }
  if (o->to_offset < 0 || o->to_offset > from->world_size + o->from_offset)
    fpi_diag_errorf(d, "reshard", "--to-offset %" PRId64 ": must lie in [0, %" PRId64 "] (after FROM's last rank at most)",
                   o->to_offset, from->world_size + o->from_offset);
  if (o->from_offset < 0 || o->from_offset > to->world_size + o->to_offset)
    fpi_diag_errorf(d, "reshard", "--from-offset %" PRId64 ": must lie in [0, %" PRId64 "] (after TO's last rank at most)",
                   o->from_offset, to->world_size + o->to_offset);
  /* a tp-local slice is another tensor on every tp index: the transfer
   * planner maps whole params between dp layouts only */
  if (from->tp > 1 || to->tp > 1)
    ERR_AT(from->tp > 1 ? fs : ts, from->tp > 1 ? fname : tname, "/tp",
           "the plan has a tp dimension (tp %" PRId64 "): resharding between plans with tensor parallelism is not "
           "supported yet; move the weights through a checkpoint (flexplan.torch state_dict / DCP)",
           from->tp > 1 ? from->tp : to->tp);
  if (strcmp(from->model ? from->model : "", to->model ? to->model : "") != 0)
    ERR_AT(ts, tname, "/model", "the plans are of different models: '%s' (%s) and '%s'", from->model ? from->model : "",
           fname, to->model ? to->model : "");
  return nstates;
}

/* TO param q (index j) against its FROM param f (index fj): the same shape,
 * main weights in both, on the device, trainable in both where optimizer
 * state moves; errors on d */
static void check_pair(const fp_ir_param *q, int32_t j, const fp_ir_param *f, int32_t fj, const fp_prog *from,
                       const fp_prog *to, const rsrc *S, int nstates, fp_diag *d) {
  const fp_src *fs = S->fs, *ts = S->ts;
  const char *fname = S->fname, *tname = S->tname;
  char ptr[64];
  bool same = f->ndim == q->ndim;
  for (int k = 0; same && k < q->ndim; k++) same = f->shape[k] == q->shape[k];
  if (!same) {
    char sf[128], st[128];
    int x = 0, y = 0;
    for (int k = 0; k < f->ndim && x < 100; k++) x += snprintf(sf + x, sizeof sf - (size_t)x, "%s%" PRId64, k ? "," : "", f->shape[k]);
    for (int k = 0; k < q->ndim && y < 100; k++) y += snprintf(st + y, sizeof st - (size_t)y, "%s%" PRId64, k ? "," : "", q->shape[k]);
    sf[x] = st[y] = 0;
    snprintf(ptr, sizeof ptr, "/params/%d/shape", j);
    ERR_AT(ts, tname, ptr, "param '%s' has shape [%s] here and [%s] in %s", q->name, st, sf, fname);
  }
  if (q->main.buf < 0 || f->main.buf < 0) {
    snprintf(ptr, sizeof ptr, "/params/%d", j);
    ERR_AT(ts, tname, ptr, "param '%s' has no main weights in one of the plans", q->name);
  }
  if ((q->main.buf >= 0 && to->bufs[q->main.buf].host) || (f->main.buf >= 0 && from->bufs[f->main.buf].host)) {
    bool here = q->main.buf >= 0 && to->bufs[q->main.buf].host;
    snprintf(ptr, sizeof ptr, "/params/%d", here ? j : fj);
    ERR_AT(here ? ts : fs, here ? tname : fname, ptr,
           "param '%s' is offloaded (its main weights are in host memory): transfers move device arenas only",
           q->name);
  }
  if (nstates && (q->opt.buf >= 0) != (f->opt.buf >= 0)) {
    snprintf(ptr, sizeof ptr, "/params/%d/requires_grad", j);
    ERR_AT(ts, tname, ptr, "param '%s' is %s here and %s in %s: its optimizer state cannot move", q->name,
           q->requires_grad ? "trainable" : "frozen", f->requires_grad ? "trainable" : "frozen", fname);
  }
}

/* params by name (a name map: DeepSeek-V3's 45,000 params compared by
 * scanning were two thirds of its transfer's compile): every TO param must
 * be a FROM param of the same shape (check_pair), and every FROM param a TO
 * param. FROM's index of each TO param (-1: none); errors on d */
static int32_t *match_params(fp_arena *a, const fp_prog *from, const fp_prog *to, const rsrc *S, int nstates,
                             fp_diag *d) {
  int32_t *fi = fpi_alloc_array(a, (size_t)to->nparams + 1, sizeof *fi);
  bool *matched = fpi_alloc_array(a, (size_t)from->nparams + 1, sizeof *matched);
  fp_namemap names;
  fpi_namemap_init(&names, a, from->nparams);
  for (int32_t i = 0; i < from->nparams; i++) fpi_namemap_put(&names, from->params[i].name, i);
  for (int32_t j = 0; j < to->nparams; j++) {
    const fp_ir_param *q = &to->params[j];
    fi[j] = fpi_namemap_get(&names, q->name, strlen(q->name));
    if (fi[j] < 0) fi[j] = -1; /* (a plan's names are unique: the verifier checks) */
    else matched[fi[j]] = true;
    if (fi[j] >= 0) {
      check_pair(q, j, &from->params[fi[j]], fi[j], from, to, S, nstates, d);
    } else {
      char ptr[64];
      snprintf(ptr, sizeof ptr, "/params/%d/name", j);
      ERR_AT(S->ts, S->tname, ptr, "param '%s' is not in %s", q->name, S->fname);
    }
  }
  for (int32_t i = 0; i < from->nparams; i++) {
    if (!matched[i]) {
      char ptr[64];
      snprintf(ptr, sizeof ptr, "/params/%d/name", i);
      ERR_AT(S->fs, S->fname, ptr, "param '%s' is not in %s", from->params[i].name, S->tname);
    }
  }
  /* operands are packed (xfer.h fp_tx_ref): arenas, and the staging that is
   * at most about TO's, stay below half of FP_TX_OFF_LIMIT */
  for (int k = 0; k < 2; k++) {
    const fp_prog *p = k ? to : from;
    if (p->arena_bytes >= FP_TX_OFF_LIMIT / 2)
      ERR_AT(k ? S->ts : S->fs, k ? S->tname : S->fname, "/arena_bytes",
             "an arena of %" PRId64 " bytes per rank: a transfer addresses arenas of less than 2^58 bytes (256 PiB)",
             p->arena_bytes);
  }
  return fi;
}
#undef ERR_AT

/* the transfer's transforms so far (t->xf_names in order) */
typedef struct xflist {
  const fpi_xform **v;
  int32_t n;
} xflist;

/* x's index among the transfer's transforms, added on first use */
static int32_t xf_use(fp_tx *t, xflist *L, const fpi_xform *x) {
  for (int32_t k = 0; k < L->n; k++)
    if (L->v[k] == x) return k;
  L->v[L->n] = x;
  t->xf_names[L->n] = x->name;
  t->nxf = ++L->n;
  return L->n - 1;
}

/* the transform a "PATTERN=NAME" rule names (a built-in, else one of the
 * caller's), with its pattern; NULL after an error listing the known names */
static const fpi_xform *rule_xform(const fp_reshard_opts *o, const char *rule, char *pat, size_t cap, fp_diag *d) {
  const char *eq = strrchr(rule, '=');
  if (!eq || eq == rule || !eq[1] || (size_t)(eq - rule) >= cap) {
    fpi_diag_errorf(d, "reshard", "--transform '%s': expected PATTERN=NAME (NAME one of %s%s)", rule,
                    FPI_XF_BUILTIN_NAMES, o->xf && o->xf->n ? " or a registered transform's name" : "");
    return NULL;
  }
  memcpy(pat, rule, (size_t)(eq - rule));
  pat[eq - rule] = 0;
  const char *name = eq + 1;
  const fpi_xform *x = fpi_xf_builtin_shapes(name);
  for (int k = 0; !x && o->xf && k < o->xf->n; k++)
    if (!strcmp(o->xf->v[k]->name, name)) x = o->xf->v[k];
  if (x) return x;
  fp_sbuf b = {0};
  for (int k = 0; o->xf && k < o->xf->n; k++) fpi_sb_puts(&b, ", "), fpi_sb_puts(&b, o->xf->v[k]->name);
  fpi_diag_errorf(d, "reshard", "--transform '%s': unknown transform '%s' (known: %s%s%s)", rule, name,
                  FPI_XF_BUILTIN_NAMES, b.p ? b.p : "", o->xf && o->xf->n ? "" : "; a plug-in is known once "
                  "registered with fp_transform_set_add and passed in fp_reshard_options.transforms");
  free(b.p);
  return NULL;
}

/* Each TO param's transform: none where FROM keeps it as MXFP8 (read by
 * dequantizing) or TO does (MXFP8 straight into its buffers); else the
 * first rule whose pattern matches it, if that transform takes it
 * (should_transform); else the first of the caller's transforms that
 * takes it. false after an error (a bad rule, reported once) */
static bool assign_transforms(fp_tx *t, const fp_prog *from, const fp_prog *to, const int32_t *fi,
                              const fp_reshard_opts *o, const fpi_xform ***out, fp_diag *d) {
  fp_arena *a = t->arena;
  int nr = o->nmxfp8 + o->nrules, nxf = o->xf ? o->xf->n : 0;
  const fpi_xform **rx = fpi_alloc_array(a, (size_t)nr + 1, sizeof *rx);
  char **rp = fpi_alloc_array(a, (size_t)nr + 1, sizeof *rp);
  bool ok = true;
  for (int k = 0; k < nr; k++) {
    if (k < o->nmxfp8) {
      rx[k] = fpi_xf_builtin_shapes("mxfp8"), rp[k] = fpi_strndup(a, o->mxfp8[k], strlen(o->mxfp8[k]));
      continue;
    }
    const char *rule = o->rules[k - o->nmxfp8];
    rp[k] = fpi_alloc(a, strlen(rule) + 1);
    ok &= (rx[k] = rule_xform(o, rule, rp[k], strlen(rule) + 1, d)) != NULL;
  }
  if (!ok) return false;
  xflist L = {fpi_alloc_array(a, (size_t)(nr + nxf) + 1, sizeof *L.v), 0};
  t->xf_names = fpi_alloc_array(a, (size_t)(nr + nxf) + 1, sizeof *t->xf_names);
  for (int32_t j = 0; j < to->nparams; j++) {
    const fp_ir_param *q = &to->params[j], *f = &from->params[fi[j]];
    if (t->params[j].mxfp8 || t->params[j].src_mx) continue;
    fpi_xf_param xp = {q->name, numel_of(q), f->main_dtype, q->main_dtype};
    int k = 0;
    while (k < nr && fnmatch(rp[k], q->name, 0) != 0) k++;
    if (k < nr) {
      if (rx[k]->should(rx[k]->ctx, &xp)) t->params[j].xf = xf_use(t, &L, rx[k]);
      continue;
    }
    for (k = 0; k < nxf && t->params[j].xf < 0; k++)
      if (o->xf->v[k]->should(o->xf->v[k]->ctx, &xp)) t->params[j].xf = xf_use(t, &L, o->xf->v[k]);
  }
  *out = L.v;
  return true;
}

/* the transfer's header (hashes, worlds, offsets, processes) and its
 * params: MXFP8 straight into TO's buffers where TO keeps a param so, read
 * by dequantizing where FROM does */
static fp_tx *tx_header(fp_arena *a, const fp_prog *from, const fp_prog *to, const int32_t *fi, const fp_reshard_opts *o,
                        int nstates) {
  fp_tx *t = fpi_tx_new(a);
  t->model = to->model;
  t->what = nstates ? "weights+optimizer" : "weights";
  t->from_hash = fpi_prog_hash(from), t->to_hash = fpi_prog_hash(to);
  t->from_world = from->world_size, t->to_world = to->world_size, t->to_offset = o->to_offset;
  t->from_offset = o->from_offset;
  t->nprocs = o->from_offset + from->world_size > o->to_offset + to->world_size ? o->from_offset + from->world_size
                                                                                 : o->to_offset + to->world_size;
  t->from_arena = from->arena_bytes, t->to_arena = to->arena_bytes;
  t->params = fpi_alloc_array(a, (size_t)to->nparams + 1, sizeof *t->params);
  t->nparams = to->nparams;
  t->cap_params = to->nparams + 1;
  for (int32_t j = 0; j < to->nparams; j++) {
    const fp_ir_param *q = &to->params[j];
    bool src_mx = from->params[fi[j]].main_dtype == FP_E4M3;
    t->params[j] = (fp_tx_param){q->name, numel_of(q), !src_mx && q->main_dtype == FP_E4M3, src_mx, -1};
  }
  return t;
}

/* After phase A every op is an owner's local work or a send, recv or
 * sender-side cast: a process with ops other than its own local work
 * sends. The members of a shared class chosen as senders leave it (their
 * own program), and where a class's owner sends, the first member that
 * does not takes the class over (a repeated program has no send). The
 * processes of phase B into list; their count */
static int32_t unshare_senders(planner *P, int32_t *list) {
  fp_tx *t = P->t;
  bool *sends = fpi_alloc_array(t->arena, (size_t)t->nprocs + 1, sizeof *sends);
  int32_t *heir = fpi_alloc_array(t->arena, (size_t)t->nprocs + 1, sizeof *heir); /* per owner: the member taking over */
  for (int32_t i = 0; i < t->nops; i++)
    if (P->member[t->ops[i].proc] || t->ops[i].kind == FP_TX_SEND || t->ops[i].kind == FP_TX_RECV)
      sends[t->ops[i].proc] = true;
  for (int r = 0; r < 4; r++) /* (a split block's exchange: sends, recvs and local work with them) */
    for (int64_t i = 0; i < P->npre[r]; i++) sends[P->pre[r][i].proc] = true;
  for (int64_t p = 0; p < t->nprocs; p++) heir[p] = -1;
  int32_t nlist = 0;
  for (int64_t p = 0; p < t->nprocs; p++) {
    if (!P->member[p]) continue;
    int32_t ow = P->owner[p];
    if (sends[p] || (sends[ow] && heir[ow] < 0)) { /* its own program: it sends, or it is the heir */
      if (!sends[p]) heir[ow] = (int32_t)p;
      P->member[p] = 0, list[nlist++] = (int32_t)p;
    } else if (sends[ow]) {
      P->owner[p] = heir[ow];
    }
  }
  return nlist;
}

/* The params' pieces over the TO processes in two phases: A, every TO
 * process that owns its program (the senders are chosen here); B, the
 * processes unshare_senders takes out of their classes. false after
 * reporting on d */
static bool plan_phases(planner *P, const fp_reshard_opts *o, fp_diag *d, const char *fname) {
  fp_tx *t = P->t;
  const fp_prog *to = P->to;
  int32_t *list = fpi_alloc_array(t->arena, (size_t)t->nprocs + 1, sizeof *list), nlist = 0;
  for (int64_t r = 0; r < to->world_size; r++)
    if (!P->member[r + o->to_offset]) list[nlist++] = (int32_t)(r + o->to_offset);
  for (int phase = 0; phase < 2; phase++) {
    if (phase == 1 && (nlist = unshare_senders(P, list)) == 0) break;
    for (int32_t j = 0; j < to->nparams; j++) {
      const fp_ir_param *q = &to->params[j];
      /* the main weights, then (weights+optimizer) each optimizer state: the
       * same elements in other buffers, never transformed */
      for (int w = 0; w < (q->opt.buf >= 0 ? P->nstates + 1 : 1); w++) {
        t->plane = w; /* (its ops and regions are of this plane) */
        bool ok = plan_param(P, j, P->fi[j], w, list, nlist, d, fname);
        t->plane = 0;
        if (!ok) return false;
      }
    }
  }
  for (int64_t p = 0; p < t->nprocs; p++) t->same[p] = P->member[p] ? P->owner[p] : -1;
  return true;
}

/* every process's order: the exchange rounds, the ops emitted in place
 * (sends, recvs, local copies and sender-side work), then the late ones
 * (fpi_tx_finish sorts by process, stably); the staging sizes */
static void order_ops(planner *P) {
  fp_tx *t = P->t;
  int64_t npre = 0, nmain = t->nops;
  for (int r = 0; r < 4; r++) npre += P->npre[r];
  FP_ASSERT(npre + nmain + P->nlate < INT32_MAX);
  t->ops = fpi_grow(t->arena, t->ops, &t->cap_ops, npre + nmain + P->nlate + 1, sizeof *t->ops);
  if (npre) { /* the rounds in front (in place: a transfer may have tens of millions of ops) */
    memmove(t->ops + npre, t->ops, (size_t)nmain * sizeof *t->ops);
    for (int r = 0, at = 0; r < 4; at += (int)P->npre[r], r++)
      if (P->npre[r]) memcpy(t->ops + at, P->pre[r], (size_t)P->npre[r] * sizeof *t->ops);
  }
  if (P->nlate) memcpy(t->ops + npre + nmain, P->late, (size_t)P->nlate * sizeof *t->ops);
  t->nops = (int32_t)(npre + nmain + P->nlate);
  for (int64_t p = 0; p < t->nprocs; p++)
    if (t->same[p] >= 0) P->stage[p] = P->stage[t->same[p]];
  t->stage_bytes = P->stage;
  for (int64_t p = 0; p < t->nprocs; p++) FP_ASSERT(P->stage[p] < FP_TX_OFF_LIMIT);
}

fp_tx *fpi_reshard(fp_arena *a, const fp_prog *from, const fp_src *fs, const fp_prog *to, const fp_src *ts,
                  const fp_reshard_opts *o, fp_diag *d) {
  int errs = d->nerrors;
  rsrc S = {fs, ts, fs ? fs->path : "<from>", ts ? ts->path : "<to>"};
  int nstates = check_options(from, to, &S, o, d);
  if (d->nerrors > errs) return NULL;
  int32_t *fi = match_params(a, from, to, &S, nstates, d);
  if (d->nerrors > errs) return NULL;

  fp_tx *t = tx_header(a, from, to, fi, o, nstates);
  planner P = {.t = t, .from = from, .to = to, .fi = fi, .nstates = nstates, .d = d};
  if (!assign_transforms(t, from, to, fi, o, &P.xfv, d)) return NULL;
  t->same = fpi_alloc_array(a, (size_t)t->nprocs, sizeof *t->same);
  P.load = fpi_alloc_array(a, (size_t)t->nprocs, sizeof *P.load);
  P.stage = fpi_alloc_array(a, (size_t)t->nprocs, sizeof *P.stage);
  classes(&P, o->from_offset, o->to_offset);
  if (!plan_phases(&P, o, d, S.fname) || P.xf_bad) return NULL;
  order_ops(&P);
  add_haves(&P);
  fpi_tx_finish(t);
  return t;
}
