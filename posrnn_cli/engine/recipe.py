"""The checks of a run's training settings (001 §3.3, 003 §4.2): each field's bounds and what
relates two fields. Torch-free, so a command or a sweep refuses a bad recipe before torch loads;
the optimiser itself is ``optim``."""

from __future__ import annotations

from ..common.settings.config import TrainConfig, check_bounds
from ..common.errors import PosrnnError


def check_train_config(t: TrainConfig) -> None:
    """The field bounds (declared with ``TrainConfig``), then what relates two fields."""
    check_bounds(t, "train")
    if not t.warmup_steps < t.iterations:
        raise PosrnnError(
            f"warm-up ({t.warmup_steps}) must be shorter than the run ({t.iterations} iterations); pass a smaller "
            "--warmup"
        )
    if not all(0 <= b < 1 for b in t.betas):
        raise PosrnnError(f"Adam betas must lie in [0, 1), got {list(t.betas)}")
