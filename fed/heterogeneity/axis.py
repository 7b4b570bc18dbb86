"""What a heterogeneity axis is: a way simulated users differ, declared once and read by every layer.

An axis owns its run options (their defaults, help and parsing), how users are assigned to its
groups (from the run seed, so server and nodes agree), its effect on a node (the run options its
users see, or how their devices encode) or on the server's simulated network (who is online), and
its group labels in the reports, and what it adds to a run's summary and privacy report. Every hook but :meth:`HeterogeneityAxis.parse` has a default
that does nothing, so an axis implements only what it changes. Simulation only: a real device's
owner and hardware decide what an axis would simulate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpfed.fed.configuration.option import Option

if TYPE_CHECKING:
    from ldpfed.fed.configuration.plan import PrivacyPlan
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.fed.heterogeneity.virtual_clock import ClockPart, VirtualClock


@dataclass(frozen=True)
class ServedGroups:
    """What a run's server knows at its end about the groups of users served with their own run options
    (fed.heterogeneity.registry.spec_groups)."""

    specs: Sequence[RunSpec]
    """Each group's run options."""
    plans: Sequence[PrivacyPlan]
    """Each group's privacy plan."""
    group_of: np.ndarray
    """Each user's group, by user id."""
    sentence: np.ndarray
    """Each user's worst-case sentence-level epsilon from its ledger, by user id (NaN: unknown)."""


class HeterogeneityAxis:
    """One axis; subclasses set :attr:`name` and :attr:`options` and override the hooks they use."""

    name: str = ""
    """The axis's name in reports (groups.md, users.csv)."""
    options: tuple[Option, ...] = ()
    """The run options this axis owns."""

    def parse(self, values: Mapping[str, Any]) -> Any:
        """The axis's setting from its options' values (by name); None when the run does not use it. ValueError
        names what is wrong."""
        raise NotImplementedError

    def check(self, setting: Any, spec: RunSpec) -> None:
        """Checks against the rest of the run (ValueError); ``setting`` is not None."""

    def assign(self, setting: Any, users: int, seed: int) -> np.ndarray | None:
        """Each user's group index, by user id (None: the axis has no fixed groups)."""
        return None

    def group_names(self, setting: Any) -> tuple[str, ...]:
        """Each group's name in reports, by group index."""
        return ()

    def overrides(self, setting: Any, group: int) -> dict[str, Any]:
        """Run options that differ for group ``group``'s users (their node serves them with these)."""
        return {}

    def encoding(self, setting: Any, group: int) -> dict[str, Any]:
        """How group ``group``'s devices encode (keywords of fed.runtime.assets.Assets.features)."""
        return {}

    def online(self, setting: Any, spec: RunSpec, server_round: int, clock: VirtualClock | None) -> np.ndarray | None:
        """Which users the simulated network reaches in ``server_round``, by user id (None: everyone)."""
        return None

    def on_clock(self, setting: Any, spec: RunSpec, dim: int) -> ClockPart | None:
        """What this axis plays on the run's virtual clock (fed.heterogeneity.virtual_clock; ``dim`` values per
        report), set up once by a simulation's server, which reads here any file the axis names (None: nothing)."""
        return None

    def participation(self, took_part: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]] | None:
        """Report groups by whether each user answered a training request (``took_part``, by user id), whatever
        the run's setting: each user's group index and the groups' names (None: the axis does not group so)."""
        return None

    def reported_groups(self, setting: Any) -> bool:
        """Whether the reports group users by :meth:`assign` (an axis grouped otherwise, or not at all, says no)."""
        return bool(self.group_names(setting))

    def group_baseline(self, setting: Any) -> bool:
        """Whether the server also fits the classifier on the reports of the largest-budget group alone (a baseline:
        what the other groups add; ``accuracy_top_tier_only``)."""
        return False

    def summary(self, setting: Any, groups: ServedGroups) -> dict[str, Any]:
        """Entries this axis adds to the run's summary.json."""
        return {}

    def report_lines(self, setting: Any, spec: RunSpec, result: Mapping[str, Any], fmt: Callable[[Any], str]) -> list[str]:
        """This axis's section of the privacy report (markdown lines; none: no section), from the run's summary
        ``result``; ``fmt`` writes a number as the rest of the report does."""
        return []
