"""The device-cost benchmark as a whole: every job, its table and its command line."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.simulations.benchmarks.device_costs.compare import comparison_lines
from ldpfed.simulations.benchmarks.device_costs.device import DEFAULT_DATA, DEFAULT_PUBLIC, POLICY, make_device
from ldpfed.simulations.benchmarks.device_costs.latency import TOKEN_BLOCK, measure_latency, measure_token_block
from ldpfed.simulations.benchmarks.device_costs.machine import cpu_pressure, filesystem, machine
from ldpfed.simulations.benchmarks.device_costs.progress import Progress
from ldpfed.simulations.benchmarks.device_costs.report_bytes import measure_bytes
from ldpfed.simulations.benchmarks.device_costs.supernode import measure_supernode


def run_benchmark(
    work: Path, data: str = DEFAULT_DATA, public: str = DEFAULT_PUBLIC, releases: int = 50, full_dim: bool = True,
    supernode: bool = False, rounds: int = 5, secure: bool = True, timeout: float = 900.0, progress: Progress | None = None,
    token_block_releases: int | None = None, device_encode: bool = True, noop: bool = False,
) -> dict[str, Any]:
    """Every figure, as a JSON-ready dict (see the module docstring); the token block is timed
    ``token_block_releases`` times (default: ``releases``, at most 10)."""
    progress = progress or Progress(quiet=True)
    from ldpfed.fed.device.entropy import in_simulation_engine
    from ldpfed.fed.runtime.threads import limit_blas_threads

    limit_blas_threads()  # as in the ClientApp's process
    if in_simulation_engine():
        raise RuntimeError("the benchmark must run outside the simulation engine (a device)")
    results: dict[str, Any] = {
        "machine": machine(),
        "settings": {
            "data": data, "public": public, "releases": releases, "policy": POLICY,
            "state_filesystem": filesystem(work), "in_simulation_engine": False,
        },
        "latency": {},
    }
    settings = [("default", 16)] + ([("full-dimension", 0)] if full_dim else [])
    for label, dim in settings:
        progress.say(f"{label}: building the server's bundle and setting up the device")
        device = make_device(work / "in-process", label, data, public, dim)
        results["latency"][label] = measure_latency(device, releases, progress)
    results["settings"]["durable_ledger"] = True
    full = results["latency"].get("full-dimension", results["latency"]["default"])
    progress.say(f"clip + noise of a {TOKEN_BLOCK[0]} x {TOKEN_BLOCK[1]} block")
    results["token_block"] = measure_token_block(full["mechanism"], token_block_releases or min(releases, 10))
    results["bytes"] = {label: measure_bytes(entry.pop("_reply")) for label, entry in results["latency"].items()}
    if supernode:
        results["supernode"] = measure_supernode(work / "supernode", data, public, rounds, secure, timeout, progress, device_encode, noop)
    results["machine"]["load_average_at_end"] = Path("/proc/loadavg").read_text().split()[:3]
    results["machine"]["cpu_pressure_at_end"] = cpu_pressure()
    return results


def table(results: dict[str, Any]) -> str:
    """The figures as a plain-text table."""
    m = results["machine"]
    latency = results["latency"]
    labels = list(latency)
    lines = [
        f"What it costs a device: {m['cpus']} CPUs ({m['cpu_model']}), {'GPU' if m['gpu'] else 'CPU only'}, "
        f"torch threads {m['torch_threads']}, flwr {m['flwr']}, tree {m['git']}",
        f"device data {results['settings']['data']}, ledger on {results['settings']['state_filesystem']} (synchronous=FULL), "
        f"noise sampler {latency[labels[0]]['device_sampler']}",
        f"load average {' '.join(m['load_average_at_start'])} at start, {' '.join(m.get('load_average_at_end', ['?']))} at end",
        "",
        "per release, median / p95 ms over {} fresh releases".format(latency[labels[0]]["parts"]["message"]["n"]),
    ]
    heads = [f"{name} ({latency[name]['report_dim']} dims)" for name in labels]
    rows = [
        ("encode one sentence (MiniLM{})".format(" + projection" if latency[labels[0]]["report_dim"] != 384 else ""), "encode"),
        ("clip + noise (randomizer release)", "clip_noise"),
        ("durable charge (ledger transaction)", "charge"),
        ("  of which the commit (fsync)", "commit"),
        ("train message, ClientApp in a warm process", "message"),
        ("encode + train message", "encode_plus_message"),
    ]
    width = 46
    lines.append(" " * width + "".join(f"{h:>28}" for h in heads))
    for text, key in rows:
        cells = [latency[name]["parts"][key] for name in labels]
        lines.append(f"{text:<{width}}" + "".join(f"{_ms(c['median_ms'])} / {_ms(c['p95_ms'])}".rjust(28) for c in cells))
    lines.append(f"{'first train message in this process':<{width}}" + "".join(f"{latency[n]['first_train_message_s'] * 1000:>25.0f} ms" for n in labels))
    lines.append(f"{'first encode (loads MiniLM)':<{width}}" + "".join(f"{latency[n]['encoder_first_call_s']:>26.2f} s" for n in labels))
    block = results["token_block"]
    lines.append(
        f"clip + noise of a {block['shape'][0]} x {block['shape'][1]} block (token-level shape; not served by devices): "
        f"{_ms(block['clip_noise']['median_ms'])} / {_ms(block['clip_noise']['p95_ms'])} ms"
    )
    lines.append("")
    for label, b in results["bytes"].items():
        lines.append(
            f"bytes per report ({label}): report {b['report_raw_bytes']} B raw, reply arrays {b['arrays_raw_bytes']} B raw, "
            f"Flower objects {b['flower_objects_bytes']} B, protobuf bodies {b['protobuf_total_bytes']} B in {b['http_requests']} HTTP requests"
        )
    node = results.get("supernode")
    if node:
        mem, ttfr = node["memory"], node["time_to_first_report"]
        peaks = ", ".join(f"{kind} {p['VmHWM_kB'] / 1024:.0f} MiB" for kind, p in mem["peak_by_kind"].items())
        lines += [
            "",
            f"SuperNode hosting one user ({'TLS, authenticated, signed app' if node['secure'] else 'insecure'} loopback, {node['rounds']} round{'s' if node['rounds'] > 1 else ''}):",
            f"  peak RSS (VmHWM): {peaks}; sum {mem['sum_of_peaks_kB'] / 1024:.0f} MiB; "
            f"peak concurrent RSS {mem['peak_concurrent_rss_kB'] / 1024:.0f} MiB, PSS {mem['peak_concurrent_pss_kB'] / 1024:.0f} MiB "
            f"({mem['clientapp_processes']} flwr-clientapp processes, one per message)",
            "  time to first report: {} s after launch (connected {}, setup received {}, setup answered {}, train received {})".format(
                *(_s(ttfr.get(k)) for k in ("first_report_sent", "connected", "setup_received", "setup_answered", "train_received"))
            )
            + (
                f"; before launch the owner encoded the data in {node['device_encode_s']:.1f} s (ldpfed device encode)"
                if node.get("device_encode_s") is not None else "; data not encoded before launch (setup encodes it)"
            ),
            f"  train message on the SuperNode (a new flwr-clientapp process each): "
            f"median {node['train_message_wall'].get('median_ms', float('nan')) / 1000:.2f} s over {node['train_message_wall']['n']}; "
            f"importing the ClientApp in a fresh interpreter: median {float(np.median(node['fresh_process_import_s'])):.1f} s",
        ]
        if node.get("comparison"):
            lines += [
                "",
                "What ldpfed adds: the no-op app (Flower alone, same message sequence) and ldpfed's app, served back to back by "
                "the same flower-supernode command (each launched fresh, fresh SuperLink):",
                *comparison_lines(node["comparison"]),
            ]
    return "\n".join(lines)


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


@contextmanager
def _workdir(path: str | None) -> Iterator[Path]:
    if path:
        folder = Path(path).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="ldpfed-device-costs-") as temp:
        yield Path(temp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ldpfed.simulations.benchmarks.device_costs",
        description="Measure what a device pays, on this machine, through the real device code path: latency per "
        "release (encode, clip + noise, durable charge, whole message), bytes per report, and with --supernode the "
        "memory of a real SuperNode hosting one user with MiniLM and its time to first report, beside a no-op app "
        "served by the same SuperNode command (what ldpfed adds to Flower's own floor).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--releases", type=int, default=50, help="fresh releases timed per setting (median and p95)")
    parser.add_argument("--data", default=DEFAULT_DATA, help="the device's data (node config): generated:N or a folder of train.tsv/dev.tsv")
    parser.add_argument("--public", default=DEFAULT_PUBLIC, help="the server's public data for the 16-dim projection (server side)")
    parser.add_argument("--no-full-dim", action="store_true", help="skip the full-dimension (384, no projection) setting")
    parser.add_argument("--supernode", action="store_true", help="also start a SuperLink and a real flower-supernode: memory and time to first report")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the SuperNode run (one train message of one record each)")
    parser.add_argument(
        "--skip-noop", action="store_true",
        help="with --supernode, serve ldpfed's app only; by default the same flower-supernode command first serves a no-op "
        "app (Flower alone, the same messages), then ldpfed's, and the table shows what ldpfed adds",
    )
    parser.add_argument("--insecure", action="store_true", help="SuperNode part without TLS, authentication and app signing")
    parser.add_argument(
        "--no-device-encode", action="store_true",
        help="SuperNode part without the owner's `ldpfed device encode` before the run (setup then encodes the data)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds the SuperNode run may take")
    parser.add_argument("--workdir", default=None, help="keep every file here (none: a temporary folder, removed at the end)")
    parser.add_argument("--out", default=None, help="write the figures as JSON to this file")
    parser.add_argument(
        "--torch-threads", type=int, default=None,
        help="torch threads for every encoder here and in the SuperNode's processes (none: torch's own, as on a device)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.releases < 1 or args.rounds < 1:
        parser.error("--releases and --rounds must be at least 1")
    if args.skip_noop and not args.supernode:
        parser.error("--skip-noop is a --supernode option")
    progress = Progress(args.quiet)
    if args.torch_threads is not None:
        if args.torch_threads < 1:
            parser.error("--torch-threads must be at least 1")
        import torch

        os.environ["OMP_NUM_THREADS"] = str(args.torch_threads)  # inherited by the SuperNode and its processes
        torch.set_num_threads(args.torch_threads)
    with _workdir(args.workdir) as work:
        results = run_benchmark(
            work, args.data, args.public, args.releases, not args.no_full_dim, args.supernode, args.rounds,
            not args.insecure, args.timeout, progress, device_encode=not args.no_device_encode, noop=not args.skip_noop,
        )
    results["command"] = "python -m ldpfed.simulations.benchmarks.device_costs " + " ".join(argv if argv is not None else sys.argv[1:])
    print(table(results))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, default=_json_default) + "\n")
        progress.say(f"figures written to {out}")
    return 0


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
