"""Every accountant's figure for one schedule, each with its kind and assumption.

Only the worst-case ledger is enforced (design.md section 2); the amplified figures assume the
server cannot link a report to its record and are reported beside it. Modules, one per family:
``worst_case``, ``clt`` (seed 000 eqs. 8 and 9, an estimate), ``composition_baselines`` (basic
and advanced composition), ``amplified`` (dp_accounting PLD and RDP) and ``prv``.

With randomized-response labels (``Schedule.labels``) every figure composes each release's
label event, except where an accountant cannot (GDP + CLT, RDP, PRV): those cover the reports
alone and say so in their name and ``labels_excluded``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ldpfed.fed.privacy.accountants import amplified, clt, composition_baselines, prv, worst_case
from ldpfed.fed.privacy.accountants.base import AccountantFigure, Schedule

__all__ = ["AccountantFigure", "Schedule", "all_figures", "figures_over_steps"]


def all_figures(schedule: Schedule, include_prv: bool = True) -> list[AccountantFigure]:
    """Every accountant's figure for ``schedule``: worst case, CLT, PLD, RDP, PRV, baselines.

    The CLT figure's note gains how far it lies below (or above) the PLD upper bound for this schedule
    (when both cover the same releases: the CLT leaves labels out, the PLD bound does not).
    """
    result = [*worst_case.figures(schedule), clt.figure(schedule), *amplified.figures(schedule)]
    if include_prv:
        result += prv.figures(schedule)
    result += composition_baselines.figures(schedule)
    return [_with_clt_gap(f, result) for f in result]


def figures_over_steps(
    schedule: Schedule, steps: Sequence[int], include_prv: bool = True
) -> dict[str, list[AccountantFigure]]:
    """Each accountant's figures, keyed by ``key``, for the schedule run for each of ``steps``."""
    curves: dict[str, list[AccountantFigure]] = {}
    for t in steps:
        for figure in all_figures(replace(schedule, steps=int(t), releases=None), include_prv):
            curves.setdefault(figure.key, []).append(figure)
    return curves


def _with_clt_gap(figure: AccountantFigure, figures: list[AccountantFigure]) -> AccountantFigure:
    pld = next(f for f in figures if f.key == "pld")
    if figure.key != "clt" or not pld.epsilon or figure.epsilon is None or figure.labels_excluded:
        return figure
    gap = figure.epsilon / pld.epsilon - 1
    side = "above" if gap > 0 else "below"
    return replace(figure, note=f"{figure.note}; here {abs(gap):.1%} {side} the PLD upper bound")
