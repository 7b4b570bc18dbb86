"""simulate(): run the Flower app as a Ray simulation on a private SuperLink and return the Run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ldpfed.fed.runtime.threads import limit_blas_threads
from ldpfed.fed.configuration.run_spec import RunSpec, options
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
        Show the encoding and round progress bars. Warnings print to standard error either way, each once (before
        the run, and those only the run found after it); the summary is returned, not printed.
    **run_options
        Run options by their underscored names (``ldpfed simulate --help``, fed.configuration.run_spec.options),
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
    from ldpfed.fed.configuration.schedule_warnings import schedule_warnings
    from ldpfed.simulations.flower_runner import cluster, resolve_ray_address, run_status, start_run
    from ldpfed.simulations.processes import stop

    if cpus_per_client < 1:
        raise ValueError(f"--cpus-per-client {cpus_per_client}: each ClientApp needs at least 1 CPU")
    address = resolve_ray_address(ray_address)
    config = resolve(spec, run_options)
    from ldpfed.fed.learning.classifiers import check_classifier

    check_classifier(config.evaluation.classifier)  # built in or a plugin: the ServerApp runs elsewhere
    plugins = _plugin_environment(config)
    if address:  # actors on a cluster inherit neither this environment ($LDPFED_CACHE) nor its folder
        from ldpfed.fed.runtime.assets import default_cache_dir

        config = config.with_options(cache_dir=str(default_cache_dir(config).resolve()))
    from ldpfed.fed.heterogeneity.virtual_clock import VirtualClock

    VirtualClock.start(config, dim=1)  # reads the axes' trace files now: a bad one is refused before anything starts
    out = Path(config.output.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    shown = schedule_warnings(config) + _warm_cache(config, progress, plugins)
    warn(shown)

    federation = f"num-supernodes={config.schedule.nodes} client-resources-num-cpus={cpus_per_client} init-args-logging-level='error'"
    if not address:  # a cluster has its own CPUs: ray.init refuses num_cpus when joining one
        federation += f" init-args-num-cpus={os.cpu_count() or 1}"
    log = out / "flower.log"
    with tempfile.TemporaryDirectory(prefix="ldpfed-flwr-") as work, cluster(
        Path(work), simulation=True, ray_address=address, env=plugins
    ) as running:
        process = start_run(running, config.to_mapping(), federation, log)
        try:
            _follow(process, out / "metrics.jsonl", config.schedule.rounds, quiet=not progress)
        finally:
            stop(process)  # stopped early (Ctrl-C, SIGTERM): `flwr run` ends before the SuperLink it streams from
        status = run_status(running, log)
    if status != "finished:completed" or not (out / "summary.json").is_file():
        reason = flower_failure(log)
        raise RuntimeError(
            f"the Flower run failed: {reason} (its log: {log})" if reason
            else f"the Flower run ended with status {status!r}; see {log}"
        )
    run = Run.load(out, seconds=time.monotonic() - started)
    warn([text for text in run.summary.get("warnings", []) if text not in shown])  # the run's own, once each
    return run


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Refused|Exit)\w*: \S.*$")


def flower_failure(log: Path) -> str | None:
    """The reason a Flower run failed, as one line: the last exception line of a traceback in its log (e.g. the
    ServerApp's "RuntimeError: ... node 15 refused (malformed): ..."), or None when the log holds none."""
    try:
        lines = [_ANSI.sub("", line).strip() for line in log.read_text(errors="replace").splitlines()]
    except OSError:
        return None
    found = None
    in_traceback = False
    for line in lines:
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
        elif in_traceback and _EXCEPTION.match(line):
            found, in_traceback = line, False
    return found


def resolve(spec: RunSpec | None, values: dict[str, Any]) -> RunSpec:
    """The run's spec from ``spec`` and the options given (as ``ldpfed simulate`` reads its flags).

    ``sigma`` given without ``epsilon`` sets epsilon to 0 (sigma overrides it); the run directory
    defaults to runs/<UTC time>. Every local path among the options is made absolute against the working directory
    (:func:`absolute_paths`): the Flower processes that read them run in a folder of their own.
    """
    if spec is not None and not isinstance(spec, RunSpec):
        raise TypeError(f"spec must be a RunSpec, got {type(spec).__name__}; give run options as keywords")
    values = dict(values)
    if "sigma" in values and "epsilon" not in values:
        values["epsilon"] = 0.0
    if spec is not None:
        values = {**spec.flat(), **values}
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    values["out"] = values.get("out") or str(Path("runs") / stamp)
    return RunSpec.from_mapping(absolute_paths(values))


BUILTIN_ENCODERS = ("minilm", "bilstm", "minilm-tuned")


def absolute_paths(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (run options by underscored name) with each local path made absolute against the working directory.

    The path options: ``data`` and ``public`` (a folder, ``FOLDER:split=STEM,...`` with its ``.tsv`` targets, not
    ``generated[:...]``, ``none`` or a Hugging Face id), ``encoder`` (a model folder, ``bilstm:FOLDER``, the encoder
    of ``tokens:L:X``; not a built-in name or a registered plugin's spec), ``out``, ``cache_dir`` and every option
    that may name a file (fed.configuration.option.Option.file: trace files). A value counts as a path when it exists here,
    or is written as one (it starts with '.', '/' or '~', or holds two '/', as no Hugging Face id does).
    """
    values = dict(values)
    files = {option.name for option in options() if option.file}
    for name, value in list(values.items()):
        if not isinstance(value, str) or not value:
            continue
        if name in ("data", "public"):
            values[name] = _dataset_path(value)
        elif name == "encoder":
            values[name] = _encoder_path(value)
        elif name in ("out", "cache_dir") or (name in files and _exists(value)):
            values[name] = _absolute(value)
    return values


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def _exists(path: str) -> bool:
    try:
        return Path(path).expanduser().exists()
    except (OSError, ValueError):
        return False


def _written_as_path(value: str) -> bool:
    """Whether ``value`` reads as a path whether or not it exists (fed.data.loaders.load_dataset's rule)."""
    return value.startswith((".", "/", "~")) or value.count("/") > 1


def _dataset_path(spec: str) -> str:
    from ldpfed.fed.data.loaders import DATA_SUFFIXES

    if spec in ("none", "generated") or spec.startswith("generated:"):
        return spec
    head, sep, tail = spec.rpartition(":")
    if sep and "=" in tail and Path(head).expanduser().is_dir():  # FOLDER:split=stem-or-file.tsv/.csv,...
        items = []
        for item in tail.split(","):
            split, eq, target = item.partition("=")
            if eq and target.strip().endswith(DATA_SUFFIXES):  # a file, read relative to the working directory
                target = _absolute(target.strip())
            items.append(f"{split}{eq}{target}")
        return f"{_absolute(head)}:{','.join(items)}"
    return _absolute(spec) if _exists(spec) or _written_as_path(spec) else spec


def _encoder_path(spec: str) -> str:
    if spec in BUILTIN_ENCODERS:
        return spec
    if spec.startswith("tokens:"):
        length, sep, base = spec.removeprefix("tokens:").partition(":")
        return f"tokens:{length}:{_encoder_path(base)}" if sep and base else spec
    if spec.startswith("bilstm:"):
        folder = spec.removeprefix("bilstm:")
        return f"bilstm:{_absolute(folder)}" if folder else spec
    from ldpfed.fed.encoders.registry import ENCODERS

    if spec.partition(":")[0] in ENCODERS:  # a plugin's spec, resolved before any path (fed.encoders.resolver)
        return spec
    return _absolute(spec) if _exists(spec) or spec.startswith((".", "~")) else spec


def _plugin_environment(config: RunSpec) -> dict[str, str]:
    """The environment that hands the run's plugins registered in this process (``ldpfed.register_*``) to the
    processes it starts (fed.plugins.entry_points.environment); ValueError, before anything starts, for one that no
    other process can import."""
    from ldpfed.fed.plugins.entry_points import PluginError, environment

    try:
        return environment(config.to_mapping())
    except PluginError as error:
        raise ValueError(str(error)) from None


def _warm_cache(config: RunSpec, progress: bool, plugins: dict[str, str] | None = None) -> list[str]:
    """Encode the run's data once, with progress bars, so every Ray actor reads the cache; returns
    the warnings of the public-data check (fed.runtime.assets.check_public).

    The encoding runs in a child interpreter (ldpfed._encode): the encoder's memory (hundreds of
    MiB) is gone before the run starts instead of staying in this process for the whole run, and
    the caller's script or notebook is never imported again there.
    """
    from ldpfed.simulations import processes

    with tempfile.TemporaryDirectory(prefix="ldpfed-encode-") as work:
        request, answer = Path(work) / "config.json", Path(work) / "answer.json"
        request.write_text(json.dumps(config.to_mapping()))
        env = {**os.environ, **(plugins or {}), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        command = [sys.executable, "-P", "-m", "ldpfed._encode", str(request), str(answer), "1" if progress else "0"]
        done = processes.run(command, env=env, start_new_session=True)  # Ctrl-C reaches it as our SIGTERM: no traceback
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
