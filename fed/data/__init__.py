"""The records and who holds them: the generated corpus, datasets, loaders, partitions among
users and the run's population.

May import: fed.privacy, fed.configuration, fed.device, fed.runtime, fed.heterogeneity.
"""
