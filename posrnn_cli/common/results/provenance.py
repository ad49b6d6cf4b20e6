"""Results that prove whose they are, checked without torch (aggregation reads files only).

``posrnn eval`` writes ``eval.json`` with the sha256 of the checkpoint it scored
(``checkpoint_sha256``), the digest of that run's config (``config_digest``: what the run
computes, runtime keys left out), the sha256 of the per-sequence file it wrote beside it
(``sequences_sha256``) and its own digest. Each per-sequence score file (``eval_sequences.npz``,
``extend_sequences.npz``) carries the same two stamps as 0-d string arrays. A reader checks them
against the run as it is now — its latest checkpoint and its ``config.yaml`` — so scores of an
earlier step, of another run, or cut, copied or edited are refused, each in one line naming the
file and the command that writes it again.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Iterable, Optional

from ..files.rundir import CONFIG_FILE, EVAL_FILE
from ..settings.config import config_digest
from ..errors import PosrnnError

#: the 0-d string arrays a per-sequence score file carries beside its scores
STAMPS = ("checkpoint_sha256", "config_digest")


def file_sha256(path: Path) -> str:
    """The sha256 of a regular file; anything else (a FIFO, a device, a directory) is refused in one
    line without being opened, so a reader never blocks on it."""
    import os
    import stat

    if not stat.S_ISREG(os.stat(path).st_mode):
        raise PosrnnError(f"{path} is not a regular file (a FIFO, device or directory stands where posrnn wrote a "
                          f"file); remove it and re-run the step that writes it")
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def eval_digest(result: dict) -> str:
    """sha256 of an evaluation's JSON (without its own digest): an edited eval.json no longer matches."""
    body = {k: v for k, v in result.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def finite_numbers(value: Any) -> bool:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(finite_numbers(v) for v in value)
    if isinstance(value, dict):
        return all(finite_numbers(v) for v in value.values())
    return False


def check_eval(data: Any, path: Path) -> dict:
    """Validate an ``eval.json``: a mapping with the run's fields, finite numbers, each ``X_ci``
    a pair with ``low ≤ X ≤ high`` and the digest ``evaluate`` wrote. One line when not."""
    fix = f"re-run `posrnn eval {Path(path).parent}`"
    if not isinstance(data, dict):
        raise PosrnnError(f"{path} is not an evaluation (not a JSON object); {fix}")
    for key, kind in (("step", int), ("checkpoint", str), ("task", str), ("model", str), ("pe", str)):
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise PosrnnError(f"{path} is not an evaluation ({key} is missing or of the wrong type); {fix}")
    if not finite_numbers(data):
        raise PosrnnError(f"{path} holds a non-finite or non-numeric value; {fix}")
    for key, ci in data.items():
        if not key.endswith("_ci"):
            continue
        value = data.get(key[:-3])
        if not (isinstance(ci, list) and len(ci) == 2 and all(isinstance(c, (int, float)) for c in ci)
                and isinstance(value, (int, float)) and ci[0] <= value <= ci[1]):
            raise PosrnnError(f"{path}: {key} is not a CI around {key[:-3]} (low ≤ value ≤ high); {fix}")
    if data.get("digest") != eval_digest(data):
        raise PosrnnError(f"{path} does not match the digest `posrnn eval` wrote into it (edited?); {fix}")
    return data


def stamped(arrays: dict, checkpoint_sha256: str, digest: str) -> dict:
    """Per-sequence arrays with the stamps of the checkpoint and config they score."""
    import numpy as np

    clash = [k for k in STAMPS if k in arrays]
    if clash:
        raise ValueError(f"a score array is named {clash[0]}, a stamp's name")
    return {**{k: np.asarray(v) for k, v in arrays.items()}, "checkpoint_sha256": np.asarray(checkpoint_sha256),
            "config_digest": np.asarray(digest)}


class Proof:
    """What a run's results must carry now: the sha256 of its latest checkpoint and the digest of
    its ``config.yaml`` (each computed once, on first use)."""

    def __init__(self, run: Path):
        self.run = Path(run)
        self._sha: Optional[str] = None
        self._digest: Optional[str] = None
        self.step: Optional[int] = None

    @property
    def checkpoint_sha256(self) -> str:
        if self._sha is None:
            from ..files.rundir import list_checkpoints

            ckpts = list_checkpoints(self.run)
            if not ckpts:
                raise PosrnnError(f"{self.run} has no checkpoint, so its scores prove nothing; re-run its sweep "
                                  f"(posrnn sweep {self.run.parent.name})")
            self.step, path = ckpts[-1]
            self._sha = file_sha256(path)
        return self._sha

    @property
    def config_digest(self) -> str:
        if self._digest is None:
            from ..settings.config import RunConfig, safe_load_bounded

            path = self.run / CONFIG_FILE
            try:
                data = safe_load_bounded(path.read_text(encoding="utf-8"), str(path))
            except (OSError, UnicodeDecodeError, ValueError) as e:
                raise PosrnnError(f"{path} cannot be read ({type(e).__name__}); re-run its sweep") from None
            self._digest = config_digest(RunConfig.from_dict(data, source=str(path)).to_dict())
        return self._digest


def _fix(run: Path) -> str:
    return f"re-run `posrnn eval {run}` (or its sweep)"


def proven_eval(run: Path, proof: Optional[Proof] = None) -> dict:
    """The run's ``eval.json``, checked (``check_eval``) and proven to score the run's latest
    checkpoint under its current ``config.yaml``; refused in one line otherwise."""
    from ..files.io import read_json

    run = Path(run)
    proof = proof or Proof(run)
    path = run / EVAL_FILE
    if not path.is_file():
        raise PosrnnError(f"{path} is missing (the run is not evaluated); {_fix(run)}")
    data = read_json(path)
    if isinstance(data, dict) and ("digest" not in data or "checkpoint_sha256" not in data):
        raise PosrnnError(f"{path} was written by an older posrnn and records no checkpoint digest; {_fix(run)}")
    check_eval(data, path)
    if data.get("checkpoint_sha256") != proof.checkpoint_sha256:
        raise PosrnnError(f"{path} scores step {data['step']}, not the run's latest checkpoint (step {proof.step}: "
                          f"trained on since, or copied from another run); {_fix(run)}")
    if data.get("config_digest") != proof.config_digest:
        raise PosrnnError(f"{path} scores another config than {run / 'config.yaml'} (changed since); {_fix(run)}")
    return data


def _scalar_str(data: dict, key: str) -> Optional[str]:
    v = data.get(key)
    return str(v[()]) if v is not None and getattr(v, "shape", None) == () and v.dtype.kind == "U" else None


def check_scores(path: Path, data: dict, keys: Iterable[str], proof: Proof, n: Optional[int] = None,
                 sha256: Optional[str] = None) -> dict:
    """Per-sequence scores ``data`` read from ``path``: stamped with ``proof``'s checkpoint and
    config, every one of ``keys`` a 1-d array of finite numbers, all of one length (``n`` where
    given), and the file's sha256 ``sha256`` where given (what its eval.json recorded)."""
    import numpy as np

    fix = _fix(proof.run)
    stamps = {k: _scalar_str(data, k) for k in STAMPS}
    if None in stamps.values():
        raise PosrnnError(f"{path} records no checkpoint or config digest (written by an older posrnn, or not by "
                          f"`posrnn eval`); {fix}")
    if stamps["checkpoint_sha256"] != proof.checkpoint_sha256:
        raise PosrnnError(f"{path} scores another checkpoint than the run's latest (step {proof.step}: trained on "
                          f"since, or copied from another run); {fix}")
    if stamps["config_digest"] != proof.config_digest:
        raise PosrnnError(f"{path} scores another config than {proof.run / 'config.yaml'}; {fix}")
    if sha256 is not None and file_sha256(path) != sha256:
        raise PosrnnError(f"{path} is not the file its eval.json recorded (edited, cut or copied); {fix}")
    lengths = set()
    for k in keys:
        a = data[k]
        if a.ndim != 1 or a.dtype.kind not in "biuf" or (a.dtype.kind == "f" and not np.isfinite(a).all()):
            raise PosrnnError(f"{path}: {k} is not one finite number per sequence; {fix}")
        lengths.add(len(a))
    if len(lengths) > 1 or (n is not None and lengths != {n}) or lengths == {0}:
        raise PosrnnError(f"{path} holds {'/'.join(map(str, sorted(lengths)))} scores per array"
                          f"{f' for {n} test sequences' if n is not None else ''} (ragged or cut); {fix}")
    return data


# ---- analyses: the permutation report and the stability values -------------------------------------
def _sweep_fix(run: Path) -> str:
    return f"redo it: posrnn sweep {Path(run).parent.name} (or dvc repro)"


def proven_record(path: Path, proof: Proof, count: str) -> dict:
    """A JSON analysis of a run (``permutation.json``): stamped with ``proof``'s checkpoint and
    config, and its list ``count`` as long as the ``n_sequences`` it records; one line otherwise."""
    from ..files.io import json_digest, read_json

    fix = _sweep_fix(proof.run)
    if not Path(path).is_file():
        raise PosrnnError(f"{path} is missing; {fix}")
    data = read_json(path)
    if not isinstance(data, dict) or any(not isinstance(data.get(k), str) for k in STAMPS):
        raise PosrnnError(f"{path} records no checkpoint or config digest (written by an older posrnn, or not by "
                          f"posrnn); {fix}")
    if data["checkpoint_sha256"] != proof.checkpoint_sha256 or data["config_digest"] != proof.config_digest:
        raise PosrnnError(f"{path} analyses another checkpoint or config than the run's latest (step {proof.step}: "
                          f"trained on since, or copied from another run); {fix}")
    digest = data.get("record_sha256")  # the record's own digest (absent in one written before it was kept)
    if digest is not None and digest != json_digest({k: v for k, v in data.items() if k != "record_sha256"}):
        raise PosrnnError(f"{path} was edited since posrnn wrote it (its values differ from its digest); {fix}")
    n, values = data.get("n_sequences"), data.get(count)
    if not isinstance(n, int) or not isinstance(values, list) or len(values) != n or n < 1:
        raise PosrnnError(f"{path} does not hold the {n!r} values it records in {count} (cut or edited); {fix}")
    return data


def proven_stability(run: Path) -> tuple[dict, dict]:
    """The stability values of an analysis directory and its record (``stability_meta.json``),
    proven to be the analysis of its source run as it is now: the values file is the one the
    record names (sha256), holds every (step, condition, pair) it lists with ``triplets`` values
    each, carries the source's config digest, and the source still holds the checkpoints it
    analysed (size and digest) under the same config.yaml. A record written before analyses were
    stamped (no ``values_sha256``) is refused too, naming the command that redoes it."""
    import numpy as np

    from ..files.io import read_json, read_npz

    run = Path(run)
    fix = _sweep_fix(run)
    meta_path, npz = run / "stability_meta.json", run / "stability_values.npz"
    for p in (meta_path, npz):
        if not p.is_file():
            raise PosrnnError(f"{p} is missing (stability values); {fix}")
    meta = read_json(meta_path)
    if not isinstance(meta, dict) or not isinstance(meta.get("values_sha256"), str):
        raise PosrnnError(f"{meta_path} records no digest of its values (written before analyses were stamped, or "
                          f"not by posrnn); {fix}")
    if file_sha256(npz) != meta["values_sha256"]:
        raise PosrnnError(f"{npz} is not the file {meta_path.name} records (copied, cut or edited); {fix}")
    values = read_npz(npz)
    stamps = {k: _scalar_str(values, k) for k in STAMPS}
    values = {k: v for k, v in values.items() if k not in STAMPS}
    keys, n = meta.get("keys"), meta.get("triplets")
    if sorted(values) != keys or not isinstance(n, int) or any(
            v.ndim != 1 or len(v) != n or v.dtype.kind != "f" or not np.isfinite(v).all()
            for v in values.values()):
        raise PosrnnError(f"{npz} does not hold the {len(keys) if isinstance(keys, list) else '?'} pairs of {n!r} "
                          f"finite values each that its record lists (cut or edited); {fix}")
    if None in stamps.values():
        raise PosrnnError(f"{npz} carries no checkpoint or config digest (not written by posrnn); {fix}")
    _check_source(run, meta, stamps, fix)
    return values, meta


def _check_source(run: Path, meta: dict, stamps: dict, fix: str) -> None:
    """The source run of a stability analysis is unchanged since: its config (the copy beside the
    values and their stamp) and the checkpoints the record lists, by size and digest."""
    from ..files.rundir import list_checkpoints, read_config

    src = Path(str(meta.get("source")))
    if not (src / CONFIG_FILE).is_file():
        raise PosrnnError(f"{run} analyses {src}, which holds no run now; {fix}")
    here, there = Proof(run).config_digest, Proof(src).config_digest
    if not here == there == stamps["config_digest"]:
        raise PosrnnError(f"the run {src} that {run} analyses has another config than when it was analysed "
                          f"(retrained with other settings?); {fix}")
    cfg = read_config(src, fix=fix)
    now = {s: p for s, p in list_checkpoints(src) if cfg.train.scheduled(s)}
    recorded = meta.get("checkpoints")
    ok = (isinstance(recorded, list) and bool(recorded) and all(isinstance(c, list) and len(c) == 3 for c in recorded)
          and [c[0] for c in recorded] == sorted(now))
    for i, c in enumerate(recorded if ok else []):
        sha = file_sha256(now[c[0]])
        ok = ok and now[c[0]].stat().st_size == c[1] and sha[:16] == c[2]
        if i == len(recorded) - 1:
            ok = ok and sha == stamps["checkpoint_sha256"]
    if not ok:
        raise PosrnnError(f"the checkpoints of {src} changed since {run} analysed them (trained on or retrained); "
                          f"{fix}")

