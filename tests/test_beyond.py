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

from conftest import ROOT
PARAMS = ROOT / "params.yaml"
FIRST = {"gru", "s4d", "mingru", "mamba"}  # the first beyond profile's cores
SECOND = {"xlstm", "rglru", "gated_deltanet"}  # the second's
CORES = {"beyond": FIRST, "beyond2": SECOND, "beyond_paper": FIRST | SECOND}
GRU_H = {"beyond": 64, "beyond2": 64, "beyond_paper": 512}  # the GRU every core is matched to


def _core_parameters(job, **model) -> int:
    cfg = job.run_config()
    for k, v in model.items():
        setattr(cfg.model, k, v)
    with torch.device("meta"):  # shapes only: the paper-scale models cost no memory
        model = build_model(cfg, build_task(cfg.task))
    return count_parameters(model.core)


@pytest.mark.parametrize("profile", ["beyond", "beyond2", "beyond_paper"])
def test_the_cores_of_each_cell_are_matched_on_the_pe_arms_core_parameters(profile):
    pytest.importorskip("mambapy", reason="the mamba core needs mambapy (make setup installs it)")
    pytest.importorskip("xlstm", reason="the xlstm core needs the xlstm package (make setup installs it)")
    jobs = [j for j in plan(PARAMS, profile, ["fig2", "dual"]) if j.config["model"]["pe"] == "sinusoidal"]
    counts: dict = defaultdict(dict)  # (experiment, vocab) → model → core parameters
    gru: dict = {}
    for j in jobs:
        key = (j.experiment, j.config["task"]["vocab_size"])
        n = _core_parameters(j)
        assert counts[key].setdefault(j.config["model"]["name"], n) == n  # seeds share a size
        gru.setdefault(key, _core_parameters(j, name="gru", hidden_size=GRU_H[profile], embed_size=None))
    assert counts
    for key, by_model in counts.items():
        assert set(by_model) <= CORES[profile], key
        for model, n in by_model.items():
            assert abs(n / gru[key] - 1) < 0.02, (f"{profile} {key}: {model} has {n:,} core parameters, the GRU "
                                                  f"{gru[key]:,}")
    assert {m for by_model in counts.values() for m in by_model} == CORES[profile]


@pytest.mark.parametrize("profile", ["beyond", "beyond2", "beyond_paper"])
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


@pytest.mark.parametrize("profile", ["beyond2", "beyond_paper"])
def test_mamba_conv_and_mqar_give_each_arm_the_same_seeds_and_budget(profile):
    for experiment, arm_keys in (("mamba_conv", ("conv", "pe")), ("mqar", ("vocab_size", "pe"))):
        arms: dict = defaultdict(set)
        budgets = set()
        for j in plan(PARAMS, profile, [experiment]):
            c = j.config
            arm = tuple(c["model"].get(k, c["task"].get(k)) for k in arm_keys)
            arms[arm].add(c["train"]["seed"])
            budgets.add((c["model"]["name"], c["model"]["hidden_size"], c["train"]["iterations"], c["task"]["length"]))
        assert len(arms) == 4 and len({frozenset(s) for s in arms.values()}) == 1, (experiment, arms)
        assert len(next(iter(arms.values()))) >= 3 and len(budgets) == 1
        if experiment == "mamba_conv":
            assert {a[0] for a in arms} == {True, False}


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


#: the first hypothesis of each beyond set, and the results that score it
STATED_FIRST = [("beyond_pe_helps_mamba_vocab", "results/beyond"), ("beyond_pe_helps_xlstm_vocab", "results/beyond2"),
                ("map_pe_on_mamba", "results/beyond_map"),
                ("map_pe_conv_add_xlstm", "results/beyond_map"),
                ("map_pe_conv_add_xlstm", "results/beyond_map_paper"),
                ("map_pe_on_hawk", "results/beyond_map_block"),
                ("map_pe_conv_add_gdn_layer", "results/beyond_map_block"),
                ("kind: permutation_split", "results/beyond3"),
                ("model: noncausal_transformer, pe: none", "results/beyond3")]


@pytest.mark.parametrize("claim, results", STATED_FIRST)
def test_the_hypotheses_were_committed_before_the_results_that_score_them(claim, results):
    try:
        shallow = _git("rev-parse", "--is-shallow-repository")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the order of commits cannot be read")
    if shallow == "true":
        pytest.skip("a shallow clone: the commit that stated the hypotheses is not in it")
    stated = _git("log", "--format=%H", "--reverse", "-S", claim, "--", "posrnn_cli/analysis/claims.yaml").splitlines()
    touched = _git("log", "--format=%H", "--reverse", "--", results).splitlines()
    assert stated, f"{claim} is not in claims.yaml's history"
    for commit in touched:  # every commit that touched the results comes after the hypotheses
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
    for model in CORES["beyond_paper"]:
        assert {c["vocab"] for c in mirror["fig2"]["cells"] if c["model"] == model} == gru
    assert [c["hidden"] for c in mirror["fig2"]["cells"] if c["model"] == "gru"] == [512] * len(gru)
    assert mirror["dual"]["rarity"] == paper["dual"]["rarity"] and mirror["dual"]["checkpoint_initial"]


MAP_CORES = {"mamba", "gated_deltanet_layer", "hawk", "xlstm"}


@pytest.mark.parametrize("profile, gru_h", [("beyond_map", 64), ("beyond_map_paper", 512)])
def test_the_map_crosses_pe_conv_and_three_vocabularies_for_each_core_on_matched_parameters(profile, gru_h):
    pytest.importorskip("mambapy", reason="the mamba core needs mambapy (make setup installs it)")
    pytest.importorskip("xlstm", reason="the xlstm core needs the xlstm package (make setup installs it)")
    jobs = plan(PARAMS, profile, ["mamba_conv"])
    arms: dict = defaultdict(set)
    budgets, sizes, gru = set(), {}, {}
    for j in jobs:
        c = j.config
        V = c["task"]["vocab_size"]
        arms[(c["model"]["name"], c["model"]["conv"], c["model"]["pe"], V)].add(c["train"]["seed"])
        budgets.add((c["task"]["name"], c["task"]["length"], c["train"]["iterations"], c["train"]["batch_size"]))
        if c["model"]["pe"] == "sinusoidal" and c["model"]["conv"]:
            sizes[(c["model"]["name"], V)] = _core_parameters(j)
            gru.setdefault(V, _core_parameters(j, name="gru", hidden_size=gru_h, embed_size=None, conv=True))
    models = {a[0] for a in arms}
    vocabs = {a[3] for a in arms}
    assert models == MAP_CORES and len(vocabs) >= 3
    assert set(arms) == {(m, conv, pe, V) for m in models for conv in (True, False) for pe in ("none", "sinusoidal")
                         for V in vocabs}
    assert len({frozenset(s) for s in arms.values()}) == 1 and len(next(iter(arms.values()))) >= 3
    (task, length, _, _), = budgets
    assert task == "reverse" and length >= 12  # the map's hypotheses read L ≥ 12 cells only
    for (model, V), n in sizes.items():
        assert abs(n / gru[V] - 1) < 0.02, f"{profile} {model} V={V}: {n:,} core parameters, the GRU {gru[V]:,}"


@pytest.mark.parametrize("profile, cores, length", [("beyond_map_long", {"mamba", "gated_deltanet_layer", "hawk"}, 32),
                                                     ("beyond_map_xlstm", {"xlstm"}, 12)])
def test_the_maps_later_profiles_keep_its_cells_sizes_and_budget(profile, cores, length):
    """beyond_map_long is the map's grid for three cores at L = 32 (a width-4 convolution sees an
    eighth of it) and beyond_map_xlstm its xLSTM cells again: each arm as beyond_map runs it (the
    same core sizes, iterations, batch and seeds), every arm crossed PE × conv."""
    base = {(j.config["model"]["name"], j.config["model"]["hidden_size"], j.config["train"]["iterations"],
             j.config["train"]["batch_size"], j.config["train"]["seed"])
            for j in plan(PARAMS, "beyond_map", ["mamba_conv"])}
    jobs = plan(PARAMS, profile, ["mamba_conv"])
    arms = defaultdict(set)
    for j in jobs:
        c = j.config
        assert (c["model"]["name"], c["model"]["hidden_size"], c["train"]["iterations"], c["train"]["batch_size"],
                c["train"]["seed"]) in base
        assert c["task"]["name"] == "reverse" and c["task"]["length"] == length
        m = c["model"]
        arms[(m["name"], m["conv"], m["pe"], c["task"]["vocab_size"])].add(c["train"]["seed"])
    assert {a[0] for a in arms} == cores
    assert all(len(s) == 3 for s in arms.values())
    assert set(arms) == {(m, conv, pe, V) for m, _, _, V in arms for conv in (True, False)
                         for pe in ("none", "sinusoidal")}
    assert length == 12 or length >= 8 * 4  # the map's L, or one where a width-4 convolution sees an eighth


def test_the_maps_full_block_arms_keep_its_grid_and_budget_at_matched_parameters():
    """beyond_map_block runs beyond_map's Hawk and Gated DeltaNet cells (the same L, V, seeds,
    iterations and batch, every arm crossed PE × conv) with each core in its authors' block,
    sized to the GRU's core parameters on the PE arm (within 5%: the blocks' widths are even)."""
    base = {(j.config["model"]["name"], j.config["task"]["length"], j.config["task"]["vocab_size"],
             j.config["train"]["iterations"], j.config["train"]["batch_size"], j.config["train"]["seed"])
            for j in plan(PARAMS, "beyond_map", ["mamba_conv"])}
    arms: dict = defaultdict(set)
    for j in plan(PARAMS, "beyond_map_block", ["mamba_conv"]):
        c, m = j.config, j.config["model"]
        assert m["block"] == "full"
        assert (m["name"], c["task"]["length"], c["task"]["vocab_size"], c["train"]["iterations"],
                c["train"]["batch_size"], c["train"]["seed"]) in base
        arms[(m["name"], m["conv"], m["pe"], c["task"]["vocab_size"])].add(c["train"]["seed"])
        if m["pe"] == "sinusoidal" and m["conv"]:
            n, gru = _core_parameters(j), _core_parameters(j, name="gru", hidden_size=64, embed_size=None, conv=True,
                                                          block="mixer")
            assert abs(n / gru - 1) < 0.05, (m["name"], n, gru)
    assert {a[0] for a in arms} == {"hawk", "gated_deltanet_layer"}
    assert all(len(s) == 3 for s in arms.values())
    assert set(arms) == {(name, conv, pe, V) for name, _, _, V in arms for conv in (True, False)
                         for pe in ("none", "sinusoidal")}
    assert {a[3] for a in arms} == {16, 64, 256}
