/* replay.c - a main() for the fuzz targets without libFuzzer: runs
 * LLVMFuzzerTestOneInput once on every file named (directories: on every
 * file in them, in name order). The suite builds each target this way with
 * the project's compiler (and under the asan preset with ASan and UBSan) and
 * replays the seed corpus and every saved crash (tests/fuzz/regress), so
 * those inputs stay tested where clang's libFuzzer is missing.
 * usage: fuzz_TARGET_replay PATH... ; exit 0 when every input ran, 1 when a
 * path cannot be read (a failed property aborts). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return perror(path), 1;
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += r;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  int bad = ferror(f) || !buf;
  fclose(f);
  if (bad) return fprintf(stderr, "%s: read error\n", path), free(buf), 1;
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

static int cmp_names(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

int main(int argc, char **argv) {
  int rc = 0, ran = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) return perror(argv[i]), 1;
    if (!S_ISDIR(st.st_mode)) {
      rc |= run_file(argv[i]), ran++;
      continue;
    }
    DIR *dir = opendir(argv[i]);
    if (!dir) return perror(argv[i]), 1;
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(dir));) {
      if (e->d_name[0] == '.' || !strcmp(e->d_name, "README.md")) continue;
      names = realloc(names, (n + 1) * sizeof *names);
      names[n++] = strdup(e->d_name);
    }
    closedir(dir);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    for (size_t k = 0; k < n; k++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
      rc |= run_file(path), ran++;
      free(names[k]);
    }
    free(names);
  }
  fprintf(stderr, "%s: %d inputs replayed\n", argv[0], ran);
  return rc;
}
