"""pfl-research's side of the peer benchmark (issue 41, item 1): run in pfl's own virtual environment.

``<pfl venv>/bin/python simulations/benchmarks/peer_pfl_loop.py --users 5000 --rounds 10 --out FILE.json``

It imports pfl and torch only inside ``main``: ``simulations.benchmarks.peer_pfl`` writes nothing of its
own into pfl's environment and runs this file there, and takes the shared setting (:func:`add_setting`) from it.

What it runs: pfl's simulated federated loop (``FederatedAlgorithm.run`` over a ``SimulatedBackend``) on
pfl's PyTorch ops, every user of a ``FederatedDataset`` in every round (``cohort_size = users``, users
sampled by pfl's ``MinimizeReuseUserSampler``). Each user's contribution is its ``records x dims`` float32
statistic (``MappedVectorStatistics``), which pfl's own ``GaussianMechanism`` privatises as a local
mechanism (a postprocessor of the backend: clip the statistic's l2 norm to ``--clip``, add Gaussian noise
of standard deviation ``relative_noise_stddev x clip`` to every coordinate). The server sums the noised
statistics (pfl's ``SumAggregator``) and the algorithm sets the model to their mean. The users' data is
drawn once, before the loop (ldpfed's runs read encoded records from a cache the same way).

The relative noise is pfl's ``GaussianMechanism.construct_single_iteration`` at ``--epsilon`` and
``--delta`` (analytic Gaussian mechanism); the figure does not depend on it.

It prints one line per round and writes a JSON report: the wall-clock time at the end of each round
(seconds since the loop began), the steady-state user-rounds/s (rounds ``warmup+1..R``, from the end of
round ``warmup`` to the end of round R, as ``bench_scale`` counts ldpfed's), torch's thread count and
the versions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path


def add_setting(parser: argparse.ArgumentParser) -> None:
    """The setting both sides of the peer benchmark run: users (all in every round), rounds and warm-up
    (simulations.benchmarks.peer_pfl takes it from here)."""
    parser.add_argument("--users", type=int, default=5_000, help="users, every one in every round (default 5000)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of each run (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="leading rounds left out of the steady state (default 2)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="peer_pfl_loop.py", description=__doc__.split("\n\n")[0])
    add_setting(parser)
    parser.add_argument("--records", type=int, default=16, help="rows of each user's statistic (default 16)")
    parser.add_argument("--dims", type=int, default=384, help="columns of each user's statistic (default 384)")
    parser.add_argument("--clip", type=float, default=4.0, help="l2 bound of a user's statistic (default 4: 16 rows of norm 1)")
    parser.add_argument("--epsilon", type=float, default=8.0, help="epsilon of the single-release Gaussian (default 8)")
    parser.add_argument("--delta", type=float, default=1e-5, help="delta of the single-release Gaussian (default 1e-5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and of pfl's samplers (default 0)")
    parser.add_argument("--out", type=Path, required=True, help="JSON report")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.rounds <= args.warmup or args.warmup < 1:
        raise SystemExit("--rounds must exceed --warmup, and --warmup be at least 1")
    import numpy as np
    import torch

    import pfl
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm.base import FederatedAlgorithm
    from pfl.callback.base import TrainingProcessCallback
    from pfl.common_types import Population
    from pfl.context import CentralContext
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import MinimizeReuseUserSampler
    from pfl.hyperparam.base import AlgorithmHyperParams
    from pfl.internal.ops import pytorch_ops
    from pfl.internal.ops.selector import set_framework_module
    from pfl.metrics import Metrics
    from pfl.model.base import Model
    from pfl.privacy.gaussian_mechanism import GaussianMechanism
    from pfl.stats import MappedVectorStatistics

    set_framework_module(pytorch_ops)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    data = torch.randn(args.users, args.records, args.dims, generator=generator, dtype=torch.float32)
    data /= data.norm(dim=2, keepdim=True)  # rows of norm 1, like ldpfed's normalised encodings
    user_data = {user: (data[user],) for user in range(args.users)}
    federated = FederatedDataset.from_slices(user_data, MinimizeReuseUserSampler(list(range(args.users))))

    class MeanModel(Model):
        """The server's model: the mean of the noised statistics of the last round."""

        def __init__(self) -> None:
            self.mean = torch.zeros(args.records, args.dims)

        def apply_model_update(self, statistics):  # noqa: ANN001, ANN201 - pfl's interface
            self.mean = statistics["statistic"] / statistics.weight
            return self, Metrics()

    class ReleaseStatistic(FederatedAlgorithm):
        """Every user releases its records x dims statistic; the server averages the noised ones."""

        def get_next_central_contexts(self, model, iteration, algorithm_params, model_train_params, model_eval_params=None):  # noqa: ANN001, ANN201
            if iteration == args.rounds:
                return None, model, Metrics()
            context = CentralContext(
                current_central_iteration=iteration, do_evaluation=False, cohort_size=args.users,
                population=Population.TRAIN, algorithm_params=algorithm_params,
                model_train_params=model_train_params, model_eval_params=model_eval_params, seed=self._get_seed(),
            )
            return (context,), model, Metrics()

        def simulate_one_user(self, model, user_dataset, central_context):  # noqa: ANN001, ANN201
            (statistic,) = user_dataset.raw_data
            return MappedVectorStatistics({"statistic": statistic}, weight=1), Metrics()

        def process_aggregated_statistics(self, central_context, aggregate_metrics, model, statistics):  # noqa: ANN001, ANN201
            return model.apply_model_update(statistics)

    ends: list[float] = []

    class RoundClock(TrainingProcessCallback):
        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):  # noqa: ANN001, ANN201
            ends.append(time.perf_counter() - started)
            done = len(ends)
            seconds = ends[-1] - (ends[-2] if done > 1 else 0.0)
            print(f"[pfl] round {done}/{args.rounds}: {seconds:.2f} s, {args.users:,} users", flush=True)
            return False, Metrics()

    mechanism = GaussianMechanism.construct_single_iteration(args.clip, args.epsilon, args.delta)
    backend = SimulatedBackend(training_data=federated, val_data=None, postprocessors=[mechanism])
    model = MeanModel()
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    ReleaseStatistic().run(
        AlgorithmHyperParams(), backend, model, None, callbacks=[RoundClock()], send_metrics_to_platform=False,
    )
    load_after = os.getloadavg()[0]
    counted = args.rounds - args.warmup
    seconds = ends[-1] - ends[args.warmup - 1]
    report = {
        "peer": "pfl-research",
        "pfl_version": pfl.__version__ if hasattr(pfl, "__version__") else _version("pfl"),
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "python": platform.python_version(),
        "torch_threads": torch.get_num_threads(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "relative_noise_stddev": mechanism.relative_noise_stddev,
        "round_ends_s": ends,
        "steady_rounds": counted,
        "steady_seconds": seconds,
        "user_rounds_per_s": args.users * counted / seconds,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "mean_norm": float(model.mean.norm()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"[pfl] steady rounds {args.warmup + 1}..{args.rounds}: {report['user_rounds_per_s']:,.0f} user-rounds/s", flush=True)
    return 0


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    sys.exit(main())
