"""User-level accounting of central DP-FedAvg (--privacy-model central).

Each round the server samples m of the n users uniformly without replacement (a fixed-size
sample, as the strategy draws it), every sampled user clips its model update to L2 norm C,
and Flower's DP wrapper adds N(0, (z_F C)^2) to the sum of the updates (z_F C / m to their
mean; z_F is Flower's noise multiplier). Neighbouring datasets replace one user's data (the
number of users is public), so the sum's sensitivity is 2C and the noise multiplier in
dp_accounting's sense (std / sensitivity) is z_F / 2.

Accounted with dp_accounting's RdpAccountant under REPLACE_ONE: T self-compositions of
``SampledWithoutReplacementDpEvent(n, m, GaussianDpEvent(z_F / 2))`` (fed.privacy.accountants.amplified).

Adaptive clipping (Andrew et al. 2021, Flower's adaptive wrappers) releases also a noised count of
the clipped updates each round (std sigma_b; one user changes it by at most 1 under replace-one)
and adds z_u C_t / m to the mean update with z_u = (z_F^-2 - (2 sigma_b)^-2)^-1/2. The round is one
Gaussian mechanism on the pair, with (sensitivity / std)^2 = (2 / z_u)^2 + (1 / sigma_b)^2 = (2 / z_F)^2
for any clipping norm C_t, so the same account holds with z_F the effective multiplier.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ldpfed.fed.privacy.accountants import amplified
from ldpfed.fed.privacy.accountants.base import Schedule
from ldpfed.fed.privacy.accountants.calibration import calibrate_noise_multiplier

ACCOUNTANT = (
    "dp_accounting RdpAccountant (REPLACE_ONE): rounds x SampledWithoutReplacementDpEvent(users, users per round, "
    "GaussianDpEvent(Flower noise multiplier / 2))"
)
TRUST = (
    "central DP: each user clips its model update on the client (Flower's fixedclipping_mod); the server adds the "
    "Gaussian noise to the aggregate (Flower's DifferentialPrivacyClientSideFixedClipping). The guarantee holds for "
    "whoever sees only the noised aggregate (the released model); the aggregator itself sees every clipped update "
    "un-noised, so it must be trusted, or hidden behind secure aggregation with noise it cannot remove. "
    "No local guarantee: simulation only"
)


@dataclass(frozen=True)
class CentralAccount:
    """The user-level (epsilon, delta) of a DP-FedAvg schedule, and its parameters."""

    epsilon: float
    delta: float
    noise_multiplier: float
    """Flower's: noise std on the sum of updates / clipping norm."""
    users: int
    users_per_round: int
    rounds: int

    def to_json(self) -> dict[str, object]:
        """Plain-JSON form, with the accountant and the trust assumption."""
        return {**asdict(self), "unit": "user", "sampling": "fixed-size without replacement",
                "accountant": ACCOUNTANT, "trust": TRUST}


def schedule(noise_multiplier: float, users: int, users_per_round: int, rounds: int, delta: float) -> Schedule:
    """The amplified-model schedule of DP-FedAvg: users are the records, rounds the steps."""
    _check(users, users_per_round)
    return Schedule(noise_multiplier / 2, users_per_round / users, rounds, delta, dataset_size=users)


def account(noise_multiplier: float, users: int, users_per_round: int, rounds: int, delta: float) -> CentralAccount:
    """User-level epsilon at ``delta`` of ``rounds`` rounds at Flower noise multiplier ``noise_multiplier``."""
    epsilon = amplified.rdp_fixed_size_epsilon(schedule(noise_multiplier, users, users_per_round, rounds, delta))
    return CentralAccount(epsilon, delta, noise_multiplier, users, users_per_round, rounds)


def calibrate(epsilon: float, users: int, users_per_round: int, rounds: int, delta: float) -> CentralAccount:
    """The smallest Flower noise multiplier whose user-level epsilon is at most ``epsilon``."""
    _check(users, users_per_round)
    found = calibrate_noise_multiplier("rdp", epsilon, delta, rounds, users_per_round / users, dataset_size=users)
    return account(2 * found.noise_multiplier, users, users_per_round, rounds, delta)


def _check(users: int, users_per_round: int) -> None:
    if not 1 <= users_per_round <= users:
        raise ValueError(f"users per round must be in [1, {users}], got {users_per_round}")
