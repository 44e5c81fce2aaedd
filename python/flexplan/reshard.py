"""flexplan.reshard - transfers of a model's weights between two plans.

    t = flexplan.reshard(from_plan, to_plan, transform={"layers.*.weight": "mxfp8"})
    t.info["wire_bytes"], t.info["lower_bound"]      # bytes on the wire / bytes lacked
    t.save("a_to_b.xfer.json"); print(t.explain())
    t.run(from_executor, to_executor)               # under mpirun, MPI or NCCL executors

The transfer is compiled and verified by the library (fp_reshard_compile:
every TO byte written exactly once, sends matched with receives, orders that
cannot deadlock, no read of an unwritten byte); docs/reshard.md says how.
"""

import ctypes
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from . import _lib as L

if TYPE_CHECKING:  # annotations only: no import cycle at run time
    from .executor import Executor
    from .plan import Plan

_FORMS = L.XFER_RENDER


class Transfer:
    """A compiled transfer (an fp_xfer handle). It keeps the two plans alive."""

    def __init__(self, handle: Optional[int], from_plan: Optional["Plan"], to_plan: Optional["Plan"]) -> None:
        self._h = handle
        self._plans = (from_plan, to_plan)
        self._xf: Any = None  # the transform set (flexplan.transform._Set) its callbacks live in

    def close(self) -> None:
        if self._h:
            L.lib().fp_xfer_free(self._h)
            self._h = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __enter__(self) -> "Transfer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def errmsg(self) -> str:
        return L.text(L.lib().fp_xfer_errmsg(self._h)) if self._h else ""

    @property
    def info(self) -> Dict[str, Any]:
        """The figures: from_world, to_world, to_offset, processes, nops,
        wire_bytes, lower_bound, local_bytes, max_send_bytes, max_recv_bytes,
        from_offset."""
        i = L.fp_xfer_info()
        L.check(L.lib().fp_xfer_get_info(self._h, ctypes.byref(i)), lambda: self.errmsg)
        return {f[0]: getattr(i, f[0]) for f in L.fp_xfer_info._fields_}

    def _render(self, form: str) -> str:
        out = ctypes.c_void_p()
        L.check(L.lib().fp_xfer_render(self._h, _FORMS[form], ctypes.byref(out)), lambda: self.errmsg)
        return L.take_string(out.value)

    def to_json(self) -> str:
        """The transfer as JSON text ("flexplan.xfer.v1", what `flexplan reshard -o` writes)."""
        return self._render("json")

    def to_ir(self) -> str:
        """The text form (`flexplan reshard --emit=ir`)."""
        return self._render("ir")

    def explain(self) -> str:
        """One row per op and the figures (`flexplan reshard --emit=explain`)."""
        return self._render("explain")

    def to_trace(self) -> str:
        """A Chrome trace: one track per process (`--emit=trace`)."""
        return self._render("trace")

    def save(self, path: Union[str, "os.PathLike[str]"]) -> Union[str, "os.PathLike[str]"]:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())
        return path

    def run(self, from_executor: Optional["Executor"], to_executor: Optional["Executor"]) -> None:
        """Run it (collective over MPI_COMM_WORLD). Pass this process's
        executors of the two plans, None where it holds no rank; all on one
        backend, MPI or NCCL (the NCCL communicator the first run makes is
        kept on the transfer for the next runs)."""
        def h(x: Any) -> Any:  # a flexplan.Executor (its fp_exec in _x), or a raw handle
            if x is None:
                return None
            v = getattr(x, "_x", x)
            return v.value if isinstance(v, ctypes.c_void_p) else v
        L.check(L.lib().fp_xfer_run(self._h, h(from_executor), h(to_executor), None), lambda: self.errmsg)


def load_transfer(path: Union[str, "os.PathLike[str]"], transforms: Optional[Dict[str, Any]] = None) -> Transfer:
    """Load a transfer saved as JSON (Transfer.save, `flexplan reshard -o`);
    checked and verified by the library. Raises FlexplanError (located).
    transforms: {name: flexplan.transform.Transform} for the transforms the
    file names (default: the registered ones), bound by name."""
    from . import transform as X
    h = ctypes.c_void_p()
    t = _transfer_or_raise(L.lib().fp_xfer_load(L.fsencode(path, "path"), ctypes.byref(h)), h, None, None)
    objs = X.registered() if transforms is None else dict(transforms)
    if objs:
        for n, o in objs.items():
            if not isinstance(o, X.Transform):
                raise TypeError("transforms: %r is not a flexplan.transform.Transform" % n)
            o.name = o.name or n
        # (the built-in MXFP8 needs no binding: the library runs it)
        t._xf = X._Set([("*", o) for o in objs.values() if not isinstance(o, X.MXFP8)])
        st = L.lib().fp_xfer_bind_transforms(t._h, t._xf.h)
        if st != L.FP_OK:
            msg = t.errmsg
            t.close()
            raise L.FlexplanError(st, msg)
    return t


def _transfer_or_raise(st: int, h: ctypes.c_void_p, from_plan: Optional["Plan"], to_plan: Optional["Plan"]) -> Transfer:
    """The Transfer a load or compile made, or FlexplanError with the message
    it kept on the handle (the handle is freed then)."""
    t = Transfer(h.value, from_plan, to_plan)
    if st != L.FP_OK:
        msg = t.errmsg
        t.close()
        raise L.FlexplanError(st, msg)
    return t


def reshard(from_plan: "Plan", to_plan: "Plan", *, transform: Union[None, Dict[str, Any], List[str]] = None,
            what: str = "weights", to_offset: int = 0, from_offset: int = 0) -> Transfer:
    """Compile the transfer of the main weights from `from_plan`'s ranks to
    `to_plan`'s (flexplan.Plan objects of one model). transform: {pattern:
    a built-in name ("mxfp8" = "mxfp8_sender", "mxfp8_receiver") |
    a flexplan.transform.Transform | a registered transform's name}
    (fnmatch patterns over param names; a Transform takes the params its
    pattern matches and its should_transform accepts) or ["pattern=NAME", ...];
    what: "weights", or "weights+optimizer" (also each optimizer state, plans of
    one optimizer; never transformed); to_offset: TO rank r is
    process r + to_offset, FROM rank r process r + from_offset. Raises FlexplanError with the located messages when
    the plans do not fit together."""
    from .plan import Plan
    for arg, p in (("from_plan", from_plan), ("to_plan", to_plan)):
        if not isinstance(p, Plan):
            raise TypeError("reshard: %s: expected a flexplan.Plan (flexplan.load or flexplan.compile), got %s"
                            % (arg, type(p).__name__))
    to_offset = L.int64(to_offset, "to_offset")
    from_offset = L.int64(from_offset, "from_offset")
    if transform is not None and not isinstance(transform, (dict, list, tuple)):
        raise TypeError("transform: expected a dict or a list of 'pattern=mxfp8', got %s" % type(transform).__name__)
    from . import transform as X
    rules, plug = [], []
    items = transform.items() if isinstance(transform, dict) else [
        tuple(x.rsplit("=", 1)) if "=" in x else (x, "") for x in (transform or [])]
    for pat, kind in items:
        obj = X._resolve(pat, kind)
        pat_b = L.cstr(pat, "transform pattern", allow_none=False)
        if isinstance(obj, str):  # a built-in (MXFP8): a rule the library resolves
            rules.append(pat_b + b"=" + obj.encode())
        else:
            plug.append((L.text(pat_b), obj))
    arr = (ctypes.c_char_p * max(1, len(rules)))(*rules)
    xf = X._Set(plug) if plug else None
    opt = L.fp_reshard_options(L.cstr(what, "what"), to_offset, None, 0, from_offset, xf.h if xf else None,
                               arr, len(rules))
    h = ctypes.c_void_p()
    st = L.lib().fp_reshard_compile(from_plan._handle, to_plan._handle, ctypes.byref(opt), ctypes.byref(h))
    t = _transfer_or_raise(st, h, from_plan, to_plan)
    t._xf = xf
    if xf is not None and xf.error:
        t.close()
        raise L.FlexplanError(L.FP_ERR_ARG, xf.error)
    return t
