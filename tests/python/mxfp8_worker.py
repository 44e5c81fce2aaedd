"""MXFP8 params through flexplan.executor.Executor, under ``mpiexec -n 2``
(test_mxfp8_py.py). tests/mpi/mlp-frozen with fc1.* in a frozen replicated
bucket of param_dtype "mxfp8", compiled by flexplan.compile. Checks the
ParamView of an MXFP8 param (one e4m3 copy for weight and main, the e8m0
``scales`` where plan.json puts them: the ctypes mirror of fp_param_view),
a refit from an fp32 safetensors file against a NumPy reference of
fpk_quantize_mxfp8 byte for byte (elements and scales), the torch views
(float8_e4m3fn, float8_e8m0fnu) and their dequantized values, the other
params' main shards, and a whole step's hooks with the MXFP8 bytes unchanged.
Prints "OK rank r" per rank."""
import math
import os
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import save_file

import flexplan
from flexplan.executor import Executor, mpi_init, mpi_finalize

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHAPES = {"fc0.weight": (20, 13), "fc0.bias": (20,), "fc1.weight": (19, 20), "fc1.bias": (19,),
          "fc2.weight": (11, 19), "fc2.bias": (11,), "fc3.weight": (5, 11)}


def quantize(x):
    """kernels/kernels.h fpk_quantize_mxfp8 for finite fp32 values: per block
    of 32, scale 2^e with e the least integer where amax <= 448 * 2^e,
    clamped to [-127, 127]; elements x * 2^-e rounded to E4M3."""
    x = np.asarray(x, np.float32).reshape(-1)
    nb = (x.size + 31) // 32
    elems, scales = np.empty(x.size, np.uint8), np.empty(nb, np.uint8)
    for b in range(nb):
        v = x[32 * b:32 * b + 32]
        amax = float(np.max(np.abs(v)))
        e = -127
        if amax > 448.0 * 2.0 ** -127:
            e = math.ceil(math.log2(amax / 448.0))
            while 448.0 * 2.0 ** e < amax:
                e += 1
            while 448.0 * 2.0 ** (e - 1) >= amax:
                e -= 1
            e = max(-127, min(127, e))
        scales[b] = e + 127
        y = v * np.float32(2.0 ** -e)
        elems[32 * b:32 * b + v.size] = torch.from_numpy(y).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    return elems, scales


def values(i, shape):
    """finite fp32 values of many magnitudes: the blocks' scales differ"""
    k = np.arange(int(np.prod(shape)), dtype=np.float64)
    return (np.sin(0.37 * k + 1.3 * i) * 2.0 ** ((k // 5 + i) % 23 - 11)).astype(np.float32).reshape(shape)


def main():
    rank, world = mpi_init()
    spec = {"format": "flexplan.spec.v1", "mesh": {"world_size": world}, "strategy": "full_shard",
            "defaults": {"mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "fp32",
                                             "main_grad_dtype": "fp32"}},
            "buckets": [{"name": "frozen", "params": ["fc1.*"], "placement": {"kind": "replicate"},
                         "mixed_precision": {"param_dtype": "mxfp8"}}]}
    plan = flexplan.compile(os.path.join(ROOT, "tests", "mpi", "mlp-frozen.model.json"), spec)
    tmp = tempfile.mkdtemp(prefix=f"fp-mx-{rank}-")
    plan_path = os.path.join(tmp, "plan.json")
    plan.save(plan_path)
    import json
    pj = {p["name"]: p for p in json.load(open(plan_path))["params"]}
    vals = {n: values(i, s) for i, (n, s) in enumerate(SHAPES.items())}
    path = os.path.join(tmp, "w.safetensors")
    save_file(vals, path)
    mx_names = ["fc1.weight", "fc1.bias"]
    with Executor(plan) as ex:
        for p in ex.params:
            if p.name not in mx_names:
                assert not p.mxfp8 and p.scales.numel == 0 and p.scales.ptr == 0, p.name
                continue
            q = pj[p.name]
            assert p.mxfp8 and not p.requires_grad and p.optim == [], p.name
            assert p.weight.dtype == "e4m3" and p.main.dtype == "e4m3", (p.weight.dtype, p.main.dtype)
            assert p.weight.ptr == p.main.ptr != 0 and p.weight.numel == p.main.numel == p.numel, p.name
            assert p.scales.dtype == "e8m0" and p.scales.numel == (p.numel + 31) // 32, (p.scales.dtype,
                                                                                          p.scales.numel)
            # where plan.json puts them, relative to the elements (same buffer)
            assert q["scales"]["buffer"] == q["weight"]["buffer"]
            assert p.scales.ptr - p.weight.ptr == q["scales"]["offset"] - q["weight"]["offset"], p.name
            assert p.ugrad.ptr == 0 and p.grad.ptr == 0
        ex.load_weights([path])
        want = {n: quantize(vals[n]) for n in mx_names}
        for n in mx_names:
            p = ex.param(n)
            e, s = want[n]
            assert bytes(p.buffer("weight")) == e.tobytes(), f"{n}: e4m3 elements differ from the reference"
            assert bytes(p.buffer("scales")) == s.tobytes(), f"{n}: scales differ from the reference"
            w, sc = p.tensor("weight"), p.tensor("scales")
            assert w.dtype == torch.float8_e4m3fn and tuple(w.shape) == SHAPES[n], (w.dtype, w.shape)
            assert sc.dtype == torch.float8_e8m0fnu and tuple(sc.shape) == (len(s),), (sc.dtype, sc.shape)
            assert p.tensor("main").data_ptr() == w.data_ptr()
            deq = w.float().reshape(-1) * sc.float().repeat_interleave(32)[:p.numel]
            x = torch.from_numpy(vals[n].reshape(-1))
            tiny = sc.float().repeat_interleave(32)[:p.numel] * 2.0 ** -9  # below E4M3's normals
            assert bool(((deq - x).abs() <= x.abs() / 16 + tiny).all()), f"{n}: dequantized values off"
        # the other params refit as before
        p = ex.param("fc2.weight")
        full, main = vals["fc2.weight"].reshape(-1), p.buffer("main")
        for s0, f0, k in p.shard.pairs():
            assert list(main[s0:s0 + k]) == full[f0:f0 + k].tolist(), "fc2.weight main shard"
        snap = {n: (bytes(ex.param(n).buffer("weight")), bytes(ex.param(n).buffer("scales"))) for n in mx_names}
        ex.step_begin()
        for m in range(4):
            ex.pre_forward(m)
            if m == 2:
                assert list(ex.param("fc2.weight").buffer("weight")) == full.tolist(), "fc2 gathered"
            if m == 1:
                for n in mx_names:
                    assert (bytes(ex.param(n).buffer("weight")), bytes(ex.param(n).buffer("scales"))) == snap[n]
            ex.post_forward(m)
        for m in (3, 2, 1, 0):
            ex.pre_backward(m)
            ex.post_backward(m)
        ex.pre_optimizer()
        ex.post_optimizer()
        ex.sync()
        for n in mx_names:
            assert (bytes(ex.param(n).buffer("weight")), bytes(ex.param(n).buffer("scales"))) == snap[n], n
        st = ex.stats()
        assert st["steps"] == 1 and st["refits"] == 1 and st["hook_allocations"] == 0, st
    plan.close()
    print(f"OK rank {rank}", flush=True)
    mpi_finalize()


if __name__ == "__main__":
    sys.exit(main())
