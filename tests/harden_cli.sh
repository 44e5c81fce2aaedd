#!/usr/bin/env bash
# Hardening regressions at the command line (issue 17): inputs that are not
# regular files or are too large, failed writes to standard output, hostile
# numbers and member names. Each check names the defect it guards.
# usage: harden_cli.sh FLEXPLAN SOURCE_DIR
set -u
fp=$1
src=$2
FP_CLI_TIMEOUT=10
. "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
ex=$src/examples/tiny-mlp.json

# 2: only regular files, of a stated size; a directory says so
expect 1 "$fp" compile "$src/examples" -o "$tmp/p.json"
has err "examples: error: is a directory"
expect 1 "$fp" compile /dev/zero -o "$tmp/p.json"
has err "/dev/zero: error: not a regular file"
mkfifo "$tmp/fifo"
expect 1 "$fp" compile "$tmp/fifo" -o "$tmp/p.json"
has err "fifo: error: not a regular file"
truncate -s $(((1 << 30) + 1)) "$tmp/huge.json"
expect 1 "$fp" check "$tmp/huge.json"
has err "huge.json: error: file of 1073741825 bytes exceeds the input limit of 1073741824 bytes"
rm -f "$tmp/huge.json"
[ ! -e "$tmp/p.json" ] && ok || bad "output written for an unreadable input"

# 5: invalid UTF-8 (here a UTF-16 surrogate in the model name) is refused by
# the plan loader too, located; the front end, the .fpir parser and the
# safetensors header are tested in tests/bad, tests/ir/bad, test_safetensors
"$fp" compile "$ex" -o "$tmp/u.json" 2>/dev/null
python3 - "$tmp/u.json" <<'PY'
import sys
p = sys.argv[1]
b = open(p, 'rb').read()
open(p, 'wb').write(b.replace(b'"model": "tiny-mlp"', b'"model": "tiny\xed\xa0\x80mlp"', 1))
PY
expect 1 "$fp" verify "$tmp/u.json"
matches err "u.json:[0-9]*:[0-9]*: error: /model: invalid UTF-8 (byte 0xed)"

# 6: what UBSan caught (this script runs in the asan preset too; a
# sanitizer report fails it there): an empty program's memory timeline
# (qsort of no events), the largest --ranks number (a loop past LLONG_MAX)
clean() { if grep -q "runtime error\|Sanitizer" "$tmp/err"; then bad "sanitizer: $(grep -m1 'runtime error\|Sanitizer' "$tmp/err")"; else ok; fi; }
printf 'fpir 1\n' >"$tmp/e.fpir"
expect 0 "$fp" simulate "$tmp/e.fpir"
clean
"$fp" compile "$ex" -o "$tmp/r.json" 2>/dev/null
expect 1 "$fp" viz "$tmp/r.json" --ranks 9223372036854775807 -o "$tmp/v.json"
has err "rank 9223372036854775807 is not a rank of the plan"
clean
expect 1 "$fp" viz "$tmp/r.json" --ranks 9223372036854775806-9223372036854775807 -o "$tmp/v.json"
clean
expect 2 "$fp" viz "$tmp/r.json" --ranks 9223372036854775808 -o "$tmp/v.json"
has err "number out of range"

# 9: per-bucket mixed precision reaches the plan: params of the bucket "low"
# get its param dtype, its reductions its reduce dtype; the rest the spec's
# defaults (tests/mpi/bucket-mp.spec.json; the parity runs are in exec.cmake)
expect 0 "$fp" compile "$src/tests/mpi/mlp.model.json" --spec "$src/tests/mpi/bucket-mp.spec.json" -o "$tmp/bmp.json"
if python3 - "$tmp/bmp.json" "$src/tests/mpi/bucket-mp.spec.json" >"$tmp/err" 2>&1 <<'PY'
import fnmatch, json, sys
plan, spec = (json.load(open(a)) for a in sys.argv[1:3])
dflt = spec["defaults"]["mixed_precision"]
def mp(name):
    for b in spec["buckets"]:
        if any(fnmatch.fnmatchcase(name, pat) for pat in b["params"]):
            return b["mixed_precision"]
    return dflt
bad, seen = [], set()
for p in plan["params"]:
    want = mp(p["name"])
    if p["param_dtype"] != want["param_dtype"] or p["grad_dtype"] != want["main_grad_dtype"]:
        bad.append(f"{p['name']}: param/grad dtype {p['param_dtype']}/{p['grad_dtype']}, spec says {want}")
bucket_mp = {}
for p in plan["params"]:
    bucket_mp.setdefault(p["bucket"], set()).add(mp(p["name"])["reduce_dtype"])
for o in plan["ops"]:
    if o["op"] in ("reduce_scatter", "reduce_scatter_v", "all_reduce", "reduce") and "bucket" in o:
        (want,) = bucket_mp[o["bucket"]]
        seen.add(want)
        if o["dtype"] != want:
            bad.append(f"{o['op']} of bucket {plan['buckets'][o['bucket']]} in {o['dtype']}, spec says {want}")
if seen != {"bf16", "fp32"}:
    bad.append(f"reductions in {sorted(seen)}: expected both the bucket's bf16 and the default fp32")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
then ok; else bad "per-bucket mixed precision: $(head -5 "$tmp/err")"; fi

# explain --exposed: the ranked exposed communication; its rows sum to what
# simulate reports as exposed, largest first, each naming op, bucket, hook
"$fp" compile "$src/examples/llama3-8b.json" -o "$tmp/l8.json" 2>/dev/null
expect 0 "$fp" explain "$tmp/l8.json" --exposed
cp "$tmp/out" "$tmp/exposed.txt"
expect 0 "$fp" simulate "$tmp/l8.json"
if python3 - "$tmp/exposed.txt" "$tmp/out" >"$tmp/err" 2>&1 <<'PY'
import re, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[2:]]
total = float(re.search(r"modeled exposed communication\s+([0-9.]+) ms", open(sys.argv[2]).read()).group(1))
ms = [float(r[1]) for r in rows]
assert rows and all(len(r) >= 7 for r in rows), rows
assert ms == sorted(ms, reverse=True), ms
assert abs(sum(ms) - total) <= 0.001 * len(ms) + 1e-9, (sum(ms), total)
assert all(r[4] in ("all_gather", "reduce_scatter", "all_reduce", "all_gather_v", "reduce_scatter_v") for r in rows), rows
PY
then ok; else bad "explain --exposed: $(tail -3 "$tmp/err")"; fi
# the page's ranked table holds the same rows (op waited for, ms)
expect 0 "$fp" viz "$tmp/l8.json" --format=html -o "$tmp/l8.html"
if python3 - "$tmp/exposed.txt" "$tmp/l8.html" >"$tmp/err" 2>&1 <<'PY'
import json, re, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[2:]]
page = open(sys.argv[2], encoding="utf-8").read()
d = json.loads(re.search(r'<script type="application/json" id="fpdata">(.*?)</script>', page, re.S).group(1))
got = [(x[1], round(x[2] / 1e3, 3)) for x in d["exposed_rank"]]
want = [(int(r[3]), float(r[1])) for r in rows]
assert got == want, (got, want)
PY
then ok; else bad "page exposed_rank: $(tail -3 "$tmp/err")"; fi

# 3: a failed write to standard output is exit 1 with a message
if [ -w /dev/full ]; then
  "$fp" compile "$ex" -o "$tmp/t.json" 2>/dev/null
  full() { # CMD...: run with stdout on /dev/full
    timeout 10 "$@" >/dev/full 2>"$tmp/err"
    local got=$?
    if [ "$got" = 1 ]; then ok; else bad "$* >/dev/full -> exit $got, want 1"; fi
    if grep -q "error: cannot write" "$tmp/err"; then ok; else bad "$* >/dev/full: no message: $(head -3 "$tmp/err")"; fi
  }
  full "$fp" print "$tmp/t.json"
  full "$fp" compile "$ex" --emit=ir -o -
  full "$fp" compile "$ex" --emit=summary -o -
  full "$fp" compile "$ex" -o -
  full "$fp" explain "$tmp/t.json"
  full "$fp" simulate "$tmp/t.json"
  full "$fp" viz "$tmp/t.json" -o -
  full "$fp" --help
else
  echo "note: no writable /dev/full; the standard-output checks did not run"
fi

finish harden_cli
