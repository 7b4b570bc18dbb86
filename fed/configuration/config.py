"""The help texts of the run options of fed.configuration (``ldpfed simulate --help``), and the mechanism names they list.

A heterogeneity axis's options carry their own help (fed.heterogeneity); fed.configuration.run_spec.ORDER
gives the options' order.
"""

from __future__ import annotations

from typing import Any

from ldpfed.fed.randomizers import RANDOMIZERS
from ldpfed.fed.randomizers.base import Randomizer
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer

_HELP: dict[str, str] = {
    "data": "dataset: 'generated[:N[:seed]]', a local folder (train/dev TSV or CSV; name other files per split as 'FOLDER:train=STEM,test=STEM', a stem or a .tsv/.csv path each, evaluation reading 'dev', else 'test'), or a Hugging Face id",
    "public": "server's public labelled data: 'generated[:N]', 'heldout:N' (simulation only: a seeded N records of the task's own train split, withheld from every user: outside the --train-limit sample when there is one, else taken out of the users' records; nested, so heldout:100 is part of heldout:3000 at one seed), a folder or dataset id, or 'none'. The run warns when its labels or domain differ from the task's (the default 'generated' matches only --data generated). Its labels count as the task's only when both sides name them (a folder's labels.txt) with the same names; with other or unnamed labels it gives no public-only baseline, shrinkage target or class means, while the projection (--dim) is still fitted on it, as it needs no labels. Nothing switches automatically unless you opt in to --dim auto, which fits no projection on public data labelled unlike the task unless its simulation shows the noise needs one: a mismatched projection can still beat none",
    "projection_public": "what the projection (--dim) is fitted on, its labels unused: a --public spec ('': --public itself). With it the labelled public data (--public, even 'none') can change while the projection stays fixed",
    "users": "number of users",
    "partition": "how records are split among users: iid, dirichlet:<alpha>, size:<kind>, or natural (each user's records from one source of the data: its file, or a generated corpus's style)",
    "train_limit": "use a seeded sample of this many training records (0: all)",
    "encoder": "local encoder: minilm, bilstm (pre-trained by the server on public data), minilm-tuned (MiniLM's layers fine-tuned by the server on public labelled data and shipped; a device allows them by fingerprint), or a model id/path",
    "dim": "project representations to this many dimensions, fitted on public data (0: no projection). 'default' (when not given): 0 with --public none; the Gaussian mechanisms take {gaussian_dims} (read off a sweep at clip 1, simulations/reports/defaults; {base_dim} with --sigma), snd 0, every other mechanism and --privacy-model central {base_dim}. 'auto' (opt-in; it measured below the defaults at epsilon 8, 3 and 1, simulations/reports/defaults): the server chooses 0 or one of 8, 16, 32, 64, 128 by simulating the run's noisy reports (its noise and planned report count) on its public data, held-out public accuracy deciding; with public data labelled unlike the task, no projection unless the full dimension loses more than 0.05 there (fed.runtime.auto_dim). Public data only: no user record is read. Where auto's choice is not simulated (mechanisms other than the Gaussian ones, --privacy-model central) it is the default",
    "mechanism": "randomizer of representations: {mechanisms} (docs/randomizers.md)",
    "mechanism_options": "extra randomizer parameters as comma-separated key=value (e.g. 'lambda=100,integer_bits=2' for ome, 'eta=20' for dchi, 'k=4,masks=16' for texthide); values are int, float, true/false or text",
    "clip": "clipping radius C (L2); sensitivity is 2C. 'default' (when not given): the mechanism's own, {gaussian_clip:g} for the Gaussian mechanisms (measured, simulations/reports/defaults) and {base_clip:g} for the others",
    "epsilon": "target worst-case sentence-level epsilon per record; sigma is calibrated to it (--privacy-model central: the user-level target of DP-FedAvg)",
    "sigma": "noise scale; overrides --epsilon, whose budget becomes what sigma implies",
    "delta": "delta of every (epsilon, delta) figure",
    "user_epsilon": "user-level epsilon budget (0: not enforced, still reported)",
    "labels": "public, or rr:<epsilon> (k-ary randomized response, charged to the ledger)",
    "rounds": "server rounds. By default one: every user takes part and releases each training record once (--releases-per-record 1), which a second round could not repeat. More rounds need --releases-per-record 0 (every record in every round, noise calibrated for that) or a share per round (--users-per-round, --sampling, --records-per-user-round); the run warns about rounds that would release nothing",
    "evaluate_every": "rounds between local evaluations of the classifiers (the last round always evaluates). A round without one neither refits the classifier nor sends it to the nodes: in large simulations evaluation (a second message exchange, the fit and per-user metrics) can cost as much as training",
    "users_per_round": "users sampled per round among those with budget left (0: all of them, Flower's convention; the run warns when users would never take part)",
    "records_per_user_round": "records each sampled user releases per round (0: all with budget left)",
    "releases_per_record": "planned releases of each training record under --enforce worst-case (calibration; 0: the (1-delta)-quantile of Binomial(rounds, sampling rate), i.e. every round under --sampling all; user sampling is not counted)",
    "releases_per_query": "planned releases of each query record under --enforce worst-case (calibration; at least --answers)",
    "sampling": "training records a user releases per round: all, poisson:<p> (each record with probability p), fixed:<m> (m without replacement)",
    "enforce": "budget enforced: worst-case (ledger of actual releases) or amplified (PLD bound of the Poisson-sampled schedule; assumes the server cannot link a report to its record)",
    "upsampling_q": "remote inference: true-data rate q of the mixed query set (fictitious queries made up to share 1-q; 1: none)",
    "p_query": "remote inference: probability that each mixed query is released in a step (1: every query every step)",
    "answers": "remote inference: steps repeat until every true query has at least this many answers (k)",
    "inference": "local (users apply the downloaded classifier, free) or remote (privatized queries, costs budget)",
    "classifier": "the server's downstream classifier, trained on the released reports (post-processing: ledgers do not change): lda (the noise-aware discriminant, from the reports' sums), mlp (the seeds' MLP head, one hidden layer trained by SGD on every report; users get its layers for local inference), or a name registered in-process (fed.learning.classifiers.register_classifier) or by an installed plugin (entry-point group ldpfed.classifiers). docs/results.md compares lda and mlp",
    "shrinkage": "covariance shrinkage of the noise-aware classifier in [0, 1]; negative: automatic (Ledoit-Wolf)",
    "weighting": "how the classifier combines reports of different noise (privacy tiers): inverse-variance (each group by the noise its reports declare; a noisy tier never dilutes the model), epsilon (each report by its epsilon) or pooled (every report counts once)",
    "screening": "classifier coordinates: on = those that maximise the expected Fisher ratio (public class means vs the noise); auto = on when noise dominates; off = all",
    "nodes": "Flower nodes hosting the users (user u lives on node u mod nodes)",
    "min_nodes": "fewest nodes that must answer the setup; fewer is an error (users of missing nodes are unavailable)",
    "round_timeout": "seconds the server waits for replies to one message exchange; nodes that miss it are left out of that step",
    "seed": "run seed: partitions, sampling and every user's noise",
    "out": "run directory (default: runs/<UTC time>)",
    "save_reports": "save everything the server received (reports.npz), for attack research",
    "cache_dir": "cache of clean encodings (default: $LDPFED_CACHE or ~/.cache/ldpfed)",
    "nonprivate_baseline": "train the non-private upper bound from clean data (simulation only)",
    "combined_baseline": "also evaluate the private classifier with the public labelled data added as one more group of reports (NoiseAwareLDA.add_public, its domain shift measured against the reports): accuracy_combined; needs --classifier lda, --weighting inverse-variance and public data labelled like the task",
    "privacy_model": "local (each user's reports reach the server as sent), shuffle (the same reports pass a shuffler that strips their origin and permutes each round's; the amplified central epsilon is reported beside the local ledgers, which stay enforced) or central (DP-FedAvg of a softmax head on clean encodings: clipped updates, Gaussian noise on the aggregate by Flower's DP wrapper; --epsilon is then the user-level target; simulation only; one user per node). docs/privacy_models.md",
    "central_clip": "--privacy-model central: L2 clipping norm of each user's model update (with --central-clipping adaptive, the initial one)",
    "central_clipping": "--privacy-model central: fixed (Flower's fixedclipping_mod) or adaptive (adaptiveclipping_mod: the norm tracks the median update norm from a noised count of clipped updates, Andrew et al. 2021; --central-noise is then the effective multiplier over both)",
    "central_noise": "--privacy-model central: Flower's noise multiplier (noise std / clipping norm on the sum of updates); 0: calibrated to --epsilon",
    "central_lr": "--privacy-model central: learning rate of each user's local SGD",
    "central_epochs": "--privacy-model central: local epochs per round over the user's training records",
}



def _default_texts() -> dict[str, str]:
    """The help of --dim and --clip, with the defaults read off the randomizer classes that hold them."""
    return {
        "dim": _HELP["dim"].format(gaussian_dims=GaussianRandomizer.default_dim_text(), base_dim=Randomizer.default_dim(0.0)),
        "clip": _HELP["clip"].format(gaussian_clip=GaussianRandomizer.default_clip, base_clip=Randomizer.default_clip),
    }


def __getattr__(name: str) -> Any:
    """``MECHANISMS`` (the names in the randomizer registry, fed.randomizers.RANDOMIZERS, in its order) and
    ``HELP`` (each run option's help, the mechanism's listing them), read from the registry on every use:
    a randomizer registered after this module is imported (register_randomizer) is listed too."""
    if name == "MECHANISMS":
        return tuple(RANDOMIZERS)
    if name == "HELP":
        return {**_HELP, "mechanism": _HELP["mechanism"].format(mechanisms=", ".join(RANDOMIZERS)), **_default_texts()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
