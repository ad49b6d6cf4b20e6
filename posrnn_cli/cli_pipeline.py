"""CLI commands the DVC pipeline's stages call (registered in ``cli.py``):
``posrnn stability-values``, ``posrnn aggregate``, ``posrnn plot``. Thin wrappers over
``pipeline.py`` and ``plots.py``; they work outside DVC too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from .errors import PosrnnError


def stability_values_cmd(
    run: Annotated[Path, typer.Argument(help="A trained run directory; every saved checkpoint is analysed.")],
    out: Annotated[Optional[Path], typer.Option("--out", help="NPZ to write (default: RUN/stability_values.npz).")] = None,
    triplets: Annotated[int, typer.Option(help="Triplets per (target kind × disturbant kind) condition. Paper: 1,024.")] = 1024,
    chunk_size: Annotated[int, typer.Option(help="Sequences per vectorised Jacobian chunk (bounds memory).")] = 64,
    seed: Annotated[int, typer.Option(help="Seed of the triplets (the same triplets for every checkpoint and run).")] = 0,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "cpu",
    threads: Annotated[Optional[int], typer.Option(help="CPU threads for torch.")] = None,
):
    """Gradient stability of every checkpoint of a run, one value per triplet (kept raw so
    that `posrnn aggregate` can pool seeds). Same quantity as `posrnn stability`."""
    import torch

    from .pipeline import stability_values, write_npz

    if threads is not None:
        torch.set_num_threads(threads)
    values = stability_values(run, n_triplets=triplets, chunk_size=chunk_size, seed=seed, device=device)
    path = out or Path(run) / "stability_values.npz"
    write_npz(path, values)
    typer.echo(f"{len(values)} arrays of {triplets} triplets → {path}")


def aggregate_cmd(
    runs: Annotated[Path, typer.Argument(help="The profile's run root, e.g. runs/lite (one sub-directory per sweep).")],
    out: Annotated[Path, typer.Option("--out", help="Directory for <sweep>.csv and metrics.json, e.g. results/lite.")],
    sweep: Annotated[Optional[List[str]], typer.Option("--sweep", help="Only these sweeps (default: every one present).")] = None,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples. Paper: 10,000.")] = 10_000,
    json_out: Annotated[bool, typer.Option("--json", help="Print metrics.json.")] = False,
):
    """Pool every cell's seeds and compute 95% bootstrap CIs (SPEC §4): token / sequence
    accuracy and Damerau–Levenshtein per cell, dual-frequency accuracy per (target kind ×
    disturbant kind), stability per checkpoint, extension accuracy on new ids."""
    from .pipeline import aggregate

    tables = aggregate(runs, out, sweeps=sweep or None, n_resamples=resamples)
    if not tables:
        raise PosrnnError(f"no evaluated runs under {runs}; run the train and eval stages first")
    if json_out:
        typer.echo((Path(out) / "metrics.json").read_text())
    else:
        for name, rows in tables.items():
            typer.echo(f"{name}: {len(rows)} rows → {Path(out) / (name + '.csv')}")


def plot_cmd(
    results: Annotated[Path, typer.Argument(help="The aggregated tables, e.g. results/lite.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for the PNG figures, e.g. figures/lite.")],
):
    """Draw every figure whose table exists (Fig. 2, dual-frequency grid, stability, PE forms,
    double vanilla, vocabulary extension, length sweep, LM table)."""
    from .plots import draw_all

    if not Path(results).is_dir():
        raise PosrnnError(f"{results} does not exist; run `posrnn aggregate` first")
    drawn = draw_all(results, out)
    if not drawn:
        raise PosrnnError(f"no tables in {results} to draw")
    for p in drawn:
        typer.echo(str(p))


def register(app: typer.Typer, wrap) -> None:
    """Add the pipeline commands to ``app``; ``wrap`` turns library errors into one-line CLI errors."""
    app.command("stability-values")(wrap(stability_values_cmd))
    app.command("aggregate")(wrap(aggregate_cmd))
    app.command("plot")(wrap(plot_cmd))
