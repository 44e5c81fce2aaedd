/* inputs.c - what `flexplan compile MODEL [--spec SPEC]` reads: a model file
 * (maybe embedding its spec) and an optional separate spec; with neither an
 * embedded nor a separate spec, the defaults. */
#include <string.h>

#include "front.h"
#include "../base/json.h"

/* the source of one input: its text, or its file read */
static const fp_src *input_src(fp_arena *a, fp_diag *d, const char *path, const char *text, const char *dflt) {
  fp_src *src = fpi_alloc(a, sizeof *src);
  if (!text) return fpi_src_read(a, d, path, src) ? src : NULL;
  src->path = path ? path : dflt;
  src->len = strlen(text);
  src->text = fpi_strndup(a, text, src->len);
  return src;
}

bool fpi_inputs_load_text(fp_arena *a, fp_diag *d, const char *model_path, const char *model_text,
                         const char *spec_path, const char *spec_text, const struct fpi_plugins *plugins,
                         fp_model *m, fp_spec *s) {
  const fp_jv *embedded = NULL;
  const fp_src *msrc = input_src(a, d, model_path, model_text, "<model>"), *ssrc;
  bool ok = false, have_spec = spec_path || spec_text;
  if (!msrc || !fpi_model_load_src(a, d, msrc, m, &embedded, &msrc)) goto done;
  if (have_spec && embedded) {
    fpi_diag_json(d, msrc, "/spec", "the model file embeds a spec, and --spec names another; use one");
    goto done;
  }
  if (have_spec)
    ok = (ssrc = input_src(a, d, spec_path, spec_text, "<spec>")) && fpi_spec_load_src_with(a, d, ssrc, plugins, s);
  else
    ok = fpi_spec_parse_with(a, d, embedded ? msrc : NULL, embedded, embedded ? "/spec" : "", plugins, s);
done:
  return ok;
}

bool fpi_inputs_load(fp_arena *a, fp_diag *d, const char *model_path, const char *spec_path, fp_model *m,
                    fp_spec *s) {
  return fpi_inputs_load_text(a, d, model_path, NULL, spec_path, NULL, NULL, m, s);
}
