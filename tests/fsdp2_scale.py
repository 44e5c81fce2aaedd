#!/usr/bin/env python3
"""`--policy fsdp2` stays O(units) at scale (issue 13; stdlib only).

usage: fsdp2_scale.py --cmd FLEXPLAN --root SOURCE_DIR

Writes the DeepSeek-V3 671B shape at 2,048 ranks (tools/gen_examples.py
--bench: ~45,000 params, every expert's matrices apart, 121 buckets),
compiles it with the default policy and with `--policy fsdp2`, and checks
that the fsdp2 compile is within 2x the default's:

- ops in the program (the summary's "ops": FSDP2's copy-out and chunk_cat
  are one op per unit, never one per param or per param x rank);
- the compile's peak resident memory (max RSS of the process, from wait4);
- the plan's device memory (arena bytes and modeled peak).

Both plans must verify. No timing is asserted: the suite's timeout is the
only clock.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def compile_summary(cmd, model, *extra):
    """the summary of one compile and the process's max RSS in KiB"""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pr = subprocess.Popen([cmd, "compile", model, "--emit=summary", "-o", "-", *extra], stdout=out, stderr=err)
        _, status, ru = os.wait4(pr.pid, 0)
        out.seek(0), err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit("FAILED: compile %s exited %d: %s" % (" ".join(extra), os.waitstatus_to_exitcode(status),
                                                          err.read().decode()[-2000:]))
        return json.loads(out.read().decode()), ru.ru_maxrss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--root", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, os.path.join(a.root, "tools", "gen_examples.py"), "--bench", tmp], check=True,
                       stdout=subprocess.DEVNULL)
        model = os.path.join(tmp, "deepseek-v3-671b.json")
        with open(model) as f:
            doc = json.load(f)
        assert doc["spec"]["mesh"]["world_size"] == 2048, doc["spec"]["mesh"]
        base, base_rss = compile_summary(a.cmd, model)
        fsdp2, fsdp2_rss = compile_summary(a.cmd, model, "--policy", "fsdp2")
        for extra in ([], ["--policy", "fsdp2"]):
            plan = os.path.join(tmp, "plan.json")
            subprocess.run([a.cmd, "compile", model, "-o", plan, *extra], check=True, capture_output=True)
            r = subprocess.run([a.cmd, "verify", plan], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit("FAILED: %s plan does not verify: %s" % (extra or "default", r.stderr[-2000:]))
    bad = []
    print("default: %d ops, %d KiB compile RSS, arena %d, peak %d" %
          (base["ops"], base_rss, base["arena_bytes"], base["peak_bytes"]))
    print("fsdp2:   %d ops, %d KiB compile RSS, arena %d, peak %d" %
          (fsdp2["ops"], fsdp2_rss, fsdp2["arena_bytes"], fsdp2["peak_bytes"]))
    for what, x, y in (("ops", fsdp2["ops"], base["ops"]), ("compile max RSS", fsdp2_rss, base_rss),
                       ("arena bytes", fsdp2["arena_bytes"], base["arena_bytes"]),
                       ("peak bytes", fsdp2["peak_bytes"], base["peak_bytes"])):
        print("  %-16s fsdp2 / default = %.3f" % (what, x / y))
        if x > 2 * y:
            bad.append("%s: fsdp2 %d > 2 x default %d" % (what, x, y))
    if bad:
        sys.exit("FAILED: " + "; ".join(bad))
    print("ok")


if __name__ == "__main__":
    main()
