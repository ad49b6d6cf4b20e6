"""The chunked output head (models/head.py) equals the plain one: loss and gradients, in float64
and float32, on the CPU here and on CUDA under ``pytest -m gpu``; and the language model's
training step and evaluation give the plain head's quantities from the real tokens only."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.models import build_model
from posrnn_cli.models.head import chunked_cross_entropy, head_peak_bytes, token_nll

TOL = {torch.float64: 1e-12, torch.float32: 2e-5}
cuda = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                       reason="no CUDA device: GPU test")])


def _head_case(dtype, device, N=37, H=6, V=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, H, generator=g, dtype=dtype).to(device).requires_grad_()
    w = torch.randn(V, H, generator=g, dtype=dtype).to(device).requires_grad_()
    b = torch.randn(V, generator=g, dtype=dtype).to(device).requires_grad_()
    t = torch.randint(V, (N,), generator=g).to(device)
    return h, w, b, t


def _grads(loss, *xs):
    return torch.autograd.grad(loss, xs)


@pytest.mark.parametrize("device", ["cpu", cuda])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("chunk", [1, 5, 37, 100])
def test_the_chunked_head_equals_the_plain_head_in_loss_and_gradients(dtype, device, chunk):
    h, w, b, t = _head_case(dtype, device)
    logits = F.linear(h, w, b)
    plain = F.cross_entropy(logits, t, reduction="sum")
    total, pred = chunked_cross_entropy(h, w, b, t, chunk=chunk)
    assert total.dtype == dtype
    assert torch.allclose(total, plain, rtol=TOL[dtype], atol=0)
    assert torch.equal(pred, logits.detach().argmax(-1))
    for a, c in zip(_grads(total, h, w, b), _grads(plain, h, w, b)):
        assert torch.allclose(a, c, rtol=TOL[dtype], atol=TOL[dtype])
    per_token = token_nll(h, w, b, t, chunk=chunk)
    assert torch.allclose(per_token, F.cross_entropy(logits, t, reduction="none").detach(), rtol=TOL[dtype], atol=0)


def test_a_chunk_of_the_head_is_recomputed_in_backward_not_kept():
    """Autograd keeps the hidden states and weights, never a chunk's logits: the tensors saved
    for backward hold no N × V (or chunk × V) block."""
    h, w, b, t = _head_case(torch.float32, "cpu", N=64, H=4, V=50)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(tuple(x.shape)) or x, lambda x: x):
        total, _ = chunked_cross_entropy(h, w, b, t, chunk=16)
    assert saved and all(50 not in s or s == (50, 4) or s == (50,) for s in saved), saved
    total.backward()  # and backward still runs
    assert h.grad is not None and w.grad is not None


def _lm_model_and_batch(dtype):
    torch.manual_seed(0)
    cfg = resolve_config(options={"task.name": "reverse", "task.vocab_size": 13, "task.length": 9,
                                  "model.name": "lstm", "model.hidden_size": 8, "model.pe": "sinusoidal"})

    class Shape:  # the LM's layout: every step predicts the next token, no query id
        n_input_ids, n_outputs, max_steps, output_start, continuous = 13, 13, 9, None, False

    shape = Shape()
    shape.cfg = cfg.task
    model = build_model(cfg, shape).to(dtype)
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([9, 4, 2, 7])
    tokens = torch.randint(13, (4, 9), generator=g) * (torch.arange(9) < lengths[:, None])
    return model, tokens, lengths


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_lm_step_on_real_tokens_equals_the_plain_step_over_the_padded_batch(dtype):
    """``LMTask.train_forward`` (real tokens, chunked head) gives the loss and every parameter
    gradient of ``LMTask.loss`` on the padded batch's full logits, and the same predictions
    where they count; ``infer`` gives the plain per-token NLL."""
    from posrnn_cli.tasks.lm import LMTask

    model, tokens, lengths = _lm_model_and_batch(dtype)
    task = LMTask.__new__(LMTask)  # the methods under test read only world_size
    task.world_size = 1
    batch = task._batch(tokens, lengths)
    loss, pred = task.train_forward(model, batch)
    ref = task.loss(model(batch.inputs), batch)
    assert torch.allclose(loss, ref, rtol=TOL[dtype], atol=0)
    params = list(model.parameters())
    for a, c in zip(torch.autograd.grad(loss, params), torch.autograd.grad(ref, params)):
        assert torch.allclose(a, c, rtol=TOL[dtype], atol=TOL[dtype])
    full = model(batch.inputs).argmax(-1)
    assert torch.equal(pred[batch.mask], full[batch.mask]) and (pred[~batch.mask] == -1).all()
    nll = task.infer(model, batch)
    plain = F.cross_entropy(model(batch.inputs).flatten(0, 1).float(), batch.targets.flatten(), reduction="none")
    assert torch.allclose(nll, (plain.view_as(nll) * batch.mask).detach(), rtol=2e-5, atol=1e-6)


def test_the_heads_peak_memory_is_one_chunk_of_logits():
    """The papers' LM batch (512 paragraphs of up to 1,024 tokens, V = 32,768): the plain head's
    three N × V fp32 tensors are about 206 GB, one chunk's 1.6 GB."""
    n = 512 * 1023
    assert head_peak_bytes(n, 32768, chunked=False) == 3 * 4 * n * 32768
    assert head_peak_bytes(n, 32768) == 3 * 4 * 4096 * 32768 < 2e9


def test_the_run_memory_check_counts_one_chunk_of_the_lm_heads_logits():
    """``posrnn train``'s fit check: the language model (``head_chunk``) holds one chunk of
    logits, where a plain head holds the whole batch's."""
    from posrnn_cli.common.host.memory import run_parts
    from posrnn_cli.tasks.lm import LMTask

    cfg = resolve_config(options={"train.batch_size": 512, "task.vocab_size": 32768})
    plain = run_parts(cfg, 1024, 1023, 32768, 32768)
    chunked = run_parts(cfg, 1024, 1023, 32768, 32768, LMTask.head_chunk)
    assert plain[2][0] == 512 * 1023 * 32768 * 4 * 3 and chunked[2][0] == LMTask.head_chunk * 32768 * 4 * 3


def test_under_bf16_autocast_the_chunked_head_recomputes_as_the_forward_ran():
    """``train.amp``: the chunk recomputed in backward runs under the autocast of its forward
    (``torch.utils.checkpoint`` keeps it), so the loss and gradients are the plain head's under
    the same autocast, within bf16 rounding."""
    h, w, b, t = _head_case(torch.float32, "cpu", N=40, H=8, V=30)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        total, _ = chunked_cross_entropy(h, w, b, t, chunk=16)
        plain = F.cross_entropy(F.linear(h, w, b).float(), t, reduction="sum")
    assert torch.allclose(total, plain, rtol=1e-6)  # the same bf16 logits, widened the same way
    for a, c in zip(_grads(total, h, w, b), _grads(plain, h, w, b)):
        assert a.dtype == c.dtype and torch.allclose(a, c, rtol=1e-2, atol=1e-2)
