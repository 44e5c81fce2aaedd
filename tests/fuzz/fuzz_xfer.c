/* fuzz_xfer.c - libFuzzer target: the transfer loader (ir/xfer_read.c,
 * fpi_tx_read: what fp_xfer_load and `flexplan viz T.xfer.json` read, on
 * every process of a transfer).
 *
 * Properties: a refusal leaves an error located in the file; an accepted
 * transfer passed the verifier, writes back as JSON that reads as itself
 * (the same JSON again), and prints as .fpir, as the explain table and as a
 * trace. */
#include <stdint.h>
#include <string.h>

#include "ir/xfer.h"
#include "tests/fuzz/fuzz.h"

static char *render(const fp_tx *t, void (*f)(const fp_tx *, FILE *), size_t *n) {
  char *buf = NULL;
  FILE *m = open_memstream(&buf, n);
  FUZZ_CHECK(m);
  f(t, m);
  FUZZ_CHECK(fclose(m) == 0);
  return buf;
}

static void write_json(const fp_tx *t, FILE *f) { FUZZ_CHECK(fpi_tx_write_json(t, f)); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_MAX_INPUT) return 0;
  fp_arena *a = fpi_arena_new();
  char *text = fpi_alloc(a, size + 1);
  if (size) memcpy(text, data, size);
  fp_src src = {"fuzz.xfer.json", text, size};
  fp_diag d;
  fpi_diag_init(&d, NULL);
  fp_tx *t = fpi_tx_read(a, &d, &src);
  if (!t) FUZZ_CHECK(d.nerrors > 0 && d.buf && strstr(d.buf, "fuzz.xfer.json"));
  if (t) {
    size_t n1, n2, n;
    char *j1 = render(t, write_json, &n1);
    fp_src back = {"back.xfer.json", j1, n1};
    fp_diag d2;
    fpi_diag_init(&d2, stderr);
    fp_tx *u = fpi_tx_read(a, &d2, &back);
    FUZZ_CHECK(u);
    char *j2 = render(u, write_json, &n2);
    FUZZ_CHECK(n1 == n2 && memcmp(j1, j2, n1) == 0);
    free(render(t, fpi_tx_print, &n));
    free(render(t, fpi_tx_explain, &n));
    free(render(t, fpi_tx_trace, &n));
    free(j1);
    free(j2);
    fpi_diag_free(&d2);
  }
  fpi_diag_free(&d);
  fpi_arena_free(a);
  return 0;
}
