"""Gradient stability (SPEC §4).

For a sequence ``x s q…q`` (target token x, L−1 disturbants s, L query steps) let ``z_1`` be
the state after the first token (LSTM: ``[h; c]``, so 2H wide; S4D: the complex state read
as a real vector) and ``h_T`` the last hidden state, T = 2L. Per sequence,
``J = ∂h_T/∂z_1`` (H × Dz). For two sequences A, B with Jacobian rows ``J_i``:

    stability(A, B) = Σ_i ⟨J_i^A, J_i^B⟩ / Σ_i ‖J_i^A‖ ‖J_i^B‖

— the row cosines weighted by ‖J_i^A‖‖J_i^B‖; in [−1, 1], 1 for identical Jacobians.
It is reported for the common-target pair ``(x, s)`` vs ``(x, s′)`` and the common-suffix
pair ``(x, s)`` vs ``(x′, s)``.

cuDNN RNNs can be neither differentiated twice nor vmapped, so the recurrences are
re-written here as explicit cells over the trained module's own weights; the Jacobians
come from one batched (vmapped) backward pass per chunk of sequences.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import Tensor, nn

from .checkpoint import _atomic, list_checkpoints, load_checkpoint, resolve_checkpoint
from .errors import PosrnnError
from .metrics import bootstrap_ci


# ---- explicit cells -------------------------------------------------------------------------
def _weights(rnn: nn.Module):
    return rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0


def rnn_kind(core: nn.Module) -> str:
    for kind, cls in (("lstm", nn.LSTM), ("gru", nn.GRU), ("elman", nn.RNN)):
        if isinstance(core, cls):
            if core.num_layers != 1 or core.bidirectional or not core.bias:
                raise ValueError("explicit cells cover single-layer, unidirectional RNNs with biases")
            if kind == "elman" and core.nonlinearity != "tanh":
                raise ValueError("explicit Elman cell is tanh only")
            return kind
    raise ValueError(f"no explicit cell for core {type(core).__name__}; expected nn.RNN, nn.GRU, nn.LSTM "
                     "or a core with initial_state/output_from_state")


def step_fn(core: nn.Module) -> Callable[[Tensor, Tensor], Tensor]:
    """``step(z, xp) -> z'``: one recurrent step from state z given the input projection
    ``xp = W_ih x + b_ih``. z is ``h`` (H) or ``[h; c]`` (2H) for an LSTM; works batched."""
    kind = rnn_kind(core)
    _, W_hh, _, b_hh = _weights(core)
    H = core.hidden_size

    if kind == "elman":
        return lambda h, xp: torch.tanh(xp + h @ W_hh.T + b_hh)
    if kind == "gru":
        def gru(h, xp):
            hp = h @ W_hh.T + b_hh  # (… 3H)
            r = torch.sigmoid(xp[..., :H] + hp[..., :H])
            u = torch.sigmoid(xp[..., H : 2 * H] + hp[..., H : 2 * H])
            n = torch.tanh(xp[..., 2 * H :] + r * hp[..., 2 * H :])
            return (1 - u) * n + u * h
        return gru

    def lstm(z, xp):
        h, c = z[..., :H], z[..., H:]
        g = xp + h @ W_hh.T + b_hh  # (… 4H): i f g o
        i, f = torch.sigmoid(g[..., :H]), torch.sigmoid(g[..., H : 2 * H])
        cell, o = torch.tanh(g[..., 2 * H : 3 * H]), torch.sigmoid(g[..., 3 * H :])
        c2 = f * c + i * cell
        return torch.cat([o * torch.tanh(c2), c2], dim=-1)
    return lstm


def input_projection(core: nn.Module, x: Tensor) -> Tensor:
    W_ih, _, b_ih, _ = _weights(core)
    return x @ W_ih.T + b_ih  # (… T G)


def state_width(core: nn.Module) -> int:
    return 2 * core.hidden_size if rnn_kind(core) == "lstm" else core.hidden_size


def state_after_first(core: nn.Module, x1: Tensor) -> Tensor:
    """z_1: the state after the first input step from a zero state. x1: (B, D) → (B, Dz)."""
    z0 = x1.new_zeros(x1.shape[0], state_width(core))
    return step_fn(core)(z0, input_projection(core, x1))


def run_from_state(core: nn.Module, z1: Tensor, x_rest: Tensor) -> Tensor:
    """All states z_2 … z_T from z_1 over the remaining inputs. x_rest: (B, T−1, D) → (B, T−1, Dz)."""
    step, xp = step_fn(core), input_projection(core, x_rest)
    z, out = z1, []
    for t in range(xp.shape[1]):
        z = step(z, xp[:, t])
        out.append(z)
    return torch.stack(out, dim=1)


def last_hidden_from_state(core: nn.Module, z1: Tensor, x_rest: Tensor) -> Tensor:
    """h_T from z_1 and the remaining inputs (B, T−1, D) → (B, H)."""
    step, xp = step_fn(core), input_projection(core, x_rest)
    z = z1
    for t in range(xp.shape[1]):
        z = step(z, xp[:, t])
    return z[..., : core.hidden_size]


def _hooks(core: nn.Module):
    """(first-state function, last-output function) for any supported core."""
    if hasattr(core, "initial_state") and hasattr(core, "output_from_state"):
        return core.initial_state, core.output_from_state
    rnn_kind(core)  # raises ValueError for unsupported cores
    return (lambda x1: state_after_first(core, x1)), (lambda z1, xr: last_hidden_from_state(core, z1, xr))


def jacobians(core: nn.Module, x: Tensor, chunk_size: int = 64) -> Tensor:
    """∂h_T/∂z_1 per sequence: x (B, T, D) → (B, H, Dz).

    One forward pass per chunk of sequences, then one backward pass vectorised over the H
    one-hot output seeds (``is_grads_batched``: vmap over the backward graph). Sequences are
    independent, so seed i gives row i of every sequence's Jacobian at once. This measured
    3–10× faster on CPU than ``vmap(jacrev)`` over sequences, with identical results."""
    first, last = _hooks(core)
    out = []
    for start in range(0, x.shape[0], chunk_size):
        xc = x[start : start + chunk_size].detach()  # (b T D)
        with torch.enable_grad():
            z1 = first(xc[:, 0]).detach().requires_grad_(True)  # (b Dz)
            h = last(z1, xc[:, 1:])  # (b H)
            H = h.shape[1]
            seeds = torch.eye(H, dtype=h.dtype, device=h.device).unsqueeze(1).expand(H, h.shape[0], H)  # (H b H)
            (g,) = torch.autograd.grad(h, z1, grad_outputs=seeds, is_grads_batched=True)  # (H b Dz)
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
    xs: Tensor  # (B, L) (x, s)
    xs2: Tensor  # (B, L) (x, s′)
    x2s: Tensor  # (B, L) (x′, s)


def make_triplets(n: int, L: int, gen: torch.Generator, target: tuple[int, int], disturbant: tuple[int, int]) -> Triplets:
    """``n`` triplets with the target drawn from ids [target) and the disturbants from
    [disturbant) (half-open ranges); x′ ≠ x."""
    t0, t1 = target
    d0, d1 = disturbant
    x = torch.randint(t0, t1, (n, 1), generator=gen)
    shift = torch.randint(1, max(2, t1 - t0), (n, 1), generator=gen)
    x2 = t0 + (x - t0 + shift) % (t1 - t0)  # another target-kind token (≠ x when the range has two)
    s = torch.randint(d0, d1, (n, L - 1), generator=gen)
    s2 = torch.randint(d0, d1, (n, L - 1), generator=gen)
    return Triplets(torch.cat([x, s], 1), torch.cat([x, s2], 1), torch.cat([x2, s], 1))


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
    core = model.core.rnn if hasattr(model.core, "rnn") else model.core

    def encode(tokens: Tensor) -> Tensor:
        inputs = torch.cat([tokens, torch.full_like(tokens, query_id)], dim=1)  # (B 2L)
        with torch.no_grad():
            return model.encoder(inputs)  # (B 2L D)

    dev = next(model.parameters()).device
    J = {k: jacobians(core, encode(getattr(tri, k).to(dev)), chunk_size) for k in ("xs", "xs2", "x2s")}
    return {"common_target": stability(J["xs"], J["xs2"]).cpu(), "common_suffix": stability(J["xs"], J["x2s"]).cpu()}


FIELDS = ["step", "condition", "pair", "mean", "ci_low", "ci_high", "n"]


def check_run(cfg) -> None:
    if cfg.task.name != "reverse" or cfg.task.min_length is not None or cfg.task.autoregressive:
        raise PosrnnError(f"stability analysis is defined for fixed-length reverse runs (SPEC §4); this run trains {cfg.task.name!r}"
                          + (" with variable length or autoregression" if cfg.task.name == "reverse" else ""))
    if cfg.model.name == "transformer":
        raise PosrnnError("stability needs a recurrent state z_1; the transformer has none (use elman, gru, lstm or s4d)")
    if cfg.model.frozen_vocab is not None:
        raise PosrnnError("stability of vocabulary-extended runs is not defined; analyse the original run")


def analyze(
    run: Path, step: Optional[int] = None, n_triplets: int = 1024, chunk_size: int = 64, device: str = "auto",
    seed: int = 0, n_resamples: int = 10_000, on_checkpoint: Optional[Callable[[int, float], None]] = None,
) -> list[dict]:
    """Stability of every saved checkpoint of ``run`` (or the one at ``step``) → CSV rows."""
    from .evaluate import load_run
    from .train import resolve_device

    if n_triplets < 2 or chunk_size < 1:
        raise PosrnnError("--triplets must be ≥ 2 and --chunk-size ≥ 1")
    run = Path(run)
    ckpt_path, run_dir = resolve_checkpoint(run, step)
    if run.is_file() or step is not None:
        steps = [(int(load_checkpoint(ckpt_path)["step"]), ckpt_path)]
    else:
        steps = list_checkpoints(run_dir)
    dev = resolve_device(device)
    rows = []
    for s, path in steps:
        t0 = time.perf_counter()
        cfg, task, model, *_ = load_run(path, device=str(dev))
        check_run(cfg)
        for name, (trange, drange) in conditions(cfg.task).items():
            gen = torch.Generator().manual_seed(seed)  # the same triplets at every checkpoint
            tri = make_triplets(n_triplets, cfg.task.length, gen, trange, drange)
            res = pair_stabilities(model, tri, task.query_id, chunk_size)
            for pair, v in res.items():
                lo, hi = bootstrap_ci(v.double().numpy(), n_resamples=n_resamples)
                rows.append({"step": s, "condition": name, "pair": pair, "mean": float(v.double().mean()),
                             "ci_low": lo, "ci_high": hi, "n": len(v)})
        if on_checkpoint:
            on_checkpoint(s, time.perf_counter() - t0)
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS)
    w.writeheader()
    w.writerows(rows)
    _atomic(Path(path), lambda f: f.write(buf.getvalue().encode()))


def plot(rows: list[dict], path: Path, title: str = "") -> None:
    """Stability over training (like the paper's Fig. 5): one panel per pair, a line per condition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = ["common_target", "common_suffix"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, pair in zip(axes, pairs):
        for cond in dict.fromkeys(r["condition"] for r in rows):
            rs = sorted((r for r in rows if r["pair"] == pair and r["condition"] == cond), key=lambda r: r["step"])
            steps = [r["step"] for r in rs]
            ax.plot(steps, [r["mean"] for r in rs], marker="o", ms=3, label=cond)
            ax.fill_between(steps, [r["ci_low"] for r in rs], [r["ci_high"] for r in rs], alpha=0.2)
        ax.set_title(pair.replace("_", " "))
        ax.set_xlabel("training iteration")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("gradient stability")
    axes[0].legend(title="target/disturbant", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    _atomic(Path(path), lambda f: f.write(buf.getvalue()))
