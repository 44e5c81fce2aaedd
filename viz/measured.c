/* measured.c - reading a measured-timing record ("flexplan.timing.v1",
 * written by the executor's fp_exec_timing_write) against the plan it was
 * recorded for, so the viewers can draw the measured step beside the
 * modeled one (docs/viz.md, "Measured beside modeled").
 *
 * The file is read strictly (base/json.h): every member checked, every
 * error located ("t.json:3:17: error: /steps/0/ops/5/0: ..."). Its plan hash
 * must be the plan's, its rank inside the plan's world, its hooks and ops
 * numbered inside the plan. The last step of the file is taken: step 0 pays
 * for warm-up (first touches of the arena, MPI's lazy connections), later
 * steps are the steady state the simulator models. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "../base/json.h"
#include "viz.h"

static bool num_v(fp_jctx *c, const fp_jv *v, const char *ptr, double *out) {
  if (!fpi_jv_is(v, FP_JDOUBLE) && !fpi_jv_is(v, FP_JINT))
    return fpi_j_error(c, ptr, "expected a number of microseconds, got %s", fpi_j_describe(c->a, v));
  double t = fpi_jv_num(v);
  if (!isfinite(t) || t < 0 || t > 1e15)
    return fpi_j_error(c, ptr, "expected microseconds from the step's start (0 .. 1e15), got %s",
                      fpi_j_describe(c->a, v));
  *out = t;
  return true;
}

/* [index, start, end] with index in [0, n) and start <= end */
static bool triple(fp_jctx *c, const fp_jv *v, const char *ptr, int32_t n, const char *what, int32_t *idx,
                   double *t0, double *t1) {
  if (!fpi_j_is_array(c, v, ptr)) return false;
  if (fpi_jv_len(v) != 3)
    return fpi_j_error(c, ptr, "expected [%s, start, end], got %zu elements", what, fpi_jv_len(v));
  int64_t i;
  if (!fpi_j_int_v(c, fpi_jv_at(v, 0), fpi_ptr_idx(c->a, ptr, 0), 0, n - 1, &i)) return false;
  if (!num_v(c, fpi_jv_at(v, 1), fpi_ptr_idx(c->a, ptr, 1), t0) ||
      !num_v(c, fpi_jv_at(v, 2), fpi_ptr_idx(c->a, ptr, 2), t1))
    return false;
  if (*t1 < *t0) return fpi_j_error(c, ptr, "ends (%.3f us) before it starts (%.3f us)", *t1, *t0);
  *idx = (int32_t)i;
  return true;
}

bool fpi_viz_measured_read(fp_arena *a, fp_diag *d, const char *path, const fp_prog *p, fp_viz_measured *out) {
  fp_src src;
  if (!fpi_src_read(a, d, path, &src)) return false;
  fp_jctx c = {a, d, &src, NULL};
  const fp_jv *root = fpi_json_parse(&c);
  if (!root) return false;
  bool ok = false;
  static const char *const keys[] = {"format", "plan_hash", "model", "rank", "world_size", "backend", "progress",
                                     "clock", "unit", "origin", "steps", NULL};
  const char *format, *hash;
  int64_t rank, world;
  const fp_jv *steps;
  size_t nsteps;
  if (!fpi_j_is_object(&c, root, "") || !fpi_j_str(&c, root, "", "format", true, &format)) goto done;
  if (strcmp(format, "flexplan.timing.v1")) { /* before the members: another kind of file says so first */
    fpi_j_error(&c, "/format", "expected \"flexplan.timing.v1\" (a record from fp_exec_timing_write), got \"%s\"", format);
    goto done;
  }
  if (!fpi_j_keys(&c, root, "", keys)) goto done;
  char want[32];
  snprintf(want, sizeof want, "fnv1a64:%016" PRIx64, fpi_prog_hash(p));
  if (!fpi_j_str(&c, root, "", "plan_hash", true, &hash)) goto done;
  if (strcmp(hash, want)) {
    fpi_j_error(&c, "/plan_hash", "the record is of another plan (%s; this plan's hash is %s)", hash, want);
    goto done;
  }
  if (!fpi_j_int(&c, root, "", "world_size", true, 1, p->world_size, &world)) goto done;
  if (world != p->world_size) {
    fpi_j_error(&c, "/world_size", "the plan's world size is %" PRId64 ", not %" PRId64, p->world_size, world);
    goto done;
  }
  if (!fpi_j_int(&c, root, "", "rank", true, 0, p->world_size - 1, &rank) ||
      !fpi_j_arr(&c, root, "", "steps", true, &steps, &nsteps))
    goto done;
  if (nsteps == 0) {
    fpi_j_error(&c, "/steps", "no step was recorded");
    goto done;
  }
  /* the last step */
  const char *sp = fpi_ptr_idx(a, "/steps", (int64_t)nsteps - 1);
  const fp_jv *st = fpi_jv_at(steps, nsteps - 1), *hooks, *ops;
  static const char *const skeys[] = {"step", "hooks", "ops", NULL};
  int64_t step;
  size_t nh, no;
  if (!fpi_j_is_object(&c, st, sp) || !fpi_j_keys(&c, st, sp, skeys) ||
      !fpi_j_int(&c, st, sp, "step", true, 0, INT64_MAX, &step) || !fpi_j_arr(&c, st, sp, "hooks", true, &hooks, &nh) ||
      !fpi_j_arr(&c, st, sp, "ops", true, &ops, &no))
    goto done;
  if (nh != (size_t)p->nsegs) {
    fpi_j_error(&c, fpi_ptr_key(a, sp, "hooks"), "expected one entry per segment of the plan (%" PRId32 "), got %zu",
               p->nsegs, nh);
    goto done;
  }
  *out = (fp_viz_measured){.path = path, .rank = rank, .step = step};
  out->hook_t = fpi_alloc_array(a, (size_t)p->nsegs * 2, sizeof(double));
  out->op_t = fpi_alloc_array(a, (size_t)(p->nops > 0 ? p->nops : 1) * 2, sizeof(double));
  for (int32_t i = 0; i < p->nops * 2; i++) out->op_t[i] = -1;
  const char *hp = fpi_ptr_key(a, sp, "hooks"), *op = fpi_ptr_key(a, sp, "ops");
  for (size_t k = 0; k < nh; k++) {
    const char *ep = fpi_ptr_idx(a, hp, (int64_t)k);
    int32_t seg;
    double t0, t1;
    if (!triple(&c, fpi_jv_at(hooks, k), ep, p->nsegs, "segment", &seg, &t0, &t1)) goto done;
    if (seg != (int32_t)k) {
      fpi_j_error(&c, ep, "hooks are listed in segment order: expected segment %zu, got %" PRId32, k, seg);
      goto done;
    }
    if (k && t0 < out->hook_t[2 * k - 1]) {
      fpi_j_error(&c, ep, "segment %zu is entered (%.3f us) before segment %zu was left (%.3f us)", k, t0, k - 1,
                 out->hook_t[2 * k - 1]);
      goto done;
    }
    out->hook_t[2 * k] = t0, out->hook_t[2 * k + 1] = t1;
  }
  for (size_t k = 0; k < no; k++) {
    const char *ep = fpi_ptr_idx(a, op, (int64_t)k);
    int32_t i;
    double t0, t1;
    if (!triple(&c, fpi_jv_at(ops, k), ep, p->nops, "op", &i, &t0, &t1)) goto done;
    if (out->op_t[2 * i] >= 0) {
      fpi_j_error(&c, ep, "op %" PRId32 " is listed twice", i);
      goto done;
    }
    out->op_t[2 * i] = t0, out->op_t[2 * i + 1] = t1;
    if (t1 > out->end_us) out->end_us = t1;
  }
  if (out->hook_t[2 * nh - 1] > out->end_us) out->end_us = out->hook_t[2 * nh - 1];
  ok = true;
done:
  return ok;
}
