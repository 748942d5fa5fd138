"""Distributed workers on PostgreSQL: runs/s of 1, 2, 4 and 8 `tether worker` processes, beside DBOS queues; appends/s.

Run: `python bench/workers.py [--figures runs queues appends] [--per-worker N] [--concurrency C ...] [--appends N]
[--no-flush]`.
Needs the PostgreSQL server at `TETHER_BENCH_PG` (default `postgresql://postgres@127.0.0.1:5432/test`);
every measurement uses a throwaway schema (the DBOS comparison, a throwaway database). Tables are
printed in Markdown, after the machine they ran on (`--out FILE` also writes them).

Runs: each worker process drives up to `--concurrency` runs at once; a run is two sequential agent
calls to a fake model that answers after 50 ms. All runs are queued first (on a queue no worker
serves), then moved to the workers' queue in one statement, and the clock runs until the last one
settles. Queues (`bench/queue_peers.py`): the same way, tether workers beside DBOS queue workers on
the same PostgreSQL and box, for an empty workflow, one step and a one-turn agent (10 ms model), with
the commits and transactions each run costs the database, and enqueue-to-start on an idle pool.
Appends: one `store.append` per entry (fenced, and without a lease), one fenced `store.append_rows` per
entry (the call a run's group commit makes, with the entry already encoded), against a raw psycopg `INSERT` on an
autocommit connection (one round trip: the floor) and a raw `INSERT` then `COMMIT` (two round trips:
the baseline before), alternating in rounds so all see the same machine.

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
from tether.contracts.messages import ChatRequest
from tether.testing import Reply

PG_DSN = os.environ.get("TETHER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
LATENCY_S = 0.05
FAST = "fast:"  # prompts that start so are answered after FAST_LATENCY_S (the one-turn agent beside DBOS)
FAST_LATENCY_S = 0.01
HERE = Path(__file__).resolve().parent


@tether.workflow(name="bench_chain")
async def bench_chain(ctx: tether.Ctx, tag: str) -> list[str]:
    """Two agent calls, one after the other."""
    return [await ctx.agent(f"{tag} step {i}") for i in range(2)]


# The workflows measured beside DBOS queues (bench/queue_peers.py; DBOS's own are in bench/dbos_queues.py).
@tether.workflow(name="bench_empty")
async def bench_empty(ctx: tether.Ctx, i: int) -> int:
    """No effects at all."""
    return i


@tether.workflow(name="bench_step")
async def bench_step(ctx: tether.Ctx, i: int) -> int:
    """One journaled host step."""
    return int(await ctx.step("one", lambda: 1))


@tether.workflow(name="bench_agent")
async def bench_agent(ctx: tether.Ctx, i: int) -> str:
    """One one-turn agent; the fake model answers after 10 ms."""
    return await ctx.agent(f"{FAST} hello {i}")


@tether.workflow(name="bench_stamp")
async def bench_stamp(ctx: tether.Ctx, i: int) -> float:
    """The moment the body started, to time enqueue-to-start."""
    return time.time()


def _reply(request: ChatRequest) -> Reply:
    fast = request.messages[-1].text_content.startswith(FAST)
    return Reply(text="ok", input_tokens=200, output_tokens=20, latency_s=FAST_LATENCY_S if fast else LATENCY_S)


engine = tether.Engine(
    models=[tether.models.fake("fake", script=_reply, prices={"m": tether.Price(input=1.0, output=2.0)})],
    routing={"loop": "fake:m"},
    store=os.environ.get("BENCH_STORE", f"{PG_DSN}?schema=tether_bench"),
    workflows=[bench_chain, bench_empty, bench_step, bench_agent, bench_stamp],
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
APPEND_WRITERS = {
    "raw": "raw psycopg INSERT, autocommit (one round trip: the floor)",
    "raw_commit": "raw psycopg INSERT, then COMMIT (two round trips: the old baseline)",
    "append": "PostgresStore.append (fenced)",
    "append_free": "PostgresStore.append (no lease)",
    "append_rows": "PostgresStore.append_rows (fenced)",
}


async def _appends(entries: int, rounds: int = 20, *, flush: bool = True) -> dict[str, tuple[float, float, float]]:
    """Writer -> (appends/s, the median of its per-round ratios to the one-round-trip floor, the same to the
    insert-then-commit baseline), the five writers alternating every round. `flush=False`: every writer's
    session runs with `synchronous_commit=off`, so no commit waits for the WAL flush and the figures show
    the CPU each append costs (the regime a fast disk approaches)."""
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

    dsn = PG_DSN if flush else f"{PG_DSN}{'&' if '?' in PG_DSN else '?'}options=-c%20synchronous_commit%3Doff"
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(dsn, schema=schema, max_size=1)
    lease = await store.acquire("tether", current_owner(), 600)
    await store.load("tether")
    rows_lease = await store.acquire("rows", current_owner(), 600)
    await store.load("rows")
    ready = [entry(i) for i in range(entries * rounds)]  # building entries is the caller's work
    free = [entry(i) for i in range(entries * rounds)]  # (an append numbers and seals its entry in place)
    rows = number_entries("raw", 0, ready)  # and so is encoding them (a segment encodes as it stages)
    times: dict[str, list[float]] = {name: [] for name in APPEND_WRITERS}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn, \
            await psycopg.AsyncConnection.connect(dsn) as two_trips:
        for table in ("raw", "raw_commit"):
            await conn.execute(
                f'CREATE TABLE "{schema}".{table} (run_id text, seq bigint, json text, PRIMARY KEY (run_id, seq))'
            )
        insert = f'INSERT INTO "{schema}".raw (run_id, seq, json) VALUES (%s, %s, %s)'
        insert_then_commit = f'INSERT INTO "{schema}".raw_commit (run_id, seq, json) VALUES (%s, %s, %s)'
        for r in range(rounds):
            batch = range(r * entries, (r + 1) * entries)
            started = time.perf_counter()
            for i in batch:
                await store.append("tether", ready[i], lease)
            times["append"].append(time.perf_counter() - started)
            started = time.perf_counter()
            for i in batch:
                await store.append("free", free[i])
            times["append_free"].append(time.perf_counter() - started)
            started = time.perf_counter()
            for i in batch:
                await store.append_rows("rows", [rows[i]], rows_lease)
            times["append_rows"].append(time.perf_counter() - started)
            started = time.perf_counter()
            for i in batch:
                seq, text = rows[i]
                await conn.execute(insert, ("raw", seq, text))  # one statement, committed by the server
            times["raw"].append(time.perf_counter() - started)
            started = time.perf_counter()
            for i in batch:
                seq, text = rows[i]
                await two_trips.execute(insert_then_commit, ("raw", seq, text))  # BEGIN rides with it
                await two_trips.commit()
            times["raw_commit"].append(time.perf_counter() - started)
        await store.close()
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    n = entries * rounds

    def ratio(ts: list[float], ref: list[float]) -> float:
        return statistics.median(r / t for t, r in zip(ts, ref, strict=True))

    return {name: (n / sum(ts), ratio(ts, times["raw"]), ratio(ts, times["raw_commit"])) for name, ts in times.items()}


def _runs_table(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    for concurrency in args.concurrency if args.workers else ():
        out += [f"runs/s: fake model {LATENCY_S * 1000:.0f} ms per call, 2 calls per run, concurrency {concurrency} "
                f"per worker, {os.cpu_count()} CPUs, median of {args.repeat} interleaved measurements", "",
                "| workers | runs | runs/s | vs 1 worker |", "|---:|---:|---:|---:|"]
        rates: dict[int, list[float]] = {k: [] for k in args.workers}
        totals: dict[int, int] = {}
        for _ in range(args.repeat):  # interleaved, so a busy moment on a shared machine hits every K alike
            for k in args.workers:
                totals[k], rate = asyncio.run(_runs_per_second(k, concurrency, args.per_worker))
                rates[k].append(rate)
        base = statistics.median(rates[args.workers[0]])
        for k in args.workers:
            rate = statistics.median(rates[k])
            out.append(f"| {k} | {totals[k]} | {rate:,.1f} | {rate / base:.2f}x |")
        out.append("")
    return out


def _appends_table(entries: int, flush: bool = True) -> list[str]:
    figures = asyncio.run(_appends(entries, flush=flush))
    out = [f"appends/s, one entry per commit, same rows, {entries} at a time, the five writers alternating 20 "
           f"rounds (ratios: median of the rounds){'' if flush else ', synchronous_commit=off (no flush waited for)'}",
           "",
           "| writer | appends/s | vs the floor | vs INSERT + COMMIT |", "|---|---:|---:|---:|"]
    for key, label in APPEND_WRITERS.items():
        rate, floor, two_trips = figures[key]
        out.append(f"| {label} | {rate:,.0f} | {floor:.0%} | {two_trips:.0%} |")
    return [*out, ""]


def main() -> None:
    import queue_peers
    from run import machine

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--figures", nargs="*", default=["runs", "queues", "appends"],
                        choices=["runs", "queues", "appends"], help="which figures to measure (default: all)")
    parser.add_argument("--per-worker", type=int, default=40, help="runs queued per worker process")
    parser.add_argument("--concurrency", type=int, nargs="*", default=[2, 4], help="runs each worker drives at once")
    parser.add_argument("--appends", type=int, default=150, help="appends per round (20 rounds)")
    parser.add_argument("--no-flush", action="store_true",
                        help="appends: synchronous_commit=off for every writer (the CPU per append, no flush wait)")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4, 8])
    parser.add_argument("--repeat", type=int, default=3, help="measurements per point (the median is shown)")
    parser.add_argument("--queue-per-worker", type=int, default=50, help="beside DBOS: runs queued per worker")
    parser.add_argument("--queue-concurrency", type=int, default=4, help="beside DBOS: runs per worker at once")
    parser.add_argument("--dbos-poll", type=float, default=0.1, help="DBOS queue polling interval, s")
    parser.add_argument("--settle", type=float, default=10.5,
                        help="s an idle pool waits before the window opens (0: no xacts/run column)")
    parser.add_argument("--latency-samples", type=int, default=60, help="enqueue-to-start samples per system")
    parser.add_argument("--latency-workers", type=int, default=4, help="the idle pool's size for enqueue-to-start")
    parser.add_argument("--out", help="also write the tables (Markdown) to this file")
    args = parser.parse_args()

    header = [f"# tether workers ({time.strftime('%Y-%m-%d')})", "", *machine(), ""]
    print("\n".join(header), flush=True)
    out = list(header)
    if "runs" in args.figures:
        lines = _runs_table(args)
        print("\n".join(lines), flush=True)
        out += lines
    if "queues" in args.figures:
        workflows = {wf.name: wf for wf in (bench_empty, bench_step, bench_agent, bench_stamp)}
        out += queue_peers.compare(workflows, args.workers, args.queue_per_worker, args.queue_concurrency,
                                   args.dbos_poll, args.settle, args.latency_samples, args.latency_workers)
    if "appends" in args.figures:
        lines = _appends_table(args.appends, flush=not args.no_flush)
        print("\n".join(lines), flush=True)
        out += lines
    if args.out:
        Path(args.out).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
