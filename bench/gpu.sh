#!/usr/bin/env bash
# bench/gpu.sh [--no-cpu-tests] OUTDIR - everything a GPU machine has to do, in one go:
#   1. find nvcc, NCCL (NCCL_INCLUDE_DIR/NCCL_LIBRARY, NCCL_HOME, or the
#      nvidia-nccl-cu13 Python package) and, when the machine lacks them,
#      json-c / cmocka / Open MPI unpacked from .carry/*.deb (bench/carry.sh
#      downloads them on a machine with a network);
#   2. configure (FP_CUDA=ON, the GPU's own architecture) and build in build-gpu/;
#   3. run the GPU tests (ctest -L gpu; a GPU test skipped on a GPU machine
#      counts as a failure) and, unless --no-cpu-tests, the CPU suite's unit
#      and mpi tests;
#   4. run the GPU benchmarks (build-gpu/cuda_bench): kernel bandwidth as a
#      fraction of a device-to-device copy, host time per hook in eager /
#      graph / capture-safe mode, graph sizes;
#   5. write bench/results/<gpu-name>.json (the figures and the test counts)
#      and, in OUTDIR, every log, the plans, nvidia-smi, and a copy of the
#      results file.
# Exit status: 0 when everything built, passed and ran; 1 otherwise (the
# logs say what). Usage on a device machine: bench/gpu.sh "$OUT".
set -uo pipefail
cd "$(dirname "$0")/.."
ROOTDIR=$PWD

CPU_TESTS=1
if [ "${1:-}" = "--no-cpu-tests" ]; then CPU_TESTS=0; shift; fi
OUT=${1:?usage: bench/gpu.sh [--no-cpu-tests] OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
FAILED=0
note() { echo "gpu.sh: $*" | tee -a "$SUMMARY"; }
fail() { note "FAIL: $*"; FAILED=1; }

# ---- 1. toolchain and dependencies ------------------------------------------------
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
PY=$(command -v python3 || echo /usr/bin/python3)
CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP_CUDA=ON)
[ -x /usr/bin/python3 ] || CMAKE_ARGS+=(-DFP_PYTHON="$PY") # the test drivers' interpreter

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed (see nvidia-smi.txt)"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
if [[ "$CC" =~ ^[0-9]+$ ]]; then
  CMAKE_ARGS+=(-DCMAKE_CUDA_ARCHITECTURES="$CC") # this GPU only: a shorter build than sm_80 + sm_90
fi
SLUG=$(echo "${GPU_NAME:-unknown-gpu}" | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9]\+/-/g; s/^-//; s/-$//')
note "GPU: ${GPU_NAME:-none found} (compute capability ${CC:-?}); results: bench/results/$SLUG.json"

# NCCL: explicit, NCCL_HOME, or the Python package (device-notes)
if [ -n "${NCCL_INCLUDE_DIR:-}" ] && [ -n "${NCCL_LIBRARY:-}" ]; then
  CMAKE_ARGS+=(-DNCCL_INCLUDE_DIR="$NCCL_INCLUDE_DIR" -DNCCL_LIBRARY="$NCCL_LIBRARY")
  export LD_LIBRARY_PATH=$(dirname "$NCCL_LIBRARY")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
elif [ -n "${NCCL_HOME:-}" ]; then
  export LD_LIBRARY_PATH=$NCCL_HOME/lib:$NCCL_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  NCCL_PKG=""
  for py in "$PY" python3 /usr/bin/python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    NCCL_PKG=$("$py" - <<'EOF' 2>/dev/null
import os, nvidia.nccl as m
f = getattr(m, "__file__", None)
print(os.path.dirname(f) if f else list(m.__path__)[0])
EOF
) && [ -n "$NCCL_PKG" ] && break
  done
  if [ -n "$NCCL_PKG" ] && [ -f "$NCCL_PKG/include/nccl.h" ]; then
    LIB=$(ls "$NCCL_PKG"/lib/libnccl.so* 2>/dev/null | head -1)
    CMAKE_ARGS+=(-DNCCL_INCLUDE_DIR="$NCCL_PKG/include" -DNCCL_LIBRARY="$LIB")
    export LD_LIBRARY_PATH=$NCCL_PKG/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    note "NCCL from the Python package: $NCCL_PKG"
  else
    note "NCCL: no NCCL_INCLUDE_DIR/NCCL_LIBRARY, NCCL_HOME or nvidia.nccl package: CMake searches the CUDA toolkit"
  fi
fi

# json-c, cmocka, Open MPI: the system's, else unpacked from .carry/*.deb
if ls .carry/*.deb >/dev/null 2>&1; then
  CARRY=$ROOTDIR/.carry/root
  if [ ! -d "$CARRY" ]; then
    for f in .carry/*.deb; do dpkg -x "$f" "$CARRY"; done
  fi
  export PATH=$CARRY/usr/bin:$PATH
  export LD_LIBRARY_PATH=$CARRY/usr/lib/x86_64-linux-gnu:$CARRY/usr/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  CMAKE_ARGS+=(-DCMAKE_PREFIX_PATH="$CARRY/usr")
  if ls "$CARRY"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc >/dev/null 2>&1; then
    # the .pc files say prefix=/usr: pkg-config prepends the sysroot
    export PKG_CONFIG_SYSROOT_DIR=$CARRY
    export PKG_CONFIG_PATH=$CARRY/usr/lib/x86_64-linux-gnu/pkgconfig:$CARRY/usr/share/pkgconfig
  fi
  if [ -x "$CARRY/usr/bin/mpicc" ] || [ -d "$CARRY/usr/lib/x86_64-linux-gnu/openmpi" ]; then
    export OPAL_PREFIX=$CARRY/usr # a relocated Open MPI finds its components here
    CMAKE_ARGS+=(-DMPI_C_COMPILER="$CARRY/usr/bin/mpicc" -DMPIEXEC_EXECUTABLE="$CARRY/usr/bin/mpiexec")
  fi
  note "dependencies from .carry/ ($(ls .carry/*.deb | wc -l) packages)"
fi
{
  echo "nvcc: $(command -v nvcc || echo MISSING)"; nvcc --version 2>&1 | tail -1
  echo "cmake: $(cmake --version | head -1)"; echo "ninja: $(command -v ninja || echo MISSING)"
  echo "mpiexec: $(command -v mpiexec || echo MISSING)"
  for m in json-c cmocka; do echo "pkg-config $m: $(pkg-config --modversion $m 2>&1)"; done
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; echo "cmake args: ${CMAKE_ARGS[*]}"
} > "$OUT/toolchain.txt" 2>&1
cat "$OUT/toolchain.txt"

# ---- 2. configure and build ---------------------------------------------------------
if ! cmake -S . -B build-gpu -G Ninja "${CMAKE_ARGS[@]}" > "$OUT/configure.log" 2>&1; then
  fail "configure (configure.log; missing json-c/cmocka/Open MPI? run bench/carry.sh on a machine with a network)"
  tail -30 "$OUT/configure.log"
  exit 1
fi
grep 'flexplan: CUDA' "$OUT/configure.log" | tee -a "$SUMMARY"
if ! cmake --build build-gpu -j "$(nproc)" > "$OUT/build.log" 2>&1; then
  fail "build (build.log)"
  grep -E 'error|Error' "$OUT/build.log" | head -30
  exit 1
fi
note "built"

# ---- 3. tests -----------------------------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build-gpu -L gpu --output-on-failure --timeout 600 > "$OUT/ctest-gpu.log" 2>&1
GPU_RC=$?
GPU_SKIPPED=$(grep -c '(Skipped)' "$OUT/ctest-gpu.log" || true)
GPU_SUMMARY=$(grep -E 'tests passed' "$OUT/ctest-gpu.log" | tail -1)
note "GPU tests: ${GPU_SUMMARY:-no summary} ($GPU_SKIPPED skipped)"
[ "$GPU_RC" = 0 ] || fail "GPU tests (ctest-gpu.log)"
[ "$GPU_SKIPPED" = 0 ] || fail "$GPU_SKIPPED GPU test(s) skipped on a GPU machine (ctest-gpu.log)"
CPU_SUMMARY="not run"
if [ "$CPU_TESTS" = 1 ]; then
  ctest --test-dir build-gpu -L 'unit|mpi' -j 8 --output-on-failure > "$OUT/ctest-cpu.log" 2>&1 || fail "CPU tests (ctest-cpu.log)"
  CPU_SUMMARY=$(grep -E 'tests passed' "$OUT/ctest-cpu.log" | tail -1)
  note "CPU tests: $CPU_SUMMARY"
fi

# ---- 4. benchmarks ---------------------------------------------------------------------------
mkdir -p "$OUT/plans"
"$PY" - "$OUT/plans" <<'EOF'
import json, sys
d = sys.argv[1]
# a 32-layer MLP, 1024 wide: many hooks with a gather, a cast and a reduction each
mods = [{"name": f"fc{i}", "params": [{"name": f"fc{i}.weight", "shape": [1024, 1024]},
                                      {"name": f"fc{i}.bias", "shape": [1024]}]} for i in range(32)]
json.dump({"format": "flexplan.model.v1", "name": "mlp32", "modules": mods}, open(f"{d}/mlp32.model.json", "w"))
json.dump({"format": "flexplan.spec.v1", "mesh": {"world_size": 1}, "strategy": "full_shard",
           "defaults": {"mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32", "main_grad_dtype": "fp32"}}},
          open(f"{d}/bf16-w1.spec.json", "w"))
json.dump({"format": "flexplan.spec.v1", "mesh": {"world_size": 1}, "strategy": "full_shard",
           "defaults": {"mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "fp32", "main_grad_dtype": "fp32"}}},
          open(f"{d}/fp32-w1.spec.json", "w"))
EOF
build-gpu/flexplan compile tests/mpi/mlp.model.json --spec "$OUT/plans/fp32-w1.spec.json" -o "$OUT/plans/mlp4.plan.json" >> "$OUT/bench.log" 2>&1 || fail "compile mlp4"
build-gpu/flexplan compile "$OUT/plans/mlp32.model.json" --spec "$OUT/plans/bf16-w1.spec.json" -o "$OUT/plans/mlp32.plan.json" >> "$OUT/bench.log" 2>&1 || fail "compile mlp32"
if build-gpu/cuda_bench --out "$OUT/bench.json" --plan "$OUT/plans/mlp4.plan.json" --plan "$OUT/plans/mlp32.plan.json" >> "$OUT/bench.log" 2>&1; then
  note "benchmarks: bench.json"
else
  fail "benchmarks (bench.log)"
fi
if command -v nsys >/dev/null 2>&1; then # an Nsight Systems trace whose NVTX ranges name plan ops
  nsys profile -o "$OUT/train_mlp_graph" --force-overwrite true --trace=cuda,nvtx --cuda-graph-trace=node \
    mpiexec -n 1 build-gpu/train_mlp --plan "$OUT/plans/mlp4.plan.json" --steps 4 --backend nccl --mode graph \
    > "$OUT/nsys.log" 2>&1 || note "nsys trace failed (nsys.log)"
fi

# ---- 5. the results file -----------------------------------------------------------------------
mkdir -p bench/results
"$PY" - "$OUT" "bench/results/$SLUG.json" "$GPU_SUMMARY" "$GPU_SKIPPED" "$CPU_SUMMARY" "$FAILED" <<'EOF'
import json, os, subprocess, sys
out, dest, gpu_sum, gpu_skip, cpu_sum, failed = sys.argv[1:7]
r = {}
try:
    r = json.load(open(os.path.join(out, "bench.json")))
except Exception as e:
    r = {"bench_error": str(e)}
rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
r["tests"] = {"gpu": gpu_sum, "gpu_skipped": int(gpu_skip or 0), "cpu": cpu_sum}
r["commit"] = rev or "unknown"
r["complete"] = failed == "0"
json.dump(r, open(dest, "w"), indent=2)
json.dump(r, open(os.path.join(out, os.path.basename(dest)), "w"), indent=2)
print(json.dumps(r, indent=2))
EOF
note "done: $([ $FAILED = 0 ] && echo ok || echo FAILED)"
exit $FAILED
