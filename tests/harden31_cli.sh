#!/usr/bin/env bash
# Hardening, round 2 (issue 31), at the command line: output names derived
# from the input stay one safe file name here (item 1); every command that
# prints a name from the input quotes it with control characters escaped
# (item 3); a NUL byte is located with its JSON pointer, output names of
# 245-255 bytes work, SIGTERM in the middle of a write and a full disk leave
# no temporary and say why, verify and print take a transfer (item 5).
# usage: harden31_cli.sh FLEXPLAN SOURCE_DIR SIGTERM_SHIM
set -u
fp=$1
src=$2
shim=$3
FP_CLI_TIMEOUT=20
. "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
ex=$src/examples/tiny-mlp.json
# model NAME OUT [MODULE BUCKETPARAM]: tiny-mlp renamed (JSON string escapes in NAME)
model() {
  python3 - "$ex" "$@" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["model"]["name"] = json.loads('"' + sys.argv[2] + '"')
if len(sys.argv) > 4:
    mod = m["model"]["modules"][1]
    mod["name"] = json.loads('"' + sys.argv[4] + '"')
    mod["params"][0]["name"] = json.loads('"' + sys.argv[4] + '"') + ".weight"
    m["spec"]["buckets"] = [{"name": json.loads('"' + sys.argv[4] + '"'), "params": ["*"]}]
json.dump(m, open(sys.argv[3], "w"))
PY
}
# no raw control byte (ESC, BEL, CR) in FILE; a raw newline only ends lines we print
raw_free() {
  if LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$tmp/$1"; then bad "$2: a raw control byte reached $1"; else ok; fi
}

# ---- 1: default output names from the input --------------------------------------
mkdir -p "$tmp/run/sub" && cd "$tmp/run/sub" || exit 1
model "/$tmp/run/abs" "$tmp/abs.json"
expect 0 "$fp" compile "$tmp/abs.json"
[ ! -e "$tmp/run/abs.plan.json" ] && ok || bad "compile wrote the absolute path the model names"
has err "is not a safe file name"
ls "$tmp/run/sub"/*abs.plan.json >/dev/null 2>&1 && ok || bad "no reduced name in the current directory"
model "../escaped" "$tmp/up.json"
expect 0 "$fp" compile "$tmp/up.json" --emit=ir
[ ! -e "$tmp/run/escaped.fpir" ] && ok || bad "compile wrote ../escaped.fpir"
expect 0 "$fp" compile "$tmp/up.json" --emit=html
expect 0 "$fp" compile "$tmp/up.json" --emit=trace
[ -z "$(ls "$tmp/run" | grep -v '^sub$')" ] && ok || bad "outputs above the current directory: $(ls "$tmp/run")"
model ".." "$tmp/dots.json"
expect 0 "$fp" compile "$tmp/dots.json"
expect 0 "$fp" compile "$tmp/abs.json" -o "$tmp/abs.plan.json"
expect 0 "$fp" viz "$tmp/abs.plan.json"
[ ! -e "$tmp/run/abs.trace.json" ] && ok || bad "viz wrote the absolute path the plan names"
expect 0 "$fp" viz "$tmp/abs.plan.json" --format=html
[ ! -e "$tmp/run/abs.html" ] && ok || bad "viz --format=html wrote the absolute path the plan names"
long=$(printf 'x%.0s' $(seq 300))
model "$long" "$tmp/long.json"
expect 0 "$fp" compile "$tmp/long.json"
n=$(ls "$tmp/run/sub" | awk '{ if (length($0) > m) m = length($0) } END { print m }')
[ "$n" -le 255 ] && ok || bad "a default output name of $n bytes"
# everything written stayed in this directory, as plain names
find "$tmp/run" -mindepth 1 -not -path "$tmp/run/sub*" | grep -q . && bad "written outside: $(find "$tmp/run")" || ok
cd "$tmp" || exit 1

# ---- 3: names from the input are quoted, with escapes, on every command -----------
evil='ok\u001b]0;pwned\u0007\u001b[2Jname\nFAKE: error\u0085'
model "$evil" "$tmp/evil.json" 'm\u001b[2Jod\rX'
esc='"ok\u001b]0;pwned\u0007\u001b[2Jname\nFAKE: error\u0085"'
expect 0 "$fp" compile "$tmp/evil.json" -o "$tmp/evil.plan.json"
raw_free err compile
has err "flexplan: $esc: full_shard"
if grep -q '^FAKE' "$tmp/err"; then bad "a name forged a line"; else ok; fi
expect 0 "$fp" check "$tmp/evil.json"
raw_free err check
expect 0 "$fp" simulate "$tmp/evil.plan.json"
raw_free out simulate
has out "flexplan simulate: $esc, full_shard"
has out 'pre_forward("m\u001b[2Jod\rX")'
expect 0 "$fp" explain "$tmp/evil.plan.json"
raw_free out explain
expect 0 "$fp" explain "$tmp/evil.plan.json" --exposed
raw_free out "explain --exposed"
has out '"m\u001b[2Jod\rX"'
expect 0 "$fp" print "$tmp/evil.plan.json"
raw_free out print
expect 0 "$fp" verify "$tmp/evil.plan.json"
raw_free err verify
expect 0 "$fp" viz "$tmp/evil.plan.json" -o "$tmp/evil.trace.json"
raw_free err viz
expect 0 "$fp" compile "$tmp/evil.json" -o - --emit=summary
raw_free out "compile --emit=summary"
python3 - "$tmp/evil.json" "$tmp/evil2.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["spec"]["mesh"]["world_size"] = 2
m["spec"]["mesh"]["ranks_per_node"] = 2
json.dump(m, open(sys.argv[2], "w"))
PY
expect 0 "$fp" compile "$tmp/evil2.json" -o "$tmp/evil2.plan.json"
for e in summary ir explain json trace; do
  expect 0 "$fp" reshard "$tmp/evil.plan.json" "$tmp/evil2.plan.json" --emit=$e
  raw_free out "reshard --emit=$e"
  raw_free err "reshard --emit=$e"
done
expect 0 "$fp" reshard "$tmp/evil.plan.json" "$tmp/evil2.plan.json" --emit=ir
has out "xfer model=$esc"
has out 'param "m\u001b[2Jod\rX.weight" numel='
expect 0 "$fp" reshard "$tmp/evil.plan.json" "$tmp/evil2.plan.json" -o "$tmp/evil.xfer.json"
expect 0 "$fp" viz "$tmp/evil.xfer.json" -o "$tmp/evil.xfer.trace.json"
raw_free err "viz of a transfer"
expect 1 "$fp" reshard "$tmp/evil.plan.json" "$tmp/abs.plan.json"
raw_free err "reshard's error"

# ---- 5: NUL bytes, long names, SIGTERM, a full disk, verify/print of a transfer ----
printf '{"model": {"name": "a\0b"}}' >"$tmp/nul.json"
expect 1 "$fp" compile "$tmp/nul.json"
has err "nul.json:1:22: error: /model/name: unexpected NUL byte"
printf '{"model": {"name": "ab",\n  "modules": [{"name": "x", \0}]}}' >"$tmp/nul2.json"
expect 1 "$fp" check "$tmp/nul2.json"
has err "nul2.json:2:29: error: /model/modules/0: unexpected NUL byte"
printf '\0' >"$tmp/nul.fpir"
expect 1 "$fp" verify "$tmp/nul.fpir"
has err "nul.fpir:1:1: error: unexpected NUL byte"
for n in 245 250 254 255; do
  name=$(printf 'n%.0s' $(seq $n))
  expect 0 "$fp" compile "$ex" -o "$tmp/$name"
  [ -s "$tmp/$name" ] && ok || bad "no output of a $n-byte name"
  expect 0 "$fp" viz "$tmp/$name" -o "$tmp/$name"
  rm -f "$tmp/$name"
done
mkdir "$tmp/killed"
for emit in plan ir html; do
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 LD_PRELOAD=$shim \
    "$fp" compile "$src/examples/llama3-8b.json" --emit=$emit -o "$tmp/killed/out" >/dev/null 2>&1
  st=$?
  [ "$st" = 143 ] && ok || bad "--emit=$emit: SIGTERM during the write: exit $st, want 143"
  [ -z "$(ls "$tmp/killed")" ] && ok || bad "--emit=$emit: SIGTERM left $(ls "$tmp/killed")"
done
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 LD_PRELOAD=$shim \
  "$fp" viz "$tmp/evil.plan.json" -o "$tmp/killed/t.json" >/dev/null 2>&1
[ -z "$(ls "$tmp/killed")" ] && ok || bad "viz: SIGTERM left $(ls "$tmp/killed")"
if [ -w /dev/full ]; then
  expect 1 "$fp" compile "$src/examples/llama3-8b.json" -o /dev/full
  has err "/dev/full: error: cannot write the plan: No space left on device"
  expect 1 "$fp" compile "$ex" -o /dev/full --emit=ir
  has err "No space left on device"
  expect 1 "$fp" viz "$tmp/evil.plan.json" -o /dev/full
  has err "/dev/full: error: cannot write the trace: No space left on device"
  expect 1 "$fp" reshard "$tmp/evil.plan.json" "$tmp/evil2.plan.json" -o /dev/full
  has err "No space left on device"
fi
expect 0 "$fp" verify "$tmp/evil.xfer.json"
has err "evil.xfer.json: ok: a transfer of 4 processes"
expect 0 "$fp" print "$tmp/evil.xfer.json"
has out "xfer model=$esc what=weights from_world=4 to_world=2"
raw_free out "print of a transfer"
sed 's/"ops":/"opz":/' "$tmp/evil.xfer.json" >"$tmp/bad.xfer.json"
expect 1 "$fp" verify "$tmp/bad.xfer.json"
matches err "bad.xfer.json:[0-9]*:[0-9]*: error: /procs/0/opz: unknown member 'opz' (expected one of: stage_bytes, need, ops, same); did you mean \"ops\"?"

# ---- 6: frozen weights once under mixed precision ------------------------------------
# fc1 frozen and kept whole (no_shard), bf16 compute over fp32 main weights:
# one bf16 copy (fc1.weight 760 -> 768 bytes, fc1.bias 38 -> 256), no
# "weight" buffer, and the fp32 copy not made (1520 -> 1536, 76 -> 256) is
# what the summary says was saved; the refit into it: parity_frozen_bf16_one_copy
mf=$src/tests/mpi/mlp-frozen.model.json
expect 0 "$fp" compile "$mf" --spec "$src/tests/mpi/frozen-bf16.spec.json" --emit=summary -o -
has out '"frozen_replicated_bytes": 1024,'
has out '"frozen_one_copy_saved_bytes": 1792,'
expect 0 "$fp" compile "$mf" --spec "$src/tests/mpi/frozen-bf16.spec.json" --emit=ir -o -
matches out 'param  *2  *fc1.weight .*dtypes=bf16/bf16/fp32 .*main=fc1.main\[0\]  *weight=fc1.main\[0\]'
lacks out ' fc1.weight  persistent'

finish harden31_cli
