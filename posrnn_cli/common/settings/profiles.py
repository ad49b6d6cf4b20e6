"""Profiles: named sizes of the whole pipeline (``lite`` on a laptop CPU, ``paper`` at the papers'
settings, ``micro`` for the tests), kept side by side in ``params.yaml``::

    profile: [lite]          # the active profile(s): what `dvc repro` runs
    profiles:
      lite: {device: cpu, threads: 1, n_test: 1024, fig2: {...}, dual: {...}, ...}
      paper: {...}
      micro: {...}

Every DVC stage is a ``foreach`` over ``profile``, so each profile has its own stages
(``train@lite``, ``train@micro``), its own entries in ``dvc.lock`` and its own directories
(``runs/<name>``, ``results/<name>``, ``figures/<name>``): profiles never overwrite each
other, and switching back to one finds it up to date. ``posrnn profile use NAME`` edits
the one ``profile:`` value in place and nothing else; ``dvc exp run -S profiles.lite.fig2.iterations=8000``
edits one profile's value (no YAML anchors, so DVC's rewrite keeps the file valid).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from .config import bounded, check_bounds, coerce, load_yaml
from ..errors import PosrnnError, did_you_mean
from .yamltypes import MAX_YAML_NODES, NotYaml, check_name, expanded_size, load_as_dvc



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
        check_name(n, f"{params}: active profile")
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


def _top_entries(text: str, params: Path) -> list:
    """The top-level ``(key node, value node)`` pairs of ``text``, as YAML composed them (so a
    quoted ``"profile":`` key is found as well as a plain one), composed as DVC's loader does."""
    from ruamel.yaml import YAML, YAMLError

    try:
        node = YAML(typ="safe").compose(text)
    except YAMLError:
        raise PosrnnError(f"{params} is not valid YAML; fix it before choosing a profile") from None
    if node is None or node.id != "mapping" or expanded_size(node, {}, set(), MAX_YAML_NODES) > MAX_YAML_NODES:
        raise PosrnnError(f"{params} is not a mapping of sections; restore it from git (git checkout {params})")
    return node.value


def use_profile(params: Path, names: list[str]) -> str:
    """Make ``names`` the active profile(s): edit the value of the top-level ``profile:`` entry
    of ``params`` in place (a flow list ``[a, b]``, a single name, or the block-style list DVC
    writes after ``dvc exp run -S``) and nothing else: the rest of the file, its comments (the
    one on the ``profile:`` line too), its line endings, its mode and, for a symlink, the link
    itself are kept. The new text is parsed and compared before it replaces the old (a file it
    cannot edit safely is refused). Returns the new entry as one line, saying so when it stays a
    block list."""
    params = Path(params)
    data = read_params(params)
    _check_profile_names(params, data, names)
    text = _params_text(params)
    new, written = _with_profile_entry(params, text, names)
    _check_rewrite(params, new, data, names)
    if new != text:
        replace_in_place(params, new.encode("utf-8"))
    return written


def _check_profile_names(params: Path, data: dict, names: list[str]) -> None:
    """Refuse a name ``params`` defines no profile of (with the near miss), or one DVC cannot read plain."""
    known = profiles_of(data, params)
    for n in names:
        check_name(n, "profile")  # written plain into `profile: [...]`, where DVC reads it
        if n not in known:
            raise PosrnnError(f"unknown profile {n!r}{did_you_mean(n, known)}; choose one of: {', '.join(known)}")


def _params_text(params: Path) -> str:
    try:
        return params.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise PosrnnError(f"params file {params} is not text (not UTF-8); pass a YAML file") from None


def _with_profile_entry(params: Path, text: str, names: list[str]) -> tuple[str, str]:
    """``text`` with its top-level ``profile:`` entry set to ``names`` (added at the end when it has
    none), changing that entry's value only → (the new text, the entry as written, in one line)."""
    newline = "\r\n" if "\r\n" in text else "\n"
    entries = [(k, v) for k, v in _top_entries(text, params) if k.id == "scalar" and k.value == "profile"]
    if len(entries) > 1:
        raise PosrnnError(f"{params} has {len(entries)} top-level `profile:` entries (DVC refuses a repeated key); "
                          "keep one")
    line = f"profile: [{', '.join(names)}]"
    flow = f"[{', '.join(names)}]"
    if not entries:
        return text + ("" if text.endswith(("\n", "\r")) or not text else newline) + line + newline, line
    key, value = entries[0]
    a, b = value.start_mark.index, value.end_mark.index
    if value.id == "sequence" and not value.flow_style:
        new = _edit_block_list(text, value.value, names, newline)
        if new is None:
            raise PosrnnError(f"{params}: the `profile:` list holds more than names; set it by hand to {line}")
        return new, f"profile: {', '.join(names)} (kept as a block list, one `- name` a line)"
    empty = value.id == "scalar" and value.value == ""
    if value.start_mark.line != key.start_mark.line and not empty:
        raise PosrnnError(f"{params}: the `profile:` entry spans lines in a form posrnn cannot edit safely; "
                          f"set it by hand to {line}")
    if empty and a == b:
        a = b = text.index(":", key.end_mark.index) + 1  # ruamel.yaml marks an empty value on the next line
        return (text[:a] + " " + flow + text[b:] if not text[a - 1:a].isspace() else text[:a] + flow + text[b:]), line
    return text[:a] + flow + text[b:], line


def _check_rewrite(params: Path, new: str, data: dict, names: list[str]) -> None:
    """Refuse a rewrite whose text does not read back as ``data`` with ``profile:`` set to ``names``."""
    try:
        check = load_as_dvc(new, str(params))
    except (NotYaml, PosrnnError, RecursionError):
        check = None
    if not isinstance(check, dict) or check.get("profile") != names or \
            {k: v for k, v in check.items() if k != "profile"} != {k: v for k, v in data.items() if k != "profile"}:
        raise PosrnnError(f"could not rewrite the `profile:` entry of {params} safely; "
                          f"set it by hand to profile: [{', '.join(names)}]")


def _edit_block_list(text: str, items: list, names: list[str], newline: str) -> Optional[str]:
    """A block-style ``profile:`` list (``- lite`` lines) set to ``names`` by changing only the
    items' own lines: each kept item's name is replaced where it stands, surplus items' lines are
    removed, new items go on lines of their own after the last; comment lines stay where they
    are. None when an item is not a plain name."""
    if not items or not all(i.id == "scalar" for i in items):
        return None
    edits = [(i.start_mark.index, i.end_mark.index, n) for i, n in zip(items, names)]
    for item in items[len(names):]:  # an item's whole line, its own trailing comment with it
        start = text.rfind("\n", 0, item.start_mark.index) + 1
        end = text.find("\n", item.end_mark.index)
        edits.append((start, len(text) if end < 0 else end + 1, ""))
    if len(names) > len(items):
        last = items[-1]
        start = text.rfind("\n", 0, last.start_mark.index) + 1
        end = text.find("\n", last.end_mark.index)
        end = len(text) if end < 0 else end - (text[end - 1:end] == "\r")
        prefix = text[start:last.start_mark.index]  # the indent and dash of the last item
        edits.append((end, end, "".join(newline + prefix + n for n in names[len(items):])))
    for a, b, repl in sorted(edits, reverse=True):
        text = text[:a] + repl + text[b:]
    return text


def replace_in_place(path: Path, data: bytes) -> None:
    """Replace the bytes of ``path`` atomically, keeping its mode and, when ``path`` is a symlink,
    the link (the file it points to is replaced)."""
    import os
    import stat

    from ..files.io import temp_path

    target = Path(os.path.realpath(path))
    mode = stat.S_IMODE(target.stat().st_mode)
    tmp = temp_path(target)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except PermissionError:
        raise PosrnnError(
            f"cannot write {path} (permission denied); make it writable or choose the profile by hand") from None
    except OSError as e:
        raise PosrnnError(f"cannot write {path} ({e.strerror or type(e).__name__}); nothing was changed") from None
    finally:
        tmp.unlink(missing_ok=True)


def describe(params: Path) -> list[dict[str, Any]]:
    """One row per profile: name, active, device, the experiments it defines."""
    data = read_params(params)
    active = set(active_profiles(params))
    rows = []
    for name, prof in profiles_of(data, params).items():
        exps = [k for k, v in prof.items() if isinstance(v, dict) and k not in ("executor", "slurm", "power")]
        rows.append({"name": name, "active": name in active, "device": prof.get("device", "auto"),
                     "experiments": exps, "about": prof.get("about", "")})
    return rows


# ---- the sections of experiments that are not grids of runs ----------------------------------
@dataclass
class StabilitySection:
    """``stability:`` — the gradient-stability analysis of the dual runs' checkpoints (003 §4.3)."""

    triplets: int = bounded(1024, 2)  # (x, s), (x, s′), (x′, s) triplets per condition and checkpoint
    chunk_size: int = bounded(64, 1)  # sequences per Jacobian pass
    seed: int = bounded(0, 0, 2**63 - 1)  # the triplets' seed (the same triplets at every checkpoint)
    # the target's position t (1: the first token, the RNNs' set-up; 002 §4.3 puts the S4D's at 23):
    # t − 1 disturbants shared by each triplet before it, J = ∂h_2L/∂z_t; at most the runs' task.length
    target_position: int = bounded(1, 1)
    # the source runs' cores analysed (none given: every one); [] analyses nothing
    models: Optional[list] = None


@dataclass
class ExtendSection:
    """``extend:`` — vocabulary extension of fig2 runs (000 §4.2); ``cells``, ``pe`` and ``seeds``
    name the fig2 runs to extend."""

    extra_vocab: int = bounded(None, 1, 2**24)  # new ids (required)
    iterations: Optional[int] = bounded(None, 1, 10**12, none="the source run's")
    cells: list = field(default_factory=lambda: [{}])
    pe: list = field(default_factory=list)
    seeds: list = field(default_factory=list)


@dataclass
class LmDataSection:
    """``lm_data:`` — WikiText → paragraphs → SentencePiece → encoded ids (001 §6.5); all required."""

    data_dir: str = None
    vocab_size: int = bounded(None, 2, 65_536)  # SentencePiece pieces (stored as uint16)
    max_tokens: int = bounded(None, 2)  # tokens kept per paragraph, BOS and EOS included
    #: SentencePiece's training threads. Its pieces depend on this count (1, 2 and 4 threads give
    #: three vocabularies), so it is a recorded setting, not the machine's core count
    threads: int = bounded(None, 1, 1024)


def read_section(cls: type, data: Any, where: str, required: tuple[str, ...] = ()) -> Any:
    """A profile section as ``cls``: unknown or missing keys, values of the wrong type and values
    outside the bounds declared on ``cls``'s fields are refused with one line naming them."""
    if not isinstance(data, dict):
        raise PosrnnError(f"{where} must be a mapping")
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(data) - set(known))
    missing = [k for k in required if data.get(k) is None]
    if unknown or missing:
        raise PosrnnError(f"{where}: " + "; ".join(
            ([f"unknown key(s) {', '.join(unknown)}"] if unknown else [])
            + ([f"missing {', '.join(missing)}"] if missing else []))
            + f"; use {', '.join(known)}")
    hints = typing.get_type_hints(cls)
    values = {}
    for k, v in data.items():
        tp = hints[k]
        is_list = tp is list or typing.get_origin(tp) is list or list in typing.get_args(tp)
        values[k] = v if is_list else coerce(v, tp, f"{where}: {k}")
    section = cls(**values)
    check_bounds(section, where)
    return section
