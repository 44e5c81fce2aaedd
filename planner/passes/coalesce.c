/* coalesce.c - the coalesce pass: small collectives issued back to back on
 * one communicator and stream become one grouped call.
 *
 * The lowering emits a bucket's collectives back to back (one per param), so
 * each would pay the collective's latency once. A run of consecutive ops in
 * one segment, on one stream and one communicator, each moving at most
 * FP_COALESCE_MAX_BYTES on the rank, gets one group id: the executor issues
 * it as one ncclGroupStart/End (the MPI backend starts the requests together)
 * and the cost model charges one latency for the group. Ops keep their own
 * operands, so nothing is copied. A run of one op stays ungrouped. */
#include "passes.h"

/* bytes one collective moves on a rank (its largest operand) */
static int64_t op_bytes(const fp_prog *p, const fp_op *op) {
  int64_t es = fpi_dtype_size(op->dtype), g = p->comms[op->comm].size, n = op->count;
  if (op->tab >= 0) {
    const fp_ir_table *t = &p->tabs[op->tab];
    n = 0;
    for (int64_t j = 0; j < t->n; j++) n += t->cnt[j];
    return n * es;
  }
  if (op->code == FP_OP_ALL_GATHER || op->code == FP_OP_REDUCE_SCATTER) n *= g;
  return n * es;
}

static bool joins(const fp_prog *p, const fp_op *prev, const fp_op *op) {
  return prev->seg == op->seg && prev->stream == op->stream && prev->comm == op->comm &&
         fpi_op_class(prev->code) == FP_OPC_COMM && fpi_op_class(op->code) == FP_OPC_COMM &&
         prev->code != FP_OP_SEND && prev->code != FP_OP_RECV && op->code != FP_OP_SEND &&
         op->code != FP_OP_RECV && op_bytes(p, prev) <= FP_COALESCE_MAX_BYTES &&
         op_bytes(p, op) <= FP_COALESCE_MAX_BYTES;
}

bool fpi_pass_coalesce(fp_pass_ctx *c, fp_prog *p) {
  (void)c;
  int32_t next = 0;
  for (int32_t i = 0; i < p->nops;) {
    int32_t j = i + 1;
    while (j < p->nops && joins(p, &p->ops[j - 1], &p->ops[j])) j++;
    if (j - i > 1) {
      for (int32_t k = i; k < j; k++) p->ops[k].group = next;
      next++;
    }
    i = j;
  }
  return true;
}
