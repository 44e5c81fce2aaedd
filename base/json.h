/* json.h - strict JSON input with located errors.
 *
 * json-c parses in strict mode (JSON_TOKENER_STRICT | VALIDATE_UTF8); a
 * pre-scan of the text rejects duplicate object keys (json-c keeps the last
 * silently). json-c objects carry no positions, so an error about a value is
 * located by re-scanning the source text along its RFC 6901 pointer
 * (fp_json_locate in base.h). The accessors below check one member each and
 * report "file:line:col: error: /pointer: message" through the context's
 * diag; they return false on error. `ptr` is always the pointer of `obj`. */
#ifndef FP_JSON_H
#define FP_JSON_H

#include <json-c/json.h>

#include "base.h"

typedef struct fp_jctx {
  fp_arena *a;
  fp_diag *d;
  const fp_src *src;
} fp_jctx;

/* Parse c->src strictly. Syntax errors (and duplicate keys) are located at
 * the offending byte. Returns NULL after reporting. The caller owns the
 * result (json_object_put). */
json_object *fp_json_parse(fp_jctx *c);

/* The JSON string whose opening quote is at t[q], checked strictly (no raw
 * control character, JSON's escapes only, \u with 4 hex digits and never
 * \u0000, surrogates paired): true with *end just past its closing quote;
 * false with *at the offending byte and why (cap bytes) the message. The
 * parser above and readers of their own (ir/xfer_read.c) share it. */
bool fp_json_check_string(const char *t, size_t n, size_t q, size_t *end, size_t *at, char *why, size_t cap);
/* The string at t[q] decoded (tolerantly; a checked one exactly) into out
 * (room for the bytes between its quotes: never more; NULL: only count),
 * its length in *olen (no NUL added); returns the offset past its closing
 * quote (n when unterminated). */
size_t fp_json_decode_string(const char *t, size_t n, size_t q, char *out, size_t *olen);

/* pointer building: ptr + "/" + escaped(key) ; ptr + "/" + i */
const char *fp_ptr_key(fp_arena *a, const char *ptr, const char *key);
const char *fp_ptr_idx(fp_arena *a, const char *ptr, int64_t i);

/* report at ptr (printf-style); always returns false */
bool fp_j_error(fp_jctx *c, const char *ptr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* v must be an object / array (message names the expected type) */
bool fp_j_is_object(fp_jctx *c, json_object *v, const char *ptr);
bool fp_j_is_array(fp_jctx *c, json_object *v, const char *ptr);
/* every member of obj must be named in allowed (NULL-terminated); the error
 * points at the first unknown member */
bool fp_j_keys(fp_jctx *c, json_object *obj, const char *ptr, const char *const *allowed);
/* member or NULL when absent */
json_object *fp_j_get(json_object *obj, const char *key);
/* true when obj is an object holding key (even when its value is null,
 * which fp_j_get cannot tell from absent) */
bool fp_j_has(json_object *obj, const char *key);
/* how a value reads in a message: 4.0, "abc", true, null, an object, ... */
const char *fp_j_describe(fp_arena *a, json_object *v);

/* Typed members. Absent and !required: true, *out untouched.
 * Absent and required: error at ptr ("missing required member 'key'"). */
bool fp_j_int(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required,
              int64_t min, int64_t max, int64_t *out);
bool fp_j_num(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required,
              double min, double max, double *out);
bool fp_j_bool(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required, bool *out);
bool fp_j_str(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required,
              const char **out); /* copied into the arena; non-empty */
/* string member that must be one of names (NULL-terminated); *out = index */
bool fp_j_enum(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required,
               const char *const *names, int *out);
/* array member; *out = the array (or NULL when absent and optional) */
bool fp_j_arr(fp_jctx *c, json_object *obj, const char *ptr, const char *key, bool required,
              json_object **out, size_t *n);
/* the same checks on a bare value (array elements) */
bool fp_j_int_v(fp_jctx *c, json_object *v, const char *ptr, int64_t min, int64_t max, int64_t *out);
bool fp_j_str_v(fp_jctx *c, json_object *v, const char *ptr, const char **out);

#endif
