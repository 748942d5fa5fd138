"""Money foresight: forecast a run from past runs, gate a run on its forecast, and brake an agent that loops.

Run: .venv/bin/python examples/forecast_and_brakes.py
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from typing import Any

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

rng = random.Random(7)  # the stand-in model's answers vary from run to run, as a real model's do


@tether.tool
def search(query: str) -> str:
    """Search the notes."""
    return f"3 notes about {query}"


@tether.workflow(name="summarize")
async def summarize(ctx: tether.Ctx, topic: str) -> Any:
    return await ctx.agent(f"summarize the notes about {topic}", tools=[search])


def script(request: ChatRequest) -> Reply:
    turn = sum(1 for m in request.messages if m.role == "assistant")
    size = {"input_tokens": rng.randint(400, 900), "output_tokens": rng.randint(50, 300)}
    if "loop" in request.messages[0].text_content:  # a model stuck on one call
        return Reply(tool_calls=[ToolCall("search", {"query": "status"})], **size)
    if turn < rng.randint(2, 4):
        return Reply(tool_calls=[ToolCall("search", {"query": f"part {turn}"})], **size)
    return Reply(text="a summary", **size)


async def main() -> None:
    model = tether.models.fake("fake", script=script, prices={"m": tether.Price(input=3.0, output=15.0)})
    with tempfile.TemporaryDirectory() as tmp:
        engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp}/t.db")
        for i in range(12):
            await engine.run(summarize, {"topic": "tether"}, run_id=f"past-{i}")
        forecast = await engine.forecast(summarize, {"topic": "tether"})
        print("forecast:", forecast.summary())

        try:  # a ceiling below the P95: refused before anything is written
            await engine.run(summarize, {"topic": "tether"}, budget_usd=0.001, forecast_gate="refuse")
        except tether.ForecastRefusedError as exc:
            print("refused:", exc.data["p95_usd"], ">", exc.data["limit_usd"])

        looping = await engine.run(summarize, {"topic": "loop"}, budget_usd=5.0, max_identical_tool_calls=3)
        error = looping.error
        assert isinstance(error, tether.BudgetExhaustedError)
        print("braked:", error.data["reason"], error.data["evidence"], f"after {looping.cost.total_usd:.4f} USD")
        await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
