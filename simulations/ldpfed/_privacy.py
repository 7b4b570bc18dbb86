"""privacy(): every accountant's epsilon for a Gaussian schedule, side by side, and calibrations."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ldpfed.fed.privacy.accountants import AccountantFigure, Schedule
    from ldpfed.fed.privacy.accountants.calibration import Calibration


@dataclass(frozen=True)
class PrivacyResult:
    """What :func:`ldpfed.privacy` computed.

    Attributes
    ----------
    mechanism : str
        The randomizer ('gaussian').
    schedule : Schedule or None
        The schedule (noise multiplier, p, q, steps, delta, ...); None for a calibration alone.
    figures : tuple[AccountantFigure, ...]
        Every accountant's figure for the schedule, each with its kind (bound or estimate) and assumption.
    calibrations : tuple[Calibration, ...]
        The noise multiplier per step meeting the target epsilon under each accountant (``calibrate``).
    sigma, sensitivity : float or None
        The noise scale and replace-one diameter, when given.
    plot : Path or None
        The plot of epsilon against steps, when written.
    """

    mechanism: str
    schedule: Schedule | None
    figures: tuple[AccountantFigure, ...] = ()
    calibrations: tuple[Calibration, ...] = ()
    sigma: float | None = None
    sensitivity: float | None = None
    plot: Path | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        """What ``ldpfed privacy --json`` prints."""
        output: dict[str, Any] = {"mechanism": self.mechanism}
        if self.schedule is not None:
            output["schedule"] = {**self.schedule.to_json(), "sigma": self.sigma, "sensitivity": self.sensitivity}
            output["figures"] = [f.to_json() for f in self.figures]
        if self.calibrations:
            output["calibration"] = [c.to_json() for c in self.calibrations]
            if self.sensitivity is not None:
                for entry in output["calibration"]:
                    entry["sigma"] = entry["noise_multiplier"] * self.sensitivity
        if self.plot is not None:
            output["plot"] = str(self.plot)
        return output


def privacy(
    *,
    p: float,
    steps: int,
    noise_multiplier: float | None = None,
    sigma: float | None = None,
    sensitivity: float | None = None,
    q: float = 1.0,
    delta: float = 1e-5,
    releases: int | None = None,
    dataset_size: int | None = None,
    calibrate: float | None = None,
    plot: str | Path | None = None,
    mechanism: str = "gaussian",
) -> PrivacyResult:
    """Epsilon of a Gaussian schedule under every accountant, as ``ldpfed privacy`` computes it.

    Parameters
    ----------
    p : float
        Sampling rate per step.
    steps : int
        Number of steps T.
    noise_multiplier : float, optional
        sigma / sensitivity (or give ``sigma`` with ``sensitivity``).
    q : float
        Inference true-data rate (seed 000 eq. 9).
    delta : float
        Delta of every figure.
    releases : int, optional
        The record's actual number of releases (worst-case ledger).
    dataset_size : int, optional
        n, for the figures of fixed-size sampling without replacement.
    calibrate : float, optional
        Also find the noise multiplier per step meeting this epsilon under each accountant.
    plot : str or Path, optional
        Write epsilon against steps (1..T) for every accountant there.
    """
    from ldpfed.fed.privacy.accountants import Schedule, all_figures
    from ldpfed.fed.privacy.accountants.calibration import ACCOUNTANTS, calibrate_noise_multiplier

    if mechanism != "gaussian":
        raise ValueError(f"mechanism {mechanism!r}: the accountants here take the gaussian mechanism only")
    if noise_multiplier is not None and sigma is not None:
        raise ValueError("give --noise-multiplier or --sigma, not both")
    multiplier = _noise_multiplier(noise_multiplier, sigma, sensitivity)
    schedule = None
    figures: tuple[AccountantFigure, ...] = ()
    if multiplier is not None:
        schedule = Schedule(multiplier, p, steps, delta, q=q, releases=releases, dataset_size=dataset_size)
        figures = tuple(all_figures(schedule))
    elif calibrate is None:
        raise ValueError("give --noise-multiplier, or --sigma with --sensitivity, or --calibrate EPSILON")
    calibrations: tuple[Calibration, ...] = ()
    if calibrate is not None:
        calibrations = tuple(
            calibrate_noise_multiplier(name, calibrate, delta, steps, p, q, releases) for name in ACCOUNTANTS
        )
    written = None
    if plot:
        if schedule is None:
            raise ValueError("--plot needs --noise-multiplier or --sigma")
        from ldpfed.simulations.commands.privacy import plot_schedule

        written = plot_schedule(schedule, plot)
    return PrivacyResult(mechanism, schedule, figures, calibrations, sigma, sensitivity, written)


def _noise_multiplier(noise_multiplier: float | None, sigma: float | None, sensitivity: float | None) -> float | None:
    if sigma is None:
        if sensitivity is not None and noise_multiplier is not None:
            raise ValueError("--sensitivity goes with --sigma, not --noise-multiplier")
        return noise_multiplier
    if sensitivity is None:
        raise ValueError("--sigma needs --sensitivity (the replace-one diameter, 2C for clip C)")
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise ValueError(f"--sensitivity must be a positive finite number, got {sensitivity!r}")
    return sigma / sensitivity
