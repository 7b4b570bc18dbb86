"""The typed sections of a run spec, each holding its options' values and parsing them once, where read.

Validation across options lives in :class:`fed.configuration.run_spec.RunSpec`, which builds every section
and checks them together once; a node reads only the sections it needs. The protocols at the end
name the sections each reader takes (a RunSpec has them all; nothing else of the run is read).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from ldpfed.fed.heterogeneity import registry
from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis
from ldpfed.fed.device.policy import MAX_RR_EPSILON
from ldpfed.fed.privacy.sampling import TrainSampling, UpSampling


DIM_AUTO = -1
"""EncoderSpec.dim for ``--dim auto`` (opt-in): the server chooses it on public data (fed.runtime.auto_dim)."""
DIM_DEFAULT = -2
"""EncoderSpec.dim when --dim is not given ('default'): resolved by the run spec (RunSpec._default_dim)."""
CLIP_DEFAULT = -1.0
"""PrivacySpec.clip when --clip is not given ('default'): the mechanism's own default_clip, resolved by the run spec."""


@dataclass(frozen=True)
class DataSpec:
    """The task's data, the server's public data, and how records are split among users."""

    data: str = "generated"
    public: str = "generated"
    users: int = 20
    partition: str = "dirichlet:0.5"
    train_limit: int = 0
    projection_public: str = ""
    """What the projection (--dim) is fitted on, without its labels: a --public spec ('': --public itself)."""

    @property
    def projection_source(self) -> str:
        """The public spec the projection is fitted on: --projection-public, else --public."""
        return self.projection_public or self.public


HELDOUT = "heldout"
"""The --public spec ``heldout:N``: N records of the task's own train split withheld from every user (simulation only)."""


def heldout_size(spec: str) -> int | None:
    """N of a public spec ``heldout:N`` (a whole number of at least 1); None for any other spec."""
    head, _, size = spec.partition(":")
    if head != HELDOUT:
        return None
    if not size.isdigit() or int(size) < 1:
        raise ValueError(f"public spec {spec!r}: expected {HELDOUT}:N with N at least 1 records ('none' for no public data)")
    return int(size)


@dataclass(frozen=True)
class EncoderSpec:
    """The local encoder and the projection fitted on public data."""

    encoder: str = "minilm"
    dim: int = DIM_DEFAULT
    """Dimensions of the projection (0: none), :data:`DIM_AUTO` for ``--dim auto`` (opt-in), or :data:`DIM_DEFAULT`
    (not given: the mechanism's default at the run's epsilon, which the run spec writes in its place)."""


_DIM_WORDS = {"auto": DIM_AUTO, "default": DIM_DEFAULT}


def parse_dim(value: Any) -> int:
    """--dim: 'auto' (:data:`DIM_AUTO`), 'default' (:data:`DIM_DEFAULT`) or a whole number of dimensions."""
    if isinstance(value, str) and value.strip().lower() in _DIM_WORDS:
        return _DIM_WORDS[value.strip().lower()]
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"run option 'dim' must be 'auto', 'default' or a whole number, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"run option 'dim' must be 'auto', 'default' or a whole number, got {value!r}") from None


def show_dim(dim: int) -> int | str:
    """--dim as written in a run config (the inverse of :func:`parse_dim`)."""
    return {code: word for word, code in _DIM_WORDS.items()}.get(dim, dim)


def parse_clip(value: Any) -> float:
    """--clip: 'default' (:data:`CLIP_DEFAULT`) or a positive finite radius."""
    if isinstance(value, str) and value.strip().lower() == "default":
        return CLIP_DEFAULT
    try:
        clip = float(value)
    except (TypeError, ValueError):
        clip = math.nan
    if isinstance(value, bool) or not math.isfinite(clip) or clip <= 0:
        raise ValueError(f"run option 'clip' must be 'default' or a positive finite number, got {value!r}")
    return clip


def show_clip(clip: float) -> float | str:
    """--clip as written in a run config (the inverse of :func:`parse_clip`)."""
    return "default" if clip == CLIP_DEFAULT else clip


@dataclass(frozen=True)
class PrivacySpec:
    """The randomizer, its calibration target, the label channel, the enforced budget and the privacy model."""

    mechanism: str = "gaussian"
    mechanism_options: str = ""
    clip: float = CLIP_DEFAULT
    """The L2 clip, or :data:`CLIP_DEFAULT` (not given: the mechanism's default_clip, written in its place)."""
    epsilon: float = 8.0
    sigma: float = 0.0
    delta: float = 1e-5
    user_epsilon: float = 0.0
    labels: str = "public"
    enforce: str = "worst-case"
    privacy_model: str = "local"
    central_clip: float = 1.0
    central_clipping: str = "fixed"
    central_noise: float = 0.0
    central_lr: float = 0.5
    central_epochs: int = 1

    @cached_property
    def mechanism_option_values(self) -> dict[str, Any]:
        """The parsed --mechanism-options: ``key=value`` pairs separated by commas."""
        return parse_mechanism_options(self.mechanism_options)

    @cached_property
    def label_epsilon(self) -> float | None:
        """Randomized-response epsilon of labels, or None when labels are public."""
        if self.labels == "public":
            return None
        kind, _, value = self.labels.partition(":")
        try:
            epsilon = float(value)
        except ValueError:
            epsilon = math.nan
        if kind != "rr" or not math.isfinite(epsilon) or not 0 < epsilon <= MAX_RR_EPSILON:
            raise ValueError(f"--labels must be 'public' or 'rr:<epsilon>' with epsilon in (0, {MAX_RR_EPSILON:g}], got {self.labels!r}")
        return epsilon


@dataclass(frozen=True)
class ScheduleSpec:
    """Rounds, who is asked in each and how often each record may be released; the Flower nodes and their timeout."""

    rounds: int = 1
    evaluate_every: int = 1
    users_per_round: int = 0
    records_per_user_round: int = 0
    releases_per_record: int = 1
    releases_per_query: int = 1
    sampling: str = "all"
    nodes: int = 1
    min_nodes: int = 1
    round_timeout: float = 600.0

    @cached_property
    def train_sampling(self) -> TrainSampling:
        """The parsed --sampling."""
        return TrainSampling.parse(self.sampling)


@dataclass(frozen=True)
class HeterogeneitySpec:
    """The values of every heterogeneity axis's options (fed.heterogeneity.registry), and each axis's setting."""

    values: tuple[tuple[str, Any], ...] = field(
        default_factory=lambda: tuple((option.name, option.default) for _, option in registry.axis_options())
    )

    def value(self, name: str) -> Any:
        """The value of option ``name``."""
        return dict(self.values)[name]

    @cached_property
    def _settings(self) -> dict[str, Any]:
        """The settings parsed so far, by axis name."""
        return {}

    def setting(self, axis: str) -> Any:
        """The setting of the axis named ``axis`` (None: the run does not use it), parsed on first use."""
        if axis not in self._settings:
            (found,) = (a for a in registry.AXES if a.name == axis)
            values = dict(self.values)
            self._settings[axis] = found.parse({option.name: values[option.name] for option in found.options})
        return self._settings[axis]

    def active(self) -> list[tuple[HeterogeneityAxis, Any]]:
        """The axes this run uses, with their settings, in registry order."""
        return [(axis, self.setting(axis.name)) for axis in registry.AXES if self.setting(axis.name) is not None]

    def grouping(self) -> list[tuple[HeterogeneityAxis, Any]]:
        """The axes this run uses that serve groups of users with their own run options (e.g. privacy tiers)."""
        return [(axis, setting) for axis, setting in self.active() if axis.overrides(setting, 0)]

    def grouping_options(self) -> list[tuple[str, Any, Any]]:
        """The options of the :meth:`grouping` axes: name, value and default."""
        return [(o.name, self.value(o.name), o.default) for axis, _ in self.grouping() for o in axis.options]


@dataclass(frozen=True)
class EvaluationSpec:
    """How the classifier is fitted and how users evaluate it (local, or remote inference with up-sampling)."""

    inference: str = "local"
    upsampling_q: float = 1.0
    p_query: float = 1.0
    answers: int = 1
    classifier: str = "lda"
    shrinkage: float = -1.0
    screening: str = "auto"
    weighting: str = "inverse-variance"
    nonprivate_baseline: bool = True
    combined_baseline: bool = False

    @cached_property
    def upsampling(self) -> UpSampling:
        """The parsed inference up-sampling (--upsampling-q, --p-query, --answers)."""
        return UpSampling(float(self.upsampling_q), float(self.p_query), int(self.answers))


@dataclass(frozen=True)
class OutputSpec:
    """Where the run writes, what it saves, and the cache of clean encodings."""

    out: str = ""
    save_reports: bool = False
    cache_dir: str = ""


SECTIONS: dict[str, type] = {
    "data": DataSpec,
    "encoder": EncoderSpec,
    "privacy": PrivacySpec,
    "schedule": ScheduleSpec,
    "evaluation": EvaluationSpec,
    "output": OutputSpec,
}
"""The sections with fixed options, by their name in :class:`fed.configuration.run_spec.RunSpec` (heterogeneity's
options come from its registry)."""



class EncodingSections(Protocol):
    """What a run's records are and how they are randomized: the sections fed.configuration.plan.encoder_spec and
    fed.device.policy.DevicePolicy.from_run read."""

    @property
    def privacy(self) -> PrivacySpec: ...

    @property
    def encoder(self) -> EncoderSpec: ...


class PlanSections(EncodingSections, Protocol):
    """The sections a privacy plan reads (fed.configuration.plan.make_plan)."""

    @property
    def schedule(self) -> ScheduleSpec: ...

    @property
    def evaluation(self) -> EvaluationSpec: ...


class BundleSections(PlanSections, Protocol):
    """What the server's asset bundle is built from (fed.runtime.assets.build_bundle): the plan's sections and
    the seed of what it fits."""

    @property
    def seed(self) -> int: ...


class PublicSections(Protocol):
    """What the server's public data is and is checked against (fed.runtime.assets.load_public, check_public)."""

    @property
    def data(self) -> DataSpec: ...

    @property
    def encoder(self) -> EncoderSpec: ...

    @property
    def seed(self) -> int: ...


class OutputSections(Protocol):
    """Where a run writes and caches (fed.runtime.assets.default_cache_dir)."""

    @property
    def output(self) -> OutputSpec: ...


_OPTION_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


def parse_mechanism_options(text: str) -> dict[str, Any]:
    """``"lambda=100,integer_bits=2"`` -> ``{"lambda": 100, "integer_bits": 2}``; ValueError if malformed."""
    out: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not _OPTION_KEY.match(key) or not raw:
            raise ValueError(f"--mechanism-options: expected key=value pairs separated by commas, got {item!r}")
        if key in out:
            raise ValueError(f"--mechanism-options: {key!r} given twice")
        out[key] = _option_value(raw)
    return out


def _option_value(raw: str) -> Any:
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw
