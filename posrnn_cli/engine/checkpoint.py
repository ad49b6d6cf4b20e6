"""Run directories and checkpoints: written atomically, loaded without arbitrary unpickling.

A run directory holds ``config.yaml`` (the resolved config), ``metrics.jsonl`` (the
training log), ``checkpoints/step_NNNNNNN.pt`` and, after ``eval``, ``eval.json``.
A checkpoint is a plain dict of tensors and Python scalars (loadable with
``torch.load(weights_only=True)``) that also holds the full config, so every later
command rebuilds the run from the checkpoint alone.

A checkpoint proves what it is: it records its run's identity, the digest of its config and
the id of the run directory's ownership marker (``.posrnn.json``). Loading checks the digest
against the config it holds and the step against the file name; ``check_belongs`` refuses a
checkpoint of another run (another id, or a config that contradicts the run's ``config.yaml``).
No checkpoint holding a non-finite tensor is ever written (``NonFiniteState``).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import torch

from ..common.settings.config import RunConfig, config_diff
from ..common.errors import PosrnnError
from ..common.settings.config import config_digest
from ..common.files.io import atomic_write, mark_files, read_marker
from .lock import LOCK, read_lock_line
from ..common.files.rundir import read_run_config
from ..common.files.rundir import METRICS_FILE, STEP_RE, CKPT_DIR

FORMAT = "posrnn-checkpoint"
VERSION = 2  # 2: the run identity; version 1 (without it) is still read
READABLE = (1, 2)


def atomic_torch_save(obj: Any, path: Path) -> None:
    atomic_write(path, lambda f: torch.save(obj, f))


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CKPT_DIR / f"step_{step:07d}.pt"


class NonFiniteState(PosrnnError):
    """A state to be checkpointed holds a NaN or an infinity: it is not written."""

    exit_code = 1


def non_finite(state: Any, prefix: str = "") -> list[str]:
    """The names of the floating tensors in ``state`` (nested dicts and lists) with a NaN or an infinity."""
    bad = []
    if isinstance(state, torch.Tensor):
        if (state.is_floating_point() or state.is_complex()) and not bool(torch.isfinite(state).all()):
            bad.append(prefix or "tensor")
    elif isinstance(state, dict):
        for k, v in state.items():
            bad += non_finite(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(state, (list, tuple)):
        for i, v in enumerate(state):
            bad += non_finite(v, f"{prefix}[{i}]")
    elif isinstance(state, float) and state != state or state in (float("inf"), float("-inf")):
        bad.append(prefix)
    return bad


def save_checkpoint(run_dir: Path, step: int, state: dict[str, Any]) -> Path:
    """Write the checkpoint of ``step`` atomically, with the run's identity. A state holding a
    non-finite tensor (weights, optimizer moments) is refused and nothing is written."""
    path = checkpoint_path(run_dir, step)
    bad = non_finite({k: state.get(k) for k in ("model", "optimizer")})
    if bad:
        raise NonFiniteState(f"step {step}: {len(bad)} tensor(s) of the model or optimizer hold non-finite values "
                             f"(first: {bad[0]}), so no checkpoint was written for it")
    marker = read_marker(run_dir)
    identity = {"config_digest": config_digest(state["config"]), "run_id": marker["id"] if marker else None}
    atomic_torch_save({"format": FORMAT, "version": VERSION, "step": step, **state, "identity": identity}, path)
    mark_files(run_dir, [f"{CKPT_DIR}/{path.name}"], log=METRICS_FILE)  # the marker proves them posrnn's
    return path


def _refuse(path: Path, what: str) -> PosrnnError:
    return PosrnnError(f"{path} was refused: {what}; use a checkpoint written by `posrnn train`, "
                       f"or resume from an earlier checkpoint")


class CheckpointGone(PosrnnError):
    """``load_checkpoint``: there is no file at the path (never written, or deleted just now)."""


def vanished(ckpt_path: Path, run_dir: Path) -> PosrnnError:
    """The error for a checkpoint deleted while it was being read: names who writes the run."""
    holder = read_lock_line(Path(run_dir) / LOCK)[0]
    who = f"another process ({holder})" if holder else "another process"
    return PosrnnError(f"checkpoint {ckpt_path} was deleted while it was being read: {who} is training {run_dir} and "
                       f"keeps only its latest checkpoint; evaluate the run once that process has finished")


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and validate a checkpoint (``weights_only=True``: tensors and plain data only): its
    format, config, step, weights and identity, each refused in one line when wrong."""
    path = Path(path)
    if not path.is_file():
        if path.exists():  # a FIFO, a device or a directory: never opened (a FIFO would block the reader)
            raise PosrnnError(f"checkpoint {path} is not a regular file (a FIFO, device or directory); remove it, "
                              f"then resume from an earlier checkpoint or re-train")
        raise CheckpointGone(f"checkpoint {path} does not exist; train first or pass an existing checkpoint")
    try:  # one open file throughout: a checkpoint deleted meanwhile (keep_checkpoints: last) is still read whole
        f = open(path, "rb")
    except FileNotFoundError:
        raise CheckpointGone(f"checkpoint {path} does not exist; train first or pass an existing checkpoint") from None
    except OSError as e:
        raise PosrnnError(f"cannot read {path} ({e.strerror or type(e).__name__})") from None
    with f:
        return _load_open(path, f, map_location)


def _load_open(path: Path, f, map_location) -> dict[str, Any]:
    try:
        is_zip = zipfile.is_zipfile(f)
        f.seek(0)
    except OSError as e:
        raise PosrnnError(f"cannot read {path} ({e.strerror or type(e).__name__})") from None
    if not is_zip:
        raise PosrnnError(f"{path} is not a posrnn checkpoint (not a torch archive: truncated, or another kind of "
                          f"file), so it was refused; use a checkpoint written by `posrnn train`")
    try:
        ckpt = torch.load(f, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises several types for truncated/corrupt/foreign files
        text = str(e)
        if "Unsupported global" in text or "GLOBAL" in text or "Unsupported operand" in text:
            raise PosrnnError(f"{path} was refused: it holds Python objects that a posrnn checkpoint never contains, "
                              f"so it was not loaded; use a checkpoint written by `posrnn train`") from None
        raise PosrnnError(f"{path} is not a readable posrnn checkpoint (truncated or corrupt), so it was refused; "
                          f"delete it and resume from an earlier checkpoint, or re-train") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise PosrnnError(f"{path} is not a posrnn checkpoint; pass a file written by `posrnn train`")
    if ckpt.get("version") not in READABLE:
        raise PosrnnError(f"checkpoint {path} has format version {ckpt.get('version')!r}, this posrnn reads "
                          f"{', '.join(map(str, READABLE))}")
    if not isinstance(ckpt.get("config"), dict):
        raise _refuse(path, "it holds no config")
    raw_config = ckpt["config"]
    ckpt["config"] = RunConfig.from_dict(raw_config, source=f"the config inside {path}")
    step = ckpt.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise _refuse(path, f"its step is {step!r}, not a count of iterations")
    m = STEP_RE.match(path.name)
    if m and int(m.group(1)) != step:
        raise _refuse(path, f"it holds step {step}, but its name says step {int(m.group(1))} (renamed or copied?)")
    model = ckpt.get("model")
    if not isinstance(model, dict) or not model or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                            for k, v in model.items()):
        raise _refuse(path, "it holds no model weights")
    bad = non_finite(model)
    if bad:
        raise _refuse(path, f"{len(bad)} of its weights hold non-finite values (first: {bad[0]})")
    identity = ckpt.get("identity")
    if ckpt["version"] >= 2:
        if not isinstance(identity, dict) or not isinstance(identity.get("config_digest"), str):
            raise _refuse(path, "it records no run identity")
        if identity["config_digest"] != config_digest(raw_config):
            raise _refuse(path, "its config does not match the digest it was written with (edited?)")
    return ckpt


def check_resumable(ckpt: dict, path: Path) -> None:
    """The parts only a resumption reads: optimizer, scheduler and RNG states of the right kinds."""
    opt = ckpt.get("optimizer")
    if not isinstance(opt, dict) or not isinstance(opt.get("state"), dict) or not isinstance(opt.get("param_groups"),
                                                                                             list):
        raise _refuse(path, "its optimizer state is missing or malformed")
    if not isinstance(ckpt.get("scheduler"), dict):
        raise _refuse(path, "its learning-rate schedule state is missing or malformed")
    rng = ckpt.get("rng")
    if not isinstance(rng, dict) or not isinstance(rng.get("device"), str) or not all(
            isinstance(rng.get(k), torch.Tensor) and rng[k].dtype == torch.uint8 for k in ("train", "torch")):
        raise _refuse(path, "its random-number-generator state is missing or malformed")
    if not isinstance(ckpt.get("extra", {}), dict):
        raise _refuse(path, "its extra information is malformed")
    bad = non_finite(opt)
    if bad:
        raise _refuse(path, f"its optimizer state holds non-finite values (first: {bad[0]})")


def check_belongs(ckpt: dict, path: Path, run_dir: Path,
                  allow: frozenset[str] = frozenset({"train.iterations"})) -> None:
    """Refuse a checkpoint that is not the run's own: another run id than the run directory's
    marker, or a config that contradicts the run's ``config.yaml`` (beyond ``allow``: a run
    trained longer keeps its earlier checkpoints)."""
    run_dir = Path(run_dir)
    marker = read_marker(run_dir)
    identity = ckpt.get("identity") or {}
    if marker and identity.get("run_id") and identity["run_id"] != marker["id"]:
        raise PosrnnError(f"{path} belongs to another run (run id {identity['run_id'][:8]}…, while {run_dir} is "
                          f"{marker['id'][:8]}…), so it was refused; remove it from {run_dir / CKPT_DIR}")
    saved = read_run_config(run_dir)
    if saved is not None:
        diff = [k for k in config_diff(saved, ckpt["config"]) if k not in allow]
        if diff:
            a, b = saved.flat(), ckpt["config"].flat()
            shown = ", ".join(f"{k}: config.yaml {a[k]!r} vs checkpoint {b[k]!r}" for k in diff[:3])
            raise PosrnnError(f"{path} does not belong to the run in {run_dir} ({shown}), so it was refused; "
                              f"remove it from {run_dir / CKPT_DIR} or pass the run it came from")


