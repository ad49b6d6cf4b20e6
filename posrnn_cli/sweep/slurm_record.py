"""The record of the job arrays a SLURM sweep submitted (``.slurm-arrays.json`` in the runs
directory): each array's id, host, pid, and each task's job id and run directory (a task that
trains a pack: each member's, under ``members``), read back (and checked against the runs
directory) when a sweep reattaches."""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

from ..common.errors import PosrnnError
from ..common.files.io import atomic_write_json, read_json

RECORD = ".slurm-arrays.json"


# ---- the record of submitted arrays --------------------------------------------------------------
def read_record(runs_root: Path) -> list[dict]:
    """The arrays recorded in ``runs_root`` (oldest first); an unreadable record is one line."""
    path = Path(runs_root) / RECORD
    if not path.is_file():
        return []
    try:
        data = read_json(path)
    except (PosrnnError, ValueError, OSError):
        raise PosrnnError(f"{path} is not readable JSON; remove it (the sweep then cannot reattach to the arrays "
                          f"it listed: cancel them with scancel first)") from None
    arrays = data.get("arrays") if isinstance(data, dict) else None
    if (not isinstance(arrays, list)
            or not all(isinstance(a, dict) and isinstance(a.get("tasks"), dict) for a in arrays)):
        raise PosrnnError(f"{path} does not list arrays; remove it (cancel the arrays it listed with scancel first)")
    return arrays


def add_to_record(runs_root: Path, array_id: str, cluster: str, folder: Path, tasks: dict) -> None:
    arrays = read_record(runs_root)
    arrays.append({"array": array_id, "cluster": cluster, "host": socket.gethostname(), "pid": os.getpid(),
                   "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "folder": str(folder), "tasks": tasks})
    atomic_write_json(Path(runs_root) / RECORD, {"arrays": arrays})


#: a SLURM job id as the record holds it: the array's id and the task's index
_JOB_ID = re.compile(r"^[0-9]{1,20}(_[0-9]{1,9})?$")
#: where a sweep's submitit files live, inside its runs directory
SUBMITIT_DIR = ".submitit"


def recorded_tasks(runs_root: Path, cluster: str = "slurm") -> dict[str, tuple[str, str]]:
    """run directory → (job id, submitit folder) of its most recent recorded task. The record is
    data, checked against ``runs_root``: every folder must be its ``.submitit`` (no link out of
    it), every run directory inside it and every job id a SLURM id; anything else is one line
    naming the record, so no result is read from elsewhere."""
    from ..common.files.io import inside

    runs_root = Path(runs_root)
    path = runs_root / RECORD
    folder_ok = os.path.realpath(runs_root / SUBMITIT_DIR)
    out: dict[str, tuple[str, str]] = {}
    for a in read_record(runs_root):
        if a.get("cluster", "slurm") != cluster:
            continue
        folder = a.get("folder")
        if not isinstance(folder, str) or os.path.realpath(folder) != folder_ok or not inside(folder_ok, runs_root):
            raise PosrnnError(f"{path} lists the folder {folder!r} for array {a.get('array')!r}, not "
                              f"{runs_root / SUBMITIT_DIR}; remove the record (cancel its arrays with scancel first)")
        for job_id, t in a["tasks"].items():
            for run_dir in task_run_dirs(t):
                if not _JOB_ID.match(str(job_id)) or not isinstance(run_dir, str) or not inside(run_dir, runs_root) \
                        or os.path.realpath(run_dir) == os.path.realpath(runs_root):
                    raise PosrnnError(f"{path} lists task {str(job_id)[:40]!r} with run directory "
                                      f"{str(run_dir)[:200]!r}, not a SLURM job of a run in {runs_root}; remove the "
                                      "record (cancel its arrays with scancel first)")
                out[os.path.realpath(run_dir)] = (str(job_id), folder)
    return out


def task_run_dirs(task) -> list:
    """The run directories one recorded task trains: its own, or a pack's members' (``members``:
    a list of {"run", "run_dir"}); a malformed entry gives None, which the caller refuses."""
    if not isinstance(task, dict):
        return [None]
    members = task.get("members")
    if members is None:
        return [task.get("run_dir")]
    if not isinstance(members, list) or not members:
        return [None]
    return [m.get("run_dir") if isinstance(m, dict) else None for m in members]
