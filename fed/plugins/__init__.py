"""Extension points: what third-party packages register through Python entry points.

Groups: ``ldpfed.randomizers``, ``ldpfed.encoders``, ``ldpfed.classifiers`` and ``ldpfed.axes``.
Each registry (fed.randomizers, fed.encoders, fed.learning, fed.heterogeneity) loads its group.

May import: nothing in fed.
"""
