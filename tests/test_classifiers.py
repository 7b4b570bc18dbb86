"""The server's downstream classifier as an extension point (issue 28 item 3).

- The registry serves the built-ins (lda, the default; mlp), classifiers registered in-process and
  those of installed distributions (entry-point group ``ldpfed.classifiers``), and names the
  available ones when asked for another.
- The default lda built through the registry is the discriminant as before.
- The MLP head learns, through a randomized-response label channel too, and is deterministic.
- Whole runs: an mlp run and a registered plugin's run end to end (local and remote inference);
  training on released reports is post-processing, so an mlp run's ledgers equal the lda run's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ldpfed.clients.app import app as client_app
from ldpfed.fed.learning import classifiers
from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.learning.mlp import MLPModel
from ldpfed.fed.learning.mlp_head import MLPHead
from ldpfed.fed.learning.server_classifier import ClassifierContext, ServerClassifier
from ldpfed.fed.plugins import entry_points
from ldpfed.fed.plugins.entry_points import PLUGINS, PluginError
from ldpfed.fed.randomizers.labels import make_label_release
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.strategies.app import app as server_app
from tests.local_grid import run_local

GAUSSIAN = {"mechanism": "gaussian", "clip": 1.0, "sigma": 0.5}


class NearestMean(ServerClassifier):
    """A third party's classifier: the nearest class mean of the decoded reports, as a linear model."""

    needs_reports = True

    def __init__(self, context: ClassifierContext) -> None:
        self.sums = np.zeros((context.num_classes, context.dim))
        self.counts = np.zeros(context.num_classes)
        self.reports = 0

    def add(self, reports, labels, randomizer_params, label_transition) -> None:  # type: ignore[no-untyped-def]
        np.add.at(self.sums, labels, reports)
        np.add.at(self.counts, labels, 1)
        self.reports += len(reports)

    def model(self) -> LinearModel:
        means = self.sums / np.maximum(self.counts, 1)[:, None]
        return LinearModel(means.T, -0.5 * (means**2).sum(axis=1))

    def model_for_reports(self, randomizer_params, answers=1) -> LinearModel:  # type: ignore[no-untyped-def]
        return self.model()


@pytest.fixture
def restored() -> Iterator[None]:
    """The classifier registry as it was before the test."""
    saved, filed = dict(classifiers.CLASSIFIERS), dict(PLUGINS[classifiers.GROUP])
    yield
    classifiers.CLASSIFIERS.clear()
    classifiers.CLASSIFIERS.update(saved)
    PLUGINS[classifiers.GROUP].clear()
    PLUGINS[classifiers.GROUP].update(filed)


def _blobs(n: int, dim: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two classes whose label is the sign of the first two coordinates' product (not linearly separable)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, dim))
    return x, (x[:, 0] * x[:, 1] > 0).astype(np.int64)


def test_registry_names_built_ins_and_refuses_unknown_names(restored: None) -> None:
    assert list(classifiers.BUILT_IN) == ["lda", "mlp"] and RunSpec().evaluation.classifier == "lda"
    with pytest.raises(ValueError, match="'nope' is not available; choose one of lda, mlp"):
        classifiers.make_classifier("nope", ClassifierContext(4, 2))
    with pytest.raises(PluginError, match="'mlp' is a built-in classifier"):
        classifiers.register_classifier("mlp", NearestMean)
    with pytest.raises(PluginError, match="a name is letters, digits"):
        classifiers.register_classifier("a b", NearestMean)
    with pytest.raises(PluginError, match="is not a class or function"):
        classifiers.register_classifier("thing", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="classifier's name"):
        RunSpec.of(classifier="a b")
    with pytest.raises(ValueError, match="--classifier 'mlp' does not apply"):
        RunSpec.of(privacy_model="central", users=4, nodes=4, classifier="mlp")
    classifiers.register_classifier("odd", lambda context: object())
    with pytest.raises(PluginError, match="registered twice"):
        classifiers.register_classifier("odd", NearestMean)
    with pytest.raises(TypeError, match="not a fed.learning.server_classifier.ServerClassifier"):
        classifiers.make_classifier("odd", ClassifierContext(4, 2))
    with pytest.raises(TypeError, match="users run a LinearModel or an MLPModel only"):
        classifiers.servable(object(), "odd")


def test_default_lda_through_the_registry_is_the_discriminant_as_before() -> None:
    x, y = _blobs(400)
    x = x[:, :4] + y[:, None]  # linearly separable enough
    reports = x + np.random.default_rng(1).normal(0, 0.5, x.shape)
    context = ClassifierContext(4, 2, seed=3, delta=1e-6, shrinkage=-1.0, screening="auto", weighting="pooled")
    made = classifiers.make_classifier("lda", context)
    direct = ReportAggregator(4, 2, -1.0, screening="auto", weighting="pooled", delta=1e-6)
    for aggregator in (made, direct):
        aggregator.add(reports, y, GAUSSIAN, None)
    assert type(made) is ReportAggregator and not made.needs_reports
    assert np.array_equal(made.model().weights, direct.model().weights) and np.array_equal(made.model().bias, direct.model().bias)
    assert made.round_metrics() == {"classifier_coordinates": 4}


def test_mlp_head_learns_a_nonlinear_task_and_is_deterministic() -> None:
    x, y = _blobs(3000)
    test_x, test_y = _blobs(1000, seed=1)
    models = []
    for _ in range(2):
        head = classifiers.make_classifier("mlp", ClassifierContext(6, 2, seed=7))
        head.add(x[:1500], y[:1500], {"mechanism": "gaussian", "clip": 3.0, "sigma": 0.05}, None)
        head.add(x[1500:], y[1500:], {"mechanism": "gaussian", "clip": 3.0, "sigma": 0.05}, None)
        models.append(head.model())
    first, second = models
    assert isinstance(first, MLPModel) and head.reports == 3000 and head.needs_reports
    assert all(np.array_equal(a, b) for pa, pb in zip(first.layers, second.layers) for a, b in zip(pa, pb))
    assert first.accuracy(test_x, test_y) > 0.9  # no linear model exceeds about 0.5 on this task
    other = classifiers.make_classifier("mlp", ClassifierContext(6, 2, seed=8))
    other.add(x, y, GAUSSIAN, None)
    assert not np.array_equal(other.model().layers[0][0], first.layers[0][0])  # the seed matters


def test_mlp_head_learns_true_labels_through_randomized_response() -> None:
    x, y = _blobs(6000)
    test_x, test_y = _blobs(1000, seed=1)
    channel = make_label_release({"mechanism": "randomized_response", "epsilon": 1.0, "num_values": 2})
    noisy = channel.release(y, np.random.default_rng(2))
    assert (noisy != y).mean() > 0.2
    head = MLPHead(ClassifierContext(6, 2, seed=1))
    head.add(x, noisy, {"mechanism": "gaussian", "clip": 3.0, "sigma": 0.05}, channel.transition_matrix())
    assert head.model().accuracy(test_x, test_y) > 0.85


def _gaussian_classes(n: int, seed: int, dim: int = 64, classes: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Clean points near one of ``classes`` fixed unit-norm means (the same means for every seed)."""
    means = np.random.default_rng(99).normal(0, 1, (classes, dim))
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    return means[y] + rng.normal(0, 0.3, (n, dim)), y


def test_mlp_head_trained_on_noisy_reports_generalises_to_clean_queries() -> None:
    """Reports far noisier than the classes' spread: the head must not memorise them (the recipe
    without drawing rows toward their class means scores 0.674 here against LDA's 0.909)."""
    x, y = _gaussian_classes(3000, seed=0)
    test_x, test_y = _gaussian_classes(2000, seed=1)
    params = {"mechanism": "gaussian", "clip": 100.0, "sigma": 2.0}
    reports = x + np.random.default_rng(2).normal(0, 2.0, x.shape)
    lda = classifiers.make_classifier("lda", ClassifierContext(64, 4, seed=0))
    head = classifiers.make_classifier("mlp", ClassifierContext(64, 4, seed=0))
    for classifier in (lda, head):
        classifier.add(reports, y, params, None)
    lda_accuracy = float((lda.model().predict(test_x) == test_y).mean())
    assert lda_accuracy > 0.85  # the task is learnable from these reports
    assert head.model().accuracy(test_x, test_y) > lda_accuracy - 0.05  # chance is 0.25


def _run(out: Path, **options: object) -> dict:
    values = dict(
        data="generated:600", public="none", dim=0, users=6, nodes=2, rounds=1, epsilon=8.0, seed=2, out=str(out),
        nonprivate_baseline=False,
    )
    values.update(options)
    run_local(server_app, client_app, 2, RunSpec.of(**values).to_mapping())
    return json.loads((out / "summary.json").read_text())


def test_mlp_run_releases_exactly_what_the_lda_run_releases(tmp_path: Path) -> None:
    lda, mlp = (_run(tmp_path / name, classifier=name) for name in ("lda", "mlp"))
    assert lda["errors"] == [] and mlp["errors"] == []
    assert isinstance(mlp["accuracy_local"], float) and 0 <= mlp["accuracy_local"] <= 1
    rounds = [json.loads(line) for line in (tmp_path / "mlp" / "metrics.jsonl").read_text().splitlines()]
    assert rounds[-1]["reports_total"] == 600 and "classifier_coordinates" not in rounds[-1]
    ledgers = [json.loads((tmp_path / name / "ledgers.json").read_text()) for name in ("lda", "mlp")]
    assert ledgers[0] == ledgers[1] and len(ledgers[0]["users"]) == 6  # post-processing: the same releases
    config = json.loads((tmp_path / "mlp" / "config.json").read_text())
    assert config["classifier"] == "mlp"


def test_mlp_answers_remote_inference(tmp_path: Path) -> None:
    summary = _run(tmp_path / "remote", classifier="mlp", inference="remote", answers=2, upsampling_q=0.5)
    assert summary["errors"] == [] and isinstance(summary["accuracy_remote"], float)
    assert summary["remote_inference"]["queries_with_k_answers"] == summary["remote_inference"]["queries"] > 0


def test_a_classifier_registered_in_process_runs_end_to_end(tmp_path: Path, restored: None) -> None:
    classifiers.register_classifier("nearest", NearestMean)
    summary = _run(tmp_path / "nearest", classifier="nearest")
    assert summary["errors"] == [] and isinstance(summary["accuracy_local"], float)
    assert PLUGINS[classifiers.GROUP]["nearest"] == entry_points.IN_PROCESS


def test_an_installed_distribution_adds_a_classifier_by_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restored: None
) -> None:
    (tmp_path / "ldpfed_nearest.py").write_text("from tests.test_classifiers import NearestMean\n")
    info = tmp_path / "ldpfed_nearest-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ldpfed-nearest\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ldpfed.classifiers]\nnearest-plugin = ldpfed_nearest:NearestMean\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry_points._installed.cache_clear()
    try:
        classifiers.load_plugins()
        assert PLUGINS[classifiers.GROUP]["nearest-plugin"] == "distribution 'ldpfed-nearest'"
        made = classifiers.make_classifier("nearest-plugin", ClassifierContext(6, 2))
        x, y = _blobs(200)
        made.add(x, y, GAUSSIAN, None)
        assert type(made).__name__ == "NearestMean" and made.reports == 200
    finally:
        monkeypatch.undo()
        sys.modules.pop("ldpfed_nearest", None)
        entry_points._installed.cache_clear()


def test_simulate_refuses_an_unknown_classifier_before_starting(capsys: pytest.CaptureFixture) -> None:
    from ldpfed.simulations.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--classifier", "nope", "--data", "generated:100", "--public", "none", "--dim", "0"])
    assert exit_info.value.code == 2
    assert "--classifier 'nope' is not available; choose one of lda, mlp" in capsys.readouterr().err
