"""Split-N-Denoise against TokEmbPriv and Text2Text on seed 003's tasks (its Table 5 protocol).

    python -m ldpfed.simulations.experiments.snd_table --out simulations/reports/snd_table

For each eta (seed 003's BERT values 50, 100, 500) the server trains a denoiser on public
sentences (SST-2, MR, AG News, TweetEval-offensive; half of them as random pairs) released with
synthetic d_chi noise. Then, per task (QQP, MRPC, RTE), every training and test record is
released four ways and a downstream classifier (fed.learning.classifier's discriminant) is trained on
the training embeddings and scored on the test ones (AUC, accuracy), as the seed's appendix A.4:

- clean: the same pipeline without noise (eta = infinity);
- TokEmbPriv: token vectors clipped to C, d_chi noise, the upper layers (``token-dchi``);
- Text2Text: each token replaced by the vocabulary token nearest its noisy embedding;
- SnD: as TokEmbPriv plus the seed's clip of the noisy vectors to C (eq. 3); the server's
  output e_n is denoised with the user's clean token vectors and noise. "SnD, no denoiser"
  scores e_n itself.

Where the classifier is: SnD's denoised embeddings depend on the clean token vectors, so they
exist on the users' side only; a classifier trained on them is the users' (as in the seed's
evaluation), not the server's. The ledger charges SnD exactly what it charges TokEmbPriv.

Every eta is shown with the worst-case epsilon it implies for one release of one record:
eta times the token domain's diameter (2C), composed over the L token positions.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from ldpfed.fed.data.loaders import read_tsv

TASKS = {  # name: (folder, train split, test split)
    "qqp": ("qqp", "train", "dev"),
    "mrpc": ("mrpc", "train", "test"),
    "rte": ("rte", "train", "dev"),
    "cola": ("cola", "train", "dev"),
}
PUBLIC = ("sst2/train", "mr/all", "ag_news/alps_train10k", "tweeteval/offensive/train")
SEED_QQP_BERT_BASE = {50: (0.511, 0.512, 0.674), 100: (0.535, 0.513, 0.675), 500: (0.557, 0.513, 0.691)}
"""Seed 003 Table 5, Bert Base on QQP: AUC of TokEmbPriv, Text2Text, SnD per eta."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[3] / "shared" / "data")
    parser.add_argument("--encoder", default="minilm", help="a BERT-family model: minilm, or a model id or folder")
    parser.add_argument("--tasks", default="qqp,mrpc,rte")
    parser.add_argument("--etas", default="50,100,500")
    parser.add_argument("--length", type=int, default=64, help="token positions L (pad or cut)")
    parser.add_argument("--train", type=int, default=800, help="training records per task")
    parser.add_argument("--test", type=int, default=400, help="test records per task")
    parser.add_argument("--public", type=int, default=2400, help="public records the denoiser trains on")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/snd_table"))
    return parser.parse_args(argv)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (the Mann-Whitney statistic)."""
    from scipy.stats import mannwhitneyu

    pos, neg = scores[labels == 1], scores[labels == 0]
    return float(mannwhitneyu(pos, neg).statistic / (len(pos) * len(neg)))


def score(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray) -> dict[str, float]:
    """AUC and accuracy of the project's discriminant trained on ``train_x``."""
    from ldpfed.fed.learning.aggregation import fit_clean

    model = fit_clean(np.asarray(train_x, np.float64), train_y, 2, -1.0)
    s = model.scores(np.asarray(test_x, np.float64))
    return {"auc": auc(s[:, 1] - s[:, 0], test_y), "accuracy": float((s.argmax(1) == test_y).mean())}


def sample(path: Path, n: int, rng: np.random.Generator) -> tuple[list[str], list[str] | None, np.ndarray]:
    """A seeded sample of ``n`` rows of one TSV file."""
    texts, texts2, labels = read_tsv(path)
    keep = rng.permutation(len(texts))[: min(n, len(texts))]
    return [texts[i] for i in keep], None if texts2 is None else [texts2[i] for i in keep], np.asarray(labels)[keep]


def public_records(data: Path, n: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """``n`` public records: half single sentences (empty second part), half random pairs of them."""
    pool: list[str] = []
    for name in PUBLIC:
        pool += sample(data / f"{name}.tsv", n, rng)[0]
    pool = [pool[i] for i in rng.permutation(len(pool))]
    single = n // 2
    firsts, seconds = pool[:n], [""] * single + pool[n : 2 * n - single]
    return firsts, seconds


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from ldpfed.fed.learning.denoiser import DenoiserShape, train_denoiser
    from ldpfed.fed.encoders.factory import make_encoder
    from ldpfed.fed.randomizers.token_level import TokenLevelRandomizer

    torch.set_num_threads(2)
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    encoder = make_encoder(args.encoder)
    etas = [float(e) for e in args.etas.split(",")]
    started = time.time()

    def log(message: str) -> None:
        print(f"[{time.time() - started:7.0f} s] {message}", flush=True)

    pub1, pub2 = public_records(args.data, args.public, rng)
    pub2_or_none = [s or None for s in pub2]
    probe = TokenLevelRandomizer(encoder, "token-dchi", args.length, 1.0, clip=1e6)
    # pairs and singles go through the tokenizer separately (it takes no None inside a list)
    singles = [i for i, s in enumerate(pub2_or_none) if s is None]
    pairs = [i for i, s in enumerate(pub2_or_none) if s is not None]

    def by_kind(fn):  # noqa: ANN001, ANN202 - apply fn to singles and pairs, results in the original order
        a = fn([pub1[i] for i in singles], None)
        b = fn([pub1[i] for i in pairs], [pub2[i] for i in pairs])
        if isinstance(a, tuple):
            return tuple(_merge(x, y, singles, pairs) for x, y in zip(a, b))
        return _merge(a, b, singles, pairs)

    norms = np.concatenate([
        np.linalg.norm(probe.token_states([pub1[i] for i in singles[:256]], None, None), axis=-1).ravel(),
        np.linalg.norm(probe.token_states([pub1[i] for i in pairs[:256]], [pub2[i] for i in pairs[:256]], None), axis=-1).ravel(),
    ])
    clip = float(np.ceil(norms.max() * 10) / 10)
    log(f"public records {len(pub1)}; token clip C = {clip} (largest public token norm {norms.max():.3f})")

    clean_model = TokenLevelRandomizer(encoder, "token-dchi", args.length, 1.0, clip=clip)
    public_clean = by_kind(clean_model.encode_clean)
    tasks = {}
    for name in args.tasks.split(","):
        folder, train_split, test_split = TASKS[name]
        train = sample(args.data / folder / f"{train_split}.tsv", args.train, rng)
        test = sample(args.data / folder / f"{test_split}.tsv", args.test, rng)
        tasks[name] = (train, test)
    results: dict[str, dict] = {"clean": {}, "config": vars(args) | {"data": str(args.data), "out": str(args.out), "clip": clip}}
    for name, (train, test) in tasks.items():
        x_tr, x_te = clean_model.encode_clean(train[0], train[1]), clean_model.encode_clean(test[0], test[1])
        results["clean"][name] = score(x_tr, train[2], x_te, test[2])
        log(f"{name}: clean {results['clean'][name]}")

    rows = []
    for eta in etas:
        snd = TokenLevelRandomizer(encoder, "token-dchi", args.length, eta, clip=clip, post_clip=clip)
        tokemb = TokenLevelRandomizer(encoder, "token-dchi", args.length, eta, clip=clip)
        t2t = TokenLevelRandomizer(encoder, "text2text", args.length, eta)
        noise_rng = np.random.default_rng([args.seed, int(eta * 1000)])
        x, released = by_kind(lambda t, t2: snd.split_release(t, t2, noise_rng))
        e_n = snd.server_pass(released)
        hold = len(e_n) // 10
        shape = DenoiserShape(dim=encoder.dim, length=args.length)
        denoiser, losses = train_denoiser(
            shape, e_n[hold:], x[hold:], released[hold:], public_clean[hold:], epochs=args.epochs, seed=args.seed, progress=True
        )
        denoiser.save(args.out / f"denoiser-eta{eta:g}.safetensors")
        e_d = denoiser.denoise(e_n[:hold], x[:hold], released[:hold])
        held = {"mse_noisy": _mse(e_n[:hold], public_clean[:hold]), "mse_denoised": _mse(e_d, public_clean[:hold]),
                "cos_noisy": _cos(e_n[:hold], public_clean[:hold]), "cos_denoised": _cos(e_d, public_clean[:hold])}
        log(f"eta {eta:g}: denoiser losses {[round(v, 4) for v in losses]}; held-out public {held}")
        row = {"eta": eta, "epsilon": {"snd": snd.event.epsilon, "tokembpriv": tokemb.event.epsilon, "text2text": t2t.event.epsilon},
               "epsilon_per_token": {"snd": snd.event.epsilon_per_token, "text2text": t2t.event.epsilon_per_token},
               "public_heldout": held, "denoiser_losses": losses, "tasks": {}}
        for name, (train, test) in tasks.items():
            out: dict[str, dict] = {}
            parts = {}
            for split, (t, t2, _) in (("train", train), ("test", test)):
                xs, rel = snd.split_release(t, t2, noise_rng)
                en = snd.server_pass(rel)
                parts[split] = {
                    "snd": denoiser.denoise(en, xs, rel), "snd_no_denoiser": en,
                    "tokembpriv": tokemb.release_texts(t, t2, noise_rng), "text2text": t2t.release_texts(t, t2, noise_rng),
                }
            for method in parts["train"]:
                out[method] = score(parts["train"][method], train[2], parts["test"][method], test[2])
            row["tasks"][name] = out
            log(f"eta {eta:g} {name}: " + ", ".join(f"{m} auc {v['auc']:.3f}" for m, v in out.items()))
        rows.append(row)
        results["rows"] = rows
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "README.md").write_text(report(results, encoder.name))
    log(f"wrote {args.out / 'README.md'}")
    return 0


def _merge(a: np.ndarray, b: np.ndarray, first: list[int], second: list[int]) -> np.ndarray:
    out = np.empty((len(first) + len(second), *a.shape[1:]), dtype=a.dtype)
    out[first], out[second] = a, b
    return out


def _mse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean((a - b) ** 2))


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def report(results: dict, encoder: str) -> str:
    """The markdown table: AUC (accuracy) per task, method and eta, with the epsilon each eta implies."""
    config = results["config"]
    lines = [
        "# Split-N-Denoise against TokEmbPriv and Text2Text (seed 003, Table 5 protocol)",
        "",
        f"Encoder {encoder}; L = {config['length']} token positions; token clip C = {config['clip']}; "
        f"{config['train']} training and {config['test']} test records per task; denoiser trained on "
        f"{config['public']} public records ({', '.join(PUBLIC)}; half as random pairs), {config['epochs']} epochs, "
        f"10% held out. Command: `python -m ldpfed.simulations.experiments.snd_table --tasks {config['tasks']} --etas {config['etas']} "
        f"--train {config['train']} --test {config['test']} --public {config['public']} --epochs {config['epochs']} --out {config['out']}`.",
        "",
        "Worst-case epsilon of one release of one record (pure, eta x diameter per token, composed over the L tokens):",
        "",
        "| eta | SnD / TokEmbPriv per token | per record | Text2Text per token | per record |",
        "|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        e, t = row["epsilon"], row["epsilon_per_token"]
        lines.append(f"| {row['eta']:g} | {t['snd']:.4g} | {e['snd']:.4g} | {t['text2text']:.4g} | {e['text2text']:.4g} |")
    methods = ("snd", "snd_no_denoiser", "tokembpriv", "text2text")
    for name in results["clean"]:
        clean = results["clean"][name]
        lines += ["", f"## {name.upper()}: AUC (accuracy); clean pipeline {clean['auc']:.3f} ({clean['accuracy']:.3f})", "",
                  "| eta | SnD | SnD, no denoiser | TokEmbPriv | Text2Text |", "|---|---|---|---|---|"]
        for row in results["rows"]:
            cells = [f"{row['tasks'][name][m]['auc']:.3f} ({row['tasks'][name][m]['accuracy']:.3f})" for m in methods]
            lines.append(f"| {row['eta']:g} | " + " | ".join(cells) + " |")
    lines += ["", "Denoiser on held-out public records (mean squared error and cosine to the clean embedding):", "",
              "| eta | MSE e_n | MSE e_d | cos e_n | cos e_d |", "|---|---|---|---|---|"]
    for row in results["rows"]:
        h = row["public_heldout"]
        lines.append(f"| {row['eta']:g} | {h['mse_noisy']:.4g} | {h['mse_denoised']:.4g} | {h['cos_noisy']:.3f} | {h['cos_denoised']:.3f} |")
    lines += ["", "Seed 003 Table 5 (Bert Base, QQP, AUC): " + "; ".join(
        f"eta {eta}: TokEmbPriv {v[0]}, Text2Text {v[1]}, SnD {v[2]}" for eta, v in SEED_QQP_BERT_BASE.items()), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
