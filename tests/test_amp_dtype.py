"""Under ``train.amp`` the recurrent cores run in bf16, the dtype the loop's autocast asks for, on
every device, instead of autocast's own per-device rule (cuDNN's RNNs in fp16 on CUDA, the GRU in
fp32 on a CPU); their fp32 master weights get the gradients. The CUDA half runs where torch sees
a CUDA device (the GPU check reads the same on a device)."""

from __future__ import annotations

import pytest
import torch

from posrnn_cli.models.rnn import RecurrentCore, autocast_dtype

KINDS = ("elman", "gru", "lstm")


def core_under_autocast(kind: str, device: str):
    torch.manual_seed(0)
    core = RecurrentCore(kind, 8, 16).to(device)
    x = torch.randn(4, 6, 8, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        h = core(x)
    h.float().square().sum().backward()
    return core, x, h


@pytest.mark.parametrize("kind", KINDS)
def test_each_core_runs_in_bf16_under_the_loops_autocast_on_the_cpu(kind):
    core, x, h = core_under_autocast(kind, "cpu")
    assert h.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 and p.grad is not None and torch.isfinite(p.grad).all()
               for p in core.parameters())
    with torch.no_grad():  # bf16 rounding of the fp32 result, not another computation
        assert (h.float() - core(x)).abs().max() < 0.05


def test_autocasts_own_rule_would_run_the_cpus_gru_in_fp32():
    """Why the core casts itself: autocast alone leaves a CPU GRU in fp32 (and CUDA's cuDNN RNNs
    in fp16), so a run's dtype would depend on the device and the core."""
    gru = torch.nn.GRU(8, 16, batch_first=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert gru(torch.randn(2, 3, 8))[0].dtype == torch.float32
        assert autocast_dtype("cpu") == torch.bfloat16
    assert autocast_dtype("cpu") is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: GPU test")
@pytest.mark.parametrize("kind", KINDS)
def test_each_core_runs_in_bf16_under_the_loops_autocast_on_cuda(kind):
    core, _, h = core_under_autocast(kind, "cuda")
    assert h.dtype == torch.bfloat16
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in core.parameters())
