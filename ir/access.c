/* access.c - what each op reads and writes, and which buffers share bytes.
 *
 * The unit of conflict is the buffer: an op reads or writes a whole buffer as
 * far as ordering is concerned (buffers are per bucket and per kind, so a
 * finer unit would only separate ops that the schedule orders anyway). Two
 * buffers conflict when they are the same buffer or their bytes overlap in
 * the same arena; fp_alias_clocks keeps the latest access per byte, so the
 * latest conflicting access is found without listing pairs of buffers. The verifier's race rule and the planner's sync pass both
 * use these two functions, so the waits the planner inserts are exactly the
 * ones the verifier asks for. The pairing of the trainer's forward and
 * backward (whose activations live in between) is here too, for the
 * memory plan, the timeline and the viewer. */
#include "irpriv.h"

#include <stdlib.h>
#include <string.h>

static int add(fp_access *out, int n, int32_t buf, bool rd, bool wr) {
  if (buf < 0) return n;
  for (int k = 0; k < n; k++)
    if (out[k].buf == buf) {
      out[k].read |= rd;
      out[k].write |= wr;
      return n;
    }
  out[n] = (fp_access){buf, rd, wr};
  return n + 1;
}

static bool use_writes(const fp_prog *p, const fp_op *op, int32_t b) {
  fp_buf_cat c = p->bufs[b].cat;
  return (op->pass == FP_PASS_BWD && c == FP_CAT_UNSHARDED_GRAD) || (op->pass == FP_PASS_OPT && (c == FP_CAT_MAIN_WEIGHT || c == FP_CAT_OPT_STATE));
}

/* a compute op with many uses (the optimizer's: every main weight and
 * grad): the same accesses as add() one by one, in first-use order, but
 * duplicates found by sorting (buffer, position) instead of a scan each */
static int many_uses(const fp_prog *p, const fp_op *op, fp_access *out) {
  int32_t n = op->nuses;
  uint64_t *key = malloc((size_t)n * sizeof *key);
  FP_ASSERT(key);
  for (int32_t k = 0; k < n; k++) {
    int32_t b = p->uses[op->uses + k];
    out[k] = (fp_access){b, true, b >= 0 && use_writes(p, op, b)};
    key[k] = (uint64_t)(uint32_t)b << 32 | (uint32_t)k;
  }
  fpi_sort_u64(key, NULL, n);
  for (int32_t k = 1; k < n; k++) {
    int32_t first = (int32_t)(key[k - 1] & 0xffffffff), dup = (int32_t)(key[k] & 0xffffffff);
    if (out[first].buf != out[dup].buf) continue;
    out[first].write |= out[dup].write;
    out[dup].buf = -1;
    key[k] = key[k - 1]; /* later duplicates merge into the first too */
  }
  free(key);
  int m = 0;
  for (int32_t k = 0; k < n; k++)
    if (out[k].buf >= 0) out[m++] = out[k];
  return m;
}

int fpi_op_accesses(const fp_prog *p, const fp_op *op, fp_access *out) {
  int n = 0;
  switch (op->code) {
  case FP_OP_RECORD:
  case FP_OP_WAIT: return 0;
  case FP_OP_COMPUTE:
    if (op->nuses > 32) return many_uses(p, op, out);
    for (int32_t k = 0; k < op->nuses; k++) {
      int32_t b = p->uses[op->uses + k];
      n = add(out, n, b, true, use_writes(p, op, b));
    }
    return n;
  case FP_OP_ADD:
  case FP_OP_SCALE: n = add(out, n, op->dst.buf, true, true); break;
  case FP_OP_ALL_REDUCE: /* in place reads what it writes */
  case FP_OP_REDUCE: n = add(out, n, op->dst.buf, op->dst.buf == op->src.buf, true); break;
  default: n = add(out, n, op->dst.buf, false, true); break;
  }
  n = add(out, n, op->src.buf, true, false);
  n = add(out, n, op->aux.buf, op->code != FP_OP_QUANTIZE_MXFP8, op->code == FP_OP_QUANTIZE_MXFP8);
  return n;
}

/* ---- the latest access to each byte (fp_alias_clocks) ---------------------- */
#define NK (2 * FP_NSTREAMS) /* clocks per tree node: writes per stream, then reads */

static int64_t buf_end(const fp_ir_buf *x) { return x->offset > INT64_MAX - x->bytes ? INT64_MAX : x->offset + x->bytes; }

static bool placed(const fp_ir_buf *x) { return x->offset >= 0 && x->bytes > 0; }

int32_t fpi_cut_slot(const int64_t *e, int32_t n, int64_t o) {
  int32_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (e[mid] < o) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

void fpi_alias_clocks_init(const fp_prog *p, fp_alias_clocks *c) {
  memset(c, 0, sizeof *c);
  int32_t nb = p->nbufs;
  c->lo = malloc(((size_t)nb + 1) * sizeof *c->lo);
  c->hi = malloc(((size_t)nb + 1) * sizeof *c->hi);
  c->row = malloc(((size_t)nb + 1) * sizeof *c->row);
  uint64_t *e = malloc((2 * (size_t)nb + 1) * sizeof *e);
  int32_t *ord = malloc(((size_t)nb + 1) * sizeof *ord);
  FP_ASSERT(c->lo && c->hi && c->row && e && ord);
  /* a buffer sharing no byte with another (every persistent buffer, an
   * unplaced one) keeps its clocks in a row of its own: c->lo[b] = -1,
   * c->row[b] its row in c->iso.
   * Sorted by offset, buffer k shares bytes with one before it when one of
   * those reaches past its offset, with one after it when the next starts
   * before its end (equal offsets: both share) */
  int32_t niso = 0;
  for (int32_t b = 0; b < nb; b++) c->lo[b] = 0;
  for (int host = 0; host < 2; host++) {
    int32_t m = 0;
    for (int32_t b = 0; b < nb; b++) {
      const fp_ir_buf *x = &p->bufs[b];
      if (x->host == host && placed(x)) e[m] = (uint64_t)x->offset, ord[m++] = b;
    }
    fpi_sort_u64(e, ord, m);
    int64_t reach = INT64_MIN; /* the furthest end of the buffers before k */
    for (int32_t k = 0; k < m; k++) {
      const fp_ir_buf *x = &p->bufs[ord[k]];
      int64_t end = buf_end(x);
      bool alone = x->offset >= reach && (k + 1 == m || p->bufs[ord[k + 1]].offset >= end);
      if (alone) c->lo[ord[k]] = -1, c->row[ord[k]] = niso++;
      if (end > reach) reach = end;
    }
  }
  for (int32_t b = 0; b < nb; b++)
    if (!placed(&p->bufs[b])) c->lo[b] = -1, c->row[b] = niso++;
  free(ord);
  int64_t leaves = 0;
  for (int host = 0; host < 2; host++) {
    /* the cuts: the two ends of every placed buffer that shares bytes (one
     * arena at a time) */
    int32_t n = 0;
    for (int32_t b = 0; b < nb; b++) {
      const fp_ir_buf *x = &p->bufs[b];
      if (x->host != host || !placed(x) || c->lo[b] < 0) continue;
      e[n++] = (uint64_t)x->offset;
      e[n++] = (uint64_t)buf_end(x);
    }
    fpi_sort_u64(e, NULL, n);
    int32_t u = 0;
    for (int32_t k = 0; k < n; k++)
      if (u == 0 || e[k] != e[u - 1]) e[u++] = e[k];
    for (int32_t b = 0; b < nb; b++) {
      const fp_ir_buf *x = &p->bufs[b];
      if (x->host != host || !placed(x) || c->lo[b] < 0) continue;
      c->lo[b] = (int32_t)(leaves + fpi_cut_slot((const int64_t *)e, u, x->offset));
      c->hi[b] = (int32_t)(leaves + fpi_cut_slot((const int64_t *)e, u, buf_end(x)));
      c->row[b] = c->ntree++;
    }
    if (u > 1) leaves += u - 1;
  }
  free(e);
  int64_t n = 1;
  while (n < leaves) n *= 2;
  FP_ASSERT(n <= INT32_MAX / 2);
  c->n = (int32_t)n;
  c->niso = niso;
  c->tag = malloc(2 * (size_t)n * NK * sizeof *c->tag);
  c->sub = malloc(2 * (size_t)n * NK * sizeof *c->sub);
  c->iso = malloc(((size_t)niso + 1) * NK * sizeof *c->iso);
  c->memo = malloc(((size_t)c->ntree + 1) * sizeof *c->memo);
  c->nbufs = nb;
  FP_ASSERT(c->tag && c->sub && c->iso && c->memo);
  fpi_alias_clocks_reset(c);
}

void fpi_alias_clocks_reset(fp_alias_clocks *c) {
  memset(c->tag, 0, 2 * (size_t)c->n * NK * sizeof *c->tag);
  memset(c->sub, 0, 2 * (size_t)c->n * NK * sizeof *c->sub);
  memset(c->iso, 0, (size_t)c->niso * NK * sizeof *c->iso);
  memset(c->nacc, 0, sizeof c->nacc);
  for (int32_t k = 0; k < c->ntree; k++) c->memo[k].s = -1;
}

void fpi_alias_clocks_free(fp_alias_clocks *c) {
  free(c->lo);
  free(c->hi);
  free(c->tag);
  free(c->sub);
  free(c->iso);
  free(c->memo);
  free(c->row);
  memset(c, 0, sizeof *c);
}

static inline void chmax(int64_t *x, int64_t v) {
  if (v > *x) *x = v;
}

static void note1(fp_alias_clocks *c, int32_t l, int32_t r, int k, int64_t t) {
  int64_t l0 = l + (int64_t)c->n, r0 = r + (int64_t)c->n - 1;
  for (int64_t a = l0, z = r0 + 1; a < z; a >>= 1, z >>= 1) {
    if (a & 1) chmax(&c->tag[a * NK + k], t), chmax(&c->sub[a * NK + k], t), a++;
    if (z & 1) --z, chmax(&c->tag[z * NK + k], t), chmax(&c->sub[z * NK + k], t);
  }
  /* the ancestors of both ends (one path once they meet) */
  int64_t a = l0 >> 1, z = r0 >> 1;
  for (; a != z; a >>= 1, z >>= 1) chmax(&c->sub[a * NK + k], t), chmax(&c->sub[z * NK + k], t);
  for (; a; a >>= 1) chmax(&c->sub[a * NK + k], t);
}

void fpi_alias_clocks_note(fp_alias_clocks *c, int32_t b, int s, bool read, bool write, int64_t t) {
  if (c->lo[b] < 0) { /* no other buffer sees it: no memo goes stale */
    FP_ASSERT(t >= 0 && t <= UINT32_MAX);
    uint32_t *row = c->iso + (int64_t)c->row[b] * NK;
    if (write && t > row[s]) row[s] = (uint32_t)t;
    if (read && t > row[FP_NSTREAMS + s]) row[FP_NSTREAMS + s] = (uint32_t)t;
    return;
  }
  if (write) note1(c, c->lo[b], c->hi[b], s, t);
  if (read) note1(c, c->lo[b], c->hi[b], FP_NSTREAMS + s, t);
  c->nacc[s]++;
}

void fpi_alias_clocks_max(fp_alias_clocks *c, int32_t b, int s, int64_t *w, int64_t *r) {
  if (c->lo[b] < 0) {
    const uint32_t *row = c->iso + (int64_t)c->row[b] * NK;
    for (int t = 0; t < FP_NSTREAMS; t++)
      if (t != s) w[t] = row[t], r[t] = row[FP_NSTREAMS + t];
    return;
  }
  struct fp_alias_memo *mo = &c->memo[c->row[b]];
  bool fresh = mo->s == s;
  for (int t = 0; t < FP_NSTREAMS && fresh; t++) fresh = t == s || mo->seen[t] == c->nacc[t];
  if (fresh) { /* only stream s noted anything since: the other streams' clocks stand */
    for (int t = 0; t < FP_NSTREAMS; t++)
      if (t != s) w[t] = mo->w[t], r[t] = mo->r[t];
    return;
  }
  int64_t m[NK] = {0};
  int64_t l0 = c->lo[b] + (int64_t)c->n, r0 = c->hi[b] + (int64_t)c->n - 1;
  for (int64_t a = l0, z = r0 + 1; a < z; a >>= 1, z >>= 1) {
    if (a & 1) {
      for (int k = 0; k < NK; k++) chmax(&m[k], c->sub[a * NK + k]);
      a++;
    }
    if (z & 1) {
      --z;
      for (int k = 0; k < NK; k++) chmax(&m[k], c->sub[z * NK + k]);
    }
  }
  /* the ancestors of both ends (one path once they meet) */
  int64_t a = l0 >> 1, z = r0 >> 1;
  for (; a != z; a >>= 1, z >>= 1)
    for (int k = 0; k < NK; k++) chmax(&m[k], c->tag[a * NK + k]), chmax(&m[k], c->tag[z * NK + k]);
  for (; a; a >>= 1)
    for (int k = 0; k < NK; k++) chmax(&m[k], c->tag[a * NK + k]);
  mo->s = s;
  for (int t = 0; t < FP_NSTREAMS; t++) {
    w[t] = mo->w[t] = m[t], r[t] = mo->r[t] = m[FP_NSTREAMS + t];
    mo->seen[t] = c->nacc[t];
  }
}

bool fpi_bufs_overlap(const fp_prog *p, int32_t a, int32_t b) {
  if (a == b) return true;
  const fp_ir_buf *x = &p->bufs[a], *y = &p->bufs[b];
  return placed(x) && placed(y) && x->host == y->host && x->offset < buf_end(y) && y->offset < buf_end(x);
}

void fpi_ir_activation_pairs_of(const fp_prog *p, const int32_t *ids, int32_t n, int32_t *pair) {
  int32_t *stack = malloc(sizeof *stack * ((size_t)n + 1)); /* positions in ids */
  FP_ASSERT(stack);
  int32_t top = 0;
  for (int32_t k = 0; k < n; k++) {
    pair[k] = -1;
    const fp_op *op = &p->ops[ids ? ids[k] : k];
    if (op->code != FP_OP_COMPUTE || op->module < 0 || op->module >= p->nmods) continue;
    if (op->pass == FP_PASS_FWD) {
      stack[top++] = k;
      continue;
    }
    int32_t micro = p->segs[op->seg].micro;
    for (int32_t j = top - 1; j >= 0; j--) { /* the latest forward of the same module and micro-batch */
      if (stack[j] < 0) continue;
      const fp_op *f = &p->ops[ids ? ids[stack[j]] : stack[j]];
      if (f->module != op->module || p->segs[f->seg].micro != micro) continue;
      pair[stack[j]] = k;
      pair[k] = stack[j];
      stack[j] = -1;
      break;
    }
    while (top > 0 && stack[top - 1] < 0) top--;
  }
  free(stack);
}

void fpi_ir_activation_pairs(const fp_prog *p, int32_t *pair) { fpi_ir_activation_pairs_of(p, NULL, p->nops, pair); }
