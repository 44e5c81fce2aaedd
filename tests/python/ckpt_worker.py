"""MPI worker for tests/python/test_torch_checkpoint.py (flexplan.torch's
DCP checkpoints): ``mpirun -n N python ckpt_worker.py PHASE DIR CONFIG...``;
also under ``torchrun --nproc-per-node N`` (torch.distributed on gloo from
the launch, flexplan.torch's "torch" backend, no MPI: test_torchrun.py).
Every rank runs every config; rank 0 prints ``PASS name ...`` or
``FAIL name why`` per config; exit status 1 when any failed.

PHASE save: train STEPS steps on the config's "save" plan (this world
size), torch.distributed.checkpoint.save(flexplan.torch.state_dict(st, opt))
into DIR/<name>; rank 0 writes DIR/<name>.ref.pt, the full tensors gathered
from the arena (main weights, optimizer state, step), independent of the
checkpoint; then MORE further steps, whose losses (averaged over ranks) go
to DIR/<name>.losses.json (the uninterrupted run). Before the save it also
checks the round trip on this rank count: perturb every shard and every
optimizer state, dcp.load + load_state_dict, compare bit for bit.

PHASE load: the config's "load" plan (this world size: another world size,
strategy, buckets, placements), a fresh module and optimizer, dcp.load +
load_state_dict from DIR/<name>; the gathered main weights, optimizer state
and step equal DIR/<name>.ref.pt bit for bit; the compute weights equal the
main weights cast; then MORE steps whose losses match the uninterrupted
run's (tolerance: the sum order of a different rank count).
"""
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

torch.set_num_threads(1)

import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import flexplan.torch as fpt  # noqa: E402
from flexplan import FlexplanError  # noqa: E402
from flexplan.executor import mpi_init, mpi_finalize  # noqa: E402
from flexplan.torch import checkpoint as ck  # noqa: E402

import torch_models as tm  # noqa: E402
from torch_worker import compile_plan, describe_model, spec_for  # noqa: E402

STEPS, MORE = 2, 2
GLOBAL = 12  # samples per step: divisible by 1 to 4 ranks
RAGGED = {"name": "l0", "params": ["layers.0.*"], "placement": {"kind": "ragged_shard", "units": "R",
                                                                  "align_elems": 4}}
PLACEMENTS = [RAGGED,
              {"name": "l1", "params": ["layers.1.*"], "placement": {"kind": "owned", "rank": "auto"}},
              {"name": "l2", "params": ["layers.2.weight"], "placement": {"kind": "shard", "dim": 1}},
              {"name": "l3", "params": ["layers.3.*"], "placement": {"kind": "replicate"}}]
PER_MODULE = [{"name": "pm", "params": ["*"], "split": "per_module"}]

# name: model, optimizer, bf16 params, (strategy, extra) to save with, (strategy, extra) to load with
CONFIGS = {
    "mlp_adamw": ("mlp", "adamw", False, ("full_shard", {}), ("full_shard", {"buckets": PLACEMENTS})),
    "mlp_sgd": ("mlp", "sgd", False, ("full_shard", {"buckets": PLACEMENTS}), ("shard_grad_op", {})),
    "mlp_bf16": ("mlp", "adamw", True, ("full_shard", {}), ("no_shard", {})),
    # per-param collectives: each param sharded on its own (FSDP2's layout), no flat bucket
    "llama_adamw": ("llama", "adamw", False, ("full_shard", {}), ("full_shard", {"collectives": "per_param"})),
    "mlp_per_param": ("mlp", "adamw", False, ("full_shard", {"collectives": "per_param"}),
                      ("full_shard", {"buckets": PER_MODULE})),
    "llama_hybrid": ("llama", "adamw", False, ("full_shard", {}),
                     ("hybrid_shard", {"hybrid_shard": {"intra_node_size": 2}, "mesh": {"ranks_per_node": 2}})),
}


def make(name, which, rank, world, d):
    kind, optk, bf16, save, load = CONFIGS[name]
    strategy, extra = save if which == "save" else load
    model = tm.tiny_llama() if kind == "llama" else tm.mlp()
    if bf16:
        model = model.to(torch.bfloat16)
    mj = describe_model(kind, model, [])
    extra = dict(extra)
    if optk == "sgd":
        extra["optimizer"] = {"type": "sgd"}
    elif bf16:
        extra["optimizer"] = {"type": "adamw", "state_dtype": "bf16"}
    if strategy == "hybrid_shard" and world % 2:
        strategy, extra = "full_shard", {k: v for k, v in extra.items() if k not in ("hybrid_shard", "mesh")}
    if world == 1 and "buckets" in extra and extra["buckets"] is PLACEMENTS:
        extra = {k: v for k, v in extra.items() if k != "buckets"}
    coll = extra.pop("collectives", None)
    spec = spec_for(strategy, extra, world, {"kind": kind})
    if coll:
        spec["defaults"]["collectives"] = coll
    if bf16:  # bf16 main weights: compute, grads and optimizer state in bf16 too
        spec["defaults"]["mixed_precision"] = {"param_dtype": "bf16", "reduce_dtype": "bf16",
                                               "main_grad_dtype": "bf16"}
    plan = compile_plan(mj, spec, os.path.join(d, f"{name}.{which}.np{world}.r{rank}.plan.json"))
    st = fpt.shard(model, plan)
    opt = fpt.optimizer(st, tm.sgd_momentum if optk == "sgd" else tm.adamw)
    return kind, model, st, opt


def train(kind, model, st, opt, rank, world, step0, steps):
    losses = []
    for step in range(step0, step0 + steps):
        # one global batch of GLOBAL samples per step, whatever the world size:
        # rank r takes its slice (the plan averages the grads over ranks)
        inp, tgt = tm.batch(kind, step, mb_size=GLOBAL)
        k = GLOBAL // world
        inp, tgt = inp[rank * k:(rank + 1) * k], tgt[rank * k:(rank + 1) * k]
        loss = tm.loss_fn(kind, model, inp, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(st.ex.all_reduce_f64([float(loss.detach())])[0] / world)
    return losses


def gather(st, flat_of):
    """full tensors (float64 all-reduce of each rank's extents; replicas
    counted once): exact for fp32 / bf16 values"""
    out = {}
    for p in st.ex.params:
        t = flat_of(p)
        if t is None:
            continue
        buf = torch.zeros(p.numel, dtype=torch.float64)
        for s, f, n in p.shard.pairs():
            buf[f:f + n] = t[s:s + n].double()
        st.ex.all_reduce_f64_buffer(buf.data_ptr(), p.numel)
        buf /= st._repl[p.name]
        out[p.name] = buf.to(t.dtype).view(p.shape)
    return out


def snapshot(st, opt):
    keys = ("momentum_buffer",) if isinstance(opt, torch.optim.SGD) else ("exp_avg", "exp_avg_sq")
    snap = {"main": gather(st, lambda p: p.tensor("main"))}
    by = {mp._flexplan_name: mp for mp in st.main_params()}
    for k, key in enumerate(keys):
        snap[key] = gather(st, lambda p: p.tensor(f"optim{k}") if p.name in by else None)
    if not isinstance(opt, torch.optim.SGD):
        steps = {float(opt.state[mp]["step"]) for mp in st.main_params() if mp in opt.state}
        snap["step"] = sorted(steps)
    return snap


def same(a, b):
    for k in a:
        if k == "step":
            if a[k] != b[k]:
                return f"step {a[k]} != {b[k]}"
            continue
        for n in a[k]:
            x, y = a[k][n], b[k][n]
            if x.dtype != y.dtype or not torch.equal(x.view(torch.int16 if x.dtype == torch.bfloat16 else
                                                          torch.int32), y.view(torch.int16 if
                                                                               y.dtype == torch.bfloat16 else
                                                                               torch.int32)):
                return f"{k} {n}: differs (max {float((x.float() - y.float()).abs().max()):.3g})"
    return None


def check_compute(st):
    """every compute weight this rank holds between steps = cast(main)"""
    full = gather(st, lambda p: p.tensor("main"))
    with open(os.fspath(st.ex.plan)) as f:  # the plan.json this test compiled, read here as the reference
        js = json.load(f)
    for newp, p in st.params.values():
        if not p.weight.ptr:
            continue
        q = next(x for x in js["params"] if x["name"] == p.name)
        b = q.get("weight", {}).get("buffer", -1)
        kept = b >= 0 and js["buffers"][b]["kind"] == "persistent"
        if p.weight_persistent != kept:
            return f"{p.name}: the library says weight_persistent={p.weight_persistent}, plan.json {kept}"
        if not kept:
            continue
        want = full[p.name].to(newp.dtype)
        if not torch.equal(newp.detach(), want):
            return f"compute weight {p.name} is not the new main weight cast"
    return None


def round_trip(name, st, opt, path):
    """save, perturb every shard and optimizer state, dcp.load +
    load_state_dict: the state is back bit for bit"""
    ref = snapshot(st, opt)
    dcp.save(fpt.state_dict(st, opt, copy=False), checkpoint_id=path)  # boxes taken from the arena as written
    with torch.no_grad():
        for mp in st.main_params():
            mp.add_(0.5)
            for v in opt.state[mp].values():
                v.add_(1.0)
    sd2 = fpt.state_dict(st, opt)
    dcp.load(sd2, checkpoint_id=path)
    fpt.load_state_dict(st, sd2, opt)
    why = same(ref, snapshot(st, opt)) or check_compute(st)
    if why:
        return ref, "round trip: " + why
    # and again straight into the arena (no staging copy)
    with torch.no_grad():
        for mp in st.main_params():
            mp.add_(0.25)
            for v in opt.state[mp].values():
                v.add_(1.0)
    ck.load_in_place(st, path, opt)
    why = same(ref, snapshot(st, opt)) or check_compute(st)
    return ref, ("round trip (load_in_place): " + why) if why else None


def run_save(name, rank, world, d):
    kind, model, st, opt = make(name, "save", rank, world, d)
    try:
        train(kind, model, st, opt, rank, world, 0, STEPS)
        path = os.path.join(d, name)
        ref, why = round_trip(name, st, opt, path)
        if why:
            return "FAIL", why
        if rank == 0:
            torch.save(ref, path + ".ref.pt")
        losses = train(kind, model, st, opt, rank, world, STEPS, MORE)
        if rank == 0:
            with open(path + ".losses.json", "w") as f:
                json.dump(losses, f)
        return "PASS", f"saved on {world} ranks, round trip bit for bit, losses {losses}"
    finally:
        st.close()


def run_load(name, rank, world, d):
    kind, model, st, opt = make(name, "load", rank, world, d)
    try:
        path = os.path.join(d, name)
        sd = fpt.state_dict(st, opt)
        dcp.load(sd, checkpoint_id=path)
        fpt.load_state_dict(st, sd, opt)
        ref = torch.load(path + ".ref.pt")
        why = same(ref, snapshot(st, opt)) or check_compute(st)
        if why:
            return "FAIL", "resume: " + why
        _, why = round_trip(name, st, opt, f"{path}.np{world}")  # and a round trip on this rank count
        if why:
            return "FAIL", why
        # a state dict of full tensors (as get_model_state_dict(full_state_dict=True) gives): each rank
        # takes its boxes; the weights equal the saved ones again
        full = {k: ref["main"][v] for k, (kind, v) in ck._fqns(st).items() if kind == "param"}
        with torch.no_grad():
            for mp in st.main_params():
                mp.add_(0.5)
        fpt.load_state_dict(st, full)
        why = same({"main": ref["main"]}, {"main": snapshot(st, opt)["main"]}) or check_compute(st)
        if why:
            return "FAIL", "full tensors: " + why
        losses = train(kind, model, st, opt, rank, world, STEPS, MORE)
        with open(path + ".losses.json") as f:
            want = json.load(f)
        # the first loss comes from the loaded weights (equal bit for bit): only
        # the grouping of the loss average differs; later ones also see the
        # grads summed over another rank count (bf16 grads round differently)
        tols = [1e-6] + [1e-3 if CONFIGS[name][2] else 1e-5] * (len(want) - 1)
        for a, b, tol in zip(losses, want, tols):
            if abs(a - b) > tol * max(1.0, abs(b)):
                return "FAIL", f"losses after resuming {losses}, uninterrupted {want}"
        return "PASS", f"resumed on {world} ranks, state bit for bit, losses {losses} vs {want}"
    finally:
        st.close()


def run_fsdp2(name, rank, world, d):
    """a checkpoint FSDP2 saved (fsdp2_dcp.py: fully_shard, get_state_dict,
    dcp.save) loads into flexplan.torch: weights, AdamW state and step equal
    FSDP2's full state bit for bit (both of the config's plans)"""
    kind = CONFIGS[name][0]
    path = os.path.join(d, f"fsdp2_{kind}")
    ref = torch.load(path + ".ref.pt")
    for which in ("save", "load"):
        _, model, st, opt = make(name, which, rank, world, d)
        try:
            sd = fpt.state_dict(st, opt)
            dcp.load(sd, checkpoint_id=path)
            fpt.load_state_dict(st, sd, opt)
            why = same(ref, snapshot(st, opt)) or check_compute(st)
            if why:
                return "FAIL", f"{which} plan: FSDP2's checkpoint: {why}"
        finally:
            st.close()
    return "PASS", f"FSDP2's checkpoint loaded on {world} ranks (two plans), bit for bit"


def run_hf(name, rank, world, d):
    """shard(meta module, plan, init=DIR) from Hugging Face folders that
    test_torch_checkpoint made with save_pretrained (DIR/hf_sharded: an index
    and several shards, fp32; DIR/hf_bf16: one model.safetensors in bf16):
    the gathered main weights equal from_pretrained's params (converted to
    the plan's fp32) bit for bit, and each rank read only its extents
    (refit_bytes_read); DIR/hf_missing and DIR/hf_extra raise FlexplanError
    naming the tensor on every rank. init="module" (in memory) equals the
    module's values bit for bit."""
    from transformers import LlamaForCausalLM
    notes = []
    for strategy in ("full_shard", "shard_grad_op"):
        spec = spec_for(strategy, {}, world, {"kind": "llama"})
        model = tm.tiny_llama()
        plan = compile_plan(describe_model("llama", model, []), spec,
                            os.path.join(d, f"hf.{strategy}.np{world}.r{rank}.plan.json"))
        for folder in ("hf_sharded", "hf_bf16"):
            path = os.path.join(d, folder)
            ref = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
            with torch.device("meta"):
                meta = tm.tiny_llama()
            st = fpt.shard(meta, plan, init=path)
            try:
                got = gather(st, lambda p: p.tensor("main"))
                want = dict(ref.named_parameters())
                for n, t in got.items():
                    if not torch.equal(t, want[n].detach().float()):
                        return "FAIL", f"{folder}: {n} differs from from_pretrained's"
                why = check_compute(st)
                if why:
                    return "FAIL", f"{folder}: {why}"
                total = sum(4 * p.numel for p in st.ex.params)
                read = st.stats()["refit_bytes_read"]
                per = 2 if folder == "hf_bf16" else 4
                if strategy == "full_shard" and world > 1 and read > per * total / 4 / world * 1.05 + 4096:
                    return "FAIL", f"{folder}: rank {rank} read {read} bytes, its share is ~{per * total // 4 // world}"
                notes.append(f"{strategy}/{folder} read {read}/{total * per // 4} B")
            finally:
                st.close()
        for folder, needle in (("hf_missing", "model.norm.weight"), ("hf_extra", "extra.bias")):
            with torch.device("meta"):
                meta = tm.tiny_llama()
            try:
                st = fpt.shard(meta, plan, init=os.path.join(d, folder))
            except FlexplanError as e:
                if needle not in str(e):
                    return "FAIL", f"{folder}: message does not name {needle}: {e}"
            else:
                st.close()
                return "FAIL", f"{folder}: loaded"
        # init="module": in memory, bit for bit
        model = tm.tiny_llama(seed=3)
        want = {n: p.detach().clone() for n, p in model.named_parameters()}
        st = fpt.shard(model, plan)
        try:
            got = gather(st, lambda p: p.tensor("main"))
            if any(not torch.equal(got[n], want[n]) for n in got):
                return "FAIL", "init='module' differs from the module's values"
            why = check_compute(st)
            if why:
                return "FAIL", f"init='module': {why}"
        finally:
            st.close()
    return "PASS", "; ".join(notes)


def run_corrupt(name, rank, world, d):
    """corrupt and partial checkpoints: every rank raises, no rank changes
    its weights or optimizer state"""
    kind, model, st, opt = make(name, "save", rank, world, d)
    try:
        train(kind, model, st, opt, rank, world, 0, 1)
        base = os.path.join(d, name + ".bad")
        dcp.save(fpt.state_dict(st, opt), checkpoint_id=base)  # copies (the default) here
        train(kind, model, st, opt, rank, world, 1, 1)  # the arena now differs from the checkpoint
        before = snapshot(st, opt)
        import shutil

        def variant(tag, how):
            path = f"{base}.{tag}"
            if rank == 0:
                shutil.rmtree(path, ignore_errors=True)
                shutil.copytree(base, path)
                how(path)
            st.ex.all_reduce_f64([0.0])  # the copy exists for every rank
            return path

        def drop_file(path):
            os.unlink(os.path.join(path, sorted(f for f in os.listdir(path) if f.endswith(".distcp"))[-1]))

        def truncate(path):
            f = os.path.join(path, sorted(f for f in os.listdir(path) if f.endswith(".distcp"))[0])
            os.truncate(f, os.path.getsize(f) // 2)

        def garble_metadata(path):
            with open(os.path.join(path, ".metadata"), "r+b") as f:
                f.seek(8)
                f.write(b"\x00garbage\xff" * 4)

        cases = [("missing_file", drop_file), ("truncated", truncate), ("metadata", garble_metadata)]
        for tag, how in cases:
            path = variant(tag, how)
            sd = fpt.state_dict(st, opt)
            try:
                dcp.load(sd, checkpoint_id=path)
                fpt.load_state_dict(st, sd, opt)
            except (Exception, CheckpointException):  # noqa: BLE001 - every rank must get here
                pass
            else:
                return "FAIL", f"{tag}: the corrupt checkpoint loaded on rank {rank}"
            why = same(before, snapshot(st, opt))
            if why:
                return "FAIL", f"{tag}: state changed after a failed load: {why}"
            try:  # the in-place load's checks catch it before reading
                ck.load_in_place(st, path, opt)
            except FlexplanError as e:
                if "no rank changed" not in str(e):
                    return "FAIL", f"{tag}: load_in_place: {e}"
            else:
                return "FAIL", f"{tag}: load_in_place loaded a corrupt checkpoint"
            why = same(before, snapshot(st, opt))
            if why:
                return "FAIL", f"{tag}: load_in_place changed the state: {why}"
        # one rank's state dict is wrong (another plan's shapes): load_state_dict
        # fails on every rank, the others' valid parts are not written
        sd = fpt.state_dict(st, opt)
        dcp.load(sd, checkpoint_id=base)
        if rank == world - 1:
            k = next(iter(sd["model"]))
            sd["model"][k] = torch.zeros(3, 3)
        try:
            fpt.load_state_dict(st, sd, opt)
        except FlexplanError as e:
            msg = str(e)
        else:
            return "FAIL", "a state dict wrong on one rank loaded"
        if "no rank changed" not in msg:
            return "FAIL", f"message: {msg}"
        why = same(before, snapshot(st, opt))
        if why:
            return "FAIL", f"one bad rank: state changed: {why}"
        # a copy=False state dict (for saving) is refused for loading, on every rank:
        # by dcp.load (it would write into the arena) and by load_state_dict
        try:
            dcp.load(fpt.state_dict(st, opt, copy=False), checkpoint_id=base)
        except (Exception, CheckpointException) as e:  # noqa: BLE001
            if "copy=False" not in str(e):
                return "FAIL", f"dcp.load into copy=False: {str(e)[-300:]}"
        else:
            return "FAIL", "dcp.load wrote into a copy=False state dict"
        why = same(before, snapshot(st, opt))
        if why:
            return "FAIL", f"dcp.load into copy=False: state changed: {why}"
        try:
            fpt.load_state_dict(st, fpt.state_dict(st, opt, copy=False), opt)
        except FlexplanError as e:
            if "copy=False" not in str(e):
                return "FAIL", f"copy=False refused with: {e}"
        else:
            return "FAIL", "load_state_dict took a copy=False state dict"
        why = same(before, snapshot(st, opt))
        if why:
            return "FAIL", f"copy=False: state changed: {why}"
        return "PASS", f"missing file, truncated file, garbled metadata, one bad rank: every rank raised ({msg[:90]}), " \
                       "nothing changed"
    finally:
        st.close()


def main():
    phases, d, names = sys.argv[1].split(","), sys.argv[2], sys.argv[3:]
    torchrun = "TORCHELASTIC_RUN_ID" in os.environ  # set by torchrun
    if torchrun:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = mpi_init()
    bad = 0
    boot = True if torchrun else None
    # corrupt and fsdp2: the first config only (the failure paths are the same for every config)
    for phase, name in [(ph, n) for ph in phases for n in (names[:1] if ph in ("corrupt", "fsdp2", "hf") else names)]:
        try:
            if boot is None:  # torch.distributed for DCP, once (gloo; the port over flexplan's all-reduce)
                kind, model, st, opt = make(name, "save", rank, world, d)
                ck.init_process_group(st)
                st.close()
                boot = True
            res, why = {"save": run_save, "load": run_load, "corrupt": run_corrupt,
                         "fsdp2": run_fsdp2, "hf": run_hf}[phase](name, rank, world, d)
        except (Exception, CheckpointException):  # noqa: BLE001 (DCP's is a BaseException)
            res, why = "FAIL", traceback.format_exc()
        if res == "FAIL":
            bad += 1
        print(f"{res} {phase} {name} r{rank}: {why}", flush=True)
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()
    if not torchrun:
        mpi_finalize()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
