"""Heterogeneity of simulated users: one axis per module, each owning its options, its assignment of users, its
effect on the node and its group labels, listed in one registry (fed.heterogeneity.registry)."""
