"""What a run writes: the run record, summary and privacy report, user results, groups and plots.

May import: fed.privacy, fed.configuration, fed.data, fed.heterogeneity, fed.learning.
"""
