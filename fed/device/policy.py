"""The device owner's policy: what a node's users may release, whatever the server asks.

design.md section 2b: everything from the server (run config, requests, bundles, models) is a
request; the node grants what this policy allows and refuses the rest with a reason. On a
device the policy is a TOML file the owner names in the node config (``policy=/path``);
without one the strict defaults below apply. In a simulation the experimenter writes both
sides, so :meth:`DevicePolicy.from_run` derives each simulated user's policy from the run
options (``ldpfed simulate`` writes it to the run directory as ``policy.toml``).

Keys of the TOML file (all optional; the defaults are the strict device defaults), with the
values each accepts (:data:`RULES`; anything else, a boolean for a number included, is refused
with the key named)::

    epsilon_sentence = 1.0      # worst-case budget of each record (sentence level); > 0, or inf
    epsilon_user = 10.0         # budget of all releases of the device's records (user level); > 0, or inf
    delta = 1e-5                # delta at which every cost is measured; in (0, 1e-2]
    max_release_epsilon = 1.0   # most one release of one record may cost (default: epsilon_sentence); > 0, or inf
    min_release_epsilon = 0.03125  # least one release of one record may cost (default: min(floor, budgets, 1) / max_events); >= 0
    mechanisms = ["gaussian", ...]  # randomizers the device runs (default: default_mechanisms(), built-ins only); known names
    allow_invalid = false       # run randomizers whose paper's guarantee is wrong (laplace-seed002); true/false
    labels = "rr:1.0"           # label channel: randomized response at epsilon in (0, 20], or "public"
    evaluation = "none"         # local-evaluation outcomes: "none", or "rr:<eps>" (eps in (0, 20]) per query and model
    enforce = "worst-case"      # or "amplified": the owner accepts that reports are unlinkable (needs memoize = false)
    memoize = true              # answer a repeated training request with the stored report, at no cost; true/false
    max_models = 4              # classifiers one evaluate message may apply; 1 to 64
    max_events = 32             # distinct privacy events one ledger may hold; 1 to 1024
    encoders = ["minilm", "bilstm"]  # encoders a setup bundle may name (bilstm: weights the server ships; any other: listed exactly, an absolute path or a Hub id)
    tuned_encoders = ["<sha256>", ...]  # stage-1 MiniLM weights a bundle may ship, by fingerprint (default: none)
    max_dim = 4096              # largest dim (bit encodings) or masks (mixups) a request may name; 1 to 2**20
    max_bundle_bytes = 67108864  # largest setup bundle in bytes; 1 to 64 MiB
    min_upsampling_q = 0.1      # least true-data rate of remote inference's up-sampling (at most 9 fictitious queries per true one); (0, 1]
    max_stored_bundles = 4      # bundles whose unpacked files, record set and encodings the device keeps (least recently used removed); 1 to 64
    num_labels = 2              # size of the label set where the data has no labels.txt (default: none, setup refused); 2 to 65536

Why these ranges. delta is the probability that the epsilon bound fails outright: a mechanism
that publishes each record verbatim with probability delta satisfies (0, delta)-DP, so above
1e-2 (one sentence in a hundred) the figure guarantees nothing. Randomized response at epsilon
20 keeps the true value with probability 1 - 2e-9 per bit (binary): already the same as
"public", which an owner can say plainly; beyond it e^epsilon leaves floating point (rr:1e308).
Budgets and the per-release cap have no upper bound (inf: no cap), but must be numbers a
float holds (a 400-digit integer is refused, not rounded).

A release costing less than ``min_release_epsilon`` is refused: each distinct privacy event takes one of the
ledger's ``max_events`` slots for good (the cap bounds the work of composing a ledger), so without a least
cost a server could fill the cap with releases of negligible cost (32 Gaussians at sigma 1e4, epsilon 9e-4
in all) and have every later request with a new event refused, in every later run. With the default
(the smallest of the per-release floor, the budgets and 1, over ``max_events``), the releases that fill the
cap cost at least that smallest figure in all: the whole of the default budget (epsilon 1), or of a smaller one.

Sizes are checked before anything is allocated, built or written: a request naming a larger
``dim`` or ``masks`` is refused before its randomizer is built, and a larger bundle before it is read
(in a simulation ``max_dim`` is at least the run's own dim and masks).

Shipped transformer weights (``minilm-tuned``, fed.encoders.tuned) replace layers of the model the
device runs on its records, so the owner allows them one by one: ``tuned_encoders`` lists the
SHA-256 of each allowed file (the server prints it when it builds the bundle, fed.runtime.assets); a bundle
whose weights are not listed is refused before any of its files is read (:meth:`DevicePolicy.bundle_refusal`),
and ``minilm-tuned`` also needs ``minilm`` in ``encoders``.

What an encoder name loads is decided in one place, fed.encoders.resolver: built-in names are what they
are (MiniLM as installed, the bundle's BiLSTM, MiniLM with shipped layers by digest); any other name is
loaded only if ``encoders`` lists it exactly, from an absolute folder or the local Hugging Face cache,
never from the node's working directory.
"""

from __future__ import annotations

import math
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomli_w

from ldpfed.fed.randomizers import BUILTIN, RANDOMIZERS
from ldpfed.fed.randomizers.labels import PublicLabels, RandomizedResponse

if TYPE_CHECKING:
    from ldpfed.fed.configuration.plan import PrivacyPlan
    from ldpfed.fed.configuration.sections import EncodingSections


def default_mechanisms() -> tuple[str, ...]:
    """Every built-in randomizer whose class says a device runs it by default
    (:meth:`~fed.randomizers.base.Randomizer.device_default`: a guarantee that holds as published and a
    floating-point-safe sampler; texthide has no guarantee, laplace-seed002's is wrong, dchi and snd
    sample d_chi noise in textbook floating point, which an owner may accept by naming them in ``mechanisms``).
    A plugin's randomizer (fed.randomizers.plugins) is never among them, whatever its class says: a device
    runs it only if its owner's policy names it."""
    return tuple(name for name, cls in RANDOMIZERS.items() if name in BUILTIN and cls.device_default())


EVALUATION_OFF = "none"
MAX_BUNDLE_BYTES = 64 * 2**20
"""Largest setup bundle a node takes (a policy's max_bundle_bytes may only lower it)."""
MAX_DELTA = 1e-2
"""Largest delta a policy may set (module docstring: why)."""
MAX_DIM = 2**20
"""Largest max_dim a policy may set: a million bits or masks per report."""
MAX_LABELS = 2**16
"""Largest label set a policy may name."""
MAX_RR_EPSILON = 20.0
"""Largest epsilon of a randomized-response channel (labels, evaluation; module docstring: why)."""


def _number(value: Any) -> bool:
    """A real number a float holds (not a boolean, not NaN, no integer beyond the float range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return False
    return isinstance(value, float) or abs(value) <= sys.float_info.max


def _positive(value: Any) -> bool:
    return _number(value) and value > 0


def _rr_epsilon(spec: Any) -> float | None:
    """The epsilon of ``'rr:<epsilon>'`` within (0, MAX_RR_EPSILON]; None for anything else."""
    kind, _, value = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    try:
        epsilon = float(value)
    except ValueError:
        return None
    return epsilon if kind == "rr" and 0 < epsilon <= MAX_RR_EPSILON else None


def _count(top: int) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= top


def _names(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(name, str) for name in value)


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _fingerprints(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) and re.fullmatch("[0-9a-f]{64}", v) for v in value)


RR = f"'rr:<epsilon>' with epsilon in (0, {MAX_RR_EPSILON:g}]"
RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "epsilon_sentence": (_positive, "a positive number or inf"),
    "epsilon_user": (_positive, "a positive number or inf"),
    "delta": (lambda v: _number(v) and 0 < v <= MAX_DELTA, f"a number in (0, {MAX_DELTA:g}]"),
    "max_release_epsilon": (lambda v: v is None or _positive(v), "a positive number or inf"),
    "min_release_epsilon": (lambda v: v is None or (_number(v) and 0 <= v < math.inf), "a finite number >= 0 (0: no least)"),
    "mechanisms": (_names, "a list of mechanism names"),
    "allow_invalid": (_flag, "true or false"),
    "labels": (lambda v: v == "public" or _rr_epsilon(v) is not None, f"'public' or {RR}"),
    "evaluation": (lambda v: v == EVALUATION_OFF or _rr_epsilon(v) is not None, f"'{EVALUATION_OFF}' or {RR}"),
    "enforce": (lambda v: v in ("worst-case", "amplified"), "'worst-case' or 'amplified'"),
    "memoize": (_flag, "true or false"),
    "max_models": (_count(64), "an integer from 1 to 64"),
    "max_events": (_count(1024), "an integer from 1 to 1024"),
    "encoders": (_names, "a list of encoder names"),
    "tuned_encoders": (_fingerprints, "a list of SHA-256 fingerprints (64 lowercase hex digits each)"),
    "max_dim": (_count(MAX_DIM), f"an integer from 1 to {MAX_DIM}"),
    "max_bundle_bytes": (_count(MAX_BUNDLE_BYTES), f"an integer from 1 to {MAX_BUNDLE_BYTES} (64 MiB)"),
    "min_upsampling_q": (lambda v: _number(v) and 0 < v <= 1, "a number in (0, 1]"),
    "max_stored_bundles": (_count(64), "an integer from 1 to 64"),
    "num_labels": (lambda v: v is None or (_count(MAX_LABELS)(v) and v >= 2), f"an integer from 2 to {MAX_LABELS}"),
}
"""Each policy key: the test its value must pass, and what it accepts (the refusal's words)."""


@dataclass(frozen=True)
class DevicePolicy:
    """What the device owner allows; see the module docstring for each field."""

    epsilon_sentence: float = 1.0
    epsilon_user: float = 10.0
    delta: float = 1e-5
    max_release_epsilon: float | None = None
    min_release_epsilon: float | None = None
    mechanisms: tuple[str, ...] = field(default_factory=default_mechanisms)
    allow_invalid: bool = False
    labels: str = "rr:1.0"
    evaluation: str = EVALUATION_OFF
    enforce: str = "worst-case"
    memoize: bool = True
    max_models: int = 4
    max_events: int = 32
    encoders: tuple[str, ...] = ("minilm", "bilstm")
    tuned_encoders: tuple[str, ...] = ()
    max_dim: int = 4096
    max_bundle_bytes: int = MAX_BUNDLE_BYTES
    min_upsampling_q: float = 0.1
    """Least true-data rate q of an up-sampled query step: a device makes round(n (1 - q) / q) fictitious queries for
    its n true ones and releases each through the query randomizer (q = 1e-3: 999 per true query, minutes of OpenDP
    noise in one message). 0.1 allows the largest ratio of seed 000's experiments, 9 fictitious per true query."""
    max_stored_bundles: int = 4
    """Setup bundles whose unpacked files, record set and encodings a device keeps on disk, the most recently used
    (fed.device.retention): each new bundle the server sends would otherwise add to the state folder for good."""
    num_labels: int | None = None
    """The device's label set where its data names none (no labels.txt): never read from the data itself."""
    release_floors: Mapping[str, float] = field(default_factory=dict, compare=False)
    """Per kind of release ('train', 'query'): the most one release may cost (simulation: the plan's)."""
    experimenter: bool = field(default=False, compare=False)
    """A simulated user's policy (:meth:`from_run`): the experimenter names encoders as any Hugging Face id or
    path (fed.encoders.resolver); never set from a policy file."""

    def __post_init__(self) -> None:
        for name, (valid, accepted) in RULES.items():
            value = getattr(self, name)
            if not valid(value):
                shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:30]}... ({len(repr(value))} characters)"
                raise ValueError(f"policy: {name} must be {accepted}, got {shown}")
        unknown = sorted(set(self.mechanisms) - set(RANDOMIZERS))
        if unknown:
            raise ValueError(f"policy: mechanisms: unknown {unknown}; available: {sorted(RANDOMIZERS)}")
        object.__setattr__(self, "mechanisms", tuple(self.mechanisms))
        object.__setattr__(self, "encoders", tuple(self.encoders))
        object.__setattr__(self, "tuned_encoders", tuple(self.tuned_encoders))
        if self.min_release_epsilon is not None and self.min_release_epsilon > self.floor("train"):
            raise ValueError(
                f"policy: min_release_epsilon {self.min_release_epsilon!r} is above the most one release may cost "
                f"({self.floor('train')!r}: max_release_epsilon, else epsilon_sentence): every release would be refused"
            )
        if self.enforce == "amplified" and self.memoize is True:
            raise ValueError(
                'policy: enforce = "amplified" and memoize = true cannot be combined: a memoized report repeats '
                "unchanged, so the server links it to its record, which the amplified bound assumes it cannot; "
                "set memoize = false (or enforce = \"worst-case\")"
            )

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
        known = {f.name for f in fields(cls)} - {"release_floors", "experimenter"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: unknown keys {unknown}; known: {sorted(known)}")
        values = dict(data)
        for name in ("epsilon_sentence", "epsilon_user"):
            if values.get(name) == "inf":
                values[name] = math.inf
        return cls(**values)

    def to_toml(self) -> str:
        """The policy as a TOML file (what ``ldpfed device init`` and ``ldpfed simulate`` write)."""
        data = {k: v for k, v in asdict(self).items() if k not in ("release_floors", "experimenter") and v is not None}
        data["mechanisms"], data["encoders"] = list(self.mechanisms), list(self.encoders)
        data["tuned_encoders"] = list(self.tuned_encoders)
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

    def least_release_epsilon(self) -> float:
        """The least one release may cost one record (epsilon at :attr:`delta`): ``min_release_epsilon``, else the
        smallest of the per-release floor, the budgets and 1, over ``max_events`` (module docstring: why)."""
        if self.min_release_epsilon is not None:
            return float(self.min_release_epsilon)
        return min(self.floor("train"), self.epsilon_sentence, self.epsilon_user, 1.0) / self.max_events

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
        """Why this policy refuses a bundle whose encoder is ``spec`` (None: allowed), by the one resolver of
        encoder names (fed.encoders.resolver): a built-in name needs its base name in ``encoders``, any other
        name must be listed exactly (an absolute path or a Hub id); ``tokens:<L>:<encoder>`` (the word-embedding
        rows of an encoder, Split-N-Denoise's records) is allowed where the encoder is, and is a transformer."""
        from ldpfed.fed.encoders.resolver import refusal

        return refusal(spec, self)

    def bundle_refusal(self, spec: str, digests: Mapping[str, str]) -> str | None:
        """Why this policy refuses a bundle whose encoder is ``spec`` and whose files have these SHA-256
        ``digests`` (by name), before any file is read (None: allowed). Shipped transformer weights must
        be listed in ``tuned_encoders`` by fingerprint (fed.encoders.resolver.refusal)."""
        from ldpfed.fed.encoders.resolver import refusal

        return refusal(spec, self, digests)

    @classmethod
    def from_run(cls, config: EncodingSections, plan: PrivacyPlan) -> "DevicePolicy":
        """A simulated user's policy: what the run options grant (the experimenter writes both sides); reads the
        run's privacy and encoder sections only."""
        return cls(
            epsilon_sentence=plan.budget.epsilon_sentence,
            epsilon_user=plan.budget.epsilon_user,
            delta=plan.budget.delta,
            mechanisms=(config.privacy.mechanism,),
            allow_invalid=config.privacy.mechanism_option_values.get("allow_invalid") is True,
            labels=config.privacy.labels if config.privacy.label_epsilon is None else f"rr:{config.privacy.label_epsilon!r}",
            evaluation=EVALUATION_OFF,
            enforce=config.privacy.enforce,
            memoize=False,
            min_upsampling_q=plan.upsampling.q,  # the run's own rate (the experimenter writes both sides)
            min_release_epsilon=0.0,  # the experimenter writes both sides: no server fills the cap against itself
            max_models=8,
            max_events=64,
            encoders=tuple(dict.fromkeys(("minilm", "bilstm", config.encoder.encoder))),
            max_dim=max([cls.max_dim, *_sizes(plan.train), *_sizes(plan.query)]),
            release_floors={kind: plan.limits(kind).max_release_epsilon for kind in ("train", "query")},
            experimenter=True,
        )


def _sizes(randomizer: Any) -> list[int]:
    """The values of a randomizer's size parameters (what its requests ask a node to allocate)."""
    params = randomizer.params()
    return [int(params[name]) for name in type(randomizer).size_params if name in params]


def parse_channel(name: str, spec: Any, allow_public: bool) -> float | None:
    """``'rr:<epsilon>'`` -> epsilon; ``'public'`` -> None where allowed; ValueError otherwise."""
    if allow_public and spec == "public":
        return None
    epsilon = _rr_epsilon(spec)
    if epsilon is None:
        raise ValueError(f"policy: {name} must be {'public' if allow_public else EVALUATION_OFF!r} or {RR}, got {spec!r}")
    return epsilon
