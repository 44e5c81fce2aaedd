#!/usr/bin/env python3
"""flexplan.torch (MPI backend) against FSDP2 (fully_shard on gloo): step
time of the same model on 2 CPU ranks, one thread each.

    PYTHONPATH=python FLEXPLAN_LIBRARY=build/libflexplan.so \\
        .venv/bin/python bench/torch_bench.py [--reps 5] [--steps 12] [--np 2]

The model is a tiny Llama with tied embeddings (transformers LlamaConfig;
--hidden, --layers, --seq, --batch), units: every decoder layer, and the
rest in a root unit for FSDP2 / describe()'s default units for flexplan,
full_shard, fp32, AdamW. Each repetition runs both, one after the other
(interleaved, so a change in the machine's load hits both), each as a fresh
job of --np processes: flexplan under mpiexec, FSDP2 spawned by
torch.multiprocessing with gloo on 127.0.0.1. A job's step time is the
median of its steps after --warmup; the figure is the median over
repetitions. Printed: both medians, their ratio (flexplan / FSDP2; < 1:
flexplan faster), and flexplan's host time per hook (Python layer and the
executor; the executor's share measured in C by the hook driver around
fp_exec_hook, the callbacks in Python, both with the monotonic clock read
without a system call: run it on an idle machine, a descheduled rank counts
as busy), from shard(..., profile=True), with the Python callbacks a step
makes.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def model(a):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=256, hidden_size=a.hidden, intermediate_size=3 * a.hidden,
                      num_hidden_layers=a.layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=a.seq, tie_word_embeddings=True, attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def batch(a, g):
    import torch
    gen = torch.Generator().manual_seed(g)
    ids = torch.randint(0, 256, (a.batch, a.seq + 1), generator=gen)
    return ids[:, :-1], ids[:, 1:]


def train_steps(a, m, opt, rank, world, sync, after_step=None):
    import torch
    times = []
    cpu = getattr(a, "cpu_times", None)
    for step in range(a.steps):
        sync()
        t0 = time.perf_counter()
        c0 = time.thread_time()
        x, y = batch(a, step * world + rank)
        logits = m(input_ids=x).logits
        torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1)).backward()
        opt.step()
        opt.zero_grad()
        if after_step:
            after_step()
        times.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(time.thread_time() - c0)
    if cpu is not None:
        del cpu[:a.warmup]
    return times[a.warmup:]


def worker_flexplan(a):
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import flexplan
    import flexplan.torch as fpt
    from flexplan.executor import mpi_init, mpi_finalize
    rank, world = mpi_init()
    m = model(a)
    desc = fpt.describe(m, (torch.zeros(a.batch, a.seq, dtype=torch.long),), name="bench")
    spec = {"format": "flexplan.spec.v1", "mesh": {"world_size": world}, "strategy": "full_shard",
            "defaults": {"mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "fp32",
                                             "main_grad_dtype": "fp32"}}}
    plan = flexplan.compile(desc, spec)
    st = fpt.shard(m, plan, progress=a.progress, profile=True)
    if a.worker == "flexplan_compiled":
        # regional compilation (docs/torch.md): each decoder layer's forward,
        # flexplan's module hooks outside the compiled code
        for layer in m.model.layers:
            layer.forward = torch.compile(layer.forward, backend=a.backend)
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-3)
    a.cpu_times = []
    times = train_steps(a, m, opt, rank, world, lambda: st.ex.all_reduce_f64([0.0]))
    prof = st.hook_profile()
    steps = a.steps
    st.close()
    plan.close()
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"times": times, "cpu": a.cpu_times, "profile": prof, "steps": steps}, f)
    mpi_finalize()


def _fsdp2_proc(rank, a, port):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.device_mesh import init_device_mesh
    dist.init_process_group("gloo", rank=rank, world_size=a.np)
    mesh = init_device_mesh("cpu", (a.np,))
    m = model(a)
    for layer in m.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    times = train_steps(a, m, opt, rank, a.np, dist.barrier)
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"times": times}, f)
    dist.barrier()
    dist.destroy_process_group()


def worker_fsdp2(a):
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_fsdp2_proc, args=(a, port), nprocs=a.np, join=True, start_method="spawn")


def run_job(a, which, out):
    args = [f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items()
            if k in ("hidden", "layers", "seq", "batch", "steps", "warmup", "np", "progress", "backend")]
    me = [sys.executable, os.path.abspath(__file__), f"--worker={which}", f"--out={out}", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_btl_vader_single_copy_mechanism="none",
               PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if which.startswith("flexplan"):
        mpiexec = os.environ.get("FLEXPLAN_MPIEXEC") or shutil.which("mpiexec")
        cmd = [mpiexec, "-n", str(a.np), "--oversubscribe", "--allow-run-as-root", *me]
    else:
        cmd = me
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{which} job failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--progress", default="default", choices=["default", "poll", "thread"])
    ap.add_argument("--compile", action="store_true",
                    help="flexplan.torch eager against flexplan.torch with each decoder layer's forward "
                         "torch.compile'd (instead of against FSDP2); raise --warmup past the compilation")
    ap.add_argument("--backend", default="inductor", help="torch.compile backend for --compile")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker in ("flexplan", "flexplan_compiled"):
        return worker_flexplan(a)
    if a.compile:
        return main_compile(a)
    if a.worker == "fsdp2":
        return worker_fsdp2(a)
    med = {"flexplan": [], "fsdp2": []}
    profs = []
    with tempfile.TemporaryDirectory(prefix="torch-bench-") as d:
        for rep in range(a.reps):
            for which in ("flexplan", "fsdp2") if rep % 2 == 0 else ("fsdp2", "flexplan"):
                res = run_job(a, which, os.path.join(d, f"{which}.{rep}.json"))
                med[which].append(statistics.median(res["times"]))
                if which == "flexplan":
                    profs.append(dict(res["profile"], steps=res["steps"]))
            print(f"rep {rep}: flexplan {med['flexplan'][-1] * 1e3:.2f} ms/step, "
                  f"fsdp2 {med['fsdp2'][-1] * 1e3:.2f} ms/step", flush=True)
    f, g = statistics.median(med["flexplan"]), statistics.median(med["fsdp2"])
    py = statistics.median(p["python_us_per_hook"] for p in profs)
    ex = statistics.median(p["exec_us_per_hook"] for p in profs)
    hooks = profs[0]["hooks"] / profs[0]["steps"] if profs else 0
    callbacks = profs[0]["callbacks"] / profs[0]["steps"] if profs else 0
    print(f"model: tiny Llama hidden {a.hidden}, {a.layers} layers, seq {a.seq}, batch {a.batch}/rank, "
          f"{a.np} ranks x 1 thread, full_shard fp32, AdamW; {a.reps} interleaved reps x "
          f"{a.steps - a.warmup} timed steps")
    print(f"step time median: flexplan.torch (MPI) {f * 1e3:.2f} ms, FSDP2 (gloo) {g * 1e3:.2f} ms")
    print(f"ratio flexplan / fsdp2: {f / g:.3f}")
    print(f"flexplan Python callbacks per step: {callbacks:.0f} (module and autograd hooks) for {hooks:.0f} plan hooks")
    print(f"flexplan host time per hook: {py:.1f} us in the Python layer, {ex:.1f} us in fp_exec_hook "
          f"(its waits included); {hooks:.0f} hooks per step = {hooks * (py + ex) / 1e3:.2f} ms/step "
          f"({100 * hooks * (py + ex) / 1e6 / f:.1f}% of the step)")


def main_compile(a):
    """--compile: eager against regionally compiled, interleaved."""
    med = {"flexplan": [], "flexplan_compiled": []}
    cpu = {"flexplan": [], "flexplan_compiled": []}
    with tempfile.TemporaryDirectory(prefix="torch-bench-") as d:
        for rep in range(a.reps):
            order = ("flexplan", "flexplan_compiled") if rep % 2 == 0 else ("flexplan_compiled", "flexplan")
            for which in order:
                res = run_job(a, which, os.path.join(d, f"{which}.{rep}.json"))
                med[which].append(statistics.median(res["times"]))
                cpu[which].append(statistics.median(res["cpu"]))
            print(f"rep {rep}: eager {med['flexplan'][-1] * 1e3:.2f} ms/step ({cpu['flexplan'][-1] * 1e3:.2f} ms "
                  f"CPU), compiled {med['flexplan_compiled'][-1] * 1e3:.2f} ms/step "
                  f"({cpu['flexplan_compiled'][-1] * 1e3:.2f} ms CPU)", flush=True)
    e, c = statistics.median(med["flexplan"]), statistics.median(med["flexplan_compiled"])
    ec, cc = statistics.median(cpu["flexplan"]), statistics.median(cpu["flexplan_compiled"])
    print(f"rank 0's CPU time per step (time.thread_time: what a shared machine's load does not inflate): "
          f"eager {ec * 1e3:.2f} ms, compiled {cc * 1e3:.2f} ms, ratio {cc / ec:.3f}")
    print(f"model: tiny Llama hidden {a.hidden}, {a.layers} layers, seq {a.seq}, batch {a.batch}/rank, "
          f"{a.np} ranks x 1 thread, full_shard fp32, AdamW; {a.reps} interleaved reps x "
          f"{a.steps - a.warmup} timed steps after {a.warmup} (compilation)")
    print(f"step time median: flexplan.torch eager {e * 1e3:.2f} ms, each decoder layer's forward compiled "
          f"({a.backend}) {c * 1e3:.2f} ms")
    print(f"ratio compiled / eager: {c / e:.3f} (speed-up {e / c:.2f}x)")


if __name__ == "__main__":
    main()
