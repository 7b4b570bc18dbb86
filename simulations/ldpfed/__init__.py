"""ldpfed's Python API: run simulations, studies, audits, attacks and privacy queries from code.

Each function does what the ``ldpfed`` subcommand of the same name does (the command line is a
thin layer over them) and returns a typed, frozen object instead of printing it::

    import ldpfed

    run = ldpfed.simulate(data="generated:200", users=4, epsilon=3)
    run.summary["accuracy_local"], run.ledgers[0]["budget"], run.users[0]["epsilon_sentence"]

The public surface is :data:`__all__` (semantic versioning, CHANGELOG.md; tests/test_public_surface.py
holds it to the changelog); every other name, and every module whose name starts with an
underscore, is private. This package lives in the repository at simulations/ldpfed/ and is
installed as the top-level package ``ldpfed`` (pyproject.toml, [tool.hatch.build.targets.wheel]).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fed.encoders.registry import register_encoder
from fed.heterogeneity.registry import register_axis
from fed.learning.classifiers import register_classifier
from fed.randomizers.plugins import register_randomizer
from fed.spec.run_spec import RunSpec
from ldpfed._attack import AttackResult, attack
from ldpfed._audit import AuditResult, audit
from ldpfed._privacy import PrivacyResult, privacy
from ldpfed._run import Run
from ldpfed._simulate import simulate
from ldpfed._study import Study, StudyEntry, study

try:
    __version__ = version("ldpfed")
except PackageNotFoundError:  # a checkout on sys.path, not installed
    __version__ = "0+unknown"

# The public names. Add a name here and to CHANGELOG.md's "Unreleased" section together
# (tests/test_public_surface.py). The register_* functions are the in-process extension points
# (docs/plugins.md); installed packages use the entry-point groups instead.
__all__ = [
    "AttackResult",
    "AuditResult",
    "PrivacyResult",
    "Run",
    "RunSpec",
    "Study",
    "StudyEntry",
    "attack",
    "audit",
    "privacy",
    "register_axis",
    "register_classifier",
    "register_encoder",
    "register_randomizer",
    "simulate",
    "study",
]
