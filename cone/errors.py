"""The one error type the command line turns into a single line on stderr."""


class ConeError(Exception):
    """A user-facing failure: bad input, missing file, mismatched checkpoint. No traceback."""
