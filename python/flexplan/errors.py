"""flexplan.errors - the one exception type of the package.

Every failure the library reports (an fp_status other than FP_OK) becomes a
FlexplanError carrying the library's message: for inputs, the located
message `file:line:col: error: /json/pointer: ...` that the command line
prints for the same input.
"""

# fp_status values (include/flexplan.h), in the enum's order
STATUS_NAMES = (
    "FP_OK",
    "FP_ERR_ARG",
    "FP_ERR_PLAN",
    "FP_ERR_ORDER",
    "FP_ERR_MISMATCH",
    "FP_ERR_WEIGHTS",
    "FP_ERR_BACKEND",
    "FP_ERR_NOMEM",
    "FP_ERR_INPUT",
    "FP_ERR_TIMEOUT",
)


class FlexplanError(Exception):
    """An error reported by flexplan.

    ``str(err)`` is the library's message (located for input errors, e.g.
    ``spec.json:3:14: error: /strategy: unknown strategy 'zero4'``).

    Attributes:
        status: the fp_status code (int; 0 is never raised).
        status_name: its name, e.g. ``"FP_ERR_PLAN"``.
        message: the message (the same as ``str(err)``).
    """

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = status_name(self.status)
        self.message = message if message else self.status_name
        super().__init__(self.message)

    def __reduce__(self):
        if isinstance(self, (TypeError, ValueError)):  # ArgumentTypeError / ArgumentValueError
            return (type(self), (self.message, self.status))
        return (type(self), (self.status, self.message))


def status_name(status):
    """The name of an fp_status value ("FP_ERR_?" outside the enum)."""
    return STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else "FP_ERR_?"


class ArgumentTypeError(FlexplanError, TypeError):
    """An argument of the wrong type: a TypeError (as Python's own API
    raises) and a FlexplanError with status FP_ERR_ARG (as flexplan raised
    before); the message starts with the argument's name."""

    def __init__(self, message, status=1):
        super().__init__(status, message)


class ArgumentValueError(FlexplanError, ValueError):
    """An argument of the right type but a value outside its choices or
    range: a ValueError and a FlexplanError (FP_ERR_ARG); the message starts
    with the argument's name."""

    def __init__(self, message, status=1):
        super().__init__(status, message)
