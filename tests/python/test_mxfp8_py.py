"""MXFP8 params from Python: the Executor's views (weight e4m3, scales e8m0,
as torch float8 tensors) and a refit against a reference quantizer, on 2
ranks (mxfp8_worker.py)."""
from torch_mpi import run_mpi


def test_mxfp8_params():
    rc, out = run_mpi(2, "mxfp8_worker.py", timeout=120)
    assert rc == 0, out[-4000:]
    assert "OK rank 0" in out and "OK rank 1" in out, out[-4000:]
