"""The registry of the server's downstream classifiers (``--classifier``).

Built in: ``lda`` (the noise-aware discriminant, the default) and ``mlp`` (the seeds' MLP head).
More come from :func:`register_classifier` within one process, or from installed distributions
through the entry-point group ``ldpfed.classifiers`` (fed.plugins; loaded when this module is
imported). Either way a classifier is a factory: called with a
:class:`~fed.learning.server_classifier.ClassifierContext`, it returns a
:class:`~fed.learning.server_classifier.ServerClassifier`, whose models must be of a form users
run (:data:`~fed.learning.server_classifier.Model`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.learning.mlp import MLPModel
from ldpfed.fed.learning.mlp_head import MLPHead
from ldpfed.fed.learning.server_classifier import ClassifierContext, Model, ServerClassifier
from ldpfed.fed.plugins.entry_points import IN_PROCESS, PluginError, install, load_into

Factory = Callable[[ClassifierContext], ServerClassifier]
"""What a classifier is registered as: a class or function from the context to a classifier."""

GROUP = "ldpfed.classifiers"
"""The entry-point group of classifier plugins."""


def _lda(context: ClassifierContext) -> ReportAggregator:
    return ReportAggregator(
        context.dim, context.num_classes, context.shrinkage, context.target, context.public_means,
        context.screening, context.weighting, context.delta,
    )


BUILT_IN: dict[str, Factory] = {"lda": _lda, "mlp": MLPHead}
"""The classifiers ldpfed ships, by --classifier name; ``lda`` is the default. A plugin never takes one of these names."""
CLASSIFIERS: dict[str, Factory] = dict(BUILT_IN)
"""Every available classifier by name: the built-ins, installed plugins and those registered in this process."""


def register_classifier(name: str, factory: Factory) -> Factory:
    """Make ``factory`` available as ``--classifier name`` in this process.

    Raises
    ------
    PluginError
        If ``name`` is not a plain name (letters, digits, '-', '_') or is a built-in's, another plugin
        holds it, or ``factory`` is not callable.
    """
    install(GROUP, CLASSIFIERS, name, _checked(factory, name, IN_PROCESS), IN_PROCESS, frozenset(BUILT_IN))
    return factory


def load_plugins() -> None:
    """Register every classifier of the installed distributions' ``ldpfed.classifiers`` entry points."""
    load_into(GROUP, CLASSIFIERS, frozenset(BUILT_IN), lambda name, loaded, source: _checked(loaded, name, source))


def _checked(factory: object, name: object, source: str) -> Factory:
    if not (isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_-]+", name)):
        raise PluginError(f"classifier plugin {name!r} from {source}: a name is letters, digits, '-' and '_'")
    if not callable(factory):
        raise PluginError(f"classifier plugin {name!r} from {source}: {factory!r} is not a class or function")
    return factory  # type: ignore[return-value]


def check_classifier(name: str) -> Factory:
    """The factory of classifier ``name``; ValueError naming the available ones if there is none."""
    if name not in CLASSIFIERS:
        raise ValueError(f"--classifier {name!r} is not available; choose one of {', '.join(CLASSIFIERS)}")
    return CLASSIFIERS[name]


def make_classifier(name: str, context: ClassifierContext) -> ServerClassifier:
    """The classifier ``name`` for ``context``; ValueError naming the available ones if there is none."""
    made = check_classifier(name)(context)
    if not isinstance(made, ServerClassifier):
        raise TypeError(f"classifier {name!r} gave a {type(made).__name__}, not a fed.learning.server_classifier.ServerClassifier")
    return made


def servable(model: object, name: str) -> Model:
    """``model`` if users can run it (a LinearModel or an MLPModel); TypeError naming the classifier otherwise."""
    if not isinstance(model, (LinearModel, MLPModel)):
        raise TypeError(f"classifier {name!r} gave a {type(model).__name__}; users run a LinearModel or an MLPModel only")
    return model


load_plugins()
