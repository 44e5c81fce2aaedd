"""One rank of the FSDP x TP checkpoint round trips (test_torch_tp.py):
torch.distributed.checkpoint between flexplan and FSDP2 + TP across meshes.

usage: tp_ckpt_worker.py save DIR          (4 ranks as dp 2 x tp 2)
       tp_ckpt_worker.py load DP TP DIR    (4 ranks as DP x TP)

save: flexplan and FSDP2 + TP each train STEPS steps of the tiny Llama of
tp_worker.py (torchtitan's TP plan), save model + AdamW state with dcp.save
(DIR/flexplan, DIR/fsdp2), then train one more step; rank 0 keeps the full
weights at the save and after that step (DIR/*.pt) and the step's loss.

load: on the DP x TP mesh, three loads, each followed by the same one step:
flexplan from flexplan's checkpoint, flexplan from FSDP2's, FSDP2 + TP from
flexplan's. Rank 0 writes DIR/load_<dp>x<tp>.json: for each load the largest
difference of the loaded full weights from the saver's (must be exactly 0)
and of the weights and loss after the step from the saver's own next step
(the same global batch of 8 sequences on every mesh: within fp32
tolerance, the optimizer state came along)."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import flexplan
import flexplan.torch as fpt
import tp_worker as tw

GLOBAL_BATCH, STEPS = 8, 3


def data():
    g = torch.Generator().manual_seed(99)
    return [torch.randint(0, tw.VOCAB, (GLOBAL_BATCH, tw.SEQ), generator=g) for _ in range(STEPS + 1)]


def my_batch(ids, dp, tp):
    per = GLOBAL_BATCH // dp
    i = dist.get_rank() // tp
    return ids[i * per:(i + 1) * per]


def mean_loss(loss, mesh):
    return tw.mean_over_dp(float(loss), mesh["dp"].get_group())


def model(mesh, tp):
    m = tw.tiny_llama()
    if tp > 1:
        from torch.distributed.tensor.parallel import parallelize_module
        parallelize_module(m, mesh["tp"], tw.tp_plan())
    return m


def flexplan_run(mesh, dp, tp):
    m = model(mesh, tp)
    ids = data()
    spec = {"format": "flexplan.spec.v1", "mesh": {"world_size": dp * tp, "ranks_per_node": dp * tp, "tp": tp},
            "defaults": {"mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "fp32",
                                             "main_grad_dtype": "fp32"}}}
    plan = flexplan.compile(fpt.describe(m, (ids[0][:2],)), spec)
    st = fpt.shard(m, plan, mesh=mesh if tp > 1 else None)
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-2, weight_decay=0.01)

    def step(s):
        loss = tw.lm_loss(m, my_batch(ids[s], dp, tp))
        loss.backward()
        opt.step()
        return mean_loss(loss, mesh)
    return st, opt, step, lambda: st.full_state_dict(torch.float32)


def fsdp2_run(mesh, dp, tp):
    from torch.distributed.fsdp import fully_shard
    m = model(mesh, tp)
    for layer in m.model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(m, mesh=mesh["dp"])
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)
    ids = data()

    def step(s):
        loss = tw.lm_loss(m, my_batch(ids[s], dp, tp))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return mean_loss(loss, mesh)
    return m, opt, step, lambda: tw.full_weights(m)


def fsdp2_state(m, opt):
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
    return {"model": get_model_state_dict(m), "optim": get_optimizer_state_dict(m, opt)}


def fsdp2_load(m, opt, path):
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict
    sd = fsdp2_state(m, opt)
    dcp.load(sd, checkpoint_id=path)
    set_model_state_dict(m, sd["model"])
    set_optimizer_state_dict(m, opt, sd["optim"])


def save(d):
    mesh = init(2, 2)
    st, opt, step, full = flexplan_run(mesh, 2, 2)
    for s in range(STEPS):
        step(s)
    dcp.save(fpt.state_dict(st, opt), checkpoint_id=os.path.join(d, "flexplan"))
    keep = {"flexplan_saved": full()}
    loss = step(STEPS)
    keep["flexplan_next"], keep["flexplan_next_loss"] = full(), loss
    st.close()
    m, opt, step, full = fsdp2_run(mesh, 2, 2)
    for s in range(STEPS):
        step(s)
    dcp.save(fsdp2_state(m, opt), checkpoint_id=os.path.join(d, "fsdp2"))
    keep["fsdp2_saved"] = full()
    loss = step(STEPS)
    keep["fsdp2_next"], keep["fsdp2_next_loss"] = full(), loss
    if dist.get_rank() == 0:
        torch.save(keep, os.path.join(d, "saved.pt"))


def load(dp, tp, d):
    mesh = init(dp, tp)
    ref = torch.load(os.path.join(d, "saved.pt"))
    out = {}
    for name, src in (("flexplan_from_flexplan", "flexplan"), ("flexplan_from_fsdp2", "fsdp2")):
        st, opt, step, full = flexplan_run(mesh, dp, tp)
        sd = fpt.state_dict(st, opt)
        dcp.load(sd, checkpoint_id=os.path.join(d, src))
        fpt.load_state_dict(st, sd, opt)
        out[name] = result(ref, src, full(), step, full)
        st.close()
    m, opt, step, full = fsdp2_run(mesh, dp, tp)
    fsdp2_load(m, opt, os.path.join(d, "flexplan"))
    out["fsdp2_from_flexplan"] = result(ref, "flexplan", full(), step, full)
    if dist.get_rank() == 0:
        with open(os.path.join(d, f"load_{dp}x{tp}.json"), "w") as f:
            json.dump(out, f)


def result(ref, src, loaded, step, full):
    loss = step(STEPS)
    after = full()
    exact = max(float((loaded[n] - ref[src + "_saved"][n]).abs().max()) for n in loaded)
    return {"loaded_vs_saved": exact,
            "next_vs_saver": tw.maxdiff(after, ref[src + "_next"]) if dist.get_rank() == 0 else None,
            "next_loss": loss, "saver_next_loss": ref[src + "_next_loss"]}


def init(dp, tp):
    tw.init_dist()
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))


def main():
    if sys.argv[1] == "save":
        save(sys.argv[2])
    else:
        load(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    dist.barrier()
    dist.destroy_process_group()
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        from flexplan.executor import mpi_finalize
        mpi_finalize()


if __name__ == "__main__":
    main()
