/* compare.h - the model's error against measured steps (flexplan simulate
 * --measured): per hook, when its work was done in the modeled step and in
 * the measured ones; per step, the modeled step against the measured. */
#ifndef FP_COMPARE_H
#define FP_COMPARE_H

#include <stdio.h>

#include "../ir/ir.h"
#include "calib.h"

/* print the comparison of P simulated on hw with nrecs records (names[r]
 * names record r in the header); false when the simulation fails */
bool fpi_compare_print(fp_arena *a, const fp_prog *P, const fp_hw *hw, const fp_calib_rec *recs,
                       const char *const *names, int32_t nrecs, FILE *f);

#endif
