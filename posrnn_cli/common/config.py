"""One typed config for a run: ``params.yaml`` → dataclasses → CLI options → ``--set key=value``.

The dataclass defaults *are* the paper's settings (docs/papers.md, The settings the code follows); ``params.yaml``
repeats them (a test keeps the two equal) so that DVC can track them. Unknown keys and values of
the wrong type are refused with a message that names the key and the fix.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import math
import re
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

import yaml

from . import keys
from .errors import PosrnnError
from .yamltypes import NumberText, ParamsLoader, QuotedText, dvc_reading


def bounded(default: Any, lo: Optional[float] = None, hi: Optional[float] = None, positive: bool = False,
            none: Optional[str] = None, below: Optional[float] = None, why: Optional[str] = None):
    """A config field with its bounds beside it (``lo`` … ``hi`` inclusive; ``positive``: > 0;
    ``below``: strictly less), checked by ``check_bounds``, which says ``why`` beside a refusal;
    ``none`` says what a None value means (help shows it)."""
    meta = {k: v for k, v in (("lo", lo), ("hi", hi), ("positive", positive or None), ("none", none),
                              ("below", below), ("why", why)) if v is not None}
    return field(default=default, metadata=meta)


def check_bounds(section: Any, name: str) -> None:
    """Refuse a value outside its field's declared bounds, with a one-line reason naming the key."""
    for f in fields(section):
        value, m = getattr(section, f.name), f.metadata
        if value is None or not ({"lo", "hi", "positive", "below"} & set(m)):
            continue
        key, why = f"{name}.{f.name}", f" ({m['why']})" if "why" in m else ""
        if "below" in m and not (m.get("lo", 0) < value < m["below"] if m.get("positive") else value < m["below"]):
            raise PosrnnError(f"{key} must lie strictly between {m.get('lo', 0)} and {m['below']}, got {value}{why}")
        if m.get("positive") and not value > 0:
            raise PosrnnError(f"{key} must be positive, got {value}{why}")
        if "lo" in m and value < m["lo"]:
            raise PosrnnError(f"{key} must be at least {m['lo']}, got {value}{why}")
        if "hi" in m and value > m["hi"]:
            raise PosrnnError(f"{key} must lie in {m.get('lo', 0)} … {m['hi']:,}, got {value}{why}")


@dataclass
class TaskConfig:
    """What the model is asked to do (docs/papers.md, Tasks)."""

    name: str = "reverse"
    vocab_size: int = bounded(256, 2, 2**24)  # V
    length: int = bounded(64, 1, 100_000)  # L (the maximum length when min_length is set)
    # variable length: L ~ U{min_length … length}
    min_length: Optional[int] = bounded(None, 0, 100_000, none="none, a fixed L")
    # dual-frequency vocabulary: P(a position holds a Rare id)
    rarity: Optional[float] = bounded(None, positive=True, below=1, none="none, uniform ids")
    delay: int = bounded(60, 0, 10**6)  # copy: T blank steps between input and output phase
    # continuous: tokens are unit vectors in R^dim
    dim: int = bounded(64, 2, 2**16, why="R^1 holds only two unit vectors: not an infinite vocabulary")
    # mqar: P key-value pairs (the Zoology harness's num_kv_pairs)
    pairs: Optional[int] = bounded(None, 1, 10**6, none="none; mqar needs it")
    # mqar: the query region's other steps: "random" ids of 0 … V−1 (the Zoology harness's random_non_queries) or "zero"
    # (id 0)
    filler: str = "random"
    autoregressive: bool = False  # output-phase input = previous target / prediction
    n_test: int = bounded(1024, 1, 10**7)  # held-out test sequences (per cell for grids)
    test_seed: int = bounded(1234, 0, 2**63 - 1)  # the test set's own seed, shared by every run of a task
    data: Optional[str] = None  # lm: the encoded corpus directory (posrnn lm encode)
    # lm: each batch from one of n equal-count groups of the paragraphs sorted by length (less padding; it changes
    # which paragraphs share a batch, so the papers' profiles leave it off)
    length_buckets: Optional[int] = bounded(None, 1, 2**20, none="none, every batch drawn from all paragraphs")


@dataclass
class ModelConfig:
    """The network (docs/papers.md, Model)."""

    name: str = "lstm"
    hidden_size: int = bounded(512, 1, 2**16)  # H
    embed_size: Optional[int] = bounded(None, 1, 2**16, none="H")  # E; None = hidden_size
    pe: str = "sinusoidal"
    pe_mode: str = "concat"
    pe_dim: Optional[int] = bounded(None, 1, 2**16, none="E")  # None = embed_size
    layers: int = bounded(1, 1, 2**16)  # transformer blocks
    heads: int = bounded(8, 1, 2**16)  # transformer attention heads
    state_size: int = bounded(64, 1, 2**16)  # S4D state N
    # mamba, gated_deltanet_layer, hawk, xlstm: the short causal convolution (False: the identity in its place)
    conv: bool = True
    # hawk, gated_deltanet_layer: "mixer" (the core alone) or "full" (the authors' residual block around it: pre-norm,
    # the core, residual, pre-norm, gated MLP, residual)
    block: str = "mixer"
    frozen_vocab: Optional[int] = None  # set by extend-vocab: ids < frozen_vocab are the trained, frozen ones

    @property
    def E(self) -> int:
        return self.embed_size if self.embed_size is not None else self.hidden_size

    @property
    def P(self) -> int:
        return self.pe_dim if self.pe_dim is not None else self.E


@dataclass
class TrainConfig:
    """The optimisation recipe (docs/papers.md, Training) and where it runs."""

    iterations: int = bounded(300_000, 1, 10**12)
    batch_size: int = bounded(512, 1, 2**24)
    lr: float = bounded(1e-3, positive=True)
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = bounded(1e-9, positive=True)
    weight_decay: float = bounded(0.0, 0)
    clip: float = bounded(1.0, positive=True)
    # None = auto: 1% of the iterations, at most 1,000 (the papers: 1,000 at 300,000)
    warmup: Optional[int] = bounded(None, 0, none="1% of the run, at most 1,000")
    seed: int = bounded(111, 0, 2**63 - 1)
    checkpoint_every: int = bounded(5000, 1)
    checkpoint_initial: bool = False  # also keep the untrained model as step 0 (a stability curve's start)
    # also a checkpoint after this much wall time (clusters with short limits)
    checkpoint_minutes: Optional[float] = bounded(None, hi=10**6, positive=True, none="off")
    log_every: int = bounded(100, 1)
    eval_batch_size: int = bounded(1024, 1, 2**24)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    amp: bool = False  # bf16 autocast of forward and loss (fp32 master weights); any device, a speed-up on GPUs
    fused_adam: Optional[bool] = None  # Adam's fused kernel: None = on CUDA only, True = everywhere, False = never
    cuda_graph: bool = False  # capture the whole update in one CUDA graph (CUDA only; fixed batch shapes)
    # torch CPU threads; None = chosen by the command (common.machine)
    threads: Optional[int] = bounded(None, 1, 4096, none="auto: 1 for a small model, else the cores not busy")

    @property
    def warmup_steps(self) -> int:
        """The warm-up actually used: ``warmup``, or 1% of the run capped at the papers' 1,000."""
        return self.warmup if self.warmup is not None else min(1000, self.iterations // 100)

    def scheduled(self, step: int) -> bool:
        """Whether the schedule checkpoints ``step``: every ``checkpoint_every`` steps, the last one
        and, under ``checkpoint_initial``, step 0. Checkpoints taken for the wall clock
        (``checkpoint_minutes``), a signal or ``--stop-after`` are not: they exist to resume from,
        and no result reads them."""
        return step == self.iterations or (step > 0 and step % self.checkpoint_every == 0) or (
            step == 0 and self.checkpoint_initial)


#: Keys that describe where/how fast a run executes, not what it computes: they may
#: differ between a run and its resumption.
RUNTIME_KEYS = frozenset({"train.device", "train.threads", "train.eval_batch_size", "train.log_every",
                          "train.checkpoint_minutes"})

#: Keys that do not split a cell of a grid: runs that differ only in these are seeds of one table
#: row (the table of config keys, ``common.keys``).
CELL_IGNORED = keys.CELL_IGNORED

#: Top-level keys of params.yaml that hold the pipeline's profiles, not a run's config.
PIPELINE_SECTIONS = ("profile", "profiles")


@dataclass
class RunConfig:
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["train"]["betas"] = list(self.train.betas)
        return d

    @classmethod
    def from_dict(cls, data: Any, source: str = "config") -> "RunConfig":
        cfg = cls()
        apply_mapping(cfg, data, source)
        return cfg

    def flat(self) -> dict[str, Any]:
        """``{"task.vocab_size": 256, …}`` — every leaf under its dotted key."""
        return {f"{s}.{k}": v for s, sec in self.to_dict().items() for k, v in sec.items()}


SECTIONS = {f.name: f for f in fields(RunConfig)}


def _number(text: str) -> Optional[float]:
    """``float(text)``, or None when the text is not a number (YAML reads ``1e-4`` as a string)."""
    try:
        return float(text)
    except ValueError:
        return None


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it in canonical form."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return coerce(value, inner[0], key)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise PosrnnError(f"{key} must be a list of {len(args)} values, got {value!r}")
        return tuple(coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    check_dvc_type(value, tp, key)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        f = _number(value.replace("_", "")) if isinstance(value, str) else None
        if f is not None and f.is_integer():
            return int(f)
    elif tp is float:
        f = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            f = float(value)
        elif isinstance(value, str):
            f = _number(value)
        if f is not None:
            if not math.isfinite(f):
                raise PosrnnError(f"{key} must be a finite number, got {value!r}")
            return f
    elif tp is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - every annotation above is handled
        raise TypeError(f"unsupported annotation {tp!r} for {key}")
    name = getattr(tp, "__name__", str(tp))
    raise PosrnnError(f"{key} must be of type {name}, got {value!r}")


def check_dvc_type(value: Any, tp: Any, key: str) -> None:
    """Refuse text where DVC reads text but a number or boolean is expected (``"12"``, ``!!str 12``),
    and a plain value DVC reads as a number where text is expected (``1e3``)."""
    if isinstance(value, QuotedText) and tp in (bool, int, float):
        raise PosrnnError(f"{key} is {str(value)!r}, quoted or tagged !!str: text to DVC (YAML 1.2), where a "
                          f"{tp.__name__} is expected; write it without quotes or tag: {value}")
    if isinstance(value, NumberText) and tp is str:
        raise PosrnnError(f"{key} is {value} unquoted, which DVC (YAML 1.2) reads as {dvc_reading(value)!r}, where "
                          f"text is expected; quote it: \"{value}\"")


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def set_key(cfg: RunConfig, key: str, value: Any, source: str = "--set") -> None:
    """Set the dotted ``key`` (e.g. ``model.hidden_size``) to ``value``, type-checked."""
    section, _, name = key.partition(".")
    if section not in SECTIONS or not name:
        raise PosrnnError(
            f"{source}: unknown key {key!r}; keys look like SECTION.NAME with SECTION one of "
            f"{', '.join(SECTIONS)}"
        )
    sec = getattr(cfg, section)
    hints = _hints(type(sec))
    if name not in hints:
        raise PosrnnError(
            f"{source}: unknown key {key!r}; valid keys in {section!r}: {', '.join(hints)}"
        )
    setattr(sec, name, coerce(value, hints[name], f"{source}: {key}"))


def apply_mapping(cfg: RunConfig, data: Any, source: str) -> RunConfig:
    """Apply a nested mapping ``{section: {name: value}}`` onto ``cfg``."""
    if data is None:
        return cfg
    if not isinstance(data, dict):
        raise PosrnnError(f"{source}: expected a mapping of sections, got {type(data).__name__}")
    for section, values in data.items():
        if section in PIPELINE_SECTIONS:
            continue
        if section not in SECTIONS:
            raise PosrnnError(
                f"{source}: unknown section {section!r}; valid: {', '.join(list(SECTIONS) + list(PIPELINE_SECTIONS))}"
            )
        if not isinstance(values, dict):
            raise PosrnnError(f"{source}: section {section!r} must be a mapping")
        for name, value in values.items():
            set_key(cfg, f"{section}.{name}", value, source)
    return cfg


def parse_set(item: str) -> tuple[str, Any]:
    """``"model.hidden_size=64"`` → ``("model.hidden_size", 64)`` (value read as YAML)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise PosrnnError(f"--set expects KEY=VALUE (e.g. model.hidden_size=64), got {item!r}")
    try:
        # as DVC would read it once `dvc exp run -S` wrote it into params.yaml
        value = safe_load_bounded(raw, f"--set {key.strip()}", as_dvc=True) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


#: the most YAML nodes a document may expand to through its aliases (``&a`` / ``*a``): a params
#: file is a few hundred; a "billion laughs" document is refused before it is expanded
MAX_YAML_NODES = 100_000


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
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    else:
        children = []
    for child in children:
        total += expanded_size(child, memo, open_, limit)
        if total > limit:
            break
    open_.discard(key)
    memo[key] = total
    return total


def _repeated_key(node, seen: set, path: str = "") -> Optional[str]:
    """The dotted path of the first key that a mapping of ``node`` holds twice (DVC refuses such a
    file; PyYAML would keep the last value), or None."""
    if id(node) in seen:
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set = set()
        for k, v in node.value:
            key = (k.tag, k.value) if isinstance(k, yaml.ScalarNode) else None
            name = f"{path}.{k.value}" if path and key else (str(k.value) if key else path)
            if key is not None and key[1] != "<<":
                if key in keys:
                    return name
                keys.add(key)
            found = _repeated_key(v, seen, name)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            found = _repeated_key(v, seen, f"{path}[{i}]")
            if found:
                return found
    return None


#: documents found to read alike in YAML 1.1 and 1.2 (a params file is read several times per command)
_AGREED: dict[str, None] = {}


def safe_load_bounded(text: str, source: str, as_dvc: bool = False) -> Any:
    """``yaml.safe_load(text)``, but a document whose aliases expand beyond ``MAX_YAML_NODES``
    nodes (or refer to themselves) is refused before it is built, and so is one that repeats a
    key in a mapping (DVC refuses it; PyYAML would keep the last). ``as_dvc`` (params files and
    ``--set`` values): also one that DVC reads otherwise (``check_as_dvc_reads``). The message
    never shows the value."""
    loader = ParamsLoader(text) if as_dvc else yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            if expanded_size(node, {}, set(), MAX_YAML_NODES) > MAX_YAML_NODES:
                raise PosrnnError(f"{source}: its YAML aliases (&/*) expand beyond {MAX_YAML_NODES:,} values; "
                                  f"write the values out instead of aliasing them")
            repeated = _repeated_key(node, set())
            if repeated:
                raise PosrnnError(f"{source}: the key {repeated} appears twice in one mapping (DVC refuses such a "
                                  f"file, and which value counts is unclear); keep one")
            if as_dvc and loader.yaml_version is not None:
                raise PosrnnError(f"{source}: a %YAML {'.'.join(map(str, loader.yaml_version))} directive changes how "
                                  "values read (DVC and posrnn read params as YAML 1.2 without it); remove the "
                                  "directive")
            if as_dvc and text not in _AGREED:
                check_as_dvc_reads(node, source)
                _AGREED[text] = None
                if len(_AGREED) > 16:
                    _AGREED.pop(next(iter(_AGREED)))
            return loader.construct_document(node)
        except RecursionError:
            raise PosrnnError(f"{source}: its YAML is nested too deeply to read; flatten it") from None
    finally:
        loader.dispose()


def _same_value(a: Any, b: Any) -> bool:
    """Whether two readings of one YAML value give one config: equal, or a number read as text
    by one (YAML 1.1 reads ``1e-4`` as text) that ``coerce`` turns into the other's number."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    if type(a) is type(b) or {type(a), type(b)} <= {int, float}:
        return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))
    text, number = (a, b) if isinstance(a, str) else (b, a)
    return isinstance(text, str) and isinstance(number, (int, float)) and not isinstance(number, bool) \
        and _number(text.replace("_", "")) == number


#: a plain number that YAML 1.1 and 1.2 read alike (no leading zero, underscore, sign of base or colon)
_PLAIN_NUMBER = re.compile(r"[-+]?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


@functools.lru_cache(maxsize=1024)
def _two_readings(text: str) -> tuple[Any, Any]:
    """A plain scalar as YAML 1.1 (posrnn's PyYAML) and as YAML 1.2 (DVC's ruamel.yaml) read it."""
    from ruamel.yaml import YAML

    return yaml.safe_load(text), YAML(typ="safe", pure=True).load(text)


class _Unreadable:
    def __repr__(self) -> str:
        return "an error"


@functools.lru_cache(maxsize=256)
def _tagged_readings(tag: str, value: str) -> tuple[Any, Any]:
    """A quoted scalar under an explicit core tag (``!!int "0123"``) as PyYAML and as DVC's
    ruamel.yaml read it; a reader that cannot read it gives ``_Unreadable``."""
    import json as _json

    from ruamel.yaml import YAML

    text = f"!<{tag}> {_json.dumps(value)}"
    out = []
    for load in (yaml.safe_load, YAML(typ="safe", pure=True).load):
        try:
            out.append(load(text))
        except Exception:
            out.append(_Unreadable())
    return out[0], out[1]


@functools.lru_cache(maxsize=1)
def _resolver_12():
    from ruamel.yaml.resolver import VersionedResolver

    return VersionedResolver(version=(1, 2))


def _disagreement(node, seen: set, path: str = "") -> Optional[tuple[str, Any, Any]]:
    """The first plain scalar of ``node`` that YAML 1.1 and YAML 1.2 read as different values
    (``_same_value``): its dotted path and both values, or None."""
    from ruamel.yaml.nodes import ScalarNode

    if id(node) in seen:
        return None
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        if node.style is not None:  # quoted or a block: text in both, unless a tag (``!!int "0123"``) says otherwise
            if node.tag.endswith(":str") or not node.tag.startswith("tag:yaml.org,2002:"):
                return None
            mine, dvc = _tagged_readings(node.tag, node.value)
            return None if _same_value(mine, dvc) else (path or "its value", mine, dvc)
        tag12 = _resolver_12().resolve(ScalarNode, node.value, (True, False))
        if tag12 == node.tag and (node.tag.endswith(":str") or _PLAIN_NUMBER.fullmatch(node.value)
                                  or not node.tag.endswith((":int", ":float"))):
            return None
        mine, dvc = _two_readings(node.value)
        return None if _same_value(mine, dvc) else (path or "its value", mine, dvc)
    children = (node.value if isinstance(node, yaml.SequenceNode) else
                [v for _, v in node.value] if isinstance(node, yaml.MappingNode) else [])
    names = (range(len(children)) if isinstance(node, yaml.SequenceNode) else
             [k.value if isinstance(k, yaml.ScalarNode) else "?" for k, _ in node.value] if children else [])
    for name, child in zip(names, children):
        sub = f"{path}[{name}]" if isinstance(name, int) else (f"{path}.{name}" if path else str(name))
        found = _disagreement(child, seen, sub)
        if found:
            return found
    if isinstance(node, yaml.MappingNode):  # a key read otherwise is another key
        for k, _ in node.value:
            found = _disagreement(k, seen, f"{path}.<key {k.value}>" if path else f"<key {k.value}>")
            if found:
                return found
    return None


def check_as_dvc_reads(node, source: str) -> None:
    """Refuse a document that DVC (ruamel.yaml, YAML 1.2) reads otherwise than posrnn (PyYAML,
    YAML 1.1): a seed ``0123`` is 83 here but 123 there, ``yes`` a boolean here but text there,
    ``1:30`` 90 here; one line naming the key and how to write it so both agree."""
    found = _disagreement(node, set())
    if found:
        key, mine, dvc = found
        raise PosrnnError(f"{source}: {key} reads as {str(repr(mine))[:40]} here but as {str(repr(dvc))[:40]} in DVC "
                          f"(YAML 1.2); write it so both agree (no leading zero, true/false, quotes around text)")


#: params files parsed in this process, by the SHA-256 of their text (the YAML parser is slow)
_PARSED: dict[bytes, Any] = {}


def load_yaml(path: Path) -> Any:
    path = Path(path)
    if not path.is_file():
        what = ("is a directory" if path.is_dir() else "is not a regular file (a FIFO or device)" if path.exists()
                else "does not exist")
        fix = ("change into the repository (or pass --params FILE)" if path == Path("params.yaml") and
               not path.exists() else "pass an existing --params file")
        raise PosrnnError(f"params file {path} {what} here ({Path.cwd()}); {fix}")
    try:
        text = path.read_text(encoding="utf-8")
        key = hashlib.sha256(text.encode()).digest()
        if key not in _PARSED:  # one parse per content: a sweep's plan reads params.yaml once per experiment
            if len(_PARSED) >= 8:
                _PARSED.pop(next(iter(_PARSED)))
            _PARSED[key] = safe_load_bounded(text, f"params file {path}", as_dvc=True)
        return copy.deepcopy(_PARSED[key])
    except UnicodeDecodeError:
        raise PosrnnError(f"params file {path} is not text (not UTF-8); pass a YAML file") from None
    except yaml.YAMLError as e:
        raise PosrnnError(f"params file {path} is not valid YAML ({yaml_problem(e)}); fix the file") from None


def yaml_problem(e: Exception) -> str:
    """A YAML error in a few words: its problem and line (``expected a mapping or list of mappings
    for merging`` for a merge key ``<<`` over a value), never the parser's multi-line trace."""
    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    if problem:
        return f"line {mark.line + 1}: {problem}" if mark is not None else str(problem)
    return str(e).splitlines()[0] if str(e) else "parse error"


def resolve_config(
    params: Optional[Path] = None,
    options: Optional[dict[str, Any]] = None,
    sets: Optional[list[str]] = None,
    base: Optional[RunConfig] = None,
) -> RunConfig:
    """Defaults (or ``base``) → ``params`` file → CLI ``options`` (dotted keys; None = not given) → ``--set``."""
    cfg = RunConfig.from_dict(base.to_dict()) if base is not None else RunConfig()
    if params is not None:
        apply_mapping(cfg, load_yaml(params), str(params))
    for key, value in (options or {}).items():
        if value is not None:
            set_key(cfg, key, value, source="option")
    for item in sets or []:
        key, value = parse_set(item)
        set_key(cfg, key, value)
    return cfg


def config_diff(a: RunConfig, b: RunConfig, ignore: frozenset[str] = RUNTIME_KEYS) -> list[str]:
    """Dotted keys whose values differ between two configs (runtime keys ignored)."""
    fa, fb = a.flat(), b.flat()
    return [k for k in fa if k not in ignore and fa[k] != fb.get(k)]


def dump_yaml(cfg: RunConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
