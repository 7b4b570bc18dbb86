"""What a node's owner controls: the device policy, the node's entropy, record ids, the state
folder, the record store, the site a node runs on, and the records simulated nodes share.

May import: fed.privacy, fed.randomizers, fed.encoders, fed.data, fed.configuration, fed.runtime, fed.heterogeneity.
"""
