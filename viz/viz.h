/* viz.h - the plan viewers: what `flexplan viz` and `compile --emit=trace|html`
 * show, computed once from a program and the simulator, then written as a
 * Chrome Trace Event file (Perfetto, chrome://tracing) or as one
 * self-contained HTML page (docs/viz.md).
 *
 * A view holds the simulator's modeled times of every op (planner/sim.h), the
 * modeled memory timeline, each device buffer's live intervals in modeled time
 * (the same rule the timeline is built from, so the intervals live at any
 * instant add up to the timeline there), the dependency of every wait (the op
 * before its record, the op after the wait), the intervals in which the
 * compute stream sits idle waiting for communication, and the ranks to show:
 * by default rank 0 and one rank of every other layout class (ranks whose
 * resolved work differs: ops they skip under `only=`, counts from ragged
 * tables). Every time is modeled, not measured; the simulator models one
 * schedule for every rank, so ranks differ in the ops they run and the bytes
 * they move, not in time. */
#ifndef FP_VIZ_H
#define FP_VIZ_H

#include "../ir/ir.h"
#include "../planner/sim.h"

/* one interval in which something occupies device memory */
typedef struct fp_viz_life {
  int32_t buf;        /* the buffer; -1: activations of `module` */
  int32_t module;     /* activations: the module; else -1 */
  int32_t micro;      /* activations: the micro-batch; else -1 */
  int cat;            /* timeline category (fp_buf_cat, or FP_MEMTL_ACT) */
  int64_t bytes;
  double t0, t1;      /* modeled [t0, t1); t0 == t1: live at that instant only */
  int32_t first, last; /* the ops that open and close it */
} fp_viz_life;

/* the dependency a wait enforces: the op before its record (on the record's
 * stream) must end before the op after the wait (on the wait's stream) starts */
typedef struct fp_viz_flow {
  int32_t wait;       /* the wait op */
  int32_t record;     /* the record it waits for (the latest one before it in program order) */
  bool next_step;     /* no op follows the wait in this step: it holds back the next step's */
} fp_viz_flow;

/* an interval in which the compute stream is idle at a wait for an event
 * recorded on ag or rs, or runs a collective itself: exposed communication */
typedef struct fp_viz_exposed {
  double t0, t1;
  int32_t op;         /* the wait (or the collective on compute) */
  int32_t cause;      /* the op the wait's record follows (-1: none, or a collective) */
} fp_viz_exposed;

/* one rank shown */
typedef struct fp_viz_rank {
  int64_t rank;
  int32_t cls;        /* its layout class (0: rank 0's) */
  int64_t members;    /* ranks in that class */
} fp_viz_rank;

/* a measured step of one rank (measured.c): what the executor recorded with
 * fp_exec_timing_start / fp_exec_timing_write, in microseconds from the
 * step's step_begin entry */
typedef struct fp_viz_measured {
  const char *path;   /* the record's file */
  int64_t rank, step; /* whose, and which step (the file's last) */
  double *hook_t;     /* [nsegs][2]: each hook's enter and leave */
  double *op_t;       /* [nops][2]: each op's start and end; -1 where this rank did not run it */
  double end_us;      /* the latest time in the step */
} fp_viz_measured;

/* Read a measured-timing record ("flexplan.timing.v1") for program p: its
 * plan hash must be p's and its numbering p's; the last step is taken.
 * Located errors through d; false after reporting. */
bool fpi_viz_measured_read(fp_arena *a, fp_diag *d, const char *path, const fp_prog *p, fp_viz_measured *out);

typedef struct fp_viz {
  fp_arena *a;
  const fp_prog *p;
  fp_hw hw;               /* the machine simulated */
  fp_sim sim;             /* modeled times of the steady-state step */
  fp_memtl *tl;           /* modeled memory timeline (fpi_sim_memory) */
  fp_viz_life *lives;     /* transient buffers' intervals, then activations'; by t0 */
  int32_t nlives;
  int64_t persistent_bytes[FP_MEMTL_NCATS]; /* persistent device buffers, live all step */
  int32_t persistent_count[FP_MEMTL_NCATS];
  fp_viz_flow *flows;     /* one per wait, in program order */
  int32_t nflows;
  fp_viz_exposed *exposed; /* in time order */
  int32_t nexposed;
  double exposed_us;      /* their total (equals sim.exposed_comm_us) */
  int64_t budget;         /* the plan's memory budget, else the device memory (hw.hbm_bytes) */
  bool budget_from_plan;  /* true: memory_budget_bytes; false: the device memory */
  int32_t peak;           /* index of the timeline's first point with the most bytes */
  double t_lo, t_hi;      /* the step's extent: earliest op start (<= 0), latest op end */
  fp_viz_rank *ranks;     /* the ranks shown, in the order given (default: by rank) */
  int32_t nranks;
  int32_t nclasses;       /* layout classes among all ranks */
  uint64_t hash;          /* fpi_prog_hash */
  const fp_viz_measured *measured; /* measured steps drawn beside the modeled one (set by the caller) */
  int32_t nmeasured;
  /* private: ops whose work depends on the rank (only=, table counts) */
  int32_t *rdep;
  int32_t nrdep;
} fp_viz;

/* The view of P simulated on hw (a valid machine), in arena a. ranks (n > 0)
 * are the ranks to show, in that order; NULL: rank 0 and the first rank of
 * every other layout class, at most max_default of them (0: no limit). User
 * errors are reported through d (may be NULL) and return false: a rank
 * outside [0, world_size) ("flexplan: error: --ranks: ..."), and a machine so
 * slow that the modeled step is not a finite number ("WHERE: error: ...",
 * where names the plan). */
bool fpi_viz_build(fp_arena *a, fp_diag *d, const char *where, const fp_prog *P, const fp_hw *hw, const int64_t *ranks,
                  int32_t n, int32_t max_default, fp_viz *out);

/* does op i run on rank r (its `only=` predicate) */
bool fpi_viz_runs(const fp_viz *v, int32_t i, int64_t r);
/* the bytes op i moves or touches on rank r: a gather's or reduce-scatter's
 * whole buffer (G x count, or the table's sum for the v-forms), else count x
 * element size on that rank (x rows for a copy); 0 for sync and compute */
int64_t fpi_viz_bytes(const fp_viz *v, int32_t i, int64_t r);
/* the index of rank r in op i's communicator (0 without one) */
int64_t fpi_viz_g(const fp_viz *v, int32_t i, int64_t r);
/* the ends of flow f as rank r sees them: *from, the last op on the record's
 * stream before the record that runs on r and takes time (the record itself
 * when none); *to, the first such op after the wait on its stream (the wait
 * itself when none follows in this step) */
void fpi_viz_flow_ends(const fp_viz *v, const fp_viz_flow *f, int64_t r, int32_t *from, int32_t *to);
/* a short label of op i into buf: "all_gather b3", "forward layers.3", "wait e12" */
void fpi_viz_op_label(const fp_viz *v, int32_t i, char *buf, size_t cap);
/* segment seg's label into buf: "pre_forward(layers.3) mb0" */
void fpi_viz_seg_label(const fp_viz *v, int32_t seg, char *buf, size_t cap);

/* Chrome Trace Event JSON (docs/viz.md); false on a write error */
bool fpi_viz_trace(const fp_viz *v, FILE *f);
/* one self-contained HTML page (docs/viz.md); false on a write error */
bool fpi_viz_html(const fp_viz *v, FILE *f);

#endif
