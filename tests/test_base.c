/* test_base.c - the base layer's sort and arena, and the IR's alias clocks,
 * against plain oracles.
 *
 * fpi_sort_u64 (a radix sort) must give qsort's order of (key, position):
 * ascending keys, equal keys in their first order, each val moved with its
 * key; checked on keys with few distinct values, on full 64-bit ones, on
 * keys that differ only in one 16-bit digit, and on sorted and reversed
 * input. fpi_sort_records must give qsort's order of records by two keys
 * and then their position. fpi_name_firsts must name, for every name, the
 * lowest earlier index with the same text (brute force over names drawn
 * from a small pool, with NULLs, equal prefixes and one name many times).
 *
 * The arena hands out big arrays from mappings of their own and grows them
 * with mremap: fpi_grow must keep the contents and give zeroed room,
 * fpi_alloc_array_raw the room asked for (ASan checks its bounds), and
 * fpi_arena_release must leave every other allocation alone.
 *
 * fp_alias_clocks (ir/access.c) keeps buffers that share no byte in rows of
 * their own and the rest in a segment tree; the answer for a buffer must be
 * the maximum over every buffer overlapping it, computed here by brute force
 * over random layouts (adjacent, nested, equal and disjoint ranges, two
 * arenas, unplaced buffers) and random access sequences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "ir/ir.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

typedef struct kv {
  uint64_t key;
  int32_t pos;
} kv;

static int kv_cmp(const void *a, const void *b) {
  const kv *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return (x->pos > y->pos) - (x->pos < y->pos);
}

static void check_sort(uint64_t *key, int64_t n, bool with_val) {
  kv *want = malloc(((size_t)n + 1) * sizeof *want);
  int32_t *val = with_val ? malloc(((size_t)n + 1) * sizeof *val) : NULL;
  assert_non_null(want);
  for (int64_t i = 0; i < n; i++) {
    want[i] = (kv){key[i], (int32_t)i};
    if (val) val[i] = (int32_t)i;
  }
  qsort(want, (size_t)n, sizeof *want, kv_cmp);
  fpi_sort_u64(key, val, n);
  for (int64_t i = 0; i < n; i++) {
    assert_int_equal(key[i], want[i].key);
    if (val) assert_int_equal(val[i], want[i].pos);
  }
  free(want);
  free(val);
}

/* fpi_strjoin / fpi_strjoin_i64 against snprintf, at the integers' edges */
static void test_strjoin(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  assert_string_equal(fpi_strjoin(a, "b3", ".", "weight"), "b3.weight");
  assert_string_equal(fpi_strjoin(a, "", "", ""), "");
  const int64_t v[] = {0, 1, -1, 9, 10, 99, 100, 123456789, -987654321, INT64_MAX, INT64_MIN, INT64_MIN + 1};
  for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
    char want[64];
    snprintf(want, sizeof want, "/model/modules/%lld", (long long)v[k]);
    assert_string_equal(fpi_strjoin_i64(a, "/model/modules", "/", v[k]), want);
  }
  fpi_arena_free(a);
}

static void test_sort_u64(void **state) {
  (void)state;
  static const int64_t sizes[] = {0, 1, 2, 3, 17, 1000, 100000};
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
    int64_t n = sizes[si];
    uint64_t *key = malloc(((size_t)n + 1) * sizeof *key);
    assert_non_null(key);
    for (int kind = 0; kind < 6; kind++) {
      for (int64_t i = 0; i < n; i++) {
        uint64_t r = next();
        switch (kind) {
        case 0: key[i] = r % 7; break;                          /* few values: stability */
        case 1: key[i] = r; break;                              /* every digit */
        case 2: key[i] = 0x123400000000ull | (r & 0xffff0000); /* one digit varies */ break;
        case 3: key[i] = (uint64_t)i * 3; break;                /* sorted */
        case 4: key[i] = (uint64_t)(n - i) << 40; break;        /* reversed, high digit */
        default: key[i] = r >> (r & 63); break;                 /* mixed magnitudes */
        }
      }
      check_sort(key, n, kind % 2 == 0);
    }
    free(key);
  }
}

/* records sorted by (a, b), ties in their first order: fpi_sort_records
 * against qsort with the position as the last key */
typedef struct rec {
  uint32_t a;
  uint64_t b;
  int32_t pos;
} rec;

static uint64_t rec_key(const void *r, int k) { return k == 0 ? ((const rec *)r)->a : ((const rec *)r)->b; }

static int rec_cmp(const void *x, const void *y) {
  const rec *p = x, *q = y;
  if (p->a != q->a) return p->a < q->a ? -1 : 1;
  if (p->b != q->b) return p->b < q->b ? -1 : 1;
  return (p->pos > q->pos) - (p->pos < q->pos);
}

static void test_sort_records(void **state) {
  (void)state;
  static const int64_t sizes[] = {0, 1, 5, 300, 70000};
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
    int64_t n = sizes[si];
    rec *got = calloc((size_t)n + 1, sizeof *got), *want = calloc((size_t)n + 1, sizeof *want);
    assert_true(got && want);
    for (int64_t i = 0; i < n; i++) {
      uint64_t r = next();
      got[i] = (rec){(uint32_t)(r % 5), r >> 60, (int32_t)i}; /* many ties on both keys */
      want[i] = got[i];
    }
    qsort(want, (size_t)n, sizeof *want, rec_cmp);
    fpi_sort_records(got, sizeof *got, n, 2, rec_key);
    for (int64_t i = 0; i < n; i++)
      if (got[i].pos != want[i].pos) fail_msg("n %lld: record %lld is #%d, want #%d", (long long)n, (long long)i, got[i].pos, want[i].pos);
    free(got);
    free(want);
  }
}

static const char *pool_name(const void *ctx, int32_t i) { return ((const char *const *)ctx)[i]; }

static void test_name_firsts(void **state) {
  (void)state;
  static const char *const pool[] = {"a", "b", "ab", "ba", "layers.1.w", "layers.1.w2", "layers.10.w", "", NULL};
  static const int32_t sizes[] = {0, 1, 2, 9, 500, 20000};
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
    int32_t n = sizes[si];
    const char **names = calloc((size_t)n + 1, sizeof *names);
    int32_t *got = malloc(((size_t)n + 1) * sizeof *got);
    assert_true(names && got);
    char (*own)[24] = calloc((size_t)n + 1, sizeof *own); /* unique names, and copies of others */
    assert_true(own);
    for (int32_t i = 0; i < n; i++) {
      uint64_t r = next();
      if (r % 4 == 0) { /* a name of its own, or a fresh copy of an earlier one */
        if (i > 0 && names[r / 4 % (uint64_t)i] && r % 8 == 0) snprintf(own[i], sizeof own[i], "%s", names[r / 4 % (uint64_t)i]);
        else snprintf(own[i], sizeof own[i], "u%d", (int)i);
        names[i] = own[i];
      } else {
        names[i] = pool[r / 4 % (sizeof pool / sizeof *pool)];
      }
    }
    fpi_name_firsts(pool_name, names, n, got);
    for (int32_t i = 0; i < n; i++) {
      int32_t want = -1;
      for (int32_t j = 0; j < i && names[i] && want < 0; j++)
        if (names[j] && !strcmp(names[j], names[i])) want = j;
      if (got[i] != want) fail_msg("n %d: name %d ('%s'): first %d, want %d", (int)n, (int)i, names[i] ? names[i] : "(null)", (int)got[i], (int)want);
    }
    free(names);
    free(got);
    free(own);
  }
}

/* fpi_src_read: a regular file whole and NUL-terminated (read into the arena
 * at its fstat size); a file whose size fstat does not know (/proc: 0) and
 * that is longer than that, through the heap; a NUL byte and a directory
 * refused */
static void test_src_read(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  char path[] = "/tmp/test_base_src_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  char text[70000];
  for (size_t i = 0; i < sizeof text; i++) text[i] = (char)('a' + i % 26);
  assert_int_equal(write(fd, text, sizeof text), (ssize_t)sizeof text);
  close(fd);
  fp_src s;
  assert_true(fpi_src_read(a, &d, path, &s));
  assert_int_equal(s.len, sizeof text);
  assert_memory_equal(s.text, text, sizeof text);
  assert_int_equal(s.text[s.len], 0);
  /* /proc/self/status: fstat says 0 bytes */
  fp_src p;
  assert_true(fpi_src_read(a, &d, "/proc/self/status", &p));
  assert_true(p.len > 100 && strstr(p.text, "Name:") && strstr(p.text, "Pid:"));
  assert_int_equal(p.text[p.len], 0);
  assert_int_equal(strlen(p.text), p.len);
  /* a NUL byte, a directory */
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs("{\"a\": 1", f);
  fputc(0, f);
  fputs("}", f);
  fclose(f);
  fp_diag e;
  fpi_diag_init(&e, NULL);
  assert_false(fpi_src_read(a, &e, path, &s));
  assert_false(fpi_src_read(a, &e, "/tmp", &s));
  assert_int_equal(e.nerrors, 2);
  fpi_diag_free(&e);
  unlink(path);
  fpi_diag_free(&d);
  fpi_arena_free(a);
}

static void test_arena_big(void **state) {
  (void)state;
  fp_arena *a = fpi_arena_new();
  int32_t *small = fpi_alloc_array(a, 100, sizeof *small);
  for (int i = 0; i < 100; i++) small[i] = i * 7;
  /* an array grown one element at a time from 16 to 3M: through malloc'd
   * chunks, into a mapping, then mremap'd */
  int64_t cap = 0, n = 3000000;
  int64_t *arr = NULL;
  for (int64_t i = 0; i < n; i++) {
    arr = fpi_grow(a, arr, &cap, i + 1, sizeof *arr);
    if (i + 1 == cap || (i & (i - 1)) == 0) /* the room past i is zero when it is handed out */
      for (int64_t j = i; j < cap; j += 4093) assert_int_equal(arr[j], 0);
    arr[i] = i * 31 + 1;
  }
  for (int64_t i = 0; i < n; i++)
    if (arr[i] != i * 31 + 1) fail_msg("element %lld is %lld", (long long)i, (long long)arr[i]);
  /* a big one-off allocation is zeroed */
  unsigned char *big = fpi_alloc(a, (size_t)5 << 20);
  for (size_t i = 0; i < (size_t)5 << 20; i += 4096) assert_int_equal(big[i], 0);
  memset(big, 0xab, (size_t)5 << 20);
  /* raw arrays, small and big, are the size asked for, and a zeroed
   * allocation after one written all over is still zero */
  for (size_t n = 1; n <= ((size_t)1 << 20); n *= 64) {
    uint64_t *raw = fpi_alloc_array_raw(a, n, sizeof *raw);
    memset(raw, 0xcd, n * sizeof *raw);
    unsigned char *z = fpi_alloc(a, 4096);
    for (int i = 0; i < 4096; i++) assert_int_equal(z[i], 0);
    assert_int_equal(raw[n - 1], 0xcdcdcdcdcdcdcdcdull);
  }
  /* releasing the big ones leaves the rest; releasing a small one is a no-op */
  fpi_arena_release(a, arr);
  fpi_arena_release(a, small);
  fpi_arena_release(a, NULL);
  for (int i = 0; i < 100; i++) assert_int_equal(small[i], i * 7);
  assert_int_equal(big[12345], 0xab);
  fpi_arena_release(a, big);
  char *s = fpi_strdup(a, "still here");
  assert_string_equal(s, "still here");
  fpi_arena_free(a);
}

/* brute force: the latest write / read per stream over every buffer that
 * overlaps b */
static void brute(const fp_prog *p, int64_t (*w)[FP_NSTREAMS], int64_t (*r)[FP_NSTREAMS], int32_t b, int s,
                  int64_t *bw, int64_t *br) {
  for (int t = 0; t < FP_NSTREAMS; t++) bw[t] = br[t] = 0;
  for (int32_t o = 0; o < p->nbufs; o++) {
    if (!fpi_bufs_overlap(p, b, o)) continue;
    for (int t = 0; t < FP_NSTREAMS; t++) {
      if (t == s) continue;
      if (w[o][t] > bw[t]) bw[t] = w[o][t];
      if (r[o][t] > br[t]) br[t] = r[o][t];
    }
  }
}

static void test_alias_clocks(void **state) {
  (void)state;
  for (int round = 0; round < 200; round++) {
    fp_prog p;
    memset(&p, 0, sizeof p);
    int32_t nb = 1 + (int32_t)(next() % 40);
    fp_ir_buf *bufs = calloc((size_t)nb, sizeof *bufs);
    assert_non_null(bufs);
    for (int32_t b = 0; b < nb; b++) {
      uint64_t r = next();
      bufs[b].host = r % 5 == 0;
      bufs[b].bytes = (int64_t)(r >> 8 & 3) * 64; /* 0 sometimes: empty */
      switch (r >> 16 & 3) {
      case 0: bufs[b].offset = -1; break;                                 /* unplaced */
      case 1: bufs[b].offset = (int64_t)b * 1024; break;                  /* alone */
      default: bufs[b].offset = (int64_t)(r >> 24 & 15) * 64; break;      /* shared bytes, equal and adjacent ranges */
      }
      if (bufs[b].bytes == 0 && bufs[b].offset >= 0 && r >> 30 & 1) bufs[b].bytes = 256;
    }
    p.bufs = bufs;
    p.nbufs = nb;
    fp_alias_clocks c;
    fpi_alias_clocks_init(&p, &c);
    int64_t (*w)[FP_NSTREAMS] = calloc((size_t)nb, sizeof *w), (*r)[FP_NSTREAMS] = calloc((size_t)nb, sizeof *r);
    int64_t clock[FP_NSTREAMS] = {0};
    assert_true(w && r);
    for (int k = 0; k < 400; k++) {
      uint64_t x = next();
      int32_t b = (int32_t)(x % (uint64_t)nb);
      int s = (int)(x >> 20 & 0xff) % FP_NSTREAMS;
      if (x >> 32 & 1) { /* ask */
        int64_t gw[FP_NSTREAMS], gr[FP_NSTREAMS], bw[FP_NSTREAMS], br[FP_NSTREAMS];
        fpi_alias_clocks_max(&c, b, s, gw, gr);
        brute(&p, w, r, b, s, bw, br);
        for (int t = 0; t < FP_NSTREAMS; t++)
          if (t != s && (gw[t] != bw[t] || gr[t] != br[t]))
            fail_msg("round %d access %d: buffer %d [%lld, +%lld) stream %d: got w %lld r %lld, want w %lld r %lld",
                     round, k, b, (long long)bufs[b].offset, (long long)bufs[b].bytes, t, (long long)gw[t],
                     (long long)gr[t], (long long)bw[t], (long long)br[t]);
      } else { /* note */
        bool rd = x >> 33 & 1, wr = !rd || (x >> 34 & 1);
        int64_t t = ++clock[s];
        fpi_alias_clocks_note(&c, b, s, rd, wr, t);
        if (wr) w[b][s] = t;
        if (rd) r[b][s] = t;
      }
    }
    fpi_alias_clocks_free(&c);
    free(w);
    free(r);
    free(bufs);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_strjoin),
      cmocka_unit_test(test_src_read),
      cmocka_unit_test(test_sort_u64),
      cmocka_unit_test(test_sort_records),
      cmocka_unit_test(test_name_firsts),
      cmocka_unit_test(test_arena_big),
      cmocka_unit_test(test_alias_clocks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
