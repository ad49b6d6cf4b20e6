"""From a profile to jobs: every experiment of the papers as a grid of runs.

An experiment's section in a profile names its grid and shared settings in short keys::

    fig2:
      cells: [{model: gru, vocab: 16}, {model: gru, vocab: 32}]   # one dict per cell
      pe: [none, sinusoidal]
      seeds: [111, 222, 333]
      length: 8            # shared by every cell (short keys: see SHORT)
      hidden: 64
      iterations: 4000
      set: {train.lr: 0.001}   # any other config key, dotted
      keep_checkpoints: last   # or all; the registry's default for the experiment (not inherited by like:)
    forms:
      like: fig2           # the settings of another experiment, so the two compare
      cells: [{model: gru, vocab: 32}]
      pe: [random, learnable]
      seeds: [111]

A job is one run directory: ``runs/<profile>/<experiment>/<cell>-<pe>-s<seed>`` (cells named
from their values, e.g. ``gru-v32``). The base config of every run is the ``task`` /
``model`` / ``train`` sections of the same params file; the profile's device, threads and
``n_test`` apply to all runs. Nothing here imports torch: planning is instant and the jobs
are plain data, sent to worker processes or SLURM tasks.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from ..common.settings import keys
from ..common.settings.config import CELL_IGNORED, RunConfig, resolve_config, set_key
from ..common.host.machine import fit_state_size
from ..common.numerics import device_type
from ..common.errors import PosrnnError
from ..common.settings.yamltypes import check_name
from ..common.stages.experiments import EXPERIMENTS, KEEP_CHECKPOINTS, Experiment, experiment, resolve, trains
from ..common.settings.profiles import ExtendSection, LmDataSection, StabilitySection, load_profile, read_section

#: short key → config key, and how a cell's value shows in its directory name (``common.settings.keys``)
SHORT, ABBREV = keys.SHORT, keys.ABBREV
PROFILE_KEYS = {"about", "device", "threads", "n_test", "executor", "slurm", "power", "headline", "ensemble"}


@dataclass
class Job:
    """One unit of work: a run directory and what to do in it. Plain data (picklable, JSON)."""

    experiment: str
    name: str
    kind: str
    run_dir: str
    config: Optional[dict] = None  # the resolved run config (train, irie, extend, lm)
    options: dict = field(default_factory=dict)  # kind-specific (source run, triplets, …)
    force: bool = False  # replace a run directory that holds a different config

    @property
    def label(self) -> str:
        return f"{self.experiment}/{self.name}"

    def run_config(self) -> RunConfig:
        return RunConfig.from_dict(self.config, source=f"job {self.label}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class JobOutcome:
    """What became of a job, whichever executor ran it: ``status`` done, failed, cancelled, lost,
    timed out or (a dry run) what would happen; its result, error, log and the slot it ran in."""

    job: Job
    status: str
    seconds: float
    result: dict = field(default_factory=dict)
    error: str = ""
    log: str = ""
    slot: Optional[int] = None


def status(job: Job) -> str:
    """What a sweep would do with ``job`` now (no torch): new, resume, done, different, or
    (for derived jobs) run."""
    from ..common.files.rundir import run_state

    if not trains(job.kind):
        return "run"
    try:
        return run_state(Path(job.run_dir), job.run_config()).state
    except PosrnnError:  # a file where the run directory should be
        return "different"


def order(jobs: list[Job]) -> list[Job]:
    """Longest runs first (iterations × batch × length), so no core idles at the end."""
    def cost(j: Job) -> float:
        if not j.config:
            return 0.0
        t = j.config["train"]
        return (float(t["iterations"]) * t["batch_size"] * max(1, j.config["task"]["length"])
                * max(1, j.config["model"]["hidden_size"]) ** 2)
    return sorted(jobs, key=cost, reverse=True)


def cell_name(cell: dict) -> str:
    parts = []
    for k, v in cell.items():
        if k in ("model", "task"):
            parts.append(str(v).replace(":", "."))  # a plugin's module:factory as a plain directory name
        else:
            parts.append(f"{ABBREV.get(k, k)}{v}")
    return "-".join(parts) or "cell"


def _section(prof: dict, exp: str, profile: str) -> dict:
    sec = prof.get(exp)
    if sec is None:
        return {}
    if not isinstance(sec, dict):
        raise PosrnnError(f"profile {profile!r}: section {exp!r} must be a mapping")
    return sec


def _settings(prof: dict, exp: str, profile: str, seen: tuple = ()) -> dict:
    """An experiment's shared settings, following ``like:`` (cells, pe, seeds are its own)."""
    sec = _section(prof, exp, profile)
    like = sec.get("like")
    base: dict = {}
    if like is not None:
        if like in seen or like == exp:
            raise PosrnnError(f"profile {profile!r}: `like:` loops through {' → '.join((*seen, exp, like))}")
        if like not in prof:
            raise PosrnnError(f"profile {profile!r}: {exp}.like names {like!r}, which the profile does not define")
        base = _settings(prof, like, profile, (*seen, exp))
    own = {k: v for k, v in sec.items() if k not in ("cells", "pe", "seeds", "like", "keep_checkpoints")}
    sets = {**base.get("set", {}), **own.get("set", {})}
    return {**base, **own, **({"set": sets} if sets else {})}


def keep_policy(prof: dict, exp: Experiment, profile: str) -> str:
    """Which checkpoints the runs of ``exp`` keep: its section's ``keep_checkpoints``, else the
    registry's default for it (``last``; ``all`` for dual, whose checkpoints stability reads)."""
    value = _section(prof, exp.name, profile).get("keep_checkpoints", exp.keep_checkpoints)
    if value not in KEEP_CHECKPOINTS:
        raise PosrnnError(f"profile {profile!r}, {exp.name}: keep_checkpoints must be one of "
                          f"{', '.join(KEEP_CHECKPOINTS)}, got {value!r}")
    return value


def _apply(cfg: RunConfig, values: dict, where: str) -> None:
    for k, v in values.items():
        if k == "set":
            if not isinstance(v, dict):
                raise PosrnnError(f"{where}: `set` must map config keys to values, e.g. set: {{train.lr: 0.001}}")
            for key, value in v.items():
                set_key(cfg, key, value, source=where)
        elif k in SHORT:
            set_key(cfg, SHORT[k], v, source=where)
        else:
            raise PosrnnError(f"{where}: unknown key {k!r}; use one of {', '.join(sorted(SHORT))}, or set: "
                              f"{{section.key: value}}")


def _grid(sec: dict, exp: str, profile: str) -> tuple[list[dict], list[str], list[int]]:
    cells = sec.get("cells", [{}])
    pes = sec.get("pe", [])
    seeds = sec.get("seeds", [])
    where = f"profile {profile!r}, {exp}"
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise PosrnnError(f"{where}: cells must be a list of mappings, e.g. cells: [{{model: gru, vocab: 16}}]")
    if not isinstance(pes, list) or not isinstance(seeds, list):
        raise PosrnnError(f"{where}: pe and seeds must be lists, e.g. pe: [none, sinusoidal], seeds: [111]")
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise PosrnnError(f"{where}: seeds must be integers, got {seeds}")
    for name, values in (("seeds", seeds), ("pe", pes)):
        repeated = sorted({v for v in values if values.count(v) > 1}, key=str)
        if repeated:
            raise PosrnnError(f"{where}: {name} lists {', '.join(map(str, repeated))} more than once (two runs would "
                              f"share one directory); list each once")
    return cells, pes, seeds


def _base(params: Path, prof: dict, profile: str) -> RunConfig:
    cfg = resolve_config(params)
    for key, short in (("device", "train.device"), ("threads", "train.threads"), ("n_test", "task.n_test")):
        if prof.get(key) is not None:
            set_key(cfg, short, prof[key], source=f"profile {profile!r}")
    return cfg


def _check_fixed(cfg: RunConfig, exp: Experiment, where: str) -> None:
    """Refuse a section or cell key that changed one of the experiment's fixed values (``Experiment.fixed``)."""
    flat = cfg.flat()
    for key, value in exp.fixed:
        if flat[key] != value:
            raise PosrnnError(f"{where}: every {exp.name} run has {key} = {value!r}, but the profile sets "
                              f"{flat[key]!r}; drop that key from the section or cell")


def train_jobs(params: Path, prof: dict, profile: str, exp: Experiment, runs_root: Path, force: bool) -> list[Job]:
    sec = _section(prof, exp.name, profile)
    cells, pes, seeds = _grid(sec, exp.name, profile)
    settings = _settings(prof, exp.name, profile)
    keep = keep_policy(prof, exp, profile)
    base = _base(params, prof, profile).to_dict()
    jobs = []
    for cell in cells:
        for pe in pes:
            for seed in seeds:
                cfg = RunConfig.from_dict(base)
                where = f"profile {profile!r}, {exp.name}"
                for key, value in exp.fixed:  # what every run of the experiment has, before the profile's keys
                    set_key(cfg, key, value, source=f"experiment {exp.name}")
                _apply(cfg, settings, where)
                _apply(cfg, cell, f"{where}, cell {cell}")
                _check_fixed(cfg, exp, f"{where}, cell {cell}")
                set_key(cfg, "model.pe", pe, source=where)
                set_key(cfg, "train.seed", seed, source=where)
                named = [*settings, *cell, *settings.get("set", {}), *(cell.get("set") or {})]
                fit_state_size(cfg, device_type(cfg.train.device), {SHORT.get(k, k) for k in named})
                name = f"{cell_name(cell)}-{pe}-s{seed}"
                jobs.append(Job(exp.name, name, exp.kind, str(runs_root / exp.name / name), cfg.to_dict(),
                                {"keep_checkpoints": keep}, force))
    return jobs


#: what a run directory's name may hold: letters, digits and ``. _ + = -``, not starting with a dot
_NAME_RE = re.compile(r"^[A-Za-z0-9_+=-][A-Za-z0-9._+=-]*$")


def check_names(jobs: list[Job], runs_root: Path, profile: str) -> None:
    """Refuse, before anything is written, a job whose name is not one plain directory name under
    ``runs_root/<experiment>`` (a grid value with ``/``, ``..`` or a space), two jobs of one
    directory, and two runs of one cell with one seed (aggregation would refuse the sweep's own
    output): each in one line naming the experiment and the values."""
    names: dict[str, Job] = {}
    cells: dict[tuple, Job] = {}
    for job in jobs:
        where = f"profile {profile!r}, {job.experiment}"
        home = Path(runs_root) / job.experiment
        if not _NAME_RE.match(job.name) or len(job.name) > 200 or Path(job.run_dir) not in (home / job.name, home):
            raise PosrnnError(f"{where}: the run name {job.name!r} (made from the grid's values) is not a plain "
                              f"directory name; use values of letters, digits and . _ + = - only")
        if job.run_dir in names:
            raise PosrnnError(f"{where}: two runs are both named {job.name!r}; list each cell, pe and seed once")
        names[job.run_dir] = job
        if job.config is None:
            continue
        cfg = job.run_config()
        key = (job.experiment, cfg.train.seed,
               tuple(sorted((k, repr(v)) for k, v in cfg.flat().items() if k not in CELL_IGNORED)))
        if key in cells:
            raise PosrnnError(f"{where}: {cells[key].name} and {job.name} are the same cell with the same seed (the "
                              f"same config but for how often it logs or checkpoints); list each cell once")
        cells[key] = job


def plan(params: Path, profile: str, experiments: list[str], runs_root: Optional[Path] = None,
         force: bool = False) -> list[Job]:
    """The jobs of ``experiments`` in ``profile``, checked (every config resolves, every name is a
    directory name of its own, no cell listed twice) and named."""
    params = Path(params)
    check_name(profile, "profile")  # dvc.yaml's foreach reads it from params.yaml as DVC types it
    prof = load_profile(params, profile)
    runs_root = Path(runs_root) if runs_root is not None else Path("runs") / profile
    unknown = [k for k in prof if k not in PROFILE_KEYS and k not in EXPERIMENTS]
    if unknown:
        raise PosrnnError(f"profile {profile!r} has unknown section(s) {', '.join(unknown)}; experiments are: "
                          f"{', '.join(EXPERIMENTS)}")
    jobs: list[Job] = []
    for name in experiments:
        exp = experiment(name)
        jobs += resolve(exp.job_kind.plan)(params, prof, profile, exp, runs_root, force)
    check_names(jobs, runs_root, profile)
    return jobs


def stability_jobs(params: Path, prof: dict, profile: str, exp: Experiment, runs_root: Path, force: bool) -> list[Job]:
    sec = read_section(StabilitySection, _section(prof, exp.name, profile), f"profile {profile!r}, {exp.name}")
    opts = {**asdict(sec), "device": prof.get("device", "auto")}
    sources = train_jobs(params, prof, profile, EXPERIMENTS[exp.source], runs_root, force)
    if sec.models is not None:
        if not isinstance(sec.models, list) or not all(isinstance(m, str) for m in sec.models):
            raise PosrnnError(f"profile {profile!r}, {exp.name}.models must list core names, e.g. [s4d]")
        sources = [s for s in sources if s.run_config().model.name in sec.models]
    opts.pop("models")
    if sources and keep_policy(prof, EXPERIMENTS[exp.source], profile) != "all":
        raise PosrnnError(f"profile {profile!r}: stability reads every checkpoint of the {exp.source} runs, and "
                          f"{exp.source}.keep_checkpoints keeps only the last; set {exp.source}.keep_checkpoints: all")
    for s in sources:  # the target must lie within the sequence: refused before any job runs
        L = s.run_config().task.length
        if sec.target_position >= L:  # at t = L no suffix follows the target
            raise PosrnnError(f"profile {profile!r}, {exp.name}.target_position must lie in 1 … {L - 1} (before the "
                              f"last token of the {exp.source} runs' task.length {L}), got {sec.target_position}")
    return [Job(exp.name, s.name, exp.kind, str(runs_root / exp.name / s.name), s.config,
                {**opts, "source": s.run_dir}, force) for s in sources]


def extend_jobs(params: Path, prof: dict, profile: str, exp: Experiment, runs_root: Path, force: bool) -> list[Job]:
    raw = _section(prof, exp.name, profile)
    if not raw:
        return []
    keep = keep_policy(prof, exp, profile)
    sec = read_section(ExtendSection, {k: v for k, v in raw.items() if k != "keep_checkpoints"},
                       f"profile {profile!r}, {exp.name}", required=("extra_vocab",))
    cells, pes, seeds = _grid(raw, exp.name, profile)
    extra = sec.extra_vocab
    sources = {s.name: s for s in train_jobs(params, prof, profile, EXPERIMENTS[exp.source], runs_root, force)}
    jobs = []
    for cell in cells:
        for pe in pes:
            for seed in seeds:
                name = f"{cell_name(cell)}-{pe}-s{seed}"
                src = sources.get(name)
                if src is None:
                    raise PosrnnError(f"profile {profile!r}, extend: {name} has no {exp.source} run to extend; "
                                      f"add that cell, pe and seed to {exp.source}")
                cfg = RunConfig.from_dict(src.config)
                V = cfg.task.vocab_size
                options = {"task.vocab_size": V + extra, "model.frozen_vocab": V, "train.iterations": sec.iterations}
                new = resolve_config(base=cfg, options=options)
                jobs.append(Job(exp.name, name, exp.kind, str(runs_root / exp.name / name), new.to_dict(),
                                {"source": src.run_dir, "extra_vocab": extra, "keep_checkpoints": keep}, force))
    return jobs


def lm_data_jobs(params: Path, prof: dict, profile: str, exp: Experiment, runs_root: Path, force: bool) -> list[Job]:
    raw = _section(prof, exp.name, profile)
    if not raw:
        return []
    sec = read_section(LmDataSection, raw, f"profile {profile!r}, {exp.name}",
                       required=("data_dir", "vocab_size", "max_tokens", "threads"))
    return [Job(exp.name, "corpus", exp.kind, str(runs_root / exp.name), None, asdict(sec), force)]


def lm_jobs(params: Path, prof: dict, profile: str, exp: Experiment, runs_root: Path, force: bool) -> list[Job]:
    sec = _section(prof, exp.name, profile)
    data = _section(prof, "lm_data", profile)
    if not sec:
        return []
    if not data:
        raise PosrnnError(f"profile {profile!r}: lm needs an lm_data section (data_dir, vocab_size, max_tokens)")
    _, pes, seeds = _grid(sec, exp.name, profile)
    settings = {k: v for k, v in sec.items() if k not in ("pe", "seeds", "keep_checkpoints")}
    keep = keep_policy(prof, exp, profile)
    base = _base(params, prof, profile).to_dict()
    jobs = []
    for pe in pes:
        for seed in seeds:
            cfg = RunConfig.from_dict(base)
            where = f"profile {profile!r}, lm"
            set_key(cfg, "task.name", "lm", where)
            set_key(cfg, "task.data", str(runs_root / "lm_data" / "encoded"), where)
            set_key(cfg, "task.vocab_size", data["vocab_size"], where)
            set_key(cfg, "task.length", data["max_tokens"], where)
            _apply(cfg, settings, where)
            set_key(cfg, "model.pe", pe, where)
            set_key(cfg, "train.seed", seed, where)
            name = f"{cfg.model.name}-{pe}-s{seed}"
            jobs.append(Job(exp.name, name, exp.kind, str(runs_root / exp.name / name), cfg.to_dict(),
                            {"keep_checkpoints": keep}, force))
    return jobs
