"""The life of a run directory around its training, torch-free: one process holds it
(``owned_run_dir``: checked, created, locked, and removed again when it fails before its first
checkpoint), a run that differs from the asked config is refused (``refuse_different_run``), a
run starts (``begin_run``: a replaced run moved aside, the ownership marker, ``config.yaml``) and
records its identity (``start_and_fit``), and a replaced run is dropped or brought back
(``settle``). ``drop_unscheduled`` leaves a run only the checkpoints its schedule names.
``engine.train`` (the loop), ``engine.extend`` and ``engine.ensemble`` run inside it.
"""

from __future__ import annotations

import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional

from ..common.settings.config import RunConfig, dump_yaml
from ..common.errors import PosrnnError
from ..common.files.io import atomic_write_text, read_marker, remove_stale_temps, write_marker
from ..common.files.rundir import (CKPT_DIR, CONFIG_FILE, describe_diff, list_checkpoints, record_code, restamp_config,
                                   run_state)
from ..common.host.signals import Stopped
from .lock import run_lock
from .paths import check_out_dir_of_run
from .replace import REPLACED, Replacement


class TrainingStopped(PosrnnError):
    """The run stopped before its last iteration (a signal, or a non-finite value)."""

    exit_code = 1


class Interrupted(TrainingStopped, Stopped):
    """Stopped on a signal with a checkpoint at ``step`` (the step the loop had finished when it
    saw the signal ``signal``)."""

    exit_code = 130

    def __init__(self, message: str, step: int = 0, signal: str = ""):
        super().__init__(message)
        self.step, self.signal = step, signal


def refuse_different_run(out_dir: Path, cfg: RunConfig) -> None:
    """Refuse to start ``cfg`` where another config's run lives, naming each differing key with
    both values and the ways out: --force replaces that run, another --out keeps both."""
    if not Path(out_dir).is_dir():
        return
    st = run_state(out_dir, cfg)
    if st.state == "different" and st.saved is not None:
        more = f" and {len(st.diff) - 4} more" if len(st.diff) > 4 else ""
        raise PosrnnError(f"{out_dir} already holds a different run "
                          f"({describe_diff(st, cfg, 'there', 'asked', limit=4)}{more}); pass --force to replace it "
                          "with this one, or another --out to keep both")


def begin_run(out_dir: Path, cfg: RunConfig, force: bool) -> Optional[Replacement]:
    """After every check has passed: move a run being replaced (``force``) aside, mark the
    directory as a run's (a new run id unless it has one), clear dead writers' temporary files
    and write ``config.yaml``. Returns the replacement to commit or roll back."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    replacing = None
    if force:
        replacing = Replacement(out_dir, REPLACED)
        replacing.start()
    try:
        marker = read_marker(out_dir)
        if marker is None or marker["kind"] != "run":
            new_id = uuid.uuid4().hex
            if replacing is not None:  # the record names the new run before its marker exists
                replacing.bind(new_id)
            write_marker(out_dir, "run", new_id)
        remove_stale_temps(out_dir)
        remove_stale_temps(out_dir / CKPT_DIR)
        atomic_write_text(out_dir / CONFIG_FILE, dump_yaml(cfg))
    except BaseException:
        if replacing is not None:
            replacing.rollback()
        raise
    return replacing


def start_and_fit(out_dir: Path, cfg: RunConfig, force: bool, fresh: bool, procedures: tuple[str, ...], device: str,
                  on_start: Optional[Callable[[], None]], work: Callable[[], dict]) -> dict:
    """The rest of a run's life once every check has passed, the same for ``train`` and
    ``extend-vocab``: config.yaml is written now (an old run moved aside under ``--force``), a run
    trained from step 0 records its identity (made by ``procedures`` on the ``device`` type;
    ``common.files.rundir.record_code``), ``on_start`` announces it, ``work`` trains (and scores) it, and
    the old run is then dropped, or brought back on failure."""
    replacing = begin_run(out_dir, cfg, force)
    if fresh:
        record_code(out_dir, cfg, procedures, device)
    else:
        restamp_config(out_dir, cfg)
    if on_start is not None:
        on_start()
    try:
        result = work()
    except BaseException as e:
        settle(replacing, e)
        raise
    settle(replacing, None)
    return result


@contextmanager
def owned_run_dir(out_dir: Path, what: str):
    """The life of a command that writes a run directory: ``out_dir`` is checked
    (``check_out_dir_of_run``), created if missing and locked for the whole block (another
    process gets one line naming the holder). If the block fails before the run's first
    checkpoint, the directories it created are removed again (parents included)."""
    out_dir = Path(out_dir)
    check_out_dir_of_run(out_dir)
    top = _first_missing(out_dir)
    try:
        if top is not None:
            out_dir.mkdir(parents=True)
        with run_lock(out_dir, what):
            yield
    except BaseException as e:
        if top is not None and top.is_dir() and not (isinstance(e, Interrupted) or list_checkpoints(out_dir)):
            shutil.rmtree(top, ignore_errors=True)  # failed before its first checkpoint: leave no trace
        raise


def settle(replacing: Optional[Replacement], error: Optional[BaseException]) -> None:
    """``--force``: keep the new run once it finished (or was interrupted with a checkpoint to
    resume from); on any failure bring the old run back, byte-identical."""
    if replacing is None:
        return
    if error is None or isinstance(error, Interrupted):
        replacing.commit()
    else:
        replacing.rollback()


def _first_missing(path: Path) -> Optional[Path]:
    """The highest directory on the way to ``path`` that does not exist yet (``path`` itself
    when only it is missing), or None when ``path`` exists."""
    path = Path(path)
    top = None
    p = path
    while not (p.exists() or p.is_symlink()) and p != p.parent:
        top, p = p, p.parent
    return top


def drop_unscheduled(run_dir: Path, t, step: int, extra: dict) -> int:
    """Once the checkpoint of ``step`` is written, remove the earlier ones the schedule does not
    name (``TrainConfig.scheduled``: taken for the wall clock, a signal or ``--stop-after``), so a
    finished run holds the same checkpoints however often it was interrupted; the last step of a
    run before it was trained longer (``--resume --iterations``) is kept."""
    ends = {e.get("at_step") for e in extra.get("extensions", []) if isinstance(e, dict)}
    n = 0
    for s, path in list_checkpoints(run_dir):
        if s < step and not t.scheduled(s) and s not in ends:
            path.unlink(missing_ok=True)
            n += 1
    return n
