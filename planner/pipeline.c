/* pipeline.c - the compiler: the candidate search, in which every candidate
 * is one plain sequence - lower one training step (and give it the spec's
 * machine), the passes in order (the verifier after each under
 * FLEXPLAN_VERIFY_EACH), the simulator (modeled step time) - and the search
 * itself is one table of axes (bucket size and its layout, prefetch depth,
 * collectives, cast placement, overlap_param_gather, memplan holds) walked
 * by one keep-the-better loop, whose guards only decide. Then the kept
 * plan's memory timeline, verifier and figures (summary.c reports them). */
#include "pipeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cost.h"
#include "../base/json.h"
#include "sim.h"

static const struct {
  const char *name;
  fp_pass_fn run;
  fp_phase phase;
} passes[] = {
    {"coalesce", fpi_pass_coalesce, FP_PHASE_COALESCE},
    {"memplan", fpi_pass_memplan, FP_PHASE_MEMPLAN},
    {"sync", fpi_pass_sync, FP_PHASE_SYNC},
};

const char *const fp_phase_names[FP_NPHASES] = {
#define X(e, s) s,
    FP_PHASES(X)
#undef X
};

double fpi_phase_clock(void) {
  struct timespec t;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* phase k of c's compile ran from t0 (fpi_phase_clock) until now */
static void phase_done(fp_compiled *c, fp_phase k, double t0) {
  if (!c->times) return;
  c->times->ms[k] += fpi_phase_clock() - t0;
  c->times->runs[k]++;
}

/* ---- one candidate: lower, the passes, the simulator -------------------------- */

/* modeled lifetimes for memplan (fp_pass_ctx.hint_*): NULL, or the spans of
 * an earlier schedule of the same lowering */
typedef struct lifetimes {
  double *t0, *t1;
  int32_t n;
  double step_us;
  bool reach; /* starts held to the hook's (spans_of) */
} lifetimes;

/* What the candidate search (below) sets for the next candidate besides the
 * depths and lowering flags, which are fp_compiled's own */
typedef struct search {
  fp_arena *a;
  const fp_model *m;
  const fp_spec *spec;   /* as given */
  int64_t target;        /* the bucket size of the layout to build (0: the spec's own buckets) */
  int hold;              /* memplan's hold (fp_pass_ctx.hold): 0 but for a held plan */
  const lifetimes *hint; /* memplan by these lifetimes (NULL: by program order) */
  /* the lowering of the current depths and flags, before the passes: the
   * memory plans after the first start from copies of it (a lowering is a
   * pure function of those, so the copy is what lowering again would give;
   * fpi_prog_fork: the tables the passes never change are shared). NULL:
   * lower, and keep a copy there when the program is small enough
   * (FP_MEMPLAN_TRY_OPS) for the memory plans to be tried */
  fp_prog *lowered;
  bool tight;                /* the last plan by lifetimes packed its ranges at their bound */
  double prev;               /* the last held plan's step (plain's before the first) */
  const lifetimes *spans[2]; /* the last held plan's lifetimes: as modeled, held to their hooks */
} search;

/* FLEXPLAN_VERIFY_EACH: verify every candidate after every pass */
static bool verify_each(void) {
  const char *each = getenv("FLEXPLAN_VERIFY_EACH");
  return each && *each && strcmp(each, "0") != 0;
}

/* the most ops a program may have for memplan's candidates (and the cast
 * placement's) to be tried */
#define FP_MEMPLAN_TRY_OPS 100000

/* the verifier on c's program, timed */
static bool verify_timed(fp_pass_ctx *ctx, fp_compiled *c) {
  double t0 = fpi_phase_clock();
  bool ok = fpi_pass_verify(ctx, c->prog);
  phase_done(c, FP_PHASE_VERIFY, t0);
  return ok;
}

static void memory_figures(fp_arena *a, fp_compiled *c);

/* One candidate: lower the layout at out's depths and flags (or copy the
 * lowering kept), run the passes, simulate the step on the spec's machine */
static bool build(search *S, fp_diag *d, fp_compiled *out) {
  fp_arena *a = S->a;
  out->reach = S->hint && S->hint->reach;
  S->tight = false;
  memset(&out->stats, 0, sizeof out->stats);
  if (S->lowered) {
    out->prog = fpi_prog_fork(a, S->lowered);
  } else {
    double t0 = fpi_phase_clock();
    out->prog = fpi_lower_step(a, d, &out->layout, out->prefetch_fwd, out->prefetch_bwd,
                              (out->defer_refresh ? FP_LOWER_DEFER_REFRESH : 0) |
                                  (out->replica_each ? FP_LOWER_REPLICA_EACH : 0) |
                                  (out->prep_on_compute ? FP_LOWER_PREP_ON_COMPUTE : 0));
    phase_done(out, FP_PHASE_LOWER, t0);
    if (out->prog->nops <= FP_MEMPLAN_TRY_OPS) S->lowered = fpi_prog_fork(a, out->prog);
  }
  fpi_hw_from_spec(out->layout.spec, &out->prog->hw);
  out->prog->memory_budget_bytes = out->layout.spec->memory_budget_bytes;
  fp_pass_ctx ctx = {a, d, &out->layout, &out->stats, false, S->hold, NULL, NULL, 0, 0, NULL};
  const lifetimes *hint = S->hint;
  if (hint) ctx.hint_t0 = hint->t0, ctx.hint_t1 = hint->t1, ctx.hint_n = hint->n, ctx.hint_step_us = hint->step_us;
  /* the verifier runs on the plan the compile keeps (fpi_compile), and on
   * every candidate after every pass when FLEXPLAN_VERIFY_EACH is set (the
   * test suite sets it) */
  bool every = verify_each();
  if (every && !verify_timed(&ctx, out)) return false;
  for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++) {
    double t0 = fpi_phase_clock();
    bool ok = passes[i].run(&ctx, out->prog);
    phase_done(out, passes[i].phase, t0);
    if (!ok) return false;
    if (every && !verify_timed(&ctx, out)) return false;
  }
  /* the modeled step on the spec's machine, and the memory timeline */
  const fp_spec *s = out->layout.spec;
  double t0 = fpi_phase_clock();
  bool finite = fpi_simulate(a, out->prog, &out->prog->hw, &out->sim);
  phase_done(out, FP_PHASE_SIMULATE, t0);
  out->path_reuses = !ctx.reuse_waits;
  for (int32_t k = 0; k < out->sim.npath_waits && !out->path_reuses; k++)
    out->path_reuses = ctx.reuse_waits[out->sim.path_waits[k]];
  if (!finite) {
    /* the spec's machine is valid (positive numbers) but so slow that a
     * modeled time overflows */
    fpi_diag_json(d, s->src, s->src ? fpi_ptr_key(a, s->ptr, "hardware") : "",
                 "the modeled step time on this hardware overflows (it is not a finite number): the rates are "
                 "too small for the model's work");
    return false;
  }
  /* the device holds the whole arena all step (persistent buffers first)
   * and the trainer's activations on top: the most the rank holds is the
   * arena plus the activations at their peak, never below the arena. The
   * timeline's peak (memtl->peak_bytes, the bytes live at one instant) is
   * what the viewers draw. */
  if (!fpi_add64(out->prog->arena_bytes, out->stats.activation_peak, &out->stats.peak_bytes))
    out->stats.peak_bytes = INT64_MAX;
  /* the memory timeline and the lower bound: for a plan by lifetimes now
   * (whether a tighter packing exists), else for the plan kept (fpi_compile) */
  out->prog->memtl = NULL;
  if (hint) {
    memory_figures(a, out);
    S->tight = out->prog->arena_bytes <= out->stats.lower_bound_bytes;
  }
  return true;
}

/* c's modeled memory timeline and the summary's lower bound: the most arena
 * bytes (and arena + activation bytes) live at once as the step runs. The
 * bound is over the ranges the placement honours: buffers live at one op of
 * program order, or at one instant of the modeled timeline (two buffers
 * sharing bytes are ordered, so never live at one instant), cannot share
 * bytes; the larger of the sweeps and memplan's clique */
static void memory_figures(fp_arena *a, fp_compiled *c) {
  if (c->prog->memtl) return;
  double t0 = fpi_phase_clock();
  c->prog->memtl = fpi_sim_memory(a, c->prog, &c->sim);
  phase_done(c, FP_PHASE_MEMORY, t0);
  fp_stats *st = &c->stats;
  st->lower_bound_bytes = c->prog->memtl->lower_bound_bytes;
  if (st->order_lower_bound_bytes > st->lower_bound_bytes) st->lower_bound_bytes = st->order_lower_bound_bytes;
  if (st->clique_lower_bound_bytes > st->lower_bound_bytes) st->lower_bound_bytes = st->clique_lower_bound_bytes;
}

/* The modeled lifetimes of c's live ranges for memplan (fpi_sim_live_spans).
 * With `reach`, a range starts no earlier than the trainer reached the hook
 * that opens it - the end of the last compute-stream op before its first op:
 * a gather the ag stream ran early only because nothing held it back (no
 * reuse of bytes ordered it) may as well wait for that, and so share bytes
 * with what the trainer freed before the hook (the prefetch depth's bound,
 * as FSDP2 issues gathers in the hook). */
static lifetimes *spans_of(fp_arena *a, const fp_compiled *c, bool reach) {
  lifetimes *h = fpi_alloc(a, sizeof *h);
  const fp_prog *P = c->prog;
  h->n = P->nlives;
  h->t0 = fpi_alloc_array(a, (size_t)h->n + 1, sizeof *h->t0);
  h->t1 = fpi_alloc_array(a, (size_t)h->n + 1, sizeof *h->t1);
  h->step_us = c->sim.step_us;
  h->reach = reach;
  fpi_sim_live_spans(P, &c->sim, h->t0, h->t1);
  if (!reach) return h;
  double *at = malloc(sizeof *at * ((size_t)P->nops + 1)), r = -INFINITY;
  FP_ASSERT(at);
  for (int32_t i = 0; i < P->nops; i++) {
    at[i] = r;
    if (P->ops[i].stream == FP_STREAM_COMPUTE && fpi_op_class(P->ops[i].code) != FP_OPC_SYNC) r = fmax(r, c->sim.end_us[i]);
  }
  for (int32_t k = 0; k < h->n; k++)
    if (h->t0[k] == h->t0[k]) h->t0[k] = fmin(h->t1[k], fmax(h->t0[k], at[P->lives[k].first]));
  free(at);
  return h;
}

/* ---- which candidate is kept ----------------------------------------------- */
/* Of plans within FP_STEP_SLACK of the least modeled step, the smallest arena
 * (so a second buffer that buys no modeled time is not kept) */
#define FP_STEP_SLACK 1e-3
/* whether c's peak (the arena, persistent buffers included, plus the
 * activations at their peak) fits the hardware's device memory */
static bool fits_device(const fp_compiled *c) {
  int64_t hbm = c->prog->hw.hbm_bytes;
  return hbm <= 0 || c->stats.peak_bytes <= hbm;
}

/* c beats best: a plan that fits the hardware's device memory beats one that
 * does not (with a budget, plans over it never get here), then the modeled
 * step (FP_STEP_SLACK), then the arena */
static bool better(const fp_compiled *c, const fp_compiled *best) {
  bool cf = fits_device(c), bf = fits_device(best);
  if (cf != bf) return cf;
  double s = c->sim.step_us, t = best->sim.step_us;
  if (s < t * (1 - FP_STEP_SLACK)) return true;
  if (t < s * (1 - FP_STEP_SLACK)) return false;
  return c->prog->arena_bytes < best->prog->arena_bytes;
}

/* c beats best on the modeled step alone, a tie going to c (tried later:
 * the shallower depth, the smaller buckets) */
static bool faster(const fp_compiled *c, const fp_compiled *best) {
  return c->sim.step_us <= best->sim.step_us * (1 + 1e-9);
}

/* A candidate that lost (or failed half way) gives its op array back to the
 * arena now - the largest thing a lowering makes, in a chunk of its own once
 * over 64 KiB - instead of holding it until the compile ends; never the
 * program of `keep`, which a failed candidate may still share. */
static void drop(fp_arena *a, fp_compiled *c, const fp_compiled *keep) {
  if (!c->prog || (keep && c->prog == keep->prog) || !c->prog->ops) return;
  fpi_arena_release(a, c->prog->ops);
  c->prog->ops = NULL;
}

/* ---- the candidate search: a table of axes --------------------------------- */
/* Each axis is one choice the compile makes by building candidates and
 * keeping the better. The axes nest in the order of the table (the first
 * outermost), so each candidate of an axis is the best of the axes after it.
 * An axis's `next` is its guard: it readies value i of it (in c, or in the
 * search's state; the values in the order tried), seen the best kept so far
 * (NULL: none yet), and decides - build it (TRY), pass it over (SKIP), end
 * the axis (STOP), or build it only to lend what it shows to the values
 * after it, never to be kept (LEND: `lent` then takes that, and decides
 * whether the axis goes on). A guard builds nothing: the one loop
 * (search_axes) builds each value - the axis's own step first where it has
 * one (`open`: the bucket size's layout), then the axes after it, then one
 * candidate (build) - so that a candidate is only tried where its guard
 * says it can pay. Where values after the first need a first candidate to
 * compare with, the first reports its errors; where each is tried on its
 * own (each_alone), the last reports them if none before it was built. */
enum { TRY, SKIP, STOP, LEND };
typedef struct axis {
  const char *name, *why;
  int (*count)(const search *S, const fp_compiled *c); /* the values it has */
  bool each_alone;
  int (*next)(search *S, fp_compiled *c, const fp_compiled *best, int i);
  bool (*open)(search *S, fp_diag *d, fp_compiled *c);      /* NULL: none */
  int (*lent)(search *S, const fp_compiled *c, bool built); /* after a LEND: TRY (go on) or STOP */
  bool (*wins)(const fp_compiled *c, const fp_compiled *best); /* c is kept over best */
} axis;

/* Each candidate after the first costs the passes and the simulator again.
 * They are tried only where they can pay: when the best leaves more than
 * FP_MEMPLAN_TRY_EXPOSED of the step exposed (below that, no memory plan or
 * cast placement can buy more than that share), and on programs of at most
 * FP_MEMPLAN_TRY_OPS ops (larger ones - 100,000 one-param buckets, 2.2M ops;
 * DeepSeek-V3 with every expert its own unit, 162k ops - keep the first:
 * there the candidates tripled the compile and bought no modeled time). */
#define FP_MEMPLAN_TRY_EXPOSED 0.02
#define FP_MEMPLAN_HOLD_MAX 4
static bool exposed_over(const fp_compiled *c, double share) { return c->sim.exposed_comm_us > share * c->sim.step_us; }

/* prefetch depths: as given, or "auto" - from the deepest FP_PREFETCH_AUTO_MAX
 * down to 0. With a budget the first (deepest) whose plan fits it; without
 * one, the least modeled step (`faster`: the shallowest of equals, deeper
 * buys nothing then but memory). A depth that does not fit is passed over;
 * if even depth 0 does not fit, its error (what is live at the peak) is the
 * user's. */
static bool depth_auto(const fp_spec *s) { return s->prefetch_fwd == FP_PREFETCH_AUTO || s->prefetch_bwd == FP_PREFETCH_AUTO; }
static int depth_count(const search *S, const fp_compiled *c) {
  (void)S;
  return depth_auto(c->layout.spec) ? FP_PREFETCH_AUTO_MAX + 1 : 1;
}
static int depth_next(search *S, fp_compiled *c, const fp_compiled *best, int i) {
  (void)S;
  const fp_spec *s = c->layout.spec;
  if (best && s->memory_budget_bytes > 0) return STOP;
  int k = FP_PREFETCH_AUTO_MAX - i;
  c->prefetch_fwd = s->prefetch_fwd == FP_PREFETCH_AUTO ? k : s->prefetch_fwd;
  c->prefetch_bwd = s->prefetch_bwd == FP_PREFETCH_AUTO ? k : s->prefetch_bwd;
  return TRY;
}

static int two(const search *S, const fp_compiled *c) {
  (void)S, (void)c;
  return 2;
}

/* whether the lowering can defer hybrid replicas' all-reduce to the step's
 * last micro-batch (lower.c defer_replica_reduce) for some bucket */
static bool can_defer_replica(const fp_layout *L) {
  if (L->R <= 1 || L->spec->grad_accumulation <= 1 || L->spec->fsdp2) return false;
  for (int b = 0; b < L->nbuckets; b++)
    if (L->buckets[b].trainable && L->buckets[b].sharded && L->buckets[b].mp.reduce == L->buckets[b].mp.main_grad)
      return true;
  return false;
}

/* hybrid with accumulation: the replicas' all-reduce once per step over the
 * summed micro-batches (fewer, but all at the end of the step), then every
 * micro-batch (hidden behind the next one's compute) where communication is
 * exposed */
static int replica_next(search *S, fp_compiled *c, const fp_compiled *best, int i) {
  (void)S;
  if (i > 0 && !(best && can_defer_replica(&best->layout) && exposed_over(best, FP_STEP_SLACK))) return STOP;
  c->replica_each = i == 1;
  return TRY;
}

/* whether some reduction has local preparation to move: a trainable
 * bucket that casts its grads into another reduce dtype (not under
 * --policy fsdp2, which runs it on the rs stream as FSDP2 does) */
static bool has_reduce_prep(const fp_layout *L) {
  if (L->spec->fsdp2) return false;
  for (int b = 0; b < L->nbuckets; b++)
    if (L->buckets[b].trainable && L->buckets[b].mp.reduce != L->buckets[b].mp.param) return true;
  return false;
}

/* a reduction's casts and staging on the rs stream (the reductions start
 * later, the backward runs free), then on the compute stream right after
 * the backward (where the reductions are slower than the backward, the rs
 * stream then only reduces: deepseek-v3-16b), as memplan's candidates are
 * tried */
static int prep_next(search *S, fp_compiled *c, const fp_compiled *best, int i) {
  (void)S;
  if (i > 0 && !(best && has_reduce_prep(&best->layout) && exposed_over(best, FP_MEMPLAN_TRY_EXPOSED) &&
                 best->prog->nops <= FP_MEMPLAN_TRY_OPS))
    return STOP;
  c->prep_on_compute = i == 1;
  return TRY;
}

/* whether the layout has a bucket that gathers its persistent compute
 * weights again (a cast-only refresh is local: nothing to overlap) */
static bool has_refresh(const fp_layout *L) {
  for (int b = 0; b < L->nbuckets; b++)
    if (fpi_bucket_refreshed(&L->buckets[b]) && L->buckets[b].sharded) return true;
  return false;
}

/* overlap_param_gather: a layout whose sharded buckets keep persistent
 * compute weights (ZeRO-2) refreshes them in post_optimizer, where the next
 * step's forward waits for every refresh gather (false), or in the next
 * step's forward, prefetched like any gather (true: fpi_lower_step's
 * defer_refresh); "auto": the first, then the second where communication
 * is exposed */
static int refresh_next(search *S, fp_compiled *c, const fp_compiled *best, int i) {
  (void)S;
  fp_param_gather pg = c->layout.spec->overlap_param_gather;
  if (i > 0 && !(best && pg == FP_PG_AUTO && has_refresh(&best->layout) && exposed_over(best, FP_STEP_SLACK))) return STOP;
  c->defer_refresh = i == 1 || pg == FP_PG_ON;
  return TRY;
}

/* The memory plan of one lowering. Values:
 *   0           plain: placement by program order only; a fresh lowering of
 *               the depths and flags the axes before set, which the others
 *               copy;
 *   3h-2        held h (h = 1 .. FP_MEMPLAN_HOLD_MAX), lent: holds what a
 *               post_backward's reduction reads (unsharded grads, staging)
 *               until the h-th post_backward after it, so the next layers'
 *               backward and gathers never wait for the rs stream (h = 1:
 *               double buffering; deeper where the reductions are slower
 *               than the backward and fall further behind it each layer).
 *               It is only a source of lifetimes, never kept itself - its
 *               holds are by program order, not by time - and the axis ends
 *               unless it is faster than the one before (h = 1 than plain);
 *   3h-1, 3h    timed by held h: placed by its modeled lifetimes (spans_of):
 *               buffers whose uses overlap in held's timeline never share
 *               bytes, so double buffering stays exactly where the timeline
 *               overlaps the two, and no reuse of bytes makes a stream wait
 *               that the timeline did not. If 3h-1's arena is above the bound
 *               of its ranges, 3h holds the lifetimes to their hooks
 *               (spans_of's `reach`: fewer overlaps, often a tighter packing).
 * Held plans are tried while the best leaves more than
 * FP_MEMPLAN_TRY_EXPOSED of its step exposed (and plain has at most
 * FP_MEMPLAN_TRY_OPS ops). Budget: plain is planned first, with the caller's
 * diagnostics; when even it does not fit, nothing does. `held` is not held
 * to the budget (it is never kept; a budget that binds would otherwise keep
 * the plan placed by its lifetimes from being tried); the timed plans are.
 * docs/schedule.md, "memplan". */

/* Held 1 is built only when plain's modeled step is held back by a wait
 * that orders only a reuse of bytes (fp_compiled.path_reuses): every other
 * edge of its critical path - the ops' times, each stream's order, the
 * hook calls, the waits for a buffer's conflicts with itself - is the same
 * in any placement of the same lowering, so no placement (held, or timed
 * by held's lifetimes) can shorten the modeled step. llama3-405b-tp8's two
 * held plans were a fifth of its compile, and never faster.
 * FLEXPLAN_MEMPLAN_HELD_ALWAYS=1 builds held 1 anyway: tests/memplan_held.py
 * checks that every example gets the same plan both ways. */
static bool held_always(void) {
  const char *e = getenv("FLEXPLAN_MEMPLAN_HELD_ALWAYS");
  return e && *e && strcmp(e, "0") != 0;
}

static int memplan_count(const search *S, const fp_compiled *c) {
  (void)S, (void)c;
  return 1 + 3 * FP_MEMPLAN_HOLD_MAX;
}
static int memplan_next(search *S, fp_compiled *c, const fp_compiled *best, int i) {
  (void)c;
  S->hold = 0;
  S->hint = NULL;
  if (i == 0) { /* plain: lower anew */
    if (S->lowered) fpi_arena_release(S->a, S->lowered->ops);
    S->lowered = NULL;
    return TRY;
  }
  if (!best) return STOP;
  int h = (i + 2) / 3;
  switch ((i + 2) % 3) {
  case 0: /* held h */
    if (h == 1 && best->prog->nops > FP_MEMPLAN_TRY_OPS) return STOP;
    if (!exposed_over(best, FP_MEMPLAN_TRY_EXPOSED)) return STOP;
    if (h == 1 && !best->path_reuses && !held_always()) return STOP;
    if (h == 1) S->prev = best->sim.step_us; /* plain */
    S->hold = h;
    return LEND;
  case 1: /* timed by its lifetimes as modeled */
    S->hint = S->spans[0];
    return TRY;
  default: /* held to the hooks: unless the one as modeled was tight */
    if (S->tight) return SKIP;
    S->hint = S->spans[1];
    return TRY;
  }
}
/* held h was built: its lifetimes (both ways) for the timed plans, if it
 * was faster than the one before; its op array goes back (search_axes)
 * before they are built, the memory used again */
static int memplan_lent(search *S, const fp_compiled *held, bool built) {
  if (!built || !(held->sim.step_us < S->prev * (1 - FP_STEP_SLACK))) return STOP;
  S->prev = held->sim.step_us;
  S->spans[0] = spans_of(S->a, held, false);
  S->spans[1] = spans_of(S->a, held, true);
  return TRY;
}

/* bucket sizes "auto" without a target tries (unsharded bytes per bucket) */
static const int64_t auto_targets[] = {1, (int64_t)16 << 20, (int64_t)32 << 20, (int64_t)64 << 20,
                                       (int64_t)128 << 20, (int64_t)256 << 20, (int64_t)512 << 20,
                                       (int64_t)1 << 30, (int64_t)2 << 30};
#define NTARGETS (int)(sizeof auto_targets / sizeof auto_targets[0])

/* The bucket size: as the spec buckets it (one value), or "buckets":
 * {"auto": {}}: each of auto_targets from the largest down (1 byte = one
 * module per bucket), kept by the least modeled step that fits the budget
 * (`faster`: ties go to the smaller buckets, less memory). None fits: the
 * smallest's error. Its own step (`open`) lays the model out in buckets of
 * that size. */
static bool buckets_auto(const fp_spec *s) { return s->bucket_mode == FP_BUCKETS_AUTO && s->auto_target_bytes <= 0; }
static int bucket_count(const search *S, const fp_compiled *c) {
  (void)c;
  return buckets_auto(S->spec) ? NTARGETS : 1;
}
static int bucket_next(search *S, fp_compiled *c, const fp_compiled *best, int i) {
  (void)c, (void)best;
  S->target = buckets_auto(S->spec) ? auto_targets[NTARGETS - 1 - i] : 0;
  return TRY;
}

/* overlap_param_gather true needs something to overlap */
static bool check_param_gather(fp_arena *a, fp_diag *d, const fp_layout *L) {
  const fp_spec *s = L->spec;
  if (s->overlap_param_gather != FP_PG_ON || s->fsdp2 || has_refresh(L)) return true;
  fpi_diag_json(d, s->src, fpi_ptr_key(a, s->ptr, "overlap_param_gather"),
               "overlap_param_gather is true but no bucket keeps sharded compute weights gathered all step "
               "(strategy \"%s\"): only shard_grad_op buckets gather them again after the optimizer",
               fp_strategy_names[s->strategy]);
  return false;
}

/* the layout at the bucket size readied (the lowering kept of the last one
 * goes back first) */
static bool bucket_open(search *S, fp_diag *d, fp_compiled *c) {
  if (S->lowered) fpi_arena_release(S->a, S->lowered->ops);
  S->lowered = NULL;
  const fp_spec *s = S->spec;
  if (S->target) {
    fp_spec *sc = fpi_alloc(S->a, sizeof *sc);
    *sc = *s;
    sc->auto_target_bytes = S->target;
    s = sc;
  }
  return fpi_layout_build(S->a, d, S->m, s, &c->layout) && check_param_gather(S->a, d, &c->layout);
}

/* The search, one row an axis, the outermost first:
 *   name, why; count, each_alone, next (guard), open, lent; wins */
static const axis axes[] = {
    {"bucket size", "larger buckets mean fewer, faster collectives but more memory and a later first gather",
     bucket_count, true, bucket_next, bucket_open, NULL, faster},
    {"prefetch depth", "deeper prefetch hides more gathers but holds more memory", depth_count, true, depth_next,
     NULL, NULL, faster},
    {"collectives", "hybrid replicas all-reduce every micro-batch (hidden) or once per step (fewer)", two, false,
     replica_next, NULL, NULL, better},
    {"cast placement", "a reduction's casts on the rs stream or on the compute stream", two, false, prep_next, NULL,
     NULL, better},
    {"overlap_param_gather", "ZeRO-2's refresh gathers after the optimizer or in the next forward", two, false,
     refresh_next, NULL, NULL, better},
    {"memplan holds", "reuse bytes by program order, or by the lifetimes of a double-buffered schedule", memplan_count,
     false, memplan_next, NULL, memplan_lent, better},
};
#define NAXES (int)(sizeof axes / sizeof axes[0])

/* the best candidate of the axes from `level` on into *out (false: none
 * was built; the errors in d) */
static bool search_axes(search *S, fp_diag *d, fp_compiled *out, int level) {
  if (level == NAXES) return build(S, d, out);
  const axis *x = &axes[level];
  fp_compiled best;
  bool have = false;
  for (int i = 0, n = x->count(S, out); i < n; i++) {
    int go = x->next(S, out, have ? &best : NULL, i);
    if (go == STOP) break;
    if (go == SKIP) continue;
    fp_diag quiet;
    fpi_diag_init(&quiet, NULL);
    fp_diag *dv = !have && (!x->each_alone || i == n - 1) ? d : &quiet;
    bool ok = (!x->open || x->open(S, dv, out)) && search_axes(S, dv, out, level + 1);
    fpi_diag_free(&quiet);
    if (go == LEND) {
      go = x->lent(S, out, ok);
      drop(S->a, out, have ? &best : NULL);
      if (go == STOP) break;
    } else if (ok && (!have || x->wins(out, &best))) {
      if (have) drop(S->a, &best, out);
      best = *out, have = true;
    } else {
      drop(S->a, out, have ? &best : NULL);
    }
  }
  if (have) *out = best;
  return have;
}

/* the best plan of every axis (the layout first) */
static bool search_all(fp_arena *a, fp_diag *d, const fp_model *m, const fp_spec *s, fp_compiled *out) {
  search S = {.a = a, .m = m, .spec = s};
  bool ok = search_axes(&S, d, out, 0);
  if (S.lowered) fpi_arena_release(a, S.lowered->ops);
  return ok;
}

/* the compile's figures on the program (fp_figures: plan.json's "figures") */
static void keep_figures(fp_arena *a, fp_compiled *c) {
  fp_summary sum;
  c->summary = NULL;
  fpi_summarize(c, 0, &sum);
  c->summary = fpi_memdup(a, &sum, sizeof sum); /* summarize_prog walks every op: once */
  fp_figures *g = fpi_alloc(a, sizeof *g);
  *g = (fp_figures){.comm_bytes_per_rank = sum.comm_bytes_per_rank,
                    .persistent_bytes = sum.persistent_bytes,
                    .peak_bytes = sum.peak_bytes,
                    .lower_bound_bytes = sum.lower_bound_bytes,
                    .activation_peak_bytes = sum.activation_peak_bytes,
                    .prefetch_forward = sum.prefetch_forward,
                    .prefetch_backward = sum.prefetch_backward,
                    .modeled_step_ms = sum.modeled_step_ms,
                    .modeled_compute_ms = sum.modeled_compute_ms,
                    .modeled_exposed_comm_ms = sum.modeled_exposed_comm_ms};
  c->prog->figures = g;
}

/* the search (per bucket size: the layout; per candidate: lower -> passes ->
 * simulate) -> the kept plan's memory timeline, verifier and figures */
bool fpi_compile(fp_arena *a, fp_diag *d, const fp_model *m, const fp_spec *s, fp_compiled *out) {
  memset(out, 0, sizeof *out);
  out->times = fpi_alloc(a, sizeof *out->times);
  if (!search_all(a, d, m, s, out)) return false;
  memory_figures(a, out);
  /* the plan kept is verified whole (the candidates that lost never leave
   * the compile; with FLEXPLAN_VERIFY_EACH each was after every pass) */
  fp_pass_ctx vc = {a, d, &out->layout, &out->stats, true, 0, NULL, NULL, 0, 0, NULL};
  if (!verify_each() && !verify_timed(&vc, out)) return false;
  /* the semantic check (rule 9) on the kept plan: in the test suite, on
   * request, and always where a placement plug-in laid a param out (the
   * plan then proves it computes the step before it is returned) */
  const char *sem = getenv("FLEXPLAN_VERIFY_SEM");
  bool plugged = false;
  for (int i = 0; i < out->layout.nparams && !plugged; i++) plugged = out->layout.params[i].pl->plugin != NULL;
  if ((verify_each() || plugged || (sem && *sem && strcmp(sem, "0") != 0)) && !fpi_pass_verify_sem(&vc, out->prog))
    return false;
  double t0 = fpi_phase_clock();
  keep_figures(a, out);
  phase_done(out, FP_PHASE_SUMMARY, t0);
  return true;
}
