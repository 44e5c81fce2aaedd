/* test_plugins.c - placement plug-ins (docs/placements.md) through the public
 * API: the example plug-ins (examples/placements.h) against hand-computed
 * layouts, their plans against the plans of the built-in specs that hold
 * the same elements the same way (the .fpir text equal: one lowering), and
 * planted faulty plug-ins - an element held twice, an element held by no
 * rank, a piece outside the param, a misaligned piece, a broadcast from two
 * ranks, an unpaired collective, a plug-in that refuses - each rejected with
 * its located message and no plan. The MPI parity of the examples is
 * tests/exec.cmake's (plugin_compile). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../examples/placements.h"

static const char *const mlp =
    "{\"format\": \"flexplan.model.v1\", \"name\": \"mlp\", \"modules\": ["
    "{\"name\": \"fc0\", \"params\": [{\"name\": \"fc0.weight\", \"shape\": [20, 13]}, {\"name\": \"fc0.bias\", \"shape\": [20]}]},"
    "{\"name\": \"fc1\", \"params\": [{\"name\": \"fc1.weight\", \"shape\": [19, 20]}, {\"name\": \"fc1.bias\", \"shape\": [19]}]},"
    "{\"name\": \"fc2\", \"params\": [{\"name\": \"fc2.weight\", \"shape\": [11, 19]}, {\"name\": \"fc2.bias\", \"shape\": [11]}]},"
    "{\"name\": \"fc3\", \"params\": [{\"name\": \"fc3.weight\", \"shape\": [5, 11]}]}]}";

/* a spec over world ranks with bucket fc0 placed `p0`, fc1 `p1`, fc3 `p3`
 * (JSON objects; fc2 the default shard) */
static char *spec4(int world, const char *p0, const char *p1, const char *p3) {
  char *s = malloc(4096);
  snprintf(s, 4096,
           "{\"format\": \"flexplan.spec.v1\", \"mesh\": {\"world_size\": %d},\n"
           "\"defaults\": {\"mixed_precision\": {\"param_dtype\": \"fp32\", \"reduce_dtype\": \"fp32\", "
           "\"main_grad_dtype\": \"fp32\"}},\n\"buckets\": [\n"
           "{\"name\": \"fc0\", \"params\": [\"fc0.*\"], \"placement\": %s},\n"
           "{\"name\": \"fc1\", \"params\": [\"fc1.*\"], \"placement\": %s},\n"
           "{\"name\": \"fc2\", \"params\": [\"fc2.*\"]},\n"
           "{\"name\": \"fc3\", \"params\": [\"fc3.*\"], \"placement\": %s}]}",
           world, p0, p1, p3);
  return s;
}

/* compile; the .fpir text (malloc'd) or NULL and the message in *msg */
static char *compile(const char *model, const char *spec, const fp_placement_set *set, char **msg) {
  fp_compile_options o = {.model_text = model, .spec_text = spec, .placements = set};
  fp_plan *p = NULL;
  char *ir = NULL;
  *msg = NULL;
  fp_status st = fp_plan_compile(&o, &p);
  if (st == FP_OK) assert_int_equal(fp_plan_render(p, FP_RENDER_IR, NULL, &ir), FP_OK);
  else *msg = strdup(fp_plan_errmsg(p));
  fp_plan_free(p);
  return ir;
}

static fp_placement_set *examples(ex_block_cyclic *bc, ex_expert_owned *eo) {
  fp_placement_set *set = NULL;
  assert_int_equal(fp_placement_set_create(&set), FP_OK);
  assert_int_equal(ex_placements_add(set, bc, eo), FP_OK);
  return set;
}

/* ---- the examples' layouts, by hand ------------------------------------------------ */
static void pieces_of(const fp_placement_plugin *pl, void *user, const fp_placement_param *p, int64_t g,
                      const fp_piece *want, int64_t nwant) {
  fp_piece got[8];
  int64_t n = -1;
  char err[128];
  assert_int_equal(pl->pieces(user, p, g, got, 8, &n, err, sizeof err), FP_OK);
  assert_true(n <= 8);
  assert_int_equal(n, nwant);
  for (int64_t k = 0; k < n; k++) {
    assert_int_equal(got[k].begin, want[k].begin);
    assert_int_equal(got[k].count, want[k].count);
  }
}

static void block_cyclic_by_hand(void **state) {
  (void)state;
  ex_block_cyclic bc = {8};
  int64_t shape[] = {20, 13};
  /* 20 rows of 13 in blocks of 8 rows: blocks [0,8) [8,16) [16,20) */
  fp_placement_param w3 = {"fc0.weight", "fc0", 2, shape, 260, 3, 4};
  pieces_of(&ex_block_cyclic_plugin, &bc, &w3, 0, (fp_piece[]){{0, 104}}, 1);
  pieces_of(&ex_block_cyclic_plugin, &bc, &w3, 1, (fp_piece[]){{104, 104}}, 1);
  pieces_of(&ex_block_cyclic_plugin, &bc, &w3, 2, (fp_piece[]){{208, 52}}, 1);
  fp_placement_param w2 = w3;
  w2.group_size = 2; /* rank 0 gets blocks 0 and 2 */
  pieces_of(&ex_block_cyclic_plugin, &bc, &w2, 0, (fp_piece[]){{0, 104}, {208, 52}}, 2);
  pieces_of(&ex_block_cyclic_plugin, &bc, &w2, 1, (fp_piece[]){{104, 104}}, 1);
  bc.block = 3; /* blocks of 3 rows over 4 ranks: rank 1 rows 3-5, 15-17 */
  fp_placement_param w4 = w3;
  w4.group_size = 4;
  pieces_of(&ex_block_cyclic_plugin, &bc, &w4, 1, (fp_piece[]){{39, 39}, {195, 39}}, 2);
  pieces_of(&ex_block_cyclic_plugin, &bc, &w4, 2, (fp_piece[]){{78, 39}, {234, 26}}, 2);
  fp_placement_layout l = {0, 0, 0};
  char err[64];
  assert_int_equal(ex_block_cyclic_plugin.describe(&bc, &w4, &l, err, sizeof err), FP_OK);
  assert_int_equal(l.align_elems, 13);
  assert_int_equal(l.unshard, FP_UNSHARD_ALL_GATHER_V);
  assert_int_equal(l.reduce, FP_REDUCE_REDUCE_SCATTER_V);
}

static void expert_owned_by_hand(void **state) {
  (void)state;
  ex_expert_owned eo = {"experts."};
  int64_t shape[] = {4, 6};
  fp_placement_param p = {"layers.3.experts.5.w1", "layers.3.experts.5", 2, shape, 24, 4, 2};
  for (int64_t g = 0; g < 4; g++) /* expert 5 of 4 ranks: rank 1 */
    pieces_of(&ex_expert_owned_plugin, &eo, &p, g, (fp_piece[]){{0, 24}}, g == 1);
  fp_placement_layout l = {0, 0, 0};
  char err[128];
  assert_int_equal(ex_expert_owned_plugin.describe(&eo, &p, &l, err, sizeof err), FP_OK);
  assert_int_equal(l.unshard, FP_UNSHARD_BROADCAST);
  assert_int_equal(l.reduce, FP_REDUCE_TO_OWNER);
  p.name = "layers.3.router.weight";
  assert_int_not_equal(ex_expert_owned_plugin.describe(&eo, &p, &l, err, sizeof err), FP_OK);
  assert_string_equal(err, "expert_owned: no expert index after 'experts.' in the name");
}

/* ---- their plans: those of the built-in specs holding the same elements ------------- */
static void block_cyclic_is_ragged(void **state) {
  (void)state;
  ex_block_cyclic bc = {8};
  ex_expert_owned eo = {"experts."};
  fp_placement_set *set = examples(&bc, &eo);
  const char *k = "{\"kind\": \"block_cyclic\"}";
  char *s1 = spec4(3, k, k, k), *msg;
  /* by hand: fc0 rows 8/8/4 of 20, fc1 8/8/3 of 19, fc3 all 5 on rank 0 */
  char *s2 = spec4(3, "{\"kind\": \"ragged_shard\", \"units\": [2, 2, 1]}",
                   "{\"kind\": \"ragged_shard\", \"units\": [8, 8, 3]}", "{\"kind\": \"ragged_shard\", \"units\": [1, 0, 0]}");
  char *a = compile(mlp, s1, set, &msg);
  if (!a) fail_msg("%s", msg);
  char *b = compile(mlp, s2, NULL, &msg);
  if (!b) fail_msg("%s", msg);
  assert_string_equal(a, b);
  free(a), free(b), free(s1), free(s2);
  fp_placement_set_free(set);
}

static void expert_owned_is_owned(void **state) {
  (void)state;
  ex_block_cyclic bc = {8};
  ex_expert_owned eo = {"fc"}; /* fc0 .. fc3: experts 0 .. 3 */
  fp_placement_set *set = examples(&bc, &eo);
  const char *k = "{\"kind\": \"expert_owned\"}";
  char *s1 = spec4(3, k, k, k), *msg;
  /* by hand: expert e on rank e mod 3 */
  char *s2 = spec4(3, "{\"kind\": \"owned\", \"rank\": 0}", "{\"kind\": \"owned\", \"rank\": 1}",
                   "{\"kind\": \"owned\", \"rank\": 0}");
  char *a = compile(mlp, s1, set, &msg);
  if (!a) fail_msg("%s", msg);
  char *b = compile(mlp, s2, NULL, &msg);
  if (!b) fail_msg("%s", msg);
  assert_string_equal(a, b);
  free(a), free(b), free(s1), free(s2);
  fp_placement_set_free(set);
}

/* blocks of 4 rows at 2 ranks: rank 0 holds blocks 0, 2, 4 of fc0 (3 x 52
 * elements), rank 1 blocks 1 and 3: the cyclic_shard layout, gathered into
 * staging chunks of 156 elements and copied out, 3 and 2 rows of 52, 104
 * apart in the param */
static void block_cyclic_is_cyclic(void **state) {
  (void)state;
  ex_block_cyclic bc = {4};
  ex_expert_owned eo = {"experts."};
  fp_placement_set *set = examples(&bc, &eo);
  char *s = spec4(2, "{\"kind\": \"block_cyclic\"}", "{\"kind\": \"shard\"}", "{\"kind\": \"shard\"}"), *msg;
  char *ir = compile(mlp, s, set, &msg);
  if (!ir) fail_msg("%s", msg);
  assert_non_null(strstr(ir, "param  0  fc0.weight  shape=[20,13]  module=fc0  bucket=fc0  dtypes=fp32/fp32/fp32  "
                             "cyclic_shard  comm=world  tab=fc0.weight  chunk=156  "));
  assert_non_null(strstr(ir, "copy              fp32  n=52   dst=fc0.weight[0]  src=fc0.gstage[0]  rows=3  dpitch=416  "
                             "spitch=208"));
  assert_non_null(strstr(ir, "copy              fp32  n=52   dst=fc0.weight[208]  src=fc0.gstage[624]  rows=2  "
                             "dpitch=416  spitch=208"));
  assert_non_null(strstr(ir, "all_gather_v      fp32  n=0    dst=fc0.gstage[0]  src=fc0.gstage[0+tab]  comm=world  "
                             "tab=fc0.weight.stage"));
  free(ir), free(s);
  fp_placement_set_free(set);
}

/* a short last block: blocks of 8 rows of fc0's 20 (8 x 13 = 104 elements)
 * at 2 ranks deal blocks 0 and 2 (rows 0-7, then the 4 rows 16-19: 104 + 52
 * elements) to rank 0 and block 1 (rows 8-15) to rank 1: the cyclic_shard
 * layout, its table {0, +156}, {104, +104}, chunk 156; the unshard copies
 * each rank's whole blocks out of its staging chunk (one row of 104 for
 * each) and rank 0's short block alone (52 elements from staging element
 * 104 to param element 208); the reduction the reverse */
static void block_cyclic_short_block(void **state) {
  (void)state;
  ex_block_cyclic bc = {8};
  ex_expert_owned eo = {"experts."};
  fp_placement_set *set = examples(&bc, &eo);
  char *s = spec4(2, "{\"kind\": \"block_cyclic\"}", "{\"kind\": \"shard\"}", "{\"kind\": \"shard\"}"), *msg;
  char *ir = compile(mlp, s, set, &msg);
  if (!ir) fail_msg("%s", msg);
  assert_non_null(strstr(ir, "param  0  fc0.weight  shape=[20,13]  module=fc0  bucket=fc0  dtypes=fp32/fp32/fp32  "
                             "cyclic_shard  comm=world  tab=fc0.weight  chunk=156  "));
  assert_non_null(strstr(ir, "table  0  fc0.weight        n=2\n  off 0 104\n  cnt 156 104\n"));
  assert_non_null(strstr(ir, "copy              fp32  n=104  dst=fc0.weight[0]  src=fc0.gstage[0]  dpitch=832  "
                             "spitch=416"));
  assert_non_null(strstr(ir, "copy              fp32  n=52   dst=fc0.weight[832]  src=fc0.gstage[416]  bucket=fc0"));
  assert_non_null(strstr(ir, "copy              fp32  n=104  dst=fc0.weight[416]  src=fc0.gstage[624]  dpitch=832  "
                             "spitch=416"));
  assert_non_null(strstr(ir, "copy              fp32  n=52   dst=fc0.rstage[416]  src=fc0.ugrad[832]  bucket=fc0"));
  free(ir), free(s);
  fp_placement_set_free(set);
}

/* ---- planted faults ------------------------------------------------------------------ */
typedef enum { TWICE, NEVER, OUTSIDE, MISALIGNED, BCAST2, UNPAIRED, REFUSE, NOT_EVEN, ALIGN0, BADENUM, TOO_MANY, CHANGES,
               NEGATIVE, PIECE_ERR, OUT_OF_ORDER, REPLICA_SHORT, REPLICA_TWICE } fault;

static fp_status f_describe(void *user, const fp_placement_param *p, fp_placement_layout *out, char *err,
                            size_t errcap) {
  fault f = *(const fault *)user;
  (void)p;
  out->align_elems = f == MISALIGNED ? 4 : 1;
  out->unshard = f == BCAST2 ? FP_UNSHARD_BROADCAST : f == NOT_EVEN ? FP_UNSHARD_ALL_GATHER : FP_UNSHARD_ALL_GATHER_V;
  out->reduce = f == BCAST2 ? FP_REDUCE_TO_OWNER : f == NOT_EVEN ? FP_REDUCE_REDUCE_SCATTER : FP_REDUCE_REDUCE_SCATTER_V;
  if (f == UNPAIRED) out->reduce = FP_REDUCE_ALL_REDUCE;
  if (f == ALIGN0) out->align_elems = 0;
  if (f == REPLICA_SHORT || f == REPLICA_TWICE) out->unshard = FP_UNSHARD_NONE, out->reduce = FP_REDUCE_ALL_REDUCE;
  if (f == BADENUM) out->unshard = (fp_unshard)7;
  if (f == REFUSE) {
    snprintf(err, errcap, "this param is too small for me");
    return FP_ERR_ARG;
  }
  return FP_OK;
}

/* rank g of 2 holds the half [g*h, g*h+h) (h = numel / 2, the rest to rank 1), but for the fault */
static fp_status f_pieces(void *user, const fp_placement_param *p, int64_t g, fp_piece *out, int64_t cap, int64_t *n,
                          char *err, size_t errcap) {
  fault f = *(const fault *)user;
  (void)err, (void)errcap;
  int64_t h = p->numel / 2, b = g * h, c = g ? p->numel - h : h;
  if (f == TWICE && g == 1) b = 7, c = p->numel - 7;   /* elements 7 .. h-1 twice */
  if (f == NEVER && g == 1) b = h + 1, c = p->numel - h - 1; /* element h by none */
  if (f == OUTSIDE && g == 1) c += 1;                  /* one past the end */
  if (f == MISALIGNED) b = g ? 5 : 0, c = g ? p->numel - 5 : 5; /* cut at 5, claimed 4 */
  if (f == NOT_EVEN) b = g ? 10 : 0, c = g ? p->numel - 10 : 10;
  if (f == OUT_OF_ORDER) b = g ? 0 : p->numel - h, c = g ? p->numel - h : h; /* rank 1 first */
  if (f == REPLICA_SHORT || f == REPLICA_TWICE) { /* every rank the whole param, but rank 1 */
    int64_t k = 0;
    if (k < cap) out[k] = (fp_piece){0, g == 1 && f == REPLICA_SHORT ? p->numel - 1 : p->numel};
    k++;
    if (g == 1 && f == REPLICA_TWICE && k < cap) out[k] = (fp_piece){3, 1};
    if (g == 1 && f == REPLICA_TWICE) k++;
    return *n = k, FP_OK;
  }
  static int calls;
  if (f == TOO_MANY && g == 1) return *n = 1000, FP_OK;
  if (f == CHANGES && g == 1) return *n = cap + 1 + calls++, FP_OK; /* never fits */
  if (f == NEGATIVE && g == 1) return *n = -2, FP_OK;
  if (f == PIECE_ERR && g == 1) return snprintf(err, errcap, "no piece for you"), FP_ERR_ARG;
  *n = 1;
  if (cap > 0) out[0] = (fp_piece){b, c};
  return FP_OK;
}

static const fp_placement_plugin faulty = {f_describe, f_pieces};

static void expect_fault(fault f, const char *want) {
  fp_placement_set *set = NULL;
  assert_int_equal(fp_placement_set_create(&set), FP_OK);
  assert_int_equal(fp_placement_set_add(set, "faulty", &faulty, &f), FP_OK);
  char *s = spec4(2, "{\"kind\": \"faulty\"}", "{\"kind\": \"shard\"}", "{\"kind\": \"shard\"}"), *msg;
  assert_null(compile(mlp, s, set, &msg));
  assert_string_equal(msg, want);
  free(msg), free(s);
  fp_placement_set_free(set);
}

static void fault_twice(void **state) {
  (void)state;
  expect_fault(TWICE, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': element 7 of param "
                      "'fc0.weight' is held twice (rank 0 and rank 1)");
}
static void fault_never(void **state) {
  (void)state;
  expect_fault(NEVER, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': element 130 of param "
                      "'fc0.weight' is held by no rank");
}
static void fault_outside(void **state) {
  (void)state;
  expect_fault(OUTSIDE, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': rank 1's piece 0 "
                        "[130, +131) lies outside param 'fc0.weight' of 260 elements");
}
static void fault_misaligned(void **state) {
  (void)state;
  expect_fault(MISALIGNED, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': rank 0's piece 0 "
                           "[0, 5) of param 'fc0.weight' is not on the 4-element alignment the placement claims");
}
static void fault_broadcast_two(void **state) {
  (void)state;
  expect_fault(BCAST2, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': param 'fc0.weight' is "
                       "unsharded by broadcast, so one rank must hold all of it, but ranks 0 and 1 hold pieces of it");
}
static void fault_unpaired(void **state) {
  (void)state;
  expect_fault(UNPAIRED, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': param 'fc0.weight': a "
                         "param unsharded by all_gather_v is not reduced by all_reduce (the pairs: all_gather with "
                         "reduce_scatter, all_gather_v with reduce_scatter_v, broadcast with reduce, none with "
                         "all_reduce)");
}
static void fault_refuse(void **state) {
  (void)state;
  expect_fault(REFUSE, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': param 'fc0.weight': "
                       "this param is too small for me");
}
static void fault_not_even(void **state) {
  (void)state;
  expect_fault(NOT_EVEN, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': all_gather gathers "
                         "equal pieces, but the pieces of param 'fc0.weight' are not the even split of any of its "
                         "dims over 2 ranks (use all_gather_v for uneven runs)");
}

static void fault_alignment(void **state) {
  (void)state;
  expect_fault(ALIGN0, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': param 'fc0.weight': "
                       "alignment 0 is not a positive element count");
  expect_fault(BADENUM, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': param 'fc0.weight': "
                        "unknown unshard collective 7 or reduction 1");
}
static void fault_piece_counts(void **state) {
  (void)state;
  expect_fault(TOO_MANY, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': param 'fc0.weight': "
                         "rank 1 gives 1000 pieces of a param of 260 elements");
  expect_fault(CHANGES, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': param 'fc0.weight', "
                        "rank 1: its pieces changed between two calls");
  expect_fault(NEGATIVE, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': param 'fc0.weight', "
                         "rank 1: a negative piece count -2");
  expect_fault(PIECE_ERR, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': param 'fc0.weight', "
                          "rank 1: no piece for you");
  expect_fault(OUT_OF_ORDER, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': all_gather_v "
                             "gathers the ranks' runs in rank order, but rank 0's run of param 'fc0.weight' begins at "
                             "element 130, not at 0 where the runs of the ranks before it end");
}

static void fault_replicas(void **state) {
  (void)state;
  expect_fault(REPLICA_SHORT, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': element 259 of "
                              "param 'fc0.weight' is held by no rank (unshard none: every rank holds it all; not "
                              "rank 1)");
  expect_fault(REPLICA_TWICE, "<spec>:4:51: error: /buckets/0/placement: placement plug-in 'faulty': element 3 of "
                              "param 'fc0.weight' is held twice by rank 1 (unshard none: each rank holds each element "
                              "once)");
}

/* ---- the set and the spec ------------------------------------------------------------ */
static void set_refusals(void **state) {
  (void)state;
  fault f = TWICE;
  fp_placement_set *set = NULL;
  assert_int_equal(fp_placement_set_create(NULL), FP_ERR_ARG);
  assert_int_equal(fp_placement_set_create(&set), FP_OK);
  assert_int_equal(fp_placement_set_add(set, "shard", &faulty, &f), FP_ERR_ARG);
  assert_string_equal(fp_placement_set_errmsg(set), "fp_placement_set_add: 'shard' is a built-in placement kind");
  assert_int_equal(fp_placement_set_add(set, "Bad-name", &faulty, &f), FP_ERR_ARG);
  assert_string_equal(fp_placement_set_errmsg(set),
                      "fp_placement_set_add: 'Bad-name' is not a plug-in name ([a-z][a-z0-9_]*, at most 63 characters)");
  fp_placement_plugin half = {f_describe, NULL};
  assert_int_equal(fp_placement_set_add(set, "half", &half, &f), FP_ERR_ARG);
  assert_string_equal(fp_placement_set_errmsg(set), "fp_placement_set_add: plug-in 'half' lacks describe or pieces");
  assert_int_equal(fp_placement_set_add(set, "faulty", &faulty, &f), FP_OK);
  assert_string_equal(fp_placement_set_errmsg(set), "");
  assert_int_equal(fp_placement_set_add(set, "faulty", &faulty, &f), FP_ERR_ARG);
  assert_string_equal(fp_placement_set_errmsg(set), "fp_placement_set_add: 'faulty' is already registered");
  assert_int_equal(fp_placement_set_add(NULL, "x", &faulty, &f), FP_ERR_ARG);
  /* a plug-in's object takes nothing but its kind; an unregistered kind is unknown */
  char *s = spec4(2, "{\"kind\": \"faulty\", \"dim\": 1}", "{\"kind\": \"shard\"}", "{\"kind\": \"shard\"}"), *msg;
  assert_null(compile(mlp, s, set, &msg));
  assert_string_equal(msg, "<spec>:4:77: error: /buckets/0/placement/dim: unknown member 'dim' (expected one of: kind)");
  free(msg), free(s);
  s = spec4(2, "{\"kind\": \"faulty\"}", "{\"kind\": \"shard\"}", "{\"kind\": \"shard\"}");
  assert_null(compile(mlp, s, NULL, &msg));
  assert_string_equal(msg, "<spec>:4:60: error: /buckets/0/placement/kind: expected one of \"shard\", "
                           "\"ragged_shard\", \"owned\", \"replicate\" or the name of a registered placement "
                           "plug-in, got \"faulty\" (no plug-in is registered under it; docs/placements.md)");
  free(msg), free(s);
  fp_placement_set_free(set);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(block_cyclic_by_hand),   cmocka_unit_test(expert_owned_by_hand),
      cmocka_unit_test(block_cyclic_is_ragged), cmocka_unit_test(expert_owned_is_owned),
      cmocka_unit_test(block_cyclic_is_cyclic), cmocka_unit_test(block_cyclic_short_block),
      cmocka_unit_test(fault_twice),            cmocka_unit_test(fault_never),
      cmocka_unit_test(fault_outside),          cmocka_unit_test(fault_misaligned),
      cmocka_unit_test(fault_broadcast_two),    cmocka_unit_test(fault_unpaired),
      cmocka_unit_test(fault_refuse),           cmocka_unit_test(fault_not_even),
      cmocka_unit_test(fault_alignment),        cmocka_unit_test(fault_piece_counts),
      cmocka_unit_test(fault_replicas),
      cmocka_unit_test(set_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
