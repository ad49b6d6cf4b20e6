"""The one table of config keys. Every run-config key (``RunConfig().flat()``) has one row here:
the name a profile's experiment sections give it, how its value shows in a run's directory name,
its column in the result tables, the ``posrnn train`` options that set it, and whether it changes
what a run computes. The sweep's short names (``SHORT``, ``ABBREV``), the aggregate's cell
columns (``CELL_COLUMNS``), the keys that do not split a cell (``CELL_IGNORED``) and the
columns that name a cell in any table (``KEY_COLUMNS``) are derived from it; the CLI's options
are checked against it by a test. Adding a config key is one row here (a test fails until it is).

Torch-free, imported by config, sweep, analysis and the CLI alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Key:
    config: str  # the run-config key, "task.vocab_size"
    short: Optional[str] = None  # its name in a profile's experiment sections and cells ("vocab")
    abbrev: Optional[str] = None  # how a cell's value shows in a run's directory name ("v"); else ``short``
    column: Optional[str] = None  # its column in the result tables that hold it ("vocab_size")
    every_table: bool = False  # a column of every run table (``CELL_COLUMNS``), in this order
    flags: tuple[str, ...] = ()  # the ``posrnn train`` options that set it ("vocab_size" is --vocab-size)
    results: bool = True  # False: runs that differ only here are seeds of one cell (a seed, where it ran, logging)
    #: a column of a run table only where some cell sets it away from its default (``SHOWN_WHEN_SET``)
    shown_when_set: bool = False
    boolean: bool = False  # its values are True/False (a claim may select its column with true or false)


KEYS: tuple[Key, ...] = (
    # the columns of every run table, in the tables' order
    Key("task.name", "task", column="task", every_table=True, flags=("task",)),
    Key("model.name", "model", column="model", every_table=True, flags=("model",)),
    Key("model.pe", None, column="pe", every_table=True, flags=("pe",)),
    Key("task.vocab_size", "vocab", "v", column="vocab_size", every_table=True, flags=("vocab_size",)),
    Key("task.length", "length", "l", column="length", every_table=True, flags=("length", "max_length")),
    Key("task.min_length", "min_length", "min", column="min_length", every_table=True, flags=("min_length",)),
    Key("task.rarity", "rarity", "r", column="rarity", every_table=True, flags=("rarity",)),
    Key("task.delay", "delay", "t", column="delay", every_table=True, flags=("delay",)),
    Key("model.hidden_size", "hidden", "h", column="hidden_size", every_table=True, flags=("hidden_size",)),
    Key("model.layers", "layers", "layers", column="layers", every_table=True, flags=("layers",)),
    Key("train.iterations", "iterations", "i", column="iterations", every_table=True, flags=("iterations",)),
    Key("train.batch_size", "batch", "b", column="batch_size", every_table=True, flags=("batch_size",)),
    Key("train.warmup", "warmup", column="warmup", every_table=True, flags=("warmup",)),
    # columns some tables add
    Key("task.dim", "dim", "d", column="dim", flags=("dim",)),
    Key("task.pairs", "pairs", "p", column="pairs", flags=("pairs",), shown_when_set=True),
    Key("task.filler", "filler", "fill", column="filler", flags=("filler",), shown_when_set=True),
    Key("model.heads", "heads", "heads", column="heads", flags=("heads",)),
    Key("model.embed_size", "embed", "e", column="embed_size", flags=("embed_size",)),
    # the rest of the config
    Key("task.autoregressive", "autoregressive", flags=("autoregressive",), boolean=True),
    Key("task.n_test"),
    Key("task.test_seed"),
    Key("task.data", results=False),
    Key("task.length_buckets"),
    Key("model.pe_mode", "pe_mode", flags=("pe_mode",)),
    Key("model.pe_dim"),
    Key("model.state_size", "state", "n", flags=("state_size",)),
    Key("model.conv", "conv", "conv", column="conv", flags=("conv",), shown_when_set=True, boolean=True),
    Key("model.block", "block", "block", column="block", flags=("block",), shown_when_set=True),
    Key("model.frozen_vocab"),
    Key("train.lr", "lr", flags=("lr",)),
    Key("train.betas"),
    Key("train.eps"),
    Key("train.weight_decay"),
    Key("train.clip"),
    Key("train.seed", flags=("seed",), results=False),
    Key("train.checkpoint_every", "checkpoint_every", flags=("checkpoint_every",), results=False),
    Key("train.checkpoint_initial", "checkpoint_initial", results=False, boolean=True),
    Key("train.checkpoint_minutes", results=False),
    Key("train.log_every", flags=("log_every",), results=False),
    Key("train.eval_batch_size", results=False),
    Key("train.device", flags=("device",), results=False),
    Key("train.amp", flags=("amp",), boolean=True),
    Key("train.fused_adam"),  # true, false or null (fused on CUDA only)
    Key("train.cuda_graph", flags=("cuda_graph",), boolean=True),
    Key("train.threads", flags=("threads",), results=False),
)

#: short key → config key (what experiment sections and cells may set)
SHORT: dict[str, str] = {k.short: k.config for k in KEYS if k.short}
#: short key → how its value appears in a run's directory name (others: the short key itself)
ABBREV: dict[str, str] = {k.short: k.abbrev for k in KEYS if k.short and k.abbrev}
#: (column, config key) of the columns every run table holds, in order
CELL_COLUMNS: tuple[tuple[str, str], ...] = tuple((k.column, k.config) for k in KEYS if k.every_table)
#: config keys that do not split a cell of a grid (a run's seed, where it ran, how often it logs and
#: keeps checkpoints): runs that differ only in these are seeds of one table row
CELL_IGNORED: frozenset[str] = frozenset(k.config for k in KEYS if not k.results)
#: (column, config key) of the columns a run table holds only when some row's value differs from the
#: default (a setting most grids leave alone: their tables stay as they were)
SHOWN_WHEN_SET: tuple[tuple[str, str], ...] = tuple((k.column, k.config) for k in KEYS if k.shown_when_set)
#: the table columns that hold True/False
BOOLEAN_COLUMNS: frozenset[str] = frozenset(k.column for k in KEYS if k.boolean and k.column)
#: columns the analyses add to their tables that name a cell (not config keys)
ANALYSIS_KEYS = ("condition", "half", "step", "pair", "base_vocab", "extra_vocab", "max_tokens", "combine",
                 "target_position", "feedback")
#: columns that name a cell (a config without its seed) in any result table, whatever their type
KEY_COLUMNS: frozenset[str] = frozenset({k.column for k in KEYS if k.column} | set(ANALYSIS_KEYS))
#: ``posrnn train`` option → the config key it sets
FLAGS: dict[str, str] = {f: k.config for k in KEYS for f in k.flags}
