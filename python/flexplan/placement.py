"""Placement plug-ins from Python (docs/placements.md).

A placement says how one param is spread over the ranks of its shard group:
which elements of the flattened (row-major) param each rank holds, the
collective that unshards it and the reduction of its gradient. Subclass
:class:`Placement`, then either pass an instance to :func:`flexplan.compile`
(``placements=[...]``) or register it by name (:func:`register`) and name it
in the spec: ``{"kind": "block_cyclic"}``. The compiler checks what the
plug-in gives (every element held by exactly one rank - by every rank for
``unshard="none"`` - inside the param, on the alignment it claims) and
refuses a wrong one with a located :class:`~flexplan.FlexplanError` naming
it; a checked layout is planned like a built-in one.

    class EveryOther(flexplan.placement.Placement):
        name = "two_halves"
        unshard, reduce = "all_gather_v", "reduce_scatter_v"
        def pieces(self, param, rank):
            h = param.numel // param.group_size
            end = param.numel if rank == param.group_size - 1 else (rank + 1) * h
            return [(rank * h, end - rank * h)]

The callbacks run on the compiling thread, inside ``flexplan.compile``; an
exception in one becomes the compile's located error (its text).
"""
import ctypes
import threading
from typing import Dict, Optional

from . import _lib as L
from .errors import FlexplanError

UNSHARD = {"all_gather": 0, "all_gather_v": 1, "broadcast": 2, "none": 3}
REDUCE = {"reduce_scatter": 0, "reduce_scatter_v": 1, "reduce": 2, "all_reduce": 3}


class Param:
    """What a placement is told of a param: ``name``, ``module``, ``shape``
    (a tuple; each rank's tp slice under tensor parallelism), ``numel``,
    ``group_size`` (ranks 0 .. group_size-1 hold its pieces) and
    ``elem_bytes`` (of its main weights)."""

    __slots__ = ("name", "module", "shape", "numel", "group_size", "elem_bytes")

    def __init__(self, c):
        self.name = c.name.decode()
        self.module = c.module.decode()
        self.shape = tuple(c.shape[k] for k in range(c.ndim))
        self.numel, self.group_size, self.elem_bytes = c.numel, c.group_size, c.elem_bytes

    def __repr__(self):
        return "Param(%r, shape=%r, group_size=%d)" % (self.name, self.shape, self.group_size)


class Placement:
    """A placement plug-in. Set ``name`` (``[a-z][a-z0-9_]*``, not a built-in
    kind), and ``align_elems``, ``unshard`` and ``reduce`` (or override
    :meth:`describe` to choose them per param), and define :meth:`pieces`.

    The pairs: ``all_gather`` with ``reduce_scatter`` (an even split of a
    dim), ``all_gather_v`` with ``reduce_scatter_v`` (one run per rank, in
    rank order), ``broadcast`` with ``reduce`` (one rank holds it all),
    ``none`` with ``all_reduce`` (every rank holds it all)."""

    name: Optional[str] = None
    align_elems = 1
    unshard = "all_gather_v"
    reduce = "reduce_scatter_v"

    def describe(self, param):  # pylint: disable=unused-argument
        """(align_elems, unshard, reduce) for param (a :class:`Param`)."""
        return self.align_elems, self.unshard, self.reduce

    def pieces(self, param, rank):
        """Rank's pieces of param: a list of (begin, count) runs of the
        flattened param, in the order its shard stores them."""
        raise NotImplementedError("%s.pieces" % type(self).__name__)


class BlockCyclic(Placement):
    """Rows dealt round-robin to the ranks in blocks of ``block`` rows (rank g
    holds row blocks g, g+G, ...): all_gather_v. It plans where each rank's
    blocks form one run, or where the blocks divide the rows; a short last
    block among several per rank is refused, located."""

    name = "block_cyclic"

    def __init__(self, block=8, name=None):
        if int(block) < 1:
            raise ValueError("block_cyclic: block must be >= 1, got %r" % (block,))
        self.block = int(block)
        if name:
            self.name = name

    def describe(self, param):
        inner = 1
        for s in param.shape[1:]:
            inner *= s
        return inner, "all_gather_v", "reduce_scatter_v"

    def pieces(self, param, rank):
        rows = param.shape[0] if param.shape else 1
        inner = param.numel // rows if rows else 0
        out = []
        for b in range(rank, -(-rows // self.block), param.group_size):
            r0, r1 = b * self.block, min(rows, (b + 1) * self.block)
            out.append((r0 * inner, (r1 - r0) * inner))
        return out


class ExpertOwned(Placement):
    """Each MoE expert's params wholly on one rank: the expert index read
    after ``marker`` in the param's name, owner index mod group size."""

    name = "expert_owned"
    unshard, reduce = "broadcast", "reduce"

    def __init__(self, marker="experts.", name=None):
        self.marker = marker
        if name:
            self.name = name

    def expert(self, pname):
        """The expert index of a param name, or None."""
        at = pname.find(self.marker)
        if at < 0:
            return None
        rest = pname[at + len(self.marker):].split(".", 1)[0]
        return int(rest) if rest.isdigit() else None

    def describe(self, param):
        if self.expert(param.name) is None:
            raise ValueError("expert_owned: no expert index after %r in the name" % self.marker)
        return 1, "broadcast", "reduce"

    def pieces(self, param, rank):
        return [(0, param.numel)] if self.expert(param.name) % param.group_size == rank else []


_registry: Dict[str, "Placement"] = {}
_lock = threading.Lock()


def register(placement, name=None):
    """Make placement (a :class:`Placement` instance) nameable in every later
    spec as ``{"kind": name}`` (default: its ``name``); replaces an earlier
    one of that name. Returns placement."""
    if not isinstance(placement, Placement):
        raise TypeError("register: expected a flexplan.placement.Placement, got %s" % type(placement).__name__)
    key = name or placement.name
    if not key:
        raise ValueError("register: the placement has no name")
    with _lock:
        _registry[key] = placement
    return placement


def unregister(name):
    """Forget the placement registered as name (KeyError when none is)."""
    with _lock:
        del _registry[name]


def registered():
    """{name: placement} of the registered placements."""
    with _lock:
        return dict(_registry)


def _write_err(err, cap, text):
    data = text.encode("utf-8", "replace")[:max(0, cap - 1)] + b"\0"
    if cap > 0:
        ctypes.memmove(err, data, len(data))


class _Set:
    """An fp_placement_set holding the given placements for one compile; the
    ctypes callbacks live as long as it does (use it in a with block)."""

    def __init__(self, placements):
        lib = L.lib()
        self.keep = []
        self.h = ctypes.c_void_p()
        st = lib.fp_placement_set_create(ctypes.byref(self.h))
        if st != L.FP_OK:
            raise FlexplanError(st, "fp_placement_set_create failed")
        try:
            for name, pl in placements.items():
                self._add(lib, name, pl)
        except BaseException:
            self.close()
            raise

    def _add(self, lib, name, pl):
        def describe(_user, param, out, err, cap):
            try:
                align, unshard, reduce = pl.describe(Param(param.contents))
                if unshard not in UNSHARD:
                    raise ValueError("unknown unshard collective %r (expected one of %s)" % (unshard, ", ".join(UNSHARD)))
                if reduce not in REDUCE:
                    raise ValueError("unknown reduction %r (expected one of %s)" % (reduce, ", ".join(REDUCE)))
                out.contents.align_elems = int(align)
                out.contents.unshard, out.contents.reduce = UNSHARD[unshard], REDUCE[reduce]
                return L.FP_OK
            except Exception as e:  # pylint: disable=broad-except - the compile reports it, located
                _write_err(err, cap, "%s: %s" % (type(e).__name__, e))
                return L.FP_ERR_ARG

        def pieces(_user, param, rank, out, cap, n, err, errcap):
            try:
                runs = [(int(b), int(c)) for b, c in pl.pieces(Param(param.contents), rank)]
                n[0] = len(runs)
                for k, (b, c) in enumerate(runs[:cap]):
                    out[k].begin, out[k].count = b, c
                return L.FP_OK
            except Exception as e:  # pylint: disable=broad-except
                _write_err(err, errcap, "%s: %s" % (type(e).__name__, e))
                return L.FP_ERR_ARG

        table = L.fp_placement_plugin(L.PLACEMENT_DESCRIBE_FN(describe), L.PLACEMENT_PIECES_FN(pieces))
        self.keep.append(table)
        st = lib.fp_placement_set_add(self.h, L.cstr(name, "placement name"), ctypes.byref(table), None)
        if st != L.FP_OK:
            raise FlexplanError(st, L.text(lib.fp_placement_set_errmsg(self.h)))

    def close(self):
        if self.h:
            L.lib().fp_placement_set_free(self.h)
            self.h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _resolve(placements):
    """The registry, overlaid with the placements a compile was given (a
    Placement, a list of them, or a {name: Placement} dict)."""
    out = registered()
    if placements is None:
        return out
    if isinstance(placements, Placement):
        placements = [placements]
    items = placements.items() if isinstance(placements, dict) else [(p.name if isinstance(p, Placement) else None, p)
                                                                      for p in placements]
    for name, pl in items:
        if not isinstance(pl, Placement):
            raise TypeError("placements: expected flexplan.placement.Placement instances, got %s" % type(pl).__name__)
        if not name:
            raise ValueError("placements: %s has no name" % type(pl).__name__)
        out[name] = pl
    return out
