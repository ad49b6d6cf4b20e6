"""The names users type and read: tasks, model cores, positional-encoding forms and modes.

This is what ``--help``, the CLI's choices and the figures' legends show. It imports nothing
heavy, so the help appears without loading torch and the figures are drawn without any
training code. The behaviour behind each name lives in a registry keyed by the same names
(``tasks.TASKS``, ``models.CORES``, ``models.PE_FORMS``); each registry checks at import
that its keys are exactly the ones listed here.

Each entry of a task, core and positional-encoding form also declares the ``version`` of the
numbers its behaviour computes: bumped by hand in the commit whose change is meant to change
them (a run records it, ``common.numerics``; tests/test_golden.py fails on a change of numbers
that bumps none). A core lists the libraries besides torch it computes with (``libraries``), and
the versions of variants changed apart from its other runs (``variants``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Entry:
    description: str  # one line for --help
    label: str = ""  # legend text in the figures
    color: str = "#999999"  # colour in the figures
    #: tasks: the tokens are ids of a vocabulary (task.vocab_size), not vectors
    vocabulary: bool = True
    #: tasks: what evaluation reports — "accuracy" (with DL distance), "cosine" or "perplexity"
    measure: str = "accuracy"
    #: cores: the model.state_size a new run takes on a CPU when the command line gives none (a
    #: core whose step grows with it); None: the configured one everywhere
    cpu_state_size: Optional[int] = None
    #: tasks: sequences of an encoded corpus (their lengths vary; the output head sees the real
    #: tokens only, in chunks), not drawn by the task
    corpus: bool = False
    #: tasks, cores, PE forms: the version of the numbers it computes (bump it when a change is meant to change them)
    version: int = 1
    #: cores: the packages besides torch whose code computes it (their versions are part of a run's identity)
    libraries: tuple[str, ...] = ()
    #: cores: the versions of named variants whose numbers changed apart from the rest (a run of the
    #: variant records ``core/NAME/VARIANT`` besides ``core/NAME``): ``no_conv`` is ``model.conv = False``
    variants: tuple[tuple[str, int], ...] = ()


TASKS: dict[str, Entry] = {
    "reverse": Entry("target x_L..x_1 (--min-length, --rarity, --autoregressive)"),
    "sort": Entry("target x sorted ascending, ties kept (--autoregressive)"),
    "delayed-add": Entry("then fed y_1..y_L; target (x_{L+1-j} + y_j) mod V"),
    "predecessor": Entry("L distinct tokens, one shown again; target its predecessor"),
    "copy": Entry("copy memory: T blank steps (--delay), then target x_1..x_L"),
    "continuous": Entry("reverse unit vectors in R^d (--dim); loss 1 - cosine", vocabulary=False, measure="cosine"),
    "lm": Entry("next-token prediction over an encoded corpus (posrnn lm)", measure="perplexity", corpus=True),
    "mqar": Entry("MQAR: --pairs key-value pairs, keys asked again; target values"),
}

CORES: dict[str, Entry] = {
    "elman": Entry("single-layer tanh RNN", "Elman"),
    "gru": Entry("single-layer GRU", "GRU"),
    "lstm": Entry("single-layer LSTM", "LSTM"),
    "s4d": Entry("diagonal SSM S4D (state: model.state_size)", "S4D"),
    "mamba": Entry("selective SSM Mamba (d_state: model.state_size)", "Mamba", "#8c613c", cpu_state_size=4,
                   libraries=("mambapy",)),
    "mingru": Entry("minGRU: input-only gates, log-space parallel scan", "minGRU", "#da8bc3"),
    "xlstm": Entry("xLSTM[1:1]: mLSTM+sLSTM, 4 heads (H divisible by 4)", "xLSTM", "#bcbd22", libraries=("xlstm",),
                   variants=(("no_conv", 2),)),  # 2: --no-conv takes the sLSTM's convolution out too
    "rglru": Entry("RG-LRU (Griffin/Hawk): its recurrence alone", "RG-LRU", "#64b5cd"),
    "hawk": Entry("Hawk's block: conv + RG-LRU, GeLU gate branch", "Hawk", "#4c9fa8"),
    "gated_deltanet": Entry("Gated DeltaNet's recurrence alone (--heads)", "Gated DeltaNet", "#ccb974"),
    "gated_deltanet_layer": Entry("Gated DeltaNet's layer: convs, gate, norm (--heads)", "Gated DeltaNet layer",
                                  "#a08c3c"),
    "transformer": Entry("causal Transformer (--layers, --heads), no own PE", "Transformer"),
    "linear_transformer": Entry("causal linear Transformer (fast weights, no softmax)",
                                "linear Transformer", "#6a3d9a"),
    "noncausal_transformer": Entry("non-causal Transformer: unmasked (--layers, --heads)",
                                   "non-causal Transformer", "#b15928"),
}

#: the cores whose recurrence ``models.ensemble_model`` batches over members (an ensemble of same-shape
#: runs trained as one model); every other core's runs train solo
ENSEMBLE_CORES = ("elman", "gru", "lstm")

#: cores whose gradient stability is 1 for every pair by construction: their state Jacobian is
#: diagonal and positive whatever the input (docs/bench.md), so a value of 1.000 measures nothing
ONE_BY_CONSTRUCTION = ("mingru", "rglru")

PE_FORMS: dict[str, Entry] = {
    "none": Entry("vanilla: token embedding only", "vanilla", "#4c72b0"),
    "sinusoidal": Entry("fixed sinusoidal PE, unit norm, positions 0..T-1", "PE (sinusoidal)", "#dd8452"),
    "random": Entry("fixed random PE, rows uniform on the unit sphere", "PE (random)", "#55a868"),
    "learnable": Entry("trained position table, N(0,1) init", "PE (learnable)", "#8172b3"),
    "dummy": Entry("double-vanilla control: the embedding twice, no positions", "double vanilla", "#937860"),
    "phase": Entry("learnable input/output-phase vector (autoregressive model)", "phase vector", "#c44e52"),
}

PE_MODES: dict[str, Entry] = {
    "concat": Entry("PE appended to the embedding (D = E + P)"),
    "add": Entry("PE added to the embedding (needs P = E)"),
}

#: what a core with a full block (``models.CoreSpec.full``) runs as (``model.block``, ``--block``)
BLOCKS: dict[str, Entry] = {
    "mixer": Entry("the core alone: its mixing layer, D → H"),
    "full": Entry("the authors' residual block: RMSNorm, the core, residual; RMSNorm, gated MLP, residual"),
}

#: what the output phase of an autoregressive task is fed at evaluation (``Task.feedback_modes``);
#: the first is what ``eval`` reports as the run's result
FEEDBACK: dict[str, Entry] = {
    "self": Entry("the model's own previous prediction (true autoregression)", "self-feedback"),
    "truth": Entry("the previous target (teacher forcing at test time)", "ground-truth feedback"),
}


def feedback_prefix(feedback: str) -> str:
    """The prefix of an evaluation's scores under ``feedback``: none for "self" (the run's result),
    ``truth_feedback_`` for the targets fed back (``truth_feedback_token_accuracy``, …)."""
    return "" if feedback == "self" else f"{feedback}_feedback_"


def label(registry: dict[str, Entry], name: str) -> str:
    """The legend text of ``name`` (the name itself when it has none)."""
    e = registry.get(name)
    return e.label if e is not None and e.label else name


def color(registry: dict[str, Entry], name: str) -> str:
    e = registry.get(name)
    return e.color if e is not None else "#999999"


def order(registry: dict[str, Entry], names) -> list[str]:
    """``names`` sorted in catalogue order (unknown names last, alphabetically)."""
    keys = list(registry)
    return sorted(set(names), key=lambda n: (keys.index(n) if n in keys else len(keys), str(n)))


def check_keys(kind: str, catalogue: dict, registry: dict) -> None:
    """A registry must implement exactly the catalogue's names (checked at import)."""
    if set(catalogue) != set(registry):
        missing, extra = sorted(set(catalogue) - set(registry)), sorted(set(registry) - set(catalogue))
        raise RuntimeError(f"{kind} registry and posrnn_cli/common/catalog.py disagree: "
                           f"not implemented {missing}, not catalogued {extra}")
