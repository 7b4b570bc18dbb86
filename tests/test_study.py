"""ldpfed study: config validation, grid expansion, resume, report aggregation (fake run directories, no simulation)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ldpfed.simulations.cli import main
from ldpfed.simulations.study import ALL, MARKER, StudyRun, load_study, run_name, run_state, run_study, simulate_command
from ldpfed.simulations.study_report import aggregate, read_run, write_report

CONFIGS = Path(__file__).resolve().parents[1] / "simulations" / "configs" / "studies"
STUDY = """
seeds = [0, 1]
group_by = "tier"

[base]
users = 4
rounds = 1

[axes]
partition = ["dirichlet:0.05", "iid"]
epsilon = [1, 8.0]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def _fake_run(out: Path, run: StudyRun, accuracy: float, epsilon: float, users_csv: str | None = None) -> Path:
    """A run directory as a finished ``ldpfed simulate`` run and the study leave it."""
    directory = out / run.name
    directory.mkdir(parents=True)
    summary = {"accuracy_local": accuracy, "accuracy_top_tier_only": accuracy - 0.1, "epsilon_sentence_max": epsilon}
    summary.update(releases=100, users=4)
    (directory / "summary.json").write_text(json.dumps(summary))
    (directory / MARKER).write_text(json.dumps({"options": run.options, "seconds": 2.0}))
    if users_csv is not None:
        (directory / "users.csv").write_text(users_csv)
    return directory


def test_the_grid_is_the_product_of_the_axes_times_the_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study = load_study(_write(tmp_path, STUDY))
    runs = study.runs()
    assert len(runs) == 2 * 2 * 2
    assert runs[0].options == {"users": 4, "rounds": 1, "partition": "dirichlet:0.05", "epsilon": 1, "seed": 0}
    assert [r.name for r in runs[:3]] == [
        "partition=dirichlet-0.05__epsilon=1__seed=0",
        "partition=dirichlet-0.05__epsilon=1__seed=1",
        "partition=dirichlet-0.05__epsilon=8.0__seed=0",
    ]
    assert len({r.name for r in runs}) == len(runs)
    assert study.group_by == ("tier",)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sst2").mkdir()
    options = {"data": "sst2", "public": "generated", "partition": "dirichlet:0.5", "nonprivate_baseline": False, "seed": 2}
    assert simulate_command(options, tmp_path)[-6:] == [
        f"--data={tmp_path / 'sst2'}", "--public=generated", "--partition=dirichlet:0.5", "--no-nonprivate-baseline",
        "--seed=2", f"--out={tmp_path}",
    ]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("[axes]\nepsilonn = [1, 2]\n", "unknown run option 'epsilonn' in [axes] (did you mean 'epsilon'?); valid options: "),
        ("[base]\nfoo = 1\n", "unknown run option 'foo' in [base]"),
        ("seed = [0]\n", "unknown key 'seed'; a study has title, description, seeds"),
        ("[base]\nseed = 3\n", "list the seeds as seeds = [...]"),
        ("[base]\nout = 'x'\n", "the study names each run directory"),
        ("[base]\nepsilon = 1\n[axes]\nepsilon = [2]\n", "'epsilon' is both in [base] and in [axes]"),
        ("[axes]\nepsilon = 3\n", "[axes] epsilon must be a non-empty list"),
        ("[axes]\nepsilon = [3, 3]\n", "lists a value twice"),
        ("seeds = []\n", "seeds must be a non-empty list of distinct integers"),
        ("[axes]\nepsilon = [1, -2]\n", "run epsilon=-2__seed=0: give --epsilon > 0 (sigma calibrated) or --sigma > 0"),
        ("[axes]\nlabels = ['public', 'rr:x']\n", "run labels=rr-x__seed=0: --labels must be 'public' or 'rr:<epsilon>'"),
        ("[axes]\nusers = ['many']\n", "run option 'users' must be of type int"),
        ("[axes]\nlabels = ['rr:1', 'rr 1']\n", "get the same run directory 'labels=rr-1__seed=0'"),
        ("baselines = ['accuracy_oracle']\n", "baselines must be a list of accuracy_combined, accuracy_local_denoised, accuracy_nonprivate, "),
    ],
    ids=["unknown-axis", "unknown-base", "unknown-key", "seed", "out", "twice", "scalar-axis", "duplicate-value",
         "no-seeds", "bad-value", "bad-labels", "bad-type", "name-clash", "bad-baseline"],
)
def test_a_bad_config_is_refused_before_anything_runs(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ValueError) as error:
        load_study(_write(tmp_path, text))
    assert expected in str(error.value)


def test_the_command_line_reports_a_bad_config_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["study", str(_write(tmp_path, "[axes]\nepsilonn = [1]\n")), "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert "unknown run option 'epsilonn'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_example_studies_validate() -> None:
    skew = load_study(CONFIGS / "sst2_label_skew.toml")
    assert len(skew.runs()) == 15 and skew.axes["partition"][0] == "dirichlet:0.05"
    tiers = load_study(CONFIGS / "sst2_tiers.toml")
    assert len(tiers.runs()) == 15 and tiers.axes["tiers"][0] == "1:1"
    weighting = load_study(CONFIGS / "sst2_weighting.toml")
    assert len(weighting.runs()) == 9 and weighting.baselines == ("accuracy_top_tier_only",)


def test_a_rerun_runs_only_what_is_not_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study = load_study(_write(tmp_path, STUDY))
    out = tmp_path / "out"
    runs = study.runs()
    _fake_run(out, runs[0], 0.7, 1.0)  # complete
    (out / runs[1].name).mkdir()  # started, never finished: no marker, no summary
    (out / runs[1].name / "metrics.jsonl").write_text("")
    changed = _fake_run(out, runs[2], 0.7, 1.0)  # finished with other options (the config changed since)
    (changed / MARKER).write_text(json.dumps({"options": {**runs[2].options, "users": 5}}))
    assert [run_state(out / r.name, r) for r in runs[:4]] == ["complete", "incomplete", "changed", "missing"]

    commands = []

    def fake_simulate(command: list[str], **_: object) -> subprocess.CompletedProcess:
        """``ldpfed simulate`` as seen from the study: a summary, or exit 1 for the last run."""
        commands.append(command)
        directory = Path(command[-1].removeprefix("--out="))
        assert list(directory.iterdir()) == [directory / "simulate.log"]  # an unfinished run starts afresh
        failing = directory.name == runs[-1].name
        if not failing:
            (directory / "summary.json").write_text(json.dumps({"accuracy_local": 0.5}))
        return subprocess.CompletedProcess(command, 1 if failing else 0)

    monkeypatch.setattr("ldpfed.simulations.study.processes.run", fake_simulate)
    done = []
    failures = run_study(study, out, lambda run: None, lambda run, result: done.append((run.name, result)), "alone")
    assert [c[-1] for c in commands] == [f"--out={out / r.name}" for r in runs[1:]]
    assert "--seed=1" in commands[0] and "--partition=dirichlet:0.05" in commands[0]
    assert done[0] == (runs[0].name, "done before") and done[1][1].startswith("accuracy 0.5000 in ")
    assert len(failures) == 1 and f"run {runs[-1].name} failed (exit 1)" in failures[0]
    assert [run_state(out / r.name, r) for r in runs] == ["complete"] * (len(runs) - 1) + ["incomplete"]

    commands.clear()
    run_study(study, out, lambda run: None, lambda run, result: None, "alone")
    assert [c[-1] for c in commands] == [f"--out={out / runs[-1].name}"]


USERS = """user,node,tier,label_skew_quantile,releases,epsilon_sentence,epsilon_user,queries_evaluated,accuracy_private
0,1,epsilon 1,Q1: 0.01-0.2 TV,10,1,5,2,0.5
1,1,epsilon 1,Q2: 0.2-0.3 TV,10,0.9,4,0,
2,1,epsilon 8,Q1: 0.01-0.2 TV,20,8,30,2,1
3,1,epsilon 8,Q2: 0.2-0.3 TV,30,7.5,40,4,0.75
"""


def test_the_report_gives_mean_and_range_over_seeds_per_cell_and_group(tmp_path: Path) -> None:
    study = load_study(_write(tmp_path, STUDY))
    out = tmp_path / "out"
    runs = study.runs()
    _fake_run(out, runs[0], 0.70, 1.0, USERS)
    _fake_run(out, runs[1], 0.80, 1.2, USERS.replace(",0.75\n", ",0.25\n"))
    _fake_run(out, runs[2], 0.60, 8.0)  # no users.csv: whole-run figures only
    results = [read_run(out / r.name, r, study.group_by) for r in runs[:3]]
    rows = aggregate(study, results)
    assert [(r.cell["epsilon"], r.group, r.seeds) for r in rows] == [
        (1, ALL, [0, 1]), (1, "epsilon 1", [0, 1]), (1, "epsilon 8", [0, 1]), (8.0, ALL, [0]),
    ]
    whole, low, high = rows[0], rows[1], rows[2]
    assert whole.accuracy.mean == pytest.approx(0.75) and (whole.accuracy.low, whole.accuracy.high) == (0.7, 0.8)
    assert (whole.epsilon.low, whole.epsilon.high) == (1.0, 1.2)
    assert low.accuracy.mean == pytest.approx(0.5)  # user 1 has no queries: not in the mean
    assert (low.epsilon.mean, low.releases.mean, low.users.mean) == (1.0, 20.0, 4 / 2)
    assert high.accuracy.low == pytest.approx((1 + 0.25) / 2) and high.accuracy.high == pytest.approx((1 + 0.75) / 2)
    assert high.accuracy.mean == pytest.approx(0.75)

    regrouped = load_study(_write(tmp_path, STUDY.replace('"tier"', '"label_skew_quantile"')))
    result = read_run(out / runs[0].name, runs[0], regrouped.group_by)
    assert sorted(result.groups) == ["Q1", "Q2"]  # quartile labels are matched by key, not by their ranges
    assert result.labels["Q1"] == ["Q1: 0.01-0.2 TV"]


def test_report_only_writes_markdown_json_and_plots_from_existing_runs(tmp_path: Path) -> None:
    config = _write(tmp_path, STUDY.replace('group_by = "tier"', 'group_by = "tier"\nbaselines = ["accuracy_top_tier_only"]'))
    study = load_study(config)
    out = tmp_path / "out"
    for i, run in enumerate(study.runs()[:-1]):  # the last run is missing
        _fake_run(out, run, 0.5 + 0.01 * i, float(run.cell["epsilon"]), USERS if i % 2 else None)
    assert main(["study", str(config), "--out", str(out), "--report", str(tmp_path / "report"), "--report-only"]) == 0
    report = tmp_path / "report"
    text = (report / "study.md").read_text()
    assert "| accuracy: mean [min, max] | accuracy, largest-budget tier's reports alone | worst-case" in text
    row = "| dirichlet:0.05 | 1 | all users | 2 | 4 | 0.5050 [0.5000, 0.5100] | 0.4050 [0.4000, 0.4100] | 1 [1, 1] |"
    assert row + " 100 [100, 100] |" in text
    assert "| dirichlet:0.05 | 1 | epsilon 1 | 1 | 2 | 0.5000 [0.5000, 0.5000] | - | 1 [1, 1] |" in text
    assert "| iid | 8.0 | all users | 1 |" in text
    assert f"Not complete, left out: {study.runs()[-1].name}." in text
    assert sorted(p.name for p in report.glob("*.png")) == ["accuracy_epsilon.png", "accuracy_partition.png"]
    raw = json.loads((report / "study.json").read_text())
    assert len(raw["runs"]) == 7 and raw["missing"] == [study.runs()[-1].name]
    assert raw["rows"][0]["accuracy"] == {"mean": pytest.approx(0.505), "low": 0.5, "high": 0.51}
    assert raw["runs"][0]["baselines"] == {"accuracy_top_tier_only": pytest.approx(0.4)}


def test_report_only_without_runs_is_an_error(tmp_path: Path) -> None:
    study = load_study(_write(tmp_path, STUDY))
    with pytest.raises(ValueError, match="no complete run"):
        write_report(study, tmp_path / "out", tmp_path / "report", "ldpfed study x")


def test_run_names_keep_values_readable() -> None:
    assert run_name({"tiers": "0.5:1,0.3:3,0.2:8", "nonprivate_baseline": False}, 1) == (
        "tiers=0.5-1-0.3-3-0.2-8__nonprivate_baseline=false__seed=1"
    )


def test_dry_run_lists_every_run_with_its_state_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write(tmp_path, STUDY)
    runs = load_study(config).runs()
    _fake_run(tmp_path / "out", runs[0], 0.7, 1.0)
    for runner in ("ldpfed.simulations.study.processes.run", "ldpfed.simulations.study_worker.SharedRunner.run"):
        monkeypatch.setattr(runner, lambda *a, **k: pytest.fail("a dry run ran something"))
    assert main(["study", str(config), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"complete  {runs[0].name}" in lines[1] and f"missing  {runs[1].name}" in lines[2]
    assert not (tmp_path / "out" / "study.md").exists()


SETS = """
seeds = [0]
figures = ["epsilon_user_max", "epsilon_user_central"]

[base]
users = 4

[axes.task.small]
train_limit = 40
partition = "iid"

[axes.task.skewed]
train_limit = 80
partition = "dirichlet:0.5"

[axes.model.local]
epsilon = 0.5

[axes.model.central]
privacy_model = "central"
epsilon = 3
nodes = 4
"""


def test_an_axis_of_option_sets_takes_all_options_of_the_named_set(tmp_path: Path) -> None:
    study = load_study(_write(tmp_path, SETS))
    assert study.axes == {"task": ["small", "skewed"], "model": ["local", "central"]}
    runs = study.runs()
    assert [r.name for r in runs] == [
        "task=small__model=local__seed=0", "task=small__model=central__seed=0",
        "task=skewed__model=local__seed=0", "task=skewed__model=central__seed=0",
    ]
    assert runs[1].cell == {"task": "small", "model": "central"}
    assert runs[1].options == {
        "users": 4, "train_limit": 40, "partition": "iid", "privacy_model": "central", "epsilon": 3, "nodes": 4, "seed": 0,
    }


@pytest.mark.parametrize(
    "text,expected",
    [
        (SETS.replace("[base]\nusers = 4", "[base]\nepsilon = 1"), "'epsilon' is both in [base] and in [axes] model"),
        (SETS + "\n[axes.size.large]\ntrain_limit = 90\n", "'train_limit' is both in [axes] task and in [axes] size"),
        (SETS.replace("[axes.model.local]", "[axes.epsilon.local]"), "[axes] epsilon is a run option"),
        (SETS.replace("epsilon = 0.5", "epsilonn = 0.5"), "unknown run option 'epsilonn' in [axes.model.local]"),
        (SETS.replace("epsilon = 0.5", "epsilon = [0.5]"), "[axes.model.local] epsilon: values must be strings"),
        (SETS.replace('"epsilon_user_central"', '"epsilon_oracle"'), "figures must be a list of epsilon_user_max"),
    ],
    ids=["base-and-set", "two-axes", "axis-is-option", "unknown-option", "list-value", "bad-figure"],
)
def test_a_bad_option_set_is_refused(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ValueError) as error:
        load_study(_write(tmp_path, text))
    assert expected in str(error.value)


def test_the_report_names_option_sets_and_shows_privacy_figures(tmp_path: Path) -> None:
    config = _write(tmp_path, SETS)
    study = load_study(config)
    out = tmp_path / "out"
    for i, run in enumerate(study.runs()):
        directory = _fake_run(out, run, 0.6 + 0.1 * (i % 2), 1.0)
        summary = json.loads((directory / "summary.json").read_text())
        summary.update(epsilon_user_max=2.5 if run.cell["model"] == "local" else None, epsilon_user_central=3.0)
        (directory / "summary.json").write_text(json.dumps(summary))
    assert main(["study", str(config), "--out", str(out), "--report-only"]) == 0
    text = (out / "study.md").read_text()
    assert "- central: privacy_model = \"central\", epsilon = 3, nodes = 4" in text
    assert "| worst-case user-level epsilon (max over users) | user-level epsilon of DP-FedAvg | releases |" in text
    assert "| small | local | 1 | 4 | 0.6000 [0.6000, 0.6000] | 1 [1, 1] | 2.5 [2.5, 2.5] | 3 [3, 3] | 100 [100, 100] |" in text
    assert "| skewed | central | 1 | 4 | 0.7000 [0.7000, 0.7000] | 1 [1, 1] | - | 3 [3, 3] |" in text
    raw = json.loads((out / "study.json").read_text())
    assert raw["option_sets"]["task"]["skewed"] == {"train_limit": 80, "partition": "dirichlet:0.5"}


def test_a_report_takes_runs_recorded_by_an_earlier_report_of_the_same_study(tmp_path: Path) -> None:
    config = _write(tmp_path, STUDY.replace('group_by = "tier"', 'group_by = "tier"\nbaselines = ["accuracy_top_tier_only"]'))
    study = load_study(config)
    runs = study.runs()
    first, second = tmp_path / "first", tmp_path / "second"
    for i, run in enumerate(runs):  # seed 0 ran on one machine, seed 1 on another
        _fake_run(first if run.seed == 0 else second, run, 0.5 + 0.01 * i, float(run.cell["epsilon"]), USERS)
    earlier = tmp_path / "earlier"
    assert main(["study", str(config), "--out", str(first), "--report", str(earlier), "--report-only"]) == 0
    for i, run in enumerate(runs):
        if run.seed == 1:
            _fake_run(first, run, 0.5 + 0.01 * i, float(run.cell["epsilon"]), USERS)
    assert main(["study", str(config), "--out", str(first), "--report", str(tmp_path / "all"), "--report-only"]) == 0
    merged = tmp_path / "merged"
    args = ["study", str(config), "--out", str(second), "--report", str(merged), "--report-only"]
    assert main([*args, "--runs-from", str(earlier / "study.json")]) == 0
    raw, whole = (json.loads((folder / "study.json").read_text()) for folder in (merged, tmp_path / "all"))
    assert raw["missing"] == [] and raw["rows"] == whole["rows"] and len(raw["runs"]) == len(runs)
    assert raw["runs_from"] == {str(earlier / "study.json"): [run.name for run in runs if run.seed == 0]}
    text = (merged / "study.md").read_text()
    assert f"Taken from the earlier report `{earlier / 'study.json'}`" in text and "--runs-from" in text


def test_runs_recorded_by_another_study_are_refused(tmp_path: Path) -> None:
    study = load_study(_write(tmp_path, STUDY))
    for run in study.runs():
        _fake_run(tmp_path / "out", run, 0.5, 1.0)
    write_report(study, tmp_path / "out", tmp_path / "report", "ldpfed study x")
    other = load_study(_write(tmp_path, STUDY.replace("users = 4", "users = 5")))
    with pytest.raises(ValueError, match="base differ .*another study"):
        write_report(other, tmp_path / "empty", tmp_path / "report2", "ldpfed study x", [tmp_path / "report" / "study.json"])
