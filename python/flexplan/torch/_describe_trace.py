"""Tracing one forward of a module on the meta device for describe().

While the forward runs, forward pre/post hooks on each unit's member modules
keep a stack of the units whose forward is running. Three observers credit
what they see to the innermost running unit (the root unit, or nothing,
outside every unit):

- FLOPs: torch.utils.flop_counter.FlopCounterMode counts every op; at each
  unit boundary the growth of its total since the last boundary goes to the
  unit that was running.
- Activations: torch.autograd.graph.saved_tensors_hooks sees every tensor
  the forward saves for backward; each storage is counted once (its bytes),
  the first time it is saved; parameters' and buffers' storages are not
  activations.
- Param uses: a dispatch mode notes which Parameter objects each unit's ops
  read (tied weights read through another module, or functionally).
- Inputs: the bytes of the tensors each occurrence of a unit is called with
  (what activation checkpointing keeps of it).

Everything runs on meta tensors: shapes and dtypes only, no memory.
"""
import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode, flop_registry


class _UseMode(TorchDispatchMode):
    """Notes the params an op reads, for the running unit."""

    def __init__(self, tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        t = self.tracer
        flat, _ = tree_flatten((args, kwargs))
        for a in flat:
            if isinstance(a, torch.Tensor) and id(a) in t.param_ids:
                t.uses[t.current()].add(id(a))
        return func(*args, **kwargs)


def _grouped_mm_flops(a_shape, b_shape, *args, out_shape=None, **kwargs):
    """FLOPs of aten._grouped_mm (the MoE experts' matmul in transformers):
    2 * (output elements) * (inner size). With a 3-D b (groups, K, N) every
    output element sums K products; with 2-D a and b the groups split K
    (offsets over K) and the output (groups, M, N) sums M*N*K_total in all."""
    if len(b_shape) == 3:
        inner = b_shape[-2]
        return 2 * _numel(out_shape) * inner
    if len(a_shape) == 2 and len(b_shape) == 2 and len(out_shape) == 3:
        return 2 * out_shape[1] * out_shape[2] * a_shape[1]
    return 2 * _numel(out_shape) * a_shape[-1]


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _flop_formulas():
    """Formulas FlopCounterMode lacks in this torch (custom_mapping)."""
    extra = {}
    op = getattr(torch.ops.aten, "_grouped_mm", None)
    if op is not None and op not in flop_registry:
        extra[op] = _grouped_mm_flops
    return extra


def _storage_key(t):
    st = t.untyped_storage()
    return st._cdata, st.nbytes()  # pylint: disable=protected-access


class Tracer:
    """One traced forward: forward_order, flops, activation bytes and param
    uses per unit. `units` are _describe_units.Unit; `root` is the root unit
    (or None when every param belongs to a unit)."""

    def __init__(self, module, units, root, params, buffers):
        self.module = module
        self.units = units
        self.root = root
        self.param_ids = {id(p) for p in params}
        self.skip_storages = {_storage_key(t)[0] for t in list(params) + list(buffers)}
        self.stack = []            # [(unit, module)] whose forward is running
        self.order = []            # units, one entry per occurrence
        self.last_popped = None    # the unit whose member ended last, if none began since
        self.flops = collections.defaultdict(int)
        self.acts = collections.defaultdict(int)
        self.inputs = collections.defaultdict(int)  # tensor inputs' bytes per unit
        self.uses = collections.defaultdict(set)
        self.seen_storages = set()
        self.saved = []            # keeps saved tensors alive: storage keys stay unique
        self.fc = None
        self.last_total = 0

    def current(self):
        """The innermost running unit (the root unit or None outside all)."""
        return self.stack[-1][0] if self.stack else self.root

    def _flush(self):
        total = self.fc.get_total_flops()
        self.flops[self.current()] += total - self.last_total
        self.last_total = total

    def _input_bytes(self, args, kwargs):
        """Bytes of the distinct storages of the tensors among a forward's
        arguments (params and buffers left out): what activation
        checkpointing keeps of a unit."""
        flat, _ = tree_flatten((args, kwargs))
        seen, n = set(), 0
        for a in flat:
            if isinstance(a, torch.Tensor):
                key, nbytes = _storage_key(a)
                if key not in self.skip_storages and key not in seen:
                    seen.add(key)
                    n += nbytes
        return n

    def _pre(self, unit, mod):
        def hook(_m, args, kwargs):
            self._flush()
            running = any(u is unit for u, _ in self.stack)
            if not running and not (unit.group and self.last_popped is unit):
                self.order.append(unit)
                self.inputs[unit] += self._input_bytes(args, kwargs)
            self.stack.append((unit, mod))
            self.last_popped = None
        return hook

    def _post(self, unit, mod):
        def hook(_m, _args, _out):
            self._flush()
            for i in range(len(self.stack) - 1, -1, -1):
                if self.stack[i][0] is unit and self.stack[i][1] is mod:
                    del self.stack[i]
                    break
            self.last_popped = unit
        return hook

    def _pack(self, t):
        self.saved.append(t)
        key, nbytes = _storage_key(t)
        if key not in self.skip_storages and key not in self.seen_storages:
            self.seen_storages.add(key)
            self.acts[self.current()] += nbytes
        return t

    @staticmethod
    def _unpack(t):
        return t

    def run(self, call):
        """Runs call() (the module's forward) under the hooks; returns its output."""
        handles = []
        try:
            for u in self.units:
                for _, mod in u.members:
                    handles.append(mod.register_forward_pre_hook(self._pre(u, mod), with_kwargs=True))
                    handles.append(mod.register_forward_hook(self._post(u, mod), always_call=True))
            if self.root is not None:
                self.order.append(self.root)
            self.fc = FlopCounterMode(display=False, custom_mapping=_flop_formulas())
            with torch.enable_grad(), self.fc, _UseMode(self), \
                torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                out = call()
                self._flush()
            return out
        finally:
            for h in handles:
                h.remove()
