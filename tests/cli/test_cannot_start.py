"""`tether serve` and `tether worker` that cannot begin: one line on stderr, no banner, exit 6 (issue 44, item 2)."""

from __future__ import annotations

import socket

import pytest
from clikit import AppDir, assert_one_line_error

from tether.cli.shell import EXIT_CANNOT_START


def test_serve_on_a_busy_port_says_so_before_any_banner(appdir: AppDir) -> None:
    pytest.importorskip("uvicorn")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = appdir("serve", "--store", "memory://", "--port", str(port))
    line = assert_one_line_error(result, EXIT_CANNOT_START, "tether serve could not start", f"port {port}",
                                 "already in use", "--port")
    assert "Errno" not in line


def test_a_worker_whose_store_is_unreachable_does_not_say_it_is_ready(appdir: AppDir) -> None:
    pytest.importorskip("psycopg")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once the socket is closed
    (appdir.path / "pgapp.py").write_text(
        f"import tether\nengine = tether.Engine(store='postgresql://tether:pw@127.0.0.1:{port}/runs')\n"
    )
    result = appdir("worker", "--app", "pgapp:engine")
    line = assert_one_line_error(result, EXIT_CANNOT_START, "tether worker could not start", "cannot connect",
                                 f"127.0.0.1:{port}")
    assert "ready" not in line and ":pw@" not in line


def test_the_exit_code_table_names_could_not_start() -> None:
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    assert f"| {EXIT_CANNOT_START} | could not start" in docs
