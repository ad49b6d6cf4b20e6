"""The plumbing every task shares: ``Batch``, the held-out hashing, the ``Task`` base class.

A task (docs/papers.md, Tasks) is a pure function of (config, torch.Generator) → Batch.

A task draws whole batches on the target device with tensor ops (no per-sample Python).
Token ids ``0 … V−1`` are the vocabulary; id ``V`` is the *output query* fed during the
output phase; tasks may add further special ids after it (``n_input_ids``).

Held-out test sequences are drawn before training from the task's own ``test_seed`` and
excluded from every training batch by hashing each sample's random content (``Batch.key``).

Tasks are registered in ``tasks/__init__.py``; their names and descriptions are catalogued
in ``common/catalog.py`` (what ``--help`` shows).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, fields, replace
from typing import Optional

import torch
from torch import Tensor

from . import floors
from ..common.settings.config import TaskConfig, check_bounds
from ..common.errors import PosrnnError
from .scores import sequence_scores


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

    def where(self, rows: Tensor, other: "Batch") -> "Batch":
        """Row-wise select without a host sync: ``other``'s sample where ``rows`` (B,) is True."""
        out = {}
        for k, v in self._tensors().items():
            r = rows.view(-1, *([1] * (v.dim() - 1)))
            out[k] = torch.where(r, getattr(other, k), v)
        return replace(self, **out)

    @staticmethod
    def cat(batches: list["Batch"]) -> "Batch":
        first = batches[0]
        return replace(first, **{k: torch.cat([getattr(b, k) for b in batches]) for k in first._tensors()})

    def __len__(self) -> int:
        return self.inputs.shape[0]


_MULTIPLIERS: dict[tuple[int, torch.device], Tensor] = {}


def _hash_multipliers(n: int, device: torch.device) -> Tensor:
    """Fixed odd random int64 multipliers (odd: every coordinate matters modulo 2^64),
    made once per width and device (the sampler calls this every batch)."""
    if (n, device) not in _MULTIPLIERS:
        g = torch.Generator().manual_seed(0x5EED)
        m = torch.randint(-(2**62), 2**62, (n,), generator=g, dtype=torch.long) | 1
        _MULTIPLIERS[(n, device)] = m.to(device)
    return _MULTIPLIERS[(n, device)]


def hash_rows(key: Tensor) -> Tensor:
    """(B, C) long → (B,) long: a random linear hash modulo 2^64 (collisions ~ 2^-60)."""
    return (key * _hash_multipliers(key.shape[1], key.device)).sum(1)  # int64 arithmetic wraps modulo 2^64


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
    continuous = False
    supports_autoregressive = False
    supports_variable_length = False  # task.min_length
    supports_rarity = False  # task.rarity
    supports_pairs = False  # task.pairs
    supports_filler = False  # task.filler
    holds_out = True  # draw a test set and keep it out of training (False: separate splits)
    #: inputs x_1…x_L then L query steps, targets read at the queries, one L for every sample
    #: and no fed-back outputs: what the stability triplets and the bench build batches for
    fixed_reverse_layout = False
    #: tokens the output head takes at a time (None: all at once; the language model's is chunked)
    head_chunk: Optional[int] = None
    #: the largest evaluation batch that fits (None: train.eval_batch_size)
    max_eval_batch: Optional[int] = None
    #: can ``posrnn extend-vocab`` add ids to a run of this task (fixed-layout reverse over a
    #: uniform vocabulary)
    extendable = False
    #: what the output phase is fed at evaluation (``infer``'s ``feedback``), the first being what
    #: ``eval`` scores as the task's result: "self" = the model's own previous predictions (or
    #: nothing fed back, for a task without autoregression), "truth" = the targets (teacher forcing)
    feedback_modes: tuple[str, ...] = ("self",)

    def __init__(self, cfg: TaskConfig, rank: int = 0, world_size: int = 1):
        self.cfg = cfg
        #: this process's place under data parallelism (torchrun; 0 of 1 otherwise): a task that
        #: splits each global batch between the processes (lm) reads it
        self.rank, self.world_size = rank, world_size
        self.check()

    def describe(self) -> str:
        """The task as a message names it, with the variants its config selects."""
        c = self.cfg
        variants = [word
                    for on, word in ((self.supports_variable_length and c.min_length is not None, "variable length"),
                                          (self.supports_rarity and c.rarity is not None, "dual frequency"),
                                          (self.supports_autoregressive and c.autoregressive, "autoregression")) if on]
        return repr(self.name) + (f" with {' and '.join(variants)}" if variants else "")

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

    @property
    def output_start(self) -> Optional[int]:
        """The first output-phase step when it is the same for every sample, else None
        (the ``phase`` encoding marks steps ≥ it as output phase)."""
        return None

    @property
    def shared_input_start(self) -> Optional[int]:
        """The step from which every sequence is fed the same id at the same positions (the output
        phase's query), so a model may encode those steps once for the whole batch; None where the
        inputs differ to the end."""
        return None

    def space_size(self) -> float:
        """How many distinct samples the task can draw (for the held-out check)."""
        return self.V ** min(self.L, 64)  # an exact int; 2^64 already exceeds any held-out set

    # ---- floors: tasks/floors.py declares every task's lines once -----------------------
    @property
    def chance_line(self) -> Optional[float]:
        """Token accuracy of a guess that reads nothing of the input (None: no line declared)."""
        return floors.chance_line(self.name, self.V, self.L, self.cfg.pairs)

    @property
    def position_line(self) -> Optional[float]:
        """The best token accuracy from position alone, where the task has one (else None)."""
        filler = getattr(self.cfg, "filler", None) or "random"
        return floors.position_line(self.name, self.V, self.L, self.cfg.pairs, filler)

    # ---- validation ----------------------------------------------------------------
    def check(self) -> None:
        c = self.cfg
        check_bounds(c, "task")  # the bounds declared with TaskConfig's fields
        if c.autoregressive and not self.supports_autoregressive:
            raise PosrnnError(f"--autoregressive is not defined for task {self.name!r}; drop it")
        if c.min_length is not None and not self.supports_variable_length:
            raise PosrnnError(f"variable length (--min-length) is not defined for task {self.name!r}; drop it")
        if c.rarity is not None and not self.supports_rarity:
            raise PosrnnError(f"--rarity (dual frequency) is not defined for task {self.name!r}; drop it")
        if c.pairs is not None and not self.supports_pairs:
            raise PosrnnError(f"--pairs (key-value pairs) is not defined for task {self.name!r}; drop it")
        if c.filler != "random" and not self.supports_filler:
            raise PosrnnError(f"--filler is not defined for task {self.name!r}; drop it")
        if c.length_buckets is not None and self.name != "lm":
            raise PosrnnError(f"task.length_buckets (length-bucketed batches) is not defined for task {self.name!r}; "
                              f"drop it")
        space = self.space_size()
        if space < 2 * c.n_test:
            raise PosrnnError(
                f"task {self.name!r} with vocab_size={c.vocab_size}, length={c.length} has only "
                f"{int(space)} distinct sequences, too few to hold out {c.n_test} test sequences; "
                f"raise --vocab-size or --length (or lower task.n_test)"
            )

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

    def train_forward(self, model, batch: Batch) -> tuple[Tensor, Tensor]:
        """(loss, predictions (B, K)) of one training step's forward: the model's outputs at the
        output-phase steps, ``loss`` over them; the predictions carry no gradient."""
        out = model(batch.inputs, batch.out_index, batch.query)
        loss = self.loss(out if out.dtype in (torch.float32, torch.float64) else out.float(), batch)  # bf16 → fp32
        return loss, self.predict(out.detach())

    def predict(self, out: Tensor) -> Tensor:
        return out.argmax(-1)  # (B, K)

    def correct(self, pred: Tensor, batch: Batch) -> Tensor:
        """(B, K) bool: prediction right at each valid target (False on padding)."""
        ok = pred == batch.targets
        return ok if batch.mask is None else ok & batch.mask

    def infer(self, model, batch: Batch, feedback: str = "self") -> Tensor:
        """Predictions of ``model`` on ``batch`` as ``eval`` scores them: (B, K), the output
        phase fed as ``feedback`` says (one of ``feedback_modes``)."""
        self.check_feedback(feedback)
        return self.predict(model(batch.inputs, batch.out_index, batch.query))

    def check_feedback(self, feedback: str) -> None:
        if feedback not in self.feedback_modes:
            raise PosrnnError(f"feedback {feedback!r} is not defined for task {self.describe()}; "
                              f"use one of: {', '.join(self.feedback_modes)}")

    def scores(self, pred: Tensor, batch: Batch) -> dict:
        """Per-sequence score arrays (B,) for ``eval``: accuracy and DL distance."""
        return sequence_scores(pred, batch.targets, batch.mask)

    def report(self, pred: Tensor, batch: Batch) -> dict:
        """Task-specific extra metrics for ``eval`` (none by default)."""
        return {}

    def evaluate_extra(self, model, test: Batch, batch_size: int) -> dict:
        """Extra metrics that need the model itself (none by default)."""
        return {}


def phase_layout(x: Tensor, lengths: Optional[Tensor], query_id: int, feed: Optional[Tensor] = None):
    """The two-phase layout for every sequence of a batch, padded on the right.

    x: (B, L) tokens (positions ≥ a sequence's length are ignored); lengths: (B,) or None
    (all L); feed: (B, L) output-phase inputs (teacher forcing) or None (the query).
    Positions run straight through both phases: sequence b has inputs at 0…l−1 and
    outputs at l…2l−1; steps after 2l are padding (the query id).
    Returns inputs (B, 2L), out_index (B, L), mask (B, L) or None."""
    B, L = x.shape
    query = torch.full_like(x, query_id)
    feed = query if feed is None else feed
    if lengths is None:
        inputs = torch.cat([x, feed], dim=1)  # (B 2L)
        return inputs, torch.arange(L, 2 * L, device=x.device).expand(B, L), None
    t = torch.arange(2 * L, device=x.device).expand(B, 2 * L)  # (B 2L)
    l = lengths[:, None]  # (B 1)
    xi = x.gather(1, t.clamp(max=L - 1))  # (B 2L)
    fi = feed.gather(1, (t - l).clamp(0, L - 1))  # (B 2L)
    inputs = torch.where(t < l, xi, torch.where(t < 2 * l, fi, query_id))  # (B 2L)
    j = torch.arange(L, device=x.device)  # (L)
    out_index = (l + j).clamp(max=2 * L - 1)  # (B L)
    mask = j < l  # (B L)
    return inputs, out_index, mask


def tally(ok: Tensor, batch: Batch) -> tuple[int, int, int]:
    """(right targets, valid targets, whole sequences right) of a (B, K) ``correct`` mask."""
    if batch.mask is None:
        return int(ok.sum()), ok.numel(), int(ok.all(1).sum())
    return int(ok.sum()), int(batch.mask.sum()), int((ok | ~batch.mask).all(1).sum())



class HeldOut:
    """The test set's hashes, and a sampler that never returns one of them."""

    def __init__(self, test: Batch):
        self.hashes = hash_rows(test.key).sort().values  # (N,)

    def contains(self, batch: Batch) -> Tensor:
        """(B,) bool: which samples are test sequences — a binary search in the sorted hashes
        (one kernel on a GPU, no sync; faster than ``torch.isin`` on CPU too)."""
        h = hash_rows(batch.key)  # (B,)
        i = torch.searchsorted(self.hashes, h).clamp_max(len(self.hashes) - 1)  # (B,)
        return self.hashes[i] == h

    def sample(self, task: Task, n: int, gen: torch.Generator, device: torch.device, max_rounds: int = 1000,
               sync_free: Optional[bool] = None) -> Batch:
        """``task.sample`` with every held-out sample redrawn (vectorised; redraws are rare).

        On CUDA (``sync_free``) the host never waits: held-out rows are replaced by rows of a
        fresh draw twice, and any row still held out after that is masked out of the loss —
        so a test sequence never trains the model, exactly, without a ``.nonzero()`` sync."""
        batch = task.sample(n, gen, device)
        if sync_free if sync_free is not None else torch.device(device).type == "cuda":
            for _ in range(2):
                batch = batch.where(self.contains(batch), task.sample(n, gen, device))
            keep = ~self.contains(batch)[:, None]  # (B 1)
            batch.mask = keep.expand_as(batch.out_index) if batch.mask is None else batch.mask & keep
            return batch
        for _ in range(max_rounds):
            bad = self.contains(batch).nonzero().flatten()
            if len(bad) == 0:
                return batch
            batch = batch.put(bad, task.sample(len(bad), gen, device))
        raise PosrnnError("training sampler keeps drawing held-out sequences; the task space is too small")
