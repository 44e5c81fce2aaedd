#!/usr/bin/env python3
"""prefetch "auto": compile llama3-8b at fixed depths 0..4 to learn each
depth's need (arena + activations), then with a budget between two needs
"auto" must pick the deepest depth that fits; with a budget below depth 0's
need, the error must name what is live at the peak.

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
      need.append(s["arena_bytes"] + s["activation_peak_bytes"])
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
  return 1 if fails else 0


if __name__ == "__main__":
  sys.exit(main())
