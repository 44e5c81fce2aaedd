/* test_ir.c - unit tests of the IR: builder, .fpir print/parse round trip,
 * plan.json write/read, the content hash, hostile inputs, and one negative
 * test per verifier rule.
 *
 * Most tests start from kitchen(): a small valid program built in code that
 * uses every op and every field, mutate one thing, and check the message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

/* ---- fixtures --------------------------------------------------------------- */
/* World of 4 ranks: shard = pairs {0,1},{2,3}; replica = {0,2},{1,3}. One
 * param of 128 fp32 elements sharded over `shard` (64 per rank), a ragged
 * frozen one in a module with an awkward name, every op once or more. */
typedef struct kit {
  fp_prog *p;
  int world, shard, replica;
  int tab;
  int b0, b1;
  int m0, m1;
  int main, grad, host, unsh, ugrad, rin, mx;
} kit;

static fp_op *emit(fp_prog *p, fp_opcode c, fp_stream s, fp_dtype dt, int64_t n) { return fpi_ir_emit(p, c, s, dt, n); }

static fp_op *sync_op(fp_prog *p, fp_opcode c, fp_stream s, int ev) {
  fp_op *o = emit(p, c, s, FP_F32, 0);
  o->event = ev;
  return o;
}

static kit kitchen(fp_arena *a) {
  kit k;
  fp_prog *p = k.p = fpi_prog_new(a);
  p->model = "kitchen-sink";
  p->strategy = "hybrid_shard";
  p->world_size = 4;
  p->ranks_per_node = 4;
  p->grad_accumulation = 2;
  p->arena_bytes = 1792;
  p->host_bytes = 256;
  p->memory_budget_bytes = 1 << 20;
  p->hw = (fp_hw){.name = "test machine", .gpus_per_node = 4, .hbm_bytes = 1 << 20, .flops = 1e12,
                  .nvlink_gbps = 100, .ib_gbps = 10.5, .hbm_gbps = 1000, .pcie_gbps = 0.1, .base_us = 5,
                  .nvlink_hop_us = 1, .net_hop_us = 2.25, .launch_us = 1e-3};
  k.world = fpi_ir_comm_add(p, "world", 4, 1);
  k.shard = fpi_ir_comm_add(p, "shard", 2, 1);
  k.replica = fpi_ir_comm_add(p, "replica", 2, 2);
  int64_t off[2] = {0, 64}, cnt[2] = {64, 64};
  k.tab = fpi_ir_table_add(p, "t.ragged", 2, off, cnt);
  k.b0 = fpi_ir_bucket_add(p, "b0");
  k.b1 = fpi_ir_bucket_add(p, "bucket one");
  k.main = fpi_ir_buf_add(p, "b0.main", FP_BUF_PERSISTENT, FP_CAT_MAIN_WEIGHT, k.b0, 256);
  k.grad = fpi_ir_buf_add(p, "b0.grad", FP_BUF_PERSISTENT, FP_CAT_MAIN_GRAD, k.b0, 256);
  k.host = fpi_ir_buf_add(p, "b0.offload", FP_BUF_PERSISTENT, FP_CAT_MAIN_WEIGHT, k.b0, 256);
  k.unsh = fpi_ir_buf_add(p, "b0.unsharded", FP_BUF_TRANSIENT, FP_CAT_UNSHARDED_WEIGHT, k.b0, 256);
  k.ugrad = fpi_ir_buf_add(p, "b0.ugrad", FP_BUF_TRANSIENT, FP_CAT_UNSHARDED_GRAD, k.b0, 256);
  k.rin = fpi_ir_buf_add(p, "b0.reduce", FP_BUF_TRANSIENT, FP_CAT_STAGING, -1, 512);
  k.mx = fpi_ir_buf_add(p, "b1.mx", FP_BUF_TRANSIENT, FP_CAT_RESHARD, k.b1, 256);
  p->bufs[k.main].offset = 0;
  p->bufs[k.grad].offset = 256;
  p->bufs[k.host].offset = 0;
  p->bufs[k.host].host = true;
  p->bufs[k.unsh].offset = 512;
  p->bufs[k.ugrad].offset = 768;
  p->bufs[k.rin].offset = 1024;
  p->bufs[k.mx].offset = 1536;
  k.m0 = fpi_ir_module_add(p, "layers.0", 1e9, 2e9, 1024);
  p->mods[k.m0].recompute = true; /* activation checkpointing: keeps 96 of its 1024 bytes */
  p->mods[k.m0].saved_bytes = 96;
  k.m1 = fpi_ir_module_add(p, "weird \"name\"\t2", 0.1, 0.2, 0);
  fp_ir_param *q = fpi_ir_param_add(p);
  q->name = "layers.0.w";
  q->users = fpi_alloc_array(a, 1, sizeof *q->users); /* tied: the other module reads it too */
  q->users[0] = k.m1;
  q->nusers = 1;
  q->ndim = 2;
  q->shape[0] = 16;
  q->shape[1] = 8;
  q->module = k.m0;
  q->bucket = k.b0;
  q->main_dtype = FP_F32;
  q->param_dtype = FP_BF16;
  q->grad_dtype = FP_F32;
  q->requires_grad = true;
  q->placement = 0;
  q->dim = 1;
  q->comm = k.shard;
  q->chunk = 64;
  q->main = (fp_view){k.main, 0};
  q->grad = (fp_view){k.grad, 0};
  q->weight = (fp_view){k.unsh, 0};
  q->ugrad = (fp_view){k.ugrad, 0};
  q = fpi_ir_param_add(p);
  q->name = "weird.bias";
  q->ndim = 1;
  q->shape[0] = 128;
  q->module = k.m1;
  q->bucket = k.b1;
  q->main_dtype = FP_BF16;
  q->param_dtype = FP_BF16;
  q->grad_dtype = FP_F16;
  q->requires_grad = false;
  q->placement = 1;
  q->comm = k.shard;
  q->owner = 1;
  q->tab = k.tab;
  q->chunk = 64;
  q->main = (fp_view){k.main, 0};
  q->weight = (fp_view){-1, 0}; /* (b0.unsharded holds layers.0.w: two params never share bytes) */
  for (int e = 0; e < 8; e++) fpi_ir_event_new(p);
  fp_op *o;
  /* step_begin */
  fpi_ir_seg_begin(p, FP_SEG_STEP_BEGIN, -1, 0);
  o = emit(p, FP_OP_MEMSET, FP_STREAM_RS, FP_F32, 64);
  o->dst = fpi_reg(k.grad, 0);
  o = emit(p, FP_OP_H2D, FP_STREAM_AG, FP_U8, 256);
  o->dst = fpi_reg(k.main, 0);
  o->src = fpi_reg(k.host, 0);
  sync_op(p, FP_OP_RECORD, FP_STREAM_AG, 0);
  /* pre_forward(layers.0) */
  fpi_ir_seg_begin(p, FP_SEG_PRE_FORWARD, k.m0, 0);
  o = emit(p, FP_OP_CAST, FP_STREAM_AG, FP_BF16, 64);
  o->sdtype = FP_F32;
  o->dst = fpi_reg_g(k.unsh, 0, 128);
  o->src = fpi_reg(k.main, 0);
  o->comm = k.shard;
  o->bucket = k.b0;
  o = emit(p, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_BF16, 64);
  o->dst = fpi_reg(k.unsh, 0);
  o->src = fpi_reg_g(k.unsh, 0, 128);
  o->comm = k.shard;
  o->bucket = k.b0;
  o->group = 3;
  sync_op(p, FP_OP_RECORD, FP_STREAM_AG, 1);
  sync_op(p, FP_OP_WAIT, FP_STREAM_COMPUTE, 1);
  o = emit(p, FP_OP_COMPUTE, FP_STREAM_COMPUTE, FP_F32, 0);
  o->module = k.m0;
  o->alpha = 1e9;
  fpi_ir_op_uses(p, o, (int32_t[]){k.unsh}, 1);
  /* post_forward(layers.0): an owned-style broadcast */
  fpi_ir_seg_begin(p, FP_SEG_POST_FORWARD, k.m0, 0);
  sync_op(p, FP_OP_RECORD, FP_STREAM_COMPUTE, 2);
  sync_op(p, FP_OP_WAIT, FP_STREAM_AG, 2);
  o = emit(p, FP_OP_BROADCAST, FP_STREAM_AG, FP_BF16, 64);
  o->dst = o->src = fpi_reg(k.unsh, 0);
  o->comm = k.shard;
  o->root = 1;
  /* pre_backward(layers.0): ragged gather in place */
  fpi_ir_seg_begin(p, FP_SEG_PRE_BACKWARD, k.m0, 0);
  o = emit(p, FP_OP_ALL_GATHER_V, FP_STREAM_AG, FP_BF16, 128);
  o->dst = fpi_reg(k.unsh, 0);
  o->src = fpi_reg_t(k.unsh, 0);
  o->comm = k.shard;
  o->tab = k.tab;
  sync_op(p, FP_OP_RECORD, FP_STREAM_AG, 3);
  sync_op(p, FP_OP_WAIT, FP_STREAM_COMPUTE, 3);
  o = emit(p, FP_OP_COMPUTE, FP_STREAM_COMPUTE, FP_F32, 0);
  o->module = k.m0;
  o->pass = FP_PASS_BWD;
  o->alpha = 2e9;
  fpi_ir_op_uses(p, o, (int32_t[]){k.unsh, k.ugrad}, 2);
  /* post_backward(layers.0): reductions and local math */
  fpi_ir_seg_begin(p, FP_SEG_POST_BACKWARD, k.m0, 0);
  sync_op(p, FP_OP_RECORD, FP_STREAM_COMPUTE, 4);
  sync_op(p, FP_OP_WAIT, FP_STREAM_RS, 4);
  o = emit(p, FP_OP_CAST, FP_STREAM_RS, FP_F32, 128);
  o->sdtype = FP_BF16;
  o->dst = fpi_reg(k.rin, 0);
  o->src = fpi_reg(k.ugrad, 0);
  o = emit(p, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, FP_F32, 64);
  o->dst = fpi_reg_g(k.rin, 0, 256);
  o->src = fpi_reg(k.rin, 0);
  o->comm = k.shard;
  o = emit(p, FP_OP_REDUCE_SCATTER_V, FP_STREAM_RS, FP_F32, 128);
  o->dst = fpi_reg_t(k.rin, 0);
  o->src = fpi_reg(k.rin, 0);
  o->comm = k.shard;
  o->tab = k.tab;
  o = emit(p, FP_OP_ALL_REDUCE, FP_STREAM_RS, FP_F32, 64);
  o->dst = o->src = fpi_reg(k.rin, 0);
  o->comm = k.replica;
  o = emit(p, FP_OP_REDUCE, FP_STREAM_RS, FP_F32, 64);
  o->dst = fpi_reg(k.rin, 256);
  o->src = fpi_reg(k.rin, 0);
  o->comm = k.replica;
  o->root = 0;
  o = emit(p, FP_OP_ADD, FP_STREAM_RS, FP_F32, 64);
  o->dst = fpi_reg(k.grad, 0);
  o->src = fpi_reg_g(k.rin, 0, 256);
  o->comm = k.shard;
  o = emit(p, FP_OP_SCALE, FP_STREAM_RS, FP_F32, 64);
  o->dst = fpi_reg(k.grad, 0);
  o->alpha = 0.5;
  o = emit(p, FP_OP_SEND, FP_STREAM_RS, FP_F32, 64);
  o->src = fpi_reg(k.rin, 0);
  o->comm = k.replica;
  o->root = 1;
  o->group = 7;
  o = emit(p, FP_OP_RECV, FP_STREAM_RS, FP_F32, 64);
  o->dst = fpi_reg(k.rin, 256);
  o->comm = k.replica;
  o->root = 1;
  o->group = 7;
  o = emit(p, FP_OP_COPY, FP_STREAM_RS, FP_F32, 16);
  fpi_ir_op_shape(p, o, 4, 64, 128);
  o->dst = fpi_reg(k.grad, 0);
  o->src = fpi_reg(k.rin, 0);
  /* fsdp2's copy-out and chunk_cat over a region table: two regions of 4
   * elements, 2 rows: split_copy rin[128..192) -> rin[0..64) (the table
   * side ends at max(0 + 2*4, 8 + 2*4) = 16 elements), then chunk_cat
   * of bf16 regions rin[384..416) into fp32 rows rin[256..320) */
  int64_t roff[2] = {0, 8}, rcnt[2] = {4, 4};
  int rtab = fpi_ir_table_add(p, "b0.regions", 2, roff, rcnt);
  o = emit(p, FP_OP_SPLIT_COPY, FP_STREAM_RS, FP_F32, 8);
  o->tab = rtab;
  fpi_ir_op_shape(p, o, 2, 0, 32);
  o->dst = fpi_reg(k.rin, 0);
  o->src = fpi_reg(k.rin, 128);
  o = emit(p, FP_OP_CHUNK_CAT, FP_STREAM_RS, FP_F32, 8);
  o->sdtype = FP_BF16;
  o->tab = rtab;
  fpi_ir_op_shape(p, o, 2, 32, 0);
  o->dst = fpi_reg(k.rin, 256);
  o->src = fpi_reg(k.rin, 384);
  o = emit(p, FP_OP_QUANTIZE_MXFP8, FP_STREAM_RS, FP_E4M3, 64);
  o->sdtype = FP_F32;
  o->dst = fpi_reg(k.mx, 0);
  o->src = fpi_reg(k.rin, 0);
  o->aux = fpi_reg(k.mx, 128);
  o = emit(p, FP_OP_DEQUANTIZE_MXFP8, FP_STREAM_RS, FP_BF16, 64);
  o->sdtype = FP_E4M3;
  o->dst = fpi_reg(k.rin, 384); /* (never into grads: the verifier refuses FP8 next to them) */
  o->src = fpi_reg(k.mx, 0);
  o->aux = fpi_reg(k.mx, 128);
  o = emit(p, FP_OP_D2H, FP_STREAM_RS, FP_U8, 256);
  o->dst = fpi_reg(k.host, 0);
  o->src = fpi_reg(k.main, 0);
  sync_op(p, FP_OP_RECORD, FP_STREAM_RS, 5);
  /* second micro-batch of the oddly named module: a predicated collective */
  fpi_ir_seg_begin(p, FP_SEG_PRE_FORWARD, k.m1, 1);
  sync_op(p, FP_OP_WAIT, FP_STREAM_AG, 5);
  o = emit(p, FP_OP_BROADCAST, FP_STREAM_AG, FP_BF16, 64);
  o->dst = o->src = fpi_reg(k.unsh, 0);
  o->comm = k.shard;
  o->root = 0;
  o->only = 0;
  o->only_comm = k.replica;
  sync_op(p, FP_OP_RECORD, FP_STREAM_AG, 6);
  sync_op(p, FP_OP_WAIT, FP_STREAM_COMPUTE, 6);
  o = emit(p, FP_OP_COMPUTE, FP_STREAM_COMPUTE, FP_F32, 0);
  o->module = k.m1;
  fpi_ir_op_uses(p, o, (int32_t[]){k.unsh}, 1);
  fpi_ir_seg_begin(p, FP_SEG_PRE_OPTIMIZER, -1, 0);
  sync_op(p, FP_OP_WAIT, FP_STREAM_COMPUTE, 5);
  fpi_ir_seg_begin(p, FP_SEG_POST_OPTIMIZER, -1, 0);
  /* the next step's gathers overwrite what this step's compute read */
  sync_op(p, FP_OP_RECORD, FP_STREAM_COMPUTE, 7);
  sync_op(p, FP_OP_WAIT, FP_STREAM_AG, 7);
  /* declared live ranges: the unsharded grad twice (backward, and a range
   * no op uses), the reduce staging once (to the dequantize into it); the
   * others are first..last use */
  fpi_ir_buf_live(p, k.ugrad, 14, 17);
  fpi_ir_buf_live(p, k.rin, 17, 30);
  fpi_ir_buf_live(p, k.ugrad, 30, 30);
  return k;
}

static char *print(const fp_prog *p) { return fpi_ir_print_str(p, NULL); }

static fp_src mksrc(const char *path, const char *text) {
  fp_src s = {path, text, strlen(text)};
  return s;
}

/* parse text; NULL on error (messages in d) */
static fp_prog *parse(fp_arena *a, fp_diag *d, const char *text) {
  fp_src s = mksrc("t.fpir", text);
  return fpi_ir_parse(a, d, &s);
}

/* verify and return the messages (malloc'd copy, "" when valid) */
static char *verify_msgs(const fp_prog *p, bool *ok) {
  fp_diag d;
  fpi_diag_init(&d, NULL);
  *ok = fpi_ir_verify(p, &d, NULL);
  char *s = strdup(d.buf ? d.buf : "");
  fpi_diag_free(&d);
  return s;
}

#define EXPECT_VALID(p)                                                  \
  do {                                                                   \
    bool ok_;                                                            \
    char *m_ = verify_msgs(p, &ok_);                                     \
    if (!ok_) fprintf(stderr, "unexpected verifier errors:\n%s", m_);    \
    assert_true(ok_);                                                    \
    free(m_);                                                            \
  } while (0)

#define EXPECT_ERROR(p, frag)                                                          \
  do {                                                                                 \
    bool ok_;                                                                          \
    char *m_ = verify_msgs(p, &ok_);                                                   \
    if (ok_ || !strstr(m_, frag)) fprintf(stderr, "want '%s', got:\n%s", frag, m_);   \
    assert_false(ok_);                                                                 \
    assert_non_null(strstr(m_, frag));                                                 \
    free(m_);                                                                          \
  } while (0)

/* ---- builder ------------------------------------------------------------------ */
static void test_builder(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_prog *p = fpi_prog_new(a);
  assert_int_equal(p->world_size, 1);
  fpi_ir_seg_begin(p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = fpi_ir_emit(p, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_BF16, 5);
  assert_int_equal(o->comm, -1);
  assert_int_equal(o->only, -1);
  assert_int_equal(o->only_comm, -1);
  assert_int_equal(o->root, -1);
  assert_int_equal(o->event, -1);
  assert_int_equal(o->module, -1);
  assert_int_equal(o->bucket, -1);
  assert_int_equal(o->group, -1);
  assert_int_equal(o->tab, -1);
  assert_int_equal(o->dst.buf, -1);
  assert_int_equal(o->shape, -1);
  assert_int_equal(fpi_op_shape_of(p, o).rows, 1);
  assert_int_equal(o->sdtype, FP_BF16);
  assert_int_equal(o->count, 5);
  assert_int_equal(p->segs[0].nops, 1);
  for (int i = 0; i < 100; i++) fpi_ir_emit(p, FP_OP_MEMSET, FP_STREAM_RS, FP_F32, i);
  fpi_ir_seg_begin(p, FP_SEG_PRE_OPTIMIZER, -1, 0);
  assert_int_equal(p->segs[0].nops, 101);
  assert_int_equal(p->segs[1].first, 101);
  assert_int_equal(p->segs[1].nops, 0);
  assert_int_equal(p->ops[100].seg, 0);
  fp_ir_param *q = fpi_ir_param_add(p);
  assert_int_equal(q->main.buf, -1);
  assert_int_equal(q->ugrad.buf, -1);
  assert_int_equal(q->comm, -1);
  assert_int_equal(q->tab, -1);
  int64_t off[3] = {0, 1, 2}, cnt[3] = {1, 1, 1};
  int t = fpi_ir_table_add(p, "t", 3, off, cnt);
  assert_int_equal(p->tabs[t].off[2], 2);
  /* names, opcodes, rank arithmetic */
  for (int c = 0; c < FP_NOPS; c++) assert_int_equal(fpi_op_parse(fpi_op_name((fp_opcode)c)), c);
  assert_int_equal(fpi_op_parse("nope"), -1);
  assert_string_equal(fpi_stream_name(FP_STREAM_RS), "rs");
  assert_string_equal(fpi_seg_name(FP_SEG_POST_BACKWARD), "post_backward");
  assert_true(fpi_seg_has_module(FP_SEG_PRE_FORWARD));
  assert_false(fpi_seg_has_module(FP_SEG_STEP_BEGIN));
  assert_string_equal(fpi_buf_cat_name(FP_CAT_RESHARD), "reshard");
  assert_string_equal(fpi_op_class(FP_OP_WAIT) == FP_OPC_SYNC ? "sync" : "?", "sync");
  fp_ir_comm c = {"r", 2, 2, 0};
  assert_int_equal(fpi_comm_index(&c, 5), 0); /* (5/2)%2 */
  assert_int_equal(fpi_comm_index(&c, 3), 1);
  fp_op *v = fpi_ir_emit(p, FP_OP_ALL_GATHER_V, FP_STREAM_AG, FP_BF16, 0);
  v->tab = t;
  fp_region r = fpi_reg_t(0, 10);
  r.stride = 100;
  assert_int_equal(fpi_region_offset(p, v, &r, FP_BF16, 2), 10 + 200 + 4);
  assert_int_equal(fpi_op_count(p, v, 1), 1);
  fpi_arena_free(a);
}

/* ---- print / parse ------------------------------------------------------------------ */
static bool region_equal(const fp_region *a, const fp_region *b) {
  return a->buf == b->buf && a->tabrel == b->tabrel && a->off == b->off && a->stride == b->stride;
}

/* every field but line (structs have padding: no memcmp) */
static bool op_equal(const fp_prog *pa, const fp_op *a, const fp_prog *pb, const fp_op *b) {
  fp_op_shape sa = fpi_op_shape_of(pa, a), sb = fpi_op_shape_of(pb, b);
  bool alpha = (isnan(a->alpha) && isnan(b->alpha)) ||
               (a->alpha == b->alpha && signbit(a->alpha) == signbit(b->alpha));
  return a->code == b->code && a->stream == b->stream && a->dtype == b->dtype && a->sdtype == b->sdtype &&
         a->seg == b->seg && a->comm == b->comm && a->only == b->only && a->only_comm == b->only_comm &&
         a->root == b->root && a->event == b->event && a->module == b->module && a->pass == b->pass &&
         a->bucket == b->bucket && a->group == b->group && a->tab == b->tab && a->count == b->count &&
         sa.rows == sb.rows && sa.dpitch == sb.dpitch && sa.spitch == sb.spitch && alpha &&
         region_equal(&a->dst, &b->dst) && region_equal(&a->src, &b->src) && region_equal(&a->aux, &b->aux);
}

static bool view_equal(const fp_view *a, const fp_view *b) { return a->buf == b->buf && a->off == b->off; }

static bool param_equal(const fp_ir_param *a, const fp_ir_param *b) {
  if (strcmp(a->name, b->name) || a->ndim != b->ndim) return false;
  for (int k = 0; k < a->ndim && k < 8; k++)
    if (a->shape[k] != b->shape[k]) return false;
  return a->module == b->module && a->bucket == b->bucket && a->main_dtype == b->main_dtype &&
         a->param_dtype == b->param_dtype && a->grad_dtype == b->grad_dtype && a->requires_grad == b->requires_grad &&
         a->placement == b->placement && a->dim == b->dim && a->comm == b->comm && a->owner == b->owner &&
         a->tab == b->tab && a->chunk == b->chunk && view_equal(&a->main, &b->main) && view_equal(&a->grad, &b->grad) &&
         view_equal(&a->weight, &b->weight) && view_equal(&a->ugrad, &b->ugrad) && a->nusers == b->nusers &&
         (a->nusers == 0 || !memcmp(a->users, b->users, sizeof *a->users * (size_t)a->nusers));
}

static void roundtrip(const fp_prog *p) {
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  char *t1 = print(p);
  fp_prog *q = parse(a, &d, t1);
  assert_non_null(q);
  char *t2 = print(q);
  if (strcmp(t1, t2)) fprintf(stderr, "--- first\n%s--- second\n%s", t1, t2);
  assert_string_equal(t1, t2);
  /* the content hash is the same for the program and its parsed text
   * (a canonical walk: live ranges per buffer, lines left out) */
  assert_true(fpi_prog_hash(q) == fpi_prog_hash(p));
  /* the structs agree too (parsed ops carry their line) */
  assert_int_equal(q->nops, p->nops);
  for (int32_t i = 0; i < p->nops; i++) assert_true(op_equal(p, &p->ops[i], q, &q->ops[i]));
  assert_int_equal(q->nsegs, p->nsegs);
  for (int32_t i = 0; i < p->nsegs; i++) {
    const fp_seg *x = &p->segs[i], *y = &q->segs[i];
    assert_true(x->kind == y->kind && x->module == y->module && x->micro == y->micro && x->first == y->first &&
                x->nops == y->nops);
  }
  assert_int_equal(q->nbufs, p->nbufs);
  for (int32_t i = 0; i < p->nbufs; i++) {
    assert_string_equal(q->bufs[i].name, p->bufs[i].name);
    assert_int_equal(q->bufs[i].offset, p->bufs[i].offset);
    assert_int_equal(q->bufs[i].host, p->bufs[i].host);
  }
  assert_int_equal(q->nparams, p->nparams);
  for (int32_t i = 0; i < p->nparams; i++) assert_true(param_equal(&p->params[i], &q->params[i]));
  assert_int_equal(q->ncomms, p->ncomms);
  for (int32_t i = 0; i < p->ncomms; i++)
    assert_true(!strcmp(p->comms[i].name, q->comms[i].name) && p->comms[i].size == q->comms[i].size &&
                p->comms[i].stride == q->comms[i].stride);
  assert_int_equal(q->ntabs, p->ntabs);
  for (int32_t i = 0; i < p->ntabs; i++) {
    assert_int_equal(q->tabs[i].n, p->tabs[i].n);
    for (int64_t j = 0; j < p->tabs[i].n; j++)
      assert_true(p->tabs[i].off[j] == q->tabs[i].off[j] && p->tabs[i].cnt[j] == q->tabs[i].cnt[j]);
  }
  assert_int_equal(q->nmods, p->nmods);
  for (int32_t i = 0; i < p->nmods; i++) {
    const fp_ir_module *x = &p->mods[i], *y = &q->mods[i];
    assert_string_equal(x->name, y->name);
    assert_true(x->activation_bytes == y->activation_bytes && x->recompute == y->recompute &&
                x->saved_bytes == y->saved_bytes);
  }
  assert_int_equal(q->nbuckets, p->nbuckets);
  assert_int_equal(q->nevents, p->nevents);
  assert_true(q->world_size == p->world_size && q->ranks_per_node == p->ranks_per_node &&
              q->grad_accumulation == p->grad_accumulation && q->arena_bytes == p->arena_bytes &&
              q->host_bytes == p->host_bytes && q->memory_budget_bytes == p->memory_budget_bytes);
  assert_true((p->hw.name == NULL) == (q->hw.name == NULL));
  if (p->hw.name) {
    assert_string_equal(p->hw.name, q->hw.name);
    fp_hw x = p->hw, y = q->hw;
    x.name = y.name = NULL;
    assert_memory_equal(&x, &y, sizeof x);
  }
  assert_int_equal(fpi_prog_hash(p), fpi_prog_hash(q));
  free(t1);
  free(t2);
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

static void test_kitchen_valid_and_roundtrip(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  EXPECT_VALID(k.p);
  roundtrip(k.p);
  /* every opcode is in the kitchen */
  bool seen[FP_NOPS] = {0};
  for (int32_t i = 0; i < k.p->nops; i++) seen[k.p->ops[i].code] = true;
  for (int c = 0; c < FP_NOPS; c++) {
    if (!seen[c]) fprintf(stderr, "kitchen lacks %s\n", fpi_op_name((fp_opcode)c));
    assert_true(seen[c]);
  }
  fpi_arena_free(a);
}

/* fpi_prog_fork: the fork prints as the original, and what the passes change
 * in either (buffer offsets, ops added in place, segments and live ranges
 * moved) leaves the other as it was; the other tables are shared */
static void test_fork(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  char *orig = print(k.p);
  fp_prog *q = fpi_prog_fork(a, k.p);
  char *copy = print(q);
  assert_string_equal(copy, orig);
  assert_ptr_equal(q->params, k.p->params);
  assert_ptr_equal(q->comms, k.p->comms);
  q->bufs[0].offset += 4096;
  q->ops[0].count += 7;
  q->segs[0].nops += 1;
  q->lives[0].last += 1;
  /* the fork's ops have room for as many again (the sync pass's records
   * and waits): adding that many leaves them where they are */
  assert_true(q->cap_ops >= 2 * (int64_t)q->nops);
  const fp_op *at = q->ops;
  for (int32_t i = 0, n = q->nops; i < n; i++) fpi_ir_emit(q, FP_OP_COMPUTE, FP_STREAM_COMPUTE, FP_F32, 1);
  assert_ptr_equal(q->ops, at);
  for (int i = 0; i < 5000; i++) fpi_ir_emit(q, FP_OP_COMPUTE, FP_STREAM_COMPUTE, FP_F32, 1);
  fpi_ir_buf_add(q, "extra", FP_BUF_TRANSIENT, FP_CAT_STAGING, -1, 256);
  fpi_ir_buf_live(q, q->nbufs - 1, 3, 4);
  char *after = print(k.p);
  assert_string_equal(after, orig);
  /* and the other way round */
  fp_prog *r = fpi_prog_fork(a, k.p);
  k.p->bufs[0].offset += 512;
  k.p->ops[0].count += 1;
  k.p->segs[1].first += 1;
  k.p->lives[1].first -= 1;
  char *r1 = print(r);
  assert_string_equal(r1, orig);
  free(orig), free(copy), free(after), free(r1);
  fpi_arena_free(a);
}

/* a program that is not valid but must still print and parse back exactly:
 * duplicate and odd names, out-of-range references, odd numbers */
static void test_odd_roundtrip(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_prog *p = fpi_prog_new(a);
  p->world_size = -3;
  p->arena_bytes = INT64_MAX;
  p->host_bytes = INT64_MIN;
  p->nevents = INT32_MAX;
  fpi_ir_comm_add(p, "", 0, -1);
  fpi_ir_comm_add(p, "dup", 1, 1);
  fpi_ir_comm_add(p, "dup", 1, 1);
  fpi_ir_table_add(p, "empty", 0, NULL, NULL);
  int64_t big[20];
  for (int i = 0; i < 20; i++) big[i] = i % 2 ? INT64_MIN : INT64_MAX - i;
  fpi_ir_table_add(p, "0starts-with-digit", 20, big, big);
  fpi_ir_bucket_add(p, "x\x01y\\z");
  fpi_ir_buf_add(p, "b", FP_BUF_TRANSIENT, FP_CAT_STAGING, 7, -5);
  fpi_ir_buf_add(p, "b", FP_BUF_PERSISTENT, FP_CAT_STAGING, -1, 0);
  fpi_ir_buf_add(p, "caf\xc3\xa9", FP_BUF_PERSISTENT, FP_CAT_STAGING, -1, 0);
  fpi_ir_module_add(p, "m", NAN, -INFINITY, -1);
  fpi_ir_module_add(p, "m2", -0.0, 1e-310, INT64_MAX);
  fp_ir_param *q = fpi_ir_param_add(p);
  q->name = "p";
  q->ndim = 0;
  q->module = -7;
  q->bucket = 99;
  q->main.off = 5; /* no buffer but an offset */
  q->placement = 3;
  q->dim = -2;
  q->requires_grad = true;
  fpi_ir_seg_begin(p, FP_SEG_STEP_BEGIN, 5, -1);
  fpi_ir_seg_begin(p, FP_SEG_PRE_FORWARD, -1, 3);
  fp_op *o = fpi_ir_emit(p, FP_OP_COPY, FP_STREAM_COMPUTE, FP_E8M0, -9);
  o->sdtype = FP_U8;
  o->dst = fpi_reg_g(1, -4, -8);
  o->dst.tabrel = true;
  o->src = fpi_reg_g(-1, 0, 3);
  o->aux.tabrel = true;
  o->comm = 2;
  o->only = -5;
  o->only_comm = -1;
  o->root = INT32_MIN;
  o->event = 12;
  o->module = 1;
  o->pass = FP_PASS_BWD;
  o->bucket = 0;
  o->group = INT32_MAX;
  o->tab = 9;
  fpi_ir_op_shape(p, o, 0, -1, INT64_MIN);
  o->alpha = -0.0;
  o = fpi_ir_emit(p, FP_OP_RECORD, FP_STREAM_AG, FP_BF16, 3);
  o->alpha = 1.0 / 3.0;
  o = fpi_ir_emit(p, FP_OP_COMPUTE, FP_STREAM_COMPUTE, FP_F32, 0);
  o->alpha = NAN;
  fpi_ir_seg_begin(p, FP_SEG_POST_OPTIMIZER, -1, 0);
  roundtrip(p);
  char *t = print(p);
  assert_non_null(strstr(t, "comm=$2"));      /* duplicate name: by index */
  assert_non_null(strstr(t, "\"x\\x01y\\\\z\"")); /* escapes */
  assert_non_null(strstr(t, "flops=nan"));
  free(t);
  fpi_arena_free(a);
}

/* hand-written text: comments, blank lines, optional indices, CRLF */
static void test_parse_handwritten(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  const char *text =
      "# a comment\r\n"
      "fpir 1   # trailing comment\r\n"
      "\n"
      "world_size 2\n"
      "comm world size=2 stride=1\n"
      "buf x persistent staging bytes=64 offset=0\n"
      "buf \"y z\" transient staging offset=64 bytes=64   # keys in any order\n"
      "arena_bytes 128\n"
      "segment step_begin\n"
      "  ag all_gather fp32 n=8 dst=\"y z\"[0] src=x[0] comm=world\n"
      "  ag memset n=4 fp16 dst=x[0]\n";
  fp_prog *p = parse(a, &d, text);
  assert_non_null(p);
  assert_int_equal(p->nops, 2);
  assert_int_equal(p->ops[0].line, 10);
  assert_int_equal(p->ops[1].dtype, FP_F16);
  assert_int_equal(p->bufs[1].offset, 64);
  EXPECT_VALID(p);
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

/* located parse errors */
static void test_parse_errors(void **state) {
  (void)state;
  static const struct {
    const char *text, *frag;
  } cases[] = {
      {"", "t.fpir:1:1: error: empty program"},
      {"world_size 2\n", "t.fpir:1:1: error: expected 'fpir 1' first"},
      {"fpir 2\n", "unsupported fpir version 2"},
      {"fpir 1\nworld_size 99999999999999999999\n", "t.fpir:2:12: error: world_size: integer out of range"},
      {"fpir 1\nbogus 1\n", "t.fpir:2:1: error: unknown directive 'bogus'"},
      {"fpir 1\nmemory_budget_bytes 0\n", "t.fpir:2:21: error: memory_budget_bytes: 0 is out of range [1, 9223372036854775807]"},
      {"fpir 1\ncomm w size=1\n", "needs size= and stride="},
      {"fpir 1\ncomm 3 w size=1 stride=1\n", "t.fpir:2:6: error: communicator index 3 is out of sequence"},
      {"fpir 1\ntable t n=3\n  off 1 2\n  cnt 1 2 3\n", "t.fpir:2:1: error: table 't' declares n=3 but has 2 offsets"},
      {"fpir 1\ntable t n=1\n  off 1 2\n", "t.fpir:3:9: error: table 't' has more than n=1 offsets"},
      {"fpir 1\ntable t n=2000000000\n", "declares n=2000000000 but has 0 offsets"},
      {"fpir 1\n  off 1\n", "'off' row outside a table"},
      {"fpir 1\nag memset fp32 n=1\n", "t.fpir:2:1: error: an op outside a segment"},
      {"fpir 1\nsegment step_begin\n 5 ag memset fp32 n=1\n", "t.fpir:3:2: error: op index 5 is out of sequence"},
      {"fpir 1\nsegment step_begin\nag frobnicate fp32\n", "t.fpir:3:4: error: unknown op 'frobnicate'"},
      {"fpir 1\nsegment step_begin\nag memset fp33\n", "t.fpir:3:11: error: unknown dtype 'fp33'"},
      {"fpir 1\nsegment step_begin\nag memset n=1\n", "memset needs a dtype"},
      {"fpir 1\nsegment step_begin\nag memset fp32 dst=nope[0]\n", "t.fpir:3:20: error: unknown buffer 'nope'"},
      {"fpir 1\nbuf b persistent staging bytes=1\nsegment step_begin\nag memset fp32 dst=b[0\n", "expected ']'"},
      {"fpir 1\nbuf b persistent staging bytes=1\nsegment step_begin\nag memset fp32 dst=b[0+4]\n", "expected '*g'"},
      {"fpir 1\nsegment step_begin\nag memset fp32 n=1 n=2\n", "repeated op field 'n'"},
      {"fpir 1\nsegment step_begin\nag memset fp32 color=1\n", "unknown op field 'color'"},
      {"fpir 1\nsegment pre_forward\n", "pre_forward needs a module"},
      {"fpir 1\nsegment step_begin\nbuf b persistent staging bytes=1\n", "declarations come first"},
      {"fpir 1\nmodel \"abc\n", "unterminated string"},
      {"fpir 1\nmodel \"a\\qb\"\n", "unknown escape"},
      {"fpir 1\nmodel \"a\\x00\"\n", "\\x00 is not allowed"},
      {"fpir 1\nbuf 9x persistent staging bytes=1\n", "t.fpir:2:6: error: unexpected 'x' after the value"},
      {"fpir 1\nbuf b persistent staging bytes=1\nbuf b persistent staging bytes=1\nsegment step_begin\n"
       "ag memset fp32 dst=b[0]\n",
       "declared more than once; refer to it as $N"},
      {"fpir 1\nparam p shape=[1,2,3,4,5,6,7,8,9]\n", "at most 8 dimensions"},
      {"fpir 1\nparam p shape=[1] module=- bucket=- dtypes=fp32/bf16 shard\n", "expected dtypes=MAIN/PARAM/GRAD"},
      {"fpir 1\nparam p shape=[1] module=- bucket=- dtypes=fp32/bf16/fp32\n", "needs shape=, module=, bucket=, dtypes= and a placement"},
      {"fpir 1\nevents -1\n", "events: -1 is out of range"},
      {"fpir 1\nhardware h100\n", "t.fpir:2:10: error: expected '\"'"},
      {"fpir 1\nhardware \"h\" flops=1\n", "the hardware needs gpus_per_node="},
      {"fpir 1\nhardware \"h\" flops=1 flops=2\n", "t.fpir:2:22: error: unknown or repeated field 'flops'"},
      {"fpir 1\nhardware \"h\" colour=1\n", "unknown or repeated field 'colour' for the hardware"},
      {"fpir 1\nhardware \"h\" gpus_per_node=8.5\n", "unexpected '.' after the value"},
      {"fpir 1\nhardware \"h\" flops=fast\n", "expected a number (flops), found 'fast'"},
      {"fpir 1\nhardware \"h\" gpus_per_node=1 hbm_bytes=1 flops=1 nvlink_gbps=1 ib_gbps=1 hbm_gbps=1 "
       "pcie_gbps=1 base_us=1 nvlink_hop_us=1 net_hop_us=1 launch_us=1\nhardware \"h\"\n",
       "t.fpir:3:9: error: a second 'hardware' line"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fp_arena *a = fpi_arena_new();
    fp_diag d;
    fpi_diag_init(&d, NULL);
    fp_prog *p = parse(a, &d, cases[i].text);
    if (p || !d.buf || !strstr(d.buf, cases[i].frag))
      fprintf(stderr, "case %zu: want '%s', got '%s'\n", i, cases[i].frag, d.buf ? d.buf : "(nothing)");
    assert_null(p);
    assert_non_null(d.buf);
    assert_non_null(strstr(d.buf, cases[i].frag));
    fpi_diag_free(&d);
    fpi_arena_free(a);
  }
}

/* every prefix and many mutations of printer output: no crash, no hang, an
 * error or a program that prints and parses back exactly */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void fuzz_one_fpir(const char *text, size_t len) {
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  char *t = malloc(len + 1);
  memcpy(t, text, len);
  t[len] = 0;
  fp_src s = {"f.fpir", t, strlen(t)};
  fp_prog *p = fpi_ir_parse(a, &d, &s);
  if (p) {
    bool ok;
    free(verify_msgs(p, &ok)); /* must not crash on whatever parsed */
    char *t1 = print(p);
    fp_src s1 = {"g.fpir", t1, strlen(t1)};
    fp_prog *q = fpi_ir_parse(a, &d, &s1);
    assert_non_null(q);
    char *t2 = print(q);
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);
  } else {
    assert_true(d.nerrors > 0);
  }
  free(t);
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

static void test_fpir_hostile(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  char *text = print(k.p);
  size_t len = strlen(text);
  for (size_t n = 0; n <= len; n += 7) fuzz_one_fpir(text, n);
  static const char alphabet[] = "0123456789-+$[]()=@,\"\\# \n\tabgx*>/";
  char *m = malloc(len + 1);
  for (int it = 0; it < 3000; it++) {
    memcpy(m, text, len + 1);
    int edits = 1 + (int)(next_rand() % 4);
    for (int e = 0; e < edits; e++) {
      size_t at = next_rand() % len;
      m[at] = alphabet[next_rand() % (sizeof alphabet - 1)];
    }
    fuzz_one_fpir(m, len);
  }
  free(m);
  /* hostile lines */
  static const char *const lines[] = {
      "fpir 1\nevents 2147483647\nsegment step_begin\nag wait ev=2147483646\n",
      "fpir 1\nworld_size 9223372036854775807\ncomm w size=9223372036854775807 stride=9223372036854775807\n",
      "fpir 1\ncomm w size=2 stride=1\ntable t n=2\n off 9223372036854775807 -9223372036854775808\n cnt 1 1\n"
      "buf b persistent staging bytes=9223372036854775807 offset=9223372036854775807\nsegment step_begin\n"
      "ag all_gather_v fp32 n=1 dst=b[9223372036854775807+9223372036854775807*g+tab] src=b[0] comm=w tab=t\n",
      "fpir 1\nsegment step_begin\nag memset fp32 dst=$2147483647[0]\n",
      "fpir 1\nsegment step_begin\nag memset fp32 dst=$-2147483648[0] src=-[5]\n",
      "fpir 1\nsegment step_begin(-) micro=2147483647\n",
      "fpir 1\n\"\n[\n]\n(\n)\n=\n",
      "fpir 1\nmodel \"\\",
  };
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) fuzz_one_fpir(lines[i], strlen(lines[i]));
  free(text);
  fpi_arena_free(a);
}

/* ---- plan.json ---------------------------------------------------------------------- */
static char *plan_text(const fp_prog *p) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  assert_true(fpi_plan_write(p, f));
  fclose(f);
  return buf;
}

static fp_prog *plan_read(fp_arena *a, fp_diag *d, const char *text) {
  fp_src s = mksrc("plan.json", text);
  return fpi_plan_read(a, d, &s);
}

/* a small self-consistent memory timeline for the kitchen */
static fp_memtl *kitchen_memtl(fp_arena *a) {
  fp_memtl *t = fpi_alloc(a, sizeof *t);
  t->npts = 3;
  t->pts = fpi_alloc_array(a, 3, sizeof *t->pts);
  t->pts[0] = (fp_memtl_point){-0.5, {256, 256, 0, 0, 0, 0, 0, 0}};
  t->pts[1] = (fp_memtl_point){2.25, {256, 256, 256, 0, 512, 0, 0, 1024}};
  t->pts[2] = (fp_memtl_point){1e6, {256, 256, 0, 256, 0, 256, 0, 0}};
  fpi_memtl_maxima(t, &t->peak_bytes, &t->lower_bound_bytes);
  assert_int_equal(t->peak_bytes, 2304);
  assert_int_equal(t->lower_bound_bytes, 1280);
  assert_null(fpi_memtl_check(t));
  return t;
}

/* hook_us, the optional machine field: left out of .fpir, plan.json and the
 * hash while 0 (a plan of before reads, prints and hashes as it did), kept
 * through both forms and in the hash when set, refused when negative */
static void test_hw_hook_us(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  fp_diag d;
  fpi_diag_init(&d, stderr);
  char *t0 = print(k.p), *j0 = plan_text(k.p);
  uint64_t h0 = fpi_prog_hash(k.p);
  assert_null(strstr(t0, "hook_us")), assert_null(strstr(j0, "hook_us"));
  k.p->hw.hook_us = 2.5;
  char *t1 = print(k.p), *j1 = plan_text(k.p);
  assert_non_null(strstr(t1, "hook_us=2.5")), assert_non_null(strstr(j1, "\"hook_us\":2.5"));
  assert_true(fpi_prog_hash(k.p) != h0);
  fp_prog *q = parse(a, &d, t1), *r = plan_read(a, &d, j1);
  assert_non_null(q), assert_non_null(r);
  assert_true(q->hw.hook_us == 2.5 && r->hw.hook_us == 2.5);
  assert_int_equal(fpi_prog_hash(q), fpi_prog_hash(k.p));
  fp_prog *q0 = parse(a, &d, t0);
  assert_non_null(q0);
  assert_true(q0->hw.hook_us == 0);
  assert_int_equal(fpi_prog_hash(q0), h0);
  k.p->hw.hook_us = 2.5;
  EXPECT_VALID(k.p);
  k.p->hw.hook_us = -1;
  EXPECT_ERROR(k.p, "hardware hook_us must be a non-negative number");
  free(t0), free(j0), free(t1), free(j1);
  fpi_arena_free(a);
}

static void test_plan_roundtrip(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  k.p->memtl = kitchen_memtl(a);
  char *j = plan_text(k.p);
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_prog *q = plan_read(a, &d, j);
  assert_non_null(q);
  char *t1 = print(k.p), *t2 = print(q);
  assert_string_equal(t1, t2);
  char *j2 = plan_text(q);
  assert_string_equal(j, j2); /* the writer is deterministic */
  assert_string_equal(q->hw.name, "test machine");
  assert_true(q->hw.ib_gbps == 10.5 && q->hw.launch_us == 1e-3 && q->hw.hbm_bytes == 1 << 20);
  assert_non_null(q->memtl);
  assert_int_equal(q->memtl->npts, 3);
  assert_memory_equal(q->memtl->pts, k.p->memtl->pts, 3 * sizeof *q->memtl->pts);
  assert_int_equal(q->memtl->peak_bytes, 2304);
  /* the timeline is outside the hash */
  assert_int_equal(fpi_prog_hash(q), fpi_prog_hash(k.p));
  char want[40];
  snprintf(want, sizeof want, "\"fnv1a64:%016llx\"", (unsigned long long)fpi_prog_hash(k.p));
  assert_non_null(strstr(j, want));
  assert_non_null(strstr(j, "\"format\": \"flexplan.plan.v1\""));
  assert_true(q->mods[k.m0].recompute && q->mods[k.m0].saved_bytes == 96 && !q->mods[k.m1].recompute);
  assert_non_null(strstr(j, "\"recompute_saved_bytes\":96"));
  free(t1);
  free(t2);
  free(j);
  free(j2);
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

static void expect_plan_error(const char *text, const char *frag) {
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  fp_prog *q = plan_read(a, &d, text);
  if (q || !d.buf || !strstr(d.buf, frag)) fprintf(stderr, "want '%s', got '%s'\n", frag, d.buf ? d.buf : "(nothing)");
  assert_null(q);
  assert_non_null(strstr(d.buf, frag));
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

/* replace the first occurrence of from with to (malloc'd) */
static char *replace(const char *s, const char *from, const char *to) {
  const char *at = strstr(s, from);
  assert_non_null(at);
  size_t n = strlen(s) - strlen(from) + strlen(to);
  char *r = malloc(n + 1);
  size_t pre = (size_t)(at - s);
  memcpy(r, s, pre);
  strcpy(r + pre, to);
  strcat(r, at + strlen(from));
  return r;
}

/* red=avg (docs/ir.md): printed only when not sum, carried by plan.json as
 * "red" through both readers, checked by the verifier and the readers */
static void test_plan_red(void **state) {
  (void)state;
  static const char *text =
      "fpir 1\nworld_size 2\nevents 1\ncomm world size=2 stride=1\nbuf r persistent staging bytes=512 offset=0\n"
      "arena_bytes 512\nsegment step_begin\n"
      "   0  rs  all_reduce  fp32  n=64  dst=r[0]  src=r[0]  comm=world  red=avg\n"
      "   1  rs  reduce_scatter  fp32  n=32  dst=r[256]  src=r[0]  comm=world\n"
      "   2  rs  record  ev=0\n"
      "segment pre_optimizer\n   3  compute  wait  ev=0\nsegment post_optimizer\n";
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_prog *p = parse(a, &d, text);
  assert_non_null(p);
  assert_int_equal(p->ops[0].red, FP_RED_AVG);
  assert_int_equal(p->ops[1].red, FP_RED_SUM);
  assert_true(fpi_ir_verify(p, &d, NULL));
  char *t1 = print(p);
  assert_non_null(strstr(t1, "red=avg"));
  assert_null(strstr(strstr(t1, "reduce_scatter"), "red="));
  char *j = plan_text(p);
  assert_non_null(strstr(j, "\"red\":\"avg\""));
  fp_prog *q = plan_read(a, &d, j); /* the one-pass reader */
  assert_non_null(q);
  assert_int_equal(q->ops[0].red, FP_RED_AVG);
  assert_int_equal(q->ops[1].red, FP_RED_SUM);
  char *t2 = print(q);
  assert_string_equal(t1, t2);
  char *k = replace(j, "\"red\":\"avg\"", "\"red\":\"\\u0061vg\""); /* an escape: the json-c reader */
  q = plan_read(a, &d, k);
  assert_non_null(q);
  assert_int_equal(q->ops[0].red, FP_RED_AVG);
  free(k);
  k = replace(j, "\"red\":\"avg\"", "\"red\":\"max\"");
  expect_plan_error(k, "/ops/0/red: unknown red 'max'");
  free(k);
  k = replace(j, "\"red\":\"avg\"", "\"red\":1");
  expect_plan_error(k, "/ops/0/red: expected a string");
  free(k);
  /* avg on an op that does not reduce: the verifier, through the reader too */
  fp_op *o = &p->ops[1];
  o->red = FP_RED_AVG;
  bool ok;
  char *m = verify_msgs(p, &ok);
  assert_true(ok);
  free(m);
  p->ops[2].red = FP_RED_AVG;
  m = verify_msgs(p, &ok);
  assert_false(ok);
  assert_non_null(strstr(m, "record takes no red=avg"));
  free(m);
  p->ops[2].red = (fp_redop)7;
  m = verify_msgs(p, &ok);
  assert_false(ok);
  assert_non_null(strstr(m, "unknown reduce op 7"));
  free(m);
  free(t1);
  free(t2);
  free(j);
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

static void test_plan_tampered(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  k.p->memtl = kitchen_memtl(a);
  char *j = plan_text(k.p);
  /* change one buffer's size: same JSON shape, different content */
  char *t = replace(j, "\"bytes\":512", "\"bytes\":1024");
  expect_plan_error(t, "content hash mismatch: file says fnv1a64:");
  expect_plan_error(t, "plan.json:4:");
  free(t);
  /* a wrong hash with a valid program */
  t = replace(j, "\"hash\": \"fnv1a64:", "\"hash\": \"fnv1a64:0");
  expect_plan_error(t, "content hash mismatch");
  free(t);
  t = replace(j, "flexplan.plan.v1", "flexplan.plan.v2");
  expect_plan_error(t, "/format: not a plan");
  free(t);
  t = replace(j, FP_VERSION, "0.0.1");
  expect_plan_error(t, "/planner_version: plan was written by flexplan 0.0.1");
  free(t);
  t = replace(j, "\"world_size\": 4", "\"world_size\": \"4\"");
  expect_plan_error(t, "/world_size: expected an integer, got a string");
  free(t);
  t = replace(j, "\"op\":\"all_gather\"", "\"op\":\"all_gathr\"");
  expect_plan_error(t, "/ops/4/op: unknown op 'all_gathr'");
  free(t);
  t = replace(j, "\"count\":64", "\"count\":64,\"colour\":1");
  expect_plan_error(t, "unknown member 'colour'");
  free(t);
  t = replace(j, "\"first\":3,", "\"first\":4,");
  expect_plan_error(t, "/segments/1/first: is 4 but the previous segment ends at 3");
  free(t);
  t = replace(j, "\"off\":[0,64]", "\"off\":[0]");
  expect_plan_error(t, "/tables/0/cnt: has 2 entries but off has 1");
  free(t);
  t = replace(j, "\"count\":64", "\"count\":18446744073709551615");
  expect_plan_error(t, "integer out of the int64 range");
  free(t);
  /* the hardware is covered by the hash; its members are checked */
  t = replace(j, "\"ib_gbps\":10.5", "\"ib_gbps\":11");
  expect_plan_error(t, "content hash mismatch");
  free(t);
  t = replace(j, ",\"launch_us\":0.001", "");
  expect_plan_error(t, "/hardware: missing required member 'launch_us'");
  free(t);
  t = replace(j, "\"flops\":1e+12", "\"flops\":\"fast\"");
  expect_plan_error(t, "/hardware/flops: expected a number, got a string");
  free(t);
  /* so is the memory budget, a positive integer when present */
  t = replace(j, "\"memory_budget_bytes\": 1048576", "\"memory_budget_bytes\": 1048577");
  expect_plan_error(t, "content hash mismatch");
  free(t);
  t = replace(j, "\"memory_budget_bytes\": 1048576", "\"memory_budget_bytes\": 0");
  expect_plan_error(t, "/memory_budget_bytes: 0 is out of range");
  free(t);
  /* the memory timeline is not, but must be well formed and self-consistent */
  t = replace(j, "\"peak_bytes\":2304", "\"peak_bytes\":2305");
  expect_plan_error(t, "/memory_timeline: peak_bytes is not the most bytes live at any point");
  free(t);
  t = replace(j, "[2.25,", "[-1,");
  expect_plan_error(t, "/memory_timeline: points are not in time order");
  free(t);
  t = replace(j, "\"staging\",\"reshard\"", "\"reshard\",\"staging\"");
  expect_plan_error(t, "/memory_timeline/categories/4: expected \"staging\"");
  free(t);
  t = replace(j, "[2.25,256", "[2.25,-256");
  expect_plan_error(t, "/memory_timeline/points/1/1: -256 is out of range");
  free(t);
  t = replace(j, "[2.25,256,", "[2.25,");
  expect_plan_error(t, "/memory_timeline/points/1: expected an array of a time and 8 byte counts");
  free(t);
  t = replace(j, "\"modeled\":true", "\"modeled\":false");
  expect_plan_error(t, "/memory_timeline/modeled: must be true");
  free(t);
  free(j);
  fpi_arena_free(a);
}

/* a plan whose hash matches but whose program is invalid: verifier messages
 * are located by JSON pointer */
static void test_plan_verified(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  k.p->ops[4].count = 65; /* the all_gather overruns its buffer */
  char *j = plan_text(k.p);
  expect_plan_error(j, "/ops/4: all_gather: dst [0, 260) is outside buffer 'b0.unsharded'");
  free(j);
  fpi_arena_free(a);
}

static void fuzz_one_plan(const char *text, size_t len) {
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  char *t = malloc(len + 1);
  memcpy(t, text, len);
  t[len] = 0;
  fp_src s = {"p.json", t, strlen(t)};
  fp_prog *p = fpi_plan_read(a, &d, &s);
  if (!p) assert_true(d.nerrors > 0);
  free(t);
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

static void test_plan_hostile(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  char *j = plan_text(k.p);
  size_t len = strlen(j);
  for (size_t n = 0; n < len; n += 5) fuzz_one_plan(j, n);
  static const char alphabet[] = "0123456789-{}[]\":,e.tfn ";
  char *m = malloc(len + 1);
  for (int it = 0; it < 2000; it++) {
    memcpy(m, j, len + 1);
    size_t at = next_rand() % len;
    m[at] = alphabet[next_rand() % (sizeof alphabet - 1)];
    fuzz_one_plan(m, len);
  }
  free(m);
  static const char *const docs[] = {
      "", "null", "[]", "{}", "{\"format\":\"flexplan.plan.v1\"}", "{\"format\":1}",
      "{\"format\":\"flexplan.plan.v1\",\"planner_version\":\"" FP_VERSION "\",\"hash\":\"x\",\"world_size\":1,"
      "\"ranks_per_node\":1,\"grad_accumulation\":1,\"arena_bytes\":0,\"host_bytes\":0,\"events\":0,\"comms\":[],"
      "\"tables\":[],\"buckets\":[],\"buffers\":[],\"modules\":[],\"params\":[],\"segments\":[],\"ops\":[{}]}",
      "{\"format\":\"flexplan.plan.v1\",\"format\":\"flexplan.plan.v1\"}",
      "{\"format\":\"flexplan.plan.v1\",\"planner_version\":\"" FP_VERSION "\",\"hash\":\"x\",\"world_size\":1,"
      "\"ranks_per_node\":1,\"grad_accumulation\":1,\"arena_bytes\":0,\"host_bytes\":0,\"events\":0,\"comms\":[],"
      "\"tables\":[],\"buckets\":[],\"buffers\":[],\"modules\":[],\"params\":[],\"segments\":"
      "[{\"kind\":\"step_begin\",\"module\":-1,\"micro\":0,\"first\":0,\"count\":2147483647}],\"ops\":[]}",
  };
  for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) fuzz_one_plan(docs[i], strlen(docs[i]));
  free(j);
  fpi_arena_free(a);
}

/* ---- verifier: one negative test per rule ---------------------------------------------- */
typedef void (*mutator)(kit *k);

static void check_mutation(mutator f, const char *frag) {
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  f(&k);
  EXPECT_ERROR(k.p, frag);
  fpi_arena_free(a);
}

/* op index of the n-th op with code c */
static int32_t find_op(const fp_prog *p, fp_opcode c, int n) {
  for (int32_t i = 0; i < p->nops; i++)
    if (p->ops[i].code == c && n-- == 0) return i;
  fail_msg("no such op");
  return -1;
}

/* rule 1: indices and structure */
static void m_comm_range(kit *k) { k->p->ops[find_op(k->p, FP_OP_ALL_GATHER, 0)].comm = 9; }
static void m_shape_range(kit *k) { k->p->ops[find_op(k->p, FP_OP_ALL_GATHER, 0)].shape = 5; }
static void m_buf_range(kit *k) { k->p->ops[find_op(k->p, FP_OP_MEMSET, 0)].dst.buf = 70; }
static void m_event_range(kit *k) { k->p->ops[find_op(k->p, FP_OP_RECORD, 0)].event = 8; }
static void m_view_range(kit *k) { k->p->params[0].weight.buf = 40; }
static void m_users_range(kit *k) { k->p->params[0].users[0] = 7; }
static void m_users_own(kit *k) { k->p->params[0].users[0] = k->m0; }
static void m_tied_unread(kit *k) { /* m1's forward stops listing the tied weight it reads */
  for (int32_t i = 0; i < k->p->nops; i++)
    if (k->p->ops[i].code == FP_OP_COMPUTE && k->p->ops[i].module == k->m1) k->p->ops[i].nuses = 0;
}
static void m_seg_order(kit *k) { k->p->segs[k->p->nsegs - 1].kind = FP_SEG_STEP_BEGIN; }
static void m_seg_module(kit *k) { k->p->segs[1].module = 5; }
static void m_seg_gap(kit *k) { k->p->segs[2].first++, k->p->segs[2].nops--; }
static void m_op_seg(kit *k) { k->p->ops[5].seg = 0; }
static void m_dup_name(kit *k) { k->p->bufs[1].name = "b0.main"; }
static void m_post_opt_not_last(kit *k) {
  fp_seg *s = &k->p->segs[k->p->nsegs - 2]; /* pre_optimizer becomes post_optimizer */
  s->kind = FP_SEG_POST_OPTIMIZER;
}
static void m_table_n(kit *k) { k->p->tabs[0].n = 1; }

/* rule 2: bounds */
static void m_ag_bounds(kit *k) { k->p->ops[find_op(k->p, FP_OP_ALL_GATHER, 0)].count = 65; }
static void m_copy_bounds(kit *k) { k->p->shapes[k->p->ops[find_op(k->p, FP_OP_COPY, 0)].shape].rows = 5; }
/* an op's extent table moved past the buffer (the ragged param keeps a
 * correct table of its own, so only the op's bounds are wrong) */
static void m_tab_entry(kit *k) {
  int64_t off[2] = {0, 64}, cnt[2] = {64, 64};
  k->p->params[1].tab = fpi_ir_table_add(k->p, "t.param", 2, off, cnt);
  k->p->tabs[0].off[1] = 65;
}
static void m_vtab_overlap(kit *k) {
  int64_t off[2] = {0, 64}, cnt[2] = {64, 64};
  k->p->params[1].tab = fpi_ir_table_add(k->p, "t.param", 2, off, cnt);
  k->p->tabs[0].off[1] = 63;
}
/* rule 2: element alignment (an operand or a view half an element off) */
static void m_off_half(kit *k) { k->p->ops[find_op(k->p, FP_OP_MEMSET, 0)].dst.off = 2; }
static void m_src_off3(kit *k) { k->p->ops[find_op(k->p, FP_OP_CAST, 0)].src.off += 3; }
static void m_stride_half(kit *k) { k->p->ops[find_op(k->p, FP_OP_CAST, 0)].dst.stride = 129; }
static void m_view_half(kit *k) { k->p->params[1].main.off = 1; }
/* rule 2: the layout the placement implies */
static void m_shard_chunk(kit *k) { k->p->params[0].chunk = 63; }
static void m_ragged_shift(kit *k) { k->p->tabs[0].off[0] = 1; }
static void m_ragged_cover(kit *k) { k->p->tabs[0].cnt[1] = 63; }
static void m_ragged_chunk(kit *k) { k->p->params[1].chunk = 65; }
static void m_owned_chunk(kit *k) { k->p->params[1].placement = 2; /* owned */ }
static void m_owned_owner(kit *k) {
  k->p->params[1].placement = 2; /* owned */
  k->p->params[1].chunk = 128;
  k->p->params[1].owner = -1;
}
static void m_aux_bounds(kit *k) { k->p->ops[find_op(k->p, FP_OP_QUANTIZE_MXFP8, 0)].aux.off = 255; }
static void m_stride_bounds(kit *k) { k->p->ops[find_op(k->p, FP_OP_CAST, 0)].dst.stride = 200; }
static void m_missing_src(kit *k) { k->p->ops[find_op(k->p, FP_OP_CAST, 0)].src.buf = -1; }

/* rule 3: dtypes and overlap */
static void m_cast_e4m3(kit *k) { k->p->ops[find_op(k->p, FP_OP_CAST, 0)].sdtype = FP_E4M3; }
static void m_reduce_mx(kit *k) {
  fp_op *o = &k->p->ops[find_op(k->p, FP_OP_ALL_REDUCE, 0)];
  o->dtype = o->sdtype = FP_E4M3;
}
static void m_ag_not_inplace(kit *k) { k->p->ops[find_op(k->p, FP_OP_ALL_GATHER, 0)].src.off = 2; }
static void m_rs_not_inplace(kit *k) { k->p->ops[find_op(k->p, FP_OP_REDUCE_SCATTER, 0)].dst.stride = 128; }
/* split_copy / chunk_cat: their region tables */
static void m_region_comm(kit *k) { k->p->ops[find_op(k->p, FP_OP_SPLIT_COPY, 0)].comm = k->shard; }
static void m_region_count(kit *k) { k->p->ops[find_op(k->p, FP_OP_CHUNK_CAT, 0)].count = 9; }
static void m_region_notab(kit *k) { k->p->ops[find_op(k->p, FP_OP_SPLIT_COPY, 0)].tab = -1; }
static void m_region_outside(kit *k) { k->p->tabs[k->p->ops[find_op(k->p, FP_OP_CHUNK_CAT, 0)].tab].off[1] = 250; }
static void m_region_overlap(kit *k) { k->p->ops[find_op(k->p, FP_OP_SPLIT_COPY, 0)].src.off = 32; }
static void m_region_u8(kit *k) {
  fp_op *o = &k->p->ops[find_op(k->p, FP_OP_CHUNK_CAT, 0)];
  o->sdtype = FP_U8;
}
static void m_add_u8(kit *k) {
  fp_op *o = &k->p->ops[find_op(k->p, FP_OP_ADD, 0)];
  o->dtype = o->sdtype = FP_U8;
}
static void m_quant_block(kit *k) { k->p->ops[find_op(k->p, FP_OP_QUANTIZE_MXFP8, 0)].count = 48; }
/* grads are never FP8: a dequantize into the unsharded grads, a quantize of the main grads */
static void m_fp8_ugrad(kit *k) { k->p->ops[find_op(k->p, FP_OP_DEQUANTIZE_MXFP8, 0)].dst.buf = k->ugrad; }
static void m_fp8_grad_src(kit *k) { k->p->ops[find_op(k->p, FP_OP_QUANTIZE_MXFP8, 0)].src.buf = k->grad; }
static void m_host_collective(kit *k) { k->p->ops[find_op(k->p, FP_OP_ALL_REDUCE, 0)].dst.buf = k->host; }

/* rule 4 */
static void m_wait_first(kit *k) { k->p->ops[find_op(k->p, FP_OP_WAIT, 0)].event = 6; }

/* rule 5 */
static void m_only_splits(kit *k) { k->p->ops[find_op(k->p, FP_OP_BROADCAST, 1)].only_comm = k->shard; }
static void m_root_range(kit *k) { k->p->ops[find_op(k->p, FP_OP_BROADCAST, 0)].root = 2; }
static void m_send_unmatched(kit *k) { k->p->ops[find_op(k->p, FP_OP_RECV, 0)].root = 0; }
static void m_send_ungrouped(kit *k) { k->p->ops[find_op(k->p, FP_OP_RECV, 0)].group = -1, k->p->ops[find_op(k->p, FP_OP_SEND, 0)].group = -1; }
static void m_send_count(kit *k) { k->p->ops[find_op(k->p, FP_OP_RECV, 0)].count = 32; }
static void m_vtable_size(kit *k) { k->p->ops[find_op(k->p, FP_OP_ALL_GATHER_V, 0)].comm = k->world; }
static void m_group_split(kit *k) { k->p->ops[find_op(k->p, FP_OP_REDUCE, 0)].group = 3; }

/* rule 6 */
static void m_persist_overlap(kit *k) { k->p->bufs[k->grad].offset = 128; }
static void m_transient_live(kit *k) { k->p->bufs[k->rin].offset = 768; } /* onto ugrad, live together */
static void m_transient_nohb(kit *k) {
  /* a new buffer on mx's bytes, used by the predicated broadcast on ag: ag
   * is ordered after mx's last use on rs only through event 5; wait on an
   * unrelated event instead */
  fp_prog *p = k->p;
  int b = fpi_ir_buf_add(p, "late", FP_BUF_TRANSIENT, FP_CAT_STAGING, -1, 256);
  p->bufs[b].offset = 1536;
  int32_t bc = find_op(p, FP_OP_BROADCAST, 1);
  p->ops[bc].dst = p->ops[bc].src = fpi_reg(b, 0);
  assert_int_equal(p->ops[bc - 1].code, FP_OP_WAIT);
  assert_int_equal(p->ops[bc - 1].event, 5);
  p->ops[bc - 1].event = 2;
}
static void m_cross_step(kit *k) {
  /* a transient used only at the start of step_begin (on ag) shares bytes
   * with unsh, whose last use is the compute of the last module: ag never
   * waits for compute afterwards, so the next step's use is unordered */
  fp_prog *p = k->p;
  int b = fpi_ir_buf_add(p, "early", FP_BUF_TRANSIENT, FP_CAT_STAGING, -1, 64);
  p->bufs[b].offset = 512;
  p->ops[0].dst = fpi_reg(b, 0); /* the step_begin memset, moved to ag */
  p->ops[0].count = 16;
  p->ops[0].stream = FP_STREAM_AG;
  p->ops[p->nops - 1].stream = FP_STREAM_RS; /* the end-of-step wait no longer holds ag back */
}

static void m_use_outside_live(kit *k) { fpi_ir_buf_live(k->p, k->unsh, 3, 4); }
static void m_live_persistent(kit *k) { fpi_ir_buf_live(k->p, k->main, 0, 1); }
static void m_live_overlap(kit *k) { fpi_ir_buf_live(k->p, k->ugrad, 16, 20); }
static void m_live_range(kit *k) { fpi_ir_buf_live(k->p, k->ugrad, 30, 99); }
static void m_uses_noncompute(kit *k) { fpi_ir_op_uses(k->p, &k->p->ops[0], (int32_t[]){k->rin}, 1); }
static void m_uses_range(kit *k) { k->p->uses[0] = 99; }

/* rule 7 */
static void m_arena(kit *k) { k->p->arena_bytes = 1700; }
static void m_host_arena(kit *k) { k->p->host_bytes = 100; }
static void m_hw_zero(kit *k) { k->p->hw.ib_gbps = 0; }
static void m_hw_nan(kit *k) { k->p->hw.launch_us = NAN; }
static void m_hw_gpus(kit *k) { k->p->hw.gpus_per_node = -8; }
/* optimizer state: a program that plans it must give every trainable param
 * a slot in an optimizer_state buffer of equal planes; one that plans none,
 * none */
static void m_opt_missing(kit *k) { k->p->optim = FP_OPTIM_ADAMW, k->p->optim_dtype = FP_F32; }
static void m_opt_unplanned(kit *k) { k->p->params[0].opt = (fp_view){k->grad, 0}; }
static void m_opt_cat(kit *k) {
  k->p->optim = FP_OPTIM_SGD, k->p->optim_dtype = FP_F32;
  for (int32_t i = 0; i < k->p->nparams; i++)
    if (k->p->params[i].requires_grad && k->p->params[i].grad.buf >= 0) k->p->params[i].opt = (fp_view){k->grad, 0};
}
static void m_opt_plane(kit *k) { /* two planes of 128 bytes: a 64-element fp32 slot does not fit one */
  fp_prog *p = k->p;
  int b = fpi_ir_buf_add(p, "b0.optim", FP_BUF_PERSISTENT, FP_CAT_OPT_STATE, k->b0, 256);
  p->bufs[b].offset = p->arena_bytes;
  p->arena_bytes += 256;
  p->optim = FP_OPTIM_ADAMW, p->optim_dtype = FP_F32;
  for (int32_t i = 0; i < p->nparams; i++)
    if (p->params[i].requires_grad && p->params[i].grad.buf >= 0) p->params[i].opt = (fp_view){b, 0};
}
static void m_opt_frozen(kit *k) { /* a valid AdamW layout, then a slot for the frozen param too */
  fp_prog *p = k->p;
  int b = fpi_ir_buf_add(p, "b0.optim", FP_BUF_PERSISTENT, FP_CAT_OPT_STATE, k->b0, 512);
  p->bufs[b].offset = p->arena_bytes;
  p->arena_bytes += 512;
  p->optim = FP_OPTIM_ADAMW, p->optim_dtype = FP_F32;
  for (int32_t i = 0; i < p->nparams; i++) p->params[i].opt = (fp_view){b, 0};
}
static void m_opt_dtype(kit *k) { k->p->optim = FP_OPTIM_SGD, k->p->optim_dtype = (fp_dtype)99; }

static void test_verify_rules(void **state) {
  (void)state;
  static const struct {
    mutator f;
    const char *frag;
  } cases[] = {
      {m_comm_range, "op 4: all_gather: comm 9 is out of range (3 defined)"},
      {m_shape_range, "op 4: all_gather: shape 5 is out of range (3 defined)"},
      {m_buf_range, "op 0: memset: an operand's buffer is out of range"},
      {m_event_range, "op 2: record: event 8 is out of range"},
      {m_view_range, "param 0 'layers.0.w': weight view: buffer 40 is out of range"},
      {m_users_range, "param 0 'layers.0.w': user 7 is out of range (2 modules)"},
      {m_users_own, "param 0 'layers.0.w': user 'layers.0' is the param's own module"},
      {m_tied_unread, "compute of module 1 reads tied param 'layers.0.w' but does not use its weight buffer 'b0.unsharded'"},
      {m_seg_order, "step_begin must be the first segment"},
      {m_seg_module, "segment 1: pre_forward names module 5, out of range"},
      {m_seg_gap, "segment 2: covers ops [9, +2) but the previous segment ends at 8"},
      {m_op_seg, "op 5: op.seg is 0 but it lies in segment 1"},
      {m_dup_name, "buffer 1 'b0.main': buffer name 'b0.main' is also the name of buffer 0"},
      {m_post_opt_not_last, "post_optimizer must be the last segment"},
      {m_table_n, "table 't.ragged' has 1 entries but comm 'shard' has 2 ranks"},
      {m_ag_bounds, "op 4: all_gather: dst [0, 260) is outside buffer 'b0.unsharded' (256 bytes)"},
      {m_copy_bounds, "copy: dst [0, 320) is outside buffer 'b0.grad'"},
      {m_tab_entry, "all_gather_v: dst [0, 258) is outside buffer 'b0.unsharded'"},
      {m_vtab_overlap, "all_gather_v: extent table 't.ragged' entry 1 starts at element 63, inside the pieces before it (they end at 64)"},
      {m_off_half, "op 0: memset: dst offset 2 in buffer 'b0.grad' is not a multiple of the fp32 element size (4 bytes)"},
      {m_src_off3, "cast: src offset 3 in buffer 'b0.main' is not a multiple of the fp32 element size (4 bytes)"},
      {m_stride_half, "cast: dst per-rank stride 129 in buffer 'b0.unsharded' is not a multiple of the bf16 element size"},
      {m_view_half, "param 1 'weird.bias': main view offset 1 in buffer 'b0.main' is not a multiple of the bf16 element size (2 bytes)"},
      {m_shard_chunk, "param 0 'layers.0.w': shard chunk 63 is not the layout's ceil(8 / 2) x 16 = 64 elements"},
      {m_ragged_shift, "param 1 'weird.bias': extent table 't.ragged' entry 0 starts at element 1, needs 0"},
      {m_ragged_cover, "param 1 'weird.bias': extent table 't.ragged' covers 127 elements, the param has 128"},
      {m_ragged_chunk, "param 1 'weird.bias': ragged_shard chunk 65 is not the largest extent of table 't.ragged' (64)"},
      {m_owned_chunk, "param 1 'weird.bias': owned chunk 64 is not the param's 128 elements"},
      {m_owned_owner, "owned param 'weird.bias': owner -1 is not a rank of comm 'shard' (size 2)"},
      {m_aux_bounds, "quantize_mxfp8: aux [255, 257) is outside buffer 'b1.mx'"},
      {m_stride_bounds, "cast: dst [200, 328) is outside buffer 'b0.unsharded' (256 bytes) on rank index 1"},
      {m_missing_src, "cast needs a src operand"},
      {m_cast_e4m3, "cast works on float types (fp32, bf16, fp16), not e4m3->bf16"},
      {m_reduce_mx, "all_reduce reduces e4m3 data, which is not reducible"},
      {m_ag_not_inplace, "all_gather: dst [0, 256) and src [2, 130) overlap in buffer 'b0.unsharded' and are not the in-place form"},
      {m_rs_not_inplace, "reduce_scatter: dst [128, 384) and src [0, 512) overlap"},
      {m_region_comm, "split_copy takes no comm (its table lists regions, not ranks)"},
      {m_region_count, "chunk_cat: n=9 but the regions of table 'b0.regions' count 8"},
      {m_region_notab, "split_copy needs a region table (tab=)"},
      {m_region_outside, "chunk_cat: src [384, 900) is outside buffer 'b0.reduce' (512 bytes)"},
      {m_region_overlap, "split_copy: dst [0, 64) and src [32, 96) overlap in buffer 'b0.reduce'"},
      {m_region_u8, "chunk_cat converts between float types (fp32, bf16, fp16), not u8->fp32"},
      {m_add_u8, "add works on float types"},
      {m_quant_block, "count 48 (rank index 0) is not a multiple of the 32-element MXFP8 block"},
      {m_fp8_ugrad, "dequantize_mxfp8 moves FP8 data into or out of unsharded_grad buffer 'b0.ugrad': grads are never FP8"},
      {m_fp8_grad_src, "quantize_mxfp8 moves FP8 data into or out of main_grad buffer 'b0.grad': grads are never FP8"},
      {m_host_collective, "all_reduce: dst buffer 'b0.offload' is host memory; only h2d/d2h touch host buffers"},
      {m_wait_first, "op 6: wait on event 6 that no earlier op records"},
      {m_only_splits, "only=0@shard splits an instance of comm 'shard': ranks 0 and 1"},
      {m_root_range, "broadcast: root 2 is not a rank of comm 'shard' (size 2)"},
      {m_send_unmatched, "has no matching"},
      {m_send_ungrouped, "must be in one group (group=), or the ring of sends deadlocks"},
      {m_send_count, "recv does not match send op"},
      {m_vtable_size, "all_gather_v: table 't.ragged' has 2 entries but comm 'world' has 4 ranks"},
      {m_group_split, "group 3 is not contiguous (it started at op 4)"},
      {m_persist_overlap, "buffer 1 'b0.grad': persistent buffer overlaps buffer 'b0.main'"},
      {m_transient_live, "share arena bytes and are live at the same time"},
      {m_transient_nohb, "a record/wait is missing"},
      {m_cross_step, "in the next step but op"},
      {m_use_outside_live, "op 7: compute uses buffer 'b0.unsharded' outside its live ranges"},
      {m_live_persistent, "live range 3 of buffer 'b0.main': buffer 'b0.main' is persistent"},
      {m_live_overlap, "live ranges 14..17 and 16..20 of buffer 'b0.ugrad' overlap"},
      {m_live_range, "range 30..99 of buffer 'b0.ugrad' is not within ops 0..40"},
      {m_uses_noncompute, "op 0: memset takes no uses="},
      {m_uses_range, "op 7: compute: used buffer 99 is out of range"},
      {m_arena, "buffer 6 'b1.mx': [1536, +256) lies outside the device arena of 1700 bytes"},
      {m_host_arena, "lies outside the host arena of 100 bytes"},
      {m_hw_zero, "<plan>: error: program: hardware ib_gbps must be a positive number"},
      {m_hw_nan, "hardware launch_us must be a positive number"},
      {m_hw_gpus, "hardware gpus_per_node must be a positive number"},
      {m_opt_missing, "the program plans adamw state but trainable param 'layers.0.w' has no opt view"},
      {m_opt_unplanned, "opt view on a program that plans no optimizer state"},
      {m_opt_cat, "opt view: buffer 'b0.grad' is not a persistent optimizer_state buffer"},
      {m_opt_plane, "fp32 elements) lies outside the first state plane of 'b0.optim' (128 bytes)"},
      {m_opt_dtype, "unknown optimizer state dtype 99"},
      {m_opt_frozen, "param 1 'weird.bias': opt view on a param without a main grad (frozen)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fprintf(stderr, "verify case %zu\n", i);
    check_mutation(cases[i].f, cases[i].frag);
  }
}

/* op.seg (check_segments) is reported before rules 1-3, whichever op comes
 * first: the verifier checks both on one walk and holds the other reports */
static void test_verify_seg_first(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  int32_t ms = find_op(k.p, FP_OP_MEMSET, 0);
  assert_true(ms < 5);
  k.p->ops[ms].dst.buf = 70;
  k.p->ops[5].seg = 0;
  bool ok;
  char *m = verify_msgs(k.p, &ok);
  assert_false(ok);
  const char *seg = strstr(m, "op 5: op.seg is 0 but it lies in segment 1");
  const char *buf = strstr(m, "memset: an operand's buffer is out of range");
  if (!seg || !buf || seg > buf) fprintf(stderr, "got:\n%s", m);
  assert_non_null(seg);
  assert_non_null(buf);
  assert_true(seg < buf);
  free(m);
  fpi_arena_free(a);
}

/* arena bytes reused between the live ranges of another buffer, ordered by
 * stream order and events: valid */
static void test_verify_reuse_ok(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  fp_prog *p = k.p;
  int gap = fpi_ir_buf_add(p, "gap", FP_BUF_TRANSIENT, FP_CAT_STAGING, -1, 256);
  p->bufs[gap].offset = p->bufs[k.ugrad].offset; /* between ugrad's two live ranges */
  int32_t sc = find_op(p, FP_OP_SCALE, 0);
  p->ops[sc].dst = fpi_reg(gap, 0);
  EXPECT_VALID(p);
  roundtrip(p);
  /* the same reuse on another stream without an event is caught */
  p->ops[sc].stream = FP_STREAM_AG;
  EXPECT_ERROR(p, "buffer 'gap' reuses the arena bytes of 'b0.ugrad' but op 14");
  fpi_arena_free(a);
}

/* verifier messages located in the .fpir the program came from */
static void test_verify_located(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  const char *text =
      "fpir 1\n"
      "world_size 2\n"
      "comm w size=2 stride=1\n"
      "buf x persistent staging bytes=64 offset=0\n"
      "arena_bytes 64\n"
      "segment step_begin\n"
      "  0 ag all_gather fp32 n=16 dst=x[0] src=x[0] comm=w\n";
  fp_src s = mksrc("loc.fpir", text);
  fp_prog *p = fpi_ir_parse(a, &d, &s);
  assert_non_null(p);
  assert_false(fpi_ir_verify(p, &d, &s));
  assert_non_null(strstr(d.buf, "loc.fpir:7:1: error: op 0: all_gather: dst [0, 128) is outside buffer 'x'"));
  fpi_diag_free(&d);
  fpi_diag_init(&d, NULL);
  assert_false(fpi_ir_verify(p, &d, NULL));
  assert_non_null(strstr(d.buf, "<plan>: error: op 0: all_gather"));
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

/* ---- explain -------------------------------------------------------------------------- */
static void test_explain(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  kit k = kitchen(a);
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  fpi_ir_explain(k.p, f);
  fclose(f);
  assert_non_null(strstr(buf, "segment"));
  assert_non_null(strstr(buf, "all_gather"));
  assert_non_null(strstr(buf, "b0.unsharded[0] <- b0.unsharded[0+128*g]"));
  assert_non_null(strstr(buf, "2x64 bf16 (256 B)"));
  assert_non_null(strstr(buf, "waits e1"));
  assert_non_null(strstr(buf, "pre_forward(layers.0) mb0"));
  int lines = 0;
  for (char *c = buf; *c; c++) lines += *c == '\n';
  assert_int_equal(lines, k.p->nops + 1);
  assert_null(strstr(buf, "modeled start us"));
  free(buf);
  /* with modeled times: two more columns, still one row per op; a wait names
   * the op that recorded its event */
  double *st = fpi_alloc_array(a, (size_t)k.p->nops, sizeof *st), *en = fpi_alloc_array(a, (size_t)k.p->nops, sizeof *en);
  for (int32_t i = 0; i < k.p->nops; i++) st[i] = 1.5 * i, en[i] = 1.5 * i + 0.25;
  buf = NULL;
  n = 0;
  f = open_memstream(&buf, &n);
  fpi_ir_explain_modeled(k.p, st, en, f);
  fclose(f);
  assert_non_null(strstr(buf, "modeled start us  modeled end us\n"));
  assert_non_null(strstr(buf, "4.500           4.750\n")); /* op 3 */
  int32_t rec = -1, wait = -1;
  for (int32_t i = 0; i < k.p->nops && wait < 0; i++) {
    if (k.p->ops[i].code == FP_OP_RECORD && k.p->ops[i].event == 1) rec = i;
    if (k.p->ops[i].code == FP_OP_WAIT && k.p->ops[i].event == 1) wait = i;
  }
  assert_true(rec >= 0 && wait > rec);
  char want[64];
  snprintf(want, sizeof want, "waits e1 (op %d)", (int)rec);
  assert_non_null(strstr(buf, want));
  lines = 0;
  for (char *c = buf; *c; c++) lines += *c == '\n';
  assert_int_equal(lines, k.p->nops + 1);
  free(buf);
  fpi_arena_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_builder),          cmocka_unit_test(test_kitchen_valid_and_roundtrip),
      cmocka_unit_test(test_fork),
      cmocka_unit_test(test_odd_roundtrip),    cmocka_unit_test(test_parse_handwritten),
      cmocka_unit_test(test_parse_errors),     cmocka_unit_test(test_fpir_hostile),
      cmocka_unit_test(test_plan_roundtrip), cmocka_unit_test(test_hw_hook_us),   cmocka_unit_test(test_plan_tampered), cmocka_unit_test(test_plan_red),
      cmocka_unit_test(test_plan_verified),    cmocka_unit_test(test_plan_hostile),
      cmocka_unit_test(test_verify_rules),     cmocka_unit_test(test_verify_reuse_ok),
      cmocka_unit_test(test_verify_seg_first),
      cmocka_unit_test(test_verify_located),
      cmocka_unit_test(test_explain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
