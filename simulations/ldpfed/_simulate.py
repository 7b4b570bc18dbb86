"""simulate(): run the Flower app as a Ray simulation on a private SuperLink and return the Run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fed.runtime.threads import limit_blas_threads
from fed.spec.run_spec import RunSpec, options
from ldpfed._run import Run


def simulate(
    spec: RunSpec | None = None,
    /,
    *,
    cpus_per_client: int = 1,
    ray_address: str | None = None,
    progress: bool = True,
    **run_options: Any,
) -> Run:
    """Run a federated simulation of LDP users (Flower + Ray), as ``ldpfed simulate`` does, and return it.

    Parameters
    ----------
    spec : RunSpec, optional
        The run's options; ``run_options`` change some of them.
    cpus_per_client : int
        CPUs Ray reserves per ClientApp (whole CPUs).
    ray_address : str, optional
        Join this running Ray cluster ('auto' or HOST:PORT; default: $RAY_ADDRESS, else a private Ray instance).
    progress : bool
        Show the encoding and round progress bars. Warnings print to standard error either way; the
        summary is returned, not printed.
    **run_options
        Run options by their underscored names (``ldpfed simulate --help``, fed.spec.run_spec.options),
        e.g. ``data="generated:200", users=4, epsilon=3``. Without ``out`` the run goes to runs/<UTC time>.

    Returns
    -------
    Run
        The finished run, read back from its run directory.

    Raises
    ------
    ValueError
        A bad option, with the text ``ldpfed simulate`` prints; nothing runs and no budget is spent.
    RuntimeError
        The Flower run did not complete (the message names its log).
    """
    limit_blas_threads()
    from fed.spec.schedule_warnings import schedule_warnings
    from simulations.flower_runner import cluster, resolve_ray_address, run_status, start_run

    if cpus_per_client < 1:
        raise ValueError(f"--cpus-per-client {cpus_per_client}: each ClientApp needs at least 1 CPU")
    address = resolve_ray_address(ray_address)
    config = resolve(spec, run_options)
    from fed.learning.classifiers import check_classifier

    check_classifier(config.evaluation.classifier)  # built in or an installed plugin: the ServerApp runs elsewhere
    if address:  # actors on a cluster inherit neither this environment ($LDPFED_CACHE) nor its folder
        from fed.runtime.assets import default_cache_dir

        config = config.with_options(cache_dir=str(default_cache_dir(config).resolve()))
    from fed.heterogeneity.virtual_clock import VirtualClock

    VirtualClock.start(config, dim=1)  # reads the axes' trace files now: a bad one is refused before anything starts
    out = Path(config.output.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    warn(schedule_warnings(config))
    warn(_warm_cache(config, progress))

    federation = f"num-supernodes={config.schedule.nodes} client-resources-num-cpus={cpus_per_client} init-args-logging-level='error'"
    if not address:  # a cluster has its own CPUs: ray.init refuses num_cpus when joining one
        federation += f" init-args-num-cpus={os.cpu_count() or 1}"
    log = out / "flower.log"
    with tempfile.TemporaryDirectory(prefix="ldpfed-flwr-") as work, cluster(
        Path(work), simulation=True, ray_address=address
    ) as running:
        process = start_run(running, config.to_mapping(), federation, log)
        _follow(process, out / "metrics.jsonl", config.schedule.rounds, quiet=not progress)
        status = run_status(running, log)
    if status != "finished:completed" or not (out / "summary.json").is_file():
        raise RuntimeError(f"the Flower run ended with status {status!r}; see {log}")
    return Run.load(out, seconds=time.monotonic() - started)


def resolve(spec: RunSpec | None, values: dict[str, Any]) -> RunSpec:
    """The run's spec from ``spec`` and the options given (as ``ldpfed simulate`` reads its flags).

    ``sigma`` given without ``epsilon`` sets epsilon to 0 (sigma overrides it); the run directory
    defaults to runs/<UTC time>; it and trace files that exist are made absolute (the ServerApp reads them elsewhere).
    """
    if spec is not None and not isinstance(spec, RunSpec):
        raise TypeError(f"spec must be a RunSpec, got {type(spec).__name__}; give run options as keywords")
    values = dict(values)
    if "sigma" in values and "epsilon" not in values:
        values["epsilon"] = 0.0
    if spec is not None:
        values = {**spec.flat(), **values}
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    values["out"] = str(Path(values.get("out") or Path("runs") / stamp).resolve())
    for option in options():  # trace files, read by the ServerApp elsewhere
        if option.file and values.get(option.name) and Path(values[option.name]).is_file():
            values[option.name] = str(Path(values[option.name]).resolve())
    return RunSpec.from_mapping(values)


def _warm_cache(config: RunSpec, progress: bool) -> list[str]:
    """Encode the run's data once, with progress bars, so every Ray actor reads the cache; returns
    the warnings of the public-data check (fed.runtime.assets.check_public).

    The encoding runs in a child interpreter (ldpfed._encode): the encoder's memory (hundreds of
    MiB) is gone before the run starts instead of staying in this process for the whole run, and
    the caller's script or notebook is never imported again there.
    """
    with tempfile.TemporaryDirectory(prefix="ldpfed-encode-") as work:
        request, answer = Path(work) / "config.json", Path(work) / "answer.json"
        request.write_text(json.dumps(config.to_mapping()))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        command = [sys.executable, "-m", "ldpfed._encode", str(request), str(answer), "1" if progress else "0"]
        done = subprocess.run(command, env=env)
        result = json.loads(answer.read_text()) if answer.is_file() else {}
    if "error" in result:
        raise ValueError(result["error"])
    if done.returncode != 0 or "warnings" not in result:
        raise RuntimeError(f"encoding the run's data failed (exit {done.returncode}); its traceback is above")
    return list(result["warnings"])


def warn(warnings: list[str]) -> None:
    """Print each warning, loudly, to standard error."""
    from rich.console import Console
    from rich.text import Text

    console = Console(stderr=True)
    for text in warnings:
        console.print(Text.assemble(("WARNING", "bold yellow"), ": ", text))


def _follow(process: subprocess.Popen, metrics: Path, rounds: int, quiet: bool) -> None:
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
