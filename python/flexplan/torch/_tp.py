"""Tensor parallelism: a module parallelized with torch's
``parallelize_module`` on the "tp" dimension of a ("dp", "tp") DeviceMesh,
sharded by flexplan over "dp" (docs/torch.md, "FSDP x TP").

A plan compiled with ``"mesh": {"tp": T}`` holds each rank's tp-local slice
of every param the model splits over tp (``ParamView.tp_dim``; its global
shape in ``ParamView.global_shape``). The module's tensor-parallel params
are DTensors on a 1-D tp mesh (``Shard(d)`` for colwise and rowwise
weights, ``Replicate()`` for a rowwise bias); this module checks them
against the plan, and makes the views: a DTensor whose local tensor is the
arena's unsharded weight (and one over the unsharded grad for ``.grad``,
which autograd accumulates into in place), so torch's TP hooks and DTensor
ops run unchanged over the plan's memory. TP's collectives stay torch's, on
its stream, between the plan's hooks.

Full values of a tp-sharded param (evaluation gathers, full state dicts,
clip_grad_norm_'s replication counts) are assembled in global coordinates:
each tp rank writes its slice at its place along the tp dim, and the one
all-reduce over the world sums them (``global_index``)."""
import torch

from .. import _lib
from ..errors import error_maker, FlexplanError

__all__ = ["is_dtensor", "local", "check", "wrap", "global_numel", "scatter_local", "take_local",
           "refuse_sequence_parallel"]


_err = error_maker(_lib.FP_ERR_PLAN)  # the package's one error helper (flexplan.errors)


def _dtensor_cls():
    try:
        from torch.distributed.tensor import DTensor  # pylint: disable=import-outside-toplevel
    except ImportError:  # a torch without DTensor: no module can hold one
        return None
    return DTensor


def is_dtensor(t):
    cls = _dtensor_cls()
    return cls is not None and isinstance(t, cls)


def local(t):
    """The rank's own tensor of a module param: a DTensor's local tensor, or t."""
    return t.to_local() if is_dtensor(t) else t


def _placement(t):
    """("shard", d) | ("replicate", None) | ("other", repr) of a DTensor's one placement."""
    from torch.distributed.tensor import Replicate, Shard  # pylint: disable=import-outside-toplevel
    (pl,) = t.placements
    if isinstance(pl, Shard):
        return "shard", pl.dim
    if isinstance(pl, Replicate):
        return "replicate", None
    return "other", repr(pl)


def check(ex, named, mesh=None):
    """The module's params against the plan's tp layout. named: the module's
    named_parameters(); mesh: shard(mesh=...) or None. Returns the tp mesh
    (a 1-D DeviceMesh) or None when the module holds no DTensor."""
    T = ex.tp
    tp_mesh = None
    if mesh is not None:
        tp_mesh = _tp_of(ex, mesh)
    for p in ex.params:
        t = named.get(p.name)
        if t is None:
            continue  # _setup.check_params names it
        if not is_dtensor(t):
            if p.tp_dim is not None:
                raise _err(f"param {p.name!r} is split over tp (dim {p.tp_dim}) in the plan but is a plain tensor "
                           f"in the module: parallelize the module with torch.distributed.tensor.parallel."
                           f"parallelize_module on the mesh's \"tp\" dimension before shard()")
            continue
        dm = t.device_mesh
        if dm.ndim != 1:
            raise _err(f"param {p.name!r} is a DTensor on a {dm.ndim}-D mesh {dm.mesh_dim_names}: flexplan.torch "
                       f"shards modules whose tensor-parallel params live on the 1-D \"tp\" mesh "
                       f"(parallelize_module(module, mesh[\"tp\"], plan)); do not apply fully_shard first")
        if dm.size() != T:
            raise _err(f"param {p.name!r} is a DTensor on a mesh of {dm.size()} ranks but the plan's tp is {T}: "
                       f"compile with \"mesh\": {{\"tp\": {dm.size()}}}")
        if tp_mesh is None:
            tp_mesh = dm
        elif dm != tp_mesh:
            raise _err(f"param {p.name!r} is a DTensor on another mesh than the others ({dm} and {tp_mesh})")
        kind, d = _placement(t)
        if kind == "other":
            raise _err(f"param {p.name!r} has placement {d}: a param is Shard(d) or Replicate() over tp")
        want = ("shard", p.tp_dim) if p.tp_dim is not None else ("replicate", None)
        if (kind, d) != want:
            got = f"Shard({d})" if kind == "shard" else "Replicate()"
            exp = f"Shard({p.tp_dim})" if p.tp_dim is not None else "Replicate() (or a plain tensor)"
            raise _err(f"param {p.name!r} is {got} over tp in the module but {exp} in the plan: describe the "
                       f"parallelized module again (flexplan.torch.describe) and recompile")
    if tp_mesh is not None:
        _check_order(ex, tp_mesh)
    elif T > 1 and any(p.tp_dim is not None for p in ex.params):
        pass  # the plain-tensor refusal above already named one
    return tp_mesh


def _tp_of(ex, mesh):
    """shard(mesh=...): a 2-D ("dp", "tp") mesh (its "tp" dimension is
    used) or the 1-D tp mesh itself."""
    from torch.distributed.device_mesh import DeviceMesh  # pylint: disable=import-outside-toplevel
    if not isinstance(mesh, DeviceMesh):
        from ..errors import ArgumentTypeError  # pylint: disable=import-outside-toplevel
        raise ArgumentTypeError(f"mesh: expected a torch.distributed.device_mesh.DeviceMesh, got "
                                f"{type(mesh).__name__}")
    names = mesh.mesh_dim_names or ()
    if mesh.ndim == 2:
        if tuple(names) != ("dp", "tp"):
            raise _err(f"mesh: a 2-D mesh must be named (\"dp\", \"tp\") (init_device_mesh(..., (W // T, T), "
                       f"mesh_dim_names=(\"dp\", \"tp\"))), got {names}", _lib.FP_ERR_ARG)
        if mesh.size(1) != ex.tp or mesh.size() != ex.world_size:
            raise _err(f"mesh: dp {mesh.size(0)} x tp {mesh.size(1)}, but the plan is for {ex.world_size} ranks "
                       f"with tp {ex.tp}", _lib.FP_ERR_ARG)
        want = torch.arange(ex.world_size).view(ex.world_size // ex.tp, ex.tp)
        if not torch.equal(mesh.mesh.cpu(), want):
            raise _err("mesh: its ranks are not ordered tp innermost (rank r at dp r // tp, tp r % tp), as the "
                       "plan's are", _lib.FP_ERR_ARG)
        return mesh["tp"]
    if mesh.ndim == 1:
        if mesh.size() != ex.tp:
            raise _err(f"mesh: {mesh.size()} ranks, but the plan's tp is {ex.tp}", _lib.FP_ERR_ARG)
        return mesh
    raise _err(f"mesh: expected a 1-D tp mesh or a 2-D (\"dp\", \"tp\") mesh, got {mesh.ndim} dimensions",
               _lib.FP_ERR_ARG)


def _check_order(ex, tp_mesh):
    """The tp mesh holds this rank's tp group: ranks r - r % T .. + T - 1,
    this rank at index r % T (tp innermost, as the plan)."""
    T = ex.tp
    ranks = [int(r) for r in tp_mesh.mesh.flatten().tolist()]
    base = ex.rank - ex.rank % T
    if ranks != list(range(base, base + T)):
        raise _err(f"the tp mesh of rank {ex.rank} holds ranks {ranks}, but the plan puts tp innermost (ranks "
                   f"{list(range(base, base + T))}): make the mesh with init_device_mesh(device, (W // {T}, {T}), "
                   f"mesh_dim_names=(\"dp\", \"tp\"))")


def wrap(view, ref, hand_out=None):
    """A DTensor like the module's param ref (mesh, placements, global shape)
    over view, the arena's local tensor (no copy). hand_out (the executor's
    _hand_out): its local tensor, a view of `view`, is emptied with the
    arena when the executor is destroyed."""
    from torch.distributed.tensor import DTensor  # pylint: disable=import-outside-toplevel
    t = DTensor.from_local(view, ref.device_mesh, ref.placements, run_check=False, shape=ref.shape,
                           stride=ref.stride())
    if hand_out is not None:
        hand_out(t._local_tensor)
    return t


def global_numel(p):
    n = 1
    for s in p.global_shape:
        n *= int(s)
    return n


def _split(p, tp):
    """(outer, tp, inner) of p's global tensor around its tp dim: the slice
    of tp index t is g.view(outer, tp, inner)[:, t, :]"""
    d = p.tp_dim
    outer = 1
    for s in p.global_shape[:d]:
        outer *= int(s)
    inner = global_numel(p) // (outer * tp)
    return outer, inner


def scatter_local(p, tp, t_idx, flat_local, flat_global):
    """Write a tp-sharded param's local values (flat, local order) at their
    place in its flat global tensor."""
    outer, inner = _split(p, tp)
    flat_global.view(outer, tp, inner)[:, t_idx, :].copy_(flat_local.view(outer, inner))


def take_local(p, tp, t_idx, flat_global):
    """This tp rank's slice of a flat global tensor, flat in local order."""
    outer, inner = _split(p, tp)
    return flat_global.view(outer, tp, inner)[:, t_idx, :].reshape(-1)


def refuse_sequence_parallel(module):
    """torch's SequenceParallel (sequence-sharded norms, their weights'
    grads partial over tp) is not supported yet: refused naming the module."""
    for name, m in module.named_modules():
        for h in list(m._forward_pre_hooks.values()) + list(m._forward_hooks.values()):
            for cell in getattr(h, "__closure__", None) or ():
                try:
                    v = cell.cell_contents
                except ValueError:
                    continue
                fn = getattr(v, "func", v)
                if getattr(fn, "__qualname__", "").startswith("SequenceParallel."):
                    raise _err(f"module {name or '<root>'!r} is parallelized with SequenceParallel (a norm over "
                               f"sequence-sharded activations, its weight's grad partial over tp): not supported "
                               f"by flexplan.torch yet; leave the norms out of the TP plan (ColwiseParallel and "
                               f"RowwiseParallel without sequence sharding)")
