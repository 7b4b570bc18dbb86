"""The documentation site builds with warnings as errors (broken links, bad docstrings), and its API
reference is generated from the packages' docstrings."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for package, member in (("privacy", "fed.privacy.ledger"), ("randomizers", "fed.randomizers.gaussian"), ("encoders", "fed.encoders.cache"), ("ldpfed", "ldpfed.simulate")):
        assert f'id="{member}"' in (site / "api" / package / "index.html").read_text(), member
    assert not (site / "hooks").exists()


def _hook():  # noqa: ANN202 - a module loaded from its file
    spec = importlib.util.spec_from_file_location("repo_links", ROOT / "docs" / "hooks" / "repo_links.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_links_out_of_docs_become_repository_paths_and_a_missing_target_warns(caplog: pytest.LogCaptureFixture) -> None:
    page = SimpleNamespace(file=SimpleNamespace(abs_src_path=str(ROOT / "docs" / "page.md"), src_uri="page.md"))
    config = {"docs_dir": str(ROOT / "docs")}
    markdown = (
        "[scale](../simulations/reports/scale/README.md#top), [inside](scale.md), [web](https://flower.ai), "
        "![plot](../simulations/reports/attacks/attacks.png), [gone](../simulations/reports/no_such_report.md)"
    )
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.repo_links"):
        out = _hook().on_page_markdown(markdown, page, config, None)
    assert out.startswith("scale (`simulations/reports/scale/README.md`), [inside](scale.md), [web](https://flower.ai), ")
    assert "![plot](../simulations/reports/attacks/attacks.png)" in out and "[gone](../simulations/reports/no_such_report.md)" in out
    assert [r.getMessage() for r in caplog.records] == ["page.md links to simulations/reports/no_such_report.md, which does not exist"]
