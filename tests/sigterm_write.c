/* sigterm_write.c - an LD_PRELOAD shim for harden31_cli.sh (issue 31, item
 * 5): the first fwrite to a file whose name holds ".tmp." (an output's
 * temporary, base.c fpi_out_open) writes half its bytes, flushes them, and
 * then the process gets SIGTERM, as a `kill` in the middle of a large write
 * would; the test checks that nothing named X.tmp.XXXXXX is left behind. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

size_t fwrite(const void *p, size_t size, size_t n, FILE *f) {
  static size_t (*real)(const void *, size_t, size_t, FILE *);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "fwrite");
  char link[64], name[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fileno(f));
  ssize_t k = readlink(link, name, sizeof name - 1);
  if (k > 0 && size == 1 && n > 1) {
    name[k] = 0;
    if (strstr(name, ".tmp.")) {
      real(p, 1, n / 2, f);
      fflush(f);
      raise(SIGTERM);
    }
  }
  return real(p, size, n, f);
}
