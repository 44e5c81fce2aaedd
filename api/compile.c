/* compile.c - the public compile API (include/flexplan_compile.h): the
 * compiler as a library call on the plan handle of flexplan.h, and what the
 * command line writes about a plan, as strings.
 *
 * It sits above the planner, the viewers and the plan loader (it knows the
 * handle's layout, ir/handle.h); the executor itself never calls
 * the planner. A compile runs the CLI's pipeline (inputs, policy, preset,
 * fpi_compile: api/pipeline.c fpa_compile_run, the CLI's too) in its own arena, writes plan.json into
 * memory and reads it back through fpi_plan_read (the loader and verifier of
 * fp_plan_load) into a fresh arena, so a compiled handle is exactly the plan
 * the file would give and the compile's temporaries are freed at once. Messages are the
 * diagnostics' text, which is what the CLI prints for the same input. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api_impl.h"
#include "ir/handle.h"
#include "flexplan_compile.h"
#include "viz/viz.h"

#define DEFAULT_RANKS 16 /* the views: rank 0 and up to 15 other layout classes (as `flexplan viz`) */

/* ---- messages ------------------------------------------------------------------ */
/* replace the handle's message with text[0, n), its last newline dropped;
 * returns st (FP_ERR_NOMEM when even that fails) */
static fp_status set_msg_n(fp_plan *p, fp_status st, const char *text, size_t n) {
  while (n > 0 && text[n - 1] == '\n') n--;
  char *m = malloc(n + 1);
  if (!m) return FP_ERR_NOMEM;
  memcpy(m, text, n);
  m[n] = 0;
  free(p->msg);
  p->msg = m;
  return st;
}

static fp_status set_msg(fp_plan *p, fp_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static fp_status set_msg(fp_plan *p, fp_status st, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return set_msg_n(p, st, buf, strlen(buf));
}

/* the diagnostics' messages as the handle's */
static fp_status diag_msg(fp_plan *p, fp_status st, const fp_diag *d) {
  return d->buf && d->len ? set_msg_n(p, st, d->buf, d->len) : set_msg(p, st, "error: failed (no message)");
}

static char *dup_str(const char *s) {
  size_t n = strlen(s);
  char *m = malloc(n + 1);
  if (m) memcpy(m, s, n + 1);
  return m;
}

/* ---- memory streams ------------------------------------------------------------ */
typedef struct mstream {
  char *buf;
  size_t len;
  FILE *f;
} mstream;

static bool ms_open(mstream *m) {
  m->buf = NULL;
  m->len = 0;
  m->f = open_memstream(&m->buf, &m->len);
  return m->f != NULL;
}

/* close; false (buffer freed) when the stream failed */
static bool ms_close(mstream *m) {
  bool ok = fflush(m->f) == 0 && !ferror(m->f);
  ok = fclose(m->f) == 0 && ok;
  if (!ok) {
    free(m->buf);
    m->buf = NULL;
  }
  return ok;
}

/* ---- compile ------------------------------------------------------------------- */
fp_status fp_plan_compile(const fp_compile_options *opt, fp_plan **out) {
  if (!out) return FP_ERR_ARG;
  fp_plan *p = *out = calloc(1, sizeof *p);
  if (!p) return FP_ERR_NOMEM;
  if (!opt) return set_msg(p, FP_ERR_ARG, "fp_plan_compile: options are NULL");
  if (!opt->model_path && !opt->model_text) return set_msg(p, FP_ERR_ARG, "fp_plan_compile: no model given");
  int policy = fpa_policy_parse(opt->policy ? opt->policy : "flexplan");
  if (policy < 0)
    return set_msg(p, FP_ERR_ARG, "error: unknown policy '%s' (expected flexplan or fsdp2)", opt->policy);
  fp_hw preset;
  if (opt->hardware && !fpa_hw_preset(opt->hardware, &preset) && !fpa_hw_arg_is_file(opt->hardware))
    return set_msg(p, FP_ERR_ARG, "error: unknown hardware preset '%s' (expected one of: %s)", opt->hardware,
                   fpa_hw_preset_list());
  const char *name = opt->model_path ? opt->model_path : "<model>";
  p->name = dup_str(name);
  if (!p->name) return FP_ERR_NOMEM;

  size_t len = 0;
  char *msg = NULL;
  fpa_request rq = {opt->model_path, opt->model_text, opt->spec_path,  opt->spec_text,
                    opt->hardware,   policy,          false,           fpa_placement_plugins(opt->placements)};
  char *text = fpa_compile(&rq, &len, &p->compile_ms, &msg);
  if (!text) {
    fp_status st = msg ? set_msg_n(p, FP_ERR_INPUT, msg, strlen(msg)) : FP_ERR_NOMEM;
    free(msg);
    return st;
  }
  /* the plan as the file would hold it, read back by the loader */
  p->arena = fpi_arena_new();
  fp_src *src = fpi_alloc(p->arena, sizeof *src);
  src->path = fpi_sprintf(p->arena, "%s (compiled plan)", name);
  src->len = len;
  src->text = fpi_strndup(p->arena, text, len);
  free(text);
  fp_diag d;
  fpi_diag_init(&d, NULL);
  fp_status st = FP_OK;
  p->prog = fpi_plan_read(p->arena, &d, src);
  if (!p->prog) { /* the compiler wrote a plan its loader rejects: a bug, reported as a plan error */
    st = diag_msg(p, FP_ERR_PLAN, &d);
    fpi_arena_free(p->arena);
    p->arena = NULL;
  } else {
    p->hash = fpi_prog_hash(p->prog);
    st = set_msg(p, FP_OK, "%s", "");
  }
  fpi_diag_free(&d);
  return st;
}

/* ---- questions and outputs ---------------------------------------------------------- */
static fp_status usable(fp_plan *p) {
  if (!p) return FP_ERR_ARG;
  if (!p->prog) return set_msg(p, FP_ERR_ARG, "the plan failed to load or compile (its message says why)");
  return FP_OK;
}

fp_status fp_plan_summary(fp_plan *plan, char **json) {
  if (!json) return FP_ERR_ARG;
  *json = NULL;
  fp_status st = usable(plan);
  if (st != FP_OK) return st;
  mstream ms;
  if (!ms_open(&ms)) return set_msg(plan, FP_ERR_NOMEM, "out of memory");
  bool have = fpa_plan_summary_json(plan->prog, plan->compile_ms, ms.f);
  if (!ms_close(&ms)) return set_msg(plan, FP_ERR_NOMEM, "out of memory");
  if (!have) {
    free(ms.buf);
    return set_msg(plan, FP_ERR_PLAN, "%s: error: the plan carries no compile figures (\"figures\"): compile it "
                   "again", plan->name ? plan->name : "plan");
  }
  *json = ms.buf;
  return set_msg(plan, FP_OK, "%s", "");
}

fp_status fp_plan_save(fp_plan *plan, const char *path) {
  fp_status st = usable(plan);
  if (st != FP_OK) return st;
  if (!path) return set_msg(plan, FP_ERR_ARG, "fp_plan_save: path is NULL");
  /* whole or not at all, as the CLI writes (fp_out: a temporary renamed
   * over a regular file; a device or FIFO written in place) */
  fp_out o;
  if (!fpi_out_open(&o, path))
    return set_msg(plan, FP_ERR_INPUT, "%s: error: cannot create output: %s", path, strerror(errno));
  errno = 0;
  bool ok = fpi_plan_write(plan->prog, o.f);
  if (!ok) {
    int e = errno;
    fpi_out_abort(&o);
    return set_msg(plan, FP_ERR_INPUT, "%s: error: cannot write output: %s", path, e ? strerror(e) : "write failed");
  }
  if (!fpi_out_commit(&o))
    return set_msg(plan, FP_ERR_INPUT, "%s: error: cannot write output: %s", path,
                   errno ? strerror(errno) : "write failed");
  return set_msg(plan, FP_OK, "%s", "");
}

/* a hardware file into *hw, its name (at most 64 bytes: planner/hwfile.c)
 * copied into namebuf; false with the located error as the handle's */
static bool read_hw_file(fp_plan *plan, const char *path, fp_hw *hw, char namebuf[72]) {
  fp_arena *ar = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  bool ok = fpa_hw_lookup(ar, &d, path, hw) > 0;
  if (ok) {
    snprintf(namebuf, 72, "%s", hw->name);
    hw->name = namebuf;
  } else {
    diag_msg(plan, FP_ERR_INPUT, &d);
  }
  fpi_diag_free(&d);
  fpi_arena_free(ar);
  return ok;
}

fp_status fp_plan_render(fp_plan *plan, fp_render what, const char *hardware, char **out) {
  if (!out) return FP_ERR_ARG;
  *out = NULL;
  fp_status st = usable(plan);
  if (st != FP_OK) return st;
  if ((unsigned)what > FP_RENDER_HTML) return set_msg(plan, FP_ERR_ARG, "fp_plan_render: unknown output %d", (int)what);
  const fp_prog *p = plan->prog;
  const char *name = plan->name ? plan->name : "plan";
  fp_hw hw;
  char hwname[72];
  if (hardware && !fpa_hw_preset(hardware, &hw)) {
    if (!fpa_hw_arg_is_file(hardware))
      return set_msg(plan, FP_ERR_ARG, "error: unknown hardware preset '%s' (expected one of: %s)", hardware,
                     fpa_hw_preset_list());
    if (!read_hw_file(plan, hardware, &hw, hwname)) return FP_ERR_INPUT;
  } else if (hardware) {
    /* the preset, read above */
  } else if (p->hw.name) {
    hw = p->hw;
  } else {
    fpa_hw_preset("h100-sxm", &hw); /* the CLI's choice (it notes it on stderr) */
  }
  mstream ms;
  if (!ms_open(&ms)) return set_msg(plan, FP_ERR_NOMEM, "out of memory");
  fp_arena *ar = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  bool ok = true;
  st = FP_OK;
  switch (what) {
    case FP_RENDER_PLAN: ok = fpi_plan_write(p, ms.f); break;
    case FP_RENDER_IR: fpi_ir_print(p, ms.f); break;
    case FP_RENDER_EXPLAIN:
    case FP_RENDER_SIMULATE: {
      fp_sim sim;
      if (!fpi_simulate(ar, p, &hw, &sim)) {
        st = set_msg(plan, FP_ERR_PLAN, "%s: error: the modeled step time on hardware '%s' is not a finite number: "
                     "its rates are too small for the plan's work", name, hw.name);
        break;
      }
      if (what == FP_RENDER_EXPLAIN)
        fpi_ir_explain_modeled(p, sim.start_us, sim.end_us, ms.f);
      else
        fpi_sim_print(p, &sim, &hw, fpi_sim_memory(ar, p, &sim), ms.f);
      break;
    }
    case FP_RENDER_TRACE:
    case FP_RENDER_HTML: {
      fp_viz v;
      if (!fpi_viz_build(ar, &d, name, p, &hw, NULL, 0, DEFAULT_RANKS, &v)) {
        st = diag_msg(plan, FP_ERR_PLAN, &d);
        break;
      }
      ok = what == FP_RENDER_TRACE ? fpi_viz_trace(&v, ms.f) : fpi_viz_html(&v, ms.f);
      break;
    }
  }
  bool closed = ms_close(&ms);
  fpi_diag_free(&d);
  fpi_arena_free(ar);
  if (st != FP_OK) {
    free(ms.buf);
    return st;
  }
  if (!closed || !ok) {
    free(closed ? ms.buf : NULL);
    return set_msg(plan, FP_ERR_NOMEM, "%s: error: cannot write the output into memory", name);
  }
  *out = ms.buf;
  return set_msg(plan, FP_OK, "%s", "");
}

void fp_free(void *p) { free(p); }
