"""The run's PNG plots: accuracy per round and per-user epsilon."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _figure() -> tuple[Any, Any]:
    """A new figure and axes, drawn off-screen (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6, 4))


def _save(fig: Any, ax: Any, path: Path) -> Path:
    """Legend and grid, then write the PNG and free the figure."""
    import matplotlib.pyplot as plt

    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_accuracy(rounds: list[dict[str, Any]], path: Path) -> Path:
    """Local-inference accuracy of each classifier against the round."""
    fig, ax = _figure()
    x = [r["round"] for r in rounds]
    for key, label in (
        ("accuracy_local", "private reports (local inference)"),
        ("accuracy_nonprivate", "non-private upper bound (simulation only)"),
        ("accuracy_public_only", "public data only"),
    ):
        y = [r.get(key) for r in rounds]
        if any(v is not None for v in y):
            ax.plot(x, [np.nan if v is None else v for v in y], marker="o", label=label)
    ax.set_xlabel("round")
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
