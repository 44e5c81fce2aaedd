/* xfer_mxfp8.c - MXFP8 as reshard transforms (include/flexplan.h
 * fp_transform_mxfp8, docs/reshard.md "MXFP8 on the contract"): the built-in
 * `--transform PATTERN=mxfp8` on the plug-in contract, in its two modes;
 * the one code path of MXFP8 on the wire. The planner knows the built-ins'
 * names and wire shapes (ir/xfer.h fpi_xf_builtin_shapes, which the wire
 * functions here call too); fpx_xf_builtin binds a transfer's built-in
 * names to these tables at run time, so a transfer naming "mxfp8",
 * "mxfp8_sender" or "mxfp8_receiver" needs no fp_xfer_bind_transforms.
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

static int should(void *user, const fp_transform_param *p) {
  return fpi_xf_mxfp8_takes((fp_dtype)p->from_dtype, (fp_dtype)p->to_dtype) && (!user || fnmatch(user, p->name, 0) == 0);
}

/* fp_wire_tensor is fp_tx_wire (api/transforms.c asserts it) */
static fp_status sender_wires(void *user, const fp_transform_param *p, int64_t begin, int64_t count,
                              fp_wire_tensor *out, int *n, char *err, size_t errcap) {
  (void)user, (void)err, (void)errcap;
  fpi_xf_mxfp8_wires(0, (fp_dtype)p->from_dtype, begin, count, (fp_tx_wire *)out, n);
  return FP_OK;
}

static fp_status receiver_wires(void *user, const fp_transform_param *p, int64_t begin, int64_t count,
                                fp_wire_tensor *out, int *n, char *err, size_t errcap) {
  (void)user, (void)err, (void)errcap;
  fpi_xf_mxfp8_wires(1, (fp_dtype)p->from_dtype, begin, count, (fp_tx_wire *)out, n);
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

/* the tables as the executor calls a transform (ir/xfer.h fpi_xform; ctx:
 * the table), for the built-in names: the shapes are the planner's */
static fp_transform_param pub(const fpi_xf_param *p) {
  return (fp_transform_param){p->name, p->numel, (fp_elem)p->from, (fp_elem)p->to};
}

static bool run_send(void *ctx, const fpi_xf_param *p, int64_t begin, int64_t count, const void *src,
                     void *const *wires, char *err, size_t errcap) {
  const fp_reshard_transform *tab = ctx;
  fp_transform_param q = pub(p);
  return tab->prepare_send(NULL, &q, begin, count, src, wires, err, errcap) == FP_OK;
}

static bool run_finalize(void *ctx, const fpi_xf_param *p, int64_t begin, int64_t count, const void *const *wires,
                         void *dst, char *err, size_t errcap) {
  const fp_reshard_transform *tab = ctx;
  fp_transform_param q = pub(p);
  return tab->finalize_recv(NULL, &q, begin, count, wires, dst, err, errcap) == FP_OK;
}

static bool run_should(void *ctx, const fpi_xf_param *p) {
  const fp_reshard_transform *tab = ctx;
  fp_transform_param q = pub(p);
  return tab->should_transform(NULL, &q) != 0;
}

static bool run_wires(void *ctx, bool recv, const fpi_xf_param *p, int64_t begin, int64_t count, fp_tx_wire *out,
                      int *n, char *err, size_t errcap) {
  const fp_reshard_transform *tab = ctx;
  fp_transform_param q = pub(p);
  return (recv ? tab->recv_wires : tab->send_wires)(NULL, &q, begin, count, (fp_wire_tensor *)out, n, err, errcap) ==
         FP_OK;
}

const fpi_xform *fpx_xf_builtin(const char *name) {
  static const fpi_xform v[3] = {
      {"mxfp8", (void *)&SENDER, run_should, run_wires, run_send, run_finalize},
      {"mxfp8_sender", (void *)&SENDER, run_should, run_wires, run_send, run_finalize},
      {"mxfp8_receiver", (void *)&RECEIVER, run_should, run_wires, run_send, run_finalize}};
  for (int k = 0; k < 3; k++)
    if (name && !strcmp(name, v[k].name)) return &v[k];
  return NULL;
}
