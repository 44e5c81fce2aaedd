/* plugin.c - placement plug-ins and the layout check every placement passes.
 *
 * A placement's layout is, for each rank of the shard group, a list of
 * pieces of the flattened param (planner/plugin.h). Here the pieces are
 * checked - inside the param, on the alignment the placement claims, every
 * element held by exactly one rank (a placement that unshards with "none"
 * instead gives every rank the whole param, each element once) - with a
 * located error at the placement's spec object naming the placement, the
 * param, the rank and the element. The built-ins give their pieces from the
 * layout they computed (so the check runs over them too, once per distinct
 * param shape and placement); a plug-in gives them through its callbacks,
 * and its checked pieces are then expressed as the built-in placement that
 * lays them out the same way (shard on the dim whose even split they are,
 * ragged runs in rank order, owned by the one rank holding them, replicate),
 * so a plug-in param is laid out, lowered and verified by the same code as a
 * built-in one: the IR has no second kind of param. A layout the IR cannot
 * express (several runs per rank other than a shard's or blocks dealt
 * round-robin) is refused, located, rather than approximated. */
#include <stdlib.h>
#include <string.h>

#include "../layout.h"
#include "../plugin.h"

const char *const fpi_unshard_names[FPI_NUNSHARD] = {"all_gather", "all_gather_v", "broadcast", "none"};
const char *const fpi_reduce_names[FPI_NREDUCE] = {"reduce_scatter", "reduce_scatter_v", "reduce", "all_reduce"};

const fpi_plugin *fpi_plugin_find(const fpi_plugins *s, const char *name) {
  for (int k = 0; s && k < s->n; k++)
    if (!strcmp(s->v[k].name, name)) return &s->v[k];
  return NULL;
}

bool fpi_plugin_name_ok(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > FPI_PLUGIN_MAX_NAME || name[0] < 'a' || name[0] > 'z') return false;
  for (size_t k = 0; k < n; k++)
    if (!((name[k] >= 'a' && name[k] <= 'z') || (name[k] >= '0' && name[k] <= '9') || name[k] == '_')) return false;
  return true;
}

/* one piece with the rank holding it, in the order the rank stores it */
typedef struct rpiece {
  int64_t begin, count, rank, index;
} rpiece;

typedef struct pieces {
  rpiece *v;
  int64_t n, cap;
} pieces;

static void push(fp_arena *a, pieces *s, int64_t g, int64_t k, int64_t begin, int64_t count) {
  if (s->n == s->cap) {
    int64_t cap = s->cap ? 2 * s->cap : 64;
    rpiece *v = fpi_alloc_array(a, (size_t)cap, sizeof *v);
    if (s->n) memcpy(v, s->v, (size_t)s->n * sizeof *v);
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = (rpiece){begin, count, g, k};
}

static int64_t outer_of(const fp_param *p, int d) {
  int64_t n = 1;
  for (int i = 0; i < d; i++) n *= p->shape[i];
  return n;
}

/* the pieces of a built-in placement (or a resolved plug-in) from the
 * layout it computed, and what it claims */
static void builtin_pieces(const fp_layout *L, const fp_lparam *p, pieces *s, fpi_pl_layout *lay) {
  const fp_param *mp = p->mp;
  int64_t n = mp->numel;
  lay->align_elems = 1;
  switch (p->pl->kind) {
    case FP_PL_SHARD: {
      lay->unshard = FPI_UNSHARD_ALL_GATHER, lay->reduce = FPI_REDUCE_REDUCE_SCATTER;
      int d = p->pl->dim;
      int64_t S = mp->shape[d], c = fpi_ceil_div(S, L->G), inner = fpi_param_inner(mp, d), outer = outer_of(mp, d);
      for (int64_t g = 0; g < L->G; g++) {
        int64_t rows = S - g * c;
        rows = rows < 0 ? 0 : rows > c ? c : rows;
        for (int64_t o = 0; rows > 0 && o < outer; o++) push(L->a, s, g, o, o * S * inner + g * c * inner, rows * inner);
      }
      return;
    }
    case FP_PL_RAGGED:
      lay->unshard = FPI_UNSHARD_ALL_GATHER_V, lay->reduce = FPI_REDUCE_REDUCE_SCATTER_V;
      lay->align_elems = p->pl->align_elems;
      for (int64_t g = 0; g < L->G; g++)
        if (p->cuts[g + 1] > p->cuts[g]) push(L->a, s, g, 0, p->cuts[g], p->cuts[g + 1] - p->cuts[g]);
      return;
    case FP_PL_CYCLIC: {
      lay->unshard = FPI_UNSHARD_ALL_GATHER_V, lay->reduce = FPI_REDUCE_REDUCE_SCATTER_V;
      int64_t b = p->pl->block;
      for (int64_t g = 0; g < L->G; g++)
        for (int64_t k = 0, at; (at = (g + k * L->G) * b) < n; k++) push(L->a, s, g, k, at, n - at < b ? n - at : b);
      return;
    }
    case FP_PL_OWNED:
      lay->unshard = FPI_UNSHARD_BROADCAST, lay->reduce = FPI_REDUCE_TO_OWNER;
      push(L->a, s, p->owner, 0, 0, n);
      return;
    default:
      lay->unshard = FPI_UNSHARD_NONE, lay->reduce = FPI_REDUCE_ALL_REDUCE;
      for (int64_t g = 0; g < L->G; g++) push(L->a, s, g, 0, 0, n);
      return;
  }
}

static const char *who(const fp_layout *L, const fp_placement_spec *pl) {
  return pl->plugin ? fpi_sprintf(L->a, "placement plug-in '%s'", pl->plugin)
                    : fpi_sprintf(L->a, "placement '%s'", fp_placements[pl->kind]->name);
}

static int cmp_begin(const void *x, const void *y) {
  const rpiece *a = x, *b = y;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static int cmp_rank_begin(const void *x, const void *y) {
  const rpiece *a = x, *b = y;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  return a->begin < b->begin ? -1 : a->begin > b->begin;
}

/* every element of [0, n) covered once by v[0..m) (sorted by begin) */
static bool cover_once(fp_layout *L, const fp_placement_spec *pl, const fp_param *mp, rpiece *v, int64_t m,
                       bool per_rank) {
  int64_t next = 0, last_rank = -1;
  const char *w = who(L, pl), *by = per_rank ? fpi_sprintf(L->a, "rank %lld", (long long)v[0].rank) : "";
  for (int64_t k = 0; k < m; k++) {
    if (v[k].begin > next)
      return fpi_layout_error(L, false, pl->ptr, "%s: element %lld of param '%s' is held by no rank%s%s", w,
                             (long long)next, mp->name, per_rank ? " (unshard none: every rank holds it all; not " : "",
                             per_rank ? fpi_sprintf(L->a, "%s)", by) : "");
    if (v[k].begin < next && per_rank)
      return fpi_layout_error(L, false, pl->ptr,
                             "%s: element %lld of param '%s' is held twice by rank %lld (unshard none: each rank "
                             "holds each element once)",
                             w, (long long)v[k].begin, mp->name, (long long)v[k].rank);
    if (v[k].begin < next)
      return fpi_layout_error(L, false, pl->ptr, "%s: element %lld of param '%s' is held twice (rank %lld and rank %lld)",
                             w, (long long)v[k].begin, mp->name, (long long)last_rank, (long long)v[k].rank);
    next = v[k].begin + v[k].count;
    last_rank = v[k].rank;
  }
  if (next < mp->numel)
    return fpi_layout_error(L, false, pl->ptr, "%s: element %lld of param '%s' is held by no rank%s%s", w, (long long)next,
                           mp->name, per_rank ? " (unshard none: every rank holds it all; not " : "",
                           per_rank ? fpi_sprintf(L->a, "%s)", by) : "");
  return true;
}

/* the check: ranges, alignment, every element once (per rank for none) */
static bool check(fp_layout *L, const fp_lparam *p, const fpi_pl_layout *lay, pieces *s) {
  const fp_placement_spec *pl = p->pl;
  const fp_param *mp = p->mp;
  const char *w = who(L, pl);
  int64_t n = mp->numel, al = lay->align_elems;
  for (int64_t k = 0; k < s->n; k++) {
    const rpiece *e = &s->v[k];
    if (e->begin < 0 || e->count < 0 || e->begin > n || e->count > n - e->begin)
      return fpi_layout_error(L, false, pl->ptr,
                             "%s: rank %lld's piece %lld [%lld, +%lld) lies outside param '%s' of %lld elements", w,
                             (long long)e->rank, (long long)e->index, (long long)e->begin, (long long)e->count, mp->name,
                             (long long)n);
    if (e->begin % al || (e->count % al && e->begin + e->count != n))
      return fpi_layout_error(L, false, pl->ptr,
                             "%s: rank %lld's piece %lld [%lld, %lld) of param '%s' is not on the %lld-element "
                             "alignment the placement claims",
                             w, (long long)e->rank, (long long)e->index, (long long)e->begin,
                             (long long)(e->begin + e->count), mp->name, (long long)al);
  }
  /* drop empty pieces, then sort: by rank first for "none" (each rank on its own) */
  int64_t m = 0;
  for (int64_t k = 0; k < s->n; k++)
    if (s->v[k].count > 0) s->v[m++] = s->v[k];
  s->n = m;
  if (lay->unshard != FPI_UNSHARD_NONE) {
    qsort(s->v, (size_t)m, sizeof *s->v, cmp_begin);
    return cover_once(L, pl, mp, s->v, m, false);
  }
  qsort(s->v, (size_t)m, sizeof *s->v, cmp_rank_begin);
  int64_t k = 0;
  for (int64_t g = 0; g < L->G; g++) {
    int64_t k0 = k;
    while (k < m && s->v[k].rank == g) k++;
    rpiece none = {0, 0, g, 0};
    if (!cover_once(L, pl, mp, k > k0 ? &s->v[k0] : &none, k - k0, true)) return false;
  }
  return true;
}

/* ---- the check over a built layout ------------------------------------------------ */
/* what makes two params' pieces the same: placement spec, shape, owner */
typedef struct seen {
  const fp_placement_spec *pl;
  const fp_param *mp;
  int64_t owner;
} seen;

static bool same(const seen *a, const fp_lparam *p) {
  if (a->pl != p->pl || a->owner != p->owner || a->mp->ndim != p->mp->ndim) return false;
  for (int d = 0; d < p->mp->ndim; d++)
    if (a->mp->shape[d] != p->mp->shape[d]) return false;
  return true;
}

bool fpi_layout_check_pieces(fp_layout *L) {
  enum { NSEEN = 64 };
  seen memo[NSEEN];
  int nseen = 0, next = 0;
  for (int i = 0; i < L->nparams; i++) {
    const fp_lparam *p = &L->params[i];
    bool hit = false;
    for (int k = 0; k < nseen && !hit; k++) hit = same(&memo[k], p);
    if (hit) continue;
    pieces s = {0};
    fpi_pl_layout lay;
    builtin_pieces(L, p, &s, &lay);
    if (!check(L, p, &lay, &s)) return false;
    memo[next] = (seen){p->pl, p->mp, p->owner};
    next = (next + 1) % NSEEN;
    if (nseen < NSEEN) nseen++;
  }
  return true;
}

/* ---- a plug-in's layout expressed as a built-in one ------------------------------- */
static bool equal_runs(const pieces *a, const pieces *b) {
  if (a->n != b->n) return false;
  for (int64_t k = 0; k < a->n; k++)
    if (a->v[k].begin != b->v[k].begin || a->v[k].count != b->v[k].count || a->v[k].rank != b->v[k].rank) return false;
  return true;
}

/* merge each rank's consecutive pieces (begin = the previous end) into runs,
 * keeping the rank order: s sorted by (rank, index) */
static void merge_runs(fp_arena *a, const pieces *s, pieces *out) {
  for (int64_t k = 0; k < s->n; k++) {
    const rpiece *e = &s->v[k];
    if (e->count == 0) continue;
    rpiece *l = out->n ? &out->v[out->n - 1] : NULL;
    if (l && l->rank == e->rank && l->begin + l->count == e->begin)
      l->count += e->count;
    else
      push(a, out, e->rank, out->n, e->begin, e->count);
  }
}

static int cmp_rank(const void *x, const void *y) {
  const rpiece *a = x, *b = y;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

/* runs (by rank) that are blocks of one size b, the param's last block
 * shorter where b does not divide it, dealt round-robin (rank g: blocks g,
 * g+G, ...), some rank holding two or more: the cyclic_shard layout */
static bool cyclic(const fp_layout *L, const fp_param *mp, const pieces *runs, fp_placement_spec *out) {
  if (runs->n <= L->G || runs->v[0].rank != 0 || runs->v[0].begin != 0) return false;
  int64_t b = runs->v[0].count, G = L->G, n = mp->numel;
  if (b < 1 || b > n) return false;
  int64_t tail_at = (n - 1) / b * b; /* the last block's first element */
  for (int64_t k = 0, i = 0; k < runs->n; k++, i++) {
    const rpiece *e = &runs->v[k];
    if (k > 0 && e->rank != runs->v[k - 1].rank) i = 0; /* i: the run's index on its rank */
    if (e->begin != (e->rank + i * G) * b || e->count != (e->begin == tail_at ? n - tail_at : b)) return false;
  }
  out->kind = FP_PL_CYCLIC;
  out->block = b;
  return true;
}

/* the built-in spec the checked pieces are (the pieces sorted by rank) */
static bool express(fp_layout *L, fp_lparam *p, const fpi_pl_layout *lay, pieces *s, fp_placement_spec *out) {
  const fp_placement_spec *pl = p->pl;
  const char *w = who(L, pl);
  const fp_param *mp = p->mp;
  pieces runs = {0};
  qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_rank);
  merge_runs(L->a, s, &runs);
  switch (lay->unshard) {
    case FPI_UNSHARD_NONE: out->kind = FP_PL_REPLICATE; return true;
    case FPI_UNSHARD_BROADCAST:
      if (runs.n != 1 || runs.v[0].count != mp->numel)
        return fpi_layout_error(L, false, pl->ptr,
                               "%s: param '%s' is unsharded by broadcast, so one rank must hold all of it, but ranks "
                               "%lld and %lld hold pieces of it",
                               w, mp->name, (long long)runs.v[0].rank, (long long)runs.v[runs.n - 1].rank);
      out->kind = FP_PL_OWNED;
      out->rank = runs.v[0].rank;
      return true;
    case FPI_UNSHARD_ALL_GATHER_V: {
      if (cyclic(L, mp, &runs, out)) return true;
      int64_t end = 0;
      out->kind = FP_PL_RAGGED;
      out->nunits = (int)L->G;
      out->units = fpi_alloc_array(L->a, (size_t)L->G, sizeof *out->units);
      for (int64_t k = 0; k < runs.n; k++) {
        const rpiece *e = &runs.v[k];
        const rpiece *b = k > 0 ? &runs.v[k - 1] : NULL;
        if (b && e->rank == b->rank)
          return fpi_layout_error(L, false, pl->ptr,
                                 "%s: rank %lld holds the runs [%lld, %lld) and [%lld, %lld) of param '%s': several "
                                 "runs per rank lower only as blocks of one size dealt round-robin, the param's last "
                                 "block possibly shorter (all_gather_v), or as the even split of a dim (all_gather)",
                                 w, (long long)e->rank, (long long)b->begin, (long long)(b->begin + b->count),
                                 (long long)e->begin, (long long)(e->begin + e->count), mp->name);
        if (e->begin != end)
          return fpi_layout_error(L, false, pl->ptr,
                                 "%s: all_gather_v gathers the ranks' runs in rank order, but rank %lld's run of "
                                 "param '%s' begins at element %lld, not at %lld where the runs of the ranks before "
                                 "it end",
                                 w, (long long)e->rank, mp->name, (long long)e->begin, (long long)end);
        out->units[e->rank] = e->count;
        end += e->count;
      }
      return true;
    }
    default: {
      /* all_gather: the even split of some dim, padded (shard) */
      for (int d = 0; d < mp->ndim; d++) {
        fp_placement_spec cand = *out;
        cand.kind = FP_PL_SHARD;
        cand.dim = d;
        fp_lparam q = *p;
        q.pl = &cand;
        pieces want = {0}, wruns = {0};
        fpi_pl_layout ignore;
        builtin_pieces(L, &q, &want, &ignore);
        merge_runs(L->a, &want, &wruns);
        if (equal_runs(&runs, &wruns)) {
          *out = cand;
          return true;
        }
      }
      return fpi_layout_error(L, false, pl->ptr,
                             "%s: all_gather gathers equal pieces, but the pieces of param '%s' are not the even "
                             "split of any of its dims over %lld ranks (use all_gather_v for uneven runs)",
                             w, mp->name, (long long)L->G);
    }
  }
}

static const bool pairs[FPI_NUNSHARD][FPI_NREDUCE] = {
    [FPI_UNSHARD_ALL_GATHER][FPI_REDUCE_REDUCE_SCATTER] = true,
    [FPI_UNSHARD_ALL_GATHER_V][FPI_REDUCE_REDUCE_SCATTER_V] = true,
    [FPI_UNSHARD_BROADCAST][FPI_REDUCE_TO_OWNER] = true,
    [FPI_UNSHARD_NONE][FPI_REDUCE_ALL_REDUCE] = true,
};

bool fpi_plugin_resolve(fp_layout *L, fp_lparam *p) {
  const fp_placement_spec *pl = p->pl;
  const fpi_plugin *x = pl->plug;
  const fp_param *mp = p->mp;
  const char *w = who(L, pl);
  fpi_pl_param pp = {mp->name, L->model->modules[mp->module].name, mp->ndim, mp->shape, mp->numel, L->G,
                     fpi_dtype_size(p->main_dtype)};
  fpi_pl_layout lay = {1, -1, -1};
  char err[512] = "";
  if (!x->describe(x->ctx, &pp, &lay, err, sizeof err))
    return fpi_layout_error(L, false, pl->ptr, "%s: param '%s': %s", w, mp->name, err[0] ? err : "refused");
  if (lay.align_elems < 1)
    return fpi_layout_error(L, false, pl->ptr, "%s: param '%s': alignment %lld is not a positive element count", w,
                           mp->name, (long long)lay.align_elems);
  if (lay.unshard < 0 || lay.unshard >= FPI_NUNSHARD || lay.reduce < 0 || lay.reduce >= FPI_NREDUCE)
    return fpi_layout_error(L, false, pl->ptr, "%s: param '%s': unknown unshard collective %d or reduction %d", w,
                           mp->name, lay.unshard, lay.reduce);
  if (!pairs[lay.unshard][lay.reduce])
    return fpi_layout_error(L, false, pl->ptr,
                           "%s: param '%s': a param unsharded by %s is not reduced by %s (the pairs: all_gather with "
                           "reduce_scatter, all_gather_v with reduce_scatter_v, broadcast with reduce, none with "
                           "all_reduce)",
                           w, mp->name, fpi_unshard_names[lay.unshard], fpi_reduce_names[lay.reduce]);
  pieces s = {0};
  fpi_piece *buf = fpi_alloc_array(L->a, 16, sizeof *buf);
  int64_t cap = 16;
  for (int64_t g = 0; g < L->G; g++) {
    int64_t n = -1;
    if (!x->pieces(x->ctx, &pp, g, buf, cap, &n, err, sizeof err))
      return fpi_layout_error(L, false, pl->ptr, "%s: param '%s', rank %lld: %s", w, mp->name, (long long)g,
                             err[0] ? err : "refused");
    if (n > cap) {
      if (n > mp->numel) /* more pieces than elements: some are empty (and the count may be garbage) */
        return fpi_layout_error(L, false, pl->ptr,
                               "%s: param '%s': rank %lld gives %lld pieces of a param of %lld elements", w, mp->name,
                               (long long)g, (long long)n, (long long)mp->numel);
      cap = n;
      buf = fpi_alloc_array(L->a, (size_t)cap, sizeof *buf);
      if (!x->pieces(x->ctx, &pp, g, buf, cap, &n, err, sizeof err) || n > cap)
        return fpi_layout_error(L, false, pl->ptr, "%s: param '%s', rank %lld: its pieces changed between two calls",
                               w, mp->name, (long long)g);
    }
    if (n < 0)
      return fpi_layout_error(L, false, pl->ptr, "%s: param '%s', rank %lld: a negative piece count %lld", w, mp->name,
                             (long long)g, (long long)n);
    for (int64_t k = 0; k < n; k++) push(L->a, &s, g, k, buf[k].begin, buf[k].count);
  }
  if (!check(L, p, &lay, &s)) return false;
  fp_placement_spec *out = fpi_alloc(L->a, sizeof *out);
  *out = *pl;
  out->align_elems = 1;
  out->rank = -1;
  if (!express(L, p, &lay, &s, out)) return false;
  p->pl = out;
  return true;
}
