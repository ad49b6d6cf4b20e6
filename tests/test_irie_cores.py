"""The two Transformers of Irie's open claims (004 §3 Question 1, §4): the linear Transformer's
fast-weight form equals causal attention without softmax, ``tril(Q Kᵀ) V``; the non-causal one
sees every position; and through the whole model without PE, the last position's output is
invariant to permutations of the earlier ones for the non-causal Transformer at any depth and
the linear one at one layer, not for the linear one at two layers or with PE."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.models import build_model
from posrnn_cli.models.transformer import CausalSelfAttention
from posrnn_cli.tasks import build_task

F64 = torch.float64


def test_the_fast_weight_form_is_causal_attention_without_softmax():
    torch.manual_seed(0)
    attn = CausalSelfAttention(8, 2, attention="linear").double()
    x = torch.randn(3, 7, 8, dtype=F64)
    B, T, H = x.shape
    q, k, v = attn.qkv(x).view(B, T, 3, 2, 4).permute(2, 0, 3, 1, 4)
    scores = torch.tril(q @ k.transpose(-1, -2)) * 4**-0.5  # (B h T T), no softmax
    expected = attn.out((scores @ v).transpose(1, 2).reshape(B, T, H))
    assert torch.allclose(attn(x), expected, atol=1e-12)


def test_the_noncausal_attention_is_softmax_attention_over_every_position():
    torch.manual_seed(1)
    attn = CausalSelfAttention(8, 2, attention="noncausal").double()
    x = torch.randn(2, 5, 8, dtype=F64)
    q, k, v = attn.qkv(x).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
    w = torch.softmax(q @ k.transpose(-1, -2) * 4**-0.5, dim=-1)
    assert torch.allclose(attn(x), attn.out((w @ v).transpose(1, 2).reshape(2, 5, 8)), atol=1e-12)
    with pytest.raises(ValueError, match="attention must be one of"):
        CausalSelfAttention(8, 2, attention="sparse")


def last_logits_change(name: str, layers: int, pe: str) -> float:
    """The largest change of the last-position logits over 4 permutations of the earlier positions."""
    cfg = resolve_config(options={"task.name": "predecessor", "task.vocab_size": 16, "task.length": 8,
                                  "model.name": name, "model.layers": layers, "model.hidden_size": 8,
                                  "model.heads": 2, "model.pe": pe})
    task = build_task(cfg.task)
    torch.manual_seed(0)
    model = build_model(cfg, task).double().eval()
    b = task.sample(16, torch.Generator().manual_seed(0), torch.device("cpu"))
    T = b.inputs.shape[1]
    last = torch.full((16, 1), T - 1)
    gen, worst = torch.Generator().manual_seed(1), 0.0
    with torch.no_grad():
        ref = model(b.inputs, last)
        for _ in range(4):
            perm = torch.cat([torch.randperm(T - 1, generator=gen), torch.tensor([T - 1])])
            worst = max(worst, (model(b.inputs[:, perm], last) - ref).abs().max().item())
    return worst


@pytest.mark.parametrize("name, layers, pe, invariant", [
    ("noncausal_transformer", 1, "none", True), ("noncausal_transformer", 2, "none", True),
    ("noncausal_transformer", 2, "sinusoidal", False),
    ("linear_transformer", 1, "none", True), ("linear_transformer", 2, "none", False),
    ("linear_transformer", 1, "sinusoidal", False),
])
def test_irie_property_of_each_new_transformer(name, layers, pe, invariant):
    change = last_logits_change(name, layers, pe)
    assert (change < 1e-10) == invariant, change


def test_the_noncausal_transformer_refuses_fed_back_targets(tmp_path):
    r = CliRunner().invoke(app, ["train", "--model", "noncausal_transformer", "--autoregressive", "--vocab-size", "8",
                                 "--length", "4", "--hidden-size", "8", "--heads", "2", "--iterations", "2",
                                 "--device", "cpu", "--out", str(tmp_path / "r")])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 1 and len(lines) == 1 and "--autoregressive" in lines[0] and "Traceback" not in r.output
    assert not (tmp_path / "r").exists()
