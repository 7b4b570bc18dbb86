"""``--mechanism snd`` (Split-N-Denoise through a run): its noise, its ledger entry, a distinguishing
attack, the records it releases, the denoiser it ships, and what a hostile server may not choose."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution
from scipy import stats

from ldpfed.fed.runtime.assets import build_bundle, load_assets, pack, unpack
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.learning.denoiser import Denoiser
from ldpfed.fed.device.state import init_state
from ldpfed.fed.configuration.plan import encoder_spec, make_plan
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import MetricDPEvent
from ldpfed.fed.randomizers import split_denoise
from ldpfed.fed.randomizers.auditing import audit, build_for_audit
from ldpfed.fed.randomizers.split_denoise import DENOISER_FILE, SplitDenoiseRandomizer
from ldpfed.fed.runtime.requests import Refusal, RequestRefused, parse_release_request

TEXTS = ["the film was wonderful indeed", "an awful, boring evening", "what a lovely day it is"]


def test_the_noise_is_d_chi_on_every_token_and_the_release_is_clipped() -> None:
    length, d, eta = 3, 5, 2.0
    unclipped = SplitDenoiseRandomizer(1.0, eta, length, "minilm", post_clip=1e9)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, length * d))
    noise = (unclipped.release(x, rng) - unclipped.preprocess(x)).reshape(-1, d)
    norms = np.linalg.norm(noise, axis=1)
    assert stats.kstest(norms, stats.gamma(a=d, scale=1 / eta).cdf).pvalue > 1e-3  # radius Gamma(d, 1/eta)
    first = noise[:, 0] / norms  # a uniform direction's coordinate: (u + 1) / 2 ~ Beta((d-1)/2, (d-1)/2)
    assert stats.kstest((first + 1) / 2, stats.beta((d - 1) / 2, (d - 1) / 2).cdf).pvalue > 1e-3
    assert np.linalg.norm(unclipped.preprocess(x).reshape(-1, d), axis=1).max() <= 1.0 + 1e-12
    seeded = SplitDenoiseRandomizer(1.0, eta, length, "minilm")  # post_clip defaults to the clip (seed 003 eq. 3)
    assert np.linalg.norm(seeded.release(x, rng).reshape(-1, d), axis=1).max() <= 1.0 + 1e-12
    with pytest.raises(ValueError, match="token vectors"):
        seeded.release(x[:, :7], rng)


def test_the_ledger_entry_is_l_tokens_of_eta_times_the_diameter() -> None:
    randomizer = SplitDenoiseRandomizer(12.0, 0.5, 16, "minilm")
    assert randomizer.event == MetricDPEvent(eta=0.5, diameter=24.0, tokens=16)
    for releases in (1, 3):  # pure DP composes by summing: k x L x eta x 2C
        assert compose_epsilon({randomizer.event: releases}, 1e-5) == pytest.approx(releases * 16 * 0.5 * 24.0, rel=1e-6)
    options = SplitDenoiseRandomizer.run_options(12.0, 0, {"length": 16}, "minilm")
    calibrated = SplitDenoiseRandomizer.calibrated(8.0, 1e-5, 2, options)
    # Independently: 2 releases x 16 tokens, each pure (eta x 2C)-DP, composed by dp_accounting's PLD
    one = privacy_loss_distribution.from_privacy_parameters(common.DifferentialPrivacyParameters(calibrated.eta * 24.0, 0.0))
    assert one.self_compose(32).get_epsilon_for_delta(1e-5) == pytest.approx(8.0, rel=2e-2)
    assert compose_epsilon({calibrated.event: 2}, 1e-5) <= 8.0 * (1 + 1e-9)


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_a_distinguishing_attack_stays_within_epsilon(epsilon: float) -> None:
    case = build_for_audit("snd", epsilon, 1e-5, 3, {"clip": 1.0, "length": 4})
    result = audit(case, 1e-5, 40_000, np.random.default_rng(int(epsilon)))
    assert case.randomizer.event.epsilon == pytest.approx(epsilon, rel=1e-3)
    assert epsilon / 4 < result.lower_bound <= epsilon, result  # a real test, and within the claim


def test_the_run_releases_token_matrices_and_refuses_a_projection() -> None:
    config = RunSpec.of(mechanism="snd", dim=0, clip=12.0, epsilon=8.0, mechanism_options="length=16")
    assert encoder_spec(config) == "tokens:16:minilm"
    assert make_plan(config, 2).train.params()["encoder"] == "minilm"
    with pytest.raises(ValueError, match="--dim 0"):
        RunSpec.of(mechanism="snd", dim=16)
    with pytest.raises(ValueError, match="transformer"):
        RunSpec.of(mechanism="snd", dim=0, encoder="bilstm")


def test_the_mechanism_is_the_token_dchi_split_release_and_decodes_like_the_server_half() -> None:
    from ldpfed.fed.encoders.factory import make_encoder
    from ldpfed.fed.randomizers.token_level import TokenLevelRandomizer

    rows = make_encoder("tokens:16:minilm").encode(TEXTS)
    assert rows.shape == (3, 16 * 384)
    snd = SplitDenoiseRandomizer(12.3, 50.0, 16, "minilm")
    studied = TokenLevelRandomizer(make_encoder("minilm"), "token-dchi", 16, 50.0, clip=12.3, post_clip=12.3)
    clean, released = studied.split_release(TEXTS, None, np.random.default_rng(5))
    ours = snd.release(rows, np.random.default_rng(5))
    assert np.allclose(ours.reshape(3, 16, 384), released, atol=1e-4)
    assert np.allclose(snd.preprocess(rows).reshape(3, 16, 384), clean, atol=1e-5)
    assert np.allclose(snd.decode(ours)[0], studied.server_pass(released), atol=1e-4)
    assert np.allclose(snd.features(rows), studied.encode_clean(TEXTS), atol=1e-4)
    assert snd.decode(ours)[1] == 0.0 and snd.decode(ours[:0])[0].shape == (0, 384)


def _snd_config(tmp_path: Path, **extra: object) -> RunSpec:
    values = dict(mechanism="snd", dim=0, clip=12.0, epsilon=20000.0, mechanism_options="length=8", public="generated:120",
                  data="generated:200", cache_dir=str(tmp_path / "cache"))
    values.update(extra)
    return RunSpec.of(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    from ldpfed.fed.runtime.assets import load_public

    tmp = tmp_path_factory.mktemp("snd-bundle")
    config = _snd_config(tmp)
    return build_bundle(config, load_public(config), tmp / "cache")


def _files(bundle: np.ndarray) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(bundle.tobytes())) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]


def _folder(files: dict[str, bytes], tmp: Path) -> Path:
    source = tmp / "files"
    for name, data in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(data)
    return source


def test_the_bundle_ships_a_denoiser_of_the_records_shape_that_denoises(bundle: np.ndarray, tmp_path: Path) -> None:
    folder = unpack(bundle, tmp_path)
    assets = load_assets(folder)
    assert (folder / "encoder.txt").read_text() == "tokens:8:minilm"
    assert assets.denoiser is not None and (assets.denoiser.shape.length, assets.denoiser.shape.dim) == (8, 384)
    assert assets.sentence.dim == 384 and assets.encoder.dim == 8 * 384
    rows = assets.encoder.encode(TEXTS)
    snd = SplitDenoiseRandomizer(12.0, 20.0, 8, "minilm")
    denoised = snd.denoised(rows, assets.denoiser, np.random.default_rng(1))
    assert denoised.shape == (3, 384) and np.isfinite(denoised).all()


def test_a_hostile_denoiser_is_refused_before_anything_is_written(bundle: np.ndarray, tmp_path: Path) -> None:
    files = _files(bundle)
    good = Denoiser.from_bytes(files[DENOISER_FILE])
    poisoned = Denoiser(good.shape)
    poisoned.load_state_dict(good.state_dict())
    with torch.no_grad():
        poisoned.out.bias[0] = float("nan")
    wider = Denoiser(type(good.shape)(dim=384, length=16))
    cases = {
        "NaN": {**files, DENOISER_FILE: poisoned.to_bytes()},
        "tokens:16": {**files, DENOISER_FILE: wider.to_bytes()},  # 16 tokens against a spec of 8
        "not a safetensors": {**files, DENOISER_FILE: b"\x80\x04K\x01." * 10},  # a pickle
        "encoder.txt 'tokens": {**files, "encoder.txt": b"minilm"},  # a denoiser beside sentence vectors
    }
    for i, (message, bad) in enumerate(cases.items()):
        cache = tmp_path / f"cache-{i}"
        with pytest.raises(ValueError, match=message):
            unpack(pack(_folder(bad, tmp_path / f"src-{i}")), cache)
        assert not (cache / "assets").exists() or not any((cache / "assets").iterdir())


def test_a_server_may_not_choose_what_the_user_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(spec: str) -> None:
        raise AssertionError(f"loaded {spec!r} for a refused request")

    monkeypatch.setattr(split_denoise, "_transformer", never)
    plan = make_plan(_snd_config(tmp_path), 2)
    limits = plan.limits("train")
    own = plan.train.params()
    assert dict(limits.pinned) == {"encoder": "minilm", "length": 8}
    for key, value in (("encoder", str(tmp_path / "model-with-a-pickle")), ("length", 9)):
        hostile = {**own, key: value}
        request = {"users": [0], "records": 1, "sampling": limits.sampling, "randomizer": json.dumps(hostile)}
        with pytest.raises(RequestRefused, match=key) as refused:
            parse_release_request(request, limits)
        assert refused.value.code == Refusal.POLICY
    request = {"users": [0], "records": 1, "sampling": limits.sampling, "randomizer": json.dumps(own)}
    assert parse_release_request(request, limits).randomizer.params() == own


def test_public_data_is_needed_to_train_the_denoiser(tmp_path: Path) -> None:
    config = _snd_config(tmp_path, public="none")
    with pytest.raises(ValueError, match="needs public data"):
        build_bundle(config, None, tmp_path)



def test_a_device_refuses_a_bundle_that_does_not_fit_its_snd_run(tmp_path: Path) -> None:
    from flwr.app import Message

    from ldpfed.fed import protocol
    from ldpfed.clients.app import FLOWER, app as client_app
    from ldpfed.simulations.local_grid import LocalGrid
    from tests.conftest import write_review_folder

    (tmp_path / "data").mkdir()
    data = write_review_folder(tmp_path / "data", {"train": 8, "dev": 4}, "record ", seed=1)
    policy = tmp_path / "policy.toml"
    policy.write_text('epsilon_sentence = 20000.0\nepsilon_user = inf\nmechanisms = ["snd"]\n')
    run = _snd_config(tmp_path, data="generated:400", public="none", users=1, nodes=1).to_mapping()
    node = {"data": str(data), "state-dir": str(init_state(tmp_path / "state")), "policy": str(policy)}
    grid = LocalGrid(client_app, 1, run, engine=False, node_configs=[node])
    for spec, reason in (("minilm", "not the run's"), ("tokens:8:minilm", DENOISER_FILE)):
        folder = tmp_path / f"bundle-{len(spec)}"
        folder.mkdir()
        (folder / "encoder.txt").write_text(spec)
        (reply,) = grid.send_and_receive([Message(FLOWER(protocol.setup_request(pack(folder))), dst_node_id=1000, message_type=protocol.SETUP)])
        refused = protocol.read_refusal(reply.content)
        assert refused is not None and refused[0] == Refusal.POLICY and reason in refused[1], refused
