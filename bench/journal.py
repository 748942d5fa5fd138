"""Journal store throughput: appends per second for every shipped store.

Run: `python bench/journal.py [--entries N]`. PostgreSQL is measured when `TETHER_BENCH_PG` (default
`postgresql://postgres@127.0.0.1:5432/test`) is reachable; it runs in a throwaway schema.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.contracts.entries import JournalEntry
from tether.contracts.protocols import JournalStore
from tether.contracts.usage import Usage
from tether.stores.jsonl import JsonlStore
from tether.stores.memory import MemoryStore
from tether.stores.postgres import PostgresStore
from tether.stores.sqlite import SqliteStore

PG_DSN = os.environ.get("TETHER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
GROUP = 100


@dataclass(frozen=True)
class AppendFigure:
    """One measurement: `entries` appended to one run in `seconds`, `group` entries per call."""

    store: str
    group: int
    entries: int
    seconds: float

    @property
    def per_s(self) -> float:
        return self.entries / self.seconds


def _entry(i: int) -> JournalEntry:
    """A typical agent terminal: a few hundred bytes of value, usage and identity."""
    return JournalEntry(
        kind="agent",
        status="ok",
        scope="par:1:0",
        key=f"{i:064x}",
        value={"text": "The quick brown fox jumps over the lazy dog. " * 4, "turns": 3},
        usage=Usage(input_tokens=1200, output_tokens=340),
        served_by="fake:m",
        cost_usd=0.0042,
        started_at=1.7e9 + i,
        ended_at=1.7e9 + i + 0.5,
    )


async def _time_appends(store: JournalStore, entries: int, group: int) -> float:
    run_id = f"bench-{group}-{uuid.uuid4().hex[:8]}"
    batches = [[_entry(i + j) for j in range(group)] for i in range(0, entries, group)]
    start = time.perf_counter()
    if group == 1:
        for (e,) in batches:
            await store.append(run_id, e)
    else:
        for batch in batches:
            await store.append_many(run_id, batch)
    elapsed = time.perf_counter() - start
    assert len(await store.load(run_id)) == entries
    return elapsed


def _pg_reachable() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=2):
            return True
    except Exception:
        return False


async def _drop_schema(schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def bench_appends(entries: int = 5_000) -> list[AppendFigure]:
    """Append `entries` to a fresh run of each store, one per call and then `GROUP` per call."""
    figures: list[AppendFigure] = []
    with tempfile.TemporaryDirectory() as tmp:
        factories: dict[str, Callable[[], JournalStore]] = {
            "memory": MemoryStore,
            "jsonl": lambda: JsonlStore(Path(tmp) / "jsonl"),
            "sqlite": lambda: SqliteStore(Path(tmp) / "bench.db"),
        }
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        cleanups: list[Callable[[], Coroutine[Any, Any, None]]] = []
        if _pg_reachable():
            factories["postgres"] = lambda: PostgresStore(PG_DSN, schema=schema)
            cleanups.append(lambda: _drop_schema(schema))
        for name, factory in factories.items():
            for group in (1, GROUP):

                async def measure(
                    factory: Callable[[], JournalStore] = factory, g: int = group
                ) -> float:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", UserWarning)
                        store = factory()
                    try:
                        await _time_appends(store, min(200, entries), g)  # warm up
                        return await _time_appends(store, entries, g)
                    finally:
                        await store.close()

                figures.append(AppendFigure(name, group, entries, asyncio.run(measure())))
        for cleanup in cleanups:
            asyncio.run(cleanup())
    return figures


def bench_replay(steps: int = 10_000) -> list[tuple[str, int, float, float]]:
    """Run a `steps`-step workflow once, then time a full resume (every step replays)."""
    import tether

    @tether.workflow(name="long")
    async def long(ctx: tether.Ctx, n: int) -> int:
        total = 0
        for i in range(n):
            total += await ctx.step(f"s{i % 100}", lambda i=i: i)
        return total

    out: list[tuple[str, int, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, url in (("jsonl", f"jsonl://{tmp}/j"), ("sqlite", f"sqlite:///{tmp}/replay.db")):

            async def measure(url: str = url) -> tuple[int, float, float]:
                engine = tether.Engine(store=url)
                start = time.perf_counter()
                await engine.run(long, {"n": steps}, run_id="long")
                live = time.perf_counter() - start
                entries = len(await engine.inspect("long"))
                start = time.perf_counter()
                again = await engine.resume("long", long, {"n": steps})
                replay = time.perf_counter() - start
                assert again.replay.hits == steps and again.replay.misses == 0
                await engine.close()
                return entries, live, replay

            entries, live, replay = asyncio.run(measure())
            out.append((name, entries, live, replay))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--entries", type=int, default=5_000)
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    print(f"{'store':<10} {'per call':>9} {'entries':>8} {'seconds':>8} {'appends/s':>11}")
    for f in bench_appends(args.entries):
        print(f"{f.store:<10} {f.group:>9} {f.entries:>8} {f.seconds:>8.3f} {f.per_s:>11,.0f}")
    print()
    print(f"{'store':<10} {'entries':>8} {'live run s':>11} {'resume s':>9} {'replayed entries/s':>19}")
    for name, entries, live, replay in bench_replay(args.steps):
        print(f"{name:<10} {entries:>8} {live:>11.2f} {replay:>9.2f} {entries / replay:>19,.0f}")


if __name__ == "__main__":
    main()
