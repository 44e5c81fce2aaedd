"""flexplan - compile and run communication plans for sharded data-parallel
training (FSDP / ZeRO) from Python.

A thin, pure-Python layer (ctypes) over the shared library libflexplan.so:

    import flexplan
    plan = flexplan.compile("model.json", "spec.json")   # or dicts, or JSON text
    print(plan.summary["modeled_step_ms"])
    plan.save("model.plan.json")
    plan = flexplan.load("model.plan.json")

Errors raise flexplan.FlexplanError carrying the library's located message.
The library is found through FLEXPLAN_LIBRARY, then next to the installed
package, then the source tree's build/ (flexplan._lib says how).
Executor (flexplan.executor) runs a plan in a trainer; flexplan.torch
connects it to PyTorch. docs/python.md documents the package.
"""

from ._version import __version__
from .errors import FlexplanError
from .plan import Plan, compile, load  # noqa: A004 - flexplan.compile is the API's name
from .reshard import Transfer, load_transfer, reshard
from . import placement
from . import transform

from .executor import Executor

__all__ = ["compile", "load", "Plan", "reshard", "load_transfer", "Transfer", "FlexplanError", "Executor", "version",
           "library_path", "placement", "__version__"]


def version() -> str:
    """The loaded library's version string (fp_version()), e.g. "0.2.0"."""
    from . import _lib
    return _lib.text(_lib.lib().fp_version())


def library_path() -> str:
    """The path of the libflexplan.so this process loaded."""
    from . import _lib
    return _lib.library_path()
