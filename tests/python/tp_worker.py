"""One rank of an FSDP x TP run (test_torch_tp.py): a tiny Llama with
torchtitan's tensor-parallel plan (q/k/v/gate/up ColwiseParallel, o/down
RowwiseParallel) on a ("dp", "tp") DeviceMesh, trained three ways from the
same init and data:

- flexplan: describe() the parallelized module, compile it with
  "mesh": {"tp": T}, shard(module, plan, mesh=mesh), AdamW through
  flexplan.torch.optimizer, optional clip_grad_norm_;
- FSDP2 + TP: fully_shard(layer, mesh=mesh["dp"]) per decoder layer and on
  the root of the same parallelized module (torch's recipe);
- one process (rank 0 only): the unparallelized model on the whole batch.

usage: tp_worker.py DP TP DTYPE STEPS CLIP OUT [GA]
       tp_worker.py errors OUT          (2 ranks: describe() and shard()'s refusals)
  DTYPE fp32 | bf16 (param and reduce dtype of both sharded runs)
  CLIP  0 (none) or the max norm
  GA    micro-batches per step (default 1): each dp rank's batch split in GA
After the steps each run evaluates a batch under torch.no_grad() (flexplan:
an evaluation forward between steps, gathering what it reads).
Launched by mpiexec (the executor on MPI; gloo from MPI's env and
FP_MASTER_PORT) or by torchrun (gloo from torchrun's env). Rank 0 writes
OUT/tp_<dp>x<tp>_<dtype>.json: every step's loss of each run (the global
batch's mean: the dp groups' losses averaged), the grad norms, and the final
full weights' largest differences."""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

import flexplan
import flexplan.torch as fpt

VOCAB, HIDDEN, LAYERS, SEQ, HEADS, KV = 64, 64, 2, 8, 8, 4
BATCH = 4  # sequences per dp rank and step


def tiny_llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV, max_position_embeddings=64,
                      tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.uniform_(0.8, 1.2)
    return m


def tp_plan():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    plan = {}
    for i in range(LAYERS):
        a, f = f"model.layers.{i}.self_attn", f"model.layers.{i}.mlp"
        plan.update({f"{a}.q_proj": ColwiseParallel(), f"{a}.k_proj": ColwiseParallel(),
                     f"{a}.v_proj": ColwiseParallel(), f"{a}.o_proj": RowwiseParallel(),
                     f"{f}.gate_proj": ColwiseParallel(), f"{f}.up_proj": ColwiseParallel(),
                     f"{f}.down_proj": RowwiseParallel()})
    return plan


def batches(steps, dp):
    g = torch.Generator().manual_seed(1234)
    return [torch.randint(0, VOCAB, (dp * BATCH, SEQ), generator=g) for _ in range(steps)]


def lm_loss(model, ids):
    logits = model(input_ids=ids).logits
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB).float(), ids[:, 1:].reshape(-1))


def init_dist():
    if dist.is_initialized():
        return
    if "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "OMPI_COMM_WORLD_RANK" not in os.environ):
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
        return
    rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = os.environ["FP_MASTER_PORT"]
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))


def mean_over_dp(x, dp_group):
    t = torch.tensor([float(x)], dtype=torch.float64)
    dist.all_reduce(t, group=dp_group)
    return float(t) / dist.get_world_size(dp_group)


def full_weights(module):
    """{name: full fp32 tensor} of a module whose params may be DTensors"""
    out = {}
    for n, p in module.named_parameters():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[n] = t.detach().float().clone()
    return out


def micro(ids, ga):
    n = ids.shape[0] // ga
    return [ids[i * n:(i + 1) * n] for i in range(ga)]


def evaluate(m, ids):
    with torch.no_grad():
        return m(input_ids=ids).logits.float().clone()


def run_fsdp2(dp, tp, mesh, data, dtype, steps, clip, ga):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor.parallel import parallelize_module
    m = tiny_llama()
    if tp > 1:
        parallelize_module(m, mesh["tp"], tp_plan())
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype) if dtype != torch.float32 else MixedPrecisionPolicy()
    for layer in m.model.layers:
        fully_shard(layer, mesh=mesh["dp"], mp_policy=mp)
    fully_shard(m, mesh=mesh["dp"], mp_policy=mp)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)
    dpi = dist.get_rank() // tp
    losses, norms = [], []
    for s in range(steps):
        total = 0.0
        for ids in micro(data[s][dpi * BATCH:(dpi + 1) * BATCH], ga):
            loss = lm_loss(m, ids)
            (loss / ga).backward()  # FSDP2 leaves the micro-batch mean to the trainer
            total += float(loss) / ga
        if clip:
            norms.append(float(_fsdp2_clip(m, clip)))
        opt.step()
        opt.zero_grad()
        losses.append(total)
    return losses, norms, full_weights(m), evaluate(m, data[0][:BATCH])


def _fsdp2_clip(m, clip):
    """clip_grad_norm_ over FSDP2 + TP's grads, as torchtitan computes it
    (torch's own refuses grads on two meshes: the 2-D one of the tp-sharded
    params and the dp one of the norms): the global norm of the whole grads,
    then every grad scaled by min(1, clip / (norm + 1e-6))"""
    gs = [p.grad for p in m.parameters() if p.grad is not None]
    total = torch.zeros((), dtype=torch.float64)
    for g in gs:
        full = g.full_tensor() if hasattr(g, "full_tensor") else g
        total += full.double().pow(2).sum()
    total = float(total.sqrt())
    coef = min(clip / (total + 1e-6), 1.0)
    with torch.no_grad():
        for g in gs:
            g.mul_(coef)
    return total


def run_flexplan(dp, tp, mesh, data, dtype, steps, clip, ga):
    from torch.distributed.tensor.parallel import parallelize_module
    m = tiny_llama()
    if tp > 1:
        parallelize_module(m, mesh["tp"], tp_plan())
    model = fpt.describe(m, (data[0][:BATCH],))
    dn = {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]
    spec = {"format": "flexplan.spec.v1", "mesh": {"world_size": dp * tp, "ranks_per_node": dp * tp, "tp": tp},
            "defaults": {"mixed_precision": {"param_dtype": dn, "reduce_dtype": dn, "main_grad_dtype": "fp32"}},
            "grad_accumulation": ga}
    plan = flexplan.compile(model, spec)
    st = fpt.shard(m, plan, mesh=mesh if tp > 1 else None)
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-2, weight_decay=0.01)
    dpi = dist.get_rank() // tp
    losses, norms = [], []
    for s in range(steps):
        total = 0.0
        for ids in micro(data[s][dpi * BATCH:(dpi + 1) * BATCH], ga):
            loss = lm_loss(m, ids)
            loss.backward()  # the plan divides by the micro-batches
            total += float(loss) / ga
        if clip:
            norms.append(float(fpt.clip_grad_norm_(st, clip)))
        opt.step()
        losses.append(total)
    full = st.full_state_dict(torch.float32)
    return losses, norms, full, st, evaluate(m, data[0][:BATCH])


def run_single(data, steps, clip, dp):
    m = tiny_llama()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)
    losses, norms = [], []
    for s in range(steps):
        loss = lm_loss(m, data[s])
        loss.backward()
        if clip:
            norms.append(float(torch.nn.utils.clip_grad_norm_(m.parameters(), clip)))
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    return losses, norms, {n: p.detach().float().clone() for n, p in m.named_parameters()}


def maxdiff(a, b, atol=1e-5, rtol=1e-5):
    """(the largest |a - b| / (atol + rtol |b|) over every element of every
    param: <= 1 is within the tolerance; the param where it is largest)"""
    worst = (0.0, "")
    for n in a:
        d = float(((a[n] - b[n]).abs() / (atol + rtol * b[n].abs())).max())
        if d > worst[0]:
            worst = (d, n)
    return worst


def errors(out):
    """2 ranks as dp 1 x tp 2: describe() of the parallelized module against
    the unparallelized one, and each refusal of shard() (rank 0 writes
    OUT/tp_errors.json: {case: message})"""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, SequenceParallel, parallelize_module
    init_dist()
    mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
    ids = batches(1, 1)[0][:2]
    rec = {}
    plain = fpt.describe(tiny_llama(), (ids,))
    m = tiny_llama()
    parallelize_module(m, mesh["tp"], tp_plan())
    par = fpt.describe(m, (ids,))
    rec["describe_plain"], rec["describe_tp"] = plain, par
    spec = {"format": "flexplan.spec.v1", "mesh": {"world_size": 2, "tp": 2},
            "defaults": {"mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "fp32", "main_grad_dtype": "fp32"}}}
    plan = flexplan.compile(par, spec)

    def attempt(case, fn):
        try:
            st = fn()
        except flexplan.FlexplanError as e:
            rec[case] = str(e)
        else:
            rec[case] = None
            st.close()
    attempt("plain_module", lambda: fpt.shard(tiny_llama(), plan))  # not parallelized
    attempt("mesh_4", lambda: fpt.shard(m, flexplan.compile(par, dict(spec, mesh={"world_size": 4, "tp": 4}))))
    colwise_all = tiny_llama()
    tpp = tp_plan()
    tpp.update({k: ColwiseParallel() for k in tpp if k.endswith("o_proj")})
    parallelize_module(colwise_all, mesh["tp"], tpp)
    attempt("placement", lambda: fpt.shard(colwise_all, plan))
    sp = tiny_llama()
    parallelize_module(sp, mesh["tp"], dict(tp_plan(), **{"model.norm": SequenceParallel()}))
    attempt("sequence_parallel", lambda: fpt.shard(sp, plan))
    attempt("mesh_arg", lambda: fpt.shard(tiny_llama_tp(mesh), plan, mesh=init_device_mesh("cpu", (2,))))
    attempt("init_files", lambda: fpt.shard(tiny_llama_tp(mesh), plan, init=[os.path.join(out, "none.safetensors")]))
    st = fpt.shard(tiny_llama_tp(mesh), plan, mesh=mesh)  # the 2-D mesh passed: accepted
    try:
        st.load(os.path.join(out, "none.safetensors"))
    except flexplan.FlexplanError as e:
        rec["load_files"] = str(e)
    # FSDP2's habit after a backward: torch's clip over the module's DTensor grads raises at its first
    # touch of a grad (the plan reuses those bytes), naming flexplan.torch.clip_grad_norm_
    lm_loss(st.module, ids).backward()
    try:
        torch.nn.utils.clip_grad_norm_(st.module.parameters(), 1.0)
        rec["torch_clip"] = None
    except flexplan.FlexplanError as e:
        rec["torch_clip"] = str(e)
    name = "model.layers.0.self_attn.q_proj.weight"
    view = st.params[name][0]
    try:  # a tensor-parallel param's DTensor grad, read directly
        float(view.grad.to_local().abs().sum())
        rec["tp_grad_use"] = None
    except flexplan.FlexplanError as e:
        rec["tp_grad_use"] = str(e)
    st.close()
    # after close() no DTensor view or grad keeps the freed arena's bytes
    rec["closed_local_numel"] = [view._local_tensor.numel(), view.grad._local_tensor.numel() if view.grad is not None
                                 else 0]
    if dist.get_rank() == 0:
        with open(os.path.join(out, "tp_errors.json"), "w") as f:
            json.dump(rec, f)
    dist.barrier()
    dist.destroy_process_group()
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        from flexplan.executor import mpi_finalize
        mpi_finalize()


def tiny_llama_tp(mesh):
    from torch.distributed.tensor.parallel import parallelize_module
    m = tiny_llama()
    parallelize_module(m, mesh["tp"], tp_plan())
    return m


def main():
    if sys.argv[1] == "errors":
        errors(sys.argv[2])
        return
    dp, tp, dt, steps, clip, out = sys.argv[1:7]
    ga = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    dp, tp, steps, clip = int(dp), int(tp), int(steps), float(clip)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dt]
    init_dist()
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    data = batches(steps, dp)
    dp_group = mesh["dp"].get_group()
    fl, fn, fw, st, fe = run_flexplan(dp, tp, mesh, data, dtype, steps, clip, ga)
    fl = [mean_over_dp(x, dp_group) for x in fl]
    sl, sn, sw, se = run_fsdp2(dp, tp, mesh, data, dtype, steps, clip, ga)
    sl = [mean_over_dp(x, dp_group) for x in sl]
    rec = {"dp": dp, "tp": tp, "dtype": dt, "ga": ga, "backend": st.backend, "flexplan_losses": fl, "fsdp2_losses": sl,
           "flexplan_norms": fn, "fsdp2_norms": sn,
           "eval_vs_fsdp2": float(((fe - se).abs() / (1e-5 + 1e-5 * se.abs())).max())}
    if dist.get_rank() == 0:
        rl, rn, rw = run_single(data, steps, clip, dp)
        rec.update(single_losses=rl, single_norms=rn,
                   weights_vs_fsdp2=maxdiff(fw, sw),
                   # AdamW amplifies rounding differences of the grads over the steps (test_torch_fsdp2's
                   # tolerance against one process)
                   weights_vs_single=maxdiff(fw, rw, 1e-4, 1e-3), fsdp2_vs_single=maxdiff(sw, rw, 1e-4, 1e-3))
        with open(os.path.join(out, f"tp_{dp}x{tp}_{dt}_ga{ga}.json"), "w") as f:
            json.dump(rec, f)
    st.close()
    dist.barrier()
    dist.destroy_process_group()
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        from flexplan.executor import mpi_finalize
        mpi_finalize()


if __name__ == "__main__":
    main()
