/* fp_frontcheck - run only the front end (parse + validate) over one file, for
 * the schema agreement test (tests/schema_agree.py), independent of the CLI.
 *
 *   fp_frontcheck model FILE   a bare model.json
 *   fp_frontcheck spec FILE    a bare spec.json
 *   fp_frontcheck input FILE   {"model": ..., "spec": ...} (spec optional) or a
 *                              bare model, as `flexplan check FILE` reads it
 *
 * Exit 0 when the C front end accepts the file, 1 when it reports an error
 * (printed to stderr), 2 on usage errors. */
#include <string.h>

#include "planner/front.h"
#include "base/json.h"

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "model") && strcmp(argv[1], "spec") && strcmp(argv[1], "input"))) {
    fprintf(stderr, "usage: fp_frontcheck model|spec|input FILE\n");
    return 2;
  }
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  bool ok = false;
  fp_model m;
  fp_spec s;
  if (!strcmp(argv[1], "spec")) {
    ok = fpi_spec_load(a, &d, argv[2], &s);
  } else if (!strcmp(argv[1], "model")) {
    fp_src src;
    if (fpi_src_read(a, &d, argv[2], &src)) {
      fp_jctx c = {a, &d, &src, NULL};
      const fp_jv *root = fpi_json_parse(&c);
      ok = root && fpi_model_parse(a, &d, &src, root, "", &m);
    }
  } else {
    ok = fpi_inputs_load(a, &d, argv[2], NULL, &m, &s);
  }
  fpi_diag_free(&d);
  fpi_arena_free(a);
  return ok ? 0 : 1;
}
