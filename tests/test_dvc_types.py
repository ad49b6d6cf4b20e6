"""Types as DVC reads them (ruamel.yaml, YAML 1.2): a quoted or ``!!str``-tagged value is text
there, so where a number or boolean is expected it is refused in one line, never trained as the
number; a plain value DVC reads as a number (``1e3``) is refused where text or a name is expected
(a profile's name, at ``profile use`` and by the dry run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.sweep.plan import plan

from conftest import ROOT

BASE = yaml.safe_load((ROOT / "params.yaml").read_text())


def params_with(tmp_path: Path, train_extra: str = "", task_extra: str = "", profile: str = "t") -> Path:
    text = yaml.safe_dump({k: BASE[k] for k in ("model",)} | {"profile": [profile]}, sort_keys=False)
    text += "task:\n  name: reverse\n  vocab_size: 8\n  length: 4\n" + task_extra
    text += "train:\n  iterations: 4\n  batch_size: 8\n" + train_extra
    text += (f"profiles:\n  {profile}:\n    device: cpu\n    fig2:\n      cells: [{{model: gru, vocab: 4}}]\n"
             "      pe: [none]\n      seeds: [1]\n      length: 4\n      hidden: 8\n      iterations: 4\n"
             "      batch: 8\n      warmup: 1\n")
    (tmp_path / "params.yaml").write_text(text)
    return tmp_path / "params.yaml"


@pytest.mark.parametrize("line, key", [("  seed: \"12\"\n", "train.seed"), ("  seed: '12'\n", "train.seed"),
                                       ("  seed: !!str 12\n", "train.seed"), ("  lr: \"0.001\"\n", "train.lr"),
                                       ("  lr: '1e-3'\n", "train.lr")])
def test_a_quoted_number_is_text_to_dvc_and_refused(tmp_path, line, key):
    with pytest.raises(PosrnnError) as e:
        resolve_config(params_with(tmp_path, train_extra=line))
    assert key in str(e.value) and "text to DVC" in str(e.value) and "\n" not in str(e.value)


def test_a_quoted_boolean_is_text_to_dvc_and_refused(tmp_path):
    with pytest.raises(PosrnnError, match="task.autoregressive is 'true', quoted"):
        resolve_config(params_with(tmp_path, task_extra="  autoregressive: \"true\"\n"))


def test_plain_values_read_as_numbers_and_booleans(tmp_path):
    cfg = resolve_config(params_with(tmp_path, train_extra="  seed: 12\n  lr: 1e-3\n",
                                     task_extra="  autoregressive: true\n"))
    assert cfg.train.seed == 12 and cfg.train.lr == 1e-3 and cfg.task.autoregressive is True


def test_a_plain_number_where_text_is_expected_is_refused(tmp_path):
    path = params_with(tmp_path)
    path.write_text(path.read_text().replace("pe: [none]", "pe: [1e3]"))
    with pytest.raises(PosrnnError, match="reads as 1000.0"):
        plan(path, "t", ["fig2"])


@pytest.mark.parametrize("name", ["1e3", "null", "true", "0x1F", ".inf"])
def test_a_profile_name_dvc_reads_as_a_number_is_refused_at_use_and_by_the_dry_run(tmp_path, name):
    path = params_with(tmp_path, profile=f"'{name}'")
    r = CliRunner().invoke(app, ["profile", "use", name, "--params", str(path)])
    assert r.exit_code != 0 and "in DVC" in r.output and "--params" not in r.output, r.output
    before = path.read_text()
    with pytest.raises(PosrnnError, match="in DVC"):
        plan(path, name, ["fig2"])
    assert path.read_text() == before
