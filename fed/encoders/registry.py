"""Encoders from other packages: the ``ldpfed.encoders`` entry-point group and :func:`register_encoder`.

A plugin is a name and a factory (a class or function) returning an
:class:`~fed.encoders.base.Encoder`: the spec ``<name>`` builds ``factory()``, ``<name>:<argument>``
builds ``factory("<argument>")`` (fed.encoders.resolver, through which make_encoder builds). Importing this module loads the
installed plugins. A device runs an encoder only if its owner's policy lists its spec in ``encoders``
(fed.device.policy: the strict default lists built-ins only), so a plugin is never used by default.
A plugin never takes a built-in name.
"""

from __future__ import annotations

from collections.abc import Callable

from ldpfed.fed.encoders.base import Encoder
from ldpfed.fed.encoders.token_matrix import PREFIX
from ldpfed.fed.encoders.tuned import TUNED_SPEC
from ldpfed.fed.plugins.entry_points import IN_PROCESS, PluginError, install, load_into

GROUP = "ldpfed.encoders"
ENCODERS: dict[str, Callable[..., Encoder]] = {}
"""The plugin encoders' factories by name."""
BUILTIN: frozenset[str] = frozenset({"minilm", "bilstm", TUNED_SPEC, PREFIX.removesuffix(":")})
"""The encoder names ldpfed reads itself (fed.encoders.resolver); a plugin may not take one."""


def register_encoder(name: str, factory: Callable[..., Encoder]) -> Callable[..., Encoder]:
    """Make the spec ``name`` (or ``name:<argument>``) build ``factory()`` (or ``factory(argument)``) in this process.

    Raises
    ------
    PluginError
        If ``factory`` is not callable, ``name`` holds ':' or '/' (which model ids and paths use) or is
        a built-in name, or another plugin holds it.
    """
    install(GROUP, ENCODERS, _checked_name(name, IN_PROCESS), _checked(factory, name, IN_PROCESS), IN_PROCESS, BUILTIN)
    return factory


def plugin_encoder(spec: str) -> Encoder | None:
    """The encoder a plugin's spec names, or None when ``spec`` names no plugin."""
    name, sep, argument = spec.partition(":")
    if name not in ENCODERS:
        return None
    encoder = ENCODERS[name](argument) if sep else ENCODERS[name]()
    if not isinstance(encoder, Encoder):
        missing = [a for a in ("name", "dim", "fingerprint", "truncated", "encode") if not hasattr(encoder, a)]
        raise ValueError(f"encoder plugin {name!r} built a {type(encoder).__name__}, not an Encoder (missing {missing})")
    return encoder


def load_plugins() -> None:
    """Register every encoder of the installed distributions' ``ldpfed.encoders`` entry points."""
    load_into(GROUP, ENCODERS, BUILTIN, lambda name, loaded, source: _checked(loaded, _checked_name(name, source), source))


def _checked_name(name: str, source: str) -> str:
    if isinstance(name, str) and (":" in name or "/" in name):
        raise PluginError(f"encoder plugin {name!r} from {source}: a name holds no ':' or '/' (specs and model ids use them)")
    return name


def _checked(factory: object, name: str, source: str) -> Callable[..., Encoder]:
    if not callable(factory):
        raise PluginError(f"encoder plugin {name!r} from {source}: {factory!r} is not a class or function")
    return factory


load_plugins()
