"""Fault cases for flexplan.torch under mpiexec (test_torch_faults.py):

    torch_fault.py raise   rank 1 raises in the middle of step 2 (in a
                           forward, after some hooks ran); nothing catches
                           it: every rank must end, with an error, no hang
    torch_fault.py other   shard() with the plan of another model: every rank
                           gets FlexplanError naming the first mismatched
                           param; prints "REFUSED: <message>", exits 0
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

torch.set_num_threads(1)

import flexplan  # noqa: E402
import flexplan.torch as fpt  # noqa: E402
from flexplan.executor import mpi_init, mpi_finalize  # noqa: E402

import torch_models as tm  # noqa: E402
from torch_worker import compile_plan, spec_for  # noqa: E402


def main():
    mode = sys.argv[1]
    rank, world = mpi_init()
    tmp = os.environ.get("TMPDIR", "/tmp")
    spec = spec_for("full_shard", {}, world, {})
    if mode == "other":
        other = tm.MLP([12, 24, 25, 20, 6])  # layers.1 is 25 x 24, not 24 x 24
        plan = compile_plan(tm.model_json(other, tm.MLP_UNITS, name="other"), spec,
                            os.path.join(tmp, f"other.{os.getpid()}.plan.json"))
        try:
            fpt.shard(tm.mlp(), plan)
        except flexplan.FlexplanError as e:
            print(f"REFUSED rank {rank}: {e}", flush=True)
            mpi_finalize()
            return 0
        print("NOT REFUSED", flush=True)
        return 1
    model = tm.mlp()
    plan = compile_plan(tm.model_json(model, tm.MLP_UNITS, name="mlp"), spec,
                        os.path.join(tmp, f"mlp.{os.getpid()}.plan.json"))
    st = fpt.shard(model, plan)
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-2)

    def bomb(mod, args):
        if step == 2 and rank == 1:
            raise RuntimeError("injected failure on rank 1 in step 2")
    model.layers[2].register_forward_pre_hook(bomb)
    for step in range(5):
        inp, tgt = tm.batch("mlp", step * world + rank)
        tm.loss_fn("mlp", model, inp, tgt).backward()
        opt.step()
        print(f"rank {rank} step {step} done", flush=True)
    st.close()
    mpi_finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
