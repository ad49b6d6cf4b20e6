"""The run-directory format, in one place and torch-free (engine, sweep and analysis read it):
the files a run holds, where its checkpoints are and how they are named, and the readers of its
``config.yaml`` and ``metrics.jsonl``.

A run directory holds::

    config.yaml           the resolved config (``read_config``)
    metrics.jsonl         the training log, one JSON object a line (``log_entries``)
    checkpoints/step_NNNNNNN.pt
    code.json             the identity of the code that trained it (common.numerics)
    eval.json, eval_sequences.npz     after ``posrnn eval`` (stamped: ``common.results.provenance``)
    .posrnn.json          the ownership marker (``common.files.io.MARKER``)

``run_state`` compares one with a config and says what it holds for it:

* ``new`` — nothing of a run is there;
* ``resume`` — the same config, not yet at its last iteration (possibly no checkpoint yet);
* ``done`` — the same config, with a checkpoint at its last iteration;
* ``different`` — a run of another config, run files without a readable ``config.yaml``.

``posrnn train`` (``prepare_run_dir``), the sweep's jobs and ``posrnn sweep --dry-run`` all read
it. ``record_code`` writes the identity a run starts with and ``code_state`` says whether this
code would record the same one.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..settings.config import RunConfig, config_diff, config_digest, safe_load_bounded
from ..errors import PosrnnError
from .io import MARKER, atomic_write_text, loads_bounded, mark_files, marker_mismatch
from ..results.tables import is_number

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.json"
SEQUENCES_FILE = "eval_sequences.npz"
#: the identity of the code that trained the run (``record_code``, ``common.numerics``)
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


# ---- the state of a run directory -----------------------------------------------------------------
def prune_checkpoints(run_dir: Path) -> int:
    """``keep_checkpoints: last``: remove every checkpoint but the latest (only ever after the
    latest was written in full, so a run can always resume). Returns how many were removed."""
    ckpts = list_checkpoints(run_dir)
    for _, path in ckpts[:-1]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    mark_files(run_dir, removed=[f"{p.parent.name}/{p.name}" for _, p in ckpts[:-1]])  # the marker lists what is there
    return max(0, len(ckpts) - 1)


def record_code(run_dir: Path, cfg: RunConfig, procedures: tuple[str, ...], device: str, **extra) -> None:
    """Record the identity of the run from step 0 (``common.numerics.identity``: its config digest,
    the declared versions of its core, task, form and ``procedures``, the libraries and the device
    type), with ``extra`` fields beside it. A resumed run keeps the record of its start."""
    from ..numerics import identity

    atomic_write_text(Path(run_dir) / CODE_FILE, json.dumps({**identity(cfg, procedures, device), **extra}) + "\n")


def restamp_config(run_dir: Path, cfg: RunConfig) -> None:
    """A run resumed to more iterations (its only config change) records the digest of its new
    config; the rest of its record stays that of its start."""
    from ..numerics import FORMAT

    rec = read_code(run_dir)
    digest = config_digest(cfg.to_dict())
    if isinstance(rec, dict) and rec.get("format") == FORMAT and rec.get("config_digest") != digest:
        atomic_write_text(Path(run_dir) / CODE_FILE, json.dumps({**rec, "config_digest": digest}) + "\n")


def read_code(run_dir: Path):
    """What ``code.json`` holds, or None when it is missing, unreadable or nested without bound."""
    from .io import read_bounded

    path = Path(run_dir) / CODE_FILE
    try:
        return loads_bounded(read_bounded(path, "code record").decode("utf-8"), path)
    except (OSError, ValueError, PosrnnError):
        return None


def code_differences(run_dir: Path, cfg: RunConfig, procedures: tuple[str, ...]) -> Optional[list[str]]:
    """What differs between the identity the run records and the one this code would record for
    ``cfg`` here (``common.numerics.differences``); None when it records none."""
    from ..numerics import differences, identity

    return differences(read_code(run_dir), identity(cfg, procedures, cfg.train.device))


def code_state(run_dir: Path, cfg: RunConfig, procedures: tuple[str, ...]) -> str:
    """``current`` when the run was trained with the numerics this code computes for ``cfg`` here,
    ``other`` when not (a version, a library or the device differs), ``unknown`` when it records
    none (trained before runs recorded it, or its record is unreadable)."""
    diff = code_differences(run_dir, cfg, procedures)
    return "unknown" if diff is None else "other" if diff else "current"


#: the config saved in a run directory, or None (``read_config``)
read_run_config = read_config


@dataclass(frozen=True)
class RunState:
    """What ``run_dir`` holds for a config (see the module's doc)."""

    state: str
    saved: Optional[RunConfig] = None  # the run's own config, when readable
    diff: list[str] = field(default_factory=list)  # the keys where it differs from the asked config
    checkpoints: list[tuple[int, Path]] = field(default_factory=list)
    problem: Optional[str] = None  # why the saved config could not be read
    foreign: Optional[str] = None  # why the files there are not a posrnn run's (``not_posrnns``)

    @property
    def latest(self) -> int:
        return self.checkpoints[-1][0] if self.checkpoints else 0


def run_state(run_dir: Path, cfg: RunConfig) -> RunState:
    """The state of ``run_dir`` for ``cfg``: new, resume, done or different. Reads only."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise PosrnnError(f"{run_dir} is a file, not a run directory; pass another directory")
    occupied = run_dir.is_dir() and any((run_dir / name).exists() for name in RUN_FILES)
    if not occupied:
        return RunState("new")
    ckpts = list_checkpoints(run_dir)
    foreign = not_posrnns(run_dir)
    if foreign:
        return RunState("different", checkpoints=ckpts, foreign=foreign,
                        problem=f"{run_dir} holds files posrnn did not write ({foreign}); posrnn never replaces them, "
                                f"--force included: pass another --out, or move them away yourself")
    try:
        saved = read_run_config(run_dir)
    except PosrnnError as e:
        return RunState("different", checkpoints=ckpts, problem=str(e))
    if saved is None:
        return RunState("different", checkpoints=ckpts, problem=f"{run_dir} holds run files but no config.yaml")
    diff = config_diff(saved, cfg)
    if diff:
        return RunState("different", saved, diff, ckpts)
    done = bool(ckpts) and ckpts[-1][0] >= cfg.train.iterations
    return RunState("done" if done else "resume", saved, [], ckpts)


def describe_diff(st: RunState, cfg: RunConfig, saved_word: str = "saved", now_word: str = "now",
                  limit: int = 3) -> str:
    """``key: saved X vs now Y, …`` for the first ``limit`` differing keys."""
    a, b = st.saved.flat(), cfg.flat()
    return ", ".join(f"{k}: {saved_word} {a[k]!r} vs {now_word} {b[k]!r}" for k in st.diff[:limit])


@dataclass
class Resumption:
    """Where a run continues from: its checkpoint (None: step 0) and, when ``train.iterations``
    grew, the total it had before."""

    checkpoint: Optional[Path] = None
    extended_from: Optional[int] = None


def prepare_run_dir(run_dir: Path, cfg: RunConfig, resume: bool, force: bool) -> Resumption:
    """Check ``run_dir`` against ``cfg`` without touching anything; say where to continue from.

    Refuses a directory that holds another run, unless ``force``. ``resume`` needs the run's
    saved config: with no checkpoint yet it starts again from step 0; a config that differs
    only in a larger ``train.iterations`` extends the run."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise PosrnnError(f"--out {run_dir} is a file, not a directory; pass another --out")
    if resume and force:
        raise PosrnnError("--resume and --force contradict each other; pass one")
    refuse_sweep_dirs(run_dir)
    st = run_state(run_dir, cfg)
    if st.foreign:
        raise PosrnnError(st.problem)
    if st.problem and (resume or not force) and st.saved is None and (run_dir / CONFIG_FILE).is_file():
        raise PosrnnError(st.problem)  # an unreadable config.yaml: never guess what it held
    if resume:
        if st.saved is None:
            raise PosrnnError(f"nothing to resume in {run_dir}: it holds no run (no config.yaml); drop --resume")
        extended = None
        if st.diff == ["train.iterations"]:
            if cfg.train.iterations <= st.latest:
                raise PosrnnError(f"{run_dir} is already at step {st.latest}; --iterations must exceed it to train "
                                  "longer")
            if cfg.train.iterations < st.saved.train.iterations:
                raise PosrnnError(f"--iterations {cfg.train.iterations} is below the {st.saved.train.iterations} "
                                  f"iterations {run_dir} trains for (a schedule is only ever extended); drop "
                                  f"--iterations to finish it, or retrain with --force")
            extended = st.saved.train.iterations
        elif st.diff:
            raise PosrnnError(f"--resume with a config that contradicts the saved run ({describe_diff(st, cfg)}); "
                              f"drop those options or use another --out")
        return Resumption(st.checkpoints[-1][1] if st.checkpoints else None, extended)
    if st.state != "new" and not force:
        what = "a different posrnn run" if st.diff else "a posrnn run"
        raise PosrnnError(f"{run_dir} already holds {what}; pass --resume to continue it, --force to replace it, or "
                          "another --out")
    return Resumption()


#: what a sweep writes into an experiment directory (``analysis.aggregate.MANIFEST``)
SWEEP_MANIFEST = "sweep.json"


def refuse_sweep_dirs(run_dir: Path) -> None:
    """Refuse, in one line, a run directory that is a sweep's experiment directory (it holds
    ``sweep.json``) or a run root (a folder of them): a run there would be misread by the next
    sweep and aggregation as one of its cells or experiments."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return
    if (run_dir / SWEEP_MANIFEST).is_file():
        raise PosrnnError(f"--out {run_dir} is an experiment directory of a sweep (it holds {SWEEP_MANIFEST}); pass a "
                          f"directory of its own for the run")
    try:
        inner = next((d for d in run_dir.iterdir() if d.is_dir() and (d / SWEEP_MANIFEST).is_file()), None)
    except OSError:
        inner = None
    if inner is not None:
        raise PosrnnError(f"--out {run_dir} is a run root of sweeps (its {inner.name}/ holds {SWEEP_MANIFEST}); pass a "
                          f"directory of its own for the run")


def truncate_log(path: Path, step: int) -> None:
    """Drop log lines written after ``step`` (a crash after the last checkpoint)."""
    if not path.is_file():
        return
    lines = []
    for ln in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        try:
            x = loads_bounded(ln, path)
            if isinstance(x, dict) and isinstance(x.get("step"), int) and x["step"] <= step:
                lines.append(ln)
        except ValueError:  # nested without bound: refused (loads_bounded)
            continue  # a line cut by a crash (or anything else train never writes)
    atomic_write_text(path, "".join(ln + "\n" for ln in lines))
