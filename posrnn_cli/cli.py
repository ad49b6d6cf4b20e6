"""The ``posrnn`` command line: thin Typer wrappers over the library functions."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, List, Literal, Optional

import typer
from rich.console import Console
from rich.table import Table

from . import __version__
from .config import resolve_config
from .errors import PosrnnError, cli_errors
from .models import CORES, PE_FORMS, PE_MODES
from .tasks import TASKS

app = typer.Typer(
    help="posrnn — does a positional encoding help a recurrent network? Train, evaluate and analyse "
    "the experiments of Morita's 'Positional Encoding Helps RNNs Handle a Large Vocabulary'.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
if not console.is_terminal:  # piped or captured: don't squeeze tables into 80 columns
    console = Console(width=160)


def _choices(registry: dict) -> str:
    return "; ".join(f"{k}: {getattr(v, 'description', v)}" for k, v in registry.items())


TaskName = Literal[tuple(TASKS)]  # type: ignore[valid-type]
ModelName = Literal[tuple(CORES)]  # type: ignore[valid-type]
PEName = Literal[tuple(PE_FORMS)]  # type: ignore[valid-type]
PEMode = Literal[tuple(PE_MODES)]  # type: ignore[valid-type]

ParamsOpt = Annotated[Optional[Path], typer.Option("--params", help="YAML file with task/model/train sections (e.g. params.yaml); CLI options override it.")]
SetOpt = Annotated[Optional[List[str]], typer.Option("--set", help="Override any config key, e.g. --set model.pe_dim=32 --set train.betas='[0.9,0.999]'. Applied last.")]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", help="auto (CUDA when present), cpu, cuda or cuda:N.")]


def _listing(title: str, registry: dict) -> str:
    """One line per registry entry, ``name: description``, kept as lines by click's ``\\b``."""
    width = max(len(k) for k in registry) + 2
    rows = "\n".join(f"  {k + ':':<{width}} {getattr(v, 'description', v)}" for k, v in registry.items())
    return f"\b\n{title}\n{rows}"


TRAIN_HELP = "\n\n".join([
    "Train one model on one task (SPEC §2 recipe) into a run directory.",
    _listing("Tasks (--task):", TASKS),
    _listing("Models (--model):", CORES),
    _listing("Positional encodings (--pe):", PE_FORMS),
    "Impossible combinations (e.g. --autoregressive with copy, --vocab-size with continuous, dummy with "
    "--pe-mode add) are refused with a one-line reason.",
])


def run_options(**opts) -> dict:
    """CLI option values → dotted config keys (None = not given)."""
    keys = {
        "task": "task.name", "vocab_size": "task.vocab_size", "length": "task.length",
        "model": "model.name", "pe": "model.pe", "pe_mode": "model.pe_mode", "hidden_size": "model.hidden_size",
        "embed_size": "model.embed_size", "iterations": "train.iterations", "batch_size": "train.batch_size",
        "lr": "train.lr", "warmup": "train.warmup", "seed": "train.seed", "device": "train.device",
        "checkpoint_every": "train.checkpoint_every", "log_every": "train.log_every", "threads": "train.threads",
        "min_length": "task.min_length", "max_length": "task.length", "rarity": "task.rarity", "delay": "task.delay",
        "dim": "task.dim", "autoregressive": "task.autoregressive", "layers": "model.layers", "heads": "model.heads",
    }
    return {keys[k]: v for k, v in opts.items() if k in keys and v is not None}


@app.command(help=TRAIN_HELP)
@cli_errors
def train(  # noqa: PLR0913 - one option per config key users reach for
    out: Annotated[Path, typer.Option("--out", help="Run directory: config.yaml, metrics.jsonl, checkpoints/.")],
    task: Annotated[Optional[TaskName], typer.Option(help="Task (listed above). Default: reverse.")] = None,
    model: Annotated[Optional[ModelName], typer.Option(help="Model core (listed above). Default: lstm.")] = None,
    pe: Annotated[Optional[PEName], typer.Option(help="Positional encoding (listed above). Default: sinusoidal.")] = None,
    pe_mode: Annotated[Optional[PEMode], typer.Option(help=f"How PE joins the embedding. {_choices(PE_MODES)}.")] = None,
    vocab_size: Annotated[Optional[int], typer.Option(help="Vocabulary size V (≥ 2). Paper: 32–16,384.")] = None,
    length: Annotated[Optional[int], typer.Option(help="Input length L (≥ 1); the output phase has L more steps. Paper: 64.")] = None,
    hidden_size: Annotated[Optional[int], typer.Option(help="Hidden size H. Paper: 512.")] = None,
    embed_size: Annotated[Optional[int], typer.Option(help="Embedding size E; defaults to the hidden size. The PE has E dims too unless model.pe_dim is set.")] = None,
    min_length: Annotated[Optional[int], typer.Option(help="reverse, variable length: L ~ U{min-length … max-length} per sequence (paper: 32).")] = None,
    max_length: Annotated[Optional[int], typer.Option(help="reverse, variable length: the longest L (same as --length; paper: 64).")] = None,
    rarity: Annotated[Optional[float], typer.Option(help="reverse, dual-frequency vocabulary: a position holds a Rare id (upper half of V) with this probability (reference: 0.125).")] = None,
    delay: Annotated[Optional[int], typer.Option(help="copy: T blank steps between input and output (paper: 60–100).")] = None,
    dim: Annotated[Optional[int], typer.Option(help="continuous: tokens are unit vectors in R^dim (paper: 8–512).")] = None,
    autoregressive: Annotated[Optional[bool], typer.Option("--autoregressive/--no-autoregressive", help="reverse/sort: feed the previous target (training) or prediction (eval) in the output phase.")] = None,
    layers: Annotated[Optional[int], typer.Option(help="transformer: number of causal self-attention blocks.")] = None,
    heads: Annotated[Optional[int], typer.Option(help="transformer: attention heads (must divide the hidden size).")] = None,
    iterations: Annotated[Optional[int], typer.Option(help="Training iterations. Paper: 300,000.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Batch size. Paper: 512.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Peak learning rate of Adam. Paper: 1e-3.")] = None,
    warmup: Annotated[Optional[int], typer.Option(help="Linear warm-up iterations before the cosine decay. Paper: 1,000.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed of the initialisation and the training batches. Paper: 111…555.")] = None,
    device: DeviceOpt = None,
    checkpoint_every: Annotated[Optional[int], typer.Option(help="Save a checkpoint every N iterations (and at the end). Paper: 5,000.")] = None,
    log_every: Annotated[Optional[int], typer.Option(help="Write a metrics.jsonl line every N iterations.")] = None,
    threads: Annotated[Optional[int], typer.Option(help="CPU threads for torch (default: torch's choice).")] = None,
    params: ParamsOpt = None,
    set_: SetOpt = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its last checkpoint (the config must match).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace whatever run --out already holds.")] = False,
    stop_after: Annotated[Optional[int], typer.Option(help="Stop after N iterations in this invocation (checkpointed; continue with --resume).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
):
    """Train one model on one task into a run directory (help text: ``TRAIN_HELP``)."""
    from .train import train as train_run

    if length is not None and max_length is not None and length != max_length:
        raise PosrnnError(f"--length ({length}) and --max-length ({max_length}) name the same setting; pass one")
    cfg = resolve_config(params, run_options(**locals()), set_)
    if cfg.task.name == "continuous" and vocab_size is not None:
        raise PosrnnError("the continuous task has no vocabulary (tokens are vectors); drop --vocab-size and set --dim")
    summary = train_run(cfg, out, resume=resume, force=force, stop_after=stop_after, progress=not json_out)
    if json_out:
        typer.echo(json.dumps(summary))
        return
    last = summary["last"]
    status = "finished" if summary["finished"] else "stopped"
    console.print(
        f"[bold]{status}[/] at step {summary['step']}/{summary['iterations']} in {summary['seconds']:.1f}s "
        f"({summary['it_per_s']:.1f} it/s, {summary['n_parameters']:,} parameters) → {out}"
        + (f"  loss {last['loss']:.4f} acc {last['accuracy']:.3f}" if last else "")
    )


def _eval_table(results: list[dict], title: str) -> Table:
    table = Table(title=title)
    for col in ("run", "step", "task", "model", "pe", "V", "L", "token acc", "95% CI", "seq acc", "DL"):
        table.add_column(col, justify="left" if col in ("run", "task", "model", "pe") else "right", overflow="fold")
    for r in results:
        ci = r.get("token_accuracy_ci", [float("nan")] * 2)
        table.add_row(
            Path(r["run_dir"]).name, str(r["step"]), r["task"], r["model"], r["pe"], str(r["vocab_size"]), str(r["length"]),
            f"{r['token_accuracy']:.3f}", f"{ci[0]:.3f}–{ci[1]:.3f}", f"{r['sequence_accuracy']:.3f}", f"{r['damerau_levenshtein']:.2f}",
        )
    return table


@app.command("eval")
@cli_errors
def eval_cmd(
    path: Annotated[Path, typer.Argument(help="A run directory (its latest checkpoint) or a checkpoint file.")],
    step: Annotated[Optional[int], typer.Option(help="Evaluate the checkpoint saved at this step instead of the latest.")] = None,
    device: DeviceOpt = "auto",
    batch_size: Annotated[Optional[int], typer.Option(help="Evaluation batch size (default: the run's train.eval_batch_size).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
):
    """Score a run on its held-out test set: token accuracy, sequence accuracy, Damerau–Levenshtein
    distance (with 95% bootstrap CIs). Writes RUN_DIR/eval.json."""
    from .evaluate import evaluate

    result = evaluate(path, step=step, device=device or "auto", batch_size=batch_size)
    if json_out:
        typer.echo(json.dumps(result))
    else:
        console.print(_eval_table([result], "held-out evaluation"))


@app.command()
@cli_errors
def compare(
    runs: Annotated[List[Path], typer.Argument(help="Run directories to compare (evaluated first if they have no eval.json).")],
    device: DeviceOpt = "auto",
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False,
):
    """Evaluate several runs and print them side by side (e.g. vanilla vs PE)."""
    from .evaluate import evaluate

    from .checkpoint import resolve_checkpoint

    results = []
    for run in runs:
        cached, latest = run / "eval.json", resolve_checkpoint(run)[0]
        hit = json.loads(cached.read_text()) if cached.is_file() else None
        fresh = hit is not None and Path(hit.get("checkpoint", "")).name == latest.name
        results.append(hit if fresh else evaluate(run, device=device or "auto"))
    if json_out:
        typer.echo(json.dumps(results))
    else:
        console.print(_eval_table(results, "vanilla vs positional encoding"))


@app.command()
@cli_errors
def stability(
    run: Annotated[Path, typer.Argument(help="A run directory (every saved checkpoint) or a checkpoint file.")],
    checkpoint: Annotated[Optional[int], typer.Option("--checkpoint", help="Analyse only the checkpoint saved at this step.")] = None,
    triplets: Annotated[int, typer.Option(help="Triplets (x,s), (x,s'), (x',s) per condition. Paper: 1,024.")] = 1024,
    chunk_size: Annotated[int, typer.Option(help="Sequences per vectorised Jacobian chunk (bounds memory).")] = 64,
    seed: Annotated[int, typer.Option(help="Seed of the triplets (the same triplets at every checkpoint).")] = 0,
    device: DeviceOpt = "auto",
    out: Annotated[Optional[Path], typer.Option("--out", help="CSV to write (default: RUN/stability.csv).")] = None,
    plot: Annotated[bool, typer.Option("--plot", help="Also draw RUN/stability.png (like the paper's Fig. 5).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
):
    """Gradient stability over training (SPEC §4): for every checkpoint, the Jacobians
    ∂h_2L/∂z_1 of triplets sharing the target or the suffix, compared row-wise; per
    (target kind × disturbant kind) for dual-frequency runs. Writes a CSV (step, condition,
    pair, mean, 95% CI)."""
    from .checkpoint import resolve_checkpoint
    from .stability import analyze, plot as draw, write_csv

    run_dir = resolve_checkpoint(run, checkpoint)[1]

    def tick(step, seconds):
        if not json_out:
            console.print(f"checkpoint {step}: {seconds:.1f}s ({3 * triplets / seconds:.0f} sequences/s)")

    rows = analyze(run, step=checkpoint, n_triplets=triplets, chunk_size=chunk_size, device=device or "auto",
                   seed=seed, on_checkpoint=tick)
    csv_path = out or run_dir / "stability.csv"
    write_csv(rows, csv_path)
    if plot:
        draw(rows, csv_path.with_suffix(".png"), title=str(run_dir))
    if json_out:
        typer.echo(json.dumps(rows))
        return
    table = Table(title=f"gradient stability → {csv_path}")
    for col in ("step", "condition", "pair", "mean", "95% CI"):
        table.add_column(col, justify="right" if col in ("step", "mean", "95% CI") else "left")
    for r in rows:
        table.add_row(str(r["step"]), r["condition"], r["pair"], f"{r['mean']:.3f}", f"{r['ci_low']:.3f}–{r['ci_high']:.3f}")
    console.print(table)


@app.command("extend-vocab")
@cli_errors
def extend_vocab_cmd(
    run: Annotated[Path, typer.Argument(help="A trained run directory (its latest checkpoint) or a checkpoint file.")],
    extra_vocab: Annotated[int, typer.Option("--extra-vocab", help="How many new ids to add (the reference doubles the vocabulary: N = V).")],
    out: Annotated[Path, typer.Option("--out", help="Directory of the extended run (the trained run is never modified).")],
    iterations: Annotated[Optional[int], typer.Option(help="Iterations training the new parameters (default: the trained run's).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed of the new rows' init and the batches (default: the trained run's).")] = None,
    device: DeviceOpt = "auto",
    set_: SetOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace whatever run --out already holds.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
):
    """Vocabulary extension: freeze every trained weight, add N new ids (embedding rows and
    output rows), train only those on sequences from the combined vocabulary, then test on
    sequences made only of new ids (and only of old ids, to show nothing was forgotten).
    Writes OUT/extend.json."""
    from .extend import extend_vocab

    r = extend_vocab(run, extra_vocab, out, iterations=iterations, seed=seed, device=device or "auto",
                     force=force, progress=not json_out, sets=set_)
    if json_out:
        typer.echo(json.dumps(r))
        return
    table = Table(title=f"vocabulary extension: V = {r['vocab_size']} + {r['extra_vocab']} ({r['model']}, pe={r['pe']})")
    for col in ("test set", "token acc", "95% CI", "seq acc", "DL"):
        table.add_column(col, justify="left" if col == "test set" else "right")
    for key, label in (("new_ids", "new ids only"), ("old_ids_before", "old ids, before"), ("old_ids", "old ids, after"),
                       ("old_ids_all_classes", "old ids, after, all classes")):
        m = r[key]
        table.add_row(label, f"{m['token_accuracy']:.3f}", "–".join(f"{c:.3f}" for c in m["token_accuracy_ci"]),
                      f"{m['sequence_accuracy']:.3f}", f"{m['damerau_levenshtein']:.2f}")
    console.print(table)


@app.command()
@cli_errors
def bench(
    task: Annotated[Optional[TaskName], typer.Option(help="Task (the bench measures reverse).")] = None,
    model: Annotated[Optional[ModelName], typer.Option(help="Model core.")] = None,
    pe: Annotated[Optional[PEName], typer.Option(help="Positional encoding.")] = None,
    vocab_size: Annotated[Optional[int], typer.Option(help="V. Paper's largest LSTM cell: 16,384.")] = None,
    length: Annotated[Optional[int], typer.Option(help="L. Paper: 64.")] = None,
    hidden_size: Annotated[Optional[int], typer.Option(help="H. Paper: 512.")] = None,
    embed_size: Annotated[Optional[int], typer.Option(help="E (default H).")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Batch. Paper: 512.")] = None,
    device: DeviceOpt = None,
    threads: Annotated[Optional[int], typer.Option(help="CPU threads for torch.")] = None,
    amp: Annotated[Optional[bool], typer.Option("--amp/--no-amp", help="bf16 autocast (train.amp).")] = None,
    cuda_graph: Annotated[Optional[bool], typer.Option("--cuda-graph/--no-cuda-graph", help="One CUDA graph per update (train.cuda_graph; CUDA only).")] = None,
    iters: Annotated[int, typer.Option(help="Timed iterations (the median is reported).")] = 20,
    warmup_iters: Annotated[int, typer.Option(help="Untimed iterations first.")] = 5,
    parts: Annotated[str, typer.Option(help="What to time, comma-separated: train, sampler, stability.")] = "train,sampler,stability",
    stability_triplets: Annotated[int, typer.Option("--stability-triplets", "--stability-seqs", help="Triplets for the stability timing (0: skip).")] = 8,
    chunk_size: Annotated[int, typer.Option(help="Stability: sequences per batched Jacobian pass.")] = 64,
    concurrent: Annotated[Optional[str], typer.Option(help="Also time k training processes at once on the device, e.g. 1,2,4.")] = None,
    no_reference: Annotated[bool, typer.Option("--no-reference", help="Skip the reference-style loop.")] = False,
    params: ParamsOpt = None,
    set_: SetOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
):
    """Benchmark one configuration (default: the paper's, from the config defaults): ms/iteration,
    tokens/s, TFLOP/s and share of peak, peak memory, sampler sequences/s, stability triplets/s —
    and the same for a plain reference-style loop in the same run, with the ratios."""
    from .bench import bench as run_bench

    cfg = resolve_config(params, {**run_options(task=task, model=model, pe=pe, vocab_size=vocab_size, length=length,
                                                hidden_size=hidden_size, embed_size=embed_size, batch_size=batch_size,
                                                device=device, threads=threads),
                                  "train.amp": amp, "train.cuda_graph": cuda_graph}, set_)
    try:
        ks = tuple(int(k) for k in concurrent.split(",")) if concurrent else ()
    except ValueError:
        raise PosrnnError(f"--concurrent takes process counts like 1,2,4, got {concurrent!r}") from None
    r = run_bench(cfg, iters=iters, warmup=warmup_iters, reference=not no_reference, stability_triplets=stability_triplets,
                  chunk_size=chunk_size, parts=tuple(p.strip() for p in parts.split(",") if p.strip()), concurrent=ks)
    if json_out:
        typer.echo(json.dumps(r))
        return
    m, t = cfg.model, cfg.task
    on = [k for k, v in r["fast_paths"].items() if v]
    table = Table(title=f"bench: {m.name} pe={m.pe} V={t.vocab_size} L={t.length} H={m.hidden_size} "
                        f"B={cfg.train.batch_size} on {r['device']} ({r['threads']} threads), {r['date']}; "
                        f"fast paths: {', '.join(on) or 'none'}")
    table.add_column("figure")
    table.add_column("posrnn", justify="right")
    table.add_column("reference loop", justify="right")
    table.add_column("ratio", justify="right")

    def fmt(v, spec=".2f"):
        return "-" if v is None else format(v, spec)

    def ratio(v):
        return f"{v:.2f}×" if v else "-"

    if "train_ms_per_iter" in r:
        for label, key, spec in (("ms / iteration", "ms_per_iter", ".2f"), ("tokens / s", "tokens_per_s", ",.0f"),
                                 ("TFLOP/s", "tflops", ".4f"), ("share of peak", "peak_share", ".3f"),
                                 ("peak memory MB", "peak_memory_mb", ",.0f")):
            ours, ref = r.get(f"train_{key}"), r.get(f"reference_{key}")
            table.add_row(label, fmt(ours, spec), fmt(ref, spec), ratio(r.get("train_speedup")) if key == "ms_per_iter" else "")
    if "sampler_seqs_per_s" in r:
        table.add_row("sampler sequences / s", fmt(r["sampler_seqs_per_s"], ",.0f"),
                      fmt(r.get("reference_sampler_seqs_per_s"), ",.0f"), ratio(r.get("sampler_speedup")))
        if r.get("refcode_sampler_seqs_per_s"):
            table.add_row("  vs the reference code's own sampler", "", fmt(r["refcode_sampler_seqs_per_s"], ",.0f"),
                          ratio(r["refcode_sampler_speedup"]))
    if r.get("stability_triplets_per_s"):
        table.add_row("stability triplets / s", fmt(r["stability_triplets_per_s"], ".2f"), "", "")
        table.add_row("stability s / 1,024 triplets", fmt(r["stability_s_per_1024_triplets"], ".1f"), "", "")
    for c in r.get("concurrent", []):
        table.add_row(f"{c['k']} concurrent runs: it / s in all", fmt(c["aggregate_it_per_s"], ".2f"), "", ratio(c["speedup_vs_1"]))
    table.add_row("FLOP / iteration", f"{r['flops_per_iter']:.3e}", "", "")
    console.print(table)


from .lm.cli import lm_app  # noqa: E402

app.add_typer(lm_app, name="lm")


def version_callback(value: bool):
    if value:
        typer.echo(f"posrnn {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[Optional[bool], typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version and exit.")] = None,
):
    """posrnn — positional encoding for recurrent networks."""


def run(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point: like ``app()``, but a usage error (unknown option, a
    value outside the choices) is one line on stderr and exit code 2, no usage box."""
    try:  # typer ≥ 0.26 vendors click; older typers use the click package
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover
        import click.exceptions as cx

    try:
        code = app(args=argv, prog_name="posrnn", standalone_mode=False)
    except cx.NoArgsIsHelpError as e:
        typer.echo(e.ctx.get_help() if e.ctx else "see posrnn --help")
        code = 0
    except cx.UsageError as e:
        cmd = e.ctx.command_path if e.ctx else "posrnn"
        msg = " ".join(e.format_message().split())
        typer.echo(f"error: {msg} (see '{cmd} --help')", err=True)
        code = 2
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        code = 1
    sys.exit(code or 0)


# ---- pipeline commands (the dvc.yaml stages; posrnn_cli/cli_pipeline.py) -----------------
from .cli_pipeline import register as _register_pipeline  # noqa: E402

_register_pipeline(app, cli_errors)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
