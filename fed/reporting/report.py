"""The run's summary.json and privacy_report.md, computed from the users' full ledgers.

Every accountant is computed for the same run and shown together: the worst-case ledger,
GDP + CLT (seed 000 eqs. 8 and 9, an estimate), the amplified PLD and RDP bounds, the PRV
accountant's lower bound, estimate and upper bound, and basic and advanced composition.
Each figure carries its name, version, kind, parameters and assumption, and whether this
run enforced it. With randomized-response labels every training release also releases its
label once: each figure composes those label events too, or, where its accountant cannot,
is marked as covering the reports alone (``labels_excluded``), and the report lists which.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ldpfed.fed.heterogeneity.registry import report_lines
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.configuration.plan import PrivacyPlan
from ldpfed.fed.privacy.accountants import all_figures, clt, enforced
from ldpfed.fed.privacy.accountants.base import SHORT_ASSUMPTION, AccountantFigure, Schedule
from ldpfed.fed.privacy.events import GaussianEvent, PrivacyEvent
from ldpfed.fed.privacy.ledger import DEVICE_VIEW, Ledger
from ldpfed.fed.privacy.sampling import amplified_rate

ENFORCED_KEY = {"worst-case": "worst_case_actual", "amplified": "pld"}


@dataclass(frozen=True)
class LedgerFigures:
    """Per-user figures, recomputed by the server from the ledgers it collected.

    ``sentence`` and ``user`` are worst-case epsilons, ``user_releases`` each user's releases and
    ``budgets`` its sentence-level budget, all in the order of ``users``; :meth:`amplified` gives
    each user's sentence-level amplified PLD bound over the steps it served.
    """

    sentence: np.ndarray
    user: np.ndarray
    releases: int
    steps: dict[str, int]
    max_record_releases: dict[str, int]
    ledgers: tuple[Ledger, ...] = field(default=(), repr=False, compare=False)
    users: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False, compare=False)
    user_releases: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False, compare=False)
    budgets: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    device_users: int = 0
    """Users whose ledger came from a device: its aggregates (upper bounds from the steps it served), no record counts."""

    def by_user(self, values: np.ndarray, users: int) -> np.ndarray:
        """Per-user ``values`` (in the order of ``users``) placed by user id, NaN where no ledger came back."""
        out = np.full(users, np.nan)
        out[self.users] = values
        return out

    @classmethod
    def from_ledgers(
        cls, ledgers: dict[int, dict[str, Any]], train_counts: dict[int, int] | None = None
    ) -> "LedgerFigures":
        """Compose every user's ledger (sentence level: max over records; user level: all releases).

        ``train_counts`` (public sizes) splits record ids into training (first) and query ids. A
        device's answer (``view`` fed.privacy.ledger.DEVICE_VIEW) holds no record counts: its own
        figures are taken (bounds from the steps it served), each record counted once per step
        and no release counted.
        """
        train_counts = train_counts or {}
        parsed = {uid: Ledger.from_json(data) for uid, data in ledgers.items()}
        device = {uid for uid, data in ledgers.items() if data.get("view") == DEVICE_VIEW}
        steps, most = {"train": 0, "query": 0}, {"train": 0, "query": 0}
        for uid, ledger in parsed.items():
            for kind in steps:
                served = sum(n for _, _, n in ledger.step_log(kind))
                steps[kind] = max(steps[kind], served)
                if uid in device:
                    most[kind] = max(most[kind], served)
            if uid in device:
                continue
            counts = ledger.record_counts()
            per_record = counts.max(axis=0) if counts.size else np.zeros(ledger.num_records, np.int64)
            n_train = train_counts.get(uid, ledger.num_records)
            most["train"] = max(most["train"], int(per_record[:n_train].max(initial=0)))
            most["query"] = max(most["query"], int(per_record[n_train:].max(initial=0)))

        def figure(name: str, own: Callable[[Ledger], float]) -> np.ndarray:
            return np.array([float(ledgers[uid][name]) if uid in device else own(ledger) for uid, ledger in parsed.items()])

        releases = np.array([ledger.releases() for ledger in parsed.values()], dtype=np.int64)
        return cls(
            sentence=figure("epsilon_sentence", Ledger.sentence_epsilon),
            user=figure("epsilon_user", Ledger.user_epsilon),
            releases=int(releases.sum()),
            steps=steps,
            max_record_releases=most,
            ledgers=tuple(parsed.values()),
            users=np.array(list(parsed), dtype=np.int64),
            user_releases=releases,
            budgets=np.array([ledger.budget.epsilon_sentence for ledger in parsed.values()], dtype=np.float64),
            device_users=len(device),
        )

    def amplified(self, labels: PrivacyEvent | None) -> np.ndarray:
        """Each user's sentence-level amplified PLD bound (NaN where no bound applies).

        ``labels`` is the label event each training report carries (None: public labels).
        """
        return np.array([_amplified(ledger, labels) for ledger in self.ledgers], dtype=np.float64)


def _amplified(ledger: Ledger, labels: PrivacyEvent | None) -> float:
    delta = ledger.budget.delta
    try:
        train = enforced.pld_epsilon(enforced.entries(ledger.step_log("train")), delta, labels)
        query = enforced.pld_epsilon(enforced.entries(ledger.step_log("query")), delta)
    except ValueError:
        return math.nan
    return max(train, query)


def schedules(
    config: RunSpec, plan: PrivacyPlan, figures: LedgerFigures, train_counts: dict[int, int] | None = None
) -> dict[str, Schedule]:
    """The run's training and query schedules as the accountants read them.

    T is the largest number of steps any user served; the rate is the per-record release
    probability per step (fixed-size m of n: m / n for the user with the fewest records).
    Training releases carry the run's label event (randomized response), query releases none.
    """
    result: dict[str, Schedule] = {}
    if not all(isinstance(r.event, GaussianEvent) for r in (plan.train, plan.query)):
        return result  # the amplified accountants below are for Gaussian reports only
    train = config.schedule.train_sampling
    if figures.steps["train"]:
        size = None
        if train.kind == "fixed":
            size = max(min((n for n in (train_counts or {}).values() if n > 0), default=train.m), 1)
            rate = min(train.m / size, 1.0)
        else:
            rate = amplified_rate(train.spec)
        event = plan.train.event
        result["train"] = Schedule(
            event.sigma / event.sensitivity,
            rate,
            figures.steps["train"],
            config.privacy.delta,
            releases=min(figures.max_record_releases["train"], figures.steps["train"]),
            dataset_size=size,
            labels=plan.labels.event,
        )
    if figures.steps["query"]:
        event = plan.query.event
        result["query"] = Schedule(
            event.sigma / event.sensitivity,
            plan.upsampling.p,
            figures.steps["query"],
            config.privacy.delta,
            releases=min(figures.max_record_releases["query"], figures.steps["query"]),
        )
    return result


def accountant_figures(config: RunSpec, plan: PrivacyPlan, schedule: Schedule, kind: str) -> list[dict[str, Any]]:
    """Every accountant's figure for one schedule, marked with whether this run enforced it.

    Worst-case rows: k = actual is the enforced ledger (an upper bound with no assumption when
    the run enforces the amplified bound instead); k = T is an upper bound for the schedule;
    the quantile row is a prediction (an estimate). The query CLT row uses each item's real
    rate p_query; seed 000's eq. 9 with rate q * p_query is added beside it when q < 1.
    Rows whose accountant cannot compose the schedule's label events carry ``labels_excluded``.
    """
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)  # dp_accounting's RDP warns about every order it drops
    try:
        found = list(all_figures(schedule))
    finally:
        absl.setLevel(level)
    if kind == "query":
        found = [
            replace(f, name="GDP + CLT (seed 000 eq. 9 with a true query's rate p_query)") if f.key == "clt" else f
            for f in found
        ]
    if kind == "query" and plan.upsampling.q < 1:
        published = clt.figure(replace(schedule, q=plan.upsampling.q, releases=None))
        found.append(
            replace(
                published,
                key="clt_eq9_as_published",
                name="GDP + CLT, seed 000 eq. 9 as published (rate q * p_query)",
                note=published.note
                + f"; uses rate q * p_query = {published.parameters['rate']:.4g}, but each mixed item, true or "
                f"fictitious, is sampled at p_query = {schedule.p:g}, so a true query's rate is p_query and this "
                "under-states even the amplified cost",
            )
        )
    out = []
    for figure in found:
        if config.privacy.enforce == "amplified" and figure.kind == "enforced":
            figure = replace(figure, kind="upper bound", note=figure.note + "; not enforced in this run")
        out.append({**figure.to_json(), "enforced": figure.key == ENFORCED_KEY[config.privacy.enforce]})
    return out


def summary(
    config: RunSpec,
    plan: PrivacyPlan,
    figures: LedgerFigures,
    accuracies: dict[str, float | None],
    seconds: float,
    inference: dict[str, Any] | None = None,
    train_counts: dict[int, int] | None = None,
) -> dict[str, Any]:
    """summary.json: accuracies next to the privacy figures that paid for them."""
    found = schedules(config, plan, figures, train_counts)
    accountants = {kind: accountant_figures(config, plan, s, kind) for kind, s in found.items()}
    clt_train = next((f for f in accountants.get("train", []) if f["key"] == "clt"), None)
    amplified = figures.amplified(plan.labels.event)
    amplified = amplified[np.isfinite(amplified)]
    worst = float(figures.sentence.max(initial=0.0))
    amplified_max = float(amplified.max(initial=0.0)) if amplified.size else None
    return {
        **accuracies,
        "enforce": config.privacy.enforce,
        "epsilon_enforced_max": worst if config.privacy.enforce == "worst-case" else amplified_max,
        "epsilon_sentence_max": worst,
        "epsilon_sentence_median": float(np.median(figures.sentence)) if figures.sentence.size else 0.0,
        "epsilon_user_max": float(figures.user.max(initial=0.0)),
        "epsilon_user_median": float(np.median(figures.user)) if figures.user.size else 0.0,
        "epsilon_amplified_pld_max": amplified_max,
        "epsilon_amplified_pld_median": float(np.median(amplified)) if amplified.size else None,
        "epsilon_budget_sentence": plan.budget.epsilon_sentence,
        "epsilon_amplified_clt_estimate": None if clt_train is None else clt_train["epsilon"],
        "delta": config.privacy.delta,
        "sigma_train": plan.train.params().get("sigma"),
        "sigma_query": plan.query.params().get("sigma"),
        "mechanism": config.privacy.mechanism,
        "labels": config.privacy.labels,
        "sampling": plan.train_sampling.spec,
        "upsampling": {"q": plan.upsampling.q, "p_query": plan.upsampling.p, "k": plan.upsampling.k},
        "users": config.data.users,
        "rounds": config.schedule.rounds,
        "releases": figures.releases,
        "users_with_device_ledgers": figures.device_users,
        "steps": figures.steps,
        "max_record_releases": figures.max_record_releases,
        "calibration": plan.calibrations,
        "schedules": {kind: s.to_json() for kind, s in found.items()},
        "accountants": accountants,
        "accountants_excluding_labels": {
            kind: [f["key"] for f in rows if f["labels_excluded"]]
            for kind, rows in accountants.items()
            if any(f["labels_excluded"] for f in rows)
        },
        "remote_inference": inference,
        "seconds": seconds,
    }


def first_line(config: RunSpec) -> str:
    """The report's first line: which accountant this run enforced."""
    if config.privacy.enforce == "amplified":
        return (
            "# Privacy report: budgets ENFORCED ON THE AMPLIFIED PLD BOUND (--enforce amplified), which assumes "
            "the server cannot link a report to its record; the worst-case ledger is reported, not enforced"
        )
    return "# Privacy report: budgets enforced on the worst-case ledger (no amplification assumed)"


def privacy_report(config: RunSpec, plan: PrivacyPlan, figures: LedgerFigures, result: dict[str, Any]) -> str:
    """privacy_report.md: unit, neighbouring relation, and every figure with its label."""
    labels = (
        "public (declared by the run; not protected)"
        if config.privacy.label_epsilon is None
        else f"randomized response, epsilon {config.privacy.label_epsilon} per release, charged to the same ledger"
    )
    enforced_what = (
        "amplified PLD bound of each user's Poisson-sampled schedule of steps served so far (per kind of record; "
        "see docs/sampling.md)"
        if config.privacy.enforce == "amplified"
        else "worst-case ledger: the composition of every actual release of a record (sampling never lowers it)"
    )
    amplified = result["epsilon_amplified_pld_max"]
    with_labels = "" if config.privacy.label_epsilon is None else "; labels included"
    lines = [
        first_line(config),
        "",
        f"Enforced: {enforced_what}.",
        "",
        "| what | value |",
        "|---|---|",
        "| unit | one record: a sentence (or sentence pair) with its label |",
        "| neighbouring relation | replace one record of one user; dataset sizes are public |",
        f"| delta | {config.privacy.delta:g} |",
        f"| randomizer | {plan.train.params()} (training), {plan.query.params()} (queries) |",
        f"| labels | {labels} |",
        f"| training sampling | {plan.train_sampling.spec} |",
        f"| inference up-sampling | q = {plan.upsampling.q:g}, p_query = {plan.upsampling.p:g}, k = {plan.upsampling.k} |",
        f"| sentence-level epsilon, worst case (max over users) | {result['epsilon_sentence_max']:.4f} |",
        f"| sentence-level epsilon, worst case (median over users) | {result['epsilon_sentence_median']:.4f} |",
        f"| sentence-level epsilon, amplified PLD bound (max over users; assumes unlinkable reports{with_labels}) | "
        f"{'n/a' if amplified is None else f'{amplified:.4f}'} |",
        f"| user-level epsilon, worst case (max over users) | {result['epsilon_user_max']:.4f} |",
        f"| user-level epsilon, worst case (median over users) | {result['epsilon_user_median']:.4f} |",
        f"| sentence-level budget per record | {plan.budget.epsilon_sentence:.4f} |",
        f"| releases | {figures.releases} |",
        *(
            [
                f"| users whose ledger came from a device (its aggregates: sentence level bounded by the steps it served, "
                f"capped by its budget under worst-case enforcement; its releases not counted above) | {figures.device_users} |"
            ]
            if figures.device_users
            else []
        ),
        "",
        "## Calibration",
        "",
        "| release | accountant | noise multiplier | sigma | epsilon recomputed | target | steps T | rate | releases k |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, c in plan.calibrations.items():
        target = "(sigma given)" if c.get("target_epsilon") is None else f"{c['target_epsilon']:g}"
        if c.get("claimed_epsilon", False) is not False:
            target = f"fixed parameters; claimed {_fmt(c['claimed_epsilon'])} per release"
        lines.append(
            f"| {kind} | {c['accountant']} | {_fmt(c['noise_multiplier'])} | {_fmt(c['sigma'])} | {c['epsilon']:.5g} | "
            f"{target} | {c['steps']} | {c['rate']:g} | {'' if c['releases'] is None else c['releases']} |"
        )
    for kind, rows in result["accountants"].items():
        s = result["schedules"][kind]
        lines += [
            "",
            f"## Accountants, {kind} records (z = {s['noise_multiplier']:.4g}, rate = {s['rate']:.4g}, "
            f"T = {s['steps']}, delta = {s['delta']:g}, most releases of one record = {s['releases']})",
            "",
            "| accountant | version | kind | enforced | epsilon | assumption | parameters | note |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for f in rows:
            value = f"unavailable: {f['unavailable']}" if f["unavailable"] else _fmt(f["epsilon"])
            params = ", ".join(f"{k}={_fmt(v)}" for k, v in f["parameters"].items())
            lines.append(
                f"| {f['name']} | {f['version']} | {f['kind']} | {'yes' if f['enforced'] else 'no'} | {value} | "
                f"{SHORT_ASSUMPTION.get(f['assumption'], f['assumption'])} | {params} | {f['note']} |"
            )
    lines += [
        "",
        "## Assumptions",
        "",
        "- linkable: no amplification: the server may link every report to its record, so sampling does not "
        "shrink epsilon. Reports travel as individual vectors, so a server that knows a user's other records "
        "can often tell which report is the target's; then only the worst-case figure holds.",
        "- unlinkable (every amplified figure): the server cannot link a report to its record. The GDP + CLT "
        "figure is an **estimate**, not a bound (a central-limit approximation that under-states the amplified "
        "epsilon at finite T). PLD, RDP and the PRV upper bound are upper bounds under that assumption.",
        *_label_lines(plan, result["accountants"]),
    ]
    lines += report_lines(config, result, _fmt)  # the heterogeneity axes' sections (e.g. privacy tiers)
    if result.get("groups"):
        lines += ["", *group_lines(result["groups"], level="##")]
    inference = result.get("remote_inference")
    if inference:
        lines += [
            "",
            "## Remote inference",
            "",
            f"Accuracy {_fmt(inference['accuracy'])} (mean of each true query's answers), "
            f"{_fmt(inference['accuracy_single_answer'])} from each query's first answer alone; "
            f"{inference['queries_with_k_answers']} of {inference['queries']} true queries got k answers "
            f"({inference['queries_answered']} at least one); {inference['server_steps']} server steps "
            f"(planned {inference['planned_steps']}), {inference['releases_true']} true and "
            f"{inference['releases_fictitious']} fictitious releases. Fictitious releases cost nothing; every "
            "true release is charged to the worst-case ledger. The server is not told which slots are true.",
        ]
    return "\n".join(lines) + "\n"


def group_lines(groups: dict[str, Any], level: str = "#") -> list[str]:
    """Markdown tables of :func:`fed.reporting.user_results.group_summary`: per group of each axis, the spread of
    per-user accuracy next to the group's worst-case epsilons (groups.md, and a privacy-report section)."""
    overall = groups["overall"]
    lines = [
        f"{level} Per-user and per-group results (simulation only)",
        "",
        f"Accuracy of the {groups['model']} model on each user's own query records (local inference; exact counts, "
        "which only a simulated node returns), over users with queries: mean, percentiles, the mean of the worst "
        "10% of users and the variance across users. Epsilons are each user's worst-case ledger (max and median "
        f"over the group's users). All users: {overall['users_evaluated']} evaluated, mean {_fmt(overall['mean'])}, "
        f"p10 / p50 / p90 {_fmt(overall['p10'])} / {_fmt(overall['p50'])} / {_fmt(overall['p90'])}, worst 10% "
        f"{_fmt(overall['worst10_mean'])}, variance {_fmt(overall['variance'])}; gap between tiers "
        f"{'n/a (one tier)' if groups['tier_gap'] is None else _fmt(groups['tier_gap'])}.",
    ]
    for axis, rows in groups["axes"].items():
        lines += [
            "",
            f"{level}# By {axis}",
            "",
            "| group | users | with queries | mean | p10 | p50 | p90 | worst 10% mean | variance | "
            "sentence epsilon max / median | user epsilon max / median | releases |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for group, g in rows.items():
            lines.append(
                f"| {group} | {g['users']} | {g['users_evaluated']} | {_fmt(g['mean'])} | {_fmt(g['p10'])} | {_fmt(g['p50'])} | "
                f"{_fmt(g['p90'])} | {_fmt(g['worst10_mean'])} | {_fmt(g['variance'])} | "
                f"{_fmt(g['epsilon_sentence_max'])} / {_fmt(g['epsilon_sentence_median'])} | "
                f"{_fmt(g['epsilon_user_max'])} / {_fmt(g['epsilon_user_median'])} | {g['releases']} |"
            )
    return lines


def _label_lines(plan: PrivacyPlan, accountants: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The report's section on which accountant rows compose the label releases (none for public labels)."""
    event = plan.labels.event
    if event is None:
        return []
    excluded = {f["name"]: f["labels_excluded"] for rows in accountants.values() for f in rows if f["labels_excluded"]}
    included = [f["name"] for f in accountants.get("train", []) if not f["labels_excluded"]]
    return [
        "",
        "## Labels in the accountants",
        "",
        f"Every training release also releases the record's label once through {event.num_values}-ary randomized "
        f"response (epsilon {event.epsilon:g}), charged to the same ledger. Training rows that compose these label "
        f"releases: {'; '.join(included)}.",
        "",
        "Rows marked **labels EXCLUDED** cover the reports alone and under-state the cost of the releases:",
        "",
        *(f"- {name}: {reason}." for name, reason in excluded.items()),
    ]


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


__all__ = ["AccountantFigure", "LedgerFigures", "accountant_figures", "group_lines", "privacy_report", "schedules", "summary"]
