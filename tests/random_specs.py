#!/usr/bin/env python3
"""Random models and specs through the whole compiler (stdlib only).

Draws N small models (random shapes, dtypes, frozen params, weight reuse in
the forward order, tied weights: model.json v2 "uses", modules that only
use) and specs (every strategy, placement, bucket form, mixed precision,
reshard_after_forward, no_shard patterns, recompute patterns, grad
accumulation, budgets) from a fixed seed, compiles each, and requires that
the compiler either succeeds - and then `verify`, `print` of the plan and of
the .fpir agree - or rejects the input with exit status 1 and a located
"file:line:col: error: /pointer: ..." first line. Any other outcome (an
internal error, a crash, a hang) fails the test and keeps the input.
usage: random_specs.py --cmd FLEXPLAN [--n N] [--seed S] [--keep DIR]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

LOCATED = re.compile(r"^[^:]+:\d+:\d+: error: (/[^:]*)?: ")


def model(r):
    nmod = r.randint(1, 5)
    mods = []
    for i in range(nmod):
        params = []
        for j in range(r.randint(1, 3)):
            nd = r.choice([1, 1, 2, 2, 3])
            shape = [r.choice([1, 2, 3, 5, 8, 13, 16, 31, 64]) for _ in range(nd)]
            p = {"name": f"m{i}.p{j}", "shape": shape}
            if r.random() < 0.2:
                p["dtype"] = r.choice(["fp32", "bf16", "fp16"])
            if r.random() < 0.15:
                p["requires_grad"] = False
            params.append(p)
        m = {"name": f"m{i}", "params": params}
        if r.random() < 0.7:
            m["flops_fwd"] = float(r.randint(0, 10**6))
            m["activation_bytes"] = r.randint(0, 10**5)
        mods.append(m)
    fmt = "flexplan.model.v1"
    if nmod >= 2 and r.random() < 0.3:  # tied weights: module i also reads params of module j
        fmt = "flexplan.model.v2"
        i, j = r.sample(range(nmod), 2)
        mods[i]["uses"] = [p["name"] for p in r.sample(mods[j]["params"], r.randint(1, len(mods[j]["params"])))]
        if r.random() < 0.3:  # a module that reads only tied params
            mods[i]["params"] = []
            if r.random() < 0.5:
                del mods[i]["params"]
        if r.random() < 0.5:
            mods[j]["activation_bytes_checkpointed"] = r.randint(0, 10**4)
    order = [m["name"] for m in mods]
    if r.random() < 0.3:  # weight reuse: a module runs twice
        order.insert(r.randint(0, len(order)), r.choice(order))
    return {"format": fmt, "name": "rnd", "modules": mods, "forward_order": order}


def placement(r, G):
    k = r.choice(["shard", "shard", "ragged_shard", "owned", "replicate"])
    if k == "shard":
        return {"kind": "shard", "dim": r.choice([0, 0, 1, 2])}
    if k == "ragged_shard":
        n = G if r.random() < 0.9 else G + 1
        return {"kind": "ragged_shard", "units": [r.randint(0, 3) for _ in range(n)] or [1],
                "align_elems": r.choice([1, 4, 32])}
    if k == "owned":
        return {"kind": "owned", "rank": r.choice(["auto", 0, G - 1, G])}
    return {"kind": "replicate"}


def mp(r):
    d = {}
    for key in ["param_dtype", "reduce_dtype", "main_grad_dtype"]:
        if r.random() < 0.5:
            d[key] = r.choice(["fp32", "bf16", "fp16"])
    return d


def spec(r, mdl):
    strategy = r.choice(["full_shard", "shard_grad_op", "no_shard", "hybrid_shard"])
    world = r.choice([1, 2, 3, 4, 8])
    s = {"format": "flexplan.spec.v1", "mesh": {"world_size": world}, "strategy": strategy}
    G = world
    if strategy == "hybrid_shard":
        intra = r.choice([d for d in range(1, world + 1) if world % d == 0])
        s["hybrid_shard"] = {"intra_node_size": intra}
        G = intra
    if G < 1:
        G = 1
    s["defaults"] = {"placement": placement(r, G), "mixed_precision": mp(r),
                     "reshard_after_forward": r.choice([True, False, 1, 2, G])}
    roll = r.random()
    names = [m["name"] for m in mdl["modules"]]
    if roll < 0.3:
        s["buckets"] = {"auto": {"target_bytes": r.randint(1, 4096)}} if r.random() < 0.8 else {"auto": {}}
    elif roll < 0.7:
        bs = []
        for i, n in enumerate(r.sample(names, r.randint(1, len(names)))):
            b = {"name": f"b{i}", "params": [f"{n}.*"]}
            if r.random() < 0.3:
                b["split"] = "per_module"
            if r.random() < 0.5:
                b["placement"] = placement(r, G)
            if r.random() < 0.3:
                b["mixed_precision"] = mp(r)
            if r.random() < 0.3:
                b["reshard_after_forward"] = r.choice([True, False, 2, 3])
            bs.append(b)
        s["buckets"] = bs
    if r.random() < 0.2:
        s["no_shard"] = [f"{r.choice(names)}.*"]
    if r.random() < 0.3:
        s["grad_accumulation"] = r.randint(1, 3)
    if r.random() < 0.15:
        s["memory_budget_bytes"] = r.randint(1, 200000)
    if r.random() < 0.25:  # recompute (a pattern that names no module now and then)
        s["recompute"] = [r.choice(names + ["m*", "zz*"]) for _ in range(r.randint(1, 2))]
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=20261121)
    ap.add_argument("--keep", default=None)
    a = ap.parse_args()
    r = random.Random(a.seed)
    fails, ok, rejected = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.n):
            mdl = model(r)
            doc = {"model": mdl, "spec": spec(r, mdl)}
            path = os.path.join(tmp, f"case{i}.json")
            with open(path, "w") as f:
                json.dump(doc, f, indent=1)
            plan, ir = os.path.join(tmp, "p.json"), os.path.join(tmp, "p.fpir")
            res = subprocess.run([a.cmd, "compile", path, "-o", plan], capture_output=True, timeout=60)
            err = res.stderr.decode(errors="replace")
            if res.returncode == 1:
                first = err.splitlines()[0] if err else ""
                if not LOCATED.match(first) or os.path.exists(plan):
                    fails.append((i, doc, f"unlocated rejection or output left: {first}"))
                else:
                    rejected += 1
                continue
            if res.returncode != 0:
                fails.append((i, doc, f"exit {res.returncode}: {err[-2000:]}"))
                continue
            r2 = subprocess.run([a.cmd, "compile", path, "--emit=ir", "-o", ir], capture_output=True, timeout=60)
            pv = subprocess.run([a.cmd, "print", plan], capture_output=True, timeout=60)
            iv = subprocess.run([a.cmd, "print", ir], capture_output=True, timeout=60)
            vv = subprocess.run([a.cmd, "verify", ir], capture_output=True, timeout=60)
            if r2.returncode or pv.returncode or iv.returncode or vv.returncode or pv.stdout != iv.stdout:
                fails.append((i, doc, "print/verify of the plan and the .fpir disagree: " +
                              (pv.stderr + iv.stderr + vv.stderr).decode(errors="replace")[-2000:]))
                continue
            ok += 1
            os.remove(plan)
            os.remove(ir)
    for i, doc, why in fails:
        print(f"FAIL case {i}: {why}")
        if a.keep:
            os.makedirs(a.keep, exist_ok=True)
            with open(os.path.join(a.keep, f"case{i}.json"), "w") as f:
                json.dump(doc, f, indent=1)
    print(f"# {ok} compiled, {rejected} rejected with a located error")
    # a generator (or compiler) that rejects nearly everything tests nothing
    too_few = ok < a.n // 4
    if too_few:
        print(f"FAIL only {ok} of {a.n} cases compiled; expected at least a quarter")
    print(f"{a.n - len(fails)} passed, {len(fails)} failed")
    return 1 if fails or too_few else 0


if __name__ == "__main__":
    sys.exit(main())
