/* api_impl.h - what the public compile API (api/compile.c, which sees the
 * public headers) needs from the pipeline (api/pipeline.c, which sees the
 * planner's): the two cannot share a translation unit, since the public
 * fp_extent and the layout's are different types of one name. Only IR and
 * C types cross. */
#ifndef FP_API_IMPL_H
#define FP_API_IMPL_H

#include <stdio.h>

#include "ir/ir.h"

/* Run the CLI's compile (inputs as text or files, the policy by
 * fpi_policy_parse's number, an optional hardware preset already checked)
 * and write the plan as plan.json into memory: the text (malloc'd, *len
 * bytes, NUL-terminated) and the compile's time in *ms; or NULL and *msg the
 * diagnostics (malloc'd) after an input error, or NULL and *msg NULL when
 * memory ran out. */
char *fpa_compile(const char *model_path, const char *model_text, const char *spec_path, const char *spec_text,
                  const char *hw_preset, int policy, size_t *len, double *ms, char **msg);

/* `--emit=summary` of a plan read back (its "figures"), with compile_ms;
 * false when it has none */
bool fpa_summary_json(const fp_prog *p, double compile_ms, FILE *f);

#endif
