"""Fixtures for the retention tests: a store URL per backend (SQLite, JSONL, the real PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "jsonl", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/tether.db"
    if request.param == "jsonl":
        return f"jsonl://{tmp_path}/journals"
    dsn = request.getfixturevalue("pg_dsn")
    schema = request.getfixturevalue("pg_schema")
    return f"{dsn}?schema={schema}"
