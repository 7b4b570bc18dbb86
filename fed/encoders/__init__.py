"""Sentence encoders that run on the user's side, and a disk cache of clean encodings."""
