"""MPI worker: FSDP x TP on the NCCL backend running on the simulated CUDA
device (tests/simdev/, docs/simdev.md), against the MPI backend: 4 ranks as
dp 2 x tp 2, tp_worker.py's tiny Llama with torchtitan's TP plan (torch's TP
collectives on gloo), STEPS steps of AdamW on each backend in the same
process (MPI first). The plan's communicators are one per tp index (stride
2: ranks {0, 2} and {1, 3}), split from the world by the NCCL backend, with
torch's kernels ordered on the simulated streams as in
torch_simdev_worker.py (whose stand-ins this reuses). Every step's loss and
the final main weights must be equal (two dp ranks: one sum order). Rank 0
prints PASS or FAIL; exit 1 on a failure.

usage: mpirun -n 4 python tp_simdev_worker.py DTYPE   (with FLEXPLAN_LIBRARY =
       libflexplan_simdev.so, FP_SIMDEV_HOST_VISIBLE=1, FP_SIMDEV_SEED, FP_MASTER_PORT)"""
import ctypes
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch_simdev_worker as sw  # noqa: E402  (the simulated device's stand-ins for torch's CUDA runtime)
import tp_worker as tw  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import flexplan  # noqa: E402
import flexplan.torch as fpt  # noqa: E402
from flexplan.executor import mpi_abort, mpi_finalize, mpi_init  # noqa: E402

STEPS = 4
DP, TP = 2, 2


def train(backend, rank, world, mesh, plan, data):
    from torch.distributed.tensor.parallel import parallelize_module
    m = tw.tiny_llama()
    parallelize_module(m, mesh["tp"], tw.tp_plan())
    kw = {"backend": "nccl", "rank": rank, "world_size": world} if backend == "nccl" else {}
    st = fpt.shard(m, plan, mesh=mesh, **kw)
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-2, weight_decay=0.01)
    dpi = rank // TP
    losses = []
    with sw.DeviceOrder() if backend == "nccl" else sw._nothing():
        for s in range(STEPS):
            loss = tw.lm_loss(m, data[s][dpi * tw.BATCH:(dpi + 1) * tw.BATCH])
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        mains = {n: p.detach().clone() for n, p in st.named_main_params()}
    st.close()
    return losses, mains


def main():
    dt = sys.argv[1]
    rank, world = mpi_init()
    sw.LIB.cudaSetDevice(rank)  # one simulated device per rank
    tw.init_dist()
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"))
    data = tw.batches(STEPS, DP)
    failed = 0
    try:
        m = tw.tiny_llama()
        from torch.distributed.tensor.parallel import parallelize_module
        parallelize_module(m, mesh["tp"], tw.tp_plan())
        spec = {"format": "flexplan.spec.v1", "mesh": {"world_size": world, "tp": TP},
                "defaults": {"mixed_precision": {"param_dtype": dt, "reduce_dtype": dt, "main_grad_dtype": "fp32"}}}
        plan = flexplan.compile(fpt.describe(m, (data[0][:tw.BATCH],)), spec)
        ref_losses, ref_mains = train("mpi", rank, world, mesh, plan, data)
        losses, mains = train("nccl", rank, world, mesh, plan, data)
        same = ref_losses == losses and all(torch.equal(mains[n], ref_mains[n]) for n in ref_mains)
        failed = 0 if same else 1
        if rank == 0:
            print(f"{'PASS' if same else 'FAIL'} tp {DP}x{TP} {dt} seed={os.environ.get('FP_SIMDEV_SEED')}: losses "
                  f"(nccl on the simulated device) {['%.7f' % x for x in losses]}, mpi "
                  f"{['%.7f' % x for x in ref_losses]}", flush=True)
    except Exception as e:  # a rank failing ends every rank (no hang)
        sys.stdout.write(f"FAIL rank {rank}: {type(e).__name__}: {e}\n")
        traceback.print_exc()
        sys.stdout.flush()
        mpi_abort(1)
    dist.barrier()
    dist.destroy_process_group()
    mpi_finalize()
    return failed


if __name__ == "__main__":
    sys.exit(main())
