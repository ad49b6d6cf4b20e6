"""Small things of the command line a newcomer meets in the first hour: Ctrl-C before the first
checkpoint, near-miss names, one-line usage errors, completion of names, `posrnn status`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app, run

runner = CliRunner()
from conftest import ROOT, tiny_train

TINY = ["train", *tiny_train()]


def posrnn(argv, capsys):
    """Run the console entry point; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as e:
        run(argv)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_ctrl_c_before_the_first_checkpoint_advises_the_same_command_not_resume(tmp_path, monkeypatch):
    import posrnn_cli.engine.train as engine

    real = engine.build_run

    def interrupted(cfg, *where):  # where: the rank and world size
        raise KeyboardInterrupt  # Ctrl-C while the model is built, before the loop takes the signal

    monkeypatch.setattr(engine, "build_run", interrupted)
    out = tmp_path / "run"
    r = runner.invoke(app, [*TINY, "--out", str(out)])
    assert r.exit_code == 130 and "run the same command again" in r.output and "--resume" not in r.output, r.output
    assert not out.exists()  # nothing to resume: --resume would fail
    monkeypatch.setattr(engine, "build_run", real)
    assert runner.invoke(app, [*TINY, "--out", str(out), "--stop-after", "3", "--json"]).exit_code == 0
    monkeypatch.setattr(engine, "build_run", interrupted)
    r = runner.invoke(app, [*TINY, "--out", str(out), "--resume"])
    assert r.exit_code == 130 and f"posrnn train --out {out} --resume" in r.output, r.output


def test_extend_vocab_explains_its_rows_and_says_when_the_new_ids_were_not_learned(tmp_path, monkeypatch):
    import posrnn_cli.engine.extend as extend
    from posrnn_cli.engine.extend import TEST_SETS, not_learned

    run = tmp_path / "run"
    assert runner.invoke(app, [*TINY, "--out", str(run), "--json"]).exit_code == 0
    scores = {"token_accuracy": 0.5, "token_accuracy_ci": [0.4, 0.6], "sequence_accuracy": 0.1,
              "damerau_levenshtein": 1.0}

    def fake(*args, **kw):  # what an extension returns; its new ids scored 0 (or not)
        return {"vocab_size": 6, "extra_vocab": 4, "model": "gru", "pe": "none", "iterations": 20,
                **{key: dict(scores) for key, _, _ in TEST_SETS}, "new_ids": {**scores, "token_accuracy": fake.new}}

    monkeypatch.setattr(extend, "extend_vocab", fake)
    argv = ["extend-vocab", str(run), "--extra-vocab", "4", "--out", str(tmp_path / "ext")]
    for fake.new in (0.0, 0.25):
        r = runner.invoke(app, argv)
        assert r.exit_code == 0, r.output
        for _, label, about in TEST_SETS:
            assert f"{label}: {about}" in r.output
        assert max(len(line) for line in r.output.splitlines() if not line.startswith("warning")) <= 80
        assert ("warning: the new ids were not learned" in r.output) == (fake.new == 0), r.output
    advice = not_learned({"iterations": 20, "new_ids": {"token_accuracy": 0.0}}, "posrnn extend-vocab R --out E")
    assert advice.endswith("posrnn extend-vocab R --out E --force --iterations 1000")


# ---- help, completion, near misses -----------------------------------------------------------------
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from typer.main import get_command



def every_command(group=None, path=()):
    group = group or get_command(app)
    for name, cmd in getattr(group, "commands", {}).items():
        yield (*path, name)
        yield from every_command(cmd, (*path, name))


def test_help_says_nothing_is_listed_above_and_devices_have_one_metavar():
    devices = 0
    for path in every_command():
        text = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"}).output
        if path != ("train",):  # train's help lists the tasks, models and encodings
            assert "listed above" not in text, path
        assert "--device TEXT" not in text, path
        devices += "--device DEVICE" in text
    assert devices >= 7  # train, eval, compare, stability, extend-vocab, bench, lm train, lm eval


def complete(words: str) -> list[str]:
    env = {**os.environ, "_POSRNN_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - 1)}
    r = subprocess.run([sys.executable, "-c", "from posrnn_cli.cli import app; app(prog_name='posrnn')"], env=env,
                       cwd=ROOT, capture_output=True, text=True)
    return r.stdout.split()


def test_completion_offers_profile_and_experiment_names():
    profiles = list(yaml.safe_load((ROOT / "params.yaml").read_text())["profiles"])
    assert complete("posrnn profile use l") == [p for p in profiles if p.startswith("l")] and "lite" in profiles
    assert complete("posrnn sweep --profile bey") == [p for p in profiles if p.startswith("bey")]
    assert complete("posrnn sweep f") == ["fig2", "forms"]
    assert "posrnn --install-completion" in (ROOT / "docs" / "cli.md").read_text()


def test_a_near_miss_name_is_suggested(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    r = runner.invoke(app, ["scorecard", "lit"])
    assert r.exit_code == 1 and "unknown profile 'lit' (did you mean 'lite'?)" in r.output, r.output
    code, out, err = posrnn(["train", "--model", "GRU", "--out", "x"], capsys)
    assert code == 2 and "Value error" not in err and "did you mean 'gru'?" in err and len(err.splitlines()) == 1, err
    assert not (ROOT / "x").exists()


# ---- posrnn status ----------------------------------------------------------------------------------
def test_status_counts_each_experiments_runs_and_names_the_next_command(tmp_path, monkeypatch):
    from posrnn_cli.engine.train import train
    from posrnn_cli.sweep.plan import plan

    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    grid = {"cells": [{"model": "gru", "vocab": 4}, {"model": "gru", "vocab": 6}], "pe": ["none"], "seeds": [1],
            "length": 4, "hidden": 8, "iterations": 4, "batch": 8, "warmup": 1, "checkpoint_every": 2}
    prof = {"device": "cpu", "threads": 1, "n_test": 32, "fig2": grid}
    data = {k: base[k] for k in ("task", "model", "train")} | {"profile": ["t"], "profiles": {"t": prof, "u": prof}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.chdir(tmp_path)

    def status():
        r = runner.invoke(app, ["status", "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)

    s = status()
    assert s["profile"] == "t" and s["active"] and s["experiments"][0]["counts"]["not started"] == 2
    assert s["next"] == "dvc repro"
    first, second = plan(Path("params.yaml"), "t", ["fig2"])
    train(first.run_config(), Path(first.run_dir), progress=False)
    counts = status()["experiments"][0]["counts"]
    assert (counts["finished"], counts["not started"]) == (1, 1)
    other = second.run_config()
    other.train.seed = 99
    train(other, Path(second.run_dir), progress=False, stop_after=2)
    s = status()
    assert s["experiments"][0]["counts"]["other config"] == 1 and s["next"] == "posrnn sweep fig2 -p t --dry-run"
    code = Path(first.run_dir) / "code.json"
    code.write_text(json.dumps({**json.loads(code.read_text()), "device": "cuda"}))  # trained on another device type
    train(second.run_config(), Path(second.run_dir), force=True, progress=False)
    s = status()
    assert s["experiments"][0]["counts"] == {"finished": 2, "unfinished": 0, "not started": 0, "other config": 0,
                                             "stale": 1}
    assert s["next"] == "posrnn sweep fig2 -p t --retrain-stale"
    train(first.run_config(), Path(first.run_dir), force=True, progress=False)
    s = status()
    assert s["next"] == "dvc repro" and s["why"].startswith("the runs are trained")
    (tmp_path / "results" / "t" / "tables").mkdir(parents=True)
    assert status()["next"] == "posrnn scorecard t"
    text = runner.invoke(app, ["status", "--profile", "u"]).output
    assert "profile u: runs under runs/u" in text and "next: posrnn profile use u && dvc repro" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_status_on_a_fresh_clone_names_the_committed_results_before_any_run(monkeypatch):
    """Nothing trained, the profile's scorecard committed: read it now; dvc repro re-makes it."""
    monkeypatch.chdir(ROOT)
    r = runner.invoke(app, ["status", "--profile", "lite", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    if any(e["counts"]["finished"] or e["counts"]["unfinished"] for e in s["experiments"] if e["trains"]):
        pytest.skip("this checkout has trained lite runs")
    assert s["next"] == "posrnn scorecard lite" and "results/lite" in s["why"] and "dvc repro" in s["why"]
    text = runner.invoke(app, ["status", "--profile", "lite"]).output
    assert "next: posrnn scorecard lite" in text and max(len(line) for line in text.splitlines()) <= 80


def test_profile_use_suggests_the_profile_a_typo_meant(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("profile: [lite]\nprofiles:\n  lite: {device: cpu}\n  micro: {device: cpu}\n")
    r = runner.invoke(app, ["profile", "use", "lit", "--params", str(params)])
    assert r.exit_code != 0 and "did you mean 'lite'?" in r.output and len(r.output.strip().splitlines()) == 1


def test_status_imports_no_torch():
    code = ("import sys\nfrom posrnn_cli.cli import run\ntry:\n    run(['status'])\nexcept SystemExit as e:\n"
            "    assert 'torch' not in sys.modules, 'torch imported'\n    sys.exit(e.code)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "next: " in r.stdout, r.stdout + r.stderr


def test_an_interrupted_run_names_the_command_that_continues_it():
    from types import SimpleNamespace

    from posrnn_cli.common.settings.config import RunConfig
    from posrnn_cli.engine.train import Trainer

    cfg = RunConfig()
    run = SimpleNamespace(cfg=cfg, extra={}, run_dir=Path("runs/r"))
    assert Trainer.resume_command(run) == "posrnn train --out runs/r --resume"
    cfg.task.vocab_size, cfg.model.frozen_vocab = 32, 16
    run.extra = {"extended_from": "runs/pe/checkpoints/step_0004000.pt"}
    cfg.train.iterations, cfg.train.seed = 2000, 5
    assert Trainer.resume_command(run) == ("posrnn extend-vocab runs/pe/checkpoints/step_0004000.pt --extra-vocab 16 "
                                           "--iterations 2000 --seed 5 --out runs/r --resume")
    lm = SimpleNamespace(cfg=RunConfig(), extra={}, run_dir=Path("runs/lm"))
    lm.cfg.task.name, lm.cfg.task.data = "lm", "data/enc"
    assert Trainer.resume_command(lm) == "posrnn lm train --data data/enc --out runs/lm --resume"
