"""A traffic budget the ensemble cannot regress: the bytes one forward + backward writes, counted
on the ``meta`` device at the papers' shapes (B = 512, H = 512; fig2's GRU at V = 32 and the LSTM at
V = 16,384; K = 5 members), per member against one solo run's, at two lengths. A term that grows
with T² (autograd filling a whole zero tensor at every step, as indexing inside the time or member
loop does) pushes the ratio up with the length; the old indexing path, kept here, fails."""

from __future__ import annotations

import pytest
import torch

from posrnn_cli.common.settings.config import RunConfig
from posrnn_cli.engine import ensemble as ens
from posrnn_cli.measure.traffic import BytesWritten, ensemble_traffic
from posrnn_cli.models import ensemble_model

#: a member may write at most this many times a solo run's bytes (measured: 0.77 for the GRU, 0.90
#: for the LSTM, at both lengths; the indexing path wrote 6.7× at L = 32 and 12.3× at L = 64)
BUDGET = 1.5
K = 5


def paper_cell(core: str, vocab: int, length: int) -> RunConfig:
    return RunConfig.from_dict({"task": {"name": "reverse", "vocab_size": vocab, "length": length, "n_test": 8},
                                "model": {"name": core, "hidden_size": 512},
                                "train": {"batch_size": 512, "seed": 111}})


@pytest.mark.parametrize("core,vocab", [("gru", 32), ("lstm", 16_384)])
def test_a_member_writes_about_what_its_solo_run_writes_at_two_lengths(core, vocab):
    short, long = (ensemble_traffic(paper_cell(core, vocab, n), K) for n in (32, 64))
    for t in (short, long):
        assert t.ratio <= BUDGET, f"L: a member writes {t.ratio:.2f}× its solo run's bytes"
    assert long.solo > 1.8 * short.solo  # the solo step itself is linear in T ...
    assert long.ratio <= 1.1 * short.ratio  # ... and so is the member's: no T² term


def indexing_recurrence(kind, x, w_ih, w_hh, b_ih, b_hh, shared=None):
    """The recurrence as first written: a time step and each gate taken by indexing."""
    if shared is not None:
        x = torch.cat([x, shared.expand(-1, x.shape[1], -1, -1)], dim=2)
    K_, B, T, D = x.shape
    H = w_hh.shape[-1]
    xp = torch.baddbmm(b_ih[:, None], x.reshape(K_, B * T, D), w_ih.transpose(1, 2)).view(K_, B, T, -1)
    h, outs = xp.new_zeros(K_, B, H), []
    for t in range(T):
        hp = torch.baddbmm(b_hh[:, None], h, w_hh.transpose(1, 2))
        gi = xp[:, :, t]
        r = torch.sigmoid(gi[..., :H] + hp[..., :H])
        z = torch.sigmoid(gi[..., H:2 * H] + hp[..., H:2 * H])
        n = torch.tanh(gi[..., 2 * H:] + r * hp[..., 2 * H:])
        h = (h - n) * z + n
        outs.append(h)
    return torch.stack(outs, dim=2)


def test_the_indexing_path_fails_the_budget(monkeypatch):
    monkeypatch.setattr(ensemble_model, "batched_recurrence", indexing_recurrence)
    monkeypatch.setattr(ens, "member_losses", lambda task, out, batch: torch.stack(
        [task.loss(out[k], ens.member_batch(batch, k)) for k in range(out.shape[0])]))
    short, long = (ensemble_traffic(paper_cell("gru", 32, n), K) for n in (32, 64))
    assert long.ratio > 3 * BUDGET
    assert long.ratio > 1.5 * short.ratio  # it grows with the length


def test_bytes_written_counts_outputs_and_in_place_writes_not_views():
    a = torch.empty(10, 10, device="meta")
    with BytesWritten() as w:
        b = a + 1  # 400 bytes
        b.add_(1)  # 400 more, in place
        b.view(100)[:5]  # views: nothing
    assert w.total == 800


@pytest.mark.parametrize("task,shares", [({"name": "reverse"}, True), ({"name": "sort"}, True),
                                         ({"name": "reverse", "rarity": 0.25}, True),
                                         ({"name": "reverse", "autoregressive": True}, False),
                                         ({"name": "reverse", "min_length": 2}, False),
                                         ({"name": "copy", "delay": 3}, False), ({"name": "delayed-add"}, False),
                                         ({"name": "predecessor"}, False)])
def test_a_task_that_shares_its_inputs_from_a_step_feeds_every_sequence_the_same_ids_there(task, shares):
    """``Task.shared_input_start``: the ensemble encodes and projects the steps from there once for the
    batch, exact only where every sequence is fed the same id at each of those steps."""
    from posrnn_cli.common.settings.config import TaskConfig
    from posrnn_cli.tasks import build_task

    t = build_task(TaskConfig(**{"vocab_size": 16, "length": 6, "n_test": 8, **task}))
    s = t.shared_input_start
    assert (s is not None) == shares
    if shares:
        batch = t.sample(64, torch.Generator().manual_seed(0), torch.device("cpu"))
        assert 0 < s < batch.inputs.shape[1]
        assert (batch.inputs[:, s:] == batch.inputs[:1, s:]).all()
        assert not (batch.inputs[:, :s] == batch.inputs[:1, :s]).all()
