"""Text as DVC reads it. DVC reads params.yaml as YAML 1.2 (ruamel.yaml), posrnn with PyYAML
(YAML 1.1); the values where the two differ are refused when the file is read
(``config.check_as_dvc_reads``). Two kinds of text read alike by both yet typed otherwise by DVC
are kept apart here, so the config can refuse them where a type is expected:

- ``QuotedText``: a quoted or ``!!str``-tagged scalar (``"12"``, ``'0.001'``, ``!!str 12``,
  ``"true"``): text to DVC, so never a number or a boolean;
- ``NumberText``: a plain scalar PyYAML reads as text but DVC as a number, boolean or null
  (``1e-4``, ``1e3``): a number to DVC, so never a name.

Both are ``str``; they dump as plain strings.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

from .errors import PosrnnError

_STR = "tag:yaml.org,2002:str"


class QuotedText(str):
    """A scalar DVC reads as text because it is quoted or tagged ``!!str``."""


class NumberText(str):
    """A plain scalar that PyYAML reads as text and DVC as a number, boolean or null."""


@functools.lru_cache(maxsize=1024)
def dvc_reading(text: str) -> Any:
    """``text`` written plain, as DVC's ruamel.yaml (YAML 1.2) reads it (the text itself when it
    cannot read it)."""
    from ruamel.yaml import YAML

    try:
        return YAML(typ="safe", pure=True).load(text)
    except Exception:
        return text


class ParamsLoader(yaml.SafeLoader):
    """PyYAML's safe loader, its text marked ``QuotedText`` or ``NumberText`` where DVC types it."""


def _construct_str(loader: ParamsLoader, node: yaml.ScalarNode) -> str:
    value = loader.construct_scalar(node)
    if node.style is not None or loader.resolve(yaml.ScalarNode, node.value, (True, False)) != _STR:
        return QuotedText(value)
    if value and not isinstance(dvc_reading(value), str):
        return NumberText(value)
    return value


class TaggedInt(int):
    """An integer written as quoted text under a ``!!int`` tag (``!!int "02"``), not plainly."""


def _construct_int(loader: ParamsLoader, node: yaml.ScalarNode) -> int:
    value = loader.construct_yaml_int(node)
    return TaggedInt(value) if node.style is not None else value


def written_plainly(value: Any) -> bool:
    """Whether ``value`` is an integer written plainly (``4``; not ``"4"`` or ``!!int "04"``)."""
    return type(value) is int


ParamsLoader.add_constructor(_STR, _construct_str)
ParamsLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
yaml.SafeDumper.add_representer(TaggedInt, yaml.representer.SafeRepresenter.represent_int)
for _cls in (QuotedText, NumberText):
    yaml.SafeDumper.add_representer(_cls, yaml.representer.SafeRepresenter.represent_str)
    yaml.Dumper.add_representer(_cls, yaml.representer.SafeRepresenter.represent_str)


def check_name(name: Any, what: str) -> str:
    """Refuse, in one line, a name DVC would read as a number, boolean or null when written plain
    in params.yaml or dvc.yaml (a profile ``1e3`` is 1000.0 there, ``null`` nothing, ``true`` a
    boolean), so a name means one thing to posrnn and DVC."""
    text = str(name)
    reading = dvc_reading(text)
    if isinstance(name, NumberText) or not isinstance(reading, str):
        raise PosrnnError(f"{what} {text!r} reads as {reading!r} in DVC (YAML 1.2), not as a name; choose a name that "
                          f"starts with a letter")
    return text
