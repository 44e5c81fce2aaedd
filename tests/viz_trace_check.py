#!/usr/bin/env python3
"""viz_trace_check.py - the structure of `flexplan viz --format=trace` output.

usage: viz_trace_check.py FLEXPLAN WORKDIR EXAMPLE.json...

For each example: compile it to a plan, write its trace with `flexplan viz`
(and once with `compile --emit=trace`, which must give the same file), and
check what docs/viz.md promises, against the plan itself:

- valid JSON (no NaN/Infinity), an object with traceEvents and otherData;
  otherData names the plan's hash and says the times are modeled;
- a process_name for every pid, a thread_name for every (pid, tid) used;
  the pids shown are rank 0 and the first rank of every other layout class
  (computed here from the plan: `only=` predicates and table counts);
- every X on a declared tid (its pid's stream), ts/dur finite, dur >= 0, no
  negative ts; one X per op the rank runs (a grouped collective: one X from
  args.op to args.last_op), args with op, segment, stream, bucket, bytes and
  modeled times that agree with ts/dur;
- proper nesting on every track in the file's integer nanoseconds: no two X
  overlap without one containing the other, and only instants (dur 0) sit
  inside another slice;
- one flow (s, then f with "bp":"e", same id/cat/name) per wait; the start
  lies inside a slice on the record's stream, the finish inside a slice on
  the wait's stream, and every id has exactly one start and one finish;
- C counters in time order per (pid, name), the seven memory categories
  and the budget; their most bytes equal the plan's memory_timeline peak;
- async b/e balanced per id (one b, one e, same name and pid, e not
  before b).
Exit status 0 when every check passes, 1 otherwise.
"""
import json
import math
import os
import subprocess
import sys

CATS = ["main_weight", "main_grad", "unsharded_weight", "unsharded_grad", "staging", "reshard", "optimizer_state", "activations"]
STREAMS = ["compute", "ag", "rs"]
SYNC = {"record", "wait"}
LOCAL = {"cast", "copy", "split_copy", "chunk_cat", "add", "scale", "memset", "quantize_mxfp8", "dequantize_mxfp8", "h2d", "d2h"}
EPS = 0.0015  # the trace's times have three decimals

failures = []


def fail(where, msg):
    failures.append(f"{where}: {msg}")


def no_constants(name):
    raise ValueError(f"non-JSON number {name}")


def layout_classes(plan):
    """rank -> class (0..n-1 in order of the first rank), as docs/viz.md defines them"""
    comms = plan["comms"]
    tabs = plan["tables"]
    dep = [o for o in plan["ops"] if "only" in o or "table" in o]

    def index(comm, r):
        c = comms[comm]
        return (r // c["stride"]) % c["size"]

    def sig(r):
        s = []
        for o in dep:
            runs = "only" not in o or index(o["only_comm"], r) == o["only"]
            n = 0
            if runs:
                n = o.get("count", 0)
                if "table" in o and (o["op"] in ("all_gather_v", "reduce_scatter_v") or o["op"] in LOCAL):
                    g = index(o["comm"], r) if "comm" in o else 0
                    n = tabs[o["table"]]["cnt"][g]
            s.append((runs, n))
        return tuple(s)

    classes, out = {}, []
    for r in range(plan["world_size"]):
        k = sig(r) if dep else ()
        out.append(classes.setdefault(k, len(classes)))
    return out


def runs_on(plan, o, r):
    if "only" not in o:
        return True
    c = plan["comms"][o["only_comm"]]
    return (r // c["stride"]) % c["size"] == o["only"]


def check(where, plan, trace, ranks_expected):
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return fail(where, "not an object with a traceEvents array")
    od = trace.get("otherData", {})
    if od.get("plan_hash") != plan["hash"]:
        fail(where, f"otherData.plan_hash {od.get('plan_hash')!r} is not the plan's {plan['hash']}")
    if od.get("timing") != "modeled" or "modeled" not in od.get("note", ""):
        fail(where, "otherData does not say the times are modeled")
    evs = trace["traceEvents"]
    procs, threads = {}, {}
    for e in evs:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    want_pids = {r + 1: f"rank {r}" for r in ranks_expected}
    if procs != want_pids:
        fail(where, f"processes {sorted(procs.items())} are not {sorted(want_pids.items())}")
    ops = plan["ops"]
    slices = {}  # (pid, tid) -> list of (ts, end)
    nx = {}
    for e in evs:
        ph = e.get("ph")
        if ph not in ("M", "X", "s", "f", "C", "b", "e"):
            fail(where, f"unexpected event phase {ph!r}")
            continue
        if ph != "M":
            ts = e.get("ts")
            if not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
                fail(where, f"event with bad ts: {e}")
                continue
        if ph != "X":
            continue
        key = (e.get("pid"), e.get("tid"))
        if key not in threads:
            fail(where, f"X event on an undeclared tid: {e}")
            continue
        a = e.get("args", {})
        for k in ("op", "segment", "stream", "bucket", "bytes", "modeled_us", "modeled_start_us", "modeled_end_us"):
            if k not in a:
                fail(where, f"X event lacks args.{k}: {e}")
        dur = e.get("dur")
        if not isinstance(dur, (int, float)) or dur < 0:
            fail(where, f"X event with bad dur: {e}")
            continue
        o = ops[a["op"]]
        if threads[key] != o["stream"] or a["stream"] != o["stream"]:
            fail(where, f"op {a['op']} ({o['stream']}) drawn on the {threads[key]} thread")
        if abs(a["modeled_end_us"] - a["modeled_start_us"] - dur) > 2 * EPS or abs(a["modeled_us"] - dur) > EPS:
            fail(where, f"op {a['op']}: args' modeled times disagree with dur")
        slices.setdefault(key, []).append((ts, ts + dur, a["op"]))
        # a grouped collective is one slice from its first op to last_op:
        # every member on the same stream, of the same group, and each op
        # the rank runs is drawn exactly once
        last = a.get("last_op", a["op"])
        members = [j for j in range(a["op"], last + 1) if runs_on(plan, ops[j], key[0] - 1)]
        if last != a["op"]:
            g = o.get("group")
            if g is None or any(ops[j].get("group") != g or ops[j]["stream"] != o["stream"]
                                for j in range(a["op"], last + 1)):
                fail(where, f"op {a['op']}: slice to last_op {last} spans ops outside its group or stream")
        for j in members:
            nx[(key[0], j)] = nx.get((key[0], j), 0) + 1
    for r in ranks_expected:
        want = [i for i, o in enumerate(ops) if runs_on(plan, o, r)]
        drawn = [i for i in want if nx.get((r + 1, i)) == 1]
        extra = sum(v for (pid, _), v in nx.items() if pid == r + 1) - len(drawn)
        if len(drawn) != len(want) or extra:
            fail(where, f"rank {r}: {len(drawn)} of its {len(want)} ops drawn once, {extra} drawn again or not run")

    # proper nesting on every track, in the file's own integer nanoseconds
    # (Perfetto drops an X that overlaps its neighbour by even 1 ns); a stream
    # runs one op at a time, so only an instant (a sync op, dur 0) may sit
    # inside another slice - grouped collectives included
    xs = {}
    for e in evs:
        if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float)):
            t0 = round(e["ts"] * 1000)
            xs.setdefault((e["pid"], e["tid"]), []).append((t0, t0 + round(e["dur"] * 1000), e["args"].get("op")))
    for key, v in xs.items():
        v.sort(key=lambda x: (x[0], -x[1]))
        stack = []
        for t0, t1, op in v:
            while stack and t0 >= stack[-1][1]:
                stack.pop()
            if stack and t1 > stack[-1][1]:
                fail(where, f"track {key}: op {op} [{t0}, {t1}] ns overlaps op {stack[-1][2]} "
                            f"[{stack[-1][0]}, {stack[-1][1]}] ns without nesting")
            elif stack and t1 > t0:
                fail(where, f"track {key}: op {op} [{t0}, {t1}] ns is drawn nested in op {stack[-1][2]} "
                            f"[{stack[-1][0]}, {stack[-1][1]}] ns")
            stack.append((t0, t1, op))

    def inside(pid, stream, ts):
        tid = next((t for (p, t), n in threads.items() if p == pid and n == stream), None)
        return any(a - EPS <= ts <= b + EPS for a, b, _ in slices.get((pid, tid), []))

    # flows
    starts, finishes = {}, {}
    for e in evs:
        if e.get("ph") == "s":
            if e["id"] in starts:
                fail(where, f"flow id {e['id']} starts twice")
            starts[e["id"]] = e
        elif e.get("ph") == "f":
            if e["id"] in finishes:
                fail(where, f"flow id {e['id']} finishes twice")
            if e.get("bp") != "e":
                fail(where, f"flow finish without \"bp\":\"e\": {e}")
            finishes[e["id"]] = e
    if set(starts) != set(finishes):
        fail(where, f"flow ids without a partner: {sorted(set(starts) ^ set(finishes))[:10]}")
    nwaits = sum(1 for o in ops if o["op"] == "wait")
    for r in ranks_expected:
        n = sum(1 for s in starts.values() if s["pid"] == r + 1)
        if n != nwaits:
            fail(where, f"rank {r}: {n} flows for {nwaits} waits")
    for i, s in starts.items():
        f = finishes.get(i)
        if not f:
            continue
        if (s["name"], s["cat"], s["pid"]) != (f["name"], f["cat"], f["pid"]):
            fail(where, f"flow {i}: start and finish differ in name, cat or pid")
        for e in (s, f):
            stream = threads.get((e["pid"], e["tid"]))
            if stream is None or not inside(e["pid"], stream, e["ts"]):
                fail(where, f"flow {i}: {e['ph']} at {e['ts']} is inside no slice of its thread")
        if f["ts"] + EPS < s["ts"] and "next step" not in s["name"]:
            fail(where, f"flow {i} goes back in time: {s['ts']} -> {f['ts']}")
    # counters
    last, peak = {}, {}
    for e in evs:
        if e.get("ph") != "C":
            continue
        k = (e["pid"], e["name"])
        if e["ts"] + 1e-9 < last.get(k, -1):
            fail(where, f"counter {k} goes back in time at {e['ts']}")
        last[k] = e["ts"]
        vals = e.get("args", {})
        if not vals or not all(isinstance(v, int) and v >= 0 for v in vals.values()):
            fail(where, f"counter with bad values: {e}")
        if e["name"] == "memory (modeled)":
            if list(vals) != CATS:
                fail(where, f"memory counter categories {list(vals)} are not {CATS}")
            peak[e["pid"]] = max(peak.get(e["pid"], 0), sum(vals.values()))
    names = {n for (_, n) in last}
    if "memory (modeled)" not in names or not ({"memory budget", "device memory (no budget in the plan)"} & names):
        fail(where, f"counters {sorted(names)} lack the memory or the budget")
    want_peak = plan["memory_timeline"]["peak_bytes"]
    for pid, p in peak.items():
        if p != want_peak:
            fail(where, f"pid {pid}: memory counters peak at {p}, the plan's timeline at {want_peak}")
    budget = od.get("memory_budget_bytes")
    if "memory_budget_bytes" in plan and budget != plan["memory_budget_bytes"]:
        fail(where, f"budget {budget} is not the plan's {plan['memory_budget_bytes']}")
    # async lifetimes
    opened = {}
    nb = 0
    for e in sorted((e for e in evs if e.get("ph") in ("b", "e")), key=lambda e: (e["ts"], e["ph"] == "e")):
        k = (e["pid"], e.get("cat"), e["id"])
        if e["ph"] == "b":
            nb += 1
            if k in opened:
                fail(where, f"async id {k} begins twice")
            opened[k] = e
        else:
            b = opened.pop(k, None)
            if b is None:
                fail(where, f"async end without a begin: {e}")
            elif b["name"] != e["name"]:
                fail(where, f"async {k}: begin {b['name']!r} and end {e['name']!r}")
    if opened:
        fail(where, f"async begins without an end: {list(opened)[:5]}")
    if nb == 0:
        fail(where, "no buffer lifetimes")
    return len(evs)


def main():
    fp, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    for ex in sys.argv[3:]:
        name = os.path.basename(ex)[:-5]
        plan_path = os.path.join(work, name + ".plan.json")
        trace_path = os.path.join(work, name + ".trace.json")
        emit_path = os.path.join(work, name + ".emit.trace.json")
        subprocess.run([fp, "compile", ex, "-o", plan_path], check=True, stderr=subprocess.DEVNULL)
        subprocess.run([fp, "viz", plan_path, "--format=trace", "-o", trace_path], check=True, stderr=subprocess.DEVNULL)
        subprocess.run([fp, "compile", ex, "--emit=trace", "-o", emit_path], check=True, stderr=subprocess.DEVNULL)
        with open(plan_path) as f:
            plan = json.load(f)
        with open(trace_path, encoding="utf-8") as f:
            trace = json.load(f, parse_constant=no_constants)
        with open(trace_path, "rb") as a, open(emit_path, "rb") as b:
            if a.read() != b.read():
                fail(name, "compile --emit=trace and viz --format=trace differ")
        cls = layout_classes(plan)
        first = {}
        for r, c in enumerate(cls):
            first.setdefault(c, r)
        ranks = sorted(first.values())[:16]
        n = check(name, plan, trace, ranks)
        # --ranks: exactly the ranks asked for, in that order of pids
        pick = sorted({0, plan["world_size"] - 1})
        sel_path = os.path.join(work, name + ".ranks.trace.json")
        subprocess.run([fp, "viz", plan_path, "--ranks", ",".join(map(str, pick)), "-o", sel_path], check=True,
                       stderr=subprocess.DEVNULL)
        with open(sel_path) as f:
            check(name + " --ranks", plan, json.load(f, parse_constant=no_constants), pick)
        print(f"{name}: {n} events, {len(first)} layout class(es), ranks shown {ranks}, "
              f"{os.path.getsize(trace_path)} bytes")
    for m in failures[:50]:
        print("FAIL:", m)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
