"""A server whose store cannot be reached answers with the store it tried (password redacted), never a traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import tether
from tether.server import create_app


def _client(url: str) -> TestClient:
    app = create_app(tether.Engine(store=url), mode="store", owns_engine=True)
    return TestClient(app, base_url="http://localhost", headers={"X-Tether-Request": "1"})


def test_an_unusable_sqlite_store_is_a_503_naming_its_file(tmp_path: Path) -> None:
    (tmp_path / "runs.db").mkdir()  # the database path is a directory: sqlite cannot open it
    with _client(f"sqlite:///{tmp_path}/runs.db") as client:
        r = client.get("/api/runs")
    assert r.status_code == 503, r.json()
    error = r.json()["error"]
    assert error["code"] == "store-unavailable" and f"{tmp_path}/runs.db" in error["message"]


def test_an_unreachable_postgres_store_names_its_url_without_the_password() -> None:
    pytest.importorskip("psycopg")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with _client(f"postgresql://tether:s3cret-pw@127.0.0.1:{port}/runs") as client:
        r = client.get("/api/runs")
    assert r.status_code in (400, 503), r.json()
    message = r.json()["error"]["message"]
    assert f"postgresql://tether:***@127.0.0.1:{port}/runs" in message and "s3cret-pw" not in r.text
