/* exec_impl.h - the executor's internal state, shared by the files of
 * executor/ and by its backends (backend_impl.h): the loaded plan, the
 * program resolved for one rank (every op with its count, its operands as
 * pointers into the arena, its communicator index, its event edges), the
 * params' views, and the error/alloc helpers every file uses.
 *
 * Errors. A user-facing failure sets the handle's message with fpx_fail()
 * and returns its fp_status; functions that can fail return fp_status and
 * are called through FPX_CHECK / FPX_CHECK_GOTO (the NCCL pattern: one
 * `fail:` label per function frees what it made). Internal bugs are
 * FP_ASSERT (base/base.h), never a status. */
#ifndef FP_EXEC_IMPL_H
#define FP_EXEC_IMPL_H

#include "flexplan.h"
#include "ir/handle.h"
#include "ir/ir.h"

/* ---- checks --------------------------------------------------------------- */
#define FPX_CHECK(call)                  \
  do {                                   \
    fp_status st_ = (call);              \
    if (st_ != FP_OK) return st_;        \
  } while (0)
#define FPX_CHECK_GOTO(call, st, label)  \
  do {                                   \
    (st) = (call);                       \
    if ((st) != FP_OK) goto label;       \
  } while (0)

/* the elements run k of shard view e holds (fp_extent: len, last_len for the last) */
static inline int64_t fpx_extent_run(const fp_extent *e, int64_t k) { return k == e->runs - 1 ? e->last_len : e->len; }

#define FPX_MSG_CAP 2048 /* an executor's message: fixed, so hooks never allocate for it */

/* ---- the program resolved for one rank ----------------------------------------- */
/* One op as this rank runs it. Ops this rank skips (`only`) and compute
 * placeholders are left out. */
typedef struct fp_xop {
  int32_t index;       /* the op's index in the program (messages) */
  fp_opcode code;
  fp_stream stream;
  fp_dtype dtype, sdtype;
  int32_t comm;        /* plan communicator (-1: none) */
  int32_t group;       /* grouped-call id (-1: none) */
  int64_t g, G;        /* this rank's index in comm, comm size (0 and 1 without a comm) */
  int64_t n;           /* count on this rank, tables resolved */
  int32_t root;        /* broadcast/reduce root; send/recv peer distance */
  int64_t rows, dpitch, spitch; /* copy */
  double alpha;        /* scale */
  fp_redop red;        /* reductions: sum or avg (the MPI backend divides the sum by G) */
  const int64_t *tab_off, *tab_cnt; /* v-collectives: the extent table (G entries); split_copy,
                       * chunk_cat: the region table (ntab entries) */
  int64_t ntab;
  int64_t off[3];      /* dst, src, aux: byte offset in their arena (-1: no operand) */
  bool host[3];        /* ... in the host arena instead of the device arena */
  char *dst, *src, *aux; /* the same as pointers, once the arena exists (NULL: none) */
  bool inplace;        /* the collective's in-place form (ops.def) */
  /* events */
  int32_t event;
  struct fp_xop *rec;  /* wait: the record it waits for (NULL: nothing recorded: a no-op) */
  bool rec_prev;       /* wait: that record is the previous step's */
  int64_t done_step;   /* record: the last step in which it completed (-1: never) */
} fp_xop;

/* a param's views on this rank */
typedef struct fp_xparam {
  fp_param_view v;
  int64_t slot;        /* shard slot elements on this rank */
  int64_t off[7];      /* arena offsets of weight, ugrad, main, grad, optim[0], optim[1], scales
                        * (MXFP8 params; -1: none) */
  bool host[7];        /* that offset is in the host arena (offload: main, grad, optim) */
  bool weight_persistent; /* the compute weight stays unsharded between steps */
} fp_xparam;

typedef struct fp_backend_impl fp_backend_impl;

struct fp_exec {
  const fp_plan *plan;
  const fp_prog *prog;
  fp_exec_config cfg;
  int64_t rank, world;
  char msg[FPX_MSG_CAP];
  bool created;        /* fp_exec_create succeeded: hooks, sync and refits may run */
  bool broken;         /* a backend failure: every later call fails */
  bool in_hook;
  double timeout_s;    /* the watchdog's limit in seconds (cfg.timeout_s or FLEXPLAN_TIMEOUT); 0: none */
  /* memory: one allocation made by the backend */
  char *dev, *host;    /* the device and host arenas (arena_bytes, host_bytes) */
  /* the resolved program */
  fp_xop *xops;
  int32_t nxops;
  fp_xop **sops[FP_NSTREAMS]; /* per stream, its ops in program order */
  int32_t slen[FP_NSTREAMS];
  int32_t (*seg_end)[FP_NSTREAMS]; /* per segment: ops on each stream up to its end */
  fp_xparam *params;
  /* where the trainer is */
  int32_t cursor;      /* the next segment */
  int recompute;       /* in the backward window of a recomputed module (cursor at its
                        * post_backward): 0 no recompute yet, 1 inside its recomputed
                        * forward (pre_forward seen), 2 recompute done */
  /* backend */
  const fp_backend_impl *bk;
  void *bks;           /* the backend's state */
  void *cuda_stream;   /* NCCL: the compute stream (fp_exec_cuda_stream) */
  fp_exec_stats stats;
  struct fpx_timing *timing; /* the measured-timing record (timing.c); NULL: off */
};

/* ---- helpers (exec.c) ------------------------------------------------------------ */
/* set the handle's message (printf-style); returns st */
fp_status fpx_fail(fp_exec *x, fp_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* zeroed memory, counted in stats.allocations (and hook_allocations inside a hook) */
void *fpx_alloc(fp_exec *x, size_t n, size_t size);
void fpx_free(void *p);
/* bytes a communication op sends from this rank (statistics) */
int64_t fpx_send_bytes(const fp_xop *o);
/* "pre_forward(fc1)" for segment k: into buf */
const char *fpx_seg_label(const fp_exec *x, int32_t k, char *buf, size_t len);

/* the watchdog's limit (seconds, 0: none) from cfg->timeout_s and the
 * environment's FLEXPLAN_TIMEOUT; FP_ERR_ARG for a malformed variable */
fp_status fpx_timeout(fp_exec *x, const fp_exec_config *cfg, double *out);

/* ---- measured timing (timing.c) ------------------------------------------------------ */
/* microseconds on CLOCK_MONOTONIC */
double fpx_now_us(void);
/* op o's instance of stream-step `step` started (end=false) or ended (end=true)
 * now; a start already recorded is kept (a wait tried several times) */
void fpx_time_op(fp_exec *x, const fp_xop *o, int64_t step, bool end);
/* hook `seg` of step x->stats.steps ran from enter to leave */
void fpx_time_hook(fp_exec *x, int32_t seg, double enter, double leave);
void fpx_timing_free(fp_exec *x);

#endif
