/* memplan.c - the static memory plan: a fixed arena offset for every buffer.
 *
 * Persistent device buffers are laid out first, back to back. Transient
 * buffers are then placed greedily by size, largest first (Pisarchyk & Lee's
 * greedy-by-size): each takes the lowest offset whose bytes no already-placed
 * buffer with an overlapping live range holds (the placed buffers' live
 * ranges are kept in two trees over op order - one answers which ranges
 * hold an op, the other which start inside a range - so a buffer meets only
 * the placed ones live with it: O(n log n + n * live at once), not each
 * placed buffer in turn). Two live ranges that do not
 * overlap in op order are ordered by the program (this lowering runs every op
 * on one stream; the verifier re-checks happens-before over streams and
 * events). The pass also computes the lower bound - the most arena bytes live
 * at once over the step - and the modeled peak including the trainer's
 * activations, and checks the spec's memory budget. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

#include "../front.h"
#include "../json.h"

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

static int cmp_span(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* per buffer: index range into the lives array sorted by buffer */
typedef struct {
  int32_t first, n;
} ranges;

/* The placed buffers' live ranges over op order [0, n): a range [f, l] is
 * listed at the tree nodes that cover it (stab: which ranges hold op a) and
 * at the leaf of its first op, with a count per node of the ranges starting
 * under it (which ranges start in (a, b]). A range overlaps [a, b] iff it
 * holds a or starts in (a, b]. */
typedef struct {
  int32_t buf, next;
} entry;

typedef struct {
  int32_t n;           /* leaves: a power of two >= ops */
  int32_t *cover;      /* per node: the first entry of the ranges covering it, -1 */
  int32_t *start;      /* per leaf: the first entry of the ranges starting there, -1 */
  int32_t *nstart;     /* per node: ranges starting under it */
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
  t->nstart = calloc(2 * (size_t)t->n, sizeof *t->nstart);
  FP_ASSERT(t->cover && t->start && t->nstart);
  for (int64_t k = 0; k < 2 * (int64_t)t->n; k++) t->cover[k] = -1;
  for (int32_t k = 0; k < t->n; k++) t->start[k] = -1;
}

static void lt_free(ltree *t) {
  free(t->cover);
  free(t->start);
  free(t->nstart);
  free(t->pool);
}

static void lt_insert(ltree *t, const fp_ir_live *x, int32_t buf) {
  for (int64_t a = x->first + (int64_t)t->n, z = x->last + (int64_t)t->n + 1; a < z; a >>= 1, z >>= 1) {
    if (a & 1) lt_push(t, &t->cover[a++], buf);
    if (z & 1) lt_push(t, &t->cover[--z], buf);
  }
  lt_push(t, &t->start[x->first], buf);
  for (int64_t a = x->first + (int64_t)t->n; a; a >>= 1) t->nstart[a]++;
}

/* the buffers of the ranges starting in [lo, hi] under node k (leaves kl..kr) */
static void lt_starts(const ltree *t, int64_t k, int32_t kl, int32_t kr, int32_t lo, int32_t hi,
                      void (*f)(void *, int32_t), void *ctx) {
  if (kr < lo || hi < kl || t->nstart[k] == 0) return;
  if (kl == kr) {
    for (int32_t e = t->start[kl]; e >= 0; e = t->pool[e].next) f(ctx, t->pool[e].buf);
    return;
  }
  int32_t mid = kl + (kr - kl) / 2;
  lt_starts(t, 2 * k, kl, mid, lo, hi, f, ctx);
  lt_starts(t, 2 * k + 1, mid + 1, kr, lo, hi, f, ctx);
}

/* every buffer with a placed range overlapping [x->first, x->last] */
static void lt_query(const ltree *t, const fp_ir_live *x, void (*f)(void *, int32_t), void *ctx) {
  for (int64_t a = x->first + (int64_t)t->n; a; a >>= 1)
    for (int32_t e = t->cover[a]; e >= 0; e = t->pool[e].next) f(ctx, t->pool[e].buf);
  if (x->first < x->last) lt_starts(t, 1, 0, t->n - 1, x->first + 1, x->last, f, ctx);
}

/* collects the spans of the placed buffers live with the one being placed,
 * each buffer once */
typedef struct {
  const fp_prog *p;
  int32_t *seen; /* per buffer: the item that last listed it */
  int32_t item;
  span *spans;
  int ns;
} gather;

static void gather_one(void *ctx, int32_t o) {
  gather *g = ctx;
  if (g->seen[o] == g->item) return;
  g->seen[o] = g->item;
  g->spans[g->ns++] = (span){g->p->bufs[o].offset, g->p->bufs[o].offset + g->p->bufs[o].bytes};
}

static int cmp_live(const void *a, const void *b) {
  const fp_ir_live *x = a, *y = b;
  if (x->buf != y->buf) return x->buf - y->buf;
  return x->first - y->first;
}

static const char *human(fp_arena *a, int64_t b) {
  if (b >= (int64_t)1 << 30) return fp_sprintf(a, "%.2f GiB", (double)b / (1 << 30));
  if (b >= (int64_t)1 << 20) return fp_sprintf(a, "%.2f MiB", (double)b / (1 << 20));
  if (b >= 1024) return fp_sprintf(a, "%.2f KiB", (double)b / 1024);
  return fp_sprintf(a, "%lld B", (long long)b);
}

/* the trainer's activations: live from a module's forward compute op to the
 * backward that frees them (fp_ir_activation_pairs), or to the end. A
 * recomputed module keeps only its saved bytes in between: its activations
 * live during its forward op and again during its backward op (which
 * recomputes them) */
static void activation_deltas(const fp_prog *p, int64_t *delta) {
  int32_t *pair = malloc(sizeof *pair * ((size_t)p->nops + 1));
  FP_ASSERT(pair);
  fp_ir_activation_pairs(p, pair);
  for (int32_t i = 0; i < p->nops; i++) {
    const fp_op *op = &p->ops[i];
    if (op->code != FP_OP_COMPUTE || op->module < 0) continue;
    const fp_ir_module *M = &p->mods[op->module];
    if (op->pass == FP_PASS_BWD) {
      if (M->recompute) delta[i] += M->activation_bytes, delta[i + 1] -= M->activation_bytes;
      continue;
    }
    if (op->pass != FP_PASS_FWD) continue;
    int64_t b = M->recompute ? M->saved_bytes : M->activation_bytes;
    if (M->recompute) delta[i] += M->activation_bytes, delta[i + 1] -= M->activation_bytes;
    delta[i] += b;
    delta[(pair[i] >= 0 ? pair[i] : p->nops - 1) + 1] -= b;
  }
  free(pair);
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
      n += (size_t)snprintf(cats + n, sizeof cats - n, "%s %s, ", fp_buf_cat_name(k), human(c->a, bycat[k]));
  if (n < sizeof cats) snprintf(cats + n, sizeof cats - n, "activations %s", human(c->a, act));
  n = 0;
  for (int k = 0; k < 5 && top[k] >= 0; k++)
    if (n < sizeof bufs)
      n += (size_t)snprintf(bufs + n, sizeof bufs - n, "%s%s (%s)", k ? ", " : "", p->bufs[top[k]].name,
                            human(c->a, p->bufs[top[k]].bytes));
  const fp_seg *S = &p->segs[seg];
  const char *where = S->module >= 0 ? fp_sprintf(c->a, "%s(%s) of micro-batch %d", fp_seg_name(S->kind),
                                                  p->mods[S->module].name, S->micro)
                                     : fp_seg_name(S->kind);
  fp_diag_json(c->d, s->src, fp_ptr_key(c->a, s->ptr, "memory_budget_bytes"),
               "the plan needs %lld bytes (%s: arena %s + activations %s) but the budget is %lld bytes; over "
               "by %lld bytes (%s). At the peak (op %d, %s) live: %s; largest buffers: %s",
               (long long)need, human(c->a, need), human(c->a, p->arena_bytes), human(c->a, act), (long long)budget,
               (long long)(need - budget), human(c->a, need - budget), at, where, cats, bufs);
}

static int64_t sat64(__int128 v) { return v > INT64_MAX ? INT64_MAX : (int64_t)v; }

/* the arena does not fit int64: the model is too large for any machine */
static void too_big(fp_pass_ctx *c) {
  const fp_model *m = c->L->model;
  fp_diag_json(c->d, m->src, m->ptr, "the plan's buffers need more than 2^63 bytes on one rank; "
               "the model '%s' is too large for this mesh (%lld ranks)", m->name, (long long)c->L->world);
}

bool fp_pass_memplan(fp_pass_ctx *c, fp_prog *p) {
  fp_stats *st = c->stats;
  bool ok = false;
  /* live ranges grouped by buffer */
  fp_ir_live *lv = malloc(sizeof *lv * ((size_t)p->nlives + 1));
  ranges *rg = calloc((size_t)p->nbufs + 1, sizeof *rg);
  item *items = malloc(sizeof *items * ((size_t)p->nbufs + 1));
  span *spans = malloc(sizeof *spans * ((size_t)p->nbufs + 1));
  int32_t *seen = malloc(sizeof *seen * ((size_t)p->nbufs + 1));
  int64_t *delta = calloc((size_t)p->nops + 2, sizeof *delta);
  int64_t *actd = calloc((size_t)p->nops + 2, sizeof *actd);
  FP_ASSERT(lv && rg && items && spans && seen && delta && actd);
  if (p->nlives) memcpy(lv, p->lives, sizeof *lv * (size_t)p->nlives);
  /* A range that ends on the rs stream in a post_backward ends when that
   * stream gets there, well after the hooks that follow: the rs stream casts
   * and reduces a layer's grads while the compute stream runs the next
   * backward. Reusing those bytes at once would make the next backward wait
   * for the reduction, so for placement the range is held until the end of
   * the next post_backward of the micro-batch (double buffering the
   * unsharded grads; c->double_buffer, see planner/pipeline.c). The verifier
   * and the memory timeline use the real ranges. */
  for (int i = 0; i < p->nlives && c->double_buffer; i++) {
    const fp_op *op = &p->ops[lv[i].last];
    if (op->stream != FP_STREAM_RS || p->segs[op->seg].kind != FP_SEG_POST_BACKWARD ||
        p->bufs[lv[i].buf].cat != FP_CAT_UNSHARDED_GRAD)
      continue;
    int32_t k = op->seg + 1;
    while (k < p->nsegs && p->segs[k].kind != FP_SEG_POST_BACKWARD) k++;
    if (k < p->nsegs && p->segs[k].micro == p->segs[op->seg].micro)
      lv[i].last = p->segs[k].first + p->segs[k].nops - 1;
  }
  qsort(lv, (size_t)p->nlives, sizeof *lv, cmp_live);
  for (int i = 0; i < p->nlives; i++) {
    if (rg[lv[i].buf].n == 0) rg[lv[i].buf].first = i;
    rg[lv[i].buf].n++;
  }

  /* persistent buffers back to back (device and host arenas apart) */
  int64_t dev = 0, host = 0;
  int nitems = 0;
  for (int b = 0; b < p->nbufs; b++) {
    fp_ir_buf *B = &p->bufs[b];
    int64_t *cur = B->host ? &host : &dev;
    if (B->kind == FP_BUF_PERSISTENT) {
      B->offset = *cur;
      if (!fp_add64(*cur, B->bytes, cur) || !fp_align64(*cur, FP_PARAM_ALIGN, cur)) {
        too_big(c);
        goto done;
      }
    } else {
      FP_ASSERT(!B->host); /* host staging is not lowered yet */
      items[nitems++] = (item){b, B->bytes};
    }
  }
  st->persistent_bytes = dev;
  /* transient: greedy by size */
  qsort(items, (size_t)nitems, sizeof *items, cmp_item);
  int64_t end = dev;
  ltree lt;
  lt_init(&lt, p->nops);
  gather g = {.p = p, .seen = seen, .spans = spans};
  for (int32_t b = 0; b < p->nbufs; b++) seen[b] = -1;
  for (int i = 0; i < nitems; i++) {
    int b = items[i].buf;
    g.item = i;
    g.ns = 0;
    for (int32_t k = rg[b].first; k < rg[b].first + rg[b].n; k++) lt_query(&lt, &lv[k], gather_one, &g);
    int ns = g.ns;
    qsort(spans, (size_t)ns, sizeof *spans, cmp_span);
    int64_t off = dev;
    for (int k = 0; k < ns; k++) {
      if (spans[k].off >= off + items[i].bytes) break; /* fits in the gap before this span */
      if (spans[k].end > off) off = spans[k].end;
    }
    int64_t e;
    if (!fp_add64(off, items[i].bytes, &e)) {
      lt_free(&lt);
      too_big(c);
      goto done;
    }
    p->bufs[b].offset = off;
    if (e > end) end = e;
    for (int32_t k = rg[b].first; k < rg[b].first + rg[b].n; k++) lt_insert(&lt, &lv[k], b);
  }
  lt_free(&lt);
  p->arena_bytes = end;
  p->host_bytes = host;

  /* lower bound and modeled peak: sweep the live bytes over op order */
  for (int i = 0; i < p->nlives; i++) {
    delta[lv[i].first] += p->bufs[lv[i].buf].bytes;
    delta[lv[i].last + 1] -= p->bufs[lv[i].buf].bytes;
  }
  activation_deltas(p, actd);
  /* 128-bit sums: many buffers may share bytes, their total need not fit */
  __int128 live = dev, act = 0, lb = dev, peak = dev, act_peak = 0;
  int32_t peak_at = 0, act_at = 0;
  for (int i = 0; i < p->nops; i++) {
    live += delta[i];
    act += actd[i];
    if (live > lb) lb = live;
    if (live + act > peak) {
      peak = live + act;
      peak_at = i;
    }
    if (act > act_peak) {
      act_peak = act;
      act_at = i;
    }
  }
  st->lower_bound_bytes = sat64(lb);
  st->peak_bytes = sat64(peak);
  st->peak_op = peak_at;
  st->activation_peak = sat64(act_peak);

  int64_t budget = c->L->spec->memory_budget_bytes, need;
  /* the arena is allocated whole; the trainer's activations come on top */
  if (!fp_add64(p->arena_bytes, st->activation_peak, &need)) need = INT64_MAX;
  if (budget > 0 && need > budget && p->nops > 0) {
    report_peak(c, p, lv, act_peak > 0 ? act_at : peak_at, need, budget, st->activation_peak);
    goto done;
  }
  ok = true;
done:
  free(lv);
  free(rg);
  free(items);
  free(spans);
  free(seen);
  free(delta);
  free(actd);
  return ok;
}
