"""The ensemble path (``engine.ensemble``, ``models.ensemble_model``): every member equals its solo run
(float64 within 1e-9, float32 within ``FLOAT32_TOL``) for Elman, GRU and LSTM; a perturbed member
(a wrong seed, an optimizer state shared with another member, clipping over the whole ensemble)
fails the same comparison; a member's directory is a run's; an interrupted ensemble resumes, as an
ensemble bit-identically, and a member alone. The ``gpu`` versions run the same on CUDA."""

from __future__ import annotations

import shutil

import pytest
import torch

from ensembles import FLOAT32_TOL, FLOAT64_TOL, default_dtype, last_checkpoint, losses, mismatches, tiny_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine import ensemble as ens
from posrnn_cli.engine.train import train
from posrnn_cli.models.ensemble_model import batched_recurrence

SEEDS = (5, 6)
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: GPU test")


def solo_and_ensemble(tmp, core: str, dtype: torch.dtype, device: str = "cpu", seeds=SEEDS, **train_opts):
    """Train each seed solo and all as one ensemble; returns (solo dirs, member dirs)."""
    solo, members = [tmp / f"solo{s}" for s in SEEDS], [tmp / f"member{s}" for s in SEEDS]
    with default_dtype(dtype):
        for s, d in zip(SEEDS, solo):
            train(tiny_config(core, s, device=device, **train_opts), d, progress=False)
        ens.train_ensemble([tiny_config(core, s, device=device, **train_opts) for s in seeds], members)
    return solo, members


@pytest.mark.parametrize("core", ["elman", "gru", "lstm"])
def test_each_member_equals_its_solo_run_in_float64(tmp_path, core):
    solo, members = solo_and_ensemble(tmp_path, core, torch.float64)
    for m, s in zip(members, solo):
        assert mismatches(m, s, FLOAT64_TOL) == []
        assert last_checkpoint(m)["step"] == 200


@pytest.mark.parametrize("core", ["elman", "gru", "lstm"])
def test_each_member_equals_its_solo_run_in_float32_within_rounding(tmp_path, core):
    solo, members = solo_and_ensemble(tmp_path, core, torch.float32)
    for m, s in zip(members, solo):
        assert mismatches(m, s, FLOAT32_TOL) == []


def test_a_member_with_a_wrong_seed_fails_the_comparison(tmp_path):
    solo, members = solo_and_ensemble(tmp_path, "gru", torch.float64, seeds=(SEEDS[0], 99))
    assert mismatches(members[0], solo[0], FLOAT64_TOL) == []
    assert mismatches(members[1], solo[1], FLOAT32_TOL)  # fails even the looser tolerance


def test_a_shared_optimizer_state_fails_the_comparison(tmp_path, monkeypatch):
    clip = ens.EnsembleTrainer.clip_gradients

    def shared(self):  # before each Adam step, member 1's moments become member 0's: one state for both
        out = clip(self)
        for st in self.optimizer.state.values():
            for v in st.values():
                if torch.is_tensor(v) and v.dim() > 0:
                    v[1].copy_(v[0])
        return out

    monkeypatch.setattr(ens.EnsembleTrainer, "clip_gradients", shared)
    solo, members = solo_and_ensemble(tmp_path, "gru", torch.float64)
    assert mismatches(members[0], solo[0], FLOAT64_TOL) == []
    assert mismatches(members[1], solo[1], FLOAT32_TOL)


def test_clipping_over_the_whole_ensemble_fails_the_comparison(tmp_path, monkeypatch):
    def joint(self):  # clip_grad_norm_ over every member's gradients at once
        return torch.nn.utils.clip_grad_norm_(self.params, self.cfg.train.clip).expand(self.k)

    monkeypatch.setattr(ens.EnsembleTrainer, "clip_gradients", joint)
    solo, members = solo_and_ensemble(tmp_path, "gru", torch.float64)
    assert all(mismatches(m, s, FLOAT32_TOL) for m, s in zip(members, solo))


def test_the_batched_recurrence_equals_torch_modules_step_by_step():
    torch.manual_seed(0)
    K, B, T, D, H = 3, 4, 6, 5, 7
    for kind, cls in (("elman", torch.nn.RNN), ("gru", torch.nn.GRU), ("lstm", torch.nn.LSTM)):
        mods = [cls(D, H, batch_first=True).double() for _ in range(K)]
        x = torch.randn(K, B, T, D, dtype=torch.float64)
        ref = torch.stack([m(x[k])[0] for k, m in enumerate(mods)])
        w = [torch.stack([getattr(m, f"{n}_l0") for m in mods])
             for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        assert (batched_recurrence(kind, x, *w) - ref).abs().max().item() < 1e-12


def test_a_member_directory_is_a_run_and_records_its_ensemble(tmp_path):
    import json

    from posrnn_cli.common.settings.config import config_digest
    from posrnn_cli.engine.evaluate import evaluate
    from posrnn_cli.common.files.rundir import run_state

    solo, members = solo_and_ensemble(tmp_path, "gru", torch.float32)
    a, b = last_checkpoint(members[1]), last_checkpoint(solo[1])
    assert a.keys() == b.keys() and a["model"].keys() == b["model"].keys()
    assert a["identity"]["config_digest"] == b["identity"]["config_digest"] == config_digest(
        tiny_config("gru", SEEDS[1]).to_dict())
    assert (members[1] / "config.yaml").read_bytes() == (solo[1] / "config.yaml").read_bytes()
    assert run_state(members[1], tiny_config("gru", SEEDS[1])).state == "done"
    rec = json.loads((members[1] / "code.json").read_text())
    assert rec["ensemble"]["member"] == 1 and rec["ensemble"]["members"] == [str(m) for m in members]
    assert a["extra"]["ensemble"] == rec["ensemble"]
    assert 0 <= evaluate(members[1], device="cpu")["token_accuracy"] <= 1 and (members[1] / "eval.json").is_file()


def test_an_interrupted_ensemble_resumes_bit_identically_and_a_member_alone(tmp_path):
    cfgs = [tiny_config("gru", s, iterations=120, checkpoint_every=40) for s in SEEDS]
    whole, cut = [tmp_path / f"whole{s}" for s in SEEDS], [tmp_path / f"cut{s}" for s in SEEDS]
    ens.train_ensemble(cfgs, whole)
    ens.train_ensemble(cfgs, cut, stop_after=50)  # a checkpoint at 50, off the schedule
    alone = tmp_path / "alone"
    shutil.copytree(cut[0], alone)
    ens.train_ensemble(cfgs, cut)
    for w, c in zip(whole, cut):
        a, b = last_checkpoint(w), last_checkpoint(c)
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
        assert [ln.split('"elapsed_s"')[0] for ln in (w / "metrics.jsonl").read_text().splitlines()] == \
               [ln.split('"elapsed_s"')[0] for ln in (c / "metrics.jsonl").read_text().splitlines()]
    train(cfgs[0], alone, resume=True, progress=False)  # a member resumed solo
    assert mismatches(alone, whole[0], FLOAT32_TOL) == []


def test_refusals_name_the_problem(tmp_path):
    with pytest.raises(PosrnnError, match="the s4d core has no ensemble path"):
        ens.check_members([tiny_config("s4d", 1), tiny_config("s4d", 2)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(PosrnnError, match="train.seed only; these differ in train.lr"):
        ens.check_members([tiny_config("gru", 1), tiny_config("gru", 2, lr=0.01)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(PosrnnError, match="distinct run directories"):
        ens.check_members([tiny_config("gru", 1), tiny_config("gru", 2)], [tmp_path / "a", tmp_path / "a"])
    assert not (tmp_path / "a").exists()


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("core", ["elman", "gru", "lstm"])
def test_cuda_members_equal_their_solo_runs_in_float64(tmp_path, core):
    solo, members = solo_and_ensemble(tmp_path, core, torch.float64, device="cuda")
    for m, s in zip(members, solo):
        assert mismatches(m, s, FLOAT64_TOL) == []


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("core", ["elman", "gru", "lstm"])
def test_cuda_members_equal_their_solo_runs_in_float32_within_rounding(tmp_path, core):
    torch.backends.cuda.matmul.allow_tf32 = False
    solo, members = solo_and_ensemble(tmp_path, core, torch.float32, device="cuda")
    for m, s in zip(members, solo):
        assert mismatches(m, s, FLOAT32_TOL) == []


@pytest.mark.gpu
@CUDA
def test_cuda_a_member_with_a_wrong_seed_fails_the_comparison(tmp_path):
    solo, members = solo_and_ensemble(tmp_path, "gru", torch.float64, device="cuda", seeds=(SEEDS[0], 99))
    assert mismatches(members[0], solo[0], FLOAT64_TOL) == []
    assert mismatches(members[1], solo[1], FLOAT32_TOL)


@pytest.mark.parametrize("variant", [{"foreach": False}, {"foreach": True}, {"fused": True}])
def test_adam_on_stacked_parameters_is_each_members_own_adam(variant):
    """Adam (single-tensor, foreach and fused kernels, with weight decay) on stacked parameters
    gives each member exactly the update of its own Adam: no moment or step crosses members."""
    torch.manual_seed(0)
    K, shapes = 3, [(4, 5), (5,)]
    solo = [[torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes] for _ in range(K)]
    stacked = [torch.stack([m[i].detach() for m in solo]).requires_grad_() for i in range(len(shapes))]
    kw = dict(lr=1e-2, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.1, **variant)
    opts = [torch.optim.Adam(m, **kw) for m in solo]
    joint = torch.optim.Adam(stacked, **kw)
    for _ in range(20):
        scale = torch.tensor([1e-3, 1.0, 1e3], dtype=torch.float64)  # members of very different gradient sizes
        grads = [torch.randn(K, *s, dtype=torch.float64) * scale.view(K, *[1] * len(s)) for s in shapes]
        for k, (m, opt) in enumerate(zip(solo, opts)):
            for p, g in zip(m, grads):
                p.grad = g[k].clone()
            opt.step()
        for p, g in zip(stacked, grads):
            p.grad = g.clone()
        joint.step()
    for k in range(K):
        for i in range(len(shapes)):
            assert (stacked[i][k] - solo[k][i]).abs().max().item() < 1e-12


def test_fused_adam_and_weight_decay_members_equal_their_solo_runs(tmp_path):
    solo, members = solo_and_ensemble(tmp_path, "lstm", torch.float64, fused_adam=True, weight_decay=0.01)
    for m, s in zip(members, solo):
        assert mismatches(m, s, FLOAT64_TOL) == []


def test_the_cuda_graph_logic_drives_an_ensemble_exactly_as_its_eager_update(tmp_path):
    """``GraphedStep`` (NOT MEASURED ON A GPU here: a stand-in replays the recorded computation)
    over an ensemble: warm-up, the checked capture and replays give the eager ensemble's updates."""
    from posrnn_cli.engine.graphed import GraphedStep

    def stand_in(fn, device):
        out = tuple(torch.zeros(len(SEEDS), dtype=dt) for dt in (torch.float32, torch.long, torch.long, torch.float32))

        def replay():
            for o, v in zip(out, fn()):
                o.copy_(v)
        return replay, out

    cfgs = [tiny_config("gru", s) for s in SEEDS]
    eager = ens.ensemble_trainer(cfgs, [tmp_path / "a", tmp_path / "b"])
    graphed = ens.ensemble_trainer(cfgs, [tmp_path / "c", tmp_path / "d"])
    graphed.graphed = GraphedStep(graphed, capture=stand_in)
    for _ in range(GraphedStep.WARMUP + 4):
        outs = [tr.train_step(tr.next_batch()) for tr in (eager, graphed)]
        assert all(torch.equal(a, b) for a, b in zip(*outs))
    assert graphed.graphed.replay is not None
    assert all(torch.equal(p, q) for p, q in zip(eager.params, graphed.params))


def test_an_ensemble_trains_under_amp_on_the_cpu(tmp_path):
    from posrnn_cli.engine.device import cpu_supports_bf16

    if not cpu_supports_bf16():
        pytest.skip("this CPU has no bf16 autocast")
    cfgs = [tiny_config("gru", s, iterations=20, amp=True) for s in SEEDS]
    out = ens.train_ensemble(cfgs, [tmp_path / "a", tmp_path / "b"])
    assert out["finished"] and all(0 < x < 10 for d in ("a", "b") for x in losses(tmp_path / d))


def test_the_catalogued_ensemble_cores_are_the_recurrent_ones_and_others_are_refused_in_one_line():
    from posrnn_cli.common import catalog
    from posrnn_cli.models import CORES, build_model
    from posrnn_cli.models.ensemble_model import EnsembleModel
    from posrnn_cli.models.rnn import RecurrentCore
    from posrnn_cli.tasks import build_task

    m = tiny_config("gru", 1).model  # sizes only: each spec builds its own core
    assert tuple(n for n, spec in CORES.items()
                 if isinstance(spec.build(4, m), RecurrentCore)) == catalog.ENSEMBLE_CORES
    cfg = tiny_config("s4d", 1)
    solo = build_model(cfg, build_task(cfg.task))
    with pytest.raises(PosrnnError, match="^S4DCore has no ensemble path .*; train its runs solo$"):
        EnsembleModel([solo, solo])
