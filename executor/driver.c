/* driver.c - the hook driver (include/flexplan.h, "the hook driver"): turns
 * the events a trainer's callbacks report into the plan's exact hook
 * sequence. The state machine (fpi_driver_*) calls hooks through a
 * callback; fp_driver_* runs it over fp_exec_hook.
 *
 * State: pos (the next segment), micro (the micro-batch of the last segment
 * issued), which (hook, module) pairs the current micro-batch issued, the
 * empty module segments deferred (called before the next step hook, skipped
 * by the executor before the next module hook), the units whose recomputed
 * forward is open. pos moves one segment at a time, so a hook that fails
 * half way through an event leaves the driver at the failed segment. */
#include "driver.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_impl.h"

#define NKINDS 8 /* fp_hook values, padded */

static fp_status fail(fpi_driver *d, fp_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static fp_status fail(fpi_driver *d, fp_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->msg, sizeof d->msg, fmt, ap);
  va_end(ap);
  return st;
}

static bool module_hook(int h) { return h >= FP_HOOK_PRE_FORWARD && h <= FP_HOOK_POST_BACKWARD; }

fp_status fpi_driver_init(fpi_driver *d, const fp_plan_segment *seq, int32_t nsegs, int32_t nmods,
                          const char *const *names, fpi_hook_fn hook, void *ctx) {
  memset(d, 0, sizeof *d);
  d->seq = seq, d->nsegs = nsegs, d->nmods = nmods, d->names = names, d->hook = hook, d->ctx = ctx;
  d->st.micro = -1;
  if (!seq || nsegs < 3 || nmods < 0 || !hook || seq[0].hook != FP_HOOK_STEP_BEGIN ||
      seq[nsegs - 2].hook != FP_HOOK_PRE_OPTIMIZER || seq[nsegs - 1].hook != FP_HOOK_POST_OPTIMIZER)
    return fail(d, FP_ERR_ARG, "the plan's segments are not a step (step_begin ... pre_optimizer, post_optimizer)");
  d->st.pre_optimizer = nsegs - 2;
  for (int32_t i = 0; i < nsegs; i++) {
    bool hm = module_hook((int)seq[i].hook);
    if ((int)seq[i].hook < 0 || (int)seq[i].hook > FP_HOOK_POST_OPTIMIZER || (hm && (seq[i].module < 0 || seq[i].module >= nmods)) ||
        (!hm && seq[i].module != -1) || (i > 0 && i < nsegs - 2 && !hm))
      return fail(d, FP_ERR_ARG, "segment %" PRId32 " of the plan is not a hook of a step", i);
    if (seq[i].micro + 1 > d->ga) d->ga = seq[i].micro + 1;
  }
  d->issued = calloc((size_t)(nmods ? nmods : 1) * NKINDS, 1);
  d->recomputing = calloc((size_t)(nmods ? nmods : 1), 1);
  d->deferred = calloc((size_t)nsegs, sizeof *d->deferred);
  if (!d->issued || !d->recomputing || !d->deferred) return fail(d, FP_ERR_NOMEM, "out of memory");
  return FP_OK;
}

void fpi_driver_fini(fpi_driver *d) {
  free(d->issued);
  free(d->recomputing);
  free(d->deferred);
  d->issued = d->recomputing = NULL;
  d->deferred = NULL;
}

static bool issued(const fpi_driver *d, int h, int32_t m) { return d->issued[(size_t)m * NKINDS + (size_t)h] != 0; }

static const char *label(const fpi_driver *d, int32_t i, char *buf, size_t cap) {
  const fp_plan_segment *s = &d->seq[i];
  const char *k = fp_hook_name(s->hook);
  if (s->module >= 0)
    snprintf(buf, cap, "%s(%s)", k, d->names ? d->names[s->module] : "?");
  else
    snprintf(buf, cap, "%s", k);
  return buf;
}

static const char *name(const fpi_driver *d, int32_t m) { return d->names ? d->names[m] : "?"; }

static fp_status hook(fpi_driver *d, fp_hook h, int32_t m) {
  fp_status st = d->hook(d->ctx, h, m, d->msg, sizeof d->msg);
  if (st == FP_OK) d->st.hooks++;
  return st;
}

/* segment i, closing a recomputed forward the checkpoint stopped early
 * (no last forward hook) before the unit's post_backward */
static fp_status call(fpi_driver *d, int32_t i) {
  const fp_plan_segment *s = &d->seq[i];
  if (s->hook == FP_HOOK_POST_BACKWARD && d->recomputing[s->module]) {
    d->recomputing[s->module] = 0;
    FPX_CHECK(hook(d, FP_HOOK_POST_FORWARD, s->module));
  }
  return hook(d, s->hook, s->module);
}

static void new_micro(fpi_driver *d, int32_t micro) {
  d->st.micro = micro;
  memset(d->issued, 0, (size_t)(d->nmods ? d->nmods : 1) * NKINDS);
}

/* issue segments pos..j in plan order */
static fp_status issue_through(fpi_driver *d, int32_t j) {
  for (int32_t i = d->st.pos; i <= j; i++) {
    const fp_plan_segment *s = &d->seq[i];
    if (s->micro != d->st.micro) new_micro(d, s->micro);
    if (s->module >= 0) d->issued[(size_t)s->module * NKINDS + (size_t)s->hook] = 1;
    if (s->module >= 0 && s->ops == 0) {
      d->deferred[d->ndeferred++] = i;
      d->st.skipped++;
      d->st.pos = i + 1;
      continue;
    }
    if (s->module < 0) { /* the executor never skips to a step hook: call what was deferred */
      while (d->ndeferred > 0) {
        FPX_CHECK(call(d, d->deferred[0]));
        d->st.skipped--;
        memmove(d->deferred, d->deferred + 1, (size_t)(--d->ndeferred) * sizeof *d->deferred);
      }
    }
    FPX_CHECK(call(d, i));
    d->ndeferred = 0; /* the executor skipped them (its skip rule) */
    d->st.pos = i + 1;
  }
  if (d->st.pos == d->nsegs) {
    d->st.pos = 0;
    new_micro(d, -1);
  }
  return FP_OK;
}

static fp_status mismatch(fpi_driver *d, const char *what, bool passed) {
  char want[256];
  int32_t pos = d->st.pos;
  if (passed)
    return fail(d, FP_ERR_ORDER,
                "the module reached %s, but the plan's forward already passed it (a unit the forward skipped "
                "cannot run later in the same forward; the plan expects %s next, segment %" PRId32 " of %" PRId32
                "): the model's forward does not follow the plan's order",
                what, label(d, pos, want, sizeof want), pos, d->nsegs);
  if (pos == d->st.pre_optimizer)
    return fail(d, FP_ERR_ORDER,
                "the module reached %s, but the plan's %" PRId32 " micro-batch(es) of this step are done: call "
                "the optimizer step (flexplan.torch.optimizer or Sharded.step; FP_EVENT_PRE_OPTIMIZER) first",
                what, d->ga);
  return fail(d, FP_ERR_ORDER,
              "the module reached %s, but the plan expects %s next (segment %" PRId32 " of %" PRId32
              "): the model's forward does not follow the plan's order",
              what, label(d, pos, want, sizeof want), pos, d->nsegs);
}

static fp_status module_event(fpi_driver *d, int kind, int32_t m) {
  const int32_t pre_opt = d->st.pre_optimizer;
  const bool fwd = kind == FP_HOOK_PRE_FORWARD || kind == FP_HOOK_POST_FORWARD;
  const bool open = d->st.micro >= 0;
  if (kind == FP_HOOK_PRE_FORWARD && open && issued(d, FP_HOOK_PRE_FORWARD, m) &&
      !issued(d, FP_HOOK_POST_FORWARD, m) && d->st.pos < pre_opt)
    return FP_OK; /* another submodule of a unit still open */
  if (d->st.pos < pre_opt) {
    int32_t mb = d->seq[d->st.pos].micro;
    for (int32_t j = d->st.pos; j < pre_opt; j++) {
      const fp_plan_segment *s = &d->seq[j];
      if (s->micro != mb) break;
      if ((int)s->hook == kind && s->module == m) return issue_through(d, j);
      if (kind == FP_HOOK_PRE_FORWARD) {
        /* a unit's forward may pass units the forward skipped (a branch not
         * taken, an expert no token was routed to): their segments run in
         * plan order with nothing computed, never a backward segment */
        if (s->hook == FP_HOOK_PRE_BACKWARD || s->hook == FP_HOOK_POST_BACKWARD) break;
      } else if (fwd && !(s->hook == FP_HOOK_STEP_BEGIN || s->ops == 0 ||
                          (s->hook == FP_HOOK_POST_FORWARD && issued(d, FP_HOOK_PRE_FORWARD, s->module) &&
                           d->st.micro == mb)))
        break;
    }
  }
  bool done = d->st.micro >= 0 && issued(d, kind, m);
  if (done && (!fwd || (kind == FP_HOOK_POST_FORWARD && d->st.pos < pre_opt))) return FP_OK;
  char what[256];
  snprintf(what, sizeof what, "%s(%s)", fp_hook_name((fp_hook)kind), name(d, m));
  return mismatch(d, what, fwd && done && d->st.pos < pre_opt);
}

static fp_status recompute_begin(fpi_driver *d, int32_t m) {
  if (d->st.micro < 0 || !issued(d, FP_HOOK_PRE_BACKWARD, m)) FPX_CHECK(module_event(d, FP_HOOK_PRE_BACKWARD, m));
  const fp_plan_segment *s = &d->seq[d->st.pos];
  if (s->hook != FP_HOOK_POST_BACKWARD || s->module != m || d->recomputing[m]) {
    char what[256];
    snprintf(what, sizeof what, "a recomputed forward of %s (activation checkpointing)", name(d, m));
    return mismatch(d, what, false);
  }
  FPX_CHECK(hook(d, FP_HOOK_PRE_FORWARD, m));
  d->ndeferred = 0; /* module segments deferred before it: the executor skipped them */
  d->recomputing[m] = 1;
  d->st.recomputes++;
  return FP_OK;
}

static fp_status backward_done(fpi_driver *d) {
  d->st.in_backward = 0;
  const int32_t pre_opt = d->st.pre_optimizer;
  if (d->st.pos == 0 || d->st.pos >= pre_opt) return FP_OK;
  int32_t mb = d->seq[d->st.pos].micro, j = d->st.pos;
  while (j + 1 < pre_opt && d->seq[j + 1].micro == mb) j++;
  if (d->seq[j].hook != FP_HOOK_PRE_BACKWARD && d->seq[j].hook != FP_HOOK_POST_BACKWARD) {
    char want[256];
    return fail(d, FP_ERR_ORDER, "backward finished, but the plan expects %s next",
                label(d, d->st.pos, want, sizeof want));
  }
  return issue_through(d, j);
}

fp_status fpi_driver_event(fpi_driver *d, fp_event e, int32_t m) {
  const int32_t pre_opt = d->st.pre_optimizer;
  bool takes_module = (e >= FP_EVENT_PRE_FORWARD && e <= FP_EVENT_POST_BACKWARD) || e == FP_EVENT_RECOMPUTE_BEGIN ||
                      e == FP_EVENT_RECOMPUTE_END;
  if (e < FP_EVENT_PRE_FORWARD || e > FP_EVENT_RECOMPUTE_END) return fail(d, FP_ERR_ARG, "event %d is not an event", (int)e);
  if (takes_module && (m < 0 || m >= d->nmods))
    return fail(d, FP_ERR_ARG, "event %d: module %" PRId32 " is out of range (the plan has %" PRId32 " modules)",
                (int)e, m, d->nmods);
  if (!takes_module && m != -1)
    return fail(d, FP_ERR_ARG, "event %d takes no module (pass -1, not %" PRId32 ")", (int)e, m);
  char want[256];
  d->event = (int)e;
  fp_status st = FP_OK;
  switch (e) {
  case FP_EVENT_PRE_BACKWARD:
    d->st.in_backward = 1;
    /* fallthrough */
  case FP_EVENT_PRE_FORWARD:
  case FP_EVENT_POST_FORWARD:
  case FP_EVENT_POST_BACKWARD:
    st = module_event(d, (int)e, m);
    break;
  case FP_EVENT_BACKWARD_DONE:
    st = backward_done(d);
    break;
  case FP_EVENT_RECOMPUTE_BEGIN:
    st = recompute_begin(d, m);
    break;
  case FP_EVENT_RECOMPUTE_END:
    if (d->recomputing[m]) {
      d->recomputing[m] = 0;
      st = hook(d, FP_HOOK_POST_FORWARD, m);
    }
    break;
  case FP_EVENT_PRE_OPTIMIZER:
    if (d->st.pos == pre_opt + 1) break; /* already issued */
    if (d->st.pos != pre_opt)
      st = fail(d, FP_ERR_ORDER,
                "optimizer step before the plan's step is through its backward: the plan expects %s next "
                "(grad_accumulation = %" PRId32 ": run %" PRId32 " forward/backward micro-batch(es) per optimizer step)",
                label(d, d->st.pos, want, sizeof want), d->ga, d->ga);
    else
      st = issue_through(d, pre_opt);
    break;
  case FP_EVENT_POST_OPTIMIZER:
    if (d->st.pos != pre_opt + 1)
      st = fail(d, FP_ERR_ORDER, "post_optimizer out of order: the plan expects %s next",
                label(d, d->st.pos, want, sizeof want));
    else
      st = issue_through(d, pre_opt + 1);
    break;
  }
  d->event = 0;
  return st;
}

/* ---- the public driver over fp_exec_hook ---------------------------------------------- */
struct fp_driver {
  fpi_driver core;
  fp_exec *x;
  fp_plan_segment *seq;
  const char **names;
  bool profile;
};

/* the profile's clock: CLOCK_MONOTONIC, read in user space (vDSO). The
 * thread's CPU clock is a system call (0.7 us on the development machine)
 * whose kernel entry also cools the caches of the callbacks being measured;
 * the Python side times its callbacks with the same clock
 * (time.perf_counter). A preempted thread counts as busy: profile on an idle
 * machine. */
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static fp_status exec_hook(void *ctx, fp_hook h, int32_t m, char *msg, size_t cap) {
  fp_driver *d = ctx;
  double t0 = d->profile ? now_s() : 0;
  fp_status st = fp_exec_hook(d->x, h, m);
  if (d->profile) {
    double dt = now_s() - t0;
    d->core.st.exec_s += dt;
    if (d->core.event == FP_EVENT_PRE_OPTIMIZER || d->core.event == FP_EVENT_POST_OPTIMIZER) d->core.st.exec_step_s += dt;
  }
  if (st != FP_OK) snprintf(msg, cap, "%s", fp_exec_errmsg(d->x));
  return st;
}

fp_status fp_driver_create(fp_exec *x, fp_driver **out) {
  if (!out) return FP_ERR_ARG;
  *out = NULL;
  fp_driver *d = calloc(1, sizeof *d);
  if (!d) return FP_ERR_NOMEM;
  *out = d;
  if (!x || !x->created) {
    snprintf(d->core.msg, sizeof d->core.msg, "fp_driver_create: %s",
             x ? "the executor was not created successfully" : "no executor (NULL)");
    return FP_ERR_ARG;
  }
  d->x = x;
  const fp_prog *p = x->prog;
  d->seq = calloc((size_t)(p->nsegs ? p->nsegs : 1), sizeof *d->seq);
  d->names = calloc((size_t)(p->nmods ? p->nmods : 1), sizeof *d->names);
  if (!d->seq || !d->names) {
    snprintf(d->core.msg, sizeof d->core.msg, "out of memory");
    return FP_ERR_NOMEM;
  }
  for (int32_t i = 0; i < p->nsegs; i++) FPX_CHECK(fp_plan_segment_at(x->plan, i, &d->seq[i]));
  for (int32_t m = 0; m < p->nmods; m++) d->names[m] = p->mods[m].name;
  return fpi_driver_init(&d->core, d->seq, p->nsegs, p->nmods, d->names, exec_hook, d);
}

const char *fp_driver_errmsg(const fp_driver *d) { return d ? d->core.msg : ""; }

void fp_driver_free(fp_driver *d) {
  if (!d) return;
  fpi_driver_fini(&d->core);
  free(d->seq);
  free(d->names);
  free(d);
}

fp_status fp_driver_event(fp_driver *d, fp_event e, int32_t module) {
  if (!d) return FP_ERR_ARG;
  if (!d->x) {
    snprintf(d->core.msg, sizeof d->core.msg, "the driver was not created successfully");
    return FP_ERR_ARG;
  }
  return fpi_driver_event(&d->core, e, module);
}

const fp_driver_state *fp_driver_state_of(const fp_driver *d) { return d ? &d->core.st : NULL; }

fp_status fp_driver_set_profile(fp_driver *d, bool on) {
  if (!d) return FP_ERR_ARG;
  d->profile = on;
  return FP_OK;
}
