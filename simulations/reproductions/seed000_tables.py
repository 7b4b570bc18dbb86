"""Seed 000, Tables 4 and 5 on SST-2 (or QQP, ``--dataset qqp``): DP layer on token versus latent representations, and the
latent dimension, under the paper's accounting (GDP + CLT, amplified, sensitivity C) and
ldpfed's strict one (worst case, sensitivity 2C, no amplification).

The paper's setting (its Sections 4 and 6, Appendix A.3-A.4): a BiLSTM encoder with a
128-dimensional latent representation on the user's side, L2 clip C = 0.5, Gaussian noise
(Algorithm 1); training records are Poisson-sampled at rate p_train in each of T steps
(Algorithm 2) and the noise is calibrated by eq. 8 (GDP central limit theorem, mu = C /
sigma: sensitivity C) at delta = 1 / (training records); the server trains the rest of the
model on the noisy batches. Table 4 puts the same DP layer on the token representation
instead; Table 5 uses latent dimensions 128, 256 and 768.

Here (every cell one seed: the pre-training split is fixed, the sampling, noise and head
initialisation are seeded):

- encoder: ldpfed's BiLSTM (``fed.encoders.bilstm``), pre-trained with a linear head on the
  server's own labelled data (stage 1): a seeded 10% slice of SST-2 train, disjoint from the
  users' records (the other 90%); frozen afterwards. Dimensions 128 / 256 / 768.
- schedule: Poisson sampling at p (default 0.01) for T steps (default 1,000), the same in
  every row (the paper does not give p_train or T).
- ``paper``: sigma = z * C with z from eq. 8 at the table's epsilon (ldpfed's
  ``calibrate_noise_multiplier("clt", ...)``). Beside it, what that sigma costs under
  ldpfed's accountants: the PLD upper bound of the same amplified schedule at sensitivity
  2C, and the worst-case ledger (the most releases any record actually had, 2C).
- ``strict``: the same schedule, sigma calibrated on the worst-case ledger: sensitivity 2C,
  k releases with k the (1 - delta)-quantile of Binomial(T, p); a record at k releases is
  not released again.
- ``strict-once``: ldpfed's default schedule under the strict ledger: each record released
  exactly once (k = 1).
- token rows: the BiLSTM's word embeddings (L = 32 positions, padded or cut; padding is noised
  too, so the length stays hidden) clipped per token to C_tok (the median token norm on the
  server's data) and noised; sensitivity C_tok sqrt(L) in the paper row (its analogue of C),
  2 C_tok sqrt(L) in the strict rows. The server trains on the noisy reports and is told their
  noise (``_seed000_tokens``): NoiseAwareLDA on the position-averaged reports, and the paper's
  own server (BiLSTM and head trained by Adam on the noisy token batches); beside them each
  server trained on its own clean data alone.
- latent classifiers, both trained on the same reports: a linear softmax head trained by Adam with
  one step per sampled batch (the paper's server-side training), and ldpfed's NoiseAwareLDA
  (shrunk towards the server's own data). Test: SST-2 dev (872), clean inputs clipped alike.
- ``--ceiling``: the encoder's non-private ceiling by pre-training data and epochs (``_seed000_ceiling``).
- QQP (``--dataset qqp``, report in the ``qqp`` subfolder): the 8,999-pair subset of GLUE QQP train
  in ../shared/data (the official train is not there), split 10% / 90% alike; each pair is one
  record, encoded by the BiLSTM as ``a <sep> b`` (one report per pair, as the paper protects each
  pair); test: the 1,000-pair held-out subset (also from GLUE train, not GLUE dev).
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.simulations.reproductions import REPORTS
from ldpfed.simulations.reproductions._cells import Results, Setting, common_arguments, reproduce
from ldpfed.simulations.reproductions._seed000_tokens import SERVERS, SKIPPED

DESCRIPTION = "Seed 000 Tables 4-5: SST-2 (or QQP), DP layer on token vs latent (BiLSTM), dims 128/256/768, CLT vs strict accounting"
NAME = "seed000_tables"

PAPER: dict[str, dict[str, Any]] = {
    "sst2": {
        "name": "SST-2", "dev": "SST-2 dev (872)",
        "table4": {1.0: (68.23, 76.72), 2.3: (71.33, 78.44), 3.5: (73.32, 78.90), 12.0: (73.51, 80.70), 25.0: (74.20, 81.30)},
        "null": 83.91,
        "table5": {1.0: (76.72, 75.45, 72.94), 2.3: (78.44, 77.29, 73.97), 3.5: (78.90, 77.89, 76.03)},
    },
    "qqp": {
        "name": "QQP", "dev": "the QQP held-out subset (1,000 pairs of GLUE train)",
        "table4": {1.5: (71.53, 75.83), 2.3: (72.85, 78.72), 4.0: (74.25, 79.67), 13.0: (74.51, 79.82), 45.0: (75.51, 80.47)},
        "null": 83.11,
        "table5": {1.5: (75.83, 75.68, 54.58), 2.3: (78.72, 78.18, 71.86), 4.0: (79.67, 79.03, 74.27)},
    },
}
"""The paper's figures per dataset: Table 4 (training epsilon -> (token rep., latent rep.) accuracy %),
null privacy, Table 5 (training epsilon -> accuracy % at latent dimensions 128, 256, 768)."""
DIMS = (128, 256, 768)
CLIP = 0.5
LENGTH = 32
OWN_SHARE = 0.1
ACCOUNTINGS = ("paper", "strict", "strict-once")
CEILING_FILE = "ceiling.json"
PLD_INTERVAL = 1e-3
"""Discretization of the PLD bound beside the paper row (coarser is faster and still an upper bound)."""


def main(argv: list[str] | None = None) -> int:
    """Run the missing cells and write README.md."""
    parser = argparse.ArgumentParser(prog=f"ldpfed reproduce {NAME}", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common_arguments(parser, REPORTS / NAME, seeds=3)
    parser.add_argument("--dataset", choices=sorted(PAPER), default="sst2",
                        help="sst2 (default) or qqp (report in the qqp subfolder of the default --out)")
    parser.add_argument("--p", type=float, default=0.01, help="Poisson sampling rate per step (default 0.01)")
    parser.add_argument("--steps", type=int, default=1000, help="training steps T (default 1000)")
    parser.add_argument("--latent-records", type=int, default=0, help="users' records in the latent rows (0: all)")
    parser.add_argument("--token-records", type=int, default=4000, help="users' records in the token rows (0: all)")
    parser.add_argument("--tables", nargs="+", default=["4", "5"], choices=["4", "5"])
    parser.add_argument("--pretrain-epochs", type=int, default=4)
    parser.add_argument("--dims", type=int, nargs="+", choices=DIMS, default=list(DIMS), help="Table 5's dimensions")
    parser.add_argument("--accountings", nargs="+", choices=ACCOUNTINGS, default=list(ACCOUNTINGS),
                        help="rows to run (default all three)")
    parser.add_argument("--token-servers", nargs="+", choices=SERVERS, default=list(SERVERS),
                        help="servers of the token rows (default all; see _seed000_tokens.SKIPPED for the rows each skips)")
    parser.add_argument("--ceiling", action="store_true",
                        help="measure the encoder's non-private ceiling by pre-training data and epochs (ceiling.json), "
                             "then write the report")
    args = parser.parse_args(argv)
    if args.dataset != "sst2" and args.out == REPORTS / NAME:
        args.out = args.out / args.dataset
    setup = {
        "data": args.dataset, "own_share": OWN_SHARE, "clip": CLIP, "length": LENGTH, "p": args.p, "steps": args.steps,
        "pretrain_epochs": args.pretrain_epochs, "encoder": "bilstm (fed.encoders.bilstm), embed 64",
    }
    results = Results(args.out, setup, fresh=args.fresh)
    context = Context(args.data, args.p, args.steps, args.pretrain_epochs, args.dataset)
    if args.ceiling:
        from ldpfed.simulations.reproductions._seed000_ceiling import measure

        measure(context, args.out / CEILING_FILE)
        args.report_only = True
    cells = [(s, seed) for s in settings(args, context) for seed in range(args.seeds)]
    from ldpfed.simulations.reproductions._seed000_tables_report import report

    return reproduce(args, results, cells, context.compute, NAME, lambda: report(results, args, context))


def token_setting(server: str, n: int, accounting: str, epsilon: float) -> Setting:
    """A token row's setting: the latent rows' fields and the server that trains on the reports."""
    return {"position": "token", "server": server, "dim": 128, "n": n, "accounting": accounting, "epsilon": epsilon}


def settings(args: argparse.Namespace, context: "Context") -> list[Setting]:
    """Every row's setting, Table 4 first."""
    latent_n = context.users_size(args.latent_records)
    token_n = context.users_size(args.token_records)
    out: list[Setting] = []
    if "4" in args.tables:
        out.append({"position": "latent", "dim": 128, "n": latent_n, "accounting": "clean", "epsilon": 0.0})
        out += [{"position": "latent", "dim": 128, "n": latent_n, "accounting": a, "epsilon": e}
                for e in PAPER[context.dataset]["table4"] for a in args.accountings]
        for server in args.token_servers:
            out += [token_setting(server, token_n, a, 0.0) for a in ("own-only", "clean") if a not in SKIPPED.get(server, ())]
            out += [token_setting(server, token_n, a, e) for e in PAPER[context.dataset]["table4"]
                    for a in args.accountings if a not in SKIPPED.get(server, ())]
    if "5" in args.tables:
        for dim in args.dims:
            out.append({"position": "latent", "dim": dim, "n": latent_n, "accounting": "clean", "epsilon": 0.0})
            out += [{"position": "latent", "dim": dim, "n": latent_n, "accounting": a, "epsilon": e}
                    for e in PAPER[context.dataset]["table5"] for a in args.accountings if a != "strict-once"]
    unique: list[Setting] = []
    for s in out:
        if s not in unique:
            unique.append(s)
    return unique


class Context:
    """Data, pre-trained encoders and encodings, loaded once per process."""

    def __init__(self, data: Path, p: float, steps: int, pretrain_epochs: int, dataset: str = "sst2") -> None:
        self.data, self.p, self.steps, self.pretrain_epochs = Path(data), p, steps, pretrain_epochs
        self.dataset = dataset

    @cache
    def splits(self) -> tuple[Any, Any, Any]:
        """(server's own 10% slice, users' 90%, dev) of the dataset."""
        from ldpfed.fed.data.loaders import load_dataset

        train = load_dataset(str(self.data / self.dataset), "train")
        order = np.random.default_rng(0).permutation(len(train))
        own = int(round(OWN_SHARE * len(train)))
        return train.subset(np.sort(order[:own])), train.subset(np.sort(order[own:])), load_dataset(str(self.data / self.dataset), "dev")

    def users_size(self, limit: int) -> int:
        """Users' records in a row: all, or ``limit``."""
        total = len(self.splits()[1])
        return total if limit <= 0 else min(limit, total)

    @cache
    def encoder(self, dim: int) -> Any:
        """The BiLSTM pre-trained on the server's own slice (saved under the cache folder)."""
        from ldpfed.fed.runtime.assets import default_cache_dir
        from ldpfed.fed.configuration.run_spec import RunSpec
        from ldpfed.fed.encoders.bilstm import BiLSTMEncoder, train_bilstm

        own = self.splits()[0]
        tag = hashlib.sha256("\n".join(own.texts).encode()).hexdigest()[:12]
        folder = default_cache_dir(RunSpec()) / "reproductions" / NAME / f"bilstm-{dim}-{self.pretrain_epochs}-{tag}"
        if (folder / "weights.pt").is_file():
            return BiLSTMEncoder.load(folder)
        encoder = train_bilstm(own, dim=dim, epochs=self.pretrain_epochs, seed=0, progress=True)
        encoder.save(folder)
        return BiLSTMEncoder.load(folder)

    @cache
    def users(self, n: int) -> tuple[Any, np.ndarray]:
        """The first ``n`` users' records of a seeded order, and their labels."""
        users = self.splits()[1]
        keep = np.sort(np.random.default_rng(1).permutation(len(users))[:n])
        subset = users.subset(keep)
        return subset, subset.labels

    @cache
    def latent(self, dim: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Clean latent rows of (users' records, dev, server's own slice)."""
        from ldpfed.fed.runtime.assets import default_cache_dir
        from ldpfed.fed.configuration.run_spec import RunSpec
        from ldpfed.fed.encoders.cache import encode_cached

        encoder, cache_dir = self.encoder(dim), default_cache_dir(RunSpec())
        own, _, dev = self.splits()
        users, _ = self.users(n)
        return tuple(encode_cached(encoder, d, cache_dir, batch_size=256).astype(np.float64) for d in (users, dev, own))

    def ids(self, ds: Any) -> np.ndarray:
        """Token ids (rows, L) of a dataset: cut to L, padded with 0."""
        matrix, _ = self.encoder(128).vocab.batch(ds.texts, ds.texts2, LENGTH)
        out = np.zeros((len(ds), LENGTH), dtype=np.int64)
        out[:, : matrix.shape[1]] = matrix
        return out

    @cache
    def fixed_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of dev and of the server's own slice."""
        own, _, dev = self.splits()
        return self.ids(dev), self.ids(own)

    @cache
    def token_clip(self) -> float:
        """C_tok: the median norm of the server's own (non-padding) token embeddings."""
        import torch

        ids = self.fixed_ids()[1]
        with torch.inference_mode():
            norms = self.encoder(128).net.embedding(torch.from_numpy(ids)).norm(dim=-1).numpy()
        return float(np.median(norms[ids > 0]))

    @cache
    def token_means(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Clean position-averaged clipped token embeddings of (users' records, dev, server's own slice)."""
        from ldpfed.simulations.reproductions._seed000_tokens import mean_rows

        embedding, clip = self.encoder(128).net.embedding, self.token_clip()
        ids_dev, ids_own = self.fixed_ids()
        return tuple(mean_rows(embedding, ids, clip) for ids in (self.ids(self.users(n)[0]), ids_dev, ids_own))

    def noise(self, accounting: str, epsilon: float, delta: float, unit: float) -> tuple[float, int | None]:
        """(sigma, the ledger's cap on one record's releases or None) of a row at sensitivity unit ``unit`` (C)."""
        from ldpfed.fed.privacy.accountants.calibration import calibrate_noise_multiplier

        if accounting == "paper":
            return calibrate_noise_multiplier("clt", epsilon, delta, self.steps, self.p).noise_multiplier * unit, None
        if accounting == "strict":
            cal = calibrate_noise_multiplier("worst-case", epsilon, delta, self.steps, self.p)
            return cal.noise_multiplier * 2 * unit, cal.releases
        if accounting == "strict-once":
            cal = calibrate_noise_multiplier("worst-case", epsilon, delta, 1, 1.0, releases=1)
            return cal.noise_multiplier * 2 * unit, 1
        return 0.0, None  # clean, own-only

    def batches(self, n: int, cap: int | None, counts: np.ndarray, rng: np.random.Generator) -> Iterator[np.ndarray]:
        """The T Poisson-sampled batches (record indices); the ledger refuses a record past its ``cap`` releases."""
        for _ in range(self.steps):
            chosen = np.flatnonzero(rng.random(n) < self.p)
            if cap is not None:
                chosen = chosen[counts[chosen] < cap]
            if len(chosen):
                counts[chosen] += 1
                yield chosen

    # -- one cell ----------------------------------------------------------------------------
    def compute(self, setting: Setting, seed: int) -> dict[str, Any]:
        """Run one row for one seed: sample, release, train the server's classifiers, test on dev."""
        from ldpfed.fed.privacy.accountants import amplified, worst_case
        from ldpfed.fed.privacy.accountants.base import Schedule

        position, dim, n = setting["position"], setting["dim"], setting["n"]
        accounting, epsilon = setting["accounting"], setting["epsilon"]
        delta = 1.0 / n
        unit = CLIP if position == "latent" else self.token_clip() * np.sqrt(LENGTH)
        sigma, cap = self.noise(accounting, epsilon, delta, unit)
        out: dict[str, Any] = {"delta": delta, "sigma": float(sigma), "sensitivity_unit": float(unit)}
        key = [0, seed, int(epsilon * 1000), dim, n, ("clean", *ACCOUNTINGS, "own-only").index(accounting)]
        if position == "token":
            key.append(1 + SERVERS.index(setting["server"]))
        rng = np.random.default_rng(key)
        counts = np.zeros(n, dtype=np.int64)
        cell = self.latent_cell if position == "latent" else self.token_cell
        out.update(cell(setting, seed, sigma, cap, counts, rng))
        if sigma > 0:
            k = int(counts.max())
            z2 = sigma / (2 * unit)
            out["releases_max"] = k
            out["epsilon_worst_case"] = worst_case.epsilon_for_releases(z2, k, delta) if k else 0.0
            if accounting == "paper":
                out["epsilon_clt"] = epsilon
                out["epsilon_pld_2c"] = amplified.pld_epsilon(Schedule(z2, self.p, self.steps, delta), PLD_INTERVAL)
        return out

    def latent_cell(self, setting: Setting, seed: int, sigma: float, cap: int | None, counts: np.ndarray,
                    rng: np.random.Generator) -> dict[str, float]:
        """A latent row: Gaussian reports of the clipped latent rows, the head and the LDA trained on them."""
        from ldpfed.fed.randomizers.gaussian import GaussianRandomizer, clip_l2

        dim, n, accounting = setting["dim"], setting["n"], setting["accounting"]
        _, y = self.users(n)
        x, x_dev, x_own = self.latent(dim, n)
        model = Learners(dim, x_own, self.splits()[0].labels, CLIP, seed)
        batch_size = max(1, int(round(self.p * n)))
        if accounting == "clean":
            model.add_all(clip_l2(x, CLIP), y, 0.0, self.steps, batch_size, rng)
        elif accounting == "strict-once":
            rows = GaussianRandomizer(CLIP, sigma).release(x, rng)
            counts += 1
            model.add_all(rows, y, sigma, self.steps, batch_size, rng)
        else:
            for chosen in self.batches(n, cap, counts, rng):
                model.add_batch(GaussianRandomizer(CLIP, sigma).release(x[chosen], rng), y[chosen], sigma)
        return model.accuracies(x_dev, self.splits()[2].labels)

    def token_cell(self, setting: Setting, seed: int, sigma: float, cap: int | None, counts: np.ndarray,
                   rng: np.random.Generator) -> dict[str, float]:
        """A token row: the server trains on the noisy token reports, told their noise (``_seed000_tokens``)."""
        from ldpfed.simulations.reproductions._seed000_tokens import (
            BILSTM_BATCH, BiLSTMServer, clipped_embeddings, noisy_mean_rows, noisy_tokens,
        )

        n, accounting = setting["n"], setting["accounting"]
        own, _, dev = self.splits()
        _, y = self.users(n)
        net, clip = self.encoder(128).net, self.token_clip()
        if setting["server"] == "bilstm":
            ids_dev, ids_own = self.fixed_ids()
            server = BiLSTMServer(net, clip, seed)
            if accounting == "own-only":
                for _ in range(self.steps):
                    pick = rng.choice(len(own), min(BILSTM_BATCH, len(own)), replace=False)
                    server.add_batch(clipped_embeddings(net.embedding, ids_own[pick], clip), own.labels[pick])
            else:
                ids = self.ids(self.users(n)[0])
                for chosen in self.batches(n, cap, counts, rng):
                    used = chosen if len(chosen) <= BILSTM_BATCH else rng.choice(chosen, BILSTM_BATCH, replace=False)
                    server.add_batch(noisy_tokens(net.embedding, ids[used], clip, sigma, rng), y[used])
            return {"accuracy_bilstm": server.accuracy(ids_dev, dev.labels)}
        x, x_dev, x_own = self.token_means(n)
        told = sigma / np.sqrt(LENGTH)  # the noise of an average of L noised positions
        model = Learners(x.shape[1], x_own, own.labels, None, seed)
        if setting["server"] == "mean-lda-own":
            model.lda.add_public(x_own, own.labels, np.zeros((2, x.shape[1])))
        batch_size = max(1, int(round(self.p * n)))
        if accounting == "own-only":
            model.add_all(x_own, own.labels, 0.0, self.steps, batch_size, rng)
        elif accounting in ("clean", "strict-once"):
            rows = x if accounting == "clean" else noisy_mean_rows(x, sigma, LENGTH, rng)
            counts += accounting == "strict-once"
            model.add_all(rows, y, told, self.steps, batch_size, rng)
        else:
            for chosen in self.batches(n, cap, counts, rng):
                model.add_batch(noisy_mean_rows(x[chosen], sigma, LENGTH, rng), y[chosen], told)
        return model.accuracies(x_dev, dev.labels)


class Learners:
    """The two server classifiers fed the same reports: an Adam-trained softmax head and NoiseAwareLDA."""

    def __init__(self, dim: int, x_own: np.ndarray, y_own: np.ndarray, clip: float | None, seed: int) -> None:
        import torch

        from ldpfed.fed.learning.classifier import NoiseAwareLDA, class_means, within_class_covariance
        from ldpfed.fed.randomizers.gaussian import clip_l2

        self.clip = clip
        own = clip_l2(x_own, clip) if clip else x_own
        self.lda = NoiseAwareLDA(dim, 2, -1.0, within_class_covariance(own, y_own, 2), class_means(own, y_own, 2), "auto")
        torch.manual_seed(seed)
        self.head = torch.nn.Linear(dim, 2).double()
        self.optimizer = torch.optim.Adam(self.head.parameters(), lr=0.01)

    def add_batch(self, rows: np.ndarray, labels: np.ndarray, noise_std: float) -> None:
        """One training step on a sampled batch (one Adam step; the LDA adds the batch)."""
        import torch

        self.lda.update(rows, labels, noise_std)  # batches of one noise scale add into one group's sums
        loss = torch.nn.functional.cross_entropy(self.head(torch.from_numpy(rows)), torch.from_numpy(labels))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

    def add_all(self, rows: np.ndarray, labels: np.ndarray, noise_std: float, steps: int, batch: int,
                rng: np.random.Generator) -> None:
        """Reports released once: the LDA takes them all, the head ``steps`` minibatches drawn from them."""
        import torch

        self.lda.update(rows, labels, noise_std)
        xt, yt = torch.from_numpy(rows), torch.from_numpy(labels)
        for _ in range(steps):
            pick = torch.from_numpy(rng.choice(len(rows), size=min(batch, len(rows)), replace=False))
            loss = torch.nn.functional.cross_entropy(self.head(xt[pick]), yt[pick])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

    def accuracies(self, x_test: np.ndarray, y_test: np.ndarray) -> dict[str, float]:
        """Accuracy of both classifiers on clean (clipped) test rows."""
        import torch

        from ldpfed.fed.randomizers.gaussian import clip_l2

        x = clip_l2(x_test, self.clip) if self.clip else x_test
        with torch.inference_mode():
            head = self.head(torch.from_numpy(x)).argmax(dim=1).numpy()
        return {
            "accuracy_head": float((head == y_test).mean()),
            "accuracy_lda": float((self.lda.fit().predict(x) == y_test).mean()),
        }


if __name__ == "__main__":
    raise SystemExit(main())
