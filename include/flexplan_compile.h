/* flexplan_compile.h - the compiler as a library call: a model and a
 * sharding spec (files or JSON text) compiled into a plan handle, and what
 * the command line writes about a plan (summary, plan.json, .fpir, the
 * explain table, the trace, the HTML page) as strings.
 *
 * The handle is the fp_plan of flexplan.h: a compiled plan is the plan that
 * `flexplan compile` would write, read back through the same loader and
 * verifier as fp_plan_load (so an executor made from it behaves exactly as
 * one made from the file), and fp_plan_save writes it.
 *
 * Errors: every function returns an fp_status and keeps the message on the
 * plan handle (fp_plan_errmsg), the text `flexplan` prints for the same
 * input: `file:line:col: error: /json/pointer: message`, one line per error.
 * Strings returned through `char **out` are malloc'd; free them with
 * fp_free. Functions on one handle may be called from one thread at a time
 * (they set its message); nothing here prints. Part of libflexplan.so
 * (api/compile.c); docs/python.md and docs/install.md describe its use. */
#ifndef FLEXPLAN_COMPILE_H
#define FLEXPLAN_COMPILE_H

#include "flexplan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- placement plug-ins (docs/placements.md) --------------------------------
 * A placement says how one param is spread over the ranks of its shard
 * group: which elements of the flattened (row-major) param each rank holds,
 * the collective that unshards it for compute and the reduction of its
 * gradient. The four built-in kinds (shard, ragged_shard, owned, replicate)
 * are placements; a plug-in is one more, registered by name in a
 * fp_placement_set that fp_compile_options.placements hands to the compile,
 * and named in the spec like a built-in: {"kind": "<name>"} (the object has
 * no other member: a plug-in's parameters are those of the instance
 * registered, through `user`).
 *
 * The compile checks what a plug-in gives before planning anything: every
 * piece inside the param and on the alignment it claims, every element held
 * by exactly one rank (for unshard "none": every rank holds the whole param,
 * each element once), the unshard collective and the reduction a matching
 * pair; then it lays the pieces out as the built-in placement that holds the
 * same elements the same way (an even split of a dim for all_gather; for
 * all_gather_v one run per rank in rank order, or equal blocks dealt
 * round-robin that divide the param; one owner for broadcast; every rank
 * for none), so the plan is lowered and verified like any other. A plug-in
 * whose layout fails a check, or that no layout holds (several runs per
 * rank of unequal length), gets a located error at its spec object naming
 * it, the param, the rank and the element, and no plan. */
typedef enum fp_unshard {
  FP_UNSHARD_ALL_GATHER = 0,   /* equal pieces per rank (padded), gathered */
  FP_UNSHARD_ALL_GATHER_V = 1, /* one run per rank, in rank order, of any length; or blocks of one
                                * length dividing the param, dealt round-robin */
  FP_UNSHARD_BROADCAST = 2,    /* one rank holds it all and broadcasts it */
  FP_UNSHARD_NONE = 3,         /* every rank holds it all */
} fp_unshard;
typedef enum fp_reduce {
  FP_REDUCE_REDUCE_SCATTER = 0,   /* with all_gather */
  FP_REDUCE_REDUCE_SCATTER_V = 1, /* with all_gather_v */
  FP_REDUCE_TO_OWNER = 2,         /* with broadcast: reduce to the owner */
  FP_REDUCE_ALL_REDUCE = 3,       /* with none */
} fp_reduce;

/* elements [begin, begin + count) of the flattened param */
typedef struct fp_piece {
  int64_t begin, count;
} fp_piece;

/* what a plug-in is told of a param */
typedef struct fp_placement_param {
  const char *name;       /* the param's name (model.json) */
  const char *module;     /* its module's name */
  int ndim;
  const int64_t *shape;   /* ndim sizes (each rank's tp slice under tensor parallelism) */
  int64_t numel;
  int64_t group_size;     /* ranks of the shard group: pieces go to ranks 0 .. group_size-1 */
  int64_t elem_bytes;     /* bytes of one element of its main weights */
} fp_placement_param;

/* what a plug-in says of a param besides its pieces */
typedef struct fp_placement_layout {
  int64_t align_elems;    /* every piece begins on a multiple of it and is a multiple long, but a
                           * piece that ends the param (>= 1; 1 when not set) */
  fp_unshard unshard;
  fp_reduce reduce;
} fp_placement_layout;

/* A plug-in: two functions, called while compiling (on the compiling
 * thread, never after fp_plan_compile returns). Each returns FP_OK, or
 * another status with a message (NUL-terminated, at most errcap bytes) in
 * err: the compile reports it, located, and fails. */
typedef struct fp_placement_plugin {
  /* the alignment, unshard collective and reduction for param p */
  fp_status (*describe)(void *user, const fp_placement_param *p, fp_placement_layout *out, char *err,
                        size_t errcap);
  /* rank's pieces of p, in the order its shard stores them: at most cap of
   * them into out and how many there are into *n (the compile calls again
   * with room for *n when *n > cap); ranks holding nothing give none */
  fp_status (*pieces)(void *user, const fp_placement_param *p, int64_t rank, fp_piece *out, int64_t cap,
                      int64_t *n, char *err, size_t errcap);
} fp_placement_plugin;

/* The plug-ins a compile may name: an opaque set. Create it, add plug-ins,
 * pass it in fp_compile_options.placements (to any number of compiles),
 * free it after the last. Functions on one set from one thread at a time. */
typedef struct fp_placement_set fp_placement_set;
/* FP_ERR_ARG: out is NULL; FP_ERR_NOMEM */
FP_API fp_status fp_placement_set_create(fp_placement_set **out);
/* Register plugin (its table is copied; user is passed back to it) under
 * name: [a-z][a-z0-9_]* , at most 63 characters, not a built-in kind
 * (shard, ragged_shard, owned, replicate) nor a name already in the set.
 * FP_ERR_ARG otherwise, with the reason in fp_placement_set_errmsg. */
FP_API fp_status fp_placement_set_add(fp_placement_set *set, const char *name, const fp_placement_plugin *plugin,
                                      void *user);
/* the message of the last failed call on set ("" after a success) */
FP_API const char *fp_placement_set_errmsg(const fp_placement_set *set);
FP_API void fp_placement_set_free(fp_placement_set *set);

/* What to compile. The model is model_text (JSON text) when it is not NULL,
 * else the file model_path; it may be a model.json or {"model":..,
 * "spec":..}. The spec likewise (spec_text, else spec_path); with neither,
 * the model's embedded spec, or the defaults. A text input is named in
 * messages by its path member when given, else "<model>" / "<spec>". */
typedef struct fp_compile_options {
  const char *model_path, *model_text;
  const char *spec_path, *spec_text;
  const char *hardware; /* a hardware preset replacing the spec's (h100-sxm, h200; the spec's
                         * overrides still apply); NULL: the spec's */
  const char *policy;   /* "flexplan" (NULL: the default, as specified) or "fsdp2" (lowered as
                         * PyTorch FSDP2 does by default; a baseline for comparison) */
  const fp_placement_set *placements; /* plug-ins the spec's placements may name (NULL: none) */
} fp_compile_options;

/* Compile (`flexplan compile`). FP_ERR_INPUT when the inputs are invalid
 * (unreadable, malformed, inconsistent, over the memory budget, ...), the
 * located messages on *out; FP_ERR_ARG for NULL arguments, no model, an
 * unknown preset or policy. *out is set even on failure (except when memory
 * runs out); free it with fp_plan_free. */
FP_API fp_status fp_plan_compile(const fp_compile_options *opt, fp_plan **out);

/* The summary as JSON text, `flexplan compile --emit=summary`'s output:
 * for a compiled plan the compile's, for a loaded one the summary of the
 * compile that wrote it (plan.json's "figures"), "compile_ms" 0 then.
 * FP_ERR_PLAN for a plan file without figures. */
FP_API fp_status fp_plan_summary(fp_plan *plan, char **json);

/* Write the plan as plan.json, atomically: a temporary file next to path,
 * renamed over it once complete (nothing is left behind on failure:
 * FP_ERR_INPUT with "path: error: ..."). */
FP_API fp_status fp_plan_save(fp_plan *plan, const char *path);

/* What fp_plan_render writes. */
typedef enum fp_render {
  FP_RENDER_PLAN = 0,     /* plan.json text (what fp_plan_save writes) */
  FP_RENDER_IR = 1,       /* the .fpir text (`flexplan print`) */
  FP_RENDER_EXPLAIN = 2,  /* one row per op with its modeled start and end (`flexplan explain`) */
  FP_RENDER_SIMULATE = 3, /* the modeled time per segment and the totals (`flexplan simulate`) */
  FP_RENDER_TRACE = 4,    /* Chrome Trace Event JSON (`flexplan viz --format=trace`) */
  FP_RENDER_HTML = 5,     /* one self-contained HTML page (`flexplan viz --format=html`) */
} fp_render;

/* Render the plan into a new string (*out, NUL-terminated; free with
 * fp_free). hardware: the preset to model on (explain, simulate, trace,
 * html; NULL: the plan's machine, or h100-sxm for a plan without one);
 * ignored by plan and ir. The views show rank 0 and one rank of every other
 * layout class, as `flexplan viz` without --ranks. */
FP_API fp_status fp_plan_render(fp_plan *plan, fp_render what, const char *hardware, char **out);

/* Free a string this library returned (NULL: nothing). */
FP_API void fp_free(void *p);

/* ---- transfers between plans (`flexplan reshard`, docs/reshard.md) ---- */
typedef struct fp_reshard_options {
  const char *what;          /* "weights" (NULL: the same); "weights+optimizer" is refused */
  int64_t to_offset;         /* process of TO rank r is r + to_offset (0: the rank sets overlap) */
  const char *const *mxfp8;  /* param name patterns (fnmatch) sent as MXFP8 on the wire */
  int nmxfp8;
  int64_t from_offset;       /* process of FROM rank r is r + from_offset (0 but for the way back between
                              * disjoint rank sets) */
  const fp_transform_set *transforms; /* reshard transforms (flexplan.h; NULL: none): a param TO keeps
                              * as MXFP8 goes as MXFP8 whatever they say; one no rule below matches goes
                              * through the first of them whose should_transform takes it */
  const char *const *transform_rules; /* "PATTERN=NAME" (the CLI's --transform): params matching PATTERN
                              * (fnmatch) go through transform NAME, a built-in ("mxfp8" and
                              * "mxfp8_sender": MXFP8 quantized by the sender; "mxfp8_receiver": FROM's
                              * bytes on the wire, converted on receipt) or one of `transforms`, where it
                              * takes them; the first rule matching a param decides. A pattern of
                              * `mxfp8` is the rule "PATTERN=mxfp8", before these. An unknown NAME is
                              * FP_ERR_INPUT listing the known ones */
  int ntransform_rules;
} fp_reshard_options;
/* Compile and verify the transfer from plan `from` to plan `to` (both
 * loaded or compiled plans of one model). FP_ERR_INPUT when they do not fit
 * together (another model, a param missing or of another shape) or the
 * options are bad, with located messages on *out; *out is set even on
 * failure; free it with fp_xfer_free. */
FP_API fp_status fp_reshard_compile(const fp_plan *from, const fp_plan *to, const fp_reshard_options *opt,
                                    fp_xfer **out);
/* What fp_xfer_render writes: 0 the JSON (flexplan.xfer.v1), 1 the text
 * form, 2 the explain table with the figures, 3 a Chrome trace. */
FP_API fp_status fp_xfer_render(fp_xfer *t, int what, char **out);

#ifdef __cplusplus
}
#endif
#endif
