"""``posrnn status``: where the active profile stands and what to run next (no torch)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import JsonOpt, cli_errors, complete_profiles

PARAMS = Path("params.yaml")


def status(
    profile: Annotated[Optional[str], typer.Option(
        "--profile", "-p", metavar="NAME", autocompletion=complete_profiles,
        help="Profile to report on. [default: the active one]", show_default=False)] = None,
    params: Annotated[Path, typer.Option(
        "--params", metavar="FILE", help="The params file holding the profiles.")] = PARAMS,
    json_out: JsonOpt = False,
):
    """Each experiment of the active profile: its runs finished, unfinished, not started, of
    another config (what --force would replace) and stale (trained by other code); then the
    next command to run. Reads the run directories only."""
    from ..common.settings.profiles import active_profiles
    from ..profile_status import COUNTS, next_command, profile_status
    from .pipeline import active_profile

    name = active_profile(params, profile)
    active = name in active_profiles(params)
    rows = profile_status(params, name)
    then, why = next_command(name, rows, Path("results"), active=active)
    if json_out:
        typer.echo(json.dumps({"profile": name, "active": active, "next": then, "why": why,
                               "experiments": [{**asdict(r), "complete": r.complete} for r in rows]}))
        return
    typer.echo(f"profile {name}{' (active)' if active else ''}: runs under runs/{name}")
    heads = ("experiment", "runs", *COUNTS)
    widths = [max(10, max((len(r.name) for r in rows), default=0)), *(max(4, len(h)) for h in heads[1:])]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    typer.echo(line(heads).rstrip())
    from ..common.stages.experiments import EXPERIMENTS

    for r in rows:
        if r.trains:
            typer.echo(line([r.name, str(r.jobs), *(str(r.counts[k]) for k in COUNTS)]))
        else:
            source = EXPERIMENTS[r.name].source
            typer.echo(f"{line([r.name, str(r.jobs)])}  analyses{f' of the {source} runs' if source else ''}")
    import textwrap

    typer.echo(f"next: {then}")
    typer.echo(textwrap.fill(f"({why})", width=80, initial_indent="  ", subsequent_indent="   "))


def register(app: typer.Typer) -> None:
    app.command(short_help="Where the active profile stands, and the next command.")(cli_errors(status))
