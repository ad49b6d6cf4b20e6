"""Vocabulary extension: frozen weights stay bit-identical, only new parameters train."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from posrnn_cli.engine.checkpoint import load_checkpoint
from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine.evaluate import evaluate, load_run
from posrnn_cli.engine.extend import extend_vocab
from posrnn_cli.tasks import extension_tasks
from posrnn_cli.engine.train import train


def trained(tmp_path, **over):
    sets = {"task.vocab_size": 6, "task.length": 5, "task.n_test": 64, "model.name": "gru", "model.hidden_size": 16,
            "train.iterations": 30, "train.batch_size": 16, "train.warmup": 3, "train.checkpoint_every": 30,
            "train.seed": 1, "train.device": "cpu"}
    sets.update(over)
    cfg = resolve_config(options=sets)
    train(cfg, tmp_path / "base", progress=False)
    return tmp_path / "base"


def test_original_parameters_stay_bit_identical_and_only_new_ones_train(tmp_path):
    base = trained(tmp_path)
    old = load_checkpoint(base / "checkpoints" / "step_0000030.pt")["model"]
    r = extend_vocab(base, 4, tmp_path / "ext", iterations=20, device="cpu", progress=False,
                     sets=["train.checkpoint_every=20", "train.warmup=2"])
    ck = load_checkpoint(tmp_path / "ext" / "checkpoints" / "step_0000020.pt")
    new = ck["model"]
    renamed = {"encoder.embedding.weight": "encoder.embedding.old.weight", "head.weight": "head.old.weight",
               "head.bias": "head.old.bias"}
    for k, v in old.items():
        assert torch.equal(new[renamed.get(k, k)], v), k  # every trained weight, bit for bit
    # the optimiser held exactly the new parameters: embedding rows (X×E), output rows and biases
    sizes = sorted(t.numel() for st in ck["optimizer"]["state"].values() for n, t in st.items() if n == "exp_avg")
    assert sizes == sorted([4 * 16, 4 * 16, 4])
    assert len(ck["optimizer"]["param_groups"][0]["params"]) == 3
    # the trained base run is untouched, the old-id accuracy (over the old classes) unchanged
    assert r["old_ids"]["token_accuracy"] == r["old_ids_before"]["token_accuracy"]
    assert r["vocab_size"] == 6 and r["extra_vocab"] == 4
    assert json.loads((tmp_path / "ext" / "extend.json").read_text())["new_ids"]["n_test"] == 64


def test_new_id_test_set_uses_only_new_ids(tmp_path):
    base = trained(tmp_path)
    extend_vocab(base, 3, tmp_path / "ext", iterations=10, device="cpu", progress=False, sets=["train.warmup=1"])
    cfg = load_run(tmp_path / "ext").cfg
    t = extension_tasks(cfg.task, cfg.model.frozen_vocab)
    new, old = t["new_ids"].test_set(), t["old_ids"].test_set()
    L = cfg.task.length
    assert ((new.inputs[:, :L] >= 6) & (new.inputs[:, :L] < 9)).all() and (new.inputs[:, L:] == 9).all()
    assert (old.inputs[:, :L] < 6).all() and (old.inputs[:, L:] == 9).all()
    # an extended run is an ordinary run: eval rebuilds it from its checkpoint alone
    res = evaluate(tmp_path / "ext", device="cpu", write=False)
    assert res["vocab_size"] == 9


def test_extension_learns_the_new_ids(tmp_path):
    base = trained(tmp_path, **{"train.iterations": 600, "train.batch_size": 64, "task.vocab_size": 8, "task.length": 4,
                                "model.hidden_size": 32, "train.checkpoint_every": 600, "train.warmup": 20})
    r = extend_vocab(base, 8, tmp_path / "ext", iterations=1500, device="cpu", progress=False,
                     sets=["train.warmup=10", "train.checkpoint_every=1500"])
    assert r["new_ids"]["token_accuracy"] > 0.3  # chance: 1/16 over all classes, 1/8 over the new ones


def test_bad_extension_requests(tmp_path):
    base = trained(tmp_path)
    with pytest.raises(PosrnnError, match=r"--extra-vocab must lie in 1 …"):
        extend_vocab(base, 0, tmp_path / "ext", device="cpu", progress=False)
    with pytest.raises(PosrnnError, match="raise --extra-vocab"):
        extend_vocab(base, 2, tmp_path / "ext", device="cpu", progress=False)  # 2^5 < 2 × 64
    with pytest.raises(PosrnnError, match="must differ"):
        extend_vocab(base, 2, base, device="cpu", progress=False)
    with pytest.raises(PosrnnError, match="no checkpoints"):
        (tmp_path / "empty").mkdir()
        extend_vocab(tmp_path / "empty", 2, tmp_path / "ext", device="cpu", progress=False)
    assert not (tmp_path / "ext").exists()


def test_cli_extend_vocab(tmp_path):
    base = trained(tmp_path)
    runner = CliRunner()
    r = runner.invoke(app, ["extend-vocab", str(base), "--extra-vocab", "4", "--out", str(tmp_path / "ext"),
                            "--iterations", "10", "--device", "cpu", "--set", "train.warmup=1", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["extra_vocab"] == 4
    r = runner.invoke(app, ["extend-vocab", str(base), "--extra-vocab", "0", "--out", str(tmp_path / "ext2")])
    assert r.exit_code == 1 and "--extra-vocab must lie in 1" in r.output
