"""Seed 000 stage 1 for a transformer encoder: the experiment itself (self-contained; runs on a GPU).

For each seed the server fine-tunes MiniLM's top layers on its public labelled sentences
(fed.encoders.tuned.finetune: public data only) and ships them; the encoder the users run is
rebuilt from the shipped file exactly as a device loads it (fed.encoders.tuned.read_tuned). For
MiniLM as it is ("base") and the shipped one ("stage 1"), on each task (SST-2, Movie Review
polarity): a PCA to ``dim`` dimensions fitted on the public encodings, clipped in L2 at the
``clip_quantile`` of the public rows' norms, one report per training record (clip + Gaussian noise
of std ``noise_multiplier[eps] * 2 * clip``, the worst-case calibration ldpfed computed for one
release at sensitivity 2C, given in the input JSON), public labels; the server's noise-aware
discriminant (fed.learning.classifier) scored on the task's clean dev encodings (local inference):

- public only: the discriminant on the public encodings;
- non-private: the same on the clean training encodings in the shipped representation;
- private: on the reports (public covariance as shrinkage target, public means for screening);
- combined: private plus the public data as one more group, its domain shift estimated
  (fed.learning.classifier.domain_shift) and added to its class means' variance.

The noise here is torch/numpy Gaussian with the sigma from ldpfed's calibration, not ldpfed's
randomizer objects (so the script needs no flwr, opendp or dp_accounting).

    python3 simulations/reproductions/_seed000_stage1_run.py --input INPUT.json --model MINILM_DIR \\
        --data DATA_DIR --out OUT_DIR [--time-budget SECONDS] [--checkpoint DIR]

Optional input keys: ``public_tweets`` (that many TweetEval sentiment tweets added to the public
set), ``public_limit`` (a seeded sample of the public set: smoke tests only), ``encoders`` (a subset of ["base", "stage1"]); ``--seeds`` runs some of the seeds only.

Imports only torch, transformers, safetensors, numpy and ldpfed modules that import nothing
else. Checkpoints under OUT_DIR/checkpoint or --checkpoint (encodings, shipped weights; a
``stage1-seed0.safetensors`` put there beforehand, e.g. the recipe search's, is used as seed 0's); results.json is
rewritten after every finished cell, and a rerun with the same OUT_DIR resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: fed/ without installing ldpfed

from ldpfed.fed.learning.classifier import NoiseAwareLDA, class_means, domain_shift, within_class_covariance  # noqa: E402
from ldpfed.fed.data.dataset import TextDataset  # noqa: E402
from ldpfed.fed.encoders.hf import masked_mean  # noqa: E402
from ldpfed.fed.encoders.projection import PCAProjection  # noqa: E402
from ldpfed.fed.encoders.tuned import finetune, read_tuned, tuned_bytes, weights_fingerprint  # noqa: E402
from ldpfed.fed.data.loaders import load_dataset  # noqa: E402

ENCODE_LENGTH = 256
"""Tokens the users' encoder reads (fed.encoders.hf.MINILM_MAX_LENGTH)."""


class Budget:
    """Wall-clock budget: ``left()`` seconds remain of ``seconds`` from construction."""

    def __init__(self, seconds: float) -> None:
        self.start, self.seconds = time.monotonic(), seconds

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)


def load_base(model_dir: Path, device: str) -> tuple[Any, Any]:
    """Tokenizer and the base model in float32 (the GPU copy of the weights may be float16)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True, dtype=torch.float32)
    return tokenizer, model.to(device).eval()


def encode(
    tokenizer: Any, model: Any, texts: tuple[str, ...], device: str, batch: int, texts2: tuple[str, ...] | None = None,
) -> np.ndarray:
    """Mean-pooled last hidden states over the attention mask (as fed.encoders.hf.HFEncoder; pairs as one
    sequence, truncated together), float32."""
    import torch

    second = None if texts2 is None else list(texts2)
    out = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
    lengths = [len(ids) for ids in tokenizer(list(texts), second, truncation=True, max_length=ENCODE_LENGTH)["input_ids"]]
    order = np.argsort(lengths, kind="stable")
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            idx = order[start : start + batch]
            inputs = tokenizer(
                [texts[i] for i in idx], None if second is None else [second[i] for i in idx],
                padding=True, truncation=True, max_length=ENCODE_LENGTH, return_tensors="pt",
            ).to(device)
            pooled = masked_mean(model(**inputs).last_hidden_state, inputs["attention_mask"])
            out[idx] = pooled.float().cpu().numpy()
    return out


def cached(path: Path, compute: Any) -> np.ndarray:
    """``compute()`` saved at ``path`` (.npy), or what an earlier run saved there."""
    if path.is_file():
        return np.load(path)
    value = compute()
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, value)
    tmp.replace(path)
    return value


def limited(dataset: TextDataset, limit: int, seed: int) -> TextDataset:
    """A seeded sample of ``limit`` records (all when 0 or more than there are), in file order."""
    if not limit or limit >= len(dataset):
        return dataset
    keep = np.sort(np.random.default_rng(seed).choice(len(dataset), limit, replace=False))
    return dataset.subset(keep)


def tweets(data: Path, count: int) -> TextDataset:
    """``count`` positive/negative TweetEval sentiment tweets (its test split, neutral dropped; labels 0
    negative, 1 positive), a seeded sample in file order: public data from another source than SST-2 and MR."""
    tweet_data = load_dataset(str(data / "tweeteval" / "sentiment"), "test")
    keep = np.flatnonzero(tweet_data.labels != 1)
    if not 0 < count <= len(keep):
        raise ValueError(f"public_tweets must be 1 to {len(keep)}, got {count}")
    keep = np.sort(np.random.default_rng(0).choice(keep, count, replace=False))
    labels = (tweet_data.labels[keep] == 2).astype(np.int64)
    return TextDataset("tweeteval/sentiment", tuple(tweet_data.texts[i] for i in keep), None, labels, ("negative", "positive"))


def public_set(data: Path, folder: str, extra_tweets: int = 0) -> TextDataset:
    """The server's public labelled sentences: the train split of ``folder``, plus ``extra_tweets`` tweets."""
    public = load_dataset(str(data / folder), "train")
    if not extra_tweets:
        return public
    extra = tweets(data, extra_tweets)
    return TextDataset(
        f"{public.name}+tweets{extra_tweets}", public.texts + extra.texts, None,
        np.concatenate([public.labels, extra.labels]), public.label_names,
    )


def clean_model(x: np.ndarray, y: np.ndarray, classes: int) -> NoiseAwareLDA:
    """The discriminant on clean rows (fed.learning.aggregation.fit_clean's statistics)."""
    lda = NoiseAwareLDA(x.shape[1], classes, -1.0)
    lda.update(x, y, 0.0)
    return lda


def clip(x: np.ndarray, radius: float) -> np.ndarray:
    """Rows scaled into the L2 ball of ``radius`` (the randomizer's preprocess)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x * np.minimum(1.0, radius / np.maximum(norms, 1e-12))).astype(np.float64)


def accuracy(lda: NoiseAwareLDA, x: np.ndarray, y: np.ndarray) -> float:
    return float((lda.fit().predict(x) == y).mean())


def cell(
    config: dict[str, Any], public: tuple[np.ndarray, np.ndarray], train: tuple[np.ndarray, np.ndarray],
    dev: tuple[np.ndarray, np.ndarray], seed: int,
) -> dict[str, Any]:
    """Every classifier of one (task, encoder, seed) from its raw encodings."""
    (pub_raw, pub_y), (train_raw, train_y), (dev_raw, dev_y) = public, train, dev
    classes = int(max(pub_y.max(), train_y.max(), dev_y.max())) + 1
    projection = PCAProjection.fit(pub_raw, config["dim"])
    pub_p, train_p, dev_p = (projection.apply(x) for x in (pub_raw, train_raw, dev_raw))
    radius = float(np.quantile(np.linalg.norm(pub_p, axis=1), config["clip_quantile"]))
    pub_x, train_x, dev_x = (clip(x, radius) for x in (pub_p, train_p, dev_p))
    target, means = within_class_covariance(pub_x, pub_y, classes), class_means(pub_x, pub_y, classes)
    row: dict[str, Any] = {
        "clip": radius,
        "train_clipped": float((np.linalg.norm(train_p, axis=1) > radius).mean()),
        "public_only": accuracy(clean_model(pub_x, pub_y, classes), dev_x, dev_y),
        "nonprivate": accuracy(clean_model(train_x, train_y, classes), dev_x, dev_y),
        "private": {}, "combined": {}, "shift": {},
    }
    rng = np.random.default_rng(seed)
    for eps, multiplier in config["noise_multiplier"].items():
        sigma = multiplier * 2 * radius
        reports = train_x + rng.normal(0.0, sigma, size=train_x.shape)
        lda = NoiseAwareLDA(config["dim"], classes, -1.0, target, means)
        lda.update(reports, train_y, sigma)
        row["private"][eps] = accuracy(lda, dev_x, dev_y)
        shift = domain_shift(lda, pub_x, pub_y)
        lda.add_public(pub_x, pub_y, shift)
        row["combined"][eps] = accuracy(lda, dev_x, dev_y)
        row["shift"][eps] = [float(v) for v in shift[:, 0]]
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run (or resume) the experiment; returns the results written to OUT/results.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, required=True, help="JSON written by seed000_stage1.py --write-input")
    parser.add_argument("--model", type=Path, required=True, help="folder of all-MiniLM-L6-v2 (Hugging Face files)")
    parser.add_argument("--data", type=Path, required=True, help="folder holding the task and public data folders")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--time-budget", type=float, default=600.0, help="seconds; cells not started by then are skipped")
    parser.add_argument("--device", default="")
    parser.add_argument("--batch", type=int, default=256, help="sentences per encoding batch")
    parser.add_argument("--seeds", default="", help="comma-separated seeds to run (default: 0 .. the input's seeds - 1)")
    parser.add_argument("--checkpoint", type=Path, default=None, help="encodings and shipped weights (default OUT/checkpoint)")
    args = parser.parse_args(argv)
    import torch

    budget = Budget(args.time_budget)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        torch.set_num_threads(1)  # a second thread only spins on shared cores (fed.runtime.threads.one_torch_thread)
    config = json.loads(args.input.read_text())
    checkpoint = args.checkpoint or args.out / "checkpoint"
    checkpoint.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    results.update({"config": config, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"})
    results.setdefault("cells", {})
    results.setdefault("stage1", {})
    results["complete"] = False

    def save() -> None:
        results["elapsed_s"] = round(args.time_budget - budget.left(), 1)
        tmp = results_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(results_path)

    public = limited(public_set(args.data, config["public"], config.get("public_tweets", 0)), config.get("public_limit", 0), 2)
    tasks = {
        name: (
            limited(load_dataset(str(args.data / spec["folder"]), "train"), spec.get("train_limit", 0), 0),
            limited(load_dataset(str(args.data / spec["folder"]), "dev"), spec.get("dev_limit", 0), 1),
        )
        for name, spec in config["tasks"].items()
    }
    tokenizer, model = load_base(args.model, device)
    base_state = {k: v.clone() for k, v in model.state_dict().items()}

    def encodings(tag: str, dataset: TextDataset) -> np.ndarray:
        name = dataset.name.replace("/", "_")
        return cached(checkpoint / f"{tag}-{name}-{len(dataset)}.npy", lambda: encode(tokenizer, model, dataset.texts, device, args.batch))

    skipped = []
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else range(config["seeds"])
    for seed in seeds:
        for encoder in config.get("encoders", ("base", "stage1")):
            todo = [t for t in tasks if f"{t}/{encoder}/{seed}" not in results["cells"]]
            if not todo:
                continue
            if budget.left() <= 0:
                skipped += [f"{t}/{encoder}/{seed}" for t in todo]
                continue
            model.load_state_dict(base_state)
            tag = "base"
            if encoder == "stage1":
                path = checkpoint / f"stage1-seed{seed}.safetensors"
                if not path.is_file():
                    started = time.monotonic()
                    stage = config["stage1"]
                    tuned = finetune(
                        args.model, public.texts, public.labels, public.num_labels, layers=stage["layers"],
                        epochs=stage["epochs"], batch_size=stage["batch_size"], learning_rate=stage["learning_rate"],
                        seed=seed, device=device,
                    )
                    path.write_bytes(tuned_bytes(tuned, stage["layers"]))
                    del tuned
                    results["stage1"][str(seed)] = {"seconds": round(time.monotonic() - started, 1)}
                data = path.read_bytes()
                model.load_state_dict(read_tuned(data, model.config, path.name), strict=False)  # as a device loads it
                results["stage1"].setdefault(str(seed), {}).update(bytes=len(data), fingerprint=weights_fingerprint(data))
                tag = f"stage1-seed{seed}"
            pub = (encodings(tag, public), public.labels)
            for task in todo:
                train, dev = tasks[task]
                row = cell(config, pub, (encodings(tag, train), train.labels), (encodings(tag, dev), dev.labels), seed)
                row.update(train=len(train), dev=len(dev), public=len(public))
                results["cells"][f"{task}/{encoder}/{seed}"] = row
                save()
    results["skipped"] = skipped
    results["complete"] = not skipped
    save()
    return results


if __name__ == "__main__":
    main()
