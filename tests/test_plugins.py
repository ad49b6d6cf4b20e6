"""Model cores from outside posrnn (common.plugins, docs/plugins.md): the example package
(examples/posrnn-example-core, installed by `make setup`) trains, evaluates and is analysed by the
commands as a built-in core is; its identity records its declared version and its distribution's;
a broken plugin is one line naming it and the fix, and never stands in a built-in core's way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from posrnn_cli.cli import run
from posrnn_cli.common import numerics, plugins
from posrnn_cli.common.results import tables
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError

from conftest import tiny_train

EXAMPLE = "example_gru"  # the example package's entry point
SPEC = "posrnn_example_core:make_core"  # the same factory by its import path
DIST = "posrnn-example-core"


def posrnn(argv, capsys):
    with pytest.raises(SystemExit) as e:
        run(argv)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


class FakeEntryPoint:
    """An installed entry point as importlib.metadata gives it: a name, a value and load()."""

    def __init__(self, name: str, load):
        self.name, self.value, self.load, self.dist = name, f"broken_pkg:{name}", load, None


@pytest.fixture
def fresh():
    """The plugins read afresh before and after the test (a monkeypatched entry point forgotten)."""
    plugins.forget()
    yield
    plugins.forget()


@pytest.fixture
def with_entry_points(fresh, monkeypatch):
    """Install fake entry points beside the real ones: ``with_entry_points({name: load})``."""
    real = dict(plugins.entry_points())

    def install(loads: dict):
        fake = {**real, **{n: FakeEntryPoint(n, f) for n, f in loads.items()}}
        monkeypatch.setattr(plugins, "entry_points", lambda: fake)
    return install


def tiny_cfg(model: str):
    return resolve_config(options={"task.name": "reverse", "model.name": model, "task.vocab_size": 6,
                                   "task.length": 4, "model.hidden_size": 8, "train.iterations": 4,
                                   "train.batch_size": 8, "train.device": "cpu", "train.checkpoint_every": 2,
                                   "task.n_test": 16, "train.seed": 0})


def test_the_example_is_installed_as_an_entry_point(fresh):
    loaded = plugins.load(EXAMPLE)
    assert loaded.plugin.name == EXAMPLE and loaded.plugin.recurrent_view and loaded.distribution == DIST
    assert plugins.load(SPEC).distribution == DIST  # the import path finds the same distribution
    assert EXAMPLE in plugins.listed() and "(plugin)" in plugins.listed()[EXAMPLE]


@pytest.mark.parametrize("model", [EXAMPLE, SPEC])
def test_a_plugin_core_trains_and_evaluates_through_the_library(tmp_path, model):
    from posrnn_cli.engine.evaluate import evaluate
    from posrnn_cli.engine.train import train

    summary = train(tiny_cfg(model), tmp_path / "run", progress=False)
    assert summary["finished"] and summary["step"] == 4 and summary["n_parameters"] > 0
    result = evaluate(tmp_path / "run", device="cpu")
    assert result["model"] == model and 0 <= result["token_accuracy"] <= 1


def test_a_plugin_runs_identity_records_its_version_and_its_distributions(fresh, monkeypatch):
    cfg = tiny_cfg(EXAMPLE)
    ident = numerics.identity(cfg, ("loop",), "cpu")
    assert ident["versions"][f"core/{EXAMPLE}"] == 1
    from importlib.metadata import version
    assert ident["libraries"][DIST] == version(DIST)
    # the plugin's declared version bumped: its runs read as stale
    real = plugins.load(EXAMPLE)
    bumped = plugins.Loaded(EXAMPLE, plugins.CorePlugin(**{**real.plugin.__dict__, "version": 2}), DIST)
    monkeypatch.setattr(plugins, "load", lambda name: bumped)
    assert numerics.differences(ident, numerics.identity(cfg, ("loop",), "cpu")) == [f"versions.core/{EXAMPLE}"]
    # its distribution upgraded: stale too
    monkeypatch.setattr(numerics, "library_version", lambda p: "9.9" if p == DIST else version(p))
    assert f"libraries.{DIST}" in numerics.differences(ident, numerics.identity(cfg, ("loop",), "cpu"))


def test_train_eval_and_stability_of_the_example_on_the_command_line(tmp_path):
    """The installed console script, in a fresh process, as a user runs it."""
    exe = Path(sys.executable).parent / "posrnn"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = tmp_path / "run"

    def cli(*argv):
        return subprocess.run([str(exe), *argv], capture_output=True, text=True, env=env, timeout=300)

    r = cli("train", *tiny_train(model=EXAMPLE), "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["finished"]
    assert json.loads((out / "code.json").read_text())["versions"][f"core/{EXAMPLE}"] == 1
    r = cli("eval", str(out), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["model"] == EXAMPLE, r.stderr
    r = cli("stability", str(out), "--triplets", "4", "--device", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert (out / "stability.csv").read_text().count(EXAMPLE) > 0
    r = cli("cores")
    assert r.returncode == 0 and f"{EXAMPLE}: minimal gated RNN" in r.stdout and "gru:" in r.stdout, r.stdout


def test_a_plugin_without_a_recurrent_view_is_refused_by_stability_in_one_line(fresh, tmp_path, monkeypatch, capsys):
    from posrnn_example_core import GatedRNN

    mod = types.ModuleType("flat_core_plugin")
    mod.make = lambda: plugins.CorePlugin("flat", 1, "no recurrent view", GatedRNN)
    monkeypatch.setitem(sys.modules, "flat_core_plugin", mod)
    out = tmp_path / "run"
    code, _, err = posrnn(["train", *tiny_train(model="flat_core_plugin:make"), "--out", str(out), "--json"], capsys)
    assert code == 0, err
    code, _, err = posrnn(["stability", str(out), "--triplets", "2", "--device", "cpu"], capsys)
    assert code == 1 and "flat_core_plugin:make core has none" in err and len(err.strip().splitlines()) == 1, err


def _raise():
    raise RuntimeError("boom")


BROKEN = {
    "fails_import": (lambda: _raise(), "does not import (RuntimeError: boom); fix or reinstall"),
    "factory_raises": (lambda: _raise, "its factory raised RuntimeError: boom; fix the plugin's factory"),
    "wrong_thing": (lambda: (lambda: {"name": "wrong_thing"}), "its factory returned a dict, not a CorePlugin; "
                                                               "return posrnn_cli.common.plugins.CorePlugin("),
    "misnamed": (lambda: (lambda: plugins.CorePlugin("other", 1, "x", lambda d, h: None)),
                 "its factory names the core 'other'; name it 'misnamed'"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_entry_point_is_one_line_naming_it_and_the_fix(name, with_entry_points, tmp_path, capsys):
    with_entry_points({n: load for n, (load, _) in BROKEN.items()})
    code, _, err = posrnn(["train", *tiny_train(model=name), "--out", str(tmp_path / "run")], capsys)
    assert code == 1 and err.startswith(f"error: plugin core {name!r}") and BROKEN[name][1] in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_a_missing_module_or_factory_is_one_line(tmp_path, capsys, fresh):
    for spec, says in (("no_such_pkg_xyz:make", "module 'no_such_pkg_xyz' does not import (ModuleNotFoundError"),
                       ("posrnn_example_core:nope", "module 'posrnn_example_core' has no 'nope'; name its factory")):
        code, _, err = posrnn(["train", *tiny_train(model=spec), "--out", str(tmp_path / "run")], capsys)
        assert code == 1 and says in err and len(err.strip().splitlines()) == 1, err
    code, _, err = posrnn(["train", *tiny_train(model="nonesuch"), "--out", str(tmp_path / "run")], capsys)
    assert code == 2 and "'nonesuch' is not one of 'elman'" in err and f"'{EXAMPLE}'" in err, err
    with pytest.raises(PosrnnError, match="unknown model 'nonesuch'"):
        plugins.check_core_name("nonesuch")


def test_broken_plugins_leave_the_built_in_cores_working(with_entry_points, tmp_path, capsys):
    with_entry_points({n: load for n, (load, _) in BROKEN.items()})
    code, out, err = posrnn(["train", *tiny_train(model="gru"), "--out", str(tmp_path / "run"), "--json"], capsys)
    assert code == 0 and json.loads(out)["finished"], err
    code, out, err = posrnn(["cores"], capsys)  # the listing shows each broken one's error, and the rest
    assert code == 0 and "gru: " in out and "fails_import: error: plugin core 'fails_import'" in out, out


def test_a_profile_cell_and_a_result_table_take_a_plugin_core(fresh):
    from posrnn_cli.sweep.plan import cell_name

    assert cell_name({"model": SPEC, "vocab": 32}) == "posrnn_example_core.make_core-v32"
    row = {"task": "reverse", "model": EXAMPLE, "pe": "none", "vocab_size": 32}
    tables.check_table([row], Path("t.csv"))
    with pytest.raises(PosrnnError, match="model is 'nonesuch', not a model posrnn knows"):
        tables.check_table([{**row, "model": "nonesuch"}], Path("t.csv"))


def test_a_sweep_aggregates_and_scores_plugin_cores(tmp_path, monkeypatch, fresh):
    """Profile cells name the plugin by entry point and by module:factory; the aggregate's table
    and a claim of the scorecard read their runs (one seed: too few for a verdict, but scored)."""
    import copy

    from posrnn_cli.analysis.aggregate import aggregate
    from posrnn_cli.analysis.scorecard import load_claims, scorecard
    from posrnn_cli.sweep import SweepOptions, run_sweep

    from fabricate import scratch

    monkeypatch.chdir(tmp_path)
    grid = {"cells": [{"model": EXAMPLE, "vocab": 6}, {"model": SPEC, "vocab": 6}], "pe": ["none", "sinusoidal"],
            "seeds": [1], "length": 4, "hidden": 8, "iterations": 4, "batch": 8, "warmup": 1, "checkpoint_every": 4}
    out = run_sweep(scratch(tmp_path, fig2=grid), "t", ["fig2"], SweepOptions(workers=1))
    assert [o.status for o in out] == ["done"] * 4
    runs = sorted(p.parent.name for p in (tmp_path / "runs" / "t" / "fig2").glob("*/config.yaml"))
    assert runs == [f"{EXAMPLE}-v6-none-s1", f"{EXAMPLE}-v6-sinusoidal-s1", "posrnn_example_core.make_core-v6-none-s1",
                    "posrnn_example_core.make_core-v6-sinusoidal-s1"]
    aggregate(tmp_path / "runs" / "t", tmp_path / "tables", n_resamples=20)
    text = (tmp_path / "tables" / "fig2.csv").read_text()
    assert text.count(EXAMPLE) == 2 and text.count(SPEC) == 2, text
    claim = copy.deepcopy(next(c for c in load_claims() if c["id"] == "fig2_pe_ahead_largest_v"))
    claim.update(id="plugin_pe_ahead", models=[EXAMPLE], regime={})
    (row,) = scorecard(tmp_path / "tables", claims=[claim])
    at = row["at_regime"]
    assert at["missing"] == [] and at["models"][EXAMPLE]["verdict"] == "too few seeds", at
    assert at["measured"].startswith(f"{EXAMPLE} V=6 L=4 H=8: PE "), at


def test_a_built_in_core_never_reads_the_entry_points(fresh, monkeypatch, tmp_path, capsys):
    def unread():
        raise AssertionError("the entry points were read for a built-in core")

    monkeypatch.setattr(plugins, "entry_points", unread)
    code, out, err = posrnn(["train", *tiny_train(model="gru"), "--out", str(tmp_path / "run"), "--json"], capsys)
    assert code == 0 and json.loads(out)["finished"], err
    code, out, err = posrnn(["eval", str(tmp_path / "run"), "--json"], capsys)
    assert code == 0, err
