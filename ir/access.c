/* access.c - what each op reads and writes, and which buffers share bytes.
 *
 * The unit of conflict is the buffer: an op reads or writes a whole buffer as
 * far as ordering is concerned (buffers are per bucket and per kind, so a
 * finer unit would only separate ops that the schedule orders anyway). Two
 * buffers conflict when they are the same buffer or their bytes overlap in
 * the same arena. The verifier's race rule and the planner's sync pass both
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

int fp_op_accesses(const fp_prog *p, const fp_op *op, fp_access *out) {
  int n = 0;
  switch (op->code) {
  case FP_OP_RECORD:
  case FP_OP_WAIT: return 0;
  case FP_OP_COMPUTE:
    for (int32_t k = 0; k < op->nuses; k++) {
      int32_t b = p->uses[op->uses + k];
      fp_buf_cat c = p->bufs[b].cat;
      bool wr = (op->pass == FP_PASS_BWD && c == FP_CAT_UNSHARDED_GRAD) ||
                (op->pass == FP_PASS_OPT && c == FP_CAT_MAIN_WEIGHT);
      n = add(out, n, b, true, wr);
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

typedef struct span {
  int64_t lo, hi;
  int32_t buf;
} span;

static int span_cmp(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return (x->buf > y->buf) - (x->buf < y->buf);
}

bool fp_aliases_build(const fp_prog *p, int64_t max_pairs, fp_aliases *out) {
  memset(out, 0, sizeof *out);
  int32_t nb = p->nbufs;
  span *sp = malloc(((size_t)nb + 1) * sizeof *sp);
  int64_t *deg = calloc((size_t)nb + 2, sizeof *deg);
  FP_ASSERT(sp && deg);
  int32_t ns[2] = {0, 0};
  /* host buffers sort after device ones: offsets are shifted into two
   * disjoint key spaces by sorting on (host, offset) */
  for (int host = 0; host < 2; host++)
    for (int32_t b = 0; b < nb; b++) {
      const fp_ir_buf *x = &p->bufs[b];
      if (x->host != host || x->offset < 0 || x->bytes <= 0) continue;
      int64_t hi = x->offset > INT64_MAX - x->bytes ? INT64_MAX : x->offset + x->bytes;
      sp[ns[0] + ns[1]] = (span){x->offset, hi, b};
      ns[host]++;
    }
  qsort(sp, (size_t)ns[0], sizeof *sp, span_cmp);
  qsort(sp + ns[0], (size_t)ns[1], sizeof *sp, span_cmp);
  /* count pairs: each span overlaps the later ones that start before it ends */
  int64_t pairs = 0;
  for (int host = 0, base = 0; host < 2; base += ns[host], host++)
    for (int32_t k = base; k < base + ns[host]; k++)
      for (int32_t j = k + 1; j < base + ns[host] && sp[j].lo < sp[k].hi; j++) {
        deg[sp[k].buf]++, deg[sp[j].buf]++;
        if (++pairs > max_pairs) {
          free(sp), free(deg);
          return false;
        }
      }
  out->start = malloc(((size_t)nb + 2) * sizeof *out->start);
  out->list = malloc(((size_t)(2 * pairs + nb) + 1) * sizeof *out->list);
  FP_ASSERT(out->start && out->list);
  out->start[0] = 0;
  for (int32_t b = 0; b < nb; b++) out->start[b + 1] = out->start[b] + deg[b] + 1;
  int64_t *fill = deg; /* reuse as fill cursors */
  for (int32_t b = 0; b < nb; b++) {
    fill[b] = out->start[b];
    out->list[fill[b]++] = b; /* a buffer conflicts with itself first */
  }
  for (int host = 0, base = 0; host < 2; base += ns[host], host++)
    for (int32_t k = base; k < base + ns[host]; k++)
      for (int32_t j = k + 1; j < base + ns[host] && sp[j].lo < sp[k].hi; j++) {
        out->list[fill[sp[k].buf]++] = sp[j].buf;
        out->list[fill[sp[j].buf]++] = sp[k].buf;
      }
  free(sp);
  free(deg);
  return true;
}

void fp_aliases_free(fp_aliases *a) {
  free(a->start);
  free(a->list);
  memset(a, 0, sizeof *a);
}

void fp_ir_activation_pairs(const fp_prog *p, int32_t *pair) {
  int32_t *stack = malloc(sizeof *stack * ((size_t)p->nops + 1));
  FP_ASSERT(stack);
  int32_t top = 0;
  for (int32_t i = 0; i < p->nops; i++) {
    pair[i] = -1;
    const fp_op *op = &p->ops[i];
    if (op->code != FP_OP_COMPUTE || op->module < 0 || op->module >= p->nmods) continue;
    if (op->pass == FP_PASS_FWD) {
      stack[top++] = i;
      continue;
    }
    int32_t micro = p->segs[op->seg].micro;
    for (int32_t k = top - 1; k >= 0; k--) { /* the latest forward of the same module and micro-batch */
      if (stack[k] < 0) continue;
      const fp_op *f = &p->ops[stack[k]];
      if (f->module != op->module || p->segs[f->seg].micro != micro) continue;
      pair[stack[k]] = i;
      pair[i] = stack[k];
      stack[k] = -1;
      break;
    }
    while (top > 0 && stack[top - 1] < 0) top--;
  }
  free(stack);
}
