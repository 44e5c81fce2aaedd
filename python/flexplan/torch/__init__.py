"""flexplan for PyTorch modules.

- describe(module, example_inputs=None, *, units=None, name=None) -> dict:
  a model.json object for a torch.nn.Module (docs/describe.md).
- shard(module, plan, ...) -> Sharded: FSDP-style sharding of a module on a
  compiled plan; optimizer(), clip_grad_norm_(), state() (loaded on first
  use from flexplan.torch.shard; docs/torch.md).
"""
from .describe import describe

__all__ = ["describe", "shard", "optimizer", "clip_grad_norm_", "state", "Sharded", "state_dict",
           "load_state_dict"]
_CKPT_NAMES = ("state_dict", "load_state_dict")
_SHARD_NAMES = ("shard", "optimizer", "clip_grad_norm_", "state", "Sharded")


def __getattr__(name):
    """Loads `shard` (flexplan.torch.shard) on first use."""
    if name in _SHARD_NAMES:
        import importlib  # pylint: disable=import-outside-toplevel
        mod = importlib.import_module(".shard", __name__)
        for n in _SHARD_NAMES:  # the function, not the submodule, is flexplan.torch.shard
            globals()[n] = getattr(mod, n)
        return globals()[name]
    if name in _CKPT_NAMES:
        import importlib  # pylint: disable=import-outside-toplevel
        mod = importlib.import_module(".checkpoint", __name__)
        for n in _CKPT_NAMES:
            globals()[n] = getattr(mod, n)
        return globals()[name]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
