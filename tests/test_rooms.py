"""Moving code leaves every run current: a run's identity (``common.numerics``) names no module,
so a ``code.json`` that ``record_code`` wrote reads as current when the run-directory module that
reads it (or wrote it) is imported under another path, as after ``common/`` was laid out by what
it holds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from posrnn_cli.common.files.rundir import CODE_FILE, CONFIG_FILE, code_state, record_code
from posrnn_cli.common.settings.config import dump_yaml

from conftest import ROOT
from test_identity import LOOP, cfg_of

#: the run-directory module under another path, in a copy of the package
MOVED = "posrnn_cli.common.files.run_format"
READ_AND_WRITE = f"""
import sys
from pathlib import Path
import {MOVED} as moved
here, there = Path(sys.argv[1]), Path(sys.argv[2])
cfg = moved.read_config(here)
moved.record_code(there, cfg, {LOOP!r}, "cpu")
print(moved.__file__)
print(moved.code_state(here, cfg, {LOOP!r}))
"""


def test_a_record_stays_current_when_the_module_that_wrote_it_moves(tmp_path):
    copy = tmp_path / "moved"
    shutil.copytree(ROOT / "posrnn_cli", copy / "posrnn_cli", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(copy / "posrnn_cli" / "common" / "files" / "rundir.py", copy / "posrnn_cli" / "common" / "files" /
                "run_format.py")
    cfg = cfg_of("lstm", "sinusoidal")
    here, there = tmp_path / "here", tmp_path / "there"
    for d in (here, there):
        d.mkdir()
        (d / CONFIG_FILE).write_text(dump_yaml(cfg))
    record_code(here, cfg, LOOP, "cpu")  # written under the module's path in this tree
    r = subprocess.run([sys.executable, "-c", READ_AND_WRITE, str(here), str(there)], cwd=copy,
                       env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    where, state = r.stdout.split()
    assert where == str(copy / "posrnn_cli" / "common" / "files" / "run_format.py")  # the moved module ran
    assert state == "current"  # read under the other path
    assert code_state(there, cfg, LOOP) == "current"  # written under the other path, read here
    records = [json.loads((d / CODE_FILE).read_text()) for d in (here, there)]
    assert records[0] == records[1] and "posrnn_cli" not in json.dumps(records[0])
