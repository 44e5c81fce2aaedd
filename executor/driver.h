/* driver.h - the hook driver's state machine (executor/driver.c), apart
 * from the executor it drives: events in, the plan's hooks out through a
 * callback, so the unit tests (tests/test_driver.c) run it over a recorded
 * sequence without MPI. fp_driver (include/flexplan.h) is this over
 * fp_exec_hook. */
#ifndef FP_EXEC_DRIVER_H
#define FP_EXEC_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flexplan.h"

/* run hook h of module m (-1: a step hook); on failure write a message to
 * msg (cap bytes) and return its status */
typedef fp_status (*fpi_hook_fn)(void *ctx, fp_hook h, int32_t m, char *msg, size_t cap);

#define FPI_DRIVER_MSG_CAP 1024

typedef struct fpi_driver {
  const fp_plan_segment *seq; /* the step's segments (owned by the caller) */
  int32_t nsegs, nmods;
  const char *const *names;   /* module names, for messages (owned by the caller) */
  fpi_hook_fn hook;
  void *ctx;
  int32_t ga;                 /* micro-batches per step */
  uint8_t *issued;            /* [nmods][8]: (hook, module) issued in the current micro-batch */
  uint8_t *recomputing;       /* [nmods]: a recomputed forward the executor has open */
  int32_t *deferred;          /* empty module segments not called yet */
  int32_t ndeferred;
  int event;                  /* the event being handled (fp_event; 0: none) */
  fp_driver_state st;
  char msg[FPI_DRIVER_MSG_CAP];
} fpi_driver;

/* Set d up over nsegs segments (a step: step_begin first, pre_optimizer and
 * post_optimizer last) of nmods modules. FP_ERR_ARG for a sequence that is
 * not a step, FP_ERR_NOMEM; d needs fpi_driver_fini either way. */
fp_status fpi_driver_init(fpi_driver *d, const fp_plan_segment *seq, int32_t nsegs, int32_t nmods,
                          const char *const *names, fpi_hook_fn hook, void *ctx);
void fpi_driver_fini(fpi_driver *d);
/* fp_driver_event's contract (include/flexplan.h) */
fp_status fpi_driver_event(fpi_driver *d, fp_event e, int32_t m);

#endif
