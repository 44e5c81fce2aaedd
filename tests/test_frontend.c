/* test_frontend.c - unit tests of the front end: base/json.c (strict
 * parse, fpi_json_locate, accessors), planner/model.c and planner/spec.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "planner/front.h"
#include "base/json.h"

#include <json-c/json.h> /* the reference the parser is compared with */

typedef struct fx {
  fp_arena *a;
  fp_diag d;
  fp_src src;
  fp_jctx c;
} fx;

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  f->a = fpi_arena_new();
  fpi_diag_init(&f->d, NULL);
  f->c = (fp_jctx){f->a, &f->d, &f->src, NULL};
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  fpi_diag_free(&f->d);
  fpi_arena_free(f->a);
  free(f);
  return 0;
}

static void set_text(fx *f, const char *text) {
  f->src.path = "in.json";
  f->src.text = fpi_strdup(f->a, text);
  f->src.len = strlen(text);
}

/* parse text; NULL on error (the message is in f->d.buf) */
static const fp_jv *parse(fx *f, const char *text) {
  set_text(f, text);
  return fpi_json_parse(&f->c);
}

/* the first diagnostic line starts with want and contains frag */
static void assert_diag(fx *f, const char *want_prefix, const char *frag) {
  assert_non_null(f->d.buf);
  if (strncmp(f->d.buf, want_prefix, strlen(want_prefix)) || !strstr(f->d.buf, frag)) {
    fprintf(stderr, "got: %s\nwant prefix: %s\nwant fragment: %s\n", f->d.buf, want_prefix, frag);
    fail();
  }
}

static void reset_diag(fx *f) {
  fpi_diag_free(&f->d);
  fpi_diag_init(&f->d, NULL);
}

/* ---- fpi_json_locate ----------------------------------------------------------- */
static void check_loc(fx *f, const char *ptr, const char *want_at, bool want_exact) {
  bool exact;
  size_t off = fpi_json_locate(&f->src, ptr, &exact);
  assert_true(off <= f->src.len);
  if (strncmp(f->src.text + off, want_at, strlen(want_at)) || exact != want_exact) {
    fprintf(stderr, "ptr %s: at %zu '%.20s' exact=%d; want '%s' exact=%d\n", ptr, off, f->src.text + off,
            exact, want_at, want_exact);
    fail();
  }
}

static void test_locate(void **state) {
  fx *f = *state;
  set_text(f,
           " {\"a~b\": {\"c/d\": [10, {\"\\u00e9\": [true, \"x\"]}, [ [5] ] ]},\n"
           "  \"e\\u00e9\\\"\": 7, \"k\": {\"\\ud83d\\ude00\": 3}, \"\": {\"\": 9},\n"
           "  \"s\\/\\n\": [], \"z\": {\"q\": [1,2]}, \"z2\": \"}]\\\"\"}");
  check_loc(f, "", "{\"a~b\"", true);
  check_loc(f, "/a~0b", "{\"c/d\"", true);
  check_loc(f, "/a~0b/c~1d", "[10,", true);
  check_loc(f, "/a~0b/c~1d/0", "10,", true);
  check_loc(f, "/a~0b/c~1d/1/\xc3\xa9/1", "\"x\"", true);
  check_loc(f, "/a~0b/c~1d/2/0/0", "5]", true);
  check_loc(f, "/e\xc3\xa9\"", "7,", true);
  check_loc(f, "/k/\xf0\x9f\x98\x80", "3}", true);
  check_loc(f, "/", "{\"\": 9}", true);
  check_loc(f, "//", "9}", true);
  check_loc(f, "/s~1\n", "[]", true);
  check_loc(f, "/z2", "\"}]", true);
  check_loc(f, "/z/q/1", "2]", true);
  /* missing -> nearest ancestor, exact = false */
  check_loc(f, "/a~0b/missing", "{\"c/d\"", false);
  check_loc(f, "/a~0b/c~1d/9", "[10,", false);
  check_loc(f, "/a~0b/c~1d/01", "[10,", false);
  check_loc(f, "/a~0b/c~1d/-", "[10,", false);
  check_loc(f, "/a~0b/c~1d/0/x", "10,", false);
  check_loc(f, "/a~0b/c~1d/99999999999999999999999", "[10,", false);
  check_loc(f, "/s~1\n/0", "[]", false);
  check_loc(f, "/nope/deeper", "{\"a~b\"", false);
  check_loc(f, "no-slash", "{\"a~b\"", false);
  check_loc(f, "/a~b", "{\"c/d\"", true); /* "~b" is no escape: taken literally */
}

/* garbage texts and pointers: any answer within the text, never a crash */
static void test_locate_fuzz(void **state) {
  fx *f = *state;
  static const char alphabet[] = "{}[]\":,\\ ab01u~/-e.\n";
  static const char *const ptrs[] = {"", "/", "/a", "/a/0", "/0/1/2", "/b/~0/~1", "/a/b/c/d", "//", "/0"};
  uint64_t x = 12345;
  char text[64];
  for (int it = 0; it < 20000; it++) {
    int n = (int)(x % 40);
    for (int k = 0; k < n; k++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      text[k] = alphabet[(x >> 33) % (sizeof alphabet - 1)];
    }
    text[n] = 0;
    fp_src s = {"fuzz", text, (size_t)n};
    for (size_t p = 0; p < sizeof ptrs / sizeof *ptrs; p++) {
      bool exact;
      size_t off = fpi_json_locate(&s, ptrs[p], &exact);
      assert_true(off <= (size_t)n);
    }
    /* the strict parse and its error path must survive it too */
    set_text(f, text);
    (void)fpi_json_parse(&f->c);
    reset_diag(f);
    x = x * 6364136223846793005ull + 1442695040888963407ull;
  }
  bool exact;
  assert_int_equal(fpi_json_locate(NULL, "/a", &exact), 0);
  fp_src empty = {"e", "", 0};
  assert_int_equal(fpi_json_locate(&empty, "/a", &exact), 0);
  assert_false(exact);
}

static void test_ptr_build(void **state) {
  fx *f = *state;
  assert_string_equal(fpi_ptr_key(f->a, "/x", "a/b~c"), "/x/a~1b~0c");
  assert_string_equal(fpi_ptr_key(f->a, "", ""), "/");
  assert_string_equal(fpi_ptr_idx(f->a, "/m", 12), "/m/12");
  /* a built pointer finds its member again */
  set_text(f, "{\"a/b~c\": [0, {\"\": 5}]}");
  check_loc(f, fpi_ptr_key(f->a, fpi_ptr_idx(f->a, fpi_ptr_key(f->a, "", "a/b~c"), 1), ""), "5}", true);
}

/* ---- strict parse -------------------------------------------------------------- */
/* v (our document) holds what o (json-c's parse of the same text) holds:
 * types, values, doubles' text, uint64 above INT64_MAX, strings' bytes,
 * members in document order and found by fpi_j_get (through the index past
 * FP_JV_LINEAR members) */
static bool same_as_jsonc(const fp_jv *v, json_object *o) {
  switch (json_object_get_type(o)) {
    case json_type_null: return fpi_jv_type(v) == FP_JNULL;
    case json_type_boolean: return fpi_jv_is(v, FP_JBOOL) && v->b == json_object_get_boolean(o);
    case json_type_int:
      if (!fpi_jv_is(v, FP_JINT)) return false;
      if (v->big) return json_object_get_uint64(o) == v->u && json_object_get_int64(o) == INT64_MAX;
      return json_object_get_int64(o) == v->i && (v->i < 0 || json_object_get_uint64(o) == (uint64_t)v->i);
    case json_type_double:
      return fpi_jv_is(v, FP_JDOUBLE) && memcmp(&v->d, &(double){json_object_get_double(o)}, sizeof v->d) == 0 &&
             strlen(v->text) == v->n && !strcmp(v->text, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    case json_type_string:
      return fpi_jv_is(v, FP_JSTRING) && v->n == (size_t)json_object_get_string_len(o) &&
             memcmp(v->s, json_object_get_string(o), v->n) == 0 && v->s[v->n] == 0;
    case json_type_array:
      if (!fpi_jv_is(v, FP_JARRAY) || v->n != json_object_array_length(o)) return false;
      for (size_t k = 0; k < v->n; k++)
        if (!same_as_jsonc(&v->elems[k], json_object_array_get_idx(o, k))) return false;
      return true;
    case json_type_object: {
      if (!fpi_jv_is(v, FP_JOBJECT) || v->n != (size_t)json_object_object_length(o)) return false;
      size_t k = 0;
      json_object_object_foreach(o, key, val) {
        const fp_jmem *m = &v->mems[k++];
        if (strcmp(m->key, key) || m->klen != strlen(key) || !same_as_jsonc(&m->val, val)) return false;
        if (!fpi_j_has(v, key) || fpi_j_get(v, key) != (m->val.type == FP_JNULL ? NULL : &m->val)) return false;
      }
      return !fpi_j_has(v, "no such key") && !fpi_j_get(v, "no such key");
    }
  }
  return false;
}

/* the document fpi_json_parse builds in its one pass holds what json-c's own
 * parser builds from the same (valid) text: types, values, doubles' text,
 * uint64 above INT64_MAX, escapes, nesting, null members */
static void test_parse_matches_jsonc(void **state) {
  fx *f = *state;
  static const char *const docs[] = {
      "{\"a\": 1, \"b\": -2, \"c\": 1.50, \"d\": -0.0, \"e\": 1e5, \"f\": -1.5E+3, \"g\": 1e-400}",
      "{\"big\": 18446744073709551615, \"max\": 9223372036854775807, \"min\": -9223372036854775808, \"z\": -0}",
      "{\"n18\": 999999999999999999, \"n19\": 1000000000000000000, \"m18\": -999999999999999999, \"b\": 9223372036854775808}",
      "{\"s\": \"x\\u00e9\\ud83d\\ude00\\n\\t\\\"\\\\\\/y\", \"e\": \"\", \"u\": \"\xc3\xa9\"}",
      "{\"t\": true, \"f\": false, \"n\": null, \"a\": [null, true, [], {}, [1, [2, [3]]]]}",
      "[{\"name\": \"layers.0\", \"params\": [{\"name\": \"w\", \"shape\": [16384, 1024]}]}, 3, \"x\"]",
      "\"just a string\"", "42", "-7.25", "true", "[]", "{}",
  };
  for (size_t k = 0; k < sizeof docs / sizeof *docs; k++) {
    reset_diag(f);
    const fp_jv *ours = parse(f, docs[k]);
    json_object *ref = json_tokener_parse(docs[k]);
    if (!ours) fprintf(stderr, "rejected: %s: %s", docs[k], f->d.buf ? f->d.buf : "");
    assert_non_null(ours);
    assert_non_null(ref);
    if (!same_as_jsonc(ours, ref)) fprintf(stderr, "differs: %s\njson-c: %s\n", docs[k], json_object_to_json_string(ref));
    assert_true(same_as_jsonc(ours, ref));
    json_object_put(ref);
  }
  /* objects past FP_JV_LINEAR members (found through their index), nested
   * in each other, with escaped keys */
  char big[40000];
  size_t o = 0;
  o += (size_t)snprintf(big + o, sizeof big - o, "{");
  for (int k = 0; k < 60; k++) {
    o += (size_t)snprintf(big + o, sizeof big - o, "%s\"k\\u00e9%d\": {", k ? ", " : "", k);
    for (int j = 0; j < 12 + k % 7; j++)
      o += (size_t)snprintf(big + o, sizeof big - o, "%s\"a%d\": [%d, \"s%d\", {\"x\": %d.5}]", j ? ", " : "", j, j, k, j);
    o += (size_t)snprintf(big + o, sizeof big - o, "}");
  }
  o += (size_t)snprintf(big + o, sizeof big - o, "}");
  reset_diag(f);
  const fp_jv *ours = parse(f, big);
  json_object *ref = json_tokener_parse(big);
  assert_non_null(ours);
  assert_non_null(ref);
  assert_true(same_as_jsonc(ours, ref));
  assert_int_equal(fpi_jv_len(ours), 60);
  assert_non_null(ours->index);
  json_object_put(ref);
}

static void test_syntax_errors(void **state) {
  fx *f = *state;
  static const struct {
    const char *text, *prefix, *frag;
  } cases[] = {
      {"{\"a\":1,}", "in.json:1:8: error: /: ", "invalid JSON"},
      {"{\"a\": [1,\n  2,,3]}", "in.json:2:5: error: /a/2: ", "invalid JSON"},
      {"{\"a\": {\"b\": NaN}}", "in.json:1:13: error: /a/b: ", "unexpected 'NaN'"},
      {"{\"a\": 'x'}", "in.json:1:7: error: /a: ", "double quotes"},
      {"{\"a\": [01]}", "in.json:1:8: error: /a/0: ", "leading zero"},
      {"{\"a\": 1.}", "in.json:1:7: error: /a: ", "decimal point"},
      {"{\"a\": 1} x", "in.json:1:10: error: /: ", "invalid JSON"},
      {"", "in.json:1:1: error: /: ", "empty file"},
      {"  \n ", "in.json:2:2: error: /: ", "empty file"},
      {"{\"a\": [1, 2", "in.json:1:12: error: /a", "the file ends early"},
      {"{\"a\": \"x\ty\"}", "in.json:1:9: error: /a: ", "control character"},
      {"{\"a\": \"\\ud800\"}", "in.json:1:8: error: /a: ", "surrogate"},
      {"{\"a\": 1e999}", "in.json:1:7: error: /a: ", "out of range"},
      {"{\"a\": -9223372036854775809}", "in.json:1:7: error: /a: ", "outside the 64-bit range"},
      {"{\"a\": 18446744073709551616}", "in.json:1:7: error: /a: ", "outside the 64-bit range"},
      {"{\"a\\u0000\": 1}", "in.json:1:4: error: /: ", "NUL"},
      {"{\"a\": \"\xff\"}", "in.json:1:8: error: /a: ", "invalid UTF-8 (byte 0xff)"},
      {"{\"a\" 1}", "in.json:1:6: error: /: ", "':'"},
      {"null", "in.json:1:1: error: /: ", "the document is null"},
      {"\n  null ", "in.json:2:3: error: /: ", "the document is null"},
      {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
       "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
       "in.json:1:", "nesting deeper than 64"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    reset_diag(f);
    const fp_jv *r = parse(f, cases[k].text);
    if (r) fprintf(stderr, "accepted: %s\n", cases[k].text);
    assert_null(r);
    assert_int_equal(f->d.nerrors, 1);
    assert_diag(f, cases[k].prefix, cases[k].frag);
  }
  /* accepted edge cases */
  static const char *const good[] = {"0", "-0", "1", " [ ] ", "{}", "\"\\ud83d\\ude00\"", "1e-400", "-1.5E+3",
                                     "{\"a\": {\"a\": 1}, \"b\": [{\"a\": 1}, {\"a\": 2}]}"};
  for (size_t k = 0; k < sizeof good / sizeof *good; k++) {
    reset_diag(f);
    const fp_jv *r = parse(f, good[k]);
    if (!r) fprintf(stderr, "rejected: %s: %s", good[k], f->d.buf);
    assert_int_equal(f->d.nerrors, 0);
  }
}

static void test_duplicate_keys(void **state) {
  fx *f = *state;
  assert_null(parse(f, "{\"a\": 1,\n \"b\": {\"x\": 1, \"y\": [{\"k\": 1, \"k\": 2}]}}"));
  assert_diag(f, "in.json:2:31: error: /b/y/0: ", "duplicate member 'k' (first at line 2, column 23)");
  reset_diag(f);
  /* equal after decoding escapes */
  assert_null(parse(f, "{\"\\u0061\": 1, \"a\": 2}"));
  assert_diag(f, "in.json:1:15: error: /: ", "duplicate member 'a'");
  reset_diag(f);
  /* the key is escaped as a pointer segment in the message */
  assert_null(parse(f, "{\"m\": {\"a/b\": 1, \"a/b\": 2}}"));
  assert_diag(f, "in.json:1:18: error: /m: ", "duplicate member 'a~1b'");
  reset_diag(f);
  /* many keys (the hash table grows) */
  char big[20000];
  size_t o = 0;
  o += (size_t)snprintf(big + o, sizeof big - o, "{");
  for (int k = 0; k < 1000; k++) o += (size_t)snprintf(big + o, sizeof big - o, "\"k%d\": %d, ", k, k);
  o += (size_t)snprintf(big + o, sizeof big - o, "\"k517\": 0}");
  assert_null(parse(f, big));
  assert_diag(f, "in.json:1:", "duplicate member 'k517'");
  reset_diag(f);
  /* a duplicate of one of the first 8 keys, found after the object outgrew them */
  o = 0;
  o += (size_t)snprintf(big + o, sizeof big - o, "{");
  for (int k = 0; k < 20; k++) o += (size_t)snprintf(big + o, sizeof big - o, "\"k%d\": %d, ", k, k);
  o += (size_t)snprintf(big + o, sizeof big - o, "\"k3\": 0}");
  assert_null(parse(f, big));
  assert_diag(f, "in.json:1:", "duplicate member 'k3' (first at line 1, column 29)");
}

/* ---- accessors --------------------------------------------------------------------- */
static void test_int64_edges(void **state) {
  fx *f = *state;
  const fp_jv *r = parse(f,
                         "{\"max\": 9223372036854775807, \"over\": 9223372036854775808, \"min\": -9223372036854775808,"
                         " \"f\": 1.0, \"b\": true, \"s\": \"4\", \"neg\": -4, \"n\": null, \"u\": 18446744073709551615}");
  assert_non_null(r);
  int64_t v = 0;
  assert_true(fpi_j_int(&f->c, r, "", "max", true, 1, INT64_MAX, &v));
  assert_true(v == INT64_MAX);
  assert_true(fpi_j_int(&f->c, r, "", "min", true, INT64_MIN, INT64_MAX, &v));
  assert_true(v == INT64_MIN);
  assert_int_equal(f->d.nerrors, 0);
  assert_false(fpi_j_int(&f->c, r, "", "over", true, 1, INT64_MAX, &v));
  assert_diag(f, "in.json:1:38: error: /over: ", "expected an integer >= 1, got 9223372036854775808");
  reset_diag(f);
  assert_false(fpi_j_int(&f->c, r, "", "u", true, 0, INT64_MAX, &v));
  assert_diag(f, "in.json:1:", "larger than the int64 maximum");
  reset_diag(f);
  assert_false(fpi_j_int(&f->c, r, "", "f", true, 1, INT64_MAX, &v));
  assert_diag(f, "in.json:1:", "/f: expected an integer >= 1, got 1.0");
  reset_diag(f);
  assert_false(fpi_j_int(&f->c, r, "", "b", true, 1, INT64_MAX, &v));
  assert_diag(f, "in.json:1:", "/b: expected an integer >= 1, got true");
  reset_diag(f);
  assert_false(fpi_j_int(&f->c, r, "", "s", true, 1, 10, &v));
  assert_diag(f, "in.json:1:", "/s: expected an integer in [1, 10], got \"4\"");
  reset_diag(f);
  assert_false(fpi_j_int(&f->c, r, "", "neg", true, 1, INT64_MAX, &v));
  assert_diag(f, "in.json:1:", "/neg: expected an integer >= 1, got -4");
  reset_diag(f);
  assert_false(fpi_j_int(&f->c, r, "", "n", false, 1, INT64_MAX, &v));
  assert_diag(f, "in.json:1:", "/n: expected an integer >= 1, got null");
  reset_diag(f);
  v = 77;
  assert_true(fpi_j_int(&f->c, r, "", "absent", false, 1, INT64_MAX, &v));
  assert_int_equal(v, 77);
  assert_false(fpi_j_int(&f->c, r, "", "absent", true, 1, INT64_MAX, &v));
  assert_diag(f, "in.json:1:1: error: /: ", "missing required member 'absent'");
  reset_diag(f);
  /* numbers: ints and doubles; booleans are not numbers */
  double d = 0;
  assert_true(fpi_j_num(&f->c, r, "", "f", true, 0, 10, &d));
  assert_true(d == 1.0);
  assert_true(fpi_j_num(&f->c, r, "", "max", true, 0, 1e300, &d));
  assert_false(fpi_j_num(&f->c, r, "", "b", true, 0, 10, &d));
  assert_diag(f, "in.json:1:", "expected a number in [0, 10], got true");
  reset_diag(f);
  static const char *const keys[] = {"max", "over", "min", "f", "b", "s", "neg", "n", NULL};
  assert_false(fpi_j_keys(&f->c, r, "", keys));
  assert_diag(f, "in.json:1:", "/u: unknown member 'u' (expected one of: max, over, min, f, b, s, neg, n)");
}

/* ---- model ------------------------------------------------------------------------ */
static bool model_from(fx *f, const char *text, fp_model *m) {
  const fp_jv *r = parse(f, text);
  if (!r) return false;
  bool ok = fpi_model_parse(f->a, &f->d, &f->src, r, "", m);
  return ok;
}

#define MODEL_HEAD "{\"format\": \"flexplan.model.v1\", \"name\": \"t\", \"modules\": ["

static void test_model_ok(void **state) {
  fx *f = *state;
  fp_model m;
  assert_true(model_from(f,
                         MODEL_HEAD
                         "{\"name\": \"a\", \"params\": [{\"name\": \"a.w\", \"shape\": [3, 4]},"
                         "  {\"name\": \"a.b\", \"shape\": [3], \"dtype\": \"bf16\", \"requires_grad\": false}],"
                         " \"flops_fwd\": 5},"
                         "{\"name\": \"b\", \"params\": [{\"name\": \"b.w\", \"shape\": [2305843009213693951]}],"
                         " \"flops_fwd\": 1, \"flops_bwd\": 7, \"activation_bytes\": 100}]}",
                         &m));
  assert_int_equal(f->d.nerrors, 0);
  assert_int_equal(m.nmodules, 2);
  assert_int_equal(m.nparams, 3);
  assert_string_equal(m.name, "t");
  assert_int_equal(m.params[0].numel, 12);
  assert_int_equal(m.params[0].ndim, 2);
  assert_int_equal(m.params[0].dtype, FP_F32);
  assert_true(m.params[0].requires_grad);
  assert_int_equal(m.params[1].dtype, FP_BF16);
  assert_false(m.params[1].requires_grad);
  assert_string_equal(fpi_param_ptr(f->a, &m, &m.params[1]), "/modules/0/params/1");
  assert_string_equal(fpi_param_ptr(f->a, &m, &m.params[2]), "/modules/1/params/0");
  assert_string_equal(fpi_module_ptr(f->a, &m, 1), "/modules/1");
  assert_int_equal(m.params[2].module, 1);
  assert_true(m.params[2].numel == INT64_MAX / 4); /* the largest whose fp32 bytes fit */
  assert_true(m.modules[0].flops_bwd == 10.0);             /* 2 x flops_fwd */
  assert_true(m.modules[1].flops_bwd == 7.0);
  assert_int_equal(m.modules[1].activation_bytes, 100);
  assert_int_equal(m.modules[1].first_param, 2);
  assert_int_equal(m.norder, 2);
  assert_int_equal(m.order[0], 0);
  assert_int_equal(m.order[1], 1);
}

static void test_model_errors(void **state) {
  fx *f = *state;
  fp_model m;
  static const struct {
    const char *body, *ptr, *frag;
  } cases[] = {
      /* shape overflow: the element count, then the 4-byte size */
      {"{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [4294967296, 4294967296]}]}]}",
       "/modules/0/params/0/shape: ", "parameter too large"},
      {"{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [3037000500, 3037000500]}]}]}",
       "/modules/0/params/0/shape: ", "parameter too large"},
      {"{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [2305843009213693952]}]}]}",
       "/modules/0/params/0/shape: ", "parameter too large"},
      {"{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [4.0]}]}]}", "/modules/0/params/0/shape/0: ",
       "expected an integer >= 1, got 4.0"},
      {"{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [1]}]},"
       "{\"name\": \"a\", \"params\": [{\"name\": \"v\", \"shape\": [1]}]}]}",
       "/modules/1/name: ", "duplicate module name 'a' (also /modules/0)"},
      {"{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [1]}]},"
       "{\"name\": \"b\", \"params\": [{\"name\": \"w\", \"shape\": [1]}]}]}",
       "/modules/1/params/0/name: ", "duplicate param name 'w'"},
      {"{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [1]}]},"
       "{\"name\": \"b\", \"params\": [{\"name\": \"v\", \"shape\": [1]}]}], \"forward_order\": [\"a\", \"a\"]}",
       "/forward_order: ", "module 'b' is not in forward_order"},
      {"{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [1]}]}], \"forward_order\": [\"a\", \"c\"]}",
       "/forward_order/1: ", "unknown module 'c'"},
      {"{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [1], \"dtype\": \"e4m3\"}]}]}",
       "/modules/0/params/0/dtype: ", "got \"e4m3\""},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    reset_diag(f);
    char *text = fpi_sprintf(f->a, MODEL_HEAD "%s", cases[k].body);
    assert_false(model_from(f, text, &m));
    assert_int_equal(f->d.nerrors, 1);
    assert_diag(f, "in.json:1:", cases[k].frag);
    char *want = fpi_sprintf(f->a, "error: %s", cases[k].ptr);
    if (!strstr(f->d.buf, want)) {
      fprintf(stderr, "got %s want %s\n", f->d.buf, want);
      fail();
    }
  }
  /* forward_order may repeat modules */
  reset_diag(f);
  assert_true(model_from(f,
                         MODEL_HEAD "{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [1]}]},"
                                    "{\"name\": \"b\", \"params\": [{\"name\": \"v\", \"shape\": [1]}]}],"
                                    " \"forward_order\": [\"b\", \"a\", \"b\"]}",
                         &m));
  assert_int_equal(m.norder, 3);
  assert_int_equal(m.order[0], 1);
  assert_int_equal(m.order[2], 1);
}

/* ---- spec ------------------------------------------------------------------------- */
static void test_spec_defaults(void **state) {
  fx *f = *state;
  fp_spec s;
  assert_true(fpi_spec_parse(f->a, &f->d, NULL, NULL, "", &s));
  assert_null(s.src);
  assert_int_equal(s.world_size, 8);
  assert_int_equal(s.ranks_per_node, 8);
  assert_int_equal(s.strategy, FP_FULL_SHARD);
  assert_int_equal(s.intra_node_size, 0);
  assert_int_equal(s.placement.kind, FP_PL_SHARD);
  assert_int_equal(s.placement.dim, 0);
  assert_int_equal(s.mp.param, FP_BF16);
  assert_int_equal(s.mp.reduce, FP_F32);
  assert_int_equal(s.mp.main_grad, FP_F32);
  assert_true(s.reshard == FP_RESHARD_TRUE);
  assert_int_equal(s.bucket_mode, FP_BUCKETS_DEFAULT);
  assert_int_equal(s.nbuckets, 0);
  assert_int_equal(s.nno_shard, 0);
  assert_int_equal(s.prefetch_fwd, 1);
  assert_int_equal(s.prefetch_bwd, 1);
  assert_int_equal(s.grad_accumulation, 1);
  assert_int_equal(s.memory_budget_bytes, 0);
  assert_string_equal(s.hw_preset, "h100-sxm");
  assert_true(s.hw_flops == 0);
  /* a minimal spec: the same defaults; ranks_per_node = min(8, world) */
  const fp_jv *r = parse(f, "{\"format\": \"flexplan.spec.v1\", \"mesh\": {\"world_size\": 4}}");
  assert_true(fpi_spec_parse(f->a, &f->d, &f->src, r, "", &s));
  assert_int_equal(s.world_size, 4);
  assert_int_equal(s.ranks_per_node, 4);
  r = parse(f, "{\"format\": \"flexplan.spec.v1\", \"mesh\": {\"world_size\": 12}}");
  assert_true(fpi_spec_parse(f->a, &f->d, &f->src, r, "", &s));
  assert_int_equal(s.ranks_per_node, 6); /* the largest divisor <= 8 */
  r = parse(f, "{\"format\": \"flexplan.spec.v1\", \"mesh\": {\"world_size\": 16384}}");
  assert_true(fpi_spec_parse(f->a, &f->d, &f->src, r, "", &s));
  assert_int_equal(s.ranks_per_node, 8);
  assert_ptr_equal(s.src, &f->src);
  assert_int_equal(f->d.nerrors, 0);
}

static void test_spec_merge(void **state) {
  fx *f = *state;
  fp_spec s;
  const fp_jv *r = parse(f,
                         "{\"format\": \"flexplan.spec.v1\", \"mesh\": {\"world_size\": 16, \"ranks_per_node\": 8},"
                         " \"strategy\": \"hybrid_shard\", \"hybrid_shard\": {\"intra_node_size\": 8},"
                         " \"defaults\": {\"mixed_precision\": {\"reduce_dtype\": \"bf16\"}, \"reshard_after_forward\": 4,"
                         "   \"placement\": {\"kind\": \"ragged_shard\", \"units\": [1, 2, 0, 1, 1, 1, 1, 1], \"align_elems\": 32}},"
                         " \"buckets\": [{\"name\": \"x\", \"params\": [\"a.*\", \"b.?\"], \"split\": \"per_module\","
                         "   \"mixed_precision\": {\"param_dtype\": \"fp16\"}},"
                         "  {\"name\": \"y\", \"params\": [\"*\"], \"placement\": {\"kind\": \"owned\", \"rank\": \"auto\"},"
                         "   \"reshard_after_forward\": false, \"offload\": false},"
                         "  {\"name\": \"z\", \"params\": [\"q\"], \"placement\": {\"kind\": \"owned\", \"rank\": 3},"
                         "   \"mixed_precision\": {\"main_grad_dtype\": \"bf16\", \"reduce_dtype\": \"fp32\"}}],"
                         " \"no_shard\": [\"v.*\"], \"prefetch\": {\"forward\": \"auto\"}, \"grad_accumulation\": 3,"
                         " \"memory_budget_bytes\": 1000, \"hardware\": {\"preset\": \"h200\", \"flops\": 1e15, \"hbm_bytes\": 5}}");
  assert_non_null(r);
  bool ok = fpi_spec_parse(f->a, &f->d, &f->src, r, "", &s);
  if (!ok) fprintf(stderr, "%s", f->d.buf);
  assert_true(ok);
  assert_int_equal(s.strategy, FP_HYBRID_SHARD);
  assert_int_equal(s.intra_node_size, 8);
  assert_int_equal(s.placement.kind, FP_PL_RAGGED);
  assert_int_equal(s.placement.nunits, 8);
  assert_int_equal(s.placement.units[1], 2);
  assert_int_equal(s.placement.align_elems, 32);
  assert_int_equal(s.reshard, 4);
  assert_int_equal(s.bucket_mode, FP_BUCKETS_LIST);
  assert_int_equal(s.nbuckets, 3);
  /* partial mixed precision: unspecified fields come from defaults */
  assert_int_equal(s.buckets[0].mp.param, FP_F16);
  assert_int_equal(s.buckets[0].mp.reduce, FP_BF16);
  assert_int_equal(s.buckets[0].mp.main_grad, FP_F32);
  assert_int_equal(s.buckets[2].mp.param, FP_BF16);
  assert_int_equal(s.buckets[2].mp.reduce, FP_F32);
  assert_int_equal(s.buckets[2].mp.main_grad, FP_BF16);
  assert_true(s.buckets[0].per_module);
  assert_false(s.buckets[0].has_placement);
  assert_int_equal(s.buckets[0].placement.kind, FP_PL_RAGGED); /* the default, copied */
  assert_int_equal(s.buckets[0].reshard, 4);
  assert_int_equal(s.buckets[0].npatterns, 2);
  assert_string_equal(s.buckets[0].patterns[1], "b.?");
  assert_true(s.buckets[1].has_placement);
  assert_int_equal(s.buckets[1].placement.kind, FP_PL_OWNED);
  assert_true(s.buckets[1].placement.rank == -1);
  assert_int_equal(s.buckets[1].reshard, 0);
  assert_true(s.buckets[2].placement.rank == 3);
  assert_string_equal(s.buckets[2].placement.ptr, "/buckets/2/placement");
  assert_string_equal(s.buckets[1].ptr, "/buckets/1");
  assert_int_equal(s.nno_shard, 1);
  assert_int_equal(s.prefetch_fwd, FP_PREFETCH_AUTO);
  assert_int_equal(s.prefetch_bwd, 1);
  assert_int_equal(s.grad_accumulation, 3);
  assert_int_equal(s.memory_budget_bytes, 1000);
  assert_string_equal(s.hw_preset, "h200");
  assert_true(s.hw_flops == 1e15);
  assert_int_equal(s.hw_hbm_bytes, 5);
  assert_true(s.hw_ib_gbps == 0);

  /* auto buckets, prefetch "auto" */
  r = parse(f, "{\"format\": \"flexplan.spec.v1\", \"buckets\": {\"auto\": {\"target_bytes\": 1024}}, \"prefetch\": \"auto\"}");
  assert_true(fpi_spec_parse(f->a, &f->d, &f->src, r, "", &s));
  assert_int_equal(s.bucket_mode, FP_BUCKETS_AUTO);
  assert_int_equal(s.auto_target_bytes, 1024);
  assert_int_equal(s.prefetch_fwd, FP_PREFETCH_AUTO);
  assert_int_equal(s.prefetch_bwd, FP_PREFETCH_AUTO);
  r = parse(f, "{\"format\": \"flexplan.spec.v1\", \"buckets\": {\"auto\": {}}}");
  assert_true(fpi_spec_parse(f->a, &f->d, &f->src, r, "", &s));
  assert_int_equal(s.auto_target_bytes, 0);
}

/* ---- files: the combined form -------------------------------------------------------- */
static char *write_tmp(const char *text) {
  char *path = strdup("/tmp/fp_test_frontend_XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  size_t n = strlen(text);
  assert_true(write(fd, text, n) == (ssize_t)n);
  close(fd);
  return path;
}

static void test_embedded(void **state) {
  fx *f = *state;
  char *path = write_tmp("{\"model\": " MODEL_HEAD
                         "{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [8]}]}]},\n"
                         " \"spec\": {\"format\": \"flexplan.spec.v1\", \"strategy\": \"no_shard\",\n"
                         "  \"prefetch\": {\"backward\": 65}}}\n");
  fp_model m;
  const fp_jv *spec = NULL;
  const fp_src *src = NULL;
  assert_true(fpi_model_load(f->a, &f->d, path, &m, &spec, &src));
  assert_non_null(spec);
  assert_non_null(src);
  assert_string_equal(m.ptr, "/model");
  assert_string_equal(fpi_param_ptr(f->a, &m, &m.params[0]), "/model/modules/0/params/0");
  assert_ptr_equal(m.src, src);
  fp_spec s;
  assert_false(fpi_spec_parse(f->a, &f->d, src, spec, "/spec", &s));
  char *want = fpi_sprintf(f->a, "%s:3:28: error: /spec/prefetch/backward: ", path);
  assert_diag(f, want, "expected an integer in [0, 64], got 65");
  unlink(path);
  free(path);

  /* combined without a spec: *embedded_spec stays NULL, defaults apply */
  reset_diag(f);
  path = write_tmp("{\"model\": " MODEL_HEAD "{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [8]}]}]}}");
  assert_true(fpi_model_load(f->a, &f->d, path, &m, &spec, &src));
  assert_null(spec);
  unlink(path);
  free(path);

  /* a bare model */
  path = write_tmp(MODEL_HEAD "{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [8]}]}]}");
  assert_true(fpi_model_load(f->a, &f->d, path, &m, &spec, &src));
  assert_null(spec);
  assert_string_equal(m.ptr, "");
  unlink(path);
  free(path);

  /* errors inside the embedded model are prefixed /model */
  path = write_tmp("{\"spec\": {\"format\": \"flexplan.spec.v1\"},\n \"model\": " MODEL_HEAD
                   "{\"name\": \"a\", \"params\": [{\"name\": \"w\", \"shape\": [0]}]}]}}");
  assert_false(fpi_model_load(f->a, &f->d, path, &m, &spec, &src));
  assert_null(spec);
  if (!strstr(f->d.buf, ":2:117: error: /model/modules/0/params/0/shape/0: expected an integer >= 1, got 0"))
    fprintf(stderr, "%s", f->d.buf);
  assert_non_null(strstr(f->d.buf, ":2:117: error: /model/modules/0/params/0/shape/0: expected an integer >= 1, got 0"));
  unlink(path);
  free(path);

  /* a spec file */
  reset_diag(f);
  path = write_tmp("{\"format\": \"flexplan.spec.v1\", \"mesh\": {\"world_size\": 64}, \"strategy\": \"hybrid_shard\","
                   " \"hybrid_shard\": {\"intra_node_size\": 48}}");
  assert_false(fpi_spec_load(f->a, &f->d, path, &s));
  assert_non_null(strstr(f->d.buf, "error: /hybrid_shard/intra_node_size: world_size 64 is not a multiple of"
                                   " intra_node_size 48"));
  unlink(path);
  free(path);

  /* a missing file */
  reset_diag(f);
  assert_false(fpi_model_load(f->a, &f->d, "/nonexistent/model.json", &m, &spec, &src));
  assert_non_null(strstr(f->d.buf, "/nonexistent/model.json: error: cannot open"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_locate, setup, teardown),
      cmocka_unit_test_setup_teardown(test_locate_fuzz, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ptr_build, setup, teardown),
      cmocka_unit_test_setup_teardown(test_syntax_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_parse_matches_jsonc, setup, teardown),
      cmocka_unit_test_setup_teardown(test_duplicate_keys, setup, teardown),
      cmocka_unit_test_setup_teardown(test_int64_edges, setup, teardown),
      cmocka_unit_test_setup_teardown(test_model_ok, setup, teardown),
      cmocka_unit_test_setup_teardown(test_model_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_spec_defaults, setup, teardown),
      cmocka_unit_test_setup_teardown(test_spec_merge, setup, teardown),
      cmocka_unit_test_setup_teardown(test_embedded, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
