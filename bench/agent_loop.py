"""Per-invocation engine overhead of a one-turn agent on a zero-latency fake model.

tether journals every invocation on SQLite (two entries + a checkpoint blob); pydantic-ai's
`Agent` with its `TestModel` journals nothing. Both run here, on this machine, in this process.
Run: .venv/bin/python bench/agent_loop.py
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import warnings

import tether
from tether.testing import Reply

N = 500


async def bench_tether(store: str) -> float:
    model = tether.models.fake("fake", script=lambda req: Reply(text="ok", input_tokens=5, output_tokens=1))
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store)

    @tether.workflow(name="many")
    async def many(ctx: tether.Ctx, n: int) -> int:
        for i in range(n):
            await ctx.agent(f"task {i}")
        return n

    start = time.perf_counter()
    out = await engine.run(many, {"n": N}, run_id="bench")
    elapsed = time.perf_counter() - start
    assert out.status == "ok" and model.calls == N
    await engine.close()
    return elapsed / N


async def bench_pydantic_ai() -> float:
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    agent = Agent(TestModel(custom_output_text="ok"))
    start = time.perf_counter()
    for i in range(N):
        await agent.run(f"task {i}")
    return (time.perf_counter() - start) / N


async def main() -> None:
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = await bench_tether(f"sqlite:///{tmp}/bench.db")
    memory = await bench_tether("memory://")
    try:
        pai = await bench_pydantic_ai()
    except ImportError:
        pai = float("nan")
    print(f"one-turn agent, {N} sequential invocations, zero-latency model")
    print(f"  tether (sqlite journal)  {sqlite * 1e6:9.1f} us/invocation")
    print(f"  tether (memory journal)  {memory * 1e6:9.1f} us/invocation")
    print(f"  pydantic_ai Agent+TestModel {pai * 1e6:6.1f} us/invocation (no journal)")
    print(f"  ratio tether-sqlite / pydantic-ai: {sqlite / pai:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
