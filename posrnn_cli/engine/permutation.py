"""Irie's property on trained weights (``004_*``): does a permutation of the earlier positions
change a causal Transformer's output at the last position?

Without a positional encoding, one attention layer at the last position sees the *set* of
(key, value) pairs of the prefix, so its output is invariant to any permutation of positions
0 … T−2; two or more layers are not. ``permutation_report`` measures this on a trained run:
for test sequences and random permutations of their earlier positions, the largest change of
any last-position logit, and which sequences changed by more than a tolerance relative to the
logits' scale.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..common.errors import PosrnnError
from .evaluate import load_run


@torch.no_grad()
def permutation_report(run: Path, device: str = "cpu", n_sequences: int = 256, permutations: int = 8,
                       seed: int = 0, tolerance: float = 1e-4) -> dict:
    loaded = load_run(run, device=device)
    cfg, task, model, ckpt = loaded.cfg, loaded.task, loaded.model, loaded.ckpt
    dev = next(model.parameters()).device
    test = task.test_set(dev)
    if test.inputs.dim() != 2:
        raise PosrnnError("the permutation analysis needs token inputs (not the continuous task)")
    n = min(n_sequences, len(test))
    x = test.inputs[:n]  # (B T)
    B, T = x.shape
    if T < 3:
        raise PosrnnError(f"sequences of {T} steps leave nothing to permute; use --length ≥ 2")
    last = torch.full((B, 1), T - 1, device=dev)
    ref = model(x, last)[:, 0].double()  # (B V) logits at the last position
    scale = ref.abs().amax(dim=1).clamp_min(1.0)  # (B)
    gen = torch.Generator().manual_seed(seed)
    worst = torch.zeros(B, dtype=torch.float64, device=dev)
    for _ in range(permutations):
        perm = torch.randperm(T - 1, generator=gen)
        if torch.equal(perm, torch.arange(T - 1)):
            perm = perm.roll(1)
        xp = torch.cat([x[:, perm.to(dev)], x[:, -1:]], dim=1)  # (B T) the prefix permuted, the last step kept
        out = model(xp, last)[:, 0].double()
        if not (bool(torch.isfinite(ref).all()) and bool(torch.isfinite(out).all())):  # NaN would read as "unchanged"
            raise PosrnnError(f"the permutation analysis of {loaded.ckpt_path} (step {int(ckpt['step'])}) met "
                              "non-finite logits, so no share is reported; analyse an earlier checkpoint or re-train "
                              "with a lower train.lr")
        worst = torch.maximum(worst, (out - ref).abs().amax(dim=1))
    sensitive = (worst > tolerance * scale).tolist()
    return {"step": int(ckpt["step"]), "model": cfg.model.name, "layers": cfg.model.layers, "pe": cfg.model.pe,
            "sequences": B, "permutations": permutations, "tolerance": tolerance,
            "max_logit_change": float(worst.max()), "sensitive": [int(s) for s in sensitive]}
