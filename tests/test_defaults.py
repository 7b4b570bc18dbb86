"""Run defaults that suit any dataset, warnings about wasteful schedules, and the public-data check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.runtime.assets import DOMAIN_DIMS, DOMAIN_OVERLAP_MIN, check_public, domain_overlap
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.data.corpus import LABEL_NAMES, generate_public_corpus
from ldpfed.fed.configuration.plan import planned_train_releases
from ldpfed.fed.configuration.schedule_warnings import schedule_warnings
from tests.conftest import write_review_folder

TASK = ("negative", "positive")


def test_defaults_ask_every_user_once_and_release_each_record_once() -> None:
    config = RunSpec()
    assert (config.schedule.users_per_round, config.schedule.rounds, config.schedule.releases_per_record) == (0, 1, 1)
    assert planned_train_releases(config) == 1
    assert schedule_warnings(config) == []
    assert schedule_warnings(RunSpec.of(data="../shared/data/sst2", users=200, epsilon=3)) == []


@pytest.mark.parametrize(
    "values,dim,clip",
    [
        ({}, 32, 1.0),  # epsilon 8, the generated corpus's 4 classes
        ({"epsilon": 5.0}, 32, 1.0),
        ({"epsilon": 3.0}, 16, 1.0),
        ({"epsilon": 1.7}, 16, 1.0),
        ({"epsilon": 1.0}, 8, 1.0),
        ({"epsilon": 0.1}, 8, 1.0),
        ({"mechanism": "gaussian-analytic", "epsilon": 3.0}, 16, 1.0),  # the Gaussian variants share the rule
        ({"data": "sst2-like"}, 32, 1.0),  # no schema to read: the rule as for few classes
        ({"sigma": 2.0}, 16, 1.0),  # noise given, epsilon unknown: the base default
        ({"public": "none"}, 0, 1.0),  # no public data: no projection, and no error
        ({"mechanism": "sue"}, 16, 3.0),
        ({"mechanism": "laplace", "epsilon": 1.0}, 16, 3.0),
        ({"mechanism": "snd"}, 0, 3.0),  # token matrices take no projection
        ({"privacy_model": "central", "nodes": 20}, 16, 1.0),  # clean encodings: the base default
        ({"dim": 128, "clip": 2.5, "epsilon": 1.0}, 128, 2.5),  # given values stay
    ],
)
def test_dim_and_clip_not_given_take_the_mechanisms_defaults_at_the_epsilon(values: dict, dim: int, clip: float) -> None:
    spec = RunSpec.of(**values)
    assert (spec.encoder.dim, spec.privacy.clip) == (dim, clip)
    mapping = spec.to_mapping()
    assert (mapping["dim"], mapping["clip"]) == (dim, clip)  # every node and config.json see the values used
    assert RunSpec.from_mapping(mapping) == spec
    if "dim" not in values:  # 'default' in a run config (pyproject's) is the same run
        given = {name.replace("_", "-"): value for name, value in values.items()}
        assert RunSpec.from_mapping({**given, "dim": "default", "clip": "default"}) == spec


def test_the_gaussian_rule_lives_on_its_class_and_plugins_keep_the_base_defaults() -> None:
    from ldpfed.fed.randomizers.base import Randomizer

    epsilons = (20.0, 8.0, 4.9, 3.0, 1.69, 1.0)
    assert [GaussianRandomizer.default_dim(e) for e in epsilons] == [32, 32, 16, 16, 8, 8]
    assert [GaussianRandomizer.default_dim(e, 4, 10**6) for e in epsilons] == [32, 32, 16, 16, 8, 8]
    assert [GaussianRandomizer.default_dim(e, 5, 5000) for e in epsilons] == [128, 128, 64, 64, 8, 8]
    assert [GaussianRandomizer.default_dim(e, 5, 4999) for e in epsilons] == [32, 32, 16, 16, 8, 8]
    assert GaussianRandomizer.default_dim(8.0, 5) == 32  # the record count unknown: the base rule
    assert GaussianRandomizer.default_clip == 1.0 and (Randomizer.default_clip, Randomizer.default_dim(1.0)) == (3.0, 16)


@pytest.mark.parametrize(
    "classes,per_class,epsilon,dim",
    [(2, 1000, 8.0, 32), (4, 1000, 3.0, 16), (5, 1000, 8.0, 128), (7, 1000, 3.0, 64), (7, 1000, 1.0, 8), (7, 999, 8.0, 32)],
)
def test_the_default_dim_reads_the_class_count_and_the_record_count_of_the_task(
    tmp_path: Path, classes: int, per_class: int, epsilon: float, dim: int
) -> None:
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "labels.txt").write_text("".join(f"{i}\tclass{i}\n" for i in range(classes)))
    rows = "".join(f"sentence {i}\t{i % classes}\n" for i in range(classes * per_class))
    (folder / "train.tsv").write_text("sentence\tlabel\n" + rows)
    assert RunSpec.of(data=str(folder), epsilon=epsilon).encoder.dim == dim
    if dim == 128:  # --train-limit caps the count the rule reads
        assert RunSpec.of(data=str(folder), epsilon=epsilon, train_limit=classes * 999).encoder.dim == 32
    (folder / "labels.txt").unlink()  # no schema: no class count (not read from records), the base rule
    assert RunSpec.of(data=str(folder), epsilon=epsilon).encoder.dim == GaussianRandomizer.default_dim(epsilon)


def test_the_record_count_follows_a_named_training_split(tmp_path: Path) -> None:
    from ldpfed.fed.data.loaders import train_record_count

    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "labels.txt").write_text("".join(f"{i}\tclass{i}\n" for i in range(5)))
    for name, rows in (("test", 5000), ("dev", 10)):
        (folder / f"{name}.tsv").write_text("sentence\tlabel\n" + "".join(f"s {i}\t{i % 5}\n" for i in range(rows)))
    spec = f"{folder}:train=test,test=dev"
    assert train_record_count(spec) == 5000 and train_record_count("generated") is None
    assert RunSpec.of(data=spec, epsilon=8.0).encoder.dim == 128  # 5 classes of 1,000 records


@pytest.mark.parametrize("values,message", [({"clip": 0}, "'clip' must be 'default' or a positive"), ({"clip": "wide"}, "'clip'"),
                                            ({"clip": -1}, "'clip'"), ({"dim": "best"}, "'dim' must be 'auto', 'default'")])
def test_bad_dim_or_clip_is_named(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunSpec.from_mapping(values)


@pytest.mark.parametrize(
    "values,expected",
    [
        ({"users": 200, "rounds": 4, "users_per_round": 5}, "at most 20 of the 200 users take part"),
        ({"rounds": 4}, "rounds 2 to 4 release nothing"),
        ({"users": 200, "rounds": 6, "users_per_round": 50}, "rounds 5 to 6 release nothing"),
        ({"rounds": 2, "releases_per_record": 5}, "calibrated for 5 releases"),
        ({"users": 100, "rounds": 4, "users_per_round": 10, "releases_per_record": 3}, "asked 0.4 times on average"),
    ],
)
def test_wasteful_schedules_are_named(values: dict, expected: str) -> None:
    warnings = schedule_warnings(RunSpec.of(**values))
    assert any(expected in text for text in warnings), warnings


@pytest.mark.parametrize(
    "values",
    [
        {"rounds": 4, "releases_per_record": 0},  # every record in every round, noise calibrated for 4
        {"users": 200, "rounds": 4, "users_per_round": 50},  # each user asked once
        {"rounds": 4, "sampling": "poisson:0.25", "releases_per_record": 0},
        {"rounds": 4, "enforce": "amplified", "sampling": "poisson:0.25"},
    ],
)
def test_schedules_that_use_every_round_do_not_warn(values: dict) -> None:
    assert schedule_warnings(RunSpec.of(**values)) == []


def _warnings_for(public_labels: tuple[str, ...] | None = None, **kwargs) -> tuple[str, ...]:
    public = generate_public_corpus(40)
    if public_labels is not None:
        public = type(public)(public.name, public.texts, None, public.labels % len(public_labels), public_labels)
    return check_public(RunSpec.of(data="sst2-like"), public, **kwargs).warnings


def test_public_data_with_other_labels_warns_what_it_means_and_what_to_do() -> None:
    (warning,) = _warnings_for(task_labels=TASK)
    assert "not labelled like the task" in warning and "4 labels: sports" in warning and "2 labels: negative" in warning
    assert "no public-only baseline" in warning and "projection to 32 dimensions" in warning
    assert "--public FOLDER" in warning and "--public none" in warning
    assert _warnings_for(("positive", "negative"), task_labels=TASK)  # same names, other ids


def test_public_data_labelled_like_the_task_does_not_warn() -> None:
    assert _warnings_for(task_labels=LABEL_NAMES) == ()
    assert _warnings_for(("Negative", "positive"), task_labels=TASK) == ()
    # names unknown on one side: not labelled like the task whatever the count (issue 42 item 2, tests/test_public_labels.py)
    assert "have no names" in _warnings_for(("negative", "positive"), task_labels=("0", "1"))[0]
    assert check_public(RunSpec.of(public="none", dim=0), None, TASK).labels_match is None


def test_domain_overlap_tells_shared_directions_from_other_ones() -> None:
    rng = np.random.default_rng(0)
    scales = np.r_[np.full(DOMAIN_DIMS, 3.0), np.ones(48)]
    task = rng.normal(size=(1000, 64)) * scales
    same = rng.normal(size=(1000, 64)) * scales
    other = rng.normal(size=(1000, 64)) * scales[::-1]  # its leading directions are the task's weakest
    assert domain_overlap(same, task) > 0.9 and domain_overlap(other, task) < 0.5
    assert domain_overlap(same[:100], task) is None  # too few records to measure
    config, public = RunSpec.of(data="sst2-like"), generate_public_corpus(40)
    (warning,) = check_public(config, public, LABEL_NAMES, other, task).warnings
    assert "another domain" in warning and str(DOMAIN_OVERLAP_MIN) in warning and "{" not in warning
    assert "the projection to 32 dimensions (--dim) comes from unrelated text" in warning
    check = check_public(config, public, LABEL_NAMES, same, task)
    assert check.warnings == () and check.to_json()["domain_match"] is True


def test_simulate_and_the_server_report_the_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from ldpfed._encode import encode_run_data
    from ldpfed._simulate import warn
    from ldpfed.strategies.app import _public_check, _warning_section

    data = write_review_folder(tmp_path, {"train": 40, "dev": 10}, "r", seed=0)
    (data / "labels.txt").write_text("0\tnegative\n1\tpositive\n")
    values = dict(data=str(data), public="generated:60", encoder="bilstm", dim=0, users=2, nonprivate_baseline=False)
    config = RunSpec.of(**values)
    warnings = encode_run_data(config, progress=False)  # bilstm: labels checked, nothing encoded
    warn(warnings)
    assert "WARNING: the public data (generated:60: 4 labels" in capsys.readouterr().err
    server = _public_check(config, None, generate_public_corpus(60), num_labels=2)  # the nodes' label count
    assert server.labels_match is False and "not labelled like the task" in server.warnings[0]
    assert _warning_section(list(server.warnings)).startswith("\n## Warnings\n\n- the public data")
    assert _warning_section([]) == ""


def test_a_node_reads_no_folder_that_the_run_config_names_to_resolve_a_default(tmp_path: Path) -> None:
    """Attack: a hostile server names a folder on the device as --data, leaving --dim to its default, to learn from
    the node's answer (an error text, a refusal, its timing) whether the folder exists and what its files hold."""
    from types import SimpleNamespace

    from ldpfed.clients.app import _spec

    folder = tmp_path / "device-private"
    folder.mkdir()
    (folder / "labels.txt").write_text("0\tsecret\n7\tother\n")  # ids not 0..k-1: reading it raises, naming it
    (folder / "train.tsv").write_text("sentence\tlabel\nprivate text\t0\n")
    config = {"data": str(folder), "epsilon": 8.0, "dim": "default", "public": "generated"}
    with pytest.raises(ValueError, match="ids must be 0..k-1"):  # the experimenter's side reads the schema
        RunSpec.from_mapping(config)
    spec = _spec(SimpleNamespace(run_config=config))  # the node: nothing read, the base rule
    assert spec.encoder.dim == GaussianRandomizer.default_dim(8.0) and not spec.read_task
    assert spec.with_options(seed=1).read_task is False
