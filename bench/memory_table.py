#!/usr/bin/python3
"""memory_table.py FLEXPLAN [EXAMPLE.json ...] - per example, the memory the
plan accounts for without optimizer state ("optimizer": {"type": "none"}, what
plans held before issue 16) and with the spec's optimizer (AdamW in fp32 by
default): persistent, optimizer state, arena, peak (arena + activations) and
the modeled step, as a markdown table (docs/examples.md, "Memory"). Both
compiles run side by side in this process's run; no timing is measured."""
import glob
import json
import os
import subprocess
import sys
import tempfile


def summary(fp, path, optim_none):
    doc = json.load(open(path))
    if optim_none:
        spec = doc.setdefault("spec", {"format": "flexplan.spec.v1"})
        spec["optimizer"] = {"type": "none"}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doc, f)
    try:
        r = subprocess.run([fp, "compile", f.name, "--emit=summary", "-o", "-"], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        sys.exit(f"{path}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def gib(b):
    return f"{b / 2**30:.3f}" if b >= 2**26 else f"{b:,} B"


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    fp = argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    files = argv[2:] or sorted(glob.glob(os.path.join(here, "..", "examples", "*.json")))
    print("| example | optimizer | persistent | optimizer state | arena | peak | modeled step ms | fits device |")
    print("|---|---|---|---|---|---|---|---|")
    for path in files:
        name = os.path.basename(path)[:-5]
        for none in (True, False):
            s = summary(fp, path, none)
            opt = "none (before)" if none else f"{s['optimizer']} {s.get('optimizer_state_dtype', '')}".strip()
            fits = "yes" if s["over_device_bytes"] == 0 else f"no: {s['over_device_bytes'] / 2**30:.1f} GiB over"
            print(f"| {name} | {opt} | {gib(s['persistent_bytes'])} | {gib(s['optimizer_state_bytes'])} | "
                  f"{gib(s['arena_bytes'])} | {gib(s['peak_bytes'])} | {s['modeled_step_ms']:.3f} | {fits} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
