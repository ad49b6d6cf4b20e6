"""The network (000 §3.2): input encoder (embedding + positional encoding) → core → head.

Two registries, keyed by the names in ``common/catalog.py``:

* ``PE_FORMS``: name → an encoding module class (``models/encoding.py``) that carries its own
  behaviour: ``check(model config)``, ``width(model config)``, ``has_positions`` and its forward.
* ``CORES``: name → a ``CoreSpec``: how to build the core, what to check, and whether it has a
  recurrent view (``initial_state`` / ``state_after`` / ``output_from_state``) for the stability
  analysis. A core from outside posrnn (``common.plugins``, docs/plugins.md) is looked up by
  ``core_spec`` when its name is not one of these.

A core maps (B, T, D) → (B, T, H) causally; the head ``Linear(H, V)`` is read at the
output-phase steps ``out_index`` only. Adding a form or a core is one entry here, its
catalogue line and its test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from torch import Tensor, nn

from ..common import catalog, plugins
from ..common.settings.config import ModelConfig, RunConfig, check_bounds
from ..common.errors import PosrnnError
from .encoding import DummyPE, InputEncoder, LearnablePE, NoPE, PhasePE, RandomPE, SinusoidalPE, sinusoidal_pe
from .extension import extend_model
from .gated_deltanet import GatedDeltaNetCore
from .gdn_layer import GatedDeltaNetBlock, GatedDeltaNetLayer
from .hawk import HawkBlock, HawkCore
from .mamba import MambaCore, require_mambapy
from .mingru import MinGRUCore
from .rglru import RGLRUCore
from .rnn import RecurrentCore
from .s4d import S4DCore
from .transformer import CausalTransformerCore
from .xlstm import XLSTMCore, check_hidden_size, require_xlstm

#: name → positional-encoding form. ``dummy`` is the "double vanilla" control.
PE_FORMS: dict[str, type] = {
    "none": NoPE,
    "sinusoidal": SinusoidalPE,
    "random": RandomPE,
    "learnable": LearnablePE,
    "dummy": DummyPE,
    "phase": PhasePE,
}
catalog.check_keys("positional-encoding", catalog.PE_FORMS, PE_FORMS)


def _no_check(m: ModelConfig) -> None:
    return None


def _check_transformer(m: ModelConfig) -> None:
    if m.layers < 1 or m.heads < 1 or m.hidden_size % m.heads:
        raise PosrnnError(f"transformer: --heads ({m.heads}) must divide --hidden-size ({m.hidden_size}) and "
                          f"--layers ≥ 1 (got {m.layers})")


def _check_s4d(m: ModelConfig) -> None:
    if m.state_size < 2 or m.state_size % 2:
        raise PosrnnError(f"s4d: model.state_size must be even (conjugate pairs), got {m.state_size}")


def _check_mamba(m: ModelConfig) -> None:
    require_mambapy()  # a missing extra is one line naming the install command


def _check_xlstm(m: ModelConfig) -> None:
    require_xlstm()  # a missing package is one line naming the install command
    check_hidden_size(m.hidden_size)


def _check_gated_deltanet(m: ModelConfig) -> None:
    if m.hidden_size % m.heads:
        raise PosrnnError(f"gated_deltanet: --heads ({m.heads}) must divide --hidden-size ({m.hidden_size}); "
                          f"pass --heads with a divisor of {m.hidden_size}")


@dataclass(frozen=True)
class CoreSpec:
    build: Callable[[int, ModelConfig], nn.Module]  # (in_dim, model config) → core
    check: Callable[[ModelConfig], None] = _no_check
    #: the core exposes ``initial_state`` (z_1), ``state_after`` (the state after a prefix) and
    #: ``output_from_state`` (the last output from a state and the inputs after it): gradient stability, 003 §4.3
    recurrent_view: bool = True
    #: the core has a short causal convolution that ``model.conv: false`` (``--no-conv``) replaces by the identity
    conv: bool = False
    #: output t reads inputs ≤ t only (False: the non-causal Transformer, refused where targets are fed back)
    causal: bool = True
    #: the core in the residual block its authors ship it in (``model.block: full``, ``--block full``); None: none
    full: Optional[Callable[[int, ModelConfig], nn.Module]] = None


CORES: dict[str, CoreSpec] = {
    "elman": CoreSpec(lambda d, m: RecurrentCore("elman", d, m.hidden_size)),
    "gru": CoreSpec(lambda d, m: RecurrentCore("gru", d, m.hidden_size)),
    "lstm": CoreSpec(lambda d, m: RecurrentCore("lstm", d, m.hidden_size)),
    "s4d": CoreSpec(lambda d, m: S4DCore(d, m.hidden_size, m.state_size), _check_s4d),
    "mamba": CoreSpec(lambda d, m: MambaCore(d, m.hidden_size, m.state_size, conv=m.conv), _check_mamba, conv=True),
    "mingru": CoreSpec(lambda d, m: MinGRUCore(d, m.hidden_size)),
    "xlstm": CoreSpec(lambda d, m: XLSTMCore(d, m.hidden_size, conv=m.conv), _check_xlstm, conv=True),
    "rglru": CoreSpec(lambda d, m: RGLRUCore(d, m.hidden_size)),
    "hawk": CoreSpec(lambda d, m: HawkCore(d, m.hidden_size, conv=m.conv), recurrent_view=False, conv=True,
                     full=lambda d, m: HawkBlock(d, m.hidden_size, conv=m.conv)),
    "gated_deltanet": CoreSpec(lambda d, m: GatedDeltaNetCore(d, m.hidden_size, m.heads), _check_gated_deltanet),
    "gated_deltanet_layer": CoreSpec(lambda d, m: GatedDeltaNetLayer(d, m.hidden_size, m.heads, conv=m.conv),
                                     _check_gated_deltanet, recurrent_view=False, conv=True,
                                     full=lambda d, m: GatedDeltaNetBlock(d, m.hidden_size, m.heads, conv=m.conv)),
    "transformer": CoreSpec(lambda d, m: CausalTransformerCore(d, m.hidden_size, m.layers, m.heads), _check_transformer,
                            recurrent_view=False),
    "linear_transformer": CoreSpec(lambda d, m: CausalTransformerCore(d, m.hidden_size, m.layers, m.heads,
                                                                      attention="linear"),
                                   _check_transformer, recurrent_view=False),
    "noncausal_transformer": CoreSpec(lambda d, m: CausalTransformerCore(d, m.hidden_size, m.layers, m.heads,
                                                                         attention="noncausal"),
                                      _check_transformer, recurrent_view=False, causal=False),
}
catalog.check_keys("core", catalog.CORES, CORES)


def core_spec(name: str) -> CoreSpec:
    """The spec of core ``name``: a built-in one, or a plugin's (``common.plugins``: loaded on first
    use); an unknown name or a broken plugin is one ``PosrnnError``."""
    if name in CORES:
        return CORES[name]
    return plugin_spec(name)


def plugin_spec(name: str) -> CoreSpec:
    """A plugin core as a ``CoreSpec``: its builder given (in_dim, H, and the model-config keys it
    asks for by name), its result checked to be a module."""
    p = plugins.load(name).plugin

    def build(d: int, m: ModelConfig) -> nn.Module:
        try:
            core = p.build(d, m.hidden_size, **{k: getattr(m, k) for k in p.options})
        except PosrnnError:
            raise
        except Exception as e:  # noqa: BLE001 - a plugin's failure is reported as the plugin's
            raise PosrnnError(f"plugin core {name!r}: build({d}, {m.hidden_size}) raised {type(e).__name__}: {e}; "
                              f"fix the plugin or its sizes") from None
        if not isinstance(core, nn.Module):
            raise PosrnnError(f"plugin core {name!r}: build returned a {type(core).__name__}, not a torch nn.Module; "
                              f"return the core module from build")
        return core

    return CoreSpec(build, recurrent_view=p.recurrent_view, conv="conv" in p.options, causal=p.causal)


class SequenceModel(nn.Module):
    """encoder → core → head, the head read at the output-phase steps only."""

    def __init__(self, encoder: InputEncoder, core: nn.Module, hidden_size: int, n_outputs: int):
        super().__init__()
        self.encoder, self.core = encoder, core
        self.head = nn.Linear(hidden_size, n_outputs)

    def hidden(self, inputs: Tensor, query: Optional[Tensor] = None) -> Tensor:
        return self.core(self.encoder(inputs, query))  # (B T H)

    def forward(self, inputs: Tensor, out_index: Optional[Tensor] = None, query: Optional[Tensor] = None,
                select: Optional[Tensor] = None) -> Tensor:
        """Logits (B, K, V) at ``out_index`` (every step if None); with ``select`` (B, T) bool, the
        hidden states (N, H) of the selected steps instead, before the head (the language model
        applies the head in chunks to its real tokens: ``models/head.py``)."""
        h = self.hidden(inputs, query)  # (B T H)
        if select is not None:
            return h[select]  # (N H)
        if out_index is not None:
            h = h.gather(1, out_index[..., None].expand(-1, -1, h.shape[-1]))  # (B K H)
        return self.head(h)  # (B K V)


def check_model_config(m: ModelConfig, output_start: Optional[int] = None) -> None:
    """Refuse impossible model configs with a one-line reason."""
    spec = core_spec(m.name)  # an unknown name: one line listing the cores
    if m.pe not in PE_FORMS:
        raise PosrnnError(f"unknown positional encoding {m.pe!r}; choose one of: {', '.join(PE_FORMS)}")
    if m.pe_mode not in catalog.PE_MODES:
        raise PosrnnError(f"unknown --pe-mode {m.pe_mode!r}; choose one of: {', '.join(catalog.PE_MODES)}")
    check_bounds(m, "model")
    if not m.conv and not spec.conv:
        with_conv = ", ".join(n for n, c in CORES.items() if c.conv)
        raise PosrnnError(f"--no-conv (model.conv: false) applies to the cores with a short convolution ({with_conv}), "
                          f"not {m.name}; drop it")
    if m.block not in catalog.BLOCKS:
        raise PosrnnError(f"unknown --block {m.block!r} (model.block); choose one of: {', '.join(catalog.BLOCKS)}")
    if m.block != "mixer" and getattr(spec, "full", None) is None:
        with_block = ", ".join(n for n, c in CORES.items() if c.full is not None)
        raise PosrnnError(f"--block {m.block} (model.block) applies to the cores with a full block ({with_block}), "
                          f"not {m.name}; drop it")
    spec.check(m)
    PE_FORMS[m.pe].check(m, output_start)


def build_model(cfg: RunConfig, task) -> SequenceModel:
    """The model for ``cfg.model`` on ``task`` (sizes from the task). Uses the global RNG for init."""
    m = cfg.model
    check_model_config(m, task.output_start)
    spec = core_spec(m.name)
    if not spec.causal and cfg.task.autoregressive:
        raise PosrnnError(f"{m.name} sees every position, so fed-back targets (--autoregressive) would reach the "
                          f"steps that predict them; drop --autoregressive or use a causal core")
    encoder = InputEncoder(task.n_input_ids, m, PE_FORMS[m.pe], task.max_steps,
                           continuous_dim=task.cfg.dim if task.continuous else None, output_start=task.output_start)
    core = (spec.full if m.block == "full" else spec.build)(encoder.out_dim, m)
    if m.frozen_vocab is None:
        return SequenceModel(encoder, core, m.hidden_size, task.n_outputs)
    # a vocabulary-extended run (posrnn extend-vocab): rebuild the trained shapes, then extend
    V, X = m.frozen_vocab, task.n_outputs - m.frozen_vocab
    if not 1 < V < task.n_outputs or task.continuous:
        raise PosrnnError(f"model.frozen_vocab ({V}) is set by `posrnn extend-vocab` and must lie in 2 … vocab_size − "
                          f"1; drop it")
    encoder.embedding = nn.Embedding(V + 1, m.E)
    model = SequenceModel(encoder, core, m.hidden_size, V)
    extend_model(model, V, X)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["PE_FORMS", "CORES", "CoreSpec", "core_spec", "SequenceModel", "InputEncoder", "RecurrentCore",
           "S4DCore", "CausalTransformerCore", "build_model", "check_model_config", "count_parameters", "sinusoidal_pe"]
