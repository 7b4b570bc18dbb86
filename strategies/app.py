"""The ldpfed ServerApp: build the run's assets and baselines, run LdpStrategy, write the run directory."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from fed.aggregation import ReportAggregator, fit_clean
from fed.assets import Assets, build_bundle, default_cache_dir, load_assets, load_public, unpack
from fed.classifier import class_means, within_class_covariance
from fed.dataset import TextDataset
from fed.encoders.cache import encode_cached
from fed.config import RunConfig
from fed.plots import plot_accuracy, plot_epsilon
from fed.policy import DevicePolicy
from fed.population import Population
from fed.report import LedgerFigures, privacy_report, summary
from fed.run_record import RunRecord
from strategies.strategy import LdpStrategy
from fed.threads import limit_blas_threads

app = ServerApp()

SIMULATED_POLICY = (
    "# The policy each simulated user derives from this run's options (fed.policy.DevicePolicy.from_run).\n"
    "# A real device ignores the run options and applies its owner's policy file (docs/device.md).\n"
)
PUBLIC_ROWS_PER_DIM = 10
"""Public records needed per dimension before their covariance is a shrinkage target."""


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point Flower calls with the run's config."""
    run(grid, RunConfig.from_mapping(context.run_config))


def run_directory(config: RunConfig) -> Path:
    """--out, else runs/<UTC time> under the working directory (printed, absolute)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path(config.out or Path.cwd() / "runs" / stamp).resolve()


def run(grid: Grid, config: RunConfig) -> Path:
    """One whole run; returns the run directory."""
    limit_blas_threads()
    started = time.monotonic()
    record = RunRecord(run_directory(config), config)
    print(f"ldpfed: run directory {record.out}", flush=True)
    cache = default_cache_dir(config)
    public = load_public(config)
    bundle = build_bundle(config, public, cache)
    assets = load_assets(unpack(bundle, cache))  # the server's own bundle passes the checks its users make

    strategy = LdpStrategy(config, record, baselines={})
    strategy.setup(grid, bundle, expected_nodes=config.nodes)
    (record.out / "policy.toml").write_text(SIMULATED_POLICY + DevicePolicy.from_run(config, strategy.plan).to_toml())
    _baselines(config, assets, public, strategy)

    strategy.start(grid, initial_arrays=ArrayRecord(), num_rounds=config.rounds, timeout=config.round_timeout)
    inference = strategy.remote_inference(grid) if config.inference == "remote" else None
    ledgers = strategy.collect_ledgers(grid)

    record.write_json("ledgers.json", {"delta": config.delta, "users": ledgers})
    figures = LedgerFigures.from_ledgers(ledgers, strategy.train_counts)
    del ledgers  # the parsed ledgers in ``figures`` are what the report needs
    last = record.rounds[-1] if record.rounds else {}
    accuracies = {
        "accuracy_local": last.get("accuracy_local"),
        "accuracy_remote": None if inference is None else inference["accuracy"],
        "accuracy_nonprivate": last.get("accuracy_nonprivate"),
        "accuracy_public_only": last.get("accuracy_public_only"),
    }
    result = summary(
        config, strategy.plan, figures, accuracies, time.monotonic() - started, inference, strategy.train_counts
    )
    result["errors"] = strategy.errors
    result["nodes_dropped"] = {str(node): reason for node, reason in sorted(strategy.dropped.items())}
    record.write_json("summary.json", result)
    (record.out / "privacy_report.md").write_text(privacy_report(config, strategy.plan, figures, result))
    plot_accuracy(record.rounds, record.out / "accuracy.png")
    plot_epsilon(figures.sentence, figures.user, strategy.plan.budget.epsilon_sentence, record.out / "epsilon.png")
    if config.save_reports and strategy.saved:
        np.savez_compressed(
            record.out / "reports.npz",
            **{k: np.concatenate([s[k] for s in strategy.saved]) for k in ("reports", "labels", "users")},
        )
    print(f"ldpfed: done in {result['seconds']:.1f}s, summary in {record.out / 'summary.json'}", flush=True)
    return record.out


def _baselines(config: RunConfig, assets: Assets, public: TextDataset | None, strategy: LdpStrategy) -> None:
    """Public-only baseline and shrinkage target from public data; the non-private upper bound.

    The upper bound (simulation only) is the same discriminant trained on the clean,
    unprojected encodings of every user's training records and scored on every user's
    query records (the dev split), i.e. what the encoder gives without any privacy.
    """
    cache = default_cache_dir(config)
    preprocess = strategy.plan.train.preprocess
    target = public_means = None
    if public is not None and public.num_labels == strategy.num_labels:
        x = preprocess(assets.features(public, cache))
        strategy.baselines["public_only"] = fit_clean(x, public.labels, strategy.num_labels, config.shrinkage)
        public_means = class_means(x, public.labels, strategy.num_labels)
        if len(public) >= PUBLIC_ROWS_PER_DIM * strategy.dim:
            target = within_class_covariance(x, public.labels, strategy.num_labels)
    strategy.aggregator = ReportAggregator(
        strategy.dim, strategy.num_labels, config.shrinkage, target, public_means, config.screening
    )
    if config.nonprivate_baseline:
        population = Population.build(config)
        train, dev = (encode_cached(assets.encoder, d, cache) for d in (population.train, population.dev))
        model = fit_clean(train, population.train.labels, strategy.num_labels, config.shrinkage)
        strategy.nonprivate_accuracy = float((model.predict(dev) == population.dev.labels).mean())
