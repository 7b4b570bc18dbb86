"""Objects that installed distributions register under an ldpfed entry-point group."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

GROUPS = ("ldpfed.randomizers", "ldpfed.encoders", "ldpfed.classifiers", "ldpfed.axes")
"""Every entry-point group ldpfed reads."""


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
    if group not in GROUPS:
        raise ValueError(f"unknown entry-point group {group!r}; ldpfed reads {', '.join(GROUPS)}")
    loaded: dict[str, object] = {}
    owners: dict[str, str] = {}
    for point in entry_points(group=group):
        owner = _owner(point)
        if point.name in loaded:
            raise PluginError(
                f"entry point {point.name!r} in group {group!r} is registered twice ({owners[point.name]} and {owner})"
            )
        try:
            loaded[point.name] = point.load()
        except Exception as error:  # any failure of third-party code becomes one clear error
            raise PluginError(f"plugin {point.name!r} ({group}, from {owner}: {point.value}) failed to load: {error}") from error
        owners[point.name] = owner
    return loaded


def _owner(point: EntryPoint) -> str:
    """The distribution that declares ``point``, for error texts."""
    return point.dist.name if point.dist is not None else "an unknown distribution"
