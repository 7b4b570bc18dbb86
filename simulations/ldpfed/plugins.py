"""What a plugin author imports: the base classes a plugin implements, the objects it receives, and its helpers.

A plugin (docs/plugins.md) is a randomizer, an encoder, a heterogeneity axis or a server classifier from a
package other than ldpfed. It imports from here and from ``ldpfed`` only (``ldpfed.RunSpec`` and the
``ldpfed.register_*`` functions); the modules under ``ldpfed.fed`` are private and may change in any release.
The names of :data:`__all__` are public: they follow semantic versioning, and CHANGELOG.md records each change
of them (tests/test_public_surface.py holds them to it, as it holds ``ldpfed.__all__``).

What each kind of plugin implements and receives:

- A **randomizer** is a :class:`Randomizer` subclass (or a subclass of a built-in one such as
  :class:`GaussianRandomizer`). ``from_params(params)`` receives its parameters as plain JSON;
  ``_calibrate(target, options)`` receives a :class:`CalibrationTarget` (solve with
  ``target.gaussian_sigma(sensitivity)`` or ``target.largest(make_event, start)``) and the run's mechanism
  options (``clip`` among them); ``release(x, rng)`` receives float rows and a NumPy generator (on a device
  one whose noise is OpenDP's: draw it with :func:`add_gaussian` or :func:`add_laplace`). It states its
  **privacy event** (:class:`GaussianEvent`, :class:`LaplaceEvent`, :class:`RandomizedResponseEvent`,
  :class:`PureEpsilonEvent`, or a :class:`PrivacyEvent` subclass of its own registered with
  :func:`register_event`), whose sensitivity is the diameter of its input domain under replace-one; and its
  **audit pair**, ``audit_scores(dim)``, a :data:`Scores` function built with :func:`pair_scores` or
  :func:`antipodal_scores`.
- An **encoder** factory is called with no argument (spec ``NAME``) or with the spec's argument as a string
  (``NAME:ARG``) and returns an :class:`Encoder`.
- A **heterogeneity axis** is a :class:`HeterogeneityAxis` whose run options are :class:`Option` objects.
  ``parse`` receives its options' values by name; the other hooks receive its setting and, where they need
  the rest of the run, the run's ``ldpfed.RunSpec``, whose sections are :class:`DataSpec`,
  :class:`EncoderSpec`, :class:`PrivacySpec`, :class:`ScheduleSpec`, :class:`HeterogeneitySpec`,
  :class:`EvaluationSpec` and :class:`OutputSpec` (an option is read through its section:
  ``spec.data.users``, never ``spec.users``), a :class:`VirtualClock` (``online``), or the run's
  :class:`ServedGroups` (``summary``); ``on_clock`` returns a :class:`ClockPart`.
- A **classifier** factory receives a :class:`ClassifierContext` and returns a :class:`ServerClassifier`,
  which receives released reports (or a node's :class:`ReportSums`) and gives a :class:`LinearModel` or an
  :class:`MLPModel`, the model forms a device runs.

The audit score's direction. ``audit_scores(dim)`` returns a function ``(n, rng) -> (s0, s1)``: the scores
of ``n`` releases on the pair's first input ``x0`` and of ``n`` releases on its second input ``x1``, where **a
larger score means "released from x1"**, as the log-likelihood ratio log p(y | x1) / p(y | x0) does
(:func:`gaussian_llr`, :func:`laplace_llr`). ``ldpfed audit`` trusts the pair (it is the plugin's statement
of its worst case) but checks the score's direction itself: it builds the mechanism at epsilon 100, where any
sound score separates its pair, and requires the releases of ``x1`` to score higher; on its own draws it refuses
releases of ``x1`` that score lower. A score that points the wrong way or separates nothing raises
:class:`AuditScoreError`.

Registration (an entry point or ``ldpfed.register_*``) refuses an object that breaks these rules with a
:class:`PluginError` naming it.

Importing this module loads none of these names: each is imported from its home on first use.
"""

from typing import TYPE_CHECKING

from ldpfed._lazy import exports as _exports

if TYPE_CHECKING:  # the names below, for readers, type checkers and the API reference (in this order); loaded on
    # first use (``__getattr__``)
    # a randomizer
    from ldpfed.fed.randomizers.base import Randomizer
    from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
    from ldpfed.fed.randomizers.target import CalibrationTarget
    from ldpfed.fed.privacy.noise import add_gaussian, add_laplace
    from ldpfed.fed.randomizers.base import check_finite_matrix, check_params
    from ldpfed.fed.privacy.validators import check_positive

    # its privacy event
    from ldpfed.fed.privacy.events import (
        PrivacyEvent,
        GaussianEvent,
        LaplaceEvent,
        RandomizedResponseEvent,
        PureEvent,
        PureEpsilonEvent,
        register_event,
    )

    # its audit pair
    from ldpfed.fed.randomizers.audit_pairs import Scores, pair_scores, antipodal_scores
    from ldpfed.fed.privacy.audit import gaussian_llr, laplace_llr
    from ldpfed.fed.randomizers.auditing import AuditScoreError

    # an encoder
    from ldpfed.fed.encoders.base import Encoder

    # a heterogeneity axis, and what its hooks receive
    from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis
    from ldpfed.fed.configuration.option import Option
    from ldpfed.fed.configuration.sections import (
        DataSpec,
        EncoderSpec,
        PrivacySpec,
        ScheduleSpec,
        HeterogeneitySpec,
        EvaluationSpec,
        OutputSpec,
    )
    from ldpfed.fed.heterogeneity.virtual_clock import VirtualClock, ClockPart
    from ldpfed.fed.heterogeneity.axis import ServedGroups

    # a server classifier
    from ldpfed.fed.learning.server_classifier import ServerClassifier, ClassifierContext
    from ldpfed.fed.learning.report_sums import ReportSums
    from ldpfed.fed.learning.classifier import LinearModel
    from ldpfed.fed.learning.mlp import MLPModel

    # registration refused
    from ldpfed.fed.plugins.entry_points import PluginError

_SECTIONS = "ldpfed.fed.configuration.sections"
_EVENTS = "ldpfed.fed.privacy.events"
_HOMES = {
    # randomizers
    "Randomizer": "ldpfed.fed.randomizers.base", "check_finite_matrix": "ldpfed.fed.randomizers.base",
    "check_params": "ldpfed.fed.randomizers.base", "GaussianRandomizer": "ldpfed.fed.randomizers.gaussian",
    "CalibrationTarget": "ldpfed.fed.randomizers.target", "check_positive": "ldpfed.fed.privacy.validators",
    "add_gaussian": "ldpfed.fed.privacy.noise", "add_laplace": "ldpfed.fed.privacy.noise",
    # privacy events
    "PrivacyEvent": _EVENTS, "GaussianEvent": _EVENTS, "LaplaceEvent": _EVENTS, "PureEvent": _EVENTS,
    "PureEpsilonEvent": _EVENTS, "RandomizedResponseEvent": _EVENTS, "register_event": _EVENTS,
    # audit pairs
    "Scores": "ldpfed.fed.randomizers.audit_pairs", "pair_scores": "ldpfed.fed.randomizers.audit_pairs",
    "antipodal_scores": "ldpfed.fed.randomizers.audit_pairs", "gaussian_llr": "ldpfed.fed.privacy.audit",
    "laplace_llr": "ldpfed.fed.privacy.audit", "AuditScoreError": "ldpfed.fed.randomizers.auditing",
    # encoders
    "Encoder": "ldpfed.fed.encoders.base",
    # heterogeneity axes and the run spec's sections
    "HeterogeneityAxis": "ldpfed.fed.heterogeneity.axis", "ServedGroups": "ldpfed.fed.heterogeneity.axis",
    "ClockPart": "ldpfed.fed.heterogeneity.virtual_clock", "VirtualClock": "ldpfed.fed.heterogeneity.virtual_clock",
    "Option": "ldpfed.fed.configuration.option", "DataSpec": _SECTIONS, "EncoderSpec": _SECTIONS,
    "PrivacySpec": _SECTIONS, "ScheduleSpec": _SECTIONS, "HeterogeneitySpec": _SECTIONS, "EvaluationSpec": _SECTIONS,
    "OutputSpec": _SECTIONS,
    # classifiers
    "ClassifierContext": "ldpfed.fed.learning.server_classifier",
    "ServerClassifier": "ldpfed.fed.learning.server_classifier", "LinearModel": "ldpfed.fed.learning.classifier",
    "MLPModel": "ldpfed.fed.learning.mlp", "ReportSums": "ldpfed.fed.learning.report_sums",
    # errors
    "PluginError": "ldpfed.fed.plugins.entry_points",
}
"""Where each public name lives."""


__getattr__, __dir__ = _exports(__name__, _HOMES)


# The public names for plugin authors. Add a name here, to _HOMES and to CHANGELOG.md's "Unreleased" section
# together (tests/test_public_surface.py).
__all__ = [
    "AuditScoreError",
    "CalibrationTarget",
    "ClassifierContext",
    "ClockPart",
    "DataSpec",
    "Encoder",
    "EncoderSpec",
    "EvaluationSpec",
    "GaussianEvent",
    "GaussianRandomizer",
    "HeterogeneityAxis",
    "HeterogeneitySpec",
    "LaplaceEvent",
    "LinearModel",
    "MLPModel",
    "Option",
    "OutputSpec",
    "PluginError",
    "PrivacyEvent",
    "PrivacySpec",
    "PureEpsilonEvent",
    "PureEvent",
    "RandomizedResponseEvent",
    "Randomizer",
    "ReportSums",
    "ScheduleSpec",
    "Scores",
    "ServedGroups",
    "ServerClassifier",
    "VirtualClock",
    "add_gaussian",
    "add_laplace",
    "antipodal_scores",
    "check_finite_matrix",
    "check_params",
    "check_positive",
    "gaussian_llr",
    "laplace_llr",
    "pair_scores",
    "register_event",
]
