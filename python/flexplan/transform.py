"""Reshard transform plug-ins from Python (docs/reshard.md, "Transforms").

A transform changes what crosses the wire when :func:`flexplan.reshard`
moves a param's slice from one process to another, in the terms of
Megatron-Core's ReshardTransform. Subclass :class:`Transform`:

    class Bf16Wire(flexplan.transform.Transform):
        name = "bf16_wire"
        def should_transform(self, param):            # which params it takes
            return param.from_dtype == "fp32" and param.to_dtype == "fp32"
        def send_wires(self, param, begin, count):    # the sender's wire tensors
            return [("bf16", count)]
        def prepare_send(self, param, begin, count, src, wires):
            wires[0][:] = torch.frombuffer(src, dtype=torch.float32).bfloat16().view(torch.uint8).numpy().tobytes()
        def finalize_recv(self, param, begin, count, wires, dst):
            dst[:] = torch.frombuffer(wires[0], dtype=torch.bfloat16).float().view(torch.uint8).numpy().tobytes()

and pass it as ``flexplan.reshard(a, b, transform={"fc*": Bf16Wire()})`` (the
pattern narrows should_transform), or :func:`register` it and name it:
``transform={"fc*": "bf16_wire"}``. ``recv_wires`` (prepare_recv) defaults
to ``send_wires``. ``src``, ``dst`` and each wire are writable memoryviews of
bytes (``count`` elements of the param's FROM / TO dtype; the wire tensors
as ``send_wires`` / ``recv_wires`` gave them). The compiled transfer records
every op's wire tensors, so the verifier checks that each send's counts
equal its receive's and that every TO element is written exactly once;
``finalize_recv`` writes a bounded view, and a write outside it fails the
run naming the transform. The transfer keeps the callbacks alive; they run
inside ``flexplan.reshard`` (wire shapes) and ``Transfer.run`` (the data),
and an exception in one becomes that call's FlexplanError (its text).
"""
import ctypes
import fnmatch
import threading
from typing import Dict, List, Tuple

from . import _lib as L
from .errors import FlexplanError


class Param:
    """What a transform is told of a param: ``name``, ``numel``,
    ``from_dtype`` and ``to_dtype`` (its main dtype in each plan: "fp32",
    "bf16", "fp16")."""

    def __init__(self, c):
        self.name = c.name.decode()
        self.numel = c.numel
        self.from_dtype = L.ELEMS[c.from_dtype][0]
        self.to_dtype = L.ELEMS[c.to_dtype][0]

    def __repr__(self):
        return "Param(%r, numel=%d, %s -> %s)" % (self.name, self.numel, self.from_dtype, self.to_dtype)


class Transform:
    """Base class of a reshard transform (module docstring). ``name``
    identifies it in the transfer (its JSON and text) and the registry."""

    name = ""

    def should_transform(self, param: Param) -> bool:
        return True

    def send_wires(self, param: Param, begin: int, count: int) -> List[Tuple[str, int]]:
        raise NotImplementedError("send_wires")

    def recv_wires(self, param: Param, begin: int, count: int) -> List[Tuple[str, int]]:
        return self.send_wires(param, begin, count)

    def prepare_send(self, param: Param, begin: int, count: int, src: memoryview, wires: List[memoryview]) -> None:
        raise NotImplementedError("prepare_send")

    def finalize_recv(self, param: Param, begin: int, count: int, wires: List[memoryview], dst: memoryview) -> None:
        raise NotImplementedError("finalize_recv")


class MXFP8(Transform):
    """MXFP8 on the contract, the library's built-in transform (the C tables
    of fp_transform_mxfp8, run by the library, no Python in the loop): mode
    "sender" (the sender quantizes: e4m3 elements and e8m0 scales on the
    wire; what transform={pattern: "mxfp8"} names) or "receiver" (FROM's
    bytes on the wire, converted on receipt); either writes the same TO
    bytes. The built-in names "mxfp8_sender" and "mxfp8_receiver"."""

    MODES = {"sender": 0, "receiver": 1}

    def __init__(self, mode: str = "sender") -> None:
        if mode not in self.MODES:
            raise ValueError("MXFP8: mode %r (expected sender or receiver)" % (mode,))
        self.mode = mode
        self.name = "mxfp8_" + mode


_registry: Dict[str, Transform] = {}
_lock = threading.Lock()


def register(transform: Transform, name: str = "") -> Transform:
    """Make transform nameable in flexplan.reshard(transform={pattern: name})
    (default: its ``name``); replaces an earlier one of that name."""
    if not isinstance(transform, Transform):
        raise TypeError("register: expected a flexplan.transform.Transform, got %s" % type(transform).__name__)
    key = name or transform.name
    if not key:
        raise ValueError("register: the transform has no name")
    with _lock:
        _registry[key] = transform
    return transform


def unregister(name: str) -> None:
    with _lock:
        del _registry[name]


def registered() -> Dict[str, Transform]:
    with _lock:
        return dict(_registry)


_CODE = {v[0]: e for e, v in L.ELEMS.items()}  # dtype name -> fp_elem


register(MXFP8("sender"))
register(MXFP8("receiver"))


def _write_err(err, cap, text):
    data = text.encode("utf-8", "replace")[:max(0, cap - 1)] + b"\0"
    if cap > 0:
        ctypes.memmove(err, data, len(data))


def _view(addr, nbytes):
    return memoryview((ctypes.c_char * nbytes).from_address(addr)).cast("B") if nbytes else memoryview(b"")


def _wires(obj, recv, p, begin, count):
    ws = (obj.recv_wires if recv else obj.send_wires)(p, begin, count)
    out = []
    for dt, n in ws:
        if dt not in L.ELEM_BY_NAME:
            raise ValueError("unknown wire dtype %r (expected one of %s)" % (dt, ", ".join(L.ELEM_BY_NAME)))
        out.append((dt, int(n)))
    return out


class _Set:
    """An fp_transform_set holding (pattern, transform) pairs, one entry per
    pair; the ctypes callbacks live as long as it does (a Transfer keeps it)."""

    def __init__(self, pairs):
        lib = L.lib()
        self.keep = []
        self.error = None  # the first exception a should_transform raised (flexplan.reshard raises it)
        self.h = ctypes.c_void_p()
        st = lib.fp_transform_set_create(ctypes.byref(self.h))
        if st != L.FP_OK:
            raise FlexplanError(st, "fp_transform_set_create failed")
        try:
            names = set()
            for pat, obj in pairs:
                name = obj.name or type(obj).__name__.lower()
                if name in names:  # one transform under several patterns: one entry each
                    name = "%s_%d" % (name, len(names))
                names.add(name)
                self._add(lib, name, pat, obj)
        except BaseException:
            self.close()
            raise

    def _add(self, lib, name, pat, obj):
        def guard(fn):
            def call(*a):
                err, cap = a[-2], a[-1]
                try:
                    fn(*a[:-2])
                    return L.FP_OK
                except Exception as e:  # pylint: disable=broad-except - the library reports it, naming the transform
                    _write_err(err, cap, "%s: %s" % (type(e).__name__, e))
                    return L.FP_ERR_ARG
            return call

        def should(_u, p):
            try:
                q = Param(p.contents)
                return int(fnmatch.fnmatchcase(q.name, pat) and bool(obj.should_transform(q)))
            except Exception as e:  # pylint: disable=broad-except - the C call has no error channel: kept, raised after
                if self.error is None:
                    self.error = "transform '%s': should_transform(%s): %s: %s" % (name, q.name if "q" in locals() else "?",
                                                                                    type(e).__name__, e)
                return 0

        def wires_fn(recv):
            def f(_u, p, begin, count, out, n):
                ws = _wires(obj, recv, Param(p.contents), begin, count)
                if not 1 <= len(ws) <= L.TRANSFORM_MAX_WIRES:
                    raise ValueError("%d wire tensors (1 to %d)" % (len(ws), L.TRANSFORM_MAX_WIRES))
                for k, (dt, c) in enumerate(ws):
                    out[k].dtype, out[k].count = _CODE[dt], c
                n[0] = len(ws)
            return f

        def send(_u, p, begin, count, src, wires):
            q = Param(p.contents)
            ws = _wires(obj, False, q, begin, count)
            views = [_view(wires[k], c * L.ELEM_BY_NAME[dt][1]) for k, (dt, c) in enumerate(ws)]
            obj.prepare_send(q, begin, count, _view(src, count * L.ELEM_BY_NAME[q.from_dtype][1]), views)

        def finalize(_u, p, begin, count, wires, dst):
            q = Param(p.contents)
            ws = _wires(obj, True, q, begin, count)
            views = [_view(wires[k], c * L.ELEM_BY_NAME[dt][1]) for k, (dt, c) in enumerate(ws)]
            obj.finalize_recv(q, begin, count, views, _view(dst, count * L.ELEM_BY_NAME[q.to_dtype][1]))

        table = L.fp_reshard_transform(L.XF_SHOULD_FN(should), L.XF_WIRES_FN(guard(wires_fn(False))),
                                       L.XF_WIRES_FN(guard(wires_fn(True))), L.XF_SEND_FN(guard(send)),
                                       L.XF_FINALIZE_FN(guard(finalize)))
        self.keep.append(table)
        st = lib.fp_transform_set_add(self.h, L.cstr(name, "transform name"), ctypes.byref(table), None)
        if st != L.FP_OK:
            raise FlexplanError(st, L.text(lib.fp_transform_set_errmsg(self.h)))

    def close(self):
        if self.h:
            L.lib().fp_transform_set_free(self.h)
            self.h = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


BUILTIN = ("mxfp8", "mxfp8_receiver", "mxfp8_sender")  # the library's own (ir/xfer.h): rules it resolves


def _resolve(pat, t):
    """A transform given by object or by name: a built-in's name (a str:
    MXFP8, which the library runs), or a plug-in Transform."""
    if isinstance(t, MXFP8):
        return t.name
    if isinstance(t, Transform):
        return t
    if t in BUILTIN:
        return t
    reg = registered()
    if isinstance(t, str) and t in reg:
        return _resolve(pat, reg[t])
    raise FlexplanError(L.FP_ERR_ARG, "transform %r: unknown transform %r (known: %s; or a flexplan.transform.Transform)"
                        % (pat, t, ", ".join(sorted(set(BUILTIN) | set(reg)))))
