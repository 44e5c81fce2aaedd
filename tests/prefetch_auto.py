#!/usr/bin/env python3
"""prefetch "auto": compile llama3-8b at fixed depths 0..4 to learn each
depth's need (arena + activations), then with a budget between two needs
"auto" must pick the deepest depth that fits; with a budget below depth 0's
need, the error must name what is live at the peak. Without a budget, "auto"
must match the least modeled step of the fixed depths.

buckets {"auto": {}}: the chosen plan's modeled step is the least of the
bucket sizes the planner tries, compiled one by one with target_bytes; under
a budget no size fits, the error is the smallest size's (target_bytes 1),
word for word.

usage: prefetch_auto.py --cmd FLEXPLAN --src SOURCE_DIR"""
import argparse, json, os, subprocess, sys, tempfile


def compile_summary(fp, doc, tmp):
  path = os.path.join(tmp, "m.json")
  with open(path, "w") as f:
    json.dump(doc, f)
  r = subprocess.run([fp, "compile", path, "--emit=summary", "-o", "-"], capture_output=True, text=True)
  return r.returncode, (json.loads(r.stdout) if r.returncode == 0 else None), r.stderr


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--cmd", required=True)
  ap.add_argument("--src", required=True)
  a = ap.parse_args()
  base = json.load(open(os.path.join(a.src, "examples", "llama3-8b.json")))
  base["spec"].pop("memory_budget_bytes", None)
  fails = 0
  with tempfile.TemporaryDirectory() as tmp:
    need = []
    for k in range(5):
      d = json.loads(json.dumps(base))
      d["spec"]["prefetch"] = {"forward": k, "backward": k}
      rc, s, err = compile_summary(a.cmd, d, tmp)
      assert rc == 0, err
      n = s["arena_bytes"] + s["activation_peak_bytes"]
      # under a budget the planner may keep a slower plan that needs less
      # (no double-buffered grads, the reductions' casts on another
      # stream): the least a depth needs is where a budget just under it
      # no longer compiles
      for _ in range(16):
        d["spec"]["memory_budget_bytes"] = n - 1
        rc, s, err = compile_summary(a.cmd, d, tmp)
        if rc != 0:
          break
        assert s["arena_bytes"] + s["activation_peak_bytes"] < n
        n = s["arena_bytes"] + s["activation_peak_bytes"]
      else:
        sys.exit("depth %d: no least need after 16 plans" % k)
      need.append(n)
    print("need per depth:", need)
    for k in range(5):
      d = json.loads(json.dumps(base))
      d["spec"]["prefetch"] = "auto"
      d["spec"]["memory_budget_bytes"] = need[k] + (need[k + 1] - need[k]) // 2 if k < 4 else need[4]
      rc, s, err = compile_summary(a.cmd, d, tmp)
      got = (s or {}).get("prefetch_forward"), (s or {}).get("prefetch_backward")
      ok = rc == 0 and got == (k, k)
      print("budget between depth %d and %d: picked %s %s" % (k, k + 1, got, "ok" if ok else "FAIL " + err))
      fails += not ok
    d = json.loads(json.dumps(base))
    d["spec"]["prefetch"] = "auto"
    d["spec"]["memory_budget_bytes"] = need[0] - 1
    rc, s, err = compile_summary(a.cmd, d, tmp)
    ok = rc == 1 and "/spec/memory_budget_bytes" in err and "live:" in err and "unsharded_weight" in err
    print("budget below depth 0: exit %d %s" % (rc, "ok" if ok else "FAIL: " + err))
    fails += not ok
    # no budget: the least modeled step among the depths
    steps = []
    for k in range(5):
      d = json.loads(json.dumps(base))
      d["spec"]["prefetch"] = {"forward": k, "backward": k}
      steps.append(compile_summary(a.cmd, d, tmp)[1]["modeled_step_ms"])
    d = json.loads(json.dumps(base))
    d["spec"]["prefetch"] = "auto"
    s = compile_summary(a.cmd, d, tmp)[1]
    ok = abs(s["modeled_step_ms"] - min(steps)) <= 1e-6 * min(steps) and \
        steps[s["prefetch_forward"]] == min(steps) and \
        all(steps[j] > min(steps) for j in range(s["prefetch_forward"]))
    print("no budget: steps %s, picked %d %s" % (steps, s["prefetch_forward"], "ok" if ok else "FAIL"))
    fails += not ok
    # buckets auto: no worse than any target it tries
    targets = [1] + [m << 20 for m in (16, 32, 64, 128, 256, 512, 1024, 2048)]
    best = None
    for t in targets:
      d = json.loads(json.dumps(base))
      d["spec"]["buckets"] = {"auto": {"target_bytes": t}}
      rc, s, err = compile_summary(a.cmd, d, tmp)
      if rc == 0 and (best is None or s["modeled_step_ms"] < best):
        best = s["modeled_step_ms"]
    d = json.loads(json.dumps(base))
    d["spec"]["buckets"] = {"auto": {}}
    rc, s, err = compile_summary(a.cmd, d, tmp)
    ok = rc == 0 and abs(s["modeled_step_ms"] - best) <= 1e-6 * best
    print("buckets auto: %.3f ms, best target %.3f ms, %d buckets %s" %
          (s["modeled_step_ms"], best, s["buckets"], "ok" if ok else "FAIL"))
    fails += not ok
    # buckets auto, a budget no bucket size fits: the smallest's error
    errs = {}
    for t in (None, 1, targets[-1]):
      d = json.loads(json.dumps(base))
      d["spec"]["buckets"] = {"auto": {"target_bytes": t} if t else {}}
      d["spec"]["memory_budget_bytes"] = 1 << 20
      rc, s, err = compile_summary(a.cmd, d, tmp)
      assert rc == 1, (t, rc, err)
      errs[t] = err[err.index(" error: "):]  # the column differs: target_bytes is written out
    ok = errs[None] == errs[1] and errs[1] != errs[targets[-1]] and "/spec/memory_budget_bytes" in errs[None]
    print("buckets auto, no size fits: %s" % ("ok" if ok else "FAIL: " + errs[None]))
    fails += not ok
  return 1 if fails else 0


if __name__ == "__main__":
  sys.exit(main())
