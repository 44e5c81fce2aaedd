/* model.c - model.json: parse and validate (docs/design.md, "The core design"
 * §2; docs/input-format.md).
 *
 * Two versions are read: "flexplan.model.v1", and "flexplan.model.v2", which
 * adds per module "uses" (params declared by another module that this one's
 * forward also reads: tied weights) and "activation_bytes_checkpointed"; a
 * v2 module may then have no params of its own (it reads only what it uses).
 * A file holds either a model ({"format": "flexplan.model.v1", ...}) or the
 * combined form {"model": {...}, "spec": {...}} (spec optional), in which case
 * every pointer starts with "/model" (the spec's with "/spec"). The first user
 * error stops the parse; it is reported located at the offending value. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "../base/json.h"

#define FP_MODEL_FORMAT_V1 "flexplan.model.v1"
#define FP_MODEL_FORMAT_V2 "flexplan.model.v2"

/* ---- a tiny string set for the uniqueness checks --------------------------- */
typedef struct nameset {
  const char **names;
  int *idx;
  size_t cap;
} nameset;

static void ns_init(fp_arena *a, nameset *s, size_t n) {
  size_t cap = 16;
  while (cap < 2 * n + 2) cap *= 2;
  s->cap = cap;
  s->names = fpi_alloc_array(a, cap, sizeof *s->names);
  s->idx = fpi_alloc_array(a, cap, sizeof *s->idx);
}

/* insert; returns the index stored earlier under the same name, or -1 */
static int ns_put(nameset *s, const char *name, int idx) {
  size_t h = (size_t)fpi_fnv1a(FP_FNV_INIT, name, strlen(name)) & (s->cap - 1);
  while (s->names[h]) {
    if (!strcmp(s->names[h], name)) return s->idx[h];
    h = (h + 1) & (s->cap - 1);
  }
  s->names[h] = name;
  s->idx[h] = idx;
  return -1;
}

static int ns_get(const nameset *s, const char *name) {
  size_t h = (size_t)fpi_fnv1a(FP_FNV_INIT, name, strlen(name)) & (s->cap - 1);
  while (s->names[h]) {
    if (!strcmp(s->names[h], name)) return s->idx[h];
    h = (h + 1) & (s->cap - 1);
  }
  return -1;
}

/* ---- where the reader is --------------------------------------------------- */
/* The reader's context: its fp_jctx (first, so here() casts back) and the
 * module and param being read. Readers pass ptr NULL for them, and their
 * pointers are formatted only when an error is reported: formatting
 * "/model/modules/i/params/k" and its shape's for each of 100,000 units was
 * a tenth of the input phase. */
typedef struct mctx {
  fp_jctx c;
  const char *ptr; /* the model's: "" or "/model" */
  int mi, pi;      /* module index; param index within it, -1: the module itself */
} mctx;

/* "<base>/modules/mi", or its param pi's ("/params/pi" after it; pi >= 0) */
static const char *unit_ptr(fp_arena *a, const char *base, int mi, int pi) {
  if (pi < 0) return fpi_sprintf(a, "%s/modules/%d", base, mi);
  return fpi_sprintf(a, "%s/modules/%d/params/%d", base, mi, pi);
}

static const char *mctx_here(const fp_jctx *c) {
  const mctx *x = (const mctx *)c;
  return unit_ptr(c->a, x->ptr, x->mi, x->pi);
}

/* the pointer of member key of the object being read */
static const char *here_key(fp_jctx *c, const char *key) { return fpi_ptr_key(c->a, c->here(c), key); }

const char *fpi_module_ptr(fp_arena *a, const fp_model *m, int i) { return unit_ptr(a, m->ptr, i, -1); }

const char *fpi_param_ptr(fp_arena *a, const fp_model *m, const fp_param *p) {
  int mi = p->module;
  return unit_ptr(a, m->ptr, mi, (int)(p - m->params) - m->modules[mi].first_param);
}

/* ---- pieces ----------------------------------------------------------------- */
/* the model's "format": v1 or v2 into *version */
static bool check_format(fp_jctx *c, const fp_jv *root, const char *ptr, int *version) {
  const fp_jv *v = fpi_j_get(root, "format");
  if (!fpi_j_has(root, "format"))
    return fpi_j_error(c, ptr, "missing required member 'format' (expected \"%s\" or \"%s\")", FP_MODEL_FORMAT_V2,
                      FP_MODEL_FORMAT_V1);
  const char *f = fpi_jv_str(v);
  if (f && !strcmp(f, FP_MODEL_FORMAT_V1)) return *version = 1, true;
  if (f && !strcmp(f, FP_MODEL_FORMAT_V2)) return *version = 2, true;
  bool is_spec = f && !strcmp(f, "flexplan.spec.v1");
  return fpi_j_error(c, fpi_ptr_key(c->a, ptr, "format"), "expected \"%s\" or \"%s\", got %s%s", FP_MODEL_FORMAT_V2,
                    FP_MODEL_FORMAT_V1, fpi_j_describe(c->a, v), is_spec ? " (this is a spec: pass it with --spec)" : "");
}

static const char *const dtype_names[] = {"fp32", "bf16", "fp16", NULL};
static const fp_dtype dtype_vals[] = {FP_F32, FP_BF16, FP_F16};

/* the param object pv (the context's pi of its mi) */
/* v2 "tp": the param's tensor-parallel placement over the mesh's tp
 * dimension: {"kind": "shard", "dim": d} (each tp rank holds a contiguous
 * 1/tp of dim d, as DTensor's Shard(d)) or {"kind": "replicate"} (the
 * default: every tp rank holds all of it). The shape stays the global one;
 * the layout checks dim d against the spec's tp. */
static bool parse_tp(fp_jctx *c, const fp_jv *pv, fp_param *p) {
  p->tp_dim = -1;
  if (!fpi_j_has(pv, "tp")) return true;
  const fp_jv *t = fpi_j_get(pv, "tp");
  /* the common cases, read without formatting a pointer (a 405B model has a
   * thousand of them): {"kind": "replicate"}, {"kind": "shard", "dim": d} */
  if (fpi_jv_is(t, FP_JOBJECT) && t->n <= 2) {
    const char *kind = fpi_jv_str(fpi_j_get(t, "kind"));
    const fp_jv *dv = fpi_j_get(t, "dim");
    if (kind && !strcmp(kind, "replicate") && t->n == 1) return true;
    if (kind && !strcmp(kind, "shard") && t->n == 2 && fpi_jv_is(dv, FP_JINT) && !dv->big && dv->i >= 0 &&
        dv->i < p->ndim) {
      p->tp_dim = (int)dv->i;
      return true;
    }
  }
  const char *tp = here_key(c, "tp"); /* anything else: the located checks below */
  static const char *const kinds[] = {"replicate", "shard", NULL};
  static const char *const keys[] = {"kind", "dim", NULL};
  int k = -1;
  if (!fpi_j_is_object(c, t, tp) || !fpi_j_keys(c, t, tp, keys) || !fpi_j_enum(c, t, tp, "kind", true, kinds, &k))
    return false;
  if (k == 0) {
    if (fpi_j_has(t, "dim"))
      return fpi_j_error(c, fpi_ptr_key(c->a, tp, "dim"), "'dim' is only allowed with \"kind\": \"shard\"");
    return true;
  }
  int64_t d = 0;
  if (!fpi_j_int(c, t, tp, "dim", true, 0, FP_MAX_DIMS - 1, &d)) return false;
  if (d >= p->ndim)
    return fpi_j_error(c, fpi_ptr_key(c->a, tp, "dim"), "dim %" PRId64 " is out of range for a param of %d dimension%s",
                      d, p->ndim, p->ndim == 1 ? "" : "s");
  p->tp_dim = (int)d;
  return true;
}

static bool parse_param(fp_jctx *c, const fp_jv *pv, int module, int version, fp_param *p) {
  static const char *const keys1[] = {"name", "shape", "dtype", "requires_grad", NULL};
  static const char *const keys2[] = {"name", "shape", "dtype", "requires_grad", "tp", NULL};
  if (version == 1 && fpi_j_has(pv, "tp"))
    return fpi_j_error(c, here_key(c, "tp"), "'tp' (a tensor-parallel placement) needs \"format\": \"%s\" (this file is %s)",
                      FP_MODEL_FORMAT_V2, FP_MODEL_FORMAT_V1);
  if (!fpi_j_keys(c, pv, NULL, version == 1 ? keys1 : keys2)) return false;
  if (!fpi_j_str(c, pv, NULL, "name", true, &p->name)) return false;
  const fp_jv *shape;
  size_t nd;
  if (!fpi_j_arr(c, pv, NULL, "shape", true, &shape, &nd)) return false;
  if (nd < 1 || nd > FP_MAX_DIMS)
    return fpi_j_error(c, here_key(c, "shape"), "expected 1 to %d dimensions, got %zu", FP_MAX_DIMS, nd);
  p->ndim = (int)nd;
  p->numel = 1;
  for (size_t k = 0; k < nd; k++) {
    const fp_jv *e = &shape->elems[k];
    if (e->type == FP_JINT && !e->big && e->i >= 1 && e->i < INT64_MAX) /* the common case */
      p->shape[k] = e->i;
    else if (!fpi_j_int_v(c, fpi_jv_at(shape, k), fpi_ptr_idx(c->a, here_key(c, "shape"), (int64_t)k), 1, INT64_MAX,
                         &p->shape[k]))
      return false;
    if (!fpi_mul64(p->numel, p->shape[k], &p->numel))
      return fpi_j_error(c, here_key(c, "shape"), "parameter too large: the number of elements overflows int64");
  }
  int64_t bytes;
  if (!fpi_mul64(p->numel, 4, &bytes))
    return fpi_j_error(c, here_key(c, "shape"), "parameter too large: %" PRId64 " elements of 4 bytes overflow int64",
                      p->numel);
  int di = 0;
  if (!fpi_j_enum(c, pv, NULL, "dtype", false, dtype_names, &di)) return false;
  p->dtype = dtype_vals[di];
  p->requires_grad = true;
  if (!fpi_j_bool(c, pv, NULL, "requires_grad", false, &p->requires_grad)) return false;
  p->module = module;
  return parse_tp(c, pv, p);
}

/* the module object mv (the context's mi) */
static bool parse_module(fp_jctx *c, const fp_jv *mv, int version, fp_module *m) {
  static const char *const keys1[] = {"name", "params", "flops_fwd", "flops_bwd", "activation_bytes", NULL};
  static const char *const keys2[] = {"name", "params", "uses", "flops_fwd", "flops_bwd", "activation_bytes",
                                      "activation_bytes_checkpointed", NULL};
  if (version == 1 && fpi_j_has(mv, "uses"))
    return fpi_j_error(c, here_key(c, "uses"),
                      "'uses' (tied weights) needs \"format\": \"%s\" (this file is %s)", FP_MODEL_FORMAT_V2,
                      FP_MODEL_FORMAT_V1);
  if (version == 1 && fpi_j_has(mv, "activation_bytes_checkpointed"))
    return fpi_j_error(c, here_key(c, "activation_bytes_checkpointed"),
                      "'activation_bytes_checkpointed' needs \"format\": \"%s\" (this file is %s)",
                      FP_MODEL_FORMAT_V2, FP_MODEL_FORMAT_V1);
  if (!fpi_j_keys(c, mv, NULL, version == 1 ? keys1 : keys2)) return false;
  if (!fpi_j_str(c, mv, NULL, "name", true, &m->name)) return false;
  m->flops_fwd = 0;
  if (!fpi_j_num(c, mv, NULL, "flops_fwd", false, 0, INFINITY, &m->flops_fwd)) return false;
  m->flops_bwd = 2 * m->flops_fwd;
  if (!fpi_j_num(c, mv, NULL, "flops_bwd", false, 0, INFINITY, &m->flops_bwd)) return false;
  if (!isfinite(m->flops_bwd))
    return fpi_j_error(c, here_key(c, "flops_fwd"), "flops_fwd too large (2 * flops_fwd is not finite)");
  m->activation_bytes = 0;
  if (!fpi_j_int(c, mv, NULL, "activation_bytes", false, 0, INT64_MAX, &m->activation_bytes)) return false;
  m->activation_bytes_checkpointed = 0;
  if (!fpi_j_int(c, mv, NULL, "activation_bytes_checkpointed", false, 0, INT64_MAX,
                &m->activation_bytes_checkpointed))
    return false;
  return true;
}

/* `; did you mean "x"?` for an unknown NAME among the first N of the model's
 * params (PARAMS) or modules, or "" */
static const char *near_name(fp_arena *a, const fp_model *m, bool params, int n, const char *name) {
  const char **names = fpi_alloc_array(a, (size_t)n + 1, sizeof *names);
  for (int k = 0; k < n; k++) names[k] = params ? m->params[k].name : m->modules[k].name;
  const char *near = fpi_closest_name(name, names);
  return near ? fpi_sprintf(a, "; did you mean \"%s\"?", near) : "";
}

/* element k of a string array: its text, or an error at its pointer (up/k) */
static bool str_elem(fp_jctx *c, const fp_jv *arr, size_t k, const char *up, const char **out) {
  const fp_jv *e = &arr->elems[k];
  if (e->type == FP_JSTRING && e->n > 0) return *out = e->s, true;
  return fpi_j_str_v(c, fpi_jv_at(arr, k), fpi_ptr_idx(c->a, up, (int64_t)k), out);
}

/* v2 "uses" of module i (the context's mi), once every module's params are
 * known: each name a param another module declares, each at most once */
static bool parse_uses(fp_jctx *c, const fp_jv *mv, int i, const nameset *pnames, fp_model *out) {
  fp_module *m = &out->modules[i];
  const fp_jv *ua = NULL;
  size_t nu = 0;
  if (!fpi_j_arr(c, mv, NULL, "uses", false, &ua, &nu)) return false;
  if (!ua) return true;
  const char *up = here_key(c, "uses");
  if (nu == 0) return fpi_j_error(c, up, "expected a non-empty array of param names, got an empty array");
  if (nu > INT32_MAX / 2) return fpi_j_error(c, up, "too many uses (%zu)", nu);
  m->uses = fpi_alloc_array(c->a, nu, sizeof *m->uses);
  for (size_t k = 0; k < nu; k++) {
    const char *name;
    if (!str_elem(c, ua, k, up, &name)) return false;
#define EP fpi_ptr_idx(c->a, up, (int64_t)k)
    int pi = ns_get(pnames, name);
    if (pi < 0)
      return fpi_j_error(c, EP, "unknown param '%s' in uses (it must be declared in another module's params)%s", name,
                        near_name(c->a, out, true, out->nparams, name));
    if (out->params[pi].module == i)
      return fpi_j_error(c, EP, "param '%s' is this module's own (uses names params declared by other modules)", name);
    for (int j = 0; j < m->nuses; j++)
      if (m->uses[j] == pi) return fpi_j_error(c, EP, "param '%s' appears twice in uses", name);
#undef EP
    m->uses[m->nuses++] = pi;
  }
  return true;
}

/* ---- entry points --------------------------------------------------------------- */
/* fpi_model_parse in its steps: the modules with their params
 * (parse_module_list, each by module_entry), the tied uses, then the
 * forward order (parse_forward_order) */

/* module i of mods, with its params; names unique across the model */
static bool module_entry(mctx *x, const fp_jv *mods, size_t i, nameset *mnames, nameset *pnames, fp_model *out) {
  fp_jctx *c = &x->c;
  fp_arena *a = c->a;
  const fp_jv *mv = fpi_jv_at(mods, i);
  x->mi = (int)i;
  x->pi = -1;
  fp_module *m = &out->modules[i];
  if (!fpi_j_is_object(c, mv, NULL)) return false;
  if (!parse_module(c, mv, out->version, m)) return false;
  int prev = ns_put(mnames, m->name, (int)i);
  if (prev >= 0)
    return fpi_j_error(c, here_key(c, "name"), "duplicate module name '%s' (also %s)", m->name,
                      fpi_module_ptr(a, out, prev));
  const fp_jv *pa = NULL;
  size_t np = 0;
  /* v2: a module that only reads tied params has none of its own
   * (checked with its uses below) */
  bool need_params = out->version == 1 || !fpi_j_has(mv, "uses");
  if (!fpi_j_arr(c, mv, NULL, "params", need_params, &pa, &np)) return false;
  if (!pa) np = 0;
  if (np == 0 && need_params)
    return fpi_j_error(c, here_key(c, "params"), "expected a non-empty array of params, got an empty array");
  m->first_param = out->nparams;
  m->nparams = (int)np;
  for (size_t k = 0; k < np; k++) {
    const fp_jv *pv = fpi_jv_at(pa, k);
    x->pi = (int)k;
    if (!fpi_j_is_object(c, pv, NULL)) return false;
    fp_param *p = &out->params[out->nparams];
    if (!parse_param(c, pv, (int)i, out->version, p)) return false;
    int pprev = ns_put(pnames, p->name, out->nparams);
    if (pprev >= 0)
      return fpi_j_error(c, here_key(c, "name"), "duplicate param name '%s' (also %s)", p->name,
                        fpi_param_ptr(a, out, &out->params[pprev]));
    out->nparams++;
  }
  return true;
}

/* "modules": every module and its params (the params counted first, so
 * the arrays are allocated once), then the tied uses (v2) */
static bool parse_module_list(mctx *x, const fp_jv *root, const char *ptr, nameset *mnames, fp_model *out) {
  fp_jctx *c = &x->c;
  fp_arena *a = c->a;
  const fp_jv *mods;
  size_t nm;
  if (!fpi_j_arr(c, root, ptr, "modules", true, &mods, &nm)) return false;
  const char *msp = fpi_ptr_key(a, ptr, "modules");
  if (nm == 0) return fpi_j_error(c, msp, "expected a non-empty array of modules, got an empty array");
  if (nm > INT32_MAX / 2) return fpi_j_error(c, msp, "too many modules (%zu)", nm);
  size_t total = 0;
  for (size_t i = 0; i < nm; i++) {
    const fp_jv *pa = fpi_j_get(fpi_jv_at(mods, i), "params");
    if (fpi_jv_is(pa, FP_JARRAY)) total += pa->n;
  }
  if (total > INT32_MAX / 2) return fpi_j_error(c, msp, "too many params (%zu)", total);
  out->modules = fpi_alloc_array(a, nm, sizeof *out->modules);
  out->params = fpi_alloc_array(a, total ? total : 1, sizeof *out->params);
  nameset pnames;
  ns_init(a, mnames, nm);
  ns_init(a, &pnames, total);
  for (size_t i = 0; i < nm; i++)
    if (!module_entry(x, mods, i, mnames, &pnames, out)) return false;
  out->nmodules = (int)nm;
  if (out->version >= 2)
    for (size_t i = 0; i < nm; i++) {
      x->mi = (int)i;
      x->pi = -1;
      if (!parse_uses(c, fpi_jv_at(mods, i), (int)i, &pnames, out)) return false;
    }
  return true;
}

/* forward_order: default the order of modules; if given, it must name every
 * module at least once (a module that never runs would never be gathered
 * nor reduced: almost certainly a mistake in the input) */
static bool parse_forward_order(mctx *x, const fp_jv *root, const char *ptr, nameset *mnames, fp_model *out) {
  fp_jctx *c = &x->c;
  fp_arena *a = c->a;
  size_t nm = (size_t)out->nmodules;
  const fp_jv *fo = NULL;
  size_t nfo = 0;
  if (!fpi_j_arr(c, root, ptr, "forward_order", false, &fo, &nfo)) return false;
  if (!fo) {
    out->norder = out->nmodules;
    out->order = fpi_alloc_array(a, nm, sizeof *out->order);
    for (int i = 0; i < out->nmodules; i++) out->order[i] = i;
    return true;
  }
  const char *fop = fpi_ptr_key(a, ptr, "forward_order");
  if (nfo == 0) return fpi_j_error(c, fop, "expected a non-empty array of module names, got an empty array");
  if (nfo > INT32_MAX / 2) return fpi_j_error(c, fop, "forward_order too long (%zu)", nfo);
  out->order = fpi_alloc_array(a, nfo, sizeof *out->order);
  bool *seen = fpi_alloc_array(a, nm, sizeof *seen);
  for (size_t k = 0; k < nfo; k++) {
    const char *name;
    if (!str_elem(c, fo, k, fop, &name)) return false;
    int mi = ns_get(mnames, name);
    if (mi < 0)
      return fpi_j_error(c, fpi_ptr_idx(a, fop, (int64_t)k), "unknown module '%s' in forward_order%s", name,
                        near_name(a, out, false, out->nmodules, name));
    out->order[k] = mi;
    seen[mi] = true;
  }
  out->norder = (int)nfo;
  for (size_t i = 0; i < nm; i++)
    if (!seen[i])
      return fpi_j_error(c, fop, "module '%s' is not in forward_order (every module must run)",
                        out->modules[i].name);
  return true;
}

bool fpi_model_parse(fp_arena *a, fp_diag *d, const fp_src *src, const fp_jv *root, const char *ptr,
                    fp_model *out) {
  memset(out, 0, sizeof *out);
  out->src = src;
  out->ptr = ptr = ptr ? fpi_strdup(a, ptr) : "";
  mctx x = {.c = {a, d, src, mctx_here}, .ptr = ptr};
  fp_jctx *c = &x.c;
  if (!fpi_j_is_object(c, root, ptr)) return false;
  if (!check_format(c, root, ptr, &out->version)) return false;
  static const char *const keys[] = {"format", "name", "modules", "forward_order", NULL};
  if (!fpi_j_keys(c, root, ptr, keys)) return false;
  if (!fpi_j_str(c, root, ptr, "name", true, &out->name)) return false;
  nameset mnames;
  if (!parse_module_list(&x, root, ptr, &mnames, out)) return false;
  return parse_forward_order(&x, root, ptr, &mnames, out);
}

bool fpi_model_load(fp_arena *a, fp_diag *d, const char *path, fp_model *out, const fp_jv **embedded_spec,
                   const fp_src **src_out) {
  if (embedded_spec) *embedded_spec = NULL;
  if (src_out) *src_out = NULL;
  fp_src *src = fpi_alloc(a, sizeof *src);
  if (!fpi_src_read(a, d, path, src)) return false;
  return fpi_model_load_src(a, d, src, out, embedded_spec, src_out);
}

bool fpi_model_load_src(fp_arena *a, fp_diag *d, const fp_src *src, fp_model *out, const fp_jv **embedded_spec,
                       const fp_src **src_out) {
  if (embedded_spec) *embedded_spec = NULL;
  if (src_out) *src_out = src;
  fp_jctx c = {a, d, src, NULL};
  const fp_jv *root = fpi_json_parse(&c);
  if (!root) return false;
  if (!fpi_j_is_object(&c, root, "")) return false;
  if (!fpi_j_has(root, "format") && (fpi_j_has(root, "model") || fpi_j_has(root, "spec"))) {
    /* the combined form */
    static const char *const keys[] = {"model", "spec", NULL};
    if (!fpi_j_keys(&c, root, "", keys)) return false;
    if (!fpi_j_has(root, "model")) return fpi_j_error(&c, "", "missing required member 'model'");
    const fp_jv *spec = fpi_j_get(root, "spec");
    if (fpi_j_has(root, "spec") && !fpi_j_is_object(&c, spec, "/spec")) return false;
    if (!fpi_model_parse(a, d, src, fpi_j_get(root, "model"), "/model", out)) return false;
    if (embedded_spec && spec) *embedded_spec = spec;
    return true;
  }
  return fpi_model_parse(a, d, src, root, "", out);
}
