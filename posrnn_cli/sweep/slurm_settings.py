"""The profile's ``slurm:`` section, checked: its keys, each value's type and range, and the
submitit parameters they become (for SLURM, or for submitit's local executor). Plain data: no
submitit, no SLURM."""

from __future__ import annotations

import re
from typing import Any, Optional

from ..common.errors import PosrnnError

#: profile ``slurm:`` keys → (submitit parameter, what the value must be)
SETTINGS = {
    "partition": ("slurm_partition", "text"), "gpus_per_task": ("gpus_per_node", "count0"),
    "cpus_per_task": ("cpus_per_task", "count1"), "mem_gb": ("mem_gb", "positive"),
    "timeout_min": ("timeout_min", "count1"), "array_parallelism": ("slurm_array_parallelism", "count1"),
    "constraint": ("slurm_constraint", "text"), "account": ("slurm_account", "text"), "qos": ("slurm_qos", "text"),
    "gres": ("slurm_gres", "text"), "setup": ("slurm_setup", "lines"),
    "extra": ("slurm_additional_parameters", "mapping"),
}
SLURM_KEYS = {k: v[0] for k, v in SETTINGS.items()}
LOCAL_KEYS = {"gpus_per_task": "gpus_per_node", "cpus_per_task": "cpus_per_task", "timeout_min": "timeout_min"}
#: sbatch parameters that submitit sets itself: ``extra`` may not replace them
RESERVED = {"array", "output", "error", "open-mode", "signal", "job-name", "wckey"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_settings(settings: dict, cluster: str = "slurm") -> dict:
    """The profile's ``slurm:`` section (with the options over it) → submitit parameters,
    checked: an unknown key, a wrong type or a value out of range is one line naming it.
    ``gpus_per_task: 0`` passes no GPU request; ``timeout_min`` defaults to 60."""
    if not isinstance(settings, dict):
        raise PosrnnError("the profile's slurm: section must be a mapping, e.g. slurm: {partition: gpu, timeout_min: "
                          "60}")
    unknown = sorted(set(settings) - set(SETTINGS), key=str)
    if unknown:
        raise PosrnnError(f"unknown slurm setting(s) {', '.join(map(str, unknown))}; use {', '.join(SETTINGS)}")
    for key, value in settings.items():
        if value is None:
            continue
        what = SETTINGS[key][1]
        bad = {
            "text": lambda v: None if isinstance(v, str) and v.strip()
            and "\n" not in v else "a non-empty text on one line",
            "count0": lambda v: None if _is_int(v) and v >= 0 else "a whole number ≥ 0 (0: none)",
            "count1": lambda v: None if _is_int(v) and v >= 1 else "a whole number ≥ 1",
            "positive": lambda v: None if (_is_int(v) or isinstance(v, float)) and 0 < v < float("inf")
            else "a number > 0",
            "lines": lambda v: None if isinstance(v, list) and all(isinstance(x, str) and x.strip() and "\n" not in x
                                                                   for x in v)
            else "a list of shell lines, e.g. [module load cuda]",
            "mapping": _check_extra,
        }[what](value)
        if bad and key == "extra":
            raise PosrnnError(f"slurm setting extra must be {bad}")
        if bad:
            unit = " (minutes)" if key == "timeout_min" else " (GB)" if key == "mem_gb" else ""
            raise PosrnnError(f"slurm setting {key} must be {bad}{unit}, got {value!r}")
    keys = SLURM_KEYS if cluster == "slurm" else LOCAL_KEYS
    params = {keys[k]: v for k, v in settings.items() if k in keys and v is not None}
    if params.get("gpus_per_node") == 0:
        del params["gpus_per_node"]
    if "slurm_additional_parameters" in params:
        params["slurm_additional_parameters"] = {k.replace("_", "-"): v
                                                 for k, v in params["slurm_additional_parameters"].items()}
    params.setdefault("timeout_min", 60)
    return params


def _check_extra(v: Any) -> Optional[str]:
    if not isinstance(v, dict):
        return "a mapping of sbatch options to values, e.g. {mail-type: END}"
    for k, x in v.items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", k):
            return f"a mapping whose keys are sbatch option names (without --); {k!r} is not one"
        if k.replace("_", "-") in RESERVED:
            return f"free of the options submitit sets itself ({', '.join(sorted(RESERVED))}); {k!r} is one"
        if isinstance(x, bool) and not x or not isinstance(x, (str, int, float)) or isinstance(x, str) and "\n" in x:
            return f"a mapping of sbatch options to texts or numbers (true for a flag); {k}: {x!r} is not one"
    return None
