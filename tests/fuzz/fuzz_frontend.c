/* fuzz_frontend.c - libFuzzer target: the compiler's front end on one
 * model file (a model, or {"model": .., "spec": ..}), then the whole
 * compile when the inputs are valid.
 *
 * Besides memory safety (the fuzz build runs under ASan and UBSan) it checks
 * two properties of every input: a rejected input leaves at least one
 * located error (never a silent failure), and a compiled plan survives
 * plan.json: written, read back (hash checked) and verified, it is the same
 * program (equal content hashes). A violation aborts: libFuzzer saves the
 * input. tests/fuzz/README.md says how the targets are built and run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "planner/front.h"
#include "planner/pipeline.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_MAX_INPUT) return 0;
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  char *text = fpi_alloc(a, size + 1);
  if (size) memcpy(text, data, size);
  fp_src src = {"fuzz.json", text, size};
  const struct fp_jv *embedded = NULL;
  const fp_src *msrc = &src;
  fp_model m;
  fp_spec s;
  fp_compiled c;
  bool ok = fpi_model_load_src(a, &d, &src, &m, &embedded, &msrc) &&
            fpi_spec_parse(a, &d, embedded ? msrc : NULL, embedded, embedded ? "/spec" : "", &s);
  /* a world of more ranks than FUZZ_MAX_WORLD compiles the same program
   * (plans are SPMD) but slower tables: not worth the fuzzer's time */
  if (ok && s.world_size <= FUZZ_MAX_WORLD) {
    ok = fpi_compile(a, &d, &m, &s, &c);
    if (ok) fuzz_plan_roundtrip(a, c.prog);
  }
  if (!ok) FUZZ_CHECK(d.nerrors > 0 && d.buf && strstr(d.buf, "error: "));
  fpi_diag_free(&d);
  fpi_arena_free(a);
  return 0;
}
