"""``posrnn status``: where a profile stands, read from its run directories (no torch).

For each experiment of the profile: how many of its runs are finished, unfinished (begun, not at
their last iteration), not started, of another config (what --force would replace) and stale
(trained by other code than this); then the one command to run next. Only reads: the plan
(``sweep.plan``), each run's ``config.yaml``, checkpoint names and code record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .common.stages.experiments import EXPERIMENTS, JOB_KINDS

#: the counts of one experiment, in the order the table shows them
COUNTS = ("finished", "unfinished", "not started", "other config", "stale")


@dataclass
class ExperimentStatus:
    name: str
    trains: bool  # its jobs train run directories (else: analyses of another experiment's runs)
    jobs: int
    counts: dict = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))

    @property
    def complete(self) -> bool:
        return self.counts["finished"] == self.jobs and not self.counts["stale"]


def is_stale(job) -> bool:
    """Whether the job's run records other numerics than this code computes for it here
    (``common.files.rundir.code_state`` "other"; a run without a record is not counted stale)."""
    from .common.files.rundir import code_state

    return code_state(Path(job.run_dir), job.run_config(), JOB_KINDS[job.kind].numerics) == "other"


def profile_status(params: Path, profile: str, runs_root: Optional[Path] = None) -> list[ExperimentStatus]:
    """The counts of every experiment the profile defines, in pipeline order (see the module's doc)."""
    from .common.settings.profiles import load_profile
    from .sweep import status
    from .sweep.plan import plan

    names = [name for name in EXPERIMENTS if name in load_profile(params, profile)]
    jobs = plan(params, profile, names, runs_root)
    rows = {name: ExperimentStatus(name, EXPERIMENTS[name].trains, 0) for name in names}
    for job in jobs:
        st = rows[job.experiment]
        st.jobs += 1
        if not st.trains:
            continue
        state = status(job)
        st.counts[{"done": "finished", "resume": "unfinished", "new": "not started"}.get(state, "other config")] += 1
        if state in ("resume", "done") and is_stale(job):
            st.counts["stale"] += 1
    return list(rows.values())


def next_command(profile: str, rows: list[ExperimentStatus], results: Path, active: bool = True) -> tuple[str, str]:
    """(the command to run next, why): runs of another config or stale code first; on a profile
    with nothing trained whose results are committed (a fresh clone), reading them; then what is
    not trained, then the tables, then the scorecard. ``active``: whether ``profile`` is the one
    ``dvc repro`` runs."""
    repro = "dvc repro" if active else f"posrnn profile use {profile} && dvc repro"
    trained = [r for r in rows if r.trains]
    other = " ".join(r.name for r in trained if r.counts["other config"])
    if other:
        return f"posrnn sweep {other} -p {profile} --dry-run", ("it names the runs of another config; --force replaces "
                                                                "them")
    stale = " ".join(r.name for r in trained if r.counts["stale"])
    if stale:
        return f"posrnn sweep {stale} -p {profile} --retrain-stale", "runs trained by other code than this"
    card = Path(results) / profile / "scorecard" / "scorecard.json"
    if card.is_file() and not any(r.counts["finished"] or r.counts["unfinished"] for r in trained):
        return (f"posrnn scorecard {profile}",
                f"nothing trained here yet, but the committed results in results/{profile} are readable now; "
                f"{repro} re-trains the runs and re-makes them")
    if not all(r.complete for r in trained):
        return repro, f"runs to train; the runs alone: posrnn sweep -p {profile}"
    if not (Path(results) / profile / "tables").is_dir():
        return repro, "the runs are trained; the analyses, tables, figures and scorecard remain"
    return f"posrnn scorecard {profile}", "everything is trained and aggregated"
