"""A run's identity (``common.numerics``): its config digest, the declared versions of its core,
task, form and procedures, the libraries and the device type decide whether it is current; module
names and source text do not, and the ``code.json`` records written before identities keep
reading as current under the versions declared now."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from posrnn_cli.common import catalog, numerics
from posrnn_cli.common.settings.config import RunConfig, dump_yaml, resolve_config
from posrnn_cli.common.stages.experiments import JOB_KINDS
from posrnn_cli.common.stages.sources import closure
from posrnn_cli.common.stages.pipeline_yaml import dvc_yaml
from posrnn_cli.common.files.rundir import code_differences, code_state, record_code
from posrnn_cli.profile_status import profile_status
from posrnn_cli.sweep.plan import plan

from conftest import ROOT
from fabricate import scratch
from test_pipeline import DVC, ENV

LOOP = ("loop",)
#: the records runs wrote before identities (a code fingerprint), as users' run directories hold them
LEGACY = {"train": {"module": "posrnn_cli.engine.train", "fingerprint": "d9e7c3299b25e580"},
          "ensemble": {"module": "posrnn_cli.engine.ensemble", "fingerprint": "5b0e7f3a91c2d4e6",
                       "ensemble": {"member": 0, "members": ["a", "b"]}},
          "extend": {"module": "posrnn_cli.engine.extend", "fingerprint": "0123456789abcdef"}}


def cfg_of(core: str = "gru", pe: str = "none", task: str = "reverse", device: str = "cpu") -> RunConfig:
    return resolve_config(options={"model.name": core, "model.pe": pe, "task.name": task, "train.device": device})


def bump(monkeypatch, registry: dict, name: str) -> None:
    monkeypatch.setitem(registry, name, replace(registry[name], version=registry[name].version + 1))


def test_a_record_holds_the_digest_versions_libraries_and_device_and_no_module(tmp_path):
    record_code(tmp_path, cfg_of("mamba", "sinusoidal"), LOOP, "cpu")
    rec = json.loads((tmp_path / "code.json").read_text())
    assert "posrnn_cli" not in json.dumps(rec)  # a rename or a move of code is no part of it
    assert rec["versions"] == {"core/mamba": 1, "task/reverse": 1, "pe/sinusoidal": 1, "loop": 1}
    assert rec["libraries"] == {"torch": version("torch"), "mambapy": numerics.library_version("mambapy")}
    assert rec["device"] == "cpu" and rec["config_digest"] == numerics.identity(cfg_of("mamba", "sinusoidal"), LOOP,
                                                                                 "cpu")["config_digest"]
    assert code_state(tmp_path, cfg_of("mamba", "sinusoidal"), LOOP) == "current"
    record_code(tmp_path, cfg_of("gru"), LOOP, "cpu")
    assert set(json.loads((tmp_path / "code.json").read_text())["libraries"]) == {"torch"}


def test_the_identity_is_computed_without_reading_the_source():
    """The staleness check runs no import-graph hashing: its closure holds no ``common.stages.sources``."""
    assert "posrnn_cli.common.stages.sources" not in closure("posrnn_cli.common.numerics")
    assert "posrnn_cli.common.stages.sources" not in closure("posrnn_cli.profile_status")


def runs(tmp_path: Path, cores=("gru", "lstm", "mamba"), device="cpu") -> dict[str, Path]:
    out = {}
    for core in cores:
        out[core] = tmp_path / core
        out[core].mkdir()
        record_code(out[core], cfg_of(core), LOOP, device)
    return out


def states(dirs: dict[str, Path]) -> dict[str, str]:
    return {core: code_state(d, cfg_of(core), LOOP) for core, d in dirs.items()}


def test_a_bumped_core_version_makes_exactly_its_runs_stale(tmp_path, monkeypatch):
    dirs = runs(tmp_path)
    assert set(states(dirs).values()) == {"current"}
    bump(monkeypatch, catalog.CORES, "gru")
    assert states(dirs) == {"gru": "other", "lstm": "current", "mamba": "current"}
    assert code_differences(dirs["gru"], cfg_of("gru"), LOOP) == ["versions.core/gru"]


def test_a_variant_versioned_apart_makes_exactly_the_runs_of_that_variant_stale(tmp_path, monkeypatch):
    """xLSTM's --no-conv took out the mLSTM's convolution only, then both blocks' (its ``no_conv``
    variant at version 2): xLSTM runs with the convolution off go stale, those with it on, and
    other cores' runs without theirs, stay current."""
    def cfg(core, conv):
        c = cfg_of(core)
        c.model.conv = conv
        return c

    made = {(core, conv): cfg(core, conv) for core in ("xlstm", "mamba") for conv in (True, False)}
    for (core, conv), c in made.items():
        d = tmp_path / f"{core}-{conv}"
        d.mkdir()
        record_code(d, c, LOOP, "cpu")
    assert made[("xlstm", False)] and numerics.identity(made[("xlstm", False)], LOOP, "cpu")["versions"][
        "core/xlstm/no_conv"] == 2
    assert "core/xlstm/no_conv" not in numerics.identity(made[("xlstm", True)], LOOP, "cpu")["versions"]
    xl = catalog.CORES["xlstm"]
    monkeypatch.setitem(catalog.CORES, "xlstm", replace(xl, variants=(("no_conv", 3),)))
    stale = {k for k, c in made.items() if code_state(tmp_path / f"{k[0]}-{k[1]}", c, LOOP) != "current"}
    assert stale == {("xlstm", False)}
    assert code_differences(tmp_path / "xlstm-False", made[("xlstm", False)], LOOP) == ["versions.core/xlstm/no_conv"]
    # a record made before identities reads as the baseline: version 1 of the variant, so stale now
    base = numerics.identity(made[("xlstm", False)], LOOP, "cpu")
    legacy = {"module": "posrnn_cli.engine.train", "fingerprint": "a1b2c3d4"}
    assert numerics.differences(legacy, base) == ["versions.core/xlstm/no_conv"]


def test_a_bumped_task_form_or_loop_version_makes_exactly_its_runs_stale(tmp_path, monkeypatch):
    record_code(tmp_path, cfg_of("gru", "sinusoidal"), LOOP, "cpu")
    bump(monkeypatch, catalog.PE_FORMS, "none")
    bump(monkeypatch, catalog.TASKS, "sort")
    assert code_state(tmp_path, cfg_of("gru", "sinusoidal"), LOOP) == "current"
    bump(monkeypatch, catalog.PE_FORMS, "sinusoidal")
    assert code_differences(tmp_path, cfg_of("gru", "sinusoidal"), LOOP) == ["versions.pe/sinusoidal"]
    monkeypatch.setitem(numerics.PROCEDURES, "loop", numerics.Procedure("the loop", 2))
    assert code_differences(tmp_path, cfg_of("gru", "sinusoidal"), LOOP) == ["versions.loop", "versions.pe/sinusoidal"]


@pytest.mark.parametrize("package, stale", [("torch", {"gru", "lstm", "mamba"}), ("mambapy", {"mamba"})])
def test_a_changed_library_version_makes_exactly_the_runs_that_compute_with_it_stale(tmp_path, monkeypatch,
                                                                                    package, stale):
    dirs = runs(tmp_path)
    real = numerics.library_version
    monkeypatch.setattr(numerics, "library_version", lambda p: "0.0.1" if p == package else real(p))
    assert {c for c, s in states(dirs).items() if s == "other"} == stale
    assert code_differences(dirs["mamba"], cfg_of("mamba"), LOOP) == [f"libraries.{package}"]


def test_a_run_trained_on_another_device_type_is_stale_here(tmp_path):
    dirs = runs(tmp_path, ("gru",), device="cuda")
    assert code_differences(dirs["gru"], cfg_of("gru"), LOOP) == ["device"]
    assert code_state(dirs["gru"], cfg_of("gru", device="cuda:0"), LOOP) == "current"


def test_a_record_of_another_config_is_stale(tmp_path):
    record_code(tmp_path, cfg_of("gru"), LOOP, "cpu")
    other = cfg_of("gru")
    other.train.iterations += 1
    assert code_differences(tmp_path, other, LOOP) == ["config_digest"]
    other.train.threads = 1  # a runtime key is not what the run computes
    assert code_differences(tmp_path, cfg_of("gru"), LOOP) == []


@pytest.mark.parametrize("kind", list(LEGACY))
def test_todays_records_read_as_current_under_the_versions_declared_now(tmp_path, monkeypatch, kind):
    """No run is retrained for the change of record: a code fingerprint reads as made under the
    baseline versions, this machine's libraries and device; a later bump makes it stale."""
    (tmp_path / "code.json").write_text(json.dumps(LEGACY[kind]) + "\n")
    procedures = ("loop", "extension") if kind == "extend" else LOOP
    assert code_state(tmp_path, cfg_of("gru"), procedures) == "current"
    bump(monkeypatch, catalog.CORES, "lstm")
    assert code_state(tmp_path, cfg_of("gru"), procedures) == "current"
    bump(monkeypatch, catalog.CORES, "gru")
    assert code_differences(tmp_path, cfg_of("gru"), procedures) == ["versions.core/gru"]


GRID = {"cells": [{"model": "gru", "vocab": 4}, {"model": "lstm", "vocab": 4}], "pe": ["none", "sinusoidal"],
        "seeds": [1], "length": 4, "hidden": 8, "iterations": 4}


def finished_runs(tmp_path: Path, legacy: bool) -> Path:
    """The grid's runs on disk, finished (config, a checkpoint at the last step) with a record as
    a run trained today (``legacy``: before identities) writes it."""
    params = scratch(tmp_path, fig2=GRID)
    for job in plan(params, "t", ["fig2"], tmp_path / "runs" / "t"):
        run, cfg = Path(job.run_dir), job.run_config()
        (run / "checkpoints").mkdir(parents=True)
        (run / "config.yaml").write_text(dump_yaml(cfg))
        (run / "checkpoints" / f"step_{cfg.train.iterations:07d}.pt").write_bytes(b"weights")
        if legacy:
            (run / "code.json").write_text(json.dumps(LEGACY["train"]) + "\n")
        else:
            record_code(run, cfg, JOB_KINDS[job.kind].numerics, cfg.train.device)
    return params


def stale(params: Path, root: Path) -> int:
    (row,) = profile_status(params, "t", root / "runs" / "t")
    assert row.counts["finished"] == 4
    return row.counts["stale"]


@pytest.mark.parametrize("legacy", [False, True])
def test_status_counts_exactly_the_affected_runs_stale(tmp_path, monkeypatch, legacy):
    params = finished_runs(tmp_path, legacy)
    assert stale(params, tmp_path) == 0
    bump(monkeypatch, catalog.CORES, "lstm")
    assert stale(params, tmp_path) == 2  # the two LSTM runs, not the GRU ones
    monkeypatch.undo()
    real = numerics.library_version
    monkeypatch.setattr(numerics, "library_version", lambda p: "0.0.1" if p == "torch" else real(p))
    assert stale(params, tmp_path) == (0 if legacy else 4)  # a record from before names no torch version


def test_a_run_resumed_to_more_iterations_records_its_new_config(tmp_path):
    from posrnn_cli.engine.train import train

    sets = {"task.vocab_size": 4, "task.length": 4, "task.n_test": 16, "model.hidden_size": 8, "train.iterations": 4,
            "train.batch_size": 4, "train.warmup": 1, "train.device": "cpu"}
    cfg = resolve_config(options=sets)
    train(cfg, tmp_path / "run", progress=False)
    first = json.loads((tmp_path / "run" / "code.json").read_text())
    longer = resolve_config(options={**sets, "train.iterations": 6})
    train(longer, tmp_path / "run", resume=True, progress=False)
    rec = json.loads((tmp_path / "run" / "code.json").read_text())
    assert rec == {**first, "config_digest": numerics.identity(longer, LOOP, "cpu")["config_digest"]}
    assert code_state(tmp_path / "run", longer, LOOP) == "current"


def test_stability_values_of_today_are_kept_and_redone_when_their_version_is_bumped(tmp_path, monkeypatch):
    from posrnn_cli.engine.train import train
    from posrnn_cli.sweep import jobs
    from posrnn_cli.sweep.plan import Job

    sets = {"task.vocab_size": 8, "task.length": 5, "task.n_test": 16, "task.rarity": 0.25, "model.name": "lstm",
            "model.hidden_size": 8, "train.iterations": 4, "train.batch_size": 8, "train.warmup": 1,
            "train.checkpoint_every": 2, "train.device": "cpu"}
    train(resolve_config(options=sets), tmp_path / "run", progress=False)
    opts = {"source": str(tmp_path / "run"), "triplets": 4, "chunk_size": 4, "seed": 0, "device": "cpu"}
    job = Job("stability", "c", "stability", str(tmp_path / "out"), None, opts)
    (tmp_path / "out").mkdir()
    assert jobs.run_stability(job)["stability"].endswith("arrays")
    meta = tmp_path / "out" / "stability_meta.json"
    rec = json.loads(meta.read_text())
    assert rec["code"]["versions"] == {"core/lstm": 1, "task/reverse": 1, "pe/sinusoidal": 1, "stability": 1}
    meta.write_text(json.dumps({**rec, "code": "a1b2c3d4e5f60718"}))  # as a record from before identities holds it
    assert jobs.run_stability(job) == {"stability": "skipped (up to date)"}
    monkeypatch.setitem(numerics.PROCEDURES, "stability", numerics.Procedure("the analysis", 2))
    assert jobs.run_stability(job)["stability"].endswith("arrays")
    assert json.loads(meta.read_text())["code"]["versions"]["stability"] == 2
    assert jobs.run_stability(job) == {"stability": "skipped (up to date)"}


def test_numerics_json_is_what_the_declared_versions_give(tmp_path, monkeypatch):
    """numerics.json (the versions the DVC stages read) is written by `posrnn dvc-yaml`; a bump
    without it written again, or an edit by hand, fails here."""
    assert numerics.check_numerics_table(ROOT / "numerics.json") is None
    table = json.loads((ROOT / "numerics.json").read_text())
    assert {n: v for n, v in table["core"].items() if "/" not in n} == {n: e.version for n, e in catalog.CORES.items()}
    assert {n: v for n, v in table["core"].items() if "/" in n} == {f"{n}/{k}": v for n, e in catalog.CORES.items()
                                                                  for k, v in e.variants}
    assert table["loop"] == 1
    bump(monkeypatch, catalog.CORES, "gru")
    assert "differs from the declared numerics versions" in numerics.check_numerics_table(ROOT / "numerics.json")
    assert numerics.check_numerics_table(tmp_path / "numerics.json").endswith("write it with posrnn dvc-yaml")


def test_dvc_reruns_a_training_stage_when_a_version_is_bumped_and_not_when_code_moves(tmp_path, monkeypatch):
    """The train stage as `posrnn dvc-yaml` writes it (its command and outputs made trivial): a
    module renamed leaves it up to date, a bumped core version (numerics.json written again)
    does not, and dvc.lock records the versions themselves."""
    if not Path(DVC).exists():
        pytest.skip("dvc is not installed")
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "posrnn_cli", repo / "posrnn_cli", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("params.yaml", "numerics.json"):
        shutil.copy(ROOT / name, repo / name)
    stage = yaml.safe_load(dvc_yaml())["stages"]["train"]
    stage["do"] = {**stage["do"], "cmd": "echo trained > out-${item}.txt", "outs": ["out-${item}.txt"]}
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": stage}}))
    dvc = lambda *a: subprocess.run([DVC, *a], cwd=repo, env=ENV, capture_output=True, text=True, timeout=300)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    assert dvc("init", "-q").returncode == 0
    assert dvc("repro").returncode == 0
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]["train@lite"]
    assert lock["params"]["numerics.json"]["core"]["gru"] == 1 and lock["params"]["numerics.json"]["loop"] == 1
    results = repo / "posrnn_cli" / "common" / "results"
    (results / "stats.py").rename(results / "statistics.py")
    assert "up to date" in dvc("status").stdout
    bump(monkeypatch, catalog.CORES, "gru")
    (repo / "numerics.json").write_text(numerics.numerics_table())
    assert "numerics.json" in dvc("status").stdout


def test_the_lm_corpus_of_today_is_kept_and_redone_when_its_version_is_bumped(tmp_path, monkeypatch):
    from posrnn_cli.lm import tokenizer
    from posrnn_cli.sweep import jobs
    from posrnn_cli.sweep.plan import Job

    seen = []
    real = tokenizer.train_tokenizer
    monkeypatch.setattr(tokenizer, "train_tokenizer", lambda *a, **k: seen.append(1) or real(*a, **k))
    opts = {"data_dir": str(ROOT / "data" / "wikitext-mini"), "vocab_size": 300, "max_tokens": 32, "threads": 1}
    job = Job("lm_data", "corpus", "lm_data", str(tmp_path / "lm_data"), None, opts)
    jobs.run_lm_data(job)
    meta = tmp_path / "lm_data" / "lm_data_meta.json"
    rec = json.loads(meta.read_text())
    assert rec["code"] == {"lm_data": 1, "sentencepiece": version("sentencepiece")}
    meta.write_text(json.dumps({k: v for k, v in rec.items() if k != "code"}))  # as a corpus prepared before it
    assert jobs.run_lm_data(job) == {"lm_data": "skipped (up to date)"} and len(seen) == 1
    monkeypatch.setitem(numerics.PROCEDURES, "lm_data", numerics.Procedure("the LM data", 2))
    jobs.run_lm_data(job)
    assert len(seen) == 2 and json.loads(meta.read_text())["code"]["lm_data"] == 2


def test_a_run_with_amp_records_the_amp_version_and_runs_made_under_the_old_amp_are_stale(tmp_path):
    """``amp`` 2: the recurrent cores run in bf16 explicitly under autocast. A run with train.amp
    from before (a code fingerprint: the baseline, 1) is stale; a run without amp never records it."""
    amp = resolve_config(options={"model.name": "gru", "train.amp": True, "train.device": "cpu"})
    assert numerics.identity(amp, LOOP, "cpu")["versions"]["amp"] == numerics.PROCEDURES["amp"].version == 2
    assert "amp" not in numerics.identity(cfg_of("gru"), LOOP, "cpu")["versions"]
    for name, cfg in (("amp", amp), ("fp32", cfg_of("gru"))):
        d = tmp_path / name
        d.mkdir()
        (d / "code.json").write_text(json.dumps(LEGACY["train"]))
        assert code_differences(d, cfg, LOOP) == (["versions.amp"] if name == "amp" else [])
