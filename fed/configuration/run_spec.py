"""The run spec: every option of one run, parsed once into typed sections and validated once.

The same names (with hyphens) appear in pyproject's [tool.flwr.app.config], in ``flwr run
--run-config``, as ``ldpfed simulate`` flags and in a run directory's config.json:
:meth:`RunSpec.from_mapping` reads them (a node reads them from an untrusted server, design.md
section 2b: any problem is a ValueError naming it) and :meth:`RunSpec.to_mapping` writes them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ldpfed.fed.learning.classifier import SCREENING, WEIGHTINGS
from ldpfed.fed.configuration import config
from ldpfed.fed.heterogeneity import registry
from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis
from ldpfed.fed.device.policy import MAX_DELTA
from ldpfed.fed.configuration.option import Option, flag, unknown_option
from ldpfed.fed.configuration.sections import (
    CLIP_DEFAULT,
    DIM_AUTO,
    DIM_DEFAULT,
    SECTIONS,
    DataSpec,
    EncoderSpec,
    EvaluationSpec,
    HeterogeneitySpec,
    OutputSpec,
    PrivacySpec,
    ScheduleSpec,
    heldout_size,
    parse_clip,
    parse_dim,
    show_clip,
    show_dim,
)

ORDER: tuple[str, ...] = (
    "data", "public", "projection_public", "users", "partition", "train_limit", "encoder", "dim", "mechanism", "mechanism_options", "clip",
    "epsilon", "tiers", "device_tiers", "sigma", "delta", "user_epsilon", "labels", "rounds", "evaluate_every",
    "users_per_round", "records_per_user_round", "releases_per_record", "releases_per_query", "sampling",
    "availability", "dropout", "device_speed", "behavior_trace", "deadline", "enforce", "upsampling_q", "p_query",
    "answers", "inference", "classifier", "shrinkage", "screening", "weighting", "nodes", "min_nodes", "round_timeout", "seed", "out",
    "save_reports", "cache_dir", "nonprivate_baseline", "combined_baseline", "privacy_model", "central_clip", "central_clipping",
    "central_noise", "central_lr", "central_epochs",
)
"""The options in the order of ``ldpfed simulate --help`` and config.json; options of an axis added to the
registry and not listed here follow them."""

PLUGIN_OPTIONS = "plugin-options"
"""The run-config key that carries the options of plugin axes (fed.heterogeneity.registry) as one JSON object:
Flower accepts only the keys pyproject's [tool.flwr.app.config] lists, where it is "" (none)."""

PRIVACY_MODELS = ("local", "shuffle", "central")
"""--privacy-model: local reports (the default), the same reports through a shuffler, or central DP-FedAvg."""

SEED = Option("seed", int, 0, config.HELP["seed"])
"""The run seed, read by every section's draws."""
_KINDS = {"int": int, "float": float, "str": str, "bool": bool}
_PARSERS = {"dim": (parse_dim, show_dim), "clip": (parse_clip, show_clip)}
"""Options whose values from outside are not just their type: (parse, show) for Option."""


def section_options() -> dict[str, tuple[str, Option]]:
    """Every option but the heterogeneity axes', with the name of its section ("" for the seed)."""
    options = {SEED.name: ("", SEED)}
    texts = config.HELP  # the mechanism's lists the randomizers registered now
    for section, cls in SECTIONS.items():
        for f in fields(cls):
            parse, show = _PARSERS.get(f.name, (None, None))
            options[f.name] = (section, Option(f.name, _KINDS[f.type], f.default, texts[f.name], parse=parse, show=show))
    return options


def options() -> tuple[Option, ...]:
    """Every run option, in :data:`ORDER`."""
    known = {name: option for name, (_, option) in section_options().items()}
    known.update((option.name, option) for _, option in registry.axis_options())
    return tuple(known[name] for name in ORDER if name in known) + tuple(o for name, o in known.items() if name not in ORDER)


@dataclass(frozen=True)
class RunSpec:
    """Every run option in its section; built once (:meth:`of`, :meth:`from_mapping`) and validated then.

    An option is read through its section: ``spec.data.users``, ``spec.privacy.epsilon`` (``ldpfed simulate --help``
    lists every option; each section's class lists its own).

    Attributes
    ----------
    data:
        The task and its users: dataset, public data, users, partition, train limit (:class:`DataSpec`).
    encoder:
        The local encoder and its projection (:class:`EncoderSpec`).
    privacy:
        Randomizer, clipping, epsilon, delta, tiers, label privacy and budgets (:class:`PrivacySpec`).
    schedule:
        Rounds, participation and releases per record (:class:`ScheduleSpec`).
    heterogeneity:
        The values of the heterogeneity axes' options, by option name (:class:`HeterogeneitySpec`).
    evaluation:
        What is evaluated and how often (:class:`EvaluationSpec`).
    output:
        Where the run writes and what it saves (:class:`OutputSpec`).
    seed:
        The run's seed.
    read_task:
        See the attribute's own note below.
    """

    data: DataSpec = field(default_factory=DataSpec)
    encoder: EncoderSpec = field(default_factory=EncoderSpec)
    privacy: PrivacySpec = field(default_factory=PrivacySpec)
    schedule: ScheduleSpec = field(default_factory=ScheduleSpec)
    heterogeneity: HeterogeneitySpec = field(default_factory=HeterogeneitySpec)
    evaluation: EvaluationSpec = field(default_factory=EvaluationSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    seed: int = 0
    read_task: bool = field(default=True, compare=False, repr=False)
    """Whether resolving a default may read the task's schema and record count from its folder (the server's and
    the experimenter's side). A node parses the server's run config with False: the config is the server's request,
    and a folder it names on the device is read for nothing (design.md section 2b)."""

    def __getattr__(self, name: str) -> Any:
        """An option asked for on the spec itself (``spec.users``) instead of its section: say which section."""
        for section in SECTIONS:
            if name in {f.name for f in fields(SECTIONS[section])}:
                raise AttributeError(f"RunSpec has no attribute {name!r}: the option is in the {section} section, spec.{section}.{name}")
        raise AttributeError(f"RunSpec has no attribute {name!r} (sections: {', '.join(SECTIONS)}, heterogeneity, seed)")

    @classmethod
    def of(cls, read_task: bool = True, **values: Any) -> RunSpec:
        """The spec of the given options (underscored names, values of their types; the others take their defaults);
        ``read_task``: see the attribute."""
        sections = section_options()
        axis_names = {option.name for _, option in registry.axis_options()}
        parts: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
        for name, value in values.items():
            if name in sections:
                section = sections[name][0]
                if section:
                    parts[section][name] = value
            elif name not in axis_names:
                raise ValueError(unknown_option(name.replace("_", "-"), [*sections, *axis_names]))
        heterogeneity = tuple((option.name, values.get(option.name, option.default)) for _, option in registry.axis_options())
        return cls(
            **{name: SECTIONS[name](**kwargs) for name, kwargs in parts.items()},
            heterogeneity=HeterogeneitySpec(heterogeneity),
            seed=values.get("seed", SEED.default),
            read_task=read_task,
        )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], read_task: bool = True) -> RunSpec:
        """Build from a mapping with hyphenated or underscored keys (a run config); unknown keys are errors;
        ``read_task``: see the attribute."""
        known = {option.name: option for option in options()}
        kwargs: dict[str, Any] = {}
        values = {**values}
        packed = values.pop(PLUGIN_OPTIONS, values.pop(PLUGIN_OPTIONS.replace("-", "_"), ""))
        try:
            plugin = json.loads(packed) if packed else {}
        except (TypeError, json.JSONDecodeError):
            plugin = None
        if not isinstance(plugin, dict):
            raise ValueError(f"run option {PLUGIN_OPTIONS!r} must be a JSON object of plugin axes' options, got {packed!r}")
        for key, value in (*values.items(), *plugin.items()):
            name = key.replace("-", "_")
            if name not in known:
                raise ValueError(unknown_option(key, known))
            kwargs[name] = known[name].coerce(value, key)
        return cls.of(read_task=read_task, **kwargs)

    def flat(self) -> dict[str, Any]:
        """Every option's value by its underscored name, in :data:`ORDER`."""
        values = {SEED.name: self.seed, **dict(self.heterogeneity.values)}
        for section in SECTIONS:
            part = getattr(self, section)
            values.update((f.name, getattr(part, f.name)) for f in fields(part))
        return {option.name: values[option.name] for option in options() if option.name in values}

    def to_mapping(self) -> dict[str, Any]:
        """Hyphenated keys, as in [tool.flwr.app.config]: what Flower carries to every node (plugin axes'
        options packed in :data:`PLUGIN_OPTIONS`)."""
        known = {option.name: option for option in options()}
        plugin = registry.plugin_option_names()
        mapping = {name.replace("_", "-"): known[name].to_config(value) for name, value in self.flat().items() if name not in plugin}
        if plugin:
            mapping[PLUGIN_OPTIONS] = json.dumps({name: known[name].to_config(self.flat()[name]) for name in sorted(plugin)}, separators=(",", ":"))
        return mapping

    def with_options(self, **changes: Any) -> RunSpec:
        """The same run with ``changes`` (underscored names), validated anew."""
        return RunSpec.of(read_task=self.read_task, **{**self.flat(), **changes})

    def __post_init__(self) -> None:
        self._resolve_defaults()
        data, privacy, schedule, evaluation = self.data, self.privacy, self.schedule, self.evaluation
        for part, names in (
            (data, ("users",)), (schedule, ("rounds", "evaluate_every", "releases_per_query")),
            (evaluation, ("answers",)), (schedule, ("nodes", "min_nodes")),
        ):
            for name in names:
                if getattr(part, name) < 1:
                    raise ValueError(f"{flag(name)} must be at least 1, got {getattr(part, name)}")
        for part, names in (
            (data, ("train_limit",)),
            (schedule, ("users_per_round", "records_per_user_round", "releases_per_record")),
        ):
            for name in names:
                if getattr(part, name) < 0:
                    raise ValueError(f"{flag(name)} must be non-negative (0 means 'all' / 'off')")
        if schedule.min_nodes > schedule.nodes:
            raise ValueError(f"--min-nodes {schedule.min_nodes} exceeds --nodes {schedule.nodes}")
        for part, name in ((privacy, "clip"), (privacy, "delta"), (schedule, "round_timeout")):
            if not math.isfinite(getattr(part, name)) or getattr(part, name) <= 0:
                raise ValueError(f"{flag(name)} must be a positive finite number")
        if not privacy.delta <= MAX_DELTA:  # every simulated user's policy takes the run's delta (fed.device.policy)
            raise ValueError(f"--delta must be at most {MAX_DELTA:g} (a device policy's range, fed.device.policy)")
        if self.encoder.dim < DIM_AUTO:
            raise ValueError(f"--dim must be 'auto', 'default' or a non-negative number of dimensions (0: no projection), got {self.encoder.dim}")
        if self.encoder.dim > 0 and data.projection_source == "none":
            raise ValueError("--dim fits a projection on public data: give --public (or --projection-public), or --dim 0")
        if data.projection_public and self.encoder.dim == DIM_AUTO:
            raise ValueError("--projection-public applies to a given --dim; --dim auto chooses on the labelled --public")
        for spec in (data.public, data.projection_public):
            heldout_size(spec)  # validates heldout:N
        if schedule.nodes > data.users:
            raise ValueError(f"--nodes {schedule.nodes} exceeds --users {data.users}: every node hosts at least one user")
        if privacy.sigma == 0 and privacy.epsilon <= 0:
            raise ValueError("give --epsilon > 0 (sigma calibrated) or --sigma > 0")
        for name in ("epsilon", "sigma", "user_epsilon"):
            if not math.isfinite(getattr(privacy, name)) or getattr(privacy, name) < 0:
                raise ValueError(f"{flag(name)} must be a finite non-negative number, got {getattr(privacy, name)!r}")
        self._check_mechanism()
        self._check_axes(options_set=True)  # axes that set their groups' run options: checked with the mechanism
        if evaluation.inference not in ("local", "remote"):
            raise ValueError(f"--inference must be local or remote, got {evaluation.inference!r}")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", evaluation.classifier):  # which exist: the server's registry (fed.learning.classifiers)
            raise ValueError(f"--classifier must be a classifier's name (letters, digits, '-', '_'), got {evaluation.classifier!r}")
        if evaluation.shrinkage > 1:
            raise ValueError("--shrinkage must be at most 1 (negative: automatic)")
        if evaluation.screening not in SCREENING:
            raise ValueError(f"--screening must be one of {', '.join(SCREENING)}, got {evaluation.screening!r}")
        if evaluation.weighting not in WEIGHTINGS:
            raise ValueError(f"--weighting must be one of {', '.join(WEIGHTINGS)}, got {evaluation.weighting!r}")
        privacy.label_epsilon  # validates --labels
        sampling = schedule.train_sampling  # validates --sampling
        self._check_axes(options_set=False)
        evaluation.upsampling  # validates --upsampling-q, --p-query, --answers
        if sampling.kind != "all" and schedule.records_per_user_round:
            raise ValueError("--records-per-user-round applies to --sampling all; use --sampling fixed:<m> instead")
        if privacy.enforce not in ("worst-case", "amplified"):
            raise ValueError(f"--enforce must be worst-case or amplified, got {privacy.enforce!r}")
        if privacy.enforce == "amplified":
            if sampling.kind == "fixed":
                raise ValueError(
                    "--enforce amplified needs Poisson sampling (--sampling poisson:<p> or all): dp_accounting "
                    "has no PLD bound for fixed-size sampling without replacement"
                )
            if privacy.label_epsilon is not None:
                raise ValueError("--enforce amplified covers the Gaussian reports only; use --labels public")
            if schedule.records_per_user_round:
                raise ValueError("--enforce amplified: a cap on records per round breaks Poisson sampling; drop it")
        self._check_privacy_model()

    def _check_axes(self, options_set: bool) -> None:
        """Parse and check the options of each heterogeneity axis that sets (``options_set``) or does not set its
        groups' run options (:meth:`~fed.heterogeneity.axis.HeterogeneityAxis.overrides`), in registry order."""
        for axis in registry.AXES:
            if options_set == (type(axis).overrides is not HeterogeneityAxis.overrides):
                setting = self.heterogeneity.setting(axis.name)
                if setting is not None:
                    axis.check(setting, self)

    def _check_mechanism(self) -> None:
        """--mechanism and its options, which the randomizer checks against the run."""
        from ldpfed.fed.randomizers import RANDOMIZERS  # here, not at the top: importing this module stays light

        privacy = self.privacy
        self._mechanism_class()  # validates --mechanism
        options = privacy.mechanism_option_values  # validates --mechanism-options
        simulated = RANDOMIZERS[privacy.mechanism].sigma_settable and privacy.privacy_model != "central"
        if self.encoder.dim == DIM_AUTO and (self.data.public == "none" or not simulated):  # no choice for the server
            object.__setattr__(self, "encoder", replace(self.encoder, dim=self._default_dim()))
        if "clip" in options:
            raise ValueError("--mechanism-options: give the clip as --clip")
        RANDOMIZERS[privacy.mechanism].run_options(privacy.clip, self.encoder.dim, options, self.encoder.encoder)
        if not RANDOMIZERS[privacy.mechanism].sigma_settable:
            settable = ", ".join(name for name, cls in RANDOMIZERS.items() if cls.sigma_settable)
            if privacy.sigma > 0:
                raise ValueError(f"--sigma applies to {settable}; give --epsilon for {privacy.mechanism}")
            if privacy.enforce == "amplified":
                raise ValueError(f"--enforce amplified is implemented for {settable} only")

    def _mechanism_class(self) -> type:
        """The --mechanism's randomizer class; ValueError naming the choices when it is not available."""
        from ldpfed.fed.randomizers import RANDOMIZERS

        if self.privacy.mechanism not in RANDOMIZERS:
            raise ValueError(f"--mechanism {self.privacy.mechanism!r} is not available; choose one of {', '.join(RANDOMIZERS)}")
        return RANDOMIZERS[self.privacy.mechanism]

    def _resolve_defaults(self) -> None:
        """--dim and --clip not given: their defaults written in their place, so that config.json and every
        node see the values used (the mechanism's default_clip; :meth:`_default_dim`)."""
        if self.privacy.clip == CLIP_DEFAULT:
            object.__setattr__(self, "privacy", replace(self.privacy, clip=self._mechanism_class().default_clip))
        if self.encoder.dim == DIM_DEFAULT:
            object.__setattr__(self, "encoder", replace(self.encoder, dim=self._default_dim()))

    def _default_dim(self) -> int:
        """The dimension where the server does not choose one (--dim not given, or --dim auto where the choice
        is not simulated): 0 without public data to fit the projection on (--projection-public, else --public); with
        --privacy-model central (clean encodings) the base randomizer's default; else the mechanism's default_dim at
        the run's --epsilon (0 when --sigma sets the noise), the task's class count as its schema gives it
        (fed.data.loaders.label_schema) and its training record count (public, design.md section 2; --train-limit caps
        it); neither is read without :attr:`read_task`."""
        from ldpfed.fed.data.loaders import label_schema, train_record_count
        from ldpfed.fed.randomizers.base import Randomizer

        privacy = self.privacy
        if self.data.projection_source == "none":
            return 0
        if privacy.privacy_model == "central":
            return Randomizer.default_dim(privacy.epsilon)
        labels = label_schema(self.data.data) if self.read_task else None
        classes = None if labels is None else len(labels)
        mechanism = self._mechanism_class()
        records = None
        if classes is not None and mechanism.default_dim_reads_records(classes):
            records = train_record_count(self.data.data)
            if records is not None and self.data.train_limit:
                records = min(records, self.data.train_limit)
        return mechanism.default_dim(privacy.epsilon if privacy.sigma == 0 else 0.0, classes, records)

    def _check_privacy_model(self) -> None:
        """--privacy-model and its options (docs/privacy_models.md)."""
        privacy, evaluation = self.privacy, self.evaluation
        if privacy.privacy_model not in PRIVACY_MODELS:
            raise ValueError(f"--privacy-model must be one of {', '.join(PRIVACY_MODELS)}, got {privacy.privacy_model!r}")
        if privacy.privacy_model == "shuffle" and evaluation.inference == "remote":
            raise ValueError("--privacy-model shuffle shuffles training reports; remote inference answers each query to its "
                             "sender, so it cannot be shuffled: use --inference local")
        for name in ("central_clip", "central_lr"):
            if not math.isfinite(getattr(privacy, name)) or getattr(privacy, name) <= 0:
                raise ValueError(f"{flag(name)} must be a positive finite number")
        if not math.isfinite(privacy.central_noise) or privacy.central_noise < 0:
            raise ValueError("--central-noise must be a finite non-negative number (0: calibrated to --epsilon)")
        if privacy.central_clipping not in ("fixed", "adaptive"):
            raise ValueError(f"--central-clipping must be fixed or adaptive, got {privacy.central_clipping!r}")
        if privacy.central_epochs < 1:
            raise ValueError("--central-epochs must be at least 1")
        if evaluation.combined_baseline and (evaluation.classifier, evaluation.weighting) != ("lda", "inverse-variance"):
            raise ValueError(
                "--combined-baseline adds the public data to the noise-aware discriminant as one more group: it needs "
                f"--classifier lda and --weighting inverse-variance, got {evaluation.classifier!r} and {evaluation.weighting!r}"
            )
        if privacy.privacy_model != "central":
            return
        if self.schedule.nodes != self.data.users:
            raise ValueError(
                f"--privacy-model central clips and noises one update per Flower node: give --nodes {self.data.users} "
                f"(one user per node, so the guarantee is user-level), got --nodes {self.schedule.nodes}"
            )
        if privacy.central_noise == 0 and privacy.epsilon <= 0:
            raise ValueError("--privacy-model central: give --epsilon > 0 (user-level; noise calibrated) or --central-noise > 0")
        grouping = self.heterogeneity.grouping_options()  # e.g. --tiers
        for name, value, default in (("inference", evaluation.inference, "local"), ("labels", privacy.labels, "public"), *grouping,
                                     ("classifier", evaluation.classifier, "lda"), ("combined_baseline", evaluation.combined_baseline, False)):
            if value != default:
                raise ValueError(f"--privacy-model central trains on clean local data: {flag(name)} {value!r} does not apply")
