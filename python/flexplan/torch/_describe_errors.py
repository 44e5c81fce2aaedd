"""The error describe() raises: flexplan.FlexplanError with status FP_ERR_ARG
(a bad module, argument or input), imported when an error is made."""


def error(message):
    """A flexplan.FlexplanError (FP_ERR_ARG) carrying `message`, to be raised."""
    from flexplan.errors import FlexplanError, STATUS_NAMES  # pylint: disable=import-outside-toplevel
    return FlexplanError(STATUS_NAMES.index("FP_ERR_ARG"), message)
