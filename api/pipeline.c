/* pipeline.c - api/'s side of the planner (api/api_impl.h): the one compile
 * path of the command line and of fp_plan_compile, the summary, and the
 * planner's other entry points the command line uses (hardware presets,
 * the modeled step, the transfer compiler). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_impl.h"
#include "planner/cost.h"
#include "planner/calib.h"
#include "planner/compare.h"
#include "planner/hwfile.h"
#include "planner/pipeline.h"
#include "planner/reshard.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* no spec: say which defaults apply (a note, stderr) */
static void note_defaults(const char *model, const fp_spec *s, bool hw_given) {
  fprintf(stderr,
          "%s: note: no spec (none embedded, no --spec); the defaults apply: %s on %lld ranks (%lld per node), "
          "one bucket per module, params %s, reductions %s, main grads %s, prefetch %d forward and %d backward",
          model, fp_strategy_names[s->strategy], (long long)s->world_size, (long long)s->ranks_per_node,
          fpi_dtype_name(s->mp.param), fpi_dtype_name(s->mp.reduce), fpi_dtype_name(s->mp.main_grad), s->prefetch_fwd,
          s->prefetch_bwd);
  if (!hw_given) fprintf(stderr, ", hardware %s", s->hw_preset);
  fprintf(stderr, " (docs/input-format.md)\n");
}

bool fpa_compile_run(fp_arena *a, fp_diag *d, const fpa_request *rq, fpa_compiled *out) {
  double t0 = now_ms(), in0 = fpi_phase_clock();
  fp_model m;
  fp_spec s;
  fp_hw preset;
  memset(out, 0, sizeof *out);
  if (!fpi_inputs_load_text(a, d, rq->model_path, rq->model_text, rq->spec_path, rq->spec_text, rq->plugins, &m, &s))
    return false;
  out->input_ms = fpi_phase_clock() - in0;
  if (rq->notes && !s.src) note_defaults(rq->model_path, &s, rq->hw_preset != NULL);
  fpi_spec_apply_policy(&s, (fp_policy)rq->policy);
  if (rq->hw_preset) { /* a preset or a hardware file; the spec's overrides still apply */
    int got = fpi_hw_lookup(a, d, rq->hw_preset, &preset);
    if (got == 0) return false;
    if (got > 0 && fpi_hw_arg_is_file(rq->hw_preset)) {
      fp_hw *base = fpi_alloc(a, sizeof *base);
      *base = preset;
      s.hw_base = base;
    } else if (got > 0) {
      s.hw_preset = preset.name;
    }
  }
  fp_compiled *c = fpi_alloc(a, sizeof *c);
  if (!fpi_compile(a, d, &m, &s, c)) return false;
  out->ms = now_ms() - t0;
  out->prog = c->prog;
  out->model_name = m.name;
  out->times = c->times;
  out->summary = fpi_alloc(a, sizeof *out->summary);
  fpi_summarize(c, out->ms, out->summary);
  return true;
}

static char *take(const char *s, size_t n) {
  char *m = malloc(n + 1);
  if (!m) return NULL;
  memcpy(m, s, n);
  m[n] = 0;
  return m;
}

char *fpa_compile(const fpa_request *rq, size_t *len, double *ms, char **msg) {
  *msg = NULL;
  *len = 0;
  fp_arena *ar = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  char *text = NULL;
  fpa_compiled c;
  if (!fpa_compile_run(ar, &d, rq, &c)) {
    const char *failed = "error: the compile failed\n";
    *msg = take(d.buf ? d.buf : failed, d.buf ? d.len : strlen(failed));
  } else {
    *ms = c.ms;
    FILE *f = open_memstream(&text, len);
    if (f) {
      bool ok = fpi_plan_write(c.prog, f);
      ok = fclose(f) == 0 && ok;
      if (!ok) free(text), text = NULL;
    }
  }
  fpi_diag_free(&d);
  fpi_arena_free(ar);
  return text;
}

/* ---- the summary ------------------------------------------------------------- */
void fpa_print_times(const fpa_compiled *c, const char *model, FILE *f) {
  const fp_phase_times *t = c->times;
  double sum = c->input_ms;
  fprintf(f, "%s: compile time by phase (CPU ms):\n  %-16s %10.1f\n", model, "read inputs", c->input_ms);
  for (int k = 0; k < FP_NPHASES; k++) {
    sum += t->ms[k];
    fprintf(f, "  %-16s %10.1f", fp_phase_names[k], t->ms[k]);
    if (t->runs[k] > 1) fprintf(f, "  (%d runs)", (int)t->runs[k]);
    fputc('\n', f);
  }
  fprintf(f, "  %-16s %10.1f\n", "sum", sum);
}

void fpa_summary_json(const fpa_compiled *c, FILE *f) { fpi_summary_json(c->summary, f); }
void fpa_summary_text(const fpa_compiled *c, FILE *f) { fpi_summary_text(c->summary, f); }
void fpa_summary_warn_device(const fpa_compiled *c, FILE *f) { fpi_summary_warn_device(c->summary, f); }

bool fpa_plan_summary_json(const fp_prog *p, double compile_ms, FILE *f) {
  fp_summary sum;
  if (!fpi_summarize_plan(p, &sum)) return false;
  sum.compile_ms = compile_ms;
  fpi_summary_json(&sum, f);
  return true;
}

/* ---- names, the modeled step, transfers -------------------------------------- */
int fpa_policy_parse(const char *name) { return fpi_policy_parse(name); }
bool fpa_hw_preset(const char *name, fp_hw *out) { return fpi_hw_preset(name, out); }
int fpa_hw_lookup(fp_arena *a, fp_diag *d, const char *arg, fp_hw *out) { return fpi_hw_lookup(a, d, arg, out); }
bool fpa_hw_arg_is_file(const char *arg) { return fpi_hw_arg_is_file(arg); }
const char *fpa_hw_preset_list(void) { return fpi_hw_preset_list(); }

bool fpa_modeled_print(fp_arena *a, const fp_prog *p, const fp_hw *hw, fpa_show what, FILE *f) {
  fp_sim sim;
  if (!fpi_simulate(a, p, hw, &sim)) return false;
  switch (what) {
  case FPA_SHOW_EXPLAIN: fpi_ir_explain_modeled(p, sim.start_us, sim.end_us, f); break;
  case FPA_SHOW_EXPOSED: fpi_sim_print_exposed(p, &sim, 0, f); break;
  case FPA_SHOW_SIMULATION: fpi_sim_print(p, &sim, hw, fpi_sim_memory(a, p, &sim), f); break;
  }
  return true;
}

fp_tx *fpa_reshard(fp_arena *a, const fp_prog *from, const fp_src *from_src, const fp_prog *to, const fp_src *to_src,
                   const char *what, int64_t to_offset, int64_t from_offset, const char *const *rules, int nrules,
                   fp_diag *d) {
  fp_reshard_opts o = {what, to_offset, from_offset, NULL, 0, NULL, rules, nrules};
  return fpi_reshard(a, from, from_src, to, to_src, &o, d);
}

bool fpa_calibrate(const fp_prog *P, const fp_hw *start, const double *const *op_t, const double *const *hook_t,
                   int32_t nrecs, const char *name, FILE *hw_out, FILE *report, char *err, size_t cap) {
  fp_calib_rec *recs = calloc(nrecs > 0 ? (size_t)nrecs : 1, sizeof *recs);
  if (!recs) return snprintf(err, cap, "out of memory"), false;
  for (int32_t r = 0; r < nrecs; r++) recs[r] = (fp_calib_rec){op_t[r], hook_t[r]};
  fp_calib c;
  bool ok = fpi_calibrate(P, start, recs, nrecs, &c, err, cap);
  free(recs);
  if (!ok) return false;
  c.hw.name = name;
  char note[1200];
  snprintf(note, sizeof note, "fitted by flexplan calibrate from %d timing record(s) of %s, starting from %s%s%s",
           (int)nrecs, P->model ? P->model : "a plan", start->name, c.kept[0] ? "; " : "", c.kept);
  fpi_hw_write(&c.hw, note, hw_out);
  fprintf(report, "flexplan calibrate: %s from %d record(s), starting from %s\n", name, (int)nrecs, start->name);
  fprintf(report, "  %-14s %8s %12s %12s\n", "op kind", "fitted", "median |err|", "max |err|");
  for (int k = 0; k < FP_CALIB_NKINDS; k++)
    if (c.kinds[k].n)
      fprintf(report, "  %-14s %8lld %11.1f%% %11.1f%%\n", fpi_calib_kind_name(k), (long long)c.kinds[k].n,
              100 * c.kinds[k].med_rel, 100 * c.kinds[k].max_rel);
    else
      fprintf(report, "  %-14s %8d %12s %12s\n", fpi_calib_kind_name(k), 0, "-", "-");
  fprintf(report,
          "  fitted: base_us %.3g, nvlink_hop_us %.3g, net_hop_us %.3g, nvlink_gbps %.4g, ib_gbps %.4g, hbm_gbps %.4g, "
          "pcie_gbps %.4g, launch_us %.3g, flops %.4g, hook_us %.3g\n",
          c.hw.base_us, c.hw.nvlink_hop_us, c.hw.net_hop_us, c.hw.nvlink_gbps, c.hw.ib_gbps, c.hw.hbm_gbps,
          c.hw.pcie_gbps, c.hw.launch_us, c.hw.flops, c.hw.hook_us);
  if (c.by_step)
    fprintf(report, "  the collectives fitted to the measured step: step error %+.1f%% on the fitted machine\n",
            100 * c.step_rel);
  if (c.kept[0]) fprintf(report, "  not fitted: %s\n", c.kept);
  return true;
}

bool fpa_compare_print(fp_arena *a, const fp_prog *P, const fp_hw *hw, const double *const *op_t,
                       const double *const *hook_t, const char *const *names, int32_t nrecs, FILE *f) {
  fp_calib_rec *recs = fpi_alloc_array(a, (size_t)(nrecs > 0 ? nrecs : 1), sizeof *recs);
  for (int32_t r = 0; r < nrecs; r++) recs[r] = (fp_calib_rec){op_t[r], hook_t[r]};
  return fpi_compare_print(a, P, hw, recs, names, nrecs, f);
}
