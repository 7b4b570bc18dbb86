"""Experiments: one-off studies and tables behind the reports (``python -m ldpfed.simulations.experiments.NAME``).

They are not part of the installed package (the wheel leaves this folder out) and nothing in the
package imports them: run them from a checkout. Each module's docstring gives its command and
setting, and its report says where its figures went.
"""
