"""The README's results table is tied to what it cites: every figure of a row's "figure" cell appears in
the files that row links to, so a row left behind by a re-measured report fails here.

How a figure is found (the mapping): the row's links are its sources. In a report (a file under
``simulations/reports/``) only its table lines count, because a report's prose may quote older or
other runs' figures (``run_hashes/sst2_backbone.md`` quotes the superseded backbone table); in a page
of ``docs/`` every line counts. Numbers are compared as written, thousands separators dropped:
``0.7580`` is not ``0.758``, and ``8`` is not found inside ``18`` or ``0.8``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w])")
"""A figure: digits with optional thousands commas and decimals, not part of a name (H200, 2C, Fig6)."""
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def numbers(text: str) -> set[str]:
    """Every figure in ``text``, thousands separators dropped, trailing punctuation not included."""
    return {m.group().rstrip(",").replace(",", "") for m in NUMBER.finditer(text)}


def results_rows(readme: str) -> list[tuple[str, str, str]]:
    """(what, figure, more) of each row of the README's "## Results" table."""
    section = readme.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows[0].replace(" ", "") == "|what|figure|more|", rows[0]
    out = []
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 3, line
        out.append((cells[0], cells[1], cells[2]))
    return out


def source_text(path: Path) -> str:
    """What a linked file can vouch for: a report's table lines, or a page's whole text."""
    text = path.read_text()
    if path.relative_to(ROOT).parts[:2] == ("simulations", "reports"):
        return "\n".join(line for line in text.splitlines() if line.lstrip().startswith("|"))
    return text


def missing_figures(what: str, figure: str, more: str) -> tuple[list[str], list[str]]:
    """(links that do not resolve to a file, figures of the row that none of its sources holds)."""
    targets = [ROOT / target for target in LINK.findall(more)]
    broken = [str(t.relative_to(ROOT)) for t in targets if not t.is_file()]
    found: set[str] = set()
    for target in targets:
        if target.is_file():
            found |= numbers(source_text(target))
    wanted = [m.group().rstrip(",").replace(",", "") for m in NUMBER.finditer(figure)]
    return broken, [n for n in dict.fromkeys(wanted) if n not in found]


ROWS = results_rows((ROOT / "README.md").read_text())


def test_the_results_table_has_rows_each_citing_a_source() -> None:
    assert len(ROWS) >= 5
    for what, _, more in ROWS:
        assert LINK.findall(more), f"README results row {what!r} links to nothing"


@pytest.mark.parametrize("what,figure,more", ROWS, ids=[row[0][:40] for row in ROWS])
def test_every_figure_of_a_readme_results_row_is_in_what_it_cites(what: str, figure: str, more: str) -> None:
    broken, missing = missing_figures(what, figure, more)
    assert not broken, f"README results row {what!r} links to missing files {broken}"
    assert not missing, (
        f"README results row {what!r}: figures {missing} are not in the files it links to ({more}); "
        "re-read the report and copy its figures (a report's table lines count, a docs page's whole text)"
    )


def test_a_stale_or_changed_figure_is_caught() -> None:
    """The check itself: the backbone row with its superseded figures, or one figure changed, fails."""
    row = next(r for r in ROWS if "run_hashes/sst2_backbone.md" in r[2])
    assert missing_figures(*row) == ([], [])
    stale = "accuracy 0.7649 / 0.7580 / 0.7317 at worst-case sentence epsilon 8 / 3 / 1 (public-only 0.7672, non-private 0.8028)"
    assert missing_figures(row[0], stale, row[2])[1] == ["0.7649", "0.7317"]
    assert missing_figures(row[0], row[1].replace("0.7489", "0.7498"), row[2])[1] == ["0.7498"]
    assert numbers("H200, 2C, 51,428 and 0.80; 18") == {"51428", "0.80", "18"}
