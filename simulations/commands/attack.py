"""``ldpfed attack RUN_DIR --kind K``: what a server learns from a run's reports, next to chance and epsilon.

The attacker is the server: it knows the run's randomizer (it asked for it) and holds the run's
public data. ``attribute`` attacks the reports the run saved (--save-reports). The other kinds
need to know which record each report came from to score the attack, which the saved reports
do not say (a server cannot link a report to its record), so they release the run's own
training records once more through the run's randomizer, with fresh noise: reports distributed
exactly as the run's, with the record known to the scorer (never to the attack).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HELP = "Attack a finished run as its server would, with public data only: success next to chance and epsilon."
KINDS = ("attribute", "inversion", "membership", "reconstruction", "mutual-information")
KIND_HELP = {
    "attribute": "name each saved report's source (needs --save-reports and --partition natural)",
    "inversion": "name the words of each record from its report (top-5 F1), learned on public data",
    "membership": "tell the server classifier's training records from others (AUC)",
    "reconstruction": "name the records a mixed report holds (texthide, dpie-*; top-1)",
    "mutual-information": "kNN estimate of I(clean; released) in nats (additive-noise mechanisms)",
}


@dataclass(frozen=True)
class AttackContext:
    """What the attacker (and, for scoring, the experimenter) has for one run."""

    folder: Path
    config: Any
    population: Any
    public: Any
    public_x: np.ndarray
    train_x: np.ndarray
    plan: Any
    rng: np.random.Generator


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """RUN_DIR, the kind of attack and its seed."""
    parser.add_argument("run_dir", type=Path, help="run directory of an ldpfed simulate run")
    parser.add_argument(
        "--kind", choices=KINDS, default="attribute",
        help="; ".join(f"{k}: {v}" for k, v in KIND_HELP.items()),
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the attacker's own noise and of the replayed releases")
    parser.add_argument("--report", action="store_true", help="also add the outcome to the run's privacy_report.md")


def run(args: argparse.Namespace) -> int:
    """Run the attack, print its success next to chance and the run's epsilon, write attack_<kind>.json."""
    from fed.runtime.assets import build_bundle, default_cache_dir, load_assets, load_public, unpack
    from fed.spec.option import flag
    from fed.spec.run_spec import RunSpec
    from fed.spec.plan import make_plan
    from fed.data.population import Population

    folder = Path(args.run_dir)
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{folder} is not a run directory (no config.json)")
    config = RunSpec.from_mapping(json.loads(config_file.read_text()))
    grouping = [flag(name) for name, value, default in config.heterogeneity.grouping_options() if value != default]
    if grouping:  # e.g. privacy tiers: each group's users report with its own randomizer
        raise ValueError(f"the attack needs one randomizer for every report; this run has {' '.join(grouping)}")
    if args.kind == "attribute" and not (folder / "reports.npz").is_file():
        raise ValueError(f"{folder} has no reports.npz: run ldpfed simulate with --save-reports")
    population = Population.build(config.data, config.seed)
    public = load_public(config)
    if public is None:
        raise ValueError("the attacker needs the run's public data; this run has --public none")
    cache = default_cache_dir(config)
    assets = load_assets(unpack(build_bundle(config, public, cache), cache))  # the run's bundle, rebuilt
    plan = make_plan(config, population.train.num_labels, max(max(len(p) for p in population.query_parts), 1))
    context = AttackContext(
        folder, config, population, public, assets.features(public, cache), assets.features(population.train, cache),
        plan, np.random.default_rng([args.seed, 23]),
    )
    result = {"kind": args.kind, **ATTACKS[args.kind](context)}
    summary = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").is_file() else {}
    result |= {"mechanism": config.privacy.mechanism, "epsilon_sentence_max": summary.get("epsilon_sentence_max")}
    (folder / f"attack_{args.kind}.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.report:
        add_to_report(folder / "privacy_report.md", result)
    print(
        f"{args.kind} attack ({config.privacy.mechanism}, worst-case sentence epsilon {result['epsilon_sentence_max']}): "
        f"{result['measure']} {result['success']:.3f}; chance {result['chance']:.3f}"
    )
    return 0


def add_to_report(path: Path, result: dict[str, Any]) -> None:
    """Add (or replace) the section of this kind of attack in a run's privacy report."""
    title = f"## Attack: {result['kind']}"
    body = (
        f"{title}\n\nThe server, with the run's public data only: {KIND_HELP[result['kind']]}. "
        f"{result['measure']}: **{result['success']:.3f}**, chance {result['chance']:.3f}; mechanism {result['mechanism']}, "
        f"worst-case sentence epsilon {result['epsilon_sentence_max']}. "
        f"(`ldpfed attack {path.parent} --kind {result['kind']}`; attack_{result['kind']}.json)\n"
    )
    text = path.read_text() if path.is_file() else ""
    if title in text:
        start = text.index(title)
        end = text.find("\n## ", start + len(title))
        text = text[:start] + body + (text[end + 1 :] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + body
    path.write_text(text)


def _attribute(c: AttackContext) -> dict[str, Any]:
    from fed.attacks.attribute import attribute_attack

    groups = c.population.train.groups
    if groups is None or c.config.data.partition != "natural":
        raise ValueError("the attribute attack needs each user's source: run with --partition natural on data with sources")
    if c.public.groups is None or c.public.group_names != c.population.train.group_names:
        raise ValueError(
            f"the attacker's public data must carry the same sources as the users' ({', '.join(c.population.train.group_names)})"
        )
    source_of = np.array([groups[part][0] if len(part) else -1 for part in c.population.train_parts])
    data = np.load(c.folder / "reports.npz")
    outcome = attribute_attack(
        data["reports"], source_of[data["users"]], c.public_x, c.public.groups, c.plan.train,
        len(c.population.train.group_names), c.rng,
    )
    return {"measure": "share of sources named", "attribute": "source (" + ", ".join(c.population.train.group_names) + ")",
            "success": outcome.success, "chance": outcome.chance, "reports": outcome.reports}


def _single_record(c: AttackContext, kind: str) -> None:
    if c.plan.train.records_per_report != 1:
        raise ValueError(f"{c.config.privacy.mechanism} mixes records in one report; the {kind} attack scores one record per report")


def _inversion(c: AttackContext) -> dict[str, Any]:
    from fed.attacks.inversion import STOPWORDS, learned_inversion

    _single_record(c, "inversion")
    reports = c.plan.train.release(c.train_x, c.rng)
    outcome = learned_inversion(
        reports, list(c.population.train.texts), c.public_x, list(c.public.texts), c.plan.train, c.rng, stopwords=STOPWORDS
    )
    return {"measure": f"top-{outcome.k} word F1", "success": outcome.success, "chance": outcome.chance,
            "hit_rate": outcome.hit_rate, "chance_hit_rate": outcome.chance_hit_rate, "reports": outcome.reports}


def _membership(c: AttackContext) -> dict[str, Any]:
    from fed.attacks.membership import membership_game

    x, y = c.train_x, c.population.train.labels
    members = max(2, min(40, len(x) // 4))  # few members, so the classifier can overfit them (the leak measured)
    outcome = membership_game(x, y, c.population.train.num_labels, c.plan.train, members, c.rng, c.config.evaluation.shrinkage, trials=10)
    return {"measure": "AUC", "success": outcome.success, "chance": outcome.chance, "accuracy": outcome.accuracy,
            "members": outcome.members, "non_members": outcome.non_members}


def _reconstruction(c: AttackContext) -> dict[str, Any]:
    from fed.attacks.texthide import reconstruction_game

    if c.plan.train.records_per_report == 1:
        raise ValueError(f"{c.config.privacy.mechanism} does not mix records; reconstruction attacks texthide and dpie-*")
    batch = max(c.plan.train.records_per_report, 32)
    groups = min(len(c.train_x) // (2 * batch), 32)
    if groups < 1:
        raise ValueError(f"the run has {len(c.train_x)} training records, too few for batches of {batch} and distractors")
    x = c.train_x[: groups * batch].reshape(groups, batch, -1)
    outcome = reconstruction_game(x, c.train_x[groups * batch :], c.public_x, c.plan.train, c.rng)
    return {"measure": "top-1 share of mixed records named", "success": outcome.success, "chance": outcome.chance,
            "recall": outcome.recall, "reports": outcome.reports, "candidates": outcome.candidates}


def _mutual_information(c: AttackContext) -> dict[str, Any]:
    from fed.attacks.mutual_information import randomizer_mutual_information

    value = randomizer_mutual_information(c.train_x, c.plan.train, c.rng)
    return {"measure": "I(clean; released), nats", "success": value, "chance": 0.0, "records": int(len(c.train_x))}


ATTACKS = {
    "attribute": _attribute,
    "inversion": _inversion,
    "membership": _membership,
    "reconstruction": _reconstruction,
    "mutual-information": _mutual_information,
}
