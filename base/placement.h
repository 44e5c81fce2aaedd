/* placement.h - the param placements every layer names: how a param's
 * elements are spread over the ranks of its shard group. The spec names the
 * first FP_NPLACEMENTS (planner/spec.c); the layout adds flat_shard; the IR
 * records the kind of each param (ir/ir.c prints and parses the names) and
 * the executor cuts views by it. A leaf header: it includes nothing. */
#ifndef FP_PLACEMENT_H
#define FP_PLACEMENT_H

typedef enum {
  FP_PL_SHARD,       /* even split along dim, padded */
  FP_PL_RAGGED,      /* uneven flattened-prefix split, cuts on align_elems */
  FP_PL_OWNED,       /* whole param on one rank of the shard group */
  FP_PL_REPLICATE,   /* whole param on every rank */
  FP_NPLACEMENTS,    /* (the kinds a spec can name) */
  /* IR only, chosen by the layout: the param's piece of a flat bucket, whose
   * ranks each hold one contiguous range of the bucket's concatenated
   * params (docs/layout.md, "Flat buckets") */
  FP_PL_FLAT = FP_NPLACEMENTS,
  /* IR only, what a placement plug-in's block-cyclic layout becomes
   * (docs/placements.md): blocks of b elements dealt round-robin, rank g
   * holding blocks g, g+G, g+2G, ... stored one after another in its slot;
   * the param's extent table gives b (off[g] = g*b) and each rank's count */
  FP_PL_CYCLIC,
  FP_NPLACEMENTS_IR
} fp_placement_kind;

#endif
