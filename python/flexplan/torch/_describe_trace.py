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

Everything runs on meta tensors: shapes and dtypes only, no memory.
"""
import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode


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

    def _pre(self, unit, mod):
        def hook(_m, _args):
            self._flush()
            running = any(u is unit for u, _ in self.stack)
            if not running and not (unit.group and self.last_popped is unit):
                self.order.append(unit)
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
                    handles.append(mod.register_forward_pre_hook(self._pre(u, mod)))
                    handles.append(mod.register_forward_hook(self._post(u, mod), always_call=True))
            if self.root is not None:
                self.order.append(self.root)
            self.fc = FlopCounterMode(display=False)
            with torch.enable_grad(), self.fc, _UseMode(self), \
                torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                out = call()
                self._flush()
            return out
        finally:
            for h in handles:
                h.remove()
