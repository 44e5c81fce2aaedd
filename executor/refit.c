/* refit.c - fp_exec_load_weights: new weights from safetensors files,
 * written into the arena's existing addresses.
 *
 * Four phases, so a refit that fails changes nothing, on any rank:
 *  1. validate: every param of the plan is found exactly once across the
 *     files, with its exact shape and a float dtype (F32, BF16, F16);
 *  2. read: each rank reads only what it stores - the runs of its
 *     main-weight shard (fp_extent), or the whole tensor where the plan keeps
 *     the compute weight unsharded between steps - into one staging buffer;
 *  3. agree: every rank says whether 1 and 2 succeeded (the backend's
 *     all_reduce_f64); if any failed, every rank fails and none writes;
 *  4. write: convert on the host (the reference kernels) into the main
 *     dtype (file dtype -> main dtype, round to nearest even) and the
 *     persistent compute weights from the new main weights (main dtype ->
 *     param dtype), as the plan's own post-optimizer refresh would, and
 *     hand the bytes to the backend, which copies them into the arena (a
 *     memcpy on MPI, a copy to the GPU on NCCL; backend_impl.h `write`).
 *     An MXFP8 param (frozen, replicated, one copy: main = weight, e4m3,
 *     plus its e8m0 `scales` view) is read whole, widened to fp32 and
 *     quantized by fpk_quantize_mxfp8 (32-element blocks of the flat
 *     param); the backend writes the elements once and the scales.
 * Nothing is reallocated: the views, and any CUDA graph captured over them,
 * stay valid. Transient compute weights are gathered from the new shards by
 * the next step's hooks. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "executor/safetensors.h"
#include "kernels/kernels.h"

typedef struct src {      /* where one param comes from */
  fp_st_file *f;
  int file;
  const fp_st_tensor *t;
  bool full;              /* read the whole tensor (persistent compute weight) */
  bool mx;                /* an MXFP8 param: quantized into its elements and scales */
  int64_t staged;         /* byte offset of its data in the staging buffer */
} src;

static bool float_dtype(fp_dtype t) { return t == FP_F32 || t == FP_BF16 || t == FP_F16; }

static fp_status validate(fp_exec *x, fp_st_file **files, const char *const *paths, int npaths, src *srcs,
                          int64_t *staging, int64_t *widest, int64_t *outmax) {
  const fp_prog *p = x->prog;
  *staging = *widest = *outmax = 0;
  for (int32_t i = 0; i < p->nparams; i++) {
    const fp_xparam *xp = &x->params[i];
    const fp_param_view *v = &xp->v;
    src *s = &srcs[i];
    for (int k = 0; k < npaths; k++) {
      const fp_st_tensor *t = fpi_st_find(files[k], v->name);
      if (!t) continue;
      if (s->t)
        return fpx_fail(x, FP_ERR_WEIGHTS, "refit: param '%s' is in both %s and %s", v->name, paths[s->file], paths[k]);
      *s = (src){files[k], k, t, false, false, 0};
    }
    if (!s->t) return fpx_fail(x, FP_ERR_WEIGHTS, "refit: param '%s' is in none of the %d file(s)", v->name, npaths);
    const fp_st_tensor *t = s->t;
    bool shape_ok = t->ndim == v->ndim;
    for (int k = 0; shape_ok && k < v->ndim; k++) shape_ok = t->shape[k] == v->shape[k];
    if (!shape_ok) {
      char want[160], got[160];
      int a = 0, b = 0;
      for (int k = 0; k < v->ndim && a < (int)sizeof want - 24; k++)
        a += snprintf(want + a, sizeof want - (size_t)a, "%s%" PRId64, k ? "," : "", v->shape[k]);
      for (int k = 0; k < t->ndim && k < 8 && b < (int)sizeof got - 24; k++)
        b += snprintf(got + b, sizeof got - (size_t)b, "%s%" PRId64, k ? "," : "", t->shape[k]);
      want[a] = got[b] = 0;
      return fpx_fail(x, FP_ERR_WEIGHTS, "refit: %s: param '%s' has shape [%s] in the file, the plan says [%s]",
                      paths[s->file], v->name, got, want);
    }
    if (!float_dtype(t->dtype))
      return fpx_fail(x, FP_ERR_WEIGHTS, "refit: %s: param '%s' is %s in the file; weights load from F32, BF16 or F16",
                      paths[s->file], v->name, fpi_dtype_name(t->dtype));
    int64_t fsz = fpi_dtype_size(t->dtype), need;
    if (t->nbytes != v->numel * fsz)
      return fpx_fail(x, FP_ERR_WEIGHTS, "refit: %s: param '%s' holds %" PRId64 " bytes, its shape needs %" PRId64,
                      paths[s->file], v->name, t->nbytes, v->numel * fsz);
    /* MXFP8 weights are persistent and unsharded (the plan verified it): the
     * whole tensor, since every block's scale needs the block's 32 values */
    s->mx = v->scales.data != NULL;
    s->full = xp->weight_persistent || s->mx;
    need = (s->full ? v->numel : fp_extent_elems(&v->shard)) * fsz;
    s->staged = *staging;
    *staging += (need + 15) / 16 * 16;
    if (s->full && v->numel * 4 > *widest) *widest = v->numel * 4;
    /* the converted bytes of one param, before the backend copies them
     * (MXFP8: the e4m3 elements, then the scales) */
    int64_t o = fp_extent_elems(&v->shard) * fpi_dtype_size(p->params[i].main_dtype);
    if (s->full && v->numel * fpi_dtype_size(p->params[i].param_dtype) > o)
      o = v->numel * fpi_dtype_size(p->params[i].param_dtype);
    if (s->mx) o = v->numel + v->scales.numel;
    if (o > *outmax) *outmax = o;
  }
  return FP_OK;
}

static fp_status read_all(fp_exec *x, const src *srcs, char *stage, const char *const *paths, int64_t *read) {
  char err[512];
  for (int32_t i = 0; i < x->prog->nparams; i++) {
    const src *s = &srcs[i];
    const fp_extent *e = &x->params[i].v.shard;
    int64_t fsz = fpi_dtype_size(s->t->dtype);
    bool ok = true;
    if (s->full) {
      ok = fpi_st_read(s->f, s->t, 0, stage + s->staged, s->t->nbytes, err, sizeof err);
      *read += s->t->nbytes;
    } else {
      for (int64_t k = 0; ok && k < e->runs; k++)
        ok = fpi_st_read(s->f, s->t, (e->full_off + k * e->full_stride) * fsz, stage + s->staged + k * e->len * fsz,
                        fpx_extent_run(e, k) * fsz, err, sizeof err);
      *read += fp_extent_elems(e) * fsz;
    }
    if (!ok) return fpx_fail(x, FP_ERR_WEIGHTS, "refit: %s: param '%s': %s", paths[s->file], s->t->name, err);
  }
  return FP_OK;
}

/* convert each param into `out` (host), then have the backend write it:
 * the main shard's runs (one strided copy), the persistent compute weight */
static fp_status write_all(fp_exec *x, const src *srcs, const char *stage, char *wide, char *out) {
  const fp_prog *p = x->prog;
  for (int32_t i = 0; i < p->nparams; i++) {
    const src *s = &srcs[i];
    const fp_param_view *v = &x->params[i].v;
    const fp_ir_param *q = &p->params[i];
    const fp_extent *e = &v->shard;
    fp_dtype fdt = s->t->dtype;
    int64_t fsz = fpi_dtype_size(fdt), msz = fpi_dtype_size(q->main_dtype), psz = fpi_dtype_size(q->param_dtype);
    const char *data = stage + s->staged;
    if (s->mx) { /* e4m3 elements and e8m0 scales of the whole param; main and weight are these bytes */
      uint8_t *elems = (uint8_t *)out, *scales = elems + v->numel;
      fpk_cast(wide, FP_F32, data, fdt, v->numel);
      fpk_quantize_mxfp8(elems, scales, wide, FP_F32, v->numel);
      FPX_CHECK(x->bk->write(x, (char *)v->main.data, 0, out, 0, v->numel, 1));
      if (v->weight.data && v->weight.data != v->main.data) /* one copy in a verified plan */
        FPX_CHECK(x->bk->write(x, (char *)v->weight.data, 0, out, 0, v->numel, 1));
      FPX_CHECK(x->bk->write(x, (char *)v->scales.data, 0, (const char *)scales, 0, v->scales.numel, 1));
      continue;
    }
    for (int64_t k = 0; k < e->runs; k++) {
      const char *from = s->full ? data + (e->full_off + k * e->full_stride) * fsz : data + k * e->len * fsz;
      fpk_cast(out + k * e->len * msz, q->main_dtype, from, fdt, fpx_extent_run(e, k));
    }
    /* the runs of len elements as one strided write, a short last run alone */
    int64_t whole = e->runs > 0 && e->last_len < e->len ? e->runs - 1 : e->runs;
    if (whole > 0)
      FPX_CHECK(x->bk->write(x, (char *)v->main.data, e->shard_stride * msz, out, e->len * msz, e->len * msz, whole));
    if (whole < e->runs)
      FPX_CHECK(x->bk->write(x, (char *)v->main.data + whole * e->shard_stride * msz, 0, out + whole * e->len * msz, 0,
                             e->last_len * msz, 1));
    if (s->full && v->weight.data) { /* compute weight = cast(main weight), whole param */
      fpk_cast(wide, q->main_dtype, data, fdt, v->numel);
      fpk_cast(out, q->param_dtype, wide, q->main_dtype, v->numel);
      FPX_CHECK(x->bk->write(x, (char *)v->weight.data, 0, out, 0, v->numel * psz, 1));
    }
  }
  return FP_OK;
}

/* Every rank's verdict before any rank writes: a refit that fails on one
 * rank (a missing file, a bad tensor) must not leave the others on new
 * weights. Every rank joins, whatever happened locally; the rank that failed
 * keeps its own message, the others name it. */
static fp_status agree_refit(fp_exec *x, fp_status local) {
  if (!x->bk->all_reduce_f64 || x->world == 1) return local; /* a backend of one's own (tests) */
  double v[2] = {local != FP_OK, local != FP_OK ? (double)x->rank : 0};
  fp_exec_stats keep = x->stats; /* the vote is not the trainer's communication */
  char why[FPX_MSG_CAP];
  snprintf(why, sizeof why, "%s", x->msg); /* this rank's own failure, if any */
  fp_status st = x->bk->all_reduce_f64(x, v, 2);
  x->stats.collectives = keep.collectives, x->stats.bytes_moved = keep.bytes_moved;
  if (st != FP_OK) {
    if (st == FP_ERR_BACKEND || st == FP_ERR_TIMEOUT) x->broken = true;
    if (local == FP_OK) return st;
    char agree[FPX_MSG_CAP];
    snprintf(agree, sizeof agree, "%s", x->msg);
    return fpx_fail(x, local, "%.1000s (and the ranks' agreement failed: %.1000s)", why, agree);
  }
  if (local != FP_OK) return local;
  if (v[0] == 1)
    return fpx_fail(x, FP_ERR_WEIGHTS, "refit: rank %.0f could not load the weights (its message says why); no rank "
                    "changed its weights", v[1]);
  if (v[0] > 1)
    return fpx_fail(x, FP_ERR_WEIGHTS, "refit: %.0f ranks could not load the weights (their messages say why); no "
                    "rank changed its weights", v[0]);
  return FP_OK;
}

fp_status fp_exec_load_weights(fp_exec *x, const char *const *paths, int npaths) {
  if (!x) return FP_ERR_ARG;
  if (!x->created) return fpx_fail(x, FP_ERR_ARG, "the executor was not created successfully");
  if (x->broken) return FP_ERR_BACKEND;
  fp_status st = FP_OK;
  fp_st_file **files = NULL;
  src *srcs = NULL;
  char *stage = NULL, *wide = NULL, *out = NULL;
  int64_t staging, widest, outmax, read = 0;
  if (npaths < 1 || !paths) {
    st = fpx_fail(x, FP_ERR_ARG, "refit: no files given");
    goto vote;
  }
  if (x->cursor != 0) {
    char want[160];
    st = fpx_fail(x, FP_ERR_ORDER, "refit: load weights between steps; the plan expects %s next",
                  fpx_seg_label(x, x->cursor, want, sizeof want));
    goto vote;
  }
  files = fpx_alloc(x, (size_t)npaths, sizeof *files);
  srcs = fpx_alloc(x, (size_t)x->prog->nparams, sizeof *srcs);
  if (!files || !srcs) {
    st = fpx_fail(x, FP_ERR_NOMEM, "refit: out of memory");
    goto vote;
  }
  for (int k = 0; k < npaths; k++) {
    char err[512];
    if (!paths[k]) {
      st = fpx_fail(x, FP_ERR_ARG, "refit: path %d is NULL", k);
      goto vote;
    }
    files[k] = fpi_st_open(paths[k], err, sizeof err);
    if (!files[k]) {
      st = fpx_fail(x, FP_ERR_WEIGHTS, "refit: %s", err);
      goto vote;
    }
  }
  FPX_CHECK_GOTO(validate(x, files, paths, npaths, srcs, &staging, &widest, &outmax), st, vote);
  stage = fpx_alloc(x, (size_t)staging, 1);
  wide = fpx_alloc(x, (size_t)widest, 1);
  out = fpx_alloc(x, (size_t)outmax, 1);
  if (!stage || !wide || !out) {
    st = fpx_fail(x, FP_ERR_NOMEM, "refit: cannot allocate %" PRId64 " bytes of staging", staging + widest + outmax);
    goto vote;
  }
  st = read_all(x, srcs, stage, paths, &read);
vote:
  st = agree_refit(x, st);
  if (st != FP_OK) goto fail;
  /* nothing in flight may read the main weights while they change */
  st = x->bk->sync(x);
  if (st != FP_OK) {
    if (st == FP_ERR_BACKEND || st == FP_ERR_TIMEOUT) x->broken = true;
    goto fail;
  }
  st = write_all(x, srcs, stage, wide, out);
  if (st != FP_OK) { /* the backend failed half way: the arena is no longer what any plan state says */
    x->broken = true;
    goto fail;
  }
  x->stats.refits++;
  x->stats.refit_bytes_read = read;
fail:
  if (files)
    for (int k = 0; k < npaths; k++)
      if (files[k]) fpi_st_close(files[k]);
  fpx_free(files);
  fpx_free(srcs);
  fpx_free(stage);
  fpx_free(wide);
  fpx_free(out);
  return st;
}
