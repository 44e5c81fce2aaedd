/* placements.c - the example placement plug-ins of examples/placements.h:
 * block-cyclic rows and expert-owned params, on the public contract only.
 * Each says its pieces of a param for one rank; the compiler checks them
 * (every element once, inside the param, on the claimed alignment) and lays
 * them out, so a mistake here is a located compile error, never a plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placements.h"

/* ---- block_cyclic ----------------------------------------------------------------- */
static fp_status bc_describe(void *user, const fp_placement_param *p, fp_placement_layout *out, char *err,
                             size_t errcap) {
  const ex_block_cyclic *bc = user;
  if (bc->block < 1) {
    snprintf(err, errcap, "block_cyclic: block %lld is not a positive row count", (long long)bc->block);
    return FP_ERR_ARG;
  }
  (void)p;
  int64_t inner = 1;
  for (int d = 1; d < p->ndim; d++) inner *= p->shape[d];
  out->align_elems = inner; /* whole rows */
  out->unshard = FP_UNSHARD_ALL_GATHER_V;
  out->reduce = FP_REDUCE_REDUCE_SCATTER_V;
  return FP_OK;
}

static fp_status bc_pieces(void *user, const fp_placement_param *p, int64_t rank, fp_piece *out, int64_t cap,
                           int64_t *n, char *err, size_t errcap) {
  const ex_block_cyclic *bc = user;
  (void)err, (void)errcap;
  int64_t rows = p->ndim > 0 ? p->shape[0] : 1, inner = rows > 0 ? p->numel / rows : 0, k = 0;
  for (int64_t b = rank; b * bc->block < rows; b += p->group_size, k++) {
    int64_t r0 = b * bc->block, r1 = r0 + bc->block < rows ? r0 + bc->block : rows;
    if (k < cap) out[k] = (fp_piece){r0 * inner, (r1 - r0) * inner};
  }
  *n = k;
  return FP_OK;
}

const fp_placement_plugin ex_block_cyclic_plugin = {bc_describe, bc_pieces};

/* ---- expert_owned ------------------------------------------------------------------ */
/* the expert index after the marker in the param's name, or -1 */
static int64_t expert_of(const ex_expert_owned *eo, const char *name) {
  const char *m = strstr(name, eo->marker);
  if (!m) return -1;
  const char *q = m + strlen(eo->marker);
  char *end;
  long long e = strtoll(q, &end, 10);
  return end == q || e < 0 || (*end != '.' && *end != 0) ? -1 : e;
}

static fp_status eo_describe(void *user, const fp_placement_param *p, fp_placement_layout *out, char *err,
                             size_t errcap) {
  if (expert_of(user, p->name) < 0) {
    snprintf(err, errcap, "expert_owned: no expert index after '%s' in the name", ((const ex_expert_owned *)user)->marker);
    return FP_ERR_ARG;
  }
  out->align_elems = 1;
  out->unshard = FP_UNSHARD_BROADCAST;
  out->reduce = FP_REDUCE_TO_OWNER;
  return FP_OK;
}

static fp_status eo_pieces(void *user, const fp_placement_param *p, int64_t rank, fp_piece *out, int64_t cap,
                           int64_t *n, char *err, size_t errcap) {
  (void)err, (void)errcap;
  *n = expert_of(user, p->name) % p->group_size == rank;
  if (*n && cap > 0) out[0] = (fp_piece){0, p->numel};
  return FP_OK;
}

const fp_placement_plugin ex_expert_owned_plugin = {eo_describe, eo_pieces};

fp_status ex_placements_add(fp_placement_set *set, ex_block_cyclic *bc, ex_expert_owned *eo) {
  fp_status st = fp_placement_set_add(set, "block_cyclic", &ex_block_cyclic_plugin, bc);
  return st != FP_OK ? st : fp_placement_set_add(set, "expert_owned", &ex_expert_owned_plugin, eo);
}
