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
import math
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
    description = ""
    continuous = False
    supports_autoregressive = False
    holds_out = True  # draw a test set and keep it out of training (False: separate splits)

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

    @property
    def output_start(self) -> Optional[int]:
        """The first output-phase step when it is the same for every sample, else None
        (the ``phase`` encoding marks steps ≥ it as output phase)."""
        return None

    def space_size(self) -> float:
        """How many distinct samples the task can draw (for the held-out check)."""
        return self.V**self.L  # an exact int: floats overflow at paper sizes

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
                f"{int(space)} distinct sequences, too few to hold out {c.n_test} test sequences; "
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

    def evaluate_extra(self, model, test: Batch, batch_size: int) -> dict:
        """Extra metrics that need the model itself (none by default)."""
        return {}


def reverse_layout(x: Tensor, query_id: int) -> tuple[Tensor, Tensor]:
    """Inputs ``x_1…x_L q…q`` and the output-phase time steps. x: (B, L)."""
    B, L = x.shape
    inputs = torch.cat([x, torch.full_like(x, query_id)], dim=1)  # (B, 2L)
    out_index = torch.arange(L, 2 * L, device=x.device).expand(B, L)  # (B, L)
    return inputs, out_index


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


def _tally(ok: Tensor, batch: Batch) -> tuple[int, int, int]:
    """(right targets, valid targets, whole sequences right) of a (B, K) ``correct`` mask."""
    if batch.mask is None:
        return int(ok.sum()), ok.numel(), int(ok.all(1).sum())
    return int(ok.sum()), int(batch.mask.sum()), int((ok | ~batch.mask).all(1).sum())


class ReverseTask(Task):
    """Reverse ordering: ``x_1…x_L`` i.i.d. uniform over V, then L query steps; target
    ``x_L…x_1``. Variants: variable length (``min_length``), the dual-frequency vocabulary
    (``rarity``), and autoregressive output-phase inputs (``autoregressive``)."""

    name = "reverse"
    description = "x_1..x_L, then L queries; target x_L..x_1 (variants: --min-length, --rarity, --autoregressive)"
    supports_autoregressive = True

    @property
    def output_start(self) -> Optional[int]:
        return None if self.cfg.min_length is not None else self.L

    def supports_variable_length(self) -> bool:
        return True

    def supports_rarity(self) -> bool:
        return True

    def check(self) -> None:
        c = self.cfg
        if c.min_length is not None:
            if not 1 <= c.min_length <= c.length:
                raise PosrnnError(f"--min-length must lie in 1 … --max-length ({c.length}), got {c.min_length}")
            if c.autoregressive or c.rarity is not None:
                raise PosrnnError("variable length combines with neither --autoregressive nor --rarity; drop one")
        if c.rarity is not None:
            if not 0.0 < c.rarity < 1.0:
                raise PosrnnError(f"--rarity must lie strictly between 0 and 1, got {c.rarity}")
            if c.vocab_size % 2:
                raise PosrnnError(f"the dual-frequency vocabulary splits V in halves; pass an even --vocab-size, got {c.vocab_size}")
        super().check()

    def space_size(self) -> float:
        if self.cfg.min_length is not None:  # the shortest length must hold its own test set
            return self.V**self.cfg.min_length
        if self.cfg.rarity is not None:  # every grid cell draws its tokens from one half
            return (self.V // 2) ** self.L
        return super().space_size()

    # ---- drawing -------------------------------------------------------------------
    def tokens(self, n: int, gen: torch.Generator, device) -> Tensor:
        """(n, L) training tokens: uniform, or Rare with probability ``rarity``."""
        if self.cfg.rarity is None:
            return torch.randint(self.V, (n, self.L), generator=gen, device=device)
        half = self.V // 2
        rare = torch.rand(n, self.L, generator=gen, device=device) < self.cfg.rarity  # (B L)
        return torch.randint(half, (n, self.L), generator=gen, device=device) + rare.long() * half

    def lengths(self, n: int, gen: torch.Generator, device) -> Optional[Tensor]:
        if self.cfg.min_length is None:
            return None
        return torch.randint(self.cfg.min_length, self.L + 1, (n,), generator=gen, device=device)  # (B)

    def target_of(self, x: Tensor, lengths: Optional[Tensor]) -> Tensor:
        """(B, L) targets: ``x_l … x_1`` (zero-padded past each length)."""
        if lengths is None:
            return x.flip(1)
        j = torch.arange(self.L, device=x.device)
        idx = (lengths[:, None] - 1 - j).clamp(min=0)  # (B L)
        return x.gather(1, idx) * (j < lengths[:, None])

    def build(self, x: Tensor, lengths: Optional[Tensor] = None) -> Batch:
        """The batch for tokens ``x`` (B, L) and optional per-sequence ``lengths``."""
        targets = self.target_of(x, lengths)
        feed = None
        if self.cfg.autoregressive:  # output step j is fed target j−1 (teacher forcing); step 0 the query
            feed = torch.cat([torch.full_like(targets[:, :1], self.query_id), targets[:, :-1]], dim=1)
        inputs, out_index, mask = phase_layout(x, lengths, self.query_id, feed)
        if lengths is None:
            key = x
        else:
            key = torch.cat([x * (torch.arange(self.L, device=x.device) < lengths[:, None]), lengths[:, None]], dim=1)
        return Batch(inputs=inputs, targets=targets, out_index=out_index, key=key, mask=mask, lengths=lengths)

    def sample(self, n: int, gen: torch.Generator, device: torch.device) -> Batch:
        return self.build(self.tokens(n, gen, device), self.lengths(n, gen, device))

    # ---- test sets -------------------------------------------------------------------
    def test_set(self, device: torch.device | str = "cpu") -> Batch:
        if self.cfg.rarity is not None:
            return self.dual_frequency_grid().to(device)
        if self.cfg.min_length is None:
            return super().test_set(device)
        # variable length: n_test distinct sequences of every length
        gen = torch.Generator().manual_seed(self.cfg.test_seed)
        parts = []
        for l in range(self.cfg.min_length, self.L + 1):
            got = None
            while got is None or len(got) < self.cfg.n_test:
                lengths = torch.full((self.cfg.n_test,), l)
                b = self.build(torch.randint(self.V, (self.cfg.n_test, self.L), generator=gen), lengths)
                got = b if got is None else Batch.cat([got, b])
                got = got.select(first_unique(hash_rows(got.key)))
            parts.append(got.select(torch.arange(self.cfg.n_test)))
        batch = Batch.cat(parts)
        batch.group = batch.lengths.clone()
        return batch.to(device)

    KINDS = ("F", "R")  # Frequent ids [0, V/2), Rare ids [V/2, V)

    def dual_frequency_grid(self) -> Batch:
        """For every target position t and (target kind, disturbant kind) ∈ {F, R}²:
        sequences whose position t holds a target-kind token and whose other L−1 positions
        hold disturbant-kind tokens; only the output step that recalls position t is scored.
        ``n_test`` sequences per kind pair, spread evenly over the L positions (at least one
        per position). ``group`` = (2·target kind + disturbant kind)·L + t."""
        gen = torch.Generator().manual_seed(self.cfg.test_seed)
        L, half = self.L, self.V // 2
        per = max(1, self.cfg.n_test // L)
        parts = []
        for tk in range(2):
            for dk in range(2):
                t = torch.arange(L).repeat_interleave(per)  # (M) target position of each sequence
                m = len(t)
                x = torch.randint(half, (m, L), generator=gen) + dk * half  # (M L) disturbants
                x[torch.arange(m), t] = torch.randint(half, (m,), generator=gen) + tk * half  # the target
                b = self.build(x)
                b.mask = torch.nn.functional.one_hot(L - 1 - t, L).bool()  # output step L−1−t recalls x_t
                b.group = (2 * tk + dk) * L + t
                parts.append(b)
        batch = Batch.cat(parts)
        return batch.select(first_unique(hash_rows(batch.key)))  # drop the (rare) duplicates

    # ---- autoregressive inference ------------------------------------------------------
    def infer(self, model, batch: Batch) -> Tensor:
        if not self.cfg.autoregressive:
            return super().infer(model, batch)
        inputs = batch.inputs.clone()
        L = self.L
        inputs[:, L + 1 :] = self.query_id  # nothing fed back yet
        preds = []
        for j in range(L):  # self-feedback: output step j+1 is fed the prediction of step j
            p = self.predict(model(inputs, batch.out_index[:, j : j + 1]))[:, 0]  # (B)
            preds.append(p)
            if j + 1 < L:
                inputs[:, L + j + 1] = p
        return torch.stack(preds, dim=1)  # (B L)

    # ---- reports ---------------------------------------------------------------------
    def report(self, pred: Tensor, batch: Batch) -> dict:
        ok = self.correct(pred, batch)
        out: dict = {}
        if self.cfg.rarity is not None:
            L = self.L
            hit = ok.any(1).double()  # one scored step per sequence
            cell = torch.zeros(4 * L, dtype=torch.float64).index_add_(0, batch.group.cpu(), hit.cpu())
            cnt = torch.zeros(4 * L, dtype=torch.float64).index_add_(0, batch.group.cpu(), torch.ones_like(hit).cpu())
            acc = (cell / cnt.clamp_min(1)).view(4, L)
            names = [f"{a}/{b}" for a in self.KINDS for b in self.KINDS]  # target kind / disturbant kind
            out["dual_frequency"] = {n: float(cell.view(4, L)[i].sum() / cnt.view(4, L)[i].sum()) for i, n in enumerate(names)}
            out["dual_frequency_by_position"] = {n: acc[i].tolist() for i, n in enumerate(names)}
        if self.cfg.autoregressive:  # ``pred`` came from ``infer``: self-feedback
            n_ok, n, n_seq = _tally(ok, batch)
            out["self_feedback_token_accuracy"] = n_ok / n
            out["self_feedback_sequence_accuracy"] = n_seq / len(batch)
        if self.cfg.min_length is not None:
            n_ok = ok.sum(1).double()
            n_all = batch.mask.sum(1).double()
            out["accuracy_by_length"] = {
                int(l): float(n_ok[batch.lengths == l].sum() / n_all[batch.lengths == l].sum())
                for l in batch.lengths.unique().tolist()
            }
        return out

    def evaluate_extra(self, model, test: Batch, batch_size: int) -> dict:
        if not self.cfg.autoregressive:
            return {}
        # the same model fed the ground truth in the output phase (teacher forcing)
        n_ok = n = n_seq = 0
        for start in range(0, len(test), batch_size):
            b = test.select(torch.arange(start, min(start + batch_size, len(test)), device=test.inputs.device))
            t = _tally(self.correct(Task.infer(self, model, b), b), b)
            n_ok, n, n_seq = n_ok + t[0], n + t[1], n_seq + t[2]
        return {"ground_truth_feedback_token_accuracy": n_ok / n, "ground_truth_feedback_sequence_accuracy": n_seq / len(test)}


class SortTask(ReverseTask):
    """Sorting: the reverse layout, target = the input sorted ascending (ties kept)."""

    name = "sort"
    description = "x_1..x_L, then L queries; target x sorted ascending, ties kept (--autoregressive)"

    def supports_variable_length(self) -> bool:
        return False

    def supports_rarity(self) -> bool:
        return False

    def target_of(self, x: Tensor, lengths: Optional[Tensor]) -> Tensor:
        return x.sort(dim=1).values

    def report(self, pred: Tensor, batch: Batch) -> dict:
        out = super().report(pred, batch)
        out["non_decreasing_share"] = float((pred[:, 1:] >= pred[:, :-1]).all(1).double().mean())
        return out


class DelayedAddTask(Task):
    """Delayed addition: input phase ``x_1…x_L``; in the output phase the model is fed fresh
    random tokens ``y_j`` (instead of the query) and must emit ``(x_{L+1−j} + y_j) mod V``."""

    name = "delayed-add"
    description = "x_1..x_L, then fresh tokens y_1..y_L fed as inputs; target (x_{L+1-j} + y_j) mod V"

    @property
    def output_start(self) -> int:
        return self.L

    def space_size(self) -> float:
        return self.V ** (2 * self.L)

    def sample(self, n, gen, device) -> Batch:
        x = torch.randint(self.V, (n, self.L), generator=gen, device=device)  # (B L)
        y = torch.randint(self.V, (n, self.L), generator=gen, device=device)  # (B L)
        inputs, out_index, _ = phase_layout(x, None, self.query_id, feed=y)
        targets = (x.flip(1) + y) % self.V
        return Batch(inputs=inputs, targets=targets, out_index=out_index, key=torch.cat([x, y], 1))


class PredecessorTask(Task):
    """Predecessor query: ``x_1…x_L`` all distinct; at step L+1 one of ``x_2…x_L`` is shown
    again; the single target is its predecessor."""

    name = "predecessor"
    description = "L distinct tokens, then one of x_2..x_L again; the single target is its predecessor"

    @property
    def max_steps(self) -> int:
        return self.L + 1

    @property
    def output_start(self) -> int:
        return self.L

    def check(self) -> None:
        if self.cfg.length < 2:
            raise PosrnnError(f"predecessor needs --length ≥ 2, got {self.cfg.length}")
        if self.cfg.length > self.cfg.vocab_size:
            raise PosrnnError(f"predecessor draws L distinct tokens: --length ({self.cfg.length}) must not exceed --vocab-size ({self.cfg.vocab_size})")
        super().check()

    def space_size(self) -> float:
        V, L = self.V, self.L
        log = math.lgamma(V + 1) - math.lgamma(V - L + 1) + math.log(L - 1)
        return math.inf if log > 700 else math.exp(log)

    def sample(self, n, gen, device) -> Batch:
        x = torch.rand(n, self.V, generator=gen, device=device).argsort(dim=1)[:, : self.L]  # (B L) distinct
        k = torch.randint(1, self.L, (n, 1), generator=gen, device=device)  # (B 1) which x_k (0-based 1…L−1)
        inputs = torch.cat([x, x.gather(1, k)], dim=1)  # (B L+1)
        targets = x.gather(1, k - 1)  # (B 1)
        out_index = torch.full((n, 1), self.L, device=device)
        return Batch(inputs=inputs, targets=targets, out_index=out_index, key=torch.cat([x, k], 1))


class CopyTask(Task):
    """Copy memory: ``x_1…x_L``, then T blank steps, then L query steps; target ``x_1…x_L``."""

    name = "copy"
    description = "copy memory: x_1..x_L, T blank steps (--delay), L queries; target x_1..x_L"

    @property
    def blank_id(self) -> int:
        return self.V + 1

    @property
    def n_input_ids(self) -> int:
        return self.V + 2

    @property
    def max_steps(self) -> int:
        return 2 * self.L + self.cfg.delay

    @property
    def output_start(self) -> int:
        return self.L + self.cfg.delay

    def check(self) -> None:
        if self.cfg.delay < 0:
            raise PosrnnError(f"--delay must be ≥ 0, got {self.cfg.delay}")
        super().check()

    def sample(self, n, gen, device) -> Batch:
        L, T = self.L, self.cfg.delay
        x = torch.randint(self.V, (n, L), generator=gen, device=device)  # (B L)
        inputs = torch.cat([x, torch.full((n, T), self.blank_id, device=device), torch.full_like(x, self.query_id)], 1)
        out_index = torch.arange(L + T, 2 * L + T, device=device).expand(n, L)
        return Batch(inputs=inputs, targets=x, out_index=out_index, key=x)


class ContinuousTask(Task):
    """"Infinite vocabulary": tokens are random unit vectors in R^d; reverse them. A linear
    projection replaces the embedding, the head predicts vectors, loss = 1 − cosine.
    The training log's "accuracy" is the mean cosine."""

    name = "continuous"
    description = "reverse of random unit vectors in R^d (--dim; no --vocab-size); loss 1 - cosine"
    continuous = True

    @property
    def n_outputs(self) -> int:
        return self.cfg.dim

    @property
    def output_start(self) -> int:
        return self.L

    def check(self) -> None:
        if self.cfg.dim < 2:  # R^1 has two unit vectors: not an "infinite" vocabulary
            raise PosrnnError(f"--dim must be at least 2 (R^1 holds only two unit vectors), got {self.cfg.dim}")
        super().check()

    def space_size(self) -> float:
        return math.inf

    def sample(self, n, gen, device) -> Batch:
        L, d = self.L, self.cfg.dim
        x = torch.nn.functional.normalize(torch.randn(n, L, d, generator=gen, device=device), dim=-1)  # (B L d)
        inputs = torch.cat([x, torch.zeros_like(x)], dim=1)  # (B 2L d); query steps get the learned vector
        query = torch.zeros(n, 2 * L, dtype=torch.bool, device=device)
        query[:, L:] = True
        out_index = torch.arange(L, 2 * L, device=device).expand(n, L)
        key = (x[..., : min(d, 4)] * 2**20).round().long().flatten(1)  # identifies a draw
        return Batch(inputs=inputs, targets=x.flip(1), out_index=out_index, key=key, query=query)

    def loss(self, out: Tensor, batch: Batch) -> Tensor:
        return (1 - torch.nn.functional.cosine_similarity(out, batch.targets, dim=-1)).mean()

    def predict(self, out: Tensor) -> Tensor:
        return out  # (B K d)

    def correct(self, pred: Tensor, batch: Batch) -> Tensor:
        return torch.nn.functional.cosine_similarity(pred, batch.targets, dim=-1)  # (B K) cosine

    def scores(self, pred: Tensor, batch: Batch) -> dict:
        cos = self.correct(pred, batch)
        return {"cosine": cos.mean(1).double().cpu().numpy()}

    def report(self, pred: Tensor, batch: Batch) -> dict:
        cos = self.correct(pred, batch).flatten().double().cpu()
        q = torch.quantile(cos, torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64))
        return {"cosine_quartiles": dict(zip(["min", "q25", "median", "q75", "max"], q.tolist()))}


#: name → task class. One line per task; `posrnn train --help` lists the descriptions.
TASKS: dict[str, type[Task]] = {
    "reverse": ReverseTask,
    "sort": SortTask,
    "delayed-add": DelayedAddTask,
    "predecessor": PredecessorTask,
    "copy": CopyTask,
    "continuous": ContinuousTask,
}


from .lm.task import LMTask  # noqa: E402 - registered here, defined with the LM code

TASKS["lm"] = LMTask


def build_task(cfg: TaskConfig) -> Task:
    if cfg.name not in TASKS:
        raise PosrnnError(f"unknown task {cfg.name!r}; choose one of: {', '.join(TASKS)}")
    return TASKS[cfg.name](cfg)


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

