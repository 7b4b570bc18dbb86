"""Everything about a mechanism is on its class: adding a randomizer is one file.

The randomizer below lives in a file of its own, written to a temporary folder and imported; the
calibration, the ledger, the device policy, the audit and the mutual-information estimate then use
it without any other change. The facts the old code kept in lists and isinstance chains (default
device mechanisms, additive noise, dimension-free audits) are checked against each class.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed.configuration.config import MECHANISMS
from ldpfed.fed.device.policy import DevicePolicy, default_mechanisms
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.ledger import Budget, Ledger
from ldpfed.fed.randomizers import RANDOMIZERS, make_randomizer
from ldpfed.fed.randomizers.auditing import audit, auditable, build_for_audit, case_for, dimension_free

BOX_GAUSSIAN = '''
"""A Gaussian on an L-infinity box: clip each coordinate to [-C, C], add N(0, sigma^2 I)."""

import math

import numpy as np

from ldpfed.fed.privacy.noise import add_gaussian
from ldpfed.fed.privacy.events import GaussianEvent
from ldpfed.fed.randomizers.audit_pairs import pair_scores
from ldpfed.fed.randomizers.base import Randomizer, check_finite_matrix, check_params, register


@register
class BoxGaussian(Randomizer):
    """The box [-C, C]^d has L2 diameter 2 C sqrt(d): GaussianEvent(2 C sqrt(d), sigma)."""

    name = "box-gaussian"
    noise_key = "sigma"
    batch_release = True
    required_options = frozenset({"clip", "dim"})

    def __init__(self, clip, dim, sigma):
        self.clip, self.dim, self.sigma = float(clip), int(dim), float(sigma)

    @classmethod
    def from_params(cls, params):
        check_params(params, {"clip", "dim", "sigma"})
        return cls(params["clip"], params["dim"], params["sigma"])

    @classmethod
    def _calibrate(cls, target, options):
        return cls(options["clip"], options["dim"], target.gaussian_sigma(2 * options["clip"] * math.sqrt(options["dim"])))

    def params(self):
        return {"mechanism": self.name, "clip": self.clip, "dim": self.dim, "sigma": self.sigma}

    @property
    def event(self):
        return GaussianEvent(sensitivity=2 * self.clip * math.sqrt(self.dim), sigma=self.sigma)

    def preprocess(self, x):
        return np.clip(check_finite_matrix(x), -self.clip, self.clip)

    def release(self, x, rng):
        return add_gaussian(self.preprocess(x), self.sigma, self.event.sensitivity, rng)

    def decode(self, reports):
        return np.asarray(reports, dtype=np.float64), self.sigma**2

    @property
    def additive(self):
        return True

    def audit_scores(self, dim):
        from ldpfed.fed.privacy.audit import gaussian_llr

        x0 = np.full((1, dim), self.clip)
        x1 = -x0
        return pair_scores(self, x0, x1, lambda y: gaussian_llr(y, x0, x1, self.sigma), dim)
'''
DELTA = 1e-5


@pytest.fixture
def box_gaussian(tmp_path: Path) -> Iterator[type]:
    """The one file, imported (which registers its class); the registry is restored afterwards."""
    before = dict(RANDOMIZERS)
    path = tmp_path / "box_gaussian.py"
    path.write_text(BOX_GAUSSIAN)
    spec = importlib.util.spec_from_file_location("box_gaussian", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["box_gaussian"] = module
    spec.loader.exec_module(module)
    try:
        yield module.BoxGaussian
    finally:
        RANDOMIZERS.clear()
        RANDOMIZERS.update(before)
        del sys.modules["box_gaussian"]


def test_a_randomizer_in_one_file_is_calibrated_charged_allowed_and_audited(box_gaussian: type) -> None:
    name = box_gaussian.name
    assert name in RANDOMIZERS and name in auditable()
    assert name not in default_mechanisms()  # not shipped with ldpfed (fed.randomizers.BUILTIN): a device's policy must name it

    # calibration: two releases at (3, 1e-5) against the ledger's own composition
    randomizer = box_gaussian.calibrated(3.0, DELTA, 2, {"clip": 1.0, "dim": 4})
    assert make_randomizer(randomizer.params()).params() == randomizer.params()
    assert 2.999 <= compose_epsilon({randomizer.event: 2}, DELTA) <= 3.0

    # ledger: the budget admits exactly the two planned releases of each record
    ledger = Ledger(3, Budget(3.0, DELTA))
    for _ in range(2):
        ids = ledger.remaining([randomizer.event], np.arange(3))
        assert list(ids) == [0, 1, 2]
        ledger.charge([randomizer.event], ids)
    assert ledger.remaining([randomizer.event], np.arange(3)).size == 0

    # device policy: allowed where its owner names it, refused where not (the defaults name built-ins only)
    assert box_gaussian.device_default() and DevicePolicy(mechanisms=(name,)).refusal(randomizer) is None
    assert "not allowed" in DevicePolicy().refusal(randomizer)
    assert "not allowed" in DevicePolicy(mechanisms=("gaussian",)).refusal(randomizer)

    # audit: built as a run builds it, within its claim; the same class with half the noise is caught
    case = build_for_audit(name, 2.0, DELTA, 4)
    result = audit(case, DELTA, 50_000, np.random.default_rng(0))
    assert result.verdict == "pass" and 0.5 < result.lower_bound <= 2.0
    half = box_gaussian(1.0, 4, case.randomizer.sigma / 2)
    assert audit(case_for(half, 4, 2.0), DELTA, 50_000, np.random.default_rng(1)).verdict == "claim violated"
    assert not dimension_free(name)

    # the mutual-information estimate takes it: its noise is additive
    from ldpfed.fed.attacks.mutual_information import randomizer_mutual_information

    x = np.random.default_rng(2).normal(size=(300, 4))
    assert math.isfinite(randomizer_mutual_information(x, randomizer, np.random.default_rng(3)))


def test_the_registry_is_the_one_list_of_mechanisms() -> None:
    assert MECHANISMS == tuple(RANDOMIZERS)
    assert auditable()[: len(RANDOMIZERS)] == tuple(RANDOMIZERS)
    assert set(default_mechanisms()) == {
        "gaussian", "gaussian-classical", "gaussian-analytic", "laplace", "sue", "oue", "ome", "dpie-gaussian", "dpie-laplace",
    }
    assert DevicePolicy().mechanisms == default_mechanisms()


def _built(name: str) -> object:
    """A small instance of each registered randomizer (dim 6; snd: 4 positions of [mask, 2 values], unit domain)."""
    options = {"snd": {"length": 4, "encoder": "minilm", "clip": 1.0, "l1_clip": 1.0}, "dchi": {"post_clip": 1.0}}.get(name, {})
    cls = RANDOMIZERS[name]
    run = cls.run_options(1.0, 0 if name == "snd" else 6, {"allow_invalid": True, **options} if cls.invalid else options, "minilm")
    fixed = cls.fixed_params(0.5, run)
    return cls.from_params(fixed) if fixed is not None else cls.calibrated(0.5, DELTA, 1, run)


@pytest.mark.parametrize("name", sorted(RANDOMIZERS))
def test_additive_is_what_the_releases_show(name: str) -> None:
    """``additive``: release(x) - preprocess(x) is the same draw whatever x is (same seed), and only then."""
    randomizer = _built(name)
    width = 12 if name == "snd" else 6
    rng = np.random.default_rng(5)
    x0, x1 = rng.normal(size=(8, width)), 3 * rng.normal(size=(8, width))
    if name == "snd":  # every position a real token: [1, row]
        from ldpfed.fed.encoders.token_matrix import join_rows

        x0, x1 = (join_rows(np.ones((8, 4)), x.reshape(8, 4, 3)[:, :, 1:]) for x in (x0, x1))
    noise = [randomizer.release(x, np.random.default_rng(9)) - randomizer.preprocess(x) for x in (x0, x1)]
    assert randomizer.additive == np.allclose(noise[0], noise[1]), name
    if name == "dchi":
        assert not randomizer.additive and type(randomizer)(1.0, randomizer.eta).additive


def test_only_the_classical_gaussian_refuses_some_claims() -> None:
    assert [name for name, cls in RANDOMIZERS.items() if not cls.calibrates(3.0)] == ["gaussian-classical"]
    assert RANDOMIZERS["gaussian-classical"].calibrates(0.9)
    with pytest.raises(ValueError, match="epsilon < 1"):
        RANDOMIZERS["gaussian-classical"].calibrated(3.0, DELTA, 1, {"clip": 1.0})


def test_token_level_randomizers_are_registered_classes() -> None:
    """Each token-level kind is a class filed by ``@register`` (no switch over kinds): its noise key and event on it."""
    from ldpfed.fed.privacy.events import GaussianEvent, MetricDPEvent
    from ldpfed.fed.randomizers.token_level import TOKEN_RANDOMIZERS, TokenLevelRandomizer

    assert set(TOKEN_RANDOMIZERS) == {"token-gaussian", "token-dchi", "text2text"}
    assert {name: cls.noise_key for name, cls in TOKEN_RANDOMIZERS.items()} == {
        "token-gaussian": "sigma", "token-dchi": "eta", "text2text": "eta",
    }
    assert not set(TOKEN_RANDOMIZERS) & set(RANDOMIZERS)
    encoder = object()  # the noise step is not run: building and the event read no model
    gaussian = TokenLevelRandomizer(encoder, "token-gaussian", 4, 2.0, clip=1.0)
    dchi = TokenLevelRandomizer(encoder, "token-dchi", 4, 2.0, clip=1.0, post_clip=1.0)
    assert type(gaussian) is TOKEN_RANDOMIZERS["token-gaussian"] and type(dchi) is TOKEN_RANDOMIZERS["token-dchi"]
    assert gaussian.event == GaussianEvent(sensitivity=4.0, sigma=2.0)  # 2C sqrt(L)
    assert dchi.event == MetricDPEvent(eta=2.0, diameter=2.0, tokens=4)
    with pytest.raises(ValueError, match="kind must be one of"):
        TokenLevelRandomizer(encoder, "token-laplace", 4, 2.0, clip=1.0)
    with pytest.raises(ValueError, match="post_clip applies to token-dchi only"):
        TokenLevelRandomizer(encoder, "token-gaussian", 4, 2.0, clip=1.0, post_clip=1.0)
