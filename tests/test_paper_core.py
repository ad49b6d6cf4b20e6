"""The headline profile ``paper_core``: every claim it lists as headline is a scored claim of the
papers in claims.yaml, and its plan holds the cells that claim's test reads at the papers' regime
(both arms, 5 seeds, the papers' budget); DVC's stages find every section they read; the dry run
prices its packed cells at most 48 H100-hours and the language model apart."""

from __future__ import annotations

import re

import pytest
import yaml

from posrnn_cli.analysis.scorecard.claims import load_claims
from posrnn_cli.measure import cost
from posrnn_cli.sweep.plan import plan

from conftest import ROOT

PROFILE = "paper_core"
#: claims.yaml's regime columns → the run config key they read
COLUMN_KEY = {"length": ("task", "length"), "hidden_size": ("model", "hidden_size"),
              "vocab_size": ("task", "vocab_size"), "rarity": ("task", "rarity")}
SEEDS = [111, 222, 333, 444, 555]


def _profile() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())["profiles"][PROFILE]


@pytest.fixture(scope="module")
def runs():
    """(experiment, config dict) of every training run of the profile's synthetic experiments."""
    jobs = plan(ROOT / "params.yaml", PROFILE, ["fig2", "dual", "extend"])
    return [(j.experiment, j.run_config()) for j in jobs if j.config]


def _inside(cfg, regime: dict) -> bool:
    for col, spec in regime.items():
        section, key = COLUMN_KEY[col]  # a regime column this test cannot read fails here, not silently
        v = getattr(getattr(cfg, section), key)
        if isinstance(spec, dict):
            if v is None or not spec.get("min", v) <= v <= spec.get("max", v):
                return False
        elif v != spec:
            return False
    return True


def test_the_headline_claims_are_scored_claims_of_the_papers():
    claims = {c["id"]: c for c in load_claims()}
    headline = _profile()["headline"]
    assert len(headline) == len(set(headline)) >= 10
    for cid in headline:
        c = claims[cid]
        assert c.get("section", "papers") == "papers" and "kind" in c, cid


def test_every_headline_claim_has_the_cells_its_test_reads_at_the_papers_regime(runs):
    claims = {c["id"]: c for c in load_claims()}
    for cid in _profile()["headline"]:
        c = claims[cid]
        for table in c["tables"]:
            for model in c["models"]:
                cells = [cfg for exp, cfg in runs if exp == table and cfg.model.name == model
                         and _inside(cfg, c["regime"])]
                arms = {pe: sorted(cfg.train.seed for cfg in cells if cfg.model.pe == pe)
                        for pe in ("none", "sinusoidal")}
                vocabs = {cfg.task.vocab_size for cfg in cells}
                assert all(len(s) == len(SEEDS) * len(vocabs) and set(s) == set(SEEDS) for s in arms.values()), (cid,
                                                                                                                 table,
                                                                                                                 model)
                if c["kind"] in ("decline", "trend"):  # a trend over V needs several vocabularies
                    assert len(vocabs) >= 3, (cid, model, vocabs)
        match = (c.get("params") or {}).get("match")
        if match:  # the two sides of a gap contrast meet on the same cells
            side = lambda t: {tuple(getattr(cfg.model if k == "model" else cfg.task if k != "hidden_size"
                                            else cfg.model,
                                        {"model": "name"}.get(k, k)) for k in match) for exp, cfg in runs if exp == t}
            assert side("extend") <= side("fig2"), cid


def test_every_run_is_at_the_papers_budget(runs):
    for exp, cfg in runs:
        assert (cfg.task.length, cfg.model.hidden_size, cfg.train.iterations) == (64, 512, 300_000), exp
        assert cfg.train.batch_size == 512 and cfg.model.pe in ("none", "sinusoidal"), exp
    gru = sorted({cfg.task.vocab_size for exp, cfg in runs if exp == "fig2" and cfg.model.name == "gru"})
    lstm = sorted({cfg.task.vocab_size for exp, cfg in runs if exp == "fig2" and cfg.model.name == "lstm"})
    assert gru == [32, 64, 128, 256] and lstm[0] == 256 and lstm[-1] == 16384 and 512 in lstm


def test_the_dry_run_prices_the_packed_cells_within_48_h100_hours_and_the_lm_apart():
    """The synthetic part (fig2's and dual's cells, their 5 seeds packed as the sweep's packer packs
    them, and the extensions, which it keeps solo) within 48 H100-hours at the assumed factors; the
    language model apart. Over the factors' ranges it is not: their range line says how far."""
    jobs = plan(ROOT / "params.yaml", PROFILE, ["fig2", "dual", "extend", "lm"])
    text, _ = cost.summary(jobs, cost.gpu_rate("H100", False, cost.load_table()))
    rows = {ln.split()[0]: [float(x.replace(",", "")) for x in ln.split()[-3:]] for ln in text.splitlines()
            if ln.split()[:1] in (["fig2"], ["dual"], ["extend"], ["lm"])}
    synthetic = re.search(r"synthetic tasks +[\d,]+ +([\d,.]+) +([\d,.]+) +([\d,.]+)", text)
    assert synthetic and set(rows) == {"fig2", "dual", "extend", "lm"}, text
    fp32, amp, packed = (float(x.replace(",", "")) for x in synthetic.groups())
    assert rows["fig2"][2] + rows["dual"][2] + rows["extend"][2] <= 48 and packed <= 48 and packed < amp < fp32
    assert rows["extend"][2] == rows["extend"][1] and rows["lm"][2] == rows["lm"][1]  # solo: as run alone
    assert "not measured on a GPU" in text and rows["lm"][0] > 0
    span = re.search(r"^  synthetic tasks +[\d,]+ +[\d,.]+–[\d,.]+ +[\d,.]+–[\d,.]+ +([\d,.]+)–([\d,.]+)$", text,
                     re.M)
    low, high = (float(x.replace(",", "")) for x in span.groups())
    assert low < packed < 48 < high and "packing gain g" in text


def test_the_dry_run_says_what_dvc_repro_runs_which_switches_lower_it_and_where_the_lm_data_comes_from(
        tmp_path, monkeypatch):
    """paper_core sets neither amp nor packing: the dry run's total is what `dvc repro` trains, and a
    line names the switches that give the lower figures; its LM data (data/wikitext-103, not shipped)
    is checked and the command that fetches it named."""
    from typer.testing import CliRunner

    from posrnn_cli.cli import app

    monkeypatch.chdir(tmp_path)  # no data/wikitext-103 here
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    r = CliRunner().invoke(app, ["sweep", "--dry-run", "--profile", PROFILE], terminal_width=100)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "`dvc repro` of this plan trains each run alone at its profile's switches (amp and cuda_graph off)" in text
    assert re.search(r"train.amp and train.cuda_graph set true in the profile price it at [\d,.]+, and ensemble: 5",
                     text)
    assert "the LM's data: lm_data.data_dir data/wikitext-103 does not exist" in text
    assert 'hf download Salesforce/wikitext --repo-type dataset --include "wikitext-103-raw-v1/*"' in text
