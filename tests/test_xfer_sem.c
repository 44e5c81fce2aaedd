/* test_xfer_sem.c - the transfer verifier (rules X1-X7, ir/verify_xfer.c
 * and ir/verify_sem.c) attacked with mutants, as test_sem.c attacks rule 9.
 *
 * Sources: transfers compiled here (fpi_reshard) between plans of the MPI
 * tests' models (tests/mpi): casts between main dtypes, overlapping and
 * disjoint rank sets (TO after FROM, and the way back), programs shared
 * between processes, ragged shards, weights with their optimizer states,
 * MXFP8 on the wire (slices starting inside blocks), the reshard transforms
 * (sender- and receiver-side MXFP8), weights TO keeps as MXFP8 (whole
 * blocks quantized by one sender, and blocks split between FROM ranks: each
 * part's scale, their max at a leader, the parts quantized at it), MXFP8
 * weights passed through as they are, and MXFP8 weights dequantized. Each
 * original must verify; then every mutant of it (one change each) is
 * verified again with the planner's own `have` regions (what each FROM
 * rank holds), as fpi_reshard verifies before it hands a transfer out.
 *
 * The strict classes: every mutant must be rejected (an operand moved by an
 * element or by part of one, a scale operand moved to the next byte or to
 * another scale the process wrote before, a count off by one, a dtype or a
 * source dtype changed, a peer changed, an op removed or repeated, an
 * operand's space changed, the first element of an op that computes with it
 * moved, a need region moved or its elements renamed), but for one
 * equivalent named where it is counted. Two adjacent ops of a process
 * swapped may be accepted only where they commute (no byte one writes the
 * other touches, not two sends to one peer or two recvs from one: the same
 * transfer in another order, whose progress X4 proves). The first element
 * or the param of a copy, send or recv changed are labels (neither the
 * values nor the executors' work depend on them; the executors check them
 * against the plans' layouts when they run): counted. The table goes to
 * stdout. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flexplan_compile.h"
#include "ir/handle.h"
#include "ir/irpriv.h"
#include "ir/xfer.h"
#include "planner/reshard.h"

enum {
  /* reported */
  M_SWAP, M_LABEL, M_PARAM,
  /* strict */
  M_OFF, M_SUB, M_SCALE, M_COUNT, M_DTYPE, M_SDTYPE, M_PEER, M_DEL, M_DUP, M_SPACE, M_BLOCK, M_NEED_MOVE,
  M_NEED_ELEM, M_SCALE_SRC, M_NEED_PLANE, M_NKINDS
};
#define M_STRICT M_OFF
static const char *kind_name[M_NKINDS] = {
    "ops swapped",     "label moved",     "param changed",   "operand moved",   "offset < 1 elem",
    "scale moved",     "count off by 1",  "dtype changed",   "sdtype changed",  "peer changed",
    "op removed",      "op repeated",     "space changed",   "first elem moved", "need moved",
    "need renamed",    "scale read else", "need plane moved"};

typedef struct tally {
  int n, rejected, accepted;
  char first[1000];
} tally;
static tally T[M_NKINDS];
static int fails;
static uint64_t H0;   /* the source's hash (fpi_tx_hash) */
static int same_hash; /* mutants that differ from their source but hash as it */

/* the operands of an op: 0 dst, 1 src, 2 aux (prep_send's and finalize's aux
 * indexes wire tensors: not an operand) */
static fp_tx_ref *opnd(fp_tx_op *o, int w) {
  if (w == 2 && (o->kind == FP_TX_PREP_SEND || o->kind == FP_TX_FINALIZE)) return NULL;
  fp_tx_ref *r = w == 0 ? &o->dst : w == 1 ? &o->src : &o->aux;
  return r->space == FP_SP_NONE ? NULL : r;
}
/* the bytes of one element of operand w */
static int64_t elem(const fp_tx *t, const fp_tx_op *o, int w) {
  if (w == 2) return 1; /* scales, or max's second input */
  if (o->kind == FP_TX_PREP_SEND && w == 0) return fpi_dtype_size(t->wires[fpi_tx_wire0(o)].dtype);
  if (o->kind == FP_TX_FINALIZE && w == 1) return fpi_dtype_size(t->wires[fpi_tx_wire0(o)].dtype);
  if (w == 0) return fpi_dtype_size(o->kind == FP_TX_QUANT || o->kind == FP_TX_QUANT_AT ? FP_E4M3 : o->dtype);
  return fpi_dtype_size(o->kind == FP_TX_DEQUANT ? FP_E4M3 : o->sdtype);
}
static bool is_scale_opnd(const fp_tx_op *o, int w) {
  if (o->kind == FP_TX_MAX) return true;
  if (o->kind == FP_TX_SCALES) return w == 0;
  if (o->kind == FP_TX_QUANT || o->kind == FP_TX_QUANT_AT || o->kind == FP_TX_DEQUANT) return w == 2;
  return o->dtype == FP_E8M0 && w < 2;
}
static bool user_float(fp_dtype d) { return d == FP_F32 || d == FP_BF16 || d == FP_F16; }
/* kinds whose first element is not a label: the MXFP8 blocks, a transform's slice */
static bool computes_at(fp_tx_kind k) { return k != FP_TX_COPY && k != FP_TX_SEND && k != FP_TX_RECV; }

/* the offsets where ops of o's process before it write scales into space sp
 * (scales, max, a recv of e8m0, a quantize's scales): the nth of them, or
 * how many when nth < 0 */
static int64_t scale_writer(const fp_tx *t, int32_t i, int sp, int64_t not_at, int nth) {
  int n = 0;
  for (int32_t j = t->first[t->ops[i].proc]; j < i; j++) {
    const fp_tx_op *w = &t->ops[j];
    fp_tx_ref r = w->kind == FP_TX_QUANT ? w->aux : w->dst;
    bool sc = w->kind == FP_TX_SCALES || w->kind == FP_TX_MAX || w->kind == FP_TX_QUANT ||
              (w->kind == FP_TX_RECV && w->dtype == FP_E8M0);
    if (!sc || (int)r.space != sp || r.off == not_at) continue;
    if (n++ == nth) return r.off;
  }
  return nth < 0 ? n : -1;
}
/* an op's operand that reads scales (-1: none) */
static int scale_read(const fp_tx_op *o, int nth) {
  if (o->kind == FP_TX_QUANT_AT || o->kind == FP_TX_DEQUANT) return nth == 0 ? 2 : -1;
  if (o->kind == FP_TX_MAX) return nth < 2 ? 1 + nth : -1;
  if ((o->kind == FP_TX_SEND || o->kind == FP_TX_COPY) && o->dtype == FP_E8M0) return nth == 0 ? 1 : -1;
  return -1;
}

/* how many mutants of kind k op (or need region) i has (0: not a candidate) */
static int32_t max_plane(const fp_tx *t) {
  int32_t m = 0;
  for (int32_t j = 0; j < t->nneed; j++) m = t->need[j].plane > m ? t->need[j].plane : m;
  return m;
}
static int variants(const fp_tx *t, int k, int32_t i) {
  if (k == M_NEED_MOVE || k == M_NEED_ELEM) return t->need[i].bytes > 0 ? 2 : 0;
  if (k == M_NEED_PLANE) return t->need[i].bytes > 0 ? max_plane(t) : 0; /* every other plane */
  const fp_tx_op *o = &t->ops[i];
  int n = 0;
  switch (k) {
    case M_SWAP: return i + 1 < t->nops && t->ops[i + 1].proc == o->proc;
    case M_LABEL: return !computes_at(o->kind) ? 2 : 0;
    case M_PARAM: return !computes_at(o->kind) && t->nparams > 1;
    case M_OFF:
    case M_SPACE:
      for (int w = 0; w < 3; w++) n += opnd((fp_tx_op *)o, w) != NULL;
      return k == M_SPACE ? n : 2 * n;
    case M_SUB:
      for (int w = 0; w < 3; w++) n += opnd((fp_tx_op *)o, w) && elem(t, o, w) > 1;
      return n;
    case M_SCALE:
      for (int w = 0; w < 3; w++) n += opnd((fp_tx_op *)o, w) && is_scale_opnd(o, w);
      return 2 * n;
    case M_COUNT: return o->n > 1 ? 2 : 1;
    case M_DTYPE: return user_float(o->dtype) ? 2 : 0;
    case M_SDTYPE: return user_float(o->sdtype) && o->kind != FP_TX_SEND && o->kind != FP_TX_RECV ? 2 : 0;
    case M_PEER: return (o->kind == FP_TX_SEND || o->kind == FP_TX_RECV) && t->nprocs > 2;
    case M_DEL:
    case M_DUP: return 1;
    case M_BLOCK: return computes_at(o->kind) && o->kind != FP_TX_MAX ? 2 : 0;
    case M_SCALE_SRC:
      for (int q = 0, w; (w = scale_read(o, q)) >= 0; q++) {
        const fp_tx_ref *r = w == 1 ? &o->src : &o->aux;
        n += (int)scale_writer(t, i, (int)r->space, r->off, -1);
      }
      return n;
  }
  return 0;
}

/* the nth operand of o that cond takes */
static int nth_opnd(const fp_tx *t, fp_tx_op *o, int nth, int k) {
  for (int w = 0; w < 3; w++) {
    if (!opnd(o, w) || (k == M_SUB && elem(t, o, w) <= 1) || (k == M_SCALE && !is_scale_opnd(o, w))) continue;
    if (nth-- == 0) return w;
  }
  return -1;
}

/* a copy of t whose ops and needs may change (the rest shared) */
static fp_tx *fork_tx(fp_arena *a, const fp_tx *t) {
  fp_tx *c = fpi_alloc(a, sizeof *c);
  *c = *t;
  c->arena = a;
  c->ops = fpi_alloc_array(a, (size_t)t->nops + 2, sizeof *c->ops);
  memcpy(c->ops, t->ops, (size_t)t->nops * sizeof *c->ops);
  c->cap_ops = t->nops + 2;
  c->need = fpi_alloc_array(a, (size_t)t->nneed + 1, sizeof *c->need);
  memcpy(c->need, t->need, (size_t)t->nneed * sizeof *c->need);
  c->cap_need = t->nneed + 1;
  return c;
}

static const fp_dtype floats[3] = {FP_F32, FP_BF16, FP_F16};
static fp_dtype other_float(fp_dtype d, int nth) {
  int at = d == FP_F32 ? 0 : d == FP_BF16 ? 1 : 2;
  return floats[(at + 1 + nth % 2) % 3];
}

/* apply mutation k (its nth variant) at op or need i; describe it in what */
static void mutate(fp_tx *c, int k, int32_t i, int nth, char *what, size_t cap) {
  if (k == M_NEED_PLANE) {
    fp_tx_region *r = &c->need[i];
    snprintf(what, cap, "need %d (process %d, param %d, %s, plane %d)", i, r->proc, r->param, fpi_dtype_name(r->dtype),
             r->plane);
    r->plane = (r->plane + 1 + nth) % (max_plane(c) + 1);
    return;
  }
  if (k == M_NEED_MOVE || k == M_NEED_ELEM) {
    fp_tx_region *r = &c->need[i];
    int64_t z = fpi_dtype_size(r->dtype), s = nth % 2 && (k == M_NEED_MOVE ? r->off >= z : r->full_off > 0) ? -1 : 1;
    if (k == M_NEED_MOVE) r->off += s * z;
    else r->full_off += s;
    snprintf(what, cap, "need %d (process %d, param %d, %s)", i, r->proc, r->param, fpi_dtype_name(r->dtype));
    return;
  }
  fp_tx_op *o = &c->ops[i];
  snprintf(what, cap, "op %d (process %d, %s %s<-%s n=%" PRId64 " full_off=%" PRId64 ")", i, o->proc,
           fpi_tx_kind_name(o->kind), fpi_dtype_name(o->dtype), fpi_dtype_name(o->sdtype), o->n, o->full_off);
  switch (k) {
    case M_SWAP: {
      fp_tx_op x = c->ops[i];
      c->ops[i] = c->ops[i + 1], c->ops[i + 1] = x;
      break;
    }
    case M_LABEL:
    case M_BLOCK: o->full_off += nth % 2 && o->full_off > 0 ? -1 : 1; break;
    case M_PARAM: o->param = (o->param + 1) % c->nparams; break;
    case M_OFF:
    case M_SUB:
    case M_SCALE: {
      int w = nth_opnd(c, o, k == M_SUB ? nth : nth / 2, k);
      fp_tx_ref *r = opnd(o, w);
      int64_t z = k == M_SUB ? 1 : elem(c, o, w);
      r->off += nth % 2 && k != M_SUB && r->off >= z ? -z : z;
      break;
    }
    case M_COUNT: o->n += nth % 2 || o->n <= 1 ? 1 : -1; break;
    case M_DTYPE: o->dtype = other_float(o->dtype, nth); break;
    case M_SDTYPE: o->sdtype = other_float(o->sdtype, nth); break;
    case M_PEER:
      do o->peer = (o->peer + 1) % (int32_t)c->nprocs;
      while (o->peer == o->proc);
      break;
    case M_DEL:
      memmove(&c->ops[i], &c->ops[i + 1], (size_t)(c->nops - i - 1) * sizeof *c->ops);
      c->nops--;
      break;
    case M_DUP:
      memmove(&c->ops[i + 1], &c->ops[i], (size_t)(c->nops - i) * sizeof *c->ops);
      c->nops++;
      break;
    case M_SCALE_SRC: /* the nth (operand, other scale written before) */
      for (int q = 0, w; (w = scale_read(o, q)) >= 0; q++) {
        fp_tx_ref *r = w == 1 ? &o->src : &o->aux;
        int m = (int)scale_writer(c, i, (int)r->space, r->off, -1);
        if (nth < m) {
          r->off = scale_writer(c, i, (int)r->space, r->off, nth);
          break;
        }
        nth -= m;
      }
      break;
    case M_SPACE: {
      fp_tx_ref *r = opnd(o, nth_opnd(c, o, nth, k));
      r->space = r->space == FP_SP_FROM ? FP_SP_STAGE : r->space == FP_SP_STAGE ? FP_SP_TO : FP_SP_FROM;
      break;
    }
  }
}

/* the byte ranges op o reads (rd) or writes (!rd), in spaces sp[]: up to 2 */
static int ranges(const fp_tx *t, const fp_tx_op *o, bool rd, int *sp, int64_t *lo, int64_t *hi) {
  int n = 0;
#define R(ref, bytes) (sp[n] = (int)(ref).space, lo[n] = (ref).off, hi[n] = (ref).off + (bytes), n++)
  int64_t ns = fpi_tx_nscales(o->full_off, o->n);
  switch (o->kind) {
    case FP_TX_SEND: if (rd) R(o->src, fpi_tx_src_bytes(t, o)); break;
    case FP_TX_RECV: if (!rd) R(o->dst, fpi_tx_dst_bytes(t, o)); break;
    case FP_TX_PREP_SEND: rd ? R(o->src, fpi_tx_src_bytes(t, o)) : R(o->dst, fpi_tx_wire_at(t, o, o->nwire)); break;
    case FP_TX_FINALIZE: /* its wire tensors, its scratch after them */
      R(o->src, fpi_tx_stage_need(t, o));
      if (!rd) R(o->dst, fpi_tx_dst_bytes(t, o));
      break;
    default:
      if (rd) {
        R(o->src, o->kind == FP_TX_DEQUANT ? o->n : fpi_tx_src_bytes(t, o));
        if (o->kind == FP_TX_DEQUANT || o->kind == FP_TX_QUANT_AT || o->kind == FP_TX_MAX)
          R(o->aux, o->kind == FP_TX_MAX ? o->n : ns);
      } else {
        R(o->dst, o->kind == FP_TX_QUANT ? o->n : fpi_tx_dst_bytes(t, o));
        if (o->kind == FP_TX_QUANT) R(o->aux, ns);
      }
  }
#undef R
  return n;
}

/* whether two ops of one process commute: neither writes bytes the other
 * touches, and they are not two sends to one peer or two recvs from one
 * (whose order is the matching's) */
static bool commute(const fp_tx *t, const fp_tx_op *x, const fp_tx_op *y) {
  if (x->kind == y->kind && (x->kind == FP_TX_SEND || x->kind == FP_TX_RECV) && x->peer == y->peer) return false;
  for (int pass = 0; pass < 2; pass++) {
    const fp_tx_op *w = pass ? y : x, *o = pass ? x : y;
    int ws[2], os[4];
    int64_t wl[2], wh[2], ol[4], oh[4];
    int nw = ranges(t, w, false, ws, wl, wh), no = ranges(t, o, true, os, ol, oh);
    no += ranges(t, o, false, os + no, ol + no, oh + no);
    for (int a = 0; a < nw; a++)
      for (int b = 0; b < no; b++)
        if (ws[a] == os[b] && wl[a] < oh[b] && ol[b] < wh[a]) return false;
  }
  return true;
}

/* 0: accepted; 1: rejected (msg: the first line) */
static int verify(fp_tx *c, char *msg, size_t cap) {
  fpi_tx_finish(c); /* regrouped, counted */
  fp_diag d;
  fpi_diag_init(&d, NULL);
  bool ok = fpi_tx_verify(c, &d);
  const char *m = d.buf ? d.buf : "";
  const char *nl = strchr(m, '\n');
  snprintf(msg, cap, "%.*s", nl ? (int)(nl - m) : (int)strlen(m), m);
  fpi_diag_free(&d);
  return ok ? 0 : 1;
}

/* mutant nth of kind k at op (or need) i of t, verified and counted */
static void one(const char *name, const fp_tx *t, int k, int32_t i, int nth) {
  fp_arena *a = fpi_arena_new();
  fp_tx *c = fork_tx(a, t);
  char what[300], msg[600];
  mutate(c, k, i, nth, what, sizeof what);
  int r = verify(c, msg, sizeof msg);
  T[k].n++;
  /* processes agree on a transfer by its hash (fp_xfer_run): any change
   * changes it, but two equal ops swapped (the same program) */
  bool equal = c->nops == t->nops && c->nneed == t->nneed && !memcmp(c->ops, t->ops, (size_t)t->nops * sizeof *t->ops) &&
               !memcmp(c->need, t->need, (size_t)t->nneed * sizeof *t->need);
  if (!equal && fpi_tx_hash(c) == H0 && same_hash++ < 5)
    printf("  FAIL %s: %s at %s hashes as its source (fpi_tx_hash)\n", name, kind_name[k], what);
  if (r) {
    T[k].rejected++;
    if (!T[k].first[0]) snprintf(T[k].first, sizeof T[k].first, "%s: %s", name, msg);
  } else if (k == M_SWAP && commute(t, &t->ops[i], &t->ops[i + 1])) {
    T[k].accepted++; /* independent: the same transfer in another order (X4 proved it finishes) */
  } else if (k == M_COUNT && t->ops[i].kind == FP_TX_SCALES &&
             fpi_tx_nscales(c->ops[i].full_off, c->ops[i].n) > fpi_tx_nscales(t->ops[i].full_off, t->ops[i].n)) {
    /* one element more, of the next block: its scale goes to one more
     * staging byte, which nothing reads (the original, valid, read no byte
     * nothing wrote); the bytes before it are the same: equivalent */
    T[k].accepted++;
    printf("  accepted (equivalent: an extra scale byte nothing reads): %s, %s at %s\n", name, kind_name[k], what);
  } else {
    T[k].accepted++;
    if (k >= M_STRICT || k == M_SWAP) { /* (the labels' classes: counted) */
      fails++;
      printf("  FAIL accepted: %s, %s at %s\n", name, kind_name[k], what);
    }
  }
  fpi_arena_free(a);
}

/* every mutant of t */
static void corpus(const char *name, const fp_tx *t) {
  for (int k = 0; k < M_NKINDS; k++) {
    int32_t N = k == M_NEED_MOVE || k == M_NEED_ELEM || k == M_NEED_PLANE ? t->nneed : t->nops;
    for (int32_t i = 0; i < N; i++)
      for (int nth = 0, nv = variants(t, k, i); nth < nv; nth++) one(name, t, k, i, nth);
  }
}

/* the plan of tests/mpi MODEL for SPEC at world ranks */
static fp_plan *plan(const char *model, const char *spec, int world) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/mpi/%s.spec.json", FP_SOURCE_DIR, spec);
  FILE *f = fopen(path, "r");
  static char text[1 << 16];
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[n] = 0;
  /* the spec's "world_size" and "ranks_per_node" (capped at it) set */
  char out[sizeof text + 64], *w = strstr(text, "\"world_size\""), *rp = strstr(text, "\"ranks_per_node\"");
  if (!w) return NULL;
  char *e = strchr(w, ':') + 1;
  while (*e == ' ' || (*e >= '0' && *e <= '9')) e++;
  snprintf(out, sizeof out, "%.*s\"world_size\": %d%s", (int)(w - text), text, world, e);
  if (rp && atoi(strchr(strstr(out, "\"ranks_per_node\""), ':') + 1) > world) {
    char *r = strstr(out, "\"ranks_per_node\""), *re = strchr(r, ':') + 1, tmp[sizeof out];
    while (*re == ' ' || (*re >= '0' && *re <= '9')) re++;
    snprintf(tmp, sizeof tmp, "%.*s\"ranks_per_node\": %d%s", (int)(r - out), out, world, re);
    memcpy(out, tmp, strlen(tmp) + 1);
  }
  char mpath[1024];
  snprintf(mpath, sizeof mpath, "%s/tests/mpi/%s.model.json", FP_SOURCE_DIR, model);
  fp_compile_options o = {.model_path = mpath, .spec_text = out};
  fp_plan *p = NULL;
  if (fp_plan_compile(&o, &p) != FP_OK) {
    printf("FAIL %s %s at %d ranks: %s\n", model, spec, world, fp_plan_errmsg(p));
    fails++;
    fp_plan_free(p);
    return NULL;
  }
  return p;
}

typedef struct source {
  const char *model, *from;
  int wf;
  const char *to;
  int wt, to_offset, from_offset;
  const char *rule; /* "PATTERN=NAME" or NULL */
  const char *what; /* NULL: "weights" */
} source;

int main(void) {
  static const source S[] = {
      {"mlp", "full_shard", 4, "placements-w3", 3, 0, 0, NULL, NULL},
      {"mlp", "full_shard", 4, "bf16", 3, 0, 0, NULL, NULL},
      {"mlp", "hybrid", 4, "full_shard", 2, 4, 0, NULL, NULL},
      {"mlp", "hybrid", 6, "hybrid", 4, 0, 0, NULL, NULL},
      {"mlp", "ragged-w6", 6, "full_shard", 8, 0, 0, NULL, NULL},
      {"mlp", "full_shard", 4, "placements-w3", 3, 0, 0, "fc*.weight=mxfp8", NULL},
      {"mlp", "full_shard", 2, "no_shard", 3, 0, 0, "*=mxfp8", NULL},
      {"mlp", "full_shard", 4, "placements-w3", 3, 0, 0, "*=mxfp8_receiver", NULL},
      {"mlp", "bf16", 3, "full_shard", 2, 3, 0, "fc0.*=mxfp8_sender", NULL},
      {"mlp-frozen", "full_shard", 4, "mxfp8-keep", 3, 0, 0, NULL, NULL},
      {"mlp-frozen", "per-param", 4, "mxfp8-keep", 2, 0, 0, NULL, NULL},
      {"mlp-frozen", "per-param", 2, "mxfp8-keep", 3, 2, 0, NULL, NULL},
      {"mlp-frozen", "mxfp8-keep", 3, "mxfp8-keep", 2, 0, 0, NULL, NULL},
      {"mlp-frozen", "mxfp8-keep", 2, "mxfp8-keep", 3, 2, 0, NULL, NULL},
      {"mlp-frozen", "mxfp8-keep", 3, "full_shard", 2, 0, 0, NULL, NULL},
      {"mlp-frozen", "mxfp8-keep", 2, "frozen-bf16", 3, 2, 0, NULL, NULL},
      {"mlp", "full_shard", 4, "placements-w3", 3, 0, 0, NULL, "weights+optimizer"},
      {"mlp", "hybrid", 4, "ragged-w6", 6, 4, 0, NULL, "weights+optimizer"},
      {"mlp", "ragged-w6", 6, "hybrid", 4, 0, 4, "fc1.*=mxfp8_receiver", NULL}, /* the way back: FROM after TO */
  };
  for (size_t s = 0; s < sizeof S / sizeof *S; s++) {
    char name[200];
    snprintf(name, sizeof name, "%s %s%d>%s%d%s%s%s%s", S[s].model, S[s].from, S[s].wf, S[s].to, S[s].wt,
             S[s].to_offset ? " disjoint" : S[s].from_offset ? " disjoint back" : "", S[s].rule ? " " : "",
             S[s].rule ? S[s].rule : "",
             S[s].what ? " +optimizer" : "");
    fp_plan *A = plan(S[s].model, S[s].from, S[s].wf), *B = plan(S[s].model, S[s].to, S[s].wt);
    if (!A || !B) {
      fp_plan_free(A), fp_plan_free(B);
      continue;
    }
    fp_arena *a = fpi_arena_new();
    fp_diag d;
    fpi_diag_init(&d, NULL);
    const char *rules[] = {S[s].rule};
    fp_reshard_opts o = {.what = S[s].what ? S[s].what : "weights", .to_offset = S[s].to_offset,
                         .from_offset = S[s].from_offset, .rules = rules, .nrules = S[s].rule != NULL};
    fp_tx *t = fpi_reshard(a, A->prog, NULL, B->prog, NULL, &o, &d);
    if (!t) {
      printf("FAIL %s: %s\n", name, d.buf ? d.buf : "(no transfer)");
      fails++;
    } else {
      int kinds[FP_TX_NKINDS] = {0};
      for (int32_t i = 0; i < t->nops; i++) kinds[t->ops[i].kind]++;
      printf("%-52s %5d ops:", name, t->nops);
      for (int k = 0; k < FP_TX_NKINDS; k++)
        if (kinds[k]) printf(" %s %d", fpi_tx_kind_name(k), kinds[k]);
      printf("\n");
      /* the hash of a compiled transfer and of the same read from its JSON agree */
      H0 = fpi_tx_hash(t);
      char *json = NULL;
      size_t len = 0;
      FILE *f = open_memstream(&json, &len);
      bool wrote = f && fpi_tx_write_json(t, f);
      if (f) fclose(f);
      fp_src src = {.path = "xfer.json", .text = json, .len = len};
      fp_arena *ra = fpi_arena_new();
      fp_tx *back = wrote ? fpi_tx_read(ra, &d, &src) : NULL;
      if (!back || fpi_tx_hash(back) != H0) {
        printf("FAIL %s: read back from its JSON, %s\n", name, back ? "it hashes differently" : "it is refused");
        fails++;
      }
      fpi_arena_free(ra);
      free(json);
      corpus(name, t);
    }
    fpi_diag_free(&d);
    fpi_arena_free(a);
    fp_plan_free(A), fp_plan_free(B);
  }
  int n = 0, rj = 0, ac = 0;
  printf("\n%-18s %8s %9s %9s\n", "mutation", "mutants", "rejected", "accepted");
  for (int k = 0; k < M_NKINDS; k++) {
    printf("%-18s %8d %9d %9d%s\n", kind_name[k], T[k].n, T[k].rejected, T[k].accepted, k >= M_STRICT ? "  (strict)" : "");
    n += T[k].n, rj += T[k].rejected, ac += T[k].accepted;
  }
  printf("%-18s %8d %9d %9d\n", "all", n, rj, ac);
  printf("mutants that hash as their source: %d\n", same_hash);
  fails += same_hash;
  printf("\nthe strict classes, a message of each:\n");
  for (int k = M_STRICT; k < M_NKINDS; k++) {
    printf("  %-18s %s\n", kind_name[k], T[k].first);
    if (T[k].n == 0) {
      printf("FAIL: no mutant of class '%s'\n", kind_name[k]);
      fails++;
    }
  }
  return fails ? 1 : 0;
}
