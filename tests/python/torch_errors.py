"""Every error flexplan.torch adds, on one rank (test_torch_errors.py runs it
under ``mpiexec -n 1``): each check prints ``OK <name>`` when the expected
FlexplanError (status and message) is raised, ``BAD <name>: ...`` otherwise."""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

torch.set_num_threads(1)

import flexplan  # noqa: E402
import flexplan.torch as fpt  # noqa: E402
from flexplan.executor import Executor, mpi_init, mpi_finalize  # noqa: E402

import torch_models as tm  # noqa: E402
from torch_worker import compile_plan, spec_for  # noqa: E402

TMP = tempfile.mkdtemp(prefix="fp-torch-errors-")
results = []


def _check(name, fn, exc, bad):
    """fn must raise exc; bad(e) says what is wrong with it (None: nothing)."""
    try:
        fn()
    except exc as e:
        why = bad(e)
        results.append(f"BAD {name}: {why}" if why else f"OK {name}: {type(e).__name__}: {e}")
        return
    except Exception as e:  # noqa: BLE001
        results.append(f"BAD {name}: {type(e).__name__}: {e}")
        return
    results.append(f"BAD {name}: no error")


def expect(name, fn, status, *needles):
    """A FlexplanError of this status whose message holds every needle."""
    _check(name, fn, flexplan.FlexplanError,
           lambda e: None if e.status_name == status and all(n in str(e) for n in needles)
           else f"{e.status_name}: {e}")


def expect_arg(name, fn, exc, arg):
    """An argument error: exc (TypeError / ValueError) whose message starts
    with the argument's name."""
    _check(name, fn, exc,
           lambda e: None if str(e).startswith(arg + ":") else f"{type(e).__name__} not naming {arg}: {e}")


def plan_for(model, name, ga=1, optim=None):
    extra = {"grad_accumulation": ga} if ga > 1 else {}
    if optim:
        extra["optimizer"] = optim
    tag = "-".join(str(v) for v in optim.values()) if optim else "adamw"
    return compile_plan(tm.model_json(model, tm.MLP_UNITS, name=name), spec_for("full_shard", extra, 1, {}),
                        os.path.join(TMP, f"{name}.ga{ga}.{tag}.plan.json"))


def main():
    mpi_init()
    good = plan_for(tm.mlp(), "mlp")

    # a plan for another model: each kind of mismatch names the param
    class Extra(tm.MLP):
        def __init__(self):
            super().__init__()
            self.extra = torch.nn.Parameter(torch.zeros(3))
    expect("module_param_not_in_plan", lambda: fpt.shard(Extra(), good), "FP_ERR_PLAN",
           "module param 'extra' is not in the plan")
    small = tm.MLP([12, 24, 24, 20])  # no layers.3
    expect("plan_param_not_in_module", lambda: fpt.shard(small, good), "FP_ERR_PLAN",
           "plan param 'layers.3.weight'", "is not a param of the module")
    frozen = tm.mlp()
    frozen.layers[0].weight.requires_grad_(False)
    expect("requires_grad_differs", lambda: fpt.shard(frozen, good), "FP_ERR_PLAN",
           "'layers.0.weight' has requires_grad=False in the module but True in the plan")
    # a plan keeping a frozen layer's weights as MXFP8 (e4m3 + block scales):
    # not a float nn.Parameter, refused naming the param and the way out
    mx = tm.mlp()
    mx.layers[1].requires_grad_(False)
    mx_spec = spec_for("full_shard", {"buckets": [{"name": "frozen", "params": ["layers.1.*"],
                                                   "placement": {"kind": "replicate"},
                                                   "mixed_precision": {"param_dtype": "mxfp8"}}]}, 1, {})
    mx_plan = compile_plan(tm.model_json(mx, tm.MLP_UNITS, name="mlp-mx"), mx_spec,
                           os.path.join(TMP, "mlp-mx.plan.json"))
    expect("mxfp8_param", lambda: fpt.shard(mx, mx_plan), "FP_ERR_PLAN", "param 'layers.1.weight' is MXFP8",
           "float param_dtype", "flexplan.Executor", "'scales'")
    with torch.device("meta"):
        meta = tm.MLP()
    expect("meta_module_init", lambda: fpt.shard(meta, good), "FP_ERR_ARG", "meta device")

    # the module's forward against the plan's order
    class Swapped(tm.MLP):
        def forward(self, x):  # layers.3 runs before layers.1 and layers.2
            h = self.layers[0](x)
            y = self.layers[3](torch.zeros(x.shape[0], 20))
            return y + self.layers[2](self.layers[1](h)).sum()
    m = Swapped()
    st = fpt.shard(m, plan_for(m, "mlp"))
    x, t = tm.batch("mlp", 0)
    # layers.3 passes layers.1 and 2 (a forward may skip units), which then come too late
    expect("forward_out_of_plan_order", lambda: m(x), "FP_ERR_ORDER", "the module reached pre_forward(layers.1)",
           "already passed it", "does not follow the plan's order")
    st.close()

    # between steps: evaluation, params, unshard() (issue 29)
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp"))
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-3)
    expect("param_read_between_steps", lambda: float(m.layers[0].weight.sum()), "FP_ERR_ORDER",
           "param 'layers.0.weight' is sharded between steps", "unshard()")
    m.eval()
    expect("backward_of_eval_forward", lambda: tm.loss_fn("mlp", m, x, t).backward(), "FP_ERR_ORDER",
           "backward through a forward that ran as evaluation", "module.train()")
    m.train()
    with st.unshard():
        expect("training_forward_in_unshard", lambda: tm.loss_fn("mlp", m, x, t), "FP_ERR_ORDER",
               "a training forward inside unshard()")
        expect("unshard_in_unshard", lambda: st.unshard().__enter__(), "FP_ERR_ORDER", "unshard() inside unshard()")
    tm.loss_fn("mlp", m, x, t).backward()  # training goes on
    expect("unshard_inside_step", lambda: st.unshard().__enter__(), "FP_ERR_ORDER",
           "unshard() inside a training step")
    opt.step()
    st.close()
    expect("param_read_after_close", lambda: m.layers[0].weight + 1, "FP_ERR_ORDER",
           "belongs to a closed flexplan state")

    # a second step's forward before the optimizer step
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp"))
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-3)
    tm.loss_fn("mlp", m, x, t).backward()
    expect("forward_before_optimizer_step", lambda: m(x), "FP_ERR_ORDER", "call the optimizer step")
    opt.step()  # still usable: the step goes on
    tm.loss_fn("mlp", m, x, t).backward()
    opt.step()
    st.close()

    # the optimizer step before the plan's micro-batches are through
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp", ga=2))
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-3)
    tm.loss_fn("mlp", m, x, t).backward()
    expect("optimizer_step_before_backward_done", opt.step, "FP_ERR_ORDER", "grad_accumulation = 2")
    st.close()

    # the optimizer against the state the plan holds: another class, a third
    # state (amsgrad), SGD without momentum, state of another dtype
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp"))
    expect("optimizer_class_mismatch", lambda: fpt.optimizer(st, torch.optim.SGD, lr=0.1, momentum=0.9),
           "FP_ERR_PLAN", "the plan holds adamw optimizer state but the optimizer is SGD")
    expect("optimizer_amsgrad", lambda: fpt.optimizer(st, torch.optim.AdamW, lr=0.1, amsgrad=True),
           "FP_ERR_PLAN", "amsgrad keeps a third state")
    st.close()
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp", optim={"type": "sgd"}))
    expect("optimizer_sgd_no_momentum", lambda: fpt.optimizer(st, torch.optim.SGD, lr=0.1), "FP_ERR_PLAN",
           "SGD without momentum keeps no state")
    st.close()
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp", optim={"type": "adamw", "state_dtype": "bf16"}))
    expect("optimizer_state_dtype", lambda: fpt.optimizer(st, torch.optim.AdamW, lr=0.1), "FP_ERR_PLAN",
           "holds adamw state in bf16 but torch keeps it in the main weights' dtype fp32")
    st.close()
    # optimizer "none": torch allocates its own state, any class
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp", optim={"type": "none"}))
    opt = fpt.optimizer(st, torch.optim.SGD, lr=0.1)
    tm.loss_fn("mlp", m, x, t).backward()
    opt.step()
    st.close()

    # Sharded's methods and the checkpoint functions: argument errors name the argument
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp"))
    expect_arg("clip_max_norm_type", lambda: st.clip_grad_norm_("1.0"), TypeError, "max_norm")
    expect_arg("clip_max_norm_value", lambda: fpt.clip_grad_norm_(m, -1.0), ValueError, "max_norm")
    expect_arg("clip_norm_type_value", lambda: st.clip_grad_norm_(1.0, norm_type=0), ValueError, "norm_type")
    expect_arg("step_opt_type", lambda: st.step("adamw"), TypeError, "opt")
    expect_arg("optimizer_cls_type", lambda: fpt.optimizer(st, 3), TypeError, "cls")
    expect_arg("optimizer_cls_makes", lambda: fpt.optimizer(st, lambda ps: ps), TypeError, "cls")
    expect_arg("state_dict_optimizer_type", lambda: fpt.state_dict(st, "adamw"), TypeError, "optimizer")
    expect_arg("state_dict_copy_type", lambda: fpt.state_dict(st, copy="no"), TypeError, "copy")
    expect_arg("load_state_dict_sd_type", lambda: fpt.load_state_dict(st, [1, 2]), TypeError, "sd")
    expect_arg("load_in_place_id_type", lambda: fpt.load_in_place(st, 3), TypeError, "checkpoint_id")
    tm.loss_fn("mlp", m, x, t).backward()  # the state is still usable
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-3)
    opt.step()
    st.close()

    # sharding twice; a module that is not sharded; executor arguments
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp"))
    expect("already_sharded", lambda: fpt.shard(m, good), "FP_ERR_ARG", "already sharded")
    st.close()
    expect("not_sharded", lambda: fpt.clip_grad_norm_(tm.mlp(), 1.0), "FP_ERR_ARG", "not a module sharded")
    expect("unknown_backend", lambda: Executor(good, 0, 1, backend="gloo"), "FP_ERR_ARG", "unknown backend 'gloo'")
    expect("bad_nccl_id", lambda: Executor(good, 0, 1, backend="nccl", nccl_id=b"123"), "FP_ERR_ARG",
           "nccl_id must be 128 bytes")
    expect("bad_plan_path", lambda: Executor(os.path.join(TMP, "missing.plan.json"), 0, 1), "FP_ERR_PLAN",
           "missing.plan.json")
    with Executor(good, 0, 1) as ex:
        expect("unknown_param", lambda: ex.param("nope"), "FP_ERR_ARG", "the plan has no param 'nope'")
        expect("unknown_module", lambda: ex.hook("pre_forward", "nope"), "FP_ERR_ARG", "no module 'nope'")
    lifetimes(good, x, t)
    fsdp2_habits(x, t)
    recovery()
    strict_loads(x, t)
    print("\n".join(results), flush=True)
    mpi_finalize()
    return 1 if any(r.startswith("BAD") for r in results) else 0


def holds(name, cond, what):
    results.append(f"OK {name}: {what}" if cond else f"BAD {name}: {what}")


def lifetimes(good, x, t):
    """Issue 40: what an Executor or a Sharded handed out is invalidated by
    destroy() / close(); every later call says the object is closed; an
    optimizer of another state or over the module's own params is refused."""
    ex = Executor(good, 0, 1)
    pv = ex.param("layers.0.weight")
    w, mv = pv.tensor("weight"), pv.buffer("main")
    ex.destroy()
    expect("executor_param_after_destroy", lambda: ex.param("layers.0.weight"), "FP_ERR_ARG",
           "param('layers.0.weight'): the executor is closed")
    expect("executor_hook_after_destroy", lambda: ex.hook("step_begin"), "FP_ERR_ARG", "hook: the executor is closed")
    expect("view_tensor_after_destroy", lambda: pv.tensor("weight"), "FP_ERR_ARG", "the executor is closed")
    expect("view_buffer_after_destroy", lambda: pv.buffer("main"), "FP_ERR_ARG", "the executor is closed")
    holds("handed_tensor_emptied", w.numel() == 0 and w.untyped_storage().nbytes() == 0,
          f"a weight tensor taken before destroy() has {w.numel()} elements after it")
    try:
        mv[0]
        holds("handed_memoryview_released", False, "a memoryview taken before destroy() still reads")
    except ValueError as e:
        holds("handed_memoryview_released", "released" in str(e), str(e))

    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp"))
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-3)
    tm.loss_fn("mlp", m, x, t).backward()
    opt.step()
    mains = st.main_params()
    st.close()
    expect("opt_step_after_close", opt.step, "FP_ERR_ARG", "the flexplan state is closed")
    expect("clip_after_close", lambda: fpt.clip_grad_norm_(st, 1.0), "FP_ERR_ARG", "the flexplan state is closed")
    expect("clip_of_module_after_close", lambda: fpt.clip_grad_norm_(m, 1.0), "FP_ERR_ARG",
           "the module's flexplan state is closed")
    expect("save_after_close", lambda: st.save(os.path.join(TMP, "closed.safetensors")), "FP_ERR_ARG",
           "save: the flexplan state is closed")
    expect("full_state_dict_after_close", st.full_state_dict, "FP_ERR_ARG", "full_state_dict: the flexplan state")
    expect("state_dict_after_close", lambda: fpt.state_dict(st), "FP_ERR_ARG", "the flexplan state is closed")
    holds("main_params_emptied", all(p.numel() == 0 for p in mains) and all(p.grad is None for p in mains),
          f"main shards taken before close(): {[p.numel() for p in mains]} elements")
    expect("shard_after_close", lambda: fpt.shard(m, good), "FP_ERR_ARG", "was sharded before and its state closed")

    # an optimizer of another state; one over the module's own params (FSDP2's habit)
    m1, m2 = tm.mlp(), tm.mlp()
    st1, st2 = fpt.shard(m1, plan_for(m1, "mlp")), fpt.shard(m2, plan_for(m2, "mlp"))
    opt1 = fpt.optimizer(st1, torch.optim.AdamW, lr=1e-3)
    tm.loss_fn("mlp", m2, x, t).backward()
    expect("optimizer_of_another_state", lambda: st2.step(opt1), "FP_ERR_ARG",
           "the optimizer steps another sharded module's state")
    st1.close()
    st2.close()
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp"))
    plain = torch.optim.AdamW(m.parameters(), lr=1e-3)
    tm.loss_fn("mlp", m, x, t).backward()
    expect("torch_optimizer_over_module_params", plain.step, "FP_ERR_ARG", "steps the sharded module's own param",
           "flexplan.torch.optimizer(model, AdamW")
    st.close()


def fsdp2_habits(x, t):
    """Issue 40: what an FSDP2 user does by habit works or fails at once."""
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp"))
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-3)
    tm.loss_fn("mlp", m, x, t).backward()
    expect("torch_clip_grad_norm_after_backward", lambda: torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0),
           "FP_ERR_ORDER", "the .grad of param 'layers.0.weight' after backward",
           "flexplan.torch.clip_grad_norm_(model, max_norm)")
    norm = fpt.clip_grad_norm_(m, 1.0)  # the sharded way still works after the refusal
    opt.step()
    tm.loss_fn("mlp", m, x, t).backward()  # the next step binds the grads again
    opt.step()
    holds("clip_then_train_on", bool(torch.isfinite(norm)) and float(norm) > 0, f"norm {float(norm)}")
    expect("requires_grad_after_shard", lambda: m.layers[0].weight.requires_grad_(False), "FP_ERR_ARG",
           "param 'layers.0.weight': requires_grad_(False) after shard()", "the plan fixes which params train")
    expect("module_requires_grad_after_shard", lambda: m.requires_grad_(False), "FP_ERR_ARG",
           "requires_grad_(False) after shard()")

    def set_attr():
        m.layers[1].bias.requires_grad = False
    expect("requires_grad_attr_after_shard", set_attr, "FP_ERR_ARG", "'layers.1.bias': requires_grad_(False)")
    tm.loss_fn("mlp", m, x, t).backward()
    expect("requires_grad_inside_step", lambda: m.layers[0].weight.requires_grad_(False), "FP_ERR_ARG",
           "requires_grad_(False) after shard()")
    opt.step()
    path = os.path.join(TMP, "habit.pt")
    expect("torch_save_state_dict", lambda: torch.save(m.state_dict(), path), "FP_ERR_ARG",
           "model.state_dict() of a sharded module", "flexplan.torch.state_dict(model)")
    holds("torch_save_state_dict_no_file", not os.path.exists(path), f"{path} exists after the refusal")
    expect("pickle_param", lambda: torch.save(m.layers[0].weight, os.path.join(TMP, "p.pt")), "FP_ERR_ARG",
           "param 'layers.0.weight' of a sharded module cannot be pickled")
    with st.unshard():
        sd = m.state_dict()  # inside unshard(): full copies, as FSDP2's unshard gives
    holds("state_dict_in_unshard", sd["layers.0.weight"].shape == (24, 12), str(sd["layers.0.weight"].shape))
    st.close()
    # several micro-batches: the grads are bound again for each backward
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp", ga=2))
    opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-3)
    for _ in range(2):
        for _mb in range(2):
            tm.loss_fn("mlp", m, x, t).backward()
        opt.step()
    holds("ga2_grads_rebound", True, "two steps of two micro-batches")
    st.close()


def recovery():
    """Issue 40: a forward whose loss raises (caught) leaves the step open;
    the next forward (training or evaluation) names the cause, abandon_step()
    drops it, and training goes on exactly as a run without that step."""
    def run(ga, fail):
        m = tm.mlp()
        st = fpt.shard(m, plan_for(m, "mlp", ga=ga))
        opt = fpt.optimizer(st, torch.optim.AdamW, lr=1e-2)
        g = 0
        for step in range(3):
            if fail and step == 1:
                for mb in range(ga):
                    xb, tb = tm.batch("mlp", 100 + mb)
                    if mb == ga - 1:  # the last micro-batch's loss raises, and is caught
                        out = m(xb)
                        try:
                            raise RuntimeError(f"loss failed on {tuple(out.shape)}")
                        except RuntimeError:
                            pass
                    else:
                        tm.loss_fn("mlp", m, xb, tb).backward()
                tag = f"ga{ga}"
                expect(f"abandoned_forward_named_{tag}", lambda: m(xb), "FP_ERR_ORDER",
                       "the previous step's forward ran and its backward never did",
                       "flexplan.torch.abandon_step(model)")
                with torch.no_grad():
                    expect(f"abandoned_eval_named_{tag}", lambda: m(xb), "FP_ERR_ORDER",
                           "its backward never did")
                fpt.abandon_step(m)
            for _ in range(ga):
                xb, tb = tm.batch("mlp", g)
                g += 1
                tm.loss_fn("mlp", m, xb, tb).backward()
            opt.step()
        with torch.no_grad():
            ev = m(tm.batch("mlp", 0)[0]).clone()  # an evaluation forward after the recovery
        with st.unshard():
            vals = {k: v.detach().clone() for k, v in m.state_dict().items()}
        st.close()
        return vals, ev
    for ga in (1, 2):
        (a, ea), (b, eb) = run(ga, False), run(ga, True)
        same = all(torch.equal(a[k], b[k]) for k in a) and torch.equal(ea, eb)
        diff = max(float((a[k] - b[k]).abs().max()) for k in a)
        holds(f"abandoned_step_recovers_ga{ga}", same, f"after an abandoned step: params differ by at most {diff:g}")


def strict_loads(x, t):
    """Issue 40: a load names a key the module does not have, or a tensor of
    another dtype, instead of ignoring or converting it."""
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file, save_file
    m = tm.mlp()
    st = fpt.shard(m, plan_for(m, "mlp"))
    fpt.checkpoint.init_process_group(st)
    good = os.path.join(TMP, "strict_good")
    dcp.save(fpt.state_dict(st), checkpoint_id=good)
    fpt.load_in_place(st, good)  # the checkpoint of this state loads
    sd = fpt.state_dict(st)
    sd["extra.weight"] = torch.zeros(3)
    bad = os.path.join(TMP, "strict_extra")
    dcp.save(sd, checkpoint_id=bad)
    expect("load_in_place_extra_key", lambda: fpt.load_in_place(st, bad), "FP_ERR_WEIGHTS",
           "the checkpoint holds 1 key(s) this state does not have: extra.weight", "no rank changed its state")
    sd = fpt.state_dict(st)
    sd["layers.0.bias"] = torch.zeros(sd["layers.0.bias"].shape, dtype=torch.int32)
    bad = os.path.join(TMP, "strict_dtype")
    dcp.save(sd, checkpoint_id=bad)
    expect("load_in_place_dtype", lambda: fpt.load_in_place(st, bad), "FP_ERR_WEIGHTS",
           "layers.0.bias is int32 in the checkpoint, float32 here: a load converts no dtype")
    # the bare path: dcp.load converts the int32 bias into the staging float
    # tensor itself; load_state_dict refuses what it converted, changing nothing
    keep = {k: v.clone() for k, v in fpt.state_dict(st).items()}
    sd2 = fpt.state_dict(st)
    dcp.load(sd2, checkpoint_id=bad)
    expect("load_state_dict_dtype", lambda: fpt.load_state_dict(st, sd2), "FP_ERR_WEIGHTS",
           "layers.0.bias is int32 in the checkpoint dcp.load read, float32 here: a load converts no dtype",
           "no rank changed its state")
    now = fpt.state_dict(st)
    holds("load_state_dict_dtype_unchanged", all(torch.equal(keep[k], now[k]) for k in keep),
          "the refused load left every value as it was")
    sd3 = fpt.state_dict(st)
    dcp.load(sd3, checkpoint_id=good)
    fpt.load_state_dict(st, sd3)  # the checkpoint of this state, of the same dtypes, loads the bare way too
    path = os.path.join(TMP, "strict.safetensors")
    st.save(path)
    tensors = load_file(path)
    tensors["layers.9.weight"] = torch.zeros(2)
    path2 = os.path.join(TMP, "strict_extra.safetensors")
    save_file(tensors, path2)
    expect("sharded_load_extra_key", lambda: st.load(path2), "FP_ERR_WEIGHTS",
           "holds 1 tensor(s) the module does not have: layers.9.weight")
    st.load(path)  # the file it saved loads
    # the file carries a CRC-32 per MiB of data: a flipped bit is refused by
    # the refit (load) and by init=, naming the file, tensor and bytes, and
    # nothing changes
    raw = bytearray(open(path, "rb").read())
    data0 = 8 + int.from_bytes(raw[:8], "little")
    raw[data0 + 40] ^= 0x10
    corrupt = os.path.join(TMP, "strict_corrupt.safetensors")
    with open(corrupt, "wb") as f:
        f.write(raw)
    keep = {k: v.clone() for k, v in fpt.state_dict(st).items()}
    expect("sharded_load_corrupt", lambda: st.load(corrupt), "FP_ERR_WEIGHTS", corrupt,
           "bytes [0, ", "of the data buffer fail their checksum", "the file is corrupt")
    now = fpt.state_dict(st)
    holds("sharded_load_corrupt_unchanged", all(torch.equal(keep[k], now[k]) for k in keep),
          "the refused load left every value as it was")
    st.close()
    expect("init_corrupt", lambda: fpt.shard(tm.mlp(), plan_for(tm.mlp(), "mlp"), init=corrupt), "FP_ERR_WEIGHTS",
           "fail their checksum")
    st = fpt.shard(tm.mlp(), plan_for(tm.mlp(), "mlp"), init=path)  # the good file inits
    with st.unshard():
        got = {k: v.detach().clone() for k, v in st.module.state_dict().items()}
    ref = load_file(path)
    holds("init_checked_file", all(torch.equal(got[k], ref[k]) for k in ref), "init= from the saved file, bit for bit")
    st.close()


if __name__ == "__main__":
    sys.exit(main())
