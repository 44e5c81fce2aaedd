/* test_driver.c - the hook driver's state machine (executor/driver.c,
 * include/flexplan.h "the hook driver") over a recorded hook sequence, no
 * executor: events become the plan's hooks in plan order; a forward may
 * pass units it skipped but never go back; backward events may pass
 * anything of the micro-batch's backward; empty module segments are
 * deferred (called before a step hook, left to the executor's skip rule
 * before a module hook); activation checkpointing's recompute window, with
 * the early stop; the optimizer events; a failing hook's status and
 * message; argument errors. And the public handle's argument checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "executor/driver.h"

#define SB FP_HOOK_STEP_BEGIN
#define PF FP_HOOK_PRE_FORWARD
#define POF FP_HOOK_POST_FORWARD
#define PB FP_HOOK_PRE_BACKWARD
#define POB FP_HOOK_POST_BACKWARD
#define PO FP_HOOK_PRE_OPTIMIZER
#define POO FP_HOOK_POST_OPTIMIZER

/* what the hooks were: "sb pf0 pof0 ..." */
typedef struct rec {
  char log[4096];
  int fail_at; /* fail the n-th call (1-based; 0: never) */
  int calls;
} rec;

static const char *short_name[] = {"sb", "pf", "pof", "pb", "pob", "po", "poo"};

static fp_status record(void *ctx, fp_hook h, int32_t m, char *msg, size_t cap) {
  rec *r = ctx;
  if (++r->calls == r->fail_at) {
    snprintf(msg, cap, "hook %s(%d) failed on purpose", fp_hook_name(h), (int)m);
    return FP_ERR_BACKEND;
  }
  size_t n = strlen(r->log);
  if (m >= 0)
    snprintf(r->log + n, sizeof r->log - n, "%s%s%d", n ? " " : "", short_name[h], (int)m);
  else
    snprintf(r->log + n, sizeof r->log - n, "%s%s", n ? " " : "", short_name[h]);
  return FP_OK;
}

static const char *names[] = {"a", "b", "c"};

/* a step of nm modules in order, ga micro-batches; ops[k] of segment k
 * (default 1) */
static int build(fp_plan_segment *seq, int nm, int ga, const int *empty) {
  int n = 0;
  seq[n++] = (fp_plan_segment){SB, -1, 0, 1};
  for (int mb = 0; mb < ga; mb++) {
    for (int m = 0; m < nm; m++) {
      seq[n++] = (fp_plan_segment){PF, m, mb, 1};
      seq[n++] = (fp_plan_segment){POF, m, mb, 1};
    }
    for (int m = nm - 1; m >= 0; m--) {
      seq[n++] = (fp_plan_segment){PB, m, mb, 1};
      seq[n++] = (fp_plan_segment){POB, m, mb, 1};
    }
  }
  seq[n++] = (fp_plan_segment){PO, -1, 0, 1};
  seq[n++] = (fp_plan_segment){POO, -1, 0, 1};
  for (int k = 0; empty && empty[k] >= 0; k++) seq[empty[k]].ops = 0;
  return n;
}

static fp_plan_segment seq[128];

static void start(fpi_driver *d, rec *r, int nm, int ga, const int *empty) {
  memset(r, 0, sizeof *r);
  int n = build(seq, nm, ga, empty);
  assert_int_equal(fpi_driver_init(d, seq, n, nm, names, record, r), FP_OK);
}

#define EV(d, e, m) assert_int_equal(fpi_driver_event((d), (e), (m)), FP_OK)
#define EV_ERR(d, e, m, st, needle)                                   \
  do {                                                                \
    assert_int_equal(fpi_driver_event((d), (e), (m)), (st));          \
    if (!strstr((d)->msg, (needle))) fail_msg("message '%s' lacks '%s'", (d)->msg, (needle)); \
  } while (0)

static void one_step(fpi_driver *d) {
  EV(d, FP_EVENT_PRE_FORWARD, 0);
  EV(d, FP_EVENT_POST_FORWARD, 0);
  EV(d, FP_EVENT_PRE_FORWARD, 1);
  EV(d, FP_EVENT_POST_FORWARD, 1);
  EV(d, FP_EVENT_PRE_BACKWARD, 1);
  EV(d, FP_EVENT_POST_BACKWARD, 1);
  EV(d, FP_EVENT_PRE_BACKWARD, 0);
  EV(d, FP_EVENT_POST_BACKWARD, 0);
  EV(d, FP_EVENT_BACKWARD_DONE, -1);
  EV(d, FP_EVENT_PRE_OPTIMIZER, -1);
  EV(d, FP_EVENT_PRE_OPTIMIZER, -1); /* idempotent */
  EV(d, FP_EVENT_POST_OPTIMIZER, -1);
}

static void in_order(void **state) {
  (void)state;
  fpi_driver d;
  rec r;
  start(&d, &r, 2, 1, NULL);
  assert_int_equal(d.st.pos, 0);
  one_step(&d);
  assert_string_equal(r.log, "sb pf0 pof0 pf1 pof1 pb1 pob1 pb0 pob0 po poo");
  assert_int_equal(d.st.pos, 0);
  assert_int_equal(d.st.hooks, 11);
  assert_int_equal(d.st.in_backward, 0);
  r.log[0] = 0;
  one_step(&d); /* the next step starts over */
  assert_string_equal(r.log, "sb pf0 pof0 pf1 pof1 pb1 pob1 pb0 pob0 po poo");
  fpi_driver_fini(&d);
}

/* events that fall elsewhere than the plan's segments */
static void passing(void **state) {
  (void)state;
  fpi_driver d;
  rec r;
  start(&d, &r, 3, 1, NULL);
  EV(&d, FP_EVENT_PRE_FORWARD, 0);
  EV(&d, FP_EVENT_PRE_FORWARD, 0); /* another submodule of a unit still open */
  EV(&d, FP_EVENT_PRE_FORWARD, 1); /* closes unit 0 (its post_forward) */
  EV(&d, FP_EVENT_POST_FORWARD, 1);
  EV(&d, FP_EVENT_POST_FORWARD, 1); /* a repeat */
  EV(&d, FP_EVENT_PRE_FORWARD, 2);
  EV(&d, FP_EVENT_POST_FORWARD, 2);
  assert_string_equal(r.log, "sb pf0 pof0 pf1 pof1 pf2 pof2");
  assert_int_equal(d.st.in_backward, 0);
  EV(&d, FP_EVENT_PRE_BACKWARD, 2);
  assert_int_equal(d.st.in_backward, 1);
  EV(&d, FP_EVENT_PRE_BACKWARD, 2); /* one event per output tensor */
  EV(&d, FP_EVENT_PRE_BACKWARD, 0); /* unit 1 fired nothing: its backward comes in plan order */
  EV(&d, FP_EVENT_POST_BACKWARD, 1); /* already issued: a no-op */
  EV(&d, FP_EVENT_BACKWARD_DONE, -1); /* post_backward(0): no event reached it */
  assert_string_equal(r.log, "sb pf0 pof0 pf1 pof1 pf2 pof2 pb2 pob2 pb1 pob1 pb0 pob0");
  assert_int_equal(d.st.in_backward, 0);
  EV(&d, FP_EVENT_PRE_OPTIMIZER, -1);
  EV(&d, FP_EVENT_POST_OPTIMIZER, -1);
  fpi_driver_fini(&d);
}

/* a forward that skips a unit runs its segments; one that goes back is refused */
static void skipped_units(void **state) {
  (void)state;
  fpi_driver d;
  rec r;
  start(&d, &r, 3, 1, NULL);
  /* a post_forward passes no unit that has not begun */
  EV_ERR(&d, FP_EVENT_POST_FORWARD, 1, FP_ERR_ORDER, "reached post_forward(b), but the plan expects step_begin next");
  assert_string_equal(r.log, "");
  EV(&d, FP_EVENT_PRE_FORWARD, 0);
  EV(&d, FP_EVENT_PRE_FORWARD, 2); /* unit 1 skipped: gathered and freed, nothing computed */
  assert_string_equal(r.log, "sb pf0 pof0 pf1 pof1 pf2");
  EV_ERR(&d, FP_EVENT_PRE_FORWARD, 1, FP_ERR_ORDER, "already passed it");
  assert_non_null(strstr(d.msg, "pre_forward(b)"));
  assert_non_null(strstr(d.msg, "expects post_forward(c) next"));
  EV(&d, FP_EVENT_POST_FORWARD, 0); /* a repeat of a post_forward issued: a no-op */
  EV(&d, FP_EVENT_POST_FORWARD, 2);
  /* a forward may not pass into the backward */
  EV_ERR(&d, FP_EVENT_PRE_FORWARD, 0, FP_ERR_ORDER, "already passed it");
  EV(&d, FP_EVENT_BACKWARD_DONE, -1);
  assert_string_equal(r.log, "sb pf0 pof0 pf1 pof1 pf2 pof2 pb2 pob2 pb1 pob1 pb0 pob0");
  /* a second forward before the optimizer step */
  EV_ERR(&d, FP_EVENT_PRE_FORWARD, 0, FP_ERR_ORDER, "call the optimizer step");
  EV(&d, FP_EVENT_PRE_OPTIMIZER, -1);
  EV_ERR(&d, FP_EVENT_PRE_FORWARD, 0, FP_ERR_ORDER, "expects post_optimizer next");
  EV(&d, FP_EVENT_POST_OPTIMIZER, -1);
  EV_ERR(&d, FP_EVENT_POST_OPTIMIZER, -1, FP_ERR_ORDER, "post_optimizer out of order");
  fpi_driver_fini(&d);
}

/* empty module segments: the executor skips them before a module hook; the
 * driver calls them before a step hook */
static void deferred(void **state) {
  (void)state;
  fpi_driver d;
  rec r;
  /* segments: 0 sb, 1 pf0, 2 pof0, 3 pf1, 4 pof1, 5 pb1, 6 pob1, 7 pb0, 8 pob0, 9 po, 10 poo */
  int empty[] = {2, 8, -1};
  start(&d, &r, 2, 1, empty);
  one_step(&d);
  /* pof0 skipped (pf1 follows), pob0 called before pre_optimizer */
  assert_string_equal(r.log, "sb pf0 pf1 pof1 pb1 pob1 pb0 pob0 po poo");
  assert_int_equal(d.st.skipped, 1);
  assert_int_equal(d.st.hooks, 10);
  fpi_driver_fini(&d);
}

static void grad_accumulation(void **state) {
  (void)state;
  fpi_driver d;
  rec r;
  start(&d, &r, 2, 2, NULL);
  EV(&d, FP_EVENT_PRE_FORWARD, 0);
  EV(&d, FP_EVENT_PRE_FORWARD, 1);
  EV(&d, FP_EVENT_PRE_BACKWARD, 1);
  EV(&d, FP_EVENT_BACKWARD_DONE, -1);
  EV_ERR(&d, FP_EVENT_PRE_OPTIMIZER, -1, FP_ERR_ORDER, "grad_accumulation = 2");
  EV(&d, FP_EVENT_PRE_FORWARD, 0); /* micro-batch 1 */
  assert_int_equal(d.st.micro, 1);
  EV(&d, FP_EVENT_PRE_FORWARD, 1);
  EV(&d, FP_EVENT_PRE_BACKWARD, 1);
  EV(&d, FP_EVENT_BACKWARD_DONE, -1);
  EV(&d, FP_EVENT_PRE_OPTIMIZER, -1);
  EV(&d, FP_EVENT_POST_OPTIMIZER, -1);
  assert_int_equal(d.st.hooks, 19);
  fpi_driver_fini(&d);
}

/* activation checkpointing: the recompute window inside the unit's backward */
static void recompute(void **state) {
  (void)state;
  fpi_driver d;
  rec r;
  start(&d, &r, 2, 1, NULL);
  EV(&d, FP_EVENT_PRE_FORWARD, 0);
  EV(&d, FP_EVENT_PRE_FORWARD, 1);
  EV(&d, FP_EVENT_POST_FORWARD, 1);
  /* a recompute before its unit's backward event: pre_backward first */
  EV(&d, FP_EVENT_RECOMPUTE_BEGIN, 1);
  EV(&d, FP_EVENT_RECOMPUTE_END, 1);
  EV(&d, FP_EVENT_RECOMPUTE_END, 1); /* nothing open: a no-op */
  EV(&d, FP_EVENT_PRE_BACKWARD, 0);
  /* unit 0's recompute stops early: closed before its post_backward */
  EV(&d, FP_EVENT_RECOMPUTE_BEGIN, 0);
  EV_ERR(&d, FP_EVENT_RECOMPUTE_BEGIN, 0, FP_ERR_ORDER, "a recomputed forward of a (activation checkpointing)");
  EV(&d, FP_EVENT_BACKWARD_DONE, -1);
  assert_string_equal(r.log, "sb pf0 pof0 pf1 pof1 pb1 pf1 pof1 pob1 pb0 pf0 pof0 pob0");
  assert_int_equal(d.st.recomputes, 2);
  /* outside a backward window */
  EV(&d, FP_EVENT_PRE_OPTIMIZER, -1);
  EV_ERR(&d, FP_EVENT_RECOMPUTE_BEGIN, 1, FP_ERR_ORDER, "a recomputed forward of b");
  EV(&d, FP_EVENT_POST_OPTIMIZER, -1);
  fpi_driver_fini(&d);
}

/* a hook that fails: its status and message; the driver stays at it */
static void failing_hook(void **state) {
  (void)state;
  fpi_driver d;
  rec r;
  start(&d, &r, 2, 1, NULL);
  r.fail_at = 3; /* sb, pf0, then pof0 fails */
  EV_ERR(&d, FP_EVENT_PRE_FORWARD, 1, FP_ERR_BACKEND, "hook post_forward(0) failed on purpose");
  assert_int_equal(d.st.pos, 2);
  assert_int_equal(d.st.hooks, 2);
  r.fail_at = 0;
  EV(&d, FP_EVENT_PRE_FORWARD, 1); /* from where it stopped */
  assert_string_equal(r.log, "sb pf0 pof0 pf1");
  fpi_driver_fini(&d);
}

static void arguments(void **state) {
  (void)state;
  fpi_driver d;
  rec r;
  start(&d, &r, 2, 1, NULL);
  EV_ERR(&d, (fp_event)0, -1, FP_ERR_ARG, "is not an event");
  EV_ERR(&d, (fp_event)10, -1, FP_ERR_ARG, "is not an event");
  EV_ERR(&d, FP_EVENT_PRE_FORWARD, 2, FP_ERR_ARG, "out of range");
  EV_ERR(&d, FP_EVENT_PRE_FORWARD, -1, FP_ERR_ARG, "out of range");
  EV_ERR(&d, FP_EVENT_PRE_OPTIMIZER, 0, FP_ERR_ARG, "takes no module");
  assert_string_equal(r.log, "");
  fpi_driver_fini(&d);
  /* a sequence that is not a step */
  fp_plan_segment bad[3] = {{PF, 0, 0, 1}, {PO, -1, 0, 1}, {POO, -1, 0, 1}};
  assert_int_equal(fpi_driver_init(&d, bad, 3, 1, names, record, &r), FP_ERR_ARG);
  fpi_driver_fini(&d);
  /* the public handle */
  fp_driver *h = NULL;
  assert_int_equal(fp_driver_create(NULL, NULL), FP_ERR_ARG);
  assert_int_equal(fp_driver_create(NULL, &h), FP_ERR_ARG);
  assert_non_null(h);
  assert_non_null(strstr(fp_driver_errmsg(h), "no executor"));
  assert_int_equal(fp_driver_event(h, FP_EVENT_PRE_FORWARD, 0), FP_ERR_ARG);
  assert_non_null(strstr(fp_driver_errmsg(h), "not created successfully"));
  fp_driver_free(h);
  assert_int_equal(fp_driver_event(NULL, FP_EVENT_PRE_FORWARD, 0), FP_ERR_ARG);
  assert_null(fp_driver_state_of(NULL));
  assert_string_equal(fp_driver_errmsg(NULL), "");
  assert_int_equal(fp_driver_set_profile(NULL, true), FP_ERR_ARG);
  fp_driver_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(in_order),          cmocka_unit_test(passing),   cmocka_unit_test(skipped_units),
      cmocka_unit_test(deferred),          cmocka_unit_test(grad_accumulation), cmocka_unit_test(recompute),
      cmocka_unit_test(failing_hook),      cmocka_unit_test(arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
