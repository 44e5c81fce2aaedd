"""Every hook flexplan.torch puts on a module, registered in one place
(``Hooks.register``): what each one reports to the hook driver
(``_driver.Driver``, the C library's state machine), and nothing else.

- forward pre-hook of each submodule of unit u: ``FP_EVENT_PRE_FORWARD(u)``
  (the first of a step begins it: the params are bound to their views);
  inside backward, ``FP_EVENT_RECOMPUTE_BEGIN(u)`` (activation
  checkpointing); between steps with grad disabled or the module in eval
  mode, an evaluation forward: the unit's params are gathered, no event;
- forward hook of u's last submodule: ``FP_EVENT_POST_FORWARD(u)`` (where no
  other unit's pre_forward follows in the plan) and a grad hook on each
  output that needs grad (``FP_EVENT_PRE_BACKWARD(u)``; the
  first one of a backward queues the engine callback,
  ``FP_EVENT_BACKWARD_DONE``); inside backward, ``FP_EVENT_RECOMPUTE_END(u)``;
- ``FP_EVENT_POST_BACKWARD(u)``: the backward of an identity autograd
  function on u's inputs that need grad (FSDP2's RegisterPostBackward), or,
  where every such input is an output of the unit the plan's backward runs
  next (a chain of units: a decoder layer's hidden states), no function at
  all: the grad hook on that output fires at the same point of the backward
  (when the grads of u's inputs are complete; AccumulateGrad of u's params
  ran before, autograd gives it the highest priority), and its
  ``FP_EVENT_PRE_BACKWARD`` passes ``post_backward(u)`` in plan order.

Per hook the Python side does a few attribute reads (the driver's state is
the C struct, read in place) and one ctypes call; docs/torch.md measures it.
"""
import time

import torch
from torch.utils import _pytree as pytree

from .. import _lib
from ..errors import FlexplanError

__all__ = ["Hooks", "StreamFollower"]

_PF, _POF, _PB, _POB = (_lib.FP_EVENT_PRE_FORWARD, _lib.FP_EVENT_POST_FORWARD, _lib.FP_EVENT_PRE_BACKWARD,
                        _lib.FP_EVENT_POST_BACKWARD)
_DONE, _RB, _RE = _lib.FP_EVENT_BACKWARD_DONE, _lib.FP_EVENT_RECOMPUTE_BEGIN, _lib.FP_EVENT_RECOMPUTE_END


class _PostBackward(torch.autograd.Function):
    """Identity on a unit's inputs; its backward runs once the unit's
    backward has produced the inputs' grads: post_backward(u)."""

    @staticmethod
    def forward(ctx, hooks, unit, *inputs):  # pylint: disable=arguments-differ
        ctx.hooks, ctx.unit = hooks, unit
        return inputs if len(inputs) > 1 else inputs[0]

    @staticmethod
    def backward(ctx, *grads):  # pylint: disable=arguments-differ
        ctx.hooks.post_backward(ctx.unit)
        return (None, None) + grads


def _no_grad_leaves(c):
    """True when the container holds only tensors that need no grad, and
    non-containers (one level deep; deeper containers: False)."""
    for v in (c.values() if isinstance(c, dict) else c):
        if isinstance(v, torch.Tensor):
            if v.requires_grad:
                return False
        elif isinstance(v, (tuple, list, dict)):
            return False
    return True


def _eval_backward(grad):
    raise FlexplanError(_lib.FP_ERR_ORDER, (
        "backward through a forward that ran as evaluation: between steps a forward under torch.no_grad() / "
        "torch.inference_mode(), or with the module in eval mode (module.training False), evaluates (flexplan "
        "gathers the weights and reduces nothing); call module.train() before a training forward"))


class Hooks:
    """The module and autograd hooks of one Sharded state.

    st: the Sharded state (its module, ``_unsharded``, ``_eval_pre(u)``,
    ``_begin_step()``); driver: its Driver; units: per plan module, the
    submodules that make it; unit_dtype: per unit, the dtype its floating
    inputs are cast to (None: no cast); chain: per unit u, the unit whose
    pre_backward follows u's post_backward in the plan (None: none);
    fwd_next: per unit u, the unit whose pre_forward follows u's
    post_forward in the plan (None: none)."""

    def __init__(self, st, driver, units, unit_dtype, chain, fwd_next, profile=False):
        self.st = st
        self.fwd_next = fwd_next
        self.driver = driver
        self.units = units
        self.unit_dtype = unit_dtype
        self.chain = chain
        self.profile = bool(profile)
        self.python_s = 0.0  # CPU seconds inside the callbacks (profile)
        self.callbacks = 0
        self.last_out = None  # (unit, [outputs with a grad hook]) of the last unit's forward
        self.post_backward_functions = 0  # identity functions applied (units whose post_backward is not inferred)
        self.handles = []
        self._queue_callback = torch.autograd.Variable._execution_engine.queue_callback
        self.event = self._event_fn()

    # ---- registration ----------------------------------------------------------------
    def register(self):
        for u, subs in enumerate(self.units):
            for i, sm in enumerate(subs):
                self.handles.append(sm.register_forward_pre_hook(self._timed(self._pre_hook(u, i == 0), 3),
                                                                 with_kwargs=True))
                self.handles.append(sm.register_forward_hook(self._timed(self._post_hook(u, i == len(subs) - 1), 3)))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        self.last_out = None

    # ---- events ----------------------------------------------------------------------
    def _event_fn(self):
        """fp_driver_event with the driver's handle bound (the hot path)."""
        drv = self.driver
        ev, h = drv._ev, drv._h

        def event(e, u):
            f = drv.follow_stream
            if f is not None:
                f()
            s = ev(h, e, u)
            if s:
                drv.raise_error(s)
        return event

    def post_backward(self, u):
        """_PostBackward's backward: unit u's backward is done."""
        if self.profile:
            return self._timed(self.event)(_POB, u)
        return self.event(_POB, u)

    def _backward_done(self):
        self.last_out = None
        self.st._fwd_open = False
        self.event(_DONE, -1)
        self.st._drop_grads()  # the ugrads are reduced and their bytes reused: .grad raises now

    # ---- the hooks ---------------------------------------------------------------------
    def _pre_hook(self, u, first):
        st, module, dstate, event = self.st, self.st.module, self.driver.state, self.event
        grad_enabled = torch.is_grad_enabled
        dt = self.unit_dtype[u]
        cast = self._cast

        def pre_hook(mod, args, kwargs):
            if dstate.in_backward:  # a recomputed forward inside backward (activation checkpointing)
                if first and grad_enabled():
                    event(_RB, u)
                return None
            grad = grad_enabled()
            evaluating = st._unsharded is not None or (dstate.pos == 0 and not (grad and module.training))
            if evaluating:
                st._eval_pre(u)
            else:
                if dstate.pos == 0:
                    self.last_out = None
                    st._begin_step()
                elif st._grads_gone:  # the next micro-batch: the ugrads are .grad again
                    st._begin_step_grads()
                # every submodule of the unit reports it (a no-op while the unit is open): a unit
                # whose first submodule did not run still gathers before the others compute
                try:
                    event(_PF, u)
                except FlexplanError as e:
                    raise st._abandoned_error(u, e) from None
                if not st._fwd_open:  # the micro-batch's forward starts at u
                    st._fwd_open, st._fwd_first = True, u
            changed = False
            if dt is not None:  # mixed precision only, as FSDP2
                args, kwargs = cast(dt, args, kwargs)
                changed = True
            if first and grad and not evaluating:
                na, nk = self._post_backward_inputs(u, args, kwargs)
                if na is not args or nk is not kwargs:
                    args, kwargs, changed = na, nk, True
            return (args, kwargs) if changed else None
        return pre_hook

    @staticmethod
    def _cast(dt, args, kwargs):
        """Floating tensors among the inputs to dt (tensors in containers
        through torch's pytree)."""
        def c(t):
            return t.to(dt) if t.is_floating_point() and t.dtype != dt else t
        if all(isinstance(a, torch.Tensor) or not isinstance(a, (tuple, list, dict)) for a in args) and \
                all(isinstance(a, torch.Tensor) or not isinstance(a, (tuple, list, dict)) for a in kwargs.values()):
            T = torch.Tensor
            return (tuple(c(a) if isinstance(a, T) else a for a in args),
                    {k: c(a) if isinstance(a, T) else a for k, a in kwargs.items()})
        return pytree.tree_map_only(torch.Tensor, c, (args, kwargs))

    def _post_backward_inputs(self, u, args, kwargs):
        """The unit's inputs that need grad go through _PostBackward (its
        backward is post_backward(u)), unless they are all outputs of the
        unit the plan's backward runs next (module docstring). One pass
        decides that (the common case: a decoder layer's hidden states
        come from the layer before, its masks and rotary cos/sin need no
        grad); only otherwise are the inputs collected. Tensors among the
        positional and keyword arguments, and tuples/lists/dicts of tensors
        that need no grad, take the fast path; anything deeper goes through
        torch's pytree."""
        T = torch.Tensor
        lo, self.last_out = self.last_out, None
        outs = lo[1] if lo is not None and lo[0] == self.chain[u] else ()
        chained = True  # every input that needs grad is one of outs
        for a in (*args, *kwargs.values()) if kwargs else args:
            if isinstance(a, T):
                if chained and a.requires_grad and not any(a is o for o in outs):
                    chained = False
            elif isinstance(a, (tuple, list, dict)) and not _no_grad_leaves(a):
                return self._post_backward_pytree(u, args, kwargs)
        if chained:  # nothing needs grad, or post_backward(u) comes with pre_backward(chain[u])
            return args, kwargs
        return self._post_backward_apply(u, args, kwargs)

    def _post_backward_apply(self, u, args, kwargs):
        """_PostBackward over the tensors among args and kwargs that need
        grad (no container holds one: _post_backward_inputs checked)."""
        T = torch.Tensor
        pos = [i for i, a in enumerate(args) if isinstance(a, T) and a.requires_grad]
        kw = [k for k, a in kwargs.items() if isinstance(a, T) and a.requires_grad]
        self.post_backward_functions += 1
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
        self.last_out = None
        flat, spec = pytree.tree_flatten((args, kwargs))
        idx = [i for i, t in enumerate(flat) if isinstance(t, torch.Tensor) and t.requires_grad]
        if idx:
            self.post_backward_functions += 1
            outs = _PostBackward.apply(self, u, *[flat[i] for i in idx])
            if len(idx) == 1:
                outs = (outs,)
            for i, t in zip(idx, outs):
                flat[i] = t
            args, kwargs = pytree.tree_unflatten(flat, spec)
        return args, kwargs

    def _post_hook(self, u, last):
        st, dstate, event = self.st, self.driver.state, self.event
        grad_enabled = torch.is_grad_enabled
        gh = self._timed(self._grad_hook(u), 1)
        T = torch.Tensor
        # where the plan's next forward segment is another unit's pre_forward,
        # post_forward(u) is issued by that event (the driver passes it in plan
        # order): one call fewer per unit; the plan's last unit reports its own
        report = self.fwd_next[u] is None

        def post_hook(mod, args, output):
            if dstate.in_backward:
                if last:
                    event(_RE, u)  # a no-op unless u's recomputed forward is open
                return None
            if dstate.pos == 0 or st._unsharded is not None:  # an evaluation forward (between steps)
                if last and grad_enabled():
                    for t in pytree.tree_leaves(output):
                        if isinstance(t, T) and t.requires_grad:
                            t.register_hook(_eval_backward)
                return None
            if last:
                if report:
                    event(_POF, u)
                if grad_enabled():
                    if isinstance(output, T):
                        outs = [output] if output.requires_grad else []
                    else:
                        outs = [t for t in (output if isinstance(output, (tuple, list)) and all(
                            isinstance(o, T) or o is None for o in output) else pytree.tree_leaves(output))
                                if isinstance(t, T) and t.requires_grad]
                    for t in outs:
                        # Tensor.register_hook without its Python wrapper and handle (half the
                        # cost in a step; the same tensor pre-hook on the node that made t)
                        fn = t.grad_fn
                        if fn is not None and t._backward_hooks is None:
                            t._backward_hooks = {-1: gh}
                            fn._register_hook_dict(t)
                        else:
                            t.register_hook(gh)
                    self.last_out = (u, outs)
            return None
        return post_hook

    def _grad_hook(self, u):
        dstate, event = self.driver.state, self.event
        queue = self._queue_callback
        done = self._timed(self._backward_done)

        def grad_hook(grad):
            if not dstate.in_backward:  # the first of this backward: the engine calls back at its end
                self.last_out = None
                queue(done)
            event(_PB, u)  # sets in_backward
        return grad_hook

    # ---- profile -------------------------------------------------------------------------
    def _timed(self, fn, arity=None):
        """fn, timed into python_s / callbacks when profiling
        (time.perf_counter, the clock the C driver times the executor with:
        read in user space, where the thread's CPU clock is a system call
        that cools the caches of what it measures); arity 1 or 3 avoids
        repacking the arguments."""
        if not self.profile:
            return fn
        tt = time.perf_counter

        if arity == 3:
            def timed3(a, b, c):
                t0 = tt()
                try:
                    return fn(a, b, c)
                finally:
                    self.python_s += tt() - t0
                    self.callbacks += 1
            return timed3
        if arity == 1:
            def timed1(a):
                t0 = tt()
                try:
                    return fn(a)
                finally:
                    self.python_s += tt() - t0
                    self.callbacks += 1
            return timed1

        def timed(*a, **k):
            t0 = tt()
            try:
                return fn(*a, **k)
            finally:
                self.python_s += tt() - t0
                self.callbacks += 1
        return timed


class StreamFollower:
    """NCCL backend, the stream contract (docs/torch.md): called before every
    event, it hands torch's current stream to the executor when it changed
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
