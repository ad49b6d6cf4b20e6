"""The network (SPEC §1): input encoder (embedding + positional encoding) → core → head.

Shapes: B batch, T time steps, E embedding dim, P PE dim, D = encoder output width,
H hidden size, K output steps, V vocabulary.

* ``PE_t = [sin(t·ω), cos(t·ω)] / sqrt(P/2)`` with ``ω_i = 10000^(−2i/P)``, ``i = 0 … P/2−1``,
  ``t = 0 … T−1`` counted straight through input and output phases; every row has unit norm.
* Other forms (``PE_FORMS``): ``random`` (fixed rows uniform on the unit sphere, saved in the
  state_dict), ``learnable`` (an N(0,1) table of ``max_steps`` rows), ``dummy`` (the
  embedding twice: the concat-PE model's width and parameter count, no positions) and
  ``phase`` (a learnable vector per phase, input vs output, as the paper's autoregressive
  model concatenates; needs the task's fixed ``output_start``).
* A core maps (B, T, D) → (B, T, H) causally; cores are registered in ``CORES``.
* The head ``Linear(H, V)`` is applied only at the output-phase steps ``out_index``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor, nn

from .config import ModelConfig, RunConfig
from .errors import PosrnnError
from .s4d import S4DCore
from .transformer import CausalTransformerCore


def sinusoidal_pe(T: int, P: int, device=None) -> Tensor:
    """(T, P): ``[sin(t·ω), cos(t·ω)] / sqrt(P/2)`` — unit L2 norm per row."""
    t = torch.arange(T, dtype=torch.float64, device=device)[:, None]  # (T 1)
    i = torch.arange(P // 2, dtype=torch.float64, device=device)  # (P/2)
    omega = 10000.0 ** (-2.0 * i / P)  # (P/2)
    angle = t * omega  # (T P/2)
    pe = torch.cat([angle.sin(), angle.cos()], dim=1) / math.sqrt(P / 2)  # (T P)
    return pe.float()


@dataclass(frozen=True)
class PEForm:
    description: str
    has_positions: bool  # does the encoder carry position information?


#: The positional-encoding forms (SPEC §1). ``dummy`` is the "double vanilla" control.
PE_FORMS: dict[str, PEForm] = {
    "none": PEForm("vanilla: token embedding only", False),
    "sinusoidal": PEForm("fixed sinusoidal PE, unit norm, positions 0..T-1", True),
    "random": PEForm("fixed random PE: rows drawn uniformly on the unit sphere", True),
    "learnable": PEForm("trained position table, N(0,1) init", True),
    "dummy": PEForm("double-vanilla control: the embedding concatenated with itself (no positions)", False),
    "phase": PEForm("learnable input-phase / output-phase vector (the paper's autoregressive model)", False),
}

PE_MODES = {"concat": "PE appended to the embedding (D = E + P)", "add": "PE added to the embedding (needs P = E)"}


class InputEncoder(nn.Module):
    """Token ids → embedding (V tokens + special ids, N(0,1) init) (+ PE) → (B, T, D)."""

    def __init__(self, n_ids: int, E: int, pe: str, mode: str, P: int, max_steps: int,
                 continuous_dim: Optional[int] = None, output_start: Optional[int] = None):
        super().__init__()
        self.pe, self.mode, self.E, self.P, self.max_steps = pe, mode, E, P, max_steps
        self.output_start = output_start  # first output-phase step (the phase form)
        self.continuous = continuous_dim is not None
        if self.continuous:
            self.proj = nn.Linear(continuous_dim, E)  # replaces the embedding
            self.query_vector = nn.Parameter(torch.randn(E))  # (E) the output query
        else:
            self.embedding = nn.Embedding(n_ids, E)  # N(0, 1) init: token norm ≈ √E
        if pe == "sinusoidal":  # recomputed from the formula, not saved
            self.register_buffer("pe_table", sinusoidal_pe(max_steps, P), persistent=False)
        elif pe == "random":  # fixed, saved with the model (drawn from the global RNG at init)
            self.register_buffer("pe_table", nn.functional.normalize(torch.randn(max_steps, P), dim=1))  # (T P)
        elif pe == "learnable":
            self.pe_table = nn.Parameter(torch.randn(max_steps, P))  # (T P)
        elif pe == "phase":  # row 0: input phase, row 1: output phase; N(0, 1) like nn.Embedding
            if output_start is None:
                raise PosrnnError("--pe phase needs a fixed output-phase start; this task has none (variable length?)")
            self.phase_table = nn.Parameter(torch.randn(2, P))  # (2 P)
        if pe == "dummy":
            self.out_dim = 2 * E  # [e; e]: the PE model's width and parameter count when P = E
        else:
            self.out_dim = E + P if (pe != "none" and mode == "concat") else E

    def positions(self, T: int) -> Tensor:
        """(T, P) encoding of positions 0 … T−1."""
        if T > self.max_steps:
            raise PosrnnError(f"sequence of {T} steps is longer than the model's {self.max_steps} encoded positions")
        if self.pe == "phase":
            t = torch.arange(T, device=self.phase_table.device)  # (T)
            return self.phase_table[(t >= self.output_start).long()]  # (T P)
        return self.pe_table[:T]

    def embed(self, inputs: Tensor, query: Optional[Tensor] = None) -> Tensor:
        if not self.continuous:
            return self.embedding(inputs)  # (B T E)
        e = self.proj(inputs)  # (B T E)
        if query is not None:
            e = torch.where(query[..., None], self.query_vector.to(e.dtype), e)
        return e

    def forward(self, inputs: Tensor, query: Optional[Tensor] = None) -> Tensor:
        e = self.embed(inputs, query)  # (B T E)
        if self.pe == "none":
            return e
        if self.pe == "dummy":
            return torch.cat([e, e], dim=-1)  # (B T 2E)
        B, T = e.shape[:2]
        pe = self.positions(T).to(e.dtype).expand(B, T, self.P)  # (B T P)
        return torch.cat([e, pe], dim=-1) if self.mode == "concat" else e + pe  # (B T D)


class RecurrentCore(nn.Module):
    """One layer of ``nn.RNN`` (tanh, "elman"), ``nn.GRU`` or ``nn.LSTM``; returns all hidden states."""

    KINDS = {"elman": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}

    def __init__(self, kind: str, in_dim: int, hidden_size: int):
        super().__init__()
        self.kind = kind
        self.rnn = self.KINDS[kind](in_dim, hidden_size, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        h, _ = self.rnn(x)  # (B T H)
        return h


@dataclass(frozen=True)
class CoreSpec:
    description: str
    build: Callable[[int, ModelConfig], nn.Module]  # (in_dim, model config) → core


#: name → core. A core maps (B, T, D) → (B, T, H) causally.
CORES: dict[str, CoreSpec] = {
    "elman": CoreSpec("single-layer tanh RNN", lambda d, m: RecurrentCore("elman", d, m.hidden_size)),
    "gru": CoreSpec("single-layer GRU", lambda d, m: RecurrentCore("gru", d, m.hidden_size)),
    "lstm": CoreSpec("single-layer LSTM", lambda d, m: RecurrentCore("lstm", d, m.hidden_size)),
    "s4d": CoreSpec("diagonal state-space model S4D (state N = model.state_size)",
                    lambda d, m: S4DCore(d, m.hidden_size, m.state_size)),
    "transformer": CoreSpec("causal Transformer, --layers blocks, --heads heads, no built-in positions",
                            lambda d, m: CausalTransformerCore(d, m.hidden_size, m.layers, m.heads)),
}


class SequenceModel(nn.Module):
    """encoder → core → head, the head read at the output-phase steps only."""

    def __init__(self, encoder: InputEncoder, core: nn.Module, hidden_size: int, n_outputs: int):
        super().__init__()
        self.encoder, self.core = encoder, core
        self.head = nn.Linear(hidden_size, n_outputs)

    def hidden(self, inputs: Tensor, query: Optional[Tensor] = None) -> Tensor:
        return self.core(self.encoder(inputs, query))  # (B T H)

    def forward(self, inputs: Tensor, out_index: Optional[Tensor] = None, query: Optional[Tensor] = None) -> Tensor:
        h = self.hidden(inputs, query)  # (B T H)
        if out_index is not None:
            h = h.gather(1, out_index[..., None].expand(-1, -1, h.shape[-1]))  # (B K H)
        return self.head(h)  # (B K V)


def check_model_config(m: ModelConfig) -> None:
    """Refuse impossible model configs with a one-line reason."""
    if m.name not in CORES:
        raise PosrnnError(f"unknown model {m.name!r}; choose one of: {', '.join(CORES)}")
    if m.pe not in PE_FORMS:
        raise PosrnnError(f"unknown positional encoding {m.pe!r}; choose one of: {', '.join(PE_FORMS)}")
    if m.pe_mode not in PE_MODES:
        raise PosrnnError(f"unknown --pe-mode {m.pe_mode!r}; choose one of: {', '.join(PE_MODES)}")
    for key, value in (("hidden_size", m.hidden_size), ("embed_size", m.E), ("pe_dim", m.P)):
        if value < 1:
            raise PosrnnError(f"model.{key} must be positive, got {value}")
    if m.pe == "sinusoidal" and m.P % 2:
        raise PosrnnError(f"the PE dimension must be even (sin and cos halves), got {m.P}; pass an even --embed-size or model.pe_dim")
    if m.name == "transformer" and (m.layers < 1 or m.heads < 1 or m.hidden_size % m.heads):
        raise PosrnnError(f"transformer: --heads ({m.heads}) must divide --hidden-size ({m.hidden_size}) and --layers ≥ 1 (got {m.layers})")
    if m.name == "s4d" and (m.state_size < 2 or m.state_size % 2):
        raise PosrnnError(f"s4d: model.state_size must be even (conjugate pairs), got {m.state_size}")
    if m.pe == "dummy" and m.pe_mode == "add":
        raise PosrnnError("the dummy (double-vanilla) control concatenates the embedding with itself; use --pe-mode concat")
    if m.pe == "dummy" and m.P != m.E:
        raise PosrnnError(f"the dummy control repeats the embedding (E = {m.E}); it ignores model.pe_dim ({m.P}): drop model.pe_dim")
    if m.pe != "none" and m.pe_mode == "add" and m.P != m.E:
        raise PosrnnError(f"--pe-mode add needs the PE dimension ({m.P}) to equal the embedding size ({m.E})")


def build_model(cfg: RunConfig, task) -> SequenceModel:
    """The model for ``cfg.model`` on ``task`` (sizes from the task). Uses the global RNG for init."""
    m = cfg.model
    check_model_config(m)
    encoder = InputEncoder(
        task.n_input_ids, m.E, m.pe, m.pe_mode, m.P, task.max_steps,
        continuous_dim=task.cfg.dim if task.continuous else None, output_start=getattr(task, "output_start", None),
    )
    core = CORES[m.name].build(encoder.out_dim, m)
    if m.frozen_vocab is None:
        return SequenceModel(encoder, core, m.hidden_size, task.n_outputs)
    from .extend import extend_model  # a vocabulary-extended run (posrnn extend-vocab)

    V, X = m.frozen_vocab, task.n_outputs - m.frozen_vocab
    encoder.embedding = nn.Embedding(V + 1, m.E)
    model = SequenceModel(encoder, core, m.hidden_size, V)
    extend_model(model, V, X)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
