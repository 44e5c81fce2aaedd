#!/bin/bash
# schedule_bench.sh - flexplan's schedule against the fsdp2 policy, on the
# same cost model, for every example: modeled step, exposed communication,
# peak bytes, and the memory plan's arena / lower bound.
#
#   bench/schedule_bench.sh [EXAMPLE.json ...]     (default: every examples/*.json)
#
# Builds a Release flexplan in bench/out/build (gitignored), compiles each
# example twice - as specified (`flexplan`) and with `--policy fsdp2` - and
# prints both side by side with their ratios (fsdp2 / flexplan: above 1 means
# flexplan is faster or smaller). Every figure but the arena ratio is modeled
# (docs/cost-model.md). Only bash and /usr/bin/python3 (standard library).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/release_flexplan.sh"
[ $# -eq 0 ] && set -- "$root"/examples/*.json

"$PY" - "$fp" "$@" <<'PYEOF'
import json, os, subprocess, sys

fp, files = sys.argv[1], sys.argv[2:]

def summary(path, *extra):
  r = subprocess.run([fp, "compile", path, "--emit=summary", "-o", "-", *extra],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  if r.returncode != 0:
    sys.exit("failed: %s %s\n%s" % (path, " ".join(extra), r.stderr))
  return json.loads(r.stdout)

def gib(b):
  return b / float(1 << 30)

fmt = "%-18s %-5s %10s %10s %10s %8s %8s %8s %9s %9s %6s %7s"
print("flexplan vs the fsdp2 policy (modeled on each example's hardware; ratios fsdp2 / flexplan)")
print()
print(fmt % ("example", "ranks", "step ms", "step ms", "step", "exposed", "exposed", "exposed",
             "peak GiB", "peak GiB", "peak", "arena/"))
print(fmt % ("", "", "flexplan", "fsdp2", "ratio", "flexplan", "fsdp2", "ratio",
             "flexplan", "fsdp2", "ratio", "lbound"))
worst = 0.0
for path in files:
  name = os.path.splitext(os.path.basename(path))[0]
  a, b = summary(path), summary(path, "--policy", "fsdp2")
  worst = max(worst, a["arena_over_lower_bound"])
  ratio = lambda x, y: "%.3f" % (y / x) if x > 0 else "-"
  print(fmt % (name, a["world_size"], "%.2f" % a["modeled_step_ms"], "%.2f" % b["modeled_step_ms"],
               ratio(a["modeled_step_ms"], b["modeled_step_ms"]),
               "%.2f" % a["modeled_exposed_comm_ms"], "%.2f" % b["modeled_exposed_comm_ms"],
               ratio(a["modeled_exposed_comm_ms"], b["modeled_exposed_comm_ms"]),
               "%.2f" % gib(a["peak_bytes"]), "%.2f" % gib(b["peak_bytes"]),
               ratio(a["peak_bytes"], b["peak_bytes"]), "%.4f" % a["arena_over_lower_bound"]))
print()
print("arena / lower bound, worst example: %.4f (aim <= 1.05)" % worst)
print("peak = arena + the trainer's activations at the modeled peak; step and exposed are modeled.")
PYEOF
