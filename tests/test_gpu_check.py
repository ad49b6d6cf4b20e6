"""tools/gpu_check.sh cannot rot: CI runs it on the CPU at micro size and reads what it wrote;
the report's assembly is checked on made-up stage results (a cut-off run included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posrnn_cli.measure import gpu_check, gpu_check_ensemble, gpu_check_factors

from conftest import ROOT
GPU_TESTS = {"test_cuda_graph_gives_the_eager_weights_within_rounding",
             "test_the_sync_free_sampler_never_trains_on_a_held_out_sequence",
             "test_amp_trains_to_the_same_place_as_fp32",
             "test_fused_adam_gives_the_same_run_within_rounding", "test_a_gpu_checkpoint_resumes_on_the_cpu_and_back",
             "test_two_runs_share_the_gpu_with_runs_per_gpu_2",
             "test_torchrun_with_one_process_trains_the_lm_on_the_mini_corpus",
             *(f"test_the_chunked_head_equals_the_plain_head_in_loss_and_gradients[{c}-dtype{d}-cuda]"
               for c in (1, 5, 37, 100) for d in (0, 1))}


def _script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "no-wheels")}
    env.pop("PYTHONPATH", None)  # the script puts the source tree on it itself
    return subprocess.run(["bash", "tools/gpu_check.sh", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow  # about a minute on 2 cores: nine Python processes, each importing torch
def test_the_gpu_check_runs_on_the_cpu_at_micro_size_and_writes_its_report(tmp_path):
    out = tmp_path / "out"
    r = _script(tmp_path, "--device", "cpu", "--out", str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    from posrnn_cli.measure import cost

    rep = json.loads((out / "gpu_check.json").read_text())
    assert rep["finished"] and rep["size"] == "micro" and rep["env"]["device"] == "cpu" and rep["env"]["cuda"] is None
    assert list(rep["stages"]) == ["factors", "tests", "ensemble", "bench_eager", "bench_amp", "bench_amp_graph",
                                   "train", "concurrent", "lm_step", "cost_cells"]
    lm, cells = rep["stages"]["lm_step"], rep["stages"]["cost_cells"]
    assert lm["status"] == "ok" and lm["result"][0]["ms_per_iter"] > 0 and "synthetic" in lm["result"][0]["corpus"]
    assert (cells["status"] == "ok"
            and [c["cell"] for c in cells["result"]] == ["recurrence-bound", "head-bound", "long sequence"])
    assert all(c["ms_per_iter"] > 0 and c["predicted_ms_per_iter"] > 0 for c in cells["result"])
    tests = rep["stages"]["tests"]["tests"]
    assert {t["test"] for t in tests} == GPU_TESTS  # every GPU test collected, each skipped with its reason
    assert all(t["outcome"] == "skipped" and "no CUDA device" in t["reason"] for t in tests)
    eager = rep["stages"]["bench_eager"]
    assert eager["status"] == "ok" and eager["result"]["device"] == "cpu" and eager["result"]["train_ms_per_iter"] > 0
    assert eager["result"]["reference_ms_per_iter"] > 0  # beside the reference loop
    graph = rep["stages"]["bench_amp_graph"]
    assert graph["status"] == "refused" and "needs a CUDA device" in graph["error"]  # off CUDA, in one line
    train = rep["stages"]["train"]
    assert train["status"] == "ok" and [c["step"] for c in train["curve"]] == [20, 40, 60] and train["it_per_s"] > 0
    assert [c["k"] for c in rep["stages"]["concurrent"]["result"]] == [1, 2]
    assert rep["gpu_ms_per_iter_rows"] == [] and rep["ensemble_k_rows"] == []  # a CPU figure never enters them
    assert rep["stages"]["factors"]["status"] == "ok"
    for name in ("gpu_ms_per_iter.json", "ensemble_k.json"):  # the committed rows, none added, and why
        doc = json.loads((out / name).read_text())
        committed = {"gpu_ms_per_iter.json": cost.TABLE, "ensemble_k.json": cost.ENSEMBLE_TABLE}[name]
        assert "not measured on a GPU" in doc["written_by"] and doc["rows"] == json.loads(committed.read_text())["rows"]
    assert (rep["figures"]
            and all(f["device"] == "cpu" and f["torch"] and f["date"] and "cuda" in f for f in rep["figures"]))
    md = (out / "gpu_check.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| stage")]
    assert len(rows) == len(rep["figures"]) and all(f"| cpu | {rep['env']['torch']} | - |" in ln for ln in rows)
    assert (out / "loss_curve.csv").read_text().splitlines()[0] == "step,loss,accuracy,elapsed_s"
    assert "gpu check:" in (out / "gpu_check.log").read_text()


def test_the_gpu_check_refuses_cuda_without_a_gpu_in_one_line(tmp_path):
    r = _script(tmp_path, "--device", "cuda", "--out", str(tmp_path / "out"))
    said = (r.stdout + r.stderr).strip().splitlines()
    assert (r.returncode == 1 and len(said) == 1
            and said[0].startswith("error: --device cuda but torch sees no CUDA device"))
    assert not (tmp_path / "out" / "gpu_check.json").exists()


def test_posrnn_gpu_check_takes_the_scripts_options_and_runs_the_same_check(tmp_path, capfd):
    """`posrnn gpu-check` is the module's check behind Typer: the same options (names), and the same
    outcome for the same command line (here the refusals, which cost no stage: the micro run is the
    slow test above)."""
    import torch
    from typer.main import get_command
    from typer.testing import CliRunner

    from posrnn_cli.cli import app

    cmd = get_command(app).commands["gpu-check"]
    ours = {o for p in cmd.params for o in p.opts if o != "--help"}
    theirs = {o for a in gpu_check.parser()._actions for o in a.option_strings if o not in ("-h", "--help")}
    assert ours == theirs == {"--device", "--out", "--size", "--budget", "--check-args", "--out-checked"}
    assert "--out-checked" not in CliRunner().invoke(app, ["gpu-check", "--help"]).output  # the script's, hidden
    lines = [["--budget", "5"], ["--device", "tpu"], ["--size", "huge", "--device", "cpu"], ["--check-args"]]
    if not torch.cuda.is_available():
        lines.append(["--device", "cuda"])  # refused: no CUDA device, before any stage
    for args in lines:
        argv = [*args, "--out", str(tmp_path / "out")]
        r = CliRunner().invoke(app, ["gpu-check", *argv])
        said = (r.output + capfd.readouterr().err).strip()
        try:
            code = gpu_check.main(argv)
        except SystemExit as e:  # argparse refuses a choice itself, in its own words
            code = e.code
        capfd.readouterr()
        assert r.exit_code == code == (0 if args == ["--check-args"] else 1 if "cuda" in args else 2), (args, said)
        assert (said == "" if code == 0 else len(said.splitlines()) == 1 and said.startswith("error: ")), said
    assert not (tmp_path / "out").exists()


def test_pytest_output_gives_each_tests_outcome_even_when_cut_off():
    out = "\n".join([
        "tests/test_gpu.py::test_a PASSED                       [ 33%]",
        "tests/test_gpu.py::test_b FAILED                       [ 66%]",
        "tests/test_gpu.py::test_c SKIPPED (no CUDA device)     [ 75%]",
        "tests/test_gpu.py::test_d SKIPPED                      [100%]",
        "FAILED tests/test_gpu.py::test_b - AssertionError: 1 != 2",
        "SKIPPED [1] tests/test_gpu.py:12: no CUDA device: GPU test"])
    got = gpu_check.parse_pytest(out)
    assert got == [{"test": "test_a", "outcome": "passed", "reason": None},
                   {"test": "test_b", "outcome": "failed", "reason": "AssertionError: 1 != 2"},
                   {"test": "test_c", "outcome": "skipped", "reason": "no CUDA device"},  # its own line's
                   {"test": "test_d", "outcome": "skipped", "reason": "no CUDA device: GPU test"}]  # the summary's
    assert gpu_check.parse_pytest(out.splitlines()[0]) == got[:1]  # a run stopped after the first test


def test_a_report_cut_off_mid_way_keeps_the_stages_that_ran(tmp_path):
    env = {"device": "NVIDIA H100 80GB HBM3", "device_kind": "cuda", "torch": "2.11.0+cu130", "cuda": "13.0",
           "cudnn": 91000, "python": "3.12.3", "host_cpu": "16-core x", "date": "2026-11-26 12:00 UTC"}
    stages = {"tests": {"status": "timed out", "seconds": 150.0, "tests": [
                  {"test": "test_a", "outcome": "passed", "reason": None}]},
              "bench_eager": {"status": "ok", "seconds": 30.0, "result": {
                  "train_ms_per_iter": 12.5, "train_tflops": 230.9, "flops_per_iter": 2.886e12, "config": {
                      "model": {"name": "lstm", "hidden_size": 512}, "task": {"vocab_size": 16384, "length": 64},
                      "train": {"batch_size": 512, "amp": False, "cuda_graph": False}}}},
              "bench_amp": {"status": "timed out", "seconds": 40.0},
              "train": {"status": "timed out", "seconds": 110.0, "curve": [
                  {"step": 50, "loss": 9.7, "accuracy": 0.0, "elapsed_s": 5.0},
                  {"step": 100, "loss": 9.2, "accuracy": 0.01, "elapsed_s": 7.5}], "it_per_s": 20.0,
                  "iterations_done": 100},
              "concurrent": {"status": "ok", "seconds": 60.0, "config": {
                  "model.name": "gru", "task.vocab_size": 32, "task.length": 64, "model.hidden_size": 512,
                  "train.batch_size": 512},
                             "result": [{"k": 1, "aggregate_it_per_s": 80.0, "ms_per_iter_per_run": 12.5,
                                         "speedup_vs_1": 1.0},
                                                        {"k": 2, "aggregate_it_per_s": 75.0,
                                                         "ms_per_iter_per_run": 26.7, "speedup_vs_1": 0.94}]}}
    gpu_check.write_report({"size": "paper", "budget_s": 470, "env": env, "stages": stages, "finished": False},
                           tmp_path)
    rep = json.loads((tmp_path / "gpu_check.json").read_text())
    figs = {(f["stage"], f["figure"]): f["value"] for f in rep["figures"]}
    assert figs[("tests", "test_a")] == "passed" and figs[("tests", "pytest -m gpu")] == "timed out"
    assert figs[("bench_eager", "ms / iteration")] == "12.50" and figs[("bench_amp", "status")] == "timed out"
    assert (figs[("train", "iterations / s")] == "20.0"
            and figs[("train", "loss, first → last log line")] == "9.7000 → 9.2000")
    assert all(f["device"] == "NVIDIA H100 80GB HBM3" and f["cuda"] == "13.0" for f in rep["figures"])
    md = (tmp_path / "gpu_check.md").read_text()
    assert "(not finished)" in md and "| NVIDIA H100 80GB HBM3 | 2.11.0+cu130 | 13.0 | 2026-11-26 12:00 UTC |" in md
    assert gpu_check.curve_rate(stages["train"]["curve"]) == 20.0
    # the bench row the dry run's estimate reads, ready for posrnn_cli/measure/gpu_ms_per_iter.json
    row, small = rep["gpu_ms_per_iter_rows"]
    assert row["kind"] == "H100" and row["date"] == "2026-11-26" and row["ms_per_iter"] == 12.5
    assert (row["model"], row["vocab"], row["amp"], row["flops_per_iter"], row["steps"]) == ("lstm", 16384, False,
                                                                                             2.886e12, 128)
    # one run of the concurrent stage: the small model that sets the latency floor
    assert (small["model"], small["vocab"], small["ms_per_iter"], small["steps"], small["amp"]) == ("gru", 32, 12.5,
                                                                                                    128, False)
    assert 0 < small["flops_per_iter"] < row["flops_per_iter"]
    from posrnn_cli.measure import cost

    rate = cost.gpu_rate("NVIDIA H100 80GB HBM3", True, [row])
    assert "measured on NVIDIA H100 80GB HBM3 (2026-11-26" in rate.source


# ---- the bare GPU machine, simulated -------------------------------------------------------------
#: what the GPU machine holds that posrnn uses (its torch is 2.11; the one here stands in)
GPU_MACHINE = ("torch", "typer", "rich", "pyyaml", "numpy", "matplotlib", "sentencepiece", "pytest")
OFFLINE = ("NewConnectionError", "Network is unreachable", "Temporary failure in name resolution",
           "Max retries exceeded", "ConnectTimeout", "ConnectionError", "ProxyError")


def _closure(names) -> list:
    """The installed distributions of ``names`` and everything they require (markers evaluated here)."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    seen, todo, out = set(), list(names), []
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue  # an optional requirement not installed here
        out.append(dist)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return out


def _bare_venv(path: Path) -> Path:
    """A venv (no pip) whose site-packages links only the GPU machine's packages and their
    requirements from this environment, in seconds and without the network."""
    import venv

    venv.EnvBuilder(with_pip=False, symlinks=True).create(path)
    site = next((path / "lib").glob("python3*/site-packages"))
    for dist in _closure(GPU_MACHINE):
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            src = Path(dist.locate_file(top))
            if src.exists() and not (site / top).exists():
                (site / top).symlink_to(src)
    return path / "bin" / "python"


@pytest.mark.slow  # a minute or more on 2 cores, most of it the wheel download and five torch imports
def test_a_bare_gpu_machine_venv_trains_from_the_wheel_folder_alone(tmp_path):
    """make gpu-wheels (for this Python), the folder installed with --no-index --no-deps as
    tools/gpu_check.sh does, then posrnn from the source tree in a venv holding only the GPU
    machine's packages: every module imports, and a micro training runs (an LSTM, Mamba and xLSTM)."""
    whl = tmp_path / "whl"
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    r = subprocess.run(["make", "-s", "gpu-wheels", f"WHL={whl}", f"GPU_PYTHON_VERSION={ver}",
                        f"PYTHON={sys.executable}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PIP_RETRIES": "0", "PIP_TIMEOUT": "15"})
    if r.returncode != 0 and any(s in r.stderr for s in OFFLINE):
        pytest.skip("the package registry is unreachable: make gpu-wheels cannot fill the wheel folder")
    assert r.returncode == 0, r.stderr[-2000:]
    wheels = {p.name.split("-")[0] for p in whl.glob("*.whl")}
    assert "limit 64 MiB" in r.stdout and wheels == {"rapidfuzz", "mambapy", "xlstm", "ruamel_yaml"}
    py = _bare_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PYTHONNOUSERSITE="1", PYTHONPATH=str(ROOT))
    train = ["-m", "posrnn_cli", "train", "--vocab-size", "6", "--length", "4", "--hidden-size", "8", "--batch-size",
             "8",
             "--iterations", "4", "--device", "cpu", "--threads", "1", "--set", "task.n_test=16", "--json"]
    bare = subprocess.run([py, *train, "--out", str(tmp_path / "r0")], env=env, capture_output=True, text=True,
                          cwd=tmp_path)
    assert bare.returncode != 0 and "rapidfuzz" in bare.stderr  # the venv really lacks it
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                    *map(str, whl.glob("*.whl"))], check=True, capture_output=True)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(site)])
    every = ("import importlib, pkgutil, posrnn_cli; assert posrnn_cli.__file__.startswith(%r); "
             "[importlib.import_module(m.name) for m in pkgutil.walk_packages(posrnn_cli.__path__, 'posrnn_cli.')]"
             % str(ROOT))
    r = subprocess.run([py, "-c", every], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    for model, extra in (("lstm", []), ("mamba", ["--set", "model.state_size=4"]), ("xlstm", [])):
        r = subprocess.run([py, *train, "--model", model, *extra, "--out", str(tmp_path / model)], env=env,
                           capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout.splitlines()[-1])["finished"]


def test_every_size_gives_commands_posrnn_accepts():
    """The paper size cannot run here, but its commands must parse: each is run with a last
    option that is refused only after every other one was read and the config resolved."""
    from typer.testing import CliRunner

    from posrnn_cli.cli import app
    from posrnn_cli.common.settings.config import resolve_config

    for size, spec in gpu_check.SIZES.items():
        for name, extra in gpu_check.BENCH_VARIANTS.items():
            r = CliRunner().invoke(app, ["bench", *spec["bench"], *extra, "--device", "cpu", "--json", "--iters", "0"])
            assert r.exit_code == 1 and r.output.startswith("error: --iters must be ≥ 1"), (size, name, r.output)
        r = CliRunner().invoke(app, ["train", "--task", "reverse", *spec["train"], "--device", "cpu", "--out",
                                     "never-written", "--json", "--iterations", "0"])
        assert r.exit_code == 1 and r.output.startswith("error: train.iterations must be at least 1"), (size, r.output)
        for _, opts in gpu_check_ensemble.CELLS[size]:
            for variant in gpu_check_ensemble.VARIANTS.values():
                r = CliRunner().invoke(app,
                                       ["bench", *opts, *variant, "--ensemble", gpu_check_ensemble.KS[size], "--device",
                                             "cpu", "--json", "--iters", "0"])
                assert r.exit_code == 1 and r.output.startswith("error: --iters must be ≥ 1"), (size, opts, r.output)
        options, ks, iters, warmup = spec["concurrent"]
        assert resolve_config(options=options).model.name == "gru" and ks[0] == 1 and iters >= 1 and warmup >= 0
    assert (gpu_check.SIZES["paper"]["concurrent"][1] == [1, 2, 4, 8]
            and sum(gpu_check.SIZES["paper"]["boxes"].values()) <= 480)


def test_the_ensemble_stage_runs_at_micro_size_on_the_cpu():
    """The GPU check's ensemble stage, as CI runs it: the CUDA equivalence tests collected (each
    skips off CUDA), then bench --ensemble for K = 1, 2 of a GRU, eager (amp +
    cuda_graph refused in one line off CUDA), and its report rows."""
    st = gpu_check_ensemble.stage_ensemble("cpu", "micro", 240, ROOT, gpu_check)
    assert st["status"] == "ok", st
    assert {t["test"].split("[")[0] for t in st["tests"]} == {
        "test_cuda_members_equal_their_solo_runs_in_float64",
        "test_cuda_members_equal_their_solo_runs_in_float32_within_rounding",
        "test_cuda_a_member_with_a_wrong_seed_fails_the_comparison"}
    assert all(t["outcome"] == "skipped" and "no CUDA device" in t["reason"] for t in st["tests"])
    eager = [b for b in st["bench"] if b["variant"] == "eager"]
    assert [b["cell"] for b in eager] == ["gru V=8"] and all(b["status"] == "ok" for b in eager)
    assert all([r["k"] for r in b["result"]["rows"]] == [1, 2]
               and all(r["it_per_s_in_all"] > 0 and r["peak_memory_mb"] > 0
                                                                    for r in b["result"]["rows"]) for b in eager)
    graph = [b for b in st["bench"] if b["variant"] == "amp+cuda_graph"]
    assert all(b["status"] == "refused" and "needs a CUDA device" in b["error"] for b in graph)
    rows = gpu_check_ensemble.ensemble_figures(st)
    assert any("K=2: it/s in all" in f for _, f, _ in rows) and all(stage == "ensemble" for stage, _, _ in rows)


def test_the_factors_stage_runs_first_and_fits_eight_minutes_at_its_cpu_rehearsal_size():
    """The measuring stage, as CI runs it (micro, CPU): each core's autocast dtype, the GRU in fp32
    and amp, the packing gain at K = 1, 2, 4, 8 beside solo, the LSTM and Elman rows, in that
    order; cuda_graph refused in one line off CUDA; within its box, well inside 8 minutes. No
    figure of it becomes a row off CUDA."""
    import time

    assert list(gpu_check.SIZES["paper"]["boxes"])[0] == "factors" and gpu_check.SIZES["paper"]["boxes"][
        "factors"] <= 8 * 60
    t0 = time.monotonic()
    st = gpu_check_factors.stage_factors("cpu", "micro", 480, gpu_check)
    assert st["status"] == "ok" and time.monotonic() - t0 < 8 * 60, st
    figs = st["result"]
    assert [f["figure"] for f in figs] == ["dtype", "cell", "cell", "ensemble", "cell", "cell", "cell", "cell", "cell"]
    assert [c["core"] for c in figs[0]["cores"]] == ["gru", "lstm", "elman"]
    assert all(c["autocast_dtype"] == "torch.bfloat16" and c["output_dtype"] == "torch.bfloat16" for c in
               figs[0]["cores"])  # posrnn's cores run in bf16 under amp, whatever autocast's own rule
    assert {c["core"]: c["module_alone_dtype"] for c in figs[0]["cores"]}["gru"] == "torch.float32"  # on a CPU
    cells = [f for f in figs if f["figure"] == "cell"]
    assert [(c["cell"], c["amp"], c["cuda_graph"]) for c in cells] == [(label, *sw) for label, _, sw in
                                                                        gpu_check_factors.CELLS]
    assert all("needs a CUDA device" in c["error"] for c in cells if c["cuda_graph"])
    assert all(c["ms_per_iter"] > 0 for c in cells if not c["cuda_graph"] and not c["amp"])
    ens = figs[3]
    assert [k["k"] for k in ens["rows"]] == [1, 2, 4, 8] and "needs a CUDA device" in ens["refused_amp_cuda_graph"]
    env = {"device": "cpu", "cuda": None, "torch": "x", "date": "2026-11-29 10:00 UTC"}
    assert gpu_check_factors.factor_rows(st, env, "cpu") == ([], [])
    rows = gpu_check_factors.factor_figures(st)
    assert any("packing gain, gru V=32, K=8 (eager)" in f for _, f, _ in rows)
    assert any(f.startswith("lstm under bf16 autocast") for _, f, _ in rows)


def test_a_cuda_runs_factor_rows_are_written_in_the_committed_format_and_priced_with_no_code_edit(tmp_path):
    """Made-up figures of the factors stage on a CUDA device (no GPU here) become rows of
    gpu_ms_per_iter.json and ensemble_k.json in --out, beside the committed rows; the cost model
    reads those files as they are and no longer prices the factors they measure over a range."""
    from posrnn_cli.measure import cost

    env = {"device": "NVIDIA H200", "device_kind": "cuda", "torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91000,
           "python": "3.12.3", "host_cpu": "16-core x", "date": "2026-12-01 12:00 UTC"}
    cell = {"figure": "cell", "length": 64, "hidden": 512, "batch": 512, "steps": 128}
    gru = {**cell, "cell": "gru V=32", "model": "gru", "vocab": 32, "flops_per_iter": 9.3e11}
    lstm = {**cell, "cell": "lstm V=256", "model": "lstm", "vocab": 256, "flops_per_iter": 1.2e12}
    elman = {**cell, "cell": "elman V=32", "model": "elman", "vocab": 32, "flops_per_iter": 3.2e11}
    figs = [{"figure": "dtype", "cores": [{"core": "gru", "autocast_dtype": "torch.bfloat16",
                                          "output_dtype": "torch.bfloat16", "ran_fp16": False,
                                          "module_alone_dtype": "torch.float16"}]},
            {**gru, "amp": False, "cuda_graph": False, "ms_per_iter": 11.0},
            {**gru, "amp": True, "cuda_graph": True, "ms_per_iter": 6.0},
            {"figure": "ensemble", "cell": "gru V=32", "amp": True, "cuda_graph": True, "vocab": 32, "length": 64,
             "hidden": 512, "batch": 512, "rows": [
                 {"k": k, "ms_per_step": 6.0 * k / g, "solo_it_per_s": 1000 / 6.0, "vs_solo_in_all": g}
                 for k, g in ((1, 1.0), (2, 1.7), (4, 2.6), (8, 3.4))]},
            {**gru, "amp": True, "cuda_graph": False, "ms_per_iter": 7.0},
            *[{**c, "amp": a, "cuda_graph": a, "ms_per_iter": ms} for c, a, ms in
              ((lstm, True, 8.0), (elman, True, 3.0), (lstm, False, 14.0), (elman, False, 5.0))]]
    report = {"size": "paper", "budget_s": 470, "env": env, "finished": False,
              "stages": {"factors": {"status": "timed out", "seconds": 150.0, "result": figs}}}
    gpu_check.write_report(report, tmp_path)
    table = cost.load_table(tmp_path / "gpu_ms_per_iter.json")
    gains = cost.load_table(tmp_path / "ensemble_k.json")
    assert table[:len(cost.load_table())] == cost.load_table() and len(table) == len(cost.load_table()) + 7
    new = table[len(cost.load_table()):]
    assert all(r["kind"] == "H200" and r["date"] == "2026-12-01" and r["cuda"] == "13.0" for r in new + gains)
    assert set(new[0]) == set(cost.load_table()[0])  # the committed rows' keys, no more, no fewer
    assert [(r["k"], r["gain"]) for r in gains] == [(1, 1.0), (2, 1.7), (4, 2.6), (8, 3.4)]
    rate = cost.gpu_rate("NVIDIA H200", True, table, ensemble=gains)
    from posrnn_cli.measure.gpu_model import row_work
    from dataclasses import replace

    for r in new:
        rate.model.ms_per_iter(replace(row_work(r), amp=True, cuda_graph=True))
        rate.model.ms_per_iter(replace(row_work(r), amp=False, cuda_graph=False))
    rate.model.pack_gain(5)
    assert rate.model.used == set()
    figures = {(f["stage"], f["figure"]): f["value"] for f in json.loads((tmp_path / "gpu_check.json").read_text())[
        "figures"]}
    assert figures[("factors", "gru under bf16 autocast: autocast dtype, posrnn's core, torch's module")] == (
        "torch.bfloat16, torch.bfloat16, torch.float16")
    assert figures[("factors", "packing gain, gru V=32, K=8 (amp+cuda_graph)")] == "3.40× solo"
