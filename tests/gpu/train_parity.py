#!/usr/bin/env python3
"""train_parity.py (label gpu) - train_mlp at world size 1 on the NCCL
backend against the MPI backend's run of the same plan, bit for bit.

Compiles tests/mpi/<model>.model.json with tests/mpi/<spec>.spec.json for
one rank (and --policy), then runs train_mlp under mpiexec -n 1:
  mpi      the MPI backend (the reference run)
  eager    NCCL, FP_CUDA_EAGER
  graph    NCCL, FP_CUDA_GRAPH: step 0 eager, graphs captured at step 1 and
           replayed from then on
  capture  NCCL, FP_CUDA_CAPTURE_SAFE, the trainer capturing its whole step
           at step 1 and replaying it
  step     the same through the executor's capture API (fp_exec_capture_begin
           / _end, a global-mode capture; docs/cuda.md "One graph per step")
each with --check (every step against train_mlp's single-process reference;
the gathered weights bit for bit) and a refit with new weights before step
--refit-at (after the graphs were captured: they are replayed after it), then
compares the main-weight shards each run dumped after its last step: all
must be identical bytes. Exit 77 (skipped) when train_mlp finds no GPU.

usage: train_parity.py --flexplan EXE --train EXE --mpiexec "MPIEXEC;NPFLAG;PREFLAGS..."
                       --dir tests/mpi --model M --spec S [--policy P] [--steps N] [--refit-at K]
"""
import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flexplan", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--policy", default="flexplan")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--refit-at", type=int, default=3)
    a = ap.parse_args()
    mpiexec = a.mpiexec.split(";")
    with open(os.path.join(a.dir, a.spec + ".spec.json")) as f:
        spec = json.load(f)
    mesh = spec.setdefault("mesh", {})
    mesh["world_size"] = 1
    mesh.pop("ranks_per_node", None)
    with tempfile.TemporaryDirectory(prefix="fp-gpu-parity-") as tmp:
        sp = os.path.join(tmp, "spec.json")
        plan = os.path.join(tmp, "plan.json")
        with open(sp, "w") as f:
            json.dump(spec, f)
        r = subprocess.run([a.flexplan, "compile", os.path.join(a.dir, a.model + ".model.json"), "--spec", sp,
                            "--policy", a.policy, "-o", plan])
        if r.returncode != 0:
            print("train_parity: flexplan compile failed", file=sys.stderr)
            return 1
        # eager first: without a GPU it is the one that says so (77), at once
        runs = [("eager", ["--backend", "nccl", "--mode", "eager"]), ("mpi", ["--backend", "mpi"]),
                ("graph", ["--backend", "nccl", "--mode", "graph"]),
                ("capture", ["--backend", "nccl", "--mode", "capture"]),
                ("step", ["--backend", "nccl", "--mode", "step"])]
        dumps = {}
        for name, args in runs:
            prefix = os.path.join(tmp, name)
            cmd = [mpiexec[0], mpiexec[1], "1", *mpiexec[2:], a.train, "--plan", plan, "--steps", str(a.steps),
                   "--refit-at", str(a.refit_at), "--check", "--dump", prefix, *args]
            print("train_parity:", " ".join(cmd), flush=True)
            r = subprocess.run(cmd, env=dict(os.environ, TMPDIR=tmp))
            if r.returncode == 77:
                print("train_parity: SKIPPED: no CUDA device")
                return 77
            if r.returncode != 0:
                print(f"train_parity: the {name} run failed ({r.returncode})", file=sys.stderr)
                return 1
            dumps[name] = prefix + ".rank0.safetensors"
        bad = [n for n in dumps if not filecmp.cmp(dumps["mpi"], dumps[n], shallow=False)]
        if bad:
            print(f"train_parity: FAIL: main weights differ from the MPI run's: {', '.join(bad)}", file=sys.stderr)
            return 1
        print(f"train_parity: ok: {a.model}/{a.spec} ({a.policy}): mpi, eager, graph, capture and step runs give the same "
              f"main weights after {a.steps} steps (refit before step {a.refit_at})")
        return 0


if __name__ == "__main__":
    sys.exit(main())
