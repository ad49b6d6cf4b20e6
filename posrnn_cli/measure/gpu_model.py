"""The GPU time and memory of a training run, priced from what was measured (``gpu_ms_per_iter.json``)
with every assumption stated where it is used.

One training iteration of an Elman, GRU or LSTM model is priced in two parts:

* **the recurrence**: its sequential steps × the time of one step. A step's time comes from a
  measured row of the same core under the same switches (``train.amp``, ``train.cuda_graph``)
  whose output head is a small share of its FLOPs (``RECURRENCE_ROW_HEAD_SHARE``): the row's
  ms per step. That time is also the core's floor under those switches: a smaller step (lower
  H, B or D) is bound by its latency, not its FLOPs, and costs the same; a larger one is scaled
  up by its FLOPs per step. A core without such a row takes another RNN core's per-step time
  × its gates over that core's (``ASSUMED["gates"]``); switches without a row take the fp32 time
  ÷ ``AMP_RECURRENCE_SPEEDUP`` under ``amp`` and the time without the graph under
  ``cuda_graph`` (each an assumption, said so).
* **the output head**: its FLOPs (3 × 2·H·V per token it sees, × the tokens it sees: the
  output-phase steps, or for the language model its real tokens only) at the rate a measured
  head-bound row shows under the same switches, once that row's recurrence (priced as above)
  is taken out of its time. Switches without such a row take the rate without the graph, then
  ``ASSUMED_PEAK_SHARE`` of the dense peak, said so.

Cores without a measured row (S4D and the Transformer, parallel over time; Mamba, minGRU, the
RG-LRU, Gated DeltaNet, xLSTM) are priced by their FLOP count at ``ASSUMED_PEAK_SHARE`` of the
peak, with no per-step floor: an assumption, said so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

ASSUMED_PEAK_SHARE = 0.25  # of the dense peak, where nothing was measured
#: the recurrence's gain from bf16 autocast: the low end of the 1.2–1.5× read off the LSTM rows
#: (51.47 → 22.14 ms, most of it the head's); an assumption until an amp row of a recurrence-bound
#: cell is measured
AMP_RECURRENCE_SPEEDUP = 1.2
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

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _rows(self, sw) -> list[tuple[dict, Work]]:
        return [(r, w) for r in self.rows for w in [row_work(r)] if w.switches == tuple(sw)]

    def step(self, core: str, sw: tuple[bool, bool]) -> Optional[tuple[float, float]]:
        """(ms per step, the recurrence FLOPs per step it was measured at) of ``core`` under ``sw``,
        None where nothing measured reaches it."""
        rec = [(r, w) for r, w in self._rows(sw) if w.head_flops < RECURRENCE_ROW_HEAD_SHARE * w.total_flops]
        own = [(r["ms_per_iter"] / w.steps, w.rec_flops / w.steps) for r, w in rec if w.core == core]
        if own:
            return min(own)
        other = [(r["ms_per_iter"] / w.steps * GATES[core] / GATES[w.core],
                  w.rec_flops / w.steps * GATES[core] / GATES[w.core])
                 for r, w in rec if w.core in GATES]
        if other:
            src = min(rec, key=lambda rw: rw[0]["ms_per_iter"] / rw[1].steps)[1].core
            self._note(f"{core}'s step under {switches_name(sw)}: {src}'s measured step × {GATES[core]}/{GATES[src]} "
                       f"gates (assumption: no {core} row)")
            return min(other)
        if sw[1]:
            base = self.step(core, (sw[0], False))
            if base:
                self._note(f"{switches_name(sw)}: the recurrence as without the graph (assumption: no row)")
            return base
        if sw[0]:
            base = self.step(core, (False, False))
            if base:
                self._note(f"amp: the recurrence {AMP_RECURRENCE_SPEEDUP:g}× faster than fp32 (assumption: no "
                           f"recurrence-bound amp row)")
                return base[0] / AMP_RECURRENCE_SPEEDUP, base[1]
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
