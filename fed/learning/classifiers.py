"""The registry of the server's downstream classifiers (``--classifier``).

Built in: ``lda`` (the noise-aware discriminant, the default) and ``mlp`` (the seeds' MLP head).
More come from :func:`register_classifier` within one process, or from installed distributions
through the entry-point group ``ldpfed.classifiers`` (fed.plugins). Either way a classifier is a
factory: called with a :class:`~fed.learning.server_classifier.ClassifierContext`, it returns a
:class:`~fed.learning.server_classifier.ServerClassifier`, whose models must be of a form users run
(:data:`~fed.learning.server_classifier.Model`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from fed.learning.aggregation import ReportAggregator
from fed.learning.classifier import LinearModel
from fed.learning.mlp import MLPModel
from fed.learning.mlp_head import MLPHead
from fed.learning.server_classifier import ClassifierContext, Model, ServerClassifier
from fed.plugins.entry_points import load_group

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
"""The classifiers ldpfed ships, by --classifier name; ``lda`` is the default."""
_registered: dict[str, Factory] = {}


def register_classifier(name: str, factory: Factory) -> None:
    """Make ``factory`` available as ``--classifier name`` in this process.

    Raises
    ------
    ValueError
        If ``name`` is not a plain name, is taken, or ``factory`` is not callable.
    """
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"a classifier name is letters, digits, '-' and '_', got {name!r}")
    if not callable(factory):
        raise ValueError(f"classifier {name!r}: the factory must be callable, got {factory!r}")
    if name in classifiers():
        raise ValueError(f"classifier {name!r} is already registered")
    _registered[name] = factory


def unregister_classifier(name: str) -> None:
    """Remove a classifier added by :func:`register_classifier` (KeyError if there is none)."""
    del _registered[name]


@cache
def _plugins() -> dict[str, Factory]:
    """The installed plugins' classifiers (loaded once per process)."""
    plugins = load_group(GROUP)
    for name, factory in plugins.items():
        if name in BUILT_IN:
            raise ValueError(f"classifier plugin {name!r} ({GROUP}) takes the name of a built-in classifier")
        if not callable(factory):
            raise ValueError(f"classifier plugin {name!r} ({GROUP}) is not callable: {factory!r}")
    return plugins  # type: ignore[return-value]


def classifiers() -> dict[str, Factory]:
    """Every available classifier by name: built in, installed plugins, then registered in this process."""
    return {**BUILT_IN, **_plugins(), **_registered}


def check_classifier(name: str) -> Factory:
    """The factory of classifier ``name``; ValueError naming the available ones if there is none."""
    available = classifiers()
    if name not in available:
        raise ValueError(f"--classifier {name!r} is not available; choose one of {', '.join(available)}")
    return available[name]


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
