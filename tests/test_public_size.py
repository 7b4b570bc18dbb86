"""Issue 40 item 5: the server's public set can vary in size and source while the users' records stay put.

``--public heldout:N`` is N records of the task's train split that no user holds (nested in N, outside the
--train-limit sample); ``--projection-public`` fixes what the projection is fitted on; ``--combined-baseline``
adds the labelled public set to the reports' classifier as one more group.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.data.loaders import load_dataset
from ldpfed.fed.data.population import Population, limited
from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.learning.report_sums import ReportSums
from ldpfed.fed.runtime.assets import load_public, projection_data

DATA = "generated:300"


@pytest.fixture
def task(tmp_path: Path) -> str:
    """A two-class folder task of 300 distinct training and 40 dev sentences, its labels named."""
    rows = {split: ["sentence\tlabel"] + [f"{split} sentence number {i}\t{i % 2}" for i in range(n)]
            for split, n in (("train", 300), ("dev", 40))}
    for split, lines in rows.items():
        (tmp_path / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    (tmp_path / "labels.txt").write_text("0\tnegative\n1\tpositive\n")
    return str(tmp_path)


def _texts(dataset) -> set[str]:  # type: ignore[no-untyped-def]
    return set(dataset.texts)


def test_heldout_records_are_no_users_nested_and_leave_the_users_sample_as_it_was(task: str) -> None:
    train = load_dataset(task, "train")
    plain = RunSpec.of(data=task, public="none", train_limit=150, users=4, seed=1)
    users = _texts(limited(train, plain.data, 1))
    small, large = (RunSpec.of(data=task, public=f"heldout:{n}", train_limit=150, users=4, seed=1) for n in (20, 100))
    for spec in (small, large):
        assert _texts(limited(train, spec.data, 1)) == users  # the users' sample does not move
    held_small, held_large = (load_public(spec) for spec in (small, large))
    assert held_small is not None and held_large is not None
    assert (len(held_small), len(held_large)) == (20, 100)
    assert _texts(held_small) <= _texts(held_large) and not _texts(held_large) & users
    assert held_large.label_names == train.label_names
    population = Population.build(large.data, 1)  # what every node rebuilds
    assert not _texts(held_large) & {population.train.texts[i] for part in population.train_parts for i in part}


def test_heldout_without_train_limit_comes_out_of_the_users_records(task: str) -> None:
    spec = RunSpec.of(data=task, public="heldout:50", users=4, seed=2)
    train = load_dataset(task, "train")
    users, held = limited(train, spec.data, 2), load_public(spec)
    assert held is not None and len(users) == len(train) - 50 and not _texts(users) & _texts(held)


def test_projection_public_is_fitted_on_without_labelled_public_data() -> None:
    spec = RunSpec.of(data=DATA, public="none", projection_public="heldout:30", train_limit=150, users=4, epsilon=3.0)
    assert spec.encoder.dim == 16  # the Gaussian's default at epsilon 3: the projection has data to be fitted on
    assert load_public(spec) is None
    fit_on = projection_data(spec, None)
    assert fit_on is not None and len(fit_on) == 30
    assert RunSpec.of(data=DATA, public="none", epsilon=3.0).encoder.dim == 0


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"public": "heldout:0"}, "heldout:N with N at least 1"),
        ({"projection-public": "heldout:x"}, "heldout:N with N at least 1"),
        ({"projection-public": "generated", "dim": "auto"}, "--projection-public applies to a given --dim"),
        ({"combined-baseline": True, "weighting": "pooled"}, "--combined-baseline adds the public data"),
        ({"public": "none", "dim": 8}, "give --public (or --projection-public)"),
    ],
)
def test_bad_public_size_options_say_what_is_wrong(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RunSpec.from_mapping({"data": DATA, **values})


def test_heldout_larger_than_what_lies_outside_the_sample_is_refused() -> None:
    spec = RunSpec.of(data=DATA, public="heldout:200", train_limit=150, users=4)
    with pytest.raises(ValueError, match="outside the --train-limit sample of 150; the train split has 300"):
        load_public(spec)


def test_combined_model_adds_the_public_group_and_leaves_the_reports_model_alone() -> None:
    rng = np.random.default_rng(0)
    dim, labels = 4, rng.integers(0, 2, 400)
    means = np.array([[1.0, 0, 0, 0], [-1.0, 0, 0, 0]])
    x = means[labels] + rng.normal(0, 1.0, (400, dim))
    aggregator = ReportAggregator(dim, 2, shrinkage=-1.0)
    noise = 3.0
    aggregator.lda.add(ReportSums.of(x + rng.normal(0, noise, x.shape), labels, 2), np.full(dim, noise), None)
    aggregator.reports = 400
    before = aggregator.model()
    public_labels = rng.integers(0, 2, 300)
    combined = aggregator.with_public(means[public_labels] + rng.normal(0, 1.0, (300, dim)), public_labels)
    after = aggregator.lda.fit()
    assert np.allclose(before.weights, after.weights) and np.allclose(before.bias, after.bias)
    assert not np.allclose(combined.weights, before.weights)
    test_labels = rng.integers(0, 2, 2000)
    test = means[test_labels] + rng.normal(0, 1.0, (2000, dim))
    assert (combined.predict(test) == test_labels).mean() >= (before.predict(test) == test_labels).mean() - 0.01


def test_the_crossover_is_interpolated_in_log_size_and_capped_at_the_grid_ends() -> None:
    from ldpfed.simulations.experiments.public_crossover import crossing

    sizes = [100, 1000, 10000]
    assert crossing(sizes, [0.02, 0.01, -0.01]) == pytest.approx(10 ** 3.5)  # halfway between 1,000 and 10,000
    assert crossing(sizes, [-0.01, -0.02, -0.03]) == 100  # public-only wins at every size: the smallest
    assert crossing(sizes, [0.01, 0.02, 0.03]) == 10000  # private alone wins everywhere: the largest size
    assert crossing(sizes, [-0.01, 0.02, -0.01]) == pytest.approx(10 ** (3 + 2 / 3))  # after the last win
