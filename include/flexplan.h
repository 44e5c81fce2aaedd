/* flexplan.h - the trainer's API of the flexplan executor.
 *
 * A compiled plan (plan.json, written by `flexplan compile`) is one SPMD
 * program for every rank: the communication of one training step, split into
 * segments, one per trainer hook. The executor loads the plan, allocates every
 * buffer the plan names in one arena (once, at setup: addresses never change
 * afterwards), hands the trainer views into it by parameter name, and replays
 * the plan's segments when the trainer calls its hooks:
 *
 *   step_begin
 *   for each micro-batch:
 *     for each module m in forward order:  pre_forward(m)  ... forward of m ...  post_forward(m)
 *     for each module m in reverse order:  pre_backward(m) ... backward of m ... post_backward(m)
 *   pre_optimizer  ... optimizer step on the main-weight shards ...  post_optimizer
 *
 * When a hook returns, the weights the trainer's next piece of work reads are
 * in place; communication the plan put on its own streams (prefetch, gradient
 * reduction) may still run in the background, ordered by the plan's events.
 * A hook called out of plan order is an error naming the expected and the
 * received hook; nothing is issued and the executor stays usable.
 *
 * Conventions. Every name starts with fp_; handles are opaque; functions
 * return an fp_status and keep a message on the handle (fp_plan_errmsg,
 * fp_exec_errmsg), so an error never needs a second channel. Creation
 * functions set *out even when they fail (except when memory runs out), so the
 * message can be read; the handle must then still be freed. No function of
 * this API prints anything. A function may be called from any one thread at a
 * time per handle.
 *
 * Backends: FP_BACKEND_MPI runs on host memory with MPI collectives (one
 * process per rank, started by mpirun; the trainer calls MPI_Init_thread
 * (or fp_mpi_init) before fp_exec_create and MPI_Finalize (or
 * fp_mpi_finalize) after fp_exec_destroy). See
 * docs/executor.md for the backend's decisions, its checks and its figures.
 * FP_BACKEND_EXTERNAL runs on host memory as FP_BACKEND_MPI does, with the
 * collectives of a transport the caller provides (fp_transport, below:
 * flexplan.torch's over torch.distributed, for trainers launched by
 * torchrun; no MPI). FP_BACKEND_NCCL runs on a CUDA device with NCCL collectives, the plan's
 * streams as CUDA streams and its events as CUDA events, and replays each
 * segment as CUDA graphs over an arena whose addresses never change (one
 * process per GPU; the trainer calls cudaSetDevice first). It exists when
 * flexplan was built with CUDA (nvcc and NCCL found); docs/cuda.md.
 *
 * Everything here is exported by libflexplan.so.<FP_VERSION_MAJOR> (and
 * nothing else of it); include/flexplan_compile.h adds the compiler
 * (compile a model and spec into a plan handle, its summary and views).
 * Linking: docs/install.md (CMake flexplan::flexplan, pkg-config flexplan). */
#ifndef FLEXPLAN_H
#define FLEXPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flexplan_version.h" /* FP_VERSION_MAJOR, _MINOR, _PATCH, FP_VERSION_STRING */

/* FP_API marks the functions libflexplan.so exports. The library is built
 * with -fvisibility=hidden and FP_BUILDING_LIBRARY defined, so nothing else
 * of it is visible to a program; to a program FP_API is nothing. */
#if defined(FP_BUILDING_LIBRARY) && (defined(__GNUC__) || defined(__clang__))
#define FP_API __attribute__((visibility("default")))
#else
#define FP_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ----------------------------------------------------------- */
/* The library's version, "MAJOR.MINOR.PATCH": FP_VERSION_STRING of the
 * header the library was built with (a program may compare it with the
 * header it was compiled against). The SONAME carries the major number. */
FP_API const char *fp_version(void);

/* ---- status ------------------------------------------------------------ */
typedef enum fp_status {
  FP_OK = 0,
  FP_ERR_ARG,      /* the caller's mistake: NULL handle, unknown name, bad config, MPI not initialized */
  FP_ERR_PLAN,     /* the plan file is unreadable, malformed, tampered with, or does not fit this run */
  FP_ERR_ORDER,    /* a hook called out of plan order, or a refit in the middle of a step */
  FP_ERR_MISMATCH, /* the ranks do not agree at setup (plan hash), or another rank failed its setup */
  FP_ERR_WEIGHTS,  /* a refit's files do not match the plan (names, shapes, dtypes) or cannot be read */
  FP_ERR_BACKEND,  /* the backend failed (an MPI call returned an error, a size MPI cannot express) */
  FP_ERR_NOMEM,    /* memory could not be allocated */
  FP_ERR_INPUT,    /* the model or spec given to fp_plan_compile is invalid (flexplan_compile.h), or an
                    * output cannot be written (fp_plan_save) */
  FP_ERR_TIMEOUT,  /* the watchdog: a hook (or sync) waited longer than the executor's timeout for
                    * other ranks; the message names the op and the ranks that did not arrive. The
                    * executor is broken from then on (every later call fails) */
} fp_status;

/* "FP_OK", "FP_ERR_PLAN", ...; "FP_ERR_?" for a value outside the enum */
FP_API const char *fp_status_name(fp_status s);

/* ---- element types ----------------------------------------------------- */
typedef enum fp_elem {
  FP_ELEM_FP32 = 0, /* IEEE binary32 */
  FP_ELEM_BF16 = 1, /* bfloat16 (the top half of a binary32) */
  FP_ELEM_FP16 = 2, /* IEEE binary16 */
  FP_ELEM_E4M3 = 3, /* OCP FP8 E4M3 (MXFP8 elements) */
  FP_ELEM_E8M0 = 4, /* OCP E8M0 power-of-two scales (MXFP8) */
  FP_ELEM_U8 = 5,   /* raw bytes */
} fp_elem;

/* bytes per element (0 for a value outside the enum); "fp32", "bf16", ... */
FP_API int fp_elem_size(fp_elem t);
FP_API const char *fp_elem_name(fp_elem t);

/* ---- plans ------------------------------------------------------------- */
typedef struct fp_plan fp_plan;

/* Load and check a plan.json. The loader trusts nothing: strict JSON, format
 * and planner version, the content hash, every member's type and range, and
 * the whole verifier (operands in bounds on every rank, dtypes, events,
 * matching collectives, memory safety) - see docs/executor.md. On failure the
 * status is FP_ERR_PLAN (or FP_ERR_ARG for a NULL argument) and *out is a
 * handle holding only the message, every line of it located in the file
 * ("plan.json:12:5: error: /ops/3: ..."); free it with fp_plan_free. A plan
 * is immutable once loaded and may be shared by several executors; it must
 * outlive them. */
FP_API fp_status fp_plan_load(const char *path, fp_plan **out);
/* fp_plan_load with options: FP_LOAD_SEMANTIC also runs the verifier's
 * semantic check (rule 9, docs/ir.md): the plan computes the training step
 * it claims - every gathered weight is the current main weight, every main
 * grad the sum over all ranks and micro-batches, nothing reads undefined
 * bytes. Its failures are FP_ERR_PLAN with located messages, as above. */
#define FP_LOAD_SEMANTIC 1u
/* Without FP_LOAD_SEMANTIC the loader checks rules 1-8 only, and
 * fp_exec_create runs rule 9 on the plan before anything is allocated, so a
 * plan that `flexplan verify` rejects never runs (FP_ERR_PLAN at create, on
 * every rank). FP_LOAD_NO_SEMANTIC opts out of that: the executors created
 * from this plan run it unchecked (what it costs: docs/executor.md). */
#define FP_LOAD_NO_SEMANTIC 2u
FP_API fp_status fp_plan_load_flags(const char *path, unsigned flags, fp_plan **out);
/* the last error of a plan handle ("" when none); valid until fp_plan_free */
FP_API const char *fp_plan_errmsg(const fp_plan *plan);
FP_API void fp_plan_free(fp_plan *plan);

typedef struct fp_plan_info {
  const char *model, *strategy; /* strings owned by the plan */
  int64_t world_size;
  int64_t grad_accumulation;    /* micro-batches per step */
  int64_t arena_bytes;          /* the device arena every rank allocates */
  int64_t host_bytes;           /* the host (offload) arena */
  int32_t nmodules, nparams, nsegments, nops;
  uint64_t hash;                /* FNV-1a 64 of the canonical program (the file's "hash"; docs/ir.md): unkeyed,
                                 * it catches accidents and plan mismatches across ranks, not tampering */
  /* The optimizer whose state the plan holds in the arena (spec
   * "optimizer"): "none", "sgd" (one state: momentum_buffer) or "adamw"
   * (two: exp_avg, exp_avg_sq); optim_states of them per trainable param,
   * in optim_dtype (fp_param_view.optim). */
  const char *optimizer;
  int32_t optim_states;
  fp_elem optim_dtype;
  /* The mesh's tensor-parallel size (spec "mesh": {"tp": T}; 1 without one).
   * Ranks are ordered tp innermost, as torch's init_device_mesh((W // T, T),
   * ("dp", "tp")) orders them: rank r has tp index r % T and dp index r / T.
   * Each rank's params are its tp-local slices (fp_plan_param_tp_dim), and
   * every collective of the plan runs among the ranks of one tp index. */
  int64_t tp_size;
} fp_plan_info;
FP_API fp_status fp_plan_get_info(const fp_plan *plan, fp_plan_info *out);

/* Modules are numbered 0..nmodules-1 in the model's order. The name of
 * module m (NULL when out of range); the index of a module name (-1 when the
 * plan has none). */
FP_API const char *fp_plan_module_name(const fp_plan *plan, int32_t m);
FP_API int32_t fp_plan_module_index(const fp_plan *plan, const char *name);
/* Whether the plan recomputes module m's forward inside its backward
 * (activation checkpointing; the spec's "recompute"): 1 yes, 0 no, -1 when m
 * is out of range. For such a module the trainer may call
 * pre_forward(m) and post_forward(m) once more between pre_backward(m) and
 * post_backward(m), around the recomputed forward; nothing runs there
 * (pre_backward(m) already gathered what the recompute reads). See
 * fp_exec_hook. */
FP_API int fp_plan_module_recompute(const fp_plan *plan, int32_t m);
/* The tensor-parallel placement of param i (the index fp_exec_param_at
 * takes) on a mesh with tp_size > 1: the dim of the global tensor that is
 * split over the tp ranks (the rank with tp index t holds the t-th of
 * tp_size equal contiguous slices along it; its views have that slice's
 * shape), or -1 when every tp rank holds the whole param (replicated over
 * tp, and always when tp_size is 1); -2 when i is out of range. */
FP_API int32_t fp_plan_param_tp_dim(const fp_plan *plan, int32_t i);
/* Whether the plan keeps param i's unsharded compute weight (fp_param_view
 * .weight) between steps, in a buffer of the executor's life, instead of
 * gathering it for each forward and backward: a param no rank shards, and
 * an MXFP8 one (whose weight is its main bytes). 1 yes, 0 no, -1 when i is
 * out of range. A trainer that writes the main weights itself (an initial
 * copy, a checkpoint load) must refresh such a weight from them too;
 * flexplan.torch asks this instead of reading plan.json. */
FP_API int fp_plan_param_weight_persistent(const fp_plan *plan, int32_t i);
/* Tied weights (model.json v2 "uses"): the params declared by other modules
 * that module m's forward also reads. Writes the first min(n, cap) param
 * indices (as fp_exec_param_at takes them, in param order) to params and
 * returns n, the number there are; -1 when m is out of range, cap < 0, or
 * params is NULL with cap > 0. Such a param has one view, whose `module` is
 * the declaring module; the plan gathers it for every module that reads it
 * and sums the grads of every use in its one ugrad before the one reduce. */
FP_API int32_t fp_plan_module_uses(const fp_plan *plan, int32_t m, int32_t *params, int32_t cap);

/* ---- executors --------------------------------------------------------- */
typedef struct fp_exec fp_exec;

typedef enum fp_backend {
  FP_BACKEND_MPI = 1,  /* host memory, MPI collectives (the reference backend CI runs) */
  FP_BACKEND_NCCL = 2, /* CUDA device memory, NCCL collectives, CUDA graphs (docs/cuda.md);
                        * FP_ERR_ARG from fp_exec_create when flexplan was built without CUDA */
  FP_BACKEND_EXTERNAL = 3, /* host memory, the collectives of a transport the caller provides
                        * (fp_exec_config.transport: flexplan.torch's over torch.distributed
                        * process groups); the MPI backend's streams and progress */
} fp_backend;

/* How the host backends (MPI, external) drive the plan's communication streams. */
typedef enum fp_progress {
  FP_PROGRESS_DEFAULT = 0, /* MPI: THREAD where MPI_THREAD_MULTIPLE is provided, else POLL;
                            * external: POLL (its transport's ops progress on their own)
                            * (docs/executor.md says why) */
  FP_PROGRESS_POLL = 1,    /* streams advance inside hooks only (any MPI thread level);
                            * background communication waits for the next hook */
  FP_PROGRESS_THREAD = 2,  /* a progress thread advances them between hooks too, so
                            * communication overlaps the trainer's compute (hooks still
                            * drive them themselves); needs MPI_THREAD_MULTIPLE */
} fp_progress;

/* NCCL backend: how a step's work reaches the GPU (docs/cuda.md, "Modes"). */
typedef enum fp_cuda_mode {
  FP_CUDA_GRAPH = 0,        /* step 0 runs eagerly (a warm-up: NCCL connects lazily); the first
                             * step_begin after it captures each segment's work on all its
                             * streams into one CUDA graph (ThreadLocal capture, once: it
                             * synchronizes and allocates graph memory there, and nowhere
                             * else); later hooks launch it: at most one graph launch per hook,
                             * events around it ordering each stream's part. The default. */
  FP_CUDA_EAGER = 1,        /* every op launched on every step (debugging, profiling op by op) */
  FP_CUDA_CAPTURE_SAFE = 2, /* every op launched on every step, and every hook may run inside the
                             * trainer's own stream capture of the compute stream: no
                             * synchronization, no allocation, no host callback on any hook
                             * path; side streams join the capture when they get work and join
                             * back at the end of the step (post_optimizer). Run one step
                             * uncaptured first (NCCL's warm-up); capture whole steps. */
} fp_cuda_mode;

/* NCCL backend: how the ranks agree on NCCL's unique id (docs/cuda.md, "Bootstrap"). */
typedef enum fp_nccl_boot {
  FP_NCCL_BOOT_DEFAULT = 0, /* MPI when MPI is initialized; else NCCL_COMM_ID when it is set;
                             * else, in a world of one rank, an id made locally */
  FP_NCCL_BOOT_ID = 1,      /* cfg.nccl_id: made by rank 0 with fp_nccl_get_id and handed to every
                             * rank by the trainer's own channel (e.g. torch.distributed) */
  FP_NCCL_BOOT_MPI = 2,     /* rank 0 makes one and broadcasts it on the bootstrap communicator
                             * (cfg.bootstrap, or MPI_COMM_WORLD); the plan-hash agreement runs
                             * over MPI before any NCCL call */
  FP_NCCL_BOOT_ENV = 3,     /* NCCL_COMM_ID=host:port set on every rank: every rank derives the
                             * same id, nothing is exchanged */
} fp_nccl_boot;

#define FP_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */
typedef struct fp_nccl_id {
  unsigned char bytes[FP_NCCL_ID_BYTES];
} fp_nccl_id;

/* NCCL backend: CUDA's legacy default stream (cudaStreamLegacy) and the
 * per-thread default stream (cudaStreamPerThread) as fp_exec_config.cuda_stream
 * and fp_exec_set_cuda_stream take them: NULL there means "no stream". */
#define FP_CUDA_STREAM_LEGACY ((void *)0x1)
#define FP_CUDA_STREAM_PER_THREAD ((void *)0x2)

typedef struct fp_exec_config {
  fp_backend backend;
  int rank;              /* this process's rank in the plan's world */
  int world_size;        /* must equal the plan's world_size */
  const void *bootstrap; /* MPI (and NCCL with an MPI bootstrap): a pointer to an MPI_Comm whose
                          * rank/size are `rank`/`world_size`; NULL means MPI_COMM_WORLD. The
                          * executor duplicates what it needs; the communicator need only live
                          * through fp_exec_create. */
  fp_progress progress;  /* MPI and external; NCCL: FP_PROGRESS_DEFAULT (the GPU drives its streams) */
  /* ---- FP_BACKEND_NCCL (ignored by FP_BACKEND_MPI) ----
   * The device is the calling thread's current CUDA device (cudaSetDevice). */
  fp_cuda_mode cuda_mode;
  void *cuda_stream;     /* the cudaStream_t the trainer computes on: the plan's compute stream
                          * (docs/cuda.md, "The stream contract"). CUDA's legacy default stream
                          * is FP_CUDA_STREAM_LEGACY (cudaStreamLegacy), never NULL: torch's
                          * default stream (handle 0) is passed as FP_CUDA_STREAM_LEGACY, the
                          * per-thread default stream as FP_CUDA_STREAM_PER_THREAD.
                          * NULL: no stream given: the executor creates a non-blocking one, which
                          * nothing else orders against, and the trainer must compute on
                          * fp_exec_cuda_stream(x) (or hand its stream later with
                          * fp_exec_set_cuda_stream). A given stream must outlive the executor;
                          * the executor never synchronizes it inside a hook. */
  fp_nccl_boot nccl_boot;
  fp_nccl_id nccl_id;    /* FP_NCCL_BOOT_ID: the same bytes on every rank */
  /* ---- the watchdog (both backends) ----
   * Seconds a hook, fp_exec_sync or a refit may wait for the other ranks before
   * it fails with FP_ERR_TIMEOUT on this rank, naming the op it waited for and
   * (MPI) the ranks that did not arrive (the ranks that timed out too report
   * within one more timeout). NCCL: hooks only enqueue, so the waits watched
   * are the host's waits for the device (fp_exec_sync, refits,
   * fp_exec_all_reduce_f64, the graph capture); on a timeout every
   * communicator is aborted (ncclCommAbort); docs/cuda.md, "Watchdog". > 0: this; 0: the environment variable FLEXPLAN_TIMEOUT
   * (seconds; unset, empty or 0: no timeout; anything but a number >= 0 is
   * FP_ERR_ARG at create); < 0: no timeout whatever the environment says. */
  double timeout_s;
  /* ---- FP_BACKEND_EXTERNAL (ignored by the others) ----
   * The transport the plan's communication goes through (below); it must
   * outlive the executor. */
  const struct fp_transport *transport;
} fp_exec_config;

/* ---- the external transport (FP_BACKEND_EXTERNAL) ------------------------------
 * The executor runs the plan on host memory exactly as the MPI backend does
 * (the same streams, progress modes, local kernels, watchdog and agreement;
 * docs/executor.md, "The external backend"), and hands every communication
 * op to the caller's transport: a table of C functions over the caller's
 * own process groups (flexplan.torch's calls torch.distributed; a C program
 * may wrap any library). Reductions are sums; the executor divides an
 * average itself. Every function returns 0 on success; anything else is a
 * failure whose message `error` writes. Functions may be called from the
 * executor's progress thread (FP_PROGRESS_THREAD), never from two threads
 * at once for one executor. */
typedef enum fp_coll {
  FP_COLL_ALL_GATHER = 0,       /* dst[j*count ..] <- member j's src[count], j in 0..size-1 (src may be
                                 * dst + index*count: in place) */
  FP_COLL_ALL_GATHER_V = 1,     /* dst[displs[j] ..] <- member j's src[counts[j]] (src may be dst +
                                 * displs[index]: in place) */
  FP_COLL_REDUCE_SCATTER = 2,   /* dst[count] <- the sum over members of src[index*count ..] */
  FP_COLL_REDUCE_SCATTER_V = 3, /* dst[counts[index]] <- the sum over members of src[displs[index] ..] */
  FP_COLL_ALL_REDUCE = 4,       /* dst[count] <- the sum over members of src[count] (src may be dst) */
  FP_COLL_BROADCAST = 5,        /* dst[count] <- member root's dst */
  FP_COLL_REDUCE = 6,           /* on member root: dst[count] <- the sum of src[count] (src may be dst);
                                 * dst is not written elsewhere */
  FP_COLL_SEND = 7,             /* src[count] to member `root` (the peer) */
  FP_COLL_RECV = 8,             /* dst[count] from member `root` (the peer) */
  FP_COLL_ALL_REDUCE_F64 = 9,   /* doubles (dtype ignored): dst[count] <- the sum of src[count] (src ==
                                 * dst); fp_exec_all_reduce_f64, on the world group */
} fp_coll;

typedef struct fp_coll_args {
  fp_coll coll;
  fp_elem dtype;                  /* src and dst elements; sums only of FP32, BF16, FP16 */
  int64_t group;                  /* what new_group returned for this op's group */
  int64_t index, size;            /* this rank's index in the group, its size */
  int64_t count;                  /* elements, as the op says above */
  const void *src;                /* NULL where the op reads nothing */
  void *dst;                      /* NULL where the op writes nothing */
  int64_t root;                   /* BROADCAST, REDUCE: the root's index; SEND, RECV: the peer's */
  const int64_t *counts, *displs; /* _V: size entries, in elements */
} fp_coll_args;

typedef struct fp_transport {
  void *ctx; /* passed back to every function */
  /* The group of this rank among the world's ranks r with equal
   * r - ((r / stride) % size) * stride (a plan communicator instance: size
   * ranks, stride apart; docs/ir.md): its handle into *group. Called on
   * every rank in the same order with the same arguments (each rank gets
   * its own instance), after the agreement; groups live as long as the
   * transport. Ops on one group are issued in the same order on every rank;
   * the executor asks for one group per (communicator, stream) that
   * communicates, and one world group (size = world, stride 1). */
  int (*new_group)(void *ctx, int64_t size, int64_t stride, int64_t *group);
  /* start one op, non-blocking: its handle into *request */
  int (*start)(void *ctx, const fp_coll_args *op, int64_t *request);
  /* *done = 1 when the request finished (its handle is then released), 0 while it runs */
  int (*test)(void *ctx, int64_t request, int *done);
  /* A key-value store every rank of the world reaches without collectives
   * (torch.distributed's TCPStore): the agreement and the watchdog's reports
   * go through it, so a rank that never arrives cannot block them. set:
   * value[len] under key. get: wait at most wait_s seconds (< 0: no limit)
   * for the key, then copy at most cap bytes of its value; returns 0 when
   * found, 1 when not within wait_s, anything else on a failure. */
  int (*store_set)(void *ctx, const char *key, const void *value, int64_t len);
  int (*store_get)(void *ctx, const char *key, void *value, int64_t cap, double wait_s);
  /* the message of the last failure, into buf[cap] (NUL-terminated) */
  void (*error)(void *ctx, char *buf, int64_t cap);
} fp_transport;

/* NCCL backend: a new unique id (ncclGetUniqueId), for FP_NCCL_BOOT_ID: rank 0
 * calls it and ships the bytes to the other ranks. FP_ERR_BACKEND when
 * flexplan was built without CUDA or NCCL fails. */
FP_API fp_status fp_nccl_get_id(fp_nccl_id *out);

/* Create an executor for this rank. Collective: every rank of the bootstrap
 * communicator calls it with the same plan. Setup order:
 *  1. local checks: the config, and every buffer, op operand, extent table
 *     and param view of the plan resolved for this rank against the arena;
 *     then the arena (and every per-op record the hooks need) is allocated,
 *     once, zeroed;
 *  2. agreement: the ranks exchange their plan hash and whether step 1
 *     succeeded. If any rank failed, or the hashes differ, every rank returns
 *     an error (FP_ERR_MISMATCH naming the first differing rank and both
 *     hashes, or the local error) and no collective of the plan is issued
 *     (no communicator is split);
 *  3. one communicator per plan communicator (MPI_Comm_split), duplicated per
 *     plan stream that uses it.
 * Only a NULL config or an unknown backend fail before step 2 (there is no
 * backend to agree through). Parameter weights start as zeros: load them
 * with fp_exec_load_weights. */
FP_API fp_status fp_exec_create(const fp_plan *plan, const fp_exec_config *cfg, fp_exec **out);
/* the last error of an executor ("" when none) */
FP_API const char *fp_exec_errmsg(const fp_exec *x);
/* Wait for all issued work, then free everything. Must be called by every
 * rank (communicators are freed collectively) before MPI_Finalize. */
FP_API void fp_exec_destroy(fp_exec *x);

/* ---- hooks ------------------------------------------------------------- */
typedef enum fp_hook {
  FP_HOOK_STEP_BEGIN = 0,    /* once per step, before the first forward */
  FP_HOOK_PRE_FORWARD = 1,   /* before module m's forward */
  FP_HOOK_POST_FORWARD = 2,  /* after module m's forward */
  FP_HOOK_PRE_BACKWARD = 3,  /* before module m's backward */
  FP_HOOK_POST_BACKWARD = 4, /* after module m's backward wrote its unsharded grads */
  FP_HOOK_PRE_OPTIMIZER = 5, /* main grads are final; before the optimizer step */
  FP_HOOK_POST_OPTIMIZER = 6 /* after the optimizer step updated the main weights */
} fp_hook;
/* "step_begin", "pre_forward", ... (NULL outside the enum) */
FP_API const char *fp_hook_name(fp_hook h);

/* One segment of the plan's step: what one hook runs. A step is segments
 * 0..nsegments-1 (fp_plan_info.nsegments) in the order the trainer calls
 * their hooks: step_begin, per micro-batch pre/post_forward of each module
 * in forward order and pre/post_backward in reverse, pre_optimizer,
 * post_optimizer. `ops` counts the segment's ops other than compute
 * placeholders (which the executor drops), over every rank's program: a
 * module segment with ops == 0 runs nothing on any rank, and fp_exec_hook
 * skips it when a later module hook is called. Trainers that drive the
 * hooks from their own callbacks (flexplan.torch) read the step here,
 * without parsing plan.json. */
typedef struct fp_plan_segment {
  fp_hook hook;
  int32_t module; /* -1 for step_begin / pre_optimizer / post_optimizer */
  int32_t micro;  /* micro-batch index (0 for the step hooks) */
  int32_t ops;    /* ops other than compute placeholders */
} fp_plan_segment;
/* Segment i of the plan: FP_ERR_ARG for a NULL plan or out, a plan that
 * failed to load, or i outside 0..nsegments-1 (out untouched). */
FP_API fp_status fp_plan_segment_at(const fp_plan *plan, int32_t i, fp_plan_segment *out);

/* Run the plan's next segment. `module` is the module index for the hooks
 * that take one, and -1 for step_begin / pre_optimizer / post_optimizer.
 * Returns FP_ERR_ORDER when (hook, module) is not what the plan expects next
 * (the message names both, e.g. "hook pre_forward(fc2) called, but the plan
 * expects post_forward(fc1) next (segment 4 of 18, micro-batch 0)"); nothing
 * runs and the executor stays where it was. Empty segments may be skipped:
 * when the called hook is a module hook further on in the step, and every
 * segment between the expected one and it is a module hook (pre/post
 * forward/backward) with no ops on this rank, those are skipped
 * (stats.skipped) and the called one runs - a frozen module need not call
 * hooks it has no use for, and autograd fires no backward hook for a module
 * without grads. A skipped segment that has ops is still FP_ERR_ORDER.
 * Activation checkpointing: for a module the plan recomputes
 * (fp_plan_module_recompute), pre_forward(m) and post_forward(m) are
 * accepted once, in that order, between pre_backward(m) and post_backward(m)
 * (they run nothing; when pre_backward(m) has no ops and was skipped, the
 * pre_forward(m) skips it and opens the window); post_backward(m) before
 * that post_forward(m), a second recompute, or a recompute of a module the
 * plan does not recompute return FP_ERR_ORDER. FP_ERR_ARG for a hook outside the
 * enum or a module out of range. FP_ERR_BACKEND when communication failed;
 * the executor is then unusable. A hook performs no memory allocation
 * (NCCL, FP_CUDA_GRAPH: except the one step_begin that captures the graphs).
 * NCCL: a hook enqueues its segment's work on the CUDA streams and returns
 * without waiting for the device. */
FP_API fp_status fp_exec_hook(fp_exec *x, fp_hook hook, int32_t module);
/* Wait until every piece of work issued so far has finished, on every
 * stream (hooks wait only for what the trainer's next work needs). NCCL: the
 * host waits for the device (not allowed while the compute stream is being
 * captured: FP_ERR_ORDER). */
FP_API fp_status fp_exec_sync(fp_exec *x);

/* ---- the hook driver: events from a trainer's own callbacks ------------------
 * fp_exec_hook takes the plan's segments exactly in order. A trainer that
 * drives them from its framework's callbacks (flexplan.torch: module
 * forward hooks, autograd hooks) sees *events* instead, which do not always
 * fall where the plan puts a segment: a unit of several submodules ends
 * where the next one begins, a unit whose inputs need no grad fires no
 * post-backward event, a frozen unit may fire no backward event at all, a
 * branch not taken or an expert no token was routed to fires nothing, and
 * activation checkpointing runs a unit's forward again inside its backward.
 * A driver turns events into the plan's exact hook sequence: an event names
 * the segment it reached, and the driver calls fp_exec_hook for every
 * segment up to it, in plan order:
 *
 *  - FP_EVENT_PRE_FORWARD(m) may pass the units before m that the forward
 *    skipped (their pre/post_forward run: the gather and the free, nothing
 *    computed; their backward segments come in plan order with the rest of
 *    the micro-batch's backward), never a backward segment; a pre_forward of
 *    a unit still open (another of its submodules) is a no-op. The first
 *    forward event of a step issues step_begin.
 *  - FP_EVENT_POST_FORWARD(m) passes only step_begin, empty segments and the
 *    post_forward of a unit already open; a repeat is a no-op.
 *  - FP_EVENT_PRE_BACKWARD(m) / FP_EVENT_POST_BACKWARD(m) may pass anything of
 *    the current micro-batch's backward (autograd's order is the graph's;
 *    units that fire no event are issued in plan order), and may repeat
 *    (one event per output tensor). PRE_BACKWARD sets state.in_backward.
 *  - FP_EVENT_BACKWARD_DONE: autograd finished this micro-batch; what is left
 *    of its backward is issued; state.in_backward is cleared.
 *  - FP_EVENT_RECOMPUTE_BEGIN(m) / FP_EVENT_RECOMPUTE_END(m): m's forward
 *    runs again inside its backward (activation checkpointing): the begin
 *    issues pre_backward(m) first when no event reached it, then
 *    fp_exec_hook's recompute window (pre_forward(m) inside m's backward;
 *    a plan that does not recompute m refuses it, naming the spec's
 *    "recompute"); the end closes it (post_forward(m)). A recompute that
 *    stops early (no end event) is closed just before post_backward(m).
 *  - FP_EVENT_PRE_OPTIMIZER (a no-op when already issued this step) and
 *    FP_EVENT_POST_OPTIMIZER (module -1): the step's end.
 * A module segment with no op on any rank (fp_plan_segment.ops == 0) is not
 * called: fp_exec_hook skips it when the next module hook comes (its skip
 * rule); before a step hook (which it never skips to) the driver calls the
 * deferred ones in order (state.skipped counts the segments never called).
 * An event the plan does not have ahead is FP_ERR_ORDER with a message
 * naming the event and what the plan expects next (a forward that does not
 * follow the plan's order, a unit run after the forward passed it, a second
 * forward before the optimizer step, the optimizer step before the
 * micro-batches are through); nothing is issued. fp_exec_hook's own
 * failures come back with its status and message. While a driver is in
 * use, call the executor's hooks only through it. The executor must outlive
 * the driver. A driver allocates only in fp_driver_create. */
typedef struct fp_driver fp_driver;

typedef enum fp_event {
  FP_EVENT_PRE_FORWARD = 1,  /* = the fp_hook values of the module hooks */
  FP_EVENT_POST_FORWARD = 2,
  FP_EVENT_PRE_BACKWARD = 3,
  FP_EVENT_POST_BACKWARD = 4,
  FP_EVENT_PRE_OPTIMIZER = 5,
  FP_EVENT_POST_OPTIMIZER = 6,
  FP_EVENT_BACKWARD_DONE = 7,
  FP_EVENT_RECOMPUTE_BEGIN = 8,
  FP_EVENT_RECOMPUTE_END = 9,
} fp_event;

/* Where a driver is; read through the pointer fp_driver_state returns,
 * which is valid for the driver's life and updated by every call (a
 * trainer's callbacks read it without a call). */
typedef struct fp_driver_state {
  int32_t pos;         /* the next segment of the step (0: between steps, before step_begin) */
  int32_t micro;       /* the micro-batch of the last segment issued (-1: none this step) */
  int32_t in_backward; /* 1 from a PRE_BACKWARD event to BACKWARD_DONE */
  int32_t pre_optimizer; /* the segment index of pre_optimizer */
  int64_t hooks;       /* fp_exec_hook calls made (recompute windows included) */
  int64_t skipped;     /* empty module segments never called (the executor skipped them) */
  int64_t recomputes;  /* recomputed forwards told to the executor */
  double exec_s;       /* with fp_driver_set_profile on: seconds inside fp_exec_hook
                        * (CLOCK_MONOTONIC: read without a system call; profile on an idle machine) */
  double exec_step_s;  /* of those, inside PRE/POST_OPTIMIZER events */
} fp_driver_state;

/* A driver over executor x, at x's step start. FP_ERR_ARG for NULL
 * arguments or an executor that was not created successfully; FP_ERR_NOMEM.
 * *out is set even on failure (except NULL out and no memory); free it with
 * fp_driver_free. */
FP_API fp_status fp_driver_create(fp_exec *x, fp_driver **out);
/* the last error of a driver ("" when none) */
FP_API const char *fp_driver_errmsg(const fp_driver *d);
FP_API void fp_driver_free(fp_driver *d);
/* Report an event (see above). module: the unit for the module events and
 * RECOMPUTE_*, -1 for the others (FP_ERR_ARG otherwise, or for an event
 * outside the enum). */
FP_API fp_status fp_driver_event(fp_driver *d, fp_event e, int32_t module);
/* The driver's state (NULL for a NULL driver). */
FP_API const fp_driver_state *fp_driver_state_of(const fp_driver *d);
/* Time fp_exec_hook calls (state.exec_s) or not (the default). */
FP_API fp_status fp_driver_set_profile(fp_driver *d, bool on);

/* NCCL backend: the compute stream (a cudaStream_t): cfg.cuda_stream, or the
 * one the executor made. The trainer launches its forward, backward and
 * optimizer work on it; after a hook returns, work launched on it is ordered
 * after everything the hook's segment says must come first. NULL for the MPI
 * backend and for an executor that failed to create. */
FP_API void *fp_exec_cuda_stream(const fp_exec *x);
/* NCCL backend: the trainer now computes on `stream` (a cudaStream_t, or
 * FP_CUDA_STREAM_LEGACY / FP_CUDA_STREAM_PER_THREAD); it becomes the plan's
 * compute stream from the next hook on. Everything already issued on the old
 * compute stream comes before anything issued on the new one (an event
 * recorded on the old stream, waited on by the new one), so a trainer may
 * move between streams at any hook (torch.cuda.stream(s) around a step, or
 * a different current stream per step). FP_ERR_ARG: NULL, or the MPI backend;
 * FP_ERR_ORDER: while the compute stream is being captured. The stream must
 * outlive the executor or the next call. */
FP_API fp_status fp_exec_set_cuda_stream(fp_exec *x, void *stream);

/* ---- one CUDA graph per training step (NCCL backend, FP_CUDA_CAPTURE_SAFE) ----
 * docs/cuda.md, "One graph per step". The trainer captures whole steps - its
 * own kernels and every hook's gathers, reduce-scatters, casts, records and
 * waits - into one CUDA graph on the compute stream and replays it with
 * cudaGraphLaunch, calling no hook:
 *
 *   one step (or more) uncaptured: NCCL connects at its first collectives
 *   cudaStreamBeginCapture(fp_exec_cuda_stream(x), cudaStreamCaptureModeGlobal);
 *   fp_exec_capture_begin(x);
 *   step_begin .. post_optimizer (one or more whole steps, every micro-batch),
 *     the trainer's kernels on the compute stream;
 *   fp_exec_capture_end(x);                 joins the plan's streams back
 *   cudaStreamEndCapture(...); cudaGraphInstantiate(...);
 *   each step: cudaGraphLaunch(exec, stream);   no hook, no host synchronization
 *   cudaGraphExecDestroy / cudaGraphDestroy; fp_exec_capture_release(x);
 *
 * Inside the capture every hook forks the plan's side streams (all-gather,
 * reduce-scatter, host copy) from the compute stream when they first get
 * work and captures its ops on them; no hook path synchronizes, allocates
 * or adds a host callback, so the capture never breaks on the executor's
 * account. Buffer addresses never change: refits (fp_exec_load_weights)
 * between replays write into the addresses the graph reads. Not allowed
 * while capturing (FP_ERR_ORDER, nothing issued): fp_exec_sync,
 * fp_exec_all_reduce_f64, refits, fp_exec_set_cuda_stream.
 *
 * fp_exec_capture_begin: the compute stream must already be capturing,
 * between steps, after at least one uncaptured step. FP_ERR_ARG: not the
 * NCCL backend, or a cuda_mode other than FP_CUDA_CAPTURE_SAFE (graph mode
 * captures its own per-hook graphs and synchronizes once to do it);
 * FP_ERR_ORDER: the compute stream is not capturing (or its capture was
 * invalidated), inside a step, no warm-up step yet, a capture already begun.
 * Nothing changes on a refusal. */
FP_API fp_status fp_exec_capture_begin(fp_exec *x);
/* After the last captured post_optimizer, before cudaStreamEndCapture: every
 * side stream forked into the capture is joined back into the compute
 * stream (CUDA refuses to end a capture with unjoined work), and the
 * executor counts one live graph. FP_ERR_ORDER (nothing changes, the capture
 * goes on): no capture begun, the capture holds no step or ends inside one.
 * FP_ERR_BACKEND (the executor is unusable from then on: its place in the
 * step belongs to a graph that will never exist): the capture was
 * invalidated by something CUDA refuses inside a capture (a host
 * synchronization, an allocation, a synchronous copy), or it ended without
 * fp_exec_capture_end. Any hook or call that finds the capture begun here
 * gone fails the same way, naming the streams that were never joined. */
FP_API fp_status fp_exec_capture_end(fp_exec *x);
/* The trainer destroyed a graph it captured with fp_exec_capture_begin/end.
 * FP_ERR_ORDER when none is live. */
FP_API fp_status fp_exec_capture_release(fp_exec *x);
/* Graphs captured with fp_exec_capture_begin/end and not released (they
 * read and write the executor's arena: destroy the executor only when this
 * is 0); -1 for NULL. */
FP_API int64_t fp_exec_capture_live(const fp_exec *x);

/* Sum `n` doubles across every rank of the executor's world, in place: one
 * collective that every rank calls with the same n, at the same point of
 * its hook sequence (e.g. the squared norms of the grad shards for
 * clip_grad_norm_, between pre_optimizer and post_optimizer). Allowed
 * whenever no hook is running (between hooks, inside or outside a step);
 * it waits for nothing the plan issued and is ordered with it by nothing
 * (the values are the caller's own host memory). MPI: MPI_Allreduce on the
 * executor's private duplicate of the bootstrap communicator, made at
 * create. NCCL: ncclAllReduce on the world communicator through a device
 * staging buffer made at create, on the compute stream (so after the
 * trainer's work queued there), then the host waits for it: not allowed
 * while the compute stream is being captured (FP_ERR_ORDER); at most
 * FP_ALL_REDUCE_MAX values per call (FP_ERR_ARG beyond). n == 0 is a no-op
 * (no communication: every rank must then pass 0). */
#define FP_ALL_REDUCE_MAX 4096
FP_API fp_status fp_exec_all_reduce_f64(fp_exec *x, double *values, int n);

/* The same reduction with no host wait, so that it can be captured into
 * one graph per step (clip_grad_norm_ inside torch.cuda.graph): the n
 * doubles at `values` are device memory the caller owns, and the
 * all-reduce (the sum over every rank, or with `max` nonzero the maximum)
 * is enqueued on the trainer's compute stream (fp_exec_set_cuda_stream,
 * or torch's capture stream inside fp_exec_capture_begin / _end) on the
 * world communicator, in place, after the work queued there and before
 * what the caller queues next; the result is read in stream order, never
 * waited for here. Every rank calls it with the same n at the same point
 * of its hook sequence, between hooks. NCCL backend only (FP_ERR_BACKEND
 * on the MPI and external backends, whose values are host memory:
 * fp_exec_all_reduce_f64); n in [0, FP_ALL_REDUCE_MAX], values non-NULL
 * when n > 0 (FP_ERR_ARG). */
FP_API fp_status fp_exec_all_reduce_f64_dev(fp_exec *x, double *values, int n, int max);

/* ---- MPI from programs that do not link MPI (e.g. Python over ctypes) ---- */
/* MPI_Init_thread asking for MPI_THREAD_MULTIPLE (so the MPI backend can
 * use its progress thread), unless MPI is already initialized; then this
 * process's rank and the size of MPI_COMM_WORLD (either pointer may be
 * NULL). FP_ERR_BACKEND when MPI fails or was already finalized. */
FP_API fp_status fp_mpi_init(int *rank, int *world_size);
/* MPI_Finalize; a no-op when MPI was never initialized or is finalized
 * already. Destroy every executor first. */
FP_API fp_status fp_mpi_finalize(void);
/* MPI_Abort(MPI_COMM_WORLD, code) when MPI is initialized (ending every
 * rank of the job), else exit(code). Does not return. */
FP_API void fp_mpi_abort(int code);

/* ---- tensor views ------------------------------------------------------ */
/* A view into the arena. data is NULL (and numel 0) where this rank holds
 * nothing of it. The address of a view never changes for the executor's
 * life, refits included. */
typedef struct fp_tensor {
  void *data;
  fp_elem dtype;
  int64_t numel; /* elements at data */
} fp_tensor;

/* Where the elements of this rank's shards sit in the full (row-major,
 * flattened) param: for k in [0, runs), shard elements
 * [k*shard_stride, k*shard_stride + n_k) are full elements
 * [full_off + k*full_stride, ... + n_k), where n_k = len for every run but
 * the last and n_{runs-1} = last_len (fp_extent_elems counts them all).
 * One run for dim-0 shards, ragged shards, owned and replicated params;
 * `outer` runs for a shard on dim > 0; one run per block for a block-cyclic
 * plug-in's layout (docs/placements.md: blocks of len elements, G * len
 * apart), whose last run is shorter (last_len < len) on the rank holding a
 * param's short last block. Every other layout has last_len == len.
 * runs == 0 when this rank holds nothing. Shard elements outside the runs
 * are padding (zero). */
typedef struct fp_extent {
  int64_t runs, len, shard_stride, full_off, full_stride;
  int64_t last_len; /* elements of run runs-1 (<= len) */
} fp_extent;

/* the elements an extent holds: (runs - 1) * len + last_len, 0 when it
 * holds nothing (or e is NULL) */
FP_API int64_t fp_extent_elems(const fp_extent *e);

typedef struct fp_param_view {
  const char *name;      /* owned by the plan */
  int32_t module;        /* module index */
  int ndim;
  int64_t shape[8];
  int64_t numel;         /* elements of the full param */
  bool requires_grad;    /* false: frozen (no grads, no update) */
  /* The unsharded compute weight (param dtype, numel elements, row-major).
   * Valid from the hook that gathers it (pre_forward / pre_backward of its
   * module, or always for weights the plan keeps unsharded) until the plan
   * frees it; its bytes may serve other buffers outside that window. A tied
   * param (read by other modules too: fp_plan_module_uses) is valid through
   * the forward and backward of every module that reads it. An MXFP8 param
   * (a frozen replicated bucket with param_dtype "mxfp8"; docs/layout.md):
   * dtype FP_ELEM_E4M3, the same bytes as `main`, always valid; its values
   * are these elements times their block's `scales`. */
  fp_tensor weight;
  /* The unsharded grad the trainer's backward accumulates into (param dtype,
   * numel elements): zeroed by pre_backward, reduced by post_backward. A tied
   * param's: zeroed before the first backward that reads it, reduced after
   * the last, so every reader's backward adds its grad here. */
  fp_tensor ugrad;
  /* This rank's shard of the main weights (main dtype) and of the main
   * grads (main-grad dtype): what the optimizer reads and updates between
   * pre_optimizer and post_optimizer. numel counts the slot, padding
   * included; `shard` maps it into the full param. */
  fp_tensor main, grad;
  fp_extent shard;
  /* The dtype the plan sums this param's grads in across ranks (the spec's
   * reduce_dtype): that of the plan's reductions in the param's bucket; the
   * main-grad dtype for a frozen param. */
  fp_elem reduce_dtype;
  /* The optimizer state of this rank's shard, one tensor per state the plan
   * holds (fp_plan_info.optim_states; AdamW: exp_avg then exp_avg_sq; SGD:
   * momentum_buffer), each in the state dtype with the same numel and the
   * same `shard` runs as `main`: persistent, zero when the executor is
   * created, written only by the trainer's optimizer. data NULL for a
   * frozen param and past optim_states. */
  fp_tensor optim[2];
  /* MXFP8 params only: the e8m0 block scales (FP_ELEM_E8M0, one per block
   * of 32 consecutive elements of the flat row-major param, the last block
   * possibly short: ceil(numel / 32) elements). Element e of the param is
   * the e4m3 value of byte weight[e] times 2^(scales[e / 32] - 127) (scale
   * byte 0xFF: the whole block is NaN). Persistent like the weight: valid
   * always, written only by a refit. data NULL and numel 0 for every other
   * param. */
  fp_tensor scales;
} fp_param_view;

/* Parameters are numbered 0..nparams-1 in the plan's order. */
FP_API fp_status fp_exec_param(fp_exec *x, const char *name, fp_param_view *out);
FP_API fp_status fp_exec_param_at(fp_exec *x, int32_t index, fp_param_view *out);

/* ---- refit ------------------------------------------------------------- */
/* Load weights from safetensors files holding full tensors by param name
 * (tensors the plan does not name are ignored). Every param of the plan must
 * be found exactly once across the files, with its exact shape and a float
 * dtype (F32, BF16, F16; converted to the main dtype, round to nearest
 * even). Each rank reads only the extents it stores: its main-weight shard,
 * and the whole tensor where the plan keeps the compute weight unsharded
 * between steps; those compute copies are recast from the new main weights.
 * An MXFP8 param (fp_param_view.scales) is read whole, widened to fp32 and
 * quantized into its e4m3 elements and e8m0 scales (32-element blocks, the
 * C reference kernel fpk_quantize_mxfp8's rule: docs/executor.md).
 * Every name, shape and dtype is validated and every byte read before any
 * byte of the arena is written, so a failed refit (FP_ERR_WEIGHTS) changes
 * nothing. Buffer addresses never change, so CUDA graphs captured before a
 * refit (the executor's and the trainer's) compute with the new weights when
 * replayed after it. Call it between steps (before step_begin): FP_ERR_ORDER
 * otherwise. Collective: every rank calls it, and the ranks agree on success
 * before any rank writes, so a refit that fails on one rank fails on all
 * (FP_ERR_WEIGHTS naming that rank) and no rank changes its weights (one
 * all-reduce of two numbers). NCCL: it synchronizes the device (not
 * allowed while the compute stream is being captured). */
FP_API fp_status fp_exec_load_weights(fp_exec *x, const char *const *paths, int npaths);

/* A safetensors file as the refit reads it: fp_safetensors_open checks
 * path the way fp_exec_load_weights does (the 8-byte length, the strict
 * JSON header, each tensor's dtype, shape and bytes inside the data) and
 * gives its tensors' names (in the order of their data), so a caller can match a folder of
 * files against a plan before any rank refits (flexplan.torch's init=DIR)
 * without a second reader. FP_ERR_WEIGHTS with "path: ..." (the header's
 * faults located at their header byte and JSON pointer) for a file that is
 * not one, FP_ERR_ARG for NULL arguments. *out is set even on failure
 * (but when memory runs out) and must be closed. */
typedef struct fp_safetensors fp_safetensors;
FP_API fp_status fp_safetensors_open(const char *path, fp_safetensors **out);
FP_API const char *fp_safetensors_errmsg(const fp_safetensors *f);
/* the number of tensors (0 for a file that failed to open), and the name of
 * tensor i (NULL when out of range; owned by f) */
FP_API int64_t fp_safetensors_count(const fp_safetensors *f);
FP_API const char *fp_safetensors_name(const fp_safetensors *f, int64_t i);
FP_API void fp_safetensors_close(fp_safetensors *f);

/* ---- statistics -------------------------------------------------------- */
typedef struct fp_exec_stats {
  int64_t steps;            /* post_optimizer hooks completed */
  int64_t hooks;            /* hooks run */
  int64_t local_ops;        /* local kernels run (cast, copy, add, ...) */
  int64_t collectives;      /* communication ops issued (send and recv count one each) */
  int64_t bytes_moved;      /* bytes this rank passed to communication calls (send side) */
  int64_t allocations;      /* memory allocations the executor made, setup and refits included */
  int64_t hook_allocations; /* of those, made inside a hook: always 0 (tested) */
  int64_t arena_bytes;      /* bytes of the one arena allocation (device + host arenas + staging) */
  int64_t refits;           /* successful fp_exec_load_weights calls */
  int64_t refit_bytes_read; /* bytes the last successful refit read from its files (only this rank's extents) */
  fp_progress progress;     /* the progress mode in use (MPI) */
  uint64_t plan_hash;
  /* NCCL backend */
  fp_cuda_mode cuda_mode;   /* the mode in use */
  int64_t graphs;           /* CUDA graphs captured (FP_CUDA_GRAPH: one per segment with work beyond
                             * records and waits on this rank) */
  int64_t graph_nodes;      /* nodes in those graphs, NCCL's own included */
  int64_t graph_launches;   /* cudaGraphLaunch calls made by hooks */
  int64_t nccl_comms;       /* NCCL communicators made (ncclCommSplit, one per plan communicator
                             * and stream that communicates on it), the world one excluded */
  int64_t skipped;          /* segments skipped because this rank had no ops in them (the trainer
                             * called a later hook; fp_exec_hook) */
} fp_exec_stats;
FP_API fp_status fp_exec_get_stats(const fp_exec *x, fp_exec_stats *out);

/* ---- measured timing (opt-in) ------------------------------------------- */
/* Record, for the next `steps` steps (from the next step_begin on), when this
 * rank entered and left each hook and when each of its ops started and
 * ended as the executor ran it: a local op around its kernel, a collective
 * from its issue to the poll that saw it complete, a wait from the first try
 * to its release, a record at once. Times are CLOCK_MONOTONIC microseconds.
 * The record is allocated here (steps x ops), never in a hook; a second call
 * replaces the first. Call it between steps (FP_ERR_ORDER otherwise); steps
 * must be 1..65536 (FP_ERR_ARG). MPI backend only: the NCCL backend returns
 * FP_ERR_ARG (docs/executor.md, "Measured timing"). */
FP_API fp_status fp_exec_timing_start(fp_exec *x, int32_t steps);
/* Write the steps recorded so far as JSON ("format": "flexplan.timing.v1",
 * docs/viz.md): the plan hash, rank and world, and per step the hooks and
 * ops with start and end in microseconds from that step's step_begin. It
 * waits for all issued work first (fp_exec_sync). Written atomically (a
 * temporary file renamed into place). Between steps only (FP_ERR_ORDER);
 * FP_ERR_ARG when no step was recorded or the file cannot be written.
 * `flexplan viz PLAN --measured FILE...` draws them beside the modeled step. */
FP_API fp_status fp_exec_timing_write(fp_exec *x, const char *path);

/* ---- transfers between plans (docs/reshard.md) ----------------------------
 * A transfer moves a model's main weights from the executors of one plan
 * (FROM) into those of another plan of the same model (TO): compiled by
 * fp_reshard_compile (flexplan_compile.h) or `flexplan reshard`. Processes
 * are the ranks of the communicator the run is given: process p holds FROM
 * rank p - from_offset and TO rank p - to_offset where those are ranks of
 * the plans (both offsets 0 by default: the rank sets overlap). */
typedef struct fp_xfer fp_xfer;
typedef struct fp_xfer_info {
  int64_t from_world, to_world, to_offset, processes;
  int32_t nops;
  int64_t wire_bytes;      /* bytes received over the wire, all processes */
  int64_t lower_bound;     /* TO bytes whose elements the receiving process does not hold as a FROM rank */
  int64_t local_bytes;     /* TO bytes written by local copies and casts */
  int64_t max_send_bytes, max_recv_bytes; /* the busiest process's */
  int64_t from_offset;
} fp_xfer_info;
FP_API fp_status fp_xfer_get_info(const fp_xfer *t, fp_xfer_info *out);
/* Load a transfer saved as JSON (`flexplan reshard -o`, fp_xfer_render form
 * 0): every member checked and the transfer verifier run, as fp_plan_load
 * does for plans. FP_ERR_PLAN with located messages ("t.json:3:5: error:
 * /procs/1/ops/0: ...") on *out, which is set even on failure. fp_xfer_run
 * checks the executors' plan hashes against the file's. */
FP_API fp_status fp_xfer_load(const char *path, fp_xfer **out);
/* the last error of a transfer handle ("" when none) */
FP_API const char *fp_xfer_errmsg(const fp_xfer *t);
FP_API void fp_xfer_free(fp_xfer *t);
/* ---- reshard transforms (docs/reshard.md, "Transforms") ------------------
 * A transform changes what crosses the wire for the params it takes, in
 * the terms of Megatron-Core's ReshardTransform: should_transform picks the
 * params; for a slice (elements [begin, begin + count) of the flattened
 * param) send_wires says which wire tensors the sender produces (dtype and
 * count of each, 1 to FP_TRANSFORM_MAX_WIRES) and prepare_send produces
 * them; recv_wires (prepare_recv) says what the receiver allocates, which
 * must be the same tensors; finalize_recv writes the slice into TO's
 * persistent buffer from them (TO's addresses never change, so captured
 * CUDA graphs stay valid). Only slices that cross the wire are transformed:
 * a process copies what it already holds exactly; optimizer state never is.
 * send_wires and recv_wires are called when compiling (the transfer records
 * every op's wire tensors), prepare_send and finalize_recv while running,
 * on host memory (on the NCCL backend the executor copies the slice and the
 * wire tensors through the host around each call). finalize_recv is given a bounded view (count elements of to_dtype)
 * with guard bytes on either side, checked after it returns: a transform
 * that writes outside its slice fails the run naming it, and nothing of
 * that slice reaches TO. Each function returns FP_OK, or another status
 * with a message in err (at most errcap bytes). */
#define FP_TRANSFORM_MAX_WIRES 8
typedef struct fp_transform_param {
  const char *name;       /* the param's name */
  int64_t numel;          /* its elements */
  fp_elem from_dtype;     /* its main dtype in FROM (what prepare_send reads) */
  fp_elem to_dtype;       /* in TO (what finalize_recv writes) */
} fp_transform_param;
typedef struct fp_wire_tensor {
  fp_elem dtype;
  int64_t count;          /* elements */
} fp_wire_tensor;
typedef struct fp_reshard_transform {
  /* nonzero: the transform takes p */
  int (*should_transform)(void *user, const fp_transform_param *p);
  /* the wire tensors of a slice, sender's side: at most FP_TRANSFORM_MAX_WIRES into out, their number into *n */
  fp_status (*send_wires)(void *user, const fp_transform_param *p, int64_t begin, int64_t count, fp_wire_tensor *out,
                          int *n, char *err, size_t errcap);
  /* the receiver's (prepare_recv): the same tensors */
  fp_status (*recv_wires)(void *user, const fp_transform_param *p, int64_t begin, int64_t count, fp_wire_tensor *out,
                          int *n, char *err, size_t errcap);
  /* fill the wire tensors (as send_wires gave them) from src (count elements of from_dtype) */
  fp_status (*prepare_send)(void *user, const fp_transform_param *p, int64_t begin, int64_t count, const void *src,
                            void *const *wires, char *err, size_t errcap);
  /* write dst (count elements of to_dtype) from the wire tensors (as recv_wires gave them) */
  fp_status (*finalize_recv)(void *user, const fp_transform_param *p, int64_t begin, int64_t count,
                             const void *const *wires, void *dst, char *err, size_t errcap);
} fp_reshard_transform;

/* The transforms a transfer may use: an opaque set, like fp_placement_set.
 * A TO param is taken by the first transform (in the order added) whose
 * should_transform says so. The set must outlive the transfers compiled or
 * bound with it. */
typedef struct fp_transform_set fp_transform_set;
FP_API fp_status fp_transform_set_create(fp_transform_set **out);
/* name: [a-z][a-z0-9_]*, at most 63 characters, not "mxfp8" (the built-in
 * --transform), not already in the set; every function given. FP_ERR_ARG
 * otherwise, the reason in fp_transform_set_errmsg */
FP_API fp_status fp_transform_set_add(fp_transform_set *set, const char *name, const fp_reshard_transform *tr,
                                      void *user);
FP_API const char *fp_transform_set_errmsg(const fp_transform_set *set);
FP_API void fp_transform_set_free(fp_transform_set *set);
/* MXFP8 on this contract (docs/reshard.md): FP_MXFP8_SENDER, the sender
 * quantizes (E4M3 data and E8M0 scales on the wire, blocks aligned to the
 * full param) and the receiver dequantizes into TO; FP_MXFP8_RECEIVER, the
 * slice crosses unchanged and the receiver converts on receipt. Either
 * writes TO's bytes exactly as `--transform mxfp8` does. Register the table
 * with user = an fnmatch pattern of param names (NULL: every param whose
 * main dtypes are fp32, bf16 or fp16). NULL for another mode. */
typedef enum fp_mxfp8_mode { FP_MXFP8_SENDER = 0, FP_MXFP8_RECEIVER = 1 } fp_mxfp8_mode;
FP_API const fp_reshard_transform *fp_transform_mxfp8(fp_mxfp8_mode mode);
/* Bind a loaded transfer's transforms by name (a compiled one is bound to
 * the set it was compiled with). FP_ERR_ARG, naming it, when the transfer
 * names a transform the set lacks; fp_xfer_run refuses a transfer whose
 * transforms are not bound. */
FP_API fp_status fp_xfer_bind_transforms(fp_xfer *t, const fp_transform_set *set);

/* Run the transfer (collective over comm, a pointer to an MPI_Comm, NULL:
 * MPI_COMM_WORLD, which needs at least `processes` ranks; MPI must be
 * initialized). Both executors of every process are on one backend: MPI, or
 * NCCL (the transfer then makes an NCCL communicator of its own over the
 * processes holding a rank of either plan at its first run, keeps it with a
 * stream and the staging on the handle for the next runs, and frees them in
 * fp_xfer_free; the processes still agree over MPI first; docs/reshard.md).
 * On MPI the handle likewise keeps a duplicate of comm (made again when a
 * later run's comm has another group), the staging and the requests.
 * from / to: this process's executors of the FROM and TO plans (NULL where it
 * holds no rank of that plan); both between steps. Every process checks its
 * side (the executors' plans are the transfer's, their ranks this
 * process's, and every byte range it reads or writes lies in that rank's
 * weights of the param it names - FP_ERR_PLAN otherwise, for a tampered
 * file), then all agree (point to point through process 0 of comm) before
 * any byte moves: a check failing anywhere fails everywhere with TO unchanged
 * (FP_ERR_ARG, FP_ERR_PLAN, FP_ERR_MISMATCH, FP_ERR_ORDER). With a timeout
 * (the executors' fp_exec_config.timeout_s, else FLEXPLAN_TIMEOUT) a process
 * that does not join the agreement, or whose data does not arrive, is named
 * with FP_ERR_TIMEOUT instead of a hang; after a timeout in the data phase
 * both executors are unusable (docs/executor.md, "The watchdog"). TO's main weights (and the compute weights
 * it keeps unsharded between steps) are written in place, at their fixed
 * addresses. An MPI, CUDA or NCCL failure while moving (FP_ERR_BACKEND) may
 * leave those bytes partly written; nothing else of TO's arena is touched. */
FP_API fp_status fp_xfer_run(fp_xfer *t, fp_exec *from, fp_exec *to, const void *comm);

#ifdef __cplusplus
}
#endif
#endif
