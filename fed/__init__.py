"""The core library: plain Python and numpy, no Flower (design.md section 3).

Packages, bottom up: privacy (events, ledgers, accountants, calibration, noise, sampling),
randomizers, encoders, data, learning, heterogeneity, spec (the run's options and plan), device
(what a node's owner controls), runtime (how a node answers the server), protocol (the messages a node
accepts and returns, as plain data), attacks, reporting.
Each package's docstring says what it may import; tests/test_import_rules.py enforces it.
"""
