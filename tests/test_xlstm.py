"""The xLSTM core (the ``xlstm`` package's mLSTM and sLSTM blocks): its recurrent view equals
the parallel forward and keeps the whole state, it is causal, every parameter is trained, the
stability Jacobians agree with ``torch.autograd.functional.jacobian``, and impossible sizes or a
missing package are one line. The commands run on it in tests/test_mamba_mingru.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine.stability import jacobians
from posrnn_cli.models import CORES, build_model, count_parameters
from posrnn_cli.models.xlstm import XLSTMCore
from posrnn_cli.tasks import build_task

F64 = torch.float64
#: the mLSTM's parallel form and its step stabilise with different maxima, so the two agree to
#: its eps (1e-6) relative to the stabiliser, not to rounding (measured: 1e-8 in float64)
PARALLEL_VS_STEP = 1e-6


def make(seed: int = 0, D: int = 6, H: int = 8) -> XLSTMCore:
    torch.manual_seed(seed)
    return XLSTMCore(D, H).double()


def stepped(core: XLSTMCore, x: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The package's own ``xLSTMBlockStack.step`` over x from its zero state: outputs (B, T, H) and the last state."""
    state, ys = None, []
    for t in range(x.shape[1]):
        y, state = core.stack.step(core.proj(x[:, t : t + 1]), state)
        ys.append(y[:, 0])
    return torch.stack(ys, 1), state


@pytest.mark.parametrize("T", [1, 2, 5, 13])
def test_recurrent_view_equals_the_parallel_forward_and_the_packages_own_step(T):
    core = make(1)
    x = torch.randn(3, T + 1, 6, dtype=F64)
    z1 = core.initial_state(x[:, 0])
    assert z1.shape == (3, core.state_dim) and core.state_dim == 4 * 4 * 4 + 16 + 4 + 3 * 16 + 4 * 8 + 3 * 8
    with torch.no_grad():
        y_step, state = stepped(core, x)
        y = core.output_from_state(z1, x[:, 1:])
        assert torch.allclose(y, y_step[:, -1], atol=1e-12)  # the flattening loses nothing
        assert torch.allclose(core.state_after(x), core._join(state), atol=1e-12)
        assert torch.allclose(y, core(x)[:, -1], atol=PARALLEL_VS_STEP)


def test_the_state_after_any_prefix_carries_the_whole_memory():
    """Stopping after P steps, flattening, and going on gives the parallel forward's output:
    the mLSTM's (C, n, m), the sLSTM's [h, c, n, m] and both convolution windows all travel in z."""
    core = make(2)
    x = torch.randn(2, 11, 6, dtype=F64)
    with torch.no_grad():
        full = core(x)
        for P in (1, 2, 3, 4, 7):
            zP = core.state_after(x[:, :P])
            assert torch.allclose(core.output_from_state(zP, x[:, P:]), full[:, -1], atol=PARALLEL_VS_STEP)


def test_recurrent_view_matches_in_float32_over_long_sequences():
    torch.manual_seed(4)
    core = XLSTMCore(16, 32)
    x = torch.randn(2, 64, 16)
    with torch.no_grad():
        y = core.output_from_state(core.initial_state(x[:, 0]), x[:, 1:])
        assert torch.allclose(y, core(x)[:, -1], atol=1e-4)


def test_any_length_runs_and_matches_a_core_built_for_it():
    """The mLSTM's causal mask grows with the sequence (no length bound); lengths below, at and
    above the longest seen give the same outputs as each other's prefixes."""
    core = make(3)
    x = torch.randn(2, 40, 6, dtype=F64)
    with torch.no_grad():
        long = core(x)
        assert core.stack.blocks[0].xlstm.mlstm_cell.causal_mask.shape == (40, 40)
        for T in (1, 9, 40):
            assert torch.allclose(core(x[:, :T]), long[:, :T], atol=1e-12)


def test_causal():
    core = make(5)
    x = torch.randn(2, 10, 6, dtype=F64)
    y = core(x)
    x2 = x.clone()
    x2[:, 6:] += torch.randn(2, 4, 6, dtype=F64)
    y2 = core(x2)
    assert torch.allclose(y2[:, :6], y[:, :6], atol=1e-12)
    assert (y2[:, 6:] - y[:, 6:]).abs().max() > 1e-4


def test_jacobians_agree_with_autograd_functional_and_reach_every_part_of_the_state():
    """``stability.jacobians`` (one vmapped backward through the package's step, which writes
    into its convolution window) against ``torch.autograd.functional.jacobian`` per sequence; the
    gradient reaches the mLSTM's memory C, the sLSTM's state and both windows."""
    core = make(6)
    x = torch.randn(3, 7, 6, dtype=F64)
    J = jacobians(core, x, chunk_size=2)
    assert J.shape == (3, 8, core.state_dim)
    for b in range(3):
        z1 = core.initial_state(x[b : b + 1, 0])[0].detach()
        ref = torch.autograd.functional.jacobian(lambda z: core.output_from_state(z[None], x[b : b + 1, 1:])[0], z1)
        assert torch.allclose(J[b], ref, atol=1e-10)
    widths = [torch.Size(shape).numel() for _, shape in core._parts]
    parts = dict(zip([name for name, _ in core._parts], J.split(widths, dim=-1)))
    for name in ("C", "mconv", "s", "sconv"):
        assert parts[name].abs().max() > 1e-6, name


def test_gradient_reaches_every_parameter():
    core = make(8)
    core(torch.randn(2, 6, 6, dtype=F64)).pow(2).sum().backward()
    for pname, p in core.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


def test_built_from_the_config_with_the_encoder_width_and_the_packages_decay_groups():
    cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 4, "model.name": "xlstm",
                                  "model.hidden_size": 8})
    m = build_model(cfg, build_task(cfg.task))
    assert m.core.proj.in_features == 16 and m.core.inner == 16  # D = E + P; the mLSTM's width exactly 2H
    assert m(torch.randint(8, (2, 8))).shape == (2, 8, 8)
    undecayed = {n for n, p in m.core.named_parameters() if getattr(p, "_optim", None) == {"weight_decay": 0.0}}
    assert "stack.blocks.1.xlstm.slstm_cell._recurrent_kernel_" in undecayed
    assert "stack.blocks.0.xlstm.proj_up.weight" not in undecayed and "proj.weight" not in undecayed
    assert CORES["xlstm"].recurrent_view and count_parameters(m.core) > 0


@pytest.mark.parametrize("H", [6, 4, 10])
def test_a_hidden_size_the_heads_cannot_split_is_one_line(H):
    cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 4, "model.name": "xlstm",
                                  "model.hidden_size": H})
    with pytest.raises(PosrnnError, match=r"xlstm: --hidden-size must be a multiple of 4 .* got " + str(H)):
        build_model(cfg, build_task(cfg.task))


def test_a_missing_xlstm_is_one_line_naming_the_install_command(tmp_path):
    """In a fresh interpreter where ``import xlstm`` fails: train --model xlstm exits 1 with one
    line that names the install command (with --no-deps), and leaves no run directory."""
    code = f"""
import builtins, sys
real = builtins.__import__
def fake(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and (name == "xlstm" or name.startswith("xlstm.")):  # not posrnn_cli.models' own .xlstm
        raise ImportError("No module named 'xlstm'")
    return real(name, globals, locals, fromlist, level)
builtins.__import__ = fake
sys.argv = ["posrnn", "train", "--model", "xlstm", "--vocab-size", "8", "--length", "4", "--hidden-size", "8",
            "--iterations", "2", "--device", "cpu", "--out", {str(tmp_path / "run")!r}]
from posrnn_cli.cli import run
run()
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out = (p.stdout + p.stderr).strip().splitlines()
    assert p.returncode == 1, p.stdout + p.stderr
    assert len(out) == 1 and "pip install --no-deps xlstm==2.0.6" in out[0] and "No module named 'xlstm'" in out[0], out
    assert "Traceback" not in p.stderr and not (tmp_path / "run").exists()
