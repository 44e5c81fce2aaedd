/* fuzz_safetensors.c - libFuzzer target: the safetensors reader
 * (executor/safetensors.c: what a refit and a checkpoint load read).
 *
 * The input is the whole file (an anonymous memory file, opened by its
 * /proc path as fpi_st_open opens any path). Properties: a refused file
 * leaves a message naming the path; an accepted one holds tensors that lie
 * inside the file, in data order, each found by its name, each readable
 * whole (its first MiB here) and refused one byte past its end. */
#define _GNU_SOURCE /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "executor/safetensors.h"
#include "tests/fuzz/fuzz.h"

static char buf[1 << 20];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_MAX_INPUT) return 0;
  int fd = memfd_create("fuzz.safetensors", 0);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(size == 0 || write(fd, data, size) == (ssize_t)size);
  char path[64], err[512];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  fp_st_file *f = fpi_st_open(path, err, sizeof err);
  if (!f) FUZZ_CHECK(!strncmp(err, path, strlen(path)) && err[strlen(path)] == ':');
  int64_t prev_end = 0;
  for (int i = 0; f && i < fpi_st_count(f); i++) {
    const fp_st_tensor *t = fpi_st_get(f, i);
    FUZZ_CHECK(t && t->offset >= 8 && t->nbytes >= 0 && t->offset + t->nbytes <= (int64_t)size);
    FUZZ_CHECK(t->offset >= prev_end); /* in data order, no overlap */
    prev_end = t->offset + t->nbytes;
    FUZZ_CHECK(fpi_st_find(f, t->name) == t);
    int64_t n = t->nbytes < (int64_t)sizeof buf ? t->nbytes : (int64_t)sizeof buf;
    FUZZ_CHECK(fpi_st_read(f, t, 0, buf, n, err, sizeof err));
    FUZZ_CHECK(!fpi_st_read(f, t, t->nbytes, buf, 1, err, sizeof err));
  }
  FUZZ_CHECK(!f || fpi_st_get(f, fpi_st_count(f)) == NULL);
  fpi_st_close(f);
  close(fd);
  return 0;
}
