/* fuzz_plan.c - libFuzzer target: the plan loader (ir/plan.c, fpi_plan_read:
 * what `flexplan verify` and every executor rank read).
 *
 * The content hash is not checked here (fp_plan_check_hash), so that mutated
 * plans reach the tables' checks and the verifier. Properties: a refusal
 * leaves a located error; an accepted plan written back as plan.json reads as itself, prints as .fpir
 * that parses and verifies as itself, and replays in the simulator. */
#include <stdint.h>
#include <string.h>

#include "ir/ir.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_MAX_INPUT) return 0;
  fp_arena *a = fpi_arena_new();
  char *text = fpi_alloc(a, size + 1);
  if (size) memcpy(text, data, size);
  fp_src src = {"fuzz.plan.json", text, size};
  fp_diag d1;
  fpi_diag_init(&d1, NULL);
  fp_plan_check_hash = false;
  fp_prog *p = fpi_plan_read(a, &d1, &src);
  fp_plan_check_hash = true;
  if (!p) FUZZ_CHECK(d1.nerrors > 0 && d1.buf && strstr(d1.buf, ": error: "));
  if (p) {
    fuzz_plan_roundtrip(a, p);
    fuzz_fpir_roundtrip(a, p);
    fuzz_model(a, p);
  }
  fpi_diag_free(&d1);
  fpi_arena_free(a);
  return 0;
}
