"""Deep entries: whatever a store accepts on write, it loads back, on every store (issue 34, item 3).

pydantic's JSON parser, which every load goes through, refuses input nested past 200 levels; its
serializer, which every append goes through, writes up to about 255. Entries in between (journaled
before `to_jsonable` refused values past `MAX_DEPTH`, or built by the engine itself) now load through
the stdlib parser instead of failing `journal-corrupt` for good.
"""

from __future__ import annotations

import asyncio
import itertools
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tether.contracts.entries import STORED, JournalEntry, RunMeta
from tether.contracts.errors import NonSerializableValueError
from tether.contracts.protocols import JournalStore
from tether.journal.canonical import nesting_depth
from tether.stores.codec import decode_meta, entry_json, parse_entry
from tether.stores.jsonl import JsonlStore
from tether.stores.memory import MemoryStore
from tether.stores.postgres import PostgresStore
from tether.stores.sqlite import SqliteStore

_runs = itertools.count()


def lists(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def deep_json(draw: st.DrawFn) -> Any:
    """JSON nested around the parsers' limits (200 to read, about 255 to write), lists and objects mixed."""
    depth = draw(st.one_of(st.integers(0, 8), st.integers(190, 260), st.sampled_from([128, 129, 400])))
    value: Any = draw(st.one_of(st.none(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                                st.text(max_size=4)))
    for _ in range(depth):
        value = [value] if draw(st.booleans()) else {draw(st.text(max_size=3)): value}
    return value


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgresql"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], JournalStore]:
    """Opens the store under test (once per example: each runs in an event loop of its own)."""
    if request.param == "postgresql":
        dsn, schema = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_schema")
        return lambda: PostgresStore(dsn, schema=schema)
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path / "tether.db")
    if request.param == "jsonl":
        return lambda: JsonlStore(tmp_path / "journals")
    memory = _quiet_memory_store()  # one for the whole test: a memory store lives as long as its object
    return lambda: memory


def _quiet_memory_store() -> MemoryStore:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MemoryStore()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=deep_json(), error_data=deep_json())
def test_whatever_a_store_accepts_on_write_it_loads_back(
    open_store: Callable[[], JournalStore], value: Any, error_data: Any
) -> None:
    async def check() -> None:
        store, run = open_store(), f"deep-{next(_runs)}"
        try:
            await store.append(run, JournalEntry(kind="step", status="running", key="k"))
            sent = JournalEntry(kind="step", status="ok", key="k", ref=1, value=value, error={"data": error_data})
            try:
                await store.append(run, sent)
            except NonSerializableValueError:
                assert [e.seq for e in await store.load(run)] == [1]  # refused whole: nothing appended
                return
            _, got = await store.load(run)
            assert (got.seq, got.value, got.error) == (2, value, {"data": error_data})
        finally:
            if not isinstance(store, MemoryStore):
                await store.close()

    asyncio.run(check())


def test_an_entry_pydantics_parser_refuses_for_depth_loads_through_the_stdlib_parser() -> None:
    text = entry_json(JournalEntry(kind="step", status="ok", key="k", value=lists(230)), 1)
    with pytest.raises(ValidationError, match="recursion limit exceeded"):
        STORED.validate_json(text)  # pydantic's parser, where every load failed: journal-corrupt, for good
    got = parse_entry(text, "seq 1")
    assert got.value == lists(230) and nesting_depth(got.value) == 230


def test_the_deepest_entry_the_serializer_writes_loads_and_one_level_more_is_refused() -> None:
    deepest = None
    for depth in range(240, 270):
        try:
            text = entry_json(JournalEntry(kind="step", key="k", value=lists(depth)), 1)
        except NonSerializableValueError:
            break
        assert parse_entry(text, "seq 1").value == lists(depth)
        deepest = depth
    assert deepest is not None and deepest < 269  # the serializer has a limit, and everything below it loads


def test_run_meta_nested_past_the_parsers_limit_loads_back() -> None:
    meta = RunMeta(run_id="r", workflow="wf", args={"a": lists(230)}, created_at=1.0, updated_at=2.0)
    assert decode_meta(meta.model_dump_json()) == meta
