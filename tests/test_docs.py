"""Every local link in the README and docs points at a file inside the repository (and a link to a
heading at a heading there); the README stays a newcomer's page: short, with every docs page and the
test command CI runs one look away."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
#: the README's length, in words as `wc -w` counts them; the depth lives in docs/
README_MAX_WORDS = 1500


def links(path: Path) -> list[tuple[str, str]]:
    """Every relative link of a Markdown file as (file, anchor), images included; web links skipped."""
    found = re.findall(r"\]\(([^)\s]+)\)", path.read_text())
    return [(t.partition("#")[0], t.partition("#")[2]) for t in found if "://" not in t and not t.startswith("mailto:")]


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (code blocks skipped)."""
    out, fenced = set(), False
    for ln in path.read_text().splitlines():
        fenced ^= ln.startswith("```")
        if not fenced and (m := re.match(r"#+ (.*)", ln)):
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_local_links_resolve(path):
    for target in re.findall(r"\]\(([^)#]+)\)", path.read_text()):
        if "://" in target:
            continue
        resolved = (path.parent / target).resolve()
        assert (resolved.is_relative_to(ROOT) and resolved.exists()), (f"{path.name} links to {target}, outside the "
                                                                       "repository or missing")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_a_link_to_a_heading_finds_it(path):
    for target, anchor in links(path):
        doc = (path.parent / target).resolve() if target else path
        if anchor and doc.suffix == ".md":
            assert anchor in anchors(doc), f"{path.name} links to {target}#{anchor}, a heading {doc.name} lacks"


def test_the_readme_is_short():
    words = len(README.read_text().split())
    assert words <= README_MAX_WORDS, f"README.md has {words} words, over {README_MAX_WORDS}: move the depth into docs/"


def test_every_relative_link_in_the_readme_points_to_an_existing_file():
    found = links(README)
    assert len(found) >= 10, "the README links to its docs pages"
    for target, _ in found:
        if target:
            resolved = (ROOT / target).resolve()
            assert (resolved.is_relative_to(ROOT)
                    and resolved.is_file()), f"README.md links to {target}, which is missing"


def test_every_docs_page_is_one_link_from_the_readme():
    linked = {(ROOT / target).resolve() for target, _ in links(README) if target}
    missing = [p.name for p in DOCS[1:] if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link to: {missing}"


def test_the_readme_shows_the_test_command_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == "make test", ".ci/run no longer ends in `make test`: update the README's Development section"
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    assert any(ln.split("#")[0].strip() == ci for b in blocks for ln in b.splitlines()), "README.md lost `make test`"


# ---- no stale number: figures the docs quote are regenerated from the command they cite ---------------
def _plan(profile: str):
    from posrnn_cli.common.stages.experiments import EXPERIMENTS
    from posrnn_cli.common.settings.profiles import load_profile
    from posrnn_cli.sweep.plan import plan

    prof = load_profile(ROOT / "params.yaml", profile)
    return plan(ROOT / "params.yaml", profile, [e for e in EXPERIMENTS if e in prof], ROOT / "runs")


def test_the_paper_profiles_disk_figures_in_docs_pipeline_are_the_dry_runs():
    from posrnn_cli.sweep.storage import disk_sentence

    flat = " ".join((ROOT / "docs" / "pipeline.md").read_text(encoding="utf-8").split())
    assert disk_sentence(_plan("paper"), "paper") in flat


def test_lites_run_counts_in_docs_results_are_the_plans():
    from posrnn_cli.common.stages.experiments import trains

    jobs = [j for j in _plan("lite") if trains(j.kind)]
    ext = sum(j.experiment == "extend" for j in jobs)
    lm = sum(j.experiment == "lm" for j in jobs)
    said = (f"Lite trains {len(jobs)} runs ({len(jobs) - ext - lm} in the main sweep, {ext} extensions, "
            f"{lm} language models)")
    assert said in " ".join((ROOT / "docs" / "results.md").read_text(encoding="utf-8").split())


def _flat(path) -> str:
    return " ".join((ROOT / path).read_text(encoding="utf-8").split())


def test_paper_cores_prices_in_docs_pipeline_are_what_its_dry_run_gives_now():
    """docs/pipeline.md's paper_core figures (run counts, the headline claim count, the H100-hours
    each way: the range over the factors not measured on a GPU, and the figure at their assumed
    values, with each factor's range) are recomputed by the dry run's own functions on the committed
    params and GPU rows; the LSTM vocabularies it leaves out are counted from the plans."""
    import re

    from posrnn_cli.common.settings.profiles import load_profile
    from posrnn_cli.measure import cost
    from posrnn_cli.measure.gpu_model import FACTORS

    jobs = [j for j in _plan("paper_core")]
    rate = cost.profile_rate(load_profile(ROOT / "params.yaml", "paper_core"), jobs=jobs)
    text, _ = cost.summary(jobs, rate, "paper_core")
    got = {m.group(1): m.groups()[1:] for m in re.finditer(
        r"^  (synthetic tasks|language model|extend)\s+(\d+)\s+([\d,.]+)\s+([\d,.]+)\s+([\d,.]+)$", text, re.M)}
    ranges = {m.group(1): m.groups()[1:] for m in re.finditer(
        r"^  (synthetic tasks|language model)\s+\d+\s+([\d,.]+–[\d,.]+)\s+([\d,.]+–[\d,.]+)\s+([\d,.]+–[\d,.]+)$",
        text, re.M)}
    runs, fp32, amp, packed = got["synthetic tasks"]
    _, lm_fp32, lm_amp, _ = got["language model"]
    r_fp32, r_amp, r_packed = ranges["synthetic tasks"]
    page = _flat("docs/pipeline.md")
    assert f"its {runs} synthetic runs at **{r_packed} H100-hours**" in page, text
    assert f"{r_amp} solo under `amp` + `cuda_graph` and {r_fp32} in fp32" in page, text
    assert f"the language model {ranges['language model'][1]} under `amp` + `cuda_graph`" in page, text
    names = {"pack_gain": "the packing gain g", "amp_gain": "the recurrence's amp gain α",
             "lstm_step": "the LSTM's step over the GRU's"}
    assert set(names) == rate.model.used, text
    for key, words in names.items():
        assert f"{words} ({FACTORS[key].low:g}–{FACTORS[key].high:g})" in page
    shown = ", ".join(FACTORS[k].shown or format(FACTORS[k].assumed, "g") for k in names)
    assert f"assumed {shown.replace(', 4/3', ' and 4/3')}: **{packed}** packed, {amp} and {fp32}." in page, text
    assert (f"{r_packed} H100-hours with the seeds packed ({packed} at the assumed factors), and the language model "
            f"as its own stage, {ranges['language model'][1]} ({lm_amp})") in page
    assert (f"(the {got['extend'][0]} extensions stay solo)" in page
            or f"the {got['extend'][0]} extensions stay" in page)
    headline = load_profile(ROOT / "params.yaml", "paper_core").get("headline") or []
    assert f"each of the {len(headline)} claims it lists as `headline`" in page
    lstm = {p: {j.run_config().task.vocab_size for j in _plan(p) if j.experiment == "fig2" and j.config
                and j.run_config().model.name == "lstm" and 256 <= j.run_config().task.vocab_size <= 16384}
            for p in ("paper", "paper_core")}
    left = sorted(lstm["paper"] - lstm["paper_core"])
    assert f"the LSTM at V = {left[0]:,}–{left[-1]:,} left out" in page and all(v in left for v in (2048, 8192))
    n_core, n_paper = len(lstm["paper_core"]), len(lstm["paper"])
    assert f"`fig2_lstm_pe_95` is scored on {n_core} of its {n_paper} vocabularies" in page


def test_the_times_the_readme_quotes_are_the_measured_repros():
    """Each `dvc repro` time in the README is its measured record (``measure/measured_repros.json``),
    and its figure at a 12 ms step is that record scaled, rounded as the README rounds it."""
    from posrnn_cli.measure.calibrate import last_repro

    readme = _flat("README.md")
    lite = last_repro("lite")
    assert (f"({round(lite['wall_minutes'] * 12 / lite['calibration_ms'])} min on 2 cores at a 12 ms calibration step)"
            in readme)
    b2 = last_repro("beyond2")
    assert (f"{b2['machine']}, {b2['date']}: {b2['wall']} at a # {b2['calibration_ms']} ms calibration step, "
            f"about {round(b2['wall_minutes'] * 12 / b2['calibration_ms'])} min at 12 ms") in readme
