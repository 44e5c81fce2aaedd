#!/usr/bin/env bash
# Hardware files (planner/hwfile.c, docs/cost-model.md "Hardware files"):
# --hardware FILE wherever --hardware is taken. A file holding a preset's
# values models exactly as the preset does; a changed field changes the
# modeled step the way the cost model says; compile records the file's
# machine in the plan; every malformed file is a located input error
# (exit 1) with no output left behind.
# usage: test_hwfile.sh FLEXPLAN SOURCE_DIR
set -u
fp=$1
src=$2
FP_CLI_TIMEOUT=60
. "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
ex=$src/examples/tiny-mlp.json
expect 0 "$fp" compile "$ex" -o "$tmp/p.json"

# every field of h100-sxm written out (values from planner/cost.c): the same
# modeled step as the preset, under the file's name
cat >"$tmp/h100.json" <<'J'
{"format": "flexplan-hardware/1", "name": "my-h100", "gpus_per_node": 8, "hbm_bytes": 85899345920,
 "flops": 989.5e12, "nvlink_gbps": 370.8, "ib_gbps": 48, "hbm_gbps": 3350, "pcie_gbps": 64,
 "base_us": 8.4, "nvlink_hop_us": 3.4, "net_hop_us": 14.0, "launch_us": 2}
J
expect 0 "$fp" simulate "$tmp/p.json" --hardware h100-sxm
sed 's/h100-sxm/my-h100/' "$tmp/out" >"$tmp/want"
expect 0 "$fp" simulate "$tmp/p.json" --hardware "$tmp/h100.json"
has out "hardware my-h100"
same out want "a file with h100-sxm's values must model as h100-sxm"

# base + one override: NVLink 100x slower, a 100 us call latency; tiny-mlp's
# step is all collectives (4 ranks, one node), so it must grow by more than
# the added latency of its 11 collectives on the critical path can explain
# away: checked against the preset's step, parsed from the output
cat >"$tmp/slow.json" <<'J'
{"format": "flexplan-hardware/1", "name": "slow-net", "base": "h100-sxm",
 "note": "NVLink 100x slower", "nvlink_gbps": 3.708, "base_us": 100}
J
step() { sed -n 's/^  modeled step  *\([0-9.]*\) ms$/\1/p' "$tmp/$1"; }
expect 0 "$fp" simulate "$tmp/p.json" --hardware h100-sxm
cp "$tmp/out" "$tmp/fast"
expect 0 "$fp" simulate "$tmp/p.json" --hardware "$tmp/slow.json"
has out "NVLink 3.7 GB/s"
has out "latency 100.0 us"
cp "$tmp/out" "$tmp/slow"
awk -v f="$(step fast)" -v s="$(step slow)" 'BEGIN { exit !(f > 0 && s > 4 * f) }' && ok ||
  bad "slow-net step $(step slow) ms is not far above h100-sxm's $(step fast) ms"
# explain and viz take it too
expect 0 "$fp" explain "$tmp/p.json" --hardware "$tmp/slow.json"
expect 0 "$fp" viz "$tmp/p.json" --format=html --hardware "$tmp/slow.json" -o "$tmp/v.html"
grep -q "slow-net" "$tmp/v.html" && ok || bad "the page does not name the file's machine"

# compile models on the file and records it in the plan, which verifies
expect 0 "$fp" compile "$ex" --hardware "$tmp/slow.json" -o "$tmp/p2.json"
grep -q '"hardware": {"name":"slow-net".*"nvlink_gbps":3.708' "$tmp/p2.json" && ok || bad "plan lacks the file's machine"
expect 0 "$fp" verify "$tmp/p2.json"
expect 0 "$fp" simulate "$tmp/p2.json"
has out "hardware slow-net"
step_plan=$(step out)
[ "$step_plan" = "$(step slow)" ] && ok || bad "the plan's own machine models $step_plan ms, the file $(step slow) ms"

# choices follow the file: with buckets and prefetch "auto", a CPU-like
# machine (rates fitted by calibrate on the development machine) and
# h100-sxm pick differently, and on that machine the plan picked for it models
# no slower than the one picked for h100-sxm (simulated independently)
python3 - "$tmp" <<'P'
import json, sys
d = sys.argv[1]
dims = [384, 512, 256, 640, 320, 128]
mods = [{"name": f"fc{i}", "params": [{"name": f"fc{i}.weight", "shape": [dims[i + 1], dims[i]]},
                                      {"name": f"fc{i}.bias", "shape": [dims[i + 1]]}],
         "flops_fwd": 2 * 64 * dims[i] * dims[i + 1], "flops_bwd": 4 * 64 * dims[i] * dims[i + 1]} for i in range(5)]
json.dump({"model": {"format": "flexplan.model.v1", "name": "mlp", "modules": mods},
           "spec": {"format": "flexplan.spec.v1", "mesh": {"world_size": 2}, "strategy": "full_shard",
                    "buckets": {"auto": {}}, "prefetch": "auto"}}, open(d + "/auto.json", "w"))
json.dump({"format": "flexplan-hardware/1", "name": "cpu-like", "base": "h100-sxm", "flops": 3.35e9,
           "hbm_gbps": 12.3, "launch_us": 17.9, "nvlink_gbps": 3.0, "base_us": 60}, open(d + "/cpu.json", "w"))
P
expect 0 "$fp" compile "$tmp/auto.json" --hardware h100-sxm -o "$tmp/a_h100.json"
expect 0 "$fp" compile "$tmp/auto.json" --hardware "$tmp/cpu.json" -o "$tmp/a_cpu.json"
expect 0 "$fp" compile "$tmp/auto.json" --hardware h100-sxm --emit=summary -o "$tmp/s_h100.json"
expect 0 "$fp" compile "$tmp/auto.json" --hardware "$tmp/cpu.json" --emit=summary -o "$tmp/s_cpu.json"
choice() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['buckets'], s['prefetch_forward'], s['prefetch_backward'])" "$1"; }
[ "$(choice "$tmp/s_h100.json")" != "$(choice "$tmp/s_cpu.json")" ] && ok ||
  bad "the same buckets/prefetch on h100-sxm and the CPU-like file: $(choice "$tmp/s_cpu.json")"
expect 0 "$fp" simulate "$tmp/a_cpu.json" --hardware "$tmp/cpu.json"
cp "$tmp/out" "$tmp/sim_cpu"
expect 0 "$fp" simulate "$tmp/a_h100.json" --hardware "$tmp/cpu.json"
cp "$tmp/out" "$tmp/sim_h100"
awk -v a="$(step sim_cpu)" -v b="$(step sim_h100)" 'BEGIN { exit !(a > 0 && a <= b) }' && ok ||
  bad "on the CPU-like machine the plan chosen for it models $(step sim_cpu) ms, the h100-sxm choice $(step sim_h100) ms"

# the h200 refit checked in (bench/h200_hwfit.py): it loads, and its rate is
# the relative least-squares rate of the H200 kernel figures, recomputed here
expect 0 "$fp" simulate "$tmp/p.json" --hardware "$src/bench/results/nvidia-h200.hw.json"
has out "hardware h200-fit"
python3 - "$src" <<'P' && ok || bad "nvidia-h200.hw.json's hbm_gbps is not the fit of nvidia-h200.json's kernels"
import json, sys
r = json.load(open(sys.argv[1] + "/bench/results/nvidia-h200.json"))
hw = json.load(open(sys.argv[1] + "/bench/results/nvidia-h200.hw.json"))
g = [k["bytes"] / (k["ms"] * 1e6) for k in r["kernels"]]
want = sum(x * x for x in g) / sum(g)
sys.exit(0 if abs(hw["hbm_gbps"] - want) < 0.01 * want and hw["base"] == "h200" else 1)
P

# errors: located, exit 1, nothing written
bad_file() { # TEXT WANT: the file TEXT is refused with WANT in the message
  printf '%s' "$1" >"$tmp/e.json"
  expect 1 "$fp" simulate "$tmp/p.json" --hardware "$tmp/e.json"
  has err "$2"
  rm -f "$tmp/o.json"
  expect 1 "$fp" compile "$ex" --hardware "$tmp/e.json" -o "$tmp/o.json"
  has err "$2"
  [ ! -e "$tmp/o.json" ] && ok || bad "compile wrote a plan with a bad hardware file"
}
F='"format":"flexplan-hardware/1"'
bad_file '{"name":"x"}' "e.json:1:1: error: /: missing required member 'format'"
bad_file '{"format":"flexplan-hardware/2","name":"x"}' 'e.json:1:11: error: /format: expected "flexplan-hardware/1", got "flexplan-hardware/2"'
bad_file "{$F,\"name\":\"x\",\"base\":\"h100-sxm\",
\"flop\":1}" "e.json:2:8: error: /flop: unknown member 'flop'"
bad_file "{$F,\"name\":\"x\"}" "e.json:1:1: error: /: missing required member 'gpus_per_node' (or name a preset as \"base\""
bad_file "{$F,\"name\":\"x\",\"base\":\"h100-sxm\",\"flops\":-1}" "error: /flops: expected a number > 0, got -1"
bad_file "{$F,\"name\":\"x\",\"base\":\"h100-sxm\",\"launch_us\":\"2\"}" 'error: /launch_us: expected a number > 0, got "2"'
bad_file "{$F,\"name\":\"x\",\"base\":\"h100-sxm\",\"hook_us\":-0.5}" "error: /hook_us: expected a number >= 0, got -0.5"
bad_file "{$F,\"name\":\"x\",\"base\":\"h100-sxm\",\"gpus_per_node\":0}" "error: /gpus_per_node: expected an integer >= 1, got 0"
bad_file "{$F,\"name\":\"x\",\"base\":\"a100\"}" 'error: /base: unknown hardware preset "a100" (expected one of: h100-sxm, h200, h200-fit, cpu-mpi)'
bad_file "{$F,\"name\":\"a b\",\"base\":\"h100-sxm\"}" 'error: /name: expected 1 to 64 letters, digits or . _ - +, got "a b"'
bad_file "{$F,\"base\":\"h100-sxm\"}" "error: /: missing required member 'name'"
bad_file '[1]' "e.json:1:1: error: /: expected an object"
bad_file '{"format":' "e.json:1:11: error: /format: invalid JSON"
expect 1 "$fp" simulate "$tmp/p.json" --hardware "$tmp/nope.json"
has err "nope.json: error: cannot open"
# a bare word that is no preset stays "unknown preset", with the hint
expect 1 "$fp" simulate "$tmp/p.json" --hardware cpu
has err "unknown hardware preset 'cpu' (expected one of: h100-sxm, h200, h200-fit, cpu-mpi); a hardware file is named by a path holding '/' or '.' (e.g. ./hw.json); did you mean 'cpu-mpi'?"
# the cpu-mpi preset (planner/cost.c, fitted on this kind of machine) models
# the plan as a file with its values does, and its hook time is charged
expect 0 "$fp" simulate "$tmp/p.json" --hardware cpu-mpi
cp "$tmp/out" "$tmp/preset.out"
cat >"$tmp/cpu.json" <<'EOF'
{"format": "flexplan-hardware/1", "name": "cpu-mpi", "gpus_per_node": 2, "hbm_bytes": 17179869184, "flops": 2.832e9,
 "nvlink_gbps": 1.778, "ib_gbps": 1.778, "hbm_gbps": 12.28, "pcie_gbps": 12.28, "base_us": 2248.0,
 "nvlink_hop_us": 0.001, "net_hop_us": 0.001, "launch_us": 2.0, "hook_us": 44.3}
EOF
expect 0 "$fp" simulate "$tmp/p.json" --hardware "$tmp/cpu.json"
same out preset.out "the cpu-mpi preset must model as a file with its values"
has out "modeled host time in hook calls"
# the h200-fit preset models as the refit's own file (bench/h200_hwfit.py's)
expect 0 "$fp" simulate "$tmp/p.json" --hardware h200-fit
cp "$tmp/out" "$tmp/preset.out"
expect 0 "$fp" simulate "$tmp/p.json" --hardware "$src/bench/results/nvidia-h200.hw.json"
same out preset.out "the h200-fit preset must model as bench/results/nvidia-h200.hw.json"

finish hwfile
