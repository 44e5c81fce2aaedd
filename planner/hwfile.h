/* hwfile.h - hardware description files: a modeled machine in JSON.
 *
 * A hardware file names a machine and gives every rate and latency of fp_hw
 * (docs/cost-model.md, "Hardware files"); with "base" naming a preset, the
 * fields it leaves out come from that preset. `--hardware` accepts either a
 * preset name or such a file, wherever it is taken; `flexplan calibrate`
 * writes one. Bad files are refused with located errors
 * (file:line:col: error: /pointer: message). */
#ifndef FP_HWFILE_H
#define FP_HWFILE_H

#include "../base/json.h"
#include "../ir/ir.h"

#define FP_HW_FORMAT "flexplan-hardware/1"

/* the machine at path into *out (its name in a); false after reporting */
bool fpi_hw_read(fp_arena *a, fp_diag *d, const char *path, fp_hw *out);
/* the same from a parsed document (root at pointer "") */
bool fpi_hw_parse(fp_jctx *c, const fp_jv *root, fp_hw *out);
/* true when a --hardware argument is taken as a file: not a preset name, and
 * it holds a '/' or a '.' (no preset name does), so that a mistyped preset
 * still gets "unknown hardware preset" with the list */
bool fpi_hw_arg_is_file(const char *arg);
/* --hardware ARG: a preset (1), a file read into *out (1; errors reported:
 * 0), or neither (-1, not reported: the caller names the presets) */
int fpi_hw_lookup(fp_arena *a, fp_diag *d, const char *arg, fp_hw *out);
/* hw as a hardware file (every field; note, when not NULL, as "note") */
void fpi_hw_write(const fp_hw *hw, const char *note, FILE *f);

#endif
