"""Benchmarks: timing, memory and reproducibility measurements of the project (not imported by the CLI)."""
