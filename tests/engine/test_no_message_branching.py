"""Decisions read typed fields, never the words of an error message (issue 40, item 5).

Replay, the CLI, the server, the agent loop and the budget code must not branch on what a message says:
rewording a message would change whether a resumed run pays again. The one exception is the module that
maps the wordings of journals written before `StopReason` (`tether/journal/stops.py`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent
SCANNED = ("engine", "journal", "cli", "server", "budget", "agents", "integrations")
EXEMPT = {
    "journal/stops.py": "the one mapping of the wordings of journals written before typed stops",
    "journal/canonical.py": "pydantic's serializer error has no typed field for its nesting limit",
    "cli/main.py": "click's usage error has no typed field for the stray argument it names",
}
MESSAGE_NAMES = {"message", "msg"}
ERROR_NAMES = {"e", "exc", "err", "error", "exception"}


def _mentions_message(node: ast.AST) -> bool:
    """Whether an expression is an error's text: `x.message`, `message`, `str(exc)`, `x.get("message")`, `x["message"]`."""
    if isinstance(node, ast.Attribute):
        return node.attr in MESSAGE_NAMES
    if isinstance(node, ast.Name):
        return node.id in MESSAGE_NAMES
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in MESSAGE_NAMES
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        arg = node.args[0]
        return (isinstance(arg, ast.Name) and arg.id in ERROR_NAMES) or _mentions_message(arg)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value in MESSAGE_NAMES
    return False


def branches_on_message_text(source: str) -> list[int]:
    """The lines of `source` that test an error message's text (startswith/endswith, `in`, `==` a literal)."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("startswith", "endswith") and _mentions_message(node.func.value)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators, strict=True):
                contains = isinstance(op, ast.In | ast.NotIn) and _mentions_message(right)
                equals = isinstance(op, ast.Eq | ast.NotEq) and (
                    (_mentions_message(node.left) and isinstance(right, ast.Constant) and isinstance(right.value, str))
                    or (_mentions_message(right) and isinstance(node.left, ast.Constant)
                        and isinstance(node.left.value, str))
                )
                if contains or equals:
                    lines.append(node.lineno)
    return lines


def test_no_decision_in_replay_cli_server_or_budget_code_reads_an_error_message() -> None:
    found = []
    for package in SCANNED:
        for path in sorted((SRC / package).rglob("*.py")):
            rel = path.relative_to(SRC).as_posix()
            if rel in EXEMPT:
                continue
            found += [f"{rel}:{line}" for line in branches_on_message_text(path.read_text())]
    assert found == [], f"decisions on an error's text (decide on a typed field such as StopReason): {found}"


def test_the_scan_catches_each_form_of_branching_on_a_message() -> None:
    cases = [
        'if err.message.startswith("in-flight exposure cap"): pass',
        'ok = message.endswith("provider cancelled")',
        'if "tree token ceiling" in err.message: pass',
        'if "--raise-budget" not in str(exc): pass',
        'x = "locked" in error.get("message", "")',
        'x = err["message"] == "budget exhausted"',
        'if str(err.get("message", "")).endswith("cancelled"): pass',
    ]
    for case in cases:
        assert branches_on_message_text(case) == [1], case
    clean = [
        'if err.reason is StopReason.TOKEN_CEILING: pass',
        'text = f"{err.message}: more"',
        'if "reason" in data: pass',
        'ok = path.endswith(".py")',
        'if message["type"] == "http.request": pass',
    ]
    for case in clean:
        assert branches_on_message_text(case) == [], case


def test_the_exempt_modules_exist() -> None:
    for rel in EXEMPT:
        assert (SRC / rel).is_file(), rel
