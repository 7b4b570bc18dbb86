"""DP instance encoding (seed 002) and plain TextHide: mixup of a user's records, sign masks, noise.

Mixing (within one release batch of one user, n >= k rows): rows are put in a random cyclic
order and report j mixes the k consecutive rows starting at position j,

    report_j = mask_j * sum_t lambda_{j,t} x_{pi(j+t mod n)}  (+ noise),

so every record appears in exactly k reports, once in each. Coefficients are random on the
simplex and bounded by ``max_coefficient`` (c_max): lambda = (1-s)/k + s * Dirichlet(1,...,1)
with s = (c_max - 1/k) / (1 - 1/k), which makes every lambda <= c_max. ``max_coefficient = 1``
is TextHide's uniform simplex; ``1/k`` is plain averaging. Sign masks are drawn from a pool
of ``masks`` random {-1, +1}^d vectors made afresh for each release call (0: no masks).

Seed 002's Algorithm 1 draws the coefficients from N(0, 1) and normalises them to sum 1,
which makes them unbounded (and the sensitivity with them); we bound them instead.

Accounting (replace-one of record i): its row enters k reports with coefficients
c_1..c_k <= c_max; masks are isometries (in L1 and L2) and the noise is independent per
report, so the k reports form one Gaussian (Laplace) mechanism whose shift is
(c_1 m_1 * D, ..., c_k m_k * D) with D = x_i - x_i'. Hence

- ``dpie-gaussian``: L2 clip C, GaussianEvent(sensitivity = 2C * c_max * sqrt(k), sigma);
- ``dpie-laplace``:  L1 clip C1, LaplaceEvent(sensitivity = 2C1 * c_max * k, scale).

Both hold conditionally on the coefficients, masks and order, which are independent of the
data, so they hold even if the server learns them (mixed soft labels reveal the
coefficients). Labels are mixed with the same coefficients by :meth:`release_with_labels`
from labels that were already released (public, or randomized response charged in the
ledger), which makes them post-processing.

User level (all of a user's records may differ): the records of one report share its
noise, and the report moves by m * sum_t lambda_t (x_t - x_t'), whose norm is at most
sum_t lambda_t * 2C = 2C (coefficients are non-negative and sum to 1, masks are
isometries, in L2 and in L1). So ``user_event`` is one report's GaussianEvent(2C, sigma)
or LaplaceEvent(2C1, scale), composed over the reports; the per-record events above,
composed over the records, would understate it by the factor c_max sqrt(k) (Gaussian).

``texthide`` (Huang et al. 2020, (m, k)-TextHide): the same mixing with c_max = 1 and a pool
of m masks, no clipping, no noise: no DP at all, so its event is NoPrivacyEvent (epsilon =
infinity) and no finite budget ever admits it.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ldpfed.fed.privacy.events import GaussianEvent, LaplaceEvent, NoPrivacyEvent, PrivacyEvent
from ldpfed.fed.privacy.validators import check_int
from ldpfed.fed.randomizers.audit_pairs import CHUNK_ELEMENTS, Scores
from ldpfed.fed.randomizers.base import Randomizer, check_finite_matrix, check_params, register
from ldpfed.fed.randomizers.clip_and_noise import GAUSSIAN_NOISE, LAPLACE_NOISE, ClipAndNoise
from ldpfed.fed.randomizers.target import CalibrationTarget

PUBLISHED_K = 4
"""Records per report of (m, k)-TextHide as published (Huang et al. 2020)."""
PUBLISHED_MASKS = 16
"""Size m of TextHide's sign-mask pool as published."""


class Mixup:
    """The mixing step shared by DP instance encoding and TextHide."""

    def __init__(self, k: int, max_coefficient: float, masks: int) -> None:
        self.k = check_int("k", k)
        self.max_coefficient = float(max_coefficient)
        if not 1.0 / self.k - 1e-12 <= self.max_coefficient <= 1.0:
            raise ValueError(f"max_coefficient must lie in [1/k, 1] = [{1 / self.k:.4g}, 1], got {max_coefficient!r}")
        self.masks = check_int("masks", masks, minimum=0)

    def coefficients(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """Random coefficients of shape (*shape, k) on the simplex, each at most max_coefficient."""
        k = self.k
        if k == 1:
            return np.ones((*shape, 1))
        spread = (self.max_coefficient - 1.0 / k) / (1.0 - 1.0 / k)
        return (1.0 - spread) / k + spread * rng.dirichlet(np.ones(k), size=shape)

    def mix(self, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mix groups of rows: x of shape (groups, n, d) -> reports (groups, n, d), members, coefficients.

        ``members[g, j, t]`` is the row mixed into report j with ``coefficients[g, j, t]``.
        """
        groups, n, d = x.shape
        if n < self.k:
            raise ValueError(f"mixing k={self.k} records needs at least {self.k} rows in a release, got {n}")
        order = np.argsort(rng.random((groups, n)), axis=1)
        positions = (np.arange(n)[:, None] + np.arange(self.k)[None, :]) % n
        members = order[:, positions]  # (groups, n, k)
        lam = self.coefficients((groups, n), rng)
        gathered = np.take_along_axis(x[:, None, :, :], members[..., None], axis=2)  # (groups, n, k, d)
        reports = np.einsum("gjt,gjtd->gjd", lam, gathered)
        if self.masks:
            pool = rng.choice(np.array([-1.0, 1.0]), size=(groups, self.masks, d))
            pick = rng.integers(self.masks, size=(groups, n))
            reports *= np.take_along_axis(pool, pick[..., None], axis=1)
        return reports, members, lam

    def square_share(self) -> float:
        """E[sum_t lambda_t^2] of one report's coefficients: the share of a record's within-class variance a report keeps.

        lambda = (1-s)/k + s D, D ~ Dirichlet(1,...,1): each lambda_t has mean 1/k and variance
        s^2 (k-1) / (k^2 (k+1)), so the sum is 1/k + s^2 (k-1) / (k (k+1)) (0.4 for TextHide's k = 4, s = 1).
        """
        k = self.k
        spread = 0.0 if k == 1 else (self.max_coefficient - 1.0 / k) / (1.0 - 1.0 / k)
        return 1.0 / k + spread**2 * (k - 1) / (k * (k + 1))

    @staticmethod
    def mix_labels(labels: np.ndarray, members: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """Soft labels mixed with the same coefficients: labels (n, classes) -> (n, classes)."""
        return np.einsum("jt,jtc->jc", lam, labels[members])


class _Mixing(Randomizer):
    """What the mixup randomizers share: k records per report, soft labels mixed like the reports."""

    mixup: Mixup
    batch_release = False  # a report mixes k records of one user, and their labels
    size_params = ("masks",)  # a release draws a pool of this many sign masks
    audit_dimension_free = True  # mixing, masks and noise act on each coordinate alone; the score reads two

    @abstractmethod
    def release_groups(self, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Release each of several batches (groups, n, d) independently: reports, members, coefficients."""

    @property
    def records_per_report(self) -> int:
        return self.mixup.k

    def preprocess_key(self) -> None:
        return None  # reports mix several clipped rows before the noise

    @property
    def additive(self) -> bool:
        return False  # a report mixes several records

    def audit_scores(self, dim: int) -> Scores:
        """One record at +-C e_1 beside k-1 zero records in a batch of k (it enters all k reports).

        The coefficients and masks are secret, so the score is valid but not optimal: the sum of the
        first coordinate without masks; with masks, which hide signs, the pair is C e_1 versus C e_2
        and the score compares squared coordinates.
        """
        k = self.records_per_report
        clip = getattr(self, "clip", 1.0)
        masked = self.mixup.masks > 0
        x0 = np.zeros((k, dim))
        x1 = np.zeros((k, dim))
        x0[0, 0] = clip
        if masked:
            x1[0, 1] = clip
        else:
            x1[0, 0] = -clip

        def score(reports: np.ndarray) -> np.ndarray:  # (groups, k, dim) -> (groups,)
            if masked:
                return (reports[..., 1] ** 2 - reports[..., 0] ** 2).sum(axis=1)
            return -reports[..., 0].sum(axis=1)

        def draw(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
            step = max(1, CHUNK_ELEMENTS // (k * dim))
            out = []
            for start in range(0, n, step):
                groups = min(step, n - start)
                reports, _, _ = self.release_groups(np.broadcast_to(x, (groups, k, dim)), rng)
                out.append(score(reports))
            return np.concatenate(out)

        def scores(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
            return draw(x0, n, rng), draw(x1, n, rng)

        return scores

    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.release_groups(check_finite_matrix(x)[None], rng)[0][0]

    def release_with_labels(
        self, x: np.ndarray, labels: np.ndarray, num_labels: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Reports and soft labels (n, num_labels): the one-hot ``labels`` mixed with each report's coefficients.

        ``labels`` must have already left the user (public, or randomized-response outputs
        charged in the ledger): mixing them is then post-processing and costs nothing more.
        """
        labels = np.asarray(labels)
        if labels.shape != (len(x),):
            raise ValueError(f"labels must be one class id per row of x, got shape {labels.shape} for {len(x)} rows")
        reports, members, lam = self.release_groups(check_finite_matrix(x)[None], rng)
        return reports[0], Mixup.mix_labels(np.eye(num_labels)[labels], members[0], lam[0])


class _InstanceEncoding(_Mixing, ClipAndNoise):
    """Clip, mixup + masks, then noise; subclasses choose the noise kind and the events."""

    required_options = frozenset({"k", "max_coefficient", "masks", "clip"})
    default_options = MappingProxyType({"k": PUBLISHED_K, "masks": PUBLISHED_MASKS, "max_coefficient": 1.0})
    """TextHide's published k and m; max_coefficient 1 is the no-assumption worst case."""

    def __init__(self, k: int, max_coefficient: float, masks: int, clip: float, noise: float) -> None:
        self.mixup = Mixup(k, max_coefficient, masks)
        super().__init__(clip, noise)

    @property
    def k(self) -> int:
        """Records mixed per report."""
        return self.mixup.k

    @property
    def max_coefficient(self) -> float:
        """Largest mixing coefficient c_max."""
        return self.mixup.max_coefficient

    @property
    def masks(self) -> int:
        """Size of the sign-mask pool (0: no masks)."""
        return self.mixup.masks

    @classmethod
    def _probe(cls, options: Mapping[str, Any]) -> "_InstanceEncoding":
        """An instance with unit noise, for the sensitivity its options imply."""
        return cls(options["k"], options["max_coefficient"], options["masks"], options["clip"], 1.0)

    def release_groups(self, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Release each of several batches (groups, n, d) independently (used by the audit).

        Clipping only happens here and in :meth:`preprocess`: at local inference a clean
        query is clipped, not mixed.
        """
        x = np.asarray(x, dtype=np.float64)
        clipped = self.noise_kind.clip_rows(x.reshape(-1, x.shape[-1]), self.clip).reshape(x.shape)
        reports, members, lam = self.mixup.mix(clipped, rng)
        return self.randomize(reports, rng), members, lam


@register
class DPInstanceEncodingGaussian(_InstanceEncoding):
    """Seed 002 Algorithm 1 with Gaussian noise, accounted honestly (see module docstring)."""

    name = "dpie-gaussian"
    noise_kind = GAUSSIAN_NOISE
    fields = ("k", "max_coefficient", "masks", "clip", "sigma")

    def __init__(self, k: int, max_coefficient: float, masks: int, clip: float, sigma: float) -> None:
        super().__init__(k, max_coefficient, masks, clip, sigma)

    @property
    def event(self) -> GaussianEvent:
        return GaussianEvent(sensitivity=2 * self.clip * self.max_coefficient * math.sqrt(self.k), sigma=self.sigma)

    @property
    def user_event(self) -> GaussianEvent:
        """One report at user level: its records share its noise and move it by at most 2C."""
        return GaussianEvent(sensitivity=2 * self.clip, sigma=self.sigma)

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "DPInstanceEncodingGaussian":
        sigma = target.gaussian_sigma(cls._probe(options).event.sensitivity)
        return cls(options["k"], options["max_coefficient"], options["masks"], options["clip"], sigma)


@register
class DPInstanceEncodingLaplace(_InstanceEncoding):
    """Seed 002 Algorithm 1 with Laplace noise, made L1-correct: L1 clip, L1 sensitivity."""

    name = "dpie-laplace"
    noise_kind = LAPLACE_NOISE
    fields = ("k", "max_coefficient", "masks", "clip", "scale")

    def __init__(self, k: int, max_coefficient: float, masks: int, clip: float, scale: float) -> None:
        super().__init__(k, max_coefficient, masks, clip, scale)

    @property
    def event(self) -> LaplaceEvent:
        return LaplaceEvent(sensitivity=2 * self.clip * self.max_coefficient * self.k, scale=self.scale)

    @property
    def user_event(self) -> LaplaceEvent:
        """One report at user level: its records share its noise and move it by at most 2C1 in L1."""
        return LaplaceEvent(sensitivity=2 * self.clip, scale=self.scale)

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "DPInstanceEncodingLaplace":
        sens = cls._probe(options).event.sensitivity
        inverse = target.largest(lambda x: LaplaceEvent(sens, 1 / x), target.epsilon / (sens * target.releases))
        return cls(options["k"], options["max_coefficient"], options["masks"], options["clip"], 1 / inverse)


@register
class TextHideRandomizer(_Mixing):
    """(m, k)-TextHide: mixup of k records with uniform-simplex coefficients and one of m sign masks.

    No noise and no clipping: not differentially private (NoPrivacyEvent, epsilon = inf).
    """

    name = "texthide"
    private = False
    required_options = frozenset({"k", "masks"})
    default_options = MappingProxyType({"k": PUBLISHED_K, "masks": PUBLISHED_MASKS})

    @classmethod
    def fixed_params(cls, epsilon: float, options: Mapping[str, Any]) -> dict[str, Any]:
        """Always: no noise to calibrate."""
        return {"mechanism": cls.name, **options}

    def __init__(self, k: int, masks: int) -> None:
        self.mixup = Mixup(k, 1.0, check_int("masks", masks))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "TextHideRandomizer":
        check_params(params, {"k", "masks"})
        return cls(params["k"], params["masks"])

    @classmethod
    def calibrated(
        cls,
        epsilon: float,
        delta: float,
        releases: int,
        options: Mapping[str, Any],
        other_events: Mapping[PrivacyEvent, int] | None = None,
    ) -> "TextHideRandomizer":
        """Only an infinite target is met: TextHide has no DP guarantee."""
        if not math.isinf(float(epsilon)):
            return super().calibrated(epsilon, delta, releases, options, other_events)  # refused by _calibrate
        check_params({"mechanism": cls.name, **options}, cls.required_options)
        return cls(options["k"], options["masks"])

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "TextHideRandomizer":
        """Never met: every finite target is refused."""
        raise ValueError(f"texthide has no differential-privacy guarantee; it cannot meet epsilon {target.epsilon}")

    def params(self) -> dict[str, Any]:
        return {"mechanism": self.name, "k": self.mixup.k, "masks": self.mixup.masks}

    @property
    def event(self) -> NoPrivacyEvent:
        return NoPrivacyEvent(scheme="texthide")

    def preprocess(self, x: np.ndarray) -> np.ndarray:
        return check_finite_matrix(x)

    def release_groups(self, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.mixup.mix(np.asarray(x, dtype=np.float64), rng)

    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, float]:
        return np.asarray(reports, dtype=np.float64), 0.0
