/* plan_load.c - the public plan handle: load a plan.json through the IR's
 * reader (which trusts nothing: strict JSON, every member type- and
 * range-checked, the content hash recomputed, the whole verifier run), and
 * answer questions about it; plus the API's small name tables (statuses,
 * element types, hooks) and the version.
 *
 * A failed load still returns a handle that holds the reader's located
 * messages; everything the reader allocated is freed with its arena, so a
 * tampered, truncated or hostile file leaks nothing (tests/test_exec_plan.c,
 * run under ASan). Checks that depend on the rank (operands resolved against
 * the arena, views, tables) are made by fp_exec_create (executor/exec.c). */
#include <stdlib.h>
#include <string.h>

#include "ir/handle.h"

/* ---- names ----------------------------------------------------------------- */
const char *fp_version(void) { return FP_VERSION_STRING; }

const char *fp_status_name(fp_status s) {
  static const char *const names[] = {"FP_OK",           "FP_ERR_ARG",     "FP_ERR_PLAN",
                                      "FP_ERR_ORDER",    "FP_ERR_MISMATCH", "FP_ERR_WEIGHTS",
                                      "FP_ERR_BACKEND",  "FP_ERR_NOMEM",    "FP_ERR_INPUT",
                                      "FP_ERR_TIMEOUT"};
  return (unsigned)s < sizeof names / sizeof *names ? names[s] : "FP_ERR_?";
}

int fp_elem_size(fp_elem t) { return (unsigned)t < FP_NDTYPES ? fpi_dtype_size((fp_dtype)t) : 0; }
const char *fp_elem_name(fp_elem t) { return (unsigned)t < FP_NDTYPES ? fpi_dtype_name((fp_dtype)t) : "?"; }
const char *fp_hook_name(fp_hook h) { return (unsigned)h < FP_NSEGKINDS ? fpi_seg_name((int)h) : NULL; }

/* ---- loading ----------------------------------------------------------------- */
static char *dup_msg(const char *s, size_t n) {
  while (n > 0 && s[n - 1] == '\n') n--; /* the last line's newline */
  char *m = malloc(n + 1);
  if (!m) return NULL;
  memcpy(m, s, n);
  m[n] = 0;
  return m;
}

static fp_status plan_fail(fp_plan *p, fp_status st, const char *msg, size_t len) {
  free(p->msg);
  p->msg = dup_msg(msg, len);
  fpi_arena_free(p->arena);
  p->arena = NULL;
  p->prog = NULL;
  return p->msg ? st : FP_ERR_NOMEM;
}

fp_status fp_plan_load(const char *path, fp_plan **out) { return fp_plan_load_flags(path, 0, out); }

fp_status fp_plan_load_flags(const char *path, unsigned flags, fp_plan **out) {
  if (!out) return FP_ERR_ARG;
  fp_plan *p = *out = calloc(1, sizeof *p);
  if (!p) return FP_ERR_NOMEM;
  if (!path) {
    static const char m[] = "fp_plan_load: path is NULL";
    return plan_fail(p, FP_ERR_ARG, m, sizeof m - 1);
  }
  fp_status st = FP_OK;
  fp_diag d;
  fpi_diag_init(&d, NULL);
  d.max_errors = 20; /* enough to see what is wrong; a hostile file may have thousands */
  p->arena = fpi_arena_new();
  fp_src src;
  if ((flags & FP_LOAD_SEMANTIC) && (flags & FP_LOAD_NO_SEMANTIC)) {
    static const char m[] = "fp_plan_load_flags: FP_LOAD_SEMANTIC and FP_LOAD_NO_SEMANTIC together";
    fpi_diag_free(&d);
    return plan_fail(p, FP_ERR_ARG, m, sizeof m - 1);
  }
  if (flags & ~(FP_LOAD_SEMANTIC | FP_LOAD_NO_SEMANTIC)) {
    static const char m[] = "fp_plan_load_flags: unknown flags (FP_LOAD_SEMANTIC, FP_LOAD_NO_SEMANTIC)";
    fpi_diag_free(&d);
    return plan_fail(p, FP_ERR_ARG, m, sizeof m - 1);
  }
  p->sem = flags & FP_LOAD_SEMANTIC ? FP_PLAN_SEM_PASSED : flags & FP_LOAD_NO_SEMANTIC ? FP_PLAN_SEM_SKIPPED
                                                                                    : FP_PLAN_SEM_UNCHECKED;
  unsigned vf = flags & FP_LOAD_SEMANTIC ? FP_VERIFY_SEM : 0;
  if (!fpi_src_read(p->arena, &d, path, &src) || !(p->prog = fpi_plan_read_flags(p->arena, &d, &src, vf))) {
    FP_ASSERT(d.nerrors > 0 && d.buf); /* the reader reports every rejection */
    st = plan_fail(p, FP_ERR_PLAN, d.buf, d.len);
    goto fail;
  }
  p->hash = fpi_prog_hash(p->prog);
  p->msg = dup_msg("", 0);
  p->name = dup_msg(path, strlen(path));
  if (!p->msg || !p->name) st = FP_ERR_NOMEM;
fail:
  fpi_diag_free(&d);
  return st;
}

const char *fp_plan_errmsg(const fp_plan *plan) { return plan && plan->msg ? plan->msg : ""; }

void fp_plan_free(fp_plan *plan) {
  if (!plan) return;
  fpi_arena_free(plan->arena);
  free(plan->msg);
  free(plan->name);
  free(plan);
}

/* ---- questions ------------------------------------------------------------------ */
fp_status fp_plan_get_info(const fp_plan *plan, fp_plan_info *out) {
  if (!plan || !plan->prog || !out) return FP_ERR_ARG;
  const fp_prog *p = plan->prog;
  *out = (fp_plan_info){
      .model = p->model,
      .strategy = p->strategy,
      .world_size = p->world_size,
      .grad_accumulation = p->grad_accumulation,
      .arena_bytes = p->arena_bytes,
      .host_bytes = p->host_bytes,
      .nmodules = p->nmods,
      .nparams = p->nparams,
      .nsegments = p->nsegs,
      .nops = p->nops,
      .hash = plan->hash,
      .optimizer = fpi_optim_name(p->optim),
      .optim_states = fpi_optim_states(p->optim),
      .optim_dtype = (fp_elem)p->optim_dtype,
      .tp_size = p->tp,
  };
  return FP_OK;
}

int32_t fp_plan_param_tp_dim(const fp_plan *plan, int32_t i) {
  if (!plan || !plan->prog || i < 0 || i >= plan->prog->nparams) return -2;
  return plan->prog->params[i].tp_dim;
}

int fp_plan_param_weight_persistent(const fp_plan *plan, int32_t i) {
  if (!plan || !plan->prog || i < 0 || i >= plan->prog->nparams) return -1;
  const fp_prog *p = plan->prog;
  int32_t b = p->params[i].weight.buf;
  return b >= 0 && p->bufs[b].kind == FP_BUF_PERSISTENT;
}

const char *fp_plan_module_name(const fp_plan *plan, int32_t m) {
  if (!plan || !plan->prog || m < 0 || m >= plan->prog->nmods) return NULL;
  return plan->prog->mods[m].name;
}

int32_t fp_plan_module_uses(const fp_plan *plan, int32_t m, int32_t *params, int32_t cap) {
  if (!plan || !plan->prog || m < 0 || m >= plan->prog->nmods || cap < 0 || (cap > 0 && !params)) return -1;
  const fp_prog *p = plan->prog;
  int32_t n = 0;
  for (int32_t i = 0; i < p->nparams; i++)
    for (int32_t k = 0; k < p->params[i].nusers; k++)
      if (p->params[i].users[k] == m) {
        if (n < cap) params[n] = i;
        n++;
      }
  return n;
}

_Static_assert((int)FP_SEG_STEP_BEGIN == (int)FP_HOOK_STEP_BEGIN && (int)FP_SEG_PRE_FORWARD == (int)FP_HOOK_PRE_FORWARD &&
                   (int)FP_SEG_POST_FORWARD == (int)FP_HOOK_POST_FORWARD &&
                   (int)FP_SEG_PRE_BACKWARD == (int)FP_HOOK_PRE_BACKWARD &&
                   (int)FP_SEG_POST_BACKWARD == (int)FP_HOOK_POST_BACKWARD &&
                   (int)FP_SEG_PRE_OPTIMIZER == (int)FP_HOOK_PRE_OPTIMIZER &&
                   (int)FP_SEG_POST_OPTIMIZER == (int)FP_HOOK_POST_OPTIMIZER,
               "segment kinds are hooks");

fp_status fp_plan_segment_at(const fp_plan *plan, int32_t i, fp_plan_segment *out) {
  if (!plan || !plan->prog || !out || i < 0 || i >= plan->prog->nsegs) return FP_ERR_ARG;
  const fp_prog *p = plan->prog;
  const fp_seg *s = &p->segs[i];
  int32_t ops = 0;
  for (int32_t k = s->first; k < s->first + s->nops; k++)
    if (p->ops[k].code != FP_OP_COMPUTE) ops++;
  *out = (fp_plan_segment){.hook = (fp_hook)s->kind, .module = s->module, .micro = s->micro, .ops = ops};
  return FP_OK;
}

int fp_plan_module_recompute(const fp_plan *plan, int32_t m) {
  if (!plan || !plan->prog || m < 0 || m >= plan->prog->nmods) return -1;
  return plan->prog->mods[m].recompute ? 1 : 0;
}

int32_t fp_plan_module_index(const fp_plan *plan, const char *name) {
  if (!plan || !plan->prog || !name) return -1;
  for (int32_t m = 0; m < plan->prog->nmods; m++)
    if (!strcmp(plan->prog->mods[m].name, name)) return m;
  return -1;
}
