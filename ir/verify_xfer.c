/* verify_xfer.c - the verifier of transfer programs (xfer.h). A transfer
 * that passes it, run as executor/xfer.c runs it (sends and recvs posted
 * without blocking, an op reading what a recv writes waiting for that recv),
 * writes every byte TO needs exactly once and cannot hang. Rules:
 *  X1 operands: processes and peers exist, every operand lies inside its
 *     space (FROM arena, TO arena, the process's staging), dtypes fit the op
 *     (quantize: e4m3 + e8m0 scales of fp_tx_nscales bytes);
 *  X2 coverage: the TO bytes a process writes are exactly its `need`
 *     regions, each byte once (no overlap, nothing outside, nothing missing);
 *  X3 matching: between each ordered pair of processes the k-th send and
 *     the k-th recv carry the same dtype and count (MPI's order);
 *  X4 progress: simulating every process in its order (a local op blocks
 *     until the sends matching the recvs it reads are posted), every process
 *     finishes - the per-process orders cannot deadlock;
 *  X5 no read of an unwritten byte: FROM reads lie in a `have` region of the
 *     process (the main-weight bytes its FROM rank holds, never padding);
 *     staging and TO reads lie in bytes earlier ops of the process wrote.
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

static int iv_cmp(const void *x, const void *y) {
  const iv *p = x, *q = y;
  if (p->proc != q->proc) return p->proc < q->proc ? -1 : 1;
  if (p->a != q->a) return p->a < q->a ? -1 : 1;
  return p->op < q->op ? -1 : p->op > q->op;
}

static void err(fp_diag *d, const fp_tx *t, int32_t i, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void err(fp_diag *d, const fp_tx *t, int32_t i, const char *fmt, ...) {
  char where[96], msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (i >= 0)
    snprintf(where, sizeof where, "xfer: op %d (process %d, %s)", i, t->ops[i].proc, fp_tx_kind_name(t->ops[i].kind));
  else
    snprintf(where, sizeof where, "xfer");
  fp_diag_errorf(d, where, "%s", msg);
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
  if (r.off < 0 || !fp_add64(r.off, bytes, &end) || end > lim) {
    err(d, t, i, "%s %s+%" PRId64 " ..+%" PRId64 " bytes lies outside the process's %s space (%" PRId64 " bytes)",
        role, fp_tx_space_name(r.space), r.off, bytes, fp_tx_space_name(r.space), lim);
    return false;
  }
  return true;
}

/* X1 */
static bool check_ops(const fp_tx *t, fp_diag *d) {
  bool ok = true;
  for (int32_t i = 0; i < t->nops && d->nerrors < MAXREP; i++) {
    const fp_tx_op *o = &t->ops[i];
    if (o->proc < 0 || o->proc >= t->nprocs || o->param < 0 || o->param >= t->nparams || o->n < 0 ||
        (int)o->kind < 0 || o->kind >= FP_TX_NKINDS) {
      err(d, t, i, "process, param, kind or count out of range");
      ok = false;
      continue;
    }
    int64_t ns = fp_tx_nscales(o->full_off, o->n);
    switch (o->kind) {
      case FP_TX_SEND:
      case FP_TX_RECV:
        if (o->peer < 0 || o->peer >= t->nprocs || o->peer == o->proc) {
          err(d, t, i, "peer %d is not another process of the %" PRId64, o->peer, t->nprocs);
          ok = false;
        }
        ok &= o->kind == FP_TX_SEND ? opnd_ok(t, d, i, "src", o->src, fp_tx_src_bytes(o))
                                    : opnd_ok(t, d, i, "dst", o->dst, fp_tx_dst_bytes(o));
        break;
      case FP_TX_COPY:
        { /* both checked (each reports its own error) */
          bool dst = opnd_ok(t, d, i, "dst", o->dst, fp_tx_dst_bytes(o)), src = opnd_ok(t, d, i, "src", o->src, fp_tx_src_bytes(o));
          ok &= dst && src;
        }
        break;
      case FP_TX_QUANT:
        if (o->dtype != FP_E4M3) {
          err(d, t, i, "quantizes into %s, not e4m3", fp_dtype_name(o->dtype));
          ok = false;
        }
        {
          bool dst = opnd_ok(t, d, i, "dst", o->dst, o->n), src = opnd_ok(t, d, i, "src", o->src, fp_tx_src_bytes(o)),
               aux = opnd_ok(t, d, i, "aux", o->aux, ns);
          ok &= dst && src && aux;
        }
        break;
      case FP_TX_DEQUANT:
        if (o->sdtype != FP_E4M3) {
          err(d, t, i, "dequantizes from %s, not e4m3", fp_dtype_name(o->sdtype));
          ok = false;
        }
        {
          bool dst = opnd_ok(t, d, i, "dst", o->dst, fp_tx_dst_bytes(o)), src = opnd_ok(t, d, i, "src", o->src, o->n),
               aux = opnd_ok(t, d, i, "aux", o->aux, ns);
          ok &= dst && src && aux;
        }
        break;
      default: break;
    }
    if (o->dst.space == FP_SP_FROM) {
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
  iv *w = malloc(((size_t)t->nops + 1) * sizeof *w), *nd = malloc(((size_t)t->nneed + 1) * sizeof *nd);
  int64_t nw = 0;
  bool ok = true;
  for (int32_t i = 0; i < t->nops; i++) {
    const fp_tx_op *o = &t->ops[i];
    if (o->dst.space == FP_SP_TO && o->kind != FP_TX_SEND)
      w[nw++] = (iv){o->proc, o->dst.off, o->dst.off + fp_tx_dst_bytes(o), i};
  }
  for (int32_t k = 0; k < t->nneed; k++)
    nd[k] = (iv){t->need[k].proc, t->need[k].off, t->need[k].off + t->need[k].bytes, k};
  qsort(w, (size_t)nw, sizeof *w, iv_cmp);
  qsort(nd, (size_t)t->nneed, sizeof *nd, iv_cmp);
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
        err(d, t, R[b].op, "receives %" PRId64 " %s but its matching send, op %d, sends %" PRId64 " %s", y->n,
            fp_dtype_name(y->dtype), S[a].op, x->n, fp_dtype_name(x->dtype));
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

/* the reads of op o: up to two (src, aux) */
static int reads(const fp_tx_op *o, fp_tx_ref *r, int64_t *n) {
  int k = 0;
  if (o->kind == FP_TX_RECV) return 0;
  r[k] = o->src, n[k++] = o->kind == FP_TX_DEQUANT ? o->n : fp_tx_src_bytes(o);
  if (o->kind == FP_TX_DEQUANT) r[k] = o->aux, n[k++] = fp_tx_nscales(o->full_off, o->n);
  return k;
}
static int writes(const fp_tx_op *o, fp_tx_ref *r, int64_t *n) {
  int k = 0;
  if (o->kind == FP_TX_SEND) return 0;
  r[k] = o->dst, n[k++] = o->kind == FP_TX_QUANT ? o->n : fp_tx_dst_bytes(o);
  if (o->kind == FP_TX_QUANT) r[k] = o->aux, n[k++] = fp_tx_nscales(o->full_off, o->n);
  return k;
}

/* X5 (and the recv dependencies X4 needs): for every read of staging/TO,
 * the earlier writes of the process covering it */
static bool check_reads(const fp_tx *t, fp_diag *d, int32_t **deps, int32_t *ndeps) {
  bool ok = true;
  iv *hv = malloc(((size_t)t->nhave + 1) * sizeof *hv);
  for (int32_t k = 0; k < t->nhave; k++) hv[k] = (iv){t->have[k].proc, t->have[k].off, t->have[k].off + t->have[k].bytes, k};
  qsort(hv, (size_t)t->nhave, sizeof *hv, iv_cmp);
  for (int64_t p = 0; p < t->nprocs; p++) {
    for (int32_t i = t->first[p]; i < t->first[p + 1] && d->nerrors < MAXREP; i++) {
      const fp_tx_op *o = &t->ops[i];
      fp_tx_ref r[2];
      int64_t n[2];
      int nr = reads(o, r, n);
      ndeps[i] = 0;
      deps[i] = NULL;
      for (int q = 0; q < nr; q++) {
        if (r[q].space == FP_SP_FROM) {
          /* the last have region starting at or before the read */
          int64_t lo = 0, hi = t->nhave;
          while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (hv[mid].proc < o->proc || (hv[mid].proc == o->proc && hv[mid].a <= r[q].off)) lo = mid + 1;
            else hi = mid;
          }
          if (lo == 0 || hv[lo - 1].proc != o->proc || hv[lo - 1].b < r[q].off + n[q]) {
            err(d, t, i, "reads FROM bytes [%" PRId64 ", %" PRId64 ") its FROM rank does not hold (padding, another "
                "param, or no FROM rank on this process)", r[q].off, r[q].off + n[q]);
            ok = false;
          }
          continue;
        }
        /* staging / TO: covered by the union of earlier writes */
        int64_t at = r[q].off, end = r[q].off + n[q];
        bool progress = true;
        while (at < end && progress) {
          progress = false;
          for (int32_t j = t->first[p]; j < i; j++) {
            fp_tx_ref w[2];
            int64_t m[2];
            int nw = writes(&t->ops[j], w, m);
            for (int z = 0; z < nw; z++)
              if (w[z].space == r[q].space && w[z].off <= at && w[z].off + m[z] > at) {
                at = w[z].off + m[z];
                progress = true;
                if (t->ops[j].kind == FP_TX_RECV) {
                  int32_t *nd = realloc(deps[i], ((size_t)ndeps[i] + 1) * sizeof *nd);
                  if (nd) {
                    deps[i] = nd;
                    deps[i][ndeps[i]++] = j;
                  }
                }
              }
          }
        }
        if (at < end) {
          err(d, t, i, "reads %s bytes [%" PRId64 ", %" PRId64 ") no earlier op of the process wrote",
              fp_tx_space_name(r[q].space), at, end);
          ok = false;
        }
      }
    }
  }
  free(hv);
  return ok;
}

/* X4: every process finishes */
static bool check_progress(const fp_tx *t, fp_diag *d, const int32_t *match, int32_t **deps, const int32_t *ndeps) {
  int32_t *pc = malloc(((size_t)t->nprocs + 1) * sizeof *pc);
  for (int64_t p = 0; p < t->nprocs; p++) pc[p] = t->first[p];
  bool moved = true, ok = true;
  while (moved) {
    moved = false;
    for (int64_t p = 0; p < t->nprocs; p++) {
      while (pc[p] < t->first[p + 1]) {
        int32_t i = pc[p];
        bool ready = true;
        for (int32_t k = 0; k < ndeps[i] && ready; k++) {
          int32_t s = match[deps[i][k]]; /* the send feeding that recv must be posted */
          ready = s >= 0 && pc[t->ops[s].proc] > s;
        }
        if (!ready) break;
        pc[p]++;
        moved = true;
      }
    }
  }
  for (int64_t p = 0; p < t->nprocs && d->nerrors < MAXREP; p++)
    if (pc[p] < t->first[p + 1]) {
      int32_t i = pc[p], s = -1;
      for (int32_t k = 0; k < ndeps[i]; k++)
        if (match[deps[i][k]] >= 0 && pc[t->ops[match[deps[i][k]]].proc] <= match[deps[i][k]]) s = match[deps[i][k]];
      if (s >= 0)
        err(d, t, i, "waits for op %d's data, whose send (op %d on process %d) is never reached: the orders deadlock",
            s >= 0 ? match[s] : -1, s, t->ops[s].proc);
      else
        err(d, t, i, "waits for a recv that no send feeds: the orders deadlock");
      ok = false;
    }
  free(pc);
  return ok;
}

bool fp_tx_verify(const fp_tx *t, fp_diag *d) {
  int errs = d->nerrors;
  for (int32_t i = 1; i < t->nops; i++)
    if (t->ops[i].proc < t->ops[i - 1].proc) {
      err(d, t, i, "ops are not grouped by process");
      return false;
    }
  if (!check_ops(t, d)) return false;
  check_cover(t, d);
  int32_t *match = malloc(((size_t)t->nops + 1) * sizeof *match);
  int32_t **deps = calloc((size_t)t->nops + 1, sizeof *deps);
  int32_t *ndeps = calloc((size_t)t->nops + 1, sizeof *ndeps);
  bool m = check_match(t, d, match);
  bool r = check_reads(t, d, deps, ndeps);
  if (m && r) check_progress(t, d, match, deps, ndeps);
  for (int32_t i = 0; i < t->nops; i++) free(deps[i]);
  free(deps);
  free(ndeps);
  free(match);
  return d->nerrors == errs;
}
