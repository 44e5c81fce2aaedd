#!/usr/bin/env python3
"""memplan without a budget: a plan that fits the hardware's device memory is
kept over a faster one that does not (planner/pipeline.c, fits_device).

deepseek-v3-16b keeps a double-buffered plan (the timed candidate) on the
h100 preset. With the preset's hbm_bytes set one byte below that plan's
footprint (peak_bytes: the arena, persistent buffers included, plus the
activations at their peak), the compile must keep a plan that fits; with
hbm_bytes below every candidate's footprint, nothing fits and the fastest is
kept again, as with no limit. With a memory budget exactly the fastest
plan's footprint, that plan is still the one kept."""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def summary(cmd, doc, tmp, hbm=None, budget=None):
    d = json.loads(json.dumps(doc))
    if budget is not None:
        d["spec"]["memory_budget_bytes"] = budget
    if hbm is not None:
        d["spec"]["hardware"] = {"preset": d["spec"]["hardware"]["preset"], "hbm_bytes": hbm}
    path = os.path.join(tmp, "m.json")
    with open(path, "w") as f:
        json.dump(d, f)
    out = subprocess.run([cmd, "compile", path, "--emit", "summary", "-o", "-"], check=True,
                         capture_output=True, text=True).stdout
    s = json.loads(out)
    return s, s["peak_bytes"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--example", required=True)
    a = ap.parse_args()
    doc = json.load(open(a.example))
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        free, need = summary(a.cmd, doc, tmp)
        tight, tneed = summary(a.cmd, doc, tmp, need - 1)
        print(f"unlimited: {need} B, step {free['modeled_step_ms']:.3f} ms; "
              f"hbm {need - 1}: {tneed} B, step {tight['modeled_step_ms']:.3f} ms")
        if tneed > need - 1:
            print("FAIL: a plan that does not fit the device memory was kept")
            fails += 1
        if tight["modeled_step_ms"] < free["modeled_step_ms"]:
            print("FAIL: the unconstrained compile did not keep its fastest plan")
            fails += 1
        low = tneed // 2
        none, nneed = summary(a.cmd, doc, tmp, low)
        if (nneed, none["modeled_step_ms"]) != (need, free["modeled_step_ms"]):
            print(f"FAIL: with nothing fitting ({low} B) the fastest plan was not kept: {nneed} B")
            fails += 1
        # a budget exactly the fastest plan's footprint: it is still kept (the
        # double-buffered plan whose lifetimes place it may need more; it is
        # never kept, so the budget does not apply to it)
        fit, fneed = summary(a.cmd, doc, tmp, budget=need)
        print(f"budget {need}: {fneed} B, step {fit['modeled_step_ms']:.3f} ms")
        if (fneed, fit["modeled_step_ms"]) != (need, free["modeled_step_ms"]):
            print("FAIL: a budget the fastest plan fits made the compile keep a slower one")
            fails += 1
    print("ok" if not fails else f"{fails} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
