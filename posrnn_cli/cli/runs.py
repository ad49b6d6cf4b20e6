"""``posrnn train | eval | compare | stability | extend-vocab``: one run at a time (``bench`` lives in ``bench``).

Thin wrappers: parse, call one library function (imported inside the command, so ``--help``
never loads torch), print a table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..common import catalog
from ..common.errors import PosrnnError
from .common import (DeviceOpt, JsonOpt, ParamsOpt, SetOpt, ThreadsOpt, advise_on_interrupt, cli_errors, console,
                     echo_hanging, given_keys, listing, note, print_wrapped, threads_for_run)
from .options import config_options, run_options

TRAIN_HELP = "\n\n".join([
    "Train one model on one task (the papers' recipe) into a run directory.",
    listing("Tasks (--task):", catalog.TASKS),
    listing("Models (--model):", catalog.CORES),
    "A core from outside posrnn: --model with an installed plugin's name or its module:factory (posrnn cores lists "
    "them; docs/plugins.md).",
    listing("Positional encodings (--pe):", catalog.PE_FORMS),
    "Defaults are the paper's (params.yaml); --resume continues a run from its saved config, and a "
    "larger --iterations trains a finished run longer (under the cosine schedule of the new total).",
])


@run_options("task", "model", "pe", "pe_mode", "vocab_size", "length", "hidden_size", "embed_size", "min_length",
             "max_length", "rarity", "delay", "dim", "pairs", "filler", "autoregressive", "layers", "heads",
             "state_size",
             "conv", "block", "iterations", "batch_size", "lr", "warmup", "seed", "device", "checkpoint_every",
             "log_every", "threads")
def train(
    out: Annotated[Path, typer.Option(
        "--out", metavar="DIR", help="Run directory: config.yaml, metrics.jsonl, checkpoints/.", show_default=False)],
    params: ParamsOpt = None,
    set_: SetOpt = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the run in --out from its last checkpoint.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace whatever run --out already holds.")] = False,
    stop_after: Annotated[Optional[int], typer.Option(
        metavar="N", help="Stop after N iterations in this invocation (checkpointed).", show_default=False)] = None,
    json_out: JsonOpt = False,
    opts: Optional[dict] = None,
):
    from ..common.settings.config import resolve_config
    from ..common.plugins import check_core_name
    from ..common.files.rundir import read_run_config
    from ..engine.lock import restore_before_reading
    from ..engine.paths import check_out_dir_of_run

    length, max_length = opts["length"], opts["max_length"]
    if length is not None and max_length is not None and length != max_length:
        raise PosrnnError(f"--length ({length}) and --max-length ({max_length}) name the same setting; pass one")
    if resume and Path(out).is_dir():
        restore_before_reading(out)  # a --force killed midway: continue the old run, never the replacement
    saved = read_run_config(out) if resume and Path(out).is_dir() else None
    options = config_options(opts)
    cfg = resolve_config(params, options, set_, base=saved)  # --resume: the saved run's config, then what is given
    if (opts["vocab_size"] is not None and cfg.task.name in catalog.TASKS
            and not catalog.TASKS[cfg.task.name].vocabulary):
        raise PosrnnError(f"the {cfg.task.name} task has no vocabulary (its tokens are vectors); drop --vocab-size "
                          "and set --dim")
    check_out_dir_of_run(out)  # what needs no tensor is refused before torch loads
    check_core_name(cfg.model.name)  # a plugin's module is imported here, a built-in name reads nothing
    from ..engine.train import train as train_run

    with advise_on_interrupt(out, None if force else f"posrnn train --out {out} --resume"):
        summary = train_run(cfg, out, resume=resume, force=force, stop_after=stop_after, progress=not json_out,
                            on_start=lambda header: note(header, json_out), given=given_keys(options, set_, params))
    if json_out:
        typer.echo(json.dumps(summary))
        return
    last = summary["last"]
    status = "finished" if summary["finished"] else "stopped"
    console().print(
        f"[bold]{status}[/] at step {summary['step']}/{summary['iterations']} in {summary['seconds']:.1f}s "
        f"({summary['it_per_s']:.1f} it/s, {summary['n_parameters']:,} parameters) → {out}"
        + (f"  loss {last['loss']:.4f} acc {last['accuracy']:.3f}" if last else "")
    )


def _measure(result: dict) -> str:
    """What an evaluation result reports (the catalogue's ``measure`` of its task)."""
    return catalog.TASKS[result["task"]].measure if result.get("task") in catalog.TASKS else "accuracy"


#: the setting columns of the evaluation table (a line under it names those every run shares)
_SETTING = ("step", "task", "model", "pe", "V", "L")
#: abbreviated headers, explained under the table
_LEGEND = {"V": "V vocabulary", "L": "L length", "DL": "DL Damerau–Levenshtein distance"}


def _eval_cells(r: dict) -> dict:
    """One evaluation as table cells: its setting, then its scores."""
    setting = {"step": str(r["step"]), "task": r.get("task", "?"), "model": r.get("model", "?"), "pe": r.get("pe", "?"),
               "V": str(r.get("vocab_size", "-")), "L": str(r.get("length", "-"))}
    if _measure(r) == "perplexity":
        return {**setting, "task": "lm", "V": "-", "perplexity": f"{r['perplexity']:.2f}",
                "token NLL": f"{r['token_nll']:.4f}",
                "tokens": f"{r['n_tokens']:,}"}
    if "token_accuracy" not in r:  # the continuous task: cosine
        return {**setting, "V": "-", "cosine": f"{r['cosine']:.3f}",
                "95% CI": "–".join(f"{c:.3f}" for c in r["cosine_ci"])}
    ci = r.get("token_accuracy_ci", [float("nan")] * 2)
    return {**setting, "token acc": f"{r['token_accuracy']:.3f}", "95% CI": f"{ci[0]:.3f}–{ci[1]:.3f}",
            "seq acc": f"{r['sequence_accuracy']:.3f}", "DL": f"{r['damerau_levenshtein']:.2f}"}


def _eval_table(results: list[dict], title: str):
    """The runs side by side in 80 columns: the settings all runs share go to a line under the
    table, the rest are columns; run names fold (never cut), intervals stay on one line."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    cells = [_eval_cells(r) for r in results]
    heads = list(dict.fromkeys(h for c in cells for h in c))
    shared = [h for h in heads if h in _SETTING and len({c.get(h, "") for c in cells}) == 1]
    table = Table(title=title, title_justify="left")
    table.add_column("run", overflow="fold")
    for h in (h for h in heads if h not in shared):
        table.add_column(h, justify="left" if h in ("task", "model", "pe") else "right", no_wrap=True)
    for r, c in zip(results, cells):
        table.add_row(r["label"], *(c.get(h, "") for h in heads if h not in shared))
    notes = ["all runs: " + ", ".join(f"{h} {cells[0][h]}" for h in shared)] if shared and len(cells) > 1 else \
        [", ".join(f"{h} {cells[0][h]}" for h in shared)] if shared else []
    legend = [_LEGEND[h] for h in heads if h in _LEGEND]
    if legend:
        notes.append("; ".join(legend))
    return Group(table, *(Text(n, style="dim") for n in notes))


def eval_cmd(
    path: Annotated[Path, typer.Argument(
        metavar="RUN", help="A run directory (its latest checkpoint) or a checkpoint file.", show_default=False)],
    step: Annotated[Optional[int], typer.Option(
        metavar="N", help="Evaluate the checkpoint saved at this step instead of the latest.",
        show_default=False)] = None,
    device: DeviceOpt = "auto",
    batch_size: Annotated[Optional[int], typer.Option(
        metavar="N", help="Evaluation batch size. [default: the run's]", show_default=False)] = None,
    threads: ThreadsOpt = None,
    json_out: JsonOpt = False,
):
    """Score a run on its held-out test set (token / sequence accuracy, Damerau–Levenshtein
    distance with 95% bootstrap CIs; perplexity for a language model). Writes RUN/eval.json."""
    from ..engine.paths import check_eval_batch, resolve_checkpoint

    check_eval_batch(batch_size)  # what needs no tensor, before torch loads
    resolve_checkpoint(path, step)
    from ..engine.evaluate import evaluate

    threads_for_run(threads, path)
    result = evaluate(path, step=step, device=device, batch_size=batch_size)
    if json_out:
        typer.echo(json.dumps(result))
    else:
        console().print(_eval_table([{**result, "label": Path(result["run_dir"]).name}], "held-out evaluation"))


def _evaluated(run: Path, device: str) -> tuple[dict, object]:
    """A run's evaluation of its latest checkpoint (the cached one when current) and its config."""
    from ..engine.paths import resolve_checkpoint
    from ..common.files.rundir import read_run_config
    from ..engine.evaluate import cached_eval, evaluate

    ckpt, run_dir = resolve_checkpoint(run)
    cfg = read_run_config(run_dir)
    hit = cached_eval(run_dir, ckpt)
    if hit is not None and not (Path(run_dir) / "eval_sequences.npz").is_file():
        hit = None  # its per-sequence scores are gone: evaluate again
    r = dict(hit) if hit is not None else evaluate(run, device=device)
    r["label"] = str(run)  # the run as named here, never a cached name
    r["run_dir"] = str(run_dir)
    if cfg is not None:
        r.update({"task": cfg.task.name, "model": cfg.model.name, "pe": cfg.model.pe,
                  "vocab_size": cfg.task.vocab_size, "length": cfg.task.length})
    return r, cfg


def _title(results: list[dict], configs: list) -> str:
    from ..common.settings.config import config_diff

    differ = sorted({k for a in configs for b in configs for k in config_diff(a, b) if k != "train.seed"})
    if len({r.get("task") for r in results}) > 1:
        return "runs of different tasks"
    if differ:
        return "runs differing in " + ", ".join(differ[:4]) + (" …" if len(differ) > 4 else "")
    return "runs with the same config" + (" (different seeds)" if len({c.train.seed for c in configs}) > 1 else "")


def _seeds_of(side_a: list[Path], side_b: list[Path]) -> list[tuple[int, int, int]]:
    """(seed, index in A, index in B) of each pair of runs, from their configs."""
    from ..analysis.compare import pair_by_seed
    from ..engine.paths import resolve_checkpoint
    from ..common.files.rundir import read_run_config

    def seeds(side):
        out = []
        for i, run in enumerate(side):
            cfg = read_run_config(resolve_checkpoint(Path(run))[1])
            if cfg is None:
                raise PosrnnError(f"{run} has no config.yaml, so its seed is unknown; compare runs that posrnn train "
                                  "wrote")
            out.append((cfg.train.seed, i))
        return out

    return pair_by_seed(seeds(side_a), seeds(side_b))


def _distinct_runs(results: list[dict]) -> None:
    """Refuse two compared run directories that hold one checkpoint (a run and a copy of it,
    eval.json and all): their difference is none by construction, not a measurement."""
    import os

    seen: dict = {}
    for r in results:
        sha, where = r.get("checkpoint_sha256"), os.path.realpath(r["run_dir"])
        if sha in seen and seen[sha][1] != where:  # one run named twice is itself, not a copy
            raise PosrnnError(f"{r['label']} and {seen[sha][0]} were scored from one checkpoint (a run and a copy of "
                              "it): their difference measures nothing; compare runs trained apart")
        seen.setdefault(sha, (r["label"], where))


def _differences(a: list[tuple[dict, object]], b: list[tuple[dict, object]]) -> list[dict]:
    """Without ``vs`` (``b`` empty): each run after the first minus the first, on the same test
    sequences. With ``vs``: side B minus side A, paired by seed."""
    from ..analysis import compare as cmp
    from ..common.settings.config import config_diff

    _distinct_runs([r for r, _ in a + b])

    def one(ra, ca, rb, cb, diff):
        score = cmp.score_of(ra["task"])
        fallback = ("A", "B") if b else (ra["label"], rb["label"])
        keys = [k for k in config_diff(ca, cb) if k != "train.seed"] if ca and cb else []
        names = cmp.side_names(keys, ca, cb, fallback)
        if diff["over"] == "sequences" and ca and cb:  # one run a side: its seeds bound what the interval covers
            diff = {**diff, "seeds": [ca.train.seed, cb.train.seed]}
        out = {**diff, "a": ra["label"], "b": rb["label"], "score": score.key,
               "meaning": cmp.meaning(diff, score, *names)}
        # e.g. one side resumed to a larger budget, or trained from another seed: not one setting's effect
        warning = cmp.differ_warning(keys, diff.get("seeds") if diff["over"] == "sequences" else None)
        if warning:
            out["warning"] = warning
        return out

    if not b:
        (r0, c0), out = a[0], []
        for r, c in a[1:]:
            if c0 is None or c is None or not cmp.paired_with(c0.to_dict()["task"], c.to_dict()["task"]):
                out.append({"a": r0["label"], "b": r["label"], "meaning": f"{r['label']} and {r0['label']} scored "
                            f"different test sets (their task settings differ): no paired difference"})
                continue
            d = cmp.per_sequence(cmp.sequence_scores(r0["run_dir"], r0), cmp.sequence_scores(r["run_dir"], r))
            out.append(one(r0, c0, r, c, d))
        return out
    pairs = _seeds_of([r["run_dir"] for r, _ in a], [r["run_dir"] for r, _ in b])
    if len({cmp.score_of(r["task"]).key for r, _ in a + b}) > 1:
        raise PosrnnError("the runs measure different things (e.g. accuracy and perplexity); compare runs of one task")
    mean = lambda rc: float(cmp.sequence_scores(rc[0]["run_dir"], rc[0]).mean())
    d = cmp.per_seed([s for s, _, _ in pairs], [mean(a[i]) for _, i, _ in pairs], [mean(b[j]) for _, _, j in pairs])
    out = one(a[0][0], a[0][1], b[0][0], b[0][1], d)
    return [{**out, "a": [r["label"] for r, _ in a], "b": [r["label"] for r, _ in b]}]


def compare(
    runs: Annotated[List[str], typer.Argument(
        metavar="RUN", help="Run directories (or quoted globs such as 'runs/x/pe-s*'), each evaluated unless its "
                            "eval.json is current; `A1 A2 vs B1 B2`: several seeds a side, paired by seed.",
        show_default=False)],
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = None,
    json_out: JsonOpt = False,
):
    """Evaluate runs, print them side by side (the title names what differs), and the paired
    difference B − A with its 95% interval and what it means.

    `compare A B`: B − A on the same test sequences (95% paired bootstrap over sequences), for
    these two seeds only; a claim about seeds needs several runs a side:
    `compare A1 A2 A3 vs B1 B2 B3`: B − A per seed (runs paired by train.seed), 95% Student-t
    interval over seeds, as the scorecard reads. More runs without `vs`: each minus the first."""
    from ..analysis.compare import expand

    side_a, side_b = expand(list(runs))
    from ..engine.paths import resolve_checkpoint

    for r in side_a + side_b:  # every run exists and has a checkpoint before torch loads
        resolve_checkpoint(Path(r))
    if side_b:  # the seeds pair before anything is evaluated
        _seeds_of(side_a, side_b)
    if side_a:  # threads as eval sets them, sized by the first run
        threads_for_run(threads, Path(side_a[0]))
    a = [_evaluated(r, device) for r in side_a]
    b = [_evaluated(r, device) for r in side_b]
    diffs = _differences(a, b) if len(a) + len(b) > 1 else []
    results = [r for r, _ in a + b]
    if json_out:
        if b:
            typer.echo(json.dumps({"a": [r for r, _ in a], "b": [r for r, _ in b], "difference": diffs[0]}))
        else:
            for r, d in zip(results[1:], diffs):
                r["difference"] = d  # each run after the first: minus the first
            typer.echo(json.dumps(results))
        return
    c = console()
    c.print(_eval_table(results, _title(results, [cfg for _, cfg in a + b if cfg is not None])))
    for d in diffs:
        _print_difference(c, d)


def _print_difference(c, d: dict) -> None:
    if d.get("warning"):
        print_wrapped(c, f"warning: {d['warning']}", style="yellow")
    if "mean" not in d:
        print_wrapped(c, d["meaning"])
        return
    what = f"{d['interval']}" + (": " + ", ".join(f"seed {s} {v:+.3f}" for s, v in zip(d["seeds"], d["by_seed"]))
                                 if d["over"] == "seeds" else "")
    print_wrapped(c, d["meaning"], style="bold")
    print_wrapped(c, f"({what})", style="dim", indent="  ")


# the options of `posrnn stability`
RunOpt = Annotated[Path, typer.Argument(
    metavar="RUN", help="A run directory (every saved checkpoint) or a checkpoint file.", show_default=False)]
CheckpointOpt = Annotated[Optional[int], typer.Option(
    "--checkpoint", metavar="N", help="Analyse only the checkpoint saved at this step.",
    show_default=False)]
TripletsOpt = Annotated[int, typer.Option(
    metavar="N", help="Triplets (x,s), (x,s'), (x',s) per condition (paper: 1,024).")]
ChunkSizeOpt = Annotated[int, typer.Option(metavar="N", help="Sequences per batched Jacobian pass (bounds memory).")]
SeedOpt = Annotated[int, typer.Option(
    metavar="N", help="Seed of the triplets (the same triplets at every checkpoint).")]
TargetPositionOpt = Annotated[int, typer.Option(
    "--target-position", metavar="T", help="The target's position t in 1 … L − 1: t − 1 disturbants shared by "
                                           "each triplet before it, J = ∂h_2L/∂z_t (1: the RNNs' set-up; the "
                                           "S4D's in 002 §4.3: 23).")] 
OutOpt = Annotated[Optional[Path], typer.Option(
    "--out", metavar="FILE", help="CSV to write. [default: RUN/stability.csv]", show_default=False)]
PlotOpt = Annotated[bool, typer.Option("--plot", help="Also draw the figure beside the CSV (the paper's Fig. 5).")]


def stability(
    run: RunOpt,
    checkpoint: CheckpointOpt = None,
    triplets: TripletsOpt = 1024,
    chunk_size: ChunkSizeOpt = 64,
    seed: SeedOpt = 0,
    target_position: TargetPositionOpt= 1,
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = None,
    out: OutOpt = None,
    plot: PlotOpt = False,
    json_out: JsonOpt = False,
):
    """Gradient stability over training (003 §4.3): for every checkpoint, the Jacobians
    ∂h_2L/∂z_t of triplets sharing the target or the suffix, compared row-wise; per (target
    kind × disturbant kind) for dual-frequency runs. Writes a CSV (mean and 95% CI)."""
    from ..engine.paths import check_stability_out, resolve_checkpoint

    run_dir = resolve_checkpoint(run, checkpoint)[1]
    csv_path = check_stability_out(out if out is not None else run_dir / "stability.csv", run, run_dir)
    if plot:
        check_stability_out(csv_path.with_suffix(".png"), run, run_dir, header=b"\x89PNG")
    threads_for_run(threads, run)
    from ..engine.stability import write_stability  # torch: after what needs no tensor was checked

    c = console()

    def tick(step, seconds):
        if not json_out:
            c.print(f"checkpoint {step}: {seconds:.1f}s ({3 * triplets / max(seconds, 1e-9):.0f} sequences/s)")

    rows = write_stability(run, run_dir, csv_path, _draw_stability if plot else None, f"posrnn stability {run}",
                           step=checkpoint, n_triplets=triplets, chunk_size=chunk_size, device=device, seed=seed,
                           on_checkpoint=tick, target_position=target_position)
    if json_out:
        typer.echo(json.dumps(rows))
        return
    _stability_table(c, rows, csv_path, target_position)
    _stability_notes(c, run, checkpoint, rows)


def _draw_stability(rows: list[dict], path: Path) -> None:
    from ..analysis.plots import fig_stability  # matplotlib: only when a figure is drawn

    fig_stability(rows, path)


def _stability_table(c, rows: list[dict], csv_path: Path, target_position: int) -> None:
    from rich.table import Table

    at = "" if target_position == 1 else f" (target at t = {target_position})"
    table = Table(title=f"gradient stability{at} → {csv_path}")
    for col in ("step", "condition", "pair", "mean", "95% CI"):
        table.add_column(col, justify="right" if col in ("step", "mean", "95% CI") else "left")
    for r in rows:
        table.add_row(str(r["step"]), r["condition"], r["pair"], f"{r['stability']:.3f}",
                      f"{r['ci_low']:.3f}–{r['ci_high']:.3f}")
    c.print(table)


def _stability_notes(c, run: Path, checkpoint: Optional[int], rows: list[dict]) -> None:
    """What the table leaves out (checkpoints off the schedule) and values that measure nothing."""
    from ..common.catalog import ONE_BY_CONSTRUCTION
    from ..engine.stability import unscheduled_checkpoints

    skipped = unscheduled_checkpoints(run) if Path(run).is_dir() and checkpoint is None else []
    if skipped:
        print_wrapped(c, f"skipped the checkpoints at step {', '.join(map(str, skipped))}: off the run's schedule "
                         f"(taken for the wall clock, a signal or --stop-after); --checkpoint N analyses one")
    if rows and rows[0]["model"] in ONE_BY_CONSTRUCTION:
        print_wrapped(c, f"{rows[0]['model']}'s stability is 1 for every pair by construction (its state Jacobian "
                         f"is diagonal and positive): these values measure nothing about PE")


def extend_vocab(
    run: Annotated[Path, typer.Argument(
        metavar="RUN", help="A trained run directory (its latest checkpoint) or a checkpoint file.",
        show_default=False)],
    extra_vocab: Annotated[int, typer.Option(
        "--extra-vocab", metavar="N", help="How many new ids to add (the reference doubles V).", show_default=False)],
    out: Annotated[Path, typer.Option(
        "--out", metavar="DIR", help="Directory of the extended run (the trained run is never modified).",
        show_default=False)],
    iterations: Annotated[Optional[int], typer.Option(
        metavar="N", help="Iterations training the new parameters. [default: the run's]", show_default=False)] = None,
    seed: Annotated[Optional[int], typer.Option(
        metavar="N", help="Seed of the new rows and the batches. [default: the run's]", show_default=False)] = None,
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = None,
    set_: SetOpt = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted extension in --out.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace whatever run --out already holds.")] = False,
    json_out: JsonOpt = False,
):
    """Vocabulary extension: freeze every trained weight, add N new ids (embedding and output
    rows), train only those on sequences of the combined vocabulary, then test on sequences of
    new ids only (and of old ids only, to show nothing was forgotten). Writes OUT/extend.json."""
    from ..engine.paths import check_extension_out

    check_extension_out(run, extra_vocab, out)  # what needs no tensor, before torch loads
    from ..engine.extend import extend_vocab as run_extension, not_learned

    choice = threads_for_run(threads, run)  # the trained run's size decides
    sets = [f"train.threads={choice.n}", *(set_ or [])]  # an explicit --set still wins
    given = "".join(f" --{k} {v}" for k, v in (("iterations", iterations), ("seed", seed)) if v is not None)
    again = f"posrnn extend-vocab {run} --extra-vocab {extra_vocab}{given} --out {out} --resume"
    with advise_on_interrupt(out, None if force else again):
        r = run_extension(run, extra_vocab, out, iterations=iterations, seed=seed, device=device,
                          force=force, progress=not json_out, sets=sets, resume=resume,
                          on_start=lambda: note(choice.header(), json_out))
    if json_out:
        typer.echo(json.dumps(r))
        return
    _extension_table(r)
    seeded = f" --seed {seed}" if seed is not None else ""
    advice = not_learned(r, f"posrnn extend-vocab {run} --extra-vocab {extra_vocab}{seeded} --out {out}")
    if advice:
        typer.echo(f"warning: {advice}", err=True)


def _extension_table(r: dict) -> None:
    """An extension's scores on each test set, with what each set and column measures."""
    from rich.table import Table

    from ..engine.extend import TEST_SETS

    table = Table(title=f"vocabulary extension: V = {r['vocab_size']} + {r['extra_vocab']} ({r['model']}, "
                        f"pe={r['pe']})")
    for col in ("test set", "token acc", "95% CI", "seq acc", "DL"):
        table.add_column(col, justify="left" if col == "test set" else "right")
    for key, label, _ in TEST_SETS:
        m = r[key]
        table.add_row(label, f"{m['token_accuracy']:.3f}", "–".join(f"{c:.3f}" for c in m["token_accuracy_ci"]),
                      f"{m['sequence_accuracy']:.3f}", f"{m['damerau_levenshtein']:.2f}")
    c = console()
    c.print(table)
    for _, label, about in TEST_SETS:
        c.print(f"  {label}: {about}", highlight=False)
    c.print("  token/seq acc: tokens/sequences right; DL: Damerau–Levenshtein distance", highlight=False)


def cores() -> None:
    """List the model cores --model takes: the built-in ones, then each installed plugin's (its entry
    point of group posrnn.cores loaded; a broken one shows its error). A plugin may also be named by
    its module:factory without being installed (docs/plugins.md)."""
    from ..common.plugins import listed

    for name, about in listed().items():
        echo_hanging(f"  {name}: ", about)


def register(app: typer.Typer) -> None:
    app.command(help=TRAIN_HELP, short_help="Train one model on one task into a run directory.")(cli_errors(train))
    app.command("eval", short_help="Score a run on its held-out test set.")(cli_errors(eval_cmd))
    app.command(short_help="Evaluate several runs and show them side by side.")(cli_errors(compare))
    app.command(short_help="Gradient stability of a run's checkpoints (003 §4.3).")(cli_errors(stability))
    app.command(short_help="List the model cores, built in and plugins (docs/plugins.md).")(cli_errors(cores))
    app.command("extend-vocab",
                short_help="Add ids to a trained run, every trained weight frozen.")(cli_errors(extend_vocab))
