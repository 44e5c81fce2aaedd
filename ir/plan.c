/* plan.c - plan.json: the compiled plan the executor loads.
 *
 * A plan is the program of ir.h serialized as JSON (schemas/plan.schema.json)
 * with a format tag, the planner's version and a content hash: FNV-1a 64 of
 * the program's canonical .fpir text, so two plans are the same program
 * exactly when their hashes agree, and ranks can compare plans by hash
 * before the first collective.
 *
 * The writer writes the file into one string, one table row per line, so a
 * plan diffs well; keys come in a fixed order, integers as integers, doubles
 * in their shortest round-trip form (the bytes are those json-c's serializer
 * gave when the writer built json-c objects; tests/test_fmt.c checks the
 * escaping).
 *
 * The reader trusts nothing and reads the text once, with base/json.c's
 * strict pull parser, straight into the program: every member is type- and
 * range-checked as it comes, with an error located at its JSON pointer
 * (syntax errors, duplicate members and a document that is no plan are
 * reported first, as a whole-text parse finds them); then the hash is
 * recomputed and compared and the program verified (verifier messages
 * located at /ops/N, /buffers/N, ...). On any failure it returns NULL;
 * whatever it allocated is in the caller's arena. */
#include "irpriv.h"
#include "../base/utf8.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"

#define PLAN_FORMAT "flexplan.plan.v1"

/* fpi_prog_hash: ir/hash.c (a canonical binary walk, not the text) */

/* ---- writer ----------------------------------------------------------------- */
/* The file is written into one string, then to f. Its bytes are what json-c's
 * serializer gave when the values were json-c objects (JSON_C_TO_STRING_PLAIN
 * | JSON_C_TO_STRING_NOSLASHESCAPE): members as "key":value with no spaces,
 * integers in decimal, doubles as their text, strings escaped as below
 * (tests/test_fmt.c compares the escaping with json-c's). */
static const char *kind_names[] = {"persistent", "transient", NULL};
static const char *pass_names[] = {"fwd", "bwd", "opt", NULL};

typedef struct wr {
  fp_sbuf b;
  bool ok;
} wr;

#define W_LIT(w, s) fpi_sb_putn(&(w)->b, "" s, sizeof(s) - 1)

/* a JSON string: \" \\ \b \f \n \r \t, other bytes below 0x20 as \u00hh,
 * everything else (also '/', 0x7f and UTF-8) as is */
static void w_str(wr *w, const char *s) { fpi_json_put_string(&w->b, s); }

/* members of a row: "key":value, the first one opening the object with '{' */
#define KEY(w, first, k) fpi_sb_putn(&(w)->b, (first) ? "{\"" k "\":" : ",\"" k "\":", sizeof(k) + 3)
static void w_int(wr *w, int64_t v) { fpi_sb_i64(&w->b, v); }
static void w_bool(wr *w, bool v) {
  if (v)
    W_LIT(w, "true");
  else
    W_LIT(w, "false");
}
#define M_INT(w, first, k, v) (KEY(w, first, k), w_int((w), (v)))
#define M_STR(w, first, k, v) (KEY(w, first, k), w_str((w), (v)))
#define M_BOOL(w, first, k, v) (KEY(w, first, k), w_bool((w), (v)))

/* a double in its shortest round-trip text; false (nothing written) for
 * inf/nan, which JSON cannot hold */
static bool dbl_ok(double d) { return isfinite(d); }
static void w_dbl(wr *w, double d) {
  if (d == 0 && signbit(d))
    W_LIT(w, "-0.0"); /* "-0" would read back as the integer 0 */
  else
    fpi_sb_double(&w->b, d);
}

static void w_region(wr *w, const fp_region *r) {
  M_INT(w, true, "buffer", r->buf);
  M_INT(w, false, "offset", r->off);
  if (r->stride) M_INT(w, false, "stride", r->stride);
  if (r->tabrel) M_BOOL(w, false, "table_relative", true);
  fpi_sb_putc(&w->b, '}');
}

static void w_view(wr *w, const fp_view *v) {
  M_INT(w, true, "buffer", v->buf);
  M_INT(w, false, "offset", v->off);
  fpi_sb_putc(&w->b, '}');
}

static const char *dname(int t) { return t >= 0 && t < FP_NDTYPES ? fpi_dtype_name((fp_dtype)t) : "?"; }

static void jcomm(wr *w, const fp_prog *p, int32_t i) {
  const fp_ir_comm *c = &p->comms[i];
  M_STR(w, true, "name", c->name);
  M_INT(w, false, "size", c->size);
  M_INT(w, false, "stride", c->stride);
  fpi_sb_putc(&w->b, '}');
}

static void w_ints(wr *w, const int64_t *v, int64_t n) {
  fpi_sb_putc(&w->b, '[');
  for (int64_t j = 0; j < n; j++) {
    if (j) fpi_sb_putc(&w->b, ',');
    w_int(w, v[j]);
  }
  fpi_sb_putc(&w->b, ']');
}

static void jtable(wr *w, const fp_prog *p, int32_t i) {
  const fp_ir_table *t = &p->tabs[i];
  M_STR(w, true, "name", t->name);
  KEY(w, false, "off");
  w_ints(w, t->off, t->n);
  KEY(w, false, "cnt");
  w_ints(w, t->cnt, t->n);
  fpi_sb_putc(&w->b, '}');
}

static void jbucket(wr *w, const fp_prog *p, int32_t i) { w_str(w, p->buckets[i]); }

static void jbuf(wr *w, const fp_prog *p, int32_t i) {
  const fp_ir_buf *b = &p->bufs[i];
  M_STR(w, true, "name", b->name);
  if ((unsigned)b->kind > FP_BUF_TRANSIENT || (unsigned)b->cat >= FP_NBUFCATS) w->ok = false;
  M_STR(w, false, "kind", (unsigned)b->kind <= FP_BUF_TRANSIENT ? kind_names[b->kind] : "?");
  M_STR(w, false, "category", fpi_buf_cat_name(b->cat));
  M_INT(w, false, "bucket", b->bucket);
  M_BOOL(w, false, "host", b->host);
  M_INT(w, false, "bytes", b->bytes);
  M_INT(w, false, "offset", b->offset);
  fpi_sb_putc(&w->b, '}');
}

static void jmodule(wr *w, const fp_prog *p, int32_t i) {
  const fp_ir_module *m = &p->mods[i];
  M_STR(w, true, "name", m->name);
  if (dbl_ok(m->flops_fwd)) {
    KEY(w, false, "flops_fwd");
    w_dbl(w, m->flops_fwd);
  } else {
    w->ok = false;
  }
  if (dbl_ok(m->flops_bwd)) {
    KEY(w, false, "flops_bwd");
    w_dbl(w, m->flops_bwd);
  } else {
    w->ok = false;
  }
  M_INT(w, false, "activation_bytes", m->activation_bytes);
  if (m->recompute) M_INT(w, false, "recompute_saved_bytes", m->saved_bytes);
  fpi_sb_putc(&w->b, '}');
}

static void jparam(wr *w, const fp_prog *p, int32_t i) {
  const fp_ir_param *q = &p->params[i];
  if (q->ndim < 0 || q->ndim > 8) w->ok = false;
  if (q->placement < 0 || q->placement >= FP_IR_NPLACEMENTS) w->ok = false;
  M_STR(w, true, "name", q->name);
  KEY(w, false, "shape");
  w_ints(w, q->shape, q->ndim < 0 ? 0 : q->ndim > 8 ? 8 : q->ndim);
  M_INT(w, false, "module", q->module);
  if (q->nusers > 0 && q->users) {
    KEY(w, false, "users");
    fpi_sb_putc(&w->b, '[');
    for (int32_t k = 0; k < q->nusers; k++) {
      if (k) fpi_sb_putc(&w->b, ',');
      w_int(w, q->users[k]);
    }
    fpi_sb_putc(&w->b, ']');
  }
  M_INT(w, false, "bucket", q->bucket);
  M_STR(w, false, "main_dtype", dname(q->main_dtype));
  M_STR(w, false, "param_dtype", dname(q->param_dtype));
  M_STR(w, false, "grad_dtype", dname(q->grad_dtype));
  M_BOOL(w, false, "requires_grad", q->requires_grad);
  M_STR(w, false, "placement", fpi_ir_placement_name(q->placement));
  M_INT(w, false, "dim", q->dim);
  M_INT(w, false, "comm", q->comm);
  M_INT(w, false, "owner", q->owner);
  M_INT(w, false, "table", q->tab);
  M_INT(w, false, "chunk", q->chunk);
  if (q->tp_dim != -1) M_INT(w, false, "tp_dim", q->tp_dim);
  KEY(w, false, "main");
  w_view(w, &q->main);
  KEY(w, false, "grad");
  w_view(w, &q->grad);
  KEY(w, false, "weight");
  w_view(w, &q->weight);
  KEY(w, false, "ugrad");
  w_view(w, &q->ugrad);
  if (q->opt.buf >= 0) {
    KEY(w, false, "opt");
    w_view(w, &q->opt);
  }
  if (q->scales.buf >= 0) {
    KEY(w, false, "scales");
    w_view(w, &q->scales);
  }
  fpi_sb_putc(&w->b, '}');
}

static void jseg(wr *w, const fp_prog *p, int32_t i) {
  const fp_seg *s = &p->segs[i];
  if ((unsigned)s->kind >= FP_NSEGKINDS) w->ok = false;
  M_STR(w, true, "kind", fpi_seg_name(s->kind));
  M_INT(w, false, "module", s->module);
  M_INT(w, false, "micro", s->micro);
  M_INT(w, false, "first", s->first);
  M_INT(w, false, "count", s->nops);
  fpi_sb_putc(&w->b, '}');
}

static void jlive(wr *w, const fp_prog *p, int32_t i) {
  const fp_ir_live *l = &p->lives[i];
  M_INT(w, true, "buffer", l->buf);
  M_INT(w, false, "first", l->first);
  M_INT(w, false, "last", l->last);
  fpi_sb_putc(&w->b, '}');
}

static bool reg_empty(const fp_region *r) { return r->buf == -1 && !r->tabrel && !r->off && !r->stride; }

static void jop(wr *w, const fp_prog *p, int32_t i) {
  const fp_op *op = &p->ops[i];
  if ((unsigned)op->code >= FP_NOPS || (unsigned)op->stream >= FP_NSTREAMS || (unsigned)op->dtype >= FP_NDTYPES ||
      (unsigned)op->sdtype >= FP_NDTYPES || (unsigned)op->pass > FP_PASS_OPT || (unsigned)op->red >= FP_NREDOPS) {
    w->ok = false;
    W_LIT(w, "{}");
    return;
  }
  M_STR(w, true, "op", fpi_op_name(op->code));
  M_STR(w, false, "stream", fpi_stream_name(op->stream));
  M_STR(w, false, "dtype", fpi_dtype_name(op->dtype));
  if (op->sdtype != op->dtype) M_STR(w, false, "sdtype", fpi_dtype_name(op->sdtype));
  M_INT(w, false, "count", op->count);
  if (!reg_empty(&op->dst)) {
    KEY(w, false, "dst");
    w_region(w, &op->dst);
  }
  if (!reg_empty(&op->src)) {
    KEY(w, false, "src");
    w_region(w, &op->src);
  }
  if (!reg_empty(&op->aux)) {
    KEY(w, false, "aux");
    w_region(w, &op->aux);
  }
  if (op->comm != -1) M_INT(w, false, "comm", op->comm);
  if (op->red != FP_RED_SUM) M_STR(w, false, "red", fpi_redop_name(op->red));
  if (op->tab != -1) M_INT(w, false, "table", op->tab);
  if (op->root != -1) M_INT(w, false, "root", op->root);
  if (op->only != -1) M_INT(w, false, "only", op->only);
  if (op->only_comm != -1) M_INT(w, false, "only_comm", op->only_comm);
  if (op->event != -1) M_INT(w, false, "event", op->event);
  if (op->module != -1) M_INT(w, false, "module", op->module);
  if (op->pass != FP_PASS_FWD) M_STR(w, false, "pass", pass_names[op->pass]);
  if (op->alpha != 0 || signbit(op->alpha)) {
    if (dbl_ok(op->alpha)) {
      KEY(w, false, "alpha");
      w_dbl(w, op->alpha);
    } else {
      w->ok = false;
    }
  }
  fp_op_shape sh = fpi_op_shape_of(p, op);
  if (sh.rows != 1) M_INT(w, false, "rows", sh.rows);
  if (sh.dpitch) M_INT(w, false, "dpitch", sh.dpitch);
  if (sh.spitch) M_INT(w, false, "spitch", sh.spitch);
  if (op->bucket != -1) M_INT(w, false, "bucket", op->bucket);
  if (op->group != -1) M_INT(w, false, "group", op->group);
  if (op->nuses > 0) {
    if (op->uses < 0 || op->uses > p->nuses - op->nuses) {
      w->ok = false;
    } else {
      KEY(w, false, "uses");
      fpi_sb_putc(&w->b, '[');
      for (int32_t k = 0; k < op->nuses; k++) {
        if (k) fpi_sb_putc(&w->b, ',');
        w_int(w, p->uses[op->uses + k]);
      }
      fpi_sb_putc(&w->b, ']');
    }
  }
  fpi_sb_putc(&w->b, '}');
}

/* ",\n  \"key\": " */
static void w_member(wr *w, const char *key, bool first) {
  if (!first) fpi_sb_putc(&w->b, ',');
  W_LIT(w, "\n  \"");
  fpi_sb_puts(&w->b, key);
  W_LIT(w, "\": ");
}

/* "  \"key\": [\n    row,\n    row\n  ]" */
static void write_array(wr *w, const char *key, const fp_prog *p, int32_t n,
                        void (*row)(wr *, const fp_prog *, int32_t)) {
  w_member(w, key, false);
  fpi_sb_putc(&w->b, '[');
  for (int32_t i = 0; i < n; i++) {
    if (i)
      W_LIT(w, ",\n    ");
    else
      W_LIT(w, "\n    ");
    row(w, p, i);
  }
  if (n)
    W_LIT(w, "\n  ]");
  else
    fpi_sb_putc(&w->b, ']');
}

static void write_str(wr *w, const char *key, const char *v, bool first) {
  w_member(w, key, first);
  w_str(w, v);
}

static void write_int(wr *w, const char *key, int64_t v) {
  w_member(w, key, false);
  w_int(w, v);
}

/* "hardware": {"name":..,"gpus_per_node":..,...} (fp_hw_fields' order) */
static void write_hw(wr *w, const fp_hw *h) {
  w_member(w, "hardware", false);
  M_STR(w, true, "name", h->name);
  for (int k = 0; k < FP_HW_NFIELDS; k++) {
    if (FPI_HW_OMITTED(h, k)) continue;
    W_LIT(w, ",\"");
    fpi_sb_puts(&w->b, fp_hw_fields[k].key);
    W_LIT(w, "\":");
    if (fp_hw_fields[k].integer) {
      w_int(w, fpi_hw_geti(h, k));
    } else {
      double x = fpi_hw_getd(h, k);
      if (dbl_ok(x))
        w_dbl(w, x);
      else
        w->ok = false;
    }
  }
  fpi_sb_putc(&w->b, '}');
}

/* "memory_timeline": {.., "points":[\n    [t,bytes...],\n  ]}: derived data,
 * outside the hash */
static void write_memtl(wr *w, const fp_memtl *t) {
  w_member(w, "memory_timeline", false);
  W_LIT(w, "{\"modeled\":true,\"time_unit\":\"us\",\"categories\":[");
  for (int c = 0; c < FP_MEMTL_NCATS; c++) {
    if (c) fpi_sb_putc(&w->b, ',');
    w_str(w, fpi_memtl_cat_name(c));
  }
  W_LIT(w, "],\"peak_bytes\":");
  w_int(w, t->peak_bytes);
  W_LIT(w, ",\"lower_bound_bytes\":");
  w_int(w, t->lower_bound_bytes);
  W_LIT(w, ",\"points\":[");
  for (int32_t i = 0; i < t->npts; i++) {
    const fp_memtl_point *q = &t->pts[i];
    if (i)
      W_LIT(w, ",\n    [");
    else
      W_LIT(w, "\n    [");
    if (dbl_ok(q->t_us))
      w_dbl(w, q->t_us);
    else
      w->ok = false;
    for (int c = 0; c < FP_MEMTL_NCATS; c++) {
      fpi_sb_putc(&w->b, ',');
      w_int(w, q->bytes[c]);
    }
    fpi_sb_putc(&w->b, ']');
  }
  if (t->npts)
    W_LIT(w, "\n  ]}");
  else
    W_LIT(w, "]}");
}

static void w_fig(wr *w, double d) {
  if (dbl_ok(d))
    w_dbl(w, d);
  else
    w->ok = false;
}

/* "figures": {"comm_bytes_per_rank":..,...}: derived data, outside the hash
 * (the members in fp_figures' order) */
static void write_figures(wr *w, const fp_figures *g) {
  w_member(w, "figures", false);
  M_INT(w, true, "comm_bytes_per_rank", g->comm_bytes_per_rank);
  M_INT(w, false, "persistent_bytes", g->persistent_bytes);
  M_INT(w, false, "peak_bytes", g->peak_bytes);
  M_INT(w, false, "lower_bound_bytes", g->lower_bound_bytes);
  M_INT(w, false, "activation_peak_bytes", g->activation_peak_bytes);
  M_INT(w, false, "prefetch_forward", g->prefetch_forward);
  M_INT(w, false, "prefetch_backward", g->prefetch_backward);
  KEY(w, false, "modeled_step_ms");
  w_fig(w, g->modeled_step_ms);
  KEY(w, false, "modeled_compute_ms");
  w_fig(w, g->modeled_compute_ms);
  KEY(w, false, "modeled_exposed_comm_ms");
  w_fig(w, g->modeled_exposed_comm_ms);
  fpi_sb_putc(&w->b, '}');
}

bool fpi_plan_write(const fp_prog *p, FILE *f) {
  wr w = {.ok = true};
  char hash[40];
  snprintf(hash, sizeof hash, "fnv1a64:%016" PRIx64, fpi_prog_hash(p));
  /* about 130 bytes per op: one allocation for most plans */
  fpi_sb_room(&w.b, 4096 + (size_t)(p->nops > 0 ? p->nops : 0) * 160 + (size_t)(p->nbufs > 0 ? p->nbufs : 0) * 128 +
                       (size_t)(p->nparams > 0 ? p->nparams : 0) * 512 +
                       (size_t)(p->memtl && p->memtl->npts > 0 ? p->memtl->npts : 0) * 96);
  fpi_sb_putc(&w.b, '{');
  write_str(&w, "format", PLAN_FORMAT, true);
  write_str(&w, "planner_version", FP_VERSION, false);
  write_str(&w, "hash", hash, false);
  if (p->model) write_str(&w, "model", p->model, false);
  if (p->strategy) write_str(&w, "strategy", p->strategy, false);
  write_int(&w, "world_size", p->world_size);
  write_int(&w, "ranks_per_node", p->ranks_per_node);
  if (p->tp != 1) write_int(&w, "tp", p->tp);
  write_int(&w, "grad_accumulation", p->grad_accumulation);
  write_int(&w, "arena_bytes", p->arena_bytes);
  write_int(&w, "host_bytes", p->host_bytes);
  write_int(&w, "events", p->nevents);
  if (p->memory_budget_bytes > 0) write_int(&w, "memory_budget_bytes", p->memory_budget_bytes);
  if (p->hw.name) write_hw(&w, &p->hw);
  if (p->optim != FP_OPTIM_NONE) {
    w_member(&w, "optimizer", false);
    M_STR(&w, true, "type", fpi_optim_name(p->optim) ? fpi_optim_name(p->optim) : "?");
    M_STR(&w, false, "state_dtype", dname(p->optim_dtype));
    fpi_sb_putc(&w.b, '}');
    if (!fpi_optim_name(p->optim)) w.ok = false;
  }
  write_array(&w, "comms", p, p->ncomms, jcomm);
  write_array(&w, "tables", p, p->ntabs, jtable);
  write_array(&w, "buckets", p, p->nbuckets, jbucket);
  write_array(&w, "buffers", p, p->nbufs, jbuf);
  write_array(&w, "lives", p, p->nlives, jlive);
  write_array(&w, "modules", p, p->nmods, jmodule);
  write_array(&w, "params", p, p->nparams, jparam);
  write_array(&w, "segments", p, p->nsegs, jseg);
  write_array(&w, "ops", p, p->nops, jop);
  if (p->memtl) write_memtl(&w, p->memtl);
  if (p->figures) write_figures(&w, p->figures);
  W_LIT(&w, "\n}\n");
  bool ok = fwrite(w.b.p, 1, w.b.len, f) == w.b.len;
  free(w.b.p);
  return w.ok && ok && !ferror(f);
}

/* ---- reader ----------------------------------------------------------------- */
/* One pass over the text with base/json.c's pull parser, building the
 * program as it goes; members may come in any order (the writer's order is
 * just the common case), null stands for an absent member. Each value is
 * checked as it comes, its error located at its JSON pointer. The text's
 * syntax is checked before any other error is reported: when the reader
 * stops, the text is parsed whole (fpi_json_parse, on the error path only),
 * and a syntax error, a duplicate member or a document that is no plan (its
 * format or planner version) is reported in its place. */
bool fp_plan_check_hash = true;

typedef struct rd {
  fp_arena *a;
  fp_diag *d;
  const fp_src *src;
  fp_jp *jp;
  fp_prog *p;
  bool failed;
  int64_t *tab; /* scratch for table rows and shapes */
  int64_t captab;
  int32_t *ids; /* scratch for an op's uses */
  int64_t capids;
} rd;

static const char *describe(fp_arena *a, const fp_jv *v) {
  switch (fpi_jv_type(v)) {
    case FP_JNULL: return "null";
    case FP_JBOOL: return "a boolean";
    case FP_JOBJECT: return "an object";
    case FP_JARRAY: return "an array";
    case FP_JSTRING: return "a string";
    case FP_JINT:
    case FP_JDOUBLE: return fpi_j_describe(a, v); /* the number as written (doubles) or in decimal */
  }
  return "a value";
}

/* the document whole: false after reporting its syntax error, or that it is
 * no plan (the first things a plan must get right, before any other error) */
static bool plan_header_ok(fp_arena *a, fp_diag *d, const fp_src *src) {
  fp_arena *tmp = fpi_arena_new();
  fp_diag quiet;
  fpi_diag_init(&quiet, NULL);
  fp_jctx jc = {tmp, &quiet, src, NULL};
  const fp_jv *root = fpi_json_parse(&jc);
  bool ok = root != NULL;
  if (!root) {
    fp_jctx loud = {a, d, src, NULL};
    fpi_json_parse(&loud);
  } else if (!fpi_jv_is(root, FP_JOBJECT)) {
    ok = false;
    fpi_diag_json(d, src, "", "expected an object, got %s", describe(tmp, root));
  } else {
    static const char *const keys[] = {"format", "planner_version"};
    static const char *const want[] = {PLAN_FORMAT, FP_VERSION};
    for (int k = 0; k < 2 && ok; k++) {
      const fp_jv *v = fpi_j_get(root, keys[k]);
      const char *ptr = k ? "/planner_version" : "/format";
      ok = false;
      if (!v)
        fpi_diag_json(d, src, "", "%s", fpi_j_missing_msg(tmp, keys[k]));
      else if (!fpi_jv_is(v, FP_JSTRING))
        fpi_diag_json(d, src, ptr, "expected a string, got %s", describe(tmp, v));
      else if (k == 0 && strcmp(v->s, want[k]))
        fpi_diag_json(d, src, ptr, "not a plan: format is '%.60s', expected '%s'", v->s, PLAN_FORMAT);
      else if (k == 1 && strcmp(v->s, want[k]))
        fpi_diag_json(d, src, ptr, "plan was written by flexplan %.40s; this is flexplan %s: compile the plan again",
                     v->s, FP_VERSION);
      else
        ok = true;
    }
  }
  fpi_diag_free(&quiet);
  fpi_arena_free(tmp);
  return ok;
}

/* stop with an error at ptr; always false. The first error only, and only
 * when the text is a plan in good JSON (else plan_header_ok says why not). */
static bool vrerr(rd *r, const char *ptr, const char *key, const char *fmt, va_list ap) {
  if (r->failed) return false;
  r->failed = true;
  if (!plan_header_ok(r->a, r->d, r->src)) return false;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (!ptr) ptr = fpi_jp_ptr(r->jp);
  fpi_diag_json(r->d, r->src, key ? fpi_ptr_key(r->a, ptr, key) : ptr, "%s", msg);
  return false;
}
/* at the cursor's pointer (+ "/" key) */
static bool rerr(rd *r, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool rerr(rd *r, const char *key, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vrerr(r, NULL, key, fmt, ap);
  va_end(ap);
  return false;
}
/* at ptr */
static bool rerr_at(rd *r, const char *ptr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool rerr_at(rd *r, const char *ptr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vrerr(r, ptr, NULL, fmt, ap);
  va_end(ap);
  return false;
}

/* a syntax error of the pull parser (plan_header_ok reports it) */
static bool syntax(rd *r) {
  if (r->failed) return false;
  r->failed = true;
  if (plan_header_ok(r->a, r->d, r->src)) fpi_jp_report(r->jp, r->d); /* cannot happen: the parsers agree */
  return false;
}

/* the scalar at the cursor (null: NULL); a container is read whole and
 * described. false: a syntax error, reported */
static bool val(rd *r, fp_jv *v, bool keep, const fp_jv **out) {
  if (!fpi_jp_scalar(r->jp, v, keep)) return syntax(r);
  *out = v->type == FP_JNULL ? NULL : v;
  return true;
}

static bool rd_int(rd *r, int64_t min, int64_t max, int64_t *out) {
  fp_jv b;
  const fp_jv *v;
  if (!val(r, &b, false, &v)) return false;
  if (!fpi_jv_is(v, FP_JINT)) return rerr(r, NULL, "expected an integer, got %s", v ? describe(r->a, v) : "nothing");
  if (v->big) return rerr(r, NULL, "integer out of the int64 range");
  if (v->i < min || v->i > max)
    return rerr(r, NULL, "%" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", v->i, min, max);
  *out = v->i;
  return true;
}

static bool rd_i64(rd *r, int64_t *out) { return rd_int(r, INT64_MIN, INT64_MAX, out); }

static bool rd_i32(rd *r, int32_t min, int32_t *out) {
  int64_t x;
  if (!rd_int(r, min, INT32_MAX, &x)) return false;
  *out = (int32_t)x;
  return true;
}

static bool rd_dbl(rd *r, double *out) {
  fp_jv b;
  const fp_jv *v;
  if (!val(r, &b, false, &v)) return false;
  if (!fpi_jv_is(v, FP_JINT) && !fpi_jv_is(v, FP_JDOUBLE))
    return rerr(r, NULL, "expected a number, got %s", describe(r->a, v));
  double x = fpi_jv_num(v);
  if (!isfinite(x)) return rerr(r, NULL, "number out of range");
  *out = x;
  return true;
}

static bool rd_bool(rd *r, bool *out) {
  fp_jv b;
  const fp_jv *v;
  if (!val(r, &b, false, &v)) return false;
  if (!fpi_jv_is(v, FP_JBOOL)) return rerr(r, NULL, "expected true or false, got %s", describe(r->a, v));
  *out = v->b;
  return true;
}

/* a string, kept in the arena */
static bool rd_str(rd *r, const char **out) {
  fp_jv b;
  const fp_jv *v;
  if (!val(r, &b, true, &v)) return false;
  if (!fpi_jv_is(v, FP_JSTRING)) return rerr(r, NULL, "expected a string, got %s", v ? describe(r->a, v) : "nothing");
  *out = v->s;
  return true;
}

/* v (a string not kept: n bytes) is name(i) for some i < n: *out = i */
static bool is_name(const fp_jv *v, const char *(*name)(int), int n, int *out) {
  for (int i = 0; i < n; i++) {
    const char *nm = name(i);
    if (nm[0] == v->s[0] && !strncmp(nm, v->s, v->n) && !nm[v->n]) {
      *out = i;
      return true;
    }
  }
  return false;
}

/* a string that names one of n things (name(i)); key names the member */
static bool rd_enum(rd *r, const char *key, const char *(*name)(int), int n, int *out) {
  fp_jv b;
  const fp_jv *v;
  if (!val(r, &b, false, &v)) return false;
  if (!fpi_jv_is(v, FP_JSTRING)) return rerr(r, NULL, "expected a string, got %s", describe(r->a, v));
  if (is_name(v, name, n, out)) return true;
  return rerr(r, NULL, "unknown %s '%.*s'", key, v->n < 60 ? (int)v->n : 60, v->s);
}

static const char *n_dtype(int i) { return fpi_dtype_name((fp_dtype)i); }
static const char *n_kind(int i) { return kind_names[i]; }
static const char *n_pass(int i) { return pass_names[i]; }
static const char *n_red(int i) { return fpi_redop_name(i); }
static const char *n_op(int i) { return fpi_op_name((fp_opcode)i); }
static const char *n_optim(int i) { return fpi_optim_name(i); }

/* the container at the cursor must be an object / array (opened) */
static bool open_as(rd *r, fp_jtype t) {
  fp_jv v;
  if (fpi_jp_peek(r->jp) != (t == FP_JOBJECT ? '{' : '[')) {
    const fp_jv *x;
    if (!val(r, &v, false, &x)) return false;
    return rerr(r, NULL, "expected %s, got %s", t == FP_JOBJECT ? "an object" : "an array", describe(r->a, x));
  }
  return fpi_jp_value(r->jp, &v, false) || syntax(r);
}

/* An object at the cursor: member(r, ctx, k) reads the value of allowed[k]
 * (at most 32 names); a null value is an absent member (but in *present).
 * The names are judged by base/json.c's members check (unknown, duplicate,
 * and at the end every bit of req in *seen, in allowed's order). */
static bool fobj(rd *r, const char *const *allowed, uint32_t req, uint32_t *seen, uint32_t *present,
                 bool (*member)(rd *, void *, int), void *ctx) {
  *seen = 0;
  if (!open_as(r, FP_JOBJECT)) return false;
  fp_jkeys ks;
  fpi_jkeys_init(&ks, allowed, req);
  const char *key, *msg;
  size_t kl;
  int st;
  while ((st = fpi_jp_next(r->jp, &key, &kl)) > 0) {
    int k = fpi_jkeys_member(&ks, r->a, key, kl, &msg);
    if (k < 0) return rerr(r, NULL, "%s", msg); /* (a duplicate: the whole parse says where the first is) */
    if (fpi_jp_peek(r->jp) == 'n') {
      fp_jv v;
      const fp_jv *x;
      if (!val(r, &v, false, &x)) return false;
      if (!x) continue;
    }
    *seen |= 1u << k;
    if (!member(r, ctx, k)) return false;
  }
  if (st < 0) return syntax(r);
  if (present) *present = ks.seen;
  /* null stands for absent: the required names must have come with values */
  fp_jkeys valued = ks;
  valued.seen = *seen;
  if ((msg = fpi_jkeys_missing(&valued, r->a))) return rerr(r, NULL, "%s", msg);
  return true;
}

/* An array at the cursor: elem(r, ctx, i) reads element i */
static bool farr(rd *r, bool (*elem)(rd *, void *, int64_t), void *ctx) {
  if (!open_as(r, FP_JARRAY)) return false;
  int64_t i = 0;
  int st;
  while ((st = fpi_jp_next(r->jp, NULL, NULL)) > 0) {
    if (i >= INT32_MAX - 1) return rerr(r, NULL, "too many entries");
    if (!elem(r, ctx, i++)) return false;
  }
  return st == 0 || syntax(r);
}

/* an array of integers in [min, max] into *v (grown in the arena), *n of them */
typedef struct {
  int64_t min, max, **v, *cap, n, base;
} f_ints;
static bool e_int(rd *r, void *ctx, int64_t i) {
  f_ints *x = ctx;
  *x->v = fpi_grow(r->a, *x->v, x->cap, x->base + i + 1, sizeof **x->v);
  x->n = i + 1;
  return rd_int(r, x->min, x->max, &(*x->v)[x->base + i]);
}
static bool rd_ints(rd *r, int64_t min, int64_t max, int64_t **v, int64_t *cap, int64_t base, int64_t *n) {
  f_ints x = {min, max, v, cap, 0, base};
  if (!farr(r, e_int, &x)) return false;
  *n = x.n;
  return true;
}

/* comms */
static const char *const a_comm[] = {"name", "size", "stride", NULL};
typedef struct { const char *name; int64_t size, stride; } f_comm;
static bool m_comm(rd *r, void *ctx, int k) {
  f_comm *c = ctx;
  return k == 0 ? rd_str(r, &c->name) : rd_i64(r, k == 1 ? &c->size : &c->stride);
}
static bool e_comm(rd *r, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  f_comm c;
  uint32_t seen;
  if (!fobj(r, a_comm, 7, &seen, NULL, m_comm, &c)) return false;
  fpi_ir_comm_add(r->p, c.name, c.size, c.stride);
  return true;
}

/* tables: the rows go to r->tab (off, then cnt after them) */
static const char *const a_table[] = {"name", "off", "cnt", NULL};
typedef struct { const char *name; int64_t noff, ncnt, *cnt, capcnt; } f_table;
static bool m_table(rd *r, void *ctx, int k) {
  f_table *t = ctx;
  if (k == 0) return rd_str(r, &t->name);
  return k == 1 ? rd_ints(r, INT64_MIN, INT64_MAX, &r->tab, &r->captab, 0, &t->noff)
                : rd_ints(r, INT64_MIN, INT64_MAX, &t->cnt, &t->capcnt, 0, &t->ncnt);
}
static bool e_table(rd *r, void *ctx, int64_t i) {
  f_table *t = ctx;
  (void)i;
  t->noff = t->ncnt = 0;
  uint32_t seen;
  if (!fobj(r, a_table, 7, &seen, NULL, m_table, t)) return false;
  if (t->noff != t->ncnt)
    return rerr(r, "cnt", "has %" PRId64 " entries but off has %" PRId64, t->ncnt, t->noff);
  fpi_ir_table_add(r->p, t->name, t->noff, r->tab, t->cnt);
  return true;
}

/* buckets */
static bool e_bucket(rd *r, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  const char *name;
  if (!rd_str(r, &name)) return false;
  fpi_ir_bucket_add(r->p, name);
  return true;
}

/* buffers */
static const char *const a_buf[] = {"name", "kind", "category", "bucket", "host", "bytes", "offset", NULL};
typedef struct { const char *name; int kind, cat; int32_t bucket; bool host; int64_t bytes, offset; } f_buf;
static bool m_buf(rd *r, void *ctx, int k) {
  f_buf *b = ctx;
  switch (k) {
    case 0: return rd_str(r, &b->name);
    case 1: return rd_enum(r, "kind", n_kind, 2, &b->kind);
    case 2: return rd_enum(r, "category", fpi_buf_cat_name, FP_NBUFCATS, &b->cat);
    case 3: return rd_i32(r, -1, &b->bucket);
    case 4: return rd_bool(r, &b->host);
    case 5: return rd_i64(r, &b->bytes);
    default: return rd_i64(r, &b->offset);
  }
}
static bool e_buf(rd *r, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  f_buf b = {.bucket = -1};
  uint32_t seen;
  if (!fobj(r, a_buf, 0x67, &seen, NULL, m_buf, &b)) return false;
  int k = fpi_ir_buf_add(r->p, b.name, (fp_buf_kind)b.kind, (fp_buf_cat)b.cat, b.bucket, b.bytes);
  r->p->bufs[k].host = b.host;
  r->p->bufs[k].offset = b.offset;
  return true;
}

/* lives */
static const char *const a_live[] = {"buffer", "first", "last", NULL};
static bool m_live(rd *r, void *ctx, int k) { return rd_i32(r, INT32_MIN, (int32_t *)ctx + k); }
static bool e_live(rd *r, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  int32_t v[3] = {0, 0, 0};
  uint32_t seen;
  if (!fobj(r, a_live, 7, &seen, NULL, m_live, v)) return false;
  fpi_ir_buf_live(r->p, v[0], v[1], v[2]);
  return true;
}

/* modules: recompute_saved_bytes present (even null) marks a recomputed one */
static const char *const a_mod[] = {"name", "flops_fwd", "flops_bwd", "activation_bytes", "recompute_saved_bytes", NULL};
typedef struct { const char *name; double ff, fb; int64_t act, saved; } f_mod;
static bool m_mod(rd *r, void *ctx, int k) {
  f_mod *m = ctx;
  switch (k) {
    case 0: return rd_str(r, &m->name);
    case 1: return rd_dbl(r, &m->ff);
    case 2: return rd_dbl(r, &m->fb);
    case 3: return rd_i64(r, &m->act);
    default: return rd_i64(r, &m->saved);
  }
}
static bool e_mod(rd *r, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  f_mod m = {.saved = -1};
  uint32_t seen, present;
  if (!fobj(r, a_mod, 15, &seen, &present, m_mod, &m)) return false;
  int k = fpi_ir_module_add(r->p, m.name, m.ff, m.fb, m.act);
  if (present >> 4 & 1) r->p->mods[k].recompute = true, r->p->mods[k].saved_bytes = m.saved;
  return true;
}

/* regions {"buffer", "offset"[, "stride", "table_relative"]} and views
 * {"buffer", "offset"} */
static const char *const a_region[] = {"buffer", "offset", "stride", "table_relative", NULL};
static const char *const a_view[] = {"buffer", "offset", NULL};
static bool m_region(rd *r, void *ctx, int k) {
  fp_region *g = ctx;
  switch (k) {
    case 0: return rd_i32(r, -1, &g->buf);
    case 1: return rd_i64(r, &g->off);
    case 2: return rd_i64(r, &g->stride);
    default: return rd_bool(r, &g->tabrel);
  }
}
static bool rregion(rd *r, fp_region *g) {
  uint32_t seen;
  return fobj(r, a_region, 3, &seen, NULL, m_region, g);
}
static bool rview(rd *r, fp_view *v) {
  fp_region g = {v->buf, false, v->off, 0};
  uint32_t seen;
  if (!fobj(r, a_view, 3, &seen, NULL, m_region, &g)) return false;
  v->buf = g.buf;
  v->off = g.off;
  return true;
}

/* params */
static const char *const a_param[] = {"name",  "shape",  "module", "bucket", "main_dtype", "param_dtype", "grad_dtype",
                                      "requires_grad", "placement", "dim", "comm", "owner", "table", "chunk",
                                      "main",  "grad",   "weight", "ugrad",  "users", "opt", "scales", "tp_dim", NULL};
typedef struct { fp_ir_param q; int64_t capusers; } f_param;
static bool e_user(rd *r, void *ctx, int64_t i) {
  f_param *x = ctx;
  int32_t m;
  x->q.users = fpi_grow(r->p->arena, x->q.users, &x->capusers, i + 2, sizeof *x->q.users);
  if (!rd_i32(r, INT32_MIN, &m)) return false;
  x->q.users[x->q.nusers++] = m;
  return true;
}
static bool m_param(rd *r, void *ctx, int k) {
  f_param *x = ctx;
  fp_ir_param *q = &x->q;
  int e;
  switch (k) {
    case 0: return rd_str(r, &q->name);
    case 1: {
      int64_t n;
      if (!rd_ints(r, INT64_MIN, INT64_MAX, &r->tab, &r->captab, 0, &n)) return false;
      if (n > 8) return rerr(r, NULL, "has %" PRId64 " dimensions (at most 8)", n);
      q->ndim = (int)n;
      if (n) memcpy(q->shape, r->tab, (size_t)n * sizeof *r->tab);
      return true;
    }
    case 2: return rd_i32(r, -1, &q->module);
    case 3: return rd_i32(r, -1, &q->bucket);
    case 4: case 5: case 6:
      if (!rd_enum(r, a_param[k], n_dtype, FP_NDTYPES, &e)) return false;
      *(k == 4 ? &q->main_dtype : k == 5 ? &q->param_dtype : &q->grad_dtype) = (fp_dtype)e;
      return true;
    case 7: return rd_bool(r, &q->requires_grad);
    case 8: return rd_enum(r, "placement", fpi_ir_placement_name, FP_IR_NPLACEMENTS, &q->placement);
    case 9: return rd_i32(r, INT32_MIN, &q->dim);
    case 10: return rd_i32(r, -1, &q->comm);
    case 11: return rd_i64(r, &q->owner);
    case 12: return rd_i32(r, -1, &q->tab);
    case 13: return rd_i64(r, &q->chunk);
    case 14: return rview(r, &q->main);
    case 15: return rview(r, &q->grad);
    case 16: return rview(r, &q->weight);
    case 17: return rview(r, &q->ugrad);
    case 19: return rview(r, &q->opt);
    case 20: return rview(r, &q->scales);
    case 21: return rd_i32(r, INT32_MIN, &q->tp_dim);
    default: return farr(r, e_user, x); /* users: module indices */
  }
}
static bool e_param(rd *r, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  f_param x;
  memset(&x, 0, sizeof x);
  x.q.opt.buf = x.q.scales.buf = -1;
  x.q.tp_dim = -1;
  uint32_t seen, present;
  if (!fobj(r, a_param, 0x3ffff, &seen, &present, m_param, &x)) return false;
  if ((present >> 18 & 1) && !x.q.users) x.q.users = fpi_alloc_array(r->p->arena, 1, sizeof *x.q.users);
  *fpi_ir_param_add(r->p) = x.q;
  return true;
}

/* segments: kept until the ops come */
static const char *const a_seg[] = {"kind", "module", "micro", "first", "count", NULL};
typedef struct { int kind; int32_t module, micro; int64_t first, count; } f_seg;
typedef struct { f_seg *v; int64_t n, cap, next; bool read; } f_segs;
static bool m_seg(rd *r, void *ctx, int k) {
  f_seg *s = ctx;
  switch (k) {
    case 0: return rd_enum(r, "kind", fpi_seg_name, FP_NSEGKINDS, &s->kind);
    case 1: return rd_i32(r, -1, &s->module);
    case 2: return rd_i32(r, INT32_MIN, &s->micro);
    case 3: return rd_int(r, 0, INT32_MAX, &s->first);
    default: return rd_int(r, 0, INT32_MAX, &s->count);
  }
}
static bool e_seg(rd *r, void *ctx, int64_t i) {
  f_segs *ss = ctx;
  f_seg s;
  uint32_t seen;
  if (!fobj(r, a_seg, 31, &seen, NULL, m_seg, &s)) return false;
  if (s.first != ss->next)
    return rerr(r, "first", "is %" PRId64 " but the previous segment ends at %" PRId64, s.first, ss->next);
  ss->v = fpi_grow(r->a, ss->v, &ss->cap, i + 1, sizeof *ss->v);
  ss->v[i] = s;
  ss->n = i + 1;
  ss->next = s.first + s.count;
  return true;
}

/* ops: each emitted in its segment (segments that start at an op, empty
 * ones too, open before it); an op past the segments is read but not
 * emitted (the ops' count is checked against them at the end) */
static const char *const a_op[] = {"op",     "stream", "dtype", "sdtype", "count", "dst",   "src",
                                   "aux",    "comm",   "table", "root",   "only",  "only_comm", "event",
                                   "module", "pass",   "alpha", "rows",   "dpitch", "spitch", "bucket",
                                   "group",  "uses",   "red",  NULL};
typedef struct {
  fp_op o;        /* fields as read (code, stream, dtype are ints below) */
  fp_op_shape sh; /* rows and pitches as read */
  int code, stream, dt, sdt, pass, red;
  int64_t *uses, nuses, capuses;
} f_op;
static bool m_op(rd *r, void *ctx, int k) {
  f_op *x = ctx;
  fp_op *o = &x->o;
  switch (k) {
    case 0: return rd_enum(r, "op", n_op, FP_NOPS, &x->code);
    case 1: return rd_enum(r, "stream", fpi_stream_name, FP_NSTREAMS, &x->stream);
    case 2: return rd_enum(r, "dtype", n_dtype, FP_NDTYPES, &x->dt);
    case 3: return rd_enum(r, "sdtype", n_dtype, FP_NDTYPES, &x->sdt);
    case 4: return rd_i64(r, &o->count);
    case 5: return rregion(r, &o->dst);
    case 6: return rregion(r, &o->src);
    case 7: return rregion(r, &o->aux);
    case 8: return rd_i32(r, -1, &o->comm);
    case 9: return rd_i32(r, -1, &o->tab);
    case 10: return rd_i32(r, INT32_MIN, &o->root);
    case 11: return rd_i32(r, INT32_MIN, &o->only);
    case 12: return rd_i32(r, -1, &o->only_comm);
    case 13: return rd_i32(r, -1, &o->event);
    case 14: return rd_i32(r, -1, &o->module);
    case 15: return rd_enum(r, "pass", n_pass, 3, &x->pass);
    case 16: return rd_dbl(r, &o->alpha);
    case 17: return rd_i64(r, &x->sh.rows);
    case 18: return rd_i64(r, &x->sh.dpitch);
    case 19: return rd_i64(r, &x->sh.spitch);
    case 20: return rd_i32(r, -1, &o->bucket);
    case 21: return rd_i32(r, INT32_MIN, &o->group);
    case 23: return rd_enum(r, "red", n_red, FP_NREDOPS, &x->red);
    default: return rd_ints(r, INT32_MIN, INT32_MAX, &x->uses, &x->capuses, 0, &x->nuses);
  }
}
typedef struct { f_segs *segs; int64_t seg, nread; f_op x; } f_ops;
static void emit_op(rd *r, f_op *x, uint32_t seen) {
  fp_prog *p = r->p;
  const fp_op *o = &x->o;
  fp_op *op = fpi_ir_emit(p, (fp_opcode)x->code, (fp_stream)x->stream, (fp_dtype)x->dt, o->count);
  if (x->sdt >= 0) op->sdtype = (fp_dtype)x->sdt;
  op->pass = (fp_pass)x->pass;
  op->red = (fp_redop)x->red;
  if (seen >> 22 & 1) {
    r->ids = fpi_grow(r->a, r->ids, &r->capids, x->nuses + 1, sizeof *r->ids); /* (copied by fpi_ir_op_uses) */
    for (int64_t k = 0; k < x->nuses; k++) r->ids[k] = (int32_t)x->uses[k];
    fpi_ir_op_uses(p, op, r->ids, (int)x->nuses);
  }
  op->dst = o->dst;
  op->src = o->src;
  op->aux = o->aux;
  op->comm = o->comm;
  op->tab = o->tab;
  op->root = o->root;
  op->only = o->only;
  op->only_comm = o->only_comm;
  op->event = o->event;
  op->module = o->module;
  op->alpha = o->alpha;
  fpi_ir_op_shape(p, op, x->sh.rows, x->sh.dpitch, x->sh.spitch);
  op->bucket = o->bucket;
  op->group = o->group;
}
static bool e_op(rd *r, void *ctx, int64_t i) {
  f_ops *os = ctx;
  os->nread = i + 1;
  while (os->seg < os->segs->n && os->segs->v[os->seg].first == i) {
    const f_seg *s = &os->segs->v[os->seg++];
    fpi_ir_seg_begin(r->p, (fp_seg_kind)s->kind, s->module, s->micro);
  }
  f_op *x = &os->x;
  fp_op *o = &x->o;
  /* the defaults of fpi_ir_emit and of the reader */
  o->count = 0;
  o->dst = o->src = o->aux = fpi_noreg();
  o->comm = o->tab = o->root = o->only = o->only_comm = o->event = o->module = o->bucket = o->group = -1;
  o->alpha = 0;
  x->sh = (fp_op_shape){1, 0, 0};
  x->sdt = -1;
  x->pass = FP_PASS_FWD;
  x->red = FP_RED_SUM;
  x->nuses = 0;
  uint32_t seen;
  if (!fobj(r, a_op, 0x17, &seen, NULL, m_op, x)) return false;
  if (os->seg && i < os->segs->next) {
    if (r->p->nuses > INT32_MAX - x->nuses) return rerr(r, "uses", "too many uses");
    emit_op(r, x, seen);
  }
  return true;
}

/* hardware: {"name", then fp_hw_fields}, all but the optional ones required */
static bool m_hw(rd *r, void *ctx, int k) {
  fp_hw *h = ctx;
  if (k == 0) return rd_str(r, &h->name);
  return fp_hw_fields[k - 1].integer ? rd_i64(r, fpi_hw_int(h, k - 1)) : rd_dbl(r, fpi_hw_dbl(h, k - 1));
}
static bool f_hw(rd *r) {
  const char *keys[FP_HW_NFIELDS + 2];
  keys[0] = "name";
  for (int k = 0; k < FP_HW_NFIELDS; k++) keys[k + 1] = fp_hw_fields[k].key;
  keys[FP_HW_NFIELDS + 1] = NULL;
  fp_hw h = {0};
  uint32_t seen;
  uint32_t need = (1u << (FP_HW_NFIELDS + 1)) - 1;
  for (int k = 0; k < FP_HW_NFIELDS; k++)
    if (fp_hw_fields[k].optional) need &= ~(1u << (k + 1));
  if (!fobj(r, keys, need, &seen, NULL, m_hw, &h)) return false;
  r->p->hw = h;
  return true;
}

/* "optimizer": {"type", "state_dtype"}; state_dtype required but with none */
static const char *const a_optim[] = {"type", "state_dtype", NULL};
static bool m_optim(rd *r, void *ctx, int k) {
  int *v = ctx;
  return k == 0 ? rd_enum(r, "type", n_optim, FP_NOPTIMS, &v[0]) : rd_enum(r, "state_dtype", n_dtype, FP_NDTYPES, &v[1]);
}
static bool f_optim(rd *r) {
  int v[2] = {0, 0};
  uint32_t seen;
  if (!fobj(r, a_optim, 1, &seen, NULL, m_optim, v)) return false;
  if (v[0] != FP_OPTIM_NONE && !(seen & 2)) return rerr(r, NULL, "%s", fpi_j_missing_msg(r->a, "state_dtype"));
  r->p->optim = (fp_optim)v[0];
  r->p->optim_dtype = (fp_dtype)v[1];
  return true;
}

/* "memory_timeline" (derived data outside the hash): its shape, and
 * fpi_memtl_check's self-consistency */
static const char *const a_memtl[] = {"modeled", "time_unit", "categories", "peak_bytes", "lower_bound_bytes",
                                      "points", NULL};
typedef struct { fp_memtl *t; int64_t cap; } f_mtl;
static bool e_cat(rd *r, void *ctx, int64_t c) {
  int64_t *n = ctx;
  fp_jv b;
  const fp_jv *v;
  if (!val(r, &b, false, &v)) return false;
  *n = c + 1;
  const char *want = c < FP_MEMTL_NCATS ? fpi_memtl_cat_name((int)c) : NULL;
  if (want && (!fpi_jv_is(v, FP_JSTRING) || strncmp(v->s, want, v->n) || want[v->n]))
    return rerr(r, NULL, "expected \"%s\"", fpi_memtl_cat_name((int)c));
  return true;
}
/* [time, bytes per category] */
static bool e_point(rd *r, void *ctx, int64_t i) {
  f_mtl *m = ctx;
  fp_memtl *t = m->t;
  t->pts = fpi_grow(r->a, t->pts, &m->cap, i + 1, sizeof *t->pts);
  t->npts = (int32_t)(i + 1);
  fp_memtl_point *q = &t->pts[i];
  if (fpi_jp_peek(r->jp) != '[') {
    fp_jv b;
    const fp_jv *v;
    return val(r, &b, false, &v) && rerr(r, NULL, "expected an array of a time and %d byte counts", FP_MEMTL_NCATS);
  }
  fp_jv b;
  const fp_jv *v;
  int st, c = 0;
  if (!fpi_jp_value(r->jp, &b, false)) return syntax(r);
  while ((st = fpi_jp_next(r->jp, NULL, NULL)) > 0) {
    if (c > FP_MEMTL_NCATS) {
      if (!val(r, &b, false, &v)) return false;
    } else if (c == 0) {
      if (!val(r, &b, false, &v)) return false;
      if (!fpi_jv_is(v, FP_JINT) && !fpi_jv_is(v, FP_JDOUBLE))
        return rerr(r, NULL, "expected a time in microseconds, got %s", describe(r->a, v));
      q->t_us = fpi_jv_num(v);
    } else if (!rd_int(r, 0, INT64_MAX, &q->bytes[c - 1])) {
      return false;
    }
    c++;
  }
  if (st < 0) return syntax(r);
  return c == FP_MEMTL_NCATS + 1 || rerr(r, NULL, "expected an array of a time and %d byte counts", FP_MEMTL_NCATS);
}
static bool m_memtl(rd *r, void *ctx, int k) {
  f_mtl *m = ctx;
  fp_memtl *t = m->t;
  switch (k) {
    case 0: {
      bool modeled = false;
      if (!rd_bool(r, &modeled)) return false;
      return modeled || rerr(r, NULL, "must be true: the timeline is modeled, not measured");
    }
    case 1: {
      const char *unit;
      if (!rd_str(r, &unit)) return false;
      return !strcmp(unit, "us") || rerr(r, NULL, "expected \"us\", got '%.40s'", unit);
    }
    case 2: {
      int64_t n = 0;
      if (!farr(r, e_cat, &n)) return false;
      return n == FP_MEMTL_NCATS || rerr(r, NULL, "expected %d categories, got %" PRId64, FP_MEMTL_NCATS, n);
    }
    case 3: return rd_int(r, 0, INT64_MAX, &t->peak_bytes);
    case 4: return rd_int(r, 0, INT64_MAX, &t->lower_bound_bytes);
    default: return farr(r, e_point, m);
  }
}
static bool f_memtl(rd *r) {
  f_mtl m = {fpi_alloc(r->a, sizeof *m.t), 0};
  uint32_t seen;
  if (!fobj(r, a_memtl, 63, &seen, NULL, m_memtl, &m)) return false;
  if (!m.t->pts) m.t->pts = fpi_alloc_array(r->a, 1, sizeof *m.t->pts);
  const char *bad = fpi_memtl_check(m.t);
  if (bad) return rerr(r, NULL, "%s", bad);
  r->p->memtl = m.t;
  return true;
}

/* "figures" (derived data outside the hash): every member, integers >= 0,
 * prefetch depths int32, times finite and >= 0 */
static const char *const figure_keys[] = {"comm_bytes_per_rank", "persistent_bytes", "peak_bytes",
                                          "lower_bound_bytes", "activation_peak_bytes", "prefetch_forward",
                                          "prefetch_backward", "modeled_step_ms", "modeled_compute_ms",
                                          "modeled_exposed_comm_ms", NULL};
static bool m_fig(rd *r, void *ctx, int k) {
  fp_figures *g = ctx;
  int64_t *ints[7] = {&g->comm_bytes_per_rank, &g->persistent_bytes, &g->peak_bytes, &g->lower_bound_bytes,
                      &g->activation_peak_bytes, &g->prefetch_forward, &g->prefetch_backward};
  double *dbls[3] = {&g->modeled_step_ms, &g->modeled_compute_ms, &g->modeled_exposed_comm_ms};
  if (k < 7) return rd_int(r, 0, k < 5 ? INT64_MAX : INT32_MAX, ints[k]);
  if (!rd_dbl(r, dbls[k - 7])) return false;
  return *dbls[k - 7] >= 0 || rerr(r, NULL, "a modeled time is negative");
}
static bool f_figures(rd *r) {
  fp_figures *g = fpi_alloc(r->a, sizeof *g);
  uint32_t seen;
  if (!fobj(r, figure_keys, 0x3ff, &seen, NULL, m_fig, g)) return false;
  r->p->figures = g;
  return true;
}

/* the root's members; the members a plan must have: all but model,
 * strategy, memory_budget_bytes, hardware, optimizer, memory_timeline,
 * figures */
static const char *const a_root[] = {"format", "planner_version", "hash", "model", "strategy", "world_size",
                                     "ranks_per_node", "grad_accumulation", "arena_bytes", "host_bytes", "events",
                                     "memory_budget_bytes", "hardware", "optimizer", "comms", "tables", "buckets", "buffers",
                                     "lives", "modules", "params", "segments", "ops", "memory_timeline", "figures", "tp",
                                     NULL};
#define ROOT_REQUIRED \
  (((1u << 25) - 1) & ~(1u << 3 | 1u << 4 | 1u << 11 | 1u << 12 | 1u << 13 | 1u << 23 | 1u << 24))
enum { R_SEGMENTS = 21, R_OPS = 22 };

typedef struct {
  const char *hash;
  f_segs segs;
  f_ops ops;
  f_table tab;
  bool ops_later;   /* "ops" came before "segments": read at the end */
  fp_jp_mark ops_at;
} f_root;

static bool m_root(rd *r, void *ctx, int k) {
  f_root *x = ctx;
  fp_prog *p = r->p;
  const char *s;
  int64_t v;
  switch (k) {
    case 0:
    case 1: /* plan_header_ok says what is wrong */
      return rd_str(r, &s) && (!strcmp(s, k ? FP_VERSION : PLAN_FORMAT) || rerr(r, NULL, "not a plan"));
    case 2: return rd_str(r, &x->hash);
    case 3: return rd_str(r, &p->model);
    case 4: return rd_str(r, &p->strategy);
    case 5: return rd_i64(r, &p->world_size);
    case 6: return rd_i64(r, &p->ranks_per_node);
    case 7: return rd_i64(r, &p->grad_accumulation);
    case 8: return rd_i64(r, &p->arena_bytes);
    case 9: return rd_i64(r, &p->host_bytes);
    case 10: return rd_int(r, 0, INT32_MAX, &v) && (p->nevents = (int32_t)v, true);
    case 11: return rd_int(r, 1, INT64_MAX, &p->memory_budget_bytes);
    case 12: return f_hw(r);
    case 13: return f_optim(r);
    case 14: return farr(r, e_comm, NULL);
    case 15: return farr(r, e_table, &x->tab);
    case 16: return farr(r, e_bucket, NULL);
    case 17: return farr(r, e_buf, NULL);
    case 18: return farr(r, e_live, NULL);
    case 19: return farr(r, e_mod, NULL);
    case 20: return farr(r, e_param, NULL);
    case R_SEGMENTS: x->segs.read = true; return farr(r, e_seg, &x->segs);
    case R_OPS:
      if (x->segs.read) return farr(r, e_op, &x->ops);
      x->ops_later = true; /* the ops need the segments: come back for them */
      fpi_jp_mark(r->jp, &x->ops_at);
      fp_jv skip;
      return fpi_jp_scalar(r->jp, &skip, false) || syntax(r);
    case 23: return f_memtl(r);
    case 25: return rd_i64(r, &p->tp);
    default: return f_figures(r);
  }
}

/* the segments against the ops, now that both are read: each within them,
 * all of them covered; the empty segments after the last op opened */
static bool segs_cover(rd *r, f_root *x) {
  int64_t no = x->ops.nread;
  for (int64_t k = 0; k < x->segs.n; k++) {
    const f_seg *s = &x->segs.v[k];
    if (s->count > no - s->first)
      return rerr_at(r, fpi_sprintf(r->a, "/segments/%" PRId64 "/count", k),
                     "%" PRId64 " ops from %" PRId64 " run past the %" PRId64 " ops", s->count, s->first, no);
  }
  if (x->segs.next != no) return rerr_at(r, "/ops", "%" PRId64 " ops but the segments cover %" PRId64, no, x->segs.next);
  while (x->ops.seg < x->segs.n) {
    const f_seg *s = &x->segs.v[x->ops.seg++];
    fpi_ir_seg_begin(r->p, (fp_seg_kind)s->kind, s->module, s->micro);
  }
  return true;
}

typedef struct jloc {
  fp_diag *d;
  const fp_src *src;
} jloc;

static void report_json(void *ctx, const fp_prog *p, fp_vloc what, int64_t i, const char *msg) {
  (void)p;
  jloc *l = ctx;
  static const char *const arr[] = {"",        "/comms",   "/tables",   "/buffers", "/modules",
                                    "/buckets", "/params", "/segments", "/ops",     "/lives"};
  char ptr[64];
  if (what == FP_VL_PROG)
    ptr[0] = 0;
  else
    snprintf(ptr, sizeof ptr, "%s/%" PRId64, arr[what], i);
  fpi_diag_json(l->d, l->src, ptr, "%s", msg);
}

/* the program of a plan's text, read and checked (NULL after reporting) */
static fp_prog *plan_read(rd *r) {
  const fp_src *src = r->src;
  if (!src->text || src->len > (size_t)INT32_MAX - 1 || fpi_utf8_invalid(src->text, src->len) < src->len) {
    syntax(r); /* plan_header_ok says what */
    return NULL;
  }
  r->jp = fpi_jp_new(r->a, src);
  r->p = fpi_prog_new(r->a);
  f_root x;
  memset(&x, 0, sizeof x);
  x.ops.segs = &x.segs;
  uint32_t seen;
  if (!fobj(r, a_root, ROOT_REQUIRED, &seen, NULL, m_root, &x)) return NULL;
  if (!fpi_jp_end(r->jp)) return syntax(r), NULL;
  if (x.ops_later) {
    fpi_jp_seek(r->jp, &x.ops_at);
    if (!farr(r, e_op, &x.ops)) return NULL;
  }
  if (!segs_cover(r, &x)) return NULL;
  char want[40];
  snprintf(want, sizeof want, "fnv1a64:%016" PRIx64, fpi_prog_hash(r->p));
  if (fp_plan_check_hash && strcmp(x.hash, want))
    return rerr_at(r, "/hash", "content hash mismatch: file says %.60s, content is %s", x.hash, want), NULL;
  return r->p;
}

fp_prog *fpi_plan_read_flags(fp_arena *a, fp_diag *d, const fp_src *src, unsigned flags) {
  rd r = {.a = a, .d = d, .src = src};
  fp_prog *p = plan_read(&r);
  jloc l = {d, src};
  return p && fpi_ir_verify_with(p, report_json, &l, flags) ? p : NULL;
}

fp_prog *fpi_plan_read(fp_arena *a, fp_diag *d, const fp_src *src) { return fpi_plan_read_flags(a, d, src, 0); }
