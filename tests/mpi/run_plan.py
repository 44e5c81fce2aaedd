#!/usr/bin/env python3
"""run_plan.py - compile a plan for N ranks, then run a program on it under
mpirun with N ranks.

The plan is compiled from a model and a spec (tests/mpi/*.json) with the
spec's mesh.world_size set to N; the program's arguments have "{plan}"
replaced by the plan's path. TMPDIR points at a temporary directory that is
removed afterwards. Exit status: the program's, or 1 when the plan does not
compile.

usage: run_plan.py --flexplan EXE --model M --spec S --np N [--policy P]
                   --mpiexec "MPIEXEC NPFLAG [PREFLAGS...]" -- PROGRAM [ARGS...]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit(__doc__)
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--flexplan", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--mpiexec", required=True, help="mpiexec, its -n flag, then its preflags")
    ap.add_argument("--policy", default="flexplan", help="the compiler's --policy (flexplan or fsdp2)")
    a = ap.parse_args(argv[:cut])
    prog = argv[cut + 1:]
    mpiexec = a.mpiexec.split(";") if ";" in a.mpiexec else a.mpiexec.split()

    with open(a.spec) as f:
        spec = json.load(f)
    mesh = spec.setdefault("mesh", {})
    mesh["world_size"] = a.np
    if mesh.get("ranks_per_node", 1) > a.np:
        del mesh["ranks_per_node"]
    with tempfile.TemporaryDirectory(prefix="fp-mpi-") as tmp:
        spec_path = os.path.join(tmp, "spec.json")
        plan = os.path.join(tmp, "plan.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        r = subprocess.run([a.flexplan, "compile", a.model, "--spec", spec_path, "--policy", a.policy, "-o", plan])
        if r.returncode != 0:
            print(f"run_plan: flexplan compile failed ({r.returncode})", file=sys.stderr)
            return 1
        cmd = [mpiexec[0], mpiexec[1], str(a.np), *mpiexec[2:], *[p.replace("{plan}", plan) for p in prog]]
        print("run_plan:", " ".join(cmd), flush=True)
        return subprocess.run(cmd, env=dict(os.environ, TMPDIR=tmp)).returncode


if __name__ == "__main__":
    sys.exit(main())
