"""flexplan.torch against single-process PyTorch: a tiny Llama with tied
embeddings and a plain MLP, AdamW, 10 steps, on 1 to 4 ranks; full_shard,
shard_grad_op (also with overlap_param_gather), no_shard, hybrid 2x2; placements ragged_shard, owned, shard on
dim 1, replicate; bf16 compute; grad accumulation 2; activation checkpointing;
a frozen unit under no_shard; clip_grad_norm_; save and load; CPU offload
with accumulation; SGD with momentum on the plan's state. One mpiexec per
rank count runs every config (torch_worker.py; tolerances there and in
docs/torch.md)."""
import pytest

from torch_mpi import run_mpi


@pytest.mark.parametrize("np_", [1, 2, 3, 4])
def test_parity(np_):
    rc, out = run_mpi(np_, "torch_worker.py", timeout=420)
    lines = [l for l in out.splitlines() if l.split(" ", 1)[0] in ("PASS", "FAIL", "SKIP")]
    print("\n".join(lines))
    assert rc == 0, out[-6000:]
    assert not any(l.startswith("FAIL") for l in lines), out[-6000:]
    passed = [l for l in lines if l.startswith("PASS")]
    assert len(passed) >= 12, out[-6000:]
