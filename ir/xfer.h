/* xfer.h - transfer programs: moving a model's weights from the arenas of
 * one compiled plan (FROM) into those of another (TO), the form
 * planner/reshard.c builds, ir/verify_xfer.c checks, ir/xfer.c prints
 * (.fpir-style text, an explain table, JSON) and executor/xfer.c runs.
 *
 * Unlike a training plan (one SPMD program, ir.h), a transfer is not
 * uniform across ranks: who sends what to whom depends on both layouts. So a
 * transfer program is a list of ops per *process*, each naming its peer
 * process explicitly. Processes are the job's ranks (MPI_COMM_WORLD of the
 * run, or the communicator the caller gives); process p holds FROM rank
 * p - from_offset and TO rank p - to_offset where those are ranks of the
 * plans. Offsets 0 overlap the two rank sets; to_offset = from_world makes
 * them disjoint (and from_offset = to_world the way back).
 *
 * Operands are byte ranges in one of three spaces of the process that runs
 * the op: FROM's device arena (read only), TO's device arena (written only
 * where the plan's requirements say) and a staging buffer the transfer owns
 * (stage_bytes[p] bytes on process p). Each process runs its ops in order;
 * send and recv are posted without blocking, and an op that reads bytes a
 * recv writes waits for that recv (docs/reshard.md). */
#ifndef FP_XFER_H
#define FP_XFER_H

#include <stdio.h>

#include "../base/base.h"

typedef enum {
  FP_TX_COPY,     /* dst (dtype) = src (sdtype), n elements: a copy, or a cast when the dtypes differ */
  FP_TX_SEND,     /* send src[n elements of dtype] to process peer */
  FP_TX_RECV,     /* receive dst[n elements of dtype] from process peer */
  FP_TX_QUANT,    /* dst n e4m3 + aux scales = MXFP8(src n sdtype), blocks as fp_tx_blocks says */
  FP_TX_DEQUANT,  /* dst n (dtype) = src n e4m3 * 2^aux scales, the same blocks */
  /* a block split between FROM ranks (docs/reshard.md): each holder of a
   * part takes its part's scale, one of them the max of all, and each
   * quantizes its part at that max - the bytes of the whole block's MXFP8 */
  FP_TX_SCALES,   /* dst e8m0 = the scales quantize would give src n (sdtype), the same blocks; no elements */
  FP_TX_MAX,      /* dst n e8m0 = max(src, aux) byte by byte: the common scale of a split block */
  FP_TX_QUANT_AT, /* dst n e4m3 = MXFP8 elements of src n (sdtype) at the scales aux reads (at least their own) */
  /* a reshard transform (docs/reshard.md "Transforms"): the param's
   * transform t->params[param].xf turns a slice into its wire tensors
   * (wires[wire .. wire+nwire), laid out by fpi_tx_wire_at) and back */
  FP_TX_PREP_SEND, /* the wire tensors at dst (stage) = prepare_send(src n (sdtype), elements from full_off) */
  FP_TX_FINALIZE,  /* dst n (dtype, TO) = finalize_recv(the wire tensors at src (stage)); the executor hands it
                    * a bounded scratch right after them (fpi_tx_scratch_at) and checks its guards */
  FP_TX_NKINDS
} fp_tx_kind;
const char *fpi_tx_kind_name(int k);

typedef enum {
  FP_SP_NONE,  /* no operand */
  FP_SP_FROM,  /* FROM plan's device arena on this process */
  FP_SP_TO,    /* TO plan's device arena on this process */
  FP_SP_STAGE, /* the transfer's staging buffer on this process */
} fp_tx_space;
const char *fpi_tx_space_name(int s);

/* An operand: a space and a byte offset in it, packed in 8 bytes (a
 * transfer between large plans has millions of ops: the op record is 56
 * bytes, not 96). Offsets are below FP_TX_OFF_LIMIT (2^59 bytes, 512 PiB);
 * the planner refuses plans whose arenas reach it, the reader such offsets. */
#define FP_TX_OFF_LIMIT ((int64_t)1 << 59)
typedef struct fp_tx_ref {
  uint64_t space : 4;  /* fp_tx_space */
  int64_t off : 60;    /* bytes from the start of that space */
} fp_tx_ref;

typedef struct fp_tx_op {
  fp_tx_kind kind : 8;
  fp_dtype dtype : 8;  /* of dst (send/recv: of the wire; scales, max: e8m0) */
  fp_dtype sdtype : 8; /* of src (copy, quant); else = dtype */
  unsigned nwire : 4;  /* prep_send, finalize: its wire tensors (at most FP_TX_MAX_WIRES); else 0 */
  unsigned plane : 4;  /* what of its param it moves: 0 the main weights (and MXFP8 scales), k + 1 optimizer
                        * state k (at most FP_TX_MAX_PLANE) */
  int32_t proc;        /* the process that runs it */
  int32_t peer;        /* send/recv: the other process; else -1 */
  int32_t param;       /* the param it moves (index into params) */
  int64_t n;           /* elements */
  int64_t full_off;    /* the param's flat element index of the first element */
  fp_tx_ref dst, src, aux; /* aux: quant's scales out; dequant's and quant_at's scales in; max's second input;
                            * prep_send, finalize: no operand (space none), its offset the index of the op's
                            * first wire tensor in fp_tx.wires (fpi_tx_wire0: the record stays 56 bytes) */
} fp_tx_op;

/* bytes an MXFP8 slice of n elements starting at flat index full_off takes
 * for its scales: blocks are aligned to the full param (block k = elements
 * [32k, 32k+32)); a slice starting inside a block begins with a short block
 * of its own (its own scale, amax over the elements present), likewise at
 * its end */
int64_t fpi_tx_nscales(int64_t full_off, int64_t n);
/* the head of such a slice: elements before the first block boundary (0 when
 * full_off is aligned; at most n) */
int64_t fpi_tx_head(int64_t full_off, int64_t n);

#define FP_TX_MAX_PLANE 15

/* A region a process must end up with (TO: written exactly once) or may
 * read (FROM: the main-weight bytes it holds, padding excluded). */
typedef struct fp_tx_region {
  int32_t proc;
  int32_t param;
  int64_t off, bytes;  /* in the space of the list it is in */
  int64_t full_off;    /* first element's flat index in the param (e8m0 scales: first block's index) */
  fp_dtype dtype;
  int32_t plane;       /* as fp_tx_op.plane: the main weights or an optimizer state */
} fp_tx_region;

typedef struct fp_tx_param {
  const char *name;
  int64_t numel;
  bool mxfp8;          /* on the wire as MXFP8 (--transform) */
  bool src_mx;         /* FROM keeps it as MXFP8 (e4m3 + e8m0 scales): read through a dequantize */
  int32_t xf;          /* its reshard transform (index into fp_tx.xf_names); -1: none */
} fp_tx_param;

/* one wire tensor of a transformed slice: what prepare_send produces (the
 * sender's prep_send op) or prepare_recv allocates (the receiver's
 * finalize op); each goes as one send and one recv */
typedef struct fp_tx_wire {
  fp_dtype dtype;
  int64_t count;       /* elements */
} fp_tx_wire;
#define FP_TX_MAX_WIRES 8     /* wire tensors per slice */
/* (the counts fit fp_tx_op's 4-bit fields) */
_Static_assert(FP_TX_MAX_WIRES <= 15 && FP_TX_MAX_PLANE <= 15, "fp_tx_op.nwire and .plane are 4 bits");
#define FP_TX_GUARD 64        /* guard bytes on each side of a finalize's scratch */

typedef struct fp_tx {
  fp_arena *arena;
  const char *model;
  const char *what;    /* "weights" */
  uint64_t from_hash, to_hash;
  int64_t from_world, to_world, to_offset, nprocs;
  int64_t from_offset;  /* process of FROM rank r = r + from_offset */
  int64_t from_arena, to_arena; /* device arena bytes of each plan (bounds) */
  fp_tx_param *params; int32_t nparams; int64_t cap_params;
  fp_tx_op *ops;       int32_t nops;    int64_t cap_ops; /* grouped by proc, in each proc's order */
  int32_t *first;      /* nprocs + 1: ops of process p are ops[first[p] .. first[p+1]) */
  int64_t *stage_bytes;/* nprocs */
  fp_tx_region *need;  int32_t nneed;   int64_t cap_need; /* TO bytes to write, grouped by process */
  int32_t *need_first; /* nprocs + 1: needs of process p are need[need_first[p] .. need_first[p+1]) */
  fp_tx_region *have;  int32_t nhave;   int64_t cap_have; /* FROM bytes readable, per process */
  /* nprocs, or NULL (none shared): same[p] = q >= 0 when process p runs
   * process q's program - q's ops, needs and staging size, which are all
   * local work (no send or recv) - and has none of its own; -1 otherwise.
   * The planner shares the program of processes whose ranks have the same
   * indices in every communicator of both plans (planner/reshard.c
   * classes()); fpi_tx_prog resolves it */
  int32_t *same;
  int32_t plane;       /* the builder's: ops and regions emitted get it (fpi_tx_emit, fpi_tx_region_add) */
  /* reshard transforms: their names (a param's xf indexes them) and every
   * prep_send's and finalize's wire tensors */
  const char **xf_names; int32_t nxf;
  fp_tx_wire *wires;   int64_t nwires, cap_wires;
  /* figures */
  int64_t wire_bytes;     /* bytes received over the wire (sum of recvs) */
  int64_t lower_bound;    /* TO bytes whose elements the process does not hold in FROM */
  int64_t local_bytes;    /* TO bytes written by local copies/casts */
  int64_t max_send_bytes, max_recv_bytes; /* the busiest process's */
  const struct fp_src *src; /* while the reader verifies it: the file, so the
                             * verifier's messages locate ops (else NULL) */
} fp_tx;

/* the process whose ops and needs process p runs: p, or the one it repeats */
static inline int32_t fpi_tx_prog(const fp_tx *t, int64_t p) {
  return t->same && t->same[p] >= 0 ? t->same[p] : (int32_t)p;
}

/* A reshard transform as the planner and the executors call it (the public
 * fp_reshard_transform, adapted by api/transforms.c). Each returns true, or
 * false with a message in err. */
typedef struct fpi_xf_param {
  const char *name;
  int64_t numel;
  fp_dtype from, to;
} fpi_xf_param;
typedef struct fpi_xform {
  const char *name;
  void *ctx;
  bool (*should)(void *ctx, const fpi_xf_param *p);
  bool (*wires)(void *ctx, bool recv, const fpi_xf_param *p, int64_t begin, int64_t count, fp_tx_wire *out, int *n,
                char *err, size_t errcap);
  bool (*send)(void *ctx, const fpi_xf_param *p, int64_t begin, int64_t count, const void *src, void *const *wires,
               char *err, size_t errcap);
  bool (*finalize)(void *ctx, const fpi_xf_param *p, int64_t begin, int64_t count, const void *const *wires,
                   void *dst, char *err, size_t errcap);
} fpi_xform;
typedef struct fpi_xforms {
  const fpi_xform *const *v;
  int n;
} fpi_xforms;

/* The built-in transforms (docs/reshard.md "Transforms"): MXFP8 on the
 * contract, sender-side under "mxfp8" (the `--transform` name from before
 * the contract: e4m3 elements and e8m0 scales on the wire) and
 * "mxfp8_sender", receiver-side under "mxfp8_receiver" (FROM's bytes on the
 * wire, converted on receipt). Here their names and wire shapes, all the
 * planner and the verifier need; the executor runs them
 * (executor/xfer_mxfp8.c), so a transfer naming one needs no binding. */
#define FPI_XF_BUILTIN_NAMES "mxfp8, mxfp8_receiver, mxfp8_sender"
/* the MXFP8 mode a built-in name stands for (0 sender, 1 receiver: the
 * values of fp_mxfp8_mode), -1 for another name */
int fpi_xf_builtin_mode(const char *name);
/* MXFP8's wire tensors of slice [begin, begin+count) in a mode: sender, the
 * e4m3 elements and the e8m0 scales of the slice's blocks (fpi_tx_nscales);
 * receiver, the slice in FROM's dtype */
void fpi_xf_mxfp8_wires(int mode, fp_dtype from, int64_t begin, int64_t count, fp_tx_wire *out, int *n);
/* whether MXFP8 takes a param of these main dtypes (fp32, bf16 or fp16 on both sides) */
bool fpi_xf_mxfp8_takes(fp_dtype from, fp_dtype to);
/* the built-in named so as the planner calls it (should and wires; no send
 * or finalize: those are the executor's), NULL for another name */
const fpi_xform *fpi_xf_builtin_shapes(const char *name);

/* builder */
fp_tx *fpi_tx_new(fp_arena *a);
fp_tx_op *fpi_tx_emit(fp_tx *t, fp_tx_kind k, int32_t proc, int32_t param, fp_dtype dt, int64_t n);
void fpi_tx_region_add(fp_tx *t, bool need, int32_t proc, int32_t param, int64_t off, int64_t bytes,
                      int64_t full_off, fp_dtype dt);
/* sort ops and needs stably by process and set first[] and need_first[];
 * figures from the ops */
void fpi_tx_finish(fp_tx *t);

/* whether op o, run by the MPI executor (executor/xfer.c), first waits for
 * every send and recv its process posted before it: a local op (not a
 * send) reading staging or TO bytes, which a recv may have written. The
 * verifier's X4 simulates exactly this. */
static inline bool fpi_tx_waits(const fp_tx_op *o) {
  return o->kind != FP_TX_SEND && o->kind != FP_TX_RECV &&
         (o->src.space == FP_SP_STAGE || o->src.space == FP_SP_TO || o->aux.space == FP_SP_STAGE ||
          o->aux.space == FP_SP_TO);
}

/* bytes an operand covers: dst/src of op (aux: scales) */
int64_t fpi_tx_dst_bytes(const fp_tx *t, const fp_tx_op *o);
int64_t fpi_tx_src_bytes(const fp_tx *t, const fp_tx_op *o);

/* the wire tensors of a prep_send or finalize: tensor k starts at byte
 * fpi_tx_wire_at(t, o, k) of the op's stage operand (each on 16 bytes);
 * k = nwire gives their end. A finalize's scratch (n elements of its dtype
 * between two guards of FP_TX_GUARD bytes) starts at fpi_tx_scratch_at
 * bytes after its src, and the op's stage claim ends fpi_tx_stage_need
 * bytes after it */
int64_t fpi_tx_wire_at(const fp_tx *t, const fp_tx_op *o, int k);
int64_t fpi_tx_scratch_at(const fp_tx *t, const fp_tx_op *o);
int64_t fpi_tx_stage_need(const fp_tx *t, const fp_tx_op *o);
/* a prep_send's or finalize's first wire tensor in t->wires, and setting them */
static inline int64_t fpi_tx_wire0(const fp_tx_op *o) { return o->aux.space == FP_SP_NONE ? (int64_t)o->aux.off : -1; }
static inline void fpi_tx_set_wires(fp_tx_op *o, int32_t first, int n) {
  o->aux.space = FP_SP_NONE, o->aux.off = first, o->nwire = (unsigned)n;
}
/* add n wire tensors to t->wires; the index of the first */
int32_t fpi_tx_wires_add(fp_tx *t, const fp_tx_wire *w, int n);
/* the name of param p's transform, or NULL */
static inline const char *fpi_tx_xf_name(const fp_tx *t, int32_t p) {
  return p >= 0 && p < t->nparams && t->params[p].xf >= 0 && t->params[p].xf < t->nxf ? t->xf_names[t->params[p].xf]
                                                                                      : NULL;
}

/* The executors run consecutive copies as one when they continue each
 * other: ops[i .. end) are copies of one dtype pair, each one's source and
 * destination right after the previous one's in the same spaces (a transfer
 * between equal layouts has many: the pieces of adjacent params, one
 * kernel launch instead of one per param on a GPU). Returns end (> i; i + 1
 * for any other op, or a copy nothing continues) and their elements in *n;
 * hi: the end of the process's ops. */
int32_t fpi_tx_copy_run(const fp_tx *t, int32_t i, int32_t hi, int64_t *n);

/* The NCCL backend (executor/xfer_nccl.c) runs a process's ops in
 * segments: ops[i .. end), end the next op after i that waits
 * (fpi_tx_waits) or hi. A segment's local ops run in order, then its sends
 * and recvs as one NCCL group; the next segment starts when the group is
 * done - where the MPI executor waits for every posted request. */
int32_t fpi_tx_segment_end(const fp_tx *t, int32_t i, int32_t hi);

/* the verifier (ir/verify_xfer.c): rules X1..X6 (docs/reshard.md); each
 * problem reported through d as "op N (process p): ..."; true when valid */
bool fpi_tx_verify(const fp_tx *t, fp_diag *d);
/* X7 (ir/verify_sem.c): after the transfer every TO need region holds
 * exactly its param's FROM elements, converted as the transform says
 * (MXFP8 exactly for params on the wire as MXFP8); false after reporting */
bool fpi_tx_verify_sem(const fp_tx *t, fp_diag *d);
extern long fp_tx_sem_skipped; /* transfers X7 passed unchecked as too large (over 2^20 ops) */

/* what the transfer is, as a 64-bit FNV-1a over the program: the plans'
 * hashes and the process mapping, the params (names, sizes, transforms by
 * name), every op (a prep_send's and finalize's wire tensors by dtype and
 * count, not by their index in the wire table), each process's needs, the
 * shared programs and staging sizes; not the `have` regions (the
 * planner's, or derived from the ops when read) nor the figures. A
 * transfer compiled and the same read back from its JSON hash the same.
 * Processes compare it before the first op (fp_xfer_run) */
uint64_t fpi_tx_hash(const fp_tx *t);

/* text form: a header, the params, the requirements and every process's
 * ops (one line each); explain: one row per op with its bytes and the
 * figures; JSON: "flexplan.xfer.v1" */
void fpi_tx_print(const fp_tx *t, FILE *f);
void fpi_tx_explain(const fp_tx *t, FILE *f);
bool fpi_tx_write_json(const fp_tx *t, FILE *f);
/* read the JSON back (ir/xfer_read.c): every member checked, located errors
 * on d, then fpi_tx_verify; NULL on any error. FROM reads are checked against
 * FROM's arena size only (the file does not carry FROM's layout) */
fp_tx *fpi_tx_read(fp_arena *a, fp_diag *d, const fp_src *src);
/* the Chrome trace of the transfer: one track per process, ops as slices in
 * program order (unit: 1 us per op, with the bytes in args) */
void fpi_tx_trace(const fp_tx *t, FILE *f);

#endif
