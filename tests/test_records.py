"""Records are data, never code paths: the SLURM record is checked against its runs directory
(no result is unpickled from elsewhere), a sweep manifest with a null table or no cells does
not let aggregation keep an old table, and a malformed code.json is no traceback."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from fabricate import scored_run

from posrnn_cli.analysis.aggregate import aggregate
from posrnn_cli.common.settings.config import RunConfig
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.rundir import code_state
from posrnn_cli.sweep import slurm_record, slurm_watch
from posrnn_cli.sweep.plan import Job


def record(root: Path, folder: str, tasks: dict) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / slurm_record.RECORD).write_text(json.dumps({"arrays": [{"array": "7", "cluster": "slurm", "folder": folder,
                                                             "tasks": tasks}]}))


def test_a_recorded_task_is_read_only_from_its_own_runs_directory(tmp_path):
    root = tmp_path / "runs" / "t"
    record(root, str(root / ".submitit"), {"7_0": {"run_dir": str(root / "fig2" / "a")}})
    assert slurm_record.recorded_tasks(root) == {os.path.realpath(root / "fig2" / "a"): ("7_0",
                                                                                         str(root / ".submitit"))}
    for folder, tasks, words in [
        (str(tmp_path / "elsewhere"), {"7_0": {"run_dir": str(root / "fig2" / "a")}}, "lists the folder"),
        (str(root / ".submitit"), {"7_0": {"run_dir": str(tmp_path / "other" / "a")}}, "not a SLURM job of a run in"),
        (str(root / ".submitit"), {"7_0": {"run_dir": str(root / ".." / "u" / "a")}}, "not a SLURM job of a run in"),
        (str(root / ".submitit"), {"--help": {"run_dir": str(root / "fig2" / "a")}}, "not a SLURM job of a run in"),
        (str(root / ".submitit"), {"7_0": {"run_dir": 5}}, "not a SLURM job of a run in"),
    ]:
        record(root, folder, tasks)
        with pytest.raises(PosrnnError) as e:
            slurm_record.recorded_tasks(root)
        assert words in str(e.value) and "remove the record" in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "elsewhere").mkdir()
    (root / ".submitit").symlink_to(tmp_path / "elsewhere")  # the folder itself a link out of the runs
    record(root, str(root / ".submitit"), {"7_0": {"run_dir": str(root / "fig2" / "a")}})
    with pytest.raises(PosrnnError, match="lists the folder"):
        slurm_record.recorded_tasks(root)


class _Effect:
    """A pickle that, loaded, writes a file: the proof that it was unpickled."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (Path(self.path).write_text, ("unpickled",))


def test_a_linked_result_is_never_unpickled(tmp_path):
    outside = tmp_path / "outside.pkl"
    outside.write_bytes(pickle.dumps(("success", _Effect(str(tmp_path / "effect")))))
    result = tmp_path / "runs" / ".submitit" / "7_0_result.pkl"
    result.parent.mkdir(parents=True)
    result.symlink_to(outside)
    job = Job("fig2", "a", "train", str(tmp_path / "runs" / "fig2" / "a"))
    task = slurm_watch.Task(job, "7_0", result, tmp_path / "log")
    out = slurm_watch._outcome(task, 0.0)
    assert out.status == "failed" and "is a link" in out.error
    assert not (tmp_path / "effect").exists()
    result.unlink()
    os.link(outside, result)  # a hard link: as foreign
    assert slurm_watch._outcome(task, 0.0).status == "failed" and not (tmp_path / "effect").exists()


def _fig2(tmp_path: Path) -> Path:
    c = RunConfig()
    c.task.vocab_size, c.task.length, c.model.pe, c.train.seed, c.train.iterations = 16, 8, "none", 1, 100
    t = np.random.default_rng(0).random(20)
    scored_run(tmp_path / "runs" / "fig2" / "r1", c, {"token_accuracy": t, "sequence_accuracy": t * 0,
                                                       "damerau_levenshtein": 1 - t})
    return tmp_path / "runs"


def test_a_manifest_with_a_null_table_or_another_experiment_is_refused(tmp_path):
    runs = _fig2(tmp_path)
    for manifest, words in [({"experiment": "fig2", "table": None, "cells": [{"name": "r1"}]}, "its table is None"),
                            ({"experiment": "fig2", "table": "nope", "cells": [{"name": "r1"}]}, "its table is 'nope'"),
                            ({"experiment": "dual", "cells": [{"name": "r1"}]}, "its experiment 'dual'")]:
        (runs / "fig2" / "sweep.json").write_text(json.dumps(manifest))
        with pytest.raises(PosrnnError, match=words):
            aggregate(runs, tmp_path / "t", n_resamples=20)


def test_a_manifest_without_cells_does_not_keep_an_old_table(tmp_path):
    runs = _fig2(tmp_path)
    (runs / "fig2" / "sweep.json").write_text(json.dumps({"experiment": "fig2", "table": "eval",
                                                          "cells": [{"name": "r1"}]}))
    aggregate(runs, tmp_path / "t", n_resamples=20)
    old = (tmp_path / "t" / "fig2.csv").read_bytes()
    (runs / "fig2" / "sweep.json").write_text(json.dumps({"experiment": "fig2", "table": "eval", "cells": []}))
    with pytest.raises(PosrnnError, match="has no runs in its current grid, but .*fig2.csv holds a table of an older "
                                          "one"):
        aggregate(runs, tmp_path / "t", n_resamples=20)
    assert (tmp_path / "t" / "fig2.csv").read_bytes() == old
    assert aggregate(runs, tmp_path / "fresh" / "t", n_resamples=20) == {}  # an empty grid with no old table: nothing


@pytest.mark.parametrize("text", ['{"module": 5, "fingerprint": "x"}', '{"module": ["a"], "fingerprint": "x"}',
                                  '{"module": "os", "fingerprint": "x"}', "[1, 2]", '"text"', "{" * 5000, "\xff"])
def test_a_malformed_code_record_reads_as_unknown_code(tmp_path, text):
    (tmp_path / "code.json").write_text(text, errors="surrogateescape")
    assert code_state(tmp_path, RunConfig(), ("loop",)) == "unknown"
