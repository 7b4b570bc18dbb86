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
from ldpfed.simulations.reproductions._cells import (
    Results, Setting, common_arguments, fmt_number, fmt_spread, reproduce, table,
)
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


@cache
def _pld_at_paper_sensitivity(epsilon: float, delta: float, p: float, steps: int) -> float:
    """PLD upper bound of eq. 8's noise multiplier at the paper's sensitivity C (the same z for token and latent rows)."""
    from ldpfed.fed.privacy.accountants import amplified
    from ldpfed.fed.privacy.accountants.base import Schedule
    from ldpfed.fed.privacy.accountants.calibration import calibrate_noise_multiplier

    z = calibrate_noise_multiplier("clt", epsilon, delta, steps, p).noise_multiplier
    return amplified.pld_epsilon(Schedule(z, p, steps, delta), PLD_INTERVAL)


def clt_note(table4: dict[float, Any], pld_c: Any) -> str:
    """The differences list's line on the CLT figure against the PLD bound at sensitivity C, from the figures."""
    pairs = [(eps, pld_c(eps)) for eps in table4]
    pairs = [(eps, bound) for eps, bound in pairs if bound is not None]
    if not pairs:
        return "- The paper's CLT figure is an estimate, not a bound; both PLD columns assume unlinkable reports."
    under = [(eps, 1 - eps / bound) for eps, bound in pairs if eps < bound]
    over = [(eps, eps / bound - 1) for eps, bound in pairs if eps >= bound]
    figures = " / ".join(fmt_number(b) for _, b in pairs)
    epsilons = " / ".join(f"{eps:g}" for eps, _ in pairs)
    parts = []
    if under:
        parts.append(f"below the bound at epsilon {', '.join(f'{e:g}' for e, _ in under)} "
                     f"(under-states it by at most {max(g for _, g in under):.0%})")
    if over:
        parts.append(f"at or above it at {', '.join(f'{e:g}' for e, _ in over)} "
                     f"(over-states it by up to {max(g for _, g in over):.0%})")
    return (
        "- The paper's CLT figure is an estimate, not a bound. At the paper's own sensitivity C the PLD upper bound "
        f"for the same noise and schedule ('PLD C') is {figures} for its epsilon {epsilons}: the CLT figure is "
        f"{' and '.join(parts)}. The larger 'PLD 2C' figures come from ldpfed's sensitivity 2C (local DP: any two "
        "inputs, the diameter of the clip ball), not from the CLT. Both PLD columns assume unlinkable reports."
    )


def token_table(results: Results, args: argparse.Namespace, context: Context, n: int, full: int, cell: Any,
                first: Any) -> list[str]:
    """Table 4's token rows: each server trained on the noisy reports, beside its own-data-only baseline."""
    from ldpfed.simulations.reproductions._seed000_tokens import BILSTM_BATCH

    paper_figures, name = PAPER[context.dataset], PAPER[context.dataset]["name"]
    once = "strict-once" in args.accountings
    units = [c["sensitivity_unit"] / np.sqrt(LENGTH) for c in results.cells.values()
             if c["setting"]["position"] == "token" and "sensitivity_unit" in c]
    clip = fmt_number(units[0]) if units else "-"
    note = "" if n == full else f" REDUCED: {n:,} of the {full:,} users' records."
    lines = [
        f"## Table 4 ({name}), token rows: the server trains on the noisy reports{note}", "",
        f"Each user's report is its sentence's {LENGTH} token embeddings (the server's pre-trained BiLSTM's word "
        f"embeddings, size 64; padding noised too), each clipped to C_tok = {clip} (the median token norm on the "
        f"server's data) plus N(0, sigma^2) on every coordinate; sensitivity C_tok sqrt({LENGTH}) in the paper row "
        f"and 2 C_tok sqrt({LENGTH}) in the strict rows (the same noise multipliers and privacy costs as the latent "
        "row of the same epsilon). Servers, each told sigma:",
        "",
        f"- mean-LDA: the server averages each report's {LENGTH} positions (noise sigma / sqrt({LENGTH}) per "
        "coordinate) and fits NoiseAwareLDA told that noise, shrunk towards its own data; beside it a softmax head "
        "trained one Adam step per sampled batch on the same averages (head / LDA).",
        "- mean-LDA + own: the same LDA with the server's own clean averages added as one more group "
        "(inverse-variance weighting), so the reports can only add to its own data (LDA only).",
        "- BiLSTM: the paper's server: the layers after the DP layer (the BiLSTM, started from the server's "
        "pre-trained one, mean-pooled over all positions, and a linear head) trained by Adam, one step per sampled "
        f"batch. REDUCED: each step trains on {BILSTM_BATCH} of the batch's reports (about "
        f"{args.p * n:,.0f} are sampled; the rest go unused), for CPU time; no strict-once row.",
        "- own data only: each server trained on its own clean 10% slice alone, no reports (for the BiLSTM: "
        f"{args.steps} Adam steps of {BILSTM_BATCH} sentences from the pre-trained BiLSTM). A row above it is "
        "what the users' reports add.",
        "",
    ]

    def server_cell(server: str, accounting: str, eps: float) -> str:
        setting = token_setting(server, n, accounting, eps)
        if server == "bilstm":
            return cell(setting, "accuracy_bilstm")
        if server == "mean-lda-own":
            return cell(setting, "accuracy_lda")
        return cell(setting, "accuracy_head") + " / " + cell(setting, "accuracy_lda")

    accountings = ("paper", "strict", "strict-once") if once else ("paper", "strict")
    blank = ["-"] * len(accountings)
    rows = [
        ["token, server's own data only", "-", server_cell("mean-lda", "own-only", 0.0), *blank[1:], *blank,
         server_cell("bilstm", "own-only", 0.0), "-", "-"],
        ["token, null privacy", f"{paper_figures['null']}", server_cell("mean-lda", "clean", 0.0), *blank[1:], *blank,
         "-", "-", "-"],
    ]
    for eps, figures in paper_figures["table4"].items():
        rows.append([
            f"token, eps {eps:g}", f"{figures[0]}",
            *(server_cell(server, a, eps) for server in ("mean-lda", "mean-lda-own") for a in accountings),
            server_cell("bilstm", "paper", eps), server_cell("bilstm", "strict", eps),
            " / ".join(first(token_setting("mean-lda", n, a, eps), "sigma") for a in accountings),
        ])
    names = {"paper": "paper accounting", "strict": "strict", "strict-once": "strict-once"}
    header = ["row (training eps)", "paper", *(f"mean-LDA, {names[a]} (head / LDA)" for a in accountings),
              *(f"mean-LDA + own, {names[a]}" for a in accountings),
              "BiLSTM server, paper accounting", "BiLSTM server, strict", "sigma: " + " / ".join(accountings)]
    return lines + table(header, rows) + [""]


def sigma_note(context: Context, p: float, n: int) -> str:
    """The differences list's line on eq. 7's sigma_t = |x^t| C / mu against ldpfed's C / mu, with its factors."""
    from ldpfed.fed.encoders.vocab import tokenize

    users, _ = context.users(n)
    second = users.texts2 or [None] * len(users)  # a pair is read as a <sep> b
    length = float(np.median([min(len(tokenize(a)) + (len(tokenize(b)) + 1 if b is not None else 0), LENGTH)
                              for a, b in zip(users.texts, second)]))
    return (
        "- Noise per step: the paper's eq. 7 and Algorithm 2 set sigma_t = |x^t| C / mu_train, with |x^t| in its words "
        "'the number of sentences' sampled at step t. Taken literally that multiplies every row's sigma (latent and "
        f"token) by the batch size, about p n = {p * n:,.0f} here. ldpfed sets sigma = C / mu_train per report "
        "(its ``calibrate_noise_multiplier('clt', ...)``): each report is one user's sentence, released by that user "
        "alone, and eq. 8 already composes one sentence's releases over the T steps. Read instead as a sentence's "
        f"token count |x|, the token rows' sigma would be |x| C_tok / mu against ours sqrt({LENGTH}) C_tok / mu "
        f"(all {LENGTH} positions, padding noised): a factor |x| / sqrt({LENGTH}), {length / np.sqrt(LENGTH):.2f} "
        f"at the users' median length of {length:g} tokens (cut at {LENGTH}) and {LENGTH / np.sqrt(LENGTH):.2f} at "
        f"{LENGTH}; a sigma set per sentence length would also reveal the length, which the fixed {LENGTH} positions hide."
    )


def read_ceiling(path: Path) -> dict[str, Any]:
    """The ceiling entries written by ``--ceiling`` (empty when not measured)."""
    import json

    return json.loads(path.read_text()) if path.exists() else {}


def ceiling_section(ceiling: dict[str, Any], null: float, name: str, data_option: str, epochs: int) -> list[str]:
    """The report's 'Encoder ceiling' section: dev accuracy by pre-training data and epochs, and the gap it explains."""
    from ldpfed.simulations.reproductions._seed000_ceiling import CONFIGS

    rows, best = [], {}
    for data, e in CONFIGS:
        entry = ceiling.get(f"{data}-{e}")
        if entry is None:
            continue
        label = f"server's 10% slice ({entry['records']:,})" if data == "own" else f"all of {name} train ({entry['records']:,})"
        rows.append([label, str(e), f"{100 * entry['lda']:.2f}", f"{100 * entry['logistic']:.2f}",
                     f"{100 * entry['oov']:.1f}% ({entry['vocab']:,} words)", f"{entry['pretrain_seconds']:g}"])
        best[data] = max(best.get(data, 0.0), entry["lda"])
    lines = [
        "## Encoder ceiling (non-private)", "",
        f"Command: the command above with `--ceiling` added (each entry measured once and kept in {CEILING_FILE}). "
        "Each row pre-trains the BiLSTM (dimension 128, embedding 64, seed 0) on the named data and measures dev "
        "accuracy of NoiseAwareLDA on the clean clipped latent rows of the users' 90% (the latent null-privacy row's "
        f"classifier; the row with {epochs} epochs on the slice is that row's encoder) and of scikit-learn's logistic "
        "regression on the unclipped rows; OOV is the share of dev tokens outside the encoder's vocabulary. No "
        "pretrained word vectors (GloVe or other) are in ../shared/data or the venv, so every encoder learns its "
        "embeddings from its pre-training data.", "",
        *table(["pre-training data", "epochs", "LDA %", "logistic %", "dev OOV", "pre-training s (shared CPU)"], rows), "",
    ]
    base = ceiling.get(f"own-{epochs}")
    if base and "own" in best and "all" in best:
        gap = null / 100 - base["lda"]
        parts = [("more epochs on the slice", best["own"] - base["lda"]), ("all of train instead of the slice", best["all"] - best["own"]),
                 ("remains with all of train", null / 100 - best["all"])]
        shares = "; ".join(f"{label} {100 * points:.1f} points ({points / gap:.0%})" for label, points in parts)
        lines += [
            f"LDA: the report's encoder ({epochs} epochs on the slice) {100 * base['lda']:.2f}%, best on the slice "
            f"{100 * best['own']:.2f}%, best on all of train {100 * best['all']:.2f}%, paper {null}%. Of the "
            f"{100 * gap:.1f}-point gap: {shares}. The rest is not measured here (no pretrained word vectors; the "
            "paper's BiLSTM, its training and its classifier are not given). The rows above keep the slice's encoder: "
            f"pre-training on all of train would use the users' records, which the reproduction keeps private.", "",
        ]
    return lines


def report(results: Results, args: argparse.Namespace, context: Context) -> list[str]:
    """README.md: Table 4 and Table 5 beside the paper, and the differences."""
    latent_n, token_n = context.users_size(args.latent_records), context.users_size(args.token_records)
    full = context.users_size(0)
    paper_figures = PAPER[context.dataset]
    name, dev = paper_figures["name"], context.splits()[2]
    majority = 100 * float(np.bincount(dev.labels).max()) / len(dev)
    data_option = "" if context.dataset == "sst2" else f" --dataset {context.dataset}"

    def cell(setting: Setting, field: str) -> str:
        return fmt_spread(results.values(setting, field))

    def first(setting: Setting, field: str) -> str:
        values = results.values(setting, field)
        return fmt_number(max(values)) if values else "-"

    def pld_c(setting: Setting) -> float | None:
        """The PLD bound of the paper row's sigma at the paper's own sensitivity C (its z; what eq. 8 estimates)."""
        deltas = results.values(setting, "delta")
        return _pld_at_paper_sensitivity(setting["epsilon"], deltas[0], args.p, args.steps) if deltas else None

    lines = [
        f"# Seed 000, Tables 4 and 5: token versus latent DP layer, and the latent dimension ({name})",
        "",
        f"Command: `ldpfed reproduce {NAME}{data_option} --seeds {args.seeds} --p {args.p} --steps {args.steps} "
        f"--token-records {args.token_records} --latent-records {args.latent_records} --tables {' '.join(args.tables)} "
        f"--accountings {' '.join(args.accountings)} --dims {' '.join(map(str, args.dims))}` (resumes from results.json).",
        "",
        f"Accuracy in % on {paper_figures['dev']}, mean [min, max] over seeds (n). Each cell shows the softmax head "
        "trained one Adam step per sampled batch (the paper's server-side training) / ldpfed's NoiseAwareLDA on "
        f"the same reports. Schedule: Poisson sampling p = {args.p}, T = {args.steps} steps, delta = 1 / (users' "
        f"records). Encoder: ldpfed's BiLSTM pre-trained on a 10% slice of {name} train (the server's own data), "
        f"users hold the other 90% ({full:,} records).",
        "",
        "- paper: sigma from eq. 8 (GDP + CLT, an estimate, not a bound) at sensitivity C. 'PLD C' is the "
        "numerical upper bound for that same sigma and amplified schedule at the paper's sensitivity C (what its "
        "CLT figure estimates), 'PLD 2C' the same at ldpfed's sensitivity 2C (both still assume the server "
        "cannot link a report to its record); 'worst case' what ldpfed's ledger charges for it (the most "
        "releases of one record, 2C, no amplification).",
        "- strict: same schedule, sigma calibrated on the worst-case ledger (2C, k = (1-delta)-quantile of "
        "Binomial(T, p) releases; a record at k is not released again). strict-once: each record released once.",
        "",
    ]
    if "4" in args.tables:
        note = "" if latent_n == full else f" REDUCED: latent rows use {latent_n:,} of the {full:,} records."
        lines += [f"## Table 4 ({name}, dimension 128), latent rows{note}", ""]
        with_once = "strict-once" in args.accountings
        rows = []
        base = {"position": "latent", "dim": 128, "n": latent_n}
        clean = {**base, "accounting": "clean", "epsilon": 0.0}
        rows.append(["latent, null privacy", f"{paper_figures['null']}", cell(clean, "accuracy_head") + " / " + cell(clean, "accuracy_lda"),
                     *["-"] * (4 if with_once else 3)])
        for eps, figures in paper_figures["table4"].items():
            paper = {**base, "accounting": "paper", "epsilon": eps}
            strict = {**base, "accounting": "strict", "epsilon": eps}
            once = {**base, "accounting": "strict-once", "epsilon": eps}
            row = [
                f"latent, eps {eps:g}", f"{figures[1]}",
                cell(paper, "accuracy_head") + " / " + cell(paper, "accuracy_lda"),
                f"{fmt_number(pld_c(paper))} / {first(paper, 'epsilon_pld_2c')} / {first(paper, 'epsilon_worst_case')}",
                cell(strict, "accuracy_head") + " / " + cell(strict, "accuracy_lda"),
            ]
            if with_once:
                row.append(cell(once, "accuracy_head") + " / " + cell(once, "accuracy_lda"))
            rows.append(row + [f"{first(paper, 'sigma')} / {first(strict, 'sigma')}" + (f" / {first(once, 'sigma')}" if with_once else "")])
        header = ["row (training eps)", "paper", "ldpfed, paper accounting (head / LDA)",
                  "paper's sigma costs: PLD C / PLD 2C / worst case", "ldpfed, strict (head / LDA)"]
        header += ["ldpfed, strict-once (head / LDA)", "sigma: paper / strict / once"] if with_once else ["sigma: paper / strict"]
        lines += table(header, rows)
        lines += ["", *token_table(results, args, context, token_n, full, cell, first)]
    if "5" in args.tables:
        note = "" if latent_n == full else f" REDUCED: {latent_n:,} of the {full:,} records."
        if set(args.dims) != set(DIMS):
            note += f" REDUCED: dimensions {', '.join(map(str, args.dims))} of the paper's {', '.join(map(str, DIMS))}."
        lines += [f"## Table 5 ({name}, latent, by dimension){note}", ""]
        rows = []
        for dim in args.dims:
            base = {"position": "latent", "dim": dim, "n": latent_n}
            clean = {**base, "accounting": "clean", "epsilon": 0.0}
            rows.append([f"dim {dim}, null privacy", "-", cell(clean, "accuracy_head") + " / " + cell(clean, "accuracy_lda"), "-"])
            for eps, figures in paper_figures["table5"].items():
                paper = {**base, "accounting": "paper", "epsilon": eps}
                strict = {**base, "accounting": "strict", "epsilon": eps}
                rows.append([
                    f"dim {dim}, eps {eps:g}", f"{figures[DIMS.index(dim)]}",
                    cell(paper, "accuracy_head") + " / " + cell(paper, "accuracy_lda"),
                    cell(strict, "accuracy_head") + " / " + cell(strict, "accuracy_lda"),
                ])
        lines += table(["row", "paper", "ldpfed, paper accounting (head / LDA)", "ldpfed, strict (head / LDA)"], rows)
        lines.append("")
    ceiling = read_ceiling(args.out / CEILING_FILE)
    if ceiling:
        lines += ceiling_section(ceiling, paper_figures["null"], name, data_option, args.pretrain_epochs)
    lines += [
        "## Differences that remain",
        "",
        "- Encoder training: the paper does not say what its BiLSTM was trained on; its null-privacy accuracy "
        f"({paper_figures['null']}) is that of a BiLSTM trained on {name} itself. Here the encoder is pre-trained on the server's "
        f"own 10% slice of {name} train and frozen, so null privacy is lower and every row inherits that ceiling: "
        "compare each row with its own null-privacy row" + (" (see 'Encoder ceiling')." if ceiling else "."),
        "- p_train and T are not given in the paper (its Fig. 6 varies p_train); every row here uses the same "
        f"p = {args.p}, T = {args.steps}.",
        f"- The users hold 90% of {name} train (the paper: all of it), and delta = 1 / (their records).",
        "- The paper's server-side model after the latent DP layer is not specified; a linear softmax head trained one "
        "Adam step per sampled batch stands in for it, beside ldpfed's NoiseAwareLDA. It gets only T Adam steps "
        f"(T = {args.steps} here): where the noise is large it stays at the majority class ({majority:.2f}%). Whether "
        "more steps would lift it was not tested, so the head's figures do not say what the paper's server-side "
        "training would reach.",
        "- Token rows: the paper does not give the token layer's clip or its sensitivity; here each token "
        f"embedding is clipped to C_tok (median token norm on the server's data), L = {LENGTH} positions (padding "
        "noised too), sensitivity C_tok sqrt(L) in the paper row and 2 C_tok sqrt(L) in the strict rows. The "
        "embedding size is 64 (the paper's is not given). The paper's BiLSTM server trains on every report of a "
        "batch; here it trains on a fixed number per step (see the token table).",
        sigma_note(context, args.p, token_n),
        "- Test inputs are clean (no inference noise): Table 4 is about training epsilon.",
        clt_note(paper_figures["table4"], lambda eps: pld_c({"position": "latent", "dim": 128, "n": latent_n,
                                                            "accounting": "paper", "epsilon": eps})),
    ]
    if context.dataset == "qqp":
        lines += [
            "- QQP data: the paper uses GLUE QQP (363k training pairs, 40k validation); ../shared/data holds an "
            "8,999-pair subset of GLUE train (10% the server's, 90% the users') and a disjoint 1,000-pair subset "
            "of GLUE train as the test set. Each pair is one record, encoded by the BiLSTM as one sequence "
            f"(a <sep> b, cut to {LENGTH} tokens in the token rows); how the paper joins a pair is not given.",
        ]
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
