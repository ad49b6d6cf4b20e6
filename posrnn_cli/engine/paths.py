"""Where a command reads and writes: the checkpoint it reads (``resolve_checkpoint``), a run's
directory (``check_out_dir_of_run``), another command's output directory or file
(``check_out_dir``, ``check_out_file``, ``check_stability_out``), never inside a run that is not its
own (``enclosing_run``). Torch-free, so a command refuses a bad path before it loads torch."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..common.errors import PosrnnError
from ..common.files.io import check_out_path, check_owned, inside, read_marker, same_path
from ..common.files.rundir import CKPT_DIR, CONFIG_FILE, METRICS_FILE, RUN_OWN, list_checkpoints
from .lock import restore_before_reading


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a run directory: posrnn's marker says so, or it holds a config.yaml
    beside checkpoints/ or metrics.jsonl (a run written before the marker existed)."""
    path = Path(path)
    try:
        marker = read_marker(path)
        if marker is not None:
            return marker["kind"] == "run"
        return (path / CONFIG_FILE).is_file() and ((path / CKPT_DIR).is_dir() or (path / METRICS_FILE).is_file())
    except OSError:
        return False


def enclosing_run(path: Path) -> Optional[Path]:
    """The run directory that ``path`` lies inside (strictly below it), or None."""
    import os

    p = Path(os.path.realpath(path))
    for parent in p.parents:
        if is_run_dir(parent):
            return parent
    return None


def check_out_dir(out: Path, inputs: tuple = (), option: str = "--out") -> Path:
    """Refuse, in one line, an output directory that is empty, the current directory, inside a
    run, equal to an input, or one that holds an input."""
    check_out_path(out, option)
    run = enclosing_run(out)
    if run is not None:
        raise PosrnnError(f"{option} {out} lies inside the run {run}; pass a directory outside every run")
    for i in inputs:
        if same_path(out, i) or inside(i, out):
            raise PosrnnError(f"{option} {out} {'is' if same_path(out, i) else 'holds'} the input {i}; pass another "
                              "directory")
    return Path(out)


def check_out_file(out: Path, inputs: tuple = (), run_dir: Optional[Path] = None, header: bytes = b"",
                   option: str = "--out") -> Path:
    """Refuse, in one line, an output file that is an input, one of a run's own files, inside a
    run other than ``run_dir`` (or inside any run's checkpoints/), or an existing file that does
    not begin with ``header`` (so a file posrnn did not write is never overwritten)."""
    check_out_path(out, option)
    out = Path(out)
    if out.is_dir():
        raise PosrnnError(f"{option} {out} is a directory; pass a file name")
    for i in inputs:
        if same_path(out, i):
            raise PosrnnError(f"{option} {out} is the input {i}; pass another file name")
    run = enclosing_run(out)
    if run is not None:
        if run_dir is None or not same_path(run, run_dir) or not same_path(out.parent, run):
            raise PosrnnError(f"{option} {out} lies inside the run {run}"
                              + (f" (its {CKPT_DIR}/)" if CKPT_DIR in out.parts else "")
                              + "; pass a file outside it")
        if out.name in RUN_OWN or out.name.startswith(("eval", "extend", "nll_by_position")):
            raise PosrnnError(f"{option} {out} is one of the run's own files; pass another file name")
    # never through a link, onto a FIFO or device, or over a file posrnn did not write (or one that does not
    # begin with ``header``, as the files of this command did before their folders kept a ledger)
    check_owned(out, None, option, recognise=(lambda b: b.startswith(header)) if header else None)
    return out


def check_out_dir_of_run(out_dir: Path) -> Path:
    """A run's --out: not empty, not the current directory, not a symlink loop, not a file or
    under one, not inside another run."""
    check_out_path(out_dir)
    existing = next((p for p in (Path(out_dir), *Path(out_dir).parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        where = "" if existing == Path(out_dir) else f" lies under {existing}, which"
        raise PosrnnError(f"--out {out_dir}{where} is a file, not a directory; pass another --out")
    run = enclosing_run(out_dir)
    if run is not None:
        raise PosrnnError(f"--out {out_dir} lies inside the run {run}; pass a directory outside every run")
    return Path(out_dir)


def resolve_checkpoint(path: Path, step: Optional[int] = None) -> tuple[Path, Path]:
    """A run directory or a checkpoint file → ``(checkpoint file, run directory)``.

    For a directory, the checkpoint at ``step`` (default: the latest). An old run that an
    interrupted ``--force`` left moved aside is restored first (``replace.restore_before_reading``)."""
    path = Path(path)
    if path.is_dir():
        restore_before_reading(path)
    elif path.parent.name == CKPT_DIR and path.parent.parent.is_dir():
        restore_before_reading(path.parent.parent)
    if path.is_file():
        run_dir = path.parent.parent if path.parent.name == CKPT_DIR else path.parent
        return path, run_dir
    if not path.is_dir():
        raise PosrnnError(f"{path} is neither a run directory nor a checkpoint file; pass the --out of a `posrnn "
                          "train` run")
    ckpts = list_checkpoints(path)
    if not ckpts:
        raise PosrnnError(f"run directory {path} has no checkpoints; train it first (posrnn train --out {path})")
    if step is None:
        return ckpts[-1][1], path
    for s, p in ckpts:
        if s == step:
            return p, path
    raise PosrnnError(f"run {path} has no checkpoint at step {step}; available: {', '.join(str(s) for s, _ in ckpts)}")


#: the first columns of the CSV ``posrnn stability --out`` writes (an older file is recognised by them)
CSV_HEADER = b"model,pe,step,condition,pair,stability,"


def check_stability_out(out: Path, run: Path, run_dir: Path, header: bytes = CSV_HEADER) -> Path:
    """Where ``posrnn stability --out`` may write: not the analysed checkpoint or a run's own
    file, not inside another run or any checkpoints/, and over an existing file only when it is
    a stability CSV (refused in one line otherwise)."""
    return check_out_file(out, inputs=(run,), run_dir=run_dir, header=header)


def check_extension_out(run: Path, extra: int, out: Path) -> Path:
    """Where ``posrnn extend-vocab`` may write, and how many ids it may add, checked before the
    trained run is loaded: ``extra`` in 1 … 2^24, ``out`` not the trained run, not inside a run,
    not holding it (one line otherwise). Returns the trained run's directory."""
    if not 1 <= extra <= 2**24:
        raise PosrnnError(f"--extra-vocab must lie in 1 … 16,777,216, got {extra}")
    run_dir = resolve_checkpoint(Path(run))[1]
    if same_path(out, run_dir):
        raise PosrnnError("--out must differ from the trained run (the trained run is never modified)")
    check_out_dir(out, inputs=(run, run_dir))
    return run_dir


def check_eval_batch(batch_size: Optional[int]) -> None:
    """``--batch-size`` of an evaluation: at least 1 where given (one line otherwise)."""
    if batch_size is not None and batch_size < 1:
        raise PosrnnError(f"--batch-size must be at least 1, got {batch_size}")
