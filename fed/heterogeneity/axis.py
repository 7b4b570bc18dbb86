"""What a heterogeneity axis is: a way simulated users differ, declared once and read by every layer.

An axis owns its run options (their defaults, help and parsing), how users are assigned to its
groups (from the run seed, so server and nodes agree), its effect on a node (the run options its
users see, or how their devices encode) or on the server's simulated network (who is online), and
its group labels in the reports. Every hook but :meth:`HeterogeneityAxis.parse` has a default
that does nothing, so an axis implements only what it changes. Simulation only: a real device's
owner and hardware decide what an axis would simulate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from fed.spec.option import Option

if TYPE_CHECKING:
    from fed.spec.run_spec import RunSpec
    from fed.heterogeneity.virtual_clock import VirtualClock


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

    def reported_groups(self, setting: Any) -> bool:
        """Whether the reports group users by :meth:`assign` (an axis grouped otherwise, or not at all, says no)."""
        return bool(self.group_names(setting))
