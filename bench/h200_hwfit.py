"""h200_hwfit.py - the h200 machine refitted from what was measured on an H200.

bench/results/nvidia-h200.json holds the local kernels timed on one H200
(CUDA events, median of 30, bytes = read + written, the same bytes the cost
model charges: docs/cost-model.md, "Local kernels and compute"). The cost
model times such a kernel as bytes / hbm_gbps (all are far above the launch
time), so the rate that minimizes the kernels' squared relative error is
    hbm_gbps = sum(g_i^2) / sum(g_i)      (g_i: each kernel's measured GB/s)
Every other field is the h200 preset's (nothing else was measured on one
GPU: no collective of 2 or more ranks, no compute rate). Writes a hardware
file (docs/cost-model.md, "Hardware files") and prints the residuals.

usage: h200_hwfit.py [RESULTS] [-o OUT]   (default bench/results/nvidia-h200.json,
                                           bench/results/nvidia-h200.hw.json)
"""
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("results", nargs="?", default="bench/results/nvidia-h200.json")
ap.add_argument("-o", default="bench/results/nvidia-h200.hw.json")
a = ap.parse_args()
with open(a.results) as f:
    r = json.load(f)
g = [k["gbps"] for k in r["kernels"]]
rate = sum(x * x for x in g) / sum(g)
print(f"hbm_gbps fitted {rate:.1f} from {len(g)} kernels (h200 preset: 4800, copy ceiling {r['copy_ceiling_gbps']})")
for k in r["kernels"]:
    print(f"  {k['name']:24s} measured {k['ms']:.4f} ms, modeled {k['bytes'] / (rate * 1e6):.4f} ms, "
          f"error {100 * (k['gbps'] / rate - 1):+.1f}%")
hw = {"format": "flexplan-hardware/1", "name": "h200-fit", "base": "h200",
      "note": f"hbm_gbps fitted by bench/h200_hwfit.py to the {len(g)} local kernels of {a.results} "
              f"({r.get('gpu', '?')}, {r.get('date', '?')}); the rest is the h200 preset's",
      "hbm_gbps": round(rate, 1)}
with open(a.o, "w") as f:
    json.dump(hw, f, indent=1)
    f.write("\n")
