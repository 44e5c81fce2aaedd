/* placements.h - two example placement plug-ins (docs/placements.md), written
 * on the public contract of include/flexplan_compile.h only:
 *
 *   block_cyclic  rows dealt round-robin to the shard group's ranks in blocks
 *                 of `block` rows (ScaLAPACK's 1-D block-cyclic
 *                 distribution): rank g holds row blocks g, g+G, g+2G, ...;
 *                 unsharded by all_gather_v, reduced by reduce_scatter_v
 *                 (planned where a rank's blocks are one run, or where the
 *                 blocks divide the rows; a short last block among several
 *                 per rank is refused, located).
 *   expert_owned  each MoE expert's params wholly on one rank of the group:
 *                 the expert index i read from the param's name after
 *                 `marker` ("experts." : "layers.3.experts.5.w1" is expert
 *                 5), owner i mod G; broadcast, reduced to the owner.
 *
 * ex_placements_add registers both (block_cyclic with the given block)
 * into a set. The tests (tests/test_plugins.c) check them against
 * hand-computed layouts and train them under MPI (tests/exec.cmake). */
#ifndef EX_PLACEMENTS_H
#define EX_PLACEMENTS_H

#include "flexplan_compile.h"

typedef struct ex_block_cyclic {
  int64_t block; /* rows per block (>= 1) */
} ex_block_cyclic;

typedef struct ex_expert_owned {
  const char *marker; /* the text the expert index follows in a param name */
} ex_expert_owned;

extern const fp_placement_plugin ex_block_cyclic_plugin; /* user: ex_block_cyclic * */
extern const fp_placement_plugin ex_expert_owned_plugin; /* user: ex_expert_owned * */

/* register "block_cyclic" (bc) and "expert_owned" (eo) into set */
fp_status ex_placements_add(fp_placement_set *set, ex_block_cyclic *bc, ex_expert_owned *eo);

#endif
