"""Initial values for flexplan.torch.shard (init=): a Hugging Face checkpoint
folder read by extent, or the module's own values copied in memory.

- ``hf_paths(dir, ex, module)``: the safetensors files of a folder written by
  transformers' ``save_pretrained`` (``model.safetensors.index.json`` and its
  shards, or one ``model.safetensors``), checked against the plan: a param
  the folder lacks, or a tensor the module does not name, is a
  FlexplanError naming them. The executor's refit then reads each rank's
  extents only (and the whole tensor where the plan keeps a compute copy
  unsharded), converting the file's dtype (F32/BF16/F16) to the plan's.
- ``load_buffers(dir, module, names)``: persistent buffers found in the
  folder, copied into the module (whole, they are small).
- ``from_module(ex, named)``: init="module" without a file: each rank copies
  its extents of every param from the module's tensors into its main shard,
  and the compute copies the plan keeps unsharded; the ranks agree first.
"""
import json
import os

import torch

from .. import _lib
from ..executor import _vote, safetensors_names
from ..errors import error_maker, FlexplanError

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


_err = error_maker(_lib.FP_ERR_WEIGHTS)  # the package's one error helper (flexplan.errors)


def is_hf_dir(path):
    return isinstance(path, (str, os.PathLike)) and os.path.isdir(path)


def hf_files(d):
    """{tensor name: file} of a Hugging Face checkpoint folder"""
    d = os.fspath(d)
    idx = os.path.join(d, INDEX)
    if os.path.exists(idx):
        try:
            with open(idx) as f:
                wm = json.load(f)["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise _err(f"{idx}: not a safetensors index ({type(e).__name__}: {e})") from None
        if not isinstance(wm, dict):
            raise _err(f"{idx}: weight_map is not an object")
        out = {}
        for name, fn in wm.items():
            p = os.path.join(d, fn)
            if os.path.dirname(os.path.normpath(fn)) not in ("",) or not os.path.isfile(p):
                raise _err(f"{idx}: tensor {name!r} is in {fn!r}, which is not a file of {d}")
            out[name] = p
        # the index names every tensor of its files, and only those
        for p in sorted(set(out.values())):
            for name in safetensors_names(p):
                if out.get(name) != p:
                    raise _err(f"{p}: tensor {name!r} is not in {INDEX}'s weight_map for this file")
        return out
    single = os.path.join(d, SINGLE)
    if os.path.exists(single):
        return {name: single for name in safetensors_names(single)}
    raise _err(f"{d}: neither {INDEX} nor {SINGLE} (a Hugging Face checkpoint folder, as save_pretrained writes it)")


def hf_paths(d, ex, module):
    """the files to refit from, after checking the folder's names against
    the plan and the module"""
    files = hf_files(d)
    plan = [p.name for p in ex.params]
    missing = [n for n in plan if n not in files]
    known = set(module.state_dict(keep_vars=True).keys()) | set(plan)  # keep_vars: no refusal (Sharded._state_dict_pre)
    extra = [n for n in files if n not in known]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} param(s) of the module: {', '.join(missing[:8])}"
                         + (" ..." if len(missing) > 8 else ""))
        if extra:
            parts.append(f"{len(extra)} tensor(s) the module does not have: {', '.join(extra[:8])}"
                         + (" ..." if len(extra) > 8 else ""))
        raise _err(f"{d}: the checkpoint does not match the module: " + "; ".join(parts))
    return sorted({files[n] for n in plan}), files


def load_buffers(files, module, plan_names):
    """persistent buffers the folder holds -> the module's buffers"""
    bufs = {k: v for k, v in module.state_dict(keep_vars=True).items() if k not in plan_names}
    todo = {k: files[k] for k in bufs if k in files}
    if not todo:
        return
    from safetensors import safe_open
    with torch.no_grad():
        for k, path in todo.items():
            with safe_open(path, "pt") as f:
                t = f.get_tensor(k)
            if tuple(t.shape) != tuple(bufs[k].shape):
                raise _err(f"{path}: buffer {k!r} has shape {list(t.shape)}, the module {list(bufs[k].shape)}")
            if bufs[k].is_meta:  # a meta module's buffer: the file's tensor becomes it
                prefix, _, leaf = k.rpartition(".")
                owner = module.get_submodule(prefix) if prefix else module
                owner._buffers[leaf] = t.to(bufs[k].dtype)
                continue
            bufs[k].copy_(t)


def from_hf_dir(ex, module, d, named):
    """init=DIR: check the folder against the plan and the module on every
    rank, agree, then the refit (each rank reads its extents) and the
    persistent buffers. A failure on any rank raises on every rank."""
    why, paths, files = None, None, None
    try:
        paths, files = hf_paths(d, ex, module)
    except FlexplanError as e:
        why = str(e)
    why = _vote(ex, why, "read the checkpoint")
    if why is not None:
        raise _err(why)
    ex.load_weights(paths)
    load_buffers(files, module, set(named))


def persistent_weights(ex):
    """plan names of params whose compute weight stays unsharded between steps
    (a persistent buffer: the checkpoint code recasts it after a load too),
    as the library says (fp_plan_param_weight_persistent)"""
    return {p.name for p in ex.params if p.weight_persistent}


def from_module(ex, named):
    """init="module": every rank holds the same full values (as with FSDP2);
    each copies its extents into its main shard (main dtype, round to
    nearest even as the refit) and the whole param into a compute copy the
    plan keeps unsharded. Nothing goes to disk; one param at a time."""
    why = None
    for p in ex.params:
        t = named[p.name]
        if tuple(t.shape) != p.shape:
            why = f"param {p.name!r}: shape {list(t.shape)}, the plan says {list(p.shape)}"
            break
    why = _vote(ex, why, "read its module")
    if why is not None:
        raise _err(f"init='module': {why}; no rank changed its weights")
    pers = persistent_weights(ex)
    with torch.no_grad():
        for p in ex.params:
            src = named[p.name].detach().to("cpu").reshape(-1)
            mt = p.tensor("main")
            for s, f, n in p.shard.pairs():
                mt[s:s + n].copy_(src[f:f + n])
            if p.name in pers and p.weight.ptr and p.weight.ptr != p.main.ptr:
                p.tensor("weight").view(-1).copy_(src.to(mt.dtype))  # cast(main), as the refit
