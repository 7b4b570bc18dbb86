"""What a server can do with the reports, against epsilon, for the main randomizers.

    python -m ldpfed.simulations.experiments.attack_study --out simulations/reports/attacks

The server is the attacker and holds public data only. For every mechanism (gaussian,
laplace, dchi, sue, oue, dpie-gaussian; texthide, which has no epsilon) and every epsilon of
one release (delta 1e-5), records are encoded as a run encodes them (MiniLM, or its
16-d PCA projection fitted on public data, the run default) and released once through the
randomizer calibrated to that epsilon, then attacked:

- attribute: which site a review was written for (Amazon, IMDb or Yelp; the three files of
  sentiment_labelled_sentences, a real source column that is not the task label), fed.attacks.attribute;
- inversion: the words of the sentence, learned from public SST-2 sentences (top-5 F1), fed.attacks.inversion;
- membership: was a record in the server classifier's training set (AUC), fed.attacks.membership;
- reconstruction: which records a mixed report holds (top-1), dpie-gaussian and texthide, fed.attacks.texthide;
- mutual information between clean and released vectors (kNN estimate, nats), additive mechanisms.

Bit encodings (sue, oue) are measured at 16 dims only: at 384 dims their reports have 3,840 bits
and the study would take hours on 2 cores. Chance is measured on the same records (the attack
without information). Seed 003's token inversion (nearest vocabulary token to each noisy token
vector) and the mutual information between clean and noisy token vectors (its figure 2) are
swept over eta separately, with the worst-case epsilon each eta implies.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

MECHANISMS = ("gaussian", "laplace", "dchi", "sue", "oue", "dpie-gaussian")
MIXING = ("dpie-gaussian", "texthide")
BITS, BIT_DIMS_MAX = ("sue", "oue"), 64
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, 1024.0)
SOURCES = ("amazon_cells_labelled", "imdb_labelled", "yelp_labelled")
ATTACKS = ("attribute", "inversion", "membership", "reconstruction", "mutual_information")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[3] / "shared" / "data")
    parser.add_argument(
        "--dims", default="16,384", help="representation dims: 384 is MiniLM itself, less a PCA projection ('': token sweep only)"
    )
    parser.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    parser.add_argument("--mechanisms", default=",".join(MECHANISMS))
    parser.add_argument("--token-etas", default="1,10,25,50,100,300,1000", help="etas of the token inversion sweep ('' to skip)")
    parser.add_argument("--token-sentences", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("runs/attacks"))
    return parser.parse_args(argv)


def randomizer_for(mechanism: str, epsilon: float, clip: float, dim: int):  # noqa: ANN201
    """The randomizer a run calibrates to ``epsilon`` for one release (delta 1e-5), with the run's options."""
    from ldpfed.fed.randomizers import RANDOMIZERS

    cls = RANDOMIZERS[mechanism]
    options = cls.run_options(clip, dim, {})
    if mechanism == "texthide":
        return cls.from_params({"mechanism": mechanism, **options})
    return cls.calibrated(epsilon, 1e-5, 1, options)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from ldpfed.fed.attacks.attribute import attribute_attack
    from ldpfed.fed.data.dataset import TextDataset
    from ldpfed.fed.encoders.cache import encode_cached
    from ldpfed.fed.encoders.factory import make_encoder
    from ldpfed.fed.encoders.projection import PCAProjection
    from ldpfed.fed.attacks.inversion import STOPWORDS, learned_inversion
    from ldpfed.fed.data.loaders import read_tsv
    from ldpfed.fed.attacks.membership import membership_game
    from ldpfed.fed.attacks.mutual_information import randomizer_mutual_information
    from ldpfed.fed.attacks.texthide import reconstruction_game

    args.out.mkdir(parents=True, exist_ok=True)
    cache = args.cache_dir or Path.home() / ".cache" / "ldpfed"
    rng = np.random.default_rng(args.seed)
    encoder = make_encoder("minilm")
    started = time.time()

    def log(message: str) -> None:
        print(f"[{time.time() - started:6.0f} s] {message}", flush=True)

    def encode(texts: list[str]) -> np.ndarray:
        return encode_cached(encoder, TextDataset("attack-study", tuple(texts), None, np.zeros(len(texts), np.int64), ("x",)), cache)

    # SST-2: public sentences (the attacker's) and attacked ones (members / the inverted)
    sst_texts, _, sst_labels = read_tsv(args.data / "sst2" / "train.tsv")
    order = rng.permutation(len(sst_texts))
    public_idx, attacked_idx = order[:3000], order[3000:4000]
    public_texts = [sst_texts[i] for i in public_idx]
    attacked_texts = [sst_texts[i] for i in attacked_idx]
    attacked_labels = np.asarray(sst_labels)[attacked_idx]
    # reviews with their site: half public, half attacked
    reviews, sites = [], []
    for site, name in enumerate(SOURCES):
        texts = read_tsv(args.data / "sentiment_labelled_sentences" / f"{name}.tsv")[0]
        reviews += texts
        sites += [site] * len(texts)
    sites_arr = np.asarray(sites)
    split = rng.permutation(len(reviews))
    rev_public, rev_attacked = split[: len(split) // 2], split[len(split) // 2 :]
    log("encoding (cached by content)")
    sst_public, sst_attacked, rev_x = encode(public_texts), encode(attacked_texts), encode(reviews)
    log("encoded")

    results: dict = {"config": {k: str(v) for k, v in vars(args).items()}, "rows": []}
    if (args.out / "results.json").is_file() and not args.dims:  # token sweep only: keep the sentence-level rows
        results["rows"] = json.loads((args.out / "results.json").read_text())["rows"]
    epsilons = [float(e) for e in args.epsilons.split(",")]
    mechanisms = args.mechanisms.split(",")
    for dim in (int(d) for d in args.dims.split(",") if d):
        if dim < encoder.dim:
            projection = PCAProjection.fit(sst_public, dim)
            views = [projection.apply(a) for a in (sst_public, sst_attacked, rev_x)]
        else:
            views = [sst_public, sst_attacked, rev_x]
        pub, att, rev = (np.asarray(v, np.float64) for v in views)
        clip = float(np.quantile(np.linalg.norm(pub, axis=1), 0.95))
        log(f"dim {dim}: clip {clip:.3f} (95th percentile of public norms)")
        # bit encodings (sue, oue) of 384 dims are 3,840-bit reports: left out at that size for run time
        cells = [(m, e) for m in mechanisms for e in epsilons if dim <= BIT_DIMS_MAX or m not in BITS] + [("texthide", math.inf)]
        for mechanism, epsilon in cells:
            randomizer = randomizer_for(mechanism, epsilon, clip, dim)
            row: dict = {"dim": dim, "mechanism": mechanism, "epsilon": epsilon, "params": _plain(randomizer.params())}
            seed = [args.seed, dim, MECHANISMS.index(mechanism) if mechanism in MECHANISMS else 99, int(min(epsilon, 1e6) * 100)]
            r = np.random.default_rng(seed)
            mixing = mechanism in MIXING
            if not mixing:
                reports = randomizer.release(rev[rev_attacked], r)
                a = attribute_attack(reports, sites_arr[rev_attacked], rev[rev_public], sites_arr[rev_public], randomizer, 3, r)
                row["attribute"] = {"success": a.success, "chance": a.chance}
                inv = learned_inversion(
                    randomizer.release(att, r), attacked_texts, pub, public_texts, randomizer, r, stopwords=STOPWORDS
                )
                row["inversion"] = {"success": inv.success, "chance": inv.chance, "hit_rate": inv.hit_rate,
                                    "chance_hit_rate": inv.chance_hit_rate}
            m = membership_game(att, attacked_labels, 2, randomizer, 40, r, trials=10)
            row["membership"] = {"success": m.success, "chance": m.chance, "accuracy": m.accuracy}
            if mixing:
                groups = att[: 16 * 32].reshape(16, 32, -1)
                rec = reconstruction_game(groups, att[16 * 32 :], pub, randomizer, r)
                row["reconstruction"] = {"success": rec.success, "chance": rec.chance, "recall": rec.recall}
            if randomizer.additive:
                row["mutual_information"] = {"success": randomizer_mutual_information(att, randomizer, r), "chance": 0.0}
            results["rows"].append(row)
            log(f"dim {dim} {mechanism} eps {epsilon:g}: " + ", ".join(
                f"{k} {row[k]['success']:.3f}/{row[k]['chance']:.3f}" for k in ATTACKS if k in row))
            (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    if args.token_etas:
        texts = [sst_texts[i] for i in order[4000 : 4000 + args.token_sentences]]
        results["token_inversion"] = token_sweep(encoder, texts, [float(e) for e in args.token_etas.split(",")], args.seed)
        log("token inversion: " + ", ".join(f"eta {p['eta']:g} {p['success']:.3f}, MI {p['mutual_information']:.3f}"
                                            for p in results["token_inversion"]))
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, args.out / "attacks.png")
    (args.out / "README.md").write_text(report(results))
    log(f"wrote {args.out / 'README.md'} and attacks.png")
    return 0


TOKEN_CLIP, TOKEN_LENGTH = 12.3, 32
"""MiniLM's token vectors: the largest norm of its embedding layer's outputs (12.21), and L."""


def token_sweep(encoder, texts: list[str], etas: list[float], seed: int) -> list[dict]:  # noqa: ANN001
    """Seed 003's figure 2: token inversion success and I(X; X~) per token vector, for each eta."""
    from ldpfed.fed.randomizers.token_level import TokenLevelRandomizer
    from ldpfed.fed.attacks.inversion import token_inversion_sweep
    from ldpfed.fed.attacks.mutual_information import knn_mutual_information

    sweep = token_inversion_sweep(encoder, texts, etas, TOKEN_CLIP, TOKEN_LENGTH, np.random.default_rng([seed, 3]))
    out = []
    for point in sweep:
        randomizer = TokenLevelRandomizer(encoder, "token-dchi", TOKEN_LENGTH, point.eta, clip=TOKEN_CLIP)
        clean, noisy = randomizer.split_release(texts, None, np.random.default_rng([seed, 4]))
        clean, noisy = clean.reshape(-1, clean.shape[-1]), noisy.reshape(-1, noisy.shape[-1])
        keep = np.unique(clean, axis=0, return_index=True)[1]  # padding repeats one vector: distinct tokens only
        mi = knn_mutual_information(noisy[keep].astype(np.float64), (noisy - clean)[keep].astype(np.float64))
        out.append({"eta": point.eta, "epsilon_per_token": point.epsilon_per_token, "epsilon": point.epsilon,
                    "success": point.outcome.success, "chance": point.outcome.chance, "mutual_information": mi})
    return out


def _plain(params: dict) -> dict:
    return {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in params.items()}


def plot(results: dict, path: Path) -> None:
    """Success against epsilon, one panel per attack and dimension, a line per mechanism, chance dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["rows"]
    dims = sorted({r["dim"] for r in rows})
    attacks = [a for a in ATTACKS if any(a in r for r in rows)]
    fig, axes = plt.subplots(len(dims), len(attacks), figsize=(4 * len(attacks), 3.3 * len(dims)), squeeze=False)
    finite = sorted({r["epsilon"] for r in rows if math.isfinite(r["epsilon"])})
    right = finite[-1] * 4 if finite else 1.0
    mechanisms = list(dict.fromkeys(r["mechanism"] for r in rows))
    color = {m: f"C{k}" for k, m in enumerate(mechanisms)}  # one color per mechanism in every panel
    for i, dim in enumerate(dims):
        for j, attack in enumerate(attacks):
            ax = axes[i][j]
            for mechanism in mechanisms:
                pts = [(r["epsilon"], r[attack]) for r in rows if r["dim"] == dim and r["mechanism"] == mechanism and attack in r]
                if not pts:
                    continue
                xs = [right if not math.isfinite(e) else e for e, _ in pts]
                style = dict(marker="*", markersize=12, linestyle="none") if mechanism == "texthide" else dict(marker="o")
                ax.plot(xs, [v["success"] for _, v in pts], color=color[mechanism], **style)
                ax.plot(xs, [v["chance"] for _, v in pts], linestyle=":", color="grey")
            ax.set_xscale("log")
            ax.set_title(f"{attack.replace('_', ' ')} (dim {dim})", fontsize=10)
            ax.set_xlabel("epsilon of one release (delta 1e-5)")
            if j == 0:
                ax.set_ylabel("success (dotted: chance)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=color[m], marker="*" if m == "texthide" else "o", linestyle="none" if m == "texthide" else "-")
               for m in mechanisms]
    labels = [m + (" (no epsilon, drawn at the right)" if m == "texthide" else "") for m in mechanisms]
    fig.legend(handles, labels, loc="lower center", ncol=len(mechanisms), fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(results: dict) -> str:
    """Markdown tables: success / chance per mechanism, epsilon and attack."""
    lines = ["# Attacks against the reports, by epsilon", "", __doc__.split("\n\n", 2)[2].strip(), "",
             "Command: `python -m ldpfed.simulations.experiments.attack_study --out simulations/reports/attacks`. "
             "Cells are success / chance; attribute and reconstruction: share named right; inversion: top-5 word F1; "
             "membership: AUC (40 members, 40 non-members per trial, 10 trials); mutual information: nats "
             "(kNN, biased low in high dimension: compare within a column, not to the closed form).", "",
             "![attacks](attacks.png)", ""]
    for dim in sorted({r["dim"] for r in results["rows"]}):
        lines += [f"## Representation dim {dim}", "", "| mechanism | epsilon | " + " | ".join(ATTACKS) + " |",
                  "|---|---|" + "---|" * len(ATTACKS)]
        for r in (r for r in results["rows"] if r["dim"] == dim):
            cells = [f"{r[a]['success']:.3f} / {r[a]['chance']:.3f}" if a in r else "-" for a in ATTACKS]
            eps = "none (inf)" if not math.isfinite(r["epsilon"]) else f"{r['epsilon']:g}"
            lines.append(f"| {r['mechanism']} | {eps} | " + " | ".join(cells) + " |")
        lines.append("")
    if "token_inversion" in results:
        lines += [f"## Token inversion (seed 003 eq. 14 and figure 2), MiniLM token vectors, clip {TOKEN_CLIP}, L = {TOKEN_LENGTH}", "",
                  "Tokens recovered: share of real (non-special) token positions whose token the nearest vocabulary "
                  "vector names; chance: the most common token's share. Mutual information between clean and noisy "
                  "token vectors (distinct tokens, kNN, nats).", "",
                  "| eta | epsilon per token | epsilon per record | tokens recovered | chance | mutual information |",
                  "|---|---|---|---|---|---|"]
        for p in results["token_inversion"]:
            lines.append(f"| {p['eta']:g} | {p['epsilon_per_token']:.4g} | {p['epsilon']:.4g} | {p['success']:.3f} | "
                         f"{p['chance']:.3f} | {p['mutual_information']:.3f} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
