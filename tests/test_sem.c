/* test_sem.c - the semantic check (rule 9, ir/verify_sem.c) on a mutation
 * corpus.
 *
 * Sources: every example (compiled here), the MPI tests' model and spec
 * pairs (tests/mpi) and every golden .fpir of tests/ir. Each original goes through plan.json (fpi_plan_write, then
 * fpi_plan_read_flags with FP_VERIFY_SEM) and must be accepted - except the
 * five hand-written goldens that do not compute a step (avg and
 * three_streams reduce bf16 grads as fp32; hybrid_ragged stages its main
 * weights from a host buffer nobody loads, and has send/recv; full_shard
 * zeroes no unsharded grad before the backward accumulates into it;
 * mx_block_undef takes an MXFP8 block's scale over padding nothing wrote),
 * which must be rejected by rule 9 with the messages below. Then each source is mutated
 * (one change per mutant, at most PER_KIND per kind, spread over the
 * candidates): two adjacent ops that touch common bytes (one writing) swapped, an
 * operand offset moved by one element, a reduction removed, a reduction's
 * op changed (sum <-> avg), an op's dtype changed, a scale's factor
 * changed, a collective's communicator changed, a post_optimizer refresh op
 * removed, a param's view moved by one element; and the strict classes (the enum below: less than an element off,
 * plan-wide scale changes, a ragged extent or a chunk off by one, a root or
 * an `only=` rank moved, a wait or a memset removed; a record moved above the
 * data op before it on its stream, a wait moved below the data op after it,
 * a wait given a weaker event (one whose record does not happen after its
 * own record's, which would only wait longer), an op's dst moved to another buffer of the
 * same size), every mutant of which must be rejected with a message located
 * in plan.json (a staging buffer's memset excepted: it may zero only
 * padding, see the corpus loop). Every mutant is
 * written as plan.json (which re-hashes it: fpi_plan_write takes
 * fpi_prog_hash of the mutated program) and read back:
 * rejected by the reader or rules 1-8, rejected by rule 9 only, or accepted.
 * The table goes to stdout; the test fails when an original is rejected or
 * when rule 9 rejects less than MIN_SEM of the mutants rules 1-8 accept
 * (with rule 9 switched off it rejects none of them). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mutant_sources.h"

/* at most this many mutants per kind and source; under the sanitizers (about
 * 10x slower) a quarter of them, the same kinds and sources and strictness:
 * the whole corpus is the default build's */
#ifdef __SANITIZE_ADDRESS__
#define PER_KIND 6
#else
#define PER_KIND 24
#endif
#define MIN_SEM 0.95

enum {
  M_SWAP, M_OFFSET, M_REDUCE_DEL, M_REDOP, M_DTYPE, M_SCALE, M_COMM, M_REFRESH_DEL, M_VIEW,
  /* the strict classes (issue 40): every mutant must be rejected, with a located message */
  M_SUBELEM, M_SCALE_ONE, M_SCALE_DROP, M_SCALE_WORLD, M_EXTENT, M_CHUNK,
  M_ROOT, M_ONLY, M_WAIT_DEL, M_MEMSET_DEL,
  /* (2026-11-29) */
  M_RECORD_UP, M_WAIT_DOWN, M_EVENT, M_BUF, M_NKINDS
};
#define M_STRICT M_SUBELEM
static const char *kind_name[M_NKINDS] = {"ops swapped",       "offset +1 element",  "reduce removed",
                                          "reduce op changed", "dtype changed",      "scale changed",
                                          "group changed",     "refresh removed",    "view moved",
                                          "offset < 1 element",
                                          "every scale to 1",  "every scale dropped", "scales 1/world only",
                                          "extent off by one", "chunk off by one",   "root changed",
                                          "only changed",      "wait removed",       "memset removed",
                                          "record hoisted",    "wait sunk",          "wait event changed",
                                          "buffer changed"};

/* what a mutation walks: ops, params or the whole program once */
static int32_t space(const fp_prog *p, int k) {
  if (k == M_SCALE_ONE || k == M_SCALE_DROP || k == M_SCALE_WORLD) return 1;
  if (k == M_EXTENT || k == M_CHUNK || k == M_VIEW) return p->nparams;
  return p->nops;
}

typedef struct tally {
  int n, structural, sem, accepted;
  char first[600]; /* the first rejection's message (strict classes) */
} tally;
static tally T[M_NKINDS];
static int fails;

/* plan.json text of p, read back: 0 accepted, 1 rejected by the reader or
 * rules 1-8, 2 rejected by rule 9; msg gets rule 9's first message */
static int roundtrip(const fp_prog *p, char *msg, size_t cap, char *rmsg, size_t rcap, bool located) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  bool wrote = f && fpi_plan_write(p, f);
  if (f) fclose(f);
  if (!wrote) {
    free(buf);
    return 1;
  }
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  fp_src src = {.path = "plan.json", .text = buf, .len = len};
  fp_prog *q = fpi_plan_read_flags(a, &d, &src, 0);
  if (rmsg) snprintf(rmsg, rcap, "%s", d.buf ? d.buf : "");
  int r = 1;
  if (q) {
    fp_diag d2;
    fpi_diag_init(&d2, NULL);
    if (located) { /* read again with rule 9: its messages located in the file, as the loader gives them */
      fp_arena *a2 = fpi_arena_new();
      r = fpi_plan_read_flags(a2, &d2, &src, FP_VERIFY_SEM) ? 0 : 2;
      fpi_arena_free(a2);
    } else {
      r = fpi_ir_verify_flags(q, &d2, NULL, FP_VERIFY_SEM) ? 0 : 2;
    }
    if (msg) snprintf(msg, cap, "%s", d2.buf ? d2.buf : "");
    fpi_diag_free(&d2);
  }
  fpi_diag_free(&d);
  fpi_arena_free(a);
  free(buf);
  return r;
}

/* remove op i: segments, live ranges follow */
static void del_op(fp_prog *p, int32_t i) {
  memmove(p->ops + i, p->ops + i + 1, (size_t)(p->nops - i - 1) * sizeof *p->ops);
  p->nops--;
  for (int32_t s = 0; s < p->nsegs; s++) {
    if (p->segs[s].first > i) p->segs[s].first--;
    else if (p->segs[s].first + p->segs[s].nops > i) p->segs[s].nops--;
  }
  for (int32_t l = 0; l < p->nlives; l++) {
    if (p->lives[l].first > i) p->lives[l].first--;
    if (p->lives[l].last >= i && p->lives[l].last > p->lives[l].first) p->lives[l].last--;
  }
}

static bool data_op(const fp_op *op) {
  fp_opclass c = fpi_op_class(op->code);
  return c == FP_OPC_COMM || c == FP_OPC_LOCAL;
}

/* the bytes [lo, hi) operand w of op covers on the rank with index 0 in its
 * communicator (extents as ops.def says; a copy's rows included) */
static bool opnd_bytes(const fp_prog *p, const fp_op *op, int w, int32_t *buf, int64_t *lo, int64_t *hi) {
  const fp_region *r = w == 0 ? &op->dst : w == 1 ? &op->src : &op->aux;
  if (r->buf < 0) return false;
  fp_dtype dt = w == 1 ? op->sdtype : op->dtype;
  if (op->code == FP_OP_QUANTIZE_MXFP8) dt = w == 0 ? FP_E4M3 : w == 2 ? FP_E8M0 : op->sdtype;
  if (op->code == FP_OP_DEQUANTIZE_MXFP8) dt = w == 1 ? FP_E4M3 : w == 2 ? FP_E8M0 : op->dtype;
  int64_t G = op->comm >= 0 ? p->comms[op->comm].size : 1, n = fpi_op_count(p, op, 0), z = fpi_dtype_size(dt);
  if (op->code == FP_OP_H2D || op->code == FP_OP_D2H) z = 1;
  if (w == 2) n = fpi_mx_blocks(n), z = 1;
  int64_t ext = n * z;
  if ((op->code == FP_OP_ALL_GATHER && w == 0) || (op->code == FP_OP_REDUCE_SCATTER && w == 1)) ext *= G;
  fp_op_shape sh = fpi_op_shape_of(p, op);
  if (op->code == FP_OP_COPY && sh.rows > 1) ext += (sh.rows - 1) * (w == 0 ? sh.dpitch : sh.spitch);
  if (op->tab >= 0 || fpi_op_regions(op->code)) ext = p->bufs[r->buf].bytes; /* tables: the whole buffer */
  *buf = r->buf;
  *lo = r->tabrel ? 0 : r->off;
  *hi = r->tabrel ? p->bufs[r->buf].bytes : *lo + ext;
  return true;
}

/* a and b touch common bytes, one of them writing them (swapping them can
 * change what the step computes) */
static bool conflict(const fp_prog *p, const fp_op *a, const fp_op *b) {
  for (int x = 0; x < 3; x++)
    for (int y = 0; y < 3; y++) {
      int32_t ba, bb;
      int64_t la, ha, lb, hb;
      if ((x != 0 && y != 0) || !opnd_bytes(p, a, x, &ba, &la, &ha) || !opnd_bytes(p, b, y, &bb, &lb, &hb)) continue;
      bool aw = x == 0 || (x == 2 && a->code == FP_OP_QUANTIZE_MXFP8), bw = y == 0 || (y == 2 && b->code == FP_OP_QUANTIZE_MXFP8);
      if ((aw || bw) && ba == bb && la < hb && lb < ha) return true;
    }
  return false;
}

/* the op of stream st nearest before (dir -1) or after (dir +1) op i in its segment, a data op; -1 */
static int32_t stream_nb(const fp_prog *p, int32_t i, int dir) {
  const fp_seg *sg = &p->segs[p->ops[i].seg];
  for (int32_t j = i + dir; j >= sg->first && j < sg->first + sg->nops; j += dir) {
    if (p->ops[j].stream != p->ops[i].stream) continue;
    return data_op(&p->ops[j]) ? j : -1;
  }
  return -1;
}
/* another buffer of the same size as op i's dst; -1 */
static int32_t same_size_buf(const fp_prog *p, int32_t b) {
  for (int32_t k = 1; k < p->nbufs; k++) {
    int32_t c = (b + k) % p->nbufs;
    if (p->bufs[c].bytes == p->bufs[b].bytes) return c;
  }
  return -1;
}
/* op i moved to position j in its segment (the ops between shift by one;
 * live ranges stay on the ops they name) */
static void move_op(fp_prog *p, int32_t i, int32_t j) {
  fp_op t = p->ops[i];
  if (j < i) memmove(p->ops + j + 1, p->ops + j, (size_t)(i - j) * sizeof t);
  else memmove(p->ops + i, p->ops + i + 1, (size_t)(j - i) * sizeof t);
  p->ops[j] = t;
  int32_t lo = i < j ? i : j, hi = i < j ? j : i;
  for (int32_t l = 0; l < p->nlives; l++) {
    int32_t *e[2] = {&p->lives[l].first, &p->lives[l].last};
    for (int k = 0; k < 2; k++)
      if (*e[k] >= lo && *e[k] <= hi) *e[k] = *e[k] == i ? j : j < i ? *e[k] + 1 : *e[k] - 1;
  }
}
/* the record of event e before op i (the one a wait at i waits for); -1 */
static int32_t record_of(const fp_prog *p, int32_t e, int32_t i) {
  for (int32_t j = i - 1; j >= 0; j--)
    if (p->ops[j].code == FP_OP_RECORD && p->ops[j].event == e) return j;
  return -1;
}
/* does the record at `now` happen after the record at `was` (program order
 * within the step, stream order, waits on the latest record before them):
 * vector clocks over the streams, computed for the ops before `upto` */
static bool record_after(const fp_prog *p, int32_t was, int32_t now, int32_t upto) {
  int64_t c[FP_NSTREAMS] = {0}, vc[FP_NSTREAMS][FP_NSTREAMS] = {{0}}, tick_was = -1;
  int64_t(*ev)[FP_NSTREAMS] = calloc((size_t)p->nevents + 1, sizeof *ev);
  bool after = false;
  for (int32_t j = 0; j < upto; j++) {
    const fp_op *o = &p->ops[j];
    int st = o->stream;
    vc[st][st] = ++c[st];
    if (o->code == FP_OP_WAIT && o->event >= 0 && o->event < p->nevents)
      for (int t = 0; t < FP_NSTREAMS; t++)
        if (ev[o->event][t] > vc[st][t]) vc[st][t] = ev[o->event][t];
    if (o->code == FP_OP_RECORD && o->event >= 0 && o->event < p->nevents)
      memcpy(ev[o->event], vc[st], sizeof vc[st]);
    if (j == was) tick_was = c[st];
    if (j == now) after = tick_was >= 0 && vc[st][p->ops[was].stream] >= tick_was;
  }
  free(ev);
  return after;
}

/* an event for the wait at i to wait for instead, weaker than its own: the
 * latest record before i of another event that does not happen after the
 * wait's own record (one that does covers all it did: a wait as strong or
 * stronger, an equivalent mutant); the nth of them, counted from the wait
 * back; -1: none */
static int32_t weaker_nth(const fp_prog *p, int32_t i, int nth) {
  int32_t was = record_of(p, p->ops[i].event, i);
  if (was < 0) return -1;
  char *seen = calloc((size_t)p->nevents + 1, 1);
  int32_t *cand = calloc((size_t)p->nevents + 1, sizeof *cand), n = 0;
  for (int32_t j = i - 1; j >= 0; j--) {
    const fp_op *r = &p->ops[j];
    if (r->code != FP_OP_RECORD || r->event < 0 || r->event >= p->nevents || seen[r->event]) continue;
    seen[r->event] = 1;
    if (r->event != p->ops[i].event && !(j > was && record_after(p, was, j, i))) cand[n++] = r->event;
  }
  int32_t e = n ? cand[nth % n] : -1;
  free(seen);
  free(cand);
  return e;
}

/* is op i a candidate for mutation kind k; apply it to p (a fork) */
static bool candidate(const fp_prog *p, int k, int32_t i) {
  const fp_op *op = &p->ops[i];
  switch (k) {
    case M_SWAP:
      return i + 1 < p->nops && op->seg == p->ops[i + 1].seg && data_op(op) && data_op(&p->ops[i + 1]) &&
             conflict(p, op, &p->ops[i + 1]);
    case M_OFFSET: return data_op(op) && (op->dst.buf >= 0 || op->src.buf >= 0) && op->code != FP_OP_MEMSET;
    case M_REDUCE_DEL:
    case M_REDOP: return fpi_op_reduces(op->code);
    case M_DTYPE:
      return data_op(op) && (op->dtype == FP_F32 || op->dtype == FP_BF16 || op->dtype == FP_F16);
    case M_SCALE: return op->code == FP_OP_SCALE;
    case M_COMM: return fpi_op_class(op->code) == FP_OPC_COMM && p->ncomms > 1;
    case M_REFRESH_DEL: return data_op(op) && p->segs[op->seg].kind == FP_SEG_POST_OPTIMIZER;
    case M_RECORD_UP: return op->code == FP_OP_RECORD && stream_nb(p, i, -1) >= 0;
    case M_WAIT_DOWN: return op->code == FP_OP_WAIT && stream_nb(p, i, +1) >= 0;
    case M_EVENT: return op->code == FP_OP_WAIT && weaker_nth(p, i, 0) >= 0;
    case M_BUF: return data_op(op) && op->dst.buf >= 0 && same_size_buf(p, op->dst.buf) >= 0;
    case M_ROOT: return (op->code == FP_OP_REDUCE || op->code == FP_OP_BROADCAST) && p->comms[op->comm].size > 1;
    case M_ONLY: return op->only >= 0 && p->comms[op->only_comm].size > 1;
    case M_WAIT_DEL: return op->code == FP_OP_WAIT;
    case M_MEMSET_DEL: return op->code == FP_OP_MEMSET;
    case M_SUBELEM: { /* an operand whose elements are wider than a byte */
      if (!data_op(op) || op->code == FP_OP_H2D || op->code == FP_OP_D2H) return false;
      int64_t zd = op->dst.buf >= 0 ? fpi_dtype_size(op->dtype) : 0, zs = op->src.buf >= 0 ? fpi_dtype_size(op->sdtype) : 0;
      if (op->code == FP_OP_QUANTIZE_MXFP8) zd = 1;
      if (op->code == FP_OP_DEQUANTIZE_MXFP8) zs = 1;
      return zd > 1 || zs > 1;
    }
    case M_SCALE_WORLD: /* several micro-batches: the divide by their number left out */
      if (p->grad_accumulation < 2) return false;
      /* fall through */
    case M_SCALE_ONE:
    case M_SCALE_DROP:
      for (int32_t j = 0; j < p->nops; j++)
        if (p->ops[j].code == FP_OP_SCALE) return true;
      return false;
  }
  return false;
}

/* the param mutations: a ragged param's table, a sharded param's chunk */
/* a param's views by index (main, grad, weight, ugrad), their dtypes, and the
 * one the nth M_VIEW mutant of q moves: the first present from nth % 4 */
static const char *const view_name[4] = {"main", "grad", "weight", "ugrad"};
static fp_view *view_of(fp_ir_param *q, int w) { return w == 0 ? &q->main : w == 1 ? &q->grad : w == 2 ? &q->weight : &q->ugrad; }
static fp_dtype view_dtype(const fp_ir_param *q, int w) { return w == 0 ? q->main_dtype : w == 1 ? q->grad_dtype : q->param_dtype; }
static int moved_view(fp_ir_param *q, int nth) {
  for (int t = 0; t < 4; t++)
    if (view_of(q, (nth + t) % 4)->buf >= 0) return (nth + t) % 4;
  return -1;
}
static bool param_candidate(const fp_prog *p, int k, int32_t j) {
  const fp_ir_param *q = &p->params[j];
  if (k == M_VIEW) return q->main.buf >= 0 || q->weight.buf >= 0;
  if (k == M_EXTENT) return q->placement == FP_PL_RAGGED && q->tab >= 0;
  return q->placement != FP_PL_REPLICATE && q->chunk > 1 && (q->main.buf >= 0 || q->weight.buf >= 0);
}

static void mutate(fp_prog *p, int k, int32_t i, int nth) {
  fp_op *op = &p->ops[i];
  switch (k) {
    case M_SWAP: {
      fp_op t = p->ops[i];
      p->ops[i] = p->ops[i + 1];
      p->ops[i + 1] = t;
      break;
    }
    case M_OFFSET:
      if (op->src.buf >= 0 && (nth % 2 || op->dst.buf < 0)) op->src.off += fpi_dtype_size(op->sdtype);
      else op->dst.off += fpi_dtype_size(op->dtype);
      break;
    case M_REDUCE_DEL:
    case M_REFRESH_DEL:
    case M_WAIT_DEL:
    case M_MEMSET_DEL: del_op(p, i); break;
    case M_ROOT: op->root = (int32_t)((op->root + 1) % p->comms[op->comm].size); break;
    case M_ONLY: op->only = (int32_t)((op->only + 1) % p->comms[op->only_comm].size); break;
    case M_REDOP: op->red = op->red == FP_RED_SUM ? FP_RED_AVG : FP_RED_SUM; break;
    case M_DTYPE: {
      fp_dtype to = op->dtype == FP_F32 ? FP_BF16 : FP_F32;
      bool same = op->sdtype == op->dtype;
      op->dtype = to;
      if (same) op->sdtype = to;
      break;
    }
    case M_SCALE: op->alpha *= 2; break;
    case M_COMM: op->comm = (op->comm + 1) % p->ncomms; break;
    case M_RECORD_UP: move_op(p, i, stream_nb(p, i, -1)); break;
    case M_WAIT_DOWN: move_op(p, i, stream_nb(p, i, +1)); break;
    case M_EVENT: op->event = weaker_nth(p, i, nth); break;
    case M_BUF: op->dst.buf = same_size_buf(p, op->dst.buf); break;
    case M_SUBELEM: { /* 1 .. z-1 bytes into an element of dst or src */
      bool dst = op->dst.buf >= 0 && fpi_dtype_size(op->code == FP_OP_QUANTIZE_MXFP8 ? FP_U8 : op->dtype) > 1;
      bool src = op->src.buf >= 0 && fpi_dtype_size(op->code == FP_OP_DEQUANTIZE_MXFP8 ? FP_U8 : op->sdtype) > 1;
      bool use_src = src && (!dst || nth % 2);
      int64_t z = fpi_dtype_size(use_src ? op->sdtype : op->dtype), by = 1 + (nth / 2) % (z - 1);
      if (use_src) op->src.off += by;
      else op->dst.off += by;
      break;
    }
    case M_SCALE_ONE:
      for (int32_t j = 0; j < p->nops; j++)
        if (p->ops[j].code == FP_OP_SCALE) p->ops[j].alpha = 1;
      break;
    case M_SCALE_WORLD:
      for (int32_t j = 0; j < p->nops; j++)
        if (p->ops[j].code == FP_OP_SCALE) p->ops[j].alpha *= (double)p->grad_accumulation;
      break;
    case M_SCALE_DROP:
      for (int32_t j = p->nops - 1; j >= 0; j--)
        if (p->ops[j].code == FP_OP_SCALE) del_op(p, j);
      break;
    case M_EXTENT: { /* one entry's start or count moved by one element */
      fp_ir_table *t = &p->tabs[p->params[i].tab];
      int64_t g = (nth / 4) % t->n;
      switch (nth % 4) {
        case 0: t->off[g]++; break;
        case 1: if (t->off[g] > 0) t->off[g]--; else t->off[g]++; break;
        case 2: t->cnt[g]++; break;
        default: if (t->cnt[g] > 0) t->cnt[g]--; else t->cnt[g]++; break;
      }
      break;
    }
    case M_CHUNK: p->params[i].chunk += nth % 2 ? 1 : -1; break;
    case M_VIEW: { /* (candidates have a main or a weight view) */
      fp_ir_param *q = &p->params[i];
      int w = moved_view(q, nth);
      view_of(q, w)->off += fpi_dtype_size(view_dtype(q, w));
      break;
    }
  }
}

/* a fork shares its params and tables with the original: copies to mutate */
static void own_params(fp_arena *a, fp_prog *m) {
  fp_ir_param *q = fpi_alloc(a, ((size_t)m->nparams + 1) * sizeof *q);
  if (m->nparams) memcpy(q, m->params, (size_t)m->nparams * sizeof *q);
  m->params = q;
  fp_ir_table *t = fpi_alloc(a, ((size_t)m->ntabs + 1) * sizeof *t);
  if (m->ntabs) memcpy(t, m->tabs, (size_t)m->ntabs * sizeof *t);
  for (int32_t j = 0; j < m->ntabs; j++) {
    int64_t *off = fpi_alloc(a, ((size_t)t[j].n + 1) * sizeof *off), *cnt = fpi_alloc(a, ((size_t)t[j].n + 1) * sizeof *cnt);
    if (t[j].n) memcpy(off, t[j].off, (size_t)t[j].n * sizeof *off);
    if (t[j].n) memcpy(cnt, t[j].cnt, (size_t)t[j].n * sizeof *cnt);
    t[j].off = off, t[j].cnt = cnt;
  }
  m->tabs = t;
}

static void corpus(const char *name, const fp_prog *p) {
  for (int k = 0; k < M_NKINDS; k++) {
    int32_t ns = space(p, k), *c = malloc(((size_t)ns + 1) * sizeof *c), nc = 0;
    for (int32_t i = 0; i < ns; i++)
      if (k == M_EXTENT || k == M_CHUNK || k == M_VIEW ? param_candidate(p, k, i) : candidate(p, k, i)) c[nc++] = i;
    bool per_param = k == M_EXTENT || k == M_CHUNK || k == M_VIEW; /* several mutants of one param */
    int64_t most = per_param ? (int64_t)nc * (k == M_EXTENT ? 16 : k == M_VIEW ? 4 : 2) : nc;
    int take = most < PER_KIND ? (int)most : PER_KIND;
    for (int t = 0; t < take; t++) {
      int32_t i = per_param ? c[t % nc] : c[(int64_t)t * nc / take];
      int nth = per_param ? t / nc : t;
      fp_arena *a = fpi_arena_new();
      fp_prog *m = fpi_prog_fork(a, p);
      if (per_param) own_params(a, m);
      mutate(m, k, i, nth);
      char msg[2048], rmsg[2048];
      int r = roundtrip(m, msg, sizeof msg, rmsg, sizeof rmsg, k >= M_STRICT);
      T[k].n++;
      if (r == 1) T[k].structural++;
      else if (r == 2) T[k].sem++;
      else if (k == M_MEMSET_DEL && p->bufs[p->ops[i].dst.buf].cat == FP_CAT_STAGING) {
        /* a staging buffer's memset zeroes the padding of a dim-shard's
         * reduce-scatter input, whose copies write all the rest: removed, the
         * padding stays undefined and the reduce-scatter sums it into padding
         * nothing reads (an MXFP8 block with an undefined element would make
         * an undefined scale): equivalent */
        T[k].accepted++;
        printf("  accepted (a staging buffer's padding: equivalent): %s, %s at op %d\n", name, kind_name[k], i);
      } else {
        T[k].accepted++;
        if (k >= M_STRICT) fails++;
        if (space(p, k) == p->nops)
          printf("  accepted: %s, %s at op %d (%s)\n", name, kind_name[k], i, fpi_op_name(p->ops[i].code));
        else if (k == M_VIEW) {
          int w = moved_view(&m->params[i], nth);
          printf("  accepted: %s, %s at param %d (%s, its %s view to %" PRId64 " in '%s')\n", name, kind_name[k], i,
                 p->params[i].name, view_name[w], view_of(&m->params[i], w)->off, m->bufs[view_of(&m->params[i], w)->buf].name);
        } else
          printf("  %saccepted: %s, %s at param %d (%s, chunk %" PRId64 " -> %" PRId64 ")\n", k >= M_STRICT ? "FAIL " : "", name, kind_name[k], i, p->params[i].name, p->params[i].chunk, m->params[i].chunk);
      }
      if (k >= M_STRICT && r != 0) {
        /* a located message: plan.json:LINE:COL: error: /pointer: ... (the reader)
         * or "plan.json:...: error: segment/op ..." (rule 9 through the loader's locations) */
        const char *m0 = r == 1 ? rmsg : msg;
        char *nl = strchr(m0, '\n');
        int len = nl ? (int)(nl - m0) : (int)strlen(m0);
        if (strncmp(m0, "plan.json:", 10) || m0[10] < '1' || m0[10] > '9' || !strstr(m0, ": error: /")) {
          printf("FAIL %s, %s at %d: the message is not located: %.*s\n", name, kind_name[k], i, len, m0);
          fails++;
        }
        if (!T[k].first[0]) snprintf(T[k].first, sizeof T[k].first, "%s: %.*s", name, len, m0);
      }
      fpi_arena_free(a);
    }
    free(c);
  }
}

static void original(const char *name, const fp_prog *p, const char *must) {
  char msg[4096];
  int r = roundtrip(p, msg, sizeof msg, NULL, 0, false);
  if (must) {
    if (r != 2 || !strstr(msg, must)) {
      printf("FAIL %s: wanted rule 9 to reject it with \"%s\", got %d: %s\n", name, must, r, msg);
      fails++;
    } else {
      printf("%-28s rejected by rule 9 as it must be\n", name);
    }
    return;
  }
  if (r != 0) {
    printf("FAIL %s: the original is rejected (%d): %s\n", name, r, msg);
    fails++;
    return;
  }
  printf("%-28s %6d ops: ok\n", name, p->nops);
  corpus(name, p);
}

/* a compiled program: an original of the corpus */
static void compiled(const char *name, const fp_prog *p) { original(name, p, NULL); }

int main(void) {
  static const struct {
    const char *name, *must; /* must: rule 9's message on a golden that computes no step */
  } goldens[] = {
      {"full_shard", "the backward (step 1) adds grads of fc1.weight to fc1.ugrad [0,512) on rank 0, which holds undefined"},
      {"fsdp2_unit", NULL},
      {"frozen_mxfp8", NULL},
      {"avg", "reduce_scatter reads b.ugrad [0,512) on rank 0 as fp32: holds grad of b"},
      {"three_streams", "reduce_scatter reads b.ugrad [0,512) on rank 0 as fp32"},
      {"hybrid_ragged", "dequantize_mxfp8 reads scales emb.s [0,4) on rank 0: holds undefined"},
      {"mx_block_undef", "dequantize_mxfp8 reads scales mx.mxscale [12,13) on rank 0: holds undefined"},
  };
  fails += fp_mut_sources(compiled, NULL);
  for (size_t g = 0; g < sizeof goldens / sizeof *goldens; g++) {
    fp_arena *a = fpi_arena_new();
    fp_diag d;
    fpi_diag_init(&d, stderr);
    fp_src src;
    const char *path = fpi_sprintf(a, "%s/tests/ir/%s.fpir", FP_SOURCE_DIR, goldens[g].name);
    fp_prog *p = fpi_src_read(a, &d, path, &src) ? fpi_ir_parse(a, &d, &src) : NULL;
    if (!p || !fpi_ir_verify(p, &d, &src)) {
      printf("FAIL %s: does not parse and verify\n", goldens[g].name);
      fails++;
    } else {
      original(goldens[g].name, p, goldens[g].must);
    }
    fpi_diag_free(&d);
    fpi_arena_free(a);
  }
  int n = 0, st = 0, se = 0, ac = 0;
  printf("\n%-20s %8s %12s %10s %9s %14s\n", "mutation", "mutants", "rules 1-8", "rule 9", "accepted",
         "rule 9 share");
  for (int k = 0; k < M_NKINDS; k++) {
    int pass = T[k].sem + T[k].accepted;
    printf("%-20s %8d %12d %10d %9d %13.1f%%\n", kind_name[k], T[k].n, T[k].structural, T[k].sem, T[k].accepted,
           pass ? 100.0 * T[k].sem / pass : 100.0);
    n += T[k].n, st += T[k].structural, se += T[k].sem, ac += T[k].accepted;
  }
  double share = se + ac ? (double)se / (se + ac) : 1;
  printf("%-20s %8d %12d %10d %9d %13.1f%%\n", "all", n, st, se, ac, 100 * share);
  printf("rejected in all: %d of %d (%.1f%%)\n", st + se, n, n ? 100.0 * (st + se) / n : 0.0);
  printf("\nthe strict classes (every mutant rejected, located), a message of each:\n");
  for (int k = M_STRICT; k < M_NKINDS; k++) {
    printf("  %-20s %s\n", kind_name[k], T[k].first);
    if (T[k].n == 0) {
      printf("FAIL: no mutant of class '%s'\n", kind_name[k]);
      fails++;
    }
  }
  if (share < MIN_SEM) {
    printf("FAIL: rule 9 rejects %.1f%% of the mutants rules 1-8 accept (want >= %.0f%%)\n", 100 * share,
           100 * MIN_SEM);
    fails++;
  }
  return fails ? 1 : 0;
}
