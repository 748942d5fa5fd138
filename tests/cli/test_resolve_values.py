"""`tether resolve` refuses what a suspension does not accept: an approval takes exactly allow or deny."""

from __future__ import annotations

from typing import Any

import pytest
from clikit import AppDir, assert_one_line_error

KEY = "approval:2:save_note:0"


def _suspended_note(appdir: AppDir, run_id: str) -> str:
    result = appdir("run", "flows:note", "--run-id", run_id)
    assert result.exit_code == 4, result.stdout + result.stderr
    (pending,) = [ln for ln in result.stdout.splitlines() if ln.strip().startswith("pending")]
    return pending.split("pending", 1)[1].strip()


def _journal(appdir: AppDir, run_id: str) -> Any:
    return appdir.json("inspect", run_id, "--store", appdir.store)


def _tools_run(appdir: AppDir, run_id: str) -> list[Any]:
    rows: Any = appdir.json("ledger", run_id, "--store", appdir.store)
    return [(r["tool"], r["outcome"]) for r in rows]


def test_the_pending_line_of_an_approval_says_allow_or_deny(appdir: AppDir) -> None:
    assert _suspended_note(appdir, "n1") == f"tether resolve n1 {KEY} allow|deny --store {appdir.store}"
    doc: Any = appdir.json("run", "flows:note", "--run-id", "n2")
    assert doc["resolve"] == [f"tether resolve n2 {KEY} allow|deny --store {appdir.store}"]


@pytest.mark.parametrize("value", ["alow", "Allow", "yes", "approve", "true", '{"decision": "allow"}', "1", '""'])
def test_an_approval_refuses_anything_but_allow_or_deny_in_one_line_and_writes_nothing(
    appdir: AppDir, value: str
) -> None:
    _suspended_note(appdir, "n1")
    before = _journal(appdir, "n1")
    refused = appdir("resolve", "n1", KEY, value, "--store", appdir.store)
    line = assert_one_line_error(refused, 2, "(invalid-resolution)", f"approval {KEY!r}", "neither 'allow' nor 'deny'")
    assert "Nothing was journaled" in line
    assert _journal(appdir, "n1") == before


@pytest.mark.parametrize(("value", "ran"), [("allow", [("save_note", "ok")]), ("deny", [])])
def test_allow_runs_the_tool_and_deny_does_not(appdir: AppDir, value: str, ran: list[Any]) -> None:
    pending = _suspended_note(appdir, "n1")
    resolved = appdir.run_line(pending.replace("allow|deny", value))
    assert resolved.exit_code == 0 and "resolved" in resolved.stdout, resolved.stderr
    finished = appdir("resume", "n1", "--app", "flows:engine", "--store", appdir.store)
    assert finished.exit_code == 0 and "run n1: ok" in finished.stdout, finished.stdout
    assert _tools_run(appdir, "n1") == ran


def test_a_mistyped_key_lists_the_open_keys(appdir: AppDir) -> None:
    _suspended_note(appdir, "n1")
    typo = appdir("resolve", "n1", "approval:2:save_nte:0", "allow", "--store", appdir.store)
    assert_one_line_error(typo, 1, "(suspension-not-found)", "has no suspension 'approval:2:save_nte:0'",
                          f"open keys: {KEY!r}")
    assert appdir("run", "flows:items", "--run-id", "done").exit_code == 0
    nothing = appdir("resolve", "done", "approve", "yes", "--store", appdir.store)
    assert_one_line_error(nothing, 1, "open keys: none")


def test_a_closed_key_still_reports_already_closed(appdir: AppDir) -> None:
    _suspended_note(appdir, "n1")
    assert appdir("resolve", "n1", KEY, "deny", "--store", appdir.store).exit_code == 0
    again = appdir("resolve", "n1", KEY, "alow", "--store", appdir.store)  # closed: no value is looked at
    assert again.exit_code == 0 and "already closed" in again.stdout


def test_an_enum_schema_prints_its_values_and_refuses_others(appdir: AppDir) -> None:
    result = appdir("run", "flows:pick", "--run-id", "p1")
    assert result.exit_code == 4
    assert f"pending  tether resolve p1 color red|green --store {appdir.store}" in result.stdout
    refused = appdir("resolve", "p1", "color", "blue", "--store", appdir.store)
    assert_one_line_error(refused, 2, "(invalid-resolution)", "'blue' is not one of ['red', 'green']")
    assert appdir("resolve", "p1", "color", "green", "--store", appdir.store).exit_code == 0
    finished: Any = appdir.json("resume", "p1", "--app", "flows:engine", "--store", appdir.store)
    assert finished["status"] == "ok" and finished["value"] == "green"
