/* inputs.c - what `flexplan compile MODEL [--spec SPEC]` reads: a model file
 * (maybe embedding its spec) and an optional separate spec; with neither an
 * embedded nor a separate spec, the defaults. */
#include "front.h"
#include "json.h"

bool fp_inputs_load(fp_arena *a, fp_diag *d, const char *model_path, const char *spec_path, fp_model *m,
                    fp_spec *s) {
  struct json_object *embedded = NULL;
  const fp_src *msrc = NULL;
  bool ok = false;
  if (!fp_model_load(a, d, model_path, m, &embedded, &msrc)) goto done;
  if (spec_path && embedded) {
    fp_diag_json(d, msrc, "/spec", "the model file embeds a spec, and --spec names another; use one");
    goto done;
  }
  if (spec_path)
    ok = fp_spec_load(a, d, spec_path, s);
  else
    ok = fp_spec_parse(a, d, embedded ? msrc : NULL, embedded, embedded ? "/spec" : "", s);
done:
  if (embedded) json_object_put(embedded);
  return ok;
}
