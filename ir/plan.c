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
 * The reader first tries a one-pass reader of plans as the writer writes them
 * (see "the fast path" below); whatever that declines is read as follows.
 * The reader trusts nothing: the JSON is parsed strictly (fpi_json_parse:
 * duplicate keys rejected), every member is type- and range-checked with an
 * error located at its JSON pointer, then the hash is recomputed and
 * compared and the program verified (verifier messages located at /ops/N,
 * /buffers/N, ...). On any failure it returns NULL; whatever it allocated is
 * in the caller's arena or freed. */
#include "irpriv.h"
#include "../base/utf8.h"

#include <inttypes.h>
#include <math.h>
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
static void w_str(wr *w, const char *s) {
  static const char hex[] = "0123456789abcdef";
  fp_sbuf *b = &w->b;
  if (!s) s = "";
  fpi_sb_putc(b, '"');
  for (;;) {
    const char *r = s;
    while ((unsigned char)*r >= 0x20 && *r != '"' && *r != '\\') r++;
    if (r > s) fpi_sb_putn(b, s, (size_t)(r - s));
    s = r;
    if (!*s) break;
    unsigned char c = (unsigned char)*s++;
    switch (c) {
      case '"': W_LIT(w, "\\\""); break;
      case '\\': W_LIT(w, "\\\\"); break;
      case '\b': W_LIT(w, "\\b"); break;
      case '\f': W_LIT(w, "\\f"); break;
      case '\n': W_LIT(w, "\\n"); break;
      case '\r': W_LIT(w, "\\r"); break;
      case '\t': W_LIT(w, "\\t"); break;
      default: {
        char t[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        fpi_sb_putn(b, t, 6);
      }
    }
  }
  fpi_sb_putc(b, '"');
}

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
typedef struct rd {
  fp_arena *a;
  fp_diag *d;
  const fp_src *src;
  char ptr[96]; /* pointer of the object being read, e.g. "/ops/12" */
} rd;

/* error at ptr/key (key may be NULL); always false */
static bool rerr(rd *r, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool rerr(rd *r, const char *key, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *ptr = key ? fpi_ptr_key(r->a, r->ptr, key) : r->ptr;
  fpi_diag_json(r->d, r->src, ptr, "%s", msg);
  return false;
}

/* r->ptr = base + "/" + key (pointers here are short; truncated if not) */
static void ptr_join(rd *r, const char *base, const char *key) {
  size_t bl = strlen(base), kl = strlen(key), cap = sizeof r->ptr - 1;
  char t[sizeof r->ptr];
  if (bl > cap) bl = cap;
  memcpy(t, base, bl);
  if (bl < cap) t[bl++] = '/';
  if (kl > cap - bl) kl = cap - bl;
  memcpy(t + bl, key, kl);
  t[bl + kl] = 0;
  memcpy(r->ptr, t, sizeof t);
}

static const char *describe(rd *r, const fp_jv *v) {
  switch (fpi_jv_type(v)) {
    case FP_JNULL: return "null";
    case FP_JBOOL: return "a boolean";
    case FP_JOBJECT: return "an object";
    case FP_JARRAY: return "an array";
    case FP_JSTRING: return "a string";
    case FP_JINT:
    case FP_JDOUBLE: return fpi_j_describe(r->a, v); /* the number as written (doubles) or in decimal */
  }
  return "a value";
}

/* every key of o must be in allowed */
static bool keys(rd *r, const fp_jv *o, const char *const *allowed) {
  for (size_t m = 0; m < o->n; m++) {
    const char *k = o->mems[m].key;
    bool ok = false;
    for (int j = 0; allowed[j] && !ok; j++) ok = !strcmp(allowed[j], k);
    if (!ok) return rerr(r, k, "unknown member '%s'", k);
  }
  return true;
}

static bool is_obj(rd *r, const fp_jv *v, const char *key) {
  if (fpi_jv_is(v, FP_JOBJECT)) return true;
  return rerr(r, key, "expected an object, got %s", describe(r, v));
}

static bool rd_int_v(rd *r, const fp_jv *v, const char *key, int64_t min, int64_t max, int64_t *out) {
  if (!fpi_jv_is(v, FP_JINT))
    return rerr(r, key, "expected an integer, got %s", v ? describe(r, v) : "nothing");
  if (v->big) return rerr(r, key, "integer out of the int64 range");
  int64_t x = v->i;
  if (x < min || x > max) return rerr(r, key, "%" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", x, min, max);
  *out = x;
  return true;
}

/* member key of o: absent and !req -> *out untouched */
static bool rd_int(rd *r, const fp_jv *o, const char *key, bool req, int64_t min, int64_t max, int64_t *out) {
  const fp_jv *v = fpi_j_get(o, key);
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  return rd_int_v(r, v, key, min, max, out);
}

static bool rd_i32(rd *r, const fp_jv *o, const char *key, bool req, int32_t min, int32_t *out) {
  int64_t x = *out;
  if (!rd_int(r, o, key, req, min, INT32_MAX, &x)) return false;
  *out = (int32_t)x;
  return true;
}

static bool rd_dbl(rd *r, const fp_jv *o, const char *key, bool req, double *out) {
  const fp_jv *v = fpi_j_get(o, key);
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  if (!fpi_jv_is(v, FP_JINT) && !fpi_jv_is(v, FP_JDOUBLE))
    return rerr(r, key, "expected a number, got %s", describe(r, v));
  double x = fpi_jv_num(v);
  if (!isfinite(x)) return rerr(r, key, "number out of range");
  *out = x;
  return true;
}

static bool rd_bool(rd *r, const fp_jv *o, const char *key, bool req, bool *out) {
  const fp_jv *v = fpi_j_get(o, key);
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  if (!fpi_jv_is(v, FP_JBOOL)) return rerr(r, key, "expected true or false, got %s", describe(r, v));
  *out = v->b;
  return true;
}

static bool rd_str_v(rd *r, const fp_jv *v, const char *key, const char **out) {
  if (!fpi_jv_is(v, FP_JSTRING)) return rerr(r, key, "expected a string, got %s", v ? describe(r, v) : "nothing");
  const char *s = v->s;
  if (strlen(s) != v->n) return rerr(r, key, "NUL character in a string");
  *out = fpi_strdup(r->a, s);
  return true;
}

static bool rd_str(rd *r, const fp_jv *o, const char *key, bool req, const char **out) {
  const fp_jv *v = fpi_j_get(o, key);
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  return rd_str_v(r, v, key, out);
}

/* a string that names one of n things (name(i)) */
static bool rd_enum(rd *r, const fp_jv *o, const char *key, bool req, const char *(*name)(int), int n, int *out) {
  const fp_jv *v = fpi_j_get(o, key);
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  if (!fpi_jv_is(v, FP_JSTRING)) return rerr(r, key, "expected a string, got %s", describe(r, v));
  const char *s = v->s;
  for (int i = 0; i < n; i++)
    if (!strcmp(name(i), s)) {
      *out = i;
      return true;
    }
  return rerr(r, key, "unknown %s '%.60s'", key, s);
}

static const char *n_dtype(int i) { return fpi_dtype_name((fp_dtype)i); }
static const char *n_kind(int i) { return kind_names[i]; }
static const char *n_pass(int i) { return pass_names[i]; }
static const char *n_red(int i) { return fpi_redop_name(i); }
static const char *n_op(int i) { return fpi_op_name((fp_opcode)i); }

/* an array member; n its length */
static bool rd_arr(rd *r, const fp_jv *o, const char *key, bool req, const fp_jv **out, size_t *n) {
  const fp_jv *v = fpi_j_get(o, key);
  *out = NULL;
  *n = 0;
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  if (!fpi_jv_is(v, FP_JARRAY)) return rerr(r, key, "expected an array, got %s", describe(r, v));
  *out = v;
  *n = fpi_jv_len(v);
  if (*n > INT32_MAX - 1) return rerr(r, key, "too many entries");
  return true;
}

/* set r->ptr to "/<arr>/<i>" and check the element is an object */
static bool elem(rd *r, const fp_jv *arr, const char *name, size_t i, const fp_jv **o) {
  snprintf(r->ptr, sizeof r->ptr, "/%s", name);
  char k[24];
  snprintf(k, sizeof k, "%zu", i);
  *o = fpi_jv_at(arr, i);
  if (!is_obj(r, *o, k)) return false;
  snprintf(r->ptr, sizeof r->ptr, "/%s/%zu", name, i);
  return true;
}

static bool rregion(rd *r, const fp_jv *o, const char *key, fp_region *out) {
  const fp_jv *v = fpi_j_get(o, key);
  if (!v) return true;
  if (!is_obj(r, v, key)) return false;
  char save[sizeof r->ptr];
  memcpy(save, r->ptr, sizeof save);
  ptr_join(r, save, key);
  static const char *const allowed[] = {"buffer", "offset", "stride", "table_relative", NULL};
  bool ok = keys(r, v, allowed) && rd_i32(r, v, "buffer", true, -1, &out->buf) &&
            rd_int(r, v, "offset", true, INT64_MIN, INT64_MAX, &out->off) &&
            rd_int(r, v, "stride", false, INT64_MIN, INT64_MAX, &out->stride) && rd_bool(r, v, "table_relative", false, &out->tabrel);
  memcpy(r->ptr, save, sizeof save);
  return ok;
}

static bool rview(rd *r, const fp_jv *o, const char *key, fp_view *out) {
  const fp_jv *v = fpi_j_get(o, key);
  if (!v) return rerr(r, NULL, "missing required member '%s'", key);
  if (!is_obj(r, v, key)) return false;
  char save[sizeof r->ptr];
  memcpy(save, r->ptr, sizeof save);
  ptr_join(r, save, key);
  static const char *const allowed[] = {"buffer", "offset", NULL};
  bool ok = keys(r, v, allowed) && rd_i32(r, v, "buffer", true, -1, &out->buf) &&
            rd_int(r, v, "offset", true, INT64_MIN, INT64_MAX, &out->off);
  memcpy(r->ptr, save, sizeof save);
  return ok;
}

static bool read_comms(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  const fp_jv *arr, *o;
  size_t n;
  if (!rd_arr(r, root, "comms", true, &arr, &n)) return false;
  static const char *const allowed[] = {"name", "size", "stride", NULL};
  for (size_t i = 0; i < n; i++) {
    const char *name;
    int64_t size, stride;
    if (!elem(r, arr, "comms", i, &o) || !keys(r, o, allowed) || !rd_str(r, o, "name", true, &name) ||
        !rd_int(r, o, "size", true, INT64_MIN, INT64_MAX, &size) || !rd_int(r, o, "stride", true, INT64_MIN, INT64_MAX, &stride))
      return false;
    fpi_ir_comm_add(p, name, size, stride);
  }
  return true;
}

static bool read_tables(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  const fp_jv *arr, *o, *off, *cnt;
  size_t n, noff, ncnt;
  if (!rd_arr(r, root, "tables", true, &arr, &n)) return false;
  static const char *const allowed[] = {"name", "off", "cnt", NULL};
  for (size_t i = 0; i < n; i++) {
    const char *name;
    if (!elem(r, arr, "tables", i, &o) || !keys(r, o, allowed) || !rd_str(r, o, "name", true, &name) ||
        !rd_arr(r, o, "off", true, &off, &noff) || !rd_arr(r, o, "cnt", true, &cnt, &ncnt))
      return false;
    if (noff != ncnt) return rerr(r, "cnt", "has %zu entries but off has %zu", ncnt, noff);
    int t = fpi_ir_table_add(p, name, (int64_t)noff, NULL, NULL);
    char save[sizeof r->ptr];
    memcpy(save, r->ptr, sizeof save);
    for (int w = 0; w < 2; w++) {
      ptr_join(r, save, w ? "cnt" : "off");
      for (size_t j = 0; j < noff; j++) {
        char k[24];
        snprintf(k, sizeof k, "%zu", j);
        int64_t *dst = w ? &p->tabs[t].cnt[j] : &p->tabs[t].off[j];
        if (!rd_int_v(r, fpi_jv_at(w ? cnt : off, j), k, INT64_MIN, INT64_MAX, dst)) return false;
      }
    }
    memcpy(r->ptr, save, sizeof save);
  }
  return true;
}

static bool read_buckets(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  const fp_jv *arr;
  size_t n;
  if (!rd_arr(r, root, "buckets", true, &arr, &n)) return false;
  snprintf(r->ptr, sizeof r->ptr, "/buckets");
  for (size_t i = 0; i < n; i++) {
    char k[24];
    const char *name;
    snprintf(k, sizeof k, "%zu", i);
    if (!rd_str_v(r, fpi_jv_at(arr, i), k, &name)) return false;
    fpi_ir_bucket_add(p, name);
  }
  return true;
}

static bool read_bufs(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  const fp_jv *arr, *o;
  size_t n;
  if (!rd_arr(r, root, "buffers", true, &arr, &n)) return false;
  static const char *const allowed[] = {"name", "kind", "category", "bucket", "host", "bytes", "offset", NULL};
  for (size_t i = 0; i < n; i++) {
    const char *name;
    int kind, cat;
    int32_t bucket = -1;
    bool host = false;
    int64_t bytes, offset;
    if (!elem(r, arr, "buffers", i, &o) || !keys(r, o, allowed) || !rd_str(r, o, "name", true, &name) ||
        !rd_enum(r, o, "kind", true, n_kind, 2, &kind) || !rd_enum(r, o, "category", true, fpi_buf_cat_name, FP_NBUFCATS, &cat) ||
        !rd_i32(r, o, "bucket", false, -1, &bucket) || !rd_bool(r, o, "host", false, &host) ||
        !rd_int(r, o, "bytes", true, INT64_MIN, INT64_MAX, &bytes) || !rd_int(r, o, "offset", true, INT64_MIN, INT64_MAX, &offset))
      return false;
    int b = fpi_ir_buf_add(p, name, (fp_buf_kind)kind, (fp_buf_cat)cat, bucket, bytes);
    p->bufs[b].host = host;
    p->bufs[b].offset = offset;
  }
  return true;
}

static bool read_lives(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  const fp_jv *arr, *o;
  size_t n;
  if (!rd_arr(r, root, "lives", true, &arr, &n)) return false;
  static const char *const allowed[] = {"buffer", "first", "last", NULL};
  for (size_t i = 0; i < n; i++) {
    int32_t buf = 0, first = 0, last = 0;
    if (!elem(r, arr, "lives", i, &o) || !keys(r, o, allowed) || !rd_i32(r, o, "buffer", true, INT32_MIN, &buf) ||
        !rd_i32(r, o, "first", true, INT32_MIN, &first) || !rd_i32(r, o, "last", true, INT32_MIN, &last))
      return false;
    fpi_ir_buf_live(p, buf, first, last);
  }
  return true;
}

static bool read_mods(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  const fp_jv *arr, *o;
  size_t n;
  if (!rd_arr(r, root, "modules", true, &arr, &n)) return false;
  static const char *const allowed[] = {"name", "flops_fwd", "flops_bwd", "activation_bytes", "recompute_saved_bytes",
                                        NULL};
  for (size_t i = 0; i < n; i++) {
    const char *name;
    double ff, fb;
    int64_t act, saved = -1;
    if (!elem(r, arr, "modules", i, &o) || !keys(r, o, allowed) || !rd_str(r, o, "name", true, &name) ||
        !rd_dbl(r, o, "flops_fwd", true, &ff) || !rd_dbl(r, o, "flops_bwd", true, &fb) ||
        !rd_int(r, o, "activation_bytes", true, INT64_MIN, INT64_MAX, &act) ||
        !rd_int(r, o, "recompute_saved_bytes", false, INT64_MIN, INT64_MAX, &saved))
      return false;
    int m = fpi_ir_module_add(p, name, ff, fb, act);
    if (fpi_j_has(o, "recompute_saved_bytes")) p->mods[m].recompute = true, p->mods[m].saved_bytes = saved;
  }
  return true;
}

static bool read_params(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  const fp_jv *arr, *o, *shape;
  size_t n, nd;
  if (!rd_arr(r, root, "params", true, &arr, &n)) return false;
  static const char *const allowed[] = {"name",  "shape",  "module", "bucket", "main_dtype", "param_dtype", "grad_dtype",
                                        "requires_grad", "placement", "dim", "comm", "owner", "table", "chunk",
                                        "main",  "grad",   "weight", "ugrad",  "users", "opt", "scales", NULL};
  for (size_t i = 0; i < n; i++) {
    fp_ir_param q;
    memset(&q, 0, sizeof q);
    q.opt.buf = q.scales.buf = -1;
    int md, pd, gd, pl;
    if (!elem(r, arr, "params", i, &o) || !keys(r, o, allowed) || !rd_str(r, o, "name", true, &q.name) ||
        !rd_arr(r, o, "shape", true, &shape, &nd))
      return false;
    if (nd > 8) return rerr(r, "shape", "has %zu dimensions (at most 8)", nd);
    q.ndim = (int)nd;
    char save[sizeof r->ptr];
    memcpy(save, r->ptr, sizeof save);
    ptr_join(r, save, "shape");
    for (size_t k = 0; k < nd; k++) {
      char key[24];
      snprintf(key, sizeof key, "%zu", k);
      if (!rd_int_v(r, fpi_jv_at(shape, k), key, INT64_MIN, INT64_MAX, &q.shape[k])) return false;
    }
    memcpy(r->ptr, save, sizeof save);
    if (!rd_i32(r, o, "module", true, -1, &q.module) || !rd_i32(r, o, "bucket", true, -1, &q.bucket) ||
        !rd_enum(r, o, "main_dtype", true, n_dtype, FP_NDTYPES, &md) || !rd_enum(r, o, "param_dtype", true, n_dtype, FP_NDTYPES, &pd) ||
        !rd_enum(r, o, "grad_dtype", true, n_dtype, FP_NDTYPES, &gd) || !rd_bool(r, o, "requires_grad", true, &q.requires_grad) ||
        !rd_enum(r, o, "placement", true, fpi_ir_placement_name, FP_IR_NPLACEMENTS, &pl) ||
        !rd_i32(r, o, "dim", true, INT32_MIN, &q.dim) || !rd_i32(r, o, "comm", true, -1, &q.comm) ||
        !rd_int(r, o, "owner", true, INT64_MIN, INT64_MAX, &q.owner) || !rd_i32(r, o, "table", true, -1, &q.tab) ||
        !rd_int(r, o, "chunk", true, INT64_MIN, INT64_MAX, &q.chunk) || !rview(r, o, "main", &q.main) ||
        !rview(r, o, "grad", &q.grad) || !rview(r, o, "weight", &q.weight) || !rview(r, o, "ugrad", &q.ugrad) ||
        (fpi_j_get(o, "opt") && !rview(r, o, "opt", &q.opt)) ||
        (fpi_j_get(o, "scales") && !rview(r, o, "scales", &q.scales)))
      return false;
    const fp_jv *users;
    size_t nu;
    if (!rd_arr(r, o, "users", false, &users, &nu)) return false;
    if (fpi_j_has(o, "users")) {
      if (nu > INT32_MAX / 2) return rerr(r, "users", "too many users");
      q.users = fpi_alloc_array(p->arena, nu + 1, sizeof *q.users);
      ptr_join(r, save, "users");
      for (size_t k = 0; k < nu; k++) {
        char key[24];
        int64_t m;
        snprintf(key, sizeof key, "%zu", k);
        if (!rd_int_v(r, fpi_jv_at(users, k), key, INT32_MIN, INT32_MAX, &m)) return false;
        q.users[q.nusers++] = (int32_t)m;
      }
      memcpy(r->ptr, save, sizeof save);
    }
    q.main_dtype = (fp_dtype)md;
    q.param_dtype = (fp_dtype)pd;
    q.grad_dtype = (fp_dtype)gd;
    q.placement = pl;
    *fpi_ir_param_add(p) = q;
  }
  return true;
}

static bool read_op(rd *r, const fp_jv *o, fp_prog *p) {
  static const char *const allowed[] = {"op",     "stream", "dtype", "sdtype", "count", "dst",   "src",
                                        "aux",    "comm",   "table", "root",   "only",  "only_comm", "event",
                                        "module", "pass",   "alpha", "rows",   "dpitch", "spitch", "bucket",
                                        "group",  "uses",   "red",  NULL};
  int code, stream, dt, sdt = -1, pass = FP_PASS_FWD, red = FP_RED_SUM;
  int64_t count;
  if (!keys(r, o, allowed) || !rd_enum(r, o, "op", true, n_op, FP_NOPS, &code) ||
      !rd_enum(r, o, "stream", true, fpi_stream_name, FP_NSTREAMS, &stream) ||
      !rd_enum(r, o, "dtype", true, n_dtype, FP_NDTYPES, &dt) || !rd_enum(r, o, "sdtype", false, n_dtype, FP_NDTYPES, &sdt) ||
      !rd_int(r, o, "count", true, INT64_MIN, INT64_MAX, &count) || !rd_enum(r, o, "pass", false, n_pass, 3, &pass) ||
      !rd_enum(r, o, "red", false, n_red, FP_NREDOPS, &red))
    return false;
  fp_op *op = fpi_ir_emit(p, (fp_opcode)code, (fp_stream)stream, (fp_dtype)dt, count);
  if (sdt >= 0) op->sdtype = (fp_dtype)sdt;
  op->pass = (fp_pass)pass;
  op->red = (fp_redop)red;
  const fp_jv *uses;
  size_t nu;
  if (!rd_arr(r, o, "uses", false, &uses, &nu)) return false;
  if (uses) {
    int32_t *ids = fpi_alloc_array(r->a, nu + 1, sizeof *ids);
    char save[sizeof r->ptr];
    memcpy(save, r->ptr, sizeof save);
    ptr_join(r, save, "uses");
    for (size_t k = 0; k < nu; k++) {
      char key[24];
      int64_t v;
      snprintf(key, sizeof key, "%zu", k);
      if (!rd_int_v(r, fpi_jv_at(uses, k), key, INT32_MIN, INT32_MAX, &v)) return false;
      ids[k] = (int32_t)v;
    }
    memcpy(r->ptr, save, sizeof save);
    if (p->nuses > INT32_MAX - (int64_t)nu) return rerr(r, "uses", "too many uses");
    fpi_ir_op_uses(p, op, ids, (int)nu);
  }
  fp_op_shape sh = {1, 0, 0};
  if (!(rregion(r, o, "dst", &op->dst) && rregion(r, o, "src", &op->src) && rregion(r, o, "aux", &op->aux) &&
        rd_i32(r, o, "comm", false, -1, &op->comm) && rd_i32(r, o, "table", false, -1, &op->tab) &&
        rd_i32(r, o, "root", false, INT32_MIN, &op->root) && rd_i32(r, o, "only", false, INT32_MIN, &op->only) &&
        rd_i32(r, o, "only_comm", false, -1, &op->only_comm) && rd_i32(r, o, "event", false, -1, &op->event) &&
        rd_i32(r, o, "module", false, -1, &op->module) && rd_dbl(r, o, "alpha", false, &op->alpha) &&
        rd_int(r, o, "rows", false, INT64_MIN, INT64_MAX, &sh.rows) &&
        rd_int(r, o, "dpitch", false, INT64_MIN, INT64_MAX, &sh.dpitch) &&
        rd_int(r, o, "spitch", false, INT64_MIN, INT64_MAX, &sh.spitch) && rd_i32(r, o, "bucket", false, -1, &op->bucket) &&
        rd_i32(r, o, "group", false, INT32_MIN, &op->group)))
    return false;
  fpi_ir_op_shape(p, op, sh.rows, sh.dpitch, sh.spitch);
  return true;
}

/* segments tile the op array in order; ops are read segment by segment */
static bool read_segs_ops(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  const fp_jv *segs, *ops, *o;
  size_t ns, no;
  if (!rd_arr(r, root, "segments", true, &segs, &ns) || !rd_arr(r, root, "ops", true, &ops, &no)) return false;
  int64_t next = 0;
  for (size_t k = 0; k < ns; k++) {
    static const char *const allowed[] = {"kind", "module", "micro", "first", "count", NULL};
    int kind;
    int32_t module = -1, micro = 0;
    int64_t first, count;
    if (!elem(r, segs, "segments", k, &o) || !keys(r, o, allowed) ||
        !rd_enum(r, o, "kind", true, fpi_seg_name, FP_NSEGKINDS, &kind) || !rd_i32(r, o, "module", true, -1, &module) ||
        !rd_i32(r, o, "micro", true, INT32_MIN, &micro) || !rd_int(r, o, "first", true, 0, INT32_MAX, &first) ||
        !rd_int(r, o, "count", true, 0, INT32_MAX, &count))
      return false;
    if (first != next) return rerr(r, "first", "is %" PRId64 " but the previous segment ends at %" PRId64, first, next);
    if (count > (int64_t)no - first)
      return rerr(r, "count", "%" PRId64 " ops from %" PRId64 " run past the %zu ops", count, first, no);
    fpi_ir_seg_begin(p, (fp_seg_kind)kind, module, micro);
    char save[sizeof r->ptr];
    memcpy(save, r->ptr, sizeof save);
    for (int64_t i = first; i < first + count; i++)
      if (!elem(r, ops, "ops", (size_t)i, &o) || !read_op(r, o, p)) return false;
    memcpy(r->ptr, save, sizeof save);
    next = first + count;
  }
  if ((size_t)next != no) {
    snprintf(r->ptr, sizeof r->ptr, "/ops");
    return rerr(r, NULL, "%zu ops but the segments cover %" PRId64, no, next);
  }
  return true;
}

typedef struct jloc {
  fp_diag *d;
  const fp_src *src;
  fp_arena *a;
} jloc;

/* "hardware" (optional) */
static bool read_hw(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0;
  const fp_jv *v = fpi_j_get(root, "hardware");
  if (!v) return true;
  if (!is_obj(r, v, "hardware")) return false;
  snprintf(r->ptr, sizeof r->ptr, "/hardware");
  const char *allowed[FP_HW_NFIELDS + 2];
  allowed[0] = "name";
  for (int k = 0; k < FP_HW_NFIELDS; k++) allowed[k + 1] = fp_hw_fields[k].key;
  allowed[FP_HW_NFIELDS + 1] = NULL;
  fp_hw h = {0};
  if (!keys(r, v, allowed) || !rd_str(r, v, "name", true, &h.name)) return false;
  for (int k = 0; k < FP_HW_NFIELDS; k++) {
    const char *key = fp_hw_fields[k].key;
    if (fp_hw_fields[k].integer ? !rd_int(r, v, key, true, INT64_MIN, INT64_MAX, fpi_hw_int(&h, k))
                                : !rd_dbl(r, v, key, true, fpi_hw_dbl(&h, k)))
      return false;
  }
  p->hw = h;
  return true;
}

static const char *n_optim(int i) { return fpi_optim_name(i); }

/* "optimizer": {"type", "state_dtype"}; absent: none */
static bool read_optim(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0;
  const fp_jv *v = fpi_j_get(root, "optimizer");
  if (!v) return true;
  if (!is_obj(r, v, "optimizer")) return false;
  snprintf(r->ptr, sizeof r->ptr, "/optimizer");
  static const char *const allowed[] = {"type", "state_dtype", NULL};
  int k, t = 0;
  if (!keys(r, v, allowed) || !rd_enum(r, v, "type", true, n_optim, FP_NOPTIMS, &k) ||
      !rd_enum(r, v, "state_dtype", k != FP_OPTIM_NONE, n_dtype, FP_NDTYPES, &t))
    return false;
  p->optim = (fp_optim)k;
  p->optim_dtype = (fp_dtype)t;
  return true;
}

static const char *const figure_keys[] = {"comm_bytes_per_rank", "persistent_bytes", "peak_bytes",
                                          "lower_bound_bytes", "activation_peak_bytes", "prefetch_forward",
                                          "prefetch_backward", "modeled_step_ms", "modeled_compute_ms",
                                          "modeled_exposed_comm_ms", NULL};

/* "figures" (optional; derived data outside the hash): every member, integers
 * >= 0, prefetch depths int32, times finite and >= 0 */
static bool read_figures(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0;
  const fp_jv *v = fpi_j_get(root, "figures");
  if (!v) return true;
  if (!is_obj(r, v, "figures")) return false;
  snprintf(r->ptr, sizeof r->ptr, "/figures");
  if (!keys(r, v, figure_keys)) return false;
  fp_figures *g = fpi_alloc(r->a, sizeof *g);
  int64_t *ints[7] = {&g->comm_bytes_per_rank, &g->persistent_bytes, &g->peak_bytes, &g->lower_bound_bytes,
                      &g->activation_peak_bytes, &g->prefetch_forward, &g->prefetch_backward};
  double *dbls[3] = {&g->modeled_step_ms, &g->modeled_compute_ms, &g->modeled_exposed_comm_ms};
  for (int k = 0; k < 7; k++)
    if (!rd_int(r, v, figure_keys[k], true, 0, k < 5 ? INT64_MAX : INT32_MAX, ints[k])) return false;
  for (int k = 0; k < 3; k++) {
    if (!rd_dbl(r, v, figure_keys[7 + k], true, dbls[k])) return false;
    if (*dbls[k] < 0) return rerr(r, figure_keys[7 + k], "a modeled time is negative");
  }
  p->figures = g;
  return true;
}

/* "memory_timeline" (optional; derived data outside the hash): its shape, and
 * fpi_memtl_check's self-consistency */
static bool read_memtl(rd *r, const fp_jv *root, fp_prog *p) {
  r->ptr[0] = 0;
  const fp_jv *v = fpi_j_get(root, "memory_timeline"), *arr, *pts;
  if (!v) return true;
  if (!is_obj(r, v, "memory_timeline")) return false;
  snprintf(r->ptr, sizeof r->ptr, "/memory_timeline");
  static const char *const allowed[] = {"modeled", "time_unit", "categories", "peak_bytes", "lower_bound_bytes",
                                        "points", NULL};
  bool modeled = false;
  const char *unit;
  size_t n, np;
  fp_memtl *t = fpi_alloc(r->a, sizeof *t);
  if (!keys(r, v, allowed) || !rd_bool(r, v, "modeled", true, &modeled) || !rd_str(r, v, "time_unit", true, &unit) ||
      !rd_arr(r, v, "categories", true, &arr, &n) ||
      !rd_int(r, v, "peak_bytes", true, 0, INT64_MAX, &t->peak_bytes) ||
      !rd_int(r, v, "lower_bound_bytes", true, 0, INT64_MAX, &t->lower_bound_bytes) ||
      !rd_arr(r, v, "points", true, &pts, &np))
    return false;
  if (!modeled) return rerr(r, "modeled", "must be true: the timeline is modeled, not measured");
  if (strcmp(unit, "us")) return rerr(r, "time_unit", "expected \"us\", got '%.40s'", unit);
  if (n != FP_MEMTL_NCATS) return rerr(r, "categories", "expected %d categories, got %zu", FP_MEMTL_NCATS, n);
  for (int c = 0; c < FP_MEMTL_NCATS; c++) {
    const fp_jv *e = fpi_jv_at(arr, (size_t)c);
    snprintf(r->ptr, sizeof r->ptr, "/memory_timeline/categories");
    if (!fpi_jv_is(e, FP_JSTRING) || strcmp(e->s, fpi_memtl_cat_name(c)))
      return rerr(r, fpi_sprintf(r->a, "%d", c), "expected \"%s\"", fpi_memtl_cat_name(c));
  }
  t->pts = fpi_alloc_array(r->a, np + 1, sizeof *t->pts);
  t->npts = (int32_t)np;
  for (size_t i = 0; i < np; i++) {
    snprintf(r->ptr, sizeof r->ptr, "/memory_timeline/points");
    const fp_jv *e = fpi_jv_at(pts, i);
    const char *key = fpi_sprintf(r->a, "%zu", i);
    if (!fpi_jv_is(e, FP_JARRAY) || fpi_jv_len(e) != FP_MEMTL_NCATS + 1)
      return rerr(r, key, "expected an array of a time and %d byte counts", FP_MEMTL_NCATS);
    snprintf(r->ptr, sizeof r->ptr, "/memory_timeline/points/%zu", i);
    const fp_jv *x = fpi_jv_at(e, 0);
    if (!fpi_jv_is(x, FP_JINT) && !fpi_jv_is(x, FP_JDOUBLE))
      return rerr(r, "0", "expected a time in microseconds, got %s", describe(r, x));
    t->pts[i].t_us = fpi_jv_num(x);
    for (int c = 0; c < FP_MEMTL_NCATS; c++)
      if (!rd_int_v(r, fpi_jv_at(e, (size_t)c + 1), fpi_sprintf(r->a, "%d", c + 1), 0, INT64_MAX,
                    &t->pts[i].bytes[c]))
        return false;
  }
  snprintf(r->ptr, sizeof r->ptr, "/memory_timeline");
  const char *bad = fpi_memtl_check(t);
  if (bad) return rerr(r, NULL, "%s", bad);
  p->memtl = t;
  return true;
}

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

static fp_prog *plan_read_slow(fp_arena *a, fp_diag *d, const fp_src *src, unsigned flags) {
  fp_jctx jc = {a, d, src, NULL};
  rd r = {.a = a, .d = d, .src = src};
  fp_prog *p = NULL;
  const fp_jv *root = fpi_json_parse(&jc);
  if (!root) return NULL;
  if (!is_obj(&r, root, NULL)) goto fail;
  static const char *const allowed[] = {"format", "planner_version", "hash", "model", "strategy", "world_size",
                                        "ranks_per_node", "grad_accumulation", "arena_bytes", "host_bytes", "events",
                                        "memory_budget_bytes", "hardware", "optimizer", "comms", "tables", "buckets", "buffers", "lives",
                                        "modules", "params", "segments", "ops", "memory_timeline", "figures", NULL};
  const char *format, *version, *hash;
  if (!rd_str(&r, root, "format", true, &format)) goto fail;
  if (strcmp(format, PLAN_FORMAT)) {
    rerr(&r, "format", "not a plan: format is '%.60s', expected '%s'", format, PLAN_FORMAT);
    goto fail;
  }
  if (!rd_str(&r, root, "planner_version", true, &version)) goto fail;
  if (strcmp(version, FP_VERSION)) {
    rerr(&r, "planner_version", "plan was written by flexplan %.40s; this is flexplan %s: compile the plan again", version,
         FP_VERSION);
    goto fail;
  }
  if (!keys(&r, root, allowed) || !rd_str(&r, root, "hash", true, &hash)) goto fail;
  p = fpi_prog_new(a);
  int64_t nev = 0;
  if (!rd_str(&r, root, "model", false, &p->model) || !rd_str(&r, root, "strategy", false, &p->strategy) ||
      !rd_int(&r, root, "world_size", true, INT64_MIN, INT64_MAX, &p->world_size) ||
      !rd_int(&r, root, "ranks_per_node", true, INT64_MIN, INT64_MAX, &p->ranks_per_node) ||
      !rd_int(&r, root, "grad_accumulation", true, INT64_MIN, INT64_MAX, &p->grad_accumulation) ||
      !rd_int(&r, root, "arena_bytes", true, INT64_MIN, INT64_MAX, &p->arena_bytes) ||
      !rd_int(&r, root, "host_bytes", true, INT64_MIN, INT64_MAX, &p->host_bytes) ||
      !rd_int(&r, root, "events", true, 0, INT32_MAX, &nev) ||
      !rd_int(&r, root, "memory_budget_bytes", false, 1, INT64_MAX, &p->memory_budget_bytes))
    goto fail;
  p->nevents = (int32_t)nev;
  if (!read_hw(&r, root, p) || !read_optim(&r, root, p) || !read_comms(&r, root, p) || !read_tables(&r, root, p) || !read_buckets(&r, root, p) || !read_bufs(&r, root, p) ||
      !read_lives(&r, root, p) || !read_mods(&r, root, p) || !read_params(&r, root, p) || !read_segs_ops(&r, root, p) ||
      !read_memtl(&r, root, p) || !read_figures(&r, root, p))
    goto fail;
  char want[40];
  snprintf(want, sizeof want, "fnv1a64:%016" PRIx64, fpi_prog_hash(p));
  if (fp_plan_check_hash && strcmp(hash, want)) {
    r.ptr[0] = 0;
    rerr(&r, "hash", "content hash mismatch: file says %.60s, content is %s", hash, want);
    goto fail;
  }
  jloc l = {d, src, a};
  if (!fpi_ir_verify_with(p, report_json, &l, flags)) goto fail;
  return p;
fail:
  return NULL;
}

/* ---- reader: the fast path --------------------------------------------------- */
/* A plan as fpi_plan_write writes it is read without json-c: one pass over
 * the text, building the program as it goes. It accepts a strict subset of
 * what the reader above accepts and builds the same program from it; on
 * anything else - any syntax error, escape or non-ASCII byte in a string,
 * null, an integer of more than 18 digits, top-level members out of the
 * writer's order, a duplicate or unknown member, a wrong type, a value out of
 * range, a hash mismatch - it gives up without a word, and the reader above
 * reads the file again and reports what it finds. */
bool fp_plan_fast_read = true;
bool fp_plan_check_hash = true;
long fp_plan_fast_reads;

typedef struct fr {
  const char *s, *end;
  fp_arena *a;
  fp_prog *p;
  int64_t *tab; /* scratch for table rows */
  int64_t captab;
} fr;

static void ws(fr *f) {
  while (*f->s == ' ' || *f->s == '\n' || *f->s == '\t' || *f->s == '\r') f->s++;
}

static bool lit(fr *f, char c) {
  ws(f);
  if (*f->s != c) return false;
  f->s++;
  return true;
}

/* a string of printable ASCII without escapes: [*str, *str + *len) in the text */
static bool fstr(fr *f, const char **str, size_t *len) {
  ws(f);
  if (*f->s != '"') return false;
  const char *b = ++f->s, *q = b;
  while ((unsigned char)*q >= 0x20 && (unsigned char)*q < 0x7f && *q != '"' && *q != '\\') q++;
  if (*q != '"') return false;
  *str = b;
  *len = (size_t)(q - b);
  f->s = q + 1;
  return true;
}

static bool fstr_dup(fr *f, const char **out) {
  const char *s;
  size_t n;
  if (!fstr(f, &s, &n)) return false;
  *out = fpi_strndup(f->a, s, n);
  return true;
}

/* an integer token of at most 18 digits, in [min, max] */
static bool fint(fr *f, int64_t min, int64_t max, int64_t *out) {
  ws(f);
  const char *q = f->s;
  bool neg = *q == '-';
  if (neg) q++;
  const char *d0 = q;
  uint64_t v = 0;
  while (*q >= '0' && *q <= '9') v = v * 10 + (uint64_t)(*q++ - '0');
  size_t nd = (size_t)(q - d0);
  if (nd == 0 || nd > 18 || (*d0 == '0' && (nd > 1 || neg)) || *q == '.' || *q == 'e' || *q == 'E') return false;
  int64_t x = neg ? -(int64_t)v : (int64_t)v;
  if (x < min || x > max) return false;
  *out = x;
  f->s = q;
  return true;
}

static bool fi32(fr *f, int32_t min, int32_t *out) {
  int64_t x;
  if (!fint(f, min, INT32_MAX, &x)) return false;
  *out = (int32_t)x;
  return true;
}

/* a finite number: an integer token or a JSON number read with strtod */
static bool fdbl(fr *f, double *out) {
  ws(f);
  const char *b = f->s, *q = b;
  if (*q == '-') q++;
  if (*q == '0')
    q++;
  else if (*q >= '1' && *q <= '9')
    while (*q >= '0' && *q <= '9') q++;
  else
    return false;
  if (*q != '.' && *q != 'e') {
    int64_t v;
    if (!fint(f, INT64_MIN, INT64_MAX, &v)) return false;
    *out = (double)v;
    return true;
  }
  if (*q == '.') {
    q++;
    if (!(*q >= '0' && *q <= '9')) return false;
    while (*q >= '0' && *q <= '9') q++;
  }
  if (*q == 'e') {
    q++;
    if (*q == '+' || *q == '-') q++;
    if (!(*q >= '0' && *q <= '9')) return false;
    while (*q >= '0' && *q <= '9') q++;
  }
  char *e;
  double x = strtod(b, &e);
  if (e != q || !isfinite(x)) return false;
  *out = x;
  f->s = q;
  return true;
}

static bool fbool(fr *f, bool *out) {
  ws(f);
  if (!strncmp(f->s, "true", 4)) {
    f->s += 4;
    *out = true;
    return true;
  }
  if (!strncmp(f->s, "false", 5)) {
    f->s += 5;
    *out = false;
    return true;
  }
  return false;
}

/* one of n names */
static bool fenum(fr *f, const char *(*name)(int), int n, int *out) {
  const char *s;
  size_t len;
  if (!fstr(f, &s, &len)) return false;
  for (int i = 0; i < n; i++) {
    const char *nm = name(i);
    if (nm[0] == s[0] && !strncmp(nm, s, len) && !nm[len]) {
      *out = i;
      return true;
    }
  }
  return false;
}

/* the next member's key of an object, by its index in allowed (NULL-
 * terminated, at most 32); false at a key not there or seen before (*seen) */
static bool fkey(fr *f, const char *const *allowed, uint32_t *seen, int *k) {
  const char *s;
  size_t len;
  if (!fstr(f, &s, &len) || !lit(f, ':')) return false;
  for (int i = 0; allowed[i]; i++)
    if (allowed[i][0] == s[0] && !strncmp(allowed[i], s, len) && !allowed[i][len]) {
      if (*seen >> i & 1) return false;
      *seen |= 1u << i;
      *k = i;
      return true;
    }
  return false;
}

/* "{" member ("," member)* "}" or "{}"; member(f, ctx, k) reads the value
 * of allowed[k]; then every bit of req must be in *seen */
static bool fobj(fr *f, const char *const *allowed, uint32_t req, uint32_t *seen,
                 bool (*member)(fr *, void *, int), void *ctx) {
  *seen = 0;
  if (!lit(f, '{')) return false;
  if (!lit(f, '}')) {
    do {
      int k;
      if (!fkey(f, allowed, seen, &k) || !member(f, ctx, k)) return false;
    } while (lit(f, ','));
    if (!lit(f, '}')) return false;
  }
  return (*seen & req) == req;
}

/* "[" elem ("," elem)* "]" or "[]"; elem(f, ctx, i) */
static bool farr(fr *f, bool (*elem)(fr *, void *, int64_t), void *ctx) {
  if (!lit(f, '[')) return false;
  if (lit(f, ']')) return true;
  int64_t i = 0;
  do {
    if (i >= INT32_MAX - 1 || !elem(f, ctx, i++)) return false;
  } while (lit(f, ','));
  return lit(f, ']');
}

/* comms */
static const char *const a_comm[] = {"name", "size", "stride", NULL};
typedef struct { const char *name; int64_t size, stride; } f_comm;
static bool m_comm(fr *f, void *ctx, int k) {
  f_comm *c = ctx;
  return k == 0 ? fstr_dup(f, &c->name) : fint(f, INT64_MIN, INT64_MAX, k == 1 ? &c->size : &c->stride);
}
static bool e_comm(fr *f, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  f_comm c;
  uint32_t seen;
  if (!fobj(f, a_comm, 7, &seen, m_comm, &c)) return false;
  fpi_ir_comm_add(f->p, c.name, c.size, c.stride);
  return true;
}

/* tables: the rows go to f->tab (off, then cnt after them) */
static const char *const a_table[] = {"name", "off", "cnt", NULL};
typedef struct { const char *name; int64_t noff, ncnt; bool offfirst; } f_table;
static bool m_table(fr *f, void *ctx, int k) {
  f_table *t = ctx;
  if (k == 0) return fstr_dup(f, &t->name);
  /* off is read first, then cnt (else the slow path takes it) */
  if (k == 1 ? t->ncnt >= 0 : t->noff < 0) return false;
  int64_t base = k == 1 ? 0 : t->noff, n = 0;
  if (!lit(f, '[')) return false;
  if (!lit(f, ']')) {
    do {
      if (base + n >= INT32_MAX - 1) return false;
      f->tab = fpi_grow(f->a, f->tab, &f->captab, base + n + 1, sizeof *f->tab);
      if (!fint(f, INT64_MIN, INT64_MAX, &f->tab[base + n])) return false;
      n++;
    } while (lit(f, ','));
    if (!lit(f, ']')) return false;
  }
  if (k == 1)
    t->noff = n;
  else
    t->ncnt = n;
  return true;
}
static bool e_table(fr *f, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  f_table t = {NULL, -1, -1, true};
  uint32_t seen;
  if (!fobj(f, a_table, 7, &seen, m_table, &t) || t.noff != t.ncnt) return false;
  fpi_ir_table_add(f->p, t.name, t.noff, f->tab, f->tab + t.noff);
  return true;
}

/* buckets */
static bool e_bucket(fr *f, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  const char *name;
  if (!fstr_dup(f, &name)) return false;
  fpi_ir_bucket_add(f->p, name);
  return true;
}

/* buffers */
static const char *const a_buf[] = {"name", "kind", "category", "bucket", "host", "bytes", "offset", NULL};
typedef struct { const char *name; int kind, cat; int32_t bucket; bool host; int64_t bytes, offset; } f_buf;
static bool m_buf(fr *f, void *ctx, int k) {
  f_buf *b = ctx;
  switch (k) {
    case 0: return fstr_dup(f, &b->name);
    case 1: return fenum(f, n_kind, 2, &b->kind);
    case 2: return fenum(f, fpi_buf_cat_name, FP_NBUFCATS, &b->cat);
    case 3: return fi32(f, -1, &b->bucket);
    case 4: return fbool(f, &b->host);
    case 5: return fint(f, INT64_MIN, INT64_MAX, &b->bytes);
    default: return fint(f, INT64_MIN, INT64_MAX, &b->offset);
  }
}
static bool e_buf(fr *f, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  f_buf b = {.bucket = -1};
  uint32_t seen;
  if (!fobj(f, a_buf, 0x67, &seen, m_buf, &b)) return false;
  int k = fpi_ir_buf_add(f->p, b.name, (fp_buf_kind)b.kind, (fp_buf_cat)b.cat, b.bucket, b.bytes);
  f->p->bufs[k].host = b.host;
  f->p->bufs[k].offset = b.offset;
  return true;
}

/* lives */
static const char *const a_live[] = {"buffer", "first", "last", NULL};
static bool m_live(fr *f, void *ctx, int k) { return fi32(f, INT32_MIN, (int32_t *)ctx + k); }
static bool e_live(fr *f, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  int32_t v[3] = {0, 0, 0};
  uint32_t seen;
  if (!fobj(f, a_live, 7, &seen, m_live, v)) return false;
  fpi_ir_buf_live(f->p, v[0], v[1], v[2]);
  return true;
}

/* modules */
static const char *const a_mod[] = {"name", "flops_fwd", "flops_bwd", "activation_bytes", "recompute_saved_bytes", NULL};
typedef struct { const char *name; double ff, fb; int64_t act, saved; } f_mod;
static bool m_mod(fr *f, void *ctx, int k) {
  f_mod *m = ctx;
  switch (k) {
    case 0: return fstr_dup(f, &m->name);
    case 1: return fdbl(f, &m->ff);
    case 2: return fdbl(f, &m->fb);
    case 3: return fint(f, INT64_MIN, INT64_MAX, &m->act);
    default: return fint(f, INT64_MIN, INT64_MAX, &m->saved);
  }
}
static bool e_mod(fr *f, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  f_mod m;
  uint32_t seen;
  if (!fobj(f, a_mod, 15, &seen, m_mod, &m)) return false;
  int k = fpi_ir_module_add(f->p, m.name, m.ff, m.fb, m.act);
  if (seen >> 4 & 1) f->p->mods[k].recompute = true, f->p->mods[k].saved_bytes = m.saved;
  return true;
}

/* regions and views: {"buffer", "offset"[, "stride", "table_relative"]} */
static const char *const a_region[] = {"buffer", "offset", "stride", "table_relative", NULL};
static bool m_region(fr *f, void *ctx, int k) {
  fp_region *r = ctx;
  switch (k) {
    case 0: return fi32(f, -1, &r->buf);
    case 1: return fint(f, INT64_MIN, INT64_MAX, &r->off);
    case 2: return fint(f, INT64_MIN, INT64_MAX, &r->stride);
    default: return fbool(f, &r->tabrel);
  }
}
static bool fregion(fr *f, fp_region *r) {
  uint32_t seen;
  return fobj(f, a_region, 3, &seen, m_region, r);
}
static bool fview(fr *f, fp_view *v) {
  fp_region r = {v->buf, false, v->off, 0};
  uint32_t seen;
  if (!fobj(f, a_region, 3, &seen, m_region, &r) || (seen & ~3u)) return false;
  v->buf = r.buf;
  v->off = r.off;
  return true;
}

/* params */
static const char *const a_param[] = {"name",  "shape",  "module", "bucket", "main_dtype", "param_dtype", "grad_dtype",
                                      "requires_grad", "placement", "dim", "comm", "owner", "table", "chunk",
                                      "main",  "grad",   "weight", "ugrad",  "users", "opt", "scales", NULL};
static bool m_param(fr *f, void *ctx, int k) {
  fp_ir_param *q = ctx;
  int e;
  switch (k) {
    case 0: return fstr_dup(f, &q->name);
    case 1: {
      if (!lit(f, '[')) return false;
      q->ndim = 0;
      if (lit(f, ']')) return true;
      do {
        if (q->ndim == 8 || !fint(f, INT64_MIN, INT64_MAX, &q->shape[q->ndim])) return false;
        q->ndim++;
      } while (lit(f, ','));
      return lit(f, ']');
    }
    case 2: return fi32(f, -1, &q->module);
    case 3: return fi32(f, -1, &q->bucket);
    case 4: case 5: case 6:
      if (!fenum(f, n_dtype, FP_NDTYPES, &e)) return false;
      *(k == 4 ? &q->main_dtype : k == 5 ? &q->param_dtype : &q->grad_dtype) = (fp_dtype)e;
      return true;
    case 7: return fbool(f, &q->requires_grad);
    case 8: return fenum(f, fpi_ir_placement_name, FP_IR_NPLACEMENTS, &q->placement);
    case 9: return fi32(f, INT32_MIN, &q->dim);
    case 10: return fi32(f, -1, &q->comm);
    case 11: return fint(f, INT64_MIN, INT64_MAX, &q->owner);
    case 12: return fi32(f, -1, &q->tab);
    case 13: return fint(f, INT64_MIN, INT64_MAX, &q->chunk);
    case 14: return fview(f, &q->main);
    case 15: return fview(f, &q->grad);
    case 16: return fview(f, &q->weight);
    case 17: return fview(f, &q->ugrad);
    case 19: return fview(f, &q->opt);
    case 20: return fview(f, &q->scales);
    default: { /* users: module indices */
      if (!lit(f, '[')) return false;
      if (lit(f, ']')) return true;
      int64_t cap = 0;
      do {
        int32_t m;
        if (q->nusers == INT32_MAX || !fi32(f, INT32_MIN, &m)) return false;
        q->users = fpi_grow(f->p->arena, q->users, &cap, (int64_t)q->nusers + 1, sizeof *q->users);
        q->users[q->nusers++] = m;
      } while (lit(f, ','));
      return lit(f, ']');
    }
  }
}
static bool e_param(fr *f, void *ctx, int64_t i) {
  (void)ctx, (void)i;
  fp_ir_param q;
  memset(&q, 0, sizeof q);
  q.opt.buf = q.scales.buf = -1;
  uint32_t seen;
  if (!fobj(f, a_param, 0x3ffff, &seen, m_param, &q)) return false;
  *fpi_ir_param_add(f->p) = q;
  return true;
}

/* segments: kept until the ops come */
static const char *const a_seg[] = {"kind", "module", "micro", "first", "count", NULL};
typedef struct { int kind; int32_t module, micro; int64_t first, count; } f_seg;
typedef struct { f_seg *v; int64_t n, cap; int64_t next; } f_segs;
static bool m_seg(fr *f, void *ctx, int k) {
  f_seg *s = ctx;
  switch (k) {
    case 0: return fenum(f, fpi_seg_name, FP_NSEGKINDS, &s->kind);
    case 1: return fi32(f, -1, &s->module);
    case 2: return fi32(f, INT32_MIN, &s->micro);
    case 3: return fint(f, 0, INT32_MAX, &s->first);
    default: return fint(f, 0, INT32_MAX, &s->count);
  }
}
static bool e_seg(fr *f, void *ctx, int64_t i) {
  f_segs *ss = ctx;
  f_seg s;
  uint32_t seen;
  if (!fobj(f, a_seg, 31, &seen, m_seg, &s) || s.first != ss->next) return false;
  ss->v = fpi_grow(f->a, ss->v, &ss->cap, i + 1, sizeof *ss->v);
  ss->v[i] = s;
  ss->n = i + 1;
  ss->next = s.first + s.count;
  return true;
}

/* ops */
static const char *const a_op[] = {"op",     "stream", "dtype", "sdtype", "count", "dst",   "src",
                                   "aux",    "comm",   "table", "root",   "only",  "only_comm", "event",
                                   "module", "pass",   "alpha", "rows",   "dpitch", "spitch", "bucket",
                                   "group",  "uses",   "red",  NULL};
typedef struct {
  fp_op o;       /* fields as read (code, stream, dtype are ints below) */
  fp_op_shape sh; /* rows and pitches as read */
  int code, stream, dt, sdt, pass, red;
  int32_t *uses;
  int64_t nuses, capuses;
} f_op;
static bool m_op(fr *f, void *ctx, int k) {
  f_op *x = ctx;
  fp_op *o = &x->o;
  switch (k) {
    case 0: return fenum(f, n_op, FP_NOPS, &x->code);
    case 1: return fenum(f, fpi_stream_name, FP_NSTREAMS, &x->stream);
    case 2: return fenum(f, n_dtype, FP_NDTYPES, &x->dt);
    case 3: return fenum(f, n_dtype, FP_NDTYPES, &x->sdt);
    case 4: return fint(f, INT64_MIN, INT64_MAX, &o->count);
    case 5: return fregion(f, &o->dst);
    case 6: return fregion(f, &o->src);
    case 7: return fregion(f, &o->aux);
    case 8: return fi32(f, -1, &o->comm);
    case 9: return fi32(f, -1, &o->tab);
    case 10: return fi32(f, INT32_MIN, &o->root);
    case 11: return fi32(f, INT32_MIN, &o->only);
    case 12: return fi32(f, -1, &o->only_comm);
    case 13: return fi32(f, -1, &o->event);
    case 14: return fi32(f, -1, &o->module);
    case 15: return fenum(f, n_pass, 3, &x->pass);
    case 16: return fdbl(f, &o->alpha);
    case 17: return fint(f, INT64_MIN, INT64_MAX, &x->sh.rows);
    case 18: return fint(f, INT64_MIN, INT64_MAX, &x->sh.dpitch);
    case 19: return fint(f, INT64_MIN, INT64_MAX, &x->sh.spitch);
    case 20: return fi32(f, -1, &o->bucket);
    case 21: return fi32(f, INT32_MIN, &o->group);
    case 23: return fenum(f, n_red, FP_NREDOPS, &x->red);
    default: {
      if (!lit(f, '[')) return false;
      x->nuses = 0;
      if (lit(f, ']')) return true;
      do {
        int64_t v;
        if (x->nuses >= INT32_MAX - 1 || !fint(f, INT32_MIN, INT32_MAX, &v)) return false;
        x->uses = fpi_grow(f->a, x->uses, &x->capuses, x->nuses + 1, sizeof *x->uses);
        x->uses[x->nuses++] = (int32_t)v;
      } while (lit(f, ','));
      return lit(f, ']');
    }
  }
}
typedef struct { f_segs *segs; int64_t seg; f_op x; } f_ops;
static bool e_op(fr *f, void *ctx, int64_t i) {
  f_ops *os = ctx;
  fp_prog *p = f->p;
  /* segments that start here (empty ones too) open before the op */
  while (os->seg < os->segs->n && os->segs->v[os->seg].first == i) {
    const f_seg *s = &os->segs->v[os->seg++];
    fpi_ir_seg_begin(p, (fp_seg_kind)s->kind, s->module, s->micro);
  }
  if (os->seg == 0 || i >= os->segs->next) return false; /* not in a segment */
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
  x->nuses = -1;
  uint32_t seen;
  if (!fobj(f, a_op, 0x17, &seen, m_op, x)) return false;
  fp_op *op = fpi_ir_emit(p, (fp_opcode)x->code, (fp_stream)x->stream, (fp_dtype)x->dt, o->count);
  if (x->sdt >= 0) op->sdtype = (fp_dtype)x->sdt;
  op->pass = (fp_pass)x->pass;
  op->red = (fp_redop)x->red;
  if (x->nuses >= 0) {
    if (p->nuses > INT32_MAX - x->nuses) return false;
    fpi_ir_op_uses(p, op, x->uses, (int)x->nuses);
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
  return true;
}

/* hardware: {"name", then fp_hw_fields} */
static bool m_hw(fr *f, void *ctx, int k) {
  fp_hw *h = ctx;
  if (k == 0) return fstr_dup(f, &h->name);
  return fp_hw_fields[k - 1].integer ? fint(f, INT64_MIN, INT64_MAX, fpi_hw_int(h, k - 1))
                                     : fdbl(f, fpi_hw_dbl(h, k - 1));
}
static bool f_hw(fr *f) {
  const char *a_hw[FP_HW_NFIELDS + 2];
  a_hw[0] = "name";
  for (int k = 0; k < FP_HW_NFIELDS; k++) a_hw[k + 1] = fp_hw_fields[k].key;
  a_hw[FP_HW_NFIELDS + 1] = NULL;
  fp_hw h = {0};
  uint32_t seen;
  if (!fobj(f, a_hw, (1u << (FP_HW_NFIELDS + 1)) - 1, &seen, m_hw, &h)) return false;
  f->p->hw = h;
  return true;
}

/* "optimizer": {"type":..,"state_dtype":..} as the writer writes it */
static const char *const a_optim[] = {"type", "state_dtype", NULL};
static bool m_optim(fr *f, void *ctx, int k) {
  int *v = ctx, e;
  if (k == 0 ? !fenum(f, fpi_optim_name, FP_NOPTIMS, &e) : !fenum(f, n_dtype, FP_NDTYPES, &e)) return false;
  v[k] = e;
  return true;
}
static bool f_optim(fr *f) {
  int v[2] = {0, 0};
  uint32_t seen;
  if (!fobj(f, a_optim, 3, &seen, m_optim, v) || v[0] == FP_OPTIM_NONE) return false;
  f->p->optim = (fp_optim)v[0];
  f->p->optim_dtype = (fp_dtype)v[1];
  return true;
}

/* "key": at the cursor, exactly this key */
static bool fkey_is(fr *f, const char *key) {
  const char *s;
  size_t n;
  return fstr(f, &s, &n) && n == strlen(key) && !memcmp(s, key, n) && lit(f, ':');
}

/* memory_timeline, members in the writer's order */
static bool f_memtl(fr *f) {
  fp_memtl *t = fpi_alloc(f->a, sizeof *t);
  const char *s;
  size_t n;
  bool modeled;
  if (!lit(f, '{') || !fkey_is(f, "modeled") || !fbool(f, &modeled) || !modeled || !lit(f, ',') ||
      !fkey_is(f, "time_unit") || !fstr(f, &s, &n) || n != 2 || memcmp(s, "us", 2) || !lit(f, ',') ||
      !fkey_is(f, "categories") || !lit(f, '['))
    return false;
  for (int c = 0; c < FP_MEMTL_NCATS; c++) {
    const char *want = fpi_memtl_cat_name(c);
    if ((c && !lit(f, ',')) || !fstr(f, &s, &n) || n != strlen(want) || memcmp(s, want, n)) return false;
  }
  if (!lit(f, ']') || !lit(f, ',') || !fkey_is(f, "peak_bytes") || !fint(f, 0, INT64_MAX, &t->peak_bytes) ||
      !lit(f, ',') || !fkey_is(f, "lower_bound_bytes") || !fint(f, 0, INT64_MAX, &t->lower_bound_bytes) ||
      !lit(f, ',') || !fkey_is(f, "points") || !lit(f, '['))
    return false;
  int64_t cap = 0;
  if (!lit(f, ']')) {
    do {
      if (t->npts >= INT32_MAX - 1) return false;
      t->pts = fpi_grow(f->a, t->pts, &cap, (int64_t)t->npts + 1, sizeof *t->pts);
      fp_memtl_point *q = &t->pts[t->npts++];
      if (!lit(f, '[') || !fdbl(f, &q->t_us)) return false;
      for (int c = 0; c < FP_MEMTL_NCATS; c++)
        if (!lit(f, ',') || !fint(f, 0, INT64_MAX, &q->bytes[c])) return false;
      if (!lit(f, ']')) return false;
    } while (lit(f, ','));
    if (!lit(f, ']')) return false;
  }
  if (!lit(f, '}') || fpi_memtl_check(t)) return false;
  f->p->memtl = t;
  return true;
}

/* figures, members in the writer's order */
static bool f_figures(fr *f) {
  fp_figures *g = fpi_alloc(f->a, sizeof *g);
  int64_t *ints[7] = {&g->comm_bytes_per_rank, &g->persistent_bytes, &g->peak_bytes, &g->lower_bound_bytes,
                      &g->activation_peak_bytes, &g->prefetch_forward, &g->prefetch_backward};
  double *dbls[3] = {&g->modeled_step_ms, &g->modeled_compute_ms, &g->modeled_exposed_comm_ms};
  if (!lit(f, '{')) return false;
  for (int k = 0; k < 10; k++) {
    if ((k && !lit(f, ',')) || !fkey_is(f, figure_keys[k])) return false;
    if (k < 7 ? !fint(f, 0, k < 5 ? INT64_MAX : INT32_MAX, ints[k]) : !fdbl(f, dbls[k - 7]) || *dbls[k - 7] < 0)
      return false;
  }
  if (!lit(f, '}')) return false;
  f->p->figures = g;
  return true;
}

static const char *const a_root[] = {"format", "planner_version", "hash", "model", "strategy", "world_size",
                                     "ranks_per_node", "grad_accumulation", "arena_bytes", "host_bytes", "events",
                                     "memory_budget_bytes", "hardware", "optimizer", "comms", "tables", "buckets", "buffers",
                                     "lives", "modules", "params", "segments", "ops", "memory_timeline", "figures", NULL};
/* the members a plan must have: all but model, strategy, memory_budget_bytes,
 * hardware, optimizer, memory_timeline, figures */
#define ROOT_REQUIRED \
  (((1u << 25) - 1) & ~(1u << 3 | 1u << 4 | 1u << 11 | 1u << 12 | 1u << 13 | 1u << 23 | 1u << 24))

/* the program, or NULL: not taken */
static fp_prog *plan_read_fast(fp_arena *a, const fp_src *src) {
  if (!src->text || src->len > (size_t)INT32_MAX - 1) return NULL;
  if (fpi_utf8_invalid(src->text, src->len) < src->len) return NULL; /* the slow reader says where */
  fr f = {.s = src->text, .end = src->text + src->len, .a = a};
  fp_prog *p = f.p = fpi_prog_new(a);
  f_segs segs = {0};
  f_ops ops = {.segs = &segs};
  const char *hash = NULL;
  size_t hashlen = 0;
  uint32_t seen = 0;
  int last = -1;
  if (!lit(&f, '{')) return NULL;
  do {
    const char *s;
    size_t n;
    int k = -1;
    if (!fstr(&f, &s, &n) || !lit(&f, ':')) return NULL;
    for (int i = last + 1; a_root[i] && k < 0; i++) /* in the writer's order */
      if (!strncmp(a_root[i], s, n) && !a_root[i][n]) k = i;
    if (k < 0) return NULL;
    last = k;
    seen |= 1u << k;
    int64_t v;
    bool ok;
    switch (k) {
      case 0: ok = fstr(&f, &s, &n) && n == strlen(PLAN_FORMAT) && !memcmp(s, PLAN_FORMAT, n); break;
      case 1: ok = fstr(&f, &s, &n) && n == strlen(FP_VERSION) && !memcmp(s, FP_VERSION, n); break;
      case 2: ok = fstr(&f, &hash, &hashlen); break;
      case 3: ok = fstr_dup(&f, &p->model); break;
      case 4: ok = fstr_dup(&f, &p->strategy); break;
      case 5: ok = fint(&f, INT64_MIN, INT64_MAX, &p->world_size); break;
      case 6: ok = fint(&f, INT64_MIN, INT64_MAX, &p->ranks_per_node); break;
      case 7: ok = fint(&f, INT64_MIN, INT64_MAX, &p->grad_accumulation); break;
      case 8: ok = fint(&f, INT64_MIN, INT64_MAX, &p->arena_bytes); break;
      case 9: ok = fint(&f, INT64_MIN, INT64_MAX, &p->host_bytes); break;
      case 10: ok = fint(&f, 0, INT32_MAX, &v) && (p->nevents = (int32_t)v, true); break;
      case 11: ok = fint(&f, 1, INT64_MAX, &p->memory_budget_bytes); break;
      case 12: ok = f_hw(&f); break;
      case 13: ok = f_optim(&f); break;
      case 14: ok = farr(&f, e_comm, NULL); break;
      case 15: ok = farr(&f, e_table, NULL); break;
      case 16: ok = farr(&f, e_bucket, NULL); break;
      case 17: ok = farr(&f, e_buf, NULL); break;
      case 18: ok = farr(&f, e_live, NULL); break;
      case 19: ok = farr(&f, e_mod, NULL); break;
      case 20: ok = farr(&f, e_param, NULL); break;
      case 21: ok = farr(&f, e_seg, &segs); break;
      case 22: ok = farr(&f, e_op, &ops); break;
      case 23: ok = f_memtl(&f); break;
      default: ok = f_figures(&f); break;
    }
    if (!ok) return NULL;
  } while (lit(&f, ','));
  if (!lit(&f, '}')) return NULL;
  ws(&f);
  if (f.s != f.end || (seen & ROOT_REQUIRED) != ROOT_REQUIRED) return NULL;
  /* every segment opened (those after the last op too), covering the ops */
  if (p->nops != segs.next) return NULL;
  while (ops.seg < segs.n) {
    const f_seg *s = &segs.v[ops.seg++];
    fpi_ir_seg_begin(p, (fp_seg_kind)s->kind, s->module, s->micro);
  }
  char want[40];
  snprintf(want, sizeof want, "fnv1a64:%016" PRIx64, fpi_prog_hash(p));
  if (fp_plan_check_hash && (hashlen != strlen(want) || memcmp(hash, want, hashlen))) return NULL;
  return p;
}

fp_prog *fpi_plan_read_flags(fp_arena *a, fp_diag *d, const fp_src *src, unsigned flags) {
  fp_prog *p = fp_plan_fast_read ? plan_read_fast(a, src) : NULL;
  if (!p) return plan_read_slow(a, d, src, flags);
  fp_plan_fast_reads++;
  jloc l = {d, src, a};
  return fpi_ir_verify_with(p, report_json, &l, flags) ? p : NULL;
}

fp_prog *fpi_plan_read(fp_arena *a, fp_diag *d, const fp_src *src) { return fpi_plan_read_flags(a, d, src, 0); }

