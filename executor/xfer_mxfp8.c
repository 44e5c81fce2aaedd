/* xfer_mxfp8.c - MXFP8 as reshard transforms (include/flexplan.h
 * fp_transform_mxfp8, docs/reshard.md "MXFP8 on the contract"): the built-in
 * `--transform mxfp8` written on the plug-in contract, in its two modes.
 *
 * Sender-side: the sender quantizes its slice (E4M3 elements and E8M0
 * scales, two wire tensors; blocks aligned to the full param, a slice
 * starting inside a block opening with a short block of its own, as
 * xfer.h fpi_tx_nscales says) and the receiver dequantizes into TO.
 * Receiver-side: the slice crosses the wire unchanged (one tensor in FROM's
 * dtype) and the receiver quantizes and dequantizes it on receipt. Both
 * use the C reference kernels (kernels/kernels.h) with the built-in's
 * blocks, so either writes TO's bytes exactly as the built-in does. The
 * transform's user pointer is an fnmatch pattern over param names (NULL:
 * every param whose main dtypes are fp32, bf16 or fp16 on both sides). */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flexplan.h"
#include "ir/xfer.h"
#include "kernels/kernels.h"

static bool is_float(fp_elem e) { return e == FP_ELEM_FP32 || e == FP_ELEM_BF16 || e == FP_ELEM_FP16; }

static int should(void *user, const fp_transform_param *p) {
  return is_float(p->from_dtype) && is_float(p->to_dtype) && (!user || fnmatch(user, p->name, 0) == 0);
}

static fp_status sender_wires(void *user, const fp_transform_param *p, int64_t begin, int64_t count,
                              fp_wire_tensor *out, int *n, char *err, size_t errcap) {
  (void)user, (void)p, (void)err, (void)errcap;
  out[0] = (fp_wire_tensor){FP_ELEM_E4M3, count};
  out[1] = (fp_wire_tensor){FP_ELEM_E8M0, fpi_tx_nscales(begin, count)};
  *n = 2;
  return FP_OK;
}

static fp_status receiver_wires(void *user, const fp_transform_param *p, int64_t begin, int64_t count,
                                fp_wire_tensor *out, int *n, char *err, size_t errcap) {
  (void)user, (void)begin, (void)err, (void)errcap;
  out[0] = (fp_wire_tensor){p->from_dtype, count};
  *n = 1;
  return FP_OK;
}

/* elements [begin, begin + count) of src (st) quantized, blocks as the built-in's */
static void quantize(uint8_t *q, uint8_t *sc, const void *src, fp_dtype st, int64_t begin, int64_t count) {
  int64_t h = fpi_tx_head(begin, count);
  if (h > 0) fpk_quantize_mxfp8(q, sc, src, st, h);
  fpk_quantize_mxfp8(q + h, sc + (h > 0), (const char *)src + h * fpi_dtype_size(st), st, count - h);
}

static void dequantize(void *dst, fp_dtype dt, const uint8_t *q, const uint8_t *sc, int64_t begin, int64_t count) {
  int64_t h = fpi_tx_head(begin, count);
  if (h > 0) fpk_dequantize_mxfp8(dst, dt, q, sc, h);
  fpk_dequantize_mxfp8((char *)dst + h * fpi_dtype_size(dt), dt, q + h, sc + (h > 0), count - h);
}

static fp_status sender_send(void *user, const fp_transform_param *p, int64_t begin, int64_t count, const void *src,
                             void *const *wires, char *err, size_t errcap) {
  (void)user, (void)err, (void)errcap;
  quantize(wires[0], wires[1], src, (fp_dtype)p->from_dtype, begin, count);
  return FP_OK;
}

static fp_status sender_finalize(void *user, const fp_transform_param *p, int64_t begin, int64_t count,
                                 const void *const *wires, void *dst, char *err, size_t errcap) {
  (void)user, (void)err, (void)errcap;
  dequantize(dst, (fp_dtype)p->to_dtype, wires[0], wires[1], begin, count);
  return FP_OK;
}

static fp_status receiver_send(void *user, const fp_transform_param *p, int64_t begin, int64_t count, const void *src,
                               void *const *wires, char *err, size_t errcap) {
  (void)user, (void)begin, (void)err, (void)errcap;
  memcpy(wires[0], src, (size_t)(count * fpi_dtype_size((fp_dtype)p->from_dtype)));
  return FP_OK;
}

static fp_status receiver_finalize(void *user, const fp_transform_param *p, int64_t begin, int64_t count,
                                   const void *const *wires, void *dst, char *err, size_t errcap) {
  (void)user;
  int64_t ns = fpi_tx_nscales(begin, count);
  uint8_t *q = malloc((size_t)(count + ns) + 1);
  if (!q) {
    snprintf(err, errcap, "out of memory (%lld bytes)", (long long)(count + ns));
    return FP_ERR_NOMEM;
  }
  quantize(q, q + count, wires[0], (fp_dtype)p->from_dtype, begin, count);
  dequantize(dst, (fp_dtype)p->to_dtype, q, q + count, begin, count);
  free(q);
  return FP_OK;
}

static const fp_reshard_transform SENDER = {should, sender_wires, sender_wires, sender_send, sender_finalize};
static const fp_reshard_transform RECEIVER = {should, receiver_wires, receiver_wires, receiver_send, receiver_finalize};

const fp_reshard_transform *fp_transform_mxfp8(fp_mxfp8_mode mode) {
  return mode == FP_MXFP8_SENDER ? &SENDER : mode == FP_MXFP8_RECEIVER ? &RECEIVER : NULL;
}
