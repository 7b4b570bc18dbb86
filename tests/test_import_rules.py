"""Issue 27: the import rules of the code's layers, read from the source (AST), not from a run.

- No import circle among fed's modules (imports under ``if TYPE_CHECKING:`` never run and are left out).
- fed imports no flwr (design.md section 3), nor clients, strategies or simulations.
- fed.privacy imports nothing from fed outside fed.privacy: it is the bottom layer.
- Each package of fed imports only what its docstring's "May import:" line names.
- clients/ and strategies/ import nothing from each other: the node protocol both apps speak lives
  in fed.protocol (flwr-free: plain records, every validation and error text), and each app names
  Flower's record classes to it once (fed.protocol.Records).
- fed/ has at most 10 modules at its top level; no module of fed, clients, strategies or
  simulations has more than 600 lines.

Each rule is also fed a synthetic graph that breaks it, and must then report the break.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = ("fed", "clients", "strategies", "simulations")
MAX_TOP_LEVEL = 10
MAX_LINES = 600


@dataclass
class Code:
    """What the rules read: each module's imports (module -> imported names), its package docstrings'
    allowed imports, fed's top-level modules and each module's line count."""

    imports: dict[str, set[str]]
    allowed: dict[str, set[str]] = field(default_factory=dict)
    top_level: list[str] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _repo_name(name: str) -> str:
    """The checkout's name for an installed module name (``ldpfed.fed.x`` is fed/x.py)."""
    rest = name.removeprefix("ldpfed.")
    return rest if rest.split(".")[0] in FIRST_PARTY else name


def _imported(tree: ast.Module, modules: set[str]) -> set[str]:
    """Dotted names a module imports at run time (``from a import b`` names ``a.b`` when that is a module), by
    their names in the checkout."""
    skipped = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test):
            skipped |= {id(child) for stmt in node.body for child in ast.walk(stmt)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {_repo_name(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = _repo_name(node.module)
            for alias in node.names:
                name = f"{module}.{alias.name}"
                found.add(name if name in modules else module)
    return found


def read_code(root: Path = ROOT) -> Code:
    """The import graph, docstring tables, top level and line counts of the checkout at ``root``."""
    paths = {module_name(p, root): p for top in FIRST_PARTY if (root / top).is_dir() for p in (root / top).rglob("*.py")}
    code = Code(imports={})
    for name, path in paths.items():
        text = path.read_text()
        tree = ast.parse(text)
        code.imports[name] = _imported(tree, set(paths)) - {name}
        code.lines[name] = len(text.splitlines())
        if path.name == "__init__.py":
            match = re.search(r"^May import: (.*)\.$", ast.get_docstring(tree) or "", re.MULTILINE)
            if match:
                named = match.group(1).strip()
                code.allowed[name] = set() if named == "nothing outside it" else {n.strip() for n in named.split(",")}
    code.top_level = sorted(p.stem for p in (root / "fed").glob("*.py") if p.name != "__init__.py")
    return code


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def circles(code: Code) -> list[list[str]]:
    """Every import circle among fed's modules (strongly connected components of two or more)."""
    graph = {m: {d for d in deps if d in code.imports and _within(d, "fed")} for m, deps in code.imports.items() if _within(m, "fed")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(graph[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def flwr_in_fed(code: Code) -> list[str]:
    return [f"{m} imports {d}" for m, deps in code.imports.items() if _within(m, "fed") for d in sorted(deps) if _within(d, "flwr")]


def privacy_imports_above(code: Code) -> list[str]:
    return [
        f"{m} imports {d}" for m, deps in code.imports.items() if _within(m, "fed.privacy")
        for d in sorted(deps) if _within(d, "fed") and not _within(d, "fed.privacy")
    ]


def package_of(module: str, code: Code) -> str | None:
    """The innermost package with a "May import:" table that holds ``module``."""
    owners = [p for p in code.allowed if _within(module, p)]
    return max(owners, key=len) if owners else None


def outside_table(code: Code) -> list[str]:
    """Imports of first-party code that the importing package's table does not allow."""
    bad = []
    for module, deps in code.imports.items():
        package = package_of(module, code)
        if _within(module, "fed") and module != "fed" and package is None:
            bad.append(f"{module}: no package docstring with a 'May import:' line holds it")
            continue
        if package is None:
            continue
        allowed = code.allowed[package] | {package}
        for dep in sorted(deps):
            if dep.split(".")[0] in FIRST_PARTY and dep != "fed" and not any(_within(dep, a) for a in allowed):
                bad.append(f"{module} imports {dep}, outside {package}'s table ({', '.join(sorted(allowed))})")
    return bad


def apps_import_each_other(code: Code) -> list[str]:
    return [
        f"{m} imports {d}" for m, deps in code.imports.items() for d in sorted(deps)
        for a, b in (("clients", "strategies"), ("strategies", "clients"))
        if _within(m, a) and _within(d, b)
    ]


def too_many_top_level(code: Code) -> list[str]:
    return [f"fed/ has {len(code.top_level)} top-level modules: {code.top_level}"] if len(code.top_level) > MAX_TOP_LEVEL else []


def too_long(code: Code) -> list[str]:
    return [f"{m}: {n} lines" for m, n in sorted(code.lines.items()) if n > MAX_LINES and m.split(".")[0] in FIRST_PARTY]


RULES = {
    "circles": lambda code: [" <-> ".join(c) for c in circles(code)],
    "flwr": flwr_in_fed,
    "privacy": privacy_imports_above,
    "table": outside_table,
    "apps": apps_import_each_other,
    "top_level": too_many_top_level,
    "lines": too_long,
}


@pytest.fixture(scope="module")
def code() -> Code:
    return read_code()


@pytest.mark.parametrize("rule", RULES)
def test_the_code_keeps_the_rule(code: Code, rule: str) -> None:
    broken = RULES[rule](code)
    assert not broken, "\n".join(broken)


def test_every_package_of_fed_has_a_table(code: Code) -> None:
    packages = {module_name(p.parent / "__init__.py", ROOT) for p in (ROOT / "fed").glob("*/__init__.py")}
    assert packages and packages <= set(code.allowed), sorted(packages - set(code.allowed))
    assert code.allowed["fed.privacy"] == set()


def _good() -> Code:
    """A small graph that keeps every rule."""
    return Code(
        imports={
            "fed.privacy.events": set(), "fed.privacy.ledger": {"fed.privacy.events", "numpy"},
            "fed.runtime.node": {"fed.privacy.ledger"}, "fed.protocol.messages": {"fed.runtime.node", "numpy"},
            "clients.app": {"fed.protocol.messages", "flwr.app"}, "strategies.app": {"fed.protocol.messages", "flwr.app"},
        },
        allowed={"fed.privacy": set(), "fed.runtime": {"fed.privacy"}, "fed.protocol": {"fed.runtime"}},
        top_level=[],
        lines={"fed.runtime.node": MAX_LINES},
    )


BREAKS = {
    "circles": lambda c: c.imports["fed.privacy.events"].add("fed.privacy.ledger"),
    "flwr": lambda c: c.imports["fed.runtime.node"].add("flwr.common"),
    "privacy": lambda c: c.imports["fed.privacy.ledger"].add("fed.runtime.node"),
    "table": lambda c: c.imports["fed.runtime.node"].add("fed.learning.classifier"),
    "apps": lambda c: c.imports["strategies.app"].add("clients.protocol"),
    "top_level": lambda c: c.top_level.extend(f"m{i}" for i in range(MAX_TOP_LEVEL + 1)),
    "lines": lambda c: c.lines.update({"simulations.long": MAX_LINES + 1}),
}


@pytest.mark.parametrize("rule", RULES)
def test_each_rule_reports_a_break(rule: str) -> None:
    good = _good()
    assert all(not check(good) for check in RULES.values()), {name: check(good) for name, check in RULES.items()}
    broken = _good()
    BREAKS[rule](broken)
    assert RULES[rule](broken), f"rule {rule} missed its break"


def test_the_apps_share_the_protocol_from_fed() -> None:
    """Either app importing the other is reported, whichever module it names; the protocol in fed.protocol
    importing flwr breaks the flwr rule."""
    for importer, imported in (("clients.app", "strategies.strategy"), ("strategies.app", "clients.app")):
        code = _good()
        code.imports[importer].add(imported)
        assert apps_import_each_other(code) == [f"{importer} imports {imported}"]
    code = _good()
    code.imports["fed.protocol.messages"].add("flwr.app")
    assert flwr_in_fed(code) == ["fed.protocol.messages imports flwr.app"]


def test_a_module_outside_every_table_is_reported() -> None:
    code = _good()
    code.imports["fed.newpackage.thing"] = set()
    assert any("fed.newpackage.thing" in line for line in outside_table(code))


def test_type_checking_imports_are_not_run_time_imports() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fed.configuration.config import RunConfig\nimport fed.privacy.events\n")
    assert _imported(tree, {"fed.privacy.events"}) == {"typing", "fed.privacy.events"}
