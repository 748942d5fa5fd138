"""Journal figures: store appends against raw drivers, group commit, replay against a raw read, matching.

Each figure is one function returning plain numbers; `bench/run.py` runs each in a fresh process and
prints it beside its reference. PostgreSQL figures use `TETHER_BENCH_PG` (default
`postgresql://postgres@127.0.0.1:5432/test`) in a throwaway schema.

Run alone: `python bench/journal.py` (appends and replay on SQLite).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sqlite3
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

from tether.contracts.entries import JournalEntry
from tether.contracts.usage import Usage
from tether.stores.leases import current_owner

PG_DSN = os.environ.get("TETHER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
APPENDS = 3_000


def _entry(i: int) -> JournalEntry:
    """A typical agent terminal: a few hundred bytes of value, usage and identity."""
    return JournalEntry(
        kind="agent",
        status="ok",
        scope="par:1:0",
        key=f"{i:064x}",
        value={"output": "The quick brown fox jumps over the lazy dog. " * 4, "turns": 3},
        usage=Usage(input_tokens=1200, output_tokens=340),
        served_by="fake:m",
        cost_usd=0.0042,
        started_at=1.7e9 + i,
        ended_at=1.7e9 + i + 0.5,
    )


def _best(rounds: int, fn: Any) -> float:
    return max(fn() for _ in range(rounds))


# -- appends -----------------------------------------------------------------------------------------
def sqlite_appends(n: int = APPENDS, rounds: int = 7) -> dict[str, float]:
    """Appends/s, one entry per transaction: `SqliteStore.append` under a lease vs raw sqlite3 insert+commit.

    The raw reference serializes the same entry with `json.dumps` and commits it in its own
    `BEGIN IMMEDIATE` transaction on a WAL database with `synchronous=NORMAL`, as the store does.
    Each round gives both sides a new database file (a file that grows round after round makes its
    side slower) and runs them back to back; the figure keeps each side's best round and the median
    of the rounds' ratios, which a burst of load on a shared machine moves least.
    """
    from tether.stores.sqlite import SqliteStore

    entries = [_entry(i) for i in range(n)]
    dicts = [e.model_dump(mode="json", exclude_none=True) for e in entries]

    def raw(path: str) -> float:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE entries (run_id TEXT NOT NULL, seq INTEGER NOT NULL, json TEXT NOT NULL,"
                     " PRIMARY KEY (run_id, seq)) WITHOUT ROWID")
        run = uuid.uuid4().hex
        start = time.perf_counter()
        for seq, d in enumerate(dicts, start=1):
            text = json.dumps({**d, "seq": seq}, separators=(",", ":"))
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO entries (run_id, seq, json) VALUES (?, ?, ?)", (run, seq, text))
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
        conn.close()
        return n / elapsed

    def store(path: str) -> float:
        async def main() -> float:
            s = SqliteStore(path)
            run = uuid.uuid4().hex
            lease = await s.acquire(run, current_owner(), 60.0)
            start = time.perf_counter()
            for e in entries:
                await s.append(run, e, lease)
            elapsed = time.perf_counter() - start
            assert len(await s.load(run)) == n
            await s.close()
            return n / elapsed

        return asyncio.run(main())

    tether_rates: list[float] = []
    raw_rates: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):  # alternating which side goes first, each on a file of its own
            sides = [(store, tether_rates, "tether"), (raw, raw_rates, "raw")]
            for fn, rates, name in sides if i % 2 == 0 else sides[::-1]:
                rates.append(fn(f"{tmp}/{name}-{i}.db"))
    ratios = sorted(t / r for t, r in zip(tether_rates, raw_rates, strict=True))
    return {"tether_per_s": max(tether_rates), "raw_per_s": max(raw_rates),
            "median_ratio": ratios[len(ratios) // 2]}


def chain_appends(n: int = APPENDS, rounds: int = 5) -> dict[str, float]:
    """What the hash chain costs (`tether.journal.chain`): SQLite appends of chained entries against the same
    entries unchained, the load of each journal, and sha256 calls counted per append and per loaded entry.

    Both sides take the segment's path: `encode_linked` (seq, ref and checksum, returning the link) and one
    `append_rows_now` transaction per entry under a lease; the chained side sets each entry's `prev` to the
    link the previous encode returned; the sealed side also seals each entry (its payload committed by digest, so
    archive and redact can remove it), as `JournalWriter.stage` does. Rounds alternate which side goes first,
    each on a database of its own; the figure keeps each side's best round and the median paired ratio.
    """
    import hashlib

    from tether.stores import codec
    from tether.stores.sqlite import SqliteStore

    calls = {"sha256": 0}
    real_sha256 = hashlib.sha256

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls["sha256"] += 1
        return real_sha256(*args, **kwargs)

    async def side(path: str, chain: bool, seal: bool = False) -> tuple[float, float, int, int]:
        entries = [_entry(i) for i in range(n)]  # fresh: the chained side links them in place
        s = SqliteStore(path)
        run = uuid.uuid4().hex
        lease = await s.acquire(run, current_owner(), 60.0)
        link = "0" * 64
        hashlib.sha256 = counting  # type: ignore[assignment]  # codec and chain call it through the module
        calls["sha256"] = 0
        try:
            start = time.perf_counter()
            for seq, e in enumerate(entries, start=1):
                if chain:
                    e.prev = link
                text, link = codec.encode_linked(run, seq, e, seal=seal)
                s.append_rows_now(run, [(seq, text)], lease)
            appended = time.perf_counter() - start
            append_hashes = calls["sha256"]
            calls["sha256"] = 0
            start = time.perf_counter()
            loaded = await s.load(run)
            load_s = time.perf_counter() - start
            load_hashes = calls["sha256"]
        finally:
            hashlib.sha256 = real_sha256  # type: ignore[assignment]
        assert len(loaded) == n and (loaded[-1].prev is not None) == chain
        await s.close()
        return n / appended, n / load_s, append_hashes, load_hashes

    results: dict[bool, list[tuple[float, float, int, int]]] = {True: [], False: []}
    sealed: list[tuple[float, float, int, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            order = (True, False) if i % 2 == 0 else (False, True)
            for chain in order:
                results[chain].append(asyncio.run(side(f"{tmp}/{chain}-{i}.db", chain)))
            sealed.append(asyncio.run(side(f"{tmp}/sealed-{i}.db", True, seal=True)))  # as JournalWriter.stage does
    ratios = sorted(c[0] / u[0] for c, u in zip(results[True], results[False], strict=True))
    load_ratios = sorted(c[1] / u[1] for c, u in zip(results[True], results[False], strict=True))
    chained, unchained = results[True][-1], results[False][-1]
    return {
        "chained_per_s": max(r[0] for r in results[True]),
        "unchained_per_s": max(r[0] for r in results[False]),
        "median_ratio": ratios[len(ratios) // 2],
        "chained_load_per_s": max(r[1] for r in results[True]),
        "unchained_load_per_s": max(r[1] for r in results[False]),
        "median_load_ratio": load_ratios[len(load_ratios) // 2],
        "hashes_per_append_chained": chained[2] / n,
        "hashes_per_append_unchained": unchained[2] / n,
        "hashes_per_loaded_entry_chained": chained[3] / n,
        "hashes_per_loaded_entry_unchained": unchained[3] / n,
        "sealed_per_s": max(r[0] for r in sealed),
        "sealed_load_per_s": max(r[1] for r in sealed),
        "sealed_ratio": sorted(c[0] / u[0] for c, u in zip(sealed, results[True], strict=True))[rounds // 2],
        "sealed_load_ratio": sorted(c[1] / u[1] for c, u in zip(sealed, results[True], strict=True))[rounds // 2],
        "hashes_per_append_sealed": sealed[-1][2] / n,
        "hashes_per_loaded_entry_sealed": sealed[-1][3] / n,
    }


def _pg_reachable() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=2):
            return True
    except Exception:
        return False


def postgres_appends(n: int = 1_000, rounds: int = 2) -> dict[str, Any]:
    """Appends/s, one entry per transaction: `PostgresStore.append` under a lease and without one, vs raw psycopg
    insert+commit and vs the floor, one autocommit insert into a logged table of the same columns."""
    if not _pg_reachable():
        return {"error": f"PostgreSQL not reachable at {PG_DSN}"}
    import psycopg

    from tether.stores.postgres import PostgresStore

    entries = [_entry(i) for i in range(n)]
    dicts = [e.model_dump(mode="json", exclude_none=True) for e in entries]
    schema = f"bench_{uuid.uuid4().hex[:12]}"

    async def raw(autocommit: bool = False) -> float:
        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=autocommit) as conn:
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}_raw"')
            await conn.execute(f'CREATE TABLE IF NOT EXISTS "{schema}_raw".entries (run_id TEXT NOT NULL, '
                               "seq BIGINT NOT NULL, json TEXT NOT NULL, PRIMARY KEY (run_id, seq))")
            await conn.commit()
            run = uuid.uuid4().hex
            start = time.perf_counter()
            for seq, d in enumerate(dicts, start=1):
                text = json.dumps({**d, "seq": seq}, separators=(",", ":"))
                await conn.execute(f'INSERT INTO "{schema}_raw".entries (run_id, seq, json) VALUES (%s, %s, %s)',
                                   (run, seq, text))
                if not autocommit:
                    await conn.commit()
            return n / (time.perf_counter() - start)

    async def store(leased: bool = True) -> float:
        s = PostgresStore(PG_DSN, schema=schema)
        try:
            run = uuid.uuid4().hex
            lease = await s.acquire(run, current_owner(), 60.0) if leased else None
            start = time.perf_counter()
            for e in entries:
                await s.append(run, e, lease)
            elapsed = time.perf_counter() - start
            return n / elapsed
        finally:
            await s.close()

    async def drop() -> None:
        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            for name in (schema, f"{schema}_raw"):
                await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')

    try:
        return {"tether_per_s": _best(rounds, lambda: asyncio.run(store())),
                "raw_per_s": _best(rounds, lambda: asyncio.run(raw())),
                "unleased_per_s": _best(rounds, lambda: asyncio.run(store(leased=False))),
                "floor_per_s": _best(rounds, lambda: asyncio.run(raw(autocommit=True)))}
    finally:
        asyncio.run(drop())


def group_commit(branches: int = 8, steps: int = 250) -> dict[str, float]:
    """Steps/s of one run whose `branches` parallel branches each run `steps` steps, and the number of
    store write transactions the journal took, against the same steps run one after another."""
    import tether

    warnings.simplefilter("ignore")

    @tether.workflow(name="par")
    async def par(ctx: tether.Ctx, branches: int, steps: int) -> int:
        async def branch(b: int) -> int:
            for i in range(steps):
                await ctx.step(f"b{b}s{i}", lambda i=i: i)
            return steps

        return sum(await ctx.parallel([functools.partial(branch, b) for b in range(branches)]))

    @tether.workflow(name="seq")
    async def seq(ctx: tether.Ctx, branches: int, steps: int) -> int:
        for b in range(branches):
            for i in range(steps):
                await ctx.step(f"b{b}s{i}", lambda i=i: i)
        return branches * steps

    async def main(tmp: str, wf: Any) -> tuple[float, int]:
        engine = tether.Engine(store=f"sqlite:///{tmp}/{wf.name}.db")
        store = await engine.store()
        writes = 0
        # The calls that each make one transaction (`append_rows` calls `append_rows_now` when there is one).
        rows = "append_rows_now" if hasattr(store, "append_rows_now") else "append_rows"
        for name in ("append", "append_many", rows):
            inner = getattr(store, name, None)
            if inner is None:
                continue

            async def counted(*a: Any, _inner: Any = inner, **k: Any) -> Any:
                nonlocal writes
                writes += 1
                return await _inner(*a, **k)

            def counted_now(*a: Any, _inner: Any = inner, **k: Any) -> Any:  # the write that never waits
                nonlocal writes
                writes += 1
                return _inner(*a, **k)

            setattr(store, name, counted_now if name == "append_rows_now" else counted)
        start = time.perf_counter()
        out = await engine.run(wf, {"branches": branches, "steps": steps}, run_id="g")
        elapsed = time.perf_counter() - start
        assert out.status == "ok", out
        await engine.close()
        return branches * steps / elapsed, writes

    with tempfile.TemporaryDirectory() as tmp:
        par_rate, par_writes = asyncio.run(main(tmp, par))
        seq_rate, seq_writes = asyncio.run(main(tmp, seq))
    return {"parallel_steps_per_s": par_rate, "parallel_writes": par_writes,
            "sequential_steps_per_s": seq_rate, "sequential_writes": seq_writes,
            "steps": branches * steps}


# -- replay ------------------------------------------------------------------------------------------
def _long_workflow(label: str | None) -> Any:
    import tether

    @tether.workflow(name="long")
    async def long(ctx: tether.Ctx, n: int) -> int:
        total = 0
        for i in range(n):
            total += await ctx.step(label or f"s{i}", lambda i=i: i)
        return total

    return long


def _raw_read(kind: str, where: str) -> float:
    """Seconds to read every stored row of run `long` and parse each with `json.loads`."""
    start = time.perf_counter()
    if kind == "sqlite":
        conn = sqlite3.connect(where)
        rows = conn.execute("SELECT seq, json FROM entries WHERE run_id = ? ORDER BY seq", ("long",)).fetchall()
        parsed = [json.loads(text) for _, text in rows]
        conn.close()
    else:
        data = Path(where).read_bytes()
        parsed = [json.loads(line) for line in data.splitlines() if line.strip()]
    elapsed = time.perf_counter() - start
    assert parsed
    return elapsed


def replay(store: str, steps: int = 10_000, label: str | None = None, rounds: int = 5) -> dict[str, float]:
    """A `steps`-step run, then full resumes (every step replays): entries/s against a raw read+parse."""
    import tether

    warnings.simplefilter("ignore")
    wf = _long_workflow(label)

    async def main(tmp: str) -> dict[str, float]:
        url = f"sqlite:///{tmp}/replay.db" if store == "sqlite" else f"jsonl://{tmp}/j"
        raw_at = f"{tmp}/replay.db" if store == "sqlite" else f"{tmp}/j/long.jsonl"
        engine = tether.Engine(store=url)
        start = time.perf_counter()
        await engine.run(wf, {"n": steps}, run_id="long")
        live = time.perf_counter() - start
        entries = len(await engine.inspect("long"))
        store_ = await engine.store()
        resume = cpu = raw = load = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            assert len(await store_.load("long")) == entries
            load = min(load, time.perf_counter() - start)
            c0, start = time.process_time(), time.perf_counter()
            again = await engine.resume("long", wf, {"n": steps})
            resume = min(resume, time.perf_counter() - start)
            cpu = min(cpu, time.process_time() - c0)
            assert again.replay.hits == steps and again.replay.misses == 0
            raw = min(raw, _raw_read(store, raw_at))
        await engine.close()
        return {"entries": entries, "live_s": live, "resume_s": resume, "resume_cpu_s": cpu,
                "tether_per_s": entries / resume, "raw_per_s": entries / raw, "load_per_s": entries / load}

    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(main(tmp))


def repeated_label(steps: int) -> dict[str, float]:
    """CPU seconds of a resume whose `steps` steps all share one label, and the matcher's work for it."""
    import tether
    from tether.journal import matching

    warnings.simplefilter("ignore")
    wf = _long_workflow("again")
    examined = {"n": 0}
    counter = getattr(matching.JournalIndex, "examined", None)

    async def main(tmp: str) -> float:
        engine = tether.Engine(store=f"sqlite:///{tmp}/rep.db")
        await engine.run(wf, {"n": steps}, run_id="long")
        c0 = time.process_time()
        again = await engine.resume("long", wf, {"n": steps})
        cpu = time.process_time() - c0
        assert again.replay.hits == steps
        await engine.close()
        return cpu

    if counter is not None:  # count the candidates the matcher examines (the work the test bounds)
        original = matching.JournalIndex.build.__func__  # type: ignore[attr-defined]

        def build(cls: Any, *a: Any, **k: Any) -> Any:
            index = original(cls, *a, **k)
            examined["index"] = index  # type: ignore[assignment]
            return index

        matching.JournalIndex.build = classmethod(build)  # type: ignore[method-assign, assignment]
    with tempfile.TemporaryDirectory() as tmp:
        cpu = asyncio.run(main(tmp))
    out = {"cpu_s": cpu}
    index = examined.get("index")
    if index is not None:
        out["examined"] = float(index.examined)  # type: ignore[attr-defined]
    return out


if __name__ == "__main__":
    a = sqlite_appends()
    print(f"sqlite appends/s: tether {a['tether_per_s']:,.0f}, raw sqlite3 {a['raw_per_s']:,.0f} "
          f"(best rounds {a['tether_per_s'] / a['raw_per_s']:.2f}x, median of paired rounds {a['median_ratio']:.2f}x)")
    for kind in ("sqlite", "jsonl"):
        r = replay(kind)
        print(f"{kind} replay entries/s: tether {r['tether_per_s']:,.0f}, raw {r['raw_per_s']:,.0f} "
              f"({r['tether_per_s'] / r['raw_per_s']:.2f}x)")
