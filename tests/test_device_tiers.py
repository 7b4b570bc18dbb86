"""Device tiers (--device-tiers): users whose device encoder reads fewer tokens, reported per tier."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

import ldpfed.clients.app as client_module
from ldpfed.clients.app import app as client_app
from ldpfed.fed.runtime.assets import Assets, default_cache_dir
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.heterogeneity.device_tiers import DeviceTiers
from ldpfed.fed.encoders.factory import make_encoder
from ldpfed.fed.data.population import Population
from ldpfed.strategies.app import app as server_app
from tests.local_grid import run_local


@pytest.mark.parametrize(
    "spec,problem",
    [
        ("0.5:256,0.5", "share:tokens"),
        ("0.5:256,0.4:16", "sum to 1"),
        ("0.5:16,0.5:16", "its own tokens"),
        ("0.5:256,0.5:1", "at least 2; got '1'"),
        ("0.5:256,0.5:8.5", "integer number of tokens"),
    ],
)
def test_malformed_device_tiers_are_refused_by_name(spec: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"--device-tiers: .*{problem}"):
        RunSpec.of(device_tiers=spec)


def test_a_truncated_encoder_reads_fewer_tokens_and_shares_the_weights() -> None:
    encoder = make_encoder("minilm")
    short = encoder.truncated(6)
    long_text, short_text = ["the film drags on and on, yet the last twenty minutes are a joy to watch"], ["a joy"]
    assert short.fingerprint() != encoder.fingerprint() and short._model is encoder._model
    np.testing.assert_allclose(short.encode(short_text), encoder.encode(short_text), atol=1e-6)  # 4 tokens: all read
    assert np.abs(short.encode(long_text) - encoder.encode(long_text)).max() > 1e-2
    with pytest.raises(ValueError, match="reads 2 to 256 tokens, asked for 512"):
        encoder.truncated(512)
    assert encoder.max_length == 256 and encoder.fingerprint() == make_encoder("minilm").fingerprint()


def test_each_device_tier_encodes_with_its_setting_and_is_reported(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = RunSpec.of(
        data="generated:600", public="none", dim=0, users=10, nodes=1, device_tiers="0.5:256,0.5:4", out=str(out),
        nonprivate_baseline=False,
    )
    run_local(server_app, client_app, 1, config.to_mapping())
    tier_of = DeviceTiers.parse(config.heterogeneity.value("device_tiers")).assign(10, config.seed)
    with open(out / "users.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["device_tier"] for r in rows] == [["256 tokens", "4 tokens"][t] for t in tier_of]
    assert "device tier" in (out / "groups.md").read_text()

    # The node's clean records: each user's rows are its own tier's encodings of its sentences.
    (records,) = [records for key, (records, _, _) in client_module._RECORDS.items() if key[0] == config]
    population = Population.build(config.data, config.seed)
    assets = Assets(make_encoder("minilm"), None)
    full, short = (assets.features(population.train, default_cache_dir(config), max_tokens=k) for k in (None, 4))
    for uid, user in records.items():
        rows_of = population.train_parts[uid]
        expected, other = (short, full) if tier_of[uid] == 1 else (full, short)
        np.testing.assert_array_equal(user.train, expected[rows_of])
        assert not np.allclose(user.train, other[rows_of])
