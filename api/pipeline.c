/* pipeline.c - the compile API's side of the planner (api/api_impl.h says
 * why it is apart from api/compile.c): the CLI's compile as one call that
 * returns plan.json text or the diagnostics, and the summary of a plan read
 * back. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_impl.h"
#include "planner/cost.h"
#include "planner/pipeline.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static char *take(const char *s, size_t n) {
  char *m = malloc(n + 1);
  if (!m) return NULL;
  memcpy(m, s, n);
  m[n] = 0;
  return m;
}

char *fpa_compile(const char *model_path, const char *model_text, const char *spec_path, const char *spec_text,
                  const char *hw_preset, int policy, size_t *len, double *ms, char **msg) {
  *msg = NULL;
  *len = 0;
  double t0 = now_ms();
  fp_arena *ar = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  char *text = NULL;
  fp_model m;
  fp_spec s;
  fp_compiled c;
  fp_hw preset;
  if (!fpi_inputs_load_text(ar, &d, model_path, model_text, spec_path, spec_text, &m, &s)) goto fail;
  fpi_spec_apply_policy(&s, (fp_policy)policy);
  if (hw_preset && fpi_hw_preset(hw_preset, &preset)) s.hw_preset = preset.name; /* the spec's overrides still apply */
  if (!fpi_compile(ar, &d, &m, &s, &c)) goto fail;
  *ms = now_ms() - t0;
  FILE *f = open_memstream(&text, len);
  if (!f) goto done;
  bool ok = fpi_plan_write(c.prog, f);
  ok = fclose(f) == 0 && ok;
  if (!ok) {
    free(text);
    text = NULL;
  }
  goto done;
fail:
  *msg = take(d.buf ? d.buf : "error: the compile failed\n", d.buf ? d.len : strlen("error: the compile failed\n"));
done:
  fpi_diag_free(&d);
  fpi_arena_free(ar);
  return text;
}

bool fpa_summary_json(const fp_prog *p, double compile_ms, FILE *f) {
  fp_summary sum;
  if (!fpi_summarize_plan(p, &sum)) return false;
  sum.compile_ms = compile_ms;
  fpi_summary_json(&sum, f);
  return true;
}
