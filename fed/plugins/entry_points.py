"""Objects that installed distributions register under an ldpfed entry-point group, and the one way a
registry files a plugin (from an entry point or from ``register_*`` in this process).

A plugin registered in this process (``register_*``) exists only here; the processes a simulation starts (the
encoding step, Flower's ServerApp and ClientApps on Ray workers, a study's runs) get it by its import path:
:func:`environment` names each one a run uses in :data:`ENVIRONMENT`, and every registry there loads those as
it loads entry points (:func:`load_entries`). An object no other process can import (defined in ``__main__`` or
inside a function, an axis instance with state of its own) is refused there, at once, with what to do.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Collection, Mapping, MutableMapping
from functools import cache
from importlib.metadata import EntryPoint, EntryPoints, entry_points
from pathlib import Path
from typing import Any

GROUPS = ("ldpfed.randomizers", "ldpfed.encoders", "ldpfed.classifiers", "ldpfed.axes")
"""Every entry-point group ldpfed reads."""
IN_PROCESS = "register_* in this process"
"""Where a plugin registered by a function call (not an entry point) comes from, in error texts."""

PLUGINS: dict[str, dict[str, str]] = {group: {} for group in GROUPS}
"""Per group, each plugin filed so far by :func:`install`: its name and where it came from (a distribution)."""
ENVIRONMENT = "LDPFED_PLUGINS"
"""The environment variable that hands plugins registered in a parent process to its children: a JSON object,
group -> name -> import path (``module:qualname``, as an entry point's value)."""
PARENT = "register_* in the parent process"
"""Where a plugin handed down by :data:`ENVIRONMENT` comes from, in error texts."""
_REGISTERED: dict[str, dict[str, object]] = {group: {} for group in GROUPS}
"""Per group, each plugin registered in this process by ``register_*``."""


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
    handed = _handed_down().get(group, {})
    points = [*_installed().select(group=group), *(EntryPoint(name, value, group) for name, value in handed.items())]
    for point in points:
        owner = _owner(point) if point.name not in handed or point.value != handed[point.name] else f"{PARENT} ({point.value})"
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
    if source == IN_PROCESS:
        _REGISTERED[group][name] = plugin


def environment(values: Mapping[str, Any]) -> dict[str, str]:
    """The environment variables a child process needs to hold the plugins registered here that a run with options
    ``values`` (a run config) uses: every axis (its options are run options) and each randomizer, encoder or
    classifier whose name one of the values names (``--mechanism NAME``, ``--encoder NAME:ARG``, ...). Returns
    :data:`ENVIRONMENT` (with what this process was handed itself) and ``PYTHONPATH`` with the folders their modules
    were imported from in front; empty when there is nothing to hand down.

    Raises
    ------
    PluginError
        For a used plugin that no other process can import, saying why and what to do.
    """
    handed = {group: dict(names) for group, names in _handed_down().items()}
    texts = [str(value) for value in values.values() if isinstance(value, str)]
    folders: list[str] = []
    for group, plugins in _REGISTERED.items():
        for name, plugin in plugins.items():
            if group != "ldpfed.axes" and not any(re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", t) for t in texts):
                continue
            path, folder = import_path(plugin, group, name)
            handed.setdefault(group, {})[name] = path
            if folder:
                folders.append(folder)
    if not any(handed.values()):
        return {}
    paths = [*folders, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {ENVIRONMENT: json.dumps(handed, sort_keys=True)}
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))} if paths else env


def import_path(plugin: object, group: str, name: str) -> tuple[str, str | None]:
    """How another process imports ``plugin``: (``module:qualname``, the folder its top-level package or module was
    imported from, None if unknown). An instance (an axis) is the module-level name that holds it, else its class when
    a new one built without arguments is the same; PluginError when no other process could import it."""
    kind = group.removeprefix("ldpfed.").removesuffix("s")
    where = f"{kind} {name!r} (register_{kind} in this process)"
    target = plugin
    if not (isinstance(plugin, type) or hasattr(plugin, "__qualname__")):  # an instance
        module = sys.modules.get(type(plugin).__module__)
        held = [key for key, value in vars(module).items() if value is plugin] if module is not None else []
        if module is not None and held and module.__name__ != "__main__":
            return f"{module.__name__}:{held[0]}", _folder(module.__name__)
        target = type(plugin)
        try:
            same = vars(target()) == vars(plugin)
        except Exception:  # a class that needs arguments, or whose instances hold no __dict__
            same = False
        if not same:
            raise PluginError(
                f"{where} is an instance that no module holds and a new {target.__qualname__}() would not be: a "
                "simulation's other processes could not rebuild it. Assign it to a module-level name, or install it "
                "as an entry-point plugin (docs/plugins.md)"
            )
    module_name, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
    reason = None
    if module_name in (None, "__main__"):
        reason = "it is defined in __main__ (the script or notebook itself), which no other process can import"
    elif "<locals>" in qualname or "<lambda>" in qualname:
        reason = "it is defined inside a function (or is a lambda), which no other process can import"
    else:
        found: object = sys.modules.get(module_name)
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if found is not target:
            reason = f"{module_name}:{qualname} does not name it"
    if reason is not None:
        raise PluginError(
            f"{where}: a simulation runs it in other processes (the encoding step, Flower's ServerApp and ClientApps, "
            f"a study's runs), which get it by its import path, and {reason}. Define it at the top level of a module "
            "they can import, or install it as an entry-point plugin (docs/plugins.md)"
        )
    return f"{module_name}:{qualname}", _folder(module_name)


def _folder(module_name: str) -> str | None:
    """The folder on sys.path that the top-level package or module of ``module_name`` was imported from (None for
    ldpfed's own modules: every process imports those already)."""
    if module_name.partition(".")[0] == "ldpfed":
        return None
    top = sys.modules.get(module_name.partition(".")[0])
    file = getattr(top, "__file__", None)
    if file is None:
        return None
    path = Path(file).resolve()
    return str(path.parent.parent if path.name == "__init__.py" else path.parent)


def _handed_down() -> dict[str, dict[str, str]]:
    """The plugins a parent process handed down (:data:`ENVIRONMENT`); PluginError for a malformed value."""
    text = os.environ.get(ENVIRONMENT, "")
    if not text:
        return {}
    try:
        handed = json.loads(text)
    except json.JSONDecodeError:
        handed = None
    if not (isinstance(handed, dict) and all(
        group in GROUPS and isinstance(names, dict) and all(isinstance(v, str) for v in names.values())
        for group, names in handed.items()
    )):
        raise PluginError(f"${ENVIRONMENT} must be a JSON object of group -> name -> 'module:qualname', got {text[:200]!r}")
    return handed


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
