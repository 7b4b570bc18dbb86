"""Local randomizers: each adds its noise and states its privacy event."""
