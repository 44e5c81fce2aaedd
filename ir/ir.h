/* ir.h - the flexplan communication IR: one SPMD program for every rank.
 *
 * A program is a flat op array (SQLite VDBE style) grouped into segments, one
 * per trainer hook, plus the tables its operands refer to: communicators,
 * buffers (each with a fixed arena offset), per-rank extent tables, modules
 * and params (the layout the executor needs to give the trainer its views).
 * Ops are appended through the builder below; ir/print.c writes the text form
 * (.fpir), ir/parse.c reads it back (print(parse(x)) == x), ir/verify.c checks
 * a program, ir/plan.c writes and reads plan.json.
 *
 * Rank-relative operands. Every rank runs the same op sequence; an operand
 * region resolves on the rank whose index in the op's communicator is g:
 *   byte offset = region.off + g * region.stride
 *                 + (region.tabrel ? tab.off[g] * dtype size : 0)
 * where tab = tabs[op.tab]. A communicator of size S and stride T groups the
 * ranks r with equal (r - g*T), g = (r / T) % S: consecutive blocks (T = 1)
 * or strided replica groups (T = block size). */
#ifndef FP_IR_H
#define FP_IR_H

#include "../base/base.h"
#include "../base/optim.h"

typedef enum { FP_OPC_COMM, FP_OPC_LOCAL, FP_OPC_SYNC, FP_OPC_COMPUTE } fp_opclass;

typedef enum {
#define FP_OP(id, name, cls, doc) FP_OP_##id,
#include "ops.def"
#undef FP_OP
  FP_NOPS
} fp_opcode;

const char *fpi_op_name(fp_opcode c);
fp_opclass fpi_op_class(fp_opcode c);
const char *fpi_op_doc(fp_opcode c);
int fpi_op_parse(const char *name); /* -1 if unknown */

/* streams: X(enum, name) */
#define FP_STREAMS(X)                                              \
  X(COMPUTE, "compute") /* the trainer's stream; hooks run on it */ \
  X(AG, "ag")           /* all-gathers and their casts */           \
  X(RS, "rs")           /* reduce-scatters, all-reduces, grad math */ \
  X(COPY, "copy")       /* host <-> device copies of offloaded buckets */
typedef enum {
#define X(e, s) FP_STREAM_##e,
  FP_STREAMS(X)
#undef X
  FP_NSTREAMS
} fp_stream;
const char *fpi_stream_name(int s);

/* segment kinds = trainer hooks: X(enum, name, takes a module) */
#define FP_SEGS(X)                                                           \
  X(STEP_BEGIN, "step_begin", 0)         /* once, before the first forward */\
  X(PRE_FORWARD, "pre_forward", 1)       /* before module m's forward */     \
  X(POST_FORWARD, "post_forward", 1)     /* after module m's forward */      \
  X(PRE_BACKWARD, "pre_backward", 1)     /* before module m's backward */    \
  X(POST_BACKWARD, "post_backward", 1)   /* after m's backward wrote grads */\
  X(PRE_OPTIMIZER, "pre_optimizer", 0)   /* grads final; before the step */  \
  X(POST_OPTIMIZER, "post_optimizer", 0) /* after the optimizer step */
typedef enum {
#define X(e, s, m) FP_SEG_##e,
  FP_SEGS(X)
#undef X
  FP_NSEGKINDS
} fp_seg_kind;
const char *fpi_seg_name(int k);
bool fpi_seg_has_module(int k);

/* buffer lifetime kinds */
typedef enum {
  FP_BUF_PERSISTENT, /* lives for the executor's life (main weights, grads) */
  FP_BUF_TRANSIENT,  /* lives from its first to its last use in a step */
} fp_buf_kind;

/* buffer categories (memory timeline, viewer): X(enum, name) */
#define FP_BUFCATS(X)                                                        \
  X(MAIN_WEIGHT, "main_weight")       /* optimizer weights (sharded) */      \
  X(MAIN_GRAD, "main_grad")           /* gradients the optimizer reads */    \
  X(UNSHARDED_WEIGHT, "unsharded_weight") /* compute weights (param dtype) */\
  X(UNSHARDED_GRAD, "unsharded_grad") /* grads the trainer's backward writes */\
  X(STAGING, "staging")               /* casts and reduction outputs */      \
  X(RESHARD, "reshard")               /* partially sharded copy for backward */\
  X(OPT_STATE, "optimizer_state")     /* optimizer state (sharded like the main grads) */
typedef enum {
#define X(e, s) FP_CAT_##e,
  FP_BUFCATS(X)
#undef X
  FP_NBUFCATS
} fp_buf_cat;
const char *fpi_buf_cat_name(int c);

typedef struct fp_ir_comm {
  const char *name;  /* "world", "shard", "replica", "reshard4", ... */
  int64_t size;      /* ranks per instance */
  int64_t stride;    /* global-rank distance between consecutive members */
  int32_t line;      /* .fpir source line (0: built) */
} fp_ir_comm;

typedef struct fp_ir_table {
  const char *name;
  int64_t n;         /* entries: one per rank of the communicator it serves */
  int64_t *off;      /* element offsets */
  int64_t *cnt;      /* element counts */
  int32_t line;      /* .fpir source line (0: built) */
} fp_ir_table;

typedef struct fp_ir_buf {
  const char *name;  /* unique, e.g. "b3.unsharded.mb0" */
  fp_buf_kind kind;
  fp_buf_cat cat;
  int32_t bucket;    /* -1: none */
  bool host;         /* host (offload) memory instead of the device arena */
  int64_t bytes;     /* size on the rank that needs most (aligned to 256) */
  int64_t offset;    /* arena byte offset; -1 until memplan */
  int32_t line;      /* .fpir source line (0: built) */
} fp_ir_buf;

/* one live range of a transient buffer: from op `first` to op `last`
 * (inclusive, program order). A transient buffer keeps one arena address for
 * the whole step (the trainer's views and captured graphs depend on it) but
 * may be live several times (forward, backward, each micro-batch); its bytes
 * are free for others between its ranges. Ops that use the buffer must lie
 * inside one of its ranges (the verifier checks). */
typedef struct fp_ir_live {
  int32_t buf;
  int32_t first, last;
} fp_ir_live;

typedef struct fp_ir_module {
  const char *name;
  double flops_fwd, flops_bwd; /* per micro-batch */
  int64_t activation_bytes;
  bool recompute;    /* its forward is recomputed inside its backward (activation
                      * checkpointing): the backward compute op costs flops_fwd + flops_bwd
                      * and the trainer may run pre/post_forward again inside the backward */
  int64_t saved_bytes; /* recompute: activation bytes kept from forward to backward
                        * (activation_bytes then live only during the backward); else 0 */
  int32_t line;      /* .fpir source line (0: built) */
} fp_ir_module;

/* where one param lives in one buffer: byte offset of its slot */
typedef struct fp_view {
  int32_t buf;       /* -1: absent on every rank */
  int64_t off;
} fp_view;

typedef struct fp_ir_param {
  const char *name;
  int ndim;
  int64_t shape[8];
  int32_t module, bucket;
  fp_dtype main_dtype;   /* main weight shard */
  fp_dtype param_dtype;  /* unsharded compute weight and grad */
  fp_dtype grad_dtype;   /* main grad shard */
  bool requires_grad;
  int placement;         /* fp_placement_kind (planner/front.h) */
  int32_t dim;           /* shard: split dim */
  int32_t comm;          /* the communicator it is sharded over (-1 none) */
  int64_t owner;         /* owned: rank in comm; else -1 */
  int32_t tab;           /* ragged: extent table (elements of the flat param); else -1 */
  int64_t chunk;         /* shard: padded elements per rank; ragged: slot elements */
  int32_t tp_dim;        /* the dim sharded over the mesh's tp ranks (prog.tp > 1): shape is this
                          * rank's slice, the global shape has shape[tp_dim] * tp; -1: the param is
                          * whole on every tp rank (replicated over tp), or tp is 1 */
  fp_view main, grad;    /* shard storage (main dtype / grad dtype) */
  fp_view weight, ugrad; /* unsharded compute weight and grad (param dtype) */
  fp_view opt;           /* optimizer state (prog.optim_dtype): fpi_optim_states(prog.optim)
                          * slots of `chunk`-like extent (the main grad's slot elements),
                          * the k-th at opt.off + k * (its buffer's bytes / states) */
  fp_view scales;        /* MXFP8 weights (main_dtype = param_dtype = e4m3, a frozen param kept
                          * unsharded): the e8m0 scales, one per 32-element block of the flat
                          * param (fpi_mx_blocks(numel)), in a persistent buffer; buf -1
                          * for every other param */
  int32_t *users;        /* modules other than `module` whose forward also reads it (model.json
                          * v2 "uses": tied weights), in module order; NULL when none */
  int32_t nusers;
  int32_t line;          /* .fpir source line (0: built) */
} fp_ir_param;

typedef struct fp_region {
  int32_t buf;       /* -1: no operand */
  bool tabrel;       /* add tabs[op.tab].off[g] * dtype size */
  int64_t off;       /* bytes */
  int64_t stride;    /* bytes per rank index g */
} fp_region;

typedef enum {
  FP_PASS_FWD, /* the module's forward */
  FP_PASS_BWD, /* the module's backward */
  FP_PASS_OPT, /* the optimizer step (module -1): reads main grads, writes main weights */
} fp_pass;

/* how a reduction collective (reduce_scatter[_v], all_reduce, reduce)
 * combines the ranks' values: X(enum, name). The default is the sum. */
#define FP_REDOPS(X)                                                          \
  X(SUM, "sum") /* sum_j src_j */                                              \
  X(AVG, "avg") /* sum_j src_j / G (NCCL's ncclAvg, torch's ReduceOp.AVG) */
typedef enum {
#define X(e, s) FP_RED_##e,
  FP_REDOPS(X)
#undef X
  FP_NREDOPS
} fp_redop;
const char *fpi_redop_name(int r);
/* true for the opcodes that reduce (and so take a fp_redop) */
bool fpi_op_reduces(fp_opcode c);
/* true for the opcodes whose table lists regions (split_copy, chunk_cat:
 * any number of entries, no comm) rather than one extent per rank */
bool fpi_op_regions(fp_opcode c);

/* a strided copy's shape (copy, split_copy, chunk_cat): `rows` rows, each
 * dpitch bytes apart in dst and spitch bytes apart in src. Kept in the
 * program's table (prog.shapes), not in every op: most ops have none. */
typedef struct fp_op_shape {
  int64_t rows;           /* number of rows (1 for a plain copy) */
  int64_t dpitch, spitch; /* row pitches in bytes */
} fp_op_shape;

typedef struct fp_op {
  /* one byte each (every enum here has fewer than 256 values), and the
   * copies' rows and pitches in a table of their own (prog.shapes): the
   * record is 152 bytes, not 192 (full-size enums) or 176 (rows and
   * pitches in it) - 2.2M ops at 100,000 units */
  fp_opcode code : 8;
  fp_stream stream : 8;
  fp_dtype dtype : 8;  /* element type of dst (and of a collective) */
  fp_dtype sdtype : 8; /* element type of src (cast, add, quantize); else = dtype */
  fp_pass pass : 8;    /* compute: forward, backward or optimizer */
  fp_redop red : 8;    /* reductions: sum (default) or avg over op.comm's G ranks */
  int32_t seg;       /* segment index */
  int32_t comm;      /* collective's communicator; local ops: the group g indexes (-1) */
  int32_t only;      /* -1: every rank; else only ranks with index `only` in only_comm */
  int32_t only_comm;
  int32_t root;      /* broadcast/reduce root (index in comm); send/recv peer distance */
  int32_t event;     /* record/wait */
  int32_t module;    /* compute: module index; else -1 */
  int32_t bucket;    /* the bucket it serves, for viewers (-1) */
  int32_t group;     /* grouped-call id (coalesce): equal ids issue as one group; -1 */
  int32_t tab;       /* extent table (v-collectives, ragged local ops); -1 */
  int32_t uses, nuses; /* compute: the buffers the trainer reads or writes during
                        * this pass (unsharded weights and grads): prog.uses[uses
                        * .. +nuses); they count as used by this op */
  int32_t line;      /* .fpir source line it was parsed from (0: built) */
  int32_t shape;     /* its rows and pitches: prog.shapes[shape]; -1: one row, pitches 0
                      * (fpi_op_shape_of reads them, fpi_ir_op_shape sets them) */
  int64_t count;     /* elements (see ops.def); with tab >= 0, local ops use tab.cnt[g] */
  double alpha;      /* scale: factor; compute: flops */
  fp_region dst, src, aux;
} fp_op;

typedef struct fp_seg {
  fp_seg_kind kind;
  int32_t module;    /* -1 for step_begin / pre_optimizer / post_optimizer */
  int32_t micro;     /* micro-batch index (0 for step_begin/optimizer) */
  int32_t first, nops; /* ops[first .. first+nops) */
  int32_t line;      /* .fpir source line (0: built) */
} fp_seg;

/* The modeled machine: the rates the cost model divides by and the latencies
 * it adds (planner/cost.c has the presets; docs/cost-model.md cites every
 * value). Part of the program's header, so the plan hash covers it. Rates
 * are in GB/s = 1e9 bytes/s. A program with no hardware (hand-written
 * .fpir) has name == NULL and every field 0. */
typedef struct fp_hw {
  const char *name;      /* preset it starts from ("h100-sxm", "h200"); NULL: none */
  int64_t gpus_per_node; /* GPUs in one NVLink domain (each with its own NIC) */
  int64_t hbm_bytes;     /* device memory per GPU */
  double flops;          /* FLOP/s of the trainer's compute (dense bf16 peak) */
  double nvlink_gbps;    /* NCCL bus bandwidth inside a node */
  double ib_gbps;        /* NCCL bus bandwidth through one NIC */
  double hbm_gbps;       /* device memory bandwidth (local kernels, optimizer) */
  double pcie_gbps;      /* host <-> device copies, one direction */
  double base_us;        /* latency of one collective call (NCCL ring base) */
  double nvlink_hop_us;  /* latency per ring step over NVLink */
  double net_hop_us;     /* latency per ring step over the network */
  double launch_us;      /* the shortest a local kernel takes */
  double hook_us;        /* host time of one hook call, apart from the waits and kernels it runs (0: not
                          * modeled; fitted by flexplan calibrate; optional: omitted when 0) */
} fp_hw;

/* The modeled memory timeline of one step (planner/sim.c fpi_sim_memory):
 * device bytes live per category over modeled time. The arena is the same
 * on every rank (SPMD), so one timeline describes every rank. Derived data:
 * plan.json carries it outside the hash; the .fpir text does not. */
#define FP_MEMTL_ACT FP_NBUFCATS /* the extra category: the trainer's activations */
#define FP_MEMTL_NCATS (FP_NBUFCATS + 1)
typedef struct fp_memtl_point {
  double t_us;                    /* modeled time from the start of the step */
  int64_t bytes[FP_MEMTL_NCATS];  /* device bytes live from t_us on, per category */
} fp_memtl_point;
typedef struct fp_memtl {
  fp_memtl_point *pts;     /* time-ordered (t_us non-decreasing) */
  int32_t npts;
  int64_t peak_bytes;      /* most bytes live at once over the points, activations included */
  int64_t lower_bound_bytes; /* most arena bytes live at once (no activations) */
} fp_memtl;
/* the name of timeline category c (fp_buf_cat names, then "activations") */
const char *fpi_memtl_cat_name(int c);
/* the most bytes live at any point: all categories, and all but activations */
void fpi_memtl_maxima(const fp_memtl *t, int64_t *peak, int64_t *lower_bound);
/* NULL when t is self-consistent (times finite and ordered, bytes >= 0, the
 * two maxima as the points say), else what is wrong */
const char *fpi_memtl_check(const fp_memtl *t);

/* What a compile knows of its program that the program does not hold: the
 * figures of `flexplan compile --emit=summary` beyond the program's own
 * (planner/summary.c fpi_summarize). plan.json carries them as "figures",
 * derived data outside the hash, so a loaded plan summarizes as the compile
 * that wrote it did. */
typedef struct fp_figures {
  int64_t comm_bytes_per_rank, persistent_bytes, peak_bytes, lower_bound_bytes, activation_peak_bytes;
  int64_t prefetch_forward, prefetch_backward;
  double modeled_step_ms, modeled_compute_ms, modeled_exposed_comm_ms;
} fp_figures;

typedef struct fp_prog {
  fp_arena *arena;
  /* header */
  const char *model;
  const char *strategy;
  int64_t world_size, ranks_per_node, grad_accumulation;
  int64_t tp;               /* the mesh's tensor-parallel size (tp innermost; default 1): each
                             * rank's params are its tp-local slices and its communicators run
                             * over the ranks of its tp index (strides multiples of tp) */
  int64_t arena_bytes;      /* memplan: bytes of the device arena */
  int64_t host_bytes;       /* memplan: bytes of the host arena */
  fp_hw hw;                 /* the modeled machine (name NULL: none) */
  int64_t memory_budget_bytes; /* the spec's device memory budget per rank (0: none);
                                * for viewers and checks against the timeline */
  fp_optim optim;           /* the optimizer whose state the plan holds (none: no state) */
  fp_dtype optim_dtype;     /* its state's dtype (when optim != none) */
  fp_memtl *memtl;          /* modeled memory timeline (derived; NULL: none) */
  fp_figures *figures;      /* the compile's figures (derived; NULL: none) */
  /* tables */
  fp_ir_comm *comms;    int32_t ncomms;   int64_t cap_comms;
  fp_ir_table *tabs;    int32_t ntabs;    int64_t cap_tabs;
  fp_ir_buf *bufs;      int32_t nbufs;    int64_t cap_bufs;
  fp_ir_module *mods;   int32_t nmods;    int64_t cap_mods;
  fp_ir_param *params;  int32_t nparams;  int64_t cap_params;
  const char **buckets; int32_t nbuckets; int64_t cap_buckets; /* bucket names */
  fp_seg *segs;         int32_t nsegs;    int64_t cap_segs;
  fp_op *ops;           int32_t nops;     int64_t cap_ops;
  int32_t *uses;        int32_t nuses;    int64_t cap_uses; /* buffer ids (fp_op.uses) */
  fp_ir_live *lives;    int32_t nlives;   int64_t cap_lives; /* transient live ranges, in creation order */
  fp_op_shape *shapes;  int32_t nshapes;  int64_t cap_shapes; /* rows and pitches (fp_op.shape) */
  int32_t nevents;
} fp_prog;

/* op's rows and pitches: {1, 0, 0} when it has none (and for a shape out
 * of range, which the verifier reports) */
static inline fp_op_shape fpi_op_shape_of(const fp_prog *p, const fp_op *op) {
  if (op->shape < 0 || op->shape >= p->nshapes) return (fp_op_shape){1, 0, 0};
  return p->shapes[op->shape];
}

/* ---- builder ------------------------------------------------------------ */
fp_prog *fpi_prog_new(fp_arena *a);
/* a copy of src for the passes (coalesce, memplan, sync), which change only
 * its ops, buffers, segments and live ranges: those are its own (the ops
 * with room for as many again, what the sync pass adds, so that it adds
 * them in place); the
 * communicators, tables, modules, params, bucket names, use lists and op
 * shapes are shared with src, and neither program may change them after (names too);
 * the derived memtl / figures are not carried */
fp_prog *fpi_prog_fork(fp_arena *a, const fp_prog *src);
int fpi_ir_comm_add(fp_prog *p, const char *name, int64_t size, int64_t stride);
int fpi_ir_table_add(fp_prog *p, const char *name, int64_t n, const int64_t *off, const int64_t *cnt);
int fpi_ir_buf_add(fp_prog *p, const char *name, fp_buf_kind kind, fp_buf_cat cat, int bucket, int64_t bytes);
int fpi_ir_module_add(fp_prog *p, const char *name, double flops_fwd, double flops_bwd, int64_t act);
int fpi_ir_bucket_add(fp_prog *p, const char *name);
fp_ir_param *fpi_ir_param_add(fp_prog *p); /* zeroed except views/comm/tab = -1 */
void fpi_ir_param_reserve(fp_prog *p, int32_t n); /* room for n params (no growth while adding them) */
int fpi_ir_event_new(fp_prog *p);
/* open a new segment; ops emitted after go into it */
int fpi_ir_seg_begin(fp_prog *p, fp_seg_kind kind, int module, int micro);
/* append an op to the current segment: comm/only/root/event/module/bucket/
 * group/tab/shape = -1, regions empty (buf -1), sdtype = dtype */
fp_op *fpi_ir_emit(fp_prog *p, fp_opcode code, fp_stream s, fp_dtype dt, int64_t count);

/* add a live range [first_op, last_op] to a transient buffer */
void fpi_ir_buf_live(fp_prog *p, int buf, int32_t first_op, int32_t last_op);
/* attach the buffers a compute op's pass uses (copied into prog.uses) */
void fpi_ir_op_uses(fp_prog *p, fp_op *op, const int32_t *bufs, int n);
/* give op rows and pitches: a new entry of prog.shapes, unless they are
 * {1, 0, 0} (shape -1) */
void fpi_ir_op_shape(fp_prog *p, fp_op *op, int64_t rows, int64_t dpitch, int64_t spitch);

static inline fp_region fpi_reg(int buf, int64_t off) { fp_region r = {buf, false, off, 0}; return r; }
static inline fp_region fpi_reg_g(int buf, int64_t off, int64_t stride) { fp_region r = {buf, false, off, stride}; return r; }
static inline fp_region fpi_reg_t(int buf, int64_t off) { fp_region r = {buf, true, off, 0}; return r; }
static inline fp_region fpi_noreg(void) { fp_region r = {-1, false, 0, 0}; return r; }

/* ---- rank arithmetic ------------------------------------------------------ */
/* a cyclic_shard param's block (elements) from its extent table t, whose
 * entry g is {g * block, elements rank g holds}: rank g holds the blocks
 * g, g+G, ... (cnt[g] / block of them rounded up: the param's last block
 * may be short, and is then the last of its rank's), stored in order in
 * its slot.
 * 0 for a table of fewer than 2 entries (the verifier refuses it) */
static inline int64_t fpi_cyclic_block(const fp_ir_table *t) { return t->n > 1 ? t->off[1] : 0; }
/* a block-cyclic layout of n elements in blocks of b (b >= 1; the last block
 * short when b does not divide n) over G ranks: the blocks rank g holds
 * (g, g+G, ...), and the elements they hold (the short block, if it is g's,
 * is its last) */
static inline int64_t fpi_cyclic_blocks(int64_t n, int64_t b, int64_t G, int64_t g) {
  int64_t nb = (n + b - 1) / b;
  return g < nb ? (nb - g + G - 1) / G : 0;
}
/* c elements (c >= 1) in runs of b: the runs, and in *last the last one's
 * length (b, or fewer for a short last block) */
static inline int64_t fpi_cyclic_runs(int64_t c, int64_t b, int64_t *last) {
  int64_t runs = (c + b - 1) / b;
  *last = c - (runs - 1) * b;
  return runs;
}
static inline int64_t fpi_cyclic_elems(int64_t n, int64_t b, int64_t G, int64_t g) {
  int64_t k = fpi_cyclic_blocks(n, b, G, g), last = g + (k - 1) * G;
  return k == 0 ? 0 : (k - 1) * b + (n - last * b < b ? n - last * b : b);
}
/* index of global rank r inside communicator c */
static inline int64_t fpi_comm_index(const fp_ir_comm *c, int64_t r) { return (r / c->stride) % c->size; }
/* byte offset of region on a rank whose index in the op's comm is g */
int64_t fpi_region_offset(const fp_prog *p, const fp_op *op, const fp_region *r, fp_dtype dt, int64_t g);
/* element count an op moves/touches on a rank with index g (tables resolved) */
int64_t fpi_op_count(const fp_prog *p, const fp_op *op, int64_t g);

/* ---- accesses and aliases (ir/access.c) ------------------------------------ */
/* One buffer an op touches and how. The unit of ordering is the buffer: the
 * verifier's race rule and the sync pass agree on these sets. */
typedef struct fp_access {
  int32_t buf;
  bool read, write;
} fp_access;
#define FP_MAX_OPND_ACCESS 3
/* the buffers op reads/writes (operands; compute: its uses, the trainer's
 * backward writing unsharded grads and the optimizer main weights); out
 * needs room for FP_MAX_OPND_ACCESS + op->nuses; returns how many */
int fpi_op_accesses(const fp_prog *p, const fp_op *op, fp_access *out);
/* Per stream, the latest clock at which each arena byte was written and
 * read, over every buffer: the latest conflicting access to a buffer is the
 * maximum over its bytes (a buffer conflicts with itself and with every
 * buffer whose bytes it overlaps; an unplaced buffer, offset -1, only
 * with itself). Bytes are cut at the
 * ends of the buffers that share bytes with another and kept in a segment
 * tree: noting an access and asking for a buffer's latest conflicting ones
 * are O(log buffers), whatever the overlap; memory O(buffers). A buffer
 * that shares no byte (every persistent one; an unplaced or empty one)
 * keeps its clocks in a row of its own, O(1). The clocks a stream notes
 * must not decrease. */
typedef struct fp_alias_clocks {
  int32_t n;          /* leaves: slots of bytes */
  int32_t nbufs;
  int32_t *lo, *hi;   /* per buffer: its slots [lo, hi); lo = -1: it shares no byte */
  int32_t *row;       /* per buffer: its row in iso (lo = -1), else in memo */
  int32_t niso, ntree; /* buffers that share no byte with another / that do */
  uint32_t *iso;      /* their clocks, 2 * FP_NSTREAMS per row (writes, then reads); 32 bits:
                       * a clock counts a stream's ops over two steps, at most 2 * INT32_MAX */
  int64_t *tag, *sub; /* per tree node, 2 * FP_NSTREAMS clocks (writes, then reads): a clock
                       * noted over the whole node / the maximum anywhere under it */
  int64_t nacc[FP_NSTREAMS]; /* accesses noted per stream */
  struct fp_alias_memo {     /* per buffer in the tree: its last answer, asked from stream s at nacc seen */
    int32_t s;
    int64_t seen[FP_NSTREAMS], w[FP_NSTREAMS], r[FP_NSTREAMS];
  } *memo;
} fp_alias_clocks;
void fpi_alias_clocks_init(const fp_prog *p, fp_alias_clocks *c);
void fpi_alias_clocks_reset(fp_alias_clocks *c); /* forget every access */
void fpi_alias_clocks_free(fp_alias_clocks *c);
/* stream s accessed buffer b at clock t (its own stream's component) */
void fpi_alias_clocks_note(fp_alias_clocks *c, int32_t b, int s, bool read, bool write, int64_t t);
/* the latest write w[t] / read r[t] on each stream t other than s over b
 * and every buffer sharing its bytes (0: none; w[s], r[s] are not set). A
 * run of asks from one stream with no access noted on another in between
 * (a bucket's ops, back to back on one stream) is answered from a memo. */
void fpi_alias_clocks_max(fp_alias_clocks *c, int32_t b, int s, int64_t *w, int64_t *r);
/* the slot of offset o among n sorted cut points e: the first k with e[k] >= o
 * (n - 1 when none); the slots the clocks and the verifier's rule 6 cut bytes into */
int32_t fpi_cut_slot(const int64_t *e, int32_t n, int64_t o);
/* buffers a and b conflict: the same buffer, or placed in the same arena
 * with overlapping bytes */
bool fpi_bufs_overlap(const fp_prog *p, int32_t a, int32_t b);
/* the trainer's activations: a forward compute op's activations live until
 * the backward of the same module and micro-batch that follows it (the
 * latest unpaired forward). pair[i] (room for p->nops) gets, for a forward
 * compute op, its backward's index or -1 (none: live to the end of the
 * step), for a backward compute op its forward's index or -1, else -1 */
void fpi_ir_activation_pairs(const fp_prog *p, int32_t *pair);
/* the same over some ops: ids[0..n) are op indices in program order, every
 * compute op among them (NULL: ids[k] = k); pair[k] (room for n) is the
 * position in ids of k's partner, or -1 */
void fpi_ir_activation_pairs_of(const fp_prog *p, const int32_t *ids, int32_t n, int32_t *pair);

/* ---- text form, verifier, plan.json ------------------------------------- */
/* print .fpir: deterministic; parse(print(p)) reproduces p */
void fpi_ir_print(const fp_prog *p, FILE *f);
char *fpi_ir_print_str(const fp_prog *p, size_t *len); /* malloc'd */
/* parse .fpir text; located errors ("file:line:col: error: ...") */
fp_prog *fpi_ir_parse(fp_arena *a, fp_diag *d, const fp_src *src);
/* check a program; reports each problem through d, located with the op's
 * .fpir line when src is given (ops parsed from it), else "op N"; returns
 * true when valid */
bool fpi_ir_verify(const fp_prog *p, fp_diag *d, const fp_src *src);
/* the same with flags: FP_VERIFY_UNORDERED checks a program the sync pass
 * has not run on yet - everything except the happens-before parts of rules
 * 6 and 8 (see ir/verify.c) */
#define FP_VERIFY_UNORDERED 1u
/* FP_VERIFY_SEM adds rule 9 (ir/verify_sem.c) to a program that passes rules
 * 1-8: it computes the training step it claims (what every byte holds) */
#define FP_VERIFY_SEM 2u
/* programs rule 9 left unchecked as too large (rank classes x params sharded
 * outside flat buckets over its limit, ir/verify_sem.c): it passes them */
extern long fp_ir_sem_skipped;
bool fpi_ir_verify_flags(const fp_prog *p, fp_diag *d, const fp_src *src, unsigned flags);
/* rule 9 alone, for a program that already passed rules 1-8 (a loaded plan:
 * fp_exec_create's check, executor/exec.c) */
bool fpi_ir_verify_sem_only(const fp_prog *p, fp_diag *d, const fp_src *src);
/* plan.json: {"format":"flexplan.plan.v1","planner_version":..,
 * "hash":"fnv1a64:<hex>", ...}; the hash: FNV-1a 64 (by 64-bit words) over a canonical
 * binary walk of what the .fpir text holds (ir/hash.c) */
uint64_t fpi_prog_hash(const fp_prog *p);
bool fpi_plan_write(const fp_prog *p, FILE *f);
fp_prog *fpi_plan_read(fp_arena *a, fp_diag *d, const fp_src *src);
/* the same, verified with FP_VERIFY_* flags (FP_VERIFY_SEM: rule 9 too) */
fp_prog *fpi_plan_read_flags(fp_arena *a, fp_diag *d, const fp_src *src, unsigned flags);
/* explain: one row per op (EXPLAIN-style table): index, segment, stream, op,
 * operands, count/bytes, comm, waits/records */
void fpi_ir_explain(const fp_prog *p, FILE *f);
/* the mesh of a plan with a tp dimension (tp > 1; nothing otherwise): its
 * dp x tp shape and the ranks of each tp index's dp group, each line
 * starting with indent (summaries, explain, viewers) */
void fpi_ir_mesh_text(FILE *f, const char *indent, int64_t world, int64_t tp);
/* the same with two more columns, each op's modeled start and end in
 * microseconds (planner/sim.h fp_sim start_us/end_us; NULL: none) */
void fpi_ir_explain_modeled(const fp_prog *p, const double *start_us, const double *end_us, FILE *f);

#endif
