"""`flwr run` and ``build_fab`` read the app from a folder holding only its bundle's files (``fab-include``): the
same bundle, without walking the checkout's .venv and .git (4 CPU seconds per run)."""

from __future__ import annotations

from pathlib import Path

from flwr.cli.build import build_fab_from_disk

from ldpfed.simulations.commands.device import build_fab, staged_app
from ldpfed.simulations.flower_runner import APP_DIR

PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "tiny"
version = "1.0.0"

[tool.flwr.app]
publisher = "someone"
fab-include = {include}

[tool.flwr.app.components]
serverapp = "tiny.server:app"
clientapp = "tiny.client:app"
"""


def _app(folder: Path, include: str) -> Path:
    (folder / "pkg").mkdir(parents=True)
    (folder / "pyproject.toml").write_text(PYPROJECT.replace("{include}", include))
    (folder / "pkg" / "module.py").write_text("x = 1\n")
    (folder / "README.md").write_text("tiny\n")
    return folder


def test_the_staged_folder_gives_the_bundle_flower_builds_from_the_whole_folder(tmp_path: Path) -> None:
    app = _app(tmp_path / "app", '["pyproject.toml", "pkg/module.py"]')
    staged = staged_app(app, tmp_path / "staged")
    assert staged != app and sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()) == [
        "pkg/module.py", "pyproject.toml"]
    assert build_fab_from_disk(staged) == build_fab_from_disk(app) == build_fab(app)


def test_a_pattern_or_a_missing_file_leaves_the_app_folder_as_it_is(tmp_path: Path) -> None:
    assert staged_app(_app(tmp_path / "glob", '["pyproject.toml", "pkg/*.py"]'), tmp_path / "s1") == tmp_path / "glob"
    assert staged_app(_app(tmp_path / "gone", '["pyproject.toml", "absent.py"]'), tmp_path / "s2") == tmp_path / "gone"


def test_the_apps_bundle_is_staged_from_its_pyproject_alone(tmp_path: Path) -> None:
    staged = staged_app(APP_DIR, tmp_path / "app")
    assert [p.name for p in staged.iterdir()] == ["pyproject.toml"]
    assert (staged / "pyproject.toml").read_bytes() == (APP_DIR / "pyproject.toml").read_bytes()
