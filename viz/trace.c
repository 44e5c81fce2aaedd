/* trace.c - fpi_viz_trace: a view as Chrome Trace Event JSON (the JSON Object
 * Format of the "Trace Event Format" document), which Perfetto
 * (ui.perfetto.dev) and chrome://tracing open. docs/viz.md describes the
 * file; tests/viz_trace_check.py checks its structure.
 *
 *   pid      one per rank shown: rank + 1 (Perfetto treats pid 0 as the
 *            kernel's swapper), named "rank R" by process_name metadata
 *   tid      one per stream: pid * 10 + stream + 1, named by thread_name
 *   X        every op that runs on the rank, sync ops with zero duration;
 *            args: op index, segment, stream, bucket, bytes, modeled times
 *   s / f    a flow per wait: from the op before its record to the op after
 *            the wait ("bp": "e": bound to the slice around the finish)
 *   C        the memory timeline by category, and the budget
 *   b / e    the live intervals of transient buffers and activations (they
 *            overlap, so they are async events, not X)
 *   M        names, sort order; "otherData" holds the plan hash and says
 *            that every time is modeled
 *   measured with --measured: one more process per measured rank (pid
 *            1000000 + rank) with the executor's recorded times: X per op
 *            (a grouped collective as one slice), per hook, and per
 *            stretch of the trainer's own work between hooks
 * ts is microseconds from the earliest op's start (the simulator's times
 * shifted by -t_lo, so no ts is negative); args give the simulator's own. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "jw.h"
#include "viz.h"

typedef struct tw {
  FILE *f;
  bool first; /* no event written yet */
  double t0;  /* the simulator's time at ts 0 */
} tw;

static void ev_begin(tw *w) {
  fputs(w->first ? "\n" : ",\n", w->f);
  w->first = false;
}

/* microseconds rounded as the file writes them, so that dur = end - start
 * exactly and back-to-back slices never overlap by a rounding (Perfetto
 * drops an X that overlaps its neighbour on a track by 1 ns) */
static double r3(double us) { return round(us * 1000) / 1000; }

static void ts(tw *w, double t_us) {
  fputs("\"ts\":", w->f);
  fpi_jw_us(w->f, r3(t_us - w->t0));
}

/* "ts":..,"dur":.. of a slice from t0 to t1 (simulator times): dur is the
 * rounded end minus the rounded start */
static void ts_dur(tw *w, double t0, double t1) {
  ts(w, t0);
  fputs(",\"dur\":", w->f);
  fpi_jw_us(w->f, r3(t1 - w->t0) - r3(t0 - w->t0));
}

static int64_t pid_of(int64_t rank) { return rank + 1; }
static int64_t tid_of(int64_t rank, int s) { return pid_of(rank) * 10 + s + 1; }

static void meta(tw *w, const char *name, int64_t pid, int64_t tid, const char *key, const char *sval, int64_t ival) {
  ev_begin(w);
  fprintf(w->f, "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%" PRId64, name, pid);
  if (tid >= 0) fprintf(w->f, ",\"tid\":%" PRId64, tid);
  fprintf(w->f, ",\"args\":{\"%s\":", key);
  if (sval)
    fpi_jw_str(w->f, sval);
  else
    fpi_jw_i64(w->f, ival);
  fputs("}}", w->f);
}

/* The last op of the group that starts at op i on its stream (i when op i is
 * not grouped): a group's members are issued together and complete as one
 * (ncclGroupStart/End), the simulator gives them one span, and one slice
 * draws them - members drawn apart would nest falsely on their track. */
static int32_t group_last(const fp_viz *v, int64_t rank, int32_t i) {
  const fp_prog *p = v->p;
  int32_t last = i;
  if (p->ops[i].group < 0) return i;
  for (int32_t j = i + 1; j < p->nops && p->ops[j].group == p->ops[i].group && p->ops[j].stream == p->ops[i].stream;
       j++)
    if (fpi_viz_runs(v, j, rank)) last = j;
  return last;
}

/* the X slice of op i, or of the group of ops i..last (see group_last) */
static void op_event(tw *w, const fp_viz *v, int64_t rank, int32_t i, int32_t last) {
  const fp_prog *p = v->p;
  const fp_op *op = &p->ops[i];
  FILE *f = w->f;
  char buf[600], lab[512];
  double st = v->sim.start_us[i], en = v->sim.end_us[i];
  int64_t bytes = 0;
  int32_t nmem = 0;
  for (int32_t j = i; j <= last; j++) {
    if (!fpi_viz_runs(v, j, rank)) continue;
    st = fmin(st, v->sim.start_us[j]);
    en = fmax(en, v->sim.end_us[j]);
    bytes += fpi_viz_bytes(v, j, rank);
    nmem++;
  }
  ev_begin(w);
  fpi_viz_op_label(v, i, lab, sizeof lab);
  if (nmem > 1)
    snprintf(buf, sizeof buf, "group %" PRId32 ": %s + %" PRId32 " more", op->group, lab, nmem - 1);
  else
    snprintf(buf, sizeof buf, "%s", lab);
  fputs("{\"ph\":\"X\",\"name\":", f);
  fpi_jw_str(f, buf);
  static const char *const cls[] = {"comm", "local", "sync", "compute"};
  fprintf(f, ",\"cat\":\"%s\",\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",", cls[fpi_op_class(op->code)], pid_of(rank),
          tid_of(rank, op->stream));
  ts_dur(w, st, en);
  fprintf(f, ",\"args\":{\"op\":%" PRId32 ",", i);
  if (last > i) fprintf(f, "\"last_op\":%" PRId32 ",", last);
  fprintf(f, "\"opcode\":\"%s\",\"segment\":", fpi_op_name(op->code));
  fpi_viz_seg_label(v, op->seg, buf, sizeof buf);
  fpi_jw_str(f, buf);
  fprintf(f, ",\"stream\":\"%s\",\"bucket\":", fpi_stream_name(op->stream));
  fpi_jw_str(f, op->bucket >= 0 && op->bucket < p->nbuckets ? p->buckets[op->bucket] : NULL);
  fputs(",\"bytes\":", f);
  fpi_jw_i64(f, bytes);
  fputs(",\"modeled_us\":", f);
  fpi_jw_us(f, en - st);
  fputs(",\"modeled_start_us\":", f);
  fpi_jw_us(f, st);
  fputs(",\"modeled_end_us\":", f);
  fpi_jw_us(f, en);
  fp_opclass c = fpi_op_class(op->code);
  if (c == FP_OPC_COMM || c == FP_OPC_LOCAL) {
    fprintf(f, ",\"dtype\":\"%s\"", fpi_dtype_name(op->dtype));
    if (op->comm >= 0 && op->comm < p->ncomms) {
      fputs(",\"comm\":", f);
      fpi_jw_str(f, p->comms[op->comm].name);
    }
    if (fpi_op_reduces(op->code)) fprintf(f, ",\"red\":\"%s\"", fpi_redop_name(op->red));
  }
  if (op->group >= 0) fprintf(f, ",\"group\":%" PRId32, op->group);
  if (c == FP_OPC_SYNC) fprintf(f, ",\"event\":%" PRId32, op->event);
  if (op->code == FP_OP_COMPUTE) fprintf(f, ",\"flops\":%.6g", op->alpha);
  if (op->only >= 0) fprintf(f, ",\"rank_index\":%" PRId64, fpi_viz_g(v, i, rank));
  fputs("}}", f);
}

static void flow_event(tw *w, const fp_viz *v, int64_t rank, int32_t i, const char *ph, int64_t id,
                       const char *name) {
  /* bound inside the op's slice: its middle (an instant's own time) */
  double t = (v->sim.start_us[i] + v->sim.end_us[i]) / 2;
  ev_begin(w);
  fprintf(w->f, "{\"ph\":\"%s\",%s\"id\":%" PRId64 ",\"name\":", ph, ph[0] == 'f' ? "\"bp\":\"e\"," : "", id);
  fpi_jw_str(w->f, name);
  fprintf(w->f, ",\"cat\":\"dependency\",\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",", pid_of(rank),
          tid_of(rank, v->p->ops[i].stream));
  ts(w, t);
  fputs("}", w->f);
}

static void counters(tw *w, const fp_viz *v, int64_t rank) {
  const fp_memtl *tl = v->tl;
  FILE *f = w->f;
  for (int32_t k = 0; k <= tl->npts && tl->npts > 0; k++) {
    /* the last point again at the end of the step, so the track spans it */
    const fp_memtl_point *q = &tl->pts[k < tl->npts ? k : tl->npts - 1];
    double t = k < tl->npts ? q->t_us : fmax(v->t_hi, q->t_us);
    ev_begin(w);
    fprintf(f, "{\"ph\":\"C\",\"name\":\"memory (modeled)\",\"pid\":%" PRId64 ",", pid_of(rank));
    ts(w, t);
    fputs(",\"args\":{", f);
    for (int c = 0; c < FP_MEMTL_NCATS; c++) fprintf(f, "%s\"%s\":%" PRId64, c ? "," : "", fpi_memtl_cat_name(c), q->bytes[c]);
    fputs("}}", f);
  }
  for (int k = 0; k < 2; k++) {
    ev_begin(w);
    fprintf(f, "{\"ph\":\"C\",\"name\":\"%s\",\"pid\":%" PRId64 ",",
            v->budget_from_plan ? "memory budget" : "device memory (no budget in the plan)", pid_of(rank));
    ts(w, k ? v->t_hi : v->t_lo);
    fprintf(f, ",\"args\":{\"bytes\":%" PRId64 "}}", v->budget);
  }
}

static void lifetimes(tw *w, const fp_viz *v, int64_t rank, int64_t *id) {
  const fp_prog *p = v->p;
  FILE *f = w->f;
  for (int32_t k = 0; k < v->nlives; k++) {
    const fp_viz_life *l = &v->lives[k];
    char name[512];
    if (l->buf >= 0)
      snprintf(name, sizeof name, "%s", p->bufs[l->buf].name ? p->bufs[l->buf].name : "?");
    else
      snprintf(name, sizeof name, "activations %s mb%" PRId32, p->mods[l->module].name, l->micro);
    int64_t my = ++*id;
    for (int e = 0; e < 2; e++) {
      ev_begin(w);
      fprintf(f, "{\"ph\":\"%c\",\"cat\":\"memory\",\"id\":%" PRId64 ",\"name\":", e ? 'e' : 'b', my);
      fpi_jw_str(f, name);
      fprintf(f, ",\"pid\":%" PRId64 ",", pid_of(rank));
      ts(w, e ? l->t1 : l->t0);
      if (!e) {
        fprintf(f, ",\"args\":{\"category\":\"%s\",\"bytes\":%" PRId64 ",\"from_op\":%" PRId32 ",\"to_op\":%" PRId32,
                fpi_memtl_cat_name(l->cat), l->bytes, l->first, l->last);
        if (l->buf >= 0) fprintf(f, ",\"offset\":%" PRId64, p->bufs[l->buf].offset);
        fputs(",\"modeled_start_us\":", f);
        fpi_jw_us(f, l->t0);
        fputs(",\"modeled_end_us\":", f);
        fpi_jw_us(f, l->t1);
        fputs("}", f);
      }
      fputs("}", f);
    }
  }
}

/* ---- measured steps --------------------------------------------------------------- */
/* A measured rank is its own process, after the modeled ones: pid
 * MEASURED_PID + rank, threads for the three streams, the trainer's hooks and
 * the trainer's work between them. ts is the record's own (microseconds from
 * the step's step_begin entry). */
#define MEASURED_PID 1000000
enum { MT_HOOKS = FP_NSTREAMS, MT_TRAINER = FP_NSTREAMS + 1, MT_N = FP_NSTREAMS + 2 };

static int64_t mpid(const fp_viz_measured *m) { return MEASURED_PID + m->rank; }
static int64_t mtid(const fp_viz_measured *m, int t) { return mpid(m) * 10 + t + 1; }


static void mslice(tw *w, const fp_viz_measured *m, int t, const char *name, const char *cat, double t0, double t1) {
  ev_begin(w);
  fputs("{\"ph\":\"X\",\"name\":", w->f);
  fpi_jw_str(w->f, name);
  fprintf(w->f, ",\"cat\":\"%s\",\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",\"ts\":", cat, mpid(m), mtid(m, t));
  fpi_jw_us(w->f, r3(t0));
  fputs(",\"dur\":", w->f);
  fpi_jw_us(w->f, r3(t1) - r3(t0));
}

/* the trainer's work between two hooks, named by the hook that ends it */
static void trainer_label(const fp_viz *v, int32_t next, char *buf, size_t cap) {
  const fp_seg *s = &v->p->segs[next];
  const char *mod = s->module >= 0 && s->module < v->p->nmods ? v->p->mods[s->module].name : "";
  switch (s->kind) {
    case FP_SEG_POST_FORWARD: snprintf(buf, cap, "forward %s", mod); break;
    case FP_SEG_POST_BACKWARD: snprintf(buf, cap, "backward %s", mod); break;
    case FP_SEG_POST_OPTIMIZER: snprintf(buf, cap, "optimizer"); break;
    default: snprintf(buf, cap, "trainer, before %s", fpi_seg_name((int)s->kind)); break;
  }
}

static void measured_events(tw *w, const fp_viz *v, const fp_viz_measured *m) {
  const fp_prog *p = v->p;
  char buf[640], lab[512];
  snprintf(buf, sizeof buf, "rank %" PRId64 " measured (step %" PRId64 ")", m->rank, m->step);
  meta(w, "process_name", mpid(m), -1, "name", buf, 0);
  meta(w, "process_labels", mpid(m), -1, "labels", m->path, 0);
  meta(w, "process_sort_index", mpid(m), -1, "sort_index", NULL, v->nranks + (m - v->measured));
  static const char *const extra[] = {"hooks", "trainer"};
  for (int t = 0; t < MT_N; t++) {
    meta(w, "thread_name", mpid(m), mtid(m, t), "name", t < FP_NSTREAMS ? fpi_stream_name(t) : extra[t - FP_NSTREAMS], 0);
    meta(w, "thread_sort_index", mpid(m), mtid(m, t), "sort_index", NULL, t);
  }
  for (int32_t k = 0; k < p->nsegs; k++) {
    fpi_viz_seg_label(v, k, buf, sizeof buf);
    mslice(w, m, MT_HOOKS, buf, "hook", m->hook_t[2 * k], m->hook_t[2 * k + 1]);
    fprintf(w->f, ",\"args\":{\"segment\":%" PRId32 "}}", k);
    if (k + 1 < p->nsegs && m->hook_t[2 * k + 2] > m->hook_t[2 * k + 1]) {
      trainer_label(v, k + 1, buf, sizeof buf);
      mslice(w, m, MT_TRAINER, buf, "compute", m->hook_t[2 * k + 1], m->hook_t[2 * k + 2]);
      fputs("}", w->f);
    }
  }
  /* ops; a group (issued together, completed in order) is one slice */
  static const char *const cls[] = {"comm", "local", "sync", "compute"};
  for (int32_t i = 0; i < p->nops; i++) {
    if (m->op_t[2 * i] < 0) continue;
    const fp_op *op = &p->ops[i];
    int32_t last = i;
    double t0 = m->op_t[2 * i], t1 = m->op_t[2 * i + 1];
    if (op->group >= 0)
      for (int32_t j = i + 1; j < p->nops && p->ops[j].group == op->group && p->ops[j].stream == op->stream; j++) {
        if (m->op_t[2 * j] < 0) continue;
        last = j;
        t0 = fmin(t0, m->op_t[2 * j]), t1 = fmax(t1, m->op_t[2 * j + 1]);
      }
    fpi_viz_op_label(v, i, lab, sizeof lab);
    if (last > i) snprintf(buf, sizeof buf, "group %" PRId32 ": %s + %" PRId32 " more", op->group, lab, last - i);
    else snprintf(buf, sizeof buf, "%s", lab);
    mslice(w, m, op->stream, buf, cls[fpi_op_class(op->code)], t0, t1);
    fprintf(w->f, ",\"args\":{\"op\":%" PRId32 ",\"last_op\":%" PRId32 ",\"measured_us\":", i, last);
    fpi_jw_us(w->f, t1 - t0);
    fputs(",\"modeled_us\":", w->f);
    fpi_jw_us(w->f, v->sim.end_us[last] - v->sim.start_us[i]);
    fputs("}}", w->f);
    i = last;
  }
}

/* time the trainer spent inside hooks in a measured step */
static double in_hooks(const fp_viz *v, const fp_viz_measured *m) {
  double t = 0;
  for (int32_t k = 0; k < v->p->nsegs; k++) t += m->hook_t[2 * k + 1] - m->hook_t[2 * k];
  return t;
}

bool fpi_viz_trace(const fp_viz *v, FILE *f) {
  const fp_prog *p = v->p;
  tw w = {f, true, v->t_lo};
  char buf[512];
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"generator\":\"flexplan viz " FP_VERSION "\",\"timing\":\"%s\",",
          v->nmeasured ? "modeled and measured" : "modeled");
  fprintf(f, "\"note\":\"every time in this trace%s is modeled by flexplan's simulator (docs/cost-model.md), not measured; "
          "ts 0 is the earliest modeled op start of the steady-state step\",",
          v->nmeasured ? " outside the 'measured' processes" : "");
  fprintf(f, "\"plan_hash\":\"fnv1a64:%016" PRIx64 "\",\"model\":", v->hash);
  fpi_jw_str(f, p->model);
  fputs(",\"strategy\":", f);
  fpi_jw_str(f, p->strategy);
  fprintf(f, ",\"world_size\":%" PRId64 ",\"hardware\":", p->world_size);
  fpi_jw_str(f, v->hw.name);
  fputs(",\"modeled_step_us\":", f);
  fpi_jw_us(f, v->sim.step_us);
  fputs(",\"modeled_exposed_comm_us\":", f);
  fpi_jw_us(f, v->sim.exposed_comm_us);
  fputs(",\"ts_origin_us\":", f);
  fpi_jw_us(f, v->t_lo);
  fprintf(f, ",\"memory_budget_bytes\":%" PRId64 ",\"budget_source\":\"%s\",\"layout_classes\":%" PRId32,
          v->budget, v->budget_from_plan ? "plan" : "device memory (the plan has no budget)", v->nclasses);
  if (v->nmeasured) {
    fputs(",\"measured\":[", f);
    for (int32_t k = 0; k < v->nmeasured; k++) {
      const fp_viz_measured *m = &v->measured[k];
      fprintf(f, "%s{\"rank\":%" PRId64 ",\"step\":%" PRId64 ",\"file\":", k ? "," : "", m->rank, m->step);
      fpi_jw_str(f, m->path);
      fputs(",\"step_us\":", f);
      fpi_jw_us(f, m->end_us);
      fputs(",\"in_hooks_us\":", f);
      fpi_jw_us(f, in_hooks(v, m));
      fputs("}", f);
    }
    fputs("],\"measured_note\":\"processes named 'measured' hold times the executor recorded "
          "(fp_exec_timing_write), ts 0 at the step's step_begin entry\"", f);
  }
  fputs("},\n", f);
  fputs("\"traceEvents\":[", f);

  int64_t id = 0;
  for (int32_t k = 0; k < v->nranks; k++) {
    const fp_viz_rank *R = &v->ranks[k];
    int64_t pid = pid_of(R->rank);
    snprintf(buf, sizeof buf, "rank %" PRId64, R->rank);
    meta(&w, "process_name", pid, -1, "name", buf, 0);
    snprintf(buf, sizeof buf, "modeled; layout class %" PRId32 " of %" PRId32 " (%" PRId64 " rank%s)", R->cls + 1,
             v->nclasses, R->members, R->members == 1 ? "" : "s");
    meta(&w, "process_labels", pid, -1, "labels", buf, 0);
    meta(&w, "process_sort_index", pid, -1, "sort_index", NULL, k);
    for (int s = 0; s < FP_NSTREAMS; s++) {
      meta(&w, "thread_name", pid, tid_of(R->rank, s), "name", fpi_stream_name(s), 0);
      meta(&w, "thread_sort_index", pid, tid_of(R->rank, s), "sort_index", NULL, s);
    }
  }
  for (int32_t k = 0; k < v->nranks; k++) {
    int64_t r = v->ranks[k].rank;
    for (int32_t i = 0; i < p->nops; i++) {
      if (!fpi_viz_runs(v, i, r)) continue;
      int32_t last = group_last(v, r, i);
      op_event(&w, v, r, i, last);
      i = last;
    }
    for (int32_t j = 0; j < v->nflows; j++) {
      const fp_viz_flow *fl = &v->flows[j];
      int32_t from, to;
      fpi_viz_flow_ends(v, fl, r, &from, &to);
      snprintf(buf, sizeof buf, "e%" PRId32 ": op %" PRId32 " -> op %" PRId32 "%s", p->ops[fl->wait].event, from, to,
               fl->next_step ? " (next step)" : "");
      ++id;
      flow_event(&w, v, r, from, "s", id, buf);
      flow_event(&w, v, r, to, "f", id, buf);
    }
    counters(&w, v, r);
    lifetimes(&w, v, r, &id);
  }
  for (int32_t k = 0; k < v->nmeasured; k++) measured_events(&w, v, &v->measured[k]);
  fputs("\n]}\n", f);
  return !ferror(f);
}
