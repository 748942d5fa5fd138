"""Distributed workers on PostgreSQL: runs/s with 1, 2, 4 and 8 `tether worker` processes, and appends/s.

Run: `python bench/workers.py [--per-worker N] [--concurrency C ...] [--appends N]`. Needs the PostgreSQL
server at `TETHER_BENCH_PG` (default `postgresql://postgres@127.0.0.1:5432/test`); every measurement
uses a throwaway schema.

Runs: each worker process drives up to `--concurrency` runs at once; a run is two sequential agent
calls to a fake model that answers after 50 ms. All runs are queued first (on a queue no worker
serves), then moved to the workers' queue in one statement, and the clock runs until the last one
settles. Appends: one fenced `store.append` per entry, and one fenced `store.append_rows` per entry
(the call a run's group commit makes, with the entry already encoded), against a raw psycopg
`INSERT` + commit of the same rows on one connection, alternating in rounds so all see the same machine.

This module is also the `--app` the worker processes load (`workers:engine`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import tether
from tether.testing import Reply

PG_DSN = os.environ.get("TETHER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
LATENCY_S = 0.05
HERE = Path(__file__).resolve().parent


@tether.workflow(name="bench_chain")
async def bench_chain(ctx: tether.Ctx, tag: str) -> list[str]:
    """Two agent calls, one after the other."""
    return [await ctx.agent(f"{tag} step {i}") for i in range(2)]


def _reply(request: object) -> Reply:
    return Reply(text="ok", input_tokens=200, output_tokens=20, latency_s=LATENCY_S)


engine = tether.Engine(
    models=[tether.models.fake("fake", script=_reply, prices={"m": tether.Price(input=1.0, output=2.0)})],
    routing={"loop": "fake:m"},
    store=os.environ.get("BENCH_STORE", f"{PG_DSN}?schema=tether_bench"),
    workflows=[bench_chain],
)


# -- runs/s ---------------------------------------------------------------------------------------------
def _spawn(store_url: str, concurrency: int) -> subprocess.Popen[str]:
    src = HERE.parent / "src"
    env = {**os.environ, "BENCH_STORE": store_url, "PYTHONPATH": f"{src}{os.pathsep}{HERE}"}
    argv = [sys.executable, "-c", "from tether.cli.main import main; main()", "worker", "--app", "workers:engine",
            "--queue", "bench", "--concurrency", str(concurrency), "--poll", "0.5"]
    return subprocess.Popen(argv, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _await_ready(proc: subprocess.Popen[str]) -> None:
    """Read until the health line, then keep draining the worker's log so its pipe never fills."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if " ready: " in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return
    raise RuntimeError(f"worker exited {proc.wait()} before it was ready")


async def _runs_per_second(workers: int, concurrency: int, per_worker: int) -> tuple[int, float]:
    import psycopg

    from tether.stores.postgres_sql import notify_channel

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    url = f"{PG_DSN}?schema={schema}"
    client = tether.Engine(store=url, workflows=[bench_chain])
    total = workers * per_worker
    sem = asyncio.Semaphore(16)

    async def put(i: int) -> None:
        async with sem:
            await client.enqueue(bench_chain, {"tag": f"r{i}"}, run_id=f"r{i:05d}", queue="staging")

    await asyncio.gather(*(put(i) for i in range(total)))
    procs = [_spawn(url, concurrency) for _ in range(workers)]
    try:
        for p in procs:
            await asyncio.to_thread(_await_ready, p)
        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            started = time.perf_counter()
            async with conn.transaction():
                await conn.execute(f'UPDATE "{schema}".queue SET queue = %s WHERE queue = %s', ("bench", "staging"))
                await conn.execute("SELECT pg_notify(%s, %s)", (notify_channel(schema), "q:bench"))
            while True:
                cur = await conn.execute(f"SELECT count(*) FROM \"{schema}\".queue WHERE state = 'done'")
                row = await cur.fetchone()
                if row is not None and row[0] >= total:
                    break
                await asyncio.sleep(0.01)
            elapsed = time.perf_counter() - started
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        await client.close()
    return total, total / elapsed


# -- appends/s ----------------------------------------------------------------------------------------------
async def _appends(entries: int, rounds: int = 20) -> dict[str, tuple[float, float]]:
    """Writer -> (appends/s, the median of its per-round ratios to raw psycopg), alternating every round."""
    import psycopg

    from tether.contracts.entries import JournalEntry
    from tether.contracts.usage import Usage
    from tether.stores.codec import number_entries
    from tether.stores.leases import current_owner
    from tether.stores.postgres import PostgresStore

    def entry(i: int) -> JournalEntry:
        return JournalEntry(
            kind="agent", status="ok", scope="par:1:0", key=f"{i:064x}", served_by="fake:m", cost_usd=0.0042,
            value={"text": "The quick brown fox jumps over the lazy dog. " * 4, "turns": 3},
            usage=Usage(input_tokens=1200, output_tokens=340), started_at=1.7e9 + i, seq=i + 1,
        )

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(PG_DSN, schema=schema, max_size=1)
    lease = await store.acquire("tether", current_owner(), 600)
    await store.load("tether")
    rows_lease = await store.acquire("rows", current_owner(), 600)
    await store.load("rows")
    ready = [entry(i) for i in range(entries * rounds)]  # building entries is the caller's work
    rows = number_entries("raw", 0, ready)  # and so is encoding them (a segment encodes as it stages)
    times: dict[str, list[float]] = {"append": [], "append_rows": [], "raw": []}
    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        await conn.execute(
            f'CREATE TABLE "{schema}".raw (run_id text, seq bigint, json text, PRIMARY KEY (run_id, seq))'
        )
        insert = f'INSERT INTO "{schema}".raw (run_id, seq, json) VALUES (%s, %s, %s)'
        for r in range(rounds):
            batch = range(r * entries, (r + 1) * entries)
            started = time.perf_counter()
            for i in batch:
                await store.append("tether", ready[i], lease)
            times["append"].append(time.perf_counter() - started)
            started = time.perf_counter()
            for i in batch:
                await store.append_rows("rows", [rows[i]], rows_lease)
            times["append_rows"].append(time.perf_counter() - started)
            started = time.perf_counter()
            for i in batch:
                seq, text = rows[i]
                await conn.execute(insert, ("raw", seq, text))
            times["raw"].append(time.perf_counter() - started)
        await store.close()
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    n = entries * rounds
    raw = times["raw"]
    return {
        name: (n / sum(ts), statistics.median(r / t for t, r in zip(ts, raw, strict=True)))
        for name, ts in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--per-worker", type=int, default=40, help="runs queued per worker process")
    parser.add_argument("--concurrency", type=int, nargs="*", default=[2, 4], help="runs each worker drives at once")
    parser.add_argument("--appends", type=int, default=150, help="appends per round (20 rounds)")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4, 8])
    parser.add_argument("--repeat", type=int, default=3, help="measurements per point (the median is shown)")
    args = parser.parse_args()

    for concurrency in args.concurrency if args.workers else ():
        print(f"runs/s: fake model {LATENCY_S * 1000:.0f} ms per call, 2 calls per run, concurrency {concurrency} "
              f"per worker, {os.cpu_count()} CPUs, median of {args.repeat} interleaved measurements")
        print(f"{'workers':>8} {'runs':>6} {'runs/s':>8} {'vs 1 worker':>12}")
        rates: dict[int, list[float]] = {k: [] for k in args.workers}
        totals: dict[int, int] = {}
        for _ in range(args.repeat):  # interleaved, so a busy moment on a shared machine hits every K alike
            for k in args.workers:
                totals[k], rate = asyncio.run(_runs_per_second(k, concurrency, args.per_worker))
                rates[k].append(rate)
        base = statistics.median(rates[args.workers[0]])
        for k in args.workers:
            rate = statistics.median(rates[k])
            print(f"{k:>8} {totals[k]:>6} {rate:>8.1f} {rate / base:>11.2f}x")
        print()
    figures = asyncio.run(_appends(args.appends))
    print(f"appends/s, one entry per commit, same rows, {args.appends} at a time, alternating 20 rounds:")
    print(f"{'writer':<40} {'appends/s':>10} {'vs raw (median of rounds)':>26}")
    names = {
        "raw": "raw psycopg INSERT + commit",
        "append": "PostgresStore.append (fenced)",
        "append_rows": "PostgresStore.append_rows (fenced)",
    }
    for key, label in names.items():
        rate, ratio = figures[key]
        print(f"{label:<40} {rate:>10,.0f} {ratio:>26.0%}")


if __name__ == "__main__":
    main()
