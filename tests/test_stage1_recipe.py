"""The stage-1 recipe search scores candidates on public data only, by a rule fixed in advance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ldpfed.simulations.experiments import stage1_recipe as search


def _blobs(n: int, gap: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    return rng.normal(0, 1, (n, 4)) + gap * y[:, None], y


def test_simulated_private_falls_to_chance_under_large_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "REPORTS", 2_000)
    tune, val = _blobs(400, 3.0, 0), _blobs(400, 3.0, 1)
    assert search.simulated_private(tune, val, 0.0, 0) > 0.95
    assert abs(search.simulated_private(tune, val, 1e4, 0) - 0.5) < 0.1


def test_run_and_report_on_public_sentences(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ldpfed.fed.encoders.tuned as tuned
    from ldpfed.fed.data.loaders import load_dataset

    if not (search.DATA / search.SLS).is_dir():
        pytest.skip("needs ../shared/data")
    public = load_dataset(str(search.DATA / search.SLS), "train")
    dev = load_dataset(str(search.DATA / search.SLS), "dev")
    seen = []

    def finetune(base, texts, labels, num_labels, **kw):  # noqa: ANN001, ANN003, ANN202
        seen.append(texts)
        return search.load_base(base, "cpu")[1]  # the base model stands in for a fine-tuned one

    monkeypatch.setattr(tuned, "finetune", finetune)
    monkeypatch.setattr(search, "tuning_set", lambda spec, data: public.subset(range(80)))
    monkeypatch.setattr(search, "load_dataset", lambda spec, split: dev.subset(range(60)))
    monkeypatch.setattr(search, "REPORTS", 500)
    monkeypatch.setattr(search, "WORK", tmp_path)
    result = search.run("L6-e2-lr5e-5")
    assert seen == [public.subset(range(80)).texts]  # tuned on the public tuning set only
    assert (tmp_path / "L6-e2-lr5e-5.safetensors").is_file()
    assert len(result["rows"]) == len(search.DIMS) * len(search.QUANTILES)
    assert json.loads((tmp_path / "L6-e2-lr5e-5.json").read_text()) == result
    text = search.report("CMD", [result])
    best = max(result["rows"], key=search.score)
    assert f"**L6-e2-lr5e-5, dim {best['dim']}, clip quantile {best['clip_quantile']}**" in text
