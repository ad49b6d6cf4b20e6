"""``model.block`` (``--block mixer|full``): the cores with a full block train in it on a CPU, a run
records it (its digest changes only when it is set), ``mixer`` builds the core as before, and a
bad value or a core without a full block is refused in one line with nothing written."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import RunConfig, resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.settings.config import config_digest
from posrnn_cli.engine.train import Trainer, build_run
from posrnn_cli.models import CORES, check_model_config, count_parameters
from posrnn_cli.models.gdn_layer import GatedDeltaNetBlock, GatedDeltaNetLayer
from posrnn_cli.models.hawk import HawkBlock, HawkCore
from posrnn_cli.tasks import HeldOut

FULL = {"hawk": (HawkBlock, HawkCore), "gated_deltanet_layer": (GatedDeltaNetBlock, GatedDeltaNetLayer)}
TINY = {"task.name": "reverse", "task.vocab_size": 6, "task.length": 4, "task.n_test": 8, "model.hidden_size": 16,
        "model.heads": 2, "train.batch_size": 16, "train.warmup": 1, "train.lr": 3e-3, "train.seed": 5,
        "train.device": "cpu", "train.threads": 1}


def test_the_cores_with_a_full_block_are_hawk_and_gated_deltanet_layer():
    assert sorted(n for n, c in CORES.items() if c.full is not None) == sorted(FULL)


@pytest.mark.parametrize("name", sorted(FULL))
def test_mixer_builds_the_core_and_full_its_residual_block(name):
    full, mixer = FULL[name]
    for block, cls in (("mixer", mixer), ("full", full)):
        cfg = resolve_config(options={**TINY, "model.name": name, "model.block": block, "train.iterations": 2})
        _, model = build_run(cfg)
        assert type(model.core) is cls
    default = resolve_config(options={**TINY, "model.name": name, "train.iterations": 2})
    assert default.model.block == "mixer" and type(build_run(default)[1].core) is mixer


@pytest.mark.parametrize("name", sorted(FULL))
def test_a_full_block_trains_a_few_cpu_steps(name):
    torch.manual_seed(0)
    cfg = resolve_config(options={**TINY, "model.name": name, "model.block": "full", "train.iterations": 40})
    task, model = build_run(cfg)
    held = HeldOut(task.test_set(torch.device("cpu")))
    trainer = Trainer(cfg, None, model, task, lambda n, g, d: held.sample(task, n, g, d), torch.device("cpu"))
    losses = [float(trainer.train_step(trainer.next_batch())[0]) for _ in range(40)]
    assert all(map(torch.isfinite, map(torch.tensor, losses)))
    assert sum(losses[-5:]) < sum(losses[:5]), losses  # the loss comes down
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.core.parameters())  # every part learns


@pytest.mark.parametrize("name", sorted(FULL))
def test_posrnn_train_runs_a_full_block_and_records_it(tmp_path, name):
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["train", "--model", name, "--block", "full", "--vocab-size", "16", "--length", "4",
                                 "--hidden-size", "16", "--heads", "2", "--iterations", "3", "--batch-size", "8",
                                 "--warmup", "1", "--device", "cpu", "--threads", "1", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    assert summary["finished"] and summary["step"] == 3
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["model"]["block"] == "full"
    cfg = RunConfig.from_dict(saved)
    assert summary["n_parameters"] == count_parameters(build_run(cfg)[1])
    mixer = RunConfig.from_dict({**saved, "model": {**saved["model"], "block": "mixer"}})
    assert summary["n_parameters"] > count_parameters(build_run(mixer)[1])  # the norms and the MLP


def test_a_config_without_model_block_keeps_its_digest_and_full_changes_it():
    """Runs recorded before the key existed stay proven; a full block is another computation."""
    now = RunConfig().to_dict()
    before = {s: {k: v for k, v in sec.items() if f"{s}.{k}" != "model.block"} for s, sec in now.items()}
    assert config_digest(now) == config_digest(before)
    now["model"]["block"] = "full"
    assert config_digest(now) != config_digest(before)


@pytest.mark.parametrize("args, words", [
    (["--model", "hawk", "--block", "residual"], ["unknown --block 'residual'", "mixer, full"]),
    (["--model", "gru", "--block", "full"], ["not gru", "hawk", "gated_deltanet_layer"]),
])
def test_a_bad_block_is_refused_in_one_line_and_nothing_is_written(tmp_path, args, words):
    out = tmp_path / "r"
    r = CliRunner().invoke(app, ["train", *args, "--vocab-size", "8", "--length", "4", "--iterations", "2",
                                 "--device", "cpu", "--out", str(out)])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 1 and len(lines) == 1 and all(w in lines[0] for w in words), r.output
    assert not out.exists()


def test_check_model_config_refuses_a_block_before_anything_is_built():
    m = RunConfig().model
    m.name, m.block = "lstm", "full"
    with pytest.raises(PosrnnError, match="applies to the cores with a full block"):
        check_model_config(m)
    m.name, m.block = "hawk", "Full"
    with pytest.raises(PosrnnError, match="choose one of: mixer, full"):
        check_model_config(m)
