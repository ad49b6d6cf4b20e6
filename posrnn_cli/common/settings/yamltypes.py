"""YAML as DVC reads it. DVC reads params.yaml with ruamel.yaml's safe loader (YAML 1.2;
``dvc.utils.serialize.parse_yaml``: ``YAML(typ="safe")``); posrnn reads params files and
``--set`` values with the same loader (``load_as_dvc``), so a value means here what DVC records
(``0123`` is 123, ``yes`` text, ``1e-3`` a number, ``"12"`` text). Before a document is built,
the expansion of its aliases is bounded and a key repeated in one mapping is named
(``check_document``, for any composed YAML node); a name DVC reads as a number, boolean or null
is refused where a name is expected (``check_name``).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Optional

from ..errors import PosrnnError

#: the most YAML nodes a document may expand to through its aliases (``&a`` / ``*a``): a params
#: file is a few hundred; a "billion laughs" document is refused before it is expanded
MAX_YAML_NODES = 100_000


class NotYaml(ValueError):
    """Text DVC's loader cannot read (a syntax error, a value its tag cannot hold); ``problem``
    says why in a few words."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


def children(node) -> list:
    """The nodes directly under a composed node (a mapping's keys and values), PyYAML's or ruamel's."""
    if node.id == "sequence":
        return list(node.value)
    if node.id == "mapping":
        return [n for pair in node.value for n in pair]
    return []


def expanded_size(node, memo: dict, open_: set, limit: int) -> int:
    """Nodes of ``node`` once every alias is expanded (memoised per node, so a shared anchor is
    counted each time it is used but walked once); stops early above ``limit``."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in open_:
        return limit + 1  # an alias inside its own anchor: infinite
    open_.add(key)
    total = 1
    for child in children(node):
        total += expanded_size(child, memo, open_, limit)
        if total > limit:
            break
    open_.discard(key)
    memo[key] = total
    return total


def repeated_key(node, seen: set, path: str = "") -> Optional[str]:
    """The dotted path of the first key that a mapping of ``node`` holds twice (DVC refuses such a
    file), or None."""
    if id(node) in seen:
        return None
    seen.add(id(node))
    if node.id == "mapping":
        keys: set = set()
        for k, v in node.value:
            key = (str(k.tag), k.value) if k.id == "scalar" else None
            name = f"{path}.{k.value}" if path and key else (str(k.value) if key else path)
            if key is not None and key[1] != "<<":
                if key in keys:
                    return name
                keys.add(key)
            found = repeated_key(v, seen, name)
            if found:
                return found
    elif node.id == "sequence":
        for i, v in enumerate(node.value):
            found = repeated_key(v, seen, f"{path}[{i}]")
            if found:
                return found
    return None


def check_document(node, source: str) -> None:
    """Refuse a composed document whose aliases expand beyond ``MAX_YAML_NODES`` nodes (or refer
    to themselves), or that repeats a key in one mapping, in one line that never shows a value."""
    if expanded_size(node, {}, set(), MAX_YAML_NODES) > MAX_YAML_NODES:
        raise PosrnnError(f"{source}: its YAML aliases (&/*) expand beyond {MAX_YAML_NODES:,} values; "
                          f"write the values out instead of aliasing them")
    repeated = repeated_key(node, set())
    if repeated:
        raise PosrnnError(f"{source}: the key {repeated} appears twice in one mapping (DVC refuses such a "
                          f"file, and which value counts is unclear); keep one")


@functools.lru_cache(maxsize=64)
def _checked_constructor(source: str) -> type:
    from ruamel.yaml.constructor import SafeConstructor

    class CheckedConstructor(SafeConstructor):
        """ruamel.yaml's safe constructor, DVC's, that first checks the composed document."""

        def construct_document(self, node: Any) -> Any:
            check_document(node, source)
            return super().construct_document(node)

    return CheckedConstructor


def load_as_dvc(text: str, source: str) -> Any:
    """``text`` as DVC reads it (``YAML(typ="safe")``; None for an empty document), checked by
    ``check_document`` before it is built. Text that loader cannot read raises ``NotYaml``."""
    from ruamel.yaml import YAML, YAMLError

    yaml = YAML(typ="safe")  # as dvc.utils.serialize.parse_yaml reads params.yaml
    yaml.Constructor = _checked_constructor(source)
    try:
        with warnings.catch_warnings():  # a %YAML 1.1 document's "1e3" warns in many lines; it reads as in DVC
            warnings.simplefilter("ignore")
            return yaml.load(text)
    except YAMLError as e:
        raise NotYaml(yaml_problem(e)) from None
    except (ValueError, TypeError, OverflowError) as e:  # a value its tag cannot hold (!!int "1:30")
        raise NotYaml(f"a value cannot be read as its tag says: {str(e)[:80]}") from None


def yaml_problem(e: Exception) -> str:
    """A YAML error in a few words: its problem and line (``expected a mapping or list of mappings
    for merging`` for a merge key ``<<`` over a value), never the parser's multi-line trace."""
    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    if problem:
        return f"line {mark.line + 1}: {problem}" if mark is not None else str(problem)
    return str(e).splitlines()[0] if str(e) else "parse error"


@functools.lru_cache(maxsize=1024)
def dvc_reading(text: str) -> Any:
    """``text`` written plain, as DVC's ruamel.yaml (YAML 1.2) reads it (the text itself when it
    cannot read it)."""
    from ruamel.yaml import YAML

    try:
        return YAML(typ="safe", pure=True).load(text)
    except Exception:
        return text


def check_name(name: Any, what: str) -> str:
    """Refuse, in one line, a name DVC would read as a number, boolean or null when written plain
    in params.yaml or dvc.yaml (a profile ``1e3`` is 1000.0 there, ``null`` nothing, ``true`` a
    boolean), so a name means one thing to posrnn and DVC."""
    text = str(name)
    reading = dvc_reading(text) if isinstance(name, str) else name
    if not isinstance(reading, str):
        raise PosrnnError(f"{what} {text!r} reads as {reading!r} in DVC (YAML 1.2), not as a name; choose a name that "
                          f"starts with a letter")
    return text
