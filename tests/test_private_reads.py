"""No module outside `tether.engine` reaches into another object's `_attribute` (issue 41).

Features plug in through public seams (docs/internals.md, "Extension seams"), never by reading or
overriding another object's private state. The scan is of `src/tether` minus `src/tether/engine/` (the
engine's own parts wire each other): every `obj._name` access (read, write or delete) and every
`getattr`/`setattr`/`hasattr`/`delattr` with a literal `_name`, where `obj` is not `self`, `cls`,
`type(self)` or `super()`. Dunders are not private. What is allowed anyway is listed below, with why.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "tether"
INSIDE = "engine"
"""The one package whose modules may read each other's private attributes."""

OWN = frozenset({"self", "cls"})
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_field_defaults", "_make"})
"""Public API of `collections.namedtuple` (and `urllib.parse.SplitResult`), underscored to avoid field names."""
MODULE_EXEMPT = frozenset({("os", "_exit"), ("sys", "_getframe")})
"""Documented standard-library functions with a leading underscore."""
FILE_EXEMPT: dict[tuple[str, str], str] = {
    ("models/_sdk_errors.py", "_custom_headers"):
        "the OpenAI and Anthropic SDKs keep a client's custom headers only there: read to mask credentials",
    ("models/google_genai.py", "_api_client"):
        "google-genai keeps a passed-in client's key only there: read to mask it in error messages",
    ("models/google_genai.py", "_credentials"):
        "google-genai keeps a passed-in client's token only there: read to mask it in error messages",
}
"""Third-party objects with no public accessor for what tether needs, per file."""
_ATTR_FUNCTIONS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


@dataclass(frozen=True)
class PrivateRead:
    path: str
    line: int
    receiver: str
    name: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.receiver}.{self.name}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own(node: ast.expr) -> bool:
    """`self`, `cls`, `type(self)`, `super()`: the object's own attributes."""
    if isinstance(node, ast.Name):
        return node.id in OWN
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "super":
            return True
        if node.func.id == "type" and len(node.args) == 1:
            return _own(node.args[0])
    return False


def _allowed(path: str, receiver: ast.expr, name: str, exempt: Mapping[tuple[str, str], str]) -> bool:
    if _own(receiver) or name in NAMEDTUPLE_API or (path, name) in exempt:
        return True
    return isinstance(receiver, ast.Name) and (receiver.id, name) in MODULE_EXEMPT


def private_reads(
    source: str, path: str = "<snippet>", exempt: Mapping[tuple[str, str], str] = FILE_EXEMPT
) -> list[PrivateRead]:
    """Every access to another object's private attribute in `source` (a module's text)."""
    found: list[PrivateRead] = []
    for node in ast.walk(ast.parse(source)):
        receiver: ast.expr | None = None
        name = ""
        if isinstance(node, ast.Attribute) and _private(node.attr):
            receiver, name = node.value, node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ATTR_FUNCTIONS
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
            receiver, name = node.args[0], node.args[1].value
        if receiver is not None and not _allowed(path, receiver, name, exempt):
            found.append(PrivateRead(path, node.lineno, ast.unparse(receiver), name))
    return found


def scan(root: Path) -> list[PrivateRead]:
    """The private reads of every module under `root` outside its `engine/` package."""
    found: list[PrivateRead] = []
    for file in sorted(root.rglob("*.py")):
        rel = file.relative_to(root).as_posix()
        if rel.split("/")[0] != INSIDE:
            found.extend(private_reads(file.read_text(encoding="utf-8"), rel))
    return found


def test_no_module_outside_the_engine_reads_another_objects_private_attribute() -> None:
    found = scan(SRC)
    assert not found, "private attributes read across objects (add a public property or seam):\n" + "\n".join(
        map(str, found))


def test_every_file_exemption_is_still_needed() -> None:
    used = {(path, r.name) for path, _ in FILE_EXEMPT
            for r in private_reads((SRC / path).read_text(encoding="utf-8"), path, exempt={})}
    assert set(FILE_EXEMPT) <= used, f"stale exemptions: {sorted(set(FILE_EXEMPT) - used)}"


def test_the_checker_catches_a_read_of_another_objects_private_attribute() -> None:
    source = '''
import os
from collections import namedtuple

class Preview:
    def __init__(self, handle):
        self._handle = handle                 # its own: fine
        self.seg = handle._segment            # another object's: caught
        handle._early = []                    # a write: caught
        getattr(handle, "_task", None)        # through getattr: caught

    def attach(self, segment):
        super()._attach(segment)              # its own, through the MRO: fine
        type(self)._count = 1                 # fine
        self._handle._bind(None)              # a private of a private: caught

def stop(point):
    point._replace(x=1)                       # namedtuple API: fine
    os._exit(3)                               # documented stdlib: fine
    return point.__class__                    # a dunder: fine
'''
    found = private_reads(source)
    assert [(r.line, r.receiver, r.name) for r in found] == [
        (8, "handle", "_segment"), (9, "handle", "_early"), (10, "handle", "_task"), (15, "self._handle", "_bind"),
    ]


def test_the_scan_fails_on_a_violating_module_added_outside_the_engine_and_not_inside_it(tmp_path: Path) -> None:
    violation = "def replay_facts(ctx):\n    return ctx._agents._replay_facts\n"
    for package in ("integrations/bridge", "engine"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "loop.py").write_text(violation)
    assert sorted(str(r) for r in scan(tmp_path)) == [
        "integrations/bridge/loop.py:2: ctx._agents", "integrations/bridge/loop.py:2: ctx._agents._replay_facts",
    ]
