"""Where a release's noise comes from: numpy in the simulation engine, a device-safe sampler elsewhere.

On a device (outside the simulation engine, see :mod:`fed.device.entropy`) a release draws from a
:class:`SecureGenerator`:

- coins (sampling, randomized response, mixup, directions) come from numpy's Generator API
  over ChaCha20 (randomgen's ``ChaCha``, 20 rounds) keyed with 256 fresh bits from the OS
  (``os.urandom``) for every draw. numpy's default PCG64 would not do: its state, and so every
  later draw, is recoverable from its output (Bouillaguet, Martinez & Sauvage 2020).
- additive Gaussian and Laplace noise (:func:`add_gaussian`, :func:`add_laplace`) comes from
  OpenDP's measurements, never from ``x + rng.normal(...)`` in floating point, whose low-order
  bits reveal ``x`` (Mironov 2012; Jin et al. 2022). OpenDP adds exact discrete Gaussian or
  Laplace noise on the grid 2^-1074 (every double is a multiple of it) to the exact input and
  rounds the sum once; its bits come from OpenSSL's CSPRNG, seeded by the OS.

The discretisation costs nothing: on that grid OpenDP's Gaussian is rho-zCDP with the
continuous rho = Delta^2 / (2 sigma^2) and its Laplace pure (Delta / b)-DP (Canonne, Kamath &
Steinke 2020), so the event a randomizer states (GaussianEvent, LaplaceEvent) covers both
samplers. Before every device release :func:`add_gaussian` and :func:`add_laplace` ask
OpenDP's own privacy map for the cost of the sensitivity the event states and refuse to
sample if it exceeds the event's figure by more than OpenDP's one-ulp rounding.

Inside the engine the same functions add numpy noise from the seeded generator: fast and
reproducible, with the textbook floating-point sampler (the simulation's threat model has
no attacker reading low-order bits of its own reports).
"""

from __future__ import annotations

import functools
import os
import sys

import numpy as np

ROUNDING = 4 * sys.float_info.epsilon
"""Relative slack allowed between OpenDP's certificate and an event's figure: OpenDP rounds its map up by an ulp."""


DEVICE_SAMPLER = "opendp+chacha20"
ENGINE_SAMPLER = "numpy SFC64 (seeded)"


class SecureGenerator(np.random.Generator):
    """numpy's Generator over ChaCha20 keyed from the OS; its Gaussian and Laplace noise goes through OpenDP."""

    @classmethod
    def from_os(cls) -> "SecureGenerator":
        """A generator keyed with 256 fresh bits from ``os.urandom``."""
        return cls.keyed(int.from_bytes(os.urandom(32), "little"))

    @classmethod
    def keyed(cls, key: int) -> "SecureGenerator":
        """The ChaCha20 stream of a secret 256-bit ``key`` (the same key, the same draws)."""
        from randomgen import ChaCha  # imported here: the simulation engine (and a GPU image without randomgen) never keys one

        return cls(ChaCha(key=key % 2**256, rounds=20))


def sampler(rng: np.random.Generator) -> str:
    """The name of the sampler ``rng`` stands for, as run metadata states it."""
    return DEVICE_SAMPLER if isinstance(rng, SecureGenerator) else ENGINE_SAMPLER


def add_gaussian(x: np.ndarray, sigma: float, sensitivity: float, rng: np.random.Generator) -> np.ndarray:
    """``x`` plus N(0, sigma^2) per coordinate, for an L2 ``sensitivity`` the caller's event states."""
    x = np.asarray(x, dtype=np.float64)
    if not isinstance(rng, SecureGenerator):
        # x + rng.normal(0, sigma, x.shape), bit for bit, without its two temporaries.
        noise = rng.standard_normal(x.shape)
        noise *= sigma
        noise += x
        return noise
    measurement = _opendp_measurement("gaussian", float(sigma))
    _check_certificate(measurement.map(float(sensitivity)), 0.5 * (sensitivity / sigma) ** 2, "Gaussian rho")  # no sigma**2: 1e308 overflows
    return _apply(measurement, x)


def add_laplace(x: np.ndarray, scale: float, sensitivity: float, rng: np.random.Generator) -> np.ndarray:
    """``x`` plus Laplace(scale) per coordinate, for an L1 ``sensitivity`` the caller's event states."""
    x = np.asarray(x, dtype=np.float64)
    if not isinstance(rng, SecureGenerator):
        return x + rng.laplace(0.0, scale, size=x.shape)
    measurement = _opendp_measurement("laplace", float(scale))
    _check_certificate(measurement.map(float(sensitivity)), sensitivity / scale, "Laplace epsilon")
    return _apply(measurement, x)


def _check_certificate(certified: float, stated: float, what: str) -> None:
    """RuntimeError unless OpenDP's certified loss is at most the event's (a loss below the smallest
    normal float, where the event's own figure underflows to 0 (clip 5e-324), is nothing)."""
    if not (certified <= stated * (1 + ROUNDING) or certified < sys.float_info.min):
        raise RuntimeError(f"OpenDP certifies {what} {certified!r}, above the event's {stated!r}: nothing released")


def _apply(measurement: object, x: np.ndarray) -> np.ndarray:
    if not np.isfinite(x).all():
        raise ValueError("noise input contains NaN or infinite values")
    flat = measurement(x.ravel().tolist())  # type: ignore[operator]
    return np.asarray(flat, dtype=np.float64).reshape(x.shape)


@functools.lru_cache(maxsize=64)
def _opendp_measurement(kind: str, scale: float) -> object:
    """OpenDP's vector Gaussian (L2, zCDP) or Laplace (L1, pure) measurement at ``scale``."""
    # The modules themselves, not opendp.prelude: that also imports OpenDP's extras (scikit-learn,
    # pandas, polars), seconds of every device message's fresh process.
    from opendp.domains import atom_domain, vector_domain
    from opendp.measurements import make_gaussian, make_laplace
    from opendp.metrics import l1_distance, l2_distance
    from opendp.mod import enable_features

    enable_features("contrib")
    domain = vector_domain(atom_domain(T=float, nan=False))
    if kind == "gaussian":
        return make_gaussian(domain, l2_distance(T=float), scale=scale)
    return make_laplace(domain, l1_distance(T=float), scale=scale)
