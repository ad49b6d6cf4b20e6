"""The GPU time and memory of a training run, priced from what was measured (``gpu_ms_per_iter.json``)
with every assumption stated where it is used.

One training iteration of an Elman, GRU or LSTM model is priced in two parts:

* **the recurrence**: its sequential steps × the time of one step. A step's time comes from a
  measured row of the same core under the same switches (``train.amp``, ``train.cuda_graph``)
  whose output head is a small share of its FLOPs (``RECURRENCE_ROW_HEAD_SHARE``): the row's
  ms per step. That time is also the core's floor under those switches: a smaller step (lower
  H, B or D) is bound by its latency, not its FLOPs, and costs the same; a larger one is scaled
  up by its FLOPs per step. A core without such a row takes another RNN core's per-step time
  × its step factor over that core's (``FACTORS``); switches without a row take the fp32 time
  ÷ α (``FACTORS``) under ``amp`` and the time without the graph under
  ``cuda_graph`` (each an assumption, said so).
* **the output head**: its FLOPs (3 × 2·H·V per token it sees, × the tokens it sees: the
  output-phase steps, or for the language model its real tokens only, 4 × there: its chunked head
  recomputes each chunk's logits in backward) at the rate a measured
  head-bound row shows under the same switches, once that row's recurrence (priced as above)
  is taken out of its time. Switches without such a row take the rate without the graph, then
  ``ASSUMED_PEAK_SHARE`` of the dense peak, said so.

Cores without a measured row (S4D and the Transformer, parallel over time; Mamba, minGRU, the
RG-LRU, Gated DeltaNet, xLSTM) are priced by their FLOP count at ``ASSUMED_PEAK_SHARE`` of the
peak, with no per-step floor: an assumption, said so.

Four factors stand in where no row reaches (``FACTORS``): the packing gain g, the amp gain of the
recurrence α, and the LSTM's and the Elman RNN's step against the GRU's. Each has an assumed value
and a plausible range. The model records which of them a price used (``GpuModel.used``); the dry
run prices the plan again at each end of those ranges and prints the range of GPU-hours. A factor
stops being used, with no code edit, once its row is measured: a recurrence-bound amp row (α), an
LSTM or Elman row (their steps), ``ensemble_k.json``'s rows (g), as the GPU check writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

ASSUMED_PEAK_SHARE = 0.25  # of the dense peak, where nothing was measured


@dataclass(frozen=True)
class Factor:
    """A factor the price rests on where nothing was measured: its assumed value, its plausible
    range and where each comes from."""
    words: str  # what it is, as the dry run names it
    assumed: float
    low: float
    high: float
    cheaper_high: bool  # a higher value prices lower (a gain), else higher (a step's cost)
    why: str  # where the assumed value and the range come from
    shown: str = ""  # the assumed value as printed ("4/3"), else ``format(assumed, "g")``

    def end(self, cheap: bool) -> float:
        """The value at the end of the range that prices lowest (``cheap``) or highest."""
        return self.high if cheap == self.cheaper_high else self.low


FACTORS = {
    "pack_gain": Factor(
        "packing gain g (K members' recurrence over one run's)", 3.3, 1.0, 3.3, True,
        "1: no gain (the ensemble path as first written measured 0.76–0.87× solo on a 2-core CPU, its backward "
        "filling whole tensors); 3.3: the low end of the 3.3–6× estimated for 8 GRU members at V = 32 in bf16 in "
        "one CUDA graph, with a backward linear in T"),
    "amp_gain": Factor(
        "amp gain of the recurrence α", 1.2, 1.0, 1.8, True,
        "1: none; 1.2: the low end of the 1.2–1.5× read off the LSTM rows (51.47 → 22.14 ms, most of it the "
        "head's); 1.8: the top of the 1.6–1.8× that bf16's halved bytes give the head"),
    "lstm_step": Factor(
        "LSTM step / GRU step", 4 / 3, 1.0, 1.5, False,
        "4/3: the gates' FLOP ratio; 1: a step bound by its latency, as small steps are; 1.5: a margin above "
        "the FLOP ratio for the cell state's extra elementwise work and memory traffic", "4/3"),
    "elman_step": Factor(
        "Elman step / GRU step", 1 / 3, 0.25, 0.6, False,
        "1/3: the gates' FLOP ratio; 0.25: one fused gate with less elementwise work than the GRU's FLOPs "
        "suggest; 0.6: the step's latency share, which does not shrink with the gates", "1/3"),
}
ASSUMED = {name: f.assumed for name, f in FACTORS.items()}
#: each core's step against the GRU's (``FACTORS``); the GRU is the unit
STEP_FACTOR = {"gru": None, "lstm": "lstm_step", "elman": "elman_step"}
#: a measured row whose head is below this share of its FLOPs times the recurrence alone
RECURRENCE_ROW_HEAD_SHARE = 0.05
GATES = {"elman": 1, "gru": 3, "lstm": 4}
#: device memory by kind, for the dry run's fit check where no GPU is visible
DEVICE_BYTES = (("H100 PCIe", 80e9), ("H100", 80e9), ("H200", 141e9), ("A100", 80e9))


@dataclass(frozen=True)
class Work:
    """What one training iteration of a run does, as the GPU model prices it."""
    core: str
    steps: int  # sequential steps per sequence
    rec_flops: float  # forward + backward FLOPs of the encoder and core per iteration (0: not an RNN)
    head_flops: float  # forward + backward FLOPs of the output head per iteration
    total_flops: float
    amp: bool = False
    cuda_graph: bool = False
    peak_bytes: float = 0.0  # the step's peak memory, an estimate (``gpu_plan.peak_bytes``)
    chunked: bool = False  # the output head is computed in chunks of tokens (the language model)

    @property
    def switches(self) -> tuple[bool, bool]:
        return (self.amp, self.cuda_graph)


def switches_name(sw: tuple[bool, bool]) -> str:
    return {(False, False): "fp32", (True, False): "amp", (False, True): "fp32 + cuda_graph",
            (True, True): "amp + cuda_graph"}[sw]


def row_work(row: dict) -> Work:
    """A measured row as ``Work``: its head FLOPs from its vocabulary, length, width and batch."""
    head = 3.0 * 2 * row["hidden"] * row["vocab"] * row["length"] * row["batch"]
    return Work(row["model"], int(row.get("steps") or 2 * row["length"]), row["flops_per_iter"] - head, head,
                row["flops_per_iter"], bool(row.get("amp", False)), bool(row.get("cuda_graph", False)))


@dataclass
class GpuModel:
    """Per-step recurrence times and head rates read off the measured rows of one device kind."""
    rows: list[dict]
    peak: dict  # {"fp32": TFLOP/s, "bf16": TFLOP/s}
    notes: list[str] = field(default_factory=list)  # the assumptions used, once each
    factors: dict = field(default_factory=lambda: dict(ASSUMED))  # the value of each of ``FACTORS`` priced at
    ensemble: list[dict] = field(default_factory=list)  # measured packing gains (``ensemble_k.json``), this kind's
    used: set = field(default_factory=set)  # the ``FACTORS`` a price so far rested on

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def rel_step(self, core: str) -> float:
        """``core``'s step against the GRU's (``FACTORS``), the factor recorded as used."""
        name = STEP_FACTOR[core]
        if name is None:
            return 1.0
        self.used.add(name)
        return self.factors[name]

    def pack_gain(self, n: int) -> float:
        """The recurrence's gain of a pack of ``n`` members over one run's: interpolated in K between
        the measured rows of ``ensemble_k.json`` (amp + cuda_graph preferred), else ``FACTORS``' g,
        capped at ``n``."""
        rows = [r for r in self.ensemble if r.get("amp") and r.get("cuda_graph")] or self.ensemble
        if not rows:
            self.used.add("pack_gain")
            return min(float(n), self.factors["pack_gain"])
        pts = sorted((r["k"], r["gain"]) for r in rows)
        sw = switches_name((bool(rows[0].get("amp")), bool(rows[0].get("cuda_graph"))))
        self._note(f"packed: the gain measured at K = {', '.join(str(k) for k, _ in pts)} on {rows[0]['device']} "
                   f"({rows[0]['date']}, {rows[0]['model']} V = {rows[0]['vocab']}, {sw}), interpolated in K and "
                   f"applied to every RNN core's recurrence")
        for (k0, g0), (k1, g1) in zip(pts, pts[1:]):
            if k0 <= n <= k1:
                return min(float(n), g0 + (g1 - g0) * (n - k0) / (k1 - k0))
        return min(float(n), pts[0][1] if n < pts[0][0] else pts[-1][1])

    def _rows(self, sw) -> list[tuple[dict, Work]]:
        return [(r, w) for r in self.rows for w in [row_work(r)] if w.switches == tuple(sw)]

    def step(self, core: str, sw: tuple[bool, bool]) -> Optional[tuple[float, float]]:
        """(ms per step, the recurrence FLOPs per step it was measured at) of ``core`` under ``sw``,
        None where nothing measured reaches it."""
        rec = [(r, w) for r, w in self._rows(sw) if w.head_flops < RECURRENCE_ROW_HEAD_SHARE * w.total_flops]
        own = [(r["ms_per_iter"] / w.steps, w.rec_flops / w.steps) for r, w in rec if w.core == core]
        if own:
            return min(own)
        other = [(r["ms_per_iter"] / w.steps * self.rel_step(core) / self.rel_step(w.core),
                  w.rec_flops / w.steps * GATES[core] / GATES[w.core], w.core)
                 for r, w in rec if w.core in GATES]
        if other:
            ms, flops, src = min(other)
            ratio = self.rel_step(core) / self.rel_step(src)
            said = (f"{GATES[core]}/{GATES[src]} gates" if abs(ratio - GATES[core] / GATES[src]) < 1e-9
                    else f"{ratio:.3g}")
            self._note(f"{core}'s step under {switches_name(sw)}: {src}'s measured step × {said} "
                       f"(assumption: no {core} row)")
            return ms, flops
        if sw[1]:
            base = self.step(core, (sw[0], False))
            if base:
                self._note(f"{switches_name(sw)}: the recurrence as without the graph (assumption: no row)")
            return base
        if sw[0]:
            base = self.step(core, (False, False))
            if base:
                self.used.add("amp_gain")
                self._note(f"amp: the recurrence {self.factors['amp_gain']:g}× faster than fp32 (assumption: no "
                           f"recurrence-bound amp row)")
                return base[0] / self.factors["amp_gain"], base[1]
        return None

    def recurrence_ms(self, w: Work) -> Optional[float]:
        ref = self.step(w.core, w.switches) if w.core in GATES else None
        if ref is None:
            return None
        ms, flops = ref
        return w.steps * ms * max(1.0, (w.rec_flops / w.steps) / flops)  # at least the floor, scaled above it

    def head_rate(self, sw: tuple[bool, bool]) -> float:
        """FLOP/ms of the output head under ``sw``: from the head-bound row nearest, else assumed."""
        rates = []
        for r, w in self._rows(sw):
            rec = self.recurrence_ms(w)
            if w.head_flops >= RECURRENCE_ROW_HEAD_SHARE * w.total_flops and rec is not None and rec < r["ms_per_iter"]:
                rates.append((w.head_flops, w.head_flops / (r["ms_per_iter"] - rec)))
        if rates:
            return max(rates)[1]  # the largest measured head: the closest to the papers' head-bound cells
        if sw[1]:
            self._note(f"{switches_name(sw)}: the head as without the graph (assumption: no row)")
            return self.head_rate((sw[0], False))
        return self.assumed_rate(sw[0])

    def assumed_rate(self, amp: bool) -> float:
        prec = "bf16" if amp else "fp32"
        self._note(f"{prec}: where nothing was measured, the FLOP count at {ASSUMED_PEAK_SHARE:.0%} of the dense peak "
                   f"({self.peak[prec]:g} TFLOP/s; assumption)")
        return ASSUMED_PEAK_SHARE * self.peak[prec] * 1e9  # FLOP per ms

    def ms_per_iter(self, w: Work) -> float:
        """The priced ms of one training iteration of ``w``."""
        rec = self.recurrence_ms(w) if self.rows else None
        if rec is None:  # no row reaches this core: FLOPs at the assumed share, no floor
            return w.total_flops / self.assumed_rate(w.amp)
        return rec + w.head_flops / self.head_rate(w.switches)


def device_bytes(kind: str) -> float:
    """The memory of a device kind (the visible GPU's own where there is one)."""
    import torch

    if torch.cuda.is_available():
        return float(torch.cuda.get_device_properties(0).total_memory)
    return next((b for key, b in DEVICE_BYTES if key in kind), 80e9)
