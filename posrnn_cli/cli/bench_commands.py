"""``posrnn bench | bench-sweep | gpu-check``: the speed of a training step, the sampler and the
stability analysis, the runs per hour of a sweep with 1, 2, … workers, and the GPU check.

Thin wrappers like ``runs``: the library code is imported inside the command, so ``--help``
never loads torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..common.errors import PosrnnError
from .common import JsonOpt, ParamsOpt, SetOpt, cli_errors, console, given_keys
from .options import config_options, run_options


#: what ``posrnn bench`` measures when not told: sized to the device
BENCH_CPU = {"model.name": "gru", "task.vocab_size": 32, "task.length": 8, "model.hidden_size": 64,
             "train.batch_size": 128}
# the paper's largest LSTM cell; the rest is the papers' default
BENCH_PAPER = {"model.name": "lstm", "task.vocab_size": 16384}


@run_options("model", "pe", "vocab_size", "length", "hidden_size", "embed_size", "state_size", "conv", "block",
             "batch_size", "device",
             "threads", "amp", "cuda_graph", after="paper", defaults={k: "sized to the device" for k in (
                 "model", "vocab_size", "length", "hidden_size", "batch_size")})
def bench(
    paper: Annotated[bool, typer.Option(
        "--paper", help="The paper's configuration (LSTM, V 16,384, L 64, H 512, B 512). [default on a GPU]")] = False,
    iters: Annotated[int, typer.Option(metavar="N", help="Timed iterations (the median is reported).")] = 20,
    warmup_iters: Annotated[int, typer.Option(metavar="N", help="Untimed iterations first.")] = 5,
    parts: Annotated[str, typer.Option(
        "--parts", metavar="PARTS",
        help="What to time: train, sampler, stability (comma-separated).")] = "train,sampler,stability",
    stability_triplets: Annotated[int, typer.Option(
        "--stability-triplets", metavar="N", help="Triplets timed (0: skip).")] = 8,
    chunk_size: Annotated[int, typer.Option(metavar="N", help="Stability: sequences per Jacobian pass.")] = 64,
    concurrent: Annotated[Optional[str], typer.Option(
        metavar="K,…", help="Also time k training processes at once, e.g. 1,2,4.", show_default=False)] = None,
    no_reference: Annotated[bool, typer.Option("--no-reference", help="Skip the reference-style loop.")] = False,
    ensemble: Annotated[Optional[str], typer.Option(
        metavar="K,…", help="Instead: time K seeds trained as one batched model (elman, gru, lstm) beside one solo "
                            "run, e.g. 1,2,4,8: it/s per member and in all, peak memory.", show_default=False)] = None,
    params: ParamsOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
    opts: Optional[dict] = None,
):
    """Benchmark one configuration: ms/iteration, tokens/s, TFLOP/s, peak memory, sampler
    sequences/s, stability triplets/s — beside a plain reference-style loop in the same run,
    with the ratios. Without options: a small GRU on a CPU (under a minute), the paper's
    configuration on a GPU."""
    from ..measure.bench import bench as run_bench
    from ..common.settings.config import RunConfig, resolve_config
    from ..common.host.machine import fit_to_machine
    from ..engine.device import resolve_device

    dev = resolve_device(opts["device"] or RunConfig().train.device)
    sized = dict(BENCH_PAPER) if (paper or dev.type == "cuda") else dict(BENCH_CPU)
    cfg = resolve_config(params, {**sized, **config_options(opts)}, set_)
    fit_to_machine(cfg, dev.type, given_keys(config_options(opts), set_, params))
    try:
        ks = tuple(int(k) for k in concurrent.split(",")) if concurrent else ()
    except ValueError:
        raise PosrnnError(f"--concurrent takes process counts like 1,2,4, got {concurrent!r}") from None
    if ensemble is not None:
        return _bench_ensemble(cfg, ensemble, iters, warmup_iters, json_out)
    r = run_bench(cfg, iters=iters, warmup=warmup_iters, reference=not no_reference,
                  stability_triplets=stability_triplets,
                  chunk_size=chunk_size, parts=tuple(p.strip() for p in parts.split(",") if p.strip()), concurrent=ks)
    if json_out:
        typer.echo(json.dumps(r))
        return
    console().print(_bench_table(cfg, r))


def _bench_ensemble(cfg, ks_text: str, iters: int, warmup: int, json_out: bool) -> None:
    """``posrnn bench --ensemble K,…``: the table of ``bench_ensemble.ensemble_speed``."""
    from rich.table import Table

    from ..measure.bench_ensemble import ensemble_speed

    try:
        ks = tuple(int(k) for k in ks_text.split(","))
    except ValueError:
        raise PosrnnError(f"--ensemble takes ensemble sizes like 1,2,4,8, got {ks_text!r}") from None
    r = ensemble_speed(cfg, ks, iters=iters, warmup=warmup)
    if json_out:
        typer.echo(json.dumps(r))
        return
    m, t = cfg.model, cfg.task
    table = Table(title=f"bench --ensemble: {m.name} V={t.vocab_size} L={t.length} H={m.hidden_size} "
                        f"B={cfg.train.batch_size} on {r['device']}, torch {r['torch']}, amp {r['amp']}, cuda_graph "
                        f"{r['cuda_graph']}; one solo run's peak memory {r['solo_peak_memory_mb']:,.0f} MB",
                  caption=f"load average (1 min) {r['load']['before'][0]:.2f} before, {r['load']['after'][0]:.2f} "
                          f"after, on {r['load']['cores']} cores; × solo: in one run, each K timed in alternating "
                          f"blocks with one solo run")
    for col in ("K", "ms / step", "it/s per member", "it/s in all", "one solo run's it/s", "× solo", "peak memory MB",
                "bytes × solo"):
        table.add_column(col, justify="right")
    for row in r["rows"]:
        if "error" in row:
            table.add_row(str(row["k"]), row["error"], *[""] * 6)
            continue
        table.add_row(str(row["k"]), f"{row['ms_per_step']:.2f}", f"{row['it_per_s_per_member']:.2f}",
                      f"{row['it_per_s_in_all']:.2f}", f"{row['solo_it_per_s']:.2f}", f"{row['vs_solo_in_all']:.2f}×",
                      f"{row['peak_memory_mb']:,.0f}", f"{row['bytes_per_member_vs_solo']:.2f}×")
    console().print(table)


def _bench_table(cfg, r: dict):
    """``posrnn bench``'s figures as a rich table: posrnn beside the reference loop, with ratios."""
    from rich.table import Table

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
            table.add_row(label, fmt(ours, spec), fmt(ref, spec),
                          ratio(r.get("train_speedup")) if key == "ms_per_iter" else "")
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
        table.add_row(f"{c['k']} concurrent runs: it / s in all", fmt(c["aggregate_it_per_s"], ".2f"), "",
                      ratio(c["speedup_vs_1"]))
    table.add_row("FLOP / iteration", f"{r['flops_per_iter']:.3e}", "", "")
    return table


def bench_sweep(
    workers: Annotated[str, typer.Option(metavar="K,…", help="Worker counts to compare.")] = "1,2",
    runs: Annotated[int, typer.Option(metavar="N", help="Runs in the grid (GRU, V 16, L 8, H 64, batch 128).")] = 8,
    iterations: Annotated[int, typer.Option(metavar="N", help="Iterations per run.")] = 1000,
    json_out: JsonOpt = False,
):
    """Runs per hour of `posrnn sweep` with 1, 2, … local workers on this machine.

    The same grid is swept once per worker count in a scratch directory."""
    try:
        ks = tuple(int(k) for k in workers.split(","))
    except ValueError:
        raise PosrnnError(f"--workers takes counts like 1,2, got {workers!r}") from None
    from ..measure.executor_bench import sweep_throughput  # torch-free: its counts are refused before torch loads

    rows = sweep_throughput(ks, runs=runs, iterations=iterations)
    from ..measure.bench import machine

    if json_out:
        typer.echo(json.dumps(rows))
        return
    import datetime

    from rich.table import Table

    t = Table(title=f"sweep throughput: {runs} runs × {iterations:,} iterations, {machine()}, "
                    f"{datetime.date.today().isoformat()}")
    for col in ("workers", "wall s", "runs / hour", "× one worker"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["workers"]), f"{r['seconds']:.1f}", f"{r['runs_per_hour']:.0f}",
                  f"{r['speedup_vs_1']:.2f}" if r["speedup_vs_1"] else "-")
    console().print(t)


def gpu_check(
    device: Annotated[str, typer.Option("--device", metavar="cuda|cpu",
                                        help="The device checked; cpu runs the micro size (what CI runs).")] = "cuda",
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Where the report goes (gpu_check.json, "
                                      "gpu_check.md, loss_curve.csv).")] = Path("gpu-check"),
    size: Annotated[Optional[str], typer.Option("--size", metavar="paper|micro", help="The stages' size. [default: "
                                                "paper on cuda, micro on cpu]", show_default=False)] = None,
    budget: Annotated[float, typer.Option("--budget", metavar="SECONDS", help="Seconds for all the stages.")] = 470.0,
    check_args: Annotated[bool, typer.Option("--check-args", help="Only check the options.")] = False,
    out_checked: Annotated[bool, typer.Option("--out-checked", hidden=True)] = False,
):
    """The GPU check: the GPU tests, the ensemble path, bench, a short training, concurrent runs and
    the cost model's cells, each in its own time box, the report rewritten after each stage.

    On a bare GPU machine (no typer), bash tools/gpu_check.sh runs the same check."""
    from ..measure.gpu_check import run_check

    raise typer.Exit(run_check(device, out, size, budget, check_args, out_checked))


def register(app: typer.Typer) -> None:
    app.command(short_help="Time a training step, the sampler and the stability analysis.")(cli_errors(bench))
    app.command("bench-sweep",
                short_help="Runs per hour of posrnn sweep with 1, 2, … workers.")(cli_errors(bench_sweep))
    app.command("gpu-check",
                short_help="The GPU check of tools/gpu_check.sh: every GPU path, time-boxed.")(cli_errors(gpu_check))
