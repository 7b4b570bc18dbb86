"""The experiments stay apart from the installed package: the CLI never imports them, nothing in the
wheel imports them, and the wheel leaves them out (issue 27, item 7)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = "ldpfed.simulations.experiments"
PACKAGES = ("fed", "clients", "strategies", "simulations")


def test_the_cli_with_every_subcommand_loaded_imports_no_experiment() -> None:
    code = (
        "import json, sys\n"
        "import ldpfed.simulations.cli\n"
        "ldpfed.simulations.cli.build_parser()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert "ldpfed.simulations.commands.privacy" in loaded and "ldpfed.simulations.commands.simulate" in loaded  # the subcommands loaded
    assert [m for m in loaded if m == EXPERIMENTS or m.startswith(EXPERIMENTS + ".")] == []


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module an import statement of ``path`` names (``from a import b`` names a and a.b)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_no_module_of_the_package_imports_an_experiment_even_lazily() -> None:
    experiments = ROOT / "simulations" / "experiments"
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if experiments not in path.parents
        for line, name in _imports(path)
        if name == EXPERIMENTS or name.startswith(EXPERIMENTS + ".")
    ]
    assert offenders == []


def test_the_import_scan_sees_lazy_and_from_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ldpfed.simulations import experiments\n    import ldpfed.simulations.experiments.table6\n")
    names = [name for _, name in _imports(probe)]
    assert "ldpfed.simulations.experiments" in names and "ldpfed.simulations.experiments.table6" in names


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout (hatchling from the dev extra, no index)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )
    (built,) = out.glob("ldpfed-*.whl")
    return built


def test_the_wheel_has_one_top_level_name_and_leaves_the_experiments_out(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"ldpfed", f"{wheel.name.split('-py')[0]}.dist-info"}
    for package in PACKAGES:
        assert f"ldpfed/{package}/__init__.py" in names, package
    assert "ldpfed/__init__.py" in names and "ldpfed/_simulate.py" in names  # the API is the package itself
    assert "ldpfed/clients/app.py" in names and "ldpfed/strategies/app.py" in names
    left_out = [n for n in names if n.startswith(("ldpfed/simulations/experiments/", "ldpfed/simulations/examples/", "ldpfed/simulations/ldpfed/"))]
    assert left_out == [] and not any("__pycache__" in n for n in names)


def test_the_installed_wheel_runs_from_its_one_name(wheel: Path, tmp_path: Path) -> None:
    """Installed alone, the wheel's apps and CLI import from ``ldpfed`` and nothing else is importable."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    code = (
        "import importlib.util, json, ldpfed.clients.app, ldpfed.strategies.app, ldpfed.simulations.cli\n"
        "print(json.dumps([ldpfed.__file__, ldpfed.clients.app.__file__, [importlib.util.find_spec(n) is None for n in "
        f"{list(PACKAGES)!r}], ldpfed.simulate.__module__]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(target)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    package, app, absent, home = json.loads(done.stdout)
    assert package == str(target / "ldpfed" / "__init__.py") and app == str(target / "ldpfed" / "clients" / "app.py")
    assert absent == [True] * len(PACKAGES) and home == "ldpfed._simulate"


def test_the_editable_install_maps_only_ldpfed() -> None:
    """The README's editable install: ``ldpfed`` maps to simulations/ldpfed; fed, clients, strategies and simulations
    are not top-level names."""
    code = f"import importlib.util, json, ldpfed.fed; print(json.dumps([importlib.util.find_spec(n) is None for n in {list(PACKAGES)!r}] + [ldpfed.fed.__file__]))"
    done = subprocess.run([sys.executable, "-P", "-c", code], cwd="/", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    *absent, fed = json.loads(done.stdout)
    assert absent == [True] * len(PACKAGES) and Path(fed).resolve() == ROOT / "fed" / "__init__.py"


def test_a_run_from_the_folder_that_holds_a_clone_named_ldpfed(tmp_path: Path) -> None:
    """Issue 42 item 5: a folder named ldpfed in the working folder (the parent of a clone) is not the package, for
    the CLI and for the encoding step it starts (``python -P -m``: the working folder is not put on sys.path)."""
    (tmp_path / "ldpfed" / "simulations").mkdir(parents=True)
    (tmp_path / "ldpfed" / "README.md").write_text("# a clone\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_XDIST_WORKER")}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ldpfed")), "simulate", "--data", "generated:120", "--users", "2", "--out", "run", "--quiet"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["errors"] == []
