/* api_impl.h - api/'s internal boundary: what the public compile API
 * (api/compile.c) and the command line (tools/flexplan.c) need of the
 * planner, as calls on base/ and IR types; api/pipeline.c implements it on
 * the planner's. The command line includes this header and never a
 * planner/ one (docs/architecture.md, "The layers"). */
#ifndef FP_API_IMPL_H
#define FP_API_IMPL_H

#include <stdio.h>

#include "base/base.h"
#include "ir/ir.h"
#include "ir/xfer.h"

/* ---- the compile: one path for the CLI and fp_plan_compile ---------------- */
typedef struct fpa_request {
  const char *model_path, *model_text; /* a non-NULL *_text is the input, *_path its name */
  const char *spec_path, *spec_text;   /* both NULL: the model's embedded spec, or the defaults */
  const char *hw_preset;               /* NULL, a preset, or a hardware file (fpa_hw_lookup; the spec's overrides apply) */
  int policy;                          /* fpa_policy_parse's number */
  bool notes;                          /* no spec: say which defaults apply (a note on stderr) */
  const struct fpi_plugins *plugins;   /* placement plug-ins the spec may name (NULL: none;
                                        * fpa_placement_plugins) */
} fpa_request;

/* the planner's view of a public plug-in set (api/plugins.c; NULL for NULL) */
struct fp_placement_set;
const struct fpi_plugins *fpa_placement_plugins(const struct fp_placement_set *set);

typedef struct fpa_compiled {
  fp_prog *prog;          /* the plan (in the compile's arena) */
  const char *model_name; /* the model's "name" */
  double ms;              /* wall time from reading the inputs to the plan */
  double input_ms;        /* of which reading the inputs (CPU) */
  struct fp_summary *summary;         /* the planner's (fpa_summary_*) */
  struct fp_phase_times *times;       /* where the compile's time went (fpa_print_times) */
} fpa_compiled;

/* inputs, policy, hardware preset, fpi_compile; false after input errors
 * reported through d */
bool fpa_compile_run(fp_arena *a, fp_diag *d, const fpa_request *rq, fpa_compiled *out);

/* the same into plan.json text in memory (malloc'd, *len bytes,
 * NUL-terminated) and the compile's time in *ms; or NULL and *msg the
 * diagnostics (malloc'd) after an input error, or NULL and *msg NULL when
 * memory ran out */
char *fpa_compile(const fpa_request *rq, size_t *len, double *ms, char **msg);

/* --time: each phase's CPU time (this thread's) */
void fpa_print_times(const fpa_compiled *c, const char *model, FILE *f);
/* the summary: as JSON (--emit=summary) or text; the warning when the peak
 * is over the device memory (nothing otherwise) */
void fpa_summary_json(const fpa_compiled *c, FILE *f);
void fpa_summary_text(const fpa_compiled *c, FILE *f);
void fpa_summary_warn_device(const fpa_compiled *c, FILE *f);
/* `--emit=summary` of a plan read back (its "figures"), with compile_ms;
 * false when it has none */
bool fpa_plan_summary_json(const fp_prog *p, double compile_ms, FILE *f);

/* ---- names ------------------------------------------------------------------ */
/* "flexplan" / "fsdp2" -> the policy's number; -1 for another name */
int fpa_policy_parse(const char *name);
bool fpa_hw_preset(const char *name, fp_hw *out);
const char *fpa_hw_preset_list(void); /* "h100-sxm, h200, h200-fit, cpu-mpi" */
/* --hardware ARG: a preset or a hardware file (1), a bad file (0, reported
 * on d), neither (-1, unreported); planner/hwfile.h */
int fpa_hw_lookup(fp_arena *a, fp_diag *d, const char *arg, fp_hw *out);
bool fpa_hw_arg_is_file(const char *arg);
/* flexplan calibrate (planner/calib.c): fit a machine, starting from
 * *start, to nrecs timing records of P (op_t[r]: [nops][2], hook_t[r]:
 * [nsegs][2], as viz/measured.c reads them); write it as a hardware file
 * named `name` to hw_out and the fit's residuals per op kind to report.
 * False with the reason in err (too few or inconsistent records). */
/* simulate --measured: P on hw against nrecs records (planner/compare.c) */
bool fpa_compare_print(fp_arena *a, const fp_prog *P, const fp_hw *hw, const double *const *op_t,
                       const double *const *hook_t, const char *const *names, int32_t nrecs, FILE *f);
bool fpa_calibrate(const fp_prog *P, const fp_hw *start, const double *const *op_t, const double *const *hook_t,
                   int32_t nrecs, const char *name, FILE *hw_out, FILE *report, char *err, size_t cap);

/* ---- explain / simulate ------------------------------------------------------- */
typedef enum {
  FPA_SHOW_EXPLAIN,    /* one row per op, with its modeled times */
  FPA_SHOW_EXPOSED,    /* the ranked table of exposed communication */
  FPA_SHOW_SIMULATION, /* the segments and totals, with the memory timeline */
} fpa_show;
/* simulate p on hw and print `what` to f; false (nothing printed) when the
 * modeled step is not a finite number */
bool fpa_modeled_print(fp_arena *a, const fp_prog *p, const fp_hw *hw, fpa_show what, FILE *f);

/* the planner's view of a transform set (api/transforms.c; NULL: none) */
struct fp_transform_set;
const fpi_xforms *fpa_transforms(const struct fp_transform_set *s);

/* ---- reshard ------------------------------------------------------------------ */
/* the transfer from one plan to another (planner/reshard.h fpi_reshard and
 * its options; the caller verifies it: fpi_tx_verify); NULL after errors on d */
fp_tx *fpa_reshard(fp_arena *a, const fp_prog *from, const fp_src *from_src, const fp_prog *to, const fp_src *to_src,
                   const char *what, int64_t to_offset, int64_t from_offset, const char *const *rules, int nrules,
                   fp_diag *d); /* rules: "PATTERN=NAME" (--transform), built-in names only */

#endif
