"""ldpfed's Python API: run simulations, studies, audits, attacks and privacy queries from code.

Each function does what the ``ldpfed`` subcommand of the same name does (the command line is a
thin layer over them) and returns a typed, frozen object instead of printing it::

    import ldpfed

    run = ldpfed.simulate(data="generated:200", users=4, epsilon=3)
    run.summary["accuracy_local"], run.ledgers[0]["budget"], run.users[0]["epsilon_sentence"]

The public surface is :data:`__all__` and, for plugin authors, the module ``ldpfed.plugins`` (semantic
versioning, CHANGELOG.md; tests/test_public_surface.py holds both to the changelog); every other name, and
every module whose name starts with an underscore, is private. This package lives in the repository at simulations/ldpfed/ and is
installed as the one top-level package ``ldpfed``; the checkout's folders fed/, clients/, strategies/
and simulations/ are its subpackages ``ldpfed.fed`` and so on: in a checkout through the links
simulations/ldpfed/fed -> ../../fed and so on, in a wheel as folders (pyproject.toml, hatch_build.py).
"""

from typing import TYPE_CHECKING

from ldpfed._lazy import exports as _exports

if TYPE_CHECKING:  # the names below, for readers and type checkers; loaded on first use (``__getattr__``)
    from ldpfed._attack import AttackResult, attack
    from ldpfed._audit import AuditResult, audit
    from ldpfed._privacy import PrivacyResult, privacy
    from ldpfed._run import Run
    from ldpfed._simulate import simulate
    from ldpfed._study import Study, StudyEntry, study
    from ldpfed.fed.encoders.registry import register_encoder
    from ldpfed.fed.heterogeneity.registry import register_axis
    from ldpfed.fed.learning.classifiers import register_classifier
    from ldpfed.fed.randomizers.plugins import register_randomizer
    from ldpfed.fed.configuration.run_spec import RunSpec

_HOMES = {
    "AttackResult": "ldpfed._attack", "attack": "ldpfed._attack", "AuditResult": "ldpfed._audit", "audit": "ldpfed._audit",
    "PrivacyResult": "ldpfed._privacy", "privacy": "ldpfed._privacy", "Run": "ldpfed._run", "simulate": "ldpfed._simulate",
    "Study": "ldpfed._study", "StudyEntry": "ldpfed._study", "study": "ldpfed._study",
    "register_encoder": "ldpfed.fed.encoders.registry", "register_axis": "ldpfed.fed.heterogeneity.registry",
    "register_classifier": "ldpfed.fed.learning.classifiers", "register_randomizer": "ldpfed.fed.randomizers.plugins",
    "RunSpec": "ldpfed.fed.configuration.run_spec",
}
"""Where each public name lives. Importing ``ldpfed`` loads none of them: a device's ClientApp imports
``ldpfed.clients.app`` and pays only for what it uses."""


__getattr__, __dir__ = _exports(__name__, _HOMES)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ldpfed")
    except PackageNotFoundError:  # a checkout on sys.path, not installed
        return "0+unknown"


__version__ = _version()

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
