/* fuzz_fpir.c - libFuzzer target: the .fpir parser and the verifier
 * (ir/parse.c, ir/verify.c: what `flexplan print|verify|simulate FILE.fpir`
 * read).
 *
 * Properties: a refused program leaves a located error; a verified program
 * prints as .fpir that parses and verifies as the same program (equal
 * content hashes), survives plan.json (written and read back, hash
 * checked), and replays in the simulator. */
#include <stdint.h>
#include <string.h>

#include "ir/ir.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_MAX_INPUT) return 0;
  fp_arena *a = fpi_arena_new();
  char *text = fpi_alloc(a, size + 1);
  if (size) memcpy(text, data, size);
  fp_src src = {"fuzz.fpir", text, size};
  fp_diag d;
  fpi_diag_init(&d, NULL);
  fp_prog *p = fpi_ir_parse(a, &d, &src);
  bool ok = p && fpi_ir_verify(p, &d, &src);
  if (!ok) FUZZ_CHECK(d.nerrors > 0);
  if (ok) {
    fuzz_fpir_roundtrip(a, p);
    fuzz_plan_roundtrip(a, p);
    fuzz_model(a, p);
  }
  fpi_diag_free(&d);
  fpi_arena_free(a);
  return 0;
}
