"""Launching torchrun workers from pytest, as a torchrun user launches a
training script: ``run_torchrun(n, script, *args)`` runs ``<this python> -m
torch.distributed.run --standalone --nproc-per-node N script ...`` (the
venv's ``torchrun``; --standalone: a private rendezvous on a free port) with
a timeout (a hang is a failure, never a stuck test) and returns (returncode,
output). No MPI variable is set: the workers get torch.distributed on gloo
from the launch and nothing else (tests/python/torch_mpi.py is the mpirun
counterpart)."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def run_torchrun(n, script, *args, timeout=300, env=None):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
           os.path.join(HERE, script), *args]
    e = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "PMIX_"))}
    e.update(PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    e.update(env or {})
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    except subprocess.TimeoutExpired as t:
        out = (t.stdout or b"").decode() if isinstance(t.stdout, bytes) else (t.stdout or "")
        pytest.fail(f"{' '.join(cmd)} did not finish in {timeout} s (a hang):\n{out[-4000:]}")
    return r.returncode, r.stdout + r.stderr
