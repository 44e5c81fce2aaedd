"""Real FSDP2 (fully_shard on gloo, CPU) beside flexplan.torch's DCP
checkpoints (tests/python/test_torch_checkpoint.py):

    run("save", N, DIR, model)  FSDP2 trains the model STEPS steps on N ranks
        (ckpt_worker's data: one global batch per step, sliced by rank),
        get_state_dict + dcp.save({"model", "optim"}) into DIR/fsdp2_<model>;
        rank 0 writes DIR/fsdp2_<model>.ref.pt: the full weights, AdamW state
        and step (get_state_dict with full_state_dict=True), in ckpt_worker's
        snapshot format;
    run("load", N, DIR, model, src)  a fresh FSDP2 model and AdamW on N ranks
        load DIR/<src> (saved by flexplan.torch) with get_state_dict +
        dcp.load + set_state_dict; rank 0 checks the full state equals
        DIR/<src>.ref.pt bit for bit and writes DIR/<src>.fsdp2_ok.
"""
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import torch_models as tm  # noqa: E402

STEPS, GLOBAL = 2, 12


def _full(model, opt):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if "state" not in osd:  # full_state_dict with cpu_offload: rank 0 only
        return None
    snap = {"main": {k: v.detach().clone() for k, v in msd.items()}, "exp_avg": {}, "exp_avg_sq": {}}
    steps = set()
    for k, s in osd["state"].items():
        snap["exp_avg"][k] = s["exp_avg"].detach().clone()
        snap["exp_avg_sq"][k] = s["exp_avg_sq"].detach().clone()
        steps.add(float(s["step"]))
    snap["step"] = sorted(steps)
    return snap


def _worker(rank, world, port, mode, d, kind, src):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    mesh = init_device_mesh("cpu", (world,))
    model = tm.tiny_llama() if kind == "llama" else tm.mlp()
    for u in (tm.LLAMA_FSDP2_UNITS if kind == "llama" else tm.MLP_UNITS):
        fully_shard(model.get_submodule(u), mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = tm.adamw(model.parameters())
    ok = True
    if mode == "save":
        for step in range(STEPS):
            inp, tgt = tm.batch(kind, step, mb_size=GLOBAL)
            k = GLOBAL // world
            loss = tm.loss_fn(kind, model, inp[rank * k:(rank + 1) * k], tgt[rank * k:(rank + 1) * k])
            loss.backward()
            opt.step()
            opt.zero_grad()
        msd, osd = get_state_dict(model, opt)
        path = os.path.join(d, f"fsdp2_{kind}")
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
        snap = _full(model, opt)
        if rank == 0:
            torch.save(snap, path + ".ref.pt")
    else:
        path = os.path.join(d, src)
        msd, osd = get_state_dict(model, opt)
        sd = {"model": msd, "optim": osd}
        dcp.load(sd, checkpoint_id=path)
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        snap = _full(model, opt)
        if rank == 0:
            ref = torch.load(path + ".ref.pt")
            from ckpt_worker import same
            why = same(ref, snap)
            if why:
                print(f"FAIL fsdp2 load {src}: {why}", flush=True)
                ok = False
            else:
                with open(path + ".fsdp2_ok", "w") as f:
                    f.write("ok\n")
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if ok else 1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(mode, world, d, kind="mlp", src=None):
    mp.start_processes(_worker, args=(world, free_port(), mode, d, kind, src), nprocs=world, join=True,
                       start_method="spawn")


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), sys.argv[3], *sys.argv[4:])
