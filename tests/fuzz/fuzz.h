/* fuzz.h - what the fuzz targets (tests/fuzz/fuzz_*.c) share: the libFuzzer
 * entry point, input limits, the check that aborts (libFuzzer then keeps the
 * input as a crash), and the plan.json round trip. */
#ifndef FP_FUZZ_H
#define FP_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ir/ir.h"
#include "ir/irpriv.h"

#define FUZZ_MAX_INPUT (1 << 20) /* bytes: larger inputs only slow the search */
#define FUZZ_MAX_WORLD 4096      /* ranks the front-end target compiles for */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* a property every input must keep; else abort (a crash libFuzzer records) */
#define FUZZ_CHECK(c)                                                                  \
  do {                                                                                 \
    if (!(c)) {                                                                        \
      fprintf(stderr, "%s:%d: fuzz property violated: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                         \
    }                                                                                  \
  } while (0)

/* p written as plan.json and read back (hash checked) is the
 * same program; aborts when not */
static inline void fuzz_plan_roundtrip(fp_arena *a, const fp_prog *p) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  FUZZ_CHECK(f);
  bool written = fpi_plan_write(p, f);
  FUZZ_CHECK(fclose(f) == 0 && written);
  fp_src src = {"roundtrip.plan.json", buf, len};
  fp_diag d;
  fpi_diag_init(&d, stderr);
  bool check = fp_plan_check_hash;
  fp_plan_check_hash = true;
  fp_prog *q = fpi_plan_read(a, &d, &src);
  FUZZ_CHECK(q && fpi_prog_hash(q) == fpi_prog_hash(p));
  fp_plan_check_hash = check;
  fpi_diag_free(&d);
  free(buf);
}

/* p printed as .fpir parses and verifies as the same program; aborts when not */
static inline void fuzz_fpir_roundtrip(fp_arena *a, const fp_prog *p) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  FUZZ_CHECK(f);
  fpi_ir_print(p, f);
  FUZZ_CHECK(fclose(f) == 0);
  fp_src src = {"roundtrip.fpir", buf, len};
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_prog *q = fpi_ir_parse(a, &d, &src);
  FUZZ_CHECK(q && fpi_ir_verify(q, &d, &src) && fpi_prog_hash(q) == fpi_prog_hash(p));
  fpi_diag_free(&d);
  free(buf);
}

/* a verified program p replayed on its machine (h100-sxm when it names
 * none) and printed as explain and simulate do, into a memory stream: what
 * the CLI does with an accepted plan */
#include "planner/cost.h"
#include "planner/sim.h"
static inline void fuzz_model(fp_arena *a, const fp_prog *p) {
  fp_hw hw;
  if (p->hw.name) hw = p->hw;
  else FUZZ_CHECK(fpi_hw_preset("h100-sxm", &hw));
  fp_sim sim;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  FUZZ_CHECK(f);
  if (fpi_simulate(a, p, &hw, &sim)) {
    fpi_ir_explain_modeled(p, sim.start_us, sim.end_us, f);
    fpi_sim_print_exposed(p, &sim, 0, f);
    fpi_sim_print(p, &sim, &hw, fpi_sim_memory(a, p, &sim), f);
  }
  fclose(f);
  free(buf);
}

#endif
