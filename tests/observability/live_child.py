"""Runs a six-agent workflow under `tether.progress` in a terminal (the pty test drives it in tmux).

An orchestrator spawns six children in one turn; the agent cap admits five (six agents in all) and
refuses the sixth. Each child streams three priced turns with latency, so the run reaches its USD
ceiling while they work. Usage: live_child.py STORE_URL
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=20.0, output=100.0)  # USD per million tokens
BUDGET_USD = 0.40


@tether.tool(parallel_safe=True)
def note(text: str) -> str:
    """Write a note down."""
    return f"noted: {text}"


def script(request: ChatRequest) -> Reply:
    tools = {t.name for t in request.tools}
    results = sum(m.role == "tool" for m in request.messages)
    if "spawn_agent" in tools:
        if results == 0:
            calls = [ToolCall("spawn_agent", {"goal": f"survey region {i}", "tools": ["note"]}) for i in range(6)]
            return Reply(tool_calls=calls, input_tokens=100, output_tokens=120)
        return Reply(text="all regions surveyed", input_tokens=100, output_tokens=50)
    if results < 2:
        return Reply(text="working on it. " * 8, tool_calls=[ToolCall("note", {"text": f"step {results}"})],
                     input_tokens=100, output_tokens=400, chunks=16, latency_s=1.6)
    return Reply(text="region done. " * 10, input_tokens=100, output_tokens=400, chunks=16, latency_s=1.6)


@tether.workflow(name="survey")
async def survey(ctx: tether.Ctx) -> Any:
    return await ctx.orchestrate("survey every region", tools=[note], label="surveyor")


async def main(store: str) -> None:
    model = tether.models.fake("fake", script=script, prices={"m": PRICE}, max_output_tokens=600)
    engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=store)
    containment = tether.Containment(max_agents=6, max_concurrent=6, max_depth=2)
    handle = engine.start(survey, run_id="live", budget_usd=BUDGET_USD, containment=containment)
    outcome = await tether.progress(handle)
    await engine.close()
    print(f"OUTCOME {outcome.status} {outcome.cost.total_usd:.6f}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
