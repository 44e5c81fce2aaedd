#!/usr/bin/env python3
"""The layers point one way (docs/design.md, "Layers"): every #include "..."
of each source folder, resolved to a repository path, must stay inside what
that folder may use.

  base/      itself (and include/flexplan_version.h: the version macros)
  kernels/   base/
  ir/        base/
  planner/   base/, ir/
  executor/  base/, ir/, kernels/, include/
  viz/       base/, ir/, planner/ (its simulator), include/
  api/       everything but tools/
A file in FOLDER may always include FOLDER's own files.
usage: layering.py SOURCE_DIR"""
import os
import re
import sys

ALLOWED = {
    "base": {"base", "include/flexplan_version.h"},
    "kernels": {"base"},
    "ir": {"base"},
    "planner": {"base", "ir"},
    "executor": {"base", "ir", "kernels", "include"},
    "viz": {"base", "ir", "planner", "include"},
    "api": {"base", "ir", "planner", "executor", "kernels", "viz", "include"},
}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def resolve(root, src, inc):
    """the repository path an include names: next to the file, else from the
    root, else from include/ (the compile's include directories)"""
    for base in (os.path.dirname(src), root, os.path.join(root, "include")):
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(p):
            return os.path.relpath(p, root)
    return None


def allowed(folder, target):
    if target.split(os.sep)[0] == folder:
        return True
    return any(target == a or target.startswith(a + os.sep) for a in ALLOWED[folder])


def main():
    root = os.path.abspath(sys.argv[1])
    bad = checked = 0
    for folder in ALLOWED:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in sorted(files):
                if not f.endswith((".c", ".h", ".cu", ".cuh", ".def")):
                    continue
                src = os.path.join(dirpath, f)
                text = open(src, encoding="utf-8").read()
                for m in INC.finditer(text):
                    checked += 1
                    t = resolve(root, src, m.group(1))
                    line = text.count("\n", 0, m.start()) + 1
                    rel = os.path.relpath(src, root)
                    if t is None:
                        print(f"{rel}:{line}: #include \"{m.group(1)}\" names no file of the repository")
                        bad += 1
                    elif not allowed(folder, t):
                        print(f"{rel}:{line}: {folder}/ may not include {t}")
                        bad += 1
    print(f"{checked} includes checked, {bad} outside their layer")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
