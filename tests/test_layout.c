/* test_layout.c - the layout math against layouts computed by hand: shard
 * padding, zero-element shards, ragged cut points and alignment, owned
 * bin-packing, hybrid groups, storage alignment, int64 overflow, the
 * located errors of model-vs-spec checks, and a tied weight (model.json v2
 * "uses") with recomputed modules, through the lowering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "base/json.h"
#include "planner/layout.h"
#include "planner/lower.h"

typedef struct {
  fp_arena *a;
  fp_diag d;
  fp_src src;
  fp_model m;
  fp_spec s;
  fp_layout L;
} fx;

/* parse {"model":..,"spec":..} from text and build the layout */
static bool build(fx *f, const char *text) {
  memset(f, 0, sizeof *f);
  f->a = fpi_arena_new();
  fpi_diag_init(&f->d, NULL);
  f->src = (fp_src){"t.json", text, strlen(text)};
  fp_jctx c = {f->a, &f->d, &f->src, NULL};
  const fp_jv *root = fpi_json_parse(&c);
  assert_non_null(root);
  bool ok = fpi_model_parse(f->a, &f->d, &f->src, fpi_j_get(root, "model"), "/model", &f->m) &&
            fpi_spec_parse(f->a, &f->d, &f->src, fpi_j_get(root, "spec"), "/spec", &f->s) &&
            fpi_layout_build(f->a, &f->d, &f->m, &f->s, &f->L);
  return ok;
}

static void done(fx *f) {
  fpi_diag_free(&f->d);
  fpi_arena_free(f->a);
}

static const fp_lparam *param(const fx *f, const char *name) {
  for (int i = 0; i < f->L.nparams; i++)
    if (!strcmp(f->L.params[i].mp->name, name)) return &f->L.params[i];
  fail_msg("no param %s", name);
  return NULL;
}

#define MODEL1(shape) \
  "{\"model\":{\"format\":\"flexplan.model.v1\",\"name\":\"t\",\"modules\":[{\"name\":\"m\",\"params\":[{\"name\":\"w\",\"shape\":" shape "}]}]},"

static void shard_padding(void **state) {
  (void)state;
  fx f;
  assert_true(build(&f, MODEL1("[10,4]") "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":4}}}"));
  const fp_lparam *p = param(&f, "w");
  /* 10 rows over 4 ranks: 3 rows each, padded to 12 rows of 4 */
  assert_int_equal(p->chunk, 12);
  assert_int_equal(p->padded_numel, 48);
  fpi_layout_extent e = p->impl->extent(&f.L, p, 3);
  assert_int_equal(e.begin, 36);
  assert_int_equal(e.count, 12);
  assert_int_equal(e.valid, 4); /* row 9 only */
  e = p->impl->extent(&f.L, p, 0);
  assert_int_equal(e.valid, 12);
  done(&f);
}

static void shard_dim1(void **state) {
  (void)state;
  fx f;
  assert_true(build(&f, MODEL1("[3,10]") "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":4},"
                                         "\"defaults\":{\"placement\":{\"kind\":\"shard\",\"dim\":1}}}}"));
  const fp_lparam *p = param(&f, "w");
  /* 10 columns over 4 ranks: 3 each; a rank's block is 3 rows x 3 columns */
  assert_int_equal(p->chunk, 9);
  assert_int_equal(p->padded_numel, 30); /* the param layout is not padded */
  assert_true(p->gstage_off >= 0);
  assert_int_equal(f.L.buckets[0].gstage_bytes, 256); /* 4 ranks x 9 x bf16 = 72 -> 256 */
  fpi_layout_extent e = p->impl->extent(&f.L, p, 3);
  assert_int_equal(e.valid, 3); /* column 9 of 3 rows */
  done(&f);
}

static void zero_element_shards(void **state) {
  (void)state;
  fx f;
  assert_true(build(&f, MODEL1("[3]") "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":8}}}"));
  const fp_lparam *p = param(&f, "w");
  assert_int_equal(p->chunk, 1);
  for (int g = 0; g < 8; g++) assert_int_equal(p->impl->extent(&f.L, p, g).valid, g < 3 ? 1 : 0);
  done(&f);
}

static void ragged_cuts(void **state) {
  (void)state;
  fx f;
  assert_true(build(&f, MODEL1("[100]") "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":4},"
                                        "\"defaults\":{\"placement\":{\"kind\":\"ragged_shard\",\"units\":[1,2,0,1],"
                                        "\"align_elems\":4}}}}"));
  const fp_lparam *p = param(&f, "w");
  /* cut r = floor(100 * prefix / 4 / 4) * 4: 0, 24, 72, 72, then 100 */
  const int64_t want[5] = {0, 24, 72, 72, 100};
  for (int r = 0; r < 5; r++) assert_int_equal(p->cuts[r], want[r]);
  assert_int_equal(p->slot, 48);
  assert_int_equal(p->impl->slot_elems(&f.L, p, 2), 0); /* zero units: zero elements */
  assert_int_equal(p->impl->extent(&f.L, p, 3).count, 28);
  done(&f);
}

static void ragged_smaller_than_alignment(void **state) {
  (void)state;
  fx f;
  assert_true(build(&f, MODEL1("[5]") "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":2},"
                                      "\"defaults\":{\"placement\":{\"kind\":\"ragged_shard\",\"units\":[1,1],"
                                      "\"align_elems\":32}}}}"));
  const fp_lparam *p = param(&f, "w");
  assert_int_equal(p->cuts[1], 0); /* everything lands on the last rank */
  assert_int_equal(p->impl->slot_elems(&f.L, p, 0), 0);
  assert_int_equal(p->impl->slot_elems(&f.L, p, 1), 5);
  done(&f);
}

static void owned_bin_packing(void **state) {
  (void)state;
  fx f;
  /* LPT over 2 ranks: 100->0, 80->1, 60->1 (80<100), 40->0 (100<140),
   * 20->0 (tie 140/140 goes to the lowest rank) */
  assert_true(build(&f, "{\"model\":{\"format\":\"flexplan.model.v1\",\"name\":\"t\",\"modules\":[{\"name\":\"m\","
                        "\"params\":[{\"name\":\"a\",\"shape\":[60]},{\"name\":\"b\",\"shape\":[100]},"
                        "{\"name\":\"c\",\"shape\":[20]},{\"name\":\"d\",\"shape\":[80]},{\"name\":\"e\",\"shape\":[40]}]}]},"
                        "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":2},"
                        "\"defaults\":{\"placement\":{\"kind\":\"owned\",\"rank\":\"auto\"}}}}"));
  assert_int_equal(param(&f, "b")->owner, 0);
  assert_int_equal(param(&f, "d")->owner, 1);
  assert_int_equal(param(&f, "a")->owner, 1);
  assert_int_equal(param(&f, "e")->owner, 0);
  assert_int_equal(param(&f, "c")->owner, 0);
  /* owned slots are packed per owner rank, 256-aligned */
  assert_int_equal(param(&f, "a")->shard_off % FP_PARAM_ALIGN, 0);
  /* rank 0 stores b, c, e: 400 + 80 + 160 bytes -> 3 slots of 512, 256, 256 */
  assert_int_equal(f.L.buckets[0].shard_bytes, 1024);
  done(&f);
}

static void hybrid_groups(void **state) {
  (void)state;
  fx f;
  assert_true(build(&f, MODEL1("[64]") "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":16,"
                                       "\"ranks_per_node\":4},\"strategy\":\"hybrid_shard\",\"hybrid_shard\":"
                                       "{\"intra_node_size\":4}}}"));
  assert_int_equal(f.L.G, 4);
  assert_int_equal(f.L.R, 4);
  assert_int_equal(param(&f, "w")->chunk, 16);
  /* replica group: stride 4, size 4: rank 13 is index 3 of {1,5,9,13} */
  fp_ir_comm rep = {.name = "replica", .size = 4, .stride = 4}, shard = {.name = "shard", .size = 4, .stride = 1};
  assert_int_equal(fpi_comm_index(&rep, 13), 3);
  assert_int_equal(fpi_comm_index(&shard, 13), 1);
  done(&f);
}

static void storage_alignment(void **state) {
  (void)state;
  fx f;
  assert_true(build(&f, "{\"model\":{\"format\":\"flexplan.model.v1\",\"name\":\"t\",\"modules\":[{\"name\":\"m\","
                        "\"params\":[{\"name\":\"a\",\"shape\":[10]},{\"name\":\"b\",\"shape\":[1000]}]}]},"
                        "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":1},"
                        "\"defaults\":{\"collectives\":\"per_param\"}}}"));
  assert_int_equal(param(&f, "a")->shard_off, 0);
  assert_int_equal(param(&f, "b")->shard_off, 256);
  assert_int_equal(param(&f, "b")->unsharded_off, 256);
  assert_int_equal(f.L.buckets[0].shard_bytes, 256 + 4096);   /* fp32 main */
  assert_int_equal(f.L.buckets[0].unsharded_bytes, 256 + 2048); /* bf16 compute */
  done(&f);
}

static void int64_overflow_when_padded(void **state) {
  (void)state;
  fx f;
  /* numel * 4 fits int64, but padding to 8 ranks pushes the bytes past it */
  char text[512];
  snprintf(text, sizeof text, MODEL1("[%lld]") "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":8},"
           "\"defaults\":{\"mixed_precision\":{\"param_dtype\":\"fp32\"}}}}", (long long)(INT64_MAX / 4 - 1));
  assert_false(build(&f, text));
  assert_non_null(strstr(f.d.buf, "too large"));
  assert_non_null(strstr(f.d.buf, "/model/modules/0/params/0"));
  done(&f);
}

static void located_errors(void **state) {
  (void)state;
  struct {
    const char *spec, *want;
  } cases[] = {
      {"\"defaults\":{\"placement\":{\"kind\":\"shard\",\"dim\":2}}", "t.json:1:"},
      {"\"defaults\":{\"placement\":{\"kind\":\"ragged_shard\",\"units\":[1,1]}}",
       "/spec/defaults/placement/units: ragged_shard needs one unit count per rank"},
      {"\"defaults\":{\"placement\":{\"kind\":\"owned\",\"rank\":4}}",
       "/spec/defaults/placement/rank: owner rank 4 is outside"},
      {"\"defaults\":{\"reshard_after_forward\":3}", "/spec/defaults/reshard_after_forward: reshard_after_forward 3"},
      {"\"buckets\":[{\"name\":\"x\",\"params\":[\"nothing.*\"]}]", "/spec/buckets/0/params: bucket 'x' matches no"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"model\":{\"format\":\"flexplan.model.v1\",\"name\":\"t\",\"modules\":[{\"name\":\"m\",\"params\":"
             "[{\"name\":\"w\",\"shape\":[8,8]}]},{\"name\":\"n\",\"params\":[{\"name\":\"v\",\"shape\":[8]}]}]},"
             "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":4},%s}}",
             cases[i].spec);
    fx f;
    assert_false(build(&f, text));
    if (!strstr(f.d.buf, cases[i].want)) fail_msg("case %zu: want '%s' in '%s'", i, cases[i].want, f.d.buf);
    done(&f);
  }
}

static void reshard_normalized(void **state) {
  (void)state;
  fx f;
  assert_true(build(&f, "{\"model\":{\"format\":\"flexplan.model.v1\",\"name\":\"t\",\"modules\":["
                        "{\"name\":\"a\",\"params\":[{\"name\":\"a.w\",\"shape\":[1000]}]},"
                        "{\"name\":\"b\",\"params\":[{\"name\":\"b.w\",\"shape\":[1000]}]}]},"
                        "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":8},"
                        "\"defaults\":{\"reshard_after_forward\":2}}}"));
  /* a: kept sharded over 2 ranks; b runs last, its backward follows at once:
   * never resharded */
  assert_int_equal(f.L.buckets[0].reshard, 2);
  assert_int_equal(f.L.buckets[0].reshard_chunk, 1024); /* ceil(2048/2)=1024, 256-aligned */
  assert_int_equal(f.L.buckets[1].reshard, 0);
  done(&f);
}

/* embed.weight [10,4] is declared by embed and used again by head (tied); l0
 * and l1 are recomputed. By hand, on 4 ranks (full_shard, fp32):
 *  - 4 params, one of them tied: embed.weight is stored once (shard 3 rows
 *    of 4 = 12 elements per rank, 48 padded);
 *  - buckets: embed (positions 0..3: read by embed and head; head runs last,
 *    so it is never resharded), l0 (1..1, resharded), l1 (2..2, resharded),
 *    head (3..3, last: kept);
 *  - collectives: all-gathers embed 1, l0 2, l1 2, head 1 = 6;
 *    reduce-scatters one per bucket = 4; embed's after embed's backward,
 *    the last op of its kind, after head's backward wrote into its ugrad;
 *  - head's compute ops read embed's weight, its backward writes embed's
 *    ugrad, which is zeroed once, before head's backward (the first
 *    backward that touches it), and reduced once;
 *  - the backward of a recomputed module costs flops_fwd + flops_bwd. */
static void tied_and_recompute(void **state) {
  (void)state;
  fx f;
  assert_true(build(&f, "{\"model\":{\"format\":\"flexplan.model.v2\",\"name\":\"t\",\"modules\":["
                        "{\"name\":\"embed\",\"params\":[{\"name\":\"embed.weight\",\"shape\":[10,4]}]},"
                        "{\"name\":\"l0\",\"params\":[{\"name\":\"l0.w\",\"shape\":[4,4]}],\"flops_fwd\":100,"
                        "\"activation_bytes\":4096,\"activation_bytes_checkpointed\":64},"
                        "{\"name\":\"l1\",\"params\":[{\"name\":\"l1.w\",\"shape\":[4,4]}],\"flops_fwd\":100},"
                        "{\"name\":\"head\",\"params\":[{\"name\":\"head.b\",\"shape\":[10]}],"
                        "\"uses\":[\"embed.weight\"]}]},"
                        "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":4},\"recompute\":[\"l*\"],"
                        "\"defaults\":{\"mixed_precision\":{\"param_dtype\":\"fp32\"}}}}"));
  assert_int_equal(f.m.version, 2);
  assert_int_equal(f.L.nparams, 4);
  assert_int_equal(f.m.modules[3].nuses, 1);
  assert_int_equal(f.m.modules[3].uses[0], 0);
  const fp_lparam *e = param(&f, "embed.weight");
  assert_int_equal(e->chunk, 12);
  assert_int_equal(e->padded_numel, 48);
  int be = e->bucket, bl0 = param(&f, "l0.w")->bucket, bh = param(&f, "head.b")->bucket;
  assert_int_equal(f.L.nbuckets, 4);
  assert_int_equal(f.L.buckets[be].first_pos, 0);
  assert_int_equal(f.L.buckets[be].last_pos, 3);
  assert_int_equal(f.L.buckets[be].reshard, 0);
  assert_int_equal(f.L.buckets[bl0].first_pos, 1);
  assert_int_equal(f.L.buckets[bl0].last_pos, 1);
  assert_int_equal(f.L.buckets[bl0].reshard, 4);
  assert_int_equal(f.L.buckets[bh].reshard, 0);
  assert_true(!f.L.recompute[0] && f.L.recompute[1] && f.L.recompute[2] && !f.L.recompute[3]);

  fp_prog *P = fpi_lower_step(f.a, &f.d, &f.L, 1, 1, 0);
  assert_non_null(P);
  assert_true(P->mods[1].recompute && P->mods[1].saved_bytes == 64 && P->mods[2].recompute &&
              P->mods[2].saved_bytes == 0 && !P->mods[0].recompute && !P->mods[3].recompute);
  int ag[4] = {0}, rs[4] = {0}, memset_e = -1, rs_e = -1, head_bwd = -1, embed_bwd = -1, last_rs = -1;
  int ew = -1, eug = -1;
  for (int32_t i = 0; i < P->nparams; i++)
    if (!strcmp(P->params[i].name, "embed.weight")) ew = P->params[i].weight.buf, eug = P->params[i].ugrad.buf;
  assert_true(ew >= 0 && eug >= 0);
  for (int32_t i = 0; i < P->nops; i++) {
    const fp_op *op = &P->ops[i];
    if (op->code == FP_OP_ALL_GATHER) ag[op->bucket]++;
    if (op->code == FP_OP_REDUCE_SCATTER) {
      rs[op->bucket]++;
      last_rs = i;
      if (op->bucket == be) rs_e = i;
    }
    if (op->code == FP_OP_MEMSET && op->dst.buf == eug) {
      assert_int_equal(memset_e, -1); /* zeroed once */
      memset_e = i;
    }
    if (op->code == FP_OP_COMPUTE && op->pass == FP_PASS_BWD) {
      if (op->module == 3) head_bwd = i;
      if (op->module == 0) embed_bwd = i;
      if (op->module == 1) assert_true(op->alpha == 300.0); /* 100 + 2*100: recomputed */
    }
    if (op->code == FP_OP_COMPUTE && op->module == 3) { /* head reads the tied weight; its backward writes its grad */
      bool w = false, g = false;
      for (int32_t u = 0; u < op->nuses; u++) w |= P->uses[op->uses + u] == ew, g |= P->uses[op->uses + u] == eug;
      assert_true(w);
      assert_true(g == (op->pass == FP_PASS_BWD));
    }
  }
  assert_int_equal(ag[be], 1);
  assert_int_equal(ag[bl0], 2);
  assert_int_equal(ag[bh], 1);
  assert_int_equal(ag[0] + ag[1] + ag[2] + ag[3], 6);
  for (int b = 0; b < 4; b++) assert_int_equal(rs[b], 1);
  assert_true(memset_e >= 0 && memset_e < head_bwd && head_bwd < embed_bwd && embed_bwd < rs_e);
  assert_int_equal(rs_e, last_rs);
  done(&f);
}

#define FP32 "\"defaults\":{\"mixed_precision\":{\"param_dtype\":\"fp32\",\"reduce_dtype\":\"fp32\",\"main_grad_dtype\":\"fp32\"}"

/* a flat bucket by hand: fp32 (64-element alignment), 4 ranks; w [100] at 0,
 * b [10] at 128, v [30,5] at 192: 342 elements, ceil(342/4) = 86 rounded up
 * to C = 128. Rank 0 holds w; rank 1 b and v[0:64); rank 2 v[64:150); rank 3
 * nothing. */
static void flat_layout(void **state) {
  (void)state;
  fx f;
  assert_true(build(&f, "{\"model\":{\"format\":\"flexplan.model.v1\",\"name\":\"t\",\"modules\":[{\"name\":\"m\","
                        "\"params\":[{\"name\":\"w\",\"shape\":[100]},{\"name\":\"b\",\"shape\":[10]},"
                        "{\"name\":\"v\",\"shape\":[30,5]}]}]},\"spec\":{\"format\":\"flexplan.spec.v1\","
                        "\"mesh\":{\"world_size\":4}," FP32 ",\"collectives\":\"flat\"}}}"));
  const fp_bucket *B = &f.L.buckets[0];
  assert_true(B->flat);
  assert_int_equal(B->flat_chunk, 128);
  assert_int_equal(param(&f, "w")->flat_off, 0);
  assert_int_equal(param(&f, "b")->flat_off, 128);
  assert_int_equal(param(&f, "v")->flat_off, 192);
  assert_int_equal(param(&f, "v")->unsharded_off, 192 * 4);
  assert_int_equal(B->unsharded_bytes, 512 * 4);
  assert_int_equal(B->shard_bytes, 128 * 4);
  assert_int_equal(B->grad_bytes, 128 * 4);
  /* the lowering: one cast/copy, one all-gather, one reduce-scatter, one
   * scale per step for the bucket; params flat_shard with chunk C */
  fp_prog *P = fpi_lower_step(f.a, &f.d, &f.L, 1, 1, 0);
  int ag = 0, rs = 0;
  for (int32_t i = 0; i < P->nops; i++) {
    ag += P->ops[i].code == FP_OP_ALL_GATHER;
    rs += P->ops[i].code == FP_OP_REDUCE_SCATTER;
    if (P->ops[i].code == FP_OP_ALL_GATHER || P->ops[i].code == FP_OP_REDUCE_SCATTER)
      assert_int_equal(P->ops[i].count, 128);
  }
  assert_int_equal(ag, 1); /* the last module keeps its weights for backward */
  assert_int_equal(rs, 1);
  for (int32_t i = 0; i < P->nparams; i++) {
    assert_int_equal(P->params[i].placement, FP_PL_FLAT);
    assert_int_equal(P->params[i].chunk, 128);
  }
  done(&f);
  /* per_param keeps shard(0) */
  assert_true(build(&f, "{\"model\":{\"format\":\"flexplan.model.v1\",\"name\":\"t\",\"modules\":[{\"name\":\"m\","
                        "\"params\":[{\"name\":\"w\",\"shape\":[100]},{\"name\":\"b\",\"shape\":[10]}]}]},"
                        "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":4}," FP32
                        ",\"collectives\":\"per_param\"}}}"));
  assert_false(f.L.buckets[0].flat);
  assert_int_equal(param(&f, "w")->flat_off, -1);
  assert_int_equal(param(&f, "w")->chunk, 25);
  done(&f);
}

#define NEARLY(got, want) assert_true(fabs((got) - (want)) <= 1e-9 * fmax(1, fabs(want)))

/* the auto choice against the cost model by hand (h100-sxm, 8 ranks on one
 * node: latency 8.4 + 7 x 3.4 = 32.2 us, busbw 370800 bytes/us, factor 7/8;
 * local kernels at the 2 us launch floor at these sizes) */
static void flat_choice_by_cost(void **state) {
  (void)state;
  fx f;
  /* w [64,32], b [64]: per param, 2 copies + 2 scales (8 us) and one grouped
   * all-gather and reduce-scatter each 32.2 + (8*256 + 8*8)*4*7/8 / 370800;
   * flat (b at 2048, 2112 elements, C = 264 -> 320): 2 + 2 us and
   * 2 x (32.2 + 8*320*4*7/8 / 370800). Flat wins. */
  assert_true(build(&f, "{\"model\":{\"format\":\"flexplan.model.v1\",\"name\":\"t\",\"modules\":[{\"name\":\"m\","
                        "\"params\":[{\"name\":\"w\",\"shape\":[64,32]},{\"name\":\"b\",\"shape\":[64]}]}]},"
                        "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":8}," FP32 "}}}"));
  const fp_bucket *B = &f.L.buckets[0];
  NEARLY(fpi_layout_bucket_us(&f.L, B, false), 8 + 2 * (32.2 + 7392.0 / 370800));
  NEARLY(fpi_layout_bucket_us(&f.L, B, true), 4 + 2 * (32.2 + 8960.0 / 370800));
  assert_true(B->flat);
  done(&f);
  /* one param [8,3]: per param, chunk 3: 4 us + 2 x (32.2 + 8*3*4*7/8 / 370800);
   * flat rounds the chunk up to 64 elements: 4 + 2 x (32.2 + 8*64*4*7/8 / 370800).
   * Per param wins. */
  assert_true(build(&f, MODEL1("[8,3]") "\"spec\":{\"format\":\"flexplan.spec.v1\",\"mesh\":{\"world_size\":8}," FP32
                                        "}}}"));
  B = &f.L.buckets[0];
  NEARLY(fpi_layout_bucket_us(&f.L, B, false), 4 + 2 * (32.2 + 84.0 / 370800));
  NEARLY(fpi_layout_bucket_us(&f.L, B, true), 4 + 2 * (32.2 + 1792.0 / 370800));
  assert_false(B->flat);
  assert_int_equal(f.L.params[0].pl->kind, FP_PL_SHARD);
  done(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(shard_padding),         cmocka_unit_test(shard_dim1),
      cmocka_unit_test(zero_element_shards),   cmocka_unit_test(ragged_cuts),
      cmocka_unit_test(ragged_smaller_than_alignment), cmocka_unit_test(owned_bin_packing),
      cmocka_unit_test(hybrid_groups),         cmocka_unit_test(storage_alignment),
      cmocka_unit_test(int64_overflow_when_padded), cmocka_unit_test(located_errors),
      cmocka_unit_test(reshard_normalized),    cmocka_unit_test(tied_and_recompute),
      cmocka_unit_test(flat_layout),           cmocka_unit_test(flat_choice_by_cost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
