"""How ldpfed's per-round cost grows with the number of users, beside plain Flower (issue 10).

``python -m ldpfed.simulations.benchmarks.bench_scale [--users 1000,10000,100000] [--profile 16,384]`` runs, in
one invocation and in this order:

1. the noise bound: torch.randn and numpy ``standard_normal`` throughput (normals/s; float32
   and float64; one thread, and two threads each with its own generator);
2. plain Flower (unless ``--no-plain``; simulations.benchmarks.plain_flower: a trivial ClientApp answering one train message
   with a tiny array) at ``--nodes`` nodes (the ldpfed runs' count) and at each
   ``--plain-nodes``, one user per node, run the way ``ldpfed simulate`` runs (private
   SuperLink, Flower's Ray simulation backend, same federation options);
3. ``ldpfed simulate`` for every profile and user count: every user sampled every round
   (``--users-per-round 0``), profile 16 releasing one 16-d report per round, profile 384
   sixteen records x 384 dims (``--dim 0 --records-per-user-round 16``).

It prints users, steady-state user-rounds/s of ldpfed and of plain Flower side by side, the
fraction of the noise bound reached, the peak memory of all processes and the seconds the
nodes spent on ledgers, and writes a JSON report (``--out``) and a plot of cost against users
beside it (same name, ``.png``).

Definitions:

- steady state: rounds warmup+1..R of metrics.jsonl (``--warmup``, default 2: round 1 starts
  the Ray actors and builds each node's users in the actor that serves it; the other actor
  builds them the first time it serves that node, usually in round 2). user-rounds/s = users served (sampled less refused; plain Flower:
  nodes answering) summed over those rounds / the wall-clock seconds from the end of round
  ``warmup`` to the end of round R (the rows' ``elapsed``), so the work between rounds counts
  too (e.g. the server's per-user metrics after an evaluation). A round's own ``seconds`` run
  from the server's train request to the end of its evaluation (ldpfed) or to the last reply
  (plain Flower).
- noise-bound fraction: normals the reports need per second (reports/s x dims) over the best
  normals/s measured in step 1.
- peak memory: the largest sum, over samples every ``--sample-interval`` s, of the RSS (and
  PSS) of the launched command and all its descendants (SuperLink, SuperExec, flwr run,
  flwr-simulation, Ray's GCS, raylet, agents and actors), plus any process carrying the run's
  environment tag that has left the tree (re-parented); read from /proc (Linux).
- ledger time: the per-round ``ledger_seconds`` field of metrics.jsonl (seconds the nodes spent
  checking, charging and writing ledgers, summed over nodes, so it can exceed the round's
  seconds when nodes work in parallel), averaged over the steady rounds; blank when absent.

- evaluation: ``--evaluate-every`` (default 1) is passed to ``ldpfed simulate``; the steady
  rounds average rounds with and without an evaluation at that frequency.
- round 1 done after: seconds from the launch to the end of round 1 (cluster and Ray start,
  the server's assets, the nodes' setup, round 1).

Each user holds ``records per round`` training records (iid partition of ``generated:N``, N =
users x records; the dev split, N / 5, gives query records to some users only) and every
record may be released once per round (``--releases-per-record`` = rounds), so no user runs
out of budget and the data to encode stays one record set per user. The ldpfed runs
skip the simulation-only non-private baseline (``--no-nonprivate-baseline``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.simulations.benchmarks.processes import TAG_VARIABLE, TreeMemory, has_tag, memory_kb
from ldpfed.simulations.flower_runner import BIN
GOALS = {"16": 15_000.0, "384": 5_000.0}
"""Issue 10, goal 1: user-rounds/s ldpfed must reach on 2 cores, per profile."""
GIB = 1024**3


@dataclass(frozen=True)
class Profile:
    """What each user releases per round: ``records`` reports of ``dims`` coordinates."""

    name: str
    dim_option: int
    dims: int
    records: int

    def simulate_options(self) -> list[str]:
        """The ``ldpfed simulate`` options of this profile."""
        return ["--dim", str(self.dim_option), "--records-per-user-round", str(self.records)]


PROFILES = {
    "16": Profile("16", dim_option=16, dims=16, records=1),
    "384": Profile("384", dim_option=0, dims=384, records=16),  # --dim 0: MiniLM's own 384 dims
}


# -- figures from metrics.jsonl ------------------------------------------------------------------
@dataclass(frozen=True)
class Steady:
    """Steady-state figures of one run: sums over the rounds after the warm-up ones."""

    rounds: int
    user_rounds: int
    reports: int
    seconds: float
    first_round_seconds: float | None
    ledger_seconds: float | None

    @property
    def user_rounds_per_s(self) -> float:
        """Users served per second of round time."""
        return self.user_rounds / self.seconds if self.seconds > 0 else float("nan")

    @property
    def reports_per_s(self) -> float:
        """Reports received per second of round time."""
        return self.reports / self.seconds if self.seconds > 0 else float("nan")

    @property
    def seconds_per_round(self) -> float:
        """Mean seconds of a steady round."""
        return self.seconds / self.rounds

    @property
    def ledger_seconds_per_round(self) -> float | None:
        """Mean ledger seconds of a steady round (None when the run does not record them)."""
        return None if self.ledger_seconds is None else self.ledger_seconds / self.rounds


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The complete rows (newline-terminated: one being written is left out) of a metrics.jsonl file."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.strip()]


def users_served(row: dict[str, Any]) -> int:
    """Users one round served: plain Flower's answering nodes, or ldpfed's sampled users less refusals."""
    if "replies" in row:
        return int(row["replies"])
    return int(row.get("users_sampled", 0)) - int(row.get("users_refused", 0))


def steady_state(rows: Sequence[dict[str, Any]], warmup: int = 1) -> Steady:
    """Sum the rounds after the first ``warmup`` ones; ValueError if none is left."""
    ordered = sorted(rows, key=lambda row: int(row["round"]))
    counted = ordered[warmup:]
    if not counted:
        raise ValueError(f"{len(ordered)} round(s) recorded; steady state needs more than {warmup}")
    ledger = [row["ledger_seconds"] for row in counted if row.get("ledger_seconds") is not None]
    return Steady(
        rounds=len(counted),
        user_rounds=sum(users_served(row) for row in counted),
        reports=sum(int(row.get("reports_received", row.get("replies", 0))) for row in counted),
        seconds=_steady_seconds(ordered, warmup),
        first_round_seconds=float(ordered[0]["seconds"]) if warmup else None,
        ledger_seconds=float(sum(ledger)) if len(ledger) == len(counted) else None,
    )


def _steady_seconds(ordered: Sequence[dict[str, Any]], warmup: int) -> float:
    """Wall-clock seconds from the end of the last warm-up round to the end of the last round (the
    rows' ``elapsed``: the work between rounds included), else the counted rounds' summed ``seconds``."""
    if warmup and all("elapsed" in row for row in ordered):
        return float(ordered[-1]["elapsed"]) - float(ordered[warmup - 1]["elapsed"])
    return float(sum(float(row["seconds"]) for row in ordered[warmup:]))


def noise_fraction(reports_per_s: float, dims: int, bound: float) -> float:
    """Normals the reports need per second (one per coordinate) over the bound's normals/s."""
    return reports_per_s * dims / bound


# -- the noise bound -----------------------------------------------------------------------------
def normals_per_second(library: str, dtype: str, threads: int, seconds: float = 0.5, block: int = 1 << 20) -> float:
    """Throughput of ``threads`` Python threads, each filling blocks from its own generator."""
    if library == "torch":
        import torch

        torch.set_num_threads(1)
        generators = [torch.Generator().manual_seed(i) for i in range(threads)]
        buffers = [torch.empty(block, dtype=getattr(torch, dtype)) for _ in range(threads)]

        def fill(i: int) -> None:
            torch.randn(block, generator=generators[i], out=buffers[i])
    else:
        rngs = [np.random.default_rng(i) for i in range(threads)]
        arrays = [np.empty(block, dtype=dtype) for _ in range(threads)]

        def fill(i: int) -> None:
            rngs[i].standard_normal(block, dtype=arrays[i].dtype, out=arrays[i])

    fill(0)  # warm-up
    counts = [0] * threads

    def work(i: int) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            fill(i)
            counts[i] += block

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.perf_counter() - start)


def measure_noise_bounds(seconds: float, threads: Sequence[int] = (1, 2)) -> list[dict[str, Any]]:
    """normals/s of torch.randn and numpy standard_normal, float32 and float64, per thread count."""
    rows = []
    for library in ("torch", "numpy"):
        for dtype in ("float32", "float64"):
            for count in threads:
                rate = normals_per_second(library, dtype, count, seconds)
                rows.append({"library": library, "dtype": dtype, "threads": count, "normals_per_s": rate})
                print(f"[bench] noise bound: {library} {dtype}, {count} thread(s): {rate / 1e6:.1f} M normals/s", flush=True)
    return rows


# -- running one benchmarked command -------------------------------------------------------------
@dataclass
class Run:
    """One benchmarked run: what was launched and what it cost."""

    kind: str
    users: int
    nodes: int
    rounds: int
    out: str
    command: list[str]
    status: str = "not run"
    wall_seconds: float = 0.0
    data: str = ""
    profile: str = ""
    peak_rss_gib: float = 0.0
    peak_pss_gib: float = 0.0
    peak_processes: list[dict[str, Any]] = field(default_factory=list)
    reparented_processes: list[str] = field(default_factory=list)
    leftover_processes: int = 0
    memory_samples: int = 0
    sampler_cpu_seconds: float = 0.0
    load_average_before: float = 0.0
    load_average_after: float = 0.0
    first_round_done_after_s: float | None = None
    steady: dict[str, Any] | None = None
    user_rounds_per_s: float | None = None
    reports_per_s: float | None = None
    seconds_per_round: float | None = None
    first_round_seconds: float | None = None
    ledger_seconds_per_round: float | None = None
    noise_bound_fraction: float | None = None


def run_measured(
    run: Run, timeout: float, interval: float, progress: Callable[[dict[str, Any]], None], warmup: int = 1
) -> Run:
    """Launch ``run.command``, sample its memory, follow its metrics.jsonl; stop it after ``timeout`` s.

    Steady-state figures leave out the first ``warmup`` rounds.
    """
    out = Path(run.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex
    env = dict(os.environ, **{TAG_VARIABLE: tag, "PYTHONUNBUFFERED": "1"})
    env.pop("RAY_ADDRESS", None)  # a private Ray per run, inside the measured tree (not a shared cluster)
    metrics, seen = out / "metrics.jsonl", 0
    metrics.unlink(missing_ok=True)  # left by an earlier run into the same folder
    run.load_average_before = os.getloadavg()[0]
    started = time.monotonic()
    with open(out / "bench.log", "wb") as log:
        process = subprocess.Popen(run.command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2])
        with TreeMemory(process.pid, tag, interval, rescan_every=5, pss_every=10) as memory:
            while process.poll() is None:
                if time.monotonic() - started > timeout:
                    _interrupt(process)
                    run.status = f"stopped after {timeout:.0f} s"
                    break
                rows = read_metrics(metrics)
                if rows and run.first_round_done_after_s is None:
                    run.first_round_done_after_s = time.monotonic() - started
                for row in rows[seen:]:
                    progress(row)
                seen = max(seen, len(rows))
                time.sleep(0.5)
    run.wall_seconds = time.monotonic() - started
    run.load_average_after = os.getloadavg()[0]
    if run.status == "not run":
        run.status = "completed" if process.returncode == 0 else f"failed (exit {process.returncode}; see {out / 'bench.log'})"
    run.leftover_processes = _end_tagged(tag)
    run.peak_rss_gib, run.peak_pss_gib = memory.peak_rss_kb * 1024 / GIB, memory.peak_pss_kb * 1024 / GIB
    run.peak_processes, run.memory_samples = memory.peak_processes, memory.samples
    run.sampler_cpu_seconds = memory.cpu_seconds
    run.reparented_processes = sorted(memory.reparented.values())
    rows = read_metrics(metrics)
    if len(rows) > warmup:
        steady = steady_state(rows, warmup)
        run.steady = asdict(steady)
        run.user_rounds_per_s, run.reports_per_s = steady.user_rounds_per_s, steady.reports_per_s
        run.seconds_per_round, run.first_round_seconds = steady.seconds_per_round, steady.first_round_seconds
        run.ledger_seconds_per_round = steady.ledger_seconds_per_round
    return run


def _interrupt(process: subprocess.Popen) -> None:
    """Ctrl-C to the launched command (its Flower cluster stops in its own cleanup), then kill it."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _end_tagged(tag: str) -> int:
    """Kill, by pid, processes of this run still alive after it ended; return how many there were."""
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if has_tag(int(entry), tag) and memory_kb(int(entry)):
                    left.append(int(entry))
            except (OSError, ValueError):
                continue
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(left)


# -- the runs --------------------------------------------------------------------------------------
def ldpfed_run(profile: Profile, users: int, nodes: int, rounds: int, work: Path, evaluate_every: int = 1) -> Run:
    """The ``ldpfed simulate`` command of one profile and user count (``records`` train records per user)."""
    out = work / f"ldpfed-{profile.name}-{users}"
    data = f"generated:{users * profile.records}"
    command = [
        str(BIN / "ldpfed"), "simulate", "--data", data, "--users", str(users), "--partition", "iid",
        "--users-per-round", "0", *profile.simulate_options(), "--releases-per-record", str(rounds),
        "--nodes", str(nodes), "--rounds", str(rounds), "--evaluate-every", str(evaluate_every), "--no-nonprivate-baseline",
        "--out", str(out), "--quiet",
    ]
    return Run("ldpfed", users, nodes, rounds, str(out), command, data=data, profile=profile.name)


def plain_run(nodes: int, rounds: int, work: Path) -> Run:
    """The plain-Flower command at ``nodes`` nodes (one user each)."""
    out = work / f"plain-{nodes}"
    command = [sys.executable, "-P", "-m", "ldpfed.simulations.benchmarks.plain_flower", "--nodes", str(nodes), "--rounds", str(rounds), "--out", str(out)]
    return Run("plain Flower", nodes, nodes, rounds, str(out), command)


def _progress(run: Run) -> Callable[[dict[str, Any]], None]:
    def show(row: dict[str, Any]) -> None:
        print(f"[bench]   round {row['round']}/{run.rounds}: {float(row['seconds']):.2f} s, {users_served(row):,} users", flush=True)

    return show


# -- output --------------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or value != value:
        return ""
    return f"{value:,.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"


def _load(run: dict[str, Any]) -> str:
    return f"{run['load_average_before']:.1f} / {run['load_average_after']:.1f}"


def print_tables(report: dict[str, Any]) -> None:
    """The noise bounds, plain Flower and ldpfed tables (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 240))
    noise = Table(title="Noise bound: normals/s, each thread its own generator")
    for column in ("library", "dtype", "threads", "M normals/s"):
        noise.add_column(column, justify="right")
    for row in report["noise_bounds"]:
        noise.add_row(row["library"], row["dtype"], str(row["threads"]), f"{row['normals_per_s'] / 1e6:.1f}")
    console.print(noise)

    warmup = report.get("settings", {}).get("warmup_rounds", 1)
    plain = Table(title=f"Plain Flower: trivial ClientApp, one user per node (steady = rounds {warmup + 1}..R)")
    for column in ("nodes", "round 1 done after s", "round 1 s", "s/round", "user-rounds/s", "peak RSS GiB", "peak PSS GiB", "load", "status"):
        plain.add_column(column, justify="right")
    for run in report["plain_flower"]:
        plain.add_row(
            f"{run['nodes']:,}", _fmt(run["first_round_done_after_s"]), _fmt(run["first_round_seconds"]),
            _fmt(run["seconds_per_round"]), _fmt(run["user_rounds_per_s"]), _fmt(run["peak_rss_gib"]),
            _fmt(run["peak_pss_gib"]), _load(run), run["status"],
        )
    console.print(plain)

    same = {run["nodes"]: run["user_rounds_per_s"] for run in report["plain_flower"]}
    every = report.get("settings", {}).get("evaluate_every", 1)
    evaluation = "evaluated every round" if every == 1 else f"evaluated every {every} rounds and the last"
    table = Table(
        title=f"ldpfed vs plain Flower at the same nodes (steady = rounds {warmup + 1}..R; the first rounds include warm-up; {evaluation})"
    )
    columns = (
        "profile", "users", "nodes", "data", "round 1 done after s", "round 1 s", "s/round", "ldpfed u-r/s",
        "plain u-r/s", "ratio", "noise-bound fraction", "peak RSS GiB", "peak PSS GiB", "ledger s/round (all nodes)", "load", "status",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for run in report["ldpfed"]:
        plain_rate = same.get(run["nodes"])
        ratio = run["user_rounds_per_s"] / plain_rate if run["user_rounds_per_s"] and plain_rate else None
        profile = PROFILES[run["profile"]]
        table.add_row(
            f"{profile.records} x {profile.dims}", f"{run['users']:,}", str(run["nodes"]), run["data"],
            _fmt(run["first_round_done_after_s"]), _fmt(run["first_round_seconds"]), _fmt(run["seconds_per_round"]),
            _fmt(run["user_rounds_per_s"]), _fmt(plain_rate), _fmt(ratio), _fmt(run["noise_bound_fraction"]),
            _fmt(run["peak_rss_gib"]), _fmt(run["peak_pss_gib"]), _fmt(run["ledger_seconds_per_round"]), _load(run),
            run["status"],
        )
    console.print(table)
    console.print(
        "u-r/s: user-rounds per second of steady round time; ratio: ldpfed / plain Flower at the same nodes; "
        "load: the machine's 1-minute load average before / after the run (other jobs share the cores)"
    )


def write_plot(report: dict[str, Any], path: Path) -> None:
    """Seconds per round and user-rounds/s against users (log axes), ldpfed per profile vs plain Flower.

    Plain Flower's users are its nodes; its dotted line carries its largest measurement on at
    constant user-rounds/s (an extrapolation, labelled so). The rate panel also shows goal 1
    and the noise bound (best normals/s over normals per user-round) of each profile.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cost, rate) = plt.subplots(1, 2, figsize=(11, 4.2))
    ldpfed = [r for r in report["ldpfed"] if r["seconds_per_round"]]
    plain = sorted((r for r in report["plain_flower"] if r["seconds_per_round"]), key=lambda r: r["users"])
    for name in sorted({r["profile"] for r in ldpfed}):
        runs = sorted((r for r in ldpfed if r["profile"] == name), key=lambda r: r["users"])
        users = [r["users"] for r in runs]
        label = f"ldpfed, {PROFILES[name].records} x {PROFILES[name].dims} per user-round"
        cost.plot(users, [r["seconds_per_round"] for r in runs], "o-", label=label)
        color = rate.plot(users, [r["user_rounds_per_s"] for r in runs], "o-", label=label)[0].get_color()
        shape = f"{PROFILES[name].records} x {PROFILES[name].dims}"
        rate.axhline(GOALS[name], color=color, linestyle="--", linewidth=0.8, label=f"goal 1, {shape}: {GOALS[name]:,.0f}")
        bound = report["noise_bound_best"]["normals_per_s"] / (PROFILES[name].records * PROFILES[name].dims)
        rate.axhline(bound, color=color, linestyle=":", linewidth=0.8, label=f"noise bound, {shape}")
    if plain:
        users = [r["users"] for r in plain]
        cost.plot(users, [r["seconds_per_round"] for r in plain], "s-", color="black", label="plain Flower (users = nodes)")
        rate.plot(users, [r["user_rounds_per_s"] for r in plain], "s-", color="black", label="plain Flower (users = nodes)")
        top = max(r["users"] for r in report["ldpfed"]) if report["ldpfed"] else users[-1]
        if top > users[-1]:
            last = plain[-1]["user_rounds_per_s"]
            cost.plot([users[-1], top], [users[-1] / last, top / last], ":", color="black", label="plain Flower, extrapolated")
    for axis, ylabel in ((cost, "seconds per round (steady)"), (rate, "user-rounds/s (steady)")):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("users")
        axis.set_ylabel(ylabel)
        axis.grid(True, which="both", alpha=0.3)
        if axis.lines:
            axis.legend(fontsize=7)
    fig.suptitle(
        f"ldpfed on {report['settings']['nodes']} nodes vs plain Flower (one user per node), {report['machine']['cpus']} CPUs"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- command line ----------------------------------------------------------------------------------
def _counts(text: str) -> list[int]:
    values = [int(v.replace("_", "")) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def _profiles(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names or any(n not in PROFILES for n in names):
        raise argparse.ArgumentTypeError(f"profiles are {', '.join(PROFILES)}; got {text!r}")
    return names


def build_parser() -> argparse.ArgumentParser:
    """Options of ``python -m ldpfed.simulations.benchmarks.bench_scale``."""
    parser = argparse.ArgumentParser(prog="python -m ldpfed.simulations.benchmarks.bench_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=_counts, default=[1_000, 10_000, 100_000], help="user counts (default 1000,10000,100000)")
    parser.add_argument("--profile", type=_profiles, default=["16"], help="16 (one 16-d report per user-round) and/or 384 (16 x 384); default 16")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per run, more than --warmup (default 6)")
    parser.add_argument(
        "--warmup", type=int, default=2,
        help="leading rounds left out of the steady state (default 2: round 1 builds each node's users in the "
        "first Ray actor, and the other actor builds them the first time it serves that node)",
    )
    parser.add_argument(
        "--evaluate-every", type=int, default=1,
        help="rounds between the ldpfed runs' evaluations (ldpfed simulate --evaluate-every; default 1: every round)",
    )
    parser.add_argument("--nodes", type=int, default=2, help="Flower nodes of the ldpfed runs and of the same-nodes plain run (default 2)")
    parser.add_argument("--plain-nodes", type=_counts, default=[1_000], help="further plain-Flower node counts (default 1000)")
    parser.add_argument("--no-plain", action="store_true", help="run no plain-Flower baseline (its table stays empty)")
    parser.add_argument("--out", type=Path, default=Path("runs/reports/bench_scale.json"), help="JSON report; the plot goes beside it (.png)")
    parser.add_argument("--work", type=Path, default=None, help="folder of the run directories (default: a new folder under the temp dir)")
    parser.add_argument("--run-timeout", type=float, default=3600.0, help="seconds after which a run is stopped (default 3600)")
    parser.add_argument("--noise-seconds", type=float, default=0.5, help="seconds per noise-bound measurement (default 0.5)")
    parser.add_argument("--sample-interval", type=float, default=0.2, help="seconds between memory samples (default 0.2)")
    return parser


def check_rounds(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit through ``parser`` unless a steady state is left after ``args.warmup`` (at least 1) of ``args.rounds``."""
    if args.warmup < 1 or args.rounds <= args.warmup:
        parser.error("--warmup must be at least 1 and --rounds more than --warmup")


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the tables, write the JSON report and the plot."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_rounds(parser, args)
    if args.evaluate_every < 1:
        parser.error("--evaluate-every must be at least 1")
    if args.nodes < 1 or args.nodes > min(args.users):
        parser.error("--nodes must be between 1 and the smallest --users")
    if sys.platform != "linux":
        parser.error("memory is read from /proc: Linux only")
    work = (args.work or Path(tempfile.mkdtemp(prefix="bench-scale-"))).resolve()
    print(f"[bench] run directories under {work}", flush=True)

    noise = measure_noise_bounds(args.noise_seconds)
    best = max(noise, key=lambda row: row["normals_per_s"])

    plain_runs = []
    for nodes in [] if args.no_plain else dict.fromkeys([args.nodes, *args.plain_nodes]):
        run = plain_run(nodes, args.rounds, work)
        print(f"[bench] plain Flower, {nodes:,} nodes, {args.rounds} rounds", flush=True)
        plain_runs.append(run_measured(run, args.run_timeout, args.sample_interval, _progress(run), args.warmup))
    ldpfed_runs = []
    for name in args.profile:
        for users in args.users:
            run = ldpfed_run(PROFILES[name], users, args.nodes, args.rounds, work, args.evaluate_every)
            print(f"[bench] ldpfed profile {name}, {users:,} users, {run.data}, {args.rounds} rounds (new data: encoded once, then cached)", flush=True)
            run = run_measured(run, args.run_timeout, args.sample_interval, _progress(run), args.warmup)
            if run.reports_per_s is not None:
                run.noise_bound_fraction = noise_fraction(run.reports_per_s, PROFILES[name].dims, best["normals_per_s"])
            ldpfed_runs.append(run)

    report = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": ["python", "-m", "ldpfed.simulations.benchmarks.bench_scale", *(argv if argv is not None else sys.argv[1:])],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "settings": {
            "rounds": args.rounds, "nodes": args.nodes, "warmup_rounds": args.warmup, "evaluate_every": args.evaluate_every,
            "work": str(work),
        },
        "noise_bounds": noise,
        "noise_bound_best": best,
        "plain_flower": [asdict(r) for r in plain_runs],
        "ldpfed": [asdict(r) for r in ldpfed_runs],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    write_plot(report, args.out.with_suffix(".png"))
    print_tables(report)
    print(f"[bench] best noise bound: {best['library']} {best['dtype']}, {best['threads']} thread(s), {best['normals_per_s'] / 1e6:.1f} M normals/s")
    print(f"[bench] wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0 if all(r.status == "completed" for r in plain_runs + ldpfed_runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
