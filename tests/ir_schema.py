"""Validate plan.json files against schemas/plan.schema.json (JSON Schema
2020-12, Debian's python3-jsonschema).

    ir_schema.py SCHEMA PLAN.json...
    ir_schema.py SCHEMA --gen IR_GOLDEN OUTDIR FILE.fpir...
        first writes each .fpir program as OUTDIR/ir_<name>.plan.json
    ir_schema.py SCHEMA --compile FLEXPLAN OUTDIR MODEL.json...
        first compiles each model as OUTDIR/ex_<name>.plan.json (plans with
        hardware and a memory timeline)
"""
import json
import os
import subprocess
import sys

import jsonschema


def main():
    schema = json.load(open(sys.argv[1]))
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    plans = sys.argv[2:]
    if plans and plans[0] == "--gen":
        tool, outdir, sources = plans[1], plans[2], plans[3:]
        plans = []
        for src in sources:
            name = os.path.splitext(os.path.basename(src))[0]
            out = os.path.join(outdir, f"ir_{name}.plan.json")
            subprocess.run([tool, "plan", src, out], check=True)
            plans.append(out)
    elif plans and plans[0] == "--compile":
        tool, outdir, sources = plans[1], plans[2], plans[3:]
        plans = []
        for src in sources:
            name = os.path.splitext(os.path.basename(src))[0]
            out = os.path.join(outdir, f"ex_{name}.plan.json")
            subprocess.run([tool, "compile", src, "-o", out], check=True, stderr=subprocess.DEVNULL)
            plans.append(out)
    bad = 0
    for path in plans:
        errors = list(v.iter_errors(json.load(open(path))))
        for e in errors[:5]:
            print(f"{path}: /{'/'.join(map(str, e.absolute_path))}: {e.message}")
        bad += bool(errors)
        if not errors:
            print(f"{path}: ok")
    return 1 if bad or not plans else 0


if __name__ == "__main__":
    sys.exit(main())
