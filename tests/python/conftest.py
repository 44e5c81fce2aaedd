"""Shared fixtures of the Python tests (tests/python.cmake runs them with
PYTHONPATH=<source>/python, FLEXPLAN_LIBRARY=<build>/libflexplan.so and
FLEXPLAN_CLI=<build>/flexplan)."""
import os
import subprocess

import pytest

SOURCE_DIR = os.environ.get("FLEXPLAN_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="session")
def source_dir():
    """The source tree."""
    return SOURCE_DIR


@pytest.fixture(scope="session")
def cli():
    """The path of this build's `flexplan` command line."""
    path = os.environ.get("FLEXPLAN_CLI") or os.path.join(SOURCE_DIR, "build", "flexplan")
    if not os.path.exists(path):
        pytest.fail("no flexplan CLI at %s (set FLEXPLAN_CLI)" % path)
    return path


def run_cli(cli, *args, cwd=None):
    """Run the CLI: (returncode, stdout, stderr)."""
    r = subprocess.run([cli, *args], capture_output=True, text=True, cwd=cwd)
    return r.returncode, r.stdout, r.stderr
