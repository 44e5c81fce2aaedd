/* flexplan.c - the command line: compile, check, print, verify, explain,
 * simulate, viz.
 *
 * Exit status: 0 ok, 1 input error (located messages on stderr), 2 usage,
 * 70 internal error (FP_ASSERT). Outputs are written atomically: into a
 * temporary file next to the target, renamed over it only when complete, and
 * removed on any error, so a failed run leaves nothing behind. */
#include <errno.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ir/ir.h"
#include "planner/cost.h"
#include "planner/front.h"
#include "planner/json.h"
#include "planner/pipeline.h"
#include "planner/reshard.h"
#include "viz/viz.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2, EXIT_INTERNAL = 70 };

static const char usage[] =
    "usage: flexplan <command> [options]\n"
    "\n"
    "commands:\n"
    "  compile MODEL [--spec SPEC] [-o OUT] [--emit=plan|ir|summary|trace|html]\n"
    "          [--hardware PRESET] [--policy P] [--ranks LIST]\n"
    "                 compile MODEL (model.json, or {\"model\":..,\"spec\":..}) into\n"
    "                 a plan (plan.json, default), its IR text (.fpir), a JSON\n"
    "                 summary, or what 'viz' writes (trace, html); -o - writes to\n"
    "                 standard output. Default OUT: <model name>.plan.json / .fpir /\n"
    "                 .trace.json / .html; the summary goes to stdout.\n"
    "                 --hardware replaces the spec's hardware preset (h100-sxm, h200).\n"
    "                 --policy fsdp2 lowers as PyTorch FSDP2 does by default\n"
    "                 (baseline for comparison); flexplan (default) as specified.\n"
    "  check MODEL [--spec SPEC] [--hardware PRESET] [--policy P]\n"
    "                 run the whole compiler, write nothing\n"
    "  print FILE     print a plan.json or .fpir as .fpir\n"
    "  verify FILE    verify a plan.json or .fpir (exit 0 valid, 1 invalid)\n"
    "  explain FILE [--hardware PRESET] [--exposed]\n"
    "                 print a plan.json or .fpir as a table, one row per op, with\n"
    "                 the modeled start and end of each (simulated as 'simulate' does);\n"
    "                 --exposed: the exposed communication ranked instead (op, bucket,\n"
    "                 the hook that waits, ms)\n"
    "  simulate PLAN [--hardware PRESET]\n"
    "                 replay a plan.json or .fpir on the plan's hardware (or PRESET)\n"
    "                 and print the modeled time per segment and the totals\n"
    "  viz PLAN [--format=trace|html] [-o OUT] [--ranks LIST] [--hardware PRESET] [--measured FILE ...]\n"
    "                 the modeled schedule of a plan.json or .fpir as Chrome Trace\n"
    "                 Event JSON for Perfetto (trace, default) or one self-contained\n"
    "                 HTML page (html). --ranks 0,3,8-11 picks the ranks shown\n"
    "                 (default: rank 0 and one rank of every other layout class).\n"
    "                 --measured FILE (repeatable) adds the steps an executor recorded\n"
    "                 (fp_exec_timing_write) beside the modeled one (trace only).\n"
    "                 Default OUT: <model name>.trace.json / .html (docs/viz.md)\n"
    "  reshard FROM TO [--transform PATTERN=mxfp8 ...] [--what weights|weights+optimizer]\n"
    "          [--to-offset N] [--from-offset M] [-o OUT] [--emit=summary|ir|explain|json|trace]\n"
    "                 compile and verify the transfer of the main weights from the\n"
    "                 ranks of plan FROM to those of plan TO (two plan.json of one\n"
    "                 model); -o writes it as JSON (flexplan.xfer.v1); --emit picks\n"
    "                 what goes to stdout (summary, default: the figures). TO rank r\n"
    "                 is process r + N, FROM rank r process r + M (default 0).\n"
    "                 'viz T.xfer.json [-o OUT]' draws a saved transfer as a trace.\n"
    "                 docs/reshard.md\n"
    "\n"
    "options:\n"
    "  -h, --help     this text\n"
    "  --version      the version\n"
    "\n"
    "exit status: 0 ok, 1 input error, 2 usage error, 70 internal error\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "flexplan: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see flexplan --help)\n");
  return EXIT_USAGE;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ---- atomic output -------------------------------------------------------- */
/* Everything written to standard output reached it; else say so (stdio keeps
 * a failed write's error on the stream, and a later fflush may succeed). */
static bool stdout_written(void) {
  bool flushed = fflush(stdout) == 0;
  int err = errno;
  if (flushed && !ferror(stdout)) return true;
  if (!flushed) fprintf(stderr, "flexplan: error: cannot write to standard output: %s\n", strerror(err));
  else fprintf(stderr, "flexplan: error: cannot write to standard output\n");
  return false;
}

typedef struct {
  const char *path; /* final path; NULL for stdout */
  char *tmp;        /* temporary path */
  FILE *f;
} out_file;

static bool out_open(out_file *o, const char *path) {
  memset(o, 0, sizeof *o);
  if (!strcmp(path, "-")) {
    o->f = stdout;
    return true;
  }
  o->path = path;
  size_t n = strlen(path);
  o->tmp = malloc(n + 16);
  FP_ASSERT(o->tmp);
  snprintf(o->tmp, n + 16, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(o->tmp);
  if (fd < 0) {
    fprintf(stderr, "%s: error: cannot create output: %s\n", path, strerror(errno));
    free(o->tmp);
    o->tmp = NULL;
    return false;
  }
  /* mkstemp makes the file 0600; give it the mode a plain create would */
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd, 0666 & ~mask) != 0) {
    fprintf(stderr, "%s: error: cannot set the output's mode: %s\n", path, strerror(errno));
    close(fd);
    unlink(o->tmp);
    free(o->tmp);
    o->tmp = NULL;
    return false;
  }
  o->f = fdopen(fd, "w");
  FP_ASSERT(o->f);
  return true;
}

static bool out_commit(out_file *o) {
  if (!o->path) return stdout_written();
  bool ok = fflush(o->f) == 0 && !ferror(o->f);
  ok = (fclose(o->f) == 0) && ok;
  if (ok && rename(o->tmp, o->path) != 0) ok = false;
  if (!ok) {
    fprintf(stderr, "%s: error: cannot write output: %s\n", o->path, strerror(errno));
    unlink(o->tmp);
  }
  free(o->tmp);
  return ok;
}

/* ---- reading plans and IR --------------------------------------------------- */
static fp_prog *read_program(fp_arena *a, fp_diag *d, const char *path) {
  fp_src *src = fp_alloc(a, sizeof *src);
  if (!fp_src_read(a, d, path, src)) return NULL;
  const char *q = src->text;
  while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
  if (*q == '{') return fp_plan_read(a, d, src);
  fp_prog *p = fp_ir_parse(a, d, src);
  if (p && !fp_ir_verify(p, d, src)) return NULL;
  return p;
}

/* --hardware names no preset: an input error (exit 1) */
static int unknown_preset(const char *name) {
  fprintf(stderr, "flexplan: error: --hardware: unknown hardware preset '%s' (expected one of: %s)\n", name,
          fp_hw_preset_list());
  return EXIT_INPUT;
}

/* the machine to model P on: PRESET (--hardware), else the plan's, else
 * h100-sxm with a note; false when PRESET is unknown (reported) */
static bool pick_hw(const fp_prog *p, const char *preset, const char *path, fp_hw *hw) {
  if (preset) {
    if (!fp_hw_preset(preset, hw)) return unknown_preset(preset), false;
  } else if (p->hw.name) {
    *hw = p->hw;
  } else {
    fp_hw_preset("h100-sxm", hw);
    fprintf(stderr, "%s: note: the plan names no hardware; simulating on h100-sxm\n", path);
  }
  return true;
}

/* fp_simulate of p on hw; false after reporting a step that is not a finite
 * number (a verified plan's machine is valid, but its rates may be absurdly
 * small for the plan's work) */
static bool simulate_plan(fp_arena *ar, const fp_prog *p, const fp_hw *hw, const char *path, fp_sim *sim) {
  if (fp_simulate(ar, p, hw, sim)) return true;
  fprintf(stderr, "%s: error: the modeled step time on hardware '%s' is not a finite number: its rates are too "
                  "small for the plan's work\n", path, hw->name);
  return false;
}

/* ---- viz: --ranks and the writers ------------------------------------------------ */
#define MAX_RANKS_SHOWN 64   /* --ranks: each rank shown repeats every op */
#define MAX_DEFAULT_RANKS 16 /* default: rank 0 and up to 15 other layout classes */

typedef struct rank_list {
  int64_t v[MAX_RANKS_SHOWN];
  int32_t n;
} rank_list;

/* "0,3,8-11" into *out (duplicates dropped, order kept); a usage error (2) or 0 */
static int parse_ranks(const char *s, rank_list *out) {
  out->n = 0;
  const char *q = s;
  if (!*q) return usage_error("--ranks needs a list of ranks, e.g. 0,3,8-11%s", "");
  while (*q) {
    char *end;
    errno = 0;
    if (*q < '0' || *q > '9') return usage_error("--ranks: expected a rank number at '%s'", q);
    long long lo = strtoll(q, &end, 10), hi = lo;
    if (errno) return usage_error("--ranks: number out of range at '%s'", q);
    q = end;
    if (*q == '-') {
      q++;
      if (*q < '0' || *q > '9') return usage_error("--ranks: expected the end of a range at '%s'", q);
      errno = 0;
      hi = strtoll(q, &end, 10);
      if (errno) return usage_error("--ranks: number out of range at '%s'", q);
      if (hi < lo) return usage_error("--ranks: a range ends before it starts at '%s'", q);
      q = end;
    }
    for (long long r = lo;; r++) { /* stops at hi, never past it: hi may be LLONG_MAX */
      bool dup = false;
      for (int32_t k = 0; k < out->n && !dup; k++) dup = out->v[k] == r;
      if (!dup) {
        if (out->n == MAX_RANKS_SHOWN) return usage_error("--ranks: at most 64 ranks at once (at '%s')", s);
        out->v[out->n++] = r;
      }
      if (r == hi) break;
    }
    if (*q == ',') {
      q++;
      if (!*q) return usage_error("--ranks: a list ends in ',': '%s'", s);
    } else if (*q) {
      return usage_error("--ranks: unexpected '%s'", q);
    }
  }
  return 0;
}

typedef enum {
  VIZ_TRACE, /* Chrome Trace Event JSON (Perfetto) */
  VIZ_HTML,  /* one self-contained HTML page */
} viz_format;

/* the view of p on hw written to o; false after reported errors */
static bool write_view(fp_arena *ar, fp_diag *d, const char *where, const fp_prog *p, const fp_hw *hw,
                       const rank_list *ranks, viz_format fmt, const fp_viz_measured *meas, int32_t nmeas,
                       out_file *o) {
  fp_viz v;
  if (!fp_viz_build(ar, d, where, p, hw, ranks && ranks->n ? ranks->v : NULL, ranks ? ranks->n : 0, MAX_DEFAULT_RANKS,
                    &v))
    return false;
  if ((!ranks || !ranks->n) && v.nclasses > v.nranks)
    fprintf(stderr, "flexplan: note: the plan has %d layout classes; showing the first %d (choose with --ranks)\n",
            (int)v.nclasses, (int)v.nranks);
  v.measured = meas, v.nmeasured = nmeas;
  for (int32_t k = 0; k < nmeas; k++) {
    double hooks = 0;
    for (int32_t s = 0; s < p->nsegs; s++) hooks += meas[k].hook_t[2 * s + 1] - meas[k].hook_t[2 * s];
    fprintf(stderr, "  rank %lld measured (step %lld, %s): step %.3f ms, %.3f ms of it inside hooks; modeled on %s: "
            "step %.3f ms, exposed communication %.3f ms\n",
            (long long)meas[k].rank, (long long)meas[k].step, meas[k].path, meas[k].end_us / 1e3, hooks / 1e3,
            v.hw.name, v.sim.step_us / 1e3, v.sim.exposed_comm_us / 1e3);
  }
  return fmt == VIZ_TRACE ? fp_viz_trace(&v, o->f) : fp_viz_html(&v, o->f);
}

/* ---- compile / check ----------------------------------------------------------- */
typedef enum {
  EMIT_PLAN,    /* plan.json */
  EMIT_IR,      /* the .fpir text */
  EMIT_SUMMARY, /* the summary as JSON */
  EMIT_TRACE,   /* what viz --format=trace writes */
  EMIT_HTML,    /* what viz --format=html writes */
} emit_kind;

static int cmd_compile(int argc, char **argv, bool check_only) {
  const char *model = NULL, *spec = NULL, *out = NULL, *hw = NULL;
  emit_kind emit = EMIT_PLAN;
  fp_policy policy = FP_POLICY_FLEXPLAN;
  rank_list ranks = {.n = 0};
  bool have_ranks = false;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if ((!strcmp(a, "--ranks") || !strncmp(a, "--ranks=", 8)) && !check_only) {
      const char *v = a[7] == '=' ? a + 8 : i + 1 < argc ? argv[++i] : NULL;
      if (!v) return usage_error("option '%s' needs a value", a);
      int rc = parse_ranks(v, &ranks);
      if (rc) return rc;
      have_ranks = true;
    } else if (!strcmp(a, "--policy") || !strncmp(a, "--policy=", 9)) {
      const char *v = a[8] == '=' ? a + 9 : i + 1 < argc ? argv[++i] : NULL;
      if (!v) return usage_error("option '%s' needs a value (flexplan or fsdp2)", a);
      int p = fp_policy_parse(v);
      if (p < 0) return usage_error("unknown policy '%s' (expected flexplan or fsdp2)", v);
      policy = (fp_policy)p;
    } else if (!strcmp(a, "--hardware")) {
      if (i + 1 >= argc) return usage_error("option '%s' needs a value", a);
      hw = argv[++i];
    } else if (!strncmp(a, "--hardware=", 11)) {
      hw = a + 11;
    } else if (!strcmp(a, "--spec") || !strcmp(a, "-o")) {
      if (i + 1 >= argc) return usage_error("option '%s' needs a value", a);
      if (a[1] == 'o' && check_only) return usage_error("'check' writes nothing; '%s' is not an option of it", a);
      *(a[1] == 'o' ? &out : &spec) = argv[++i];
    } else if (!strncmp(a, "--spec=", 7)) {
      spec = a + 7;
    } else if (!strncmp(a, "--emit=", 7) && !check_only) {
      const char *k = a + 7;
      if (!strcmp(k, "plan")) emit = EMIT_PLAN;
      else if (!strcmp(k, "ir")) emit = EMIT_IR;
      else if (!strcmp(k, "summary")) emit = EMIT_SUMMARY;
      else if (!strcmp(k, "trace")) emit = EMIT_TRACE;
      else if (!strcmp(k, "html")) emit = EMIT_HTML;
      else return usage_error("unknown --emit kind '%s' (expected plan, ir, summary, trace or html; one per call)", k);
    } else if (a[0] == '-' && a[1]) {
      return usage_error("unknown option '%s'", a);
    } else if (!model) {
      model = a;
    } else {
      return usage_error("unexpected argument '%s'", a);
    }
  }
  if (!model) return usage_error("%s: missing MODEL", check_only ? "check" : "compile");
  if (have_ranks && emit != EMIT_TRACE && emit != EMIT_HTML)
    return usage_error("--ranks picks the ranks of --emit=trace or --emit=html%s", "");
  fp_hw preset;
  if (hw && !fp_hw_preset(hw, &preset)) return unknown_preset(hw);

  double t0 = now_ms();
  fp_arena *ar = fp_arena_new();
  fp_diag d;
  fp_diag_init(&d, stderr);
  int rc = EXIT_INPUT;
  fp_model m;
  fp_spec s;
  fp_compiled c;
  if (!fp_inputs_load(ar, &d, model, spec, &m, &s)) goto done;
  fp_spec_apply_policy(&s, policy);
  if (hw) s.hw_preset = preset.name; /* the spec's overrides still apply */
  if (!fp_compile(ar, &d, &m, &s, &c)) goto done;
  double ms = now_ms() - t0;
  fp_summary sum;
  fp_summarize(&c, ms, &sum);
  if (check_only) {
    fprintf(stderr, "%s: ok: %s, %lld ops, arena %.3f GiB\n", model, sum.strategy, (long long)sum.ops,
            (double)sum.arena_bytes / (1 << 30));
    rc = EXIT_OK;
    goto done;
  }
  if (!out) {
    if (emit == EMIT_SUMMARY)
      out = "-";
    else
      out = fp_sprintf(ar, "%s.%s", m.name,
                       emit == EMIT_PLAN   ? "plan.json"
                       : emit == EMIT_IR   ? "fpir"
                       : emit == EMIT_HTML ? "html"
                                           : "trace.json");
  }
  out_file o;
  if (!out_open(&o, out)) goto done;
  bool ok = true;
  switch (emit) {
  case EMIT_PLAN: ok = fp_plan_write(c.prog, o.f); break;
  case EMIT_IR: fp_ir_print(c.prog, o.f); break;
  case EMIT_SUMMARY: fp_summary_json(&sum, o.f); break;
  case EMIT_TRACE:
  case EMIT_HTML:
    ok = write_view(ar, &d, model, c.prog, &c.prog->hw, &ranks, emit == EMIT_HTML ? VIZ_HTML : VIZ_TRACE, NULL, 0, &o);
    break;
  }
  if (!ok) {
    if (o.path) {
      fclose(o.f);
      unlink(o.tmp);
      free(o.tmp);
    }
    if (!d.nerrors) fprintf(stderr, "%s: error: cannot write the %s\n", out, emit == EMIT_TRACE ? "trace" : emit == EMIT_HTML ? "page" : "plan");
    goto done;
  }
  if (!out_commit(&o)) goto done;
  if (emit != EMIT_SUMMARY) {
    fp_summary_text(&sum, stderr);
    if (o.path) fprintf(stderr, "  wrote %s\n", o.path);
  }
  rc = EXIT_OK;
done:
  fp_diag_free(&d);
  fp_arena_free(ar);
  return rc;
}

/* ---- print / verify ------------------------------------------------------ */
static int cmd_file(int argc, char **argv, const char *cmd) {
  if (argc != 1) return usage_error("%s: expected exactly one FILE", cmd);
  fp_arena *ar = fp_arena_new();
  fp_diag d;
  fp_diag_init(&d, stderr);
  fp_prog *p = read_program(ar, &d, argv[0]);
  int rc = EXIT_INPUT;
  if (p) {
    rc = EXIT_OK;
    if (!strcmp(cmd, "print")) fp_ir_print(p, stdout);
    else fprintf(stderr, "%s: ok: %d ops in %d segments, arena %lld bytes\n", argv[0], p->nops, p->nsegs,
                 (long long)p->arena_bytes);
    if (!stdout_written()) rc = EXIT_INPUT;
  }
  fp_diag_free(&d);
  fp_arena_free(ar);
  return rc;
}

/* options PLAN [--hardware PRESET] (explain, simulate); a usage error or 0 */
static int plan_and_hw(int argc, char **argv, const char *cmd, const char **path, const char **hwname) {
  *path = *hwname = NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--hardware")) {
      if (i + 1 >= argc) return usage_error("option '%s' needs a value", a);
      *hwname = argv[++i];
    } else if (!strncmp(a, "--hardware=", 11)) {
      *hwname = a + 11;
    } else if (a[0] == '-' && a[1]) {
      return usage_error("unknown option '%s'", a);
    } else if (!*path) {
      *path = a;
    } else {
      return usage_error("unexpected argument '%s'", a);
    }
  }
  if (!*path) return usage_error("%s: missing PLAN", cmd);
  return 0;
}

/* ---- explain and simulate: a plan replayed on a machine ---------------------------- */
/* What a command does with the replayed plan: print it to stdout. */
typedef void (*modeled_fn)(fp_arena *ar, const fp_prog *p, const fp_hw *hw, const fp_sim *sim);

static void print_explain(fp_arena *ar, const fp_prog *p, const fp_hw *hw, const fp_sim *sim) {
  (void)ar, (void)hw;
  fp_ir_explain_modeled(p, sim->start_us, sim->end_us, stdout);
}

/* explain --exposed: the ranked table of exposed communication only */
static void print_exposed(fp_arena *ar, const fp_prog *p, const fp_hw *hw, const fp_sim *sim) {
  (void)ar, (void)hw;
  fp_sim_print_exposed(p, sim, 0, stdout);
}

static void print_simulation(fp_arena *ar, const fp_prog *p, const fp_hw *hw, const fp_sim *sim) {
  fp_sim_print(p, sim, hw, fp_sim_memory(ar, p, sim), stdout);
}

/* COMMAND PLAN [--hardware PRESET]: read the plan, simulate it on the
 * preset (default: the plan's machine), and hand it to print */
static int cmd_modeled(int argc, char **argv, const char *cmd, modeled_fn print) {
  const char *path, *hwname;
  int rc = plan_and_hw(argc, argv, cmd, &path, &hwname);
  if (rc) return rc;
  fp_hw hw;
  if (hwname && !fp_hw_preset(hwname, &hw)) return unknown_preset(hwname);
  fp_arena *ar = fp_arena_new();
  fp_diag d;
  fp_diag_init(&d, stderr);
  rc = EXIT_INPUT;
  fp_prog *p = read_program(ar, &d, path);
  fp_sim sim;
  if (p && pick_hw(p, hwname, path, &hw) && simulate_plan(ar, p, &hw, path, &sim)) {
    print(ar, p, &hw, &sim);
    rc = stdout_written() ? EXIT_OK : EXIT_INPUT;
  }
  fp_diag_free(&d);
  fp_arena_free(ar);
  return rc;
}

/* ---- viz ------------------------------------------------------------------------- */
#define MAX_MEASURED 64
static int cmd_viz(int argc, char **argv) {
  const char *path = NULL, *hwname = NULL, *out = NULL;
  const char *measured_paths[MAX_MEASURED];
  int32_t nmeasured = 0;
  viz_format fmt = VIZ_TRACE;
  rank_list ranks = {.n = 0};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
    int opt = !strcmp(a, "--hardware") || !strncmp(a, "--hardware=", 11) ? 'h'
              : !strcmp(a, "--format") || !strncmp(a, "--format=", 9) ? 'f'
              : !strcmp(a, "--ranks") || !strncmp(a, "--ranks=", 8)   ? 'r'
              : !strcmp(a, "--measured") || !strncmp(a, "--measured=", 11) ? 'm'
              : !strcmp(a, "-o")                                      ? 'o'
                                                                      : 0;
    if (opt) {
      const char *eq = strchr(a, '=');
      val = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
      if (!val) return usage_error("option '%s' needs a value", a);
    }
    if (opt == 'm') {
      if (nmeasured == MAX_MEASURED) return usage_error("at most 64 --measured files (got more at '%s')", val);
      measured_paths[nmeasured++] = val;
    } else if (opt == 'h') {
      hwname = val;
    } else if (opt == 'o') {
      out = val;
    } else if (opt == 'f') {
      if (!strcmp(val, "trace")) fmt = VIZ_TRACE;
      else if (!strcmp(val, "html")) fmt = VIZ_HTML;
      else return usage_error("unknown --format '%s' (expected trace or html)", val);
    } else if (opt == 'r') {
      int rc = parse_ranks(val, &ranks);
      if (rc) return rc;
    } else if (a[0] == '-' && a[1]) {
      return usage_error("unknown option '%s'", a);
    } else if (!path) {
      path = a;
    } else {
      return usage_error("unexpected argument '%s'", a);
    }
  }
  if (!path) return usage_error("%s: missing PLAN", "viz");
  if (nmeasured && fmt != VIZ_TRACE)
    return usage_error("--measured steps are drawn in the trace (--format=trace), not in '%s'", "html");
  fp_hw hw;
  if (hwname && !fp_hw_preset(hwname, &hw)) return unknown_preset(hwname);
  fp_arena *ar = fp_arena_new();
  fp_diag d;
  fp_diag_init(&d, stderr);
  int rc = EXIT_INPUT;
  fp_prog *p = read_program(ar, &d, path);
  if (!p || !pick_hw(p, hwname, path, &hw)) goto done;
  fp_viz_measured *meas = fp_alloc_array(ar, (size_t)(nmeasured ? nmeasured : 1), sizeof *meas);
  for (int32_t k = 0; k < nmeasured; k++)
    if (!fp_viz_measured_read(ar, &d, measured_paths[k], p, &meas[k])) goto done;
  if (!out) out = fp_sprintf(ar, "%s.%s", p->model && *p->model ? p->model : "plan", fmt == VIZ_HTML ? "html" : "trace.json");
  out_file o;
  if (!out_open(&o, out)) goto done;
  if (!write_view(ar, &d, path, p, &hw, &ranks, fmt, meas, nmeasured, &o)) {
    if (o.path) {
      fclose(o.f);
      unlink(o.tmp);
      free(o.tmp);
    }
    if (!d.nerrors) fprintf(stderr, "%s: error: cannot write the %s\n", out, fmt == VIZ_HTML ? "page" : "trace");
    goto done;
  }
  if (!out_commit(&o)) goto done;
  if (o.path) fprintf(stderr, "  wrote %s\n", o.path);
  rc = EXIT_OK;
done:
  fp_diag_free(&d);
  fp_arena_free(ar);
  return rc;
}

/* ---- reshard: a transfer between two plans (planner/reshard.c) ---------------- */
static int cmd_reshard(int argc, char **argv) {
  const char *paths[2] = {NULL, NULL}, *out = NULL, *emit = "summary", *what = "weights";
  const char **pats = calloc((size_t)argc + 1, sizeof *pats);
  int npats = 0, np = 0;
  long long off = 0, foff = 0;
  FP_ASSERT(pats);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-o") || !strcmp(a, "--transform") || !strcmp(a, "--what") || !strcmp(a, "--to-offset") ||
        !strcmp(a, "--from-offset")) {
      if (i + 1 >= argc) {
        free(pats);
        return usage_error("reshard: %s needs a value", a);
      }
      const char *v = argv[++i];
      if (!strcmp(a, "-o")) out = v;
      else if (!strcmp(a, "--what")) what = v;
      else if (!strcmp(a, "--to-offset") || !strcmp(a, "--from-offset")) {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || *end || end == v) {
          free(pats);
          return usage_error("reshard: offset '%s' is not a number", v);
        }
        *(a[2] == 't' ? &off : &foff) = x;
      } else {
        size_t n = strlen(v);
        if (n < 7 || strcmp(v + n - 6, "=mxfp8") != 0) {
          free(pats);
          return usage_error("reshard: --transform '%s': expected PATTERN=mxfp8", v);
        }
        pats[npats++] = v;
      }
    } else if (!strncmp(a, "--emit=", 7)) {
      emit = a + 7;
    } else if (a[0] == '-' && a[1]) {
      free(pats);
      return usage_error("reshard: unknown option '%s'", a);
    } else if (np < 2) {
      paths[np++] = a;
    } else {
      free(pats);
      return usage_error("reshard: expected FROM and TO, got '%s' too", a);
    }
  }
  if (np != 2) {
    free(pats);
    return usage_error("reshard: expected two plans, FROM and TO%s", "");
  }
  if (strcmp(emit, "summary") && strcmp(emit, "ir") && strcmp(emit, "explain") && strcmp(emit, "json") &&
      strcmp(emit, "trace")) {
    free(pats);
    return usage_error("reshard: --emit=%s: expected summary, ir, explain, json or trace", emit);
  }
  fp_arena *ar = fp_arena_new();
  fp_diag d;
  fp_diag_init(&d, stderr);
  /* the patterns without their "=mxfp8" */
  for (int i = 0; i < npats; i++) pats[i] = fp_strndup(ar, pats[i], strlen(pats[i]) - 6);
  int rc = EXIT_INPUT;
  fp_src *src[2];
  fp_prog *prog[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    src[k] = fp_alloc(ar, sizeof *src[k]);
    if (fp_src_read(ar, &d, paths[k], src[k])) prog[k] = fp_plan_read(ar, &d, src[k]);
  }
  if (prog[0] && prog[1]) {
    fp_reshard_opts o = {what, off, foff, pats, npats};
    double t0 = now_ms();
    fp_tx *t = fp_reshard(ar, prog[0], src[0], prog[1], src[1], &o, &d);
    double t1 = now_ms();
    if (t && fp_tx_verify(t, &d)) {
      double t2 = now_ms();
      rc = EXIT_OK;
      out_file of;
      if (out) {
        if (!out_open(&of, out)) rc = EXIT_INPUT;
        else {
          fp_tx_write_json(t, of.f);
          if (!out_commit(&of)) rc = EXIT_INPUT;
        }
      }
      if (rc == EXIT_OK) {
        if (!strcmp(emit, "ir")) fp_tx_print(t, stdout);
        else if (!strcmp(emit, "explain")) fp_tx_explain(t, stdout);
        else if (!strcmp(emit, "json")) fp_tx_write_json(t, stdout);
        else if (!strcmp(emit, "trace")) fp_tx_trace(t, stdout);
        else
          printf("{\"processes\":%lld,\"ops\":%d,\"wire_bytes\":%lld,\"lower_bound_bytes\":%lld,"
                 "\"ratio\":%.3f,\"local_bytes\":%lld,\"max_send_bytes\":%lld,\"max_recv_bytes\":%lld,"
                 "\"compile_ms\":%.3f,\"verify_ms\":%.3f}\n",
                 (long long)t->nprocs, t->nops, (long long)t->wire_bytes, (long long)t->lower_bound,
                 t->lower_bound ? (double)t->wire_bytes / (double)t->lower_bound : 1.0, (long long)t->local_bytes,
                 (long long)t->max_send_bytes, (long long)t->max_recv_bytes, t1 - t0, t2 - t1);
        if (!stdout_written()) rc = EXIT_INPUT;
      }
    }
  }
  fp_diag_free(&d);
  fp_arena_free(ar);
  free(pats);
  return rc;
}

/* ---- viz of a transfer (a flexplan.xfer.v1 file): its trace ------------------- */
static bool is_xfer_file(const char *path) {
  char head[256] = {0};
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(head, 1, sizeof head - 1, f);
  fclose(f);
  head[n] = 0;
  return strstr(head, "\"format\":\"flexplan.xfer.v1\"") != NULL;
}

static int cmd_viz_xfer(int argc, char **argv) {
  const char *path = NULL, *out = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "--format=trace")) continue;
    else if (!strncmp(argv[i], "--format=", 9)) return usage_error("viz: a transfer draws as a trace only, not %s", argv[i] + 9);
    else if (argv[i][0] == '-' && argv[i][1]) return usage_error("viz: option '%s' does not apply to a transfer", argv[i]);
    else if (!path) path = argv[i];
    else return usage_error("viz: expected one file, got '%s' too", argv[i]);
  }
  fp_arena *ar = fp_arena_new();
  fp_diag d;
  fp_diag_init(&d, stderr);
  fp_src *src = fp_alloc(ar, sizeof *src);
  fp_tx *t = fp_src_read(ar, &d, path, src) ? fp_tx_read(ar, &d, src) : NULL;
  int rc = EXIT_INPUT;
  if (t) {
    const char *o = out ? out : fp_sprintf(ar, "%s.xfer.trace.json", t->model && *t->model ? t->model : "transfer");
    out_file of;
    if (out_open(&of, o)) {
      fp_tx_trace(t, of.f);
      if (out_commit(&of)) rc = EXIT_OK;
    }
  }
  fp_diag_free(&d);
  fp_arena_free(ar);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage, stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    fputs(usage, stdout);
    return stdout_written() ? EXIT_OK : EXIT_INPUT;
  }
  if (!strcmp(cmd, "--version")) {
    printf("flexplan %s\n", FP_VERSION);
    return stdout_written() ? EXIT_OK : EXIT_INPUT;
  }
  if (!strcmp(cmd, "compile")) return cmd_compile(argc - 2, argv + 2, false);
  if (!strcmp(cmd, "check")) return cmd_compile(argc - 2, argv + 2, true);
  if (!strcmp(cmd, "simulate")) return cmd_modeled(argc - 2, argv + 2, "simulate", print_simulation);
  if (!strcmp(cmd, "explain")) {
    /* --exposed anywhere after the command: the ranked exposed table instead */
    bool exposed = false;
    int n = 0;
    for (int i = 2; i < argc; i++)
      if (!strcmp(argv[i], "--exposed")) exposed = true;
      else argv[2 + n++] = argv[i];
    return cmd_modeled(n, argv + 2, "explain", exposed ? print_exposed : print_explain);
  }
  if (!strcmp(cmd, "viz") && argc > 2 && is_xfer_file(argv[2])) return cmd_viz_xfer(argc - 2, argv + 2);
  if (!strcmp(cmd, "viz")) return cmd_viz(argc - 2, argv + 2);
  if (!strcmp(cmd, "reshard")) return cmd_reshard(argc - 2, argv + 2);
  if (!strcmp(cmd, "print") || !strcmp(cmd, "verify"))
    return cmd_file(argc - 2, argv + 2, cmd);
  return usage_error("unknown command '%s'", cmd);
}
