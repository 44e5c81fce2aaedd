#!/usr/bin/env python3
"""Compiles that used to be quadratic (issue 14) succeed at scale (stdlib only).

usage: scale_compile.py --cmd FLEXPLAN [--units N] [--buckets N]

1. N one-param modules (default 20,000: once "more than 50000000 pairs of
   buffers share arena bytes", exit 70): the summary counts N buckets, N
   params, 3 N - 1 collectives and 22 N - 9 ops (as main's build counted
   them before this change at 1,000 to 4,000 units); the plan round-trips - plan.json and .fpir print to the same
   text - and both verify.
2. A spec of N buckets (default 100,000), each naming one param exactly, over
   N params in N/100 modules: the summary counts N buckets and N params.
3. Bucket precedence with literal and glob patterns mixed (the matcher looks
   literals up by hash): a glob bucket listed before a literal one takes
   the param, a literal listed first keeps it; checked on the buffer names
   in the .fpir (and a bucket left with nothing is the usual located error).
No timing is asserted: the suite's timeout is the only clock.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(cmd, *args, check=True):
  r = subprocess.run([cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  if check and r.returncode != 0:
    sys.exit("FAILED (exit %d): %s\n%s" % (r.returncode, " ".join(args), r.stderr[-4000:]))
  return r.stdout


def spec(world, buckets=None):
  s = {"format": "flexplan.spec.v1", "mesh": {"world_size": world, "ranks_per_node": 8},
       "strategy": "full_shard"}
  if buckets is not None:
    s["buckets"] = buckets
  return s


def write(tmp, name, model, sp):
  path = os.path.join(tmp, name + ".json")
  with open(path, "w") as f:
    json.dump({"model": {"format": "flexplan.model.v1", "name": name, "modules": model}, "spec": sp}, f)
  return path


def expect(what, got, want):
  if got != want:
    sys.exit("FAILED: %s: got %r, expected %r" % (what, got, want))
  print("ok: %s = %r" % (what, got))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--cmd", required=True)
  ap.add_argument("--units", type=int, default=20000)
  ap.add_argument("--buckets", type=int, default=100000)
  a = ap.parse_args()
  fp = a.cmd
  with tempfile.TemporaryDirectory() as tmp:
    # 1. many one-param units
    n = a.units
    mods = [{"name": "m%d" % i, "params": [{"name": "m%d.w" % i, "shape": [64]}]} for i in range(n)]
    path = write(tmp, "units", mods, spec(8))
    s = json.loads(run(fp, "compile", path, "--emit=summary", "-o", "-"))
    expect("units: buckets", s["buckets"], n)
    expect("units: params", s["params"], n)
    # per unit a forward all-gather, a backward re-gather and a reduce-scatter,
    # less the backward re-gather of the last unit, which keeps its forward
    # gather: 3 N - 1 collectives (main's build gives 2,999 / 5,999 / 11,999
    # on 1,000 / 2,000 / 4,000 units); ops other than record/wait: 10 N - 1
    # the same way. The record/wait pairs depend on the memory plan (which
    # buffers share bytes: docs/schedule.md), 12 N - 8 on main then, 12 N - 6
    # since memplan places by modeled lifetimes; at most 12 N.
    expect("units: collectives", s["collectives"], 3 * n - 1)
    plan, ir = os.path.join(tmp, "u.plan.json"), os.path.join(tmp, "u.fpir")
    run(fp, "compile", path, "-o", plan)
    run(fp, "compile", path, "--emit=ir", "-o", ir)
    with open(ir) as f:
      nsync = sum(1 for line in f if line.split()[2:3] in (["record"], ["wait"]))
    expect("units: ops other than record/wait", s["ops"] - nsync, 10 * n - 1)
    expect("units: record/wait ops <= 12 N", nsync <= 12 * n, True)
    ta, tb = run(fp, "print", plan), run(fp, "print", ir)
    expect("units: print(plan.json) == print(.fpir)", ta == tb, True)
    run(fp, "verify", plan)
    run(fp, "verify", ir)
    print("ok: units: both verify")
    # 2. a spec with many buckets, each naming one param
    nb, per_mod = a.buckets, 100
    mods = [{"name": "m%d" % i, "params": [{"name": "m%d.p%d" % (i, j), "shape": [16]} for j in range(per_mod)]}
            for i in range(nb // per_mod)]
    bks = [{"name": "b%d" % k, "params": ["m%d.p%d" % (k // per_mod, k % per_mod)]} for k in range(nb)]
    path = write(tmp, "buckets", mods, spec(8, bks))
    s = json.loads(run(fp, "compile", path, "--emit=summary", "-o", "-"))
    expect("buckets: buckets", s["buckets"], nb)
    expect("buckets: params", s["params"], nb)
    # 3. precedence of literal and glob patterns: the first bucket in spec
    # order whose patterns match takes a param
    mods = [{"name": "a", "params": [{"name": "a.w", "shape": [8]}, {"name": "a.v", "shape": [8]}]}]
    g, lit, rest = ({"name": "g", "params": ["a.*"]}, {"name": "lit", "params": ["a.w"]},
                    {"name": "rest", "params": ["*"]})
    for order, bks, want in (("literal-first", [lit, g], {"a.w": "lit", "a.v": "g"}),
                             ("glob-first", [g, lit, rest], None)):
      sp = spec(2, bks)
      sp["mesh"]["ranks_per_node"] = 2
      path = write(tmp, order, mods, sp)
      if want is None:
        # the glob takes both: 'lit' (and 'rest') match nothing, a located error names 'lit' first
        r = subprocess.run([fp, "compile", path, "--emit=ir", "-o", "-"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        expect("precedence %s: exit" % order, r.returncode, 1)
        expect("precedence %s: error" % order, "/spec/buckets/1/params: bucket 'lit' matches no parameter" in r.stderr,
               True)
        continue
      got = {}
      for line in run(fp, "compile", path, "--emit=ir", "-o", "-").splitlines():
        t = line.split()
        if len(t) > 2 and t[0] == "param":
          got[t[2]] = [x[len("bucket="):] for x in t if x.startswith("bucket=")][0]
      expect("precedence %s" % order, got, want)
  print("scale_compile: all passed")


if __name__ == "__main__":
  main()
