/* reshard.c - the public transfer compiler (include/flexplan_compile.h
 * fp_reshard_compile, fp_xfer_render): two plan handles into a verified
 * transfer program (planner/reshard.c, ir/verify_xfer.c), and its text
 * forms. Running it is the executor's (executor/xfer.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/handle.h"
#include "flexplan_compile.h"
#include "ir/xfer.h"
#include "planner/reshard.h"
#include "api/api_impl.h"

static fp_status set(fp_xfer *t, fp_status st, const char *text) {
  char *m = strdup(text ? text : "");
  if (m) {
    free(t->msg);
    t->msg = m;
  }
  return st;
}

fp_status fp_reshard_compile(const fp_plan *from, const fp_plan *to, const fp_reshard_options *opt, fp_xfer **out) {
  if (!out) return FP_ERR_ARG;
  fp_xfer *t = calloc(1, sizeof *t);
  *out = t;
  if (!t) return FP_ERR_NOMEM;
  if (!from || !to || !from->prog || !to->prog) return set(t, FP_ERR_ARG, "fp_reshard_compile: a plan is NULL or failed to load");
  t->arena = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  fp_reshard_opts o = {0};
  if (opt)
    o = (fp_reshard_opts){opt->what,  opt->to_offset, opt->from_offset, opt->mxfp8, opt->nmxfp8,
                          fpa_transforms(opt->transforms), opt->transform_rules, opt->ntransform_rules};
  fp_tx *tx = fpi_reshard(t->arena, from->prog, NULL, to->prog, NULL, &o, &d);
  if (tx && !fpi_tx_verify(tx, &d)) tx = NULL;
  fp_status st = tx ? FP_OK : FP_ERR_INPUT;
  if (!tx) {
    /* name the plans the handles came from */
    char *m = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&m, &n);
    if (f) {
      const char *txt = d.buf ? d.buf : "";
      fprintf(f, "%s", txt);
      fclose(f);
      set(t, st, m);
      free(m);
    }
    /* "<to>" / "<from>" are the plans' names when they have one */
    if (t->msg && (from->name || to->name)) {
      fp_sbuf b = {0};
      for (const char *s = t->msg; *s;) {
        if (strncmp(s, "<from>", 6) == 0 && from->name) fpi_sb_puts(&b, from->name), s += 6;
        else if (strncmp(s, "<to>", 4) == 0 && to->name) fpi_sb_puts(&b, to->name), s += 4;
        else fpi_sb_putc(&b, *s++);
      }
      set(t, st, b.p);
      free(b.p);
    }
  }
  fpi_diag_free(&d);
  t->tx = tx;
  if (tx && tx->nxf) st = fp_xfer_bind_transforms(t, opt ? opt->transforms : NULL);
  return st;
}

fp_status fp_xfer_render(fp_xfer *t, int what, char **out) {
  if (!t || !out) return FP_ERR_ARG;
  *out = NULL;
  if (!t->tx) return set(t, FP_ERR_ARG, "fp_xfer_render: the transfer failed to compile");
  if (what < 0 || what > 3) return set(t, FP_ERR_ARG, "fp_xfer_render: unknown form");
  char *m = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&m, &n);
  if (!f) return set(t, FP_ERR_NOMEM, "out of memory");
  switch (what) {
    case 0: fpi_tx_write_json(t->tx, f); break;
    case 1: fpi_tx_print(t->tx, f); break;
    case 2: fpi_tx_explain(t->tx, f); break;
    default: fpi_tx_trace(t->tx, f); break;
  }
  if (fclose(f) != 0) {
    free(m);
    return set(t, FP_ERR_NOMEM, "out of memory");
  }
  *out = m;
  return FP_OK;
}
