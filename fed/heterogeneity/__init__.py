"""How simulated users differ: privacy tiers, device tiers, device speed, availability, behavior
traces and the virtual clock, with the shares that assign users to them; each axis is one
module listed in the axis registry.

May import: fed.privacy, fed.randomizers, fed.configuration, fed.plugins.
"""
