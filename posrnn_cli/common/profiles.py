"""Profiles: named sizes of the whole pipeline (``lite`` on a laptop CPU, ``paper`` at SPEC's
settings, ``micro`` for the tests), kept side by side in ``params.yaml``::

    profile: [lite]          # the active profile(s): what `dvc repro` runs
    profiles:
      lite: {device: cpu, threads: 1, n_test: 1024, fig2: {...}, dual: {...}, ...}
      paper: {...}
      micro: {...}

Every DVC stage is a ``foreach`` over ``profile``, so each profile has its own stages
(``train@lite``, ``train@micro``), its own entries in ``dvc.lock`` and its own directories
(``runs/<name>``, ``results/<name>``, ``figures/<name>``): profiles never overwrite each
other, and switching back to one finds it up to date. ``posrnn profile use NAME`` rewrites
the one ``profile:`` line and nothing else; ``dvc exp run -S profiles.lite.fig2.iterations=8000``
edits one profile's value (no YAML anchors, so DVC's rewrite keeps the file valid).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .config import load_yaml
from .errors import PosrnnError

ACTIVE_LINE = re.compile(r"^profile:.*$", re.MULTILINE)


def read_params(params: Path) -> dict:
    data = load_yaml(params)
    if not isinstance(data, dict):
        raise PosrnnError(f"{params} is not a mapping of sections; restore it from git (git checkout {params})")
    return data


def profiles_of(data: dict, params: Path) -> dict[str, dict]:
    profs = data.get("profiles")
    if not isinstance(profs, dict) or not profs:
        raise PosrnnError(f"{params} has no `profiles:` mapping; restore it from git (git checkout {params})")
    return profs


def active_profiles(params: Path) -> list[str]:
    """The names listed by ``profile:`` (a name or a list of names)."""
    data = read_params(params)
    names = data.get("profile")
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise PosrnnError(f"{params}: `profile:` must list the active profile(s), e.g. `profile: [lite]`; "
                          f"set it with `posrnn profile use lite`")
    known = profiles_of(data, params)
    for n in names:
        if n not in known:
            raise PosrnnError(f"{params}: active profile {n!r} is not defined; choose one of: {', '.join(known)}")
    return names


def load_profile(params: Path, name: str) -> dict:
    """One profile's mapping, by name."""
    data = read_params(params)
    profs = profiles_of(data, params)
    if name not in profs:
        raise PosrnnError(f"unknown profile {name!r}; choose one of: {', '.join(profs)}")
    prof = profs[name]
    if not isinstance(prof, dict):
        raise PosrnnError(f"{params}: profile {name!r} must be a mapping")
    return prof


def use_profile(params: Path, names: list[str]) -> str:
    """Make ``names`` the active profile(s): rewrite the ``profile:`` line of ``params`` (the
    rest of the file, comments included, is left as it is). Returns the new line."""
    params = Path(params)
    data = read_params(params)
    known = profiles_of(data, params)
    for n in names:
        if n not in known:
            raise PosrnnError(f"unknown profile {n!r}; choose one of: {', '.join(known)}")
    text = params.read_text()
    line = f"profile: [{', '.join(names)}]"
    matches = ACTIVE_LINE.findall(text)
    if len(matches) == 1:
        new = ACTIVE_LINE.sub(line, text)
    elif not matches:
        new = text.rstrip("\n") + "\n" + line + "\n"
    else:
        raise PosrnnError(f"{params} has {len(matches)} `profile:` lines; keep one")
    if new != text:
        from .io import atomic_write_text

        atomic_write_text(params, new)
    return line


def describe(params: Path) -> list[dict[str, Any]]:
    """One row per profile: name, active, device, the experiments it defines."""
    data = read_params(params)
    active = set(active_profiles(params))
    rows = []
    for name, prof in profiles_of(data, params).items():
        exps = [k for k, v in prof.items() if isinstance(v, dict) and k not in ("executor", "slurm")]
        rows.append({"name": name, "active": name in active, "device": prof.get("device", "auto"),
                     "experiments": exps, "about": prof.get("about", "")})
    return rows
