"""``ldpfed attack RUN_DIR --kind attribute``: what a server learns about the writers from a run's reports."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "Attack a finished run's saved reports (--save-reports) as the server would, with public data only."
KINDS = ("attribute",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """RUN_DIR, the kind of attack and its seed."""
    parser.add_argument("run_dir", type=Path, help="run directory of an ldpfed simulate run with --save-reports")
    parser.add_argument(
        "--kind", choices=KINDS, default="attribute",
        help="attribute: guess each report's source (needs --partition natural, so each user writes from one source)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the attacker's own noise on public data")


def run(args: argparse.Namespace) -> int:
    """Run the attack, print its success next to chance and the run's epsilon, write attack_<kind>.json."""
    import numpy as np

    from fed.assets import build_bundle, default_cache_dir, load_assets, load_public, unpack
    from fed.attribute_attack import attribute_attack
    from fed.config import RunConfig
    from fed.plan import make_plan
    from fed.population import Population

    folder = Path(args.run_dir)
    saved, config_file = folder / "reports.npz", folder / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{folder} is not a run directory (no config.json)")
    if not saved.is_file():
        raise ValueError(f"{folder} has no reports.npz: run ldpfed simulate with --save-reports")
    config = RunConfig.from_mapping(json.loads(config_file.read_text()))
    if config.tiers:
        raise ValueError("the attack needs one randomizer for every report; this run has --tiers")
    population = Population.build(config)
    groups = population.train.groups
    if groups is None or config.partition != "natural":
        raise ValueError("the attribute attack needs each user's source: run with --partition natural on data with sources")
    source_of = np.array([groups[part][0] if len(part) else -1 for part in population.train_parts])
    public = load_public(config)
    if public is None or public.groups is None or public.group_names != population.train.group_names:
        raise ValueError(
            f"the attacker's public data must carry the same sources as the users' ({', '.join(population.train.group_names)})"
        )
    cache = default_cache_dir(config)
    assets = load_assets(unpack(build_bundle(config, public, cache), cache))  # the run's bundle, rebuilt
    plan = make_plan(config, population.train.num_labels, max(max(len(p) for p in population.query_parts), 1))
    data = np.load(saved)
    outcome = attribute_attack(
        data["reports"], source_of[data["users"]], assets.features(public, cache), public.groups, plan.train,
        len(population.train.group_names), np.random.default_rng([args.seed, 23]),
    )
    summary = json.loads((folder / "summary.json").read_text())
    result = {
        "kind": args.kind,
        "attribute": "source (" + ", ".join(population.train.group_names) + ")",
        "success": outcome.success,
        "chance": outcome.chance,
        "reports": outcome.reports,
        "mechanism": config.mechanism,
        "epsilon_sentence_max": summary.get("epsilon_sentence_max"),
    }
    (folder / f"attack_{args.kind}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"{args.kind} attack on {outcome.reports} reports ({config.mechanism}, worst-case sentence epsilon "
        f"{result['epsilon_sentence_max']}): names the {result['attribute']} of {outcome.success:.3f} of them; "
        f"chance {outcome.chance:.3f}"
    )
    return 0
