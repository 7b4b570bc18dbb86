"""Privacy mutation check (issue 26): break the privacy-critical code on purpose, one change at a
time, and see whether the tests that claim to guard it fail.

For each mutation of :data:`simulations.checks.mutations.MUTATIONS` the check copies the repository's
tracked files (as they are in the working tree) to a scratch folder, applies that one change
(refusing a snippet not found exactly once), and runs the mutation's tests there with
``pytest -x -q -p no:cacheprovider -n 0`` under a per-mutation timeout. A mutation is caught when
its tests fail (pytest's exit status 1); it survives when they pass, and is reported as skipped when
every test was skipped. Before that, a baseline runs every selected mutation's
tests on an unchanged copy: they must pass, or no "caught" means anything.

``python -m ldpfed.simulations.checks.mutation_check`` runs the whole table; ``--only NAME...`` some mutations,
``--seed N --sample K`` a seeded random slice, ``--jobs J`` J mutations at once, ``--json PATH``
writes the results. The exit status is 1 if any mutation survives (or its tests error out or time
out), 2 for bad arguments or a rotten table, 3 if the baseline fails. docs/mutation_check.md holds
the full table and its command.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ldpfed.simulations.checkout import checkout_env
from ldpfed.simulations.checks.mutations import MUTATIONS, Mutation

ROOT = Path(__file__).resolve().parents[2]
PYTEST = ("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-n", "0")
CAUGHT, SURVIVED, SKIPPED, ERROR, TIMEOUT = "caught", "survived", "skipped", "error", "timeout"


class RottenMutation(ValueError):
    """A mutation's snippet is not found exactly once in its file: the table no longer fits the code."""


@dataclass(frozen=True)
class Outcome:
    """What the tests made of one mutation."""

    name: str
    tests: tuple[str, ...]
    status: str
    seconds: float
    tail: str = ""
    """The end of pytest's output (which test failed, or why it could not run)."""

    @property
    def caught(self) -> bool:
        return self.status == CAUGHT

    @property
    def caught_by(self) -> str:
        """The test that failed first (pytest's "FAILED" line), "" if none did."""
        failed = [line.split(" ")[1] for line in self.tail.splitlines() if line.startswith("FAILED ")]
        return failed[0] if failed else ""


def tracked_files(root: Path) -> list[str]:
    """The repository's tracked paths (``git ls-files``) that exist in the working tree: files and links (the links
    simulations/ldpfed/fed and so on)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True).stdout
    return [path for path in listed.decode().split("\0") if path and ((root / path).is_symlink() or (root / path).is_file())]


def copy_tree(root: Path, target: Path) -> None:
    """Copy the tracked files of ``root`` (their working-tree content) into ``target``; a link stays a link (its
    relative target then points inside ``target``)."""
    for path in tracked_files(root):
        destination = target / path
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, destination, follow_symlinks=False)


def occurrences(mutation: Mutation, root: Path) -> int:
    """How many times the mutation's snippet occurs in its file under ``root`` (0 if the file is missing)."""
    path = root / mutation.file
    return path.read_text().count(mutation.find) if path.is_file() else 0


def apply(mutation: Mutation, root: Path) -> None:
    """Apply ``mutation`` to the tree at ``root``; RottenMutation unless its snippet occurs exactly once."""
    found = occurrences(mutation, root)
    if found != 1:
        raise RottenMutation(f"{mutation.name}: its snippet occurs {found} times in {mutation.file}, not once: update the table")
    path = root / mutation.file
    path.write_text(path.read_text().replace(mutation.find, mutation.replace))


def rot(mutations: Sequence[Mutation], root: Path = ROOT) -> list[str]:
    """Problems of the table against the tree at ``root``: snippets not found exactly once, test files
    or test functions that do not exist, duplicate names, mutations that change nothing."""
    problems = []
    names = [m.name for m in mutations]
    problems += [f"{name}: the name is used twice" for name in sorted({n for n in names if names.count(n) > 1})]
    for mutation in mutations:
        found = occurrences(mutation, root)
        if found != 1:
            problems.append(f"{mutation.name}: its snippet occurs {found} times in {mutation.file}")
        if mutation.find == mutation.replace:
            problems.append(f"{mutation.name}: the replacement is the snippet itself")
        if not mutation.tests:
            problems.append(f"{mutation.name}: names no tests")
        for test in mutation.tests:
            file, _, function = test.partition("::")
            path = root / file
            if not path.is_file():
                problems.append(f"{mutation.name}: no test file {file}")
            elif function and f"def {function.split('[')[0]}(" not in path.read_text():
                problems.append(f"{mutation.name}: {file} has no test {function}")
    return problems


def run_tests(tree: Path, tests: Sequence[str], timeout: float) -> tuple[int | None, str, float]:
    """Run pytest on ``tests`` in ``tree``: exit status (None: timed out), the output's tail, seconds."""
    env = {**checkout_env(tree, tree / ".shims"), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)  # the child is its own session, not a worker of ours
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, *PYTEST, *tests],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a timeout ends the tests' children too
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    except BaseException:  # interrupted: leave no tests running on a scratch tree about to vanish
        os.killpg(process.pid, signal.SIGKILL)
        raise
    return code, output[-2000:], time.monotonic() - started


def check_one(mutation: Mutation, timeout: float, root: Path = ROOT) -> Outcome:
    """Apply ``mutation`` to a scratch copy of ``root`` and run its tests there."""
    with tempfile.TemporaryDirectory(prefix=f"mutation-{mutation.name}-") as scratch:
        tree = Path(scratch)
        copy_tree(root, tree)
        apply(mutation, tree)
        code, tail, seconds = run_tests(tree, mutation.tests, timeout)
    status = TIMEOUT if code is None else CAUGHT if code == 1 else ERROR if code != 0 else SURVIVED
    if status == SURVIVED and " passed" not in tail.strip().splitlines()[-1]:
        status = SKIPPED  # every test skipped: nothing was tried
    return Outcome(mutation.name, mutation.tests, status, seconds, tail)


def baseline(mutations: Sequence[Mutation], timeout: float, root: Path = ROOT) -> tuple[int | None, str, float]:
    """Run every test the mutations name on an unchanged copy of ``root`` (they must all pass)."""
    tests = list(dict.fromkeys(test for m in mutations for test in m.tests))
    with tempfile.TemporaryDirectory(prefix="mutation-baseline-") as scratch:
        copy_tree(root, Path(scratch))
        return run_tests(Path(scratch), tests, timeout)


def select(names: Sequence[str] | None, seed: int | None, sample: int | None, fast: bool = False) -> list[Mutation]:
    """The mutations named (all by default; only ``fast`` ones if asked), or a seeded random ``sample`` of them, in table order."""
    chosen = [m for m in MUTATIONS if not fast or m.fast]
    if names:
        known = {m.name for m in MUTATIONS}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown mutation(s) {unknown}; see --list")
        chosen = [m for m in chosen if m.name in names]
    if sample is not None:
        if not 0 < sample <= len(chosen):
            raise ValueError(f"--sample must lie in [1, {len(chosen)}], got {sample}")
        picked = set(random.Random(seed).sample([m.name for m in chosen], sample))
        chosen = [m for m in chosen if m.name in picked]
    return chosen


def check(
    mutations: Sequence[Mutation], timeout: float, jobs: int = 1, root: Path = ROOT, progress: bool = False
) -> list[Outcome]:
    """Check each mutation on its own scratch copy, ``jobs`` at a time; outcomes in table order
    (``progress``: a line on stderr as each one ends)."""

    def one(mutation: Mutation) -> Outcome:
        outcome = check_one(mutation, timeout, root)
        if progress:
            print(f"{outcome.name}: {outcome.status} ({outcome.seconds:.0f} s)", file=sys.stderr, flush=True)
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, mutations))


def table(outcomes: Sequence[Outcome]) -> str:
    """The outcomes as a Markdown table (mutation, tests, caught, seconds), as docs/mutation_check.md quotes it."""
    rows = ["| mutation | file | tests (in order) | caught | first failing test | seconds |", "|---|---|---|---|---|---:|"]
    files = {m.name: m.file for m in MUTATIONS}
    for o in outcomes:
        tests = "<br>".join(t.removeprefix("tests/") for t in o.tests)
        caught = "yes" if o.caught else f"**no** ({o.status})"
        rows.append(f"| {o.name} | {files.get(o.name, '')} | {tests} | {caught} | {o.caught_by.removeprefix('tests/')} | {o.seconds:.0f} |")
    return "\n".join(rows)


def show(outcomes: Sequence[Outcome]) -> None:
    """Print the outcomes with rich."""
    from rich.console import Console
    from rich.table import Table

    view = Table(title="Privacy mutations (simulations/checks/mutations.py)")
    for column in ("mutation", "tests", "caught", "seconds"):
        view.add_column(column, justify="right" if column == "seconds" else "left")
    for o in outcomes:
        caught = "[green]yes[/green]" if o.caught else f"[red]no ({o.status})[/red]"
        view.add_row(o.name, "\n".join(t.removeprefix("tests/") for t in o.tests), caught, f"{o.seconds:.0f}")
    console = Console()
    console.print(view)
    for o in outcomes:
        if o.status in (ERROR, TIMEOUT):
            console.print(f"[red]{o.name}: {o.status}[/red]\n{o.tail}")
    caught = sum(o.caught for o in outcomes)
    console.print(f"{caught} of {len(outcomes)} mutations caught")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ldpfed.simulations.checks.mutation_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="check only these mutations")
    parser.add_argument("--seed", type=int, default=None, help="seed of --sample")
    parser.add_argument("--sample", type=int, default=None, metavar="K", help="check a seeded random slice of K mutations")
    parser.add_argument("--fast", action="store_true", help="only mutations whose tests catch them within seconds")
    parser.add_argument("--jobs", type=int, default=1, help="mutations checked at once (default 1)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutation's tests (default 300)")
    parser.add_argument("--no-baseline", action="store_true", help="skip running the tests on the unchanged tree first")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the outcomes as JSON")
    parser.add_argument("--markdown", type=Path, default=None, metavar="PATH", help="write the outcomes as a Markdown table")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = parser.parse_args(argv)
    try:
        mutations = select(args.only, args.seed, args.sample, args.fast)
    except ValueError as error:
        parser.error(str(error))
    if args.jobs < 1 or args.timeout <= 0:
        parser.error("--jobs must be at least 1 and --timeout positive")
    if args.list:
        for m in mutations:
            print(f"{m.name:40s} {m.file:40s} {m.what}")
        return 0
    problems = rot(mutations)
    if problems:
        print("the mutation table does not fit the code:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    if not args.no_baseline:
        code, tail, seconds = baseline(mutations, args.timeout * max(1, len(mutations)))
        print(f"baseline: the {len({t for m in mutations for t in m.tests})} test selections on the unchanged tree, {seconds:.0f} s")
        if code != 0:
            print(f"the baseline fails (pytest exit status {code}): no mutation result would mean anything\n{tail}", file=sys.stderr)
            return 3
    outcomes = check(mutations, args.timeout, args.jobs, progress=True)
    show(outcomes)
    if args.json:
        args.json.write_text(json.dumps([{**asdict(o), "caught": o.caught, "caught_by": o.caught_by} for o in outcomes], indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(table(outcomes) + "\n")
    return 0 if all(o.caught for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
