"""Bounds that fit the machine: the memory a run's largest parts take, estimated from its config
before any of them is allocated, against the memory this machine has available.

The declared maxima of the config keys each fit alone, but not together: a tiny model with
``task.vocab_size``, ``task.n_test`` and ``train.eval_batch_size`` at their maxima needs hundreds
of GB. The estimate counts only the parts that grow with those keys (a lower bound), so a run it
refuses cannot fit; the message names the largest part and the keys that size it.
"""

from __future__ import annotations

from typing import Optional

from .. import catalog
from ..errors import PosrnnError

#: float32 and int64 sizes
F32, I64 = 4, 8


def available_bytes() -> Optional[int]:
    """The memory the kernel says is available now (``MemAvailable``), None where it is not known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"  # pragma: no cover


def run_parts(cfg, steps: int, out_steps: int, n_inputs: int, n_outputs: int,
              head_chunk: Optional[int] = None) -> list[tuple[int, str, str]]:
    """``(bytes, what, the keys that size it)`` of a run's parts that grow with its config; a
    task whose head takes ``head_chunk`` tokens at a time holds one chunk's logits."""
    t, m = cfg.train, cfg.model
    # a step of the continuous task is a vector of task.dim floats (inputs, targets and the normalised draw:
    # three copies), of the others a token id (inputs and targets)
    vectors = not catalog.TASKS[cfg.task.name].vocabulary  # the continuous task: vectors, not ids
    # drawing the continuous test set holds about ten copies of its n × L × d draw at once (the draw, its
    # normalised copy, the inputs of 2L steps, their zeros, the reversed targets, and the distinct ones selected)
    step_bytes = cfg.task.dim * F32 * 5 if vectors else I64 * 2
    train_tokens, eval_tokens = t.batch_size * out_steps, t.eval_batch_size * out_steps
    if head_chunk:
        train_tokens, eval_tokens = min(train_tokens, head_chunk), min(eval_tokens, head_chunk)
    return [
        ((n_inputs * m.E + n_outputs * m.hidden_size) * F32 * 4, "the embedding and output layer with their gradients "
         "and Adam's moments", "task.vocab_size, model.hidden_size"),
        (cfg.task.n_test * steps * step_bytes, "the held-out test set",
         "task.n_test, task.length" + (", task.dim" if vectors else "")),
        (train_tokens * n_outputs * F32 * 3, "a training batch's logits and their gradients",
         "train.batch_size, task.vocab_size"),
        (eval_tokens * n_outputs * F32 * 2, "an evaluation batch's logits",
         "train.eval_batch_size, task.vocab_size"),
    ]


def member_parts(cfg, steps: int, out_steps: int, n_inputs: int, n_outputs: int, d_in: int, gates: int,
                 head_chunk: Optional[int] = None) -> tuple[int, int]:
    """(bytes one member of an ensemble of ``cfg``'s seeds needs at its training step's peak, bytes
    the members share), estimates: of the member's ``run_parts``, its embedding and output layer
    (with gradients and Adam's moments) and its training batch's logits, and what its step saves for
    backward, per token of the batch (the encoder's output and its gradient, the core's gates and
    states, the core output, its gradient and the head's input: ``(2·d_in + (gates + 5)·H)`` floats);
    shared, the held-out test set (one for all members). Evaluation runs after training, a member
    at a time, so its logits are no part of the step's peak."""
    layers, test_set, logits, _evaluation = run_parts(cfg, steps, out_steps, n_inputs, n_outputs, head_chunk)
    saved = cfg.train.batch_size * steps * (2 * d_in + (gates + 5) * cfg.model.hidden_size) * F32
    return layers[0] + logits[0] + saved, test_set[0]


def members_that_fit(k: int, member: int, shared: int, available: Optional[int]) -> int:
    """The most members, at most ``k`` and at least 1, whose ``member_parts`` fit in ``available``
    bytes (None: not known, so ``k``)."""
    if available is None:
        return k
    return max(1, min(k, (available - shared) // max(member, 1)))


def check_fits(parts: list[tuple[int, str, str]], what: str, available: Optional[int] = None) -> None:
    """Refuse in one line, before anything is allocated, work whose parts together exceed the
    memory available (``available``, default: the machine's now)."""
    available = available_bytes() if available is None else available
    need = sum(b for b, _, _ in parts)
    if available is None or need <= available:
        return
    size, name, keys = max(parts)
    raise PosrnnError(f"{what} needs at least {human(need)} of memory, more than the {human(available)} available here "
                      f"(largest: {name}, {human(size)}); lower {keys}")


def check_run_fits(parts: list[tuple[int, str, str]], n_test: int, available: Optional[int] = None) -> None:
    """``check_fits`` for a run, naming the ``task.n_test`` that fits when the test set is what
    does not (``parts[1]``, as ``run_parts`` orders them)."""
    available = available_bytes() if available is None else available
    try:
        check_fits(parts, "this run", available)
    except PosrnnError as e:
        test_bytes, rest = parts[1][0], sum(b for b, _, _ in parts) - parts[1][0]
        fit = int((available - rest) // max(1, test_bytes // max(1, n_test))) if available and test_bytes else 0
        if max(parts)[1] != parts[1][1] or fit >= n_test:
            raise
        raise PosrnnError(f"{e} (task.n_test {fit:,} fits)" if fit >= 1 else f"{e}; no task.n_test fits") from None


def stability_parts(n_triplets: int, length: int, hidden: int,
                    state: "int | None" = None) -> list[tuple[int, str, str]]:
    """The triplets (three token sequences each) and their Jacobians, all kept: three H × Dz
    matrices a triplet and one product of two while they are compared. ``state`` is Dz, the width
    of the core's state (an LSTM's 2H, a Mamba's N × inner width, a Gated DeltaNet's key × value
    matrix per head); unknown, 2H."""
    dz = 2 * hidden if state is None else state
    return [(n_triplets * 3 * length * I64, "the triplets", "--triplets, task.length"),
            (n_triplets * 4 * hidden * dz * F32, f"the triplets' Jacobians ({hidden} × {dz:,} each)",
             "--triplets, model.hidden_size")]


def triplets_that_fit(length: int, hidden: int, state: int, available: Optional[int] = None) -> int:
    """The most triplets whose ``stability_parts`` fit in ``available`` (default: the machine's now)."""
    available = available_bytes() if available is None else available
    per = sum(b for b, _, _ in stability_parts(1, length, hidden, state))
    return max(0, (available or 0) // per)


def check_stability_fits(n_triplets: int, length: int, hidden: int, state: "int | None" = None) -> None:
    """``check_fits`` for a stability analysis, naming the triplet count that does fit."""
    parts = stability_parts(n_triplets, length, hidden, state)
    try:
        check_fits(parts, "this stability analysis")
    except PosrnnError as e:
        fit = triplets_that_fit(length, hidden, 2 * hidden if state is None else state)
        raise PosrnnError(f"{e} (--triplets {fit:,} fits)" if fit >= 2 else f"{e}; no triplet count fits") from None
