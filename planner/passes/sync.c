/* sync.c - the sync pass: the record/wait edges the program needs, and no
 * others.
 *
 * Runs last, once every buffer has its arena offset. It walks the step twice
 * (the executor replays it) with a vector clock per stream and, per arena
 * byte and stream, the clocks of the last read and write (ir/access.c says
 * what each op touches; buffers that share arena bytes conflict; the bytes'
 * clocks are a segment tree, fp_alias_clocks, so a walk is O(accesses *
 * log buffers) however many buffers reuse the same bytes). An op that
 * reads what another stream wrote, or writes what another stream read or
 * wrote, without a happens-before edge gets a `wait` right before it on an
 * event recorded right after the other stream's op - as late as possible, so
 * overlap is kept. When one op needs several streams, a wait implied by
 * another is dropped. Conflicts that only exist from one step into the next
 * (the optimizer's writes against the next step's gathers) get a wait at the
 * end of the step. So every wait orders some conflicting pair nothing else
 * orders: deleting any one makes the verifier's race rule fail.
 *
 * Each wait is also marked by what it orders: a conflict of a buffer with
 * itself (a reduction reading the grads the backward wrote), which every
 * placement of the same lowering has, or only accesses of buffers that
 * share bytes, which another placement may not (fp_pass_ctx.reuse_waits:
 * the candidate search asks whether a reuse of bytes holds the modeled
 * step back before it tries to place the buffers apart).
 *
 * Details that keep the edges honest:
 *  - a grouped call (coalesce) is issued as one: its waits go before its
 *    first op, and a record after any of its ops goes after its last;
 *  - a compute op stands for the trainer's work after its segment, so a
 *    record after it is the first op of the next segment. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "../sync.h"

enum {
  ANALYZE, /* decide the waits (step 1) and the end-of-step waits (step 2) */
  CHECK,   /* count the conflicts the decided waits leave unordered */
};

enum {
  STREAM = 0x3f,  /* sctx.info: the op's stream */
  COMPUTE = 0x40, /* sctx.info: the op is a compute op */
  OPENS = 0x80,   /* sctx.info: the op opens its group (or is alone) */
};
_Static_assert(FP_NSTREAMS <= STREAM + 1, "a stream fits sctx.info");

typedef struct sctx {
  const fp_prog *P;
  int32_t n;
  fp_alias_clocks al; /* per byte and stream: the clocks of the last write / read */
  int32_t *clkop[FP_NSTREAMS]; /* per stream: the op that ticked its clock to each value */
  fp_access *acc;    /* every op's accesses (fpi_op_accesses), op i's at acc[afirst[i] .. afirst[i + 1]) */
  int32_t *afirst;
  int32_t *glast;                        /* per op: last op of its group (itself) */
  uint8_t *info;                         /* per op: its stream, and OPENS when it opens its group
                                          * (the walks read these, not the 152-byte ops) */
  int32_t (*wp)[FP_NSTREAMS];            /* per op: producer op waited for, per stream; -1 */
  uint8_t *wreuse;                       /* per op: bit t when its wait on t orders only a reuse
                                          * of bytes (no conflict of a buffer with itself as late) */
  uint8_t endreuse[FP_NSTREAMS][FP_NSTREAMS]; /* the same for endw[s][t] */
  /* per buffer: the clocks of its own last write / read per stream (the
   * alias clocks give the latest over every buffer sharing its bytes) */
  int64_t (*own)[2][FP_NSTREAMS];
  int32_t endw[FP_NSTREAMS][FP_NSTREAMS]; /* end of step: stream s waits for op endw[s][t] on t */
  /* per op and step: its stream's clock after it. A clock counts a
   * stream's ops over two steps, at most 2 * ops (asserted below INT32_MAX):
   * 32 bits, half the memory of the int64_t clocks the walk keeps */
  int32_t (*snap)[2][FP_NSTREAMS];
  bool has_ops[FP_NSTREAMS]; /* the streams that run some op */
} sctx;

static void join(int64_t *vc, const int32_t *o) {
  for (int t = 0; t < FP_NSTREAMS; t++)
    if (o[t] > vc[t]) vc[t] = o[t];
}

/* op i opens its group (or is alone): the ops of a grouped call are consecutive */
static bool group_first(const fp_prog *P, int32_t i) {
  return !(i > 0 && P->ops[i].group >= 0 && P->ops[i - 1].group == P->ops[i].group);
}

/* the clock an event recorded right after producer p carries: the
 * snapshot after p's group, in this step when that lies before op i, else in
 * the previous one (none in step 1: a wait on an event never recorded is a
 * no-op) */
static const int32_t *rec_clock(const sctx *c, int32_t p, int32_t i, int step) {
  int32_t q = c->glast[p];
  if (q < i) return c->snap[q][step - 1];
  return step == 2 ? c->snap[q][0] : NULL;
}

/* walk's steps for an op (group) i on stream s that opens its group: the
 * waits decided before it joined (join_waits), what it needs from the
 * other streams (needed_from), and the waits chosen for that (choose_waits) */
static void join_waits(const sctx *c, int32_t i, int step, int64_t *vc) {
  for (int t = 0; t < FP_NSTREAMS; t++)
    if (c->wp[i][t] >= 0) {
      const int32_t *o = rec_clock(c, c->wp[i][t], i, step);
      if (o) join(vc, o);
    }
}

/* per other stream t: the latest clock of a conflicting access (need[t])
 * not yet ordered before the group, and its op (needop[t], -1: none);
 * true when any */
static bool needed_from(sctx *c, int32_t i, int s, const int64_t *vc, int64_t need[FP_NSTREAMS],
                        int32_t needop[FP_NSTREAMS], uint8_t *reuse) {
  int64_t self[FP_NSTREAMS]; /* the latest of those conflicts that are a buffer's with itself */
  for (int t = 0; t < FP_NSTREAMS; t++) need[t] = self[t] = 0, needop[t] = -1;
  for (int32_t j = i; j <= c->glast[i]; j++) {
    for (int32_t k = c->afirst[j]; k < c->afirst[j + 1]; k++) {
      const fp_access *x = &c->acc[k];
      int64_t w[FP_NSTREAMS], r[FP_NSTREAMS];
      fpi_alias_clocks_max(&c->al, x->buf, s, w, r);
      const int64_t *ow = c->own[x->buf][0], *orr = c->own[x->buf][1];
      for (int t = 0; t < FP_NSTREAMS; t++) {
        if (t == s) continue;
        if (w[t] > vc[t] && w[t] > need[t]) need[t] = w[t], needop[t] = c->clkop[t][w[t]];
        if (x->write && r[t] > vc[t] && r[t] > need[t]) need[t] = r[t], needop[t] = c->clkop[t][r[t]];
        if (ow[t] > self[t]) self[t] = ow[t];
        if (x->write && orr[t] > self[t]) self[t] = orr[t];
      }
    }
  }
  bool any = false;
  *reuse = 0;
  for (int t = 0; t < FP_NSTREAMS; t++) {
    any |= needop[t] >= 0;
    if (needop[t] >= 0 && self[t] < need[t]) *reuse |= (uint8_t)(1u << t);
  }
  return any;
}

/* the waits for what is needed, but for a stream another chosen wait
 * already covers: before the group in step 1, at the end of the step for
 * a producer of the previous step */
static void choose_waits(sctx *c, int32_t i, int s, int step, int64_t *vc, const int64_t need[FP_NSTREAMS],
                         int32_t needop[FP_NSTREAMS], uint8_t reuse) {
  const int32_t *clock[FP_NSTREAMS] = {0};
  for (int t = 0; t < FP_NSTREAMS; t++)
    if (needop[t] >= 0) {
      clock[t] = rec_clock(c, needop[t], i, step);
      FP_ASSERT(clock[t]); /* step 1 conflicts come from earlier ops */
    }
  for (int t = 0; t < FP_NSTREAMS; t++)
    for (int u = 0; u < FP_NSTREAMS && needop[t] >= 0; u++)
      if (u != t && needop[u] >= 0 && clock[u][t] >= need[t]) needop[t] = -1;
  for (int t = 0; t < FP_NSTREAMS; t++) {
    if (needop[t] < 0) continue;
    if (step == 1) {
      c->wp[i][t] = needop[t];
      c->wreuse[i] |= reuse & (1u << t);
    } else {
      /* from the previous step only: wait at the end of the step for
       * the latest such producer */
      int32_t *e = &c->endw[s][t];
      if (*e < 0 || c->snap[c->glast[*e]][0][t] < clock[t][t]) *e = needop[t], c->endreuse[s][t] = (reuse >> t) & 1;
    }
    join(vc, clock[t]);
  }
}

/* op i ticks its stream: its clock op, snapshot and accesses noted */
static void tick(sctx *c, int32_t i, int s, int step, int64_t *vc) {
  vc[s]++;
  c->clkop[s][vc[s]] = i;
  for (int t = 0; t < FP_NSTREAMS; t++) c->snap[i][step - 1][t] = (int32_t)vc[t];
  for (int32_t k = c->afirst[i]; k < c->afirst[i + 1]; k++) {
    const fp_access *x = &c->acc[k];
    fpi_alias_clocks_note(&c->al, x->buf, s, x->read, x->write, vc[s]);
    if (x->write) c->own[x->buf][0][s] = vc[s];
    if (x->read) c->own[x->buf][1][s] = vc[s];
  }
}

/* one walk over two steps: ANALYZE decides waits; CHECK counts conflicts
 * left unordered by the waits decided so far */
static int64_t walk(sctx *c, int mode) {
  int64_t vc[FP_NSTREAMS][FP_NSTREAMS];
  memset(vc, 0, sizeof vc);
  fpi_alias_clocks_reset(&c->al);
  memset(c->own, 0, (size_t)c->P->nbufs * sizeof *c->own);
  int64_t unordered = 0;
  /* step 2 as the verifier walks it (ir/verify.c walk_clocks): once stream
   * s has seen all of step 1, an op on s conflicts with no step-1 access,
   * and step 1's waits order its step-2 conflicts as they did there, so it
   * needs nothing; its clock, snapshot and notes still feed the streams not
   * synced yet, and once every stream with ops is, the walk ends */
  int64_t step1end[FP_NSTREAMS];
  bool synced[FP_NSTREAMS];
  int unsynced = 0;
  for (int step = 1; step <= 2; step++) {
    if (step == 2)
      for (int t = 0; t < FP_NSTREAMS; t++) {
        step1end[t] = vc[t][t];
        synced[t] = !c->has_ops[t];
        unsynced += !synced[t];
      }
    for (int32_t i = 0; i < c->n; i++) {
      int s = c->info[i] & STREAM;
      bool opens = c->info[i] & OPENS;
      if (step == 2 && !unsynced) break;
      if (opens) {
        join_waits(c, i, step, vc[s]);
        if (step == 2 && !synced[s]) {
          bool all = true;
          for (int t = 0; t < FP_NSTREAMS; t++) all &= vc[s][t] >= step1end[t];
          if (all) synced[s] = true, unsynced--;
        }
      }
      int64_t need[FP_NSTREAMS];
      int32_t needop[FP_NSTREAMS];
      uint8_t reuse;
      if (opens && !(step == 2 && synced[s]) && needed_from(c, i, s, vc[s], need, needop, &reuse)) {
        if (mode == CHECK) unordered++;
        else choose_waits(c, i, s, step, vc[s], need, needop, reuse);
      }
      tick(c, i, s, step, vc[s]);
    }
    if (step == 1) /* the waits at the end of the step */
      for (int s = 0; s < FP_NSTREAMS; s++)
        for (int t = 0; t < FP_NSTREAMS; t++)
          if (c->endw[s][t] >= 0) join(vc[s], c->snap[c->glast[c->endw[s][t]]][0]);
  }
  return unordered;
}

static fp_op sync_op(fp_opcode code, int stream, int32_t seg, int32_t event) {
  return (fp_op){.code = code, .stream = (fp_stream)stream, .dtype = FP_F32, .sdtype = FP_F32, .seg = seg,
                 .comm = -1, .only = -1, .only_comm = -1, .root = -1, .event = event, .module = -1,
                 .bucket = -1, .group = -1, .tab = -1, .shape = -1, .dst = fpi_noreg(), .src = fpi_noreg(),
                 .aux = fpi_noreg()};
}

/* a record or wait the pass adds, and where it goes in the new order */
typedef struct added {
  int32_t at, seg, event;
  fp_opcode code;
  int stream;
  bool reuse; /* a wait that orders only a reuse of bytes */
} added;

/* write the program again with the records and waits, in place: a first
 * walk gives every op its new index (never lower than its old one) and
 * lists the ops added; the ops then move back to front, so none is
 * overwritten before it moves, and the added ones fill the gaps (written
 * on the same pass, just before the op below them moves). The op
 * array grows in place (one array, not two: 2.2M ops are 334 MB). */
static void rebuild(sctx *c, fp_prog *P, fp_pass_ctx *cx) {
  int32_t n = c->n;
  bool *rec = calloc((size_t)n + 1, sizeof *rec);
  int32_t *evof = malloc(((size_t)n + 1) * sizeof *evof), *newidx = malloc(((size_t)n + 1) * sizeof *newidx);
  FP_ASSERT(rec && evof && newidx);
  for (int32_t i = 0; i < n; i++)
    for (int t = 0; t < FP_NSTREAMS; t++)
      if (c->wp[i][t] >= 0) rec[c->glast[c->wp[i][t]]] = true;
  int nend = 0;
  for (int s = 0; s < FP_NSTREAMS; s++)
    for (int t = 0; t < FP_NSTREAMS; t++)
      if (c->endw[s][t] >= 0) rec[c->glast[c->endw[s][t]]] = true, nend++;
  int32_t nrec = 0, nwait = nend;
  for (int32_t i = 0; i < n; i++) {
    evof[i] = rec[i] ? nrec++ : -1;
    for (int t = 0; t < FP_NSTREAMS; t++) nwait += c->wp[i][t] >= 0;
  }
  fp_seg *segs = P->segs;
  int32_t cap = n + nrec + nwait + 1, nadd = 0;
  added *add = malloc(((size_t)nrec + (size_t)nwait + 1) * sizeof *add);
  FP_ASSERT(add);
  int32_t m = 0, pending = -1, seg = P->nsegs - 1; /* pending: a record that opens the next segment */
  for (int32_t k = 0; k < P->nsegs; k++) {
    int32_t first = segs[k].first, nops = segs[k].nops;
    segs[k].first = m;
    if (pending >= 0) {
      add[nadd++] = (added){m++, k, evof[pending], FP_OP_RECORD, c->info[pending] & STREAM, false};
      pending = -1;
    }
    for (int32_t i = first; i < first + nops; i++) {
      int stream = c->info[i] & STREAM;
      for (int t = 0; t < FP_NSTREAMS; t++)
        if (c->wp[i][t] >= 0)
          add[nadd++] = (added){m++, k, evof[c->glast[c->wp[i][t]]], FP_OP_WAIT, stream, (c->wreuse[i] >> t) & 1};
      newidx[i] = m++;
      if (rec[i] && (c->info[i] & COMPUTE)) { /* the trainer's work runs after this segment */
        FP_ASSERT(i == first + nops - 1 && k + 1 < P->nsegs);
        pending = i;
      } else if (rec[i]) {
        add[nadd++] = (added){m++, k, evof[i], FP_OP_RECORD, stream, false};
      }
    }
  }
  FP_ASSERT(pending < 0);
  /* the end-of-step waits close the last segment */
  for (int s = 0; s < FP_NSTREAMS; s++)
    for (int t = 0; t < FP_NSTREAMS; t++) {
      int32_t p = c->endw[s][t];
      if (p < 0) continue;
      add[nadd++] = (added){m++, seg, evof[c->glast[p]], FP_OP_WAIT, s, c->endreuse[s][t]};
    }
  FP_ASSERT(m <= cap && nadd == m - n);
  P->ops = fpi_grow_raw(P->arena, P->ops, &P->cap_ops, m, sizeof *P->ops); /* every slot below m is written */
  if (cx->a) { /* the waits that order only a reuse of bytes */
    cx->reuse_waits = fpi_alloc_array(cx->a, (size_t)m + 1, 1);
    for (int32_t q = 0; q < nadd; q++) cx->reuse_waits[add[q].at] = add[q].reuse;
  }
  fp_op *ops = P->ops;
  /* one pass back to front: the added ops after old op i (add is in
   * order of place) go in before it moves, so the array is written once,
   * in order */
  int32_t q = nadd - 1;
  for (int32_t i = n - 1; i >= 0; i--) {
    FP_ASSERT(newidx[i] >= i);
    for (; q >= 0 && add[q].at > newidx[i]; q--)
      ops[add[q].at] = sync_op(add[q].code, add[q].stream, add[q].seg, add[q].event);
    ops[newidx[i]] = ops[i];
  }
  for (; q >= 0; q--) ops[add[q].at] = sync_op(add[q].code, add[q].stream, add[q].seg, add[q].event);
  for (int32_t k = 0; k < P->nsegs; k++) segs[k].nops = (k + 1 < P->nsegs ? segs[k + 1].first : m) - segs[k].first;
  for (int32_t k = 0; k < P->nlives; k++) {
    P->lives[k].first = newidx[P->lives[k].first];
    P->lives[k].last = newidx[P->lives[k].last];
  }
  P->nops = m;
  P->nevents = nrec;
  free(add);
  free(rec);
  free(evof);
  free(newidx);
}

bool fpi_pass_sync(fp_pass_ctx *cx, fp_prog *P) {
  cx->synced = true;
  cx->reuse_waits = NULL;
  sctx c = {.P = P, .n = P->nops};
  FP_ASSERT(P->nops < INT32_MAX / 2 - 2); /* the clocks fit snap's 32 bits */
  /* one walk of the ops (2.2M ops are 334 MB to read) for everything the
   * walks need of them: each op's accesses (the walks read them four times
   * or more), stream, group, and what the arrays are sized by */
  fpi_alias_clocks_init(P, &c.al);
  size_t n1 = (size_t)P->nops + 1;
  size_t per[FP_NSTREAMS] = {0}; /* a stream ticks once per op of its own, each step */
  c.afirst = malloc(n1 * sizeof *c.afirst);
  c.glast = malloc(n1 * sizeof *c.glast);
  c.info = malloc(n1);
  int64_t cap = (int64_t)n1 + 16, nacc = 0;
  c.acc = malloc((size_t)cap * sizeof *c.acc);
  FP_ASSERT(c.afirst && c.glast && c.info && c.acc);
  for (int32_t i = 0, open = 0; i < P->nops; i++) {
    const fp_op *op = &P->ops[i];
    FP_ASSERT(fpi_op_class(op->code) != FP_OPC_SYNC);
    FP_ASSERT(nacc <= INT32_MAX - (int64_t)op->nuses - FP_MAX_OPND_ACCESS);
    if (nacc + op->nuses + FP_MAX_OPND_ACCESS > cap) {
      while (nacc + op->nuses + FP_MAX_OPND_ACCESS > cap) cap *= 2;
      c.acc = realloc(c.acc, (size_t)cap * sizeof *c.acc);
      FP_ASSERT(c.acc);
    }
    c.afirst[i] = (int32_t)nacc;
    nacc += fpi_op_accesses(P, op, c.acc + nacc);
    per[op->stream]++;
    bool opens = group_first(P, i);
    c.info[i] = (uint8_t)(op->stream | (op->code == FP_OP_COMPUTE ? COMPUTE : 0) | (opens ? OPENS : 0));
    if (opens) /* the group before ends at i - 1 */
      for (; open < i; open++) c.glast[open] = i - 1;
    if (i + 1 == P->nops)
      for (; open <= i; open++) c.glast[open] = i;
  }
  c.afirst[P->nops] = (int32_t)nacc;
  c.wp = malloc(n1 * sizeof *c.wp);
  c.snap = malloc(n1 * sizeof *c.snap);
  c.wreuse = calloc(n1, 1);
  c.own = malloc(((size_t)P->nbufs + 1) * sizeof *c.own);
  FP_ASSERT(c.wp && c.snap && c.wreuse && c.own);
  memset(c.wp, 0xff, (size_t)P->nops * sizeof *c.wp); /* -1: no wait */
  for (int t = 0; t < FP_NSTREAMS; t++) c.has_ops[t] = per[t] > 0;
  for (int t = 0; t < FP_NSTREAMS; t++) {
    c.clkop[t] = malloc((2 * per[t] + 2) * sizeof *c.clkop[t]);
    FP_ASSERT(c.clkop[t]);
  }
  for (int s = 0; s < FP_NSTREAMS; s++)
    for (int t = 0; t < FP_NSTREAMS; t++) c.endw[s][t] = -1;
  walk(&c, ANALYZE);
  /* an end-of-step wait another one on the same stream implies is dropped
   * (the verifier, which runs next, re-checks the whole program) */
  for (int s = 0; s < FP_NSTREAMS; s++) {
    int n = 0;
    for (int t = 0; t < FP_NSTREAMS; t++) n += c.endw[s][t] >= 0;
    for (int t = 0; t < FP_NSTREAMS && n > 1; t++) {
      int32_t keep = c.endw[s][t];
      if (keep < 0) continue;
      c.endw[s][t] = -1;
      if (walk(&c, CHECK) != 0) c.endw[s][t] = keep;
      else n--;
    }
  }
  rebuild(&c, P, cx);
  fpi_alias_clocks_free(&c.al);
  for (int t = 0; t < FP_NSTREAMS; t++) free(c.clkop[t]);
  free(c.acc);
  free(c.afirst);
  free(c.glast);
  free(c.info);
  free(c.wp);
  free(c.snap);
  free(c.wreuse);
  free(c.own);
  return true;
}

void fpi_sync_program(fp_prog *p) {
  fp_pass_ctx c;
  memset(&c, 0, sizeof c);
  fpi_pass_sync(&c, p);
}
