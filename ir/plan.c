/* plan.c - plan.json: the compiled plan the executor loads.
 *
 * A plan is the program of ir.h serialized as JSON (schemas/plan.schema.json)
 * with a format tag, the planner's version and a content hash: FNV-1a 64 of
 * the program's canonical .fpir text, so two plans are the same program
 * exactly when their hashes agree, and ranks can compare plans by hash
 * before the first collective.
 *
 * The writer builds each value with json-c and frames the file itself, one
 * table row per line, so a plan diffs well; keys come in a fixed order,
 * integers as integers, doubles in their shortest round-trip form.
 *
 * The reader trusts nothing: the JSON is parsed strictly (fp_json_parse:
 * duplicate keys rejected), every member is type- and range-checked with an
 * error located at its JSON pointer, then the hash is recomputed and
 * compared and the program verified (verifier messages located at /ops/N,
 * /buffers/N, ...). On any failure it returns NULL; whatever it allocated is
 * in the caller's arena or freed. */
#include "irpriv.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../planner/json.h"

#define PLAN_FORMAT "flexplan.plan.v1"
#define JFLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

uint64_t fp_prog_hash(const fp_prog *p) {
  size_t n;
  char *s = fp_ir_print_str(p, &n);
  uint64_t h = fp_fnv1a(FP_FNV_INIT, s, n);
  free(s);
  return h;
}

/* ---- writer ----------------------------------------------------------------- */
static const char *kind_names[] = {"persistent", "transient", NULL};
static const char *pass_names[] = {"fwd", "bwd", NULL};

static json_object *jstr(const char *s) { return json_object_new_string(s ? s : ""); }
static json_object *jint(int64_t v) { return json_object_new_int64(v); }

/* a double in its shortest round-trip text; false for inf/nan (not JSON) */
static bool jdbl(double d, json_object **out) {
  if (!isfinite(d)) return false;
  char t[40];
  if (d == 0 && signbit(d))
    snprintf(t, sizeof t, "-0.0"); /* "-0" would read back as the integer 0 */
  else
    fp_fmt_double(t, d);
  *out = json_object_new_double_s(d, t);
  return true;
}

static void add(json_object *o, const char *k, json_object *v) { json_object_object_add(o, k, v); }

static json_object *jregion(const fp_region *r) {
  json_object *o = json_object_new_object();
  add(o, "buffer", jint(r->buf));
  add(o, "offset", jint(r->off));
  if (r->stride) add(o, "stride", jint(r->stride));
  if (r->tabrel) add(o, "table_relative", json_object_new_boolean(1));
  return o;
}

static json_object *jview(const fp_view *v) {
  json_object *o = json_object_new_object();
  add(o, "buffer", jint(v->buf));
  add(o, "offset", jint(v->off));
  return o;
}

static const char *dname(int t) { return t >= 0 && t < FP_NDTYPES ? fp_dtype_name((fp_dtype)t) : "?"; }

static json_object *jcomm(const fp_prog *p, int32_t i, bool *ok) {
  (void)ok;
  const fp_ir_comm *c = &p->comms[i];
  json_object *o = json_object_new_object();
  add(o, "name", jstr(c->name));
  add(o, "size", jint(c->size));
  add(o, "stride", jint(c->stride));
  return o;
}

static json_object *jtable(const fp_prog *p, int32_t i, bool *ok) {
  (void)ok;
  const fp_ir_table *t = &p->tabs[i];
  json_object *o = json_object_new_object(), *off = json_object_new_array(), *cnt = json_object_new_array();
  for (int64_t j = 0; j < t->n; j++) {
    json_object_array_add(off, jint(t->off[j]));
    json_object_array_add(cnt, jint(t->cnt[j]));
  }
  add(o, "name", jstr(t->name));
  add(o, "off", off);
  add(o, "cnt", cnt);
  return o;
}

static json_object *jbucket(const fp_prog *p, int32_t i, bool *ok) {
  (void)ok;
  return jstr(p->buckets[i]);
}

static json_object *jbuf(const fp_prog *p, int32_t i, bool *ok) {
  const fp_ir_buf *b = &p->bufs[i];
  json_object *o = json_object_new_object();
  add(o, "name", jstr(b->name));
  if ((unsigned)b->kind > FP_BUF_TRANSIENT || (unsigned)b->cat >= FP_NBUFCATS) *ok = false;
  add(o, "kind", jstr((unsigned)b->kind <= FP_BUF_TRANSIENT ? kind_names[b->kind] : "?"));
  add(o, "category", jstr(fp_buf_cat_name(b->cat)));
  add(o, "bucket", jint(b->bucket));
  add(o, "host", json_object_new_boolean(b->host));
  add(o, "bytes", jint(b->bytes));
  add(o, "offset", jint(b->offset));
  return o;
}

static json_object *jmodule(const fp_prog *p, int32_t i, bool *ok) {
  const fp_ir_module *m = &p->mods[i];
  json_object *o = json_object_new_object(), *f;
  add(o, "name", jstr(m->name));
  if (jdbl(m->flops_fwd, &f)) add(o, "flops_fwd", f); else *ok = false;
  if (jdbl(m->flops_bwd, &f)) add(o, "flops_bwd", f); else *ok = false;
  add(o, "activation_bytes", jint(m->activation_bytes));
  return o;
}

static json_object *jparam(const fp_prog *p, int32_t i, bool *ok) {
  const fp_ir_param *q = &p->params[i];
  json_object *o = json_object_new_object(), *shape = json_object_new_array();
  if (q->ndim < 0 || q->ndim > 8) *ok = false;
  for (int k = 0; k < q->ndim && k < 8; k++) json_object_array_add(shape, jint(q->shape[k]));
  if (q->placement < 0 || q->placement >= FP_IR_NPLACEMENTS) *ok = false;
  add(o, "name", jstr(q->name));
  add(o, "shape", shape);
  add(o, "module", jint(q->module));
  add(o, "bucket", jint(q->bucket));
  add(o, "main_dtype", jstr(dname(q->main_dtype)));
  add(o, "param_dtype", jstr(dname(q->param_dtype)));
  add(o, "grad_dtype", jstr(dname(q->grad_dtype)));
  add(o, "requires_grad", json_object_new_boolean(q->requires_grad));
  add(o, "placement", jstr(fp_ir_placement_name(q->placement)));
  add(o, "dim", jint(q->dim));
  add(o, "comm", jint(q->comm));
  add(o, "owner", jint(q->owner));
  add(o, "table", jint(q->tab));
  add(o, "chunk", jint(q->chunk));
  add(o, "main", jview(&q->main));
  add(o, "grad", jview(&q->grad));
  add(o, "weight", jview(&q->weight));
  add(o, "ugrad", jview(&q->ugrad));
  return o;
}

static json_object *jseg(const fp_prog *p, int32_t i, bool *ok) {
  const fp_seg *s = &p->segs[i];
  json_object *o = json_object_new_object();
  if ((unsigned)s->kind >= FP_NSEGKINDS) *ok = false;
  add(o, "kind", jstr(fp_seg_name(s->kind)));
  add(o, "module", jint(s->module));
  add(o, "micro", jint(s->micro));
  add(o, "first", jint(s->first));
  add(o, "count", jint(s->nops));
  return o;
}

static json_object *jlive(const fp_prog *p, int32_t i, bool *ok) {
  (void)ok;
  const fp_ir_live *l = &p->lives[i];
  json_object *o = json_object_new_object();
  add(o, "buffer", jint(l->buf));
  add(o, "first", jint(l->first));
  add(o, "last", jint(l->last));
  return o;
}

static bool reg_empty(const fp_region *r) { return r->buf == -1 && !r->tabrel && !r->off && !r->stride; }

static json_object *jop(const fp_prog *p, int32_t i, bool *ok) {
  const fp_op *op = &p->ops[i];
  json_object *o = json_object_new_object(), *f;
  if ((unsigned)op->code >= FP_NOPS || (unsigned)op->stream >= FP_NSTREAMS || !(op->dtype >= 0 && op->dtype < FP_NDTYPES) ||
      !(op->sdtype >= 0 && op->sdtype < FP_NDTYPES) || (unsigned)op->pass > FP_PASS_BWD) {
    *ok = false;
    return o;
  }
  add(o, "op", jstr(fp_op_name(op->code)));
  add(o, "stream", jstr(fp_stream_name(op->stream)));
  add(o, "dtype", jstr(fp_dtype_name(op->dtype)));
  if (op->sdtype != op->dtype) add(o, "sdtype", jstr(fp_dtype_name(op->sdtype)));
  add(o, "count", jint(op->count));
  if (!reg_empty(&op->dst)) add(o, "dst", jregion(&op->dst));
  if (!reg_empty(&op->src)) add(o, "src", jregion(&op->src));
  if (!reg_empty(&op->aux)) add(o, "aux", jregion(&op->aux));
  if (op->comm != -1) add(o, "comm", jint(op->comm));
  if (op->tab != -1) add(o, "table", jint(op->tab));
  if (op->root != -1) add(o, "root", jint(op->root));
  if (op->only != -1) add(o, "only", jint(op->only));
  if (op->only_comm != -1) add(o, "only_comm", jint(op->only_comm));
  if (op->event != -1) add(o, "event", jint(op->event));
  if (op->module != -1) add(o, "module", jint(op->module));
  if (op->pass != FP_PASS_FWD) add(o, "pass", jstr(pass_names[op->pass]));
  if (op->alpha != 0 || signbit(op->alpha)) {
    if (jdbl(op->alpha, &f)) add(o, "alpha", f); else *ok = false;
  }
  if (op->rows != 1) add(o, "rows", jint(op->rows));
  if (op->dpitch) add(o, "dpitch", jint(op->dpitch));
  if (op->spitch) add(o, "spitch", jint(op->spitch));
  if (op->bucket != -1) add(o, "bucket", jint(op->bucket));
  if (op->group != -1) add(o, "group", jint(op->group));
  if (op->nuses > 0) {
    if (op->uses < 0 || op->uses > p->nuses - op->nuses) {
      *ok = false;
    } else {
      json_object *u = json_object_new_array();
      for (int32_t k = 0; k < op->nuses; k++) json_object_array_add(u, jint(p->uses[op->uses + k]));
      add(o, "uses", u);
    }
  }
  return o;
}

/* "  \"key\": [\n    row,\n    row\n  ]" */
static void write_array(FILE *f, const char *key, const fp_prog *p, int32_t n, bool *ok,
                        json_object *(*row)(const fp_prog *, int32_t, bool *)) {
  fprintf(f, ",\n  \"%s\": [", key);
  for (int32_t i = 0; i < n; i++) {
    json_object *o = row(p, i, ok);
    fprintf(f, "%s\n    %s", i ? "," : "", json_object_to_json_string_ext(o, JFLAGS));
    json_object_put(o);
  }
  fprintf(f, n ? "\n  ]" : "]");
}

static void write_member(FILE *f, const char *key, json_object *v, bool first) {
  fprintf(f, "%s\n  \"%s\": %s", first ? "" : ",", key, json_object_to_json_string_ext(v, JFLAGS));
  json_object_put(v);
}

bool fp_plan_write(const fp_prog *p, FILE *f) {
  bool ok = true;
  char hash[40];
  snprintf(hash, sizeof hash, "fnv1a64:%016" PRIx64, fp_prog_hash(p));
  fputc('{', f);
  write_member(f, "format", jstr(PLAN_FORMAT), true);
  write_member(f, "planner_version", jstr(FP_VERSION), false);
  write_member(f, "hash", jstr(hash), false);
  if (p->model) write_member(f, "model", jstr(p->model), false);
  if (p->strategy) write_member(f, "strategy", jstr(p->strategy), false);
  write_member(f, "world_size", jint(p->world_size), false);
  write_member(f, "ranks_per_node", jint(p->ranks_per_node), false);
  write_member(f, "grad_accumulation", jint(p->grad_accumulation), false);
  write_member(f, "arena_bytes", jint(p->arena_bytes), false);
  write_member(f, "host_bytes", jint(p->host_bytes), false);
  write_member(f, "events", jint(p->nevents), false);
  write_array(f, "comms", p, p->ncomms, &ok, jcomm);
  write_array(f, "tables", p, p->ntabs, &ok, jtable);
  write_array(f, "buckets", p, p->nbuckets, &ok, jbucket);
  write_array(f, "buffers", p, p->nbufs, &ok, jbuf);
  write_array(f, "lives", p, p->nlives, &ok, jlive);
  write_array(f, "modules", p, p->nmods, &ok, jmodule);
  write_array(f, "params", p, p->nparams, &ok, jparam);
  write_array(f, "segments", p, p->nsegs, &ok, jseg);
  write_array(f, "ops", p, p->nops, &ok, jop);
  fputs("\n}\n", f);
  return ok && !ferror(f);
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
  const char *ptr = key ? fp_ptr_key(r->a, r->ptr, key) : r->ptr;
  fp_diag_json(r->d, r->src, ptr, "%s", msg);
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

static const char *describe(rd *r, json_object *v) {
  switch (json_object_get_type(v)) {
    case json_type_null: return "null";
    case json_type_boolean: return "a boolean";
    case json_type_object: return "an object";
    case json_type_array: return "an array";
    case json_type_string: return "a string";
    case json_type_int:
    case json_type_double: return fp_sprintf(r->a, "%.40s", json_object_to_json_string_ext(v, JFLAGS));
  }
  return "a value";
}

static json_object *member(json_object *o, const char *key) {
  json_object *v = NULL;
  return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/* every key of o must be in allowed */
static bool keys(rd *r, json_object *o, const char *const *allowed) {
  json_object_object_foreach(o, k, val) {
    (void)val;
    bool ok = false;
    for (int j = 0; allowed[j] && !ok; j++) ok = !strcmp(allowed[j], k);
    if (!ok) return rerr(r, k, "unknown member '%s'", k);
  }
  return true;
}

static bool is_obj(rd *r, json_object *v, const char *key) {
  if (v && json_object_is_type(v, json_type_object)) return true;
  return rerr(r, key, "expected an object, got %s", describe(r, v));
}

static bool rd_int_v(rd *r, json_object *v, const char *key, int64_t min, int64_t max, int64_t *out) {
  if (!v || !json_object_is_type(v, json_type_int))
    return rerr(r, key, "expected an integer, got %s", v ? describe(r, v) : "nothing");
  int64_t x = json_object_get_int64(v);
  if (x == INT64_MAX && json_object_get_uint64(v) != (uint64_t)INT64_MAX) return rerr(r, key, "integer out of the int64 range");
  if (x < min || x > max) return rerr(r, key, "%" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", x, min, max);
  *out = x;
  return true;
}

/* member key of o: absent and !req -> *out untouched */
static bool rd_int(rd *r, json_object *o, const char *key, bool req, int64_t min, int64_t max, int64_t *out) {
  json_object *v = member(o, key);
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  return rd_int_v(r, v, key, min, max, out);
}

static bool rd_i32(rd *r, json_object *o, const char *key, bool req, int32_t min, int32_t *out) {
  int64_t x = *out;
  if (!rd_int(r, o, key, req, min, INT32_MAX, &x)) return false;
  *out = (int32_t)x;
  return true;
}

static bool rd_dbl(rd *r, json_object *o, const char *key, bool req, double *out) {
  json_object *v = member(o, key);
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
    return rerr(r, key, "expected a number, got %s", describe(r, v));
  double x = json_object_get_double(v);
  if (!isfinite(x)) return rerr(r, key, "number out of range");
  *out = x;
  return true;
}

static bool rd_bool(rd *r, json_object *o, const char *key, bool req, bool *out) {
  json_object *v = member(o, key);
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  if (!json_object_is_type(v, json_type_boolean)) return rerr(r, key, "expected true or false, got %s", describe(r, v));
  *out = json_object_get_boolean(v);
  return true;
}

static bool rd_str_v(rd *r, json_object *v, const char *key, const char **out) {
  if (!v || !json_object_is_type(v, json_type_string)) return rerr(r, key, "expected a string, got %s", v ? describe(r, v) : "nothing");
  const char *s = json_object_get_string(v);
  if (strlen(s) != (size_t)json_object_get_string_len(v)) return rerr(r, key, "NUL character in a string");
  *out = fp_strdup(r->a, s);
  return true;
}

static bool rd_str(rd *r, json_object *o, const char *key, bool req, const char **out) {
  json_object *v = member(o, key);
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  return rd_str_v(r, v, key, out);
}

/* a string that names one of n things (name(i)) */
static bool rd_enum(rd *r, json_object *o, const char *key, bool req, const char *(*name)(int), int n, int *out) {
  json_object *v = member(o, key);
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  if (!json_object_is_type(v, json_type_string)) return rerr(r, key, "expected a string, got %s", describe(r, v));
  const char *s = json_object_get_string(v);
  for (int i = 0; i < n; i++)
    if (!strcmp(name(i), s)) {
      *out = i;
      return true;
    }
  return rerr(r, key, "unknown %s '%.60s'", key, s);
}

static const char *n_dtype(int i) { return fp_dtype_name((fp_dtype)i); }
static const char *n_kind(int i) { return kind_names[i]; }
static const char *n_pass(int i) { return pass_names[i]; }
static const char *n_op(int i) { return fp_op_name((fp_opcode)i); }

/* an array member; n its length */
static bool rd_arr(rd *r, json_object *o, const char *key, bool req, json_object **out, size_t *n) {
  json_object *v = member(o, key);
  *out = NULL;
  *n = 0;
  if (!v) return req ? rerr(r, NULL, "missing required member '%s'", key) : true;
  if (!json_object_is_type(v, json_type_array)) return rerr(r, key, "expected an array, got %s", describe(r, v));
  *out = v;
  *n = json_object_array_length(v);
  if (*n > INT32_MAX - 1) return rerr(r, key, "too many entries");
  return true;
}

/* set r->ptr to "/<arr>/<i>" and check the element is an object */
static bool elem(rd *r, json_object *arr, const char *name, size_t i, json_object **o) {
  snprintf(r->ptr, sizeof r->ptr, "/%s", name);
  char k[24];
  snprintf(k, sizeof k, "%zu", i);
  *o = json_object_array_get_idx(arr, i);
  if (!is_obj(r, *o, k)) return false;
  snprintf(r->ptr, sizeof r->ptr, "/%s/%zu", name, i);
  return true;
}

static bool rregion(rd *r, json_object *o, const char *key, fp_region *out) {
  json_object *v = member(o, key);
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

static bool rview(rd *r, json_object *o, const char *key, fp_view *out) {
  json_object *v = member(o, key);
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

static bool read_comms(rd *r, json_object *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  json_object *arr, *o;
  size_t n;
  if (!rd_arr(r, root, "comms", true, &arr, &n)) return false;
  static const char *const allowed[] = {"name", "size", "stride", NULL};
  for (size_t i = 0; i < n; i++) {
    const char *name;
    int64_t size, stride;
    if (!elem(r, arr, "comms", i, &o) || !keys(r, o, allowed) || !rd_str(r, o, "name", true, &name) ||
        !rd_int(r, o, "size", true, INT64_MIN, INT64_MAX, &size) || !rd_int(r, o, "stride", true, INT64_MIN, INT64_MAX, &stride))
      return false;
    fp_ir_comm_add(p, name, size, stride);
  }
  return true;
}

static bool read_tables(rd *r, json_object *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  json_object *arr, *o, *off, *cnt;
  size_t n, noff, ncnt;
  if (!rd_arr(r, root, "tables", true, &arr, &n)) return false;
  static const char *const allowed[] = {"name", "off", "cnt", NULL};
  for (size_t i = 0; i < n; i++) {
    const char *name;
    if (!elem(r, arr, "tables", i, &o) || !keys(r, o, allowed) || !rd_str(r, o, "name", true, &name) ||
        !rd_arr(r, o, "off", true, &off, &noff) || !rd_arr(r, o, "cnt", true, &cnt, &ncnt))
      return false;
    if (noff != ncnt) return rerr(r, "cnt", "has %zu entries but off has %zu", ncnt, noff);
    int t = fp_ir_table_add(p, name, (int64_t)noff, NULL, NULL);
    char save[sizeof r->ptr];
    memcpy(save, r->ptr, sizeof save);
    for (int w = 0; w < 2; w++) {
      ptr_join(r, save, w ? "cnt" : "off");
      for (size_t j = 0; j < noff; j++) {
        char k[24];
        snprintf(k, sizeof k, "%zu", j);
        int64_t *dst = w ? &p->tabs[t].cnt[j] : &p->tabs[t].off[j];
        if (!rd_int_v(r, json_object_array_get_idx(w ? cnt : off, j), k, INT64_MIN, INT64_MAX, dst)) return false;
      }
    }
    memcpy(r->ptr, save, sizeof save);
  }
  return true;
}

static bool read_buckets(rd *r, json_object *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  json_object *arr;
  size_t n;
  if (!rd_arr(r, root, "buckets", true, &arr, &n)) return false;
  snprintf(r->ptr, sizeof r->ptr, "/buckets");
  for (size_t i = 0; i < n; i++) {
    char k[24];
    const char *name;
    snprintf(k, sizeof k, "%zu", i);
    if (!rd_str_v(r, json_object_array_get_idx(arr, i), k, &name)) return false;
    fp_ir_bucket_add(p, name);
  }
  return true;
}

static bool read_bufs(rd *r, json_object *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  json_object *arr, *o;
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
        !rd_enum(r, o, "kind", true, n_kind, 2, &kind) || !rd_enum(r, o, "category", true, fp_buf_cat_name, FP_NBUFCATS, &cat) ||
        !rd_i32(r, o, "bucket", false, -1, &bucket) || !rd_bool(r, o, "host", false, &host) ||
        !rd_int(r, o, "bytes", true, INT64_MIN, INT64_MAX, &bytes) || !rd_int(r, o, "offset", true, INT64_MIN, INT64_MAX, &offset))
      return false;
    int b = fp_ir_buf_add(p, name, (fp_buf_kind)kind, (fp_buf_cat)cat, bucket, bytes);
    p->bufs[b].host = host;
    p->bufs[b].offset = offset;
  }
  return true;
}

static bool read_lives(rd *r, json_object *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  json_object *arr, *o;
  size_t n;
  if (!rd_arr(r, root, "lives", true, &arr, &n)) return false;
  static const char *const allowed[] = {"buffer", "first", "last", NULL};
  for (size_t i = 0; i < n; i++) {
    int32_t buf = 0, first = 0, last = 0;
    if (!elem(r, arr, "lives", i, &o) || !keys(r, o, allowed) || !rd_i32(r, o, "buffer", true, INT32_MIN, &buf) ||
        !rd_i32(r, o, "first", true, INT32_MIN, &first) || !rd_i32(r, o, "last", true, INT32_MIN, &last))
      return false;
    fp_ir_buf_live(p, buf, first, last);
  }
  return true;
}

static bool read_mods(rd *r, json_object *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  json_object *arr, *o;
  size_t n;
  if (!rd_arr(r, root, "modules", true, &arr, &n)) return false;
  static const char *const allowed[] = {"name", "flops_fwd", "flops_bwd", "activation_bytes", NULL};
  for (size_t i = 0; i < n; i++) {
    const char *name;
    double ff, fb;
    int64_t act;
    if (!elem(r, arr, "modules", i, &o) || !keys(r, o, allowed) || !rd_str(r, o, "name", true, &name) ||
        !rd_dbl(r, o, "flops_fwd", true, &ff) || !rd_dbl(r, o, "flops_bwd", true, &fb) ||
        !rd_int(r, o, "activation_bytes", true, INT64_MIN, INT64_MAX, &act))
      return false;
    fp_ir_module_add(p, name, ff, fb, act);
  }
  return true;
}

static bool read_params(rd *r, json_object *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  json_object *arr, *o, *shape;
  size_t n, nd;
  if (!rd_arr(r, root, "params", true, &arr, &n)) return false;
  static const char *const allowed[] = {"name",  "shape",  "module", "bucket", "main_dtype", "param_dtype", "grad_dtype",
                                        "requires_grad", "placement", "dim", "comm", "owner", "table", "chunk",
                                        "main",  "grad",   "weight", "ugrad",  NULL};
  for (size_t i = 0; i < n; i++) {
    fp_ir_param q;
    memset(&q, 0, sizeof q);
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
      if (!rd_int_v(r, json_object_array_get_idx(shape, k), key, INT64_MIN, INT64_MAX, &q.shape[k])) return false;
    }
    memcpy(r->ptr, save, sizeof save);
    if (!rd_i32(r, o, "module", true, -1, &q.module) || !rd_i32(r, o, "bucket", true, -1, &q.bucket) ||
        !rd_enum(r, o, "main_dtype", true, n_dtype, FP_NDTYPES, &md) || !rd_enum(r, o, "param_dtype", true, n_dtype, FP_NDTYPES, &pd) ||
        !rd_enum(r, o, "grad_dtype", true, n_dtype, FP_NDTYPES, &gd) || !rd_bool(r, o, "requires_grad", true, &q.requires_grad) ||
        !rd_enum(r, o, "placement", true, fp_ir_placement_name, FP_IR_NPLACEMENTS, &pl) ||
        !rd_i32(r, o, "dim", true, INT32_MIN, &q.dim) || !rd_i32(r, o, "comm", true, -1, &q.comm) ||
        !rd_int(r, o, "owner", true, INT64_MIN, INT64_MAX, &q.owner) || !rd_i32(r, o, "table", true, -1, &q.tab) ||
        !rd_int(r, o, "chunk", true, INT64_MIN, INT64_MAX, &q.chunk) || !rview(r, o, "main", &q.main) ||
        !rview(r, o, "grad", &q.grad) || !rview(r, o, "weight", &q.weight) || !rview(r, o, "ugrad", &q.ugrad))
      return false;
    q.main_dtype = (fp_dtype)md;
    q.param_dtype = (fp_dtype)pd;
    q.grad_dtype = (fp_dtype)gd;
    q.placement = pl;
    *fp_ir_param_add(p) = q;
  }
  return true;
}

static bool read_op(rd *r, json_object *o, fp_prog *p) {
  static const char *const allowed[] = {"op",     "stream", "dtype", "sdtype", "count", "dst",   "src",
                                        "aux",    "comm",   "table", "root",   "only",  "only_comm", "event",
                                        "module", "pass",   "alpha", "rows",   "dpitch", "spitch", "bucket",
                                        "group",  "uses",   NULL};
  int code, stream, dt, sdt = -1, pass = FP_PASS_FWD;
  int64_t count;
  if (!keys(r, o, allowed) || !rd_enum(r, o, "op", true, n_op, FP_NOPS, &code) ||
      !rd_enum(r, o, "stream", true, fp_stream_name, FP_NSTREAMS, &stream) ||
      !rd_enum(r, o, "dtype", true, n_dtype, FP_NDTYPES, &dt) || !rd_enum(r, o, "sdtype", false, n_dtype, FP_NDTYPES, &sdt) ||
      !rd_int(r, o, "count", true, INT64_MIN, INT64_MAX, &count) || !rd_enum(r, o, "pass", false, n_pass, 2, &pass))
    return false;
  fp_op *op = fp_ir_emit(p, (fp_opcode)code, (fp_stream)stream, (fp_dtype)dt, count);
  if (sdt >= 0) op->sdtype = (fp_dtype)sdt;
  op->pass = (fp_pass)pass;
  json_object *uses;
  size_t nu;
  if (!rd_arr(r, o, "uses", false, &uses, &nu)) return false;
  if (uses) {
    int32_t *ids = fp_alloc_array(r->a, nu + 1, sizeof *ids);
    char save[sizeof r->ptr];
    memcpy(save, r->ptr, sizeof save);
    ptr_join(r, save, "uses");
    for (size_t k = 0; k < nu; k++) {
      char key[24];
      int64_t v;
      snprintf(key, sizeof key, "%zu", k);
      if (!rd_int_v(r, json_object_array_get_idx(uses, k), key, INT32_MIN, INT32_MAX, &v)) return false;
      ids[k] = (int32_t)v;
    }
    memcpy(r->ptr, save, sizeof save);
    if (p->nuses > INT32_MAX - (int64_t)nu) return rerr(r, "uses", "too many uses");
    fp_ir_op_uses(p, op, ids, (int)nu);
  }
  return rregion(r, o, "dst", &op->dst) && rregion(r, o, "src", &op->src) && rregion(r, o, "aux", &op->aux) &&
         rd_i32(r, o, "comm", false, -1, &op->comm) && rd_i32(r, o, "table", false, -1, &op->tab) &&
         rd_i32(r, o, "root", false, INT32_MIN, &op->root) && rd_i32(r, o, "only", false, INT32_MIN, &op->only) &&
         rd_i32(r, o, "only_comm", false, -1, &op->only_comm) && rd_i32(r, o, "event", false, -1, &op->event) &&
         rd_i32(r, o, "module", false, -1, &op->module) && rd_dbl(r, o, "alpha", false, &op->alpha) &&
         rd_int(r, o, "rows", false, INT64_MIN, INT64_MAX, &op->rows) &&
         rd_int(r, o, "dpitch", false, INT64_MIN, INT64_MAX, &op->dpitch) &&
         rd_int(r, o, "spitch", false, INT64_MIN, INT64_MAX, &op->spitch) && rd_i32(r, o, "bucket", false, -1, &op->bucket) &&
         rd_i32(r, o, "group", false, INT32_MIN, &op->group);
}

/* segments tile the op array in order; ops are read segment by segment */
static bool read_segs_ops(rd *r, json_object *root, fp_prog *p) {
  r->ptr[0] = 0; /* members of the root */
  json_object *segs, *ops, *o;
  size_t ns, no;
  if (!rd_arr(r, root, "segments", true, &segs, &ns) || !rd_arr(r, root, "ops", true, &ops, &no)) return false;
  int64_t next = 0;
  for (size_t k = 0; k < ns; k++) {
    static const char *const allowed[] = {"kind", "module", "micro", "first", "count", NULL};
    int kind;
    int32_t module, micro;
    int64_t first, count;
    if (!elem(r, segs, "segments", k, &o) || !keys(r, o, allowed) ||
        !rd_enum(r, o, "kind", true, fp_seg_name, FP_NSEGKINDS, &kind) || !rd_i32(r, o, "module", true, -1, &module) ||
        !rd_i32(r, o, "micro", true, INT32_MIN, &micro) || !rd_int(r, o, "first", true, 0, INT32_MAX, &first) ||
        !rd_int(r, o, "count", true, 0, INT32_MAX, &count))
      return false;
    if (first != next) return rerr(r, "first", "is %" PRId64 " but the previous segment ends at %" PRId64, first, next);
    if (count > (int64_t)no - first)
      return rerr(r, "count", "%" PRId64 " ops from %" PRId64 " run past the %zu ops", count, first, no);
    fp_ir_seg_begin(p, (fp_seg_kind)kind, module, micro);
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
  fp_diag_json(l->d, l->src, ptr, "%s", msg);
}

fp_prog *fp_plan_read(fp_arena *a, fp_diag *d, const fp_src *src) {
  fp_jctx jc = {a, d, src};
  rd r = {.a = a, .d = d, .src = src};
  fp_prog *p = NULL;
  json_object *root = fp_json_parse(&jc);
  if (!root) return NULL;
  if (!is_obj(&r, root, NULL)) goto fail;
  static const char *const allowed[] = {"format", "planner_version", "hash", "model", "strategy", "world_size",
                                        "ranks_per_node", "grad_accumulation", "arena_bytes", "host_bytes", "events",
                                        "comms", "tables", "buckets", "buffers", "lives", "modules", "params", "segments",
                                        "ops", NULL};
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
  p = fp_prog_new(a);
  int64_t nev = 0;
  if (!rd_str(&r, root, "model", false, &p->model) || !rd_str(&r, root, "strategy", false, &p->strategy) ||
      !rd_int(&r, root, "world_size", true, INT64_MIN, INT64_MAX, &p->world_size) ||
      !rd_int(&r, root, "ranks_per_node", true, INT64_MIN, INT64_MAX, &p->ranks_per_node) ||
      !rd_int(&r, root, "grad_accumulation", true, INT64_MIN, INT64_MAX, &p->grad_accumulation) ||
      !rd_int(&r, root, "arena_bytes", true, INT64_MIN, INT64_MAX, &p->arena_bytes) ||
      !rd_int(&r, root, "host_bytes", true, INT64_MIN, INT64_MAX, &p->host_bytes) ||
      !rd_int(&r, root, "events", true, 0, INT32_MAX, &nev))
    goto fail;
  p->nevents = (int32_t)nev;
  if (!read_comms(&r, root, p) || !read_tables(&r, root, p) || !read_buckets(&r, root, p) || !read_bufs(&r, root, p) ||
      !read_lives(&r, root, p) || !read_mods(&r, root, p) || !read_params(&r, root, p) || !read_segs_ops(&r, root, p))
    goto fail;
  char want[40];
  snprintf(want, sizeof want, "fnv1a64:%016" PRIx64, fp_prog_hash(p));
  if (strcmp(hash, want)) {
    r.ptr[0] = 0;
    rerr(&r, "hash", "content hash mismatch: file says %.60s, content is %s", hash, want);
    goto fail;
  }
  jloc l = {d, src, a};
  if (!fp_ir_verify_with(p, report_json, &l)) goto fail;
  json_object_put(root);
  return p;
fail:
  json_object_put(root);
  return NULL;
}
