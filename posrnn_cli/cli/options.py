"""The options that set a run's config, declared once: flag → config key, metavar and help.

``posrnn train``, ``posrnn lm train`` and ``posrnn bench`` each name the ones they take
(``run_options("model", "pe", …)``); the decorator adds them to the command's signature (Typer
reads that) and hands the command their values as one dict. Every ``[default: …]`` is formatted
from ``RunConfig``: its value, or for a field whose default is None the meaning its ``none``
metadata gives (e.g. ``train.warmup``: 1% of the run, at most 1,000).
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import dataclass, fields
from typing import Annotated, Any, Callable, Optional

import typer

from ..common.settings.config import RunConfig
from .common import ModelName, PEMode, PEName, TaskName, model_option


@dataclass(frozen=True)
class RunOption:
    key: str  # the config key it sets
    help: str
    type: Any = None  # None: the field's own type (int, float, str, bool)
    metavar: Optional[str] = None  # None for choices and on/off flags
    flag: Optional[str] = None  # the declaration when not --name, e.g. "--amp/--no-amp"
    callback: Optional[Callable] = None  # checks the value before the command runs (a usage error)


RUN_OPTIONS: dict[str, RunOption] = {
    "task": RunOption("task.name", "Task (one line each: posrnn train --help).", TaskName),
    "model": RunOption("model.name", "Model core (one line each: posrnn train --help), or a plugin's (posrnn cores).",
                       ModelName, metavar="NAME", callback=model_option),
    "pe": RunOption("model.pe", "Positional encoding (one line each: posrnn train --help).", PEName),
    "pe_mode": RunOption("model.pe_mode", "concat: PE appended (D = E + P); add: PE added (P = E).", PEMode),
    "vocab_size": RunOption("task.vocab_size", "Vocabulary size V (≥ 2; the papers: 32–16,384).", metavar="N"),
    "length": RunOption("task.length", "Input length L; the output phase has L more steps (mqar: the whole "
                        "sequence).", metavar="N"),
    "hidden_size": RunOption("model.hidden_size", "Hidden size H.", metavar="N"),
    "embed_size": RunOption("model.embed_size", "Embedding size E; the PE has E dims too.", metavar="N"),
    "min_length": RunOption("task.min_length", "Variable-length reverse: L ~ U{min … max} (the papers: 32).",
                            metavar="N"),
    "max_length": RunOption("task.length", "Variable-length reverse: the longest L (= --length).", metavar="N"),
    "rarity": RunOption("task.rarity", "Dual-frequency reverse: P(a position holds a Rare id) (reference: 0.125).",
                        metavar="X"),
    "delay": RunOption("task.delay", "copy: T blank steps between input and output.", metavar="N"),
    "dim": RunOption("task.dim", "continuous: tokens are unit vectors in R^dim.", metavar="N"),
    "pairs": RunOption("task.pairs", "mqar: key-value pairs P (--length ≥ 4P, --vocab-size ≥ 2P+2).", metavar="N"),
    "filler": RunOption("task.filler", "mqar: the query region's other steps: random (ids of 0 … V−1, the Zoology "
                        "harness's default) or zero (id 0, its random_non_queries=False).", metavar="random|zero"),
    "autoregressive": RunOption("task.autoregressive", "reverse/sort: feed back the previous target (training) or "
                                "prediction (eval).", flag="--autoregressive/--no-autoregressive"),
    "layers": RunOption("model.layers", "transformer: causal self-attention blocks.", metavar="N"),
    "heads": RunOption("model.heads", "transformer, gated_deltanet(_layer): heads (divides H).", metavar="N"),
    "state_size": RunOption("model.state_size", "s4d: state order N (even); mamba: d_state. Not given, a new mamba "
                            "run on a CPU takes 4 (its step grows with d_state), on CUDA the default.", metavar="N"),
    "conv": RunOption("model.conv", "mamba, gated_deltanet_layer, hawk, xlstm: keep the short causal convolution "
                      "(--no-conv: the identity in its place).", flag="--conv/--no-conv"),
    "block": RunOption("model.block", "hawk, gated_deltanet_layer: mixer (the core alone) or full (the authors' "
                       "residual block: RMSNorm, core, residual; RMSNorm, gated MLP, residual).", metavar="mixer|full"),
    "iterations": RunOption("train.iterations", "Training iterations.", metavar="N"),
    "batch_size": RunOption("train.batch_size", "Batch size (per process under torchrun).", metavar="N"),
    "lr": RunOption("train.lr", "Peak learning rate of Adam.", metavar="X"),
    "warmup": RunOption("train.warmup", "Linear warm-up iterations.", metavar="N"),
    "seed": RunOption("train.seed", "Seed of the initialisation and the batches.", metavar="N"),
    "device": RunOption("train.device", "auto (CUDA when present), cpu, cuda or cuda:N.", metavar="DEVICE"),
    "checkpoint_every": RunOption("train.checkpoint_every", "Checkpoint every N iterations and at the end.",
                                  metavar="N"),
    "log_every": RunOption("train.log_every", "A metrics.jsonl line every N iterations.", metavar="N"),
    "threads": RunOption("train.threads", "CPU threads for torch; an explicit count always wins.", metavar="N"),
    "amp": RunOption("train.amp", "bf16 autocast of the forward pass and loss.", flag="--amp/--no-amp"),
    "cuda_graph": RunOption("train.cuda_graph", "The whole update as one CUDA graph (CUDA only).",
                            flag="--cuda-graph/--no-cuda-graph"),
}


def _field(key: str) -> tuple[Any, type]:
    """The dataclass field of ``key`` and its type (Optional[X] → X)."""
    section, _, name = key.partition(".")
    cls = type(getattr(RunConfig(), section))
    hint = typing.get_type_hints(cls)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return next(f for f in fields(cls) if f.name == name), (args[0] if args else hint)


def default_text(key: str) -> str:
    """``RunConfig``'s default of ``key`` as help shows it: 300,000; 0.001; on/off; or, for None,
    what the field's ``none`` metadata says None means."""
    value = RunConfig().flat()[key]
    if value is None:
        return _field(key)[0].metadata["none"]
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _parameter(name: str, default_note: Optional[str]) -> inspect.Parameter:
    opt = RUN_OPTIONS[name]
    tp = opt.type or _field(opt.key)[1]
    shown = default_note if default_note is not None else default_text(opt.key)
    # the flag always spelled out: Typer 0.27 turns a metavar equal to the name (DEVICE) into the flag (--DEVICE)
    decls = (opt.flag or "--" + name.replace("_", "-"),)
    info = typer.Option(*decls, metavar=opt.metavar, help=f"{opt.help} [default: {shown}]", show_default=False,
                        callback=opt.callback)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[Optional[tp], info])


def run_options(*names: str, after: Optional[str] = None, defaults: Optional[dict[str, str]] = None) -> Callable:
    """Add the options ``names`` (keys of ``RUN_OPTIONS``) to a command, after its parameter
    ``after`` (default: after its leading required ones). The command receives their values as
    ``opts`` (name → value, None where not given). ``defaults`` replaces the shown default of an
    option whose default this command sets itself."""
    unknown = [n for n in names if n not in RUN_OPTIONS]
    if unknown:
        raise ValueError(f"no run option {unknown}")

    def decorate(fn: Callable) -> Callable:
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "opts"]
        if after is not None:
            at = [p.name for p in own].index(after) + 1
        else:
            at = next((i for i, p in enumerate(own) if p.default is not inspect.Parameter.empty), len(own))
        added = [_parameter(n, (defaults or {}).get(n)) for n in names]
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
        params[at:at] = added

        @functools.wraps(fn)
        def command(**kwargs):
            opts = {n: kwargs.pop(n) for n in names}
            return fn(**kwargs, opts=opts)

        command.__signature__ = inspect.Signature(params)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


def config_options(opts: dict[str, Any]) -> dict[str, Any]:
    """Option values → dotted config keys (those not given left out)."""
    return {RUN_OPTIONS[k].key: v for k, v in opts.items() if v is not None}
