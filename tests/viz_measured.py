#!/usr/bin/env python3
"""viz_measured.py - measured beside modeled: the executor's timing record
(train_mlp --timing, i.e. fp_exec_timing_start/write) and
`flexplan viz PLAN --measured FILE...`.

usage: viz_measured.py FLEXPLAN TRAIN_MLP MPIEXEC_CMD MODEL SPEC WORKDIR

Compiles MODEL with SPEC for 2 ranks, trains 3 steps under mpirun with the
timing record on, then checks, against the plan:
- each rank's record: 3 steps numbered 0..2, every hook once and in order,
  exactly the ops the plan runs on that rank (every op but compute ones,
  less those whose only= predicate excludes the rank), start <= end, the
  ops of one stream one after another (a group issued together), and every
  wait released no earlier than its record started on its own stream;
- the trace: one "measured" process per record, with the streams, hooks and
  trainer as threads; a slice per op (a group as one), per hook and per
  stretch of trainer work; slices on one thread never overlap partially
  (dur is rounded end minus rounded start); otherData lists the records;
- errors, located: a record of another plan, a file that is not a record,
  an op index outside the plan, broken JSON, a missing file;
- the HTML page (--format=html --measured): its data holds each record's
  times as read; in headless Chromium (when installed) its self-test is ok
  with every modeled and measured op drawn, the measured hooks lined up with
  the modeled ones (checked on the drawn elements), a measured op's tooltip
  giving both durations, every op still drawn with the hooks as measured,
  no console output, and a screenshot that is not blank.
Exit status 0 when every check passes, 1 otherwise.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viz_trace_check import runs_on  # noqa: E402  (the same only= rule the trace check uses)
import viz_html_check as vhc  # noqa: E402  (chromium, the page's self-test, the screenshot check)

failures = []


def fail(msg):
    failures.append(msg)


def check_record(plan, rec, rank, nsteps):
    ops = plan["ops"]
    where = f"rank {rank} record"
    if rec.get("format") != "flexplan.timing.v1" or rec.get("rank") != rank:
        fail(f"{where}: format/rank {rec.get('format')} {rec.get('rank')}")
    if rec.get("plan_hash") != plan["hash"]:
        fail(f"{where}: plan hash {rec.get('plan_hash')} != {plan['hash']}")
    steps = rec["steps"]
    if [s["step"] for s in steps] != list(range(nsteps)):
        fail(f"{where}: steps {[s['step'] for s in steps]}")
    nsegs = len(plan["segments"])
    want = sorted(i for i, o in enumerate(ops) if o["op"] != "compute" and runs_on(plan, o, rank))
    for s in steps:
        w = f"{where} step {s['step']}"
        hooks = s["hooks"]
        if [h[0] for h in hooks] != list(range(nsegs)):
            fail(f"{w}: hooks {[h[0] for h in hooks]}")
        for a, b in zip(hooks, hooks[1:]):
            if not (a[1] <= a[2] <= b[1] <= b[2]):
                fail(f"{w}: hooks {a} then {b}")
        got = [o[0] for o in s["ops"]]
        if got != want:
            fail(f"{w}: ops recorded {got[:12]}... != ops run {want[:12]}... ({len(got)} vs {len(want)})")
        t = {o[0]: (o[1], o[2]) for o in s["ops"]}
        busy, prev_group = {}, {}
        for i in want:
            if i not in t:
                continue
            st, en = t[i]
            o = ops[i]
            if en < st:
                fail(f"{w}: op {i} ends before it starts")
            stream = o["stream"]
            grp = o.get("group", -1)
            same_group = grp >= 0 and prev_group.get(stream) == grp
            if not same_group and st < busy.get(stream, 0) - 1e-3:
                fail(f"{w}: op {i} starts at {st} while its stream {stream} is busy until {busy[stream]}")
            busy[stream] = max(busy.get(stream, 0), en)
            prev_group[stream] = grp
            if o["op"] == "wait":
                # its record: the latest record of the event before it in program order
                recs = [j for j in range(i) if ops[j]["op"] == "record" and ops[j]["event"] == o["event"]
                        and j in t]
                if recs and en < t[recs[-1]][0] - 1e-3:
                    fail(f"{w}: wait {i} released at {en} before its record {recs[-1]} ran at {t[recs[-1]][0]}")


def check_trace(plan, trace, nranks):
    other = trace["otherData"]
    meas = other.get("measured", [])
    if [m["rank"] for m in meas] != list(range(nranks)) or any(m["step_us"] <= 0 for m in meas):
        fail(f"trace: otherData.measured {meas}")
    if other.get("timing") != "modeled and measured":
        fail(f"trace: timing {other.get('timing')}")
    ev = trace["traceEvents"]
    mp = {e["pid"] for e in ev if e.get("pid", 0) >= 1000000}
    if mp != {1000000 + r for r in range(nranks)}:
        fail(f"trace: measured pids {sorted(mp)}")
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = {}
    for e in ev:
        if e["ph"] == "X" and e["pid"] in mp:
            if (e["pid"], e["tid"]) not in names:
                fail(f"trace: slice on undeclared thread {e['tid']}")
            slices.setdefault((e["pid"], e["tid"]), []).append(e)
    for (pid, tid), xs in slices.items():
        xs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in xs:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-9:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + 1e-9:
                fail(f"trace: {names[(pid, tid)]} of pid {pid}: '{e['name']}' overlaps '{stack[-1]['name']}' partially")
            stack.append(e)
    for r in range(nranks):
        thr = {names[k] for k in slices if k[0] == 1000000 + r}
        if not {"compute", "hooks", "trainer"} <= thr:
            fail(f"trace: rank {r} measured threads {sorted(thr)}")
        htid = [k for k in slices if k[0] == 1000000 + r and names[k] == "hooks"]
        hooks = [e for e in slices.get(htid[0], [])] if htid else []
        if len(hooks) != len(plan["segments"]):
            fail(f"trace: rank {r}: {len(hooks)} hook slices for {len(plan['segments'])} segments")
    # every op the record holds is drawn, alone or inside its group's slice
    drawn = set()
    for xs in slices.values():
        for e in xs:
            if "op" in e.get("args", {}):
                drawn.update(range(e["args"]["op"], e["args"]["last_op"] + 1))
    for i, o in enumerate(plan["ops"]):
        if o["op"] != "compute" and runs_on(plan, o, 0) and i not in drawn:
            fail(f"trace: op {i} of rank 0 not drawn")


def expect_error(cmd, code, *needles):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != code or not all(n in r.stderr for n in needles):
        fail(f"{' '.join(cmd[1:])}: exit {r.returncode} (want {code}), stderr {r.stderr.strip()!r} "
             f"should hold {needles}")


def check_page(flexplan, plan, plan_path, files, work):
    """the HTML page with the measured rows, in headless Chromium"""
    page = os.path.join(work, "measured.html")
    cmd = [flexplan, "viz", plan_path, "--format=html", "-o", page] + [a for p in files for a in ("--measured", p)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return fail(f"viz --format=html --measured: exit {r.returncode}: {r.stderr}")
    html = open(page, encoding="utf-8").read()
    m = re.search(r'<script type="application/json" id="fpdata">\n(.*?)</script>', html, re.S)
    data = json.loads(m.group(1)) if m else {}
    recs = [json.load(open(p))["steps"][-1] for p in files]
    meas = data.get("measured", [])
    if len(meas) != len(files):
        return fail(f"html: {len(meas)} measured records in the page's data, want {len(files)}")
    timed = 0
    for k, (mm, rec) in enumerate(zip(meas, recs)):
        ops = {o[0]: o for o in rec["ops"]}
        timed += len(ops)
        st = [ops[i][1] if i in ops else -1 for i in range(len(plan["ops"]))]
        if any(abs(a - b) > 5e-4 for a, b in zip(mm["st"], st)) or mm["hook_st"] != [h[1] for h in rec["hooks"]]:
            fail(f"html: record {k}'s op starts or hook entries differ from {files[k]}")
    if "except in the rows marked measured" not in html:
        fail("html: the header does not say which times are measured")
    chrome = vhc.find_chromium()
    if not chrome:
        print("viz_measured: chromium is not installed: the page was not loaded (CI installs it)")
        return
    vhc.static_checks(html, "measured page")
    dom, cons, _ = vhc.load(chrome, page, hash="#selftest")
    for line in cons:
        fail(f"measured page: console output: {line}")
    rec = vhc.selftest(dom, "measured page")
    if rec:
        mc = rec.get("measured_check") or {}
        modeled = sum(1 for o in plan["ops"] if runs_on(plan, o, 0))
        print(f"viz_measured: page: {rec['covered']} of {rec['expected']} ops drawn ({modeled} modeled + {timed} measured), "
              f"{mc.get('hooks_compared')} measured hooks compared, {mc.get('worst_px')} px off the modeled ones at most, "
              f"{mc.get('work')} stretches of trainer work")
        if rec.get("measured") != len(files) or rec.get("expected") != modeled + timed:
            fail(f"measured page: {rec.get('measured')} measured rows, {rec.get('expected')} ops expected; "
                 f"want {len(files)} and {modeled} + {timed}")
        if not mc.get("hooks_compared") or not mc.get("work"):
            fail(f"measured page: lined-up hooks or trainer work not drawn: {mc}")
        if len(re.findall(r'<g clip-path="url\(#clip\)" data-m="\d+"', dom)) != len(files):
            fail("measured page: the DOM does not hold one measured row per record")
    vhc.screenshot_checks(chrome, page, os.path.join(work, "measured.png"), "measured page")
    failures.extend(vhc.failures)
    del vhc.failures[:]


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    flexplan, train, mpiexec, model, spec_path, work = sys.argv[1:]
    mpiexec = mpiexec.split(";")
    os.makedirs(work, exist_ok=True)
    nranks, nsteps = 2, 3
    with open(spec_path) as f:
        spec = json.load(f)
    spec.setdefault("mesh", {})["world_size"] = nranks
    spec["mesh"].pop("ranks_per_node", None)
    sp = os.path.join(work, "spec.json")
    with open(sp, "w") as f:
        json.dump(spec, f)
    plan_path = os.path.join(work, "plan.json")
    subprocess.run([flexplan, "compile", model, "--spec", sp, "-o", plan_path], check=True, capture_output=True)
    with open(plan_path) as f:
        plan = json.load(f)
    prefix = os.path.join(work, "t")
    r = subprocess.run([mpiexec[0], mpiexec[1], str(nranks), *mpiexec[2:],
                        train, "--plan", plan_path, "--steps", str(nsteps), "--check", "--timing", prefix + "."],
                       capture_output=True, text=True, timeout=240)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(1)
    files = [f"{prefix}.{k}.json" for k in range(nranks)]
    for k, p in enumerate(files):
        with open(p) as f:
            check_record(plan, json.load(f), k, nsteps)
    out = os.path.join(work, "measured.trace.json")
    cmd = [flexplan, "viz", plan_path, "-o", out] + [a for p in files for a in ("--measured", p)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 or "rank 1 measured (step 2" not in r.stderr:
        fail(f"viz --measured: exit {r.returncode}: {r.stderr}")
    else:
        with open(out) as f:
            check_trace(plan, json.load(f), nranks)

    # errors
    other = dict(spec, strategy="no_shard")
    op = os.path.join(work, "other.spec.json")
    with open(op, "w") as f:
        json.dump(other, f)
    other_plan = os.path.join(work, "other.plan.json")
    subprocess.run([flexplan, "compile", model, "--spec", op, "-o", other_plan], check=True, capture_output=True)
    expect_error([flexplan, "viz", other_plan, "--measured", files[0], "-o", out], 1,
                 f"{files[0]}:1:", "error: /plan_hash: the record is of another plan")
    expect_error([flexplan, "viz", plan_path, "--measured", plan_path, "-o", out], 1,
                 f"{plan_path}:2:13: error: /format: expected \"flexplan.timing.v1\"")
    with open(files[0]) as f:
        rec = json.load(f)
    rec["steps"][-1]["ops"][0][0] = 10 ** 6
    bad = os.path.join(work, "bad-op.json")
    with open(bad, "w") as f:
        json.dump(rec, f)
    expect_error([flexplan, "viz", plan_path, "--measured", bad, "-o", out], 1,
                 f"error: /steps/{nsteps - 1}/ops/0/0:")
    broken = os.path.join(work, "broken.json")
    with open(broken, "w") as f:
        f.write('{"format": "flexplan.timing.v1",\n  "steps": [}\n')
    expect_error([flexplan, "viz", plan_path, "--measured", broken, "-o", out], 1, f"{broken}:2:")
    expect_error([flexplan, "viz", plan_path, "--measured", os.path.join(work, "missing.json"), "-o", out], 1,
                 "missing.json")
    check_page(flexplan, plan, plan_path, files, work)
    for f in failures:
        print("FAIL:", f)
    print(f"viz_measured: {'FAIL' if failures else 'ok'} ({len(failures)} failure(s))")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
