"""Durable-workflow peers: a one-step workflow on SQLite in tether, DBOS and LangGraph.

Each system runs `N` fresh workflow runs one after another, each with one journaled/checkpointed step,
on a SQLite file in a temporary directory. The figure is wall microseconds per run.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
import warnings
from typing import Any

N = 300


def tether_one_step(n: int = N) -> dict[str, float]:
    """us per `engine.run` of a workflow with one `ctx.step`, each a new run on SQLite."""
    import tether

    warnings.simplefilter("ignore")

    @tether.workflow(name="one")
    async def one(ctx: tether.Ctx, i: int) -> int:
        return int(await ctx.step("add", lambda: i + 1))

    async def main(tmp: str) -> float:
        engine = tether.Engine(store=f"sqlite:///{tmp}/t.db")
        for i in range(20):
            await engine.run(one, {"i": i}, run_id=f"warm-{i}")
        start = time.perf_counter()
        for i in range(n):
            out = await engine.run(one, {"i": i}, run_id=f"run-{i}")
            assert out.value == i + 1
        elapsed = time.perf_counter() - start
        await engine.close()
        return elapsed / n

    with tempfile.TemporaryDirectory() as tmp:
        return {"us": asyncio.run(main(tmp)) * 1e6}


def dbos_one_step(n: int = N) -> dict[str, Any]:
    """us per DBOS workflow with one `@DBOS.step`, on a SQLite system database."""
    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        DBOS(config={"name": "bench", "system_database_url": f"sqlite:///{tmp}/dbos.sqlite",
                     "run_admin_server": False})

        @DBOS.step()
        async def add(i: int) -> int:
            return i + 1

        @DBOS.workflow()
        async def one(i: int) -> int:
            return await add(i)

        async def main() -> float:
            DBOS.launch()
            for i in range(20):
                await one(i)
            start = time.perf_counter()
            for i in range(n):
                assert await one(i) == i + 1
            return (time.perf_counter() - start) / n

        try:
            per = asyncio.run(main())
        finally:
            DBOS.destroy(destroy_registry=True)
    return {"us": per * 1e6, "version": _version("dbos")}


def langgraph_one_node(n: int = N) -> dict[str, Any]:
    """us per LangGraph invocation of a one-node graph checkpointed by `SqliteSaver`, one thread per run."""
    import sqlite3
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        i: int

    def add(s: State) -> State:
        return {"i": s["i"] + 1}

    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(f"{tmp}/lg.db", check_same_thread=False)
        graph = StateGraph(State)
        graph.add_node("add", add)
        graph.add_edge(START, "add")
        graph.add_edge("add", END)
        app = graph.compile(checkpointer=SqliteSaver(conn))
        for i in range(20):
            app.invoke({"i": i}, {"configurable": {"thread_id": f"warm-{i}"}})
        start = time.perf_counter()
        for i in range(n):
            assert app.invoke({"i": i}, {"configurable": {"thread_id": f"run-{i}"}})["i"] == i + 1
        per = (time.perf_counter() - start) / n
        conn.close()
    return {"us": per * 1e6, "version": _version("langgraph")}


def _version(name: str) -> str:
    from importlib.metadata import version

    try:
        return version(name)
    except Exception:
        return "?"
