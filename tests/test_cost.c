/* test_cost.c - the cost model against figures computed by hand.
 *
 * Every expected value below is written out as the arithmetic of
 * docs/cost-model.md on the h100-sxm preset: NVLink busbw 370.8 GB/s
 * (= 370800 bytes/us), one NIC 48 GB/s (48000 bytes/us), base latency
 * 8.4 us, 3.4 us per NVLink ring step, 14 us per network step, HBM
 * 3350 GB/s, launch 2 us, 989.5 TFLOP/s. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/cost.h"

#define NEAR(got, want)                                                              \
  do {                                                                               \
    double g_ = (got), w_ = (want);                                                  \
    if (!(fabs(g_ - w_) <= 1e-9 * fmax(1, fabs(w_))))                                \
      fprintf(stderr, "%s:%d: got %.12g, want %.12g\n", __FILE__, __LINE__, g_, w_); \
    assert_true(fabs(g_ - w_) <= 1e-9 * fmax(1, fabs(w_)));                          \
  } while (0)

static fp_hw h100(void) {
  fp_hw h;
  assert_true(fpi_hw_preset("h100-sxm", &h));
  return h;
}

/* a program on `world` ranks, `rpn` per node, with one communicator */
static fp_prog *prog(fp_arena *a, int64_t world, int64_t rpn, int64_t size, int64_t stride, int *comm) {
  fp_prog *p = fpi_prog_new(a);
  p->world_size = world;
  p->ranks_per_node = rpn;
  *comm = fpi_ir_comm_add(p, "c", size, stride);
  fpi_ir_seg_begin(p, FP_SEG_STEP_BEGIN, -1, 0);
  return p;
}

static fp_op *coll(fp_prog *p, fp_opcode code, fp_dtype dt, int64_t n, int comm) {
  fp_op *o = fpi_ir_emit(p, code, FP_STREAM_AG, dt, n);
  o->comm = comm;
  return o;
}

static void test_presets(void **state) {
  (void)state;
  fp_hw h;
  assert_false(fpi_hw_preset("a100", &h));
  assert_false(fpi_hw_preset(NULL, &h));
  h = h100();
  assert_string_equal(h.name, "h100-sxm");
  assert_int_equal(h.gpus_per_node, 8);
  assert_int_equal(h.hbm_bytes, 85899345920);
  NEAR(h.nvlink_gbps, 20.6 * 18);
  assert_true(fpi_hw_valid(&h));
  assert_true(fpi_hw_preset("h200", &h));
  NEAR(h.hbm_gbps, 4800);
  assert_int_equal(h.hbm_bytes, (int64_t)141 << 30);
  h.net_hop_us = 0;
  assert_false(fpi_hw_valid(&h));

  /* a spec's preset and overrides */
  fp_spec s;
  memset(&s, 0, sizeof s);
  s.hw_preset = "h200";
  s.hw_ib_gbps = 25;
  s.hw_flops = 5e14;
  fpi_hw_from_spec(&s, &h);
  assert_string_equal(h.name, "h200");
  NEAR(h.ib_gbps, 25);
  NEAR(h.flops, 5e14);
  NEAR(h.nvlink_gbps, 370.8); /* not overridden */
  assert_int_equal(h.gpus_per_node, 8);
}

static void test_geometry(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  int c;
  fp_prog *p = prog(a, 64, 8, 8, 1, &c);
  fp_comm_geo g = fpi_comm_geometry(p, &p->comms[c]); /* a node's 8 ranks */
  assert_true(g.size == 8 && g.per_node == 8 && g.nodes == 1);
  int r = fpi_ir_comm_add(p, "replica", 8, 8); /* hybrid: one member per node */
  g = fpi_comm_geometry(p, &p->comms[r]);
  assert_true(g.size == 8 && g.per_node == 1 && g.nodes == 8);
  int w = fpi_ir_comm_add(p, "world", 64, 1);
  g = fpi_comm_geometry(p, &p->comms[w]);
  assert_true(g.per_node == 8 && g.nodes == 8);
  int s2 = fpi_ir_comm_add(p, "stride2", 8, 2); /* 4 per node over 2 nodes */
  g = fpi_comm_geometry(p, &p->comms[s2]);
  assert_true(g.per_node == 4 && g.nodes == 2);
  fpi_arena_free(a);
}

static void test_collectives(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_hw h = h100();
  int c;

  /* all_gather bf16, 2^20 elements per rank, 8 ranks in one node:
   * 8 * 2^20 * 2 = 16777216 bytes, busbw factor 7/8 -> 14680064 bytes;
   * 8.4 + 7 * 3.4 = 32.2 us + 14680064 / 370800 = 39.5902481 us */
  fp_prog *p = prog(a, 8, 8, 8, 1, &c);
  fp_op *o = coll(p, FP_OP_ALL_GATHER, FP_BF16, 1 << 20, c);
  fp_cost t = fpi_cost_terms(p, o, &h);
  NEAR(t.lat_us, 32.2);
  NEAR(t.bw_us, 39.59024811218986);
  NEAR(fpi_cost_op_us(p, o, &h), 71.79024811218986);
  /* reduce_scatter is the same ring */
  o->code = FP_OP_REDUCE_SCATTER;
  NEAR(fpi_cost_op_us(p, o, &h), 71.79024811218986);
  /* broadcast: a chain of 7 NVLink steps, all 2^21 bytes at busbw:
   * 32.2 + 2097152 / 370800 = 37.8557497 */
  o->code = FP_OP_BROADCAST;
  o->root = 0;
  NEAR(fpi_cost_op_us(p, o, &h), 37.85574973031284);

  /* reduce_scatter fp32 over 16 ranks on 2 nodes of 8: 16 * 2^20 * 4 =
   * 67108864 bytes * 15/16 = 62914560; 14 NVLink steps and 1 network step:
   * 8.4 + 14 * 3.4 + 14 = 70.0; each member has a NIC: min(370.8, 8 * 48)
   * = 370.8 -> 70.0 + 62914560 / 370800 = 239.6724919 */
  p = prog(a, 16, 8, 16, 1, &c);
  o = coll(p, FP_OP_REDUCE_SCATTER, FP_F32, 1 << 20, c);
  NEAR(fpi_cost_op_us(p, o, &h), 239.67249190938512);

  /* hybrid_shard's replica all_reduce: 4 replicas, stride 8 (one per node):
   * 2^20 fp32 = 4194304 bytes * 2*3/4 = 6291456 over one NIC (48000
   * bytes/us) = 131.072; 2*(4-1) = 6 steps, all on the network: 8.4 + 6*14
   * = 92.4 -> 223.472 */
  p = prog(a, 32, 8, 4, 8, &c);
  o = coll(p, FP_OP_ALL_REDUCE, FP_F32, 1 << 20, c);
  NEAR(fpi_cost_terms(p, o, &h).lat_us, 92.4);
  NEAR(fpi_cost_op_us(p, o, &h), 223.472);

  /* all_reduce inside a node: 2*7 = 14 NVLink steps: 8.4 + 14*3.4 = 56.0;
   * 4194304 * 14/8 = 7340032 / 370800 = 19.7951456 */
  p = prog(a, 8, 8, 8, 1, &c);
  o = coll(p, FP_OP_ALL_REDUCE, FP_F32, 1 << 20, c);
  NEAR(fpi_cost_op_us(p, o, &h), 56.0 + 7340032.0 / 370800.0);

  /* 8 ranks at stride 2: 4 per node on 2 nodes; the ring gets
   * min(370.8, 4 * 48) = 192 GB/s; 6 NVLink steps + 1 network step:
   * 8.4 + 20.4 + 14 = 42.8 + 14680064 / 192000 = 76.4586667 */
  p = prog(a, 16, 8, 8, 2, &c);
  o = coll(p, FP_OP_ALL_GATHER, FP_BF16, 1 << 20, c);
  NEAR(fpi_cost_op_us(p, o, &h), 119.25866666666667);

  /* one rank: nothing to do */
  p = prog(a, 8, 8, 1, 1, &c);
  o = coll(p, FP_OP_ALL_GATHER, FP_BF16, 1 << 20, c);
  NEAR(fpi_cost_op_us(p, o, &h), 0);

  /* all_gather_v: the table's counts (2^20 + 3 * 2^19 elements, bf16) =
   * 5242880 bytes * 3/4 over 4 ranks in a node: 8.4 + 3*3.4 = 18.6 +
   * 3932160 / 370800 = 10.6045307 */
  p = prog(a, 4, 4, 4, 1, &c);
  int64_t off[4] = {0, 1 << 20, 3 << 19, 2 << 20}, cnt[4] = {1 << 20, 1 << 19, 1 << 19, 1 << 19};
  int tab = fpi_ir_table_add(p, "t", 4, off, cnt);
  o = coll(p, FP_OP_ALL_GATHER_V, FP_BF16, 0, c);
  o->tab = tab;
  NEAR(fpi_cost_op_us(p, o, &h), 18.6 + 3932160.0 / 370800.0);
  fpi_arena_free(a);
}

static void test_groups(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_hw h = h100();
  int c;
  /* two all_gathers of the first case in one group: one latency, both
   * bandwidth terms: 32.2 + 2 * 39.5902481 = 111.3804962 */
  fp_prog *p = prog(a, 8, 8, 8, 1, &c);
  coll(p, FP_OP_ALL_GATHER, FP_BF16, 1 << 20, c)->group = 0;
  coll(p, FP_OP_ALL_GATHER, FP_BF16, 1 << 20, c)->group = 0;
  NEAR(fpi_cost_group_us(p, 0, 2, &h), 111.38049622437973);
  /* a send/recv pair: one NVLink step (8.4 + 3.4 = 11.8); the recv's bytes
   * ride the other direction of the send's links: 2097152 / 370800 */
  fp_op *s = coll(p, FP_OP_SEND, FP_BF16, 1 << 20, c);
  fp_op *r = coll(p, FP_OP_RECV, FP_BF16, 1 << 20, c);
  s->root = r->root = 1;
  s->group = r->group = 1;
  NEAR(fpi_cost_group_us(p, 2, 2, &h), 17.45574973031284);
  /* alone, a recv pays for its bytes */
  r->group = -1;
  NEAR(fpi_cost_op_us(p, r, &h), 17.45574973031284);
  fpi_arena_free(a);
}

static void test_local_and_compute(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_hw h = h100();
  int c;
  fp_prog *p = prog(a, 8, 8, 8, 1, &c);
  /* cast fp32->bf16 of 2^20 elements: 6 bytes each = 6291456 / 3350000 =
   * 1.878 us, below the 2 us launch floor */
  fp_op *o = fpi_ir_emit(p, FP_OP_CAST, FP_STREAM_AG, FP_BF16, 1 << 20);
  o->sdtype = FP_F32;
  NEAR(fpi_cost_op_us(p, o, &h), 2.0);
  /* 2^28 elements: 1610612736 / 3350000 = 480.7799212 */
  o->count = 1 << 28;
  NEAR(fpi_cost_op_us(p, o, &h), 480.77992119402984);
  /* memset bf16 2^28: writes 536870912 bytes: 160.2599737; on h200
   * (4800 GB/s): 111.8481067 */
  o = fpi_ir_emit(p, FP_OP_MEMSET, FP_STREAM_COMPUTE, FP_BF16, 1 << 28);
  NEAR(fpi_cost_op_us(p, o, &h), 160.25997373134328);
  fp_hw h2;
  assert_true(fpi_hw_preset("h200", &h2));
  NEAR(fpi_cost_op_us(p, o, &h2), 111.84810666666667);
  /* add fp32 += fp32: read dst and src, write dst: 12 bytes/element */
  o = fpi_ir_emit(p, FP_OP_ADD, FP_STREAM_RS, FP_F32, 1 << 28);
  NEAR(fpi_cost_op_us(p, o, &h), 12.0 * (1 << 28) / 3350e3);
  /* a ragged op: the slowest rank's count (the table's largest) */
  int64_t off[2] = {0, 10}, cnt[2] = {10, 1 << 28};
  o = fpi_ir_emit(p, FP_OP_SCALE, FP_STREAM_COMPUTE, FP_F32, 0);
  o->tab = fpi_ir_table_add(p, "t", 2, off, cnt);
  NEAR(fpi_cost_op_us(p, o, &h), 8.0 * (1 << 28) / 3350e3);
  /* sync ops take no time */
  o = fpi_ir_emit(p, FP_OP_RECORD, FP_STREAM_AG, FP_F32, 0);
  o->event = fpi_ir_event_new(p);
  NEAR(fpi_cost_op_us(p, o, &h), 0);

  /* forward compute of 989.5 GFLOP at 989.5 TFLOP/s: 1000 us */
  int m = fpi_ir_module_add(p, "m", 989.5e9, 2 * 989.5e9, 0);
  o = fpi_ir_emit(p, FP_OP_COMPUTE, FP_STREAM_COMPUTE, FP_F32, 0);
  o->module = m;
  o->alpha = 989.5e9;
  NEAR(fpi_cost_op_us(p, o, &h), 1000.0);
  o->pass = FP_PASS_BWD;
  o->alpha = 2 * 989.5e9;
  NEAR(fpi_cost_op_us(p, o, &h), 2000.0);

  /* the optimizer (module -1): Adam over a 4 MiB main weight and a 4 MiB
   * main grad: 6 * 4194304 + 4194304 = 29360128 bytes / 3350000 =
   * 8.7642173 us */
  int w = fpi_ir_buf_add(p, "w", FP_BUF_PERSISTENT, FP_CAT_MAIN_WEIGHT, -1, 4 << 20);
  int g = fpi_ir_buf_add(p, "g", FP_BUF_PERSISTENT, FP_CAT_MAIN_GRAD, -1, 4 << 20);
  o = fpi_ir_emit(p, FP_OP_COMPUTE, FP_STREAM_COMPUTE, FP_F32, 0);
  o->module = -1;
  fpi_ir_op_uses(p, o, (int32_t[]){w, g}, 2);
  NEAR(fpi_cost_op_us(p, o, &h), 8.764217313432836);
  fpi_arena_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_presets),     cmocka_unit_test(test_geometry),
      cmocka_unit_test(test_collectives), cmocka_unit_test(test_groups),
      cmocka_unit_test(test_local_and_compute),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
