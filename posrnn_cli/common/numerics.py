"""A run's identity: what its numbers depend on, declared instead of read from the source code.

Each task, core and positional-encoding form declares the version of the numbers it computes in
its catalogue entry (``common.catalog``), and each procedure below declares its own: the
training loop, a vocabulary extension, the stability analysis and the LM data preparation. A
version is bumped by hand in the commit whose change is meant to change numbers;
tests/test_golden.py fails when numbers change and no version was bumped.

A run records its identity in ``code.json`` when it starts from step 0 (``identity``):

* ``config_digest`` — the digest of its config (``common.settings.config.config_digest``);
* ``versions`` — those of its core, task and form (``core/gru``, ``task/reverse``, ``pe/none``)
  and of the procedures that trained it (``loop``; an extension adds ``extension``, a run with
  ``train.amp`` adds ``amp``);
* ``libraries`` — torch's version, and that of each library its core computes with (mambapy for
  Mamba, xlstm for xLSTM; for a plugin core, the distribution that installs it: docs/plugins.md);
* ``device`` — the device type it trained on (``cpu`` or ``cuda``).

A run is stale when one of these differs from what this code would record for it here. Module
names and source text are no part of it: moving or renaming code never makes a run stale.

Records written before identities (``{"module": …, "fingerprint": …}``, a hash of the code)
are read as made under the baseline versions (``BASELINE``, every version's first value) with
this machine's libraries and device: runs trained then stay current until a version they
depend on is bumped. ``numerics.json`` (``numerics_table``, written beside ``dvc.yaml`` by
``posrnn dvc-yaml``) lists the declared versions for the DVC stages.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from . import catalog, plugins

#: the format of a ``code.json`` that records an identity
FORMAT = 2
#: the version every task, core, form and procedure had when runs began recording identities: a
#: record from before (a code fingerprint) is read as made under it
BASELINE = 1
#: the package whose version every run records
TORCH = "torch"


@dataclass(frozen=True)
class Procedure:
    about: str
    version: int = 1  # bump it when a change is meant to change the numbers the procedure computes


PROCEDURES: dict[str, Procedure] = {
    "loop": Procedure("the training loop: Adam, warm-up and cosine schedule, gradient clipping, bf16 autocast, "
                      "batches, initialisation seeds, checkpoints and resumption (engine.train, engine.optim)"),
    "extension": Procedure("a trained run's vocabulary extended and trained further (engine.extend)"),
    "stability": Procedure("the gradient stability of a run's checkpoints (engine.stability)"),
    "lm_data": Procedure("WikiText paragraphs, the SentencePiece model and the encoded ids (lm)"),
    # 2: the recurrent cores run in bf16 explicitly (they had run in the dtype autocast's own rule gives:
    # fp16 for cuDNN's RNNs, fp32 for a CPU GRU)
    "amp": Procedure("train.amp's mixed precision: what runs in bf16 under autocast (a run with train.amp only)",
                     version=2),
}

#: the registries whose entries carry a version, by the prefix a record gives their names
NAMED = {"core": catalog.CORES, "task": catalog.TASKS, "pe": catalog.PE_FORMS}


def versions(core: str, task: str, pe: str, procedures: tuple[str, ...],
             variants: tuple[str, ...] = ()) -> dict[str, Optional[int]]:
    """The declared versions a run of ``core``/``task``/``pe`` made by ``procedures`` depends on
    (None for a name this code no longer declares); ``variants`` names the run's variants of its
    core (``no_conv``), of which those the core versions apart add ``core/NAME/VARIANT``."""
    out: dict[str, Optional[int]] = {}
    for kind, name in (("core", core), ("task", task), ("pe", pe)):
        entry = _core(name) if kind == "core" else NAMED[kind].get(name)
        out[f"{kind}/{name}"] = entry.version if entry is not None else None
    declared = dict(getattr(NAMED["core"].get(core), "variants", ()))
    out.update({f"core/{core}/{v}": declared[v] for v in variants if v in declared})
    for p in procedures:
        out[p] = PROCEDURES[p].version
    return out


def _core(name: str) -> Optional[catalog.Entry]:
    """The entry of core ``name``, built in or a plugin; None for an unknown name or a plugin that no
    longer loads (its runs then read as stale, not as an error)."""
    from .errors import PosrnnError

    try:
        return plugins.core_entry(name)
    except PosrnnError:
        return None


@functools.lru_cache(maxsize=None)
def library_version(package: str) -> Optional[str]:
    """The installed version of ``package`` (None when it is not installed), read from its metadata
    without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def libraries(core: str) -> dict[str, Optional[str]]:
    """torch's version and that of each library ``core`` computes with (a plugin core's: the
    distribution that installs it, ``common.plugins``)."""
    entry = _core(core)
    return {p: library_version(p) for p in (TORCH, *(entry.libraries if entry is not None else ()))}


@functools.lru_cache(maxsize=None)
def device_type(device: str) -> str:
    """"cpu" or "cuda" for a config's ``train.device`` ("auto": what this machine has; torch is
    imported only then)."""
    if device != "auto":
        return device.split(":")[0]
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_variants(cfg) -> tuple[str, ...]:
    """The core variants a run of ``cfg`` is (``no_conv``: its short convolutions taken out)."""
    return ("no_conv",) if getattr(cfg.model, "conv", True) is False else ()


def identity(cfg, procedures: tuple[str, ...], device: str) -> dict[str, Any]:
    """The identity of a run of ``cfg`` (a ``RunConfig``) made by ``procedures`` on ``device`` (a
    device type, or a config's ``train.device``)."""
    from .settings.config import config_digest

    m = cfg.model
    if getattr(cfg.train, "amp", False) and "amp" not in procedures:
        procedures = (*procedures, "amp")
    return {"format": FORMAT, "config_digest": config_digest(cfg.to_dict()),
            "versions": versions(m.name, cfg.task.name, m.pe, procedures, run_variants(cfg)),
            "libraries": libraries(m.name),
            "device": device_type(device)}


#: what two identities are compared on
COMPARED = ("config_digest", "versions", "libraries", "device")


def migrated(record: Any, current: dict[str, Any]) -> Optional[dict[str, Any]]:
    """``record`` (a ``code.json`` as read) as an identity comparable with ``current``, or None
    when it records none posrnn can use. A record from before identities is read as made under
    the baseline versions with this machine's libraries and device (see the module's doc)."""
    if not isinstance(record, dict):
        return None
    if record.get("format") == FORMAT:
        ok = (isinstance(record.get("config_digest"), str) and isinstance(record.get("device"), str)
              and isinstance(record.get("versions"), dict) and isinstance(record.get("libraries"), dict))
        return {k: record[k] for k in COMPARED} if ok else None
    module = record.get("module") or "posrnn_cli"
    if not isinstance(record.get("fingerprint"), str) or not isinstance(module, str) or \
            not (module == "posrnn_cli" or module.startswith("posrnn_cli.")):
        return None  # neither format: an integer or a foreign module name is no record
    return {**{k: current[k] for k in COMPARED}, "versions": dict.fromkeys(current["versions"], BASELINE)}


def differences(record: Any, current: dict[str, Any]) -> Optional[list[str]]:
    """What differs between a recorded identity and ``current`` (``versions.core/gru``,
    ``libraries.torch``, ``device``, …); [] when nothing does; None when the record is unusable."""
    rec = migrated(record, current)
    if rec is None:
        return None
    out = []
    for key in COMPARED:
        have, want = rec[key], current[key]
        if isinstance(want, dict):
            out += [f"{key}.{k}" for k in sorted(set(have) | set(want), key=str) if have.get(k) != want.get(k)]
        elif have != want:
            out.append(key)
    return out


def analysis_identity(cfg, procedure: str, device: str) -> dict[str, Any]:
    """What an analysis of a run of ``cfg`` (the stability values) depends on besides its inputs:
    the versions of the run's core, task and form and of ``procedure``, the libraries and the
    device type (the run's checkpoints and config are stamped apart)."""
    return {k: v for k, v in identity(cfg, (procedure,), device).items() if k in ("versions", "libraries", "device")}


def analysis_current(stored: Any, current: dict[str, Any]) -> bool:
    """Whether a stored analysis identity equals ``current``; a code fingerprint from before
    identities (a string) counts as made under the baseline versions."""
    if isinstance(stored, str):
        return all(v == BASELINE for v in current["versions"].values())
    return stored == current


def variant_versions(name: str, entry) -> list[tuple[str, int]]:
    """``NAME/VARIANT`` and its version for each variant ``entry`` versions apart."""
    return [(f"{name}/{v}", version) for v, version in getattr(entry, "variants", ())]


def numerics_table() -> str:
    """The text of ``numerics.json``: every declared version, the file the DVC stages read theirs from."""
    table = {"about": "written by `posrnn dvc-yaml` from posrnn_cli/common/catalog.py and common/numerics.py; "
                      "bump a version there, not here",
             **{kind: {k: v for n, e in entries.items() for k, v in ((n, e.version), *variant_versions(n, e))}
                for kind, entries in NAMED.items()},
             **{n: p.version for n, p in PROCEDURES.items()}}
    return json.dumps(table, indent=2) + "\n"


def numerics_written(data: bytes) -> bool:
    """Whether ``data`` is a ``numerics.json`` that ``posrnn dvc-yaml`` wrote (its ``about`` line)."""
    try:
        table = json.loads(data[:1 << 20])
    except ValueError:
        return False
    return isinstance(table, dict) and str(table.get("about", "")).startswith("written by `posrnn dvc-yaml`")


def check_numerics_table(path: Path) -> Optional[str]:
    """None when ``path`` holds what the declared versions give, else a one-line reason (a FIFO or
    a device is never opened)."""
    from .errors import PosrnnError
    from .files.io import read_bounded

    if not Path(path).exists():
        return f"{path} does not exist; write it with posrnn dvc-yaml"
    try:
        have = read_bounded(Path(path), "numerics table").decode("utf-8")
    except (OSError, UnicodeDecodeError, PosrnnError) as e:
        return f"{path} cannot be read ({type(e).__name__}); restore it from git or write it with posrnn dvc-yaml"
    if have != numerics_table():
        return (f"{path} differs from the declared numerics versions; run posrnn dvc-yaml to write it (bump a "
                f"version in posrnn_cli/common/catalog.py or common/numerics.py, not in {Path(path).name})")
    return None
