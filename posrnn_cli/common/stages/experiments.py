"""Every experiment the pipeline knows, declared once (torch-free: the entries name their code
by dotted path, imported only when a job runs or a table is made).

Three small tables, each entry in one place:

* ``JOB_KINDS`` — what a worker does: how the profile section becomes jobs (``plan``), what one
  job runs (``run``) and whether it trains a run directory (``trains``: it then has a config,
  a state — see ``common.files.rundir`` — and a training log the sweep's progress reads).
* ``TABLE_FORMS`` — what aggregation makes of an experiment's runs: the function that builds the
  table (``build``), the one that reduces it to the headline numbers of ``dvc metrics show``
  (``headline``), and the columns every table of that form holds (``columns``; the scorecard
  refuses a table without them).
* ``EXPERIMENTS`` — the experiments themselves, in the order the DVC stages run them: their job
  kind, table form, DVC stage, source experiment, figure and which checkpoints their runs keep.

Adding an experiment: one ``Experiment`` entry (a new job kind or table form only when no
existing one fits; a new ``STAGES`` entry only if none of the stages should run it), its section
in the profiles of ``params.yaml`` that run it (a profile may omit it), ``posrnn dvc-yaml`` to
write ``dvc.yaml`` again, and a test (docs/development.md, "Adding an experiment").
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..errors import PosrnnError


def resolve(ref: str) -> Callable[..., Any]:
    """``"package.module.name"`` → that object (the module imported now)."""
    module, _, name = ref.rpartition(".")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class JobKind:
    name: str
    plan: str  # (params, prof, profile, experiment, runs_root, force) -> list[Job]
    run: str  # (job) -> dict of what was done
    trains: bool  # its jobs train a run directory (config, checkpoints, metrics.jsonl)
    #: the procedures that make its outputs (``common.numerics.PROCEDURES``): their versions are part of a run's
    #: identity, and its DVC stage reads them from numerics.json
    numerics: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableForm:
    name: str
    build: str  # (runs, n_resamples) -> rows
    headline: str  # (rows) -> {<pe form or layer count>: number, …}: numbers only (aggregate.MEASURES says what)
    columns: tuple[str, ...]  # the columns every row holds (at least)


@dataclass(frozen=True)
class Figure:
    file: str  # under figures/<profile>/
    draw: str  # (tables by experiment name, path) -> None; drawn when the experiment's table exists
    columns: tuple[str, ...] = ()  # the columns it reads from the table (checked before drawing)


@dataclass(frozen=True)
class Experiment:
    name: str
    kind: str  # a JOB_KINDS key
    table: Optional[str]  # a TABLE_FORMS key; None: it makes no table (its runs feed another experiment)
    stage: str  # the DVC stage that runs it
    about: str
    source: Optional[str] = None  # the experiment whose runs it analyses, extends or reads
    figure: Optional[Figure] = None
    #: which checkpoints its runs keep (a profile section's ``keep_checkpoints`` overrides it): ``last``, the
    #: latest only (the final one once a run has finished), or ``all``, where an analysis reads every one
    keep_checkpoints: str = "last"
    #: config values every run of the experiment has, as (dotted key, value) pairs: set before the
    #: profile section's own keys, and a section or cell that sets one otherwise is refused
    fixed: tuple[tuple[str, Any], ...] = ()

    @property
    def job_kind(self) -> JobKind:
        return JOB_KINDS[self.kind]

    @property
    def trains(self) -> bool:
        return JOB_KINDS[self.kind].trains


_PLAN, _JOBS, _PLOTS = "posrnn_cli.sweep.plan", "posrnn_cli.sweep.jobs", "posrnn_cli.analysis.plots"
_TRAIN, _EXTEND = ("loop",), ("loop", "extension")  # what trains a run, and an extension

JOB_KINDS: dict[str, JobKind] = {k.name: k for k in (
    JobKind("train", f"{_PLAN}.train_jobs", f"{_JOBS}.run_train", trains=True, numerics=_TRAIN),
    JobKind("irie", f"{_PLAN}.train_jobs", f"{_JOBS}.run_irie", trains=True, numerics=_TRAIN),
    JobKind("stability", f"{_PLAN}.stability_jobs", f"{_JOBS}.run_stability", trains=False, numerics=("stability",)),
    JobKind("extend", f"{_PLAN}.extend_jobs", f"{_JOBS}.run_extend", trains=True, numerics=_EXTEND),
    JobKind("lm_data", f"{_PLAN}.lm_data_jobs", f"{_JOBS}.run_lm_data", trains=False, numerics=("lm_data",)),
    JobKind("lm", f"{_PLAN}.lm_jobs", f"{_JOBS}.run_train", trains=True, numerics=_TRAIN),
)}

_A = "posrnn_cli.analysis.aggregate"
_ACC = ("seeds", "token_accuracy", "token_accuracy_by_seed", "token_accuracy_ci_low", "token_accuracy_ci_high")

TABLE_FORMS: dict[str, TableForm] = {t.name: t for t in (
    TableForm("eval", f"{_A}.table_eval", f"{_A}.headline_eval", ("model", "pe", "vocab_size", *_ACC)),
    TableForm("dual", f"{_A}.table_dual", f"{_A}.headline_dual",
              ("model", "pe", "vocab_size", "condition", "half", *_ACC)),
    TableForm("stability", f"{_A}.table_stability", f"{_A}.headline_stability",
              ("model", "pe", "step", "condition", "pair", "seeds", "stability", "stability_by_seed", "ci_low",
               "ci_high")),
    TableForm("extend", f"{_A}.table_extend", f"{_A}.headline_extend", ("model", "pe", "vocab_size", *_ACC)),
    TableForm("lm", f"{_A}.table_lm", f"{_A}.headline_lm",
              ("model", "pe", "seeds", "perplexity", "perplexity_by_seed")),
    TableForm("irie", f"{_A}.table_irie", f"{_A}.headline_irie",
              ("layers", "pe", *_ACC, "permutation_sensitive_share", "max_logit_change", "tolerance")),
    TableForm("autoreg", f"{_A}.table_autoreg", f"{_A}.headline_autoreg",
              ("task", "model", "pe", "vocab_size", "feedback", *_ACC)),
    TableForm("cosine", f"{_A}.table_cosine", f"{_A}.headline_cosine",
              ("model", "pe", "dim", "seeds", "cosine", "cosine_by_seed", "cosine_ci_low", "cosine_ci_high",
               "cosine_q10_by_seed", "cosine_q50_by_seed", "cosine_q90_by_seed")),
)}

#: the cell columns most figures read beside their own, and the accuracy with its CI
_FIG_CELL = ("model", "pe", "hidden_size", "length", "iterations", "batch_size")
_FIG_ACC = ("token_accuracy", "token_accuracy_ci_low", "token_accuracy_ci_high")

EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (
    Experiment("fig2", "train", "eval", "train", "reverse ordering, accuracy vs vocabulary size (Fig. 2)",
               figure=Figure("fig2_vocab.png", f"{_PLOTS}.draw_fig2",
                             (*_FIG_CELL, "vocab_size", *_FIG_ACC, "damerau_levenshtein", "damerau_levenshtein_ci_low",
                              "damerau_levenshtein_ci_high"))),
    Experiment("dual", "train", "dual", "train", "dual-frequency vocabulary, Frequent/Rare grid (Fig. 3-4)",
               # stability reads them
               figure=Figure("dual_frequency.png", f"{_PLOTS}.draw_dual",
                             (*_FIG_CELL, "vocab_size", "rarity", "condition", *_FIG_ACC)), keep_checkpoints="all"),
    Experiment("forms", "train", "eval", "train", "PE forms: random and learnable beside fig2's sinusoidal",
               figure=Figure("pe_forms.png", f"{_PLOTS}.draw_forms", (*_FIG_CELL, "vocab_size", *_FIG_ACC))),
    Experiment("double", "train", "eval", "train", "the double-vanilla control (embedding twice)",
               figure=Figure("double_vanilla.png", f"{_PLOTS}.draw_double", (*_FIG_CELL, "vocab_size", *_FIG_ACC))),
    Experiment("length", "train", "eval", "train", "length sweep at V = 2",
               figure=Figure("length_v2.png", f"{_PLOTS}.draw_length", (*_FIG_CELL, "vocab_size", *_FIG_ACC))),
    Experiment("varlen", "train", "eval", "train", "variable-length reverse with several PE forms"),
    Experiment("sort", "train", "eval", "train", "sorting, vanilla vs PE"),
    Experiment("copy", "train", "eval", "train", "copy memory, vanilla vs PE"),
    Experiment("delayed", "train", "eval", "train", "delayed addition, LSTM, vanilla vs PE (003 App. A.1, Fig. 7)",
               figure=Figure("delayed_add.png", f"{_PLOTS}.draw_delayed")),
    Experiment("predecessor", "train", "eval", "train", "predecessor query, LSTM, vanilla vs PE (001 §6.1.3)",
               figure=Figure("predecessor.png", f"{_PLOTS}.draw_predecessor")),
    Experiment("patterns", "train", "eval", "train", "constant pattern count K^L: (K, L) pairs, vanilla vs PE (000 "
                                                     "Fig. 4)",
               figure=Figure("pattern_count.png", f"{_PLOTS}.draw_patterns")),
    Experiment("budget", "train", "eval", "train",
               "the vanilla control: fig2's vanilla cells with twice the iterations or twice the batch (003 §4.2)"),
    Experiment("s4d", "train", "eval", "train", "S4D state-space model, vanilla vs PE"),
    Experiment("autoreg", "train", "autoreg", "train",
               "autoregressive reverse / sort: self-fed vs ground-truth-fed output phase (000 App. B.2, Fig. 8)",
               figure=Figure("autoregression.png", f"{_PLOTS}.draw_autoreg",
                             (*_FIG_CELL, "task", "vocab_size", "feedback", *_FIG_ACC)),
               fixed=(("task.autoregressive", True),)),
    Experiment("continuous", "train", "cosine", "train",
               "the infinite vocabulary: reversing random unit vectors in R^d, cosine (000 App. B.3, Fig. 9)",
               figure=Figure("continuous.png", f"{_PLOTS}.draw_continuous",
                             (*_FIG_CELL, "dim", "cosine", "cosine_ci_low", "cosine_ci_high")),
               fixed=(("task.name", "continuous"),)),
    Experiment("irie", "irie", "irie", "train", "causal Transformers without PE: 1 vs 2 layers, permutations",
               figure=Figure("irie.png", f"{_PLOTS}.draw_irie", (*_FIG_CELL, "layers", *_FIG_ACC))),
    Experiment("mamba_conv", "train", "eval", "train",
               "Mamba (the map: every core with one) with and without its short convolution, reverse ± PE",
               figure=Figure("mamba_conv.png", f"{_PLOTS}.draw_mamba_conv",
                             (*_FIG_CELL, "vocab_size", "conv", *_FIG_ACC))),
    Experiment("mqar", "train", "eval", "train",
               "multi-query associative recall (Zoology, Arora et al., 2023) ± PE across vocabularies",
               figure=Figure("mqar_vocab.png", f"{_PLOTS}.draw_mqar",
                             (*_FIG_CELL, "vocab_size", *_FIG_ACC, "damerau_levenshtein",
                                                                     "damerau_levenshtein_ci_low",
                              "damerau_levenshtein_ci_high")),
               fixed=(("task.name", "mqar"),)),
    Experiment("stability", "stability", "stability", "stability",
               "gradient stability of the dual runs' checkpoints (Fig. 5)", "dual",
               figure=Figure("stability.png", f"{_PLOTS}.draw_stability",
                             ("model", "pe", "step", "condition", "pair", "stability", "ci_low", "ci_high"))),
    Experiment("stability_mid", "stability", "stability", "stability",
               "gradient stability with the target inside the input (002 §4.3: the S4D's target at t = 23)", "dual",
               figure=Figure("stability_mid.png", f"{_PLOTS}.draw_stability_mid")),
    Experiment("extend", "extend", "extend", "extend", "vocabulary extension of fig2 runs", "fig2",
               figure=Figure("extend_vocab.png", f"{_PLOTS}.draw_extend",
                             ("model", "pe", "base_vocab", "extra_vocab", *_FIG_ACC))),
    Experiment("lm_data", "lm_data", None, "lm", "WikiText → paragraphs → SentencePiece → encoded ids"),
    Experiment("lm", "lm", "lm", "lm", "LSTM language model ± PE (Table 1)", "lm_data",
               figure=Figure("lm_table.md", f"{_PLOTS}.draw_lm", ("model", "pe", "perplexity"))),
)}


@dataclass(frozen=True)
class Stage:
    """A DVC stage that runs experiments (``dvc.yaml`` is generated from these and ``EXPERIMENTS``,
    ``common.stages.pipeline_yaml``): whether its runs are built from the params file's shared ``task`` /
    ``model`` / ``train`` sections, and its inputs besides the runs of other stages."""

    name: str
    shared_config: bool
    inputs: tuple[str, ...] = ()


#: the stages that run experiments, in the order DVC runs them; then come aggregate, plot, scorecard
STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("train", shared_config=True),
    Stage("stability", shared_config=False),
    Stage("extend", shared_config=False),
    Stage("lm", shared_config=True, inputs=("data",)),
)}


#: the values of ``keep_checkpoints``
KEEP_CHECKPOINTS = ("last", "all")


def experiment(name: str) -> Experiment:
    """The registered experiment ``name``, or a one-line error listing them."""
    if name not in EXPERIMENTS:
        raise PosrnnError(f"unknown experiment {name!r}; choose from: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


def eval_tables() -> tuple[str, ...]:
    """The experiments whose table is the plain evaluation table (one row per cell, accuracies with CIs)."""
    return tuple(e.name for e in EXPERIMENTS.values() if e.table == "eval")


def result_tables() -> tuple[str, ...]:
    """Every result table (``results/<profile>/tables/<name>.csv``), named by its experiment."""
    return tuple(e.name for e in EXPERIMENTS.values() if e.table is not None)


def required_columns(table: str) -> tuple[str, ...]:
    """The columns the result table ``table`` (an experiment's name) must hold."""
    exp = experiment(table)
    return TABLE_FORMS[exp.table].columns if exp.table else ()


def experiments_of_stage(stage: str) -> list[str]:
    return [e.name for e in EXPERIMENTS.values() if e.stage == stage]


def experiments_to_run(named: Optional[list[str]], stage: Optional[str]) -> list[str]:
    """What ``posrnn sweep`` runs: the experiments ``named``, then every one of ``stage``; all of
    them when neither is given. An unknown stage is refused with the known ones."""
    stages = sorted({e.stage for e in EXPERIMENTS.values()})
    if stage is not None and stage not in stages:
        raise PosrnnError(f"unknown stage {stage!r}; choose one of: {', '.join(stages)}")
    names = list(named or []) + (experiments_of_stage(stage) if stage else [])
    return names or list(EXPERIMENTS)


def trains(kind: str) -> bool:
    """Whether jobs of ``kind`` train a run directory (False for an unknown kind)."""
    return kind in JOB_KINDS and JOB_KINDS[kind].trains
