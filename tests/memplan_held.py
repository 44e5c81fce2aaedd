#!/usr/bin/env python3
"""The memory plans' "held" candidate is built only when plain's modeled
critical path goes through a wait that orders only a reuse of bytes
(planner/pipeline.c, held_always): everything else on that path is the same
in every placement of the same lowering, so skipping it must never change a
plan. Checked against FLEXPLAN_MEMPLAN_HELD_ALWAYS=1 (held 1 built wherever
it was before):

  - every example, on its own hardware and on h200 and cpu-mpi, as written
    and under --policy fsdp2, compiles to the same plan.json, byte for byte,
    both ways;
  - the guard is not idle: llama3-405b-tp8 (hybrid shard over 16,384 ranks,
    whose step is held back by communication, not by reused bytes) runs
    memplan twice (plain, once per cast placement) where held_always runs it
    four times, and its plan is the same;
  - nor is it in the way: deepseek-v3-16b, whose held and timed plans are
    faster (its reductions' staging sat where the next layer's experts were
    gathered), runs memplan as often both ways.

usage: memplan_held.py --cmd FLEXPLAN --examples DIR"""
import os
import re
import subprocess
import sys
import tempfile

from memplan_lists import examples_args


def run(cmd, args, always, out):
  env = dict(os.environ)
  env.pop("FLEXPLAN_MEMPLAN_HELD_ALWAYS", None)
  if always:
    env["FLEXPLAN_MEMPLAN_HELD_ALWAYS"] = "1"
  r = subprocess.run([cmd, "compile"] + args + ["-o", out, "--time"], env=env, stdout=subprocess.DEVNULL,
                     stderr=subprocess.PIPE, text=True)
  if r.returncode != 0:
    sys.exit("memplan_held: compile %s%s failed (exit %d):\n%s" %
             (" ".join(args), " (held always)" if always else "", r.returncode, r.stderr[-2000:]))
  with open(out, "rb") as f:
    plan = f.read()
  m = re.search(r"^\s*memplan\s+[0-9.]+(?:\s+\((\d+) runs\))?", r.stderr, re.M)
  if not m:
    sys.exit("memplan_held: no memplan line in --time's output:\n" + r.stderr[-2000:])
  return plan, int(m.group(1) or 1)


def main():
  cmd, srcs = examples_args("memplan_held")
  bad, runs, n = [], {}, 0
  with tempfile.TemporaryDirectory() as tmp:
    for src in srcs:
      name = os.path.basename(src)[:-len(".json")]
      for hw in [None, "h200", "cpu-mpi"]:
        for policy in ["flexplan", "fsdp2"]:
          args = [src, "--policy", policy] + (["--hardware", hw] if hw else [])
          guarded, r0 = run(cmd, args, False, os.path.join(tmp, "guarded.json"))
          always, r1 = run(cmd, args, True, os.path.join(tmp, "always.json"))
          n += 1
          if r0 > r1:
            sys.exit("memplan_held: %s ran memplan %d times, more than with held always (%d)" % (" ".join(args), r0, r1))
          if hw is None and policy == "flexplan":
            runs[name] = (r0, r1)
          if guarded != always:
            bad.append(" ".join([name, "--policy", policy] + (["--hardware", hw] if hw else [])))
      print("%-22s memplan runs %d (held always: %d)" % (name, *runs[name]))
  if bad:
    sys.exit("memplan_held: skipping held changed the plan of: " + "; ".join(bad))
  if runs.get("llama3-405b-tp8") != (2, 4):
    sys.exit("memplan_held: llama3-405b-tp8 ran memplan %s times (guarded, held always); want (2, 4)" %
             (runs.get("llama3-405b-tp8"),))
  d = runs.get("deepseek-v3-16b")
  if not d or d[0] != d[1] or d[0] <= 2:
    sys.exit("memplan_held: deepseek-v3-16b ran memplan %s times (guarded, held always); want the same, held "
             "plans included" % (d,))
  print("memplan_held: %d compiles, the same plan with and without held's guard" % n)


if __name__ == "__main__":
  main()
