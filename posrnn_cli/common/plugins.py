"""Model cores from outside posrnn: a researcher's own recurrent core, run by every command without
an edit to posrnn (docs/plugins.md).

A plugin is a *factory*: a callable taking no arguments that returns a ``CorePlugin`` — the
core's catalogue facts (name, version, one-line description, whether it has a recurrent view)
and its builder ``build(in_dim, hidden_size, **options) -> nn.Module``, a module mapping
(B, T, in_dim) → (B, T, hidden_size) causally. It is named one of two ways:

* an entry point of group ``posrnn.cores`` in the plugin's package metadata; its name is what
  ``--model`` (or ``model:`` in a profile's cell) takes and must equal the ``CorePlugin``'s name;
* ``module:factory`` itself (``--model mypkg.cores:make_core``), the module on the import path.

Plugins are found lazily: the entry points are read only for a name that is not built in (or
when the cores are listed), so a built-in core's path never reads them, and a broken plugin
never stands in a built-in core's way. Each failure (a module that does not import, a factory
that raises or returns something else, a name that is not there) is one ``PosrnnError`` naming
the plugin and the fix.

A run of a plugin core records, as its identity (``common.numerics``), the ``version`` the
plugin declares (``core/<name>``) and the version of the distribution that installs it: an
upgrade of either marks its runs stale. This module imports neither torch nor the plugins
until asked for one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import catalog
from .errors import PosrnnError

#: the entry-point group a package registers its cores under
GROUP = "posrnn.cores"
#: the model-config keys a plugin may ask to be given as keyword arguments of its builder
OPTIONS = ("state_size", "layers", "heads", "conv")


@dataclass(frozen=True)
class CorePlugin:
    """What a plugin's factory returns."""

    name: str  # an entry point's name (what --model takes); for module:factory, the core's display name
    version: int  # the version of the numbers it computes: bump it when a change is meant to change them
    about: str  # one line for the listing (posrnn cores)
    #: (in_dim, hidden_size, **options) → an nn.Module mapping (B, T, in_dim) to (B, T, hidden_size)
    build: Callable[..., Any]
    #: the module has ``state_after(x (B, P, D)) → z (B, Dz)`` and ``output_from_state(z, x (B, S, D)) →
    #: h (B, H)``: ``posrnn stability`` differentiates h with respect to z
    recurrent_view: bool = False
    causal: bool = True  # output t reads inputs ≤ t only (False: refused where targets are fed back)
    options: tuple[str, ...] = ()  # the model-config keys (``OPTIONS``) passed to ``build`` by name


@dataclass(frozen=True)
class Loaded:
    spec: str  # what the config names: an entry point's name or module:factory
    plugin: CorePlugin
    distribution: Optional[str]  # the installed distribution that provides it (None: a bare module)

    @property
    def entry(self) -> catalog.Entry:
        """The plugin as a catalogue entry (its version, and its distribution as a library)."""
        return catalog.Entry(self.plugin.about, version=self.plugin.version,
                             libraries=(self.distribution,) if self.distribution else ())


def is_spec(name: str) -> bool:
    """``module:factory`` (a plugin named by its import path)."""
    return isinstance(name, str) and ":" in name


@functools.lru_cache(maxsize=1)
def entry_points() -> dict[str, Any]:
    """name → entry point of every installed ``posrnn.cores`` entry point (metadata read, nothing imported)."""
    from importlib.metadata import entry_points as installed

    return {ep.name: ep for ep in installed(group=GROUP)}


def is_plugin_name(name: Any) -> bool:
    """Whether ``name`` can name a plugin (``module:factory`` or an installed entry point's name),
    not loading it; built-in names are not plugins."""
    return isinstance(name, str) and name not in catalog.CORES and (is_spec(name) or name in entry_points())


def _fail(what: str, problem: str, fix: str) -> PosrnnError:
    return PosrnnError(f"plugin core {what}: {problem}; {fix}")


def _factory(name: str) -> tuple[Callable, str, Optional[str]]:
    """(factory, how it is named in messages, its distribution) of the plugin ``name``."""
    import importlib

    if is_spec(name):
        module, _, attr = name.partition(":")
        what = repr(name)
        try:
            mod = importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 - any failure of the plugin's import is the plugin's
            raise _fail(what, f"module {module!r} does not import ({type(e).__name__}: {e})",
                        "install the package that provides it, or fix --model's module:factory") from None
        if not attr or not hasattr(mod, attr):
            raise _fail(what, f"module {module!r} has no {attr!r}", "name its factory function as module:function")
        return getattr(mod, attr), what, _distribution_of(module)
    ep = entry_points().get(name)
    if ep is None:
        known = [*catalog.CORES, *entry_points()]
        raise PosrnnError(f"unknown model {name!r}; choose one of: {', '.join(known)}, or a plugin's module:factory "
                          f"(docs/plugins.md)")
    dist = ep.dist.name if getattr(ep, "dist", None) is not None else None
    what = f"{name!r} (entry point {ep.value} of {dist or 'an installed package'})"
    try:
        return ep.load(), what, dist
    except Exception as e:  # noqa: BLE001
        raise _fail(what, f"does not import ({type(e).__name__}: {e})",
                    f"fix or reinstall {dist or 'its package'}, or uninstall it") from None


def _distribution_of(module: str) -> Optional[str]:
    """The installed distribution whose files hold the top-level package of ``module``, if one does."""
    from importlib.metadata import packages_distributions

    dists = packages_distributions().get(module.partition(".")[0]) or []
    return dists[0] if dists else None


def _checked(p: Any, name: str, what: str) -> CorePlugin:
    """``p`` if it is a well-formed ``CorePlugin``, else a one-line refusal."""
    fix = "return posrnn_cli.common.plugins.CorePlugin(name=…, version=…, about=…, build=…) from the factory"
    if not isinstance(p, CorePlugin):
        raise _fail(what, f"its factory returned a {type(p).__name__}, not a CorePlugin", fix)
    if not isinstance(p.name, str) or not p.name or (not is_spec(name) and p.name != name):
        raise _fail(what, f"its factory names the core {p.name!r}", f"name it {name!r}, the entry point's name")
    if not isinstance(p.version, int) or isinstance(p.version, bool) or p.version < 1:
        raise _fail(what, f"version is {p.version!r}, not a positive integer", fix)
    if not callable(p.build) or not isinstance(p.about, str):
        raise _fail(what, "build is not callable or about is not text", fix)
    bad = [o for o in p.options if o not in OPTIONS]
    if bad:
        raise _fail(what, f"options {bad} are not model-config keys it may take", f"choose from {', '.join(OPTIONS)}")
    return p


@functools.lru_cache(maxsize=None)
def load(name: str) -> Loaded:
    """The plugin ``name`` (an entry point's name or module:factory), imported and checked; a
    one-line ``PosrnnError`` naming the plugin and the fix when it cannot be used."""
    if name in catalog.CORES:
        raise PosrnnError(f"{name!r} is a built-in core, not a plugin")
    factory, what, dist = _factory(name)
    try:
        p = factory()
    except Exception as e:  # noqa: BLE001
        raise _fail(what, f"its factory raised {type(e).__name__}: {e}", "fix the plugin's factory") from None
    return Loaded(name, _checked(p, name, what), dist)


def core_entry(name: Any) -> Optional[catalog.Entry]:
    """The catalogue entry of core ``name``: a built-in one's, a plugin's (loaded), or None for a
    name that is neither."""
    if not isinstance(name, str):
        return None
    if name in catalog.CORES:
        return catalog.CORES[name]
    return load(name).entry if is_plugin_name(name) else None


def check_core_name(name: Any) -> None:
    """Refuse, in one line, a model name that is neither built in nor a plugin that loads (torch
    is imported only by a plugin that imports it)."""
    if not (isinstance(name, str) and name in catalog.CORES):
        load(str(name))


def listed() -> dict[str, str]:
    """name → description of every core: the built-in ones, then each installed plugin's (loaded;
    a broken one's description is its error)."""
    out = {k: e.description for k, e in catalog.CORES.items()}
    for name in entry_points():
        if name in catalog.CORES:
            out[f"{name} (plugin)"] = f"error: a plugin's entry point shadows the built-in {name}; rename it"
            continue
        try:
            out[name] = load(name).plugin.about + " (plugin)"
        except PosrnnError as e:
            out[name] = f"error: {e}"
    return out


def forget() -> None:
    """Read the entry points and load the plugins afresh at the next use (after an install)."""
    entry_points.cache_clear()
    load.cache_clear()
