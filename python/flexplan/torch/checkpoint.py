"""flexplan.torch.checkpoint: sharded state dicts for torch.distributed.checkpoint.

``state_dict(st, optimizer=None)`` returns a state dict that
``torch.distributed.checkpoint.save`` and ``load`` take as they are:

- keys are the module's fully qualified names (``module.state_dict()``'s,
  as ``get_model_state_dict`` gives them: tied aliases and persistent
  buffers included); with an optimizer, ``{"model": ..., "optim": ...}``
  where "optim" is laid out as ``get_optimizer_state_dict`` lays it out
  (``{"state": {fqn: {"step", "exp_avg", ...}}, "param_groups": [...]}``);
- each value is a plain local tensor carrying DCP's ``CheckpointableTensor``
  fields (``global_shape``, ``global_offsets``, ``local_offsets``,
  ``local_sizes``): the elements this rank owns, in full-tensor coordinates.
  A flat-bucket extent that cuts rows becomes boxes (a partial row, whole
  rows, a partial row; recursively for more dims); the runs of a shard on
  dim > 0 become one box. Replicas (hybrid groups, no_shard, replicate)
  contribute identical boxes, which DCP's planner writes once.

The tensors are staging copies (this rank's owned elements, main dtype), not
the arena: ``dcp.load`` fills them, and ``load_state_dict(st, sd,
optimizer=None)`` then validates them on every rank, agrees (one all-reduce:
if any rank fails, every rank raises and no rank changes anything), and
writes the main shards, the optimizer state (the plan's views; step and
param_groups' hyperparameters), the persistent compute copies (recast from
the new main weights, gathered where this rank holds only a shard) and
persistent buffers.

``state_dict(st, opt, copy=False)`` is for saving without a copy: DCP's
writer takes each box from the arena as it writes it.
``load_in_place(st, checkpoint_id, opt)`` loads without a copy: every rank
checks the checkpoint's metadata against its boxes (keys, shapes, coverage,
files present and long enough), the ranks agree, then dcp.load reads into
the arena's views. docs/torch.md, "Checkpoints (torch.distributed.checkpoint)".
"""
import ctypes
import json
import os
import shutil
import sys
import warnings
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from .. import _lib
from ..errors import ArgumentTypeError, error_maker, FlexplanError
from ..executor import _vote
from . import _hf

if TYPE_CHECKING:  # annotations only (_shard imports torch.distributed lazily)
    from ._shard import Sharded

__all__ = ["state_dict", "load_state_dict", "load_in_place", "init_process_group", "flat_boxes",
           "save_checkpoint", "load_checkpoint", "CHECKSUMS"]

# the checksum file save_checkpoint writes beside DCP's .metadata (flexplan.checksums.v1):
# one CRC-32 per storage item (a chunk of a tensor in a .distcp file, or a pickled value)
CHECKSUMS = "flexplan.checksums.json"

_TORCH = {n: _lib.torch_dtype(n) for n in _lib.FLOAT_DTYPES}


_err = error_maker(_lib.FP_ERR_WEIGHTS)  # the package's one error helper (flexplan.errors)


# ---- boxes -------------------------------------------------------------------
def _prod(xs):
    n = 1
    for x in xs:
        n *= int(x)
    return n


def _contig_strides(sizes):
    st, acc = [], 1
    for s in reversed(sizes):
        st.append(acc)
        acc *= int(s)
    return tuple(reversed(st))


def flat_boxes(shape: Sequence[int], start: int, n: int) -> List[Tuple[Tuple[int, ...], Tuple[int, ...], int]]:
    """The elements [start, start + n) of a row-major tensor of `shape` as
    boxes: [(offsets, sizes, flat_start)], in flat order, each box contiguous
    in the flat tensor. A range that cuts rows gives a partial row, whole
    rows, a partial row (each partial row split the same way one dim down)."""
    shape = tuple(int(s) for s in shape)
    out: List[Tuple[Tuple[int, ...], Tuple[int, ...], int]] = []
    if n <= 0:
        return out
    if not shape:
        return [((), (), start)]
    if len(shape) == 1:
        return [((start,), (n,), start)]
    inner = _prod(shape[1:])
    if inner == 0:
        return out
    r, c = divmod(start, inner)
    f = start
    if c:
        k = min(n, inner - c)
        for off, sz, fs in flat_boxes(shape[1:], c, k):
            out.append(((r,) + off, (1,) + sz, f + (fs - c)))
        f += k
        n -= k
        r += 1
    if n >= inner:
        m = n // inner
        out.append(((r,) + (0,) * (len(shape) - 1), (m,) + shape[1:], f))
        f += m * inner
        n -= m * inner
        r += m
    if n:
        for off, sz, fs in flat_boxes(shape[1:], 0, n):
            out.append(((r,) + off, (1,) + sz, f + fs))
    return out


def _extent_boxes(shape, ext):
    """This rank's elements of a param (its fp_extent) as boxes:
    [(offsets, sizes, shard_offset, shard_strides)]: the box is the shard's
    elements as_strided(sizes, shard_strides, shard_offset)."""
    shape = tuple(int(s) for s in shape)
    if ext.runs <= 0 or ext.len <= 0:
        return []
    if ext.runs > 1 and ext.last_len == ext.len:
        # the runs of a shard on dim d > 0: one box when they line up
        for d in range(1, len(shape)):
            sd = _prod(shape[d:])
            if ext.full_stride != sd or ext.full_off % sd + ext.len > sd:
                continue
            inner = flat_boxes(shape[d:], ext.full_off % sd, ext.len)
            outer = flat_boxes(shape[:d], ext.full_off // sd, ext.runs)
            if len(inner) == 1 and len(outer) == 1:
                (oo, osz, _), (io, isz, _) = outer[0], inner[0]
                ost = tuple(s * ext.shard_stride for s in _contig_strides(osz))
                return [(oo + io, osz + isz, 0, ost + _contig_strides(isz))]
    out = []
    for s, f, n in ext.pairs():
        for off, sz, fs in flat_boxes(shape, f, n):
            out.append((off, sz, s + (fs - f), _contig_strides(sz)))
    return out


class _Layout:
    """Where the boxes of one param sit in a staging tensor: stacked along
    dim 0 (shape: rows summed, every other dim its widest box)."""

    def __init__(self, shape, boxes):
        self.shape = tuple(int(s) for s in shape)
        self.boxes = boxes
        nd = len(self.shape)
        if nd == 0:
            self.local_shape = ()
            self.local_offsets = tuple(() for _ in boxes)
        else:
            rows, widest = 0, [0] * (nd - 1)
            offs = []
            for _, sz, _, _ in boxes:
                offs.append((rows,) + (0,) * (nd - 1))
                rows += sz[0]
                widest = [max(a, b) for a, b in zip(widest, sz[1:])]
            self.local_shape = (rows,) + tuple(widest)
            self.local_offsets = tuple(offs)
        self.global_offsets = tuple(tuple(b[0]) for b in boxes)
        self.local_sizes = tuple(tuple(b[1]) for b in boxes)
        self.numel = sum(_prod(b[1]) for b in boxes)

    def new(self, dtype, device="cpu"):
        """A staging tensor with DCP's CheckpointableTensor fields."""
        t = torch.zeros(self.local_shape, dtype=dtype, device=device)
        t.global_shape = self.shape
        t.global_offsets = self.global_offsets
        t.local_offsets = self.local_offsets
        t.local_sizes = self.local_sizes
        t._flexplan_layout = self
        return t

    def local(self, t, i):
        off, sz = self.local_offsets[i], self.local_sizes[i]
        if not off:
            return t
        return t[tuple(slice(o, o + s) for o, s in zip(off, sz))]

    def shard(self, flat, i):
        _, sz, so, ss = self.boxes[i]
        return flat.as_strided(sz, ss, flat.storage_offset() + so)

    def gather(self, flat, t):
        """shard (the arena's flat view) -> staging t"""
        with torch.no_grad():
            for i in range(len(self.boxes)):
                self.local(t, i).copy_(self.shard(flat, i))

    def scatter(self, t, flat):
        """staging t -> shard"""
        with torch.no_grad():
            for i in range(len(self.boxes)):
                self.shard(flat, i).copy_(self.local(t, i))

    def from_full(self, full, flat):
        """a full tensor (global shape) -> shard"""
        with torch.no_grad():
            for i, (off, sz, _, _) in enumerate(self.boxes):
                src = full[tuple(slice(o, o + s) for o, s in zip(off, sz))] if off else full
                self.shard(flat, i).copy_(src)


def _box_tensor(L, flat, i):
    """box i of a shard for DCP's writer: a contiguous box of a host shard is
    a tensor over the arena's bytes with storage of exactly its size (so the
    writer neither clones nor keeps a copy); any other box is a copy of that
    box alone"""
    _, sz, so, ss = L.boxes[i]
    if flat.device.type == "cpu" and tuple(ss) == _contig_strides(sz):
        n = _prod(sz)
        esz = flat.element_size()
        raw = (ctypes.c_char * (n * esz)).from_address(flat.data_ptr() + so * esz)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the arena is writable; torch warns about buffers it thinks are not
            return torch.frombuffer(raw, dtype=flat.dtype, count=n).view(sz)
    return L.shard(flat, i).clone()


# ---- the state dict ------------------------------------------------------------
def _state(st):
    from ._shard import state
    return state(st, "st")


def _check_optimizer_arg(optimizer):
    """optimizer: a torch.optim.Optimizer or None (ArgumentTypeError naming it)."""
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise ArgumentTypeError(f"optimizer: expected a torch.optim.Optimizer or None, got {type(optimizer).__name__}")


def _param_layout(p, tp_rank):
    """A param's boxes in its global coordinates: a tensor-parallel slice's
    boxes moved along the tp dim to the slice's place (tp index x local
    size), so that DCP sees the global tensor FSDP2 + TP saves"""
    boxes = _extent_boxes(p.shape, p.shard)
    if p.tp_dim is not None:
        d, shift = p.tp_dim, tp_rank * p.shape[p.tp_dim]
        boxes = [(tuple(o + shift if k == d else o for k, o in enumerate(off)), sz, so, ss)
                 for off, sz, so, ss in boxes]
    return _Layout(p.global_shape, boxes)


def _layouts(st):
    lay = getattr(st, "_ckpt_layouts", None)
    if lay is None:
        lay = {p.name: _param_layout(p, st.ex.tp_rank) for p in st.ex.params}
        st._ckpt_layouts = lay
    return lay


def _fqns(st):
    """module.state_dict() keys -> ("param", plan name) | ("buffer", tensor)"""
    by_id = {id(newp): name for name, (newp, _) in st.params.items()}
    binder = getattr(st, "_binder", None)
    if binder is not None:  # between steps the module's slots hold placeholders (docs/torch.md)
        by_id.update({id(h): name for name, h in binder.holders.items()})
    out = {}
    for k, v in st.module.state_dict(keep_vars=True).items():
        if id(v) in by_id:
            out[k] = ("param", by_id[id(v)])
        else:
            out[k] = ("buffer", v)
    return out


def _optim_keys(st, opt):
    """the per-param state keys the plan holds (or () for optimizer "none")"""
    from ._optim import PLAN_OPTIMIZERS as _PLAN_OPTIMIZERS
    kind = st.ex.optimizer
    if kind == "none":
        return ()
    return _PLAN_OPTIMIZERS[kind][1]


def _check_optimizer(st, opt):
    mains = {id(mp) for mp in st.main_params()}
    for g in opt.param_groups:
        for mp in g["params"]:
            if id(mp) not in mains or not hasattr(mp, "_flexplan_name"):
                raise _err("the optimizer steps a tensor that is not one of this state's main_params(): make it "
                           "with flexplan.torch.optimizer(st, ...)", _lib.FP_ERR_ARG)


def _scalar_state(v):
    return isinstance(v, torch.Tensor) and v.numel() == 1 and v.dim() == 0


def state_dict(st: "Sharded", optimizer: Optional[torch.optim.Optimizer] = None, *,
               copy: bool = True) -> Dict[str, Any]:
    """This rank's part of the model (and optimizer) state, for
    torch.distributed.checkpoint (module docstring). Call it between steps.
    Not collective.

    copy=True (the default, for loading and for saving): the values are
    staging copies of this rank's owned elements, taken now.
    copy=False (for saving only): no copy of the shards is made; DCP's
    writer takes each box from the arena when it writes it (one box at a
    time); the tensors hold no data of their own (load_state_dict refuses
    them), and the arena must not change until dcp.save returns."""
    st = _state(st)
    _check_optimizer_arg(optimizer)
    if not isinstance(copy, bool):
        raise ArgumentTypeError(f"copy: expected a bool, got {type(copy).__name__}")
    return _make_state_dict(st, optimizer, copy)


def _make_state_dict(st, optimizer, copy):
    """state_dict's work; copy may also be "in_place" (load_in_place's
    dataless views of the arena)."""
    lay = _layouts(st)
    model = {}
    staged = {}
    for k, (kind, v) in _fqns(st).items():
        if kind == "buffer":
            model[k] = _watch_loads(v.detach().clone())
            continue
        if v not in staged:
            p = st.ex.param(v)
            staged[v] = _value(lay[v], p.tensor("main"), copy)
        model[k] = staged[v]
    if optimizer is None:
        return model
    return {"model": model, "optim": _optim_state_dict(st, optimizer, lay, copy)}


def _dcp_saved_dtype(index):
    """the dtype the checkpoint holds index.fqn in, when DCP's load planner is
    resolving it (a caller's frame is DefaultLoadPlanner.resolve_tensor, whose
    planner holds the checkpoint's metadata); None otherwise (a save, or a
    planner of another shape)"""
    f = sys._getframe(2)
    for _ in range(8):
        if f is None:
            return None
        if f.f_code.co_name == "resolve_tensor":
            md = getattr(f.f_locals.get("self"), "metadata", None)
            m = getattr(md, "state_dict_metadata", {}).get(index.fqn)
            return getattr(getattr(m, "properties", None), "dtype", None)
        f = f.f_back
    return None


def _watch_loads(t, L=None):
    """t (a staging copy, a buffer or a scalar state) notes the dtype a DCP
    load reads into it from: dcp.load copies a checkpoint tensor of another
    dtype into t converting it silently, and load_state_dict refuses a
    value so converted (_converted). L: t's layout when t stages boxes."""
    def shard(index):
        cdt = _dcp_saved_dtype(index)
        if cdt is not None:
            t._flexplan_read_from = cdt
        if L is None or not L.local_shape:
            return t
        want = torch.Size(index.offset) if index.offset is not None else None
        for i, off in enumerate(L.global_offsets):
            if torch.Size(off) == want:
                return L.local(t, i)
        raise ValueError(f"{index.fqn}: no box at {index.offset} on this rank")
    t.__get_tensor_shard__ = shard
    return t


def _converted(sd, path=""):
    """the first tensor of a (nested) state dict that a DCP load filled from
    a checkpoint tensor of another dtype: (key, saved dtype, dtype), or None"""
    items = sd.items() if isinstance(sd, Mapping) else enumerate(sd) if isinstance(sd, (list, tuple)) else ()
    for k, v in items:
        key = f"{path}.{k}" if path else str(k)
        if isinstance(v, torch.Tensor):
            src = getattr(v, "_flexplan_read_from", None)
            if src is not None and src != v.dtype:
                return key, src, v.dtype
        elif isinstance(v, (Mapping, list, tuple)):
            got = _converted(v, key)
            if got:
                return got
    return None


def _value(L, flat, copy):
    """one state of one param as DCP sees it: a staging copy, or (copy=False)
    a dataless tensor whose boxes DCP takes from the arena when it writes, or
    (copy="in_place", load_in_place) one whose boxes are the arena's views"""
    if copy is True or not L.local_shape:
        t = L.new(flat.dtype)
        L.gather(flat, t)
        return _watch_loads(t, L)
    t = torch.zeros(1, dtype=flat.dtype).expand(L.local_shape)
    t.global_shape = L.shape
    t.global_offsets = L.global_offsets
    t.local_offsets = L.local_offsets
    t.local_sizes = L.local_sizes
    t._flexplan_layout = L
    t._flexplan_lazy = copy is False
    t._flexplan_inplace = copy == "in_place"
    offs = {torch.Size(o): i for i, o in enumerate(L.global_offsets)}

    def box(index):
        i = index.index
        if i is None or i >= len(L.global_offsets) or torch.Size(L.global_offsets[i]) != index.offset:
            i = offs.get(torch.Size(index.offset) if index.offset is not None else None)
        if i is None:
            raise ValueError(f"{index.fqn}: no box at {index.offset} on this rank")
        if copy == "in_place":
            return L.shard(flat, i)  # DCP reads into the arena itself
        f = sys._getframe(1)
        for _ in range(6):  # DCP's load resolves its targets through resolve_tensor
            if f is None:
                break
            if f.f_code.co_name == "resolve_tensor":
                raise ValueError(f"{index.fqn}: a flexplan.torch.state_dict(..., copy=False) is for saving; "
                                 f"load into flexplan.torch.state_dict(st, optimizer) (copies)")
            f = f.f_back
        return _box_tensor(L, flat, i)
    t.__get_tensor_shard__ = box
    return t


def _optim_state_dict(st, opt, lay, copy=True):
    _check_optimizer(st, opt)
    keys = _optim_keys(st, opt)
    views = getattr(st, "_optim_views", {})
    state, groups = {}, []
    for g in opt.param_groups:
        names = [mp._flexplan_name for mp in g["params"]]
        groups.append({k: v for k, v in g.items() if k != "params"} | {"params": names})
        for mp in g["params"]:
            name = mp._flexplan_name
            L = lay[name]
            s = {}
            cur = opt.state.get(mp, {})
            # the plan's state views (zeros before the first step), then
            # whatever else torch keeps: per-element tensors shaped like the
            # main shard are sharded like it, scalars (step) are replicated
            for k in keys:
                src = views.get(mp, {}).get(k, cur.get(k))
                if src is None:
                    continue
                s[k] = _value(L, src, copy)
            for k, v in cur.items():
                if k in s:
                    continue
                if isinstance(v, torch.Tensor) and v.numel() == mp.numel() and v.dim() == 1 and mp.dim() == 1 \
                        and not _scalar_state(v):
                    s[k] = _value(L, v, copy)
                elif isinstance(v, torch.Tensor):
                    s[k] = _watch_loads(v.detach().to("cpu").clone())
                else:
                    s[k] = v
            if "step" not in s and st.ex.optimizer == "adamw" and isinstance(opt, (torch.optim.Adam,
                                                                                   torch.optim.AdamW)):
                s["step"] = _watch_loads(torch.tensor(0.0))
            state[name] = s
    return {"state": state, "param_groups": groups}


# ---- loading -------------------------------------------------------------------
def _source(fqn, v, L, dtype_ok=True):
    """check one value of a state dict against the layout; returns
    ("staged", tensor) | ("full", tensor)"""
    if not isinstance(v, torch.Tensor):
        raise _err(f"{fqn}: expected a tensor, got {type(v).__name__}")
    if getattr(v, "_flexplan_inplace", False):
        return "in_place", v
    if getattr(v, "_flexplan_lazy", False):
        raise _err(f"{fqn}: this state dict was made with copy=False (for saving: it holds no data); load "
                   f"into flexplan.torch.state_dict(st, optimizer) (copies)")
    if getattr(v, "_flexplan_layout", None) is not None:
        if tuple(v.global_shape) != L.shape or tuple(v.global_offsets) != L.global_offsets \
                or tuple(v.local_sizes) != L.local_sizes:
            raise _err(f"{fqn}: the state dict's tensor is laid out for another plan or rank "
                       f"(global shape {list(v.global_shape)}, boxes {list(v.global_offsets)}); make it with "
                       f"flexplan.torch.state_dict(st) of this state")
        if tuple(v.shape) != L.local_shape:
            raise _err(f"{fqn}: staging shape {list(v.shape)}, expected {list(L.local_shape)}")
        return "staged", v
    if tuple(v.shape) == L.shape:
        return "full", v
    raise _err(f"{fqn}: shape {list(v.shape)} in the state dict, the plan says {list(L.shape)}")


def load_state_dict(st: "Sharded", sd: Mapping, optimizer: Optional[torch.optim.Optimizer] = None) -> None:
    """Put a state dict from state_dict(st, ...) (filled by dcp.load), or
    one of full tensors, into the arena: main shards, compute copies,
    optimizer state, buffers. Collective; between steps. Every rank checks
    its part first and the ranks agree: on any failure every rank raises
    FlexplanError and none changes anything."""
    st = _state(st)
    _check_optimizer_arg(optimizer)
    if not isinstance(sd, Mapping):
        raise ArgumentTypeError(f"sd: expected a state dict (a Mapping from flexplan.torch.state_dict), got "
                                f"{type(sd).__name__}")
    lay = _layouts(st)
    plan: List[Tuple[Any, ...]] = []  # (kind, args) writes, made only after the vote
    why = None
    try:
        if st.driver.pos != 0:
            raise _err("load_state_dict: call it between steps (after opt.step(), before the next forward)", _lib.FP_ERR_ORDER)
        if optimizer is not None:
            if not isinstance(sd, dict) or "model" not in sd or "optim" not in sd:
                raise _err("load_state_dict with an optimizer takes {'model': ..., 'optim': ...} as "
                           "flexplan.torch.state_dict(st, optimizer) makes it")
            msd, osd = sd["model"], sd["optim"]
        else:
            msd, osd = sd, None
        if not isinstance(msd, dict):
            raise _err(f"the model state dict is a {type(msd).__name__}, not a dict")
        conv = _converted(sd)
        if conv:
            raise _err(f"{conv[0]} is {str(conv[1]).replace('torch.', '')} in the checkpoint dcp.load read, "
                       f"{str(conv[2]).replace('torch.', '')} here: a load converts no dtype (DCP converted it "
                       f"while reading)")
        fq = _fqns(st)
        missing = [k for k in fq if k not in msd]
        extra = [k for k in msd if k not in fq]
        if missing or extra:
            raise _err("the state dict does not match the module: " + "; ".join(
                x for x in (f"missing {', '.join(missing[:8])}" + (" ..." if len(missing) > 8 else "")
                            if missing else "",
                            f"unexpected {', '.join(extra[:8])}" + (" ..." if len(extra) > 8 else "")
                            if extra else "") if x))
        done = set()
        for k, (kind, v) in fq.items():
            if kind == "buffer":
                src = msd[k]
                if not isinstance(src, torch.Tensor) or tuple(src.shape) != tuple(v.shape):
                    raise _err(f"{k}: buffer of shape {list(v.shape)}, the state dict holds "
                               f"{getattr(src, 'shape', type(src).__name__)}")
                plan.append(("copy", v, src))
                continue
            if v in done:
                continue
            done.add(v)
            p = st.ex.param(v)
            how, src = _source(k, msd[k], lay[v])
            plan.append(("main", p, how, src))
        if osd is not None:
            plan.extend(_plan_optim(st, optimizer, osd, lay))
    except FlexplanError as e:
        why = str(e)
    except Exception as e:  # noqa: BLE001 - any local failure must reach the vote
        why = f"{type(e).__name__}: {e}"
    fail = _vote(st.ex, why, "load the state dict")
    if fail is not None:
        raise _err(f"load_state_dict: {fail}; no rank changed its state")
    _write(st, plan, lay, optimizer)


def _plan_optim(st, opt, osd, lay):
    _check_optimizer(st, opt)
    if not isinstance(osd, dict) or "state" not in osd or "param_groups" not in osd:
        raise _err("the optimizer state dict needs 'state' and 'param_groups' (get_optimizer_state_dict's layout)")
    keys = _optim_keys(st, opt)
    views = getattr(st, "_optim_views", {})
    out = []
    ostate, ogroups = osd["state"], osd["param_groups"]
    gnames = []
    for g in opt.param_groups:
        gnames.append([mp._flexplan_name for mp in g["params"]])
    if len(ogroups) != len(gnames):
        raise _err(f"the optimizer has {len(gnames)} param group(s), the state dict {len(ogroups)}")
    for i, (g, names) in enumerate(zip(ogroups, gnames)):
        have = list(g.get("params", []))
        if sorted(have) != sorted(names):  # the same params (FSDP2 lists them in the module's order)
            miss = [n for n in names if n not in have][:4]
            more = [n for n in have if n not in names][:4]
            raise _err(f"param group {i}: the state dict's params differ from the optimizer's (missing {miss}, "
                       f"not the optimizer's {more})")
        out.append(("group", opt.param_groups[i], {k: v for k, v in g.items() if k != "params"}))
    for g in opt.param_groups:
        for mp in g["params"]:
            name = mp._flexplan_name
            s = ostate.get(name)
            if s is None:
                raise _err(f"the optimizer state dict has no state for {name!r}")
            L = lay[name]
            for k in keys:
                if k not in s:
                    raise _err(f"the optimizer state of {name!r} has no {k!r}")
                how, src = _source(f"optim.state.{name}.{k}", s[k], L)
                out.append(("optim", mp, k, views.get(mp, {}).get(k), how, src))
            for k, v in s.items():
                if k in keys:
                    continue
                if isinstance(v, torch.Tensor) and getattr(v, "_flexplan_layout", None) is not None:
                    how, src = _source(f"optim.state.{name}.{k}", v, L)
                    out.append(("optim", mp, k, None, how, src))
                else:
                    out.append(("optim_scalar", mp, k, v))
    return out


def _write(st, plan, lay, opt):
    with torch.no_grad():
        for item in plan:
            kind = item[0]
            if kind == "copy":
                item[1].copy_(item[2])
            elif kind == "main":
                _, p, how, src = item
                flat = p.tensor("main")
                if how == "staged":
                    lay[p.name].scatter(src, flat)
                elif how == "in_place":
                    pass  # dcp.load wrote it
                else:
                    lay[p.name].from_full(src.to(flat.dtype), flat)
            elif kind == "group":
                _, g, hp = item
                for k, v in hp.items():
                    if k in g:
                        g[k] = v
            elif kind == "optim":
                _, mp, k, view, how, src = item
                if how == "in_place":
                    if view is not None:
                        _set_state(opt, mp, k, view)
                    continue
                if view is None:
                    view = torch.zeros_like(mp)
                if how == "staged":
                    lay[mp._flexplan_name].scatter(src, view)
                else:
                    lay[mp._flexplan_name].from_full(src, view)
                _set_state(opt, mp, k, view)
            elif kind == "optim_scalar":
                _, mp, k, v = item
                _set_state(opt, mp, k, v)
    _recast(st)


def _set_state(opt, mp, k, v):
    s = opt.state.setdefault(mp, {})
    cur = s.get(k)
    if isinstance(cur, torch.Tensor) and isinstance(v, torch.Tensor) and cur is not v \
            and cur.shape == v.shape:
        cur.copy_(v)  # keeps the tensor (a device step, the plan's view)
    elif isinstance(v, torch.Tensor) and _scalar_state(v):
        s[k] = v.detach().clone()
    else:
        s[k] = v


def _recast(st):
    """compute weights kept unsharded between steps = cast(new main weights):
    locally where this rank holds the whole param, else gathered (float64
    all-reduce, one param at a time; the same list on every rank)"""
    pers = _hf.persistent_weights(st.ex)
    for p in st.ex.params:
        if p.name not in pers or not p.weight.ptr or p.weight.ptr == p.main.ptr:
            continue
        w = p.tensor("weight").view(-1)
        mt = p.tensor("main")
        # every rank holds its whole (tp-local) param: a tp slice is held by the dp ranks of its tp index
        if st._repl[p.name] * (st.ex.tp if p.tp_dim is not None else 1) >= st.world_size:
            full = torch.empty(p.numel, dtype=mt.dtype)
            for s, f, n in p.shard.pairs():
                full[f:f + n] = mt[s:s + n]
        else:
            from ._params import gather_full  # pylint: disable=import-outside-toplevel
            full = gather_full(st, [p], local=True)[0].to(mt.dtype)
        with torch.no_grad():
            w.copy_(full.to(w.dtype))


def init_process_group(st: Optional["Sharded"] = None, backend: str = "gloo", timeout_s: float = 120) -> None:
    """torch.distributed for DCP under mpirun (no torchrun): rank and world
    from the executor (or MPI), MASTER_ADDR 127.0.0.1 (or the env's), a port
    chosen by rank 0 and shared over the executor's all-reduce. A no-op
    when torch.distributed is initialized already. Single host only unless
    MASTER_ADDR / MASTER_PORT are set."""
    import datetime
    import socket
    import torch.distributed as dist
    if dist.is_initialized():
        return
    if st is not None:
        st = _state(st)
        rank, world, ex = st.rank, st.world_size, st.ex
    else:
        raise _err("init_process_group needs a Sharded state (its executor shares the port)", _lib.FP_ERR_ARG)
    port = os.environ.get("MASTER_PORT")
    if port is None:
        p = 0.0
        if rank == 0:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            p = float(s.getsockname()[1])
            s.close()
        port = str(int(ex.all_reduce_f64([p])[0])) if world > 1 else str(int(p))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = port
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))



def load_in_place(st: "Sharded", checkpoint_id: Union[str, "os.PathLike[str]"],
                  optimizer: Optional[torch.optim.Optimizer] = None) -> None:
    """Load a DCP checkpoint straight into the arena, holding nothing of the
    shards beyond it (DCP's read buffer of one chunk): every rank first
    checks the checkpoint's metadata against its own boxes (every key
    present with its shape, the saved chunks covering each box, each chunk's
    file present and long enough) and the ranks agree (on any failure every
    rank raises and nothing changes); then dcp.load reads into the arena's
    views, and the small values (step, param groups, buffers) and the
    compute copies follow as in load_state_dict. A read that fails after the
    checks (an I/O error, a chunk whose bytes are corrupt) leaves the arena
    partly loaded: FlexplanError on every rank saying so (load again).
    Collective; between steps; needs torch.distributed (DCP)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    st = _state(st)
    _check_optimizer_arg(optimizer)
    if not isinstance(checkpoint_id, (str, os.PathLike)):
        raise ArgumentTypeError(f"checkpoint_id: expected a path (str or os.PathLike), got "
                                f"{type(checkpoint_id).__name__}")
    why: Optional[str] = None
    sd: Any = None
    reader: Any = None
    try:
        if st.driver.pos != 0:
            raise _err("load_in_place: call it between steps (after opt.step(), before the next forward)", _lib.FP_ERR_ORDER)
        sd = _make_state_dict(st, optimizer, "in_place")
        reader = FileSystemReader(os.fspath(checkpoint_id))
        md = reader.read_metadata()
        _verify_checksums(os.fspath(checkpoint_id), md, _check_metadata(sd, md, reader, os.fspath(checkpoint_id)))
    except FlexplanError as e:
        why = str(e)
    except Exception as e:  # noqa: BLE001 - any local failure must reach the vote
        why = f"{os.fspath(checkpoint_id)}: {type(e).__name__}: {e}"
    fail = _vote(st.ex, why, "load the state dict")
    if fail is not None:
        raise _err(f"load_in_place: {fail}; no rank changed its state")
    try:
        dcp.load(sd, storage_reader=reader)
    except BaseException as e:  # DCP's CheckpointException is a BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise _err(f"load_in_place: reading {os.fspath(checkpoint_id)} failed after the checks passed, and the "
                   f"arena is partly loaded: load a checkpoint again before training ({type(e).__name__}: "
                   f"{str(e)[:300]})") from None
    load_state_dict(st, sd, optimizer)


# ---- checksummed, atomic saves (issue 40) ----------------------------------------------
def _kill_point(st, point):
    """tests/python/ckpt_kill.py: FLEXPLAN_CKPT_KILL="rank:point" ends that
    rank at that point of save_checkpoint (os._exit: no cleanup runs)."""
    k = os.environ.get("FLEXPLAN_CKPT_KILL")
    if k and k == f"{st.rank}:{point}":
        sys.stdout.flush()
        os._exit(17)


def _crc_file_range(path, off, n):
    crc = 0
    with open(path, "rb") as f:
        f.seek(off)
        while n > 0:
            b = f.read(min(n, 1 << 24))
            if not b:
                break
            crc = zlib.crc32(b, crc)
            n -= len(b)
    return crc


def _items(md):
    """[(relative path, offset, length, fqn, chunk offsets)] of every storage item, in a fixed order"""
    out = []
    for idx, info in md.storage_data.items():
        out.append((info.relative_path, int(info.offset), int(info.length), idx.fqn,
                    list(idx.offset) if idx.offset is not None else None))
    out.sort(key=lambda t: (t[0], t[1]))
    return out


def save_checkpoint(st: "Sharded", checkpoint_id: Union[str, "os.PathLike[str]"],
                    optimizer: Optional[torch.optim.Optimizer] = None, *, overwrite: bool = False) -> str:
    """dcp.save of state_dict(st, optimizer), checksummed and atomic: DCP
    writes into a fresh folder beside checkpoint_id, every rank then
    checksums a share of the storage items (CRC-32 of each chunk's bytes),
    rank 0 writes them (CHECKSUMS) and, once everything is complete on
    disk, moves the folder into place. An existing checkpoint_id is
    refused unless overwrite=True; then it is moved aside and removed only
    after the new one is in place. A rank killed at any point leaves the
    old checkpoint whole, or no checkpoint at checkpoint_id (a load
    refuses it), never a mixture. Collective; between steps; needs
    torch.distributed (init_process_group)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    st = _state(st)
    _check_optimizer_arg(optimizer)
    if not isinstance(checkpoint_id, (str, os.PathLike)):
        raise ArgumentTypeError(f"checkpoint_id: expected a path (str or os.PathLike), got "
                                f"{type(checkpoint_id).__name__}")
    if not isinstance(overwrite, bool):
        raise ArgumentTypeError(f"overwrite: expected a bool, got {type(overwrite).__name__}")
    path = os.path.abspath(os.fspath(checkpoint_id))
    exists = os.path.exists(path)
    why = None
    if st.driver.pos != 0:
        why = "save_checkpoint: call it between steps (after opt.step(), before the next forward)"
    elif exists and not overwrite:
        why = f"save_checkpoint: {path} exists: pass overwrite=True to replace it (atomically)"
    elif exists and not os.path.isdir(path):
        why = f"save_checkpoint: {path} exists and is not a checkpoint folder"
    fail = _vote(st.ex, why, "load the state dict")
    if fail is not None:
        raise _err(fail, _lib.FP_ERR_ARG)
    token = int(st.ex.all_reduce_f64([float(os.getpid() % 1000003) if st.rank == 0 else 0.0])[0])
    tmp = f"{path}.flexplan-tmp-{token}"
    _kill_point(st, "start")
    writer = None
    if os.environ.get("FLEXPLAN_CKPT_KILL", "").endswith(":wrote"):
        from torch.distributed.checkpoint import FileSystemWriter

        class _KillAfterWrite(FileSystemWriter):  # the kill point between this rank's files and the metadata
            def write_data(self, plan, planner):
                fut = super().write_data(plan, planner)
                fut.wait()
                _kill_point(st, "wrote")
                return fut
        writer = _KillAfterWrite(tmp)
    if writer is not None:
        dcp.save(state_dict(st, optimizer), storage_writer=writer)
    else:
        dcp.save(state_dict(st, optimizer), checkpoint_id=tmp)
    _kill_point(st, "saved")
    items = _items(FileSystemReader(tmp).read_metadata())
    mine = [(i, _crc_file_range(os.path.join(tmp, it[0]), it[1], it[2]))
            for i, it in enumerate(items) if i % st.world_size == st.rank]
    every: List[Any] = [None] * st.world_size
    dist.all_gather_object(every, mine)
    crcs = dict(c for part in every for c in part)
    _kill_point(st, "checksummed")
    if st.rank == 0:
        doc = {"format": "flexplan.checksums.v1", "algorithm": "crc32",
               "items": [{"file": f, "offset": o, "length": n, "key": k, "chunk": c, "crc32": crcs[i]}
                         for i, (f, o, n, k, c) in enumerate(items)]}
        t = os.path.join(tmp, CHECKSUMS + ".tmp")
        with open(t, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(t, os.path.join(tmp, CHECKSUMS))
        for name in os.listdir(tmp):  # every file durable before the folder moves into place
            fd = os.open(os.path.join(tmp, name), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    dist.barrier()
    _kill_point(st, "written")
    if st.rank == 0:
        aside = f"{path}.flexplan-old-{token}"
        if exists:
            os.rename(path, aside)
            _kill_point(st, "swap")
        os.rename(tmp, path)
        if exists:
            shutil.rmtree(aside, ignore_errors=True)
    dist.barrier()
    return path


def _verify_checksums(where, md, indexes):
    """the CRC-32 of every storage item in indexes against CHECKSUMS (a
    checkpoint without the file: nothing to check, False)"""
    f = os.path.join(where, CHECKSUMS)
    if not os.path.exists(f):
        return False
    try:
        with open(f) as fh:
            doc = json.load(fh)
        saved = {(it["file"], int(it["offset"]), int(it["length"])): int(it["crc32"]) for it in doc["items"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise _err(f"{where}: {CHECKSUMS} is unreadable ({type(e).__name__}: {e})") from None
    for idx in indexes:
        info = md.storage_data[idx]
        key = (info.relative_path, int(info.offset), int(info.length))
        want = saved.get(key)
        lo, hi = key[1], key[1] + key[2]
        what = f"{idx.fqn}" + (f" (chunk at {list(idx.offset)})" if idx.offset is not None else "")
        if want is None:
            raise _err(f"{where}/{key[0]}: bytes [{lo}, {hi}) of {what} have no checksum in {CHECKSUMS} "
                       f"(the files and the checksums are of different saves)")
        got = _crc_file_range(os.path.join(where, key[0]), key[1], key[2])
        if got != want:
            raise _err(f"{where}/{key[0]}: bytes [{lo}, {hi}) of {what} fail their checksum (crc32 {got:08x}, "
                       f"saved {want:08x}): the checkpoint is corrupt")
    return True


def load_checkpoint(st: "Sharded", checkpoint_id: Union[str, "os.PathLike[str]"],
                    optimizer: Optional[torch.optim.Optimizer] = None) -> None:
    """The staged load, verified: every rank checks the metadata (as
    load_in_place) and the checksums of the items it will read, the ranks
    agree, then dcp.load into state_dict(st, optimizer) and
    load_state_dict. Collective; between steps."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    st = _state(st)
    _check_optimizer_arg(optimizer)
    if not isinstance(checkpoint_id, (str, os.PathLike)):
        raise ArgumentTypeError(f"checkpoint_id: expected a path (str or os.PathLike), got "
                                f"{type(checkpoint_id).__name__}")
    where = os.fspath(checkpoint_id)
    why: Optional[str] = None
    sd: Any = None
    reader: Any = None
    try:
        if st.driver.pos != 0:
            raise _err("load_checkpoint: call it between steps", _lib.FP_ERR_ORDER)
        sd = state_dict(st, optimizer)
        reader = FileSystemReader(where)
        md = reader.read_metadata()
        _verify_checksums(where, md, _check_metadata(sd, md, reader, where))
    except FlexplanError as e:
        why = str(e)
    except Exception as e:  # noqa: BLE001 - any local failure must reach the vote
        why = f"{where}: {type(e).__name__}: {e}"
    fail = _vote(st.ex, why, "load the state dict")
    if fail is not None:
        raise _err(f"load_checkpoint: {fail}; no rank changed its state")
    dcp.load(sd, storage_reader=reader)
    load_state_dict(st, sd, optimizer)


def _check_metadata(sd, md, reader, where):
    """every key of sd in the checkpoint, shapes equal, this rank's boxes
    covered by saved chunks whose files hold their bytes; returns the
    storage items this rank reads"""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata
    flat, _ = flatten_state_dict(sd)
    sizes = {}
    missing = [k for k in flat if k not in md.state_dict_metadata]
    if missing:
        raise _err(f"{where}: the checkpoint lacks {len(missing)} key(s): {', '.join(missing[:6])}"
                   + (" ..." if len(missing) > 6 else ""))
    extra = [k for k in md.state_dict_metadata if k not in flat]
    if extra:  # another model's (or a larger) checkpoint: nothing of it is dropped silently
        raise _err(f"{where}: the checkpoint holds {len(extra)} key(s) this state does not have: "
                   f"{', '.join(extra[:6])}" + (" ..." if len(extra) > 6 else ""))
    storage = md.storage_data
    used = {}

    def file_ok(index):
        info = storage.get(index)
        used[index] = True
        if info is None:
            raise _err(f"{where}: no storage for {index.fqn} at {list(index.offset or [])}")
        path = os.path.join(where, info.relative_path)
        if path not in sizes:
            if not os.path.isfile(path):
                raise _err(f"{where}: {info.relative_path} (holding {index.fqn}) is missing")
            sizes[path] = os.path.getsize(path)
        if info.offset + info.length > sizes[path]:
            raise _err(f"{where}: {info.relative_path} is {sizes[path]} bytes; {index.fqn} needs bytes up to "
                       f"{info.offset + info.length} (a truncated file)")

    for k, v in flat.items():
        m = md.state_dict_metadata[k]
        if not isinstance(v, torch.Tensor):
            file_ok(MetadataIndex(k))
            continue
        if not isinstance(m, TensorStorageMetadata):
            raise _err(f"{where}: {k} is not a tensor in the checkpoint")
        L = getattr(v, "_flexplan_layout", None)
        shape = L.shape if L is not None else tuple(v.shape)
        if tuple(m.size) != tuple(shape):
            raise _err(f"{where}: {k} has shape {list(m.size)} in the checkpoint, {list(shape)} here")
        cdt = getattr(getattr(m, "properties", None), "dtype", None)
        if cdt is not None and cdt != v.dtype:  # DCP would convert it (an int32 tensor read as float)
            raise _err(f"{where}: {k} is {str(cdt).replace('torch.', '')} in the checkpoint, "
                       f"{str(v.dtype).replace('torch.', '')} here: a load converts no dtype")
        boxes = [(b[0], b[1]) for b in L.boxes] if L is not None else [((0,) * len(shape), tuple(shape))]
        for off, sz in boxes:
            need = _prod(sz)
            got = 0
            for c in m.chunks:
                ov = 1
                for o, z, co, cz in zip(off, sz, c.offsets, c.sizes):
                    ov *= max(0, min(o + z, co + cz) - max(o, co))
                if ov:
                    got += ov
                    file_ok(MetadataIndex(k, c.offsets))
            if got != need:
                raise _err(f"{where}: the checkpoint's chunks of {k} cover {got} of the {need} elements of "
                           f"this rank's box at {list(off)}")
    return list(used)
