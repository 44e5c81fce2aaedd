#!/bin/bash
# reshard_compile.sh - compile + verify time of transfers between plans
# (issue 15: llama3-405b from 16,384 to 8,192 ranks, aim under 100 ms), this
# tree against git ref $BASE, side by side in one run.
#
#   bench/reshard_compile.sh                 (N=3 runs per case, medians)
#   N=5 BASE=6ef5968 bench/reshard_compile.sh
#
# Builds a Release flexplan of this tree (bench/out/build) and of $BASE
# (default main; bench/out/base-build, bench/base_flexplan.sh), compiles
# the plans once with this tree's binary (the plan format is the same), and
# runs `flexplan reshard FROM TO` with each binary N times. The times are
# the ones the summary prints (compile_ms + verify_ms, the transfer's own
# work, not the reading of the plans). Cases:
#   405b 16384->8192   llama3-405b (examples, hybrid 8), aim < 100 ms
#   405b 8192->16384   the way back: half the processes receive everything
#   405b 1024->512     the same at 1,024 ranks
#   dsv3 2048->1024    DeepSeek-V3 671B shape, hybrid 8 (tools/gen_examples.py)
#   8b fs64->mx8       llama3-8b full_shard 64 (fp32) -> every weight frozen
#                      and kept as MXFP8, no_shard on 8
# Only bash and /usr/bin/python3.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/release_flexplan.sh"
N=${N:-3}
. "$(dirname "${BASH_SOURCE[0]}")/base_flexplan.sh"
models="$root/bench/out/reshard"
mkdir -p "$models"
"$PY" "$root/tools/gen_examples.py" --bench "$models" >/dev/null

"$PY" - "$fp" "$basefp" "$N" "$models" "$root" "$BASE" <<'PYEOF'
import copy, json, os, statistics, subprocess, sys

fp, base, n, models, root, bname = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]

def plan(name, doc):
  path = os.path.join(models, name + ".json")
  with open(path, "w") as f:
    json.dump(doc, f)
  out = os.path.join(models, name + ".plan.json")
  r = subprocess.run([fp, "compile", path, "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  if r.returncode:
    sys.exit("compile %s: %s" % (name, r.stderr.strip().splitlines()[-1]))
  return out

def world(doc, w, **spec):
  d = copy.deepcopy(doc)
  d["spec"]["mesh"]["world_size"] = w
  d["spec"].update(spec)
  return d

l405 = json.load(open(os.path.join(root, "examples", "llama3-405b.json")))
l8 = json.load(open(os.path.join(root, "examples", "llama3-8b.json")))
dsv3 = json.load(open(os.path.join(models, "deepseek-v3-671b.json")))
dsv3["spec"]["strategy"] = "hybrid_shard"
dsv3["spec"]["hybrid_shard"] = {"intra_node_size": 8}
infer = copy.deepcopy(l8)
for m in infer["model"]["modules"]:
  for p in m.get("params", []):
    p["requires_grad"] = False
infer["spec"] = {"format": "flexplan.spec.v1", "mesh": {"world_size": 8, "ranks_per_node": 8},
                 "strategy": "no_shard", "defaults": {"mixed_precision": {"param_dtype": "mxfp8"}}}
p16k, p8k = plan("405b-16384", world(l405, 16384)), plan("405b-8192", world(l405, 8192))
p1k, p512 = plan("405b-1024", world(l405, 1024)), plan("405b-512", world(l405, 512))
cases = [("405b 16384->8192", p16k, p8k, 100), ("405b 8192->16384", p8k, p16k, None),
         ("405b 1024->512", p1k, p512, None),
         ("dsv3 2048->1024", plan("dsv3-2048", world(dsv3, 2048)), plan("dsv3-1024", world(dsv3, 1024)), None),
         ("8b fs64->mx8", plan("8b-64", world(l8, 64)), plan("8b-mx8", infer), None)]

def med(binary, a, b, k):
  ms, last = [], None
  for _ in range(k):
    r = subprocess.run([binary, "reshard", a, b], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode:
      return None, None, (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1][:100]
    s = json.loads(r.stdout)
    ms.append(s["compile_ms"] + s["verify_ms"])
    last = s
  return statistics.median(ms), last, None

print("flexplan reshard: this tree vs %s, compile + verify ms (medians of %d; %s: 1 run)" % (bname, n, bname))
print("host: %d CPUs, load %.1f" % (os.cpu_count() or 0, os.getloadavg()[0]))
print()
print("%-18s %10s %10s %10s %10s %8s %6s %6s" % ("case", "ms", bname, "ops", bname + " ops", "x", "ratio", "aim"))
for name, a, b, aim in cases:
  t_new, s_new, e_new = med(fp, a, b, n)
  t_old, s_old, e_old = med(base, a, b, 1)
  x = "%8.1f" % (t_old / t_new) if t_new and t_old else "%8s" % "-"
  print("%-18s %10s %10s %10s %10s %s %6s %6s" % (
      name, "%.1f" % t_new if t_new is not None else "-", "%.1f" % t_old if t_old is not None else "-",
      s_new["ops"] if s_new else "-", s_old["ops"] if s_old else "-", x,
      "%.3f" % s_new["ratio"] if s_new else "-", aim or ""))
  for who, e in (("this tree", e_new), (bname, e_old)):
    if e:
      print("   %s: %s" % (who, e))
  if aim and t_new is not None:
    print("   against the aim: %.3f of %d ms" % (t_new / aim, aim))
PYEOF
