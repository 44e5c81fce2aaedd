/* html.c - fpi_viz_html: a view as one self-contained HTML page (docs/viz.md).
 *
 * The page is a short static summary, the view's data as JSON in a
 * <script type="application/json"> element, and the viewer (viz/viz.js and
 * viz/viz.css, compiled in by viz/embed.cmake) that draws it as SVG: a lane
 * per stream and rank, a box per op, arrows for waits, exposed communication
 * on the compute lane, and the memory chart; zoom and pan redraw it, merging
 * boxes narrower than a pixel. A Content-Security-Policy allows nothing from
 * outside the page, so it fetches nothing (and a browser would refuse if it
 * tried). The data is columnar (one array per field) to keep large plans
 * small: llama3-405b's 10,875 ops make about 1 MB. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jw.h"
#include "viz.h"

extern const char fp_viz_js[];
extern const char fp_viz_css[];

/* the exposed_rank rows: the largest first, then by op */
typedef struct exposed_row {
  double us;
  int32_t at;
} exposed_row;

static int cmp_exposed_row(const void *x, const void *y) {
  const exposed_row *a = x, *b = y;
  if (a->us != b->us) return a->us < b->us ? 1 : -1;
  return (a->at > b->at) - (a->at < b->at);
}

/* "name":[v(0), v(1), ...] over n items; fn writes item k */
typedef void (*item_fn)(FILE *f, const fp_viz *v, int32_t k);

static void column(FILE *f, const char *name, const fp_viz *v, int32_t n, item_fn fn, bool comma) {
  fprintf(f, "%s\"%s\":[", comma ? "," : "", name);
  for (int32_t k = 0; k < n; k++) {
    if (k) fputc(',', f);
    fn(f, v, k);
  }
  fputc(']', f);
}

#define OPCOL(nm, expr)                                              \
  static void nm(FILE *f, const fp_viz *v, int32_t k) {              \
    const fp_op *op = &v->p->ops[k];                                 \
    (void)op;                                                        \
    expr;                                                            \
  }
OPCOL(op_code, fprintf(f, "%d", (int)op->code))
OPCOL(op_stream, fprintf(f, "%d", (int)op->stream))
OPCOL(op_seg, fprintf(f, "%" PRId32, op->seg))
OPCOL(op_bucket, fprintf(f, "%" PRId32, op->bucket))
OPCOL(op_group, fprintf(f, "%" PRId32, op->group))
OPCOL(op_comm, fprintf(f, "%" PRId32, op->comm))
OPCOL(op_dtype, fprintf(f, "%d", (int)op->dtype))
OPCOL(op_sdtype, fprintf(f, "%d", (int)op->sdtype))
OPCOL(op_count, fpi_jw_i64(f, op->count))
OPCOL(op_event, fprintf(f, "%" PRId32, op->event))
OPCOL(op_module, fprintf(f, "%" PRId32, op->module))
OPCOL(op_pass, fprintf(f, "%d", (int)op->pass))
OPCOL(op_dst, fprintf(f, "%" PRId32, op->dst.buf))
OPCOL(op_src, fprintf(f, "%" PRId32, op->src.buf))
OPCOL(op_only, fprintf(f, "%" PRId32, op->only))
OPCOL(op_flops, fprintf(f, "%.6g", op->code == FP_OP_COMPUTE ? op->alpha : 0.0))
OPCOL(op_st, fpi_jw_us(f, v->sim.start_us[k]))
OPCOL(op_en, fpi_jw_us(f, v->sim.end_us[k]))
OPCOL(op_bytes, fpi_jw_i64(f, fpi_viz_bytes(v, k, v->ranks[0].rank)))

static void seg_label(FILE *f, const fp_viz *v, int32_t k) {
  char buf[512];
  fpi_viz_seg_label(v, k, buf, sizeof buf);
  fpi_jw_str(f, buf);
}
static void seg_st(FILE *f, const fp_viz *v, int32_t k) { fpi_jw_us(f, v->sim.segs[k].start_us); }
static void seg_en(FILE *f, const fp_viz *v, int32_t k) { fpi_jw_us(f, v->sim.segs[k].end_us); }
static void seg_kind(FILE *f, const fp_viz *v, int32_t k) { fprintf(f, "%d", (int)v->p->segs[k].kind); }
static void seg_mod(FILE *f, const fp_viz *v, int32_t k) { fprintf(f, "%" PRId32, v->p->segs[k].module); }

static void buf_name(FILE *f, const fp_viz *v, int32_t k) { fpi_jw_str(f, v->p->bufs[k].name); }
static void buf_cat(FILE *f, const fp_viz *v, int32_t k) { fprintf(f, "%d", (int)v->p->bufs[k].cat); }
static void buf_bytes(FILE *f, const fp_viz *v, int32_t k) { fpi_jw_i64(f, v->p->bufs[k].bytes); }
static void buf_pers(FILE *f, const fp_viz *v, int32_t k) {
  fputc(v->p->bufs[k].kind == FP_BUF_PERSISTENT ? '1' : '0', f);
}
static void buf_host(FILE *f, const fp_viz *v, int32_t k) { fputc(v->p->bufs[k].host ? '1' : '0', f); }
static void buf_bucket(FILE *f, const fp_viz *v, int32_t k) { fprintf(f, "%" PRId32, v->p->bufs[k].bucket); }

static void life_buf(FILE *f, const fp_viz *v, int32_t k) { fprintf(f, "%" PRId32, v->lives[k].buf); }
static void life_mod(FILE *f, const fp_viz *v, int32_t k) { fprintf(f, "%" PRId32, v->lives[k].module); }
static void life_micro(FILE *f, const fp_viz *v, int32_t k) { fprintf(f, "%" PRId32, v->lives[k].micro); }
static void life_cat(FILE *f, const fp_viz *v, int32_t k) { fprintf(f, "%d", v->lives[k].cat); }
static void life_bytes(FILE *f, const fp_viz *v, int32_t k) { fpi_jw_i64(f, v->lives[k].bytes); }
static void life_t0(FILE *f, const fp_viz *v, int32_t k) { fpi_jw_us(f, v->lives[k].t0); }
static void life_t1(FILE *f, const fp_viz *v, int32_t k) { fpi_jw_us(f, v->lives[k].t1); }

static void name_list(FILE *f, const char *key, const char *const *names, int32_t n, bool comma) {
  fprintf(f, "%s\"%s\":[", comma ? "," : "", key);
  for (int32_t k = 0; k < n; k++) {
    if (k) fputc(',', f);
    fpi_jw_str(f, names[k]);
  }
  fputc(']', f);
}

/* the page's "meta": the plan, the model's figures, the time range */
static void write_meta(FILE *f, const fp_viz *v) {
  const fp_prog *p = v->p;
  fputs("{\"meta\":{\"model\":", f);
  fpi_jw_str(f, p->model);
  fputs(",\"strategy\":", f);
  fpi_jw_str(f, p->strategy);
  fprintf(f, ",\"world_size\":%" PRId64 ",\"ranks_per_node\":%" PRId64 ",\"grad_accumulation\":%" PRId64,
          p->world_size, p->ranks_per_node, p->grad_accumulation);
  if (p->tp > 1) fprintf(f, ",\"tp\":%" PRId64, p->tp);
  fprintf(f, ",\"hash\":\"fnv1a64:%016" PRIx64 "\",\"hardware\":", v->hash);
  fpi_jw_str(f, v->hw.name);
  fputs(",\"step_us\":", f);
  fpi_jw_us(f, v->sim.step_us);
  fputs(",\"compute_us\":", f);
  fpi_jw_us(f, v->sim.compute_us);
  fputs(",\"exposed_us\":", f);
  fpi_jw_us(f, v->sim.exposed_comm_us);
  fputs(",\"t_lo\":", f);
  fpi_jw_us(f, v->t_lo);
  fputs(",\"t_hi\":", f);
  fpi_jw_us(f, v->t_hi);
  fprintf(f, ",\"arena_bytes\":%" PRId64 ",\"peak_bytes\":%" PRId64 ",\"lower_bound_bytes\":%" PRId64
             ",\"budget\":%" PRId64 ",\"budget_from_plan\":%s,\"hbm_bytes\":%" PRId64 ",\"nclasses\":%" PRId32
             ",\"nops\":%" PRId32 "}",
          p->arena_bytes, v->tl->peak_bytes, v->tl->lower_bound_bytes, v->budget, v->budget_from_plan ? "true" : "false",
          v->hw.hbm_bytes, v->nclasses, p->nops);
}

/* the name tables (streams, categories, opcodes, ...), the buckets, modules and communicators */
static void write_names(FILE *f, const fp_viz *v) {
  const fp_prog *p = v->p;
  const char *streams[FP_NSTREAMS], *cats[FP_MEMTL_NCATS], *opnames[FP_NOPS], *opcls[FP_NOPS], *dtypes[FP_NDTYPES],
      *segkinds[FP_NSEGKINDS];
  static const char *const clsname[] = {"comm", "local", "sync", "compute"};
  for (int s = 0; s < FP_NSTREAMS; s++) streams[s] = fpi_stream_name(s);
  for (int c = 0; c < FP_MEMTL_NCATS; c++) cats[c] = fpi_memtl_cat_name(c);
  for (int c = 0; c < FP_NOPS; c++) opnames[c] = fpi_op_name((fp_opcode)c), opcls[c] = clsname[fpi_op_class((fp_opcode)c)];
  for (int c = 0; c < FP_NDTYPES; c++) dtypes[c] = fpi_dtype_name((fp_dtype)c);
  for (int c = 0; c < FP_NSEGKINDS; c++) segkinds[c] = fpi_seg_name(c);
  name_list(f, "streams", streams, FP_NSTREAMS, true);
  name_list(f, "cats", cats, FP_MEMTL_NCATS, true);
  name_list(f, "opnames", opnames, FP_NOPS, true);
  name_list(f, "opclass", opcls, FP_NOPS, true);
  name_list(f, "dtypes", dtypes, FP_NDTYPES, true);
  name_list(f, "segkinds", segkinds, FP_NSEGKINDS, true);
  fputc('\n', f);
  name_list(f, "buckets", p->buckets, p->nbuckets, true);
  fputs(",\"mods\":[", f);
  for (int32_t k = 0; k < p->nmods; k++) {
    if (k) fputc(',', f);
    fpi_jw_str(f, p->mods[k].name);
  }
  fputs("],\"comms\":[", f);
  for (int32_t k = 0; k < p->ncomms; k++) {
    if (k) fputc(',', f);
    fpi_jw_str(f, p->comms[k].name);
  }
}

/* the buffers, segments and ops, one column per field */
static void write_tables(FILE *f, const fp_viz *v) {
  const fp_prog *p = v->p;
  fputs("]\n,\"bufs\":{", f);
  column(f, "name", v, p->nbufs, buf_name, false);
  column(f, "cat", v, p->nbufs, buf_cat, true);
  column(f, "bytes", v, p->nbufs, buf_bytes, true);
  column(f, "persistent", v, p->nbufs, buf_pers, true);
  column(f, "host", v, p->nbufs, buf_host, true);
  column(f, "bucket", v, p->nbufs, buf_bucket, true);
  fputs("}\n,\"segs\":{", f);
  column(f, "label", v, p->nsegs, seg_label, false);
  column(f, "kind", v, p->nsegs, seg_kind, true);
  column(f, "mod", v, p->nsegs, seg_mod, true);
  column(f, "st", v, p->nsegs, seg_st, true);
  column(f, "en", v, p->nsegs, seg_en, true);
  fputs("}\n,\"ops\":{", f);
  static const struct {
    const char *name;
    item_fn fn;
  } opcols[] = {{"code", op_code},   {"stream", op_stream}, {"seg", op_seg},     {"bucket", op_bucket},
                {"group", op_group}, {"comm", op_comm},     {"dtype", op_dtype}, {"sdtype", op_sdtype},
                {"count", op_count}, {"ev", op_event},      {"mod", op_module},  {"pass", op_pass},
                {"dst", op_dst},     {"src", op_src},       {"only", op_only},   {"flops", op_flops},
                {"st", op_st},       {"en", op_en},         {"bytes", op_bytes}};
  for (size_t c = 0; c < sizeof opcols / sizeof opcols[0]; c++) {
    column(f, opcols[c].name, v, p->nops, opcols[c].fn, c > 0);
    fputc('\n', f);
  }
}

/* the flows, and per rank shown what differs from the first and the ends of each flow */
static void write_ranks(FILE *f, const fp_viz *v) {
  const fp_prog *p = v->p;
  fputs("}\n,\"flows\":[", f);
  for (int32_t j = 0; j < v->nflows; j++)
    fprintf(f, "%s[%" PRId32 ",%" PRId32 ",%d]", j ? "," : "", v->flows[j].wait, v->flows[j].record,
            v->flows[j].next_step ? 1 : 0);
  fputs("]\n,\"ranks\":[", f);
  for (int32_t k = 0; k < v->nranks; k++) {
    const fp_viz_rank *R = &v->ranks[k];
    fprintf(f, "%s{\"rank\":%" PRId64 ",\"cls\":%" PRId32 ",\"members\":%" PRId64 ",\"skip\":[", k ? "\n," : "",
            R->rank, R->cls, R->members);
    bool first = true;
    for (int32_t i = 0; i < p->nops; i++)
      if (!fpi_viz_runs(v, i, R->rank)) fprintf(f, "%s%" PRId32, first ? "" : ",", i), first = false;
    fputs("],\"bytes\":[", f);
    first = true;
    for (int32_t j = 0; j < v->nrdep; j++) {
      int32_t i = v->rdep[j];
      int64_t b = fpi_viz_bytes(v, i, R->rank);
      if (b != fpi_viz_bytes(v, i, v->ranks[0].rank))
        fprintf(f, "%s[%" PRId32 ",%" PRId64 "]", first ? "" : ",", i, b), first = false;
    }
    fputs("],\"flows\":[", f);
    for (int32_t j = 0; j < v->nflows; j++) {
      int32_t from, to;
      fpi_viz_flow_ends(v, &v->flows[j], R->rank, &from, &to);
      fprintf(f, "%s[%" PRId32 ",%" PRId32 "]", j ? "," : "", from, to);
    }
    fputs("]}", f);
  }
}

/* the exposed communication, in time and ranked */
static void write_exposed(FILE *f, const fp_viz *v) {
  const fp_prog *p = v->p;
  fputs("]\n,\"exposed\":[", f);
  for (int32_t j = 0; j < v->nexposed; j++) {
    const fp_viz_exposed *x = &v->exposed[j];
    fputs(j ? ",[" : "[", f);
    fpi_jw_us(f, x->t0);
    fputc(',', f);
    fpi_jw_us(f, x->t1);
    fprintf(f, ",%" PRId32 ",%" PRId32 "]", x->op, x->cause);
  }
  /* the exposed communication ranked as `flexplan explain --exposed` ranks
   * it (the simulator's charge per wait): [wait, op waited for, us], the
   * largest first */
  fputs("]\n,\"exposed_rank\":[", f);
  int32_t nr = 0;
  for (int32_t i = 0; i < p->nops; i++) nr += v->sim.exposed_us[i] > 0;
  exposed_row *rk = fpi_alloc_array(v->a, (size_t)nr + 1, sizeof *rk);
  nr = 0;
  for (int32_t i = 0; i < p->nops; i++)
    if (v->sim.exposed_us[i] > 0) rk[nr++] = (exposed_row){v->sim.exposed_us[i], i};
  qsort(rk, (size_t)nr, sizeof *rk, cmp_exposed_row);
  for (int32_t j = 0; j < nr; j++) {
    fprintf(f, "%s[%" PRId32 ",%" PRId32 ",", j ? "," : "", rk[j].at, v->sim.exposed_by[rk[j].at]);
    fpi_jw_us(f, rk[j].us);
    fputc(']', f);
  }
}

/* the memory timeline and the live ranges; closes the data object */
static void write_memory(FILE *f, const fp_viz *v) {
  fputs("]\n,\"mem\":{\"pts\":[", f);
  for (int32_t k = 0; k < v->tl->npts; k++) {
    const fp_memtl_point *q = &v->tl->pts[k];
    fputs(k ? ",[" : "[", f);
    fpi_jw_us(f, q->t_us);
    for (int c = 0; c < FP_MEMTL_NCATS; c++) fprintf(f, ",%" PRId64, q->bytes[c]);
    fputc(']', f);
  }
  fprintf(f, "],\"peak\":%" PRId32 ",\"persistent\":[", v->peak);
  for (int c = 0; c < FP_MEMTL_NCATS; c++)
    fprintf(f, "%s[%" PRId64 ",%" PRId32 "]", c ? "," : "", v->persistent_bytes[c], v->persistent_count[c]);
  fputs("]}\n,\"lives\":{", f);
  column(f, "buf", v, v->nlives, life_buf, false);
  column(f, "mod", v, v->nlives, life_mod, true);
  column(f, "micro", v, v->nlives, life_micro, true);
  column(f, "cat", v, v->nlives, life_cat, true);
  column(f, "bytes", v, v->nlives, life_bytes, true);
  column(f, "t0", v, v->nlives, life_t0, true);
  column(f, "t1", v, v->nlives, life_t1, true);
  fputs("}}\n", f);
}

/* the measured steps (--measured): per record its rank, step, file, end,
 * each hook's enter and leave, and each op's start and end (-1 where the
 * rank did not run it), in microseconds from the step's step_begin */
static void write_measured(FILE *f, const fp_viz *v) {
  const fp_prog *p = v->p;
  fputs("]\n,\"measured\":[", f);
  for (int32_t k = 0; k < v->nmeasured; k++) {
    const fp_viz_measured *m = &v->measured[k];
    fprintf(f, "%s{\"rank\":%" PRId64 ",\"step\":%" PRId64 ",\"path\":", k ? "\n," : "", m->rank, m->step);
    fpi_jw_str(f, m->path);
    fputs(",\"end\":", f);
    fpi_jw_us(f, m->end_us);
    const struct {
      const char *name;
      const double *t;
      int32_t n, stride;
    } cols[] = {{"hook_st", m->hook_t, p->nsegs, 0}, {"hook_en", m->hook_t, p->nsegs, 1},
                {"st", m->op_t, p->nops, 0},         {"en", m->op_t, p->nops, 1}};
    for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
      fprintf(f, ",\"%s\":[", cols[c].name);
      for (int32_t i = 0; i < cols[c].n; i++) {
        double t = cols[c].t[2 * i + cols[c].stride];
        if (i) fputc(',', f);
        if (t < 0)
          fputs("-1", f); /* not run by this rank */
        else
          fpi_jw_us(f, t);
      }
      fputc(']', f);
    }
    fputc('}', f);
  }
}

static void write_data(FILE *f, const fp_viz *v) {
  write_meta(f, v);
  write_names(f, v);
  write_tables(f, v);
  write_ranks(f, v);
  write_exposed(f, v);
  write_measured(f, v);
  write_memory(f, v);
}

bool fpi_viz_html(const fp_viz *v, FILE *f) {
  const fp_prog *p = v->p;
  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>flexplan: ",
        f);
  fpi_html_text(f, p->model ? p->model : "plan");
  fputs(v->nmeasured ? " (modeled and measured)</title>\n<style>\n" : " (modeled schedule)</title>\n<style>\n", f);
  fputs(fp_viz_css, f);
  fputs("</style>\n</head>\n<body>\n<header id=\"summary\"><h1>flexplan: ", f);
  fpi_html_text(f, p->model ? p->model : "plan");
  fputs("</h1> <span class=\"sub\">", f);
  fpi_html_text(f, p->strategy ? p->strategy : "");
  fprintf(f, ", %" PRId64 " ranks", p->world_size);
  if (p->tp > 1) fprintf(f, " (dp %" PRId64 " x tp %" PRId64 ", bytes per rank tp-local)", p->world_size / p->tp, p->tp);
  fputs(", modeled on ", f);
  fpi_html_text(f, v->hw.name ? v->hw.name : "?");
  fprintf(f, "; plan fnv1a64:%016" PRIx64 "; %s</span></header>\n", v->hash,
          v->nmeasured ? "every time on this page is modeled, except in the rows marked measured (the executor's records)"
                       : "every time on this page is modeled, not measured");
  if (p->tp > 1) { /* the dp groups, per tp index (digits and words only: no escaping needed) */
    fputs("<pre class=\"mesh\">", f);
    fpi_ir_mesh_text(f, "", p->world_size, p->tp);
    fputs("</pre>\n", f);
  }
  fputs("<noscript><p>This page draws the plan with JavaScript.</p></noscript>\n<div id=\"app\"></div>\n"
        "<script type=\"application/json\" id=\"fpdata\">\n",
        f);
  write_data(f, v);
  fputs("</script>\n<script>\n", f);
  fputs(fp_viz_js, f);
  fputs("</script>\n</body>\n</html>\n", f);
  return !ferror(f);
}
