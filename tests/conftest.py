"""Test-wide settings: one torch thread (2-core CI machines thrash with more under load),
DVC analytics off with a private site cache; ``ROOT``, the repository (``from conftest import
ROOT``); and the fixtures the test files share."""

import os
import tempfile
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("DVC_SITE_CACHE_DIR", tempfile.mkdtemp(prefix="dvc-site-"))

#: the repository's root (params.yaml, dvc.yaml, results/, docs/)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def root() -> Path:
    """The repository's root."""
    return ROOT


def tiny_train(**changes) -> list[str]:
    """``posrnn train`` options for a run of seconds on a CPU (GRU, reverse, V 6, L 4, H 8, 6
    iterations), with ``changes`` (``hidden_size=16``; ``None`` drops an option); ``n_test`` sets
    ``task.n_test``."""
    opts = {"task": "reverse", "model": "gru", "vocab_size": 6, "length": 4, "hidden_size": 8, "iterations": 6,
            "batch_size": 8, "seed": 0, "device": "cpu", "checkpoint_every": 3, "n_test": 32, **changes}
    n_test = opts.pop("n_test")
    args = [a for k, v in opts.items() if v is not None for a in (f"--{k.replace('_', '-')}", str(v))]
    return args + (["--set", f"task.n_test={n_test}"] if n_test is not None else [])


@pytest.fixture
def tiny() -> list[str]:
    """``tiny_train()``: the options of a run of seconds."""
    return tiny_train()
