"""Sentence encoders that run on the user's side, a disk cache of clean encodings, token-level
randomizers over token embeddings, and weights files read without pickle.

May import: fed.privacy, fed.randomizers, fed.data.
"""
