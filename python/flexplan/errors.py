"""flexplan.errors - the one exception type of the package.

Every failure the library reports (an fp_status other than FP_OK) becomes a
FlexplanError carrying the library's message: for inputs, the located
message `file:line:col: error: /json/pointer: ...` that the command line
prints for the same input.
"""
from typing import Any, Callable, Optional, Tuple


class FlexplanError(Exception):
    """An error reported by flexplan.

    ``str(err)`` is the library's message (located for input errors, e.g.
    ``spec.json:3:14: error: /strategy: unknown strategy 'zero4'``).

    Attributes:
        status: the fp_status code (int; 0 is never raised).
        status_name: its name, e.g. ``"FP_ERR_PLAN"``.
        message: the message (the same as ``str(err)``).
    """

    def __init__(self, status: int, message: str) -> None:
        self.status = int(status)
        self.status_name = status_name(self.status)
        self.message = message if message else self.status_name
        super().__init__(self.message)

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        if isinstance(self, (TypeError, ValueError)):  # ArgumentTypeError / ArgumentValueError
            return (type(self), (self.message, self.status))
        return (type(self), (self.status, self.message))


def status_name(status: int) -> str:
    """The name of an fp_status value ("FP_ERR_?" outside the enum); the
    names are _lib.STATUS_NAMES (imported here, not at the top: _lib imports
    this module)."""
    from ._lib import STATUS_NAMES  # pylint: disable=import-outside-toplevel
    return STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else "FP_ERR_?"


def _arg_status() -> int:
    from ._lib import FP_ERR_ARG  # pylint: disable=import-outside-toplevel
    return FP_ERR_ARG


class ArgumentTypeError(FlexplanError, TypeError):
    """An argument of the wrong type: a TypeError (as Python's own API
    raises) and a FlexplanError with status FP_ERR_ARG (as flexplan raised
    before); the message starts with the argument's name."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(_arg_status() if status is None else status, message)


class ArgumentValueError(FlexplanError, ValueError):
    """An argument of the right type but a value outside its choices or
    range: a ValueError and a FlexplanError (FP_ERR_ARG); the message starts
    with the argument's name."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(_arg_status() if status is None else status, message)


def error_maker(default_status: int) -> Callable[..., FlexplanError]:
    """The package's one error helper: ``_err = error_maker(FP_ERR_PLAN)``
    gives a module ``_err(message, status=None)``, the FlexplanError of a
    fault the Python side finds itself, with the module's usual status
    unless the call names another (the C side's faults come with theirs)."""

    def _err(message: str, status: Optional[int] = None) -> FlexplanError:
        return FlexplanError(default_status if status is None else status, message)

    return _err
