/* verify_xfer.c - the verifier of transfer programs (xfer.h). A transfer
 * that passes it, run as executor/xfer.c runs it (sends and recvs posted
 * without blocking, a local op reading staging or TO waiting for every send
 * and recv posted before it), writes every byte TO needs exactly once and
 * cannot hang. Rules:
 *  X1 operands: processes and peers exist, every operand lies inside its
 *     space (FROM arena, TO arena, the process's staging), dtypes fit the op
 *     (quantize: e4m3 + e8m0 scales of fpi_tx_nscales bytes);
 *  X2 coverage: the TO bytes a process writes are exactly its `need`
 *     regions, each byte once (no overlap, nothing outside, nothing missing);
 *  X3 matching: between each ordered pair of processes the k-th send and
 *     the k-th recv carry the same dtype and count (MPI's order);
 *  X4 progress: simulating every process in its order as the MPI executor
 *     runs it (sends and recvs post at once; a local op reading staging or
 *     TO waits for every send and recv posted before it, fpi_tx_waits), every
 *     process finishes - the per-process orders cannot deadlock;
 *  X5 no read of an unwritten byte: FROM reads lie in a `have` region of the
 *     process (the main-weight bytes its FROM rank holds, never padding);
 *     staging and TO reads lie in bytes earlier ops of the process wrote;
 *     staging bytes are written once; a send never reads bytes a recv wrote.
 *  X6 shared programs (fp_tx.same): a process that repeats another's
 *     program has no ops or needs of its own, repeats one that repeats
 *     none, holds the same roles (FROM, TO) and staging size, and that
 *     program is local work only (no send or recv: nothing to match, so
 *     X2-X5 hold for every process that runs it as for its owner).
 *  X7 values (ir/verify_sem.c): every TO need region ends up holding exactly
 *     its param's FROM elements, converted as the transform says.
 * Messages: "xfer: op N (process p, <kind>): ..." through the diag. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "xfer.h"

#define MAXREP 20

typedef struct iv {
  int32_t proc;
  int64_t a, b;  /* byte range [a, b) */
  int32_t op;    /* the op (X2: writer; X4/X5: the write) */
} iv;

/* by (proc, a), ties in their order (built by op or region index): a radix
 * sort (fpi_sort_records: linear, where qsort made a call per comparison) */
static uint64_t iv_key(const void *rec, int k) {
  const iv *p = rec;
  return k == 0 ? (uint64_t)(uint32_t)p->proc : (uint64_t)p->a;
}
static void iv_sort(iv *v, int64_t n) { fpi_sort_records(v, sizeof *v, n, 2, iv_key); }

static void err(fp_diag *d, const fp_tx *t, int32_t i, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void err(fp_diag *d, const fp_tx *t, int32_t i, const char *fmt, ...) {
  char where[96], msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int32_t p = i >= 0 ? t->ops[i].proc : -1;
  if (t->src && p >= 0 && p < t->nprocs && t->first && i >= t->first[p] && i < t->first[p + 1]) {
    /* read from a file: located at the op, "/procs/p/ops/k" */
    snprintf(where, sizeof where, "/procs/%d/ops/%d", p, i - t->first[p]);
    fpi_diag_json(d, t->src, where, "%s (op %d, %s)", msg, i, fpi_tx_kind_name(t->ops[i].kind));
    return;
  }
  if (i >= 0)
    snprintf(where, sizeof where, "xfer: op %d (process %d, %s)", i, p, fpi_tx_kind_name(t->ops[i].kind));
  else
    snprintf(where, sizeof where, "xfer");
  if (t->src) fpi_diag_errorf(d, t->src->path, "%s: %s", where, msg);
  else fpi_diag_errorf(d, where, "%s", msg);
}

static int64_t space_size(const fp_tx *t, int sp, int32_t proc) {
  switch (sp) {
    case FP_SP_FROM: return proc >= t->from_offset && proc < t->from_offset + t->from_world ? t->from_arena : 0;
    case FP_SP_TO: return proc >= t->to_offset && proc < t->to_offset + t->to_world ? t->to_arena : 0;
    case FP_SP_STAGE: return t->stage_bytes[proc];
    default: return 0;
  }
}

static bool opnd_ok(const fp_tx *t, fp_diag *d, int32_t i, const char *role, fp_tx_ref r, int64_t bytes) {
  int64_t end;
  if (r.space == FP_SP_NONE) {
    err(d, t, i, "has no %s operand", role);
    return false;
  }
  int64_t lim = space_size(t, r.space, t->ops[i].proc);
  if (r.off < 0 || !fpi_add64(r.off, bytes, &end) || end > lim) {
    err(d, t, i, "%s %s+%" PRId64 " ..+%" PRId64 " bytes lies outside the process's %s space (%" PRId64 " bytes)",
        role, fpi_tx_space_name(r.space), (int64_t)r.off, bytes, fpi_tx_space_name(r.space), lim);
    return false;
  }
  return true;
}

/* the reads of op o: up to two (src, aux); a finalize's wire tensors, each
 * one (the alignment between them is never written) */
static int reads(const fp_tx *t, const fp_tx_op *o, fp_tx_ref *r, int64_t *n) {
  int k = 0;
  if (o->kind == FP_TX_RECV) return 0;
  if (o->kind == FP_TX_FINALIZE) {
    for (; k < (int)o->nwire && k < FP_TX_MAX_WIRES; k++) {
      const fp_tx_wire *w = &t->wires[fpi_tx_wire0(o) + k];
      r[k] = o->src, r[k].off += fpi_tx_wire_at(t, o, k), n[k] = w->count * fpi_dtype_size(w->dtype);
    }
    return k;
  }
  r[k] = o->src, n[k++] = o->kind == FP_TX_DEQUANT ? o->n : fpi_tx_src_bytes(t, o);
  if (o->kind == FP_TX_DEQUANT || o->kind == FP_TX_QUANT_AT) r[k] = o->aux, n[k++] = fpi_tx_nscales(o->full_off, o->n);
  if (o->kind == FP_TX_MAX) r[k] = o->aux, n[k++] = o->n;
  return k;
}
static int writes(const fp_tx *t, const fp_tx_op *o, fp_tx_ref *r, int64_t *n) {
  int k = 0;
  if (o->kind == FP_TX_SEND) return 0;
  r[k] = o->dst, n[k++] = o->kind == FP_TX_QUANT ? o->n : fpi_tx_dst_bytes(t, o);
  if (o->kind == FP_TX_QUANT) r[k] = o->aux, n[k++] = fpi_tx_nscales(o->full_off, o->n);
  return k;
}

/* X1 for a transform's op: the param has a transform, its wire tensors
 * exist (1 to FP_TX_MAX_WIRES, counts >= 0), its operands (a finalize's
 * scratch included: its stage claim from src) lie in their spaces */
static bool xf_op_ok(const fp_tx *t, fp_diag *d, int32_t i) {
  const fp_tx_op *o = &t->ops[i];
  const char *xf = fpi_tx_xf_name(t, o->param);
  if (!xf) {
    err(d, t, i, "param '%s' has no transform", t->params[o->param].name);
    return false;
  }
  int64_t w0 = fpi_tx_wire0(o);
  if (o->nwire < 1 || o->nwire > FP_TX_MAX_WIRES || w0 < 0 || w0 + (int64_t)o->nwire > t->nwires) {
    err(d, t, i, "transform '%s': wire tensors [%" PRId64 ", +%u) out of range (1 to %d of the transfer's %" PRId64 ")",
        xf, w0, o->nwire, FP_TX_MAX_WIRES, t->nwires);
    return false;
  }
  for (int k = 0; k < (int)o->nwire; k++)
    if (t->wires[w0 + k].count < 0 || (unsigned)t->wires[w0 + k].dtype >= FP_NDTYPES) {
      err(d, t, i, "transform '%s': wire tensor %d has a negative count or no dtype", xf, k);
      return false;
    }
  if (o->kind == FP_TX_PREP_SEND) {
    bool dst = opnd_ok(t, d, i, "dst", o->dst, fpi_tx_dst_bytes(t, o)), src = opnd_ok(t, d, i, "src", o->src, fpi_tx_src_bytes(t, o));
    if (dst && o->dst.space != FP_SP_STAGE) err(d, t, i, "transform '%s': prepare_send writes its wire tensors outside staging", xf);
    return dst && src && o->dst.space == FP_SP_STAGE;
  }
  bool dst = opnd_ok(t, d, i, "dst", o->dst, fpi_tx_dst_bytes(t, o)), src = opnd_ok(t, d, i, "src", o->src, fpi_tx_stage_need(t, o));
  if (src && o->src.space != FP_SP_STAGE) err(d, t, i, "transform '%s': finalize_recv reads its wire tensors outside staging", xf);
  return dst && src && o->src.space == FP_SP_STAGE;
}

/* X1 for op i of its kind: its dtypes and each operand it reads or writes
 * (every operand checked, each reporting its own error) */
static bool op_kind_ok(const fp_tx *t, fp_diag *d, int32_t i) {
  const fp_tx_op *o = &t->ops[i];
  bool ok = true;
  int64_t ns = fpi_tx_nscales(o->full_off, o->n);
  switch (o->kind) {
    case FP_TX_SEND:
    case FP_TX_RECV:
      if (o->peer < 0 || o->peer >= t->nprocs || o->peer == o->proc) {
        err(d, t, i, "peer %d is not another process of the %" PRId64, o->peer, t->nprocs);
        ok = false;
      }
      ok &= o->kind == FP_TX_SEND ? opnd_ok(t, d, i, "src", o->src, fpi_tx_src_bytes(t, o))
                                  : opnd_ok(t, d, i, "dst", o->dst, fpi_tx_dst_bytes(t, o));
      break;
    case FP_TX_COPY:
      { /* both checked (each reports its own error) */
        bool dst = opnd_ok(t, d, i, "dst", o->dst, fpi_tx_dst_bytes(t, o)), src = opnd_ok(t, d, i, "src", o->src, fpi_tx_src_bytes(t, o));
        ok &= dst && src;
      }
      break;
    case FP_TX_QUANT:
      if (o->dtype != FP_E4M3) {
        err(d, t, i, "quantizes into %s, not e4m3", fpi_dtype_name(o->dtype));
        ok = false;
      }
      {
        bool dst = opnd_ok(t, d, i, "dst", o->dst, o->n), src = opnd_ok(t, d, i, "src", o->src, fpi_tx_src_bytes(t, o)),
             aux = opnd_ok(t, d, i, "aux", o->aux, ns);
        ok &= dst && src && aux;
      }
      break;
    case FP_TX_SCALES:
    case FP_TX_QUANT_AT:
      if (o->dtype != (o->kind == FP_TX_SCALES ? FP_E8M0 : FP_E4M3) || !fpi_dtype_is_user_float(o->sdtype)) {
        err(d, t, i, "%s %s from %s: expected %s from fp32, bf16 or fp16", o->kind == FP_TX_SCALES ? "takes" : "quantizes into",
            fpi_dtype_name(o->dtype), fpi_dtype_name(o->sdtype), o->kind == FP_TX_SCALES ? "e8m0 scales" : "e4m3");
        ok = false;
      }
      {
        bool dst = opnd_ok(t, d, i, "dst", o->dst, fpi_tx_dst_bytes(t, o)), src = opnd_ok(t, d, i, "src", o->src, fpi_tx_src_bytes(t, o)),
             aux = o->kind == FP_TX_SCALES || opnd_ok(t, d, i, "aux", o->aux, ns);
        ok &= dst && src && aux;
      }
      break;
    case FP_TX_MAX:
      if (o->dtype != FP_E8M0 || o->sdtype != FP_E8M0) {
        err(d, t, i, "takes the max of %s into %s: expected e8m0 scales", fpi_dtype_name(o->sdtype), fpi_dtype_name(o->dtype));
        ok = false;
      }
      {
        bool dst = opnd_ok(t, d, i, "dst", o->dst, o->n), src = opnd_ok(t, d, i, "src", o->src, o->n),
             aux = opnd_ok(t, d, i, "aux", o->aux, o->n);
        ok &= dst && src && aux;
      }
      break;
    case FP_TX_DEQUANT:
      if (o->sdtype != FP_E4M3) {
        err(d, t, i, "dequantizes from %s, not e4m3", fpi_dtype_name(o->sdtype));
        ok = false;
      }
      {
        bool dst = opnd_ok(t, d, i, "dst", o->dst, fpi_tx_dst_bytes(t, o)), src = opnd_ok(t, d, i, "src", o->src, o->n),
             aux = opnd_ok(t, d, i, "aux", o->aux, ns);
        ok &= dst && src && aux;
      }
      break;
    case FP_TX_PREP_SEND:
    case FP_TX_FINALIZE: ok &= xf_op_ok(t, d, i); break;
    default: break;
  }
  return ok;
}

/* X1 */
static bool check_ops(const fp_tx *t, fp_diag *d) {
  bool ok = true;
  for (int32_t i = 0; i < t->nops && d->nerrors < MAXREP; i++) {
    const fp_tx_op *o = &t->ops[i];
    if (o->proc < 0 || o->proc >= t->nprocs || o->param < 0 || o->param >= t->nparams || o->n < 0 ||
        (unsigned)o->kind >= FP_TX_NKINDS) {
      err(d, t, i, "process, param, kind or count out of range");
      ok = false;
      continue;
    }
    ok &= op_kind_ok(t, d, i);
    if (o->dst.space == FP_SP_FROM || (o->kind == FP_TX_QUANT && o->aux.space == FP_SP_FROM)) {
      err(d, t, i, "writes into FROM's arena, which a transfer only reads");
      ok = false;
    }
  }
  return ok;
}

/* merge sorted touching intervals of one process (keeps the first's op) */
static int64_t coalesce(iv *v, int64_t n) {
  int64_t m = 0;
  for (int64_t k = 0; k < n; k++) {
    if (m > 0 && v[m - 1].proc == v[k].proc && v[m - 1].b >= v[k].a) {
      if (v[k].b > v[m - 1].b) v[m - 1].b = v[k].b;
    } else {
      v[m++] = v[k];
    }
  }
  return m;
}

/* X2 */
static bool check_cover(const fp_tx *t, fp_diag *d) {
  /* an op writes up to two ranges (a quantize: its elements and scales,
   * both into TO where TO keeps MXFP8) */
  iv *w = malloc(((size_t)t->nops * 2 + 1) * sizeof *w), *nd = malloc(((size_t)t->nneed + 1) * sizeof *nd);
  int64_t nw = 0;
  bool ok = true;
  for (int32_t i = 0; i < t->nops; i++) {
    fp_tx_ref r[FP_TX_MAX_WIRES + 2];
    int64_t n[FP_TX_MAX_WIRES + 2];
    for (int k = 0, nk = writes(t, &t->ops[i], r, n); k < nk; k++)
      if (r[k].space == FP_SP_TO) w[nw++] = (iv){t->ops[i].proc, r[k].off, r[k].off + n[k], i};
  }
  for (int32_t k = 0; k < t->nneed; k++)
    nd[k] = (iv){t->need[k].proc, t->need[k].off, t->need[k].off + t->need[k].bytes, k};
  iv_sort(w, nw);
  iv_sort(nd, t->nneed);
  for (int64_t k = 1; k < t->nneed; k++)
    if (nd[k].proc == nd[k - 1].proc && nd[k].a < nd[k - 1].b) {
      err(d, t, -1, "process %d: need regions of '%s' and '%s' overlap at TO byte %" PRId64, nd[k].proc,
          t->params[t->need[nd[k - 1].op].param].name, t->params[t->need[nd[k].op].param].name, nd[k].a);
      ok = false;
    }
  for (int64_t k = 1; k < nw && d->nerrors < MAXREP; k++)
    if (w[k].proc == w[k - 1].proc && w[k].a < w[k - 1].b) {
      err(d, t, w[k].op, "writes TO bytes [%" PRId64 ", %" PRId64 ") that op %d writes too (a byte written twice)",
          w[k].a, w[k - 1].b < w[k].b ? w[k - 1].b : w[k].b, w[k - 1].op);
      ok = false;
    }
  /* coalesce both (per process) and compare: equal iff every needed byte is
   * written and nothing else */
  int64_t cw = coalesce(w, nw), cn = coalesce(nd, t->nneed);
  int64_t k = 0;
  for (; k < cw && k < cn && d->nerrors < MAXREP; k++) {
    if (w[k].proc == nd[k].proc && w[k].a == nd[k].a && w[k].b == nd[k].b) continue;
    if (w[k].proc < nd[k].proc || (w[k].proc == nd[k].proc && w[k].a < nd[k].a))
      err(d, t, -1, "process %d writes TO bytes from %" PRId64 " (op %d) that no need region of it holds", w[k].proc,
          w[k].a, w[k].op);
    else if (w[k].proc == nd[k].proc && w[k].a == nd[k].a && w[k].b > nd[k].b)
      err(d, t, -1, "process %d writes TO bytes [%" PRId64 ", %" PRId64 ") past its need region (op %d)", w[k].proc,
          nd[k].b, w[k].b, w[k].op);
    else
      err(d, t, -1, "process %d: TO bytes [%" PRId64 ", %" PRId64 ") of param '%s' are never written", nd[k].proc,
          w[k].proc == nd[k].proc && w[k].a == nd[k].a ? w[k].b : nd[k].a, nd[k].b, t->params[t->need[nd[k].op].param].name);
    ok = false;
    break;
  }
  if (ok && k < cn) {
    err(d, t, -1, "process %d: TO bytes [%" PRId64 ", %" PRId64 ") of param '%s' are never written", nd[k].proc,
        nd[k].a, nd[k].b, t->params[t->need[nd[k].op].param].name);
    ok = false;
  } else if (ok && k < cw) {
    err(d, t, -1, "process %d writes TO bytes from %" PRId64 " (op %d) that no need region of it holds", w[k].proc,
        w[k].a, w[k].op);
    ok = false;
  }
  free(w);
  free(nd);
  return ok;
}

/* X3: sends and recvs in pair order; match[i] = the other side's op index */
typedef struct msg {
  int32_t s, r; /* sender, receiver process */
  int32_t op;
} msg;
static int msg_cmp(const void *x, const void *y) {
  const msg *p = x, *q = y;
  if (p->s != q->s) return p->s < q->s ? -1 : 1;
  if (p->r != q->r) return p->r < q->r ? -1 : 1;
  return p->op < q->op ? -1 : p->op > q->op;
}

static bool check_match(const fp_tx *t, fp_diag *d, int32_t *match) {
  msg *S = malloc(((size_t)t->nops + 1) * sizeof *S), *R = malloc(((size_t)t->nops + 1) * sizeof *R);
  int64_t ns = 0, nr = 0;
  bool ok = true;
  for (int32_t i = 0; i < t->nops; i++) {
    const fp_tx_op *o = &t->ops[i];
    match[i] = -1;
    if (o->kind == FP_TX_SEND) S[ns++] = (msg){o->proc, o->peer, i};
    if (o->kind == FP_TX_RECV) R[nr++] = (msg){o->peer, o->proc, i};
  }
  qsort(S, (size_t)ns, sizeof *S, msg_cmp);
  qsort(R, (size_t)nr, sizeof *R, msg_cmp);
  int64_t a = 0, b = 0;
  while ((a < ns || b < nr) && d->nerrors < MAXREP) {
    int c = a >= ns ? 1 : b >= nr ? -1 : (S[a].s != R[b].s || S[a].r != R[b].r) ? msg_cmp(&S[a], &R[b]) : 0;
    if (c < 0) {
      err(d, t, S[a].op, "sends to process %d, which posts no matching recv", S[a].r);
      ok = false;
      a++;
    } else if (c > 0) {
      err(d, t, R[b].op, "receives from process %d, which posts no matching send", R[b].s);
      ok = false;
      b++;
    } else {
      const fp_tx_op *x = &t->ops[S[a].op], *y = &t->ops[R[b].op];
      if (x->dtype != y->dtype || x->n != y->n) {
        const char *xf = fpi_tx_xf_name(t, y->param);
        err(d, t, R[b].op, "receives %" PRId64 " %s but its matching send, op %d, sends %" PRId64 " %s%s%s%s", y->n,
            fpi_dtype_name(y->dtype), S[a].op, x->n, fpi_dtype_name(x->dtype), xf ? " (transform '" : "",
            xf ? xf : "", xf ? "': its prepare_send and prepare_recv give other wire tensors for this slice)" : "");
        ok = false;
      }
      match[S[a].op] = R[b].op;
      match[R[b].op] = S[a].op;
      a++, b++;
    }
  }
  free(S);
  free(R);
  return ok;
}

/* X5 on one process's staging or TO space sp: every byte an op reads was
 * written by an earlier op of the process; staging bytes are written once
 * (so an Isend's bytes are never overwritten in flight); a send never reads
 * bytes a recv wrote (sends do not wait: a process forwards nothing). The
 * bytes are cut into segments at every write's and read's ends; each
 * segment gets its first writer by painting the writes in order (a
 * union-find skips the painted ones); a read then checks its segments:
 * O(n log n) in the process's ops (the scan of every earlier write per read
 * was 737 s of a 27M-op transfer's verify). */
typedef struct seg_scratch {
  uint64_t *c;     /* segment bounds, sorted and unique */
  int32_t *wr;     /* a segment's first writer (op), -1: none */
  int64_t *nxt;    /* union-find: the next segment not yet painted */
} seg_scratch;

static int64_t lower(const uint64_t *c, int64_t n, uint64_t x) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (c[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int64_t unpainted(int64_t *nxt, int64_t s) {
  int64_t r = s;
  while (nxt[r] != r) r = nxt[r];
  while (nxt[s] != r) {
    int64_t n = nxt[s];
    nxt[s] = r;
    s = n;
  }
  return r;
}

static bool check_space(const fp_tx *t, fp_diag *d, int64_t p, int sp, seg_scratch *z) {
  int32_t lo = t->first[p], hi = t->first[p + 1];
  int64_t nc = 0;
  for (int32_t i = lo; i < hi; i++) {
    fp_tx_ref r[FP_TX_MAX_WIRES + 2];
    int64_t n[FP_TX_MAX_WIRES + 2];
    for (int pass = 0; pass < 2; pass++) {
      int k = pass ? writes(t, &t->ops[i], r, n) : reads(t, &t->ops[i], r, n);
      for (int q = 0; q < k; q++)
        if (r[q].space == sp && n[q] > 0) z->c[nc++] = (uint64_t)r[q].off, z->c[nc++] = (uint64_t)(r[q].off + n[q]);
    }
  }
  if (nc == 0) return true;
  fpi_sort_u64(z->c, NULL, nc);
  int64_t m = 0;
  for (int64_t k = 0; k < nc; k++)
    if (m == 0 || z->c[m - 1] != z->c[k]) z->c[m++] = z->c[k];
  int64_t nseg = m - 1;
  for (int64_t s = 0; s <= nseg; s++) z->wr[s] = -1, z->nxt[s] = s;
  bool ok = true;
  for (int32_t i = lo; i < hi && d->nerrors < MAXREP; i++) {
    fp_tx_ref r[FP_TX_MAX_WIRES + 2];
    int64_t n[FP_TX_MAX_WIRES + 2];
    int k = reads(t, &t->ops[i], r, n);
    for (int q = 0; q < k; q++) {
      if (r[q].space != sp || n[q] == 0) continue;
      int64_t s0 = lower(z->c, m, (uint64_t)r[q].off), s1 = lower(z->c, m, (uint64_t)(r[q].off + n[q]));
      for (int64_t s = s0; s < s1; s++) {
        int32_t w = z->wr[s];
        if (w < 0 || w >= i) {
          err(d, t, i, "reads %s bytes [%" PRIu64 ", %" PRId64 ") no earlier op of the process wrote",
              fpi_tx_space_name(sp), z->c[s], r[q].off + n[q]);
          ok = false;
          break;
        }
        if (t->ops[i].kind == FP_TX_SEND && t->ops[w].kind == FP_TX_RECV) {
          err(d, t, i, "sends %s bytes from %" PRIu64 " that op %d received: a process forwards nothing (its sends "
              "do not wait for its recvs)", fpi_tx_space_name(sp), z->c[s], w);
          ok = false;
          break;
        }
      }
    }
    /* then its writes paint: an op's write is not visible to its own reads */
    k = writes(t, &t->ops[i], r, n);
    for (int q = 0; q < k; q++) {
      if (r[q].space != sp || n[q] == 0) continue;
      int64_t s0 = lower(z->c, m, (uint64_t)r[q].off), s1 = lower(z->c, m, (uint64_t)(r[q].off + n[q]));
      for (int64_t s = s0; s < s1; s++) {
        int64_t u = unpainted(z->nxt, s);
        if (u != s && sp == FP_SP_STAGE && ok) {
          err(d, t, i, "writes staging bytes from %" PRIu64 " that op %d already wrote (staging is written once)",
              z->c[s], z->wr[s]);
          ok = false;
        }
        if (u >= s1) break;
        z->wr[u] = i;
        z->nxt[u] = u + 1;
        s = u;
      }
    }
  }
  return ok;
}

/* X5: FROM reads inside the process's have regions; staging and TO reads
 * of bytes earlier ops wrote (check_space) */
static bool check_reads(const fp_tx *t, fp_diag *d) {
  bool ok = true;
  iv *hv = malloc(((size_t)t->nhave + 1) * sizeof *hv);
  int32_t most = 0;
  for (int64_t p = 0; p < t->nprocs; p++)
    if (t->first[p + 1] - t->first[p] > most) most = t->first[p + 1] - t->first[p];
  seg_scratch z = {malloc(((size_t)most * (2 * FP_TX_MAX_WIRES + 4) + 1) * sizeof *z.c), malloc(((size_t)most * (2 * FP_TX_MAX_WIRES + 4) + 1) * sizeof *z.wr),
                   malloc(((size_t)most * (2 * FP_TX_MAX_WIRES + 4) + 1) * sizeof *z.nxt)};
  FP_ASSERT(hv && z.c && z.wr && z.nxt);
  for (int32_t k = 0; k < t->nhave; k++) hv[k] = (iv){t->have[k].proc, t->have[k].off, t->have[k].off + t->have[k].bytes, k};
  iv_sort(hv, t->nhave);
  for (int64_t p = 0; p < t->nprocs && d->nerrors < MAXREP; p++) {
    for (int32_t i = t->first[p]; i < t->first[p + 1] && d->nerrors < MAXREP; i++) {
      const fp_tx_op *o = &t->ops[i];
      fp_tx_ref r[FP_TX_MAX_WIRES + 2];
      int64_t n[FP_TX_MAX_WIRES + 2];
      int nr = reads(t, o, r, n);
      for (int q = 0; q < nr; q++) {
        if (r[q].space != FP_SP_FROM) continue;
        /* the last have region starting at or before the read */
        int64_t lo = 0, hi = t->nhave;
        while (lo < hi) {
          int64_t mid = (lo + hi) / 2;
          if (hv[mid].proc < o->proc || (hv[mid].proc == o->proc && hv[mid].a <= r[q].off)) lo = mid + 1;
          else hi = mid;
        }
        if (lo == 0 || hv[lo - 1].proc != o->proc || hv[lo - 1].b < r[q].off + n[q]) {
          err(d, t, i, "reads FROM bytes [%" PRId64 ", %" PRId64 ") its FROM rank does not hold (padding, another "
              "param, or no FROM rank on this process)", (int64_t)r[q].off, r[q].off + n[q]);
          ok = false;
        }
      }
    }
    ok &= check_space(t, d, p, FP_SP_STAGE, &z);
    ok &= check_space(t, d, p, FP_SP_TO, &z);
  }
  free(hv);
  free(z.c);
  free(z.wr);
  free(z.nxt);
  return ok;
}

/* X4: every process finishes, simulated as the MPI executor runs: sends and
 * recvs post at once; an op that fpi_tx_waits waits for every send and recv
 * its process posted before it, each of which completes once its match is
 * posted. A worklist: a blocked process waits on the one whose op it needs
 * posted and runs again when that one moves. */
static bool check_progress(const fp_tx *t, fp_diag *d, const int32_t *match) {
  int64_t P = t->nprocs;
  int32_t *pc = malloc(((size_t)P + 1) * sizeof *pc), *wc = malloc(((size_t)P + 1) * sizeof *wc);
  int64_t *head = malloc(((size_t)P + 1) * sizeof *head), *nextw = malloc(((size_t)P + 1) * sizeof *nextw);
  int64_t *queue = malloc(((size_t)P + 1) * sizeof *queue);
  bool *inq = calloc((size_t)P + 1, sizeof *inq);
  FP_ASSERT(pc && wc && head && nextw && queue && inq);
  int64_t qh = 0, qn = 0; /* a ring of at most P processes */
  for (int64_t p = 0; p < P; p++) pc[p] = wc[p] = t->first[p], head[p] = -1, queue[qn++] = p, inq[p] = true;
  while (qn > 0) {
    int64_t p = queue[qh];
    qh = (qh + 1) % P, qn--;
    inq[p] = false;
    int32_t start = pc[p];
    while (pc[p] < t->first[p + 1]) {
      int32_t i = pc[p];
      int64_t blocker = -1;
      while (fpi_tx_waits(&t->ops[i]) && wc[p] < i) {
        int32_t j = wc[p], m = t->ops[j].kind == FP_TX_SEND || t->ops[j].kind == FP_TX_RECV ? match[j] : -2;
        if (m == -1) break;                                    /* unmatched (X3): never completes */
        if (m >= 0 && pc[t->ops[m].proc] <= m) { blocker = t->ops[m].proc; break; }
        wc[p]++;
      }
      if (fpi_tx_waits(&t->ops[i]) && wc[p] < i) {
        if (blocker >= 0) nextw[p] = head[blocker], head[blocker] = p;
        break;
      }
      pc[p]++;
    }
    if (pc[p] != start)
      for (int64_t w = head[p]; w >= 0; w = nextw[w])
        if (!inq[w]) queue[(qh + qn++) % P] = w, inq[w] = true;
    if (pc[p] != start) head[p] = -1;
  }
  bool ok = true;
  for (int64_t p = 0; p < P && d->nerrors < MAXREP; p++)
    if (pc[p] < t->first[p + 1]) {
      int32_t i = pc[p], j = wc[p], m = match[j];
      const char *kind = t->ops[j].kind == FP_TX_SEND ? "send" : "recv";
      if (m >= 0)
        err(d, t, i, "waits for its %s, op %d, whose matching %s (op %d on process %d) is never reached: the orders "
            "deadlock", kind, j, t->ops[m].kind == FP_TX_SEND ? "send" : "recv", m, t->ops[m].proc);
      else
        err(d, t, i, "waits for its %s, op %d, which nothing matches: the orders deadlock", kind, j);
      ok = false;
    }
  free(pc);
  free(wc);
  free(head);
  free(nextw);
  free(queue);
  free(inq);
  return ok;
}

/* X6; located at /procs/p/same when read from a file */
static void same_err(fp_diag *d, const fp_tx *t, int64_t p, const char *msg) {
  char where[64];
  if (t->src) {
    snprintf(where, sizeof where, "/procs/%" PRId64 "/same", p);
    fpi_diag_json(d, t->src, where, "%s", msg);
  } else {
    fpi_diag_errorf(d, "xfer", "process %" PRId64 ": %s", p, msg);
  }
}
static bool check_same(const fp_tx *t, fp_diag *d) {
  if (!t->same) return true;
  bool ok = true;
  bool *p2p = calloc((size_t)t->nprocs + 1, sizeof *p2p); /* a process's program sends or receives */
  FP_ASSERT(p2p);
  for (int32_t i = 0; i < t->nops; i++)
    if ((t->ops[i].kind == FP_TX_SEND || t->ops[i].kind == FP_TX_RECV) && t->ops[i].proc >= 0 &&
        t->ops[i].proc < t->nprocs)
      p2p[t->ops[i].proc] = true;
  for (int64_t p = 0; p < t->nprocs && d->nerrors < MAXREP; p++) {
    int32_t q = t->same[p];
    if (q < 0) continue;
    const char *bad = NULL;
    if (q >= t->nprocs || q == p) bad = "repeats no other process of the transfer";
    else if (t->same[q] >= 0) bad = "repeats a process that itself repeats another";
    else if (t->first[p] != t->first[p + 1] || t->need_first[p] != t->need_first[p + 1])
      bad = "repeats another process's program but has ops or needs of its own";
    else if (p2p[q]) bad = "repeats a program with sends or recvs (only local work is repeated)";
    else if (space_size(t, FP_SP_FROM, (int32_t)p) != space_size(t, FP_SP_FROM, q) ||
             space_size(t, FP_SP_TO, (int32_t)p) != space_size(t, FP_SP_TO, q) || t->stage_bytes[p] != t->stage_bytes[q])
      bad = "repeats a process of other roles (FROM, TO) or staging size";
    if (bad) {
      same_err(d, t, p, bad);
      ok = false;
    }
  }
  free(p2p);
  return ok;
}

bool fpi_tx_verify(const fp_tx *t, fp_diag *d) {
  int errs = d->nerrors;
  for (int32_t i = 1; i < t->nops; i++)
    if (t->ops[i].proc < t->ops[i - 1].proc) {
      err(d, t, i, "ops are not grouped by process");
      return false;
    }
  if (!check_ops(t, d) || !check_same(t, d)) return false;
  check_cover(t, d);
  int32_t *match = malloc(((size_t)t->nops + 1) * sizeof *match);
  FP_ASSERT(match);
  bool m = check_match(t, d, match);
  bool r = check_reads(t, d);
  if (m && r) check_progress(t, d, match);
  free(match);
  /* X7 (ir/verify_sem.c): what the TO bytes hold */
  if (d->nerrors == errs) fpi_tx_verify_sem(t, d);
  return d->nerrors == errs;
}
