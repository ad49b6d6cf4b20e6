"""One rule for every file posrnn writes (``common.files.io.write_owned``): it replaces only a file it can
prove it wrote (the folder's ledger of digests, the same bytes, a committed copy, or the writer's
own header), never through a link, never onto a FIFO, device or directory. One table over every
writer: each is run clean, run again over its own files, then against each thing a user may have
at one of its file names; each refusal is one line naming the file, and nothing changes on disk."""

from __future__ import annotations

import os
import shutil
import signal
import stat
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fabricate import scored_run
from posrnn_cli.analysis.aggregate import aggregate
from posrnn_cli.analysis.plots import draw_all
from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import RunConfig
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import LEDGER, csv_text, write_owned
from posrnn_cli.engine.paths import check_stability_out
from posrnn_cli.measure import gpu_check

from conftest import ROOT


def _cli(*args: str) -> None:
    r = CliRunner().invoke(app, list(args))
    if r.exit_code != 0:
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
        raise PosrnnError(lines[0])


def dvc_yaml(out: Path) -> None:
    _cli("dvc-yaml", "--out", str(out / "dvc.yaml"))


def scorecard_out(out: Path) -> None:
    _cli("scorecard", "lite", "--results", str(ROOT / "results" / "lite" / "tables"), "--out", str(out), "--quiet",
         "--params", str(ROOT / "params.yaml"))


def gpu_check_out(out: Path) -> None:
    problem = gpu_check.check_args(out, gpu_check.MIN_BUDGET_S)
    if problem:
        raise PosrnnError(problem)
    env = {"device": "cpu", "torch": "2", "cuda": None, "cudnn": None, "python": "3", "host_cpu": "x",
           "date": "2026-11-29"}
    gpu_check.write_report({"size": "micro", "budget_s": 60, "env": env, "stages": {}, "finished": True}, out)


def figures(out: Path) -> None:
    tables = out.parent / f"{out.name}-tables"
    if not tables.exists():
        tables.mkdir()
        shutil.copy(ROOT / "results" / "lite" / "tables" / "fig2.csv", tables)
    draw_all(tables, out)


def tables_metrics_curves(out: Path) -> None:
    runs = out.parent / f"{out.name}-runs"
    if not runs.exists():
        for seed in (1, 2):
            cfg = RunConfig()
            cfg.task.name, cfg.task.vocab_size, cfg.task.length, cfg.task.autoregressive = "reverse", 8, 4, True
            cfg.model.name, cfg.model.pe, cfg.train.seed = "lstm", "none", seed
            s = np.asarray([1, 0, 1, 0.5])
            scores = {"token_accuracy": s, "sequence_accuracy": (s == 1).astype(float),
                      "damerau_levenshtein": 4 * (1 - s), "truth_feedback_token_accuracy": s,
                      "truth_feedback_sequence_accuracy": (s == 1).astype(float),
                      "truth_feedback_damerau_levenshtein": 4 * (1 - s)}
            scored_run(runs / "autoreg" / f"reverse-lstm-v8-none-s{seed}", cfg, scores)
    aggregate(runs, out / "tables", metrics_dir=out, curves_dir=out / "curves", n_resamples=20)


def stability_out(out: Path) -> None:
    path = check_stability_out(out / "stability.csv", out.parent / "elsewhere.pt", None)
    write_owned(path, csv_text([{"model": "gru", "pe": "none", "step": 0, "condition": "c", "pair": "p",
                                 "stability": 1.0}]))


#: every writer, and the file of its output a user's thing is put at; the two whose files carry a header
#: of their own take one that keeps it as theirs (dvc.yaml is written, never edited: its header says so)
WRITERS = {"dvc-yaml --out": (dvc_yaml, "dvc.yaml"), "scorecard --out": (scorecard_out, "scorecard.md"),
           "gpu check --out": (gpu_check_out, "gpu_check.json"), "figures": (figures, "fig2_vocab.png"),
           "tables and metrics": (tables_metrics_curves, "autoreg.json"),
           "stability --out": (stability_out, "stability.csv")}


HEADER_PROOF = ("dvc-yaml --out", "stability --out")


def state(root: Path) -> dict:
    """Every path under ``root``: its kind, and a file's bytes or a link's target (the ledger aside)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.name == LEDGER:
            continue
        st = os.lstat(p)
        out[str(p.relative_to(root))] = (os.readlink(p) if stat.S_ISLNK(st.st_mode) else p.read_bytes()
                                         if stat.S_ISREG(st.st_mode) else stat.S_IFMT(st.st_mode))
    return out


def plant(path: Path, kind: str, tmp: Path) -> None:
    """A user's thing at ``path``: a file of theirs, a link to one, a FIFO, a folder, or posrnn's own
    file edited since it wrote it."""
    mine = tmp / "NOTES.md"
    mine.write_text("my notes: never to be overwritten\n")
    if kind == "user file":
        shutil.copy(mine, path)
    elif kind == "symlink":
        path.symlink_to(mine)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
        (path / "inside").write_text("x\n")
    elif kind == "edited":
        with open(path, "ab") as f:
            f.write(b"\nmy annotation\n")


@pytest.fixture
def no_hang():
    def boom(*_):
        raise AssertionError("the writer opened a FIFO and hung")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_each_writer_writes_and_rewrites_its_own_files(tmp_path, writer):
    write, name = WRITERS[writer]
    out = tmp_path / "out"
    out.mkdir()
    write(out)
    assert (out / name).is_file() and (out / LEDGER).is_file()
    write(out)  # over its own files, proven by the ledger


@pytest.mark.parametrize("kind", ["user file", "symlink", "fifo", "directory", "edited"])
@pytest.mark.parametrize("writer", list(WRITERS))
def test_each_writer_refuses_what_it_did_not_write_and_changes_nothing(tmp_path, writer, kind, no_hang):
    write, name = WRITERS[writer]
    if kind == "edited" and writer in HEADER_PROOF:
        pytest.skip("a file with the writer's header is the writer's")
    out = tmp_path / "out"
    out.mkdir()
    if kind == "edited":
        write(out)
    plant(out / name, kind, tmp_path)
    before, notes = state(out), (tmp_path / "NOTES.md").read_bytes()
    with pytest.raises(PosrnnError) as e:
        write(out)
    assert "\n" not in str(e.value) and name in str(e.value), str(e.value)
    assert state(out) == before and (tmp_path / "NOTES.md").read_bytes() == notes


@pytest.mark.parametrize("target", ["NOTES.md", "params.yaml"])
def test_dvc_yaml_out_onto_a_users_file_refuses_and_leaves_it(tmp_path, target):
    (tmp_path / target).write_text("profile: [lite]\n")
    r = CliRunner().invoke(app, ["dvc-yaml", "--out", str(tmp_path / target)])
    assert r.exit_code != 0 and (tmp_path / target).read_text() == "profile: [lite]\n"
    assert len([ln for ln in r.output.splitlines() if ln.strip()]) == 1, r.output


def test_dvc_yaml_rewrites_a_dvc_yaml_it_wrote_but_never_replaces_a_link_to_one(tmp_path):
    real = tmp_path / "real.yaml"
    shutil.copy(ROOT / "dvc.yaml", real)
    (tmp_path / "dvc.yaml").symlink_to(real)
    r = CliRunner().invoke(app, ["dvc-yaml", "--out", str(tmp_path / "dvc.yaml")])
    assert r.exit_code != 0 and (tmp_path / "dvc.yaml").is_symlink()
    shutil.copy(ROOT / "dvc.yaml", tmp_path / "copy.yaml")  # a dvc.yaml of its own (its header), from git
    with open(tmp_path / "copy.yaml", "a") as f:
        f.write("# an old stage\n")
    r = CliRunner().invoke(app, ["dvc-yaml", "--out", str(tmp_path / "copy.yaml")])
    assert r.exit_code == 0 and (tmp_path / "copy.yaml").read_text() == (ROOT / "dvc.yaml").read_text()


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_dvc_yaml_check_refuses_what_is_not_a_file_without_opening_it(tmp_path, kind, no_hang):
    target = tmp_path / "dvc.yaml"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target = Path("/dev/zero")
    r = CliRunner().invoke(app, ["dvc-yaml", "--check", "--out", str(target)])
    assert r.exit_code != 0 and "not a regular file" in r.output
