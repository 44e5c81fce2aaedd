#!/usr/bin/env python3
"""Where a reduction's local preparation runs (planner/pipeline.c,
prep_next; lower.c prep_stream): the cast of the unsharded grads into the
reduce dtype goes on the rs stream, before the reduce-scatter, or on the
compute stream right after the backward; the compile lowers both where
communication is exposed and keeps the faster modeled step.

deepseek-v3-16b reduces in fp32 grads computed in bf16, and its reductions
are slower than its backward (the rs stream is what the step waits for): the
55 casts must run on the compute stream in the post_backward hooks, each
before that bucket's reduce-scatter, and the rs stream must hold no cast.
llama3-8b's backward is slower than its reductions (the casts on the
compute stream would lengthen the step): its casts stay on the rs stream.
The fsdp2 policy runs its chunk_cat (the cast as it copies) on the rs stream
as FSDP2 does, whatever models faster."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

OP = re.compile(r"^\s+(\d+)\s+(\w+)\s+(\w+)\s+(\S+)\s.*?(?:bucket=(\S+))?\s*$")


def ops(cmd, path, tmp, *extra):
    out = os.path.join(tmp, "p.fpir")
    r = subprocess.run([cmd, "compile", path, "--emit=ir", "-o", out, *extra], capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr)
    seg, res = None, []
    for line in open(out):
        if line.startswith("segment "):
            seg = line.split()[2]
            continue
        m = OP.match(line)
        if m:
            res.append((seg, m.group(2), m.group(3), m.group(4), m.group(5)))
    return res


def casts(o, stream):
    return [x for x in o if x[1] == stream and x[2] == "cast" and x[3] == "bf16->fp32"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--examples", required=True)
    a = ap.parse_args()
    fails = []
    ex = lambda n: os.path.join(a.examples, n + ".json")
    with tempfile.TemporaryDirectory() as tmp:
        o = ops(a.cmd, ex("deepseek-v3-16b"), tmp)
        comp, rs = casts(o, "compute"), casts(o, "rs")
        print(f"deepseek-v3-16b: {len(comp)} grad casts on compute, {len(rs)} on rs")
        if len(comp) != 55 or rs:
            fails.append("deepseek-v3-16b: expected its 55 grad casts on the compute stream")
        if any(not x[0].startswith("post_backward(") for x in comp):
            fails.append("deepseek-v3-16b: a grad cast outside a post_backward hook")
        # each cast comes before its bucket's reduce_scatter
        seen = set()
        for x in o:
            if x in comp:
                seen.add(x[4])
            elif x[2] == "reduce_scatter" and x[4] not in seen:
                fails.append(f"deepseek-v3-16b: reduce_scatter of {x[4]} before its cast")
                break
        o = ops(a.cmd, ex("llama3-8b"), tmp)
        comp, rs = casts(o, "compute"), casts(o, "rs")
        print(f"llama3-8b: {len(comp)} grad casts on compute, {len(rs)} on rs")
        if comp or not rs:
            fails.append("llama3-8b: expected its grad casts on the rs stream")
        o = ops(a.cmd, ex("deepseek-v3-16b"), tmp, "--policy", "fsdp2")
        bad = [x for x in o if x[1] == "compute" and x[2] in ("cast", "chunk_cat")]
        print(f"deepseek-v3-16b --policy fsdp2: {len(bad)} grad casts or chunk_cats on compute")
        if bad:
            fails.append("fsdp2 policy: a reduction's copy-in on the compute stream")
    for f in fails:
        print("FAIL:", f)
    print("ok" if not fails else f"{len(fails)} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
