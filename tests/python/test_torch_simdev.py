"""flexplan.torch on the NCCL backend, on the simulated CUDA device
(docs/simdev.md), against the MPI backend at 1 to 3 ranks: every step's loss
and the final main weights (torch_simdev_worker.py says how torch's kernels
are ordered on the simulated streams). The stream contract of
docs/cuda.md: torch on its default stream (the legacy stream), on a side
stream, and on another stream every step; and the first H200 run's bug
planted back (the executor on a stream of its own while torch computes on
the legacy stream) must make the runs differ - it trained on zeros there,
and does here."""
import os

import pytest

from torch_mpi import run_mpi

LIB = os.environ.get("FLEXPLAN_SIMDEV_LIBRARY")
CONFIGS = ["mlp_full_shard", "llama_full_shard", "llama_bf16", "mlp_shard_grad_op", "mlp_no_shard", "llama_ga2"]


def run(np_, stream, configs, seed):
    if not LIB or not os.path.exists(LIB):
        pytest.skip("libflexplan_simdev.so not built (FLEXPLAN_SIMDEV_LIBRARY)")
    env = {"FLEXPLAN_LIBRARY": LIB, "FP_SIMDEV_HOST_VISIBLE": "1", "FP_SIMDEV_SEED": str(seed),
           "FP_SIMDEV_HANG_S": "120"}
    rc, out = run_mpi(np_, "torch_simdev_worker.py", stream, *configs, timeout=600, env=env)
    lines = [l for l in out.splitlines() if l.split(" ", 1)[0] in ("PASS", "FAIL", "DIFF")]
    print("\n".join(lines))
    return rc, out, lines


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_simdev_torch_parity(np_):
    rc, out, lines = run(np_, "legacy", CONFIGS, seed=np_)
    assert rc == 0 and len([l for l in lines if l.startswith("PASS")]) == len(CONFIGS), out[-6000:]


@pytest.mark.parametrize("stream", ["side", "switch"])
def test_simdev_torch_stream(stream):
    rc, out, lines = run(2, stream, ["mlp_full_shard", "llama_full_shard"], seed=7)
    assert rc == 0 and len([l for l in lines if l.startswith("PASS")]) == 2, out[-6000:]


def test_simdev_torch_mutation_untold_stream():
    caught = []
    for seed in (1, 2, 3):
        rc, out, lines = run(2, "untold", ["llama_full_shard"], seed=seed)
        assert rc == 0, out[-6000:]
        if any(l.startswith("DIFF") for l in lines):
            caught.append(seed)
    print(f"the planted H200 bug was caught under seeds {caught}")
    assert caught, "torch on the legacy stream with the plan on an unordered stream of its own went unnoticed"


@pytest.mark.parametrize("dtype,seed", [("fp32", 1), ("bf16", 2)])
def test_simdev_fsdp_x_tp(dtype, seed):
    """FSDP x TP on a dp 2 x tp 2 mesh (tp_simdev_worker.py): the NCCL
    backend's communicators split per tp index, under an adversarial
    scheduler seed, every step's loss and the main weights equal to the MPI
    backend's"""
    if not LIB or not os.path.exists(LIB):
        pytest.skip("libflexplan_simdev.so not built (FLEXPLAN_SIMDEV_LIBRARY)")
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = str(s.getsockname()[1])
    s.close()
    env = {"FLEXPLAN_LIBRARY": LIB, "FP_SIMDEV_HOST_VISIBLE": "1", "FP_SIMDEV_SEED": str(seed),
           "FP_SIMDEV_HANG_S": "120", "FP_MASTER_PORT": port}
    rc, out = run_mpi(4, "tp_simdev_worker.py", dtype, timeout=600, env=env)
    lines = [l for l in out.splitlines() if l.startswith(("PASS", "FAIL"))]
    print("\n".join(lines))
    assert rc == 0 and any(l.startswith("PASS") for l in lines), out[-6000:]
