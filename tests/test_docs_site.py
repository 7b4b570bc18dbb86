"""The documentation site builds with warnings as errors (broken links, bad docstrings), and its API
reference is generated from the packages' docstrings."""

from __future__ import annotations

import importlib.util
import logging
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module as CI builds it (warnings are errors)."""
    site = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return site


def test_mkdocs_build_strict(site: Path) -> None:
    for package, member in (
        ("privacy", "ldpfed.fed.privacy.ledger"), ("randomizers", "ldpfed.fed.randomizers.gaussian"),
        ("encoders", "ldpfed.fed.encoders.cache"), ("ldpfed", "ldpfed.simulate"), ("plugins", "ldpfed.plugins"),
    ):
        assert f'id="{member}"' in (site / "api" / package / "index.html").read_text(), member
    assert not (site / "hooks").exists()


def test_the_api_reference_documents_the_run_spec_and_the_extension_points(site: Path) -> None:
    page = (site / "api" / "ldpfed" / "index.html").read_text()
    members = (
        "ldpfed.RunSpec", "ldpfed.RunSpec.data", "ldpfed.RunSpec.from_mapping", "ldpfed.register_randomizer",
        "ldpfed.register_encoder", "ldpfed.register_axis", "ldpfed.register_classifier",
    )
    assert [m for m in members if f'id="{m}"' not in page] == []


def test_the_api_reference_documents_every_name_a_plugin_imports(site: Path) -> None:
    """ldpfed.plugins's page: each public name, and the members a plugin implements or reads."""
    import ldpfed.plugins

    page = (site / "api" / "plugins" / "index.html").read_text()
    members = [f"ldpfed.plugins.{name}" for name in ldpfed.plugins.__all__] + [
        f"ldpfed.plugins.{member}" for member in (
            "Randomizer._calibrate", "Randomizer.event", "Randomizer.audit_scores", "Randomizer.float_safe",
            "Randomizer.release", "CalibrationTarget.gaussian_sigma", "GaussianEvent.sensitivity", "LaplaceEvent.scale",
            "HeterogeneityAxis.parse", "HeterogeneityAxis.assign", "Option.coerce", "DataSpec.users",
            "PrivacySpec.epsilon", "ScheduleSpec.rounds", "Encoder.encode", "ServerClassifier.add",
            "ClassifierContext.dim",
        )
    ]
    assert [m for m in members if f'id="{m}"' not in page] == []
    assert "larger score means \"released from x1\"" in page  # the audit score's direction, from the module's docstring


ROLE_LEFT = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const):(?:`|<code>|&#96;)")


def test_no_page_of_the_site_shows_a_raw_sphinx_role(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    raw = {page.relative_to(site).as_posix(): ROLE_LEFT.findall(page.read_text()) for page in pages}
    assert {name: found for name, found in raw.items() if found} == {}


def _roles():  # noqa: ANN202 - a module loaded from its file
    spec = importlib.util.spec_from_file_location("griffe_roles", ROOT / "docs" / "hooks" / "griffe_roles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sphinx_roles_become_the_code_a_reader_expects() -> None:
    plain = _roles().plain
    assert plain("see :class:`~fed.encoders.base.Encoder` and :meth:`RunSpec.from_mapping`") == (
        "see `Encoder` and `RunSpec.from_mapping`"
    )
    assert plain(":func:`the parser <fed.configuration.sections.parse_dim>`, :py:data:`__all__`") == "`the parser`, `__all__`"
    assert plain("a dict: {'a': 1}, ``code`` and :math:`x`") == "a dict: {'a': 1}, ``code`` and :math:`x`"


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
