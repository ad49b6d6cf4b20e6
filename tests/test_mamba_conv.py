"""Mamba without its convolution (``model.conv: false``, ``--no-conv``): the block's x branch
reads its input directly, so no step mixes neighbouring inputs before the selective scan; the
recurrent view still equals the parallel forward; the setting is refused on other cores; and
the result tables show a ``conv`` column only where some cell sets it."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from posrnn_cli.analysis.aggregate import cell_columns, drop_unset
from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import RunConfig, resolve_config

pytest.importorskip("mambapy", reason="the mamba core needs mambapy (make setup installs it)")
from posrnn_cli.models.mamba import MambaCore

runner = CliRunner()


def _forgetful(conv: bool) -> MambaCore:
    """A float64 block whose SSM forgets at once (exp(ΔA) ≈ 0, no skip term): what reaches step
    t from earlier inputs can only come through the convolution."""
    torch.manual_seed(0)
    core = MambaCore(6, 5, 3, conv=conv).double()
    with torch.no_grad():
        core.block.A_log.fill_(12.0)  # A = −e^12: the state decays to nothing within one step
        core.block.dt_proj.bias.fill_(5.0)  # Δ ≈ 5
    return core


def test_without_the_convolution_no_step_reads_the_previous_input():
    x = torch.randn(2, 6, 6, dtype=torch.float64)
    x2 = x.clone()
    x2[:, 2] += 1.0  # change one input
    for conv, reads_it in ((True, True), (False, False)):
        core = _forgetful(conv)
        moved = (core(x2) - core(x)).abs().amax(dim=(0, 2))  # (T,) the change at each step
        assert moved[2] > 1e-3 and moved[:2].max() == 0  # causal either way
        assert (moved[3] > 1e-6) == reads_it, (conv, moved)  # only the convolution carries x_3 to step 4


def test_without_the_convolution_the_state_is_the_ssm_alone_and_the_recurrent_view_holds():
    torch.manual_seed(1)
    core = MambaCore(6, 5, 3, conv=False).double()
    assert not any("conv1d" in n for n, _ in core.named_parameters())
    assert core.state_dim == core.d_inner * core.N
    x = torch.randn(3, 7, 6, dtype=torch.float64)
    y = core(x)
    for P in (1, 3):
        z = core.state_after(x[:, :P])
        assert z.shape == (3, core.state_dim)
        torch.testing.assert_close(core.output_from_state(core.state_after(x[:, :1]), x[:, 1:]), y[:, -1])


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_no_conv_trains_mamba_and_is_refused_on_other_cores(tmp_path):
    tiny = ["--vocab-size", 8, "--length", 4, "--hidden-size", 8, "--iterations", 4, "--batch-size", 8, "--warmup", 1,
            "--device", "cpu", "--set", "task.n_test=16", "--set", "model.state_size=4", "--json"]
    r = _cli("train", "--model", "mamba", "--no-conv", *tiny, "--out", tmp_path / "m")
    assert r.exit_code == 0, r.output
    assert "conv: false" in (tmp_path / "m" / "config.yaml").read_text()
    r = _cli("train", "--model", "gru", "--no-conv", *tiny, "--out", tmp_path / "g")
    lines = r.output.strip().splitlines()
    assert r.exit_code == 1 and len(lines) == 1 and "mamba" in lines[0] and "Traceback" not in r.output
    assert not (tmp_path / "g").exists()


def test_a_table_shows_conv_only_where_a_cell_sets_it():
    on = RunConfig()
    off = resolve_config(options={"model.name": "mamba", "model.conv": False})
    assert "conv" not in drop_unset([cell_columns(on), cell_columns(on)])[0]
    rows = drop_unset([cell_columns(on), cell_columns(off)])
    assert [r["conv"] for r in rows] == [True, False]
    assert json.dumps(rows)  # plain values


def test_a_conv_column_reads_back_as_booleans(tmp_path):
    from posrnn_cli.common.files.io import csv_text, read_csv

    on, off = RunConfig(), resolve_config(options={"model.name": "mamba", "model.conv": False})
    path = tmp_path / "t.csv"
    path.write_text(csv_text(drop_unset([cell_columns(on), cell_columns(off)])))
    assert [r["conv"] for r in read_csv(path)] == [True, False]  # what a claim's {conv: false} matches


def test_a_config_written_before_model_conv_keeps_its_digest_and_no_conv_changes_it():
    """Runs recorded before the key existed stay proven by their eval.json; only a set value counts."""
    from posrnn_cli.common.settings.config import config_digest

    now = RunConfig().to_dict()
    before = {s: {k: v for k, v in sec.items() if f"{s}.{k}" != "model.conv"} for s, sec in now.items()}
    assert config_digest(RunConfig.from_dict(before).to_dict()) == config_digest(before)
    now["model"]["conv"] = False
    assert config_digest(now) != config_digest(before)
