"""The core registry: every core builds from its entry, is causal, and has a recurrent view
exactly when its entry says so; Irie's property through the whole model, on random and on
trained weights. (Each core's own maths: test_s4d.py, test_transformer.py, test_stability.py.)"""

from __future__ import annotations

import json

import pytest
import torch

from posrnn_cli.common import catalog
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine.permutation import permutation_report
from posrnn_cli.engine.train import train
from posrnn_cli.models import CORES, build_model
from posrnn_cli.tasks import build_task

SMALL = {"model.hidden_size": 8, "model.heads": 2, "model.layers": 2, "model.state_size": 4}


@pytest.mark.parametrize("name", list(CORES))
def test_every_core_builds_is_causal_and_declares_its_recurrent_view(name):
    torch.manual_seed(0)
    cfg = resolve_config(options={"model.name": name, **SMALL})
    core = CORES[name].build(3, cfg.model).double().eval()
    x = torch.randn(2, 8, 3, dtype=torch.float64)
    y = core(x)
    assert y.shape == (2, 8, 8)
    x2 = x.clone()
    x2[:, 5:] = torch.randn(2, 3, 3, dtype=torch.float64)
    # the future does not leak (the non-causal Transformer, which sees every position, is the exception)
    assert torch.allclose(core(x2)[:, :5], y[:, :5], atol=1e-10) == CORES[name].causal
    assert not torch.allclose(core(x2)[:, 5:], y[:, 5:])
    has_view = all(hasattr(core, m) for m in ("initial_state", "state_after", "output_from_state"))
    assert has_view == CORES[name].recurrent_view
    if has_view:  # the view gives the core's own last output, from the state after any prefix
        z1 = core.initial_state(x[:, 0])
        assert torch.allclose(core.output_from_state(z1, x[:, 1:]), y[:, -1], atol=1e-9)
        assert torch.equal(core.state_after(x[:, :1]), z1)
        for t in (2, 5, 7):
            assert torch.allclose(core.output_from_state(core.state_after(x[:, :t]), x[:, t:]), y[:, -1], atol=1e-9)
        assert not torch.allclose(core.state_after(x[:, :6]), core.state_after(x2[:, :6]))  # it reads the prefix
    assert catalog.CORES[name].description


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


@pytest.mark.parametrize("layers, pe, sensitive", [(1, "none", False), (2, "none", True), (1, "sinusoidal", True)])
def test_permutation_report_on_trained_transformers(tmp_path, layers, pe, sensitive):
    """What the pipeline's irie experiment measures, on trained weights: a one-layer no-PE
    Transformer's last output ignores the order of the prefix, two layers or a PE do not."""
    cfg = resolve_config(options={"task.name": "predecessor", "task.vocab_size": 12, "task.length": 5,
                                  "task.n_test": 64,
                                  "model.name": "transformer", "model.layers": layers, "model.pe": pe,
                                  "model.hidden_size": 16, "model.heads": 2, "train.iterations": 30,
                                  "train.batch_size": 16, "train.device": "cpu"})
    train(cfg, tmp_path / "run", progress=False)
    rep = permutation_report(tmp_path / "run", n_sequences=64, permutations=4)
    json.dumps(rep)  # plain data for permutation.json
    share = sum(rep["sensitive"]) / len(rep["sensitive"])
    if sensitive:
        assert share > 0.9 and rep["max_logit_change"] > 1e-3
    else:
        assert share == 0 and rep["max_logit_change"] < 1e-4


def test_bad_core_settings_are_refused():
    for sets, words in [({"model.name": "transformer", "model.heads": 3, "model.hidden_size": 8}, "must divide"),
                        ({"model.name": "s4d", "model.state_size": 5}, "even")]:
        cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 5, **sets})
        with pytest.raises(PosrnnError, match=words):
            build_model(cfg, build_task(cfg.task))
