"""Checks: runs that attack ldpfed's own guarantees beyond the unit tests (hostile messages, kills, privacy mutations)."""
