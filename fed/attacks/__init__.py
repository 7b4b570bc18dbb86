"""The server's attacks on what it receives (attribute and membership inference, embedding
inversion, TextHide reconstruction) and the mutual-information estimate.

May import: fed.privacy, fed.randomizers, fed.encoders, fed.learning.
"""
