"""What shard() does once, before the first step: the plan checked against
the module, the initial values written, the params made views of the arena,
the units found (plan module -> submodules), the backend's rank, world and
stream, and the abort on an uncaught exception (docs/torch.md, "What
shard does")."""
import ctypes
import os
import sys

import torch
from torch import nn

from .. import _lib
from ..errors import error_maker, FlexplanError
from . import _tp
from ._params import PlanParam

__all__ = ["check_params", "init_values", "make_views", "find_units", "forward_next", "backward_chain", "nccl_setup",
           "default_backend", "dist_rank_world", "install_abort_on_error"]


_err = error_maker(_lib.FP_ERR_PLAN)  # the package's one error helper (flexplan.errors)


def check_params(ex, named):
    """The plan must be for this module: names, shapes (global shapes: a
    tensor-parallel param's DTensor shape is its global one), requires_grad;
    no MXFP8 param (not a float nn.Parameter)."""
    for p in ex.params:
        t = named.get(p.name)
        if t is None:
            raise _err(f"the plan is not for this module: plan param {p.name!r} "
                       f"(plan module {ex.modules[p.module]!r}) is not a param of the module")
        if tuple(t.shape) != p.global_shape:
            raise _err(f"the plan is not for this module: param {p.name!r} has shape "
                       f"{list(t.shape)} in the module but {list(p.global_shape)} in the plan")
        if bool(t.requires_grad) != p.requires_grad:
            raise _err(f"the plan is not for this module: param {p.name!r} has requires_grad="
                       f"{bool(t.requires_grad)} in the module but {p.requires_grad} in the plan")
    for name in named:
        if name not in ex._by_name:
            raise _err(f"the plan is not for this module: module param {name!r} is not in the plan")
    for p in ex.params:
        if p.mxfp8:
            raise _err(f"param {p.name!r} is MXFP8 in the plan (its bucket's param_dtype is \"mxfp8\": e4m3 "
                       f"elements with e8m0 block scales, one copy) and flexplan.torch binds params as float "
                       f"nn.Parameters: give that bucket a float param_dtype (fp32, bf16, fp16), or run the plan "
                       f"with flexplan.Executor and an MXFP8 kernel over the param's views 'weight' and "
                       f"'scales' (docs/python.md)")


def hf_dir(init):
    return isinstance(init, (str, os.PathLike)) and os.path.isdir(init)


def init_values(ex, module, named, init):
    """Initial values, through the executor's refit (only this rank's extents
    are read)."""
    if init == "module":
        if any(t.is_meta for t in named.values()):
            raise _err("init='module' needs materialized params; the module is on the meta device "
                       "(pass init=[paths] or init=None and call load())", _lib.FP_ERR_ARG)
        from ._hf import from_module  # pylint: disable=import-outside-toplevel
        from_module(ex, {n: _tp.local(t) for n, t in named.items()})  # each rank its extents, in memory
    elif ex.tp > 1 and init is not None:
        raise _err("init from files on a mesh with tp > 1: the files hold global tensors and the executor's refit "
                   "reads whole params; use init=\"module\" or load a torch.distributed.checkpoint "
                   "(flexplan.torch.load_state_dict) instead", _lib.FP_ERR_ARG)
    elif init is not None and hf_dir(init):
        from ._hf import from_hf_dir  # pylint: disable=import-outside-toplevel
        from_hf_dir(ex, module, init, named)  # a Hugging Face folder, read by extent
    elif init is not None:
        ex.load_weights(list(init) if not isinstance(init, (str, os.PathLike)) else [init])


def make_views(ex, module, named):
    """Every plan param becomes an nn.Parameter over its unsharded compute
    buffer, in every module slot that holds it (a tied weight's two); a
    tensor-parallel param a DTensor like the module's over it (_tp.wrap).
    Returns {name: (Parameter, ParamView)}."""
    old_to_new, params = {}, {}
    for p in ex.params:
        w = p.tensor("weight")
        if w.numel() != p.numel:
            raise _err(f"param {p.name!r}: this rank has no unsharded compute buffer")
        old = named[p.name]
        if _tp.is_dtensor(old):  # a DTensor like the module's; its local tensor (a view of w) is emptied by destroy()
            newp = nn.Parameter(_tp.wrap(w, old), requires_grad=p.requires_grad)
            ex._hand_out(newp._local_tensor)  # the Parameter's own DTensor (nn.Parameter may make a new one)
        else:
            newp = ex._hand_out(PlanParam(w, requires_grad=p.requires_grad))  # emptied by destroy()
        newp._flexplan_view = p.name
        old_to_new[id(named[p.name])] = newp
        params[p.name] = (newp, p)
    for m in module.modules():
        for k, t in list(m._parameters.items()):
            if t is not None and id(t) in old_to_new:
                m._parameters[k] = old_to_new[id(t)]
    return params


def plan_uses(ex, u):
    """Names of the params plan module u reads but another declares
    (fp_plan_module_uses)."""
    lib = ex._lib
    n = lib.fp_plan_module_uses(ex._plan_handle, u, None, 0)
    if n <= 0:
        return []
    arr = (ctypes.c_int32 * n)()
    lib.fp_plan_module_uses(ex._plan_handle, u, arr, n)
    return [ex.params[i].name for i in arr]


def find_units(ex, module, params, cast_forward_inputs):
    """Plan module u -> the submodules to hook (the submodule named u, or
    those that directly hold u's params), the dtype u's floating inputs are
    cast to (None: none; mixed precision only, as FSDP2), and the params an
    evaluation forward of u reads (its own and the tied ones it uses)."""
    params_by_unit = {}
    for p in ex.params:
        params_by_unit.setdefault(p.module, []).append(p.name)
    owner_of = {}
    for mname, m in module.named_modules():
        for t in m._parameters.values():
            if t is not None:
                owner_of.setdefault(id(t), mname)
    units, unit_dtype = [], []
    for u, uname in enumerate(ex.modules):
        try:
            subs = [module.get_submodule(uname)] if uname not in ("", None) else None
        except AttributeError:
            subs = None
        if subs is None:
            names = []
            for pn in params_by_unit.get(u, []):
                o = owner_of[id(params[pn][0])]
                if o not in names:
                    names.append(o)
            if not names:
                raise _err(f"plan module {uname!r} is neither a submodule of the module nor holds params")
            subs = [module.get_submodule(n) if n else module for n in names]
        dts = {params[pn][1].weight.dtype for pn in params_by_unit.get(u, [])}
        dt = _lib.torch_dtype(dts.pop()) if len(dts) == 1 else None
        unit_dtype.append(dt if cast_forward_inputs and dt is not None and dt != torch.float32 else None)
        units.append(subs)
    ids = {id(v[0]): n for n, v in params.items()}
    unit_params = []
    for u, subs in enumerate(units):
        names = list(dict.fromkeys(ids[id(t)] for sm in subs for t in sm.parameters() if id(t) in ids))
        for pn in plan_uses(ex, u):
            if pn not in names:
                names.append(pn)
        unit_params.append(names)
    return units, unit_dtype, unit_params


def forward_next(segments, nmodules):
    """Per unit u, the unit v whose pre_forward directly follows u's
    post_forward in every micro-batch of the plan (None where none does):
    v's pre_forward event issues u's post_forward (Hooks)."""
    return _follower(segments, nmodules, "post_forward", "pre_forward")


def backward_chain(segments, nmodules):
    """Per unit u, the unit v whose pre_backward directly follows u's
    post_backward in every micro-batch of the plan (None where none does):
    a grad hook on v's outputs that fires after u's backward can stand for
    u's post-backward event (Hooks)."""
    return _follower(segments, nmodules, "post_backward", "pre_backward")


def _follower(segments, nmodules, kind, next_kind):
    out = [None] * nmodules
    seen = [set() for _ in range(nmodules)]
    for (k, m, mb, _), (k2, m2, mb2, _) in zip(segments, segments[1:]):
        if k == kind:
            seen[m].add(m2 if (k2 == next_kind and mb2 == mb) else None)
    for u in range(nmodules):
        if len(seen[u]) == 1:
            out[u] = next(iter(seen[u]))
    return out


# set by mpirun / mpiexec (Open MPI, MPICH and PMIx launchers) in every rank's environment
_MPI_LAUNCH_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def default_backend():
    """shard()'s backend when none is given: "nccl" where torch.distributed
    is initialized on NCCL and CUDA is available (NCCL's id shipped over the
    process group: nccl_setup); "torch" where it is initialized otherwise
    (gloo: the plan's collectives on its process groups) and mpirun did not
    start this process; else "mpi". A script under mpirun that initializes
    torch.distributed for its checkpoints keeps the MPI backend it had."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    if not (dist.is_available() and dist.is_initialized()):
        return "mpi"
    if "nccl" in str(dist.get_backend()) and torch.cuda.is_available():
        return "nccl"
    if any(k in os.environ for k in _MPI_LAUNCH_ENV):
        return "mpi"
    return "torch"


def dist_rank_world(rank, world_size):
    """backend "torch": rank and world from torch.distributed (initialized)."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    if not (dist.is_available() and dist.is_initialized()):
        raise FlexplanError(_lib.FP_ERR_ARG, "backend 'torch' needs torch.distributed initialized "
                            "(dist.init_process_group(\"gloo\"), e.g. in a script launched by torchrun)")
    return (dist.get_rank() if rank is None else rank), (dist.get_world_size() if world_size is None else world_size)


def nccl_setup(rank, world_size):
    """NCCL backend: rank and world from torch.distributed's env (RANK,
    WORLD_SIZE), torch's current stream as the plan's compute stream."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    if rank is None:
        rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
    if world_size is None:
        world_size = dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))
    nccl_id = None
    if dist.is_initialized() and world_size > 1:
        # rank 0 makes the NCCL id, torch.distributed ships it (FP_NCCL_BOOT_ID)
        from ..executor import nccl_get_id  # pylint: disable=import-outside-toplevel
        box = [nccl_get_id() if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        nccl_id = box[0]
    return rank, world_size, torch.cuda.current_stream().cuda_stream, nccl_id


_abort_installed = False


def install_abort_on_error():
    """An exception that ends this rank's program must end every rank: the
    others would wait forever in the plan's next collective. sys.excepthook
    prints the traceback, then calls MPI_Abort (fp_mpi_abort), as torchrun
    tears a job down when one worker fails."""
    global _abort_installed  # pylint: disable=global-statement
    if _abort_installed:
        return
    _abort_installed = True
    prev = sys.excepthook

    def hook(tp, val, tb):
        try:
            prev(tp, val, tb)
            sys.stderr.write("flexplan.torch: an uncaught exception on this rank: aborting every rank (MPI_Abort)\n")
            sys.stderr.flush()
        finally:
            from ..executor import mpi_abort  # pylint: disable=import-outside-toplevel
            mpi_abort(1)
    sys.excepthook = hook
