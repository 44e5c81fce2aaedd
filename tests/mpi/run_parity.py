#!/usr/bin/env python3
"""run_parity.py - one train_mlp parity run: compile a plan from a model and a
spec under tests/mpi/ (world_size set to the rank count), then run
`train_mlp --plan PLAN --steps N --check` under mpirun with that many ranks.
Exit status: train_mlp's (0: every step matched the reference), or 1 when
the plan does not compile.

usage: run_parity.py --flexplan EXE --train EXE --model M --spec S --np N
                     [--steps N] [--train-args "..."] -- MPIEXEC NPFLAG [PREFLAGS...]
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
        sys.exit("usage: run_parity.py ... -- MPIEXEC NPFLAG [PREFLAGS...]")
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--flexplan", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--train-args", default="")
    a = ap.parse_args(argv[:cut])
    mpiexec, npflag, preflags = argv[cut + 1], argv[cut + 2], argv[cut + 3:]

    with open(a.spec) as f:
        spec = json.load(f)
    mesh = spec.setdefault("mesh", {})
    mesh["world_size"] = a.np
    if mesh.get("ranks_per_node", 1) > a.np:
        del mesh["ranks_per_node"]
    with tempfile.TemporaryDirectory(prefix="fp-parity-") as tmp:
        spec_path = os.path.join(tmp, "spec.json")
        plan = os.path.join(tmp, "plan.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        r = subprocess.run([a.flexplan, "compile", a.model, "--spec", spec_path, "-o", plan])
        if r.returncode != 0:
            print(f"run_parity: flexplan compile failed ({r.returncode})", file=sys.stderr)
            return 1
        cmd = [mpiexec, npflag, str(a.np), *preflags, a.train, "--plan", plan, "--steps", str(a.steps),
               "--check", *a.train_args.split()]
        print("run_parity:", " ".join(cmd), flush=True)
        env = dict(os.environ, TMPDIR=tmp)
        return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
