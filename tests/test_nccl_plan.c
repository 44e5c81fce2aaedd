/* test_nccl_plan.c - the NCCL backend's GPU-free decisions
 * (executor/nccl_plan.c), on compiled plans given on the command line (see
 * tests/nccl_plan_test.py), for every rank of each plan's world, plus the
 * bootstrap rules on a table of configs. No GPU, no MPI: executors are made
 * with a backend of this test's own (host memory, agreement = the local
 * verdict) through fpx_create_with.
 *
 * For every (plan, rank) the issue list must be a reordering of the rank's
 * program that no CUDA event can tell apart from program order, and the
 * same on every rank where NCCL can tell:
 *  - every op the rank runs is issued exactly once, in one item of its
 *    segment; runs hold consecutive non-sync ops of one stream, and no
 *    record/wait of that stream lies between a run's first and last op in
 *    the program - not even one this rank skips;
 *  - expanded item by item, each stream sees its ops in program order, and
 *    records and waits (all streams together) keep their program order;
 *    so every wait is issued after the record it is tied to in the same
 *    step, and before that record's next issue when it waits for the
 *    previous step's;
 *  - NCCL calls on two different (communicator, stream) pairs are issued in
 *    the same relative order on every rank that makes both;
 *  - the ncclCommSplit colors and keys of every pair give exactly the plan
 *    communicator's instances, keys 0..size-1 in order;
 *  - every record has its own event, every wait's record one; the side
 *    streams flagged for a segment are those with items; labels name ops.
 * Exit 0 when all hold, 1 otherwise. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/backend_impl.h"
#include "executor/nccl_plan.h"
#include "flexplan.h"

static int failures;
#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      if (failures++ < 30) {                                                    \
        fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
        fprintf(stderr, __VA_ARGS__);                                           \
        fputc('\n', stderr);                                                    \
      }                                                                         \
    }                                                                           \
  } while (0)

/* ---- a backend of our own: host memory, no communication ------------------------------- */
static fp_status t_prepare(fp_exec *x) {
  int64_t d = x->prog->arena_bytes, h = x->prog->host_bytes;
  x->dev = calloc(1, (size_t)(d > 0 ? d : 1));
  x->host = calloc(1, (size_t)(h > 0 ? h : 1));
  return x->dev && x->host ? FP_OK : fpx_fail(x, FP_ERR_NOMEM, "out of memory");
}
static fp_status t_agree(fp_exec *x, fp_status local) {
  (void)x;
  return local;
}
static fp_status t_ok(fp_exec *x) {
  (void)x;
  return FP_OK;
}
static fp_status t_run(fp_exec *x, int32_t seg) {
  (void)x, (void)seg;
  return FP_OK;
}
static fp_status t_write(fp_exec *x, char *d, int64_t dp, const char *s, int64_t sp, int64_t w, int64_t r) {
  (void)x, (void)d, (void)dp, (void)s, (void)sp, (void)w, (void)r;
  return FP_OK;
}
static void t_destroy(fp_exec *x) {
  free(x->dev);
  free(x->host);
}
static const fp_backend_impl test_backend = {"test", t_prepare, t_agree, t_ok, t_run, t_ok, t_write, t_destroy, NULL,
                                             NULL, NULL, NULL};

/* ---- one rank's issue order --------------------------------------------------------------- */
typedef struct rankview {
  fp_exec *x;
  fpn_plan P;
  int64_t *issue; /* program op index -> issue position on this rank (-1: not run here) */
} rankview;

static void check_rank(const char *name, rankview *rv) {
  fp_exec *x = rv->x;
  const fp_prog *p = x->prog;
  fpn_plan *P = &rv->P;
  int32_t nx = x->nxops;
  int *seen = calloc((size_t)nx + 1, sizeof *seen);
  rv->issue = malloc(sizeof *rv->issue * (size_t)(p->nops + 1));
  for (int32_t i = 0; i < p->nops; i++) rv->issue[i] = -1;
  int64_t at = 0;
  int64_t last_sync = -1;                 /* program index of the last record/wait issued */
  int64_t last_on[FP_NSTREAMS] = {-1, -1, -1}; /* per stream: program index of the last op issued */
  for (int32_t k = 0; k < p->nsegs; k++) {
    int32_t prev_first = -1;
    uint8_t side = 0;
    for (int32_t t = P->seg_first[k]; t < P->seg_first[k + 1]; t++) {
      const fpn_item *it = &P->items[t];
      CHECK(it->prog_first > prev_first, "%s rank %" PRId64 ": items of segment %d out of program order", name, x->rank,
            k);
      prev_first = it->prog_first;
      if (it->stream != FP_STREAM_COMPUTE) side |= (uint8_t)(1u << it->stream);
      CHECK(it->nops >= 1, "%s: an empty item survived", name);
      for (int32_t q = 0; q < it->nops; q++) {
        const fp_xop *o = x->sops[it->stream][it->pos + q];
        int32_t j = (int32_t)(o - x->xops);
        if (q == 0) CHECK(j == it->xop, "%s: item's first xop", name);
        seen[j]++;
        CHECK(p->ops[o->index].seg == k, "%s rank %" PRId64 ": op %d issued in segment %d, it belongs to %d", name,
              x->rank, o->index, k, p->ops[o->index].seg);
        CHECK((int)o->stream == it->stream, "%s: op %d on another stream than its item", name, o->index);
        bool sync = fpi_op_class(o->code) == FP_OPC_SYNC;
        CHECK(sync == (it->kind == FPN_SYNC), "%s: op %d (%s) in a %s item", name, o->index, fpi_op_name(o->code),
              it->kind == FPN_SYNC ? "sync" : "run");
        CHECK(o->index > last_on[o->stream], "%s rank %" PRId64 ": stream %s sees op %d after op %" PRId64, name, x->rank,
              fpi_stream_name(o->stream), o->index, last_on[o->stream]);
        last_on[o->stream] = o->index;
        if (sync) {
          CHECK(o->index > last_sync, "%s rank %" PRId64 ": record/wait %d issued after record/wait %" PRId64, name,
                x->rank, o->index, last_sync);
          last_sync = o->index;
        }
        rv->issue[o->index] = at++;
      }
      if (it->kind == FPN_RUN) { /* no record/wait of the stream inside the run's program span */
        int32_t a = x->sops[it->stream][it->pos]->index, b = x->sops[it->stream][it->pos + it->nops - 1]->index;
        for (int32_t i = a; i <= b; i++)
          CHECK(!(p->ops[i].stream == (fp_stream)it->stream && fpi_op_class(p->ops[i].code) == FP_OPC_SYNC),
                "%s rank %" PRId64 ": run %d-%d crosses record/wait %d of its stream", name, x->rank, a, b, i);
        CHECK(it->run >= 0 && it->run < P->nruns && P->run_item[it->run] == t, "%s: run numbering", name);
        CHECK(strstr(P->text + P->run_label[it->run], "seg ") == P->text + P->run_label[it->run], "%s: run label",
              name);
      }
    }
    CHECK(side == P->seg_side[k], "%s rank %" PRId64 ": side streams of segment %d: %x, flagged %x", name, x->rank, k,
          side, P->seg_side[k]);
    /* one graph per hook: the segment's streams, and whether it has a run */
    uint8_t all = 0, run = 0;
    for (int32_t t = P->seg_first[k]; t < P->seg_first[k + 1]; t++)
      all |= (uint8_t)(1u << P->items[t].stream), run |= P->items[t].kind == FPN_RUN;
    CHECK(all == P->seg_streams[k] && run == P->seg_has_run[k], "%s rank %" PRId64 ": segment %d: streams %x run %d, "
          "flagged %x %d", name, x->rank, k, all, run, P->seg_streams[k], P->seg_has_run[k]);
  }
  /* how each record is waited on: inside its segment (same step) or elsewhere */
  uint8_t *use = calloc((size_t)P->nevents + 1, 1);
  for (int32_t j = 0; j < nx; j++) {
    const fp_xop *o = &x->xops[j];
    if (o->code != FP_OP_WAIT || !o->rec) continue;
    bool same = !o->rec_prev && p->ops[o->index].seg == p->ops[o->rec->index].seg;
    use[P->event_slot[o->rec - x->xops]] |= same ? FPN_REC_LOCAL : FPN_REC_AWAY;
  }
  for (int32_t e = 0; e < P->nevents; e++)
    CHECK(use[e] == P->rec_use[e], "%s rank %" PRId64 ": event %d waited on %x, flagged %x", name, x->rank, e, use[e],
          P->rec_use[e]);
  free(use);
  for (int32_t j = 0; j < nx; j++) {
    const fp_xop *o = &x->xops[j];
    CHECK(seen[j] == 1, "%s rank %" PRId64 ": op %d issued %d times", name, x->rank, o->index, seen[j]);
    char want[32];
    snprintf(want, sizeof want, "op %d seg ", o->index);
    CHECK(!strncmp(P->text + P->label[j], want, strlen(want)), "%s: label of op %d is '%s'", name, o->index,
          P->text + P->label[j]);
    if (o->code == FP_OP_RECORD) {
      CHECK(P->event_slot[j] >= 0 && P->event_slot[j] < P->nevents, "%s: record without an event", name);
      for (int32_t q = 0; q < j; q++) CHECK(P->event_slot[q] != P->event_slot[j], "%s: two records share an event", name);
    } else {
      CHECK(P->event_slot[j] == -1, "%s: an event for a non-record", name);
    }
    if (o->code == FP_OP_WAIT && o->rec) { /* issued after its record (same step), before it (previous step's) */
      int32_t r = (int32_t)(o->rec - x->xops);
      CHECK(P->event_slot[r] >= 0, "%s: a wait's record has no event", name);
      if (o->rec_prev)
        CHECK(rv->issue[o->index] < rv->issue[o->rec->index], "%s rank %" PRId64 ": wait %d (previous step's record "
              "%d) issued after that record", name, x->rank, o->index, o->rec->index);
      else
        CHECK(rv->issue[o->index] > rv->issue[o->rec->index], "%s rank %" PRId64 ": wait %d issued before its record %d",
              name, x->rank, o->index, o->rec->index);
    }
  }
  free(seen);
}

/* NCCL calls of two different pairs: the same relative order on every rank
 * that makes both */
static void check_cross_rank(const char *name, rankview *rv, int nranks) {
  const fp_prog *p = rv[0].x->prog;
  int32_t *comm_ops = malloc(sizeof *comm_ops * (size_t)(p->nops + 1));
  int32_t nc = 0;
  for (int32_t i = 0; i < p->nops; i++)
    if (fpi_op_class(p->ops[i].code) == FP_OPC_COMM) comm_ops[nc++] = i;
  for (int a = 1; a < nranks; a++)
    for (int32_t u = 0; u < nc; u++)
      for (int32_t v = u + 1; v < nc; v++) {
        int32_t i = comm_ops[u], j = comm_ops[v];
        if (p->ops[i].comm == p->ops[j].comm && p->ops[i].stream == p->ops[j].stream) continue;
        int64_t ia = rv[a].issue[i], ja = rv[a].issue[j];
        if (ia < 0 || ja < 0) continue;
        for (int b = 0; b < a; b++) {
          int64_t ib = rv[b].issue[i], jb = rv[b].issue[j];
          if (ib < 0 || jb < 0) continue;
          CHECK((ia < ja) == (ib < jb), "%s: ops %d and %d (different communicators/streams) issued in one order on "
                "rank %" PRId64 ", the other on rank %" PRId64, name, i, j, rv[a].x->rank, rv[b].x->rank);
        }
      }
  free(comm_ops);
  /* the splits: same (comm, stream) pairs everywhere; a color's ranks form an instance */
  for (int a = 0; a < nranks; a++) {
    const fpn_plan *P = &rv[a].P;
    CHECK(P->npairs == rv[0].P.npairs, "%s: ranks make different numbers of communicators", name);
    for (int32_t q = 0; q < P->npairs && q < rv[0].P.npairs; q++) {
      CHECK(P->pair_comm[q] == rv[0].P.pair_comm[q] && P->pair_stream[q] == rv[0].P.pair_stream[q],
            "%s: split %d differs between ranks", name, q);
      const fp_ir_comm *c = &p->comms[P->pair_comm[q]];
      int members = 0;
      for (int b = 0; b < nranks; b++)
        if (rv[b].P.color[q] == P->color[q]) {
          members++;
          CHECK(rv[b].P.key[q] == fpi_comm_index(c, rv[b].x->rank), "%s: key", name);
          CHECK(rv[b].x->rank == P->color[q] + rv[b].P.key[q] * c->stride, "%s: color %d does not hold rank %" PRId64,
                name, P->color[q], rv[b].x->rank);
        }
      if (nranks == p->world_size) CHECK(members == c->size, "%s: color %d has %d members, '%s' has %" PRId64, name,
                                         P->color[q], members, c->name, c->size);
    }
  }
}

static int run_plan(const char *path) {
  fp_plan *plan = NULL;
  if (fp_plan_load(path, &plan) != FP_OK) {
    fprintf(stderr, "%s: %s\n", path, fp_plan_errmsg(plan));
    fp_plan_free(plan);
    return 1;
  }
  fp_plan_info info;
  fp_plan_get_info(plan, &info);
  int W = (int)info.world_size, nranks = W < 16 ? W : 16;
  rankview *rv = calloc((size_t)nranks, sizeof *rv);
  int64_t items = 0, runs = 0;
  for (int r = 0; r < nranks; r++) {
    fp_exec_config cfg = {.backend = FP_BACKEND_NCCL, .rank = r, .world_size = W};
    fp_status st = fpx_create_with(plan, &cfg, &test_backend, &rv[r].x);
    CHECK(st == FP_OK, "%s rank %d: %s", path, r, fp_exec_errmsg(rv[r].x));
    if (st != FP_OK) return 1;
    st = fpn_plan_build(rv[r].x, &rv[r].P);
    CHECK(st == FP_OK, "%s rank %d: %s", path, r, fp_exec_errmsg(rv[r].x));
    if (st != FP_OK) return 1;
    check_rank(path, &rv[r]);
    if (r == 0) { /* a backend without the trainer's reduction refuses it, and stays usable */
      double v = 1;
      CHECK(fp_exec_all_reduce_f64(rv[r].x, &v, 1) == FP_ERR_BACKEND &&
                strstr(fp_exec_errmsg(rv[r].x), "the test backend has no reduction") && !rv[r].x->broken,
            "%s: all-reduce without a backend reduction: %s", path, fp_exec_errmsg(rv[r].x));
      CHECK(fp_exec_all_reduce_f64_dev(rv[r].x, &v, 1, 0) == FP_ERR_BACKEND &&
                strstr(fp_exec_errmsg(rv[r].x), "the test backend keeps its values in host memory") &&
                !rv[r].x->broken,
            "%s: device all-reduce without a backend reduction: %s", path, fp_exec_errmsg(rv[r].x));
      CHECK(fp_exec_all_reduce_f64_dev(rv[r].x, NULL, 1, 0) == FP_ERR_ARG &&
                strstr(fp_exec_errmsg(rv[r].x), "fp_exec_all_reduce_f64_dev: 1 values (expected 0 to 4096, and a "
                                                "buffer)"),
            "%s: device all-reduce of NULL: %s", path, fp_exec_errmsg(rv[r].x));
    }
    items += rv[r].P.nitems;
    runs += rv[r].P.nruns;
  }
  check_cross_rank(path, rv, nranks);
  printf("%s: %d rank(s), %" PRId32 " ops, %" PRId64 " items, %" PRId64 " runs, %" PRId32 " communicator(s) per rank\n",
         path, nranks, info.nops, items, runs, rv[0].P.npairs);
  for (int r = 0; r < nranks; r++) {
    fpn_plan_free(&rv[r].P);
    free(rv[r].issue);
    fp_exec_destroy(rv[r].x);
  }
  free(rv);
  fp_plan_free(plan);
  return 0;
}

/* ---- bootstrap ------------------------------------------------------------------------------ */
static void boot_case(const char *what, fp_exec_config cfg, bool mpi_up, const char *env, fp_status want_st,
                      fpn_boot want, const char *msg_has) {
  char msg[512] = "";
  fpn_boot got = (fpn_boot)-1;
  fp_status st = fpn_boot_resolve(&cfg, mpi_up, env, &got, msg, sizeof msg);
  CHECK(st == want_st, "boot %s: status %s, want %s (%s)", what, fp_status_name(st), fp_status_name(want_st), msg);
  if (st == FP_OK) CHECK(got == want, "boot %s: %s, want %s", what, fpn_boot_name(got), fpn_boot_name(want));
  else CHECK(strstr(msg, msg_has) != NULL, "boot %s: message '%s' lacks '%s'", what, msg, msg_has);
}

static void boot_rules(void) {
  fp_exec_config c1 = {.backend = FP_BACKEND_NCCL, .rank = 0, .world_size = 1};
  fp_exec_config c4 = {.backend = FP_BACKEND_NCCL, .rank = 2, .world_size = 4};
  int comm = 0;
  boot_case("default, one rank, nothing", c1, false, NULL, FP_OK, FPN_BOOT_LOCAL, "");
  boot_case("default, MPI up", c4, true, NULL, FP_OK, FPN_BOOT_MPI, "");
  boot_case("default, MPI up and NCCL_COMM_ID", c4, true, "h:1", FP_OK, FPN_BOOT_MPI, "");
  boot_case("default, NCCL_COMM_ID", c4, false, "10.0.0.1:29500", FP_OK, FPN_BOOT_ENV, "");
  boot_case("default, empty NCCL_COMM_ID, 4 ranks", c4, false, "", FP_ERR_ARG, 0, "no way to bootstrap 4 ranks");
  boot_case("default, 4 ranks, nothing", c4, false, NULL, FP_ERR_ARG, 0, "no way to bootstrap");
  fp_exec_config c = c4;
  c.nccl_boot = FP_NCCL_BOOT_ID;
  boot_case("id, zeros", c, true, NULL, FP_ERR_ARG, 0, "all zeros");
  c.nccl_id.bytes[77] = 1;
  boot_case("id", c, true, "h:1", FP_OK, FPN_BOOT_ID, "");
  c.bootstrap = &comm;
  boot_case("id with an MPI communicator", c, true, NULL, FP_ERR_ARG, 0, "cfg.bootstrap");
  c = c4;
  c.nccl_boot = FP_NCCL_BOOT_MPI;
  boot_case("mpi, MPI down", c, false, "h:1", FP_ERR_ARG, 0, "needs MPI initialized");
  c.bootstrap = &comm;
  boot_case("mpi with a communicator", c, true, NULL, FP_OK, FPN_BOOT_MPI, "");
  c = c4;
  c.nccl_boot = FP_NCCL_BOOT_ENV;
  boot_case("env, unset", c, true, NULL, FP_ERR_ARG, 0, "not set");
  boot_case("env, no port", c, true, "host", FP_ERR_ARG, 0, "not host:port");
  boot_case("env, port 0", c, true, "host:0", FP_ERR_ARG, 0, "not host:port");
  boot_case("env, port 70000", c, true, "host:70000", FP_ERR_ARG, 0, "not host:port");
  boot_case("env, port junk", c, true, "host:12a", FP_ERR_ARG, 0, "not host:port");
  boot_case("env, no host", c, true, ":29500", FP_ERR_ARG, 0, "not host:port");
  boot_case("env, IPv6", c, false, "[fe80::1]:29500", FP_OK, FPN_BOOT_ENV, "");
  c.nccl_boot = (fp_nccl_boot)7;
  boot_case("unknown boot", c, true, NULL, FP_ERR_ARG, 0, "unknown nccl_boot");
  c = c4;
  c.cuda_mode = (fp_cuda_mode)3;
  boot_case("unknown mode", c, true, NULL, FP_ERR_ARG, 0, "unknown cuda_mode");
}

int main(int argc, char **argv) {
  boot_rules();
  if (argc < 2) {
    fprintf(stderr, "usage: test_nccl_plan PLAN...\n");
    return 2;
  }
  for (int k = 1; k < argc; k++) failures += run_plan(argv[k]);
  printf("%s: %d failed check(s)\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
