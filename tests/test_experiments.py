"""The experiment registry (``common.stages.experiments``): every experiment, job kind and table form
declared once, read by planning, the jobs, sweep status and progress, aggregation, the figures
and the scorecard's table list."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from posrnn_cli.common.stages import experiments as reg
from posrnn_cli.common.stages.experiments import EXPERIMENTS, JOB_KINDS, TABLE_FORMS, Experiment, resolve
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.stages.pipeline_yaml import check_dvc_yaml, dvc_yaml
from posrnn_cli.common.stages.sources import closure

from conftest import ROOT


def test_every_reference_resolves_and_every_link_exists():
    for kind in JOB_KINDS.values():
        assert callable(resolve(kind.plan)) and callable(resolve(kind.run)), kind.name
    for form in TABLE_FORMS.values():
        assert callable(resolve(form.build)) and callable(resolve(form.headline)), form.name
    for e in EXPERIMENTS.values():
        assert e.kind in JOB_KINDS and (e.table is None or e.table in TABLE_FORMS), e.name
        assert e.source is None or e.source in EXPERIMENTS, e.name
        assert e.figure is None or callable(resolve(e.figure.draw)), e.name


def test_the_registry_imports_no_code_it_names():
    assert closure("posrnn_cli.common.stages.experiments") <= {"posrnn_cli", "posrnn_cli.common",
                                                               "posrnn_cli.common.stages",
                                                               "posrnn_cli.common.stages.experiments",
                                                               "posrnn_cli.common.errors"}
    code = ("import sys, posrnn_cli.common.stages.experiments; "
            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == "[]", r.stderr


def test_each_experiment_runs_in_a_dvc_stage_that_reads_its_numerics_versions():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for e in EXPERIMENTS.values():
        assert e.stage in stages, e.name
        (versions,) = [p["numerics.json"] for p in stages[e.stage]["do"]["params"] if isinstance(p, dict)]
        assert {"core", "task", "pe", *e.job_kind.numerics} <= set(versions), e.name
        assert e.name in stages[e.stage]["do"]["cmd"] or e.stage == "lm", f"stage {e.stage} does not run {e.name}"


def test_dvc_yaml_is_what_the_registry_gives():
    """dvc.yaml is written by `posrnn dvc-yaml` from the registry; an edit by hand, or a registry
    entry without the file written again, fails here."""
    assert check_dvc_yaml(ROOT / "dvc.yaml") is None
    assert (ROOT / "dvc.yaml").read_text() == dvc_yaml()


def test_dvc_yaml_names_every_experiment_of_the_registry_where_it_must_and_nothing_else():
    """The places an experiment appears in dvc.yaml (its stage's command and outs, and the
    aggregate's deps) hold exactly the registry's experiments."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    by_stage = {}
    for e in EXPERIMENTS.values():
        by_stage.setdefault(e.stage, set()).add(e.name)
    for stage, names in by_stage.items():
        do = stages[stage]["do"]
        cmd = do["cmd"].split("--profile")[0].split()
        assert set(cmd[2:]) == names, f"{stage}: its command runs {cmd[2:]}, the registry has {sorted(names)}"
        outs = _runs(do["outs"])
        assert outs == names, f"{stage}: outs {sorted(outs)}, the registry has {sorted(names)}"
    tabled = {n for n, e in EXPERIMENTS.items() if e.table}
    assert _runs(stages["aggregate"]["do"]["deps"]) == tabled


def _runs(entries: list) -> set[str]:
    names = [e if isinstance(e, str) else next(iter(e)) for e in entries]
    return {m.group(1) for n in names if (m := re.fullmatch(r"runs/\$\{item\}/(\w+)", n))}


def test_every_profile_holds_every_parameter_its_stages_read():
    """DVC refuses a stage whose listed parameter key the params file lacks (as a profile without
    a section once stopped the scorecard stage): every key dvc.yaml lists exists for every profile."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for profile in params["profiles"]:
        for name, stage in stages.items():
            for key in stage["do"].get("params", []):
                if isinstance(key, dict):  # keys of another file (numerics.json: tests/test_house.py)
                    continue
                node = params
                for part in key.replace("${item}", profile).split("."):
                    assert isinstance(node, dict) and part in node, f"{name}@{profile}: params.yaml lacks {key}"
                    node = node[part]


def test_a_toy_experiment_is_its_registry_entry_its_params_and_its_test(tmp_path, monkeypatch):
    """Registering an experiment changes dvc.yaml only where the registry says (its stage's
    command and outs, the aggregate's deps), written by the command; a profile that runs it holds
    its section and no other profile needs one."""
    from typer.testing import CliRunner

    from posrnn_cli.cli import app

    before = yaml.safe_load(dvc_yaml())["stages"]
    monkeypatch.setitem(EXPERIMENTS, "toy", Experiment("toy", "train", "eval", "train", "a toy grid"))
    monkeypatch.setitem(EXPERIMENTS, "toy_probe", Experiment("toy_probe", "stability", "stability", "stability",
                                                             "a toy analysis", "toy"))
    after = yaml.safe_load(dvc_yaml())["stages"]
    assert after["train"]["do"]["cmd"].split("--profile")[0].split()[-1] == "toy"
    assert "runs/${item}/toy: {persist: true, cache: false}" in dvc_yaml()
    assert "runs/${item}/toy_probe: {persist: true}" in dvc_yaml()
    assert after["stability"]["do"]["deps"][:2] == ["runs/${item}/dual", "runs/${item}/toy"]
    assert _runs(after["aggregate"]["do"]["deps"]) - _runs(before["aggregate"]["do"]["deps"]) == {"toy", "toy_probe"}
    for name in before:
        assert after[name]["do"].get("params") == before[name]["do"].get("params"), name
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["dvc-yaml", "--check"])
    assert r.exit_code == 1 and "dvc.yaml does not exist" in r.output
    r = CliRunner().invoke(app, ["dvc-yaml"])
    assert r.exit_code == 0 and (tmp_path / "dvc.yaml").read_text() == dvc_yaml()
    assert CliRunner().invoke(app, ["dvc-yaml", "--check"]).exit_code == 0
    (tmp_path / "dvc.yaml").write_text(dvc_yaml().replace(" toy ", " "))
    r = CliRunner().invoke(app, ["dvc-yaml", "--check"])
    assert r.exit_code == 1 and "differs from what the experiment registry gives, first at line" in r.output
    assert "Traceback" not in r.output


def test_a_stage_the_registry_lacks_is_refused():
    with pytest.raises(PosrnnError, match="STAGES lacks"):
        dvc_yaml({"x": Experiment("x", "train", "eval", "nowhere", "a stray experiment")})


def test_each_figure_reads_the_columns_the_registry_names():
    from posrnn_cli.analysis import plots

    assert plots.COLUMNS == {n: e.figure.columns for n, e in EXPERIMENTS.items() if e.figure and e.figure.columns}
    assert set(plots.COLUMNS["fig2"]) >= {"vocab_size", "token_accuracy", "damerau_levenshtein"}



def test_the_scorecard_lists_read_the_registry():
    assert "fig2" in reg.eval_tables() and "dual" not in reg.eval_tables()
    assert set(reg.result_tables()) == {n for n, e in EXPERIMENTS.items() if e.table}
    assert "condition" in reg.required_columns("dual") and reg.required_columns("lm_data") == ()


def test_a_new_experiment_is_one_registry_entry(tmp_path, monkeypatch):
    """Registering one entry is all it takes: the profile plans it, the sweep trains and records
    it, aggregation makes its table and headline."""
    from posrnn_cli.analysis.aggregate import aggregate
    from posrnn_cli.common.files.io import read_json
    from posrnn_cli.sweep import SweepOptions, run_sweep
    from posrnn_cli.sweep.plan import plan

    monkeypatch.setitem(EXPERIMENTS, "fig2b", Experiment("fig2b", "train", "eval", "train", "a second vocabulary grid"))
    monkeypatch.chdir(tmp_path)
    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    section = {"cells": [{"model": "gru", "vocab": 4}], "pe": ["none"], "seeds": [1], "length": 4, "hidden": 8,
               "iterations": 10, "batch": 4, "warmup": 1, "checkpoint_every": 10}
    profile = {"device": "cpu", "threads": 1, "n_test": 16, "fig2b": section}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({k: base[k] for k in ("task", "model", "train")}
                                     | {"profile": ["t"], "profiles": {"t": profile}}))
    (job,) = plan(params, "t", ["fig2b"])
    assert job.kind == "train" and job.run_dir.endswith("fig2b/gru-v4-none-s1")
    run_sweep(params, "t", ["fig2b"], SweepOptions(workers=1))
    manifest = read_json(tmp_path / "runs" / "t" / "fig2b" / "sweep.json")
    assert (manifest["experiment"], manifest["kind"], manifest["table"]) == ("fig2b", "train", "eval")
    tables = aggregate(tmp_path / "runs" / "t", tmp_path / "results" / "tables", n_resamples=50)
    assert set(tables["fig2b"][0]) >= set(reg.required_columns("fig2b"))
    # numbers only: a text field makes `dvc exp show` a column per experiment
    from posrnn_cli.analysis.aggregate import MEASURES

    from posrnn_cli.analysis.aggregate import POOLED

    # keys unique across files, named by what they pool
    (metrics,) = read_json(tmp_path / "results" / "metrics" / "fig2b.json")["fig2b"].values()
    assert list(read_json(tmp_path / "results" / "metrics" / "fig2b.json")["fig2b"]) == ["acc"]
    assert metrics and all(type(v) in (int, float) for v in metrics.values()), metrics
    assert set(MEASURES) == set(reg.TABLE_FORMS) == set(POOLED)  # what every form's numbers are is said once


def test_an_unknown_experiment_directory_is_refused(tmp_path):
    from posrnn_cli.analysis.aggregate import aggregate
    from posrnn_cli.common.errors import PosrnnError

    (tmp_path / "fig9" / "r").mkdir(parents=True)
    (tmp_path / "fig9" / "r" / "config.yaml").write_text("{}\n")
    with pytest.raises(PosrnnError, match="not an experiment posrnn knows"):
        aggregate(tmp_path, tmp_path / "t")


def test_the_papers_other_experiments_run_end_to_end_at_micro_size(tmp_path, monkeypatch):
    """Delayed addition, the predecessor query, the pattern count, the vanilla control and the
    S4D-style stability analysis, with the micro profile's own sections: sweep, table (every
    required column, per-seed values), headline numbers and figure."""
    from posrnn_cli.analysis.aggregate import aggregate
    from posrnn_cli.analysis.plots import draw_all
    from posrnn_cli.common.stages.experiments import required_columns
    from posrnn_cli.common.files.io import read_json
    from posrnn_cli.sweep import SweepOptions, run_sweep

    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    micro = base["profiles"]["micro"]
    trained = ["fig2", "dual", "delayed", "predecessor", "patterns", "budget"]
    profile = {**{k: micro[k] for k in ("device", "threads", "n_test", "executor")},
               **{n: micro[n] for n in (*trained, "stability_mid")}}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**{k: base[k] for k in ("task", "model", "train")}, "profile": ["t"],
                                      "profiles": {"t": profile}}, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    run_sweep(params, "t", trained, SweepOptions(workers=2))
    run_sweep(params, "t", ["stability_mid"], SweepOptions(workers=2))
    tables = aggregate(tmp_path / "runs" / "t", tmp_path / "results" / "tables", n_resamples=20)
    new = ("delayed", "predecessor", "patterns", "budget", "stability_mid")
    for name in new:
        rows = tables[name]
        assert rows and all(set(required_columns(name)) <= set(r) for r in rows), name
        (metrics,) = read_json(tmp_path / "results" / "metrics" / f"{name}.json")[name].values()
        assert metrics and all(type(v) in (int, float) for v in metrics.values()), name
    assert {r["task"] for r in tables["delayed"]} == {"delayed-add"}
    assert {r["task"] for r in tables["predecessor"]} == {"predecessor"}
    assert {(r["vocab_size"], r["length"]) for r in tables["patterns"]} == {
        (c["vocab"], c["length"]) for c in micro["patterns"]["cells"]}
    fig2_budget = {(r["iterations"], r["batch_size"]) for r in tables["fig2"]}
    assert {(r["iterations"], r["batch_size"]) for r in tables["budget"]}.isdisjoint(fig2_budget)
    assert {r["target_position"] for r in tables["stability_mid"]} == {micro["stability_mid"]["target_position"]}
    drawn = {p.name for p in draw_all(tmp_path / "results" / "tables", tmp_path / "figs")}
    assert {"delayed_add.png", "predecessor.png", "pattern_count.png", "stability_mid.png"} <= drawn


def test_mamba_conv_and_mqar_run_end_to_end_at_micro_size_and_their_hypotheses_are_scored(tmp_path, monkeypatch):
    """The micro profile's mamba_conv and mqar sections: sweep, table (the conv and pairs columns
    shown), headline numbers, figures, and every hypothesis that reads them scored on the tables
    (a verdict, not "not measured")."""
    pytest.importorskip("mambapy", reason="the mamba core needs mambapy (make setup installs it)")
    from posrnn_cli.analysis.aggregate import aggregate
    from posrnn_cli.analysis.plots import draw_all
    from posrnn_cli.analysis.scorecard import scorecard
    from posrnn_cli.common.files.io import read_json
    from posrnn_cli.sweep import SweepOptions, run_sweep

    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    micro = base["profiles"]["micro"]
    new = ["mamba_conv", "mqar"]
    profile = {**{k: micro[k] for k in ("device", "threads", "n_test", "executor")}, **{n: micro[n] for n in new}}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**{k: base[k] for k in ("task", "model", "train")}, "profile": ["t"],
                                      "profiles": {"t": profile}}, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    run_sweep(params, "t", new, SweepOptions(workers=2))
    tables = aggregate(tmp_path / "runs" / "t", tmp_path / "results" / "tables", n_resamples=20)
    assert {(r["conv"], r["pe"]) for r in tables["mamba_conv"]} == {(c, p) for c in (True, False)
                                                                    for p in ("none", "sinusoidal")}
    assert {(r["task"], r["pairs"], r["vocab_size"]) for r in tables["mqar"]} == {("mqar", 2, 10), ("mqar", 2, 16)}
    for name in new:
        assert read_json(tmp_path / "results" / "metrics" / f"{name}.json")[name]
    drawn = {p.name for p in draw_all(tmp_path / "results" / "tables", tmp_path / "figs")}
    assert {"mamba_conv.png", "mqar_vocab.png"} <= drawn
    scored = [r for r in scorecard(tmp_path / "results" / "tables") if set(r["tables"]) & set(new)]
    # the map's hypotheses read L ≥ 12 cells only: micro's L = 4 cells are not theirs
    assert all(r["at_regime"]["verdict"] == "not measured" for r in scored if r["id"].startswith("map_"))
    rows = {r["id"]: r for r in scored if not r["id"].startswith("map_")}
    assert set(rows) == {"beyond_mamba_conv_orders", "beyond_pe_stands_in_for_mamba_conv",
                         "beyond_mqar_vanilla_degrades",
                         "beyond_pe_helps_mqar"}
    for cid, r in rows.items():
        assert r["at_regime"]["verdict"] != "not measured", (cid, r["at_regime"])


def test_a_sweep_runs_the_named_experiments_then_its_stages_or_else_every_one():
    assert reg.experiments_to_run(None, None) == list(EXPERIMENTS)
    assert reg.experiments_to_run(["dual"], None) == ["dual"]
    stage = reg.experiments_of_stage("extend")
    assert stage and reg.experiments_to_run(["fig2"], "extend") == ["fig2", *stage]
    with pytest.raises(PosrnnError, match="unknown stage 'plots'; choose one of: .*train"):
        reg.experiments_to_run(None, "plots")
