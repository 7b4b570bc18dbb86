"""What the server learns from reports: the classifiers (the registry behind --classifier: the
noise-aware discriminant, the MLP head, plugins), report sums, aggregation, evaluation bookkeeping,
the central baseline's softmax head, and Split-N-Denoise's denoiser.

May import: fed.privacy, fed.randomizers, fed.encoders, fed.plugins.
"""
