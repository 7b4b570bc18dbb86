"""The shared runner of a study: one long-lived process that runs the study's runs one after another.

A study run alone (``ldpfed simulate``, :func:`simulations.study.execute`) pays for a new
interpreter, its imports, a SuperLink, a private Ray instance, Flower's app install and the
encoding pass (a child interpreter that reads the encoding cache) every time: on this machine
most of a small run's wall time. The shared runner pays for them once per study: a worker
process (``python -P -m ldpfed.simulations.study_worker``) imports the apps once and runs each
run's ServerApp and ClientApp on the in-process grid (:mod:`simulations.local_grid`, playing the
simulation engine, as ``simulations/benchmarks/run_hashes.py`` does). The encoder and projection stay loaded (the
ClientApp's per-process asset cache), each data file is read once (:func:`_keep_data_files`), and the encodings come
from the on-disk cache (fed.encoders.cache), which the first run that needs them fills. Each run takes the path a
lone run takes otherwise: its options resolved as
``ldpfed simulate`` resolves them, the same checks and warnings, the same encoding pass, the
same ServerApp writing the same run directory; its results (ledgers, metrics, summary) are
identical to the run done alone (tests/test_study_shared.py; docs/scale.md, "Studies").

Isolation: a run that raises is answered as failed and the worker goes on; a worker that dies
(a crash, killed, out of memory) fails only the run it was running, and the next run starts a
new worker. Each run's output (stdout and stderr, file descriptors included) goes to its
``simulate.log``, as a lone run's does.

Protocol: one JSON request per line on the worker's standard input, ``{"options": {...},
"out": DIR, "log": FILE}``, and one JSON answer per line on its standard output (the file
descriptor it was started with; everything else the worker prints goes to the run's log or
/dev/null): ``{"seconds": S}`` or ``{"error": "one line"}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

PER_RUN_CACHES = ("_SPECS", "_RECORDS", "_TIERS", "_COHORTS")
"""Caches of the ClientApp module keyed by one run's spec (its hosted users' records and their stacks): a Ray
actor lives for one run, the worker for many, so they are emptied after each run. Its asset cache (bundle folder ->
loaded encoder and projection), which runs with the same bundle share, is kept."""


def simulate_here(options: Mapping[str, Any], out: Path) -> float:
    """Run one study run in this process, as ``ldpfed simulate --quiet`` would, into ``out``; its wall time.

    The same steps as :func:`ldpfed._simulate.simulate`: options resolved (paths absolute), the classifier and the
    axes' trace files checked, the schedule's warnings, the encoding pass (here, in this process: the encoder stays
    loaded), then the ServerApp and ClientApp, on the in-process grid instead of Flower's Ray engine, and the summary
    printed. Raises what the run raises.
    """
    from ldpfed._encode import encode_run_data
    from ldpfed._run import Run
    from ldpfed._simulate import resolve, warn
    from ldpfed.clients.app import app as client_app
    from ldpfed.fed.configuration.schedule_warnings import schedule_warnings
    from ldpfed.fed.heterogeneity.virtual_clock import VirtualClock
    from ldpfed.fed.learning.classifiers import check_classifier
    from ldpfed.fed.runtime.threads import limit_blas_threads
    from ldpfed.simulations.commands.simulate import _print_summary
    from ldpfed.simulations.local_grid import run_local
    from ldpfed.strategies.app import app as server_app

    limit_blas_threads()
    _keep_data_files()
    config = resolve(None, {**options, "out": str(out)})
    check_classifier(config.evaluation.classifier)
    VirtualClock.start(config, dim=1)
    Path(config.output.out).mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    warn(schedule_warnings(config))
    warn(encode_run_data(config, progress=False))
    try:
        run_local(server_app, client_app, config.schedule.nodes, config.to_mapping())
    finally:
        _forget_run()
    if not (Path(config.output.out) / "summary.json").is_file():
        raise RuntimeError("the run ended without writing summary.json")
    result = Run.load(config.output.out, seconds=time.monotonic() - started)
    _print_summary(result)
    return float(result.seconds or 0.0)


def _keep_data_files() -> None:
    """Read each data file once per worker: the data loader's file reader (fed.data.loaders._read_rows) answers from
    memory for a file it read before, unchanged since (same size, modification time and inode), with fresh lists (a
    caller may change its own). A run reads its task's files several times (the encoding pass, the ServerApp, each
    node's records), and the study's runs read the same files."""
    from ldpfed.fed.data import loaders

    read = loaders._read_rows
    if getattr(read, "kept", False):
        return
    kept: dict[tuple[str, int, int, int], tuple[list[str], list[str] | None, list[int]]] = {}

    def read_kept(path: Path) -> tuple[list[str], list[str] | None, list[int]]:
        stat = os.stat(path)
        key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
        if key not in kept:
            kept[key] = read(path)
        texts, texts2, labels = kept[key]
        return list(texts), None if texts2 is None else list(texts2), list(labels)

    read_kept.kept = True  # type: ignore[attr-defined]
    loaders._read_rows = read_kept


def _forget_run() -> None:
    """Empty the ClientApp's per-run caches (:data:`PER_RUN_CACHES`)."""
    module = sys.modules.get("ldpfed.clients.app")
    for name in PER_RUN_CACHES:
        cache = getattr(module, name, None)
        if isinstance(cache, dict):
            cache.clear()


@contextmanager
def _output_to(path: Path | None) -> Iterator[None]:
    """File descriptors 1 and 2 (and sys.stdout, sys.stderr) to ``path`` (None: /dev/null) for the block."""
    sys.stdout.flush()
    sys.stderr.flush()
    target = os.open(path if path is not None else os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)


def serve(requests: IO[str], answers: IO[str]) -> None:
    """Answer each request line (see the module's docstring) until the input ends."""
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        log = Path(request["log"])
        with _output_to(log):
            try:
                answer: dict[str, Any] = {"seconds": simulate_here(request["options"], Path(request["out"]))}
            except Exception as error:  # the run fails, not the worker (a crash ends the worker: see SharedRunner)
                traceback.print_exc()
                text = " ".join(str(error).split()) or type(error).__name__
                answer = {"error": f"{type(error).__name__}: {text}"[:1000]}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def main() -> int:
    """The worker: answers go to the standard output it was started with; any other output to /dev/null or the run's log."""
    answers = os.fdopen(os.dup(1), "w")
    with _output_to(None):
        serve(sys.stdin, answers)
    return 0


class WorkerDied(RuntimeError):
    """The worker process ended while running a run."""


class SharedRunner:
    """Runs study runs in one worker process (started on the first run, again after one dies or when a run needs
    another environment: the plugins registered in the study's process, fed.plugins.entry_points.environment)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.env: dict[str, str] | None = None
        self.started = 0
        """Workers started so far."""

    def run(self, options: Mapping[str, Any], out: Path, log: Path, env: Mapping[str, str]) -> float:
        """Run one run into ``out`` (its output appended to ``log``); its wall time in seconds.

        Raises RuntimeError with the run's one-line error, or :class:`WorkerDied` when the worker died during the run.
        """
        process = self._worker(dict(env))
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps({"options": dict(options), "out": str(out), "log": str(log)}) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            code = process.wait()
            self.process = None
            raise WorkerDied(f"the shared worker died (exit {code})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return float(answer["seconds"])

    def _worker(self, env: dict[str, str]) -> subprocess.Popen[str]:
        if self.process is not None and (self.process.poll() is not None or env != self.env):
            self.close()
        if self.process is None:
            self.process = subprocess.Popen(
                [sys.executable, "-P", "-m", "ldpfed.simulations.study_worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
            )
            self.env = env
            self.started += 1
        return self.process

    def close(self, stop: bool = False) -> None:
        """End the worker: its input closed, so it ends after its run; with ``stop`` (the study was stopped: Ctrl-C,
        SIGTERM) asked to end now with SIGTERM. Killed if it does not end within 30 s."""
        process, self.process = self.process, None
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()
        except OSError:
            pass
        if stop and process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> SharedRunner:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.close(stop=kind is not None)


if __name__ == "__main__":
    sys.exit(main())
