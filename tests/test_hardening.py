"""What posrnn guarantees when things go wrong: LM runs through eval and compare, resuming a run
that never reached a checkpoint, training a finished run longer, stopping on a non-finite loss,
refusing non-finite settings, an honest error for a crafted checkpoint, compare's labels, a
clean stop on SIGINT, and kill -9 at random moments of a training run."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.engine.checkpoint import load_checkpoint
from posrnn_cli.common.files.rundir import list_checkpoints
from posrnn_cli.engine.train import train

from conftest import ROOT
POSRNN = [sys.executable, "-m", "posrnn_cli"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
SMALL = ["--model", "gru", "--vocab-size", "6", "--length", "4", "--hidden-size", "8", "--batch-size", "8",
         "--device", "cpu", "--threads", "1", "--set", "task.n_test=32"]
runner = CliRunner()


def cli(*argv: str):
    """(exit code, output); for a failure its stderr alone (a run's header goes to stdout)."""
    r = runner.invoke(app, list(argv))
    return r.exit_code, (r.stderr if r.exit_code else r.output)


def weights(run: Path) -> dict:
    return load_checkpoint(list_checkpoints(run)[-1][1])["model"]


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---- 1. language-model runs through eval and compare ------------------------------------------------
@pytest.fixture(scope="module")
def lm_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    data = root / "data"
    for argv in (["lm", "prepare", "--data-dir", str(ROOT / "data" / "wikitext-mini"), "--out", str(data)],
                 ["lm", "tokenizer", "--data", str(data), "--out", str(data / "tok"), "--vocab-size", "300"],
                 ["lm", "encode", "--data", str(data), "--tokenizer", str(data / "tok"), "--out", str(data / "enc"),
                  "--max-tokens", "32"]):
        code, out = cli(*argv)
        assert code == 0, out
    runs = []
    for pe in ("none", "sinusoidal"):
        code, out = cli("lm", "train", "--data", str(data / "enc"), "--pe", pe, "--hidden-size", "8", "--iterations",
                        "4",
                        "--batch-size", "4", "--device", "cpu", "--out", str(root / pe))
        assert code == 0, out
        runs.append(root / pe)
    return runs


def test_eval_and_compare_handle_language_model_runs(lm_runs):
    none, pe = lm_runs
    code, out = cli("eval", str(none), "--device", "cpu")
    assert code == 0 and "perplexity" in out, out
    first = (none / "eval.json").read_bytes()
    code, out = cli("compare", str(none), str(pe), "--device", "cpu")
    assert code == 0 and "perplexity" in out and "model.pe" in out, out
    assert json.loads((none / "eval.json").read_bytes())["perplexity"] == json.loads(first)["perplexity"]
    code, out = cli("lm", "eval", str(none), "--device", "cpu", "--json")
    assert code == 0 and json.loads(out)["perplexity"] > 1 and (none / "nll_by_position.csv").is_file()


def test_a_failed_eval_leaves_the_old_results(tmp_path):
    run = tmp_path / "run"
    assert cli("train", *SMALL, "--iterations", "10", "--out", str(run))[0] == 0
    assert cli("eval", str(run), "--device", "cpu")[0] == 0
    before = (run / "eval.json").read_bytes(), (run / "eval_sequences.npz").read_bytes()
    ckpt = list_checkpoints(run)[-1][1]
    ckpt.write_bytes(ckpt.read_bytes()[:100])  # truncated
    code, out = cli("eval", str(run), "--device", "cpu")
    assert code == 1 and out.startswith("error: ") and "refused" in out and len(out.splitlines()) == 1
    assert ((run / "eval.json").read_bytes(), (run / "eval_sequences.npz").read_bytes()) == before


# ---- 2. --resume before the first checkpoint ------------------------------------------------------
def test_resume_of_a_run_with_a_config_but_no_checkpoint_starts_from_step_zero(tmp_path):
    """What a kill before the first checkpoint leaves (a config, a log, no checkpoint): --resume
    trains it from step 0 with the saved config, to the same weights as an uninterrupted run."""
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert cli("train", *SMALL, "--iterations", "20", "--out", str(straight))[0] == 0
    assert cli("train", *SMALL, "--iterations", "20", "--out", str(killed), "--stop-after", "5")[0] == 0
    shutil.rmtree(killed / "checkpoints")  # as if killed before the first checkpoint
    code, out = cli("train", "--out", str(killed), "--resume", "--device", "cpu")
    assert code == 0, out
    assert same_weights(weights(straight), weights(killed))


# ---- 3. training a finished run longer ----------------------------------------------------------------
def test_a_finished_run_trains_longer_under_the_schedule_of_the_new_total(tmp_path):
    run = tmp_path / "run"
    assert cli("train", *SMALL, "--iterations", "30", "--checkpoint-every", "10", "--log-every", "10", "--out",
               str(run))[0] == 0
    code, out = cli("train", "--out", str(run), "--resume", "--iterations", "60")
    assert code == 0, out
    ckpt = load_checkpoint(list_checkpoints(run)[-1][1])
    assert ckpt["step"] == 60 and ckpt["config"].train.iterations == 60
    assert ckpt["extra"]["extensions"] == [{"at_step": 30, "iterations_before": 30, "iterations_after": 60}]
    log = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    lr = {x["step"]: x["lr"] for x in log}
    assert lr[30] == pytest.approx(0.0, abs=1e-12) and lr[40] > 1e-4  # the cosine of 60, from step 30 on
    code, out = cli("train", "--out", str(run), "--resume", "--iterations", "50")
    assert code == 1 and "already at step 60" in out


# ---- 4. a non-finite loss stops the run -------------------------------------------------------------
def test_a_non_finite_loss_stops_the_run_naming_the_step(tmp_path):
    run = tmp_path / "run"
    code, out = cli("train", *SMALL, "--iterations", "50", "--checkpoint-every", "1", "--lr", "1e37", "--out", str(run))
    assert code == 1 and out.startswith("error: non-finite loss or gradient at step 2:") and len(out.splitlines()) == 1
    assert [s for s, _ in list_checkpoints(run)] == [1]  # nothing written after the step that went wrong
    assert all(torch.isfinite(v).all() for v in weights(run).values())
    assert cli("eval", str(run), "--device", "cpu")[0] == 0  # the last checkpoint is usable
    code, out = cli("train", *SMALL, "--iterations", "50", "--lr", "3e38", "--out", str(tmp_path / "overflow"))
    assert code == 1 and out.startswith("error: training step 1 failed") and "Traceback" not in out


# ---- 5. non-finite settings ---------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["--lr", "nan"], ["--lr", "inf"], ["--set", "train.clip=.nan"], ["--rarity", "nan"],
                                  ["--set", "train.eps=-inf"]])
def test_non_finite_settings_are_refused_before_anything_is_written(tmp_path, argv):
    code, out = cli("train", *SMALL, "--iterations", "5", *argv, "--out", str(tmp_path / "run"))
    assert code == 1 and "must be a finite number" in out and len(out.splitlines()) == 1
    assert not (tmp_path / "run").exists()


# ---- 7. a crafted checkpoint ------------------------------------------------------------------------------
def test_a_crafted_checkpoint_is_refused_in_plain_words(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    run = tmp_path / "run" / "checkpoints"
    run.mkdir(parents=True)
    torch.save({"format": "posrnn-checkpoint", "payload": Evil()}, run / "step_0000001.pt")
    code, out = cli("eval", str(tmp_path / "run"), "--device", "cpu")
    assert code == 1 and len(out.splitlines()) == 1 and "refused" in out and "not loaded" in out
    assert "weights_only" not in out and "two options" not in out and "pwned" not in out


# ---- 8. compare names runs as given ---------------------------------------------------------------------
def test_compare_labels_runs_by_their_paths_and_titles_what_differs(tmp_path):
    a = tmp_path / "a"
    assert cli("train", *SMALL, "--iterations", "10", "--pe", "none", "--out", str(a))[0] == 0
    assert cli("eval", str(a), "--device", "cpu")[0] == 0
    shutil.copytree(a, tmp_path / "copy of a")  # its eval.json still says run_dir = …/a
    assert cli("train", *SMALL, "--iterations", "10", "--pe", "sinusoidal", "--out", str(tmp_path / "b"))[0] == 0
    code, out = cli("compare", str(tmp_path / "copy of a"), str(tmp_path / "b"), "--json")
    assert code == 0 and [r["label"] for r in json.loads(out)] == [str(tmp_path / "copy of a"), str(tmp_path / "b")]
    code, out = cli("compare", str(tmp_path / "copy of a"), str(tmp_path / "b"))
    assert "runs differing in model.pe" in out and "vanilla vs positional" not in out


# ---- 9. SIGINT: a checkpoint at the current step, and how to resume ----------------------------------------
@pytest.mark.slow
def test_sigint_stops_training_with_a_checkpoint_at_the_current_step(tmp_path):
    run = tmp_path / "run"
    argv = [*POSRNN, "train", *SMALL, "--iterations", "1500", "--checkpoint-every", "1000", "--log-every", "10",
            "--out", str(run)]
    p = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (run / "metrics.jsonl").is_file():
        time.sleep(0.1)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stopped: SIGINT: stopped at step ") and "--resume" in lines[0], err
    step = int(lines[0].split("stopped at step ")[1].split()[0])
    assert 0 < step < 1500 and step % 1000 and list_checkpoints(run)[-1][0] == step
    # resuming it finishes the same run as never stopping
    straight = tmp_path / "straight"
    cfg = resolve_config(options={"model.name": "gru", "task.vocab_size": 6, "task.length": 4, "model.hidden_size": 8,
                                  "train.batch_size": 8, "train.device": "cpu", "train.threads": 1, "task.n_test": 32,
                                  "train.iterations": 1500, "train.checkpoint_every": 1000, "train.log_every": 10})
    train(cfg, straight, progress=False)
    r = subprocess.run([*POSRNN, "train", "--out", str(run), "--resume"], env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert same_weights(weights(straight), weights(run))
    # and the log is the uninterrupted one: the partial sums since the last line were in the checkpoint
    assert log_figures(run) == log_figures(straight)


def log_figures(run: Path) -> list[tuple]:
    return [(x["step"], x["loss"], x["accuracy"], x["grad_norm"], x["lr"])
            for x in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


# ---- one process per run directory ------------------------------------------------------------------------
@pytest.mark.slow
def test_a_second_process_on_a_running_run_gets_one_line_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    argv = [*POSRNN, "train", *SMALL, "--iterations", "100000", "--checkpoint-every", "100", "--log-every", "10"]
    p = subprocess.Popen([*argv, "--out", str(run)], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not list_checkpoints(run):
            time.sleep(0.05)
        assert p.poll() is None, p.stderr.read()
        for second in (["train", *SMALL, "--iterations", "20", "--force", "--out", str(run)],
                       ["train", "--out", str(run), "--resume"],
                       ["extend-vocab", str(run), "--extra-vocab", "6", "--out", str(run), "--device", "cpu"],
                       ["stability", str(run), "--triplets", "4", "--device", "cpu"]):
            r = subprocess.run([*POSRNN, *second], env=ENV, capture_output=True, text=True, timeout=120)
            lines = r.stderr.strip().splitlines()
            assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), (second, r.stderr)
            if second[0] != "extend-vocab":  # (which refuses its own run as --out first)
                assert f"pid {p.pid}" in lines[0] and "in use by another process" in lines[0], lines[0]
        assert p.poll() is None  # the first one goes on
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
    assert p.returncode == 130 and not (run / ".lock").exists()


# ---- kill -9 at random moments ------------------------------------------------------------------------------
@pytest.mark.slow
def test_training_killed_ten_times_at_random_moments_resumes_bit_exactly(tmp_path):
    """kill -9 of `posrnn train` at ten random moments, each time restarted with --resume (as a
    scheduler would): the final weights equal an uninterrupted run's, bit for bit, and every
    checkpoint a loader can see is whole."""
    # long enough that ten kills (each at most 0.8 s into training) cannot reach the end on an idle machine
    opts = ["--iterations", "6000", "--checkpoint-every", "50", "--log-every", "25"]
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert subprocess.run([*POSRNN, "train", *SMALL, *opts, "--out", str(straight)], env=ENV,
                          stdout=subprocess.DEVNULL).returncode == 0
    rng = random.Random(0)
    kills = 0
    while kills < 10:
        cfg = run / "config.yaml"
        seen = cfg.stat().st_mtime_ns if cfg.exists() else None
        argv = [*POSRNN, "train", *SMALL, *opts, "--out", str(run)] + (["--resume"] if seen else [])
        p = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60  # until this process has (re)written its config: it is about to train
        while time.time() < deadline and p.poll() is None and (not cfg.exists() or cfg.stat().st_mtime_ns == seen):
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.8))
        if p.poll() is not None:  # a very fast machine finished the run first: the kills so far still count
            assert p.returncode == 0 and kills >= 5, f"the run ended (exit {p.returncode}) after only {kills} kills"
            break
        p.kill()
        p.wait()
        kills += 1
        for _, path in list_checkpoints(run):  # whatever a loader sees is whole
            load_checkpoint(path)
    r = subprocess.run([*POSRNN, "train", "--out", str(run), "--resume"], env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert same_weights(weights(straight), weights(run))
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == \
        [json.loads(x)["step"] for x in (straight / "metrics.jsonl").read_text().splitlines()]


# ---- profile use edits one value in place ---------------------------------------------------------------
PROFILES_TEXT = "profiles:\n  lite: {device: cpu}\n  micro: {device: cpu}\n"


@pytest.mark.parametrize("text,expected", [
    ("x: 1  # keep me\nprofile: [lite]  # the active one\n" + PROFILES_TEXT,
     "x: 1  # keep me\nprofile: [micro]  # the active one\n" + PROFILES_TEXT),
    ('"profile": [lite]\n' + PROFILES_TEXT, '"profile": [micro]\n' + PROFILES_TEXT),
    ("profile:\n# pick one\n\n- lite\n" + PROFILES_TEXT, "profile:\n# pick one\n\n- micro\n" + PROFILES_TEXT),
    ("profile:\n  - lite\n  - micro\n" + PROFILES_TEXT, "profile:\n  - micro\n" + PROFILES_TEXT),
    ("profile: lite\n" + PROFILES_TEXT, "profile: [micro]\n" + PROFILES_TEXT),
    (("profile: [lite] # c\n" + PROFILES_TEXT).replace("\n", "\r\n"),
     ("profile: [micro] # c\n" + PROFILES_TEXT).replace("\n", "\r\n")),
    # the block form `dvc exp run -S` writes, then a blank line and the next section's comments
    ("profile:\n- lite\n\n# the profiles\n# one a key\n" + PROFILES_TEXT,
     "profile:\n- micro\n\n# the profiles\n# one a key\n" + PROFILES_TEXT),
    ("profile:\n- lite  # on the item\n# after\n" + PROFILES_TEXT,
     "profile:\n- micro  # on the item\n# after\n" + PROFILES_TEXT),
    # no value yet: the list goes after the colon, not on the next line (where ruamel.yaml marks the empty value)
    ("profile:\n" + PROFILES_TEXT, "profile: [micro]\n" + PROFILES_TEXT),
    ("profile:  # the active one\n" + PROFILES_TEXT, "profile: [micro]  # the active one\n" + PROFILES_TEXT),
], ids=["comments", "quoted-key", "block-list-with-comment-and-blank", "indented-block-list", "scalar", "crlf",
        "dvc-block-list-then-comments", "block-list-item-comment", "empty", "empty-with-comment"])
def test_profile_use_edits_the_one_value_in_place(tmp_path, text, expected):
    from posrnn_cli.common.settings.profiles import use_profile

    params = tmp_path / "params.yaml"
    params.write_bytes(text.encode())
    use_profile(params, ["micro"])
    assert params.read_bytes().decode() == expected


def test_profile_use_after_dvc_rewrote_the_file_changes_only_the_value(tmp_path):
    """The project's params.yaml as DVC's own writer leaves it after `dvc exp run -S 'profile=[micro]'`
    (a block list, the next section's comments below it): only the list item changes, on its line."""
    serialize = pytest.importorskip("dvc.utils.serialize")
    params = tmp_path / "params.yaml"
    params.write_bytes((ROOT / "params.yaml").read_bytes())
    with serialize.modify_yaml(params) as data:
        data["profile"] = ["micro"]
    before = params.read_text().splitlines()
    assert before[before.index("profile:") + 1] == "- micro"  # the form this test is about
    code, out = cli("profile", "use", "lite", "--params", str(params))
    assert code == 0, out
    after = params.read_text().splitlines()
    assert after == [("- lite" if ln == "- micro" else ln) for ln in before]
    from posrnn_cli.common.settings.profiles import active_profiles

    assert active_profiles(params) == ["lite"]


def test_profile_use_keeps_the_mode_and_the_symlink(tmp_path):
    real = tmp_path / "real" / "params.yaml"
    real.parent.mkdir()
    real.write_text("profile: [lite]\n" + PROFILES_TEXT)
    real.chmod(0o644)
    link = tmp_path / "params.yaml"
    link.symlink_to(real)
    code, out = cli("profile", "use", "micro", "--params", str(link))
    assert code == 0, out
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text().startswith("profile: [micro]\n") and (real.stat().st_mode & 0o777) == 0o644
    assert not [p for p in real.parent.iterdir() if p.name != "params.yaml"]  # no temporary file left


def test_profile_use_refuses_a_repeated_key_and_leaves_the_file(tmp_path):
    params = tmp_path / "params.yaml"
    text = "profile: [lite]\n'profile': [lite]\n" + PROFILES_TEXT
    params.write_text(text)
    code, out = cli("profile", "use", "micro", "--params", str(params))
    assert (code == 1 and out.startswith("error: ") and "the key profile appears twice" in out
            and len(out.splitlines()) == 1)
    assert params.read_text() == text


# ---- YAML aliases are bounded before they expand ------------------------------------------------------
def test_a_billion_laughs_is_refused_at_once_without_showing_the_value():
    from posrnn_cli.common.settings.config import resolve_config
    from posrnn_cli.common.errors import PosrnnError

    laughs = "[" + ", ".join(f"&l{i} [" + ", ".join([f"*l{i - 1}" if i else "lol"] * 9) + "]" for i in range(9)) + "]"
    start = time.perf_counter()
    with pytest.raises(PosrnnError) as e:
        resolve_config(sets=[f"task.name={laughs}"])
    assert time.perf_counter() - start < 2 and "expand beyond" in str(e.value) and "lol" not in str(e.value)
    with pytest.raises(PosrnnError, match="expand beyond"):
        resolve_config(sets=["task.name=&a [*a]"])  # an alias inside its own anchor
    assert resolve_config(sets=["train.betas=[0.9, 0.99]"]).train.betas == (0.9, 0.99)  # ordinary values still read


# ---- temporary files: only posrnn's, only dead writers' ---------------------------------------------
def test_train_into_a_directory_leaves_unrelated_files_alone(tmp_path):
    proj = tmp_path / "proj"
    (proj / "notes").mkdir(parents=True)
    mine = {proj / ".draft.tmp": b"my draft", proj / "notes" / ".x.tmp": b"another", proj / "README": b"hello",
            proj / ".config.yaml.posrnn-99999999.abcd.tmp": b"not posrnn's pid: it cannot exist"}
    for p, data in mine.items():
        p.write_bytes(data)
    code, out = cli("train", *SMALL, "--iterations", "5", "--out", str(proj))
    assert code == 0, out
    assert all(p.read_bytes() == data for p, data in mine.items() if "99999999" not in p.name)


def test_remove_stale_temps_removes_only_dead_writers_temporaries(tmp_path):
    from posrnn_cli.common.files.io import remove_stale_temps, temp_path

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    ours = temp_path(tmp_path / "config.yaml")
    gone = tmp_path / f".config.yaml.posrnn-{pid}.1a2b3c4d.tmp"
    other = [tmp_path / ".draft.tmp", tmp_path / ".x.posrnn-.tmp", tmp_path / "sub" / gone.name]
    other[-1].parent.mkdir()
    for p in (ours, gone, *other):
        p.write_text("x")
    assert remove_stale_temps(tmp_path) == 1
    assert not gone.exists() and ours.exists() and all(p.exists() for p in other)


def test_a_failed_write_names_the_file(tmp_path, monkeypatch):
    import errno

    from posrnn_cli.common.files.io import atomic_write_text

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as e:
        atomic_write_text(tmp_path / "table.csv", "a,b\n")
    assert e.value.filename == str(tmp_path / "table.csv") and e.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


# ---- checkpoints prove what they are ------------------------------------------------------------------
def test_a_checkpoint_records_its_config_digest_and_refuses_an_edit(tmp_path):
    from posrnn_cli.common.errors import PosrnnError
    from posrnn_cli.common.settings.config import config_digest

    run = tmp_path / "run"
    assert cli("train", *SMALL, "--iterations", "4", "--out", str(run))[0] == 0
    path = list_checkpoints(run)[-1][1]
    shutil.copy(path, path.with_name("step_0000003.pt"))  # a checkpoint renamed to another step
    with pytest.raises(PosrnnError, match="its name says step 3"):
        load_checkpoint(path.with_name("step_0000003.pt"))
    raw = torch.load(path, weights_only=True)
    assert raw["identity"]["config_digest"] == config_digest(raw["config"])
    raw["config"]["train"]["lr"] = 0.5
    torch.save(raw, path)
    with pytest.raises(PosrnnError, match="digest"):
        load_checkpoint(path)


def test_no_checkpoint_with_a_non_finite_value_is_written(tmp_path):
    from posrnn_cli.common.errors import PosrnnError
    from posrnn_cli.engine.checkpoint import save_checkpoint

    with pytest.raises(PosrnnError, match="non-finite"):
        save_checkpoint(tmp_path, 1, {"config": {}, "model": {"w": torch.tensor([1.0, float("inf")])}, "optimizer": {}})
    assert not (tmp_path / "checkpoints").exists() or not list((tmp_path / "checkpoints").iterdir())
    run = tmp_path / "run"
    code, out = cli("train", *SMALL, "--iterations", "3", "--checkpoint-every", "1", "--set", "train.weight_decay=3e38",
                    "--out", str(run))
    assert code != 0 and out.startswith("error: ") and len(out.splitlines()) == 1, out
    assert "finite weights" not in out
    for _, p in list_checkpoints(run):
        assert all(torch.isfinite(v).all() for v in torch.load(p, weights_only=True)["model"].values())
