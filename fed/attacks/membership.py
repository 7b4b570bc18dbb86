"""Membership inference on the server's classifier: was this record among those that trained it?

Loss-threshold attack (Yeom et al. 2018). The server trained its classifier (the noise-aware
discriminant of fed.learning.classifier, through fed.learning.aggregation.ReportAggregator) on the users'
reports. In the standard membership game it holds the clean encodings and labels of members
(records whose reports trained the model) and of non-members from the same distribution, and
scores each candidate by the model's cross-entropy loss on its clean encoding and true label:
a model fits its training records better than fresh ones, so a low loss says "member".

Success is the attack's AUC (the chance that a random member scores as likelier a member than
a random non-member), next to chance 0.5; ``accuracy`` is the balanced accuracy of the best
single threshold, chosen with hindsight on the candidates themselves, hence slightly
optimistic (above 0.5 even for a useless score when there are few candidates).

A model overfits, and the attack wins, when the training set is small next to the dimension
(tens of records in 64 to 384 dimensions): each class mean then carries a visible share of every
member. Reports noised by a DP randomizer bound the attack: for a record released once under
(epsilon, delta)-DP, a membership test's true-positive rate is at most e^epsilon times its
false-positive rate plus delta, so at a small epsilon the AUC stays close to 0.5.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.randomizers import Randomizer


@dataclass(frozen=True)
class MembershipOutcome:
    """How well a loss threshold tells members from non-members, and what guessing would give."""

    success: float
    """AUC of the membership score (minus the loss)."""
    chance: float
    """0.5: the AUC (and balanced accuracy) of a score that ignores membership."""
    accuracy: float
    """Balanced accuracy of the best threshold on these candidates (optimistic: chosen with hindsight)."""
    members: int
    non_members: int


def losses(model: LinearModel, x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Cross-entropy of the model's softmax over its class scores at each row's true label (n,)."""
    scores = model.scores(x)
    labels = np.asarray(labels)
    if labels.shape != (len(scores),) or labels.min(initial=0) < 0 or labels.max(initial=0) >= scores.shape[1]:
        raise ValueError(f"labels must be one class id in [0, {scores.shape[1]}) per row of x, got shape {labels.shape}")
    return special.logsumexp(scores, axis=1) - scores[np.arange(len(scores)), labels]


def membership_attack(
    model: LinearModel,
    members_x: np.ndarray,
    members_y: np.ndarray,
    non_members_x: np.ndarray,
    non_members_y: np.ndarray,
) -> MembershipOutcome:
    """Score members and non-members (clean encodings, true labels) by minus the model's loss on them."""
    if len(members_x) == 0 or len(non_members_x) == 0:
        raise ValueError("the membership game needs at least one member and one non-member")
    member_scores = -losses(model, members_x, members_y)
    other_scores = -losses(model, non_members_x, non_members_y)
    return _outcome(member_scores, other_scores)


def membership_game(
    x: np.ndarray,
    y: np.ndarray,
    num_labels: int,
    randomizer: Randomizer,
    members: int,
    rng: np.random.Generator,
    shrinkage: float = -1.0,
    trials: int = 1,
) -> MembershipOutcome:
    """Play the membership game ``trials`` times and score all the candidates together.

    Each trial draws ``members`` records of ``x`` (clean encodings, labels ``y``) as members and as
    many others as non-members, both in the same numbers per class (the classes' shares in ``x``,
    rounded), releases the members through ``randomizer`` (with their labels,
    mixed as the reports are, for a mixing randomizer), fits the server's classifier to the
    reports (ReportAggregator with this ``shrinkage``; negative: automatic, the run default)
    and scores every candidate by minus that classifier's loss on its clean encoding.

    Drawing per class keeps the class counts the classifier sees the same whoever is a member.
    Labels are public here, not protected by the randomizer; drawn at random, a member's label
    would add one to its class's count, which moves the classifier's class bias (under heavy
    noise, mostly its correction for the noise in the class means, which shrinks as 1/count),
    and the attack would measure that public channel instead of what the reports leak.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    if x.ndim != 2 or y.shape != (len(x),):
        raise ValueError(f"x must be (n, d) with one label per row, got shapes {x.shape} and {y.shape}")
    if not 2 <= members <= len(x) // 2:
        raise ValueError(f"members must lie in [2, {len(x) // 2}] (as many non-members are drawn from x), got {members}")
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    per_class = _per_class(y, members)
    features = randomizer.features(x)  # the classifier's input (bit encodings and snd change the dimension)
    inside, outside = [], []
    for _ in range(trials):
        chosen, others = _draw(y, per_class, rng)
        aggregator = ReportAggregator(features.shape[1], num_labels, shrinkage=shrinkage)
        release_with_labels = getattr(randomizer, "release_with_labels", None)
        if release_with_labels is not None:
            reports, labels = release_with_labels(x[chosen], y[chosen], num_labels, rng)
        else:
            reports, labels = randomizer.release(x[chosen], rng), y[chosen]
        aggregator.add(reports, labels, randomizer.params(), None)
        model = aggregator.model()
        inside.append(-losses(model, features[chosen], y[chosen]))
        outside.append(-losses(model, features[others], y[others]))
    return _outcome(np.concatenate(inside), np.concatenate(outside))


def _per_class(y: np.ndarray, members: int) -> dict[int, int]:
    """Members (and non-members) of each class: ``members`` split by the classes' shares in ``y``
    (largest remainders), each class holding at least twice its share."""
    classes, counts = np.unique(y, return_counts=True)
    quota = members * counts / counts.sum()
    share = np.floor(quota).astype(int)
    share[np.argsort(-(quota - share), kind="stable")[: members - share.sum()]] += 1
    if (2 * share > counts).any():
        raise ValueError(f"x holds too few records of some class to draw {members} members and as many non-members")
    return {int(c): int(n) for c, n in zip(classes, share) if n > 0}


def _draw(y: np.ndarray, per_class: dict[int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of members and of non-members, ``per_class[c]`` of each class c in each."""
    chosen, others = [], []
    for label, count in per_class.items():
        rows = rng.permutation(np.flatnonzero(y == label))
        chosen.append(rows[:count])
        others.append(rows[count : 2 * count])
    return np.concatenate(chosen), np.concatenate(others)


def _outcome(member_scores: np.ndarray, other_scores: np.ndarray) -> MembershipOutcome:
    """AUC (Mann-Whitney, ties counted half) and the best threshold's balanced accuracy."""
    scores = np.concatenate([member_scores, other_scores])
    if not np.isfinite(scores).all():
        raise ValueError("the model's losses are not finite")
    n1, n0 = len(member_scores), len(other_scores)
    ranks = stats.rankdata(scores)
    auc = (ranks[:n1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)
    is_member = np.concatenate([np.ones(n1), np.zeros(n0)])
    order = np.argsort(-scores, kind="stable")
    distinct = np.r_[np.diff(scores[order]) != 0, True]  # cut only between different scores
    tpr = np.cumsum(is_member[order])[distinct] / n1
    fpr = np.cumsum(1 - is_member[order])[distinct] / n0
    accuracy = max(0.5, float(np.max((tpr + 1 - fpr) / 2)))
    return MembershipOutcome(float(auc), 0.5, accuracy, n1, n0)
