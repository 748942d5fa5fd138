"""Shells do not import each other: nothing outside `tether.cli` imports it (the audit's cassette runner and the
server included, lazily or not), and the CLI reaches the server only inside `tether serve`."""

from __future__ import annotations

import ast
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent


def imported(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, at module level) of every `tether.*` import in `path`, in functions too."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body} | {id(c) for n in tree.body if isinstance(n, ast.If) for c in ast.walk(n)}
    out: list[tuple[int, str, bool]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        out += [(node.lineno, n, id(node) in top) for n in names if n.startswith("tether.")]
    return out


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_nothing_outside_the_cli_imports_the_cli() -> None:
    found = [f"{p.relative_to(SRC)}:{line} {name}" for p in SRC.rglob("*.py") if "cli" not in p.relative_to(SRC).parts
             for line, name, _ in imported(p) if _under(name, "tether.cli")]
    assert found == []


def test_the_cli_imports_the_server_only_inside_a_command() -> None:
    found = [f"{p.relative_to(SRC)}:{line} {name}" for p in (SRC / "cli").rglob("*.py")
             for line, name, top in imported(p) if _under(name, "tether.server") and top]
    assert found == []


def test_the_scan_sees_lazy_imports_and_tells_them_from_module_level_ones(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import tether.cli.main\nfrom tether.server import app\n\n\ndef serve():\n"
                      "    from tether.cli.shell import console\n")
    assert [(n, top) for _, n, top in imported(source) if n in ("tether.cli.main", "tether.server",
                                                                "tether.cli.shell")] == [
        ("tether.cli.main", True), ("tether.server", True), ("tether.cli.shell", False)]
