/* reshard.h - compile a transfer program (ir/xfer.h) that moves a model's
 * weights from the arenas of one compiled plan (FROM) into those of another
 * (TO): docs/reshard.md. */
#ifndef FP_RESHARD_H
#define FP_RESHARD_H

#include "ir/ir.h"
#include "ir/xfer.h"

typedef struct fp_reshard_opts {
  const char *what;             /* "weights" (NULL: the same); "weights+optimizer" is refused (no optimizer
                                 * state lives in a plan's arena) */
  int64_t to_offset;            /* process of TO rank r = r + to_offset (0: overlapping rank sets) */
  int64_t from_offset;          /* process of FROM rank r = r + from_offset (0 unless the way back of a
                                 * transfer between disjoint rank sets) */
  const char *const *mxfp8;     /* fnmatch patterns over param names: those go through the built-in
                                 * transform "mxfp8" (each is the rule "PATTERN=mxfp8") */
  int nmxfp8;
  const fpi_xforms *xf;         /* reshard transforms registered by the caller (NULL: none) */
  const char *const *rules;     /* "PATTERN=NAME": params matching PATTERN (fnmatch) go through the transform
                                 * NAME, a built-in (ir/xfer.h FPI_XF_BUILTIN_NAMES) or one of xf; the first
                                 * rule matching a param decides, then xf's should_transform in order */
  int nrules;
} fp_reshard_opts;

/* Build and verify the transfer. from_src / to_src (may be NULL) are the
 * plan.json sources, so errors about them are located
 * ("to.plan.json:3:5: error: /params/2/shape: ..."). Returns NULL with the
 * errors on d when the plans do not fit together or the options are bad. */
fp_tx *fpi_reshard(fp_arena *a, const fp_prog *from, const fp_src *from_src, const fp_prog *to, const fp_src *to_src,
                  const fp_reshard_opts *o, fp_diag *d);

#endif
