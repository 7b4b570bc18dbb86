"""The experiments stay apart from the installed package: the CLI never imports them, nothing in the
wheel imports them, and the wheel leaves them out (issue 27, item 7)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = "simulations.experiments"
PACKAGES = ("fed", "clients", "strategies", "simulations")


def test_the_cli_with_every_subcommand_loaded_imports_no_experiment() -> None:
    code = (
        "import json, sys\n"
        "import simulations.cli\n"
        "simulations.cli.build_parser()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert "simulations.commands.privacy" in loaded and "simulations.commands.simulate" in loaded  # the subcommands loaded
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
    probe.write_text("def f():\n    from simulations import experiments\n    import simulations.experiments.table6\n")
    names = [name for _, name in _imports(probe)]
    assert "simulations.experiments" in names and "simulations.experiments.table6" in names


def test_the_wheel_leaves_the_experiments_out() -> None:
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert "simulations" in wheel["packages"] and "simulations/experiments" in wheel["exclude"]


def test_the_api_package_installs_as_ldpfed_and_the_examples_stay_out_of_the_wheel() -> None:
    """simulations/ldpfed is the top-level package ldpfed in a built wheel (``sources``) and in the
    README's editable install (``dev-mode-exact``: hatchling maps each package to its folder)."""
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["sources"] == {"simulations/ldpfed": "ldpfed"} and wheel["dev-mode-exact"] is True
    assert "simulations/examples" in wheel["exclude"]
