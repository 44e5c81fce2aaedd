#!/bin/bash
# scale_bench.sh - compile time and memory at scale (issue 14), this tree
# against main's, side by side in one run.
#
#   bench/scale_bench.sh              (N=3 runs per case, medians)
#   N=5 BASE=main bench/scale_bench.sh
#
# Builds a Release flexplan of this tree (bench/out/build) and of git ref
# $BASE (default main; bench/out/base-build, from `git archive`), writes the
# models to bench/out/scale/ and for each case runs both binaries N times:
#   flexplan compile X --emit=summary -o -     (ms, max RSS)
#   flexplan compile X -o plan.json            (ms)
# Times are the process's user + system CPU time (CLOCK=wall for wall time):
# the 2-core machine this was written on is shared, and wall time there
# mostly measures the neighbours.
# Cases (the goals are issue 14's, on its 2-core machine):
#   dsv3-hybrid    DeepSeek-V3 671B, hybrid_shard (8 per node) at 2,048 ranks
#                  goal: summary <= 300 ms, plan.json <= 450 ms
#   dsv3-experts   the same with every expert its own unit     goal <= 2 s
#   units-100k     100,000 modules of one param each           goal <= 2 s, 1 GiB
#   llama3-405b    examples/llama3-405b.json (16,384 ranks)    goal < 15 ms
# and a sweep of units (12,500 .. 100,000), buckets (a spec naming each
# param, 12,500 .. 100,000) and ranks (1,000 units on 64 .. 16,384 ranks)
# whose growth exponent (least-squares slope of log time on log size) is
# printed: 1 is linear, 2 quadratic. A base run slower than TIMEOUT s (120)
# is cut and shown as '>'. Only bash and /usr/bin/python3.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/release_flexplan.sh"
N=${N:-3}
TIMEOUT=${TIMEOUT:-120}
. "$(dirname "${BASH_SOURCE[0]}")/base_flexplan.sh"
models="$root/bench/out/scale"
mkdir -p "$models"
"$PY" "$root/tools/gen_examples.py" --bench "$models" >/dev/null

"$PY" - "$fp" "$basefp" "$N" "$TIMEOUT" "$models" "$root" "$BASE" <<'PYEOF'
import json, math, os, statistics, subprocess, sys, tempfile, time

fp, base, n, tmo, models, root, bname = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), \
    sys.argv[5], sys.argv[6], sys.argv[7]

def write(name, doc):
  path = os.path.join(models, name + ".json")
  with open(path, "w") as f:
    json.dump(doc, f)
  return path

def units(k, world=8):
  mods = [{"name": "m%d" % i, "params": [{"name": "m%d.w" % i, "shape": [64]}]} for i in range(k)]
  return {"model": {"format": "flexplan.model.v1", "name": "units%d" % k, "modules": mods},
          "spec": {"format": "flexplan.spec.v1", "mesh": {"world_size": world, "ranks_per_node": 8},
                   "strategy": "full_shard"}}

def buckets(k, per=100):
  mods = [{"name": "m%d" % i, "params": [{"name": "m%d.p%d" % (i, j), "shape": [16]} for j in range(per)]}
          for i in range(k // per)]
  b = [{"name": "b%d" % q, "params": ["m%d.p%d" % (q // per, q % per)]} for q in range(k)]
  d = units(0)
  d["model"] = {"format": "flexplan.model.v1", "name": "buckets%d" % k, "modules": mods}
  d["spec"]["buckets"] = b
  return d

with open(os.path.join(models, "deepseek-v3-671b.json")) as f:
  dsv3 = json.load(f)
dsv3["spec"]["strategy"] = "hybrid_shard"
dsv3["spec"]["hybrid_shard"] = {"intra_node_size": 8}
hyb = write("dsv3-hybrid", dsv3)
# every expert its own unit: a bucket per expert naming its params exactly
per_exp = {}
for mod in dsv3["model"]["modules"]:
  for p in mod["params"]:
    parts = p["name"].split(".")
    if len(parts) > 4 and parts[2] == "moe" and parts[3] == "experts":
      per_exp.setdefault("e%s_%s" % (parts[1], parts[4]), []).append(p["name"])
ex = json.loads(json.dumps(dsv3))
ex["spec"]["buckets"] = [{"name": k, "params": v} for k, v in per_exp.items()] + \
    [b for b in dsv3["spec"]["buckets"] if b["name"] != "experts"]
experts = write("dsv3-experts", ex)
cases = [("dsv3-hybrid", hyb, 300, 450), ("dsv3-experts", experts, 2000, None),
         ("units-100k", write("units-100k", units(100000)), 2000, None),
         ("llama3-405b", os.path.join(root, "examples", "llama3-405b.json"), 15, None)]

CPU = os.environ.get("CLOCK", "cpu") == "cpu"

def run(binary, args):
  # the child's user + system CPU time (CLOCK=cpu, default: on a shared,
  # loaded machine wall time mostly measures the neighbours) or wall time
  t0 = time.perf_counter()
  with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
    pr = subprocess.Popen([binary] + args, stdout=out, stderr=err)
    deadline = t0 + tmo
    while True:
      pid, status, ru = os.wait4(pr.pid, os.WNOHANG)
      if pid:
        break
      if time.perf_counter() > deadline:
        pr.kill()
        os.wait4(pr.pid, 0)
        return None, None, None
      time.sleep(0.002)
    wall = (time.perf_counter() - t0) * 1e3
    ms = (ru.ru_utime + ru.ru_stime) * 1e3 if CPU else wall
    rc = os.waitstatus_to_exitcode(status)
    out.seek(0), err.seek(0)
    o, e = out.read().decode(), err.read().decode().strip()
  if rc != 0:
    return ms, rc, e.splitlines()[-1][:100] if e else ""
  return ms, 0, o

def rss_of(binary, path):
  # max RSS of one run, via /usr/bin/time when there is one
  if not os.path.exists("/usr/bin/time"):
    return None
  r = subprocess.run(["/usr/bin/time", "-f", "%M", binary, "compile", path, "--emit=summary", "-o", "/dev/null"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    return int(r.stderr.strip().splitlines()[-1]) / 1024
  except (ValueError, IndexError):
    return None

def med(binary, args, k=n):
  ts, note = [], ""
  for _ in range(k):
    ms, rc, out = run(binary, args)
    if ms is None:
      return None, "timeout > %.0f s" % tmo
    if rc:
      return None, "exit %d: %s" % (rc, out)
    ts.append(ms)
  return statistics.median(ts), note

def fmt(x):
  return "%9.1f" % x if x is not None else "%9s" % ">"

plan = os.path.join(models, "out.plan.json")
print("flexplan scale benchmark: this tree vs %s, %d runs per case (medians, %s ms)" %
      (bname, n, "user+system CPU" if CPU else "wall"))
print("host: %d CPUs, load %.1f" % (os.cpu_count() or 0, os.getloadavg()[0]))
print()
print("%-13s %9s %9s %7s %9s %9s %8s %8s %6s" % ("case", "summary", bname, "x", "plan", bname, "MiB", bname,
                                                  "goal"))
for name, path, goal, goal_plan in cases:
  s_new, e1 = med(fp, ["compile", path, "--emit=summary", "-o", "-"])
  s_old, e2 = med(base, ["compile", path, "--emit=summary", "-o", "-"], k=1 if n > 1 else n)
  p_new, _ = med(fp, ["compile", path, "-o", plan])
  p_old, _ = med(base, ["compile", path, "-o", plan], k=1)
  r_new, r_old = rss_of(fp, path), (rss_of(base, path) if s_old is not None else None)
  ratio = "%7.1f" % (s_old / s_new) if s_old and s_new else "%7s" % "-"
  print("%-13s %s %s %s %s %s %8s %8s %6s" % (name, fmt(s_new), fmt(s_old), ratio, fmt(p_new), fmt(p_old),
        "%.0f" % r_new if r_new else "-", "%.0f" % r_old if r_old else "-", goal))
  if e1:
    print("   this tree: %s" % e1)
  if e2:
    print("   %s: %s" % (bname, e2))
  if s_new is not None:
    line = "   against the goal: summary %.2f of %d ms" % (s_new / goal, goal)
    if goal_plan and p_new is not None:
      line += ", plan.json %.2f of %d ms" % (p_new / goal_plan, goal_plan)
    print(line)
print()
print("growth exponents (slope of log median on log size; 1 linear, 2 quadratic):")

def sweep(label, sizes, make):
  for binary, who in ((fp, "this tree"), (base, bname)):
    xs, ys, why = [], [], ""
    for k in sizes:
      path = write("%s-%d" % (label, k), make(k))
      t, err = med(binary, ["compile", path, "--emit=summary", "-o", "-"], k=1 if binary == base else n)
      if t is None:
        why = "at %d: %s" % (k, err[:80])
        break
      xs.append(math.log(k)), ys.append(math.log(t))
    pts = len(xs)
    if pts < 2:
      print("  %-8s %-10s no exponent: %s (%s ms before)" % (label, who, why,
            ", ".join("%.0f" % math.exp(y) for y in ys) or "none"))
      continue
    mx, my = sum(xs) / pts, sum(ys) / pts
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    print("  %-8s %-10s exponent %.2f over %s (%s ms)" % (label, who, slope,
          ", ".join(str(s) for s in sizes[:pts]), ", ".join("%.0f" % math.exp(y) for y in ys)))

sweep("units", [12500, 25000, 50000, 100000], units)
sweep("buckets", [12500, 25000, 50000, 100000], buckets)
sweep("ranks", [64, 512, 4096, 16384], lambda w: units(1000, w))
PYEOF
