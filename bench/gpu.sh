#!/usr/bin/env bash
# bench/gpu.sh [options] OUTDIR - everything a GPU machine has to do, in one
# call of about 6 minutes on one H100/H200 with 16 cores (build ~60 s, GPU
# tests ~60 s, the PyTorch check ~2 min, the benchmarks ~30 s), so that a
# rerun still fits in the device window (../shared/device-notes.md):
#   1. toolchain and dependencies: nvcc, NCCL (NCCL_INCLUDE_DIR/NCCL_LIBRARY,
#      NCCL_HOME, or the nvidia-nccl-cu13 Python package), and json-c and
#      cmocka: asked of pkg-config first; only a module pkg-config does not
#      find is taken from .carry/*.deb (bench/carry.sh downloads them on a
#      machine with a network; the device tool's `carry` brings .carry), by
#      dpkg -x into .carry/root. Open MPI is always the machine's own;
#   2. configure build-gpu/ (FP_CUDA=ON, this GPU's architecture only) and
#      build;
#   3. ctest -L gpu (a GPU test skipped on a GPU machine counts as a failure);
#      with --cpu-tests also the CPU suite's unit and mpi tests (not in the
#      6 minutes);
#   4. the PyTorch check (bench/torch_gpu.py): flexplan.torch on NCCL against
#      FSDP2 and plain torch on a 1B Llama, every step's loss within 2e-3 of
#      FSDP2's, ms/step ratios;
#   5. build-gpu/cuda_bench: the kernels as a fraction of a device-to-device
#      copy, host time per hook, graph sizes and launches per hook, host time
#      per replayed whole-step graph (step_graph);
#   6. bench/results/<gpu-name>.json: the figures, the test counts, the
#      PyTorch check, the phases' seconds and the commit; and in OUTDIR every
#      log, the plans, nvidia-smi, and a copy of the results file.
#
# Options:
#   --cpu-tests   also run the CPU unit and mpi tests (step 3)
#   --no-torch    leave out the PyTorch check (step 4)
#   --nsys        also take an Nsight Systems trace of train_mlp (when nsys exists)
#   --tests REGEX only the GPU tests matching REGEX (ctest -R; a short rerun)
#   --torch-args "ARGS"  more arguments for bench/torch_gpu.py (e.g.
#                 "--models 126m --runs fsdp2,flexplan-step": a short rerun)
#   --deps-only   do step 1 only and say what was found and what was carried
#                 (runs anywhere: no GPU, no build)
#   --no-cpu-tests  accepted and ignored (the CPU tests are off unless asked)
# The commit recorded is $FP_COMMIT when set (pass it in the device command:
# FP_COMMIT=<sha> bench/gpu.sh "$OUT"; the device tool's copy of the tree can
# carry a .git of an earlier call), else `git rev-parse HEAD` (+modified when
# the tracked files differ from it).
# Exit status: 0 when everything built, passed and ran; 1 otherwise (the
# logs say what); 2 for a usage error.
#
# Never assign CC here: the GPU image exports CC (the C compiler CMake must
# use); the compute capability is GPU_SM.
set -uo pipefail
usage() {
  echo "usage: bench/gpu.sh [--cpu-tests] [--no-torch] [--nsys] [--tests REGEX] [--torch-args ARGS] [--deps-only] OUTDIR" >&2
  exit 2
}
CPU_TESTS=0 TORCH=1 NSYS=0 DEPS_ONLY=0 OUT="" TESTS_RE="" TORCH_ARGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-tests) CPU_TESTS=1 ;;
    --no-cpu-tests) ;;
    --no-torch) TORCH=0 ;;
    --nsys) NSYS=1 ;;
    --deps-only) DEPS_ONLY=1 ;;
    --tests) shift; [ $# -gt 0 ] || usage; TESTS_RE=$1 ;;
    --torch-args) shift; [ $# -gt 0 ] || usage; TORCH_ARGS=$1 ;;
    -h | --help) usage ;;
    -*) echo "bench/gpu.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$OUT" ] || usage; OUT=$1 ;;
  esac
  shift
done
[ -n "$OUT" ] || usage
cd "$(dirname "$0")/.." || exit 1
ROOTDIR=$PWD
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
FAILED=0
T_START=$SECONDS
PHASES=""
note() { echo "gpu.sh: $*" | tee -a "$SUMMARY"; }
fail() { note "FAIL: $*"; FAILED=1; }
T_PHASE=$SECONDS
phase() { # phase NAME: the seconds since the last phase, recorded
  PHASES="$PHASES $1=$((SECONDS - T_PHASE))"
  note "$1: $((SECONDS - T_PHASE)) s (total $((SECONDS - T_START)) s)"
  T_PHASE=$SECONDS
}

# ---- 1. toolchain and dependencies ------------------------------------------------
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
PY=$(command -v python3 || echo /usr/bin/python3)
CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP_CUDA=ON)
[ -x /usr/bin/python3 ] || CMAKE_ARGS+=(-DFP_PYTHON="$PY") # the test drivers' interpreter

if command -v nvidia-smi > /dev/null 2>&1; then
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed (see nvidia-smi.txt)"
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)
  GPU_SM=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -1 | tr -d ' .')
else
  GPU_NAME="" GPU_SM=""
  note "no nvidia-smi here"
fi
if [[ "$GPU_SM" =~ ^[0-9]+$ ]]; then
  CMAKE_ARGS+=(-DCMAKE_CUDA_ARCHITECTURES="$GPU_SM") # this GPU only: a shorter build than sm_80 + sm_90
fi
SLUG=$(echo "${GPU_NAME:-unknown-gpu}" | tr '[:upper:]' '[:lower:]' | sed 's/[^a-z0-9]\+/-/g; s/^-//; s/-$//')
note "GPU: ${GPU_NAME:-none found} (compute capability ${GPU_SM:-?}); results: bench/results/$SLUG.json"

# NCCL: explicit, NCCL_HOME, or the Python package (device-notes)
if [ -n "${NCCL_INCLUDE_DIR:-}" ] && [ -n "${NCCL_LIBRARY:-}" ]; then
  CMAKE_ARGS+=(-DNCCL_INCLUDE_DIR="$NCCL_INCLUDE_DIR" -DNCCL_LIBRARY="$NCCL_LIBRARY")
  LD_LIBRARY_PATH=$(dirname "$NCCL_LIBRARY")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
elif [ -n "${NCCL_HOME:-}" ]; then
  LD_LIBRARY_PATH=$NCCL_HOME/lib:$NCCL_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  NCCL_PKG=$("$PY" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2> /dev/null)
  if [ -n "$NCCL_PKG" ] && [ -f "$NCCL_PKG/include/nccl.h" ]; then
    NCCL_LIB=$(ls "$NCCL_PKG"/lib/libnccl.so* 2> /dev/null | head -1)
    CMAKE_ARGS+=(-DNCCL_INCLUDE_DIR="$NCCL_PKG/include" -DNCCL_LIBRARY="$NCCL_LIB")
    LD_LIBRARY_PATH=$NCCL_PKG/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    note "NCCL from the Python package: $NCCL_PKG"
  else
    note "NCCL: no NCCL_INCLUDE_DIR/NCCL_LIBRARY, NCCL_HOME or nvidia.nccl package: CMake searches the CUDA toolkit"
  fi
fi
export LD_LIBRARY_PATH

# json-c and cmocka: pkg-config first; a module it lacks comes from .carry/
# (Debian 12 packages: module -> the .debs that hold it). The carried .pc
# files name /usr paths; they are rewritten to .carry/root/usr, so that only
# the carried modules move (PKG_CONFIG_SYSROOT_DIR would prefix every
# module's paths, the machine's own included).
CARRY=$ROOTDIR/.carry/root
rm -rf "$CARRY" # unpacked afresh: a stale module there would shadow the machine's own
declare -A DEBS=([json-c]="libjson-c5 libjson-c-dev" [cmocka]="libcmocka0 libcmocka-dev")
CARRIED=""
for mod in json-c cmocka; do
  if pkg-config --exists "$mod" 2> /dev/null; then
    note "$mod: the machine's ($(pkg-config --modversion "$mod"))"
    continue
  fi
  for pkg in ${DEBS[$mod]}; do
    deb=$(ls "$ROOTDIR"/.carry/"${pkg}"_*.deb 2> /dev/null | head -1)
    if [ -z "$deb" ]; then
      fail "$mod: not on this machine and .carry/${pkg}_*.deb missing (run bench/carry.sh where apt works, carry .carry)"
      continue 2
    fi
    dpkg -x "$deb" "$CARRY" || { fail "dpkg -x $deb"; continue 2; }
  done
  CARRIED="$CARRIED $mod"
done
if [ -n "$CARRIED" ]; then
  for pc in "$CARRY"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$CARRY"/usr/share/pkgconfig/*.pc; do
    [ -f "$pc" ] && sed -i "s|\([=[:space:]]-[IL]\)/usr|\1$CARRY/usr|g; s|^\([a-z_]*\)=/usr|\1=$CARRY/usr|" "$pc"
  done
  export PKG_CONFIG_PATH=$CARRY/usr/lib/x86_64-linux-gnu/pkgconfig:$CARRY/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export CMAKE_PREFIX_PATH=$CARRY/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export LD_LIBRARY_PATH=$CARRY/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for mod in $CARRIED; do
    if pkg-config --exists "$mod"; then
      note "$mod: carried ($(pkg-config --modversion "$mod"): $(pkg-config --cflags --libs "$mod"))"
    else
      fail "$mod: carried but pkg-config still does not find it"
    fi
  done
fi
{
  echo "CC=${CC:-unset} (the image's; never assigned here)"
  echo "nvcc: $(command -v nvcc || echo MISSING)"
  nvcc --version 2>&1 | tail -1
  echo "cmake: $(cmake --version 2>&1 | head -1)"
  echo "ninja: $(command -v ninja || echo MISSING)"
  echo "mpicc: $(command -v mpicc || echo MISSING); mpiexec: $(command -v mpiexec || echo MISSING)"
  echo "python3: $PY ($("$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1))"
  for m in json-c cmocka; do echo "pkg-config $m: $(pkg-config --modversion $m 2>&1)"; done
  echo "carried:${CARRIED:- nothing}"
  echo "PKG_CONFIG_PATH=${PKG_CONFIG_PATH:-}"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  echo "cmake args: ${CMAKE_ARGS[*]}"
} > "$OUT/toolchain.txt" 2>&1
cat "$OUT/toolchain.txt"
command -v mpiexec > /dev/null 2>&1 || fail "no mpiexec: the GPU tests run under the machine's Open MPI (never carried)"
phase deps
if [ "$DEPS_ONLY" = 1 ]; then
  note "done (--deps-only): $([ $FAILED = 0 ] && echo ok || echo FAILED)"
  exit $FAILED
fi

# ---- 2. configure and build ---------------------------------------------------------
if ! cmake -S . -B build-gpu -G Ninja "${CMAKE_ARGS[@]}" > "$OUT/configure.log" 2>&1; then
  fail "configure (configure.log)"
  tail -30 "$OUT/configure.log"
  exit 1
fi
grep 'flexplan: CUDA' "$OUT/configure.log" | tee -a "$SUMMARY"
if ! cmake --build build-gpu -j "$(nproc)" > "$OUT/build.log" 2>&1; then
  fail "build (build.log)"
  grep -E 'error|Error' "$OUT/build.log" | head -30
  exit 1
fi
phase build

# ---- 3. tests -----------------------------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build-gpu -L gpu ${TESTS_RE:+-R "$TESTS_RE"} --output-on-failure --timeout 300 > "$OUT/ctest-gpu.log" 2>&1
GPU_RC=$?
GPU_SKIPPED=$(grep -c '(Skipped)' "$OUT/ctest-gpu.log" || true)
GPU_SUMMARY=$(grep -E 'tests passed' "$OUT/ctest-gpu.log" | tail -1)
note "GPU tests: ${GPU_SUMMARY:-no summary} ($GPU_SKIPPED skipped)"
grep -E '^ *[0-9]+/[0-9]+ Test' "$OUT/ctest-gpu.log" | tee -a "$SUMMARY"
[ "$GPU_RC" = 0 ] || fail "GPU tests (ctest-gpu.log)"
[ "$GPU_SKIPPED" = 0 ] || fail "$GPU_SKIPPED GPU test(s) skipped on a GPU machine (ctest-gpu.log)"
phase gpu_tests
CPU_SUMMARY="not run"
if [ "$CPU_TESTS" = 1 ]; then
  ctest --test-dir build-gpu -L 'unit|mpi' -j 8 --output-on-failure > "$OUT/ctest-cpu.log" 2>&1 || fail "CPU tests (ctest-cpu.log)"
  CPU_SUMMARY=$(grep -E 'tests passed' "$OUT/ctest-cpu.log" | tail -1)
  note "CPU tests: $CPU_SUMMARY"
  phase cpu_tests
fi

# ---- 4. PyTorch on the GPU ------------------------------------------------------------------
TORCH_STATUS="not run"
if [ "$TORCH" = 1 ]; then
  if PYTHONPATH=$ROOTDIR/python${PYTHONPATH:+:$PYTHONPATH} FLEXPLAN_LIBRARY=$ROOTDIR/build-gpu/libflexplan.so \
    "$PY" bench/torch_gpu.py --out "$OUT/torch_gpu.json" --workdir "$OUT/torch_gpu" --job-timeout 120 $TORCH_ARGS \
    2>&1 | tee "$OUT/torch_gpu.log"; then
    TORCH_STATUS=passed
  else
    TORCH_STATUS=failed
    fail "PyTorch check (torch_gpu.log, torch_gpu/)"
  fi
  phase torch
fi

# ---- 5. benchmarks ---------------------------------------------------------------------------
mkdir -p "$OUT/plans"
"$PY" - "$OUT/plans" << 'EOF'
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
  grep -E 'of the copy|copy:' "$OUT/bench.log" | tee -a "$SUMMARY"
else
  fail "benchmarks (bench.log)"
fi
if [ "$NSYS" = 1 ] && command -v nsys > /dev/null 2>&1; then # an Nsight Systems trace whose NVTX ranges name plan ops
  nsys profile -o "$OUT/train_mlp_graph" --force-overwrite true --trace=cuda,nvtx --cuda-graph-trace=node \
    mpiexec -n 1 build-gpu/train_mlp --plan "$OUT/plans/mlp4.plan.json" --steps 4 --backend nccl --mode graph \
    > "$OUT/nsys.log" 2>&1 || note "nsys trace failed (nsys.log)"
fi
phase bench

# ---- 6. the results file -----------------------------------------------------------------------
if [ -n "${FP_COMMIT:-}" ]; then
  COMMIT=$FP_COMMIT DIRTY=""
else
  COMMIT=$(git rev-parse HEAD 2> /dev/null || echo unknown)
  DIRTY=$(git status --porcelain --untracked-files=no 2> /dev/null | head -1)
fi
mkdir -p bench/results
"$PY" - "$OUT" "bench/results/$SLUG.json" "$GPU_SUMMARY" "$GPU_SKIPPED" "$CPU_SUMMARY" "$FAILED" "$COMMIT" \
  "${DIRTY:+modified}" "$TORCH_STATUS" "$PHASES $((SECONDS - T_START))" << 'EOF'
import json, os, sys, time
out, dest, gpu_sum, gpu_skip, cpu_sum, failed, commit, dirty, torch_status, phases = sys.argv[1:11]
r = {}
try:
    r = json.load(open(os.path.join(out, "bench.json")))
except Exception as e:
    r = {"bench_error": str(e)}
try:
    r["torch"] = json.load(open(os.path.join(out, "torch_gpu.json")))
except Exception as e:
    r["torch"] = {"status": torch_status, "error": str(e)}
p = phases.split()
r["phases_s"] = dict(kv.split("=") for kv in p[:-1]) | {"total": p[-1]}
r["phases_s"] = {k: int(v) for k, v in r["phases_s"].items()}
r["tests"] = {"gpu": gpu_sum, "gpu_skipped": int(gpu_skip or 0), "cpu": cpu_sum}
r["commit"] = commit + ("+modified" if dirty else "")
r["date"] = time.strftime("%Y-%m-%d", time.gmtime())
r["complete"] = failed == "0"
json.dump(r, open(dest, "w"), indent=2)
json.dump(r, open(os.path.join(out, os.path.basename(dest)), "w"), indent=2)
EOF
note "done in $((SECONDS - T_START)) s: $([ $FAILED = 0 ] && echo ok || echo FAILED)"
exit $FAILED
