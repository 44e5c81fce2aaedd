/* test_plan_edits.c - plan.json edited value by value, its hash kept: the
 * content hash (ir/hash.c) and the reader (ir/plan.c) attacked together.
 *
 * Ranks agree on a plan by its hash, and a loaded plan.json is held to the
 * hash it carries, so every change to what a plan means must change the
 * hash (docs/ir.md: it catches accidents - a corrupted file, a hand edit,
 * ranks holding different plans): a value the hash does not cover is one
 * two ranks can disagree on unseen. Sources: compiled examples and MPI test
 * pairs. Each mutant changes one value of the plan.json text outside its
 * derived parts (memory_timeline and figures, outside the hash by design),
 * two ways: a number moved by one (a fraction doubled), a boolean flipped,
 * a string one character longer; and a value replaced by another value of
 * the same member elsewhere in the file (another buffer's offset, another
 * op's stream, another placement). The values edited: PER_SOURCE spread
 * over the file and the first two of every member (named with the member
 * holding it: "dst.offset", "ops.count"). The reader (the hash checked,
 * rules 1-8) must reject the mutant, or the program it reads must be the
 * original: plan.json written again from it equal to the original's, the
 * derived parts aside. An accepted mutant that reads as another program
 * is a hole: the test fails. The judge is the writer, not the hash.
 *
 * Accepted mutants that read as the original would be values the reader
 * ignores: counted by member (none so far).
 *
 * Tried by deleting each word ir/hash.c hashes, one at a time: the test
 * fails for every field a single edit can change into another valid
 * program; what it cannot see are the structure words (counts, lengths,
 * presence tags), which only a collision between two edits could test, and
 * fields whose every single edit the verifier refuses anyway (world size,
 * tp, optimizer, a buffer's host flag, a module's recompute, a param's
 * dtypes and chunk, a segment's bounds, an op's only_comm) -
 * docs/design.md, "Plans edited, by mutant". */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mutant_sources.h"

/* values changed per source (two mutants each), at most BYTES of plan.json
 * read per source */
#ifdef __SANITIZE_ADDRESS__
#define PER_SOURCE 100
#define BYTES 10000000
#define PER_MEMBER 1
#else
#define PER_SOURCE 1000
#define BYTES 200000000
#define PER_MEMBER 2
#endif

static int fails, nmut, nrej_hash, nrej_other, nsame;
static char first_hash[600], first_other[600];

/* ignored members: name and count */
typedef struct ign {
  char key[64];
  int n;
  char example[300];
} ign;
static ign IG[64];
static int nig;

/* plan.json without its derived members ("memory_timeline", "figures":
 * whole lines of the root object as the writer puts them) */
static char *strip_derived(const char *s) {
  char *o = malloc(strlen(s) + 1), *w = o;
  bool in = false; /* inside a derived member's lines */
  for (const char *l = s; *l;) {
    const char *nl = strchr(l, '\n'), *e = nl ? nl + 1 : l + strlen(l);
    if (!strncmp(l, "  \"", 3)) in = !strncmp(l, "  \"memory_timeline\"", 19) || !strncmp(l, "  \"figures\"", 11);
    else if (l[0] == '}') in = false;
    if (!in) {
      memcpy(w, l, (size_t)(e - l));
      w += e - l;
    }
    l = e;
  }
  *w = 0;
  return o;
}

static char *write_plan(const fp_prog *p) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f || !fpi_plan_write(p, f)) {
    printf("FAIL: plan.json could not be written\n");
    exit(1);
  }
  fclose(f);
  return buf;
}

/* a value of the JSON text: [at, end), the member it belongs to */
#define KEYLEN 64
typedef struct tok {
  int64_t at, end;
  char key[KEYLEN];
  char kind; /* 'n' number, 's' string, 'b' boolean */
} tok;

/* the values of text up to `stop` (the first derived member), each named
 * by its member and the member whose value holds it ("dst.offset",
 * "ops.count", "buckets.[]"; an array's objects take the array's name) */
static int64_t scan(const char *s, int64_t stop, tok *t) {
  int64_t n = 0;
  char stack[32][KEYLEN], pend[KEYLEN] = "";
  int sp = 0;
  bool havep = false;
#define TOP (sp ? stack[(sp < 32 ? sp : 32) - 1] : "")
#define VALUE(kd, a, b)                                                                                          \
  do {                                                                                                          \
    if (t) {                                                                                                    \
      t[n] = (tok){a, b, "", kd};                                                                               \
      snprintf(t[n].key, KEYLEN, "%.*s.%.*s", KEYLEN / 2 - 1, TOP, KEYLEN / 2 - 2,                             \
               havep ? pend : "[]");                                                                            \
    }                                                                                                           \
    n++, havep = false;                                                                                         \
  } while (0)
  for (int64_t i = 0; i < stop;) {
    char ch = s[i];
    if (ch == '"') {
      int64_t j = i + 1;
      while (s[j] != '"') j += s[j] == '\\' ? 2 : 1;
      int64_t k = j + 1;
      while (s[k] == ' ') k++;
      if (s[k] == ':') snprintf(pend, sizeof pend, "%.*s", (int)(j - i - 1), s + i + 1), havep = true;
      else VALUE('s', i, j + 1);
      i = j + 1;
    } else if (ch == '{' || ch == '[') {
      if (sp < 32) snprintf(stack[sp], KEYLEN, "%s", havep ? pend : TOP);
      sp++, havep = false, i++;
    } else if (ch == '}' || ch == ']') {
      sp -= sp > 0, i++;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
      int64_t j = i;
      while (strchr("-+.eE0123456789", s[j])) j++;
      VALUE('n', i, j);
      i = j;
    } else if (!strncmp(s + i, "true", 4) || !strncmp(s + i, "false", 5)) {
      int64_t j = i + (s[i] == 't' ? 4 : 5);
      VALUE('b', i, j);
      i = j;
    } else {
      i++;
    }
  }
#undef VALUE
#undef TOP
  return n;
}

/* another value of the same member as value v, the nearest after it
 * (malloc'd), or NULL */
static char *other_value(const char *s, const tok *t, int64_t nt, int64_t v) {
  const tok *x = &t[v];
  int64_t len = x->end - x->at;
  for (int64_t k = 1; k < nt; k++) {
    const tok *y = &t[(v + k) % nt];
    if (y->kind == x->kind && !strcmp(y->key, x->key) &&
        (y->end - y->at != len || strncmp(s + y->at, s + x->at, (size_t)len))) {
      char *r = malloc((size_t)(y->end - y->at) + 1);
      snprintf(r, (size_t)(y->end - y->at) + 1, "%s", s + y->at);
      return r;
    }
  }
  return NULL;
}

/* the replacement of value v by operator op (malloc'd; NULL: none):
 * 0 a number moved by one (a fraction doubled), a boolean flipped, a string
 * one character longer; 1 another value of the same member */
static char *replace(const char *s, const tok *t, int64_t nt, int64_t v, int op) {
  if (op == 1) return other_value(s, t, nt, v);
  const tok *x = &t[v];
  int len = (int)(x->end - x->at);
  char *r = malloc((size_t)len + 64);
  if (x->kind == 'b') {
    snprintf(r, (size_t)len + 64, "%s", s[x->at] == 't' ? "false" : "true");
  } else if (x->kind == 'n') {
    char num[64];
    snprintf(num, sizeof num, "%.*s", len < 63 ? len : 63, s + x->at);
    if (strpbrk(num, ".eE")) snprintf(r, (size_t)len + 64, "%.17g", 2 * strtod(num, NULL) + (strtod(num, NULL) == 0));
    else snprintf(r, (size_t)len + 64, "%lld", strtoll(num, NULL, 10) + 1);
  } else {
    snprintf(r, (size_t)len + 64, "%.*sx\"", len - 1, s + x->at);
  }
  return r;
}

static void ignored(const char *key, const char *what) {
  int k = 0;
  while (k < nig && strcmp(IG[k].key, key)) k++;
  if (k == nig && nig < 64) {
    snprintf(IG[nig].key, sizeof IG[nig].key, "%s", key);
    snprintf(IG[nig].example, sizeof IG[nig].example, "%s", what);
    nig++;
  }
  if (k < 64) IG[k].n++;
}

static void source(const char *name, const fp_prog *p) {
  char *orig = write_plan(p), *want = strip_derived(orig);
  const char *d1 = strstr(orig, "\n  \"memory_timeline\""), *d2 = strstr(orig, "\n  \"figures\"");
  int64_t stop = d1 ? d1 - orig : d2 ? d2 - orig : (int64_t)strlen(orig);
  int64_t nt = scan(orig, stop, NULL);
  tok *t = malloc(((size_t)nt + 1) * sizeof *t);
  scan(orig, stop, t);
  const char *env = getenv("FP_EDITS_PER_SOURCE"); /* (a quicker run, to try breaking the hash) */
  int64_t per = env ? atoll(env) : PER_SOURCE;
  int64_t take = nt < per ? nt : per, most = BYTES / 2 / (int64_t)strlen(orig);
  take = take < most ? take : most;
  int hole = 0, n0 = nmut;
  /* the values changed: `take` spread over the file, and the first
   * PER_MEMBER of every member (a header's value occurs once) */
  int64_t *site = malloc(((size_t)take + (size_t)nt + 1) * sizeof *site), ns = 0;
  for (int64_t m = 0; m < take; m++) site[ns++] = m * nt / take;
  char keys[256][KEYLEN];
  int nkeys = 0, seen[256];
  for (int64_t v = 0; v < nt; v++) {
    int k = 0;
    while (k < nkeys && strcmp(keys[k], t[v].key)) k++;
    if (k == nkeys && nkeys < 256) memcpy(keys[nkeys], t[v].key, KEYLEN), seen[nkeys++] = 0;
    if (k < nkeys && seen[k]++ < PER_MEMBER) site[ns++] = v;
  }
  for (int64_t m = 0; m < 2 * ns; m++) {
    int64_t v = site[m / 2];
    if (!strcmp(t[v].key, ".hash") || !strcmp(t[v].key, ".format")) continue; /* the check itself, the tag */
    char *rep = replace(orig, t, nt, v, (int)(m % 2));
    if (!rep) continue;
    size_t olen = strlen(orig), rl = strlen(rep);
    char *mut = malloc(olen + rl + 1);
    memcpy(mut, orig, (size_t)t[v].at);
    memcpy(mut + t[v].at, rep, rl);
    strcpy(mut + t[v].at + rl, orig + t[v].end);
    char what[300];
    snprintf(what, sizeof what, "\"%s\": %.*s -> %s", t[v].key, (int)(t[v].end - t[v].at < 80 ? t[v].end - t[v].at : 80),
             orig + t[v].at, rep);
    fp_arena *a = fpi_arena_new();
    fp_diag d;
    fpi_diag_init(&d, NULL);
    fp_src src = {.path = "plan.json", .text = mut, .len = strlen(mut)};
    fp_prog *q = fpi_plan_read_flags(a, &d, &src, 0);
    nmut++;
    if (!q) {
      const char *msg = d.buf ? d.buf : "";
      bool h = strstr(msg, "content hash mismatch") != NULL;
      h ? nrej_hash++ : nrej_other++;
      char *f = h ? first_hash : first_other;
      if (!f[0]) snprintf(f, 600, "%s: %s: %.*s", name, what, (int)strcspn(msg, "\n"), msg);
    } else {
      char *again = write_plan(q), *got = strip_derived(again);
      if (strcmp(got, want)) {
        if (hole++ < 5) printf("FAIL %s: %s: accepted, with the original's hash, but reads as another plan\n", name, what);
        fails++;
      } else {
        nsame++;
        ignored(t[v].key, what);
      }
      free(again);
      free(got);
    }
    fpi_diag_free(&d);
    fpi_arena_free(a);
    free(mut);
    free(rep);
  }
  printf("%-28s %7" PRId64 " values, %5d mutants%s\n", name, nt, nmut - n0, hole ? "  HOLES" : "");
  free(site);
  free(t);
  free(orig);
  free(want);
}

/* the sources: the examples but the largest four (llama3-8b, -70b, -405b,
 * -405b-tp8: plan.json of megabytes, read once per mutant, where the
 * smaller ones have the same members), and the MPI tests' pairs */
static bool large(const char *name) {
  return !strcmp(name, "llama3-8b") || !strcmp(name, "llama3-70b") || !strcmp(name, "llama3-405b") ||
         !strcmp(name, "llama3-405b-tp8");
}

int main(void) {
  fails += fp_mut_sources(source, large);
  printf("\n%d mutants: %d rejected by the hash, %d by the reader or rules 1-8, %d read as the original, %d holes\n",
         nmut, nrej_hash, nrej_other, nsame, fails);
  printf("  the hash:  %s\n  otherwise: %s\n", first_hash, first_other);
  printf("\nvalues changed and read as the original, by member:\n");
  for (int k = 0; k < nig; k++) printf("  %-20s %5d   e.g. %s\n", IG[k].key, IG[k].n, IG[k].example);
  return fails ? 1 : 0;
}
