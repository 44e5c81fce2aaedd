#!/bin/sh
# run_mypy.sh - mypy over the flexplan package, as one ctest (python_mypy;
# tests/python.cmake). The configuration is python/pyproject.toml's
# [tool.mypy]; mypy is the one pinned in python/requirements-test.txt.
#
# usage: run_mypy.sh PYTHON SOURCE_DIR CACHE_DIR
# Exit 77 (ctest: skipped) with the reason where the venv or its mypy is
# missing: never reported as passed.
py=$1 src=$2 cache=$3
if [ ! -x "$py" ]; then
  echo "skipped: no Python test environment: $py does not exist (python3 -m venv .venv &&" \
       ".venv/bin/pip install -r python/requirements-test.txt)"
  exit 77
fi
if ! why=$("$py" -c 'import mypy' 2>&1); then
  echo "skipped: $py cannot import mypy (pip install -r python/requirements-test.txt):"
  echo "$why" | tail -n 1
  exit 77
fi
cd "$src/python" || exit 1
exec "$py" -m mypy --config-file pyproject.toml --cache-dir "$cache" --python-executable "$py"
