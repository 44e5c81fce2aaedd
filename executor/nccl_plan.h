/* nccl_plan.h - the NCCL backend's decisions that need no GPU, in plain C so
 * that they are built and tested everywhere (tests/test_nccl_plan.c), CUDA
 * or not:
 *
 *  - bootstrap: which way the ranks get NCCL's unique id, from the config,
 *    whether MPI is initialized and NCCL_COMM_ID (fpn_boot_resolve);
 *  - communicators: which (plan communicator, stream) pairs carry NCCL work
 *    and so get their own ncclCommSplit, with the split's color and key;
 *  - the issue list: each segment as a sequence of items in the order a hook
 *    issues them - a record or wait (issued as a CUDA event operation), or
 *    a run: the consecutive non-sync ops of one stream between two of that
 *    stream's records/waits (launched op by op; graph mode captures a whole
 *    segment's items, runs and records/waits, as one CUDA graph);
 *  - per record op, its CUDA event; per segment, the side streams that get
 *    work (capture-safe mode forks them into the trainer's capture); the
 *    NVTX range names; what each segment adds to the statistics.
 *
 * Why runs, and why placed where they are (docs/cuda.md, "Graphs"): an item
 * list is equivalent to the program order as long as every record and wait
 * keeps its place relative to everything on its own stream and to every
 * other record and wait - which is all a CUDA event observes. Moving a run's
 * later ops up to its first op moves them only past other streams' work. A
 * run is cut by every record/wait of its stream in the *program*, including
 * those this rank skips (`only`), and placed at the program position of its
 * first op, so the NCCL calls of different communicators are issued in the
 * same order on every rank, as NCCL requires of concurrent communicators. */
#ifndef FP_NCCL_PLAN_H
#define FP_NCCL_PLAN_H

#include "exec_impl.h"

typedef enum {
  FPN_BOOT_ID = FP_NCCL_BOOT_ID,
  FPN_BOOT_MPI = FP_NCCL_BOOT_MPI,
  FPN_BOOT_ENV = FP_NCCL_BOOT_ENV,
  FPN_BOOT_LOCAL = 16, /* a world of one rank, no MPI, no NCCL_COMM_ID: an id made locally */
} fpn_boot;

/* Resolve cfg->nccl_boot (and check the NCCL-specific config): mpi_up says
 * whether MPI is initialized (and not finalized), comm_id is getenv
 * ("NCCL_COMM_ID"). FP_ERR_ARG with a message in msg when the config cannot
 * work. */
fp_status fpn_boot_resolve(const fp_exec_config *cfg, bool mpi_up, const char *comm_id, fpn_boot *out, char *msg,
                           size_t len);
const char *fpn_boot_name(fpn_boot b);

typedef enum { FPN_SYNC, FPN_RUN } fpn_kind;

typedef struct fpn_item {
  fpn_kind kind;
  int32_t stream;
  int32_t xop;   /* SYNC: the record/wait (index into x->xops); RUN: its first op (-1: empty here) */
  int32_t pos;   /* RUN: position of the first op in x->sops[stream] */
  int32_t nops;  /* RUN: ops (consecutive in x->sops[stream]); 0: nothing on this rank */
  int32_t run;   /* RUN: the run's index; -1 when empty */
  int32_t prog_first; /* the program index of the item's first op (its place in the order) */
} fpn_item;

typedef struct fpn_segsum { /* what one segment adds to the statistics */
  int64_t local, coll, bytes;
} fpn_segsum;

typedef struct fpn_plan {
  fpn_item *items;
  int32_t nitems;
  int32_t *seg_first;     /* nsegs + 1: segment k's items are [seg_first[k], seg_first[k+1]) */
  int32_t nruns;          /* non-empty runs */
  int32_t *run_item;      /* nruns: the item of each run */
  /* communicators: pair[c * FP_NSTREAMS + s] = index of the NCCL communicator
   * for plan communicator c on stream s, -1 when no NCCL op uses it */
  int32_t *pair;
  int32_t npairs;
  int32_t *pair_comm, *pair_stream; /* npairs: the plan communicator and stream of each */
  int32_t *color, *key;   /* npairs: ncclCommSplit(world, color, key) on this rank */
  /* events: slot[j] for record xop j (-1 for others); waits use their record's */
  int32_t *event_slot;
  int32_t nevents;
  /* per segment: bit s set when side stream s (ag, rs) has an item on this rank */
  uint8_t *seg_side;
  /* NVTX names: label[j] for xop j, run_label[r] for run r */
  char *text;
  int32_t *label, *run_label; /* offsets into text */
  fpn_segsum *sums;       /* nsegs */
  /* graph mode, one graph per hook: per segment, bit s set when stream s has
   * an item (run or record/wait) on this rank, and whether a run is among
   * them (only such segments get a graph); per record event slot, how its
   * waits see it: FPN_REC_LOCAL a wait in the same segment of the same step
   * (an edge inside the segment's graph), FPN_REC_AWAY a wait in another
   * segment or the next step (an external event-record node) */
  uint8_t *seg_streams;
  uint8_t *seg_has_run;
  uint8_t *rec_use;
} fpn_plan;
enum { FPN_REC_LOCAL = 1, FPN_REC_AWAY = 2 };

/* build from x's resolved program (exec.c): allocations through fpx_alloc
 * (counted), none later */
fp_status fpn_plan_build(fp_exec *x, fpn_plan *out);
void fpn_plan_free(fpn_plan *p);

/* the ops of run item `it` (pointers into x->sops) */
static inline fp_xop *const *fpn_run_ops(const fp_exec *x, const fpn_item *it) { return &x->sops[it->stream][it->pos]; }

/* bytes this rank passes to communication calls for op o (send side) */

/* NCCL reads NCCL_COMM_ID in ncclGetUniqueId (the id becomes the address)
 * and in every ncclCommInitRank (rank 0 binds the address, whatever id it is
 * given), so only the NCCL_COMM_ID bootstrap may let NCCL see it: the other
 * bootstraps (an id over MPI or from the trainer, a transfer's communicator)
 * hide it around those calls. Returns the hidden value (NULL: unset), to give
 * back with fpn_comm_id_restore. Not thread-safe (the environment is not). */
char *fpn_comm_id_hide(void);
void fpn_comm_id_restore(char *saved);

#endif
