#!/usr/bin/python3
"""check_summary.py FLEXPLAN MODEL.json

The summary test of one example: `flexplan compile MODEL --emit=summary -o -`
must print one JSON object with every documented field, of the right type,
agreeing with the input file and with itself:
  arena_bytes >= lower_bound_bytes > 0, arena_bytes <= 1.01 x lower_bound_bytes
  (docs/schedule.md, "memplan"), lower_bound_bytes at least the most bytes live
  at one op of the .fpir's live ranges (persistent + transient, counted here
  from `--emit=ir`), peak_bytes > 0,
  persistent_bytes >= param_shard_bytes, world_size / model / strategy /
  params as in the file, collectives <= ops, and communication on every
  example (they all have world_size > 1); the modeled figures are numbers
  >= 0 with step >= compute + exposed communication, on the spec's hardware.
Standard library only. Exit 0 ok, 1 failed check, 2 usage."""
import json
import subprocess
import sys

INT_FIELDS = ["world_size", "buckets", "params", "ops", "collectives",
              "param_shard_bytes", "grad_shard_bytes", "persistent_bytes",
              "comm_bytes_per_rank", "arena_bytes", "peak_bytes", "lower_bound_bytes",
              "optimizer_state_bytes", "host_bytes"]
STATES = {"none": 0, "sgd": 1, "adamw": 2}
DSIZE = {"fp32": 4, "bf16": 2, "fp16": 2}


def optimizer_bytes(fpir, optim, state_dtype):
  """The optimizer state the .fpir should hold, computed from its main-grad
  buffers: per trainable bucket, STATES[optim] planes, each the grad
  buffer's elements in the state dtype rounded up to 256 bytes; and the
  state it does hold (its optimizer_state buffers)."""
  gdt, grad, held = {}, {}, 0
  for line in fpir.splitlines():
    f = line.split()
    kv = dict(x.split("=", 1) for x in f if "=" in x)
    if f[:1] == ["param"] and "grad" in kv:
      gdt[kv["bucket"]] = kv["dtypes"].split("/")[2]
    if f[:1] == ["buf"] and len(f) > 4 and f[4] == "main_grad":
      grad[kv["bucket"]] = int(kv["bytes"])
    if f[:1] == ["buf"] and len(f) > 4 and f[4] == "optimizer_state":
      held += int(kv["bytes"])
  want = 0
  for b, g in grad.items():
    if b in gdt and STATES[optim]:
      plane = -(-(g // DSIZE[gdt[b]] * DSIZE[state_dtype]) // 256) * 256
      want += STATES[optim] * plane
  return want, held


def op_order_bound(fpir, persistent):
  """The most device bytes live at one op: persistent buffers throughout,
  each transient buffer over its `live=a..b,...` ranges (op indices)."""
  delta = {}
  for line in fpir.splitlines():
    f = line.split()
    if len(f) < 4 or f[0] != "buf" or f[3] != "transient":
      continue
    kv = dict(x.split("=", 1) for x in f[4:] if "=" in x)
    for rng in kv.get("live", "").split(","):
      if not rng:
        continue
      a, b = (int(x) for x in rng.split(".."))
      delta[a] = delta.get(a, 0) + int(kv["bytes"])
      delta[b + 1] = delta.get(b + 1, 0) - int(kv["bytes"])
  live = most = 0
  for i in sorted(delta):
    live += delta[i]
    most = max(most, live)
  return persistent + most


def main(argv):
  if len(argv) != 3:
    print(__doc__.splitlines()[0], file=sys.stderr)
    return 2
  fp, path = argv[1], argv[2]
  with open(path) as f:
    doc = json.load(f)
  model = doc.get("model", doc)
  spec = doc.get("spec", {})
  r = subprocess.run([fp, "compile", path, "--emit=summary", "-o", "-"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  if r.returncode != 0:
    print("compile --emit=summary failed (%d):\n%s" % (r.returncode, r.stderr), file=sys.stderr)
    return 1
  try:
    s = json.loads(r.stdout)
  except ValueError as e:
    print("summary is not JSON: %s\n---\n%s" % (e, r.stdout[:2000]), file=sys.stderr)
    return 1
  errs = []

  def need(cond, msg):
    if not cond:
      errs.append(msg)

  need(isinstance(s, dict), "summary is not a JSON object")
  if not isinstance(s, dict):
    s = {}
  for k in INT_FIELDS:
    v = s.get(k)
    need(isinstance(v, int) and not isinstance(v, bool) and v >= 0,
         "%s: want a non-negative integer, got %r" % (k, v))
  for k in ("model", "strategy"):
    need(isinstance(s.get(k), str), "%s: want a string, got %r" % (k, s.get(k)))
  for k in ("modeled_step_ms", "modeled_compute_ms", "modeled_exposed_comm_ms"):
    v = s.get(k)
    need(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0,
         "%s: want a non-negative number, got %r" % (k, v))
  need(s.get("hardware") == spec.get("hardware", {}).get("preset", "h100-sxm"),
       "hardware %r, spec says %r" % (s.get("hardware"), spec.get("hardware", {}).get("preset", "h100-sxm")))
  cm = s.get("compile_ms")
  need(isinstance(cm, (int, float)) and not isinstance(cm, bool) and cm >= 0,
       "compile_ms: want a non-negative number, got %r" % (cm,))
  if errs:
    print("\n".join(errs), file=sys.stderr)
    return 1

  world = spec.get("mesh", {}).get("world_size", 8)
  strategy = spec.get("strategy", "full_shard")
  nparams = sum(len(m["params"]) for m in model["modules"])
  need(s["world_size"] == world, "world_size %d, file says %d" % (s["world_size"], world))
  need(s["model"] == model["name"], "model %r, file says %r" % (s["model"], model["name"]))
  need(s["strategy"] == strategy, "strategy %r, file says %r" % (s["strategy"], strategy))
  need(s["params"] == nparams, "params %d, file has %d" % (s["params"], nparams))
  need(s["buckets"] >= 1, "no buckets")
  need(s["lower_bound_bytes"] > 0, "lower_bound_bytes is 0")
  need(s["arena_bytes"] >= s["lower_bound_bytes"],
       "arena_bytes %d < lower_bound_bytes %d" % (s["arena_bytes"], s["lower_bound_bytes"]))
  # the memory plan is within 1% of its lower bound, and that bound is no
  # smaller than the plainest one: the most bytes live at one op
  need(s["arena_bytes"] <= 1.01 * s["lower_bound_bytes"],
       "arena_bytes %d > 1.01 x lower_bound_bytes %d (ratio %.4f)" %
       (s["arena_bytes"], s["lower_bound_bytes"], s["arena_bytes"] / max(1, s["lower_bound_bytes"])))
  r = subprocess.run([fp, "compile", path, "--emit=ir", "-o", "-"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  need(r.returncode == 0, "compile --emit=ir failed: %s" % r.stderr[-2000:])
  if r.returncode == 0:
    sweep = op_order_bound(r.stdout, s["persistent_bytes"])
    need(s["lower_bound_bytes"] >= sweep,
         "lower_bound_bytes %d < %d, the most bytes live at one op of the .fpir" % (s["lower_bound_bytes"], sweep))
    # the optimizer the spec asks for (adamw in fp32 by default), its state
    # sized from the main grads as docs/layout.md says
    optim = spec.get("optimizer", {}).get("type", "adamw")
    sdt = spec.get("optimizer", {}).get("state_dtype", "fp32")
    need(s["optimizer"] == optim, "optimizer %r, the spec says %r" % (s["optimizer"], optim))
    want, held = optimizer_bytes(r.stdout, optim, sdt)
    need(s["optimizer_state_bytes"] == want == held,
         "optimizer_state_bytes %d; the .fpir's optimizer_state buffers %d; from its main grads %d"
         % (s["optimizer_state_bytes"], held, want))
  need(s["peak_bytes"] > 0, "peak_bytes is 0")
  # one peak: the whole arena (persistent buffers first) plus the activations
  # at their peak, never below the arena; over_device_bytes is what it exceeds
  # the hardware's device memory by (docs/cli.md)
  need(s["peak_bytes"] == s["arena_bytes"] + s["activation_peak_bytes"],
       "peak_bytes %d != arena_bytes %d + activation_peak_bytes %d"
       % (s["peak_bytes"], s["arena_bytes"], s["activation_peak_bytes"]))
  need(s["arena_bytes"] >= s["persistent_bytes"], "arena_bytes %d < persistent_bytes %d"
       % (s["arena_bytes"], s["persistent_bytes"]))
  need(s["over_device_bytes"] == max(0, s["peak_bytes"] - s["device_bytes"]),
       "over_device_bytes %d is not peak_bytes %d - device_bytes %d"
       % (s["over_device_bytes"], s["peak_bytes"], s["device_bytes"]))
  need(s["persistent_bytes"] + s["host_bytes"] >= s["param_shard_bytes"] + s["grad_shard_bytes"] + s["optimizer_state_bytes"],
       "persistent_bytes %d + host_bytes %d < param_shard_bytes %d + grad_shard_bytes %d + optimizer_state_bytes %d"
       % (s["persistent_bytes"], s["host_bytes"], s["param_shard_bytes"], s["grad_shard_bytes"], s["optimizer_state_bytes"]))
  need(s["ops"] >= s["collectives"], "ops %d < collectives %d" % (s["ops"], s["collectives"]))
  # modeled: the step holds at least its compute and its exposed communication
  need(s["modeled_step_ms"] + 1e-6 >= s["modeled_compute_ms"] + s["modeled_exposed_comm_ms"],
       "modeled_step_ms %r < compute %r + exposed %r" % (s["modeled_step_ms"], s["modeled_compute_ms"],
                                                          s["modeled_exposed_comm_ms"]))
  if world > 1:
    need(s["collectives"] > 0, "no collectives at world_size %d" % world)
    need(s["comm_bytes_per_rank"] > 0, "no communication at world_size %d" % world)
  if errs:
    print("%s:\n  %s\nsummary: %s" % (path, "\n  ".join(errs), json.dumps(s)), file=sys.stderr)
    return 1
  print("summary ok: %s %s" % (path, json.dumps(s)))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
