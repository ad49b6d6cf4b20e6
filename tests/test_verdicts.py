"""What a reader can cite: the seeds each open claim needs, "underpowered" and "not testable"
apart from "not measured", Holm's correction for "not reproduced", claims that read every table
holding their cells, and the results page's blocks (docs/results.md), which must say exactly what the committed
scorecard says. Each rule flips on fabricated tables."""

from __future__ import annotations

import json
import math
import re

import pytest
from typer.testing import CliRunner

from posrnn_cli.analysis import report
from posrnn_cli.analysis import scorecard as sc
from posrnn_cli.cli import app
from posrnn_cli.common.results import stats
from posrnn_cli.common.errors import PosrnnError
from fabricate import CLAIMS, DO, INC, NM, NR, NT, R, UP, at, dual, ev, ind, score, stab

from conftest import ROOT


# ---- the statistics behind "seeds needed" --------------------------------------------------------
def test_t_quantiles_and_cdf_match_the_tables():
    for df in (1, 2, 5, 10, 30):
        assert stats.t_quantile(0.975, df) == pytest.approx(stats.t975(df), abs=1e-3)
        assert stats.t_cdf(stats.t975(df), df) == pytest.approx(0.975, abs=1e-4)
    assert stats.t_quantile(1 - 0.025 / 4, 2) == pytest.approx(8.860, abs=1e-3)  # a Holm step over 4
    assert stats.t_cdf(0.0, 3) == pytest.approx(0.5)
    m, lo, hi = stats.t_interval_at([1.0, 2.0, 3.0], 0.95)
    assert (m, lo, hi) == pytest.approx(stats.t_interval([1.0, 2.0, 3.0]), abs=1e-3)


def test_seeds_to_clear_and_for_power():
    # mean 0.015, sd 0.011 over seeds: the 95% t half-width falls below 0.015 at n = 5
    assert stats.seeds_to_clear(0.015, 0.011) == 5
    assert 4.303 * 0.011 / math.sqrt(3) > 0.015 and stats.t975(4) * 0.011 / math.sqrt(5) < 0.015
    assert stats.seeds_for_power(0.015, 0.011) == 7
    assert stats.seeds_for_power(0.015, 0.011, power=0.5) <= stats.seeds_to_clear(0.015, 0.011)
    assert stats.seeds_to_clear(0.0, 0.1) is None and stats.seeds_to_clear(1e-6, 1.0) is None  # out of reach
    assert stats.seeds_to_narrow(0.02, 0.02) == 7
    # at a Holm step's level (0.05/2) more seeds are needed
    assert stats.seeds_for_power(0.015, 0.011, alpha=0.025) > stats.seeds_for_power(0.015, 0.011)


def test_seeds_are_given_both_ways_after_the_claims_multiplicity_rule(tmp_path):
    """Sinusoidal is behind the random form (p about 0.04) and the learnable comparison is open:
    the data point against the claim. Rejecting takes the random comparison through Holm's first
    step (0.05/2): 4 seeds; reproducing is out of reach at these effects."""
    row = score(tmp_path, "forms_sin_beats_fixed", forms=[ev("lstm", "sinusoidal", 16384, [0.80, 0.81, 0.82]),
                                                          ev("lstm", "random", 16384, [0.83, 0.85, 0.84]),
                                                          ev("lstm", "learnable", 16384, [0.78, 0.83, 0.80])])
    needs = row["at_regime"]["seeds_needed"]
    assert at(row) == INC and needs["toward"] == "reject" and needs["reproduce"] is None
    assert needs["reject"] == 4 and needs["clear"] == 4
    assert "the data point to rejecting: about 4" in report.readme_block([row], "x")


def test_the_committed_seeds_tables_give_both_ways():
    """forms_sin_beats_fixed's lite data point against the paper: 4 seeds reject it (not the 135
    that reproducing would need at the paper's direction). The gap contrast's difference is
    counted even where gap a is undecided today: s4d_dual_pe_resilient in beyond needs 6."""
    lite = (ROOT / "results" / "lite" / "scorecard" / "seeds.md").read_text()
    assert "| `forms_sin_beats_fixed` | indication | inconclusive | 3 | against it | — | 4 (4) |" in lite
    beyond = (ROOT / "results" / "beyond" / "scorecard" / "seeds.md").read_text()
    assert "| `s4d_dual_pe_resilient` | indication | inconclusive | 3 | toward the claim | 6 (9) | — |" in beyond


# ---- underpowered, not testable, inconclusive with its seeds -------------------------------------
def test_an_inconclusive_claim_says_how_many_seeds_it_needs(tmp_path):
    rows = [ev("gru", "sinusoidal", 256, [0.52, 0.50, 0.55]), ev("gru", "none", 256, [0.50, 0.51, 0.51]),
            ev("lstm", "sinusoidal", 16384, [0.9, 0.91, 0.92]), ev("lstm", "none", 16384, [0.5, 0.5, 0.52])]
    row = score(tmp_path, "fig2_pe_ahead_largest_v", fig2=rows)
    assert at(row) == INC
    needs = row["at_regime"]["seeds_needed"]
    lead = [0.02, -0.01, 0.04]
    sd = float(__import__("numpy").std(lead, ddof=1))
    n, p80 = stats.seeds_to_clear(sum(lead) / 3, sd), stats.seeds_for_power(sum(lead) / 3, sd)
    assert needs == {"now": 3, "toward": "reproduce", "reproduce": n, "reproduce80": p80, "reject": None,
                     "reject80": None, "clear": n, "power80": p80}
    # decided: nothing needed
    rows[0] = ev("gru", "sinusoidal", 256, [0.60, 0.61, 0.62])
    row = score(tmp_path, "fig2_pe_ahead_largest_v", fig2=rows)
    assert at(row) == R and row["at_regime"]["seeds_needed"] is None


def test_double_no_help_shows_its_measurement_as_underpowered(tmp_path):
    """Double vanilla ahead on every seed but its interval wider than the margin: measured and
    shown, counted as underpowered, not as "not measured"."""
    fig2 = [ev("lstm", "none", 64, [0.42, 0.43, 0.42], at={"length": 8, "hidden_size": 64})]
    double = [ev("lstm", "dummy", 64, [0.47, 0.45, 0.45], at={"length": 8, "hidden_size": 64})]
    row = score(tmp_path, "double_no_help", double=double, fig2=fig2)
    assert ind(row) == UP
    assert "gain +0.033" in row["indication"]["measured"] and "per seed" in row["indication"]["measured"]
    assert row["indication"]["seeds_needed"]["clear"] > 3
    counts = sc.summarize([row])["papers"]["indication"]
    assert counts[UP] == 1 and counts[NM] == 0


def test_a_measure_at_its_ceiling_is_not_testable(tmp_path):
    at_ = {"length": 8, "hidden_size": 58}
    def series(pe, start, end):
        return [stab("mamba", pe, s, "F/R", v, at=at_, spread=1e-6) for s, v in ((0, start), (750, end), (1500, end))]
    rows = series("none", 0.99999, 0.9997) + series("sinusoidal", 0.99999, 0.9999)
    row = score(tmp_path, "beyond_pe_changes_mamba_stability", stability=rows)
    assert at(row) == NT and "ceiling" in row["at_regime"]["reason"] and "0.99999" in row["at_regime"]["measured"]
    # the same comparison from a measure with room to rise is scored
    rows = series("none", 0.80, 0.60) + series("sinusoidal", 0.80, 0.75)
    assert at(score(tmp_path, "beyond_pe_changes_mamba_stability", stability=rows)) == R
    assert sc.summarize([row])["beyond"]["at_regime"][NT] == 1


# ---- Holm across a claim's comparisons -------------------------------------------------------------
def _forms(random_acc, learnable_acc):
    return [ev("lstm", "sinusoidal", 16384, [0.80, 0.81, 0.82]),
            ev("lstm", "random", 16384, random_acc), ev("lstm", "learnable", 16384, learnable_acc)]


def test_holms_step_down_tests_the_smallest_p_at_alpha_over_k_then_relaxes():
    assert sc.holm_rejected([("a", 0.0017), ("b", 0.032)]) == {"a", "b"}  # 0.025, then 0.05
    assert sc.holm_rejected([("a", 0.0017), ("b", 0.032), ("c", 0.5)]) == {"a"}  # 0.0167, then 0.025 fails
    assert sc.holm_rejected([("a", 0.03), ("b", 0.04)]) == set()  # the first step fails: nothing after it
    assert sc.holm_rejected([("a", 0.04)]) == {"a"}


def test_not_reproduced_must_survive_holm(tmp_path):
    """One of the forms falls behind sinusoidal by an interval just below 0 at 95% (p about
    0.04): with the other comparison open, Holm's first step (0.025) rejects nothing and the
    claim reads inconclusive; a clear fall behind holds."""
    # sinusoidal − random per seed: −0.03, −0.04, −0.02; sinusoidal − learnable crosses 0
    row = score(tmp_path, "forms_sin_beats_fixed", forms=_forms([0.83, 0.85, 0.84], [0.78, 0.83, 0.80]))
    assert at(row) == INC and "not after Holm's step-down" in row["at_regime"]["reason"]
    row = score(tmp_path, "forms_sin_beats_fixed", forms=_forms([0.90, 0.91, 0.92], [0.78, 0.83, 0.80]))
    assert at(row) == NR and "holds after Holm's step-down" in row["at_regime"]["reason"]


def test_a_table_where_holm_and_bonferroni_differ_reads_as_holm(tmp_path):
    """docs/statistics.md: Holm's step-down, not Bonferroni. Sinusoidal is far ahead of the
    learnable form (p < 0.001) and behind the random one at p about 0.04. Bonferroni reads every
    interval at 97.5%, where the random one crosses 0: inconclusive. Holm rejects the learnable
    comparison at 0.025, then tests the random one at 0.05: not reproduced."""
    row = score(tmp_path, "forms_sin_beats_fixed", forms=_forms([0.83, 0.85, 0.84], [0.70, 0.71, 0.72]))
    lag = [0.80 - 0.83, 0.81 - 0.85, 0.82 - 0.84]
    _, lo, hi = stats.t_interval_at(lag, 1 - 0.05 / 2)
    assert lo < 0 < hi  # Bonferroni's reading: open
    assert at(row) == NR and "holds after Holm's step-down across the test's 2 comparisons (2 rejected" in \
        row["at_regime"]["reason"]
    # a gap contrast: vanilla's gap shown (p tiny), PE's gap larger at p about 0.034, so the
    # contrast is refuted under Holm; Bonferroni's 97.5% interval of the difference crosses 0
    rows = [dual("gru", "none", "F/F", [0.95] * 3), dual("gru", "none", "F/R", [0.60, 0.61, 0.62]),
            dual("gru", "sinusoidal", "F/F", [0.99] * 3), dual("gru", "sinusoidal", "F/R", [0.615, 0.61, 0.61])]
    row = score(tmp_path, "dual_vanilla_fails_fr", dual=rows)
    diff = [0.35 - 0.375, 0.34 - 0.38, 0.33 - 0.38]
    _, lo, hi = stats.t_interval_at(diff, 1 - 0.05 / 2)
    assert lo < 0 < hi
    assert (at(row) == NR and row["at_regime"]["partial"]
            and "holds after Holm's step-down" in row["at_regime"]["reason"])


def test_a_baseline_gate_is_not_corrected_so_the_mamba_hypothesis_is_refuted(monkeypatch):
    """beyond's Mamba cell: vanilla Mamba's drop is above the tolerance (p about 0.002) where the
    GRU's drop (the gate, p about 0.03) is shown at 95%. The gate joins its cell's comparison as
    an intersection and is read at 95%; Holm runs over the comparisons against the claim. The
    GRU's F/R arm, compared with Mamba's drop, is not shown above its recall-last line, so the
    committed reading is "not testable"; without the floor guard Holm's reading stands."""
    rows = {r["id"]: r for r in sc.scorecard(ROOT / "results" / "beyond" / "tables")}
    x = rows["beyond_mamba_vanilla_keeps_fr"]["at_regime"]
    assert x["verdict"] == NT and "recall-last" in x["reason"]
    monkeypatch.setattr(sc.score, "_at_floor", lambda out, trace: None)
    rows = {r["id"]: r for r in sc.scorecard(ROOT / "results" / "beyond" / "tables")}
    x = rows["beyond_mamba_vanilla_keeps_fr"]["at_regime"]
    assert x["verdict"] == NR and "holds after Holm's step-down" in x["reason"]


# ---- a claim reads every table that holds its cells ------------------------------------------------
def test_s4d_pe_helps_reads_fig2_too(tmp_path):
    at_ = {"length": 8, "hidden_size": 82}
    fig2 = [ev("s4d", "sinusoidal", 64, [0.66, 0.67, 0.65], at=at_), ev("s4d", "none", 64, [0.60, 0.59, 0.61], at=at_)]
    assert ind(score(tmp_path, "s4d_pe_helps", fig2=fig2)) == R  # s4d.csv absent: fig2 alone
    only = {**CLAIMS["s4d_pe_helps"], "tables": ["s4d"]}
    assert ind(score(tmp_path, only, fig2=fig2)) == NM


def test_the_committed_beyond_s4d_cells_are_read():
    """Beyond runs the S4D inside fig2 (no s4d.csv): the S4D claim reads it there."""
    rows = {r["id"]: r for r in json.loads((ROOT / "results" / "beyond" / "scorecard" / "scorecard.json")
                                           .read_text())["rows"]}
    assert not (ROOT / "results" / "beyond" / "tables" / "s4d.csv").exists()
    assert rows["s4d_pe_helps"]["indication"]["verdict"] != NM
    assert "S4D V=64" in rows["s4d_pe_helps"]["indication"]["measured"]



# ---- the design's power: what a profile's seeds are not expected to decide ------------------------
def _open_row():
    return [ev("gru", "sinusoidal", 256, [0.52, 0.50, 0.55]), ev("gru", "none", 256, [0.50, 0.51, 0.51]),
            ev("lstm", "sinusoidal", 16384, [0.9, 0.91, 0.92]), ev("lstm", "none", 16384, [0.5, 0.5, 0.52])]


def _scored(tmp_path, rows, power):
    out = tmp_path / f"p{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    from posrnn_cli.common.files.io import write_csv
    write_csv(rows, out / "fig2.csv")
    return sc.scorecard(out, [CLAIMS["fig2_pe_ahead_largest_v"]], power=power)[0]


def test_a_claim_the_design_gives_too_few_seeds_reads_underpowered_with_its_measurement(tmp_path):
    pilot = "a 3-seed pilot"
    row = _scored(tmp_path, _open_row(), {"pilot": pilot, "seeds_needed": {"fig2_pe_ahead_largest_v": 12}})
    x = row["at_regime"]
    assert x["verdict"] == UP and x["design_seeds"] == 12
    assert "gives it 3 seeds" in x["reason"] and pilot in x["reason"] and "12" in x["reason"]
    assert "the interval of the difference crosses 0" in x["reason"]  # the test's own reading is kept
    assert "PE 0.523 vs vanilla 0.507" in x["measured"] and x["seeds_needed"]["now"] == 3
    counts = sc.summarize([row])["papers"]["at_regime"]
    assert counts[UP] == 1 and counts[INC] == 0 and counts[NM] == 0
    # without the design, or with a design that gives it enough seeds, it stays inconclusive
    assert at(_scored(tmp_path, _open_row(), None)) == INC
    assert at(_scored(tmp_path, _open_row(), {"pilot": pilot, "seeds_needed": {"fig2_pe_ahead_largest_v": 3}})) == INC
    assert at(_scored(tmp_path, _open_row(), {"pilot": pilot, "seeds_needed": {"fig2_dl_improves": 40}})) == INC


def test_a_claim_that_decides_anyway_shows_its_decision(tmp_path):
    rows = _open_row()
    rows[0] = ev("gru", "sinusoidal", 256, [0.60, 0.61, 0.62])
    row = _scored(tmp_path, rows, {"pilot": "p", "seeds_needed": {"fig2_pe_ahead_largest_v": 50}})
    assert at(row) == R and "design_seeds" not in row["at_regime"]


@pytest.mark.parametrize("power, message", [
    ({"pilot": "p", "seeds_needed": {"fig2_pe_ahed_largest_v": 5}}, "no claim 'fig2_pe_ahed_largest_v' (did you mean "
                                                                    "'fig2_pe_ahead_largest_v'?)"),
    ({"pilot": "p", "seeds_needed": {"fig2_pe_ahead_largest_v": 1}}, "at least 2"),
    ({"pilot": "p", "seeds_needed": {"fig2_pe_ahead_largest_v": 2.5}}, "whole number"),
    ({"pilot": "", "seeds_needed": {}}, "pilot must name"),
    ({"seeds_needed": {}}, "exactly `pilot`"),
    ({"pilot": "p", "seeds_needed": [1]}, "must map claim ids"),
])
def test_a_malformed_power_section_is_one_line(tmp_path, power, message):
    with pytest.raises(PosrnnError, match=re.escape(message)):
        _scored(tmp_path, _open_row(), power)


def test_the_cli_reads_the_profiles_power(tmp_path):
    from posrnn_cli.common.files.io import write_csv
    tables = tmp_path / "tables"
    tables.mkdir()
    write_csv(_open_row(), tables / "fig2.csv")
    params = tmp_path / "params.yaml"
    params.write_text("profile: [p]\nprofiles:\n  p:\n    about: x\n    power:\n      pilot: a pilot\n"
                      "      stated_before_results: true\n      seeds_needed:\n        fig2_pe_ahead_largest_v: 9\n")
    result = CliRunner().invoke(app, ["scorecard", "p", "--results", str(tables), "--params", str(params), "--json"])
    assert result.exit_code == 0, result.output
    row = next(r for r in json.loads(result.output) if r["id"] == "fig2_pe_ahead_largest_v")
    assert row["at_regime"]["verdict"] == UP and "a pilot" in row["at_regime"]["reason"]
    # no git here: without the record that it was stated before the results, it labels nothing
    params.write_text(params.read_text().replace("stated_before_results: true", "stated_before_results: false"))
    result = CliRunner().invoke(app, ["scorecard", "p", "--results", str(tables), "--params", str(params), "--json"])
    row = next(r for r in json.loads(result.output) if r["id"] == "fig2_pe_ahead_largest_v")
    assert row["at_regime"]["verdict"] == INC and row["at_regime"]["seeds_needed"]["clear"]
    params.write_text(params.read_text().replace("stated_before_results: false", "stated_before_results: true"))
    params.write_text(params.read_text().replace("fig2_pe_ahead_largest_v", "no_such_claim"))
    result = CliRunner().invoke(app, ["scorecard", "p", "--results", str(tables), "--params", str(params)])
    assert result.exit_code != 0 and "no claim 'no_such_claim'" in result.output and "Traceback" not in result.output


def test_every_profiles_power_section_is_valid():
    """Each profile's design names only claims the scorecard knows, with whole seed counts; the
    3-seed CPU profiles state theirs."""
    import yaml
    profiles = yaml.safe_load((ROOT / "params.yaml").read_text())["profiles"]
    claims = sc.load_claims()
    stated = {name for name, prof in profiles.items()
              if sc.validate_power(prof.get("power"), claims, where=f"profiles.{name}.power") is not None}
    assert {"lite", "lite_extra"} <= stated


# ---- a design counts only if stated before the results (git) ---------------------------------------
def _repo(tmp_path, name):
    import subprocess
    repo = tmp_path / name
    repo.mkdir()
    def git(*args):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                       check=True, capture_output=True)
    git("init", "-q")
    return repo, git


_DESIGN = {"pilot": "a pilot", "seeds_needed": {"fig2_pe_ahead_largest_v": 9}}


def _commit_design(repo, git, power):
    import yaml
    (repo / "params.yaml").write_text(yaml.safe_dump({"profiles": {"p": {"about": "x", "power": power}}}))
    git("add", "params.yaml")
    git("commit", "-q", "-m", "design")


def _commit_results(repo, git):
    (repo / "results" / "p").mkdir(parents=True, exist_ok=True)
    (repo / "results" / "p" / "fig2.csv").write_text(f"x\n{len(list(repo.rglob('*')))}\n")
    git("add", "results")
    git("commit", "-q", "-m", "results")


def test_a_design_counts_only_if_git_shows_it_committed_before_the_profiles_first_result(tmp_path):
    from posrnn_cli.analysis.scorecard.design import design_as_stated, stated_in_git
    before, git = _repo(tmp_path, "before")
    _commit_design(before, git, _DESIGN)
    assert stated_in_git(before, "p", _DESIGN) is True  # no result yet: nothing to precede
    _commit_results(before, git)
    assert stated_in_git(before, "p", _DESIGN) is True
    assert design_as_stated(_DESIGN, "p", before)[0] == _DESIGN
    # the same section, committed after the results: it labels nothing, whatever its record says
    after, git = _repo(tmp_path, "after")
    _commit_design(after, git, {"pilot": "a pilot", "seeds_needed": {}})
    _commit_results(after, git)
    late = {**_DESIGN, "stated_before_results": True}
    _commit_design(after, git, late)
    assert stated_in_git(after, "p", late) is False
    assert design_as_stated(late, "p", after) == (None, "git: committed after the profile's first result")
    # a count raised after the results does not count either
    raised = {"pilot": "a pilot", "seeds_needed": {"fig2_pe_ahead_largest_v": 12}}
    assert stated_in_git(before, "p", raised) is False
    # no git history to read: the committed record decides
    assert stated_in_git(tmp_path, "p", _DESIGN) is None
    assert design_as_stated(late, "p", tmp_path)[0] == late
    assert design_as_stated(_DESIGN, "p", tmp_path)[0] is None


def test_every_profiles_record_says_what_git_says():
    """The record a clone without history reads (``stated_before_results``) agrees with the git
    history for every profile with a design; lite's and lite_extra's were committed after their
    results (their open claims read inconclusive), lite_seeds' before."""
    import yaml
    from posrnn_cli.analysis.scorecard.design import stated_in_git
    profiles = yaml.safe_load((ROOT / "params.yaml").read_text())["profiles"]
    designs = {name: prof["power"] for name, prof in profiles.items() if prof.get("power")}
    verdicts = {name: stated_in_git(ROOT, name, power) for name, power in designs.items()}
    if any(v is None for v in verdicts.values()):
        pytest.skip("no full git history (a shallow clone, or no git): the order of commits cannot be read")
    for name, power in designs.items():
        assert power.get("stated_before_results", False) is verdicts[name], name
    assert verdicts["lite"] is False and verdicts["lite_extra"] is False and verdicts["lite_seeds"] is True


def test_no_design_committed_after_its_results_labels_a_claim():
    for profile in ("lite", "lite_extra"):
        rows = json.loads((ROOT / "results" / profile / "scorecard" / "scorecard.json").read_text())["rows"]
        assert not any("design_seeds" in r[s] for r in rows for s in sc.SCOPES), profile


# ---- the seeds table and the README ----------------------------------------------------------------
def test_seeds_table_lists_every_open_verdict(tmp_path):
    import yaml
    from posrnn_cli.analysis.scorecard.design import design_as_stated
    power = yaml.safe_load((ROOT / "params.yaml").read_text())["profiles"]["lite"]["power"]
    rows = sc.scorecard(ROOT / "results" / "lite" / "tables", power=design_as_stated(power, "lite", ROOT)[0])
    text = report.seeds_markdown(rows, "lite")
    open_ids = {r["id"] for r in rows for s in sc.SCOPES if r[s]["verdict"] in sc.OPEN}
    assert open_ids and all(f"`{i}`" in text for i in open_ids)
    closed = {r["id"] for r in rows} - open_ids
    assert not any(f"`{i}`" in text for i in closed)
    result = CliRunner().invoke(app, ["scorecard", "lite", "--seeds"])
    assert result.exit_code == 0 and result.output == text


@pytest.mark.parametrize("profile", ["lite", "lite_extra", "lite_seeds", "beyond", "beyond2", "beyond3"])
def test_committed_seeds_table_is_what_the_scorecard_gives(profile):
    folder = ROOT / "results" / profile
    rows = json.loads((folder / "scorecard" / "scorecard.json").read_text())["rows"]
    assert (folder / "scorecard" / "seeds.md").read_text() == report.seeds_markdown(rows, profile)


@pytest.mark.parametrize("profile", ["lite", "lite_extra", "lite_seeds", "beyond", "beyond2", "beyond3"])
def test_readme_results_are_the_scorecard(profile):
    """Every verdict and count the results page (docs/results.md, linked from the README) states
    for a profile is its committed scorecard's."""
    rows = json.loads((ROOT / "results" / profile / "scorecard" / "scorecard.json").read_text())["rows"]
    block = report.readme_block_in((ROOT / "docs" / "results.md").read_text(), profile)
    assert block is not None, f"docs/results.md has no results block for {profile}"
    assert block == report.readme_block(rows, profile), f"run: posrnn scorecard {profile} --page docs/results.md"


def test_a_readme_that_differs_from_the_scorecard_is_caught_and_rewritten(tmp_path):
    rows = json.loads((ROOT / "results" / "lite" / "scorecard" / "scorecard.json").read_text())["rows"]
    good = report.readme_block(rows, "lite")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nintro\n\n{good}\n\nafter\n")
    assert report.readme_block_in(readme.read_text(), "lite") == good
    # one verdict changed by hand: the check fails, and the rewrite restores the scorecard's words
    verdict = rows[0]["indication"]["verdict"]
    forged = good.replace(verdict, "reproduced" if verdict != "reproduced" else "inconclusive", 1)
    readme.write_text(readme.read_text().replace(good, forged))
    assert report.readme_block_in(readme.read_text(), "lite") != good
    assert report.update_readme(readme, rows, "lite") is True
    assert readme.read_text() == f"# x\n\nintro\n\n{good}\n\nafter\n"
    assert report.update_readme(readme, rows, "lite") is False
    (tmp_path / "OTHER.md").write_text("no block here\n")
    with pytest.raises(PosrnnError, match="no results block for lite"):
        report.update_readme(tmp_path / "OTHER.md", rows, "lite")


def test_implementation_checks_are_labelled():
    rows = json.loads((ROOT / "results" / "lite" / "scorecard" / "scorecard.json").read_text())["rows"]
    impl = {r["id"] for r in rows if r["implementation"]}
    assert impl == {"irie_one_layer_invariant", "irie_two_layers_sensitive", "irie_noncausal_needs_pe",
                    "irie_linear_transformer_same"}
    md = (ROOT / "results" / "lite" / "scorecard" / "scorecard.md").read_text()
    assert md.count("a check of the implementation, not a finding") == 4
    assert "irie_two_layers_sensitive` (implementation check)" in report.readme_block(rows, "lite")


def test_the_two_layer_pe_gain_is_shown():
    rows = {r["id"]: r for r in json.loads((ROOT / "results" / "lite" / "scorecard" / "scorecard.json")
                                           .read_text())["rows"]}
    x = rows["irie_two_layers_pe_nonessential"]["at_regime"]
    assert x["verdict"] == NR and "gain +0.328" in x["measured"]


def test_margins_follow_their_stated_rules():
    """Null claims with no number in the paper use the file's one rule (0.02); the LM margin is
    the Table 1 arithmetic its sentence states."""
    for c in CLAIMS.values():
        if c.get("kind") == "no_gain":
            assert c["params"]["margin"] == 0.02, c["id"]
    lm = CLAIMS["lm_no_gain"]
    assert lm["params"]["margin"] == pytest.approx(round((38.92 - 36.83) / 37.77, 4))
    assert "(38.92 − 36.83) / 37.77" in lm["test"]


def test_robust_reason_says_what_was_found(tmp_path):
    """"Not reproduced" in a robustness contrast says the PE drop was not shown smaller than the
    baseline's, never that the baseline dropped no more."""
    rows = [dual("gru", "sinusoidal", "F/F", [0.99, 0.99, 0.99]), dual("gru", "sinusoidal", "F/R", [0.80, 0.81, 0.79]),
            dual("gru", "none", "F/F", [0.99, 0.99, 0.99]), dual("gru", "none", "F/R", [0.80, 0.78, 0.82])]
    claim = {**CLAIMS["dual_pe_robust_gru"], "params": {**CLAIMS["dual_pe_robust_gru"]["params"],
             "pairs": [{"ref": {"condition": "F/F", "half": "all"}, "cond": {"condition": "F/R", "half": "all"}}]}}
    row = score(tmp_path, claim, dual=rows)
    assert at(row) == NR
    assert "drops no more" not in row["at_regime"]["reason"]
    assert "not shown to be smaller than the baseline's drop" in row["at_regime"]["reason"]


def test_the_paper_profiles_extension_can_score_extend_beyond_scratch():
    """Each extension of the paper profile ends at a total V inside the claim's regime, beside a
    fig2 cell that learned that V from scratch on the same seeds (1,024 doubled to 2,048 never could)."""
    from posrnn_cli.sweep.plan import plan

    jobs = plan(ROOT / "params.yaml", "paper", ["fig2", "extend"])
    regime = CLAIMS["extend_beyond_scratch"]["regime"]["vocab_size"]
    scratch = {(j.config["model"]["name"], j.config["task"]["vocab_size"], j.config["train"]["seed"],
                j.config["model"]["pe"]) for j in jobs if j.experiment == "fig2"}
    ext = [j for j in jobs if j.experiment == "extend"]
    assert ext
    for j in ext:
        key = (j.config["model"]["name"], j.config["task"]["vocab_size"], j.config["train"]["seed"],
               j.config["model"]["pe"])
        assert regime["min"] <= key[1] <= regime["max"], key
        assert key in scratch, f"no fig2 run learns {key} from scratch"


def test_the_cluster_page_counts_the_paper_profiles_train_array():
    from posrnn_cli.common.stages.experiments import experiments_of_stage
    from posrnn_cli.sweep.plan import plan

    n = len(plan(ROOT / "params.yaml", "paper", [e for e in experiments_of_stage("train")]))
    assert f"lists that array: {n} runs" in (ROOT / "docs" / "cluster.md").read_text()


def test_the_readmes_count_line_is_a_recomputation_with_its_qualifiers():
    """The README's count of the papers' claims the CPU profiles decide is generated, beside the
    strict count, the partials, the implementation checks, the claims decided both ways (named)
    and the ceiling reads; the count is whatever the scorecards give, never held above a floor."""
    scored = report.committed_scorecards(ROOT, _profiles())
    block = report.readme_block_in((ROOT / "README.md").read_text(), report.COUNT)
    assert block == report.count_block(scored), "run: posrnn scorecard --across --page README.md"
    decided, claims = set(), set()
    for profile in report.CPU_PROFILES:  # recomputed here from the rows, without the report's helpers
        for r in scored[profile]:
            if r["section"] == "papers":
                claims.add(r["id"])
                if any(r[s]["verdict"] in (R, NR, sc.DIRECTION_ONLY) for s in sc.SCOPES):
                    decided.add(r["id"])
    c = report.decided_count(scored)
    assert c["claims"] == len(claims) == 53 and set(c["decided"]) == decided
    assert f"decide {len(decided)} of the papers' 53 claims; strictly {len(c['strict'])}," in block
    assert set(c["strict"]) == decided - set(c["partial"]) - set(c["implementation"]) - set(c["both_ways"])
    assert "`dual_disturbant_not_target`" in block and "dual_disturbant_not_target" in c["both_ways"]
    assert set(c["ceiling"]) >= {"pattern_count_vocab_over_length", "double_no_help_sort"}
    assert "predecessor_pe_helps" not in decided  # its arms sit at the order-blind line


def test_the_count_reads_partials_checks_both_ways_and_ceilings_apart():
    x = lambda v, partial=False: {"verdict": v, "partial": partial}
    row = lambda cid, v, partial=False, impl=False, kind="ahead": {
        "id": cid, "section": "papers", "implementation": impl, "kind": kind, "at_regime": x(NM),
        "indication": x(v, partial)}
    ceiling = {"verdict": NT, "partial": False, "models": {"": {"details": {"at_ceiling": []}}}}
    scored = {"lite": [row("a", R), row("b", R, partial=True), row("c", R, impl=True), row("d", NR),
                       {**row("e", NM), "indication": ceiling}],
              "lite_seeds": [row("a", R), row("b", NM), row("c", NM), row("d", R), row("e", NM)],
              "beyond": [row("e", R)]}  # not a CPU profile: not counted
    c = report.decided_count(scored)
    assert (c["decided"], c["partial"], c["implementation"], c["both_ways"], c["strict"], c["ceiling"]) == (
        ["a", "b", "c", "d"], ["b"], ["c"], ["d"], ["a"], ["e"])


# ---- each claim across the profiles ------------------------------------------------------------------
def _one(cid, at_v, ind_v="not measured", partial=False):
    x = lambda v: {"verdict": v, "partial": partial}
    return {"id": cid, "at_regime": x(at_v), "indication": x(ind_v)}


def test_across_marks_claims_two_profiles_decide_differently():
    scored = {"a": [_one("c1", NM, NR), _one("c2", R), _one("c3", INC), _one("c4", NM)],
              "b": [_one("c1", R, partial=True), _one("c2", R), _one("c3", R), _one("c4", NM)]}
    rows = {e["id"]: e for e in report.across(scored)}
    assert rows["c1"]["disagree"] and rows["c1"]["cells"] == {"a": NR, "b": R + "*"}
    assert not rows["c2"]["disagree"] and not rows["c3"]["disagree"]  # open against decided is no disagreement
    assert "c4" not in rows  # measured nowhere
    assert "| `c1` | not reproduced | reproduced* | **≠** |" in report.across_markdown(scored)
    # for a threshold claim "direction only" and "not reproduced" agree that the stated size is not
    # reached; for any other kind "direction only" (the direction shown) disagrees with both
    kinds = {"c5": "threshold", "c6": "threshold", "c7": "ahead", "c8": "robust"}
    one = lambda cid, v: {**_one(cid, NM, v), "kind": kinds[cid]}
    scored = {"a": [one("c5", DO), one("c6", DO), one("c7", DO), one("c8", DO)],
              "b": [one("c5", NR), one("c6", R), one("c7", NR), one("c8", R)]}
    rows = {e["id"]: e for e in report.across(scored)}
    assert not rows["c5"]["disagree"] and rows["c6"]["disagree"]
    assert rows["c7"]["disagree"] and rows["c8"]["disagree"]


@pytest.mark.parametrize("columns", [120, 80])
def test_scorecard_across_fits_the_terminal_with_every_id_and_name_whole(columns):
    """In 120 columns one line a claim, its id and verdicts side by side; in 80 each id on a line of
    its own above its verdicts. Never a claim id or a profile name's part cut."""
    result = CliRunner().invoke(app, ["scorecard", "--across"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= columns, result.output
    scored = report.committed_scorecards(ROOT, _profiles())
    starts = [line.split()[0] for line in lines if line.split()]
    assert all(e["id"] in starts for e in report.across(scored)), result.output
    head = " ".join(lines[:4])
    for p in scored:  # each name whole, or broken after its "_"s into whole parts
        assert p in head.split() or all(part in head.split() for part in p.replace("_", "_ ").split()), (p, head)
    one_line = any(line.split()[:2] == ["fig2_gru_pe_95", "NR"] for line in lines if line.split())
    assert one_line == (columns == 120)


def test_the_across_view_puts_a_long_id_above_its_verdicts_and_lists_by_name_when_columns_do_not_fit():
    """Where the id column cannot hold every id, a longer id goes on a line of its own above its
    verdicts; where even the verdicts' columns do not fit, each claim lists the profiles that
    measured it by name."""
    from rich.console import Console

    from posrnn_cli.analysis.across_view import AcrossView

    profiles = [f"profile_{k}" for k in range(6)]
    rows = [("short_id", ["R", "—", "NR", "—", "—", "inc"], True), ("a_" + "very_" * 6 + "long_id", ["—"] * 6, False)]

    def shown(width: int) -> list[str]:
        console = Console(width=width, file=None, record=True, color_system=None)
        with console.capture() as cap:
            console.print(AcrossView(profiles, rows))
        return cap.get().splitlines()

    mixed = shown(70)
    assert max(map(len, mixed)) <= 70 and mixed[0].startswith("claim")
    assert mixed[2].split() == ["short_id", "R", "—", "NR", "—", "—", "inc", "≠"]
    assert mixed[3] == rows[1][0] and mixed[4].split() == ["—"] * 6
    listed = shown(40)
    assert max(map(len, listed)) <= 40
    at = listed.index("short_id")
    assert listed[at + 1].split() == ["profile_0", "R", "profile_2", "NR"]  # wrapped between pairs
    assert listed[at + 2].split() == ["profile_5", "inc", "≠"]
    assert listed[listed.index(rows[1][0]) + 1].strip() == "measured nowhere"


def test_scorecard_across_marks_dual_disturbant_not_target():
    result = CliRunner().invoke(app, ["scorecard", "--across", "--json"])
    assert result.exit_code == 0, result.output
    rows = {e["id"]: e for e in json.loads(result.output)}
    x = rows["dual_disturbant_not_target"]
    assert x["disagree"] and x["cells"]["lite"] == NR and x["cells"]["lite_seeds"] == R + "*"
    assert not rows["fig2_gru_pe_95"]["disagree"]


def test_the_results_page_shows_the_profiles_side_by_side():
    import yaml
    names = list(yaml.safe_load((ROOT / "params.yaml").read_text())["profiles"])
    block = report.readme_block_in((ROOT / "docs" / "results.md").read_text(), report.ACROSS)
    assert block == report.across_markdown(report.committed_scorecards(ROOT, names)), \
        "run: posrnn scorecard --across --page docs/results.md"



# ---- the README's answer ----------------------------------------------------------------------------
def _profiles() -> list[str]:
    import yaml
    return list(yaml.safe_load((ROOT / "params.yaml").read_text())["profiles"])


def test_the_readmes_answer_is_the_scorecards():
    """The README answers its question first (after its first paragraph, before Quick start), in
    sentences generated from every committed scorecard."""
    text = (ROOT / "README.md").read_text()
    block = report.readme_block_in(text, report.ANSWER)
    assert block == report.answer_block(report.committed_scorecards(ROOT, _profiles())), \
        "run: posrnn scorecard --across --page README.md"
    assert text.index(block) < text.index("## Quick start") and text.index(block) > text.index("\n\n")
    assert "Morita's" in block and "At the papers' regime" in block and "Beyond the papers" in block


def test_the_answer_follows_the_scorecards_verdicts():
    """A verdict of one of Morita's GRU or LSTM claims changes the answer: off the regime in the
    open count, at the regime in the papers' sentence (which then no longer says none is measured)."""
    import copy

    scored = report.committed_scorecards(ROOT, _profiles())
    before = report.answer_block(scored)
    changed = copy.deepcopy(scored)
    row = next(r for r in changed["lite"] if r["id"] == "dual_vanilla_fails_fr")
    row["indication"]["verdict"] = R
    assert report.answer_block(changed) != before
    row = next(r for r in changed["lite"] if r["id"] == "fig2_gru_pe_95")
    row["at_regime"] = {"verdict": R, "partial": False}
    after = report.answer_block(changed)
    assert "none of Morita's" not in after and "`lite`: 1 reproduced" in after
    assert "none of Morita's" in before  # no committed profile measures them at the papers' regime


def test_the_answer_names_each_cores_lead_in_words_on_the_first_screen():
    """The README's first 40 lines give, for the GRU and the LSTM, PE against vanilla in words with
    the effect, the interval and the seeds the picked scorecard reading records."""
    from posrnn_cli.analysis import answer

    scored = report.committed_scorecards(ROOT, _profiles())
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:40])
    for core in ("gru", "lstm"):
        x = answer.pick_lead(scored, core)
        lead = x["lead"]
        words = [answer.signed(lead[k]) for k in ("mean", "ci_low", "ci_high")]
        assert f"**{answer.CORES[core]}**: " in head
        assert f"{words[0]} [{words[1]}, {words[2]}] over {x['seeds']} seeds" in head
        assert f"`{x['profile']}`, claim `{x['claim']}`" in head
    assert "off the papers' regime" in head and "Open:" in head


def _reading(cell: str, seeds: int, mean: float, lo: float, hi: float, verdict: str = R) -> dict:
    lead = {"mean": mean, "ci_low": lo, "ci_high": hi, "seeds": list(range(seeds))}
    return {"verdict": verdict, "details": {"comparisons": [{"cell": cell, "lead": lead}]}, "seeds_needed": None}


def _row(claim: str, core: str, reading: dict) -> dict:
    empty = {"verdict": "not measured", "models": {}}
    return {"id": claim, "section": "papers", "paper": "(003 §2.1)", "models": [core], "at_regime": empty,
            "indication": {"verdict": reading["verdict"], "models": {core: reading}}}


def test_the_answers_rule_picks_the_largest_vocabulary_then_the_most_seeds():
    """Per core: only PE-against-vanilla claims on token accuracy count; the largest vocabulary
    wins, then the most seeds, then the claims' order; a not-testable reading never answers."""
    from posrnn_cli.analysis import answer

    ids = answer.pe_vs_vanilla()
    assert "fig2_pe_ahead_largest_v" in ids and "fig2_dl_improves" not in ids and "lm_pe_worse" not in ids
    scored = {"a": [_row("sort_helps_a_little", "gru", _reading("GRU V=32 L=8 H=64", 14, .04, .02, .05)),
                    _row("fig2_dl_improves", "gru", _reading("GRU V=128 L=8 H=64", 20, .2, .1, .3))],
              "b": [_row("fig2_pe_ahead_largest_v", "gru", _reading("GRU V=64 L=8 H=64", 5, .02, .01, .03)),
                    _row("extend_pe_better", "gru", _reading("GRU V=64 L=8 H=64", 9, -.01, -.03, .01)),
                    _row("delayed_add_pe_helps", "gru", _reading("GRU V=256 L=8 H=64", 30, .1, .05, .15,
                                                                 verdict="not testable"))]}
    x = answer.pick_lead(scored, "gru")
    assert (x["profile"], x["claim"], x["seeds"]) == ("b", "extend_pe_better", 9)
    assert answer.lead_sentence("gru", x).startswith("**GRU**: no lead shown, −0.010 [−0.030, +0.010] over 9 seeds")
    scored["b"][1]["indication"]["models"]["gru"]["details"]["comparisons"][0]["lead"]["seeds"] = [1, 2, 3, 4, 5]
    assert answer.pick_lead(scored, "gru")["claim"] == "fig2_pe_ahead_largest_v"
    assert "small but holds" in answer.lead_sentence("gru", answer.pick_lead(scored, "gru"))
    assert answer.pick_lead(scored, "lstm") is None


def test_scorecard_across_rewrites_the_answer_block(tmp_path):
    page = tmp_path / "README.md"
    page.write_text("# x\n\n<!-- results:answer -->\nold\n<!-- /results:answer -->\n")
    result = CliRunner().invoke(app, ["scorecard", "--across", "--page", str(page), "--quiet"])
    assert result.exit_code == 0, result.output
    assert report.readme_block_in(page.read_text(), report.ANSWER) == report.answer_block(
        report.committed_scorecards(ROOT, _profiles()))
    page.write_text("# no block\n")
    result = CliRunner().invoke(app, ["scorecard", "--across", "--page", str(page), "--quiet"])
    assert (result.exit_code != 0 and "no block built across profiles" in result.output
            and page.read_text() == "# no block\n")


# ---- no open result written as a negative ---------------------------------------------------------------
#: phrases that state an effect's absence (or a fall) in words; beside an open verdict they say
#: more than the data do
NULL_WORDS = re.compile(r"did not help|does not help|do not help|no help|not help\b|\b(?:are|is|were|was|stay|stayed) "
                        r"level\b|level with\b|no effect|does not stand in|did not make up|fell as|falls from|"
                        r"made no difference|no better than", re.I)
#: a paper's section cited (docs/papers.md numbers the versions 000–004): the paper's words, not a result here
PAPER_CITED = re.compile(r"\b00[0-4],? (?:and 00[0-4] )?(?:§|App\.)")
_BLOCK = re.compile(r"<!-- results:([\w-]+) -->.*?<!-- /results:\1 -->", re.S)


def _verdicts_by_claim() -> dict:
    import yaml
    names = list(yaml.safe_load((ROOT / "params.yaml").read_text())["profiles"])
    out: dict = {}
    for rows in report.committed_scorecards(ROOT, names).values():
        for r in rows:
            for scope in sc.SCOPES:
                if r[scope]["verdict"] != NM:
                    out.setdefault(r["id"], set()).add(r[scope]["verdict"])
    return out


def prose_sentences(text: str, tables: bool = True) -> list[str]:
    """The sentences of a page outside its generated blocks (and, without ``tables``, outside its
    table rows), each on one line."""
    prose = _BLOCK.sub(" ", text)
    if not tables:
        prose = "\n".join(ln for ln in prose.splitlines() if not ln.lstrip().startswith("|"))
    return re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", prose))


def claim_ids(sentence: str, verdicts: dict) -> list[str]:
    """The claim ids a sentence names in backticks."""
    return [i for i in re.findall(r"`([a-z0-9_]+)`", sentence) if i in verdicts]


def unsupported_sentences(text: str, verdicts: dict) -> list[str]:
    """Sentences outside the generated blocks that state an effect's absence (``NULL_WORDS``, not
    in quotation marks, not the papers' finding cited to its section) without naming a claim (in
    backticks) that every profile measuring it decides."""
    bad = []
    for sentence in prose_sentences(text):
        if not NULL_WORDS.search(re.sub(r'"[^"]*"', "", sentence)) or PAPER_CITED.search(sentence):
            continue  # no effect stated, or the papers' own finding, cited to its section
        ids = claim_ids(sentence, verdicts)
        if not ids or any(v not in (R, NR, sc.DIRECTION_ONLY) for i in ids for v in verdicts[i]):
            bad.append(sentence)
    return bad


def test_a_negative_beside_an_open_verdict_is_caught():
    verdicts = {"beyond_pe_helps_mqar": {NT}, "beyond_mamba_vanilla_keeps_fr": {NR}, "lm_no_gain": {INC}}
    assert unsupported_sentences("In MQAR, PE did not help the GRU.", verdicts)
    assert unsupported_sentences("PE did not help it (`beyond_pe_helps_mqar`).", verdicts)
    assert unsupported_sentences("The two arms are level (`lm_no_gain`).", verdicts)
    assert not unsupported_sentences("Mamba's drop made no difference (`beyond_mamba_vanilla_keeps_fr`).", verdicts)
    block = "<!-- results:findings-x -->\n- **inconclusive**: PE does not help.\n<!-- /results:findings-x -->"
    assert not unsupported_sentences(block, verdicts)  # generated from the scorecard, checked apart
    assert not unsupported_sentences("Doubling the batch did not help (003 §4.2).", verdicts)  # the paper's finding


def test_no_readme_or_docs_sentence_states_an_effect_the_verdicts_do_not_support():
    verdicts = _verdicts_by_claim()
    # docs/papers.md says what the papers claim, section by section: no result of this project
    for path in [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "papers.md")]:
        assert not unsupported_sentences(path.read_text(), verdicts), path.name


@pytest.mark.parametrize("page, profile, brief", [("README.md", "beyond2", True),  # beyond's: the answer block's count
                                                  ("docs/results.md", "beyond", False),
                                                  ("docs/results.md", "beyond2", False)])
def test_the_findings_sentences_are_the_scorecards(page, profile, brief):
    rows = json.loads((ROOT / "results" / profile / "scorecard" / "scorecard.json").read_text())["rows"]
    block = report.readme_block_in((ROOT / page).read_text(), (report.BRIEF if brief else report.FINDINGS) + profile)
    assert block == report.findings_block(rows, profile, brief=brief), f"run: posrnn scorecard {profile} --page {page}"


def test_the_second_round_is_committed_before_any_of_its_runs():
    """lite_round2 is a design: every commit that touches its results descends from the commit
    that stated it, the pattern of the beyond hypotheses' test."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()
    if git("rev-parse", "--is-shallow-repository") != "false":
        pytest.skip("no full git history: the order of commits cannot be read")
    stated = git("log", "--format=%H", "--reverse", "-S", "  lite_round2:", "--", "params.yaml").splitlines()
    if not stated:
        pytest.skip("the design is not committed yet")
    for commit in git("log", "--format=%H", "--", "results/lite_round2").splitlines():
        assert commit != stated[0]
        assert subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", stated[0],
                               commit]).returncode == 0


#: a verdict word in prose (the longest first, so "not reproduced" is not read as "reproduced")
VERDICT_WORDS = re.compile(r"\b(not reproduced|reproduced|inconclusive|underpowered|not testable|direction only)\b",
                           re.I)


def misread_verdicts(text: str, verdicts: dict) -> list[str]:
    """Sentences outside the generated blocks and tables that name claims (in backticks) beside a
    verdict word that no committed scorecard gives any of them."""
    bad = []
    for sentence in prose_sentences(text, tables=False):
        ids = claim_ids(sentence, verdicts)
        words = {w.lower() for w in VERDICT_WORDS.findall(sentence)}
        if ids and words - set().union(*(verdicts[i] for i in ids)):
            bad.append(sentence)
    return bad


def test_a_verdict_typed_beside_a_claim_is_the_scorecards():
    verdicts = {"vanilla_more_training_no_help": {NR}, "lm_no_gain": {INC}}
    assert misread_verdicts("Twice the iterations helped (`vanilla_more_training_no_help`, reproduced).", verdicts)
    assert not misread_verdicts("Twice the iterations helped (`vanilla_more_training_no_help`, not reproduced).",
                                verdicts)
    assert misread_verdicts("`lm_no_gain` is not reproduced here.", verdicts)
    assert not misread_verdicts("| `lm_no_gain` | reproduced before the change |", verdicts)  # a table row: history


def test_no_readme_or_docs_sentence_gives_a_claim_a_verdict_its_scorecards_do_not():
    verdicts = _verdicts_by_claim()
    for path in [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "papers.md")]:
        assert not misread_verdicts(path.read_text(), verdicts), path.name


# ---- no outcome stated in prose without its claim ------------------------------------------------------
#: an effect stated in words: PE (or a core's convolution) helps, hurts, beats, raises or lowers something
EFFECT_WORDS = re.compile(r"\b(?:PE|positional encoding|the convolution|its convolution)\b[^.;:]{0,40}"
                          r"\b(?:helps|helped|hurts|hurt|beats|beat|raises|raised|lowers|lowered)\b", re.I)


def unattributed_effects(text: str, verdicts: dict) -> list[str]:
    """Sentences outside the generated blocks and tables that state an effect (``EFFECT_WORDS``,
    not in quotation marks, not a question, not the papers' finding cited to its section) without
    naming the claim (in backticks) whose verdict the sentence reports: such a sentence says what
    no scorecard checks, and can say the opposite of one."""
    bad = []
    for sentence in prose_sentences(text, tables=False):
        bare = re.sub(r'"[^"]*"', "", sentence)
        if EFFECT_WORDS.search(bare) and not sentence.rstrip().endswith("?") and not PAPER_CITED.search(sentence) \
                and not claim_ids(sentence, verdicts):
            bad.append(sentence)
    return bad


def test_an_effect_stated_without_its_claim_is_caught():
    verdicts = {"map_pe_more_off_xlstm": {NR}}
    old = ("`beyond_map` crosses PE × short convolution × vocabulary (`posrnn scorecard beyond_map`): at L = 12, PE "
           "helps xLSTM more with its convolution than without, at every V.")
    assert unattributed_effects(old, verdicts)  # the README's sentence before its verdict was named
    assert not unattributed_effects("At L = 12, `map_pe_more_off_xlstm` reads not reproduced.", verdicts)
    assert not unattributed_effects("Does PE help a GRU at a large vocabulary?", verdicts)
    assert not unattributed_effects("PE helps the LSTM (003 §4.2).", verdicts)


def test_no_readme_or_docs_sentence_states_an_effect_without_its_claim():
    verdicts = _verdicts_by_claim()
    for path in [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "papers.md")]:
        assert not unattributed_effects(path.read_text(), verdicts), path.name


def test_every_gap_contrast_states_its_gate_and_its_refutation_route():
    """A rule the test applies is a rule its sentence states: the gate (a cell counts only where
    gap a is shown) and the route to "not reproduced" (the difference below 0, shown or not)."""
    for c in sc.load_claims():
        if c.get("kind") == "gap_contrast":
            assert "counts toward reproduced only where" in c["test"], c["id"]
            assert "whether or not the first is shown" in c["test"] and "Holm" in c["test"], c["id"]
