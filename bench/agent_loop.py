"""Agent-loop figures: a one-turn agent, many concurrent agents, and a long agent's cost per turn.

tether journals every invocation on SQLite (running entry, dispatch record, budget draw, terminal, and
a checkpoint per tool turn); pydantic-ai's `Agent` journals nothing. Each figure is one function that
returns plain numbers; `bench/run.py` runs each in a fresh process and prints them side by side.

Run alone: `python bench/agent_loop.py` (the one-turn figure).
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
import time
import warnings
from typing import Any

import tether
from tether.testing import Reply, ToolCall

ONE_TURN_N = 500
LONG_RUNS = 8
"""The one-turn figure's long form: this many runs of `ONE_TURN_N` agents, one after another, on one store."""
LATENCY_S = 0.01
HUGE_CONCURRENCY = 10_000
"""The 100,000-agent figure's bound on agent invocations running at once (`Engine(concurrency=...)`), and on
its `ctx.parallel`'s branches running at once (`ctx.parallel(..., concurrency=...)`)."""


def _quiet() -> None:
    warnings.simplefilter("ignore")


def _fake(latency_s: float = 0.0) -> Any:
    reply = Reply(text="ok", input_tokens=5, output_tokens=1, latency_s=latency_s)
    return tether.models.fake("fake", script=lambda req: reply)


async def _tether_sequential(store: str, n: int, runs: int = 1) -> float:
    """Seconds per invocation of `n` sequential one-turn agents in each of `runs` runs on one store."""
    model = _fake()
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store)

    @tether.workflow(name="many")
    async def many(ctx: tether.Ctx, n: int) -> int:
        for i in range(n):
            await ctx.agent(f"task {i}")
        return n

    await engine.run(many, {"n": 20}, run_id="warm")
    start = time.perf_counter()
    for r in range(runs):
        out = await engine.run(many, {"n": n}, run_id=f"bench-{r}")
        assert out.status == "ok"
    elapsed = time.perf_counter() - start
    assert model.calls == n * runs + 20
    await engine.close()
    return elapsed / (n * runs)


async def _pydantic_ai_sequential(kind: str, n: int) -> float:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.test import TestModel

    if kind == "test":
        agent: Agent[None, str] = Agent(TestModel(custom_output_text="ok"))
    else:

        def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[TextPart("ok")])

        agent = Agent(FunctionModel(reply))
    for i in range(20):
        await agent.run(f"warm {i}")
    start = time.perf_counter()
    for i in range(n):
        await agent.run(f"task {i}")
    return (time.perf_counter() - start) / n


def one_turn(n: int = ONE_TURN_N, rounds: int = 3) -> dict[str, float]:
    """us per one-turn invocation: tether (SQLite, memory) and pydantic-ai (TestModel, FunctionModel).

    The systems alternate for `rounds` rounds and each keeps its best round, so a burst of load on a
    shared machine skews no single system; `median_ratio_test` is the median over the rounds of the
    SQLite figure's ratio to TestModel's in the same round. `tether_sqlite_long_us` is the same agent over
    `LONG_RUNS` runs on one SQLite file, once: several of the store's WAL checkpoint rounds fall in it.
    """
    _quiet()
    best: dict[str, float] = {}
    ratios: list[float] = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = asyncio.run(_tether_sequential(f"sqlite:///{tmp}/bench.db", n))
        figures = {
            "tether_sqlite_us": sqlite * 1e6,
            "tether_memory_us": asyncio.run(_tether_sequential("memory://", n)) * 1e6,
            "pydantic_ai_test_us": asyncio.run(_pydantic_ai_sequential("test", n)) * 1e6,
            "pydantic_ai_function_us": asyncio.run(_pydantic_ai_sequential("function", n)) * 1e6,
        }
        for k, v in figures.items():
            best[k] = min(best.get(k, v), v)
        ratios.append(figures["tether_sqlite_us"] / figures["pydantic_ai_test_us"])
    ratios.sort()
    with tempfile.TemporaryDirectory() as tmp:  # long enough that the WAL's checkpoint rounds amortize
        long = asyncio.run(_tether_sequential(f"sqlite:///{tmp}/long.db", n, runs=LONG_RUNS))
    return {**best, "median_ratio_test": ratios[len(ratios) // 2], "tether_sqlite_long_us": long * 1e6,
            "long_runs": LONG_RUNS}


class LatencyModel:
    """A one-reply adapter with a fixed latency. Unlike the scripted fake (which records every request
    for tests to assert on) it keeps nothing, as a real adapter keeps nothing, and as pydantic-ai's
    FunctionModel keeps nothing."""

    id = "lat"
    family = "lat"

    def __init__(self, latency_s: float) -> None:
        from tether.contracts.stream import ModelCaps

        self.latency_s = latency_s
        self._caps = ModelCaps()
        self.calls = 0

    def caps(self, model: str) -> Any:
        return self._caps

    async def stream(self, request: Any, signal: Any = None) -> Any:
        from tether.contracts.stream import Finish, TextDelta
        from tether.contracts.usage import Usage

        self.calls += 1
        await asyncio.sleep(self.latency_s)
        yield TextDelta(text="ok")
        yield Finish(reason="stop", usage=Usage(input_tokens=5, output_tokens=1))


def concurrent_tether(
    n: int, latency_s: float = LATENCY_S, concurrency: int | None = None, branches: int | None = None,
) -> dict[str, float]:
    """Wall seconds for `n` one-turn agents in one run's `ctx.parallel` (fake latency), on SQLite; all of
    them at once unless `concurrency` bounds the engine's agent invocations running at once. `branches` bounds
    the `ctx.parallel` itself (`concurrency=`): its branch tasks are started only as it admits them."""
    _quiet()
    model = LatencyModel(latency_s)

    async def main(tmp: str) -> float:
        engine = tether.Engine(models=[model], routing={"loop": "lat:m"}, store=f"sqlite:///{tmp}/c.db",
                               concurrency=concurrency or n, max_spawns=n)

        @tether.workflow(name="fan")
        async def fan(ctx: tether.Ctx, n: int) -> int:
            async def one(i: int) -> Any:
                return await ctx.agent(f"task {i}")

            done = await ctx.parallel([functools.partial(one, i) for i in range(n)], concurrency=branches)
            return len(done)

        # warm (as the peer's figure is): what a process pays once (the price table's import) is not per agent
        assert (await engine.run(fan, {"n": 1}, run_id="warm")).status == "ok"
        start, cpu = time.perf_counter(), time.process_time()
        out = await engine.run(fan, {"n": n}, run_id="fan")
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        assert out.status == "ok" and out.value == n, out
        await engine.close()
        return elapsed, cpu

    with tempfile.TemporaryDirectory() as tmp:
        wall, cpu = asyncio.run(main(tmp))
        return {"wall_s": wall, "cpu_s": cpu}


def concurrent_pydantic_ai(n: int, latency_s: float = LATENCY_S) -> dict[str, float]:
    """Wall seconds for `n` pydantic-ai `Agent.run` calls at once on a FunctionModel with the same latency."""
    _quiet()
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    async def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(latency_s)
        return ModelResponse(parts=[TextPart("ok")])

    agent: Agent[None, str] = Agent(FunctionModel(reply))

    async def main() -> float:
        await agent.run("warm")  # warm, as tether's figure is
        start = time.perf_counter()
        done = await asyncio.gather(*(agent.run(f"task {i}") for i in range(n)))
        elapsed = time.perf_counter() - start
        assert len(done) == n
        return elapsed

    return {"wall_s": asyncio.run(main())}


def long_agent(turns: int, rounds: int = 2) -> dict[str, float]:
    """ms per turn of one agent that calls a tool on every turn for `turns` turns, then answers (SQLite)."""
    _quiet()

    def script(request: Any) -> Reply:
        done = sum(1 for m in request.messages if m.role == "tool")
        if done < turns - 1:
            return Reply(tool_calls=[ToolCall("note", {"i": done})], text=f"turn {done}: " + "x" * 200,
                         input_tokens=100, output_tokens=50)
        return Reply(text="done", input_tokens=100, output_tokens=5)

    @tether.tool
    def note(i: int) -> str:
        """Write a note."""
        return f"note {i}: " + "y" * 200

    async def main(tmp: str, run: int) -> float:
        model = tether.models.fake("fake", script=script)
        engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp}/long.db")

        @tether.workflow(name="long")
        async def long(ctx: tether.Ctx) -> Any:
            return await ctx.agent("work", tools=[note], max_turns=turns + 1)

        start = time.perf_counter()
        out = await engine.run(long, run_id=f"long-{run}")
        elapsed = time.perf_counter() - start
        assert out.status == "ok" and model.calls == turns, (out, model.calls)
        await engine.close()
        return elapsed

    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(rounds):
            best = min(best, asyncio.run(main(tmp, run)))
    return {"ms_per_turn": best / turns * 1e3}


def checkpoint_read(turns: int) -> dict[str, float]:
    """ms to read back (head, then every chunk) the checkpoint of an agent `turns` tool turns long, on SQLite."""
    from tether.agents.state import LoopState
    from tether.budget.tally import Tally
    from tether.contracts.messages import Message
    from tether.engine.loop_host import CheckpointChain, read_checkpoint
    from tether.stores.sqlite import SqliteStore

    async def main(tmp: str) -> float:
        store = SqliteStore(f"{tmp}/ck.db")
        chain, state = CheckpointChain("r/checkpoints/1"), LoopState.start("work")
        for i in range(turns):
            state.messages += [Message.text("assistant", f"turn {i}: " + "x" * 200),
                               Message.text("user", f"note {i}: " + "y" * 200)]
            for key, data in chain.writes(state, Tally(through=i + 1)):
                await store.put_blob(key, data)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            back = await read_checkpoint(store, "r/checkpoints/1")
            best = min(best, time.perf_counter() - start)
            assert back is not None and len(back[0].messages) == 2 * turns + 1
        await store.close()
        return best

    with tempfile.TemporaryDirectory() as tmp:
        return {"ms": asyncio.run(main(tmp)) * 1e3}


if __name__ == "__main__":
    f = one_turn(rounds=1)
    for k, v in f.items():
        print(f"{k:<26} {v:9.1f}")
    print(f"ratio tether-sqlite / pydantic-ai TestModel: {f['tether_sqlite_us'] / f['pydantic_ai_test_us']:.2f}x")
