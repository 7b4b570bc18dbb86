"""--dim auto: the server chooses the projection on public data alone, by simulating the run's noisy reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ldpfed.clients.app import app as client_app
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.configuration.sections import DIM_AUTO
from ldpfed.fed.runtime.auto_dim import MIN_PUBLIC, choose_dim
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.strategies.app import app as server_app
from tests.local_grid import run_local


def _public(rng: np.random.Generator, n: int = 2000, dim: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """Two classes apart along one of the two leading directions (variance 9 there, 1 in the other 46)."""
    labels = rng.integers(0, 2, n)
    x = rng.normal(size=(n, dim)) * np.r_[3.0, 3.0, np.ones(dim - 2)]
    x[:, 0] += np.where(labels == 1, 2.0, -2.0)
    return x.astype(np.float32), labels


@pytest.mark.parametrize("related", [True, False])
def test_little_noise_keeps_every_dimension_and_much_noise_projects(related: bool) -> None:
    x, y = _public(np.random.default_rng(0))
    quiet = choose_dim(x, y, 2, GaussianRandomizer(clip=20.0, sigma=0.01), reports=5000, related=related)
    loud = choose_dim(x, y, 2, GaussianRandomizer(clip=20.0, sigma=160.0), reports=5000, related=related)
    assert loud.dim > 0 and loud.accuracy[loud.dim] > loud.accuracy[0] + 0.05, loud
    if related:  # the best simulated dimension wins
        assert quiet.accuracy[quiet.dim] == max(quiet.accuracy.values())
    else:  # unrelated public data: no projection while the full dimension is within the margin
        assert quiet.dim == 0, quiet


def test_too_little_public_data_gives_no_projection() -> None:
    x, y = _public(np.random.default_rng(1), n=MIN_PUBLIC - 1)
    assert choose_dim(x, y, 2, GaussianRandomizer(clip=1.0, sigma=1.0), 1000, related=True).dim == 0


def test_auto_is_opt_in_and_parses_once_and_explicit_dims_stay() -> None:
    assert RunSpec().encoder.dim == 32 and RunSpec().to_mapping()["dim"] == 32  # the default is not auto
    auto = RunSpec.from_mapping({"dim": "auto"})
    assert auto.encoder.dim == DIM_AUTO and auto.to_mapping()["dim"] == "auto"
    assert RunSpec.from_mapping(auto.to_mapping()) == auto  # written and read back as 'auto'
    assert RunSpec.from_mapping({"dim": "8"}).encoder.dim == 8 and RunSpec.of(dim=0).encoder.dim == 0
    assert RunSpec.of(dim=DIM_AUTO, public="none").encoder.dim == 0  # no public data: no projection, and no error
    assert RunSpec.of(dim=DIM_AUTO, mechanism="sue").encoder.dim == 16  # not simulated: the mechanism's default
    assert RunSpec.of(dim=DIM_AUTO, mechanism="snd").encoder.dim == 0  # takes no projection
    with pytest.raises(ValueError, match="--dim must be 'auto'"):
        RunSpec.of(dim=-3)
    with pytest.raises(ValueError, match="'dim' must be 'auto', 'default' or a whole number"):
        RunSpec.from_mapping({"dim": "automatic"})
    with pytest.raises(ValueError, match="--dim fits a projection"):
        RunSpec.of(public="none", dim=16)


def _auto_run(tmp_path: Path, data: str) -> tuple[dict, dict]:
    out = tmp_path / data.replace(":", "-")
    config = RunSpec.of(
        data=data, public="generated:300", users=4, epsilon=4.0, dim=DIM_AUTO, out=str(out), nonprivate_baseline=False
    )
    run_local(server_app, client_app, 1, config.to_mapping())
    return json.loads((out / "summary.json").read_text()), json.loads((out / "config.json").read_text())


def test_the_choice_reads_no_private_record(tmp_path: Path) -> None:
    """Two runs whose users hold different records (same count, same label names) make the same choice,
    down to every simulated accuracy: the choice is a function of public data and public counts only.
    The server (the adversary) learns nothing about a record from it, and nothing record-dependent
    leaves a device for it: the nodes only answer the setup (their users and record counts)."""
    first, first_config = _auto_run(tmp_path, "generated:600:1")
    second, second_config = _auto_run(tmp_path, "generated:600:2")
    assert first["dim_auto"] == second["dim_auto"], (first["dim_auto"], second["dim_auto"])
    choice = first["dim_auto"]
    assert choice["reports"] == 600 and choice["related"] is True and len(choice["accuracy"]) > 2
    assert first_config["dim"] == second_config["dim"] == choice["dim"]  # the run used the choice (config.json)
    assert first["accuracy_local"] != second["accuracy_local"]  # the records did differ


def test_a_large_run_is_simulated_with_fewer_reports_at_matching_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Class means of 4,000 reports at sigma 8 vary as those of 1,000 at sigma 4: the same simulation."""
    from ldpfed.fed.runtime import auto_dim

    monkeypatch.setattr(auto_dim, "MAX_SIMULATED", 1000)
    x, y = _public(np.random.default_rng(2))
    large = choose_dim(x, y, 2, GaussianRandomizer(clip=20.0, sigma=8.0), reports=4000, related=True)
    small = choose_dim(x, y, 2, GaussianRandomizer(clip=20.0, sigma=4.0), reports=1000, related=True)
    assert (large.reports, large.simulated, small.simulated) == (4000, 1000, 1000)
    assert large.accuracy == small.accuracy
