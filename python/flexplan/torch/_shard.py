"""flexplan.torch.shard and what it returns: train a torch.nn.Module on a
compiled plan (docs/torch.md).

``shard(module, plan)`` makes every param of the module a view of the
executor's arena and drives the plan's hooks from the module's own hooks
(FSDP2's ``fully_shard`` vocabulary where it fits: units are what FSDP calls
the modules it wraps; flexplan calls them modules). The state it returns,
``Sharded``, is a small facade over one object per concern:

- ``_setup``: the plan checked against the module, initial values, params
  made views of the arena, the units;
- ``_hooks.Hooks``: every module and autograd hook, registered in one place;
  they report events to ``_driver.Driver``, the C library's hook driver
  (``fp_driver_*``), which calls the plan's hooks in plan order;
- ``_params._ParamBinder``: what each module slot holds inside and outside
  a step (views, placeholders, evaluation gathers, ``unshard()`` copies);
- ``_optim.MainShards``: the main-weight shards an optimizer steps, the
  optimizer state the plan holds, clip_grad_norm_.
"""
import contextlib
import os
import weakref
from typing import Any, Callable, Dict, Iterator, List, Literal, Optional, Sequence, Tuple, Type, Union

import torch
from torch import nn
from torch.optim import optimizer as _optimizer_mod

from .. import _lib
from ..errors import ArgumentTypeError, ArgumentValueError, error_maker, FlexplanError
from ..executor import Executor, mpi_init, safetensors_names
from . import _setup, _tp
from ._driver import Driver
from ._capture import StepCapture
from ._hooks import Hooks, StreamFollower
from ._optim import MainShards
from ._params import GradGone, _ParamBinder, gather_full

__all__ = ["shard", "Sharded", "optimizer", "clip_grad_norm_", "state", "abandon_step"]

# the choices, as the C enums name them (flexplan._lib)
_BACKENDS, _PROGRESS, _CUDA_MODES = tuple(_lib.BACKENDS), tuple(_lib.PROGRESS), tuple(_lib.CUDA_MODES)


_err = error_maker(_lib.FP_ERR_PLAN)  # the package's one error helper (flexplan.errors)


def state(obj: Union[nn.Module, "Sharded"], what: str = "model_or_state") -> "Sharded":
    """The Sharded state of a module given to shard() (or the state itself);
    what: the argument's name in errors."""
    if isinstance(obj, Sharded):
        obj._live(what)
        return obj
    if not isinstance(obj, nn.Module):
        raise ArgumentTypeError(f"{what}: expected a torch.nn.Module sharded by flexplan.torch.shard or a Sharded "
                                f"state, got {type(obj).__name__}")
    st = getattr(obj, "_flexplan_state", None)
    if st is None:
        if getattr(obj, "_flexplan_closed", False):
            raise _err(f"{what}: the module's flexplan state is closed (Sharded.close() destroyed its executor and "
                       f"its params hold no values)", _lib.FP_ERR_ARG)
        raise _err("not a module sharded by flexplan.torch.shard", _lib.FP_ERR_ARG)
    return st


_OPT_HOOK: List[Any] = []  # the global optimizer pre-hook, registered at the first shard()


def _refuse_module_params(opt, args, kwargs):
    """Every torch optimizer's step (a global pre-hook): one built over a
    sharded module's own params (FSDP2's habit, model.parameters()) would
    step the unsharded compute buffers the plan overwrites: refused at its
    first step, before it touches anything."""
    for g in opt.param_groups:
        for p in g["params"]:
            name = getattr(p, "_flexplan_view", None)
            if name is not None:
                raise _err(f"this {type(opt).__name__} steps the sharded module's own param {name!r} "
                           f"(model.parameters()): under flexplan the optimizer steps the main-weight shards; "
                           f"build it with flexplan.torch.optimizer(model, {type(opt).__name__}, ...)",
                           _lib.FP_ERR_ARG)


def _check_args(module, plan, backend, rank, world_size, progress, init, cuda_mode):
    """Argument errors name the argument: TypeError for a wrong type,
    ValueError for a value outside the choices."""
    from ..plan import Plan  # pylint: disable=import-outside-toplevel
    if not isinstance(module, nn.Module):
        raise ArgumentTypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(plan, (Plan, str, os.PathLike)):
        raise ArgumentTypeError(f"plan: expected a flexplan.Plan or a plan.json path, got {type(plan).__name__}")
    if backend is not None and not isinstance(backend, str):
        raise ArgumentTypeError(f"backend: expected a str or None, got {type(backend).__name__}")
    if backend is not None and backend not in _BACKENDS:
        raise ArgumentValueError(f"backend: expected one of {', '.join(_BACKENDS)}, got {backend!r}")
    for name, v in (("rank", rank), ("world_size", world_size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ArgumentTypeError(f"{name}: expected an int or None, got {type(v).__name__}")
    if rank is not None and rank < 0:
        raise ArgumentValueError(f"rank: must be >= 0, got {rank}")
    if world_size is not None and world_size < 1:
        raise ArgumentValueError(f"world_size: must be >= 1, got {world_size}")
    if not isinstance(progress, str) or progress not in _PROGRESS:
        if not isinstance(progress, str):
            raise ArgumentTypeError(f"progress: expected a str, got {type(progress).__name__}")
        raise ArgumentValueError(f"progress: expected one of {', '.join(_PROGRESS)}, got {progress!r}")
    if not isinstance(cuda_mode, str):
        raise ArgumentTypeError(f"cuda_mode: expected a str, got {type(cuda_mode).__name__}")
    if cuda_mode not in _CUDA_MODES:
        raise ArgumentValueError(f"cuda_mode: expected one of {', '.join(_CUDA_MODES)}, got {cuda_mode!r}")
    if init is not None and init != "module" and not isinstance(init, (str, os.PathLike)):
        if not isinstance(init, (list, tuple)) or not all(isinstance(p, (str, os.PathLike)) for p in init):
            raise ArgumentTypeError(f"init: expected \"module\", a folder or file path, a list of paths, or None, "
                                    f"got {type(init).__name__}")


def shard(module: nn.Module, plan: Any, *, backend: Optional[str] = None, rank: Optional[int] = None,
          world_size: Optional[int] = None, progress: str = "default",
          init: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]], None] = "module",
          cast_forward_inputs: bool = True, cuda_mode: str = "graph", profile: bool = False,
          mesh: Any = None) -> "Sharded":
    """Shard ``module`` with a compiled plan; returns a ``Sharded`` state (also
    at ``module._flexplan_state``). The module itself is trained in place:
    call it, call ``loss.backward()``, then step an optimizer made by
    ``flexplan.torch.optimizer`` (or ``Sharded.step(opt)``).

    plan: a ``flexplan.Plan`` or a plan.json path, for exactly this module's
      params (names as ``named_parameters()`` gives them, shapes,
      ``requires_grad``): another model's plan raises FlexplanError naming the
      first param that does not match.
    backend: "torch" (CPU tensors over the host arena, the plan's collectives
      on torch.distributed process groups: a script launched by torchrun;
      rank and world from torch.distributed), "mpi" (CPU tensors over the
      host arena; rank and world from MPI, initialized here when needed) or
      "nccl" (CUDA tensors over the device arena; rank and world from
      torch.distributed's env, NCCL's id shipped over it; torch's current
      stream becomes the plan's compute stream). None (the default): "nccl"
      when torch.distributed is initialized on NCCL and CUDA is available,
      "torch" when it is initialized otherwise and the process was not
      started by mpirun, else "mpi" (docs/torch.md, "Launching with
      torchrun").
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
    mesh: for a plan with a tp dimension, the ("dp", "tp") DeviceMesh the
      module was parallelized on (or its "tp" submesh); None takes the tp
      mesh from the module's DTensor params. Checked against the plan (sizes,
      tp innermost) and the params' placements (docs/torch.md, "FSDP x TP").

    Wrong argument types raise TypeError, values outside the choices
    ValueError, each naming the argument."""
    _check_args(module, plan, backend, rank, world_size, progress, init, cuda_mode)
    if backend is None:
        backend = _setup.default_backend()
    if getattr(module, "_flexplan_state", None) is not None:
        raise _err("module is already sharded", _lib.FP_ERR_ARG)
    if getattr(module, "_flexplan_closed", False):
        raise _err("module was sharded before and its state closed (Sharded.close()): its params are placeholders "
                   "that hold no values; shard a new module (with its weights) instead", _lib.FP_ERR_ARG)
    return Sharded(module, plan, backend=backend, rank=rank, world_size=world_size, progress=progress,
                   init=init, cast_forward_inputs=bool(cast_forward_inputs), cuda_mode=cuda_mode,
                   profile=bool(profile), mesh=mesh)


class Sharded:
    """The state of one sharded module: its executor (``ex``), the hook
    driver (``driver``), the param views (``params``: name -> (Parameter,
    ParamView)) and the main-weight shards. Public methods: main_params(),
    named_main_params(), step(optimizer), pre_optimizer(),
    post_optimizer(), clip_grad_norm_(max_norm), full_state_dict(),
    save(path), load(paths), unshard(), stats(), hook_profile(), sync(),
    timing_start(steps), timing_write(path), graphs_live(), release_graph(),
    close() (docs/torch.md, "One graph per step": inside torch.cuda.graph)."""

    def __init__(self, module: nn.Module, plan: Any, *, backend: str, rank: Optional[int], world_size: Optional[int],
                 progress: str, init: Any, cast_forward_inputs: bool, cuda_mode: str, profile: bool = False,
                 mesh: Any = None) -> None:
        self.module = module
        self.backend = backend
        self._closed = True  # until set up
        named = dict(module.named_parameters())
        cuda_stream = nccl_id = None
        if backend == "nccl":
            rank, world_size, cuda_stream, nccl_id = _setup.nccl_setup(rank, world_size)
        elif backend == "torch":
            rank, world_size = _setup.dist_rank_world(rank, world_size)
        elif rank is None or world_size is None:
            r, w = mpi_init()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        self.rank, self.world_size = rank, world_size
        if backend == "mpi":
            # before anything collective: a rank failing in setup must not leave
            # the others in the setup's collectives
            _setup.install_abort_on_error()
        self.ex = ex = Executor(plan, rank, world_size, backend=backend, progress=progress,
                                cuda_stream=cuda_stream, cuda_mode=cuda_mode, nccl_id=nccl_id)
        self.driver: Any = None
        self._capture = StepCapture(self, cuda_mode)
        try:
            _setup.check_params(ex, named)
            _tp.refuse_sequence_parallel(module)
            self.tp_mesh = _tp.check(ex, named, mesh)
            _setup.init_values(ex, module, named, init)
            self.params = _setup.make_views(ex, module, named)
            self._ugrads = [(newp, p.tensor("ugrad")) for newp, p in self.params.values()
                            if p.requires_grad and p.ugrad.ptr]
            # a tensor-parallel param's .grad: a DTensor like it over the ugrad (autograd adds in place)
            self._ugrads = [(newp, _tp.wrap(g, newp, ex._hand_out) if _tp.is_dtensor(newp) else g)
                            for newp, g in self._ugrads
                            if g.dtype == newp.dtype and tuple(g.shape) == tuple(_tp.local(newp).shape)]
            names = {id(newp): pv.name for newp, pv in self.params.values()}
            # after a backward, each .grad is a placeholder that raises (GradGone): the bytes are reused
            # (a tensor-parallel param's: a DTensor like its grad over a placeholder local tensor)
            self._gone = [(newp, _tp.wrap(GradGone(_tp.local(g), names[id(newp)]), newp) if _tp.is_dtensor(newp)
                           else GradGone(g, names[id(newp)])) for newp, g in self._ugrads]
            self._grads_gone = False
            self._fwd_open = False  # a training forward of this micro-batch ran; its backward has not ended
            self._fwd_first = -1  # the unit that forward started at
            self._begin_step_grads()
            self._shards = MainShards(ex)
            self._repl = self._shards.repl
            self.driver = Driver.create(ex)
            self.driver.set_profile(profile)
            if backend == "nccl":
                self.driver.follow_stream = StreamFollower(ex, cuda_stream)
            self.units, unit_dtype, self._unit_params = _setup.find_units(ex, module, self.params,
                                                                          cast_forward_inputs)
            self._hooks = Hooks(self, self.driver, self.units, unit_dtype,
                                _setup.backward_chain(ex.segments, len(ex.modules)),
                                _setup.forward_next(ex.segments, len(ex.modules)), profile)
            self._hooks.register()
            self._binder = _ParamBinder(self, module, self.params)
            self._binder.release()  # between steps: placeholders (the views hold no full values yet)
            # (slot dict, key, view, its ugrad or None): what _begin_step binds (every view is the
            # param of some module slot: make_views put it there)
            ug = {id(newp): g for newp, g in self._ugrads}
            self._step_slots = [(d, k, t, ug.get(id(t))) for d, k, t in self._binder._view_slots]
        except BaseException:
            if self.driver is not None:
                self.driver.close()
            ex.destroy()
            raise
        self._unsharded: Optional[Dict[str, Any]] = None  # inside unshard(): {name: full tensor}
        self.eval_gathers = 0  # params gathered for evaluation forwards
        self._closed = False
        setattr(module, "_flexplan_state", self)  # (setattr: nn.Module's attributes are typed as tensors)
        self._sd_hook = module.register_state_dict_pre_hook(self._state_dict_pre)
        me = weakref.ref(self)
        for mp in self._shards.params():
            mp._flexplan_owner = me
        for newp, pv in self.params.values():
            newp._flexplan_view = pv.name
        for n, h in self._binder.holders.items():
            h._flexplan_view = n
        if not _OPT_HOOK:
            _OPT_HOOK.append(_optimizer_mod.register_optimizer_step_pre_hook(_refuse_module_params))

    # ---- lifetime -------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def _live(self, what: str) -> None:
        """FlexplanError naming `what` once close() ran."""
        if self._closed:
            raise _err(f"{what}: the flexplan state is closed (Sharded.close() destroyed its executor): its views, "
                       f"optimizer state and checkpoints are gone", _lib.FP_ERR_ARG)

    # ---- an abandoned step -----------------------------------------------------------
    def _abandoned_error(self, u, e):
        """The driver refused a forward's pre_forward(u): where the previous
        forward of this micro-batch ran and no backward followed, that is
        the cause, and abandon_step() the way out; else the driver's own
        message."""
        if not (isinstance(e, FlexplanError) and e.status_name == "FP_ERR_ORDER" and self._fwd_open and
                u == self._fwd_first and not self.driver.state.in_backward):
            return e
        return _err(f"a forward reached {self.ex.modules[u]!r} again, where the previous forward started: the "
                    f"previous step's forward ran and its backward never did (an exception between the forward "
                    f"and loss.backward()?): call flexplan.torch.abandon_step(model) (Sharded.abandon_step()) to "
                    f"drop that step and start a new one (or the model runs {self.ex.modules[u]!r} twice in one "
                    f"forward, which the plan does not allow). The hook driver said: {e}", _lib.FP_ERR_ORDER)

    def abandon_step(self) -> None:
        """Drop a step whose forward ran but whose backward never did (or
        never finished), e.g. after an exception in the loss: the plan's
        remaining hooks run with nothing computed (zero grads, no optimizer
        step), so the main weights and the optimizer state stay as they were
        before the step, and the next forward starts a new step. A no-op
        between steps. Collective: every rank calls it at the same point (as
        every rank ran the abandoned forward)."""
        self._live("abandon_step")
        d, segs, ev = self.driver.state, self.ex.segments, self.driver.event
        pre_opt = len(segs) - 2
        events = {"pre_forward": _lib.FP_EVENT_PRE_FORWARD, "post_forward": _lib.FP_EVENT_POST_FORWARD,
                  "pre_backward": _lib.FP_EVENT_PRE_BACKWARD, "post_backward": _lib.FP_EVENT_POST_BACKWARD}
        if d.pos == 0:
            self._fwd_open = False
            return
        while 0 < d.pos < pre_opt:
            kind, m, mb, _ = segs[d.pos]
            before = d.pos
            ev(events[kind], m)
            if d.in_backward and (d.pos == 0 or d.pos >= pre_opt or segs[d.pos][2] != mb):
                ev(_lib.FP_EVENT_BACKWARD_DONE, -1)  # the micro-batch's backward is over
            if d.pos == before:
                raise _err(f"abandon_step: the plan does not move past {self.driver.label(before)}",
                           _lib.FP_ERR_ORDER)
        if d.pos == pre_opt:
            self.pre_optimizer()
        if d.pos == pre_opt + 1:
            self.post_optimizer()  # no optimizer step between: the main weights are the step's start
        self._fwd_open = False
        self._hooks.last_out = None

    # ---- what the hooks call -------------------------------------------------------
    def _begin_step_grads(self):
        """.grad of every trainable param = its ugrad view (set again at each
        step's first forward, in case the user's zero_grad() dropped it, and
        at each micro-batch's after _drop_grads)."""
        for newp, g in self._ugrads:
            if newp.grad is not g:
                newp.grad = g
        self._grads_gone = False

    def _drop_grads(self):
        """The end of a backward: the plan has reduced the unsharded grads
        into the main-grad shards and reuses their bytes, so each .grad
        becomes a placeholder that raises on use (torch.nn.utils
        .clip_grad_norm_ over model.parameters() would read other buffers'
        bytes and scale them in place)."""
        for newp, ph in self._gone:
            newp.grad = ph
        self._grads_gone = True

    def _state_dict_pre(self, module, prefix, keep_vars):
        """module.state_dict() (torch.save(model.state_dict()), FSDP2's habit)
        outside unshard(): refused before anything is written; flexplan's own
        readers ask with keep_vars=True."""
        if keep_vars or self._unsharded is not None or self._closed:
            return
        raise _err("model.state_dict() of a sharded module: its params' values are spread over the ranks' main "
                   "shards. Save with flexplan.torch.state_dict(model) (torch.distributed.checkpoint), "
                   "Sharded.full_state_dict() or Sharded.save(path); or take it inside `with state.unshard():`",
                   _lib.FP_ERR_ARG)

    def _begin_step(self):
        """The step's first training forward: every slot holds its view, every
        view's .grad its ugrad (one pass over the slots: this runs in the
        first forward pre-hook of every step). Inside torch.cuda.graph the
        step is captured whole (_capture.StepCapture: refused here, before
        anything is issued, when it cannot be)."""
        self._capture.step_begin()
        b = self._binder
        if b.bound_views:
            self._begin_step_grads()
            return
        for d, k, t, g in self._step_slots:
            d[k] = t
            if g is not None and t.grad is not g:
                t.grad = g
        b.bound_views = True
        self._grads_gone = False

    def _eval_pre(self, u):
        """A forward between steps (evaluation: grad disabled, or the module
        in eval mode): the unit's params get their full values (gathered
        once, kept until a training step, a refit or a gather of params
        whose bytes they share); no plan hook runs, nothing is reduced."""
        if self._unsharded is not None:
            if torch.is_grad_enabled() and self.module.training:
                raise _err("a training forward inside unshard(): leave the unshard() block first (inside it "
                           "forwards evaluate: torch.no_grad() or module.eval())", _lib.FP_ERR_ORDER)
            return
        self.eval_gathers += self._binder.gather(self._unit_params[u])

    def hook_profile(self) -> Dict[str, float]:
        """With shard(..., profile=True): host time of the plan's hooks as
        this rank's thread ran them so far (time.perf_counter and the C
        driver's CLOCK_MONOTONIC, both read without a system call: the
        thread's CPU clock costs a system call per reading, which also cools
        the caches of the code measured; a process descheduled inside a
        callback counts as busy, so profile on an idle machine):
        {"hooks": fp_exec_hook calls, "exec_s": seconds inside
        fp_exec_hook (the executor, its waits for communication included;
        the driver measures it in C), "python_s": seconds in flexplan.torch's
        module/autograd callbacks minus the executor's share of them (the
        Python layer's own cost), "callbacks": callbacks run, and per-hook
        means in us}."""
        d = self.driver.state
        py = self._hooks.python_s - (d.exec_s - d.exec_step_s)
        n = max(int(d.hooks), 1)
        return {"hooks": int(d.hooks), "exec_s": float(d.exec_s), "python_s": py, "callbacks": self._hooks.callbacks,
                "exec_us_per_hook": 1e6 * d.exec_s / n, "python_us_per_hook": 1e6 * py / n}

    # ---- optimizer --------------------------------------------------------------------
    def main_params(self) -> List[nn.Parameter]:
        """The Parameters an optimizer steps: this rank's main-weight shards
        (flat views of the arena, padding included; ``.grad`` the main-grad
        shard), one per trainable param of the plan, in the plan's order."""
        self._live("main_params")
        return self._shards.params()

    def named_main_params(self) -> List[Tuple[str, nn.Parameter]]:
        self._live("named_main_params")
        return self._shards.named()

    def pre_optimizer(self) -> None:
        """Issue pre_optimizer (idempotent within a step): main grads are final."""
        self._live("pre_optimizer (an optimizer step)")
        self.driver.event(_lib.FP_EVENT_PRE_OPTIMIZER)
        self._shards.attach_grads()

    def post_optimizer(self) -> None:
        """Zero the padding of the main shards (outside the extents), then
        post_optimizer (recasts to compute dtype, the shard_grad_op gathers)."""
        self._live("post_optimizer")
        self._shards.zero_padding()
        self.driver.event(_lib.FP_EVENT_POST_OPTIMIZER)
        self._capture.step_end()  # a captured step: the plan's streams joined back
        self._binder.release()  # between steps: placeholders, or full values gathered on demand

    def _adopt_state(self, opt):
        self._shards.adopt_state(opt)

    @property
    def _optim_views(self):
        """{main param: {state key: view}} the optimizer adopted ({} when none did)."""
        return self._shards.views or {}

    def step(self, opt: torch.optim.Optimizer, closure: Optional[Callable[[], Any]] = None) -> Any:
        """pre_optimizer, opt.step(), post_optimizer (for an optimizer over
        main_params() not made by flexplan.torch.optimizer)."""
        self._live("step")
        if not isinstance(opt, torch.optim.Optimizer):
            raise ArgumentTypeError(f"opt: expected a torch.optim.Optimizer, got {type(opt).__name__}")
        mine = {id(p) for p in self.main_params()}
        other = [p for g in opt.param_groups for p in g["params"] if id(p) not in mine]
        if other:
            owner = getattr(other[0], "_flexplan_owner", None)
            whose = ("another sharded module's state (its params are that Sharded's main_params())"
                     if owner is not None and owner() is not None and owner() is not self else
                     "params that are not this state's main_params()")
            raise _err(f"step: the optimizer steps {whose}: build it with flexplan.torch.optimizer(model, cls, ...) "
                       f"of this module", _lib.FP_ERR_ARG)
        if closure is not None and not callable(closure):
            raise ArgumentTypeError(f"closure: expected a callable or None, got {type(closure).__name__}")
        self.pre_optimizer()
        r = opt.step(closure) if closure is not None else opt.step()
        self.post_optimizer()
        return r

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """torch.nn.utils.clip_grad_norm_ over the sharded main grads: the
        global norm from one all-reduce of this rank's partial sum (params held
        by several ranks - hybrid replicas, no_shard, replicate - counted once).
        Issues pre_optimizer if not yet done. Returns the total norm."""
        self._live("clip_grad_norm_")
        max_norm, norm_type = _positive("max_norm", max_norm), _positive("norm_type", norm_type)
        self.pre_optimizer()
        if self._capture.in_capture():  # one graph per step: no host wait, the same bits (_optim.py)
            return self._shards.clip_grad_norm_device(max_norm, norm_type)
        return torch.tensor(self._shards.clip_grad_norm_(max_norm, norm_type, self.rank, self.world_size))

    # ---- weights ------------------------------------------------------------
    def full_state_dict(self, dtype: Optional[torch.dtype] = None) -> Dict[str, torch.Tensor]:
        """Every param as a full tensor (main dtype, or dtype) on every rank,
        gathered from the main shards in float64 by all-reduce (exact for
        fp32/bf16 values; replicated shards counted once); on a mesh with tp,
        the global tensors (every tp rank's slice in place). Collective; call
        it between steps."""
        self._live("full_state_dict")
        out = {}
        for p in self.ex.params:  # one param at a time: one float64 copy of the largest at most
            dt = dtype or _lib.torch_dtype(p.main.dtype, torch.float32)
            out[p.name] = gather_full(self, [p])[0].to(dt).view(p.global_shape)
        return out

    def save(self, path: Union[str, os.PathLike], dtype: Optional[torch.dtype] = None) -> Union[str, os.PathLike]:
        """Save the model as one safetensors file of full tensors, written by
        rank 0 (atomically: a temporary file synced and renamed), with the
        CRC-32 of every MiB of its data in its metadata; it loads back
        through load() (the executor's refit, which checks the checksums) or
        into a plain torch module. Collective."""
        self._live("save")
        sd = self.full_state_dict(dtype)
        if self.rank == 0:  # with a CRC-32 per MiB of data, which every load checks (_stfile)
            from . import _stfile
            _stfile.save(path, sd, {"format": "pt"})
        self.ex.all_reduce_f64([0.0])  # every rank returns once the file exists
        return path

    def load(self, paths: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]) -> None:
        """Load full-tensor safetensors files through the executor's refit
        (between steps; each rank reads only its extents). A tensor the
        module does not have is refused, naming it (as a Hugging Face folder
        at init is)."""
        self._live("load")
        if self.ex.tp > 1:
            raise _err("load(): the files hold global tensors and the refit reads whole params, so a plan with tp "
                       "cannot load them yet: load a torch.distributed.checkpoint (flexplan.torch.load_state_dict) "
                       "or use unshard()", _lib.FP_ERR_ARG)
        files = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        known = set(self.params) | set(self.module.state_dict(keep_vars=True))
        for f in files:
            if not isinstance(f, (str, os.PathLike)) or not os.path.isfile(f):
                break  # the executor's refit names the bad argument or the missing file
            extra = [n for n in safetensors_names(f) if n not in known]
            if extra:
                raise _err(f"load: {os.fspath(f)} holds {len(extra)} tensor(s) the module does not have: "
                           f"{', '.join(extra[:8])}" + (" ..." if len(extra) > 8 else ""), _lib.FP_ERR_WEIGHTS)
        self.ex.load_weights(paths)
        self._binder.release()

    @contextlib.contextmanager
    def unshard(self) -> Iterator["Sharded"]:
        """Between steps: every param of the module holds its full value (an
        ``nn.Parameter`` of the param's shape, dtype and device), readable and
        writable, as FSDP2's ``unshard()`` gives; forwards inside evaluate
        (no plan hook). When the block ends, the elements that changed (on
        any rank) go back to the main weights on every rank, as init="module"
        writes them (each rank its extents; persistent compute copies
        recast); elements that did not change keep their main value (fp32
        under bf16 compute). Collective: every rank enters and leaves it."""
        if self._closed:
            raise _err("unshard() on a closed flexplan state", _lib.FP_ERR_ARG)
        if self._unsharded is not None:
            raise _err("unshard() inside unshard()", _lib.FP_ERR_ORDER)
        if self.driver.pos != 0:
            raise _err(f"unshard() inside a training step (the plan expects {self.driver.label(self.driver.pos)} "
                       f"next): call it between steps, after the optimizer step", _lib.FP_ERR_ORDER)
        if self.backend == "nccl":
            self.ex.sync()
        pvs = self.ex.params
        full = gather_full(self, pvs, local=True)  # a tensor-parallel param: its tp-local slice, whole over dp
        tensors, orig, mains = {}, {}, {}
        for p, t in zip(pvs, full):
            view = self.params[p.name][0]
            mains[p.name] = t.to(_lib.torch_dtype(p.main.dtype, torch.float32)).view(p.shape)
            val = t.to(view.dtype).view(p.shape).to(view.device)
            orig[p.name] = val.clone()
            tensors[p.name] = nn.Parameter(_tp.wrap(val, view) if _tp.is_dtensor(view) else val,
                                           requires_grad=p.requires_grad)
        self._binder.bind(tensors)
        self._unsharded = tensors
        try:
            yield self
        finally:
            self._unsharded = None
            merged, changed = {}, 0
            for p in pvs:
                cur = self._binder.current(p.name)
                cur = _tp.local(cur) if _tp.is_dtensor(cur) else cur
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
    def stats(self) -> Dict[str, Any]:
        """The executor's statistics (Executor.stats) and the driver's:
        python_hook_calls (fp_exec_hook calls the driver made),
        python_recomputes (recomputed forwards told to the executor),
        python_hooks_skipped (empty segments never called), eval_gathers
        (params gathered for evaluation forwards),
        python_post_backward_functions (identity autograd functions applied
        to units' inputs: units whose post_backward is not inferred from the
        next unit's pre_backward)."""
        s = self.ex.stats()
        d = self.driver.state
        s["python_hook_calls"] = int(d.hooks)
        s["python_recomputes"] = int(d.recomputes)
        s["eval_gathers"] = self.eval_gathers
        s["python_hooks_skipped"] = int(d.skipped)
        s["python_post_backward_functions"] = self._hooks.post_backward_functions
        return s

    def sync(self) -> None:
        self._live("sync")
        self.ex.sync()

    def timing_start(self, steps: int) -> None:
        """Record the next `steps` steps' hooks and ops as this rank ran them
        (Executor.timing_start); write them with timing_write(path) and draw
        them with `flexplan viz PLAN --measured FILE...`."""
        self.ex.timing_start(steps)

    def timing_write(self, path: Union[str, os.PathLike]) -> None:
        self.ex.timing_write(path)

    def graphs_live(self) -> int:
        """CUDA graphs captured over this module's steps (inside
        torch.cuda.graph) and not released with release_graph()."""
        return 0 if self._closed else self._capture.live()

    def release_graph(self) -> None:
        """Say that a graph captured over this module's steps is gone (after
        g.reset() or the last reference dropped): close() refuses while one
        is live, since a replay would read and write freed memory."""
        if self._closed:
            raise _err("release_graph(): the module was closed", _lib.FP_ERR_ORDER)
        self._capture.release()

    def close(self) -> None:
        """Remove the hooks and destroy the executor (collective). The module's
        params become placeholders that raise FlexplanError on any use, every
        tensor handed out over the arena (views, main shards, grads,
        optimizer state) is emptied (Executor.destroy), and every later call
        of this state raises FlexplanError saying it is closed. An error
        while a CUDA graph captured over its steps is live (graphs_live();
        release_graph() once it is destroyed)."""
        if self._closed:
            return
        live = self._capture.live()
        if live:
            raise _err(f"close(): {live} CUDA graph(s) captured over this module's steps are live; a replay would "
                       "read and write the executor's freed memory: destroy the graph (g.reset(), or drop every "
                       "reference to it), call release_graph(), then close()", _lib.FP_ERR_ORDER)
        self._closed = True
        self._hooks.remove()
        self._sd_hook.remove()
        self._binder.closed = True
        self._binder.release()  # the views' memory is freed below: placeholders raise
        for newp, ph in self._gone:  # a grad placeholder of the last backward holds nothing either
            if newp.grad is ph:
                newp.grad = None
        self.driver.close()
        self.ex.destroy()
        setattr(self.module, "_flexplan_state", None)
        setattr(self.module, "_flexplan_closed", True)

    def __enter__(self) -> "Sharded":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False


def _positive(name, v):
    """A float argument > 0 (inf allowed): TypeError / ValueError naming it."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v = float(v)
        else:
            raise ArgumentTypeError(f"{name}: expected a number, got {type(v).__name__}")
    v = float(v)
    if not v > 0:
        raise ArgumentValueError(f"{name}: must be > 0, got {v}")
    return v


def optimizer(model_or_state: Union[nn.Module, Sharded], cls: Callable[..., torch.optim.Optimizer], *args: Any,
              **kwargs: Any) -> torch.optim.Optimizer:
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
    if not callable(cls):
        raise ArgumentTypeError(f"cls: expected a torch.optim.Optimizer class (or a callable making one), got "
                                f"{type(cls).__name__}")
    opt = cls(st.main_params(), *args, **kwargs)
    if not isinstance(opt, torch.optim.Optimizer):
        raise ArgumentTypeError(f"cls: expected a torch.optim.Optimizer class, but it made a {type(opt).__name__}")
    st._adopt_state(opt)
    opt.register_step_pre_hook(lambda o, a, k: st.pre_optimizer())
    opt.register_step_post_hook(lambda o, a, k: st.post_optimizer())
    return opt


def abandon_step(model_or_state: Union[nn.Module, Sharded]) -> None:
    """Drop the step whose forward ran but whose backward never did
    (Sharded.abandon_step); collective."""
    state(model_or_state).abandon_step()


def clip_grad_norm_(model_or_state: Union[nn.Module, Sharded], max_norm: float,
                    norm_type: float = 2.0) -> torch.Tensor:
    """Clip the sharded grads of a sharded module to a global norm (one
    all-reduce); returns the total norm, as torch.nn.utils.clip_grad_norm_."""
    return state(model_or_state).clip_grad_norm_(max_norm, norm_type)
