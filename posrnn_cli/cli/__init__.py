"""The ``posrnn`` command line: thin Typer wrappers over the library functions.

Importing this module imports neither torch nor numpy (commands import what they run), so
``posrnn --help`` and shell completion answer at once.
"""

from __future__ import annotations

import sys
from typing import Annotated, List, Optional

from ..common.host.signals import quiet_interrupts

quiet_interrupts()  # before the slow imports below

import typer
from typer.core import TyperArgument

from .. import __version__
from . import bench_commands as _bench
from . import lm_commands as _lm
from . import pipeline as _pipeline
from . import runs as _runs
from . import status as _status

# An argument's metavar names it (RUN, DIR); Typer would add a Python type after it ("<path>").
TyperArgument.display_type_rich = lambda self, ctx: None

app = typer.Typer(
    help="posrnn — does a positional encoding help a recurrent network? Train, evaluate and analyse the "
    "experiments of Morita's 'Positional Encoding Helps RNNs Handle a Large Vocabulary' (and Irie's note on "
    "causal Transformers), one run at a time or as whole sweeps.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
_runs.register(app)
_bench.register(app)
_pipeline.register(app)
_status.register(app)
app.add_typer(_lm.lm_app, name="lm", short_help="Language models: prepare, tokenizer, encode, train, eval.")


def _version(value: bool):
    if value:
        typer.echo(f"posrnn {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[Optional[bool], typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")] = None,
):
    """posrnn — positional encoding for recurrent networks."""


def usage_message(text: str) -> str:
    """A usage error as one line: pydantic's "Value error, " prefix dropped, and a value outside
    the choices followed by the near miss (GRU → gru)."""
    import re

    from ..common.errors import did_you_mean

    msg = " ".join(text.split()).replace("Value error, ", "")
    m = re.search(r"'([^']*)' is not one of ((?:'[^']*'(?:, )?)+)\.?", msg)
    if m:
        hint = did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
        msg = msg[:m.end()].rstrip(".") + hint + msg[m.end():]
    return msg


def run(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point: like ``app()``, but a usage error (unknown option, a value
    outside the choices) is one line on stderr and exit code 2, no usage box."""
    try:  # typer ≥ 0.26 vendors click; older typers use the click package
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover
        import click.exceptions as cx

    import logging

    # matplotlib reports each missing font family on stderr while it (re)builds its font cache;
    # a command's stderr is its one-line error, so only matplotlib's errors are let through
    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    try:
        code = app(args=argv, prog_name="posrnn", standalone_mode=False)
    except KeyboardInterrupt:  # Ctrl-C outside a command's own handling (parsing, or twice in a row)
        typer.echo("stopped: interrupted", err=True)
        code = 130
    except cx.NoArgsIsHelpError as e:
        typer.echo(e.ctx.get_help() if e.ctx else "see posrnn --help")
        code = 0
    except cx.UsageError as e:
        cmd = e.ctx.command_path if e.ctx else "posrnn"
        msg = usage_message(e.format_message())
        typer.echo(f"error: {msg} (see '{cmd} --help')", err=True)
        code = 2
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        code = 1
    sys.exit(code or 0)
