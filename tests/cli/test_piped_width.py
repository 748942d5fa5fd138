"""Output into a pipe is never cut to 80 columns; a narrow terminal wraps a tree line, never cuts it (issue 44, item 6)."""

from __future__ import annotations

import pytest
from clikit import AppDir

RUN = "a-run-id-long-enough-that-the-tree-root-line-goes-past-eighty-columns-01"


@pytest.fixture
def ran(appdir: AppDir, monkeypatch: pytest.MonkeyPatch) -> AppDir:
    monkeypatch.delenv("COLUMNS", raising=False)
    result = appdir("run", "flows:panel", "--args", '{"question": "q"}', "--run-id", RUN, "--budget", "1.0")
    assert result.exit_code == 0, result.stderr
    return appdir


def test_a_piped_tree_prints_its_long_root_line_whole(ran: AppDir) -> None:
    result = ran("tree", RUN, "--store", ran.store)  # CliRunner's stdout is not a terminal: a pipe
    assert result.exit_code == 0, result.stderr
    root = result.stdout.splitlines()[0]
    assert len(root) > 80
    assert root.startswith(f"{RUN} (workflow)") and root.endswith(" USD"), root


def test_piped_tables_keep_every_column(ran: AppDir) -> None:
    result = ran("runs", "--store", ran.store)
    assert result.exit_code == 0, result.stderr
    assert RUN in result.stdout and "left out" not in result.stdout
    assert "segments" in result.stdout  # a column a narrow terminal leaves out first


def test_a_narrow_terminal_wraps_a_tree_line_and_loses_no_figure(ran: AppDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    text = ran("tree", RUN, "--store", ran.store).stdout
    assert all(len(line) <= 40 for line in text.splitlines()), text
    joined = "".join(line.strip("│├└─ ") for line in text.splitlines())
    assert RUN in joined and "USD" in text and "…" not in text
