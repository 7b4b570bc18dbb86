"""Issue 28 item 4: ldpfed's public surface is a list, and it changes only with a changelog entry.

The surface is every name of ``ldpfed.__all__``: a function with its parameters, a class with its
public attributes and methods. CHANGELOG.md's latest section holds the surface as it stands, in a
fenced ``public-surface`` block; a name the block gains or loses since the release before must be
named in that section's text (under Added, Changed or Removed). pyproject's version is the latest
release's, or the latest section is ``[Unreleased]``.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import tomllib
from pathlib import Path

import pytest

import ldpfed

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = ROOT / "CHANGELOG.md"
BLOCK = re.compile(r"```public-surface\n(.*?)```", re.S)
HEADING = re.compile(r"^## \[([^\]]+)\]", re.M)


def surface(module: object) -> list[str]:
    """One line per public name: ``f(a, *, b)`` for a function, ``C`` and ``C.attribute`` for a class."""
    lines = []
    for name in sorted(module.__all__):
        value = getattr(module, name)
        if inspect.isclass(value):
            lines.append(name)
            fields = {f.name for f in dataclasses.fields(value)} if dataclasses.is_dataclass(value) else set()
            members = {m for m in vars(value) if not m.startswith("_")} | fields
            lines += [f"{name}.{member}" for member in sorted(members)]
        elif callable(value):
            lines.append(name + _bare(value))
        else:
            lines.append(name)
    return lines


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
        name = re.split(r"[.(]", line)[0]  # a class's attribute: the class named suffices
        if f"`{name}" not in prose and f"ldpfed.{name}" not in prose:
            problems.append(f"CHANGELOG.md [{version}] changes {line!r} but its text names no `{name}`: add an entry for it")
    return problems


def test_the_public_surface_matches_the_latest_changelog_section() -> None:
    problems = check(surface(ldpfed), CHANGELOG.read_text())
    assert problems == [], "\n\n".join(problems)


def test_a_new_public_name_without_an_entry_fails_and_says_what_to_add(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ldpfed, "__all__", [*ldpfed.__all__, "fake_public_name"])
    monkeypatch.setattr(ldpfed, "fake_public_name", lambda x, *, y=1: x, raising=False)
    problems = check(surface(ldpfed), CHANGELOG.read_text())
    assert problems and "fake_public_name(x, *, y)" in problems[0] and "### Added" in problems[0]
    live = "\n".join(surface(ldpfed))
    documented = BLOCK.sub(lambda _: f"```public-surface\n{live}\n```", CHANGELOG.read_text(), count=1)
    problems = check(surface(ldpfed), documented)  # the block updated, but no entry names it
    assert len(problems) == 1 and "names no `fake_public_name`" in problems[0]


def test_everything_outside_all_is_private() -> None:
    public = {name for name in dir(ldpfed) if not name.startswith("_")}
    modules = {name for name in public if inspect.ismodule(getattr(ldpfed, name))}
    assert public - modules - {"TYPE_CHECKING"} == set(ldpfed.__all__)
    for name in ldpfed.__all__:
        value = getattr(ldpfed, name)
        if inspect.isclass(value) and dataclasses.is_dataclass(value) and value.__module__.startswith("ldpfed"):
            assert value.__dataclass_params__.frozen, name
            undocumented = [f.name for f in dataclasses.fields(value) if f.name not in (value.__doc__ or "")]
            assert undocumented == [], f"{name}: document {undocumented} in its Attributes"


def test_the_version_is_pyprojects_and_the_changelogs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", project), "semantic versioning: MAJOR.MINOR.PATCH"
    released = [v for v, _ in sections(CHANGELOG.read_text()) if v != "Unreleased"]
    assert released and released[0] == project, f"pyproject's version {project} is not CHANGELOG.md's latest release"
    assert ldpfed.__version__ == project, "reinstall (pip install -e .) after changing the version"
