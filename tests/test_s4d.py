"""S4DCore: the FFT convolution, the ZOH recurrence and the recurrent view are one model."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import jacrev, vmap

from posrnn_cli.models.s4d import S4DCore

F64 = torch.float64


def make(seed: int = 0, D: int = 3, H: int = 4, N: int = 6, **kw) -> S4DCore:
    torch.manual_seed(seed)
    return S4DCore(D, H, N, **kw).double()


def reference_recurrence(core: S4DCore, x: torch.Tensor, z0: torch.Tensor | None = None):
    """Step the ZOH recurrence one input at a time, from the raw parameters, in complex
    arithmetic: z_t = Ā z_{t−1} + B̄ u_t, y_t = 2·Re(C z_t) + D u_t → GELU → Linear → GLU.
    Returns the outputs (B, T, H) and the states (B, T, H, N/2) complex."""
    dt = core.log_dt.exp()  # (H)
    A = torch.complex(-core.log_A_real.exp(), core.A_imag)  # (H N/2)
    A_bar = torch.exp(dt[:, None] * A)  # (H N/2)
    B_bar = (A_bar - 1) / A  # (H N/2), B = 1
    C = torch.complex(core.C[..., 0], core.C[..., 1])  # (H N/2)
    u = core.in_proj(x)  # (B T H)
    z = torch.zeros(x.shape[0], core.H, core.N // 2, dtype=C.dtype) if z0 is None else z0
    ys, zs = [], []
    for t in range(x.shape[1]):
        z = A_bar * z + B_bar * u[:, t, :, None]
        y = 2 * (C * z).sum(-1).real + core.D * u[:, t]
        ys.append(torch.nn.functional.glu(core.output_linear(torch.nn.functional.gelu(y)), dim=-1))
        zs.append(z)
    return torch.stack(ys, 1), torch.stack(zs, 1)


def as_real(z: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(z).flatten(1)  # (B H·N)


def test_shapes_init_and_tags():
    core = S4DCore(5, 8, 64)
    assert core(torch.randn(2, 7, 5)).shape == (2, 7, 8)
    assert core.state_dim == 8 * 64  # 32 complex modes per channel, read as 64 reals
    assert core.initial_state(torch.randn(2, 5)).shape == (2, core.state_dim)
    assert core.C.shape == (8, 32, 2) and core.D.shape == (8,)
    assert torch.allclose(-core.log_A_real.exp(), torch.full((8, 32), -0.5))
    assert torch.allclose(core.A_imag, math.pi * torch.arange(32.0).expand(8, -1))
    dt = core.log_dt.exp()
    assert (dt >= 1e-3 - 1e-9).all() and (dt <= 1e-1 + 1e-9).all()
    for name in ("log_dt", "log_A_real", "A_imag"):
        assert getattr(core, name)._optim == {"weight_decay": 0.0}
    assert not hasattr(core.C, "_optim") and not hasattr(core.D, "_optim")


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="even"):
        S4DCore(3, 4, 5)
    with pytest.raises(ValueError, match="dt_min"):
        S4DCore(3, 4, 8, dt_min=0.1, dt_max=0.01)
    core = make()
    with pytest.raises(ValueError, match="at least one step"):
        core.output_from_state(core.initial_state(torch.randn(2, 3, dtype=F64)), torch.randn(2, 0, 3, dtype=F64))


def test_fft_convolution_equals_the_stepped_recurrence():
    """The Vandermonde kernel, its constants (2·Re, B̄ = (e^{ΔA}−1)/A) and the length-2T FFT
    reproduce the recurrence at every step."""
    core = make(1)
    x = torch.randn(3, 11, 3, dtype=F64)
    y_ref, _ = reference_recurrence(core, x)
    assert torch.allclose(core(x), y_ref, atol=1e-10)


def test_initial_state_and_state_after_are_the_recurrent_states():
    core = make(2)
    x = torch.randn(3, 4, 3, dtype=F64)
    _, zs = reference_recurrence(core, x)
    assert torch.allclose(core.initial_state(x[:, 0]), as_real(zs[:, 0]), atol=1e-12)
    for P in (1, 2, 4):
        assert torch.allclose(core.state_after(x[:, :P]), as_real(zs[:, P - 1]), atol=1e-12)


def test_state_after_a_prefix_then_the_rest_equals_the_forward():
    core = make(9)
    x = torch.randn(2, 8, 3, dtype=F64)
    assert torch.allclose(core.output_from_state(core.state_after(x[:, :3]), x[:, 3:]), core(x)[:, -1], atol=1e-10)


@pytest.mark.parametrize("T", [2, 3, 9])
def test_recurrent_view_equals_the_convolutional_forward(T):
    core = make(3)
    x = torch.randn(2, T, 3, dtype=F64)
    y = core.output_from_state(core.initial_state(x[:, 0]), x[:, 1:])  # (B H)
    assert y.shape == (2, 4)
    assert torch.allclose(y, core(x)[:, -1], atol=1e-10)


def test_recurrent_view_from_any_state_equals_the_stepped_recurrence():
    """From an arbitrary z_1 (not one the inputs produced) the closed form is Ā^{T−1} z_1 + …"""
    core = make(4)
    x_rest = torch.randn(2, 6, 3, dtype=F64)
    z1 = torch.randn(2, core.H, core.N // 2, dtype=torch.complex128)
    y_ref, _ = reference_recurrence(core, x_rest, z0=z1)
    assert torch.allclose(core.output_from_state(as_real(z1), x_rest), y_ref[:, -1], atol=1e-10)


def test_recurrent_view_matches_in_float32_at_paper_scale():
    torch.manual_seed(5)
    core = S4DCore(16, 32, 64)
    x = torch.randn(2, 128, 16)
    with torch.no_grad():
        y = core.output_from_state(core.initial_state(x[:, 0]), x[:, 1:])
        assert torch.allclose(y, core(x)[:, -1], atol=1e-5)


def test_causal():
    core = make(6)
    x = torch.randn(2, 10, 3, dtype=F64)
    y = core(x)
    x2 = x.clone()
    x2[:, 6:] += torch.randn(2, 4, 3, dtype=F64)
    y2 = core(x2)
    assert torch.allclose(y2[:, :6], y[:, :6], atol=1e-12)  # no leak from the future (nor FFT wrap-around)
    assert (y2[:, 6:] - y[:, 6:]).abs().max() > 1e-3


def test_gradient_reaches_every_parameter():
    core = make(7)
    core(torch.randn(2, 6, 3, dtype=F64)).pow(2).sum().backward()
    for name, p in core.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_state_jacobian_with_torch_func_and_batched_backward():
    """∂y_T/∂z_1 by vmap(jacrev), by a vmapped backward (is_grads_batched, as the stability
    analysis does) and by central finite differences agree."""
    core = make(8)
    x = torch.randn(3, 5, 3, dtype=F64)
    z1 = core.initial_state(x[:, 0]).detach()  # (B Dz)
    x_rest = x[:, 1:]

    def one(z, xr):  # unbatched: (Dz), (T−1 D) → (H)
        return core.output_from_state(z[None], xr[None])[0]

    J = vmap(jacrev(one))(z1, x_rest)  # (B H Dz)
    assert J.shape == (3, core.H, core.state_dim)

    z = z1.clone().requires_grad_(True)
    out = core.output_from_state(z, x_rest)  # (B H)
    seeds = torch.eye(core.H, dtype=F64)[:, None].expand(core.H, 3, core.H)  # (H B H)
    (g,) = torch.autograd.grad(out, z, grad_outputs=seeds, is_grads_batched=True)  # (H B Dz)
    assert torch.allclose(g.transpose(0, 1), J, atol=1e-12)

    eps = 1e-6
    with torch.no_grad():
        E = torch.eye(core.state_dim, dtype=F64)  # (Dz Dz)
        fd = torch.stack(
            [(core.output_from_state(z1 + eps * e, x_rest) - core.output_from_state(z1 - eps * e, x_rest)) / (2 * eps)
             for e in E],
            dim=-1,
        )  # (B H Dz)
    assert torch.allclose(J, fd, atol=1e-7)
    assert J.abs().max() > 1e-3


def test_the_optimiser_honours_the_no_weight_decay_tags():
    """With weight decay on, the tagged SSM parameters sit in a group of their own without it —
    and a step really leaves them undecayed where the others decay."""
    from posrnn_cli.common.settings.config import TrainConfig
    from posrnn_cli.engine.train import make_optimizer

    torch.manual_seed(0)
    core = S4DCore(3, 4, 6)
    opt = make_optimizer(core.parameters(), TrainConfig(weight_decay=0.5, lr=0.1), torch.device("cpu"))
    tagged = {id(getattr(core, n)) for n in ("log_dt", "log_A_real", "A_imag")}
    groups = {g["weight_decay"]: {id(p) for p in g["params"]} for g in opt.param_groups}
    assert groups[0.0] == tagged and tagged.isdisjoint(groups[0.5]) and id(core.C) in groups[0.5]
    before = {n: p.detach().clone() for n, p in core.named_parameters()}
    for p in core.parameters():
        p.grad = torch.zeros_like(p)  # no gradient: only weight decay can move a parameter
    opt.step()
    for n, p in core.named_parameters():
        moved = not torch.equal(p.detach(), before[n])
        assert moved == (id(p) not in tagged), n
