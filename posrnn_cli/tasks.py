"""Synthetic tasks (SPEC §3): each is a pure function of (config, torch.Generator) → Batch.

A task draws whole batches on the target device with tensor ops (no per-sample Python).
Token ids ``0 … V−1`` are the vocabulary; id ``V`` is the *output query* fed during the
output phase; tasks may add further special ids after it (``n_input_ids``).

Held-out test sequences are drawn before training from the task's own ``test_seed`` and
excluded from every training batch by hashing each sample's random content (``Batch.key``).

Register a task by adding its class to ``TASKS``; the CLI's choices come from that dict.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, fields, replace
from typing import Optional

import torch
from torch import Tensor

from .config import TaskConfig
from .errors import PosrnnError
from .metrics import sequence_scores


@dataclass
class Batch:
    """One batch of samples; every tensor has the batch as its first dimension."""

    inputs: Tensor  # (B, T) long ids — or (B, T, d) float vectors for continuous tasks
    targets: Tensor  # (B, K) long — or (B, K, d) float
    out_index: Tensor  # (B, K) long: the time steps whose outputs are read
    key: Tensor  # (B, C) long: the random draws that identify a sample (held-out exclusion)
    mask: Optional[Tensor] = None  # (B, K) bool: which targets count (None = all)
    query: Optional[Tensor] = None  # (B, T) bool: steps fed the learnable query vector (continuous)
    lengths: Optional[Tensor] = None  # (B,) per-sequence L (variable length)
    group: Optional[Tensor] = None  # (B,) long: test-grid cell of each sample (reports)

    def _tensors(self):
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def select(self, rows: Tensor) -> "Batch":
        return replace(self, **{k: v[rows] for k, v in self._tensors().items()})

    def to(self, device) -> "Batch":
        return replace(self, **{k: v.to(device) for k, v in self._tensors().items()})

    def put(self, rows: Tensor, other: "Batch") -> "Batch":
        """A copy with ``rows`` replaced by the samples of ``other`` (same shapes)."""
        out = {}
        for k, v in self._tensors().items():
            v = v.clone()
            v[rows] = getattr(other, k)
            out[k] = v
        return replace(self, **out)

    @staticmethod
    def cat(batches: list["Batch"]) -> "Batch":
        first = batches[0]
        return replace(first, **{k: torch.cat([getattr(b, k) for b in batches]) for k in first._tensors()})

    def __len__(self) -> int:
        return self.inputs.shape[0]


def _hash_multipliers(n: int) -> Tensor:
    g = torch.Generator().manual_seed(0x5EED)
    m = torch.randint(-(2**62), 2**62, (n,), generator=g, dtype=torch.long)
    return m | 1  # odd: every coordinate matters modulo 2^64


def hash_rows(key: Tensor) -> Tensor:
    """(B, C) long → (B,) long: a random linear hash modulo 2^64 (collisions ~ 2^-60)."""
    mult = _hash_multipliers(key.shape[1]).to(key.device)
    return (key * mult).sum(1)  # int64 arithmetic wraps modulo 2^64


def first_unique(h: Tensor) -> Tensor:
    """Indices of the first occurrence of each distinct value of ``h``, in order."""
    uniq, inv = torch.unique(h, return_inverse=True)
    first = torch.full((len(uniq),), len(h), dtype=torch.long, device=h.device)
    first = first.scatter_reduce(0, inv, torch.arange(len(h), device=h.device), "amin")
    return first.sort().values


class Task(abc.ABC):
    """Base class: the reverse-ordering layout ``x_1…x_L, q…q`` with the targets read on the
    L query steps. Subclasses override ``sample`` (and what else differs)."""

    name = "base"
    description = ""
    continuous = False
    supports_autoregressive = False

    def __init__(self, cfg: TaskConfig):
        self.cfg = cfg
        self.check()

    # ---- sizes -------------------------------------------------------------------
    @property
    def V(self) -> int:
        return self.cfg.vocab_size

    @property
    def L(self) -> int:
        return self.cfg.length

    @property
    def query_id(self) -> int:
        return self.V

    @property
    def n_input_ids(self) -> int:
        """Rows of the embedding table: the V tokens plus the special ids."""
        return self.V + 1

    @property
    def n_outputs(self) -> int:
        """Width of the output head: V classes (or d for continuous tasks)."""
        return self.V

    @property
    def max_steps(self) -> int:
        """Longest input sequence T (positions 0 … T−1 get a positional encoding)."""
        return 2 * self.L

    def space_size(self) -> float:
        """How many distinct samples the task can draw (for the held-out check)."""
        return float(self.V) ** self.L

    # ---- validation ----------------------------------------------------------------
    def check(self) -> None:
        c = self.cfg
        if c.vocab_size < 2:
            raise PosrnnError(f"vocab_size must be at least 2, got {c.vocab_size}; pass --vocab-size 2 or more")
        if c.length < 1:
            raise PosrnnError(f"length must be at least 1, got {c.length}; pass --length 1 or more")
        if c.n_test < 1:
            raise PosrnnError(f"task.n_test must be at least 1, got {c.n_test}")
        if c.autoregressive and not self.supports_autoregressive:
            raise PosrnnError(f"--autoregressive is not defined for task {self.name!r}; drop it")
        if c.min_length is not None and not self.supports_variable_length():
            raise PosrnnError(f"variable length (--min-length) is not defined for task {self.name!r}; drop it")
        if c.rarity is not None and not self.supports_rarity():
            raise PosrnnError(f"--rarity (dual frequency) is not defined for task {self.name!r}; drop it")
        space = self.space_size()
        if space < 2 * c.n_test:
            raise PosrnnError(
                f"task {self.name!r} with vocab_size={c.vocab_size}, length={c.length} has only "
                f"{space:.0f} distinct sequences, too few to hold out {c.n_test} test sequences; "
                f"raise --vocab-size or --length (or lower task.n_test)"
            )

    def supports_variable_length(self) -> bool:
        return False

    def supports_rarity(self) -> bool:
        return False

    # ---- data ----------------------------------------------------------------------
    @abc.abstractmethod
    def sample(self, n: int, gen: torch.Generator, device: torch.device) -> Batch:
        """``n`` samples drawn with ``gen`` (a generator on ``device``), nothing else random."""

    def test_set(self, device: torch.device | str = "cpu") -> Batch:
        """``n_test`` distinct samples drawn on the CPU from ``test_seed`` (identical on
        every device and for every run of this task config)."""
        gen = torch.Generator().manual_seed(self.cfg.test_seed)
        n = self.cfg.n_test
        batch = self.sample(n, gen, torch.device("cpu"))
        for _ in range(100):
            batch = batch.select(first_unique(hash_rows(batch.key)))
            if len(batch) >= n:
                return batch.select(torch.arange(n)).to(device)
            batch = Batch.cat([batch, self.sample(n, gen, torch.device("cpu"))])
        raise PosrnnError(f"could not draw {n} distinct test sequences; raise --vocab-size or --length")

    # ---- loss and scores ---------------------------------------------------------
    def loss(self, out: Tensor, batch: Batch) -> Tensor:
        """Mean cross-entropy over the valid targets. out: (B, K, V)."""
        logits, targets = out.flatten(0, 1), batch.targets.flatten()
        if batch.mask is None:
            return torch.nn.functional.cross_entropy(logits, targets)
        nll = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
        m = batch.mask.flatten().to(nll.dtype)
        return (nll * m).sum() / m.sum().clamp_min(1)

    def predict(self, out: Tensor) -> Tensor:
        return out.argmax(-1)  # (B, K)

    def correct(self, pred: Tensor, batch: Batch) -> Tensor:
        """(B, K) bool: prediction right at each valid target (False on padding)."""
        ok = pred == batch.targets
        return ok if batch.mask is None else ok & batch.mask

    def infer(self, model, batch: Batch) -> Tensor:
        """Predictions of ``model`` on ``batch`` as ``eval`` scores them: (B, K)."""
        return self.predict(model(batch.inputs, batch.out_index, batch.query))

    def scores(self, pred: Tensor, batch: Batch) -> dict:
        """Per-sequence score arrays (B,) for ``eval``: accuracy and DL distance."""
        return sequence_scores(pred, batch.targets, batch.mask)

    def report(self, pred: Tensor, batch: Batch) -> dict:
        """Task-specific extra metrics for ``eval`` (none by default)."""
        return {}


def reverse_layout(x: Tensor, query_id: int) -> tuple[Tensor, Tensor]:
    """Inputs ``x_1…x_L q…q`` and the output-phase time steps. x: (B, L)."""
    B, L = x.shape
    inputs = torch.cat([x, torch.full_like(x, query_id)], dim=1)  # (B, 2L)
    out_index = torch.arange(L, 2 * L, device=x.device).expand(B, L)  # (B, L)
    return inputs, out_index


class ReverseTask(Task):
    """Reverse ordering: ``x_1…x_L`` i.i.d. uniform over V, then L query steps; target
    ``x_L…x_1``."""

    name = "reverse"
    description = "reverse ordering: x_1..x_L then L queries; target x_L..x_1"

    def sample(self, n: int, gen: torch.Generator, device: torch.device) -> Batch:
        x = torch.randint(self.V, (n, self.L), generator=gen, device=device)  # (B, L)
        inputs, out_index = reverse_layout(x, self.query_id)
        return Batch(inputs=inputs, targets=x.flip(1), out_index=out_index, key=x)


#: name → task class. One line per task; `posrnn train --help` lists the descriptions.
TASKS: dict[str, type[Task]] = {
    "reverse": ReverseTask,
}


def build_task(cfg: TaskConfig) -> Task:
    if cfg.name not in TASKS:
        raise PosrnnError(f"unknown task {cfg.name!r}; choose one of: {', '.join(TASKS)}")
    return TASKS[cfg.name](cfg)


class HeldOut:
    """The test set's hashes, and a sampler that never returns one of them."""

    def __init__(self, test: Batch):
        self.hashes = hash_rows(test.key).sort().values  # (N,)

    def contains(self, batch: Batch) -> Tensor:
        return torch.isin(hash_rows(batch.key), self.hashes)  # (B,) bool

    def sample(self, task: Task, n: int, gen: torch.Generator, device: torch.device, max_rounds: int = 1000) -> Batch:
        """``task.sample`` with every held-out sample redrawn (vectorised; redraws are rare).

        Note: the check costs one host sync per batch; with a large space it never redraws."""
        batch = task.sample(n, gen, device)
        for _ in range(max_rounds):
            bad = self.contains(batch).nonzero().flatten()
            if len(bad) == 0:
                return batch
            batch = batch.put(bad, task.sample(len(bad), gen, device))
        raise PosrnnError("training sampler keeps drawing held-out sequences; the task space is too small")

