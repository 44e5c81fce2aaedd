"""Worker for the flexplan.torch parity tests: run under
``mpirun -n N python torch_worker.py CONFIG...`` (the MPI backend) or
``torchrun --nproc-per-node N torch_worker.py CONFIG...`` (torch.distributed
on gloo, no MPI: flexplan.torch picks its "torch" backend, as a torchrun
user's script gets it: tests/python/test_torchrun.py); every rank runs every
config in one process set (cheaper than one mpirun per config), each one
training a tiny model with flexplan.torch.shard for 10 steps of AdamW and
comparing the final params (gathered from the main shards) with the
single-process PyTorch reference (torch_models.reference_train). Rank 0
prints one line per config, ``PASS name max_abs max_rel tol`` or ``FAIL ...``,
and the exit status is 1 when any failed.

Configs (name: model, spec overrides, options): see CONFIGS. A config whose
required world size differs from N is skipped (printed SKIP).

Tolerances, per compute dtype (see docs/torch.md, "Parity"):
- fp32: the sharded run and the reference differ only in the order in which
  grads are summed (the plan's all-reduce / reduce-scatter over ranks and
  micro-batches against the reference's sequential sum): a few fp32 ulps in
  the grads of step 0. AdamW normalizes the update (m / sqrt(v)), so a grad
  that differs by 1e-7 relative moves a weight by about lr * 1e-7; over 10
  steps such differences propagate through the forward and compound, but
  stay orders of magnitude below lr (1e-2), which a missing or doubled
  contribution would change: atol 1e-5, rtol 1e-4.
- bf16 compute: a main weight that differs in its last fp32 bits can round
  to a neighbouring bf16 compute weight (2^-8 relative), which changes that
  step's grads by ~0.4% and, through AdamW's normalized update (each step
  moves a weight by up to lr = 1e-2), can flip the sign of a tiny update: a
  weight may differ by up to ~2 lr over 10 steps: atol 3e-2, rtol 3e-2 -
  still a third of what one wrong step (a missed reduce) changes in the
  largest weights, and the test also checks the mean abs difference stays
  below 2e-3.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

torch.set_num_threads(1)

import flexplan  # noqa: E402
import flexplan.torch as fpt  # noqa: E402

if hasattr(flexplan, "placement"):  # the plug-ins the "moe_expert_owned" and "mlp_block_cyclic*" specs name
    flexplan.placement.register(flexplan.placement.ExpertOwned())
    flexplan.placement.register(flexplan.placement.BlockCyclic(8))
    flexplan.placement.register(flexplan.placement.BlockCyclic(5), name="block_cyclic5")
from flexplan.executor import mpi_init, mpi_finalize, mpi_abort  # noqa: E402

# torchrun sets TORCHELASTIC_RUN_ID in every worker's environment
TORCHRUN = "TORCHELASTIC_RUN_ID" in os.environ


def launch_init():
    """(rank, world): torch.distributed on gloo under torchrun, else MPI."""
    if TORCHRUN:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        return dist.get_rank(), dist.get_world_size()
    return mpi_init()


def launch_abort(code=1):
    """End every rank: MPI_Abort, or (torchrun) exit: torchrun stops the others."""
    if TORCHRUN:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    mpi_abort(code)


def launch_finalize():
    if TORCHRUN:
        import torch.distributed as dist
        dist.destroy_process_group()
    else:
        mpi_finalize()

import torch_models as tm  # noqa: E402

MP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "main_grad_dtype": "fp32"}
MPBF = {"param_dtype": "bf16", "reduce_dtype": "fp32", "main_grad_dtype": "fp32"}
STEPS = 10

# name: (model, strategy, extra spec, options)
CONFIGS = {
    # "eval": evaluation forwards between steps (no_grad, inference_mode,
    # eval mode, a generation loop); "unshard": params read and written
    # between steps inside Sharded.unshard()
    "llama_full_shard": ("llama", "full_shard", {}, {"eval": True, "unshard": True}),
    "llama_shard_grad_op": ("llama", "shard_grad_op", {}, {"eval": True}),
    "llama_no_shard": ("llama", "no_shard", {}, {"eval": True, "unshard": True}),
    "llama_hybrid_2x2": ("llama", "hybrid_shard", {"hybrid_shard": {"intra_node_size": 2},
                                                   "mesh": {"ranks_per_node": 2}}, {"world": 4, "eval": True,
                                                                                    "unshard": True}),
    "llama_bf16": ("llama", "full_shard", {}, {"bf16": True, "eval": True, "unshard": True}),
    "mlp_hybrid_2x2_ga2": ("mlp", "hybrid_shard", {"hybrid_shard": {"intra_node_size": 2},
                                                  "mesh": {"ranks_per_node": 2}, "grad_accumulation": 2},
                           {"world": 4}),
    "llama_ga2": ("llama", "full_shard", {"grad_accumulation": 2}, {"eval": True}),
    "llama_ckpt": ("llama", "full_shard", {}, {"checkpoint": True}),
    "llama_clip": ("llama", "full_shard", {}, {"clip": 0.5}),
    "mlp_full_shard": ("mlp", "full_shard", {}, {}),
    "mlp_shard_grad_op": ("mlp", "shard_grad_op", {}, {}),
    "mlp_no_shard": ("mlp", "no_shard", {}, {}),
    # shard_grad_op whose compute weights are gathered again in the next
    # step's forward (overlap_param_gather), with accumulation
    "llama_sgo_overlap": ("llama", "shard_grad_op", {"overlap_param_gather": True}, {"eval": True, "unshard": True}),
    "mlp_sgo_overlap_ga2": ("mlp", "shard_grad_op", {"overlap_param_gather": True, "grad_accumulation": 2}, {}),
    "mlp_frozen_no_shard": ("mlp", "full_shard", {"no_shard": ["layers.1.*"]}, {"frozen": ["layers.1"],
                                                                                "eval": True, "unshard": True}),
    "mlp_placements": ("mlp", "full_shard", {"buckets": [
        {"name": "l0", "params": ["layers.0.*"], "placement": {"kind": "ragged_shard", "units": "R",
                                                                 "align_elems": 4}},
        {"name": "l1", "params": ["layers.1.*"], "placement": {"kind": "owned", "rank": "auto"}},
        {"name": "l2", "params": ["layers.2.weight"], "placement": {"kind": "shard", "dim": 1}},
        {"name": "l3", "params": ["layers.3.*"], "placement": {"kind": "replicate"}},
    ]}, {"clip": 0.05, "eval": True, "unshard": True}),
    "mlp_bf16": ("mlp", "full_shard", {}, {"bf16": True, "eval": True, "unshard": True}),
    "mlp_sgd_momentum": ("mlp", "full_shard", {"optimizer": {"type": "sgd"}}, {"sgd": True}),
    "mlp_offload_ga2": ("mlp", "full_shard", {"grad_accumulation": 2, "buckets": [
        {"name": "off", "params": ["layers.0.*", "layers.1.*"], "offload": True}]}, {"eval": True, "unshard": True}),
    "mlp_ga2_ckpt": ("mlp", "full_shard", {"grad_accumulation": 2}, {"checkpoint": True}),
    "mlp_save_load": ("mlp", "full_shard", {}, {"save_load": True}),
    # units and params a step's forward skips (issue 29): experts no token was
    # routed to on this rank, a branch not taken; one unit per expert (the
    # unit is skipped), or one per layer (its params get no grad)
    "moe_expert_units": ("moe", "full_shard", {}, {"units": tm.MOE_EXPERT_UNITS, "eval": True}),
    "moe_expert_units_bf16": ("moe", "full_shard", {}, {"units": tm.MOE_EXPERT_UNITS, "bf16": True}),
    "moe_expert_units_sgo_ga2": ("moe", "shard_grad_op", {"grad_accumulation": 2}, {"units": tm.MOE_EXPERT_UNITS}),
    "moe_layer_units": ("moe", "full_shard", {}, {"units": tm.MOE_UNITS}),
    "moe_layer_units_no_shard": ("moe", "no_shard", {}, {"units": tm.MOE_UNITS}),
    # placement plug-ins (flexplan.placement, registered below): each expert
    # wholly on rank e mod N; rows dealt in blocks of 8 (24 rows: one run per
    # rank at 3 and 4 ranks, ragged; at 2, rank 0 holds blocks 0 and 2: the
    # cyclic_shard layout)
    "moe_expert_owned": ("moe", "full_shard", {"buckets": [
        {"name": "experts", "params": ["moe.experts.*"], "split": "per_module", "placement": {"kind": "expert_owned"}},
    ]}, {"units": tm.MOE_EXPERT_UNITS, "eval": True}),
    "mlp_block_cyclic": ("mlp", "full_shard", {"buckets": [
        {"name": "l01", "params": ["layers.0.*", "layers.1.*"], "split": "per_module",
         "placement": {"kind": "block_cyclic"}},
    ]}, {"worlds": [2, 3, 4], "eval": True, "unshard": True}),
    # blocks of 5 rows of 24: the last block short (4 rows), at 2 and 3 ranks
    # the last of a rank holding two or three (cyclic_shard, short last run)
    "mlp_block_cyclic_short": ("mlp", "full_shard", {"buckets": [
        {"name": "l01", "params": ["layers.0.*", "layers.1.*"], "split": "per_module",
         "placement": {"kind": "block_cyclic5"}},
    ]}, {"worlds": [2, 3], "eval": True, "unshard": True}),
    # regional torch.compile: each unit's forward compiled (flexplan's module
    # hooks stay outside the compiled code), 2 ranks only (compiling is slow)
    "llama_compile": ("llama", "full_shard", {}, {"compile": True, "world": 2}),
    "mlp_compile_bf16": ("mlp", "full_shard", {}, {"compile": True, "bf16": True, "world": 2}),
    # transformers' Mixtral and Qwen2-MoE (fused experts: an expert without
    # tokens gets zero rows of the grad), one unit per layer
    "mixtral_full_shard": ("mixtral", "full_shard", {}, {"eval": True}),
    "qwen2_moe_full_shard": ("qwen2_moe", "full_shard", {}, {}),
    "qwen2_moe_bf16": ("qwen2_moe", "full_shard", {}, {"bf16": True}),
}

LM_KINDS = ("llama", "mixtral", "qwen2_moe")


def data_kind(kind):
    """the data and loss of a model kind: token ids and cross entropy, or
    (x, y) pairs and mse"""
    return "llama" if kind in LM_KINDS else "mlp"


def make_model(kind):
    if kind in ("mixtral", "qwen2_moe"):
        return tm.tiny_moe_lm(kind)
    return {"llama": tm.tiny_llama, "mlp": tm.mlp, "moe": tm.moe}[kind]()


def units_of(kind, opts=None):
    if opts and opts.get("units"):
        return opts["units"]
    return {"llama": tm.LLAMA_UNITS, "mlp": tm.MLP_UNITS}.get(kind, tm.MOE_LM_UNITS)


def freeze(model, frozen):
    """the params of the units named in frozen requires_grad False; the model"""
    for u in frozen:
        for p in model.get_submodule(u).parameters():
            p.requires_grad_(False)
    return model


def describe_model(kind, model, frozen, opts=None):
    """model.json through flexplan.torch.describe when it exists, else the
    tests' explicit one (the frozen units frozen first)."""
    freeze(model, frozen)
    units = units_of(kind, opts)
    describe = getattr(fpt, "describe", None)
    if kind not in ("llama", "mlp"):  # data-dependent routing: the units by hand
        return tm.model_json(model, units, name=kind, frozen=frozen)
    if describe is not None and os.environ.get("FP_TEST_NO_DESCRIBE") != "1":
        ex = None
        if kind == "llama":
            ex = (torch.zeros(2, tm.SEQ, dtype=torch.long),)
        else:
            ex = (torch.zeros(2, tm.MLP_DIMS[0]),)
        return describe(model, ex, units=units, name=kind)
    return tm.model_json(model, units, name=kind, frozen=frozen)


def spec_for(strategy, extra, world, opts):
    spec = {"format": "flexplan.spec.v1", "mesh": {"world_size": world}, "strategy": strategy,
            "defaults": {"mixed_precision": dict(MPBF if opts.get("bf16") else MP32)}}
    for k, v in extra.items():
        if k == "mesh":
            spec["mesh"].update(v)
        elif k == "buckets":
            bs = json.loads(json.dumps(v))
            for b in bs:
                pl = b.get("placement", {})
                if pl.get("units") == "R":  # ragged: an uneven split with one empty rank when world > 2
                    pl["units"] = [[1], [1, 1], [2, 0, 1], [1, 2, 0, 1]][world - 1]
            spec["buckets"] = bs
        else:
            spec[k] = v
    if opts.get("checkpoint"):
        spec["recompute"] = ["model.layers.*"] if opts.get("kind") == "llama" else ["layers.[12]"]
    return spec


def compile_plan(model_js, spec, path, policy=None):
    """Compile to a plan.json: flexplan.compile where the package has it,
    else this build's command line ($FLEXPLAN_CLI)."""
    if getattr(flexplan, "compile", None) is not None and hasattr(flexplan.Plan, "save"):
        kw = {"policy": policy} if policy else {}
        plan = flexplan.compile(model_js, spec, **kw)
        plan.save(path)
        plan.close()
        return path
    cli = os.environ.get("FLEXPLAN_CLI") or os.path.join(HERE, "..", "..", "build", "flexplan")
    mj, sj = path + ".model.json", path + ".spec.json"
    with open(mj, "w") as f:
        json.dump(model_js, f)
    with open(sj, "w") as f:
        json.dump(spec, f)
    cmd = [cli, "compile", mj, "--spec", sj, "-o", path] + (["--policy", policy] if policy else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"flexplan compile failed: {r.stderr.strip()}")
    return path


def run_config(name, rank, world, tmp):
    kind, strategy, extra, opts = CONFIGS[name]
    if opts.get("world", world) != world:
        return "SKIP", f"needs {opts['world']} ranks"
    if world not in opts.get("worlds", [world]):
        return "SKIP", f"needs {' or '.join(map(str, opts['worlds']))} ranks"
    if kind == "mlp" and "buckets" in extra and world == 1:
        return "SKIP", "placements need 2+ ranks"
    ga = extra.get("grad_accumulation", 1)
    frozen = opts.get("frozen", [])
    model = make_model(kind)
    model_js = describe_model(kind, model, frozen, opts)
    spec = spec_for(strategy, extra, world, dict(opts, kind=kind))
    plan = compile_plan(model_js, spec, os.path.join(tmp, f"{name}.r{rank}.plan.json"))
    if opts.get("checkpoint"):
        _wrap_checkpoint(kind, model)
    routing = watch_routing(kind, model)
    st = fpt.shard(model, plan)
    if os.environ.get("FP_EXPECT_BACKEND", st.backend) != st.backend:  # the launch chose it (test_torchrun.py)
        return "FAIL", f"shard() chose backend {st.backend!r}, want {os.environ['FP_EXPECT_BACKEND']!r}"
    if opts.get("compile"):
        compile_units(kind, model)
    make_opt = tm.sgd_momentum if opts.get("sgd") else tm.adamw
    opt = fpt.optimizer(st, lambda ps: make_opt(ps))
    losses, evals = [], []
    try:
        if opts.get("eval"):
            evals.append(tm.evaluate(kind, model, -1, st))  # before the first step: the initial weights
        for step in range(STEPS):
            step_loss = 0.0
            for k in range(ga):
                g = step * world * ga + rank * ga + k
                inp, tgt = tm.batch(kind, g)
                loss = tm.loss_fn(kind, model, inp, tgt)
                loss.backward()
                step_loss += float(loss)
            if opts.get("clip"):
                fpt.clip_grad_norm_(st, opts["clip"])
            opt.step()
            opt.zero_grad()
            losses.append(st.ex.all_reduce_f64([step_loss])[0] / (world * ga))
            if opts.get("eval"):
                evals.append(tm.evaluate(kind, model, step, st))
            if opts.get("unshard") and step == UNSHARD_STEP:
                bad = unshard_check(kind, model, st)
                if bad:
                    return "FAIL", bad
        # optimizer state sized for this rank's shards only, and held in the
        # plan's arena: every state tensor is the plan's view, at its address
        keys = ("momentum_buffer",) if opts.get("sgd") else ("exp_avg", "exp_avg_sq")
        for pname, mp in st.named_main_params():
            pv = next(p for p in st.ex.params if p.name == pname)
            s = opt.state[mp]
            for k, key in enumerate(keys):
                if s[key].data_ptr() != pv.optim[k].ptr or s[key].numel() != pv.optim[k].numel:
                    return "FAIL", f"{pname}: optimizer state {key} is not the plan's optim[{k}] view"
        shard_numel = sum(mp.numel() for mp in st.main_params())
        state_numel = sum(v[keys[0]].numel() for v in opt.state.values())
        full_numel = sum(p.numel for p in st.ex.params if p.requires_grad)
        if state_numel != shard_numel or (strategy == "full_shard" and world > 1 and not
                                          shard_numel < full_numel):
            return "FAIL", f"optimizer state {state_numel} elements, shards {shard_numel}, params {full_numel}"
        got = st.full_state_dict(torch.float32)
        if opts.get("save_load"):
            # one path every rank sees: rank 0 writes it (ranks share mpiexec as parent)
            path = os.path.join(tempfile.gettempdir(), f"fp-torch-save-{os.getppid()}-{name}.safetensors")
            st.save(path)
            # perturb, then load back through the refit: must match again
            for mp in st.main_params():
                with torch.no_grad():
                    mp.add_(1.0)
            st.load([path])
            again = st.full_state_dict(torch.float32)
            for n in got:
                if not torch.equal(got[n], again[n]):
                    return "FAIL", f"save/load: {n} differs after loading the saved file back"
            from safetensors.torch import load_file
            sd = load_file(path)
            if set(sd) != set(got) or any(not torch.equal(sd[n].float(), got[n]) for n in got):
                return "FAIL", "save: the file's tensors differ from the gathered params"
            st.ex.all_reduce_f64([0.0])  # every rank has read it
            if rank == 0:
                os.unlink(path)
        stats = st.stats()
        if opts.get("compile"):
            from torch._dynamo.utils import counters
            breaks = sum(counters["graph_break"].values())
            graphs = counters["stats"]["unique_graphs"]
            if breaks or not graphs:
                return "FAIL", f"torch.compile: {graphs} graphs, {breaks} graph breaks: {dict(counters['graph_break'])}"
        if routing is not None:
            # the data made some expert get no token on some rank, and (the
            # custom MoE) the branch be taken on some ranks and steps only
            unhit, taken, calls = st.ex.all_reduce_f64(routing.totals())
            if not unhit or (kind == "moe" and not 0 < taken < calls):
                return "FAIL", f"the data skipped nothing: {unhit} expert calls without tokens, branch {taken}/{calls}"
        # hooks with nothing to do were never called, and the executor agrees
        if stats["skipped"] != stats["python_hooks_skipped"]:
            return "FAIL", f"executor skipped {stats['skipped']}, flexplan.torch {stats['python_hooks_skipped']}"
        # post_backward inferred from the next unit's pre_backward on a chain of units (a decoder
        # layer's hidden states: no identity function), explicit where the inputs are not the
        # previous unit's outputs (experts fed a routed subset of tokens)
        pbf = stats["python_post_backward_functions"]
        # (the Llama's head takes a slice of the norm's output, made outside the units: one per micro-batch)
        if kind == "llama" and not opts.get("checkpoint") and not opts.get("compile") and pbf != STEPS * ga:
            return "FAIL", f"the Llama's units are a chain but for the head's input (a slice): {pbf} post-backward " \
                           f"functions applied, want {STEPS * ga} (one per micro-batch)"
        if opts.get("units") is tm.MOE_EXPERT_UNITS and not pbf:
            return "FAIL", "experts fed a routed subset of tokens got no post-backward function"
        # every recomputed forward of a unit the plan recomputes reached the executor, inside its backward window
        if opts.get("checkpoint"):
            import fnmatch
            units = [m for m in st.ex.modules if any(fnmatch.fnmatchcase(m, p) for p in spec["recompute"])]
            # transformers' own gradient checkpointing reruns a layer's forward without its module hooks
            # (nothing to tell the executor: the weights stay gathered through the unit's backward); a
            # checkpoint() around the module's call runs them again, and each must reach the executor
            want = len(units) * STEPS * ga if kind == "mlp" else 0
            if not units or stats["python_recomputes"] != want:
                return "FAIL", f"recomputed forwards told to the executor: {stats['python_recomputes']}, " \
                               f"want {want} ({len(units)} units x {STEPS} steps x {ga} micro-batches)"
        if frozen and stats["skipped"] < 4 * STEPS:  # the frozen unit's pre/post forward/backward
            return "FAIL", f"frozen unit: only {stats['skipped']} hooks skipped in {STEPS} steps"
        if os.environ.get("FP_SAVE_FINAL") and rank == 0:  # for the FSDP2 comparison
            from safetensors.torch import save_file
            save_file({k: v.contiguous() for k, v in got.items()},
                      os.path.join(os.environ["FP_SAVE_FINAL"], f"flexplan_{name}_np{world}.safetensors"))
            with open(os.path.join(os.environ["FP_SAVE_FINAL"], f"flexplan_{name}_np{world}.losses.json"), "w") as f:
                json.dump({"loss": losses, "eval": evals}, f)
    finally:
        st.close()
    if rank != 0:
        return "DONE", ""
    ref_model = make_model(kind)
    if opts.get("checkpoint"):
        _wrap_checkpoint(kind, ref_model)
    ref_losses, ref_evals = [], []
    if opts.get("eval"):
        import copy
        m0 = copy.deepcopy(ref_model)
        if opts.get("bf16"):
            for p in m0.parameters():  # as the reference's steps (and flexplan's compute) see them
                p.data = p.data.to(torch.bfloat16)
        ref_evals.append(tm.evaluate(kind, m0, -1, None))

    def after_step(step, m, main):
        if opts.get("eval"):
            ref_evals.append(tm.evaluate(kind, m, step, None))
        if opts.get("unshard") and step == UNSHARD_STEP:
            with torch.no_grad():  # as unshard() writes back: the elements that changed
                for n in tm.unshard_edits(kind):
                    old = main[n].to(dict(m.named_parameters())[n].dtype)
                    new = tm.edit(n, old)
                    main[n].copy_(torch.where(new != old, new.float(), main[n]))
    ref = tm.reference_train(kind, ref_model, STEPS, world, ga, frozen=frozen,
                             param_dtype=torch.bfloat16 if opts.get("bf16") else None, clip=opts.get("clip"),
                             make_opt=make_opt, losses=ref_losses, after_step=after_step)
    verdict, msg = compare(got, ref, bf16=opts.get("bf16", False), stats=stats)
    eval_gathers = stats.get("eval_gathers", 0)
    if verdict == "PASS":
        bad = compare_losses("loss", losses, ref_losses, opts.get("bf16", False))
        bad = bad or compare_losses("eval", evals, ref_evals, opts.get("bf16", False))
        if bad:
            return "FAIL", bad
        msg += f" loss_diff={max_diff(losses, ref_losses):.3g}"
        if evals:
            msg += f" eval_diff={max_diff(evals, ref_evals):.3g} eval_gathers={eval_gathers}"
    return verdict, msg


UNSHARD_STEP = tm.UNSHARD_STEP
# per-step losses, every step (|got - ref| <= atol + rtol |ref|): see docs/torch.md
LOSS_TOL = {False: (1e-5, 1e-5), True: (2e-2, 1e-2)}


def flat_losses(v):
    out = []
    for x in v:
        out.extend(flat_losses(x) if isinstance(x, (list, tuple)) else [float(x)])
    return out


def max_diff(a, b):
    a, b = flat_losses(a), flat_losses(b)
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def compare_losses(what, got, ref, bf16):
    atol, rtol = LOSS_TOL[bool(bf16)]
    g, r = flat_losses(got), flat_losses(ref)
    if len(g) != len(r):
        return f"{what}: {len(g)} values against the reference's {len(r)}"
    for i, (x, y) in enumerate(zip(g, r)):
        if not abs(x - y) <= atol + rtol * abs(y):
            return f"{what} {i}: {x:.8g} vs reference {y:.8g} (|diff| {abs(x - y):.3g} > atol {atol} + rtol {rtol})"
    return None


def unshard_check(kind, model, st):
    """Between steps: inside st.unshard() every param holds the value
    full_state_dict() gathers (in the param dtype), writes go back to every
    rank's main weights; outside, reading a param raises FlexplanError."""
    ref = st.full_state_dict()
    with st.unshard():
        named = dict(model.named_parameters())
        for n, want in ref.items():
            p = named[n]
            if tuple(p.shape) != tuple(want.shape) or not torch.equal(p.detach().float(), want.to(p.dtype).float()):
                return f"unshard: {n} does not hold its full value"
        if kind == "llama" and model.lm_head.weight is not model.model.embed_tokens.weight:
            return "unshard: the tied weight is two params"
        with torch.no_grad():
            for n in tm.unshard_edits(kind):
                named[n].copy_(tm.edit(n, named[n]))
    after = st.full_state_dict()
    for n in tm.unshard_edits(kind):
        p = dict(model.named_parameters())[n]
        want = tm.edit(n, ref[n].to(p.dtype))
        if not torch.equal(after[n].to(p.dtype), want):
            return f"unshard: the write to {n} did not reach the main weights"
    try:
        float(next(iter(model.parameters())).sum())
    except flexplan.FlexplanError:
        pass
    else:
        return "reading a param between steps did not raise"
    return None


def compile_units(kind, model):
    """regional compilation, as torchtitan compiles each transformer block:
    each unit's forward (the Llama's decoder layers, the MLP's hidden
    layers) is torch.compile'd; the module's __call__ (flexplan's hooks)
    stays eager. The backend is $FP_TEST_COMPILE_BACKEND (default aot_eager:
    Dynamo and AOTAutograd without generating C++, which this CI cannot
    afford per run; bench/torch_bench.py --compile measures inductor)."""
    import torch._dynamo
    torch._dynamo.reset()
    backend = os.environ.get("FP_TEST_COMPILE_BACKEND", "aot_eager")
    mods = list(model.model.layers) if kind in LM_KINDS else list(model.layers)[1:-1]
    for m in mods:
        m.forward = torch.compile(m.forward, backend=backend)


class _Routing:
    def __init__(self):
        self.unhit = self.taken = self.calls = 0

    def totals(self):
        return [self.unhit, self.taken, self.calls]


def watch_routing(kind, model):
    """MoE kinds: count the layer calls (training forwards only) where an
    expert got no token, and (the custom MoE) where the branch ran."""
    if kind not in ("moe", "mixtral", "qwen2_moe"):
        return None
    r = _Routing()
    if kind == "moe":
        def layer_hook(mod, args, out):
            if torch.is_grad_enabled():
                r.calls += 1
                idx = mod.last_routing
                r.unhit += len(set(range(len(mod.experts))) - set(idx.flatten().tolist()))
        model.moe.register_forward_hook(layer_hook)
        model.branch.register_forward_hook(lambda *a: setattr(r, "taken", r.taken + torch.is_grad_enabled()))
        return r

    def experts_hook(mod, args):
        if torch.is_grad_enabled():
            r.unhit += mod.num_experts - len(set(args[1].flatten().tolist()))
    for layer in model.model.layers:
        layer.mlp.experts.register_forward_pre_hook(experts_hook)
    return r


def _wrap_checkpoint(kind, model):
    """activation checkpointing (non-reentrant) of every hidden layer: the
    Llama's through transformers (it checkpoints the layers' forward, inside
    the module hooks, as torchtitan does); the MLP's around the layer's call,
    so its module hooks run again inside backward (the cursor must ignore
    them)."""
    if kind == "llama":
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.checkpoint = True


def compare(got, ref, bf16, stats):
    atol, rtol = (3e-2, 3e-2) if bf16 else (1e-4, 1e-3)
    worst, worst_rel, mean_sum, n_el = 0.0, 0.0, 0.0, 0
    for n, r in ref.items():
        g = got[n]
        if g.shape != r.shape:
            return "FAIL", f"{n}: shape {list(g.shape)} vs {list(r.shape)}"
        d = (g - r).abs()
        worst = max(worst, float(d.max()))
        worst_rel = max(worst_rel, float((d / (r.abs() + 1e-12)).max()))
        mean_sum += float(d.sum())
        n_el += d.numel()
        if not torch.allclose(g, r, atol=atol, rtol=rtol):
            i = int((d - atol - rtol * r.abs()).argmax())
            return "FAIL", (f"{n}: max |diff| {float(d.max()):.3g} > tol (atol {atol}, rtol {rtol}); "
                            f"at {i}: {float(g.flatten()[i]):.6g} vs ref {float(r.flatten()[i]):.6g}")
    mean = mean_sum / max(n_el, 1)
    if bf16 and mean > 2e-3:
        return "FAIL", f"mean |diff| {mean:.3g} > 2e-3"
    return "PASS", f"max_abs={worst:.3g} max_rel={worst_rel:.3g} mean_abs={mean:.3g} atol={atol} rtol={rtol} " \
                   f"hooks={stats['hooks']} skipped={stats.get('skipped')}/{stats['python_hooks_skipped']} hook_allocations={stats['hook_allocations']}"


def main():
    rank, world = launch_init()
    names = sys.argv[1:] or list(CONFIGS)
    failed = 0
    with tempfile.TemporaryDirectory(prefix=f"fp-torch-{rank}-") as tmp:
        for name in names:
            t0 = time.time()
            try:
                verdict, msg = run_config(name, rank, world, tmp)
            except Exception as e:  # a rank failing ends every rank (no hang)
                sys.stdout.write(f"FAIL {name} np={world} rank {rank}: {type(e).__name__}: {e}\n")
                traceback.print_exc()
                sys.stdout.flush()
                launch_abort(1)
            if rank == 0:
                print(f"{verdict} {name} np={world} {msg} ({time.time() - t0:.1f}s)", flush=True)
            failed += verdict == "FAIL"
    launch_finalize()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
