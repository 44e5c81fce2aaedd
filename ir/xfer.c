/* xfer.c - transfer programs (xfer.h): the builder, the figures, and the
 * ways a transfer is shown: the .fpir-style text (`flexplan reshard
 * --emit=ir`), the explain table, JSON ("flexplan.xfer.v1", `-o`) and a
 * Chrome trace (`flexplan viz` of a transfer). */
#include "xfer.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[FP_TX_NKINDS] = {"copy",         "send",       "recv",
                                                     "quantize_mxfp8", "dequantize_mxfp8", "mxfp8_scales",
                                                     "max_scales",   "quantize_mxfp8_at", "prep_send", "finalize"};
const char *fpi_tx_kind_name(int k) { return k >= 0 && k < FP_TX_NKINDS ? kind_names[k] : "?"; }
const char *fpi_tx_space_name(int s) {
  static const char *const n[] = {"-", "from", "to", "stage"};
  return s >= 0 && s <= FP_SP_STAGE ? n[s] : "?";
}

int64_t fpi_tx_head(int64_t full_off, int64_t n) {
  int64_t r = full_off % 32;
  int64_t h = r ? 32 - r : 0;
  return h < n ? h : n;
}
int64_t fpi_tx_nscales(int64_t full_off, int64_t n) {
  int64_t h = fpi_tx_head(full_off, n);
  return (h > 0 ? 1 : 0) + (n - h + 31) / 32;
}

int fpi_xf_builtin_mode(const char *name) {
  return !name ? -1 : !strcmp(name, "mxfp8") || !strcmp(name, "mxfp8_sender") ? 0 : !strcmp(name, "mxfp8_receiver") ? 1 : -1;
}

void fpi_xf_mxfp8_wires(int mode, fp_dtype from, int64_t begin, int64_t count, fp_tx_wire *out, int *n) {
  if (mode == 0) {
    out[0] = (fp_tx_wire){FP_E4M3, count};
    out[1] = (fp_tx_wire){FP_E8M0, fpi_tx_nscales(begin, count)};
    *n = 2;
  } else {
    out[0] = (fp_tx_wire){from, count};
    *n = 1;
  }
}

static bool is_float(fp_dtype d) { return d == FP_F32 || d == FP_BF16 || d == FP_F16; }
bool fpi_xf_mxfp8_takes(fp_dtype from, fp_dtype to) { return is_float(from) && is_float(to); }

static bool builtin_should(void *ctx, const fpi_xf_param *p) {
  (void)ctx;
  return fpi_xf_mxfp8_takes(p->from, p->to);
}

static bool builtin_wires(void *ctx, bool recv, const fpi_xf_param *p, int64_t begin, int64_t count, fp_tx_wire *out,
                          int *n, char *err, size_t errcap) {
  (void)recv, (void)err, (void)errcap;
  fpi_xf_mxfp8_wires((int)(intptr_t)ctx, p->from, begin, count, out, n);
  return true;
}

const fpi_xform *fpi_xf_builtin_shapes(const char *name) {
  static const fpi_xform v[3] = {{"mxfp8", (void *)0, builtin_should, builtin_wires, NULL, NULL},
                                 {"mxfp8_sender", (void *)0, builtin_should, builtin_wires, NULL, NULL},
                                 {"mxfp8_receiver", (void *)1, builtin_should, builtin_wires, NULL, NULL}};
  for (int k = 0; k < 3; k++)
    if (name && !strcmp(name, v[k].name)) return &v[k];
  return NULL;
}

fp_tx *fpi_tx_new(fp_arena *a) {
  fp_tx *t = fpi_alloc(a, sizeof *t);
  t->arena = a;
  t->what = "weights";
  return t;
}

fp_tx_op *fpi_tx_emit(fp_tx *t, fp_tx_kind k, int32_t proc, int32_t param, fp_dtype dt, int64_t n) {
  t->ops = fpi_grow(t->arena, t->ops, &t->cap_ops, t->nops + 1, sizeof *t->ops);
  fp_tx_op *o = &t->ops[t->nops++];
  *o = (fp_tx_op){.kind = k, .proc = proc, .peer = -1, .param = param, .dtype = dt, .sdtype = dt, .n = n,
                  .plane = (unsigned)t->plane};
  o->dst.space = o->src.space = o->aux.space = FP_SP_NONE;
  return o;
}

int32_t fpi_tx_wires_add(fp_tx *t, const fp_tx_wire *w, int n) {
  t->wires = fpi_grow(t->arena, t->wires, &t->cap_wires, t->nwires + n + 1, sizeof *t->wires);
  FP_ASSERT(t->nwires + n < INT32_MAX);
  int32_t at = (int32_t)t->nwires;
  memcpy(t->wires + at, w, (size_t)n * sizeof *w);
  t->nwires += n;
  return at;
}

int64_t fpi_tx_wire_at(const fp_tx *t, const fp_tx_op *o, int k) {
  int64_t at = 0;
  for (int j = 0; j < k && j < (int)o->nwire; j++) {
    const fp_tx_wire *w = &t->wires[fpi_tx_wire0(o) + j];
    at += (w->count * fpi_dtype_size(w->dtype) + 15) / 16 * 16;
  }
  return at;
}
int64_t fpi_tx_scratch_at(const fp_tx *t, const fp_tx_op *o) { return fpi_tx_wire_at(t, o, o->nwire); }
int64_t fpi_tx_stage_need(const fp_tx *t, const fp_tx_op *o) {
  int64_t w = fpi_tx_wire_at(t, o, o->nwire);
  return o->kind == FP_TX_FINALIZE ? w + 2 * FP_TX_GUARD + (o->n * fpi_dtype_size(o->dtype) + 15) / 16 * 16 : w;
}

void fpi_tx_region_add(fp_tx *t, bool need, int32_t proc, int32_t param, int64_t off, int64_t bytes,
                      int64_t full_off, fp_dtype dt) {
  fp_tx_region **v = need ? &t->need : &t->have;
  int32_t *n = need ? &t->nneed : &t->nhave;
  int64_t *cap = need ? &t->cap_need : &t->cap_have;
  *v = fpi_grow(t->arena, *v, cap, *n + 1, sizeof **v);
  (*v)[(*n)++] = (fp_tx_region){proc, param, off, bytes, full_off, dt, t->plane};
}

int64_t fpi_tx_dst_bytes(const fp_tx *t, const fp_tx_op *o) {
  return o->kind == FP_TX_SEND        ? 0
         : o->kind == FP_TX_SCALES    ? fpi_tx_nscales(o->full_off, o->n)
         : o->kind == FP_TX_PREP_SEND ? fpi_tx_wire_at(t, o, o->nwire)
                                      : o->n * fpi_dtype_size(o->dtype);
}
int64_t fpi_tx_src_bytes(const fp_tx *t, const fp_tx_op *o) {
  return o->kind == FP_TX_RECV       ? 0
         : o->kind == FP_TX_FINALIZE ? fpi_tx_wire_at(t, o, o->nwire)
                                     : o->n * fpi_dtype_size(o->sdtype);
}

int32_t fpi_tx_segment_end(const fp_tx *t, int32_t i, int32_t hi) {
  int32_t end = i + 1;
  while (end < hi && !fpi_tx_waits(&t->ops[end])) end++;
  return end;
}

int32_t fpi_tx_copy_run(const fp_tx *t, int32_t i, int32_t hi, int64_t *n) {
  const fp_tx_op *a = &t->ops[i];
  *n = a->n;
  if (a->kind != FP_TX_COPY) return i + 1;
  int64_t ds = fpi_dtype_size(a->dtype), ss = fpi_dtype_size(a->sdtype), dst = a->dst.off, src = a->src.off;
  int32_t j = i + 1;
  for (; j < hi; j++) {
    const fp_tx_op *b = &t->ops[j];
    if (b->kind != FP_TX_COPY || b->dtype != a->dtype || b->sdtype != a->sdtype || b->dst.space != a->dst.space ||
        b->src.space != a->src.space || b->dst.off != dst + *n * ds || b->src.off != src + *n * ss)
      break;
    *n += b->n;
  }
  return j;
}

/* Sorts n records of size sz stably by the int32_t process at byte offset
 * at of each (a counting sort into a copy: O(n + nprocs); applying the
 * permutation in place by its cycles saved the copy's memory but took
 * fpi_tx_finish from 5% to 20% of llama3-405b 16,384 -> 8,192's profile);
 * returns first[nprocs + 1] (records of process p
 * are [first[p], first[p+1])) in t's arena. */
static int32_t *group_by_proc(fp_tx *t, void *v, int32_t n, size_t sz, size_t at) {
  int32_t *first = fpi_alloc_array(t->arena, (size_t)t->nprocs + 2, sizeof *first);
  char *b = v;
  bool sorted = true;
  for (int32_t i = 0; i < n; i++) {
    int32_t p, q = -1;
    memcpy(&p, b + (size_t)i * sz + at, sizeof p);
    if (i) memcpy(&q, b + (size_t)(i - 1) * sz + at, sizeof q);
    FP_ASSERT(p >= 0 && p < t->nprocs);
    first[p + 1]++;
    sorted &= p >= q;
  }
  for (int64_t p = 0; p < t->nprocs; p++) first[p + 1] += first[p];
  if (sorted) return first; /* already grouped (a transfer read back) */
  char *out = malloc(((size_t)n + 1) * sz);
  int32_t *next = malloc(((size_t)t->nprocs + 1) * sizeof *next);
  FP_ASSERT(out && next);
  memcpy(next, first, (size_t)t->nprocs * sizeof *next);
  for (int32_t i = 0; i < n; i++) {
    int32_t p;
    memcpy(&p, b + (size_t)i * sz + at, sizeof p);
    memcpy(out + (size_t)next[p]++ * sz, b + (size_t)i * sz, sz);
  }
  memcpy(b, out, (size_t)n * sz);
  free(out);
  free(next);
  return first;
}

void fpi_tx_finish(fp_tx *t) {
  /* by process, each process's ops (and needs) in emission order */
  t->first = group_by_proc(t, t->ops, t->nops, sizeof *t->ops, offsetof(fp_tx_op, proc));
  t->need_first = group_by_proc(t, t->need, t->nneed, sizeof *t->need, offsetof(fp_tx_region, proc));
  int64_t *sent = fpi_alloc_array(t->arena, (size_t)t->nprocs, sizeof *sent);
  int64_t *recvd = fpi_alloc_array(t->arena, (size_t)t->nprocs, sizeof *recvd);
  /* how many processes run each process's program (local work repeated) */
  int64_t *runs = fpi_alloc_array(t->arena, (size_t)t->nprocs, sizeof *runs);
  for (int64_t p = 0; p < t->nprocs; p++) runs[fpi_tx_prog(t, p)]++;
  t->wire_bytes = t->local_bytes = 0;
  for (int32_t i = 0; i < t->nops; i++) {
    const fp_tx_op *o = &t->ops[i];
    int64_t reps = o->proc >= 0 && o->proc < t->nprocs ? runs[o->proc] : 1, b = o->n * fpi_dtype_size(o->dtype);
    if (o->kind == FP_TX_RECV) {
      t->wire_bytes += b;
      recvd[o->proc] += b;
    } else if (o->kind == FP_TX_SEND) {
      sent[o->proc] += b;
    } else if (o->kind == FP_TX_COPY && o->dst.space == FP_SP_TO && o->src.space == FP_SP_FROM) {
      t->local_bytes += b * reps;
    } else if (o->kind == FP_TX_QUANT && o->dst.space == FP_SP_TO && o->src.space == FP_SP_FROM) {
      t->local_bytes += (b + fpi_tx_nscales(o->full_off, o->n)) * reps; /* into a TO param kept as MXFP8 */
    } else if (o->kind == FP_TX_QUANT_AT && o->dst.space == FP_SP_TO && o->src.space == FP_SP_FROM) {
      t->local_bytes += b * reps; /* its own part of a split block (the scale comes from the exchange) */
    }
  }
  t->max_send_bytes = t->max_recv_bytes = 0;
  for (int64_t p = 0; p < t->nprocs; p++) {
    if (sent[p] > t->max_send_bytes) t->max_send_bytes = sent[p];
    if (recvd[p] > t->max_recv_bytes) t->max_recv_bytes = recvd[p];
  }
}

/* ---- the hash ---- */
typedef struct txh {
  uint64_t h;
} txh;
static void hw(txh *s, uint64_t w) { s->h = fpi_fnv_word(s->h, w); }
static void hstr(txh *s, const char *p) { s->h = fpi_fnv_str_words(s->h, p); }
static void href(txh *s, fp_tx_ref r) {
  hw(s, r.space);
  hw(s, (uint64_t)(int64_t)r.off);
}

uint64_t fpi_tx_hash(const fp_tx *t) {
  txh s = {FP_FNV_INIT};
  hstr(&s, t->model);
  hstr(&s, t->what);
  const int64_t head[] = {(int64_t)t->from_hash, (int64_t)t->to_hash, t->from_world, t->to_world, t->to_offset,
                          t->nprocs,             t->from_offset,      t->from_arena, t->to_arena};
  for (size_t k = 0; k < sizeof head / sizeof *head; k++) hw(&s, (uint64_t)head[k]);
  hw(&s, (uint64_t)t->nparams);
  for (int32_t j = 0; j < t->nparams; j++) {
    const fp_tx_param *q = &t->params[j];
    hstr(&s, q->name);
    hw(&s, (uint64_t)q->numel);
    hw(&s, (uint64_t)q->mxfp8 | (uint64_t)q->src_mx << 1);
    hstr(&s, fpi_tx_xf_name(t, j));
  }
  hw(&s, (uint64_t)t->nops);
  for (int32_t i = 0; i < t->nops; i++) {
    const fp_tx_op *o = &t->ops[i];
    hw(&s, (uint64_t)o->kind | (uint64_t)o->dtype << 8 | (uint64_t)o->sdtype << 16 | (uint64_t)o->nwire << 24 |
               (uint64_t)o->plane << 28);
    hw(&s, (uint64_t)(uint32_t)o->proc << 32 | (uint32_t)o->peer);
    hw(&s, (uint64_t)(uint32_t)o->param);
    hw(&s, (uint64_t)o->n);
    hw(&s, (uint64_t)o->full_off);
    href(&s, o->dst);
    href(&s, o->src);
    if (o->kind == FP_TX_PREP_SEND || o->kind == FP_TX_FINALIZE) {
      int64_t w0 = fpi_tx_wire0(o);
      for (int k = 0; k < (int)o->nwire; k++) {
        const fp_tx_wire *w = w0 >= 0 && w0 + k < t->nwires ? &t->wires[w0 + k] : NULL;
        hw(&s, w ? (uint64_t)w->dtype : ~0ull), hw(&s, w ? (uint64_t)w->count : ~0ull);
      }
    } else {
      href(&s, o->aux);
    }
  }
  hw(&s, (uint64_t)t->nneed);
  for (int32_t k = 0; k < t->nneed; k++) {
    const fp_tx_region *r = &t->need[k];
    hw(&s, (uint64_t)(uint32_t)r->proc << 32 | (uint32_t)r->param);
    hw(&s, (uint64_t)r->off), hw(&s, (uint64_t)r->bytes), hw(&s, (uint64_t)r->full_off);
    hw(&s, (uint64_t)r->dtype | (uint64_t)(uint32_t)r->plane << 8);
  }
  for (int64_t p = 0; p < t->nprocs; p++) {
    hw(&s, (uint64_t)(int64_t)(t->same ? t->same[p] : -1));
    hw(&s, (uint64_t)(t->stage_bytes ? t->stage_bytes[p] : 0));
  }
  return s.h;
}

static void ref_str(char *s, size_t n, fp_tx_ref r) {
  if (r.space == FP_SP_NONE)
    snprintf(s, n, "-");
  else
    snprintf(s, n, "%s+%" PRId64, fpi_tx_space_name(r.space), (int64_t)r.off);
}

static void op_line(const fp_tx *t, const fp_tx_op *o, FILE *f) {
  char d[48], s[48], a[48];
  ref_str(d, sizeof d, o->dst);
  ref_str(s, sizeof s, o->src);
  ref_str(a, sizeof a, o->aux);
  fprintf(f, "  %s", fpi_tx_kind_name(o->kind));
  if (o->kind == FP_TX_SEND || o->kind == FP_TX_RECV) fprintf(f, " peer=%d", o->peer);
  fprintf(f, " %s", fpi_dtype_name(o->dtype));
  if (o->sdtype != o->dtype) fprintf(f, "<-%s", fpi_dtype_name(o->sdtype));
  fprintf(f, " n=%" PRId64 " param=", o->n);
  fpi_fput_name(f, t->params[o->param].name);
  fprintf(f, "[%" PRId64 "..%" PRId64 ")", o->full_off, o->full_off + o->n);
  if (o->plane) fprintf(f, " plane=%u", o->plane);
  if (o->dst.space) fprintf(f, " dst=%s", d);
  if (o->src.space) fprintf(f, " src=%s", s);
  if (o->aux.space) fprintf(f, " aux=%s", a);
  for (int k = 0; k < (int)o->nwire; k++)
    fprintf(f, "%s%s:%" PRId64, k ? "," : " wires=", fpi_dtype_name(t->wires[fpi_tx_wire0(o) + k].dtype),
            t->wires[fpi_tx_wire0(o) + k].count);
  fputc('\n', f);
}

void fpi_tx_print(const fp_tx *t, FILE *f) {
  fprintf(f, "# flexplan transfer program (docs/reshard.md)\n");
  fputs("xfer model=", f);
  fpi_fput_quoted(f, t->model);
  fprintf(f, " what=%s from_world=%" PRId64 " to_world=%" PRId64 " from_offset=%" PRId64
             " to_offset=%" PRId64 " procs=%" PRId64 "\n",
          t->what, t->from_world, t->to_world, t->from_offset, t->to_offset, t->nprocs);
  fprintf(f, "from hash=fnv1a64:%016" PRIx64 " arena=%" PRId64 "\n", t->from_hash, t->from_arena);
  fprintf(f, "to hash=fnv1a64:%016" PRIx64 " arena=%" PRId64 "\n", t->to_hash, t->to_arena);
  for (int32_t i = 0; i < t->nparams; i++) {
    fputs("param ", f);
    fpi_fput_name(f, t->params[i].name);
    fprintf(f, " numel=%" PRId64 "%s%s", t->params[i].numel, t->params[i].mxfp8 ? " wire=mxfp8" : "",
            t->params[i].src_mx ? " source=mxfp8" : "");
    if (fpi_tx_xf_name(t, i)) {
      fputs(" transform=", f);
      fpi_fput_name(f, fpi_tx_xf_name(t, i));
    }
    fputc('\n', f);
  }
  for (int64_t p = 0; p < t->nprocs; p++) {
    if (fpi_tx_prog(t, p) != p) { /* a shared local program */
      fprintf(f, "proc %" PRId64 " stage=%" PRId64 ": same as proc %d\n", p, t->stage_bytes[p], fpi_tx_prog(t, p));
      continue;
    }
    fprintf(f, "proc %" PRId64 " stage=%" PRId64 ":\n", p, t->stage_bytes[p]);
    for (int32_t i = t->need_first[p]; i < t->need_first[p + 1]; i++) {
      fprintf(f, "  need to+%" PRId64 " bytes=%" PRId64 " %s param=", t->need[i].off, t->need[i].bytes,
              fpi_dtype_name(t->need[i].dtype));
      fpi_fput_name(f, t->params[t->need[i].param].name);
      fprintf(f, "[%" PRId64 "..]", t->need[i].full_off);
      if (t->need[i].plane) fprintf(f, " plane=%d", t->need[i].plane);
      fputc('\n', f);
    }
    for (int32_t j = t->first[p]; j < t->first[p + 1]; j++) op_line(t, &t->ops[j], f);
  }
}

void fpi_tx_explain(const fp_tx *t, FILE *f) {
  fprintf(f, "%-6s %-5s %-17s %-5s %-10s %-12s %-12s %-12s %s\n", "op", "proc", "kind", "peer", "dtype", "bytes",
          "dst", "src", "param[elements]");
  for (int32_t i = 0; i < t->nops; i++) {
    const fp_tx_op *o = &t->ops[i];
    char d[48], s[48], pe[16], nq[256];
    ref_str(d, sizeof d, o->dst);
    ref_str(s, sizeof s, o->src);
    snprintf(pe, sizeof pe, o->peer >= 0 ? "%d" : "-", o->peer);
    int64_t b = o->kind == FP_TX_SEND ? fpi_tx_src_bytes(t, o) : fpi_tx_dst_bytes(t, o);
    fprintf(f, "%-6d %-5d %-17s %-5s %-10s %-12" PRId64 " %-12s %-12s %s[%" PRId64 "..%" PRId64 ")\n", i, o->proc,
            fpi_tx_kind_name(o->kind), pe, fpi_dtype_name(o->dtype), b, d, s, fpi_quote(nq, sizeof nq, t->params[o->param].name), o->full_off,
            o->full_off + o->n);
  }
  int64_t shared = 0;
  for (int64_t p = 0; p < t->nprocs; p++) shared += fpi_tx_prog(t, p) != p;
  if (shared)
    fprintf(f, "%" PRId64 " of the %" PRId64 " processes repeat another process's program (local work only)\n", shared,
            t->nprocs);
  fprintf(f, "wire bytes %" PRId64 ", lower bound %" PRId64 " (bytes each destination lacks), ratio %.3f; "
             "local copies %" PRId64 " bytes; busiest sender %" PRId64 ", busiest receiver %" PRId64 "\n",
          t->wire_bytes, t->lower_bound, t->lower_bound ? (double)t->wire_bytes / (double)t->lower_bound : 1.0,
          t->local_bytes, t->max_send_bytes, t->max_recv_bytes);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static void json_ref(FILE *f, const char *k, fp_tx_ref r) {
  if (r.space == FP_SP_NONE) return;
  fprintf(f, ",\"%s\":[\"%s\",%" PRId64 "]", k, fpi_tx_space_name(r.space), (int64_t)r.off);
}

bool fpi_tx_write_json(const fp_tx *t, FILE *f) {
  fprintf(f, "{\"format\":\"flexplan.xfer.v1\",\"model\":");
  json_str(f, t->model ? t->model : "");
  fprintf(f, ",\"what\":\"%s\",\"from\":{\"hash\":\"fnv1a64:%016" PRIx64 "\",\"world_size\":%" PRId64
             ",\"arena_bytes\":%" PRId64 ",\"rank_offset\":%" PRId64 "},\"to\":{\"hash\":\"fnv1a64:%016" PRIx64 "\",\"world_size\":%" PRId64
             ",\"arena_bytes\":%" PRId64 ",\"rank_offset\":%" PRId64 "},\"processes\":%" PRId64 ",\n",
          t->what, t->from_hash, t->from_world, t->from_arena, t->from_offset, t->to_hash, t->to_world, t->to_arena, t->to_offset,
          t->nprocs);
  fprintf(f, "\"figures\":{\"wire_bytes\":%" PRId64 ",\"lower_bound_bytes\":%" PRId64 ",\"local_bytes\":%" PRId64
             ",\"max_send_bytes\":%" PRId64 ",\"max_recv_bytes\":%" PRId64 "},\n\"params\":[",
          t->wire_bytes, t->lower_bound, t->local_bytes, t->max_send_bytes, t->max_recv_bytes);
  for (int32_t i = 0; i < t->nparams; i++) {
    fprintf(f, "%s{\"name\":", i ? "," : "");
    json_str(f, t->params[i].name);
    fprintf(f, ",\"numel\":%" PRId64 ",\"wire\":\"%s\"", t->params[i].numel, t->params[i].mxfp8 ? "mxfp8" : "plain");
    if (t->params[i].src_mx) fprintf(f, ",\"source\":\"mxfp8\"");
    if (fpi_tx_xf_name(t, i)) {
      fprintf(f, ",\"transform\":");
      json_str(f, fpi_tx_xf_name(t, i));
    }
    fputc('}', f);
  }
  fprintf(f, "],\n\"procs\":[");
  for (int64_t p = 0; p < t->nprocs; p++) {
    fprintf(f, "%s\n{\"stage_bytes\":%" PRId64, p ? "," : "", t->stage_bytes[p]);
    if (fpi_tx_prog(t, p) != p) fprintf(f, ",\"same\":%d", fpi_tx_prog(t, p));
    fprintf(f, ",\"need\":[");
    bool first = true;
    for (int32_t i = t->need_first[p]; i < t->need_first[p + 1]; i++) {
      const fp_tx_region *r = &t->need[i];
      fprintf(f, "%s[%d,%" PRId64 ",%" PRId64 ",%" PRId64 ",\"%s\"", first ? "" : ",", r->param, r->off, r->bytes,
              r->full_off, fpi_dtype_name(r->dtype));
      fprintf(f, r->plane ? ",%d]" : "]", r->plane); /* (an optimizer state's: its plane) */
      first = false;
    }
    fprintf(f, "],\"ops\":[");
    for (int32_t j = t->first[p]; j < t->first[p + 1]; j++) {
      const fp_tx_op *o = &t->ops[j];
      fprintf(f, "%s\n {\"op\":\"%s\"", j > t->first[p] ? "," : "", fpi_tx_kind_name(o->kind));
      if (o->peer >= 0) fprintf(f, ",\"peer\":%d", o->peer);
      fprintf(f, ",\"param\":%d,\"dtype\":\"%s\",\"sdtype\":\"%s\",\"n\":%" PRId64 ",\"full_off\":%" PRId64, o->param,
              fpi_dtype_name(o->dtype), fpi_dtype_name(o->sdtype), o->n, o->full_off);
      if (o->plane) fprintf(f, ",\"plane\":%u", o->plane);
      json_ref(f, "dst", o->dst);
      json_ref(f, "src", o->src);
      json_ref(f, "aux", o->aux);
      for (int k = 0; k < (int)o->nwire; k++)
        fprintf(f, "%s[\"%s\",%" PRId64 "]", k ? "," : ",\"wires\":[", fpi_dtype_name(t->wires[fpi_tx_wire0(o) + k].dtype),
                t->wires[fpi_tx_wire0(o) + k].count);
      fputs(o->nwire ? "]}" : "}", f);
    }
    fprintf(f, "]}");
  }
  fprintf(f, "\n]}\n");
  return !ferror(f);
}

void fpi_tx_trace(const fp_tx *t, FILE *f) {
  fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
  bool first = true;
  for (int64_t p = 0; p < t->nprocs; p++) {
    fprintf(f, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%" PRId64 ",\"args\":{\"name\":\"process %" PRId64
               "%s%s\"}}",
            first ? "" : ",\n", p, p, p >= t->from_offset && p < t->from_offset + t->from_world ? " FROM" : "",
            p >= t->to_offset && p < t->to_offset + t->to_world ? " TO" : "");
    first = false;
    int32_t g = fpi_tx_prog(t, p); /* a shared program shows on every process that runs it */
    for (int32_t j = t->first[g]; j < t->first[g + 1]; j++) {
      const fp_tx_op *o = &t->ops[j];
      int64_t b = o->kind == FP_TX_SEND ? fpi_tx_src_bytes(t, o) : fpi_tx_dst_bytes(t, o);
      char name[64];
      if (o->peer >= 0)
        snprintf(name, sizeof name, "%s %s %d", fpi_tx_kind_name(o->kind), o->kind == FP_TX_SEND ? "to" : "from", o->peer);
      else
        snprintf(name, sizeof name, "%s", fpi_tx_kind_name(o->kind));
      fprintf(f, ",\n{\"ph\":\"X\",\"pid\":%" PRId64 ",\"tid\":0,\"ts\":%d,\"dur\":1,\"name\":\"%s\","
                 "\"args\":{\"op\":%d,\"bytes\":%" PRId64 ",\"param\":",
              p, j - t->first[g], name, j, b);
      json_str(f, t->params[o->param].name);
      fprintf(f, ",\"elements\":\"%" PRId64 "..%" PRId64 "\"}}", o->full_off, o->full_off + o->n);
    }
  }
  fprintf(f, "\n]}\n");
}
