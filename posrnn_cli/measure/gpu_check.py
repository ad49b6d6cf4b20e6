"""The GPU check that ``tools/gpu_check.sh`` runs: everything a bare GPU machine should prove
about posrnn's GPU paths, in one unattended command, most important first.

Stages, in order, each in its own process under its own time box (so a hang or a cut-off
loses that stage only), the JSON and the markdown rewritten (atomically) after each:

0. ``factors`` (``gpu_check_factors``): what the dry run's GPU price assumes until it is measured:
   each recurrent core's dtype under autocast, fig2's GRU at V = 32 in fp32, ``amp`` and ``amp`` +
   ``cuda_graph`` (α), the packing gain g at K = 1, 2, 4, 8, an LSTM at V = 256 and an Elman RNN;
   written, with the bench stages' rows, as ``gpu_ms_per_iter.json`` and ``ensemble_k.json`` in the
   committed format (copied over posrnn_cli/measure/'s and posrnn_cli/sweep/'s, the cost model and
   the sweep's default K read them with no code edit);
1. ``tests``: ``pytest -m gpu tests/test_gpu.py tests/test_lm_head.py`` (each test skips with one
   line off CUDA);
2. ``ensemble``: the ensemble path's CUDA equivalence tests and ``posrnn bench --ensemble`` for
   K = 1 … 16, eager and ``amp`` + ``cuda_graph`` (``gpu_check_ensemble``);
3. ``bench``: ``posrnn bench`` at the size's configuration, eager (beside the reference
   loop), ``amp``, and ``amp`` + ``cuda_graph``; a fast path the device refuses is recorded
   with its one-line reason;
4. ``train``: a short real training of one fig2 cell: its loss curve and iterations/s, read
   from the run's ``metrics.jsonl`` (so a time-out keeps the curve logged until then);
5. ``concurrent``: aggregate throughput of k training processes on the device;
6. ``lm_step`` and ``cost_cells`` (``gpu_cost_check.py``): one step of the papers' language
   model on a synthetic corpus (time and peak memory), and three unlike cells' ms/iteration,
   each beside the cost model's prediction.

Sizes: ``paper`` (the paper's configuration, for one H100/H200, about 8 minutes in all) and
``micro`` (seconds on a CPU: what CI runs so that the check cannot rot). Every figure row
carries the device's name, the torch and CUDA versions and the date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from ..common.errors import PosrnnError
from ..common.files.io import check_owned, write_owned
from .gpu_check_ensemble import ensemble_figures, stage_ensemble
from .gpu_check_factors import ENSEMBLE_NAME, GPU_NAME, factor_figures, factor_rows, stage_factors, write_tables

PAPER_CELL = ["--model", "lstm", "--vocab-size", "16384", "--length", "64", "--hidden-size", "512", "--batch-size",
              "512"]
SIZES = {
    "paper": {
        "bench": [*PAPER_CELL, "--iters", "30", "--warmup-iters", "5", "--stability-triplets", "0"],
        # fig2's largest LSTM cell with fig2's settings, shortened: a few thousand iterations
        "train": [*PAPER_CELL, "--iterations", "1000", "--warmup", "100", "--seed", "111", "--log-every", "50",
                  "--checkpoint-every", "1000"],
        # fig2's smallest cell (GRU, V = 32) at the paper's L, H and batch: (config, k values, iterations, warm-up)
        "concurrent": ({"model.name": "gru", "task.vocab_size": 32, "task.length": 64, "model.hidden_size": 512,
                        "train.batch_size": 512}, [1, 2, 4, 8], 20, 3),
        # seconds: each stage's box, most important first; 470 s in all
        "boxes": {"factors": 150, "tests": 50, "ensemble": 70, "bench_eager": 30, "bench_amp": 20,
                  "bench_amp_graph": 20, "train": 45, "concurrent": 20, "lm_step": 30, "cost_cells": 35},
    },
    "micro": {
        "bench": ["--model", "gru", "--vocab-size", "8", "--length", "5", "--hidden-size", "8", "--batch-size", "16",
                  "--set", "task.n_test=64", "--threads", "1", "--iters", "2", "--warmup-iters", "1",
                  "--stability-triplets", "0"],
        "train": ["--model", "gru", "--vocab-size", "8", "--length", "5", "--hidden-size", "16", "--batch-size", "16",
                  "--set", "task.n_test=64", "--threads", "1", "--iterations", "60", "--warmup", "5", "--seed", "111",
                  "--log-every", "20", "--checkpoint-every", "60"],
        "concurrent": ({"model.name": "gru", "task.vocab_size": 8, "task.length": 5, "model.hidden_size": 8,
                        "train.batch_size": 16, "task.n_test": 64, "train.threads": 1}, [1, 2], 3, 1),
        "boxes": {"factors": 120, "tests": 120, "ensemble": 120, "bench_eager": 60, "bench_amp": 60,
                  "bench_amp_graph": 60, "train": 60,
                  "concurrent": 90, "lm_step": 60, "cost_cells": 90},
    },
}
BENCH_VARIANTS = {"bench_eager": ["--parts", "train,sampler"],
                  "bench_amp": ["--amp", "--parts", "train", "--no-reference"],
                  "bench_amp_graph": ["--amp", "--cuda-graph", "--parts", "train", "--no-reference"]}
JSON_NAME, MD_NAME, CURVE_NAME = "gpu_check.json", "gpu_check.md", "loss_curve.csv"
DEVICES = ("cuda", "cpu")
MIN_STAGE_S = 10  # a stage with less time than this left is recorded as skipped


def environment(device: str) -> dict:
    """The device's name, torch and CUDA versions and the date, stamped on every figure."""
    import torch

    from .bench import machine

    cuda = device == "cuda" and torch.cuda.is_available()
    return {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "device_kind": device,
            "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
            "python": platform.python_version(), "host_cpu": machine(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def run_boxed(cmd: list[str], seconds: float, env: Optional[dict] = None, cwd: Optional[Path] = None) -> dict:
    """Run ``cmd`` (its output echoed here line by line) for at most ``seconds``; on time-out
    its whole process group is killed. Returns rc, output, seconds and timed_out."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         env={**os.environ, **(env or {})}, cwd=cwd)
    lines: list[str] = []

    def pump() -> None:
        for line in p.stdout:
            lines.append(line)
            sys.stdout.write(line)
            sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        p.wait(timeout=max(seconds, 0.1))
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    reader.join(timeout=5)
    return {"rc": p.returncode, "output": "".join(lines), "seconds": round(time.monotonic() - t0, 2),
            "timed_out": timed_out}


def posrnn(*args: str) -> list[str]:
    return [sys.executable, "-m", "posrnn_cli", *args]


# ---- the stages ------------------------------------------------------------------------------------
TEST_LINE = re.compile(r"^(tests/\S+::\S+)\s+(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)(?: \((.*)\))?")


def parse_pytest(output: str) -> list[dict]:
    """Each test's outcome from ``pytest -v -rfEs`` output (partial output gives the tests
    that finished), with the first line of its reason: a skip's from its verbose line (or the
    skip summary), a failure's from the summary."""
    tests = {m.group(1): {"test": m.group(1).split("::", 1)[1], "outcome": m.group(2).lower(), "reason": m.group(3)}
             for m in map(TEST_LINE.match, output.splitlines()) if m}
    for line in output.splitlines():
        m = re.match(r"^(FAILED|ERROR) (tests/\S+::\S+) - (.*)$", line)
        if m and m.group(2) in tests:
            tests[m.group(2)]["reason"] = m.group(3)[:300]
        m = re.match(r"^SKIPPED \[\d+\] (tests/[^:]+):\d+: (.*)$", line)
        if m:
            for t in tests.values():
                if t["outcome"] == "skipped" and t["reason"] is None:
                    t["reason"] = m.group(2)[:300]
    return list(tests.values())


def stage_tests(device: str, box: float, root: Path) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-rfEs", "-p", "no:cacheprovider", "tests/test_gpu.py",
           "tests/test_lm_head.py"]
    r = run_boxed(cmd, box, cwd=root)
    tests = parse_pytest(r["output"])
    status = "timed out" if r["timed_out"] else ("passed" if r["rc"] == 0 else "failed")
    return {"status": status, "seconds": r["seconds"], "rc": r["rc"], "tests": tests}


def last_json(output: str) -> Optional[dict]:
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def stage_bench(name: str, device: str, size: dict, box: float) -> dict:
    r = run_boxed(posrnn("bench", *size["bench"], *BENCH_VARIANTS[name], "--device", device, "--json"), box)
    res = last_json(r["output"]) if r["rc"] == 0 else None
    if res is not None:
        return {"status": "ok", "seconds": r["seconds"], "result": res}
    if r["timed_out"]:
        return {"status": "timed out", "seconds": r["seconds"]}
    errors = [ln for ln in r["output"].splitlines() if ln.startswith("error:")]
    return {"status": "refused" if errors else "failed", "seconds": r["seconds"],
            "error": (errors or r["output"].strip().splitlines()[-1:] or ["no output"])[0][:400]}


def read_curve(run_dir: Path) -> list[dict]:
    """The run's logged step, loss, accuracy and elapsed time (a line cut by the time-out skipped)."""
    from ..common.files.rundir import log_entries

    return [{k: d.get(k) for k in ("step", "loss", "accuracy", "elapsed_s")} for d in log_entries(run_dir)]


def curve_rate(curve: list[dict]) -> Optional[float]:
    """Iterations/s between the first and the last log line (the first step's set-up excluded)."""
    if len(curve) < 2 or curve[-1]["elapsed_s"] <= curve[0]["elapsed_s"]:
        return None
    return (curve[-1]["step"] - curve[0]["step"]) / (curve[-1]["elapsed_s"] - curve[0]["elapsed_s"])


def stage_train(device: str, size: dict, box: float, work: Path, out: Path) -> dict:
    run_dir = work / "train"
    r = run_boxed(posrnn("train", "--task", "reverse", *size["train"], "--device", device, "--out", str(run_dir),
                         "--force", "--json"), box)
    curve = read_curve(run_dir)
    if curve:
        write_owned(out / CURVE_NAME, "step,loss,accuracy,elapsed_s\n" + "".join(
            f"{c['step']},{c['loss']},{c['accuracy']},{c['elapsed_s']}\n" for c in curve))
    status = "timed out" if r["timed_out"] else ("ok" if r["rc"] == 0 else "failed")
    res = {"status": status, "seconds": r["seconds"], "curve": curve, "it_per_s": curve_rate(curve),
           "iterations_done": curve[-1]["step"] if curve else 0}
    if status == "failed":
        res["error"] = (r["output"].strip().splitlines() or ["no output"])[-1][:400]
    return res


def concurrent_each(options: dict, ks: list[int], iters: int, warmup: int) -> None:
    """``bench.concurrent_throughput`` for each k in turn, one ``CONCURRENT {json}`` line per k
    as it finishes, so that the stage's parent keeps the k values done before a time-out."""
    from .bench import concurrent_throughput
    from ..common.settings.config import resolve_config

    cfg = resolve_config(options=options)
    for k in ks:
        (r,) = concurrent_throughput(cfg, (k,), iters, warmup)
        print("CONCURRENT " + json.dumps(r), flush=True)


def stage_concurrent(device: str, size: dict, box: float) -> dict:
    options, ks, iters, warmup = size["concurrent"]
    args = json.dumps([{**options, "train.device": device}, ks, iters, warmup])
    r = run_boxed([sys.executable, "-c", "import json, sys; from posrnn_cli.measure.gpu_check import concurrent_each; "
                   "concurrent_each(*json.loads(sys.argv[1]))", args], box)
    rows = [json.loads(ln.split(" ", 1)[1]) for ln in r["output"].splitlines() if ln.startswith("CONCURRENT {")]
    base = next((x["aggregate_it_per_s"] for x in rows if x["k"] == 1), None)
    for x in rows:
        x["speedup_vs_1"] = x["aggregate_it_per_s"] / base if base else None
    status = "timed out" if r["timed_out"] else ("ok" if r["rc"] == 0 else "failed")
    res = {"status": status, "seconds": r["seconds"], "result": rows, "config": options, "iters": iters}
    if status == "failed":
        res["error"] = (r["output"].strip().splitlines() or ["no output"])[-1][:400]
    return res


COST_STAGES = ("lm_step", "cost_cells")


def stage_cost(name: str, size: str, device: str, box: float) -> dict:
    """A cost-model stage of ``gpu_cost_check`` in its own process: its figures as they came."""
    r = run_boxed([sys.executable, "-c",
                   "import sys; from posrnn_cli.measure.gpu_cost_check import run; run(*sys.argv[1:])",
                   name, size, device], box)
    rows = [json.loads(ln.split(" ", 1)[1]) for ln in r["output"].splitlines() if ln.startswith("COSTCHECK {")]
    status = "timed out" if r["timed_out"] else ("ok" if r["rc"] == 0 else "failed")
    res = {"status": status, "seconds": r["seconds"], "result": rows}
    if status == "failed":
        res["error"] = (r["output"].strip().splitlines() or ["no output"])[-1][:400]
    return res


# ---- the report ----------------------------------------------------------------------------------
BENCH_FIGURES = (("train_ms_per_iter", "ms / iteration", ".2f"), ("train_tflops", "TFLOP/s", ".3f"),
                 ("train_peak_share", "share of dense peak", ".3f"),
                 ("train_peak_memory_mb", "peak memory, MiB", ",.0f"),
                 ("reference_ms_per_iter", "reference loop, ms / iteration", ".2f"),
                 ("train_speedup", "× the reference loop", ".2f"),
                 ("sampler_seqs_per_s", "sampler, sequences / s", ",.0f"))


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def figures(stages: dict) -> list[tuple[str, str, str]]:
    """(stage, figure, value) rows of every stage that ran, in the order they ran."""
    rows: list[tuple[str, str, str]] = factor_figures(stages.get("factors"))
    for t in stages.get("tests", {}).get("tests", []):
        rows.append(("tests", t["test"], t["outcome"] + (f": {t['reason']}" if t["reason"] else "")))
    if "tests" in stages and stages["tests"]["status"] != "passed":
        rows.append(("tests", "pytest -m gpu", stages["tests"]["status"]))
    for name in BENCH_VARIANTS:
        st = stages.get(name)
        if st is None:
            continue
        if st["status"] != "ok":
            rows.append((name, "status", st["status"] + (f": {st['error']}" if st.get("error") else "")))
            continue
        rows += [(name, label, _fmt(st["result"].get(key), spec)) for key, label, spec in BENCH_FIGURES
                 if key in st["result"]]
    rows += ensemble_figures(stages.get("ensemble"))
    st = stages.get("train")
    if st is not None:
        c = st.get("curve") or []  # a stage skipped for time has no curve
        rows.append(("train", "status", st["status"] + (f": {st['error']}" if st.get("error") else "")))
        if "iterations_done" in st:
            rows += [("train", "iterations done", str(st["iterations_done"])),
                     ("train", "iterations / s", _fmt(st.get("it_per_s"), ".1f"))]
        if c:
            rows.append(("train", "loss, first → last log line", f"{c[0]['loss']:.4f} → {c[-1]['loss']:.4f}"))
    st = stages.get("concurrent")
    if st is not None and st["status"] != "ok":
        rows.append(("concurrent", "status", st["status"] + (f": {st['error']}" if st.get("error") else "")))
    for c in (st or {}).get("result") or []:
        rows.append(("concurrent", f"{c['k']} runs: it / s in all (× k = 1)",
                     f"{c['aggregate_it_per_s']:.1f} ({_fmt(c['speedup_vs_1'], '.2f')}×)"))
    from .gpu_cost_check import figure_rows

    return rows + [r for name in COST_STAGES if name in stages for r in figure_rows(name, stages[name])]


def markdown(report: dict) -> str:
    e = report["env"]
    stamp = [e["device"], e["torch"], e["cuda"] or "-", e["date"]]
    lines = [f"# GPU check, size {report['size']}, on {e['device']}", "",
             f"torch {e['torch']}, CUDA {e['cuda'] or '-'}, cuDNN {e['cudnn'] or '-'}, Python {e['python']}, "
             f"host {e['host_cpu']}, {e['date']}; stages run: {', '.join(report['stages']) or 'none'}"
             + ("" if report["finished"] else " (not finished)"), "",
             "| stage | figure | value | device | torch | CUDA | date |", "|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join([s, f, v.replace("|", "\\|"), *stamp]) + " |" for s, f, v in figures(report["stages"])]
    return "\n".join(lines) + "\n"


def device_kind(env: dict) -> str:
    from .bench import PEAKS

    return next((key for key, _ in PEAKS if key in env["device"]), env["device"])


def table_rows(report: dict) -> list[dict]:
    """The factors stage's and the bench stages' ms/iteration, and one run's in the concurrent stage
    (a small model: the latency floor), as rows of ``measure/gpu_ms_per_iter.json`` (the dry run's
    compute estimate), for a CUDA device only."""
    e = report["env"]
    if e["cuda"] is None:
        return []
    kind = device_kind(e)
    stamp = {"kind": kind, "device": e["device"], "date": e["date"][:10], "torch": e["torch"], "cuda": e["cuda"]}
    rows = factor_rows(report["stages"].get("factors"), e, kind)[0]
    for name in BENCH_VARIANTS:
        res = (report["stages"].get(name) or {}).get("result")
        if not res or "train_ms_per_iter" not in res:
            continue
        c = res["config"]
        rows.append({**stamp, "model": c["model"]["name"], "vocab": c["task"]["vocab_size"],
                     "length": c["task"]["length"],
                     "hidden": c["model"]["hidden_size"], "batch": c["train"]["batch_size"], "amp": c["train"]["amp"],
                     "cuda_graph": c["train"]["cuda_graph"], "flops_per_iter": res["flops_per_iter"],
                     "ms_per_iter": res["train_ms_per_iter"], "steps": 2 * c["task"]["length"]})
    conc = report["stages"].get("concurrent") or {}
    one = next((x for x in conc.get("result") or [] if x["k"] == 1), None)
    if one:
        from ..common.settings.config import resolve_config
        from .cost import run_steps
        from .calibrate import flops_per_iteration

        cfg = resolve_config(options=conc["config"])
        rows.append({**stamp, "model": cfg.model.name, "vocab": cfg.task.vocab_size, "length": cfg.task.length,
                     "hidden": cfg.model.hidden_size, "batch": cfg.train.batch_size, "amp": cfg.train.amp,
                     "cuda_graph": cfg.train.cuda_graph, "flops_per_iter": flops_per_iteration(cfg),
                     "ms_per_iter": one["ms_per_iter_per_run"], "steps": run_steps(cfg)})
    return rows


def write_report(report: dict, out: Path) -> None:
    from .gpu_check_factors import ROW_KEY, merged

    rows = merged([], table_rows(report), ROW_KEY)
    ens = factor_rows(report["stages"].get("factors"), report["env"], device_kind(report["env"]))[1]
    report = {**report, "figures": [{"stage": s, "figure": f, "value": v, **{k: report["env"][k] for k in
                                      ("device", "torch", "cuda", "date")}} for s, f, v in figures(report["stages"])],
              "gpu_ms_per_iter_rows": rows, "ensemble_k_rows": ens}
    write_tables(out, rows, ens, report["env"])
    write_owned(out / JSON_NAME, json.dumps(report, indent=2) + "\n")
    write_owned(out / MD_NAME, markdown(report))


def check(device: str, out: Path, size: str, budget: float, root: Path) -> dict:
    """Run the stages in order within ``budget`` seconds, the report rewritten after each."""
    deadline = time.monotonic() + budget
    out.mkdir(parents=True, exist_ok=True)
    spec = SIZES[size]
    report = {"size": size, "budget_s": budget, "env": environment(device), "stages": {}, "finished": False}
    write_report(report, out)
    with tempfile.TemporaryDirectory(prefix="posrnn-gpu-check-") as tmp:
        runs = [("factors", lambda b: stage_factors(device, size, b, sys.modules[__name__])),
                ("tests", lambda b: stage_tests(device, b, root)),
                ("ensemble", lambda b: stage_ensemble(device, size, b, root, sys.modules[__name__])),
                *[(n, (lambda n: lambda b: stage_bench(n, device, spec, b))(n)) for n in BENCH_VARIANTS],
                ("train", lambda b: stage_train(device, spec, b, Path(tmp), out)),
                ("concurrent", lambda b: stage_concurrent(device, spec, b)),
                *[(n, (lambda n: lambda b: stage_cost(n, size, device, b))(n)) for n in COST_STAGES]]
        for name, run in runs:
            left = deadline - time.monotonic()
            if left < MIN_STAGE_S:
                report["stages"][name] = {"status": "skipped: out of time", "seconds": 0.0}
            else:
                print(f"== gpu check: {name} (up to {min(spec['boxes'][name], left):.0f} s)", flush=True)
                report["stages"][name] = run(min(spec["boxes"][name], left))
            write_report(report, out)
    report["finished"] = True
    write_report(report, out)
    return report


#: what the check writes into its --out (the log by tools/gpu_check.sh)
OUT_NAMES = (JSON_NAME, MD_NAME, CURVE_NAME, "gpu_check.log", GPU_NAME, ENSEMBLE_NAME)
#: the shortest --budget: every stage its minimum
MIN_BUDGET_S = 6 * MIN_STAGE_S


def check_args(out: Path, budget: float, out_checked: bool = False) -> Optional[str]:
    """Why the options cannot run (one line), or None: a budget below ``MIN_BUDGET_S`` or not a
    number; an --out that is a link or a file, or that holds a file of the check's names the check
    did not write (no report of its own beside it), which it would overwrite."""
    if not math.isfinite(budget) or budget < MIN_BUDGET_S:
        return (f"--budget {budget:g} cannot hold the check: pass at least {MIN_BUDGET_S} seconds ({MIN_STAGE_S} per "
                "stage)")
    if out_checked:
        return None
    if out.is_symlink():
        return f"--out {out} is a symbolic link; the check does not write through links: pass the folder itself"
    if out.exists() and not out.is_dir():
        return f"--out {out} is a file, not a folder; pass a new folder"
    try:  # each file the check writes, only where it can prove it wrote the one there
        for n in OUT_NAMES[:3]:
            check_owned(out / n, None, "--out")
    except PosrnnError as e:
        return str(e)
    log = out / OUT_NAMES[3]  # the script's log: replaced only beside a report the check wrote
    if (log.exists() or log.is_symlink()) and (log.is_symlink() or not log.is_file()
                                               or not (out / JSON_NAME).is_file()):
        return (f"--out {out} holds {log.name} but no report the check wrote; it is never overwritten: pass a new "
                "folder")
    return None


def parser() -> argparse.ArgumentParser:
    """The check's options (``posrnn gpu-check`` takes the same)."""
    ap = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=DEVICES, default="cuda")
    ap.add_argument("--out", type=Path, default=Path("gpu-check"))
    ap.add_argument("--size", choices=tuple(SIZES), default=None, help="default: paper on cuda, micro on cpu")
    ap.add_argument("--budget", type=float, default=470.0, help="seconds for all the stages")
    ap.add_argument("--check-args", action="store_true", help="only check the options (tools/gpu_check.sh, before it "
                                                              "writes)")
    # the script checked --out before its log
    ap.add_argument("--out-checked", action="store_true", help=argparse.SUPPRESS)
    return ap


def run_check(device: str = "cuda", out: Path = Path("gpu-check"), size: Optional[str] = None, budget: float = 470.0,
              check_args_only: bool = False, out_checked: bool = False) -> int:
    """The check as one command: the options checked (only that with ``check_args_only``), then
    every stage; the exit code (0: every stage ok, 1: a stage not ok or no CUDA device, 2: options)."""
    problem = check_args(out, budget, out_checked)
    if device not in DEVICES:
        problem = f"--device takes {' or '.join(DEVICES)}, got {device!r}"
    elif size is not None and size not in SIZES:
        problem = f"--size takes {' or '.join(SIZES)}, got {size!r}"
    if problem or check_args_only:
        if problem:
            print(f"error: {problem}", file=sys.stderr)
        return 2 if problem else 0
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: --device cuda but torch sees no CUDA device; run with --device cpu for the micro check",
                  file=sys.stderr)
            return 1
    size = size or ("paper" if device == "cuda" else "micro")
    report = check(device, out, size, budget, Path(__file__).resolve().parents[2])
    refusable = ("bench_amp", "bench_amp_graph") if device == "cpu" else ()  # cuda_graph (and amp on most CPUs)
    bad = [n for n, s in report["stages"].items()
           if not (s["status"] in ("ok", "passed") or (s["status"] == "refused" and n in refusable))]
    print(f"gpu check: {out / JSON_NAME}, {out / MD_NAME}; "
          + (f"not ok: {', '.join(bad)}" if bad else "every stage ok"))
    return 1 if bad else 0


def main(argv: Optional[list[str]] = None) -> int:
    a = parser().parse_args(argv)
    return run_check(a.device, a.out, a.size, a.budget, a.check_args, a.out_checked)


if __name__ == "__main__":
    sys.exit(main())
