"""The options of one run, with defaults and validation.

The same names (with hyphens) appear in pyproject's [tool.flwr.app.config], in
`flwr run --run-config`, and as `ldpfed simulate` flags.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from fed.availability import Availability
from fed.classifier import SCREENING, WEIGHTINGS
from fed.device_speed import DeviceSpeed
from fed.device_tiers import DeviceTiers
from fed.policy import MAX_DELTA, MAX_RR_EPSILON
from fed.sampling import TrainSampling, UpSampling


@dataclass(frozen=True)
class RunConfig:
    """Every run option; HELP below says what each means (`ldpfed simulate --help`)."""

    data: str = "generated"
    public: str = "generated"
    users: int = 20
    partition: str = "dirichlet:0.5"
    train_limit: int = 0
    encoder: str = "minilm"
    dim: int = 16
    mechanism: str = "gaussian"
    mechanism_options: str = ""
    clip: float = 3.0
    epsilon: float = 8.0
    tiers: str = ""
    device_tiers: str = ""
    sigma: float = 0.0
    delta: float = 1e-5
    user_epsilon: float = 0.0
    labels: str = "public"
    rounds: int = 1
    evaluate_every: int = 1
    users_per_round: int = 0
    records_per_user_round: int = 0
    releases_per_record: int = 1
    releases_per_query: int = 1
    sampling: str = "all"
    availability: str = "1"
    dropout: float = 0.0
    device_speed: str = ""
    behavior_trace: str = ""
    deadline: float = 0.0
    enforce: str = "worst-case"
    upsampling_q: float = 1.0
    p_query: float = 1.0
    answers: int = 1
    inference: str = "local"
    shrinkage: float = -1.0
    screening: str = "auto"
    weighting: str = "inverse-variance"
    nodes: int = 1
    min_nodes: int = 1
    round_timeout: float = 600.0
    seed: int = 0
    out: str = ""
    save_reports: bool = False
    cache_dir: str = ""
    nonprivate_baseline: bool = True
    privacy_model: str = "local"
    central_clip: float = 1.0
    central_clipping: str = "fixed"
    central_noise: float = 0.0
    central_lr: float = 0.5
    central_epochs: int = 1

    def __post_init__(self) -> None:
        positive_ints = ("users", "rounds", "evaluate_every", "releases_per_query", "answers", "nodes", "min_nodes")
        for name in positive_ints:
            if getattr(self, name) < 1:
                raise ValueError(f"{_flag(name)} must be at least 1, got {getattr(self, name)}")
        for name in ("train_limit", "dim", "users_per_round", "records_per_user_round", "releases_per_record"):
            if getattr(self, name) < 0:
                raise ValueError(f"{_flag(name)} must be non-negative (0 means 'all' / 'off')")
        if self.min_nodes > self.nodes:
            raise ValueError(f"--min-nodes {self.min_nodes} exceeds --nodes {self.nodes}")
        for name in ("clip", "delta", "round_timeout"):
            if not math.isfinite(getattr(self, name)) or getattr(self, name) <= 0:
                raise ValueError(f"{_flag(name)} must be a positive finite number")
        if not self.delta <= MAX_DELTA:  # every simulated user's policy takes the run's delta (fed.policy)
            raise ValueError(f"--delta must be at most {MAX_DELTA:g} (a device policy's range, fed.policy)")
        if self.dim and self.public == "none":
            raise ValueError("--dim fits a projection on public data: give --public, or --dim 0")
        if self.nodes > self.users:
            raise ValueError(f"--nodes {self.nodes} exceeds --users {self.users}: every node hosts at least one user")
        if self.sigma == 0 and self.epsilon <= 0:
            raise ValueError("give --epsilon > 0 (sigma calibrated) or --sigma > 0")
        for name in ("epsilon", "sigma", "user_epsilon"):
            if not math.isfinite(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(f"{_flag(name)} must be a finite non-negative number, got {getattr(self, name)!r}")
        from fed.randomizers import RANDOMIZERS  # here, not at the top: importing this module stays light

        if self.mechanism not in RANDOMIZERS:
            raise ValueError(f"--mechanism {self.mechanism!r} is not available; choose one of {', '.join(RANDOMIZERS)}")
        options = self.mechanism_option_values  # validates --mechanism-options
        if "clip" in options:
            raise ValueError("--mechanism-options: give the clip as --clip")
        RANDOMIZERS[self.mechanism].run_options(self.clip, self.dim, options, self.encoder)  # the mechanism's own needs
        if not RANDOMIZERS[self.mechanism].sigma_settable:
            settable = ", ".join(name for name, cls in RANDOMIZERS.items() if cls.sigma_settable)
            if self.sigma > 0:
                raise ValueError(f"--sigma applies to {settable}; give --epsilon for {self.mechanism}")
            if self.enforce == "amplified":
                raise ValueError(f"--enforce amplified is implemented for {settable} only")
        if self.tiers:
            from fed.tiers import Tiers

            Tiers.parse(self.tiers)  # validates --tiers
            if self.sigma > 0:
                raise ValueError("--tiers sets each tier's noise from its epsilon: drop --sigma")
            if RANDOMIZERS[self.mechanism].fixed_params(self.epsilon, options) is not None:
                raise ValueError(f"--tiers needs a randomizer calibrated to epsilon; {self.mechanism} has fixed parameters")
        if self.inference not in ("local", "remote"):
            raise ValueError(f"--inference must be local or remote, got {self.inference!r}")
        if self.shrinkage > 1:
            raise ValueError("--shrinkage must be at most 1 (negative: automatic)")
        if self.screening not in SCREENING:
            raise ValueError(f"--screening must be one of {', '.join(SCREENING)}, got {self.screening!r}")
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"--weighting must be one of {', '.join(WEIGHTINGS)}, got {self.weighting!r}")
        self.label_epsilon  # validates --labels
        sampling = self.train_sampling  # validates --sampling
        self.user_availability  # validates --availability, --dropout
        if self.device_tiers:
            DeviceTiers.parse(self.device_tiers)  # validates --device-tiers
        if self.device_speed:
            DeviceSpeed(self.device_speed)  # validates --device-speed
        if not (math.isfinite(self.deadline) and self.deadline >= 0):
            raise ValueError(f"--deadline must be a number of virtual seconds >= 0 (0: none), got {self.deadline!r}")
        if (self.deadline or self.behavior_trace) and not self.device_speed:
            raise ValueError("--deadline and --behavior-trace run on the virtual clock: give --device-speed too")
        self.upsampling  # validates --upsampling-q, --p-query, --answers
        if sampling.kind != "all" and self.records_per_user_round:
            raise ValueError("--records-per-user-round applies to --sampling all; use --sampling fixed:<m> instead")
        if self.enforce not in ("worst-case", "amplified"):
            raise ValueError(f"--enforce must be worst-case or amplified, got {self.enforce!r}")
        if self.enforce == "amplified":
            if sampling.kind == "fixed":
                raise ValueError(
                    "--enforce amplified needs Poisson sampling (--sampling poisson:<p> or all): dp_accounting "
                    "has no PLD bound for fixed-size sampling without replacement"
                )
            if self.label_epsilon is not None:
                raise ValueError("--enforce amplified covers the Gaussian reports only; use --labels public")
            if self.records_per_user_round:
                raise ValueError("--enforce amplified: a cap on records per round breaks Poisson sampling; drop it")
        self._check_privacy_model()

    def _check_privacy_model(self) -> None:
        """--privacy-model and its options (docs/privacy_models.md)."""
        if self.privacy_model not in PRIVACY_MODELS:
            raise ValueError(f"--privacy-model must be one of {', '.join(PRIVACY_MODELS)}, got {self.privacy_model!r}")
        if self.privacy_model == "shuffle" and self.inference == "remote":
            raise ValueError("--privacy-model shuffle shuffles training reports; remote inference answers each query to its "
                             "sender, so it cannot be shuffled: use --inference local")
        for name in ("central_clip", "central_lr"):
            if not math.isfinite(getattr(self, name)) or getattr(self, name) <= 0:
                raise ValueError(f"{_flag(name)} must be a positive finite number")
        if not math.isfinite(self.central_noise) or self.central_noise < 0:
            raise ValueError("--central-noise must be a finite non-negative number (0: calibrated to --epsilon)")
        if self.central_clipping not in ("fixed", "adaptive"):
            raise ValueError(f"--central-clipping must be fixed or adaptive, got {self.central_clipping!r}")
        if self.central_epochs < 1:
            raise ValueError("--central-epochs must be at least 1")
        if self.privacy_model != "central":
            return
        if self.nodes != self.users:
            raise ValueError(
                f"--privacy-model central clips and noises one update per Flower node: give --nodes {self.users} "
                f"(one user per node, so the guarantee is user-level), got --nodes {self.nodes}"
            )
        if self.central_noise == 0 and self.epsilon <= 0:
            raise ValueError("--privacy-model central: give --epsilon > 0 (user-level; noise calibrated) or --central-noise > 0")
        for name, value, default in (("inference", self.inference, "local"), ("labels", self.labels, "public"), ("tiers", self.tiers, "")):
            if value != default:
                raise ValueError(f"--privacy-model central trains on clean local data: {_flag(name)} {value!r} does not apply")

    @property
    def mechanism_option_values(self) -> dict[str, Any]:
        """The parsed --mechanism-options: ``key=value`` pairs separated by commas."""
        return parse_mechanism_options(self.mechanism_options)

    @property
    def train_sampling(self) -> TrainSampling:
        """The parsed --sampling."""
        return TrainSampling.parse(self.sampling)

    @property
    def user_availability(self) -> Availability:
        """The parsed --availability and --dropout."""
        return Availability(self.availability, float(self.dropout))

    @property
    def virtual_clock(self) -> bool:
        """Whether rounds run on a virtual clock (--device-speed given: simulation only)."""
        return bool(self.device_speed)

    @property
    def upsampling(self) -> UpSampling:
        """The parsed inference up-sampling (--upsampling-q, --p-query, --answers)."""
        return UpSampling(float(self.upsampling_q), float(self.p_query), int(self.answers))

    @property
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

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "RunConfig":
        """Build from a mapping with hyphenated or underscored keys; unknown keys are errors."""
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            name = key.replace("-", "_")
            if name not in known:
                raise ValueError(f"unknown run option {key!r}")
            kwargs[name] = _coerce(known[name].type, value, key)
        return cls(**kwargs)

    def to_mapping(self) -> dict[str, Any]:
        """Hyphenated keys, as in [tool.flwr.app.config]."""
        return {k.replace("_", "-"): v for k, v in asdict(self).items()}


PRIVACY_MODELS = ("local", "shuffle", "central")
"""--privacy-model: local reports (the default), the same reports through a shuffler, or central DP-FedAvg."""

MECHANISMS: tuple[str, ...] = (
    "gaussian", "gaussian-classical", "gaussian-analytic", "laplace", "laplace-seed002", "dchi",
    "sue", "oue", "ome", "dpie-gaussian", "dpie-laplace", "texthide", "snd",
)
"""The names in fed.randomizers.RANDOMIZERS, for --help only (importing the registry costs
about 0.5 s more than this module; a test checks the two match)."""

HELP: dict[str, str] = {
    "data": "dataset: 'generated[:N[:seed]]', a local folder (train/dev TSV), or a Hugging Face id",
    "public": "server's public labelled data: 'generated', a folder or dataset id, or 'none'. The run warns when its labels or domain differ from the task's (the default 'generated' matches only --data generated); with other labels it gives no public-only baseline, shrinkage target or class means, while the projection (--dim) is still fitted on it, as it needs no labels. Nothing switches automatically: a mismatched projection can still beat none",
    "users": "number of users",
    "partition": "how records are split among users: iid, dirichlet:<alpha>, size:<kind>, or natural (each user's records from one source of the data: its file, or a generated corpus's style)",
    "train_limit": "use a seeded sample of this many training records (0: all)",
    "encoder": "local encoder: minilm, bilstm (pre-trained by the server on public data), minilm-tuned (MiniLM's layers fine-tuned by the server on public labelled data and shipped; a device allows them by fingerprint), or a model id/path",
    "dim": "project representations to this many dimensions, fitted on public data (0: no projection; needs --public)",
    "mechanism": "randomizer of representations: " + ", ".join(MECHANISMS) + " (docs/randomizers.md)",
    "mechanism_options": "extra randomizer parameters as comma-separated key=value (e.g. 'lambda=100,integer_bits=2' for ome, 'eta=20' for dchi, 'k=4,masks=16' for texthide); values are int, float, true/false or text",
    "clip": "clipping radius C (L2); sensitivity is 2C",
    "epsilon": "target worst-case sentence-level epsilon per record; sigma is calibrated to it (--privacy-model central: the user-level target of DP-FedAvg)",
    "tiers": "privacy tiers as share:epsilon pairs, e.g. '0.5:1,0.3:3,0.2:8': each share of the users (drawn by --seed) gets its own sentence-level epsilon in place of --epsilon, with its own policy, noise and ledger budget (simulation only; a device's policy sets its own). Empty: every user has --epsilon",
    "sigma": "noise scale; overrides --epsilon, whose budget becomes what sigma implies",
    "delta": "delta of every (epsilon, delta) figure",
    "user_epsilon": "user-level epsilon budget (0: not enforced, still reported)",
    "labels": "public, or rr:<epsilon> (k-ary randomized response, charged to the ledger)",
    "rounds": "server rounds. By default one: every user takes part and releases each training record once (--releases-per-record 1), which a second round could not repeat. More rounds need --releases-per-record 0 (every record in every round, noise calibrated for that) or a share per round (--users-per-round, --sampling, --records-per-user-round); the run warns about rounds that would release nothing",
    "evaluate_every": "rounds between local evaluations of the classifiers (the last round always evaluates). A round without one neither refits the classifier nor sends it to the nodes: in large simulations evaluation (a second message exchange, the fit and per-user metrics) can cost as much as training",
    "users_per_round": "users sampled per round among those with budget left (0: all of them, Flower's convention; the run warns when users would never take part)",
    "records_per_user_round": "records each sampled user releases per round (0: all with budget left)",
    "releases_per_record": "planned releases of each training record under --enforce worst-case (calibration; 0: the (1-delta)-quantile of Binomial(rounds, sampling rate), i.e. every round under --sampling all; user sampling is not counted)",
    "releases_per_query": "planned releases of each query record under --enforce worst-case (calibration; at least --answers)",
    "sampling": "training records a user releases per round: all, poisson:<p> (each record with probability p), fixed:<m> (m without replacement)",
    "device_tiers": "device tiers as share:tokens pairs, e.g. '0.7:256,0.3:32': each share of the users (drawn by --seed) encodes with the encoder reading at most that many tokens (a cheaper device), reported per tier (simulation only). Empty: every user runs the encoder as shipped",
    "availability": "simulated users' availability: each is online in a round with this probability (e.g. 0.8), or with its own probability drawn from Beta(a, b) (beta:<a>:<b>); an offline user is not asked, releases nothing and spends nothing (simulation only)",
    "dropout": "after each round, each simulated user still present leaves for good with this probability (0: nobody leaves)",
    "device_speed": "simulated device speed, which starts a virtual clock: lognormal:<ms>:<skew>:<kbps> (each user's encoding ms per record drawn once, FedScale's lognormal model; upload kbit/s) or a FedScale device-capacity trace file (pickle or JSON). Empty: no clock",
    "behavior_trace": "FedScale availability trace file (pickle or JSON; each user follows one of its clients): a user is online in a round only if its client is active at the round's virtual start. Needs --device-speed",
    "deadline": "virtual seconds a round waits for answers (needs --device-speed): slower users are stragglers, who release and spend but whose late reports the server leaves out. 0: wait for everyone",
    "enforce": "budget enforced: worst-case (ledger of actual releases) or amplified (PLD bound of the Poisson-sampled schedule; assumes the server cannot link a report to its record)",
    "upsampling_q": "remote inference: true-data rate q of the mixed query set (fictitious queries made up to share 1-q; 1: none)",
    "p_query": "remote inference: probability that each mixed query is released in a step (1: every query every step)",
    "answers": "remote inference: steps repeat until every true query has at least this many answers (k)",
    "inference": "local (users apply the downloaded classifier, free) or remote (privatized queries, costs budget)",
    "shrinkage": "covariance shrinkage of the noise-aware classifier in [0, 1]; negative: automatic (Ledoit-Wolf)",
    "weighting": "how the classifier combines reports of different noise (privacy tiers): inverse-variance (each group by the noise its reports declare; a noisy tier never dilutes the model), epsilon (each report by its epsilon) or pooled (every report counts once)",
    "screening": "classifier coordinates: on = those that maximise the expected Fisher ratio (public class means vs the noise); auto = on when noise dominates; off = all",
    "nodes": "Flower nodes hosting the users (user u lives on node u mod nodes)",
    "min_nodes": "fewest nodes that must answer the setup; fewer is an error (users of missing nodes are unavailable)",
    "round_timeout": "seconds the server waits for replies to one message exchange; nodes that miss it are left out of that step",
    "seed": "run seed: partitions, sampling and every user's noise",
    "out": "run directory (default: runs/<UTC time>)",
    "save_reports": "save everything the server received (reports.npz), for attack research",
    "cache_dir": "cache of clean encodings (default: $LDPFED_CACHE or ~/.cache/ldpfed)",
    "nonprivate_baseline": "train the non-private upper bound from clean data (simulation only)",
    "privacy_model": "local (each user's reports reach the server as sent), shuffle (the same reports pass a shuffler that strips their origin and permutes each round's; the amplified central epsilon is reported beside the local ledgers, which stay enforced) or central (DP-FedAvg of a softmax head on clean encodings: clipped updates, Gaussian noise on the aggregate by Flower's DP wrapper; --epsilon is then the user-level target; simulation only; one user per node). docs/privacy_models.md",
    "central_clip": "--privacy-model central: L2 clipping norm of each user's model update (with --central-clipping adaptive, the initial one)",
    "central_clipping": "--privacy-model central: fixed (Flower's fixedclipping_mod) or adaptive (adaptiveclipping_mod: the norm tracks the median update norm from a noised count of clipped updates, Andrew et al. 2021; --central-noise is then the effective multiplier over both)",
    "central_noise": "--privacy-model central: Flower's noise multiplier (noise std / clipping norm on the sum of updates); 0: calibrated to --epsilon",
    "central_lr": "--privacy-model central: learning rate of each user's local SGD",
    "central_epochs": "--privacy-model central: local epochs per round over the user's training records",
}


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


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _coerce(kind: Any, value: Any, key: str) -> Any:
    kind = {"int": int, "float": float, "str": str, "bool": bool}.get(kind, kind)
    try:
        if kind is bool and isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return value.lower() in ("true", "1")
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"run option {key!r} must be of type {kind.__name__}, got {value!r}") from None
