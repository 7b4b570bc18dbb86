"""A small side-by-side of the privacy models on one reduced setting (docs/privacy_models.md, "Measured").

SST-2, a seeded sample of 2,000 training records, 40 users (iid), MiniLM projected to 16
dimensions on sentiment_labelled_sentences, epsilon 8 in each model's own unit; the real ServerApp
and ClientApp in this process (simulations/experiments/local_run.py). Usage:

    python -m ldpfed.simulations.experiments.privacy_models_small [OUT] [central local shuffle-laplace]
"""

from __future__ import annotations

import sys
from pathlib import Path

from ldpfed.simulations.experiments.local_run import run_in_process, single_threaded_blas

COMMON = dict(
    data="../shared/data/sst2", public="../shared/data/sentiment_labelled_sentences", train_limit=2000, users=40,
    partition="iid", dim=16, seed=0, epsilon=8.0,
)
RUNS = {
    "central": dict(privacy_model="central", nodes=40, rounds=30, users_per_round=10, central_clip=1.0, central_lr=1.0),
    "local": dict(nodes=2),
    "shuffle-laplace": dict(nodes=2, mechanism="laplace", privacy_model="shuffle"),
}
KEYS = (
    "accuracy_local", "accuracy_public_only", "accuracy_nonprivate", "epsilon_sentence_max", "epsilon_user_max",
    "epsilon_shuffled", "epsilon_user_central",
)


def main(argv: list[str]) -> None:
    """Run the named settings (default: all) into OUT/<name> and print their figures."""
    single_threaded_blas()
    out = Path(argv[0] if argv else "runs/privacy-models-small")
    for name in argv[1:] or list(RUNS):
        _, summary = run_in_process({**COMMON, **RUNS[name], "out": str(out / name)})
        print(name, {key: summary.get(key) for key in KEYS}, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
