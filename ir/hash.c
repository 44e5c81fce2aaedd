/* hash.c - the plan's content hash: FNV-1a 64 over a canonical binary walk
 * of the program, never over rendered text.
 *
 * The walk visits what the .fpir text form holds (docs/ir.md), in its
 * order, as 64-bit words (FNV-1a taken a word at a time: xor, multiply by
 * the FNV prime), with the same canonical choices the printer makes: a
 * buffer's live ranges grouped by buffer, an optional field hashed only
 * where the text would print it (a module's saved bytes only when it
 * recomputes; the state dtype only with an optimizer), strings as their
 * length then their bytes. Source lines, op.seg (implied by the segments)
 * and the offsets into prog.uses (their contents count) are not part of a
 * program's meaning and are left out, as are the derived memory timeline and
 * figures. So a program built by the planner, read back from plan.json or
 * parsed from its .fpir hashes the same (tests/test_ir.c checks the three),
 * and writing plan.json costs one pass over the arrays instead of printing
 * the whole program. */
#include "irpriv.h"

#include <stdlib.h>
#include <string.h>

typedef struct hstate {
  uint64_t h;
} hstate;

static void w64(hstate *s, uint64_t w) { s->h = fpi_fnv_word(s->h, w); }
static void wi(hstate *s, int64_t v) { w64(s, (uint64_t)v); }
static void wd(hstate *s, double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  w64(s, u);
}
/* a string: its length, then 8 bytes per word (NULL: a word of ones) */
static void wstr(hstate *s, const char *p) { s->h = fpi_fnv_str_words(s->h, p); }
static void wreg(hstate *s, const fp_region *r) {
  wi(s, r->buf);
  wi(s, r->tabrel);
  wi(s, r->off);
  wi(s, r->stride);
}
static void wview(hstate *s, const fp_view *v) {
  wi(s, v->buf);
  wi(s, v->off);
}

/* the header: model, mesh, sizes, hardware, optimizer */
static void hash_header(hstate *s, const fp_prog *p) {
  wstr(s, p->model);
  wstr(s, p->strategy);
  wi(s, p->world_size);
  wi(s, p->ranks_per_node);
  wi(s, p->grad_accumulation);
  if (p->tp != 1) { /* only where set: every other plan's hash is unchanged */
    wi(s, 0x7e9);
    wi(s, p->tp);
  }
  wi(s, p->arena_bytes);
  wi(s, p->host_bytes);
  wi(s, p->nevents);
  wi(s, p->memory_budget_bytes > 0 ? p->memory_budget_bytes : 0);
  wstr(s, p->hw.name);
  if (p->hw.name)
    for (int k = 0; k < FP_HW_NFIELDS; k++) {
      if (FPI_HW_OMITTED(&p->hw, k)) continue;
      if (fp_hw_fields[k].integer)
        wi(s, fpi_hw_geti(&p->hw, k));
      else
        wd(s, fpi_hw_getd(&p->hw, k));
    }
  wi(s, p->optim);
  if (p->optim != FP_OPTIM_NONE) wi(s, p->optim_dtype);
}

/* communicators, tables, bucket names */
static void hash_declarations(hstate *s, const fp_prog *p) {
  wi(s, p->ncomms);
  for (int32_t i = 0; i < p->ncomms; i++) {
    wstr(s, p->comms[i].name);
    wi(s, p->comms[i].size);
    wi(s, p->comms[i].stride);
  }
  wi(s, p->ntabs);
  for (int32_t i = 0; i < p->ntabs; i++) {
    const fp_ir_table *t = &p->tabs[i];
    wstr(s, t->name);
    wi(s, t->n);
    for (int64_t k = 0; k < t->n; k++) wi(s, t->off[k]), wi(s, t->cnt[k]);
  }
  wi(s, p->nbuckets);
  for (int32_t i = 0; i < p->nbuckets; i++) wstr(s, p->buckets[i]);
}

/* buffers, each with its live ranges in their order (grouped per buffer as
 * the text form writes them: a counting sort by buffer), then the live
 * ranges of no buffer */
static void hash_buffers(hstate *s, const fp_prog *p) {
  int32_t *start = calloc((size_t)p->nbufs + 2, sizeof *start), *ord = malloc(sizeof *ord * ((size_t)p->nlives + 1));
  FP_ASSERT(start && ord);
  for (int32_t k = 0; k < p->nlives; k++)
    if (p->lives[k].buf >= 0 && p->lives[k].buf < p->nbufs) start[p->lives[k].buf + 2]++;
  for (int32_t b = 0; b < p->nbufs; b++) start[b + 2] += start[b + 1];
  for (int32_t k = 0; k < p->nlives; k++)
    if (p->lives[k].buf >= 0 && p->lives[k].buf < p->nbufs) ord[start[p->lives[k].buf + 1]++] = k;
  wi(s, p->nbufs);
  for (int32_t i = 0; i < p->nbufs; i++) {
    const fp_ir_buf *b = &p->bufs[i];
    wstr(s, b->name);
    wi(s, b->kind);
    wi(s, b->cat);
    wi(s, b->bucket);
    wi(s, b->host);
    wi(s, b->bytes);
    wi(s, b->offset);
    wi(s, start[i + 1] - start[i]);
    for (int32_t k = start[i]; k < start[i + 1]; k++) wi(s, p->lives[ord[k]].first), wi(s, p->lives[ord[k]].last);
  }
  int32_t orphan = 0; /* live ranges of no buffer (a broken program): counted, in order */
  for (int32_t k = 0; k < p->nlives; k++)
    if (p->lives[k].buf < 0 || p->lives[k].buf >= p->nbufs) orphan++, wi(s, p->lives[k].buf);
  wi(s, orphan);
  free(start);
  free(ord);
}

/* modules */
static void hash_modules(hstate *s, const fp_prog *p) {
  wi(s, p->nmods);
  for (int32_t i = 0; i < p->nmods; i++) {
    const fp_ir_module *m = &p->mods[i];
    wstr(s, m->name);
    wd(s, m->flops_fwd);
    wd(s, m->flops_bwd);
    wi(s, m->activation_bytes);
    wi(s, m->recompute);
    if (m->recompute) wi(s, m->saved_bytes);
  }
}

/* params: shape, dtypes, placement, views, tied users */
static void hash_params(hstate *s, const fp_prog *p) {
  wi(s, p->nparams);
  for (int32_t i = 0; i < p->nparams; i++) {
    const fp_ir_param *q = &p->params[i];
    int nd = q->ndim < 0 ? 0 : q->ndim > 8 ? 8 : q->ndim;
    wstr(s, q->name);
    wi(s, nd);
    for (int k = 0; k < nd; k++) wi(s, q->shape[k]);
    wi(s, q->module);
    wi(s, q->bucket);
    wi(s, q->main_dtype);
    wi(s, q->param_dtype);
    wi(s, q->grad_dtype);
    wi(s, q->requires_grad);
    wi(s, q->placement);
    wi(s, q->dim);
    wi(s, q->comm);
    wi(s, q->owner);
    wi(s, q->tab);
    wi(s, q->chunk);
    if (q->tp_dim != -1) { /* only where set */
      wi(s, 0x7e9d);
      wi(s, q->tp_dim);
    }
    wview(s, &q->main);
    wview(s, &q->grad);
    wview(s, &q->weight);
    wview(s, &q->ugrad);
    wview(s, &q->opt);
    if (q->scales.buf >= 0) { /* only where present: every other plan's hash is unchanged */
      wi(s, 0x5ca1e5);
      wview(s, &q->scales);
    }
    int32_t nu = q->users ? q->nusers : 0;
    wi(s, nu);
    for (int32_t k = 0; k < nu; k++) wi(s, q->users[k]);
  }
}

/* the step: segments, then ops */
static void hash_step(hstate *s, const fp_prog *p) {
  wi(s, p->nsegs);
  for (int32_t i = 0; i < p->nsegs; i++) {
    const fp_seg *g = &p->segs[i];
    wi(s, g->kind);
    wi(s, g->module);
    wi(s, g->micro);
    wi(s, g->first);
    wi(s, g->nops);
  }
  wi(s, p->nops);
  for (int32_t i = 0; i < p->nops; i++) {
    const fp_op *op = &p->ops[i];
    wi(s, (int64_t)op->code | (int64_t)op->stream << 8 | (int64_t)op->dtype << 16 | (int64_t)op->sdtype << 24 |
               (int64_t)op->pass << 32 | (int64_t)op->red << 40);
    wi(s, op->count);
    wreg(s, &op->dst);
    wreg(s, &op->src);
    wreg(s, &op->aux);
    wi(s, op->comm);
    wi(s, op->tab);
    wi(s, op->root);
    wi(s, op->only);
    wi(s, op->only_comm);
    wi(s, op->event);
    wi(s, op->module);
    wd(s, op->alpha);
    fp_op_shape sh = fpi_op_shape_of(p, op);
    wi(s, sh.rows);
    wi(s, sh.dpitch);
    wi(s, sh.spitch);
    wi(s, op->bucket);
    wi(s, op->group);
    bool uses = op->nuses > 0 && op->uses >= 0 && op->uses <= p->nuses - op->nuses;
    wi(s, uses ? op->nuses : 0);
    for (int32_t k = 0; uses && k < op->nuses; k++) wi(s, p->uses[op->uses + k]);
  }
}

uint64_t fpi_prog_hash(const fp_prog *p) {
  hstate s = {FP_FNV_INIT};
  hash_header(&s, p);
  hash_declarations(&s, p);
  hash_buffers(&s, p);
  hash_modules(&s, p);
  hash_params(&s, p);
  hash_step(&s, p);
  return s.h;
}
