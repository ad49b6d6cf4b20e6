"""One typed config for a run: ``params.yaml`` → dataclasses → CLI options → ``--set key=value``.

The dataclass defaults *are* the paper's settings (docs/papers.md, The settings the code follows); ``params.yaml``
repeats them (a test keeps the two equal) so that DVC can track them. Unknown keys and values of
the wrong type are refused with a message that names the key and the fix.
"""

from __future__ import annotations

import copy
import datetime
import functools
import hashlib
import json
import math
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

import yaml

from . import keys
from ..errors import PosrnnError
from .yamltypes import NotYaml, check_document, dvc_reading, load_as_dvc


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
    # torch CPU threads; None = chosen by the command (common.host.machine)
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
#: row (the table of config keys, ``common.settings.keys``).
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
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is bool and isinstance(value, bool) or tp is str and isinstance(value, str):
        return value
    if tp is int and number and (isinstance(value, int) or value.is_integer()):
        return int(value)
    if tp is float and number:
        if not math.isfinite(value):
            raise PosrnnError(f"{key} must be a finite number, got {value!r}")
        return float(value)
    if tp not in (bool, int, float, str):  # pragma: no cover - every annotation above is handled
        raise TypeError(f"unsupported annotation {tp!r} for {key}")
    raise PosrnnError(refusal(value, tp, key))


def refusal(value: Any, tp: Any, key: str) -> str:
    """Why ``value`` is no ``tp``, in one line: text where a number or boolean is expected (quoted,
    ``"12"``, or tagged ``!!str``: text to DVC), a plain value DVC reads as a number where text is
    expected (``1e3``), else the type."""
    if isinstance(value, str) and tp in (bool, int, float):
        if tp is float and value.strip().lower().lstrip("+-") in ("inf", "infinity", "nan"):
            return f"{key} must be a finite number, got {value!r}"
        plain = dvc_reading(value)
        if isinstance(plain, bool) if tp is bool else isinstance(plain, (int, float)) and not isinstance(plain, bool):
            return (f"{key} is {value!r}, quoted or tagged !!str: text to DVC (YAML 1.2), where a {tp.__name__} is "
                    f"expected; write it without quotes or tag: {value}")
    if tp is str and isinstance(value, (bool, int, float, datetime.date)):
        return f"{key} reads as {value!r} in DVC (YAML 1.2), where text is expected; quote it"
    return f"{key} must be of type {tp.__name__}, got {value!r}"


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
        # as DVC reads it once `dvc exp run -S` wrote it into params.yaml
        value = load_as_dvc(raw, f"--set {key.strip()}") if raw.strip() else None
    except NotYaml:
        value = raw
    except RecursionError:
        raise PosrnnError(f"--set {key.strip()}: its YAML is nested too deeply to read; flatten it") from None
    return key.strip(), value


def safe_load_bounded(text: str, source: str) -> Any:
    """``yaml.safe_load(text)`` of a YAML file posrnn wrote (a run's config.yaml, ``dump_yaml``),
    but a document whose aliases expand beyond bounds or that repeats a key is refused before it
    is built (``yamltypes.check_document``). The message never shows the value."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_document(node, source)
        return loader.construct_document(node)
    except RecursionError:
        raise PosrnnError(f"{source}: its YAML is nested too deeply to read; flatten it") from None
    finally:
        loader.dispose()


#: params files parsed in this process, by the SHA-256 of their text (the YAML parser is slow)
_PARSED: dict[bytes, Any] = {}


def load_yaml(path: Path) -> Any:
    """A params file as DVC reads it (``yamltypes.load_as_dvc``), refused in one line when it
    cannot be read."""
    path = Path(path)
    if not path.is_file():
        what = ("is a directory" if path.is_dir() else "is not a regular file (a FIFO or device)" if path.exists()
                else "does not exist")
        fix = ("change into the repository (or pass --params FILE)" if path == Path("params.yaml") and
               not path.exists() else "pass an existing --params file")
        raise PosrnnError(f"params file {path} {what} here ({Path.cwd()}); {fix}")
    source = f"params file {path}"
    try:
        text = path.read_text(encoding="utf-8")
        key = hashlib.sha256(text.encode()).digest()
        if key not in _PARSED:  # one parse per content: a sweep's plan reads params.yaml once per experiment
            if len(_PARSED) >= 8:
                _PARSED.pop(next(iter(_PARSED)))
            _PARSED[key] = load_as_dvc(text, source)
        return copy.deepcopy(_PARSED[key])
    except UnicodeDecodeError:
        raise PosrnnError(f"{source} is not text (not UTF-8); pass a YAML file") from None
    except NotYaml as e:
        raise PosrnnError(f"{source} is not valid YAML ({e.problem}); fix the file") from None
    except RecursionError:
        raise PosrnnError(f"{source}: its YAML is nested too deeply to read; flatten it") from None


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


#: config keys added after runs began recording digests: left out of a digest while at their default,
#: so a run recorded before a key existed (its config.yaml without it) keeps its digest and its scores
LATER_KEYS = ("task.pairs", "model.conv", "task.filler", "task.length_buckets", "model.block")


def config_digest(config: dict) -> str:
    """sha256 of a run's config (its ``to_dict()``), runtime keys left out: what the run computes."""
    flat = {f"{s}.{k}": v for s, sec in config.items() if isinstance(sec, dict) for k, v in sec.items()}
    defaults = RunConfig().flat()
    kept = {k: v for k, v in flat.items() if k not in RUNTIME_KEYS and not (k in LATER_KEYS and v == defaults[k])}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def config_diff(a: RunConfig, b: RunConfig, ignore: frozenset[str] = RUNTIME_KEYS) -> list[str]:
    """Dotted keys whose values differ between two configs (runtime keys ignored)."""
    fa, fb = a.flat(), b.flat()
    return [k for k in fa if k not in ignore and fa[k] != fb.get(k)]


def dump_yaml(cfg: RunConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
