"""The run-directory format, in one place and torch-free (engine, sweep and analysis read it):
the files a run holds, where its checkpoints are and how they are named, and the readers of its
``config.yaml`` and ``metrics.jsonl``.

A run directory holds::

    config.yaml           the resolved config (``read_config``)
    metrics.jsonl         the training log, one JSON object a line (``log_entries``)
    checkpoints/step_NNNNNNN.pt
    code.json             the identity of the code that trained it (common.numerics)
    eval.json, eval_sequences.npz     after ``posrnn eval`` (stamped: ``common.provenance``)
    .posrnn.json          the ownership marker (``common.io.MARKER``)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from .errors import PosrnnError
from .io import MARKER, loads_bounded, marker_mismatch
from .tables import is_number

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.json"
SEQUENCES_FILE = "eval_sequences.npz"
#: the identity of the code that trained the run (``engine.rundir.record_code``, ``common.numerics``)
CODE_FILE = "code.json"
CKPT_DIR = "checkpoints"
STEP_RE = re.compile(r"^step_(\d+)\.pt$")
#: the files whose presence makes a directory a run's
RUN_FILES = (CONFIG_FILE, METRICS_FILE, EVAL_FILE, SEQUENCES_FILE, CKPT_DIR)
#: the files of a run directory that only training and evaluation write
RUN_OWN = (CONFIG_FILE, METRICS_FILE, CKPT_DIR, MARKER)
#: every name posrnn writes into a run directory: the run itself, its evaluations (of the latest
#: checkpoint and of earlier ones, ``eval_stepNNNNNNN…``), its extension's scores and its analyses
#: (stability, the permutation report); ``--force`` moves each of them aside, nothing else
_RUN_WRITES = re.compile(r"^(config\.yaml|metrics\.jsonl|checkpoints|code\.json|\.posrnn\.json"
                         r"|eval(_step\d+)?(\.json|_sequences\.npz)|extend\.json|extend_sequences\.npz"
                         r"|nll_by_position(_step\d+)?\.csv|permutation\.json|stability[\w.-]*)$")


def is_run_file(name: str) -> bool:
    """Whether ``name`` (an entry of a run directory) is one posrnn writes there."""
    return bool(_RUN_WRITES.match(name))


def _checkpoint_stranger(run_dir: Path) -> Optional[str]:
    """The first entry of ``run_dir/checkpoints`` that posrnn never writes there, or None."""
    from .io import TEMP_RE

    d = Path(run_dir) / CKPT_DIR
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        return f"its {CKPT_DIR} is not a directory posrnn made"
    if not d.is_dir():
        return None
    for p in sorted(d.iterdir()):
        if not (STEP_RE.match(p.name) or TEMP_RE.match(p.name)) or p.is_symlink():
            return f"its {CKPT_DIR}/ holds {p.name}, which posrnn never writes"
    return None


def not_posrnns(run_dir: Path) -> Optional[str]:
    """Why the files of ``run_dir`` are not a posrnn run's (so ``--force`` must not replace them),
    or None when they are. A run carries posrnn's marker (``.posrnn.json``, kind ``run``); a run
    written before the marker existed is recognised by a ``config.yaml`` that reads as a posrnn
    config. Either way ``checkpoints/`` holds only posrnn's checkpoint names."""
    from .io import read_marker

    marker = read_marker(run_dir)
    if marker is not None and marker["kind"] != "run":
        return f"it is a posrnn {marker['kind']} directory, not a run"
    stranger = _checkpoint_stranger(run_dir) or (marker_mismatch(run_dir, marker) if marker else None)
    if stranger:
        return stranger
    if marker is not None:  # a marker is taken only with files that are what it says: posrnn's config, torch archives
        return _not_as_marked(run_dir)
    try:
        cfg = read_config(run_dir)
    except PosrnnError:
        cfg = None
    if cfg is None:
        present = [n for n in RUN_FILES if (Path(run_dir) / n).exists()]
        return (f"its {CONFIG_FILE} is not a posrnn config" if (Path(run_dir) / CONFIG_FILE).exists() else
                f"it holds {', '.join(present)} but no config.yaml and no posrnn marker")
    return None


def _is_yaml(path: Path) -> bool:
    import yaml

    try:
        yaml.safe_load(path.read_bytes()[:1 << 20])
    except (OSError, ValueError, yaml.YAMLError):
        return False
    return True


def _not_as_marked(run_dir: Path) -> Optional[str]:
    """Why a marked folder's files are not what posrnn writes (a config.yaml that is no posrnn
    config, a checkpoint that is no torch archive: an empty file, another tool's), or None."""
    if (Path(run_dir) / CONFIG_FILE).exists():
        try:
            read_config(run_dir)
        except PosrnnError:
            if _is_yaml(Path(run_dir) / CONFIG_FILE):  # another tool's config; one damaged (not YAML) is posrnn's run's
                return f"its {CONFIG_FILE} is not a posrnn config"
    for _, p in list_checkpoints(run_dir):
        try:
            with open(p, "rb") as f:
                head = f.read(4)
        except OSError:
            continue  # pruned meanwhile
        if head != b"PK\x03\x04":
            return f"its {CKPT_DIR}/{p.name} is not a checkpoint posrnn wrote (not a torch archive)"
    return None


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """``[(step, path), …]`` of the run's checkpoints, sorted by step."""
    d = Path(run_dir) / CKPT_DIR
    if not d.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in d.iterdir() if (m := STEP_RE.match(p.name)))


def read_config(run_dir: Path, fix: str = "restore or remove it"):
    """The config saved in a run directory (a ``RunConfig``), or None when there is none. One that
    is not UTF-8, not YAML, not a mapping of sections, or whose aliases expand without bound is
    refused in one line ending with ``fix``."""
    import yaml

    from .config import RunConfig, safe_load_bounded

    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        data = safe_load_bounded(path.read_text(encoding="utf-8"), str(path))
    except UnicodeDecodeError:
        raise PosrnnError(f"{path} is not text (not UTF-8); it is not a config posrnn wrote: {fix}") from None
    except yaml.YAMLError:
        raise PosrnnError(f"{path} is not valid YAML; {fix}") from None
    except OSError as e:
        raise PosrnnError(f"cannot read {path} ({e.strerror or type(e).__name__})") from None
    if not isinstance(data, dict) or not data:
        raise PosrnnError(f"{path} is not a run's config (not a mapping of sections); {fix}")
    return RunConfig.from_dict(data, source=str(path))


def log_entries(run_dir: Path, numbers: tuple[str, ...] = ()) -> list[dict]:
    """The training log's entries, in order: every line of ``metrics.jsonl`` that is a JSON
    object (a line cut by a crash or a time-out is skipped) and, when ``numbers`` are named,
    holds each of them as a finite number. No log: ``[]``. A log that is not UTF-8 is refused."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PosrnnError(
            f"{path} is not text (not UTF-8); it is not a log posrnn wrote: re-run its training") from None
    out = []
    for line in text.splitlines():
        try:
            x = loads_bounded(line, path)
        except ValueError:  # one nested without bound is refused (loads_bounded)
            continue  # a line cut by a crash
        if isinstance(x, dict) and all(is_number(x.get(k)) for k in numbers):
            out.append(x)
    return out
