/* base.h - what every stage of flexplan shares: one arena per compile,
 * located diagnostics, the dtype table, checked int64 arithmetic and the
 * internal-bug assertion.
 *
 * User errors and internal bugs are kept apart: a user error is reported
 * through an fp_diag as "file:line:col: error: /json/pointer: message" and the
 * caller returns failure; an internal bug is FP_ASSERT, which prints file:line
 * and exits with status 70 (EX_SOFTWARE). */
#ifndef FP_BASE_H
#define FP_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- internal bugs ---------------------------------------------------- */
void fpi_internal_error(const char *file, int line, const char *cond) __attribute__((noreturn));
#define FP_ASSERT(c) ((c) ? (void)0 : fpi_internal_error(__FILE__, __LINE__, #c))

/* ---- arena: one per compile; freed all at once ------------------------ */
typedef struct fp_arena fp_arena;
fp_arena *fpi_arena_new(void);
void fpi_arena_free(fp_arena *a);
void *fpi_alloc(fp_arena *a, size_t bytes);                   /* zeroed, 16-aligned */
void *fpi_alloc_array(fp_arena *a, size_t n, size_t elem);    /* zeroed; asserts no overflow */
/* room for n elements, not zeroed (every element is written before it is read) */
void *fpi_alloc_array_raw(fp_arena *a, size_t n, size_t elem);
void *fpi_memdup(fp_arena *a, const void *src, size_t bytes); /* a copy (not zeroed first) */
char *fpi_strdup(fp_arena *a, const char *s);
/* x, sep and y joined (the names built per buffer and param: no format parse) */
char *fpi_strjoin(fp_arena *a, const char *x, const char *sep, const char *y);
/* x, sep and the decimal digits of i joined */
char *fpi_strjoin_i64(fp_arena *a, const char *x, const char *sep, int64_t i);
char *fpi_strndup(fp_arena *a, const char *s, size_t n);
char *fpi_sprintf(fp_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* growable array helper: doubles *cap, copies old contents; returns new base */
void *fpi_grow(fp_arena *a, void *base, int64_t *cap, int64_t need, size_t elem);
/* the same, the room beyond the old contents not zeroed (for a caller that
 * writes every element it uses: the ops of a program) */
void *fpi_grow_raw(fp_arena *a, void *base, int64_t *cap, int64_t need, size_t elem);
/* give back an array the arena allocated in a chunk of its own (over 64 KiB,
 * or grown by fpi_grow past that) before the arena is freed; anything else
 * stays until fpi_arena_free. p must not be used afterwards. */
void fpi_arena_release(fp_arena *a, void *p);

/* ---- source text, for locating errors --------------------------------- */
typedef struct fp_src {
  const char *path;  /* as the user named it ("-" never: we read files) */
  const char *text;  /* NUL-terminated contents */
  size_t len;        /* bytes, without the NUL */
} fp_src;

/* Read a whole file into the arena. On failure reports "path: error: ..."
 * through d and returns false. Only regular files of at most
 * FP_SRC_MAX_BYTES are read: a directory is "is a directory", a FIFO or
 * device "not a regular file" (never a hang or an endless read). */
#define FP_SRC_MAX_BYTES ((long long)1 << 30) /* 1 GiB: the largest plan.json is tens of MB */
struct fp_diag;
bool fpi_src_read(fp_arena *a, struct fp_diag *d, const char *path, fp_src *out);
/* line and column (1-based; column counts bytes) of a byte offset */
void fpi_src_linecol(const fp_src *s, size_t off, int *line, int *col);

/* ---- diagnostics ------------------------------------------------------ */
/* Messages accumulate in a buffer (so a library handle can keep them) and are
 * optionally echoed to a FILE. */
typedef struct fp_diag {
  char *buf;       /* all messages so far, each ending in '\n' (malloc'd) */
  size_t len, cap;
  int nerrors;
  FILE *echo;      /* NULL: do not print */
  int max_errors;  /* stop recording after this many (0: 1) */
} fp_diag;

void fpi_diag_init(fp_diag *d, FILE *echo);
void fpi_diag_free(fp_diag *d);
/* The generic form: "<where>: error: <msg>\n". */
void fpi_diag_errorf(fp_diag *d, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Error at a byte offset of a source: "path:line:col: error: msg". */
void fpi_diag_at(fp_diag *d, const fp_src *s, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Error at the JSON value named by an RFC 6901 pointer in the source:
 * "path:line:col: error: /ptr: msg". The position is that of the value
 * (found by re-scanning the text; falls back to the nearest existing
 * ancestor when the pointer names a missing member). */
void fpi_diag_json(fp_diag *d, const fp_src *s, const char *ptr, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void fpi_diag_vjson(fp_diag *d, const fp_src *s, const char *ptr, const char *fmt, va_list ap);
/* Byte offset of the value at ptr in s (see fpi_diag_json); *exact=false when
 * an ancestor was used. Implemented in base/json.c. */
size_t fpi_json_locate(const fp_src *s, const char *ptr, bool *exact);
/* The JSON pointer of the value the byte at off lies in ("/" for the top),
 * by a tolerant walk of the text before it (for errors found before
 * parsing, such as a NUL byte). Implemented in base/json.c. */
const char *fpi_json_path_at(fp_arena *a, const fp_src *s, size_t off);

/* ---- dtypes ----------------------------------------------------------- */
/* X(enum suffix, text name, bytes per element, is a float type reducible by
 * collectives) */
#define FP_DTYPES(X)                                                        \
  X(F32, "fp32", 4, 1)       /* IEEE binary32 */                           \
  X(BF16, "bf16", 2, 1)      /* bfloat16: fp32's exponent, 7-bit mantissa */\
  X(F16, "fp16", 2, 1)       /* IEEE binary16 */                           \
  X(E4M3, "e4m3", 1, 0)      /* OCP FP8 E4M3 (MXFP8 element) */            \
  X(E8M0, "e8m0", 1, 0)      /* OCP E8M0 power-of-two scale (MXFP8) */     \
  X(U8, "u8", 1, 0)          /* raw bytes */

typedef enum {
#define X(e, s, n, r) FP_##e,
  FP_DTYPES(X)
#undef X
  FP_NDTYPES
} fp_dtype;

const char *fpi_dtype_name(fp_dtype t);
int fpi_dtype_size(fp_dtype t);
bool fpi_dtype_reducible(fp_dtype t);
/* parse "fp32" etc.; returns -1 if unknown */
int fpi_dtype_parse(const char *s);
/* the dtypes a user may name for weights, grads and reductions */
bool fpi_dtype_is_user_float(fp_dtype t);

/* MXFP8 (OCP microscaling): e4m3 elements, one e8m0 power-of-two scale per
 * block of FP_MX_BLOCK consecutive elements; a flat range of n elements
 * starting on a block boundary has fpi_mx_blocks(n) scales (the last block
 * may be short). kernels/kernels.h's FPK_MX_BLOCK is the same 32. */
#define FP_MX_BLOCK 32
static inline int64_t fpi_mx_blocks(int64_t n) { return n / FP_MX_BLOCK + (n % FP_MX_BLOCK != 0); }

/* ---- checked int64 arithmetic (false on overflow) --------------------- */
static inline bool fpi_add64(int64_t a, int64_t b, int64_t *r) { return !__builtin_add_overflow(a, b, r); }
static inline bool fpi_mul64(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r); }
/* round up to a multiple of m (m > 0) */
static inline bool fpi_align64(int64_t a, int64_t m, int64_t *r) {
  int64_t t;
  if (!fpi_add64(a, m - 1, &t)) return false;
  *r = t / m * m;
  return true;
}
static inline int64_t fpi_ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* the byte alignment of every param start inside a bucket's flat storage
 * (see docs/layout.md for why 256) */
#define FP_PARAM_ALIGN 256

/* ---- a growable string (printer, plan writer, JSON pointers) ------------ */
typedef struct fp_sbuf {
  char *p;          /* malloc'd; NUL-terminated once anything was put */
  size_t len, cap;
} fp_sbuf;
void fpi_sb_grow(fp_sbuf *b, size_t n); /* room for n more bytes and a NUL */
static inline char *fpi_sb_room(fp_sbuf *b, size_t n) {
  if (b->len + n + 1 > b->cap) fpi_sb_grow(b, n);
  return b->p + b->len;
}
static inline void fpi_sb_putn(fp_sbuf *b, const char *s, size_t n) {
  char *q = fpi_sb_room(b, n);
  memcpy(q, s, n);
  b->len += n;
  q[n] = 0;
}
static inline void fpi_sb_puts(fp_sbuf *b, const char *s) { fpi_sb_putn(b, s, strlen(s)); }
static inline void fpi_sb_putc(fp_sbuf *b, char c) {
  char *q = fpi_sb_room(b, 1);
  q[0] = c;
  q[1] = 0;
  b->len++;
}
/* ---- names from the input, as messages print them ---------------------- */
/* Every name that comes from an input file (model, bucket, module, param,
 * hardware names) and is printed to a terminal goes through these (docs/cli.md):
 * printed bare when it is a plain word (no space, quote, backslash or
 * control character), else in double quotes with \" \\ \n \t \r and every
 * other control character (C0, DEL, UTF-8 C1) as \u00hh, so a name cannot
 * forge a line of the output or send a terminal escape. NULL prints as ?. */
void fpi_sb_name(fp_sbuf *b, const char *s);
/* the same into buf (cap >= 16), cut to fit with "..." where too long */
const char *fpi_quote(char *buf, size_t cap, const char *s);
/* the same to f */
void fpi_fput_name(FILE *f, const char *s);
/* always in quotes (a field of a text format: model="..."); NULL as "" */
void fpi_fput_quoted(FILE *f, const char *s);

/* ---- "did you mean" --------------------------------------------------- */
/* The name of NAMES (NULL-terminated) closest to GOT, or NULL when none is
 * close: the one GOT is a prefix of, when only one is; else the one GOT (3
 * characters or more) is a suffix of, when only one is; else the one at the
 * smallest edit distance (insert, delete, substitute, swap two neighbours;
 * ASCII case ignored) when that distance is at most max(1, strlen(GOT) / 4).
 * Used to append `did you mean "x"?` to unknown names (docs/cli.md). */
const char *fpi_closest_name(const char *got, const char *const *names);

/* ---- outputs: whole or not at all ------------------------------------- */
/* A regular file (or a new one) is written to a temporary next to it and
 * renamed over it by fpi_out_commit, so a failed write leaves the old file
 * or nothing. Anything else that exists - a device such as /dev/null, a
 * FIFO - is written in place and never replaced (renaming a temporary over
 * /dev/null would replace the device for every process, as root). A
 * directory is refused (errno EISDIR). Each returns false with errno set;
 * on failure the temporary is gone. */
typedef struct fp_out {
  const char *path; /* where the output goes */
  char *tmp;        /* the temporary (NULL: written in place) */
  FILE *f;
} fp_out;
bool fpi_out_open(fp_out *o, const char *path);
bool fpi_out_commit(fp_out *o); /* flush, close, rename into place */
void fpi_out_abort(fp_out *o);  /* close and remove the temporary */
/* remove every temporary still open (async-signal-safe: for a handler of a
 * fatal signal; the CLI installs one, a library leaves signals alone) */
void fpi_out_unlink_all(void);

/* ---- sorting ----------------------------------------------------------- */
/* sort n keys ascending, each with its val (val may be NULL), stable: a
 * radix sort, 16 bits a pass (8 under 65,536 keys), passes where every key has the same digit
 * skipped; O(n), for the big sorts of a compile (qsort's merge sort with a
 * call per comparison cost 8% of 100,000 units' compile) */
void fpi_sort_u64(uint64_t *key, int32_t *val, int64_t n);
/* sort n records of elem bytes by key(rec, 0), ties by key(rec, 1), ...
 * (nkeys keys, the records' own order last): fpi_sort_u64 over an order,
 * minor key first, then one gather in place; key is called n times per key
 * (and up to nkeys times more per record to find the records in order) */
void fpi_sort_records(void *recs, size_t elem, int64_t n, int nkeys, uint64_t (*key)(const void *rec, int k));

/* ---- names to indices -------------------------------------------------- */
/* An open-addressing map from names to indices. Values: the index of the
 * only entry with that name, or FP_NAMEMAP_DUP when two share it. Lives in
 * the arena it was made in. */
#define FP_NAMEMAP_DUP (-2)
typedef struct fp_namemap {
  fp_arena *a;
  /* per slot the low 32 bits of its name's hash (they place it; a probe
   * reads a name's text only when they match) and its value + 3 (0: an
   * empty slot): a probe reads this array only, one cache line, and the
   * names' array only on a match or to fill a slot */
  struct fp_namemap_slot {
    uint32_t hash;
    int32_t val3;
  } *slots;
  const char **keys;
  int64_t cap;   /* power of two, at least twice count */
  int64_t count; /* names held */
} fp_namemap;
void fpi_namemap_init(fp_namemap *m, fp_arena *a, int64_t n); /* n: expected names */
/* insert name -> i (grows as needed); an existing name becomes FP_NAMEMAP_DUP */
void fpi_namemap_put(fp_namemap *m, const char *name, int32_t i);
/* index, FP_NAMEMAP_DUP, or -1 when absent */
int32_t fpi_namemap_get(const fp_namemap *m, const char *name, size_t len);
/* insert name -> i when absent and return -1; else return what it maps to
 * and change nothing (a get and a put in one probe) */
int32_t fpi_namemap_add(fp_namemap *m, const char *name, int32_t i);

/* For each i < n, first[i] = the lowest j < i whose name(ctx, j) equals
 * name(ctx, i), or -1 (a NULL name: -1, and equal to none). Hashes the
 * names once, radix-sorts 32 bits of each hash and compares text only
 * within equal keys: O(n) and sequential where a map probes at random (the
 * verifier's uniqueness checks, 600,000 buffer names at 100,000 units) */
void fpi_name_firsts(const char *(*name)(const void *ctx, int32_t i), const void *ctx, int32_t n, int32_t *first);

/* ---- hashing ----------------------------------------------------------- */
/* FNV-1a 64 over bytes, chainable (start with FP_FNV_INIT) */
#define FP_FNV_INIT 0xcbf29ce484222325ull
uint64_t fpi_fnv1a(uint64_t h, const void *p, size_t n);
/* the same taken a 64-bit word at a time (the plan's and a transfer's
 * content hashes): xor the word in, multiply by the prime; a string as its
 * length and then 8 bytes a word (NULL: one word of all ones) */
#define FP_FNV_PRIME 0x100000001b3ull
static inline uint64_t fpi_fnv_word(uint64_t h, uint64_t w) { return (h ^ w) * FP_FNV_PRIME; }
uint64_t fpi_fnv_str_words(uint64_t h, const char *s);

#include "../include/flexplan_version.h"
#define FP_VERSION FP_VERSION_STRING /* plan.json's planner_version */

#endif
