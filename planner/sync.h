/* sync.h - the sync pass for programs built outside the pipeline (tests,
 * hand-built plans): insert exactly the record/wait edges the program needs
 * (planner/passes/sync.c). Needs every buffer placed; the program must have
 * no record/wait yet. */
#ifndef FP_SYNC_H
#define FP_SYNC_H

#include "../ir/ir.h"

void fpi_sync_program(fp_prog *p);

#endif
