"""flexplan.torch.describe: a model.json object for a real torch.nn.Module.

describe() picks the module's units (what FSDP wraps; model.json "modules"),
assigns every parameter to one unit, then runs one forward on the meta device
(no weights, no memory) to record the forward order, the FLOPs and the
activation bytes saved for backward per unit, and which units read which
parameters (tied weights). The rules are written down in docs/describe.md.
"""
import copy
from typing import Any, Dict, Optional, Sequence

import torch
import torch.nn as nn
from torch.utils._pytree import tree_map

from .. import _lib
from . import _tp
from ._describe_errors import error, type_error, value_error
from ._describe_trace import Tracer
from ._describe_units import Unit, default_units, explicit_units

__all__ = ["describe", "DEFAULT_INPUT_SHAPE", "ROOT_UNIT"]

#: (batch, tokens) of the input_ids describe() makes for a causal LM
DEFAULT_INPUT_SHAPE = (1, 128)
#: the name of the unit holding the params outside every unit
ROOT_UNIT = "root"

_DTYPES = {_lib.torch_dtype(n): n for n in _lib.FLOAT_DTYPES}


def _is_causal_lm(module):
    """A Hugging Face model with a vocabulary: it takes input_ids."""
    cfg = getattr(module, "config", None)
    return (callable(getattr(module, "get_input_embeddings", None))
            and isinstance(getattr(cfg, "vocab_size", None), int))


def _tp_of(p):
    """A module param's tensor-parallel placement for model.json ("tp"):
    {"kind": "shard", "dim": d} for a DTensor Shard(d) on a 1-D mesh,
    {"kind": "replicate"} for Replicate(), None for a plain tensor."""
    if not _tp.is_dtensor(p):
        return None
    from torch.distributed.tensor import Replicate, Shard  # pylint: disable=import-outside-toplevel
    if p.device_mesh.ndim != 1 or len(p.placements) != 1:
        raise error("a param is a DTensor on a %d-D mesh: describe the module after parallelize_module on the "
                    "mesh's \"tp\" dimension and before fully_shard" % p.device_mesh.ndim)
    pl = p.placements[0]
    if isinstance(pl, Shard):
        return {"kind": "shard", "dim": int(pl.dim)}
    if isinstance(pl, Replicate):
        return {"kind": "replicate"}
    raise error("a param is a DTensor with placement %r over tp: model.json knows Shard(d) and Replicate()" % (pl,))


def _drop_tp_hooks(mod):
    """The TP hooks of a meta copy (torch's distribute_module: inputs to
    DTensors, outputs back): the copy runs as the whole, unparallelized
    model on global shapes, so its FLOPs and activations are the model's."""
    for m in mod.modules():
        for hooks in (m._forward_pre_hooks, m._forward_hooks):
            for k in [k for k, h in hooks.items()
                      if getattr(h, "__module__", "").startswith("torch.distributed.tensor")]:
                del hooks[k]


def _to_meta(module):
    """`module` itself when every param and buffer is on the meta device, else
    a copy whose params and buffers are meta tensors (the original is left as
    it is; no weight is copied). Tied params stay tied in the copy. A
    tensor-parallel module (DTensor params) becomes its whole model: plain
    meta params of the global shapes (each marked with its "tp" placement,
    ``_flexplan_tp``) and no TP hooks."""
    params = list(module.parameters())
    tensors = params + list(module.buffers())
    tp = any(_tp.is_dtensor(p) for p in params)
    if all(t.is_meta for t in tensors) and not tp:
        return module
    memo = {}
    for p in params:
        newp = nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device="meta"), requires_grad=p.requires_grad)
        newp._flexplan_tp = _tp_of(p)
        memo[id(p)] = newp
    for b in module.buffers():
        memo[id(b)] = torch.empty(b.shape, dtype=b.dtype, device="meta")
    try:
        out = copy.deepcopy(module, memo)
    except Exception as e:  # pylint: disable=broad-except
        raise error("cannot make a meta-device copy of the module (%s: %s); build it under "
                    "`with torch.device(\"meta\"):` instead" % (type(e).__name__, e)) from e
    if tp:
        _drop_tp_hooks(out)
    return out


def _meta_inputs(inputs):
    def conv(t):
        if isinstance(t, torch.Tensor) and not t.is_meta:
            return torch.empty_like(t, device="meta")
        return t
    return tree_map(conv, inputs)


def _shape(input_shape):
    if not isinstance(input_shape, (tuple, list, torch.Size)) or \
            any(isinstance(x, bool) or not isinstance(x, int) for x in input_shape):
        raise type_error("input_shape: expected positive integers such as (1, 128), got %r" % (input_shape,))
    shape = tuple(int(x) for x in input_shape)
    if not shape or any(d < 1 for d in shape):
        raise value_error("input_shape: expected positive integers such as (1, 128), got %r" % (input_shape,))
    return shape


def _default_inputs(module, input_shape):
    if _is_causal_lm(module):
        shape = _shape(input_shape if input_shape is not None else DEFAULT_INPUT_SHAPE)
        if len(shape) != 2:
            raise error("input_shape: a causal LM takes input_ids of shape (batch, tokens), got %r"
                        % (input_shape,))
        return {"input_ids": torch.zeros(shape, dtype=torch.long, device="meta")}
    if input_shape is not None:
        shape = _shape(input_shape)
        dt = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)
        return (torch.zeros(shape, dtype=dt, device="meta"),)
    raise error("%s is not a Hugging Face causal LM: pass example_inputs (a tensor, a tuple of "
                "positional arguments or a dict of keyword arguments for its forward) or input_shape"
                % type(module).__name__)


def _call(module, inputs):
    if isinstance(inputs, dict):
        return lambda: module(**inputs)
    if isinstance(inputs, (tuple, list)):
        return lambda: module(*inputs)
    return lambda: module(inputs)


def _assign(root, units):
    """Where each param sits: {id(param): [units it appears under, in walk
    order]} (the root unit is None), walking every path to every module so that
    a param reachable from two units (tied) is seen under both."""
    unit_of = {}
    for u in units:
        for _, m in u.members:
            unit_of.setdefault(id(m), u)
    where = {}

    def walk(mod, cur, depth):
        if depth > 1000:
            raise error("the module tree is too deep (a module containing itself?)")
        cur = unit_of.get(id(mod), cur)
        for _, p in mod.named_parameters(recurse=False):
            lst = where.setdefault(id(p), [])
            if cur not in lst:
                lst.append(cur)
        for _, child in mod.named_children():
            walk(child, cur, depth + 1)

    walk(root, None, 0)
    return where


def describe(module: nn.Module, example_inputs: Any = None, *, units: Optional[Sequence[Any]] = None,
             name: Optional[str] = None, input_shape: Optional[Sequence[int]] = None,
             version: Optional[int] = None) -> Dict[str, Any]:
    """Describe `module` as a flexplan model.json object (a dict).

    Args:
      module: a torch.nn.Module, best built under ``with torch.device("meta")``
        (a module with real weights is copied to the meta device first, without
        its weights).
      example_inputs: the forward's inputs: a tensor, a tuple of positional
        arguments or a dict of keyword arguments (moved to the meta device).
        Defaults to input_ids of shape ``input_shape`` (default (1, 128)) for a
        Hugging Face causal LM; required for other modules unless
        ``input_shape`` is given (a zero tensor of that shape and of the
        module's floating dtype).
      units: None for the default units (each repeated block, the embeddings,
        the final norm with the head), or a list of module names, fnmatch
        patterns ("model.layers.*" selects each layer), groups (a tuple of
        names, or "a+b") and predicates ``f(name, module) -> bool``.
      name: the model's name (default: the module's class name).
      input_shape: the shape of the default input (see example_inputs).
      version: the model.json version: None (v1 unless tied params need v2),
        1, or 2. v2 output also carries each unit's
        activation_bytes_checkpointed (the bytes of its tensor inputs: what
        it keeps when the spec's recompute names it).

    Returns:
      A dict in ``flexplan.model.v1`` format, or ``flexplan.model.v2`` when a
      param is read by two units (tied weights: declared by the first in
      forward order, listed under "uses" by the others) or version=2. Params outside every
      unit form the unit "root", first in forward order. flops_fwd and
      activation_bytes are per occurrence of a unit in forward_order.

    Raises:
      flexplan.FlexplanError: bad arguments, a unit pattern that matches
        nothing, an unsupported param dtype, a forward that fails on the meta
        device, or a unit that never runs.
    """
    if not isinstance(module, nn.Module):
        raise type_error("module: describe expected a torch.nn.Module, got %s" % type(module).__name__)
    if name is not None and not isinstance(name, str):
        raise type_error("name: expected a non-empty string, got %r" % (name,))
    if name is not None and not name:
        raise value_error("name: expected a non-empty string, got %r" % (name,))
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise type_error("version: expected 1 or 2 (model.json flexplan.model.v1 or v2), got %r" % (version,))
    if version not in (None, 1, 2):
        raise value_error("version: expected 1 or 2 (model.json flexplan.model.v1 or v2), got %r"
                          % (version,))
    mod = _to_meta(module)
    if example_inputs is None:
        inputs = _default_inputs(mod, input_shape)
    else:
        inputs = _meta_inputs(example_inputs)

    chosen = default_units(mod) if units is None else explicit_units(mod, units)

    def at(inp):
        nonlocal chosen
        while True:
            model_js = _describe_with(mod, module, inp, chosen, units, name, version)
            if isinstance(model_js, dict):
                return model_js
            # default units only: a unit that did not run (T5's shared
            # embedding, which its encoder and decoder read through their own
            # modules) is no unit; its params go to the units that read
            # them, or the root
            chosen = [u for u in chosen if u not in model_js]

    scaled = _scaled(mod, inputs, at) if _scale else None
    return scaled if scaled is not None else at(inputs)


_scale = True  # tests set it False to compare with a full-length trace
#: sequences longer than this many tokens are traced at four short lengths
SCALE_ABOVE = 128
_SCALED_FIELDS = ("flops_fwd", "activation_bytes", "activation_bytes_checkpointed")


def _seq_len(inputs):
    """The token count of inputs that are only (batch, tokens) integer or
    bool tensors of one length (input_ids, attention_mask, ...), else None."""
    leaves = [t for t in torch.utils._pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor)]
    if not leaves or any(t.dim() != 2 or t.is_floating_point() or t.is_complex() for t in leaves):
        return None
    lens = {int(t.shape[1]) for t in leaves}
    return lens.pop() if len(lens) == 1 else None


def _scaled(mod, inputs, at):
    """describe's time must not grow with the example's sequence length (a
    reference scan loops per token on the meta device too): for token inputs
    longer than SCALE_ABOVE, trace lengths b, 2b, 3b and 4b (b = 16, or the
    config's chunk_size), fit each unit's flops and activation bytes as a
    quadratic in the length through the first three (attention is quadratic,
    the rest linear), and keep the fit only where it predicts the fourth
    exactly and the units, params and order are the same at every length;
    then evaluate it at the real length. Otherwise None (a full trace)."""
    n = _seq_len(inputs)
    chunk = getattr(getattr(mod, "config", None), "chunk_size", None)
    base = max(16, chunk if isinstance(chunk, int) and chunk > 0 else 0)
    if n is None or n <= SCALE_ABOVE or 4 * base >= n:
        return None
    xs = [base, 2 * base, 3 * base, 4 * base]
    try:
        runs = [at(tree_map(lambda t: torch.zeros((t.shape[0], x), dtype=t.dtype, device="meta")
                            if isinstance(t, torch.Tensor) else t, inputs)) for x in xs]
    except Exception:  # pylint: disable=broad-except
        return None  # the short lengths do not run (a minimum length): trace the real one

    def shape(js):
        return (js["format"], js["forward_order"],
                [{k: v for k, v in m.items() if k not in _SCALED_FIELDS} for m in js["modules"]])
    if any(shape(r) != shape(runs[0]) for r in runs[1:]):
        return None

    def fit(ys, x):  # Lagrange through (xs[k], ys[k]), k < 3
        out = 0.0
        for i in range(3):
            w = 1.0
            for j in range(3):
                if j != i:
                    w *= (x - xs[j]) / (xs[i] - xs[j])
            out += w * ys[i]
        return out
    out = copy.deepcopy(runs[0])
    for k, m in enumerate(out["modules"]):
        for f in _SCALED_FIELDS:
            if f not in m:
                continue
            ys = [r["modules"][k][f] for r in runs]
            if abs(fit(ys, xs[3]) - ys[3]) > 1e-9 * max(1.0, abs(ys[3])):
                return None
            v = fit(ys, n)
            m[f] = float(v) if f == "flops_fwd" else int(round(v))
    return out


def _describe_with(mod, module, inputs, chosen, units, name, version):
    """describe() with these units: the model.json dict, or (default units
    only) the set of units that did not run."""
    where = _assign(mod, chosen)
    params = {}  # id -> (canonical name, param), in torch's order
    for pname, p in mod.named_parameters():
        params[id(p)] = (pname, p)
        if p.dtype not in _DTYPES:
            raise error("param '%s' has dtype %s: model.json params are fp32, bf16 or fp16"
                        % (pname, str(p.dtype).replace("torch.", "")))
    if not params:
        raise error("%s has no parameters: nothing to plan" % type(mod).__name__)
    has_params = {u for lst in where.values() for u in lst if u is not None}
    chosen = [u for u in chosen if u in has_params]
    if not chosen and units is not None:
        raise error("units: no unit holds a parameter")
    root = None
    if any(lst == [None] for lst in where.values()):
        rname = ROOT_UNIT
        while any(u.name == rname for u in chosen):
            rname = "<" + rname + ">"
        root = Unit(rname, [("", mod)])

    tracer = Tracer(mod, chosen, root, [p for _, p in params.values()], list(mod.buffers()))
    try:
        tracer.run(_call(mod, inputs))
    except Exception as e:  # pylint: disable=broad-except
        from flexplan.errors import FlexplanError  # pylint: disable=import-outside-toplevel
        if isinstance(e, FlexplanError):
            raise
        raise error("the forward of %s failed on the meta device: %s: %s"
                    % (type(mod).__name__, type(e).__name__, e)) from e

    order = tracer.order
    count = {}
    for u in order:
        count[u] = count.get(u, 0) + 1
    idle = {u for u in chosen if u not in count}
    if idle and units is None:
        return idle
    for u in chosen:
        if u not in count:
            raise error("unit '%s' did not run in the forward: leave it out of units= (its params then go "
                        "to the units that read them, or to the root unit), or pass example inputs whose "
                        "forward runs it" % u.name)
    first = {}
    for i, u in enumerate(order):
        first.setdefault(u, i)
    allu = ([root] if root else []) + chosen

    # who declares each param: the first unit in forward order among the units
    # it sits under (structure) and the units that read it (trace)
    declared = {u: [] for u in allu}
    uses = {u: [] for u in allu}
    for pid, (pname, p) in params.items():
        users = [u for u in where.get(pid, []) if u is not None] or [root]
        users += [u for u in allu if pid in tracer.uses.get(u, ()) and u not in users]
        users.sort(key=lambda u: first[u])
        declared[users[0]].append((pname, p))
        for u in users[1:]:
            uses[u].append(pname)

    tied = [u for u in allu if uses[u]]
    if tied and version == 1:
        raise error("version: 1 cannot describe tied params (unit '%s' reads '%s', declared by "
                    "another unit): use version 2 or None" % (tied[0].name, uses[tied[0]][0]))
    tp = {pid: getattr(p, "_flexplan_tp", None) for pid, (_, p) in params.items()}
    tp_names = [pn for pid, (pn, _) in params.items() if tp[pid]]
    if tp_names and version == 1:
        raise error("version: 1 cannot describe tensor-parallel params ('%s' is a DTensor): use version 2 or None"
                    % tp_names[0])
    v2 = bool(tied) or bool(tp_names) or version == 2
    mods = []
    for u in sorted(allu, key=lambda u: first[u]):
        if not declared[u] and not uses[u]:
            continue
        k = count[u]
        m = {"name": u.name,
             "flops_fwd": float(tracer.flops.get(u, 0)) / k,
             "activation_bytes": int(tracer.acts.get(u, 0)) // k}
        if v2:
            m["activation_bytes_checkpointed"] = int(tracer.inputs.get(u, 0)) // k
        if declared[u]:
            m["params"] = [{"name": pn,
                            "shape": list(p.shape) if p.dim() else [1],
                            "dtype": _DTYPES[p.dtype],
                            "requires_grad": bool(p.requires_grad)} for pn, p in declared[u]]
            for entry, (_, p) in zip(m["params"], declared[u]):
                if getattr(p, "_flexplan_tp", None):
                    entry["tp"] = p._flexplan_tp
        if uses[u]:
            m["uses"] = uses[u]
        mods.append(m)
    kept = {m["name"] for m in mods}
    return {"format": "flexplan.model.v2" if v2 else "flexplan.model.v1",
            "name": name or type(module).__name__,
            "modules": mods,
            "forward_order": [u.name for u in order if u.name in kept]}
