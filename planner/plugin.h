/* plugin.h - the placement plug-in contract inside the planner, and the
 * compile-time check every placement's layout passes through.
 *
 * A placement says, for one param, which elements of the flattened param
 * each rank of the shard group holds (its pieces), the alignment it claims
 * for them, the collective that unshards it and the reduction of its
 * gradient. The four built-in placements give their pieces from their own
 * layout (planner/placements/); a plug-in registered by name through the
 * public API (include/flexplan_compile.h, fp_placement_set; api/plugins.c
 * adapts its table to the one here) gives them through callbacks. Either
 * way planner/placements/plugin.c checks the pieces (every element held
 * exactly once - or, for a placement that unshards with "none", wholly by
 * every rank - inside the param, on the claimed alignment) and a plug-in's
 * checked layout is then expressed as the built-in placement the IR can
 * lower (shard on a dim, ragged runs, owned, replicate), so every placement
 * goes down one lowering. Kept free of include/ (planner/ stands on ir/
 * and base/ only): the enums match the public ones value for value. */
#ifndef FP_PLUGIN_H
#define FP_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* the unshard collectives of the IR's menu (= fp_unshard) */
typedef enum { FPI_UNSHARD_ALL_GATHER, FPI_UNSHARD_ALL_GATHER_V, FPI_UNSHARD_BROADCAST, FPI_UNSHARD_NONE, FPI_NUNSHARD } fpi_unshard;
/* the gradient reductions (= fp_reduce) */
typedef enum { FPI_REDUCE_REDUCE_SCATTER, FPI_REDUCE_REDUCE_SCATTER_V, FPI_REDUCE_TO_OWNER, FPI_REDUCE_ALL_REDUCE, FPI_NREDUCE } fpi_reduce;
extern const char *const fpi_unshard_names[FPI_NUNSHARD];
extern const char *const fpi_reduce_names[FPI_NREDUCE];

/* a run of elements of the flattened (row-major) param (= fp_piece) */
typedef struct fpi_piece {
  int64_t begin, count;
} fpi_piece;

/* what a placement is told of a param (= fp_placement_param) */
typedef struct fpi_pl_param {
  const char *name;        /* the param's name */
  const char *module;      /* its module's name */
  int ndim;
  const int64_t *shape;    /* ndim sizes (the tp-local shape under tensor parallelism) */
  int64_t numel;
  int64_t group_size;      /* ranks of the shard group the pieces are spread over */
  int64_t elem_bytes;      /* bytes of one element of its main weights */
} fpi_pl_param;

/* what a placement says of a param besides its pieces (= fp_placement_layout) */
typedef struct fpi_pl_layout {
  int64_t align_elems;     /* every piece begins on a multiple and is a multiple long (but one that
                            * ends the param) */
  int unshard;             /* fpi_unshard */
  int reduce;              /* fpi_reduce */
} fpi_pl_layout;

/* one registered plug-in (the callbacks are api/plugins.c's adapters over
 * the user's table). Both return false with a message in err (NUL-ended,
 * at most errcap bytes) when the plug-in refuses the param. */
typedef struct fpi_plugin {
  const char *name;
  void *ctx;
  bool (*describe)(void *ctx, const fpi_pl_param *p, fpi_pl_layout *out, char *err, size_t errcap);
  /* rank g's pieces, in the order its shard stores them: at most cap into
   * out, how many there are in *n (called again with room for *n when
   * *n > cap) */
  bool (*pieces)(void *ctx, const fpi_pl_param *p, int64_t g, fpi_piece *out, int64_t cap, int64_t *n, char *err,
                 size_t errcap);
} fpi_plugin;

typedef struct fpi_plugins {
  const fpi_plugin *v;
  int n;
} fpi_plugins;

/* the plug-in named name, or NULL */
const fpi_plugin *fpi_plugin_find(const fpi_plugins *s, const char *name);
/* a name a plug-in may be registered under: [a-z][a-z0-9_]*, at most
 * FPI_PLUGIN_MAX_NAME characters */
#define FPI_PLUGIN_MAX_NAME 63
bool fpi_plugin_name_ok(const char *name);

struct fp_layout;
struct fp_lparam;
/* a plug-in param: ask the plug-in for its layout, check it, and express
 * it as the built-in placement that lowers it (p->pl replaced by a spec of
 * that kind, p->impl set); false after a located error naming the plug-in */
bool fpi_plugin_resolve(struct fp_layout *L, struct fp_lparam *p);
/* every param of the built layout (built-in placements and resolved
 * plug-ins alike): its pieces checked against what its placement claims;
 * false after a located error naming the placement */
bool fpi_layout_check_pieces(struct fp_layout *L);

#endif
