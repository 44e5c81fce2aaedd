/* sim.h - the simulator: replays a program on virtual streams with the cost
 * model's op times and reports the modeled step, compute and exposed
 * communication, per op and per segment, and the modeled memory timeline.
 *
 * Model (docs/cost-model.md): each stream runs its ops in program order, one
 * at a time; the host issues every op at once (it is never the bottleneck);
 * a `wait` makes its stream's next op start no earlier than the end of the op
 * before the matching `record` (the latest record in program order; an event
 * not recorded yet in this step is the previous step's record; an event never
 * recorded does not hold anything back); a grouped call (same op.group, one
 * after another on one stream) runs as one call. Two steps are replayed and
 * the second, the steady state, is reported. Every figure is modeled. */
#ifndef FP_SIM_H
#define FP_SIM_H

#include "../ir/ir.h"

/* one segment (trainer hook) of the reported step */
typedef struct fp_sim_seg {
  int32_t seg;        /* index into P->segs */
  double start_us;    /* earliest start of its ops (an empty segment: the end of the one before) */
  double end_us;      /* latest end of its ops */
  double compute_us;  /* its compute placeholders' time */
  double exposed_us;  /* communication the compute stream waited for in it (see fp_sim) */
  double hook_us;     /* the hook call's own host time (hw.hook_us) */
} fp_sim_seg;

typedef struct fp_sim {
  /* times are microseconds from the start of the reported step (the end of
   * the first: an op of another stream may start a little before 0) */
  double step_us;          /* the step's length: when the second step's last op ends, minus the first's */
  double compute_us;       /* the compute placeholders' time (forward, backward, optimizer) */
  double exposed_comm_us;  /* compute stream idle at waits on events recorded on ag or rs,
                            * plus collectives issued on the compute stream itself */
  double compute_local_us; /* local kernels (casts, copies, memsets, ...) on the compute stream */
  double busy_us[FP_NSTREAMS]; /* per stream: time its ops run */
  double hooks_us;         /* the trainer's stream held by hook calls themselves (nsegs x hw.hook_us) */
  double *start_us, *end_us;   /* per op (P->nops; sync ops take no time) */
  /* exposed communication by op (P->nops): at a compute-stream wait, the time
   * the compute stream stood still for it, and the op it waited for (the
   * last op before the matching record on ag or rs); at a collective issued
   * on the compute stream, its own time and itself; 0 and -1 elsewhere.
   * Their sum is exposed_comm_us. */
  double *exposed_us;
  int32_t *exposed_by;
  fp_sim_seg *segs;        /* one per P->segs, in order */
  int32_t nsegs;
  /* the waits that hold the step's end back: followed from the op that
   * ends the second step, each op's start is bound either by the op before
   * it on its stream or, at a wait whose event came later than its stream,
   * by that record (and so the op before the record); the waits that bound
   * on that path (op indices; one op may appear for both steps). The rest
   * of the path - the ops' own times, stream order, hook calls - is the
   * same in any program with the same ops, so only a change to one of
   * these waits can shorten the step. */
  int32_t *path_waits, npath_waits;
} fp_sim;

/* Replay P (a program that passed fpi_ir_verify) on hw into *out (arrays in
 * a). False when hw is not a valid machine (fpi_hw_valid) or the modeled
 * times overflow (rates so small that the step is not a finite number; *out
 * is then meaningless). */
bool fpi_simulate(fp_arena *a, const fp_prog *P, const fp_hw *hw, fp_sim *out);

/* The modeled memory timeline of the reported step from the simulated times:
 * persistent device buffers all step; each live range of a transient device
 * buffer from the start of the first op in it that uses the buffer (operands
 * dst/src/aux, compute `uses`) to the end of the last (a transient buffer
 * with no live range: from its first use to its last); the trainer's
 * activations of a module (activation_bytes) from the start of its forward
 * compute of a micro-batch to the end of its backward compute of that
 * micro-batch (to the end of the step without one). Host buffers are not on
 * the device and not in it. Points are in time order; at one instant frees
 * come before allocations (a range ending at t and one starting at t never
 * overlap), except that a range of zero length is live at its instant. */
fp_memtl *fpi_sim_memory(fp_arena *a, const fp_prog *P, const fp_sim *S);

/* The modeled span of every live range of P (P->nlives, in order) on the
 * replay S, as the memory timeline counts it: t0[k] the start of the first
 * op in range k that uses its buffer, t1[k] the end of the last; NaN for
 * both when no op in it does. memplan places by these (docs/schedule.md). */
void fpi_sim_live_spans(const fp_prog *P, const fp_sim *S, double *t0, double *t1);

/* Print the exposed communication of the reported step ranked, the largest
 * first (at most `top` rows; <= 0: all): the op the compute stream waited
 * for, its bucket, the hook whose segment waited, modeled ms and share of
 * the step. */
void fpi_sim_print_exposed(const fp_prog *P, const fp_sim *S, int top, FILE *f);

/* Print the per-segment table and the totals, every figure labelled
 * modeled; tl (may be NULL) adds the memory figures. */
void fpi_sim_print(const fp_prog *P, const fp_sim *S, const fp_hw *hw, const fp_memtl *tl, FILE *f);

/* a segment's hook as the reports print it ("pre_forward('layers.0')"),
 * into buf; and the width of the reports' hook column for P (4 to 60) */
const char *fpi_sim_hook_label(const fp_prog *P, const fp_seg *S, char *buf, size_t n);
int fpi_sim_hook_width(const fp_prog *P);

#endif
