"""flexplan.plan - a compiled or loaded plan (the C handle fp_plan).

A Plan is immutable; executors made from it (flexplan.Executor) must be
closed before it. Plans are made by flexplan.load() (a plan.json) and
flexplan.compile() (a model and a spec).
"""

import ctypes
import json
import os
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _lib as L
from .errors import FlexplanError

# what compile() takes for a model or a spec: a dict, JSON text, or a path
Source = Union[None, Dict[str, Any], str, bytes, "os.PathLike[str]"]


class Plan:
    """A verified plan: one SPMD program for every rank of a training step.

    Use it as a context manager or call close(); a closed plan raises
    FlexplanError on use.
    """

    def __init__(self, handle: ctypes.c_void_p, _owner: Any = None) -> None:
        # handle: an fp_plan * that loaded or compiled successfully (owned)
        self._h: Optional[ctypes.c_void_p] = handle

    # ---- life -------------------------------------------------------------------
    @property
    def _handle(self):
        if not self._h:
            raise FlexplanError(L.FP_ERR_ARG, "the plan is closed")
        return self._h

    def close(self) -> None:
        """Free the plan (idempotent). Close its executors first."""
        if self._h:
            L.lib().fp_plan_free(self._h)
            self._h = None

    def __enter__(self) -> "Plan":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self) -> bool:
        """True after close()."""
        return not self._h

    # ---- questions --------------------------------------------------------------
    @property
    def info(self) -> Dict[str, Any]:
        """The plan's figures as a dict: model, strategy, world_size,
        grad_accumulation, arena_bytes, host_bytes, modules, params, segments,
        ops, hash (the content hash, "fnv1a64:<16 hex>"), optimizer, tp (the
        mesh's tensor-parallel size, 1 without one)."""
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
            "optimizer": L.text(i.optimizer) or "none",
            "tp": i.tp_size,
        }

    @property
    def world_size(self) -> int:
        """The number of ranks the plan is for."""
        return self.info["world_size"]

    @property
    def modules(self) -> List[str]:
        """The module names, in the model's order (index = module number)."""
        lib = L.lib()
        h = self._handle
        out: List[str] = []
        while True:
            n = lib.fp_plan_module_name(h, len(out))
            if n is None:
                return out
            out.append(L.text(n))

    @property
    def tp_size(self) -> int:
        """The mesh's tensor-parallel size (1 without a tp dimension)."""
        return self.info["tp"]

    def param_tp_dim(self, i: int) -> Optional[int]:
        """The dim of param i's global tensor split over the tp ranks, or
        None when every tp rank holds all of it (replicated over tp)."""
        d = L.lib().fp_plan_param_tp_dim(self._handle, int(i))
        if d == -2:
            raise IndexError(f"param index {i} out of range")
        return None if d < 0 else d

    def module_index(self, name: str) -> int:
        """The index of a module name; KeyError when the plan has none."""
        k = L.lib().fp_plan_module_index(self._handle, L.cstr(name, "name", allow_none=False))
        if k < 0:
            raise KeyError(name)
        return k

    @property
    def errmsg(self) -> str:
        """The plan handle's last message ('' when none)."""
        return L.text(L.lib().fp_plan_errmsg(self._h)) if self._h else ""

    # ---- outputs ----------------------------------------------------------------
    @property
    def summary(self) -> Dict[str, Any]:
        """The summary as a dict: exactly what `flexplan compile --emit=summary`
        prints (model, world_size, strategy, buckets, params, ops,
        collectives, per-rank bytes, arena and peak bytes, prefetch depths,
        hardware, modeled step / compute / exposed communication in ms,
        compile_ms). For a loaded plan, the summary of the compile that wrote
        it, with compile_ms 0."""
        return json.loads(self.summary_json())

    def summary_json(self) -> str:
        """The summary as the JSON text the CLI prints."""
        out = ctypes.c_void_p()
        L.check(L.lib().fp_plan_summary(self._handle, ctypes.byref(out)), lambda: self.errmsg)
        return L.take_string(out.value)

    def save(self, path: Union[str, "os.PathLike[str]"]) -> Union[str, "os.PathLike[str]"]:
        """Write the plan as plan.json at path, atomically (a temporary file
        renamed over path once complete). Returns path."""
        L.check(L.lib().fp_plan_save(self._handle, L.fsencode(path, "path")), lambda: self.errmsg)
        return path

    def _render(self, what: int, hardware: Optional[str] = None) -> str:
        out = ctypes.c_void_p()
        hw = L.cstr(hardware, "hardware")
        L.check(L.lib().fp_plan_render(self._handle, what, hw, ctypes.byref(out)), lambda: self.errmsg)
        return L.take_string(out.value)

    def to_json(self) -> str:
        """The plan.json text (what save() writes)."""
        return self._render(L.FP_RENDER_PLAN)

    def to_ir(self) -> str:
        """The plan as .fpir text (`flexplan print`)."""
        return self._render(L.FP_RENDER_IR)

    def explain(self, hardware: Optional[str] = None) -> str:
        """The table `flexplan explain` prints: one row per op with its
        modeled start and end, on the plan's machine or the preset named."""
        return self._render(L.FP_RENDER_EXPLAIN, hardware)

    def simulate(self, hardware: Optional[str] = None) -> str:
        """What `flexplan simulate` prints: the modeled time per segment and
        the totals."""
        return self._render(L.FP_RENDER_SIMULATE, hardware)

    def to_trace(self, hardware: Optional[str] = None, as_text: bool = False) -> Union[str, Dict[str, Any]]:
        """The modeled schedule as Chrome Trace Event JSON (`flexplan viz`,
        for Perfetto): a dict, or the text with as_text=True."""
        text = self._render(L.FP_RENDER_TRACE, hardware)
        return text if as_text else json.loads(text)

    def to_html(self, hardware: Optional[str] = None) -> str:
        """The modeled schedule as one self-contained HTML page
        (`flexplan viz --format=html`)."""
        return self._render(L.FP_RENDER_HTML, hardware)

    def __repr__(self) -> str:
        if not self._h:
            return "<flexplan.Plan closed>"
        i = self.info
        return "<flexplan.Plan %s %s world=%d ops=%d>" % (i["model"], i["strategy"], i["world_size"], i["ops"])


FP_LOAD_SEMANTIC, FP_LOAD_NO_SEMANTIC = L.FP_LOAD_SEMANTIC, L.FP_LOAD_NO_SEMANTIC


def load(path: Union[str, "os.PathLike[str]"], semantic: bool = False, unchecked: bool = False) -> Plan:
    """Load and verify a plan.json (written by `flexplan compile` or
    Plan.save()). Raises FlexplanError with the located message when the
    file is unreadable, malformed, tampered with or fails verification.
    semantic=True also runs the semantic check (the verifier's rule 9,
    docs/ir.md): the plan computes the training step it claims. Without it
    an Executor made from the plan runs that check when it is created (a
    plan `flexplan verify` rejects never runs); unchecked=True opts out of
    that (docs/executor.md says what the check costs)."""
    lib = L.lib()
    h = ctypes.c_void_p()
    if semantic and unchecked:
        raise FlexplanError(L.FP_ERR_ARG, "flexplan.load: semantic=True and unchecked=True contradict each other")
    flags = FP_LOAD_SEMANTIC if semantic else FP_LOAD_NO_SEMANTIC if unchecked else 0
    if flags:
        return _plan_or_raise(lib, lib.fp_plan_load_flags(L.fsencode(path, "path"), flags, ctypes.byref(h)), h)
    return _plan_or_raise(lib, lib.fp_plan_load(L.fsencode(path, "path"), ctypes.byref(h)), h)


def _plan_or_raise(lib: Any, st: int, h: ctypes.c_void_p) -> Plan:
    """The Plan a load or compile made, or FlexplanError with the message it
    kept on the handle (the handle is freed then)."""
    if st != L.FP_OK:
        msg = L.text(lib.fp_plan_errmsg(h)) if h else ""
        if h:
            lib.fp_plan_free(h)
        raise FlexplanError(st, msg)
    return Plan(h)


def _source(x: Source, what: str) -> Tuple[Optional[bytes], Optional[bytes]]:
    """(path, text) for a compile input: a dict (serialized), JSON text (a
    str or bytes starting with '{'), or a path (str or os.PathLike)."""
    if x is None:
        return None, None
    if isinstance(x, dict):
        return None, json.dumps(x).encode()
    if isinstance(x, bytes) and x.lstrip().startswith(b"{") or isinstance(x, str) and x.lstrip().startswith("{"):
        text = x if isinstance(x, bytes) else x.encode()
        # JSON text: C reads it up to its first NUL, which the CLI refuses
        if b"\0" in text:
            raise ValueError("%s: JSON text must not contain a NUL byte" % what)
        return None, text
    if isinstance(x, (bytes, str, os.PathLike)):
        return L.fsencode(x, what), None
    raise TypeError("%s: expected a dict, JSON text or a path, got %s" % (what, type(x).__name__))


def compile(model: Source, spec: Source = None, *, hardware: Optional[str] = None,  # noqa: A001 - the API's name
            policy: str = "flexplan", placements: Any = None) -> Plan:
    """Compile a model and a sharding spec into a Plan (`flexplan compile`).

    Args:
        model: the model (model.json, or {"model": ..., "spec": ...}) as a
            dict, JSON text, or a path. Text and dicts are named "<model>"
            in messages.
        spec: the spec as a dict, JSON text or path; None: the model's
            embedded spec, or the defaults.
        hardware: a hardware preset ("h100-sxm", "h200", "h200-fit", "cpu-mpi") or the path of a
            hardware file (docs/cost-model.md; a path holds '/' or '.')
            replacing the spec's machine; None: the spec's.
        policy: "flexplan" (as specified) or "fsdp2" (lowered as PyTorch
            FSDP2 does by default, a baseline for comparison).
        placements: placement plug-ins the spec may name besides those
            registered (flexplan.placement.register): a
            flexplan.placement.Placement, a list of them (each under its
            name) or a {name: Placement} dict; docs/placements.md.

    Raises FlexplanError with the located messages the CLI prints for the
    same input (status FP_ERR_INPUT), or FP_ERR_ARG for an unknown preset or
    policy.
    """
    lib = L.lib()
    mp, mt = _source(model, "model")
    sp, st_ = _source(spec, "spec")
    from . import placement as _pl  # pylint: disable=import-outside-toplevel
    plugins = _pl._resolve(placements)  # pylint: disable=protected-access
    with _pl._Set(plugins) as pset:  # pylint: disable=protected-access
        opt = L.fp_compile_options(model_path=mp, model_text=mt, spec_path=sp, spec_text=st_,
                                   hardware=L.cstr(hardware, "hardware"),
                                   policy=L.cstr(policy, "policy"), placements=pset.h if plugins else None)
        h = ctypes.c_void_p()
        return _plan_or_raise(lib, lib.fp_plan_compile(ctypes.byref(opt), ctypes.byref(h)), h)
