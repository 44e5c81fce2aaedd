"""The errors describe() raises: flexplan.FlexplanError with status
FP_ERR_ARG (a bad module, argument or input); a wrong argument type is also
a TypeError (ArgumentTypeError), a wrong value a ValueError
(ArgumentValueError), each naming the argument. Imported when an error is
made."""


def error(message):
    """A flexplan.FlexplanError (FP_ERR_ARG) carrying `message`, to be raised."""
    from flexplan._lib import FP_ERR_ARG  # pylint: disable=import-outside-toplevel
    from flexplan.errors import FlexplanError  # pylint: disable=import-outside-toplevel
    return FlexplanError(FP_ERR_ARG, message)


def type_error(message):
    """An ArgumentTypeError (TypeError and FlexplanError) carrying `message`."""
    from flexplan.errors import ArgumentTypeError  # pylint: disable=import-outside-toplevel
    return ArgumentTypeError(message)


def value_error(message):
    """An ArgumentValueError (ValueError and FlexplanError) carrying `message`."""
    from flexplan.errors import ArgumentValueError  # pylint: disable=import-outside-toplevel
    return ArgumentValueError(message)
