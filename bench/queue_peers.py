"""tether workers beside DBOS queues on the same PostgreSQL and box: runs/s, commits per run, enqueue-to-start.

Both systems run in one throwaway database (`tether_bench_workers` on the server of `TETHER_BENCH_PG`), a
fresh schema per measurement, K worker processes each driving up to C runs at once. Every measurement:
N runs are queued on a queue nobody serves, the K workers start and report ready, then one statement
moves the runs to the served queue and the clock runs until the last run's body has finished (each
worker prints a line per run: tether's log line, DBOS's `done`). Then the workers stop.

Counted per run, over the database alone (other databases on the server do not count):
- **commits**: write transactions committed, read exactly from the WAL between the release and the
  workers' exit (`pg_walinspect`: each COMMIT record whose transaction wrote a block of this database);
- **xacts**: `pg_stat_database.xact_commit` for the same window, every transaction including read-only
  ones (polls, claims that found nothing). Backends report it up to 10 s late, so the workers first idle
  for `settle_s` (their start-up transactions are reported before the window opens) and the window
  closes once they have exited (a backend reports all at exit); what remains is at most the last second
  of idle polling before the release. The bench's own statements are subtracted from both.

Enqueue-to-start: on an idle pool, one run at a time, from the call to enqueue until its body starts.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent
ADMIN_DSN = os.environ.get("TETHER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
BENCH_DB = "tether_bench_workers"
WORKFLOWS = {"empty": "bench_empty", "step": "bench_step", "agent": "bench_agent"}  # DBOS name -> tether name
LABELS = {"empty": "empty workflow", "step": "one step", "agent": "one-turn agent (10 ms model)"}


# -- the database and its counters ---------------------------------------------------------------
class Database:
    """The bench's own database on the server: created for the run, dropped after it."""

    def __init__(self, admin_dsn: str = ADMIN_DSN, name: str = BENCH_DB) -> None:
        self.admin = admin_dsn
        self.name = name
        self.dsn = urlunsplit(urlsplit(admin_dsn)._replace(path=f"/{name}"))
        self.oid = 0

    def __enter__(self) -> Database:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.name}"')
            row = conn.execute("SELECT oid FROM pg_database WHERE datname = %s", (self.name,)).fetchone()
            assert row is not None
            self.oid = int(row[0])
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        return self

    def __exit__(self, *exc: object) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def counters(self) -> tuple[int, str]:
        """(xact_commit of the database, the WAL flush position), read from another database."""
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as conn:
            row = conn.execute(
                "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = %s), pg_current_wal_flush_lsn()",
                (self.name,),
            ).fetchone()
        assert row is not None
        return int(row[0]), str(row[1])

    def write_commits(self, start: str, end: str) -> int:
        """Transactions committed between two WAL positions that wrote a block of this database."""
        import psycopg

        sql = """SELECT count(*) FROM (
                   SELECT xid FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn) WHERE xid::text <> '0'
                   GROUP BY xid
                   HAVING bool_or(resource_manager = 'Transaction' AND record_type LIKE 'COMMIT%%')
                      AND bool_or(block_ref LIKE %s)) t"""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(sql, (start, end, f"%rel %/{self.oid}/%")).fetchone()
        return int(row[0]) if row else 0

    def drop_schema(self, schema: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- worker processes ------------------------------------------------------------------------------
class Pool:
    """K worker processes; counts the lines that say a run finished, with the time of the last one."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], k: int, ready: str, done: Callable[[str], bool]):
        self.argv, self.env, self.k, self.ready, self.is_done = list(argv), env, k, ready, done
        self.procs: list[subprocess.Popen[str]] = []
        self.done = 0
        self.last = 0.0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def __enter__(self) -> Pool:
        self.procs = [subprocess.Popen(self.argv, cwd=HERE, env=self.env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True) for _ in range(self.k)]
        try:
            for p in self.procs:
                self._await_ready(p)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _await_ready(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            if self.ready in line:
                threading.Thread(target=self._count, args=(proc,), daemon=True).start()
                return
            seen.append(line)
        tail = "".join(seen[-5:]).strip()
        raise RuntimeError(f"a worker exited {proc.wait()} before it was ready ({' '.join(self.argv)}): {tail}")

    def _count(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if self.is_done(line):
                with self._changed:
                    self.done += 1
                    self.last = time.perf_counter()
                    self._changed.notify_all()

    def wait_done(self, n: int, timeout: float = 600.0) -> float:
        """Block until `n` runs have finished; the moment the last of them did."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.done >= n, timeout):
                raise RuntimeError(f"only {self.done} of {n} runs finished within {timeout:g} s")
            return self.last

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def tether_pool(url: str, k: int, concurrency: int) -> Pool:
    src = HERE.parent / "src"
    env = {**os.environ, "BENCH_STORE": url, "PYTHONPATH": f"{src}{os.pathsep}{HERE}"}
    argv = [sys.executable, "-c", "from tether.cli.main import main; main()", "worker", "--app", "workers:engine",
            "--queue", "bench", "--concurrency", str(concurrency), "--poll", "0.5"]
    return Pool(argv, env, k, " ready: ", lambda line: line.startswith("run ") and ": ok in " in line)


def dbos_pool(dsn: str, schema: str, k: int, concurrency: int, poll_s: float) -> Pool:
    argv = [sys.executable, str(HERE / "dbos_queues.py"), dsn, schema, str(concurrency), str(poll_s)]
    return Pool(argv, dict(os.environ), k, "ready", lambda line: line.startswith("done "))


# -- one measurement ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One system, workflow and pool size: N runs in `seconds`, with the database's counts."""

    system: str
    workflow: str
    workers: int
    runs: int
    seconds: float
    commits: int
    xacts: int | None

    @property
    def rate(self) -> float:
        return self.runs / self.seconds

    @property
    def commits_per_run(self) -> float:
        return self.commits / self.runs

    @property
    def xacts_per_run(self) -> float | None:
        return None if self.xacts is None else self.xacts / self.runs


def _window(db: Database, pool: Pool, n: int, release: list[tuple[str, tuple[Any, ...]]], settle_s: float,
            finished: str | None) -> tuple[float, int, int | None]:
    """Release the queued runs, wait for all, stop the pool: (seconds, write commits, transactions)."""
    import psycopg

    time.sleep(settle_s)
    xacts0, lsn0 = db.counters()
    own = 0  # this function's own transactions in the database, subtracted below
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        started = time.perf_counter()
        with conn.transaction():
            for sql, params in release:
                conn.execute(sql, params)
        own += 1
        last = pool.wait_done(n)
        while finished is not None:  # DBOS records a run's result just after its body returns
            own += 1
            row = conn.execute(finished).fetchone()
            if row is not None and row[0] >= n:
                break
            time.sleep(0.01)
    pool.stop()
    time.sleep(0.5)  # the workers' backends report their counts as they exit
    xacts1, lsn1 = db.counters()
    commits = db.write_commits(lsn0, lsn1) - 1  # the release
    return last - started, commits, (xacts1 - xacts0 - own) if settle_s > 0 else None


def tether_point(db: Database, wf: Any, k: int, n: int, concurrency: int, settle_s: float) -> Point:
    """`wf`: the tether workflow (from bench/workers.py, the workers' app) of one of `WORKFLOWS`."""
    import tether
    from tether.stores.postgres_sql import notify_channel

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    url = f"{db.dsn}?schema={schema}"
    workflow = next(k for k, name in WORKFLOWS.items() if name == wf.name)

    async def put() -> None:
        client = tether.Engine(store=url, workflows=[wf])
        sem = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            async with sem:
                await client.enqueue(wf, {"i": i}, run_id=f"r{i:05d}", queue="staging")

        await asyncio.gather(*(one(i) for i in range(n)))
        await client.close()

    asyncio.run(put())
    release = [(f'UPDATE "{schema}".queue SET queue = %s WHERE queue = %s', ("bench", "staging")),
               ("SELECT pg_notify(%s, %s)", (notify_channel(schema), "q:bench"))]
    with tether_pool(url, k, concurrency) as pool:
        seconds, commits, xacts = _window(db, pool, n, release, settle_s, None)
    db.drop_schema(schema)
    return Point("tether", workflow, k, n, seconds, commits, xacts)


def dbos_point(db: Database, workflow: str, k: int, n: int, concurrency: int, poll_s: float,
               settle_s: float) -> Point:
    import dbos_queues

    schema = f"dbos_{uuid.uuid4().hex[:12]}"
    _create_dbos_schema(db.dsn, schema)
    client = dbos_queues.client(db.dsn, schema)
    for i in range(n):
        dbos_queues.enqueue(client, workflow, i)
    client.destroy()
    release = [(f'UPDATE "{schema}".workflow_status SET queue_name = %s WHERE queue_name = %s',
                (dbos_queues.QUEUE, dbos_queues.STAGING))]
    finished = f"SELECT count(*) FROM \"{schema}\".workflow_status WHERE status = 'SUCCESS'"
    with dbos_pool(db.dsn, schema, k, concurrency, poll_s) as pool:
        seconds, commits, xacts = _window(db, pool, n, release, settle_s, finished)
    db.drop_schema(schema)
    return Point(f"DBOS (poll {poll_s:g} s)", workflow, k, n, seconds, commits, xacts)


def _create_dbos_schema(dsn: str, schema: str) -> None:
    """DBOS creates its system tables on launch; do it once in a child process (DBOS is a per-process singleton)."""
    code = "import sys, dbos_queues; dbos_queues.create_schema(sys.argv[1], sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, dsn, schema], cwd=HERE, check=True, capture_output=True, timeout=120)


# -- enqueue-to-start on an idle pool --------------------------------------------------------------------
def tether_latency(db: Database, stamp: Any, k: int, samples: int, concurrency: int) -> list[float]:
    import tether

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    url = f"{db.dsn}?schema={schema}"

    async def measure(pool: Pool) -> list[float]:
        client = tether.Engine(store=url, workflows=[stamp])
        await client.store()  # connected before the first sample (DBOS's client is too): not an enqueue's cost
        await asyncio.sleep(1.0)
        delays = []
        for i in range(samples):
            sent = time.time()
            run_id = await client.enqueue(stamp, {"i": i}, run_id=f"s{i:04d}", queue="bench")
            outcome = await client.wait(run_id, timeout=30)
            delays.append(float(outcome.value) - sent)
            await asyncio.sleep(random.uniform(0.0, 0.05))
        await client.close()
        return delays

    with tether_pool(url, k, concurrency) as pool:
        delays = asyncio.run(measure(pool))
    db.drop_schema(schema)
    return delays


def dbos_latency(db: Database, k: int, samples: int, concurrency: int, poll_s: float) -> list[float]:
    import dbos_queues

    schema = f"dbos_{uuid.uuid4().hex[:12]}"
    _create_dbos_schema(db.dsn, schema)
    client = dbos_queues.client(db.dsn, schema)
    sent: list[float] = []
    handles = []
    with dbos_pool(db.dsn, schema, k, concurrency, poll_s) as pool:
        time.sleep(1.0)
        for i in range(samples):
            sent.append(time.time())
            handles.append(dbos_queues.enqueue(client, "stamp", i, queue=dbos_queues.QUEUE))
            pool.wait_done(i + 1, timeout=30)
            time.sleep(random.uniform(0.0, 0.05))
        started = [float(h.get_result()) for h in handles]
    client.destroy()
    db.drop_schema(schema)
    return [s - t for s, t in zip(started, sent, strict=True)]


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- the tables --------------------------------------------------------------------------------------
def _f(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:,.{digits}f}"


def throughput_table(points: list[Point], dbos_label: str) -> list[str]:
    lines = ["| workflow | workers | tether runs/s | DBOS runs/s | tether / DBOS | tether commits/run | "
             "DBOS commits/run | tether xacts/run | DBOS xacts/run |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(p.system, p.workflow, p.workers): p for p in points}
    for workflow in WORKFLOWS:
        for k in sorted({p.workers for p in points}):
            t, d = by.get(("tether", workflow, k)), by.get((dbos_label, workflow, k))
            if t is None or d is None:
                continue
            lines.append(f"| {LABELS[workflow]} | {k} | {_f(t.rate)} | {_f(d.rate)} | {t.rate / d.rate:.2f}x | "
                         f"{_f(t.commits_per_run, 2)} | {_f(d.commits_per_run, 2)} | {_f(t.xacts_per_run, 2)} | "
                         f"{_f(d.xacts_per_run, 2)} |")
    return lines


def latency_table(rows: list[tuple[str, list[float]]], k: int) -> list[str]:
    lines = [f"| enqueue-to-start, idle pool of {k} workers | p50 | p99 | max | samples |", "|---|---:|---:|---:|---:|"]
    for label, delays in rows:
        lines.append(f"| {label} | {statistics.median(delays) * 1000:,.1f} ms | "
                     f"{percentile(delays, 0.99) * 1000:,.1f} ms | {max(delays) * 1000:,.1f} ms | {len(delays)} |")
    return lines


def compare(tether_wfs: dict[str, Any], workers: Sequence[int], per_worker: int, concurrency: int,
            dbos_poll_s: float, settle_s: float, samples: int, latency_workers: int) -> list[str]:
    """Run the comparison and return its Markdown tables (printed as they are made). `tether_wfs`: the
    workers' app's workflows by name (`WORKFLOWS`' values and `bench_stamp`)."""
    out: list[str] = []

    def emit(lines: list[str]) -> None:
        out.extend(lines)
        print("\n".join(lines), flush=True)

    import importlib.util

    if importlib.util.find_spec("dbos") is None:  # as bench/run.py reports a peer that is not installed
        emit(["Queues beside DBOS: not installed (`pip install -e '.[bench]'`), so not measured", ""])
        return out
    label = f"DBOS (poll {dbos_poll_s:g} s)"
    with Database() as db:
        points: list[Point] = []
        for workflow, name in WORKFLOWS.items():
            for k in workers:
                n = k * per_worker
                points.append(tether_point(db, tether_wfs[name], k, n, concurrency, settle_s))
                points.append(dbos_point(db, workflow, k, n, concurrency, dbos_poll_s, settle_s))
                for p in points[-2:]:
                    print(f"  {p.system}, {p.workflow}, {k} workers: {p.rate:,.1f} runs/s, "
                          f"{p.commits_per_run:.2f} commits/run, {_f(p.xacts_per_run, 2)} xacts/run",
                          file=sys.stderr, flush=True)
        emit([f"Queues: tether workers and DBOS queues, {per_worker} runs per worker process, concurrency "
              f"{concurrency} per process, DBOS queue polling every {dbos_poll_s:g} s (tether: notifications, "
              f"polling every 0.5 s as the fallback), {os.cpu_count()} CPUs, one measurement per row", ""])
        emit([*throughput_table(points, label), ""])
        if samples:
            stamp = tether_wfs["bench_stamp"]
            rows = [("tether (NOTIFY wake-ups)", tether_latency(db, stamp, latency_workers, samples, concurrency))]
            for poll in sorted({dbos_poll_s, 1.0}):
                name = f"DBOS, queue polling every {poll:g} s" + (" (its default)" if poll == 1.0 else "")
                rows.append((name, dbos_latency(db, latency_workers, samples, concurrency, poll)))
            emit([*latency_table(rows, latency_workers), ""])
    return out
