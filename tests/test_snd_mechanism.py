"""``--mechanism snd`` (Split-N-Denoise through a run, on the raw word-embedding rows): its noise, its ledger
entry, a distinguishing attack, the records it releases, the denoiser it ships, and what a hostile server may
not choose. The one class is also what the seed-003 reproduction runs (tests/test_word_split.py)."""

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
from ldpfed.fed.encoders.token_matrix import join_rows, split_rows
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import CoordinateMetricDPEvent, MetricDPEvent
from ldpfed.fed.randomizers import split_denoise
from ldpfed.fed.randomizers.auditing import audit, build_for_audit
from ldpfed.fed.randomizers.split_denoise import DENOISER_FILE, SplitDenoiseRandomizer
from ldpfed.fed.runtime.requests import Refusal, RequestRefused, parse_release_request

TEXTS = ["the film was wonderful indeed", "an awful, boring evening", "what a lovely day it is"]


def _records(rng: np.random.Generator, n: int, length: int, d: int, real: int | None = None, scale: float = 1.0) -> np.ndarray:
    """n records of ``real`` real rows (default: all) of width d, Gaussian of ``scale``, in snd's layout."""
    mask = np.zeros((n, length))
    mask[:, : length if real is None else real] = 1.0
    return join_rows(mask, rng.normal(scale=scale, size=(n, length, d)) * mask[:, :, None])


def _noise(randomizer: SplitDenoiseRandomizer, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    mask, clean = split_rows(randomizer.preprocess(x), randomizer.length)
    return (split_rows(randomizer.release(x, rng), randomizer.length)[1] - clean)[mask.astype(bool)]


def test_the_d_chi_noise_is_on_every_real_row_and_the_release_is_clipped() -> None:
    length, d, eta = 3, 5, 2.0
    unclipped = SplitDenoiseRandomizer(eta, length, "minilm", 1.0, 3.0, "dchi", post_clip=False)
    rng = np.random.default_rng(0)
    x = _records(rng, 3000, length, d)
    noise = _noise(unclipped, x, rng)
    norms = np.linalg.norm(noise, axis=1)
    assert stats.kstest(norms, stats.gamma(a=d, scale=1 / eta).cdf).pvalue > 1e-3  # radius Gamma(d, 1/eta)
    assert stats.kstest(norms, stats.gamma(a=d, scale=1.1 / eta).cdf).pvalue < 1e-4
    first = noise[:, 0] / norms  # a uniform direction's coordinate: (u + 1) / 2 ~ Beta((d-1)/2, (d-1)/2)
    assert stats.kstest((first + 1) / 2, stats.beta((d - 1) / 2, (d - 1) / 2).cdf).pvalue > 1e-3
    assert np.linalg.norm(split_rows(unclipped.preprocess(x), length)[1], axis=2).max() <= 1.0 + 1e-12
    seeded = SplitDenoiseRandomizer(eta, length, "minilm", 1.0, 3.0)  # post-clip to C (seed 003 eq. 3)
    assert np.linalg.norm(split_rows(seeded.release(x, rng), length)[1], axis=2).max() <= 1.0 + 1e-12
    with pytest.raises(ValueError, match="token positions"):
        seeded.release(x[:, :7], rng)


def test_the_coordinate_noise_is_the_authors_and_padding_is_neither_noised_nor_sent() -> None:
    length, d, eta = 4, 2, 3.0  # d = 2: every coordinate is exactly Laplace(1 / eta)
    randomizer = SplitDenoiseRandomizer(eta, length, "minilm", 1.0, 1.5, "coordinate", post_clip=False, hide_length=False)
    rng = np.random.default_rng(1)
    x = _records(rng, 3000, length, d, real=2)
    released = randomizer.release(x, rng)
    mask, rows = split_rows(released, length)
    assert np.array_equal(mask, split_rows(x, length)[0]) and np.all(rows[:, 2:] == 0)  # padding: zeros, mask as is
    noise = _noise(randomizer, x, rng).ravel()
    assert stats.kstest(noise, "laplace", args=(0, 1 / eta)).pvalue > 1e-3
    assert stats.kstest(noise, "laplace", args=(0, 1.2 / eta)).pvalue < 1e-4
    clean = split_rows(randomizer.preprocess(_records(rng, 50, length, d, scale=10.0)), length)[1]
    assert np.abs(clean).sum(axis=2).max() <= 1.0 * np.sqrt(2) + 1e-9 and np.linalg.norm(clean, axis=2).max() <= 1.0 + 1e-12


def test_hide_length_sends_every_position_noised_so_the_token_count_stays_on_the_user() -> None:
    rng = np.random.default_rng(3)
    seed = SplitDenoiseRandomizer(2.0, 4, "minilm", 1.0, 2.0, hide_length=False)
    hiding = SplitDenoiseRandomizer(2.0, 4, "minilm", 1.0, 2.0)  # the default: design.md's replace-one unit
    assert hiding.event == seed.event  # L rows of the same domain either way
    short, long = _records(rng, 500, 4, 3, real=1), _records(rng, 500, 4, 3, real=4)
    for x in (short, long):
        mask, rows = split_rows(hiding.release(x, rng), 4)
        assert np.all(mask == 1) and np.all(np.linalg.norm(rows, axis=2) > 0)  # padding noised and sent as real
    assert not np.all(split_rows(seed.release(short, rng), 4)[0] == 1)  # the seed's release shows the count
    with pytest.raises(ValueError, match="hide_length"):
        SplitDenoiseRandomizer(2.0, 4, "minilm", 1.0, 2.0, hide_length="yes")


def test_hostile_records_are_clipped_to_the_domain_the_event_states() -> None:
    # rows far outside the table (a tampered cache, a hostile caller) cannot widen the event's domain
    rng = np.random.default_rng(2)
    for sampler, l1 in (("dchi", 100.0), ("coordinate", 0.5)):
        randomizer = SplitDenoiseRandomizer(1.0, 3, "minilm", 1.0, l1, sampler)
        clean = split_rows(randomizer.preprocess(_records(rng, 200, 3, 6, scale=50.0)), 3)[1]
        assert np.linalg.norm(clean, axis=2).max() <= 1.0 + 1e-12
        if sampler == "coordinate":
            assert np.abs(clean).sum(axis=2).max() <= 0.5 + 1e-12
        # the release itself (and the reproduction's release_rows) noises the clipped rows, not the given ones
        quiet = SplitDenoiseRandomizer(1e6, 3, "minilm", 1.0, l1, sampler, post_clip=False)
        far = _records(rng, 200, 3, 6, scale=50.0)
        released = split_rows(quiet.release(far, rng), 3)[1]
        assert np.linalg.norm(released, axis=2).max() <= 1.0 + 1e-3
        rows = torch.from_numpy(split_rows(far, 3)[1])
        theirs, _ = quiet.release_rows(rows, torch.ones(rows.shape[:2]), torch.Generator().manual_seed(0))
        assert float(theirs.norm(dim=2).max()) <= 1.0 + 1e-3
    x = _records(rng, 2, 3, 6)
    x[0, 0] = 0.5  # a mask flag must be 0 or 1
    with pytest.raises(ValueError, match="mask flag"):
        randomizer.release(x, rng)
    with pytest.raises(ValueError, match="sampler"):
        SplitDenoiseRandomizer(1.0, 3, "minilm", 1.0, 1.0, "gaussian")


@pytest.mark.parametrize("sampler, kind, diameter", [("dchi", MetricDPEvent, 24.0), ("coordinate", CoordinateMetricDPEvent, 40.0)])
def test_the_ledger_entry_is_l_tokens_of_eta_times_the_samplers_diameter(sampler: str, kind: type, diameter: float) -> None:
    randomizer = SplitDenoiseRandomizer(0.5, 16, "minilm", 12.0, 20.0, sampler)
    assert randomizer.event == kind(eta=0.5, diameter=diameter, tokens=16)
    assert randomizer.params()["epsilon_per_token"] == pytest.approx(0.5 * diameter)
    for releases in (1, 3):  # pure DP composes by summing: k x L x eta x diameter
        assert compose_epsilon({randomizer.event: releases}, 1e-5) == pytest.approx(releases * 16 * 0.5 * diameter, rel=1e-6)
    options = SplitDenoiseRandomizer.run_options(3.0, 0, {"length": 16, "sampler": sampler, "clip": 12.0, "l1_clip": 20.0}, "minilm")
    calibrated = SplitDenoiseRandomizer.calibrated(8.0, 1e-5, 2, options)
    # Independently: 2 releases x 16 rows, each pure (eta x diameter)-DP, composed by dp_accounting's PLD
    one = privacy_loss_distribution.from_privacy_parameters(common.DifferentialPrivacyParameters(calibrated.eta * diameter, 0.0))
    assert one.self_compose(32).get_epsilon_for_delta(1e-5) == pytest.approx(8.0, rel=2e-2)
    assert compose_epsilon({calibrated.event: 2}, 1e-5) <= 8.0 * (1 + 1e-9)
    assert SplitDenoiseRandomizer.from_params(calibrated.params()).event == calibrated.event


def test_the_run_takes_c_and_the_l1_radius_from_the_word_embedding_table() -> None:
    from ldpfed.fed.encoders.hf import minilm_path
    from transformers import AutoModel

    table = AutoModel.from_pretrained(minilm_path()).embeddings.word_embeddings.weight.detach().double()
    options = SplitDenoiseRandomizer.with_domain(SplitDenoiseRandomizer.run_options(3.0, 0, {}, "minilm"))
    assert options["clip"] == pytest.approx(float(table.norm(dim=1).max()), rel=1e-9)  # C = 1.694 for MiniLM
    assert options["l1_clip"] == pytest.approx(float(table.abs().sum(dim=1).max()), rel=1e-9)
    assert (options["length"], options["sampler"], options["post_clip"], options["hide_length"]) == (32, "dchi", True, True)


@pytest.mark.parametrize("sampler", ["dchi", "coordinate"])
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_a_distinguishing_attack_stays_within_epsilon(sampler: str, epsilon: float) -> None:
    case = build_for_audit("snd", epsilon, 1e-5, 3, {"length": 4, "sampler": sampler})
    result = audit(case, 1e-5, 40_000, np.random.default_rng(int(epsilon)))
    assert case.randomizer.event.epsilon == pytest.approx(epsilon, rel=1e-3)
    assert epsilon / 4 < result.lower_bound <= epsilon, result  # a real test, and within the claim


def test_the_run_releases_word_rows_and_refuses_a_projection() -> None:
    config = RunSpec.of(mechanism="snd", dim=0, epsilon=8.0, mechanism_options="length=16")
    assert encoder_spec(config) == "tokens:16:minilm"
    params = make_plan(config, 2).train.params()
    assert params["encoder"] == "minilm" and params["clip"] == pytest.approx(1.694, abs=1e-3)
    with pytest.raises(ValueError, match="--dim 0"):
        RunSpec.of(mechanism="snd", dim=16)
    with pytest.raises(ValueError, match="transformer"):
        RunSpec.of(mechanism="snd", dim=0, encoder="bilstm")


def test_the_run_releases_what_the_reproduction_releases_and_decodes_like_the_server_half() -> None:
    from ldpfed.fed.encoders.factory import make_encoder
    from ldpfed.fed.encoders.hf import minilm_path
    from ldpfed.fed.encoders.word_split import server_pass
    from transformers import AutoModel, AutoTokenizer

    records = make_encoder("tokens:16:minilm").encode(TEXTS)
    assert records.shape == (3, 16 * 385)
    model = AutoModel.from_pretrained(minilm_path()).eval()
    batch = AutoTokenizer.from_pretrained(minilm_path())(TEXTS, padding="max_length", max_length=16, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        rows = model.embeddings.word_embeddings(ids).float()
    mine, clean = split_rows(records, 16)
    assert np.array_equal(mine, mask.numpy()) and np.allclose(clean, (rows * mask[:, :, None]).numpy(), atol=1e-6)
    for sampler in ("dchi", "coordinate"):
        run = SplitDenoiseRandomizer.from_params(make_plan(RunSpec.of(
            mechanism="snd", dim=0, epsilon=8.0, mechanism_options=f"length=16,eta=50,sampler={sampler},hide_length=false"), 2).train.params())
        reproduction = SplitDenoiseRandomizer.for_model(model, sampler, 50.0, 16, "minilm")  # simulations/reproductions/seed003_snd.py
        assert run.params() == reproduction.params() and run.event == reproduction.event
        released = run.release(records, np.random.default_rng(5))
        seed = int(np.random.default_rng(5).integers(2**63 - 1))
        theirs, _ = reproduction.release_rows(rows.double(), mask, torch.Generator().manual_seed(seed))
        assert np.allclose(split_rows(released, 16)[1], theirs.numpy(), atol=1e-5)
        e_n = run.decode(released)
        assert e_n[1] == 0.0 and np.allclose(e_n[0], server_pass(model, theirs.float(), mask).numpy(), atol=1e-4)
    assert np.allclose(run.features(records), make_encoder("minilm").encode(TEXTS), atol=1e-4)  # the whole encoder, locally
    assert run.decode(released[:0])[0].shape == (0, 384)


def _snd_config(tmp_path: Path, **extra: object) -> RunSpec:
    values = dict(mechanism="snd", dim=0, epsilon=20000.0, mechanism_options="length=8", public="generated:120",
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
    assert assets.denoiser.shape.layout == "paper"  # the seed's [e_n; X~; Z] with the mask
    assert assets.sentence.dim == 384 and assets.encoder.dim == 8 * 385
    rows = assets.encoder.encode(TEXTS)
    snd = SplitDenoiseRandomizer.from_params({**make_plan(_snd_config(tmp_path), 2).train.params(), "eta": 20.0})
    denoised = snd.denoised(rows, assets.denoiser, np.random.default_rng(1))
    assert denoised.shape == (3, 384) and np.isfinite(denoised).all()
    padded = rows.copy()  # padding rows change nothing the user computes: the mask hides them from both halves
    mask, clean = split_rows(padded, 8)
    clean[~mask.astype(bool)] = 5.0
    assert np.allclose(snd.denoised(join_rows(mask, clean), assets.denoiser, np.random.default_rng(1)), denoised, atol=1e-5)


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

    plan = make_plan(_snd_config(tmp_path), 2)  # the user's own plan reads its own model's table
    monkeypatch.setattr(split_denoise, "_transformer", never)
    limits = plan.limits("train")
    own = plan.train.params()
    assert dict(limits.pinned) == {"encoder": "minilm", "length": 8, "hide_length": True}
    for key, value in (("encoder", str(tmp_path / "model-with-a-pickle")), ("length", 9), ("hide_length", False)):
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


def test_a_hostile_servers_domain_is_what_the_user_is_charged_for(tmp_path: Path) -> None:
    """The server may choose the noise and the domain (clip, l1_clip, sampler): the user's rows are clipped to the
    domain the request states, so the event the request's randomizer states (and the ledger charges) holds."""
    from ldpfed.fed.encoders.factory import make_encoder

    plan = make_plan(_snd_config(tmp_path), 2)
    limits = plan.limits("train")
    own = plan.train.params()
    records = make_encoder("tokens:8:minilm").encode(TEXTS)
    for change in ({"clip": own["clip"] / 10}, {"sampler": "coordinate", "l1_clip": 0.2}):
        hostile = {**own, **change}
        request = {"users": [0], "records": 1, "sampling": limits.sampling, "randomizer": json.dumps(hostile)}
        randomizer = parse_release_request(request, limits).randomizer
        kind = MetricDPEvent if randomizer.sampler == "dchi" else CoordinateMetricDPEvent
        diameter = 2 * (randomizer.clip if randomizer.sampler == "dchi" else randomizer.l1_clip)
        assert randomizer.event == kind(randomizer.eta, diameter, 8)
        mask, clean = split_rows(randomizer.preprocess(records), 8)
        assert np.linalg.norm(clean, axis=2).max() <= randomizer.clip * (1 + 1e-9)
        assert np.abs(clean).sum(axis=2).max() <= (randomizer.l1_clip if randomizer.sampler == "coordinate" else np.inf) * (1 + 1e-9)
    # the authors' sampler at the same eta over the table's L1 domain costs 15x more: its true event is charged
    request = {"users": [0], "records": 1, "sampling": limits.sampling, "randomizer": json.dumps({**own, "sampler": "coordinate"})}
    with pytest.raises(RequestRefused, match="costs epsilon"):
        parse_release_request(request, limits)
    for bad in ({"post_clip": "yes"}, {"sampler": "gaussian"}, {"clip": -1.0}, {"l1_clip": 0.0}):
        request = {"users": [0], "records": 1, "sampling": limits.sampling, "randomizer": json.dumps({**own, **bad})}
        with pytest.raises(RequestRefused):
            parse_release_request(request, limits)
