/* test_xfer_verify.c - the transfer verifier (ir/verify_xfer.c): a compiled
 * transfer passes; one broken copy per rule fails with that rule's message;
 * hand-built orders that deadlock (also only through the executor's wait
 * for every posted request) are caught, as are staging written twice and a
 * process forwarding what it received; the planner's
 * located errors for plans that do not fit together; the MXFP8 block split
 * of a slice that starts inside a block (fpi_tx_head / fpi_tx_nscales); a
 * quantize whose block holds another param's elements (X7: its scales are
 * not its param's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/exec_impl.h"
#include "flexplan_compile.h"
#include "ir/xfer.h"
#include "planner/reshard.h"

static int failures;
#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      failures++;                                                     \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fputc('\n', stderr);                                            \
    }                                                                 \
  } while (0)

static const char *dir;

static fp_plan *compile(const char *spec, int world) {
  char path[1024], text[4096];
  snprintf(path, sizeof path, "%s/%s.spec.json", dir, spec);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[n] = 0;
  /* "world_size": N in the spec's mesh */
  char *w = strstr(text, "\"world_size\":");
  char out[4200];
  if (w) {
    char *e = w + 13;
    while (*e == ' ' || (*e >= '0' && *e <= '9')) e++;
    snprintf(out, sizeof out, "%.*s\"world_size\": %d%s", (int)(w - text), text, world, e);
  }
  char model[1024];
  snprintf(model, sizeof model, "%s/mlp.model.json", dir);
  fp_compile_options o = {.model_path = model, .spec_text = out};
  fp_plan *p = NULL;
  CHECK(fp_plan_compile(&o, &p) == FP_OK, "compile %s: %s", spec, fp_plan_errmsg(p));
  return p;
}

/* verify t; expect valid (want == NULL) or an error containing want */
static void expect(const fp_tx *t, const char *want, const char *what) {
  fp_diag d;
  fpi_diag_init(&d, NULL);
  bool ok = fpi_tx_verify(t, &d);
  const char *msg = d.buf ? d.buf : "";
  if (!want)
    CHECK(ok, "%s: should verify, got: %s", what, msg);
  else
    CHECK(!ok && strstr(msg, want), "%s: expected an error containing '%s', got: %s", what, want, ok ? "(valid)" : msg);
  fpi_diag_free(&d);
}

/* a deep copy of t's ops (the mutations change only ops and needs) */
static fp_tx *clone(fp_arena *a, const fp_tx *t) {
  fp_tx *c = fpi_alloc(a, sizeof *c);
  *c = *t;
  c->ops = fpi_alloc_array(a, (size_t)t->nops + 1, sizeof *c->ops);
  memcpy(c->ops, t->ops, (size_t)t->nops * sizeof *c->ops);
  c->need = fpi_alloc_array(a, (size_t)t->nneed + 1, sizeof *c->need);
  memcpy(c->need, t->need, (size_t)t->nneed * sizeof *c->need);
  return c;
}

static int32_t find(const fp_tx *t, fp_tx_kind k, int space) {
  for (int32_t i = 0; i < t->nops; i++)
    if (t->ops[i].kind == k && (space < 0 || t->ops[i].dst.space == space || t->ops[i].src.space == space)) return i;
  return -1;
}

/* fpi_tx_read of text must fail with want in its message, located at byte
 * offset at of the text (-1: anywhere in t.xfer.json) */
static void expect_read(fp_arena *a, const char *text, const char *want, long at, const char *what) {
  fp_src s = {"t.xfer.json", text, strlen(text)};
  fp_diag d;
  fpi_diag_init(&d, NULL);
  fp_tx *t = fpi_tx_read(a, &d, &s);
  char where[64] = "t.xfer.json:";
  if (at >= 0) {
    int line = 1, col = 1;
    for (long k = 0; k < at; k++) text[k] == '\n' ? (line++, col = 1) : col++;
    snprintf(where, sizeof where, "t.xfer.json:%d:%d: error: ", line, col);
  }
  CHECK(!t && d.buf && strstr(d.buf, want) && strstr(d.buf, where), "%s: expected '%s' at '%s', got: %s", what, want,
        where, t ? "(accepted)" : d.buf ? d.buf : "(no message)");
  fpi_diag_free(&d);
}

/* text with the first occurrence of old replaced by new (malloc'd) */
static char *edit(const char *text, const char *old, const char *new, long *at) {
  const char *p = strstr(text, old);
  if (!p) return NULL;
  size_t n = strlen(text) + strlen(new) + 1;
  char *out = malloc(n);
  snprintf(out, n, "%.*s%s%s", (int)(p - text), text, new, p + strlen(old));
  if (at) *at = (long)(p - text);
  return out;
}

/* a hand-built transfer of nprocs processes, each holding FROM and TO
 * arenas of 64 bytes and 32 bytes of staging, with one param "w" of 16
 * f32; the caller emits ops and regions, then fpi_tx_finish */
static fp_tx *hand(fp_arena *a, int32_t nprocs) {
  fp_tx *t = fpi_tx_new(a);
  t->nprocs = t->from_world = t->to_world = nprocs;
  t->from_arena = t->to_arena = 64;
  t->params = fpi_alloc_array(a, 1, sizeof *t->params);
  t->nparams = 1;
  t->params[0] = (fp_tx_param){"w", 16, false, false, -1};
  t->stage_bytes = fpi_alloc_array(a, (size_t)nprocs, sizeof *t->stage_bytes);
  for (int32_t p = 0; p < nprocs; p++) t->stage_bytes[p] = 32;
  return t;
}

static fp_tx_op *op(fp_tx *t, fp_tx_kind k, int32_t p, int32_t peer, fp_tx_ref dst, fp_tx_ref src) {
  fp_tx_op *o = fpi_tx_emit(t, k, p, 0, FP_F32, 4);
  o->peer = peer, o->dst = dst, o->src = src;
  return o;
}

/* a plug-in for the rules below: fp32 sent as bf16 (shapes only: nothing runs) */
static bool w16_should(void *ctx, const fpi_xf_param *p) {
  (void)ctx;
  return p->from == FP_F32;
}
static bool w16_wires(void *ctx, bool recv, const fpi_xf_param *p, int64_t begin, int64_t count, fp_tx_wire *out,
                      int *n, char *err, size_t errcap) {
  (void)ctx, (void)recv, (void)p, (void)begin, (void)err, (void)errcap;
  out[0] = (fp_tx_wire){FP_BF16, count};
  *n = 1;
  return true;
}

/* "PATTERN=NAME" rules (the CLI's --transform, fp_reshard_options
 * transform_rules): the built-in names and a plug-in's, the first match
 * deciding; an unknown name or a rule without NAME refused listing the known
 * names. mx is the transfer compiled with the pattern "fc0.weight" (the
 * built-in mxfp8): the rule "fc0.weight=mxfp8" compiles to the same JSON */
static void transform_rules(fp_arena *a, const fp_prog *A, const fp_prog *B, const fp_tx *mx) {
  fpi_xform w16 = {"w16", NULL, w16_should, w16_wires, NULL, NULL};
  const fpi_xform *v[] = {&w16};
  fpi_xforms set = {v, 1};
  struct { const char *rule; const fpi_xforms *xf; const char *want; } bad[] = {
      {"fc*=fp4", NULL, "reshard: error: --transform 'fc*=fp4': unknown transform 'fp4' (known: mxfp8, mxfp8_receiver, "
                        "mxfp8_sender; a plug-in is known once registered"},
      {"fc*=fp4", &set, "--transform 'fc*=fp4': unknown transform 'fp4' (known: mxfp8, mxfp8_receiver, mxfp8_sender, w16)"},
      {"fc*", NULL, "--transform 'fc*': expected PATTERN=NAME (NAME one of mxfp8, mxfp8_receiver, mxfp8_sender)"},
      {"=mxfp8", NULL, "--transform '=mxfp8': expected PATTERN=NAME"}};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    fp_diag d;
    fpi_diag_init(&d, NULL);
    fp_reshard_opts o = {.what = "weights", .rules = &bad[k].rule, .nrules = 1, .xf = bad[k].xf};
    fp_tx *t = fpi_reshard(a, A, NULL, B, NULL, &o, &d);
    CHECK(!t && d.buf && strstr(d.buf, bad[k].want), "rule '%s': want \"%s\", got: %s", bad[k].rule, bad[k].want,
          d.buf ? d.buf : "(a transfer)");
    fpi_diag_free(&d);
  }
  /* the first rule matching decides: fc0.weight the built-in sender-side (not the second rule's w16), fc0.bias
   * w16, fc1.weight receiver-side; the params no rule matches go through the set's first transform taking them
   * (w16 takes fp32) */
  const char *rules[] = {"fc0.weight=mxfp8", "fc0.*=w16", "fc1.weight=mxfp8_receiver"};
  fp_diag d;
  fpi_diag_init(&d, NULL);
  fp_reshard_opts o = {.what = "weights", .rules = rules, .nrules = 3, .xf = &set};
  fp_tx *t = fpi_reshard(a, A, NULL, B, NULL, &o, &d);
  CHECK(t != NULL, "rules: %s", d.buf ? d.buf : "");
  fpi_diag_free(&d);
  if (!t) return;
  expect(t, NULL, "the transfer of three rules and a plug-in");
  for (int32_t j = 0; j < t->nparams; j++) {
    const char *n = t->params[j].name, *x = fpi_tx_xf_name(t, j);
    const char *want = !strcmp(n, "fc0.weight") ? "mxfp8" : !strcmp(n, "fc1.weight") ? "mxfp8_receiver" : "w16";
    CHECK(x && !strcmp(x, want), "param %s goes through %s, want %s", n, x ? x : "(none)", want);
  }
  /* the rule "fc0.weight=mxfp8" is the pattern "fc0.weight" of fp_reshard_opts.mxfp8, byte for byte */
  const char *one[] = {"fc0.weight=mxfp8"};
  fpi_diag_init(&d, NULL);
  fp_reshard_opts r1 = {.what = "weights", .rules = one, .nrules = 1};
  fp_tx *t1 = fpi_reshard(a, A, NULL, B, NULL, &r1, &d);
  fpi_diag_free(&d);
  char *j0 = NULL, *j1 = NULL;
  size_t n0 = 0, n1 = 0;
  FILE *f0 = open_memstream(&j0, &n0), *f1 = open_memstream(&j1, &n1);
  fpi_tx_write_json(mx, f0);
  if (t1) fpi_tx_write_json(t1, f1);
  fclose(f0), fclose(f1);
  CHECK(t1 && n0 == n1 && !memcmp(j0, j1, n0), "the rule fc0.weight=mxfp8 compiles otherwise than the pattern");
  free(j0), free(j1);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_xfer_verify TESTS_MPI_DIR\n");
    return 2;
  }
  dir = argv[1];
  fp_plan *A = compile("full_shard", 4), *B = compile("placements-w3", 3);
  if (!A || !B) return 1;
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  const char *pats[] = {"fc0.weight"};
  fp_reshard_opts o = {.what = "weights", .mxfp8 = pats, .nmxfp8 = 1};
  fp_tx *t = fpi_reshard(a, A->prog, NULL, B->prog, NULL, &o, &d);
  CHECK(t != NULL, "reshard: %s", d.buf ? d.buf : "");
  fpi_diag_free(&d);
  if (!t) return 1;
  expect(t, NULL, "the compiled transfer");
  CHECK(t->wire_bytes < t->lower_bound, "MXFP8 on the wire should take fewer bytes");
  transform_rules(a, A->prog, B->prog, t);

  fp_tx *c;
  int32_t i;
  /* X1: an operand outside its space */
  c = clone(a, t);
  i = find(c, FP_TX_RECV, -1);
  c->ops[i].dst.off = c->to_arena;
  expect(c, "lies outside", "X1 recv past TO's arena");
  /* X1: a send to itself */
  c = clone(a, t);
  i = find(c, FP_TX_SEND, -1);
  c->ops[i].peer = c->ops[i].proc;
  expect(c, "is not another process", "X1 send to itself");
  /* X2: a byte written twice (a local copy's dst moved onto the next one's) */
  c = clone(a, t);
  i = find(c, FP_TX_COPY, FP_SP_TO);
  c->ops[i].dst.off += 4;
  expect(c, "written twice", "X2 overlap");
  /* X2: a need region nobody writes */
  c = clone(a, t);
  c->need = fpi_grow(a, c->need, &c->cap_need, c->nneed + 1, sizeof *c->need);
  c->need[c->nneed++] = (fp_tx_region){0, 0, c->to_arena - 8, 8, 0, FP_F32, 0};
  expect(c, "never written", "X2 missing bytes");
  /* X2: a write outside every need region */
  c = clone(a, t);
  for (int32_t k = 0; k < c->nneed; k++)
    if (c->need[k].proc == c->ops[find(c, FP_TX_COPY, FP_SP_TO)].proc && c->need[k].off ==
        c->ops[find(c, FP_TX_COPY, FP_SP_TO)].dst.off) {
      c->need[k].off += c->need[k].bytes; /* the region moves away from what is written */
      break;
    }
  expect(c, "no need region", "X2 write outside");
  /* X3: a recv of another size than its send */
  c = clone(a, t);
  i = find(c, FP_TX_RECV, FP_SP_TO);
  c->ops[i].n -= 1;
  expect(c, "matching send", "X3 size");
  /* X3: a send nobody receives */
  c = clone(a, t);
  i = find(c, FP_TX_RECV, -1);
  {
    int32_t p = c->ops[i].proc, q = c->ops[i].peer;
    for (int32_t k = 0; k < c->nops; k++)
      if (c->ops[k].kind == FP_TX_RECV && c->ops[k].proc == p && c->ops[k].peer == q) c->ops[k].kind = FP_TX_COPY,
                                                                                     c->ops[k].src = c->ops[k].dst;
  }
  expect(c, "posts no matching recv", "X3 unmatched");
  /* X5: a FROM read of bytes the rank does not hold */
  c = clone(a, t);
  i = find(c, FP_TX_SEND, FP_SP_FROM);
  c->ops[i].src.off = c->from_arena - fpi_tx_src_bytes(c, &c->ops[i]);
  expect(c, "does not hold", "X5 FROM read");
  /* X5: staging read before anything wrote it (the built-in MXFP8's finalize moved first) */
  c = clone(a, t);
  i = find(c, FP_TX_FINALIZE, -1);
  {
    int32_t p = c->ops[i].proc, f = c->first[p];
    fp_tx_op x = c->ops[i];
    memmove(&c->ops[f + 1], &c->ops[f], (size_t)(i - f) * sizeof x);
    c->ops[f] = x;
  }
  expect(c, "no earlier op of the process wrote", "X5 staging read");

  /* X4: two processes that each wait for the other's data before sending */
  fp_tx *dl = fpi_tx_new(a);
  dl->nprocs = dl->from_world = dl->to_world = 2;
  dl->from_arena = dl->to_arena = 64;
  dl->params = fpi_alloc_array(a, 1, sizeof *dl->params);
  dl->nparams = 1;
  dl->params[0] = (fp_tx_param){"w", 8, false, false, -1};
  for (int32_t p = 0; p < 2; p++) {
    fp_tx_op *r = fpi_tx_emit(dl, FP_TX_RECV, p, 0, FP_F32, 4);
    r->peer = 1 - p, r->dst = (fp_tx_ref){FP_SP_STAGE, 0}, r->full_off = 4 * (1 - p);
    fp_tx_op *cp = fpi_tx_emit(dl, FP_TX_COPY, p, 0, FP_F32, 4);
    cp->dst = (fp_tx_ref){FP_SP_TO, 16}, cp->src = (fp_tx_ref){FP_SP_STAGE, 0};
    fp_tx_op *s = fpi_tx_emit(dl, FP_TX_SEND, p, 0, FP_F32, 4);
    s->peer = 1 - p, s->src = (fp_tx_ref){FP_SP_FROM, 0}, s->full_off = 4 * p;
    fpi_tx_region_add(dl, true, p, 0, 16, 16, 4 * (1 - p), FP_F32); /* the peer's elements (X7) */
    fpi_tx_region_add(dl, false, p, 0, 0, 16, 4 * p, FP_F32);
  }
  dl->stage_bytes = fpi_alloc_array(a, 2, sizeof *dl->stage_bytes);
  dl->stage_bytes[0] = dl->stage_bytes[1] = 16;
  fpi_tx_finish(dl);
  expect(dl, "deadlock", "X4 deadlock");
  /* the same with the sends first: valid */
  for (int32_t p = 0; p < 2; p++) {
    fp_tx_op *ops = &dl->ops[dl->first[p]], s = ops[2];
    ops[2] = ops[1], ops[1] = ops[0], ops[0] = s;
  }
  expect(dl, NULL, "X4 sends first");
  /* X7: the same program where process 0 says it needs its own elements in
   * the bytes its peer's arrive in */
  dl->need[dl->need_first[0]].full_off = 0;
  expect(dl, "TO bytes [16,32) hold w elements [4,8) in fp32, need w elements [0,4) in fp32", "X7 other elements");
  dl->need[dl->need_first[0]].full_off = 4;
  expect(dl, NULL, "X7 restored");

  /* X4 as the executor runs: each process receives into TO, stages a local
   * piece and copies it on into TO (a staging read: it waits for every
   * send and recv posted so far, so for the recv), then sends. The copy
   * does not read the received bytes, but it waits for them all the same:
   * a deadlock (a verifier tracking only the bytes read would pass it) */
  const fp_tx_ref TO0 = {FP_SP_TO, 0}, TO16 = {FP_SP_TO, 16}, ST0 = {FP_SP_STAGE, 0}, FR0 = {FP_SP_FROM, 0};
  const fp_tx_ref NONE = {FP_SP_NONE, 0};
  for (int sends_first = 0; sends_first < 2; sends_first++) {
    fp_tx *w = hand(a, 2);
    for (int32_t p = 0; p < 2; p++) {
      if (sends_first) op(w, FP_TX_SEND, p, 1 - p, NONE, FR0);
      op(w, FP_TX_RECV, p, 1 - p, TO0, NONE);
      op(w, FP_TX_COPY, p, -1, ST0, FR0);
      op(w, FP_TX_COPY, p, -1, TO16, ST0);
      if (!sends_first) op(w, FP_TX_SEND, p, 1 - p, NONE, FR0);
      fpi_tx_region_add(w, true, p, 0, 0, 16, 4 * (1 - p), FP_F32); /* received: the peer's elements (X7) */
      fpi_tx_region_add(w, true, p, 0, 16, 16, 4 * p, FP_F32);      /* staged: its own */
      fpi_tx_region_add(w, false, p, 0, 0, 16, 4 * p, FP_F32);
    }
    fpi_tx_finish(w);
    expect(w, sends_first ? NULL : "deadlock", sends_first ? "X4 wait-all, sends first" : "X4 wait-all deadlock");
  }

  /* copies the executors run as one (fpi_tx_copy_run): those that continue
   * the previous one in both spaces, with its dtypes; a gap, another
   * dtype or another kind ends the run */
  {
    fp_tx *w = hand(a, 2);
    op(w, FP_TX_COPY, 0, -1, TO0, FR0);                                            /* 0: 4 f32 */
    op(w, FP_TX_COPY, 0, -1, TO16, (fp_tx_ref){FP_SP_FROM, 16});                   /* 1: continues 0 */
    op(w, FP_TX_COPY, 0, -1, (fp_tx_ref){FP_SP_TO, 36}, (fp_tx_ref){FP_SP_FROM, 32}); /* 2: a gap in TO */
    op(w, FP_TX_COPY, 0, -1, (fp_tx_ref){FP_SP_TO, 52}, (fp_tx_ref){FP_SP_FROM, 48})->sdtype = FP_BF16; /* 3 */
    op(w, FP_TX_SEND, 0, 1, NONE, FR0);                                            /* 4 */
    op(w, FP_TX_RECV, 1, 0, TO0, NONE);                                            /* 5 */
    fpi_tx_finish(w);
    int64_t n = 0;
    CHECK(fpi_tx_copy_run(w, 0, 5, &n) == 2 && n == 8, "copies 0 and 1 run as one of 8 (got n %lld)", (long long)n);
    CHECK(fpi_tx_copy_run(w, 2, 5, &n) == 3 && n == 4, "a gap ends the run");
    CHECK(fpi_tx_copy_run(w, 3, 5, &n) == 4 && n == 4, "another dtype, then a send, end the run");
    CHECK(fpi_tx_copy_run(w, 4, 5, &n) == 5 && n == 4, "a send runs alone");
    CHECK(fpi_tx_copy_run(w, 1, 2, &n) == 2 && n == 4, "hi bounds the run");
  }

  /* reshard transforms (docs/reshard.md "Transforms"): process 0's
   * prep_send turns its 4 f32 into one wire tensor of 4 bf16, sent to
   * process 1, whose finalize writes TO [0,16) from it. Then planted faults:
   * a finalize that leaves an element unwritten, a second one writing the
   * slice twice, a receive of another count than the send (X3 names the
   * transform), a finalize claiming other elements than its wire bytes carry
   * (X7), a transform op on a param without a transform (X1), a finalize
   * telling the transform the slice came from bf16 while prepare_send was
   * told fp32 (X7: the transform would read the wire as another dtype) */
  for (int fault = 0; fault < 7; fault++) {
    static const char *const want[] = {NULL,
                                       "never written",
                                       "written twice",
                                       "(transform 't': its prepare_send and prepare_recv give other wire tensors",
                                       "transform 't': finalize_recv's wire tensor 0 holds wire bytes [0,+8) of w "
                                       "elements [0,4) (transform 't' from fp32 to fp32), not the wire bytes [0,+8) of w "
                                       "elements [4,8) from fp32 to fp32",
                                       "param 'w' has no transform",
                                       "transform 't': finalize_recv's wire tensor 0 holds wire bytes [0,+8) of w "
                                       "elements [0,4) (transform 't' from fp32 to fp32), not the wire bytes [0,+8) of w "
                                       "elements [0,4) from bf16 to fp32"};
    fp_tx *w = hand(a, 2);
    static const char *names[] = {"t"};
    w->xf_names = names, w->nxf = 1, w->params[0].xf = fault == 5 ? -1 : 0;
    w->stage_bytes[0] = w->stage_bytes[1] = 256;
    fp_tx_wire wire = {FP_BF16, 4};
    fp_tx_op *o = op(w, FP_TX_PREP_SEND, 0, -1, ST0, FR0);
    fpi_tx_set_wires(o, fpi_tx_wires_add(w, &wire, 1), 1);
    op(w, FP_TX_SEND, 0, 1, NONE, ST0)->dtype = FP_BF16;
    o = op(w, FP_TX_RECV, 1, 0, ST0, NONE);
    o->dtype = FP_BF16, o->n = fault == 3 ? 3 : 4;
    o = op(w, FP_TX_FINALIZE, 1, -1, TO0, ST0);
    fpi_tx_set_wires(o, fpi_tx_wires_add(w, &wire, 1), 1);
    o->n = fault == 1 ? 3 : 4, o->full_off = fault == 4 ? 4 : 0, o->sdtype = fault == 6 ? FP_BF16 : FP_F32;
    if (fault == 2) *op(w, FP_TX_FINALIZE, 1, -1, TO0, ST0) = *o;
    fpi_tx_region_add(w, true, 1, 0, 0, 16, fault == 4 ? 4 : 0, FP_F32);
    fpi_tx_region_add(w, false, 0, 0, 0, 16, 0, FP_F32);
    fpi_tx_finish(w);
    char what[64];
    snprintf(what, sizeof what, "transform, fault %d", fault);
    expect(w, want[fault], what);
    if (fault == 0) { /* its JSON names the transform and the wire tensors, reads back, and the reader locates errors */
      char *js = NULL, *js2 = NULL;
      size_t n = 0, n2 = 0;
      FILE *f = open_memstream(&js, &n);
      fpi_tx_write_json(w, f);
      fclose(f);
      CHECK(strstr(js, "\"wire\":\"plain\",\"transform\":\"t\"") && strstr(js, "\"wires\":[[\"bf16\",4]]"),
            "the JSON names no transform or wires: %s", js);
      fp_src src = {"t.xfer.json", js, n};
      fpi_diag_init(&d, NULL);
      fp_tx *back = fpi_tx_read(a, &d, &src);
      CHECK(back != NULL, "transform transfer read back: %s", d.buf ? d.buf : "");
      fpi_diag_free(&d);
      if (back) {
        FILE *g = open_memstream(&js2, &n2);
        fpi_tx_write_json(back, g);
        fclose(g);
        CHECK(n == n2 && !memcmp(js, js2, n), "the read-back transform transfer writes different JSON");
        free(js2);
      }
      long at;
      char *e = edit(js, "\"wires\":[[\"bf16\",4]]", "\"wires\":[]", &at);
      if (e) expect_read(a, e, "/wires: expected at least one wire tensor", at + 8, "no wire tensors");
      free(e);
      e = edit(js, "\"wires\":[[\"bf16\",4]]", "\"wires\":[[\"bf16\"]]", &at);
      if (e) expect_read(a, e, "/wires/0: expected 2 elements (a wire tensor is [dtype, count]), got 1", at + 9, "short wire");
      free(e);
      e = edit(js, "\"wires\":[[\"bf16\",4]]", "\"wires\":[[\"bf16\",4]],\"aux\":[\"stage\",0]", &at);
      if (e) expect_read(a, e, "/procs/0/ops/0: a prep_send op has no aux operand", at + 27, "aux on a transform op");
      free(e);
      e = edit(js, "\"op\":\"send\"", "\"op\":\"send\",\"wires\":[[\"u8\",1]]", &at);
      if (e) expect_read(a, e, "/procs/0/ops/1: a send op has no wire tensors", at + 20, "wires on a send");
      free(e);
      e = edit(js, "\"transform\":\"t\"", "\"transform\":\"\"", &at);
      if (e) expect_read(a, e, "/transform: expected a transform's name", at + 12, "empty transform name");
      free(e);
      free(js);
    }
  }

  /* X5: staging written twice (an Isend could still be reading it) */
  {
    fp_tx *w = hand(a, 1);
    op(w, FP_TX_COPY, 0, -1, ST0, FR0);
    op(w, FP_TX_COPY, 0, -1, (fp_tx_ref){FP_SP_STAGE, 8}, FR0);
    op(w, FP_TX_COPY, 0, -1, TO0, ST0);
    fpi_tx_region_add(w, true, 0, 0, 0, 16, 0, FP_F32);
    fpi_tx_region_add(w, false, 0, 0, 0, 16, 0, FP_F32);
    fpi_tx_finish(w);
    expect(w, "staging is written once", "X5 staging written twice");
  }

  /* X5: process 1 forwards to 2 what it received from 0 (its send would
   * not wait for its recv) */
  {
    fp_tx *w = hand(a, 3);
    op(w, FP_TX_SEND, 0, 1, NONE, FR0);
    op(w, FP_TX_RECV, 1, 0, ST0, NONE);
    op(w, FP_TX_SEND, 1, 2, NONE, ST0);
    op(w, FP_TX_RECV, 2, 1, TO0, NONE);
    fpi_tx_region_add(w, true, 2, 0, 0, 16, 0, FP_F32);
    fpi_tx_region_add(w, false, 0, 0, 0, 16, 0, FP_F32);
    fpi_tx_finish(w);
    expect(w, "forwards nothing", "X5 forwarding");
  }

  /* the planner's located errors: another model, a param of another shape,
   * an arena past what a transfer's packed operands address */
  {
    fp_prog big = *B->prog;
    big.arena_bytes = (int64_t)1 << 58;
    fpi_diag_init(&d, NULL);
    CHECK(!fpi_reshard(a, A->prog, NULL, &big, NULL, &o, &d) && d.buf && strstr(d.buf, "less than 2^58 bytes"),
          "huge arena: %s", d.buf ? d.buf : "(accepted)");
    fpi_diag_free(&d);
  }
  {
    fp_prog to = *B->prog;
    to.model = "other";
    fpi_diag_init(&d, NULL);
    CHECK(!fpi_reshard(a, A->prog, NULL, &to, NULL, &o, &d) && d.buf && strstr(d.buf, "different models"),
          "another model: %s", d.buf ? d.buf : "(accepted)");
    fpi_diag_free(&d);
    fp_ir_param *ps = fpi_alloc_array(a, (size_t)to.nparams, sizeof *ps);
    memcpy(ps, B->prog->params, (size_t)to.nparams * sizeof *ps);
    to.model = B->prog->model, to.params = ps;
    ps[1].shape[0] += 1;
    fpi_diag_init(&d, NULL);
    CHECK(!fpi_reshard(a, A->prog, NULL, &to, NULL, &o, &d) && d.buf && strstr(d.buf, "has shape [21] here and [20]"),
          "another shape: %s", d.buf ? d.buf : "(accepted)");
    fpi_diag_free(&d);
    ps[1].shape[0] -= 1;
    ps[2].name = "renamed.weight";
    fpi_diag_init(&d, NULL);
    CHECK(!fpi_reshard(a, A->prog, NULL, &to, NULL, &o, &d) && d.buf && strstr(d.buf, "'renamed.weight' is not in") &&
              strstr(d.buf, "'fc1.weight' is not in"),
          "another name: %s", d.buf ? d.buf : "(accepted)");
    fpi_diag_free(&d);
    /* weights+optimizer: both plans hold AdamW state (the default) */
    fp_reshard_opts wo = {.what = "weights+optimizer"};
    fpi_diag_init(&d, NULL);
    fp_tx *wt = fpi_reshard(a, A->prog, NULL, B->prog, NULL, &wo, &d);
    CHECK(wt && !strcmp(wt->what, "weights+optimizer") && fpi_tx_verify(wt, &d),
          "weights+optimizer: %s", d.buf ? d.buf : "(refused)");
    fpi_diag_free(&d);
    fp_prog none = *B->prog, sgd = *B->prog;
    none.optim = FP_OPTIM_NONE;
    fpi_diag_init(&d, NULL);
    CHECK(!fpi_reshard(a, A->prog, NULL, &none, NULL, &wo, &d) && d.buf && strstr(d.buf, "holds no optimizer state"),
          "weights+optimizer to a plan without state: %s", d.buf ? d.buf : "(accepted)");
    fpi_diag_free(&d);
    sgd.optim = FP_OPTIM_SGD;
    fpi_diag_init(&d, NULL);
    CHECK(!fpi_reshard(a, A->prog, NULL, &sgd, NULL, &wo, &d) && d.buf &&
              strstr(d.buf, "this plan holds sgd state and <from> holds adamw"),
          "weights+optimizer between optimizers: %s", d.buf ? d.buf : "(accepted)");
    fpi_diag_free(&d);
  }

  /* reading a saved transfer back: the same text; a bad member is located */
  {
    char *js = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&js, &n);
    fpi_tx_write_json(t, f);
    fclose(f);
    fp_src s = {"t.xfer.json", js, n};
    fpi_diag_init(&d, NULL);
    fp_tx *back = fpi_tx_read(a, &d, &s);
    CHECK(back != NULL, "read back: %s", d.buf ? d.buf : "");
    fpi_diag_free(&d);
    if (back) {
      char *js2 = NULL;
      size_t n2 = 0;
      FILE *g = open_memstream(&js2, &n2);
      fpi_tx_write_json(back, g);
      fclose(g);
      CHECK(n == n2 && !memcmp(js, js2, n), "the read-back transfer writes different JSON");
      free(js2);
    }
    /* the reader's own errors, each located at its byte */
    {
      long at;
      char *e = edit(js, "\"processes\":", "\"processes\";", &at);
      if (e) expect_read(a, e, "/: invalid JSON: expected ':' after member name, got ';'", at + 11, "syntax");
      free(e);
      e = edit(js, "\"what\":", "\"bogus\":1,\"what\":", &at);
      if (e) expect_read(a, e,
                         "/bogus: unknown member 'bogus' (expected one of: format, model, what, from, to, processes, "
                         "figures, params, procs)",
                         at, "unknown member");
      free(e);
      e = edit(js, "\"what\":", "\"model\":\"x\",\"what\":", &at);
      if (e) expect_read(a, e, "/model: duplicate member 'model'", at, "duplicate member");
      free(e);
      e = edit(js, "\"param\":0,", "\"param\":99999,", &at);
      if (e) expect_read(a, e, "/procs/0/ops/0/param: 99999 is not a param", at + 8, "param out of range");
      free(e);
      e = edit(js, "\"processes\":", "\"processes\":2.5,\"x\":", &at);
      if (e) expect_read(a, e, "/processes: expected an integer, got a number with a fraction", at + 12, "fraction");
      free(e);
      e = edit(js, "\"op\":\"", "\"op\":\"teleport", &at);
      if (e) expect_read(a, e, "/op: unknown op 'teleport", at + 5, "unknown op");
      free(e);
      /* fixed arrays: too few elements (at the array), too many (at the first extra) */
      e = edit(js, "\"need\":[[", "\"need\":[[0,0,0,0],[", &at);
      CHECK(e, "the edit applies");
      if (e) expect_read(a, e, "/need/0: expected 5 elements (a need region is [param, byte offset, bytes, first element, dtype] "
                         "or an optimizer state's [param, byte offset, bytes, first element, dtype, plane]), got 4",
                         at + 8, "need region too short");
      free(e);
      /* an optimizer state's plane: 1 to 15 on a need region (its 6th element, nothing after it) and on an op */
      e = edit(js, "\"need\":[[", "\"need\":[[0,0,4,0,\"fp32\",0],[", &at);
      CHECK(e, "the edit applies");
      if (e) expect_read(a, e, "/need/0/5: 0 is outside [1, 15]", at + 24, "need region of plane 0");
      free(e);
      e = edit(js, "\"need\":[[", "\"need\":[[0,0,4,0,\"fp32\",1,2],[", &at);
      CHECK(e, "the edit applies");
      if (e) expect_read(a, e, "/need/0/6: expected 6 elements (a need region is", at + 26, "need region too long");
      free(e);
      e = edit(js, "\"full_off\":0", "\"full_off\":0,\"plane\":16", &at);
      CHECK(e, "the edit applies");
      if (e) expect_read(a, e, "/plane: 16 is outside [1, 15]", at + 21, "op of plane 16");
      free(e);
      e = edit(js, "\"dst\":[\"to\",0]", "\"dst\":[\"to\",0,7]", &at);
      CHECK(e, "the edit applies");
      if (e) expect_read(a, e, "/dst/2: expected 2 elements (an operand is [space, byte offset]), got more", at + 14, "operand too long");
      free(e);
      e = edit(js, "\"dst\":[\"to\",0]", "\"dst\":[\"to\"]", &at);
      CHECK(e, "the edit applies");
      if (e) expect_read(a, e, "/dst: expected 2 elements (an operand is [space, byte offset]), got 1", at + 6, "operand too short");
      free(e);
      /* an integer past 64 bits, a member of the wrong type */
      e = edit(js, "\"n\":", "\"n\":9223372036854775808,\"x\":", &at);
      CHECK(e, "the edit applies");
      if (e) expect_read(a, e, "/n: 9223372036854775808 does not fit in 64 bits", at + 4, "64 bits");
      free(e);
      e = edit(js, "\"figures\":", "\"figures\":[],\"x\":", &at);
      CHECK(e, "the edit applies");
      if (e) expect_read(a, e, "/figures: expected an object, got an array", at + 10, "figures an array");
      free(e);
      /* bad UTF-8 in a name (the text is checked whole first), an empty file */
      e = edit(js, "\"model\":\"", "\"model\":\"\xff", &at);
      CHECK(e, "the edit applies");
      if (e) expect_read(a, e, "/model: invalid UTF-8 (byte 0xff)", at + 9, "UTF-8");
      free(e);
      expect_read(a, " \n", "/: empty file: expected a JSON value", 2, "empty");
      size_t n0 = strlen(js);
      e = malloc(n0 + 3);
      snprintf(e, n0 + 3, "%s x", js);
      expect_read(a, e, "text after the transfer's object", (long)n0 + 1, "trailing text");
      free(e);
      e = strdup(js);
      e[n0 / 2] = 0; /* cut in the middle */
      expect_read(a, e, ": error: ", -1, "cut short");
      free(e);
    }
    expect_read(a, "{\"format\":\"flexplan.xfer.v1\"}", "/: missing required member 'model'", 0, "missing member");
    expect_read(a, "{\"format\":\"flexplan.plan.v1\"}", "/format: expected \"flexplan.xfer.v1\"", 10, "a plan");
    expect_read(a, "{\"format\":\"flexplan.xfer.v1\",\"model\":\"a\\q\"}", "/model: invalid JSON: invalid escape sequence in string", 39, "escape");
    expect_read(a, "{\"format\":\"flexplan.xfer.v1\",\"model\":\"a\\u0000\"}", "/model: \\u0000 (NUL) is not allowed in strings", 39, "NUL");
    /* the first recv's count off by one: the verifier's X3 on a loaded file */
    char *bad = strdup(js), *at = strstr(bad, "{\"op\":\"recv\"");
    at = at ? strstr(at, "\"n\":") : NULL;
    if (at) at[4] = at[4] == '9' ? '1' : (char)(at[4] + 1);
    fp_src s2 = {"t.xfer.json", bad, n};
    fpi_diag_init(&d, NULL);
    CHECK(at && !fpi_tx_read(a, &d, &s2) && d.buf && strstr(d.buf, "matching send") &&
              strstr(d.buf, "t.xfer.json:") && strstr(d.buf, ": error: /procs/"),
          "tampered count (located at the op): %s",
          d.buf ? d.buf : "(accepted)");
    fpi_diag_free(&d);
    /* a member of the wrong type, located */
    char *bad2 = malloc(n + 8), *pr = strstr(js, "\"processes\":");
    if (pr) {
      const char *rest = pr + 12;
      while (*rest >= '0' && *rest <= '9') rest++;
      sprintf(bad2, "%.*s\"processes\":\"x\"%s", (int)(pr - js), js, rest);
    }
    fp_src s3 = {"t.xfer.json", bad2, strlen(bad2)};
    fpi_diag_init(&d, NULL);
    CHECK(pr && !fpi_tx_read(a, &d, &s3) && d.buf && strstr(d.buf, "t.xfer.json:1:") &&
              strstr(d.buf, "/processes: expected an integer"),
          "wrong type: %s", d.buf ? d.buf : "(accepted)");
    fpi_diag_free(&d);
    free(bad);
    free(bad2);
    free(js);
  }

  /* X1/X2 with quantizes into TO (a TO param kept as MXFP8: 64 elements at
   * TO 0..64, quantized as two slices of one block each, their scales at
   * TO 96 and 97): a quantize's scales count as TO writes - covering the
   * need, or written twice, outside every need region, into FROM (X2 looked
   * at the elements only, X1 at dst only) */
  for (int c = 0; c < 4; c++) {
    fp_tx *w = hand(a, 1);
    w->params[0].numel = 64, w->from_arena = 256, w->to_arena = 128;
    static const int64_t aux1[] = {97, 96, 80, 97};
    for (int k = 0; k < 2; k++) {
      fp_tx_op *q = fpi_tx_emit(w, FP_TX_QUANT, 0, 0, FP_E4M3, 32);
      q->sdtype = FP_F32, q->full_off = 32 * k, q->src = (fp_tx_ref){FP_SP_FROM, 128 * k},
      q->dst = (fp_tx_ref){FP_SP_TO, 32 * k};
      q->aux = (fp_tx_ref){c == 3 && k ? FP_SP_FROM : FP_SP_TO, k ? aux1[c] : 96};
    }
    fpi_tx_region_add(w, true, 0, 0, 0, 64, 0, FP_E4M3);
    fpi_tx_region_add(w, true, 0, 0, 96, 2, 0, FP_E8M0);
    fpi_tx_region_add(w, false, 0, 0, 0, 256, 0, FP_F32);
    fpi_tx_finish(w);
    static const char *const want[] = {NULL, "a byte written twice", "writes TO bytes from 80 (op 1) that no need",
                                       "writes into FROM's arena"};
    static const char *const what[] = {"X2 quantizes into TO", "X2 a scale written twice", "X2 a scale outside the need",
                                       "X1 scales into FROM"};
    expect(w, want[c], what[c]);
  }

  /* X7 and MXFP8 spans: a quantize of elements [5,40) of w (64 elements,
   * two blocks) takes block 0's scale over [5,32) only. Dequantizing those
   * e4m3 elements takes exactly those scales (c == 0), not those of a
   * quantize of [0,40) (c == 1: block 0's scale over [0,32): other values).
   * Then the max of two scales of block 0 is the scale over the union of
   * their elements: [0,4) and [4,32) give block 0's own (c == 2, valid),
   * [0,4) and [8,12) no range (c == 3). And a dequantize of block 0 whose
   * two halves were quantized apart, at two scales (c == 4) */
  for (int c = 0; c < 5; c++) {
    fp_tx *w = hand(a, 1);
    w->params[0].numel = 64, w->params[0].mxfp8 = c < 2 || c == 4, w->from_arena = w->to_arena = w->stage_bytes[0] = 256;
    fpi_tx_region_add(w, false, 0, 0, 0, 256, 0, FP_F32);
    if (c == 4) {
      for (int k = 0; k < 2; k++) {
        fp_tx_op *q = fpi_tx_emit(w, FP_TX_QUANT, 0, 0, FP_E4M3, 16);
        q->sdtype = FP_F32, q->full_off = 16 * k, q->src = (fp_tx_ref){FP_SP_FROM, 64 * k};
        q->dst = (fp_tx_ref){FP_SP_STAGE, 16 * k}, q->aux = (fp_tx_ref){FP_SP_STAGE, 64 + k};
      }
      fp_tx_op *q = fpi_tx_emit(w, FP_TX_DEQUANT, 0, 0, FP_F32, 32);
      q->sdtype = FP_E4M3, q->full_off = 0, q->src = (fp_tx_ref){FP_SP_STAGE, 0};
      q->aux = (fp_tx_ref){FP_SP_STAGE, 64}, q->dst = (fp_tx_ref){FP_SP_TO, 0};
      fpi_tx_region_add(w, true, 0, 0, 0, 128, 0, FP_F32);
    } else if (c < 2) {
      for (int k = 0; k < 2; k++) {
        fp_tx_op *q = fpi_tx_emit(w, FP_TX_QUANT, 0, 0, FP_E4M3, k ? 40 : 35);
        q->sdtype = FP_F32, q->full_off = k ? 0 : 5, q->src = (fp_tx_ref){FP_SP_FROM, k ? 0 : 20};
        q->dst = (fp_tx_ref){FP_SP_STAGE, 128 * k}, q->aux = (fp_tx_ref){FP_SP_STAGE, 64 + 128 * k};
      }
      fp_tx_op *q = fpi_tx_emit(w, FP_TX_DEQUANT, 0, 0, FP_F32, 35);
      q->sdtype = FP_E4M3, q->full_off = 5, q->src = (fp_tx_ref){FP_SP_STAGE, 0};
      q->aux = (fp_tx_ref){FP_SP_STAGE, c ? 192 : 64}, q->dst = (fp_tx_ref){FP_SP_TO, 20};
      fpi_tx_region_add(w, true, 0, 0, 20, 140, 5, FP_F32);
    } else {
      for (int k = 0; k < 2; k++) {
        fp_tx_op *q = fpi_tx_emit(w, FP_TX_SCALES, 0, 0, FP_E8M0, k ? (c == 2 ? 28 : 4) : 4);
        q->sdtype = FP_F32, q->full_off = k ? (c == 2 ? 4 : 8) : 0, q->src = (fp_tx_ref){FP_SP_FROM, 4 * q->full_off};
        q->dst = (fp_tx_ref){FP_SP_STAGE, k};
      }
      fp_tx_op *m = fpi_tx_emit(w, FP_TX_MAX, 0, 0, FP_E8M0, 1);
      m->src = (fp_tx_ref){FP_SP_STAGE, 0}, m->aux = (fp_tx_ref){FP_SP_STAGE, 1}, m->dst = (fp_tx_ref){FP_SP_TO, 96};
      fpi_tx_region_add(w, true, 0, 0, 96, 1, 0, FP_E8M0);
    }
    fpi_tx_finish(w);
    static const char *const want[] = {
        NULL,
        "dequantize_mxfp8): reads the scale of w block 0 at stage+192, which holds MXFP8 scales of w blocks [0,2) over "
        "elements [0,40) only; its MXFP8 elements were quantized at the scale of elements [5,32)",
        NULL,
        "takes the max of MXFP8 scales of w blocks [0,1) over elements [0,4) only and MXFP8 scales of w blocks [0,1) over "
        "elements [8,12) only at byte 0: not two scales of one block of w over elements that make one range",
        "dequantizes w block 0 whose MXFP8 elements were quantized at two scales (over elements [0,16) and [16,32))"};
    static const char *const what[] = {"X7 dequantize at its own scales", "X7 dequantize at another slice's scales",
                                       "X7 max of scales making a block", "X7 max of scales making no range",
                                       "X7 dequantize of a block quantized in two halves"};
    expect(w, want[c], what[c]);
  }

  /* X7 and a quantize's scales: a block's scale is the max over all its
   * elements, so a quantize that reads another param's elements (c == 2) or
   * bytes nothing wrote (c == 1) writes a scale that is not its param's,
   * though the elements kept from it are. w's elements [0,8) copied into
   * staging, then [8,16) of w (c == 0, valid) or of v (c == 2) beside them,
   * the 16 quantized in staging, the first 8 and the scale into TO */
  for (int c = 0; c < 3; c++) {
    fp_tx *w = hand(a, 1);
    w->stage_bytes[0] = 128;
    w->params = fpi_alloc_array(a, 2, sizeof *w->params);
    w->nparams = 2;
    w->params[0] = (fp_tx_param){"w", 16, false, false, -1};
    w->params[1] = (fp_tx_param){"v", 16, false, false, -1};
    for (int h = 0; h < (c == 1 ? 1 : 2); h++) {
      fp_tx_op *k = fpi_tx_emit(w, FP_TX_COPY, 0, h && c == 2 ? 1 : 0, FP_F32, 8);
      k->sdtype = FP_F32, k->full_off = 8 * h, k->src = (fp_tx_ref){FP_SP_FROM, 32 * h}, k->dst = (fp_tx_ref){FP_SP_STAGE, 32 * h};
    }
    fp_tx_op *q = fpi_tx_emit(w, FP_TX_QUANT, 0, 0, FP_E4M3, 16);
    q->sdtype = FP_F32, q->full_off = 0, q->src = (fp_tx_ref){FP_SP_STAGE, 0}, q->dst = (fp_tx_ref){FP_SP_STAGE, 64};
    q->aux = (fp_tx_ref){FP_SP_TO, 48};
    fp_tx_op *k = fpi_tx_emit(w, FP_TX_COPY, 0, 0, FP_E4M3, 8);
    k->sdtype = FP_E4M3, k->full_off = 0, k->src = (fp_tx_ref){FP_SP_STAGE, 64}, k->dst = (fp_tx_ref){FP_SP_TO, 0};
    fpi_tx_region_add(w, true, 0, 0, 0, 8, 0, FP_E4M3);
    fpi_tx_region_add(w, true, 0, 0, 48, 1, 0, FP_E8M0);
    fpi_tx_region_add(w, false, 0, 0, 0, 32, 0, FP_F32);
    fpi_tx_region_add(w, false, 0, c == 2 ? 1 : 0, 32, 32, 8, FP_F32);
    fpi_tx_finish(w);
    static const char *const want[] = {NULL, "no earlier op", "v elements"};
    static const char *const what[] = {"X7 a quantize over its param's elements", "X5 a quantize's block over bytes nothing wrote",
                                       "X7 a quantize's block over another param"};
    expect(w, want[c], what[c]);
  }

  /* X1/X5 with a split block's exchange, on one process: the scales of its
   * two halves into staging, their max into TO's scale (TO 48), each half
   * quantized at it into TO 0..16 (valid); then a wrong dtype for each new
   * op, the quantize reading the scale before the max writes it, and the
   * max reading past the staging */
  for (int c = 0; c < 6; c++) {
    fp_tx *w = hand(a, 1);
    for (int k = 0; k < 2; k++) {
      fp_tx_op *o = fpi_tx_emit(w, FP_TX_SCALES, 0, 0, c == 1 && k ? FP_F32 : FP_E8M0, 8);
      o->sdtype = FP_F32, o->full_off = 8 * k, o->src = (fp_tx_ref){FP_SP_FROM, 32 * k}, o->dst = (fp_tx_ref){FP_SP_STAGE, k};
    }
    fp_tx_op *m = fpi_tx_emit(w, FP_TX_MAX, 0, 0, FP_E8M0, 1);
    m->sdtype = c == 2 ? FP_F32 : FP_E8M0, m->dst = (fp_tx_ref){FP_SP_TO, 48}, m->src = (fp_tx_ref){FP_SP_STAGE, 0},
    m->aux = (fp_tx_ref){FP_SP_STAGE, c == 5 ? 32 : 1};
    for (int k = 0; k < 2; k++) {
      fp_tx_op *q = fpi_tx_emit(w, FP_TX_QUANT_AT, 0, 0, c == 3 && k ? FP_BF16 : FP_E4M3, 8);
      q->sdtype = FP_F32, q->full_off = 8 * k, q->src = (fp_tx_ref){FP_SP_FROM, 32 * k}, q->dst = (fp_tx_ref){FP_SP_TO, 8 * k},
      q->aux = (fp_tx_ref){FP_SP_TO, 48};
    }
    if (c == 4) { /* the max after the first quantize */
      fp_tx_op tmp = w->ops[2];
      w->ops[2] = w->ops[3], w->ops[3] = tmp;
    }
    fpi_tx_region_add(w, true, 0, 0, 0, 16, 0, FP_E4M3);
    fpi_tx_region_add(w, true, 0, 0, 48, 1, 0, FP_E8M0);
    fpi_tx_region_add(w, false, 0, 0, 0, 64, 0, FP_F32);
    fpi_tx_finish(w);
    static const char *const want[] = {NULL, "takes fp32 from fp32: expected e8m0 scales", "takes the max of fp32",
                                       "quantizes into bf16 from fp32: expected e4m3",
                                       "reads to bytes [48, 49) no earlier op", "aux stage+32 ..+1 bytes lies outside"};
    static const char *const what[] = {"a split block's exchange", "X1 scales into fp32", "X1 max of fp32",
                                       "X1 quantize_at into bf16", "X5 quantize_at before the max", "X1 max past staging"};
    expect(w, want[c], what[c]);
  }

  /* the NCCL backend's segments: cut before each op that waits (reads
   * staging or TO), never before a send, a recv or a local op reading FROM */
  {
    fp_tx *w = hand(a, 2);
    fp_tx_ref st0 = {FP_SP_STAGE, 0}, st16 = {FP_SP_STAGE, 16}, fr = {FP_SP_FROM, 0}, to = {FP_SP_TO, 0}, none = {0};
    op(w, FP_TX_COPY, 0, -1, st0, fr);    /* 0: reads FROM */
    op(w, FP_TX_SEND, 0, 1, none, st0);   /* 1 */
    op(w, FP_TX_RECV, 0, 1, st16, none);  /* 2 */
    op(w, FP_TX_COPY, 0, -1, to, st16);   /* 3: reads staging: waits */
    op(w, FP_TX_SEND, 0, 1, none, to);    /* 4 */
    op(w, FP_TX_COPY, 0, -1, to, fr);     /* 5: reads FROM */
    op(w, FP_TX_COPY, 0, -1, st0, to);    /* 6: reads TO: waits */
    static const int32_t want[] = {3, 6, 7};
    int32_t k = 0;
    for (int32_t i = 0, end; i < 7; i = end, k++) {
      end = fpi_tx_segment_end(w, i, 7);
      CHECK(k < 3 && end == want[k], "segment %d of the hand-built process ends at %d", k, end);
    }
    CHECK(k == 3, "%d segments, expected 3", k);
  }

  /* X6: processes that repeat another's program (fp_tx.same). Process 0
   * copies its FROM bytes into TO; the others repeat it (valid), or break
   * one condition each */
  for (int c = 0; c < 6; c++) {
    fp_tx *w = hand(a, 3);
    if (c == 5) w->to_world = 2; /* process 2 holds no TO rank */
    op(w, FP_TX_COPY, 0, -1, TO0, FR0);
    if (c == 2) op(w, FP_TX_SEND, 0, 2, NONE, FR0), op(w, FP_TX_RECV, 2, 0, TO16, NONE);
    if (c == 1) op(w, FP_TX_COPY, 1, -1, TO16, FR0);
    fpi_tx_region_add(w, true, 0, 0, 0, 16, 0, FP_F32);
    fpi_tx_region_add(w, false, 0, 0, 0, 16, 0, FP_F32);
    if (c == 1) fpi_tx_region_add(w, true, 1, 0, 16, 16, 0, FP_F32), fpi_tx_region_add(w, false, 1, 0, 0, 16, 0, FP_F32);
    if (c == 2) fpi_tx_region_add(w, true, 2, 0, 16, 16, 0, FP_F32);
    fpi_tx_finish(w);
    w->same = fpi_alloc_array(a, 3, sizeof *w->same);
    static const int32_t same1[] = {0, 0, 0, 1, 0, 0}, same2[] = {0, -1, -1, 0, 1, 0};
    w->same[0] = -1, w->same[1] = c == 3 ? 1 : same1[c], w->same[2] = same2[c];
    static const char *const want[] = {NULL, "has ops or needs of its own", "with sends or recvs",
                                       "repeats no other process", "itself repeats another", "other roles"};
    expect(w, want[c], c == 0 ? "X6 shared program" : want[c]);
  }

  /* a compiled transfer with shared programs (hybrid 2 x 3 -> 2 x 2:
   * processes 2 and 3 repeat 0 and 1) writes "same", reads back equal, and
   * a tampered "same" is located at /procs/p/same */
  {
    fp_plan *H6 = compile("hybrid", 6), *H4 = compile("hybrid", 4);
    fp_reshard_opts ho = {.what = "weights"};
    fpi_diag_init(&d, NULL);
    fp_tx *h = H6 && H4 ? fpi_reshard(a, H6->prog, NULL, H4->prog, NULL, &ho, &d) : NULL;
    CHECK(h && h->same && h->same[2] == 0 && h->same[3] == 1 && h->same[0] < 0 && h->first[2] == h->first[3],
          "hybrid 6 -> 4: processes 2 and 3 should repeat 0 and 1: %s", d.buf ? d.buf : "");
    fpi_diag_free(&d);
    /* every TO byte is copied locally, by each process that runs a program */
    int64_t needed = 0;
    for (int64_t p = 0; h && p < h->nprocs; p++)
      for (int32_t k = h->need_first[fpi_tx_prog(h, p)]; k < h->need_first[fpi_tx_prog(h, p) + 1]; k++)
        needed += h->need[k].bytes;
    CHECK(h && h->local_bytes == needed && h->wire_bytes == 0, "local bytes %lld, the TO bytes %lld",
          h ? (long long)h->local_bytes : -1LL, (long long)needed);
    char *js = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&js, &n);
    if (h) fpi_tx_write_json(h, f);
    fclose(f);
    fp_src s = {"t.xfer.json", js, n};
    fpi_diag_init(&d, NULL);
    fp_tx *back = h ? fpi_tx_read(a, &d, &s) : NULL;
    CHECK(back && back->same[2] == 0 && back->same[3] == 1 && back->same[1] < 0, "read back: %s", d.buf ? d.buf : "");
    fpi_diag_free(&d);
    char *bad = js ? edit(js, "\"same\":1", "\"same\":3", NULL) : NULL;
    if (bad) expect_read(a, bad, "/procs/3/same: repeats no other process", -1, "same pointing at itself");
    CHECK(bad != NULL, "no \"same\":1 in the JSON");
    free(bad);
    free(js);
    fp_plan_free(H6);
    fp_plan_free(H4);
  }

  /* MXFP8 blocks of a slice: aligned to the full param */
  CHECK(fpi_tx_head(0, 100) == 0 && fpi_tx_nscales(0, 100) == 4, "aligned slice");
  CHECK(fpi_tx_head(65, 65) == 31 && fpi_tx_nscales(65, 65) == 3, "slice [65,130): head 31, then 32 and 2");
  CHECK(fpi_tx_head(33, 5) == 5 && fpi_tx_nscales(33, 5) == 1, "a slice inside one block");

  fpi_arena_free(a);
  fp_plan_free(A);
  fp_plan_free(B);
  printf("%s: %d failed check(s)\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
