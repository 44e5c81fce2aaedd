/* plugins.c - the public placement plug-in set (include/flexplan_compile.h,
 * fp_placement_set_*): the plug-ins a program registers by name before
 * compiling, and their tables adapted to the planner's contract
 * (planner/plugin.h), which checks and lays out what they give. The set is
 * the caller's (malloc'd, no global state), so compiles on other threads
 * with other sets do not meet. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_impl.h"
#include "flexplan_compile.h"
#include "planner/plugin.h"

#define MAX_NAME FPI_PLUGIN_MAX_NAME

typedef struct entry {
  char name[MAX_NAME + 1];
  fp_placement_plugin tab;
  void *user;
} entry;

struct fp_placement_set {
  entry **v;          /* one allocation per entry: the planner keeps pointers to them */
  fpi_plugin *plug;   /* the planner's view, rebuilt on every add */
  int n;
  fpi_plugins view;
  char msg[256];
};

_Static_assert(sizeof(fp_piece) == sizeof(fpi_piece), "fp_piece is fpi_piece");
_Static_assert(FP_UNSHARD_NONE == (int)FPI_UNSHARD_NONE && FP_REDUCE_ALL_REDUCE == (int)FPI_REDUCE_ALL_REDUCE,
               "the public enums are the planner's");

static fp_status fail(fp_placement_set *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static fp_status fail(fp_placement_set *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->msg, sizeof s->msg, fmt, ap);
  va_end(ap);
  return FP_ERR_ARG;
}

static fp_placement_param pub(const fpi_pl_param *p) {
  return (fp_placement_param){p->name, p->module, p->ndim, p->shape, p->numel, p->group_size, p->elem_bytes};
}

static bool do_describe(void *ctx, const fpi_pl_param *p, fpi_pl_layout *out, char *err, size_t errcap) {
  const entry *e = ctx;
  fp_placement_param pp = pub(p);
  fp_placement_layout l = {1, (fp_unshard)-1, (fp_reduce)-1};
  err[0] = 0;
  if (e->tab.describe(e->user, &pp, &l, err, errcap) != FP_OK) return false;
  out->align_elems = l.align_elems;
  out->unshard = (int)l.unshard;
  out->reduce = (int)l.reduce;
  return true;
}

static bool do_pieces(void *ctx, const fpi_pl_param *p, int64_t g, fpi_piece *out, int64_t cap, int64_t *n, char *err,
                      size_t errcap) {
  const entry *e = ctx;
  fp_placement_param pp = pub(p);
  err[0] = 0;
  return e->tab.pieces(e->user, &pp, g, (fp_piece *)out, cap, n, err, errcap) == FP_OK;
}

fp_status fp_placement_set_create(fp_placement_set **out) {
  if (!out) return FP_ERR_ARG;
  *out = calloc(1, sizeof **out);
  return *out ? FP_OK : FP_ERR_NOMEM;
}

fp_status fp_placement_set_add(fp_placement_set *s, const char *name, const fp_placement_plugin *plugin, void *user) {
  if (!s) return FP_ERR_ARG;
  s->msg[0] = 0;
  if (!name || !plugin) return fail(s, "fp_placement_set_add: the name or the plug-in is NULL");
  if (!plugin->describe || !plugin->pieces)
    return fail(s, "fp_placement_set_add: plug-in '%s' lacks describe or pieces", name);
  if (!fpi_plugin_name_ok(name))
    return fail(s, "fp_placement_set_add: '%.80s' is not a plug-in name ([a-z][a-z0-9_]*, at most %d characters)",
                name, MAX_NAME);
  static const char *const builtin[] = {"shard", "ragged_shard", "owned", "replicate"};
  for (size_t k = 0; k < sizeof builtin / sizeof *builtin; k++)
    if (!strcmp(name, builtin[k])) return fail(s, "fp_placement_set_add: '%s' is a built-in placement kind", name);
  for (int k = 0; k < s->n; k++)
    if (!strcmp(s->v[k]->name, name)) return fail(s, "fp_placement_set_add: '%s' is already registered", name);
  entry *e = calloc(1, sizeof *e);
  entry **v = realloc(s->v, (size_t)(s->n + 1) * sizeof *v);
  fpi_plugin *plug = realloc(s->plug, (size_t)(s->n + 1) * sizeof *plug);
  if (v) s->v = v;
  if (plug) s->plug = plug;
  if (!e || !v || !plug) {
    free(e);
    return FP_ERR_NOMEM;
  }
  memcpy(e->name, name, strlen(name) + 1);
  e->tab = *plugin;
  e->user = user;
  s->v[s->n] = e;
  s->plug[s->n] = (fpi_plugin){e->name, e, do_describe, do_pieces};
  s->n++;
  s->view = (fpi_plugins){s->plug, s->n};
  return FP_OK;
}

const char *fp_placement_set_errmsg(const fp_placement_set *s) { return s ? s->msg : "fp_placement_set is NULL"; }

void fp_placement_set_free(fp_placement_set *s) {
  if (!s) return;
  for (int k = 0; k < s->n; k++) free(s->v[k]);
  free(s->v);
  free(s->plug);
  free(s);
}

const fpi_plugins *fpa_placement_plugins(const fp_placement_set *s) { return s && s->n ? &s->view : NULL; }
