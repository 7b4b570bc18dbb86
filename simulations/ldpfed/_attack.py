"""attack(): what a server learns from a finished run's reports, next to chance and epsilon."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.fed.runtime.threads import limit_blas_threads
from ldpfed._run import Run

KINDS = ("attribute", "inversion", "membership", "reconstruction", "mutual-information")
KIND_HELP = {
    "attribute": "name each saved report's source (needs --save-reports and --partition natural)",
    "inversion": "name the words of each record from its report (top-5 F1), learned on public data",
    "membership": "tell the server classifier's training records from others (AUC)",
    "reconstruction": "name the records a mixed report holds (texthide, dpie-*; top-1)",
    "mutual-information": "kNN estimate of I(clean; released) in nats (additive-noise mechanisms)",
}

DEFAULT_KIND = (
    "attribute on the reports a run saved when its users were split by source (--save-reports, --partition "
    "natural), else reconstruction when its randomizer mixes records in a report, else inversion"
)
"""Which attack a run gets when none is named (:func:`default_kind`)."""


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


CORE = ("kind", "measure", "success", "chance", "mechanism", "epsilon_sentence_max")
"""The outcome's keys every kind of attack has; the others are its details."""


@dataclass(frozen=True)
class AttackResult:
    """The outcome of one attack on one run (also written to the run's attack_<kind>.json).

    Attributes
    ----------
    kind : str
        The attack (ldpfed attack --kind).
    measure : str
        What ``success`` measures (e.g. 'AUC', 'top-5 word F1').
    success : float
        The attack's success.
    chance : float
        The same measure for a guess without the reports.
    mechanism : str
        The run's randomizer.
    epsilon_sentence_max : float or None
        The run's worst-case sentence-level epsilon (summary.json).
    details : Mapping[str, Any]
        The kind's other figures (e.g. hit rates, numbers of reports).
    path : Path
        The attack_<kind>.json written.
    """

    kind: str
    measure: str
    success: float
    chance: float
    mechanism: str
    epsilon_sentence_max: float | None
    details: Mapping[str, Any]
    path: Path


def default_kind(config: Any, folder: Path, records_per_report: int) -> str:
    """The attack a run gets when none is named, one that applies to it (:data:`DEFAULT_KIND`)."""
    if config.data.partition == "natural" and (folder / "reports.npz").is_file():
        return "attribute"
    return "inversion" if records_per_report == 1 else "reconstruction"


def attack(run: Run | str | Path, kind: str | None = None, *, seed: int = 0, report: bool = False) -> AttackResult:
    """Attack a finished run as its server would, with public data only, as ``ldpfed attack`` does.

    Parameters
    ----------
    run : Run, str or Path
        The run (or its run directory).
    kind : str, optional
        attribute, inversion, membership, reconstruction or mutual-information (``ldpfed attack --help``);
        by default one that applies to the run (:func:`default_kind`).
    seed : int
        Seed of the attacker's own noise and of the replayed releases.
    report : bool
        Also add the outcome to the run's privacy_report.md.

    Raises
    ------
    ValueError
        Naming why the run cannot be attacked this way.
    """
    limit_blas_threads()
    from ldpfed.fed.data.population import Population
    from ldpfed.fed.runtime.assets import build_bundle, default_cache_dir, load_assets, load_public, projection_data, unpack
    from ldpfed.fed.configuration.option import flag
    from ldpfed.fed.configuration.plan import make_plan
    from ldpfed.fed.configuration.run_spec import RunSpec

    folder = run.path if isinstance(run, Run) else Path(run)
    if kind is not None and kind not in ATTACKS:
        raise ValueError(f"unknown attack {kind!r}; kinds: {', '.join(ATTACKS)}")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{folder} is not a run directory (no config.json)")
    config = RunSpec.from_mapping(json.loads(config_file.read_text()))
    grouping = [flag(name) for name, value, default in config.heterogeneity.grouping_options() if value != default]
    if grouping:  # e.g. privacy tiers: each group's users report with its own randomizer
        raise ValueError(f"the attack needs one randomizer for every report; this run has {' '.join(grouping)}")
    if kind == "attribute" and not (folder / "reports.npz").is_file():
        raise ValueError(f"{folder} has no reports.npz: run ldpfed simulate with --save-reports")
    population = Population.build(config.data, config.seed, default_cache_dir(config))
    public = load_public(config)
    if public is None:
        raise ValueError("the attacker needs the run's public data; this run has --public none")
    cache = default_cache_dir(config)
    bundle = build_bundle(config, public, cache, projection=projection_data(config, public))  # the run's, rebuilt
    assets = load_assets(unpack(bundle, cache))
    plan = make_plan(config, population.train.num_labels, max(max(len(p) for p in population.query_parts), 1))
    kind = kind or default_kind(config, folder, plan.train.records_per_report)
    context = AttackContext(
        folder, config, population, public, assets.features(public, cache), assets.features(population.train, cache),
        plan, np.random.default_rng([seed, 23]),
    )
    result = {"kind": kind, **ATTACKS[kind](context)}
    summary = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").is_file() else {}
    result |= {"mechanism": config.privacy.mechanism, "epsilon_sentence_max": summary.get("epsilon_sentence_max")}
    path = folder / f"attack_{kind}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    if report:
        add_to_report(folder / "privacy_report.md", result)
    details = {key: value for key, value in result.items() if key not in CORE}
    return AttackResult(
        kind, result["measure"], result["success"], result["chance"], result["mechanism"], result["epsilon_sentence_max"],
        details, path,
    )


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
    from ldpfed.fed.attacks.attribute import attribute_attack

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
    from ldpfed.fed.attacks.inversion import STOPWORDS, learned_inversion

    _single_record(c, "inversion")
    reports = c.plan.train.release(c.train_x, c.rng)
    outcome = learned_inversion(
        reports, list(c.population.train.texts), c.public_x, list(c.public.texts), c.plan.train, c.rng, stopwords=STOPWORDS
    )
    return {"measure": f"top-{outcome.k} word F1", "success": outcome.success, "chance": outcome.chance,
            "hit_rate": outcome.hit_rate, "chance_hit_rate": outcome.chance_hit_rate, "reports": outcome.reports}


def _membership(c: AttackContext) -> dict[str, Any]:
    from ldpfed.fed.attacks.membership import membership_game

    x, y = c.train_x, c.population.train.labels
    members = max(2, min(40, len(x) // 4))  # few members, so the classifier can overfit them (the leak measured)
    outcome = membership_game(x, y, c.population.train.num_labels, c.plan.train, members, c.rng, c.config.evaluation.shrinkage, trials=10)
    return {"measure": "AUC", "success": outcome.success, "chance": outcome.chance, "accuracy": outcome.accuracy,
            "members": outcome.members, "non_members": outcome.non_members}


def _reconstruction(c: AttackContext) -> dict[str, Any]:
    from ldpfed.fed.attacks.texthide import reconstruction_game

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
    from ldpfed.fed.attacks.mutual_information import randomizer_mutual_information

    value = randomizer_mutual_information(c.train_x, c.plan.train, c.rng)
    return {"measure": "I(clean; released), nats", "success": value, "chance": 0.0, "records": int(len(c.train_x))}


ATTACKS = {
    "attribute": _attribute,
    "inversion": _inversion,
    "membership": _membership,
    "reconstruction": _reconstruction,
    "mutual-information": _mutual_information,
}
