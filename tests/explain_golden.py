#!/usr/bin/env python3
"""explain_golden.py - `flexplan explain` against golden tables.

usage: explain_golden.py FLEXPLAN FILE.fpir... [--update]

Each FILE.fpir has its expected table in FILE.explain: one row per op
(index, segment, stream, op, operands, count/bytes, comm, waits/records,
modeled start and end), simulated on h100-sxm. --update rewrites the
.explain files from the current output. Exit status 0 when all agree.
"""
import difflib
import subprocess
import sys


def main():
    args = [a for a in sys.argv[1:] if a != "--update"]
    update = "--update" in sys.argv
    fp, files = args[0], args[1:]
    bad = 0
    for f in files:
        got = subprocess.run([fp, "explain", f, "--hardware", "h100-sxm"], capture_output=True, text=True)
        if got.returncode != 0:
            print(f"{f}: flexplan explain failed ({got.returncode}): {got.stderr.strip()}")
            bad += 1
            continue
        exp = f[: -len(".fpir")] + ".explain"
        if update:
            with open(exp, "w") as h:
                h.write(got.stdout)
            continue
        try:
            want = open(exp).read()
        except OSError:
            print(f"{exp}: missing (run with --update to create it)")
            bad += 1
            continue
        if got.stdout != want:
            print(f"{f}: explain differs from {exp}:")
            sys.stdout.writelines(difflib.unified_diff(want.splitlines(True), got.stdout.splitlines(True), exp, "got"))
            bad += 1
        rows = got.stdout.count("\n") - 1
        header = got.stdout.splitlines()[0]
        for col in ("segment", "stream", "op", "operands", "count/bytes", "sync", "modeled start us", "modeled end us"):
            if col not in header:
                print(f"{f}: the header lacks the column '{col}'")
                bad += 1
        print(f"{f}: {rows} rows")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
