/* json.h - strict JSON input with located errors.
 *
 * fpi_json_parse checks a text strictly and builds it, in the same pass, as a
 * document of fp_jv nodes in the caller's arena: nothing to free, strings
 * decoded and NUL-terminated, object members in document order. Nodes carry
 * no positions, so an error about a value is located by re-scanning the
 * source text along its RFC 6901 pointer (fpi_json_locate in base.h). The
 * fp_j_* readers below check one member each and report
 * "file:line:col: error: /pointer: message" through the context's diag;
 * they return false on error. `ptr` is always the pointer of `obj` (or
 * NULL: see fp_jctx.here). */
#ifndef FP_JSON_H
#define FP_JSON_H

#include "base.h"

typedef struct fp_jctx {
  fp_arena *a;
  fp_diag *d;
  const fp_src *src;
  /* a reader that passes ptr NULL to the fp_j_* functions has it built by
   * here(c), only when an error is reported (NULL: none do) */
  const char *(*here)(const struct fp_jctx *c);
} fp_jctx;

/* ---- the document ------------------------------------------------------ */
typedef enum fp_jtype {
  FP_JNULL,   /* null; fpi_jv_at and fpi_j_get give NULL for it, as for no value */
  FP_JBOOL,   /* true or false: b */
  FP_JINT,    /* a number written without '.' or exponent: i (or u, when big) */
  FP_JDOUBLE, /* any other number: d, and text, its n bytes as written */
  FP_JSTRING, /* s: n bytes of UTF-8 and a NUL (none inside: \u0000 is refused) */
  FP_JARRAY,  /* elems: n values */
  FP_JOBJECT, /* mems: n members in document order, their keys unique */
} fp_jtype;

typedef struct fp_jv fp_jv;
typedef struct fp_jmem fp_jmem;

struct fp_jv {
  uint8_t type; /* fp_jtype */
  bool big;     /* FP_JINT above INT64_MAX: the value is u */
  uint32_t n;   /* string or double text bytes; array elements; object members */
  union {
    bool b;
    int64_t i;
    uint64_t u;
    struct {
      double d;
      const char *text; /* n bytes (NUL-terminated in a document) */
    };
    const char *s;
    const fp_jv *elems;
    struct {
      const fp_jmem *mems;
      /* above FP_JV_LINEAR members: an open hash of member positions + 1
       * (0: empty), fpi_jv_index_cap(n) slots, probed by fp_jmem.hash;
       * smaller objects are searched in order */
      const uint32_t *index;
    };
  };
};

struct fp_jmem {
  const char *key; /* decoded, NUL-terminated */
  uint32_t klen;
  uint32_t hash;   /* low 32 bits of FNV-1a of the key (objects with an index only) */
  fp_jv val;       /* type FP_JNULL for null */
};

#define FP_JV_LINEAR 8
static inline size_t fpi_jv_index_cap(size_t n) {
  size_t c = 16;
  while (c < 2 * n) c *= 2;
  return c;
}

/* Parse c->src strictly into c->a. Syntax errors (and duplicate keys,
 * invalid UTF-8, nesting past 64) are located at the offending byte; a null
 * document is an error too. Returns NULL after reporting. */
const fp_jv *fpi_json_parse(fp_jctx *c);

/* The same without a diag, for a reader whose messages take another form
 * (executor/safetensors.c): NULL with the error's byte offset and its
 * "pointer: message" in *e (the checks of fpi_json_text_ok included). */
typedef struct fp_jerr {
  size_t off;
  char msg[600];
} fp_jerr;
const fp_jv *fpi_json_parse_text(fp_arena *a, const fp_src *s, fp_jerr *e);

/* s as a JSON string, quoted, as json-c wrote it with
 * JSON_C_TO_STRING_NOSLASHESCAPE (plan.json and safetensors headers stay
 * byte-identical): '"' '\\' and control characters escaped, \b \f \n \r \t
 * by name, the rest as \u00xx; NULL as "" */
void fpi_json_put_string(fp_sbuf *b, const char *s);

static inline fp_jtype fpi_jv_type(const fp_jv *v) { return v ? (fp_jtype)v->type : FP_JNULL; }
static inline bool fpi_jv_is(const fp_jv *v, fp_jtype t) { return fpi_jv_type(v) == t; }
/* elements, members or string bytes; 0 for anything else */
static inline size_t fpi_jv_len(const fp_jv *v) {
  fp_jtype t = fpi_jv_type(v);
  return t == FP_JARRAY || t == FP_JOBJECT || t == FP_JSTRING ? v->n : 0;
}
/* element i of an array: NULL when it is null, i is out of range or v is
 * no array */
static inline const fp_jv *fpi_jv_at(const fp_jv *v, size_t i) {
  if (!fpi_jv_is(v, FP_JARRAY) || i >= v->n || v->elems[i].type == FP_JNULL) return NULL;
  return &v->elems[i];
}
/* an FP_JINT's value, INT64_MAX when big */
static inline int64_t fpi_jv_int(const fp_jv *v) { return v->big ? INT64_MAX : v->i; }
/* an FP_JINT's or FP_JDOUBLE's value as a double */
static inline double fpi_jv_num(const fp_jv *v) {
  return v->type == FP_JDOUBLE ? v->d : v->big ? (double)v->u : (double)v->i;
}
/* a string's text; NULL when v is no string */
static inline const char *fpi_jv_str(const fp_jv *v) { return fpi_jv_is(v, FP_JSTRING) ? v->s : NULL; }

/* ---- the pull parser --------------------------------------------------------
 * The same strict scanner, driven by the reader instead of building a tree:
 * values come one at a time in document order, and the reader checks each
 * as it comes (plan.json, whose tree would cost more than the program it
 * holds). It tracks the JSON pointer of the value at the cursor, built only
 * for a message (fpi_jp_ptr). A syntax error stops it: fpi_jp_value and
 * fpi_jp_next return false / -1 and fpi_jp_report reports it as
 * fpi_json_parse would, at its byte. The text must be checked UTF-8 first
 * (fpi_utf8_invalid). */
typedef struct fp_jp fp_jp;
/* what must hold before either reads a text: not empty (nor only
 * whitespace), under 2 GiB, valid UTF-8; false after reporting which */
bool fpi_json_text_ok(fp_arena *a, fp_diag *d, const fp_src *s);
fp_jp *fpi_jp_new(fp_arena *a, const fp_src *src);
/* the next value: a scalar read whole into *out (a string decoded: kept in
 * the arena and NUL-terminated when keep, else its n bytes valid until the
 * next call, and not NUL-terminated); '{' or '[' opened (out->type
 * FP_JOBJECT or FP_JARRAY, n 0), its members or elements then come from
 * fpi_jp_next */
bool fpi_jp_value(fp_jp *p, fp_jv *out, bool keep);
/* the next value, a container read whole and dropped (out->type tells what
 * it was); scalars as fpi_jp_value */
bool fpi_jp_scalar(fp_jp *p, fp_jv *out, bool keep);
/* the innermost open container's next member (its name: *klen bytes at
 * *key, valid until the next call, not NUL-terminated) or element (key may
 * be NULL): 1, its value next; 0: the container closed; -1: error */
int fpi_jp_next(fp_jp *p, const char **key, size_t *klen);
/* the next byte that is not whitespace (0 at the end) */
char fpi_jp_peek(fp_jp *p);
/* only whitespace left (else an error) */
bool fpi_jp_end(fp_jp *p);
/* the pointer of the value at the cursor (of the container, when none of
 * its members or elements has come yet or it just closed) */
const char *fpi_jp_ptr(fp_jp *p);
/* the pointer of the innermost open container (of the object, while one
 * of its member names is being judged) */
const char *fpi_jp_ptr_container(fp_jp *p);
/* the byte offset of the next byte that is not whitespace (the value
 * next), and of the innermost object's current member name (its quote) */
size_t fpi_jp_pos(fp_jp *p);
size_t fpi_jp_key_pos(const fp_jp *p);
/* what text[off] starts, for "expected X, got Y": "a string", "an object", ..., "';'", "the end of the file" */
const char *fpi_json_got(fp_arena *a, const char *text, size_t len, size_t off);
/* report the syntax error that stopped it; false */
bool fpi_jp_report(fp_jp *p, fp_diag *d);
/* where the cursor is, to come back to (a value read later): the cursor and
 * the innermost open container; the containers around it must be the same
 * when fpi_jp_seek comes back */
typedef struct fp_jp_mark {
  size_t i, key;
  int64_t idx;
  int nseg;
  bool is_obj, first;
} fp_jp_mark;
void fpi_jp_mark(const fp_jp *p, fp_jp_mark *m);
void fpi_jp_seek(fp_jp *p, const fp_jp_mark *m);

/* pointer building: ptr + "/" + escaped(key) ; ptr + "/" + i */
const char *fpi_ptr_key(fp_arena *a, const char *ptr, const char *key);
const char *fpi_ptr_idx(fp_arena *a, const char *ptr, int64_t i);

/* report at ptr (printf-style); always returns false */
bool fpi_j_error(fp_jctx *c, const char *ptr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* v must be an object / array (message names the expected type) */
bool fpi_j_is_object(fp_jctx *c, const fp_jv *v, const char *ptr);
bool fpi_j_is_array(fp_jctx *c, const fp_jv *v, const char *ptr);
/* every member of obj must be named in allowed (NULL-terminated); the error
 * points at the first unknown member (the members check below) */
bool fpi_j_keys(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *const *allowed);

/* ---- the members check ---------------------------------------------------
 * One check of an object's member names, shared by every reader: the
 * document's (fpi_j_keys, and the "missing required member" of the typed
 * members below) and the pull readers of plan.json (ir/plan.c) and of
 * transfer programs (ir/xfer_read.c). A member must be one of names, come
 * at most once, and the required ones must all come. One wording per fault,
 * whoever reads:
 *   unknown member 'k' (expected one of: a, b, c); did you mean "b"?
 *   duplicate member 'k'
 *   missing required member 'k'
 * The caller reports the message where its reader locates things: the
 * first two at the member (its pointer), the third at the object. (The
 * tree parser finds duplicates as it parses and adds where the first one
 * is; a pull reader, which keeps no positions, cannot.) */
typedef struct fp_jkeys {
  const char *const *names; /* NULL-terminated; at most 32 when required or seen matter */
  uint32_t required;        /* a mask over names */
  uint32_t seen;            /* the names met so far */
  int last;                 /* the index last met: the one after it is tried first (writers keep the order) */
} fp_jkeys;
void fpi_jkeys_init(fp_jkeys *k, const char *const *names, uint32_t required);
/* the member named key (kl bytes): its index in names, now seen; or -1 with
 * *msg the fault (unknown or duplicate), in a */
int fpi_jkeys_member(fp_jkeys *k, fp_arena *a, const char *key, size_t kl, const char **msg);
/* after the object closed: NULL, or the fault about the first required
 * name (in names' order) that did not come */
const char *fpi_jkeys_missing(const fp_jkeys *k, fp_arena *a);
/* the wording of that fault for one name (the typed readers' required members) */
const char *fpi_j_missing_msg(fp_arena *a, const char *key);
/* member, or NULL when absent or null (or obj is no object) */
const fp_jv *fpi_j_get(const fp_jv *obj, const char *key);
/* true when obj is an object holding key (even when its value is null,
 * which fpi_j_get cannot tell from absent) */
bool fpi_j_has(const fp_jv *obj, const char *key);
/* how a value reads in a message: 4.0, "abc", true, null, an object, ... */
const char *fpi_j_describe(fp_arena *a, const fp_jv *v);

/* Typed members. Absent and !required: true, *out untouched.
 * Absent and required: error at ptr ("missing required member 'key'"). */
bool fpi_j_int(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
              int64_t min, int64_t max, int64_t *out);
bool fpi_j_num(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
              double min, double max, double *out);
bool fpi_j_bool(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required, bool *out);
bool fpi_j_str(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
              const char **out); /* the document's own string; non-empty */
/* string member that must be one of names (NULL-terminated); *out = index */
bool fpi_j_enum(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
               const char *const *names, int *out);
/* array member; *out = the array (or NULL when absent and optional) */
bool fpi_j_arr(fp_jctx *c, const fp_jv *obj, const char *ptr, const char *key, bool required,
              const fp_jv **out, size_t *n);
/* the same checks on a bare value (array elements) */
bool fpi_j_int_v(fp_jctx *c, const fp_jv *v, const char *ptr, int64_t min, int64_t max, int64_t *out);
bool fpi_j_str_v(fp_jctx *c, const fp_jv *v, const char *ptr, const char **out);

#endif
