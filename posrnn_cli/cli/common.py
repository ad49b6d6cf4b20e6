"""What every command shares: the error decorator (library errors → one line, no traceback),
the console, and the option types. Imports neither torch nor numpy, so ``--help`` is fast."""

from __future__ import annotations

import functools
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, List, Literal, Optional

import typer

from ..common import catalog
from ..common.errors import PosrnnError
from ..common.host.signals import Stopped

TaskName = Literal[tuple(catalog.TASKS)]  # type: ignore[valid-type]
ModelName = str  # a built-in core or a plugin's (``model_option``)
PEName = Literal[tuple(catalog.PE_FORMS)]  # type: ignore[valid-type]
PEMode = Literal[tuple(catalog.PE_MODES)]  # type: ignore[valid-type]

ParamsOpt = Annotated[Optional[Path],
                      typer.Option("--params", metavar="FILE", help="YAML with task/model/train sections (e.g. "
                                                                    "params.yaml); options override it.",
                                   show_default=False)]
SetOpt = Annotated[Optional[List[str]],
                   typer.Option("--set", metavar="KEY=VALUE", help="Override any config key, e.g. --set "
                                                                   "model.pe_dim=32. Applied last.",
                                show_default=False)]
DeviceOpt = Annotated[str,
                      typer.Option("--device", metavar="DEVICE", help="auto (CUDA when present), cpu, cuda or cuda:N.")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", metavar="N", min=1, show_default=False, help=(
    "CPU threads for torch. [default: auto: 1 for a small model, else the cores not busy]"))]
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
    """Library errors → one ``error: …`` line on stderr and a non-zero exit, no traceback; a stop the
    user asked for (a signal, Ctrl-C) → one ``stopped: …`` line and exit 130."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Stopped as e:  # the stop the user asked for (Ctrl-C, SIGTERM): not an error
            typer.echo(f"stopped: {e}", err=True)
            raise typer.Exit(getattr(e, "exit_code", 130)) from None
        except PosrnnError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(getattr(e, "exit_code", 1)) from None
        except OSError as e:
            typer.echo(f"error: {os_error(e)}", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            typer.echo("stopped: interrupted; what was written before is intact: run the same command again", err=True)
            raise typer.Exit(130) from None

    return wrapper


def os_error(e: OSError) -> str:
    """One line for an OSError: a file standing where a directory is needed is named as such,
    anything else points at the path, its permissions and the free disk space."""
    import errno

    if e.errno in (errno.ENOTDIR, errno.EEXIST) and e.filename:
        path = Path(e.filename)
        file = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if file is not None:
            return f"{file} is a file, not a directory; pass another path (or move the file)"
    where = f" ({e.filename})" if e.filename else ""
    return f"{e.strerror or e}{where}; check the path, its permissions and free disk space"


@contextmanager
def advise_on_interrupt(out: Path, resume: Optional[str]):
    """Ctrl-C before the training loop took over the signal (the first seconds): advise
    ``resume`` (a command) only where the run has a checkpoint to resume from; else, re-running
    the same command (a run stopped before its first checkpoint is not kept; under --force,
    pass ``resume=None``: the replaced run is brought back)."""
    try:
        yield
    except KeyboardInterrupt:
        from ..common.files.rundir import list_checkpoints

        if resume is not None and (Path(out) / "config.yaml").is_file() and list_checkpoints(out):
            msg = f"interrupted; {out} keeps its last checkpoint: continue with {resume}"
        else:
            msg = (f"interrupted before the first checkpoint, so {out} holds nothing to resume: run the same command "
                   "again")
        err = PosrnnError(msg)
        err.exit_code = 130
        raise err from None


def model_option(value: Optional[str]) -> Optional[str]:
    """--model's check, before the command runs: a built-in core, an installed plugin's entry-point
    name or a plugin's ``module:factory`` (loaded by the command); anything else is a usage error
    listing the names (the plugins' entry points are read only for a name that is not built in)."""
    from ..common import plugins

    if value is None or value in catalog.CORES or plugins.is_plugin_name(value):
        return value
    names = ", ".join(repr(n) for n in (*catalog.CORES, *plugins.entry_points()))
    raise typer.BadParameter(f"{value!r} is not one of {names}; or a plugin's module:factory (docs/plugins.md)")


def listing(title: str, registry: dict) -> str:
    """One line per catalogue entry, ``name: description``, kept as lines by click's ``\\b``."""
    width = max(len(k) for k in registry) + 2
    rows = "\n".join(f"  {k + ':':<{width}} {v.description}" for k, v in registry.items())
    return f"\b\n{title}\n{rows}"


def given_keys(options: dict, sets: Optional[List[str]], params: Optional[Path] = None) -> set[str]:
    """The config keys the user sets: the command line's options (dotted keys), its --set items
    and the keys of its config file (``params``)."""
    from ..common.settings.config import load_yaml

    keys = {k for k, v in options.items() if v is not None} | {item.partition("=")[0].strip() for item in sets or []}
    if params is not None:
        data = load_yaml(params)
        keys |= {f"{section}.{k}" for section, body in (data or {}).items() if isinstance(body, dict) for k in body}
    return keys


def threads_for_run(requested: Optional[int], run: Path):
    """Set torch's threads for a command that computes on a saved run (eval, stability,
    extend-vocab): ``requested``, else the machine's choice for the run's size. Returns the
    ``ThreadChoice``."""
    from ..common.host.machine import choose_threads, is_small_model
    from ..engine.paths import resolve_checkpoint
    from ..common.files.rundir import read_run_config
    from ..engine.device import setup_threads

    cfg = read_run_config(resolve_checkpoint(run)[1]) if requested is None else None
    small = cfg is not None and is_small_model(cfg.train.batch_size, cfg.model.hidden_size)
    choice = choose_threads(requested, small=small)
    setup_threads(choice.n)
    return choice


def note(lines, json_out: bool = False) -> None:
    """The run header (threads, machine-chosen defaults) on stdout, before the run's summary
    (stderr holds only a failure's one line); nothing under --json."""
    if not json_out:
        for line in lines if isinstance(lines, list) else [lines]:
            typer.echo(line)


def complete_profiles(incomplete: str) -> list[str]:
    """Shell completion: the profiles of ./params.yaml (none where it cannot be read)."""
    from ..common.settings.profiles import profiles_of, read_params

    try:
        names = list(profiles_of(read_params(Path("params.yaml")), Path("params.yaml")))
    except (PosrnnError, OSError):
        return []
    return [n for n in names if n.startswith(incomplete)]


def complete_experiments(incomplete: str) -> list[str]:
    """Shell completion: the experiments the pipeline knows."""
    from ..common.stages.experiments import EXPERIMENTS

    return [n for n in EXPERIMENTS if n.startswith(incomplete)]
