"""flexplan.plan - a compiled or loaded plan (the C handle fp_plan).

A Plan is immutable; executors made from it (flexplan.Executor) must be
closed before it. Plans are made by flexplan.load() (a plan.json) and
flexplan.compile() (a model and a spec).
"""

import ctypes

from . import _lib as L
from .errors import FlexplanError


class Plan:
    """A verified plan: one SPMD program for every rank of a training step.

    Use it as a context manager or call close(); a closed plan raises
    FlexplanError on use.
    """

    def __init__(self, handle, _owner=None):
        # handle: an fp_plan * that loaded or compiled successfully (owned)
        self._h = handle

    # ---- life -------------------------------------------------------------------
    @property
    def _handle(self):
        if not self._h:
            raise FlexplanError(L.FP_ERR_ARG, "the plan is closed")
        return self._h

    def close(self):
        """Free the plan (idempotent). Close its executors first."""
        if self._h:
            L.lib().fp_plan_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self):
        """True after close()."""
        return not self._h

    # ---- questions --------------------------------------------------------------
    @property
    def info(self):
        """The plan's figures as a dict: model, strategy, world_size,
        grad_accumulation, arena_bytes, host_bytes, modules, params, segments,
        ops, hash (the content hash, "fnv1a64:<16 hex>")."""
        i = L.fp_plan_info()
        L.check(L.lib().fp_plan_get_info(self._handle, ctypes.byref(i)), lambda: self.errmsg)
        return {
            "model": L.text(i.model),
            "strategy": L.text(i.strategy),
            "world_size": i.world_size,
            "grad_accumulation": i.grad_accumulation,
            "arena_bytes": i.arena_bytes,
            "host_bytes": i.host_bytes,
            "modules": i.nmodules,
            "params": i.nparams,
            "segments": i.nsegments,
            "ops": i.nops,
            "hash": "fnv1a64:%016x" % i.hash,
        }

    @property
    def world_size(self):
        """The number of ranks the plan is for."""
        return self.info["world_size"]

    @property
    def modules(self):
        """The module names, in the model's order (index = module number)."""
        lib = L.lib()
        h = self._handle
        out = []
        while True:
            n = lib.fp_plan_module_name(h, len(out))
            if n is None:
                return out
            out.append(L.text(n))

    def module_index(self, name):
        """The index of a module name; KeyError when the plan has none."""
        k = L.lib().fp_plan_module_index(self._handle, name.encode())
        if k < 0:
            raise KeyError(name)
        return k

    @property
    def errmsg(self):
        """The plan handle's last message ('' when none)."""
        return L.text(L.lib().fp_plan_errmsg(self._h)) if self._h else ""

    def __repr__(self):
        if not self._h:
            return "<flexplan.Plan closed>"
        i = self.info
        return "<flexplan.Plan %s %s world=%d ops=%d>" % (i["model"], i["strategy"], i["world_size"], i["ops"])


def load(path):
    """Load and verify a plan.json (written by `flexplan compile` or
    Plan.save()). Raises FlexplanError with the located message when the
    file is unreadable, malformed, tampered with or fails verification."""
    lib = L.lib()
    h = ctypes.c_void_p()
    st = lib.fp_plan_load(L.fsencode(path), ctypes.byref(h))
    if st != L.FP_OK:
        msg = L.text(lib.fp_plan_errmsg(h)) if h else ""
        if h:
            lib.fp_plan_free(h)
        raise FlexplanError(st, msg)
    return Plan(h)
