"""How a node answers the server: the hosted users, their release pipeline (requests, user and
cohort steps), the node and its hosts, the setup bundle (assets), the shuffler, and thread limits.

May import: fed.privacy, fed.randomizers, fed.encoders, fed.data, fed.device, fed.configuration, fed.learning.
"""
