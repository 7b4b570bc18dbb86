"""The PRV accountant (Gopi, Lee and Wutschitz 2021; seed 000's Table 6 upper bound).

Uses the ``prv-accountant`` package, which gives a lower bound, an estimate and an upper bound
on epsilon for the Poisson-sampled Gaussian (add-or-remove). It applies to Poisson sampling
only, and has no sampled randomized response: with randomized-response labels the figures cover
the reports alone and say so. When the package is missing or fails, the figures say so instead
of giving numbers.
"""

from __future__ import annotations

from ldpfed.fed.privacy.accountants.base import (
    UNLINKABLE_POISSON,
    AccountantFigure,
    Kind,
    Schedule,
    package_version,
    reports_only,
)

VERSION = package_version("prv-accountant")
EPS_ERROR = 0.01
DELTA_ERROR_FRACTION = 1e-3
ROWS: tuple[tuple[str, str, Kind], ...] = (
    ("prv_lower", "PRV accountant, lower", "lower bound"),
    ("prv_estimate", "PRV accountant, estimate", "estimate"),
    ("prv_upper", "PRV accountant, upper", "upper bound"),
)
NO_LABELS = (
    "prv-accountant has the Poisson-subsampled Gaussian but no sampled randomized response, so it cannot "
    "compose a report sampled together with its label"
)


def epsilons(schedule: Schedule) -> tuple[float, float, float]:
    """(lower, estimate, upper) epsilon of the Poisson-sampled schedule.

    Raises
    ------
    ImportError
        When ``prv-accountant`` is not installed.
    """
    from prv_accountant import GaussianMechanism, PoissonSubsampledGaussianMechanism, PRVAccountant

    if schedule.rate == 1:
        prv = GaussianMechanism(noise_multiplier=schedule.noise_multiplier)
    else:
        prv = PoissonSubsampledGaussianMechanism(
            sampling_probability=schedule.rate, noise_multiplier=schedule.noise_multiplier
        )
    accountant = PRVAccountant(
        prvs=[prv],
        max_self_compositions=[schedule.steps],
        eps_error=EPS_ERROR,
        delta_error=DELTA_ERROR_FRACTION * schedule.delta,
    )
    low, estimate, high = accountant.compute_epsilon(delta=schedule.delta, num_self_compositions=[schedule.steps])
    return float(low), float(estimate), float(high)


def figures(schedule: Schedule) -> list[AccountantFigure]:
    """Lower bound, estimate and upper bound (reports only), or three 'unavailable' entries with the reason."""
    parameters = {
        "noise_multiplier": schedule.noise_multiplier,
        "rate": schedule.rate,
        "steps": schedule.steps,
        "eps_error": EPS_ERROR,
        "delta_error": DELTA_ERROR_FRACTION * schedule.delta,
    }
    values: tuple[float | None, ...] = (None, None, None)
    reason = None
    try:
        values = epsilons(schedule)
    except ImportError as error:
        reason = f"prv-accountant is not installed ({error}); pip install prv-accountant"
    except (ValueError, FloatingPointError, RuntimeError, AssertionError) as error:
        reason = f"prv-accountant failed on this schedule: {type(error).__name__}: {error}"
    return [
        reports_only(
            AccountantFigure(
                key=key,
                name=name,
                version=VERSION,
                kind=kind,
                epsilon=value,
                delta=schedule.delta,
                assumption=UNLINKABLE_POISSON,
                parameters=parameters,
                unavailable=reason,
            ),
            schedule,
            NO_LABELS,
        )
        for (key, name, kind), value in zip(ROWS, values, strict=True)
    ]
