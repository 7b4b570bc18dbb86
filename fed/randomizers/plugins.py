"""Randomizers from other packages: the ``ldpfed.randomizers`` entry-point group and :func:`register_randomizer`.

A plugin is one :class:`~fed.randomizers.base.Randomizer` subclass. Its class states everything the
project reads from a mechanism (design.md section 2): its privacy event (so ledgers, calibration,
policies and accountants use it unchanged), its audit pair (``audit_scores``) and whether its sampler
is float-safe on a device (``float_safe``, set by the plugin's own class, never inherited from the base).
What a plugin cannot state is that a device runs it: only the mechanisms ldpfed ships (:data:`BUILTIN`)
are among a device's default mechanisms (fed.device.policy.default_mechanisms); a device serves a
plugin only when its owner's policy names it. A plugin never takes a built-in name.
"""

from __future__ import annotations

import inspect

from ldpfed.fed.plugins.entry_points import IN_PROCESS, PluginError, install, load_into
from ldpfed.fed.randomizers.base import RANDOMIZERS, Randomizer

GROUP = "ldpfed.randomizers"
BUILTIN: frozenset[str] = frozenset(RANDOMIZERS)
"""The randomizers ldpfed ships (this module is imported after all of them, fed.randomizers)."""


def register_randomizer(cls: type[Randomizer]) -> type[Randomizer]:
    """Make a third-party randomizer class selectable by its ``name`` in this process (usable as a decorator).

    Raises
    ------
    PluginError
        If ``cls`` is not a complete Randomizer subclass that states its audit pair and float safety,
        ships files, takes a built-in name, or another plugin holds its name.
    """
    install(GROUP, RANDOMIZERS, getattr(cls, "name", None), checked(cls, IN_PROCESS), IN_PROCESS, BUILTIN)
    return cls


def load_plugins() -> None:
    """Register every randomizer of the installed distributions' ``ldpfed.randomizers`` entry points."""
    load_into(GROUP, RANDOMIZERS, BUILTIN, _entry_point)


def _entry_point(name: str, loaded: object, source: str) -> type[Randomizer]:
    cls = checked(loaded, source)
    if cls.name != name:
        raise PluginError(f"randomizer plugin {name!r} from {source}: its class is named {cls.name!r}; the entry point must be too")
    return cls


def checked(cls: object, source: str) -> type[Randomizer]:
    """``cls`` if it is a randomizer class that a plugin may register, else a PluginError naming ``source``."""
    where = f"randomizer plugin {getattr(cls, '__qualname__', cls)!r} from {source}"
    if not (isinstance(cls, type) and issubclass(cls, Randomizer)):
        raise PluginError(f"{where}: not a subclass of fed.randomizers.Randomizer")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise PluginError(f"{where}: does not implement {missing}")
    if cls.registry is not RANDOMIZERS:
        raise PluginError(f"{where}: belongs to another registry (token-level randomizers take no plugins)")
    if cls.audit_scores is Randomizer.audit_scores:
        raise PluginError(f"{where}: states no audit pair; implement audit_scores(dim) (docs/plugins.md)")
    own = [k for k in cls.__mro__ if not k.__module__.startswith("ldpfed.fed.")]
    if not any("float_safe" in vars(k) for k in own):
        raise PluginError(
            f"{where}: must state float_safe in its own class (True only if its noise comes from "
            "ldpfed.fed.privacy.noise's OpenDP samplers or coins on a device)"
        )
    if cls.shipped_files:
        raise PluginError(f"{where}: ships bundle files {list(cls.shipped_files)}; plugins cannot (docs/plugins.md)")
    return cls
