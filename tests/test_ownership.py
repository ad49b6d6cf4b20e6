"""Only posrnn's own files are ever moved, replaced or deleted (fabricated inputs, beside the
bad-input table): ``--force`` into another tool's folder, a replaced-run record that does not match
its folder, and every command with an output folder (``scorecard --out``, ``--page``, the GPU
check's ``--out``) over files of the user's. Each refusal is one line, and every file is
byte-identical afterwards."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posrnn_cli.measure import gpu_check
from posrnn_cli.analysis import report
from posrnn_cli.cli import app
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.rundir import is_run_file, not_posrnns
from posrnn_cli.engine import replace
from posrnn_cli.engine.replace import REPLACED, Replacement
from posrnn_cli.engine.lock import run_lock

from conftest import ROOT, tiny_train


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path → bytes), the lock excepted."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".lock")}


def another_tools_run(d: Path) -> dict[str, bytes]:
    """A folder of another tool's: names posrnn also uses, contents it never writes."""
    (d / "checkpoints").mkdir(parents=True)
    (d / "config.yaml").write_text("trainer:\n  max_epochs: 10\n")
    (d / "checkpoints" / "epoch=9.ckpt").write_bytes(b"lightning weights")
    (d / "eval.json").write_text('{"acc": 0.9}\n')
    return tree(d)


def invoke(*args: str):
    r = CliRunner().invoke(app, list(args))
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    return r, lines


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished tiny posrnn run (seconds)."""
    run = tmp_path_factory.mktemp("own") / "run"
    r, _ = invoke("train", *tiny_train(), "--out", str(run))
    assert r.exit_code == 0, r.output
    return run


@pytest.mark.parametrize("force", [False, True])
def test_train_into_another_tools_folder_is_refused_naming_whose_it_is(tmp_path, force):
    before = another_tools_run(tmp_path / "theirs")
    r, lines = invoke("train", *tiny_train(), "--out", str(tmp_path / "theirs"), *(["--force"] if force else []))
    assert r.exit_code != 0 and len(lines) == 1 and "Traceback" not in r.output
    assert "holds files posrnn did not write" in lines[0] and "--force included" in lines[0]
    assert tree(tmp_path / "theirs") == before


def test_extend_vocab_force_into_another_tools_folder_is_refused(tmp_path, trained):
    before = another_tools_run(tmp_path / "theirs")
    r, lines = invoke("extend-vocab", str(trained), "--extra-vocab", "6", "--iterations", "2", "--device", "cpu",
                      "--out", str(tmp_path / "theirs"), "--force")
    assert r.exit_code != 0 and len(lines) == 1 and "did not write" in lines[0], r.output
    assert tree(tmp_path / "theirs") == before


def test_a_posrnn_run_is_named_as_one_and_recognised_without_its_marker(tmp_path, trained):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    r, lines = invoke("train", *tiny_train(lr=0.5), "--out", str(run))
    assert r.exit_code != 0 and "already holds a different run" in lines[0]
    (run / ".posrnn.json").unlink()  # a run written before the marker existed: its config.yaml is posrnn's
    assert not_posrnns(run) is None
    (run / "checkpoints" / "epoch=9.ckpt").write_bytes(b"x")  # … but never with names posrnn does not write
    assert "epoch=9.ckpt" in not_posrnns(run)


def test_force_moves_every_file_of_the_old_run_aside_analyses_included(tmp_path, trained):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    analyses = ("stability.csv", "stability.png", "permutation.json", "eval_step0000003.json",
                "eval_step0000003_sequences.npz", "stability_values.npz", "stability_meta.json")
    for name in analyses:
        (run / name).write_text("of the old run\n")
    (run / "notes.txt").write_text("mine\n")
    r, _ = invoke("train", *tiny_train(lr=0.02), "--out", str(run), "--force")
    assert r.exit_code == 0, r.output
    assert not any((run / n).exists() for n in analyses) and (run / "notes.txt").read_text() == "mine\n"
    assert not replace.leftovers(run)
    assert all(is_run_file(n) for n in analyses) and not is_run_file("notes.txt")


def _aside_with_record(run: Path, edit) -> Path:
    """An interrupted replacement: the old run aside, its record edited by ``edit``."""
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("old config\n")
    (run / "metrics.jsonl").write_text('{"step": 5}\n')
    (run / "checkpoints" / "step_0000005.pt").write_bytes(b"old weights")
    (run / "stability.csv").write_text("old analysis\n")
    r = Replacement(run, REPLACED)
    r.start()
    record = json.loads((r.aside / replace.MANIFEST).read_text())
    (r.aside / replace.MANIFEST).write_text(json.dumps(edit(record)))
    return r.aside


@pytest.mark.parametrize("edit", [lambda r: {**r, "moved": []}, lambda r: {**r, "moved": r["moved"][:1]},
                                  lambda r: {**r, "moved": ["metrics.jsonl", "config.yaml"]}])
def test_a_replacing_record_that_does_not_match_the_folder_is_refused_and_nothing_deleted(tmp_path, edit):
    run = tmp_path / "run"
    aside = _aside_with_record(run, edit)
    (run / "config.yaml").write_text("live config\n")  # the run in place now
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "step_0000001.pt").write_bytes(b"live weights")
    before = tree(run)
    with pytest.raises(PosrnnError, match="replacing.json (does not list|is not posrnn's).*nothing was moved or "
                                          "deleted"):
        with run_lock(run, "eval"):
            pass
    assert tree(run) == before and aside.is_dir()


def test_a_record_that_would_remove_files_older_than_itself_is_refused(tmp_path):
    run = tmp_path / "run"
    aside = _aside_with_record(run, lambda r: r)
    (run / "config.yaml").write_text("live config\n")
    os.utime(run / "config.yaml", (1, 1))  # older than the record: not written by the new run
    before = tree(run)
    with pytest.raises(PosrnnError, match="older than the record"):
        replace.recover(run)
    assert tree(run) == before and aside.is_dir()


# ---- output folders -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(report.OUT_FILES))
def test_scorecard_out_never_writes_over_a_file_it_did_not_write(tmp_path, name):
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text("my own notes\n")
    before = tree(out)
    r, lines = invoke("scorecard", "lite", "--results", str(ROOT / "results" / "lite" / "tables"), "--out", str(out),
                      "--params", str(ROOT / "params.yaml"))
    assert r.exit_code != 0 and len(lines) == 1 and "did not write" in lines[0] and tree(out) == before


def test_scorecard_out_writes_again_over_its_own_files_and_never_through_links(tmp_path):
    out = tmp_path / "card"
    args = ["scorecard", "lite", "--results", str(ROOT / "results" / "lite" / "tables"), "--quiet",
            "--params", str(ROOT / "params.yaml")]
    for _ in range(2):  # the second time over the files the first wrote
        r, _ = invoke(*args, "--out", str(out))
        assert r.exit_code == 0, r.output
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    r, lines = invoke(*args, "--out", str(tmp_path / "link"))
    assert r.exit_code != 0 and "symbolic link" in lines[0] and not any((tmp_path / "elsewhere").iterdir())


def test_page_follows_no_link_and_ignores_markers_quoted_in_prose(tmp_path):
    rows = json.loads((ROOT / "results" / "lite" / "scorecard" / "scorecard.json").read_text())["rows"]
    real = tmp_path / "real.md"
    real.write_text("# page\n\n<!-- results:lite -->\nold\n<!-- /results:lite -->\n")
    (tmp_path / "page.md").symlink_to(real)
    with pytest.raises(PosrnnError, match="symbolic link"):
        report.update_readme(tmp_path / "page.md", rows, "lite")
    prose = tmp_path / "prose.md"
    prose.write_text("Blocks sit between `<!-- results:lite -->` and `<!-- /results:lite -->` markers.\n")
    before = prose.read_bytes()
    with pytest.raises(PosrnnError, match="no results block for lite"):
        report.update_readme(prose, rows, "lite")
    assert prose.read_bytes() == before and real.read_text().endswith("old\n<!-- /results:lite -->\n")


def test_the_gpu_check_refuses_a_short_budget_a_link_and_files_of_another(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "gpu_check.md").write_text("my notes\n")
    (tmp_path / "link").symlink_to(mine)
    for out, budget, words in ((tmp_path / "new", 15, "--budget 15 cannot hold"), (tmp_path / "new", -1, "cannot hold"),
                               (tmp_path / "new", float("nan"), "cannot hold"),
                               (tmp_path / "link", 470, "symbolic link"),
                               (mine, 470, "did not write")):
        assert words in gpu_check.check_args(out, budget)
    assert gpu_check.check_args(tmp_path / "new", 470) is None and (mine / "gpu_check.md").read_text() == "my notes\n"
    assert (gpu_check.main(["--device", "cpu", "--out", str(mine)]) == 2
            and (mine / "gpu_check.md").read_text() == "my notes\n")
