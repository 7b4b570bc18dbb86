"""Where private reports stop paying: the public-set size crossover of a public-size study (issue 40, item 5).

Reads the study.json that ``ldpfed study CONFIG --report FOLDER`` wrote for a study with one axis of named option
sets that set ``public`` (``none``, ``heldout:N`` in-domain sets, other sources) and one other axis (epsilon), and
writes crossover.md, crossover.json and crossover.png beside it. Per value of the other axis and per seed:

- private alone: the whole-run accuracy of the ``none`` cell (the projection is fixed by --projection-public, so
  it is the same in every cell);
- crossover: the largest in-domain size at which private alone beats public-only at the same seed (0: beaten at
  every size), and the size at which their gap crosses zero after it, interpolated linearly in log size between
  the sizes either side (the grid's largest size when private alone still wins there, the smallest when it never
  wins);
- other sources (e.g. an off-domain set): private alone against their public-only and combined accuracy.

Usage::

    python -m ldpfed.simulations.experiments.public_crossover simulations/reports/studies/sst2_public_size
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ldpfed.fed.configuration.sections import heldout_size
from ldpfed.fed.data.loaders import load_dataset

ARMS = {"private": "private reports alone", "public_only": "public data alone", "combined": "both combined"}
"""The three arms, by their key in crossover.json."""


@dataclass(frozen=True)
class Source:
    """One public set of the study: its option-set name, its size and whether it is in-domain (``heldout:N``)."""

    name: str
    spec: str
    size: int
    in_domain: bool


def sources(sets: dict[str, dict[str, Any]]) -> list[Source]:
    """The study's public sets, smallest first: 'none' (size 0), ``heldout:N`` and other specs (their train split)."""
    found = []
    for name, options in sets.items():
        spec = options["public"]
        held = heldout_size(spec)
        size = 0 if spec == "none" else held if held is not None else len(load_dataset(spec, "train"))
        found.append(Source(name, spec, size, held is not None or spec == "none"))
    return sorted(found, key=lambda s: (not s.in_domain, s.size))


def crossing(sizes: Sequence[int], gaps: Sequence[float]) -> float:
    """The size where ``gaps`` (private minus public-only, by size) turns non-positive after its last positive value,
    log-linearly interpolated between the sizes either side; the last size when the last gap is positive, the first
    when none is."""
    positive = [i for i, gap in enumerate(gaps) if gap > 0]
    if not positive:
        return float(sizes[0])
    i = positive[-1]
    if i == len(gaps) - 1:
        return float(sizes[-1])
    t = gaps[i] / (gaps[i] - gaps[i + 1])
    return float(math.exp(math.log(sizes[i]) + t * (math.log(sizes[i + 1]) - math.log(sizes[i]))))


def spread(values: Sequence[float]) -> dict[str, float]:
    """Mean, min and max."""
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}


def analyse(raw: dict[str, Any]) -> dict[str, Any]:
    """crossover.json's content from a study.json."""
    (axis, sets), = ((a, s) for a, s in raw["option_sets"].items() if all("public" in o for o in s.values()))
    (other,) = [a for a in raw["axes"] if a != axis]
    found = sources(sets)
    grid = [s for s in found if s.in_domain and s.size]
    runs: dict[tuple[Any, str, int], dict[str, float | None]] = {}
    for run in raw["runs"]:
        base = run["baselines"]
        runs[(run["cell"][other], run["cell"][axis], run["seed"])] = {
            "private": run["whole"]["accuracy"], "public_only": base.get("accuracy_public_only"),
            "combined": base.get("accuracy_combined"),
        }
    none = next(s for s in found if s.size == 0)
    result: dict[str, Any] = {"axis": other, "sources": [s.__dict__ for s in found], "values": []}
    for value in raw["axes"][other]:
        seeds = sorted(seed for (v, name, seed) in runs if v == value and name == none.name)
        per_seed = []
        for seed in seeds:
            private = runs[(value, none.name, seed)]["private"]
            public = [runs.get((value, s.name, seed), {}).get("public_only") for s in grid]
            if private is None or any(p is None for p in public):
                continue
            gaps = [private - p for p in public]  # type: ignore[operator]
            wins = [s.size for s, g in zip(grid, gaps) if g > 0]
            per_seed.append({"seed": seed, "private": private, "largest_size_private_wins": max(wins, default=0),
                             "crossing": crossing([s.size for s in grid], gaps)})
        arms = {
            s.name: {arm: [runs[(value, s.name, seed)][arm] for seed in seeds if (value, s.name, seed) in runs]
                     for arm in ("public_only", "combined")}
            for s in found if s.size
        }
        result["values"].append({
            "value": value, "seeds": per_seed,
            "private": spread([p["private"] for p in per_seed]) if per_seed else None,
            "largest_size_private_wins": spread([p["largest_size_private_wins"] for p in per_seed]) if per_seed else None,
            "crossing": spread([p["crossing"] for p in per_seed]) if per_seed else None,
            "arms": {name: {arm: spread([v for v in vals if v is not None]) if any(v is not None for v in vals) else None
                            for arm, vals in by_arm.items()} for name, by_arm in arms.items()},
        })
    return result


def _range(s: dict[str, float] | None, spec: str = ".4f") -> str:
    return "-" if s is None else f"{s['mean']:{spec}} [{s['min']:{spec}}, {s['max']:{spec}}]"


def _value(value: Any) -> str:
    """An axis value as written in the tables (numbers without trailing zeros: epsilon 1, not 1.0)."""
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _crossing_text(seed: dict[str, Any], grid: list[dict[str, Any]]) -> str:
    """A seed's crossing, marked where it is capped at the grid's ends."""
    if seed["largest_size_private_wins"] == 0:
        return f"<={grid[0]['size']}"
    if seed["largest_size_private_wins"] == grid[-1]["size"]:
        return f">={grid[-1]['size']}"
    return f"{seed['crossing']:.0f}"


def markdown(result: dict[str, Any], study: str, command: str) -> str:
    """crossover.md: the crossover per value of the other axis, then every arm by public set."""
    found = [s for s in result["sources"] if s["size"]]
    grid = [s for s in found if s["in_domain"]]
    other = [s for s in found if not s["in_domain"]]
    axis = result["axis"]
    lines = [
        "# Public-set size crossover", "",
        f"From `{study}` (its study.md has the setting and the runs' command). Command: `{command}`.", "",
        f"Per {axis}: private reports alone (the `none` cell; the projection is the same in every cell), and the "
        "largest in-domain public-set size at which they beat the public set alone at the same seed (0: beaten at "
        f"every size of {', '.join(str(s['size']) for s in grid)}), with the size where the gap crosses zero "
        "after that size, interpolated in log size; mean [min, max] over seeds. The interpolation is capped at the grid's ends: a seed "
        f"at which private alone never wins counts as {grid[0]['size']} (so the figure is an upper bound there; "
        f"per seed written <={grid[0]['size']}), one at which it always wins as {grid[-1]['size']} (>=). Public-only "
        "and combined use the run's projection, whose dimension follows epsilon (study.md), so public-only differs "
        "by epsilon too.", "",
        f"| {axis} | private alone | largest size where private alone wins | crossing (interpolated) | per seed (largest, crossing) |",
        "|---|---|---|---|---|",
    ]
    for entry in result["values"]:
        seeds = "; ".join(f"seed {p['seed']}: {p['largest_size_private_wins']}, {_crossing_text(p, grid)}" for p in entry["seeds"])
        lines.append(f"| {_value(entry['value'])} | {_range(entry['private'])} | {_range(entry['largest_size_private_wins'], '.0f')} "
                     f"| {_range(entry['crossing'], '.0f')} | {seeds} |")
    lines += ["", f"Every arm by public set (mean [min, max] over seeds; {ARMS['combined']}: NoiseAwareLDA.add_public):", "",
              f"| {axis} | public set | size | {ARMS['public_only']} | {ARMS['combined']} |", "|---|---|---|---|---|"]
    for entry in result["values"]:
        for s in grid + other:
            arms = entry["arms"][s["name"]]
            where = "in-domain" if s["in_domain"] else f"other source: {Path(s['spec']).name}"
            lines.append(f"| {_value(entry['value'])} | {where} | {s['size']} | {_range(arms['public_only'])} | {_range(arms['combined'])} |")
    lines += ["", "![crossover](crossover.png)", ""]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Accuracy against the public set's size, one panel per value of the other axis, one line per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = [s for s in result["sources"] if s["size"]]
    grid = [s for s in found if s["in_domain"]]
    other = [s for s in found if not s["in_domain"]]
    values = result["values"]
    fig, axes = plt.subplots(1, len(values), figsize=(4.2 * len(values), 4), sharey=True, squeeze=False)
    for ax, entry in zip(axes[0], values):
        sizes = [s["size"] for s in grid]
        if entry["private"] is not None:
            p = entry["private"]
            ax.axhline(p["mean"], color="C0", label=ARMS["private"])
            ax.axhspan(p["min"], p["max"], color="C0", alpha=0.15)
        for n, arm in enumerate(("public_only", "combined"), start=1):
            points = [entry["arms"][s["name"]][arm] for s in grid]
            shown = [(x, q) for x, q in zip(sizes, points) if q is not None]
            if shown:
                ax.errorbar([x for x, _ in shown], [q["mean"] for _, q in shown],
                            yerr=[[q["mean"] - q["min"] for _, q in shown], [q["max"] - q["mean"] for _, q in shown]],
                            marker="o", capsize=3, color=f"C{n}", label=f"{ARMS[arm]} (in-domain)")
            for s in other:
                q = entry["arms"][s["name"]][arm]
                if q is not None:
                    ax.errorbar([s["size"]], [q["mean"]], yerr=[[q["mean"] - q["min"]], [q["max"] - q["mean"]]], marker="s",
                                mfc="white", capsize=3, color=f"C{n}", linestyle="none",
                                label=f"{ARMS[arm]} ({Path(s['spec']).name})")
        ax.set_xscale("log")
        ax.set_xlabel("labelled public sentences")
        ax.set_title(f"{result['axis']} {_value(entry['value'])}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("accuracy (mean over seeds; min-max)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> int:
    """Write crossover.md, .json and .png into the report folder ``argv[0]``."""
    folder = Path(argv[0])
    raw = json.loads((folder / "study.json").read_text())
    result = analyse(raw)
    command = f"python -m ldpfed.simulations.experiments.public_crossover {folder}"
    (folder / "crossover.json").write_text(json.dumps(result, indent=1) + "\n")
    (folder / "crossover.md").write_text(markdown(result, raw["study"], command))
    plot(result, folder / "crossover.png")
    print((folder / "crossover.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
