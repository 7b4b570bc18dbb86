"""The run's PNG plots: accuracy per round, per-user epsilon, and per-user accuracy by group (simulation only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.fed.reporting.groups import Axis


def _figure(rows: int = 1, cols: int = 1) -> tuple[Any, Any]:
    """A new figure and its axes (one, or a grid of panels), drawn off-screen (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, cols, figsize=(6 * cols, 4 * rows), squeeze=rows * cols == 1)


MARGINS = {"left": 1.05, "right": 0.2, "bottom": 0.55, "top": 0.35, "between_rows": 0.75, "between_cols": 0.75}
"""Inches around and between panels: room for tick labels (a log axis's 4 x 10^-1 the widest), axis labels
and a panel's title. Fixed, where matplotlib's tight layout would lay out every figure's texts once more to
measure them (a third of a plot's CPU)."""


def _margins(fig: Any) -> None:
    """The :data:`MARGINS` of ``fig``, as fractions of its size."""
    width, height = fig.get_size_inches()
    rows, cols = fig.axes[0].get_subplotspec().get_gridspec().get_geometry()
    panel_width = (width - MARGINS["left"] - MARGINS["right"] - (cols - 1) * MARGINS["between_cols"]) / cols
    panel_height = (height - MARGINS["bottom"] - MARGINS["top"] - (rows - 1) * MARGINS["between_rows"]) / rows
    fig.subplots_adjust(
        left=MARGINS["left"] / width, right=1 - MARGINS["right"] / width,
        bottom=MARGINS["bottom"] / height, top=1 - MARGINS["top"] / height,
        wspace=MARGINS["between_cols"] / panel_width, hspace=MARGINS["between_rows"] / panel_height,
    )


def _save(fig: Any, ax: Any, path: Path) -> Path:
    """Legend and grid on every panel, the margins, then write the PNG and free the figure."""
    import matplotlib.pyplot as plt

    for panel in np.atleast_1d(ax).ravel():
        if panel.get_legend_handles_labels()[0]:
            panel.legend(fontsize=8)
        panel.grid(alpha=0.3)
    _margins(fig)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_accuracy(rounds: list[dict[str, Any]], path: Path) -> Path:
    """Local-inference accuracy of each classifier against the round, or against virtual time (time to
    accuracy) when the run has a virtual clock (--device-speed); rounds that did not evaluate
    (--evaluate-every: no accuracy key) are left out."""
    fig, ax = _figure()
    clock = bool(rounds) and all(r.get("virtual_seconds") is not None for r in rounds)
    x = [r["virtual_seconds"] if clock else r["round"] for r in rounds]
    for key, label in (
        ("accuracy_local", "private reports (local inference)"),
        ("accuracy_local_denoised", "private reports, on denoised query releases (snd)"),
        ("accuracy_nonprivate", "non-private upper bound (simulation only)"),
        ("accuracy_public_only", "public data only"),
        ("accuracy_combined", "private reports and public data combined"),
        ("accuracy_top_tier_only", "largest-budget tier's reports only"),
    ):
        shown = [(at, r[key]) for at, r in zip(x, rounds) if key in r]
        if any(v is not None for _, v in shown):
            ax.plot([at for at, _ in shown], [np.nan if v is None else v for _, v in shown], marker="o", label=label)
    ax.set_xlabel("virtual seconds at the round's end" if clock else "round")
    ax.set_ylabel("accuracy on users' query records")
    return _save(fig, ax, path)


def plot_epsilon(sentence: np.ndarray, user: np.ndarray, budget: float, path: Path) -> Path:
    """Per-user worst-case epsilon (sentence and user level), users sorted."""
    fig, ax = _figure()
    order = np.argsort(user)
    ax.plot(sentence[order], ".", label="sentence level (max over the user's records)")
    ax.plot(user[order], ".", label="user level (all the user's releases)")
    if np.isfinite(budget):
        ax.axhline(budget, color="grey", linestyle="--", label="sentence budget")
    ax.set_xlabel("user (sorted by user-level epsilon)")
    ax.set_ylabel("worst-case epsilon")
    values = np.concatenate([np.asarray(sentence, float), np.asarray(user, float)])
    if ((values > 0) & np.isfinite(values)).any():
        ax.set_yscale("log")
    elif np.isinf(values).any():
        ax.set_title("worst-case epsilon = inf (no differential-privacy guarantee)")
    return _save(fig, ax, path)


def plot_accuracy_cdf(accuracy: np.ndarray, axes: list[Axis], path: Path) -> Path:
    """Empirical CDF of per-user accuracy (by user id; NaN: no queries), one panel per grouping, one line per group."""
    fig, panels = _figure(2, (len(axes) + 1) // 2)
    for panel, axis in zip(panels.ravel(), axes):
        for group, members in axis.members():
            values = np.sort(accuracy[members & np.isfinite(accuracy)])
            if values.size:
                share = np.arange(values.size + 1) / values.size  # from 0 below the lowest accuracy
                panel.step(np.r_[values[0], values], share, where="post", label=f"{group} ({values.size})")
        panel.set_title(f"by {axis.name}", fontsize=10)
        panel.set_xlabel("user's accuracy on its own queries (simulation only)")
        panel.set_ylabel("share of users")
    for panel in panels.ravel()[len(axes):]:
        panel.set_visible(False)
    return _save(fig, panels, path)


def plot_accuracy_epsilon(accuracy: np.ndarray, epsilon: np.ndarray, tiers: Axis, path: Path) -> Path:
    """Each user's accuracy against its worst-case sentence-level epsilon, coloured by tier; tier means as large marks."""
    fig, ax = _figure()
    for group, members in tiers.members():
        keep = members & np.isfinite(accuracy) & np.isfinite(epsilon)
        if keep.any():
            (dots,) = ax.plot(epsilon[keep], accuracy[keep], ".", alpha=0.4, label=f"{group} ({int(keep.sum())} users)")
            ax.plot(np.median(epsilon[keep]), accuracy[keep].mean(), "D", color=dots.get_color(), markersize=9, markeredgecolor="black")
    ax.set_xlabel("user's worst-case sentence-level epsilon spent")
    ax.set_ylabel("user's accuracy on its own queries (simulation only)")
    ax.set_title("per user; diamonds: tier mean accuracy at its median epsilon", fontsize=9)
    return _save(fig, ax, path)
