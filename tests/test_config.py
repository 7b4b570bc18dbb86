"""Run options: one source of truth for defaults, clear errors for bad values."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ldpfed.fed.configuration.config import HELP
from ldpfed.fed.heterogeneity.registry import axis_options
from ldpfed.fed.configuration.run_spec import ORDER, PLUGIN_OPTIONS, RunSpec, options, section_options

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_pyproject_app_config_lists_every_option_with_its_default() -> None:
    app_config = tomllib.loads(PYPROJECT.read_text())["tool"]["flwr"]["app"]["config"]
    assert RunSpec.from_mapping(app_config) == RunSpec()
    assert set(app_config) == {option.name.replace("_", "-") for option in options()} | {PLUGIN_OPTIONS}
    assert set(HELP) == set(section_options())  # a heterogeneity axis's options carry their own help
    assert not set(HELP) & {option.name for _, option in axis_options()}
    assert list(ORDER) == [option.name for option in options()]  # every option has its place in --help and config.json


@pytest.mark.parametrize(
    "values,message",
    [
        ({"users": 0}, "--users"),
        ({"evaluate_every": 0}, "--evaluate-every must be at least 1"),
        ({"labels": "rr:x"}, "--labels"),
        ({"epsilon": 0}, "--epsilon"),
        ({"nodes": 30, "users": 4}, "--nodes"),
        ({"inference": "psychic"}, "--inference"),
        ({"weighting": "size"}, "--weighting must be one of inverse-variance, epsilon, pooled"),
        ({"delta": 2.0}, "--delta"),
        ({"public": "none", "dim": 16}, "--dim"),
        ({"users": "many"}, "users"),
        ({"colour": "red"}, "unknown run option"),
    ],
)
def test_bad_options_name_the_problem(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunSpec.from_mapping(values)


def test_cli_reports_bad_options_without_a_traceback(capsys: pytest.CaptureFixture) -> None:
    from ldpfed.simulations.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--users", "0"])
    assert exit_info.value.code == 2
    assert "--users must be at least 1" in capsys.readouterr().err
