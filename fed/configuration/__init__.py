"""A run's options (config) and its privacy plan.

May import: fed.privacy, fed.randomizers, fed.learning, fed.heterogeneity, fed.device, fed.runtime, fed.data.
(fed.data: a task's label schema, for the default dimension.)
"""
