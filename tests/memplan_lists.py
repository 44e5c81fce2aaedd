#!/usr/bin/env python3
"""memplan's two ways to find the placed buffers live with the one being
placed - the conflict lists built once per memory plan, and the trees over
op order it falls back to when the lists would be too long - give the same
spans, so the same offsets: every example compiles to the same plan.json,
byte for byte, with the lists and with FLEXPLAN_MEMPLAN_TREES=1 (the trees
always). The examples cover memory plans by program order and by modeled
lifetimes (held plans, timed plans, retries), one bucket per module and
auto buckets, tp and hybrid meshes."""
import argparse
import glob
import os
import subprocess
import sys
import tempfile


def compile_plan(cmd, src, out, trees):
    env = dict(os.environ)
    env.pop("FLEXPLAN_MEMPLAN_TREES", None)
    if trees:
        env["FLEXPLAN_MEMPLAN_TREES"] = "1"
    r = subprocess.run([cmd, "compile", src, "-o", out], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("memplan_lists: %s with the %s failed (exit %d):\n%s" %
                 (os.path.basename(src), "trees" if trees else "conflict lists", r.returncode, r.stderr[-2000:]))
    with open(out, "rb") as f:
        return f.read()


def examples_args(who):
    """--cmd FLEXPLAN --examples DIR: (the flexplan binary, DIR's examples);
    exits when DIR holds fewer than 10 (the wrong directory)"""
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--examples", required=True)
    a = ap.parse_args()
    srcs = sorted(glob.glob(os.path.join(a.examples, "*.json")))
    if len(srcs) < 10:
        sys.exit("%s: expected the examples in %s, found %d" % (who, a.examples, len(srcs)))
    return a.cmd, srcs


def main():
    cmd, srcs = examples_args("memplan_lists")
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for src in srcs:
            name = os.path.basename(src)
            lists = compile_plan(cmd, src, os.path.join(tmp, "lists.json"), False)
            trees = compile_plan(cmd, src, os.path.join(tmp, "trees.json"), True)
            if lists != trees:
                bad.append(name)
            print("%-28s %s" % (name, "same plan" if lists == trees else "DIFFERENT plans"))
    if bad:
        sys.exit("memplan_lists: the conflict lists and the trees place differently: " + ", ".join(bad))
    print("memplan_lists: %d examples, the same plan both ways" % len(srcs))


if __name__ == "__main__":
    main()
