"""Defaults that fit the machine: the CPU threads of a standalone command and Mamba's state size
on a CPU (``common.host.machine``), chosen when the command line leaves them, printed in the run
header, and never over an explicit value."""

from __future__ import annotations

import pytest
import torch
import yaml
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.cli.common import given_keys
from posrnn_cli.common.host import machine
from posrnn_cli.common.settings.config import RunConfig, resolve_config
from posrnn_cli.common.host.machine import choose_threads, fit_to_machine, is_small_model, state_size_for

runner = CliRunner()
from conftest import tiny_train

TINY = tiny_train()


def test_an_explicit_thread_count_always_wins():
    assert choose_threads(3, small=True, cores=2, load=9.0).n == 3
    assert choose_threads(3, cores=2, load=0.0).header() == "threads: 3 (--threads)"


@pytest.mark.parametrize("cores, load, small, n", [
    (2, 1.0, False, 1), (2, 0.2, False, 2), (8, 2.6, False, 5), (8, 30.0, False, 1), (4, 0.0, True, 1),
    (1, 0.0, False, 1),
])
def test_threads_default_to_the_free_cores_or_one_for_a_small_model(cores, load, small, n):
    assert choose_threads(None, small=small, cores=cores, load=load).n == n


def test_the_header_says_how_the_count_was_chosen():
    assert choose_threads(None, cores=2, load=1.0).header() == "threads: 1 (auto: 1 of 2 cores free)"
    assert choose_threads(None, small=True, cores=4,
                          load=0.0).header() == "threads: 1 (auto: a small model; 4 of 4 cores free)"


def test_small_models_are_the_toy_sizes_not_the_papers():
    assert is_small_model(128, 64)  # the guided tour
    assert not is_small_model(512, 512)  # the paper's LSTM
    assert not is_small_model(128, 256)


def test_mamba_state_size_is_small_on_a_cpu_and_the_configured_one_on_cuda():
    from posrnn_cli.common.catalog import CORES

    assert CORES["mamba"].cpu_state_size == 4 and CORES["s4d"].cpu_state_size is None
    assert state_size_for("cpu", 64, 4)[0] == 4
    assert state_size_for("cuda", 64, 4)[0] == 64
    assert state_size_for("cpu", 2, 4)[0] == 2  # already small: kept
    assert state_size_for("cpu", 64, None)[0] == 64


def _fit(options: dict, sets=None, device="cpu"):
    options = {**options, "train.device": device}
    cfg = resolve_config(None, options, sets)
    lines = fit_to_machine(cfg, device, given_keys(options, sets))
    return cfg, lines


def test_mamba_on_a_cpu_gets_state_size_4_unless_one_is_given_and_s4d_keeps_its_own(monkeypatch):
    monkeypatch.setattr(machine, "load_average", lambda: 0.0)
    cfg, lines = _fit({"model.name": "mamba"})
    assert cfg.model.state_size == 4 and any("state_size: 4 (auto" in ln for ln in lines)
    assert _fit({"model.name": "mamba", "model.state_size": 64})[0].model.state_size == 64  # --state-size 64
    assert _fit({"model.name": "mamba"}, ["model.state_size=16"])[0].model.state_size == 16
    assert _fit({"model.name": "s4d"})[0].model.state_size == RunConfig().model.state_size
    if not torch.cuda.is_available():
        return
    assert _fit({"model.name": "mamba"}, device="cuda")[0].model.state_size == RunConfig().model.state_size


def test_train_prints_the_thread_choice_and_trains_as_with_that_count_given(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "load_average", lambda: 1.0)
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    r = runner.invoke(app, ["train", *TINY, "--out", str(tmp_path / "auto")])
    assert r.exit_code == 0, r.output
    assert "threads: 1 (auto: a small model; 1 of 2 cores free)" in r.output
    assert yaml.safe_load((tmp_path / "auto" / "config.yaml").read_text())["train"]["threads"] == 1
    r = runner.invoke(app, ["train", *TINY, "--threads", "1", "--out", str(tmp_path / "given")])
    assert r.exit_code == 0 and "threads: 1 (--threads)" in r.output, r.output
    a = torch.load(tmp_path / "auto" / "checkpoints" / "step_0000006.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "given" / "checkpoints" / "step_0000006.pt", weights_only=False)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_every_command_that_computes_takes_threads(tmp_path):
    run = tmp_path / "run"
    assert runner.invoke(app, ["train", *TINY, "--out", str(run), "--json"]).exit_code == 0
    before = torch.get_num_threads()
    try:
        for argv in (["eval", str(run)], ["stability", str(run), "--triplets", "4", "--out", str(tmp_path / "s.csv")]):
            torch.set_num_threads(2)
            r = runner.invoke(app, [*argv, "--threads", "1"])
            assert r.exit_code == 0 and torch.get_num_threads() == 1, (argv, r.output)
    finally:
        torch.set_num_threads(before)
    r = runner.invoke(app,
                      ["extend-vocab", str(run), "--extra-vocab", "4", "--iterations", "2", "--out",
                       str(tmp_path / "ext"),
                            "--threads", "1"])
    assert r.exit_code == 0 and "threads: 1 (--threads)" in r.output, r.output
    assert yaml.safe_load((tmp_path / "ext" / "config.yaml").read_text())["train"]["threads"] == 1
    for cmd in (["bench"], ["lm", "train"], ["lm", "eval"]):
        assert "--threads" in runner.invoke(app, [*cmd, "--help"]).output


def test_the_header_comes_only_once_every_check_has_passed(tmp_path):
    r = runner.invoke(app, ["train", *TINY, "--vocab-size", "1", "--out", str(tmp_path / "bad")])
    assert r.exit_code == 1 and r.output.startswith("error: ") and "threads:" not in r.output, r.output


def test_mamba_trains_at_its_cpu_state_size(tmp_path):
    pytest.importorskip("mambapy")
    argv = [a if a != "gru" else "mamba" for a in TINY]
    r = runner.invoke(app, ["train", *argv, "--iterations", "2", "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load((tmp_path / "m" / "config.yaml").read_text())["model"]["state_size"] == 4
    assert "--state-size 64" in r.output


def test_a_run_that_fails_after_the_header_still_has_one_line_on_stderr(tmp_path):
    r = runner.invoke(app, ["train", *TINY, "--lr", "1e300", "--out", str(tmp_path / "bad")])
    assert r.exit_code == 1 and "threads: 1" in r.stdout, r.output
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("error: training step 1 failed"), r.stderr


def test_the_library_fits_a_run_as_the_command_line_does():
    """Without the keys a user set, a key counts as set when it differs from the default; the
    fitting is idempotent, and a resumed run keeps its state size."""
    cfg = RunConfig()
    cfg.model.name = "mamba"
    assert any("state_size: 4 (auto" in ln for ln in fit_to_machine(cfg, "cpu")) and cfg.model.state_size == 4
    assert fit_to_machine(cfg, "cpu")[1:] == [] and cfg.model.state_size == 4  # once fitted, left alone
    kept = RunConfig()
    kept.model.name, kept.model.state_size = "mamba", 16
    fit_to_machine(kept, "cpu")
    assert kept.model.state_size == 16
    resumed = RunConfig()
    resumed.model.name = "mamba"
    fit_to_machine(resumed, "cpu", new_run=False)
    assert resumed.model.state_size == RunConfig().model.state_size
    assert fit_to_machine(RunConfig(), "cpu", {"train.threads"})[0].startswith("threads: ")


def test_posrnn_train_a_sweep_and_the_library_write_the_same_config(tmp_path):
    """``posrnn train --model mamba …`` on a CPU, ``engine.train.train(RunConfig(...))`` with the same
    settings, and a sweep's run of that cell write byte-identical config.yaml files (the state size
    fitted to the CPU in each)."""
    from posrnn_cli.engine.train import train

    opts = tiny_train(model="mamba", hidden_size=8, iterations=2, checkpoint_every=2, threads=1)
    r = runner.invoke(app, ["train", *opts, "--out", str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    cfg = resolve_config(None, {"task.name": "reverse", "model.name": "mamba", "task.vocab_size": 6, "task.length": 4,
                                "model.hidden_size": 8, "train.iterations": 2, "train.batch_size": 8, "train.seed": 0,
                                "train.device": "cpu", "train.checkpoint_every": 2, "task.n_test": 32,
                                "train.threads": 1})
    train(cfg, tmp_path / "lib", progress=False)
    cli_yaml = (tmp_path / "cli" / "config.yaml").read_text()
    assert yaml.safe_load(cli_yaml)["model"]["state_size"] == 4
    assert (tmp_path / "lib" / "config.yaml").read_text() == cli_yaml

    from fabricate import scratch
    from posrnn_cli.sweep.plan import plan

    from posrnn_cli.common.settings.config import RunConfig as RC, config_diff

    params = scratch(tmp_path, fig2={"cells": [{"model": "mamba", "vocab": 6}], "pe": ["sinusoidal"], "seeds": [0],
                                     "length": 4, "hidden": 8, "iterations": 2, "batch": 8,
                                     "warmup": yaml.safe_load(cli_yaml)["train"]["warmup"], "checkpoint_every": 2})
    (job,) = plan(params, "t", ["fig2"], tmp_path / "runs")
    assert job.run_config().model.state_size == 4
    assert config_diff(job.run_config(), RC.from_dict(yaml.safe_load(cli_yaml))) == []
