"""A marker proves what it claims: the run marker (``.posrnn.json``) lists each checkpoint posrnn
wrote with its SHA-256, and a marked folder is posrnn's only when its files are what the marker and
posrnn write (a posrnn config, torch archives, the listed digests). A marker copied into another
tool's folder, or beside empty checkpoints, does not let ``train --force`` replace anything."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.files.io import MARKER, file_digest, write_marker
from posrnn_cli.common.files.rundir import not_posrnns

from conftest import tiny_train


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".lock")}


def invoke(*args: str):
    r = CliRunner().invoke(app, list(args))
    return r, [ln for ln in r.output.splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("marked") / "run"
    r, _ = invoke("train", *tiny_train(), "--out", str(run))
    assert r.exit_code == 0, r.output
    return run


def test_the_marker_lists_every_checkpoint_with_its_digest(trained):
    marker = json.loads((trained / MARKER).read_text())
    ckpts = sorted(p for p in (trained / "checkpoints").iterdir())
    assert ckpts and all(marker["files"][f"checkpoints/{p.name}"] == file_digest(p) for p in ckpts)
    assert not_posrnns(trained) is None


def test_a_legacy_marker_without_a_list_still_marks_a_real_run(tmp_path, trained):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    marker = json.loads((run / MARKER).read_text())
    (run / MARKER).write_text(json.dumps({k: v for k, v in marker.items() if k != "files"}) + "\n")
    assert not_posrnns(run) is None


def test_a_checkpoint_edited_since_posrnn_wrote_it_is_not_posrnns(tmp_path, trained):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    last = sorted((run / "checkpoints").iterdir())[-1]
    last.write_bytes(last.read_bytes() + b"\0")
    assert "not the file posrnn wrote" in not_posrnns(run)


def foreign_with_marker(d: Path, empty_checkpoints: bool) -> dict:
    (d / "checkpoints").mkdir(parents=True)
    if empty_checkpoints:  # names posrnn uses, no bytes of a checkpoint
        for step in (3, 6):
            (d / "checkpoints" / f"step_{step:07d}.pt").write_bytes(b"")
    else:  # another tool's config and results
        (d / "config.yaml").write_text("trainer:\n  max_epochs: 10\n")
        (d / "eval.json").write_text('{"acc": 0.9}\n')
    write_marker(d, "run")
    return tree(d)


@pytest.mark.parametrize("empty_checkpoints", [False, True])
def test_a_marker_placed_in_a_folder_of_other_files_lets_nothing_be_replaced(tmp_path, empty_checkpoints):
    d = tmp_path / "theirs"
    before = foreign_with_marker(d, empty_checkpoints)
    r, lines = invoke("train", *tiny_train(), "--out", str(d), "--force")
    assert r.exit_code != 0 and len(lines) == 1 and "did not write" in lines[0], r.output
    assert tree(d) == before


def test_a_replacement_record_copied_into_a_live_run_moves_nothing(tmp_path, trained):
    """A record is bound to the run that replaces the old one; one from another run (or made to
    look older) in the folder of a live run is refused, and nothing moves."""
    from posrnn_cli.common.errors import PosrnnError
    from posrnn_cli.engine import replace
    from posrnn_cli.engine.lock import run_lock

    other = tmp_path / "other"
    shutil.copytree(trained, other)
    r = replace.Replacement(other, replace.REPLACED)
    r.start()  # the old run of `other` aside, as an interrupted --force leaves it
    r.bind("0" * 32)
    live = tmp_path / "live"
    shutil.copytree(trained, live)
    shutil.copytree(r.aside, live / r.aside.name)
    import os
    for p in (live / r.aside.name).rglob("*"):
        os.utime(p, (1, 1))  # backdated: every file of the live run is newer than the record
    os.utime(live / r.aside.name / replace.MANIFEST, (1, 1))
    before = tree(live)
    with pytest.raises(PosrnnError, match="holds the run"):
        with run_lock(live, "eval"):
            pass
    assert tree(live) == before


def test_an_interrupted_force_is_still_rolled_back_in_its_own_run(tmp_path, trained):
    """The record names the new run before its marker is written, so the run's own interrupted
    replacement is recognised and the old run restored byte-identical."""
    from posrnn_cli.common.files.rundir import read_config
    from posrnn_cli.engine import replace
    from posrnn_cli.engine.lock import run_lock
    from posrnn_cli.engine.lifecycle import begin_run

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = tree(run)
    cfg = read_config(run)
    cfg.train.lr = 0.5
    begin_run(run, cfg, force=True)  # then killed: the old run aside, the new one begun
    (aside,) = replace.leftovers(run)
    record = json.loads((aside / replace.MANIFEST).read_text())
    assert record["new_id"] == json.loads((run / MARKER).read_text())["id"]
    with run_lock(run, "eval"):
        pass
    assert tree(run) == before and not replace.leftovers(run)
