"""The device owner's policy: what a node's users may release, whatever the server asks.

design.md section 2b: everything from the server (run config, requests, bundles, models) is a
request; the node grants what this policy allows and refuses the rest with a reason. On a
device the policy is a TOML file the owner names in the node config (``policy=/path``);
without one the strict defaults below apply. In a simulation the experimenter writes both
sides, so :meth:`DevicePolicy.from_run` derives each simulated user's policy from the run
options (``ldpfed simulate`` writes it to the run directory as ``policy.toml``).

Keys of the TOML file (all optional; the defaults are the strict device defaults)::

    epsilon_sentence = 1.0      # worst-case budget of each record (sentence level)
    epsilon_user = 10.0         # budget of all releases of the device's records (user level)
    delta = 1e-5                # delta at which every cost is measured
    max_release_epsilon = 1.0   # most one release of one record may cost (default: epsilon_sentence)
    mechanisms = ["gaussian", ...]  # randomizers the device runs (default: DEFAULT_MECHANISMS)
    allow_invalid = false       # run randomizers whose paper's guarantee is wrong (laplace-seed002)
    labels = "rr:1.0"           # label channel: randomized response at this epsilon, or "public"
    evaluation = "none"         # local-evaluation outcomes: "none", or "rr:<eps>" per query and model
    enforce = "worst-case"      # or "amplified": the owner accepts that reports are unlinkable
    memoize = true              # answer a repeated request with the stored report, at no cost
    max_models = 4              # classifiers one evaluate message may apply
    max_events = 32             # distinct privacy events one ledger may hold
    encoders = ["minilm", "bilstm"]  # encoders a setup bundle may name (bilstm: weights the server ships)
    max_dim = 4096              # largest dim (bit encodings) or masks (mixups) a request may name
    max_bundle_bytes = 67108864  # largest setup bundle in bytes (64 MiB, also the most it may say)

Sizes are checked before anything is allocated, built or written: a request naming a larger
``dim`` or ``masks`` is refused before its randomizer is built, and a larger bundle before it is read
(in a simulation ``max_dim`` is at least the run's own dim and masks).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import tomli_w

from fed.randomizers.labels import PublicLabels, RandomizedResponse

DEFAULT_MECHANISMS: tuple[str, ...] = (
    "gaussian", "gaussian-classical", "gaussian-analytic", "laplace", "sue", "oue", "ome",
    "dpie-gaussian", "dpie-laplace",
)
"""Every registered randomizer with a DP guarantee and a floating-point-safe sampler on devices
(texthide has no guarantee; laplace-seed002's is wrong; dchi samples d_chi noise in textbook
floating point, which an owner may accept by naming it in ``mechanisms``)."""

EVALUATION_OFF = "none"
MAX_BUNDLE_BYTES = 64 * 2**20
"""Largest setup bundle a node takes (a policy's max_bundle_bytes may only lower it)."""


@dataclass(frozen=True)
class DevicePolicy:
    """What the device owner allows; see the module docstring for each field."""

    epsilon_sentence: float = 1.0
    epsilon_user: float = 10.0
    delta: float = 1e-5
    max_release_epsilon: float | None = None
    mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS
    allow_invalid: bool = False
    labels: str = "rr:1.0"
    evaluation: str = EVALUATION_OFF
    enforce: str = "worst-case"
    memoize: bool = True
    max_models: int = 4
    max_events: int = 32
    encoders: tuple[str, ...] = ("minilm", "bilstm")
    max_dim: int = 4096
    max_bundle_bytes: int = MAX_BUNDLE_BYTES
    release_floors: Mapping[str, float] = field(default_factory=dict, compare=False)
    """Per kind of release ('train', 'query'): the most one release may cost (simulation: the plan's)."""

    def __post_init__(self) -> None:
        for name in ("epsilon_sentence", "epsilon_user"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or math.isnan(value) or value <= 0:
                raise ValueError(f"policy: {name} must be a positive number (inf allowed), got {value!r}")
        if not isinstance(self.delta, (int, float)) or not 0 < self.delta < 1:
            raise ValueError(f"policy: delta must lie in (0, 1), got {self.delta!r}")
        floor = self.max_release_epsilon
        if floor is not None and (not isinstance(floor, (int, float)) or math.isnan(floor) or floor <= 0):
            raise ValueError(f"policy: max_release_epsilon must be a positive number, got {floor!r}")
        from fed.randomizers import RANDOMIZERS

        unknown = sorted(set(self.mechanisms) - set(RANDOMIZERS))
        if unknown:
            raise ValueError(f"policy: unknown mechanisms {unknown}; available: {sorted(RANDOMIZERS)}")
        object.__setattr__(self, "mechanisms", tuple(self.mechanisms))
        object.__setattr__(self, "encoders", tuple(self.encoders))
        parse_channel("labels", self.labels, allow_public=True)
        if self.evaluation != EVALUATION_OFF:
            parse_channel("evaluation", self.evaluation, allow_public=False)
        if self.enforce not in ("worst-case", "amplified"):
            raise ValueError(f"policy: enforce must be worst-case or amplified, got {self.enforce!r}")
        for name in ("max_models", "max_events", "max_dim", "max_bundle_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"policy: {name} must be a positive integer, got {value!r}")
        if self.max_bundle_bytes > MAX_BUNDLE_BYTES:
            raise ValueError(f"policy: max_bundle_bytes must be at most {MAX_BUNDLE_BYTES}, got {self.max_bundle_bytes!r}")
        for name in ("allow_invalid", "memoize"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"policy: {name} must be true or false")

    # -- reading and writing -------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "DevicePolicy":
        """Read a policy TOML file; ValueError naming an unknown key or a bad value."""
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except OSError as error:
            raise ValueError(f"policy file {path} cannot be read: {error}") from None
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"policy file {path} is not valid TOML: {error}") from None
        return cls.from_mapping(data, str(path))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "policy") -> "DevicePolicy":
        """Build from plain values (a parsed TOML table)."""
        known = {f.name for f in fields(cls)} - {"release_floors"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: unknown keys {unknown}; known: {sorted(known)}")
        values = dict(data)
        for name in ("epsilon_sentence", "epsilon_user"):
            if values.get(name) == "inf":
                values[name] = math.inf
        for name in ("mechanisms", "encoders"):
            if name in values:
                if not isinstance(values[name], list) or not all(isinstance(m, str) for m in values[name]):
                    raise ValueError(f"{source}: {name} must be a list of names")
                values[name] = tuple(values[name])
        return cls(**values)

    def to_toml(self) -> str:
        """The policy as a TOML file (what ``ldpfed device init`` and ``ldpfed simulate`` write)."""
        data = {k: v for k, v in asdict(self).items() if k != "release_floors" and v is not None}
        data["mechanisms"], data["encoders"] = list(self.mechanisms), list(self.encoders)
        for name in ("epsilon_sentence", "epsilon_user"):
            if math.isinf(data[name]):
                data[name] = "inf"
        floors = "".join(f"# simulation floor per {k} release: epsilon {v:.6g}\n" for k, v in self.release_floors.items())
        return floors + tomli_w.dumps(data)

    # -- what it grants --------------------------------------------------------------------
    def floor(self, kind: str) -> float:
        """The most one release of ``kind`` may cost one record (epsilon at :attr:`delta`)."""
        if kind in self.release_floors:
            return float(self.release_floors[kind])
        return float(self.max_release_epsilon if self.max_release_epsilon is not None else self.epsilon_sentence)

    def label_channel(self, num_labels: int) -> PublicLabels | RandomizedResponse:
        """How training labels leave the device."""
        epsilon = parse_channel("labels", self.labels, allow_public=True)
        return PublicLabels(num_labels) if epsilon is None else RandomizedResponse(epsilon, num_labels)

    def evaluation_channel(self) -> RandomizedResponse | None:
        """Binary randomized response on each query's correct/incorrect bit, or None (nothing leaves)."""
        if self.evaluation == EVALUATION_OFF:
            return None
        return RandomizedResponse(parse_channel("evaluation", self.evaluation, allow_public=False), 2)

    def refusal(self, randomizer: Any) -> str | None:
        """Why this policy refuses ``randomizer`` (None: allowed)."""
        name = randomizer.params()["mechanism"]
        if name not in self.mechanisms:
            return f"mechanism {name!r} is not allowed by this device's policy (allowed: {', '.join(self.mechanisms)})"
        if getattr(randomizer, "invalid", False) and not self.allow_invalid:
            return f"mechanism {name!r} has no valid guarantee as published; this device's policy does not allow it"
        return None

    def encoder_refusal(self, spec: str) -> str | None:
        """Why this policy refuses a bundle whose encoder is ``spec`` (None: allowed).

        ``tokens:<L>:<encoder>`` (the embedding layer of an encoder) is allowed where the encoder is.
        """
        from fed.encoders.token_matrix import split_spec

        tokens = split_spec(spec) if spec.startswith("tokens:") else None
        if (tokens[1] if tokens else spec) not in self.encoders:
            return f"encoder {spec!r} is not allowed by this device's policy (allowed: {', '.join(self.encoders)})"
        return None

    @classmethod
    def from_run(cls, config: Any, plan: Any) -> "DevicePolicy":
        """A simulated user's policy: what the run options grant (the experimenter writes both sides)."""
        return cls(
            epsilon_sentence=plan.budget.epsilon_sentence,
            epsilon_user=plan.budget.epsilon_user,
            delta=plan.budget.delta,
            mechanisms=(config.mechanism,),
            allow_invalid=config.mechanism_option_values.get("allow_invalid") is True,
            labels=config.labels if config.label_epsilon is None else f"rr:{config.label_epsilon!r}",
            evaluation=EVALUATION_OFF,
            enforce=config.enforce,
            memoize=False,
            max_models=8,
            max_events=64,
            encoders=tuple(dict.fromkeys(("minilm", "bilstm", config.encoder))),
            max_dim=max([cls.max_dim, *_sizes(plan.train), *_sizes(plan.query)]),
            release_floors={kind: plan.limits(kind).max_release_epsilon for kind in ("train", "query")},
        )


def _sizes(randomizer: Any) -> list[int]:
    """The values of a randomizer's size parameters (what its requests ask a node to allocate)."""
    params = randomizer.params()
    return [int(params[name]) for name in type(randomizer).size_params if name in params]


def parse_channel(name: str, spec: Any, allow_public: bool) -> float | None:
    """``'rr:<epsilon>'`` -> epsilon; ``'public'`` -> None where allowed; ValueError otherwise."""
    if allow_public and spec == "public":
        return None
    kind, _, value = str(spec).partition(":")
    try:
        epsilon = float(value)
    except ValueError:
        epsilon = math.nan
    if kind != "rr" or not math.isfinite(epsilon) or epsilon <= 0:
        choices = "'public' or 'rr:<epsilon>'" if allow_public else "'none' or 'rr:<epsilon>'"
        raise ValueError(f"policy: {name} must be {choices}, got {spec!r}")
    return epsilon
