/* nccl_plan.c - the NCCL backend's plan-side decisions (nccl_plan.h): plain
 * C, no CUDA, built and tested everywhere. */
#include "nccl_plan.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- bootstrap -------------------------------------------------------------------- */
const char *fpn_boot_name(fpn_boot b) {
  switch (b) {
    case FPN_BOOT_ID: return "id";
    case FPN_BOOT_MPI: return "mpi";
    case FPN_BOOT_ENV: return "NCCL_COMM_ID";
    case FPN_BOOT_LOCAL: return "local";
  }
  return "?";
}

/* NCCL_COMM_ID is "host:port" (an IPv6 host in brackets); the port 1..65535 */
static bool comm_id_ok(const char *v) {
  const char *colon = strrchr(v, ':');
  if (!colon || colon == v || !colon[1]) return false;
  long port = 0;
  for (const char *c = colon + 1; *c; c++) {
    if (!isdigit((unsigned char)*c) || port > 65535) return false;
    port = port * 10 + (*c - '0');
  }
  return port >= 1 && port <= 65535;
}

fp_status fpn_boot_resolve(const fp_exec_config *cfg, bool mpi_up, const char *comm_id, fpn_boot *out, char *msg,
                           size_t len) {
  *out = FPN_BOOT_LOCAL;
  if ((unsigned)cfg->cuda_mode > FP_CUDA_CAPTURE_SAFE) {
    snprintf(msg, len, "fp_exec_create: unknown cuda_mode %d", (int)cfg->cuda_mode);
    return FP_ERR_ARG;
  }
  fp_nccl_boot b = cfg->nccl_boot;
  if ((unsigned)b > FP_NCCL_BOOT_ENV) {
    snprintf(msg, len, "fp_exec_create: unknown nccl_boot %d", (int)b);
    return FP_ERR_ARG;
  }
  bool env = comm_id && *comm_id;
  if (b == FP_NCCL_BOOT_DEFAULT) b = mpi_up ? FP_NCCL_BOOT_MPI : env ? FP_NCCL_BOOT_ENV : FP_NCCL_BOOT_DEFAULT;
  if (b != FP_NCCL_BOOT_MPI && cfg->bootstrap) {
    snprintf(msg, len, "fp_exec_create: cfg.bootstrap is an MPI communicator, but the NCCL bootstrap is %s "
             "(pass FP_NCCL_BOOT_MPI, or leave bootstrap NULL)",
             b == FP_NCCL_BOOT_ID ? "an id" : b == FP_NCCL_BOOT_ENV ? "NCCL_COMM_ID" : "local");
    return FP_ERR_ARG;
  }
  switch (b) {
    case FP_NCCL_BOOT_ID: {
      bool zero = true;
      for (int k = 0; k < FP_NCCL_ID_BYTES; k++) zero = zero && !cfg->nccl_id.bytes[k];
      if (zero) {
        snprintf(msg, len, "fp_exec_create: FP_NCCL_BOOT_ID, but cfg.nccl_id is all zeros: rank 0 makes the id with "
                 "fp_nccl_get_id and every rank passes the same bytes");
        return FP_ERR_ARG;
      }
      *out = FPN_BOOT_ID;
      return FP_OK;
    }
    case FP_NCCL_BOOT_MPI:
      if (!mpi_up) {
        snprintf(msg, len, "fp_exec_create: FP_NCCL_BOOT_MPI needs MPI initialized (MPI_Init_thread) and not "
                 "finalized");
        return FP_ERR_ARG;
      }
      *out = FPN_BOOT_MPI;
      return FP_OK;
    case FP_NCCL_BOOT_ENV:
      if (!env) {
        snprintf(msg, len, "fp_exec_create: FP_NCCL_BOOT_ENV, but NCCL_COMM_ID is not set (host:port of rank 0, the "
                 "same on every rank)");
        return FP_ERR_ARG;
      }
      if (!comm_id_ok(comm_id)) {
        snprintf(msg, len, "fp_exec_create: NCCL_COMM_ID='%.64s' is not host:port", comm_id);
        return FP_ERR_ARG;
      }
      *out = FPN_BOOT_ENV;
      return FP_OK;
    default: /* default with neither MPI nor NCCL_COMM_ID */
      if (cfg->world_size != 1) {
        snprintf(msg, len, "fp_exec_create: the NCCL backend has no way to bootstrap %d ranks: initialize MPI, set "
                 "NCCL_COMM_ID, or hand every rank an id (FP_NCCL_BOOT_ID, fp_nccl_get_id)", cfg->world_size);
        return FP_ERR_ARG;
      }
      *out = FPN_BOOT_LOCAL;
      return FP_OK;
  }
}

/* ---- the plan ---------------------------------------------------------------------------- */
static bool is_sync(fp_opcode c) { return fpi_op_class(c) == FP_OPC_SYNC; }

/* the bytes snprintf put into a buffer of cap bytes, the NUL included */
static size_t put_len(int r, size_t cap) { return r < 0 ? 1 : (size_t)r >= cap ? cap : (size_t)r + 1; }

enum { FPN_LABEL = 128 }; /* the longest label of an op or a run, NUL included */

/* every array of the plan, sized by upper bounds: one item per op; runs at most one per op */
static fp_status plan_alloc(fp_exec *x, fpn_plan *P) {
  const fp_prog *p = x->prog;
  int32_t nsegs = p->nsegs, nx = x->nxops;
  P->items = fpx_alloc(x, (size_t)p->nops + 1, sizeof *P->items);
  P->seg_first = fpx_alloc(x, (size_t)nsegs + 1, sizeof *P->seg_first);
  P->run_item = fpx_alloc(x, (size_t)nx + 1, sizeof *P->run_item);
  P->pair = fpx_alloc(x, (size_t)p->ncomms * FP_NSTREAMS + 1, sizeof *P->pair);
  P->pair_comm = fpx_alloc(x, (size_t)p->ncomms * FP_NSTREAMS + 1, sizeof *P->pair_comm);
  P->pair_stream = fpx_alloc(x, (size_t)p->ncomms * FP_NSTREAMS + 1, sizeof *P->pair_stream);
  P->color = fpx_alloc(x, (size_t)p->ncomms * FP_NSTREAMS + 1, sizeof *P->color);
  P->key = fpx_alloc(x, (size_t)p->ncomms * FP_NSTREAMS + 1, sizeof *P->key);
  P->event_slot = fpx_alloc(x, (size_t)nx + 1, sizeof *P->event_slot);
  P->seg_side = fpx_alloc(x, (size_t)nsegs + 1, sizeof *P->seg_side);
  P->label = fpx_alloc(x, (size_t)nx + 1, sizeof *P->label);
  P->run_label = fpx_alloc(x, (size_t)nx + 1, sizeof *P->run_label);
  P->sums = fpx_alloc(x, (size_t)nsegs + 1, sizeof *P->sums);
  P->text = fpx_alloc(x, (size_t)(2 * nx + 1) * FPN_LABEL, 1);
  if (!P->items || !P->seg_first || !P->run_item || !P->pair || !P->pair_comm || !P->pair_stream || !P->color ||
      !P->key || !P->event_slot || !P->seg_side || !P->label || !P->run_label || !P->sums || !P->text)
    return fpx_fail(x, FP_ERR_NOMEM, "out of memory planning the NCCL backend");
  return FP_OK;
}

/* communicators: from the whole program, so every rank makes the same
 * splits in the same order */
static void plan_pairs(const fp_exec *x, fpn_plan *P) {
  const fp_prog *p = x->prog;
  for (int32_t k = 0; k < p->ncomms * FP_NSTREAMS; k++) P->pair[k] = -1;
  for (int32_t c = 0; c < p->ncomms; c++)
    for (int s = 0; s < FP_NSTREAMS; s++) {
      bool used = false;
      for (int32_t i = 0; i < p->nops && !used; i++)
        used = p->ops[i].comm == c && p->ops[i].stream == (fp_stream)s && fpi_op_class(p->ops[i].code) == FP_OPC_COMM;
      if (!used) continue;
      const fp_ir_comm *pc = &p->comms[c];
      int64_t g = fpi_comm_index(pc, x->rank);
      P->pair[c * FP_NSTREAMS + s] = P->npairs;
      P->pair_comm[P->npairs] = c;
      P->pair_stream[P->npairs] = s;
      P->color[P->npairs] = (int32_t)(x->rank - g * pc->stride); /* the first rank of the instance */
      P->key[P->npairs] = (int32_t)g;
      P->npairs++;
    }

}

/* one event per record op this rank issues, and each op's label; *at: the
 * labels' bytes so far */
static void plan_labels(fp_exec *x, fpn_plan *P, size_t *at_) {
  const fp_prog *p = x->prog;
  int32_t nx = x->nxops;
  size_t at = *at_;
  for (int32_t j = 0; j < nx; j++) P->event_slot[j] = x->xops[j].code == FP_OP_RECORD ? P->nevents++ : -1;
  char seg[96];
  for (int32_t j = 0; j < nx; j++) {
    const fp_xop *o = &x->xops[j];
    int32_t k = p->ops[o->index].seg;
    P->label[j] = (int32_t)at;
    at += put_len(snprintf(P->text + at, FPN_LABEL, "op %" PRId32 " seg %" PRId32 " %s %s", o->index, k,
                           fpx_seg_label(x, k, seg, sizeof seg), fpi_op_name(o->code)), FPN_LABEL);
  }
  *at_ = at;
}

/* segment k's items in program order: a run per stream between syncs, each
 * sync its own item, whether or not this rank issues ops in them; *j: the
 * next xop */
static void segment_items(fp_exec *x, fpn_plan *P, int32_t k, int32_t *j_) {
  const fp_prog *p = x->prog;
  int32_t nx = x->nxops, j = *j_;
  const fp_seg *S = &p->segs[k];
  int32_t open[FP_NSTREAMS]; /* the item of each stream's open run, -1: none */
  for (int s = 0; s < FP_NSTREAMS; s++) open[s] = -1;
  int32_t pos[FP_NSTREAMS];  /* this rank's position in each stream's op list */
  for (int s = 0; s < FP_NSTREAMS; s++) pos[s] = k ? x->seg_end[k - 1][s] : 0;
  P->seg_first[k] = P->nitems;
  for (int32_t i = S->first; i < S->first + S->nops; i++) {
    const fp_op *op = &p->ops[i];
    bool here = j < nx && x->xops[j].index == i;
    int s = (int)op->stream;
    if (op->code == FP_OP_COMPUTE) { /* a placeholder: never resolved, issues nothing */
      FP_ASSERT(!here);
      continue;
    }
    if (is_sync(op->code)) {
      open[s] = -1; /* closes the stream's run on every rank, issued here or not */
      if (here) {
        P->items[P->nitems++] = (fpn_item){FPN_SYNC, s, j, pos[s], 1, -1, i};
        pos[s]++;
      }
    } else {
      if (open[s] < 0) {
        open[s] = P->nitems;
        P->items[P->nitems++] = (fpn_item){FPN_RUN, s, -1, pos[s], 0, -1, i};
      }
      if (here) {
        fpn_item *it = &P->items[open[s]];
        if (it->nops == 0) {
          it->xop = j;
          it->pos = pos[s];
        }
        it->nops++;
        pos[s]++;
      }
    }
    if (here) {
      const fp_xop *o = &x->xops[j];
      if (fpi_op_class(o->code) == FP_OPC_LOCAL) P->sums[k].local++;
      if (fpi_op_class(o->code) == FP_OPC_COMM) {
        P->sums[k].coll++;
        P->sums[k].bytes += fpx_send_bytes(o);
      }
      j++;
    }
  }
  for (int s = 0; s < FP_NSTREAMS; s++) FP_ASSERT(pos[s] == x->seg_end[k][s]);
  *j_ = j;
}

/* segment k's runs that are empty on this rank dropped, the others
 * numbered and labelled (*at: the labels' bytes so far) */
static void segment_runs(fp_exec *x, fpn_plan *P, int32_t k, size_t *at_) {
  size_t at = *at_;
  char seg[96];
  int32_t w = P->seg_first[k];
  for (int32_t r = P->seg_first[k]; r < P->nitems; r++) {
    fpn_item it = P->items[r];
    if (it.kind == FPN_RUN && it.nops == 0) continue;
    if (it.kind == FPN_RUN) {
      it.run = P->nruns;
      P->run_item[P->nruns] = w;
      P->run_label[P->nruns] = (int32_t)at;
      const fp_xop *first = x->sops[it.stream][it.pos], *last = x->sops[it.stream][it.pos + it.nops - 1];
      at += put_len(snprintf(P->text + at, FPN_LABEL, "seg %" PRId32 " %s %s ops %" PRId32 "-%" PRId32 " (%" PRId32 ")",
                             k, fpx_seg_label(x, k, seg, sizeof seg), fpi_stream_name(it.stream), first->index,
                             last->index, it.nops), FPN_LABEL);
      P->nruns++;
    }
    if (it.stream != FP_STREAM_COMPUTE) P->seg_side[k] |= (uint8_t)(1u << it.stream);
    P->items[w++] = it;
  }
  P->nitems = w;
  *at_ = at;
}

/* one graph per hook (graph mode): the streams of each segment, and how
 * each record is waited on */
static fp_status plan_graphs(fp_exec *x, fpn_plan *P) {
  const fp_prog *p = x->prog;
  int32_t nsegs = p->nsegs, nx = x->nxops;
  P->seg_streams = fpx_alloc(x, (size_t)nsegs + 1, 1);
  P->seg_has_run = fpx_alloc(x, (size_t)nsegs + 1, 1);
  P->rec_use = fpx_alloc(x, (size_t)P->nevents + 1, 1);
  if (!P->seg_streams || !P->seg_has_run || !P->rec_use) return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
  for (int32_t k = 0; k < nsegs; k++)
    for (int32_t t = P->seg_first[k]; t < P->seg_first[k + 1]; t++) {
      P->seg_streams[k] |= (uint8_t)(1u << P->items[t].stream);
      if (P->items[t].kind == FPN_RUN) P->seg_has_run[k] = 1;
    }
  for (int32_t w = 0; w < nx; w++) {
    const fp_xop *o = &x->xops[w];
    if (o->code != FP_OP_WAIT || !o->rec) continue;
    bool local = !o->rec_prev && p->ops[o->index].seg == p->ops[o->rec->index].seg;
    P->rec_use[P->event_slot[o->rec - x->xops]] |= local ? FPN_REC_LOCAL : FPN_REC_AWAY;
  }
  return FP_OK;
}

fp_status fpn_plan_build(fp_exec *x, fpn_plan *P) {
  const fp_prog *p = x->prog;
  memset(P, 0, sizeof *P);
  fp_status st = plan_alloc(x, P);
  if (st != FP_OK) return st;
  plan_pairs(x, P);
  size_t at = 0;
  plan_labels(x, P, &at);
  int32_t j = 0; /* the next xop */
  for (int32_t k = 0; k < p->nsegs; k++) {
    segment_items(x, P, k, &j);
    segment_runs(x, P, k, &at);
  }
  P->seg_first[p->nsegs] = P->nitems;
  FP_ASSERT(j == x->nxops);
  return plan_graphs(x, P);
}

void fpn_plan_free(fpn_plan *P) {
  fpx_free(P->items);
  fpx_free(P->seg_first);
  fpx_free(P->run_item);
  fpx_free(P->pair);
  fpx_free(P->pair_comm);
  fpx_free(P->pair_stream);
  fpx_free(P->color);
  fpx_free(P->key);
  fpx_free(P->event_slot);
  fpx_free(P->seg_side);
  fpx_free(P->label);
  fpx_free(P->run_label);
  fpx_free(P->sums);
  fpx_free(P->text);
  fpx_free(P->seg_streams);
  fpx_free(P->seg_has_run);
  fpx_free(P->rec_use);
  memset(P, 0, sizeof *P);
}

/* ---- NCCL_COMM_ID, hidden from the bootstraps that do not use it -------------------- */
char *fpn_comm_id_hide(void) {
  const char *v = getenv("NCCL_COMM_ID");
  if (!v) return NULL;
  char *saved = strdup(v);
  unsetenv("NCCL_COMM_ID");
  return saved;
}

void fpn_comm_id_restore(char *saved) {
  if (!saved) return;
  setenv("NCCL_COMM_ID", saved, 1);
  free(saved);
}
