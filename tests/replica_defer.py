#!/usr/bin/env python3
"""Hybrid sharding with accumulation: the compile lowers the replicas'
all-reduce both once per step (over the micro-batches' summed shards) and
every micro-batch, and keeps the faster modeled step (planner/pipeline.c,
schedule). tiny-mlp-hybrid (2 micro-batches, latency-bound: 0.365 ms against
0.461 ms modeled) must keep one all-reduce per bucket per step; llama3-70b
(2 micro-batches, where the deferred all-reduces would pile up exposed at the
end of the step: 10,828.6 ms against 10,849.5 ms) one per bucket per
micro-batch. Every bucket of both examples trains."""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def compile_ir(cmd, path, tmp):
    out = os.path.join(tmp, "p.fpir")
    r = subprocess.run([cmd, "compile", path, "--emit=ir", "-o", out], capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr)
    text = open(out).read()
    buckets = len(re.findall(r"^bucket ", text, re.M))
    ars = len(re.findall(r"all_reduce .*comm=replica", text))
    return buckets, ars


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--examples", required=True)
    a = ap.parse_args()
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, per_step in (("tiny-mlp-hybrid", 1), ("llama3-70b", 2)):
            b, n = compile_ir(a.cmd, os.path.join(a.examples, name + ".json"), tmp)
            print(f"{name}: {n} replica all-reduces for {b} buckets")
            if n != per_step * b:
                print(f"FAIL: {name}: expected {per_step} per bucket")
                fails += 1
    print("ok" if not fails else f"{fails} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
