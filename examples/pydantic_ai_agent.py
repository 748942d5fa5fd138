"""A pydantic-ai agent, unchanged, inside a tether workflow: durable, under a USD ceiling, in the agent tree.

The agent has two tools and a pydantic output; one tool delegates to a second agent. Everything runs on
tether's scripted fake model (no network, no keys): a first run, a resume that pays nothing, and the same
workflow under a ceiling too small for it, stopped before the request that would pass it.

Run: .venv/bin/python examples/pydantic_ai_agent.py   (needs `pip install 'tether[pydantic-ai]'`)
"""

from __future__ import annotations

import asyncio
import tempfile

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext

import tether
from tether.contracts.messages import ChatRequest
from tether.integrations import pydantic_ai as tpai
from tether.testing import Reply, ToolCall


class Trip(BaseModel):
    city: str
    temp_c: float
    advice: str


# -- the pydantic-ai code, as it was written for pydantic-ai --------------------------------------------------
packer = tpai.durable(Agent(None, name="packer", instructions="You advise what to pack."))
planner: Agent[None, Trip] = Agent(
    None, output_type=Trip, name="planner", instructions="Plan the trip: city, weather, packing."
)


@planner.tool_plain
def find_city(name: str) -> str:
    """The canonical name of a city."""
    return name.title()


@planner.tool
async def weather(ctx: RunContext[None], city: str) -> float:
    """Today's temperature in a city, in Celsius."""
    return 21.5


@planner.tool
async def packing_advice(ctx: RunContext[None], temp_c: float) -> str:
    """Ask the packing expert."""
    answer = await packer.run(f"What to pack at {temp_c} C?", usage=ctx.usage)  # a sub-agent: joins the tree
    return answer.output


# -- the tether side -------------------------------------------------------------------------------------------
def provider(request: ChatRequest) -> Reply:
    """The scripted model: the planner's four steps, and the packer's one answer."""
    if "packing" not in " ".join(t.name for t in request.tools):
        return Reply(text="A light jacket.", input_tokens=300, output_tokens=40)
    done = sum(len(m.parts) for m in request.messages if m.role == "tool")
    steps = [ToolCall("find_city", {"name": "lisbon"}), ToolCall("weather", {"city": "Lisbon"}),
             ToolCall("packing_advice", {"temp_c": 21.5}),
             ToolCall("final_result", {"city": "Lisbon", "temp_c": 21.5, "advice": "A light jacket."})]
    return Reply(tool_calls=[steps[done]], input_tokens=400, output_tokens=40)


@tether.workflow(name="trip")
async def trip(ctx: tether.Ctx, destination: str) -> dict[str, object]:
    plan = await tpai.run(ctx, planner, f"Plan a day in {destination}.")
    return plan.output.model_dump()


async def main() -> None:
    model = tether.models.fake("fake", script=provider, prices={"m": tether.Price(input=3.0, output=15.0)},
                               output_floor=64)
    with tempfile.TemporaryDirectory() as tmp:
        engine = tether.Engine(models=[model], routing={"loop": "fake:m"}, store=f"sqlite:///{tmp}/t.db")
        first = await engine.run(trip, {"destination": "lisbon"}, run_id="trip-1", budget_usd=0.05)
        print("first run:", first.status, first.value, f"{first.cost.total_usd:.4f} USD,", model.calls, "calls")
        for node in (await engine.agent_tree("trip-1")).agents:
            parent = f"child of #{node.parent_agent_id}" if node.parent_agent_id else "started by the workflow"
            print(f"  agent #{node.agent_id} {node.label}: {node.provider_calls} calls, {node.tokens} tokens, "
                  f"{node.cost_usd:.4f} USD ({parent})")
        calls = model.calls
        again = await engine.resume("trip-1", trip, {"destination": "lisbon"})
        print("resume:", again.status, "hits", again.replay.hits, "new calls", model.calls - calls)

        calls = model.calls
        tight = await engine.run(trip, {"destination": "lisbon"}, run_id="trip-2", budget_usd=0.005)
        why = str(tight.error).split("): ")[0] + ")"  # e.g. "... stopped (output-floor, stage loop)"
        print("under a 0.005 USD ceiling:", tight.status, f"after {model.calls - calls} calls and "
              f"{tight.cost.total_usd:.4f} USD; the next request was refused before it left: {why}")
        await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
