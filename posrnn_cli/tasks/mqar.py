"""Multi-query associative recall, MQAR (Arora et al. 2023, "Zoology: Measuring and Improving
Recall in Efficient Language Models", as its harness's ``multiquery_ar`` draws it).

A sequence of ``task.length`` = T tokens over a vocabulary of V (even) ids. Its first 2·P steps
are P key-value pairs ``k_1 v_1 … k_P v_P`` (P = ``task.pairs``): the keys are P distinct ids of
``1 … V/2−1`` (the harness keeps id 0 for "empty"), the values P distinct ids of ``V/2 … V−1``.
The rest, steps 2P … T−1, is the query region: each key appears in it exactly once, on an even
offset from 2P; the model is read at that step and must output the key's value. The other steps
of the region hold random ids of ``0 … V−1`` (the harness's ``random_non_queries``, its default),
which may repeat a key, or with ``task.filler = "zero"`` (``--filler zero``, the harness's
``random_non_queries = False``) id 0, which no key is: they are read nowhere.

Where the keys go follows the harness: the region's S = (T − 2P)/2 even slots are drawn without
replacement with P(slot i) ∝ i^(a−1), i = 1 … S, a = ``POWER_A`` = 0.01 (most queries come soon
after the pairs, a few far), and the j-th slot drawn takes the j-th pair's key. The harness asks
for an even T, for T ≥ 4P (the region at least as long as the pairs) and for V > T; so does this
task.
``task.pairs`` has no default: an mqar run names it (the harness's default is 4), other tasks
refuse it.

``output_start`` is 2P, where the query region starts for every sample: the ``phase`` encoding
marks the pairs as input phase and the whole region as output phase, though only the P query
steps in it are read (``out_index``, in time order, differs per sample).
"""

from __future__ import annotations

import math

import torch

from ..common.settings.config import check_bounds
from ..common.errors import PosrnnError
from .base import Batch, Task

#: the power law's exponent a over the query slots (the harness's ``train_power_a`` and
#: ``test_power_a``): P(slot i) ∝ i^(a−1); 1 would be uniform
POWER_A = 0.01
#: what fills the query region's other steps (``task.filler``): random ids, or id 0
FILLERS = ("random", "zero")


class MQARTask(Task):
    """Multi-query associative recall: P key-value pairs, then each key once among random ids;
    at each key's step the target is its value."""

    name = "mqar"
    supports_pairs = True
    supports_filler = True

    @property
    def P(self) -> int:
        return self.cfg.pairs

    @property
    def max_steps(self) -> int:
        return self.L

    @property
    def output_start(self) -> int:
        return 2 * self.P

    @property
    def slots(self) -> int:
        """S: the even offsets of the query region, where the keys may be asked."""
        return (self.L - 2 * self.P) // 2

    def check(self) -> None:
        check_bounds(self.cfg, "task")
        V, L, P = self.cfg.vocab_size, self.cfg.length, self.cfg.pairs
        if P is None:
            raise PosrnnError("mqar needs --pairs P, its number of key-value pairs (e.g. --pairs 4, the Zoology "
                              "harness's default; --length ≥ 4P)")
        if V % 2:
            raise PosrnnError("mqar splits the vocabulary into key and value halves: --vocab-size must be even, got "
                              f"{V}")
        if P > V // 2 - 1:
            raise PosrnnError(f"mqar draws {P} distinct keys from ids 1 … V/2−1 = {V // 2 - 1}: raise --vocab-size to "
                              f"at least {2 * P + 2} or lower --pairs")
        if L % 2 or L < 4 * P:
            raise PosrnnError(f"mqar needs an even --length of at least 4·pairs = {4 * P} (P pairs, then a query "
                              f"region as long), got {L}: set --length {max(4 * P, L + L % 2)} or lower --pairs")
        if V <= L:
            raise PosrnnError(f"mqar asks for a vocabulary larger than the sequence, as the Zoology harness does "
                              f"(V > L): --vocab-size {V} ≤ --length {L}; raise --vocab-size above {L}")
        if self.cfg.filler not in FILLERS:
            raise PosrnnError(f"unknown --filler {self.cfg.filler!r}; choose one of: {', '.join(FILLERS)}")
        super().check()

    def space_size(self) -> float:
        """Ordered keys × ordered values × the random ids beside the queries (a lower bound; no
        random ids under zero filler)."""
        K, P, V = self.V // 2 - 1, self.P, self.V
        log = (math.lgamma(K + 1) - math.lgamma(K - P + 1) + math.lgamma(V // 2 + 1) - math.lgamma(V // 2 - P + 1)
               + (self.L - 3 * self.P) * math.log(V) * (self.cfg.filler == "random"))
        return math.inf if log > 700 else math.exp(log)

    def slot_weights(self, device) -> torch.Tensor:
        """(S,) the power law i^(a−1) over the query slots i = 1 … S (unnormalised)."""
        return torch.arange(1, self.slots + 1, device=device, dtype=torch.float64) ** (POWER_A - 1)

    def draw_slots(self, n: int, gen: torch.Generator, device) -> torch.Tensor:
        """(n, P) slots in draw order, each row P distinct slots drawn one after another with
        P ∝ ``slot_weights`` (exponential races: the slot with the j-th smallest E_i / w_i is
        the j-th draw)."""
        u = torch.rand(n, self.slots, generator=gen, device=device, dtype=torch.float64)
        race = -torch.log1p(-u) / self.slot_weights(device)  # (B S) Exp(w_i) arrival times
        return race.topk(self.P, dim=1, largest=False, sorted=True).indices

    def sample(self, n, gen, device) -> Batch:
        V, L, P = self.V, self.L, self.P
        half = V // 2
        keys = torch.rand(n, half - 1, generator=gen, device=device).argsort(dim=1)[:, :P] + 1  # (B P) of 1…V/2−1
        values = torch.rand(n, half, generator=gen, device=device).argsort(dim=1)[:, :P] + half  # (B P) of V/2…V−1
        slot = self.draw_slots(n, gen, device)  # (B P): where key j is asked
        if self.cfg.filler == "zero":
            inputs = torch.zeros(n, L, dtype=torch.long, device=device)  # (B T) id 0 wherever no pair or query is
        else:
            inputs = torch.randint(V, (n, L), generator=gen, device=device)  # (B T) the random ids
        inputs[:, 0:2 * P:2], inputs[:, 1:2 * P:2] = keys, values
        at = 2 * P + 2 * slot  # (B P) steps of the queries
        inputs.scatter_(1, at, keys)
        at, order = at.sort(dim=1)  # read in time order
        return Batch(inputs=inputs, targets=values.gather(1, order), out_index=at, key=torch.cat([inputs, at], 1))
