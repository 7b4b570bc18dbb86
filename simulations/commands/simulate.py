"""``ldpfed simulate``: run the Flower app as a Ray simulation on a private SuperLink, with progress."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from fed.spec.run_spec import RunSpec, options


HELP = "run a federated simulation of LDP users (Flower + Ray) and write a run directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per run option (fed.spec.run_spec.options), with its default."""
    for option in options():
        if option.kind is bool:
            parser.add_argument(option.flag, action=argparse.BooleanOptionalAction, default=None, help=option.help)
        else:
            parser.add_argument(
                option.flag, type=option.parse or option.kind, default=None, help=f"{option.help} (default: {option.to_config(option.default)!r})"
            )
    parser.add_argument(
        "--cpus-per-client", type=int, default=1, help="CPUs Ray reserves per ClientApp (whole CPUs: Flower takes no fractions)"
    )
    parser.add_argument(
        "--ray-address", default=None, metavar="HOST:PORT",
        help="join this running Ray cluster ('auto' or the head's HOST:PORT; default: $RAY_ADDRESS, "
        "else a private Ray instance); see docs/scale.md",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def run(args: argparse.Namespace) -> int:
    """Validate options, warm the encoding cache, run the simulation, print the summary."""
    values = {o.name: getattr(args, o.name) for o in options() if getattr(args, o.name) is not None}
    if "sigma" in values and "epsilon" not in values:
        values["epsilon"] = 0.0
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    values["out"] = str(Path(values.get("out") or Path("runs") / stamp).resolve())
    for option in options():  # trace files, read by the ServerApp elsewhere
        if option.file and values.get(option.name) and Path(values[option.name]).is_file():
            values[option.name] = str(Path(values[option.name]).resolve())
    from fed.spec.schedule_warnings import schedule_warnings
    from simulations.flower_runner import cluster, resolve_ray_address, run_status, start_run

    if args.cpus_per_client < 1:
        raise ValueError(f"--cpus-per-client {args.cpus_per_client}: each ClientApp needs at least 1 CPU")
    ray_address = resolve_ray_address(args.ray_address)
    config = RunSpec.from_mapping(values)
    from fed.learning.classifiers import check_classifier

    check_classifier(config.evaluation.classifier)  # built in or an installed plugin: the ServerApp runs elsewhere
    if ray_address:  # actors on a cluster inherit neither this environment ($LDPFED_CACHE) nor its folder
        from fed.runtime.assets import default_cache_dir

        config = config.with_options(cache_dir=str(default_cache_dir(config).resolve()))
    from fed.heterogeneity.virtual_clock import VirtualClock

    VirtualClock.start(config, dim=1)  # reads the axes' trace files now: a bad one is refused before anything starts
    out = Path(config.output.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    _warn(schedule_warnings(config))
    _warn(_warm_cache(config, progress=not args.quiet))

    federation = (
        f"num-supernodes={config.schedule.nodes} client-resources-num-cpus={args.cpus_per_client} init-args-logging-level='error'"
    )
    if not ray_address:  # a cluster has its own CPUs: ray.init refuses num_cpus when joining one
        federation += f" init-args-num-cpus={os.cpu_count() or 1}"
    log = out / "flower.log"
    with tempfile.TemporaryDirectory(prefix="ldpfed-flwr-") as work, cluster(
        Path(work), simulation=True, ray_address=ray_address
    ) as running:
        process = start_run(running, config.to_mapping(), federation, log)
        _follow(process, out / "metrics.jsonl", config.schedule.rounds, quiet=args.quiet)
        status = run_status(running, log)
    if status != "finished:completed" or not (out / "summary.json").is_file():
        raise RuntimeError(f"the Flower run ended with status {status!r}; see {log}")
    _print_summary(out, time.monotonic() - started)
    return 0


def _warm_cache(config: RunSpec, progress: bool) -> list[str]:
    """Encode the run's data once, with progress bars, so every Ray actor reads the cache; returns
    the warnings of the public-data check (fed.runtime.assets.check_public).

    The encoding runs in a child process: the encoder's memory (hundreds of MiB) is gone before
    the run starts instead of staying in this process for the whole run.
    """
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_encode_run_data, config, progress).result()


def _encode_run_data(config: RunSpec, progress: bool) -> list[str]:
    """Fill the encoding cache with the run's public data and both splits; check the public data
    against the task (labels; the domain too, unless the encoder is the BiLSTM the server trains on the
    public data inside the run)."""
    from fed.runtime.assets import check_public, default_cache_dir, load_public
    from fed.encoders.cache import encode_cached
    from fed.encoders.factory import make_encoder
    from fed.encoders.tuned import TUNED_SPEC
    from fed.heterogeneity.registry import encoding_groups
    from fed.spec.plan import encoder_spec
    from fed.data.population import Population

    population = Population.build(config.data, config.seed)
    public = load_public(config)
    if config.encoder.encoder in ("bilstm", TUNED_SPEC):  # trained on the public data inside the run
        return list(check_public(config, public, population.train.label_names).warnings)
    encoder = make_encoder(config.encoder.encoder)
    if config.encoder.dim > encoder.dim:  # fail now, not at the projection's fit inside the run
        raise ValueError(f"--dim {config.encoder.dim} exceeds the encoder's {encoder.dim} dimensions ({config.encoder.encoder})")
    cache = default_cache_dir(config)
    train = encode_cached(encoder, population.train, cache, progress=progress)
    encode_cached(encoder, population.dev, cache, progress=progress)
    records = encoder_spec(config)
    if records != config.encoder.encoder:  # the mechanism releases another encoding of the records (snd: token matrices)
        for split in (population.train, population.dev):
            encode_cached(make_encoder(records), split, cache, progress=progress)
    for encoding, _ in encoding_groups(config):  # each device group's encoder setting, which its users' nodes read
        if encoding:
            truncated = encoder.truncated(encoding["max_tokens"])
            for split in (population.train, population.dev):
                encode_cached(truncated, split, cache, progress=progress)
    public_x = None if public is None else encode_cached(encoder, public, cache, progress=progress)
    return list(check_public(config, public, population.train.label_names, public_x, train).warnings)


def _warn(warnings: list[str]) -> None:
    """Print each warning, loudly, to standard error."""
    from rich.console import Console
    from rich.text import Text

    console = Console(stderr=True)
    for text in warnings:
        console.print(Text.assemble(("WARNING", "bold yellow"), ": ", text))


def _follow(process, metrics: Path, rounds: int, quiet: bool) -> None:
    """Wait for the run, showing a progress bar over rounds read from metrics.jsonl."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} rounds"),
        TimeElapsedColumn(), disable=quiet,
    ) as bar:
        task = bar.add_task("starting Flower + Ray", total=rounds)
        while process.poll() is None:
            lines = metrics.read_text().splitlines() if metrics.is_file() else []
            if lines:
                last = json.loads(lines[-1])
                acc = last.get("accuracy_local")
                text = f"round {last['round']}: accuracy {acc:.3f}" if isinstance(acc, float) else f"round {last['round']}"
                bar.update(task, completed=len(lines), description=text)
            time.sleep(0.5)


def _print_summary(out: Path, seconds: float) -> None:
    from rich.console import Console
    from rich.table import Table

    summary = json.loads((out / "summary.json").read_text())
    table = Table(title=f"ldpfed run: {out}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key in (
        "accuracy_local", "accuracy_local_denoised", "accuracy_remote", "accuracy_nonprivate", "accuracy_public_only",
        "accuracy_top_tier_only", "enforce", "epsilon_enforced_max", "epsilon_sentence_max", "epsilon_sentence_median",
        "epsilon_amplified_pld_max", "epsilon_user_max", "epsilon_shuffled", "epsilon_user_central", "delta", "releases",
    ):
        value = summary.get(key)
        table.add_row(key, "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value))
    table.add_row("wall time (s)", f"{seconds:.1f}")
    Console().print(table)
    _warn(summary.get("warnings", []))
