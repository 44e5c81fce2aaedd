"""Launching MPI workers from pytest: ``run_mpi(n, script, *args)`` runs
``mpiexec -n N --oversubscribe --allow-run-as-root <this python> script ...``
with a timeout (a hang is a failure, never a stuck test) and returns
(returncode, output). The mpiexec is $FLEXPLAN_MPIEXEC, else mpiexec on the
PATH; Docker's seccomp blocks Open MPI's CMA single copy, so vader's is off
(as tests/exec.cmake does for the C tests)."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def mpiexec():
    exe = os.environ.get("FLEXPLAN_MPIEXEC") or shutil.which("mpiexec") or shutil.which("mpirun")
    if not exe:
        pytest.skip("no mpiexec on the PATH")
    return exe


def run_mpi(n, script, *args, timeout=300, env=None):
    cmd = [mpiexec(), "-n", str(n), "--oversubscribe", "--allow-run-as-root", sys.executable,
           os.path.join(HERE, script), *args]
    e = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1",
             PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    e.update(env or {})
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    except subprocess.TimeoutExpired as t:
        out = (t.stdout or b"").decode() if isinstance(t.stdout, bytes) else (t.stdout or "")
        pytest.fail(f"{' '.join(cmd)} did not finish in {timeout} s (a hang):\n{out[-4000:]}")
    return r.returncode, r.stdout + r.stderr
