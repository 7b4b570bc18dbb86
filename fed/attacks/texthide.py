"""Reconstruction attack on TextHide (seed 002): the server unmasks the reports and names the sentences mixed into them.

TextHide (``texthide``, fed/randomizers/instance_encoding.py) gives no formal protection: its
event is NoPrivacyEvent (epsilon = infinity). Its claim is that mixing k records and flipping
signs with one of m secret masks hides them. This attack shows empirically that it does not.

The attacker is the server. It sees one user's release batch (n reports, one mask pool of
m masks drawn for that batch), knows the randomizer (k, c_max, m, clip, noise) and holds
public clean encodings from the same encoder. Two steps:

(a) Recover the masks. Sentence encodings are anisotropic: coordinate i has a mean mu_i
    away from 0 next to its spread (MiniLM: median |mu_i| / s_i about 0.27), and the
    coordinates are correlated. An unmasked report v (a mix of k records, plus the noise if
    any) is modelled as N(mu, S_mix), mu and S_mix taken from the public data mixed the way
    the randomizer mixes (no masks); a report is r = sigma * v for one of m unknown masks
    sigma in {-1, +1}^d. EM over the m masks groups the reports by mask (first with the
    coordinates taken as independent, then with the full covariance, each mask found by
    coordinate ascent: see :func:`recover_masks`), and each report is unmasked as
    v_hat = r * sigma_hat. Masks are isometries, so |r| = |v| and only the signs had to be
    found; the mean fixes the global sign, and the reports that share a mask pool their evidence.
(b) Identify the records. Every candidate sentence the server holds (public data, or a set of
    guesses that contains the true ones) is scored against each unmasked report by its
    normalised whitened correlation, (c - mu)' S^-1 (v_hat - mu) / ||c - mu||_{S^-1}, S the
    public encodings' covariance (ridged).

Success is the share of reports whose top-ranked candidate is one of the k records mixed
into it, next to chance k / (number of candidates); ``recall`` is the share of the mixed
records found among each report's top k candidates (chance k / candidates as well).
Against ``dpie-gaussian`` / ``dpie-laplace`` at a small epsilon the noise swamps both steps
and success falls to chance, as their DP guarantee says it must.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldpfed.fed.randomizers import Randomizer
from ldpfed.fed.randomizers.instance_encoding import Mixup

RIDGE = 1e-3
"""Ridge added to the covariances the attack inverts, relative to their mean variance."""


@dataclass(frozen=True)
class ReconstructionOutcome:
    """How often the attack names a record mixed into a report, and how often guessing would."""

    success: float
    """Share of reports whose top-ranked candidate is one of their k mixed records."""
    chance: float
    """k / candidates: a uniformly random candidate is one of a report's records this often."""
    recall: float
    """Share of the mixed records ranked among their report's top k candidates (chance: k / candidates)."""
    reports: int
    candidates: int


@dataclass(frozen=True)
class MixturePrior:
    """What the server expects of an unmasked report, and the public encodings' whitening."""

    mean: np.ndarray
    """(d,) mean of an unmasked report (that of the preprocessed public encodings)."""
    variance: np.ndarray
    """(d,) variance of each coordinate of an unmasked report."""
    precision: np.ndarray
    """(d, d) inverse covariance of an unmasked report: the public encodings mixed as the randomizer
    mixes, plus its noise variance (ridged)."""
    whitening: np.ndarray
    """(d, d) inverse covariance of one preprocessed public encoding (ridged), to score candidates."""


def mixture_prior(public_x: np.ndarray, randomizer: Randomizer, rng: np.random.Generator) -> MixturePrior:
    """What the server expects of an unmasked report: the public encodings, preprocessed (clipped)
    as ``randomizer`` does, mixed with its own k and c_max but no masks, plus its noise variance."""
    mixup = _mixup(randomizer)
    public_x = np.asarray(public_x, dtype=np.float64)
    if public_x.ndim != 2 or len(public_x) < max(2 * mixup.k, 10):
        raise ValueError(f"public data must be (n, d) with n >= {max(2 * mixup.k, 10)}, got shape {public_x.shape}")
    clean = randomizer.preprocess(public_x)
    mixed, _, _ = Mixup(mixup.k, mixup.max_coefficient, 0).mix(clean[None], rng)
    _, noise_variance = randomizer.decode(np.zeros((0, clean.shape[1])))
    noise = np.broadcast_to(np.asarray(noise_variance, dtype=np.float64), clean.shape[1:])
    cov = np.cov(mixed[0], rowvar=False) + np.diag(noise)
    return MixturePrior(
        clean.mean(axis=0), np.maximum(np.diag(cov), 1e-300), _ridged_inverse(cov), _ridged_inverse(np.cov(clean, rowvar=False))
    )


def recover_masks(
    reports: np.ndarray, masks: int, prior: MixturePrior, rng: np.random.Generator, restarts: int = 8, iterations: int = 20
) -> tuple[np.ndarray, np.ndarray]:
    """The mask pool (masks, d) of one release batch and the mask each report (n, d) used, by EM.

    First with coordinates taken as independent, where log p(r | sigma) = const + sigma . u with
    u = r * mu / s^2: each restart seeds the pool with the signs of reports chosen k-means++
    style, then alternates assigning each report its likeliest mask and setting each mask to
    the signs of its reports' summed u; the restart of highest likelihood is kept. Then with
    the full covariance: each mask is improved by coordinate ascent (iterated conditional modes,
    an Ising problem in the mask bits) on its reports' likelihood and the reports reassigned,
    until no report moves.
    """
    reports = np.asarray(reports, dtype=np.float64)
    if reports.ndim != 2 or reports.shape[1] != len(prior.mean):
        raise ValueError(f"reports must have shape (n, {len(prior.mean)}), got {reports.shape}")
    if masks < 1:
        raise ValueError(f"the mask pool must hold at least one mask, got {masks}")
    evidence = reports * prior.mean / prior.variance  # (n, d)
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for _ in range(max(int(restarts), 1)):
        pool = _seed_pool(evidence, masks, rng)
        assignment = np.full(len(reports), -1)
        for _ in range(50):
            new = (evidence @ pool.T).argmax(axis=1)
            if np.array_equal(new, assignment):
                break
            assignment = new
            for c in np.unique(assignment):
                pool[c] = _signs(evidence[assignment == c].sum(axis=0))
        fit = float((evidence @ pool.T).max(axis=1).sum())
        if best is None or fit > best[0]:
            best = (fit, pool.copy(), assignment.copy())
    assert best is not None
    _, pool, assignment = best
    linear = prior.precision @ prior.mean
    for _ in range(int(iterations)):
        for c in np.unique(assignment):
            pool[c] = _conditional_modes(reports[assignment == c], pool[c], prior.precision, linear)
        new = np.stack([_log_likelihood(reports, mask, prior.precision, linear) for mask in pool], axis=1).argmax(axis=1)
        if np.array_equal(new, assignment):
            break
        assignment = new
    return pool, assignment


def unmask(reports: np.ndarray, masks: int, prior: MixturePrior, rng: np.random.Generator) -> np.ndarray:
    """Estimates (n, d) of one batch's unmasked reports: each report times its recovered mask."""
    pool, assignment = recover_masks(reports, masks, prior, rng)
    return np.asarray(reports, dtype=np.float64) * pool[assignment]


def rank_candidates(unmasked: np.ndarray, candidates: np.ndarray, prior: MixturePrior, randomizer: Randomizer) -> np.ndarray:
    """Scores (n, candidates) of each candidate's clean encoding against each unmasked report (higher: likelier mixed in)."""
    centred = randomizer.preprocess(np.asarray(candidates, dtype=np.float64)) - prior.mean
    whitened = centred @ prior.whitening
    norms = np.sqrt(np.maximum(np.einsum("cd,cd->c", whitened, centred), 1e-300))
    return (np.asarray(unmasked, dtype=np.float64) - prior.mean) @ whitened.T / norms


def texthide_attack(
    reports: np.ndarray,
    truth: np.ndarray,
    candidates: np.ndarray,
    public_x: np.ndarray,
    randomizer: Randomizer,
    rng: np.random.Generator,
) -> ReconstructionOutcome:
    """Unmask each release batch of ``reports`` (groups, n, d) and rank ``candidates`` (N, d) against every report.

    ``truth[g, j]`` (groups, n, k) holds the candidate indices of the k records mixed into report
    j of batch g (the ground truth, used only to score the attack); ``public_x`` is the server's
    public clean encodings; ``randomizer`` made the reports (only its public parameters are used).
    """
    reports = np.asarray(reports, dtype=np.float64)
    candidates = np.asarray(candidates, dtype=np.float64)
    truth = np.asarray(truth)
    if reports.ndim != 3 or reports.shape[1] == 0:
        raise ValueError(f"reports must be release batches of shape (groups, n, d), got {reports.shape}")
    k, masks = _mixup(randomizer).k, _mixup(randomizer).masks
    if truth.shape != (*reports.shape[:2], k):
        raise ValueError(f"truth must hold {k} candidate indices per report, shape {(*reports.shape[:2], k)}, got {truth.shape}")
    if candidates.ndim != 2 or candidates.shape[1] != reports.shape[2] or len(candidates) <= k:
        raise ValueError(f"candidates must be more than k={k} encodings of dimension {reports.shape[2]}, got {candidates.shape}")
    if truth.min() < 0 or truth.max() >= len(candidates):
        raise ValueError(f"truth indices must lie in [0, {len(candidates)}), the candidates")
    prior = mixture_prior(public_x, randomizer, rng)
    hits, found = 0, 0
    for batch, members in zip(reports, truth):
        unmasked = unmask(batch, masks, prior, rng) if masks else batch
        scores = rank_candidates(unmasked, candidates, prior, randomizer)
        top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        hits += int((top[:, :1] == members).any(axis=1).sum())
        found += int((top[:, :, None] == members[:, None, :]).any(axis=1).sum())
    n = reports.shape[0] * reports.shape[1]
    return ReconstructionOutcome(
        success=hits / n, chance=k / len(candidates), recall=found / (n * k), reports=n, candidates=len(candidates)
    )


def reconstruction_game(
    x: np.ndarray, distractors: np.ndarray, public_x: np.ndarray, randomizer: Randomizer, rng: np.random.Generator
) -> ReconstructionOutcome:
    """Release each user's batch ``x`` (groups, n, d) through ``randomizer`` and attack it.

    The candidates are every user record plus ``distractors`` (clean encodings of records
    no user released), in one shuffled pool.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"x must be release batches of shape (groups, n, d), got {x.shape}")
    _mixup(randomizer)
    distractors = np.asarray(distractors, dtype=np.float64).reshape(-1, x.shape[2])
    reports, members, _ = randomizer.release_groups(x, rng)
    groups, n, _ = x.shape
    pool = np.concatenate([x.reshape(groups * n, -1), distractors])
    order = rng.permutation(len(pool))
    where = np.empty(len(pool), dtype=np.int64)
    where[order] = np.arange(len(pool))  # where[i]: position of record i in the shuffled pool
    truth = where[members + (np.arange(groups) * n)[:, None, None]]
    return texthide_attack(reports, truth, pool[order], public_x, randomizer, rng)


def _mixup(randomizer: Randomizer) -> Mixup:
    """The randomizer's mixing step (TextHide, DP instance encoding); ValueError for one that does not mix."""
    mixup = getattr(randomizer, "mixup", None)
    if not isinstance(mixup, Mixup) or not hasattr(randomizer, "release_groups"):
        raise ValueError(f"{randomizer.name} does not mix records; the TextHide attack needs a mixing randomizer")
    return mixup


def _seed_pool(evidence: np.ndarray, masks: int, rng: np.random.Generator) -> np.ndarray:
    """Initial masks: signs of reports drawn k-means++ style (each new one far from the masks so far)."""
    pool = np.empty((masks, evidence.shape[1]))
    pool[0] = _signs(evidence[rng.integers(len(evidence))])
    for c in range(1, masks):
        fit = (evidence @ pool[:c].T).max(axis=1)
        gap = np.maximum(np.abs(evidence).sum(axis=1) - fit, 0.0)  # what the best mask so far leaves unexplained
        total = gap.sum()
        pick = rng.choice(len(evidence), p=gap / total) if total > 0 else rng.integers(len(evidence))
        pool[c] = _signs(evidence[pick])
    return pool


def _log_likelihood(reports: np.ndarray, mask: np.ndarray, precision: np.ndarray, linear: np.ndarray) -> np.ndarray:
    """log p(r | mask) of each report (n, d) up to a constant: v = mask * r, v' P mu - v' P v / 2."""
    unmasked = reports * mask
    return unmasked @ linear - 0.5 * np.einsum("nd,de,ne->n", unmasked, precision, unmasked)


def _conditional_modes(reports: np.ndarray, mask: np.ndarray, precision: np.ndarray, linear: np.ndarray) -> np.ndarray:
    """The mask that (locally) maximises the summed log-likelihood of ``reports``, from ``mask``.

    The objective is s' b - s' A s / 2 with b = (sum of the reports) * P mu and A = P * (R' R);
    each bit in turn is set to the sign of its local field b_i - sum_{l != i} A_il s_l, until a
    sweep changes nothing.
    """
    mask = mask.copy()
    coupling = precision * (reports.T @ reports)
    np.fill_diagonal(coupling, 0.0)
    field = reports.sum(axis=0) * linear
    for _ in range(50):
        changed = False
        for i in range(len(mask)):
            bit = -1.0 if field[i] - coupling[i] @ mask < 0 else 1.0
            if bit != mask[i]:
                mask[i], changed = bit, True
        if not changed:
            break
    return mask


def _ridged_inverse(cov: np.ndarray) -> np.ndarray:
    """Inverse of a covariance plus RIDGE times its mean variance on the diagonal."""
    return np.linalg.inv(cov + RIDGE * max(np.trace(cov) / len(cov), 1e-12) * np.eye(len(cov)))


def _signs(values: np.ndarray) -> np.ndarray:
    """Signs with zeros taken as +1."""
    return np.where(values < 0, -1.0, 1.0)
