/* irpriv.h - what the files of ir/ share and nobody else needs: the name
 * tables of param placements, the bare form of names (unquoted in .fpir),
 * the shortest round-trip form of a double, and the verifier's entry point
 * with a caller-chosen way of locating messages (plan.c locates them in
 * plan.json by JSON pointer). The map from names to indices the parser and
 * the printer use is base's fp_namemap. */
#ifndef FP_IRPRIV_H
#define FP_IRPRIV_H

#include <string.h>

#include "ir.h"
#include "../base/placement.h"

/* ---- param placements (fp_placement_kind, base/placement.h) ------------ */
#define FP_IR_NPLACEMENTS FP_NPLACEMENTS_IR
const char *fpi_ir_placement_name(int k); /* "?" when out of range */
int fpi_ir_placement_parse(const char *s); /* -1 if unknown */

/* shortest decimal text that reads back (strtod) as exactly d: the first
 * "%.Pg" (P = 1..17) that does; "nan", "inf", "-inf" otherwise. Returns the
 * length of the text. */
size_t fpi_fmt_double(char buf[40], double d);

/* fp_sbuf, the growable string, is in base.h */
/* decimal digits of v into the end of t[0..20); returns where they start */
static inline char *fpi_u64_digits(char t[20], uint64_t v) {
  char *q = t + 20;
  do {
    *--q = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  return q;
}
/* "%" PRId64 */
static inline void fpi_sb_i64(fp_sbuf *b, int64_t v) {
  char t[21];
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  char *q = fpi_u64_digits(t + 1, u);
  if (v < 0) *--q = '-';
  fpi_sb_putn(b, q, (size_t)(t + 21 - q));
}
/* fpi_fmt_double's text */
static inline void fpi_sb_double(fp_sbuf *b, double d) {
  char *q = fpi_sb_room(b, 40);
  b->len += fpi_fmt_double(q, d);
}

/* bare names print without quotes: [A-Za-z_][A-Za-z0-9_.:/-]* */
bool fpi_ir_name_is_bare(const char *s);

/* ---- the modeled machine ------------------------------------------------ */
/* fp_hw's fields after its name, in the order .fpir and plan.json write
 * them: key, byte offset in fp_hw, whether it is an int64 (else double), and
 * whether it is optional: 0 means "not modeled", allowed, and then left out
 * of .fpir, plan.json and the plan hash (so plans written before the field
 * existed read, print and hash as they did) */
typedef struct fp_hw_field {
  const char *key;
  size_t off;
  bool integer;
  bool optional;
} fp_hw_field;
#define FP_HW_NFIELDS 12
/* is field k left out of h (optional and 0) */
#define FPI_HW_OMITTED(h, k) (fp_hw_fields[k].optional && fpi_hw_getd(h, k) == 0)
extern const fp_hw_field fp_hw_fields[FP_HW_NFIELDS];
static inline int64_t *fpi_hw_int(fp_hw *h, int k) { return (int64_t *)((char *)h + fp_hw_fields[k].off); }
static inline double *fpi_hw_dbl(fp_hw *h, int k) { return (double *)((char *)h + fp_hw_fields[k].off); }
static inline int64_t fpi_hw_geti(const fp_hw *h, int k) { return *(const int64_t *)((const char *)h + fp_hw_fields[k].off); }
static inline double fpi_hw_getd(const fp_hw *h, int k) { return *(const double *)((const char *)h + fp_hw_fields[k].off); }

/* ---- plan.json ---------------------------------------------------------- */
/* fpi_plan_read refuses a plan whose content hash does not match; the fuzz
 * targets (tests/fuzz) clear this so that mutated plans reach the tables'
 * checks and the verifier. Never cleared anywhere else. */
extern bool fp_plan_check_hash;

/* ---- verifier with a locator ------------------------------------------ */
/* what a verifier message is about */
typedef enum {
  FP_VL_PROG,   /* the program's header */
  FP_VL_COMM,   /* comms[i] */
  FP_VL_TAB,    /* tabs[i] */
  FP_VL_BUF,    /* bufs[i] */
  FP_VL_MODULE, /* mods[i] */
  FP_VL_BUCKET, /* buckets[i] */
  FP_VL_PARAM,  /* params[i] */
  FP_VL_SEG,    /* segs[i] */
  FP_VL_OP,     /* ops[i] */
  FP_VL_LIVE,   /* lives[i] */
} fp_vloc;
/* report msg about (what, i); ctx is the caller's */
typedef void (*fp_vreport)(void *ctx, const fp_prog *p, fp_vloc what, int64_t i, const char *msg);
bool fpi_ir_verify_with(const fp_prog *p, fp_vreport report, void *ctx, unsigned flags);
/* rule 9 alone (ir/verify_sem.c): for a program that passes rules 1-8 */
bool fpi_ir_verify_sem_with(const fp_prog *p, fp_vreport report, void *ctx);

#endif
