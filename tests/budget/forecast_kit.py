"""A stochastic workload for the forecast tests (and the app their CLI runs use): each run's agent makes a random number of tool turns of random size,
drawn from one seeded generator, so a run's cost follows a fixed distribution that no test tunes."""

from __future__ import annotations

import os
import random
from typing import Any

import tether
from tether.contracts.messages import ChatRequest
from tether.testing import Reply, ToolCall

PRICE = tether.Price(input=2.0, output=8.0)


@tether.tool
def lookup(q: int) -> str:
    """Look something up."""
    return f"found {q}"


@tether.workflow(name="research")
async def research(ctx: tether.Ctx, topic: str) -> Any:
    return await ctx.agent(f"research {topic}", tools=[lookup], est_cost=0.0)


def stochastic_model(seed: int) -> Any:
    """Per run: 3-5 tool turns then an answer; every turn 300-900 input and 40-400 output tokens."""
    rng = random.Random(seed)
    turns_left: dict[str, int] = {}

    def script(request: ChatRequest) -> Reply:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if turn == 0:
            turns_left["k"] = rng.randint(3, 5)
        size = {"input_tokens": rng.randint(300, 900), "output_tokens": rng.randint(40, 400)}
        if turn >= turns_left["k"]:
            return Reply(text="done", **size)
        return Reply(tool_calls=[ToolCall("lookup", {"q": turn})], **size)

    return tether.models.fake("fake", script=script, prices={"m": PRICE})


engine = tether.Engine(models=[stochastic_model(int(os.environ.get("FORECAST_SEED", "1")))], routing={"loop": "fake:m"},
                       workflows=[research],
                       store=os.environ.get("FORECAST_STORE", "memory://"))
"""The engine `tether estimate forecast_kit:research` and `tether resume --app forecast_kit:engine` use."""
