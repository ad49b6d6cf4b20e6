"""Views of a scored profile that other documents quote: the seeds-needed table, the results
page's block, and the terminal's one line per claim. They read the scorecard's rows
(``scorecard.scorecard`` or a committed ``scorecard.json``) and compute nothing of their own, so
no page can say what the scorecard does not.

The results page (docs/results.md, linked from the README) holds each profile's block between
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``; ``posrnn scorecard NAME --page docs/results.md`` rewrites it,
and a test fails when the committed page differs from what the committed scorecard gives.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import check_owned, write_owned

from .pages import block_in, rewrite_blocks

from .answer import lead_lines, open_claims, standing
from .scorecard import (DIRECTION_ONLY, NOT_MEASURED, NOT_REPRODUCED, OPEN, REGIME_WORDS, REPRODUCED, SCOPES, SECTIONS,
                        VERDICTS, at_ceiling, claim_group, count_lines, seeds_text, summarize)

#: how the seeds table and the README name the two scopes
SCOPE_SHORT = {"at_regime": "at regime", "indication": "indication"}


def _open_rows(rows: list[dict]) -> list[tuple[dict, str, dict]]:
    return [(r, scope, r[scope]) for r in rows for scope in SCOPES if r[scope]["verdict"] in OPEN]


def _way_cell(n: dict, way: str) -> str:
    if n.get(way) is None:
        return "—"
    p = n.get(f"{way}80")
    return f"{n[way]:,} ({f'{p:,}' if p is not None else 'over 1,000'})"


#: how the seeds table says which way the data point
TOWARD = {"reproduce": "toward the claim", "reject": "against it", None: "neither, within 1,000"}


def seeds_markdown(rows: list[dict], name: str) -> str:
    """Markdown: every open verdict (inconclusive, underpowered) of a profile with the seeds it
    has, which way the data point, and the seeds to reproduce and to reject, fewest first within
    the way the data point."""
    lines = [f"# Seeds each open claim needs: {name}", "",
             "For every claim whose verdict is open (inconclusive, or underpowered), the seeds per arm at which "
             "the test would read *reproduced*, and those at which it would read *not reproduced*, if every "
             "comparison's mean and spread over seeds stayed as observed (about 50% power), each under the claim's "
             "multiplicity rule (reproduced: every comparison at 95%; not reproduced: Holm's step-down across the "
             "test's comparisons), with the seeds for 80% power in brackets (a rejection's at Holm's first step, "
             "0.05/k). With every effect held, the data point one way: the other reads — (not at the observed "
             "effects, or over 1,000). An SD from 3 seeds has a 95% range of roughly 0.5× to 6× itself: read these "
             "as rough. `posrnn scorecard NAME --seeds` prints this table.", "",
             "| claim | scope | verdict | seeds now | the data point | to reproduce | to reject |",
             "|---|---|---|---|---|---|---|"]
    found = _open_rows(rows)
    def order(item: tuple) -> tuple:
        n = item[2]["seeds_needed"] or {}
        return (n.get("clear") is None, n.get("clear") or 0, item[0]["id"])
    for r, scope, x in sorted(found, key=order):
        n = x.get("seeds_needed") or {}
        lines.append(f"| `{r['id']}` | {SCOPE_SHORT[scope]} | {x['verdict']} | {n.get('now', '—')} | "
                     f"{TOWARD.get(n.get('toward'))} | {_way_cell(n, 'reproduce')} | {_way_cell(n, 'reject')} |")
    if not found:
        lines.append("| (no open verdict) | | | | | | |")
    return "\n".join(lines) + "\n"


#: what ``scorecard --out`` writes
OUT_FILES = ("scorecard.json", "scorecard.md", "seeds.md")


def check_scorecard_out(out_dir: Path) -> Path:
    """Refuse, in one line, a ``scorecard --out`` that would write over a file posrnn cannot prove it
    wrote there (``check_owned``: another file of the same name, one edited since) or through a link."""
    out_dir = Path(out_dir)
    if out_dir.is_symlink():
        raise PosrnnError(f"--out {out_dir} is a symbolic link; posrnn does not write through links: pass the folder "
                          "itself")
    if out_dir.exists() and not out_dir.is_dir():
        raise PosrnnError(f"--out {out_dir} is a file, not a directory; pass a folder")
    for name in OUT_FILES:
        check_owned(out_dir / name, None, "--out")
    return out_dir


def write_seeds(rows: list[dict], out_dir: Path, name: str) -> Path:
    path = Path(out_dir) / "seeds.md"
    write_owned(path, seeds_markdown(rows, name))
    return path


#: how the results page and the terminal introduce the partial claims' counts
PARTIAL = "partial, counted apart"



def score_profile(folder: Path, label: str, power: Optional[dict] = None, out: Optional[Path] = None,
                  page: Optional[Path] = None) -> tuple[list[dict], Optional[list[str]]]:
    """``posrnn scorecard``'s work: every claim scored on the tables in ``folder`` (``power``: the
    profile's stated design); with ``out`` (checked first), scorecard.md, scorecard.json and seeds.md
    written there; with ``page``, the blocks of profile ``label`` in it rewritten → (the rows, the
    blocks rewritten: None without ``page``)."""
    from .scorecard import scorecard, write_scorecard

    if out is not None:
        check_scorecard_out(out)
    rows = write_scorecard(folder, out_dir=out, power=power) if out is not None else scorecard(folder, power=power)
    if out is not None:
        write_seeds(rows, out, label)
    return rows, (update_page(page, rows, label) if page is not None else None)

def _cell(x: dict) -> str:
    if x["verdict"] == "not measured":
        return "—"
    text = x["verdict"] + (" (partial)" if x.get("partial") else "")
    needs = seeds_text(x.get("seeds_needed"))
    return f"{text}; seeds needed: {needs}" if needs else text


def readme_block(rows: list[dict], name: str) -> str:
    """The results page's block for one profile: the counts per section and scope, then one
    line per claim that anything was measured for (verdict, seeds needed)."""
    summary = summarize(rows)
    out = [f"<!-- results:{name} -->",
           f"*Generated from `results/{name}/scorecard/scorecard.json` by `posrnn scorecard {name} --page "
           f"docs/results.md`; a test fails when this block differs from the scorecard.*", ""]
    for section, title in SECTIONS.items():
        if section not in summary:
            continue
        s = summary[section]
        where = REGIME_WORDS[section]
        out += [f"**{title}** ({s['at_regime']['claims']} claims)", "",
                *(f"- {line}" for line in count_lines(section, s, PARTIAL)), ""]
        measured = [r for r in rows if r["section"] == section
                    and any(r[scope]["verdict"] != "not measured" for scope in SCOPES)]
        if measured:
            out += [f"| claim | {where} | indication |", "|---|---|---|"]
            for r in measured:
                impl = " (implementation check)" if r.get("implementation") else ""
                out.append(f"| `{r['id']}`{impl} | {_cell(r['at_regime'])} | {_cell(r['indication'])} |")
            out.append("")
    out.append(f"<!-- /results:{name} -->")
    return "\n".join(out)


#: the prefix of a profile's findings block (the README's and the results page's sentences)
FINDINGS = "findings-"


def _short_measured(text: str, limit: int = 320) -> str:
    """A measured string without its per-seed lists and seed note, cut at ``limit``."""
    text = re.sub(r" \(per seed [^)]*\)", "", text)
    text = re.sub(r"; seeds [0-9 |]*[0-9]", "", text).replace(" || ", "; ")
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


#: the prefix of a profile's brief findings block (the README's: verdict and claim only)
BRIEF = "brief-"


def finding(r: dict, scope: str = "at_regime", brief: bool = False) -> str:
    """One sentence about a claim, generated from its scorecard row: the verdict first, then the
    claim in the paper's (or hypothesis's) words, then what was measured, or why it could not be
    read, or the seeds an open verdict needs."""
    x = r[scope]
    verdict = x["verdict"] + (" (partial)" if x.get("partial") else "")
    head = f"- **{verdict}**: {r['claim'].rstrip('.')} (`{r['id']}`)."
    if brief:
        return head
    if x["verdict"] in ("not testable", "too few seeds"):
        reason = x["reason"].rstrip(".")
        return f"{head} {reason[:1].upper()}{reason[1:]}."
    tail = f" Measured: {_short_measured(x['measured'])}."
    needs = seeds_text(x.get("seeds_needed"))
    return head + tail + (f" Seeds: {needs}." if needs else "")


def findings_block(rows: list[dict], name: str, section: str = "beyond", brief: bool = False) -> str:
    """A profile's findings in sentences, one a claim measured at its regime in ``section``
    (``brief``: the verdict and the claim, no measurement)."""
    tag = (BRIEF if brief else FINDINGS) + name
    out = [f"<!-- results:{tag} -->",
           f"*Generated from `results/{name}/scorecard/scorecard.json` by `posrnn scorecard {name} --page FILE`; "
           f"a test fails when these sentences differ from the scorecard.*", ""]
    out += [finding(r, brief=brief) for r in rows if r["section"] == section
            and r["at_regime"]["verdict"] != NOT_MEASURED]
    out.append(f"<!-- /results:{tag} -->")
    return "\n".join(out)


def page_blocks(rows: list[dict], name: str) -> dict[str, str]:
    """Every block a page may hold for profile ``name``: its results block and its findings."""
    return {name: readme_block(rows, name), FINDINGS + name: findings_block(rows, name),
            BRIEF + name: findings_block(rows, name, brief=True)}


def _missing(page: Path, name: str) -> str:
    return (f"{page} has no results block for {name}; add the two lines '<!-- results:{name} -->' and "
            f"'<!-- /results:{name} -->', each a line of its own outside code fences, where it should go")


def update_page(page: Path, rows: list[dict], name: str) -> list[str]:
    """Rewrite each of ``name``'s blocks that ``page`` holds, in one write (``pages``); the names
    of those that changed. A page with none of them, or with markers that nest or do not pair, is
    refused and left as it was."""
    return rewrite_blocks(page, page_blocks(rows, name), _missing(page, name))


def readme_block_in(text: str, name: str) -> Optional[str]:
    """The block for ``name`` as the page holds it, or None."""
    return block_in(text, name)


def update_readme(readme: Path, rows: list[dict], name: str) -> bool:
    """Rewrite ``name``'s block in ``readme`` (atomically); True when it changed. A README with
    no block for the profile is refused: where the block goes is the README's choice."""
    return update_block(readme, name, readme_block(rows, name))


def update_block(readme: Path, name: str, block: str) -> bool:
    """Rewrite the block ``name`` in ``readme`` with ``block`` (atomically); True when it changed."""
    return bool(rewrite_blocks(readme, {name: block}, _missing(readme, name)))


# ---- the terminal view: one line per claim ---------------------------------------------------------
def _needs_cell(r: dict) -> str:
    """The seeds an open verdict needs, as ``clear/80%`` (``>1000`` beyond reach); the verdict at
    the regime first, else the indication's."""
    for scope in SCOPES:
        n = r[scope].get("seeds_needed")
        if n:
            if n.get("clear") is None:
                return ">1000"
            way = "+" if n.get("toward") == "reproduce" else "−"
            return f"{way}{n['clear']:,}/" + (f"{n['power80']:,}" if n.get("power80") is not None else ">1000")
    return ""


def _verdict_cell(x: dict):
    from rich.text import Text

    style = "dim" if x["verdict"] == NOT_MEASURED else ""
    return Text(x["verdict"] + ("*" if x.get("partial") else ""), style=style)


def measured_nowhere(row: dict) -> bool:
    """Whether a scored claim is measured neither at the papers' regime nor off it."""
    return all(row[scope]["verdict"] == NOT_MEASURED for scope in SCOPES)


def scorecard_lines(rows: list[dict], detail_hint: str = "", profile: str = ""):
    """The scorecard for a terminal: a header naming ``profile``, per section its counts, then one
    line per claim measured somewhere (its id, never cut; the verdict at the regime and the
    indication off it, in words; the seeds an open verdict needs), the claims measured nowhere
    behind one count line. ``detail_hint`` ends it: where the measurements and reasons are."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    summary = summarize(rows)
    parts = [Text(f"Scorecard of profile {profile}: each claim of the papers beside what it measured", style="bold")
             ] if profile else []
    for section, title in SECTIONS.items():
        if section not in summary:
            continue
        s = summary[section]
        parts += [Text(f"\n{title} ({s['at_regime']['claims']} claims)" if parts
                       else f"{title} ({s['at_regime']['claims']} claims)", style="bold"),
                  *(Text(line) for line in count_lines(section, s, PARTIAL))]
        shown = [r for r in rows if r["section"] == section and not measured_nowhere(r)]
        if not shown:
            continue
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
        t.add_column("claim", overflow="fold", no_wrap=True)
        t.add_column("at regime", overflow="fold")
        t.add_column("indication", overflow="fold")
        t.add_column("seeds", justify="right", no_wrap=True)
        for r in shown:
            t.add_row(r["id"], _verdict_cell(r["at_regime"]), _verdict_cell(r["indication"]), _needs_cell(r))
        parts.append(t)
    hidden = sum(map(measured_nowhere, rows))
    if hidden:
        parts.append(Text(f"\n{hidden} of {len(rows)} claims measured nowhere in this profile (not at the papers' "
                          "regime, not off it) are not listed; --detail lists every claim."))
    legend = ("*: partial (a named model not measured). seeds: for an open verdict, the way the data point "
              "(+ to reproduce, − to reject) and the seeds that reach it / the seeds for 80% power, if the effects "
              "and spreads stay as measured (>1000: out of reach); the other way: posrnn scorecard NAME --seeds.")
    parts.append(Text(legend + (f" {detail_hint}" if detail_hint else ""), style="dim"))
    return Group(*parts)


# ---- across profiles: each claim's verdict in every profile ------------------------------------------
#: the verdicts that decide a claim, and what each says of it: two profiles disagree when they say
#: different things. "Direction only" says the direction is shown and the stated size is not; for a
#: threshold claim (the claim *is* a stated size: "reaches 95%") it agrees with "not reproduced"
#: that the claim as stated does not hold, and for every other kind it stands apart from both
DECIDED = {REPRODUCED: "holds", DIRECTION_ONLY: "direction only", NOT_REPRODUCED: "does not hold"}
#: the claim kinds whose "direction only" reads as "does not hold" (``DECIDED``)
SIZE_KINDS = ("threshold",)
#: the name of the results page's block that holds the table across profiles
ACROSS = "across"


def stance(word: str, kind: str) -> str:
    """What a decided verdict says of a claim of ``kind`` (``DECIDED``, narrowed by ``SIZE_KINDS``)."""
    return DECIDED[NOT_REPRODUCED] if word == DIRECTION_ONLY and kind in SIZE_KINDS else DECIDED[word]


def _shown(r: dict) -> tuple[str, Optional[str]]:
    """What one profile says of a claim: its verdict at the regime where measured, else its
    indication ("—" when neither is measured); and the decided word, if any."""
    for scope in SCOPES:
        x = r[scope]
        if x["verdict"] != NOT_MEASURED:
            text = x["verdict"] + ("*" if x.get("partial") else "")
            return text, x["verdict"] if x["verdict"] in DECIDED else None
    return "—", None


def across(scored: dict[str, list[dict]]) -> list[dict]:
    """One entry a claim measured in any profile: ``cells`` (profile → what it says), and
    ``disagree`` (True where two profiles decide it differently, ``stance``)."""
    ids = list(dict.fromkeys(r["id"] for rows in scored.values() for r in rows))
    by_profile = {p: {r["id"]: r for r in rows} for p, rows in scored.items()}
    out = []
    for cid in ids:
        cells, decided = {}, set()
        for p, rows in by_profile.items():
            text, word = _shown(rows[cid]) if cid in rows else ("—", None)
            cells[p] = text
            if word:
                decided.add(stance(word, rows[cid].get("kind", "")))
        if any(c != "—" for c in cells.values()):
            out.append({"id": cid, "cells": cells, "disagree": len(decided) > 1})
    return out


def across_markdown(scored: dict[str, list[dict]]) -> str:
    """The results page's block: one line a claim, one column a profile, disagreements marked."""
    names = list(scored)
    entries = across(scored)
    n = sum(e["disagree"] for e in entries)
    out = [f"<!-- results:{ACROSS} -->",
           f"*Generated from `results/NAME/scorecard/scorecard.json` of {', '.join(names)} by `posrnn scorecard "
           f"--across --page docs/results.md`; a test fails when this block differs from the scorecards.*", "",
           "Each profile's verdict at the claim's regime where it measured one, else its indication off the regime; "
           f"*: partial. **≠** marks a claim two profiles decide differently ({n} of {len(entries)} claims measured).",
           "", f"| claim | {' | '.join(names)} |  |", "|---|" + "---|" * len(names) + "---|"]
    for e in entries:
        out.append(f"| `{e['id']}` | " + " | ".join(e["cells"][p] for p in names) +
                   f" | {'**≠**' if e['disagree'] else ''} |")
    out.append(f"<!-- /results:{ACROSS} -->")
    return "\n".join(out)


#: the terminal's short verdicts, so that five profiles fit 80 columns
SHORT = {"reproduced": "R", "not reproduced": "NR", "direction only": "DO", "inconclusive": "inc",
         "underpowered": "up", "not testable": "NT", "too few seeds": "few"}


def _short(cell: str) -> str:
    star = cell.endswith("*")
    word = cell.rstrip("*")
    return SHORT.get(word, word) + ("*" if star else "")


def across_lines(scored: dict[str, list[dict]]):
    """The table across profiles for a terminal (one line a claim where the width allows, else two:
    ``across_view.AcrossView``)."""
    from rich.console import Group
    from rich.text import Text

    from .across_view import AcrossView

    rows = [(e["id"], [_short(e["cells"][p]) for p in scored], e["disagree"]) for e in across(scored)]
    legend = ("Each profile's verdict at the regime where measured, else its indication: " +
              ", ".join(f"{v} {k}" for k, v in SHORT.items()) + "; *: partial; ≠: two profiles decide the claim "
              "differently. In words: posrnn scorecard --across --json, or docs/results.md.")
    return Group(AcrossView(list(scored), rows), Text(legend, style="dim"))


def committed_scorecards(root: Path, profiles: list[str]) -> dict[str, list[dict]]:
    """The committed scorecards (``results/NAME/scorecard/scorecard.json``) of the profiles that
    have one, in ``profiles``' order."""
    from posrnn_cli.common.files.io import read_json

    out = {}
    for p in profiles:
        path = Path(root) / "results" / p / "scorecard" / "scorecard.json"
        if path.is_file():
            try:
                out[p] = read_json(path)["rows"]
                if not isinstance(out[p], list) or not all(isinstance(r, dict) for r in out[p]):
                    raise TypeError
            except (OSError, KeyError, TypeError, PosrnnError):
                raise PosrnnError(f"{path} is not a scorecard; rewrite it with posrnn scorecard {p} --results "
                                  f"results/{p}/tables --out results/{p}/scorecard") from None
    if not out:
        raise PosrnnError(f"no profile has a committed scorecard under {Path(root) / 'results'}; run dvc repro first")
    return out


# ---- the README's answer: what the scorecards say of PE for the GRU and LSTM ------------------------
#: the name of the README's block that answers its question from every committed scorecard
ANSWER = "answer"
#: the papers' recurrent models the answer speaks of
ANSWER_MODELS = ("gru", "lstm")


def _measured_text(rows: list[dict], scope: str) -> Optional[str]:
    """"3 reproduced, 14 inconclusive, 5 not reproduced (2 of them partial)": the verdicts of the
    claims of ``rows`` measured in ``scope``; None when none is measured."""
    xs = [r[scope] for r in rows if r[scope]["verdict"] != NOT_MEASURED]
    if not xs:
        return None
    words = [x["verdict"] for x in xs]
    partial = sum(bool(x.get("partial")) for x in xs)
    return (", ".join(f"{words.count(v)} {v}" for v in VERDICTS if v in words) +
            (f" ({partial} of them partial)" if partial else ""))


def _per_profile(scored: dict[str, list[dict]], keep, scope: str) -> list[str]:
    out = []
    for p, rows in scored.items():
        text = _measured_text([r for r in rows if keep(r)], scope)
        if text:
            out.append(f"`{p}`: {text}")
    return out


def _joined(parts: list[str]) -> str:
    return "; ".join(parts)


def answer_block(scored: dict[str, list[dict]]) -> str:
    """The README's answer, from every committed scorecard: per recurrent core, PE against vanilla
    in words with its effect, interval and seeds (``answer.lead_lines``); what is open; Morita's
    claims at the papers' regime; the project's hypotheses about other cores."""
    def rnn(r: dict) -> bool:
        return claim_group(r) == "morita" and bool(set(r.get("models") or []) & set(ANSWER_MODELS))
    first = next(iter(scored.values()))
    n_rnn, n_morita = sum(map(rnn, first)), sum(claim_group(r) == "morita" for r in first)
    leads = lead_lines(scored)
    n_open = len(open_claims(scored, ANSWER_MODELS))
    at = _per_profile(scored, lambda r: claim_group(r) == "morita", "at_regime")
    hyp = _per_profile(scored, lambda r: claim_group(r) == "hypotheses", "at_regime")
    cpu = ("What the CPU profiles indicate of PE against vanilla, in token accuracy (per core, the reading at the "
           "largest vocabulary, then with the most seeds: the rule in `posrnn_cli/analysis/answer.py`):\n\n" +
           "\n".join(leads) if leads else "No committed profile compares PE with vanilla on a recurrent core.")
    opened = (f"{standing(scored)} Open: {n_open} of Morita's {n_rnn} claims about the GRU and LSTM are measured "
              "but decided nowhere (inconclusive, underpowered or not testable wherever read).").lstrip()
    paper = (f"At the papers' regime, Morita's claims measured: {_joined(at)}." if at else
             f"At the papers' regime none of Morita's {n_morita} claims is measured in any committed profile; "
             f"`paper_core`, below, prices its headline questions on one GPU.")
    beyond = (f" Beyond the papers, the project's hypotheses about other cores are read at their own regime in "
              f"{', '.join(h.split(':')[0] for h in hyp)} (below)." if hyp else "")
    return "\n".join([f"<!-- results:{ANSWER} -->",
                      f"*Generated from the committed `results/NAME/scorecard/scorecard.json` by `posrnn scorecard "
                      f"--across --page README.md`; a test fails when this block differs from them.*", "",
                      cpu, "", f"{opened} {paper}{beyond}", f"<!-- /results:{ANSWER} -->"])


# ---- the README's count: the papers' claims the CPU profiles decide, with its qualifiers -------------
#: the name of the README's block that counts them
COUNT = "count"
#: the profiles at CPU scale the count reads
CPU_PROFILES = ("lite", "lite_extra", "lite_seeds", "lite_round2")


def decided_count(scored: dict[str, list[dict]]) -> dict:
    """The papers' claims the CPU profiles decide (reproduced, direction only or not reproduced,
    at either scope, in any of ``CPU_PROFILES``), with the qualifiers a reader needs: those
    decided only by a partial result, the implementation checks, those decided both ways (two
    profiles' readings disagree, ``across``), the strict count without all three, and the claims
    read "not testable" at the ceiling somewhere (not decided, counted apart)."""
    cpu = {p: [r for r in rows if r["section"] == "papers"] for p, rows in scored.items() if p in CPU_PROFILES}
    ids = list(dict.fromkeys(r["id"] for rows in cpu.values() for r in rows))
    found: dict[str, list[dict]] = {i: [] for i in ids}
    impl, ceiling = set(), set()
    for rows in cpu.values():
        for r in rows:
            impl |= {r["id"]} if r.get("implementation") else set()
            for scope in SCOPES:
                x = r[scope]
                if x["verdict"] in DECIDED:
                    found[r["id"]].append(x)
                ceiling |= {r["id"]} if at_ceiling(x) else set()
    decided = [i for i in ids if found[i]]
    partial = [i for i in decided if all(x.get("partial") for x in found[i])]
    both = [e["id"] for e in across(cpu) if e["disagree"] and e["id"] in decided]
    checks = [i for i in decided if i in impl]
    strict = [i for i in decided if i not in partial + both + checks]
    return {"profiles": list(cpu), "claims": len(ids), "decided": decided, "partial": partial,
            "implementation": checks, "both_ways": both, "strict": strict,
            "ceiling": [i for i in ids if i in ceiling and i not in decided]}


def _ids(ids: list[str]) -> str:
    return ", ".join(f"`{i}`" for i in ids)


def count_block(scored: dict[str, list[dict]]) -> str:
    """The README's count line (``decided_count``), generated."""
    c = decided_count(scored)
    n = len
    text = (f"The CPU profiles ({', '.join(f'`{p}`' for p in c['profiles'])}) decide {n(c['decided'])} of the papers' "
            f"{c['claims']} claims; strictly "
            f"{n(c['strict'])}, without the {n(c['partial'])} decided only by a partial result, the "
            f"{n(c['implementation'])} implementation checks and the {n(c['both_ways'])} decided both ways "
            f"({_ids(c['both_ways']) or 'none'}). {n(c['ceiling'])} read not testable at the ceiling "
            f"({_ids(c['ceiling']) or 'none'}), counted apart.")
    return "\n".join([f"<!-- results:{COUNT} -->",
                      "*Generated from the committed scorecards by `posrnn scorecard --across --page README.md`; "
                      "a test fails when this block differs from them.*", "", text, f"<!-- /results:{COUNT} -->"])


def across_blocks(scored: dict[str, list[dict]]) -> dict[str, str]:
    """Every block built from all the committed scorecards: the table across profiles, the answer,
    the count."""
    return {ACROSS: across_markdown(scored), ANSWER: answer_block(scored), COUNT: count_block(scored)}


def update_across_page(page: Path, scored: dict[str, list[dict]]) -> list[str]:
    """Rewrite each across-profile block ``page`` holds (``across_blocks``), in one write; the
    names of those that changed. A page with none of them is refused."""
    return rewrite_blocks(page, across_blocks(scored),
                          f"{page} has no block built across profiles; add the two lines '<!-- results:{ACROSS} -->' "
                          f"and '<!-- /results:{ACROSS} -->' (or {ANSWER}'s), each a line of its own outside code "
                          "fences, where it should go")
