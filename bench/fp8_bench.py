#!/usr/bin/python3
"""fp8_bench.py FLEXPLAN [EXAMPLE.json ...] - modeled step with MXFP8 gathers
against the spec's own (param dtype) gathers, side by side in one run: each
example compiled as written and with "gather_dtype": "mxfp8" on every bucket
of its spec (docs/examples.md, "MXFP8 gathers"). Prints the modeled step,
exposed communication, bytes communicated per rank and their ratios. Default
examples: llama3-8b and mixtral-8x7b."""
import json
import os
import subprocess
import sys
import tempfile


def summary(fp, doc):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doc, f)
    try:
        r = subprocess.run([fp, "compile", f.name, "--emit=summary", "-o", "-"], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        sys.exit(r.stderr.strip())
    return json.loads(r.stdout)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    files = argv[2:] or [os.path.join(here, n) for n in ("llama3-8b.json", "mixtral-8x7b.json")]
    print("| example | gathers | modeled step ms | exposed comm ms | communicated GiB/rank | step ratio |")
    print("|---|---|---|---|---|---|")
    for path in files:
        doc = json.load(open(path))
        base = summary(argv[1], doc)
        for b in doc["spec"].get("buckets", []):
            b["gather_dtype"] = "mxfp8"
        mx = summary(argv[1], doc)
        name = os.path.basename(path)[:-5]
        for what, s in (("param dtype", base), ("mxfp8", mx)):
            print(f"| {name} | {what} | {s['modeled_step_ms']:.3f} | {s['modeled_exposed_comm_ms']:.3f} | "
                  f"{s['comm_bytes_per_rank'] / 2**30:.3f} | {s['modeled_step_ms'] / base['modeled_step_ms']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
