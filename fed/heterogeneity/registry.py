"""The heterogeneity axes of a run, in the order their options are parsed, and what follows from all of them.

Adding an axis is one module (a :class:`~fed.heterogeneity.axis.HeterogeneityAxis`) and one line in
:data:`AXES`: the run spec parses its options, the CLI lists them, simulated nodes serve its groups
with their run options and encodings, the server's simulated network asks whom it reaches and
whether it fits a baseline of its own, and the reports group users by it and carry its summary
entries and privacy-report section. Nothing outside an axis's module names that axis. Another
package adds one through the ``ldpfed.axes`` entry-point group (an axis instance, or a class built
without arguments), loaded when this module is imported, or with :func:`register_axis` in one
process; it follows the built-in axes, and may take neither an axis's name nor a run option's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpfed.fed.heterogeneity.availability import AvailabilityAxis
from ldpfed.fed.heterogeneity.behavior_trace import BehaviorTraceAxis
from ldpfed.fed.heterogeneity.device_speed import DeviceSpeedAxis
from ldpfed.fed.heterogeneity.device_tiers import DeviceTierAxis
from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis, ServedGroups
from ldpfed.fed.plugins.entry_points import IN_PROCESS, PluginError, install, load_into
from ldpfed.fed.configuration.option import Option
from ldpfed.fed.heterogeneity.tiers import PrivacyTiers

if TYPE_CHECKING:
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.fed.heterogeneity.virtual_clock import VirtualClock

AXES: tuple[HeterogeneityAxis, ...] = (
    PrivacyTiers(),
    AvailabilityAxis(),
    DeviceTierAxis(),
    DeviceSpeedAxis(),
    BehaviorTraceAxis(),
)
"""Every axis, in the order their options are parsed and checked: the built-in ones, then the plugins'."""
GROUP = "ldpfed.axes"
BUILTIN: frozenset[str] = frozenset(axis.name for axis in AXES)
"""The axes ldpfed ships."""
_PLUGINS: dict[str, HeterogeneityAxis] = {}


def register_axis(axis: HeterogeneityAxis) -> HeterogeneityAxis:
    """Add ``axis`` after the others in this process (its options become run options).

    Raises
    ------
    PluginError
        If ``axis`` is not a HeterogeneityAxis that parses its options, or its name or an option's name
        is taken (a built-in axis's, another plugin's, a run option's).
    """
    checked = _checked(axis, IN_PROCESS)
    install(GROUP, _PLUGINS, checked.name, checked, IN_PROCESS, BUILTIN)
    _refresh()
    return checked


def load_plugins() -> None:
    """Add every axis of the installed distributions' ``ldpfed.axes`` entry points."""
    load_into(GROUP, _PLUGINS, BUILTIN, _entry_point)
    _refresh()


def plugin_option_names() -> set[str]:
    """The names of the plugin axes' options (they travel in one run-config key, fed.configuration.run_spec.PLUGIN_OPTIONS)."""
    return {option.name for axis in _PLUGINS.values() for option in axis.options}


def _refresh() -> None:
    """:data:`AXES`: the built-in axes, then the plugins' in the order they were registered."""
    global AXES
    AXES = (*(axis for axis in AXES if axis.name in BUILTIN), *_PLUGINS.values())


def _entry_point(name: str, loaded: object, source: str) -> HeterogeneityAxis:
    axis = _checked(loaded() if isinstance(loaded, type) else loaded, source)
    if axis.name != name:
        raise PluginError(f"axis plugin {name!r} from {source}: the axis is named {axis.name!r}; the entry point must be too")
    return axis


def _checked(axis: object, source: str) -> HeterogeneityAxis:
    """``axis`` if a plugin may add it, else a PluginError naming ``source``."""
    from ldpfed.fed.configuration.config import HELP  # the run options' names; here: fed.configuration imports this module

    where = f"axis plugin {getattr(axis, 'name', axis)!r} from {source}"
    if not isinstance(axis, HeterogeneityAxis):
        raise PluginError(f"{where}: not a fed.heterogeneity.axis.HeterogeneityAxis")
    if type(axis).parse is HeterogeneityAxis.parse:
        raise PluginError(f"{where}: does not implement parse()")
    others = [other for other in (*AXES, *_PLUGINS.values()) if other.name != axis.name]
    taken = set(HELP) | {option.name for other in others for option in other.options}
    names = [option.name for option in axis.options]
    clash = sorted(set(names) & taken) or sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise PluginError(f"{where}: option names {clash} are taken (run options and other axes' options)")
    bad = [n for n in names if not n.isidentifier()]
    if bad:
        raise PluginError(f"{where}: option names {bad} must be identifiers (underscores; --flags use hyphens)")
    return axis


def axis_options() -> Iterator[tuple[HeterogeneityAxis, Option]]:
    """Each axis's options, with their axis."""
    for axis in AXES:
        for option in axis.options:
            yield axis, option


def _groups(spec: RunSpec, active: list[tuple[HeterogeneityAxis, Any]]) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Every combination of the ``active`` axes' groups (in product order), and each user's combination index."""
    users, seed = spec.data.users, spec.seed
    group_of = np.zeros(users, dtype=np.int64)
    sizes = []
    for axis, setting in active:
        size = len(axis.group_names(setting))
        group_of = group_of * size + axis.assign(setting, users, seed)
        sizes.append(size)
    return list(itertools.product(*(range(size) for size in sizes))), group_of


def spec_groups(spec: RunSpec) -> tuple[list[RunSpec], np.ndarray]:
    """The run as each group of users sees it (axes that change run options, e.g. privacy tiers), and each user's
    group by user id; one group, the run itself, when no axis changes any option."""
    active = spec.heterogeneity.grouping()
    if not active:
        return [spec], np.zeros(spec.data.users, dtype=np.int64)
    combos, group_of = _groups(spec, active)
    specs = []
    for combo in combos:
        changes: dict[str, Any] = {}
        for (axis, setting), group in zip(active, combo):
            changes.update(axis.overrides(setting, group))
        specs.append(spec.with_options(**changes))
    return specs, group_of


def encoding_groups(spec: RunSpec) -> list[tuple[dict[str, Any], np.ndarray | None]]:
    """How each group of devices encodes (keywords of fed.runtime.assets.Assets.features) and its users (a mask by user
    id); [({}, None)] when no axis changes the encoding: every user runs the encoder as shipped."""
    active = [(axis, setting) for axis, setting in spec.heterogeneity.active() if axis.encoding(setting, 0)]
    if not active:
        return [({}, None)]
    combos, group_of = _groups(spec, active)
    groups = []
    for index, combo in enumerate(combos):
        encoding: dict[str, Any] = {}
        for (axis, setting), group in zip(active, combo):
            encoding.update(axis.encoding(setting, group))
        groups.append((encoding, group_of == index))
    return groups


def online(spec: RunSpec, server_round: int, clock: VirtualClock | None) -> np.ndarray:
    """Which users the simulated network reaches in ``server_round``, by user id (every axis must let a user through)."""
    reached = np.ones(spec.data.users, dtype=bool)
    for axis, setting in spec.heterogeneity.active():
        mask = axis.online(setting, spec, server_round, clock)
        if mask is not None:
            reached &= mask
    return reached


def reported_groups(spec: RunSpec) -> list[tuple[str, np.ndarray, tuple[str, ...]]]:
    """Each reported axis's name, each user's group index (by user id) and the groups' names."""
    return [
        (axis.name, axis.assign(setting, spec.data.users, spec.seed), axis.group_names(setting))
        for axis, setting in spec.heterogeneity.active()
        if axis.reported_groups(setting)
    ]


def participation_groups(took_part: np.ndarray) -> list[tuple[str, np.ndarray, tuple[str, ...]]]:
    """Each axis that groups users by whether they answered a training request (``took_part``, by user id): its name,
    each user's group index and the groups' names."""
    grouped = [(axis.name, axis.participation(took_part)) for axis in AXES]
    return [(name, *groups) for name, groups in grouped if groups is not None]


def group_baseline(spec: RunSpec) -> bool:
    """Whether an axis of the run asks the server to fit the classifier on the largest-budget group's reports alone."""
    return any(axis.group_baseline(setting) for axis, setting in spec.heterogeneity.active())


def summaries(spec: RunSpec, groups: ServedGroups) -> dict[str, Any]:
    """What the run's axes add to summary.json, in registry order."""
    entries: dict[str, Any] = {}
    for axis, setting in spec.heterogeneity.active():
        entries.update(axis.summary(setting, groups))
    return entries


def report_lines(spec: RunSpec, result: Mapping[str, Any], fmt: Callable[[Any], str]) -> list[str]:
    """The run's axes' sections of the privacy report, each after an empty line, in registry order."""
    lines: list[str] = []
    for axis, setting in spec.heterogeneity.active():
        section = axis.report_lines(setting, spec, result, fmt)
        if section:
            lines += ["", *section]
    return lines


load_plugins()
