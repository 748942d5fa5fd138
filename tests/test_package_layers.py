"""The package layer order, checked: every import between tether's packages points down the order written here
(and, as the same table, in docs/internals.md, "Layers"), and no two packages import each other.

Every import counts: at module level, under `TYPE_CHECKING`, or inside a function (a lazy import is still a
dependency; it only moves the failure to run time). Inside one package the order says nothing (the engine
package has its own cycle test, tests/engine/test_architecture.py).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent
DOCS = Path(__file__).parents[1] / "docs" / "internals.md"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("contracts", ("_lazy", "contracts")),
    ("kernel", ("pricing", "journal", "routing")),
    ("leaves", ("stores", "models", "tools.executors")),
    ("records", ("observability", "audit")),
    ("execution", ("tools", "mcp", "agents")),
    ("orchestration", ("budget", "engine")),
    ("shells", ("testing", "worker", "server", "loops", "events", "tether", "integrations", "cli")),
)
"""Bottom to top. A unit (a package or module under `tether.`, or `tether` itself: the front door) may import
only the units listed before it, so a shell may import another shell only when that one comes first
(`cli` imports `server`; `server` never imports `cli`). A dotted unit (`tools.executors`) is carved out of its
package: the longest unit that prefixes a module owns it."""

KNOWN_EXCEPTIONS: Mapping[tuple[str, str], str] = {}
"""Upward imports tolerated for now, each by importing module and imported module (no other import between the
same packages is let through), with the issue that removes it. An entry whose import is gone fails the test: drop it."""


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int


def module_names(root: Path) -> dict[str, Path]:
    """Every module of the package at `root` (its directory), by dotted name."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(root: Path) -> list[Import]:
    """Every import of a `tether` module by a module under `root`, wherever it sits in the code."""
    known = module_names(root)
    top = root.name
    found: list[Import] = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            found += [Import(name, t, node.lineno) for t in targets if t == top or t.startswith(top + ".")]
    return found


def unit_of(module: str, units: Iterable[str], top: str = "tether") -> str:
    """The unit that owns `module`: the longest unit prefixing it (`top` itself is the front door's unit)."""
    rest = module.removeprefix(top).removeprefix(".")
    if not rest:
        return top
    owners = [u for u in units if u != top and (rest == u or rest.startswith(u + "."))]
    return max(owners, key=len) if owners else rest.split(".")[0]


def rank_of(layers: Sequence[tuple[str, Sequence[str]]]) -> dict[str, int]:
    units = [u for _, members in layers for u in members]
    return {u: i for i, u in enumerate(units)}


def upward(found: Iterable[Import], layers: Sequence[tuple[str, Sequence[str]]],
           allowed: Mapping[tuple[str, str], str] | None = None, top: str = "tether") -> list[str]:
    """Each import that points against the order (or names a unit the order does not place), as a line."""
    rank = rank_of(layers)
    out: list[str] = []
    for imp in found:
        a, b = unit_of(imp.importer, rank, top), unit_of(imp.target, rank, top)
        if a == b or (allowed is not None and (imp.importer, imp.target) in allowed):
            continue
        if a not in rank or b not in rank:
            out.append(f"{imp.importer}:{imp.line} imports {imp.target}: place {a if a not in rank else b!r} in LAYERS")
        elif rank[b] > rank[a]:
            out.append(f"{imp.importer}:{imp.line} imports {imp.target}: {a} may not import {b} (above it)")
    return out


def unit_graph(found: Iterable[Import], units: Iterable[str], top: str = "tether",
               allowed: Mapping[tuple[str, str], str] | None = None) -> dict[str, set[str]]:
    units = list(units)
    graph: dict[str, set[str]] = {}
    for imp in found:
        if allowed is not None and (imp.importer, imp.target) in allowed:
            continue
        a, b = unit_of(imp.importer, units, top), unit_of(imp.target, units, top)
        if a != b:
            graph.setdefault(a, set()).add(b)
    return graph


def cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One circle of `graph`, as the units on it, or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state and (hit := visit(dep)) is not None:
                return hit
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (hit := visit(node)) is not None:
            return hit
    return None


def all_units(root: Path) -> set[str]:
    """The units the source tree has: each top-level package or module, and the front door."""
    return {root.name} | {p.stem for p in root.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in root.iterdir() if (p / "__init__.py").exists()}


# -- the source tree ------------------------------------------------------------------------------
def test_every_package_of_tether_is_placed_in_the_order_once() -> None:
    placed = [u for _, members in LAYERS for u in members]
    assert len(placed) == len(set(placed))
    assert all_units(SRC) <= set(placed), sorted(all_units(SRC) - set(placed))


def test_no_import_between_tether_packages_points_up_the_layer_order() -> None:
    found = imports_of(SRC)
    assert len(found) > 500  # the scan saw the tree (lazy and TYPE_CHECKING imports included)
    assert upward(found, LAYERS, KNOWN_EXCEPTIONS) == []


def test_no_two_tether_packages_import_each_other() -> None:
    graph = unit_graph(imports_of(SRC), rank_of(LAYERS), allowed=KNOWN_EXCEPTIONS)
    assert len(graph) > 15
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


def test_every_known_exception_is_still_an_import_in_the_tree() -> None:
    """Once the branch that removes an exception merges, its entry must go too, or it would excuse a new import."""
    present = {(i.importer, i.target) for i in imports_of(SRC)}
    assert [pair for pair in KNOWN_EXCEPTIONS if pair not in present] == []


def test_the_internals_page_states_the_same_order() -> None:
    """docs/internals.md's "Layers" table lists each layer's units in this order (`tether.X`, or `tether`)."""
    text = DOCS.read_text()
    for layer, members in LAYERS:
        row = next((line for line in text.splitlines() if line.startswith(f"| {layer} |")), None)
        assert row is not None, f"docs/internals.md has no Layers row for {layer!r}"
        cell = row.split("|")[2]
        named = re.findall(r"`(tether(?:\.[a-z_.]+)?)`", cell)
        assert [unit_of(n, [u for _, m in LAYERS for u in m]) for n in named] == list(members), (layer, cell)


# -- the checker itself -----------------------------------------------------------------------------
def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "tether" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "tether"


def test_the_checker_catches_an_upward_import_in_any_position(tmp_path: Path) -> None:
    layers = (("low", ("base",)), ("mid", ("core.leaf", "core")), ("high", ("shell",)))
    tree = _tree(tmp_path, {
        "__init__.py": "",
        "base/__init__.py": "",
        "base/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tether.core import thing\n",
        "core/__init__.py": "from tether.base import a\n",
        "core/b.py": "def lazy():\n    import tether.shell.c\n",
        "core/leaf/__init__.py": "from .. import b\n",
        "shell/__init__.py": "",
        "shell/c.py": "from tether import core\nfrom tether.core.leaf import x\n",
    })
    found = imports_of(tree)
    assert sorted(upward(found, layers)) == [
        "tether.base.a:3 imports tether.core: base may not import core (above it)",
        "tether.core.b:2 imports tether.shell.c: core may not import shell (above it)",
        "tether.core.leaf:1 imports tether.core.b: core.leaf may not import core (above it)",
    ]
    allowed = {("tether.base.a", "tether.core"): "x", ("tether.core.b", "tether.shell.c"): "y",
               ("tether.core.leaf", "tether.core.b"): "z"}
    assert upward(found, layers, allowed) == []
    assert cycle(unit_graph(found, rank_of(layers))) == ["base", "core", "base"]
    assert cycle(unit_graph(found, rank_of(layers), allowed=allowed)) is None


def test_the_checker_refuses_a_package_the_order_does_not_place(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {"__init__.py": "", "base.py": "", "extra.py": "import tether.base\n"})
    assert upward(imports_of(tree), (("low", ("base",)),)) == [
        "tether.extra:1 imports tether.base: place 'extra' in LAYERS"]
    assert all_units(tree) == {"tether", "base", "extra"}
