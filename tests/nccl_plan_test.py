#!/usr/bin/env python3
"""nccl_plan_test.py - compile the MPI tests' models and specs (tests/mpi/)
for several world sizes, with both lowering policies, then run
test_nccl_plan on all of them (the NCCL backend's GPU-free decisions, checked
for every rank; no GPU, no MPI).

usage: nccl_plan_test.py --flexplan EXE --test EXE --dir tests/mpi
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CASES = [  # (model, spec, world sizes)
    ("mlp", "full_shard", [1, 2, 3, 4]),
    ("mlp", "shard_grad_op", [1, 3]),
    ("mlp", "no_shard", [2]),
    ("mlp", "hybrid", [4]),
    ("mlp", "hybrid-ga2", [4]),
    ("mlp", "placements-w3", [3]),
    ("mlp", "placements-w4", [4]),
    ("mlp-frozen", "no_shard", [3]),
    ("mlp", "bf16", [2]),
    ("mlp", "ga2", [1, 3]),
    ("mlp-tied", "recompute", [2, 4]),
    ("mlp-tied", "placements-tied-w4", [4]),
    ("mlp-tied-mid", "reshard2", [4]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flexplan", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    plans = []
    with tempfile.TemporaryDirectory(prefix="fp-nccl-plan-") as tmp:
        for model, spec, worlds in CASES:
            with open(os.path.join(a.dir, spec + ".spec.json")) as f:
                sp = json.load(f)
            for w in worlds:
                for policy in ("flexplan", "fsdp2"):
                    s = json.loads(json.dumps(sp))
                    mesh = s.setdefault("mesh", {})
                    mesh["world_size"] = w
                    if mesh.get("ranks_per_node", 1) > w:
                        del mesh["ranks_per_node"]
                    sp_path = os.path.join(tmp, f"{spec}-w{w}.spec.json")
                    with open(sp_path, "w") as f:
                        json.dump(s, f)
                    out = os.path.join(tmp, f"{model}-{spec}-w{w}-{policy}.plan.json")
                    r = subprocess.run([a.flexplan, "compile", os.path.join(a.dir, model + ".model.json"),
                                        "--spec", sp_path, "--policy", policy, "-o", out],
                                       stderr=subprocess.PIPE, text=True)
                    if r.returncode != 0:
                        if policy == "fsdp2":  # a spec FSDP2's policy cannot express
                            print(f"nccl_plan_test: skipping {out}: {r.stderr.strip().splitlines()[-1]}")
                            continue
                        print(r.stderr, file=sys.stderr)
                        return 1
                    plans.append(out)
        return subprocess.run([a.test, *plans]).returncode


if __name__ == "__main__":
    sys.exit(main())
