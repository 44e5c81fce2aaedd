"""flexplan.executor.Executor without torch (raw buffers as memoryviews),
under ``mpiexec -n 2``: test_executor_py.py. Loads the MLP plan of the C
parity tests, refits known values, runs one step's hooks by hand, and checks
the views: the gathered weight after pre_forward equals the loaded tensor,
the main shard equals this rank's extent of it, a hook out of order raises
FlexplanError(FP_ERR_ORDER) naming both hooks and changes nothing, stats
count the hooks. Prints "OK rank r" per rank."""
import os
import struct
import sys
import tempfile

import numpy as np
from safetensors.numpy import save_file

import flexplan
from flexplan.executor import Executor, mpi_init, mpi_finalize

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def main():
    rank, world = mpi_init()
    spec = {"format": "flexplan.spec.v1", "mesh": {"world_size": world}, "strategy": "full_shard",
            "defaults": {"mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "fp32",
                                             "main_grad_dtype": "fp32"}}}
    plan = flexplan.compile(os.path.join(ROOT, "tests", "mpi", "mlp.model.json"), spec)
    shapes = {"fc0.weight": (20, 13), "fc0.bias": (20,), "fc1.weight": (19, 20), "fc1.bias": (19,),
              "fc2.weight": (11, 19), "fc2.bias": (11,), "fc3.weight": (5, 11)}
    vals = {n: (np.arange(np.prod(s), dtype=np.float32) * 0.25 + i).reshape(s) for i, (n, s) in
            enumerate(shapes.items())}
    tmp = tempfile.mkdtemp(prefix=f"fp-ex-{rank}-")
    path = os.path.join(tmp, "w.safetensors")
    save_file(vals, path)
    with Executor(plan) as ex:
        assert ex.world_size == world and ex.modules == ["fc0", "fc1", "fc2", "fc3"], ex.modules
        ex.load_weights([path])
        p = ex.param("fc1.weight")
        full = vals["fc1.weight"].reshape(-1)
        main = p.buffer("main")
        for s, f, n in p.shard.pairs():
            assert list(main[s:s + n]) == full[f:f + n].tolist(), "main shard"
        assert p.shard.held > 0 and all(v == 0 for i, v in enumerate(main) if i >= p.shard.len), "padding"
        ex.step_begin()
        ex.pre_forward(0)
        try:
            ex.hook("pre_forward", 2)
            raise AssertionError("a hook out of order was accepted")
        except flexplan.FlexplanError as e:
            assert e.status_name == "FP_ERR_ORDER", e.status_name
            assert "pre_forward(fc2)" in str(e) and "post_forward(fc0)" in str(e), str(e)
        ex.post_forward(0)
        ex.pre_forward("fc1")
        w = p.buffer("weight")
        assert len(w) == 380 and list(w) == full.tolist(), "gathered weight"
        assert struct.unpack("f", bytes(p.buffer("weight")[:1]))[0] == full[0]
        for m in (1,):
            ex.post_forward(m)
        for m in (2, 3):
            ex.pre_forward(m)
            ex.post_forward(m)
        for m in (3, 2, 1, 0):
            ex.pre_backward(m)
            ex.post_backward(m)
        ex.pre_optimizer()
        ex.post_optimizer()
        ex.sync()
        st = ex.stats()
        assert st["steps"] == 1 and st["hook_allocations"] == 0 and st["refits"] == 1, st
        total = ex.all_reduce_f64([rank + 1.0, 2.0])
        assert total == [world * (world + 1) / 2, 2.0 * world], total
    plan.close()
    print(f"OK rank {rank}", flush=True)
    mpi_finalize()


if __name__ == "__main__":
    sys.exit(main())
