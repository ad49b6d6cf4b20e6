"""The dry run's GPU view of a plan: each experiment's GPU-hours in fp32, under ``amp`` +
``cuda_graph``, and with its seeds packed; the peak memory of its largest run against the
device's, and the one-line refusal of a plan whose run cannot fit.

Packing (an ensemble of same-shape runs trained as one batched model) has not been measured on
a GPU: its price here rests on the packing gain g (``gpu_model.FACTORS``), whose plausible range the
dry run prices, until ``ensemble_k.json`` holds the device's measured gains. The packs priced are the sweep's own:
``packing.pack`` groups the runs exactly as ``posrnn sweep --ensemble K`` would train them, and a
run whose core has no ensemble path is priced solo, its reason counted in ``pack_lines``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ..common.errors import PosrnnError
from ..common.host.memory import human
from .gpu_model import FACTORS, GATES, GpuModel, Work

#: members a pack holds: the papers' 5 seeds a cell
PACK_K = 5


def pack_note(model: GpuModel) -> str:
    """How a pack is priced: a pack's recurrence costs n / min(n, g) runs', g the measured gain
    (``ensemble_k.json``) or, until it is measured, ``FACTORS["pack_gain"]``: an assumption."""
    g = ("g measured (above)" if model.ensemble else
         f"g = {FACTORS['pack_gain'].assumed:g}, its range below (assumption, not measured on a GPU)")
    return f"packed: under amp + cuda_graph, a pack's recurrence costs n / min(n, g) runs', its head n runs', {g}"


SWITCHES = {"fp32": (False, False), "amp + cuda_graph": (True, True)}


def amount(x: float) -> str:
    """1,234.5 and 12.3, but 0.042 (two significant digits below 1, not 0.0)."""
    return f"{x:,.1f}" if x >= 1 or x == 0 else f"{x:.2g}"


def priced_packs(jobs: list, k: int = PACK_K, memory: Optional[tuple[float, str]] = None) -> list:
    """The sweep's packs of ``jobs`` at up to ``k`` runs (``packing.pack``: runs that differ only in
    ``train.seed``, in the plan's order; a run whose core or kind has no ensemble path alone); with
    ``memory`` (bytes, the device named), no pack of more members than fit it (``storage.member_fit``)."""
    from ..sweep.packing import pack
    from ..sweep.storage import member_fit

    return pack(jobs, k, member_fit(int(memory[0]), memory[1]) if memory is not None and k > 1 else None)


def pack_lines(packs: list, k: int) -> list[str]:
    """The packing priced, in counts (``packing.describe``), and where it comes from."""
    from ..sweep.packing import describe

    head, *rest = describe(packs)
    return [f"  {head} (the sweep's packer, sweep/packing.py, at up to {k} runs an ensemble, as `posrnn sweep "
            f"--ensemble {k}` would train them)"] + [f"  {line}" for line in rest]


def pack_ms(model: GpuModel, work: Work, n: int) -> float:
    """ms per iteration of a pack of ``n`` members of ``work`` (amp + cuda_graph)."""
    w = replace(work, amp=True, cuda_graph=True)
    total = model.ms_per_iter(w)
    rec = model.recurrence_ms(w) if w.core in GATES else None
    if rec is None:
        return n * total
    return n * (total - rec) + rec * n / model.pack_gain(n)


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
    raise PosrnnError(f"run {label} needs about {human(need)} of GPU memory at its peak (an estimate) and the device "
                      f"has {human(have)}: lower train.batch_size (a smaller batch per process) or split the batch "
                      f"over more processes under torchrun{head}")


def experiment_lines(per_exp: dict[str, dict[str, float]], runs: dict[str, int], source: str = "measured rows",
                     unit_s: float = 3600.0, corpus: frozenset = frozenset(),
                     packed: str = "an assumption, not measured on a GPU") -> list[str]:
    """One line per experiment: its runs and GPU-hours in fp32, amp + cuda_graph, and packed; the
    synthetic tasks, the language model (the experiments in ``corpus``, whose runs read an encoded
    corpus) and all of them apart; then what each column rests on."""
    cols = ("fp32", "amp", "packed")
    lines = [f"  {'experiment':<18} {'runs':>6} {'fp32':>10} {'amp+graph':>10} {'packed':>10}   (GPU-hours)"]
    parts: dict[str, dict[str, float]] = {"synthetic tasks": {}, "language model": {}, "all": {}}
    n = {"synthetic tasks": 0, "language model": 0, "all": 0}
    for exp, by in per_exp.items():
        lines.append(f"  {exp:<18} {runs[exp]:>6,} " + " ".join(f"{amount(by[k] / unit_s):>10}" for k in cols))
        for name in ("language model" if exp in corpus else "synthetic tasks", "all"):
            n[name] += runs[exp]
            for k, v in by.items():
                parts[name][k] = parts[name].get(k, 0.0) + v
    for name, by in parts.items():
        if by:
            lines.append(f"  {name:<18} {n[name]:>6,} " + " ".join(f"{amount(by[k] / unit_s):>10}" for k in cols))
    return lines + [f"  fp32, amp+graph: each run alone, priced from the {source} (source above) and the assumptions "
                    f"below; packed: the sweep's packs (below), priced by {packed}"]


def range_lines(used: list[str], ends: list[dict[str, dict[str, float]]], runs: dict[str, int],
                corpus=frozenset(), unit_s: float = 3600.0) -> list[str]:
    """The factors ``used`` that nothing measured yet (``FACTORS``), each with its plausible range and
    where it comes from, then the synthetic tasks', the language model's and all GPU-hours in each
    column with every one of them at its cheap end, then at its dear end (``ends``: the two
    ``variant_seconds``)."""
    lines = ["  factors not measured on a GPU (the figures above take each at its assumed value):"]
    for n in used:
        f = FACTORS[n]
        lines.append(f"    {f.words}: {f.low:g}–{f.high:g}, assumed {f.shown or format(f.assumed, 'g')} ({f.why})")
    lines.append(f"  {'range over them':<18} {'runs':>6} {'fp32':>15} {'amp+graph':>15} {'packed':>15}   (GPU-hours, "
                 f"low–high)")
    for name, pick in (("synthetic tasks", lambda e: e not in corpus), ("language model", lambda e: e in corpus),
                       ("all", lambda e: True)):
        exps = [e for e in runs if pick(e)]
        if not exps:
            continue
        cells = [f"{amount(sum(ends[0][e][c] for e in exps) / unit_s)}–"
                 f"{amount(sum(ends[1][e][c] for e in exps) / unit_s)}" for c in ("fp32", "amp", "packed")]
        lines.append(f"  {name:<18} {sum(runs[e] for e in exps):>6,} " + " ".join(f"{c:>15}" for c in cells))
    return lines
