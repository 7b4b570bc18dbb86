"""The randomizer interface and its registry.

A randomizer is built from plain parameters (what a server's request carries), adds its
noise, states its privacy event, and tells the server how to read its reports. Everything
else the project needs to know about a mechanism is on its class too: how it calibrates,
how it is audited (its worst pair and likelihood ratio), whether its noise is additive,
whether it batches, whether its sampler is float-safe on a device and so whether a device
runs it by default. Adding a mechanism is one module with one class and ``@register``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from ldpfed.fed.privacy.events import PrivacyEvent
from ldpfed.fed.randomizers.audit_pairs import Scores
from ldpfed.fed.randomizers.target import CalibrationTarget


RANDOMIZERS: dict[str, type[Randomizer]] = {}
"""The randomizers of representations by name, filled by :func:`register`."""


class Randomizer(ABC):
    """Turns clean inputs into reports; one call is one run per row.

    ``event`` states what one run costs a record; the ledger is fed only from it. What a run
    needs to know about a mechanism lives here too: the options its settings give it
    (:meth:`run_options`), whether its noise is fixed or calibrated (:meth:`fixed_params`),
    how many records one report mixes and what one report costs at user level.
    """

    registry: ClassVar[dict[str, type[Randomizer]]] = RANDOMIZERS
    """Where :func:`register` files the class (token-level randomizers have their own, fed.randomizers.token_level)."""
    name: ClassVar[str]
    noise_key: ClassVar[str | None] = None
    """The parameter that sets the noise (sigma, scale, eta): given in a run's options, it is used as is."""
    default_options: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    """Options a run uses unless it gives them (published defaults)."""
    sigma_settable: ClassVar[bool] = False
    """A Gaussian on one record per report: ``--sigma`` sets its noise and ``--enforce amplified`` applies."""
    float_safe: ClassVar[bool] = True
    """On a device its randomness resists floating-point attacks: OpenDP's samplers or coins only (fed.privacy.noise)."""
    batch_release: ClassVar[bool] = False
    """Each report depends on its own row and fresh noise only, so many users' rows may be released
    in one call (fed.runtime.cohort); a mechanism that mixes rows or labels must leave this False."""
    decoded_as_sent: ClassVar[bool] = False
    """:meth:`decode` returns the reports themselves (as float64), so their sums need no decoding."""
    invalid: ClassVar[bool] = False
    """A published-but-wrong mechanism: built only when asked for (``allow_invalid``); a client may refuse it."""
    private: ClassVar[bool] = True
    """It has a differential-privacy guarantee (texthide has none: its event is NoPrivacyEvent)."""
    audit_dimension_free: ClassVar[bool] = False
    """Its audit (:meth:`audit_scores`) is the same test at every dimension of at least 2, so the
    device sampler may be audited at dimension 2 (fed.randomizers.auditing.dimension_free)."""
    pinned: ClassVar[frozenset[str]] = frozenset()
    """Parameters a request must give exactly as the user's own plan does (they name what the user
    loads, e.g. a model): the server may choose the noise, never these (fed.runtime.requests)."""
    size_params: ClassVar[tuple[str, ...]] = ()
    """Integer parameters that size what building or running it allocates (a dimension, a pool of
    vectors): a node refuses a request that names one above its policy's ``max_dim`` before it
    builds anything (fed.runtime.requests)."""
    shipped_files: ClassVar[tuple[str, ...]] = ()
    """Bundle files (fed.runtime.assets) the users of this mechanism need, made by :meth:`bundle_files`."""
    default_clip: ClassVar[float] = 3.0
    """The clip a run uses unless it gives --clip (where the class takes a clip)."""
    audit_options: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    """Options the audit (fed.randomizers.auditing.build_for_audit) builds it with unless given: what would
    otherwise be read from a model (snd's table bounds), so that the audit loads none."""

    @classmethod
    def default_dim(cls, epsilon: float, num_classes: int | None = None, num_records: int | None = None) -> int:
        """The projection's dimension a run uses unless it gives --dim, at the run's ``epsilon`` (0: noise given
        as --sigma) for a task of ``num_classes`` classes and ``num_records`` training records (None: not known);
        0 means no projection."""
        return 16

    @classmethod
    def default_dim_reads_records(cls, num_classes: int) -> bool:
        """Whether :meth:`default_dim` depends on the training record count for a task of ``num_classes`` classes
        (counting a task's records means loading it)."""
        return False

    @classmethod
    @abstractmethod
    def from_params(cls, params: Mapping[str, Any]) -> "Randomizer":
        """Build from :meth:`params` output; ValueError naming any bad field."""

    required_options: ClassVar[frozenset[str]] = frozenset()
    """Options a calibration needs (fixed parameters such as the clip)."""
    optional_options: ClassVar[frozenset[str]] = frozenset()
    """Options a calibration accepts besides the required ones."""

    @classmethod
    def calibrated(
        cls,
        epsilon: float,
        delta: float,
        releases: int,
        options: Mapping[str, Any],
        other_events: Mapping[PrivacyEvent, int] | None = None,
    ) -> "Randomizer":
        """The least noisy instance whose ``releases`` runs (plus ``other_events``) meet (epsilon, delta).

        ``options`` holds the parameters that are fixed rather than solved for (e.g. the clip);
        a missing or unknown one, or a bad target, is a ValueError naming it.
        """
        check_params({"mechanism": cls.name, **options}, cls.required_options, cls.optional_options)
        return cls._calibrate(CalibrationTarget(epsilon, delta, releases, other_events or {}), options)

    @classmethod
    @abstractmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "Randomizer":
        """The instance for a validated ``target`` and checked ``options``."""

    @classmethod
    def calibrates(cls, epsilon: float) -> bool:
        """Whether :meth:`calibrated` can meet a target of ``epsilon`` at all (e.g. the classical
        Gaussian formula holds for epsilon < 1 only); the audit of every mechanism skips the rest."""
        return True

    @classmethod
    def device_default(cls) -> bool:
        """Whether a device runs it unless its owner's policy says otherwise (fed.device.policy): a guarantee
        (:attr:`private`) that holds as published (not :attr:`invalid`) and a float-safe sampler."""
        return cls.private and not cls.invalid and cls.float_safe

    @classmethod
    def run_options(cls, clip: float, dim: int, options: Mapping[str, Any], encoder: str = "") -> dict[str, Any]:
        """The options a run's settings give this mechanism.

        The clip (where the class takes one), :attr:`default_options`, the input dimension
        ``dim`` (where the class takes one; 0: none), then the run's own ``options``.
        ``encoder`` is the run's encoder spec (for a class that needs it).
        """
        out: dict[str, Any] = {"clip": clip} if "clip" in cls.required_options else {}
        out.update(cls.default_options)
        needs_dim = "dim" in cls.required_options
        if needs_dim and dim:
            out["dim"] = dim
        out.update(options)
        if needs_dim and "dim" not in out:
            raise ValueError(f"{cls.name} needs the input dimension: give --dim > 0 or dim=<d> in --mechanism-options")
        return out

    @classmethod
    def encoder_spec(cls, encoder: str, options: Mapping[str, Any]) -> str:
        """The encoder whose output this mechanism's records are, given the run's ``encoder`` and options."""
        return encoder

    @classmethod
    def fixed_params(cls, epsilon: float, options: Mapping[str, Any]) -> dict[str, Any] | None:
        """Parameters to run at as given, or None when the noise is to be calibrated to ``epsilon``.

        Fixed when ``options`` (from :meth:`run_options`) give the noise parameter :attr:`noise_key`.
        """
        return {"mechanism": cls.name, **options} if cls.noise_key in options else None

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Plain-JSON parameters, including ``mechanism``."""

    @property
    @abstractmethod
    def event(self) -> PrivacyEvent:
        """The privacy event of one run on one record."""

    @abstractmethod
    def preprocess(self, x: np.ndarray) -> np.ndarray:
        """The deterministic part of a release (e.g. clipping), also applied at local inference."""

    @abstractmethod
    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Randomize each row of ``x`` with fresh noise from ``rng``."""

    def preprocess_key(self) -> Hashable | None:
        """What :meth:`preprocess` depends on, where :meth:`release` is :meth:`randomize` of
        :meth:`preprocess` with the labels travelling as they are: rows preprocessed once then
        serve every release whose key is equal (fed.runtime.cohort). None where a release is not split so."""
        return None

    def randomize(self, prepared: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Randomize rows already through :meth:`preprocess` (only where :meth:`preprocess_key` is not None)."""
        raise NotImplementedError(f"{self.name} releases only through release()")

    def features(self, x: np.ndarray) -> np.ndarray:
        """The classifier's input for clean rows ``x`` (local inference, public baselines): what
        :meth:`decode` estimates. Here :meth:`preprocess`; a mechanism whose server decodes reports
        into another space (snd) maps clean rows into it."""
        return self.preprocess(x)

    def bundle_files(self, public: np.ndarray, seed: int, progress: bool = False) -> dict[str, bytes]:
        """The :attr:`shipped_files` fitted on the public records ``public`` (clean rows) for these parameters."""
        return {}

    def release_with_labels(
        self, x: np.ndarray, labels: np.ndarray, num_labels: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Reports of the rows of ``x`` and the labels that travel with them.

        ``labels`` are class ids in [0, num_labels) that have already left the user (public,
        or randomized response charged in the ledger); here they travel as they are.
        """
        return self.release(x, rng), labels

    @property
    def records_per_report(self) -> int:
        """Records mixed into one report; a release needs at least this many rows."""
        return 1

    @property
    def user_event(self) -> PrivacyEvent:
        """The privacy event one REPORT costs at user level (all of a user's records may differ)."""
        return self.event

    @property
    def claimed_epsilon(self) -> float | None:
        """The epsilon that fixed (published) parameters state per release; None where they state none."""
        return None

    @property
    def additive(self) -> bool:
        """Whether a release is :meth:`preprocess` of the rows plus noise drawn independently of them
        (what the mutual-information estimate needs, fed.attacks.mutual_information)."""
        return False

    def audit_scores(self, dim: int) -> Scores:
        """Its distinguishing audit at input width ``dim``: the worst neighbouring pair its sensitivity
        allows and a likelihood-ratio score of releases on each (fed.randomizers.audit_pairs)."""
        raise ValueError(f"no audit for {type(self).__name__}")

    @abstractmethod
    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, float | np.ndarray]:
        """Server side: unbiased estimates of the (clipped) inputs, and the noise variance per
        coordinate (one number, or one per coordinate when it differs between coordinates)."""


def register(cls: type) -> type:
    """Class decorator making a randomizer selectable by its ``name`` in its family's ``registry``
    (for ldpfed's own modules; another package's class: fed.randomizers.plugins). A name already taken
    by another class is a ValueError: nothing replaces a registered mechanism."""
    if cls.registry.setdefault(cls.name, cls) is not cls:
        raise ValueError(f"randomizer name {cls.name!r} is taken by {cls.registry[cls.name].__qualname__}")
    return cls


def make_randomizer(params: Mapping[str, Any]) -> Randomizer:
    """The randomizer that ``params['mechanism']`` names, built from ``params``."""
    mechanism = params.get("mechanism")
    if mechanism not in RANDOMIZERS:
        raise ValueError(f"unknown mechanism {mechanism!r}; available: {sorted(RANDOMIZERS)}")
    return RANDOMIZERS[mechanism].from_params(params)


def check_finite_matrix(x: np.ndarray) -> np.ndarray:
    """``x`` as a finite 2-D float64 array, or a ValueError naming the problem."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D array of representations, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("representations contain NaN or infinite values")
    return x


def check_params(params: Mapping[str, Any], required: set[str], optional: set[str] = frozenset()) -> None:
    """ValueError naming a missing required key or an unknown one (``mechanism`` is always allowed)."""
    keys = set(params) - {"mechanism"}
    if missing := required - keys:
        raise ValueError(f"{params.get('mechanism')}: missing parameter(s) {sorted(missing)}")
    if unknown := keys - required - set(optional):
        raise ValueError(f"{params.get('mechanism')}: unknown parameter(s) {sorted(unknown)}")
