#!/bin/sh
# run_pytest.sh - run one pytest file as one ctest (tests/python.cmake).
#
# usage: run_pytest.sh PYTHON SANITIZE FILE [LAUNCHER ...]
#   PYTHON    the venv's interpreter (FP_VENV_PYTHON)
#   SANITIZE  1 under the asan preset: skipped (an ASan-built library cannot
#             be loaded into a plain interpreter)
#   FILE      the pytest file
#   LAUNCHER  e.g. mpiexec -n 2 --oversubscribe ...: runs every rank's pytest
#
# Exit 77 (ctest: skipped) with the reason when the tests cannot run here:
# never reported as passed. pytest's "no tests collected" (5) is a failure.
py=$1 sanitize=$2 file=$3
shift 3
if [ "$sanitize" = 1 ]; then
  echo "skipped: python tests run in the default preset (an ASan library cannot be loaded into a plain interpreter)"
  exit 77
fi
if [ ! -x "$py" ]; then
  echo "skipped: no Python test environment: $py does not exist (create it with:" \
       "python3 -m venv .venv && .venv/bin/pip install -r python/requirements-test.txt)"
  exit 77
fi
if ! why=$("$py" -c 'import torch, pytest' 2>&1); then
  echo "skipped: $py cannot import torch and pytest (pip install -r python/requirements-test.txt):"
  echo "$why" | tail -n 3
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1
"$@" "$py" -m pytest -q -p no:cacheprovider "$file"
rc=$?
if [ "$rc" = 5 ]; then
  echo "error: pytest collected no tests from $file"
  exit 1
fi
exit "$rc"
