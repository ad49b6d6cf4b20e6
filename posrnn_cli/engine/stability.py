"""Gradient stability (003 §2.3, §4.3).

For a sequence ``x s q…q`` (target token x, L−1 disturbants s, L query steps) let ``z_1`` be
the state after the first token (LSTM: ``[h; c]``, so 2H wide; S4D: the complex state read
as a real vector) and ``h_2L`` the last hidden state. Per sequence, ``J = ∂h_2L/∂z_1``
(H × Dz). For two sequences A, B with Jacobian rows ``J_i``:

    stability(A, B) = Σ_i ⟨J_i^A, J_i^B⟩ / Σ_i ‖J_i^A‖ ‖J_i^B‖

— the row cosines weighted by ‖J_i^A‖‖J_i^B‖; in [−1, 1], 1 for identical Jacobians.
It is reported for the common-target pair ``(x, s)`` vs ``(x, s′)`` and the common-suffix
pair ``(x, s)`` vs ``(x′, s)``.

``target_position`` t (1-based, default 1: the set-up above, the RNNs' in 002 §4.3) moves the
target: each sequence is ``p x s q…q`` with t − 1 disturbants p before the target, shared by
the three sequences of a triplet (so their states agree up to the target), and L − t after
it; ``J = ∂h_2L/∂z_t`` with ``z_t`` the state after the target. 002 §4.3 analyses the S4D
with its target at t = 23, where its accuracy was lowest.

Every core with a recurrent view (``models.CORES[name].recurrent_view``) provides
``state_after`` (z_t from the first t inputs) and ``output_from_state`` (h_2L from z_t and the
inputs after it): explicit cells over the trained weights for the RNNs (cuDNN can be neither
differentiated twice nor vmapped), the closed-form unrolling for S4D. The Jacobians come from
one batched backward pass per chunk.

``stability_values`` is the one generator of per-triplet values: ``posrnn stability``
summarises them with CIs, the pipeline keeps them raw so its intervals can resample seeds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import numpy as np
import torch
from torch import Tensor, nn

from ..common.errors import PosrnnError
from ..common.host.memory import check_stability_fits
from ..common.results.stats import bootstrap_ci
from ..models import CORES, core_spec
from .checkpoint import load_checkpoint
from .paths import resolve_checkpoint
from ..common.files.rundir import list_checkpoints
from ..common.files.rundir import read_run_config
from .device import resolve_device
from .evaluate import load_run


def jacobians(core: nn.Module, x: Tensor, chunk_size: int = 64, target_position: int = 1) -> Tensor:
    """∂h_T/∂z_t per sequence, z_t the state after the first t = ``target_position`` inputs
    (t < T): x (B, T, D) → (B, H, Dz).

    One forward pass per chunk of sequences, then one backward pass vectorised over the H
    one-hot output seeds (``is_grads_batched``: vmap over the backward graph). Sequences are
    independent, so seed i gives row i of every sequence's Jacobian at once. This measured
    3–10× faster on CPU than ``vmap(jacrev)`` over sequences, with identical results."""
    first, last, t = core.state_after, core.output_from_state, target_position
    out = []
    for start in range(0, x.shape[0], chunk_size):
        xc = x[start : start + chunk_size].detach()  # (b T D)
        with torch.enable_grad():
            zt = first(xc[:, :t]).detach().requires_grad_(True)  # (b Dz)
            h = last(zt, xc[:, t:])  # (b H)
            H = h.shape[1]
            seeds = torch.eye(H, dtype=h.dtype, device=h.device).unsqueeze(1).expand(H, h.shape[0], H)  # (H b H)
            (g,) = torch.autograd.grad(h, zt, grad_outputs=seeds, is_grads_batched=True)  # (H b Dz)
        out.append(g.transpose(0, 1).detach())  # (b H Dz)
    return torch.cat(out)


def stability(JA: Tensor, JB: Tensor) -> Tensor:
    """Σ_i ⟨J_i^A, J_i^B⟩ / Σ_i ‖J_i^A‖‖J_i^B‖ per pair: (B, H, Dz) × 2 → (B,).

    Zero rows contribute zero to both sums; a pair whose denominator is 0 scores 0."""
    num = (JA * JB).sum(-1).sum(-1)  # Σ_i ⟨J_i^A, J_i^B⟩
    # ‖a‖‖b‖ as sqrt(⟨a,a⟩⟨b,b⟩): for A = B each term is exactly ⟨a,a⟩, so the ratio is exactly 1
    den = ((JA * JA).sum(-1) * (JB * JB).sum(-1)).sqrt().sum(-1)
    return torch.where(den > 0, num / den.clamp_min(torch.finfo(den.dtype).tiny), torch.zeros_like(num))


# ---- triplets and the analysis of a run ------------------------------------------------------
@dataclass
class Triplets:
    xs: Tensor  # (B, L) (p, x, s)
    xs2: Tensor  # (B, L) (p, x, s′)
    x2s: Tensor  # (B, L) (p, x′, s)
    target_position: int = 1  # t: the target's 1-based position, after the t − 1 shared disturbants p


def check_target_position(t: int, L: int) -> None:
    """Refuse a target position outside 1 … L − 1 in one line: at t = L no disturbant follows the
    target, so the common-target pair would compare one sequence with itself (stability 1, always)."""
    if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t < L:
        raise PosrnnError(f"the target position must lie in 1 … {L - 1} (before the last of the run's {L} tokens, so a "
                          f"suffix follows it; 1 is the first token, the RNNs' set-up), got {t}")


def make_triplets(n: int, L: int, gen: torch.Generator, target: tuple[int, int], disturbant: tuple[int, int],
                  target_position: int = 1) -> Triplets:
    """``n`` triplets with the target drawn from ids [target) and the disturbants from
    [disturbant) (half-open ranges); x′ ≠ x. With ``target_position`` t > 1 the target follows
    t − 1 disturbants p shared by the triplet's three sequences (drawn last, so t = 1 draws
    exactly the triplets it always did)."""
    check_target_position(target_position, L)
    t0, t1 = target
    d0, d1 = disturbant
    x = torch.randint(t0, t1, (n, 1), generator=gen)
    shift = torch.randint(1, max(2, t1 - t0), (n, 1), generator=gen)
    x2 = t0 + (x - t0 + shift) % (t1 - t0)  # another target-kind token (≠ x when the range has two)
    s = torch.randint(d0, d1, (n, L - target_position), generator=gen)
    s2 = torch.randint(d0, d1, (n, L - target_position), generator=gen)
    p = torch.randint(d0, d1, (n, target_position - 1), generator=gen)
    return Triplets(torch.cat([p, x, s], 1), torch.cat([p, x, s2], 1), torch.cat([p, x2, s], 1), target_position)


def conditions(task_cfg) -> dict[str, tuple[tuple[int, int], tuple[int, int]]]:
    """name → (target id range, disturbant id range): the four F/R cells for dual-frequency
    runs (F = [0, V/2), R = [V/2, V)), else one cell over the whole vocabulary."""
    V = task_cfg.vocab_size
    if task_cfg.rarity is None:
        return {"all": ((0, V), (0, V))}
    half = {"F": (0, V // 2), "R": (V // 2, V)}
    return {f"{a}/{b}": (half[a], half[b]) for a in "FR" for b in "FR"}


def pair_stabilities(model: nn.Module, tri: Triplets, query_id: int, chunk_size: int = 64) -> dict[str, Tensor]:
    """Per-triplet stability of the common-target and common-suffix pairs."""

    def encode(tokens: Tensor) -> Tensor:
        inputs = torch.cat([tokens, torch.full_like(tokens, query_id)], dim=1)  # (B 2L)
        with torch.no_grad():
            return model.encoder(inputs)  # (B 2L D)

    if not isinstance(chunk_size, int) or not 1 <= chunk_size <= 10**6:
        raise PosrnnError(f"the chunk size (sequences per Jacobian pass) must lie in 1 … 1,000,000, got {chunk_size}")
    dev = next(model.parameters()).device
    J = {k: jacobians(model.core, encode(getattr(tri, k).to(dev)), chunk_size, tri.target_position)
         for k in ("xs", "xs2", "x2s")}
    bad = sorted({i for j in J.values() for i in (~torch.isfinite(j)).flatten(1).any(1).nonzero().flatten().tolist()})
    if bad:  # a NaN or infinite Jacobian would score 0, an answer the model never gave
        raise NonFiniteAnalysis(f"{len(bad)} of {len(tri.xs)} triplets have a non-finite Jacobian (first: triplet "
                                f"{bad[0]})")
    return {"common_target": stability(J["xs"], J["xs2"]).cpu(), "common_suffix": stability(J["xs"], J["x2s"]).cpu()}


class NonFiniteAnalysis(PosrnnError):
    """An analysis met a NaN or an infinity: its result would be a number the model never gave."""


def state_width(model: nn.Module, query_id: int, target_position: int = 1) -> int:
    """Dz, the width of the core's state z_t (what each Jacobian row spans), from one sequence."""
    tokens = torch.full((1, target_position), query_id, dtype=torch.long, device=next(model.parameters()).device)
    with torch.no_grad():
        return int(model.core.state_after(model.encoder(tokens)).shape[-1])


def check_run(cfg, task) -> None:
    """Refuse runs the analysis is not defined for, with a one-line reason."""
    if not task.fixed_reverse_layout:
        raise PosrnnError("stability analysis is defined for fixed-length reverse runs (003 §2.3, §4.3); this run "
                          f"trains {task.describe()}")
    if not core_spec(cfg.model.name).recurrent_view:
        raise PosrnnError(f"stability needs a recurrent state z_1; the {cfg.model.name} core has none "
                          f"(use {', '.join(k for k, c in CORES.items() if c.recurrent_view)})")
    if cfg.model.frozen_vocab is not None:
        raise PosrnnError("stability of vocabulary-extended runs is not defined; analyse the original run")


def scheduled_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """The checkpoints of ``run_dir`` its config's schedule names (``TrainConfig.scheduled``): a
    curve over training reads these only, so a checkpoint taken for the wall clock, a signal or
    ``--stop-after`` (a runtime matter) changes no result."""
    cfg = read_run_config(run_dir)
    ckpts = list_checkpoints(run_dir)
    return ckpts if cfg is None else [(s, p) for s, p in ckpts if cfg.train.scheduled(s)]


def unscheduled_checkpoints(run_dir: Path) -> list[int]:
    """The steps of ``run_dir``'s checkpoints its schedule does not name (taken for the wall clock,
    a signal or ``--stop-after``): a curve over training leaves them out, and says so."""
    kept = {s for s, _ in scheduled_checkpoints(run_dir)}
    return [s for s, _ in list_checkpoints(run_dir) if s not in kept]


def stability_values(
    run: Path, step: Optional[int] = None, n_triplets: int = 1024, chunk_size: int = 64, device: str = "cpu",
    seed: int = 0, on_checkpoint: Optional[Callable[[int, float], None]] = None, skip: Iterable[int] = (),
    target_position: int = 1,
) -> Iterator[tuple[int, str, str, np.ndarray, object]]:
    """Per-triplet stability of every saved checkpoint of ``run`` (or the one at ``step``), but
    those at the steps in ``skip`` (done before): yields ``(step, condition, pair, values, cfg)``.
    The triplets depend only on ``seed`` (and ``target_position``), so every checkpoint and every
    run sees the same ones. A target position outside 1 … L − 1 is refused before any Jacobian is taken
    (at t = L the suffix is empty, so the common-target pair compares one sequence with itself), and
    so is an analysis whose Jacobians (each H × the core's state width) exceed the memory."""
    if not 2 <= n_triplets <= 10**7 or not 1 <= chunk_size <= 10**6:
        raise PosrnnError("--triplets must lie in 2 … 10,000,000 and --chunk-size in 1 … 1,000,000")
    if not 0 <= seed < 2**63:
        raise PosrnnError(f"--seed must lie in 0 … 2^63 − 1, got {seed}")
    run = Path(run)
    ckpt_path, run_dir = resolve_checkpoint(run, step)
    if run.is_file() or step is not None:
        steps = [(int(load_checkpoint(ckpt_path)["step"]), ckpt_path)]
    else:
        steps = scheduled_checkpoints(run_dir)
    skip = set(skip)
    steps = [(s, p) for s, p in steps if s not in skip]
    cfg0 = read_run_config(run_dir)
    if cfg0 is not None:  # every triplet and its Jacobians are held at once: refused before they are made
        check_target_position(target_position, cfg0.task.length)  # and a target outside the sequence
        check_stability_fits(n_triplets, cfg0.task.length, cfg0.model.hidden_size)  # at least an LSTM's state
    dev = resolve_device(device)
    for i, (s, path) in enumerate(steps):
        t0 = time.perf_counter()
        run = load_run(path, device=str(dev))
        cfg, task, model = run.cfg, run.task, run.model
        check_run(cfg, task)
        if i == 0:  # the core's real state width, from one short sequence, before any triplet is drawn
            check_stability_fits(n_triplets, cfg.task.length, cfg.model.hidden_size,
                                 state_width(model, task.query_id, target_position))
        for name, (trange, drange) in conditions(cfg.task).items():
            gen = torch.Generator().manual_seed(seed)  # the same triplets at every checkpoint
            tri = make_triplets(n_triplets, cfg.task.length, gen, trange, drange, target_position)
            try:
                pairs = pair_stabilities(model, tri, task.query_id, chunk_size)
            except NonFiniteAnalysis as e:
                raise NonFiniteAnalysis(f"stability of {path} (step {s}, condition {name}): {e}, so no value is "
                                        "reported; analyse an earlier checkpoint (--checkpoint) or re-train with a "
                                        "lower train.lr") from None
            for pair, v in pairs.items():
                yield s, name, pair, v.double().numpy(), cfg
        if on_checkpoint:
            on_checkpoint(s, time.perf_counter() - t0)


def analyze(run: Path, step: Optional[int] = None, n_triplets: int = 1024, chunk_size: int = 64, device: str = "auto",
            seed: int = 0, n_resamples: int = 10_000, on_checkpoint: Optional[Callable[[int, float], None]] = None,
            target_position: int = 1) -> list[dict]:
    """``posrnn stability``: one row per (checkpoint, condition, pair) with the mean and its
    95% bootstrap CI over the triplets (the columns of the pipeline's stability table) and the
    target position the Jacobians were taken at."""
    rows = []
    for s, cond, pair, v, cfg in stability_values(run, step, n_triplets, chunk_size, device, seed, on_checkpoint,
                                                  target_position=target_position):
        lo, hi = bootstrap_ci(v, n_resamples=n_resamples)
        rows.append({"model": cfg.model.name, "pe": cfg.model.pe, "step": s, "condition": cond, "pair": pair,
                     "stability": float(v.mean()), "ci_low": lo, "ci_high": hi, "n_seeds": 1, "n_triplets": len(v),
                     "target_position": target_position})
    return rows



def write_stability(run: Path, run_dir: Path, csv_path: Path, draw: Optional[Callable[[list[dict], Path], None]] = None,
                    what: str = "posrnn stability", **options) -> list[dict]:
    """``posrnn stability``'s work: ``analyze(run, **options)`` while holding the lock of ``run_dir``
    for reading (``what`` names the holder: no training or second analysis meanwhile), then the
    table written to ``csv_path`` and, with ``draw(rows, path)``, its figure beside it (``.png``) as
    one swap, never a new table beside an old figure → the rows."""
    from ..common.files.io import csv_text, write_owned, write_table_and_figure
    from .lock import run_lock

    with run_lock(run_dir, what, reading=True):
        rows = analyze(run, **options)
        if draw is not None:
            write_table_and_figure(csv_text(rows).encode(), csv_path, csv_path.with_suffix(".png"),
                                   lambda p: draw(rows, p))
        else:
            write_owned(csv_path, csv_text(rows))
    return rows

#: how every stability CSV begins (``posrnn stability`` overwrites only such a file)
