"""flexplan.torch inside a whole-step CUDA graph capture (docs/torch.md,
"One graph per step"): the capture contract where the CPU can check it, on
the NCCL backend over the simulated device (torch_capture_worker.py says
what it checks and how torch.cuda.graph is stood in for), at 1 and 2 ranks,
fp32 and bf16 compute, two scheduler seeds."""
import os

import pytest

from torch_mpi import run_mpi

LIB = os.environ.get("FLEXPLAN_SIMDEV_LIBRARY")


@pytest.mark.parametrize("np_,seed", [(1, 1), (2, 2)])
def test_torch_capture_contract(np_, seed):
    if not LIB or not os.path.exists(LIB):
        pytest.skip("libflexplan_simdev.so not built (FLEXPLAN_SIMDEV_LIBRARY)")
    env = {"FLEXPLAN_LIBRARY": LIB, "FP_SIMDEV_HOST_VISIBLE": "1", "FP_SIMDEV_SEED": str(seed),
           "FP_SIMDEV_HANG_S": "120"}
    rc, out = run_mpi(np_, "torch_capture_worker.py", "mlp_full_shard", "llama_bf16", timeout=600, env=env)
    lines = [l for l in out.splitlines() if l.split(" ", 1)[0] in ("PASS", "FAIL")]
    print("\n".join(lines))
    assert rc == 0 and lines and all(l.startswith("PASS") for l in lines), out[-6000:]
    assert len(lines) == 2 * 16, out[-6000:]
