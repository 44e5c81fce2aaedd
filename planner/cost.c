/* cost.c - the cost model (see cost.h; docs/cost-model.md has the sources).
 *
 * Collectives (ring, NCCL's Simple protocol, as src/graph/tuning.cc models
 * it): an op on a communicator instance of S ranks, k of them per node over
 * n nodes, moving B bytes, takes
 *     base_us + (intra steps) * nvlink_hop_us + (inter steps) * net_hop_us
 *   + B * factor / busbw
 * where all_gather / reduce_scatter take S-1 steps, n-1 of them between
 * nodes, and factor (S-1)/S; all_reduce 2(S-1) steps, 2n of them between
 * nodes (NCCL's count, capped at the step count), factor 2(S-1)/S;
 * broadcast / reduce a chain of S-1 steps like all_gather, factor 1; send /
 * recv one step, factor 1. busbw is NVLink's inside one node; across nodes
 * each member brings its own NIC, so the ring gets min(NVLink, k * NIC)
 * (k = 1 for the strided `replica` group of hybrid sharding: one member per
 * node, every step on the network). A communicator of one rank costs
 * nothing.
 *
 * Local kernels: bytes read plus written over hbm_gbps, never less than
 * launch_us; h2d/d2h over pcie_gbps. Compute placeholders: flops over the
 * device rate; the optimizer's placeholder (module -1) is memory-bound over
 * the buffers it uses (Adam: see opt_bytes). Sync ops take no time. */
#include "cost.h"

#include <math.h>
#include <string.h>

/* ---- machines ------------------------------------------------------------------ */
/* Constants shared by both presets (docs/cost-model.md, "Constants"):
 *   nvlink_gbps 370.8  NCCL's SM90 NVLink model, 20.6 GB/s x 18 links
 *                      (src/graph/topo.h SM90_NVLINK_BW); nccl-tests #212/#326
 *                      measure 360-370 GB/s busbw on 8 H100
 *   ib_gbps     48     per 400 Gb/s NDR NIC as NCCL achieves it (nccl-tests #290:
 *                      "46-48GB/s per NIC")
 *   base_us 8.4, nvlink_hop_us 3.4, net_hop_us 14.0
 *                      NCCL tuning.cc baseLat / hwLat, Ring, Simple protocol
 *   launch_us   2      the shortest kernel on H100 (torchao roofline_utils.py
 *                      KERNEL_LAUNCH_OVERHEAD_SEC)
 *   flops       989.5e12  dense BF16 tensor-core peak (datasheets: 1,979
 *                      TFLOPS with sparsity, halved)
 *   pcie_gbps   64     PCIe Gen5 x16 per direction (datasheets: 128 GB/s) */
static const fp_hw presets[] = {
    {.name = "h100-sxm",
     .gpus_per_node = 8,
     .hbm_bytes = (int64_t)80 << 30, /* 80 GB HBM3 */
     .flops = 989.5e12,
     .nvlink_gbps = 370.8,
     .ib_gbps = 48.0,
     .hbm_gbps = 3350.0, /* 3.35 TB/s */
     .pcie_gbps = 64.0,
     .base_us = 8.4,
     .nvlink_hop_us = 3.4,
     .net_hop_us = 14.0,
     .launch_us = 2.0},
    {.name = "h200",
     .gpus_per_node = 8,
     .hbm_bytes = (int64_t)141 << 30, /* 141 GB HBM3e */
     .flops = 989.5e12,
     .nvlink_gbps = 370.8,
     .ib_gbps = 48.0,
     .hbm_gbps = 4800.0, /* 4.8 TB/s */
     .pcie_gbps = 64.0,
     .base_us = 8.4,
     .nvlink_hop_us = 3.4,
     .net_hop_us = 14.0,
     .launch_us = 2.0},
    /* h200-fit: h200 with hbm_gbps refitted to the ten local kernels timed
     * on an H200 (bench/results/nvidia-h200.json, 2026-11-28; the fit is
     * bench/h200_hwfit.py's, its file bench/results/nvidia-h200.hw.json):
     * 3812.8 GB/s where the datasheet says 4800. Nothing else was measured
     * on one GPU (no collective of 2 or more ranks, no compute rate), so the
     * rest is h200's; h200 itself keeps its cited constants. */
    {.name = "h200-fit",
     .gpus_per_node = 8,
     .hbm_bytes = (int64_t)141 << 30,
     .flops = 989.5e12,
     .nvlink_gbps = 370.8,
     .ib_gbps = 48.0,
     .hbm_gbps = 3812.8,
     .pcie_gbps = 64.0,
     .base_us = 8.4,
     .nvlink_hop_us = 3.4,
     .net_hop_us = 14.0,
     .launch_us = 2.0},
    /* cpu-mpi: Open MPI ranks on the CPU cores of one machine (the kind CI
     * runs on: 2 cores, shared memory), fitted by `flexplan calibrate` to
     * 2-rank runs of bench/calib_bench.py on 2026-11-28 (its fit:
     * bench/results/cpu-mpi.hw.json; docs/cost-model.md, "The cpu-mpi
     * preset", gives the run, the residuals and what was not measured).
     * The collectives were fitted to the measured step (their per-op times
     * are the peer's arrival on shared cores): base_us and nvlink_gbps are
     * what a collective costs the step there, peer waits included. Not
     * measured, and so stated: ib_gbps (one node) taken as nvlink_gbps;
     * pcie_gbps (no host copy) as hbm_gbps (host and device memory are one
     * on a CPU); launch_us kept (every kernel timed was longer); hbm_bytes
     * 16 GiB, what a rank may hold on such a machine. */
    {.name = "cpu-mpi",
     .gpus_per_node = 2,
     .hbm_bytes = (int64_t)16 << 30,
     .flops = 2.832e9,
     .nvlink_gbps = 1.778,
     .ib_gbps = 1.778,
     .hbm_gbps = 12.28,
     .pcie_gbps = 12.28,
     .base_us = 2248.0,
     .nvlink_hop_us = 0.001,
     .net_hop_us = 0.001,
     .launch_us = 2.0,
     .hook_us = 44.3},
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

bool fpi_hw_preset(const char *name, fp_hw *out) {
  for (int i = 0; name && i < NPRESETS; i++)
    if (!strcmp(presets[i].name, name)) {
      *out = presets[i];
      return true;
    }
  return false;
}

const char *fpi_hw_preset_list(void) { return "h100-sxm, h200, h200-fit, cpu-mpi"; }

void fpi_hw_from_spec(const fp_spec *s, fp_hw *out) {
  if (s->hw_base) {
    *out = *s->hw_base; /* a hardware file (--hardware FILE) */
  } else {
    bool known = fpi_hw_preset(s->hw_preset, out);
    FP_ASSERT(known); /* the spec parser accepts preset names only */
  }
  if (s->hw_gpus_per_node > 0) out->gpus_per_node = s->hw_gpus_per_node;
  if (s->hw_hbm_bytes > 0) out->hbm_bytes = s->hw_hbm_bytes;
  if (s->hw_flops > 0) out->flops = s->hw_flops;
  if (s->hw_nvlink_gbps > 0) out->nvlink_gbps = s->hw_nvlink_gbps;
  if (s->hw_ib_gbps > 0) out->ib_gbps = s->hw_ib_gbps;
  if (s->hw_hbm_gbps > 0) out->hbm_gbps = s->hw_hbm_gbps;
}

static bool pos(double x) { return isfinite(x) && x > 0; }

bool fpi_hw_valid(const fp_hw *h) {
  return h->name && h->gpus_per_node > 0 && h->hbm_bytes > 0 && pos(h->flops) && pos(h->nvlink_gbps) &&
         pos(h->ib_gbps) && pos(h->hbm_gbps) && pos(h->pcie_gbps) && pos(h->base_us) && pos(h->nvlink_hop_us) &&
         pos(h->net_hop_us) && pos(h->launch_us) && isfinite(h->hook_us) && h->hook_us >= 0;
}

/* ---- communicators on the mesh ---------------------------------------------------- */
fp_comm_geo fpi_comm_geometry(const fp_prog *P, const fp_ir_comm *c) {
  int64_t S = c->size > 0 ? c->size : 1, T = c->stride > 0 ? c->stride : 1;
  int64_t N = P->ranks_per_node > 0 ? P->ranks_per_node : 1;
  int64_t k = T >= N ? 1 : N / T; /* members b, b+T, ... within one node */
  if (k > S) k = S;
  if (k < 1) k = 1;
  fp_comm_geo g = {S, k, S / k + (S % k != 0)};
  return g;
}

/* microseconds to move `bytes` at `gbps` GB/s (1 GB/s = 1e3 bytes/us) */
static double xfer_us(double bytes, double gbps) { return bytes / (gbps * 1e3); }

/* the largest count of a table-driven op over the ranks (the slowest rank) */
static double max_count(const fp_prog *P, const fp_op *op) {
  if (op->tab < 0 || op->tab >= P->ntabs || fpi_op_regions(op->code)) return (double)op->count;
  const fp_ir_table *t = &P->tabs[op->tab];
  int64_t m = 0;
  for (int64_t g = 0; g < t->n; g++)
    if (t->cnt[g] > m) m = t->cnt[g];
  return (double)m;
}

static double sum_count(const fp_prog *P, const fp_op *op) {
  if (op->tab < 0 || op->tab >= P->ntabs) return 0;
  const fp_ir_table *t = &P->tabs[op->tab];
  double s = 0;
  for (int64_t g = 0; g < t->n; g++) s += (double)t->cnt[g];
  return s;
}

static fp_cost comm_cost(const fp_prog *P, const fp_op *op, const fp_hw *hw) {
  fp_cost c = {0, 0};
  if (op->comm < 0 || op->comm >= P->ncomms) return c;
  fp_comm_geo g = fpi_comm_geometry(P, &P->comms[op->comm]);
  double S = (double)g.size, es = fpi_dtype_size(op->dtype), n = (double)op->count;
  if (g.size <= 1) return c;
  double bw = g.nodes == 1 ? hw->nvlink_gbps : fmin(hw->nvlink_gbps, (double)g.per_node * hw->ib_gbps);
  int64_t intra, inter;  /* ring steps inside a node and between nodes */
  double bytes, factor;  /* bytes of the whole op, and NCCL's busbw factor */
  switch (op->code) {
    case FP_OP_ALL_GATHER:
    case FP_OP_REDUCE_SCATTER:
    case FP_OP_ALL_GATHER_V:
    case FP_OP_REDUCE_SCATTER_V:
      inter = g.nodes - 1;
      intra = g.size - 1 - inter;
      bytes = (op->code == FP_OP_ALL_GATHER || op->code == FP_OP_REDUCE_SCATTER ? S * n : sum_count(P, op)) * es;
      factor = (S - 1) / S;
      break;
    case FP_OP_ALL_REDUCE: {
      int64_t steps = 2 * (g.size - 1);
      inter = g.nodes > 1 ? 2 * g.nodes : 0;
      if (inter > steps) inter = steps;
      intra = steps - inter;
      bytes = n * es;
      factor = 2 * (S - 1) / S;
      break;
    }
    case FP_OP_BROADCAST:
    case FP_OP_REDUCE:
      inter = g.nodes - 1;
      intra = g.size - 1 - inter;
      bytes = n * es;
      factor = 1;
      break;
    case FP_OP_SEND:
    case FP_OP_RECV:
      /* one step to the peer: over the network when the instance spans
       * nodes (a single connection: one NIC) */
      inter = g.nodes > 1;
      intra = 1 - inter;
      if (g.nodes > 1) bw = fmin(hw->nvlink_gbps, hw->ib_gbps);
      /* in a group a recv moves what its matching send moves, over the other
       * direction of the same full-duplex links: the send pays for it */
      bytes = op->code == FP_OP_RECV && op->group >= 0 ? 0 : n * es;
      factor = 1;
      break;
    default: FP_ASSERT(!"a collective");
  }
  c.lat_us = hw->base_us + (double)intra * hw->nvlink_hop_us + (double)inter * hw->net_hop_us;
  c.bw_us = xfer_us(bytes * factor, bw);
  return c;
}

/* a copy's rows (at least 1) */
static int64_t rows_of(const fp_prog *P, const fp_op *op) {
  int64_t rows = fpi_op_shape_of(P, op).rows;
  return rows > 0 ? rows : 1;
}

/* bytes a local kernel reads and writes */
static double local_bytes(const fp_prog *P, const fp_op *op) {
  double n = max_count(P, op), d = fpi_dtype_size(op->dtype), s = fpi_dtype_size(op->sdtype);
  switch (op->code) {
    case FP_OP_CAST: return n * (s + d);
    case FP_OP_COPY: return (double)rows_of(P, op) * n * d * 2;
    case FP_OP_SPLIT_COPY:
    case FP_OP_CHUNK_CAT: return (double)rows_of(P, op) * n * (d + s); /* n: one row of every region */
    case FP_OP_ADD: return n * (2 * d + s);
    case FP_OP_SCALE: return n * d * 2;
    case FP_OP_MEMSET: return n * d;
    case FP_OP_QUANTIZE_MXFP8: return n * (s + 1) + ceil(n / 32);
    case FP_OP_DEQUANTIZE_MXFP8: return n * (1 + d) + ceil(n / 32);
    case FP_OP_H2D:
    case FP_OP_D2H: return n; /* n is bytes */
    default: FP_ASSERT(!"a local kernel");
  }
  return 0;
}

/* The optimizer step is memory-bound, one fused pass: it reads and writes
 * the main weights and the optimizer state it lists (2 x their bytes) and
 * reads the grads (1 x): AdamW with fp32 state over fp32 weights, 28 bytes
 * per param. A program that plans no state (optimizer none) is charged as
 * AdamW with state in the main weight's dtype (6 x the weights). Other
 * buffers it lists are counted read and written once. */
static double opt_bytes(const fp_prog *P, const fp_op *op) {
  double b = 0;
  for (int32_t i = 0; i < op->nuses; i++) {
    int32_t u = P->uses[op->uses + i];
    if (u < 0 || u >= P->nbufs) continue;
    const fp_ir_buf *B = &P->bufs[u];
    int w = B->cat == FP_CAT_MAIN_GRAD ? 1 : B->cat == FP_CAT_MAIN_WEIGHT && P->optim == FP_OPTIM_NONE ? 6 : 2;
    b += (double)B->bytes * w;
  }
  return b;
}

fp_cost fpi_cost_terms(const fp_prog *P, const fp_op *op, const fp_hw *hw) {
  fp_cost c = {0, 0};
  switch (fpi_op_class(op->code)) {
    case FP_OPC_COMM: return comm_cost(P, op, hw);
    case FP_OPC_LOCAL: {
      bool host = op->code == FP_OP_H2D || op->code == FP_OP_D2H;
      c.bw_us = fmax(xfer_us(local_bytes(P, op), host ? hw->pcie_gbps : hw->hbm_gbps), hw->launch_us);
      return c;
    }
    case FP_OPC_SYNC: return c;
    case FP_OPC_COMPUTE:
      /* fwd/bwd: the module's flops (alpha); the optimizer (no module):
       * memory-bound over what it uses, or its flops if it states more */
      c.bw_us = op->alpha > 0 ? op->alpha / hw->flops * 1e6 : 0;
      if (op->module < 0 && op->nuses > 0)
        c.bw_us = fmax(c.bw_us, fmax(xfer_us(opt_bytes(P, op), hw->hbm_gbps), hw->launch_us));
      return c;
  }
  return c;
}

double fpi_cost_op_us(const fp_prog *P, const fp_op *op, const fp_hw *hw) {
  fp_cost c = fpi_cost_terms(P, op, hw);
  return c.lat_us + c.bw_us;
}

double fpi_cost_group_us(const fp_prog *P, int32_t first, int32_t n, const fp_hw *hw) {
  double lat = 0, bw = 0;
  for (int32_t i = first; i < first + n; i++) {
    fp_cost c = fpi_cost_terms(P, &P->ops[i], hw);
    lat = fmax(lat, c.lat_us);
    bw += c.bw_us;
  }
  return lat + bw;
}
