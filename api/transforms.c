/* transforms.c - the public reshard transform set (include/flexplan.h,
 * fp_transform_set_*, fp_xfer_bind_transforms): the transforms a program
 * registers by name before compiling a transfer, adapted to the form the
 * planner and the executors call (ir/xfer.h fpi_xform). The set is the
 * caller's (malloc'd, no global state). The built-in names (MXFP8) are not
 * a set's: the executor binds them itself. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_impl.h"
#include "flexplan.h"
#include "ir/handle.h"
#include "ir/xfer.h"

#define MAX_NAME 63

typedef struct entry {
  char name[MAX_NAME + 1];
  fp_reshard_transform tab;
  void *user;
  fpi_xform xf;
} entry;

struct fp_transform_set {
  entry **v;              /* one allocation per entry: transfers keep pointers to them */
  const fpi_xform **view; /* the planner's list, rebuilt on every add */
  int n;
  fpi_xforms list;
  char msg[256];
};

_Static_assert(sizeof(fp_wire_tensor) == sizeof(fp_tx_wire), "fp_wire_tensor is fp_tx_wire");
_Static_assert(FP_TRANSFORM_MAX_WIRES == FP_TX_MAX_WIRES, "one wire limit");
_Static_assert((int)FP_ELEM_E8M0 == (int)FP_E8M0 && (int)FP_ELEM_U8 == (int)FP_U8, "fp_elem is fp_dtype");

static fp_status fail(fp_transform_set *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static fp_status fail(fp_transform_set *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->msg, sizeof s->msg, fmt, ap);
  va_end(ap);
  return FP_ERR_ARG;
}

static fp_transform_param pub(const fpi_xf_param *p) {
  return (fp_transform_param){p->name, p->numel, (fp_elem)p->from, (fp_elem)p->to};
}

static bool do_should(void *ctx, const fpi_xf_param *p) {
  const entry *e = ctx;
  fp_transform_param pp = pub(p);
  return e->tab.should_transform(e->user, &pp) != 0;
}

static bool do_wires(void *ctx, bool recv, const fpi_xf_param *p, int64_t begin, int64_t count, fp_tx_wire *out,
                     int *n, char *err, size_t errcap) {
  const entry *e = ctx;
  fp_transform_param pp = pub(p);
  err[0] = 0;
  *n = 0;
  fp_status st = (recv ? e->tab.recv_wires : e->tab.send_wires)(e->user, &pp, begin, count, (fp_wire_tensor *)out, n,
                                                                 err, errcap);
  return st == FP_OK;
}

static bool do_send(void *ctx, const fpi_xf_param *p, int64_t begin, int64_t count, const void *src,
                    void *const *wires, char *err, size_t errcap) {
  const entry *e = ctx;
  fp_transform_param pp = pub(p);
  err[0] = 0;
  return e->tab.prepare_send(e->user, &pp, begin, count, src, wires, err, errcap) == FP_OK;
}

static bool do_finalize(void *ctx, const fpi_xf_param *p, int64_t begin, int64_t count, const void *const *wires,
                        void *dst, char *err, size_t errcap) {
  const entry *e = ctx;
  fp_transform_param pp = pub(p);
  err[0] = 0;
  return e->tab.finalize_recv(e->user, &pp, begin, count, wires, dst, err, errcap) == FP_OK;
}

fp_status fp_transform_set_create(fp_transform_set **out) {
  if (!out) return FP_ERR_ARG;
  *out = calloc(1, sizeof **out);
  return *out ? FP_OK : FP_ERR_NOMEM;
}

static bool name_ok(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > MAX_NAME || name[0] < 'a' || name[0] > 'z') return false;
  for (size_t k = 0; k < n; k++)
    if (!((name[k] >= 'a' && name[k] <= 'z') || (name[k] >= '0' && name[k] <= '9') || name[k] == '_')) return false;
  return true;
}

fp_status fp_transform_set_add(fp_transform_set *s, const char *name, const fp_reshard_transform *tr, void *user) {
  if (!s) return FP_ERR_ARG;
  s->msg[0] = 0;
  if (!name || !tr) return fail(s, "fp_transform_set_add: the name or the transform is NULL");
  if (!tr->should_transform || !tr->send_wires || !tr->recv_wires || !tr->prepare_send || !tr->finalize_recv)
    return fail(s, "fp_transform_set_add: transform '%.80s' lacks one of should_transform, send_wires, recv_wires, "
                "prepare_send, finalize_recv", name);
  if (!name_ok(name))
    return fail(s, "fp_transform_set_add: '%.80s' is not a transform name ([a-z][a-z0-9_]*, at most %d characters)",
                name, MAX_NAME);
  if (fpi_xf_builtin_mode(name) >= 0)
    return fail(s, "fp_transform_set_add: '%s' is a built-in transform's name (%s)", name, FPI_XF_BUILTIN_NAMES);
  for (int k = 0; k < s->n; k++)
    if (!strcmp(s->v[k]->name, name)) return fail(s, "fp_transform_set_add: '%s' is already registered", name);
  if (s->n == 255) return fail(s, "fp_transform_set_add: a set holds at most 255 transforms");
  entry *e = calloc(1, sizeof *e);
  entry **v = realloc(s->v, (size_t)(s->n + 1) * sizeof *v);
  const fpi_xform **view = realloc(s->view, (size_t)(s->n + 1) * sizeof *view);
  if (v) s->v = v;
  if (view) s->view = view;
  if (!e || !v || !view) {
    free(e);
    return FP_ERR_NOMEM;
  }
  memcpy(e->name, name, strlen(name) + 1);
  e->tab = *tr;
  e->user = user;
  e->xf = (fpi_xform){e->name, e, do_should, do_wires, do_send, do_finalize};
  s->v[s->n] = e;
  s->view[s->n] = &e->xf;
  s->n++;
  s->list = (fpi_xforms){s->view, s->n};
  return FP_OK;
}

const char *fp_transform_set_errmsg(const fp_transform_set *s) { return s ? s->msg : "fp_transform_set is NULL"; }

void fp_transform_set_free(fp_transform_set *s) {
  if (!s) return;
  for (int k = 0; k < s->n; k++) free(s->v[k]);
  free(s->v);
  free(s->view);
  free(s);
}

const fpi_xforms *fpa_transforms(const fp_transform_set *s) { return s && s->n ? &s->list : NULL; }

fp_status fp_xfer_bind_transforms(fp_xfer *t, const fp_transform_set *s) {
  if (!t || !t->tx) return FP_ERR_ARG;
  const fp_tx *tx = t->tx;
  if (tx->nxf == 0) return FP_OK;
  const fpi_xform **b = fpi_alloc_array(t->arena, (size_t)tx->nxf, sizeof *b);
  for (int32_t k = 0; k < tx->nxf; k++) {
    if (fpi_xf_builtin_mode(tx->xf_names[k]) >= 0) continue; /* the executor's own (executor/xfer_mxfp8.c) */
    for (int j = 0; s && j < s->n && !b[k]; j++)
      if (!strcmp(s->v[j]->name, tx->xf_names[k])) b[k] = &s->v[j]->xf;
    if (!b[k]) {
      char m[200];
      snprintf(m, sizeof m, "fp_xfer_bind_transforms: the transfer names transform '%.80s', which the set lacks",
               tx->xf_names[k]);
      char *c = strdup(m);
      if (c) free(t->msg), t->msg = c;
      return FP_ERR_ARG;
    }
  }
  t->xf = b;
  return FP_OK;
}
