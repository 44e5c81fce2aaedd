"""What a sharded module's params hold outside the plan's training step.

Inside a training step (step_begin .. post_optimizer) every param of the
module is the plan's view (an ``nn.Parameter`` over ``fp_param_view.weight``)
and valid where the plan has it gathered (docs/torch.md). Between steps the
bytes of a gathered weight may hold another buffer, so a param is bound
either to its view with its full current value (gathered for an evaluation
forward, ``_ParamBinder.gather``), or to a placeholder (``Unsharded``) that
has the param's shape, dtype and device but raises ``FlexplanError`` on any
read: never garbage. ``Sharded.unshard()`` binds full copies instead.

The gather between steps: each rank writes its extents of the main weights
into a float64 buffer of zeros, one all-reduce sums them
(``fp_exec_all_reduce_f64``), each element is divided by its replication
count and cast to the param dtype: exact for fp32 / bf16 / fp16 main values
(a sum of R copies of one float in float64), the value the plan's own cast
and all-gather compute. Which params hold their full value is the same on
every rank (the same forwards, the same overlaps), so every rank makes the
same collectives.
"""
import torch
from torch import nn

from .._lib import FP_ERR_ARG, FP_ERR_ORDER
from ..errors import FlexplanError
from . import _tp


def _no_pickle(name):
    return FlexplanError(FP_ERR_ARG, (
        f"param {name!r} of a sharded module cannot be pickled (torch.save of model.state_dict() or of a param): "
        f"its values are spread over the ranks' main shards. Save with flexplan.torch.state_dict(model) "
        f"(torch.distributed.checkpoint), Sharded.full_state_dict() or Sharded.save(path)"))


def _no_requires_grad(name, plan_rg, want):
    return FlexplanError(FP_ERR_ARG, (
        f"param {name!r}: requires_grad_({want}) after shard(): the plan fixes which params train "
        f"(requires_grad={plan_rg} there) and would ignore the change; freeze params before compiling the plan "
        f"(requires_grad in the model, or the spec) and shard again"))


class PlanParam(nn.Parameter):
    """The nn.Parameter over a param's unsharded view: requires_grad is the
    plan's (requires_grad_ / the setter to another value raise), and it
    does not pickle (FlexplanError naming the param)."""

    def requires_grad_(self, requires_grad=True):
        if bool(requires_grad) != torch.Tensor.requires_grad.__get__(self):
            raise _no_requires_grad(getattr(self, "_flexplan_view", "?"), not requires_grad, bool(requires_grad))
        return self

    @property
    def requires_grad(self):
        return torch.Tensor.requires_grad.__get__(self)

    @requires_grad.setter
    def requires_grad(self, v):
        self.requires_grad_(v)

    def __reduce_ex__(self, proto):
        raise _no_pickle(getattr(self, "_flexplan_view", "?"))


# shape-preserving views that keep a GradGone a GradGone (detach, alias, and
# view to its own shape, as DTensor.from_local takes one of its local tensor)
_GONE_VIEWS = (torch.ops.aten.detach.default, torch.ops.aten.alias.default, torch.ops.aten.view.default)


class GradGone(torch.Tensor):
    """A param's .grad once the step's backward is over: the plan has
    reduced its unsharded grad into the main-grad shards and reuses those
    bytes, so any use raises (torch.nn.utils.clip_grad_norm_ over
    model.parameters() among them), naming what to call instead."""

    @staticmethod
    def __new__(cls, like, name):
        t = torch.Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype, device=like.device,
                                                requires_grad=False)
        t._fp_name = name
        return t

    def __repr__(self, **_):
        return f"<flexplan: the grad of {self._fp_name!r}, reduced into the main-grad shards>"

    def __reduce_ex__(self, proto):
        raise _no_pickle(self._fp_name)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        g = next((a for a in args if isinstance(a, GradGone)), None)
        if g is None:  # a foreach op: a list of tensors
            g = next((t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, GradGone)), None)
        if g is not None and func in _GONE_VIEWS and args[0] is g and (
                func is not torch.ops.aten.view.default or tuple(args[1]) == tuple(g.shape)):
            return GradGone(g, g._fp_name)  # the same placeholder (DTensor.from_local takes a view of it)
        name = g._fp_name if g is not None else "?"
        raise FlexplanError(FP_ERR_ORDER, (
            f"the .grad of param {name!r} after backward ({func} on it): the plan has already reduced it into the "
            f"main-grad shards and reuses its bytes. Clip with flexplan.torch.clip_grad_norm_(model, max_norm) "
            f"(the global norm of the sharded main grads); the grads are the main shards' .grad "
            f"(Sharded.main_params())"))


class Unsharded(torch.Tensor):
    """A param outside the plan's step and outside ``unshard()``: shape,
    dtype and device as the param, any operation on its values raises."""

    @staticmethod
    def __new__(cls, like, name, why):
        t = torch.Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype, device=like.device,
                                                requires_grad=False)
        t._fp_name = name
        t._fp_why = why
        return t

    def __repr__(self, **_):
        return f"<flexplan: param {self._fp_name!r} {self._fp_why()}>"

    def __reduce_ex__(self, proto):
        raise _no_pickle(self._fp_name)

    def requires_grad_(self, requires_grad=True):
        plan_rg = getattr(self, "_fp_plan_rg", None)
        if plan_rg is None:  # nn.Parameter() making the holder
            return torch.Tensor.requires_grad_(self, requires_grad)
        if bool(requires_grad) != plan_rg:
            raise _no_requires_grad(self._fp_name, plan_rg, bool(requires_grad))
        return self

    @property
    def requires_grad(self):
        return torch.Tensor.requires_grad.__get__(self)

    @requires_grad.setter
    def requires_grad(self, v):
        self.requires_grad_(v)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        ph = next((a for a in args if isinstance(a, Unsharded)), None)
        if ph is not None and func in (torch.ops.aten.detach.default, torch.ops.aten.alias.default):
            return Unsharded(ph, ph._fp_name, ph._fp_why)  # nn.Parameter(), .data, .detach()
        name = ph._fp_name if ph is not None else "?"
        why = ph._fp_why() if ph is not None else "is sharded"
        raise FlexplanError(FP_ERR_ORDER, (
            f"param {name!r} {why}: its values are not in this rank's memory ({func} on it). "
            f"Read or write params inside `with state.unshard():`, take full_state_dict(), or run a "
            f"forward (evaluation under torch.no_grad() gathers what it needs)"))


class _ParamBinder:
    """Which tensor each module slot of each plan param holds, and which
    views hold their full current value between steps."""

    def __init__(self, st, module, views):
        self.st = st
        self.views = views  # name -> (Parameter over weight, ParamView)
        self.slots = {}  # name -> [(module, key)]
        ids = {id(v[0]): n for n, v in views.items()}
        for m in module.modules():
            for k, t in m._parameters.items():
                if t is not None and id(t) in ids:
                    self.slots.setdefault(ids[id(t)], []).append((m, k))
        self.holders = {n: nn.Parameter(Unsharded(p, n, self._why), requires_grad=False)
                        for n, (p, _) in views.items()}
        for n, (_, pv) in views.items():  # requires_grad_ to another value than the plan's raises
            self.holders[n]._fp_plan_rg = pv.requires_grad
        self.valid = set()  # views that hold their full current value between steps
        self.bound_views = False  # every slot holds its view (inside a training step)
        # params whose weight bytes overlap (the plan reuses them): gathering
        # one invalidates the others
        spans = sorted((v.weight.ptr, v.weight.ptr + v.weight.nbytes, n) for n, (_, v) in views.items()
                       if v.weight.ptr)
        self.overlaps = {n: [] for n in views}
        for i, (a0, a1, n) in enumerate(spans):
            for b0, b1, o in spans[i + 1:]:
                if b0 >= a1:
                    break
                self.overlaps[n].append(o)
                self.overlaps[o].append(n)
        self.closed = False
        # (slot dict, key, tensor) for the two bindings every step makes (the views: Sharded._begin_step)
        self._view_slots = [(m._parameters, k, views[n][0]) for n, sl in self.slots.items() for m, k in sl]
        self._holder_slots = [(m._parameters, k, self.holders[n]) for n, sl in self.slots.items() for m, k in sl]

    def _why(self):
        if self.closed:
            return "belongs to a closed flexplan state (Sharded.close())"
        return "is sharded between steps"

    def _set(self, name, t):
        for m, k in self.slots.get(name, ()):
            m._parameters[k] = t

    def release(self):
        """End of a step, a refit, unshard(): views with a valid full value
        are forgotten, every slot holds its placeholder."""
        for d, k, t in self._holder_slots:
            d[k] = t
        self.valid.clear()
        self.bound_views = False

    def bind(self, tensors):
        """unshard(): each slot holds the given tensor of its param."""
        for n, t in tensors.items():
            self._set(n, t)
        self.bound_views = False

    def current(self, name):
        slots = self.slots.get(name)
        if not slots:
            return None
        m, k = slots[0]
        return m._parameters[k]

    def gather(self, names):
        """Between steps: the listed params' views get their full current
        value (collective; a no-op for those already valid) and are bound;
        params whose bytes overlap them lose theirs."""
        todo = [n for n in names if n not in self.valid]
        if not todo:
            return 0
        st = self.st
        if st.backend == "nccl":
            st.ex.sync()  # the plan's post_optimizer work writes these bytes too
        pvs = [self.views[n][1] for n in todo]
        full = gather_full(st, pvs, local=True)
        with torch.no_grad():
            for n, t in zip(todo, full):
                p = _tp.local(self.views[n][0])
                p.copy_(t.view(p.shape).to(p.dtype))
        for n in todo:
            for o in self.overlaps[n]:
                if o in self.valid:
                    self.valid.discard(o)
                    self._set(o, self.holders[o])
            self.valid.add(n)
            self._set(n, self.views[n][0])
        return len(todo)


def gather_full(st, pvs, local=False):
    """The full values of the given params (ParamViews) as flat float64 CPU
    tensors, from this rank's main shards: one float64 buffer, summed across
    ranks (collective), divided by each param's replication count. On a
    mesh with tp, in global coordinates (each tp rank writes its slice at
    its place along the tp dim: _tp.scatter_local); local=True returns this
    rank's tp-local values instead (evaluation gathers)."""
    ex = st.ex
    sizes = [_tp.global_numel(p) for p in pvs]
    total = sum(sizes)
    buf = torch.zeros(total, dtype=torch.float64)
    off = 0
    for p, size in zip(pvs, sizes):
        mt = p.tensor("main")
        dst = buf[off:off + size] if p.tp_dim is None else torch.zeros(p.numel, dtype=torch.float64)
        for s, f, n in p.shard.pairs():
            dst[f:f + n] = mt[s:s + n].to("cpu", torch.float64)
        if p.tp_dim is not None:
            _tp.scatter_local(p, ex.tp, ex.tp_rank, dst, buf[off:off + size])
        off += size
    if total:
        ex.all_reduce_f64_buffer(buf.data_ptr(), total)
    out, off = [], 0
    for p, size in zip(pvs, sizes):
        t = buf[off:off + size]
        r = st._repl[p.name]
        if r != 1.0:
            t /= r
        if local and p.tp_dim is not None:
            t = _tp.take_local(p, ex.tp, ex.tp_rank, t)
        out.append(t)
        off += size
    return out
