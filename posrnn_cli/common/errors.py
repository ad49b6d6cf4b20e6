"""The one exception type the CLI turns into a one-line error (no traceback)."""


class PosrnnError(Exception):
    """A user-facing problem: bad input, impossible config, missing or corrupt file.

    The message is one sentence naming the problem and the fix."""
