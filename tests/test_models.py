"""Invariants of the PE forms, the double-vanilla control and the registered cores."""

from __future__ import annotations

import pytest
import torch

from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.models import CORES, PE_FORMS, build_model, count_parameters
from posrnn_cli.models.s4d import S4DCore
from posrnn_cli.tasks import build_task
from posrnn_cli.models.transformer import CausalTransformerCore


def model_for(pe, seed=0, **over):
    sets = {"task.vocab_size": 10, "task.length": 6, "task.n_test": 64, "model.name": "gru", "model.hidden_size": 16,
            "model.pe": pe}
    sets.update(over)
    cfg = resolve_config(options=sets)
    torch.manual_seed(seed)
    return build_model(cfg, build_task(cfg.task)), cfg


@pytest.mark.parametrize("core", ["elman", "gru", "lstm", "s4d"])
def test_double_vanilla_has_the_pe_models_parameter_count(core):
    dummy, _ = model_for("dummy", **{"model.name": core})
    pe, _ = model_for("sinusoidal", **{"model.name": core})
    vanilla, _ = model_for("none", **{"model.name": core})
    assert count_parameters(dummy) == count_parameters(pe) > count_parameters(vanilla)
    e = dummy.encoder(torch.randint(10, (2, 12)))
    assert torch.equal(e[..., :16], e[..., 16:])  # the embedding twice, no position information


def test_random_pe_rows_are_unit_norm_fixed_and_saved():
    m, cfg = model_for("random")
    table = m.encoder.pe.pe_table
    assert torch.allclose(table.norm(dim=1), torch.ones(len(table)), atol=1e-6)
    assert "encoder.pe.pe_table" in m.state_dict() and not any(p is table for p in m.parameters())
    other, _ = model_for("random", seed=1)  # another init draws another table …
    assert not torch.equal(other.encoder.pe.pe_table, table)
    other.load_state_dict(m.state_dict())  # … and a checkpoint restores the trained run's own
    assert torch.equal(other.encoder.pe.pe_table, table)


def test_random_pe_rows_are_uniform_on_the_sphere():
    m, _ = model_for("random", **{"task.length": 500, "model.hidden_size": 8})
    table = m.encoder.pe.pe_table  # (1000 8)
    assert table.mean(0).abs().max() < 0.1  # no preferred direction
    assert (table.T @ table / len(table) - torch.eye(8) / 8).abs().max() < 0.03  # isotropic: E[x xᵀ] = I / P


def test_learnable_pe_is_trained():
    m, _ = model_for("learnable")
    assert any(p is m.encoder.pe.pe_table for p in m.parameters())
    assert m.encoder.pe.pe_table.shape == (12, 16)
    out = m(torch.randint(10, (2, 12)), torch.arange(6, 12).expand(2, 6))
    out.sum().backward()
    assert m.encoder.pe.pe_table.grad[:12].abs().sum(1).gt(0).all()  # every position's row gets a gradient


def test_position_forms_tell_positions_apart_and_controls_do_not():
    for pe in PE_FORMS:
        m, _ = model_for(pe)
        x = torch.full((1, 12), 3)  # the same token at every step
        e = m.encoder(x)[0]
        distinct = len({tuple(r) for r in e.round(decimals=5).tolist()})
        assert (distinct == 12) == PE_FORMS[pe].has_positions, pe


def test_phase_form_marks_input_and_output_phase_only():
    """The paper's autoregressive model: a learnable vector per phase concatenated with the embedding."""
    m, _ = model_for("phase")
    p = m.encoder(torch.full((1, 12), 3))[0, :, 16:]  # (12 16) the phase part
    assert all(torch.equal(p[t], p[0]) for t in range(6)) and all(torch.equal(p[t], p[6]) for t in range(6, 12))
    assert not torch.equal(p[0], p[6])
    assert count_parameters(m) == count_parameters(model_for("sinusoidal")[0]) + 2 * 16
    copy, _ = model_for("phase", **{"task.name": "copy", "task.delay": 3, "task.vocab_size": 8})
    q = copy.encoder(torch.full((1, 15), 3))[0, :, 16:]
    assert torch.equal(q[8], q[0]) and not torch.equal(q[9], q[8])  # copy's output phase opens after L + T = 9 steps


@pytest.mark.parametrize(
    "sets, words",
    [
        ({"model.pe": "dummy", "model.pe_mode": "add"}, "concatenates the embedding with itself"),
        ({"model.pe": "dummy", "model.pe_dim": 8}, "ignores model.pe_dim"),
        ({"model.pe": "phase", "task.min_length": 3}, "fixed output-phase start"),
        ({"model.pe": "learnable", "model.pe_mode": "add", "model.pe_dim": 8}, "--pe-mode add needs"),
        ({"model.name": "transformer", "model.heads": 3}, "must divide"),
        ({"model.name": "transformer", "model.layers": 0, "model.heads": 2}, "model.layers must be at least 1"),
        ({"model.name": "s4d", "model.state_size": 5}, "even"),
    ],
)
def test_bad_model_combinations_are_refused(sets, words):
    with pytest.raises(PosrnnError, match=words):
        model_for(sets.pop("model.pe", "sinusoidal"), **sets)


def test_registered_cores_get_their_settings_from_the_config():
    m, _ = model_for("none", **{"model.name": "s4d", "model.state_size": 6})
    assert isinstance(m.core, S4DCore) and m.core.log_A_real.shape == (16, 3)  # H × N/2 conjugate pairs
    m, _ = model_for("none", **{"model.name": "transformer", "model.layers": 3, "model.heads": 4})
    assert isinstance(m.core, CausalTransformerCore) and len(m.core.blocks) == 3
    assert m.core.blocks[0].attn.heads == 4


@pytest.mark.parametrize("core", list(CORES))
@pytest.mark.parametrize("pe", list(PE_FORMS))
def test_every_core_with_every_pe_form_maps_tokens_to_logits(core, pe):
    sets = {"model.name": core, "model.heads": 2}
    m, _ = model_for(pe, **sets)
    m.eval()
    x = torch.randint(10, (2, 12))
    y = m(x)  # (B T V): every step
    assert y.shape == (2, 12, 10)
