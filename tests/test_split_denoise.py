"""Split-N-Denoise's denoiser (seed 003): it learns, it reads only real tokens (through the numpy API too), and
the shipped file is weights only, checked on load. Also TokEmbPriv's split helpers (token_level), which the
attack study and the earlier post-LayerNorm study use; ``--mechanism snd`` is tests/test_snd_mechanism.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ldpfed.fed.learning.denoiser import Denoiser, DenoiserShape, train_denoiser

TEXTS = ["the film was wonderful indeed", "an awful, boring evening", "what a lovely day it is"]


@pytest.fixture(scope="module")
def minilm():  # noqa: ANN201
    from ldpfed.fed.encoders.factory import make_encoder

    return make_encoder("minilm")


def test_tokembprivs_split_release_is_token_dchi_and_its_server_half_gives_the_same_vector(minilm) -> None:  # noqa: ANN001
    from ldpfed.fed.randomizers.token_level import TokenLevelRandomizer

    snd = TokenLevelRandomizer(minilm, "token-dchi", 16, 50.0, clip=12.3, post_clip=12.3)
    clean, released = snd.split_release(TEXTS, None, np.random.default_rng(7))
    assert clean.shape == released.shape == (3, 16, minilm.dim)
    assert np.linalg.norm(released, axis=-1).max() <= 12.3 * (1 + 1e-5)  # the seed's clip of the noisy vectors
    assert np.abs(released - clean).mean() > 0.01  # noise was added to every record
    pooled = snd.server_pass(released)
    assert np.allclose(pooled, snd.release_texts(TEXTS, None, np.random.default_rng(7)), atol=1e-4)
    assert np.allclose(snd.server_pass(clean), snd.encode_clean(TEXTS), atol=1e-4)
    assert snd.event.epsilon == pytest.approx(50.0 * 2 * 12.3 * 16)  # eta x diameter, composed over L tokens
    with pytest.raises(ValueError, match="shape"):
        snd.server_pass(released[:, :8])


def _synthetic(n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """A clean output that the noisy output hides by a known function of the noise (dim 8, 4 tokens)."""
    x = rng.normal(size=(n, 4, 8)).astype(np.float32)
    z = rng.normal(scale=0.7, size=(n, 4, 8)).astype(np.float32)
    clean = np.tanh(x.mean(axis=1))
    noisy = clean + 1.5 * z.mean(axis=1) + 0.3 * np.tanh(z.sum(axis=1))
    return noisy.astype(np.float32), x, (x + z).astype(np.float32), clean.astype(np.float32)


def test_the_denoiser_learns_to_remove_noise_it_is_told_about() -> None:
    rng = np.random.default_rng(0)
    shape = DenoiserShape(dim=8, length=4, hidden=32, layers=1, heads=2)
    model, losses = train_denoiser(shape, *_synthetic(768, rng), epochs=8, seed=0)
    assert losses[-1] < losses[0]
    noisy, x, released, clean = _synthetic(512, rng)
    denoised = model.denoise(noisy, x, released)
    assert denoised.shape == (512, 8) and np.isfinite(denoised).all()
    assert np.mean((denoised - clean) ** 2) < 0.5 * np.mean((noisy - clean) ** 2)


def test_a_saved_denoiser_loads_to_the_same_outputs_and_bad_files_are_refused(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Denoiser(DenoiserShape(dim=8, length=4, hidden=16, layers=1, heads=2))
    torch.nn.init.normal_(model.out.weight)  # not the zero start, so outputs depend on every weight
    noisy, x, released, _ = _synthetic(16, np.random.default_rng(1))
    model.save(tmp_path / "d.safetensors")
    loaded = Denoiser.load(tmp_path / "d.safetensors")
    assert np.array_equal(loaded.denoise(noisy, x, released), model.eval().denoise(noisy, x, released))
    with pytest.raises(ValueError, match="token matrices"):
        loaded.denoise(noisy, x[:, :3], released)
    with pytest.raises(ValueError, match="NaN or infinite"):
        loaded.denoise(noisy * np.nan, x, released)

    import pickle

    (tmp_path / "pickled").write_bytes(pickle.dumps(model.state_dict()))  # a server shipping a pickle
    with pytest.raises(ValueError, match="not a safetensors file"):
        Denoiser.load(tmp_path / "pickled")

    from safetensors.torch import save_file

    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(tmp_path / "plain"))
    with pytest.raises(ValueError, match="not an ldpfed denoiser"):
        Denoiser.load(tmp_path / "plain")
    meta = {"ldpfed": "denoiser", "shape": '{"dim": 8, "length": 4, "hidden": 16, "layers": 1, "heads": 2}'}
    save_file({**state, "out.bias": torch.zeros(9)}, str(tmp_path / "wrong"), metadata=meta)
    with pytest.raises(ValueError, match="do not fit"):
        Denoiser.load(tmp_path / "wrong")
    save_file({**state, "out.bias": torch.full((8,), float("nan"))}, str(tmp_path / "nan"), metadata=meta)
    with pytest.raises(ValueError, match="NaN or infinite weights"):
        Denoiser.load(tmp_path / "nan")
    huge = {"ldpfed": "denoiser", "shape": '{"dim": 100000, "length": 4}'}
    save_file(state, str(tmp_path / "huge"), metadata=huge)
    with pytest.raises(ValueError, match="larger than any"):
        Denoiser.load(tmp_path / "huge")


def test_the_paper_layout_reads_only_real_tokens_and_round_trips() -> None:
    torch.manual_seed(0)
    shape = DenoiserShape(dim=6, length=5, hidden=8, layers=2, heads=2, layout="paper", ff=16)
    model = Denoiser(shape).eval()
    torch.nn.init.normal_(model.out.weight)  # the read-out starts at zero; make it see something
    e_n, released, noise = torch.randn(3, 6), torch.randn(3, 4, 6), torch.randn(3, 4, 6)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    junk_r, junk_z = released.clone(), noise.clone()
    junk_r[mask == 0], junk_z[mask == 0] = 40.0, -40.0
    with torch.no_grad():
        out = model(e_n, released, noise, mask)
        assert torch.allclose(out, model(e_n, junk_r, junk_z, mask), atol=1e-5)
        assert not torch.allclose(out, model(e_n, junk_r, junk_z), atol=1e-3)
        loaded = Denoiser.from_bytes(model.to_bytes())
        assert loaded.shape == shape and torch.allclose(loaded(e_n, released, noise, mask), out, atol=1e-6)
    with pytest.raises(ValueError, match="layout"):
        DenoiserShape(dim=6, length=5, layout="other")


def test_the_numpy_api_passes_the_mask_in_training_and_denoising() -> None:
    """What a node runs (Denoiser.denoise, train_denoiser) hides padding as the forward pass does."""
    rng = np.random.default_rng(3)
    noisy, x, released, clean = _synthetic(64, rng)
    mask = np.ones((64, 4), dtype=np.float32)
    mask[::2, 2:] = 0.0
    shape = DenoiserShape(dim=8, length=4, hidden=16, layers=1, heads=2, layout="paper", ff=16)
    model, losses = train_denoiser(shape, noisy, x, released, clean, epochs=2, batch=32, seed=0, mask=mask)
    assert np.isfinite(losses).all()
    torch.nn.init.normal_(model.out.weight)
    junk_x, junk_r = x.copy(), released.copy()
    junk_x[mask == 0], junk_r[mask == 0] = 7.0, -9.0
    out = model.denoise(noisy, x, released, mask=mask)
    assert np.allclose(out, model.denoise(noisy, junk_x, junk_r, mask=mask), atol=1e-5)
    assert not np.allclose(out, model.denoise(noisy, junk_x, junk_r), atol=1e-3)
    with pytest.raises(ValueError, match="mask"):
        model.denoise(noisy, x, released, mask=mask[:, :3])
