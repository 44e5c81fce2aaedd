/* test_fmt.c - the fast paths of the IR's writers and of the plan reader
 * against the slow code they replace.
 *
 * fpi_fmt_double (ir/ir.c) must give exactly the text of the loop it replaced
 * (kept below as the oracle) for every double: compared on random bit
 * patterns, integers, short decimals (ties in the 17-digit form), dyadic
 * fractions, their neighbours and the edge values. FP_FMT_N=<count> raises
 * the number of random samples per kind (default 30000).
 *
 * plan.json is written without json-c (ir/plan.c); its strings must be
 * escaped exactly as json-c's serializer escapes them: compared for every
 * byte value and for random byte strings, through a model name.
 *
 * fpi_plan_read is one pull reader (base/json.c) for any spacing and member
 * order: the plans of the golden programs, their members reordered and
 * re-spaced by json-c (the oracle), must read as the same program; thousands
 * of random byte edits of them must read as a program that writes and reads
 * back as itself, or be refused with a located error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <inttypes.h>
#include <dirent.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/irpriv.h"
#include "planner/sim.h"

/* the old fpi_fmt_double: the oracle */
static void oracle(char buf[40], double d) {
  if (isnan(d) || isinf(d)) {
    snprintf(buf, 40, "%s", isnan(d) ? "nan" : d > 0 ? "inf" : "-inf");
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, 40, "%.*g", prec, d);
    if (strtod(buf, NULL) == d) return;
  }
  snprintf(buf, 40, "%.17g", d);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) { /* xorshift64* */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545f4914f6cdd1dull;
}

static long nchecked, nfailed;

static void check(double d) {
  char want[40], got[40];
  memset(got, 'x', sizeof got);
  oracle(want, d);
  size_t n = fpi_fmt_double(got, d);
  nchecked++;
  if (strcmp(want, got) || n != strlen(want)) {
    if (nfailed++ < 20) print_error("%a: fpi_fmt_double '%s' (len %zu), oracle '%s'\n", d, got, n, want);
  }
}

/* d, -d and both neighbours of each */
static void check4(double d) {
  check(d);
  check(-d);
  check(nextafter(d, INFINITY));
  check(nextafter(d, -INFINITY));
}

static long samples(void) {
  const char *e = getenv("FP_FMT_N");
  long n = e ? atol(e) : 0;
  return n > 0 ? n : 30000;
}

static void test_fmt_double(void **state) {
  (void)state;
  long n = samples();
  static const double edge[] = {0.0, 1.0, 0.1, 0.5, 1e-5, 1e-4, 1e15, 1e16, 1e17, 1e21, 1e22, 1e23,
                                9007199254740991.0, 9007199254740992.0, 9007199254740993.0,
                                18014398509481984.0, 123456789012345678.0, DBL_MIN, DBL_MAX, DBL_TRUE_MIN,
                                DBL_EPSILON, 5e-324, 2.2250738585072009e-308, 1.7976931348623157e308,
                                0.30000000000000004, 1.0 / 3, 2.0 / 3, 6.103515625e-05, 1e-300, 1e300,
                                99999.5, 999999.5, 0.00001234, 0.0001234, 4503599627370495.5, 4503599627370496.5};
  for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) check4(edge[i]);
  check(-0.0);
  check(INFINITY);
  check(-INFINITY);
  check(NAN);
  /* powers of two and ten, and every double near them */
  for (int e = -1074; e <= 1023; e++) check4(ldexp(1.0, e));
  for (int e = -323; e <= 308; e++) {
    char t[16];
    snprintf(t, sizeof t, "1e%d", e);
    check4(strtod(t, NULL));
  }
  for (long i = 0; i < n; i++) {
    /* random bit patterns (every exponent, subnormals, nan, inf) */
    uint64_t u = next();
    double d;
    memcpy(&d, &u, sizeof d);
    check(d);
    /* integers of every size up to 2^64, and near 2^53 */
    uint64_t v = next() >> (next() % 64);
    check((double)v);
    check(-(double)v);
    check(9007199254740992.0 + (double)(int64_t)(next() % 2001) - 1000.0);
    /* short decimals: 1..17 digits, exponent -30..30 and beyond (their
     * 17-digit forms end in ...5000 ties, rounding carries, ...) */
    char t[64];
    int nd = 1 + (int)(next() % 17);
    char dig[20];
    for (int k = 0; k < nd; k++) dig[k] = (char)('0' + next() % 10);
    dig[nd] = 0;
    int ex = (int)(next() % 61) - 30;
    if (next() % 8 == 0) ex = (int)(next() % 600) - 300;
    snprintf(t, sizeof t, "0.%se%d", dig, ex);
    check4(strtod(t, NULL));
    /* 17-digit decimals whose last digits are 5 or 50..0 */
    snprintf(t, sizeof t, "%" PRIu64 "5e%d", (uint64_t)(next() % 10000000000000000ull), (int)(next() % 41) - 20);
    check4(strtod(t, NULL));
    /* dyadic fractions k / 2^j (exact short decimal expansions) */
    check4(ldexp((double)(next() % 100000), -(int)(next() % 60)));
    check4(ldexp((double)(next() >> 11 | 1), (int)(next() % 80) - 60)); /* 53-bit odd significands */
    /* ratios such as flops and scale factors */
    check4((double)(next() % 100000 + 1) / (double)(next() % 100000 + 1));
  }
  print_message("fpi_fmt_double: %ld doubles compared with the oracle, %ld differ\n", nchecked, nfailed);
  assert_int_equal(nfailed, 0);
}

/* the plan's "model" member as written */
static char *plan_model(const char *name) {
  fp_arena *a = fpi_arena_new();
  fp_prog *p = fpi_prog_new(a);
  p->model = name;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  fpi_plan_write(p, f);
  fclose(f);
  fpi_arena_free(a);
  const char *k = strstr(buf, "\n  \"model\": ");
  assert_non_null(k);
  k += strlen("\n  \"model\": ");
  const char *e = strstr(k, ",\n  \"world_size\"");
  assert_non_null(e);
  char *r = strndup(k, (size_t)(e - k));
  free(buf);
  return r;
}

static void check_string(const char *s) {
  json_object *o = json_object_new_string(s);
  const char *want = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
  char *got = plan_model(s);
  assert_string_equal(got, want);
  free(got);
  json_object_put(o);
}

static void test_json_strings(void **state) {
  (void)state;
  char s[64];
  for (int c = 1; c < 256; c++) {
    snprintf(s, sizeof s, "a%cb%c", c, c);
    check_string(s);
  }
  check_string("");
  check_string("plain/name:with.dots-and_underscores");
  check_string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  for (int i = 0; i < 2000; i++) {
    int n = (int)(next() % 40);
    for (int k = 0; k < n; k++) {
      int c = (int)(next() % 255) + 1;
      if (next() % 2) c = "\"\\/\b\f\n\r\t\x01\x1f\x7f"[next() % 11];
      s[k] = (char)c;
    }
    s[n] = 0;
    check_string(s);
  }
}

/* ---- the plan reader: one reader, any spacing and member order ------------ */
static long nread;

/* the program p as plan.json (with its memory timeline) and .fpir, malloc'd */
static char *prog_text(fp_prog *p) {
  char *pl = NULL;
  size_t pn = 0;
  FILE *f = open_memstream(&pl, &pn);
  assert_non_null(f);
  assert_true(fpi_plan_write(p, f));
  fclose(f);
  char *ir = fpi_ir_print_str(p, NULL);
  char *out = malloc(strlen(ir) + pn + 1);
  strcpy(out, pl);
  strcat(out, ir);
  free(ir);
  free(pl);
  return out;
}

/* read text: accepted, or refused with one located error; want (when not
 * NULL) is the program it must be */
static void read_one(const char *text, size_t len, const char *want) {
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  d.max_errors = 100;
  char *t = fpi_strndup(a, text, len);
  fp_src src = {"plan.json", t, len};
  fp_prog *p = fpi_plan_read(a, &d, &src);
  nread++;
  if (p) {
    assert_int_equal(d.nerrors, 0);
    if (want) {
      char *got = prog_text(p);
      assert_string_equal(got, want);
      free(got);
    }
  } else {
    assert_true(d.nerrors >= 1);
    assert_true(d.buf && strncmp(d.buf, "plan.json:", 10) == 0 && strstr(d.buf, ": error: /"));
    if (want) fail_msg("refused a plan it wrote: %s", d.buf);
  }
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

/* read as written, and the program read back and written again the same */
static void read_both(const char *text, size_t len) {
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  char *t = fpi_strndup(a, text, len);
  fp_src src = {"plan.json", t, len};
  fp_prog *p = fpi_plan_read(a, &d, &src);
  char *want = p ? prog_text(p) : NULL;
  fpi_diag_free(&d);
  fpi_arena_free(a);
  read_one(text, len, NULL);
  if (want) { /* what it wrote reads as the same program */
    const char *ir = strstr(want, "\n}\n"); /* the plan ends with "}\n" on a line of its own */
    assert_non_null(ir);
    read_one(want, (size_t)(ir + 3 - want), want);
  }
  free(want);
}

/* a json-c value with every object's members in reverse order */
static json_object *reversed(json_object *v) {
  if (json_object_is_type(v, json_type_array)) {
    json_object *r = json_object_new_array();
    for (size_t i = 0; i < json_object_array_length(v); i++)
      json_object_array_add(r, reversed(json_object_array_get_idx(v, i)));
    return r;
  }
  if (!json_object_is_type(v, json_type_object)) return json_object_get(v);
  const char *keys[64];
  json_object *vals[64];
  int n = 0;
  json_object_object_foreach(v, k, x) {
    if (n < 64) {
      keys[n] = k;
      vals[n++] = x;
    }
  }
  json_object *r = json_object_new_object();
  while (n--) json_object_object_add(r, keys[n], reversed(vals[n]));
  return r;
}

static char *plan_of(const char *path, size_t *len) {
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_src src;
  assert_true(fpi_src_read(a, &d, path, &src));
  fp_prog *p = fpi_ir_parse(a, &d, &src);
  assert_non_null(p);
  fp_sim sim;
  if (p->hw.name && fpi_simulate(a, p, &p->hw, &sim)) /* a memory timeline too */
    p->memtl = fpi_sim_memory(a, p, &sim);
  char *buf = NULL;
  FILE *f = open_memstream(&buf, len);
  assert_non_null(f);
  assert_true(fpi_plan_write(p, f));
  fclose(f);
  fpi_diag_free(&d);
  fpi_arena_free(a);
  return buf;
}

static double any_double(void) {
  for (;;) {
    uint64_t u = next();
    double d;
    memcpy(&d, &u, sizeof d);
    switch (next() % 4) {
      case 0: return (double)(int64_t)(next() >> (next() % 64));
      case 1: return ldexp((double)(next() % 1000), -(int)(next() % 30));
      case 2: return next() % 2 ? -0.0 : 0.0;
      default:
        if (isfinite(d)) return d;
    }
  }
}

static int64_t any_int(void) {
  switch (next() % 4) {
    case 0: return -1;
    case 1: return (int64_t)(next() % 100);
    case 2: return (int64_t)next();
    default: return (int64_t)(next() >> (next() % 64)) * (next() % 2 ? 1 : -1);
  }
}

/* the program of path with random changes, written as a plan (its hash
 * right): the fast path reads what the writer writes */
static void read_changed(const char *path) {
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_src src;
  assert_true(fpi_src_read(a, &d, path, &src));
  fp_prog *p = fpi_ir_parse(a, &d, &src);
  assert_non_null(p);
  for (int k = 0; k < 4; k++) {
    int what = (int)(next() % 8);
    if (what == 0 && p->nops) p->ops[next() % (uint64_t)p->nops].alpha = any_double();
    if (what == 1 && p->nmods) p->mods[next() % (uint64_t)p->nmods].flops_fwd = any_double();
    if (what == 2 && p->nops) p->ops[next() % (uint64_t)p->nops].count = any_int();
    if (what == 3 && p->nops) p->ops[next() % (uint64_t)p->nops].dst.off = any_int();
    if (what == 4 && p->nbufs) p->bufs[next() % (uint64_t)p->nbufs].offset = any_int();
    if (what == 5 && p->nparams) p->params[next() % (uint64_t)p->nparams].shape[0] = any_int();
    if (what == 6 && p->ntabs && p->tabs[0].n) p->tabs[0].cnt[next() % (uint64_t)p->tabs[0].n] = any_int();
    if (what == 7 && p->nbufs) p->bufs[next() % (uint64_t)p->nbufs].name = next() % 2 ? "x\"y" : "w\xc3\xa9";
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  fpi_plan_write(p, f);
  fclose(f);
  read_both(buf, len);
  free(buf);
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

static void read_variants(const char *path) {
  for (int i = 0; i < 60; i++) read_changed(path);
  size_t len;
  char *plan = plan_of(path, &len);
  /* as written, and as json-c re-spaces and reorders it: the same program */
  read_both(plan, len);
  fp_arena *pa = fpi_arena_new();
  fp_diag pd;
  fpi_diag_init(&pd, stderr);
  fp_src psrc = {"plan.json", fpi_strndup(pa, plan, len), len};
  fp_prog *pp = fpi_plan_read(pa, &pd, &psrc);
  assert_non_null(pp);
  char *orig = prog_text(pp);
  fpi_diag_free(&pd);
  fpi_arena_free(pa);
  /* re-spaced and reordered by json-c */
  json_object *o = json_tokener_parse(plan);
  assert_non_null(o);
  static const int flags[] = {JSON_C_TO_STRING_PLAIN, JSON_C_TO_STRING_SPACED, JSON_C_TO_STRING_PRETTY,
                              JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_PRETTY_TAB};
  for (int i = 0; i < 4; i++) {
    const char *t = json_object_to_json_string_ext(o, flags[i] | JSON_C_TO_STRING_NOSLASHESCAPE);
    read_one(t, strlen(t), orig);
  }
  json_object *r = reversed(o);
  const char *t = json_object_to_json_string_ext(r, JSON_C_TO_STRING_PLAIN);
  read_one(t, strlen(t), orig);
  /* rows reversed, the root's members in the writer's order */
  json_object *root = json_object_new_object();
  json_object_object_foreach(o, k, x) json_object_object_add(root, k, json_object_is_type(x, json_type_array) ? reversed(x) : json_object_get(x));
  t = json_object_to_json_string_ext(root, JSON_C_TO_STRING_SPACED);
  read_one(t, strlen(t), orig);
  free(orig);
  json_object_put(root);
  json_object_put(r);
  json_object_put(o);
  /* random edits: a byte replaced, deleted or inserted; a digit changed;
   * spaces added; a member's value swapped with another's */
  static const char alphabet[] = " \t\n\r{}[],:\"\\-+.0123456789eEtrufalsn/x\x01\x7f\xc3\xa9";
  char *m = malloc(len + 16);
  for (int it = 0; it < 600; it++) {
    memcpy(m, plan, len);
    size_t n = len, at = next() % len;
    switch (next() % 5) {
      case 0: m[at] = alphabet[next() % (sizeof alphabet - 1)]; break;
      case 1: memmove(m + at, m + at + 1, n - at - 1); n--; break;
      case 2: memmove(m + at + 1, m + at, n - at); m[at] = alphabet[next() % (sizeof alphabet - 1)]; n++; break;
      case 3: {
        for (size_t k = at; k < n; k++)
          if (m[k] >= '0' && m[k] <= '9') {
            m[k] = (char)('0' + next() % 10);
            break;
          }
        break;
      }
      default: {
        for (size_t k = at; k < n; k++)
          if (m[k] == ',' || m[k] == ':') {
            memmove(m + k + 2, m + k + 1, n - k - 1);
            m[k + 1] = ' ';
            n++;
            break;
          }
      }
    }
    read_both(m, n);
  }
  free(m);
  free(plan);
}

static void test_plan_read(void **state) {
  (void)state;
  static const char *const dirs[] = {FP_SOURCE_DIR "/tests/ir", FP_SOURCE_DIR "/tests/golden"};
  int files = 0;
  for (int i = 0; i < 2; i++) {
    DIR *dir = opendir(dirs[i]);
    assert_non_null(dir);
    struct dirent *e;
    while ((e = readdir(dir))) {
      size_t l = strlen(e->d_name);
      if (l < 6 || strcmp(e->d_name + l - 5, ".fpir")) continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", dirs[i], e->d_name);
      read_variants(path);
      files++;
    }
    closedir(dir);
  }
  print_message("fpi_plan_read: %d programs, %ld texts read\n", files, nread);
  assert_true(files >= 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fmt_double),
      cmocka_unit_test(test_json_strings),
      cmocka_unit_test(test_plan_read),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
