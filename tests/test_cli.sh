#!/usr/bin/env bash
# The command line's contract: exit statuses (0 ok, 1 input error, 2 usage),
# located errors, atomic outputs (nothing left behind on error), -o -, the
# default output name, print/verify/explain on plans and .fpir files.
# usage: test_cli.sh FLEXPLAN SOURCE_DIR
set -u
fp=$1
src=$2
FP_CLI_TIMEOUT=60
. "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
ex=$src/examples/tiny-mlp.json

expect 2 "$fp"
expect 0 "$fp" --help
has out "usage: flexplan"
expect 0 "$fp" --version
has out "flexplan 0"
expect 2 "$fp" frobnicate
has err "unknown command 'frobnicate'"
expect 2 "$fp" compile
has err "missing MODEL"
expect 2 "$fp" compile "$ex" --emit=dot
has err "unknown --emit kind 'dot'"
expect 2 "$fp" compile "$ex" --bogus
expect 2 "$fp" compile "$ex" -o
expect 2 "$fp" check "$ex" -o x.json
expect 2 "$fp" print
expect 2 "$fp" verify a b
expect 2 "$fp" compile "$ex" --policy
has err "option '--policy' needs a value"
expect 2 "$fp" compile "$ex" --policy=zero3
has err "unknown policy 'zero3'"
expect 0 "$fp" compile "$ex" --policy fsdp2 --emit=summary -o "$tmp/fsdp2.json"
grep -q '"prefetch_forward": 0' "$tmp/fsdp2.json" && ok || bad "fsdp2 summary lacks prefetch_forward 0 (each unit gathers in its own pre_forward)"
rm -f "$tmp/fsdp2.json"

# missing files are input errors, located at the path
expect 1 "$fp" compile "$tmp/nope.json" -o "$tmp/p.json"
has err "nope.json: error: cannot open"
[ ! -e "$tmp/p.json" ] && ok || bad "output written for a missing input"

# a spec embedded in the model file and --spec at once
cat >"$tmp/spec.json" <<'J'
{"format": "flexplan.spec.v1", "mesh": {"world_size": 2}}
J
expect 1 "$fp" compile "$ex" --spec "$tmp/spec.json" -o "$tmp/p.json"
matches err "tiny-mlp.json:[0-9]*:[0-9]*: error: /spec: the model file embeds a spec, and --spec names another"
[ -z "$(ls -A "$tmp" | grep -v -e spec.json -e out -e err)" ] && ok || bad "files left behind: $(ls "$tmp")"

# a separate model and spec
"$fp" compile "$ex" --emit=ir -o - >/dev/null 2>&1 && ok || bad "compile --emit=ir -o -"
/usr/bin/python3 - "$ex" "$tmp/model.json" <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
json.dump(d["model"], open(sys.argv[2], "w"))
P
expect 0 "$fp" compile "$tmp/model.json" --spec "$tmp/spec.json" --emit=summary -o "$tmp/s.json"
has s.json '"world_size": 2'
# no spec at all: the defaults (full_shard on 8 ranks)
expect 0 "$fp" compile "$tmp/model.json" --emit=summary -o -
has out '"world_size": 8'
has out '"strategy": "full_shard"'

# default output name is <model name>.plan.json in the working directory
(cd "$tmp" && "$fp" compile "$ex" >/dev/null 2>"$tmp/err") && ok || bad "compile with default -o"
[ -s "$tmp/tiny-mlp.plan.json" ] && ok || bad "no tiny-mlp.plan.json"
has err "wrote tiny-mlp.plan.json"
expect 0 "$fp" verify "$tmp/tiny-mlp.plan.json"
# outputs get the mode a plain create would (umask 022: 644), not mkstemp's 600
[ "$(cd "$tmp" && umask 022 && "$fp" compile "$ex" -o m.json 2>/dev/null && stat -c %a m.json)" = 644 ] && ok ||
  bad "output mode is not 644 under umask 022"
expect 0 "$fp" explain "$tmp/tiny-mlp.plan.json"
has out "all_gather"

# an unwritable output directory: exit 1, located at the path
expect 1 "$fp" compile "$ex" -o "$tmp/no/such/dir/p.json"
has err "p.json: error: cannot create output"

# a failing compile leaves an existing output untouched
echo keep >"$tmp/keep.json"
expect 1 "$fp" compile "$src/tests/bad/layout-budget-exceeded.json" -o "$tmp/keep.json"
[ "$(cat "$tmp/keep.json")" = keep ] && ok || bad "existing output was changed by a failed compile"
[ -z "$(ls "$tmp" | grep '\.tmp\.')" ] && ok || bad "temporary file left behind"

# a tampered plan is rejected by verify and print
sed 's/"world_size": 4/"world_size": 5/' "$tmp/tiny-mlp.plan.json" >"$tmp/tampered.json"
expect 1 "$fp" verify "$tmp/tampered.json"
has err "tampered.json:"
expect 1 "$fp" print "$tmp/tampered.json"

# simulate: a plan or .fpir on its own hardware, or on a preset; modeled figures
expect 0 "$fp" simulate "$tmp/tiny-mlp.plan.json"
has out "hardware h100-sxm"
has out "modeled step"
has out "modeled exposed communication"
has out "post_optimizer"
expect 0 "$fp" simulate "$tmp/tiny-mlp.plan.json" --hardware h200
has out "hardware h200"
has out "(h200)"
"$fp" compile "$ex" --emit=ir -o "$tmp/t.fpir" 2>/dev/null && ok || bad "compile --emit=ir"
expect 0 "$fp" simulate "$tmp/t.fpir" --hardware=h100-sxm
has out "modeled peak memory per rank"
# an unknown preset is an input error naming the presets, for simulate and compile
expect 1 "$fp" simulate "$tmp/tiny-mlp.plan.json" --hardware a100
has err "error: --hardware: unknown hardware preset 'a100' (expected one of: h100-sxm, h200, h200-fit, cpu-mpi)"
expect 1 "$fp" compile "$ex" --hardware a100 -o "$tmp/hw.json"
has err "unknown hardware preset 'a100'"
[ ! -e "$tmp/hw.json" ] && ok || bad "output written with an unknown preset"
expect 2 "$fp" simulate
has err "missing PLAN"
expect 2 "$fp" simulate "$tmp/t.fpir" --hardware
expect 2 "$fp" simulate "$tmp/t.fpir" --frob
expect 1 "$fp" simulate "$tmp/nope.json"
# compile --hardware replaces the spec's preset: in the plan, the summary and the hash
expect 0 "$fp" compile "$ex" --hardware h200 --emit=summary -o -
has out '"hardware": "h200"'
has out '"modeled_step_ms": '
"$fp" compile "$ex" --hardware h200 -o "$tmp/h200.json" 2>/dev/null && ok || bad "compile --hardware h200"
grep -q '"hardware": {"name":"h200"' "$tmp/h200.json" && ok || bad "plan lacks the h200 hardware"
grep -q '"memory_timeline": {"modeled":true' "$tmp/h200.json" && ok || bad "plan lacks its memory timeline"
[ "$(grep '"hash"' "$tmp/h200.json")" != "$(grep '"hash"' "$tmp/tiny-mlp.plan.json")" ] && ok ||
  bad "the hash does not cover the hardware"
expect 0 "$fp" check "$ex" --hardware=h200

# explain: one row per op with modeled start and end; --hardware like simulate
expect 0 "$fp" explain "$tmp/tiny-mlp.plan.json" --hardware h200
has out "modeled start us"
has out "waits e0 (op "
[ "$(wc -l <"$tmp/out")" = $(($(grep -c '"op":"' "$tmp/tiny-mlp.plan.json") + 1)) ] && ok ||
  bad "explain is not one row per op"
grep -v '^hardware' "$tmp/t.fpir" >"$tmp/nohw.fpir"
expect 0 "$fp" explain "$tmp/nohw.fpir"
has err "nohw.fpir: note: the plan names no hardware; simulating on h100-sxm"
expect 2 "$fp" explain
expect 2 "$fp" explain "$tmp/t.fpir" --frob
expect 1 "$fp" explain "$tmp/tiny-mlp.plan.json" --hardware a100

# viz: trace (default) or html, default name <model>.trace.json / .html
(cd "$tmp" && "$fp" viz tiny-mlp.plan.json >/dev/null 2>"$tmp/err") && ok || bad "viz with default -o"
[ -s "$tmp/tiny-mlp.trace.json" ] && ok || bad "no tiny-mlp.trace.json"
has err "wrote tiny-mlp.trace.json"
grep -q '"timing":"modeled"' "$tmp/tiny-mlp.trace.json" && ok || bad "the trace does not say modeled"
(cd "$tmp" && "$fp" viz tiny-mlp.plan.json --format html >/dev/null 2>&1) && ok || bad "viz --format html"
head -c 15 "$tmp/tiny-mlp.html" | grep -q '<!DOCTYPE html>' && ok || bad "no tiny-mlp.html"
expect 0 "$fp" viz "$tmp/nohw.fpir" --format=trace -o -
has out '"traceEvents"'
has err "the plan names no hardware; simulating on h100-sxm"
expect 0 "$fp" viz "$tmp/tiny-mlp.plan.json" --ranks 0,2-3 -o -
[ "$(grep -c '"name":"process_name"' "$tmp/out")" = 3 ] && ok || bad "--ranks 0,2-3 does not show 3 ranks"
expect 2 "$fp" viz
has err "missing PLAN"
expect 2 "$fp" viz "$tmp/tiny-mlp.plan.json" --format=svg
has err "unknown --format 'svg' (expected trace or html)"
expect 2 "$fp" viz "$tmp/tiny-mlp.plan.json" --ranks 1-
has err "--ranks: expected the end of a range"
expect 2 "$fp" viz "$tmp/tiny-mlp.plan.json" --ranks 3-1
expect 2 "$fp" viz "$tmp/tiny-mlp.plan.json" --ranks 0,,1
expect 2 "$fp" viz "$tmp/tiny-mlp.plan.json" --ranks 0-100
has err "at most 64 ranks"
expect 2 "$fp" viz "$tmp/tiny-mlp.plan.json" -o
# a rank outside the plan's world is an input error, and nothing is written
expect 1 "$fp" viz "$tmp/tiny-mlp.plan.json" --ranks 9 -o "$tmp/r9.json"
has err "flexplan: error: --ranks: rank 9 is not a rank of the plan (world_size 4)"
[ ! -e "$tmp/r9.json" ] && ok || bad "output written for --ranks 9"
[ -z "$(ls "$tmp" | grep '\.tmp\.')" ] && ok || bad "temporary file left behind"
expect 1 "$fp" viz "$tmp/tampered.json" -o "$tmp/tt.json"
has err "tampered.json:"
# a plan whose machine is too slow for a finite step: an input error for
# simulate, explain and viz, nothing written
sed 's/nvlink_gbps=[0-9.e+]*/nvlink_gbps=1e-310/' "$tmp/t.fpir" >"$tmp/slow.fpir"
for cmd in simulate explain viz; do
  expect 1 "$fp" $cmd "$tmp/slow.fpir" $([ $cmd = viz ] && echo "-o $tmp/slow.out")
  has err "slow.fpir: error: the modeled step time on hardware 'h100-sxm' is not a finite number"
done
[ ! -e "$tmp/slow.out" ] && ok || bad "viz wrote a file for a plan it could not simulate"
# compile --emit=trace|html write what viz writes of the compiled plan
expect 0 "$fp" compile "$ex" --emit=trace -o "$tmp/e.trace.json"
"$fp" viz "$tmp/tiny-mlp.plan.json" -o "$tmp/v.trace.json" 2>/dev/null
cmp -s "$tmp/e.trace.json" "$tmp/v.trace.json" && ok || bad "compile --emit=trace differs from viz"
expect 0 "$fp" compile "$ex" --emit=html -o "$tmp/e.html" --ranks 1
"$fp" viz "$tmp/tiny-mlp.plan.json" --format=html --ranks 1 -o "$tmp/v.html" 2>/dev/null
cmp -s "$tmp/e.html" "$tmp/v.html" && ok || bad "compile --emit=html differs from viz --format=html"
expect 2 "$fp" compile "$ex" --ranks 1 -o "$tmp/x.json"
has err "--ranks picks the ranks of --emit=trace or --emit=html"
(cd "$tmp" && "$fp" compile "$ex" --emit=html >/dev/null 2>"$tmp/err") && ok || bad "compile --emit=html default -o"
has err "wrote tiny-mlp.html"

# without a budget, a plan over the hardware's device memory compiles with a
# warning naming the overshoot and the largest items; one that fits has none
expect 0 "$fp" compile "$src/examples/llama3-405b.json" --hardware h100-sxm -o "$tmp/405.plan.json"
# AdamW's fp32 state (the default optimizer) is twice the fp32 main shard:
# 2 x 188.990 GiB, the largest item
has err "flexplan: warning: llama3-405b: the plan needs 829.457 GiB per rank at its peak, 749.457 GiB more than h100-sxm's 80.000 GiB of device memory; largest: optimizer state 377.980 GiB, main weights (shard) 188.990 GiB, main grads (shard) 188.990 GiB"
has err "does NOT fit h100-sxm's 80.000 GiB of device memory: 749.457 GiB over"
expect 0 "$fp" compile "$src/examples/llama3-405b.json" --hardware h100-sxm --emit=summary -o "$tmp/405.sum.json"
has err "flexplan: warning: llama3-405b: the plan needs"
grep -q '"over_device_bytes": 804723720192' "$tmp/405.sum.json" && ok || bad "405b summary lacks over_device_bytes"
grep -q '"optimizer_state_bytes": 405853388800' "$tmp/405.sum.json" && ok || bad "405b summary lacks optimizer_state_bytes"
# frozen and kept whole (paligemma's vision tower under no_shard, bf16 main
# and compute): one copy, the compute weight is the main weight; its bytes,
# hand-computed from the model (each param's bf16 bytes rounded up to 256),
# are what the summary says the one-copy layout saved, and no vision bucket
# has a "weight" buffer
expect 0 "$fp" compile "$src/examples/paligemma-3b-224.json" --emit=summary -o "$tmp/pg.sum.json"
python3 - "$src/examples/paligemma-3b-224.json" "$tmp/pg.sum.json" <<'PY' && ok || bad "paligemma frozen one copy"
import json, sys
d, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
want = sum(-(-eval("*".join(map(str, p["shape"]))) * 2 // 256) * 256 for m in d["model"]["modules"]
           for p in m["params"] if p["name"].startswith("vision_tower."))
assert want == 824887296, want
assert s["frozen_replicated_bytes"] == s["frozen_one_copy_saved_bytes"] == want, s
# sharding them instead: an all-gather in each forward and backward of each of
# the 29 vision buckets, of the whole bf16 params (no rounding)
numel = sum(eval("*".join(map(str, p["shape"]))) for m in d["model"]["modules"]
            for p in m["params"] if p["name"].startswith("vision_tower."))
assert s["frozen_gathers_avoided"] == 58 and s["frozen_gather_bytes_avoided"] == 2 * 2 * numel, s
PY
expect 0 "$fp" compile "$src/examples/paligemma-3b-224.json" --emit=ir -o "$tmp/pg.fpir"
grep -Eq "^buf +[0-9]+ +vision_tower[^ ]*\.weight " "$tmp/pg.fpir" && bad "a vision bucket has a weight buffer" || ok
grep -Eq "^param .*vision_tower.*main=([^ ]+)\[([0-9]+)\] +weight=\1\[\2\]" "$tmp/pg.fpir" && ok || bad "vision weights are not their main weights"
# offload: the offloaded buckets' main weights, grads and AdamW state are the
# host arena (host_bytes), and the device arena holds less than without it
expect 0 "$fp" compile "$src/tests/mpi/mlp.model.json" --spec "$src/tests/mpi/offload.spec.json" --emit=summary -o "$tmp/off.sum.json"
sed 's/"offload": true/"offload": false/g' "$src/tests/mpi/offload.spec.json" > "$tmp/nooff.spec.json"
expect 0 "$fp" compile "$src/tests/mpi/mlp.model.json" --spec "$tmp/nooff.spec.json" --emit=summary -o "$tmp/nooff.sum.json"
expect 0 "$fp" compile "$src/tests/mpi/mlp.model.json" --spec "$src/tests/mpi/offload.spec.json" --emit=ir -o "$tmp/off.fpir"
python3 - "$tmp/off.sum.json" "$tmp/nooff.sum.json" "$tmp/off.fpir" <<'PY' && ok || bad "offload summary"
import json, sys
s, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
host = sum(int(l.split("bytes=")[1].split()[0]) for l in open(sys.argv[3]) if l.startswith("buf") and l.rstrip().endswith("host"))
hcats = {l.split()[4] for l in open(sys.argv[3]) if l.startswith("buf") and l.rstrip().endswith("host")}
assert s["host_bytes"] == host > 0 and n["host_bytes"] == 0, (s["host_bytes"], host)
assert hcats == {"main_weight", "main_grad", "optimizer_state"}, hcats
assert s["arena_bytes"] < n["arena_bytes"], (s["arena_bytes"], n["arena_bytes"])
assert s["optimizer_state_bytes"] == n["optimizer_state_bytes"] and s["param_shard_bytes"] == n["param_shard_bytes"]
PY
grep -Eq "^ +[0-9]+ +copy +h2d " "$tmp/off.fpir" && grep -Eq "^ +[0-9]+ +copy +d2h " "$tmp/off.fpir" && ok || bad "offload copies not on the copy stream"
expect 0 "$fp" compile "$src/examples/llama3-8b.json" -o "$tmp/8b.plan.json"
grep -q "warning" "$tmp/err" && bad "llama3-8b fits yet warned: $(cat "$tmp/err")" || ok

# -o onto something that is not a regular file: a FIFO (as /dev/null, a
# device) is written in place, never replaced by a renamed temporary (that
# would replace /dev/null itself when run as root); a directory is refused
mkfifo "$tmp/fifo"
cat "$tmp/fifo" >"$tmp/from-fifo" &
reader=$!
expect 0 "$fp" compile "$ex" -o "$tmp/fifo"
if [ -p "$tmp/fifo" ]; then ok; else bad "-o FIFO: the FIFO was replaced"; kill $reader 2>/dev/null; fi
wait $reader
grep -q '"format": *"flexplan.plan.v1"' "$tmp/from-fifo" && ok || bad "-o FIFO: the plan did not come through it"
mkdir "$tmp/outdir"
expect 1 "$fp" compile "$ex" -o "$tmp/outdir"
has err "outdir: error: cannot create output: Is a directory"

finish cli
