"""flexplan for PyTorch modules (docs/torch.md, docs/describe.md).

The public surface, all of it:

- ``describe(module, example_inputs=None, *, units=None, name=None) -> dict``:
  a model.json object for a torch.nn.Module (docs/describe.md).
- ``shard(module, plan, ...) -> Sharded``: FSDP-style sharding of a module on
  a compiled plan; ``optimizer(st, cls, ...)``, ``clip_grad_norm_(st,
  max_norm)``, ``state(module)``; ``Sharded`` (its methods: docs/torch.md).
- ``state_dict(st, optimizer=None, *, copy=True)``, ``load_state_dict(st, sd,
  optimizer=None)``, ``load_in_place(st, checkpoint_id, optimizer=None)``:
  sharded checkpoints through torch.distributed.checkpoint (the public module
  ``flexplan.torch.checkpoint``; docs/torch.md, "Checkpoints").

Everything else is private, one module per concern (leading underscore, so
no module name shadows a function of the package): ``_describe*``
(tracing a module), ``_shard`` (shard, Sharded), ``_setup`` (the plan
checked against the module, views, units), ``_hooks`` (every module and
autograd hook, registered in one place), ``_driver`` (the C library's hook
driver), ``_params`` (what params hold between steps), ``_optim`` (main
shards, optimizer state, clipping), ``_hf`` (initial values from Hugging Face
folders). ``shard`` and the checkpoint functions are loaded on first use.
"""
from ._describe import describe

__all__ = ["describe", "shard", "optimizer", "clip_grad_norm_", "state", "Sharded", "abandon_step", "state_dict",
           "load_state_dict", "load_in_place", "save_checkpoint", "load_checkpoint"]
_LAZY = {n: "._shard" for n in ("shard", "optimizer", "clip_grad_norm_", "state", "Sharded", "abandon_step")}
_LAZY.update({n: ".checkpoint" for n in ("state_dict", "load_state_dict", "load_in_place", "save_checkpoint",
                                          "load_checkpoint")})


def __getattr__(name):
    """Loads ``shard`` and the checkpoint functions on first use."""
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    import importlib  # pylint: disable=import-outside-toplevel
    m = importlib.import_module(mod, __name__)
    for n, where in _LAZY.items():
        if where == mod:
            globals()[n] = getattr(m, n)
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(__all__))
