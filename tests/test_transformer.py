"""CausalTransformerCore: shapes and Irie's note (004 §3) on permutations (causality: test_cores.py).

One causal layer without PE computes, at the last position, a weighted set function of the
prefix, so permuting positions 0 … T−2 leaves that output unchanged; a second layer sees
first-layer outputs that each summarised a prefix of a different length, which encodes order.
"""

from __future__ import annotations

import pytest
import torch

from posrnn_cli.models.transformer import CausalTransformerCore

F64 = torch.float64


def make(layers: int, seed: int, D: int = 6, H: int = 8, heads: int = 2) -> CausalTransformerCore:
    torch.manual_seed(seed)
    return CausalTransformerCore(D, H, layers=layers, heads=heads).double().eval()


def last_output_change_under_prefix_permutation(core, x: torch.Tensor, gen: torch.Generator) -> float:
    """max |y_T(x) − y_T(x permuted at 0 … T−2)| over a batch, with the last position kept."""
    T = x.shape[1]
    perm = torch.cat([torch.randperm(T - 1, generator=gen), torch.tensor([T - 1])])
    while torch.equal(perm, torch.arange(T)):  # a real permutation
        perm = torch.cat([torch.randperm(T - 1, generator=gen), torch.tensor([T - 1])])
    with torch.no_grad():
        return (core(x)[:, -1] - core(x[:, perm])[:, -1]).abs().max().item()


def test_shapes():
    core = CausalTransformerCore(5, 16, layers=2, heads=4)
    assert core(torch.randn(3, 7, 5)).shape == (3, 7, 16)
    assert core(torch.randn(1, 1, 5)).shape == (1, 1, 16)


def test_heads_must_divide_the_hidden_size():
    with pytest.raises(ValueError, match="must divide"):
        CausalTransformerCore(5, 10, heads=3)
    with pytest.raises(ValueError, match="at least one layer"):
        CausalTransformerCore(5, 8, layers=0)


def test_one_layer_without_pe_is_blind_to_the_prefix_order():
    gen = torch.Generator().manual_seed(1)
    for seed in range(4):
        core = make(1, seed)
        x = torch.randn(4, 8, 6, dtype=F64, generator=gen)
        assert last_output_change_under_prefix_permutation(core, x, gen) < 1e-12


def test_two_layers_without_pe_see_the_prefix_order():
    gen = torch.Generator().manual_seed(2)
    for seed in range(4):
        core = make(2, seed)
        x = torch.randn(4, 8, 6, dtype=F64, generator=gen)
        assert last_output_change_under_prefix_permutation(core, x, gen) > 1e-4


def test_one_layer_with_positions_in_the_input_sees_the_order():
    """The blindness is about missing positions: give the encoder output a one-hot position
    and the same one-layer core tells the permutation apart."""
    gen = torch.Generator().manual_seed(3)
    core = make(1, 0, D=6 + 8)
    tokens = torch.randn(4, 8, 6, dtype=F64, generator=gen)
    T = tokens.shape[1]
    perm = torch.cat([torch.arange(T - 1).flip(0), torch.tensor([T - 1])])  # reverse the prefix
    pe = torch.eye(T, dtype=F64).expand(4, T, T)  # (B T T): position t ↦ e_t, not permuted
    with torch.no_grad():
        y = core(torch.cat([tokens, pe], -1))[:, -1]
        y_perm = core(torch.cat([tokens[:, perm], pe], -1))[:, -1]
    assert (y - y_perm).abs().max() > 1e-4
