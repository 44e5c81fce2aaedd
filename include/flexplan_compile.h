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
