"""Objects that installed distributions register under an ldpfed entry-point group, and the one way a
registry files a plugin (from an entry point or from ``register_*`` in this process)."""

from __future__ import annotations

from collections.abc import Callable, Collection, MutableMapping
from functools import cache
from importlib.metadata import EntryPoint, EntryPoints, entry_points

GROUPS = ("ldpfed.randomizers", "ldpfed.encoders", "ldpfed.classifiers", "ldpfed.axes")
"""Every entry-point group ldpfed reads."""
IN_PROCESS = "register_* in this process"
"""Where a plugin registered by a function call (not an entry point) comes from, in error texts."""

PLUGINS: dict[str, dict[str, str]] = {group: {} for group in GROUPS}
"""Per group, each plugin filed so far by :func:`install`: its name and where it came from (a distribution)."""


class PluginError(ImportError):
    """An installed plugin that cannot be loaded; names its distribution and entry point."""


def load_group(group: str) -> dict[str, object]:
    """The objects registered under ``group``, by entry-point name.

    Raises
    ------
    ValueError
        If ``group`` is not one of GROUPS.
    PluginError
        If an entry point fails to load, or two distributions register the same name.
    """
    return {name: loaded for name, (loaded, _) in load_entries(group).items()}


def load_entries(group: str) -> dict[str, tuple[object, str]]:
    """Like :func:`load_group`, with the distribution that registers each object (for error texts)."""
    if group not in GROUPS:
        raise ValueError(f"unknown entry-point group {group!r}; ldpfed reads {', '.join(GROUPS)}")
    loaded: dict[str, tuple[object, str]] = {}
    for point in _installed().select(group=group):
        owner = _owner(point)
        if point.name in loaded:
            raise PluginError(
                f"entry point {point.name!r} in group {group!r} is registered twice ({loaded[point.name][1]} and {owner})"
            )
        try:
            loaded[point.name] = point.load(), owner
        except Exception as error:  # any failure of third-party code becomes one clear error
            raise PluginError(f"plugin {point.name!r} ({group}, from {owner}: {point.value}) failed to load: {error}") from error
    return loaded


def install(
    group: str, registry: MutableMapping[str, object], name: str, plugin: object, source: str, builtin: Collection[str]
) -> None:
    """File ``plugin`` under ``name`` in ``registry`` (the registry of ``group``).

    Raises
    ------
    PluginError
        If ``name`` is one of the ``builtin`` names (a plugin never replaces what ldpfed ships), or another
        object already holds it.
    """
    kind = group.removeprefix("ldpfed.").removesuffix("s")
    if not isinstance(name, str) or not name:
        raise PluginError(f"{kind} plugin from {source}: its name must be a non-empty string, got {name!r}")
    if name in builtin:
        raise PluginError(f"{kind} plugin {name!r} from {source}: {name!r} is a built-in {kind}; a plugin cannot replace it")
    if registry.get(name, plugin) is not plugin:
        held = PLUGINS[group].get(name, "code that registered it first")
        raise PluginError(f"{kind} {name!r} is registered twice ({held} and {source}); uninstall one of them")
    registry[name] = plugin
    PLUGINS[group][name] = source


_PENDING: list[Callable[[], None]] = []
"""Groups whose registry was imported while another group's plugins were loading (see load_into)."""
_loading = False


def load_into(
    group: str,
    registry: MutableMapping[str, object],
    builtin: Collection[str],
    check: Callable[[str, object, str], object],
) -> None:
    """:func:`install` every plugin of ``group``, each as ``check(name, loaded, source)`` returns it (which
    raises PluginError naming ``source`` for an object that is not a valid plugin of the group).

    A plugin module imports ldpfed's registries while it loads; a registry imported then (one module
    may hold a randomizer and an encoder) files its group's plugins once the module in hand has
    finished loading, never from a partially imported module.
    """
    global _loading
    if _loading:
        _PENDING.append(lambda: load_into(group, registry, builtin, check))
        return
    _loading = True
    try:
        for name, (loaded, source) in load_entries(group).items():
            install(group, registry, name, check(name, loaded, source), source, builtin)
    finally:
        _loading = False
    while _PENDING:
        _PENDING.pop(0)()


@cache
def _installed() -> EntryPoints:
    """Every installed entry point, read once per process (one scan of the installed distributions)."""
    return entry_points()


def _owner(point: EntryPoint) -> str:
    """The distribution that declares ``point``, for error texts."""
    return f"distribution {point.dist.name!r}" if point.dist is not None else "an unknown distribution"
