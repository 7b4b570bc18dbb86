"""Seed 004 on a GPU: the cells of seed004_bits (IMDb, Amazon, Yelp, Intent, MRPC), many MLPs trained at once.

Every cell is the one ``seed004_bits.compute`` defines: the same split (the sentiment sets' seeded 8:2
split per run, ``seed004_bits.split_rows``), its training split's z-score statistics, the same randomizer
object (``fed.randomizers``) releasing the same reports from the same seeded generator, the same MLP
recipe (one hidden ReLU layer of 128 for the sentiment sets and 768 for Intent and MRPC, dropout 0.5 on
the input, SGD lr 0.01 momentum 0.9, Keras-style decay 1e-6 per step, batch 32, ``--epochs``), tested
on the clean bits of the run's test split. What differs: the
MLPs of a chunk (every bit-flipping row of up to ``--chunk`` seeds of one dataset; the clean rows of
every seed go with the first chunk) are trained side by side as one
stacked model (independent weights, batches, dropout and optimizer state; the loss is the sum of the
per-model means, so each model's gradient is its own), so their initialisation, shuffling and dropout
come from a torch generator on the device instead of the CPU path's; and the MiniLM encodings are
computed here from ``--model`` (mean pooled, pairs as one sequence, as fed.encoders.hf.HFEncoder).

The strict rows need ldpfed's calibration, which needs dp_accounting (not on the GPU image): their
published epsilons (or refusals) are computed here beforehand into seed004_bits_strict.json
(``python -m ldpfed.simulations.reproductions.seed004_bits write-strict``), and the device rebuilds each
randomizer from them with ``from_params`` and checks its true epsilon against the file.

Imports only torch, transformers, numpy and numpy-only ldpfed modules.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

STRICT_FILE = Path(__file__).with_name("seed004_bits_strict.json")
"""Published epsilon of each strict row (or its refusal), for MiniLM's 384 dims."""


def strict_table(rows: list[tuple[str, str, float, float | None]], dim: int, delta: float) -> dict[str, Any]:
    """Calibrate every strict row here (needs dp_accounting): row -> published epsilon or refusal."""
    from ldpfed.fed.randomizers import RANDOMIZERS

    out: dict[str, Any] = {"dim": dim, "delta": delta, "rows": {}}
    for row, protocol, epsilon, lam in rows:
        if protocol == "clean":
            continue
        options: dict[str, Any] = {"dim": dim} if lam is None else {"dim": dim, "lambda": lam}
        try:
            r = RANDOMIZERS[protocol].calibrated(epsilon, delta, 1, options)
        except ValueError as err:
            out["rows"][row] = {"refused": str(err)}
        else:
            out["rows"][row] = {"published_epsilon": r.epsilon, "true_epsilon": r.true_epsilon}
    return out


def build_from_table(protocol: str, accounting: str, published_paper: float, lam: float | None, dim: int,
                     mean: np.ndarray, std: np.ndarray, strict: dict[str, Any], row: str) -> Any:
    """The randomizer of a row; ValueError (the stored refusal) where the strict accounting cannot meet it."""
    from ldpfed.fed.randomizers import RANDOMIZERS

    if strict["dim"] != dim:
        raise ValueError(f"{STRICT_FILE.name} was computed for dim {strict['dim']}, the encodings have {dim}")
    params: dict[str, Any] = {"dim": dim, "mean": mean.tolist(), "std": std.tolist()}
    if lam is not None:
        params["lambda"] = lam
    if accounting == "strict":
        entry = strict["rows"][row]
        if "refused" in entry:
            raise ValueError(entry["refused"])
        randomizer = RANDOMIZERS[protocol].from_params({**params, "epsilon": entry["published_epsilon"]})
        if not math.isclose(randomizer.true_epsilon, entry["true_epsilon"], rel_tol=1e-9):
            raise RuntimeError(f"{row}: true epsilon {randomizer.true_epsilon} differs from the stored {entry['true_epsilon']}")
        return randomizer
    return RANDOMIZERS[protocol].from_params({**params, "epsilon": published_paper})


def train_stacked(data: Any, slot: Any, y: Any, num_classes: int, hidden: int, epochs: int, batch: int, lr: float,
                  momentum: float, decay: float, dropout: float, generator: Any, y_slot: Any = None) -> tuple[Any, ...]:
    """K one-hidden-layer MLPs, model k on rows ``data[slot[k]]`` (data: (S, N, D), any dtype) with labels ``y``
    ((N,) shared, or (T, N) with model k on labels ``y[y_slot[k]]``); returns the weights (W1 (K, D, H), b1, W2, b2)."""
    import torch

    device = data.device
    k_models, n, d = len(slot), data.shape[1], data.shape[2]

    def uniform(shape: tuple[int, ...], fan_in: int) -> Any:  # nn.Linear's default initialisation
        bound = 1.0 / math.sqrt(fan_in)
        return ((torch.rand(shape, generator=generator, device=device) * 2 - 1) * bound).requires_grad_()

    w1, b1 = uniform((k_models, d, hidden), d), uniform((k_models, 1, hidden), d)
    w2, b2 = uniform((k_models, hidden, num_classes), hidden), uniform((k_models, 1, num_classes), hidden)
    optimizer = torch.optim.SGD([w1, b1, w2, b2], lr=lr, momentum=momentum)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1.0 + decay * step))
    rows = slot[:, None]
    for _ in range(epochs):
        order = torch.argsort(torch.rand((k_models, n), generator=generator, device=device), dim=1)
        for start in range(0, n, batch):
            idx = order[:, start : start + batch]
            xb = data[rows, idx].float()
            if dropout:
                keep = torch.rand(xb.shape, generator=generator, device=device) >= dropout
                xb = xb * keep / (1 - dropout)
            logits = torch.baddbmm(b2, torch.relu(torch.baddbmm(b1, xb, w1)), w2)
            yb = y[idx] if y_slot is None else y[y_slot[:, None], idx]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, num_classes), yb.reshape(-1), reduction="sum")
            optimizer.zero_grad(set_to_none=True)
            (loss / idx.shape[1]).backward()
            optimizer.step()
            schedule.step()
    return tuple(t.detach() for t in (w1, b1, w2, b2))


def accuracies(weights: tuple[Any, ...], x_test: Any, y_test: Any, test_slot: Any = None) -> list[float]:
    """Test accuracy of each stacked model: on the same rows ``x_test`` (M, D), or model k on
    ``x_test[test_slot[k]]`` ((T, M, D), labels (T, M))."""
    import torch

    w1, b1, w2, b2 = weights
    out = []
    with torch.inference_mode():
        for k in range(w1.shape[0]):
            xs, ys = (x_test, y_test) if test_slot is None else (x_test[test_slot[k]], y_test[test_slot[k]])
            pred = (torch.relu(xs @ w1[k] + b1[k]) @ w2[k] + b2[k]).argmax(dim=1)
            out.append(float((pred == ys).float().mean()))
    return out


SENTIMENT_FILES = {"imdb": "imdb_labelled", "amazon": "amazon_cells_labelled", "yelp": "yelp_labelled"}
"""The Kotzias et al. sentiment sets: dataset -> its group in sentiment_labelled_sentences."""


def encodings(model_dir: Path, data: Path, dataset: str, device: str, limits: tuple[int, int]) -> tuple[np.ndarray, ...]:
    """(x_train, y_train, x_test, y_test) MiniLM-encoded on ``device`` (float64); a sentiment set comes whole
    in the training part (at most ``limits[0]`` records) with an empty test part, to be split per run."""
    from ldpfed.fed.data.loaders import load_dataset
    from ldpfed.simulations.reproductions._seed000_stage1_run import encode, limited, load_base

    tokenizer, model = load_base(model_dir, device)
    if dataset in SENTIMENT_FILES:
        everything = load_dataset(str(data / "sentiment_labelled_sentences"), "all")
        group = everything.group_names.index(SENTIMENT_FILES[dataset])
        part = limited(everything.subset(np.flatnonzero(everything.groups == group)), limits[0], 0)
        x = encode(tokenizer, model, part.texts, device, 256).astype(np.float64)
        return x, part.labels, np.empty((0, x.shape[1])), np.empty(0, dtype=np.int64)
    folder = {"intent": "snips", "mrpc": "mrpc"}[dataset]
    out = []
    for split, limit, seed in (("train", limits[0], 0), ("test", limits[1], 1)):
        ds = limited(load_dataset(str(data / folder), split), limit, seed)
        out += [encode(tokenizer, model, ds.texts, device, 256, ds.texts2).astype(np.float64), ds.labels]
    return tuple(out)


def run(args: Any, reproduction: Any) -> dict[str, Any]:
    """Every missing cell of ``args.datasets`` x seeds, chunk by chunk, within ``args.time_budget``;
    ``reproduction`` is the seed004_bits module (its rows, setup, split, paper epsilon and MLP width)."""
    import torch

    from ldpfed.simulations.reproductions._cells import Results

    started = time.monotonic()
    device = args.device
    if device == "cpu":
        torch.set_num_threads(1)
    strict = json.loads(STRICT_FILE.read_text())
    setup, rows_for, split_rows = reproduction.SETUP, reproduction.rows_for, reproduction.split_rows
    if args.train_limit or args.test_limit:
        setup = {**setup, "smoke_limits": [args.train_limit, args.test_limit]}
    results = Results(args.out, setup)
    skipped: list[str] = []
    enc = {d: encodings(args.model, args.data, d, device, (args.train_limit, args.test_limit)) for d in args.datasets}
    print(f"seed004 gpu: encoded {', '.join(args.datasets)} in {time.monotonic() - started:.1f} s", flush=True)
    per_model: dict[str, float] = {}
    chunks = [list(range(s, min(s + args.chunk, args.seeds))) for s in range(0, args.seeds, args.chunk)]
    for seeds in chunks:
        for dataset in args.datasets:
            classes = int(max(enc[dataset][1].max(), enc[dataset][3].max(initial=0))) + 1
            parts: dict[int, tuple[np.ndarray, ...]] = {}  # seed -> its (x, y, x_test, y_test, mean, std)

            def part(seed: int) -> tuple[np.ndarray, ...]:
                if seed not in parts:
                    x, y, x_test, y_test = split_rows(dataset, enc[dataset], seed)
                    parts[seed] = (x, y, x_test, y_test, x.mean(axis=0), x.std(axis=0) + 1e-12)
                return parts[seed]

            jobs = []  # (setting, seed, randomizer or None for clean)
            for seed in range(args.seeds):  # the clean MLPs (cheap) of every seed go with the first chunk
                for row, protocol, epsilon, lam in rows_for(dataset):
                    for acc in (("clean",) if protocol == "clean" else ("paper", "strict")):
                        setting = {"dataset": dataset, "row": row, "accounting": acc, "epochs": args.epochs}
                        if results.done(setting, seed) or (protocol != "clean" and seed not in seeds):
                            continue
                        if protocol == "clean":
                            jobs.append((setting, seed, None))
                            continue
                        x, _, _, _, mean, std = part(seed)
                        try:
                            randomizer = build_from_table(protocol, acc, reproduction.paper_epsilon(protocol, epsilon), lam,
                                                          x.shape[1], mean, std, strict, row)
                        except ValueError as err:
                            results.put(setting, seed, {"accuracy": None, "refused": str(err), "seconds": 0.0})
                            continue
                        jobs.append((setting, seed, randomizer))
            if not jobs:
                continue
            left = args.time_budget - (time.monotonic() - started)
            need = per_model.get(dataset, 0.0) * sum(j[2] is not None for j in jobs)
            if left <= need * 1.1:
                skipped.append(f"{dataset} seeds {seeds[0]}-{seeds[-1]}")
                print(f"seed004 gpu: {skipped[-1]} skipped ({left:.0f} s left, about {need:.0f} s needed)", flush=True)
                continue
            begun = time.monotonic()
            bit_jobs = [j for j in jobs if j[2] is not None]
            clean_jobs = [j for j in jobs if j[2] is None]

            def release(job: tuple[Any, int, Any]) -> np.ndarray:
                return job[2].release(part(job[1])[0], np.random.default_rng([4, job[1], 1])).astype(np.uint8)

            def per_seed(group: list[tuple[Any, int, Any]], test_of: Any) -> tuple[Any, ...]:
                """Each seed's labels, test rows (``test_of(seed, job)``) and test labels once, and each job's index."""
                order = list(dict.fromkeys(seed for _, seed, _ in group))
                first = {seed: next(j for j in group if j[1] == seed) for seed in order}
                tensors = [torch.as_tensor(np.stack(a), device=device) for a in (
                    [part(s)[1] for s in order], [test_of(s, first[s]) for s in order], [part(s)[3] for s in order])]
                return (*tensors, torch.as_tensor([order.index(seed) for _, seed, _ in group], device=device))

            hidden = reproduction.hidden_units(dataset)
            accs: list[float] = []
            if bit_jobs:
                with ThreadPoolExecutor(args.threads) as pool:
                    bits = torch.as_tensor(np.stack(list(pool.map(release, bit_jobs))), device=device)
                ys, test_bits, ys_test, slot = per_seed(bit_jobs, lambda s, job: job[2].preprocess(part(s)[2]).astype(np.float32))
                gen = torch.Generator(device=device).manual_seed(zlib.crc32(f"{dataset}/{seeds[0]}/bits".encode()))
                weights = train_stacked(bits, torch.arange(len(bit_jobs), device=device), ys, classes, hidden, args.epochs,
                                        32, 0.01, 0.9, 1e-6, 0.5, gen, y_slot=slot)
                accs += accuracies(weights, test_bits, ys_test, slot)
                del bits, weights
                per_model[dataset] = (time.monotonic() - begun) / len(bit_jobs)
            if clean_jobs:
                def zscored(seed: int, i: int) -> np.ndarray:  # i: 0 the training rows, 2 the test rows
                    rows = part(seed)
                    return ((rows[i] - rows[4]) / rows[5]).astype(np.float32)

                ys, z_test, ys_test, slot = per_seed(clean_jobs, lambda s, job: zscored(s, 2))
                z = torch.as_tensor(np.stack([zscored(s, 0) for s in dict.fromkeys(s for _, s, _ in clean_jobs)]), device=device)
                gen = torch.Generator(device=device).manual_seed(zlib.crc32(f"{dataset}/{seeds[0]}/clean".encode()))
                weights = train_stacked(z, slot, ys, classes, hidden, args.epochs, 32, 0.01, 0.9, 1e-6, 0.5, gen, y_slot=slot)
                accs += accuracies(weights, z_test, ys_test, slot)
            seconds = time.monotonic() - begun
            for (setting, seed, randomizer), acc in zip(bit_jobs + clean_jobs, accs):
                values: dict[str, Any] = {"accuracy": acc, "seconds": round(seconds / len(jobs), 3), "device": device,
                                          "trained_with": f"{len(jobs)} stacked MLPs"}
                if randomizer is not None:
                    values.update(published_epsilon=randomizer.claimed_epsilon, true_epsilon=randomizer.true_epsilon,
                                  bits=randomizer.num_bits)
                results.cells[_key(setting, seed)] = {"setting": setting, "seed": seed, **values}
            results.save()
            print(f"seed004 gpu: {dataset} seeds {seeds[0]}-{seeds[-1]}: {len(jobs)} MLPs in {seconds:.1f} s", flush=True)
    summary = {"skipped": skipped, "elapsed_s": round(time.monotonic() - started, 1), "device": device,
               "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
    (Path(args.out) / "run.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _key(setting: dict[str, Any], seed: int) -> str:
    from ldpfed.simulations.reproductions._cells import cell_key

    return cell_key(setting, seed)
