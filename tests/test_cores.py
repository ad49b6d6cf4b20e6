"""S4D and the causal Transformer: kernel = recurrence, causality, Irie's permutation property."""

from __future__ import annotations

import pytest
import torch

from posrnn_cli.common.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.models import build_model
from posrnn_cli.models.s4d import S4DCore
from posrnn_cli.tasks import build_task
from posrnn_cli.models.transformer import CausalTransformerCore


def s4d(seed=0, D=3, H=4, N=6):
    torch.manual_seed(seed)
    return S4DCore(D, H, N).double()


def test_s4d_recurrent_view_equals_the_fft_convolution():
    core = s4d()
    x = torch.randn(2, 9, 3, dtype=torch.float64)
    y = core(x)  # (B T H)
    for T in (2, 5, 9):
        z1 = core.initial_state(x[:, 0])
        assert z1.shape == (2, 4 * 6)  # complex state (H × N/2) read as real, twice the size
        assert torch.allclose(core.output_from_state(z1, x[:, 1:T]), y[:, T - 1], atol=1e-9)


def test_s4d_kernel_matches_the_recurrence_impulse_response():
    core = s4d(1)
    dtA, C = core._discrete()
    T = 7
    s = torch.ones_like(dtA)  # s_1 = u_1 = 1, then zero input
    K = []
    for _ in range(T):
        K.append(2 * (C * s).sum(-1).real)
        s = torch.exp(dtA) * s
    assert torch.allclose(core.kernel(T), torch.stack(K, -1), atol=1e-12)


def test_s4d_initialisation():
    core = S4DCore(3, 8, 64)
    assert core.A_imag.shape == (8, 32) and torch.allclose(core.A_imag[0], torch.pi * torch.arange(32).float())
    assert torch.allclose(-torch.exp(core.log_A_real), torch.full((8, 32), -0.5))
    dt = torch.exp(core.log_dt)
    assert (dt >= 1e-3).all() and (dt <= 1e-1).all()
    assert core.log_dt._optim == {"weight_decay": 0.0}


@pytest.mark.parametrize("make", [lambda: s4d(), lambda: CausalTransformerCore(3, 4, layers=2, heads=2).double()])
def test_cores_are_causal_and_shaped(make):
    core = make().eval()
    x = torch.randn(2, 8, 3, dtype=torch.float64)
    y = core(x)
    assert y.shape == (2, 8, 4)
    x2 = x.clone()
    x2[:, 5:] = torch.randn(2, 3, 3, dtype=torch.float64)
    assert torch.allclose(core(x2)[:, :5], y[:, :5], atol=1e-10)  # the future does not leak
    assert not torch.allclose(core(x2)[:, 5:], y[:, 5:])


def test_gradient_reaches_every_s4d_parameter():
    core = s4d()
    core(torch.randn(2, 6, 3, dtype=torch.float64)).sum().backward()
    for name, p in core.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def last_output_after_permuting_the_prefix(layers: int, seed: int) -> float:
    torch.manual_seed(seed)
    core = CausalTransformerCore(6, 8, layers=layers, heads=2).double().eval()
    x = torch.randn(1, 7, 6, dtype=torch.float64)
    perm = torch.cat([torch.randperm(6), torch.tensor([6])])  # shuffle positions 0…T−2, keep the last
    with torch.no_grad():
        return (core(x)[0, -1] - core(x[:, perm])[0, -1]).abs().max().item()


def test_irie_one_causal_layer_without_pe_cannot_tell_permutations_apart():
    for seed in range(5):
        assert last_output_after_permuting_the_prefix(1, seed) < 1e-12


def test_irie_two_causal_layers_can():
    assert all(last_output_after_permuting_the_prefix(2, seed) > 1e-4 for seed in range(5))


def test_irie_property_through_the_whole_model():
    """The same property with the token embedding and the head: no PE, one layer, the
    prediction at the last step is identical for a permuted input; with PE it is not."""
    def last_logits(pe, tokens):
        cfg = resolve_config(options={"task.vocab_size": 16, "task.length": 6, "model.name": "transformer",
                                      "model.hidden_size": 8, "model.heads": 2, "model.pe": pe})
        torch.manual_seed(0)
        m = build_model(cfg, build_task(cfg.task)).double().eval()
        with torch.no_grad():
            return m(tokens, torch.tensor([[11]]))[0, 0]

    tokens = torch.tensor([[3, 1, 4, 1, 5, 9, 16, 16, 16, 16, 16, 16]])
    perm = tokens.clone()
    perm[0, :6] = tokens[0, [5, 2, 0, 4, 1, 3]]
    assert torch.allclose(last_logits("none", tokens), last_logits("none", perm), atol=1e-12)
    assert not torch.allclose(last_logits("sinusoidal", tokens), last_logits("sinusoidal", perm), atol=1e-6)


def test_bad_core_settings_are_refused():
    for sets, words in [({"model.name": "transformer", "model.heads": 3, "model.hidden_size": 8}, "must divide"),
                        ({"model.name": "s4d", "model.state_size": 5}, "even")]:
        cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 5, **sets})
        with pytest.raises(PosrnnError, match=words):
            build_model(cfg, build_task(cfg.task))
