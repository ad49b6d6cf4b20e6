"""The beyond-the-papers profiles: cores compared at matched parameter counts, and hypotheses
stated (committed) before the results that score them."""

from __future__ import annotations

import subprocess
from collections import defaultdict

import pytest
import torch

from posrnn_cli.models import build_model, count_parameters
from posrnn_cli.sweep.plan import plan
from posrnn_cli.tasks import build_task

from conftest import ROOT  # noqa: E402 - the repository
PARAMS = ROOT / "params.yaml"
CORES = {"gru", "s4d", "mingru", "mamba"}


def _core_parameters(job) -> int:
    cfg = job.run_config()
    with torch.device("meta"):  # shapes only: the paper-scale models cost no memory
        model = build_model(cfg, build_task(cfg.task))
    return count_parameters(model.core)


@pytest.mark.parametrize("profile", ["beyond", "beyond_paper"])
def test_the_cores_of_each_cell_are_matched_on_the_pe_arms_core_parameters(profile):
    pytest.importorskip("mambapy", reason="the mamba core needs mambapy (make setup installs it)")
    jobs = [j for j in plan(PARAMS, profile, ["fig2", "dual"]) if j.config["model"]["pe"] == "sinusoidal"]
    counts: dict = defaultdict(dict)  # (experiment, vocab) → model → core parameters
    for j in jobs:
        key = (j.experiment, j.config["task"]["vocab_size"])
        n = _core_parameters(j)
        assert counts[key].setdefault(j.config["model"]["name"], n) == n  # seeds share a size
    assert counts
    for key, by_model in counts.items():
        assert set(by_model) == CORES, key
        gru = by_model["gru"]
        for model, n in by_model.items():
            assert abs(n / gru - 1) < 0.02, f"{profile} {key}: {model} has {n:,} core parameters, the GRU {gru:,}"


@pytest.mark.parametrize("profile", ["beyond", "beyond_paper"])
def test_every_cell_has_both_arms_on_the_same_seeds_and_budget(profile):
    jobs = plan(PARAMS, profile, ["fig2", "dual"])
    arms: dict = defaultdict(set)
    budgets = set()
    for j in jobs:
        c = j.config
        arms[(j.experiment, c["model"]["name"], c["task"]["vocab_size"], c["model"]["pe"])].add(c["train"]["seed"])
        budgets.add((j.experiment, c["train"]["iterations"], c["train"]["batch_size"], c["task"]["length"]))
    seeds = {frozenset(s) for s in arms.values()}
    assert len(seeds) == 1 and len(next(iter(seeds))) >= 3  # a verdict needs 3 seeds per arm
    assert {k[3] for k in arms} == {"none", "sinusoidal"}
    assert len(budgets) == 2  # one budget per experiment, shared by every core


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_the_hypotheses_were_committed_before_the_results_that_score_them():
    try:
        shallow = _git("rev-parse", "--is-shallow-repository")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the order of commits cannot be read")
    if shallow == "true":
        pytest.skip("a shallow clone: the commit that stated the hypotheses is not in it")
    stated = _git("log", "--format=%H", "--reverse", "-S", "beyond_pe_helps_mamba_vocab", "--",
                  "posrnn_cli/analysis/claims.yaml").splitlines()
    results = _git("log", "--format=%H", "--reverse", "--", "results/beyond").splitlines()
    assert stated, "the beyond hypotheses are not in claims.yaml's history"
    for commit in results:  # every commit that touched the beyond results comes after the hypotheses
        assert commit != stated[0]
        subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", stated[0], commit], check=True)


def test_beyond_paper_mirrors_the_paper_profiles_gru_cells():
    import yaml

    profiles = yaml.safe_load(PARAMS.read_text())["profiles"]
    paper, mirror = profiles["paper"], profiles["beyond_paper"]
    for sweep in ("fig2", "dual"):
        keys = ("length", "iterations", "batch", "warmup", "seeds")
        assert {k: mirror[sweep][k] for k in keys} == {k: paper[sweep][k] for k in keys}
    gru = {c["vocab"] for c in paper["fig2"]["cells"] if c["model"] == "gru"}
    for model in CORES:
        assert {c["vocab"] for c in mirror["fig2"]["cells"] if c["model"] == model} == gru
    assert [c["hidden"] for c in mirror["fig2"]["cells"] if c["model"] == "gru"] == [512] * len(gru)
    assert mirror["dual"]["rarity"] == paper["dual"]["rarity"] and mirror["dual"]["checkpoint_initial"]
