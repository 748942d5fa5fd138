"""Every stored entry carries a checksum: a flipped byte is a typed error naming where, and nothing is rewritten."""

from __future__ import annotations

import asyncio
import sqlite3
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.contracts.entries import JournalEntry
from tether.stores import JsonlStore, MemoryStore, PostgresStore, SqliteStore, open_store
from tether.testing import Reply

PRICE = tether.Price(input=10.0, output=20.0)


@tether.workflow(name="one")
async def one(ctx: tether.Ctx) -> Any:
    return await ctx.agent("q")


async def journal_a_priced_agent(store: Any) -> JournalEntry:
    """Run one priced agent on `store`; return its terminal entry as journaled."""
    model = tether.models.fake("fake", script=[Reply(text="a fine answer", input_tokens=100, output_tokens=10)],
                               prices={"m": PRICE})
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store)
    assert (await engine.run(one, run_id="r", budget_usd=1.0)).status == "ok"
    return next(e for e in await store.load("r") if e.kind == "agent" and e.ref is not None)


def flip(text: str, needle: str) -> str:
    """`text` with one byte changed inside the first occurrence of `needle`."""
    at = text.index(needle) + len(needle) - 1
    return text[:at] + chr(ord(text[at]) ^ 1) + text[at + 1 :]


# Each backend: how to open it, and how to rewrite one stored entry's text behind its back.
async def sqlite_case(tmp_path: Path, pg: str) -> tuple[Any, Callable[[int, Callable[[str], str]], None], str]:
    path = tmp_path / "t.db"

    def tamper(seq: int, change: Callable[[str], str]) -> None:
        with sqlite3.connect(path) as db:
            (text,) = db.execute("SELECT json FROM entries WHERE run_id='r' AND seq=?", (seq,)).fetchone()
            db.execute("UPDATE entries SET json=? WHERE run_id='r' AND seq=?", (change(text), seq))

    return SqliteStore(path), tamper, str(path)


async def jsonl_case(tmp_path: Path, pg: str) -> tuple[Any, Callable[[int, Callable[[str], str]], None], str]:
    store = JsonlStore(tmp_path / "j")
    path = tmp_path / "j" / "r.jsonl"

    def tamper(seq: int, change: Callable[[str], str]) -> None:
        lines = path.read_text().splitlines()
        lines[seq - 1] = change(lines[seq - 1])
        path.write_text("\n".join(lines) + "\n")

    return store, tamper, str(path)


async def memory_case(tmp_path: Path, pg: str) -> tuple[Any, Callable[[int, Callable[[str], str]], None], str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = MemoryStore()

    def tamper(seq: int, change: Callable[[str], str]) -> None:
        log = store._entries["r"]
        log[seq - 1] = change(log[seq - 1])

    return store, tamper, "memory store"


async def postgres_case(tmp_path: Path, pg: str) -> tuple[Any, Callable[[int, Callable[[str], str]], None], str]:
    import psycopg

    dsn, schema = pg.split("#")
    store = PostgresStore(dsn, schema=schema)

    def tamper(seq: int, change: Callable[[str], str]) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(f'SELECT json FROM "{schema}".entries WHERE run_id=%s AND seq=%s', ("r", seq))
            (text,) = row.fetchone() or ("",)
            conn.execute(f'UPDATE "{schema}".entries SET json=%s WHERE run_id=%s AND seq=%s', (change(text), "r", seq))

    return store, tamper, f"postgres schema {schema}"


CASES = {"sqlite": sqlite_case, "jsonl": jsonl_case, "memory": memory_case, "postgres": postgres_case}


@pytest.fixture(params=sorted(CASES))
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, Any, str]]:
    pg = ""
    if request.param == "postgres":
        pg = f"{request.getfixturevalue('pg_dsn')}#{request.getfixturevalue('pg_schema')}"
    store, tamper, where = await CASES[request.param](tmp_path, pg)
    yield store, tamper, where
    await store.close()


@pytest.mark.parametrize("needle", ['"output":"a fine answe', '"cost_usd":0.00'])
async def test_one_flipped_byte_in_a_journaled_output_or_cost_is_refused(
    backend: tuple[Any, Any, str], needle: str
) -> None:
    store, tamper, where = backend
    terminal = await journal_a_priced_agent(store)
    assert terminal.seq is not None
    tamper(terminal.seq, lambda text: flip(text, needle))
    with pytest.raises(tether.JournalCorruptError) as caught:
        await store.load("r")
    message = caught.value.message
    assert f"seq {terminal.seq}" in message and where in message and "checksum" in message
    with pytest.raises(tether.JournalCorruptError):  # nothing was rewritten: it stays refused
        await store.load("r")


async def test_stripping_the_checksum_after_checksummed_entries_is_refused(backend: tuple[Any, Any, str]) -> None:
    store, tamper, _ = backend
    terminal = await journal_a_priced_agent(store)
    assert terminal.seq is not None
    tamper(terminal.seq, lambda text: text[: text.rindex(',"checksum"')] + "}")
    with pytest.raises(tether.JournalCorruptError, match="no checksum"):
        await store.load("r")


async def test_a_journal_written_before_checksums_still_loads(backend: tuple[Any, Any, str]) -> None:
    store, tamper, _ = backend
    await journal_a_priced_agent(store)
    count = len(await store.load("r"))
    for seq in range(1, count + 1):
        tamper(seq, lambda text: text[: text.rindex(',"checksum"')] + "}")
    entries = await store.load("r")
    assert len(entries) == count and all(not hasattr(e, "checksum") for e in entries)


def test_a_truncated_sqlite_file_is_a_typed_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.db"

    async def journal() -> None:
        store = SqliteStore(path)
        await journal_a_priced_agent(store)
        await store.close()

    asyncio.run(journal())
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises((tether.JournalCorruptError, tether.StoreUnavailableError)) as caught:
        asyncio.run(open_store(f"sqlite:///{path}").load("r"))
    assert str(path) in caught.value.message and isinstance(caught.value, tether.TetherError)
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(tether.JournalCorruptError, match=str(path)):
        SqliteStore(path)


async def test_a_lost_postgres_connection_is_a_typed_error_without_the_password(pg_dsn: str, pg_schema: str) -> None:
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tether_pw') THEN "
                      "CREATE ROLE tether_pw LOGIN PASSWORD 's3cret-pw' SUPERUSER; END IF; END $$")
    dsn = pg_dsn.replace("postgres@", "tether_pw:s3cret-pw@")
    store = PostgresStore(dsn, schema=pg_schema, min_size=1, max_size=1)
    await store.append("r", JournalEntry(kind="step", key="a", status="running"))
    with psycopg.connect(pg_dsn, autocommit=True) as admin:  # the server drops every connection of that role
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'tether_pw'")
    with pytest.raises(tether.StoreUnavailableError) as caught:
        await store.load("r")
    assert "s3cret-pw" not in caught.value.message and "tether_pw:***@" in caught.value.message
    assert caught.value.retryable
    await store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{pg_schema}" CASCADE')
        admin.execute("DROP ROLE IF EXISTS tether_pw")


async def test_a_sqlite_row_renumbered_behind_the_store_is_refused(tmp_path: Path) -> None:
    # The load reads the entries' texts alone (they carry their seqs) and the rows' first and last seq: a row whose
    # number is not its entry's is refused, naming it, though every entry's bytes still hold.
    path = tmp_path / "t.db"
    store = SqliteStore(path)
    await journal_a_priced_agent(store)
    whole = len(await store.load("r"))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE entries SET seq = ? WHERE run_id = 'r' AND seq = 3", (whole + 5,))
    with pytest.raises(tether.JournalCorruptError) as err:
        await store.load("r")
    assert str(path) in str(err.value) and whole > 3
    await store.close()
