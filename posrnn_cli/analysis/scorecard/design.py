"""Whether a profile's design (its ``power:`` section in params.yaml) was stated before its
results, so that it may label an open result *underpowered*.

A design counts only if git shows it committed before the profile's first committed result:
the ``power:`` section at the parent of the first commit that touched ``results/NAME`` must hold
the same pilot and the same seed counts as today. A profile with no committed result yet has
nothing to precede: its design, as it stands, comes first. Where git cannot tell (no git, not a
work tree, a shallow clone whose history stops short of the results), the scorecard reads the
committed record ``stated_before_results`` beside the section instead; a test checks, in a
full clone, that the record says what git says, so every clone gives the same verdicts. A design
that does not count labels nothing: its claims' open results read *inconclusive*, with the seeds
they need.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional

import yaml


def _git(root: Path, *args: str) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _same(a: Optional[dict], b: dict) -> bool:
    return (isinstance(a, dict) and str(a.get("pilot", "")).strip() == str(b.get("pilot", "")).strip()
            and a.get("seeds_needed") == b.get("seeds_needed"))


def stated_in_git(root: Path, profile: str, power: dict, params_name: str = "params.yaml") -> Optional[bool]:
    """True when git shows ``power`` (this profile's section as it stands) committed before the
    first commit of ``results/<profile>`` (or no result is committed yet); False when it was
    not; None when git cannot tell (no git, not a work tree, a shallow clone)."""
    if _git(root, "rev-parse", "--is-shallow-repository") != "false":
        return None
    commits = _git(root, "log", "--reverse", "--format=%H", "--", f"results/{profile}")
    if commits is None:
        return None
    if not commits:
        return True
    first = commits.splitlines()[0]
    before = _git(root, "show", f"{first}^:{params_name}")
    if before is None:  # the results came in the first commit, or params.yaml was not there
        return False
    try:
        prior = ((yaml.load(before, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {})
                 .get("profiles") or {}).get(profile) or {}
    except yaml.YAMLError:
        return False
    return _same(prior.get("power") if isinstance(prior, dict) else None, power)


def design_as_stated(power: Optional[dict], profile: Optional[str], root: Path,
                     params_name: str = "params.yaml") -> tuple[Optional[dict], str]:
    """The design the scorecard may use, and how that was decided: ``power`` when it was stated
    before the profile's results (git, else the committed record), else ``None``."""
    if not isinstance(power, dict):  # malformed: validate_power refuses it in one line
        return power, "not read"
    if not power or profile is None:
        return None, "no design"
    by_git = stated_in_git(root, profile, power, params_name)
    if by_git is not None:
        how = "git" if by_git else "git: committed after the profile's first result"
        return (power if by_git else None), how
    recorded = power.get("stated_before_results") is True
    return (power if recorded else None), "the committed record" + ("" if recorded else ": not stated before")
