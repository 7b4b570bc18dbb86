"""Bad command-line input fails fast, before Flower starts, with one line naming the problem (issue 9 item 5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _folder(tmp_path: Path, train: bytes) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.tsv").write_bytes(train)
    (folder / "dev.tsv").write_bytes(b"sentence\tlabel\na fine film\t1\na dull film\t0\n")
    return folder


@pytest.mark.parametrize(
    "args,train,expected",
    [
        (["--epsilon", "nan"], None, "--epsilon must be a finite non-negative number"),
        (["--epsilon", "inf"], None, "--epsilon must be a finite non-negative number"),
        (["--sigma", "nan"], None, "--sigma must be a finite non-negative number"),
        (["--dim", "1000"], None, "--dim 1000 exceeds the encoder's 384 dimensions"),
        ([], b"sentence\tlabel\n" + b"x" * (10 * 2**20) + b"\t1\n", "unreadable TSV"),
        ([], b"sentence\tlabel\ncaf\xe9 noir\t1\n", "not UTF-8 text"),
    ],
    ids=["epsilon-nan", "epsilon-inf", "sigma-nan", "dim-above-encoder", "10MB-line", "latin-1"],
)
def test_bad_input_fails_fast_with_one_line(tmp_path: Path, args: list[str], train: bytes | None, expected: str) -> None:
    data = ["--data", str(_folder(tmp_path, train)), "--users", "2"] if train is not None else ["--data", "generated:200"]
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "ldpfed.simulations.cli", "simulate", *data, *args, "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in done.stderr, done.stderr[-2000:]
    if train is not None:
        assert str(tmp_path / "data" / "train.tsv") in lines[0]  # the error names the file
    assert not (out / "flower.log").exists()  # Flower never started


def test_a_mistyped_option_is_named_with_the_closest_one(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42 item 9g: a mistyped flag or run option got no suggestion."""
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.simulations.cli import main

    for argv, expected in (
        (["simulate", "--epsilom", "3"], "ldpfed simulate: error: unrecognized arguments: --epsilom 3 (did you mean '--epsilon'?)"),
        (["device", "init", "x", "--superlnk=a:1"], "ldpfed device init: error: unrecognized arguments: --superlnk=a:1 (did you mean '--superlink'?)"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and expected in capsys.readouterr().err
    for mapping, expected in (
        ({"train-limt": 5}, "unknown run option 'train-limt' (did you mean 'train-limit'?)"),
        ({"train_limt": 5}, "unknown run option 'train_limt' (did you mean 'train_limit'?)"),
        ({"colour": "red"}, "unknown run option 'colour'"),
    ):
        with pytest.raises(ValueError) as error:
            RunSpec.from_mapping(mapping)
        assert str(error.value) == expected
    with pytest.raises(ValueError, match=r"unknown run option 'epsilom' \(did you mean 'epsilon'\?\)"):
        RunSpec.of(epsilom=3)
