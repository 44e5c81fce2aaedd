"""flexplan.torch.shard: train a torch.nn.Module on a compiled plan.

``shard(module, plan)`` makes every param of the module a view of the
executor's arena and drives the plan's hooks from the module's own hooks
(FSDP2's ``fully_shard`` vocabulary where it fits: units are what FSDP calls
the modules it wraps; flexplan calls them modules):

- each param becomes an ``nn.Parameter`` over the plan's unsharded compute
  buffer (``fp_param_view.weight``), never a copy; its ``.grad`` is the plan's
  unsharded grad buffer (``ugrad``), so autograd accumulates into it in place;
- pre/post_forward(u) from forward pre-hooks / hooks of the unit's
  submodules; pre_backward(u) from tensor hooks on the unit's outputs;
  post_backward(u) from an autograd function on the unit's inputs (its
  backward runs when the unit's backward is done; AccumulateGrad runs first),
  and what is left when autograd finishes, from a queued engine callback;
  step_begin at the first pre_forward of a step (``_driver.Driver`` keeps
  the plan's order);
- the optimizer steps the main-weight shards (``main_params()``: views of
  ``fp_param_view.main`` whose ``.grad`` is the main-grad shard), between
  pre_optimizer and post_optimizer.

See docs/torch.md.
"""
import contextlib
import math
import os

import torch
from torch import nn
from torch.utils import _pytree as pytree

from ..errors import FlexplanError


def _err(msg, status=2):
    return FlexplanError(status, msg)

from ..executor import Executor, mpi_init
from ._driver import Driver
from ._params import _ParamBinder, gather_full

__all__ = ["shard", "Sharded", "optimizer", "clip_grad_norm_", "state"]

_TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def state(obj):
    """The Sharded state of a module given to shard() (or the state itself)."""
    if isinstance(obj, Sharded):
        return obj
    st = getattr(obj, "_flexplan_state", None)
    if st is None:
        raise _err("not a module sharded by flexplan.torch.shard", 1)
    return st


def _no_grad_leaves(c):
    """True when the container holds only tensors that need no grad, and
    non-containers (one level deep; deeper containers: False)."""
    vals = c.values() if isinstance(c, dict) else c
    for v in vals:
        if isinstance(v, torch.Tensor):
            if v.requires_grad:
                return False
        elif isinstance(v, (tuple, list, dict)):
            return False
    return True


class _PostBackward(torch.autograd.Function):
    """Identity on a unit's inputs; its backward runs once the unit's
    backward has produced the inputs' grads: post_backward(u)."""

    @staticmethod
    def forward(ctx, st, unit, *inputs):
        ctx.st, ctx.unit = st, unit
        return inputs if len(inputs) > 1 else inputs[0]

    @staticmethod
    def backward(ctx, *grads):
        ctx.st._post_backward_cb(ctx.unit)
        return (None, None) + grads


def shard(module, plan, *, backend="mpi", rank=None, world_size=None, progress="default",
          init="module", cast_forward_inputs=True, cuda_mode="graph", profile=False):
    """Shard ``module`` with a compiled plan; returns a ``Sharded`` state (also
    at ``module._flexplan_state``). The module itself is trained in place:
    call it, call ``loss.backward()``, then step an optimizer made by
    ``flexplan.torch.optimizer`` (or ``Sharded.step(opt)``).

    plan: a ``flexplan.Plan`` or a plan.json path, for exactly this module's
      params (names as ``named_parameters()`` gives them, shapes,
      ``requires_grad``): another model's plan raises FlexplanError naming the
      first param that does not match.
    backend: "mpi" (CPU tensors over the host arena; rank and world from MPI,
      initialized here when needed) or "nccl" (CUDA tensors over the device
      arena; rank and world from torch.distributed's env; torch's current
      stream becomes the plan's compute stream).
    init: "module" copies the module's current values (every rank must hold
      the same ones, as with FSDP2): each rank its own extents, in memory; a
      Hugging Face checkpoint folder (model.safetensors.index.json and its
      shards, or one model.safetensors; names checked both ways) or a list
      of safetensors paths loads through the executor's refit, each rank
      reading only its extents; None leaves the arena's zeros (call
      ``load`` before the first step). A module on the meta device needs a
      folder, files (or None).
    cast_forward_inputs: cast floating inputs of each unit to its param dtype
      (mixed precision, as FSDP2's MixedPrecisionPolicy does).
    profile: time the Python hooks (``Sharded.hook_profile()``: host time per
      hook in Python and inside the executor; bench/torch_bench.py).
    """
    if getattr(module, "_flexplan_state", None) is not None:
        raise _err("module is already sharded", 1)
    return Sharded(module, plan, backend=backend, rank=rank, world_size=world_size, progress=progress,
                   init=init, cast_forward_inputs=cast_forward_inputs, cuda_mode=cuda_mode, profile=profile)


class Sharded:
    """The state of one sharded module: its executor, the hook cursor, the
    param views and the main-weight shards. Methods: main_params(),
    step(optimizer), clip_grad_norm_(max_norm), full_state_dict(), save(path),
    load(paths), stats(), close()."""

    def __init__(self, module, plan, *, backend, rank, world_size, progress, init, cast_forward_inputs,
                 cuda_mode, profile=False):
        self._profile = bool(profile)
        self._prof = {"python_s": 0.0, "callbacks": 0}
        self.module = module
        self.backend = backend
        named = dict(module.named_parameters())
        # the plan must be for this module: names, shapes, requires_grad
        cuda_stream = nccl_id = None
        if backend == "nccl":
            rank, world_size, cuda_stream, nccl_id = _nccl_setup(rank, world_size)
        elif rank is None or world_size is None:
            r, w = mpi_init()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        self.rank, self.world_size = rank, world_size
        if backend == "mpi":
            # before anything collective: a rank failing in setup must not leave
            # the others in the setup's collectives
            _install_abort_on_error()
        self._cuda_stream = cuda_stream
        self.ex = ex = Executor(plan, rank, world_size, backend=backend, progress=progress,
                                cuda_stream=cuda_stream, cuda_mode=cuda_mode, nccl_id=nccl_id)
        try:
            self._check_params(named)
            self._setup(module, named, init, cast_forward_inputs)
        except BaseException:
            ex.destroy()
            raise
        module._flexplan_state = self

    # ---- setup ----------------------------------------------------------
    def _check_params(self, named):
        ex = self.ex
        for p in ex.params:
            t = named.get(p.name)
            if t is None:
                raise _err(f"the plan is not for this module: plan param {p.name!r} "
                                    f"(plan module {ex.modules[p.module]!r}) is not a param of the module")
            if tuple(t.shape) != p.shape:
                raise _err(f"the plan is not for this module: param {p.name!r} has shape "
                                    f"{list(t.shape)} in the module but {list(p.shape)} in the plan")
            if bool(t.requires_grad) != p.requires_grad:
                raise _err(f"the plan is not for this module: param {p.name!r} has requires_grad="
                                    f"{bool(t.requires_grad)} in the module but {p.requires_grad} in the plan")
        for name in named:
            if name not in ex._by_name:
                raise _err(f"the plan is not for this module: module param {name!r} is not in the plan")
        # MXFP8 weights are e4m3 bytes plus block scales, not a float tensor
        # an nn.Parameter (and torch's kernels) could compute with
        for p in ex.params:
            if p.mxfp8:
                raise _err(f"param {p.name!r} is MXFP8 in the plan (its bucket's param_dtype is \"mxfp8\": e4m3 "
                           f"elements with e8m0 block scales, one copy) and flexplan.torch binds params as float "
                           f"nn.Parameters: give that bucket a float param_dtype (fp32, bf16, fp16), or run the plan "
                           f"with flexplan.Executor and an MXFP8 kernel over the param's views 'weight' and "
                           f"'scales' (docs/python.md)")

    def _setup(self, module, named, init, cast_forward_inputs):
        ex = self.ex
        # initial values, through the executor's refit (only this rank's extents are read)
        if init == "module":
            if any(t.is_meta for t in named.values()):
                raise _err("init='module' needs materialized params; the module is on the meta device "
                           "(pass init=[paths] or init=None and call load())", 1)
            from ._hf import from_module  # each rank copies its extents, in memory (no file)
            from_module(ex, named)
        elif init is not None and _hf_dir(init):
            from ._hf import from_hf_dir  # a Hugging Face folder, read by extent
            from_hf_dir(ex, module, init, named)
        elif init is not None:
            ex.load_weights(list(init) if not isinstance(init, (str, os.PathLike)) else [init])

        # params -> views of the arena
        old_to_new = {}
        self.params = {}  # name -> (Parameter over weight, ParamView)
        for p in ex.params:
            old = named[p.name]
            w = p.tensor("weight")
            if w.numel() != p.numel:
                raise _err(f"param {p.name!r}: this rank has no unsharded compute buffer")
            newp = nn.Parameter(w, requires_grad=p.requires_grad)
            old_to_new[id(old)] = newp
            self.params[p.name] = (newp, p)
        for m in module.modules():
            for k, t in list(m._parameters.items()):
                if t is not None and id(t) in old_to_new:
                    m._parameters[k] = old_to_new[id(t)]
        self._attach_ugrads()

        # main-weight shards for the optimizer
        self._main = []  # (Parameter over main shard, grad tensor, ParamView, pad mask or None)
        held = []
        for p in ex.params:
            held.append(float(p.shard.held))
            if not p.requires_grad:
                continue
            mt, gt = p.tensor("main"), p.tensor("grad")
            mp = nn.Parameter(mt, requires_grad=True)
            if gt.numel() and gt.dtype != mt.dtype:
                raise _err(f"param {p.name!r}: main-grad dtype {p.grad.dtype} differs from the main "
                                    f"dtype {p.main.dtype}; torch optimizers need them equal")
            mask = None
            if mt.numel() and p.shard.held != mt.numel():
                mask = torch.zeros(mt.numel(), dtype=torch.bool, device=mt.device)
                for s, _, n in p.shard.pairs():
                    mask[s:s + n] = True
            mp.grad = gt if gt.numel() == mt.numel() else None
            mp._flexplan_name = p.name
            self._main.append((mp, gt, p, mask))
        # replication of each param across ranks (hybrid replicas, no_shard,
        # replicate): counted once in norms and gathers; one collective at setup
        total = ex.all_reduce_f64(held) if held else []
        self._repl = {p.name: (total[i] / p.numel if p.numel else 1.0) for i, p in enumerate(ex.params)}

        # units: plan modules -> submodules to hook
        self.driver = Driver(ex, ex.segments, ex.modules)
        self.driver.profile = self._profile
        if self.backend == "nccl":
            self.driver.follow_stream = StreamFollower(ex, self._cuda_stream)
        self.units = []
        params_by_unit = {}
        for p in ex.params:
            params_by_unit.setdefault(p.module, []).append(p.name)
        owner_of = {}
        for mname, m in module.named_modules():
            for k, t in m._parameters.items():
                if t is not None:
                    owner_of.setdefault(id(t), mname)
        self._handles = []
        self._unit_dtype = {}
        for u, uname in enumerate(ex.modules):
            subs = None
            try:
                subs = [module.get_submodule(uname)] if uname not in ("", None) else None
            except AttributeError:
                subs = None
            if subs is None:
                names = []
                for pn in params_by_unit.get(u, []):
                    o = owner_of[id(self.params[pn][0])]
                    if o not in names:
                        names.append(o)
                if not names:
                    raise _err(f"plan module {uname!r} is neither a submodule of the module nor holds params")
                subs = [module.get_submodule(n) if n else module for n in names]
            dts = {self.params[pn][1].weight.dtype for pn in params_by_unit.get(u, [])}
            self._unit_dtype[u] = _TORCH_DTYPES.get(dts.pop()) if len(dts) == 1 else None
            self.units.append(subs)
            for i, sm in enumerate(subs):
                first, last = i == 0, i == len(subs) - 1
                self._handles.append(sm.register_forward_pre_hook(
                    self._make_pre_hook(u, first, cast_forward_inputs), with_kwargs=True))
                self._handles.append(sm.register_forward_hook(self._make_post_hook(u, last)))
        # what an evaluation forward of unit u reads: the plan params held by
        # its submodules, and those the plan says it uses (a tied weight)
        ids = {id(v[0]): n for n, v in self.params.items()}
        self._unit_params = []
        for u, subs in enumerate(self.units):
            names = list(dict.fromkeys(ids[id(t)] for sm in subs for t in sm.parameters() if id(t) in ids))
            for pn in self._plan_uses(u):
                if pn not in names:
                    names.append(pn)
            self._unit_params.append(names)
        self._binder = _ParamBinder(self, module, self.params)
        self._binder.release()  # between steps: placeholders (the views hold no full values yet)
        self._unsharded = None  # inside unshard(): {name: full tensor}
        self.eval_gathers = 0  # params gathered for evaluation forwards
        self._closed = False

    def _plan_uses(self, u):
        """Names of the params plan module u reads but another declares
        (fp_plan_module_uses)."""
        import ctypes
        ex = self.ex
        lib = ex._lib
        n = lib.fp_plan_module_uses(ex._plan_handle, u, None, 0)
        if n <= 0:
            return []
        arr = (ctypes.c_int32 * n)()
        lib.fp_plan_module_uses(ex._plan_handle, u, arr, n)
        return [ex.params[i].name for i in arr]

    def _attach_ugrads(self):
        """.grad of every trainable param = its ugrad view (made once; set
        again at each step's first forward, in case the user's zero_grad()
        or set_to_none dropped it)."""
        cache = getattr(self, "_ugrad", None)
        if cache is None:
            cache = self._ugrad = {}
            for newp, p in self.params.values():
                if p.requires_grad and p.ugrad.ptr:
                    g = p.tensor("ugrad")
                    if g.dtype == newp.dtype and g.shape == newp.shape:
                        cache[p.name] = (newp, g)
        for newp, g in cache.values():
            if newp.grad is not g:
                newp.grad = g

    # ---- module hooks -> plan events -------------------------------------
    def _event(self, kind, u):
        self.driver.event(kind, u)

    def _make_pre_hook(self, u, first, cast):
        def pre_hook(mod, args, kwargs):
            d = self.driver
            if d.in_backward:  # a recomputed forward inside backward (activation checkpointing)
                if first and torch.is_grad_enabled():
                    d.recompute_begin(u)
                return None
            evaluating = d.pos == 0 and (not torch.is_grad_enabled() or not self.module.training)
            if evaluating or self._unsharded is not None:
                self._eval_pre(u)
            else:
                if d.pos == 0:
                    self._binder.bind_views()
                    self._attach_ugrads()
                # every submodule of the unit reports it (a no-op while the unit is open): a
                # unit whose first submodule did not run still gathers before the others compute
                self._event("pre_forward", u)
            dt = self._unit_dtype.get(u)
            if cast and dt is not None and dt != torch.float32:  # mixed precision only, as FSDP2
                args, kwargs = pytree.tree_map_only(
                    torch.Tensor, lambda t: t.to(dt) if t.is_floating_point() and t.dtype != dt else t,
                    (args, kwargs))
            if first and torch.is_grad_enabled() and not evaluating:
                args, kwargs = self._post_backward_inputs(u, args, kwargs)
            return args, kwargs
        return self._timed(pre_hook)

    def _post_backward_inputs(self, u, args, kwargs):
        """The unit's inputs that need grad go through _PostBackward (its
        backward is post_backward(u)). Fast path: tensors among the
        positional and keyword arguments, and tuples/lists of tensors that
        need no grad (a decoder layer's rotary cos/sin); anything deeper
        goes through torch's pytree."""
        T = torch.Tensor
        pos, kw = [], []
        for i, a in enumerate(args):
            if isinstance(a, T):
                if a.requires_grad:
                    pos.append(i)
            elif isinstance(a, (tuple, list, dict)) and not _no_grad_leaves(a):
                return self._post_backward_pytree(u, args, kwargs)
        for k, a in kwargs.items():
            if isinstance(a, T):
                if a.requires_grad:
                    kw.append(k)
            elif isinstance(a, (tuple, list, dict)) and not _no_grad_leaves(a):
                return self._post_backward_pytree(u, args, kwargs)
        if not pos and not kw:
            return args, kwargs
        outs = _PostBackward.apply(self, u, *[args[i] for i in pos], *[kwargs[k] for k in kw])
        if len(pos) + len(kw) == 1:
            outs = (outs,)
        if pos:
            args = list(args)
            for i, t in zip(pos, outs):
                args[i] = t
            args = tuple(args)
        if kw:
            kwargs = dict(kwargs)
            for k, t in zip(kw, outs[len(pos):]):
                kwargs[k] = t
        return args, kwargs

    def _post_backward_pytree(self, u, args, kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        idx = [i for i, t in enumerate(flat) if isinstance(t, torch.Tensor) and t.requires_grad]
        if idx:
            outs = _PostBackward.apply(self, u, *[flat[i] for i in idx])
            if len(idx) == 1:
                outs = (outs,)
            for i, t in zip(idx, outs):
                flat[i] = t
            args, kwargs = pytree.tree_unflatten(flat, spec)
        return args, kwargs

    def _make_post_hook(self, u, last):
        def post_hook(mod, args, output):
            d = self.driver
            if d.in_backward:
                if last:
                    d.recompute_end(u)
                return None
            if d.pos == 0 or self._unsharded is not None:  # an evaluation forward (between steps)
                if last and torch.is_grad_enabled():
                    for t in pytree.tree_leaves(output):
                        if isinstance(t, torch.Tensor) and t.requires_grad:
                            t.register_hook(self._eval_backward)
                return None
            if last:
                self._event("post_forward", u)
                if torch.is_grad_enabled():
                    gh = grad_hook[0]
                    if isinstance(output, torch.Tensor):
                        if output.requires_grad:
                            output.register_hook(gh)
                    else:
                        for t in (output if isinstance(output, (tuple, list)) and all(
                                isinstance(o, torch.Tensor) or o is None for o in output)
                                else pytree.tree_leaves(output)):
                            if isinstance(t, torch.Tensor) and t.requires_grad:
                                t.register_hook(gh)
            return None
        grad_hook = [self._make_grad_hook(u)]
        return self._timed(post_hook)

    def _eval_pre(self, u):
        """A forward between steps (evaluation: grad disabled, or the module
        in eval mode): the unit's params get their full values (gathered
        once, kept until a training step, a refit or a gather of params
        whose bytes they share); no plan hook runs, nothing is reduced."""
        if self._unsharded is not None:
            if torch.is_grad_enabled() and self.module.training:
                raise _err("a training forward inside unshard(): leave the unshard() block first (inside it "
                           "forwards evaluate: torch.no_grad() or module.eval())", 3)
            return
        self.eval_gathers += self._binder.gather(self._unit_params[u])

    @staticmethod
    def _eval_backward(grad):
        raise _err("backward through a forward that ran as evaluation: between steps a forward under "
                   "torch.no_grad() / torch.inference_mode(), or with the module in eval mode "
                   "(module.training False), evaluates (flexplan gathers the weights and reduces nothing); "
                   "call module.train() before a training forward", 3)

    def _make_grad_hook(self, u):
        def grad_hook(grad):
            d = self.driver
            if not d.in_backward:
                d.in_backward = True
            if not d.callback_queued:
                d.callback_queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
            self._event("pre_backward", u)
            return grad
        return self._timed(grad_hook)

    def _timed(self, fn):
        if not self._profile:
            return fn
        import time
        prof = self._prof

        def timed(*a, **k):
            t0 = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                prof["python_s"] += time.thread_time() - t0
                prof["callbacks"] += 1
        return timed

    def hook_profile(self):
        """With shard(..., profile=True): host CPU time of the plan's hooks
        as this rank's thread ran them so far (time.thread_time: CPU time,
        so a busy machine that deschedules the process does not inflate
        it): {"hooks": fp_exec_hook calls, "exec_s":
        seconds inside fp_exec_hook (the executor, its waits for
        communication included), "python_s": seconds in flexplan.torch's
        module/autograd callbacks minus exec_s (the Python layer's own
        cost), "callbacks": callbacks run, and per-hook means in us}."""
        d = self.driver
        py = self._prof["python_s"] - d.exec_s_in_callbacks
        n = max(d.hook_calls, 1)
        return {"hooks": d.hook_calls, "exec_s": d.exec_s, "python_s": py, "callbacks": self._prof["callbacks"],
                "exec_us_per_hook": 1e6 * d.exec_s / n, "python_us_per_hook": 1e6 * py / n}

    def _post_backward_cb(self, u):
        if self._profile:
            return self._timed(self._event)("post_backward", u)
        self._event("post_backward", u)

    def _backward_done(self):
        if self._profile:
            return self._timed(self.driver.finish_backward)()
        self.driver.finish_backward()

    # ---- optimizer --------------------------------------------------------
    def main_params(self):
        """The Parameters an optimizer steps: this rank's main-weight shards
        (flat views of the arena, padding included; ``.grad`` the main-grad
        shard), one per trainable param of the plan, in the plan's order."""
        return [mp for mp, _, _, _ in self._main]

    def named_main_params(self):
        return [(p.name, mp) for mp, _, p, _ in self._main]

    def pre_optimizer(self):
        """Issue pre_optimizer (idempotent within a step): main grads are final."""
        self.driver.pre_optimizer()
        for mp, gt, _, _ in self._main:
            if gt.numel() == mp.numel():
                mp.grad = gt  # optimizer.zero_grad() may have set None

    def post_optimizer(self):
        """Zero the padding of the main shards (outside the extents), then
        post_optimizer (recasts to compute dtype, the shard_grad_op gathers)."""
        with torch.no_grad():
            for mp, _, _, mask in self._main:
                if mask is not None:
                    mp.masked_fill_(~mask, 0)
        self.driver.post_optimizer()
        self._binder.release()  # between steps: placeholders, or full values gathered on demand

    def _adopt_state(self, opt):
        """Make opt's per-param state the plan's optimizer-state views (see
        flexplan.torch.optimizer)."""
        kind = self.ex.optimizer
        if kind == "none":
            return
        classes, keys = _PLAN_OPTIMIZERS[kind]
        if not isinstance(opt, classes()):
            raise _err(f"the plan holds {kind} optimizer state but the optimizer is {type(opt).__name__}: "
                       f"compile with \"optimizer\": {{\"type\": ...}} for it (\"none\" leaves the state to "
                       f"the optimizer)")
        for g in opt.param_groups:
            if kind == "adamw" and g.get("amsgrad"):
                raise _err("amsgrad keeps a third state (max_exp_avg_sq) the plan does not hold: compile with "
                           "\"optimizer\": {\"type\": \"none\"} to let torch allocate it")
            if kind == "sgd" and not g.get("momentum"):
                raise _err("SGD without momentum keeps no state but the plan holds a momentum buffer: compile "
                           "with \"optimizer\": {\"type\": \"none\"}")
        views = {}
        for mp, _, p, _ in self._main:
            ts = [p.tensor(f"optim{k}") for k in range(len(keys))] if len(p.optim) == len(keys) else None
            if ts is None or any(t.numel() != mp.numel() for t in ts):
                raise _err(f"param {p.name!r}: the plan's {kind} state does not match its main shard")
            if ts[0].dtype != mp.dtype:
                raise _err(f"param {p.name!r}: the plan holds {kind} state in {p.optim[0].dtype} but torch keeps "
                           f"it in the main weights' dtype {p.main.dtype}: compile with \"optimizer\": "
                           f"{{\"type\": \"{kind}\", \"state_dtype\": \"{p.main.dtype}\"}}")
            views[mp] = dict(zip(keys, ts))
        if kind == "adamw":
            from torch.optim.optimizer import _get_scalar_dtype
            for g in opt.param_groups:
                dev_step = g.get("capturable") or g.get("fused")
                for mp in g["params"]:
                    step = torch.zeros((), dtype=_get_scalar_dtype(is_fused=bool(g.get("fused"))),
                                       device=mp.device if dev_step else "cpu")
                    opt.state[mp] = dict(views[mp], step=step)

        def adopt(o, *_):
            # after torch made or loaded state tensors of its own: copy them
            # into the plan's views and keep the views
            with torch.no_grad():
                for mp, kv in views.items():
                    s = o.state.get(mp)
                    if not s:
                        continue
                    for k, t in kv.items():
                        cur = s.get(k)
                        if cur is not None and cur is not t:
                            t.copy_(cur)
                            s[k] = t

        if kind == "sgd":
            opt.register_step_post_hook(adopt)
        opt.register_load_state_dict_post_hook(adopt)
        self._optim_views = views

    def step(self, opt, closure=None):
        """pre_optimizer, opt.step(), post_optimizer (for an optimizer over
        main_params() not made by flexplan.torch.optimizer)."""
        self.pre_optimizer()
        r = opt.step(closure) if closure is not None else opt.step()
        self.post_optimizer()
        return r

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """torch.nn.utils.clip_grad_norm_ over the sharded main grads: the
        global norm from one all-reduce of this rank's partial sum (params held
        by several ranks - hybrid replicas, no_shard, replicate - counted once).
        Issues pre_optimizer if not yet done. Returns the total norm."""
        self.pre_optimizer()
        norm_type = float(norm_type)
        local = 0.0
        with torch.no_grad():
            for mp, gt, p, mask in self._main:
                if gt.numel() == 0:
                    continue
                r = self._repl[p.name]
                g = gt.float() if mask is None else gt.float()[mask]
                if math.isinf(norm_type):
                    local = max(local, float(g.abs().max()))
                else:
                    local += float(g.abs().pow(norm_type).sum(dtype=torch.float64)) / r
        if math.isinf(norm_type):
            # max over ranks via a sum of one-hot is not possible; gather all
            vals = [0.0] * self.world_size
            vals[self.rank] = local
            total = max(self.ex.all_reduce_f64(vals))
        else:
            total = self.ex.all_reduce_f64([local])[0] ** (1.0 / norm_type)
        coef = min(float(max_norm) / (total + 1e-6), 1.0)
        if coef < 1.0:
            with torch.no_grad():
                for mp, gt, _, _ in self._main:
                    if gt.numel():
                        gt.mul_(coef)
        return torch.tensor(total)

    # ---- weights ------------------------------------------------------------
    def full_state_dict(self, dtype=None):
        """Every param as a full tensor (main dtype, or dtype) on every rank,
        gathered from the main shards in float64 by all-reduce (exact for
        fp32/bf16 values; replicated shards counted once). Collective; call it
        between steps."""
        out = {}
        for p in self.ex.params:
            buf = torch.zeros(p.numel, dtype=torch.float64)
            mt = p.tensor("main")
            for s, f, n in p.shard.pairs():
                buf[f:f + n] = mt[s:s + n].to("cpu", torch.float64)
            self.ex.all_reduce_f64_buffer(buf.data_ptr(), p.numel)
            r = self._repl[p.name]
            if r != 1.0:
                buf /= r
            dt = dtype or _TORCH_DTYPES.get(p.main.dtype, torch.float32)
            out[p.name] = buf.to(dt).view(p.shape)
        return out

    def save(self, path, dtype=None):
        """Save the model as one safetensors file of full tensors, written by
        rank 0 (atomically: a temporary file renamed); it loads back through
        load() (the executor's refit) or into a plain torch module.
        Collective."""
        sd = self.full_state_dict(dtype)
        if self.rank == 0:
            from safetensors.torch import save_file
            tensors = {k: v.contiguous() for k, v in sd.items()}
            if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
                save_file(tensors, path, metadata={"format": "pt"})  # a device or FIFO: in place
            else:
                tmp = f"{path}.tmp{os.getpid()}"
                save_file(tensors, tmp, metadata={"format": "pt"})
                os.replace(tmp, path)
        self.ex.all_reduce_f64([0.0])  # every rank returns once the file exists
        return path

    def load(self, paths):
        """Load full-tensor safetensors files through the executor's refit
        (between steps; each rank reads only its extents)."""
        self.ex.load_weights(paths)
        self._binder.release()

    @contextlib.contextmanager
    def unshard(self):
        """Between steps: every param of the module holds its full value (an
        ``nn.Parameter`` of the param's shape, dtype and device), readable and
        writable, as FSDP2's ``unshard()`` gives; forwards inside evaluate
        (no plan hook). When the block ends, the elements that changed (on
        any rank) go back to the main weights on every rank, as init="module"
        writes them (each rank its extents; persistent compute copies
        recast); elements that did not change keep their main value (fp32
        under bf16 compute). Collective: every rank enters and leaves it."""
        if self._closed:
            raise _err("unshard() on a closed flexplan state", 1)
        if self._unsharded is not None:
            raise _err("unshard() inside unshard()", 3)
        if self.driver.pos != 0:
            raise _err(f"unshard() inside a training step (the plan expects {self.driver._label(self.driver.pos)} "
                       f"next): call it between steps, after the optimizer step", 3)
        if self.backend == "nccl":
            self.ex.sync()
        pvs = self.ex.params
        full = gather_full(self, pvs)
        tensors, orig, mains = {}, {}, {}
        for p, t in zip(pvs, full):
            view = self.params[p.name][0]
            mains[p.name] = t.to(_TORCH_DTYPES.get(p.main.dtype, torch.float32)).view(p.shape)
            val = t.to(view.dtype).view(p.shape).to(view.device)
            orig[p.name] = val.clone()
            tensors[p.name] = nn.Parameter(val, requires_grad=p.requires_grad)
        self._binder.bind(tensors)
        self._unsharded = tensors
        try:
            yield self
        finally:
            self._unsharded = None
            merged, changed = {}, 0
            for p in pvs:
                cur = self._binder.current(p.name)
                m = mains[p.name]
                if isinstance(cur, torch.Tensor) and tuple(cur.shape) == p.shape:
                    cur = cur.detach().to("cpu")
                    diff = cur != orig[p.name].cpu()
                    if bool(diff.any()):
                        changed += 1
                        m = torch.where(diff, cur.to(m.dtype), m)
                merged[p.name] = m.contiguous()
            self._binder.release()
            if self.ex.all_reduce_f64([float(changed)])[0]:
                from ._hf import from_module
                from_module(self.ex, merged)  # each rank its extents, persistent compute copies too

    # ---- misc -----------------------------------------------------------------
    def stats(self):
        s = self.ex.stats()
        s["python_hook_calls"] = self.driver.hook_calls
        s["python_recomputes"] = self.driver.recomputes
        s["eval_gathers"] = self.eval_gathers
        s["python_hooks_skipped"] = self.driver.skipped
        return s

    def sync(self):
        self.ex.sync()

    def timing_start(self, steps):
        """Record the next `steps` steps' hooks and ops as this rank ran them
        (Executor.timing_start); write them with timing_write(path) and draw
        them with `flexplan viz PLAN --measured FILE...`."""
        self.ex.timing_start(steps)

    def timing_write(self, path):
        self.ex.timing_write(path)

    def close(self):
        """Remove the hooks and destroy the executor (collective). The module's
        params stay views of freed memory: do not use the module afterwards."""
        if self._closed:
            return
        self._closed = True
        for h in self._handles:
            h.remove()
        self._binder.closed = True
        self._binder.release()  # the views' memory is freed below: placeholders raise
        self.ex.destroy()
        self.module._flexplan_state = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


_abort_installed = False


def _hf_dir(init):
    return isinstance(init, (str, os.PathLike)) and os.path.isdir(init)


def _install_abort_on_error():
    """An exception that ends this rank's program must end every rank: the
    others would wait forever in the plan's next collective. sys.excepthook
    prints the traceback, then calls MPI_Abort (fp_mpi_abort), as torchrun
    tears a job down when one worker fails."""
    global _abort_installed
    if _abort_installed:
        return
    _abort_installed = True
    import sys
    prev = sys.excepthook

    def hook(tp, val, tb):
        try:
            prev(tp, val, tb)
            sys.stderr.write("flexplan.torch: an uncaught exception on this rank: aborting every rank (MPI_Abort)\n")
            sys.stderr.flush()
        finally:
            from ..executor import mpi_abort
            mpi_abort(1)
    sys.excepthook = hook


# the torch optimizers whose element-wise state a plan's optimizer holds:
# plan optimizer -> (optimizer classes, state keys in the plan's order)
_PLAN_OPTIMIZERS = {
    "adamw": (lambda: (torch.optim.Adam, torch.optim.AdamW), ("exp_avg", "exp_avg_sq")),
    "sgd": (lambda: (torch.optim.SGD,), ("momentum_buffer",)),
}


def optimizer(model_or_state, cls, *args, **kwargs):
    """cls(main_params(), *args, **kwargs) with pre_optimizer / post_optimizer
    hooked around every step(): state sized for this rank's shards only.

    Where the plan holds optimizer state (spec "optimizer"; AdamW by
    default), the optimizer's state tensors are the plan's views in the
    arena, never allocations of their own: exp_avg / exp_avg_sq for
    torch.optim.Adam and AdamW, momentum_buffer for SGD with momentum
    (torch makes the first one from the first grad; it is copied into the
    arena after that step, and load_state_dict copies into the views too).
    A class the plan's optimizer does not describe, or state of another
    dtype than the main weights, is a FlexplanError: the plan's memory
    figures would not be what the run uses. A plan with optimizer "none"
    leaves the state to the optimizer."""
    st = state(model_or_state)
    opt = cls(st.main_params(), *args, **kwargs)
    st._adopt_state(opt)
    opt.register_step_pre_hook(lambda o, a, k: st.pre_optimizer())
    opt.register_step_post_hook(lambda o, a, k: st.post_optimizer())
    return opt


def clip_grad_norm_(model_or_state, max_norm, norm_type=2.0):
    """Clip the sharded grads of a sharded module to a global norm (one
    all-reduce); returns the total norm, as torch.nn.utils.clip_grad_norm_."""
    return state(model_or_state).clip_grad_norm_(max_norm, norm_type)


class StreamFollower:
    """NCCL backend, the stream contract (docs/torch.md): called before every
    hook, it hands torch's current stream to the executor when it changed
    (``torch.cuda.stream(s)`` around a step, another stream per step), so the
    plan's records and waits are always on the stream torch computes on: the
    executor orders the new stream after everything issued on the old one.
    Torch's default stream (handle 0) is CUDA's legacy default stream."""

    def __init__(self, ex, stream, current=None):
        self.ex = ex
        self.stream = stream
        self.current = current or (lambda: torch.cuda.current_stream().cuda_stream)

    def __call__(self):
        s = self.current()
        if s != self.stream:
            self.ex.set_cuda_stream(s)
            self.stream = s


def _nccl_setup(rank, world_size):
    """NCCL backend: rank and world from torch.distributed's env (RANK,
    WORLD_SIZE), torch's current stream as the plan's compute stream. Written
    for GPUs; not run on the development machine (no GPU)."""
    import torch.distributed as dist
    if rank is None:
        rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
    if world_size is None:
        world_size = dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))
    nccl_id = None
    if dist.is_initialized() and world_size > 1:
        # rank 0 makes the NCCL id, torch.distributed ships it (FP_NCCL_BOOT_ID)
        from ..executor import nccl_get_id
        box = [nccl_get_id() if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        nccl_id = box[0]
    return rank, world_size, torch.cuda.current_stream().cuda_stream, nccl_id
