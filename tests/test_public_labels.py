"""Issue 42 item 2: public data whose labels are not known to be the task's is never used as labelled data.

A 4-class folder without labels.txt and the default ``--public generated`` (4 topics) used to count as
``labels_match: true``: the generated topics were mapped onto the task's ids, a public-only figure was
reported that meant nothing and the classifier took its class means and shrinkage target from them.
Now both sides must name their labels, with the same names; a side without names gets the public data
for what needs no labels only (the projection), and the warning says which. A dev label that the train
split never has, with no labels.txt to name it, is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed.data.corpus import LABEL_NAMES, generate_public_corpus
from ldpfed.fed.data.population import Population
from ldpfed.fed.runtime.assets import check_public
from ldpfed.fed.configuration.run_spec import RunSpec


def _four_class_folder(folder: Path, train: int = 120, dev: int = 40, dev_label: int | None = None) -> Path:
    """A 4-class TSV folder (labels 0..3) without labels.txt; ``dev_label``: one dev record with that label."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    words = ("ball game team", "phone chip code", "bread soup meal", "bank loan stock")
    for split, n in (("train", train), ("dev", dev)):
        rows = ["sentence\tlabel"]
        for i in range(n):
            label = int(rng.integers(4))
            rows.append(f"{split} record {i} about {words[label]}\t{label}")
        if split == "dev" and dev_label is not None:
            rows.append(f"dev record about something else\t{dev_label}")
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return folder


def test_unnamed_task_labels_never_match_the_generated_topics_whatever_their_count(tmp_path: Path) -> None:
    data = _four_class_folder(tmp_path / "task")
    config = RunSpec.of(data=str(data), public="generated:60")
    check = check_public(config, generate_public_corpus(60), ("0", "1", "2", "3"))
    assert check.labels_match is False and check.to_json()["labels_named"] is False
    (warning,) = check.warnings
    assert f"{data} (4 labels: 0, 1, 2, 3, no labels.txt)" in warning and "have no names" in warning
    assert "not known to be the task's" in warning and "no public-only baseline" in warning
    assert "projection to 32 dimensions (--dim) still comes from it" in warning and "labels.txt" in warning
    # both sides unnamed, same count: not known either
    public = generate_public_corpus(60)
    public = type(public)(public.name, public.texts, None, public.labels, ("0", "1", "2", "3"))
    assert check_public(config, public, ("0", "1", "2", "3")).labels_match is False
    # named on both sides, the same names: used as labelled data, no warning
    (data / "labels.txt").write_text("".join(f"{i}\t{name}\n" for i, name in enumerate(LABEL_NAMES)))
    named = check_public(config, generate_public_corpus(60), LABEL_NAMES)
    assert named.labels_match is True and named.warnings == () and named.to_json()["labels_named"] is True


def test_the_server_uses_unnamed_public_labels_for_nothing_and_named_ones_from_the_tasks_schema(tmp_path: Path) -> None:
    """The ServerApp's check, without the non-private baseline (it reads no task record): the nodes tell the
    label count, the task's labels.txt (its schema) names them."""
    from ldpfed.strategies.app import _public_check

    data = _four_class_folder(tmp_path / "task")
    config = RunSpec.of(data=str(data), public="generated:60", nonprivate_baseline=False)
    check = _public_check(config, None, generate_public_corpus(60), num_labels=4)
    assert check.labels_match is False and "have no names" in check.warnings[0]
    (data / "labels.txt").write_text("".join(f"{i}\t{name}\n" for i, name in enumerate(LABEL_NAMES)))
    check = _public_check(config, None, generate_public_corpus(60), num_labels=4)
    assert check.labels_match is True and check.warnings == ()


def test_a_run_on_unnamed_labels_reports_no_public_only_figure(tmp_path: Path) -> None:
    """A whole run (ServerApp and ClientApp in one process): no public-only accuracy, labels_match false,
    the warning in the summary; the projection still fitted on the public data."""
    from ldpfed.clients.app import app as client_app
    from ldpfed.strategies.app import app as server_app
    from tests.local_grid import run_local

    data = _four_class_folder(tmp_path / "task")
    out = tmp_path / "run"
    config = RunSpec.of(data=str(data), public="generated:200", users=4, dim=8, out=str(out), nonprivate_baseline=False)
    run_local(server_app, client_app, 1, config.to_mapping())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accuracy_public_only"] is None
    assert summary["public_data"]["labels_match"] is False and summary["public_data"]["labels_named"] is False
    assert any("have no names" in text for text in summary["warnings"])


def test_a_dev_label_the_train_split_never_has_is_refused_without_labels_txt(tmp_path: Path) -> None:
    data = _four_class_folder(tmp_path / "task", dev_label=7)
    with pytest.raises(ValueError, match=r"the dev split holds label 7, which the train split never has \(its labels are 0..3\)"):
        Population.build(RunSpec.of(data=str(data), users=4).data, seed=0)
    (data / "labels.txt").write_text("".join(f"{i}\tclass{i}\n" for i in range(8)))  # named: label 7 is a known class
    population = Population.build(RunSpec.of(data=str(data), users=4).data, seed=0)
    assert population.dev.num_labels == population.train.num_labels == 8
