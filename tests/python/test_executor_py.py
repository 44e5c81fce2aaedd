"""flexplan.executor.Executor over raw buffers (no torch), on 2 ranks
(executor_worker.py)."""
from torch_mpi import run_mpi


def test_executor_raw_buffers():
    rc, out = run_mpi(2, "executor_worker.py", timeout=120)
    assert rc == 0, out[-4000:]
    assert "OK rank 0" in out and "OK rank 1" in out, out[-4000:]
