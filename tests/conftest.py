"""Shared fixtures for tether's own tests: the real PostgreSQL server and a fresh schema per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

PG_DSN = os.environ.get("TETHER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The test server's DSN; unreachable, it skips locally and fails under CI (which starts PostgreSQL)."""
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=3):
            pass
    except Exception as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL not reachable at {PG_DSN}: {exc}")
        pytest.skip(f"PostgreSQL not reachable at {PG_DSN}: {exc}")
    return PG_DSN


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A schema name no other test uses, dropped afterwards."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture(autouse=True)
def _engine_entries_are_the_entries_pydantic_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine builds its entries without validating them again (`LeanEntries`): in every test, each one
    must be the entry pydantic validates from the same fields (equal, the same bytes, the same types)."""
    from typing import Any

    from tether.contracts.entries import JournalEntry
    from tether.engine.tree import LeanEntries

    lean = LeanEntries.__call__

    def checked(self: LeanEntries, **fields: Any) -> JournalEntry:
        built = lean(self, **fields)
        reference = JournalEntry(**{k: v for k, v in fields.items() if v is not None})
        assert built == reference, (built, reference)
        assert built.model_dump_json() == reference.model_dump_json()
        assert {n: type(v) for n, v in built} == {n: type(v) for n, v in reference}
        assert set(built.model_fields_set) == {*reference.model_fields_set, "seq"}
        return built

    monkeypatch.setattr(LeanEntries, "__call__", checked)


@pytest.fixture(autouse=True)
def _engine_events_are_the_events_pydantic_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine builds its hot events, or keeps their values, without validating them again (`LeanEvents`):
    in every test, each one must be the event pydantic validates from the same fields (equal, the same bytes,
    the same types)."""
    from typing import Any

    from tether.contracts.events import BaseEvent, LeanEvents

    lean = LeanEvents.__call__

    def checked(self: LeanEvents, cls: type[BaseEvent], /, **fields: Any) -> BaseEvent:
        built = lean(self, cls, **dict(fields))
        reference = cls(**fields)
        assert type(built) is cls and built == reference, (built, reference)
        assert built.model_dump_json() == reference.model_dump_json()
        assert list(built.__dict__) == list(reference.__dict__)
        assert {n: type(v) for n, v in built} == {n: type(v) for n, v in reference}
        assert built.model_fields_set == reference.model_fields_set
        return built

    lean_state = LeanEvents.state

    def checked_state(self: LeanEvents, cls: type[BaseEvent], fields: dict[str, Any]) -> dict[str, Any] | None:
        given = dict(fields)
        state = lean_state(self, cls, fields)
        if state is not None:  # the values a stream keeps without building the model (`emit_fields`)
            reference = cls(**given)
            assert state == reference.__dict__, (state, reference)
            assert list(state) == list(reference.__dict__)
            assert {n: type(v) for n, v in state.items()} == {n: type(v) for n, v in reference}
            assert set(fields) == reference.model_fields_set
        return state

    monkeypatch.setattr(LeanEvents, "__call__", checked)
    monkeypatch.setattr(LeanEvents, "state", checked_state)
