/* test_safetensors.c - the safetensors reader and writer
 * (executor/safetensors.c): a write-then-read round trip of every supported
 * dtype, a hand-written file with __metadata__ and padding, partial and
 * refused reads, a file truncated after it was opened; one hand-made broken
 * file per rule (each must be refused with "path: <message>" naming the
 * problem, and, under ASan, leak nothing); the writer's refusals; and random
 * byte edits of a valid file, which must open cleanly or be refused, never
 * crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "executor/safetensors.h"
#include "flexplan.h"

static char dir[64];
static int nfile;

static int setup(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/fp_st_XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
      if (e->d_name[0] != '.') {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
      }
    closedir(d);
  }
  rmdir(dir);
  return 0;
}

/* a fresh path in the test directory */
static const char *newpath(char buf[128]) {
  snprintf(buf, 128, "%s/f%d.safetensors", dir, nfile++);
  return buf;
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/* a file: 8-byte length of the header text, the header, then datalen bytes
 * (0, 1, 2, ...) */
static const char *mkfile(char buf[128], const char *header, size_t datalen) {
  size_t hl = strlen(header), n = 8 + hl + datalen;
  unsigned char *b = malloc(n);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(b + 8, header, hl);
  for (size_t i = 0; i < datalen; i++) b[8 + hl + i] = (unsigned char)i;
  newpath(buf);
  write_bytes(buf, b, n);
  free(b);
  return buf;
}

/* opening path must fail with "path: ...fragment..." */
static void expect_fail(const char *path, const char *fragment) {
  char err[512];
  memset(err, 'x', sizeof err);
  fp_st_file *f = fpi_st_open(path, err, sizeof err);
  if (f) {
    fpi_st_close(f);
    fail_msg("%s opened, expected an error with \"%s\"", path, fragment);
  }
  size_t pl = strlen(path);
  if (strncmp(err, path, pl) != 0 || strncmp(err + pl, ": ", 2) != 0) fail_msg("message without the path: %s", err);
  if (!strstr(err, fragment)) fail_msg("message \"%s\" lacks \"%s\"", err, fragment);
}

static void expect_header_fail(const char *header, size_t datalen, const char *fragment) {
  char p[128];
  expect_fail(mkfile(p, header, datalen), fragment);
}

/* ---- round trip ------------------------------------------------------------------ */
static void round_trip(void **state) {
  (void)state;
  float w[6] = {1, 2, 3, 4, 5, 6};
  uint16_t b16[3] = {0x3f80, 0xc000, 0x7fc0}, h16[1] = {0x3c00};
  uint8_t q[5] = {0x38, 0x7e, 0x80, 0x01, 0x7f}, sc[1] = {127}, u[3] = {1, 2, 3};
  fp_st_tensor ts[] = {
      {.name = "w", .dtype = FP_F32, .ndim = 2, .shape = {2, 3}},
      {.name = "b", .dtype = FP_BF16, .ndim = 1, .shape = {3}},
      {.name = "scalar", .dtype = FP_F16, .ndim = 0},
      {.name = "empty", .dtype = FP_F32, .ndim = 2, .shape = {0, 4}},
      {.name = "layers/0.q~\"x\"", .dtype = FP_E4M3, .ndim = 1, .shape = {5}},
      {.name = "s", .dtype = FP_E8M0, .ndim = 1, .shape = {1}},
      {.name = "u", .dtype = FP_U8, .ndim = 3, .shape = {1, 3, 1}},
  };
  const void *data[] = {w, b16, h16, NULL, q, sc, u};
  int n = (int)(sizeof ts / sizeof ts[0]);
  char p[128], err[256];
  newpath(p);
  assert_true(fpi_st_write(p, n, ts, data, err, sizeof err));

  fp_st_file *f = fpi_st_open(p, err, sizeof err);
  if (!f) fail_msg("%s", err);
  assert_int_equal(fpi_st_count(f), n);
  int64_t prev = 0;
  for (int i = 0; i < n; i++) { /* file order */
    const fp_st_tensor *t = fpi_st_get(f, i);
    assert_non_null(t);
    assert_true(t->offset >= prev);
    prev = t->offset + t->nbytes;
  }
  assert_null(fpi_st_get(f, n));
  assert_null(fpi_st_get(f, -1));
  assert_true(fpi_st_get(f, 0)->offset % 8 == 0); /* the writer aligns the data */
  for (int i = 0; i < n; i++) {
    const fp_st_tensor *t = fpi_st_find(f, ts[i].name);
    assert_non_null(t);
    assert_string_equal(t->name, ts[i].name);
    assert_int_equal(t->dtype, ts[i].dtype);
    assert_int_equal(t->ndim, ts[i].ndim);
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
      assert_int_equal(t->shape[d], ts[i].shape[d]);
      numel *= t->shape[d];
    }
    static const int size[] = {[FP_F32] = 4, [FP_BF16] = 2, [FP_F16] = 2, [FP_E4M3] = 1, [FP_E8M0] = 1, [FP_U8] = 1};
    assert_int_equal(t->nbytes, numel * size[t->dtype]);
    unsigned char buf[64];
    assert_true(fpi_st_read(f, t, 0, buf, t->nbytes, err, sizeof err));
    if (t->nbytes) assert_memory_equal(buf, data[i], (size_t)t->nbytes);
  }
  assert_null(fpi_st_find(f, "nope"));
  assert_null(fpi_st_find(f, ""));

  /* partial reads, and refused ones */
  const fp_st_tensor *t = fpi_st_find(f, "w");
  float part[2];
  assert_true(fpi_st_read(f, t, 8, part, 8, err, sizeof err));
  assert_true(part[0] == 3.0f && part[1] == 4.0f);
  assert_true(fpi_st_read(f, t, 24, NULL, 0, err, sizeof err));
  assert_false(fpi_st_read(f, t, 20, part, 8, err, sizeof err));
  assert_non_null(strstr(err, "/w: cannot read 8 bytes at byte 20: the tensor has 24"));
  assert_int_equal(strncmp(err, p, strlen(p)), 0);
  assert_false(fpi_st_read(f, t, -1, part, 1, err, sizeof err));
  assert_false(fpi_st_read(f, t, 0, part, -1, err, sizeof err));
  assert_false(fpi_st_read(f, t, INT64_MAX, part, INT64_MAX, err, sizeof err));
  fp_st_tensor fake = *t;
  assert_false(fpi_st_read(f, &fake, 0, part, 4, err, sizeof err));
  assert_non_null(strstr(err, "not one of this file's"));
  assert_false(fpi_st_read(f, (const fp_st_tensor *)((const char *)t + 1), 0, part, 4, err, sizeof err));

  /* truncated after opening: a short read, reported */
  const fp_st_tensor *last = fpi_st_get(f, n - 1);
  assert_int_equal(truncate(p, last->offset + 1), 0);
  unsigned char big[16];
  assert_false(fpi_st_read(f, last, 0, big, last->nbytes, err, sizeof err));
  assert_non_null(strstr(err, "short read"));
  fpi_st_close(f);
  fpi_st_close(NULL);
  assert_int_equal(fpi_st_count(NULL), 0);
}

/* a file written by hand as other writers do: __metadata__, spaces after the
 * object, tensors in the header in another order than their data */
static void hand_written(void **state) {
  (void)state;
  char p[128], err[256];
  mkfile(p,
         "{\"__metadata__\":{\"format\":\"pt\"},"
         "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]},"
         "\"a\":{\"shape\":[2],\"data_offsets\":[0,8],\"dtype\":\"F32\"},"
         "\"z\":{\"dtype\":\"F8_E4M3\",\"shape\":[0],\"data_offsets\":[12,12]}}     ",
         12);
  fp_st_file *f = fpi_st_open(p, err, sizeof err);
  if (!f) fail_msg("%s", err);
  assert_int_equal(fpi_st_count(f), 3);
  assert_string_equal(fpi_st_get(f, 0)->name, "a");
  assert_string_equal(fpi_st_get(f, 1)->name, "b");
  assert_string_equal(fpi_st_get(f, 2)->name, "z");
  const fp_st_tensor *b = fpi_st_find(f, "b");
  size_t hl = strlen("{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]},"
                     "\"a\":{\"shape\":[2],\"data_offsets\":[0,8],\"dtype\":\"F32\"},"
                     "\"z\":{\"dtype\":\"F8_E4M3\",\"shape\":[0],\"data_offsets\":[12,12]}}     ");
  assert_int_equal(b->offset, (int64_t)(8 + hl + 8));
  unsigned char d[4];
  assert_true(fpi_st_read(f, b, 0, d, 4, err, sizeof err));
  unsigned char want[4] = {8, 9, 10, 11};
  assert_memory_equal(d, want, 4);
  fpi_st_close(f);

  /* an empty header object and no data is a valid, empty file */
  f = fpi_st_open(mkfile(p, "{}", 0), err, sizeof err);
  if (!f) fail_msg("%s", err);
  assert_int_equal(fpi_st_count(f), 0);
  assert_null(fpi_st_find(f, "a"));
  fpi_st_close(f);
}

/* ---- checksums ("flexplan.crc32" in __metadata__) ------------------------------------------ */
/* CRC-32 bit by bit (the reader uses a table): the independent reference */
static uint32_t crc32_bits(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

/* a file of one U8 tensor "t" of n bytes (0, 1, 2, ...) whose metadata holds
 * the given members, or (meta NULL) the right checksums over 4096-byte
 * blocks; flip: a data byte to change after the checksums were taken (-1:
 * none) */
static const char *crc_file(char p[128], size_t n, const char *meta, long flip) {
  unsigned char *d = malloc(n);
  for (size_t i = 0; i < n; i++) d[i] = (unsigned char)i;
  char hex[64] = "", hdr[512];
  for (size_t b = 0; b * 4096 < n && b < 7; b++)
    snprintf(hex + strlen(hex), sizeof hex - strlen(hex), "%08x",
             crc32_bits(d + b * 4096, n - b * 4096 < 4096 ? n - b * 4096 : 4096));
  snprintf(hdr, sizeof hdr,
           "{\"__metadata__\":{%s},\"t\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}", "%s", n,
           n);
  char full[1024], m[256];
  if (!meta) snprintf(m, sizeof m, "\"flexplan.crc32.block_bytes\":\"4096\",\"flexplan.crc32\":\"%s\"", hex);
  snprintf(full, sizeof full, hdr, meta ? meta : m);
  if (flip >= 0) d[flip] ^= 0x04;
  size_t hl = strlen(full);
  unsigned char *b = malloc(8 + hl + n);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(b + 8, full, hl);
  memcpy(b + 8 + hl, d, n);
  write_bytes(newpath(p), b, 8 + hl + n);
  free(b);
  free(d);
  return p;
}

static void checksums(void **state) {
  (void)state;
  char p[128], err[512];
  unsigned char *d = malloc(10000);
  /* right checksums: every read passes, twice (a block is checked once) */
  fp_st_file *f = fpi_st_open(crc_file(p, 10000, NULL, -1), err, sizeof err);
  if (!f) fail_msg("%s", err);
  const fp_st_tensor *t = fpi_st_find(f, "t");
  assert_true(fpi_st_read(f, t, 0, d, 10000, err, sizeof err));
  assert_true(fpi_st_read(f, t, 4095, d, 2, err, sizeof err));
  assert_int_equal(d[0], 4095 & 0xFF);
  assert_int_equal(d[1], 4096 & 0xFF);
  for (int i = 2; i < 10000; i++) assert_int_equal(d[i], i & 0xFF);
  fpi_st_close(f);
  /* a byte changed in the second block: reads of the first pass, a read
   * touching the second fails naming the tensor and the block */
  f = fpi_st_open(crc_file(p, 10000, NULL, 5000), err, sizeof err);
  if (!f) fail_msg("%s", err);
  t = fpi_st_find(f, "t");
  assert_true(fpi_st_read(f, t, 0, d, 4096, err, sizeof err));
  assert_true(fpi_st_read(f, t, 8192, d, 1808, err, sizeof err));
  assert_false(fpi_st_read(f, t, 4000, d, 200, err, sizeof err));
  if (!strstr(err, "/t: bytes [4096, 8192) of the data buffer fail their checksum (crc32 ") ||
      !strstr(err, "): the file is corrupt") || strncmp(err, p, strlen(p)))
    fail_msg("%s", err);
  fpi_st_close(f);
  /* in the short last block */
  f = fpi_st_open(crc_file(p, 10000, NULL, 9999), err, sizeof err);
  if (!f) fail_msg("%s", err);
  assert_false(fpi_st_read(f, fpi_st_find(f, "t"), 9999, d, 1, err, sizeof err));
  assert_non_null(strstr(err, "bytes [8192, 10000) of the data buffer fail their checksum"));
  fpi_st_close(f);
  free(d);
  /* the metadata itself */
  expect_fail(crc_file(p, 10000, "\"flexplan.crc32\":\"00000000\"", -1),
              "/__metadata__/flexplan.crc32.block_bytes: expected the block size of the checksums");
  expect_fail(crc_file(p, 10000, "\"flexplan.crc32.block_bytes\":\"4096\"", -1),
              "/__metadata__/flexplan.crc32: missing beside flexplan.crc32.block_bytes");
  expect_fail(crc_file(p, 10000, "\"flexplan.crc32.block_bytes\":\"100\",\"flexplan.crc32\":\"\"", -1),
              "/__metadata__/flexplan.crc32.block_bytes: expected the block size of the checksums, 4096 .. 2^30");
  expect_fail(crc_file(p, 10000, "\"flexplan.crc32.block_bytes\":\"4096x\",\"flexplan.crc32\":\"\"", -1),
              "/__metadata__/flexplan.crc32.block_bytes: expected");
  expect_fail(crc_file(p, 10000, "\"flexplan.crc32.block_bytes\":\"4096\",\"flexplan.crc32\":\"0000000000000000\"", -1),
              "/__metadata__/flexplan.crc32: holds 16 hex digits; 3 blocks of 4096 bytes need 24");
  expect_fail(crc_file(p, 10000,
                       "\"flexplan.crc32.block_bytes\":\"4096\",\"flexplan.crc32\":\"00000000000000000000000G\"", -1),
              "/__metadata__/flexplan.crc32: 'G' at digit 23 is not a lowercase hex digit");
}

/* ---- broken files ------------------------------------------------------------------- */
#define T1(dt, shape, offs) "{\"t\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" offs "}}"

static void broken_files(void **state) {
  (void)state;
  char p[128];
  /* too short, header length */
  write_bytes(newpath(p), "", 0);
  expect_fail(p, "too short for the 8-byte header length");
  write_bytes(newpath(p), "\x02\0\0", 3);
  expect_fail(p, "too short");
  write_bytes(newpath(p), "\x64\0\0\0\0\0\0\0{}        ", 18);
  expect_fail(p, "header length 100 runs past the end of the file (10 bytes after the length)");
  write_bytes(newpath(p), "\0\0\0\0\0\x01\0\0{}", 10);
  expect_fail(p, "exceeds the 100000000-byte limit");
  write_bytes(newpath(p), "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10);
  expect_fail(p, "header length 18446744073709551615 exceeds");
  write_bytes(newpath(p), "\x01\0\0\0\0\0\0\0{", 9);
  expect_fail(p, "too short for a JSON object");
  /* not a file */
  expect_fail(dir, "not a regular file");
  snprintf(p, sizeof p, "%s/missing.safetensors", dir);
  expect_fail(p, "cannot open: No such file or directory");

  /* the header text */
  expect_header_fail("{\"t\":{\"dtype\":\"F32\"", 0, "header rejected at header byte 19: /t: invalid JSON: unexpected end of data");
  expect_header_fail("[1, 2]", 0, "header does not start with '{'");
  expect_header_fail(" {}", 0, "header does not start with '{'");
  expect_header_fail("{\"t\":}", 0, "header rejected at header byte 5: /t: invalid JSON: unexpected '}'");
  expect_header_fail("{'t':1}", 0, "byte 1: /: invalid JSON: expected a member name in double quotes, got '''");
  expect_header_fail("{\"t\":NaN}", 0, "byte 5: /t: invalid JSON: unexpected 'NaN'");
  expect_header_fail("{\"t\":01}", 0, "byte 5: /t: invalid JSON: number with a leading zero");
  expect_header_fail("{\"t\":1,}", 0, "byte 7: /: invalid JSON: expected a member name in double quotes, got '}'");
  expect_header_fail("{} x", 0, "byte 3: /: invalid JSON: unexpected data after the value");
  expect_header_fail("{}{}", 0, "byte 2: /: invalid JSON: unexpected data after the value");
  expect_header_fail("{\"t\":\"a\tb\"}", 0, "byte 7: /t: invalid JSON: unescaped control character 0x09 in string");
  expect_header_fail("{\"t\":\"\\q\"}", 0, "byte 6: /t: invalid JSON: invalid escape sequence in string");
  expect_header_fail("{\"t\":\"\xff\"}", 0, "header rejected at header byte 6: /t: invalid UTF-8 (byte 0xff)");
  /* what json-c's own check lets by: an overlong '/', a UTF-16 surrogate */
  expect_header_fail("{\"t\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                     "header rejected at header byte 3: /: invalid UTF-8 (byte 0xc0)");
  expect_header_fail("{\"t\xed\xa0\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                     "header rejected at header byte 3: /: invalid UTF-8 (byte 0xed)");
  expect_header_fail("{\"a\\u0000b\":{}}", 0, "byte 3: /: \\u0000 (NUL) is not allowed in strings");
  expect_header_fail("{\"t\":{\"dtype\\u0000x\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                     "byte 12: /t: \\u0000 (NUL) is not allowed in strings");
  write_bytes(newpath(p), "\x04\0\0\0\0\0\0\0{\0}   ", 12);
  expect_fail(p, "header holds a NUL byte at header byte 1");
  /* duplicates */
  expect_header_fail("{\"t\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                     "\"t\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                     0, "header rejected at header byte 53: /: duplicate member 't' (first at line 1, column 2)");
  expect_header_fail("{\"t\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                     "\"\\u0074\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                     0, "header rejected at header byte 53: /: duplicate member 't'");
  expect_header_fail("{\"t\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0,
                     "byte 19: /t: duplicate member 'dtype'");
  expect_header_fail("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, "byte 25: /__metadata__: duplicate member 'a'");
  /* members and their types */
  expect_header_fail("{\"t\":[1]}", 0, "/t: a tensor entry must be an object");
  expect_header_fail("{\"__metadata__\":{\"a\":1}}", 0, "/__metadata__/a: must be a string");
  expect_header_fail("{\"__metadata__\":[]}", 0, "/__metadata__: must be an object of strings");
  expect_header_fail("{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "/t: missing \"dtype\"");
  expect_header_fail("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "/t: missing \"shape\"");
  expect_header_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "/t: missing \"data_offsets\"");
  expect_header_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x/y\":1}}", 4,
                     "/t/x~1y: unknown member");
  expect_header_fail(T1("F64", "[1]", "[0,8]"), 8, "/t/dtype: unsupported dtype \"F64\"");
  expect_header_fail(T1("f32", "[1]", "[0,4]"), 4, "unsupported dtype \"f32\"");
  expect_header_fail("{\"t\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "/t/dtype: must be a string");
  expect_header_fail(T1("F32", "{}", "[0,4]"), 4, "/t/shape: must be an array of integers");
  expect_header_fail(T1("F32", "[2,-3]", "[0,4]"), 4, "/t/shape/1: a dimension must not be negative");
  expect_header_fail(T1("F32", "[1.5]", "[0,4]"), 4, "/t/shape/0: a dimension must be an integer");
  expect_header_fail(T1("F32", "[1e3]", "[0,4]"), 4, "must be an integer");
  expect_header_fail(T1("F32", "[\"1\"]", "[0,4]"), 4, "must be an integer");
  expect_header_fail(T1("F32", "[18446744073709551615]", "[0,4]"), 4, "/t/shape/0: a dimension is too large");
  expect_header_fail(T1("F32", "[99999999999999999999]", "[0,4]"), 4,
                     "byte 29: /t/shape/0: integer 99999999999999999999 is outside the 64-bit range");
  expect_header_fail(T1("F32", "[null]", "[0,4]"), 4, "/t/shape/0: a dimension must be an integer");
  expect_header_fail("{\"t\":{\"dtype\":null,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "/t/dtype: must be a string");
  expect_header_fail(T1("F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 4, "/t/shape: 9 dimensions, at most 8");
  expect_header_fail(T1("F32", "[4294967296,4294967296]", "[0,4]"), 4, "/t/shape: the tensor's size overflows");
  expect_header_fail(T1("F32", "[1]", "[0]"), 4, "/t/data_offsets: must be an array of two integers");
  expect_header_fail(T1("F32", "[1]", "[0,4,8]"), 8, "must be an array of two integers");
  expect_header_fail(T1("F32", "[1]", "{}"), 4, "must be an array of two integers");
  expect_header_fail(T1("F32", "[1]", "[-4,0]"), 4, "/t/data_offsets/0: begin must not be negative");
  expect_header_fail(T1("F32", "[1]", "[0,4.0]"), 4, "/t/data_offsets/1: end must be an integer");
  expect_header_fail(T1("F32", "[1]", "[8,4]"), 8, "/t/data_offsets: end 4 is before begin 8");
  expect_header_fail(T1("F32", "[4]", "[0,16]"), 8, "/t/data_offsets: end 16 is past the data buffer (8 bytes)");
  expect_header_fail(T1("F32", "[3]", "[0,8]"), 8, "/t/data_offsets: [0, 8) is 8 bytes, but the shape and dtype F32 need 12");
  expect_header_fail(T1("BF16", "[]", "[0,4]"), 4, "need 2");
  /* the tensors must tile the data buffer */
  expect_header_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                     12, "/b/data_offsets: [4, 12) overlaps /a");
  expect_header_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                     8, "overlaps");
  expect_header_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                     12, "data bytes [4, 8) belong to no tensor (before /b); the format allows no holes");
  expect_header_fail(T1("F32", "[1]", "[4,8]"), 8, "data bytes [0, 4) belong to no tensor");
  expect_header_fail(T1("F32", "[1]", "[0,4]"), 8, "4 bytes after the last tensor's data belong to no tensor");
  expect_header_fail("{}", 1, "1 bytes after the last tensor's data");
  /* names in messages are escaped */
  expect_header_fail("{\"a/b~\\n\":[]}", 0, "/a~1b~0\\x0a: a tensor entry must be an object");
}

/* ---- the writer's bytes ------------------------------------------------------------------
 * The header as json-c printed it (JSON_C_TO_STRING_PLAIN | NOSLASHESCAPE)
 * before the writer printed it itself (base/json.c fpi_json_put_string):
 * files written before and after are the same bytes. */
static void writer_bytes(void **state) {
  (void)state;
  char p[128], err[256];
  float x[8] = {0};
  const void *data[4] = {x, x, x, x};
  fp_st_tensor t[4] = {
      {.name = "a/b~\"q\\\x01\x7f\n\t\b\f\r\xc3\xa9", .dtype = FP_F32, .ndim = 2, .shape = {2, 3}},
      {.name = "scalar", .dtype = FP_BF16, .ndim = 0},
      {.name = "z", .dtype = FP_U8, .ndim = 3, .shape = {1, 0, 5}},
      {.name = "e8", .dtype = FP_E8M0, .ndim = 1, .shape = {7}},
  };
  static const char want[] =
      "{\"a/b~\\\"q\\\\\\u0001\x7f\\n\\t\\b\\f\\r\xc3\xa9\":{\"dtype\":\"F32\",\"shape\":[2,3],"
      "\"data_offsets\":[0,24]},\"scalar\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[24,26]},"
      "\"z\":{\"dtype\":\"U8\",\"shape\":[1,0,5],\"data_offsets\":[26,26]},"
      "\"e8\":{\"dtype\":\"F8_E8M0\",\"shape\":[7],\"data_offsets\":[26,33]}}  ";
  assert_int_equal(sizeof want - 1, 264);
  if (!fpi_st_write(newpath(p), 4, t, data, err, sizeof err)) fail_msg("%s", err);
  unsigned char got[8 + 264];
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  assert_int_equal(fread(got, 1, sizeof got, f), sizeof got);
  fclose(f);
  assert_int_equal(got[0], 8); /* 264 = 0x108, little-endian */
  assert_int_equal(got[1], 1);
  assert_memory_equal(got + 8, want, 264);
  fp_st_file *r = fpi_st_open(p, err, sizeof err);
  if (!r) fail_msg("%s", err);
  assert_non_null(fpi_st_find(r, t[0].name));
  fpi_st_close(r);
}

/* ---- the writer's refusals ---------------------------------------------------------------- */
static void writer_refusals(void **state) {
  (void)state;
  char p[128], err[256];
  float x[2] = {0};
  const void *data[2] = {x, x};
  struct {
    fp_st_tensor t[2];
    int n;
    const char *frag;
  } cases[] = {
      {{{.name = "a", .dtype = FP_F32, .ndim = 1, .shape = {1}}, {.name = "a", .dtype = FP_F32, .ndim = 1, .shape = {1}}},
       2, "/a: two tensors have this name"},
      {{{.name = "__metadata__", .dtype = FP_F32, .ndim = 1, .shape = {1}}}, 1, "the name is reserved"},
      {{{.name = "a", .dtype = (fp_dtype)99, .ndim = 1, .shape = {1}}}, 1, "/a: dtype 99 has no safetensors name"},
      {{{.name = "a", .dtype = FP_F32, .ndim = 9}}, 1, "/a: ndim 9 is not in 0..8"},
      {{{.name = "a", .dtype = FP_F32, .ndim = -1}}, 1, "ndim -1"},
      {{{.name = "a", .dtype = FP_F32, .ndim = 2, .shape = {1, -2}}}, 1, "/a/shape/1: dimension -2 is negative"},
      {{{.name = "a", .dtype = FP_F32, .ndim = 2, .shape = {INT64_MAX, 2}}}, 1, "/a/shape: the tensor's size overflows"},
      {{{.name = NULL, .dtype = FP_F32}}, 1, "tensor 0 has no name"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    newpath(p);
    memset(err, 0, sizeof err);
    assert_false(fpi_st_write(p, cases[i].n, cases[i].t, data, err, sizeof err));
    if (!strstr(err, cases[i].frag) || strncmp(err, p, strlen(p)) != 0)
      fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].frag);
    assert_int_equal(access(p, F_OK), -1); /* nothing left behind */
  }
  fp_st_tensor one = {.name = "a", .dtype = FP_F32, .ndim = 1, .shape = {2}};
  const void *nodata[1] = {NULL};
  assert_false(fpi_st_write(newpath(p), 1, &one, nodata, err, sizeof err));
  assert_non_null(strstr(err, "/a: no data for 8 bytes"));
  snprintf(p, sizeof p, "%s/no/such/dir.safetensors", dir);
  assert_false(fpi_st_write(p, 1, &one, data, err, sizeof err));
  assert_non_null(strstr(err, "cannot create"));
  /* zero tensors: a valid empty file */
  assert_true(fpi_st_write(newpath(p), 0, NULL, NULL, err, sizeof err));
  fp_st_file *f = fpi_st_open(p, err, sizeof err);
  assert_non_null(f);
  assert_int_equal(fpi_st_count(f), 0);
  fpi_st_close(f);
  /* a tiny err buffer is cut, still terminated */
  char tiny[8];
  assert_null(fpi_st_open(dir, tiny, sizeof tiny));
  assert_int_equal(strlen(tiny), 7);
  assert_null(fpi_st_open(dir, NULL, 0));
}

/* ---- random edits: open cleanly or refuse, never crash ------------------------------------- */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}

static void random_edits(void **state) {
  (void)state;
  char p[128], q[128], err[512];
  float w[6] = {1, 2, 3, 4, 5, 6};
  uint16_t b16[3] = {1, 2, 3};
  fp_st_tensor ts[] = {{.name = "w", .dtype = FP_F32, .ndim = 2, .shape = {2, 3}},
                       {.name = "b", .dtype = FP_BF16, .ndim = 1, .shape = {3}},
                       {.name = "e", .dtype = FP_U8, .ndim = 1, .shape = {0}}};
  const void *data[] = {w, b16, NULL};
  assert_true(fpi_st_write(newpath(p), 3, ts, data, err, sizeof err));
  FILE *fi = fopen(p, "rb");
  assert_non_null(fi);
  unsigned char orig[1024];
  size_t n = fread(orig, 1, sizeof orig, fi);
  fclose(fi);
  assert_true(n > 100 && n < sizeof orig);
  newpath(q);
  const char *env = getenv("FP_ST_EDITS");
  int iters = env ? atoi(env) : 3000, opened = 0;
  static const char pool[] = "{}[]\",:0123456789-. eE\\u\"dtypeshapedata_offsetsF32BF16";
  for (int it = 0; it < iters; it++) {
    unsigned char b[1100];
    memcpy(b, orig, n);
    size_t m = n;
    int edits = 1 + (int)(rnd() % 4);
    for (int e = 0; e < edits; e++) {
      size_t at = rnd() % m;
      switch (rnd() % 5) {
      case 0: b[at] = (unsigned char)rnd(); break;                       /* any byte */
      case 1: b[at] = (unsigned char)pool[rnd() % (sizeof pool - 1)]; break; /* a JSON-ish byte */
      case 2: m = at + 1; break;                                          /* truncate */
      case 3: if (at < 8) b[at] ^= (unsigned char)(1u << (rnd() % 8)); break; /* the length */
      case 4: if (m < sizeof b) { memmove(b + at + 1, b + at, m - at); b[at] = (unsigned char)pool[rnd() % (sizeof pool - 1)]; m++; } break;
      }
    }
    /* rewrite in place: truncating to 0 and refilling frees and reallocates
     * a block each time, which costs milliseconds on a disk mounted with
     * discard */
    int fd = open(q, O_WRONLY | O_CREAT, 0666);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, b, m, 0), (ssize_t)m);
    assert_int_equal(ftruncate(fd, (off_t)m), 0);
    assert_int_equal(close(fd), 0);
    fp_st_file *f = fpi_st_open(q, err, sizeof err);
    if (!f) {
      if (strncmp(err, q, strlen(q)) != 0 || strlen(err) <= strlen(q) + 2) fail_msg("bad message: %s", err);
      continue;
    }
    opened++;
    for (int i = 0; i < fpi_st_count(f); i++) { /* every tensor of an accepted file reads */
      const fp_st_tensor *t = fpi_st_get(f, i);
      assert_true(t->offset >= 8 && t->offset + t->nbytes <= (int64_t)m);
      unsigned char buf[1100];
      assert_true(t->nbytes <= (int64_t)sizeof buf);
      if (!fpi_st_read(f, t, 0, buf, t->nbytes, err, sizeof err)) fail_msg("%s", err);
    }
    fpi_st_close(f);
  }
  print_message("random edits: %d of %d opened\n", opened, iters);
}

/* the public face (fp_safetensors_*): the names the refit reads, and the
 * reader's message on the handle for a file that is none, a missing file
 * and a NULL path; every handle closed (LeakSanitizer checks the failed
 * ones too) */
static void public_names(void **state) {
  (void)state;
  float w[2] = {1, 2};
  uint16_t b[3] = {1, 2, 3};
  fp_st_tensor ts[] = {{.name = "b.w", .dtype = FP_F32, .ndim = 1, .shape = {2}},
                       {.name = "a.w", .dtype = FP_BF16, .ndim = 2, .shape = {1, 3}}};
  const void *data[] = {w, b};
  char p[128], err[256];
  assert_true(fpi_st_write(newpath(p), 2, ts, data, err, sizeof err));
  fp_safetensors *f = NULL;
  assert_int_equal(fp_safetensors_open(p, &f), FP_OK);
  assert_int_equal(fp_safetensors_count(f), 2);
  assert_string_equal(fp_safetensors_name(f, 0), "b.w"); /* in the order of their data */
  assert_string_equal(fp_safetensors_name(f, 1), "a.w");
  assert_null(fp_safetensors_name(f, 2));
  assert_null(fp_safetensors_name(f, -1));
  assert_string_equal(fp_safetensors_errmsg(f), "");
  fp_safetensors_close(f);

  write_bytes(newpath(p), "\x04\0\0\0\0\0\0\0{\"a\"", 12);
  assert_int_equal(fp_safetensors_open(p, &f), FP_ERR_WEIGHTS);
  assert_non_null(f);
  assert_int_equal(fp_safetensors_count(f), 0);
  assert_null(fp_safetensors_name(f, 0));
  if (!strstr(fp_safetensors_errmsg(f), p) || !strstr(fp_safetensors_errmsg(f), "header"))
    fail_msg("got: %s", fp_safetensors_errmsg(f));
  fp_safetensors_close(f);

  assert_int_equal(fp_safetensors_open("/nonexistent/x.safetensors", &f), FP_ERR_WEIGHTS);
  if (!strstr(fp_safetensors_errmsg(f), "/nonexistent/x.safetensors")) fail_msg("got: %s", fp_safetensors_errmsg(f));
  fp_safetensors_close(f);
  assert_int_equal(fp_safetensors_open(NULL, &f), FP_ERR_ARG);
  assert_string_equal(fp_safetensors_errmsg(f), "fp_safetensors_open: path is NULL");
  fp_safetensors_close(f);
  assert_int_equal(fp_safetensors_open(p, NULL), FP_ERR_ARG);
  fp_safetensors_close(NULL);
  assert_int_equal(fp_safetensors_count(NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(round_trip),      cmocka_unit_test(public_names),      cmocka_unit_test(hand_written), cmocka_unit_test(checksums), cmocka_unit_test(broken_files),
      cmocka_unit_test(writer_refusals), cmocka_unit_test(writer_bytes), cmocka_unit_test(random_edits),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
