"""flexplan.torch in scripts launched by torchrun (torch.distributed on gloo,
CPU, no MPI: the external backend over torch.distributed process groups,
docs/torch.md "Launching with torchrun"), against the same references as the
mpirun tests:

- parity with single-process PyTorch (torch_worker.py: 10 AdamW steps,
  full_shard / shard_grad_op / no_shard / bf16 / clipping / placements on 2
  ranks, hybrid_shard 2 x 2 (replica groups) with accumulation on 4), every config checking
  that shard() chose the "torch" backend by itself;
- parity with FSDP2 on gloo (fsdp2_runner.py): the params after 10 steps and
  every step's loss (the MLP; the mpirun suite adds the Llama and MoEs);
- DCP on the default group (a round trip bit for bit), and MPI never
  initialized in a whole run (torchrun_worker.py; ckpt_worker.py runs under
  torchrun too: the mpirun suite's resume on other world sizes);
- across ranks: a plan-hash mismatch refused on every rank (with and without
  a timeout), the watchdog naming the op and the rank that stopped calling
  hooks, the agreement naming a rank that never created its executor, an
  exception inside torch.distributed failing the hook with its text
  (torchrun_worker.py);
- on one process: the backend's argument errors.
"""
import ctypes
import json
import os

import pytest
import torch
from safetensors.torch import load_file

import torch_models as tm
from fsdp2_runner import run as run_fsdp2
from test_torch_fsdp2 import ATOL, LOSS_ATOL, LOSS_RTOL, RTOL, flat
from torch_run import run_torchrun

import flexplan
from flexplan import _lib

NP = 2
# (mlp_placements: ragged and owned buckets: the transport's all_gather_v and reduce_scatter_v)
CONFIGS2 = ["mlp_full_shard", "llama_full_shard", "mlp_shard_grad_op", "mlp_no_shard", "mlp_bf16", "llama_clip",
            "mlp_placements"]
CONFIGS4 = ["mlp_hybrid_2x2_ga2"]


def _passed(rc, out, names):
    assert rc == 0, out[-6000:]
    for n in names:
        assert f"PASS {n} " in out, f"{n}:\n{out[-6000:]}"
    assert "FAIL" not in out, out[-6000:]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("torchrun"))
    rc, log = run_torchrun(NP, "torch_worker.py", *CONFIGS2,
                           env={"FP_SAVE_FINAL": d, "FP_EXPECT_BACKEND": "torch"}, timeout=500)
    print(log[-3000:])
    _passed(rc, log, CONFIGS2)
    return d


def test_parity_with_single_process_on_2_ranks(out):
    assert os.path.exists(os.path.join(out, f"flexplan_mlp_full_shard_np{NP}.safetensors"))


def test_hybrid_shard_on_4_ranks():
    rc, log = run_torchrun(4, "torch_worker.py", *CONFIGS4, env={"FP_EXPECT_BACKEND": "torch"}, timeout=500)
    print(log[-2000:])
    _passed(rc, log, CONFIGS4)


@pytest.mark.parametrize("kind", ["mlp"])
def test_same_params_and_losses_as_fsdp2(out, kind):
    run_fsdp2(kind, NP, out, between=("eval", "unshard") if kind == "llama" else ("loss",))
    a = load_file(os.path.join(out, f"fsdp2_{kind}_np{NP}.safetensors"))
    b = load_file(os.path.join(out, f"flexplan_{kind}_full_shard_np{NP}.safetensors"))
    assert set(a) == set(b)
    with open(os.path.join(out, f"fsdp2_{kind}_np{NP}.losses.json")) as f:
        la = json.load(f)
    with open(os.path.join(out, f"flexplan_{kind}_full_shard_np{NP}.losses.json")) as f:
        lb = json.load(f)
    assert len(la["loss"]) == 10
    for what in ("loss", "eval"):
        fa, fb = flat(la[what]), flat(lb[what])
        assert len(fa) == len(fb), (what, fa, fb)
        for i, (x, y) in enumerate(zip(fa, fb)):
            assert abs(x - y) <= LOSS_ATOL + LOSS_RTOL * abs(x), f"{what} {i}: flexplan {y!r}, fsdp2 {x!r}"
    init = dict((tm.tiny_llama() if kind == "llama" else tm.mlp()).named_parameters())
    worst = 0.0
    for n in a:
        worst = max(worst, float((a[n] - b[n]).abs().max()))
        assert torch.allclose(a[n], b[n], atol=ATOL, rtol=RTOL), n
        assert float((a[n] - init[n].detach()).abs().max()) > 1e-3, n  # training moved it
    print(f"{kind}: max |flexplan (torchrun) - fsdp2| = {worst:.3g}")


MODES = ["nompi", "mismatch", "mismatch:5", "cbfail", "watchdog:5", "join:3"]


@pytest.fixture(scope="module")
def faults():
    """every mode of torchrun_worker.py in one launch: {mode: [line of rank 0, line of rank 1]}"""
    rc, log = run_torchrun(2, "torchrun_worker.py", ",".join(MODES), timeout=300)
    lines = [l for l in log.splitlines() if l.startswith(("OK ", "BAD "))]
    got = {m: sorted(l for l in lines if l.split(" ", 2)[1] == m) for m in MODES}
    assert rc == 0 and all(len(v) == 2 for v in got.values()), log[-6000:]
    return got


def _ok(faults, mode):
    assert all(l.startswith("OK ") for l in faults[mode]), "\n".join(faults[mode])
    return faults[mode]


def test_no_mpi_anywhere_and_dcp_on_the_default_group(faults):
    _ok(faults, "nompi")


@pytest.mark.parametrize("mode", ["mismatch", "mismatch:5"])
def test_plan_hash_mismatch_refused_on_every_rank(faults, mode):
    """without a timeout (store keys waited for without a limit) and with one"""
    _ok(faults, mode)


def test_torch_distributed_failing_inside_the_transport(faults):
    _ok(faults, "cbfail")


def test_watchdog_names_the_op_and_the_rank_that_stopped(faults):
    r0 = _ok(faults, "watchdog:5")[0]
    assert "waits for op" in r0 and "communicator 'world'" in r0 and "did not arrive" in r0, r0


def test_agreement_names_a_rank_that_never_joined(faults):
    _ok(faults, "join:3")


# ---- one process ------------------------------------------------------------------------
@pytest.fixture()
def tiny_plan(tmp_path):
    import subprocess
    plan = str(tmp_path / "p.json")
    model = os.path.join(os.environ["FLEXPLAN_SOURCE_DIR"], "examples", "tiny-mlp.json")
    subprocess.run([os.environ["FLEXPLAN_CLI"], "compile", model, "-o", plan], check=True, capture_output=True)
    return plan


def test_backend_torch_needs_torch_distributed(tiny_plan):
    import torch.distributed as dist
    assert not dist.is_initialized()
    with pytest.raises(flexplan.FlexplanError, match="torch.distributed initialized") as e:
        flexplan.Executor(tiny_plan, backend="torch")
    assert e.value.status_name == "FP_ERR_ARG"


def test_external_backend_needs_a_transport(tiny_plan):
    """fp_exec_create with FP_BACKEND_EXTERNAL and no transport: FP_ERR_ARG naming it"""
    lib = _lib.lib()
    h = ctypes.c_void_p()
    assert lib.fp_plan_load(tiny_plan.encode(), ctypes.byref(h)) == 0
    info = _lib.fp_plan_info()
    lib.fp_plan_get_info(h, ctypes.byref(info))
    cfg = _lib.fp_exec_config(backend=_lib.FP_BACKEND_EXTERNAL, rank=0, world_size=int(info.world_size))
    x = ctypes.c_void_p()
    st = lib.fp_exec_create(h, ctypes.byref(cfg), ctypes.byref(x))
    msg = lib.fp_exec_errmsg(x).decode()
    lib.fp_exec_destroy(x)
    lib.fp_plan_free(h)
    assert st == _lib.FP_ERR_ARG and "needs fp_exec_config.transport" in msg, msg
