/* optim.h - the optimizers a plan sizes state for. The spec names one
 * (planner/spec.c, "optimizer": {"type": ...}); the layout gives every
 * trainable param that many state slots of its main-grad shard's extent; the
 * IR records the kind and the state dtype in its header (ir/print.c, ir/plan.c)
 * and the executor hands each slot out as a view. A leaf header: its one
 * table is static, so it includes nothing and links nothing. */
#ifndef FP_OPTIM_H
#define FP_OPTIM_H

/* X(enum, name, states): states = element-wise state tensors per main element */
#define FP_OPTIMS(X)                                                         \
  X(NONE, "none", 0)   /* nothing planned: the trainer keeps its own state */ \
  X(SGD, "sgd", 1)     /* SGD with momentum: momentum_buffer */               \
  X(ADAMW, "adamw", 2) /* Adam / AdamW: exp_avg, then exp_avg_sq */
typedef enum {
#define X(e, s, n) FP_OPTIM_##e,
  FP_OPTIMS(X)
#undef X
  FP_NOPTIMS
} fp_optim;

/* "none" / "sgd" / "adamw", or NULL for a value out of range */
static inline const char *fpi_optim_name(int k) {
  static const char *const names[] = {
#define X(e, s, n) s,
      FP_OPTIMS(X)
#undef X
  };
  return k >= 0 && k < FP_NOPTIMS ? names[k] : NULL;
}
/* state tensors per main element (0 for a value out of range) */
static inline int fpi_optim_states(int k) {
  static const int n[] = {
#define X(e, s, c) c,
      FP_OPTIMS(X)
#undef X
  };
  return k >= 0 && k < FP_NOPTIMS ? n[k] : 0;
}

#endif
