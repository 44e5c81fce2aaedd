#!/usr/bin/env python3
"""Bad-input corpus runner (stdlib only).

For every row of DIR/expect.tsv (columns: file, line, col, pointer, message
fragment; '#' starts a comment line) this runs

    CMD check FILE                      (in DIR, FILE as named in the row)
    CMD compile FILE -o TMP/out.json

and asserts: both exit with status 1; the first line of check's stderr is
exactly "FILE:LINE:COL: error: POINTER: <message>" and the message contains
the fragment; compile leaves TMP empty (nothing half-written). It also asserts
that every DIR/*.json has a row and every row names an existing file.
All failures are listed; exit status 0 when there are none.
"""
import argparse
import os
import subprocess
import sys
import tempfile


def load_rows(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 5:
                raise SystemExit(f"{path}:{n}: expected 5 tab-separated columns, got {len(cols)}")
            name, ln, col, ptr, frag = cols
            if not (ln.isdigit() and col.isdigit()):
                raise SystemExit(f"{path}:{n}: line and col must be integers")
            rows.append((n, name, int(ln), int(col), ptr, frag))
    return rows


def run(cmd, cwd):
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cmd", required=True, help="the flexplan binary")
    ap.add_argument("--dir", required=True, help="the corpus directory (holds expect.tsv)")
    ap.add_argument("--no-compile", action="store_true", help="skip the compile half")
    args = ap.parse_args()
    cmd = os.path.abspath(args.cmd)
    d = os.path.abspath(args.dir)
    rows = load_rows(os.path.join(d, "expect.tsv"))
    failures = []
    named = set()
    for tsv_line, name, ln, col, ptr, frag in rows:
        where = f"expect.tsv:{tsv_line} ({name})"
        if name in named:
            failures.append(f"{where}: file listed twice")
        named.add(name)
        if not os.path.isfile(os.path.join(d, name)):
            failures.append(f"{where}: no such file")
            continue
        r = run([cmd, "check", name], d)
        if r is None:
            failures.append(f"{where}: check timed out")
            continue
        err = r.stderr.decode("utf-8", "replace")
        first = err.splitlines()[0] if err else ""
        if r.returncode != 1:
            failures.append(f"{where}: check exited {r.returncode}, expected 1; stderr: {first!r}")
        prefix = f"{name}:{ln}:{col}: error: {ptr}: "
        if not first.startswith(prefix):
            failures.append(f"{where}: first stderr line {first!r} does not start with {prefix!r}")
        elif frag not in first[len(prefix):]:
            failures.append(f"{where}: message {first[len(prefix):]!r} lacks {frag!r}")
        if args.no_compile:
            continue
        with tempfile.TemporaryDirectory(prefix="fp_bad_") as tmp:
            r = run([cmd, "compile", name, "-o", os.path.join(tmp, "out.json")], d)
            if r is None:
                failures.append(f"{where}: compile timed out")
                continue
            if r.returncode != 1:
                failures.append(f"{where}: compile exited {r.returncode}, expected 1")
            left = os.listdir(tmp)
            if left:
                failures.append(f"{where}: compile left files behind: {sorted(left)}")
    for f in sorted(os.listdir(d)):
        if f.endswith(".json") and f not in named:
            failures.append(f"{f}: no row in expect.tsv")
    for f in failures:
        print("FAIL", f)
    print(f"{len(rows)} cases, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
