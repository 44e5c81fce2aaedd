/* safetensors.h - a strict reader of safetensors files, safe on hostile
 * input, and a small writer for tests and examples.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * JSON header (an object: tensor name -> {"dtype", "shape", "data_offsets"},
 * plus an optional "__metadata__" object of strings), then the data buffer;
 * data_offsets are [begin, end) inside the data buffer. fpi_st_open checks
 * everything before anything is used: N against the file and a 100 MB
 * limit, strict JSON (no duplicate names, no \u0000 in names), every
 * member's type, supported dtypes, dims >= 0, int64 overflow, and that the
 * tensors tile the data buffer exactly - no overlap, no hole, no trailing
 * bytes - as the format requires. The rules and messages are in
 * docs/kernels.md. Reads are pread()s into the caller's memory: the open file
 * allocates nothing after fpi_st_open. */
#ifndef FP_SAFETENSORS_H
#define FP_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h" /* fp_dtype */

/* one tensor of an open file */
typedef struct fp_st_tensor {
  const char *name;   /* owned by the file (by the caller when writing) */
  fp_dtype dtype;     /* F32, BF16, F16, F8_E4M3, F8_E8M0, U8 -> FP_F32 .. FP_U8 */
  int ndim;           /* 0 (a scalar) .. FP_ST_MAX_DIMS */
  int64_t shape[8];   /* each >= 0 */
  int64_t offset;     /* absolute file offset of the data (ignored by fpi_st_write) */
  int64_t nbytes;     /* = prod(shape) * dtype size (ignored by fpi_st_write) */
} fp_st_tensor;

#define FP_ST_MAX_DIMS 8
#define FP_ST_MAX_HEADER 100000000 /* bytes of JSON header, as the reference implementation */

typedef struct fp_st_file fp_st_file;

/* Open and validate. On failure returns NULL and writes "path: message"
 * into err (errlen bytes, truncated, NUL-terminated; err may be NULL). */
fp_st_file *fpi_st_open(const char *path, char *err, size_t errlen);
int fpi_st_count(const fp_st_file *f);
/* tensors in the order of their data in the file (zero-byte tensors at the
 * same offset by name); NULL when i is out of range */
const fp_st_tensor *fpi_st_get(const fp_st_file *f, int i);
/* by exact name (binary search); NULL when absent */
const fp_st_tensor *fpi_st_find(const fp_st_file *f, const char *name);
/* Read nbytes at byte `at` of t's data into dst (pread, retried on EINTR
 * and partial reads). False with "path: tensor "name": ..." in err when t
 * is not a tensor of f, the range is outside t's data, or the file ended
 * early (truncated after it was opened) or a read failed. Allocates
 * nothing. */
bool fpi_st_read(fp_st_file *f, const fp_st_tensor *t, int64_t at, void *dst, int64_t nbytes, char *err,
                size_t errlen);
void fpi_st_close(fp_st_file *f); /* NULL is fine */

/* Write n tensors (name, dtype, ndim, shape used; offset and nbytes
 * computed) with their data (data[i]: prod(shape) * size bytes; may be NULL
 * when that is 0), in the order given, data 8-byte aligned. False with
 * "path: message" in err on a bad tensor (duplicate or reserved name,
 * unsupported dtype, bad shape) or an I/O error; a failed write leaves no
 * file behind. */
bool fpi_st_write(const char *path, int n, const fp_st_tensor *tensors, const void *const *data, char *err,
                 size_t errlen);

/* the safetensors dtype name of t ("F32", ...), NULL when it has none */
const char *fpi_st_dtype_name(fp_dtype t);

#endif
