"""At 80 columns `tether inspect`, `ledger` and `runs` keep labels, ids and tool names whole and say how to widen."""

from __future__ import annotations

from typing import Any

import pytest
from clikit import AppDir

from tether.contracts.money import usd

RUN = "survey-run-01M8VRE76K54Q4CE1PB7"


@pytest.fixture
def surveyed(appdir: AppDir) -> AppDir:
    assert appdir("run", "flows:survey", "--run-id", RUN, "--budget", "1.0").exit_code == 0
    return appdir


def _shown(appdir: AppDir, monkeypatch: pytest.MonkeyPatch, columns: int, *argv: str) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    result = appdir(*argv, "--store", appdir.store)
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    return result.stdout


def _table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]


def test_inspect_at_80_columns_keeps_every_label_whole_and_says_how_to_see_the_rest(
    surveyed: AppDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries: Any = surveyed.json("inspect", RUN, "--store", surveyed.store)
    labels = {e["label"] for e in entries if e["label"]}
    assert {"survey-of-repository-contributors", "budget_draw", "genesis"} <= labels
    text = _shown(surveyed, monkeypatch, 80, "inspect", RUN)
    assert all(len(line) <= 80 for line in _table_lines(text)), text
    assert "…" not in text
    cells = {cell.strip() for line in _table_lines(text) for cell in line.strip("│┃").split("│")}
    assert labels <= cells, labels - cells  # each label whole, in one cell
    (footer,) = [line for line in text.splitlines() if line.startswith("left out")]
    assert "to fit 80 columns" in footer and "--wide" in footer and "COLUMNS" in footer
    left_out = footer.removeprefix("left out ").split(" to fit")[0].split(", ")
    assert left_out and set(left_out) <= {"key", "ref", "scope"}  # the less important columns, never a key one
    headers = _table_lines(text)[1]
    assert all(h in headers for h in ("seq", "kind", "status", "label", "cost"))


def test_inspect_wide_shows_every_column_and_a_wide_terminal_needs_no_footer(
    surveyed: AppDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    for text in (_shown(surveyed, monkeypatch, 80, "inspect", RUN, "--wide"),
                 _shown(surveyed, monkeypatch, 200, "inspect", RUN)):
        headers = _table_lines(text)[1]
        assert all(h in headers for h in ("seq", "ref", "kind", "status", "scope", "label", "key", "cost")), text
        assert "left out" not in text and "…" not in text
        assert "survey-of-repository-contributors" in text


def test_ledger_at_80_columns_keeps_the_attempt_id_and_the_tool_name_whole(
    surveyed: AppDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    (record,) = surveyed.json("ledger", RUN, "--store", surveyed.store)  # type: ignore[misc]
    text = _shown(surveyed, monkeypatch, 80, "ledger", RUN)
    assert all(len(line) <= 80 for line in _table_lines(text)), text
    (row,) = [line for line in _table_lines(text) if line.startswith("│")]
    assert f"│ {record['attempt_id']} │ count_repository_contributors │" in row
    assert "left out" in text and "--wide" in text and "…" not in text
    wide = _shown(surveyed, monkeypatch, 80, "ledger", RUN, "--wide")
    assert record["args_hash"][:12] in wide and record["executor"] in wide and "left out" not in wide


def test_runs_shows_what_each_run_spent_next_to_its_budget_from_the_cost_fold(
    surveyed: AppDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert surveyed("run", "flows:items", "--run-id", "free").exit_code == 0
    cost: Any = surveyed.json("cost", RUN, "--store", surveyed.store)
    assert cost["spent_usd"] > 0
    listed: Any = surveyed.json("runs", "--store", surveyed.store)
    by_id = {r["run_id"]: r for r in listed}
    assert (by_id[RUN]["spent_usd"], by_id[RUN]["orphaned_usd"], by_id[RUN]["total_usd"]) == (
        cost["spent_usd"], cost["orphaned_usd"], cost["total_usd"])
    assert by_id[RUN]["budget_usd"] == 1.0 and by_id["free"]["spent_usd"] == 0.0
    text = _shown(surveyed, monkeypatch, 80, "runs")
    (row,) = [line for line in _table_lines(text) if RUN in line]
    assert usd(cost['spent_usd']) in row and "1.00" in row and "ok" in row
    assert "spent" in _table_lines(text)[1] and "budget" in _table_lines(text)[1]
    assert "orphaned" not in text  # no call was cut off: no orphaned column
