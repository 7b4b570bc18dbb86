"""The run's PNG plots: accuracy per round and per-user epsilon."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def plot_accuracy(rounds: list[dict[str, Any]], path: Path) -> Path:
    """Local-inference accuracy of each classifier against the round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
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
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_epsilon(sentence: np.ndarray, user: np.ndarray, budget: float, path: Path) -> Path:
    """Per-user worst-case epsilon (sentence and user level), users sorted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
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
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
