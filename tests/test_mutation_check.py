"""The privacy mutation check (issue 26) in CI: its table fits the code, and a seeded slice of fast
mutations is caught (the full table: ``python -m ldpfed.simulations.checks.mutation_check``, docs/mutation_check.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpfed.simulations.checks.mutation_check import CAUGHT, RottenMutation, apply, check_one, rot, select
from ldpfed.simulations.checks.mutations import MUTATIONS, Mutation

SLICE_SEED = 26
SLICE_SIZE = 2


def test_every_snippet_occurs_exactly_once_and_every_named_test_exists() -> None:
    assert len(MUTATIONS) >= 30
    assert rot(MUTATIONS) == []


def test_a_snippet_found_twice_or_never_is_refused_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text("x = 1\nx = 1\n")
    for find in ("x = 1", "y = 2"):
        with pytest.raises(RottenMutation, match="not once"):
            apply(Mutation("m", "f.py", find, "x = 2", ("t",), "what"), tmp_path)
    assert (tmp_path / "f.py").read_text() == "x = 1\nx = 1\n"
    problems = rot([Mutation("m", "f.py", "x = 1", "x = 2", ("tests/none.py::test_x",), "what")], tmp_path)
    assert problems == ["m: its snippet occurs 2 times in f.py", "m: no test file tests/none.py"]


def test_a_seeded_slice_of_fast_mutations_is_caught() -> None:
    chosen = select(None, SLICE_SEED, SLICE_SIZE, fast=True)
    assert len(chosen) == SLICE_SIZE
    for mutation in chosen:
        outcome = check_one(mutation, timeout=120)
        assert outcome.status == CAUGHT, f"{mutation.name} {outcome.status}:\n{outcome.tail}"
