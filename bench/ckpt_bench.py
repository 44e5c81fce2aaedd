"""Checkpoint save and load through torch.distributed.checkpoint: flexplan.torch
against FSDP2, the same model on the same ranks, measured side by side.

    PYTHONPATH=python FLEXPLAN_LIBRARY=build/libflexplan.so FLEXPLAN_CLI=build/flexplan \\
        .venv/bin/python bench/ckpt_bench.py [--np 2] [--layers 24] [--dim 1024] [--reps 2]

The model: `layers` Linear(dim, dim) (weight and bias) in a stack, built on
the meta device (no rank ever holds it whole), fp32, AdamW (one step, so the
optimizer state exists). flexplan.torch: full_shard, one bucket per layer
(flat storage: extents cut rows), init=None then each rank fills its shards;
save = flexplan.torch.state_dict(st, opt, copy=False) + dcp.save; load =
state_dict (staging copies) + dcp.load + load_state_dict; load_in_place =
flexplan.torch.checkpoint.load_in_place (checks, then reads into the arena). FSDP2: fully_shard per layer and the root on a
gloo mesh, to_empty + init; save = get_state_dict + dcp.save; load =
get_state_dict + dcp.load + set_state_dict. Before each phase the heap is
trimmed (malloc_trim) so freed memory of the last phase does not hide this
one's growth. Each rank: wall time of save and
load (best of reps, barrier before and after), and peak RSS (VmRSS sampled
every 2 ms by a thread) above the RSS before the phase (the most of the
reps, and each rep's, printed per rank); the bound it is
compared with is this rank's shards (weights + AdamW state, fp32) plus the
largest tensor. Prints one row per rank and side, and the ratios
flexplan / FSDP2 (medians over ranks). Not run by the tests (timings).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def trim():
    """give freed heap back to the OS, so that a phase's growth is its own"""
    import ctypes
    import gc
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class Peak:
    """peak RSS above the RSS at enter"""

    def __enter__(self):
        trim()
        self.base = self.peak = rss()
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        return self

    def _run(self):
        while not self.stop:
            self.peak = max(self.peak, rss())
            time.sleep(0.002)

    def __exit__(self, *exc):
        self.stop = True
        self.t.join()
        self.peak = max(self.peak, rss())
        self.extra = self.peak - self.base
        return False


def build(dim, layers, device):
    import torch
    from torch import nn
    with torch.device(device):
        return nn.Sequential(*[nn.Linear(dim, dim) for _ in range(layers)])


def fill_(t, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        t.copy_(torch.randn(t.shape, generator=g) * 0.02)


def one_step(model, opt, dim, rank):
    import torch
    x = torch.randn(4, dim, generator=torch.Generator().manual_seed(rank))
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()


def measure(phases, barrier, reps):
    out = {}
    for name, fn in phases:
        best_t, best_m = None, 0
        for _ in range(reps):
            barrier()
            with Peak() as pk:
                t0 = time.perf_counter()
                fn()
                barrier()
                dt = time.perf_counter() - t0
            best_t = dt if best_t is None else min(best_t, dt)
            best_m = max(best_m, pk.extra)
            out.setdefault(name + "_reps_mib", []).append(round(pk.extra / (1 << 20), 1))
        out[name + "_s"], out[name + "_rss_extra"] = best_t, best_m
    return out


def flexplan_rank(a):
    import torch
    torch.set_num_threads(1)
    import torch.distributed.checkpoint as dcp
    import flexplan
    import flexplan.torch as fpt
    from flexplan.torch import checkpoint as ck
    from flexplan.executor import mpi_init, mpi_finalize
    rank, world = mpi_init()
    model = build(a.dim, a.layers, "meta")
    units = [str(i) for i in range(a.layers)]
    mj = {"format": "flexplan.model.v1", "name": "bench", "modules": [
        {"name": u, "params": [{"name": f"{u}.weight", "shape": [a.dim, a.dim]}, {"name": f"{u}.bias",
                                                                                    "shape": [a.dim]}]}
        for u in units]}
    spec = {"format": "flexplan.spec.v1", "mesh": {"world_size": world}, "strategy": "full_shard"}
    plan = flexplan.compile(mj, spec)
    st = fpt.shard(model, plan, init=None)
    for i, mp in enumerate(st.main_params()):
        fill_(mp, 100 * rank + i)
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-3)
    one_step(model, opt, a.dim, rank)
    ck.init_process_group(st)
    import torch.distributed as dist
    path = os.path.join(a.dir, "flexplan")

    def save():
        dcp.save(fpt.state_dict(st, opt, copy=False), checkpoint_id=path)

    def load():
        sd = fpt.state_dict(st, opt)
        dcp.load(sd, checkpoint_id=path)
        fpt.load_state_dict(st, sd, opt)

    def load_in_place():
        ck.load_in_place(st, path, opt)

    res = measure((("save", save), ("load", load), ("load_in_place", load_in_place)), dist.barrier, a.reps)
    shards = sum(mp.numel() * 4 * 3 for mp in st.main_params())
    res.update(rank=rank, side="flexplan", shard_bytes=shards, largest=a.dim * a.dim * 4)
    with open(os.path.join(a.dir, f"flexplan.r{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()
    st.close()
    mpi_finalize()


def fsdp2_rank(rank, a, port):
    import torch
    torch.set_num_threads(1)
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.np)
    mesh = init_device_mesh("cpu", (a.np,))
    model = build(a.dim, a.layers, "meta")
    for m in model:
        fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    for i, p in enumerate(model.parameters()):
        fill_(p.to_local(), 100 * rank + i)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    one_step(model, opt, a.dim, rank)
    path = os.path.join(a.dir, "fsdp2")

    def save():
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)

    def load():
        msd, osd = get_state_dict(model, opt)
        sd = {"model": msd, "optim": osd}
        dcp.load(sd, checkpoint_id=path)
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])

    res = measure((("save", save), ("load", load)), dist.barrier, a.reps)
    shards = sum(p.to_local().numel() * 4 * 3 for p in model.parameters())
    res.update(rank=rank, side="fsdp2", shard_bytes=shards, largest=a.dim * a.dim * 4)
    with open(os.path.join(a.dir, f"fsdp2.r{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--role", default=None)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    if a.role == "flexplan":
        return flexplan_rank(a)
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as d:
        a.dir = d
        mpiexec = os.environ.get("FLEXPLAN_MPIEXEC") or "mpiexec"
        env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none", OMP_NUM_THREADS="1")
        cmd = [mpiexec, "-n", str(a.np), "--oversubscribe", "--allow-run-as-root", sys.executable, __file__,
               "--role", "flexplan", "--dir", d, "--layers", str(a.layers), "--dim", str(a.dim), "--reps",
               str(a.reps)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"flexplan run failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
        import torch.multiprocessing as mp
        mp.start_processes(fsdp2_rank, args=(a, free_port()), nprocs=a.np, join=True, start_method="spawn")
        rows = {}
        for side in ("flexplan", "fsdp2"):
            rows[side] = [json.load(open(os.path.join(d, f"{side}.r{r}.json"))) for r in range(a.np)]
        du = {s: sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(d, s)) for f in fs)
              for s in ("flexplan", "fsdp2")}
    params = a.layers * (a.dim * a.dim + a.dim)
    mb = 1 << 20
    print(f"model: {a.layers} x Linear({a.dim}, {a.dim}), {params:,} params, fp32 + AdamW state "
          f"{params * 12 / mb:.1f} MiB; {a.np} ranks; checkpoint on disk: flexplan {du['flexplan'] / mb:.1f} MiB, "
          f"FSDP2 {du['fsdp2'] / mb:.1f} MiB")
    print(f"{'side':9} {'rank':>4} {'save s':>8} {'load s':>8} {'inplace s':>9} {'save +RSS MiB':>14} "
          f"{'load +RSS MiB':>14} {'inplace +RSS':>12} {'bound MiB':>10}")
    for side, rs in rows.items():
        for r in rs:
            bound = r["shard_bytes"] + r["largest"]
            ip_s = f"{r['load_in_place_s']:9.3f}" if "load_in_place_s" in r else f"{'-':>9}"
            ip_m = f"{r['load_in_place_rss_extra'] / mb:12.1f}" if "load_in_place_s" in r else f"{'-':>12}"
            print(f"{side:9} {r['rank']:>4} {r['save_s']:8.3f} {r['load_s']:8.3f} {ip_s} "
                  f"{r['save_rss_extra'] / mb:14.1f} {r['load_rss_extra'] / mb:14.1f} {ip_m} {bound / mb:10.1f}")

    def med(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
    for k in ("save_s", "load_s", "save_rss_extra", "load_rss_extra"):
        f, g = med([r[k] for r in rows["flexplan"]]), med([r[k] for r in rows["fsdp2"]])
        print(f"ratio flexplan / FSDP2 {k:15}: {f / g if g else float('inf'):6.2f}  ({f:.4g} vs {g:.4g})")
    for k, fk in (("load_s", "load_in_place_s"), ("load_rss_extra", "load_in_place_rss_extra")):
        f, g = med([r[fk] for r in rows["flexplan"]]), med([r[k] for r in rows["fsdp2"]])
        print(f"ratio flexplan load_in_place / FSDP2 load {k:15}: {f / g if g else float('inf'):6.2f}  "
              f"({f:.4g} vs {g:.4g})")
    worst = max(max(r["save_rss_extra"], r["load_rss_extra"], r["load_in_place_rss_extra"]) /
                (r["shard_bytes"] + r["largest"]) for r in rows["flexplan"])
    print("RSS growth per repetition (MiB), per rank:")
    for side, rs in rows.items():
        for r in rs:
            reps = "  ".join(f"{k[:-9]} {r[k]}" for k in sorted(r) if k.endswith("_reps_mib"))
            print(f"  {side:9} {r['rank']:>4}  {reps}")
    print(f"flexplan: the most any rank's RSS grew in save or load, over its bound (shards + one tensor): "
          f"{worst:.2f}; the model is {params * 12 / max(r['shard_bytes'] + r['largest'] for r in rows['flexplan']):.1f}"
          f"x that bound")


if __name__ == "__main__":
    main()
