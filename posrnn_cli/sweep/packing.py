"""Packing a sweep's same-shape runs into ensembles (``engine.ensemble``): up to K runs whose
configs differ only in ``train.seed`` (the seeds of one cell) train in one process as one
batched model, each member writing its own run directory exactly as its solo run would.

``pack(jobs, k, fit)`` is pure but for ``fit`` (no torch, no disk): the packs in job order, each
with the reason a run of one stays solo, and with ``fit`` (the most members of a shape the device's
memory holds) no pack larger than fits. K comes from ``--ensemble K``, else the profile's
``ensemble:`` key, else ``default_k``: the K measured best on the GPU kind (``ensemble_k.json``;
none has been measured yet, so 1: no packing), and 1 on a CPU, where a member equals its solo run
only within float rounding, so a profile opts in (``ensemble: K``; ``posrnn bench --ensemble``
measures what it buys there).
A pack is one job (``PACK_KIND``): one worker of the local executor, or one array task on SLURM
(``slurm``); a run whose core has no ensemble path runs solo in the same sweep. Torch-free: the
CLI's dry run reads it. A pack's job is run by ``jobs.run_pack``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..common import catalog
from ..common.errors import PosrnnError
from .plan import Job, JobOutcome

#: the job kinds a pack may hold (plain training runs, and irie's, which train the same way)
PACKABLE_KINDS = ("train", "irie")
#: the kind of the one job that trains a pack (``run_pack``)
PACK_KIND = "ensemble"


@dataclass
class Pack:
    """Runs trained together (more than one), or one run left solo with ``reason``."""

    jobs: list[Job]
    reason: Optional[str] = None
    note: Optional[str] = None  # why the pack holds fewer runs than K (its members' memory)

    @property
    def solo(self) -> bool:
        return len(self.jobs) == 1


def solo_reason(job: Job) -> Optional[str]:
    """Why ``job`` can never join an ensemble, or None when it can."""
    if job.kind not in PACKABLE_KINDS:
        return f"its job kind, {job.kind}, is not packed (only {' and '.join(PACKABLE_KINDS)} runs are)"
    cfg = job.config or {}
    model, task = cfg.get("model", {}), cfg.get("task", {})
    if model.get("name") not in catalog.ENSEMBLE_CORES:
        return f"the {model.get('name')} core has no ensemble path"
    if model.get("frozen_vocab") is not None:
        return "a vocabulary extension"
    if task.get("data"):
        return "a language model (batches of varying length)"
    return None


def shape_key(job: Job) -> tuple:
    """What runs of one pack share: experiment, kind, options, force and the config but its seed."""
    cfg = {s: {k: repr(v) for k, v in sec.items() if (s, k) != ("train", "seed")} for s, sec in job.config.items()}
    return (job.experiment, job.kind, repr(sorted(job.options.items())), job.force,
            tuple((s, tuple(sorted(sec.items()))) for s, sec in sorted(cfg.items())))


#: ``fit(job) -> (n, why)``: the most runs of ``job``'s shape one ensemble may hold on the device, and why
Fit = Callable[[Job], tuple[int, str]]


def pack(jobs: list[Job], k: int, fit: Optional[Fit] = None) -> list[Pack]:
    """``jobs`` as packs of up to ``k`` same-shape runs (in job order), each run of one solo with the
    reason: its kind or core has no ensemble path, no other run shares its shape, or k = 1. With
    ``fit``, a shape whose ``k`` members would not fit the device's memory is packed by the most
    that do, each such pack noting why."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise PosrnnError(f"--ensemble takes the most runs per ensemble, a positive number; got {k!r}")
    groups: dict[tuple, list[Job]] = {}
    out: list[Pack] = []
    for job in jobs:
        why = solo_reason(job)
        if why is not None:
            out.append(Pack([job], why))
        else:
            groups.setdefault(shape_key(job), []).append(job)
    for same in groups.values():
        n, note = (k, None) if fit is None or k == 1 or len(same) == 1 else fit(same[0])
        n, note = (k, None) if n >= k else (max(1, n), note)
        for i in range(0, len(same), n):
            chunk = same[i:i + n]
            alone = ("--ensemble 1 (no packing)" if k == 1 else note if n == 1 and note
                     else "no other run of its shape is left to pack with")
            out.append(Pack(chunk, alone if len(chunk) == 1 else None, note))
    place = {id(j): n for n, j in enumerate(jobs)}
    return sorted(out, key=lambda p: place[id(p.jobs[0])])


#: measured ensemble sizes, one row per GPU kind and cell: {"kind", "model", "vocab", "k", "date", "source"}
#: (the K where ``posrnn bench --ensemble`` stopped gaining, from the GPU check's ensemble stage); none yet
TABLE = Path(__file__).with_name("ensemble_k.json")


def measured_rows(path: Path = TABLE) -> list[dict]:
    return json.loads(Path(path).read_text())["rows"] if Path(path).is_file() else []


def default_k(device: str, rows: Optional[list[dict]] = None, kind: str = "") -> int:
    """The ensemble size a sweep uses unless told: 1 on a CPU (a profile opts in with ``ensemble:``);
    on a GPU the smallest K measured best for that GPU kind over its cells (``rows``), 1 where
    nothing was measured."""
    if device == "cpu":
        return 1
    ks = best_ks([r for r in (rows or []) if r["kind"] and r["kind"] in kind])
    return min(ks) if ks else 1


def best_ks(rows: list[dict]) -> list[int]:
    """Each cell's best K: a row's ``k``, or where rows hold the ``gain`` measured at each K (as the
    GPU check writes them: K members' iterations in all over one solo run's), the K of the
    highest gain of each cell (the smaller K on a tie)."""
    cells: dict[tuple, list[tuple[float, int]]] = {}
    out = []
    for r in rows:
        if "gain" not in r:
            out.append(int(r["k"]))
            continue
        cell = tuple(r.get(key) for key in ("model", "vocab", "length", "hidden", "batch", "amp", "cuda_graph"))
        cells.setdefault(cell, []).append((float(r["gain"]), -int(r["k"])))
    return out + [-max(gains)[1] for gains in cells.values()]


def ensemble_k(prof: dict, option: Optional[int], profile: str) -> int:
    """K for a sweep: ``--ensemble``, else the profile's ``ensemble:`` key, else ``default_k``."""
    k = option if option is not None else prof.get("ensemble")
    if k is None:
        device, rows = str(prof.get("device", "auto")), measured_rows()
        if device == "cpu" or not rows:
            return 1
        import torch  # only once something was measured: the visible GPU's kind (none: no measured K applies)

        return default_k(device, rows, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
    if type(k) is not int or k < 1:  # a bool, a float, text: not one whole number written plainly
        where = "--ensemble" if option is not None else f"profile {profile!r}: ensemble"
        raise PosrnnError(f"{where} must be the most runs per ensemble, one positive whole number written plainly "
                          f"(e.g. 4; 1: no packing), got {str(k)!r}")
    return k


def parse_k(text: "str | int | None") -> Optional[int]:
    """``--ensemble`` as typed: one positive whole number written plainly (``4``), else refused in
    one line (``" 2"``, ``"02"``, ``"2.0"``, ``"[2,2]"``)."""
    if text is None or type(text) is int:
        return text
    if not re.fullmatch(r"[1-9][0-9]{0,8}", str(text)):
        raise PosrnnError(f"--ensemble must be the most runs per ensemble, one positive whole number written plainly "
                          f"(e.g. 4; 1: no packing), got {str(text)!r}")
    return int(text)


def pack_jobs(jobs: list[Job], k: int, fit: Optional[Fit] = None) -> list[Job]:
    """The jobs a sweep runs (a local worker or a SLURM task each): each pack of several runs as one
    ``PACK_KIND`` job (``as_pack``)."""
    return [p.jobs[0] if p.solo else as_pack(p.jobs) for p in pack(jobs, k, fit)]


def as_pack(members: list[Job]) -> Job:
    """The one ``PACK_KIND`` job that trains ``members`` (one run: that run's own job)."""
    if len(members) == 1:
        return members[0]
    first = members[0]
    return Job(first.experiment, f"{first.name}+{len(members) - 1}", PACK_KIND, first.run_dir, first.config,
               {"members": [j.to_dict() for j in members]}, first.force)


def members_of(job: Job) -> list[Job]:
    """The runs ``job`` trains: a pack's members, else the job itself."""
    return [Job(**d) for d in job.options["members"]] if job.kind == PACK_KIND else [job]


def unpack_outcomes(outcomes: list[JobOutcome]) -> list[JobOutcome]:
    """One outcome per run: a pack's for each of its members, with the member's own result."""
    out = []
    for o in outcomes:
        if o.job.kind != PACK_KIND:
            out.append(o)
            continue
        for d in o.job.options["members"]:
            m = Job(**d)
            result = (o.result.get("members") or {}).get(m.label, {}) if isinstance(o.result, dict) else {}
            out.append(JobOutcome(m, o.status, o.seconds, result, o.error, o.log, o.slot))
    return out


def describe(packs: list[Pack], each: bool = False) -> list[str]:
    """The dry run's packing: the counts, the runs solo counted by reason; with ``each``, every
    ensemble with its runs and every solo run with its reason."""
    ens = [p for p in packs if not p.solo]
    why: dict[str, int] = {}
    for p in packs:
        if p.solo:
            why[p.reason] = why.get(p.reason, 0) + 1
    lines = [f"packing: {sum(len(p.jobs) for p in ens):,} run(s) in {len(ens):,} ensemble(s), "
             f"{len(packs) - len(ens):,} run(s) solo"]
    lines += [f"  solo, {n:,} run(s): {reason}" for reason, n in sorted(why.items(), key=lambda rn: (-rn[1], rn[0]))]
    notes: dict[str, int] = {}
    for p in ens:
        if p.note:
            notes[p.note] = notes.get(p.note, 0) + 1
    lines += [f"  smaller ensembles, {n:,}: {note}" for note, n in sorted(notes.items())]
    if each:
        lines += [f"  ensemble of {len(p.jobs)}: {', '.join(j.label for j in p.jobs)}" for p in ens]
        lines += [f"  solo: {p.jobs[0].label} ({p.reason})" for p in packs if p.solo]
    return lines
