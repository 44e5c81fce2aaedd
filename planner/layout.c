/* layout.c - from the user's request (fp_model + fp_spec) to the layout:
 * which bucket each param goes to, each param's placement and dtypes, and the
 * byte offset of every param's slot in each of its bucket's flat storages.
 *
 * Storages are flat byte arrays, one of each kind per bucket; every param slot
 * starts on an FP_PARAM_ALIGN (256) byte boundary - see docs/layout.md. Slots
 * of placements whose size is the same on every rank (shard, ragged with
 * max-size slots, replicate) come first at rank-independent offsets; owned
 * params follow, packed per owner rank, so a rank stores only what it owns.
 * Every size is checked int64 arithmetic. */
#include "layout.h"

#include "cost.h"
#include "plugin.h"
#include "../base/json.h"
#include "passes/passes.h"

#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <inttypes.h>
#include <string.h>

const fp_placement_impl *const fp_placements[FP_NPLACEMENTS_IR] = {
    [FP_PL_SHARD] = &fp_placement_shard,
    [FP_PL_RAGGED] = &fp_placement_ragged,
    [FP_PL_OWNED] = &fp_placement_owned,
    [FP_PL_REPLICATE] = &fp_placement_replicate,
    [FP_PL_CYCLIC] = &fp_placement_cyclic,
};

/* ---- placement specs: the kind picks the placement, which reads the rest -- */
static bool has_name(const char *const *names, const char *key) {
  for (int k = 0; names[k]; k++)
    if (!strcmp(names[k], key)) return true;
  return false;
}

bool fpi_placement_parse(fp_jctx *c, const fp_jv *o, const char *ptr, const fpi_plugins *plugins,
                         fp_placement_spec *p) {
  if (!fpi_j_is_object(c, o, ptr)) return false;
  /* a registered plug-in: its parameters are its own (the registered
   * instance's), so its object has nothing but "kind" */
  const fp_jv *kv = fpi_j_get(o, "kind");
  const fpi_plugin *plug = fpi_jv_is(kv, FP_JSTRING) ? fpi_plugin_find(plugins, kv->s) : NULL;
  if (plug) {
    static const char *const only_kind[] = {"kind", NULL};
    if (!fpi_j_keys(c, o, ptr, only_kind)) return false;
    memset(p, 0, sizeof *p);
    p->kind = FP_PL_SHARD; /* until the layout resolves it */
    p->align_elems = 1;
    p->rank = -1;
    p->ptr = ptr;
    p->plugin = plug->name;
    p->plug = plug;
    return true;
  }
  const char *kinds[FP_NPLACEMENTS + 1];
  for (int k = 0; k < FP_NPLACEMENTS; k++) kinds[k] = fp_placements[k]->name;
  kinds[FP_NPLACEMENTS] = NULL;
  if (kv && fpi_jv_is(kv, FP_JSTRING) && !has_name(kinds, kv->s) && fpi_plugin_name_ok(kv->s)) {
    /* a plug-in's name, none registered under it */
    const char *kp = fpi_ptr_key(c->a, ptr, "kind");
    return fpi_j_error(c, kp, "expected one of \"shard\", \"ragged_shard\", \"owned\", \"replicate\" or the name "
                      "of a registered placement plug-in, got \"%s\" (no plug-in is registered under it; "
                      "docs/placements.md)", kv->s);
  }
  int kind;
  if (!fpi_j_enum(c, o, ptr, "kind", true, kinds, &kind)) return false;
  const fp_placement_impl *impl = fp_placements[kind];
  const char *allowed[16] = {"kind"};
  int n = 1;
  for (int k = 0; impl->members[k]; k++) {
    FP_ASSERT(n < 15);
    allowed[n++] = impl->members[k];
  }
  allowed[n] = NULL;
  for (size_t m = 0; m < o->n; m++) {
    const char *key = o->mems[m].key;
    if (has_name(allowed, key)) continue;
    for (int k = 0; k < FP_NPLACEMENTS; k++) {
      if (!has_name(fp_placements[k]->members, key)) continue;
      const char *list = "";
      for (int j = 0; allowed[j]; j++) list = fpi_sprintf(c->a, "%s%s%s", list, j ? ", " : "", allowed[j]);
      return fpi_j_error(c, fpi_ptr_key(c->a, ptr, key),
                        "member '%s' does not apply to placement kind \"%s\" (expected one of: %s)", key,
                        impl->name, list);
    }
    return fpi_j_keys(c, o, ptr, allowed); /* reports the unknown member */
  }
  memset(p, 0, sizeof *p);
  p->kind = (fp_placement_kind)kind;
  p->align_elems = 1;
  p->rank = -1;
  p->ptr = ptr;
  return impl->parse(c, o, ptr, p);
}

const char *fpi_bucket_ptr(const fp_layout *L, const fp_bucket *B) {
  if (B->spec) return B->spec->ptr;
  return B->module >= 0 ? fpi_module_ptr(L->a, L->model, B->module) : L->model->ptr;
}

bool fpi_layout_error(fp_layout *L, bool in_model, const char *ptr, const char *fmt, ...) {
  const fp_src *src = in_model ? L->model->src : L->spec->src;
  if (!in_model && !src) {
    /* no spec file: defaults are being applied; blame the model file */
    src = L->model->src;
    ptr = L->model->ptr;
  }
  va_list ap;
  va_start(ap, fmt);
  fpi_diag_vjson(L->d, src, ptr, fmt, ap);
  va_end(ap);
  return false;
}

const char *fpi_layout_ptr(fp_layout *L, const char *base, const char *key) {
  if (!base) return L->spec->ptr ? L->spec->ptr : "";
  return fpi_ptr_key(L->a, base, key);
}

int64_t fpi_param_inner(const fp_param *p, int dim) {
  int64_t n = 1;
  for (int i = dim + 1; i < p->ndim; i++) n *= p->shape[i]; /* <= numel: no overflow */
  return n;
}

static bool matches(const char **pats, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (fnmatch(pats[i], name, 0) == 0) return true;
  return false;
}

/* The first spec bucket a param name matches, without trying every bucket
 * on every param: a pattern with no glob character is a literal, looked up
 * by hash (the lowest bucket naming it); only buckets with a real glob are
 * tried in order, and only those before the literal's. */
typedef struct {
  const char **lit; /* literal pattern per slot (NULL empty) */
  int *litb;        /* its lowest bucket */
  size_t mask;
  int *globs, nglobs; /* buckets with a glob pattern, ascending */
} bucket_matcher;

static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603u; /* FNV-1a */
  for (const unsigned char *q = (const unsigned char *)s; *q; q++) h = (h ^ *q) * 1099511628211u;
  return h;
}

static void matcher_init(fp_arena *a, const fp_spec *s, bucket_matcher *x) {
  size_t npat = 0;
  for (int b = 0; b < s->nbuckets; b++) npat += (size_t)s->buckets[b].npatterns;
  size_t cap = 16;
  while (cap < 2 * npat + 2) cap *= 2;
  x->lit = fpi_alloc_array(a, cap, sizeof *x->lit);
  x->litb = fpi_alloc_array(a, cap, sizeof *x->litb);
  x->mask = cap - 1;
  x->globs = fpi_alloc_array(a, (size_t)s->nbuckets + 1, sizeof *x->globs);
  x->nglobs = 0;
  for (int b = 0; b < s->nbuckets; b++) {
    bool glob = false;
    for (int i = 0; i < s->buckets[b].npatterns; i++) {
      const char *pat = s->buckets[b].patterns[i];
      if (strpbrk(pat, "*?[\\")) {
        glob = true;
        continue;
      }
      size_t k = (size_t)name_hash(pat) & x->mask;
      while (x->lit[k] && strcmp(x->lit[k], pat)) k = (k + 1) & x->mask;
      if (!x->lit[k]) x->lit[k] = pat, x->litb[k] = b; /* buckets come in order: the first is the lowest */
    }
    if (glob) x->globs[x->nglobs++] = b;
  }
}

/* the first bucket whose patterns match name, or -1 */
static int matcher_find(const fp_spec *s, const bucket_matcher *x, const char *name) {
  int best = -1;
  for (size_t k = (size_t)name_hash(name) & x->mask; x->lit[k]; k = (k + 1) & x->mask)
    if (!strcmp(x->lit[k], name)) {
      best = x->litb[k];
      break;
    }
  for (int g = 0; g < x->nglobs && (best < 0 || x->globs[g] < best); g++) {
    const fp_bucket_spec *B = &s->buckets[x->globs[g]];
    if (matches(B->patterns, B->npatterns, name)) return x->globs[g];
  }
  return best;
}

/* ---- buckets ---------------------------------------------------------------- */
typedef struct {
  int spec;    /* bucket spec index, or -1 for a default per-module bucket */
  int module;  /* per-module key, or -1 */
  int auto_id; /* auto buckets: group index, or -1 */
} bucket_key;

/* the buckets by key, in order of first use: open addressing over keys
 * (slots: -1 empty, else a bucket index), so bucketing is linear in params */
typedef struct {
  int *slot;
  size_t mask;
} bucket_index;

static void bucket_index_init(fp_layout *L, bucket_index *x, int nparams) {
  size_t cap = 16;
  while (cap < 2 * (size_t)nparams + 2) cap *= 2;
  x->slot = fpi_alloc_array(L->a, cap, sizeof *x->slot);
  for (size_t i = 0; i < cap; i++) x->slot[i] = -1;
  x->mask = cap - 1;
}

static int find_or_add_bucket(fp_layout *L, bucket_index *x, bucket_key *keys, bucket_key k) {
  uint64_t h = ((uint64_t)(uint32_t)k.spec * 0x9E3779B97F4A7C15u) ^ ((uint64_t)(uint32_t)k.module * 0xC2B2AE3D27D4EB4Fu) ^
               ((uint64_t)(uint32_t)k.auto_id * 0x165667B19E3779F9u);
  for (size_t i = (size_t)(h ^ (h >> 29)) & x->mask;; i = (i + 1) & x->mask) {
    int b = x->slot[i];
    if (b < 0) {
      keys[L->nbuckets] = k;
      x->slot[i] = L->nbuckets;
      return L->nbuckets++;
    }
    if (keys[b].spec == k.spec && keys[b].module == k.module && keys[b].auto_id == k.auto_id) return b;
  }
}

static int64_t param_bytes(const fp_param *p, fp_dtype t) { return p->numel * fpi_dtype_size(t); }

/* Bucket names become IR names (and buffer names "<bucket>.main" ...), so two
 * buckets must not share one. Automatic names (a module's own bucket, a
 * per_module split "<bucket>.<module>", "auto<N>") can meet a user's bucket
 * name; that is the user's to fix, so it is a located error on the user's
 * bucket, not an invalid program later. Sorted, so large models stay fast. */
typedef struct {
  const char *name;
  int bucket;
} named_bucket;

static int cmp_named_bucket(const void *x, const void *y) {
  const named_bucket *a = x, *b = y;
  int c = strcmp(a->name, b->name);
  return c ? c : (a->bucket > b->bucket) - (a->bucket < b->bucket);
}

static const char *describe_bucket(fp_layout *L, const bucket_key *k) {
  const fp_model *m = L->model;
  const fp_spec *s = L->spec;
  if (k->spec >= 0 && k->module >= 0)
    return fpi_sprintf(L->a, "the per_module split of bucket '%s' for module '%s'", s->buckets[k->spec].name,
                      m->modules[k->module].name);
  if (k->spec >= 0) return fpi_sprintf(L->a, "the bucket at %s", s->buckets[k->spec].ptr);
  if (k->module >= 0) return fpi_sprintf(L->a, "the automatic bucket of module '%s'", m->modules[k->module].name);
  return fpi_sprintf(L->a, "automatic bucket %d", k->auto_id);
}

static bool check_bucket_names(fp_layout *L, const bucket_key *keys) {
  if (L->nbuckets < 2) return true;
  named_bucket *v = fpi_alloc_array(L->a, (size_t)L->nbuckets, sizeof *v);
  for (int b = 0; b < L->nbuckets; b++) v[b] = (named_bucket){L->buckets[b].name, b};
  qsort(v, (size_t)L->nbuckets, sizeof *v, cmp_named_bucket);
  for (int i = 1; i < L->nbuckets; i++) {
    if (strcmp(v[i - 1].name, v[i].name)) continue;
    const bucket_key *x = &keys[v[i - 1].bucket], *y = &keys[v[i].bucket];
    /* blame a bucket the user named exactly; else the later spec entry */
    bool y_exact = y->spec >= 0 && y->module < 0;
    bool x_exact = x->spec >= 0 && x->module < 0;
    /* at least one came from the spec (module names and auto<N> are unique) */
    const bucket_key *blame = y_exact ? y : x_exact ? x : x->spec > y->spec ? x : y;
    const bucket_key *other = blame == y ? x : y;
    return fpi_layout_error(L, false, fpi_ptr_key(L->a, L->spec->buckets[blame->spec].ptr, "name"),
                           "bucket name '%s' is also the name of %s; rename the bucket", v[i].name,
                           describe_bucket(L, other));
  }
  return true;
}

static bool assign_buckets(fp_layout *L, int *bucket_of) {
  const fp_model *m = L->model;
  const fp_spec *s = L->spec;
  bucket_key *keys = fpi_alloc_array(L->a, (size_t)m->nparams + 1, sizeof *keys);
  bucket_index bx;
  bucket_index_init(L, &bx, m->nparams);
  L->nbuckets = 0;
  if (s->bucket_mode == FP_BUCKETS_AUTO) {
    /* pack consecutive modules (in first-use forward order) up to target bytes
     * of unsharded param-dtype weights */
    int64_t target = s->auto_target_bytes ? s->auto_target_bytes : (int64_t)64 << 20;
    int *group_of = fpi_alloc_array(L->a, (size_t)m->nmodules, sizeof(int));
    for (int i = 0; i < m->nmodules; i++) group_of[i] = -1;
    int group = -1;
    int64_t acc = 0;
    for (int i = 0; i < m->norder; i++) {
      int mod = m->order[i];
      if (group_of[mod] >= 0) continue;
      int64_t bytes = 0;
      for (int j = 0; j < m->modules[mod].nparams; j++)
        bytes += param_bytes(&m->params[m->modules[mod].first_param + j], s->mp.param);
      if (group < 0 || (acc > 0 && acc + bytes > target)) {
        group++;
        acc = 0;
      }
      acc += bytes;
      group_of[mod] = group;
    }
    for (int i = 0; i < m->nparams; i++) {
      bucket_key k = {-1, -1, group_of[m->params[i].module]};
      bucket_of[i] = find_or_add_bucket(L, &bx, keys, k);
    }
  } else {
    bucket_matcher mt = {0};
    if (s->bucket_mode == FP_BUCKETS_LIST) matcher_init(L->a, s, &mt);
    for (int i = 0; i < m->nparams; i++) {
      const fp_param *p = &m->params[i];
      bucket_key k = {-1, p->module, -1};
      if (s->bucket_mode == FP_BUCKETS_LIST) {
        int b = matcher_find(s, &mt, p->name);
        if (b >= 0) {
          k.spec = b;
          k.module = s->buckets[b].per_module ? p->module : -1;
        }
      }
      bucket_of[i] = find_or_add_bucket(L, &bx, keys, k);
    }
    /* a bucket spec that matched nothing is almost certainly a typo */
    if (s->bucket_mode == FP_BUCKETS_LIST) {
      bool *used = fpi_alloc_array(L->a, (size_t)s->nbuckets + 1, sizeof *used);
      for (int i = 0; i < L->nbuckets; i++)
        if (keys[i].spec >= 0) used[keys[i].spec] = true;
      for (int b = 0; b < s->nbuckets; b++) {
        if (!used[b])
          return fpi_layout_error(L, false, fpi_ptr_key(L->a, s->buckets[b].ptr, "params"),
                                 "bucket '%s' matches no parameter", s->buckets[b].name);
      }
    }
  }
  L->buckets = fpi_alloc_array(L->a, (size_t)L->nbuckets, sizeof(fp_bucket));
  int *nparams_of = fpi_alloc_array(L->a, (size_t)L->nbuckets + 1, sizeof(int)); /* room each bucket needs */
  for (int i = 0; i < m->nparams; i++) nparams_of[bucket_of[i]]++;
  for (int b = 0; b < L->nbuckets; b++) {
    fp_bucket *B = &L->buckets[b];
    bucket_key k = keys[b];
    const fp_bucket_spec *bs = k.spec >= 0 ? &s->buckets[k.spec] : NULL;
    if (bs && k.module >= 0)
      B->name = fpi_sprintf(L->a, "%s.%s", bs->name, m->modules[k.module].name);
    else if (bs)
      B->name = bs->name;
    else if (k.auto_id >= 0)
      B->name = fpi_sprintf(L->a, "auto%d", k.auto_id);
    else
      B->name = m->modules[k.module].name;
    B->mp = bs ? bs->mp : s->mp;
    B->reshard = bs ? bs->reshard : s->reshard;
    B->spec = bs;
    B->offload = bs && bs->offload;
    B->fp8_gather = bs && bs->fp8_gather && !s->staged; /* the fsdp2 baseline gathers in the param dtype */
    B->module = bs ? -1 : k.module;
    B->lparams = fpi_alloc_array(L->a, (size_t)nparams_of[b], sizeof(int));
  }
  return check_bucket_names(L, keys);
}

/* ---- placements and dtypes ---------------------------------------------------- */
static bool resolve_params(fp_layout *L, const int *bucket_of) {
  const fp_model *m = L->model;
  const fp_spec *s = L->spec;
  bool ok = true;
  fp_placement_spec *repl = fpi_alloc(L->a, sizeof *repl);
  repl->kind = FP_PL_REPLICATE;
  repl->rank = -1;
  repl->ptr = s->ptr;
  for (int i = 0; i < m->nparams; i++) {
    fp_lparam *p = &L->params[i];
    const fp_param *mp = &m->params[i];
    fp_bucket *B = &L->buckets[bucket_of[i]];
    p->param = i;
    p->mp = mp;
    p->bucket = bucket_of[i];
    p->owner = -1;
    p->tab = -1;
    p->stab = -1;
    p->shard_off = p->grad_off = p->unsharded_off = p->ugrad_off = -1;
    p->rin_off = p->rout_off = p->gstage_off = p->rstage_off = -1;
    p->flat_off = -1;
    p->scale_off = -1;
    B->lparams[B->nparams++] = i;
    /* "mxfp8" weights are stored once, as MXFP8 (check_mxfp8) */
    p->main_dtype = B->mp.param == FP_E4M3 ? FP_E4M3 : mp->dtype;
    p->param_dtype = B->mp.param;
    p->reduce_dtype = B->mp.reduce;
    p->grad_dtype = B->mp.main_grad;
    bool no_shard = s->strategy == FP_NO_SHARD || matches(s->no_shard, s->nno_shard, mp->name);
    p->pl = no_shard ? repl : (B->spec && B->spec->has_placement) ? &B->spec->placement : &s->placement;
    /* one error per placement spec, not one per param that uses it */
    bool failed_before = false;
    for (int j = 0; j < i && !ok && !failed_before; j++) failed_before = L->params[j].pl == p->pl && L->params[j].slot < 0;
    /* a plug-in: its checked pieces become the built-in spec laying them out */
    if (failed_before || (p->pl->plug && !fpi_plugin_resolve(L, p))) {
      p->slot = -1;
      ok = false;
      continue;
    }
    p->impl = fp_placements[p->pl->kind];
    p->replicated = p->pl->kind == FP_PL_REPLICATE;
    if (!p->impl->layout(L, p)) {
      p->slot = -1;
      ok = false;
      continue;
    }
    if (!p->replicated) B->sharded = true;
    if (mp->requires_grad) B->trainable = true;
  }
  /* Frozen weights once, under mixed precision too (issue 31): a bucket of
   * frozen params kept whole on every rank is never updated, so after the
   * load only its compute copy is read; where the compute dtype differs
   * from the model's main dtype (bf16 compute over fp32 main weights: a
   * frozen vision tower) the main weight is stored in the compute dtype and
   * is the compute weight (finish_buckets: one copy). A refit casts from
   * the file straight into it, as the compute copy was cast before. */
  for (int b = 0; ok && b < L->nbuckets; b++) {
    fp_bucket *B = &L->buckets[b];
    if (B->trainable || B->sharded || B->offload || B->mp.param == FP_E4M3 || !fpi_dtype_is_user_float(B->mp.param))
      continue;
    for (int j = 0; j < B->nparams; j++) L->params[B->lparams[j]].main_dtype = B->mp.param;
  }
  return ok;
}

/* param_dtype "mxfp8": the bucket's weights are kept as MXFP8 and nothing
 * else - e4m3 elements plus one e8m0 scale per 32-element block of the full
 * param, one copy that is both the main and the compute weight (nothing
 * updates it, nothing gathers it: an inference layout, a frozen tower, the
 * receiving side of a transfer that keeps MXFP8). So every param of the
 * bucket must be frozen and replicated, and the bucket not offloaded. */
static bool check_mxfp8(fp_layout *L) {
  for (int b = 0; b < L->nbuckets; b++) {
    const fp_bucket *B = &L->buckets[b];
    if (B->mp.param != FP_E4M3) continue;
    const char *ptr = B->mp.param_ptr ? B->mp.param_ptr : fpi_layout_ptr(L, NULL, NULL);
    for (int j = 0; j < B->nparams; j++) {
      const fp_lparam *p = &L->params[B->lparams[j]];
      if (p->mp->requires_grad)
        return fpi_layout_error(L, false, ptr,
                               "bucket '%s' keeps its weights as MXFP8, but param '%s' requires grad: MXFP8 "
                               "weights are frozen (requires_grad false in the model); to train, gather in "
                               "MXFP8 instead (\"gather_dtype\": \"mxfp8\")",
                               B->name, p->mp->name);
      if (!p->replicated)
        return fpi_layout_error(L, false, ptr,
                               "bucket '%s' keeps its weights as MXFP8, whole on every rank, but param '%s' is "
                               "placed %s: place the bucket's params replicate (or use strategy no_shard)",
                               B->name, p->mp->name, p->impl->name);
    }
    if (B->offload)
      return fpi_layout_error(L, false, fpi_ptr_key(L->a, B->spec->ptr, "offload"), "bucket '%s' keeps its weights as MXFP8 on the device; it cannot be "
                                            "offloaded", B->name);
  }
  return true;
}

/* owned "auto": longest-processing-time bin packing of the auto-owned params'
 * main-weight bytes over the shard group, starting from the explicitly owned
 * loads; ties go to the lowest rank, so the result is deterministic. */
static int cmp_bytes_desc(const void *a, const void *b, void *ctx) {
  const fp_layout *L = ctx;
  const fp_lparam *x = &L->params[*(const int *)a], *y = &L->params[*(const int *)b];
  int64_t bx = param_bytes(x->mp, x->main_dtype), by = param_bytes(y->mp, y->main_dtype);
  if (bx != by) return bx > by ? -1 : 1;
  return x->param - y->param;
}

static void sort_with(int *v, int n, fp_layout *L) {
  /* insertion sort is too slow for big models; use a simple merge sort */
  if (n < 2) return;
  int *tmp = fpi_alloc_array(L->a, (size_t)n, sizeof(int));
  for (int w = 1; w < n; w *= 2) {
    for (int lo = 0; lo < n; lo += 2 * w) {
      int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = cmp_bytes_desc(&v[j], &v[i], L) < 0 ? v[j++] : v[i++];
      while (i < mid) tmp[k++] = v[i++];
      while (j < hi) tmp[k++] = v[j++];
    }
    memcpy(v, tmp, (size_t)n * sizeof(int));
  }
}

/* min-heap of (load, rank): the least-loaded rank, lowest rank on ties */
typedef struct {
  int64_t load, rank;
} bin;

static bool bin_less(bin a, bin b) { return a.load != b.load ? a.load < b.load : a.rank < b.rank; }

static void sift_down(bin *h, int64_t n, int64_t i) {
  for (;;) {
    int64_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && bin_less(h[l], h[m])) m = l;
    if (r < n && bin_less(h[r], h[m])) m = r;
    if (m == i) return;
    bin t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

static void pack_owned(fp_layout *L) {
  int *autos = fpi_alloc_array(L->a, (size_t)L->nparams + 1, sizeof(int));
  int nauto = 0;
  for (int i = 0; i < L->nparams; i++) {
    fp_lparam *p = &L->params[i];
    if (p->pl->kind == FP_PL_OWNED && p->owner < 0) autos[nauto++] = i;
  }
  if (nauto == 0) return;
  bin *h = fpi_alloc_array(L->a, (size_t)L->G, sizeof(bin));
  for (int64_t r = 0; r < L->G; r++) h[r] = (bin){0, r};
  for (int i = 0; i < L->nparams; i++) {
    const fp_lparam *p = &L->params[i];
    if (p->pl->kind == FP_PL_OWNED && p->owner >= 0 &&
        !fpi_add64(h[p->owner].load, param_bytes(p->mp, p->main_dtype), &h[p->owner].load))
      h[p->owner].load = INT64_MAX;
  }
  for (int64_t i = L->G / 2; i-- > 0;) sift_down(h, L->G, i);
  sort_with(autos, nauto, L);
  for (int k = 0; k < nauto; k++) {
    fp_lparam *p = &L->params[autos[k]];
    p->owner = h[0].rank;
    if (!fpi_add64(h[0].load, param_bytes(p->mp, p->main_dtype), &h[0].load)) h[0].load = INT64_MAX;
    sift_down(h, L->G, 0);
  }
}

/* ---- flat buckets ------------------------------------------------------------- */
/* A bucket can be flat when every param is shard(0) (FSDP1's flat parameter:
 * the rank's range may cut params anywhere) in one main dtype, and the policy
 * does not ask for FSDP2's per-param staging. */
static bool flat_eligible(const fp_layout *L, const fp_bucket *B) {
  if (!B->sharded || L->spec->staged) return false;
  for (int j = 0; j < B->nparams; j++) {
    const fp_lparam *p = &L->params[B->lparams[j]];
    if (p->pl->kind != FP_PL_SHARD || p->pl->dim != 0) return false;
    if (p->main_dtype != L->params[B->lparams[0]].main_dtype) return false;
  }
  return true;
}

/* an fsdp2 unit's copy-in / copy-out (layout_unit) needs the same */
static bool flat_eligible_staged(const fp_layout *L, const fp_bucket *B) {
  if (!B->sharded) return false;
  for (int j = 0; j < B->nparams; j++) {
    const fp_lparam *p = &L->params[B->lparams[j]];
    if (p->pl->kind != FP_PL_SHARD || p->pl->dim != 0) return false;
    if (p->main_dtype != L->params[B->lparams[0]].main_dtype) return false;
  }
  return true;
}

/* the flat space: each param at an FP_PARAM_ALIGN boundary of the param
 * dtype; the per-rank chunk rounded up to one too. Returns the chunk, or -1
 * on int64 overflow. */
static int64_t flat_chunk_of(const fp_layout *L, const fp_bucket *B, int64_t *offs) {
  int64_t ae = FP_PARAM_ALIGN / fpi_dtype_size(B->mp.param), at = 0, c;
  for (int j = 0; j < B->nparams; j++) {
    const fp_lparam *p = &L->params[B->lparams[j]];
    if (!fpi_align64(at, ae, &at)) return -1;
    if (offs) offs[j] = at;
    if (!fpi_add64(at, p->mp->numel, &at)) return -1;
  }
  if (!fpi_align64(fpi_ceil_div(at, L->G), ae, &c)) return -1;
  return c;
}

/* Modeled time of one forward gather and one reduction of B as the cost
 * model charges them (docs/cost-model.md): per param, every param's cast,
 * collective and scale, the collectives of at most FP_COALESCE_MAX_BYTES
 * grouped into one call as the coalesce pass does; flat, one of each over the
 * bucket's chunk. */
typedef struct {
  fp_prog P;
  fp_ir_comm comm;
  fp_hw hw;
} flat_model;

static double op_us(flat_model *fm, fp_opcode code, fp_dtype dt, fp_dtype sdt, int64_t count, fp_cost *terms) {
  fp_op op;
  memset(&op, 0, sizeof op);
  op.code = code;
  op.dtype = dt;
  op.sdtype = sdt;
  op.count = count;
  op.comm = 0;
  op.tab = -1;
  op.group = -1;
  fp_cost c = fpi_cost_terms(&fm->P, &op, &fm->hw);
  if (terms) *terms = c;
  return c.lat_us + c.bw_us;
}

/* collectives of one kind: runs of small ones are one call (largest latency
 * once + the bandwidth terms), large ones each pay their latency */
static double grouped_us(flat_model *fm, fp_opcode code, fp_dtype dt, const int64_t *counts, int n) {
  double total = 0, lat = 0, bw = 0;
  int run = 0;
  for (int j = 0; j < n; j++) {
    fp_cost c;
    op_us(fm, code, dt, dt, counts[j], &c);
    /* in double: a param near the int64 limit is reported by the storage layout */
    double bytes = (double)counts[j] * (double)fm->comm.size * (double)fpi_dtype_size(dt);
    if (bytes <= (double)FP_COALESCE_MAX_BYTES) {
      lat = run ? fmax(lat, c.lat_us) : c.lat_us;
      bw += c.bw_us;
      run++;
      continue;
    }
    total += lat + bw + c.lat_us + c.bw_us;
    lat = bw = 0;
    run = 0;
  }
  return total + lat + bw;
}

double fpi_layout_bucket_us(const fp_layout *L, const fp_bucket *B, bool flat) {
  flat_model fm;
  memset(&fm, 0, sizeof fm);
  fm.comm = (fp_ir_comm){.name = "shard", .size = L->G, .stride = 1};
  fm.P.comms = &fm.comm;
  fm.P.ncomms = 1;
  fm.P.ranks_per_node = L->spec->ranks_per_node;
  fpi_hw_from_spec(L->spec, &fm.hw);
  const fp_mp *mp = &B->mp;
  fp_dtype main = L->params[B->lparams[0]].main_dtype;
  double us = 0;
  if (flat) {
    int64_t c = flat_chunk_of(L, B, NULL);
    us += op_us(&fm, mp->param == main ? FP_OP_COPY : FP_OP_CAST, mp->param, main, c, NULL);
    us += op_us(&fm, FP_OP_ALL_GATHER, mp->param, mp->param, c, NULL);
    if (B->trainable) {
      us += op_us(&fm, FP_OP_REDUCE_SCATTER, mp->reduce, mp->reduce, c, NULL);
      us += op_us(&fm, FP_OP_SCALE, mp->main_grad, mp->main_grad, c, NULL);
    }
    return us;
  }
  int64_t *cnt = malloc(sizeof(int64_t) * (size_t)(B->nparams + 1));
  int ntrain = 0;
  FP_ASSERT(cnt);
  for (int j = 0; j < B->nparams; j++) {
    const fp_lparam *p = &L->params[B->lparams[j]];
    /* shard(0)'s chunk (p->chunk is the flat one once the bucket is flat) */
    cnt[j] = fpi_ceil_div(p->mp->shape[0], L->G) * fpi_param_inner(p->mp, 0);
    us += op_us(&fm, mp->param == main ? FP_OP_COPY : FP_OP_CAST, mp->param, main, cnt[j], NULL);
    if (p->mp->requires_grad) us += op_us(&fm, FP_OP_SCALE, mp->main_grad, mp->main_grad, cnt[j], NULL);
  }
  us += grouped_us(&fm, FP_OP_ALL_GATHER, mp->param, cnt, B->nparams);
  for (int j = 0; j < B->nparams; j++) {
    const fp_lparam *p = &L->params[B->lparams[j]];
    if (p->mp->requires_grad) cnt[ntrain++] = fpi_ceil_div(p->mp->shape[0], L->G) * fpi_param_inner(p->mp, 0);
  }
  us += grouped_us(&fm, FP_OP_REDUCE_SCATTER, mp->reduce, cnt, ntrain);
  free(cnt);
  return us;
}

/* per bucket: flat when the spec says so (an error where it cannot be), per
 * param when it says so, else whichever the cost model times faster (ties
 * stay per param) */
static bool choose_flat(fp_layout *L) {
  for (int b = 0; b < L->nbuckets; b++) {
    fp_bucket *B = &L->buckets[b];
    fp_coll_mode mode = B->spec ? B->spec->coll : L->spec->coll;
    if (B->fp8_gather) { /* MXFP8 blocks need the flat layout's 32-element-aligned chunks */
      const char *gp = fpi_ptr_key(L->a, B->spec->ptr, "gather_dtype");
      if (!B->sharded)
        return fpi_layout_error(L, false, gp, "bucket '%s' is not sharded: it gathers nothing to send as MXFP8",
                               B->name);
      if (mode == FP_COLL_PER_PARAM || !flat_eligible(L, B) || flat_chunk_of(L, B, NULL) < 0)
        return fpi_layout_error(L, false, gp,
                               "bucket '%s' cannot gather as MXFP8: it needs flat collectives (every param placed "
                               "shard on dim 0 in one main dtype, \"collectives\" not \"per_param\")",
                               B->name);
      B->flat = true;
      continue;
    }
    if (mode == FP_COLL_PER_PARAM || !B->sharded) continue;
    bool ok = flat_eligible(L, B);
    if (mode == FP_COLL_FLAT && !ok) {
      if (L->spec->staged) continue; /* a policy's staging wins over the spec */
      const char *ptr = B->spec ? fpi_ptr_key(L->a, B->spec->ptr, "collectives")
                                : fpi_ptr_key(L->a, fpi_ptr_key(L->a, fpi_layout_ptr(L, NULL, NULL), "defaults"),
                                             "collectives");
      return fpi_layout_error(L, false, ptr,
                             "bucket '%s' cannot be flat: every param must be placed shard on dim 0 in one "
                             "main dtype",
                             B->name);
    }
    if (!ok) continue;
    if (flat_chunk_of(L, B, NULL) < 0) continue; /* per param reports the overflow */
    B->flat = mode == FP_COLL_FLAT || fpi_layout_bucket_us(L, B, true) < fpi_layout_bucket_us(L, B, false);
  }
  return true;
}

/* offsets of a flat bucket: every storage is the flat space (unsharded
 * ones) or one rank's chunk of it (shard ones) */
static bool layout_flat(fp_layout *L, fp_bucket *B) {
  int64_t *offs = fpi_alloc_array(L->a, (size_t)B->nparams + 1, sizeof(int64_t));
  int64_t C = flat_chunk_of(L, B, offs), n;
  const fp_lparam *p0 = &L->params[B->lparams[0]];
  int64_t em = fpi_dtype_size(p0->main_dtype), eg = fpi_dtype_size(B->mp.main_grad), ep = fpi_dtype_size(B->mp.param),
          er = fpi_dtype_size(B->mp.reduce);
  if (C < 0 || !fpi_mul64(C, L->G, &n) || !fpi_mul64(n, 8, &n))
    return fpi_layout_error(L, true, fpi_param_ptr(L->a, L->model, p0->mp), "bucket '%s' grows past int64 byte sizes", B->name);
  n /= 8; /* G * C, with room for 8-byte elements */
  B->flat_chunk = C;
  bool cast = B->mp.reduce != B->mp.param;
  for (int j = 0; j < B->nparams; j++) {
    fp_lparam *p = &L->params[B->lparams[j]];
    bool train = p->mp->requires_grad;
    p->flat_off = offs[j];
    p->chunk = p->slot = C;
    p->padded_numel = p->mp->numel;
    p->shard_off = 0;
    p->unsharded_off = offs[j] * ep;
    p->grad_off = train ? 0 : -1;
    p->ugrad_off = train ? offs[j] * ep : -1;
    p->rout_off = train ? 0 : -1;
    p->rin_off = train && cast ? offs[j] * er : -1;
  }
  int64_t t = 0; /* C * 8 fits (checked above): aligning it cannot overflow */
  fpi_align64(C * em, FP_PARAM_ALIGN, &t), B->shard_bytes = t;
  B->unsharded_bytes = n * ep;
  if (B->trainable) {
    fpi_align64(C * eg, FP_PARAM_ALIGN, &t), B->grad_bytes = t;
    B->ugrad_bytes = n * ep;
    B->rin_bytes = cast ? n * er : 0;
    fpi_align64(C * er, FP_PARAM_ALIGN, &t), B->rout_bytes = t;
  }
  return true;
}

/* offsets of an fsdp2 unit: per-param padded shard(0) slots as usual in the
 * unsharded storages (each param its own G * chunk elements), packed end to
 * end in the shard storages, staging of G rows of the packed shards */
static bool layout_unit(fp_layout *L, fp_bucket *B) {
  const fp_lparam *p0 = &L->params[B->lparams[0]];
  int64_t em = fpi_dtype_size(p0->main_dtype), eg = fpi_dtype_size(B->mp.main_grad), ep = fpi_dtype_size(B->mp.param),
          er = fpi_dtype_size(B->mp.reduce);
  int64_t S = 0, U = 0, n, t = 0;
  for (int j = 0; j < B->nparams; j++) {
    fp_lparam *p = &L->params[B->lparams[j]];
    bool train = p->mp->requires_grad;
    int64_t a;
    if (!fpi_align64(U, FP_PARAM_ALIGN / ep, &a) || !fpi_add64(a, p->padded_numel, &U) || !fpi_add64(S, p->chunk, &n))
      return fpi_layout_error(L, true, fpi_param_ptr(L->a, L->model, p->mp), "bucket '%s' grows past int64 byte sizes", B->name);
    p->shard_off = S * em;
    p->grad_off = train ? S * eg : -1;
    p->rout_off = train ? S * er : -1;
    p->unsharded_off = a * ep;
    p->ugrad_off = train ? a * ep : -1;
    p->rin_off = -1; /* chunk_cat casts into the reduce dtype as it copies */
    p->gstage_off = S * ep; /* the param's column in the [G, S] staging */
    p->rstage_off = train ? S * er : -1;
    S = n;
  }
  if (!fpi_mul64(S, L->G, &n) || !fpi_mul64(n, 8, &t) || !fpi_mul64(U, 8, &t))
    return fpi_layout_error(L, true, fpi_param_ptr(L->a, L->model, p0->mp), "bucket '%s' grows past int64 byte sizes", B->name);
  B->unit_chunk = S;
  fpi_align64(S * em, FP_PARAM_ALIGN, &t), B->shard_bytes = t;
  fpi_align64(U * ep, FP_PARAM_ALIGN, &t), B->unsharded_bytes = t;
  B->gstage_bytes = n * ep;
  if (B->trainable) {
    fpi_align64(S * eg, FP_PARAM_ALIGN, &t), B->grad_bytes = t;
    B->ugrad_bytes = B->unsharded_bytes;
    B->rin_bytes = 0;
    fpi_align64(S * er, FP_PARAM_ALIGN, &t), B->rout_bytes = t;
    B->rstage_bytes = n * er;
  }
  return true;
}

/* ---- storage offsets -------------------------------------------------------- */
/* A storage is laid out slot by slot; `common` slots have the same offset and
 * size on every rank; owned slots are packed per owner rank after the common
 * ones. Only ranks that own something in the bucket get a cursor (a bucket
 * has few owners; the shard group may have a million ranks). Returns false on
 * int64 overflow. */
typedef struct {
  int64_t common;   /* end of the common part */
  int64_t *owner;   /* owner ranks seen so far */
  int64_t *owned;   /* their ends of the owned part (relative) */
  int nowners, cap;
  int64_t max_owned;
} storage;

static bool slot_at(storage *st, int64_t owner, int64_t bytes, int64_t *off) {
  int64_t *cur = &st->common;
  if (owner >= 0) {
    int k = 0;
    while (k < st->nowners && st->owner[k] != owner) k++;
    if (k == st->nowners) {
      FP_ASSERT(k < st->cap);
      st->owner[k] = owner;
      st->owned[k] = 0;
      st->nowners++;
    }
    cur = &st->owned[k];
  }
  int64_t a, e;
  if (!fpi_align64(*cur, FP_PARAM_ALIGN, &a) || !fpi_add64(a, bytes, &e)) return false;
  *off = a;
  *cur = e;
  if (owner >= 0 && e > st->max_owned) st->max_owned = e;
  return true;
}

static bool storage_total(storage *st, int64_t *base, int64_t *total) {
  int64_t b, t;
  if (!fpi_align64(st->common, FP_PARAM_ALIGN, &b) || !fpi_add64(b, st->max_owned, &t) ||
      !fpi_align64(t, FP_PARAM_ALIGN, &t))
    return false;
  *base = b;
  *total = t;
  return true;
}

/* Optimizer state mirrors the main grads: a trainable bucket's state buffer
 * holds fpi_optim_states planes, each the main-grad storage's element layout
 * in the state dtype (one plane is exp_avg, the next exp_avg_sq, ...), so a
 * param's state slot k covers exactly its grad slot's elements on every
 * rank, whatever the placement, and the optimizer's element-wise update
 * reads the same runs of weight, grad and state. */
static bool layout_optim(fp_layout *L) {
  int states = fpi_optim_states(L->spec->optim);
  int64_t es = fpi_dtype_size(L->spec->optim_dtype);
  for (int b = 0; b < L->nbuckets; b++) {
    fp_bucket *B = &L->buckets[b];
    B->opt_bytes = 0;
    for (int j = 0; j < B->nparams; j++) L->params[B->lparams[j]].opt_off = -1;
    if (!states || !B->trainable || B->grad_bytes <= 0) continue;
    int64_t eg = fpi_dtype_size(B->mp.main_grad), plane;
    if (!fpi_mul64(B->grad_bytes / eg, es, &plane) || !fpi_align64(plane, FP_PARAM_ALIGN, &plane) ||
        !fpi_mul64(plane, states, &B->opt_bytes))
      return fpi_layout_error(L, true, fpi_bucket_ptr(L, B), "bucket '%s': its optimizer state grows past int64 byte sizes", B->name);
    for (int j = 0; j < B->nparams; j++) {
      fp_lparam *p = &L->params[B->lparams[j]];
      if (p->mp->requires_grad && p->grad_off >= 0) p->opt_off = p->grad_off / eg * es; /* < plane: no overflow */
    }
  }
  return true;
}

/* the storages of one bucket (layout_storages) */
enum { MAIN, GRAD, UNSH, UGRAD, RIN, ROUT, GST, RST, NST };

/* param p's slots in its bucket's storages st: false (the error reported)
 * when p's own sizes do not fit int64; *ok false when a storage grows past
 * int64 with it */
static bool param_slots(fp_layout *L, storage *st, fp_lparam *p, bool *ok) {
  int64_t own = p->pl->kind == FP_PL_OWNED ? p->owner : -1;
  int64_t mb, gb, ub, rb, ob, gs, rs;
  bool train = p->mp->requires_grad;
  if (!fpi_mul64(p->slot, fpi_dtype_size(p->main_dtype), &mb) ||
      !fpi_mul64(p->slot, fpi_dtype_size(p->grad_dtype), &gb) ||
      !fpi_mul64(p->padded_numel, fpi_dtype_size(p->param_dtype), &ub) ||
      !fpi_mul64(p->padded_numel, fpi_dtype_size(p->reduce_dtype), &rb) ||
      !fpi_mul64(p->slot, fpi_dtype_size(p->reduce_dtype), &ob))
    return fpi_layout_error(L, true, fpi_param_ptr(L->a, L->model, p->mp), "parameter '%s' is too large for int64 byte sizes",
                           p->mp->name);
  bool k = slot_at(&st[MAIN], own, mb, &p->shard_off) && slot_at(&st[UNSH], -1, ub, &p->unsharded_off);
  if (k && p->main_dtype == FP_E4M3) /* MXFP8: the scales follow the elements */
    k = slot_at(&st[MAIN], -1, fpi_mx_blocks(p->padded_numel), &p->scale_off);
  if (k && train) {
    k = slot_at(&st[GRAD], own, gb, &p->grad_off) && slot_at(&st[UGRAD], -1, ub, &p->ugrad_off) &&
        slot_at(&st[ROUT], own, ob, &p->rout_off);
    if (k && p->reduce_dtype != p->param_dtype) k = slot_at(&st[RIN], -1, rb, &p->rin_off);
  }
  if (k && ((p->pl->kind == FP_PL_SHARD && (p->pl->dim > 0 || L->spec->staged)) || p->pl->kind == FP_PL_CYCLIC)) {
    int64_t n;
    k = fpi_mul64(p->chunk, L->G, &n) && fpi_mul64(n, fpi_dtype_size(p->param_dtype), &gs) &&
        fpi_mul64(n, fpi_dtype_size(p->reduce_dtype), &rs) && slot_at(&st[GST], -1, gs, &p->gstage_off);
    if (k && train) k = slot_at(&st[RST], -1, rs, &p->rstage_off);
  }
  *ok = k;
  return true;
}

static bool layout_storages(fp_layout *L) {
  for (int b = 0; b < L->nbuckets; b++) {
    fp_bucket *B = &L->buckets[b];
    if (B->flat) {
      if (!layout_flat(L, B)) return false;
      continue;
    }
    if (L->spec->staged && flat_eligible_staged(L, B)) {
      B->unit = true;
      if (!layout_unit(L, B)) return false;
      continue;
    }
    storage st[NST];
    for (int k = 0; k < NST; k++) {
      st[k] = (storage){0};
      st[k].cap = B->nparams;
      st[k].owner = fpi_alloc_array(L->a, (size_t)B->nparams, sizeof(int64_t));
      st[k].owned = fpi_alloc_array(L->a, (size_t)B->nparams, sizeof(int64_t));
    }
    const fp_lparam *last = NULL;
    for (int j = 0; j < B->nparams; j++) {
      fp_lparam *p = &L->params[B->lparams[j]];
      last = p;
      bool ok = false;
      if (!param_slots(L, st, p, &ok)) return false;
      if (!ok)
        return fpi_layout_error(L, true, fpi_param_ptr(L->a, L->model, p->mp),
                               "bucket '%s' grows past int64 byte sizes with parameter '%s'", B->name,
                               p->mp->name);
    }
    int64_t base[NST], total[NST];
    for (int k = 0; k < NST; k++)
      if (!storage_total(&st[k], &base[k], &total[k]))
        return fpi_layout_error(L, true, fpi_param_ptr(L->a, L->model, last->mp),
                               "bucket '%s' grows past int64 byte sizes with parameter '%s'", B->name,
                               last->mp->name);
    /* shift owned slots past the common part */
    for (int j = 0; j < B->nparams; j++) {
      fp_lparam *p = &L->params[B->lparams[j]];
      if (p->pl->kind != FP_PL_OWNED) continue;
      p->shard_off += base[MAIN];
      if (p->grad_off >= 0) p->grad_off += base[GRAD];
      if (p->rout_off >= 0) p->rout_off += base[ROUT];
    }
    B->shard_bytes = total[MAIN];
    B->grad_bytes = total[GRAD];
    B->unsharded_bytes = total[UNSH];
    B->ugrad_bytes = total[UGRAD];
    B->rin_bytes = total[RIN];
    B->rout_bytes = total[ROUT];
    B->gstage_bytes = total[GST];
    B->rstage_bytes = total[RST];
  }
  return true;
}

/* ---- recompute: the modules the spec's patterns name; each pattern must name one */
static bool mark_recompute(fp_layout *L) {
  const fp_model *m = L->model;
  const fp_spec *s = L->spec;
  L->recompute = fpi_alloc_array(L->a, (size_t)m->nmodules + 1, sizeof(bool));
  for (int k = 0; k < s->nrecompute; k++) {
    bool any = false;
    for (int i = 0; i < m->nmodules; i++)
      if (fnmatch(s->recompute[k], m->modules[i].name, 0) == 0) any = L->recompute[i] = true;
    if (!any)
      return fpi_layout_error(L, false, fpi_ptr_idx(L->a, fpi_ptr_key(L->a, fpi_layout_ptr(L, NULL, NULL), "recompute"), k),
                             "recompute pattern '%s' matches no module", s->recompute[k]);
  }
  return true;
}

/* ---- reshard_after_forward and forward positions ------------------------------ */
static bool finish_buckets(fp_layout *L) {
  const fp_model *m = L->model;
  const fp_spec *s = L->spec;
  int *bucket_of = fpi_alloc_array(L->a, (size_t)L->nparams + 1, sizeof(int));
  for (int i = 0; i < L->nparams; i++) bucket_of[i] = L->params[i].bucket;
  for (int b = 0; b < L->nbuckets; b++) {
    L->buckets[b].first_pos = -1;
    L->buckets[b].last_pos = -1;
  }
  for (int pos = 0; pos < m->norder; pos++) {
    const fp_module *mod = &m->modules[m->order[pos]];
    for (int j = 0; j < mod->nparams + mod->nuses; j++) {
      int pi = j < mod->nparams ? mod->first_param + j : mod->uses[j - mod->nparams];
      fp_bucket *B = &L->buckets[bucket_of[pi]];
      if (B->first_pos < 0) B->first_pos = pos;
      B->last_pos = pos;
    }
  }
  for (int b = 0; b < L->nbuckets; b++) {
    fp_bucket *B = &L->buckets[b];
    FP_ASSERT(B->first_pos >= 0); /* the front end requires every module in forward_order */
    int64_t r = B->reshard;
    const char *ptr = B->spec ? fpi_ptr_key(L->a, B->spec->ptr, "reshard_after_forward")
                              : fpi_ptr_key(L->a, fpi_ptr_key(L->a, s->ptr, "defaults"), "reshard_after_forward");
    /* ZeRO-2/DDP and fully replicated buckets keep their compute weights */
    B->persistent_unsharded =
        (s->strategy == FP_SHARD_GRAD_OP && !s->fsdp2) || s->strategy == FP_NO_SHARD || !B->sharded;
    if (B->persistent_unsharded) {
      B->reshard = 0;
      /* frozen and replicated: nothing ever writes the weights in a step,
       * so where the compute dtype is the main dtype the compute weight is
       * the main weight itself (one copy, Megatron-FSDP's no_shard for
       * frozen modules); the unsharded storage goes */
      bool one = !B->trainable && !B->sharded && !B->offload; /* (offload: the main weights are on the host) */
      for (int j = 0; one && j < B->nparams; j++) {
        const fp_lparam *p = &L->params[B->lparams[j]];
        one = p->main_dtype == p->param_dtype && p->slot == p->padded_numel && p->shard_off >= 0;
      }
      if (one) {
        B->weight_in_main = true;
        B->unsharded_bytes = 0;
        for (int j = 0; j < B->nparams; j++) L->params[B->lparams[j]].unsharded_off = L->params[B->lparams[j]].shard_off;
      }
      continue;
    }
    if (r > 0 && L->G % r != 0)
      return fpi_layout_error(L, false, ptr,
                             "reshard_after_forward %lld does not divide the shard group size %lld (bucket '%s')",
                             (long long)r, (long long)L->G, B->name);
    if (r == FP_RESHARD_TRUE || r == L->G)
      r = L->G;
    else if (r == 1)
      r = 0;
    /* the module whose backward immediately follows its forward keeps its
     * weights: resharding them would only gather them again at once */
    if (B->last_pos == m->norder - 1 && !s->fsdp2) r = 0; /* FSDP2 keeps only the root (no module) */
    B->reshard = r;
    if (r > 1 && r < L->G) {
      int64_t c;
      if (!fpi_align64(fpi_ceil_div(B->unsharded_bytes, r), FP_PARAM_ALIGN, &c))
        return fpi_layout_error(L, false, ptr, "bucket '%s' is too large", B->name);
      B->reshard_chunk = c;
      B->unsharded_bytes = c * r; /* the gather writes r whole chunks */
    }
  }
  return true;
}

/* The model as one rank of a tp group holds it: every param the model
 * shards over tp ("tp": {"kind": "shard", "dim": d}) with shape[d] / tp,
 * and the compute of the modules holding one, flops and activations, a
 * tp-th of the module's (matmuls split over tp exactly; the replicated
 * norms between them are small: docs/layout.md, "Tensor parallelism").
 * Everything after the layout plans these local shapes. tp = 1: m itself. */
static bool localize_tp(fp_layout *L, const fp_model *m, const fp_model **out) {
  int64_t T = L->spec->tp;
  *out = m;
  if (T <= 1) return true;
  fp_model *lm = fpi_alloc(L->a, sizeof *lm);
  *lm = *m;
  lm->params = fpi_alloc_array(L->a, (size_t)m->nparams + 1, sizeof *lm->params);
  lm->modules = fpi_alloc_array(L->a, (size_t)m->nmodules + 1, sizeof *lm->modules);
  memcpy(lm->modules, m->modules, (size_t)m->nmodules * sizeof *lm->modules);
  bool *split = fpi_alloc_array(L->a, (size_t)m->nmodules + 1, sizeof *split);
  for (int i = 0; i < m->nparams; i++) {
    const fp_param *p = &m->params[i];
    fp_param *q = &lm->params[i];
    *q = *p;
    if (p->tp_dim < 0) continue;
    if (p->shape[p->tp_dim] % T)
      return fpi_layout_error(L, true, fpi_ptr_key(L->a, fpi_ptr_key(L->a, fpi_param_ptr(L->a, m, p), "tp"), "dim"),
                             "param '%s': dim %d (size %" PRId64 ") is not divisible by the mesh's tp %" PRId64
                             " (%s: %s/mesh/tp)",
                             p->name, p->tp_dim, p->shape[p->tp_dim], T, L->spec->src ? L->spec->src->path : "the spec",
                             L->spec->ptr);
    q->shape[p->tp_dim] /= T;
    q->numel /= T;
    fp_module *M = &lm->modules[p->module];
    if (!split[p->module]) { /* once per module */
      split[p->module] = true;
      M->flops_fwd /= (double)T;
      M->flops_bwd /= (double)T;
      M->activation_bytes /= T;
      M->activation_bytes_checkpointed /= T;
    }
  }
  *out = lm;
  return true;
}

bool fpi_layout_build(fp_arena *a, fp_diag *d, const fp_model *m, const fp_spec *s, fp_layout *L) {
  memset(L, 0, sizeof *L);
  L->a = a;
  L->d = d;
  L->model = m;
  L->spec = s;
  if (!localize_tp(L, m, &m)) return false;
  L->model = m;
  L->T = s->tp;
  L->world = s->world_size / s->tp;
  L->G = s->strategy == FP_HYBRID_SHARD ? s->intra_node_size : L->world;
  L->R = L->world / L->G;
  L->nparams = m->nparams;
  L->params = fpi_alloc_array(a, (size_t)m->nparams + 1, sizeof(fp_lparam));
  int *bucket_of = fpi_alloc_array(a, (size_t)m->nparams + 1, sizeof(int));
  if (!assign_buckets(L, bucket_of)) return false;
  if (!resolve_params(L, bucket_of)) return false;
  if (!check_mxfp8(L)) return false;
  pack_owned(L);
  if (!fpi_layout_check_pieces(L)) return false;
  if (!choose_flat(L)) return false;
  if (!layout_storages(L)) return false;
  if (!layout_optim(L)) return false;
  if (!mark_recompute(L)) return false;
  return finish_buckets(L);
}
