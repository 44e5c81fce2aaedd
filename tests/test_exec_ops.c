/* test_exec_ops.c - the MPI backend runs every op of ir/ops.def with the
 * semantics ops.def gives it, on 1..N real ranks (ctest runs it under
 * mpirun at several sizes), in both progress modes.
 *
 * Each case builds a small program in code, loads it through the public API,
 * fills its buffers, runs one or two steps and compares every byte with the
 * expected result:
 *  - gathers and broadcasts move arbitrary float bit patterns and must be
 *    bit-exact;
 *  - reductions sum small integers, which every summation order and every
 *    dtype (fp32, bf16, fp16) represents exactly, so they are bit-exact too;
 *    red=avg ones must give that sum divided by the group size in fp32,
 *    rounded once to the dtype (computed here by hand), and agree with the
 *    sum-then-scale form within one rounding;
 *  - in-place forms leave every byte outside dst as NCCL would (the MPI
 *    reduce-scatter writes its result at offset 0; the backend must not);
 *  - events order streams: a compute-stream copy that waits for an
 *    all-gather on the ag stream sees the gathered data, also in the second
 *    step, and waits tied to the previous step's record work;
 *  - sub-communicators (consecutive pairs, strided replicas) and `only`
 *    predicates run where the plan says and nowhere else;
 *  - local ops agree with the reference kernels called directly;
 *  - no hook allocates (stats.hook_allocations). */
#include "exec_util.h"

#include "kernels/kernels.h"

#include <math.h>

static fp_progress mode;

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static void finish(fp_exec *x, fp_plan *plan, tprog *t) {
  fp_exec_stats s;
  fp_exec_get_stats(x, &s);
  EXPECT(s.hook_allocations == 0, "%" PRId64 " allocations inside hooks", s.hook_allocations);
  EXPECT(s.progress == (mode == FP_PROGRESS_DEFAULT ? FP_PROGRESS_THREAD : mode), "progress mode %d", (int)s.progress);
  fp_exec_destroy(x);
  fp_plan_free(plan);
  fpi_arena_free(t->a);
}

/* ---- all_gather, in place and not; fp32 and bf16 ------------------------------------------ */
static void case_all_gather(void) {
  const int W = tu_world, n = 5;
  tprog t = tp_new(W);
  int src = tp_buf(&t, "src", n * 4, false), dst = tp_buf(&t, "dst", (int64_t)W * n * 4, false);
  int ip = tp_buf(&t, "inplace", (int64_t)W * n * 4, false), h = tp_buf(&t, "half", (int64_t)W * n * 2, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_COMPUTE, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(dst, 0), o->src = fpi_reg(src, 0);
  o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(ip, 0), o->src = fpi_reg_g(ip, 0, n * 4);
  o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_RS, FP_BF16, n);
  o->comm = t.world, o->dst = fpi_reg(h, 0), o->src = fpi_reg_g(h, 0, n * 2);
  fp_plan *plan = tp_load(&t);
  fp_exec *x = tp_exec(plan, mode);
  float *s = tp_mem(x, src), *d = tp_mem(x, dst), *q = tp_mem(x, ip);
  uint16_t *hb = tp_mem(x, h);
  for (int j = 0; j < W * n; j++) q[j] = -1.0f, hb[j] = 0xdead;
  for (int i = 0; i < n; i++) {
    s[i] = q[tu_rank * n + i] = tu_val(tu_rank, i);
    hb[tu_rank * n + i] = fpk_f32_to_bf16(tu_val(tu_rank, i));
  }
  tp_step(x);
  EXPECT(fp_exec_sync(x) == FP_OK, "sync: %s", fp_exec_errmsg(x));
  for (int j = 0; j < W; j++)
    for (int i = 0; i < n; i++) {
      uint32_t want = fbits(tu_val(j, i));
      EXPECT(fbits(d[j * n + i]) == want, "all_gather [%d][%d]: %08x, want %08x", j, i, fbits(d[j * n + i]), want);
      EXPECT(fbits(q[j * n + i]) == want, "in-place all_gather [%d][%d]", j, i);
      EXPECT(hb[j * n + i] == fpk_f32_to_bf16(tu_val(j, i)), "bf16 all_gather [%d][%d]", j, i);
    }
  finish(x, plan, &t);
}

/* ---- all_gather_v over a table with gaps and empty pieces --------------------------------- */
static void case_all_gather_v(void) {
  const int W = tu_world, slot = 6;
  tprog t = tp_new(W);
  int64_t off[64], cnt[64];
  for (int j = 0; j < W; j++) off[j] = (int64_t)j * slot + 1, cnt[j] = (j * 5 + 3) % 6; /* gaps; some 0 */
  int tab = fpi_ir_table_add(t.p, "pieces", W, off, cnt);
  int src = tp_buf(&t, "src", slot * 4, false), dst = tp_buf(&t, "dst", ((int64_t)W * slot + 1) * 4, false);
  int ip = tp_buf(&t, "inplace", ((int64_t)W * slot + 1) * 4, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = tp_op(&t, FP_OP_ALL_GATHER_V, FP_STREAM_AG, FP_F32, 0);
  o->comm = t.world, o->tab = tab, o->dst = fpi_reg(dst, 0), o->src = fpi_reg(src, 0);
  o = tp_op(&t, FP_OP_ALL_GATHER_V, FP_STREAM_AG, FP_F32, 0);
  o->comm = t.world, o->tab = tab, o->dst = fpi_reg(ip, 0), o->src = fpi_reg_t(ip, 0);
  fp_plan *plan = tp_load(&t);
  fp_exec *x = tp_exec(plan, mode);
  float *s = tp_mem(x, src), *d = tp_mem(x, dst), *q = tp_mem(x, ip);
  for (int j = 0; j < W * slot + 1; j++) d[j] = q[j] = -7.0f;
  for (int i = 0; i < cnt[tu_rank]; i++) s[i] = q[off[tu_rank] + i] = tu_val(tu_rank, i);
  tp_step(x);
  fp_exec_sync(x);
  for (int j = 0; j < W; j++)
    for (int i = -1; i < slot - 1; i++) {
      int64_t at = off[j] + i;
      uint32_t want = i >= 0 && i < cnt[j] ? fbits(tu_val(j, i)) : fbits(-7.0f); /* gaps untouched */
      EXPECT(fbits(d[at]) == want, "all_gather_v piece %d [%d]", j, i);
      EXPECT(fbits(q[at]) == want, "in-place all_gather_v piece %d [%d]", j, i);
    }
  finish(x, plan, &t);
}

/* ---- reduce_scatter (block and v), all_reduce: sums of small integers ---------------------- */
static float ival(int64_t j, int64_t i) { return (float)((j * 3 + i) % 7); }

/* sum over the ranks j of ival(j, i) */
static float sum_ival(int W, int64_t i) {
  float s = 0;
  for (int j = 0; j < W; j++) s += ival(j, i);
  return s;
}

static void put(void *p, fp_dtype dt, int64_t i, float v) {
  if (dt == FP_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = dt == FP_BF16 ? fpk_f32_to_bf16(v) : fpk_f32_to_f16(v);
}
static float get(const void *p, fp_dtype dt, int64_t i) {
  if (dt == FP_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == FP_BF16 ? fpk_bf16_to_f32(h) : fpk_f16_to_f32(h);
}

/* what a reduction of dtype dt with op red leaves for the exact sum s over
 * W ranks: s itself, or (avg) s / W divided in fp32 and rounded once to dt,
 * computed here by hand. The sum+scale form the planner's default lowering
 * uses (sum, then multiply by 1/W rounded to fp32) must agree with it to
 * within one rounding of dt, exactly when W is a power of two. */
static float reduced(float s, fp_dtype dt, fp_redop red, int W) {
  if (red == FP_RED_SUM) return s;
  float q = s / (float)W;
  unsigned char b[4];
  put(b, dt, 0, q);
  float avg = get(b, dt, 0);
  float scaled = s * (float)(1.0 / W); /* the sum, then scale by 1/W */
  put(b, dt, 0, scaled);
  scaled = get(b, dt, 0);
  float ulp = dt == FP_F32 ? 0x1p-23f : dt == FP_BF16 ? 0x1p-7f : 0x1p-10f;
  if ((W & (W - 1)) == 0)
    EXPECT(avg == scaled, "avg %g != sum then scale %g (W = %d, a power of two)", avg, scaled, W);
  else
    EXPECT(fabsf(avg - scaled) <= ulp * fabsf(avg), "avg %g and sum then scale %g differ by more than one rounding", avg, scaled);
  return avg;
}

static void case_reductions(fp_dtype dt, fp_redop red) {
  const int W = tu_world, n = 7;
  const int64_t sz = fpi_dtype_size(dt);
  tprog t = tp_new(W);
  int64_t off[64], cnt[64], at = 0;
  for (int j = 0; j < W; j++) cnt[j] = (j + 2) % 4, off[j] = at, at += cnt[j]; /* packed: MPI_Ireduce_scatter */
  int packed = fpi_ir_table_add(t.p, "packed", W, off, cnt);
  int64_t goff[64];
  for (int j = 0; j < W; j++) goff[j] = (W - 1 - j) * 4; /* reversed with gaps: one reduce per root */
  int gappy = fpi_ir_table_add(t.p, "gappy", W, goff, cnt);
  int64_t total = (int64_t)W * n;
  int rs_src = tp_buf(&t, "rs.src", total * sz, false), rs_dst = tp_buf(&t, "rs.dst", n * sz, false);
  int rs_ip = tp_buf(&t, "rs.inplace", total * sz, false);
  int v_src = tp_buf(&t, "v.src", (int64_t)W * 4 * sz, false), v_dst = tp_buf(&t, "v.dst", 4 * sz, false);
  int v_ip = tp_buf(&t, "v.inplace", (int64_t)W * 4 * sz, false), g_dst = tp_buf(&t, "g.dst", 4 * sz, false);
  int g_ip = tp_buf(&t, "g.inplace", (int64_t)W * 4 * sz, false);
  int ar_src = tp_buf(&t, "ar.src", n * sz, false), ar_dst = tp_buf(&t, "ar.dst", n * sz, false);
  int ar_ip = tp_buf(&t, "ar.inplace", n * sz, false);
  int rd_dst = tp_buf(&t, "rd.dst", n * sz, false), rd_ip = tp_buf(&t, "rd.inplace", n * sz, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = tp_op(&t, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, dt, n);
  o->comm = t.world, o->dst = fpi_reg(rs_dst, 0), o->src = fpi_reg(rs_src, 0);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER, FP_STREAM_RS, dt, n);
  o->comm = t.world, o->dst = fpi_reg_g(rs_ip, 0, n * sz), o->src = fpi_reg(rs_ip, 0);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER_V, FP_STREAM_AG, dt, 0);
  o->comm = t.world, o->tab = packed, o->dst = fpi_reg(v_dst, 0), o->src = fpi_reg(v_src, 0);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER_V, FP_STREAM_AG, dt, 0);
  o->comm = t.world, o->tab = packed, o->dst = fpi_reg_t(v_ip, 0), o->src = fpi_reg(v_ip, 0);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER_V, FP_STREAM_COMPUTE, dt, 0);
  o->comm = t.world, o->tab = gappy, o->dst = fpi_reg(g_dst, 0), o->src = fpi_reg(v_src, 0);
  o = tp_op(&t, FP_OP_REDUCE_SCATTER_V, FP_STREAM_COMPUTE, dt, 0);
  o->comm = t.world, o->tab = gappy, o->dst = fpi_reg_t(g_ip, 0), o->src = fpi_reg(g_ip, 0);
  o = tp_op(&t, FP_OP_ALL_REDUCE, FP_STREAM_RS, dt, n);
  o->comm = t.world, o->dst = fpi_reg(ar_dst, 0), o->src = fpi_reg(ar_src, 0);
  o = tp_op(&t, FP_OP_ALL_REDUCE, FP_STREAM_AG, dt, n);
  o->comm = t.world, o->dst = o->src = fpi_reg(ar_ip, 0);
  o = tp_op(&t, FP_OP_REDUCE, FP_STREAM_RS, dt, n);
  o->comm = t.world, o->root = 0, o->dst = fpi_reg(rd_dst, 0), o->src = fpi_reg(ar_src, 0);
  o = tp_op(&t, FP_OP_REDUCE, FP_STREAM_RS, dt, n);
  o->comm = t.world, o->root = W - 1, o->dst = o->src = fpi_reg(rd_ip, 0);
  for (int32_t k = 0; k < t.p->nops; k++) t.p->ops[k].red = red;
  fp_plan *plan = tp_load(&t);
  fp_exec *x = tp_exec(plan, mode);
  void *rs = tp_mem(x, rs_src), *rsi = tp_mem(x, rs_ip), *vs = tp_mem(x, v_src), *vi = tp_mem(x, v_ip);
  void *gi = tp_mem(x, g_ip), *ars = tp_mem(x, ar_src), *ari = tp_mem(x, ar_ip), *rdd = tp_mem(x, rd_dst);
  void *rdi = tp_mem(x, rd_ip);
  for (int64_t i = 0; i < total; i++) put(rs, dt, i, ival(tu_rank, i)), put(rsi, dt, i, ival(tu_rank, i));
  for (int64_t i = 0; i < W * 4; i++)
    put(vs, dt, i, ival(tu_rank, i)), put(vi, dt, i, ival(tu_rank, i)), put(gi, dt, i, ival(tu_rank, i));
  for (int64_t i = 0; i < n; i++)
    put(ars, dt, i, ival(tu_rank, i)), put(ari, dt, i, ival(tu_rank, i)), put(rdd, dt, i, -3.0f),
        put(rdi, dt, i, ival(tu_rank, i));
  tp_step(x);
  EXPECT(fp_exec_sync(x) == FP_OK, "sync: %s", fp_exec_errmsg(x));
  const int g = tu_rank;
  const char *dn = fpi_dtype_name(dt);
#define R(v) reduced((v), dt, red, W)
  for (int64_t i = 0; i < n; i++) {
    float want = R(sum_ival(W, g * n + i));
    EXPECT(get(tp_mem(x, rs_dst), dt, i) == want, "%s reduce_scatter [%" PRId64 "]", dn, i);
    EXPECT(get(rsi, dt, g * n + i) == want, "%s in-place reduce_scatter [%" PRId64 "]", dn, i);
    float ar = R(sum_ival(W, i));
    EXPECT(get(tp_mem(x, ar_dst), dt, i) == ar, "%s all_reduce [%" PRId64 "]", dn, i);
    EXPECT(get(ari, dt, i) == ar, "%s in-place all_reduce [%" PRId64 "]", dn, i);
    EXPECT(get(rdd, dt, i) == (g == 0 ? ar : -3.0f), "%s reduce [%" PRId64 "] (root 0; dst untouched elsewhere)", dn, i);
    EXPECT(get(rdi, dt, i) == (g == W - 1 ? ar : ival(g, i)), "%s in-place reduce [%" PRId64 "]", dn, i);
  }
  /* NCCL's in-place reduce-scatter writes only dst: the other slots keep the input */
  for (int64_t i = 0; i < total; i++)
    if (i < g * n || i >= (g + 1) * n) EXPECT(get(rsi, dt, i) == ival(g, i), "%s in-place reduce_scatter slot byte %" PRId64, dn, i);
  for (int64_t i = 0; i < cnt[g]; i++) {
    EXPECT(get(tp_mem(x, v_dst), dt, i) == R(sum_ival(W, off[g] + i)), "%s reduce_scatter_v [%" PRId64 "]", dn, i);
    EXPECT(get(vi, dt, off[g] + i) == R(sum_ival(W, off[g] + i)), "%s in-place reduce_scatter_v [%" PRId64 "]", dn, i);
    EXPECT(get(tp_mem(x, g_dst), dt, i) == R(sum_ival(W, goff[g] + i)), "%s reduce_scatter_v per root [%" PRId64 "]", dn, i);
    EXPECT(get(gi, dt, goff[g] + i) == R(sum_ival(W, goff[g] + i)), "%s in-place reduce_scatter_v per root", dn);
  }
  for (int64_t i = 0; i < W * 4; i++)
    if (i < off[g] || i >= off[g] + cnt[g]) EXPECT(get(vi, dt, i) == ival(g, i), "%s in-place reduce_scatter_v keeps [%" PRId64 "]", dn, i);
#undef R
  finish(x, plan, &t);
}

/* ---- broadcast, send/recv ------------------------------------------------------------------ */
static void case_broadcast_p2p(void) {
  const int W = tu_world, n = 9;
  tprog t = tp_new(W);
  int src = tp_buf(&t, "src", n * 4, false), dst = tp_buf(&t, "dst", n * 4, false);
  int ip = tp_buf(&t, "inplace", n * 4, false), rx = tp_buf(&t, "rx", n * 4, false);
  int rx2 = tp_buf(&t, "rx2", n * 4, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = tp_op(&t, FP_OP_BROADCAST, FP_STREAM_AG, FP_F32, n);
  o->comm = t.world, o->root = W - 1, o->dst = fpi_reg(dst, 0), o->src = fpi_reg(src, 0);
  o = tp_op(&t, FP_OP_BROADCAST, FP_STREAM_AG, FP_F32, n);
  o->comm = t.world, o->root = 0, o->dst = o->src = fpi_reg(ip, 0);
  /* a ring shift by 1 and by W-1, each a group */
  for (int k = 0; k < 2; k++) {
    int d = k == 0 ? 1 % W : (W - 1) % W;
    o = tp_op(&t, FP_OP_SEND, FP_STREAM_RS, FP_F32, n);
    o->comm = t.world, o->root = d, o->src = fpi_reg(src, 0), o->group = k;
    o = tp_op(&t, FP_OP_RECV, FP_STREAM_RS, FP_F32, n);
    o->comm = t.world, o->root = d, o->dst = fpi_reg(k ? rx2 : rx, 0), o->group = k;
  }
  fp_plan *plan = tp_load(&t);
  fp_exec *x = tp_exec(plan, mode);
  float *s = tp_mem(x, src), *q = tp_mem(x, ip);
  for (int i = 0; i < n; i++) s[i] = tu_val(tu_rank, i), q[i] = tu_val(100 + tu_rank, i);
  tp_step(x);
  fp_exec_sync(x);
  float *d = tp_mem(x, dst), *r = tp_mem(x, rx), *r2 = tp_mem(x, rx2);
  for (int i = 0; i < n; i++) {
    EXPECT(fbits(d[i]) == fbits(tu_val(W - 1, i)), "broadcast [%d]", i);
    EXPECT(fbits(s[i]) == fbits(tu_val(tu_rank, i)), "broadcast leaves src [%d]", i);
    EXPECT(fbits(q[i]) == fbits(tu_val(100, i)), "in-place broadcast [%d]", i);
    EXPECT(fbits(r[i]) == fbits(tu_val((tu_rank - 1 + W) % W, i)), "recv from g-1 [%d]", i);
    EXPECT(fbits(r2[i]) == fbits(tu_val((tu_rank + 1) % W, i)), "recv from g+1 [%d]", i);
  }
  finish(x, plan, &t);
}

/* ---- local ops against the kernels called directly ------------------------------------------- */
/* ---- split_copy and chunk_cat over a region table: positions by hand ---------------------- */
/* Two regions {off 0, cnt 2} and {off 8, cnt 3} over 3 rows: the rows side
 * holds a row of 5 elements (region 0's 2, then region 1's 3) every 6
 * elements; the table side holds region j's rows back to back from
 * off[j]: region 0 at 0..5, region 1 at 8..16. */
static void case_regions(void) {
  const int R = 3;
  tprog t = tp_new(tu_world);
  int64_t off[2] = {0, 8}, cnt[2] = {2, 3};
  int tab = fpi_ir_table_add(t.p, "regions", 2, off, cnt);
  int st = tp_buf(&t, "stage", R * 6 * 4, false), u = tp_buf(&t, "unsharded", 17 * 4, false);
  int g16 = tp_buf(&t, "grad16", 17 * 2, false), g32 = tp_buf(&t, "grad32", 17 * 4, false);
  int r1 = tp_buf(&t, "rows16", R * 6 * 4, false), r2 = tp_buf(&t, "rows32", R * 6 * 4, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = tp_op(&t, FP_OP_SPLIT_COPY, FP_STREAM_AG, FP_F32, 5);
  o->tab = tab, o->dst = fpi_reg(u, 0), o->src = fpi_reg(st, 0);
  fpi_ir_op_shape(t.p, o, R, 0, 6 * 4);
  o = tp_op(&t, FP_OP_CHUNK_CAT, FP_STREAM_RS, FP_F32, 5); /* bf16 -> fp32 as it copies */
  o->sdtype = FP_BF16, o->tab = tab, o->dst = fpi_reg(r1, 0), o->src = fpi_reg(g16, 0);
  fpi_ir_op_shape(t.p, o, R, 6 * 4, 0);
  o = tp_op(&t, FP_OP_CHUNK_CAT, FP_STREAM_RS, FP_F32, 5);
  o->tab = tab, o->dst = fpi_reg(r2, 0), o->src = fpi_reg(g32, 0);
  fpi_ir_op_shape(t.p, o, R, 6 * 4, 0);
  fp_plan *plan = tp_load(&t);
  fp_exec *x = tp_exec(plan, mode);
  float *S = tp_mem(x, st), *U = tp_mem(x, u), *G32 = tp_mem(x, g32), *R1 = tp_mem(x, r1), *R2 = tp_mem(x, r2);
  uint16_t *G16 = tp_mem(x, g16);
  for (int i = 0; i < R * 6; i++) S[i] = (float)(100 * (i / 6) + i % 6), R1[i] = R2[i] = -1.0f;
  for (int i = 0; i < 17; i++) U[i] = -1.0f, G32[i] = (float)(1000 + i), G16[i] = fpk_f32_to_bf16((float)(i + 1) * 0.5f);
  tp_step(x);
  EXPECT(fp_exec_sync(x) == FP_OK, "sync: %s", fp_exec_errmsg(x));
  for (int r = 0; r < R; r++) {
    for (int k = 0; k < 2; k++) {
      EXPECT(U[r * 2 + k] == (float)(100 * r + k), "split_copy region 0 row %d [%d]: %g", r, k, U[r * 2 + k]);
      EXPECT(R1[r * 6 + k] == (float)(r * 2 + k + 1) * 0.5f, "chunk_cat bf16 region 0 row %d [%d]", r, k);
      EXPECT(R2[r * 6 + k] == (float)(1000 + r * 2 + k), "chunk_cat fp32 region 0 row %d [%d]", r, k);
    }
    for (int k = 0; k < 3; k++) {
      EXPECT(U[8 + r * 3 + k] == (float)(100 * r + 2 + k), "split_copy region 1 row %d [%d]: %g", r, k, U[8 + r * 3 + k]);
      EXPECT(R1[r * 6 + 2 + k] == (float)(8 + r * 3 + k + 1) * 0.5f, "chunk_cat bf16 region 1 row %d [%d]", r, k);
      EXPECT(R2[r * 6 + 2 + k] == (float)(1000 + 8 + r * 3 + k), "chunk_cat fp32 region 1 row %d [%d]", r, k);
    }
    EXPECT(R1[r * 6 + 5] == -1.0f && R2[r * 6 + 5] == -1.0f, "chunk_cat writes past its row %d", r);
  }
  for (int i = 6; i < 8; i++) EXPECT(U[i] == -1.0f, "split_copy wrote the gap [%d]", i);
  finish(x, plan, &t);
}

static void case_local(void) {
  const int W = tu_world, n = 64;
  tprog t = tp_new(W);
  int a = tp_buf(&t, "a", n * 4, false), b16 = tp_buf(&t, "b16", n * 2, false), c = tp_buf(&t, "c", n * 4, false);
  int h16 = tp_buf(&t, "h16", n * 2, false), mx = tp_buf(&t, "mx", n, false), sc = tp_buf(&t, "sc", n / 32, false);
  int dq = tp_buf(&t, "dq", n * 4, false), cp = tp_buf(&t, "cp", 4 * 16 * 4, false), z = tp_buf(&t, "z", n * 4, false);
  int host = tp_buf(&t, "host", n * 4, true), back = tp_buf(&t, "back", n * 4, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = tp_op(&t, FP_OP_CAST, FP_STREAM_COMPUTE, FP_BF16, n);
  o->sdtype = FP_F32, o->dst = fpi_reg(b16, 0), o->src = fpi_reg(a, 0);
  o = tp_op(&t, FP_OP_CAST, FP_STREAM_COMPUTE, FP_F16, n);
  o->sdtype = FP_F32, o->dst = fpi_reg(h16, 0), o->src = fpi_reg(a, 0);
  o = tp_op(&t, FP_OP_CAST, FP_STREAM_COMPUTE, FP_F32, n);
  o->sdtype = FP_BF16, o->dst = fpi_reg(c, 0), o->src = fpi_reg(b16, 0);
  o = tp_op(&t, FP_OP_ADD, FP_STREAM_COMPUTE, FP_F32, n);
  o->sdtype = FP_F16, o->dst = fpi_reg(c, 0), o->src = fpi_reg(h16, 0);
  o = tp_op(&t, FP_OP_ADD, FP_STREAM_COMPUTE, FP_F32, n); /* in place: doubles */
  o->dst = o->src = fpi_reg(c, 0);
  o = tp_op(&t, FP_OP_SCALE, FP_STREAM_COMPUTE, FP_F32, n);
  o->dst = fpi_reg(c, 0), o->alpha = 0.375;
  o = tp_op(&t, FP_OP_QUANTIZE_MXFP8, FP_STREAM_COMPUTE, FP_E4M3, n);
  o->sdtype = FP_F32, o->dst = fpi_reg(mx, 0), o->src = fpi_reg(a, 0), o->aux = fpi_reg(sc, 0);
  o = tp_op(&t, FP_OP_DEQUANTIZE_MXFP8, FP_STREAM_COMPUTE, FP_F32, n);
  o->sdtype = FP_E4M3, o->dst = fpi_reg(dq, 0), o->src = fpi_reg(mx, 0), o->aux = fpi_reg(sc, 0);
  o = tp_op(&t, FP_OP_COPY, FP_STREAM_COMPUTE, FP_F32, 3); /* 4 rows of 3 out of rows of 16 */
  o->dst = fpi_reg(cp, 4), o->src = fpi_reg(a, 8);
  fpi_ir_op_shape(t.p, o, 4, 16 * 4, 8 * 4);
  o = tp_op(&t, FP_OP_MEMSET, FP_STREAM_COMPUTE, FP_F32, n - 2);
  o->dst = fpi_reg(z, 4);
  o = tp_op(&t, FP_OP_D2H, FP_STREAM_RS, FP_U8, n * 4);
  o->dst = fpi_reg(host, 0), o->src = fpi_reg(a, 0);
  o = tp_op(&t, FP_OP_H2D, FP_STREAM_RS, FP_U8, n * 4);
  o->dst = fpi_reg(back, 0), o->src = fpi_reg(host, 0);
  fp_plan *plan = tp_load(&t);
  fp_exec *x = tp_exec(plan, mode);
  float *A = tp_mem(x, a), *Z = tp_mem(x, z);
  for (int i = 0; i < n; i++) A[i] = tu_val(tu_rank, i) * (i == 5 ? 1e30f : 1.0f), Z[i] = 1.0f;
  tp_step(x);
  fp_exec_sync(x);
  uint16_t wb[64], wh[64];
  float wc[64], wd[64];
  uint8_t wm[64], ws[2];
  fpk_cast(wb, FP_BF16, A, FP_F32, n);
  fpk_cast(wh, FP_F16, A, FP_F32, n);
  fpk_cast(wc, FP_F32, wb, FP_BF16, n);
  fpk_add(wc, FP_F32, wh, FP_F16, n);
  fpk_add(wc, FP_F32, wc, FP_F32, n);
  fpk_scale(wc, FP_F32, 0.375, n);
  fpk_quantize_mxfp8(wm, ws, A, FP_F32, n);
  fpk_dequantize_mxfp8(wd, FP_F32, wm, ws, n);
  EXPECT(!memcmp(tp_mem(x, b16), wb, sizeof wb), "cast fp32->bf16");
  EXPECT(!memcmp(tp_mem(x, h16), wh, sizeof wh), "cast fp32->fp16");
  EXPECT(!memcmp(tp_mem(x, c), wc, sizeof wc), "cast bf16->fp32, add fp16, add in place, scale");
  EXPECT(!memcmp(tp_mem(x, mx), wm, sizeof wm) && !memcmp(tp_mem(x, sc), ws, sizeof ws), "quantize_mxfp8");
  EXPECT(!memcmp(tp_mem(x, dq), wd, sizeof wd), "dequantize_mxfp8");
  float *C = tp_mem(x, cp);
  for (int r = 0; r < 4; r++)
    for (int i = 0; i < 16; i++) {
      bool in = i >= 1 && i < 4;
      EXPECT(fbits(C[r * 16 + i]) == (in ? fbits(A[2 + r * 8 + i - 1]) : 0u), "copy row %d col %d", r, i);
    }
  for (int i = 0; i < n; i++) EXPECT(Z[i] == (i >= 1 && i < n - 1 ? 0.0f : 1.0f), "memset [%d]", i);
  EXPECT(!memcmp(tp_mem(x, back), A, n * 4) && !memcmp(tp_mem(x, host), A, n * 4), "d2h then h2d");
  finish(x, plan, &t);
}

/* ---- streams and events over two steps ------------------------------------------------------- */
/* step_begin:      ag: copy my main slot into w, all_gather w in place, record e0
 *                  compute: record e3 only on rank 0
 *                  rs: wait e0, add w into acc, record e4
 * pre_forward(m):  compute: wait e0, copy w -> seen, record e1, wait e4
 *                  rs: wait e3 (off rank 0 its last record is the previous
 *                  step's, from post_forward; none in the first step)
 * post_forward(m): compute: wait e1, record e3, record e5; ag: wait e5 (the
 *                  next step's gather must not overwrite w under the copy)
 * The trainer changes its main slot between the steps; `seen` must hold the
 * gathered data of the step, and acc the sum over both steps. In poll mode
 * the compute stream is advanced first, so a wait that did not hold would
 * copy stale data. */
static void case_events(void) {
  const int W = tu_world, n = 4;
  tprog t = tp_new(W);
  int mainb = tp_buf(&t, "main", n * 4, false), w = tp_buf(&t, "w", (int64_t)W * n * 4, false);
  int seen = tp_buf(&t, "seen", (int64_t)W * n * 4, false), acc = tp_buf(&t, "acc", (int64_t)W * n * 4, false);
  for (int e = 0; e < 6; e++) fpi_ir_event_new(t.p);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = tp_op(&t, FP_OP_COPY, FP_STREAM_AG, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg_g(w, 0, n * 4), o->src = fpi_reg(mainb, 0);
  fpi_ir_op_shape(t.p, o, 1, n * 4, n * 4);
  o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, n);
  o->comm = t.world, o->dst = fpi_reg(w, 0), o->src = fpi_reg_g(w, 0, n * 4);
  tp_sync(&t, FP_OP_RECORD, FP_STREAM_AG, 0);
  o = tp_sync(&t, FP_OP_RECORD, FP_STREAM_COMPUTE, 3);
  o->only = 0, o->only_comm = t.world;
  tp_sync(&t, FP_OP_WAIT, FP_STREAM_RS, 0);
  o = tp_op(&t, FP_OP_ADD, FP_STREAM_RS, FP_F32, (int64_t)W * n);
  o->dst = fpi_reg(acc, 0), o->src = fpi_reg(w, 0);
  tp_sync(&t, FP_OP_RECORD, FP_STREAM_RS, 4);
  fpi_ir_seg_begin(t.p, FP_SEG_PRE_FORWARD, t.module, 0);
  tp_sync(&t, FP_OP_WAIT, FP_STREAM_COMPUTE, 0);
  o = tp_op(&t, FP_OP_COPY, FP_STREAM_COMPUTE, FP_F32, (int64_t)W * n);
  o->dst = fpi_reg(seen, 0), o->src = fpi_reg(w, 0);
  fpi_ir_op_shape(t.p, o, 1, (int64_t)W * n * 4, (int64_t)W * n * 4);
  tp_sync(&t, FP_OP_RECORD, FP_STREAM_COMPUTE, 1);
  tp_sync(&t, FP_OP_WAIT, FP_STREAM_COMPUTE, 4);
  tp_sync(&t, FP_OP_WAIT, FP_STREAM_RS, 3);
  o = tp_op(&t, FP_OP_COMPUTE, FP_STREAM_COMPUTE, FP_F32, 0); /* a placeholder: never run */
  o->module = t.module;
  fpi_ir_seg_begin(t.p, FP_SEG_POST_FORWARD, t.module, 0);
  tp_sync(&t, FP_OP_WAIT, FP_STREAM_COMPUTE, 1);
  tp_sync(&t, FP_OP_RECORD, FP_STREAM_COMPUTE, 3);
  /* the next step's gather overwrites w, which this step's copy read */
  tp_sync(&t, FP_OP_RECORD, FP_STREAM_COMPUTE, 5);
  tp_sync(&t, FP_OP_WAIT, FP_STREAM_AG, 5);
  fp_plan *plan = tp_load(&t);
  fp_exec *x = tp_exec(plan, mode);
  float *m = tp_mem(x, mainb), *S = tp_mem(x, seen), *Acc = tp_mem(x, acc);
  const fp_xop *wait3 = NULL;
  for (int32_t j = 0; j < x->nxops; j++)
    if (x->xops[j].code == FP_OP_WAIT && x->xops[j].event == 3) wait3 = &x->xops[j];
  EXPECT(wait3 && wait3->rec && wait3->rec_prev == (tu_rank != 0), "wait e3 tied to %s record",
         wait3 && wait3->rec_prev ? "the previous step's" : "this step's");
  for (int step = 0; step < 2; step++) {
    for (int i = 0; i < n; i++) m[i] = tu_val(tu_rank + 10 * step, i);
    tp_step(x);
    /* after the hooks, without a sync: the compute stream's results are in
     * place, and the compute stream waited for the add (e4) */
    for (int j = 0; j < W; j++)
      for (int i = 0; i < n; i++) {
        EXPECT(fbits(S[j * n + i]) == fbits(tu_val(j + 10 * step, i)), "step %d: seen [%d][%d]", step, j, i);
        float want = 0.0f + tu_val(j, i);
        if (step) want += tu_val(j + 10, i);
        EXPECT(fbits(Acc[j * n + i]) == fbits(want), "step %d: acc [%d][%d]", step, j, i);
      }
  }
  fp_exec_sync(x);
  fp_exec_stats s;
  fp_exec_get_stats(x, &s);
  EXPECT(s.steps == 2 && s.hooks == 6, "steps %" PRId64 " hooks %" PRId64, s.steps, s.hooks);
  finish(x, plan, &t);
}

/* ---- sub-communicators and `only` ---------------------------------------------------------- */
/* pair: consecutive pairs (size 2, stride 1); rep: ranks with the same index
 * in their pair (size W/2, stride 2). Only pair 0 (rep index 0) runs the
 * broadcast and the cast before it. */
static void case_subcomms(void) {
  const int W = tu_world, n = 3;
  if (W % 2) return;
  tprog t = tp_new(W);
  int pair = fpi_ir_comm_add(t.p, "pair", 2, 1), rep = fpi_ir_comm_add(t.p, "rep", W / 2, 2);
  int src = tp_buf(&t, "src", n * 4, false), ag = tp_buf(&t, "ag", 2 * n * 4, false);
  int ar = tp_buf(&t, "ar", n * 4, false), bc = tp_buf(&t, "bc", n * 2, false);
  fpi_ir_seg_begin(t.p, FP_SEG_STEP_BEGIN, -1, 0);
  fp_op *o = tp_op(&t, FP_OP_ALL_GATHER, FP_STREAM_AG, FP_F32, n);
  o->comm = pair, o->dst = fpi_reg(ag, 0), o->src = fpi_reg(src, 0);
  o = tp_op(&t, FP_OP_ALL_REDUCE, FP_STREAM_RS, FP_F32, n);
  o->comm = rep, o->dst = fpi_reg(ar, 0), o->src = fpi_reg(src, 0);
  o = tp_op(&t, FP_OP_CAST, FP_STREAM_COMPUTE, FP_BF16, n);
  o->sdtype = FP_F32, o->dst = fpi_reg(bc, 0), o->src = fpi_reg(src, 0), o->only = 1, o->only_comm = pair;
  o = tp_op(&t, FP_OP_BROADCAST, FP_STREAM_COMPUTE, FP_BF16, n);
  o->comm = pair, o->root = 1, o->dst = o->src = fpi_reg(bc, 0), o->only = 0, o->only_comm = rep;
  fp_plan *plan = tp_load(&t);
  fp_exec *x = tp_exec(plan, mode);
  float *s = tp_mem(x, src);
  uint16_t *b = tp_mem(x, bc);
  for (int i = 0; i < n; i++) s[i] = (float)(tu_rank * 10 + i), b[i] = 0xbeef;
  tp_step(x);
  fp_exec_sync(x);
  float *A = tp_mem(x, ag), *R = tp_mem(x, ar);
  int p0 = tu_rank / 2 * 2, gi = tu_rank % 2;
  for (int i = 0; i < n; i++) {
    EXPECT(A[i] == (float)(p0 * 10 + i) && A[n + i] == (float)((p0 + 1) * 10 + i), "pair all_gather [%d]", i);
    float want = 0;
    for (int k = gi; k < W; k += 2) want += (float)(k * 10 + i);
    EXPECT(R[i] == want, "rep all_reduce [%d]: %g want %g", i, R[i], want);
    /* pair 0 broadcasts its index-1 rank's cast; elsewhere index-1 ranks cast only */
    uint16_t wb = tu_rank < 2 ? fpk_f32_to_bf16((float)(10 + i)) : gi ? fpk_f32_to_bf16((float)(tu_rank * 10 + i)) : 0xbeef;
    EXPECT(b[i] == wb, "only: broadcast [%d] %04x want %04x", i, b[i], wb);
  }
  finish(x, plan, &t);
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  fp_progress modes[] = {FP_PROGRESS_POLL, FP_PROGRESS_THREAD, FP_PROGRESS_DEFAULT};
  for (int k = 0; k < 3; k++) {
    mode = modes[k];
    case_all_gather();
    case_all_gather_v();
    for (int r = FP_RED_SUM; r <= FP_RED_AVG; r++) { /* avg: MPI's sum, then divided by G */
      case_reductions(FP_F32, (fp_redop)r);
      case_reductions(FP_BF16, (fp_redop)r);
      case_reductions(FP_F16, (fp_redop)r);
    }
    case_broadcast_p2p();
    case_local();
    case_regions();
    case_events();
    case_subcomms();
  }
  return tu_finish();
}
