"""Parse once, bounded (fabricated inputs, beside the bad-input table): JSON nested 200,000 deep in
any run file gives one line and a non-zero exit from every reader (never a RecursionError); YAML
tags, directives and merge keys read as DVC reads them or are named in one line; a code record
naming an integer module leaves ``posrnn status`` working; a continuous task's test set beyond
the memory is refused before it is allocated."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posrnn_cli.analysis.aggregate import aggregate
from posrnn_cli.cli import app
from posrnn_cli.common.host import memory
from posrnn_cli.common.settings.config import RunConfig, parse_set, resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import MAX_JSON_DEPTH, loads_bounded, read_json
from posrnn_cli.common.files.rundir import log_entries
from posrnn_cli.common.files.rundir import code_state
from posrnn_cli.profile_status import is_stale
from posrnn_cli.sweep.plan import Job, plan

from conftest import tiny_train
from fabricate import scored_run, scratch
from test_params_as_dvc import dvc_reads, params

DEEP = "[" * 200_000 + "]" * 200_000


def one_line(r) -> str:
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code != 0 and len(lines) == 1 and "Traceback" not in r.output, r.output[-2000:]
    return lines[0]


def test_the_reader_caps_depth_and_never_recurses():
    assert loads_bounded("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x") is not None
    for text in (DEEP, "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), '{"a": ' * 5000 + "1" + "}" * 5000):
        with pytest.raises(PosrnnError, match=f"nests deeper than {MAX_JSON_DEPTH} levels"):
            loads_bounded(text, "x")


@pytest.fixture(scope="module")
def fabricated(tmp_path_factory) -> Path:
    """A runs root with one experiment of two scored runs (no training)."""
    import numpy as np

    root = tmp_path_factory.mktemp("bounded") / "runs"
    for seed in (1, 2):
        cfg = RunConfig.from_dict({"task": {"name": "reverse", "vocab_size": 6, "length": 4},
                                   "model": {"name": "gru", "hidden_size": 8},
                                   "train": {"seed": seed, "iterations": 4}})
        rng = np.random.default_rng(seed)
        scores = {k: rng.random(20) for k in ("token_accuracy", "sequence_accuracy", "damerau_levenshtein")}
        scored_run(root / "fig2" / f"r{seed}", cfg, scores)
    return root


@pytest.mark.parametrize("name",
                         ["eval.json", "metrics.jsonl", "../sweep.json", "../../stability/r1/stability_meta.json"])
def test_aggregate_refuses_a_deep_run_file_in_one_line(fabricated, tmp_path, name):
    root = tmp_path / "runs"
    shutil.copytree(fabricated, root)
    if "stability" in name:
        shutil.copytree(root / "fig2" / "r1", root / "stability" / "r1")
    (root / "fig2" / "r1" / name).write_text(DEEP + "\n")
    with pytest.raises(PosrnnError, match="nests deeper than"):
        aggregate(root, tmp_path / "tables", n_resamples=20,
                  experiments=["stability" if "stability" in name else "fig2"])
    assert not (tmp_path / "tables").exists()


def test_every_cli_reader_refuses_a_deep_file_in_one_line(fabricated, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(fabricated, root)
    (root / "fig2" / "r1" / "eval.json").write_text(DEEP)
    runner = CliRunner()
    assert "nests deeper than" in one_line(runner.invoke(app, ["aggregate", str(root), "--out", str(tmp_path / "t")]))
    run = tmp_path / "run"
    assert runner.invoke(app, ["train", *tiny_train(iterations=2), "--out", str(run)]).exit_code == 0
    (run / "eval.json").write_text(DEEP)  # compare reads it (evaluating only when it is not current)
    assert "nests deeper than" in one_line(runner.invoke(app, ["compare", str(run), str(run), "--device", "cpu"]))
    r = runner.invoke(app, ["eval", str(run), "--device", "cpu"])  # eval writes its own eval.json afresh, or refuses
    assert "Traceback" not in r.output and (r.exit_code == 0 or "nests deeper than" in one_line(r))
    (run / "metrics.jsonl").write_text(DEEP + "\n")
    with pytest.raises(PosrnnError, match="nests deeper than"):
        log_entries(run)
    (run / "eval.json").write_text(DEEP)
    with pytest.raises(PosrnnError, match="nests deeper than"):
        read_json(run / "eval.json")


def test_a_code_record_with_an_integer_module_or_deep_is_no_record(tmp_path):
    for text in ('{"module": 5, "fingerprint": "abc"}', DEEP, '{"module": "os", "fingerprint": "abc"}'):
        (tmp_path / "code.json").write_text(text)
        assert code_state(tmp_path, RunConfig(), ("loop",)) == "unknown"
        assert is_stale(Job("fig2", "r", "train", str(tmp_path), RunConfig().to_dict())) is False


def test_status_reads_a_run_whose_code_record_names_an_integer_module(tmp_path, monkeypatch):
    path = scratch(tmp_path, fig2={"cells": [{"model": "gru", "vocab": 4}], "pe": ["none"], "seeds": [1], "length": 4,
                                   "hidden": 8, "iterations": 4})
    monkeypatch.chdir(tmp_path)
    (job,) = plan(path, "t", ["fig2"])
    Path(job.run_dir).mkdir(parents=True)
    (Path(job.run_dir) / "code.json").write_text('{"module": 5, "fingerprint": "abc"}')
    r = CliRunner().invoke(app, ["status", "--profile", "t", "--params", str(path)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output


# ---- YAML as DVC reads it ---------------------------------------------------------------------------
@pytest.mark.parametrize("seed", ['!!int "0123"', "!!int '0123'", "!!int 0123"])
def test_a_tagged_seed_reads_as_dvc_reads_it(tmp_path, seed):
    path = params(tmp_path, seed=seed)
    (job,) = plan(path, "t", ["fig2"])
    assert job.config["train"]["seed"] == 123 == dvc_reads(path.read_text())["profiles"]["t"]["fig2"]["seeds"][0]
    assert parse_set(f"train.seed={seed}") == ("train.seed", 123)


def test_a_value_its_tag_cannot_hold_is_named_in_one_line(tmp_path):
    with pytest.raises(PosrnnError) as e:
        plan(params(tmp_path, seed='!!int "1:30"'), "t", ["fig2"])
    assert "is not valid YAML (a value cannot be read as its tag says" in str(e.value) and "\n" not in str(e.value)


def test_a_yaml_directive_reads_as_dvc_reads_it_and_a_bad_merge_key_is_named(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("%YAML 1.1\n---\ntrain: {seed: 0123}\n")
    assert resolve_config(path).train.seed == 83 == dvc_reads(path.read_text())["train"]["seed"]
    path = params(tmp_path)
    path.write_text(path.read_text() + "extra:\n  <<: 5\n")
    with pytest.raises(PosrnnError) as e:
        resolve_config(path)
    assert "expected a mapping or list of mappings for merging" in str(e.value) and "\n" not in str(e.value)


def test_a_continuous_test_set_beyond_the_memory_is_refused_naming_its_keys():
    cfg = resolve_config(options={"task.name": "continuous", "task.length": 4, "task.n_test": 10**7,
                                  "model.hidden_size": 8})
    with pytest.raises(PosrnnError, match=r"largest: the held-out test set.*lower task.n_test, task.length, task.dim"):
        memory.check_fits(memory.run_parts(cfg, 8, 4, 64, 64), "this run", available=6 * 10**9)


# ---- files that are not files ----------------------------------------------------------------------
def test_a_fifo_or_directory_as_the_latest_checkpoint_is_refused_without_opening_it(fabricated, tmp_path):
    import os
    import signal

    from posrnn_cli.engine.checkpoint import load_checkpoint

    root = tmp_path / "runs"
    shutil.copytree(fabricated, root)
    ckpt = next((root / "fig2" / "r1" / "checkpoints").iterdir())
    ckpt.unlink()
    os.mkfifo(ckpt)  # opened, it would block every reader until a writer came
    signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError("a reader opened the FIFO")))
    signal.alarm(20)
    try:
        with pytest.raises(PosrnnError, match="is not a regular file"):
            aggregate(root, tmp_path / "t", n_resamples=20)
        with pytest.raises(PosrnnError, match="is not a regular file"):
            load_checkpoint(ckpt)
        ckpt.unlink()
        ckpt.mkdir()
        with pytest.raises(PosrnnError, match="is not a regular file"):
            load_checkpoint(ckpt)
    finally:
        signal.alarm(0)
    assert not (tmp_path / "t").exists()
