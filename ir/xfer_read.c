/* xfer_read.c - reading a transfer program back from its JSON
 * ("flexplan.xfer.v1", what ir/xfer.c fp_tx_write_json writes and `flexplan
 * reshard -o` saves). The reader trusts nothing: every member's type and
 * range is checked (located errors "file:line:col: error: /procs/2/ops/5:
 * ..."), then the whole transfer verifier runs; the figures are recomputed
 * from the ops, never taken from the file. */
#include <inttypes.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "xfer.h"

typedef struct rd {
  fp_diag *d;
  const fp_src *src;
  bool bad;
} rd;

static void fail(rd *r, const char *ptr, const char *msg) {
  if (!r->bad || r->d->nerrors < 20) fp_diag_json(r->d, r->src, ptr, "%s", msg);
  r->bad = true;
}

static json_object *member(json_object *o, const char *k) {
  json_object *v = NULL;
  return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static bool get_int(rd *r, json_object *v, const char *ptr, int64_t lo, int64_t hi, int64_t *out) {
  if (!v || !json_object_is_type(v, json_type_int)) {
    fail(r, ptr, "expected an integer");
    return false;
  }
  int64_t x = json_object_get_int64(v);
  if (x < lo || x > hi) {
    char m[160];
    snprintf(m, sizeof m, "%" PRId64 " is outside [%" PRId64 ", %" PRId64 "]", x, lo, hi);
    fail(r, ptr, m);
    return false;
  }
  *out = x;
  return true;
}

static const char *get_str(rd *r, json_object *v, const char *ptr) {
  if (!v || !json_object_is_type(v, json_type_string)) {
    fail(r, ptr, "expected a string");
    return NULL;
  }
  return json_object_get_string(v);
}

static bool get_hash(rd *r, json_object *side, const char *ptr, uint64_t *out) {
  const char *h = get_str(r, member(side, "hash"), ptr);
  if (!h) return false;
  if (strncmp(h, "fnv1a64:", 8) != 0 || strlen(h) != 24) {
    fail(r, ptr, "expected \"fnv1a64:<16 hex digits>\"");
    return false;
  }
  char *end;
  *out = strtoull(h + 8, &end, 16);
  if (*end) fail(r, ptr, "expected \"fnv1a64:<16 hex digits>\"");
  return !*end;
}

static int dtype_of(rd *r, json_object *v, const char *ptr) {
  const char *s = get_str(r, v, ptr);
  int t = s ? fp_dtype_parse(s) : -1;
  if (s && t < 0) fail(r, ptr, "unknown dtype");
  return t;
}

static bool ref_of(rd *r, json_object *v, const char *ptr, fp_tx_ref *out) {
  out->space = FP_SP_NONE, out->off = 0;
  if (!v) return true;
  if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) != 2) {
    fail(r, ptr, "expected [\"from\"|\"to\"|\"stage\", byte offset]");
    return false;
  }
  const char *s = get_str(r, json_object_array_get_idx(v, 0), ptr);
  if (!s) return false;
  int sp = !strcmp(s, "from") ? FP_SP_FROM : !strcmp(s, "to") ? FP_SP_TO : !strcmp(s, "stage") ? FP_SP_STAGE : -1;
  if (sp < 0) {
    fail(r, ptr, "unknown space (expected from, to or stage)");
    return false;
  }
  out->space = (int8_t)sp;
  return get_int(r, json_object_array_get_idx(v, 1), ptr, 0, INT64_MAX, &out->off);
}

fp_tx *fp_tx_read(fp_arena *a, fp_diag *d, const fp_src *src) {
  rd r = {d, src, false};
  enum json_tokener_error je;
  json_object *root = json_tokener_parse_verbose(src->text, &je);
  if (!root) {
    fp_diag_errorf(d, src->path, "not JSON: %s", json_tokener_error_desc(je));
    return NULL;
  }
  fp_tx *t = fp_tx_new(a);
  char ptr[160];
  const char *fmt = get_str(&r, member(root, "format"), "/format");
  if (fmt && strcmp(fmt, "flexplan.xfer.v1") != 0) fail(&r, "/format", "expected \"flexplan.xfer.v1\"");
  if (r.bad) goto out;
  const char *model = get_str(&r, member(root, "model"), "/model");
  t->model = model ? fp_strdup(a, model) : "";
  const char *what = get_str(&r, member(root, "what"), "/what");
  if (what && strcmp(what, "weights") != 0 && strcmp(what, "weights+optimizer") != 0)
    fail(&r, "/what", "expected \"weights\" or \"weights+optimizer\"");
  else if (what && strcmp(what, "weights") != 0)
    t->what = "weights+optimizer";
  json_object *fr = member(root, "from"), *to = member(root, "to");
  get_hash(&r, fr, "/from/hash", &t->from_hash);
  get_hash(&r, to, "/to/hash", &t->to_hash);
  get_int(&r, member(fr, "world_size"), "/from/world_size", 1, INT32_MAX, &t->from_world);
  get_int(&r, member(to, "world_size"), "/to/world_size", 1, INT32_MAX, &t->to_world);
  get_int(&r, member(fr, "arena_bytes"), "/from/arena_bytes", 0, INT64_MAX, &t->from_arena);
  get_int(&r, member(to, "arena_bytes"), "/to/arena_bytes", 0, INT64_MAX, &t->to_arena);
  get_int(&r, member(to, "rank_offset"), "/to/rank_offset", 0, INT32_MAX, &t->to_offset);
  get_int(&r, member(fr, "rank_offset"), "/from/rank_offset", 0, INT32_MAX, &t->from_offset);
  get_int(&r, member(root, "processes"), "/processes", 1, INT32_MAX, &t->nprocs);
  if (r.bad) goto out;
  int64_t fe = t->from_offset + t->from_world, te = t->to_offset + t->to_world;
  if (t->nprocs != (fe > te ? fe : te)) {
    fail(&r, "/processes", "does not equal max(from.rank_offset + from.world_size, to.rank_offset + to.world_size)");
    goto out;
  }
  json_object *ps = member(root, "params");
  if (!ps || !json_object_is_type(ps, json_type_array)) {
    fail(&r, "/params", "expected an array");
    goto out;
  }
  t->nparams = (int32_t)json_object_array_length(ps);
  t->params = fp_alloc_array(a, (size_t)t->nparams + 1, sizeof *t->params);
  for (int32_t i = 0; i < t->nparams; i++) {
    json_object *p = json_object_array_get_idx(ps, (size_t)i);
    snprintf(ptr, sizeof ptr, "/params/%d/name", i);
    const char *n = get_str(&r, member(p, "name"), ptr);
    t->params[i].name = n ? fp_strdup(a, n) : "";
    snprintf(ptr, sizeof ptr, "/params/%d/numel", i);
    get_int(&r, member(p, "numel"), ptr, 0, INT64_MAX, &t->params[i].numel);
    snprintf(ptr, sizeof ptr, "/params/%d/wire", i);
    const char *w = get_str(&r, member(p, "wire"), ptr);
    if (w && strcmp(w, "plain") && strcmp(w, "mxfp8")) fail(&r, ptr, "expected \"plain\" or \"mxfp8\"");
    t->params[i].mxfp8 = w && !strcmp(w, "mxfp8");
  }
  json_object *procs = member(root, "procs");
  if (!procs || !json_object_is_type(procs, json_type_array) ||
      (int64_t)json_object_array_length(procs) != t->nprocs) {
    fail(&r, "/procs", "expected an array of one entry per process");
    goto out;
  }
  t->stage_bytes = fp_alloc_array(a, (size_t)t->nprocs + 1, sizeof *t->stage_bytes);
  for (int64_t p = 0; p < t->nprocs && !r.bad; p++) {
    json_object *P = json_object_array_get_idx(procs, (size_t)p);
    snprintf(ptr, sizeof ptr, "/procs/%" PRId64 "/stage_bytes", p);
    get_int(&r, member(P, "stage_bytes"), ptr, 0, INT64_MAX / 2, &t->stage_bytes[p]);
    json_object *need = member(P, "need"), *ops = member(P, "ops");
    snprintf(ptr, sizeof ptr, "/procs/%" PRId64, p);
    if (!need || !ops || !json_object_is_type(need, json_type_array) || !json_object_is_type(ops, json_type_array)) {
      fail(&r, ptr, "expected \"need\" and \"ops\" arrays");
      break;
    }
    for (size_t k = 0; k < json_object_array_length(need) && !r.bad; k++) {
      json_object *n = json_object_array_get_idx(need, k);
      snprintf(ptr, sizeof ptr, "/procs/%" PRId64 "/need/%zu", p, k);
      if (!json_object_is_type(n, json_type_array) || json_object_array_length(n) != 5) {
        fail(&r, ptr, "expected [param, byte offset, bytes, first element, dtype]");
        break;
      }
      int64_t pi, off, bytes, full;
      bool ok = get_int(&r, json_object_array_get_idx(n, 0), ptr, 0, t->nparams - 1, &pi) &&
                get_int(&r, json_object_array_get_idx(n, 1), ptr, 0, INT64_MAX / 2, &off) &&
                get_int(&r, json_object_array_get_idx(n, 2), ptr, 0, INT64_MAX / 2, &bytes) &&
                get_int(&r, json_object_array_get_idx(n, 3), ptr, 0, INT64_MAX, &full);
      int dt = dtype_of(&r, json_object_array_get_idx(n, 4), ptr);
      if (ok && dt >= 0) fp_tx_region_add(t, true, (int32_t)p, (int32_t)pi, off, bytes, full, (fp_dtype)dt);
    }
    for (size_t k = 0; k < json_object_array_length(ops) && !r.bad; k++) {
      json_object *o = json_object_array_get_idx(ops, k);
      snprintf(ptr, sizeof ptr, "/procs/%" PRId64 "/ops/%zu", p, k);
      const char *kind = get_str(&r, member(o, "op"), ptr);
      int kk = -1;
      for (int z = 0; kind && z < FP_TX_NKINDS; z++)
        if (!strcmp(kind, fp_tx_kind_name(z))) kk = z;
      if (kind && kk < 0) fail(&r, ptr, "unknown op");
      int64_t pi = 0, n = 0, full = 0, peer = -1;
      get_int(&r, member(o, "param"), ptr, 0, t->nparams - 1, &pi);
      get_int(&r, member(o, "n"), ptr, 0, INT64_MAX / 16, &n);
      get_int(&r, member(o, "full_off"), ptr, 0, INT64_MAX / 2, &full);
      if (member(o, "peer")) get_int(&r, member(o, "peer"), ptr, 0, t->nprocs - 1, &peer);
      int dt = dtype_of(&r, member(o, "dtype"), ptr), sdt = dtype_of(&r, member(o, "sdtype"), ptr);
      if (r.bad) break;
      fp_tx_op *x = fp_tx_emit(t, (fp_tx_kind)kk, (int32_t)p, (int32_t)pi, (fp_dtype)dt, n);
      x->sdtype = (fp_dtype)sdt, x->peer = (int32_t)peer, x->full_off = full;
      ref_of(&r, member(o, "dst"), ptr, &x->dst);
      ref_of(&r, member(o, "src"), ptr, &x->src);
      ref_of(&r, member(o, "aux"), ptr, &x->aux);
    }
  }
  if (r.bad) goto out;
  /* FROM bytes readable: what the ops read from FROM must be checked
   * against the FROM plan itself, which the file does not carry; the
   * executor checks the plan hashes, and the planner's have regions are
   * not saved. A loaded transfer's X5 FROM rule therefore uses the reads
   * themselves (each inside FROM's arena, rule X1). */
  for (int32_t i = 0; i < t->nops; i++) {
    const fp_tx_op *o = &t->ops[i];
    if (o->src.space == FP_SP_FROM)
      fp_tx_region_add(t, false, o->proc, o->param, o->src.off, fp_tx_src_bytes(o), o->full_off, o->sdtype);
  }
  fp_tx_finish(t);
  {
    /* the lower bound is not derivable without the plans: keep the file's */
    json_object *fg = member(root, "figures");
    int64_t lb = 0;
    if (fg && get_int(&r, member(fg, "lower_bound_bytes"), "/figures/lower_bound_bytes", 0, INT64_MAX, &lb))
      t->lower_bound = lb;
  }
  if (!r.bad && !fp_tx_verify(t, d)) r.bad = true;
out:
  json_object_put(root);
  return r.bad ? NULL : t;
}
