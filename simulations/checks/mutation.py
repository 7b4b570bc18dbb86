"""One privacy mutation: a small semantic change of privacy-critical code that its tests must catch (issue 26)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    """One named change: ``find`` (exactly once in ``file``) becomes ``replace``; ``tests`` must catch it."""

    name: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    what: str
    issue: bool = False
    """Listed in issue 26 as surviving every test that claimed to guard it."""
    fast: bool = False
    """Its tests catch it within seconds (the CI slice of tests/test_mutation_check.py draws from these)."""
