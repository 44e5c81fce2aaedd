#!/bin/bash
# tp_bench.sh - compiling and verifying plans on a 2-D mesh (FSDP x tensor
# parallel) at scale, side by side with the same model without tp (issue 38).
#
#   bench/tp_bench.sh          (N=11 runs per case, medians)
#
# Builds a Release flexplan (bench/out/build), then for each case runs N times
#   flexplan compile X --emit=summary -o -    the planner's own compile_ms
#   flexplan print PLAN                       read the plan + rules 1-8
#   flexplan verify PLAN                      the same + rule 9 (every rule)
# and prints the medians (verify as the process's user + system CPU time:
# this 2-core machine is shared and wall time mostly measures the
# neighbours), each tp case's ratio to llama3-405b without tp, and the aims:
# llama3-405b-tp8 (16,384 ranks, tp 8) compiles in <= 5 ms and passes every
# verifier rule in <= 100 ms. Cases:
#   llama3-405b       examples/llama3-405b.json: hybrid_shard (8), 16,384 ranks, no tp
#   llama3-405b-tp8   examples/llama3-405b-tp8.json: dp 2,048 (hybrid: shard 32 x
#                     replicate 64) x tp 8, 16,384 ranks
#   llama3-70b-tp8    examples/llama3-70b-tp8.json: FSDP 32 x TP 8 (torchtitan's 70B)
# Only bash and /usr/bin/python3.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/release_flexplan.sh"
N=${N:-11}
out="$root/bench/out/tp"
mkdir -p "$out"

"$PY" - "$fp" "$N" "$out" "$root/examples" <<'PYEOF'
import json, os, statistics, subprocess, sys
fp, n, out, ex = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def cpu_ms(args):
  pid = os.fork()
  if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1); os.dup2(fd, 2)
    os.execv(fp, [fp] + args)
  _, status, ru = os.wait4(pid, 0)
  if os.waitstatus_to_exitcode(status) != 0:
    sys.exit("%s %s failed" % (fp, " ".join(args)))
  return (ru.ru_utime + ru.ru_stime) * 1000

def compile_ms(src):
  r = subprocess.run([fp, "compile", src, "--emit=summary", "-o", "-"], stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, text=True, check=True)
  return json.loads(r.stdout)["compile_ms"]

rows = {}
print("%-16s %7s %5s %12s %10s %10s %10s" % ("case", "ranks", "tp", "compile ms", "print ms", "verify ms", "rule 9 ms"))
for case in ["llama3-405b", "llama3-405b-tp8", "llama3-70b-tp8"]:
  src = os.path.join(ex, case + ".json")
  plan = os.path.join(out, case + ".plan.json")
  subprocess.run([fp, "compile", src, "-o", plan], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
  spec = json.load(open(src))["spec"]["mesh"]
  c, pr, ve = [], [], []
  compile_ms(src)  # warm the page cache
  for _ in range(n):
    c.append(compile_ms(src))
    pr.append(cpu_ms(["print", plan]))
    ve.append(cpu_ms(["verify", plan]))
  rows[case] = (statistics.median(c), statistics.median(pr), statistics.median(ve))
  a, b, v = rows[case]
  print("%-16s %7d %5d %12.2f %10.0f %10.0f %10.0f" % (case, spec["world_size"], spec.get("tp", 1), a, b, v, v - b))
base = rows["llama3-405b"]
for case in ["llama3-405b-tp8", "llama3-70b-tp8"]:
  r = rows[case]
  print("%s / llama3-405b: compile %.2fx, verify %.2fx" % (case, r[0] / base[0], r[2] / max(base[2], 1e-9)))
c, _, v = rows["llama3-405b-tp8"]
print("aim: llama3-405b-tp8 compiles in <= 5 ms: %.2f ms (%s)" % (c, "met" if c <= 5 else "NOT met"))
print("aim: llama3-405b-tp8 passes every verifier rule in <= 100 ms: %.0f ms (%s)" % (v, "met" if v <= 100 else "NOT met"))
PYEOF
