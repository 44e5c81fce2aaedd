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

typedef fp_sbuf sbuf;
#define sb_putn fpi_sb_putn
#define sb_putc fpi_sb_putc
#define sb_i64 fpi_sb_i64
#define sb_double fpi_sb_double
/* a string literal */
#define sb_lit(b, s) fpi_sb_putn((b), "" s, sizeof(s) - 1)

static void sb_puts(sbuf *b, const char *s) { fpi_sb_putn(b, s, strlen(s)); }

static void sb_pad(sbuf *b, size_t n) {
  char *q = fpi_sb_room(b, n);
  memset(q, ' ', n);
  b->len += n;
  q[n] = 0;
}

/* a quoted string: \" \\ \n \t \r, other control bytes as \xHH; bytes of
 * UTF-8 sequences pass through */
static void sb_quoted(sbuf *b, const char *s) {
  static const char hex[] = "0123456789abcdef";
  sb_putc(b, '"');
  for (;;) {
    const char *r = s; /* the run that needs no escape */
    while ((unsigned char)*r >= 0x20 && *r != '"' && *r != '\\' && *r != 0x7f) r++;
    if (r > s) sb_putn(b, s, (size_t)(r - s));
    s = r;
    if (!*s) break;
    unsigned char c = (unsigned char)*s++;
    switch (c) {
      case '"': sb_lit(b, "\\\""); break;
      case '\\': sb_lit(b, "\\\\"); break;
      case '\n': sb_lit(b, "\\n"); break;
      case '\t': sb_lit(b, "\\t"); break;
      case '\r': sb_lit(b, "\\r"); break;
      default: {
        char t[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
        sb_putn(b, t, 4);
      }
    }
  }
  sb_putc(b, '"');
}

/* bare when it matches [A-Za-z_][A-Za-z0-9_.:/-]* (fpi_ir_name_is_bare) */
static bool bare_char(unsigned char c) {
  static const uint8_t tab[256] = {
      ['_'] = 3, ['.'] = 1, [':'] = 1, ['/'] = 1, ['-'] = 1,
#define R10(c0) [c0] = 1, [c0 + 1] = 1, [c0 + 2] = 1, [c0 + 3] = 1, [c0 + 4] = 1, [c0 + 5] = 1, [c0 + 6] = 1, \
                [c0 + 7] = 1, [c0 + 8] = 1, [c0 + 9] = 1
      R10('0'),
#undef R10
#define L13(c0) [c0] = 3, [c0 + 1] = 3, [c0 + 2] = 3, [c0 + 3] = 3, [c0 + 4] = 3, [c0 + 5] = 3, [c0 + 6] = 3, \
                [c0 + 7] = 3, [c0 + 8] = 3, [c0 + 9] = 3, [c0 + 10] = 3, [c0 + 11] = 3, [c0 + 12] = 3
      L13('A'), L13('N'), L13('a'), L13('n'),
#undef L13
  };
  return tab[c] & 1;
}

static void sb_name(sbuf *b, const char *s) {
  if (s && ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) {
    const char *r = s + 1;
    while (bare_char((unsigned char)*r)) r++;
    if (!*r) {
      sb_putn(b, s, (size_t)(r - s));
      return;
    }
  }
  sb_quoted(b, s ? s : "");
}

/* ---- lines of aligned cells ------------------------------------------------------ */
/* A line is built as cells separated by '\t' (never part of the text: names
 * escape it). The first `nalign` cells are padded to the widest cell of their
 * column over the section (right-aligned where `right` has the bit); the
 * rest are joined with two spaces. A section's lines are kept (measuring
 * their columns) until it ends, then written aligned. */
#define MAXCOLS 8
typedef struct printer {
  const fp_prog *p;
  sbuf out;
  sbuf line;               /* the current line's cells */
  sbuf sec;                /* the section's lines so far */
  size_t *lend;            /* per kept line: its end in sec, times 2, plus 1 for a raw line */
  size_t nlines, caplines;
  int nalign;
  unsigned right;          /* bit c: column c right-aligned */
  size_t width[MAXCOLS];
  const char *indent;
  fp_namemap names[5];     /* comm, tab, buf, module, bucket: unique names */
  const char **reftext[5]; /* per kind and index: how ref() writes it (built on first use) */
  uint32_t *reflen[5];
  fp_arena *scratch;
  int32_t *lstart;         /* per buffer: its live ranges are lord[lstart[b] .. lstart[b+1]) */
  int32_t *lord;           /* indices of p->lives grouped by buffer, in creation order */
} printer;

enum { NM_COMM, NM_TAB, NM_BUF, NM_MOD, NM_BUCKET };

static void cell(printer *pr) { sb_putc(&pr->line, '\t'); }

static void keep(printer *pr, const char *s, size_t n, bool raw) {
  sb_putn(&pr->sec, s, n);
  if (pr->nlines == pr->caplines) {
    pr->caplines = pr->caplines ? 2 * pr->caplines : 1024;
    pr->lend = realloc(pr->lend, pr->caplines * sizeof *pr->lend);
    FP_ASSERT(pr->lend);
  }
  pr->lend[pr->nlines++] = pr->sec.len * 2 + raw;
}

/* text written as is (no columns) at this point of the section */
static void raw(printer *pr, const char *s, size_t n) { keep(pr, s, n, true); }

/* finish the current line: measure its columns and keep it */
static void endline(printer *pr) {
  const char *s = pr->line.p ? pr->line.p : "";
  size_t n = pr->line.len, st = 0;
  for (int c = 0; c < pr->nalign; c++) {
    const char *t = memchr(s + st, '\t', n - st);
    size_t e = t ? (size_t)(t - s) : n;
    if (e - st > pr->width[c]) pr->width[c] = e - st;
    if (!t) break;
    st = e + 1;
  }
  keep(pr, s, n, false);
  pr->line.len = 0;
  if (pr->line.p) pr->line.p[0] = 0;
}

/* write one kept line aligned */
static void write_line(printer *pr, const char *s, size_t n) {
  /* cells: [start, end) pairs */
  size_t cs[64], ce[64];
  int nc = 0;
  size_t st = 0;
  for (;;) {
    const char *t = memchr(s + st, '\t', n - st);
    size_t e = t ? (size_t)(t - s) : n;
    if (nc < 64) {
      cs[nc] = st;
      ce[nc] = e;
      nc++;
    }
    if (!t) break;
    st = e + 1;
  }
  sbuf *o = &pr->out;
  /* the last non-empty cell: nothing is padded after it */
  int last = nc - 1;
  while (last > 0 && ce[last] == cs[last]) last--;
  sb_puts(o, pr->indent);
  for (int c = 0; c <= last; c++) {
    size_t w = ce[c] - cs[c];
    if (c < pr->nalign) {
      size_t pad = pr->width[c] > w ? pr->width[c] - w : 0;
      if (pr->right >> c & 1) {
        sb_pad(o, pad);
        sb_putn(o, s + cs[c], w);
      } else {
        sb_putn(o, s + cs[c], w);
        if (c < last) sb_pad(o, pad);
      }
    } else {
      if (w == 0) continue;
      sb_putn(o, s + cs[c], w);
    }
    if (c < last) sb_lit(o, "  ");
  }
  sb_putc(o, '\n');
}

static void section(printer *pr, int nalign, unsigned right, const char *indent) {
  pr->nalign = nalign < MAXCOLS ? nalign : MAXCOLS;
  pr->right = right;
  pr->indent = indent;
  memset(pr->width, 0, sizeof pr->width);
  pr->sec.len = 0;
  pr->nlines = 0;
}

/* write the section's kept lines */
static void section_end(printer *pr) {
  size_t st = 0;
  for (size_t i = 0; i < pr->nlines; i++) {
    size_t e = pr->lend[i] >> 1;
    if (pr->lend[i] & 1)
      sb_putn(&pr->out, pr->sec.p + st, e - st);
    else
      write_line(pr, pr->sec.p + st, e - st);
    st = e;
  }
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
static void ref_slow(printer *pr, sbuf *b, int kind, int32_t i) {
  if (i >= 0 && i < table_len(pr->p, kind)) {
    const char *nm = table_name(pr->p, kind, i);
    if (nm && fpi_namemap_get(&pr->names[kind], nm, strlen(nm)) == i) {
      sb_name(b, nm);
      return;
    }
  }
  sb_putc(b, '$');
  sb_i64(b, i);
}

static void ref(printer *pr, int kind, int32_t i) {
  sbuf *b = &pr->line;
  if (i == -1) {
    sb_putc(b, '-');
    return;
  }
  int32_t n = table_len(pr->p, kind);
  if (i < 0 || i >= n) {
    ref_slow(pr, b, kind, i);
    return;
  }
  if (!pr->reftext[kind]) {
    pr->reftext[kind] = fpi_alloc_array(pr->scratch, (size_t)n, sizeof *pr->reftext[kind]);
    pr->reflen[kind] = fpi_alloc_array(pr->scratch, (size_t)n, sizeof *pr->reflen[kind]);
  }
  if (!pr->reftext[kind][i]) { /* first use: write it once */
    size_t at = b->len;
    ref_slow(pr, b, kind, i);
    pr->reftext[kind][i] = fpi_strndup(pr->scratch, b->p + at, b->len - at);
    pr->reflen[kind][i] = (uint32_t)(b->len - at);
    return;
  }
  sb_putn(b, pr->reftext[kind][i], pr->reflen[kind][i]);
}

static void region(printer *pr, const char *key, size_t keylen, const fp_region *r) {
  if (r->buf == -1 && !r->tabrel && r->off == 0 && r->stride == 0) return;
  sbuf *l = &pr->line;
  sb_putn(l, key, keylen); /* "\tdst=" */
  ref(pr, NM_BUF, r->buf);
  sb_putc(l, '[');
  sb_i64(l, r->off);
  if (r->stride) {
    if (r->stride > 0) sb_putc(l, '+');
    sb_i64(l, r->stride);
    sb_lit(l, "*g");
  }
  if (r->tabrel) sb_lit(l, "+tab");
  sb_putc(l, ']');
}

static void view(printer *pr, const char *key, size_t keylen, const fp_view *v) {
  if (v->buf == -1 && v->off == 0) return;
  sbuf *l = &pr->line;
  sb_putn(l, key, keylen); /* "\tmain=" */
  ref(pr, NM_BUF, v->buf);
  sb_putc(l, '[');
  sb_i64(l, v->off);
  sb_putc(l, ']');
}
#define REGION(pr, key, r) region((pr), "\t" key "=", sizeof(key) + 1, (r))
#define VIEW(pr, key, v) view((pr), "\t" key "=", sizeof(key) + 1, (v))

static const char *dtype_name(int t) { return t >= 0 && t < FP_NDTYPES ? fpi_dtype_name((fp_dtype)t) : "?"; }

/* ---- sections ------------------------------------------------------------------- */
/* "key N\n" */
static void header_int(sbuf *o, const char *key, int64_t v) {
  sb_puts(o, key);
  sb_putc(o, ' ');
  sb_i64(o, v);
  sb_putc(o, '\n');
}

/* "hardware NAME  key=value ..." (fp_hw_fields' order) */
static void print_hw(sbuf *o, const fp_hw *h) {
  sb_lit(o, "hardware ");
  sb_quoted(o, h->name);
  for (int k = 0; k < FP_HW_NFIELDS; k++) {
    if (FPI_HW_OMITTED(h, k)) continue;
    sb_lit(o, "  ");
    sb_puts(o, fp_hw_fields[k].key);
    sb_putc(o, '=');
    if (fp_hw_fields[k].integer)
      sb_i64(o, fpi_hw_geti(h, k));
    else
      sb_double(o, fpi_hw_getd(h, k));
  }
  sb_putc(o, '\n');
}

static void print_header(printer *pr) {
  const fp_prog *p = pr->p;
  sbuf *o = &pr->out;
  sb_lit(o, "# flexplan IR (.fpir): one SPMD program for every rank; see docs/ir.md\n");
  sb_lit(o, "fpir 1\n");
  if (p->model) {
    sb_lit(o, "model ");
    sb_quoted(o, p->model);
    sb_putc(o, '\n');
  }
  if (p->strategy) {
    sb_lit(o, "strategy ");
    sb_quoted(o, p->strategy);
    sb_putc(o, '\n');
  }
  header_int(o, "world_size", p->world_size);
  header_int(o, "ranks_per_node", p->ranks_per_node);
  if (p->tp != 1) header_int(o, "tp", p->tp);
  header_int(o, "grad_accumulation", p->grad_accumulation);
  header_int(o, "arena_bytes", p->arena_bytes);
  header_int(o, "host_bytes", p->host_bytes);
  header_int(o, "events", p->nevents);
  if (p->memory_budget_bytes > 0) header_int(o, "memory_budget_bytes", p->memory_budget_bytes);
  if (p->hw.name) print_hw(o, &p->hw);
  if (p->optim != FP_OPTIM_NONE) {
    sb_lit(o, "optimizer ");
    sb_puts(o, fpi_optim_name(p->optim) ? fpi_optim_name(p->optim) : "?");
    sb_putc(o, ' ');
    sb_puts(o, dtype_name(p->optim_dtype));
    sb_putc(o, '\n');
  }
}

/* "KIND\tI\tNAME" */
static void decl(printer *pr, const char *kind, size_t kindlen, int32_t i, const char *name) {
  sbuf *l = &pr->line;
  sb_putn(l, kind, kindlen);
  sb_i64(l, i);
  sb_putc(l, '\t');
  sb_name(l, name);
}
#define DECL(pr, kind, i, name) decl((pr), kind "\t", sizeof(kind), (i), (name))

/* "\tkey=N" */
static void field(sbuf *l, const char *key, size_t keylen, int64_t v) {
  sb_putn(l, key, keylen);
  sb_i64(l, v);
}
#define FIELD(l, key, v) field((l), "\t" key "=", sizeof(key) + 1, (v))

static void comm_line(printer *pr, int32_t i) {
  const fp_ir_comm *c = &pr->p->comms[i];
  DECL(pr, "comm", i, c->name);
  FIELD(&pr->line, "size", c->size);
  FIELD(&pr->line, "stride", c->stride);
  endline(pr);
}

static void bucket_line(printer *pr, int32_t i) {
  DECL(pr, "bucket", i, pr->p->buckets[i]);
  endline(pr);
}

static void table_lines(printer *pr, int32_t i) {
  const fp_ir_table *t = &pr->p->tabs[i];
  DECL(pr, "table", i, t->name);
  FIELD(&pr->line, "n", t->n);
  endline(pr);
  sbuf *l = &pr->line; /* the rows, kept as raw text */
  for (int w = 0; w < 2; w++) {
    const int64_t *v = w ? t->cnt : t->off;
    for (int64_t j = 0; j < t->n; j += 16) {
      sb_puts(l, w ? "  cnt" : "  off");
      for (int64_t k = j; k < t->n && k < j + 16; k++) {
        sb_putc(l, ' ');
        sb_i64(l, v[k]);
      }
      sb_putc(l, '\n');
    }
  }
  if (l->len) raw(pr, l->p, l->len);
  l->len = 0;
}

static const char *kind_name(int k) {
  return k == FP_BUF_PERSISTENT ? "persistent" : k == FP_BUF_TRANSIENT ? "transient" : "?";
}

static void buf_line(printer *pr, int32_t i) {
  const fp_ir_buf *b = &pr->p->bufs[i];
  sbuf *l = &pr->line;
  DECL(pr, "buf", i, b->name);
  sb_putc(l, '\t');
  sb_puts(l, kind_name(b->kind));
  sb_putc(l, '\t');
  sb_puts(l, fpi_buf_cat_name(b->cat));
  FIELD(l, "bytes", b->bytes);
  FIELD(l, "offset", b->offset);
  if (b->bucket != -1) {
    sb_lit(l, "\tbucket=");
    ref(pr, NM_BUCKET, b->bucket);
  }
  if (b->host) sb_lit(l, "\thost");
  for (int32_t k = pr->lstart[i]; k < pr->lstart[i + 1]; k++) {
    const fp_ir_live *lv = &pr->p->lives[pr->lord[k]];
    if (k == pr->lstart[i])
      sb_lit(l, "\tlive=");
    else
      sb_putc(l, ',');
    sb_i64(l, lv->first);
    sb_lit(l, "..");
    sb_i64(l, lv->last);
  }
  endline(pr);
}

static void module_line(printer *pr, int32_t i) {
  const fp_ir_module *m = &pr->p->mods[i];
  sbuf *l = &pr->line;
  DECL(pr, "module", i, m->name);
  sb_lit(l, "\tflops_fwd=");
  sb_double(l, m->flops_fwd);
  sb_lit(l, "\tflops_bwd=");
  sb_double(l, m->flops_bwd);
  FIELD(l, "act", m->activation_bytes);
  if (m->recompute) FIELD(l, "recompute", m->saved_bytes);
  endline(pr);
}

static void param_line(printer *pr, int32_t i) {
  const fp_ir_param *q = &pr->p->params[i];
  sbuf *l = &pr->line;
  DECL(pr, "param", i, q->name);
  sb_lit(l, "\tshape=[");
  int nd = q->ndim < 0 ? 0 : q->ndim > 8 ? 8 : q->ndim;
  for (int k = 0; k < nd; k++) {
    if (k) sb_putc(l, ',');
    sb_i64(l, q->shape[k]);
  }
  sb_lit(l, "]\tmodule=");
  ref(pr, NM_MOD, q->module);
  sb_lit(l, "\tbucket=");
  ref(pr, NM_BUCKET, q->bucket);
  sb_lit(l, "\tdtypes=");
  sb_puts(l, dtype_name(q->main_dtype));
  sb_putc(l, '/');
  sb_puts(l, dtype_name(q->param_dtype));
  sb_putc(l, '/');
  sb_puts(l, dtype_name(q->grad_dtype));
  sb_putc(l, '\t');
  sb_puts(l, fpi_ir_placement_name(q->placement));
  if (q->dim) FIELD(l, "dim", q->dim);
  if (q->comm != -1) {
    sb_lit(l, "\tcomm=");
    ref(pr, NM_COMM, q->comm);
  }
  if (q->owner != -1) FIELD(l, "owner", q->owner);
  if (q->tab != -1) {
    sb_lit(l, "\ttab=");
    ref(pr, NM_TAB, q->tab);
  }
  if (q->chunk) FIELD(l, "chunk", q->chunk);
  if (q->tp_dim != -1) FIELD(l, "tp_dim", q->tp_dim);
  if (!q->requires_grad) sb_lit(l, "\tfrozen");
  VIEW(pr, "main", &q->main);
  VIEW(pr, "grad", &q->grad);
  VIEW(pr, "weight", &q->weight);
  VIEW(pr, "ugrad", &q->ugrad);
  VIEW(pr, "opt", &q->opt);
  VIEW(pr, "scales", &q->scales);
  /* last: present on tied params only, so the common columns stay aligned */
  if (q->nusers > 0 && q->users) {
    sb_lit(l, "\tusers=[");
    for (int32_t k = 0; k < q->nusers; k++) {
      if (k) sb_putc(l, ',');
      ref(pr, NM_MOD, q->users[k]);
    }
    sb_putc(l, ']');
  }
  endline(pr);
}

static void seg_line(printer *pr, int32_t i) {
  const fp_seg *s = &pr->p->segs[i];
  sbuf *l = &pr->line;
  sb_lit(l, "segment ");
  sb_i64(l, i);
  sb_putc(l, ' ');
  sb_puts(l, fpi_seg_name(s->kind));
  if (fpi_seg_has_module(s->kind) || s->module != -1) {
    sb_putc(l, '(');
    ref(pr, NM_MOD, s->module);
    sb_putc(l, ')');
  }
  sb_lit(l, " micro=");
  sb_i64(l, s->micro);
  sb_putc(l, '\n');
  raw(pr, l->p, l->len);
  l->len = 0;
}

static void op_line(printer *pr, int32_t i) {
  const fp_op *op = &pr->p->ops[i];
  sbuf *l = &pr->line;
  fp_opclass cls = (unsigned)op->code < FP_NOPS ? fpi_op_class(op->code) : (fp_opclass)-1;
  bool data = cls == FP_OPC_COMM || cls == FP_OPC_LOCAL;
  bool compute = cls == FP_OPC_COMPUTE;
  sb_i64(l, i);
  sb_putc(l, '\t');
  sb_puts(l, fpi_stream_name(op->stream));
  sb_putc(l, '\t');
  sb_puts(l, fpi_op_name(op->code));
  sb_putc(l, '\t');
  if (data || op->dtype != FP_F32 || op->sdtype != FP_F32) {
    if (op->sdtype != op->dtype) {
      sb_puts(l, dtype_name(op->sdtype));
      sb_lit(l, "->");
    }
    sb_puts(l, dtype_name(op->dtype));
  }
  cell(pr);
  if (data || op->count) {
    sb_lit(l, "n=");
    sb_i64(l, op->count);
  }
  REGION(pr, "dst", &op->dst);
  REGION(pr, "src", &op->src);
  REGION(pr, "aux", &op->aux);
  if (op->comm != -1) {
    sb_lit(l, "\tcomm=");
    ref(pr, NM_COMM, op->comm);
  }
  if (op->red != FP_RED_SUM) {
    sb_lit(l, "\tred=");
    sb_puts(l, fpi_redop_name(op->red));
  }
  if (op->tab != -1) {
    sb_lit(l, "\ttab=");
    ref(pr, NM_TAB, op->tab);
  }
  if (op->root != -1) FIELD(l, "root", op->root);
  if (op->only != -1 || op->only_comm != -1) {
    FIELD(l, "only", op->only);
    sb_putc(l, '@');
    ref(pr, NM_COMM, op->only_comm);
  }
  if (op->event != -1) FIELD(l, "ev", op->event);
  if (op->module != -1) {
    sb_lit(l, "\tmodule=");
    ref(pr, NM_MOD, op->module);
  }
  if (op->nuses > 0 && op->uses >= 0 && op->uses <= pr->p->nuses - op->nuses) {
    sb_lit(l, "\tuses=[");
    for (int32_t k = 0; k < op->nuses; k++) {
      if (k) sb_putc(l, ',');
      ref(pr, NM_BUF, pr->p->uses[op->uses + k]);
    }
    sb_putc(l, ']');
  }
  if (compute || op->pass != FP_PASS_FWD) {
    sb_lit(l, "\tpass=");
    sb_puts(l, op->pass == FP_PASS_FWD ? "fwd" : op->pass == FP_PASS_BWD ? "bwd" : op->pass == FP_PASS_OPT ? "opt" : "?");
  }
  if (op->alpha != 0 || signbit(op->alpha)) {
    if (compute)
      sb_lit(l, "\tflops=");
    else
      sb_lit(l, "\talpha=");
    sb_double(l, op->alpha);
  }
  fp_op_shape sh = fpi_op_shape_of(pr->p, op);
  if (sh.rows != 1) FIELD(l, "rows", sh.rows);
  if (sh.dpitch) FIELD(l, "dpitch", sh.dpitch);
  if (sh.spitch) FIELD(l, "spitch", sh.spitch);
  if (op->bucket != -1) {
    sb_lit(l, "\tbucket=");
    ref(pr, NM_BUCKET, op->bucket);
  }
  if (op->group != -1) FIELD(l, "group", op->group);
  endline(pr);
}

/* print each line of one table with aligned columns */
static void table(printer *pr, const char *comment, int32_t n, int nalign, unsigned right,
                  void (*line)(printer *, int32_t)) {
  if (n <= 0) return;
  section(pr, nalign, right, "");
  for (int32_t i = 0; i < n; i++) line(pr, i);
  sb_lit(&pr->out, "\n# ");
  sb_puts(&pr->out, comment);
  sb_putc(&pr->out, '\n');
  section_end(pr);
}

static void print_ops(printer *pr) {
  const fp_prog *p = pr->p;
  if (p->nsegs <= 0 && p->nops <= 0) return;
  section(pr, 5, 1u, "  ");
  /* ops in array order; a segment's header goes before its first op, so
   * every op and every segment is printed once even in a broken program */
  int32_t k = 0;
  for (int32_t i = 0; i < p->nops; i++) {
    while (k < p->nsegs && p->segs[k].first <= i) seg_line(pr, k++);
    op_line(pr, i);
  }
  while (k < p->nsegs) seg_line(pr, k++);
  sb_lit(&pr->out, "\n# segments (trainer hooks) and their ops: index, stream, op, dtype (src->dst), "
                   "count, operands\n");
  section_end(pr);
}

/* group the live ranges by buffer (a counting sort; bad buffer ids are not
 * printed) */
static void build_lives(printer *pr, fp_arena *a) {
  const fp_prog *p = pr->p;
  int32_t nb = p->nbufs > 0 ? p->nbufs : 0;
  pr->lstart = fpi_alloc_array(a, (size_t)nb + 2, sizeof *pr->lstart);
  pr->lord = fpi_alloc_array(a, (size_t)(p->nlives > 0 ? p->nlives : 0) + 1, sizeof *pr->lord);
  for (int32_t k = 0; k < p->nlives; k++)
    if (p->lives[k].buf >= 0 && p->lives[k].buf < nb) pr->lstart[p->lives[k].buf + 2]++;
  for (int32_t b = 0; b < nb; b++) pr->lstart[b + 2] += pr->lstart[b + 1];
  for (int32_t k = 0; k < p->nlives; k++)
    if (p->lives[k].buf >= 0 && p->lives[k].buf < nb) pr->lord[pr->lstart[p->lives[k].buf + 1]++] = k;
}

static void build_names(printer *pr) {
  for (int kind = NM_COMM; kind <= NM_BUCKET; kind++) {
    int32_t n = table_len(pr->p, kind);
    fpi_namemap_init(&pr->names[kind], pr->p->arena, n);
    for (int32_t i = 0; i < n; i++) {
      const char *nm = table_name(pr->p, kind, i);
      if (nm) fpi_namemap_put(&pr->names[kind], nm, i);
    }
  }
}

char *fpi_ir_print_str(const fp_prog *p, size_t *len) {
  printer pr = {.p = p};
  /* the name maps live in a scratch arena: printing does not grow p's */
  fp_arena *scratch = fpi_arena_new();
  fp_prog tmp = *p;
  tmp.arena = scratch;
  pr.p = &tmp;
  pr.scratch = scratch;
  build_names(&pr);
  build_lives(&pr, scratch);
  /* about 60 bytes per op line: one allocation for most programs */
  fpi_sb_room(&pr.out, 4096 + (size_t)(p->nops > 0 ? p->nops : 0) * 64 + (size_t)(p->nbufs > 0 ? p->nbufs : 0) * 96)[0] = 0;
  print_header(&pr);
  table(&pr, "communicators: ranks per instance, rank stride between members", p->ncomms, 5, 2u, comm_line);
  table(&pr, "extent tables: per-rank element offsets and counts", p->ntabs, 4, 2u, table_lines);
  table(&pr, "buckets", p->nbuckets, 3, 2u, bucket_line);
  table(&pr, "buffers: lifetime, category, bytes, arena offset (-1: not placed)", p->nbufs, 7, 2u, buf_line);
  table(&pr, "modules: flops per micro-batch, activation bytes", p->nmods, 6, 2u, module_line);
  table(&pr, "params: shape, module, bucket, dtypes main/param/grad, placement, storage views", p->nparams, 8, 2u,
        param_line);
  print_ops(&pr);
  fpi_arena_free(scratch);
  free(pr.line.p);
  free(pr.sec.p);
  free(pr.lend);
  if (len) *len = pr.out.len;
  return pr.out.p;
}

void fpi_ir_print(const fp_prog *p, FILE *f) {
  size_t n;
  char *s = fpi_ir_print_str(p, &n);
  fwrite(s, 1, n, f);
  free(s);
}
