#!/bin/bash
# plan_read_bench.sh - the time to load a plan.json (issue 33: one reader,
# ir/plan.c on base/json.c's pull parser) against another revision.
#
#   bench/plan_read_bench.sh               (BASE=main, N=7 runs per case, medians)
#   FP=... BASEFP=... bench/plan_read_bench.sh   (two flexplan binaries given)
#
# Builds a Release flexplan of this tree (bench/out/build) and of git ref
# $BASE (bench/out/base-build) unless FP / BASEFP name binaries, compiles
# each case to plan.json with this tree's, then runs N times each, with each
# binary,
#   flexplan print PLAN      read the plan + the verifier's rules 1-8
#   flexplan verify PLAN     the same + rule 9
# and prints the medians of the process's user + system CPU time (wall time
# on a shared machine mostly measures the neighbours) and the ratio new /
# base. Cases:
#   llama3-405b   examples/llama3-405b.json (16,384 ranks)
#   dsv3-671b     DeepSeek-V3 671B as tools/gen_examples.py --bench writes it
#                 (its plan.json is the biggest: ~20 MB, 45,000 params)
# Only bash and /usr/bin/python3.
set -euo pipefail

if [ -n "${FP:-}" ] && [ -n "${BASEFP:-}" ]; then
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  PY=/usr/bin/python3
  fp=$FP
  basefp=$BASEFP
else
  . "$(dirname "${BASH_SOURCE[0]}")/release_flexplan.sh"
  . "$(dirname "${BASH_SOURCE[0]}")/base_flexplan.sh"
fi
N=${N:-7}
out="$root/bench/out/plan_read"
mkdir -p "$out"
"$PY" "$root/tools/gen_examples.py" --bench "$out" >/dev/null
"$fp" compile "$root/examples/llama3-405b.json" -o "$out/llama3-405b.plan.json" >/dev/null 2>&1
"$fp" compile "$out/deepseek-v3-671b.json" -o "$out/dsv3-671b.plan.json" >/dev/null 2>&1

"$PY" - "$basefp" "$fp" "$N" "$out" <<'PYEOF'
import os, statistics, sys
basefp, fp, n, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

def cpu(binary, args):
  pid = os.fork()
  if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1); os.dup2(fd, 2)
    os.execv(binary, [binary] + args)
  _, status, ru = os.wait4(pid, 0)
  if os.waitstatus_to_exitcode(status) != 0:
    sys.exit("%s %s failed" % (binary, " ".join(args)))
  return (ru.ru_utime + ru.ru_stime) * 1000

print("%-12s %-7s %10s %10s %7s" % ("case", "command", "base ms", "new ms", "ratio"))
for case in ["llama3-405b", "dsv3-671b"]:
  plan = os.path.join(d, case + ".plan.json")
  for cmd in ["print", "verify"]:
    b, m = [], []
    for _ in range(n):  # interleaved: the neighbours weigh on both alike
      b.append(cpu(basefp, [cmd, plan]))
      m.append(cpu(fp, [cmd, plan]))
    mb, mm = statistics.median(b), statistics.median(m)
    print("%-12s %-7s %10.0f %10.0f %7.2f" % (case, cmd, mb, mm, mm / mb if mb else float("nan")))
PYEOF
