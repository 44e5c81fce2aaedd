/* compile_util.h - compiling a plan in an executor test from a model file
 * and a spec file whose mesh.world_size the test sets (and ranks_per_node
 * capped at it), shared by the MPI tests that compile their own plans
 * (test_reshard, test_exec_mxfp8, test_fp8_gather, test_xfer_nccl).
 * Include after exec_util.h (EXPECT); link json-c. */
#ifndef FP_COMPILE_UTIL_H
#define FP_COMPILE_UTIL_H

#include <json-c/json.h>

#include "flexplan_compile.h"

/* the plan of model for spec at world ranks; NULL after a failed EXPECT */
static fp_plan *tu_compile(const char *model, const char *spec, int world) {
  json_object *s = json_object_from_file(spec), *mesh, *rpn;
  EXPECT(s && json_object_object_get_ex(s, "mesh", &mesh), "%s: no spec with a mesh", spec);
  if (!s || !json_object_object_get_ex(s, "mesh", &mesh)) {
    json_object_put(s);
    return NULL;
  }
  json_object_object_add(mesh, "world_size", json_object_new_int(world));
  if (json_object_object_get_ex(mesh, "ranks_per_node", &rpn) && json_object_get_int(rpn) > world)
    json_object_object_add(mesh, "ranks_per_node", json_object_new_int(world));
  fp_compile_options o = {.model_path = model, .spec_text = json_object_to_json_string(s)};
  fp_plan *p = NULL;
  fp_status st = fp_plan_compile(&o, &p);
  EXPECT(st == FP_OK, "compile %s for %d ranks: %s", spec, world, p ? fp_plan_errmsg(p) : "?");
  json_object_put(s);
  if (st != FP_OK) fp_plan_free(p);
  return st == FP_OK ? p : NULL;
}

#endif
