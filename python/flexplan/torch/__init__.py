"""flexplan for PyTorch modules.

- describe(module, example_inputs=None, *, units=None, name=None) -> dict:
  a model.json object for a torch.nn.Module (docs/describe.md).
- shard: FSDP-style sharding of a module on a compiled plan (loaded on first
  use from flexplan.torch.shard).
"""
from .describe import describe

__all__ = ["describe", "shard"]


def __getattr__(name):
    """Loads `shard` (flexplan.torch.shard) on first use."""
    if name == "shard":
        import importlib  # pylint: disable=import-outside-toplevel
        mod = importlib.import_module(".shard", __name__)
        value = getattr(mod, "shard", mod)
        globals()["shard"] = value
        return value
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
