"""ldpfed against pfl-research, its fastest private-FL peer, in one run (issue 41, item 1).

``python -m ldpfed.simulations.benchmarks.peer_pfl [--users 5000] [--rounds 10]`` does, in this order:

1. builds pfl's environment, unless it is there: a virtual environment of its own (``--venv``, default
   ``~/.cache/ldpfed-peer/pfl-<version>``) with ``pip install torch==2.13.0 pfl==0.6.0``, torch pinned by
   this checkout's constraints.txt (its CPU wheel); the rest of constraints.txt does not apply (pfl 0.6
   needs dp-accounting < 0.6, ldpfed pins 0.6.0), so pip resolves pfl's own requirements;
2. pfl, before: ``simulations/benchmarks/peer_pfl_loop.py`` in that environment: pfl's simulated FL loop
   where every user releases its ``16 x 384`` statistic through pfl's own ``GaussianMechanism`` as a
   local mechanism (see that file);
3. ldpfed: ``simulations/benchmarks/bench_scale.py --profile 384 --users U --rounds R --no-plain`` (``ldpfed
   simulate`` on 2 Flower nodes, 16 records x 384 dims released per user and round), once per ``--checkout``
   (default: this checkout), each checkout's code first on PYTHONPATH (this checkout's harness measures all), and
   once per ``--evaluate-every`` value (``10,1``: first evaluating only in the last round, as pfl's loop never
   evaluates, then in every round);
4. pfl, after: step 2 again;

and prints each one's steady user-rounds/s (rounds ``warmup+1..R`` by the wall clock, as bench_scale
counts them), the ratio of ldpfed to each pfl run, ldpfed's noise-bound fraction (normals its reports
need per second over the best normals/s bench_scale measured: the share of the machine's noise rate the
run uses) and the machine's 1-minute load average before and after each step. Other jobs slow pfl far
more than ldpfed (torch's threads spin when the cores are taken), so only a run whose loads stay low
compares the two; ``--quiet-load`` waits (up to ``--wait``) for the load to fall below it before each
step. Writes a JSON report (``--out``) and a Markdown one beside it (``.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ldpfed.simulations.benchmarks.bench_scale import check_rounds
from ldpfed.simulations.benchmarks.peer_pfl_loop import add_setting
from ldpfed.simulations.checkout import checkout_env

ROOT = Path(__file__).resolve().parents[2]
LOOP = Path(__file__).with_name("peer_pfl_loop.py")
BENCH_SCALE = Path(__file__).with_name("bench_scale.py")
PFL_VERSION = "0.6.0"
TORCH_VERSION = "2.13.0"
GOAL_RATIO = 10.0
"""Issue 41, item 1: ldpfed at least 10 times pfl-research's user-rounds/s, in one run."""
GOAL_NOISE = 0.30
"""Issue 41, item 1: at least 30 % of the machine's noise rate."""
ROUND_LINE = re.compile(r"round (\d+)/(\d+)")


def default_venv(version: str = PFL_VERSION) -> Path:
    """Where pfl's environment lives unless ``--venv`` says: under the user's cache folder."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "ldpfed-peer" / f"pfl-{version}"


def torch_constraint(constraints: Path, version: str = TORCH_VERSION) -> str:
    """The torch line of ``constraints`` (``torch==2.13.0+cpu``: the CPU wheel) if it pins ``version``,
    else ``torch==version``: the only pin of ldpfed's constraints that applies to pfl's environment."""
    if constraints.is_file():
        for line in constraints.read_text().splitlines():
            name, _, pinned = line.strip().partition("==")
            if name.lower() == "torch" and pinned.split("+")[0] == version:
                return line.strip()
    return f"torch=={version}"


# -- pfl's environment -------------------------------------------------------------------------------
def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed_versions(venv: Path) -> dict[str, str]:
    """pfl's and torch's versions in ``venv`` ({} when it has no usable Python or lacks either)."""
    python = venv_python(venv)
    if not python.exists():
        return {}
    code = "import importlib.metadata as m, json; print(json.dumps({n: m.version(n) for n in ('pfl', 'torch')}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return {}
    return json.loads(done.stdout.strip().splitlines()[-1])


def build_venv(venv: Path, pfl: str, torch: str, constraints: Path, say: Callable[[str], None]) -> dict[str, str]:
    """Create ``venv`` and install pfl and torch there, unless it already holds these versions."""
    found = installed_versions(venv)
    if found.get("pfl") == pfl and found.get("torch", "").split("+")[0] == torch:
        say(f"pfl's environment: {venv} (pfl {found['pfl']}, torch {found['torch']}; reused)")
        return found
    say(f"pfl's environment: building {venv} (pip install torch=={torch} pfl=={pfl}; a few minutes)")
    if not venv_python(venv).exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pin = venv / "constraints-torch.txt"
    pin.write_text(torch_constraint(constraints, torch) + "\n")
    command = [str(venv_python(venv)), "-m", "pip", "install", "-c", str(pin), f"torch=={torch}", f"pfl=={pfl}"]
    _follow(command, "pip install", None, lambda line: "Installing collected" in line or "Successfully" in line)
    found = installed_versions(venv)
    if found.get("pfl") != pfl:
        raise SystemExit(f"pfl {pfl} did not install into {venv} (found {found})")
    return found


# -- the steps -------------------------------------------------------------------------------------
def load() -> float:
    return os.getloadavg()[0]


def wait_for_quiet(threshold: float | None, wait: float, say: Callable[[str], None]) -> float:
    """Wait (at most ``wait`` s) for the 1-minute load to fall below ``threshold``; return the load."""
    now = load()
    if threshold is None or now < threshold:
        return now
    say(f"load {now:.2f} >= {threshold}: waiting up to {wait:.0f} s for a quieter machine")
    end = time.monotonic() + wait
    while now >= threshold and time.monotonic() < end:
        time.sleep(10)
        now = load()
    say(f"load {now:.2f}: {'quiet enough' if now < threshold else 'still loaded, measuring anyway'}")
    return now


def _follow(
    command: Sequence[str], label: str, rounds: int | None, show: Callable[[str], bool], cwd: Path = ROOT, env: dict[str, str] | None = None
) -> str:
    """Run ``command``, a progress bar over its ``round i/R`` lines (a spinner without ``rounds``), and
    print the lines ``show`` selects; return its output. SystemExit if it fails."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    lines: list[str] = []
    columns = (TextColumn("{task.description}"), BarColumn() if rounds else SpinnerColumn(), MofNCompleteColumn() if rounds else TextColumn(""), TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task(label, total=rounds)
        with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as process:
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line)
                if show(line):
                    bar.console.print(line.rstrip(), markup=False, highlight=False)
                match = ROUND_LINE.search(line)
                if rounds and match:
                    bar.update(task, completed=int(match.group(1)))
        if process.returncode != 0:
            tail = "".join(lines[-30:])
            raise SystemExit(f"{label} failed (exit {process.returncode}):\n{tail}")
    return "".join(lines)


def run_pfl(venv: Path, args: argparse.Namespace, out: Path, label: str) -> dict[str, Any]:
    """One pfl run; its JSON report with the loads around it."""
    command = [
        str(venv_python(venv)), str(LOOP), "--users", str(args.users), "--rounds", str(args.rounds),
        "--warmup", str(args.warmup), "--records", str(args.records), "--dims", str(args.dims), "--out", str(out),
    ]
    before = load()
    _follow(command, label, args.rounds, lambda line: "steady" in line)
    report = json.loads(out.read_text())
    report.update(step_load_before=before, step_load_after=load(), command=command)
    return report


def run_ldpfed(args: argparse.Namespace, label: str, root: Path, out: Path, work: Path, evaluate_every: int = 1) -> dict[str, Any]:
    """ldpfed's bench_scale run of the same setting, from the checkout ``root``, evaluating every ``evaluate_every``
    rounds; the ldpfed run of its JSON report, with the noise bound it measured."""
    command = [  # this checkout's harness (bench_scale.py run as a file), measuring the ldpfed that PYTHONPATH gives
        sys.executable, str(BENCH_SCALE), "--profile", "384", "--users", str(args.users),
        "--rounds", str(args.rounds), "--warmup", str(args.warmup), "--evaluate-every", str(evaluate_every),
        "--no-plain", "--out", str(out), "--work", str(work),
    ]
    env = None if root == ROOT else checkout_env(root, work.parent / f"{work.name}-shims")
    before = load()
    _follow(command, f"ldpfed, {label} (bench_scale)", args.rounds, lambda line: "best noise bound" in line, cwd=root, env=env)
    bench = json.loads(out.read_text())
    (run,) = bench["ldpfed"]
    return {
        "label": label, "checkout": str(root), "commit": _commit(root), "command": command[1:], "evaluate_every": evaluate_every,
        "step_load_before": before, "step_load_after": load(), "run": run, **round_figures(Path(run["out"]) / "metrics.jsonl"),
        "noise_bound_best": bench["noise_bound_best"], "noise_bounds": bench["noise_bounds"],
    }


def round_figures(metrics: Path) -> dict[str, list[float]]:
    """Each round's seconds and ledger seconds from an ldpfed run's metrics.jsonl (empty lists without it)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.is_file() else []
    return {
        "round_seconds": [float(row["seconds"]) for row in rows],
        "round_ledger_seconds": [float(row.get("ledger_seconds") or 0.0) for row in rows],
    }


def _commit(root: Path) -> str:
    """The checkout's commit, with '+changes' when its tracked files differ from it ('' outside git)."""
    done = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty=+changes"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


# -- the report ------------------------------------------------------------------------------------
def _ratios(ldpfed: float | None, before: float, after: float) -> dict[str, Any]:
    if not ldpfed:
        return {"ratio_before": None, "ratio_after": None, "ratio_mean_pfl": None, "ratio_least": None}
    return {
        "ratio_before": ldpfed / before, "ratio_after": ldpfed / after,
        "ratio_mean_pfl": ldpfed / ((before + after) / 2), "ratio_least": min(ldpfed / before, ldpfed / after),
    }


def summarise(report: dict[str, Any]) -> dict[str, Any]:
    """The figures of a report: pfl's user-rounds/s before and after, and for each ldpfed run (the last one is
    the one measured against the goals) its user-rounds/s, ratios to pfl and noise-bound fraction."""
    before, after = report["pfl_before"]["user_rounds_per_s"], report["pfl_after"]["user_rounds_per_s"]
    runs = []
    for step in report["ldpfed"]:
        rate, fraction = step["run"]["user_rounds_per_s"], step["run"].get("noise_bound_fraction")
        runs.append({"label": step["label"], "ldpfed": rate, "noise_bound_fraction": fraction, **_ratios(rate, before, after)})
    last = runs[-1]
    return {
        "pfl_before": before, "pfl_after": after, "runs": runs, **last,
        "goal_ratio": GOAL_RATIO, "goal_noise": GOAL_NOISE,
        "ratio_met": last["ratio_least"] is not None and last["ratio_least"] >= GOAL_RATIO,
        "noise_met": last["noise_bound_fraction"] is not None and last["noise_bound_fraction"] >= GOAL_NOISE,
    }


def _loads(step: dict[str, Any]) -> str:
    return f"{step['step_load_before']:.2f} / {step['step_load_after']:.2f}"


def _fraction(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def format_lines(report: dict[str, Any]) -> list[str]:
    """The figures, one line each, with the load beside each step (what the command prints)."""
    figures = summarise(report)
    met = {True: "met", False: "MISSED"}
    version = report["pfl_version"]
    lines = [f"pfl-research {version}, before: {figures['pfl_before']:,.0f} user-rounds/s (load {_loads(report['pfl_before'])})"]
    for step, run in zip(report["ldpfed"], figures["runs"]):
        lines.append(
            f"ldpfed, {step['label']}: {run['ldpfed']:,.0f} user-rounds/s, {step['run']['seconds_per_round']:.3f} s/round, "
            f"{run['ratio_least']:.2f}x pfl at least, noise-bound fraction {_fraction(run['noise_bound_fraction'])} (load {_loads(step)})"
        )
    lines.append(f"pfl-research {version}, after: {figures['pfl_after']:,.0f} user-rounds/s (load {_loads(report['pfl_after'])})")
    bound = report["ldpfed"][-1]["noise_bound_best"]
    label = report["ldpfed"][-1]["label"]
    lines += [
        f"ratio ldpfed ({label}) / pfl: {figures['ratio_before']:.2f}x against before, {figures['ratio_after']:.2f}x against after, "
        f"{figures['ratio_mean_pfl']:.2f}x against their mean (goal {GOAL_RATIO:.0f}x against each: {met[figures['ratio_met']]})",
        f"noise-bound fraction of ldpfed ({label}): {_fraction(figures['noise_bound_fraction'])} of {bound['normals_per_s'] / 1e6:.0f} M "
        f"normals/s ({bound['library']} {bound['dtype']}, {bound['threads']} thread(s); goal {GOAL_NOISE:.2f}: {met[figures['noise_met']]})",
    ]
    return lines


def format_markdown(report: dict[str, Any]) -> str:
    """The Markdown report: setting, command, a table of the steps in the order they ran with their loads, the goals."""
    figures = summarise(report)
    settings = report["settings"]
    users = settings["users"]
    table = [
        "| step | user-rounds/s | s/round | ldpfed / pfl (least) | noise-bound fraction | load before / after |",
        "|---|---|---|---|---|---|",
        f"| pfl-research, before | {figures['pfl_before']:,.0f} | {users / figures['pfl_before']:.3f} |  |  | {_loads(report['pfl_before'])} |",
    ]
    for step, run in zip(report["ldpfed"], figures["runs"]):
        commit = f" ({step['commit']})" if step.get("commit") else ""
        table.append(
            f"| ldpfed, {step['label']}{commit} | {run['ldpfed']:,.0f} | {step['run']['seconds_per_round']:.3f} | "
            f"{run['ratio_least']:.2f}x | {_fraction(run['noise_bound_fraction'])} | {_loads(step)} |"
        )
    table.append(f"| pfl-research, after | {figures['pfl_after']:,.0f} | {users / figures['pfl_after']:.3f} |  |  | {_loads(report['pfl_after'])} |")
    rounds = ["Seconds of each round, 1..R (the steady state counts R - warm-up of them, by the wall clock):", ""]
    for name, step in (("pfl-research, before", report["pfl_before"]), *((f"ldpfed, {s['label']}", s) for s in report["ldpfed"]),
                       ("pfl-research, after", report["pfl_after"])):
        seconds = step.get("round_seconds") or [b - a for a, b in zip([0.0, *step.get("round_ends_s", [])], step.get("round_ends_s", []))]
        if seconds:
            rounds.append(f"- {name}: {' '.join(f'{x:.2f}' for x in seconds)}")
    return "\n".join([
        f"# ldpfed against pfl-research {report['pfl_version']}",
        "",
        f"Created {report['created']} by `{shlex.join(report['command'])}` on {report['machine']['cpus']} CPUs "
        f"({report['machine']['platform']}). {users:,} users, every one in each of {settings['rounds']} rounds, "
        f"{settings['records']} records x {settings['dims']} dims released per user and round with local Gaussian noise; "
        f"steady = rounds {settings['warmup'] + 1}..{settings['rounds']} by the wall clock. pfl: torch {report['pfl_torch']}, "
        f"{report['pfl_before']['torch_threads']} torch threads. The load is the machine's 1-minute load average.",
        "",
        *table,
        "",
        *[f"- {line}" for line in format_lines(report)[-2:]],
        "",
        *(rounds if len(rounds) > 2 else []),
        "",
    ])


# -- command line ----------------------------------------------------------------------------------
def _evaluations(text: str) -> list[int]:
    """--evaluate-every: one frequency or several, comma-separated, each at least 1."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected rounds between evaluations, at least 1, comma-separated (e.g. 10,1); got {text!r}")
    return values


def _checkout(text: str) -> tuple[str, Path]:
    label, sep, folder = text.partition("=")
    root = Path(folder).expanduser().resolve()
    if not sep or not label or not (root / "simulations" / "benchmarks" / "bench_scale.py").is_file():
        raise argparse.ArgumentTypeError(f"expected LABEL=DIR, DIR an ldpfed checkout; got {text!r}")
    return label, root


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ldpfed.simulations.benchmarks.peer_pfl", description=__doc__.split("\n\n")[0])
    add_setting(parser)  # users, rounds, warm-up: the same for pfl's loop and ldpfed's runs
    parser.add_argument(
        "--evaluate-every", type=_evaluations, default=[1], metavar="N[,N...]",
        help="ldpfed's evaluation frequency (default 1: every round); several, comma-separated, run each checkout once per value, "
        "in order (the last run is held to the goals; the last round always evaluates)",
    )
    parser.add_argument("--venv", type=Path, default=None, help="pfl's virtual environment (default ~/.cache/ldpfed-peer/pfl-<version>; built if absent)")
    parser.add_argument("--pfl-version", default=PFL_VERSION, help=f"pfl-research release (default {PFL_VERSION})")
    parser.add_argument("--torch-version", default=TORCH_VERSION, help=f"torch of pfl's environment (default {TORCH_VERSION})")
    parser.add_argument("--constraints", type=Path, default=ROOT / "constraints.txt", help="where torch's pin comes from (default the checkout's)")
    parser.add_argument("--quiet-load", type=float, default=None, help="before each step, wait for the 1-minute load to fall below this")
    parser.add_argument("--wait", type=float, default=900.0, help="longest wait for --quiet-load, seconds (default 900)")
    parser.add_argument("--out", type=Path, default=Path("runs/reports/peer_pfl.json"), help="JSON report; Markdown beside it (.md)")
    parser.add_argument("--work", type=Path, default=None, help="folder of the runs (default: beside --out, <name>-work)")
    parser.add_argument(
        "--checkout", type=_checkout, action="append", default=None, metavar="LABEL=DIR",
        help="measure ldpfed from this checkout (e.g. a `git archive` of an earlier commit), labelled LABEL; repeat for "
        "several, run in order between the two pfl runs (the last one is held to the goals; default: this checkout)",
    )
    parser.add_argument("--build-only", action="store_true", help="build pfl's environment and stop")
    parser.add_argument("--report-only", action="store_true", help="rewrite the Markdown report from the JSON one at --out; run nothing")
    parser.add_argument("--records", type=int, default=16, help=argparse.SUPPRESS)  # the setting is bench_scale's profile 384
    parser.add_argument("--dims", type=int, default=384, help=argparse.SUPPRESS)
    return parser


def ldpfed_runs(args: argparse.Namespace) -> list[tuple[str, Path, int]]:
    """(label, checkout, evaluation frequency) of each ldpfed run, in the order they run: every checkout once per
    ``--evaluate-every`` value; the label names the frequency when there are several."""
    runs = []
    for label, root in args.checkout or [("this checkout", ROOT)]:
        for every in args.evaluate_every:
            often = "every round" if every == 1 else f"every {every} rounds"
            runs.append((f"{label}, evaluating {often}" if len(args.evaluate_every) > 1 else label, root, every))
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_rounds(parser, args)  # the same steady state as bench_scale's, which it runs
    if args.users < 2:
        parser.error("--users must be at least 2 (ldpfed's runs use 2 nodes)")

    def say(text: str) -> None:
        print(f"[peer] {text}", flush=True)

    if args.report_only:
        report = json.loads(args.out.read_text())
        args.out.with_suffix(".md").write_text(format_markdown(report))
        for line in format_lines(report):
            say(line)
        return 0

    venv = (args.venv or default_venv(args.pfl_version)).expanduser().resolve()
    versions = build_venv(venv, args.pfl_version, args.torch_version, args.constraints, say)
    if args.build_only:
        return 0
    work = (args.work or args.out.with_name(args.out.stem + "-work")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [("pfl_before", lambda: run_pfl(venv, args, work / "pfl-before.json", "pfl-research, before"))]
    for i, (label, root, every) in enumerate(ldpfed_runs(args)):
        steps.append((f"ldpfed:{label}", lambda i=i, label=label, root=root, every=every: run_ldpfed(
            args, label, root, work / f"bench_scale-{i}.json", work / f"bench-{i}", every)))
    steps.append(("pfl_after", lambda: run_pfl(venv, args, work / "pfl-after.json", "pfl-research, after")))
    done: dict[str, Any] = {"ldpfed": []}
    for name, run in steps:
        wait_for_quiet(args.quiet_load, args.wait, say)
        say(f"{name.replace('_', ' ')}: load {load():.2f}")
        result = run()
        if name.startswith("ldpfed:"):
            done["ldpfed"].append(result)
        else:
            done[name] = result
    report = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": ["python", "-m", "ldpfed.simulations.benchmarks.peer_pfl", *(argv if argv is not None else sys.argv[1:])],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "settings": {k: v for k, v in vars(args).items() if k in ("users", "rounds", "warmup", "evaluate_every", "records", "dims")},
        "pfl_version": versions.get("pfl", args.pfl_version), "pfl_torch": versions.get("torch", ""), "venv": str(venv),
        **done,
    }
    report["summary"] = summarise(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(format_markdown(report))
    for line in format_lines(report):
        say(line)
    say(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
