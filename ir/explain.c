/* explain.c - fpi_ir_explain: the program as an EXPLAIN-style table (SQLite's
 * EXPLAIN for the VDBE), one row per op, for people reading a plan:
 *
 *   #  segment           stream  op          operands                      count       comm   sync
 *   4  pre_forward(l0)   ag      all_gather  b0.unsh[0] <- b0.unsh[+g*64]   16 x bf16   shard
 *
 * Operands resolve as in .fpir (see print.c); count/bytes is what the op
 * moves on the rank with index 0 in its communicator (G x for gathers'
 * outputs and reduce-scatters' inputs).
 *
 * A wait names the op that recorded its event ("waits e3 (op 19)": the
 * latest record before it in program order; the previous step's last when
 * none precedes it). fpi_ir_explain_modeled adds the simulator's modeled
 * start and end of every op (planner/sim.h), in microseconds from the start
 * of the steady-state step.
 *
 * Extension point: columns are rows of the `columns` table below, each a
 * header and a function that formats one op's cell. */
#include "irpriv.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct explain_ctx {
  const fp_prog *p;
  const double *start_us, *end_us; /* modeled times per op; NULL: no time columns */
  int32_t *rec;                    /* per wait: the op that recorded its event (-1: none) */
} explain_ctx;

typedef void (*cellfn)(const explain_ctx *x, int32_t i, char *buf, size_t cap);

static const char *bname(const fp_prog *p, int32_t b) {
  return b >= 0 && b < p->nbufs && p->bufs[b].name ? p->bufs[b].name : "?";
}

/* names from the input go through fpi_quote (escapes, docs/cli.md) */
static size_t put_region(const fp_prog *p, const fp_region *r, char *buf, size_t cap) {
  char q[256];
  int n = snprintf(buf, cap, "%s[%" PRId64, fpi_quote(q, sizeof q, bname(p, r->buf)), r->off);
  if (r->stride && n >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "%+" PRId64 "*g", r->stride);
  if (r->tabrel && n >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "+tab");
  if (n >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "]");
  return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

static void c_index(const explain_ctx *x, int32_t i, char *buf, size_t cap) {
  (void)x;
  snprintf(buf, cap, "%" PRId32, i);
}

static void c_segment(const explain_ctx *x, int32_t i, char *buf, size_t cap) {
  const fp_prog *p = x->p;
  int32_t k = p->ops[i].seg;
  if (k < 0 || k >= p->nsegs) {
    snprintf(buf, cap, "?");
    return;
  }
  const fp_seg *s = &p->segs[k];
  char q[256];
  if (s->module >= 0 && s->module < p->nmods)
    snprintf(buf, cap, "%s(%s) mb%" PRId32, fpi_seg_name(s->kind), fpi_quote(q, sizeof q, p->mods[s->module].name),
             s->micro);
  else
    snprintf(buf, cap, "%s mb%" PRId32, fpi_seg_name(s->kind), s->micro);
}

static void c_stream(const explain_ctx *x, int32_t i, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", fpi_stream_name(x->p->ops[i].stream));
}

static void c_op(const explain_ctx *x, int32_t i, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", fpi_op_name(x->p->ops[i].code));
}

static void c_operands(const explain_ctx *x, int32_t i, char *buf, size_t cap) {
  const fp_prog *p = x->p;
  const fp_op *op = &p->ops[i];
  size_t n = 0;
  buf[0] = 0;
  if (op->code == FP_OP_COMPUTE) {
    const char *m = op->module >= 0 && op->module < p->nmods ? p->mods[op->module].name : NULL;
    const char *what = op->pass == FP_PASS_BWD ? "backward" : op->pass == FP_PASS_OPT ? "optimizer" : "forward";
    char q[256];
    if (m)
      snprintf(buf, cap, "%s %s", fpi_quote(q, sizeof q, m), what);
    else
      snprintf(buf, cap, "%s", what); /* the optimizer: no module */
    return;
  }
  if (op->dst.buf >= 0) n += put_region(p, &op->dst, buf + n, cap - n);
  if (op->src.buf >= 0 && n + 4 < cap) {
    n += (size_t)snprintf(buf + n, cap - n, "%s", op->dst.buf >= 0 ? " <- " : "-> ");
    if (n < cap) n += put_region(p, &op->src, buf + n, cap - n);
  }
  if (op->aux.buf >= 0 && n + 3 < cap) {
    n += (size_t)snprintf(buf + n, cap - n, ", ");
    if (n < cap) put_region(p, &op->aux, buf + n, cap - n);
  }
}

static void c_count(const explain_ctx *x, int32_t i, char *buf, size_t cap) {
  const fp_prog *p = x->p;
  const fp_op *op = &p->ops[i];
  buf[0] = 0;
  if ((unsigned)op->code >= FP_NOPS) return;
  fp_opclass cls = fpi_op_class(op->code);
  if (cls != FP_OPC_COMM && cls != FP_OPC_LOCAL) {
    if (op->code == FP_OP_COMPUTE && op->alpha > 0) snprintf(buf, cap, "%.3g flops", op->alpha);
    return;
  }
  bool tabled = op->tab >= 0 && op->tab < p->ntabs && p->tabs[op->tab].n > 0 && !fpi_op_regions(op->code) &&
                (cls == FP_OPC_LOCAL || op->code == FP_OP_ALL_GATHER_V || op->code == FP_OP_REDUCE_SCATTER_V);
  int64_t n = tabled ? p->tabs[op->tab].cnt[0] : op->count;
  int64_t G = op->comm >= 0 && op->comm < p->ncomms ? p->comms[op->comm].size : 1;
  int64_t mult = op->code == FP_OP_ALL_GATHER || op->code == FP_OP_REDUCE_SCATTER ? G : 1;
  bool bytes_op = op->code == FP_OP_H2D || op->code == FP_OP_D2H;
  int sz = bytes_op ? 1 : fpi_dtype_size(op->dtype);
  double b = (double)n * (double)mult * sz * (double)(op->code == FP_OP_COPY || fpi_op_regions(op->code) ? fpi_op_shape_of(p, op).rows : 1);
  const char *unit = "B";
  if (b >= 1024.0 * 1024 * 1024) b /= 1024.0 * 1024 * 1024, unit = "GiB";
  else if (b >= 1024.0 * 1024) b /= 1024.0 * 1024, unit = "MiB";
  else if (b >= 1024) b /= 1024, unit = "KiB";
  const char *dt = bytes_op ? "bytes" : fpi_dtype_name(op->dtype);
  if (mult > 1)
    snprintf(buf, cap, "%" PRId64 "x%" PRId64 " %s (%.4g %s)%s", G, n, dt, b, unit, tabled ? " g0" : "");
  else
    snprintf(buf, cap, "%" PRId64 " %s (%.4g %s)%s", n, dt, b, unit, tabled ? " g0" : "");
}

static void c_comm(const explain_ctx *x, int32_t i, char *buf, size_t cap) {
  const fp_prog *p = x->p;
  const fp_op *op = &p->ops[i];
  size_t n = 0;
  char q[256];
  buf[0] = 0;
  if (op->comm >= 0 && op->comm < p->ncomms)
    n += (size_t)snprintf(buf, cap, "%s", fpi_quote(q, sizeof q, p->comms[op->comm].name));
  if (op->red != FP_RED_SUM && n < cap) n += (size_t)snprintf(buf + n, cap - n, " red=%s", fpi_redop_name(op->red));
  if (op->root >= 0 && n < cap)
    n += (size_t)snprintf(buf + n, cap - n, " %s%" PRId32,
                          op->code == FP_OP_SEND || op->code == FP_OP_RECV ? "dist=" : "root=", op->root);
  if (op->only >= 0 && op->only_comm >= 0 && op->only_comm < p->ncomms && n < cap)
    n += (size_t)snprintf(buf + n, cap - n, " only %" PRId32 "@%s", op->only,
                          fpi_quote(q, sizeof q, p->comms[op->only_comm].name));
  if (op->group >= 0 && n < cap) snprintf(buf + n, cap - n, " group=%" PRId32, op->group);
}

static void c_sync(const explain_ctx *x, int32_t i, char *buf, size_t cap) {
  const fp_op *op = &x->p->ops[i];
  buf[0] = 0;
  if (op->code == FP_OP_WAIT && x->rec && x->rec[i] >= 0)
    snprintf(buf, cap, "waits e%" PRId32 " (op %" PRId32 ")", op->event, x->rec[i]);
  else if (op->code == FP_OP_WAIT)
    snprintf(buf, cap, "waits e%" PRId32, op->event);
  if (op->code == FP_OP_RECORD) snprintf(buf, cap, "records e%" PRId32, op->event);
}

static void c_start(const explain_ctx *x, int32_t i, char *buf, size_t cap) {
  snprintf(buf, cap, "%.3f", x->start_us[i] == 0 ? 0.0 : x->start_us[i]);
}

static void c_end(const explain_ctx *x, int32_t i, char *buf, size_t cap) {
  snprintf(buf, cap, "%.3f", x->end_us[i] == 0 ? 0.0 : x->end_us[i]);
}

/* the columns, left to right; the last two only with modeled times */
static const struct {
  const char *header;
  bool right; /* right-aligned */
  cellfn fn;
} columns[] = {
    {"#", true, c_index},         {"segment", false, c_segment}, {"stream", false, c_stream},
    {"op", false, c_op},          {"operands", false, c_operands}, {"count/bytes", false, c_count},
    {"comm", false, c_comm},      {"sync", false, c_sync},
    {"modeled start us", true, c_start}, {"modeled end us", true, c_end},
};
#define NCOLS ((int)(sizeof columns / sizeof columns[0]))
#define NTIMECOLS 2

void fpi_ir_explain(const fp_prog *p, FILE *f) { fpi_ir_explain_modeled(p, NULL, NULL, f); }

/* the ranks of one dp group: "0, 2, 4, 6", or the first three and the last
 * of a long one ("0, 8, 16, ..., 16376 (2048 ranks)") */
static void dp_group(FILE *f, int64_t t, int64_t dp, int64_t tp) {
  if (dp <= 6) {
    for (int64_t g = 0; g < dp; g++) fprintf(f, "%s%" PRId64, g ? ", " : "", t + g * tp);
    return;
  }
  fprintf(f, "%" PRId64 ", %" PRId64 ", %" PRId64 ", ..., %" PRId64 " (%" PRId64 " ranks)", t, t + tp, t + 2 * tp,
          t + (dp - 1) * tp, dp);
}

void fpi_ir_mesh_text(FILE *f, const char *indent, int64_t world, int64_t tp) {
  if (tp <= 1 || world < tp || world % tp) return;
  int64_t dp = world / tp;
  fprintf(f, "%smesh: %" PRId64 " ranks = dp %" PRId64 " x tp %" PRId64
             " (tp innermost: rank r has tp index r %% %" PRId64 ", dp index r / %" PRId64 ")\n",
          indent, world, dp, tp, tp, tp);
  int64_t shown = tp <= 4 ? tp : 2;
  for (int64_t t = 0; t < shown; t++) {
    fprintf(f, "%s  dp group of tp index %" PRId64 ": ranks ", indent, t);
    dp_group(f, t, dp, tp);
    fputc('\n', f);
  }
  if (shown < tp)
    fprintf(f, "%s  ... and so on to tp index %" PRId64 ": ranks %" PRId64 " + %" PRId64 " x g\n", indent, tp - 1,
            tp - 1, tp);
}

void fpi_ir_explain_modeled(const fp_prog *p, const double *start_us, const double *end_us, FILE *f) {
  explain_ctx x = {p, start_us, end_us, NULL};
  fpi_ir_mesh_text(f, "# ", p->world_size, p->tp);
  int ncols = start_us && end_us ? NCOLS : NCOLS - NTIMECOLS;
  /* the record each wait refers to: the latest before it; a wait before any
   * record of its event in this step refers to the previous step's, the
   * step's last (the first loop leaves it in last[]) */
  x.rec = malloc(sizeof *x.rec * ((size_t)p->nops + 1));
  int32_t *last = malloc(sizeof *last * ((size_t)p->nevents + 1));
  FP_ASSERT(x.rec && last);
  for (int32_t e = 0; e < p->nevents; e++) last[e] = -1;
  for (int32_t i = 0; i < p->nops; i++)
    if (p->ops[i].code == FP_OP_RECORD && p->ops[i].event >= 0 && p->ops[i].event < p->nevents) last[p->ops[i].event] = i;
  for (int32_t i = 0; i < p->nops; i++) {
    const fp_op *op = &p->ops[i];
    x.rec[i] = -1;
    if (op->event < 0 || op->event >= p->nevents) continue;
    if (op->code == FP_OP_WAIT) x.rec[i] = last[op->event];
    if (op->code == FP_OP_RECORD) last[op->event] = i; /* from here on, this one */
  }
  free(last);
  size_t width[NCOLS];
  char cell[512];
  for (int c = 0; c < ncols; c++) width[c] = strlen(columns[c].header);
  for (int32_t i = 0; i < p->nops; i++)
    for (int c = 0; c < ncols; c++) {
      columns[c].fn(&x, i, cell, sizeof cell);
      if (strlen(cell) > width[c]) width[c] = strlen(cell);
    }
  for (int32_t i = -1; i < p->nops; i++) {
    /* the header row, then one row per op; no trailing blanks */
    char line[NCOLS][512];
    int last = 0;
    for (int c = 0; c < ncols; c++) {
      if (i < 0)
        snprintf(line[c], sizeof line[c], "%s", columns[c].header);
      else
        columns[c].fn(&x, i, line[c], sizeof line[c]);
      if (line[c][0]) last = c;
    }
    for (int c = 0; c <= last; c++) {
      int w = (int)width[c];
      if (columns[c].right)
        fprintf(f, "%*s", w, line[c]);
      else if (c < last)
        fprintf(f, "%-*s", w, line[c]);
      else
        fputs(line[c], f);
      if (c < last) fputs("  ", f);
    }
    fputc('\n', f);
  }
  free(x.rec);
}
