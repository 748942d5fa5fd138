"""A store the CLI cannot reach is one line naming the URL it tried, its password redacted."""

from __future__ import annotations

import socket

import pytest
from clikit import AppDir, assert_one_line_error


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


@pytest.mark.parametrize("command", [["runs"], ["inspect", "r"], ["resolve", "r", "k", "allow"], ["cancel", "r"]])
def test_an_unreachable_postgres_store_names_its_url_without_the_password(appdir: AppDir, command: list[str]) -> None:
    pytest.importorskip("psycopg")
    port = _closed_port()
    url = f"postgresql://tether:s3cret-pw@127.0.0.1:{port}/runs"
    line = assert_one_line_error(appdir(*command, "--store", url), 1, f"postgresql://tether:***@127.0.0.1:{port}/runs")
    assert "s3cret-pw" not in line and "cannot connect" in line


def test_an_unusable_sqlite_store_names_its_path(appdir: AppDir) -> None:
    (appdir.path / "runs.db").mkdir()  # a directory where the database file should be
    assert_one_line_error(appdir("runs", "--store", f"sqlite:///{appdir.path}/runs.db"), 1,
                          f"{appdir.path}/runs.db is a directory, not a SQLite file")
