/* memplan.c - the static memory plan: a fixed arena offset for every buffer.
 *
 * Persistent device buffers are laid out first, back to back. Transient
 * buffers are then placed greedily by size, largest first (Pisarchyk & Lee's
 * greedy-by-size): each takes the lowest offset whose bytes no already-placed
 * buffer with an overlapping live range holds (each buffer's conflicting
 * ones are listed once per memory plan, so a buffer meets only the placed
 * ones live with it: O(n log n + n * live at once), not each placed buffer
 * in turn; where those lists would be too long, trees over op order answer
 * instead - one which ranges hold an op, the other which start inside a
 * range). Two live ranges that do not
 * overlap in op order are ordered by the program (this lowering runs every op
 * on one stream; the verifier re-checks happens-before over streams and
 * events). With modeled lifetimes from an earlier schedule of the step
 * (fp_pass_ctx.hint_*), two ranges whose modeled spans overlap conflict too
 * - a third tree over the spans' instants answers that - so no reuse of
 * bytes makes a stream wait for another that the modeled timeline did not
 * already order (docs/schedule.md, "memplan"). A few greedy orders are
 * tried, the smallest arena kept. The pass also computes the lower bound of
 * the ranges it placed by (the sweeps, and when no order reaches them the
 * heaviest clique of the conflicts) and the modeled peak including the
 * trainer's activations, and checks the spec's memory budget. */
#include "passes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../front.h"
#include "../../base/json.h"

typedef struct {
  int buf;
  int64_t bytes;
} item;

static int cmp_item(const void *a, const void *b) {
  const item *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return x->buf - y->buf;
}

typedef struct {
  int64_t off, end;
} span;

/* INLINE_SORT(name, T, C, BEFORE, FALLBACK) defines name(T *it, int n, C
 * ctx): a quicksort with the comparison BEFORE(x, y, ctx) inline (qsort
 * calls a function per comparison and moves records byte by byte): median
 * of three, insertion sort under 16, the smaller side first; a side that
 * recurses past 2 log2 n levels goes to FALLBACK(it, n, ctx) instead, so
 * O(n log n) always. */
#define INLINE_SORT(name, T, C, BEFORE, FALLBACK)                                      \
  static void name##_depth(T *it, int n, C ctx, int depth) {                         \
    while (n >= 16) {                                                                \
      if (depth-- <= 0) {                                                            \
        FALLBACK(it, n, ctx);                                                        \
        return;                                                                      \
      }                                                                              \
      T *a = &it[0], *m = &it[n / 2], *z = &it[n - 1], t;                            \
      if (BEFORE(m, a, ctx)) t = *m, *m = *a, *a = t; /* median of three, middle */  \
      if (BEFORE(z, m, ctx)) {                                                       \
        t = *z, *z = *m, *m = t;                                                     \
        if (BEFORE(m, a, ctx)) t = *m, *m = *a, *a = t;                              \
      }                                                                              \
      T pivot = *m;                                                                  \
      int i = 0, j = n - 1;                                                          \
      for (;;) { /* Hoare: [0, j] not after the pivot, [j + 1, n) not before it */   \
        while (BEFORE(&it[i], &pivot, ctx)) i++;                                     \
        while (BEFORE(&pivot, &it[j], ctx)) j--;                                     \
        if (i >= j) break;                                                           \
        t = it[i], it[i] = it[j], it[j] = t;                                         \
        i++, j--;                                                                    \
      }                                                                              \
      int left = j + 1, right = n - left;                                            \
      if (left < right) {                                                            \
        name##_depth(it, left, ctx, depth);                                          \
        it += left, n = right;                                                       \
      } else {                                                                       \
        name##_depth(it + left, right, ctx, depth);                                  \
        n = left;                                                                    \
      }                                                                              \
    }                                                                                \
    for (int i = 1; i < n; i++) {                                                    \
      T x = it[i];                                                                   \
      int j = i;                                                                     \
      for (; j > 0 && BEFORE(&x, &it[j - 1], ctx); j--) it[j] = it[j - 1];           \
      it[j] = x;                                                                     \
    }                                                                                \
  }                                                                                  \
  static void name(T *it, int n, C ctx) {                                            \
    int depth = 0;                                                                   \
    for (int k = n; k > 1; k >>= 1) depth += 2;                                      \
    name##_depth(it, n, ctx, depth);                                                 \
  }

/* spans by offset (equal offsets in any order: the gap scan's result is the
 * same); qsort here was half of a compile with 15,000 buckets, each placed
 * against hundreds of live spans. Past the depth: a radix sort. */
static uint64_t span_key(const void *rec, int k) {
  (void)k;
  return (uint64_t)((const span *)rec)->off;
}
#define SPAN_BEFORE(x, y, ctx) ((x)->off < (y)->off)
#define SPAN_FALLBACK(it, n, ctx) fpi_sort_records(it, sizeof *(it), n, 1, span_key)
INLINE_SORT(sort_spans, span, const void *, SPAN_BEFORE, SPAN_FALLBACK)

/* per buffer: index range into the lives array sorted by buffer */
typedef struct {
  int32_t first, n;
} ranges;

/* The placed buffers' live ranges over op order [0, n): a range [f, l] is
 * listed at the tree nodes that cover it (stab: which ranges hold op a) and
 * at the leaf of its first op, with a bitmap of the leaves where some range
 * starts, 64-ary in levels (which ranges start in (a, b]: the next marked
 * leaf is a few word scans away, so listing k starts costs O(k + levels),
 * not a walk down the tree per start). A range overlaps [a, b] iff it holds
 * a or starts in (a, b]. */
typedef struct {
  int32_t buf, next;
} entry;

#define LT_MAXLEV 6 /* 64^6 leaves: more than an int32 op index reaches */
typedef struct {
  int32_t n;                 /* leaves: a power of two >= ops */
  int32_t *cover;            /* per node: the first entry of the ranges covering it, -1 */
  int32_t *start;            /* per leaf: the first entry of the ranges starting there, -1 */
  uint64_t *bits[LT_MAXLEV]; /* level 0: a bit per leaf with a start; level k + 1: a bit per non-zero word of level k */
  int64_t nw[LT_MAXLEV];     /* words per level */
  int nlev;
  uint64_t *words; /* the levels, in one block */
  entry *pool;
  int32_t npool, cap;
} ltree;

static void lt_push(ltree *t, int32_t *head, int32_t buf) {
  if (t->npool == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 1024;
    t->pool = realloc(t->pool, (size_t)t->cap * sizeof *t->pool);
    FP_ASSERT(t->pool);
  }
  t->pool[t->npool] = (entry){buf, *head};
  *head = t->npool++;
}

static void lt_init(ltree *t, int32_t nops) {
  memset(t, 0, sizeof *t);
  t->n = 1;
  while (t->n < nops) t->n *= 2;
  t->cover = malloc(2 * (size_t)t->n * sizeof *t->cover);
  t->start = malloc((size_t)t->n * sizeof *t->start);
  int64_t total = 0;
  for (int64_t w = ((int64_t)t->n + 63) / 64;; w = (w + 63) / 64) {
    FP_ASSERT(t->nlev < LT_MAXLEV);
    t->nw[t->nlev++] = w;
    total += w;
    if (w == 1) break;
  }
  t->words = calloc((size_t)total, sizeof *t->words);
  FP_ASSERT(t->cover && t->start && t->words);
  total = 0;
  for (int l = 0; l < t->nlev; l++) t->bits[l] = t->words + total, total += t->nw[l];
  for (int64_t k = 0; k < 2 * (int64_t)t->n; k++) t->cover[k] = -1;
  for (int32_t k = 0; k < t->n; k++) t->start[k] = -1;
}

static void lt_free(ltree *t) {
  free(t->cover);
  free(t->start);
  free(t->words);
  free(t->pool);
}

static void lt_insert(ltree *t, const fp_ir_live *x, int32_t buf) {
  for (int64_t a = x->first + (int64_t)t->n, z = x->last + (int64_t)t->n + 1; a < z; a >>= 1, z >>= 1) {
    if (a & 1) lt_push(t, &t->cover[a++], buf);
    if (z & 1) lt_push(t, &t->cover[--z], buf);
  }
  lt_push(t, &t->start[x->first], buf);
  /* mark the leaf, and each level's word above it (up to a word already marked) */
  for (int64_t l = 0, i = x->first; l < t->nlev; l++, i >>= 6) {
    uint64_t bit = (uint64_t)1 << (i & 63), *w = &t->bits[l][i >> 6];
    bool had = *w != 0;
    *w |= bit;
    if (had) break;
  }
}

/* the first leaf >= i where a range starts, or -1 */
static int64_t lt_next(const ltree *t, int64_t i) {
  int l = 0;
  for (;; l++) { /* up: the first level with a marked bit at or after i in i's word */
    if (l == t->nlev || (i >> 6) >= t->nw[l]) return -1;
    uint64_t m = t->bits[l][i >> 6] & (~(uint64_t)0 << (i & 63));
    if (m) {
      i = (i & ~(int64_t)63) | __builtin_ctzll(m);
      break;
    }
    i = (i >> 6) + 1;
  }
  for (; l > 0; l--) i = (i << 6) | __builtin_ctzll(t->bits[l - 1][i]); /* down: the first marked bit of each word */
  return i;
}

/* the buffers of the ranges starting in [lo, hi] */
static void lt_starts(const ltree *t, int32_t lo, int32_t hi, void (*f)(void *, int32_t), void *ctx) {
  for (int64_t i = lt_next(t, lo); i >= 0 && i <= hi; i = lt_next(t, i + 1))
    for (int32_t e = t->start[i]; e >= 0; e = t->pool[e].next) f(ctx, t->pool[e].buf);
}

/* every buffer with a placed range overlapping [x->first, x->last] */
static void lt_query(const ltree *t, const fp_ir_live *x, void (*f)(void *, int32_t), void *ctx) {
  for (int64_t a = x->first + (int64_t)t->n; a; a >>= 1)
    for (int32_t e = t->cover[a]; e >= 0; e = t->pool[e].next) f(ctx, t->pool[e].buf);
  if (x->first < x->last) lt_starts(t, x->first + 1, x->last, f, ctx);
}

/* collects the spans of the placed buffers live with the one being placed,
 * each buffer once */
typedef struct {
  const fp_prog *p;
  int32_t *seen; /* per buffer: the item that last listed it */
  int32_t item;
  span *spans;
  int ns;
  const int64_t *off; /* per buffer: its offset in the placement being built */
} gather;

static void gather_one(void *ctx, int32_t o) {
  gather *g = ctx;
  if (g->seen[o] == g->item) return;
  g->seen[o] = g->item;
  g->spans[g->ns++] = (span){g->off[o], g->off[o] + g->p->bufs[o].bytes};
}

static int cmp_live(const void *a, const void *b) {
  const fp_ir_live *x = a, *y = b;
  if (x->buf != y->buf) return x->buf - y->buf;
  return x->first - y->first;
}

/* qsort of a permutation of lv by (buf, first, index) */
static const fp_ir_live *sort_lv;
static int cmp_perm(const void *a, const void *b) {
  int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
  int r = cmp_live(&sort_lv[i], &sort_lv[j]);
  return r ? r : (i > j) - (i < j);
}

static const char *human(fp_arena *a, int64_t b) {
  if (b >= (int64_t)1 << 30) return fpi_sprintf(a, "%.2f GiB", (double)b / (1 << 30));
  if (b >= (int64_t)1 << 20) return fpi_sprintf(a, "%.2f MiB", (double)b / (1 << 20));
  if (b >= 1024) return fpi_sprintf(a, "%.2f KiB", (double)b / 1024);
  return fpi_sprintf(a, "%lld B", (long long)b);
}

/* the trainer's activations: live from a module's forward compute op to the
 * backward that frees them (fpi_ir_activation_pairs_of), or to the end. A
 * recomputed module keeps only its saved bytes in between: its activations
 * live during its forward op and again during its backward op (which
 * recomputes them). One walk of the ops lists the compute ops; the pairs
 * and the deltas come from the list. */
static void activation_deltas(const fp_prog *p, int64_t *delta) {
  int32_t *cids = malloc(sizeof *cids * ((size_t)p->nops + 1)), nc = 0;
  FP_ASSERT(cids);
  for (int32_t i = 0; i < p->nops; i++)
    if (p->ops[i].code == FP_OP_COMPUTE) cids[nc++] = i;
  int32_t *pair = malloc(sizeof *pair * ((size_t)nc + 1)); /* positions in cids */
  FP_ASSERT(pair);
  fpi_ir_activation_pairs_of(p, cids, nc, pair);
  for (int32_t k = 0; k < nc; k++) {
    int32_t i = cids[k];
    const fp_op *op = &p->ops[i];
    if (op->module < 0) continue;
    const fp_ir_module *M = &p->mods[op->module];
    if (op->pass == FP_PASS_BWD) {
      if (M->recompute) delta[i] += M->activation_bytes, delta[i + 1] -= M->activation_bytes;
      continue;
    }
    if (op->pass != FP_PASS_FWD) continue;
    int64_t b = M->recompute ? M->saved_bytes : M->activation_bytes;
    if (M->recompute) delta[i] += M->activation_bytes, delta[i + 1] -= M->activation_bytes;
    delta[i] += b;
    delta[(pair[k] >= 0 ? cids[pair[k]] : p->nops - 1) + 1] -= b;
  }
  free(pair);
  free(cids);
}

static void report_peak(fp_pass_ctx *c, const fp_prog *p, const fp_ir_live *lv, int32_t at, int64_t need,
                        int64_t budget, int64_t act) {
  const fp_spec *s = c->L->spec;
  int64_t bycat[FP_NBUFCATS] = {0};
  int seg = p->ops[at].seg;
  /* biggest buffers live at the peak */
  int top[5] = {-1, -1, -1, -1, -1};
  for (int b = 0; b < p->nbufs; b++) {
    const fp_ir_buf *B = &p->bufs[b];
    if (B->host) continue;
    bool live = B->kind == FP_BUF_PERSISTENT;
    for (int i = 0; i < p->nlives && !live; i++)
      live = lv[i].buf == b && lv[i].first <= at && at <= lv[i].last;
    if (!live) continue;
    bycat[B->cat] += B->bytes;
    for (int k = 0; k < 5; k++) {
      if (top[k] < 0 || p->bufs[top[k]].bytes < B->bytes) {
        memmove(&top[k + 1], &top[k], sizeof(int) * (size_t)(4 - k));
        top[k] = b;
        break;
      }
    }
  }
  char cats[1024] = "", bufs[1024] = "";
  size_t n = 0;
  for (int k = 0; k < FP_NBUFCATS; k++)
    if (bycat[k] && n < sizeof cats)
      n += (size_t)snprintf(cats + n, sizeof cats - n, "%s %s, ", fpi_buf_cat_name(k), human(c->a, bycat[k]));
  if (n < sizeof cats) snprintf(cats + n, sizeof cats - n, "activations %s", human(c->a, act));
  n = 0;
  for (int k = 0; k < 5 && top[k] >= 0; k++)
    if (n < sizeof bufs)
      n += (size_t)snprintf(bufs + n, sizeof bufs - n, "%s%s (%s)", k ? ", " : "", p->bufs[top[k]].name,
                            human(c->a, p->bufs[top[k]].bytes));
  const fp_seg *S = &p->segs[seg];
  const char *where = S->module >= 0 ? fpi_sprintf(c->a, "%s(%s) of micro-batch %d", fpi_seg_name(S->kind),
                                                  p->mods[S->module].name, S->micro)
                                     : fpi_seg_name(S->kind);
  fpi_diag_json(c->d, s->src, fpi_ptr_key(c->a, s->ptr, "memory_budget_bytes"),
               "the plan needs %lld bytes (%s: arena %s + activations %s) but the budget is %lld bytes; over "
               "by %lld bytes (%s). At the peak (op %d, %s) live: %s; largest buffers: %s",
               (long long)need, human(c->a, need), human(c->a, p->arena_bytes), human(c->a, act), (long long)budget,
               (long long)(need - budget), human(c->a, need - budget), at, where, cats, bufs);
}

static int64_t sat64(__int128 v) { return v > INT64_MAX ? INT64_MAX : (int64_t)v; }

/* the arena does not fit int64: the model is too large for any machine */
static void too_big(fp_pass_ctx *c) {
  const fp_model *m = c->L->model;
  fpi_diag_json(c->d, m->src, m->ptr, "the plan's buffers need more than 2^63 bytes on one rank; "
               "the model '%s' is too large for this mesh (%lld ranks)", m->name, (long long)c->L->world);
}

/* ---- modeled lifetimes ------------------------------------------------------ */
/* Two instants closer than this (microseconds) are one: a range that starts
 * when another ends (a wait on it) must not count as overlapping it. */
#define FP_SPAN_EPS 1e-3

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* the index of the instant t among the sorted distinct instants u[0..n) */
static int32_t instant(const double *u, int32_t n, double t) {
  int32_t lo = 0, hi = n - 1;
  while (lo < hi) { /* the first u[k] >= t - eps */
    int32_t mid = lo + (hi - lo) / 2;
    if (u[mid] < t - FP_SPAN_EPS) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The hint's spans as ranges over instants, two per live range: the span in
 * this step and the same span one step later, so that a range of the step
 * meets the ranges of the next one too. A span [t0, t1) covers the instants
 * t0 .. t1 - 1 (one instant when it has no length: a range that ends at t0
 * does not meet it); a range without a span gets first = -1. Returns the
 * number of instants (the tree's leaves). */
static int32_t time_ranges(fp_pass_ctx *c, const fp_prog *p, fp_ir_live *tv) {
  int32_t n = p->nlives, nu = 0;
  double P = c->hint_step_us > 0 ? c->hint_step_us : 0;
  double *u = malloc(sizeof *u * (4 * (size_t)n + 1));
  FP_ASSERT(u);
  for (int32_t k = 0; k < n; k++) {
    double t0 = c->hint_t0[k], t1 = c->hint_t1[k];
    if (!(t0 == t0) || !(t1 == t1)) continue; /* NaN: no use on record */
    u[nu++] = t0, u[nu++] = t1, u[nu++] = t0 + P, u[nu++] = t1 + P;
  }
  qsort(u, (size_t)nu, sizeof *u, cmp_double);
  int32_t m = 0;
  for (int32_t k = 0; k < nu; k++)
    if (m == 0 || u[k] - u[m - 1] > FP_SPAN_EPS) u[m++] = u[k];
  for (int32_t k = 0; k < n; k++) {
    double t0 = c->hint_t0[k], t1 = c->hint_t1[k];
    for (int r = 0; r < 2; r++) {
      fp_ir_live *x = &tv[2 * k + r];
      x->buf = p->lives[k].buf;
      x->first = x->last = -1;
      if (!(t0 == t0) || !(t1 == t1)) continue;
      int32_t a = instant(u, m, t0 + r * P), z = instant(u, m, t1 + r * P);
      x->first = a;
      x->last = z > a ? z - 1 : a;
    }
  }
  free(u);
  return m > 0 ? m : 1;
}

/* ---- placement ---------------------------------------------------------------- */
/* Greedy placement: the transient buffers in a given order, each at the
 * lowest offset (first fit) or in the smallest gap (best fit) that no placed
 * buffer live with it holds - live at one op of program order (lv), or, with
 * modeled lifetimes, at one instant (tv). Greedy by size is Pisarchyk & Lee's
 * (arXiv:2001.03288); which order packs best depends on the step, so memplan
 * tries each and keeps the smallest arena (a handful of O(n log n) passes,
 * far cheaper than the sync pass and the simulator that follow). */
#define FP_MEMPLAN_RETRIES 16
/* the tries after the first stop once this many placed ranges were looked
 * at (a try costs the buffers times the buffers live with each): the
 * orders and retries exist to close the last percent on models of a few
 * thousand buffers; a model of 100,000 small buckets keeps its first try */
#define FP_MEMPLAN_WORK ((int64_t)20000000)
/* a placement by program order (no modeled lifetimes) stops its retries
 * after this many in a row left the smallest arena where it was. Measured
 * over the shipped examples (2026-11-28): by program order a retry lowered
 * the arena in one of eleven (deepseek-v3-16b), at the first retry, and
 * llama3-405b-tp8 ran all 16 for nothing, twice (a third of its memplan
 * time); by modeled lifetimes the retries still paid at the 10th
 * (paligemma-3b-224), so those keep all of them */
#define FP_MEMPLAN_STALE_ORDER 2
enum {
  ORDER_SIZE,          /* largest first (ties: buffer order) */
  ORDER_SIZE_BEST_FIT, /* largest first, each in the smallest gap that fits */
  ORDER_START,         /* earliest first use first (ties: largest) */
  ORDER_AREA,          /* most bytes x lifetime first */
  ORDER_SIZE_START,    /* largest first, ties: earliest first use */
  ORDER_SIZE_LATE,     /* largest first, ties: latest first use */
  NORDERS
};

typedef struct placer {
  fp_prog *p;
  const fp_ir_live *lv, *tv; /* op-order ranges, modeled spans (2 per range) or NULL */
  const ranges *rg;
  item *items;
  int nitems;
  int32_t ninst;
  int64_t dev; /* the transient buffers start after the persistent ones */
  span *spans;
  int32_t *seen;
  const struct nbrs *nb; /* the conflict graph (NULL: too many pairs; the trees answer) */
} placer;

/* items in a placement order: by key[buf] descending when key is given,
 * then cmp_item's order (larger first, then by buffer) - a total order, so
 * any sort gives the same sequence (qsort here was a twentieth of the
 * llama3-405b compile). Past the depth: qsort. */
static const double *sort_key;
static inline bool item_before(const item *x, const item *y, const double *key) {
  if (key) {
    double kx = key[x->buf], ky = key[y->buf];
    if (kx != ky) return kx > ky;
  }
  if (x->bytes != y->bytes) return x->bytes > y->bytes;
  return x->buf < y->buf;
}

static int cmp_key(const void *a, const void *b);

static void items_qsort(item *it, int n, const double *key) {
  sort_key = key;
  qsort(it, (size_t)n, sizeof *it, key ? cmp_key : cmp_item);
  sort_key = NULL;
}
INLINE_SORT(sort_items, item, const double *, item_before, items_qsort)

static int cmp_key(const void *a, const void *b) {
  const item *x = a, *y = b;
  double kx = sort_key[x->buf], ky = sort_key[y->buf];
  if (kx != ky) return kx > ky ? -1 : 1;
  return cmp_item(a, b);
}

/* sort pl->items for `order`; key: scratch per buffer */
static void order_items(placer *pl, int order, double *key) {
  if (order == ORDER_SIZE || order == ORDER_SIZE_BEST_FIT) {
    sort_items(pl->items, pl->nitems, NULL);
    return;
  }
  const fp_prog *p = pl->p;
  for (int i = 0; i < pl->nitems; i++) {
    int b = pl->items[i].buf;
    double first = INFINITY, len = 0;
    for (int32_t k = pl->rg[b].first; k < pl->rg[b].first + pl->rg[b].n; k++) {
      const fp_ir_live *x = &pl->lv[k];
      /* the modeled start and length (in instants) when known, else program order's */
      double f = x->first, l = (double)(x->last - x->first + 1);
      if (pl->tv && pl->tv[2 * k].first >= 0) f = pl->tv[2 * k].first, l = pl->tv[2 * k].last - pl->tv[2 * k].first + 1;
      if (f < first) first = f;
      len += l;
    }
    /* descending keys: earliest start = largest -first; sizes are below
     * 2^63 and starts below 2^31, so size * 2^32 + start orders by both
     * (in double: ties of size within 2^-20 relative are ties) */
    double sz = (double)p->bufs[b].bytes;
    key[b] = order == ORDER_START        ? -first
             : order == ORDER_AREA       ? sz * len
             : order == ORDER_SIZE_START ? sz * 4294967296.0 - first
                                         : sz * 4294967296.0 + first;
  }
  sort_items(pl->items, pl->nitems, key);
}

/* ---- the conflict graph ------------------------------------------------------ */
/* The pairs of transient buffers place() keeps apart - a range of one
 * overlaps a range of the other in program order or (with modeled spans)
 * at one instant - are the same in every order a memory plan tries, and
 * few (llama3-70b-tp8: 328 buffers, about 3,000 pairs, against a tree of
 * 6,000 entries built anew and asked a dozen times per buffer, per order).
 * So each buffer's neighbours are listed once per memory plan, and a
 * placement reads the placed ones from the list: the same set of spans the
 * trees give, so the same offsets (the gap scan sorts them by offset, and
 * spans of equal offset give one gap in any order). Built by a sweep of
 * each family of ranges sorted by first op (or instant); where the pairs
 * with repeats would pass FP_MEMPLAN_NBR_MAX entries (a model whose
 * buffers are nearly all live at once), there is no list and the trees
 * answer, in memory O(ranges log ops). FLEXPLAN_MEMPLAN_TREES=1 has the
 * trees answer always: tests/memplan_lists.py checks that both give every
 * example the same plan. */
#define FP_MEMPLAN_NBR_MAX(nranges) ((int64_t)32 * (nranges) + 65536)

static bool trees_forced(void) {
  const char *t = getenv("FLEXPLAN_MEMPLAN_TREES");
  return t && *t && strcmp(t, "0") != 0;
}

typedef struct nbrs {
  int32_t *first; /* per buffer: its neighbours are adj[first[b] .. first[b + 1]) */
  int32_t *adj;
} nbrs;

/* the ranges of pl's items as one family: lv (fam 0) or the spans of tv
 * (fam 1, both copies); ord gets them sorted by first, iv their records */
static int32_t family(const placer *pl, int fam, fp_ir_live *iv, uint64_t *key) {
  int32_t n = 0;
  for (int i = 0; i < pl->nitems; i++) {
    int b = pl->items[i].buf;
    for (int32_t k = pl->rg[b].first; k < pl->rg[b].first + pl->rg[b].n; k++)
      for (int r = 0; r < (fam ? 2 : 1); r++) {
        const fp_ir_live *x = fam ? &pl->tv[2 * k + r] : &pl->lv[k];
        if (x->first < 0) continue;
        iv[n] = (fp_ir_live){b, x->first, x->last};
        key[n] = (uint64_t)(uint32_t)x->first << 32 | (uint32_t)n;
        n++;
      }
  }
  fpi_sort_u64(key, NULL, n);
  return n;
}

/* every overlapping pair of a family's ranges of two buffers, once each
 * way: counted into deg (fill NULL) or written at fill[a]++ / fill[b]++;
 * false once the entries pass max */
static bool sweep_pairs(const fp_ir_live *iv, const uint64_t *key, int32_t n, int32_t *deg, int32_t *fill,
                        int32_t *adj, int64_t *total, int64_t max) {
  for (int32_t x = 0; x < n; x++) {
    const fp_ir_live *a = &iv[(uint32_t)key[x]];
    for (int32_t y = x + 1; y < n; y++) {
      const fp_ir_live *b = &iv[(uint32_t)key[y]];
      if (b->first > a->last) break;
      if (a->buf == b->buf) continue;
      if (fill) {
        adj[fill[a->buf]++] = b->buf;
        adj[fill[b->buf]++] = a->buf;
      } else if ((*total += 2) > max) {
        return false;
      } else {
        deg[a->buf]++, deg[b->buf]++;
      }
    }
  }
  return true;
}

/* pl's conflict graph in *g (false: more pairs than FP_MEMPLAN_NBR_MAX;
 * nothing is left to free then) */
static bool nbrs_build(const placer *pl, nbrs *g) {
  const fp_prog *p = pl->p;
  if (trees_forced()) return false;
  int64_t nr = 0;
  for (int i = 0; i < pl->nitems; i++) nr += pl->rg[pl->items[i].buf].n;
  int64_t cap = 2 * nr + 1, total = 0, max = FP_MEMPLAN_NBR_MAX(nr);
  if (max > INT32_MAX / 2) max = INT32_MAX / 2; /* offsets in int32 */
  fp_ir_live *iv[2] = {malloc(sizeof **iv * (size_t)cap), pl->tv ? malloc(sizeof **iv * (size_t)cap) : NULL};
  uint64_t *key[2] = {malloc(sizeof **key * (size_t)cap), pl->tv ? malloc(sizeof **key * (size_t)cap) : NULL};
  g->first = calloc((size_t)p->nbufs + 1, sizeof *g->first);
  g->adj = NULL;
  FP_ASSERT(iv[0] && key[0] && g->first && (!pl->tv || (iv[1] && key[1])));
  int32_t n[2] = {family(pl, 0, iv[0], key[0]), pl->tv ? family(pl, 1, iv[1], key[1]) : 0};
  bool ok = true;
  for (int f = 0; f < 2 && ok; f++) ok = sweep_pairs(iv[f], key[f], n[f], g->first, NULL, NULL, &total, max);
  if (ok) {
    /* degrees to offsets, the pairs written, then each list without repeats */
    int32_t *fill = malloc(sizeof *fill * ((size_t)p->nbufs + 1));
    g->adj = malloc(sizeof *g->adj * ((size_t)total + 1));
    FP_ASSERT(fill && g->adj);
    int32_t at = 0;
    for (int32_t b = 0; b < p->nbufs; b++) fill[b] = at, at += g->first[b], g->first[b] = fill[b];
    g->first[p->nbufs] = at;
    for (int f = 0; f < 2; f++) sweep_pairs(iv[f], key[f], n[f], NULL, fill, g->adj, &total, max);
    int32_t *mark = fill, m = 0; /* fill is spent: the last lister of each buffer */
    for (int32_t b = 0; b < p->nbufs; b++) mark[b] = -1;
    for (int32_t b = 0; b < p->nbufs; b++) {
      int32_t lo = g->first[b], hi = g->first[b + 1];
      g->first[b] = m;
      for (int32_t e = lo; e < hi; e++)
        if (mark[g->adj[e]] != b) mark[g->adj[e]] = b, g->adj[m++] = g->adj[e];
    }
    g->first[p->nbufs] = m;
    free(fill);
  } else {
    free(g->first);
    g->first = NULL;
  }
  for (int f = 0; f < 2; f++) free(iv[f]), free(key[f]);
  return ok;
}

/* place pl->items in their order; off: per buffer. Returns the arena's end,
 * -1 when it overflows int64 */
static int64_t place(placer *pl, bool best_fit, int64_t *off, int64_t *work) {
  fp_prog *p = pl->p;
  int64_t end = pl->dev;
  bool timed = pl->tv != NULL, trees = pl->nb == NULL;
  ltree lt, tt;
  lt_init(&lt, trees ? p->nops : 1);
  lt_init(&tt, trees && timed ? pl->ninst : 1);
  gather g = {.p = p, .seen = pl->seen, .spans = pl->spans, .off = off};
  for (int32_t b = 0; b < p->nbufs; b++) pl->seen[b] = -1;
  for (int i = 0; i < pl->nitems; i++) {
    int b = pl->items[i].buf;
    int64_t bytes = pl->items[i].bytes;
    g.item = i;
    g.ns = 0;
    if (!trees) /* the placed neighbours (seen: the item that placed them) */
      for (int32_t e = pl->nb->first[b]; e < pl->nb->first[b + 1]; e++) {
        int32_t o = pl->nb->adj[e];
        if (pl->seen[o] >= 0) g.spans[g.ns++] = (span){off[o], off[o] + p->bufs[o].bytes};
      }
    for (int32_t k = pl->rg[b].first; k < pl->rg[b].first + pl->rg[b].n && trees; k++) {
      lt_query(&lt, &pl->lv[k], gather_one, &g);
      /* this step's span and the next step's against both of every placed
       * range's: the ranges of the step before and after meet too */
      for (int r = 0; r < 2 && timed; r++)
        if (pl->tv[2 * k + r].first >= 0) lt_query(&tt, &pl->tv[2 * k + r], gather_one, &g);
    }
    int ns = g.ns;
    *work += ns + 1;
    sort_spans(pl->spans, ns, NULL);
    int64_t at = -1, lo = pl->dev, gap = INT64_MAX;
    for (int k = 0; k <= ns; k++) {
      /* the gap [lo, next span's offset) */
      int64_t hi = k < ns ? pl->spans[k].off : INT64_MAX;
      if (hi - lo >= bytes) {
        if (!best_fit || k == ns) { if (at < 0) at = lo; break; }
        if (hi - lo < gap) gap = hi - lo, at = lo;
      }
      if (k < ns && pl->spans[k].end > lo) lo = pl->spans[k].end;
    }
    if (at < 0) at = lo;
    int64_t e;
    if (!fpi_add64(at, bytes, &e)) {
      lt_free(&lt);
      lt_free(&tt);
      return -1;
    }
    off[b] = at;
    if (e > end) end = e;
    if (!trees) pl->seen[b] = i;
    for (int32_t k = pl->rg[b].first; k < pl->rg[b].first + pl->rg[b].n && trees; k++) {
      lt_insert(&lt, &pl->lv[k], b);
      for (int r = 0; r < 2 && timed; r++)
        if (pl->tv[2 * k + r].first >= 0) lt_insert(&tt, &pl->tv[2 * k + r], b);
    }
  }
  lt_free(&lt);
  lt_free(&tt);
  return end;
}

/* ---- the lower bound of a placement's ranges ------------------------------ */
/* the most bytes live at one op of pl->lv, or at one instant of pl->tv (both
 * copies: this step and the next; a buffer counted once per instant, its
 * spans merged first), the persistent bytes included; delta: nops + 2
 * scratch, left zeroed */
static int64_t sweep_bound(const placer *pl, int64_t *delta) {
  const fp_prog *p = pl->p;
  __int128 live = pl->dev, most = pl->dev;
  for (int i = 0; i < p->nlives; i++) {
    delta[pl->lv[i].first] += p->bufs[pl->lv[i].buf].bytes;
    delta[pl->lv[i].last + 1] -= p->bufs[pl->lv[i].buf].bytes;
  }
  for (int32_t i = 0; i <= p->nops; i++) {
    live += delta[i];
    delta[i] = 0;
    if (live > most) most = live;
  }
  delta[p->nops + 1] = 0;
  if (!pl->tv) return sat64(most);
  int64_t *dt = calloc((size_t)pl->ninst + 2, sizeof *dt);
  fp_ir_live *v = malloc(sizeof *v * (2 * (size_t)p->nlives + 1));
  FP_ASSERT(dt && v);
  for (int i = 0; i < pl->nitems; i++) {
    int b = pl->items[i].buf, n = 0;
    for (int32_t k = pl->rg[b].first; k < pl->rg[b].first + pl->rg[b].n; k++)
      for (int r = 0; r < 2; r++)
        if (pl->tv[2 * k + r].first >= 0) v[n++] = pl->tv[2 * k + r];
    if (n == 0) continue;
    qsort(v, (size_t)n, sizeof *v, cmp_live); /* one buffer: by first */
    int32_t a = v[0].first, z = v[0].last;
    for (int k = 1; k <= n; k++) {
      if (k < n && v[k].first <= z) {
        if (v[k].last > z) z = v[k].last;
        continue;
      }
      dt[a] += p->bufs[b].bytes;
      dt[z + 1] -= p->bufs[b].bytes;
      if (k < n) a = v[k].first, z = v[k].last;
    }
  }
  live = pl->dev;
  for (int32_t i = 0; i < pl->ninst; i++) {
    live += dt[i];
    if (live > most) most = live;
  }
  free(dt);
  free(v);
  return sat64(most);
}

/* Two buffers conflict when a range of one and a range of the other overlap
 * in program order or (with spans) at one instant: exactly what place()
 * keeps apart. The buffers of a clique of that conflict graph pairwise
 * cannot share bytes, so the heaviest clique bounds the arena from below -
 * over the same live ranges the placement honoured. The graph is the union
 * of two interval families and not an interval graph, so a sweep of either
 * family alone can fall short of it; the heaviest clique is found exactly
 * per buffer: every clique lies in a buffer's closed neighbourhood, and
 * those are small (the buffers live with one), searched by branch and bound.
 * Only cliques through a buffer that ends above the sweeps' bound are
 * searched (no other can show the arena's top is needed), with caps on the
 * work (FP_CLIQUE_NODES, FP_CLIQUE_BUDGET): any clique found is a valid
 * bound, so a capped search only makes the bound weaker, never wrong. */
#define FP_CLIQUE_NODES 4096     /* per root */
#define FP_CLIQUE_BUDGET 2000000 /* conflict tests over all roots */

static bool conflict(const placer *pl, int a, int b) {
  const fp_ir_live *lv = pl->lv, *tv = pl->tv;
  for (int32_t k = pl->rg[a].first; k < pl->rg[a].first + pl->rg[a].n; k++)
    for (int32_t l = pl->rg[b].first; l < pl->rg[b].first + pl->rg[b].n; l++) {
      if (lv[k].first <= lv[l].last && lv[l].first <= lv[k].last) return true;
      for (int r = 0; r < 2 && tv; r++)
        for (int q = 0; q < 2; q++) {
          const fp_ir_live *x = &tv[2 * k + r], *y = &tv[2 * l + q];
          if (x->first >= 0 && y->first >= 0 && x->first <= y->last && y->first <= x->last) return true;
        }
    }
  return false;
}

typedef struct clq {
  const placer *pl;
  int32_t *cand; /* candidates by depth: cand[d * cap ...] */
  int cap;
  int64_t best, nodes, tests;
} clq;

/* extend a clique of weight w by the candidates c[0..n) (heaviest first) */
static void clique_grow(clq *q, const int32_t *c, int n, int64_t w, int depth) {
  if (w > q->best) q->best = w;
  if (++q->nodes > FP_CLIQUE_NODES) return;
  int64_t rest = 0;
  for (int i = 0; i < n; i++) rest += q->pl->p->bufs[c[i]].bytes;
  for (int i = 0; i < n; i++) {
    if (w + rest <= q->best) return; /* even every candidate left cannot beat it */
    int32_t *nx = q->cand + (size_t)(depth + 1) * (size_t)q->cap;
    int m = 0;
    if (q->tests > FP_CLIQUE_BUDGET) return;
    q->tests += n - i - 1;
    for (int j = i + 1; j < n; j++)
      if (conflict(q->pl, c[i], c[j])) nx[m++] = c[j];
    clique_grow(q, nx, m, w + q->pl->p->bufs[c[i]].bytes, depth + 1);
    rest -= q->pl->p->bufs[c[i]].bytes;
  }
}

typedef struct nbr {
  int32_t *list;
  int n;
  int32_t *seen, mark;
} nbr;

static void nbr_one(void *ctx, int32_t o) {
  nbr *g = ctx;
  if (g->seen[o] == g->mark) return;
  g->seen[o] = g->mark;
  g->list[g->n++] = o;
}

/* the heaviest clique's bytes over the transient buffers of pl through a
 * buffer that ends above `above` at its offset in `off` (the others cannot
 * raise the bound past the arena's top there); pl->items are sorted by size */
static int64_t clique_bound(placer *pl, const int64_t *off, int64_t above) {
  fp_prog *p = pl->p;
  bool timed = pl->tv != NULL;
  sort_items(pl->items, pl->nitems, NULL);
  int32_t *rank = malloc(sizeof *rank * ((size_t)p->nbufs + 1));
  FP_ASSERT(rank);
  for (int32_t b = 0; b < p->nbufs; b++) rank[b] = -1;
  for (int i = 0; i < pl->nitems; i++) rank[pl->items[i].buf] = i;
  ltree lt, tt;
  lt_init(&lt, p->nops);
  lt_init(&tt, timed ? pl->ninst : 1);
  for (int i = 0; i < pl->nitems; i++) {
    int b = pl->items[i].buf;
    for (int32_t k = pl->rg[b].first; k < pl->rg[b].first + pl->rg[b].n; k++) {
      lt_insert(&lt, &pl->lv[k], b);
      for (int r = 0; r < 2 && timed; r++)
        if (pl->tv[2 * k + r].first >= 0) lt_insert(&tt, &pl->tv[2 * k + r], b);
    }
  }
  nbr g = {.list = malloc(sizeof(int32_t) * ((size_t)pl->nitems + 1)), .seen = pl->seen};
  FP_ASSERT(g.list);
  for (int32_t b = 0; b < p->nbufs; b++) pl->seen[b] = -1;
  clq q = {.pl = pl, .best = 0};
  int depth_cap = 0;
  int64_t best = 0;
  for (int i = 0; i < pl->nitems && q.tests <= FP_CLIQUE_BUDGET; i++) {
    int b = pl->items[i].buf;
    if (off[b] + p->bufs[b].bytes <= above) continue;
    g.n = 0;
    g.mark = i;
    pl->seen[b] = i;
    for (int32_t k = pl->rg[b].first; k < pl->rg[b].first + pl->rg[b].n; k++) {
      lt_query(&lt, &pl->lv[k], nbr_one, &g);
      for (int r = 0; r < 2 && timed; r++)
        if (pl->tv[2 * k + r].first >= 0) lt_query(&tt, &pl->tv[2 * k + r], nbr_one, &g);
    }
    /* the cliques through b */
    int m = 0;
    for (int j = 0; j < g.n; j++)
      if (g.list[j] != b) g.list[m++] = g.list[j];
    for (int x = 1; x < m; x++) /* item order: heaviest first */
      for (int y = x; y > 0 && rank[g.list[y]] < rank[g.list[y - 1]]; y--) {
        int32_t t = g.list[y];
        g.list[y] = g.list[y - 1], g.list[y - 1] = t;
      }
    if (m + 2 > depth_cap) {
      depth_cap = m + 2;
      free(q.cand);
      q.cand = malloc(sizeof *q.cand * (size_t)depth_cap * (size_t)(m + 1));
      q.cap = m + 1;
      FP_ASSERT(q.cand);
    }
    q.cap = m + 1;
    q.best = best - p->bufs[b].bytes;
    q.nodes = 0;
    clique_grow(&q, g.list, m, 0, 0);
    if (q.best + p->bufs[b].bytes > best) best = q.best + p->bufs[b].bytes;
  }
  free(q.cand);
  free(g.list);
  free(rank);
  lt_free(&lt);
  lt_free(&tt);
  return best;
}

/* lv (a copy of the program's live ranges) sorted by buffer, and where
 * the plan was simulated (c->hint_*) the modeled spans of each range, two
 * per range (this step, the next), in the same order in *tvp; rg[buf]
 * indexes lv. Returns the number of modeled instances (0: untimed). */
static int32_t group_ranges(fp_pass_ctx *c, const fp_prog *p, fp_ir_live *lv, fp_ir_live **tvp, ranges *rg) {
  if (p->nlives) memcpy(lv, p->lives, sizeof *lv * (size_t)p->nlives);
  bool timed = c->hint_t0 && c->hint_t1 && c->hint_n == p->nlives && p->nlives > 0;
  int32_t ninst = 0;
  *tvp = NULL;
  if (timed) {
    fp_ir_live *tv = malloc(sizeof *tv * (2 * (size_t)p->nlives + 1));
    FP_ASSERT(tv);
    ninst = time_ranges(c, p, tv);
    /* sort lv by buffer carrying each range's spans along: the key of range
     * k is (buf, first, k) - stable - and the spans move with it */
    int32_t *perm = malloc(sizeof *perm * ((size_t)p->nlives + 1));
    fp_ir_live *tmp = malloc(sizeof *tmp * (2 * (size_t)p->nlives + 1));
    FP_ASSERT(perm && tmp);
    for (int32_t k = 0; k < p->nlives; k++) perm[k] = k;
    sort_lv = lv;
    qsort(perm, (size_t)p->nlives, sizeof *perm, cmp_perm);
    sort_lv = NULL;
    for (int32_t k = 0; k < p->nlives; k++) tmp[2 * k] = tv[2 * perm[k]], tmp[2 * k + 1] = tv[2 * perm[k] + 1];
    memcpy(tv, tmp, sizeof *tv * 2 * (size_t)p->nlives);
    for (int32_t k = 0; k < p->nlives; k++) tmp[k] = lv[perm[k]];
    memcpy(lv, tmp, sizeof *lv * (size_t)p->nlives);
    free(perm);
    free(tmp);
    *tvp = tv;
  } else {
    qsort(lv, (size_t)p->nlives, sizeof *lv, cmp_live);
  }
  for (int i = 0; i < p->nlives; i++) {
    if (rg[lv[i].buf].n == 0) rg[lv[i].buf].first = i;
    rg[lv[i].buf].n++;
  }
  return ninst;
}

/* A range that ends on the rs stream in a post_backward ends when that
 * stream gets there, well after the hooks that follow: the rs stream casts
 * and reduces a layer's grads while the compute stream runs the next
 * backward. Reusing those bytes at once (for the next layer's grads, or
 * the weights it gathers) would make the next backward wait for the
 * reduction, so for placement the range is held until the end of the
 * c->hold-th post_backward after it in the micro-batch (1: double
 * buffering the unsharded grads and the reduction's staging; more where
 * the rs stream falls further behind the backward: see
 * planner/pipeline.c, memplan_next).
 * The verifier and the memory timeline use the real ranges. */
static void hold_ranges(const fp_pass_ctx *c, const fp_prog *p, fp_ir_live *lv) {
  for (int i = 0; i < p->nlives && c->hold > 0; i++) {
    const fp_op *op = &p->ops[lv[i].last];
    fp_buf_cat cat = p->bufs[lv[i].buf].cat;
    if (op->stream != FP_STREAM_RS || p->segs[op->seg].kind != FP_SEG_POST_BACKWARD ||
        (cat != FP_CAT_UNSHARDED_GRAD && cat != FP_CAT_STAGING))
      continue;
    int32_t k = op->seg;
    for (int h = 0; h < c->hold && k < p->nsegs; h++)
      for (k++; k < p->nsegs && p->segs[k].kind != FP_SEG_POST_BACKWARD; k++) {
      }
    if (k < p->nsegs && p->segs[k].micro == p->segs[op->seg].micro)
      lv[i].last = p->segs[k].first + p->segs[k].nops - 1;
  }
}

/* persistent buffers back to back (device and host arenas apart); the
 * transient ones listed in items. false: an arena past int64 */
static bool place_persistent(fp_pass_ctx *c, fp_prog *p, item *items, int *nitems, int64_t *dev, int64_t *host) {
  *dev = *host = 0;
  *nitems = 0;
  for (int b = 0; b < p->nbufs; b++) {
    fp_ir_buf *B = &p->bufs[b];
    int64_t *cur = B->host ? host : dev;
    if (B->kind == FP_BUF_PERSISTENT) {
      B->offset = *cur;
      if (!fpi_add64(*cur, B->bytes, cur) || !fpi_align64(*cur, FP_PARAM_ALIGN, cur)) {
        too_big(c);
        return false;
      }
    } else {
      FP_ASSERT(!B->host); /* host staging is not lowered yet */
      items[(*nitems)++] = (item){b, B->bytes};
    }
  }
  return true;
}

/* the next "squeaky wheel" order: the order tried last (the best of the
 * fixed ones first), its buffers above the bound first; false when that is
 * the order just tried, unchanged (it places the same again, and so would
 * every try after it: each reorders the one before) */
static bool squeaky_order(placer *pl, int order, const item *seq, const int64_t *best, const int64_t *off,
                          int64_t bound, item *next) {
  int nitems = pl->nitems;
  item *items = pl->items;
  const item *from = order == NORDERS ? seq : items;
  const int64_t *at = order == NORDERS ? best : off;
  int n = 0;
  for (int i = 0; i < nitems; i++)
    if (at[from[i].buf] + from[i].bytes > bound) next[n++] = from[i];
  for (int i = 0; i < nitems; i++)
    if (at[from[i].buf] + from[i].bytes <= bound) next[n++] = from[i];
  int same = order > NORDERS;
  for (int i = 0; i < nitems && same; i++) same = items[i].buf == next[i].buf;
  if (same) return false;
  memcpy(items, next, sizeof *items * (size_t)nitems);
  return true;
}

/* whether fixed order `order` lists the buffers as one tried before with
 * the same fit (by size and by size then start often agree): it would place
 * them the same. tried[] keeps a hash of each order's sequence. */
static bool tried_before(const placer *pl, int order, uint64_t *tried) {
  uint64_t h = FP_FNV_INIT;
  for (int i = 0; i < pl->nitems; i++) h = (h ^ (uint32_t)pl->items[i].buf) * 0x100000001b3ull; /* FNV, a buffer a step */
  tried[order] = h;
  bool dup = false;
  for (int o = 0; o < order && !dup; o++) dup = tried[o] == h && (o == ORDER_SIZE_BEST_FIT) == (order == ORDER_SIZE_BEST_FIT);
  return dup;
}

/* Transient buffers: greedy, in each of a few orders (placer), the smallest
 * arena kept; then, while it is above the bound of the ranges it honours,
 * "squeaky wheel" tries: the buffers that end above the bound go first in
 * the next try (in their order), up to FP_MEMPLAN_RETRIES times. A held
 * plan (c->hold) gets the fixed orders only: its arena is never kept
 * (planner/pipeline.c, memplan_next), only its modeled lifetimes are,
 * and the retries exist to close an arena's last percent. Sets the
 * buffers' offsets; *end is the arena's end, *bound the ranges' bound.
 * false: an arena past int64. */
static bool place_transient(fp_pass_ctx *c, placer *pl, int64_t *delta, int64_t *end, int64_t *bound) {
  fp_prog *p = pl->p;
  int nitems = pl->nitems;
  item *items = pl->items;
  int64_t *off = malloc(sizeof *off * ((size_t)p->nbufs + 1)), *best = malloc(sizeof *best * ((size_t)p->nbufs + 1));
  double *key = malloc(sizeof *key * ((size_t)p->nbufs + 1));
  item *seq = malloc(sizeof *seq * ((size_t)nitems + 1)), *next = malloc(sizeof *next * ((size_t)nitems + 1));
  FP_ASSERT(off && best && key && seq && next);
  /* the bound of the ranges placed by: the sweeps first (cheap, and often
   * reached); when no order reaches them, the heaviest clique through the
   * buffers that end above them (rarely more than the sweeps, never less) */
  *bound = sweep_bound(pl, delta);
  *end = -1;
  nbrs graph;
  pl->nb = nbrs_build(pl, &graph) ? &graph : NULL;
  bool cliqued = false, ok = true;
  int64_t work = 0;
  uint64_t tried[NORDERS]; /* per fixed order: a hash of the sequence it tried */
  int tries = NORDERS + (c->hold > 0 ? 0 : FP_MEMPLAN_RETRIES), stale = 0;
  int stale_max = c->hint_n > 0 ? FP_MEMPLAN_RETRIES : FP_MEMPLAN_STALE_ORDER;
  for (int order = 0; order < tries && (*end < 0 || (*end > *bound && work < FP_MEMPLAN_WORK)) && stale < stale_max;
       order++) {
    if (order == NORDERS && !cliqued) {
      int64_t q = pl->dev + clique_bound(pl, best, *bound);
      if (q > *bound) *bound = q;
      cliqued = true;
      if (*end <= *bound) break;
    }
    if (order < NORDERS) {
      order_items(pl, order, key);
      if (tried_before(pl, order, tried)) continue;
    } else if (!squeaky_order(pl, order, seq, best, off, *bound, next)) {
      break;
    }
    int64_t e = place(pl, order == ORDER_SIZE_BEST_FIT, off, &work);
    if (e < 0) {
      too_big(c);
      ok = false;
      break;
    }
    stale = order >= NORDERS && !(e < *end) ? stale + 1 : 0;
    if (*end < 0 || e < *end) {
      *end = e;
      for (int i = 0; i < nitems; i++) best[items[i].buf] = off[items[i].buf];
      memcpy(seq, items, sizeof *items * (size_t)nitems);
    }
  }
  for (int i = 0; ok && i < nitems; i++) p->bufs[items[i].buf].offset = best[items[i].buf];
  if (pl->nb) free(graph.first), free(graph.adj);
  pl->nb = NULL;
  free(off), free(best), free(key), free(seq), free(next);
  return ok;
}

/* lower bound and modeled peak: sweep the live bytes over op order (the
 * real ranges: holding a range longer is a choice, not a need); *act_at is
 * the op at the activations' peak */
static void memory_figures(fp_stats *st, const fp_prog *p, int64_t dev, int64_t *delta, int64_t *actd,
                           int32_t *peak_at, int32_t *act_at) {
  memset(delta, 0, sizeof *delta * ((size_t)p->nops + 2));
  for (int i = 0; i < p->nlives; i++) {
    delta[p->lives[i].first] += p->bufs[p->lives[i].buf].bytes;
    delta[p->lives[i].last + 1] -= p->bufs[p->lives[i].buf].bytes;
  }
  activation_deltas(p, actd);
  /* 128-bit sums: many buffers may share bytes, their total need not fit */
  __int128 live = dev, act = 0, lb = dev, peak = dev, act_peak = 0;
  *peak_at = *act_at = 0;
  for (int i = 0; i < p->nops; i++) {
    live += delta[i];
    act += actd[i];
    if (live > lb) lb = live;
    if (live + act > peak) {
      peak = live + act;
      *peak_at = i;
    }
    if (act > act_peak) {
      act_peak = act;
      *act_at = i;
    }
  }
  st->lower_bound_bytes = st->order_lower_bound_bytes = sat64(lb);
  st->peak_bytes = sat64(peak);
  st->peak_op = *peak_at;
  st->activation_peak = sat64(act_peak);
}

bool fpi_pass_memplan(fp_pass_ctx *c, fp_prog *p) {
  fp_stats *st = c->stats;
  bool ok = false;
  fp_ir_live *lv = malloc(sizeof *lv * ((size_t)p->nlives + 1)), *tv = NULL;
  ranges *rg = calloc((size_t)p->nbufs + 1, sizeof *rg);
  item *items = malloc(sizeof *items * ((size_t)p->nbufs + 1));
  span *spans = malloc(sizeof *spans * ((size_t)p->nbufs + 1));
  int32_t *seen = malloc(sizeof *seen * ((size_t)p->nbufs + 1));
  int64_t *delta = calloc((size_t)p->nops + 2, sizeof *delta);
  int64_t *actd = calloc((size_t)p->nops + 2, sizeof *actd);
  fp_ir_live *raw = malloc(sizeof *raw * ((size_t)p->nlives + 1));
  FP_ASSERT(lv && rg && items && spans && seen && delta && actd && raw);
  int32_t ninst = group_ranges(c, p, lv, &tv, rg);
  if (p->nlives > 0) memcpy(raw, lv, sizeof *lv * (size_t)p->nlives); /* the real ranges, sorted as lv */
  hold_ranges(c, p, lv);
  int64_t dev, host, end, bound;
  int nitems;
  if (!place_persistent(c, p, items, &nitems, &dev, &host)) goto done;
  st->persistent_bytes = dev;
  placer pl = {.p = p, .lv = lv, .tv = tv, .rg = rg, .items = items, .nitems = nitems,
               .ninst = ninst, .dev = dev, .spans = spans, .seen = seen};
  if (!place_transient(c, &pl, delta, &end, &bound)) goto done;
  /* held ranges are a choice: the bound reported is the real ranges' */
  if (c->hold > 0) {
    pl.lv = raw;
    bound = sweep_bound(&pl, delta);
  }
  p->arena_bytes = end;
  p->host_bytes = host;
  int32_t peak_at, act_at;
  memory_figures(st, p, dev, delta, actd, &peak_at, &act_at);
  st->clique_lower_bound_bytes = bound;

  int64_t budget = c->L->spec->memory_budget_bytes, need;
  /* the arena is allocated whole; the trainer's activations come on top */
  if (!fpi_add64(p->arena_bytes, st->activation_peak, &need)) need = INT64_MAX;
  /* (a held plan is only a source of modeled lifetimes for the
   * plan placed by them, never kept: it may exceed the budget) */
  if (budget > 0 && need > budget && p->nops > 0 && c->hold == 0) {
    report_peak(c, p, lv, st->activation_peak > 0 ? act_at : peak_at, need, budget, st->activation_peak);
    goto done;
  }
  ok = true;
done:
  free(raw);
  free(tv);
  free(lv);
  free(rg);
  free(items);
  free(spans);
  free(seen);
  free(delta);
  free(actd);
  return ok;
}
