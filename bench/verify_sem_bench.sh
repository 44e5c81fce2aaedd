#!/bin/bash
# verify_sem_bench.sh - the time of the semantic check (rule 9,
# ir/verify_sem.c) at scale (issue 32).
#
#   bench/verify_sem_bench.sh          (N=5 runs per case, medians)
#
# Builds a Release flexplan (bench/out/build), compiles each case to
# plan.json, then runs N times each
#   flexplan print PLAN      read the plan + rules 1-8 (print verifies as load does)
#   flexplan verify PLAN     the same + rule 9
# and prints the medians of the process's user + system CPU time (the
# 2-core machine this was written on is shared: wall time mostly measures
# the neighbours) and their difference, rule 9's share. Cases:
#   llama3-405b        examples/llama3-405b.json: hybrid_shard, 16,384 ranks
#   dsv3-hybrid        DeepSeek-V3 671B, hybrid_shard (8 per node), 2,048 ranks
#                      (tools/gen_examples.py --bench, as bench/scale_bench.sh)
#   dsv3-full          the same with full_shard over all 2,048 ranks (2,048
#                      rank classes: every rank's shard differs)
# Goal (issue 32): rule 9 under 1 s for the first two. Only bash and /usr/bin/python3.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/release_flexplan.sh"
N=${N:-5}
out="$root/bench/out/verify_sem"
mkdir -p "$out"
"$PY" "$root/tools/gen_examples.py" --bench "$out" >/dev/null
"$PY" - "$out" <<'PYEOF'
import json, os, sys
d = sys.argv[1]
with open(os.path.join(d, "deepseek-v3-671b.json")) as f:
  m = json.load(f)
m["spec"]["strategy"] = "hybrid_shard"
m["spec"]["hybrid_shard"] = {"intra_node_size": 8}
with open(os.path.join(d, "dsv3-hybrid.json"), "w") as f:
  json.dump(m, f)
PYEOF
"$fp" compile "$root/examples/llama3-405b.json" -o "$out/llama3-405b.plan.json" >/dev/null 2>&1
"$fp" compile "$out/dsv3-hybrid.json" -o "$out/dsv3-hybrid.plan.json" >/dev/null 2>&1
"$fp" compile "$out/deepseek-v3-671b.json" -o "$out/dsv3-full.plan.json" >/dev/null 2>&1

"$PY" - "$fp" "$N" "$out" <<'PYEOF'
import os, statistics, subprocess, sys
fp, n, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def cpu(args):
  pid = os.fork()
  if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1); os.dup2(fd, 2)
    os.execv(fp, [fp] + args)
  _, status, ru = os.wait4(pid, 0)
  if os.waitstatus_to_exitcode(status) != 0:
    sys.exit("%s %s failed" % (fp, " ".join(args)))
  return (ru.ru_utime + ru.ru_stime) * 1000

print("%-14s %12s %12s %12s" % ("case", "print ms", "verify ms", "rule 9 ms"))
for case in ["llama3-405b", "dsv3-hybrid", "dsv3-full"]:
  plan = os.path.join(d, case + ".plan.json")
  pr, ve = [], []
  for _ in range(n):
    pr.append(cpu(["print", plan]))
    ve.append(cpu(["verify", plan]))
  a, b = statistics.median(pr), statistics.median(ve)
  print("%-14s %12.0f %12.0f %12.0f" % (case, a, b, b - a))
PYEOF
