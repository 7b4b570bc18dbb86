"""Where the experiment scripts leave their tables."""

from __future__ import annotations

from pathlib import Path


def write_report(path: str | Path, lines: list[str]) -> None:
    """Write a markdown report (creating its folder) and print it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    print(text, end="")
