"""Audit two randomizers against their claims, and ask every accountant about a Gaussian schedule.

    python simulations/examples/audit_and_privacy.py

The calibrated Gaussian passes its audit; OME as published (seed 004) claims epsilon 1 and the audit
proves more. The privacy query gives the worst-case ledger's figure next to the amplified ones, each
with the assumption it rests on.
"""

import ldpfed

for mechanism in ("gaussian", "ome"):
    audit = ldpfed.audit(mechanism, 1.0, samples=20_000, dim=16)
    print(
        f"{mechanism}: claims epsilon {audit.claimed_epsilon:g}, the ledger charges {audit.accounted_epsilon:.3g}, "
        f"the audit proves at least {audit.audited_lower_bound:.3g}: {audit.verdict}"
    )

figures = ldpfed.privacy(noise_multiplier=2.0, p=0.01, steps=100, delta=1e-5)
for figure in figures.figures:
    shown = "unavailable" if figure.epsilon is None else f"{figure.epsilon:.3g}"
    print(f"{figure.name} [{figure.kind}]: epsilon {shown}")
