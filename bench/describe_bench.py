#!/usr/bin/env python3
"""describe_bench.py - time flexplan.torch.describe() on Llama-3 8B and 70B.

    .venv/bin/python bench/describe_bench.py [N]        (runs per model; default 3)

Each model is measured in its own process: the Hugging Face LlamaForCausalLM
is built from Llama 3's public config under torch.device("meta") (not timed),
then describe() runs N times on it (input_ids of shape 1 x 128, the default);
the script prints min / median / max wall time, the process's peak resident
memory (ru_maxrss, which includes importing torch and transformers) and the
70B/8B ratios. Needs the venv of python/requirements-test.txt; nothing is
downloaded.
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import time

CONFIGS = {
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32),
    "llama3-70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                       num_attention_heads=64),
}


def one(name, n):
    """Runs in the child: prints one JSON line of figures."""
    t0 = time.perf_counter()
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig
    from flexplan.torch import describe
    t_import = time.perf_counter() - t0
    rss_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cfg = LlamaConfig(vocab_size=128256, num_key_value_heads=8, rope_theta=500000.0,
                      tie_word_embeddings=False, **CONFIGS[name])
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        d = describe(model)
        times.append(time.perf_counter() - t)
    numel = sum(p["shape"][0] * (p["shape"][1] if len(p["shape"]) > 1 else 1)
                for m in d["modules"] for p in m["params"])
    print(json.dumps({"model": name, "times": times, "import_s": t_import, "numel": numel,
                      "units": len(d["modules"]), "rss_import_kib": rss_import,
                      "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def main(argv):
    if len(argv) == 4 and argv[1] == "--one":
        one(argv[2], int(argv[3]))
        return 0
    n = int(argv[1]) if len(argv) > 1 else 3
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(root, "python"),
                                                      env.get("PYTHONPATH")]))
    res = {}
    for name in CONFIGS:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name, str(n)],
                             env=env, check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        res[name] = r
        t = sorted(r["times"])
        print("%-11s %5d units %15d params  describe min %.3f s  median %.3f s  max %.3f s  "
              "peak RSS %.0f MiB (%.0f MiB after imports)"
              % (name, r["units"], r["numel"], t[0], statistics.median(t), t[-1],
                 r["rss_kib"] / 1024, r["rss_import_kib"] / 1024))
    a, b = res["llama3-8b"], res["llama3-70b"]
    print("70B / 8B: params %.2fx, units %.2fx, median describe time %.2fx"
          % (b["numel"] / a["numel"], b["units"] / a["units"],
             statistics.median(b["times"]) / statistics.median(a["times"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
