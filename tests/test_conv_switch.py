"""One switch for every short convolution (``model.conv: false``, ``--no-conv``): Gated DeltaNet's
layer, Hawk's block and xLSTM's mLSTM and sLSTM put the identity in its place, as Mamba does
(test_mamba_conv.py). With each layer's memory made to forget at once, a change to x_2 reaches
step 3 only through the convolution; the switch is refused on cores without one."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.models import CORES
from posrnn_cli.models.gdn_layer import GatedDeltaNetLayer
from posrnn_cli.models.hawk import HawkCore
from posrnn_cli.models.shortconv import ShortConv

F64 = torch.float64


def forgetful(name: str, conv: bool):
    """A float64 layer whose memory forgets within one step, as a function x (B, T, 6) → (B, T, ·)."""
    torch.manual_seed(0)
    with torch.no_grad():
        if name == "gated_deltanet_layer":
            core = GatedDeltaNetLayer(6, 8, 2, conv).double()
            core.A_log.fill_(12.0)  # α_t = exp(−e^12·softplus(·)) = 0: S_t = β_t v_t k_tᵀ
            core.dt_bias.fill_(5.0)
            return core
        if name == "hawk":
            core = HawkCore(6, 8, conv).double()
            core.Lambda.fill_(-1e3)  # a_t = σ(Λ)^{c r_t} = 0: h_t = i_t ⊙ x̃_t
            return core
        pytest.importorskip("xlstm", reason="the xlstm core needs the xlstm package")
        from posrnn_cli.models.xlstm import XLSTMCore

        core = XLSTMCore(6, 8, conv=conv).double()
        block = core.stack.blocks[0]  # the mLSTM block alone: the sLSTM after it is a nonlinear recurrence
        cell = block.xlstm.mlstm_cell
        cell.fgate.weight.zero_()
        cell.fgate.bias.fill_(-1e4)  # log f_t = −10⁴: C_t = i_t v_t k_tᵀ (the parallel form's decay matrix is diagonal)
        core._fit_context(16)
        return lambda x: block(core.proj(x))


@pytest.mark.parametrize("name", ["gated_deltanet_layer", "hawk", "xlstm"])
def test_only_the_convolution_carries_the_previous_input_into_a_step(name):
    x = torch.randn(2, 6, 6, dtype=F64)
    x2 = x.clone()
    x2[:, 2] += 1.0
    for conv, reads_it in ((True, True), (False, False)):
        f = forgetful(name, conv)
        with torch.no_grad():
            moved = (f(x2) - f(x)).abs().amax(dim=(0, 2))  # (T,) the change at each step
        assert moved[2] > 1e-3 and moved[:2].max() == 0  # causal either way
        assert (moved[3] > 1e-6) == reads_it, (name, conv, moved)


def test_off_is_the_same_identity_for_every_core():
    gdn, hawk = GatedDeltaNetLayer(6, 8, 2, conv=False), HawkCore(6, 8, conv=False)
    offs = [gdn.q_conv, gdn.k_conv, gdn.v_conv, hawk.conv]
    assert all(type(m) is torch.nn.Identity for m in offs)
    assert all(isinstance(m, ShortConv) for m in (GatedDeltaNetLayer(6, 8, 2).q_conv, HawkCore(6, 8).conv))
    pytest.importorskip("xlstm", reason="the xlstm core needs the xlstm package")
    from posrnn_cli.models.xlstm import XLSTMCore

    off = XLSTMCore(6, 8, conv=False)
    x = torch.randn(2, 5, 16)
    assert torch.equal(off.stack.blocks[0].xlstm.conv1d(x), x)
    assert not any("conv" in n for n, _ in off.named_parameters()), [n for n, _ in off.named_parameters()]
    assert not any(isinstance(m, torch.nn.Conv1d) for m in off.modules())
    on = XLSTMCore(6, 8)
    assert sum("conv" in n for n, _ in on.named_parameters()) == 4  # each block's weight and bias
    assert on.state_dim - off.state_dim == 3 * on.inner + 3 * 8  # both windows leave the state


def test_the_xlstm_slstm_gates_read_the_previous_input_only_through_the_convolution():
    """The sLSTM's input and forget gates read the convolution's output: with it on, a change to
    x_2 reaches their input at step 3; off, their input is the step's own input."""
    pytest.importorskip("xlstm", reason="the xlstm core needs the xlstm package")
    from posrnn_cli.models.xlstm import XLSTMCore

    x = torch.randn(2, 6, 8, dtype=F64)
    x2 = x.clone()
    x2[:, 2] += 1.0
    for conv in (True, False):
        torch.manual_seed(0)
        layer = XLSTMCore(6, 8, conv=conv).double().stack.blocks[1].xlstm
        seen = []
        for gate in (layer.igate, layer.fgate):
            gate.register_forward_hook(lambda mod, args, out: seen.append(args[0]))
        with torch.no_grad():
            layer(x), layer(x2)
        moved = (seen[2] - seen[0]).abs().amax(dim=(0, 2))  # the input gate's input, x against x2
        assert moved[2] > 1e-3 and moved[:2].max() == 0
        assert (moved[3] > 1e-6) == conv, (conv, moved)
        if not conv:
            torch.testing.assert_close(seen[0], torch.nn.functional.silu(x), rtol=0, atol=0)  # identity, then SiLU


def test_posrnn_train_xlstm_no_conv_builds_a_model_without_a_convolution_parameter(tmp_path):
    pytest.importorskip("xlstm", reason="the xlstm core needs the xlstm package")
    from posrnn_cli.engine.checkpoint import load_checkpoint

    r = CliRunner().invoke(app, ["train", "--model", "xlstm", "--no-conv", "--hidden-size", "8", "--vocab-size", "8",
                                 "--length", "4", "--iterations", "2", "--batch-size", "4", "--device", "cpu",
                                 "--out", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    (ckpt,) = sorted((tmp_path / "r").rglob("*.pt"))
    state = load_checkpoint(ckpt)["model"]
    assert state and not any("conv" in k for k in state), [k for k in state if "conv" in k]


def test_the_xlstm_recurrent_view_still_equals_the_forward_without_the_convolution():
    pytest.importorskip("xlstm", reason="the xlstm core needs the xlstm package")
    from posrnn_cli.models.xlstm import XLSTMCore

    torch.manual_seed(1)
    core = XLSTMCore(6, 8, conv=False).double()
    x = torch.randn(2, 7, 6, dtype=F64)
    y = core(x)
    for P in (1, 4):
        torch.testing.assert_close(core.output_from_state(core.state_after(x[:, :P]), x[:, P:]), y[:, -1])


def test_the_switch_names_the_cores_that_have_a_convolution_and_refuses_the_rest(tmp_path):
    with_conv = sorted(n for n, c in CORES.items() if c.conv)
    assert with_conv == ["gated_deltanet_layer", "hawk", "mamba", "xlstm"]
    r = CliRunner().invoke(app, ["train", "--model", "rglru", "--no-conv", "--vocab-size", "8", "--length", "4",
                                 "--iterations", "2", "--device", "cpu", "--out", str(tmp_path / "r")])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 1 and len(lines) == 1 and all(n in lines[0] for n in with_conv), r.output
    assert not (tmp_path / "r").exists()
