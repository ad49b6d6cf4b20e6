"""The DVC pipeline: aggregation with per-seed values and seed-resampling CIs from files only, the profiles in
params.yaml, and the micro profile end to end in a scratch git repository — `dvc repro`, a
second `dvc repro` that does nothing, a readable `dvc dag` and `dvc metrics show`, an
experiment with `dvc exp run -S`, and a switch to another profile and back."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fabricate import scored_run

from posrnn_cli.analysis.aggregate import aggregate, table_eval
from posrnn_cli.analysis.plots import draw_all
from posrnn_cli.common.settings.config import RunConfig
from posrnn_cli.common.files.io import read_csv
from posrnn_cli.common.settings.profiles import active_profiles, load_profile
from posrnn_cli.analysis.scorecard import VERDICTS
from posrnn_cli.common.results.stats import bootstrap_ci, hierarchical

from conftest import ROOT
# the stages call `posrnn`: this interpreter's bin/ first on PATH, so a bare `pytest` works too
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1",
       "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
DVC = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))


def params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def test_lite_is_the_active_profile_and_paper_is_spec():
    assert active_profiles(ROOT / "params.yaml") == ["lite"]
    paper = params()["profiles"]["paper"]
    for sweep in ("fig2", "dual"):
        s = paper[sweep]
        assert (s["length"], s["hidden"], s["iterations"], s["batch"], s["warmup"]) == (64, 512, 300_000, 512, 1000)
        assert s["seeds"] == [111, 222, 333, 444, 555]
    assert paper["dual"]["rarity"] == 0.125 and paper["dual"]["checkpoint_every"] == 5000
    assert paper["stability"]["triplets"] == 1024 and paper["lm_data"]["vocab_size"] == 32768
    gru = sorted(c["vocab"] for c in paper["fig2"]["cells"] if c["model"] == "gru")
    assert gru[0] == 32 and gru[-1] == 256


def test_every_profile_plans_every_experiment():
    """Each profile's grids resolve to valid configs (a typo fails here, not hours into a run)."""
    from posrnn_cli.common.stages.experiments import EXPERIMENTS
    from posrnn_cli.sweep.plan import plan
    from posrnn_cli.tasks import build_task

    for name in params()["profiles"]:
        jobs = plan(ROOT / "params.yaml", name, list(EXPERIMENTS))
        assert jobs and len({j.run_dir for j in jobs}) == len(jobs), name
        for j in jobs:
            if j.config and j.kind != "lm":
                build_task(j.run_config().task)


def fake_run(root: Path, seed: int, pe: str, token: np.ndarray) -> Path:
    cfg = RunConfig()
    cfg.task.vocab_size, cfg.task.length, cfg.model.pe, cfg.train.seed = 16, 8, pe, seed
    return scored_run(root / f"lstm-v16-{pe}-s{seed}", cfg, {"token_accuracy": token,
                      "sequence_accuracy": (token == 1).astype(float), "damerau_levenshtein": 1 - token})


def test_aggregate_keeps_each_seed_and_resamples_seeds(tmp_path):
    rng = np.random.default_rng(0)
    a, b, c = rng.random(50), rng.random(70) * 0.5, rng.random(60)
    runs = [fake_run(tmp_path / "fig2", 2, "none", b), fake_run(tmp_path / "fig2", 1, "none", a),
            fake_run(tmp_path / "fig2", 1, "sinusoidal", c)]
    rows = {r["pe"]: r for r in table_eval(runs, n_resamples=2000)}
    none = rows["none"]
    assert none["n_seeds"] == 2 and none["n_sequences"] == 120 and none["seeds"] == "1 2"  # ascending
    by_seed = [float(x) for x in none["token_accuracy_by_seed"].split()]
    assert by_seed == pytest.approx([a.mean(), b.mean()], abs=1e-5)
    assert none["token_accuracy"] == pytest.approx((a.mean() + b.mean()) / 2)  # every seed weighs the same
    h = hierarchical([a, b], n_resamples=2000)
    assert (none["token_accuracy_ci_low"], none["token_accuracy_ci_high"]) == pytest.approx((h["ci_low"], h["ci_high"]))
    lo, hi = bootstrap_ci(np.concatenate([a, b]), n_resamples=2000)
    assert none["token_accuracy_ci_high"] - none["token_accuracy_ci_low"] > hi - lo  # the seeds' spread is in it
    assert rows["sinusoidal"]["n_seeds"] == 1 and rows["sinusoidal"]["token_accuracy"] == pytest.approx(c.mean())
    pooled = np.array([a.mean(), b.mean()])

    tables = aggregate(tmp_path, tmp_path / "results" / "tables", n_resamples=500)
    assert set(tables) == {"fig2"}
    back = read_csv(tmp_path / "results" / "tables" / "fig2.csv")
    assert {r["pe"] for r in back} == {"none", "sinusoidal"}
    metrics = json.loads((tmp_path / "results" / "metrics" / "fig2.json").read_text())["fig2"]["acc"]
    assert (metrics["none"] == pytest.approx(pooled.mean(), abs=1e-4)
            and metrics["sinusoidal"] == pytest.approx(c.mean(), abs=1e-4))
    drawn = draw_all(tmp_path / "results" / "tables", tmp_path / "figs")
    assert [p.name for p in drawn] == ["fig2_vocab.png"] and drawn[0].read_bytes()[:4] == b"\x89PNG"


def test_aggregate_reads_only_the_cells_of_the_current_grid(tmp_path):
    """Runs of an older grid left on disk are not pooled: the sweep's manifest names the cells."""
    rng = np.random.default_rng(1)
    fake_run(tmp_path / "fig2", 1, "none", rng.random(20))
    fake_run(tmp_path / "fig2", 2, "none", rng.random(20))
    (tmp_path / "fig2" / "sweep.json").write_text(json.dumps({"cells": [{"name": "lstm-v16-none-s1"}]}))
    (row,) = aggregate(tmp_path, tmp_path / "t", n_resamples=100)["fig2"]
    assert row["seeds"] == "1"


def dvc(repo: Path, *args: str, timeout: int = 900) -> str:
    r = subprocess.run([DVC, *args], cwd=repo, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"dvc {' '.join(args)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def documented_trial() -> list[str]:
    """The commands docs/pipeline.md gives to try another profile against its own baseline, in order."""
    text = (ROOT / "docs" / "pipeline.md").read_text(encoding="utf-8")
    block = next(b.split("```")[0] for b in text.split("```bash")[1:] if "git switch -c" in b.split("```")[0])
    return [ln.split("  #")[0].strip() for ln in block.splitlines() if ln.split("  #")[0].strip()]


def test_the_documented_trial_of_a_profile_commits_its_baseline_before_its_experiment():
    """`dvc exp show --only-changed` sets an experiment beside the commit it started from: the documented
    steps commit micro's own results, on a branch, before the one-value experiment the slow test runs."""
    cmds = documented_trial()
    steps = ("git switch -c ", "posrnn profile use micro && dvc repro", "git add -A && git commit",
             "dvc exp run -S profiles.micro.", "dvc exp show --only-changed")
    at = [next((i for i, c in enumerate(cmds) if c.startswith(step)), None) for step in steps]
    assert None not in at and at == sorted(at), cmds
    exp = cmds[at[3]].split()
    assert len(exp) == 5 and exp[4].count("=") == 1, exp  # one value: the slow test runs this command


def posrnn(repo: Path, *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "posrnn_cli", *args], cwd=repo, env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.skipif(not Path(DVC).exists(), reason="dvc is not installed")
def test_dvc_plots_show_loads_every_declared_plot(tmp_path):
    """Every file the stages write where dvc.yaml declares plots (each figure the experiment
    registry names, a training-curves table) is one DVC can draw, or one .dvcignore keeps out:
    `dvc plots show` reports no plot it failed to load."""
    from posrnn_cli.common.stages.experiments import EXPERIMENTS

    repo = tmp_path / "repo"
    (repo / "posrnn_cli" / "analysis").mkdir(parents=True)
    for name in ("dvc.yaml", "numerics.json", ".dvcignore", "posrnn_cli/analysis/training_curves.json"):
        shutil.copy(ROOT / name, repo / name)
    (repo / "params.yaml").write_text("profile: [p]\nprofiles:\n  p: {}\n")
    figures = repo / "figures" / "p"
    figures.mkdir(parents=True)
    png = next((ROOT / "figures").rglob("*.png")).read_bytes()
    written = [e.figure.file for e in EXPERIMENTS.values() if e.figure is not None]
    for name in written:
        (figures / name).write_bytes(png if name.endswith(".png") else b"| model | PE |\n|---|---|\n")
    (repo / "results" / "p" / "curves").mkdir(parents=True)
    (repo / "results" / "p" / "curves" / "fig2.csv").write_text("run,step,loss,accuracy\na,1,2.0,0.1\na,2,1.5,0.2\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    dvc(repo, "init", "-q")
    r = subprocess.run([DVC, "plots", "show", "--json"], cwd=repo, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "failed to load" not in r.stderr, r.stderr
    shown = json.loads(r.stdout)
    assert not shown.get("errors"), shown["errors"]
    assert {f"figures/p/{n}" for n in written
            if n.endswith(".png")} | {"results/p/curves/fig2.csv"} == set(shown["data"])


@pytest.mark.skipif(not Path(DVC).exists(), reason="dvc is not installed")
def test_dvc_exp_show_only_changed_fits_120_columns(tmp_path):
    """After a one-value `dvc exp run -S`, `dvc exp show --only-changed` names the changed metrics
    by their keys and fits 120 columns: the metrics files are lite's (as aggregate writes them),
    the one stage rewrites fig2's from the value set."""

    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "params.yaml", repo / "params.yaml")
    headlines = {p.stem: json.loads(p.read_text()) for p in (ROOT / "results" / "lite" / "metrics").glob("*.json")}
    assert len(headlines) > 5 and list(headlines["fig2"]["fig2"]) == ["acc"]
    (repo / "headlines.json").write_text(json.dumps(headlines))
    (repo / "write.py").write_text(
        "import json, os, sys, yaml\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from posrnn_cli.analysis.aggregate import metrics_text\n"
        "it = yaml.safe_load(open('params.yaml'))['profiles']['lite']['fig2']['iterations']\n"
        "heads = json.load(open('headlines.json'))\n"
        "os.makedirs('results/lite/metrics', exist_ok=True)\n"
        "for name, h in heads.items():\n"
        "    open(f'results/lite/metrics/{name}.json', 'w').write(json.dumps(h, indent=2) + '\\n')\n"
        "open('results/lite/metrics/fig2.json', 'wb').write(metrics_text('fig2', 'eval', "
        "{'none': round(0.4 + it / 1e5, 4), 'sinusoidal': round(0.5 + it / 1e5, 4)}))\n")
    (repo / "dvc.yaml").write_text(
        f"stages:\n  s:\n    cmd: python write.py {ROOT}\n    params:\n      - profiles.lite.fig2.iterations\n"
        "    metrics:\n      - results/lite/metrics: {cache: false}\n")
    env = {**ENV, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t.invalid", "COLUMNS": "120"}
    def run(*a: str) -> subprocess.CompletedProcess:
        r = subprocess.run(a, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{' '.join(a)}: {r.stdout[-2000:]} {r.stderr[-2000:]}"
        return r

    run("git", "init", "-q")
    run(DVC, "init", "-q")
    run(DVC, "repro", "-q")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "init")
    run(DVC, "exp", "run", "-q", "-S", "profiles.lite.fig2.iterations=3500")
    shown = run(DVC, "exp", "show", "--only-changed", "--no-pager").stdout
    assert max(len(line) for line in shown.splitlines()) <= 120, shown
    assert "fig2.acc.none" in shown and "fig2.acc.sinusoidal" in shown and "0.435" in shown, shown
    assert "metrics/" not in shown, shown  # no column named by a file's path

@pytest.mark.skipif(not Path(DVC).exists(), reason="dvc is not installed")
@pytest.mark.slow
def test_micro_profile_end_to_end_with_dvc(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("dvc.yaml", "numerics.json", "params.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, repo)
    shutil.copytree(ROOT / "posrnn_cli", repo / "posrnn_cli", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "data" / "wikitext-mini", repo / "data" / "wikitext-mini")
    (repo / ".gitignore").write_text("/runs/\n__pycache__/\n")
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)
    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "test")
    dvc(repo, "init", "-q")
    dvc(repo, "config", "core.analytics", "false")
    # a second small profile to switch to: micro with other seeds, and no LM
    data = yaml.safe_load((repo / "params.yaml").read_text())
    assert "nano" not in data["profiles"]
    text = (repo / "params.yaml").read_text().rstrip("\n") + "\n  nano:\n" + "\n".join(
        "    " + line for line in yaml.safe_dump({**data["profiles"]["micro"], "lm_data": {}, "lm": {},
                                                   "fig2": {**data["profiles"]["micro"]["fig2"], "seeds": [7]},
                                                   "extend": {**data["profiles"]["micro"]["extend"], "seeds": [7]}},
                                                  sort_keys=False).splitlines()) + "\n"
    (repo / "params.yaml").write_text(text)
    posrnn(repo, "profile", "use", "micro")
    git("add", "-A")
    git("commit", "-qm", "micro pipeline")

    out = dvc(repo, "repro")
    stages = [ln.split("'")[1] for ln in out.splitlines() if ln.startswith("Running stage")]
    assert stages == ["train@micro", "stability@micro", "extend@micro", "lm@micro", "aggregate@micro", "plot@micro",
                      "scorecard@micro"]
    figs = sorted(p.name for p in (repo / "figures" / "micro").glob("*.png"))
    # every experiment with a figure and runs in the micro profile draws it
    from posrnn_cli.common.stages.experiments import EXPERIMENTS

    assert figs == sorted(e.figure.file for e in EXPERIMENTS.values() if e.figure and e.figure.file.endswith(".png"))
    tables = sorted(p.stem for p in (repo / "results" / "micro" / "tables").glob("*.csv"))
    assert set(tables) >= {"delayed", "predecessor", "patterns", "budget", "autoreg", "continuous", "stability_mid"}
    assert "perplexity" in (repo / "figures" / "micro" / "lm_table.md").read_text()
    card = json.loads((repo / "results" / "micro" / "scorecard" / "scorecard.json").read_text())
    assert len(card["rows"]) >= 40
    for scope in ("at_regime", "indication"):
        counts = card["summary"]["papers"][scope]
        assert sum(counts[v] for v in VERDICTS) + sum(counts["partial"].values()) == counts["claims"]
    again = dvc(repo, "repro")
    assert "Running stage" not in again and "up to date" in again
    # storage: each run keeps what its experiment's keep_checkpoints says, and DVC keeps no second copy of any
    runs = repo / "runs" / "micro"
    for exp in ("fig2", "forms", "extend", "lm", "irie"):
        for run in (runs / exp).glob("*/checkpoints"):
            assert len(list(run.glob("step_*.pt"))) == 1, run
    # 20 iterations, every 10
    assert all(len(list(run.glob("step_*.pt"))) == 2 for run in (runs / "dual").glob("*/checkpoints"))
    assert {p.parent.parent.parent.name for p in runs.glob("*/*/checkpoints/step_*.pt")} >= {"fig2", "dual", "extend",
                                                                                             "lm"}
    md5 = lambda p: __import__("hashlib").md5(p.read_bytes()).hexdigest()
    cached = {f.parent.name + f.name for f in (repo / ".dvc" / "cache").rglob("*") if f.is_file()}
    assert not cached & {md5(p) for p in runs.glob("*/*/checkpoints/step_*.pt")}
    assert cached & {md5(p) for p in (runs / "stability").rglob("*.npz")}  # an output without checkpoints is cached

    dag = dvc(repo, "dag")
    assert max(len(line.rstrip()) for line in dag.splitlines()) <= 100, dag
    metrics = json.loads(dvc(repo, "metrics", "show", "--json"))
    files = next(iter(metrics.values()))["data"]
    from posrnn_cli.common.stages.experiments import result_tables

    assert sorted(Path(f).stem for f in files) == sorted(result_tables())  # the micro profile runs every experiment
    shown = dvc(repo, "metrics", "show")  # every file: a row each, a column per key (wide: docs/pipeline.md)
    assert len(shown.splitlines()) == len(result_tables()) + 1
    one = dvc(repo, "metrics", "show", "results/micro/metrics/fig2.json")  # one experiment's numbers fit a terminal
    assert len(one.splitlines()) == 2 and max(len(ln) for ln in one.splitlines()) < 200
    dvc(repo, "plots", "show", "-o", str(tmp_path / "plots"))
    assert (tmp_path / "plots" / "index.html").is_file()
    plots = json.loads(dvc(repo, "plots", "show", "--json"))["data"]
    fig2 = plots["results/micro/curves/fig2.csv"][0]["content"]["data"]["values"]  # every run's training curve
    assert {row["run"] for row in fig2} == {p.name for p in (repo / "runs" / "micro" / "fig2").iterdir() if p.is_dir()}
    assert {"step", "loss", "accuracy"} <= set(fig2[0])

    # one value changed as an experiment: params.yaml stays valid, only that profile's value moves
    git("add", "-A")
    git("commit", "-qm", "micro results")  # the baseline docs/pipeline.md commits before trying a value
    # a one-value change of an experiment no other inherits from: `dvc exp show --only-changed` at 120 columns shows its
    # numbers, named. (A value other experiments inherit, fig2's through `like: fig2`, changes their columns
    # too: docs/pipeline.md says how to narrow the view.)
    trial = next(c for c in documented_trial() if c.startswith("dvc exp run -S "))
    assert trial == "dvc exp run -S profiles.micro.length.iterations=24", trial  # the view checked below is length's
    dvc(repo, *trial.split()[1:])
    view = subprocess.run([DVC, "exp", "show", "--only-changed", "--no-pager"], cwd=repo, env={**ENV, "COLUMNS": "120"},
                          capture_output=True, text=True, timeout=300)
    assert view.returncode == 0 and max(len(ln) for ln in view.stdout.splitlines()) <= 120, view.stdout + view.stderr
    header = " ".join(ln for ln in view.stdout.splitlines() if "length" in ln)  # the changed numbers and value come
    assert all(c in header for c in ("length.acc.none", "length.acc.sinusoidal", "length.iterations")), view.stdout
    # first, named; what a trailing "…" folds is the changed dependencies' hashes
    assert re.search(r"\b0\.\d{3,}", view.stdout), view.stdout  # the changed numbers themselves

    dvc(repo, "exp", "run", "-S", "profiles.micro.fig2.iterations=24")
    after = yaml.safe_load((repo / "params.yaml").read_text())
    assert (after["profiles"]["micro"]["fig2"]["iterations"] == 24
            and after["profiles"]["nano"]["fig2"]["iterations"] == 20)
    assert load_profile(repo / "params.yaml", "micro")["fig2"]["iterations"] == 24
    cfg = yaml.safe_load((repo / "runs" / "micro" / "fig2" / "gru-v4-none-s1" / "config.yaml").read_text())
    assert cfg["train"]["iterations"] == 24
    shown = json.loads(dvc(repo, "exp", "show", "--json"))
    assert any(e for c in shown for e in (c.get("experiments") or []))

    # switch profiles and back: the other profile runs into its own directories; micro is untouched
    posrnn(repo, "profile", "use", "nano")
    out = dvc(repo, "repro")
    assert "Running stage 'train@nano'" in out and "@micro" not in out
    assert (repo / "runs" / "nano" / "fig2" / "gru-v4-none-s7").is_dir()
    posrnn(repo, "profile", "use", "micro")
    assert "up to date" in dvc(repo, "status")
    again = dvc(repo, "repro")
    assert "Running stage" not in again

