"""The dry run's GPU view of a plan: each experiment's GPU-hours in fp32, under ``amp`` +
``cuda_graph``, and with its seeds packed; the peak memory of its largest run against the
device's, and the one-line refusal of a plan whose run cannot fit.

Packing (an ensemble of same-shape runs trained as one batched model) has not been measured on
a GPU: its price here is an assumption, labelled so. ``seed_packs`` is the one place the dry run
groups runs into packs, so that a packer that knows more can take its place.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Optional

from ..common.errors import PosrnnError
from ..common.memory import human
from .gpu_model import GATES, GpuModel, Work

#: members a pack holds: the papers' 5 seeds a cell
PACK_K = 5
#: a pack's recurrence over one run's: n members cost n / min(n, this) runs' recurrence. The low end
#: of the 3.3–6× estimated for 8 GRU members at V = 32 in bf16 inside one CUDA graph; an assumption
PACK_RECURRENCE_SPEEDUP = 3.3
PACK_NOTE = (f"packed: runs that differ only in their seed, in packs of up to {PACK_K}, under amp + cuda_graph; a pack's "
             f"recurrence costs n / min(n, {PACK_RECURRENCE_SPEEDUP:g}) runs', its head n runs' (assumption, not measured "
             f"on a GPU); cores other than Elman, GRU and LSTM are not packed")
SWITCHES = {"fp32": (False, False), "amp + cuda_graph": (True, True)}


def amount(x: float) -> str:
    """1,234.5 and 12.3, but 0.042 (two significant digits below 1, not 0.0)."""
    return f"{x:,.1f}" if x >= 1 or x == 0 else f"{x:.2g}"


def seed_packs(labels_configs: list[tuple[str, dict]], k: int = PACK_K) -> list[list[str]]:
    """Run labels grouped into packs of at most ``k`` runs whose configs differ only in
    ``train.seed``, in the plan's order."""
    groups: dict[str, list[str]] = {}
    for label, cfg in labels_configs:
        key = json.dumps({**cfg, "train": {**cfg.get("train", {}), "seed": None}}, sort_keys=True, default=str)
        groups.setdefault(key, []).append(label)
    return [g[i : i + k] for g in groups.values() for i in range(0, len(g), k)]


def pack_ms(model: GpuModel, work: Work, n: int) -> float:
    """ms per iteration of a pack of ``n`` members of ``work`` (amp + cuda_graph)."""
    w = replace(work, amp=True, cuda_graph=True)
    total = model.ms_per_iter(w)
    rec = model.recurrence_ms(w) if w.core in GATES else None
    if rec is None:
        return n * total
    return n * (total - rec) + rec * n / min(n, PACK_RECURRENCE_SPEEDUP)


def peak_bytes(work: Work, batch: int, d_in: int, hidden: int, vocab: int, head_tokens: float, n_params: int,
               chunk: Optional[int]) -> float:
    """Peak GPU memory of one training step in fp32, an estimate: the parameters with their
    gradients and Adam's two moments; per token of the padded batch, the encoder's output and its
    gradient and the core's saved states ((gates + 2) × H for an RNN, as cuDNN keeps them; 16 × H
    assumed for other cores) with the core output, its gradient and the head's input; and the
    head's logits, ``log_softmax`` and gradient, over one chunk of tokens where the head is
    chunked, else over all the tokens it sees."""
    per_token = 4 * (2 * d_in + (GATES[work.core] + 2 + 3) * hidden if work.core in GATES else 2 * d_in + 16 * hidden)
    head = 12 * vocab * (min(head_tokens, chunk) if chunk else head_tokens)
    return 16 * n_params + batch * work.steps * per_token + head


def check_fits(label: str, need: float, have: float, chunked: bool) -> None:
    """Refuse in one line a plan whose largest run cannot fit the device."""
    if need <= have:
        return
    head = "" if chunked else ", or compute the output head in chunks as the lm task does"
    raise PosrnnError(f"run {label} needs about {human(need)} of GPU memory at its peak (an estimate) and the device has "
                      f"{human(have)}: lower train.batch_size (a smaller batch per process) or split the batch over more "
                      f"processes under torchrun{head}")


def experiment_lines(per_exp: dict[str, dict[str, float]], runs: dict[str, int], unit_s: float = 3600.0) -> list[str]:
    """One line per experiment: its runs and GPU-hours in fp32, amp + cuda_graph, and packed;
    then the synthetic tasks and the language model apart."""
    head = f"  {'experiment':<12} {'runs':>5} {'fp32':>10} {'amp+graph':>10} {'packed':>10}   (GPU-hours)"
    lines = [head]
    parts: dict[str, dict[str, float]] = {"synthetic tasks": {}, "language model": {}}
    for exp, by in per_exp.items():
        lines.append(f"  {exp:<12} {runs[exp]:>5} " + " ".join(f"{amount(by[k] / unit_s):>10}" for k in ("fp32", "amp", "packed")))
        part = parts["language model" if exp == "lm" else "synthetic tasks"]
        for k, v in by.items():
            part[k] = part.get(k, 0.0) + v
    for name, by in parts.items():
        if by:
            lines.append(f"  {name:<18} " + ", ".join(f"{label} {amount(by[k] / unit_s)}" for k, label in
                                                    (("fp32", "fp32"), ("amp", "amp + cuda_graph"), ("packed", "packed"))) + " GPU-hours")
    return lines
