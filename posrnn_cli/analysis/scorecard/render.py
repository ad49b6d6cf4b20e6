"""Views of the scored rows: markdown (``scorecard.md``), JSON (``scorecard.json``) and the rich
table; they read the rows and decide nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from posrnn_cli.common.files.io import json_text, write_owned_together

from .core import (DIRECTION_ONLY, INCONCLUSIVE, MIN_SEEDS, NOT_MEASURED, NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED,
                   SCOPES, TOO_FEW_SEEDS, VERDICTS)
from .claims import GROUPS, REGIME_WORDS, SECTIONS, claim_group
from .score import CEILING, scorecard, summarize


#: how the scorecard introduces the partial claims' counts (the results page says it shorter)
PARTIAL = "partial (a named model not measured), counted apart"


def count_text(c: dict, partial: str = PARTIAL) -> str:
    """One scope's counts of a section (``summarize``): "3 reproduced, 1 inconclusive", then the
    partial claims' counts after ``partial``; "none" when there are none."""
    text = ", ".join(f"{c[v]} {v}" + (f" ({c['ceiling']} at the ceiling)" if v == NOT_TESTABLE and c.get("ceiling")
                                       else "") for v in VERDICTS if c.get(v))
    if c.get("partial"):
        text += f"; {partial}: " + ", ".join(f"{n} {v}" for v, n in c["partial"].items())
    return text or "none"


def count_lines(section: str, s: dict, partial: str = PARTIAL) -> list[str]:
    """A section's count lines (``s``: its ``summarize`` entry), one per count group
    (``claims.GROUPS``, Morita's claims first) at its regime, then one per group off it."""
    where = REGIME_WORDS[section]
    groups = s["groups"]
    at = [f"{GROUPS[g][1]} {where} ({c['at_regime']['claims']} claims): {count_text(c['at_regime'], partial)}."
          for g, c in groups.items()]
    off = [f"{GROUPS[g][1]}, indications off {where.split(' ', 1)[1]}: {count_text(c['indication'], partial)}."
           for g, c in groups.items()]
    return at + off


def _md(text: Any) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def scorecard_markdown(rows: list[dict], title: str = "Reproduction scorecard") -> str:
    """Markdown: the counts per scope, then one table per section: claim | paper | regime |
    at the papers' regime | indication off the regime."""
    summary = summarize(rows)
    lines = [f"# {title}", "",
             "Verdicts are read at the regime each paper states its claim in; cells outside it give an indication "
             "only. Intervals are 95% Student-t intervals over seeds (paired by seed); fewer than "
             f"{MIN_SEEDS} seeds per arm is never a verdict. *Underpowered*: measured, but with too few seeds to "
             "decide: a null claim's interval too wide for its margin, or an open result of a claim to which the "
             "profile's design (its `power:` in params.yaml, stated before the runs) gives fewer seeds than its "
             "pilot says the claim needs. *Not testable*: the measure starts at its ceiling before "
             "training; or some compared arm is not shown above its floor (its interval reaches the highest line of "
             "chance and the baselines a reader would name: recall-last, order-blind, order statistics, position); "
             f"or every compared arm's token accuracy is at or above {CEILING:g} (*ceiling*, counted apart). "
             "*Not measured*: no data. For an open verdict (inconclusive, underpowered) each cell gives the seeds to "
             "reproduce and the seeds to reject, each under the claim's multiplicity rule, if the effects and spreads "
             "stayed as observed, with the seeds for 80% power, and which way the data point (seeds.md lists them "
             "all).", ""]
    for section, title_s in SECTIONS.items():
        if section not in summary:
            continue
        where = REGIME_WORDS[section]
        lines += [f"## {title_s}", "", *(f"- {line}" for line in count_lines(section, summary[section])), "",
                  f"| claim | paper | regime | {where} | indication off the regime |",
                  "|---|---|---|---|---|"]
        for r in [r for r in rows if r["section"] == section]:
            cells = []
            for scope in SCOPES:
                x = r[scope]
                tag = " (partial)" if x["partial"] else ""
                measured = "" if x["measured"] == "—" else f" Measured: {_md(x['measured'])}"
                cells.append(f"**{_md(x['verdict'])}{tag}**: {_md(x['reason'])}.{measured}{_needs_text(x)}")
            models = f" ({', '.join(r['models'])})" if r["models"] else ""
            impl = " *(a check of the implementation, not a finding)*" if r.get("implementation") else ""
            lines.append(f"| `{_md(r['id'])}`: {_md(r['claim'])}{impl} | {_md(r['paper'])} | "
                         f"{_md(r['regime'])}{_md(models)} | {cells[0]} | {cells[1]} |")
        lines.append("")
    return "\n".join(lines)


def way_text(needs: dict, way: str) -> str:
    """The seeds one way ("reproduce" or "reject"): "about 7 (80% power: 10)", or why none."""
    n = needs.get(way)
    if n is None:
        return "not at the observed effects (or over 1,000)"
    p = needs.get(f"{way}80")
    return f"about {n:,} (80% power: {f'{p:,}' if p is not None else 'over 1,000'})"


def seeds_text(needs: Optional[dict]) -> str:
    """An open verdict's seeds both ways, the way the data point first: "the data point to
    rejecting: about 4 (80% power: 4); to reproduce: not at the observed effects …"."""
    if not needs:
        return ""
    toward = needs.get("toward")
    if toward is None:
        return "over 1,000 either way, at the observed effects"
    other = "reject" if toward == "reproduce" else "reproduce"
    return (f"the data point to {'reproducing' if toward == 'reproduce' else 'rejecting'}: {way_text(needs, toward)}; "
            f"to {other}: {way_text(needs, other)}")


def _needs_text(x: dict) -> str:
    text = seeds_text(x.get("seeds_needed"))
    return f" Seeds needed: {text}, now {x['seeds_needed']['now']}." if text else ""


def write_scorecard(results_dir: Path, claims: Optional[list[dict]] = None, out_dir: Optional[Path] = None,
                    power: Optional[dict] = None) -> list[dict]:
    """Score ``results_dir`` (with the profile's ``power`` design, if any) and write
    ``scorecard.json`` and ``scorecard.md`` into ``out_dir`` (default: ``results_dir``), atomically."""
    results_dir = Path(results_dir)
    out_dir = Path(out_dir) if out_dir is not None else results_dir
    rows = scorecard(results_dir, claims, power)
    name = results_dir.parent.name if results_dir.name == "tables" else results_dir.name
    files = {out_dir / "scorecard.json": json_text({"results": name, "summary": summarize(rows), "rows": rows}),
             out_dir / "scorecard.md": scorecard_markdown(rows, title=f"Reproduction scorecard: {name}")}
    write_owned_together({p: text.encode() for p, text in files.items()})
    return rows


_STYLE = {REPRODUCED: "bold green", DIRECTION_ONLY: "yellow", TOO_FEW_SEEDS: "magenta", INCONCLUSIVE: "cyan",
          NOT_REPRODUCED: "bold red", NOT_MEASURED: "dim"}


def scorecard_rich_table(rows: list[dict], counts: bool = True):
    """The scorecard in full as ``rich`` renderables: the counts, then one block a claim (its id on
    its own line, the claim, its regime, and each scope's verdict, reason, measurement and seeds
    needed, indented). Text wraps at word boundaries to the console's width; an id is one word and
    is never broken (``posrnn scorecard --detail``, ``--claim ID``)."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.text import Text

    summary = summarize(rows)
    parts: list = []  # the counts (without ``counts``: the claims alone, as --claim prints them)
    for section, title in SECTIONS.items():
        if section in summary and counts:
            parts.append(Text(f"{title}: " + " ".join(count_lines(section, summary[section]))))
    for r in rows:
        models = f" ({', '.join(r['models'])})" if r["models"] else ""
        head = Text(r["id"], style="bold")
        head.append(f"  [{GROUPS[claim_group(r)][1]}]", style="dim")
        body = [Text(r["claim"]), Text(f"paper: {r['paper']}. regime: {r['regime']}{models}.", style="dim")]
        for scope, where in zip(SCOPES, (REGIME_WORDS[r["section"]], "indication off the regime")):
            x = r[scope]
            cell = Text(f"{where}: ")
            cell.append(x["verdict"] + (" (partial)" if x["partial"] else ""), style=_STYLE.get(x["verdict"], ""))
            cell.append(f": {x['reason']}.")
            if x["measured"] != "—":
                cell.append(f" Measured: {x['measured']}")
            cell.append(_needs_text(x))
            body.append(cell)
        parts += [Text(""), head, Padding(Group(*body), (0, 0, 0, 2))]
    return Group(*parts)
