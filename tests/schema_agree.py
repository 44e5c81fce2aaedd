#!/usr/bin/env python3
"""Schema agreement: the C front end and the JSON Schemas judge the same
fixtures the same way (Debian's python3-jsonschema, Draft 2020-12).

Fixtures live in tests/schema/<class>/*.json. The file name picks what the
file is: "model-*.json" a bare model (model.schema.json; fp_frontcheck model),
"spec-*.json" a bare spec (spec.schema.json; fp_frontcheck spec), anything
else the combined {"model", "spec"} form (input.schema.json; fp_frontcheck
input). The class says what both sides must answer:

    valid/     schema accepts, C accepts
    invalid/   schema rejects, C rejects
    semantic/  schema accepts, C rejects (checks a schema cannot express:
               unique names, world_size multiples, duplicate JSON keys, ...)

Every examples/*.json must be accepted by input.schema.json and by C.
Every disagreement is listed; exit status 1 when there is any.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

from jsonschema import Draft202012Validator, RefResolver


def strict_load(path):
    def no_constant(name):
        raise ValueError(f"invalid JSON constant {name}")
    with open(path, encoding="utf-8") as f:
        return json.load(f, parse_constant=no_constant)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", required=True, help="the fp_frontcheck binary")
    ap.add_argument("--root", required=True, help="the source tree (holds schemas/, tests/schema/, examples/)")
    args = ap.parse_args()
    root = os.path.abspath(args.root)

    schemas = {}
    for kind in ("model", "spec", "input"):
        s = strict_load(os.path.join(root, "schemas", f"{kind}.schema.json"))
        Draft202012Validator.check_schema(s)
        schemas[kind] = s
    store = {s["$id"]: s for s in schemas.values()}
    validators = {
        kind: Draft202012Validator(s, resolver=RefResolver.from_schema(s, store=store))
        for kind, s in schemas.items()
    }

    def kind_of(path):
        base = os.path.basename(path)
        if base.startswith("model-"):
            return "model"
        if base.startswith("spec-"):
            return "spec"
        return "input"

    def schema_verdict(kind, path):
        try:
            doc = strict_load(path)
        except ValueError as e:
            return False, f"not JSON: {e}"
        errs = sorted(validators[kind].iter_errors(doc), key=lambda e: list(e.absolute_path))
        if not errs:
            return True, ""
        e = errs[0]
        return False, "/" + "/".join(str(p) for p in e.absolute_path) + ": " + e.message[:200]

    def c_verdict(kind, path):
        r = subprocess.run([args.check, kind, path], capture_output=True, timeout=60)
        if r.returncode not in (0, 1):
            return None, f"fp_frontcheck exited {r.returncode}: {r.stderr.decode('utf-8', 'replace')[:300]}"
        first = r.stderr.decode("utf-8", "replace").splitlines()
        return r.returncode == 0, first[0] if first else ""

    want = {"valid": (True, True), "invalid": (False, False), "semantic": (True, False)}
    problems = []
    count = 0
    for cls, (want_schema, want_c) in want.items():
        files = sorted(glob.glob(os.path.join(root, "tests", "schema", cls, "*.json")))
        if not files:
            problems.append(f"tests/schema/{cls}/: no fixtures")
        for path in files:
            count += 1
            rel = os.path.relpath(path, root)
            kind = kind_of(path)
            s_ok, s_why = schema_verdict(kind, path)
            c_ok, c_why = c_verdict(kind, path)
            if c_ok is None:
                problems.append(f"{rel}: {c_why}")
                continue
            if s_ok != want_schema:
                problems.append(f"{rel}: schema {'accepts' if s_ok else 'rejects'} it, expected "
                                f"{'accept' if want_schema else 'reject'} {s_why}")
            if c_ok != want_c:
                problems.append(f"{rel}: C {'accepts' if c_ok else 'rejects'} it, expected "
                                f"{'accept' if want_c else 'reject'} {c_why}")
    for path in sorted(glob.glob(os.path.join(root, "examples", "*.json"))):
        count += 1
        rel = os.path.relpath(path, root)
        s_ok, s_why = schema_verdict("input", path)
        c_ok, c_why = c_verdict("input", path)
        if not s_ok:
            problems.append(f"{rel}: input.schema.json rejects the example: {s_why}")
        if not c_ok:
            problems.append(f"{rel}: C rejects the example: {c_why}")
    for p in problems:
        print("DISAGREE", p)
    print(f"{count} files, {len(problems)} disagreements")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
