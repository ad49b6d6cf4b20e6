"""What every command shares: the error decorator (library errors → one line, no traceback),
the console, and the option types. Imports neither torch nor numpy, so ``--help`` is fast."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, List, Literal, Optional

import typer

from ..common import catalog
from ..common.errors import PosrnnError

TaskName = Literal[tuple(catalog.TASKS)]  # type: ignore[valid-type]
ModelName = Literal[tuple(catalog.CORES)]  # type: ignore[valid-type]
PEName = Literal[tuple(catalog.PE_FORMS)]  # type: ignore[valid-type]
PEMode = Literal[tuple(catalog.PE_MODES)]  # type: ignore[valid-type]

ParamsOpt = Annotated[Optional[Path], typer.Option("--params", metavar="FILE", help="YAML with task/model/train sections (e.g. params.yaml); options override it.", show_default=False)]
SetOpt = Annotated[Optional[List[str]], typer.Option("--set", metavar="KEY=VALUE", help="Override any config key, e.g. --set model.pe_dim=32. Applied last.", show_default=False)]
DeviceOpt = Annotated[str, typer.Option("--device", metavar="TEXT", help="auto (CUDA when present), cpu, cuda or cuda:N.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def console():
    """A rich console as wide as the terminal, or as ``COLUMNS`` says (rich reads it); piped with
    no ``COLUMNS``, 80 columns (never the width of a terminal the output does not go to)."""
    import os

    from rich.console import Console

    c = Console()
    if c.is_terminal:
        return c
    cols = os.environ.get("COLUMNS", "")
    return Console(width=int(cols) if cols.isdigit() and int(cols) > 0 else 80)


def print_wrapped(c, text: str, style: str = "", indent: str = "") -> None:
    """Print ``text`` on console ``c``, wrapped at its width at spaces outside brackets: an
    interval such as ``[+0.035, +0.061]`` stays on one line."""
    import re
    import textwrap

    from rich.text import Text

    keep = re.sub(r"\[[^\[\]]*\]", lambda m: m.group(0).replace(" ", "\0"), text)
    lines = textwrap.wrap(keep, max(20, c.width), initial_indent=indent, subsequent_indent=indent,
                          break_long_words=False, break_on_hyphens=False)
    for line in lines:
        c.print(Text(line.replace("\0", " "), style=style), soft_wrap=True)


def echo_hanging(prefix: str, text: str) -> None:
    """One listing entry: ``prefix`` then ``text`` wrapped to the console's width, its further
    lines indented under the text's start."""
    import textwrap

    width = max(len(prefix) + 20, console().width)
    typer.echo("\n".join(textwrap.wrap(text, width, initial_indent=prefix, subsequent_indent=" " * len(prefix),
                                        break_long_words=False, break_on_hyphens=False)) or prefix.rstrip())


def cli_errors(fn):
    """Library errors → one ``error: …`` line on stderr and a non-zero exit, no traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PosrnnError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(getattr(e, "exit_code", 1)) from None
        except OSError as e:
            where = f" ({e.filename})" if e.filename else ""
            typer.echo(f"error: {e.strerror or e}{where}; check the path, its permissions and free disk space", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            typer.echo("error: interrupted; the last checkpoint and earlier outputs are intact (continue with --resume)", err=True)
            raise typer.Exit(130) from None

    return wrapper


def listing(title: str, registry: dict) -> str:
    """One line per catalogue entry, ``name: description``, kept as lines by click's ``\\b``."""
    width = max(len(k) for k in registry) + 2
    rows = "\n".join(f"  {k + ':':<{width}} {v.description}" for k, v in registry.items())
    return f"\b\n{title}\n{rows}"
