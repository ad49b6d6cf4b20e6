"""Params files are read as DVC reads them (ruamel.yaml, YAML 1.2): a repeated key, which DVC
refuses, is refused; a value that YAML 1.1 reads otherwise (a seed 0123 is 83 there, 123 in
DVC) is refused in one line naming the key, so no run trains another seed than DVC records."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.config import parse_set, resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.sweep.plan import plan

from conftest import ROOT
BASE = yaml.safe_load((ROOT / "params.yaml").read_text())
FIG2 = ("  fig2:\n    cells: [{model: gru, vocab: 4}]\n    pe: [none]\n    seeds: [SEED]\n    length: 4\n"
        "    hidden: 8\n    iterations: 4\n    batch: 8\n    warmup: 1\n    lr: LR\n")


def params(tmp_path: Path, seed: str = "1", lr: str = "1e-3", extra: str = "") -> Path:
    text = yaml.safe_dump({k: BASE[k] for k in ("task", "model", "train")} | {"profile": ["t"]}, sort_keys=False)
    text += "profiles:\n t:\n  device: cpu\n" + FIG2.replace("SEED", seed).replace("LR", lr) + extra
    (tmp_path / "params.yaml").write_text(text)
    return tmp_path / "params.yaml"


def test_plain_values_plan_as_before(tmp_path):
    (job,) = plan(params(tmp_path, lr="1e-4"), "t", ["fig2"])  # 1e-4: text in YAML 1.1, a number in DVC: one value
    assert job.config["train"]["seed"] == 1 and job.config["train"]["lr"] == 1e-4


@pytest.mark.parametrize("seed, words", [("0123", "profiles.t.fig2.seeds[0] reads as 83 here but as 123 in DVC"),
                                         ("1:30", "reads as 90 here but as '1:30' in DVC"),
                                         ("0o17", "reads as '0o17' here but as 15 in DVC")])
def test_a_value_dvc_reads_otherwise_is_refused(tmp_path, seed, words):
    with pytest.raises(PosrnnError) as e:
        plan(params(tmp_path, seed=seed), "t", ["fig2"])
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_repeated_key_is_refused_as_dvc_refuses_it(tmp_path):
    path = params(tmp_path, extra="    lr: 0.5\n")
    with pytest.raises(PosrnnError, match=r"the key profiles\.t\.fig2\.lr appears twice in one mapping"):
        plan(path, "t", ["fig2"])
    params(tmp_path).write_text(params(tmp_path).read_text() + "train: {lr: 0.5}\n")
    with pytest.raises(PosrnnError, match="the key train appears twice"):
        resolve_config(path)


def test_set_values_are_read_as_dvc_would_read_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_set("train.seed=123") == ("train.seed", 123)
    assert parse_set("model.pe='yes'") == ("model.pe", "yes")
    for item in ("train.seed=0123", "task.autoregressive=yes", "train.seed=1:30"):
        with pytest.raises(PosrnnError, match="in DVC \\(YAML 1.2\\)"):
            parse_set(item)
    r = CliRunner().invoke(app,
                           ["train", "--task", "reverse", "--vocab-size", "6", "--length", "4", "--hidden-size", "8",
                                 "--iterations", "2", "--device", "cpu", "--set", "train.seed=0123", "--out", "never"])
    assert r.exit_code != 0 and "reads as 83 here but as 123 in DVC" in r.output and not Path("never").exists()
