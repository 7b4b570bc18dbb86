"""ldpfed.simulations.benchmarks.processes: the benchmarks' one memory sampler, on real processes (Linux /proc)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ldpfed.simulations.benchmarks.processes import TAG_VARIABLE, TreeMemory, descendants, memory_kb


def test_memory_sampler_counts_descendants_and_tagged_orphans() -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    env = dict(os.environ, **{TAG_VARIABLE: "t1"})
    # the root and its child form the tree; a tagged process outside it stands for a re-parented one
    root = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(30)", *sleeper], env=env)
    orphan = subprocess.Popen(sleeper, env=env)
    started: list[int] = []
    try:
        time.sleep(1.0)
        memory = TreeMemory(root.pid, "t1", interval=0.05)
        started = sorted(memory.members() - {root.pid, orphan.pid})
        with memory:
            time.sleep(0.3)
        assert len(started) == 1
        assert {p["pid"] for p in memory.peak_processes} == {root.pid, orphan.pid, *started}
        assert set(memory.reparented) == {orphan.pid}
        assert memory.peak_rss_kb == sum(p["rss_kb"] for p in memory.peak_processes) > 0 and memory.peak_pss_kb > 0
    finally:
        for pid in started:
            os.kill(pid, signal.SIGKILL)
        for process in (root, orphan):
            process.kill()
            process.wait()


def test_a_polled_sampler_reports_each_process_and_its_peak() -> None:
    """As the device-cost benchmark polls it: each sample lists the tree's live processes with their
    RSS and peak RSS, and the summed peak covers the largest sample."""
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(30)"])
    try:
        time.sleep(1.0)
        memory = TreeMemory(child.pid, pss_every=2)
        first, second = memory.sample(), memory.sample()
        assert child.pid in descendants(os.getpid()) and [p["pid"] for p in first] == [child.pid]
        entry = first[0]
        assert entry["hwm_kb"] >= entry["rss_kb"] >= 64 * 1024  # the child's 64 MiB buffer is resident
        assert all("pss_kb" in p for p in first) and not any("pss_kb" in p for p in second)
        assert memory.peak_rss_kb == max(p["rss_kb"] for p in first + second)
        assert memory_kb(child.pid, pss=True)["Pss"] > 0
    finally:
        child.kill()
        child.wait()
