"""Real FSDP2 (torch.distributed.fsdp.fully_shard) on gloo, CPU: the peer
flexplan.torch is compared with.

    python fsdp2_runner.py --model mlp|llama --np N --out DIR [--steps 10] [--dtype fp16|bf16] [--replicas R]

spawns N processes (torch.multiprocessing, MASTER_ADDR=127.0.0.1), builds the
same model as the flexplan tests (torch_models: same seed, same data per
global micro-batch g = step*N + rank), applies fully_shard to every unit of
torch_models.{MLP,LLAMA_FSDP2}_UNITS and then to the root (with --dtype,
MixedPrecisionPolicy(param_dtype=reduce_dtype=that dtype); with --replicas
R, HSDP over a (R, N/R) mesh: shard groups of consecutive ranks), trains
with AdamW (same hyperparameters), and writes from rank 0 (a --dtype run's
names end in _<dtype>, an HSDP run's in _hsdp<R>):

- DIR/fsdp2_<model>_np<N>.safetensors: the final params (full tensors);
- DIR/fsdp2_<model>_np<N>.collectives.json: every collective rank 0 issued
  in step 1 (the steady state, after FSDP2's lazy init in step 0), in issue
  order, recorded by wrapping torch.distributed's collective functions:
  name, input and output element counts, dtype, reduce op, group size;
  and FSDP2's gradient divides (`_div_if_needed` of _fsdp_collectives.py,
  its pre/post divide around a SUM for fp16) as name "div" with the factor;
- DIR/fsdp2_<model>_np<N>.time.json: step times (bench/torch_bench.py).
"""
import argparse
import json
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import torch_models as tm  # noqa: E402

COLLECTIVES = ("all_gather_into_tensor", "all_gather_single", "reduce_scatter_tensor", "reduce_scatter_single",
               "all_reduce", "broadcast", "all_gather", "reduce_scatter", "reduce")


class Recorder:
    """Wraps torch.distributed's collective functions: records each call
    while `on` (rank 0), then forwards it."""

    def __init__(self):
        self.on = False
        self.calls = []
        self._orig = {}

    def install(self):
        for name in COLLECTIVES:
            f = getattr(dist, name, None)
            if f is None:
                continue
            self._orig[name] = f
            setattr(dist, name, self._wrap(name, f))
        from torch.distributed.fsdp._fully_shard import _fsdp_collectives as fc
        div = fc._div_if_needed

        def wrapped_div(tensor, div_factor):
            if self.on and div_factor is not None and div_factor != 1:  # the calls that divide
                self.calls.append({"name": "div", "numel": [int(tensor.numel())],
                                   "dtype": str(tensor.dtype).replace("torch.", ""), "op": None,
                                   "factor": float(div_factor), "group_size": None})
            return div(tensor, div_factor)
        fc._div_if_needed = wrapped_div

    def _wrap(self, name, f):
        def wrapped(*args, **kwargs):
            if self.on:
                tens = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
                op = kwargs.get("op")
                if op is None:
                    op = next((a for a in args if isinstance(a, dist.ReduceOp.RedOpType) or
                               type(a).__name__ in ("RedOpType", "ReduceOp")), None)
                group = kwargs.get("group")
                self.calls.append({
                    "name": name,
                    "numel": [int(t.numel()) for t in tens],
                    "dtype": str(tens[0].dtype).replace("torch.", "") if tens else None,
                    "op": (str(op).split(".")[-1].lower() if op is not None else
                           ("sum" if "reduce" in name else None)),
                    "group_size": dist.get_world_size(group) if group is not None else dist.get_world_size(),
                })
            return f(*args, **kwargs)
        return wrapped


def _worker(rank, world, port, kind, steps, out, mb_size, dtype=None, replicas=1, between=()):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    rec = Recorder()
    if rank == 0:
        rec.install()  # before fully_shard binds anything
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.device_mesh import init_device_mesh
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if replicas > 1:  # HSDP: shard over consecutive ranks, replicate across them
        mesh = init_device_mesh("cpu", (replicas, world // replicas), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))
    if kind in ("mixtral", "qwen2_moe"):
        model = tm.tiny_moe_lm(kind)
    else:
        model = tm.tiny_llama() if kind == "llama" else tm.mlp()
    units = tm.LLAMA_FSDP2_UNITS if kind in tm.LM_KINDS else tm.MLP_UNITS
    kw = {}
    if dtype:
        from torch.distributed.fsdp import MixedPrecisionPolicy
        dt = getattr(torch, {"fp16": "float16", "bf16": "bfloat16"}[dtype])
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=dt, reduce_dtype=dt)
    for u in units:
        fully_shard(model.get_submodule(u), mesh=mesh, **kw)
    fully_shard(model, mesh=mesh, **kw)
    opt = tm.adamw(model.parameters())
    times = []
    losses, evals = [], []
    if "eval" in between:
        evals.append(tm.evaluate(kind, model, -1, steps=steps))
    for step in range(steps):
        rec.on = step == 1
        dist.barrier()
        t0 = time.perf_counter()
        g = step * world + rank
        inp, tgt = tm.batch(kind, g, mb_size)
        loss = tm.loss_fn(kind, model, inp, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
        rec.on = False
        if between:
            lt = loss.detach().reshape(1).double()
            dist.all_reduce(lt)
            losses.append(float(lt) / world)
        if "eval" in between:  # evaluation between steps, as flexplan's parity configs
            evals.append(tm.evaluate(kind, model, step, steps=steps))
        if "unshard" in between and step == tm.UNSHARD_STEP:
            # the writes flexplan's tests make inside unshard(), on FSDP2's
            # sharded params (element-wise, each rank its shard)
            # the root keeps its params unsharded after a forward (no reshard
            # after forward): reshard every unit, so these are the sharded
            # params the optimizer steps (a write to an unsharded one would
            # reach the next forward only)
            from torch.distributed.fsdp import FSDPModule
            for m in model.modules():
                if isinstance(m, FSDPModule):
                    m.reshard()
            named = dict(model.named_parameters())
            with torch.no_grad():
                for n in tm.unshard_edits(kind):
                    named[n].copy_(tm.edit(n, named[n]))
    full = {}
    for n, p in model.named_parameters():
        full[n] = p.full_tensor().detach().clone() if hasattr(p, "full_tensor") else p.detach().clone()
    if rank == 0:
        from safetensors.torch import save_file
        base = os.path.join(out, name(kind, world, dtype, replicas))
        save_file({k: v.contiguous() for k, v in full.items()}, base + ".safetensors")
        with open(base + ".collectives.json", "w") as f:
            json.dump(rec.calls, f, indent=1)
        with open(base + ".time.json", "w") as f:
            json.dump(times, f)
        if between:
            with open(base + ".losses.json", "w") as f:
                json.dump({"loss": losses, "eval": evals}, f)
    dist.barrier()
    dist.destroy_process_group()
    # Leave without the interpreter's teardown: once in CI-like runs a spawned
    # rank died there with "terminate called without an active exception" (a
    # C++ thread of the gloo group still joinable when static destructors ran),
    # after every result had been written and every rank had passed the barrier.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def name(kind, world, dtype=None, replicas=1):
    """the base name of a run's outputs"""
    return f"fsdp2_{kind}_np{world}" + (f"_{dtype}" if dtype else "") + (f"_hsdp{replicas}" if replicas > 1 else "")


def run(kind, world, out, steps=10, mb_size=2, dtype=None, replicas=1, between=()):
    """between: "eval" (evaluation forwards after every step, torch_models.
    evaluate), "unshard" (torch_models' writes after step UNSHARD_STEP):
    rank 0 writes every step's loss (mean over ranks) and evaluation values
    to <base>.losses.json"""
    mp.start_processes(_worker, args=(world, free_port(), kind, steps, out, mb_size, dtype, replicas, tuple(between)),
                       nprocs=world,
                       join=True, start_method="spawn")
    return os.path.join(out, name(kind, world, dtype, replicas))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--mb-size", type=int, default=2)
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default=None)
    ap.add_argument("--replicas", type=int, default=1, help="HSDP: replicas of the shard group (2-D mesh)")
    a = ap.parse_args()
    print(run(a.model, a.np, a.out, a.steps, a.mb_size, a.dtype, a.replicas))


if __name__ == "__main__":
    main()
