/* mutant_sources.h - the programs the mutation tests start from
 * (test_sem.c, test_mem.c, test_plan_edits.c): every example, and the MPI
 * tests' model and spec pairs (tests/mpi, each at its spec's world size:
 * offload, recompute, MXFP8 gathers and kept weights, flat and per-param
 * collectives, bf16 and fp16 reduces, ragged and cut placements, tied
 * weights, frozen units, grad accumulation), each compiled here and handed
 * to the test. */
#ifndef FP_MUTANT_SOURCES_H
#define FP_MUTANT_SOURCES_H

#include <stdbool.h>
#include <stdio.h>

#include "ir/irpriv.h"
#include "planner/front.h"
#include "planner/pipeline.h"

static const char *const fp_mut_examples[] = {
    "tiny-mlp",     "tiny-mlp-ddp",    "tiny-mlp-hybrid", "tiny-mlp-ragged",  "tiny-mlp-tied",
    "tiny-mlp-zero2", "llama3-8b",     "llama3-70b",      "llama3-405b",      "mixtral-8x7b",
    "deepseek-v3-16b", "paligemma-3b-224", "llama3-70b-tp8", "llama3-405b-tp8"};
static const char *const fp_mut_pairs[][2] = {
    {"mlp", "bf16"},           {"mlp", "bf16-reduce"},   {"mlp", "bucket-mp"},   {"mlp", "flat"},
    {"mlp", "flat-hybrid"},    {"mlp", "flat-sgo"},      {"mlp", "fp8-gather"},  {"mlp", "fp16-reduce"},
    {"mlp", "ga2"},            {"mlp", "hybrid-ga2"},    {"mlp", "offload"},     {"mlp", "offload-mixed"},
    {"mlp", "offload-sgo"},    {"mlp", "per-param"},     {"mlp", "placements-w3"}, {"mlp", "ragged-w6"},
    {"mlp", "sgo-overlap"},    {"mlp", "sgo-overlap-flat-ga2"}, {"mlp-frozen", "frozen-bf16"},
    {"mlp-frozen", "frozen-mxfp8"}, {"mlp-frozen", "mxfp8-keep"}, {"mlp-tied", "placements-tied-w4"},
    {"mlp-tied", "recompute"}, {"mlp-tied-mid", "reshard2"},
};

/* compile model (and spec) and hand the program to fn; false (said) when it
 * does not compile */
static bool fp_mut_compile(const char *name, const char *model, const char *spec,
                           void (*fn)(const char *name, const fp_prog *p)) {
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_model m;
  fp_spec s;
  fp_compiled c;
  bool ok = fpi_inputs_load(a, &d, model, spec, &m, &s) && fpi_compile(a, &d, &m, &s, &c);
  if (ok) fn(name, c.prog);
  else printf("FAIL %s: does not compile\n", name);
  fpi_diag_free(&d);
  fpi_arena_free(a);
  return ok;
}

/* every source but those skip (NULL: none) leaves out, to fn; the number
 * that did not compile */
static int fp_mut_sources(void (*fn)(const char *name, const fp_prog *p), bool (*skip)(const char *name)) {
  int bad = 0;
  char name[128], model[1024], spec[1024];
  for (size_t e = 0; e < sizeof fp_mut_examples / sizeof *fp_mut_examples; e++) {
    if (skip && skip(fp_mut_examples[e])) continue;
    snprintf(model, sizeof model, "%s/examples/%s.json", FP_SOURCE_DIR, fp_mut_examples[e]);
    bad += !fp_mut_compile(fp_mut_examples[e], model, NULL, fn);
  }
  for (size_t e = 0; e < sizeof fp_mut_pairs / sizeof *fp_mut_pairs; e++) {
    snprintf(name, sizeof name, "%s+%s", fp_mut_pairs[e][0], fp_mut_pairs[e][1]);
    if (skip && skip(name)) continue;
    snprintf(model, sizeof model, "%s/tests/mpi/%s.model.json", FP_SOURCE_DIR, fp_mut_pairs[e][0]);
    snprintf(spec, sizeof spec, "%s/tests/mpi/%s.spec.json", FP_SOURCE_DIR, fp_mut_pairs[e][1]);
    bad += !fp_mut_compile(name, model, spec, fn);
  }
  return bad;
}

#endif
