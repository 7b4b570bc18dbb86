"""Where a release's noise comes from: numpy in the simulation engine, a device-safe sampler elsewhere.

On a device (outside the simulation engine, see :mod:`fed.device.entropy`) a release draws from a
:class:`SecureGenerator`:

- coins (sampling, randomized response, mixup, directions) come from numpy's Generator API
  over ChaCha20 (randomgen's ``ChaCha``, 20 rounds) keyed with 256 fresh bits from the OS
  (``os.urandom``) for every draw. numpy's default PCG64 would not do: its state, and so every
  later draw, is recoverable from its output (Bouillaguet, Martinez & Sauvage 2020).
- additive Gaussian and Laplace noise (:func:`add_gaussian`, :func:`add_laplace`) comes from
  OpenDP's measurements, never from ``x + rng.normal(...)`` in floating point, whose low-order
  bits reveal ``x`` (Mironov 2012; Jin et al. 2022). OpenDP rounds the input to a grid 2^k,
  adds exact discrete Gaussian or Laplace noise on that grid and rounds the sum to a double
  once; its bits come from OpenSSL's CSPRNG, seeded by the OS.

The grid lies :data:`GRID_MARGIN` bits below the sensitivity's share of one coordinate
(:func:`grid_exponent`). OpenDP's privacy map adds the rounding to the sensitivity (at most
2^k per coordinate: sqrt(n) 2^k in L2, n 2^k in L1), which moves the certified cost by less
than its own one-ulp rounding: its Gaussian is rho-zCDP with the continuous
rho = Delta^2 / (2 sigma^2) and its Laplace pure (Delta / b)-DP (Canonne, Kamath & Steinke
2020), so the event a randomizer states (GaussianEvent, LaplaceEvent) covers both samplers.
The finest grid, 2^-1074 (every double is a multiple of it: no rounding at all), costs 3.4
times as long for a 16 x 384 Gaussian release (big-integer arithmetic on 1,100-bit numbers);
it is used where the grid would lie below it. Before every device release :func:`add_gaussian`
and :func:`add_laplace` ask OpenDP's own privacy map for the cost of the sensitivity the event
states and refuse to sample if it exceeds the event's figure by more than OpenDP's one-ulp
rounding.

Inside the engine the same functions add numpy noise from the seeded generator: fast and
reproducible, with the textbook floating-point sampler (the simulation's threat model has
no attacker reading low-order bits of its own reports).
"""

from __future__ import annotations

import functools
import math
import os
import sys

import numpy as np

ROUNDING = 4 * sys.float_info.epsilon
"""Relative slack allowed between OpenDP's certificate and an event's figure: OpenDP rounds its map up by an ulp."""


GRID_MARGIN = 60
"""Bits between OpenDP's noise grid and the sensitivity's share of one coordinate (:func:`grid_exponent`)."""
FINEST_GRID = -1074
"""2^-1074, the smallest subnormal double: every double is a multiple of it."""

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
    measurement = _opendp_measurement("gaussian", float(sigma), *_grid("gaussian", sensitivity, x.size))
    _check_certificate(measurement.map(float(sensitivity)), 0.5 * (sensitivity / sigma) ** 2, "Gaussian rho")  # no sigma**2: 1e308 overflows
    return _apply(measurement, x)


def add_laplace(x: np.ndarray, scale: float, sensitivity: float, rng: np.random.Generator) -> np.ndarray:
    """``x`` plus Laplace(scale) per coordinate, for an L1 ``sensitivity`` the caller's event states."""
    x = np.asarray(x, dtype=np.float64)
    if not isinstance(rng, SecureGenerator):
        return x + rng.laplace(0.0, scale, size=x.shape)
    measurement = _opendp_measurement("laplace", float(scale), *_grid("laplace", sensitivity, x.size))
    _check_certificate(measurement.map(float(sensitivity)), sensitivity / scale, "Laplace epsilon")
    return _apply(measurement, x)


def grid_exponent(kind: str, sensitivity: float, size: int) -> int | None:
    """k of OpenDP's grid 2^k for ``size`` coordinates at an L2 (``gaussian``) or L1 (``laplace``) ``sensitivity``:
    :data:`GRID_MARGIN` bits below sensitivity / sqrt(size) (L2) or sensitivity / size (L1); None (OpenDP's exact
    grid, 2^-1074) where that lies at or below 2^-1074, or for no coordinates or no finite positive sensitivity."""
    if size < 1 or not (math.isfinite(sensitivity) and sensitivity > 0):
        return None
    spread = math.log2(size) / 2 if kind == "gaussian" else math.log2(size)
    k = math.floor(math.log2(sensitivity) - spread) - GRID_MARGIN
    return None if k <= FINEST_GRID else k


def _grid(kind: str, sensitivity: float, size: int) -> tuple[int | None, int | None]:
    """(domain size, k) of the measurement for ``size`` coordinates: (None, None), the unsized exact one, without a coarser grid."""
    k = grid_exponent(kind, float(sensitivity), int(size))
    return (None, None) if k is None else (int(size), k)


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
def _opendp_measurement(kind: str, scale: float, size: int | None = None, k: int | None = None) -> object:
    """OpenDP's vector Gaussian (L2, zCDP) or Laplace (L1, pure) measurement at ``scale``: on vectors of ``size`` with
    noise on the grid 2^``k``, or (None, None) on vectors of any size on the exact grid 2^-1074."""
    # The modules themselves, not opendp.prelude: that also imports OpenDP's extras (scikit-learn,
    # pandas, polars), seconds of every device message's fresh process.
    from opendp.domains import atom_domain, vector_domain
    from opendp.measurements import make_gaussian, make_laplace
    from opendp.metrics import l1_distance, l2_distance
    from opendp.mod import enable_features

    enable_features("contrib")
    domain = vector_domain(atom_domain(T=float, nan=False), size=size)
    if kind == "gaussian":
        return make_gaussian(domain, l2_distance(T=float), scale=scale, k=k)
    return make_laplace(domain, l1_distance(T=float), scale=scale, k=k)
