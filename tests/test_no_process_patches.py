"""The library changes nothing process-wide: no code in `src/tether` writes an attribute of a module it imported
(`socket.socket = ...`, `setattr(asyncio, ...)`, `builtins.x = ...`, `sys.modules[...] = ...`, `del os.environ`).

A module tether itself defines is not exempt either: state belongs to an engine or a run, never to a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent

PROCESS_TABLES = {("sys", "modules"), ("sys", "path_hooks"), ("sys", "meta_path"), ("sys", "excepthook"),
                  ("sys", "displayhook"), ("os", "environ"), ("builtins", "__dict__")}
"""Module attributes whose *contents* are process-wide: writing an item of one patches the process too."""
OWN_PROCESS = {"tools/executors/_runner.py": ["os.environ.pop"]}
"""Files that are a child process's own main program (a tool dispatch): the process is theirs to change."""
MUTATING_METHODS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "append", "insert", "extend",
                              "remove", "__setitem__", "__delitem__"})


def _imported_modules(tree: ast.Module) -> dict[str, str]:
    """Local name -> module, for every `import x`, `import x as y` and `from pkg import module` of the file."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                # `from os import path` binds a module; `from x import Class` binds a class (its attributes are
                # process-wide as well: `socket.socket.connect = ...`).
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _root(expr: ast.expr) -> tuple[str, list[str]] | None:
    """`a.b.c` -> ("a", ["b", "c"]); None unless the expression is a name followed by attributes."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.insert(0, expr.attr)
        expr = expr.value
    return (expr.id, parts) if isinstance(expr, ast.Name) else None


def process_patches(source: str) -> list[tuple[int, str]]:
    """Lines of `source` that write (or delete) an attribute of an imported module or class, or an item of a
    process-wide table (`sys.modules`, `os.environ`)."""
    tree = ast.parse(source)
    modules = _imported_modules(tree)
    found: list[tuple[int, str]] = []

    def module_attr(expr: ast.expr) -> str | None:
        rooted = _root(expr)
        if rooted is None or rooted[0] not in modules or not rooted[1]:
            return None
        return ".".join([modules[rooted[0]], *rooted[1]])

    def table(expr: ast.expr) -> str | None:
        rooted = _root(expr)
        if rooted is None or rooted[0] not in modules or len(rooted[1]) != 1:
            return None
        key = (modules[rooted[0]].split(".")[0], rooted[1][0])
        return ".".join(key) if key in PROCESS_TABLES else None

    def target(t: ast.expr, line: int) -> None:
        if isinstance(t, ast.Tuple | ast.List):
            for el in t.elts:
                target(el, line)
        elif isinstance(t, ast.Attribute) and (name := module_attr(t)) is not None:
            found.append((line, name))
        elif isinstance(t, ast.Subscript) and (name := table(t.value)) is not None:
            found.append((line, f"{name}[...]"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                target(t, node.lineno)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.Delete):
            for t in node.targets if isinstance(node, ast.Delete) else [node.target]:
                target(t, node.lineno)
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
                if (name := module_attr(node.args[0])) is not None or (
                        isinstance(node.args[0], ast.Name) and (name := modules.get(node.args[0].id)) is not None):
                    found.append((node.lineno, f"{func.id}({name}, ...)"))
            elif isinstance(func, ast.Attribute) and func.attr in MUTATING_METHODS \
                    and (name := table(func.value)) is not None:
                found.append((node.lineno, f"{name}.{func.attr}"))
            elif isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__") and node.args \
                    and (name := module_attr(node.args[0]) or (modules.get(node.args[0].id)
                                                              if isinstance(node.args[0], ast.Name) else None)):
                found.append((node.lineno, f"{func.attr}({name}, ...)"))
    return sorted(found, key=lambda hit: hit[0])


def test_no_code_in_src_patches_a_module_or_a_process_wide_table() -> None:
    files = list(SRC.rglob("*.py"))
    assert len(files) > 100  # the scan saw the package
    found = {str(p.relative_to(SRC)): [name for _, name in hits] for p in files
             if (hits := process_patches(p.read_text()))}
    assert found == OWN_PROCESS


def test_the_scan_catches_each_form_of_process_wide_patch() -> None:
    bad = '''
import socket
import asyncio as aio
import builtins
import sys
import os
from socket import socket as Sock
from unittest import mock

def patch():
    socket.socket = object
    socket.socket.connect = None
    socket.create_connection, socket.getaddrinfo = None, None
    setattr(socket, "getaddrinfo", None)
    aio.get_event_loop = None
    builtins.print = None
    sys.modules["tether"] = None
    sys.modules.pop("tether")
    os.environ["X"] = "1"
    os.environ.update(X="1")
    Sock.connect = None
    del socket.create_connection
    object.__setattr__(aio, "run", None)
    mock.patch = None
'''
    assert [name for _, name in process_patches(bad)] == [
        "socket.socket", "socket.socket.connect", "socket.create_connection", "socket.getaddrinfo",
        "setattr(socket, ...)", "asyncio.get_event_loop", "builtins.print", "sys.modules[...]",
        "sys.modules.pop", "os.environ[...]", "os.environ.update", "socket.socket.connect",
        "socket.create_connection", "__setattr__(asyncio, ...)", "unittest.mock.patch",
    ]


def test_the_scan_leaves_local_objects_alone() -> None:
    fine = '''
import socket
from dataclasses import dataclass

@dataclass
class Box:
    value: int = 0

def ok(box: Box, conn: socket.socket) -> None:
    box.value = 1
    setattr(box, "value", 2)
    conn.timeout = 3
    env = dict(os_environ := {})
    env["X"] = "1"
    self_sock = socket.socket()
    self_sock.blocking = False
'''
    assert process_patches(fine) == []
