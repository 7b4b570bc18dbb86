"""The Flower ServerApp and the ldpfed strategy: thin glue over fed/."""
