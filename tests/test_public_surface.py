"""Issue 28 item 4: ldpfed's public surface is a list, and it changes only with a changelog entry.

The surface is every name of ``ldpfed.__all__`` and of ``ldpfed.plugins.__all__`` (what plugin authors import;
its lines start with ``plugins.``): a function with its parameters, a class with its public attributes and
methods. CHANGELOG.md's latest section holds the surface as it stands, in a fenced ``public-surface`` block; a
name the block gains or loses since the release before must be named in that section's text (under Added,
Changed or Removed). pyproject's version is the latest release's, or the latest section is ``[Unreleased]``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import ldpfed
import ldpfed.plugins
from ldpfed.fed.configuration import config

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = ROOT / "CHANGELOG.md"
BLOCK = re.compile(r"```public-surface\n(.*?)```", re.S)
HEADING = re.compile(r"^## \[([^\]]+)\]", re.M)


PLUGINS = "plugins."
"""How the surface's lines name ``ldpfed.plugins``'s names."""


def surface(module: object, prefix: str = "") -> list[str]:
    """One line per public name: ``f(a, *, b)`` for a function, ``C`` and ``C.attribute`` for a class, each
    after ``prefix``."""
    lines = []
    for name in sorted(module.__all__):
        value = getattr(module, name)
        if inspect.isclass(value):
            lines.append(name)
            fields = {f.name for f in dataclasses.fields(value)} if dataclasses.is_dataclass(value) else set()
            members = {m for m in vars(value) if not m.startswith("_")} | fields
            lines += [f"{name}.{member}" for member in sorted(members)]
        elif inspect.isroutine(value):
            lines.append(name + _bare(value))
        else:  # a constant or a type alias (ldpfed.plugins.Scores)
            lines.append(name)
    return [prefix + line for line in lines]


def live() -> list[str]:
    """The whole public surface: ldpfed's names, then ldpfed.plugins's."""
    return surface(ldpfed) + surface(ldpfed.plugins, PLUGINS)


def _bare(function: object) -> str:
    """The signature's parameter list without annotations, defaults or return type: ``(a, /, *, b, **c)``."""
    signature = inspect.signature(function)
    bare = [p.replace(annotation=inspect.Parameter.empty, default=inspect.Parameter.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=bare, return_annotation=inspect.Signature.empty))


def sections(text: str) -> list[tuple[str, str]]:
    """(version, body) of every ``## [version]`` section, newest first."""
    heads = list(HEADING.finditer(text))
    return [(m.group(1), text[m.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]) for i, m in enumerate(heads)]


def check(live: list[str], changelog: str) -> list[str]:
    """What is wrong between the live surface and the changelog; each problem says what to write."""
    found = sections(changelog)
    if not found:
        return ["CHANGELOG.md has no '## [version]' section"]
    version, body = found[0]
    block = BLOCK.search(body)
    if block is None:
        return [f"CHANGELOG.md's latest section [{version}] has no ```public-surface block; add one with:\n" + "\n".join(live)]
    recorded = [line.strip() for line in block.group(1).splitlines() if line.strip()]
    problems = []
    if recorded != live:
        added = sorted(set(live) - set(recorded))
        removed = sorted(set(recorded) - set(live))
        problems.append(
            f"ldpfed's public surface changed without CHANGELOG.md: in section [{version}] (or a new '## [Unreleased]' "
            f"above it) name each change under ### Added / ### Changed / ### Removed and replace the public-surface "
            f"block with the live one.\n  added: {added}\n  removed: {removed}\n  live block:\n" + "\n".join(live)
        )
    previous = next((BLOCK.search(b) for _, b in found[1:] if BLOCK.search(b)), None)
    before = set() if previous is None else {line.strip() for line in previous.group(1).splitlines() if line.strip()}
    prose = BLOCK.sub("", body)
    for line in sorted(set(recorded) ^ before):
        name = re.split(r"[.(]", line.removeprefix(PLUGINS))[0]  # a class's attribute: the class named suffices
        if f"`{name}" not in prose and f"ldpfed.{name}" not in prose and f"ldpfed.plugins.{name}" not in prose:
            problems.append(f"CHANGELOG.md [{version}] changes {line!r} but its text names no `{name}`: add an entry for it")
    return problems


def test_the_public_surface_matches_the_latest_changelog_section() -> None:
    problems = check(live(), CHANGELOG.read_text())
    assert problems == [], "\n\n".join(problems)


def test_a_new_public_name_without_an_entry_fails_and_says_what_to_add(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ldpfed, "__all__", [*ldpfed.__all__, "fake_public_name"])
    monkeypatch.setattr(ldpfed, "fake_public_name", lambda x, *, y=1: x, raising=False)
    problems = check(live(), CHANGELOG.read_text())
    assert problems and "fake_public_name(x, *, y)" in problems[0] and "### Added" in problems[0]
    block = "\n".join(live())
    documented = BLOCK.sub(lambda _: f"```public-surface\n{block}\n```", CHANGELOG.read_text(), count=1)
    problems = check(live(), documented)  # the block updated, but no entry names it
    assert len(problems) == 1 and "names no `fake_public_name`" in problems[0]


def test_a_new_plugin_name_without_an_entry_fails_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ldpfed.plugins, "__all__", [*ldpfed.plugins.__all__, "FakeEvent"])
    monkeypatch.setattr(ldpfed.plugins, "FakeEvent", type("FakeEvent", (), {"epsilon": 1.0}), raising=False)
    block = "\n".join(live())
    assert "plugins.FakeEvent.epsilon" in block
    problems = check(live(), CHANGELOG.read_text())
    assert problems and "plugins.FakeEvent" in problems[0]
    documented = BLOCK.sub(lambda _: f"```public-surface\n{block}\n```", CHANGELOG.read_text(), count=1)
    problems = check(live(), documented)
    assert len(problems) == 2 and all("names no `FakeEvent`" in p for p in problems), problems


@pytest.mark.parametrize("module", [ldpfed, ldpfed.plugins], ids=["ldpfed", "ldpfed.plugins"])
def test_everything_outside_all_is_private(module: object) -> None:
    public = {name for name in dir(module) if not name.startswith("_")}
    modules = {name for name in public if inspect.ismodule(getattr(module, name))}
    assert public - modules - {"TYPE_CHECKING"} == set(module.__all__)
    for name in module.__all__:
        value = getattr(module, name)
        if inspect.isclass(value) and dataclasses.is_dataclass(value) and value.__module__.startswith("ldpfed"):
            assert value.__dataclass_params__.frozen, name
            undocumented = [f.name for f in dataclasses.fields(value) if not _documented_field(value, f.name)]
            assert undocumented == [], f"{name}: document {undocumented} in its Attributes or below each field"


def _attribute_docstrings(node: ast.AST) -> set[str]:
    """The names in ``node``'s body (a module or a class) that a string literal right after them documents."""
    body = getattr(node, "body", [])
    found = set()
    for statement, after in zip(body, body[1:]):
        target = statement.target if isinstance(statement, ast.AnnAssign) else (
            statement.targets[0] if isinstance(statement, ast.Assign) and len(statement.targets) == 1 else None
        )
        documents = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)
        if isinstance(target, ast.Name) and documents:
            found.add(target.id)
    return found


def _documented_field(cls: type, field: str) -> bool:
    """Named in the class's docstring, documented below its line (in the class or a base), or a run option with
    its help text (a run spec section: ``ldpfed simulate --help``)."""
    if field in (cls.__doc__ or ""):
        return True
    for klass in cls.__mro__:
        if klass.__module__.startswith("ldpfed") and field in _attribute_docstrings(ast.parse(inspect.getsource(klass)).body[0]):
            return True
    return cls.__module__ == "ldpfed.fed.configuration.sections" and bool(config.HELP.get(field))


@pytest.mark.parametrize("name", ldpfed.plugins.__all__)
def test_every_plugin_name_is_documented_and_importable(name: str) -> None:
    """What a plugin author imports is documented where the API reference reads it: its own docstring, or (a type
    alias) the docstring below its line in its home module."""
    namespace: dict[str, object] = {}
    exec(f"from ldpfed.plugins import {name}", namespace)  # noqa: S102 - the import a plugin writes
    value = namespace[name]
    assert value is getattr(ldpfed.plugins, name)
    home = ldpfed.plugins._HOMES[name]
    if inspect.isclass(value) or inspect.isroutine(value):
        doc = value.__doc__ or ""
        assert doc.strip() and not doc.startswith(f"{name}("), f"{name} has no docstring of its own"  # a dataclass's default
        assert value.__module__ == home, f"_HOMES names {home} for {name}, which lives in {value.__module__}"
    else:
        module = importlib.import_module(home)
        assert name in _attribute_docstrings(ast.parse(inspect.getsource(module))), f"document {name} below its line in {home}"


def test_importing_the_plugin_module_loads_nothing_else() -> None:
    """``import ldpfed.plugins`` costs nothing until a name is used (a device's ClientApp may import a plugin): it loads
    only itself and the helper that makes its names lazy."""
    done = subprocess.run(
        [sys.executable, "-P", "-c", "import sys, ldpfed.plugins; print(sorted(m for m in sys.modules if m.startswith('ldpfed.')))"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert done.returncode == 0 and done.stdout.split() == ["['ldpfed._lazy',", "'ldpfed.plugins']"], done.stdout + done.stderr


FED_IMPORT = re.compile(r"^\s*(?:from|import) ldpfed\.fed\b", re.M)


@pytest.mark.parametrize("path", ["simulations/examples/plugin/ldpfed_sphere.py", "docs/plugins.md", "docs/python_api.md"])
def test_plugin_authors_import_nothing_private(path: str) -> None:
    """The example plugin and the pages that teach plugins import from ``ldpfed`` and ``ldpfed.plugins`` only."""
    text = (ROOT / path).read_text()
    assert FED_IMPORT.findall(text) == [], f"{path} imports from ldpfed.fed: use ldpfed.plugins"


def test_the_version_is_pyprojects_and_the_changelogs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", project), "semantic versioning: MAJOR.MINOR.PATCH"
    released = [v for v, _ in sections(CHANGELOG.read_text()) if v != "Unreleased"]
    assert released and released[0] == project, f"pyproject's version {project} is not CHANGELOG.md's latest release"
    assert ldpfed.__version__ == project, "reinstall (pip install -e .) after changing the version"
