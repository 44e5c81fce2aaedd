#!/usr/bin/env python3
"""The layers point one way (docs/design.md, "Layers"): every #include "..."
of each source folder, resolved to a repository path, must stay inside what
that folder may use.

  base/      itself (and include/flexplan_version.h: the version macros)
  kernels/   base/
  ir/        base/, include/ (the public handles' types: ir/handle.h)
  planner/   base/, ir/
  executor/  base/, ir/, kernels/, include/
  viz/       base/, ir/, planner/ (its simulator), include/
  api/       base/, ir/, planner/, viz/, include/
  tools/, examples/, bench/   include/ only
A file in FOLDER may always include FOLDER's own files. A file outside that
rule is listed in EXCEPTIONS with what it may include and why.

And python/ calls only the public API: every library function the Python
package looks up (the SIGNATURES table of python/flexplan/_lib.py, and every
`lib.fp_...` / `lib().fp_...` in python/flexplan) is declared FP_API in
include/*.h.
usage: layering.py SOURCE_DIR"""
import os
import re
import sys

ALLOWED = {
    "base": {"base", "include/flexplan_version.h"},
    "kernels": {"base"},
    "ir": {"base", "include"},
    "planner": {"base", "ir"},
    "executor": {"base", "ir", "kernels", "include"},
    "viz": {"base", "ir", "planner", "include"},
    "api": {"base", "ir", "planner", "viz", "include"},
    "tools": {"include"},
    "examples": {"include"},
    "bench": {"include"},
}

# file -> (the paths it may include besides its folder's, why)
EXCEPTIONS = {
    "tools/flexplan.c": (
        {"api/api_impl.h", "base", "ir", "viz"},
        "the command line: it compiles, checks, explains, simulates and reshards through api/ "
        "(api/api_impl.h, its documented boundary, docs/design.md 'Layers'), and reads, prints, verifies "
        "and draws plan files itself on ir/ and viz/, with base/'s diagnostics, arena and outputs"),
    "bench/exec_bench.c": (
        {"executor/exec_impl.h", "ir/ir.h"},
        "measures the executor against raw MPI: it builds its programs in the IR and runs the same "
        "collectives on the executor's own arena (struct fp_exec), which the public API does not expose"),
    "bench/reshard_bench.c": (
        {"executor/exec_impl.h", "ir/xfer.h"},
        "measures a transfer against raw MPI: it posts the transfer program's own ops on the "
        "executors' arenas (struct fp_exec), which the public API does not expose"),
    "bench/cuda_bench.cu": (
        {"kernels/kernels_cuda.h"},
        "measures the CUDA kernels themselves (bandwidth per dtype pair), below the executor"),
}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def resolve(root, src, inc):
    """the repository path an include names: next to the file, else from
    the root, else from include/ (the compile's include directories)"""
    for base in (os.path.dirname(src), root, os.path.join(root, "include")):
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(p):
            return os.path.relpath(p, root)
    return None


def under(target, allowed):
    return any(target == a or target.startswith(a + os.sep) for a in allowed)


def allowed(folder, rel, target):
    if target.split(os.sep)[0] == folder:
        return True
    extra = EXCEPTIONS.get(rel, (set(), ""))[0]
    return under(target, ALLOWED[folder]) or under(target, extra)


def check_includes(root):
    bad = checked = 0
    for folder in ALLOWED:
        for dirpath, dirs, files in os.walk(os.path.join(root, folder)):
            # bench/out: what the benchmarks build (gitignored: other trees' copies)
            dirs[:] = [x for x in dirs if os.path.relpath(os.path.join(dirpath, x), root) != os.path.join("bench", "out")]
            for f in sorted(files):
                if not f.endswith((".c", ".h", ".cu", ".cuh", ".def")):
                    continue
                src = os.path.join(dirpath, f)
                rel = os.path.relpath(src, root)
                text = open(src, encoding="utf-8").read()
                for m in INC.finditer(text):
                    checked += 1
                    t = resolve(root, src, m.group(1))
                    line = text.count("\n", 0, m.start()) + 1
                    if t is None:
                        print(f"{rel}:{line}: #include \"{m.group(1)}\" names no file of the repository")
                        bad += 1
                    elif not allowed(folder, rel, t):
                        print(f"{rel}:{line}: {folder}/ may not include {t}")
                        bad += 1
    for rel in EXCEPTIONS:
        if not os.path.exists(os.path.join(root, rel)):
            print(f"tests/layering.py: the exception {rel} names no file (remove it)")
            bad += 1
    return checked, bad


def fp_api(root):
    """the FP_API function names of include/*.h"""
    names = set()
    inc = os.path.join(root, "include")
    for h in sorted(os.listdir(inc)):
        if h.endswith(".h"):
            code = re.sub(r"/\*.*?\*/", "", open(os.path.join(inc, h), encoding="utf-8").read(), flags=re.S)
            names.update(re.findall(r"^\s*FP_API\b[^;(]*?\b(fp_\w+)\s*\(", code, flags=re.M))
    return names


def check_python(root):
    api = fp_api(root)
    pkg = os.path.join(root, "python", "flexplan")
    bad = checked = 0
    lib = os.path.join(pkg, "_lib.py")
    text = open(lib, encoding="utf-8").read()
    m = re.search(r"^SIGNATURES = \{(.*?)^\}", text, flags=re.S | re.M)
    if not m:
        print("python/flexplan/_lib.py: no SIGNATURES table found")
        return 0, 1
    looked = {(n, "python/flexplan/_lib.py SIGNATURES") for n in re.findall(r'^\s*"(\w+)":', m.group(1), flags=re.M)}
    for dirpath, _, files in os.walk(pkg):
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(dirpath, f)
                for n in re.findall(r"\blib(?:\(\))?\.(fp_\w+)", open(p, encoding="utf-8").read()):
                    looked.add((n, os.path.relpath(p, root)))
    for n, where in sorted(looked):
        checked += 1
        if n not in api:
            print(f"{where}: {n} is not an FP_API function of include/")
            bad += 1
    return checked, bad


def main():
    root = os.path.abspath(sys.argv[1])
    checked, bad = check_includes(root)
    print(f"{checked} includes checked, {bad} outside their layer")
    pchecked, pbad = check_python(root)
    print(f"{pchecked} library functions Python looks up checked, {pbad} not FP_API")
    return 1 if bad or pbad else 0


if __name__ == "__main__":
    sys.exit(main())
