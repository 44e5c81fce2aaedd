#!/bin/bash
# compile_bench.sh - time `flexplan compile` on the big examples, then the
# scaling sweep.
#
#   bench/compile_bench.sh [EXAMPLE.json ...]      (default: llama3-405b, deepseek-v3-16b,
#                                                   and DeepSeek-V3 671B's shape at 2,048 ranks
#                                                   under hybrid_shard (8 per node) with 16, 31
#                                                   and 61 layers: time per param)
#   N=21 bench/compile_bench.sh                    (runs per example; default 11)
#   SWEEP=0 bench/compile_bench.sh                 (no sweep)
#
# Builds a Release flexplan in bench/out/build (gitignored), then for each
# example: one untimed warm-up, N timed runs of
#   flexplan compile X -o $tmp/plan.json        (wall time of the process)
# and N runs of
#   flexplan compile X --emit=summary -o -      (wall, and the planner's own compile_ms)
# and prints min / median / max, the 405B medians against the 100 ms aim and
# the 671B hybrid shape against issue 14's goals (summary at most 300 ms,
# plan.json at most 1.5 times that). Wall time includes process start,
# reading the JSON and writing the plan; compile_ms is what the planner
# reports for itself. Then (SWEEP=1, the default) bench/scale_bench.sh: the
# scaling sweep over units, buckets and ranks with each growth exponent, and
# the goal cases, this tree against main.
# Only bash and /usr/bin/python3 (standard library).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/release_flexplan.sh"
N=${N:-11}

if [ $# -eq 0 ]; then
  models="$root/bench/out/models"
  "$PY" "$root/tools/gen_examples.py" --bench "$models" >/dev/null
  for l in -16l -31l ""; do # the hybrid shape issue 14 times (the generator's is full_shard)
    "$PY" - "$models/deepseek-v3-671b$l.json" "$models/deepseek-v3-671b$l-hybrid.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["spec"]["strategy"] = "hybrid_shard"
d["spec"]["hybrid_shard"] = {"intra_node_size": 8}
json.dump(d, open(sys.argv[2], "w"))
EOF
  done
  set -- "$root/examples/llama3-405b.json" "$root/examples/deepseek-v3-16b.json" \
    "$models/deepseek-v3-671b-16l-hybrid.json" "$models/deepseek-v3-671b-31l-hybrid.json" \
    "$models/deepseek-v3-671b-hybrid.json"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fp-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$PY" - "$fp" "$N" "$tmp" "$@" <<'PYEOF'
import json, os, platform, statistics, subprocess, sys, time

fp, n, tmp, files = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]

def run(args):
  r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  if r.returncode != 0:
    sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(args), r.stderr))
  return r.stdout

def cpu():
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "?"

print("flexplan compile benchmark: %s, %d runs per example" % (run([fp, "--version"]).strip(), n))
print("host: %s, %d CPUs, %s" % (cpu(), os.cpu_count() or 0, platform.platform()))
print()
rows, med405 = [], None
for path in files:
  name = os.path.splitext(os.path.basename(path))[0]
  plan = os.path.join(tmp, name + ".plan.json")
  run([fp, "compile", path, "-o", plan])  # warm-up (page cache, first touch)
  wall = []
  for _ in range(n):
    t0 = time.perf_counter()
    run([fp, "compile", path, "-o", plan])
    wall.append((time.perf_counter() - t0) * 1e3)
  cms, swall, s = [], [], None
  for _ in range(n):
    t0 = time.perf_counter()
    out = run([fp, "compile", path, "--emit=summary", "-o", "-"])
    swall.append((time.perf_counter() - t0) * 1e3)
    s = json.loads(out)
    cms.append(float(s["compile_ms"]))
  rows.append((name, s["world_size"], s["params"], s["ops"], s["collectives"],
               min(wall), statistics.median(wall), max(wall), statistics.median(swall),
               min(cms), statistics.median(cms), max(cms), os.path.getsize(plan)))
  if name == "llama3-405b":
    med405 = (statistics.median(wall), statistics.median(swall), statistics.median(cms))

hdr = ("", "", "", "", "", "plan", "plan", "plan", "summary", "compile", "compile", "compile", "plan")
hdr2 = ("example", "ranks", "params", "ops", "colls", "wall min", "wall med", "wall max",
        "wall med", "_ms min", "_ms med", "_ms max", "KiB")
fmt = "%-18s %6s %7s %7s %6s %9s %9s %9s %9s %8s %8s %8s %7s"
print(fmt % hdr)
print(fmt % hdr2)
for r in rows:
  print(fmt % (r[0], r[1], r[2], r[3], r[4], *("%.1f" % x for x in r[5:12]),
               "%.0f" % (r[12] / 1024)))
print()
print("times in ms. plan wall: the whole `flexplan compile X -o plan.json` process;")
print("summary wall: the whole `compile X --emit=summary -o -` process (no plan written);")
print("compile_ms: the planner's own figure from that summary.")
moe = [r for r in rows if r[0].startswith("deepseek-v3-671b")]
if moe:
  print()
  print("time per param (plan wall median / params), DeepSeek-V3 671B shape at 2,048 ranks:")
  for r in moe:
    print("  %-22s %6d params  %8.1f ms  %6.2f us/param" % (r[0], r[2], r[6], r[6] * 1e3 / r[2]))
  full = [r for r in moe if r[0] in ("deepseek-v3-671b", "deepseek-v3-671b-hybrid")]
  for r in full:
    print("%s against issue 14's goals: summary wall median %.1f ms (%.3f of 300 ms), "
          "plan wall / summary wall %.2f (goal <= 1.5)" % (r[0], r[8], r[8] / 300.0, r[6] / r[8]))
if med405 is not None:
  print("llama3-405b against the 100 ms aim (median / 100 ms): plan wall %.3f, "
        "summary wall %.3f, compile_ms %.3f" % tuple(x / 100.0 for x in med405))
PYEOF

if [ "${SWEEP:-1}" = 1 ]; then
  echo
  N=3 bash "$root/bench/scale_bench.sh"
fi
