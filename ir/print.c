/* print.c - the .fpir text form of a program, for people and for golden
 * tests.
 *
 * The output is deterministic and canonical: ir/parse.c reads it back into
 * the same program, and printing that program gives the same bytes. Layout:
 * a header of `key value` lines, then the tables (comms, extent tables,
 * buckets, buffers, modules, params), one declaration per line with aligned
 * columns, then the segments as labelled blocks holding one op per line:
 *
 *   segment 1 pre_forward(layers.0) micro=0
 *        4  ag       all_gather        bf16        n=1024  dst=b0.unsharded[0]  src=b0.unsharded[0+2048*g]  comm=shard
 *
 * Things are referred to by name when the name is unique in its table
 * (quoted unless it is a bare word), else by index as $N; `-` is "none".
 * Regions are REF[OFF], REF[OFF+STRIDE*g], REF[OFF+tab] or both (see ir.h).
 * Fields at their default value are left out; the grammar is in docs/ir.md.
 * Integers print in decimal, doubles in their shortest round-trip form. */
#include "irpriv.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- a growable string ------------------------------------------------------- */
typedef struct sbuf {
  char *p;
  size_t len, cap;
} sbuf;

static void sb_reserve(sbuf *b, size_t n) {
  if (b->len + n + 1 <= b->cap) return;
  size_t nc = b->cap ? b->cap : 4096;
  while (nc < b->len + n + 1) nc *= 2;
  b->p = realloc(b->p, nc);
  FP_ASSERT(b->p);
  b->cap = nc;
}

static void sb_putn(sbuf *b, const char *s, size_t n) {
  sb_reserve(b, n);
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static void sb_putc(sbuf *b, char c) { sb_putn(b, &c, 1); }

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap, aq;
  va_start(ap, fmt);
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  FP_ASSERT(n >= 0);
  sb_reserve(b, (size_t)n);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, aq);
  va_end(aq);
  b->len += (size_t)n;
}

static void sb_pad(sbuf *b, size_t n) {
  while (n--) sb_putc(b, ' ');
}

/* a quoted string: \" \\ \n \t \r, other control bytes as \xHH; bytes of
 * UTF-8 sequences pass through */
static void sb_quoted(sbuf *b, const char *s) {
  sb_putc(b, '"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    switch (c) {
      case '"': sb_puts(b, "\\\""); break;
      case '\\': sb_puts(b, "\\\\"); break;
      case '\n': sb_puts(b, "\\n"); break;
      case '\t': sb_puts(b, "\\t"); break;
      case '\r': sb_puts(b, "\\r"); break;
      default:
        if (c < 0x20 || c == 0x7f)
          sb_printf(b, "\\x%02x", c);
        else
          sb_putc(b, (char)c);
    }
  }
  sb_putc(b, '"');
}

static void sb_name(sbuf *b, const char *s) {
  if (fp_ir_name_is_bare(s))
    sb_puts(b, s);
  else
    sb_quoted(b, s ? s : "");
}

static void sb_double(sbuf *b, double d) {
  char t[40];
  fp_fmt_double(t, d);
  sb_puts(b, t);
}

/* ---- lines of aligned cells ------------------------------------------------------ */
/* A line is built as cells separated by '\t' (never part of the text: names
 * escape it). The first `nalign` cells are padded to the widest cell of their
 * column over the section (right-aligned where `right` has the bit); the
 * rest are joined with two spaces. Pass 1 measures, pass 2 writes. */
#define MAXCOLS 8
typedef struct printer {
  const fp_prog *p;
  sbuf out;
  sbuf line;               /* the current line's cells */
  int measuring;           /* pass 1 */
  int nalign;
  unsigned right;          /* bit c: column c right-aligned */
  size_t width[MAXCOLS];
  const char *indent;
  fp_namemap names[5];     /* comm, tab, buf, module, bucket: unique names */
  int32_t *lstart;         /* per buffer: its live ranges are lord[lstart[b] .. lstart[b+1]) */
  int32_t *lord;           /* indices of p->lives grouped by buffer, in creation order */
} printer;

enum { NM_COMM, NM_TAB, NM_BUF, NM_MOD, NM_BUCKET };

static void cell(printer *pr) { sb_putc(&pr->line, '\t'); }

/* finish the current line: measure it, or write it aligned */
static void endline(printer *pr) {
  const char *s = pr->line.p ? pr->line.p : "";
  size_t n = pr->line.len;
  /* cells: [start, end) pairs */
  size_t cs[64], ce[64];
  int nc = 0;
  size_t st = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || s[i] == '\t') {
      if (nc < 64) {
        cs[nc] = st;
        ce[nc] = i;
        nc++;
      }
      st = i + 1;
    }
  }
  if (pr->measuring) {
    for (int c = 0; c < nc && c < pr->nalign; c++)
      if (ce[c] - cs[c] > pr->width[c]) pr->width[c] = ce[c] - cs[c];
  } else {
    /* the last non-empty cell: nothing is padded after it */
    int last = nc - 1;
    while (last > 0 && ce[last] == cs[last]) last--;
    sb_puts(&pr->out, pr->indent);
    for (int c = 0; c <= last; c++) {
      size_t w = ce[c] - cs[c];
      if (c < pr->nalign) {
        size_t pad = pr->width[c] > w ? pr->width[c] - w : 0;
        if (pr->right >> c & 1) {
          sb_pad(&pr->out, pad);
          sb_putn(&pr->out, s + cs[c], w);
        } else {
          sb_putn(&pr->out, s + cs[c], w);
          if (c < last) sb_pad(&pr->out, pad);
        }
      } else {
        if (w == 0) continue;
        sb_putn(&pr->out, s + cs[c], w);
      }
      if (c < last) sb_puts(&pr->out, "  ");
    }
    sb_putc(&pr->out, '\n');
  }
  pr->line.len = 0;
  if (pr->line.p) pr->line.p[0] = 0;
}

static void section(printer *pr, int nalign, unsigned right, const char *indent) {
  pr->nalign = nalign;
  pr->right = right;
  pr->indent = indent;
  memset(pr->width, 0, sizeof pr->width);
}

/* ---- references ----------------------------------------------------------------- */
static const char *table_name(const fp_prog *p, int kind, int32_t i) {
  switch (kind) {
    case NM_COMM: return p->comms[i].name;
    case NM_TAB: return p->tabs[i].name;
    case NM_BUF: return p->bufs[i].name;
    case NM_MOD: return p->mods[i].name;
    default: return p->buckets[i];
  }
}

static int32_t table_len(const fp_prog *p, int kind) {
  switch (kind) {
    case NM_COMM: return p->ncomms;
    case NM_TAB: return p->ntabs;
    case NM_BUF: return p->nbufs;
    case NM_MOD: return p->nmods;
    default: return p->nbuckets;
  }
}

/* name when unique, $N otherwise, - for -1 */
static void ref(printer *pr, int kind, int32_t i) {
  sbuf *b = &pr->line;
  if (i == -1) {
    sb_putc(b, '-');
    return;
  }
  if (i >= 0 && i < table_len(pr->p, kind)) {
    const char *nm = table_name(pr->p, kind, i);
    if (nm && fp_namemap_get(&pr->names[kind], nm, strlen(nm)) == i) {
      sb_name(b, nm);
      return;
    }
  }
  sb_printf(b, "$%" PRId32, i);
}

static void region(printer *pr, const char *key, const fp_region *r) {
  if (r->buf == -1 && !r->tabrel && r->off == 0 && r->stride == 0) return;
  cell(pr);
  sb_printf(&pr->line, "%s=", key);
  ref(pr, NM_BUF, r->buf);
  sb_printf(&pr->line, "[%" PRId64, r->off);
  if (r->stride) sb_printf(&pr->line, "%+" PRId64 "*g", r->stride);
  if (r->tabrel) sb_puts(&pr->line, "+tab");
  sb_putc(&pr->line, ']');
}

static void view(printer *pr, const char *key, const fp_view *v) {
  if (v->buf == -1 && v->off == 0) return;
  cell(pr);
  sb_printf(&pr->line, "%s=", key);
  ref(pr, NM_BUF, v->buf);
  sb_printf(&pr->line, "[%" PRId64 "]", v->off);
}

static const char *dtype_name(int t) { return t >= 0 && t < FP_NDTYPES ? fp_dtype_name((fp_dtype)t) : "?"; }

/* ---- sections ------------------------------------------------------------------- */
static void print_header(printer *pr) {
  const fp_prog *p = pr->p;
  sbuf *o = &pr->out;
  sb_puts(o, "# flexplan IR (.fpir): one SPMD program for every rank; see docs/ir.md\n");
  sb_puts(o, "fpir 1\n");
  if (p->model) {
    sb_puts(o, "model ");
    sb_quoted(o, p->model);
    sb_putc(o, '\n');
  }
  if (p->strategy) {
    sb_puts(o, "strategy ");
    sb_quoted(o, p->strategy);
    sb_putc(o, '\n');
  }
  sb_printf(o, "world_size %" PRId64 "\n", p->world_size);
  sb_printf(o, "ranks_per_node %" PRId64 "\n", p->ranks_per_node);
  sb_printf(o, "grad_accumulation %" PRId64 "\n", p->grad_accumulation);
  sb_printf(o, "arena_bytes %" PRId64 "\n", p->arena_bytes);
  sb_printf(o, "host_bytes %" PRId64 "\n", p->host_bytes);
  sb_printf(o, "events %" PRId32 "\n", p->nevents);
}

static void comm_line(printer *pr, int32_t i) {
  const fp_ir_comm *c = &pr->p->comms[i];
  sb_printf(&pr->line, "comm\t%" PRId32 "\t", i);
  sb_name(&pr->line, c->name);
  sb_printf(&pr->line, "\tsize=%" PRId64 "\tstride=%" PRId64, c->size, c->stride);
  endline(pr);
}

static void bucket_line(printer *pr, int32_t i) {
  sb_printf(&pr->line, "bucket\t%" PRId32 "\t", i);
  sb_name(&pr->line, pr->p->buckets[i]);
  endline(pr);
}

static void table_lines(printer *pr, int32_t i) {
  const fp_ir_table *t = &pr->p->tabs[i];
  sb_printf(&pr->line, "table\t%" PRId32 "\t", i);
  sb_name(&pr->line, t->name);
  sb_printf(&pr->line, "\tn=%" PRId64, t->n);
  endline(pr);
  if (pr->measuring) return;
  for (int w = 0; w < 2; w++) {
    const int64_t *v = w ? t->cnt : t->off;
    for (int64_t j = 0; j < t->n; j += 16) {
      sb_puts(&pr->out, w ? "  cnt" : "  off");
      for (int64_t k = j; k < t->n && k < j + 16; k++) sb_printf(&pr->out, " %" PRId64, v[k]);
      sb_putc(&pr->out, '\n');
    }
  }
}

static const char *kind_name(int k) {
  return k == FP_BUF_PERSISTENT ? "persistent" : k == FP_BUF_TRANSIENT ? "transient" : "?";
}

static void buf_line(printer *pr, int32_t i) {
  const fp_ir_buf *b = &pr->p->bufs[i];
  sb_printf(&pr->line, "buf\t%" PRId32 "\t", i);
  sb_name(&pr->line, b->name);
  sb_printf(&pr->line, "\t%s\t%s\tbytes=%" PRId64 "\toffset=%" PRId64, kind_name(b->kind),
            fp_buf_cat_name(b->cat), b->bytes, b->offset);
  if (b->bucket != -1) {
    sb_puts(&pr->line, "\tbucket=");
    ref(pr, NM_BUCKET, b->bucket);
  }
  if (b->host) sb_puts(&pr->line, "\thost");
  for (int32_t k = pr->lstart[i]; k < pr->lstart[i + 1]; k++) {
    const fp_ir_live *l = &pr->p->lives[pr->lord[k]];
    sb_printf(&pr->line, "%s%" PRId32 "..%" PRId32, k == pr->lstart[i] ? "\tlive=" : ",", l->first, l->last);
  }
  endline(pr);
}

static void module_line(printer *pr, int32_t i) {
  const fp_ir_module *m = &pr->p->mods[i];
  sb_printf(&pr->line, "module\t%" PRId32 "\t", i);
  sb_name(&pr->line, m->name);
  sb_puts(&pr->line, "\tflops_fwd=");
  sb_double(&pr->line, m->flops_fwd);
  sb_puts(&pr->line, "\tflops_bwd=");
  sb_double(&pr->line, m->flops_bwd);
  sb_printf(&pr->line, "\tact=%" PRId64, m->activation_bytes);
  endline(pr);
}

static void param_line(printer *pr, int32_t i) {
  const fp_ir_param *q = &pr->p->params[i];
  sbuf *l = &pr->line;
  sb_printf(l, "param\t%" PRId32 "\t", i);
  sb_name(l, q->name);
  sb_puts(l, "\tshape=[");
  int nd = q->ndim < 0 ? 0 : q->ndim > 8 ? 8 : q->ndim;
  for (int k = 0; k < nd; k++) sb_printf(l, k ? ",%" PRId64 : "%" PRId64, q->shape[k]);
  sb_puts(l, "]\tmodule=");
  ref(pr, NM_MOD, q->module);
  sb_puts(l, "\tbucket=");
  ref(pr, NM_BUCKET, q->bucket);
  sb_printf(l, "\tdtypes=%s/%s/%s\t%s", dtype_name(q->main_dtype), dtype_name(q->param_dtype),
            dtype_name(q->grad_dtype), fp_ir_placement_name(q->placement));
  if (q->dim) sb_printf(l, "\tdim=%" PRId32, q->dim);
  if (q->comm != -1) {
    sb_puts(l, "\tcomm=");
    ref(pr, NM_COMM, q->comm);
  }
  if (q->owner != -1) sb_printf(l, "\towner=%" PRId64, q->owner);
  if (q->tab != -1) {
    sb_puts(l, "\ttab=");
    ref(pr, NM_TAB, q->tab);
  }
  if (q->chunk) sb_printf(l, "\tchunk=%" PRId64, q->chunk);
  if (!q->requires_grad) sb_puts(l, "\tfrozen");
  view(pr, "main", &q->main);
  view(pr, "grad", &q->grad);
  view(pr, "weight", &q->weight);
  view(pr, "ugrad", &q->ugrad);
  endline(pr);
}

static void seg_line(printer *pr, int32_t i) {
  const fp_seg *s = &pr->p->segs[i];
  sb_printf(&pr->line, "segment %" PRId32 " %s", i, fp_seg_name(s->kind));
  if (fp_seg_has_module(s->kind) || s->module != -1) {
    sb_putc(&pr->line, '(');
    ref(pr, NM_MOD, s->module);
    sb_putc(&pr->line, ')');
  }
  sb_printf(&pr->line, " micro=%" PRId32 "\n", s->micro);
  if (!pr->measuring) sb_putn(&pr->out, pr->line.p, pr->line.len);
  pr->line.len = 0;
}

static void op_line(printer *pr, int32_t i) {
  const fp_op *op = &pr->p->ops[i];
  sbuf *l = &pr->line;
  bool data = (unsigned)op->code < FP_NOPS &&
              (fp_op_class(op->code) == FP_OPC_COMM || fp_op_class(op->code) == FP_OPC_LOCAL);
  bool compute = (unsigned)op->code < FP_NOPS && fp_op_class(op->code) == FP_OPC_COMPUTE;
  sb_printf(l, "%" PRId32 "\t%s\t%s\t", i, fp_stream_name(op->stream), fp_op_name(op->code));
  if (data || op->dtype != FP_F32 || op->sdtype != FP_F32) {
    if (op->sdtype != op->dtype) sb_printf(l, "%s->", dtype_name(op->sdtype));
    sb_puts(l, dtype_name(op->dtype));
  }
  cell(pr);
  if (data || op->count) sb_printf(l, "n=%" PRId64, op->count);
  region(pr, "dst", &op->dst);
  region(pr, "src", &op->src);
  region(pr, "aux", &op->aux);
  if (op->comm != -1) {
    sb_puts(l, "\tcomm=");
    ref(pr, NM_COMM, op->comm);
  }
  if (op->tab != -1) {
    sb_puts(l, "\ttab=");
    ref(pr, NM_TAB, op->tab);
  }
  if (op->root != -1) sb_printf(l, "\troot=%" PRId32, op->root);
  if (op->only != -1 || op->only_comm != -1) {
    sb_printf(l, "\tonly=%" PRId32 "@", op->only);
    ref(pr, NM_COMM, op->only_comm);
  }
  if (op->event != -1) sb_printf(l, "\tev=%" PRId32, op->event);
  if (op->module != -1) {
    sb_puts(l, "\tmodule=");
    ref(pr, NM_MOD, op->module);
  }
  if (op->nuses > 0 && op->uses >= 0 && op->uses <= pr->p->nuses - op->nuses) {
    sb_puts(l, "\tuses=[");
    for (int32_t k = 0; k < op->nuses; k++) {
      if (k) sb_putc(l, ',');
      ref(pr, NM_BUF, pr->p->uses[op->uses + k]);
    }
    sb_putc(l, ']');
  }
  if (compute || op->pass != FP_PASS_FWD)
    sb_printf(l, "\tpass=%s", op->pass == FP_PASS_FWD ? "fwd" : op->pass == FP_PASS_BWD ? "bwd" : "?");
  if (op->alpha != 0 || signbit(op->alpha)) {
    sb_puts(l, compute ? "\tflops=" : "\talpha=");
    sb_double(l, op->alpha);
  }
  if (op->rows != 1) sb_printf(l, "\trows=%" PRId64, op->rows);
  if (op->dpitch) sb_printf(l, "\tdpitch=%" PRId64, op->dpitch);
  if (op->spitch) sb_printf(l, "\tspitch=%" PRId64, op->spitch);
  if (op->bucket != -1) {
    sb_puts(l, "\tbucket=");
    ref(pr, NM_BUCKET, op->bucket);
  }
  if (op->group != -1) sb_printf(l, "\tgroup=%" PRId32, op->group);
  endline(pr);
}

/* print each line of one table with aligned columns (two passes) */
static void table(printer *pr, const char *comment, int32_t n, int nalign, unsigned right,
                  void (*line)(printer *, int32_t)) {
  if (n <= 0) return;
  section(pr, nalign, right, "");
  for (int pass = 0; pass < 2; pass++) {
    pr->measuring = pass == 0;
    if (pass == 1) sb_printf(&pr->out, "\n# %s\n", comment);
    for (int32_t i = 0; i < n; i++) line(pr, i);
  }
}

static void print_ops(printer *pr) {
  const fp_prog *p = pr->p;
  if (p->nsegs <= 0 && p->nops <= 0) return;
  section(pr, 5, 1u, "  ");
  for (int pass = 0; pass < 2; pass++) {
    pr->measuring = pass == 0;
    if (pass == 1)
      sb_puts(&pr->out, "\n# segments (trainer hooks) and their ops: index, stream, op, dtype (src->dst), "
                        "count, operands\n");
    /* ops in array order; a segment's header goes before its first op, so
     * every op and every segment is printed once even in a broken program */
    int32_t k = 0;
    for (int32_t i = 0; i < p->nops; i++) {
      while (k < p->nsegs && p->segs[k].first <= i) seg_line(pr, k++);
      op_line(pr, i);
    }
    while (k < p->nsegs) seg_line(pr, k++);
  }
}

/* group the live ranges by buffer (a counting sort; bad buffer ids are not
 * printed) */
static void build_lives(printer *pr, fp_arena *a) {
  const fp_prog *p = pr->p;
  int32_t nb = p->nbufs > 0 ? p->nbufs : 0;
  pr->lstart = fp_alloc_array(a, (size_t)nb + 2, sizeof *pr->lstart);
  pr->lord = fp_alloc_array(a, (size_t)(p->nlives > 0 ? p->nlives : 0) + 1, sizeof *pr->lord);
  for (int32_t k = 0; k < p->nlives; k++)
    if (p->lives[k].buf >= 0 && p->lives[k].buf < nb) pr->lstart[p->lives[k].buf + 2]++;
  for (int32_t b = 0; b < nb; b++) pr->lstart[b + 2] += pr->lstart[b + 1];
  for (int32_t k = 0; k < p->nlives; k++)
    if (p->lives[k].buf >= 0 && p->lives[k].buf < nb) pr->lord[pr->lstart[p->lives[k].buf + 1]++] = k;
}

static void build_names(printer *pr) {
  for (int kind = NM_COMM; kind <= NM_BUCKET; kind++) {
    int32_t n = table_len(pr->p, kind);
    fp_namemap_init(&pr->names[kind], pr->p->arena, n);
    for (int32_t i = 0; i < n; i++) {
      const char *nm = table_name(pr->p, kind, i);
      if (nm) fp_namemap_put(&pr->names[kind], nm, i);
    }
  }
}

char *fp_ir_print_str(const fp_prog *p, size_t *len) {
  printer pr = {.p = p};
  /* the name maps live in a scratch arena: printing does not grow p's */
  fp_arena *scratch = fp_arena_new();
  fp_prog tmp = *p;
  tmp.arena = scratch;
  pr.p = &tmp;
  build_names(&pr);
  build_lives(&pr, scratch);
  print_header(&pr);
  table(&pr, "communicators: ranks per instance, rank stride between members", p->ncomms, 5, 2u, comm_line);
  table(&pr, "extent tables: per-rank element offsets and counts", p->ntabs, 4, 2u, table_lines);
  table(&pr, "buckets", p->nbuckets, 3, 2u, bucket_line);
  table(&pr, "buffers: lifetime, category, bytes, arena offset (-1: not placed)", p->nbufs, 7, 2u, buf_line);
  table(&pr, "modules: flops per micro-batch, activation bytes", p->nmods, 6, 2u, module_line);
  table(&pr, "params: shape, module, bucket, dtypes main/param/grad, placement, storage views", p->nparams, 8, 2u,
        param_line);
  print_ops(&pr);
  fp_arena_free(scratch);
  free(pr.line.p);
  if (!pr.out.p) sb_reserve(&pr.out, 1);
  if (len) *len = pr.out.len;
  return pr.out.p;
}

void fp_ir_print(const fp_prog *p, FILE *f) {
  size_t n;
  char *s = fp_ir_print_str(p, &n);
  fwrite(s, 1, n, f);
  free(s);
}
