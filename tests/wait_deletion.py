#!/usr/bin/env python3
"""Every wait the compiler emits is needed (stdlib only).

The sync pass (planner/passes/sync.c) promises to insert exactly the waits
the verifier's ordering rules ask for, so deleting any one of them must make
`flexplan verify` fail. For each compiled program - every
examples/tiny-mlp*.json, examples/paligemma-3b-224.json,
examples/llama3-8b.json and every tests/golden/*.json spec case, compiled
now with `CMD compile X --emit=ir -o -` - this checks that the .fpir as
emitted verifies, then for each `wait` op (for a program with more than
--max-waits of them, that many spread evenly over the program, first and
last included) deletes its line, renumbers the ops after it and every
op-index reference (the op index column and the buffers' `live=F..L`
ranges: the only places the .fpir grammar names an op by index, see
docs/ir.md), and requires `CMD verify` of the result to exit 1 with an
ordering error ("a record/wait is missing", rule 6 or 8) - never exit 0
(the wait was redundant: a compiler bug), never an internal error (70) or
a signal, never any other kind of error (the edit broke the file).
The harness checks itself on the first program with waits: a copy of one
of its waits inserted next to it verifies, deleting the copy gives back
the program byte for byte, and is reported as redundant.

usage: wait_deletion.py --cmd FLEXPLAN --root SRC [--max-waits N] [--jobs J]
                        [--keep DIR]
Exit 0 when every check passes.
"""
import argparse
import concurrent.futures
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

OP = re.compile(r"^(\s*)(\d+)(\s+)(\S+)(\s+)(\S+)")
LIVE = re.compile(r"(\blive=)([0-9.,]+)")
ORDERING = "a record/wait is missing"


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)


def programs(root):
    ex = os.path.join(root, "examples")
    out = sorted(glob.glob(os.path.join(ex, "tiny-mlp*.json")))
    out += [os.path.join(ex, "paligemma-3b-224.json"), os.path.join(ex, "llama3-8b.json")]
    out += sorted(glob.glob(os.path.join(root, "tests", "golden", "*.json")))
    return out


def body_start(lines):
    """the first line of the op part: ops follow the first segment line"""
    for ln, s in enumerate(lines):
        if s.startswith("segment"):
            return ln
    return len(lines)


def ops_of(lines):
    """(line number, op index, opcode) of every op line, in order"""
    ops = []
    for ln in range(body_start(lines), len(lines)):
        m = OP.match(lines[ln])
        if m:
            ops.append((ln, int(m.group(2)), m.group(6)))
    for k, (_, idx, _) in enumerate(ops):
        if idx != k:
            raise ValueError(f"op line {k} has index {idx}: not a printer-canonical .fpir")
    return ops


def renumber_live(spec, d):
    """live=F..L,... with op d deleted: indices after d move down by one; a
    range that only held op d disappears"""
    out = []
    for part in spec.split(","):
        f, l = (int(x) for x in part.split(".."))
        f2 = f if f <= d else f - 1
        l2 = l if l < d else l - 1
        if f2 <= l2:
            out.append(f"{f2}..{l2}")
    return ",".join(out)


def delete_op(lines, ops, d):
    """the .fpir text with op d removed and every later op index renumbered"""
    ln_del = ops[d][0]
    body = body_start(lines)
    out = []
    for ln, s in enumerate(lines):
        if ln == ln_del:
            continue
        m = OP.match(s) if ln >= body else None
        if m:
            idx = int(m.group(2))
            if idx > d:
                s = m.group(1) + str(idx - 1) + s[m.end(2):]
        elif ln < body and s.startswith("buf"):
            m = LIVE.search(s)
            if m:
                new = renumber_live(m.group(2), d)
                if new:
                    s = s[:m.start()] + m.group(1) + new + s[m.end():]
                else:  # no range left: drop the field (the buffer lives first..last use)
                    s = s[:m.start()].rstrip() + s[m.end():]
        out.append(s)
    return "".join(out)


def insert_copy(lines, ops, d):
    """the .fpir text with a copy of op d inserted right after it (the
    inverse of delete_op(d + 1)): for the harness's own self-test"""
    ln_dup = ops[d][0]
    body = body_start(lines)
    out = []

    def shift(spec):
        parts = []
        for part in spec.split(","):
            f, l = (int(x) for x in part.split(".."))
            parts.append(f"{f if f <= d else f + 1}..{l if l <= d else l + 1}")
        return ",".join(parts)

    for ln, s in enumerate(lines):
        m = OP.match(s) if ln >= body else None
        if m:
            idx = int(m.group(2))
            if idx > d:
                s = m.group(1) + str(idx + 1) + s[m.end(2):]
        elif ln < body and s.startswith("buf"):
            m = LIVE.search(s)
            if m:
                s = s[:m.start()] + m.group(1) + shift(m.group(2)) + s[m.end():]
        out.append(s)
        if ln == ln_dup:
            m = OP.match(s)
            out.append(m.group(1) + str(d + 1) + s[m.end(2):])
    return "".join(out)


def self_test(cmd, lines, ops, d, tmpdir, name):
    """a duplicated wait is redundant: the harness must see its deletion
    verify, and deleting it must give back the original text exactly"""
    text = insert_copy(lines, ops, d)
    dl = text.splitlines(True)
    dops = ops_of(dl)
    if delete_op(dl, dops, d + 1) != "".join(lines):
        return f"{name}: self-test: deleting a copy of op {d} does not give back the program (renumbering is wrong)"
    rc, err, _ = verify_text(cmd, text, tmpdir, name + ".dup")
    if rc != 0:
        return f"{name}: self-test: the program with op {d} duplicated does not verify (exit {rc}):\n{err}"
    msg, _ = check_one(cmd, dl, dops, d + 1, tmpdir, name + ".dup")
    if not msg or "is redundant" not in msg:
        return f"{name}: self-test: deleting a duplicated wait (op {d + 1}) was not reported as redundant: {msg}"
    return None


def sample(waits, cap):
    if cap <= 0 or len(waits) <= cap:
        return list(waits)
    if cap == 1:
        return [waits[0]]
    n = len(waits)
    return [waits[k * (n - 1) // (cap - 1)] for k in range(cap)]


def verify_text(cmd, text, tmpdir, tag):
    path = os.path.join(tmpdir, tag + ".fpir")
    with open(path, "w") as f:
        f.write(text)
    try:
        r = run([cmd, "verify", path])
    except subprocess.TimeoutExpired:
        return None, "verify did not finish in 300 s", path
    return r.returncode, r.stderr.decode(errors="replace"), path


def check_one(cmd, lines, ops, d, tmpdir, name):
    text = delete_op(lines, ops, d)
    op_line = lines[ops[d][0]].strip()
    try:
        ops_of(text.splitlines(True))  # the edit left the op indices in sequence
    except ValueError as e:
        return f"{name}: op {d} ({op_line}) deleted: the harness broke the file: {e}", None
    rc, err, path = verify_text(cmd, text, tmpdir, f"{name}.no-wait-{d}")
    if rc is None:
        return f"{name}: op {d} ({op_line}) deleted: {err}", path
    if rc == 0:
        return f"{name}: op {d} ({op_line}) is redundant: the program verifies without it (compiler bug)", path
    if rc < 0 or rc == 70:
        return f"{name}: op {d} ({op_line}) deleted: verify crashed (status {rc}):\n{err}", path
    if rc != 1:
        return f"{name}: op {d} ({op_line}) deleted: verify exited {rc}, expected 1:\n{err}", path
    errs = [e for e in err.splitlines() if ": error: " in e]
    if not errs or any(ORDERING not in e for e in errs):
        return f"{name}: op {d} ({op_line}) deleted: verify failed but not (only) with ordering errors:\n{err}", path
    os.unlink(path)
    return None, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", required=True, help="the built flexplan")
    ap.add_argument("--root", required=True, help="the source tree (examples/, tests/golden/)")
    ap.add_argument("--max-waits", type=int, default=60, help="waits tried per program (0: all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--keep", help="keep failing .fpir files in this directory")
    args = ap.parse_args()
    t0 = time.time()
    failures = []
    total = 0
    self_tested = False
    keep = args.keep
    if keep:
        os.makedirs(keep, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wait_deletion.") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for src in programs(args.root):
            name = os.path.splitext(os.path.basename(src))[0]
            if os.sep + "golden" + os.sep in src:
                name = "golden-" + name
            r = run([args.cmd, "compile", src, "--emit=ir", "-o", "-"])
            if r.returncode != 0:
                failures.append(f"{name}: compile exited {r.returncode}: {r.stderr.decode(errors='replace')}")
                continue
            text = r.stdout.decode()
            lines = text.splitlines(True)
            try:
                ops = ops_of(lines)
            except ValueError as e:
                failures.append(f"{name}: {e}")
                continue
            # the untouched program verifies
            rc, err, _ = verify_text(args.cmd, text, tmp, name)
            if rc != 0:
                failures.append(f"{name}: the compiled program does not verify (exit {rc}):\n{err}")
                continue
            waits = [k for k, (_, _, code) in enumerate(ops) if code == "wait"]
            if waits and not self_tested:
                self_tested = True
                msg = self_test(args.cmd, lines, ops, waits[len(waits) // 2], tmp, name)
                if msg:
                    failures.append(msg)
            tried = sample(waits, args.max_waits)
            futs = [pool.submit(check_one, args.cmd, lines, ops, d, tmp, name) for d in tried]
            bad = 0
            for fu in futs:
                msg, path = fu.result()
                if msg:
                    bad += 1
                    failures.append(msg)
                    if keep and path:
                        os.replace(path, os.path.join(keep, os.path.basename(path)))
                    elif path and os.path.exists(path):
                        os.unlink(path)
            total += len(tried)
            print(f"{name}: {len(ops)} ops, {len(waits)} waits, {len(tried)} deleted one at a time, "
                  f"{len(tried) - bad} caught", flush=True)
    for f in failures:
        print("FAIL", f)
    print(f"{total} waits deleted, {len(failures)} failures, {time.time() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
