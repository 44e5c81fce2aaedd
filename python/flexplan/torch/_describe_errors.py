"""The error describe() raises: flexplan.FlexplanError (python/flexplan/errors.py),
imported when an error is made so that this package loads on its own."""


def error(message):
    """A flexplan.FlexplanError carrying `message` (to be raised by the caller)."""
    from flexplan.errors import FlexplanError  # pylint: disable=import-outside-toplevel
    return FlexplanError(message)
