"""Benchmarks: scripts that measure ldpfed's speed, memory and cost."""
