"""``posrnn sweep | profile | aggregate | plot | scorecard | dvc-yaml``: experiments, not single runs.
The DVC stages call these; they work outside DVC too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..common.errors import PosrnnError
from .common import JsonOpt, cli_errors, complete_experiments, complete_profiles, console, echo_hanging

PARAMS = Path("params.yaml")
ParamsFile = Annotated[Path, typer.Option("--params", metavar="FILE", help="The params file holding the profiles.")]


def active_profile(params: Path, profile: Optional[str]) -> str:
    from ..common.settings.profiles import active_profiles

    if profile is not None:
        return profile
    active = active_profiles(params)
    if len(active) != 1:
        raise PosrnnError(f"{len(active)} profiles are active ({', '.join(active)}); pass --profile NAME")
    return active[0]


def check_profile_name(params: Path, name: str) -> None:
    """Refuse a profile name the params file does not define, with the near miss (lit → lite)."""
    from ..common.errors import did_you_mean
    from ..common.settings.profiles import profiles_of, read_params

    try:
        known = list(profiles_of(read_params(params), params))
    except PosrnnError:
        return  # no readable params file here: the missing tables are the error
    if name not in known:
        raise PosrnnError(f"unknown profile {name!r}{did_you_mean(name, known)}; choose one of: {', '.join(known)}")


# the options of `posrnn sweep`
ExperimentsOpt = Annotated[Optional[List[str]], typer.Argument(
    metavar="EXPERIMENT", autocompletion=complete_experiments,
    help="Experiments to run (fig2, dual, …; see --list). [default: every one of --stage, or all]",
    show_default=False)]
ProfileOpt = Annotated[Optional[str], typer.Option(
    "--profile", "-p", metavar="NAME", autocompletion=complete_profiles,
    help="Profile whose grids to run. [default: the active one]", show_default=False)]
StageOpt = Annotated[Optional[str], typer.Option(
    metavar="NAME", help="Every experiment of one pipeline stage (train, stability, extend, lm).",
    show_default=False)]
ExecutorOpt = Annotated[Optional[str], typer.Option(
    metavar="NAME", help="local (worker processes), slurm (a submitit job array) or submitit-local. [default: the "
                         "profile's, else local]", show_default=False)]
WorkersOpt = Annotated[Optional[int], typer.Option(
    metavar="N", help="local: worker processes. [default: one per CPU core]", show_default=False)]
RunsPerGpuOpt = Annotated[Optional[int], typer.Option(
    metavar="N", help="local on GPUs: runs sharing each GPU. [default: 1]", show_default=False)]
EnsembleOpt = Annotated[Optional[str], typer.Option(
    metavar="K", help="Train up to K same-shape runs (a cell's seeds) as one batched model, each member equal to "
                      "its solo run (one worker, or one SLURM array task); 1: no packing. [default: the profile's "
                      "ensemble:, else 1]",
    show_default=False)]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace run directories that hold a different config.")]
DryRunOpt = Annotated[bool, typer.Option(
    "--dry-run",
    help="Say what would happen to the runs, their disk use and compute (an estimate); run nothing.")]
VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", "-v",
    help="With --dry-run: also list each run, what would happen to it, and each ensemble.")]
PartitionOpt = Annotated[Optional[str], typer.Option(
    metavar="NAME", help="slurm: partition. [default: the profile's]", show_default=False)]
GpusPerTaskOpt = Annotated[Optional[int], typer.Option(
    metavar="N", help="slurm: GPUs per run. [default: the profile's]", show_default=False)]
CpusPerTaskOpt = Annotated[Optional[int], typer.Option(
    metavar="N", help="slurm: CPUs per run. [default: the profile's]", show_default=False)]
MemGbOpt = Annotated[Optional[int], typer.Option(
    metavar="N", help="slurm: memory per run, GB. [default: the profile's]", show_default=False)]
TimeoutMinOpt = Annotated[Optional[int], typer.Option(
    metavar="N", help="slurm: time limit per task, minutes (runs resume after a requeue). [default: the profile's]",
    show_default=False)]
GresOpt = Annotated[Optional[str], typer.Option(
    metavar="TEXT", help="slurm: generic resources per task, e.g. gpu:a100:1. [default: the profile's]",
    show_default=False)]
TimeoutOpt = Annotated[Optional[str], typer.Option(
    metavar="DURATION", help="slurm: stop waiting after this long (90s, 45m, 12h; a bare number is minutes); the "
                             "tasks keep running and the same command reattaches.", show_default=False)]
TestOnlyOpt = Annotated[bool, typer.Option(
    "--test-only", help="With --dry-run --executor slurm: run `sbatch --test-only` on the array and print what "
                        "SLURM says.")]
RetrainStaleOpt = Annotated[bool, typer.Option(
    "--retrain-stale", help="Retrain from step 0 the runs trained by other code than this (--dry-run lists them; "
                            "runs of unknown code are kept).")]


def sweep(
    experiments: ExperimentsOpt = None,
    profile: ProfileOpt = None,
    params: ParamsFile = PARAMS,
    stage: StageOpt = None,
    executor: ExecutorOpt = None,
    workers: WorkersOpt = None,
    runs_per_gpu: RunsPerGpuOpt = None,
    ensemble: EnsembleOpt = None,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
    verbose: VerboseOpt = False,
    list_: Annotated[bool, typer.Option("--list", help="List the experiments and exit.")] = False,
    partition: PartitionOpt = None,
    gpus_per_task: GpusPerTaskOpt = None,
    cpus_per_task: CpusPerTaskOpt = None,
    mem_gb: MemGbOpt = None,
    timeout_min: TimeoutMinOpt = None,
    gres: GresOpt = None,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="slurm: submit and return without waiting.")] = False,
    timeout: TimeoutOpt = None,
    test_only: TestOnlyOpt = False,
    retrain_stale: RetrainStaleOpt = False,
    json_out: JsonOpt = False,
):
    """Run the grid of one or more experiments of a profile: each run trained (or resumed, or
    skipped when finished with the same config) and evaluated, in parallel. A failed run does
    not stop the others; the sweep then exits non-zero naming each and its log."""
    from ..sweep import SweepOptions
    from ..sweep.packing import parse_k
    from ..common.stages.experiments import EXPERIMENTS, experiments_to_run

    if list_:
        for e in EXPERIMENTS.values():
            echo_hanging(f"{e.name:<10} {e.stage:<10} ", e.about)
        return
    names = experiments_to_run(experiments, stage)
    name = active_profile(params, profile)
    slurm = {"partition": partition, "gpus_per_task": gpus_per_task, "cpus_per_task": cpus_per_task, "mem_gb": mem_gb,
             "timeout_min": timeout_min, "gres": gres}
    opts = SweepOptions(executor=executor, workers=workers, runs_per_gpu=runs_per_gpu, force=force, dry_run=dry_run,
                        wait=not no_wait, slurm=slurm, timeout=timeout, test_only=test_only,
                        retrain_stale=retrain_stale, ensemble=parse_k(ensemble))
    outcomes = _run_or_stop(params, name, names, opts)
    if dry_run:
        _print_plan(params, name, outcomes, retrain_stale, json_out, verbose, opts.ensemble)
    elif json_out:
        typer.echo(json.dumps([{"run": o.job.label, "status": o.status, "seconds": o.seconds, "result": o.result}
                               for o in outcomes]))



def _run_or_stop(params: Path, name: str, names: list[str], opts) -> list:
    """``run_sweep``'s outcomes; Ctrl-C stops the workers and exits 130 in one line saying what is kept."""
    from ..sweep import run_sweep

    try:
        return run_sweep(params, name, names, opts)
    except KeyboardInterrupt:
        err = PosrnnError("interrupted: the workers were stopped; finished runs are kept and unfinished ones resume "
                          "from their last checkpoint when you run the same command again")
        err.exit_code = 130
        raise err from None

def _print_plan(params: Path, name: str, outcomes: list, retrain_stale: bool, json_out: bool, verbose: bool = False,
                ensemble: Optional[int] = None) -> None:
    """A dry run's plan: what would happen to the runs (each, with --verbose), the disk their
    checkpoints take and the estimated compute, wrapped to 100 columns (as JSON with --json)."""
    from ..common.settings.profiles import load_profile
    from ..measure import cost
    from ..sweep.storage import summary

    jobs = [o.job for o in outcomes]
    disk, est = summary(jobs)
    rate = cost.profile_rate(load_profile(params, name), jobs=jobs)
    compute, secs = cost.summary(jobs, rate, name, ensemble)
    if json_out:
        typer.echo(json.dumps([{"run": o.job.label, "would": o.status, "dir": o.job.run_dir,
                                "code": o.result.get("code"),
                                "checkpoints_kept": est[o.job.label].checkpoints if est[o.job.label] else 0,
                                "disk_bytes": est[o.job.label].bytes if est[o.job.label] else 0,
                                "estimated_compute_s": secs[o.job.label], "estimate_source": rate.source,
                                "estimate_device": rate.device,
                                **({"pack": o.result["pack"]} if "pack" in o.result else {})}
                               for o in outcomes]))
        return
    whats = [f"wait (task {o.log} in flight)" if o.status == "in flight"
             else _would(o.status, o.result.get("code"), retrain_stale) for o in outcomes]
    if verbose:
        from rich.table import Table

        t = Table(title=f"sweep plan: profile {name}, {len(outcomes)} run(s)")
        for col in ("run", "would", "directory"):
            t.add_column(col, overflow="fold")
        for o, what in zip(outcomes, whats):
            t.add_row(o.job.label, what, o.job.run_dir)
        console().print(t)
    counts: dict[str, int] = {}
    for what in whats:
        counts[what] = counts.get(what, 0) + 1
    _echo_wrapped(f"sweep plan: profile {name}, {len(outcomes):,} run(s)"
                  + ("" if verbose else " (--verbose lists each run, --json gives every field)"))
    for what, n in counts.items():
        _echo_wrapped(f"  {n:>6,} {what}")
    for o in outcomes:
        if o.result.get("missing_data"):
            _echo_wrapped(f"  the LM's data: {o.result['missing_data']}")
    _print_packing(outcomes, verbose, rate.model is None)
    _echo_wrapped(disk)
    _echo_wrapped(compute)


WIDTH = 100  # the dry run's summary fits this many columns


def _echo_wrapped(text: str) -> None:
    """Each line of ``text`` wrapped at word boundaries to ``WIDTH`` columns, continued lines
    indented under their own."""
    import textwrap

    for line in text.splitlines():
        indent = " " * (len(line) - len(line.lstrip(" ")) + 4)
        typer.echo(textwrap.fill(line, WIDTH, subsequent_indent=indent, break_on_hyphens=False) if line else line)


def _print_packing(outcomes: list, verbose: bool, counts: bool = True) -> None:
    """The packing of a dry run with ``--ensemble`` K > 1 (``sweep.packing``): each ensemble with
    --verbose; the counts only where the compute estimate does not state them (a CPU's)."""
    from ..sweep.packing import Pack, describe

    seen, packs = set(), []
    for o in outcomes:
        p = o.result.get("pack")
        if p is not None and p["runs"][0] not in seen:
            seen.add(p["runs"][0])
            packs.append(Pack([x.job for x in outcomes if x.job.label in p["runs"]], p["solo_reason"], p.get("note")))
    for line in describe(packs, each=verbose) if packs and (verbose or counts) else []:
        _echo_wrapped(line)


def _would(state: str, code: Optional[str], retrain_stale: bool) -> str:
    if code == "other" and retrain_stale:
        return "retrain (trained by other code)"
    what = {"new": "train", "resume": "resume", "done": "skip (finished)",
            "different": "refuse (different config; --force replaces)", "run": "run"}[state]
    note = {"other": "trained by other code; --retrain-stale retrains",
            "unknown": "trained by unknown code"}.get(code or "")
    if not note:
        return what
    return f"{what[:-1]}; {note})" if what.endswith(")") else f"{what} ({note})"


profile_app = typer.Typer(help="Profiles: which sizes of the pipeline `dvc repro` runs (list, use).",
                          no_args_is_help=True)


@profile_app.command("list", short_help="The profiles; * marks the active one.")
@cli_errors
def profile_list(params: ParamsFile = PARAMS, json_out: JsonOpt = False):
    """The profiles of the params file; the active one is what `dvc repro` runs."""
    from ..common.settings.profiles import describe

    rows = describe(params)
    if json_out:
        typer.echo(json.dumps(rows))
        return
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:
        echo_hanging(f"{'*' if r['active'] else ' '} {r['name']:<{width}}  device {r['device']:<5} ", r["about"])


@profile_app.command("use", short_help="Make a profile the one dvc repro runs.")
@cli_errors
def profile_use(
    names: Annotated[List[str], typer.Argument(
        metavar="PROFILE", autocompletion=complete_profiles, help="Profile(s) to make active, e.g. lite (or lite "
                                                                  "micro).", show_default=False)],
    params: ParamsFile = PARAMS,
):
    """Make a profile active: rewrite the `profile:` line of params.yaml and nothing else.
    Each profile keeps its own runs, results, figures and dvc.lock entries, so switching back
    finds it up to date."""
    from ..common.settings.profiles import use_profile

    line = use_profile(params, names)
    typer.echo(f"{params}: {line}  (now: dvc repro)")


def aggregate(
    runs: Annotated[Path, typer.Argument(
        metavar="DIR", help="A profile's run root, e.g. runs/lite.", show_default=False)],
    out: Annotated[Path, typer.Option(
        "--out", metavar="DIR", help="Directory for the <experiment>.csv tables, e.g. results/lite/tables.",
        show_default=False)],
    metrics: Annotated[Optional[Path], typer.Option(
        "--metrics", metavar="DIR", help="Directory for <experiment>.json headline numbers. [default: OUT/../metrics]",
        show_default=False)] = None,
    curves: Annotated[Optional[Path], typer.Option(
        "--curves", metavar="DIR", help="Directory for <experiment>.csv training curves. [default: OUT/../curves]",
        show_default=False)] = None,
    experiment: Annotated[Optional[List[str]], typer.Option(
        "--experiment", metavar="NAME", autocompletion=complete_experiments,
        help="Only these experiments. [default: all present]", show_default=False)] = None,
    resamples: Annotated[int, typer.Option(metavar="N", help="Bootstrap resamples (paper: 10,000).")] = 10_000,
    json_out: JsonOpt = False,
):
    """Pool every cell's seeds, with 95% bootstrap CIs: one table per experiment.

    Reads only the result files the sweeps wrote (docs/papers.md, Metrics)."""
    from ..analysis.aggregate import aggregate as run

    if not 10 <= resamples <= 10**6:
        raise PosrnnError(f"--resamples must lie in 10 … 1,000,000, got {resamples}")
    tables = run(runs, out, metrics_dir=metrics, curves_dir=curves, experiments=experiment or None,
                 n_resamples=resamples)
    if not tables:
        raise PosrnnError(f"no evaluated runs under {runs}; run the sweeps first (posrnn sweep, or dvc repro)")
    if json_out:
        typer.echo(json.dumps({k: len(v) for k, v in tables.items()}))
    else:
        for name, rows in tables.items():
            typer.echo(f"{name}: {len(rows)} rows → {Path(out) / (name + '.csv')}")


def plot(
    results: Annotated[Path, typer.Argument(
        metavar="DIR", help="The aggregated tables, e.g. results/lite/tables.", show_default=False)],
    out: Annotated[Path, typer.Option(
        "--out", metavar="DIR", help="Directory for the figures, e.g. figures/lite.", show_default=False)],
):
    """Draw every figure whose table exists (Fig. 2, dual-frequency grid, stability, PE forms,
    double vanilla, vocabulary extension, length sweep, LM table)."""
    from ..analysis.plots import draw_all

    if not Path(results).is_dir():
        what = "is a file, not a directory" if Path(results).exists() else "does not exist"
        raise PosrnnError(f"{results} {what}; pass the tables directory `posrnn aggregate` wrote")
    drawn = draw_all(results, out)
    if not drawn:
        raise PosrnnError(f"no tables in {results} to draw; run `posrnn aggregate` first")
    for p in drawn:
        typer.echo(str(p))


def _power_of(params: Path, name: Optional[str]) -> Optional[dict]:
    """The ``power:`` section of profile ``name`` in ``params``, if it was stated before the
    profile's results (``scorecard.design``); None otherwise, or with no such profile or section."""
    from ..analysis.scorecard.design import design_as_stated
    from ..common.settings.profiles import profiles_of, read_params

    if name is None or not Path(params).is_file():
        return None
    prof = profiles_of(read_params(params), params).get(name)
    power = prof.get("power") if isinstance(prof, dict) else None
    return design_as_stated(power, name, Path(params).resolve().parent, Path(params).name)[0]


# the options of `posrnn scorecard`
ScorecardProfileOpt = Annotated[Optional[str], typer.Argument(
    metavar="NAME", autocompletion=complete_profiles, help="Profile whose results to score. [default: the active "
                                                           "one]", show_default=False)]
ResultsOpt = Annotated[Optional[Path], typer.Option(
    "--results", metavar="DIR", help="The aggregated tables. [default: results/PROFILE/tables]",
    show_default=False)]
OutOpt = Annotated[Optional[Path], typer.Option(
    "--out", metavar="DIR", help="Also write scorecard.md, scorecard.json and seeds.md into this directory.",
    show_default=False)]
SeedsOpt = Annotated[bool, typer.Option(
    "--seeds",
    help="Print the seeds each open claim needs (inconclusive, underpowered) instead of the verdicts.")]
ReadmeOpt = Annotated[Optional[Path], typer.Option(
    "--page", "--readme", metavar="FILE", help="Rewrite this profile's blocks in FILE (docs/results.md, "
                                               "README.md: its results block, its findings) from the scorecard.",
    show_default=False)]
DetailOpt = Annotated[bool, typer.Option(
    "--detail", help="Each claim in full (its regime, measurement, reasons) instead of one line a claim.")]
ClaimOpt = Annotated[Optional[list[str]], typer.Option(
    "--claim", metavar="ID", help="Only this claim, in full (repeat for several; with --json, its row; not with "
                                  "--out or --page, which hold every claim).",
    show_default=False)]
AcrossOpt = Annotated[bool, typer.Option(
    "--across", help="Each claim's verdict in every profile with a committed scorecard, one line a claim, "
                     "disagreements marked (with --page: the page's blocks built across profiles, the across "
                     "table, the README's answer and its count line).")]


def scorecard(
    profile: ScorecardProfileOpt = None,
    results: ResultsOpt = None,
    out: OutOpt = None,
    seeds: SeedsOpt = False,
    readme: ReadmeOpt = None,
    params: ParamsFile = PARAMS,
    quiet: Annotated[bool, typer.Option("--quiet", help="Print nothing (with --out).")] = False,
    detail: DetailOpt = False,
    claim: ClaimOpt = None,
    across: AcrossOpt = False,
    json_out: JsonOpt = False,
):
    """Every claim of the papers against what a profile measured, with a verdict.

    One line a claim: its id, the verdict at the papers' regime and the indication off it, and
    the seeds an open verdict needs. --detail (or scorecard.md, with --out) adds the claim, the
    measured values with their 95% CIs and seeds, and the reasons; the tests are declared in
    advance in posrnn_cli/analysis/claims.yaml."""
    from ..analysis.report import score_profile

    if across:
        return _across(params, readme, quiet, json_out)
    _claims_only_viewed(claim, out, readme)
    name, folder = _scorecard_tables(params, profile, results)
    label = name or Path(folder).parent.name
    rows, changed = score_profile(folder, label, _power_of(params, name), out, readme)
    if claim:
        rows, detail = _only_claims(rows, claim), True
    if changed is not None and not quiet:
        typer.echo(f"{readme}: results blocks for {label} "
                   f"{'rewritten: ' + ', '.join(changed) if changed else 'already up to date'}")
    if quiet:
        return
    _show_scorecard(rows, label, out, seeds, json_out, detail, bool(claim))


def _scorecard_tables(params: Path, profile: Optional[str], results: Optional[Path]) -> tuple[Optional[str], Path]:
    """The profile a scorecard scores (None: only ``--results`` named) and its tables' directory,
    refused in one line when it is not there."""
    name = profile if profile is not None or results is not None else active_profile(params, None)
    folder = results or Path("results") / name / "tables"
    if results is None and not Path(folder).is_dir():
        check_profile_name(params, name)
    if not Path(folder).is_dir():
        what = "is a file, not a directory" if Path(folder).exists() else "does not exist"
        raise PosrnnError(f"{folder} {what}; pass the tables of a profile (results/<profile>/tables) after dvc repro")
    return name, folder


def _show_scorecard(rows: list[dict], label: str, out: Optional[Path], seeds: bool, json_out: bool, detail: bool,
                    some: bool) -> None:
    """The scorecard as asked: the seeds open claims need, JSON, each claim in full (``some``: only
    those asked for, without the counts), or one line a claim."""
    from ..analysis.report import scorecard_lines, seeds_markdown
    from ..analysis.scorecard import scorecard_rich_table

    if seeds:
        typer.echo(seeds_markdown(rows, label), nl=False)
    elif json_out:
        typer.echo(json.dumps(rows))
    elif detail:
        console().print(scorecard_rich_table(rows, counts=not some))
    else:
        where = f"results/{label}/scorecard/scorecard.md" if out is None else str(Path(out) / "scorecard.md")
        console().print(scorecard_lines(rows, f"Each claim in full: posrnn scorecard {label} --detail, or {where}.",
                                        profile=label))


def _claims_only_viewed(claim: Optional[list[str]], out: Optional[Path], page: Optional[Path]) -> None:
    """A view of some claims is never written where the whole scorecard goes (``--out``, ``--page``)."""
    if claim and (out is not None or page is not None):
        option = "--out" if out is not None else "--page"
        raise PosrnnError(f"--claim shows some claims only, and {option} writes where the whole scorecard goes (every "
                          f"claim); drop --claim to write it, or drop {option} to view those claims")


def _only_claims(rows: list[dict], ids: list[str]) -> list[dict]:
    """The scored rows of the claims ``ids`` asks for, in its order; an unknown id is refused in one
    line with the nearest id."""
    from ..common.errors import did_you_mean

    by_id = {r["id"]: r for r in rows}
    for i in ids:
        if i not in by_id:
            raise PosrnnError(f"no claim {i!r} in posrnn_cli/analysis/claims.yaml{did_you_mean(i, by_id)}; "
                              "`posrnn scorecard` lists every claim's id")
    return [by_id[i] for i in dict.fromkeys(ids)]


def _across(params: Path, page: Optional[Path], quiet: bool, json_out: bool) -> None:
    """``posrnn scorecard --across``: every profile's committed verdict of each claim."""
    from ..analysis.report import across, across_lines, committed_scorecards, update_across_page
    from ..common.settings.profiles import profiles_of, read_params

    names = list(profiles_of(read_params(params), params))
    scored = committed_scorecards(Path(params).resolve().parent, names)
    if page is not None:
        changed = update_across_page(page, scored)
        if not quiet:
            typer.echo(f"{page}: {', '.join(changed) + ' rewritten' if changed else 'already up to date'}")
    if quiet:
        return
    if json_out:
        typer.echo(json.dumps(across(scored)))
    else:
        console().print(across_lines(scored))


def dvc_yaml(
    out: Annotated[Path, typer.Option("--out", metavar="FILE", help="Where to write it.")] = Path("dvc.yaml"),
    check: Annotated[bool, typer.Option("--check", help="Compare instead of writing: exit 1 when it differs.")] = False,
):
    """Write dvc.yaml from the experiment registry (posrnn_cli/common/stages/experiments.py): each stage's
    command and outputs, and the aggregate's inputs; and numerics.json beside it, the declared
    numerics versions its stages read. --check compares instead (as CI does). Either file is
    replaced only where posrnn wrote it (one refusal writes neither)."""
    from ..common.files.io import write_owned_together
    from ..common.numerics import check_numerics_table, numerics_table, numerics_written
    from ..common.stages.pipeline_yaml import NUMERICS_FILE, check_dvc_yaml, dvc_yaml as text, written_by_us

    table = out.parent / NUMERICS_FILE
    if check:
        why = check_dvc_yaml(out) or check_numerics_table(table)
        if why is not None:
            raise PosrnnError(why)
        typer.echo(f"{out} and {table} are what the experiment registry and the declared versions give")
        return
    files = {out: text().encode(), table: numerics_table().encode()}
    write_owned_together(files, "--out", recognise=lambda data: written_by_us(data) or numerics_written(data))
    typer.echo(f"wrote {out} from the experiment registry and {table} from the declared numerics versions")


def register(app: typer.Typer) -> None:
    app.command(short_help="Run the grids of a profile's experiments, in parallel.")(cli_errors(sweep))
    app.add_typer(profile_app, name="profile", short_help="List the profiles, or choose the one dvc repro runs.")
    app.command(short_help="One table per experiment: each seed's value, 95% CIs over seeds.")(cli_errors(aggregate))
    app.command(short_help="Draw the figures from the aggregated tables.")(cli_errors(plot))
    app.command(short_help="Each claim of the papers: what was measured, the verdict.")(cli_errors(scorecard))
    app.command("dvc-yaml", short_help="Write dvc.yaml and numerics.json (or --check them).")(
        cli_errors(dvc_yaml))
