"""Attribute inference: the server guesses each report's source (where its writer posts, or its
writing style; not the task label) from the report alone.

The attacker is the server: it knows the randomizer (it asked for it) and holds public data
labelled with the same sources. It releases the public encodings through that randomizer, fits
the noise-aware discriminant (fed.learning.classifier) to those noisy reports, and labels every user
report with the most likely source. Success is the share of reports whose source it names,
next to chance (always naming the most common source of the reports attacked).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.randomizers import Randomizer


@dataclass(frozen=True)
class AttackOutcome:
    """How often the attack names the right attribute, and how often guessing would."""

    success: float
    chance: float
    reports: int


def attribute_attack(
    reports: np.ndarray,
    sources: np.ndarray,
    public_x: np.ndarray,
    public_sources: np.ndarray,
    randomizer: Randomizer,
    num_sources: int,
    rng: np.random.Generator,
) -> AttackOutcome:
    """Train on ``public_x`` (clean encodings, as the users' before their release) released through
    ``randomizer``; guess the source of each of ``reports`` (as the server received them)."""
    if len(reports) == 0:
        raise ValueError("no reports to attack")
    if len(public_x) < 2 * num_sources:
        raise ValueError(f"the public data has {len(public_x)} records, too few to learn {num_sources} sources")
    noisy = randomizer.release(public_x, rng)
    aggregator = ReportAggregator(noisy.shape[1], num_sources, shrinkage=-1.0)
    aggregator.add(noisy, public_sources, randomizer.params(), None)
    model = aggregator.model_for_reports(randomizer.params())
    guesses = model.predict(randomizer.decode(reports)[0])
    chance = np.bincount(sources, minlength=num_sources).max() / len(sources)
    return AttackOutcome(float((guesses == sources).mean()), float(chance), int(len(reports)))
