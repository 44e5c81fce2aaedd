/* ir_golden.c - runner of the golden .fpir tests.
 *
 *   ir_golden good FILE.fpir [--update]
 *     FILE must parse and verify; its canonical print must equal
 *     FILE.expected (same name, .expected instead of .fpir; --update writes
 *     it), the expected text must print back to itself, and the program
 *     must survive plan.json write/read with the same hash.
 *   ir_golden bad FILE.fpir
 *     FILE's first line is "# expect: <fragment>"; parsing or verifying
 *     FILE must fail with a message containing the fragment.
 *   ir_golden plan FILE.fpir OUT.json
 *     writes FILE's program as plan.json (for the schema test).
 * Exit status 0 pass, 1 fail, 2 usage. */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *b = malloc(cap);
  for (;;) {
    if (n + 1 >= cap) b = realloc(b, cap *= 2);
    size_t r = fread(b + n, 1, cap - n - 1, f);
    n += r;
    if (!r) break;
  }
  fclose(f);
  b[n] = 0;
  if (len) *len = n;
  return b;
}

static int good(const char *path, bool update) {
  int rc = 1;
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_src src;
  char *out = NULL, *want = NULL, *again = NULL, *plan = NULL;
  size_t plen = 0;
  char *exp = malloc(strlen(path) + 16);
  strcpy(exp, path);
  char *dot = strrchr(exp, '.');
  strcpy(dot ? dot : exp + strlen(exp), ".expected");
  if (!fpi_src_read(a, &d, path, &src)) goto done;
  fp_prog *p = fpi_ir_parse(a, &d, &src);
  if (!p || !fpi_ir_verify(p, &d, &src)) goto done;
  out = fpi_ir_print_str(p, NULL);
  if (update) {
    FILE *f = fopen(exp, "wb");
    if (!f || fputs(out, f) < 0 || fclose(f)) {
      fprintf(stderr, "%s: cannot write\n", exp);
      goto done;
    }
  }
  want = slurp(exp, NULL);
  if (!want) {
    fprintf(stderr, "%s: missing (run with --update to create it)\n", exp);
    goto done;
  }
  if (strcmp(out, want)) {
    fprintf(stderr, "%s: the printed program differs from %s; printed:\n%s", path, exp, out);
    goto done;
  }
  /* the expected text is canonical: it prints back to itself */
  fp_src es = {exp, want, strlen(want)};
  fp_prog *q = fpi_ir_parse(a, &d, &es);
  if (!q) goto done;
  again = fpi_ir_print_str(q, NULL);
  if (strcmp(again, want)) {
    fprintf(stderr, "%s: not canonical (print(parse(x)) != x)\n", exp);
    goto done;
  }
  /* and survives plan.json */
  FILE *m = open_memstream(&plan, &plen);
  bool wrote = fpi_plan_write(q, m);
  fclose(m);
  if (!wrote) goto done;
  fp_src ps = {"<plan>", plan, plen};
  fp_prog *r = fpi_plan_read(a, &d, &ps);
  if (!r) goto done;
  if (fpi_prog_hash(r) != fpi_prog_hash(p)) {
    fprintf(stderr, "%s: plan.json round trip changed the program\n", path);
    goto done;
  }
  rc = 0;
done:
  free(exp);
  free(out);
  free(want);
  free(again);
  free(plan);
  fpi_diag_free(&d);
  fpi_arena_free(a);
  return rc;
}

static int bad(const char *path) {
  int rc = 1;
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, NULL);
  fp_src src;
  const char *tag = "# expect: ";
  if (!fpi_src_read(a, &d, path, &src)) {
    fputs(d.buf, stderr);
    goto done;
  }
  if (strncmp(src.text, tag, strlen(tag))) {
    fprintf(stderr, "%s: the first line must be '%s<fragment>'\n", path, tag);
    goto done;
  }
  const char *fb = src.text + strlen(tag), *fe = strchr(fb, '\n');
  char *frag = fpi_strndup(a, fb, fe ? (size_t)(fe - fb) : strlen(fb));
  fp_prog *p = fpi_ir_parse(a, &d, &src);
  bool ok = p && fpi_ir_verify(p, &d, &src);
  if (ok) {
    fprintf(stderr, "%s: expected an error containing '%s', but the program is valid\n", path, frag);
    goto done;
  }
  if (!d.buf || !strstr(d.buf, frag)) {
    fprintf(stderr, "%s: expected an error containing '%s', got:\n%s", path, frag, d.buf ? d.buf : "");
    goto done;
  }
  rc = 0;
done:
  fpi_diag_free(&d);
  fpi_arena_free(a);
  return rc;
}

static int plan(const char *path, const char *out) {
  fp_arena *a = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_src src;
  int rc = 1;
  fp_prog *p = fpi_src_read(a, &d, path, &src) ? fpi_ir_parse(a, &d, &src) : NULL;
  FILE *f = p ? fopen(out, "wb") : NULL;
  if (f) {
    bool ok = fpi_plan_write(p, f);
    rc = fclose(f) == 0 && ok ? 0 : 1;
  }
  fpi_diag_free(&d);
  fpi_arena_free(a);
  return rc;
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "good")) return good(argv[2], argc > 3 && !strcmp(argv[3], "--update"));
  if (argc == 3 && !strcmp(argv[1], "bad")) return bad(argv[2]);
  if (argc == 4 && !strcmp(argv[1], "plan")) return plan(argv[2], argv[3]);
  fprintf(stderr, "usage: ir_golden good FILE.fpir [--update] | bad FILE.fpir | plan FILE.fpir OUT.json\n");
  return 2;
}
