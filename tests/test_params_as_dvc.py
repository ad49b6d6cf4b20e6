"""Params files and ``--set`` values are read as DVC reads them (its own loader,
``dvc.utils.serialize.parse_yaml``: ruamel.yaml's safe loader, YAML 1.2): a seed ``0123`` is 123,
``yes`` and ``on`` are text, ``1e-3`` a number, a date a date, here as in DVC, so no run trains
another value than DVC records; a repeated key, which DVC refuses, is refused in one line."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import load_yaml, parse_set, resolve_config
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
    (job,) = plan(params(tmp_path, lr="1e-4"), "t", ["fig2"])  # 1e-4: a number to DVC
    assert job.config["train"]["seed"] == 1 and job.config["train"]["lr"] == 1e-4


#: values YAML 1.1 (PyYAML) and YAML 1.2 (DVC) read otherwise, and a few they read alike
QUIRKS = ["0123", "0o17", "0x1F", "1_000", "1:30", "yes", "no", "on", "off", "y", "1e-3", "1e3", "1.5e+2", ".inf",
          "-.inf", "nan", "~", "null", "2026-11-29", "2026-11-29 10:30:00", "!!int '0123'", "!!float '1'",
          "!!str 12", "'12'", "True", "TRUE", "+2", "010", "0b11", "[1, 02]", "{a: 0o7}"]


def dvc_reads(text: str):
    from dvc.utils.serialize import parse_yaml

    with warnings.catch_warnings():  # ruamel.yaml warns of a YAML 1.1 float without a dot
        warnings.simplefilter("ignore")
        return parse_yaml(text, "params.yaml")


def test_a_params_file_reads_as_dvc_reads_it(tmp_path):
    text = "quirks:\n" + "".join(f"  k{i}: {q}\n" for i, q in enumerate(QUIRKS)) + "merged:\n  <<: {a: 1}\n  b: 2\n"
    path = tmp_path / "params.yaml"
    path.write_text(text)
    mine, dvc = load_yaml(path), dvc_reads(text)
    assert mine == dvc and [type(v) for v in mine["quirks"].values()] == [type(v) for v in dvc["quirks"].values()]
    assert mine["quirks"]["k0"] == 123 and mine["quirks"]["k5"] == "yes" and mine["quirks"]["k10"] == 1e-3
    path.write_text("%YAML 1.1\n---\n" + text)  # a directive makes both read YAML 1.1
    assert load_yaml(path) == dvc_reads(path.read_text()) and load_yaml(path)["quirks"]["k0"] == 83


@pytest.mark.parametrize("raw", QUIRKS)
def test_a_set_value_reads_as_dvc_reads_it_in_params(raw):
    key, value = parse_set(f"train.seed={raw}")
    assert key == "train.seed" and value == dvc_reads(f"v: {raw}\n")["v"]


@pytest.mark.parametrize("seed, want", [("0123", 123), ("0o17", 15), ("0x1F", 31), ("1_000", 1000)])
def test_a_seed_trains_as_dvc_records_it(tmp_path, seed, want):
    path = params(tmp_path, seed=seed)
    (job,) = plan(path, "t", ["fig2"])
    assert job.config["train"]["seed"] == want == dvc_reads(path.read_text())["profiles"]["t"]["fig2"]["seeds"][0]


@pytest.mark.parametrize("seed, lr, words", [("1:30", "1e-3", "seeds must be integers, got ['1:30']"),
                                             ("yes", "1e-3", "seeds must be integers, got ['yes']"),
                                             ("1", '"1e-3"', "train.lr is '1e-3', quoted or tagged !!str: text to DVC"),
                                             ("1", "yes", "train.lr must be of type float, got 'yes'")])
def test_a_value_dvc_reads_as_text_is_refused_in_one_line(tmp_path, seed, lr, words):
    with pytest.raises(PosrnnError) as e:
        plan(params(tmp_path, seed=seed, lr=lr), "t", ["fig2"])
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
    assert parse_set("train.seed=0123") == ("train.seed", 123)
    assert parse_set("model.pe='yes'") == ("model.pe", "yes")
    assert parse_set("task.autoregressive=yes") == ("task.autoregressive", "yes")  # text in YAML 1.2
    with pytest.raises(PosrnnError, match="task.autoregressive must be of type bool, got 'yes'"):
        resolve_config(sets=["task.autoregressive=yes"])
    r = CliRunner().invoke(app,
                           ["train", "--task", "reverse", "--vocab-size", "6", "--length", "4", "--hidden-size", "8",
                            "--iterations", "2", "--device", "cpu", "--set", "train.seed=1:30", "--out", "never"])
    assert r.exit_code != 0 and "train.seed must be of type int, got '1:30'" in r.output and not Path("never").exists()
