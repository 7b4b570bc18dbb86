"""Sentence encoders that run on the user's side, a disk cache of clean encodings, token-level
randomizers over token embeddings, weights files read without pickle, and the registry of
plugin encoders (fed.encoders.registry, loaded where make_encoder is imported).

May import: fed.privacy, fed.randomizers, fed.data, fed.plugins.
"""
