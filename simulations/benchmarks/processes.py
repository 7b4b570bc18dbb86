"""Processes as /proc shows them (Linux): trees, memory, CPU time, and the benchmarks' one memory sampler."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TAG_VARIABLE = "LDPFED_BENCH_TAG"
"""Environment variable every process of one benchmarked run inherits (finds re-parented ones)."""


def process_table() -> dict[int, tuple[int, int]]:
    """(parent pid, start time in clock ticks) of every process now."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                table[int(entry)] = _stat(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return table


def descendants(root: int, table: dict[int, tuple[int, int]] | None = None) -> list[int]:
    """``root`` and every process below it (none if ``root`` is gone); ``table`` from :func:`process_table`."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root] if root in table else []
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def memory_kb(pid: int, pss: bool = False) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak RSS) of ``pid`` in kB, and ``Pss`` with ``pss`` (shared pages split
    among their users); empty for a zombie or a kernel thread, which hold no memory of their own."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            values[key] = int(rest.split()[0])
    if pss and values:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    values["Pss"] = int(line.split()[1])
        except OSError:
            pass
    return values


def cmdline(pid: int) -> list[str]:
    """The command line of ``pid``."""
    return [a for a in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0") if a]


def process_label(pid: int) -> str:
    """A short name of what ``pid`` runs (e.g. 'flower-superlink', 'ray::ClientAppActor.run', 'raylet')."""
    args = cmdline(pid)
    if not args or args[0].startswith("ray::"):
        return args[0] if args else "?"
    if Path(args[0]).name.startswith("python"):
        if len(args) > 2 and args[1] in ("-m", "-c"):
            return args[2] if args[1] == "-m" else "python -c"
        args = [a for a in args[1:] if not a.startswith("-")] or args
    return Path(args[0]).name


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def has_tag(pid: int, tag: str) -> bool:
    """Whether ``pid``'s environment holds ``TAG_VARIABLE=tag``."""
    return f"{TAG_VARIABLE}={tag}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")


class TreeMemory:
    """Samples the memory of a process tree: per process, and summed (RSS and PSS, with their peaks).

    The tree is ``root`` and its descendants at each sample; with ``tag``, a process outside it whose
    environment holds ``TAG_VARIABLE=tag`` (e.g. a Ray process re-parented to init) is counted too and
    reported as re-parented. Each sample reads every member's RSS; the process list (a scan of /proc)
    is read every ``rescan_every``-th sample and PSS (2 to 20 ms per Ray process) every
    ``pss_every``-th, to keep the sampler's own CPU time (``cpu_seconds``) small, so the PSS peak can
    be coarser than the RSS peak. Call :meth:`sample` from a loop of your own, or use the sampler as a
    context manager to sample every ``interval`` s in a thread.
    """

    def __init__(
        self, root: int, tag: str | None = None, interval: float = 0.2, rescan_every: int = 1, pss_every: int = 1,
        label: Callable[[int], str] = process_label,
    ) -> None:
        self.root, self.tag, self.interval, self.label = root, tag, interval, label
        self.rescan_every, self.pss_every = rescan_every, pss_every
        self.peak_rss_kb = self.peak_pss_kb = 0
        self.peak_processes: list[dict[str, Any]] = []
        self.samples = 0
        self.cpu_seconds = 0.0
        self.reparented: dict[int, str] = {}
        self._tagged: dict[tuple[int, int], bool] = {}
        self._labels: dict[int, str] = {}
        self._members: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.thread_time()
            self.sample()
            self.cpu_seconds += time.thread_time() - started
            self._stop.wait(self.interval)

    def members(self) -> set[int]:
        """Pids of the tree under ``root`` and of tagged processes now."""
        table = process_table()
        tree = set(descendants(self.root, table))
        if self.tag is None:
            return tree
        for pid in table.keys() - tree:
            if self._is_tagged(pid, table[pid][1]):
                tree.add(pid)
                if pid not in self.reparented:
                    try:
                        self.reparented[pid] = self.label(pid)
                    except OSError:
                        continue
        return tree

    def _is_tagged(self, pid: int, started: int) -> bool:
        """Whether ``pid`` (started at ``started``) inherited this run's tag; cached per process."""
        key = (pid, started)
        if key not in self._tagged:
            try:
                self._tagged[key] = has_tag(pid, self.tag or "")
            except OSError:
                self._tagged[key] = False
        return self._tagged[key]

    def sample(self) -> list[dict[str, Any]]:
        """One sample: each live member's ``pid``, ``process``, ``rss_kb``, ``hwm_kb`` (and ``pss_kb``
        every ``pss_every``-th sample); the sums update the peaks, whose per-process breakdown is kept."""
        if self.samples % self.rescan_every == 0:
            self._members = sorted(self.members())
            self._labels.clear()  # a Ray worker renames itself (ray::...) after it starts
        with_pss = self.samples % self.pss_every == 0
        rss = pss = 0
        processes = []
        for pid in self._members:
            try:
                values = memory_kb(pid, with_pss)
                if not values:
                    continue
                if pid not in self._labels:
                    self._labels[pid] = self.label(pid)
            except (OSError, ValueError, IndexError):
                continue
            entry = {"pid": pid, "process": self._labels[pid], "rss_kb": values["VmRSS"], "hwm_kb": values["VmHWM"]}
            if "Pss" in values:
                entry["pss_kb"] = values["Pss"]
            rss, pss = rss + entry["rss_kb"], pss + entry.get("pss_kb", 0)
            processes.append(entry)
        self.samples += 1
        self.peak_pss_kb = max(self.peak_pss_kb, pss)
        if rss > self.peak_rss_kb:
            self.peak_rss_kb = rss
            self.peak_processes = sorted(processes, key=lambda p: -p["rss_kb"])
        return processes


def _stat(pid: int) -> tuple[int, int]:
    """(parent pid, start time in clock ticks) of ``pid`` from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return int(fields[1]), int(fields[19])
