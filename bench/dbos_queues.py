"""DBOS queues, the reference for `bench/workers.py`: the same three workflows served by DBOS worker processes.

Run as a script it is one DBOS worker process (`python dbos_queues.py URL SCHEMA CONCURRENCY POLL_S`): it
registers the three workflows and the queue `bench`, launches DBOS on the PostgreSQL system database
`URL` (schema `SCHEMA`), prints `ready`, then one `done` line per finished workflow body, until SIGTERM.
The bench process enqueues with `DBOSClient` and reads results from the same database.

The workflows match tether's in `bench/workers.py`: `empty` (no steps), `step` (one `@DBOS.step`) and
`agent` (one step that awaits a fake model answering after 10 ms), plus `stamp` for enqueue-to-start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any

APP = "bench"
QUEUE = "bench"
STAGING = "staging"
MODEL_LATENCY_S = 0.01


def _config(url: str, schema: str, executor: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"name": APP, "system_database_url": url, "dbos_system_schema": schema,
                              "log_level": "ERROR"}
    if executor is not None:
        config["executor_id"] = executor
    return config


def serve(url: str, schema: str, concurrency: int, poll_s: float) -> None:
    """One DBOS worker process: serve the queue until SIGTERM."""
    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.ERROR)
    DBOS(config=_config(url, schema, executor=f"bench-{os.getpid()}"))  # type: ignore[arg-type]

    def done(name: str) -> None:
        print(f"done {name}", flush=True)

    @DBOS.step()
    async def one() -> int:
        return 1

    @DBOS.step()
    async def model(prompt: str) -> str:
        await asyncio.sleep(MODEL_LATENCY_S)  # the fake model's answer
        return f"{prompt}: ok"

    @DBOS.workflow(name="empty")
    async def empty(i: int) -> int:
        done("empty")
        return i

    @DBOS.workflow(name="step")
    async def step(i: int) -> int:
        value = await one()
        done("step")
        return value

    @DBOS.workflow(name="agent")
    async def agent(i: int) -> str:
        answer = await model(f"hello {i}")
        done("agent")
        return answer

    @DBOS.workflow(name="stamp")
    async def stamp(i: int) -> float:
        started = time.time()
        done("stamp")
        return started

    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=poll_s)
    time.sleep(1.2)  # the queue manager starts a queue's thread within a second of its registration
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    print("ready", flush=True)
    while not stop:
        time.sleep(0.05)
    DBOS.destroy()


def client(url: str, schema: str) -> Any:
    """A `DBOSClient` on the bench's system database."""
    from dbos import DBOSClient

    return DBOSClient(system_database_url=url, dbos_system_schema=schema, application_name=APP)


def enqueue(dbos_client: Any, workflow: str, i: int, queue: str = STAGING) -> Any:
    return dbos_client.enqueue({"queue_name": queue, "workflow_name": workflow, "workflow_id": f"{workflow}-{i}"}, i)


def create_schema(url: str, schema: str) -> None:
    """Launch DBOS once in this process so the system tables exist before any worker or client starts."""
    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.ERROR)
    DBOS(config=_config(url, schema))  # type: ignore[arg-type]
    DBOS.launch()
    DBOS.destroy(destroy_registry=True)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
