"""What the server learns from reports: the classifier, report sums, aggregation, evaluation
bookkeeping, the central baseline's softmax head, and Split-N-Denoise's denoiser.

May import: fed.privacy, fed.randomizers, fed.encoders.
"""
