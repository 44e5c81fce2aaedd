#!/usr/bin/env python3
"""Golden tests of the lowering (stdlib only).

For every DIR/<name>.json (model + spec) this runs
    CMD compile DIR/<name>.json --emit=ir -o -
and compares the output with DIR/<name>.fpir byte for byte, then checks that
the .fpir text survives the IR parser (`CMD print DIR/<name>.fpir` prints it
back unchanged) and passes `CMD verify`. With --update it rewrites the .fpir
files instead (review the diff before committing). Exit 0 when all pass.
"""
import argparse
import difflib
import glob
import os
import subprocess
import sys


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    inputs = sorted(glob.glob(os.path.join(args.dir, "*.json")))
    if not inputs:
        print("no golden inputs in", args.dir)
        return 1
    failures = []
    for path in inputs:
        name = os.path.splitext(os.path.basename(path))[0]
        want_path = os.path.join(args.dir, name + ".fpir")
        # fsdp2_*: lowered with --policy fsdp2 (docs/layout.md, "fsdp2 units")
        policy = ["--policy", "fsdp2"] if name.startswith("fsdp2_") else []
        r = run([args.cmd, "compile", path, "--emit=ir", "-o", "-", *policy])
        if r.returncode != 0:
            failures.append(f"{name}: compile exited {r.returncode}: {r.stderr.decode(errors='replace')}")
            continue
        got = r.stdout.decode()
        if args.update:
            with open(want_path, "w") as f:
                f.write(got)
        if not os.path.exists(want_path):
            failures.append(f"{name}: no {want_path} (run with --update)")
            continue
        with open(want_path) as f:
            want = f.read()
        if got != want:
            diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                                want_path, "compiled", n=2))
            failures.append(f"{name}: output differs from {want_path}:\n{diff[:4000]}")
            continue
        r = run([args.cmd, "print", want_path])
        if r.returncode != 0 or r.stdout.decode() != want:
            failures.append(f"{name}: print(parse(x)) != x for {want_path}: {r.stderr.decode(errors='replace')}")
        r = run([args.cmd, "verify", want_path])
        if r.returncode != 0:
            failures.append(f"{name}: verify failed: {r.stderr.decode(errors='replace')}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(inputs) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
