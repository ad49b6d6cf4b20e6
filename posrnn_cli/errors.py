"""The one exception type the CLI turns into a one-line error (no traceback), and the
decorator that does it for every command."""

import functools


class PosrnnError(Exception):
    """A user-facing problem: bad input, impossible config, missing or corrupt file."""


def cli_errors(fn):
    """Library errors → one ``error: …`` line on stderr and a non-zero exit, no traceback."""
    import typer

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PosrnnError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None
        except OSError as e:
            where = f" ({e.filename})" if e.filename else ""
            typer.echo(f"error: {e.strerror or e}{where}; check the path and free disk space", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            typer.echo("error: interrupted; the last checkpoint and earlier outputs are intact (continue with --resume)", err=True)
            raise typer.Exit(130) from None

    return wrapper
