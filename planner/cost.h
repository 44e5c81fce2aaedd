/* cost.h - the cost model: how long one op takes on a modeled machine.
 *
 * Collectives follow NCCL's own alpha-beta model of a ring (latency = base +
 * per-step latency over NVLink or the network; bandwidth = NCCL's bus
 * bandwidth inside a node, the NICs' between nodes); local kernels are bytes
 * moved over HBM bandwidth, never shorter than a kernel launch; the
 * trainer's compute is flops over the device's rate. The machines are
 * presets (h100-sxm, h200, h200-fit, cpu-mpi) that a spec may override field by field.
 * docs/cost-model.md states the model and cites every constant. Every
 * figure this file gives is modeled, not measured. */
#ifndef FP_COST_H
#define FP_COST_H

#include "../ir/ir.h"
#include "front.h"

/* the preset of that name into *out; false (out untouched) when unknown */
bool fpi_hw_preset(const char *name, fp_hw *out);
/* the preset names, for messages: "h100-sxm, h200, h200-fit, cpu-mpi" */
const char *fpi_hw_preset_list(void);
/* the spec's hardware: its preset (or hw_base, from a hardware file), then
 * its overrides (fields > 0) */
void fpi_hw_from_spec(const fp_spec *s, fp_hw *out);
/* every field a positive finite number */
bool fpi_hw_valid(const fp_hw *hw);

/* where one instance of a communicator lies on the mesh (ranks_per_node
 * from the program): members per node and nodes spanned */
typedef struct fp_comm_geo {
  int64_t size;     /* members (S) */
  int64_t per_node; /* members sharing a node (k); 1 when the stride spans a node */
  int64_t nodes;    /* nodes the instance spans: ceil(S / k) */
} fp_comm_geo;
fp_comm_geo fpi_comm_geometry(const fp_prog *P, const fp_ir_comm *c);

/* an op's modeled time as a latency and a bandwidth term, in microseconds
 * (local kernels and compute: all in bw_us) */
typedef struct fp_cost {
  double lat_us;
  double bw_us;
} fp_cost;
fp_cost fpi_cost_terms(const fp_prog *P, const fp_op *op, const fp_hw *hw);
/* lat_us + bw_us of one op issued alone */
double fpi_cost_op_us(const fp_prog *P, const fp_op *op, const fp_hw *hw);
/* a grouped call, ops[first .. first+n): issued as one, it pays the largest
 * latency of its members once, plus the sum of their bandwidth terms */
double fpi_cost_group_us(const fp_prog *P, int32_t first, int32_t n, const fp_hw *hw);

#endif
