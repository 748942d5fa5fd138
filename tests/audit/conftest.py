"""Fixtures: an engine on each store holding a settled run whose stored bytes a test can rewrite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from audit_kit import RUN, Backend, jsonl_texts, postgres_texts, sqlite_texts
from audited_flow import make_engine, weather


@pytest.fixture(params=["sqlite", "jsonl", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """An engine on each store, holding the settled run `RUN` (a tool and two agents)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/t.db"
        store: Any = url
        read, write = sqlite_texts(tmp_path / "t.db")
    elif request.param == "jsonl":
        url = f"jsonl://{tmp_path}/j"
        store = url
        read, write = jsonl_texts(tmp_path / "j")
    else:
        from tether.stores.postgres import PostgresStore

        dsn: str = request.getfixturevalue("pg_dsn")
        schema: str = request.getfixturevalue("pg_schema")
        url = f"{dsn}?options=-csearch_path%3D{schema}"
        store = PostgresStore(dsn, schema=schema)
        read, write = postgres_texts(dsn, schema)
    engine = make_engine(store)
    outcome = await engine.run(weather, {"city": "Paris"}, run_id=RUN, budget_usd=1.0)
    assert outcome.status == "ok"
    yield Backend(engine, url, read, write)
    await engine.close()
