"""Golden traces (tests/golden.py): every core × a task of each family × {none, sinusoidal}
trained a few CPU steps at a fixed seed must give the committed losses and parameter checksum of
the running torch version, so a change that moves numbers either bumps a declared version
(``common.numerics``) or is found here. A one-ulp change in a core is caught; a rename is not a
change of numbers."""

from __future__ import annotations

import json
import platform

import pytest
import torch

from golden import GOLDEN, checksum, compare, run, verdict
from posrnn_cli.models import CORES


def golden() -> dict:
    """This torch version's traces; a skip in one line where the table has none (or the CPU is no x86-64)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"golden traces are pinned to x86-64 CPU kernels; this machine is {platform.machine()}")
    table = json.loads(GOLDEN.read_text())
    if torch.__version__ not in table:
        pytest.skip(f"no golden traces for torch {torch.__version__} (tests/golden_traces.json holds "
                    f"{', '.join(sorted(table))}); write them with python tests/golden.py --write")
    return table[torch.__version__]


@pytest.fixture(scope="module")
def traced() -> tuple[str, dict, dict]:
    """The traces as they are and with each core nudged one ulp, from one pinned process."""
    return run(nudged=True)


def test_every_core_task_family_and_form_trains_to_its_golden_trace(traced):
    want = golden()
    version, got, _ = traced
    assert version == torch.__version__
    lines = compare(want, got)
    assert not lines, verdict(lines)


def test_a_one_ulp_change_in_a_core_fails_the_comparison(traced):
    """Each core's largest first weight moved by one ulp before training: every case of every core fails."""
    want = golden()
    lines = compare(want, traced[2])
    assert len(lines) == len(want) == len(CORES) * 3 * 2, lines
    assert all("numbers changed under the same versions" in x for x in lines)
    assert verdict(lines).startswith("numbers changed and no version was bumped. If the change is meant to change "
                                     "numbers, bump the version")


def test_the_verdict_names_each_remedy():
    a = {"versions": {"core/gru": 1}, "loss": [1.0, 0.5], "params": "ab"}
    assert compare({"x": a}, {"x": a}) == []
    bumped = compare({"x": a}, {"x": {**a, "versions": {"core/gru": 2}, "loss": [1.0, 0.25]}})
    assert bumped == ["x: its versions changed ({'core/gru': 1} → {'core/gru': 2})"]
    assert verdict(bumped).startswith("the declared versions changed: write the traces again")
    moved = compare({"x": a}, {"x": {**a, "loss": [1.0, 0.25]}})
    assert moved == ["x: numbers changed under the same versions (loss at step 2: 0.5 → 0.25)"]
    assert "a refactor changed numbers" in verdict(moved)


def test_the_parameter_checksum_ignores_names_and_order():
    """A renamed attribute or module (a refactor) leaves the checksum as it was; one ulp does not."""
    w, b = torch.randn(3, 2), torch.randn(3)
    assert checksum({"core.w": w, "core.b": b}) == checksum({"b": b.clone(), "renamed.weight": w.clone()})
    nudged = w.clone()
    nudged[0, 0] = torch.nextafter(nudged[0, 0], torch.tensor(float("inf")))
    assert checksum({"core.w": nudged, "core.b": b}) != checksum({"core.w": w, "core.b": b})
