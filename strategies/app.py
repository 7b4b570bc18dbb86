"""The ldpfed ServerApp: build the run's assets and baselines, run LdpStrategy, write the run directory."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from ldpfed.fed.learning.aggregation import fit_clean
from ldpfed.fed.runtime.assets import (
    DOMAIN_SAMPLE, Assets, PublicCheck, add_projection, build_bundle, check_public, default_cache_dir, load_assets,
    load_public, projection_data, unpack,
)
from ldpfed.fed.learning.classifier import class_means, within_class_covariance
from ldpfed.fed.data.dataset import TextDataset
from ldpfed.fed.runtime.auto_dim import DimChoice, choose_for_run
from ldpfed.fed.encoders.cache import encode_cached
from ldpfed.fed.encoders.projection import PCAProjection
from ldpfed.fed.reporting.groups import TIER
from ldpfed.fed.data.loaders import label_schema, load_dataset
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.configuration.sections import DIM_AUTO
from ldpfed.fed.reporting.plots import plot_accuracy, plot_accuracy_cdf, plot_accuracy_epsilon, plot_epsilon
from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.data.population import Population, limited
from ldpfed.fed.reporting.report import LedgerFigures, group_lines, privacy_report, summary
from ldpfed.fed.privacy.events import PureEvent
from ldpfed.fed.privacy.shuffle import ShuffledFigure, composed
from ldpfed.fed.reporting.run_record import RunRecord
from ldpfed.fed.reporting.user_results import group_summary, users_table
from ldpfed.strategies import central
from ldpfed.strategies.strategy import LdpStrategy
from ldpfed.fed.heterogeneity.axis import ServedGroups
from ldpfed.fed.heterogeneity.registry import group_baseline, spec_groups, summaries
from ldpfed.fed.configuration.schedule_warnings import schedule_warnings
from ldpfed.fed.runtime.threads import limit_blas_threads

app = ServerApp()

SIMULATED_POLICY = (
    "# The policy each simulated user derives from this run's options (fed.device.policy.DevicePolicy.from_run).\n"
    "# A real device ignores the run options and applies its owner's policy file (docs/device.md).\n"
)
PULL_INTERVAL = 0.01
"""Seconds between the simulation grid's polls for replies. Flower's InMemoryGrid polls its in-process
state every 0.1 s by default, so each message exchange waited 0.05 s on average after its last reply;
a round of a large simulation takes about a second and makes two exchanges."""
PUBLIC_ROWS_PER_DIM = 10
"""Public records needed per dimension before their covariance is a shrinkage target."""


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point Flower calls with the run's config."""
    if hasattr(grid, "pull_interval"):  # the simulation engine's InMemoryGrid (a constructor setting of Flower's)
        grid.pull_interval = min(grid.pull_interval, PULL_INTERVAL)
    run(grid, RunSpec.from_mapping(context.run_config))


def run_directory(config: RunSpec) -> Path:
    """--out, else runs/<UTC time> under the working directory (printed, absolute)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path(config.output.out or Path.cwd() / "runs" / stamp).resolve()


def run(grid: Grid, config: RunSpec) -> Path:
    """One whole run; returns the run directory."""
    limit_blas_threads()
    started = time.monotonic()
    record = RunRecord(run_directory(config), config)
    print(f"ldpfed: run directory {record.out}", flush=True)
    cache = default_cache_dir(config)
    public = load_public(config)
    config, strategy, bundle, dim_choice = _set_up(grid, config, record, public, cache)
    assets = load_assets(unpack(bundle, cache))
    group_specs, group_of = spec_groups(config)
    for name, group_spec, plan in zip(_policy_files(len(group_specs)), group_specs, strategy.plans):
        (record.out / name).write_text(SIMULATED_POLICY + DevicePolicy.from_run(group_spec, plan).to_toml())
    public_check = _public_check(config, assets, public, strategy.num_labels)
    _baselines(config, assets, public if public_check.labels_match else None, strategy)
    if config.privacy.privacy_model == "central":
        return _run_central(grid, config, record, strategy, public_check, started)

    strategy.start(grid, initial_arrays=ArrayRecord(), num_rounds=config.schedule.rounds, timeout=config.schedule.round_timeout)
    inference = strategy.remote_inference(grid) if config.evaluation.inference == "remote" else None
    ledgers = strategy.collect_ledgers(grid)

    record.write_json("ledgers.json", {"delta": config.privacy.delta, "users": ledgers})
    figures = LedgerFigures.from_ledgers(ledgers, strategy.train_counts)
    del ledgers  # the parsed ledgers in ``figures`` are what the report needs
    last = record.rounds[-1] if record.rounds else {}
    accuracies = {
        "accuracy_local": last.get("accuracy_local"),
        "accuracy_local_denoised": last.get("accuracy_local_denoised"),
        "accuracy_remote": None if inference is None else inference["accuracy"],
        "accuracy_nonprivate": last.get("accuracy_nonprivate"),
        "accuracy_public_only": last.get("accuracy_public_only"),
        "accuracy_top_tier_only": last.get("accuracy_top_tier_only"),
        **({"accuracy_combined": last["accuracy_combined"]} if "accuracy_combined" in last else {}),
    }
    result = summary(
        config, strategy.plan, figures, accuracies, time.monotonic() - started, inference, strategy.train_counts
    )
    result["errors"] = strategy.errors
    result["nodes_dropped"] = {str(node): reason for node, reason in sorted(strategy.dropped.items())}
    result["public_data"] = public_check.to_json()
    if dim_choice is not None:
        result["dim_auto"] = dim_choice.to_json()
    result["warnings"] = schedule_warnings(config) + list(public_check.warnings)
    for text in result["warnings"]:
        print(f"ldpfed: WARNING: {text}", flush=True)
    if strategy.shuffler is not None:
        result["shuffled"] = shuffled_figure(config, strategy).to_json()
        result["epsilon_shuffled"] = result["shuffled"]["epsilon"]
    result["groups"] = _user_results(record, strategy, figures)
    if strategy.clock is not None:
        result["virtual_seconds"] = strategy.clock.now
        result["users_late"] = sum(r.get("users_late", 0) for r in record.rounds)
    sentence = figures.by_user(figures.sentence, config.data.users)
    result.update(summaries(config, ServedGroups(group_specs, strategy.plans, group_of, sentence)))  # e.g. privacy tiers' rows
    record.write_json("summary.json", result)
    (record.out / "privacy_report.md").write_text(
        privacy_report(config, strategy.plan, figures, result) + _shuffled_section(result.get("shuffled"))
        + _warning_section(result["warnings"])
    )
    plot_accuracy(record.rounds, record.out / "accuracy.png")
    plot_epsilon(figures.sentence, figures.user, strategy.plan.budget.epsilon_sentence, record.out / "epsilon.png")
    if config.output.save_reports and strategy.saved:
        np.savez_compressed(
            record.out / "reports.npz",
            **{k: np.concatenate([s[k] for s in strategy.saved]) for k in ("reports", "labels", "users")},
        )
    print(f"ldpfed: done in {result['seconds']:.1f}s, summary in {record.out / 'summary.json'}", flush=True)
    return record.out


def _set_up(
    grid: Grid, config: RunSpec, record: RunRecord, public: TextDataset | None, cache: Path
) -> tuple[RunSpec, LdpStrategy, np.ndarray, DimChoice | None]:
    """Build and ship the bundle; with --dim auto choose the dimension first (fed.runtime.auto_dim).

    For --dim auto the nodes are set up with the bundle without a projection, which tells the
    server their label count and training-record counts (public facts); the dimension is then
    chosen on public data alone, and, unless it is 0, the nodes are set up again with the
    projection added. Runs only with --dim auto (opt-in). Returns the run's spec with the chosen dimension, the set-up strategy,
    the bundle shipped and the choice (None with an explicit --dim).
    """
    auto = config.encoder.dim == DIM_AUTO
    if auto:
        config = config.with_options(dim=0)
    bundle = build_bundle(config, public, cache, projection=projection_data(config, public))
    assets = load_assets(unpack(bundle, cache))  # the server's own bundle passes the checks its users make
    strategy = LdpStrategy(config, record, baselines={})
    strategy.setup(grid, bundle, expected_nodes=config.schedule.nodes)
    if not auto or public is None:
        return config, strategy, bundle, None
    public_x = encode_cached(assets.encoder, public, cache)
    task_labels = label_schema(config.data.data)
    if task_labels is None or len(task_labels) != strategy.num_labels:  # only the count the nodes tell
        task_labels = tuple(str(i) for i in range(strategy.num_labels))
    choice = choose_for_run(
        config, public_x, public.labels, public.label_names, task_labels, sum(strategy.train_counts.values())
    )
    print(f"ldpfed: --dim auto chose {choice.dim} ({choice.reason})", flush=True)
    config = config.with_options(dim=choice.dim)
    record.write_json("config.json", config.to_mapping())  # the resolved config: the dimension the run used
    if choice.dim == 0:
        return config, strategy, bundle, choice
    bundle = add_projection(bundle, PCAProjection.fit(public_x, choice.dim))
    strategy = LdpStrategy(config, record, baselines={})
    strategy.setup(grid, bundle, expected_nodes=config.schedule.nodes)
    return config, strategy, bundle, choice


def _run_central(
    grid: Grid, config: RunSpec, record: RunRecord, strategy: LdpStrategy, public_check: PublicCheck, started: float
) -> Path:
    """The rest of a --privacy-model central run: DP-FedAvg rounds, local inference, summary and report."""
    head, plan = central.train(grid, config, strategy)
    acc = central.evaluate(grid, strategy, {"private": head, **strategy.baselines})
    accuracies = {
        "accuracy_local": acc.get("private"),
        "accuracy_public_only": acc.get("public_only"),
        "accuracy_nonprivate": strategy.nonprivate_accuracy,
    }
    warnings = schedule_warnings(config) + list(public_check.warnings)
    result = {
        "privacy_model": "central",
        **accuracies,
        "epsilon_user_central": plan.epsilon,
        "delta": config.privacy.delta,
        "central": plan.to_json(),
        "seconds": time.monotonic() - started,
        "errors": strategy.errors,
        "public_data": public_check.to_json(),
        "warnings": warnings,
    }
    record.write_json("summary.json", result)
    (record.out / "privacy_report.md").write_text(central.report(config, plan, accuracies) + _warning_section(warnings))
    print(f"ldpfed: done in {result['seconds']:.1f}s, summary in {record.out / 'summary.json'}", flush=True)
    return record.out


def _user_results(record: RunRecord, strategy: LdpStrategy, figures: LedgerFigures) -> dict[str, Any] | None:
    """users.csv, groups.md and the per-user plots; returns the group summary (None on devices,
    whose replies carry no per-user outcome: per-user results are simulation only)."""
    results = strategy.user_results
    if results is None:
        return None
    users = strategy.config.data.users
    axes = strategy.user_axes(figures.by_user(figures.budgets, users))  # tiers: the budgets the ledgers enforced
    attributes = strategy.attributes
    sentence, user = figures.by_user(figures.sentence, users), figures.by_user(figures.user, users)
    releases = figures.by_user(figures.user_releases, users)
    node = np.array([str(strategy.node_of.get(u, "")) for u in range(users)], dtype=object)  # Flower node ids are uint64
    columns = {
        "train_records": attributes.train_records,
        "query_records": attributes.query_records,
        "label_skew_tv": attributes.label_skew,
        "releases": releases,
        "epsilon_budget": attributes.budget,
        "epsilon_sentence": sentence,
        "epsilon_user": user,
    }
    record.write_csv("users.csv", users_table(results, node, axes, columns))
    groups = group_summary(results, axes, sentence, user, releases)
    (record.out / "groups.md").write_text("\n".join(group_lines(groups)) + "\n")
    accuracy = results.accuracy()
    plot_accuracy_cdf(accuracy, axes, record.out / "accuracy_users.png")
    tiers = next(axis for axis in axes if axis.name == TIER)
    plot_accuracy_epsilon(accuracy, sentence, tiers, record.out / "accuracy_epsilon.png")
    return groups


def _public_check(config: RunSpec, assets: Assets, public: TextDataset | None, num_labels: int) -> PublicCheck:
    """Compare the public data with the task (fed.runtime.assets.check_public).

    The nodes tell the number of labels; the task's schema (labels.txt, the generated corpus's names) names
    them, else they have no names and the public data is not used as labelled data (check_public). The domain
    needs the task's own training records, which the server reads only where it also trains the non-private
    upper bound (a simulation); there it is measured on a seeded sample of those the run uses (--train-limit's, as
    ``ldpfed simulate``'s own check does; not for the BiLSTM encoder, as there).
    """
    if public is None or not config.evaluation.nonprivate_baseline:
        schema = label_schema(config.data.data) if public is not None else None
        names = schema if schema is not None and len(schema) == num_labels else [str(i) for i in range(num_labels)]
        return check_public(config, public, names)
    train = limited(load_dataset(config.data.data, "train"), config.data, config.seed)  # the records the run uses
    if config.encoder.encoder == "bilstm":  # trained on the public data: its space tells little about the domain
        return check_public(config, public, train.label_names)
    cache = default_cache_dir(config)
    if len(train) > DOMAIN_SAMPLE:
        keep = np.random.default_rng(config.seed).choice(len(train), DOMAIN_SAMPLE, replace=False)
        train = train.subset(np.sort(keep))
    task_x, public_x = (encode_cached(assets.sentence, d, cache) for d in (train, public))
    return check_public(config, public, train.label_names, public_x, task_x)


def _policy_files(groups: int) -> list[str]:
    """Where the simulated policy of each group of users with its own run options (fed.heterogeneity.registry.spec_groups,
    e.g. a privacy tier) is written: policy.toml, or policy-tier-<k>.toml with several."""
    return ["policy.toml"] if groups == 1 else [f"policy-tier-{k}.toml" for k in range(1, groups + 1)]


def shuffled_figure(config: RunSpec, strategy: LdpStrategy) -> ShuffledFigure:
    """Sentence-level central epsilon of the shuffled training rounds (fed.privacy.shuffle).

    eps0 is the largest pure epsilon of one training report over the run's plans (its label's
    randomized response composed in); None when a report is not pure LDP (e.g. Gaussian) or
    mixes several records (the bound takes one data point per report).
    """
    per_report = []
    for plan in strategy.plans:
        event = plan.train.event
        if not isinstance(event, PureEvent) or plan.train.records_per_report != 1:
            return composed(strategy.shuffled, None, config.privacy.delta)
        per_report.append(event.epsilon + (config.privacy.label_epsilon or 0.0))
    return composed(strategy.shuffled, max(per_report), config.privacy.delta)


def _shuffled_section(shuffled: dict[str, Any] | None) -> str:
    """The privacy report's shuffle-model section (empty text without --privacy-model shuffle)."""
    if shuffled is None:
        return ""
    figure = "not available" if shuffled["epsilon"] is None else f"{shuffled['epsilon']:.4g}"
    return (
        "\n## Shuffle model (amplified; not enforced)\n\n"
        f"- central sentence-level epsilon after shuffling: {figure} at delta {shuffled['delta']:g} "
        f"(local epsilon of one report eps0 = {shuffled['eps0']}; reports shuffled per round: {shuffled['batch_sizes']})\n"
        f"- {shuffled['note']}\n"
        "- the users' ledgers above stay the enforced figures: a device cannot verify the shuffler\n"
        "- user-level: no amplification is claimed (the local user-level figures above apply)\n"
    )


def _warning_section(warnings: list[str]) -> str:
    """The privacy report's closing section: the run's warnings (empty text when none)."""
    if not warnings:
        return ""
    return "\n## Warnings\n\n" + "".join(f"- {text}\n" for text in warnings)


def _baselines(config: RunSpec, assets: Assets, public: TextDataset | None, strategy: LdpStrategy) -> None:
    """Public-only baseline and shrinkage target from public data; the non-private upper bound.

    ``public`` is the server's public data if it is labelled like the task, else None; with --combined-baseline
    its features go to the strategy, which adds them to the reports' classifier as one more group. The
    upper bound (simulation only) is the same discriminant trained on the clean, unprojected
    encodings of every user's training records and scored on every user's query records (the
    dev split), i.e. what the encoder gives without any privacy. Where an axis asks for it (privacy
    tiers), a second classifier is fed only the largest-budget group's reports: what the others add.
    """
    cache = default_cache_dir(config)
    features = strategy.plan.train.features
    target = public_means = None
    if public is not None:
        x = features(assets.features(public, cache))
        strategy.baselines["public_only"] = fit_clean(x, public.labels, strategy.num_labels, config.evaluation.shrinkage)
        public_means = class_means(x, public.labels, strategy.num_labels)
        if config.evaluation.combined_baseline:
            strategy.public_records = (x, public.labels)
        if len(public) >= PUBLIC_ROWS_PER_DIM * strategy.dim:
            target = within_class_covariance(x, public.labels, strategy.num_labels)

    strategy.aggregator = strategy.classifier(target, public_means)
    if group_baseline(config):
        strategy.top_tier = strategy.classifier(target, public_means)
    if config.evaluation.nonprivate_baseline:
        population = Population.build(config.data, config.seed, cache)
        train, dev = (encode_cached(assets.sentence, d, cache) for d in (population.train, population.dev))
        model = fit_clean(train, population.train.labels, strategy.num_labels, config.evaluation.shrinkage)
        strategy.nonprivate_accuracy = float((model.predict(dev) == population.dev.labels).mean())
